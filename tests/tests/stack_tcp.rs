//! Two stacks over the in-memory wire: TCP handshake, transfer, half-close and orderly close;
//! refused connections, connect timeouts, resets, idle timeouts and keep-alive; UDP echo.

use std::time::{Duration, Instant as StdInstant};

use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::time::{sleep, timeout};
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpListener, TcpSocket, TcpState};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::{DropReason, IpEndpoint, Ipv4Address, Stack};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair, pair_on, pair_sized_with, Pair, ADDR, SOCKETS};
use zcnet_tests::wire::{Delivery, Faults};

fn socket(stack: Stack) -> TcpSocket {
    TcpSocket::new(stack, TcpBuffers::with_capacity(16384, 16384)).unwrap()
}

fn b_at(port: u16) -> IpEndpoint {
    IpEndpoint::new(ADDR[1].into(), port)
}

/// Client sends 1 MB then shuts its write half; the server reads to end of stream, answers on
/// its still-open write half, and closes; both see an orderly close.
#[test]
fn handshake_transfer_half_close_and_orderly_close() {
    transfer_half_close_and_orderly_close(pair(Faults::default(), 256));
}

/// The same over a wire that lends the sender's slot to the receiver (no copy), as the stack
/// benchmark runs it: RX frames from the peer's pool are handled like the stack's own.
#[test]
fn handshake_transfer_half_close_and_orderly_close_over_a_lending_wire() {
    let exec = Executor::leak(LinuxPlatform::leak().expect("epoll"));
    let p = pair_sized_with::<SOCKETS>(exec, Faults::default(), Delivery::Lend, 256, |_, _| {});
    transfer_half_close_and_orderly_close(p);
}

fn transfer_half_close_and_orderly_close(p: Pair) {
    let [a, b] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = socket(b);
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
        assert_eq!(
            s.state(),
            TcpState::CloseWait,
            "peer's FIN seen, our side open"
        );
        s.write_all(b"bye").await.unwrap();
        s.close();
        s.closed().await;
        got
    });
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let sent = data.clone();
    let reply = p.exec.block_on(async move {
        let mut c = socket(a);
        c.connect_timeout(b_at(7000), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(c.state(), TcpState::Established);
        c.write_all(&sent).await.unwrap();
        c.shutdown();
        assert_eq!(
            c.write(b"late").await,
            Err(TcpError::InvalidState),
            "writing after shutdown"
        );
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
        assert_eq!(
            c.read(&mut buf).await,
            Ok(0),
            "end of stream stays end of stream"
        );
        reply
    });
    assert_eq!(reply, b"bye");
    let got = p.exec.block_on(server);
    assert_eq!(got.len(), data.len());
    assert!(got == data, "byte-exact");
    let s = a.stats();
    assert!(s.frames_out > 0 && s.frames_in > 0);
}

/// A SYN to a port nobody listens on is answered with RST: the connect is refused, at once.
#[test]
fn connecting_to_a_closed_port_is_refused() {
    let p = pair(Faults::default(), 64);
    let [a, _b] = p.stacks;
    let started = StdInstant::now();
    let r = p.exec.block_on(async move {
        let mut c = socket(a);
        c.connect_timeout(b_at(9), Duration::from_secs(5)).await
    });
    assert_eq!(r, Err(TcpError::ConnectionRefused));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused, not timed out"
    );
}

/// A host that never answers: `connect_timeout` gives up with `TimedOut` after its timeout, and
/// `connect` with a socket timeout set does the same through smoltcp's timer.
#[test]
fn connect_times_out_when_nobody_answers() {
    let p = pair(Faults::default(), 64);
    let [a, _b] = p.stacks;
    let absent = IpEndpoint::new(Ipv4Address::new(10, 0, 0, 99).into(), 80);
    let started = StdInstant::now();
    let r = p.exec.block_on(async move {
        let mut c = socket(a);
        c.connect_timeout(absent, Duration::from_millis(300)).await
    });
    let took = started.elapsed();
    assert_eq!(r, Err(TcpError::TimedOut));
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );

    // The peer exists but the cable is cut: smoltcp's own timeout ends the handshake.
    p.exec.block_on(async move {
        let mut c = socket(a);
        c.set_timeout(Some(Duration::from_millis(500)));
        p.ends[0].set_cut(true);
        let r = timeout(Duration::from_secs(5), c.connect(b_at(7000))).await;
        p.ends[0].set_cut(false);
        assert_eq!(r, Ok(Err(TcpError::TimedOut)));
    });
}

/// The peer aborts: reads and writes on this side fail with `ConnectionReset`; the aborting side
/// sees `Aborted`.
#[test]
fn a_reset_is_reported_as_reset_and_an_abort_as_aborted() {
    let p = pair(Faults::default(), 64);
    let [a, b] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = socket(b);
        s.accept(7001).await.unwrap();
        let mut buf = [0u8; 4];
        s.read(&mut buf).await.unwrap();
        s.abort();
        let mut buf = [0u8; 4];
        (s.read(&mut buf).await, s.write(b"x").await)
    });
    let client = p.exec.block_on(async move {
        let mut c = socket(a);
        c.connect(b_at(7001)).await.unwrap();
        c.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        let r = c.read(&mut buf).await;
        let w = c.write(b"more").await;
        (r, w)
    });
    assert_eq!(
        client,
        (
            Err(TcpError::ConnectionReset),
            Err(TcpError::ConnectionReset)
        )
    );
    assert_eq!(
        p.exec.block_on(server),
        (Err(TcpError::Aborted), Err(TcpError::Aborted))
    );
}

/// With keep-alive, an idle connection to a live peer stays up (probes are answered); when the
/// cable is cut, the idle timeout ends it with `TimedOut`, distinct from a reset.
#[test]
fn keepalive_keeps_a_live_peer_and_the_timeout_detects_a_dead_one() {
    let p = pair(Faults::default(), 64);
    let [a, b] = p.stacks;
    let _server = p.exec.local_spawner().spawn(async move {
        let mut s = socket(b);
        s.accept(7002).await.unwrap();
        s.closed().await; // stays silent: never sends data
    });
    let a_end = p.ends[0];
    let b_end = p.ends[1];
    p.exec.block_on(async move {
        let mut c = socket(a);
        c.connect(b_at(7002)).await.unwrap();
        let set = a_end.tx_stats().sent;
        c.set_keep_alive(Some(Duration::from_millis(100)));
        c.set_timeout(Some(Duration::from_millis(400)));
        // The first probe comes after an idle interval, not when keep-alive is set.
        sleep(Duration::from_millis(80)).await;
        assert_eq!(
            a_end.tx_stats().sent - set,
            0,
            "a probe before the interval"
        );
        let before = a_end.tx_stats().sent;
        // Idle for longer than the timeout: keep-alive probes and their ACKs keep it up.
        let mut buf = [0u8; 8];
        let idle = timeout(Duration::from_millis(1000), c.read(&mut buf)).await;
        assert!(idle.is_err(), "no data, no error while the peer answers");
        assert_eq!(c.state(), TcpState::Established);
        let probes = a_end.tx_stats().sent - before;
        assert!(probes >= 5, "keep-alive probes sent while idle: {probes}");
        // The peer vanishes.
        b_end.set_cut(true);
        let r = timeout(Duration::from_secs(5), c.read(&mut buf)).await;
        assert_eq!(r, Ok(Err(TcpError::TimedOut)));
    });
}

/// Handshakes give up, as Linux's do: a `connect` whose SYNs nobody answers ends with
/// `TimedOut` after `SYN_RETRIES` resends (no socket timeout set), and a socket in `accept`
/// whose SYN-ACKs go unanswered listens again after `SYNACK_RETRIES` resends and then
/// accepts a real client.
#[test]
fn unanswered_handshakes_give_up() {
    let p = pair_on(Executor::leak(VirtualClock::leak()), Faults::default(), 64);
    let [a, b] = p.stacks;
    let (a_end, b_end) = (p.ends[0], p.ends[1]);
    let start = p.exec.now();
    p.exec.block_on(async move {
        // B's cable is cut: A's SYNs are lost.
        b_end.set_cut(true);
        a_end.set_cut(true);
        let mut c = socket(a);
        assert_eq!(c.connect(b_at(7003)).await, Err(TcpError::TimedOut));
    });
    let took = p.exec.now() - start;
    assert!(
        (Duration::from_secs(123)..Duration::from_secs(124)).contains(&took),
        "{took:?}"
    );

    // A's SYN reaches B, B's SYN-ACKs are lost: B gives the handshake up and listens again.
    a_end.set_cut(false);
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = socket(b);
        s.accept(7004).await.unwrap();
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await.unwrap();
        buf[..n].to_vec()
    });
    p.exec.block_on(async move {
        let mut c = socket(a);
        c.set_timeout(Some(Duration::from_secs(5)));
        assert_eq!(c.connect(b_at(7004)).await, Err(TcpError::TimedOut));
        drop(c);
        // Still past B's 63 s of SYN-ACK resends, then the cable is mended.
        sleep(Duration::from_secs(70)).await;
        b_end.set_cut(false);
        let mut c = socket(a);
        c.connect(b_at(7004)).await.unwrap();
        c.write_all(b"hello").await.unwrap();
    });
    assert_eq!(p.exec.block_on(server), b"hello");
}

/// Datagrams both ways; the echo task drops its socket right after its last `send_to`, and that
/// datagram is still delivered.
#[test]
fn udp_echo() {
    let p = pair(Faults::default(), 64);
    let [a, b] = p.stacks;
    let echo = p.exec.local_spawner().spawn(async move {
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
            c.send_to(&msg, b_at(5353)).await.unwrap();
            let mut buf = [0u8; 1500];
            let (n, from) = timeout(Duration::from_secs(5), c.recv_from(&mut buf))
                .await
                .expect("echo within 5 s")
                .unwrap();
            assert_eq!(&buf[..n], &msg);
            assert_eq!(from, b_at(5353));
        }
    });
    p.exec.block_on(echo);
    // Give the stack a moment: nothing else should be sent.
    p.exec.block_on(sleep(Duration::from_millis(10)));
}

/// 100 clients connect at once to a listener with a backlog of 16: SYNs beyond the backlog are
/// dropped (not refused) and retried by the clients, and every client is served.
#[test]
fn udp_port_zero_binds_distinct_random_ephemeral_ports() {
    let p = pair(Faults::default(), 64);
    let a = p.stacks[0];
    let ports: Vec<u16> = (0..8)
        .map(|_| {
            let s = UdpSocket::bind(a, 0, UdpBuffers::with_capacity(1, 64)).unwrap();
            let port = s.local_port();
            core::mem::forget(s); // keep the port taken
            port
        })
        .collect();
    let mut sorted = ports.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ports.len(), "ports are distinct: {ports:?}");
    assert!(ports.iter().all(|&p| p >= 49152), "{ports:?}");
    // Random, not sequential: some consecutive pair is far apart.
    assert!(
        ports.windows(2).any(|w| w[0].abs_diff(w[1]) > 16),
        "{ports:?}"
    );
}

#[test]
fn a_hundred_concurrent_clients_against_a_backlog_of_sixteen_are_all_served() {
    const CLIENTS: usize = 100;
    // Simulated time: the clients' SYN retransmissions (a second apart) pass at once. Each
    // client socket reserves 4 frames of A's pool (2 KiB each way), so A's pool has room for
    // the TCP budgets of all hundred in its TCP share (three quarters).
    let p = pair_on(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        1024,
    );
    let [a, b] = p.stacks;
    let sp = p.exec.local_spawner();
    let server = sp.spawn(async move {
        let make = || Some(TcpBuffers::with_capacity(2048, 2048));
        let mut l = TcpListener::bind(b, 7100, 16, make).unwrap();
        let mut handlers = Vec::new();
        for _ in 0..CLIENTS {
            let mut s = l.accept().await.expect("accept");
            handlers.push(sp.spawn(async move {
                let mut buf = [0u8; 64];
                let n = s.read(&mut buf).await.unwrap();
                s.write_all(&buf[..n]).await.unwrap();
                s.close();
                s.closed().await;
            }));
        }
        for h in handlers {
            h.await;
        }
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            sp.spawn(async move {
                let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(2048, 2048)).unwrap();
                c.connect(b_at(7100)).await.unwrap();
                let msg = format!("client {i:03}");
                c.write_all(msg.as_bytes()).await.unwrap();
                let mut buf = [0u8; 64];
                let n = c.read(&mut buf).await.unwrap();
                assert_eq!(&buf[..n], msg.as_bytes());
                c.close();
                c.closed().await;
                i
            })
        })
        .collect();
    let served: Vec<usize> = p.exec.block_on(async move {
        let mut v = Vec::new();
        for c in clients {
            v.push(
                timeout(Duration::from_secs(120), c)
                    .await
                    .expect("served within 120 s"),
            );
        }
        v
    });
    assert_eq!(served, (0..CLIENTS).collect::<Vec<_>>());
    p.exec.block_on(server);
    // The backlog overflowed: the SYNs beyond it were answered with SYN cookies, none dropped.
    let st = b.stats();
    assert!(st.syn_cookies_sent > 0, "the backlog overflowed: {st:?}");
    assert_eq!(st.dropped(DropReason::BacklogFull), 0, "{st:?}");
    assert_eq!(st.syn_cookies_rejected, 0, "{st:?}");
}

/// A hundred clients each write 4 KiB and drop their socket at once (no close, no flush): every
/// drop finishes in the background with the data and a FIN, so the server reads each stream
/// whole and sees an orderly end, and every socket slot is free again afterwards.
#[test]
fn dropped_sockets_deliver_their_data_and_close_gracefully() {
    const CLIENTS: usize = 100;
    // Each client socket reserves 10 frames of A's pool (1 KiB receive, 8 KiB send): the TCP
    // share of 2048 slots holds all hundred budgets.
    let p = pair_on(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        2048,
    );
    let [a, b] = p.stacks;
    let sp = p.exec.local_spawner();
    let server = sp.spawn(async move {
        let make = || Some(TcpBuffers::with_capacity(8192, 1024));
        let mut l = TcpListener::bind(b, 7200, 16, make).unwrap();
        let mut handlers = Vec::new();
        for _ in 0..CLIENTS {
            let mut s = l.accept().await.expect("accept");
            handlers.push(sp.spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 1024];
                while let Some(n) = s.read(&mut buf).await.map(Some).unwrap_or(None) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                got
            }));
        }
        let mut all = Vec::new();
        for h in handlers {
            all.push(h.await);
        }
        all
    });
    for i in 0..CLIENTS {
        sp.spawn(async move {
            let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(1024, 8192)).unwrap();
            c.connect(b_at(7200)).await.unwrap();
            c.write_all(&[i as u8; 4096]).await.unwrap();
            drop(c);
        });
    }
    let streams = p.exec.block_on(async move {
        timeout(Duration::from_secs(300), server)
            .await
            .expect("all streams end within 300 s")
    });
    let mut firsts: Vec<u8> = streams
        .iter()
        .map(|s| {
            assert_eq!(s.len(), 4096, "whole stream, then an orderly end");
            assert!(s.iter().all(|&x| x == s[0]));
            s[0]
        })
        .collect();
    firsts.sort_unstable();
    assert_eq!(firsts, (0..CLIENTS as u8).collect::<Vec<_>>());
    // Every orphan finished (after TIME-WAIT, 10 s in smoltcp) and was removed: the stack has
    // all its slots again.
    p.exec.block_on(sleep(Duration::from_secs(11)));
    let sockets: Vec<TcpSocket> = (0..zcnet_tests::net::SOCKETS)
        .map(|_| TcpSocket::new(a, TcpBuffers::with_capacity(64, 64)).unwrap())
        .collect();
    assert_eq!(sockets.len(), zcnet_tests::net::SOCKETS);
}
