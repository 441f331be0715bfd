//! TCP segments received over several pool slots (chains: a large receive, a TAP read of a
//! GSO packet), over the in-memory wire and from a simulated NIC.
//!
//! * 16 MiB from A to B, A's super-segments crossing the wire whole (as a virtio host hands
//!   them to a guest: checksum partial, marked verified) and arriving at B as chains: byte-exact
//!   (SHA-256), B's TCP took chains (`StackStats::rx_chains`), and with a 1 MiB receive buffer
//!   B's advertised window went past what 64 received segments allow (92,672 bytes with
//!   1,448-byte segments); the pool audit at the end. Once more over IPv6.
//! * Chains that are no TCP segment for the stack, or lie about their lengths, or carry a wrong
//!   checksum, are dropped and counted by reason, and their slots go back to the pool; a good
//!   chain after them is taken.
//! * A super-segment counts as its slots against ingress's budget: after one of a budget's
//!   worth of slots, the ACK it made due goes out before ingress asks the driver for the next
//!   packet (no read that finds the queue empty in between).

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use sha2::{Digest, Sha256};
use smoltcp::wire::{
    IpAddress, IpProtocol, Ipv4Packet, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};
use zcnet_buffer::sim::wire::{GsoMode, WireOffloads};
use zcnet_buffer::{
    Capabilities, ChecksumOffloads, Driver, FramePool, HardwareAddress, LinkState, PoolConfig,
    RxChain, RxFrame, RxPacket, TxChain, TxError, TxFrame,
};
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::{DropReason, IpEndpoint, Stack, StackResources, StackStats};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::craft::{tcp_bytes, PEER, STACK};
use zcnet_tests::net::{
    pair_drivers_on, read_sha256, side_config, with_ula, PairDriver, ADDR, SOCKETS, ULA,
};
use zcnet_tests::sim_nic::SimNic;
use zcnet_tests::wire::{Delivery, Faults, WireEnd};

const LEN: usize = 16 * 1024 * 1024;
/// The largest window 64 received segments of 1,448 bytes allow.
const WINDOW_OF_64_SEGMENTS: usize = 64 * 1448;

/// A reproducible stream of `LEN` bytes.
fn stream() -> Vec<u8> {
    (0..LEN as u32)
        .map(|i| (i.wrapping_mul(0x9e37_79b1) >> 11) as u8)
        .collect()
}

/// A's end sends super-segments whole; B's end takes them as chains.
fn chain_pair(exec: &'static Executor, faults: Faults, slots: usize) -> zcnet_tests::net::Pair {
    chain_pair_with(exec, faults, slots, |_, _| {})
}

/// [`chain_pair`] with each side's configuration adjusted by `configure`.
fn chain_pair_with(
    exec: &'static Executor,
    faults: Faults,
    slots: usize,
    configure: impl FnMut(usize, &mut zcnet_stack::Config),
) -> zcnet_tests::net::Pair {
    let pools = [
        FramePool::leak(PoolConfig::new(slots)).expect("pool"),
        FramePool::leak(PoolConfig::new(slots)).expect("pool"),
    ];
    chain_pair_on(exec, pools, faults, configure)
}

/// [`chain_pair_with`] over `pools`.
fn chain_pair_on(
    exec: &'static Executor,
    pools: [&'static FramePool; 2],
    faults: Faults,
    configure: impl FnMut(usize, &mut zcnet_stack::Config),
) -> zcnet_tests::net::Pair {
    chain_pair_wrapped(exec, pools, faults, |b| Box::new(b), configure)
}

/// [`chain_pair_on`] with B's end (its offloads set) in the driver `wrap_b` makes of it.
fn chain_pair_wrapped(
    exec: &'static Executor,
    pools: [&'static FramePool; 2],
    faults: Faults,
    wrap_b: impl FnOnce(WireEnd) -> PairDriver,
    configure: impl FnMut(usize, &mut zcnet_stack::Config),
) -> zcnet_tests::net::Pair {
    let sender = WireOffloads {
        tx_checksum: true,
        gso_max_size: 65535,
        gso_mode: GsoMode::Whole,
        ..WireOffloads::default()
    };
    let receiver = WireOffloads {
        rx_checksum: true,
        rx_chains: true,
        ..WireOffloads::default()
    };
    pair_drivers_on::<SOCKETS, SOCKETS>(
        exec,
        pools,
        faults,
        Delivery::Copy,
        |a, b| -> [PairDriver; 2] {
            [
                Box::new(a.with_offloads(sender)),
                wrap_b(b.with_offloads(receiver)),
            ]
        },
        configure,
    )
}

/// Moves `LEN` bytes from A to B (B's receive buffer `rx`), checks them, and returns B's
/// stack statistics and the largest window B advertised while reading.
fn bulk(p: &zcnet_tests::net::Pair, rx: usize) -> (StackStats, usize) {
    bulk_to(p, rx, ADDR[1].into())
}

/// [`bulk`] to B at `b_addr`.
fn bulk_to(p: &zcnet_tests::net::Pair, rx: usize, b_addr: IpAddress) -> (StackStats, usize) {
    let [a, b] = p.stacks;
    let payload = stream();
    let want: [u8; 32] = Sha256::digest(&payload).into();
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(rx, 16 * 1024)).unwrap();
        s.accept(9000).await.unwrap();
        let mut widest = 0;
        let digest = read_sha256(&mut s, LEN, |s| widest = widest.max(s.stats().window)).await;
        (s, digest, widest)
    });
    let client = p.exec.block_on(async move {
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(64 * 1024, 256 * 1024)).unwrap();
        c.connect_timeout(IpEndpoint::new(b_addr, 9000), Duration::from_secs(10))
            .await
            .unwrap();
        let sent = zcnet_executor::time::timeout(Duration::from_secs(600), async {
            c.write_all(&payload).await.unwrap();
            c.flush().await.unwrap();
        })
        .await;
        if sent.is_err() {
            panic!(
                "stalled: A {:?} {:?}\nB {:?}\nwire {:?} {:?}",
                a.stats(),
                c.stats(),
                b.stats(),
                p.ends[0].tx_stats(),
                p.ends[1].tx_stats()
            );
        }
        c
    });
    let (server, digest, widest) = match p.exec.block_on(zcnet_executor::time::timeout(
        Duration::from_secs(600),
        server,
    )) {
        Ok(r) => r,
        Err(_) => panic!(
            "B stalled: A {:?} {:?}\nB {:?}\nwire {:?} {:?}",
            a.stats(),
            client.stats(),
            b.stats(),
            p.ends[0].tx_stats(),
            p.ends[1].tx_stats()
        ),
    };
    assert_eq!(digest, want, "the stream arrived byte-exact");
    // B counts the segments that crossed the wire (the chains' GSO marks say how many), not
    // the slots they came up in: no segment carries more than an MSS at MTU 1500.
    let rs = server.stats();
    assert!(
        rs.counters.segments_received >= rs.counters.bytes_received / 1460,
        "{rs:?}"
    );
    let sb = b.stats();
    eprintln!(
        "rx {rx}: B {sb:?}\nB's widest window {widest}\nwire A->B {:?}",
        p.ends[0].tx_stats()
    );
    drop((client, server));
    p.exec.block_on(p.exec.sleep(Duration::from_secs(30)));
    (sb, widest)
}

#[test]
fn sixteen_mib_arrive_as_chains_byte_exact_with_a_window_past_64_segments() {
    let p = chain_pair(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        4096,
    );
    let (sb, widest) = bulk(&p, 1024 * 1024);
    assert!(sb.rx_chains > 0, "B's TCP took chains: {sb:?}");
    for reason in [
        DropReason::Malformed,
        DropReason::BadChecksum,
        DropReason::NotForUs,
        DropReason::Unsupported,
    ] {
        assert_eq!(sb.dropped(reason), 0, "{reason:?}: {sb:?}");
    }
    assert!(
        widest > WINDOW_OF_64_SEGMENTS,
        "a 1 MiB receive buffer opens the window past 64 segments: {widest}"
    );
    p.assert_slots_back();
}

#[test]
fn sixteen_mib_over_ipv6_arrive_as_chains_byte_exact() {
    let p = chain_pair_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        4096,
        with_ula,
    );
    let (sb, widest) = bulk_to(&p, 1024 * 1024, ULA[1].into());
    assert!(sb.rx_chains > 0, "B's TCP took chains: {sb:?}");
    assert_eq!(sb.dropped(DropReason::Malformed), 0, "{sb:?}");
    assert!(widest > WINDOW_OF_64_SEGMENTS, "{widest}");
    p.assert_slots_back();
}

/// B's pool has 1,408-byte slots: a 64 KiB super-segment arrives over 47 of them, more than
/// one batch takes (45), so its connection takes it in two consecutive batches; and every
/// full-sized segment A sends alone arrives over two slots. Byte-exact, pool audit.
#[test]
fn chains_longer_than_a_batch_are_taken_in_pieces() {
    let exec = Executor::leak(VirtualClock::leak());
    let pools = [
        FramePool::leak(PoolConfig::new(4096)).expect("pool"),
        FramePool::leak(PoolConfig::new(4096).with_slot_size(1408)).expect("pool"),
    ];
    let p = chain_pair_on(exec, pools, Faults::default(), |_, _| {});
    let (sb, _) = bulk(&p, 1024 * 1024);
    assert!(sb.rx_chains > 0, "B's TCP took chains: {sb:?}");
    assert!(
        p.stacks[0].stats().tso_super_segments > 0,
        "A sent super-segments whole"
    );
    p.assert_slots_back();
}

#[test]
fn small_receive_buffers_take_chains_too() {
    let p = chain_pair(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        1024,
    );
    let (sb, widest) = bulk(&p, 64 * 1024);
    assert!(sb.rx_chains > 0, "B's TCP took chains: {sb:?}");
    assert!(
        widest <= 64 * 1024,
        "the window stays within the buffer: {widest}"
    );
    p.assert_slots_back();
}

/// What B's driver was asked, in order (see [`CallLog`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    /// A packet over this many slots was delivered.
    Chain(usize),
    /// A packet in one frame was delivered.
    Frame,
    /// Asked for a packet, none was queued.
    Empty,
    /// A frame (or chain) handed over to send.
    Sent,
}

/// A driver that forwards every call to `inner` and logs the receive polls (and what they
/// gave) and the transmits, in order.
struct CallLog<D> {
    inner: D,
    log: Arc<Mutex<Vec<Call>>>,
}

impl<D> CallLog<D> {
    fn note(&self, call: Call) {
        self.log.lock().unwrap().push(call);
    }
}

impl<D: Driver> Driver for CallLog<D> {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        let r = self.inner.poll_receive(cx);
        self.note(if r.is_ready() {
            Call::Frame
        } else {
            Call::Empty
        });
        r
    }
    fn poll_receive_chain(&mut self, cx: &mut Context<'_>) -> Poll<RxChain> {
        let r = self.inner.poll_receive_chain(cx);
        self.note(match &r {
            Poll::Ready(c) => Call::Chain(c.frame_count()),
            Poll::Pending => Call::Empty,
        });
        r
    }
    fn poll_receive_packet(&mut self, cx: &mut Context<'_>) -> Poll<RxPacket> {
        let r = self.inner.poll_receive_packet(cx);
        self.note(match &r {
            Poll::Ready(RxPacket::Frame(_)) => Call::Frame,
            Poll::Ready(RxPacket::Chain(c)) => Call::Chain(c.frame_count()),
            Poll::Pending => Call::Empty,
        });
        r
    }
    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.inner.poll_transmit_frame(cx)
    }
    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_transmit_ready(cx)
    }
    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        self.note(Call::Sent);
        self.inner.transmit(frame)
    }
    fn transmit_chain(&mut self, chain: TxChain) -> Result<(), TxError> {
        self.note(Call::Sent);
        self.inner.transmit_chain(chain)
    }
    fn flush(&mut self) {
        self.inner.flush()
    }
    fn receive_deferral(&mut self) -> Option<Duration> {
        self.inner.receive_deferral()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn hardware_address(&self) -> HardwareAddress {
        self.inner.hardware_address()
    }
    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        self.inner.poll_link_state(cx)
    }
}

/// 64 KiB receive buffers, as the TAP benchmark gives every socket, and each super-segment A
/// sends arrives over more slots than B's ingress budget. Ingress ends its run
/// after it, so the ACK goes out (carrying the window the reader reopened) before ingress
/// reads again: right after each such chain B's driver sends, and is not first asked for a
/// packet it does not have yet (over a TAP that is one `readv` per super-segment that can only
/// fail, and the ACK an `readv` later). Byte-exact, pool audit.
#[test]
fn the_ack_of_a_super_segment_goes_out_before_the_next_read() {
    let exec = Executor::leak(VirtualClock::leak());
    // A's super-segments arrive over 17 slots or so here (A sends runs of half the window):
    // B's budget is a few frames, so that each is a budget's worth.
    let budget = 8;
    let log = Arc::new(Mutex::new(Vec::new()));
    let pools = [
        FramePool::leak(PoolConfig::new(1024)).expect("pool"),
        FramePool::leak(PoolConfig::new(1024)).expect("pool"),
    ];
    let b_log = log.clone();
    let p = chain_pair_wrapped(
        exec,
        pools,
        Faults::default(),
        move |b| {
            Box::new(CallLog {
                inner: b,
                log: b_log,
            })
        },
        |side, config| {
            if side == 1 {
                config.ingress_budget = budget;
            }
        },
    );
    let (sb, _) = bulk(&p, 64 * 1024);
    assert!(sb.rx_chains > 0, "B's TCP took chains: {sb:?}");
    let calls = log.lock().unwrap().clone();
    let mut big = 0;
    let mut read_first = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let Call::Chain(slots) = *call else { continue };
        if slots < budget {
            continue;
        }
        big += 1;
        // The chain's connection had data to acknowledge: what B's driver saw next.
        if let Some(next) = calls[i + 1..].first() {
            if *next != Call::Sent {
                read_first.push((i, *next));
            }
        }
    }
    assert!(
        big > 100,
        "super-segments over at least {budget} slots arrived: {big} of {} calls",
        calls.len()
    );
    assert!(
        read_first.is_empty(),
        "{} of {big} super-segments were followed by a read before their ACK, e.g. {:?}",
        read_first.len(),
        &read_first[..read_first.len().min(8)]
    );
    p.assert_slots_back();
}

/// A simulated NIC that delivers chains, shared with the test playing its device.
#[derive(Clone)]
struct SharedNic(Arc<Mutex<SimNic>>);

impl Driver for SharedNic {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        self.0.lock().unwrap().poll_receive(cx)
    }
    fn poll_receive_chain(&mut self, cx: &mut Context<'_>) -> Poll<RxChain> {
        self.0.lock().unwrap().poll_receive_chain(cx)
    }
    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.0.lock().unwrap().poll_transmit_frame(cx)
    }
    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        let mut nic = self.0.lock().unwrap();
        let r = nic.transmit(frame);
        // The device sends at once: answers never wait for room.
        let n = nic.in_flight();
        nic.device_complete_tx(n);
        r
    }
    fn transmit_chain(&mut self, chain: TxChain) -> Result<(), TxError> {
        let mut nic = self.0.lock().unwrap();
        let r = nic.transmit_chain(chain);
        let n = nic.in_flight();
        nic.device_complete_tx(n);
        r
    }
    fn capabilities(&self) -> Capabilities {
        self.0.lock().unwrap().capabilities()
    }
    fn hardware_address(&self) -> HardwareAddress {
        self.0.lock().unwrap().hardware_address()
    }
    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        self.0.lock().unwrap().poll_link_state(cx)
    }
}

/// An IPv4 TCP segment from [`PEER`] to [`STACK`]'s port 80 carrying `payload`, as an Ethernet
/// frame addressed to the simulated NIC's MAC, checksums complete.
fn big_segment(mac: [u8; 6], payload: &[u8]) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: 40000,
        dst_port: 80,
        control: TcpControl::Psh,
        seq_number: TcpSeqNumber(1000),
        ack_number: Some(TcpSeqNumber(1)),
        window_len: 1000,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let segment = tcp_bytes(PEER.ip.into(), STACK.ip.into(), &tcp);
    let mut f = vec![0u8; 14 + 20 + segment.len()];
    f[..6].copy_from_slice(&mac);
    f[6..12].copy_from_slice(&PEER.mac.0);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
    ip.set_version(4);
    ip.set_header_len(20);
    ip.set_total_len((20 + segment.len()) as u16);
    ip.set_hop_limit(64);
    ip.set_next_header(IpProtocol::Tcp);
    ip.set_src_addr(PEER.ip);
    ip.set_dst_addr(STACK.ip);
    ip.fill_checksum();
    f[34..].copy_from_slice(&segment);
    f
}

#[test]
fn malformed_chains_are_dropped_counted_and_their_slots_come_back() {
    let exec = Executor::leak(VirtualClock::leak());
    let pool = FramePool::leak(PoolConfig::new(256)).unwrap();
    // Checksum verification in software: the stack verifies each chain's sums itself.
    let nic = SimNic::new(pool, 64, 16).with_offloads(ChecksumOffloads::empty(), 0, true);
    let nic = SharedNic(Arc::new(Mutex::new(nic)));
    let HardwareAddress::Ethernet(mac) = nic.hardware_address() else {
        unreachable!("an Ethernet NIC")
    };
    let config = side_config(1, 7);
    let resources: &'static StackResources<4> = StackResources::leak();
    let (stack, runner) =
        Stack::new(exec, pool, Box::new(nic.clone()), config, resources).expect("stack");
    runner.spawn(exec.local_spawner());
    let run = |exec: &'static Executor| exec.block_on(exec.sleep(Duration::from_millis(10)));
    run(exec);

    let payload: Vec<u8> = (0..6000u32).map(|i| i as u8).collect();
    let good = big_segment(mac, &payload);
    assert!(good.len() > pool.slot_size(), "a chain of several slots");
    let cases: Vec<(&str, Vec<u8>, DropReason)> = vec![
        (
            "a wrong TCP checksum",
            {
                let mut f = good.clone();
                f[5000] ^= 0x40;
                f
            },
            DropReason::BadChecksum,
        ),
        (
            "an IP total length past the chain",
            {
                let mut f = good.clone();
                let len = (f.len() - 14 + 1) as u16;
                let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
                ip.set_total_len(len);
                ip.fill_checksum();
                f
            },
            DropReason::Malformed,
        ),
        (
            "an IP total length below its header",
            {
                let mut f = good.clone();
                let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
                ip.set_total_len(19);
                ip.fill_checksum();
                f
            },
            DropReason::Malformed,
        ),
        (
            "a wrong IPv4 header checksum",
            {
                let mut f = good.clone();
                f[14 + 10] ^= 1;
                f
            },
            DropReason::BadChecksum,
        ),
        (
            "a TCP data offset past the TCP length the IP header gives",
            {
                let mut f = good.clone();
                f[34 + 12] = 15 << 4;
                let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
                ip.set_total_len(20 + 40);
                ip.fill_checksum();
                let (src, dst) = (IpAddress::from(PEER.ip), IpAddress::from(STACK.ip));
                TcpPacket::new_unchecked(&mut f[34..74]).fill_checksum(&src, &dst);
                f
            },
            DropReason::Malformed,
        ),
        (
            "a UDP datagram",
            {
                let mut f = good.clone();
                let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
                ip.set_next_header(IpProtocol::Udp);
                ip.fill_checksum();
                f
            },
            DropReason::Unsupported,
        ),
        (
            "an IP destination not ours",
            {
                let mut f = good.clone();
                let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
                ip.set_dst_addr(smoltcp::wire::Ipv4Address::new(10, 0, 0, 99));
                ip.fill_checksum();
                f
            },
            DropReason::NotForUs,
        ),
        (
            "an IP version that disagrees with the Ethernet type",
            {
                let mut f = good.clone();
                f[14] = 0x65;
                f
            },
            DropReason::Malformed,
        ),
    ];
    for (what, frame, reason) in cases {
        let before = stack.stats();
        assert!(
            nic.0.lock().unwrap().device_receive(&frame),
            "{what}: posted"
        );
        run(exec);
        let after = stack.stats();
        assert_eq!(
            after.dropped(reason),
            before.dropped(reason) + 1,
            "{what}: counted as {reason:?}\n{after:?}"
        );
        assert_eq!(after.rx_chains, before.rx_chains, "{what}: not taken");
    }
    // A good chain for no connection: dropped unanswered, counted.
    let before = stack.stats();
    assert!(nic.0.lock().unwrap().device_receive(&good));
    run(exec);
    let after = stack.stats();
    assert_eq!(
        after.dropped(DropReason::NoSocket),
        before.dropped(DropReason::NoSocket) + 1
    );
    // Every slot back but the NIC's posted ring and the stack's own.
    let _ = stack.shutdown();
    drop(nic);
    exec.block_on(exec.sleep(Duration::from_millis(100)));
    zcnet_tests::audit::assert_all_free(pool);
}
