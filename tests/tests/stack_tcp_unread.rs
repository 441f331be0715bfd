//! A server that lets go of a connection whose received data it never read (an iperf3 server at
//! the end of a test: the client's last bytes still in its receive buffer, more queued at the
//! client behind a closed window). Nobody can read that data any more: the stack discards it
//! when the socket drops (its frames go back to the pool, the window opens), and resets the
//! connection when more data comes (RFC 1122, 4.2.2.13), so its pool budget comes back at once
//! too. Kept as a closing connection instead, it would hold its full receive buffer of frames
//! and its budget for as long as the peer keeps probing the zero window, and a listener on a
//! pool budget that fits a few such connections could not re-arm after a few of them. A peer
//! that sends nothing more (a request refused unread) gets the answer and the FIN, no reset.

use std::time::Duration;

use zcnet_executor::time::{sleep, timeout};
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpListener, TcpSocket};
use zcnet_stack::{IpEndpoint, Stack};
use zcnet_tests::audit::assert_slots_back;
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_on_with, Pair, ADDR};
use zcnet_tests::wire::Faults;

const PORT: u16 = 5201;
/// Slots in each stack's pool.
const POOL: usize = 512;
/// The server's receive buffer: much less than a client sends.
const SERVER_RX: usize = 16 * 1024;
/// What a client sends: several times the server's receive buffer.
const CLIENT_SENDS: usize = 8 * SERVER_RX;
/// The server listener's backlog.
const BACKLOG: usize = 2;

fn server_buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(SERVER_RX, 4096))
}

/// Two stacks on virtual time; the server (B) with a TCP pool budget of `server_budget` slots
/// (`None`: the default share).
fn virtual_pair(server_budget: Option<usize>) -> Pair {
    pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        POOL,
        move |i, c| {
            if i == 1 {
                c.tcp_pool_slots = server_budget;
            }
        },
    )
}

/// A client socket on `a` (64 KiB to send) connected to the server.
async fn connect(a: Stack) -> Result<TcpSocket, TcpError> {
    let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 64 * 1024)).unwrap();
    c.connect(IpEndpoint::new(ADDR[1].into(), PORT)).await?;
    Ok(c)
}

/// A client that connects to the server and sends [`CLIENT_SENDS`] bytes, more than the
/// server's window lets through; returns how the writing ended.
async fn flood(a: Stack) -> Result<(), TcpError> {
    let mut c = connect(a).await?;
    c.write_all(&[0x5a; CLIENT_SENDS]).await?;
    // Everything was taken: wait for the end the server chooses.
    let mut buf = [0u8; 64];
    loop {
        if c.read(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}

/// The server side of one flood: accepts, lets the client fill its receive buffer, reads
/// nothing, then closes and drops the socket (as the iperf3 example does with its streams).
async fn accept_and_leave_unread(l: &mut TcpListener) {
    let mut s = l.accept().await.expect("accept");
    sleep(Duration::from_millis(200)).await;
    s.close();
    drop(s);
}

/// One round: a [`flood`] client, the server accepts it on `l` and leaves its data unread;
/// the client must be reset within a second (`round` names the round in the failure).
fn flood_left_unread(p: &Pair, l: &mut TcpListener, round: usize) {
    let [a, b] = p.stacks;
    let client = p.exec.local_spawner().spawn(flood(a));
    p.exec.block_on(async {
        timeout(Duration::from_secs(5), accept_and_leave_unread(l))
            .await
            .unwrap_or_else(|_| panic!("round {round}: not accepted; server {:?}", b.stats()))
    });
    let ended = p
        .exec
        .block_on(async move { timeout(Duration::from_secs(1), client).await });
    assert_eq!(
        ended,
        Ok(Err(TcpError::ConnectionReset)),
        "round {round}: the client was not reset; server {:?}",
        b.stats()
    );
}

/// The server drops a connection with a full receive buffer while the client still has data
/// queued: the client is reset (its write fails at once instead of waiting on a zero window),
/// and every frame of the connection is back in the server's pool right away.
#[test]
fn a_socket_dropped_with_unread_data_resets_and_gives_its_frames_back() {
    let p = virtual_pair(None);
    let b = p.stacks[1];
    let mut l = TcpListener::bind(b, PORT, BACKLOG, server_buffers).unwrap();
    flood_left_unread(&p, &mut l, 0);
    assert_eq!(b.stats().tcp_unread_resets, 1, "{:?}", b.stats());
    p.exec.block_on(sleep(Duration::from_millis(10)));
    drop(l);
    p.exec.block_on(sleep(Duration::from_millis(10)));
    p.assert_slots_back();
}

/// The server reads everything the client sent, then drops the socket (a graceful close: no
/// unread data). The client sends more afterwards: the dropped socket resets the connection
/// instead of queueing data nobody will read until its window closes.
#[test]
fn data_for_a_dropped_socket_resets_the_connection() {
    let p = virtual_pair(None);
    let [a, b] = p.stacks;
    let sp = p.exec.local_spawner();
    let server = sp.spawn(async move {
        let mut l = TcpListener::bind(b, PORT, BACKLOG, server_buffers).unwrap();
        let mut s = l.accept().await.expect("accept");
        let mut buf = [0u8; 5];
        let mut got = 0;
        while got < buf.len() {
            got += s.read(&mut buf[got..]).await.unwrap();
        }
        assert_eq!(&buf, b"hello");
        drop(s);
        l
    });
    let ended = p.exec.block_on(async move {
        let mut c = connect(a).await.unwrap();
        c.write_all(b"hello").await.unwrap();
        // The server's FIN: it read the greeting and let go of the socket.
        let mut buf = [0u8; 8];
        assert_eq!(c.read(&mut buf).await, Ok(0));
        // More data for the dropped socket.
        timeout(Duration::from_secs(5), c.write_all(&[0x5a; CLIENT_SENDS])).await
    });
    let l = p.exec.block_on(server);
    // The write may have been taken whole before the reset came back; the socket then reports
    // the reset on the next operation.
    let ended = match ended {
        Ok(Ok(())) => Err(TcpError::ConnectionReset),
        Ok(Err(e)) => Err(e),
        Err(_) => panic!(
            "the client's write still waits on the dropped socket's window; server {:?}",
            b.stats()
        ),
    };
    assert_eq!(ended, Err::<(), _>(TcpError::ConnectionReset));
    assert_eq!(b.stats().tcp_unread_resets, 1, "{:?}", b.stats());
    p.exec.block_on(sleep(Duration::from_millis(10)));
    // The server's pool: every slot back while the listener still listens.
    assert_slots_back(p.pools[1], 0);
    drop(l);
}

/// Connection after connection left unread on a server whose TCP pool budget fits its
/// listening sockets and one connection more: each connection's budget must come back when
/// the server lets go of it, or the listener cannot re-arm and the third client already finds
/// no listening socket and no room for a SYN cookie's connection.
#[test]
fn connections_left_unread_give_their_budget_back_to_the_listener() {
    let per_socket = server_buffers().unwrap().frames();
    let p = virtual_pair(Some((BACKLOG + 1) * per_socket));
    let b = p.stacks[1];
    let mut l = TcpListener::bind(b, PORT, BACKLOG, server_buffers).unwrap();
    for round in 0..8 {
        flood_left_unread(&p, &mut l, round);
        p.exec.block_on(sleep(Duration::from_millis(10)));
        assert_eq!(l.listening(), BACKLOG, "round {round}: {:?}", b.stats());
        assert_slots_back(p.pools[1], 0);
    }
    let st = b.stats();
    assert_eq!(st.tcp_unread_resets, 8, "{st:?}");
    assert_eq!(st.syn_cookie_accept_drops, 0, "{st:?}");
    drop(l);
    p.exec.block_on(sleep(Duration::from_millis(10)));
    p.assert_slots_back();
}

/// The server reads the start of what the client sent, answers, and drops the socket with the
/// rest unread; the client sends nothing more. The unread data is discarded, the client reads
/// the answer and the FIN (no reset), and the server's slots come back.
#[test]
fn a_request_left_partly_unread_still_gets_its_answer_and_fin() {
    let p = virtual_pair(None);
    let [a, b] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut l = TcpListener::bind(b, PORT, BACKLOG, server_buffers).unwrap();
        let mut s = l.accept().await.expect("accept");
        // Everything the client sent arrives meanwhile.
        sleep(Duration::from_millis(100)).await;
        let mut head = [0u8; 16];
        let n = s.read(&mut head).await.unwrap();
        assert!(n > 0);
        s.write_all(b"413 too long").await.unwrap();
        drop(s);
        l
    });
    let got = p.exec.block_on(async move {
        let mut c = connect(a).await.unwrap();
        c.write_all(&[0x5a; SERVER_RX / 2]).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            match timeout(Duration::from_secs(5), c.read(&mut buf)).await {
                Ok(Ok(0)) => return Ok(got),
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                Ok(Err(e)) => return Err(e),
                Err(_) => panic!("no FIN from the server; server {:?}", b.stats()),
            }
        }
    });
    assert_eq!(got, Ok(b"413 too long".to_vec()));
    let l = p.exec.block_on(server);
    assert_eq!(b.stats().tcp_unread_resets, 0, "{:?}", b.stats());
    p.exec.block_on(sleep(Duration::from_millis(10)));
    assert_slots_back(p.pools[1], 0);
    drop(l);
}
