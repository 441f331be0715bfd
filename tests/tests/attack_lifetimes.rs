//! Connections that would never end: a peer that stops acknowledging, and a peer that closes
//! its window and then stops answering the probes. Over the in-memory wire with one direction
//! cut, on a virtual clock (the bounds are minutes long; the tests take milliseconds).
//!
//! Without a timeout set on the socket, the connection gives up as Linux's `tcp_retries2`
//! says (`zcnet_stack::tcp`, "How long a connection lasts without answers"): it sends the peer
//! a RST, `read` and `write` fail with `TimedOut`, and the stack counts it in
//! `StackStats::tcp_timed_out`.

use std::time::Duration;

use log::Level;
use zcnet_executor::time::timeout;
use zcnet_executor::Executor;
use zcnet_stack::tcp::{
    retransmission_bound, TcpBuffers, TcpError, TcpSocket, TcpState, MIN_TCP_RETRIES, TCP_RETRIES,
};
use zcnet_stack::{IpEndpoint, Stack};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::log_capture::LogCapture;
use zcnet_tests::net::{pair_on, Pair, ADDR};
use zcnet_tests::wire::Faults;

/// Retransmission timeouts come at most this far apart (the RTO's ceiling).
const MAX_RTO: Duration = Duration::from_secs(60);

fn socket(stack: Stack, rx: usize, tx: usize) -> TcpSocket {
    TcpSocket::new(stack, TcpBuffers::with_capacity(rx, tx)).unwrap()
}

fn b_at(port: u16) -> IpEndpoint {
    IpEndpoint::new(ADDR[1].into(), port)
}

fn virtual_pair() -> Pair {
    pair_on(Executor::leak(VirtualClock::leak()), Faults::default(), 128)
}

/// B takes A's data but its acknowledgements are lost (B's direction of the wire is cut): A
/// retransmits, and at the first retransmission timeout past `retransmission_bound(retries)`
/// since it sent the data, gives up. Once with the least limit (102.2 s), once with the
/// default (522.2 s). A's read, write and flush then fail with `TimedOut` and the stack logs
/// that the connection gave up; its RST reaches B, whose read fails with `ConnectionReset`.
#[test]
fn a_peer_that_never_acknowledges_is_given_up_on_within_the_bound() {
    for (i, retries) in [MIN_TCP_RETRIES, TCP_RETRIES].into_iter().enumerate() {
        let log = LogCapture::start();
        let p = virtual_pair();
        let [a, b] = p.stacks;
        let port = 7100 + i as u16;
        let server = p.exec.local_spawner().spawn(async move {
            let mut s = socket(b, 4096, 4096);
            s.accept(port).await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            while got.len() < 5 {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "end of stream before the data");
                got.extend_from_slice(&buf[..n]);
            }
            (got, s.read(&mut buf).await)
        });
        let server = timeout(Duration::from_secs(10), server);
        let b_end = p.ends[1];
        let exec = p.exec;
        let (took, after, local) = p.exec.block_on(async move {
            let mut c = socket(a, 4096, 4096);
            c.connect(b_at(port)).await.unwrap();
            let local = c.local_endpoint().unwrap();
            c.set_retries(retries);
            assert_eq!(c.retries(), retries);
            // Nothing from B reaches A any more.
            b_end.set_cut(true);
            let start = exec.now();
            c.write_all(b"hello").await.unwrap();
            let mut buf = [0u8; 8];
            let r = timeout(Duration::from_secs(3600), c.read(&mut buf))
                .await
                .expect("A gives up within an hour");
            let took = exec.now() - start;
            assert_eq!(r, Err(TcpError::TimedOut), "read after giving up");
            // B's direction works again: A's RST, which waited for B's answer to A's ARP
            // request (the neighbour entry expired long ago), goes out.
            b_end.set_cut(false);
            assert_eq!(c.write(b"x").await, Err(TcpError::TimedOut), "write");
            assert_eq!(c.flush().await, Err(TcpError::TimedOut), "flush");
            assert_eq!(c.state(), TcpState::Closed);
            let st = c.stats();
            assert!(st.counters.timeouts >= 6, "{st:?}");
            (took, st, local)
        });
        let bound = retransmission_bound(retries);
        assert!(
            took >= bound && took <= bound + MAX_RTO,
            "retries {retries}: gave up after {took:?}, bound {bound:?}; {after:?}"
        );
        assert_eq!(a.stats().tcp_timed_out, 1, "{:?}", a.stats());
        log.expect(
            Level::Debug,
            "zcnet_stack::tcp",
            &format!(
                "TCP {local} -> {}: gave up: the peer stopped answering in ESTABLISHED",
                b_at(port)
            ),
        );
        let (got, last) = p
            .exec
            .block_on(server)
            .expect("B's connection reset by A's RST");
        assert_eq!(got, b"hello");
        assert_eq!(last, Err(TcpError::ConnectionReset), "A's RST reached B");
        assert_eq!(b.stats().tcp_timed_out, 0);
    }
}

/// B accepts and never reads: its window closes and A, with more to send, probes it. While B
/// answers the probes (its window still zero), A waits, as Linux does (an hour here; an
/// application bounds that with a deadline on its writes). Then B falls silent (its direction
/// cut): after `TCP_RETRIES` probes without an answer, at most 60 s apart, A gives up; its
/// blocked write fails with `TimedOut`.
#[test]
fn a_zero_window_peer_that_stops_answering_probes_is_given_up_on() {
    let p = virtual_pair();
    let [a, b] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = socket(b, 4096, 4096);
        s.accept(7200).await.unwrap();
        // Never reads; the socket stays open until the test ends.
        s.closed().await;
        s.stats()
    });
    let b_end = p.ends[1];
    let exec = p.exec;
    let took = p.exec.block_on(async move {
        let mut c = socket(a, 4096, 8192);
        c.connect(b_at(7200)).await.unwrap();
        let data = vec![7u8; 256 * 1024];
        // B's window and A's send queue fill; the rest waits. An hour of answered probes.
        let r = timeout(Duration::from_secs(3600), c.write_all(&data)).await;
        assert!(r.is_err(), "the write cannot complete into a zero window");
        assert_eq!(c.state(), TcpState::Established);
        let st = c.stats();
        assert_eq!(st.peer_window, 0, "{st:?}");
        assert_eq!(a.stats().tcp_timed_out, 0);
        // B falls silent.
        b_end.set_cut(true);
        let start = exec.now();
        let r = timeout(Duration::from_secs(3600), c.write_all(&data))
            .await
            .expect("A gives up within an hour");
        let took = exec.now() - start;
        assert_eq!(r, Err(TcpError::TimedOut));
        b_end.set_cut(false);
        let mut buf = [0u8; 8];
        assert_eq!(c.read(&mut buf).await, Err(TcpError::TimedOut));
        took
    });
    let most = MAX_RTO * (u32::from(TCP_RETRIES) + 1);
    let least = MAX_RTO * (u32::from(TCP_RETRIES) - 1);
    assert!(
        took >= least && took <= most,
        "gave up {took:?} after the peer fell silent (expected {least:?}..={most:?})"
    );
    assert_eq!(a.stats().tcp_timed_out, 1, "{:?}", a.stats());
    // B sees A's RST (sent once B answered A's ARP request again); its task ends.
    let st = p
        .exec
        .block_on(timeout(Duration::from_secs(10), server))
        .expect("B's connection reset by A's RST");
    assert_eq!(st.state, TcpState::Closed, "{st:?}");
}

/// A server that resets a connection and lets go of its socket at once (`abort`, then drop: what
/// the example servers do to a connection they shed or that missed a deadline) still resets
/// the peer: the socket stays until its RST is sent, then its slot is freed. The peer here is
/// silent, so nothing else would tell it.
#[test]
fn an_aborted_and_dropped_socket_still_resets_its_peer() {
    let p = virtual_pair();
    let [a, b] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = socket(b, 4096, 4096);
        s.accept(7300).await.unwrap();
        s.abort();
        drop(s);
    });
    let got = p.exec.block_on(async move {
        let mut c = socket(a, 4096, 4096);
        c.connect(b_at(7300)).await.unwrap();
        let mut buf = [0u8; 8];
        timeout(Duration::from_secs(60), c.read(&mut buf)).await
    });
    assert_eq!(got, Ok(Err(TcpError::ConnectionReset)));
    p.exec.block_on(server);
    // The server's slot is free again: its RST went, and nothing is left to send.
    p.exec
        .block_on(zcnet_executor::time::sleep(Duration::from_millis(10)));
    p.assert_slots_back();
}
