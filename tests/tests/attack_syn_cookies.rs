//! A SYN flood against a listener (RFC 4987), made over the in-memory wire with crafted frames:
//! SYNs from many forged sources that never complete hold every listening socket, yet a real
//! client still connects (through a SYN cookie) and exchanges data both ways; its window scale
//! and SACK survive when it offered timestamps; forged final ACKs make nothing and are
//! counted; cookies expire; the connections cookies make wait for `accept` within the backlog.
//!
//! The stack runs on a virtual clock, with a secret made from a fixed seed, so every run
//! repeats.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use smoltcp::wire::{
    EthernetAddress, Ipv4Address, TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr,
};
use zcnet_stack::tcp::{TcpBuffers, TcpListener};
use zcnet_stack::DropReason;
use zcnet_tests::craft::{
    arp_answer, arp_request, tcp_frame, tcp_in, Host, WireTarget, PEER, STACK,
};

/// The port the stack listens on.
const PORT: u16 = 80;
/// The listener's backlog: the flood holds all of its listening sockets.
const BACKLOG: usize = 4;
/// Forged sources in the flood (on the stack's /24, not real hosts).
const FLOOD: u8 = 40;

fn seq(n: u32) -> TcpSeqNumber {
    TcpSeqNumber(n as i32)
}

/// A forged host: 10.0.0.(100 + i), a MAC nobody has.
fn forged(i: u8) -> Host {
    Host {
        mac: EthernetAddress([0x02, 0, 0, 0, 0x66, i]),
        ip: Ipv4Address::new(10, 0, 0, 100 + i),
    }
}

/// A client's segment: its options only on a SYN, but the timestamp (when it uses them) on
/// every segment.
#[derive(Clone, Copy, Debug)]
struct Peer {
    host: Host,
    port: u16,
    /// Offer timestamps (with window scale 7 and SACK) on the SYN.
    options: bool,
    /// The window field of every segment.
    window: u16,
    /// Its next TSval.
    tsval: u32,
    /// The TSval to echo.
    tsecr: u32,
}

impl Peer {
    fn new(host: Host, port: u16, options: bool) -> Peer {
        Peer {
            host,
            port,
            options,
            window: 8192,
            tsval: 5000,
            tsecr: 0,
        }
    }

    fn frame(
        &mut self,
        control: TcpControl,
        seq_no: u32,
        ack: Option<u32>,
        data: &[u8],
    ) -> Vec<u8> {
        let syn = control == TcpControl::Syn;
        self.tsval += 1;
        let tcp = TcpRepr {
            src_port: self.port,
            dst_port: PORT,
            control,
            seq_number: seq(seq_no),
            ack_number: ack.map(seq),
            window_len: self.window,
            window_scale: (syn && self.options).then_some(7),
            max_seg_size: syn.then_some(1460),
            sack_permitted: syn && self.options,
            sack_ranges: [None; 3],
            timestamp: self
                .options
                .then(|| TcpTimestampRepr::new(self.tsval, self.tsecr)),
            payload: data,
        };
        tcp_frame(self.host, STACK, &tcp)
    }
}

/// A stack listening on [`PORT`] with a backlog of [`BACKLOG`], the test on the wire.
struct Target {
    wire: WireTarget,
    listener: Option<TcpListener>,
}

impl Target {
    fn new(cookies: bool) -> Target {
        let wire = WireTarget::with_config::<32>(0x4987, 512, |c| c.syn_cookies = cookies);
        let listener = TcpListener::bind(wire.stack, PORT, BACKLOG, || {
            Some(TcpBuffers::with_capacity(8192, 8192))
        })
        .expect("listener");
        let mut t = Target {
            wire,
            listener: Some(listener),
        };
        t.wire.send(&arp_request(PEER, STACK.ip));
        t
    }

    /// SYNs from `n` forged sources (ports 1024 + k), none of which ever answers.
    fn flood(&mut self, first: u8, n: u8) {
        for k in first..first + n {
            let mut p = Peer::new(forged(k), 1024 + u16::from(k), k % 2 == 0);
            let f = p.frame(TcpControl::Syn, 77_000 * u32::from(k), None, &[]);
            self.wire.send(&f);
        }
        // Let the stack take them (its answers go nowhere: nobody answers its ARP requests).
        while self.wire.recv(Duration::from_millis(10)).is_some() {}
    }

    /// The next segment the stack sends to `p` within `within` of virtual time (others are
    /// skipped), with its payload.
    fn next_to(&mut self, p: &Peer, within: Duration) -> Option<(TcpRepr<'static>, Vec<u8>)> {
        let until = self.wire.exec.now() + within;
        loop {
            let left = until.saturating_duration_since(self.wire.exec.now());
            let frame = self.wire.recv(left)?;
            // The client answers the stack's ARP requests for it, as a real host does (the
            // flood's answers may have pushed it out of the neighbour table).
            if let Some(reply) = arp_answer(p.host, &frame) {
                self.wire.send(&reply);
                continue;
            }
            let Some(s) = tcp_in(&frame) else {
                continue;
            };
            if s.dst != p.host.ip || s.tcp.dst_port != p.port {
                continue;
            }
            let payload = s.tcp.payload.to_vec();
            return Some((
                TcpRepr {
                    payload: &[],
                    ..s.tcp
                },
                payload,
            ));
        }
    }

    /// The next segment with data the stack sends to `p` within a second (bare ACKs are
    /// skipped): its header and the data.
    fn next_data(&mut self, p: &Peer) -> (TcpRepr<'static>, Vec<u8>) {
        loop {
            let got = self.next_to(p, Duration::from_secs(1)).expect("data");
            if !got.1.is_empty() {
                return got;
            }
        }
    }

    /// Sends `p`'s SYN (ISN `isn`) and returns the stack's SYN-ACK.
    fn syn(&mut self, p: &mut Peer, isn: u32) -> TcpRepr<'static> {
        let f = p.frame(TcpControl::Syn, isn, None, &[]);
        self.wire.send(&f);
        let (synack, _) = self.next_to(p, Duration::from_secs(1)).expect("a SYN-ACK");
        assert_eq!(synack.control, TcpControl::Syn, "{synack:?}");
        assert_eq!(synack.ack_number, Some(seq(isn + 1)));
        if let Some(ts) = synack.timestamp {
            p.tsecr = ts.tsval;
        }
        synack
    }

    fn stats(&self) -> zcnet_stack::StackStats {
        self.wire.stack.stats()
    }
}

/// The accepted connections' server: each reads what comes and answers it upper-cased, and
/// answers "big" with 3000 bytes. The connections it accepted are counted.
fn serve(t: &mut Target) -> Rc<RefCell<usize>> {
    let accepted = Rc::new(RefCell::new(0));
    let count = accepted.clone();
    let mut listener = t.listener.take().expect("the listener");
    let sp = t.wire.exec.local_spawner();
    t.wire.exec.local_spawner().spawn(async move {
        while let Ok(mut s) = listener.accept().await {
            *count.borrow_mut() += 1;
            sp.spawn(async move {
                let mut buf = [0u8; 256];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let answer = if &buf[..n] == b"big" {
                        vec![b'x'; 3000]
                    } else {
                        buf[..n].to_ascii_uppercase()
                    };
                    if s.write_all(&answer).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    accepted
}

/// With every listening socket held by forged SYNs, a real client's SYN gets a cookie; its ACK
/// makes a connection the server accepts, and data goes both ways. With timestamps its window
/// scale (7) and SACK survive: the stack sends 3000 bytes into a window field of 100 (12800
/// bytes scaled, 100 not), and answers out-of-order data with a SACK block. Without
/// timestamps, the SYN-ACK offers neither, and the connection works with the MSS alone.
#[test]
fn a_real_client_gets_through_a_syn_flood_with_its_options() {
    let mut t = Target::new(true);
    let accepted = serve(&mut t);
    t.flood(0, FLOOD);
    let s = t.stats();
    assert_eq!(
        s.syn_cookies_sent,
        u64::from(FLOOD) - BACKLOG as u64,
        "every forged SYN past the backlog got a cookie: {s:?}"
    );
    assert_eq!(s.dropped(DropReason::BacklogFull), 0);

    // A client with timestamps, window scale and SACK.
    let mut c = Peer::new(PEER, 40000, true);
    c.window = 100;
    let synack = t.syn(&mut c, 1000);
    assert_eq!(t.stats().syn_cookies_sent, s.syn_cookies_sent + 1);
    assert_eq!(synack.max_seg_size, Some(1460));
    assert_eq!(synack.window_scale, Some(0), "8 KiB buffers need no scale");
    assert!(synack.sack_permitted);
    let ts = synack.timestamp.expect("a timestamp");
    // Window scale 7 (low four bits) and SACK (bit 4) in the TSval's low six bits.
    assert_eq!(ts.tsval & 0x3f, 7 | 0x10, "{ts:?}");
    let snd = (synack.seq_number.0 as u32).wrapping_add(1);
    let f = c.frame(TcpControl::None, 1001, Some(snd), &[]);
    t.wire.send(&f);
    let f = c.frame(TcpControl::Psh, 1001, Some(snd), b"hello");
    t.wire.send(&f);
    let (got, data) = t.next_data(&c);
    assert_eq!(data, b"HELLO", "{got:?}");
    assert_eq!(got.ack_number, Some(seq(1006)));
    assert_eq!(*accepted.borrow(), 1);
    let s = t.stats();
    assert_eq!((s.syn_cookies_validated, s.syn_cookies_rejected), (1, 0));

    // The window scale survived: two full segments go out at once into a window field of 100
    // (Nagle holds the 104-byte tail until they are acknowledged; unscaled, 100 bytes would
    // go), and the tail follows their acknowledgement.
    let snd = snd.wrapping_add(5);
    let f = c.frame(TcpControl::Psh, 1006, Some(snd), b"big");
    t.wire.send(&f);
    let mut far = 0;
    while let Some((h, data)) = t.next_to(&c, Duration::from_millis(50)) {
        let seg_end = (h.seq_number.0 as u32).wrapping_add(data.len() as u32);
        far = far.max(seg_end.wrapping_sub(snd));
    }
    assert_eq!(far, 2 * 1448, "in flight within a window of 100 << 7");
    let end = snd.wrapping_add(far);
    let f = c.frame(TcpControl::None, 1009, Some(end), &[]);
    t.wire.send(&f);
    let (h, data) = t.next_data(&c);
    assert_eq!((h.seq_number, data.len()), (seq(end), 3000 - 2 * 1448));
    // SACK survived: data past a hole is answered with a SACK block.
    let snd = snd.wrapping_add(3000);
    let f = c.frame(TcpControl::Psh, 1019, Some(snd), b"later");
    t.wire.send(&f);
    let (ack, _) = t.next_to(&c, Duration::from_secs(1)).expect("an ACK");
    assert_eq!(ack.ack_number, Some(seq(1009)));
    assert_eq!(ack.sack_ranges[0], Some((1019, 1024)), "{ack:?}");

    // A client without timestamps: MSS only.
    let mut d = Peer::new(PEER, 40001, false);
    let synack = t.syn(&mut d, 9000);
    assert_eq!(synack.max_seg_size, Some(1460));
    assert_eq!(
        (synack.window_scale, synack.sack_permitted, synack.timestamp),
        (None, false, None)
    );
    let snd = (synack.seq_number.0 as u32).wrapping_add(1);
    let f = d.frame(TcpControl::Psh, 9001, Some(snd), b"plain");
    t.wire.send(&f);
    let (_, data) = t.next_data(&d);
    assert_eq!(data, b"PLAIN");
    assert_eq!(*accepted.borrow(), 2);
    assert_eq!(t.stats().syn_cookies_validated, 2);
}

/// The same flood with cookies off: the real client's SYN is dropped (its backlog is full),
/// and so are its retries for as long as the forged SYNs hold the listening sockets.
#[test]
fn without_cookies_the_flood_locks_the_client_out() {
    let mut t = Target::new(false);
    let _accepted = serve(&mut t);
    t.flood(0, FLOOD);
    let mut c = Peer::new(PEER, 40000, true);
    for _ in 0..3 {
        let f = c.frame(TcpControl::Syn, 1000, None, &[]);
        t.wire.send(&f);
        assert!(t.next_to(&c, Duration::from_secs(5)).is_none(), "no answer");
    }
    let s = t.stats();
    assert_eq!(s.syn_cookies_sent, 0);
    assert_eq!(s.dropped(DropReason::BacklogFull), u64::from(FLOOD) - 4 + 3);
}

/// Final ACKs that do not bring a valid cookie back make nothing: one with a made-up
/// acknowledgement, one off by one, a valid cookie from another port or with another sequence
/// number, and a valid cookie too old. Each is answered with a reset and counted; a segment on
/// the same four-tuple afterwards finds no connection. The valid ACK then connects.
#[test]
fn forged_final_acks_make_nothing_and_are_counted() {
    let mut t = Target::new(true);
    let accepted = serve(&mut t);
    t.flood(0, FLOOD);

    let mut c = Peer::new(PEER, 40000, true);
    let synack = t.syn(&mut c, 1000);
    let cookie = synack.seq_number.0 as u32;
    let mut rejected = 0;
    let mut refused = |t: &mut Target, p: &mut Peer, seq_no: u32, ack: u32, what: &str| {
        let f = p.frame(TcpControl::None, seq_no, Some(ack), &[]);
        t.wire.send(&f);
        let (rst, _) = t
            .next_to(p, Duration::from_secs(1))
            .unwrap_or_else(|| panic!("{what}: no answer"));
        assert_eq!(rst.control, TcpControl::Rst, "{what}: {rst:?}");
        rejected += 1;
        assert_eq!(t.stats().syn_cookies_rejected, rejected, "{what}");
        assert_eq!(t.stats().syn_cookies_validated, 0, "{what}");
        // Nothing was made: data on the four-tuple finds no connection.
        let f = p.frame(TcpControl::Psh, seq_no, Some(ack), b"x");
        t.wire.send(&f);
        let (rst, _) = t.next_to(p, Duration::from_secs(1)).expect("an answer");
        assert_eq!(rst.control, TcpControl::Rst, "{what}: data after it");
        rejected += 1;
    };
    refused(&mut t, &mut c, 1001, 0x0bad_cafe, "a made-up cookie");
    refused(&mut t, &mut c, 1001, cookie.wrapping_add(2), "one too far");
    refused(&mut t, &mut c, 1001, cookie, "one short");
    refused(
        &mut t,
        &mut c,
        1002,
        cookie.wrapping_add(1),
        "another peer ISN",
    );
    let mut other = Peer { port: 40001, ..c };
    refused(
        &mut t,
        &mut other,
        1001,
        cookie.wrapping_add(1),
        "another port",
    );
    assert_eq!(*accepted.borrow(), 0);

    // The right one.
    let f = c.frame(TcpControl::Psh, 1001, Some(cookie.wrapping_add(1)), b"hi");
    t.wire.send(&f);
    let (_, data) = t.next_data(&c);
    assert_eq!(data, b"HI");
    assert_eq!(*accepted.borrow(), 1);
    assert_eq!(t.stats().syn_cookies_validated, 1);

    // A cookie two minutes old, while the listener still sends cookies: rejected.
    let mut e = Peer::new(PEER, 40002, true);
    let synack = t.syn(&mut e, 5000);
    let exec = t.wire.exec;
    exec.block_on(exec.sleep(Duration::from_secs(121)));
    // The forged handshakes have given up by now: a new flood fills the backlog again, and
    // the listener sends a cookie.
    let sent = t.stats().syn_cookies_sent;
    t.flood(FLOOD, BACKLOG as u8 + 1);
    assert_eq!(t.stats().syn_cookies_sent, sent + 1);
    let refused_old = |t: &mut Target, p: &mut Peer| {
        let ack = (synack.seq_number.0 as u32).wrapping_add(1);
        let f = p.frame(TcpControl::None, 5001, Some(ack), &[]);
        t.wire.send(&f);
        let (rst, _) = t.next_to(p, Duration::from_secs(1)).expect("an answer");
        assert_eq!(rst.control, TcpControl::Rst, "{rst:?}");
    };
    let before = t.stats().syn_cookies_rejected;
    refused_old(&mut t, &mut e);
    assert_eq!(t.stats().syn_cookies_rejected, before + 1, "too old");
    assert_eq!(t.stats().syn_cookies_validated, 1);
    assert_eq!(*accepted.borrow(), 1);
}

/// Connections completed from cookies wait for `accept`, at most the backlog of them: the
/// next valid cookie is dropped and counted (its peer's retransmission may find room later).
/// Those waiting are then accepted in the order they came and carry data.
#[test]
fn cookie_connections_wait_for_accept_within_the_backlog() {
    let mut t = Target::new(true);
    t.flood(0, FLOOD);
    let mut peers: Vec<Peer> = (0..BACKLOG as u16 + 1)
        .map(|k| Peer::new(PEER, 41000 + k, k % 2 == 0))
        .collect();
    let mut snds = Vec::new();
    for (k, p) in peers.iter_mut().enumerate() {
        let isn = 100_000 * (k as u32 + 1);
        let synack = t.syn(p, isn);
        let snd = (synack.seq_number.0 as u32).wrapping_add(1);
        let f = p.frame(
            TcpControl::Psh,
            isn + 1,
            Some(snd),
            format!("c{k}").as_bytes(),
        );
        t.wire.send(&f);
        snds.push(snd);
    }
    while t.wire.recv(Duration::from_millis(50)).is_some() {}
    let s = t.stats();
    assert_eq!(s.syn_cookies_validated, BACKLOG as u64 + 1, "{s:?}");
    assert_eq!(s.syn_cookie_accept_drops, 1, "{s:?}");

    // Accept them all: each one's first data is there, in the order the peers came.
    let mut listener = t.listener.take().unwrap();
    let got = t.wire.exec.block_on(async move {
        let mut got = Vec::new();
        for _ in 0..BACKLOG {
            let mut s = listener.accept().await.expect("accept");
            let mut buf = [0u8; 16];
            let n = s.read(&mut buf).await.unwrap();
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        got
    });
    assert_eq!(got, ["c0", "c1", "c2", "c3"]);
}

/// zcnet clients over IPv6 (timestamps, window scale and SACK offered, as zcnet does) against
/// a listener with a backlog of 2, four at once before the server accepts any: two take the
/// listening sockets, two get cookies (IPv6's MSS table) and wait in the queue; once the server
/// accepts, each echoes 20 KB both ways.
#[test]
fn zcnet_clients_over_ipv6_connect_through_cookies() {
    use zcnet_stack::tcp::TcpSocket;
    use zcnet_stack::IpEndpoint;
    use zcnet_tests::net::{with_ula, ULA};
    let p = zcnet_tests::net::pair_on_with(
        zcnet_executor::Executor::leak(zcnet_tests::clock::VirtualClock::leak()),
        zcnet_tests::wire::Faults::default(),
        1024,
        with_ula,
    );
    let [a, b] = p.stacks;
    let mut listener =
        TcpListener::bind(b, PORT, 2, || Some(TcpBuffers::with_capacity(65536, 16384)))
            .expect("listener");
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let sp = p.exec.local_spawner();
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let data = data.clone();
            sp.spawn(async move {
                let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(65536, 16384)).unwrap();
                c.connect(IpEndpoint::new(ULA[1].into(), PORT))
                    .await
                    .unwrap();
                c.write_all(&data).await.unwrap();
                let mut back = vec![0u8; data.len()];
                read_full(&mut c, &mut back).await;
                assert_eq!(back, data);
                c.close();
            })
        })
        .collect();
    // Every client's handshake completes before the server accepts anyone.
    p.exec.block_on(p.exec.sleep(Duration::from_millis(500)));
    let s = b.stats();
    assert_eq!(s.syn_cookies_validated, 2, "{s:?}");
    assert_eq!(s.syn_cookie_accept_drops, 0, "{s:?}");
    p.exec.block_on(async move {
        for _ in 0..4 {
            let mut s = listener.accept().await.expect("accept");
            sp.spawn(async move {
                let mut buf = vec![0u8; 20_000];
                read_full(&mut s, &mut buf).await;
                s.write_all(&buf).await.unwrap();
                s.close();
            });
        }
        for c in clients {
            zcnet_executor::time::timeout(Duration::from_secs(30), c)
                .await
                .expect("every client echoed");
        }
    });
    let s = b.stats();
    assert_eq!(
        (s.syn_cookies_sent, s.syn_cookies_rejected),
        (2, 0),
        "{s:?}"
    );
}

/// Reads until `buf` is full (panics at the end of the stream or on an error).
async fn read_full(s: &mut zcnet_stack::tcp::TcpSocket, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        let n = s.read(&mut buf[got..]).await.expect("read");
        assert!(n > 0, "the stream ended after {got} bytes");
        got += n;
    }
}
