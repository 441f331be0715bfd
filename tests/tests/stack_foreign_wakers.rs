//! The stack's timed socket operations polled under wakers that are not the executor's own:
//! inside a `FuturesUnordered` (which polls each future with a waker of its own that wraps the
//! task's), and by a foreign executor on the stack's thread, with a waker that unparks it. A TCP
//! connect to a silent address, a DNS query to a silent server and a ping into the void each
//! end with their timeout error, after their time limit on the stack's executor's clock.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use zcnet_executor::Executor;
use zcnet_stack::dns::{DnsError, DnsKind, DnsSocket};
use zcnet_stack::icmp::{IcmpBuffers, IcmpError, IcmpSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpSocket};
use zcnet_stack::{IpEndpoint, Ipv4Address};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair, pair_on_with};
use zcnet_tests::wakers::ThreadWaker;
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

/// The test's thread acts as a foreign executor: it polls a ping and a TCP connect with a waker
/// that unparks it (not a zcnet waker), and in between runs the stack's executor with
/// `run_until_idle` (which never waits) on the same thread, where the stack's state lives. Each
/// operation is polled again only after its waker was woken, so a lost wakeup fails the test:
/// both time out.
#[test]
fn timed_socket_operations_complete_under_a_foreign_executor() {
    let p = pair(Faults::default(), 64);
    let [a, _b] = p.stacks;
    let exec = p.exec;

    let limit = Duration::from_millis(200);
    let patience = Duration::from_secs(10);
    let icmp = IcmpSocket::bind(a, 0x5a5b, IcmpBuffers::with_capacity(4, 1024)).unwrap();
    let mut ping = pin!(icmp.ping(SILENT.into(), 1, b"anyone?", limit));
    let start = exec.now();
    let r = poll_on_wakes(exec, patience, |cx| ping.as_mut().poll(cx));
    assert_eq!(r, Err(IcmpError::TimedOut));
    assert!(exec.now() - start >= limit);

    let mut tcp = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 4096)).unwrap();
    let mut connect = pin!(tcp.connect_timeout(IpEndpoint::new(SILENT.into(), 80), limit));
    let start = exec.now();
    let r = poll_on_wakes(exec, patience, |cx| connect.as_mut().poll(cx));
    assert_eq!(r, Err(TcpError::TimedOut));
    assert!(exec.now() - start >= limit);
}

/// Polls `f` with a thread-unparking waker until it is ready, running `exec`'s ready tasks and
/// due timers between polls, and polling `f` again only once its waker was woken. Panics if
/// `f` is not ready within `patience` (a lost wakeup).
fn poll_on_wakes<T>(
    exec: &'static Executor,
    patience: Duration,
    mut f: impl FnMut(&mut std::task::Context<'_>) -> Poll<T>,
) -> T {
    let (handle, waker) = ThreadWaker::current();
    let mut cx = std::task::Context::from_waker(&waker);
    let start = std::time::Instant::now();
    let mut seen = handle.wakes();
    if let Poll::Ready(v) = f(&mut cx) {
        return v;
    }
    loop {
        exec.run_until_idle();
        let now = handle.wakes();
        if now != seen {
            seen = now;
            if let Poll::Ready(v) = f(&mut cx) {
                return v;
            }
        } else {
            std::thread::park_timeout(Duration::from_millis(1));
        }
        assert!(
            start.elapsed() < patience,
            "not woken to completion within {patience:?}: a lost wakeup"
        );
    }
}
