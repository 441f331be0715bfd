//! Unit tests of the offload marks (their life in the leases), the capabilities builder, the
//! Driver trait's chain defaults, software checksum completion across a chain, and the
//! simulated wire's offloads (checksum completion, verified marks, segmentation, whole
//! super-segments, faults per delivered frame). Every test ends with the pools' slots back.

use std::task::{Context, Poll, Waker};
use std::vec::Vec;

use crate::sim::{wire_pair, Faults, GsoMode, SimNic, WireEnd, WireOffloads};
use crate::*;

fn pool(slots: usize) -> &'static FramePool {
    FramePool::leak(PoolConfig::new(slots)).unwrap()
}

const TCP_MARK: ChecksumPartial = ChecksumPartial {
    start: 34,
    offset: 16,
};

#[test]
fn rx_marks_live_in_the_lease_and_survive_trimming_but_not_reuse() {
    let p = pool(1);
    let mut posted = p.try_alloc_rx().unwrap();
    posted.buffer_mut()[..100].fill(7);
    let mut f = posted.complete(100).unwrap();
    assert!(!f.checksum_verified());
    assert_eq!(f.gso_info(), None);
    let info = GsoInfo {
        kind: GsoKind::TcpV6,
        segment_size: 1440,
    };
    f.set_checksum_verified(true);
    f.set_gso_info(Some(info));
    f.advance(14).unwrap();
    f.truncate(50).unwrap();
    f.lend_to_app();
    assert!(f.checksum_verified());
    assert_eq!(f.gso_info(), Some(info));
    drop(f);
    // The same slot again: a fresh lease, no marks.
    let f = p.try_alloc_rx().unwrap().complete(10).unwrap();
    assert!(!f.checksum_verified());
    assert_eq!(f.gso_info(), None);
    drop(f);
    assert_eq!(p.audit().unwrap().free, 1);
}

#[test]
fn tx_marks_follow_their_bytes_through_push_header() {
    let p = pool(1);
    let mut f = p.try_alloc_tx().unwrap();
    f.append(1000).unwrap().fill(0);
    // Marked on the TCP segment alone: the header starts at 0.
    let mark = ChecksumPartial {
        start: 0,
        offset: 16,
    };
    f.set_checksum_partial(Some(mark)).unwrap();
    let req = GsoRequest {
        kind: GsoKind::TcpV4,
        segment_size: 500,
        header_len: 20,
    };
    f.set_gso_request(Some(req)).unwrap();
    assert!(f.has_marks());
    // IP then Ethernet pushed in front: the marks move with the bytes.
    f.push_header(20).unwrap();
    f.push_header(14).unwrap();
    assert_eq!(f.checksum_partial(), Some(TCP_MARK));
    assert_eq!(
        f.gso_request(),
        Some(GsoRequest {
            header_len: 54,
            ..req
        })
    );
    let inflight = f.into_device();
    assert_eq!(inflight.checksum_partial(), Some(TCP_MARK));
    assert_eq!(inflight.gso_request().map(|g| g.header_len), Some(54));
    drop(inflight);
    // A reused slot starts clean; marks outside the data are refused.
    let mut f = p.try_alloc_tx().unwrap();
    assert!(!f.has_marks() && f.checksum_partial().is_none() && f.gso_request().is_none());
    f.append(17).unwrap();
    assert!(
        f.set_checksum_partial(Some(mark)).is_err(),
        "field past the end"
    );
    assert!(f
        .set_gso_request(Some(GsoRequest {
            header_len: 18,
            ..req
        }))
        .is_err());
    assert!(f
        .set_gso_request(Some(GsoRequest {
            segment_size: 0,
            header_len: 10,
            ..req
        }))
        .is_err());
    assert!(!f.has_marks());
    f.append(1).unwrap();
    f.set_checksum_partial(Some(mark)).unwrap();
    f.set_checksum_partial(None).unwrap();
    assert!(!f.has_marks());
    drop(f);
    assert_eq!(p.audit().unwrap().free, 1);
}

#[test]
fn a_chain_trimmed_past_the_marks_forgets_them() {
    let p = pool(2);
    let mut head = p.try_alloc_tx().unwrap();
    head.append(60).unwrap().fill(0);
    head.set_checksum_partial(Some(TCP_MARK)).unwrap();
    let mut chain = TxChain::from_frame(head);
    let mut tail = p.try_alloc_tx().unwrap();
    tail.append(10).unwrap();
    chain.push(tail).unwrap();
    chain.advance(40).unwrap();
    assert_eq!(chain.head().and_then(TxFrame::checksum_partial), None);
    drop(chain);
    assert_eq!(p.audit().unwrap().free, 2);
}

#[test]
fn capabilities_builder_keeps_gso_consistent() {
    let caps = Capabilities::new(Medium::Ip, 1280);
    assert_eq!(
        (caps.tx_headroom, caps.gso_max_size, caps.rx_chains),
        (0, 0, false)
    );
    assert_eq!(caps.checksum, ChecksumOffloads::empty());
    let caps = caps.with_gso(0, GsoKinds::TCPV4);
    assert_eq!((caps.gso_max_size, caps.gso_kinds), (0, GsoKinds::empty()));
    let caps = caps.with_gso(65535, GsoKinds::empty());
    assert_eq!(caps.gso_max_size, 0);
    let caps = caps
        .with_gso(65535, GsoKinds::TCPV6)
        .with_max_burst(Some(4));
    assert_eq!((caps.gso_max_size, caps.max_burst), (65535, Some(4)));
    assert_eq!(GsoKind::TcpV6.flag(), GsoKinds::TCPV6);
}

/// A driver with only the required methods: the chain entry points fall back to them.
struct OneFrame {
    pool: &'static FramePool,
    sent: Vec<Vec<u8>>,
    next: Option<RxFrame>,
}

impl Driver for OneFrame {
    fn poll_receive(&mut self, _cx: &mut Context<'_>) -> Poll<RxFrame> {
        match self.next.take() {
            Some(f) => Poll::Ready(f),
            None => Poll::Pending,
        }
    }
    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.pool.poll_alloc_tx(cx)
    }
    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        self.sent.push(frame.to_vec());
        Ok(())
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Medium::Ethernet, 1500)
    }
    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet([2, 0, 0, 0, 0, 9])
    }
    fn poll_link_state(&mut self, _cx: &mut Context<'_>) -> LinkState {
        LinkState::Up
    }
}

#[test]
fn the_chain_defaults_wrap_single_frames_and_refuse_longer_chains() {
    let p = pool(4);
    let mut d = OneFrame {
        pool: p,
        sent: Vec::new(),
        next: Some(p.try_alloc_rx().unwrap().complete(5).unwrap()),
    };
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(chain) = d.poll_receive_chain(&mut cx) else {
        panic!("a frame is ready");
    };
    assert_eq!((chain.frame_count(), chain.len()), (1, 5));
    assert!(d.poll_receive_chain(&mut cx).is_pending());
    drop(chain);
    // The packet default takes the one-frame chain apart.
    d.next = Some(p.try_alloc_rx().unwrap().complete(7).unwrap());
    match d.poll_receive_packet(&mut cx) {
        Poll::Ready(RxPacket::Frame(f)) => assert_eq!(f.len(), 7),
        other => panic!("one frame expected, got {other:?}"),
    }
    assert!(d.poll_receive_packet(&mut cx).is_pending());
    let mut one = p.try_alloc_tx().unwrap();
    one.append(3).unwrap().copy_from_slice(b"abc");
    d.transmit_chain(TxChain::from_frame(one)).unwrap();
    assert_eq!(d.sent, [b"abc".to_vec()]);
    let mut two = TxChain::from_frame(p.try_alloc_tx().unwrap());
    two.push(p.try_alloc_tx().unwrap()).unwrap();
    assert_eq!(
        d.transmit_chain(two),
        Err(TxError::ChainUnsupported { frames: 2 })
    );
    assert_eq!(
        d.transmit_chain(TxChain::new()),
        Err(TxError::ChainUnsupported { frames: 0 })
    );
    assert_eq!(
        p.audit().unwrap().free,
        4,
        "refused chains' slots came back"
    );
}

/// Ethernet + IPv4 + TCP with `payload`, the TCP checksum field holding the pseudo-header sum
/// (the stack's part of a partial checksum), the IPv4 header checksum complete.
fn tcp4_partial(payload_len: usize, flags: u8) -> Vec<u8> {
    let mut f = std::vec![0u8; 54];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((40 + payload_len) as u16).to_be_bytes());
    f[18..20].copy_from_slice(&7u16.to_be_bytes());
    f[22] = 64;
    f[23] = 6;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    let ip = !offload::ones_complement_sum(0, [&f[14..34]]);
    f[24..26].copy_from_slice(&ip.to_be_bytes());
    f[34..36].copy_from_slice(&40000u16.to_be_bytes());
    f[36..38].copy_from_slice(&80u16.to_be_bytes());
    f[38..42].copy_from_slice(&1u32.to_be_bytes());
    f[46] = 5 << 4;
    f[47] = flags;
    let l4_len = (20 + payload_len) as u16;
    let pseudo = offload::ones_complement_sum(6, [&f[26..34], &l4_len.to_be_bytes()[..]]);
    f[50..52].copy_from_slice(&pseudo.to_be_bytes());
    f.extend((0..payload_len).map(|i| (i * 13 + 5) as u8));
    f
}

/// Whether the TCP checksum of an IPv4 frame (Ethernet header first) is right.
fn tcp4_ok(f: &[u8]) -> bool {
    let l4 = &f[34..];
    let len = (l4.len() as u16).to_be_bytes();
    offload::ones_complement_sum(6, [&f[26..34], &len[..], l4]) == 0xffff
}

/// `bytes` as a TX chain over frames of at most `part` bytes each (the head keeps its
/// headroom), the head marked with `csum` and `gso`.
fn tx_chain(
    p: &'static FramePool,
    bytes: &[u8],
    part: usize,
    csum: Option<ChecksumPartial>,
    gso: Option<GsoRequest>,
) -> TxChain {
    let mut chain = TxChain::new();
    for piece in bytes.chunks(part) {
        let mut f = p.try_alloc_tx().unwrap();
        f.append(piece.len()).unwrap().copy_from_slice(piece);
        chain.push(f).unwrap();
    }
    let head = chain.head_mut().unwrap();
    head.set_checksum_partial(csum).unwrap();
    head.set_gso_request(gso).unwrap();
    chain
}

#[test]
fn complete_checksum_sums_across_odd_frame_boundaries() {
    let p = pool(8);
    let packet = tcp4_partial(333, 0x18);
    assert!(!tcp4_ok(&packet));
    let mut chain = tx_chain(p, &packet, 61, None, None);
    assert!(chain.complete_checksum(34, 16));
    let mut done = std::vec![0u8; chain.len()];
    chain.copy_to(&mut done, CopySite::Driver);
    assert!(tcp4_ok(&done));
    // Only the field changed.
    assert_eq!(done[..50], packet[..50]);
    assert_eq!(done[52..], packet[52..]);
    assert!(
        !chain.complete_checksum(chain.len() - 17, 16),
        "field past the end"
    );
    drop(chain);
    assert_eq!(p.audit().unwrap().free, 8);
}

fn pair(
    faults: Faults,
    a: WireOffloads,
    b: WireOffloads,
) -> ([&'static FramePool; 2], WireEnd, WireEnd) {
    let pools = [pool(128), pool(128)];
    let (x, y) = wire_pair(pools, faults);
    (pools, x.with_offloads(a), y.with_offloads(b))
}

fn receive_all(end: &mut WireEnd, chains: bool) -> Vec<RxChain> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    loop {
        let got = if chains {
            end.poll_receive_chain(&mut cx)
        } else {
            end.poll_receive(&mut cx).map(RxChain::from_frame)
        };
        match got {
            Poll::Ready(c) => out.push(c),
            Poll::Pending => return out,
        }
    }
}

/// [`receive_all`] through `poll_receive_packet`: single frames as frames, merged packets as
/// chains (each as a chain here, with whether it came as one).
fn receive_packets(end: &mut WireEnd) -> Vec<(bool, RxChain)> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    loop {
        match end.poll_receive_packet(&mut cx) {
            Poll::Ready(RxPacket::Frame(f)) => out.push((false, RxChain::from_frame(f))),
            Poll::Ready(RxPacket::Chain(c)) => out.push((true, c)),
            Poll::Pending => return out,
        }
    }
}

fn flat(chain: &RxChain) -> Vec<u8> {
    let mut v = std::vec![0u8; chain.len()];
    chain.copy_to(&mut v, CopySite::Driver);
    v
}

#[test]
fn the_wire_completes_partial_checksums_and_marks_verified_frames() {
    let tx = WireOffloads {
        tx_checksum: true,
        ..WireOffloads::default()
    };
    let rx = WireOffloads {
        rx_checksum: true,
        ..WireOffloads::default()
    };
    let (pools, mut a, mut b) = pair(Faults::default(), tx, rx);
    let caps = a.capabilities();
    assert!(caps
        .checksum
        .contains(ChecksumOffloads::TCP_TX | ChecksumOffloads::UDP_TX));
    assert_eq!(b.capabilities().checksum, ChecksumOffloads::empty());
    // A one-frame packet and a three-frame one, both partial.
    let packet = tcp4_partial(1000, 0x18);
    a.transmit(
        tx_chain(pools[0], &packet, 2000, Some(TCP_MARK), None)
            .pop_front()
            .unwrap(),
    )
    .unwrap();
    a.transmit_chain(tx_chain(pools[0], &packet, 400, Some(TCP_MARK), None))
        .unwrap();
    // And one the stack left wrong, unmarked: it crosses as it is, not verified.
    a.transmit_chain(tx_chain(pools[0], &packet, 2000, None, None))
        .unwrap();
    let got = receive_all(&mut b, false);
    assert_eq!(got.len(), 3);
    for (i, c) in got.iter().enumerate() {
        let bytes = flat(c);
        let head = c.head().unwrap();
        assert_eq!(tcp4_ok(&bytes), i < 2, "packet {i}");
        assert_eq!(head.checksum_verified(), i < 2, "packet {i}");
        assert_eq!(head.gso_info(), None);
    }
    assert_eq!(a.handle().tx_stats().checksums_completed, 2);
    drop((got, a, b));
    assert!(pools.iter().all(|p| p.occupancy().in_use() == 0));
}

/// An end that completes checksums and segments super-segments (as a TSO NIC).
const TSO: WireOffloads = WireOffloads {
    tx_checksum: true,
    rx_checksum: false,
    gso_max_size: 65535,
    gso_mode: GsoMode::Segment,
    rx_chains: false,
};

/// An end that verifies received checksums.
const VERIFY: WireOffloads = WireOffloads {
    tx_checksum: false,
    rx_checksum: true,
    gso_max_size: 0,
    gso_mode: GsoMode::Segment,
    rx_chains: false,
};

/// `packet` as a super-segment of `mss`-byte segments over 1900-byte frames, to `end`.
fn send_super(
    end: &mut WireEnd,
    p: &'static FramePool,
    packet: &[u8],
    mss: u16,
) -> Result<(), TxError> {
    end.transmit_chain(tx_chain(
        p,
        packet,
        1900,
        Some(TCP_MARK),
        Some(gso_request(mss)),
    ))
}

fn gso_request(mss: u16) -> GsoRequest {
    GsoRequest {
        kind: GsoKind::TcpV4,
        segment_size: mss,
        header_len: 54,
    }
}

#[test]
fn the_wire_segments_a_super_segment_as_a_tso_nic_does() {
    let (tx, rx) = (TSO, VERIFY);
    let (pools, mut a, mut b) = pair(Faults::default(), tx, rx);
    let caps = a.capabilities();
    assert_eq!(caps.gso_max_size, 65535);
    assert_eq!(caps.gso_kinds, GsoKinds::TCPV4 | GsoKinds::TCPV6);
    let packet = tcp4_partial(10_000, 0x19); // FIN PSH ACK
    send_super(&mut a, pools[0], &packet, 1448).unwrap();
    let got = receive_all(&mut b, false);
    assert_eq!(got.len(), 7); // 6 × 1448 + 1312
    let mut payload = Vec::new();
    for (i, c) in got.iter().enumerate() {
        let s = flat(c);
        assert!(tcp4_ok(&s), "segment {i}");
        assert!(c.head().unwrap().checksum_verified());
        let seq = u32::from_be_bytes([s[38], s[39], s[40], s[41]]);
        assert_eq!(seq, 1 + 1448 * i as u32);
        assert_eq!(s[47] & 0x09 != 0, i == 6, "FIN/PSH on the last only");
        assert_eq!(
            usize::from(u16::from_be_bytes([s[16], s[17]])),
            s.len() - 14
        );
        payload.extend_from_slice(&s[54..]);
    }
    assert_eq!(payload, packet[54..]);
    let stats = a.handle().tx_stats();
    assert_eq!((stats.segmented, stats.sent, stats.delivered), (1, 7, 7));
    // Over the GSO size, or without GSO over the MTU: refused, slots back.
    let big = tcp4_partial(1600, 0x10);
    assert!(matches!(
        a.transmit_chain(tx_chain(pools[0], &big, 1900, Some(TCP_MARK), None)),
        Err(TxError::TooLong { .. })
    ));
    drop((got, a, b));
    assert!(pools.iter().all(|p| p.occupancy().in_use() == 0));
}

#[test]
fn an_end_without_gso_refuses_a_super_segment() {
    let (pools, mut a, b) = pair(
        Faults::default(),
        WireOffloads::default(),
        WireOffloads::default(),
    );
    let packet = tcp4_partial(3000, 0x10);
    assert_eq!(
        send_super(&mut a, pools[0], &packet, 1000),
        Err(TxError::ChainUnsupported { frames: 2 })
    );
    drop((a, b));
    assert!(pools.iter().all(|p| p.occupancy().in_use() == 0));
}

#[test]
fn a_whole_super_segment_arrives_as_a_marked_chain() {
    let tx = WireOffloads {
        tx_checksum: true,
        gso_max_size: 65535,
        gso_mode: GsoMode::Whole,
        ..WireOffloads::default()
    };
    let rx = WireOffloads {
        rx_chains: true,
        ..WireOffloads::default()
    };
    let (pools, mut a, mut b) = pair(Faults::default(), tx, rx);
    assert!(b.capabilities().rx_chains);
    let packet = tcp4_partial(20_000, 0x18);
    send_super(&mut a, pools[0], &packet, 1448).unwrap();
    let got = receive_all(&mut b, true);
    assert_eq!(got.len(), 1);
    let c = &got[0];
    assert!(c.frame_count() > 1);
    assert_eq!(flat(c), packet, "bytes as sent, checksum still partial");
    let head = c.head().unwrap();
    assert!(head.checksum_verified());
    assert_eq!(
        head.gso_info(),
        Some(GsoInfo {
            kind: GsoKind::TcpV4,
            segment_size: 1448
        })
    );
    // As packets: the super-segment as a chain, a small packet after it as a frame.
    send_super(&mut a, pools[0], &packet, 1448).unwrap();
    let small = tcp4_partial(100, 0x18);
    send_super(&mut a, pools[0], &small, 1448).unwrap();
    let packets = receive_packets(&mut b);
    assert_eq!(packets.len(), 2);
    assert!(packets[0].0 && packets[0].1.frame_count() > 1);
    assert_eq!(flat(&packets[0].1), packet);
    assert!(!packets[1].0, "a one-slot packet comes up as a frame");
    assert_eq!(flat(&packets[1].1), small);
    drop(packets);
    // A receiver taking single frames cannot have it: dropped, counted.
    send_super(&mut a, pools[0], &packet, 1448).unwrap();
    assert!(receive_all(&mut b, false).is_empty());
    assert_eq!(a.handle().tx_stats().too_long, 1);
    drop((got, a, b));
    assert!(pools.iter().all(|p| p.occupancy().in_use() == 0));
}

#[test]
fn faults_apply_to_each_segment_and_corrupted_ones_lose_the_verified_mark() {
    let (tx, rx) = (TSO, VERIFY);
    let faults = Faults {
        seed: 7,
        loss: 0.2,
        duplicate: 0.2,
        corrupt: 0.3,
        reorder: 0.2,
        ..Faults::default()
    };
    let (pools, mut a, mut b) = pair(faults, tx, rx);
    let packet = tcp4_partial(30 * 1000, 0x10);
    send_super(&mut a, pools[0], &packet, 1000).unwrap();
    let got = receive_all(&mut b, false);
    let s = a.handle().tx_stats();
    assert_eq!(s.sent, 30);
    assert!(
        s.lost > 0 && s.duplicated > 0 && s.corrupted > 0 && s.reordered > 0,
        "{s:?}"
    );
    assert_eq!(got.len() as u64, 30 - s.lost + s.duplicated);
    let mut seqs = Vec::new();
    for c in &got {
        let bytes = flat(c);
        let ok = bytes[12..14] == [8, 0]
            && tcp4_ok(&bytes)
            && offload::ones_complement_sum(0, [&bytes[14..34]]) == 0xffff;
        assert_eq!(c.head().unwrap().checksum_verified(), ok);
        if ok {
            seqs.push(u32::from_be_bytes([
                bytes[38], bytes[39], bytes[40], bytes[41],
            ]));
        }
    }
    let verified = got
        .iter()
        .filter(|c| c.head().unwrap().checksum_verified())
        .count();
    assert!(verified < got.len(), "some frames were corrupted");
    assert!(seqs.iter().all(|s| (s - 1) % 1000 == 0 && *s <= 29_001));
    drop((got, a, b));
    assert!(pools.iter().all(|p| p.occupancy().in_use() == 0));
}

#[test]
fn the_sim_nic_receives_marked_chains_and_reports_what_was_sent() {
    let p = pool(16);
    let mut nic = SimNic::new(p, 8, 4).with_offloads(ChecksumOffloads::TCP_TX, 65535, true);
    let caps = nic.capabilities();
    assert_eq!((caps.gso_max_size, caps.rx_chains), (65535, true));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(nic.poll_receive_chain(&mut cx).is_pending()); // fills the ring
    let info = GsoInfo {
        kind: GsoKind::TcpV4,
        segment_size: 1448,
    };
    let big: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    assert!(nic.device_receive_marked(&big, true, Some(info)));
    assert!(nic.device_receive_marked(b"small", true, None));
    let Poll::Ready(chain) = nic.poll_receive_chain(&mut cx) else {
        panic!("the chain is ready");
    };
    assert_eq!(chain.frame_count(), 3);
    assert_eq!(flat(&chain), big);
    assert!(chain.head().unwrap().checksum_verified());
    assert_eq!(chain.head().unwrap().gso_info(), Some(info));
    drop(chain);
    // Single frames only: a chain is refused, counted; the small packet comes through.
    assert!(nic.device_receive_marked(&big, false, None));
    let Poll::Ready(f) = nic.poll_receive(&mut cx) else {
        panic!("the small frame is ready");
    };
    assert_eq!(&f[..], b"small");
    assert!(f.checksum_verified());
    drop(f);
    assert!(nic.poll_receive(&mut cx).is_pending());
    assert_eq!(nic.stats().rx_chains_refused, 1);
    // A super-segment goes out whole with its marks.
    let packet = tcp4_partial(4000, 0x18);
    nic.transmit_chain(tx_chain(
        p,
        &packet,
        1900,
        Some(TCP_MARK),
        Some(gso_request(1448)),
    ))
    .unwrap();
    let sent = nic.device_complete_tx_marked(1);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].bytes, packet);
    assert_eq!(sent[0].frames, 3);
    assert_eq!(sent[0].checksum, Some(TCP_MARK));
    assert_eq!(sent[0].gso, Some(gso_request(1448)));
    drop(nic);
    assert_eq!(p.audit().unwrap().free, 16);
}
