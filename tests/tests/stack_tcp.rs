//! Two stacks over the in-memory wire: TCP handshake, transfer, orderly close; UDP echo.

use std::time::Duration;

use zcnet_stack::tcp::{TcpBuffers, TcpSocket, TcpState};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::IpEndpoint;
use zcnet_tests::net::{pair, ADDR};
use zcnet_tests::wire::Faults;

#[test]
fn tcp_handshake_transfer_and_orderly_close() {
    let p = pair(Faults::default(), 256);
    let [a, b] = p.stacks;
    let server = p.exec.spawner().spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(16384, 16384)).unwrap();
        s.accept(7000).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"bye").await.unwrap();
        s.close();
        s.closed().await;
        got
    });
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let sent = data.clone();
    let reply = p.exec.block_on(async move {
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(16384, 16384)).unwrap();
        c.connect_timeout(
            IpEndpoint::new(ADDR[1].into(), 7000),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(c.state(), TcpState::Established);
        c.write_all(&sent).await.unwrap();
        c.shutdown();
        let mut reply = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            let n = c.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buf[..n]);
        }
        c.closed().await;
        reply
    });
    assert_eq!(reply, b"bye");
    let got = p.exec.block_on(server);
    assert_eq!(got.len(), data.len());
    assert!(got == data, "byte-exact");
    let s = a.stats();
    eprintln!("stack A: {s:?}");
    assert!(s.frames_out > 0 && s.frames_in > 0);
}

#[test]
fn udp_echo() {
    let p = pair(Faults::default(), 64);
    let [a, b] = p.stacks;
    let echo = p.exec.spawner().spawn(async move {
        let s = UdpSocket::bind(b, 5353, UdpBuffers::with_capacity(8, 4096)).unwrap();
        for _ in 0..10 {
            let mut buf = [0u8; 1500];
            let (n, from) = s.recv_from(&mut buf).await.unwrap();
            s.send_to(&buf[..n], from).await.unwrap();
        }
    });
    p.exec.block_on(async move {
        let c = UdpSocket::bind(a, 40000, UdpBuffers::with_capacity(8, 4096)).unwrap();
        for i in 0..10u8 {
            let msg = [i; 100];
            c.send_to(&msg, IpEndpoint::new(ADDR[1].into(), 5353))
                .await
                .unwrap();
            let mut buf = [0u8; 1500];
            let (n, from) = c.recv_from(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], &msg);
            assert_eq!(from, IpEndpoint::new(ADDR[1].into(), 5353));
        }
    });
    p.exec.block_on(echo);
}
