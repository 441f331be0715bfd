//! A [`TcpListener`] on a small socket table: when closing connections (TIME-WAIT orphans) take
//! every slot, the listener cannot re-arm; once those slots are freed it must re-arm and accept
//! again without anyone polling it for another reason.

use std::time::Duration;

use zcnet_executor::time::{sleep, timeout};
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpListener, TcpSocket};
use zcnet_stack::{DropReason, IpEndpoint, Stack};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_sized, ADDR};
use zcnet_tests::wire::Faults;

/// Socket slots per stack: room for the listener's backlog plus as many closing connections.
const SLOTS: usize = 8;
/// The listener's backlog.
const BACKLOG: usize = 4;
const PORT: u16 = 8080;

/// One `Connection: close` exchange: connect, send a request, read the answer to the server's
/// FIN, close. Returns the answer.
async fn exchange(a: Stack, i: usize) -> Vec<u8> {
    let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(256, 256)).unwrap();
    c.connect(IpEndpoint::new(ADDR[1].into(), PORT))
        .await
        .unwrap();
    c.write_all(format!("GET /{i}").as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        let n = c.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    c.close();
    c.closed().await;
    got
}

/// The server closes first (as an HTTP server answering `Connection: close` does), so each
/// connection it served sits in TIME-WAIT (10 s in smoltcp) as an orphan, holding a slot. With
/// 8 slots and a backlog of 4, eight sequential clients leave no slot for a listening socket.
/// After TIME-WAIT the orphans are reaped; the listener must be woken by that and re-arm, so a
/// new client is served at once, and a burst of clients waiting on full slots is served once
/// they expire.
#[test]
fn listener_rearms_when_time_wait_slots_are_freed() {
    let p = pair_sized::<SLOTS>(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        128,
        |_, _| {},
    );
    let [a, b] = p.stacks;
    let sp = p.exec.spawner();
    let server = sp.spawn(async move {
        let make = || Some(TcpBuffers::with_capacity(256, 256));
        let mut l = TcpListener::bind(b, PORT, BACKLOG, make).unwrap();
        loop {
            let mut s = l.accept().await;
            sp.spawn(async move {
                let mut buf = [0u8; 64];
                let n = s.read(&mut buf).await.unwrap();
                let mut answer = b"ok ".to_vec();
                answer.extend_from_slice(&buf[..n]);
                s.write_all(&answer).await.unwrap();
                s.close();
                // Dropped while closing: the stack finishes the close (TIME-WAIT) as an orphan.
            });
        }
    });

    let fill = |n: usize| {
        // Sequential clients: every connection served ends in TIME-WAIT on the server.
        for i in 0..n {
            let got = p.exec.block_on(async move {
                timeout(Duration::from_secs(5), exchange(a, i))
                    .await
                    .unwrap_or_else(|_| panic!("fill client {i} served, {:?}", b.stats()))
            });
            assert_eq!(got, format!("ok GET /{i}").into_bytes());
        }
    };
    fill(SLOTS);
    let failures = b.stats().listener_rearm_failures;
    assert!(
        failures > 0,
        "closing connections took the listener's slots and re-arming failed (counted): {failures}"
    );

    // TIME-WAIT expires, the orphans are reaped: the listener must have re-armed by itself.
    p.exec.block_on(sleep(Duration::from_secs(11)));
    let got = p.exec.block_on(async move {
        timeout(Duration::from_secs(2), exchange(a, 100))
            .await
            .expect("a client after TIME-WAIT expiry is accepted at once")
    });
    assert_eq!(got, b"ok GET /100".to_vec());

    // Fill again (the client above holds one slot in TIME-WAIT), then a burst that finds no
    // listening socket: its SYNs are dropped and retried until TIME-WAIT expiry frees slots,
    // which must wake the listener's pending `accept` to re-arm. (The client stack has `SLOTS`
    // slots too, hence a burst smaller than that.)
    fill(SLOTS - 1);
    let drops = b.stats().dropped(DropReason::BacklogFull);
    const BURST: usize = SLOTS - 2;
    let clients: Vec<_> = (0..BURST).map(|i| sp.spawn(exchange(a, 200 + i))).collect();
    let answers = p.exec.block_on(async move {
        let mut v = Vec::new();
        for c in clients {
            v.push(
                timeout(Duration::from_secs(60), c)
                    .await
                    .expect("every burst client served within 60 s (virtual)"),
            );
        }
        v
    });
    for (i, got) in answers.into_iter().enumerate() {
        assert_eq!(got, format!("ok GET /{}", 200 + i).into_bytes());
    }
    assert!(
        b.stats().dropped(DropReason::BacklogFull) > drops,
        "the burst met a listener with no listening socket"
    );
    drop(server);
}
