//! Zero-copy datagram sockets between two stacks over the in-memory wire, with every frame's
//! memory recorded at the driver (`zcnet_tests::recorder`):
//!
//! * a received payload lies inside the very pool slot the driver filled (same address), the
//!   slot is LENT while the application holds it and free once it drops the datagram;
//! * a payload written into a `TxFrame` is the memory the driver hands to the device;
//! * datagrams held by the application never starve the RX ring: the queue bound drops and
//!   counts the excess, and ping and TCP still flow;
//! * an unresolved next hop holds frames while ARP goes out, then delivers them; no answer gives
//!   `NeighborTimeout` after three requests, counted, with held frames bounded;
//! * checksum-corrupt datagrams are dropped and counted, never delivered (hand-made frames, and
//!   a wire that corrupts 20% of frames);
//! * IPv6 both ways (NDP), port conflicts with smoltcp's UDP sockets.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcnet_buffer::{FramePool, SlotState};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::time::{sleep, timeout};
use zcnet_executor::Executor;
use zcnet_stack::datagram::{DatagramError, DatagramQueue, DatagramSocket, IpVersion};
use zcnet_stack::icmp::{IcmpBuffers, IcmpSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::{
    DropReason, IpAddress, IpEndpoint, IpListenEndpoint, Ipv4Address, Stack, StackError,
};
use zcnet_tests::net::{with_ula, ADDR, ULA};
use zcnet_tests::recorder::{recorded_pair, Recorder};
use zcnet_tests::wire::Faults;

/// Ethernet + IPv4 + UDP headers: where the payload starts in an IPv4 frame.
const V4_HEADERS: usize = 14 + 20 + 8;
/// Ethernet + IPv6 + UDP headers.
const V6_HEADERS: usize = 14 + 40 + 8;

/// TX slots a stack keeps for good (its scratch frame).
const SCRATCH: usize = 1;
/// TX slots a stack may keep besides: its spare frame (an unused reply frame kept for the next
/// transmission).
const SPARE: usize = 1;

/// Whether `pool` holds exactly `n` TX frames besides the stack's own (scratch and spare).
fn holds_tx(pool: &FramePool, n: usize) -> bool {
    let tx = pool.occupancy().get(SlotState::Tx);
    (n + SCRATCH..=n + SCRATCH + SPARE).contains(&tx)
}

fn exec() -> &'static Executor {
    Executor::leak(LinuxPlatform::leak().expect("epoll"))
}

fn zc(stack: Stack, port: u16, queue: usize) -> DatagramSocket {
    DatagramSocket::bind(stack, port, DatagramQueue::with_capacity(queue)).unwrap()
}

/// Takes a TX frame, writes `payload` into it in place, sends it.
async fn zc_send(
    sock: &DatagramSocket,
    payload: &[u8],
    to: impl Into<IpEndpoint>,
) -> Result<(), DatagramError> {
    let mut f = sock.tx_frame().await;
    f.append(payload.len()).unwrap().copy_from_slice(payload);
    sock.send_to(f, to).await
}

/// Waits until `cond` holds, checking every few milliseconds; panics after `limit`.
async fn until(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        sleep(Duration::from_millis(5)).await;
    }
}

/// Frames in `rec`'s TX log that are ARP requests for `target`.
fn arp_requests(rec: &Recorder, target: Ipv4Address) -> usize {
    rec.tx_frames()
        .iter()
        .filter(|f| {
            f.len() >= 42
                && f[12..14] == [0x08, 0x06]
                && f[20..22] == [0, 1]
                && f[38..42] == target.octets()
        })
        .count()
}

/// Frames in `rec`'s TX log that are UDP to `port` (IPv4, no options).
fn udp_frames_to(rec: &Recorder, port: u16) -> usize {
    rec.tx_frames()
        .iter()
        .filter(|f| {
            f.len() >= V4_HEADERS && f[12..14] == [0x08, 0x00] && f[23] == 17 && {
                f[36..38] == port.to_be_bytes()
            }
        })
        .count()
}

/// The bytes an application sees in `Datagram::payload()` are inside the RX frame the driver
/// returned (same slot, same address, 42 bytes in: the headers were skipped, not copied); the
/// slot is LENT while the datagram lives and returns when it drops.
#[test]
fn received_payload_is_the_slot_the_driver_filled() {
    let exec = exec();
    let (p, rec) = recorded_pair(exec, Faults::default(), 64, |_, _| {});
    let [a, b] = p.stacks;
    let pool_b = p.pools[1];
    exec.block_on(async move {
        let zs = zc(b, 7000, 32);
        let us = UdpSocket::bind(a, 6000, UdpBuffers::with_capacity(16, 16384)).unwrap();
        for i in 0..10u8 {
            let msg: Vec<u8> = (0..100 + i as usize * 137).map(|k| k as u8 ^ i).collect();
            us.send_to(&msg, (ADDR[1], 7000)).await.unwrap();
            let d = zs.recv().await;
            assert_eq!(d.payload(), &msg[..]);
            assert_eq!(d.src(), IpEndpoint::new(ADDR[0].into(), 6000));
            assert_eq!(d.dst(), IpEndpoint::new(ADDR[1].into(), 7000));
            let (ptr, len) = (d.payload().as_ptr(), d.payload().len());
            let r = rec[1]
                .rx_containing(ptr, len)
                .expect("the payload lies inside a frame the driver received");
            assert_eq!(r.slot, d.frame().slot_index());
            assert_eq!(pool_b.slot_of(ptr), Some(r.slot));
            assert_eq!(ptr as usize - r.addr, V4_HEADERS);
            assert_eq!(pool_b.slot_state(r.slot), Some(SlotState::Lent));
            drop(d);
            assert_ne!(pool_b.slot_state(r.slot), Some(SlotState::Lent));
        }
        assert_eq!(b.stats().datagrams_in, 10);
        assert_eq!(pool_b.occupancy().get(SlotState::Lent), 0);
    });
}

/// The payload an application writes into a `TxFrame` is the memory the driver hands to the
/// device: same slot, same address, 42 bytes after the frame start, and the headers in front are
/// valid (smoltcp's UDP socket on the other side accepts the datagram, checksum included).
#[test]
fn sent_payload_is_the_memory_the_driver_transmits() {
    let exec = exec();
    let (p, rec) = recorded_pair(exec, Faults::default(), 64, |_, _| {});
    let [a, b] = p.stacks;
    exec.block_on(async move {
        let zs = zc(a, 7001, 8);
        assert_eq!(zs.max_payload(IpVersion::Ipv4), 1472);
        assert_eq!(zs.max_payload(IpVersion::Ipv6), 1452);
        let us = UdpSocket::bind(b, 7002, UdpBuffers::with_capacity(16, 16384)).unwrap();
        let mut buf = vec![0u8; 2048];
        for i in 0..6usize {
            let msg: Vec<u8> = (0..1 + i * 290).map(|k| (k * 7 + i) as u8).collect();
            let mut f = zs.tx_frame().await;
            f.append(msg.len()).unwrap().copy_from_slice(&msg);
            let (ptr, slot) = (f.as_ptr(), f.slot_index());
            zs.send_to(f, (ADDR[1], 7002)).await.unwrap();
            let (r, bytes) = rec[0]
                .tx_containing(ptr, msg.len())
                .expect("the payload lies inside a frame the driver transmitted");
            assert_eq!(r.slot, slot);
            assert_eq!(ptr as usize - r.addr, V4_HEADERS);
            assert_eq!(&bytes[V4_HEADERS..], &msg[..]);
            let (n, from) = us.recv_from(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], &msg[..]);
            assert_eq!(from, IpEndpoint::new(ADDR[0].into(), 7001));
        }
        // The first send had to resolve B's MAC: one ARP request went out first.
        assert_eq!(arp_requests(&rec[0], ADDR[1]), 1);
        assert_eq!(a.stats().datagrams_out, 6);
        assert_eq!(
            zs.send_to(zs.tx_frame().await, (ADDR[1], 0)).await,
            Err(DatagramError::Unaddressable)
        );
        let mut big = zs.tx_frame().await;
        big.append(1473).unwrap();
        assert_eq!(
            zs.send_to(big, (ADDR[1], 7002)).await,
            Err(DatagramError::TooLarge)
        );
        assert_eq!(
            zs.send_to(zs.tx_frame().await, (Ipv4Address::new(192, 168, 7, 7), 9))
                .await,
            Err(DatagramError::Unaddressable),
            "off-link with no gateway"
        );
    });
    // The stack's own scratch frame (and at most its spare) are the only TX slots left.
    assert!(holds_tx(p.pools[0], 0), "{:?}", p.pools[0].occupancy());
}

/// B's zero-copy socket holds half of B's pool in datagrams its application does not read; the
/// rest is dropped at the queue bound and counted. Ping and a 256 KiB TCP transfer still flow,
/// then the held datagrams are read in order.
#[test]
fn held_datagrams_never_starve_the_rx_ring() {
    const SLOTS: usize = 48;
    const QUEUE: usize = 24;
    const SENT: usize = 40;
    let exec = exec();
    let (p, _rec) = recorded_pair(exec, Faults::default(), SLOTS, |_, _| {});
    let [a, b] = p.stacks;
    let pool_b = p.pools[1];
    exec.block_on(async move {
        let zs = zc(b, 7010, QUEUE);
        let us = UdpSocket::bind(a, 6010, UdpBuffers::with_capacity(64, 65536)).unwrap();
        for i in 0..SENT {
            us.send_to(&[i as u8; 300], (ADDR[1], 7010)).await.unwrap();
        }
        until(
            "every datagram delivered or dropped",
            Duration::from_secs(5),
            || {
                let s = b.stats();
                s.datagrams_in + s.dropped(DropReason::DatagramQueueFull) == SENT as u64
            },
        )
        .await;
        assert_eq!(b.stats().datagrams_in, QUEUE as u64);
        assert_eq!(
            b.stats().dropped(DropReason::DatagramQueueFull),
            (SENT - QUEUE) as u64
        );
        assert_eq!(zs.dropped(), (SENT - QUEUE) as u64);
        assert_eq!(zs.queued(), QUEUE);
        assert_eq!(pool_b.occupancy().get(SlotState::Lent), QUEUE);

        // Traffic still flows while half of B's pool is held by the application.
        let icmp = IcmpSocket::bind(a, 0x77, IcmpBuffers::with_capacity(4, 4096)).unwrap();
        for seq in 0..5 {
            icmp.ping(ADDR[1].into(), seq, b"still here", Duration::from_secs(2))
                .await
                .expect("ping answered while datagrams are held");
        }
        let data: Vec<u8> = (0..256 * 1024)
            .map(|i: usize| (i * 31 % 251) as u8)
            .collect();
        let expect = data.clone();
        let server = exec.local_spawner().spawn(async move {
            let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(16384, 16384)).unwrap();
            s.accept(8000).await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            got
        });
        sleep(Duration::from_millis(10)).await;
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(16384, 16384)).unwrap();
        c.connect((ADDR[1], 8000)).await.unwrap();
        c.write_all(&data).await.unwrap();
        c.close();
        let got = timeout(Duration::from_secs(20), server)
            .await
            .expect("TCP transfer finished while datagrams are held");
        assert!(got == expect, "TCP bytes differ");
        assert_eq!(pool_b.occupancy().get(SlotState::Lent), QUEUE);

        for i in 0..QUEUE {
            let d = zs.try_recv().expect("held datagram");
            assert_eq!(d.payload(), &[i as u8; 300][..]);
        }
        assert!(zs.try_recv().is_none());
        assert_eq!(pool_b.occupancy().get(SlotState::Lent), 0);
    });
}

/// With B's replies cut, A's sends to B are held (not sent, not failed) while A's ARP requests
/// go unanswered; once the link is back, the next request is answered and every held frame is
/// sent and arrives.
#[test]
fn unresolved_neighbour_holds_frames_then_delivers_them() {
    let exec = exec();
    let (p, rec) = recorded_pair(exec, Faults::default(), 64, |_, _| {});
    let [a, b] = p.stacks;
    let ends = p.ends;
    exec.block_on(async move {
        let zs = std::rc::Rc::new(zc(a, 7020, 8));
        let us = UdpSocket::bind(b, 7021, UdpBuffers::with_capacity(16, 16384)).unwrap();
        ends[1].set_cut(true);
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..3u8 {
            let (zs, done) = (zs.clone(), done.clone());
            tasks.push(exec.local_spawner().spawn(async move {
                let r = zc_send(&zs, &[b'h', i], (ADDR[1], 7021)).await;
                done.fetch_add(1, Ordering::SeqCst);
                r
            }));
        }
        sleep(Duration::from_millis(300)).await;
        assert_eq!(
            done.load(Ordering::SeqCst),
            0,
            "sends wait for the neighbour"
        );
        assert!(
            arp_requests(&rec[0], ADDR[1]) >= 1,
            "an ARP request went out"
        );
        assert_eq!(
            udp_frames_to(&rec[0], 7021),
            0,
            "no datagram left unaddressed"
        );
        assert_eq!(a.stats().datagrams_out, 0);
        assert!(
            holds_tx(p.pools[0], 3),
            "three frames held: {:?}",
            p.pools[0].occupancy()
        );

        ends[1].set_cut(false);
        for t in tasks {
            timeout(Duration::from_secs(3), t)
                .await
                .expect("held send finished")
                .expect("held frame sent once the neighbour answered");
        }
        assert_eq!(a.stats().datagrams_out, 3);
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        for _ in 0..3 {
            let (n, _) = us.recv_from(&mut buf).await.unwrap();
            got.push(buf[..n].to_vec());
        }
        got.sort();
        assert_eq!(
            got,
            vec![b"h\0".to_vec(), b"h\x01".to_vec(), b"h\x02".to_vec()]
        );
        assert_eq!(a.stats().dropped(DropReason::NeighborTimeout), 0);
    });
}

/// Sends to an address nobody answers: held (at most `MAX_HELD_FRAMES` stack-wide, the next
/// one fails at once), three ARP requests one second apart, then every held send fails with
/// `NeighborTimeout`, counted, and no slot stays held.
#[test]
fn unanswered_neighbour_times_out_with_an_error() {
    let exec = exec();
    let (p, rec) = recorded_pair(exec, Faults::default(), 64, |_, _| {});
    let [a, _b] = p.stacks;
    let nobody = Ipv4Address::new(10, 0, 0, 99);
    exec.block_on(async move {
        let zs = std::rc::Rc::new(zc(a, 7030, 8));
        let start = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..zcnet_stack::MAX_HELD_FRAMES {
            let zs = zs.clone();
            tasks.push(
                exec.local_spawner()
                    .spawn(async move { zc_send(&zs, &[i as u8; 10], (nobody, 9)).await }),
            );
        }
        until("all frames held", Duration::from_secs(2), || {
            holds_tx(p.pools[0], zcnet_stack::MAX_HELD_FRAMES)
        })
        .await;
        assert_eq!(
            zc_send(&zs, b"one too many", (nobody, 9)).await,
            Err(DatagramError::NeighborQueueFull)
        );
        for t in tasks {
            assert_eq!(t.await, Err(DatagramError::NeighborTimeout));
        }
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(2900) && waited < Duration::from_secs(5),
            "timed out after {waited:?}"
        );
        assert_eq!(arp_requests(&rec[0], nobody), 3);
        assert_eq!(
            a.stats().dropped(DropReason::NeighborTimeout),
            zcnet_stack::MAX_HELD_FRAMES as u64
        );
        assert_eq!(a.stats().datagrams_out, 0);
        assert!(holds_tx(p.pools[0], 0), "{:?}", p.pools[0].occupancy());
    });
}

/// RFC 1071 checksum of `data` starting from the partial sum `sum`.
fn checksum(mut sum: u32, data: &[u8]) -> u16 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A UDP/IPv4 frame from A (10.0.0.1:6000) to B (10.0.0.2:`port`), checksums right.
fn udp_v4_frame(port: u16, payload: &[u8]) -> Vec<u8> {
    udp_v4_frame_to([2, 0, 0, 0, 0, 2], ADDR[1], port, payload)
}

/// A UDP/IPv4 frame from A (10.0.0.1:6000) to `dst`:`port` at MAC `mac`, checksums right.
fn udp_v4_frame_to(mac: [u8; 6], dst: Ipv4Address, port: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; V4_HEADERS + payload.len()];
    f[0..6].copy_from_slice(&mac);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (20 + 8 + payload.len()) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&ADDR[0].octets());
    ip[16..20].copy_from_slice(&dst.octets());
    let c = checksum(0, ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp_len = (8 + payload.len()) as u16;
    f[34..36].copy_from_slice(&6000u16.to_be_bytes());
    f[36..38].copy_from_slice(&port.to_be_bytes());
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    f[42..].copy_from_slice(payload);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&ADDR[0].octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&udp_len.to_be_bytes());
    let partial = pseudo
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    let c = match checksum(partial, &f[34..]) {
        0 => 0xffff,
        c => c,
    };
    f[40..42].copy_from_slice(&c.to_be_bytes());
    f
}

/// Hand-made frames injected on the wire: a corrupt UDP payload and a corrupt IPv4 header are
/// dropped and counted; good frames, including one without a UDP checksum (allowed on IPv4)
/// and broadcasts, are delivered.
#[test]
fn checksum_corrupt_datagrams_are_dropped_and_counted() {
    let exec = exec();
    let (p, _rec) = recorded_pair(exec, Faults::default(), 64, |_, _| {});
    let [_a, b] = p.stacks;
    let ends = p.ends;
    exec.block_on(async move {
        let zs = zc(b, 7040, 16);
        ends[0].inject(&udp_v4_frame(7040, b"good 1"));
        let mut bad_udp = udp_v4_frame(7040, b"bad payload");
        bad_udp[V4_HEADERS + 2] ^= 0x10;
        ends[0].inject(&bad_udp);
        let mut bad_ip = udp_v4_frame(7040, b"bad ip header");
        bad_ip[14 + 10] ^= 0x01; // the header checksum itself
        ends[0].inject(&bad_ip);
        let mut no_sum = udp_v4_frame(7040, b"no checksum");
        no_sum[40..42].copy_from_slice(&[0, 0]);
        ends[0].inject(&no_sum);
        ends[0].inject(&udp_v4_frame(7040, b"good 2"));
        // Broadcasts (limited and subnet-directed) reach a socket bound to no address.
        let everyone = Ipv4Address::new(255, 255, 255, 255);
        let subnet = Ipv4Address::new(10, 0, 0, 255);
        ends[0].inject(&udp_v4_frame_to([0xff; 6], everyone, 7040, b"broadcast"));
        ends[0].inject(&udp_v4_frame_to([0xff; 6], subnet, 7040, b"subnet"));
        let want: [(&[u8], Ipv4Address); 5] = [
            (b"good 1", ADDR[1]),
            (b"no checksum", ADDR[1]),
            (b"good 2", ADDR[1]),
            (b"broadcast", everyone),
            (b"subnet", subnet),
        ];
        for (w, to) in want {
            let d = timeout(Duration::from_secs(2), zs.recv())
                .await
                .expect("datagram");
            assert_eq!(d.payload(), w);
            assert_eq!(d.dst(), IpEndpoint::new(to.into(), 7040));
        }
        sleep(Duration::from_millis(20)).await;
        assert!(zs.try_recv().is_none(), "corrupt datagrams never delivered");
        assert_eq!(b.stats().dropped(DropReason::BadChecksum), 2);
        assert_eq!(b.stats().datagrams_in, 5);
    });
}

/// A wire that flips a bit in 20% of frames: every datagram delivered is byte-exact, and the
/// corrupt ones were dropped and counted.
#[test]
fn randomly_corrupted_datagrams_are_never_delivered() {
    const N: usize = 400;
    let exec = exec();
    let faults = Faults {
        seed: 42,
        corrupt: 0.2,
        ..Faults::default()
    };
    let (p, _rec) = recorded_pair(exec, faults, 128, |_, _| {});
    let [a, b] = p.stacks;
    exec.block_on(async move {
        let tx = zc(a, 7050, 8);
        let rx = zc(b, 7051, 64);
        let payload = |i: usize| -> Vec<u8> {
            let len = 16 + (i * 37) % 1200;
            let mut v: Vec<u8> = (0..len).map(|k| (k * 13 + i) as u8).collect();
            v[..2].copy_from_slice(&(i as u16).to_be_bytes());
            v
        };
        let mut delivered = 0usize;
        for i in 0..N {
            // An ARP exchange may be corrupted too: retry until the neighbour resolves.
            while let Err(e) = zc_send(&tx, &payload(i), (ADDR[1], 7051)).await {
                assert_eq!(e, DatagramError::NeighborTimeout);
            }
            while let Some(d) = rx.try_recv() {
                let i = u16::from_be_bytes([d.payload()[0], d.payload()[1]]) as usize;
                assert!(i < N && d.payload() == &payload(i)[..], "corrupt delivery");
                delivered += 1;
            }
            if i % 16 == 0 {
                sleep(Duration::from_millis(1)).await;
            }
        }
        sleep(Duration::from_millis(50)).await;
        while let Some(d) = rx.try_recv() {
            let i = u16::from_be_bytes([d.payload()[0], d.payload()[1]]) as usize;
            assert!(i < N && d.payload() == &payload(i)[..], "corrupt delivery");
            delivered += 1;
        }
        let bad = b.stats().dropped(DropReason::BadChecksum);
        assert!(bad >= 20, "only {bad} corrupt datagrams caught");
        assert!(delivered >= N / 2, "only {delivered} of {N} delivered");
        assert!(delivered as u64 + bad <= N as u64);
    });
}

/// IPv6 both ways: A's send resolves B with a neighbour solicitation; B learned A's MAC from
/// that solicitation and answers without one of its own. Payloads stay in their slots.
#[test]
fn ipv6_datagrams_both_ways_in_place() {
    let exec = exec();
    let (p, rec) = recorded_pair(exec, Faults::default(), 64, with_ula);
    let [a, b] = p.stacks;
    let pools = p.pools;
    exec.block_on(async move {
        let za = zc(a, 7060, 8);
        let zb = zc(b, 7061, 8);
        for i in 0..5u8 {
            let msg = vec![i; 700 + i as usize];
            zc_send(&za, &msg, (ULA[1], 7061)).await.unwrap();
            let d = zb.recv().await;
            assert_eq!(d.payload(), &msg[..]);
            assert_eq!(d.src(), IpEndpoint::new(ULA[0].into(), 7060));
            assert_eq!(d.dst(), IpEndpoint::new(ULA[1].into(), 7061));
            let r = rec[1]
                .rx_containing(d.payload().as_ptr(), d.payload().len())
                .expect("payload inside a received frame");
            assert_eq!(d.payload().as_ptr() as usize - r.addr, V6_HEADERS);
            assert_eq!(pools[1].slot_of(d.payload().as_ptr()), Some(r.slot));

            let mut reply = zb.tx_frame().await;
            reply.append(d.payload().len()).unwrap().fill(!i);
            let ptr = reply.as_ptr();
            zb.send_to(reply, d.src()).await.unwrap();
            let (t, _) = rec[1].tx_containing(ptr, msg.len()).expect("sent in place");
            assert_eq!(ptr as usize - t.addr, V6_HEADERS);
            let back = za.recv().await;
            assert!(back.payload().iter().all(|&x| x == !i));
            assert_eq!(back.src(), IpEndpoint::new(ULA[1].into(), 7061));
        }
        let solicitations = |r: &Recorder| {
            r.tx_frames()
                .iter()
                .filter(|f| {
                    f.len() > 54 && f[12..14] == [0x86, 0xdd] && f[20] == 58 && f[54] == 135
                })
                .count()
        };
        assert_eq!(solicitations(&rec[0]), 1, "A solicited B once");
        assert_eq!(
            solicitations(&rec[1]),
            0,
            "B learned A from the solicitation"
        );
        assert_eq!(a.stats().datagrams_out, 5);
        assert_eq!(b.stats().datagrams_out, 5);
        // The same sockets carry IPv4 too (ARP this time).
        zc_send(&za, b"v4 too", (ADDR[1], 7061)).await.unwrap();
        let d = zb.recv().await;
        assert_eq!(d.payload(), b"v4 too");
        assert_eq!(d.src(), IpEndpoint::new(ADDR[0].into(), 7060));
    });
}

/// A zero-copy socket and a smoltcp UDP socket cannot share a port, in either order; nor can
/// two zero-copy sockets with overlapping addresses. Port 0 picks a free port.
#[test]
fn port_conflicts_with_udp_sockets_are_refused() {
    let exec = exec();
    let (p, _rec) = recorded_pair(exec, Faults::default(), 32, |_, _| {});
    let [a, _b] = p.stacks;
    let q = || DatagramQueue::with_capacity(4);
    let _u = UdpSocket::bind(a, 5000, UdpBuffers::with_capacity(2, 1024)).unwrap();
    assert_eq!(
        DatagramSocket::bind(a, 5000, q()).err(),
        Some(StackError::AddressInUse)
    );
    let _z = DatagramSocket::bind(a, 5001, q()).unwrap();
    assert_eq!(
        UdpSocket::bind(a, 5001, UdpBuffers::with_capacity(2, 1024)).err(),
        Some(StackError::AddressInUse)
    );
    assert_eq!(
        DatagramSocket::bind(a, (IpAddress::from(ADDR[0]), 5001), q()).err(),
        Some(StackError::AddressInUse)
    );
    let specific = IpListenEndpoint {
        addr: Some(ADDR[0].into()),
        port: 5002,
    };
    let _s = DatagramSocket::bind(a, specific, q()).unwrap();
    assert_eq!(
        DatagramSocket::bind(a, 5002, q()).err(),
        Some(StackError::AddressInUse)
    );
    assert_eq!(
        DatagramSocket::bind(a, 5003, DatagramQueue::with_capacity(0)).err(),
        Some(StackError::NoBuffers)
    );
    let e = DatagramSocket::bind(a, 0, q()).unwrap();
    let port = e.local_endpoint().port;
    assert!(port >= 49152);
    assert_eq!(
        UdpSocket::bind(a, port, UdpBuffers::with_capacity(2, 1024)).err(),
        Some(StackError::AddressInUse)
    );
    drop(e);
    UdpSocket::bind(a, port, UdpBuffers::with_capacity(2, 1024)).expect("port free again");
}
