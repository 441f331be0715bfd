//! The neighbour table under attack, over the in-memory wire with crafted frames injected
//! (`link/neighbor.rs`, "Room" and "Advertisements"):
//!
//! * a flood from spoofed on-link sources (segments answered with resets and SYN-ACKs, ARP
//!   requests, unsolicited neighbour advertisements) while a transfer through the gateway goes
//!   on: the transfer completes, the gateway is resolved once, the flood's answers hit the
//!   bound on unsolicited entries (counted);
//! * an unsolicited neighbour advertisement makes no entry (RFC 4861 §7.2.5): a send to its
//!   target still solicits, and reaches the real neighbour;
//! * an advertisement without the Override flag does not replace a known MAC; one with it does.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Icmpv6Packet, Icmpv6Repr, IpProtocol, IpRepr, Ipv6Packet, Ipv6Repr,
    NdiscNeighborFlags, NdiscRepr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::time::{sleep, timeout};
use zcnet_executor::Executor;
use zcnet_stack::datagram::{DatagramQueue, DatagramSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::{
    ipv6_link_local, DropReason, IpAddress, IpEndpoint, Ipv4Address, Ipv6Address, Ipv6Cidr,
    StaticV6,
};
use zcnet_tests::net::ADDR;
use zcnet_tests::recorder::{recorded_pair, Recorder};
use zcnet_tests::wire::Faults;

/// The wire's MACs: end `i` is `02:00:00:00:00:0i+1`.
const MAC: [[u8; 6]; 2] = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];

fn exec() -> &'static Executor {
    Executor::leak(LinuxPlatform::leak().expect("epoll"))
}

/// An Ethernet frame from `src` to `dst` around `payload`.
fn ethernet(dst: [u8; 6], src: [u8; 6], ethertype: EthernetProtocol, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + payload.len()];
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr {
        src_addr: EthernetAddress(src),
        dst_addr: EthernetAddress(dst),
        ethertype,
    }
    .emit(&mut eth);
    eth.payload_mut().copy_from_slice(payload);
    f
}

/// A TCP segment `tcp` from `src` (at MAC `src_mac`) to `dst` (at MAC `dst_mac`), checksums
/// right.
fn segment(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: IpAddress,
    dst: IpAddress,
    tcp: &TcpRepr<'_>,
) -> Vec<u8> {
    let caps = ChecksumCapabilities::default();
    let mut t = vec![0u8; tcp.buffer_len()];
    tcp.emit(&mut TcpPacket::new_unchecked(&mut t[..]), &src, &dst, &caps);
    let repr = IpRepr::new(src, dst, IpProtocol::Tcp, t.len(), 64);
    let mut ip = vec![0u8; repr.header_len() + t.len()];
    repr.emit(&mut ip[..], &caps);
    ip[repr.header_len()..].copy_from_slice(&t);
    let ethertype = match src {
        IpAddress::Ipv4(_) => EthernetProtocol::Ipv4,
        IpAddress::Ipv6(_) => EthernetProtocol::Ipv6,
    };
    ethernet(dst_mac, src_mac, ethertype, &ip)
}

/// A bare TCP segment from port 40000 to `port`: a SYN, or an ACK.
fn tcp(port: u16, syn: bool) -> TcpRepr<'static> {
    TcpRepr {
        src_port: 40000,
        dst_port: port,
        control: if syn {
            TcpControl::Syn
        } else {
            TcpControl::None
        },
        seq_number: TcpSeqNumber(1000),
        ack_number: (!syn).then_some(TcpSeqNumber(5000)),
        window_len: 1000,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: &[],
    }
}

/// An ARP request from `src` at `src_mac` for `target`, broadcast.
fn arp_request(src_mac: [u8; 6], src: Ipv4Address, target: Ipv4Address) -> Vec<u8> {
    let arp = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: EthernetAddress(src_mac),
        source_protocol_addr: src,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: target,
    };
    let mut p = vec![0u8; arp.buffer_len()];
    arp.emit(&mut ArpPacket::new_unchecked(&mut p[..]));
    ethernet([0xff; 6], src_mac, EthernetProtocol::Arp, &p)
}

/// A neighbour advertisement: `target` is at `lladdr` (flags as given), from `target` to `dst`
/// at MAC `dst_mac`, hop limit 255, checksums right.
fn advert(
    lladdr: [u8; 6],
    target: Ipv6Address,
    dst_mac: [u8; 6],
    dst: Ipv6Address,
    flags: NdiscNeighborFlags,
) -> Vec<u8> {
    let icmp = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags,
        target_addr: target,
        lladdr: Some(EthernetAddress(lladdr).into()),
    });
    let repr = Ipv6Repr {
        src_addr: target,
        dst_addr: dst,
        next_header: IpProtocol::Icmpv6,
        payload_len: icmp.buffer_len(),
        hop_limit: 255,
    };
    let mut ip = vec![0u8; repr.buffer_len() + icmp.buffer_len()];
    repr.emit(&mut Ipv6Packet::new_unchecked(&mut ip[..]));
    icmp.emit(
        &target,
        &dst,
        &mut Icmpv6Packet::new_unchecked(&mut ip[repr.buffer_len()..]),
        &ChecksumCapabilities::default(),
    );
    ethernet(dst_mac, lladdr, EthernetProtocol::Ipv6, &ip)
}

/// Neighbour solicitations for `target` in `rec`'s TX log.
fn solicitations(rec: &Recorder, target: Ipv6Address) -> usize {
    rec.tx_frames()
        .iter()
        .filter(|f| {
            f.len() >= 78
                && f[12..14] == [0x86, 0xdd]
                && f[20] == 58
                && f[54] == 135
                && f[62..78] == target.octets()
        })
        .count()
}

/// Frames in `rec`'s TX log addressed to MAC `mac`.
fn frames_to(rec: &Recorder, mac: [u8; 6]) -> usize {
    rec.tx_frames().iter().filter(|f| f[..6] == mac).count()
}

/// A spoofed on-link address of A's subnets: IPv4 10.0.0.20–249, IPv6 `prefix::1:n`.
fn spoofed_v4(n: u32) -> Ipv4Address {
    Ipv4Address::new(10, 0, 0, 20 + (n % 230) as u8)
}

fn spoofed_v6(prefix: u16, n: u32) -> Ipv6Address {
    Ipv6Address::new(prefix, 0, 0, 0, 0, 0, 1, n as u16)
}

/// A spoofed source's MAC.
fn spoofed_mac(n: u32) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, 0xee, b[0], b[1], b[2], b[3]]
}

/// A sends 4 MB to B over IPv6 through its gateway (B's link-local address; B's own address is
/// off A's subnet), paced over about three seconds, while a flood from spoofed on-link sources
/// reaches A: every 40 ms, 16 new sources each send an ACK to a closed port (answered with a
/// reset), a SYN to A's listening port (a SYN-ACK or a reset), an ARP request for A's address
/// and an unsolicited neighbour advertisement. None of them ever answers ARP / NDP. The
/// transfer completes, A solicits the gateway exactly once (its entry is never pushed out),
/// and the answers to the flood are dropped at the bound, counted as `NeighborTableFull`.
#[test]
fn neighbour_flood_does_not_stall_a_transfer_through_the_gateway() {
    const PREFIX: [u16; 2] = [0xfd0a, 0xfd0b];
    let own = |i: usize| Ipv6Address::new(PREFIX[i], 0, 0, 0, 0, 0, 0, i as u16 + 1);
    let gateway = ipv6_link_local(MAC[1]);
    let exec = exec();
    let (p, rec) = recorded_pair(exec, Faults::default(), 256, |i, c| {
        c.ipv6 = Some(StaticV6 {
            address: Ipv6Cidr::new(own(i), 64),
            gateway: Some(ipv6_link_local(MAC[1 - i])),
        });
        c.ipv6_link_local = true;
    });
    let [a, b] = p.stacks;
    let ends = p.ends;
    const CHUNK: usize = 64 * 1024;
    const CHUNKS: usize = 64;
    let done = Rc::new(AtomicBool::new(false));
    let server = exec.local_spawner().spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(65536, 65536)).unwrap();
        s.accept(7100).await.unwrap();
        let mut got = 0usize;
        let mut sum = 0u64;
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got += n;
            sum += buf[..n].iter().map(|&x| u64::from(x)).sum::<u64>();
        }
        s.close();
        (got, sum)
    });
    // A listens on 9000 (a spoofed SYN makes it half-open), 9 is closed.
    let _listen = exec.local_spawner().spawn(async move {
        let mut s = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 4096)).unwrap();
        let _ = s.accept(9000).await;
        std::future::pending::<()>().await
    });
    // The recorder keeps the last `RECORDS` frames, fewer than A sends here: count A's
    // solicitations for the gateway as they go (the executor runs one task at a time, so
    // nothing is sent between the count and the clear).
    let sampling = done.clone();
    let log = rec[0].clone();
    let sampler = exec.local_spawner().spawn(async move {
        let mut asked = 0;
        loop {
            let last = sampling.load(Ordering::Relaxed);
            asked += solicitations(&log, gateway);
            log.clear();
            if last {
                return asked;
            }
            sleep(Duration::from_millis(5)).await;
        }
    });
    let flooding = done.clone();
    let flood = exec.local_spawner().spawn(async move {
        let mut n = 0u32;
        while !flooding.load(Ordering::Relaxed) {
            for _ in 0..16 {
                n += 1;
                let mac = spoofed_mac(n);
                let (v4, v6) = (spoofed_v4(n), spoofed_v6(PREFIX[0], n));
                ends[1].inject(&segment(
                    mac,
                    MAC[0],
                    v4.into(),
                    ADDR[0].into(),
                    &tcp(9, false),
                ));
                ends[1].inject(&segment(
                    mac,
                    MAC[0],
                    v6.into(),
                    own(0).into(),
                    &tcp(9000, true),
                ));
                ends[1].inject(&arp_request(mac, spoofed_v4(n + 115), ADDR[0]));
                ends[1].inject(&advert(
                    mac,
                    spoofed_v6(PREFIX[0], n + 0x8000),
                    MAC[0],
                    own(0),
                    NdiscNeighborFlags::OVERRIDE,
                ));
            }
            sleep(Duration::from_millis(40)).await;
        }
        n
    });
    let sent = exec.block_on(async move {
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(65536, 65536)).unwrap();
        c.connect_timeout(IpEndpoint::new(own(1).into(), 7100), Duration::from_secs(5))
            .await
            .expect("connected through the gateway");
        let chunk: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
        for _ in 0..CHUNKS {
            timeout(Duration::from_secs(5), c.write_all(&chunk))
                .await
                .expect("the transfer never stalls")
                .unwrap();
            sleep(Duration::from_millis(45)).await;
        }
        c.shutdown();
        let mut buf = [0u8; 16];
        assert_eq!(c.read(&mut buf).await, Ok(0));
        c.closed().await;
        chunk.iter().map(|&x| u64::from(x)).sum::<u64>() * CHUNKS as u64
    });
    done.store(true, Ordering::Relaxed);
    let sources = exec.block_on(flood);
    let (got, sum) = exec
        .block_on(async { timeout(Duration::from_secs(5), server).await })
        .expect("the server saw the end");
    assert_eq!(got, CHUNK * CHUNKS, "every byte through the gateway");
    assert_eq!(sum, sent);
    assert!(sources >= 16 * 20, "the flood ran: {sources} sources");
    let asked = exec.block_on(sampler);
    assert_eq!(asked, 1, "the gateway's entry was never pushed out");
    let stats = a.stats();
    assert!(
        stats.dropped(DropReason::NeighborTableFull) > 0,
        "the flood's answers reached the bound: {stats:?}"
    );
}

/// Stacks A (fd00::1) and B (fd00::2) on one IPv6 subnet, and a UDP socket on B's port 7200.
fn v6_pair() -> (zcnet_tests::net::Pair, [Recorder; 2], [Ipv6Address; 2]) {
    let v6 = [
        Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
        Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
    ];
    let (p, rec) = recorded_pair(exec(), Faults::default(), 64, |i, c| {
        c.ipv6 = Some(StaticV6 {
            address: Ipv6Cidr::new(v6[i], 64),
            gateway: None,
        });
    });
    (p, rec, v6)
}

/// Sends `msg` from a zero-copy socket to `to`; `Ok` once it left (or was held and then left).
async fn send(zs: &DatagramSocket, msg: &[u8], to: IpEndpoint) {
    let mut f = zs.tx_frame().await;
    f.append(msg.len()).unwrap().copy_from_slice(msg);
    zs.send_to(f, to).await.unwrap();
}

/// An unsolicited neighbour advertisement (Override set, Solicited clear) claiming B's address
/// for another MAC makes no entry in A's table: A's first send to B still solicits, gets B's
/// real answer, and the datagram reaches B; nothing goes to the advertised MAC.
#[test]
fn unsolicited_advertisement_makes_no_entry() {
    let (p, rec, v6) = v6_pair();
    let [a, b] = p.stacks;
    let ends = p.ends;
    let forged = [2, 0xbb, 0, 0, 0, 9];
    p.exec.block_on(async move {
        let us = UdpSocket::bind(b, 7200, UdpBuffers::with_capacity(8, 8192)).unwrap();
        let za = DatagramSocket::bind(a, 7201, DatagramQueue::with_capacity(4)).unwrap();
        ends[1].inject(&advert(
            forged,
            v6[1],
            MAC[0],
            v6[0],
            NdiscNeighborFlags::OVERRIDE,
        ));
        sleep(Duration::from_millis(20)).await;
        send(&za, b"first", IpEndpoint::new(v6[1].into(), 7200)).await;
        let mut buf = [0u8; 16];
        let (n, _) = timeout(Duration::from_secs(2), us.recv_from(&mut buf))
            .await
            .expect("the datagram reached B")
            .unwrap();
        assert_eq!(&buf[..n], b"first");
        assert_eq!(solicitations(&rec[0], v6[1]), 1, "A solicited B");
        assert_eq!(frames_to(&rec[0], forged), 0, "nothing to the forged MAC");
    });
}

/// Once A knows B's MAC, an advertisement for B's address with another MAC and without the
/// Override flag changes nothing: the next datagram still reaches B. With the Override flag
/// the MAC is replaced: the next datagram goes to the advertised MAC.
#[test]
fn advertisement_without_override_keeps_the_known_mac() {
    let (p, rec, v6) = v6_pair();
    let [a, b] = p.stacks;
    let ends = p.ends;
    let other = [2, 0xbb, 0, 0, 0, 7];
    p.exec.block_on(async move {
        let us = UdpSocket::bind(b, 7200, UdpBuffers::with_capacity(8, 8192)).unwrap();
        let za = DatagramSocket::bind(a, 7201, DatagramQueue::with_capacity(4)).unwrap();
        let to = IpEndpoint::new(v6[1].into(), 7200);
        let mut buf = [0u8; 16];
        send(&za, b"one", to).await;
        let (n, _) = timeout(Duration::from_secs(2), us.recv_from(&mut buf))
            .await
            .expect("resolved")
            .unwrap();
        assert_eq!(&buf[..n], b"one");

        for flags in [NdiscNeighborFlags::empty(), NdiscNeighborFlags::SOLICITED] {
            ends[1].inject(&advert(other, v6[1], MAC[0], v6[0], flags));
            sleep(Duration::from_millis(20)).await;
            send(&za, b"two", to).await;
            let (n, _) = timeout(Duration::from_secs(2), us.recv_from(&mut buf))
                .await
                .expect("still to B")
                .unwrap();
            assert_eq!(&buf[..n], b"two");
        }
        assert_eq!(frames_to(&rec[0], other), 0);
        // Each stale send refreshed the entry; let B's answer to the last refresh arrive.
        sleep(Duration::from_millis(100)).await;

        ends[1].inject(&advert(
            other,
            v6[1],
            MAC[0],
            v6[0],
            NdiscNeighborFlags::OVERRIDE,
        ));
        sleep(Duration::from_millis(20)).await;
        send(&za, b"three", to).await;
        assert_eq!(frames_to(&rec[0], other), 1, "Override replaced the MAC");
    });
}
