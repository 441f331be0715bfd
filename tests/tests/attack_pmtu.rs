//! Path MTU discovery (RFC 1191, RFC 8201, RFC 5927) over the in-memory wire with crafted frames. The
//! test plays a peer behind a router whose next link takes IP packets of at most 1280 bytes;
//! the stack sends a bulk transfer to it over a 1500-byte link:
//!
//! * an ICMP "fragmentation needed" quoting a segment in flight makes the stack send
//!   everything in flight again at once, cut to 1280 bytes, and every later segment too; the
//!   transfer completes byte-exact;
//! * forged messages (a sequence number outside SND.UNA..SND.MAX, an unknown four-tuple) and
//!   messages naming no smaller MTU change nothing and are counted;
//! * a lowered path MTU is tried again after `PATH_MTU_AGE` (ten minutes), not before;
//! * over IPv6 (RFC 8201), an ICMPv6 "packet too big" does the same, raised to IPv6's
//!   minimum MTU of 1280 bytes, and a forged one is counted.
//!
//! The stack runs on a virtual clock with a secret made from a fixed seed: every run repeats.

use std::time::Duration;

use smoltcp::wire::{
    ArpOperation, ArpPacket, EthernetAddress, EthernetFrame, EthernetProtocol, Ipv4Address,
    Ipv4Packet, TcpControl, TcpRepr, TcpSeqNumber,
};
use zcnet_stack::tcp::{TcpBuffers, TcpListener, PATH_MTU_AGE};
use zcnet_stack::DropReason;
use zcnet_tests::craft::{
    arp_request, icmp_frag_needed, tcp_frame, tcp_in, Host, WireTarget, PEER, STACK,
};
use zcnet_tests::craft6::{
    neighbor_advert, packet_too_big, solicits, static_v6, tcp6_frame, tcp6_in, Host6, PEER6, STACK6,
};

/// The port the stack listens on, and the peer's.
const PORT: u16 = 80;
const PEER_PORT: u16 = 40000;

/// The peer's initial sequence number.
const PEER_ISN: u32 = 1000;

/// The window the peer advertises (no scaling): about eleven full-sized segments in flight.
const WINDOW: u16 = 16384;

/// The router on the path that sends "fragmentation needed".
const ROUTER: Host = Host {
    mac: EthernetAddress([0x02, 0, 0, 0, 0, 0xfe]),
    ip: Ipv4Address::new(10, 0, 0, 254),
};

/// The path's MTU behind the router.
const PATH_MTU: u16 = 1280;

/// The link's MTU (the wire's, the stack's first segments' IP length).
const LINK_MTU: usize = 1500;

/// A segment the stack sent: the IP packet and what the test looks at.
struct Seg {
    /// The whole IP packet (header, TCP header, payload).
    ip: Vec<u8>,
    seq: u32,
    payload: Vec<u8>,
    fin: bool,
    dont_frag: bool,
}

/// The peer of one connection to the stack, established by the test, and the application on
/// the stack's side: it accepts the connection and writes `parts` to it, each after its pause,
/// then closes.
struct Peer {
    wire: WireTarget,
    /// The next sequence number the peer expects: its RCV.NXT.
    rcv: u32,
    /// The peer's own next sequence number.
    snd: u32,
    /// Over IPv6 (else IPv4).
    v6: bool,
    /// What arrived in order.
    received: Vec<u8>,
}

impl Peer {
    fn new(seed: u64, parts: Vec<(Duration, Vec<u8>)>) -> Peer {
        Self::over(false, seed, parts)
    }

    /// [`new`](Self::new), over IPv6 with `v6` (the stack at fd00::2, the peer at fd00::1).
    fn over(v6: bool, seed: u64, parts: Vec<(Duration, Vec<u8>)>) -> Peer {
        let configure = if v6 { static_v6 } else { |_: &mut _| {} };
        let mut wire = WireTarget::with_config::<8>(seed, 512, configure);
        let mut listener = TcpListener::bind(wire.stack, PORT, 1, || {
            Some(TcpBuffers::with_capacity(4096, 64 * 1024))
        })
        .expect("listener");
        let exec = wire.exec;
        drop(exec.local_spawner().spawn(async move {
            let mut s = listener.accept().await.expect("accept");
            for (pause, data) in parts {
                exec.sleep(pause).await;
                s.write_all(&data).await.expect("write");
            }
            s.close();
            s.closed().await;
            drop(listener);
        }));
        wire.send(&arp_request(PEER, STACK.ip));
        let mut p = Peer {
            wire,
            rcv: 0,
            snd: PEER_ISN,
            v6,
            received: Vec::new(),
        };
        p.send(TcpControl::Syn, None);
        let synack = p.next(Duration::from_secs(1)).expect("a SYN-ACK");
        p.rcv = synack.seq.wrapping_add(1);
        p.snd = PEER_ISN + 1;
        p.send(TcpControl::None, Some(p.rcv));
        p
    }

    /// Sends a segment without data from the peer's four-tuple (MSS 1460 on a SYN).
    fn send(&mut self, control: TcpControl, ack: Option<u32>) {
        let tcp = TcpRepr {
            src_port: PEER_PORT,
            dst_port: PORT,
            control,
            seq_number: TcpSeqNumber(self.snd as i32),
            ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
            window_len: WINDOW,
            window_scale: None,
            max_seg_size: (control == TcpControl::Syn).then_some(1460),
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &[],
        };
        let frame = if self.v6 {
            tcp6_frame(PEER6, STACK6, &tcp)
        } else {
            tcp_frame(PEER, STACK, &tcp)
        };
        self.wire.send(&frame);
    }

    /// The next segment the stack sends the peer within `within` of virtual time. The peer
    /// answers the stack's ARP requests and neighbour solicitations (its entry for the peer
    /// also expires while the connection idles).
    fn next(&mut self, within: Duration) -> Option<Seg> {
        let exec = self.wire.exec;
        let deadline = exec.now() + within;
        loop {
            let frame = self
                .wire
                .recv(deadline.saturating_duration_since(exec.now()))?;
            if asks_for_peer(&frame) {
                self.wire.send(&arp_request(PEER, STACK.ip));
            }
            if solicits(&frame, PEER6.ip) {
                self.wire.send(&neighbor_advert(PEER6, STACK6));
            }
            let (tcp, ip_len, dont_frag) = if let Some(s) = tcp_in(&frame) {
                let len = Ipv4Packet::new_checked(&frame[14..])
                    .expect("IPv4")
                    .total_len();
                (s.tcp, usize::from(len), s.dont_frag)
            } else if let Some((tcp, len)) = tcp6_in(&frame) {
                // IPv6 routers never fragment: every packet is as if Don't Fragment.
                (tcp, len, true)
            } else {
                continue;
            };
            assert_eq!(tcp.dst_port, PEER_PORT);
            return Some(Seg {
                ip: frame[14..14 + ip_len].to_vec(),
                seq: tcp.seq_number.0 as u32,
                payload: tcp.payload.to_vec(),
                fin: tcp.control == TcpControl::Fin,
                dont_frag,
            });
        }
    }

    /// Takes what `seg` brings in order and acknowledges everything received.
    fn take(&mut self, seg: &Seg) {
        let end = seg.seq.wrapping_add(seg.payload.len() as u32);
        let ahead = seg.seq.wrapping_sub(self.rcv) as i32;
        if ahead <= 0 && end.wrapping_sub(self.rcv) as i32 >= 0 {
            let new = &seg.payload[ahead.unsigned_abs() as usize..];
            self.received.extend_from_slice(new);
            self.rcv = if seg.fin { end.wrapping_add(1) } else { end };
        }
        self.send(TcpControl::None, Some(self.rcv));
    }

    /// Receives and acknowledges segments until `total` bytes (and then the FIN, with `fin`)
    /// arrived in order, each within `within`; returns the largest IP packet among them. A
    /// packet larger than `path_mtu` is dropped on the way, as the router would.
    fn receive(&mut self, total: usize, fin: bool, path_mtu: usize, within: Duration) -> usize {
        let mut largest = 0;
        let mut finished = false;
        while self.received.len() < total || (fin && !finished) {
            let seg = self
                .next(within)
                .unwrap_or_else(|| panic!("stalled at {} of {total} bytes", self.received.len()));
            assert!(seg.dont_frag, "every segment has Don't Fragment");
            largest = largest.max(seg.ip.len());
            if seg.ip.len() > path_mtu {
                continue;
            }
            self.take(&seg);
            let end = seg.seq.wrapping_add(seg.payload.len() as u32);
            finished |= seg.fin && self.rcv == end.wrapping_add(1);
        }
        largest
    }

    /// The stack's first flight after the handshake, none of it acknowledged: every segment
    /// the stack sends within 50 ms.
    fn flight(&mut self) -> Vec<Seg> {
        let mut flight = Vec::new();
        while let Some(seg) = self.next(Duration::from_millis(50)) {
            flight.push(seg);
        }
        flight
    }

    fn stats(&self) -> zcnet_stack::StackStats {
        self.wire.stack.stats()
    }
}

/// Whether `frame` is an ARP request for the peer's address.
fn asks_for_peer(frame: &[u8]) -> bool {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return false;
    };
    if eth.ethertype() != EthernetProtocol::Arp {
        return false;
    }
    let Ok(arp) = ArpPacket::new_checked(eth.payload()) else {
        return false;
    };
    arp.operation() == ArpOperation::Request && arp.target_protocol_addr() == PEER.ip.octets()
}

/// `n` bytes of a pattern that does not repeat within a segment.
fn data(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i / 251) as u8 ^ salt)
        .collect()
}

/// The quote a router puts in its message about `seg`: the IP header and the first 8 bytes of
/// the TCP header (RFC 792's minimum), with `edit` applied.
fn quote(seg: &Seg, edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut q = seg.ip[..28].to_vec();
    edit(&mut q);
    q
}

/// The first flight is full-sized; the router drops it and says so for its first segment.
/// At once (well before any retransmission timeout), the stack sends everything from SND.UNA
/// again, cut to 1280 bytes, and every later segment fits: the transfer completes.
#[test]
fn frag_needed_lowers_the_segment_size_and_the_transfer_completes() {
    let sent = data(200_000, 0);
    let mut p = Peer::new(0x1191, vec![(Duration::ZERO, sent.clone())]);
    let flight = p.flight();
    assert!(flight.len() >= 4, "a flight of several segments");
    for s in &flight {
        assert_eq!(s.ip.len(), LINK_MTU, "full-sized segments first");
        assert!(s.dont_frag);
    }
    assert_eq!(flight[0].seq, p.rcv);

    p.wire.send(&icmp_frag_needed(
        ROUTER,
        STACK,
        PATH_MTU,
        &quote(&flight[1], |_| {}),
    ));
    let again = p
        .next(Duration::from_millis(100))
        .expect("what was in flight is sent again at once");
    assert_eq!(again.seq, p.rcv, "from SND.UNA");
    assert_eq!(again.ip.len(), usize::from(PATH_MTU), "cut to the path MTU");
    p.take(&again);

    let largest = p.receive(
        sent.len(),
        true,
        usize::from(PATH_MTU),
        Duration::from_secs(1),
    );
    assert_eq!(
        largest,
        usize::from(PATH_MTU),
        "nothing larger after the message"
    );
    assert!(p.received == sent, "the transfer is byte-exact");
    let st = p.stats();
    assert_eq!(st.path_mtu_reductions, 1);
    assert_eq!(st.dropped(DropReason::IcmpUnmatched), 0);
}

/// Messages about no segment in flight change nothing: a sequence number below SND.UNA or at
/// SND.MAX, another peer port, another peer address. Nor do messages naming the link's MTU or
/// more. Each is counted; the stack keeps its full-sized segments and sends nothing early.
#[test]
fn forged_and_useless_messages_are_ignored_and_counted() {
    let sent = data(100_000, 7);
    let mut p = Peer::new(0x5927, vec![(Duration::ZERO, sent.clone())]);
    let flight = p.flight();
    assert!(flight.len() >= 4);
    let una = flight[0].seq;
    let last = flight.last().expect("a flight");
    let max = last.seq.wrapping_add(last.payload.len() as u32);
    let at_seq = |s: u32| move |q: &mut [u8]| q[24..28].copy_from_slice(&s.to_be_bytes());
    let forged = [
        quote(&flight[0], at_seq(una.wrapping_sub(1))),
        quote(&flight[0], at_seq(max)),
        quote(&flight[0], at_seq(una.wrapping_add(1 << 30))),
        quote(&flight[1], |q| {
            q[22..24].copy_from_slice(&(PEER_PORT + 1).to_be_bytes())
        }),
        quote(&flight[1], |q| q[16..20].copy_from_slice(&[10, 0, 0, 3])),
        // The listener's port from a peer port with no connection.
        quote(&flight[1], |q| {
            q[22..24].copy_from_slice(&(PEER_PORT + 2).to_be_bytes())
        }),
    ];
    for q in &forged {
        p.wire.send(&icmp_frag_needed(ROUTER, STACK, PATH_MTU, q));
    }
    let genuine = quote(&flight[2], |_| {});
    for mtu in [LINK_MTU as u16, 9000] {
        p.wire.send(&icmp_frag_needed(ROUTER, STACK, mtu, &genuine));
    }
    assert!(
        p.next(Duration::from_millis(100)).is_none(),
        "nothing sent again before the retransmission timeout"
    );
    let st = p.stats();
    assert_eq!(st.dropped(DropReason::IcmpUnmatched), forged.len() as u64);
    assert_eq!(st.path_mtu_unchanged, 2);
    assert_eq!(st.path_mtu_reductions, 0);

    // The peer got the flight after all: the transfer goes on at full size.
    for s in &flight {
        p.take(s);
    }
    let largest = p.receive(sent.len(), true, LINK_MTU, Duration::from_secs(1));
    assert_eq!(largest, LINK_MTU);
    assert!(p.received == sent);
}

/// A lowered path MTU holds for `PATH_MTU_AGE`: data written five minutes after the message
/// still goes out in 1280-byte packets, data written after the age is up in full-sized ones
/// again (the path grew back meanwhile).
#[test]
fn a_lowered_path_mtu_ages_back_to_the_link_mtu() {
    let parts = [data(30_000, 1), data(30_000, 2), data(30_000, 3)];
    let half = PATH_MTU_AGE / 2;
    let mut p = Peer::new(
        0x0600,
        vec![
            (Duration::ZERO, parts[0].clone()),
            (half, parts[1].clone()),
            (half + Duration::from_secs(30), parts[2].clone()),
        ],
    );
    let flight = p.flight();
    p.wire.send(&icmp_frag_needed(
        ROUTER,
        STACK,
        PATH_MTU,
        &quote(&flight[0], |_| {}),
    ));
    let path = usize::from(PATH_MTU);
    let wait = PATH_MTU_AGE;
    let first = p.receive(parts[0].len(), false, path, wait);
    assert_eq!(first, path);
    let second = p.receive(parts[0].len() + parts[1].len(), false, path, wait);
    assert_eq!(second, path, "still lowered after half the age");
    // The path takes full-sized packets again.
    let third = p.receive(parts.iter().map(Vec::len).sum(), true, LINK_MTU, wait);
    assert_eq!(third, LINK_MTU, "the link's MTU again once the age is up");
    assert!(p.received == parts.concat());
    assert_eq!(p.stats().path_mtu_reductions, 1);
}

/// The router on the IPv6 path.
const ROUTER6: Host6 = Host6 {
    mac: EthernetAddress([0x02, 0, 0, 0, 0, 0xfd]),
    ip: smoltcp::wire::Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xfe),
};

/// The same over IPv6 (RFC 8201): a forged "packet too big" (a sequence number below SND.UNA)
/// is counted and changes nothing; one about a segment in flight naming 1000 bytes, less than
/// IPv6's minimum, cuts segments to 1280 bytes at once, and the transfer completes.
#[test]
fn packet_too_big_lowers_the_segment_size_over_ipv6() {
    let sent = data(100_000, 9);
    let mut p = Peer::over(true, 0x8201, vec![(Duration::ZERO, sent.clone())]);
    let flight = p.flight();
    assert!(flight.len() >= 4, "a flight of several segments");
    for s in &flight {
        assert_eq!(s.ip.len(), LINK_MTU, "full-sized segments first");
    }
    // The IPv6 header and 8 bytes of the TCP header; the sequence number at 44.
    let quote6 = |seg: &Seg| seg.ip[..48].to_vec();
    let mut forged = quote6(&flight[0]);
    forged[44..48].copy_from_slice(&flight[0].seq.wrapping_sub(1).to_be_bytes());
    p.wire.send(&packet_too_big(ROUTER6, STACK6, 1280, &forged));
    assert!(
        p.next(Duration::from_millis(100)).is_none(),
        "a forged message changes nothing"
    );
    assert_eq!(p.stats().dropped(DropReason::IcmpUnmatched), 1);

    p.wire
        .send(&packet_too_big(ROUTER6, STACK6, 1000, &quote6(&flight[1])));
    let again = p
        .next(Duration::from_millis(100))
        .expect("what was in flight is sent again at once");
    assert_eq!(again.seq, p.rcv, "from SND.UNA");
    assert_eq!(again.ip.len(), 1280, "cut to IPv6's minimum MTU");
    p.take(&again);
    let largest = p.receive(sent.len(), true, 1280, Duration::from_secs(1));
    assert_eq!(largest, 1280);
    assert!(p.received == sent, "the transfer is byte-exact");
    let st = p.stats();
    assert_eq!(st.path_mtu_reductions, 1);
    assert_eq!(st.dropped(DropReason::IcmpUnmatched), 1);
}
