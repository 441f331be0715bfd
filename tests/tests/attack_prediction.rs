//! The numbers an attacker off the path must guess to spoof or count traffic, attacked over the
//! in-memory wire with crafted frames:
//!
//! * initial sequence numbers: two stacks configured alike except for their secrets give
//!   unrelated ISNs for the same four-tuple at the same time, and ISNs of one four-tuple
//!   advance with the 4 µs clock (RFC 6528), so a SYN-ACK seen by one peer says nothing about
//!   another peer's connection;
//! * ephemeral ports: successive connections get ports that are neither consecutive nor a
//!   fixed stride apart, and another secret gives other ports (RFC 6056);
//! * IPv4 identification: an idle scan fails: the identification a prober sees advances by one
//!   per packet sent to it, whatever the stack sends to others in between (keyed counters per
//!   destination).
//!
//! The stacks run on a virtual clock, with secrets made from fixed seeds, so every run repeats.

use std::time::Duration;

use smoltcp::wire::{
    EthernetAddress, Ipv4Address, TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr,
};
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpListener, TcpSocket};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::craft::{arp_request, tcp_frame, tcp_in, Host, WireTarget, PEER, STACK};
use zcnet_tests::net::{pair_on_with, ADDR};
use zcnet_tests::wire::Faults;

/// A listening port on the stack, and one nobody listens on.
const OPEN: u16 = 80;
const CLOSED: u16 = 81;

/// The prober, 10.0.0.1, and another host, 10.0.0.3, both on the stack's /24.
const PROBER: Host = PEER;
const OTHER: Host = Host {
    mac: EthernetAddress([0x02, 0, 0, 0, 0, 3]),
    ip: Ipv4Address::new(10, 0, 0, 3),
};

/// A stack at 10.0.0.2 listening on [`OPEN`], the test on the other end of the wire.
struct Target {
    wire: WireTarget,
    /// Kept so its sockets keep listening.
    _listener: TcpListener,
}

/// What the test reads of a TCP segment from the stack: its destination, its IPv4
/// identification and the segment's header (its payload left out).
type Answer = (Ipv4Address, u16, TcpRepr<'static>);

impl Target {
    /// The stack with the secret made from `seed`, listening on [`OPEN`] with a backlog of 4,
    /// and knowing both hosts' MACs (each sent it an ARP request).
    fn new(seed: u64) -> Target {
        let wire = WireTarget::new::<24>(seed, 256);
        let listener = TcpListener::bind(wire.stack, OPEN, 4, || {
            Some(TcpBuffers::with_capacity(2048, 2048))
        })
        .expect("listener");
        let mut t = Target {
            wire,
            _listener: listener,
        };
        for h in [PROBER, OTHER] {
            t.wire.send(&arp_request(h, STACK.ip));
        }
        t
    }

    /// The next TCP segment the stack sends within a second of virtual time.
    fn next_tcp(&mut self) -> Option<Answer> {
        loop {
            let frame = self.wire.recv(Duration::from_secs(1))?;
            if let Some(s) = tcp_in(&frame) {
                assert!(s.dont_frag, "zcnet's packets are atomic (DF set)");
                let header = TcpRepr {
                    payload: &[],
                    ..s.tcp
                };
                return Some((s.dst, s.ident, header));
            }
        }
    }

    /// Sends a SYN from `from`:`port` to `to_port`; the stack's answer (SYN-ACK or RST).
    fn syn(&mut self, from: Host, port: u16, to_port: u16) -> Answer {
        self.wire
            .send(&segment(from, port, to_port, TcpControl::Syn, 1000));
        self.next_tcp().expect("an answer to the SYN")
    }

    /// What the stack answers a SYN (with the timestamp option) from `from`:`port` to
    /// [`OPEN`] sent now. The half-open connection is reset afterwards, so the listener's
    /// socket listens again.
    fn handshake(&mut self, from: Host, port: u16) -> SynAck {
        let now = self.wire.exec.now();
        let (_, _, synack) = self.syn(from, port, OPEN);
        assert_eq!(synack.control, TcpControl::Syn, "a SYN-ACK");
        self.wire
            .send(&segment(from, port, OPEN, TcpControl::Rst, 1001));
        SynAck {
            isn: synack.seq_number.0 as u32,
            tsval: synack.timestamp.expect("timestamps on").tsval,
            ticks: (now.as_nanos() / 4000) as u32,
            millis: (now.as_nanos() / 1_000_000) as u32,
        }
    }

    /// Lets `d` of virtual time pass.
    fn wait(&self, d: Duration) {
        let exec = self.wire.exec;
        exec.block_on(exec.sleep(d));
    }
}

/// The stack's SYN-ACK to one SYN, and its clock when the SYN arrived.
#[derive(Clone, Copy, Debug)]
struct SynAck {
    /// The initial sequence number.
    isn: u32,
    /// The TSval.
    tsval: u32,
    /// The stack's clock in 4 µs ticks, and in milliseconds.
    ticks: u32,
    millis: u32,
}

/// A segment with no payload from `from`:`src_port` to the stack's `dst_port`; a SYN carries
/// MSS and timestamp options.
fn segment(from: Host, src_port: u16, dst_port: u16, control: TcpControl, seq: u32) -> Vec<u8> {
    let syn = control == TcpControl::Syn;
    let tcp = TcpRepr {
        src_port,
        dst_port,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: None,
        window_len: 8192,
        window_scale: None,
        max_seg_size: syn.then_some(1460),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: syn.then(|| TcpTimestampRepr::new(1, 0)),
        payload: &[],
    };
    tcp_frame(from, STACK, &tcp)
}

/// The differences between successive values, modulo 2^32.
fn steps(v: &[u32]) -> Vec<u32> {
    v.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect()
}

/// Whether all values differ.
fn all_distinct<T: PartialEq>(v: &[T]) -> bool {
    v.iter().enumerate().all(|(i, x)| !v[i + 1..].contains(x))
}

/// Two stacks with the same configuration but for the secret, asked for the same four-tuples
/// at the same instants: no ISN or TSval of one tells anything of the other's. With one
/// generator seeded by a configured constant (what a stack without a secret has) both would
/// answer the same numbers, and with a clock-only ISN (RFC 793) their ISNs would differ by a
/// constant.
#[test]
fn stacks_with_different_secrets_give_unrelated_isns() {
    let ports: Vec<u16> = (0..12).map(|i| 40000 + 7 * i).collect();
    let run = |seed| {
        let mut t = Target::new(seed);
        ports
            .iter()
            .map(|&p| t.handshake(PROBER, p))
            .collect::<Vec<_>>()
    };
    let (a, b) = (run(0x5ec1), run(0x5ec2));
    let times = |v: &[SynAck]| v.iter().map(|s| s.ticks).collect::<Vec<_>>();
    assert_eq!(
        times(&a),
        times(&b),
        "both stacks were asked at the same instants"
    );
    let isns = |v: &[SynAck]| v.iter().map(|s| s.isn).collect::<Vec<_>>();
    let tsvals = |v: &[SynAck]| v.iter().map(|s| s.tsval).collect::<Vec<_>>();
    for (x, y) in [(isns(&a), isns(&b)), (tsvals(&a), tsvals(&b))] {
        let offsets: Vec<u32> = x.iter().zip(&y).map(|(p, q)| p.wrapping_sub(*q)).collect();
        assert!(
            all_distinct(&offsets),
            "no fixed offset between the stacks: {offsets:?}"
        );
        assert!(x.iter().zip(&y).all(|(p, q)| p != q), "{x:?} vs {y:?}");
        // Within one stack, four-tuples that differ only in the peer's port get numbers that
        // are no fixed stride apart either: one SYN-ACK does not give away the next
        // connection's ISN or TSval.
        assert!(all_distinct(&steps(&x)), "{x:?}");
        assert!(all_distinct(&steps(&y)), "{y:?}");
    }
    // The same secret again gives the same numbers (the stack has no other source of chance):
    // what a stack configured with a constant would show on every boot.
    assert_eq!(isns(&run(0x5ec1)), isns(&a));
}

/// One four-tuple asked again later: its ISN moved on by exactly the clock's 4 µs ticks
/// (RFC 6528's M) and its TSval by the milliseconds, so a new incarnation of a connection
/// starts above the old one's numbers. Another four-tuple, asked at the same instants,
/// advances by the same amounts from starting points of its own.
#[test]
fn the_isn_of_a_four_tuple_advances_with_the_clock() {
    let mut t = Target::new(0x5ec3);
    let first = [t.handshake(PROBER, 40000), t.handshake(PROBER, 40001)];
    for wait in [
        Duration::from_micros(4),
        Duration::from_millis(1),
        Duration::from_secs(3),
        Duration::from_secs(600),
    ] {
        t.wait(wait);
        for (k, port) in [40000, 40001].into_iter().enumerate() {
            let now = t.handshake(PROBER, port);
            let was = first[k];
            assert!(now.ticks > was.ticks, "the clock moved");
            assert_eq!(
                now.isn.wrapping_sub(was.isn),
                now.ticks.wrapping_sub(was.ticks),
                "after {wait:?}: the ISN advanced with the clock"
            );
            assert_eq!(
                now.tsval.wrapping_sub(was.tsval),
                now.millis.wrapping_sub(was.millis),
                "after {wait:?}: the TSval advanced with the clock"
            );
        }
    }
    let [p, q] = first;
    for (what, numbers, clock) in [
        ("ISNs", (p.isn, q.isn), (p.ticks, q.ticks)),
        ("TSvals", (p.tsval, q.tsval), (p.millis, q.millis)),
    ] {
        assert_ne!(
            numbers.1.wrapping_sub(numbers.0),
            clock.1.wrapping_sub(clock.0),
            "the two four-tuples' {what} differ by more than the clock"
        );
    }
}

/// Successive connections from one stack, to different ports of a server and again and again
/// to the same port, and from a second stack with another secret: the local ports are in the
/// dynamic range, never consecutive, no fixed stride apart, and differ between the secrets.
#[test]
fn successive_ephemeral_ports_are_not_predictable_from_one_another() {
    let ports_of = |seed: u64| {
        let p = pair_on_with(
            Executor::leak(VirtualClock::leak()),
            Faults::default(),
            512,
            |i, c| {
                if i == 0 {
                    c.secret = zcnet_tests::secret::seeded(seed);
                }
            },
        );
        let [a, b] = p.stacks;
        // Servers on B that accept and drop every connection.
        for k in 0..8 {
            let mut l = TcpListener::bind(b, 8000 + k, 2, || {
                Some(TcpBuffers::with_capacity(1024, 1024))
            })
            .unwrap();
            drop(p.exec.local_spawner().spawn(async move {
                while let Ok(s) = l.accept().await {
                    drop(s);
                }
            }));
        }
        // Eight connections to eight ports, then eight to the first port, one after another.
        let targets: Vec<u16> = (0..8).map(|k| 8000 + k).chain([8000; 8]).collect();
        let ports = p.exec.block_on(async move {
            let mut ports = Vec::new();
            for port in targets {
                let mut s = TcpSocket::new(a, TcpBuffers::with_capacity(1024, 1024)).unwrap();
                s.connect((ADDR[1], port)).await.expect("connect");
                ports.push(s.local_endpoint().unwrap().port);
                s.abort();
            }
            ports
        });
        ports
    };
    let ports = ports_of(0x9071);
    assert!(ports.iter().all(|&p| p >= 49152), "{ports:?}");
    let (spread, same_dest) = ports.split_at(8);
    for run in [spread, same_dest] {
        let as_u32: Vec<u32> = run.iter().map(|&p| u32::from(p)).collect();
        let steps = steps(&as_u32);
        assert!(
            !steps.iter().all(|&d| d == steps[0]),
            "no fixed stride: {run:?}"
        );
        assert!(steps.iter().any(|&d| d != 1), "not consecutive: {run:?}");
        assert!(all_distinct(run), "{run:?}");
    }
    // To different destinations (here: ports), the ports are spread over the range, not
    // clustered: at least half the range lies between the lowest and the highest.
    let (lo, hi) = (spread.iter().min().unwrap(), spread.iter().max().unwrap());
    assert!(hi - lo >= 8192, "{spread:?}");
    // Another secret, other ports for the same connections.
    let other = ports_of(0x9072);
    assert!(
        ports.iter().zip(&other).all(|(x, y)| x != y),
        "{ports:?} vs {other:?}"
    );
}

/// The idle scan: a prober reads the stack's IPv4 identification (the RSTs to its SYNs on a
/// closed port), another host makes the stack send a hundred packets, the prober reads again.
/// With one counter for all destinations the prober would see the hundred; with counters per
/// destination it sees its own counter advance by one. The other host's packets are numbered
/// from a start of their own, unrelated to the prober's.
#[test]
fn an_idle_scan_sees_only_its_own_packets() {
    let mut t = Target::new(0x1d1e);
    let probe = |t: &mut Target, port: u16| {
        let (dst, id, rst) = t.syn(PROBER, port, CLOSED);
        assert_eq!(dst, PROBER.ip);
        assert_eq!(rst.control, TcpControl::Rst);
        id
    };
    let before = probe(&mut t, 50000);
    let mut others = Vec::new();
    for k in 0..100 {
        let (dst, id, rst) = t.syn(OTHER, 30000 + k, CLOSED);
        assert_eq!((dst, rst.control), (OTHER.ip, TcpControl::Rst));
        others.push(id);
    }
    let after = probe(&mut t, 50001);
    assert_eq!(
        after,
        before.wrapping_add(1),
        "the prober sees none of the 100 packets to the other host"
    );
    // The other host's packets count on their own counter, one by one.
    assert!(
        others.windows(2).all(|w| w[1] == w[0].wrapping_add(1)),
        "{others:?}"
    );
    assert_ne!(
        others[0],
        before.wrapping_add(1),
        "not the prober's counter"
    );
    // The listener's SYN-ACKs to the prober share its counter: the third packet to it.
    let (dst, id, synack) = t.syn(PROBER, 50002, OPEN);
    assert_eq!((dst, synack.control), (PROBER.ip, TcpControl::Syn));
    assert_eq!(id, before.wrapping_add(2));
    // Another secret, other starting values: the identification tells nothing across boots.
    let mut t2 = Target::new(0x1d1f);
    assert_ne!(probe(&mut t2, 50000), before);
}
