//! The stack's timed socket operations polled under wakers that are not the executor's own:
//! inside a `FuturesUnordered` (which polls each future with a waker of its own that wraps the
//! task's), and on a plain thread with a waker that unparks it (a foreign executor). A TCP
//! connect to a silent address, a DNS query to a silent server and a ping into the void each
//! end with their timeout error, after their time limit on the stack's executor's clock.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use zcnet_executor::Executor;
use zcnet_stack::dns::{DnsError, DnsKind, DnsSocket};
use zcnet_stack::icmp::{IcmpBuffers, IcmpError, IcmpSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpSocket};
use zcnet_stack::{IpEndpoint, Ipv4Address};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair, pair_on_with};
use zcnet_tests::wakers::block_on_poll;
use zcnet_tests::wire::Faults;

/// On the wire's subnet, but nobody has it: ARP goes unanswered, so nothing ever comes back.
const SILENT: Ipv4Address = Ipv4Address::new(10, 0, 0, 99);

/// Runs `f` as the only member of a `FuturesUnordered`, so that it is polled with the set's
/// waker, not the task's.
async fn in_unordered_set<F: Future>(f: F) -> F::Output {
    let mut set = FuturesUnordered::new();
    set.push(f);
    set.next().await.expect("the set holds one future")
}

/// TCP `connect_timeout`, DNS `resolve_timeout` and `ping`, each inside a `FuturesUnordered` in
/// a task of the stack's executor (simulated time): each times out after its limit.
#[test]
fn timed_socket_operations_complete_inside_futures_unordered() {
    let p = pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        64,
        |i, c| {
            if i == 0 {
                c.dns_servers[0] = Some(SILENT.into());
            }
        },
    );
    let [a, _b] = p.stacks;
    let exec = p.exec;
    exec.block_on(async move {
        let limit = Duration::from_millis(300);

        let mut tcp = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 4096)).unwrap();
        let start = exec.now();
        let r =
            in_unordered_set(tcp.connect_timeout(IpEndpoint::new(SILENT.into(), 80), limit)).await;
        assert_eq!(r, Err(TcpError::TimedOut));
        let waited = exec.now() - start;
        assert!(waited >= limit && waited < limit * 2, "tcp: {waited:?}");

        let dns = DnsSocket::with_capacity(a, 1).unwrap();
        let start = exec.now();
        let r = in_unordered_set(dns.resolve_timeout("host.test", DnsKind::A, limit)).await;
        assert_eq!(r, Err(DnsError::TimedOut));
        let waited = exec.now() - start;
        assert!(waited >= limit && waited < limit * 2, "dns: {waited:?}");

        let icmp = IcmpSocket::bind(a, 0x5a5a, IcmpBuffers::with_capacity(4, 1024)).unwrap();
        let start = exec.now();
        let r = in_unordered_set(icmp.ping(SILENT.into(), 1, b"anyone?", limit)).await;
        assert_eq!(r, Err(IcmpError::TimedOut));
        let waited = exec.now() - start;
        assert!(waited >= limit && waited < limit * 2, "ping: {waited:?}");
    });
}

/// Ends `block_on(stop.wait())` on the executor's thread when the test is done.
#[derive(Default)]
struct Stop {
    done: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Stop {
    async fn wait(&self) {
        poll_fn(|cx| {
            if self.done.load(SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            if self.done.load(SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    fn stop(&self) {
        self.done.store(true, SeqCst);
        if let Some(w) = self.waker.lock().unwrap().take() {
            w.wake();
        }
    }
}

/// The stack's executor runs on its own thread; the test's thread drives a ping and a TCP connect
/// with a waker that unparks it (no zcnet executor on this thread at all): both time out.
#[test]
fn timed_socket_operations_complete_under_a_foreign_executor() {
    let p = pair(Faults::default(), 64);
    let [a, _b] = p.stacks;
    let exec = p.exec;
    let stop = Arc::new(Stop::default());
    let s = stop.clone();
    let runner = std::thread::spawn(move || exec.block_on(s.wait()));

    let limit = Duration::from_millis(200);
    let patience = Duration::from_secs(10);
    let icmp = IcmpSocket::bind(a, 0x5a5b, IcmpBuffers::with_capacity(4, 1024)).unwrap();
    let mut ping = pin!(icmp.ping(SILENT.into(), 1, b"anyone?", limit));
    let start = exec.now();
    let r = block_on_poll(patience, |cx| ping.as_mut().poll(cx));
    assert_eq!(r, Err(IcmpError::TimedOut));
    assert!(exec.now() - start >= limit);

    let mut tcp = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 4096)).unwrap();
    let mut connect = pin!(tcp.connect_timeout(IpEndpoint::new(SILENT.into(), 80), limit));
    let start = exec.now();
    let r = block_on_poll(patience, |cx| connect.as_mut().poll(cx));
    assert_eq!(r, Err(TcpError::TimedOut));
    assert!(exec.now() - start >= limit);

    stop.stop();
    runner.join().unwrap();
}
