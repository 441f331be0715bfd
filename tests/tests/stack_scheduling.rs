//! The stack runs only when there is work: an idle stack makes zero polls, and a
//! request/response loop costs about one poll per packet.

use std::time::Duration;

use zcnet_executor::time::sleep;
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::{IpEndpoint, StackStats};
use zcnet_tests::net::{pair, ADDR};
use zcnet_tests::wire::Faults;

fn sum(s: [StackStats; 2]) -> (u64, u64) {
    let polls = s[0].polls() + s[1].polls();
    let frames = s[0].frames_in + s[0].frames_out + s[1].frames_in + s[1].frames_out;
    (polls, frames)
}

/// Two stacks with an established, idle TCP connection and no timers pending: over one second
/// in which another task keeps the executor busy, neither stack polls at all.
#[test]
fn an_idle_stack_makes_zero_polls_while_other_tasks_run() {
    let p = pair(Faults::default(), 64);
    let [a, b] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(4096, 4096)).unwrap();
        s.accept(7200).await.unwrap();
        let mut buf = [0u8; 16];
        let _ = s.read(&mut buf).await; // waits for data that never comes
    });
    let (before, after, ticks) = p.exec.block_on(async move {
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 4096)).unwrap();
        c.connect(IpEndpoint::new(ADDR[1].into(), 7200))
            .await
            .unwrap();
        // Let the handshake's last ACK and any delayed ACK go out.
        sleep(Duration::from_millis(200)).await;
        let before = [a.stats(), b.stats()];
        let mut ticks = 0;
        for _ in 0..100 {
            sleep(Duration::from_millis(10)).await; // the "other task": busy on its own timer
            ticks += 1;
        }
        let after = [a.stats(), b.stats()];
        drop(c);
        (before, after, ticks)
    });
    assert_eq!(ticks, 100, "the other task ran throughout");
    assert_eq!(
        sum(after).0 - sum(before).0,
        0,
        "polls while idle: before {before:?}, after {after:?}"
    );
    drop(server);
}

/// 1 KiB request / 1 KiB response, 500 times: polls (ingress + egress, both stacks) per packet
/// event (a frame sent or received, both stacks) stay at most 1.1.
#[test]
fn request_response_costs_at_most_one_point_one_polls_per_packet() {
    const REQUESTS: usize = 500;
    let p = pair(Faults::default(), 64);
    let [a, b] = p.stacks;
    let _server = p.exec.local_spawner().spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(8192, 8192)).unwrap();
        s.accept(7201).await.unwrap();
        s.set_nodelay(true);
        let mut buf = vec![0u8; 1024];
        loop {
            let mut got = 0;
            while got < buf.len() {
                match s.read(&mut buf[got..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got += n,
                }
            }
            s.write_all(&buf).await.unwrap();
        }
    });
    let (before, after) = p.exec.block_on(async move {
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(8192, 8192)).unwrap();
        c.connect(IpEndpoint::new(ADDR[1].into(), 7201))
            .await
            .unwrap();
        c.set_nodelay(true);
        sleep(Duration::from_millis(50)).await;
        let before = [a.stats(), b.stats()];
        let req = vec![7u8; 1024];
        let mut resp = vec![0u8; 1024];
        for _ in 0..REQUESTS {
            c.write_all(&req).await.unwrap();
            let mut got = 0;
            while got < resp.len() {
                got += c.read(&mut resp[got..]).await.unwrap();
            }
        }
        let after = [a.stats(), b.stats()];
        (before, after)
    });
    let (polls, frames) = (sum(after).0 - sum(before).0, sum(after).1 - sum(before).1);
    let per_packet = polls as f64 / frames as f64;
    let per_request = polls as f64 / REQUESTS as f64;
    eprintln!(
        "{REQUESTS} requests: {polls} polls, {frames} packet events; {per_request:.2} polls per \
         request, {per_packet:.3} polls per packet"
    );
    assert!(
        frames as usize >= 4 * REQUESTS,
        "each request and response crossed the wire"
    );
    assert!(per_packet <= 1.1, "{per_packet:.3} polls per packet");
}
