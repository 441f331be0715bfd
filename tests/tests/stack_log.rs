//! The stack's log lines (feature `log`, which this crate turns on): two stacks over the
//! in-memory wire, recorded by a capturing logger ([`LogCapture`]) on the test's thread. TCP
//! connections opened, accepted and closed, refused, reset, aborted and timed out; a SYN
//! dropped for a full backlog; the link going down and up; the stacks' creation.

use std::time::Duration;

use log::Level;
use zcnet_buffer::LinkState;
use zcnet_executor::time::timeout;
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpListener, TcpSocket};
use zcnet_stack::{IpEndpoint, Ipv4Address, Stack};
use zcnet_tests::cable::cable_pair;
use zcnet_tests::log_capture::LogCapture;
use zcnet_tests::net::{pair, pair_with, ADDR};
use zcnet_tests::wire::Faults;

const TCP: &str = "zcnet_stack::tcp";
const DROP: &str = "zcnet_stack::drop";
const LINK: &str = "zcnet_stack::link";
const STACK: &str = "zcnet_stack";

fn socket(stack: Stack) -> TcpSocket {
    TcpSocket::new(stack, TcpBuffers::with_capacity(16384, 16384)).unwrap()
}

fn buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(4096, 4096))
}

fn b_at(port: u16) -> IpEndpoint {
    IpEndpoint::new(ADDR[1].into(), port)
}

/// A connection through a listener, data, an orderly close; then a connect to a closed port.
#[test]
fn connect_accept_close_and_a_refused_connect_are_logged() {
    let log = LogCapture::start();
    let p = pair(Faults::default(), 256);
    let [a, b] = p.stacks;
    log.expect(
        Level::Info,
        STACK,
        "stack created: hardware address 02-00-00-00-00-01",
    );
    log.expect(Level::Info, STACK, "address 10.0.0.2/24");

    let server = p.exec.local_spawner().spawn(async move {
        let mut l = TcpListener::bind(b, 7400, 2, buffers).unwrap();
        let mut s = l.accept().await.expect("accept");
        let mut buf = [0u8; 64];
        while s.read(&mut buf).await.unwrap() > 0 {}
        s.close();
        s.closed().await;
    });
    let (port, refused) = p.exec.block_on(async move {
        let mut c = socket(a);
        c.connect(b_at(7400)).await.unwrap();
        let port = c.local_endpoint().unwrap().port;
        c.write_all(b"hello").await.unwrap();
        c.close();
        c.closed().await;
        let mut r = socket(a);
        let refused = r.connect(b_at(7401)).await;
        (port, refused)
    });
    p.exec.block_on(server);
    assert_eq!(refused, Err(TcpError::ConnectionRefused));

    let client = format!("TCP 10.0.0.1:{port} -> 10.0.0.2:7400: ");
    let server = format!("TCP 10.0.0.2:7400 -> 10.0.0.1:{port}: ");
    log.expect(Level::Debug, TCP, &format!("{client}connecting"));
    log.expect(
        Level::Debug,
        TCP,
        &format!("{client}established (our connect)"),
    );
    log.expect(
        Level::Debug,
        TCP,
        &format!("{server}established (the peer's connect)"),
    );
    log.expect(
        Level::Debug,
        TCP,
        &format!("{server}accepted by the application"),
    );
    log.expect(
        Level::Debug,
        TCP,
        &format!("{server}the peer closed its side"),
    );
    // The client closed first, so it waits in TIME-WAIT; the server's close completes.
    log.expect(Level::Debug, TCP, &format!("{client}closed (TIME-WAIT)"));
    log.expect(Level::Debug, TCP, &format!("{server}closed"));
    // State changes beyond those are traced.
    log.expect(Level::Trace, TCP, "TCP port 7400: CLOSED -> LISTEN");
    log.expect(
        Level::Trace,
        TCP,
        &format!("{client}ESTABLISHED -> FIN-WAIT-1"),
    );

    // The refused connect: the RST on A, the segment nobody took on B.
    log.expect(Level::Debug, TCP, "-> 10.0.0.2:7401: refused (RST)");
    log.expect(
        Level::Debug,
        DROP,
        "dropped 1 frame(s): no_socket (1 so far)",
    );
    assert!(
        log.matching(TCP, ": reset by the peer").is_empty(),
        "a refused connect is not a reset:\n{}",
        log.dump()
    );
    // Nothing was dropped for want of resources, so nothing above debug but the creation.
    let loud: Vec<_> = log
        .records()
        .into_iter()
        .filter(|c| c.level <= Level::Info && c.target != STACK)
        .collect();
    assert!(loud.is_empty(), "unexpected: {loud:?}");
}

/// One side aborts: it logs the abort, the other side the reset. A connect to a host that never
/// answers times out (`connect_timeout`), and one whose peer went silent times out on the
/// socket's own timeout.
#[test]
fn resets_aborts_and_timeouts_are_logged_with_their_cause() {
    let log = LogCapture::start();
    let p = pair(Faults::default(), 256);
    let [a, b] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = socket(b);
        s.accept(7410).await.unwrap();
        let mut buf = [0u8; 4];
        s.read(&mut buf).await.unwrap();
        s.abort();
    });
    let ends = p.ends;
    let (port, absent, silent) = p.exec.block_on(async move {
        let mut c = socket(a);
        c.connect(b_at(7410)).await.unwrap();
        let port = c.local_endpoint().unwrap().port;
        c.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(c.read(&mut buf).await, Err(TcpError::ConnectionReset));

        let nobody = IpEndpoint::new(Ipv4Address::new(10, 0, 0, 99).into(), 80);
        let mut t = socket(a);
        let absent = t.connect_timeout(nobody, Duration::from_millis(200)).await;

        let mut u = socket(a);
        u.set_timeout(Some(Duration::from_millis(300)));
        ends[0].set_cut(true);
        let silent = timeout(Duration::from_secs(5), u.connect(b_at(7411))).await;
        ends[0].set_cut(false);
        (port, absent, silent)
    });
    p.exec.block_on(server);
    assert_eq!(absent, Err(TcpError::TimedOut));
    assert_eq!(silent, Ok(Err(TcpError::TimedOut)));

    log.expect(
        Level::Debug,
        TCP,
        &format!("TCP 10.0.0.2:7410 -> 10.0.0.1:{port}: aborted in ESTABLISHED"),
    );
    log.expect(
        Level::Debug,
        TCP,
        &format!("TCP 10.0.0.1:{port} -> 10.0.0.2:7410: reset by the peer in ESTABLISHED"),
    );
    log.expect(
        Level::Debug,
        TCP,
        "-> 10.0.0.99:80: connect timed out in SYN-SENT",
    );
    log.expect(Level::Debug, TCP, "-> 10.0.0.2:7411: timed out in SYN-SENT");
}

/// A listener whose backlog is taken, SYN cookies off: the SYN is dropped, and the first such
/// drop is a warning.
#[test]
fn a_syn_dropped_for_a_full_backlog_is_a_warning() {
    let log = LogCapture::start();
    let p = pair_with(Faults::default(), 256, |_, c| c.syn_cookies = false);
    let [a, b] = p.stacks;
    p.exec.block_on(async move {
        // Backlog 1, never accepted: the first connection takes the one listening socket.
        let _l = TcpListener::bind(b, 7420, 1, buffers).unwrap();
        let mut first = socket(a);
        first.connect(b_at(7420)).await.unwrap();
        let mut second = socket(a);
        let r = second
            .connect_timeout(b_at(7420), Duration::from_millis(300))
            .await;
        assert_eq!(r, Err(TcpError::TimedOut));
    });
    log.expect(
        Level::Warn,
        DROP,
        "dropped 1 frame(s): backlog_full (1 so far)",
    );
}

/// A listener whose backlog is taken, SYN cookies on: the SYN gets a cookie (the first one
/// sent is a warning) and the client connects.
#[test]
fn a_syn_answered_with_a_cookie_is_a_warning() {
    let log = LogCapture::start();
    let p = pair(Faults::default(), 256);
    let [a, b] = p.stacks;
    p.exec.block_on(async move {
        // Backlog 1, never accepted: the first connection takes the one listening socket.
        let _l = TcpListener::bind(b, 7421, 1, buffers).unwrap();
        let mut first = socket(a);
        first.connect(b_at(7421)).await.unwrap();
        let mut second = socket(a);
        let r = second
            .connect_timeout(b_at(7421), Duration::from_millis(300))
            .await;
        assert_eq!(r, Ok(()));
    });
    log.expect(
        Level::Warn,
        TCP,
        "TCP listener on port 7421: backlog full, SYNs answered with cookies (1 so far)",
    );
}

/// The link going down and coming back is logged by both stacks: a warning, then info.
#[test]
fn link_changes_are_logged() {
    let log = LogCapture::start();
    let s = cable_pair();
    let [a, b] = s.stacks;
    let cable = s.cable;
    s.exec.block_on(async move {
        cable.set(false);
        for stack in [a, b] {
            timeout(Duration::from_secs(2), stack.wait_link(LinkState::Down))
                .await
                .expect("link down seen");
        }
        cable.set(true);
        for stack in [a, b] {
            timeout(Duration::from_secs(2), stack.wait_link(LinkState::Up))
                .await
                .expect("link up seen");
        }
    });
    let down = log.matching(LINK, "link down");
    let up = log.matching(LINK, "link up");
    assert_eq!(down.len(), 2, "one per stack:\n{}", log.dump());
    assert_eq!(up.len(), 2, "one per stack:\n{}", log.dump());
    assert!(down.iter().all(|c| c.level == Level::Warn));
    assert!(up.iter().all(|c| c.level == Level::Info));
}
