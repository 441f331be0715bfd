//! Per-connection TCP statistics (`TcpSocket::stats`) against known traffic between two stacks
//! over the in-memory wire, on simulated time:
//!
//! * a clean transfer of N bytes: the sender sent and saw acknowledged exactly N, the receiver
//!   received exactly N, nothing was sent again, and every segment one side sent the other
//!   received;
//! * a transfer over a wire that loses 5% of frames: still exactly N bytes sent for the first
//!   time and N received, plus retransmitted segments and bytes;
//! * a wire cut for 2.5 s under a 1000-byte write: a retransmission timeout at each doubling
//!   of the RTO until the cut ends, each sending the 1000 bytes again;
//! * request/response over a wire with a 25 ms delay each way: RTT estimates of 50 ms;
//! * the counters outlive the connection (past TIME-WAIT) and start from zero on the next.

use std::time::Duration;

use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpSocket, TcpState, TcpStats};
use zcnet_stack::{IpEndpoint, Stack};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_on, Pair, ADDR};
use zcnet_tests::wire::Faults;

/// Payload bytes of a full segment between the two stacks: a 1500-byte IP MTU less the IP and
/// TCP headers and the timestamp option (both stacks use timestamps).
const MSS: usize = 1448;

fn socket(stack: Stack) -> TcpSocket {
    TcpSocket::new(stack, TcpBuffers::with_capacity(65536, 65536)).unwrap()
}

fn b_at(port: u16) -> IpEndpoint {
    IpEndpoint::new(ADDR[1].into(), port)
}

/// Two stacks over a wire with `faults`, on simulated time.
fn pair_with_faults(faults: Faults) -> Pair {
    pair_on(Executor::leak(VirtualClock::leak()), faults, 512)
}

/// `n` bytes of a repeating pattern.
fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// A sends `len` bytes to B and waits until B acknowledged them all; B reads them all. Both
/// sockets stay open (returned: A's, then B's) and the stacks idle for a second of simulated
/// time after, so that no ACK is still under way.
fn transfer(p: &Pair, port: u16, len: usize) -> (TcpSocket, TcpSocket) {
    let [a, b] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = socket(b);
        s.accept(port).await.unwrap();
        let mut got = 0;
        let mut buf = vec![0u8; 8192];
        while got < len {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "end of stream after {got} of {len} bytes");
            got += n;
        }
        s
    });
    let client = p.exec.block_on(async move {
        let mut c = socket(a);
        c.connect_timeout(b_at(port), Duration::from_secs(10))
            .await
            .unwrap();
        c.write_all(&data(len)).await.unwrap();
        c.flush().await.unwrap();
        c
    });
    let server = p.exec.block_on(server);
    p.exec.block_on(p.exec.sleep(Duration::from_secs(1)));
    (client, server)
}

/// Checks what holds for any complete transfer of `len` bytes from `a` to `b`, lossy or not;
/// `min_rto` is `a`'s socket's RTO floor.
fn assert_transfer_counted(a: &TcpStats, b: &TcpStats, len: usize, min_rto: Duration) {
    let len = len as u64;
    assert_eq!(a.state, TcpState::Established, "{a:?}");
    assert_eq!(
        (a.counters.bytes_sent, a.counters.bytes_acked, a.unacked),
        (len, len, 0),
        "{a:?}"
    );
    assert_eq!(
        (a.counters.bytes_received, b.counters.bytes_sent),
        (0, 0),
        "{a:?} {b:?}"
    );
    assert_eq!(b.counters.bytes_received, len, "{b:?}");
    assert_eq!(a.mss, MSS, "{a:?}");
    // At least one full segment per MSS of payload, and the SYN.
    let least = len.div_ceil(MSS as u64) + 1;
    assert!(a.counters.segments_sent >= least, "{a:?}");
    // B answered: the SYN-ACK and at least one ACK (one per batch of segments at most).
    assert!(b.counters.segments_sent >= 2, "{b:?}");
    assert!(a.srtt.is_some() && a.min_rtt.is_some(), "{a:?}");
    assert!(a.rto >= min_rto, "{a:?}");
}

/// 1 MB from A to B over a perfect wire: every byte sent, acknowledged and received once,
/// nothing sent again, and each side received every segment the other sent.
#[test]
fn a_clean_transfer_counts_every_byte_and_segment_once() {
    let p = pair_with_faults(Faults::default());
    let len = 1_000_000;
    let (a_sock, mut b_sock) = transfer(&p, 7100, len);
    let (a, b) = (a_sock.stats(), b_sock.stats());
    eprintln!("A: {a:?}\nB: {b:?}");
    assert_transfer_counted(&a, &b, len, a_sock.min_rto());
    assert_eq!(
        (
            a.counters.bytes_retransmitted,
            a.counters.retransmitted_segments
        ),
        (0, 0),
        "{a:?}"
    );
    assert_eq!(
        (a.counters.fast_recoveries, a.counters.timeouts),
        (0, 0),
        "{a:?}"
    );
    assert_eq!(
        a.counters.segments_sent, b.counters.segments_received,
        "A → B"
    );
    assert_eq!(
        b.counters.segments_sent, a.counters.segments_received,
        "B → A"
    );
    // Every TCP segment A sent crossed the wire; its only other frames are ARP and IPv6
    // neighbour discovery, a handful.
    let wire = p.ends[0].tx_stats();
    assert!(
        wire.sent >= a.counters.segments_sent && wire.sent - a.counters.segments_sent < 10,
        "{wire:?} {a:?}"
    );
    // No delay on the wire: RTT samples of 0 ms.
    assert_eq!(a.min_rtt, Some(Duration::ZERO), "{a:?}");
    // The halves read the same connection.
    let (rd, wr) = b_sock.split();
    assert_eq!(rd.stats(), wr.stats());
    assert_eq!(rd.stats().counters.bytes_received, len as u64);
}

/// 1 MB from A to B over a wire that loses 5% of frames each way: still exactly 1 MB sent for
/// the first time and received, and the losses show as retransmissions.
#[test]
fn a_lossy_transfer_counts_retransmissions() {
    let p = pair_with_faults(Faults {
        seed: 0x57a75,
        loss: 0.05,
        ..Faults::default()
    });
    let len = 1_000_000;
    let (a_sock, b_sock) = transfer(&p, 7101, len);
    let (a, b) = (a_sock.stats(), b_sock.stats());
    let lost = p.ends[0].tx_stats().lost;
    eprintln!("A: {a:?}\nB: {b:?}\nframes A's side of the wire lost: {lost}");
    assert!(lost > 0);
    assert_transfer_counted(&a, &b, len, a_sock.min_rto());
    assert!(a.counters.retransmitted_segments > 0, "{a:?}");
    assert!(a.counters.bytes_retransmitted > 0, "{a:?}");
    // A retransmission carries at most one segment's payload.
    assert!(
        a.counters.bytes_retransmitted <= a.counters.retransmitted_segments * MSS as u64,
        "{a:?}"
    );
    assert!(
        a.counters.fast_recoveries + a.counters.timeouts > 0,
        "{a:?}"
    );
    // What the wire lost never reached B.
    assert!(
        b.counters.segments_received < a.counters.segments_sent,
        "{a:?} {b:?}"
    );
}

/// A writes 1000 bytes while its side of the wire is cut for 2.5 s: the retransmission timer
/// fires after one RTO, then after each doubling of it, until a copy goes after the cut has
/// ended; each time the 1000 bytes go again (tail loss probes may send them again too, as
/// retransmissions but not timeouts).
#[test]
fn a_cut_wire_shows_the_timeouts() {
    const CUT: Duration = Duration::from_millis(2500);
    let p = pair_with_faults(Faults::default());
    let [a, b] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = socket(b);
        s.accept(7102).await.unwrap();
        let mut buf = vec![0u8; 2000];
        let mut got = 0;
        while got < 1000 {
            got += s.read(&mut buf).await.unwrap();
        }
        s
    });
    let cut = p.ends[0];
    let exec = p.exec;
    let a = p.exec.block_on(async move {
        let mut c = socket(a);
        c.connect_timeout(b_at(7102), Duration::from_secs(10))
            .await
            .unwrap();
        let before = c.stats();
        cut.set_cut(true);
        c.write_all(&data(1000)).await.unwrap();
        exec.sleep(CUT).await;
        cut.set_cut(false);
        c.flush().await.unwrap();
        (before, c.stats())
    });
    let b = p.exec.block_on(server).stats();
    let (before, a) = a;
    eprintln!("A before: {before:?}\nA: {a:?}\nB: {b:?}");
    assert_eq!(before.counters.timeouts, 0, "{before:?}");
    // The timer fires at RTO, 3 RTO, 7 RTO, ... after the first send, until one firing comes
    // after the cut.
    let (mut timeouts, mut at, mut rto) = (0, Duration::ZERO, before.rto);
    while at < CUT {
        at += rto;
        rto *= 2;
        timeouts += 1;
    }
    assert!(timeouts >= 2, "{before:?}");
    assert_eq!(a.counters.timeouts, timeouts, "{a:?}");
    assert_eq!(
        (a.counters.bytes_sent, a.counters.bytes_acked),
        (1000, 1000),
        "{a:?}"
    );
    assert!(a.counters.retransmitted_segments >= timeouts, "{a:?}");
    assert_eq!(
        a.counters.bytes_retransmitted,
        1000 * a.counters.retransmitted_segments,
        "{a:?}"
    );
    assert_eq!(a.counters.fast_recoveries, 0, "{a:?}");
    assert_eq!(b.counters.bytes_received, 1000, "{b:?}");
}

/// Over a wire that delays every frame by 25 ms each way, 20 request/response exchanges of
/// 100 bytes: every request is acknowledged by its response, which B sends at once, so each of
/// A's RTT samples, the handshake's included, is the wire's 50 ms. (A connection attempt to a
/// closed port resolves the addresses first: a SYN that waits for ARP measures that wait too.)
#[test]
fn rtt_estimates_follow_the_wire_delay() {
    let p = pair_with_faults(Faults {
        delay: Duration::from_millis(25),
        ..Faults::default()
    });
    let [a, b] = p.stacks;
    const ROUNDS: usize = 20;
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = socket(b);
        s.accept(7103).await.unwrap();
        let mut buf = [0u8; 100];
        for _ in 0..ROUNDS {
            read_exact(&mut s, &mut buf).await;
            s.write_all(&buf).await.unwrap();
        }
        s
    });
    let a = p.exec.block_on(async move {
        let refused = socket(a)
            .connect_timeout(b_at(7199), Duration::from_secs(10))
            .await;
        assert_eq!(refused, Err(TcpError::ConnectionRefused));
        let mut c = socket(a);
        c.connect_timeout(b_at(7103), Duration::from_secs(10))
            .await
            .unwrap();
        let mut buf = [0u8; 100];
        for _ in 0..ROUNDS {
            c.write_all(&data(100)).await.unwrap();
            read_exact(&mut c, &mut buf).await;
        }
        (c.stats(), c.min_rto())
    });
    let (a, min_rto) = a;
    let b = p.exec.block_on(server).stats();
    eprintln!("A: {a:?}\nB: {b:?}");
    let total = (ROUNDS * 100) as u64;
    assert_eq!(
        (a.counters.bytes_sent, a.counters.bytes_received),
        (total, total),
        "{a:?}"
    );
    assert_eq!(
        (b.counters.bytes_sent, b.counters.bytes_received),
        (total, total),
        "{b:?}"
    );
    let ms = Duration::from_millis;
    assert_eq!((a.min_rtt, a.srtt), (Some(ms(50)), Some(ms(50))), "{a:?}");
    // Twenty-one equal samples: the variance has decayed from the first sample's 25 ms
    // (RTTVAR = 3/4 RTTVAR each time, rounded up, which stops at 3 ms).
    assert_eq!(a.rttvar, Some(ms(3)), "{a:?}");
    // SRTT + 4 RTTVAR = 62 ms, below the floor.
    assert_eq!(a.rto, min_rto.max(ms(62)), "{a:?}");
    // B's samples include A's delayed ACKs (10 ms), never less than the wire's 50 ms.
    assert!(b.min_rtt.is_some_and(|m| m >= ms(50)), "{b:?}");
}

/// Reads exactly `buf.len()` bytes.
async fn read_exact(s: &mut TcpSocket, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        let n = s.read(&mut buf[got..]).await.unwrap();
        assert!(n > 0, "end of stream after {got} bytes");
        got += n;
    }
}

/// The counters outlive the connection: A closes first, waits out TIME-WAIT, and still reads
/// its transfer; connecting the same socket again starts them from zero.
#[test]
fn counters_outlive_the_close_and_restart_with_the_next_connection() {
    let p = pair_with_faults(Faults::default());
    let [a, b] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut buf = vec![0u8; 8192];
        for _ in 0..2 {
            let mut s = socket(b);
            s.accept(7104).await.unwrap();
            while s.read(&mut buf).await.unwrap() > 0 {}
            s.close();
            s.closed().await;
        }
    });
    let exec = p.exec;
    let (first, after_time_wait, second) = p.exec.block_on(async move {
        let mut c = socket(a);
        c.connect_timeout(b_at(7104), Duration::from_secs(10))
            .await
            .unwrap();
        c.write_all(&data(10_000)).await.unwrap();
        c.close();
        c.closed().await;
        let first = c.stats();
        // TIME-WAIT lasts 10 s.
        exec.sleep(Duration::from_secs(11)).await;
        let after_time_wait = c.stats();
        c.connect_timeout(b_at(7104), Duration::from_secs(10))
            .await
            .unwrap();
        let second = c.stats();
        c.close();
        c.closed().await;
        (first, after_time_wait, second)
    });
    p.exec.block_on(server);
    eprintln!("first: {first:?}\nafter TIME-WAIT: {after_time_wait:?}\nsecond: {second:?}");
    assert_eq!(first.state, TcpState::TimeWait, "{first:?}");
    assert_eq!(
        (first.counters.bytes_sent, first.counters.bytes_acked),
        (10_000, 10_000)
    );
    assert_eq!(after_time_wait.state, TcpState::Closed);
    assert_eq!(
        (
            after_time_wait.counters.bytes_sent,
            after_time_wait.counters.segments_sent
        ),
        (first.counters.bytes_sent, first.counters.segments_sent)
    );
    assert_eq!(after_time_wait.srtt, first.srtt);
    assert_eq!(second.state, TcpState::Established);
    assert_eq!(
        (second.counters.bytes_sent, second.counters.bytes_acked),
        (0, 0),
        "{second:?}"
    );
    // The new handshake: our SYN and the SYN-ACK (our ACK of it may not have gone yet).
    assert_eq!(second.counters.segments_received, 1, "{second:?}");
    assert!(
        (1..=2).contains(&second.counters.segments_sent),
        "{second:?}"
    );
}
