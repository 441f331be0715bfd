//! A [`TcpListener`] on a small socket table. Connections the server closed first (TIME-WAIT
//! orphans) give their slots up to the listener, so a server answering `Connection: close` keeps
//! accepting at full speed; when open connections hold every slot the listener cannot re-arm,
//! and once one is freed it must re-arm and accept again without anyone polling it for another
//! reason. Listening sockets held by handshakes that never complete listen again after
//! `HANDSHAKE_TIMEOUT`.

use std::time::Duration;

use zcnet_executor::time::timeout;
use zcnet_executor::{Executor, JoinHandle};
use zcnet_stack::tcp::{TcpBuffers, TcpListener, TcpSocket, HANDSHAKE_TIMEOUT};
use zcnet_stack::{DropReason, IpEndpoint, Stack};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_sized, pair_sizes, Pair, ADDR};
use zcnet_tests::wire::Faults;

/// Socket slots of the server's stack: room for the listener's backlog plus as many
/// connections.
const SLOTS: usize = 8;
/// The listener's backlog.
const BACKLOG: usize = 4;
const PORT: u16 = 8080;

fn buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(256, 256))
}

/// Connects to the server and sends `GET /i`.
async fn open(a: Stack, i: usize) -> TcpSocket {
    let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(256, 256)).unwrap();
    c.connect(IpEndpoint::new(ADDR[1].into(), PORT))
        .await
        .unwrap();
    c.write_all(format!("GET /{i}").as_bytes()).await.unwrap();
    c
}

/// Reads until the server's FIN.
async fn read_to_end(c: &mut TcpSocket) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        let n = c.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// One `Connection: close` exchange: connect, send a request, read the answer to the server's
/// FIN, close. Returns the answer.
async fn exchange(a: Stack, i: usize) -> Vec<u8> {
    let mut c = open(a, i).await;
    let got = read_to_end(&mut c).await;
    c.close();
    c.closed().await;
    got
}

/// The server's side of one exchange: reads a request and answers "ok " followed by it. Returns
/// the read buffer for further use.
async fn answer(s: &mut TcpSocket) -> [u8; 64] {
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).await.unwrap();
    let mut answer = b"ok ".to_vec();
    answer.extend_from_slice(&buf[..n]);
    s.write_all(&answer).await.unwrap();
    buf
}

/// Runs the server on `p`'s stack B: a listener on [`PORT`] whose connections each get one
/// [`answer`] and are closed (dropped while closing: the stack finishes the close, TIME-WAIT
/// included, as an orphan).
fn spawn_answering_server(p: &Pair) -> JoinHandle<()> {
    let b = p.stacks[1];
    let sp = p.exec.local_spawner();
    sp.spawn(async move {
        let mut l = TcpListener::bind(b, PORT, BACKLOG, buffers).unwrap();
        loop {
            let mut s = l.accept().await.expect("accept");
            sp.spawn(async move {
                answer(&mut s).await;
                s.close();
            });
        }
    })
}

/// A client stack with room for more connections than the server's table of [`SLOTS`], on
/// virtual time; the server with SYN cookies on or off (`cookies`).
fn server_pair(cookies: bool) -> Pair {
    pair_sizes::<32, SLOTS>(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        128,
        |_, c| c.syn_cookies = cookies,
    )
}

/// The server closes first (as an HTTP server answering `Connection: close` does), so each
/// connection it served sits in TIME-WAIT (10 s in smoltcp) as an orphan. With 8 slots and a
/// backlog of 4, the fifth connection already finds the table full when the listener replaces
/// its listening socket, and the ninth would find no listening socket at all: its SYN dropped,
/// retried until a TIME-WAIT expired, 10 s later. A TIME-WAIT orphan gives its slot up
/// instead, so three tables' worth of sequential clients are each served at once.
#[test]
fn time_wait_orphans_give_their_slots_to_the_listener() {
    let p = pair_sized::<SLOTS>(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        128,
        |_, _| {},
    );
    let [a, b] = p.stacks;
    let server = spawn_answering_server(&p);

    for i in 0..3 * SLOTS {
        let got = p.exec.block_on(async move {
            // Virtual time: a dropped SYN would cost the client a 1 s retransmission timeout
            // at least; nothing here waits for a timer.
            timeout(Duration::from_millis(500), exchange(a, i))
                .await
                .unwrap_or_else(|_| panic!("client {i} served at once; server {:?}", b.stats()))
        });
        assert_eq!(got, format!("ok GET /{i}").into_bytes());
    }
    let st = b.stats();
    assert_eq!(st.dropped(DropReason::BacklogFull), 0, "{st:?}");
    assert_eq!(st.listener_rearm_failures, 0, "{st:?}");
    // 4 listening sockets + 4 TIME-WAIT orphans fill the table after 4 clients; every later
    // client's replacement listening socket takes an orphan's slot.
    assert_eq!(
        st.time_wait_evictions,
        (3 * SLOTS - BACKLOG) as u64,
        "{st:?}"
    );
    drop(server);
}

/// Open connections are never evicted: clients that keep theirs open take every slot of the
/// server's table, the listener runs out of listening sockets (re-arming fails, counted) and the
/// next client's SYNs are dropped. When one client closes, the server's socket finishes its
/// close and frees its slot; that must wake the listener's pending `accept` to re-arm, and the
/// waiting client is served on its next SYN. (SYN cookies are off: they would answer the
/// dropped SYNs.)
#[test]
fn listener_rearms_when_a_slot_is_freed() {
    client_waits_for_a_slot(false);
}

/// [`listener_rearms_when_a_slot_is_freed`] with SYN cookies on: the further client's SYN gets
/// a cookie, but its ACK and data find no socket slot (dropped, counted); once a slot is free,
/// its retransmitted data brings the cookie back and it is served.
#[test]
fn a_cookie_client_is_served_once_a_slot_is_freed() {
    client_waits_for_a_slot(true);
}

/// Every slot held by open connections, a further client waits; one held client closes and
/// the waiting one is served.
fn client_waits_for_a_slot(cookies: bool) {
    let p = server_pair(cookies);
    let [a, b] = p.stacks;
    let sp = p.exec.local_spawner();
    let server = sp.spawn(async move {
        let mut l = TcpListener::bind(b, PORT, BACKLOG, buffers).unwrap();
        loop {
            let mut s = l.accept().await.expect("accept");
            sp.spawn(async move {
                let mut buf = answer(&mut s).await;
                // Keep the connection until the client closes it, then close our half.
                while s.read(&mut buf).await.unwrap_or(0) > 0 {}
                s.close();
            });
        }
    });

    // SLOTS clients each hold a connection: the server's table holds only connections.
    let mut held = Vec::new();
    for i in 0..SLOTS {
        let mut c = p.exec.block_on(async move {
            timeout(Duration::from_secs(2), open(a, i))
                .await
                .unwrap_or_else(|_| panic!("held client {i} connected; server {:?}", b.stats()))
        });
        let mut buf = [0u8; 64];
        let n = p.exec.block_on(async { c.read(&mut buf).await.unwrap() });
        assert_eq!(&buf[..n], format!("ok GET /{i}").as_bytes());
        held.push(c);
    }
    let st = b.stats();
    assert!(
        st.listener_rearm_failures > 0,
        "the listener ran short: {st:?}"
    );
    assert_eq!(st.time_wait_evictions, 0, "{st:?}");

    // A further client finds no listening socket: its SYNs are dropped while the table is full.
    let waiting = sp.spawn(async move {
        let mut c = open(a, 100).await;
        let mut buf = [0u8; 64];
        let n = c.read(&mut buf).await.unwrap();
        buf[..n].to_vec()
    });
    p.exec
        .block_on(zcnet_executor::time::sleep(Duration::from_secs(5)));
    let st = b.stats();
    if cookies {
        assert_eq!(st.dropped(DropReason::BacklogFull), 0, "{st:?}");
        assert!(st.syn_cookie_accept_drops > 0, "no slot for it: {st:?}");
    } else {
        assert!(
            st.dropped(DropReason::BacklogFull) > 0,
            "the waiting client's SYN met a full backlog"
        );
    }

    // One held client closes: the server's socket closes too and is removed, which must wake
    // the listener to re-arm; the waiting client is served on its next SYN retransmission.
    let mut first = held.remove(0);
    p.exec.block_on(async move {
        first.close();
        first.closed().await;
    });
    let got = p.exec.block_on(async move {
        timeout(Duration::from_secs(30), waiting)
            .await
            .unwrap_or_else(|_| panic!("waiting client served after a slot freed; {:?}", b.stats()))
    });
    assert_eq!(got, b"ok GET /100".to_vec());
    drop(held);
    drop(server);
}

/// Clients that send their SYN and vanish (a SYN flood from spoofed addresses looks the same)
/// put every listening socket in SYN-RECEIVED, waiting for an ACK that never comes: the next
/// client's SYN meets a full backlog. After [`HANDSHAKE_TIMEOUT`] without a word from their
/// peers those sockets give the handshake up and listen again, so a client arriving later is
/// served on its first SYN. (SYN cookies are off: they would answer the SYN that meets the
/// full backlog, see `attack_syn_cookies.rs`.)
#[test]
fn half_open_handshakes_give_their_listening_sockets_back() {
    let p = server_pair(false);
    let [a, b] = p.stacks;
    let sp = p.exec.local_spawner();
    let server = spawn_answering_server(&p);
    // One exchange first, so both sides know each other's MAC.
    let got = p.exec.block_on(exchange(a, 0));
    assert_eq!(got, b"ok GET /0".to_vec());

    // The server's SYN-ACKs are lost from now on: BACKLOG clients' SYNs arrive, then the
    // clients vanish (their aborts lost too), and one more SYN meets a full backlog.
    p.ends[1].set_cut(true);
    let vanishing: Vec<_> = (1..=BACKLOG + 1)
        .map(|i| {
            sp.spawn(async move {
                let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(256, 256)).unwrap();
                let r = c
                    .connect_timeout(
                        IpEndpoint::new(ADDR[1].into(), PORT),
                        Duration::from_secs(3),
                    )
                    .await;
                assert!(r.is_err(), "client {i} got no SYN-ACK");
            })
        })
        .collect();
    p.exec
        .block_on(zcnet_executor::time::sleep(Duration::from_millis(100)));
    assert_eq!(
        b.stats().dropped(DropReason::BacklogFull),
        1,
        "{:?}",
        b.stats()
    );
    p.ends[0].set_cut(true);
    for c in vanishing {
        p.exec.block_on(c);
    }

    // Past the handshake timeout, with the wire whole again, a new client is served at once
    // (a SYN dropped for a full backlog would cost it a 1 s retransmission).
    p.exec
        .block_on(zcnet_executor::time::sleep(HANDSHAKE_TIMEOUT));
    p.ends[0].set_cut(false);
    p.ends[1].set_cut(false);
    let got = p.exec.block_on(async move {
        timeout(Duration::from_millis(500), exchange(a, 100))
            .await
            .unwrap_or_else(|_| panic!("client served at once; server {:?}", b.stats()))
    });
    assert_eq!(got, b"ok GET /100".to_vec());
    assert_eq!(
        b.stats().dropped(DropReason::BacklogFull),
        1,
        "{:?}",
        b.stats()
    );
    drop(server);
}
