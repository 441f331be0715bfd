//! The TAP driver's virtio-net offloads against the Linux kernel, at driver level (no stack):
//! frames built by hand go out with their marks in the virtio-net header, and what Linux sends
//! comes back with the driver's marks. The kernel side lives in a namespace each test creates
//! (see `zcnet_tests::netns`), with a static neighbour entry for the driver's address, so no
//! ARP is needed. Needs root, /dev/net/tun and `python3` (fails, never skips, without them).
//! Traffic goes only to addresses inside the test's own namespace.

use std::future::poll_fn;
use std::time::Duration;

use zcnet_buffer::offload::ones_complement_sum;
use zcnet_buffer::{
    ChecksumPartial, CopySite, Driver, FramePool, GsoKind, PoolConfig, RxChain, RxPacket, TxChain,
    TxFrame,
};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::time::{sleep, timeout};
use zcnet_executor::Executor;
use zcnet_tap::{Tap, TapConfig, DEFAULT_MAC};
use zcnet_tests::netns::{run, tap_name, ChildGuard, Netns, LINUX_ADDR, ZCNET_ADDR};

/// The driver's side of the link, the kernel side in its namespace.
struct Link {
    exec: &'static Executor,
    pool: &'static FramePool,
    tap: Tap,
    linux_mac: [u8; 6],
    netns: Netns,
}

impl Link {
    fn new(config: TapConfig) -> Link {
        let netns = Netns::new();
        let platform = LinuxPlatform::leak().expect("epoll");
        let exec = Executor::leak(platform);
        let name = tap_name();
        let config = TapConfig { name, ..config };
        let pool =
            FramePool::leak(PoolConfig::new(256).with_slot_size(config.slot_size())).expect("pool");
        let tap = Tap::open(platform, pool, &config).expect("TAP");
        netns.adopt(&config.name, &format!("{LINUX_ADDR}/24"));
        let mac = DEFAULT_MAC.map(|b| format!("{b:02x}")).join(":");
        netns.ip(&[
            "neigh",
            "replace",
            &ZCNET_ADDR.to_string(),
            "lladdr",
            &mac,
            "dev",
            &config.name,
        ]);
        let addr = run(netns
            .command("cat")
            .arg(format!("/sys/class/net/{}/address", config.name)));
        let mut linux_mac = [0u8; 6];
        for (d, s) in linux_mac.iter_mut().zip(addr.trim().split(':')) {
            *d = u8::from_str_radix(s, 16).expect("a MAC address");
        }
        Link {
            exec,
            pool,
            tap,
            linux_mac,
            netns,
        }
    }

    /// A counter of the namespace's `/proc/net/snmp` (`Udp`, `InCsumErrors`, say).
    fn snmp(&self, proto: &str, field: &str) -> u64 {
        let text = run(self.netns.command("cat").arg("/proc/net/snmp"));
        let prefix = format!("{proto}:");
        let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
        let names = lines.next().expect("header line");
        let values = lines.next().expect("values line");
        let i = names
            .split_whitespace()
            .position(|n| n == field)
            .expect("field");
        values.split_whitespace().nth(i).unwrap().parse().unwrap()
    }

    /// Sends `packet` (an IPv4 packet) behind an Ethernet header to Linux, marked with `csum`
    /// (counted from the IP header).
    fn send(&mut self, packet: &[u8], csum: Option<ChecksumPartial>) {
        let mut f: TxFrame = self.pool.try_alloc_tx().expect("a TX frame");
        f.append(packet.len()).unwrap().copy_from_slice(packet);
        let eth = f.push_header(14).unwrap();
        eth[..6].copy_from_slice(&self.linux_mac);
        eth[6..12].copy_from_slice(&DEFAULT_MAC);
        eth[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let csum = csum.map(|c| ChecksumPartial {
            start: c.start + 14,
            ..c
        });
        f.set_checksum_partial(csum).unwrap();
        self.tap
            .transmit_chain(TxChain::from_frame(f))
            .expect("written");
    }

    /// Reads packets until one passes `want` (given the whole frame's bytes), for at most 10 s.
    /// Packets come through `poll_receive_packet`: a chain only for a packet over several slots.
    fn receive(&mut self, want: impl Fn(&[u8]) -> bool) -> RxChain {
        let tap = &mut self.tap;
        self.exec
            .block_on(timeout(Duration::from_secs(10), async {
                loop {
                    let chain = match poll_fn(|cx| tap.poll_receive_packet(cx)).await {
                        RxPacket::Frame(frame) => RxChain::from_frame(frame),
                        RxPacket::Chain(chain) => {
                            assert!(chain.frame_count() > 1, "a one-slot packet as a chain");
                            chain
                        }
                    };
                    if want(&flat(&chain)) {
                        return chain;
                    }
                }
            }))
            .expect("the packet arrived")
    }
}

fn flat(chain: &RxChain) -> Vec<u8> {
    let mut v = vec![0u8; chain.len()];
    chain.copy_to(&mut v, CopySite::Driver);
    v
}

/// An IPv4 header for `l4_len` bytes of protocol `proto` from zcnet to Linux, checksum
/// complete.
fn ipv4(proto: u8, l4_len: usize) -> Vec<u8> {
    let mut h = vec![0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&((20 + l4_len) as u16).to_be_bytes());
    h[6] = 0x40; // don't fragment
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&ZCNET_ADDR.octets());
    h[16..20].copy_from_slice(&LINUX_ADDR.octets());
    let c = !ones_complement_sum(0, [&h[..]]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

/// The pseudo-header sum (not complemented) of an IPv4 `packet`'s L4 part: what the stack
/// writes into the checksum field of a partial checksum.
fn pseudo(packet: &[u8]) -> u16 {
    let total = u16::from_be_bytes([packet[2], packet[3]]);
    let ihl = u16::from(packet[0] & 15) * 4;
    let len = (total - ihl).to_be_bytes();
    ones_complement_sum(u16::from(packet[9]), [&packet[12..20], &len[..]])
}

/// Whether the L4 checksum of the IPv4 packet in `frame` (Ethernet header first) is right.
fn l4_ok(frame: &[u8]) -> bool {
    let ip = &frame[14..];
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let ihl = usize::from(ip[0] & 15) * 4;
    let l4 = &ip[ihl..total];
    let len = (l4.len() as u16).to_be_bytes();
    ones_complement_sum(u16::from(ip[9]), [&ip[12..20], &len[..], l4]) == 0xffff
}

/// A UDP datagram from zcnet's port 4000 to Linux's `port`, its checksum field holding only
/// the pseudo-header sum (complete it, or mark it partial).
fn udp(port: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = ipv4(17, 8 + payload.len());
    p.extend_from_slice(&4000u16.to_be_bytes());
    p.extend_from_slice(&port.to_be_bytes());
    p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    let s = pseudo(&p);
    p[26..28].copy_from_slice(&s.to_be_bytes());
    p
}

/// A TCP segment from zcnet's `sport` to Linux's `dport` (no options but `options`), its
/// checksum field holding only the pseudo-header sum.
fn tcp(sport: u16, dport: u16, seq: u32, ack: u32, flags: u8, options: &[u8]) -> Vec<u8> {
    let hl = 20 + options.len();
    let mut p = ipv4(6, hl);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ack.to_be_bytes());
    p.push(((hl / 4) as u8) << 4);
    p.push(flags);
    p.extend_from_slice(&65535u16.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]);
    p.extend_from_slice(options);
    let s = pseudo(&p);
    p[36..38].copy_from_slice(&s.to_be_bytes());
    p
}

const UDP_MARK: ChecksumPartial = ChecksumPartial {
    start: 20,
    offset: 6,
};
const TCP_MARK: ChecksumPartial = ChecksumPartial {
    start: 20,
    offset: 16,
};

/// A UDP datagram whose checksum field holds only the pseudo-header sum reaches a Linux socket
/// when it is marked partial (the kernel completes it from the virtio-net header), and is
/// dropped as a checksum error when it is not: the mark is what makes the difference.
#[test]
fn a_partial_udp_checksum_is_completed_by_the_kernel_and_an_unmarked_one_is_dropped() {
    let mut link = Link::new(TapConfig::default());
    let mut server = ChildGuard::spawn(link.netns.command("python3").args([
        "-c",
        &format!(
            "import socket\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             s.bind(('{LINUX_ADDR}', 9999))\n\
             s.settimeout(20)\n\
             while True:\n\
             \x20   d = s.recv(2000)\n\
             \x20   print(d.decode(), flush=True)\n\
             \x20   if d.startswith(b'marked'):\n\
             \x20       break\n"
        ),
    ]));
    let errors_before = link.snmp("Udp", "InCsumErrors");
    let payload = b"marked: a datagram whose checksum the kernel completes".repeat(7);
    let unmarked = udp(9999, b"unmarked");
    let marked = udp(9999, &payload);
    let exec = link.exec;
    let (status, out, err) = exec.block_on(async {
        // Until the server is up and has the marked datagram.
        for _ in 0..100 {
            link.send(&unmarked, None);
            link.send(&marked, Some(UDP_MARK));
            sleep(Duration::from_millis(100)).await;
            if matches!(server.0.try_wait(), Ok(Some(_))) {
                break;
            }
        }
        server.wait(Duration::from_secs(5)).await
    });
    assert!(status.success(), "server: {out} {err}");
    assert!(
        out.lines().any(|l| l.as_bytes() == &payload[..]),
        "the marked datagram arrived intact: {out}"
    );
    assert!(!out.contains("unmarked"), "{out}");
    assert!(
        link.snmp("Udp", "InCsumErrors") > errors_before,
        "the unmarked datagram failed Linux's checksum check"
    );
    let s = link.tap.stats();
    assert_eq!((s.tx_errors, s.rx_errors), (0, 0), "{s:?}");
    drop(link.tap);
    assert_eq!(link.pool.audit().unwrap().free, 256);
}

/// A TCP SYN with a partial checksum to a closed port is taken by Linux, which answers with a
/// RST (a packet the kernel checksums in full itself).
#[test]
fn a_partial_tcp_syn_gets_a_reset() {
    let mut link = Link::new(TapConfig::default());
    let syn = tcp(40000, 9, 77, 0, 0x02, &[]);
    link.send(&syn, Some(TCP_MARK));
    let rst = link.receive(|f| {
        f.len() >= 54 && f[12..14] == [8, 0] && f[23] == 6 && f[34..38] == [0, 9, 0x9c, 0x40]
    });
    let f = flat(&rst);
    assert_eq!(f[47] & 0x04, 0x04, "RST");
    assert_eq!(
        u32::from_be_bytes([f[42], f[43], f[44], f[45]]),
        78,
        "acks the SYN"
    );
    assert!(l4_ok(&f));
    drop(rst);
    drop(link.tap);
    assert_eq!(link.pool.audit().unwrap().free, 256);
}

/// Has a Linux socket in the namespace send UDP datagrams to zcnet's port 5555 and returns the
/// first that arrives, with the client process (killed on drop).
fn linux_datagram(link: &mut Link) -> (RxChain, ChildGuard) {
    let client = ChildGuard::spawn(link.netns.command("python3").args([
        "-c",
        &format!(
            "import socket, time\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             for i in range(100):\n\
             \x20   s.sendto(bytes(range(200)), ('{ZCNET_ADDR}', 5555))\n\
             \x20   time.sleep(0.1)\n"
        ),
    ]));
    let d = link.receive(|f| {
        f.len() >= 42 && f[12..14] == [8, 0] && f[23] == 17 && f[36..38] == [0x15, 0xb3]
    });
    (d, client)
}

/// A datagram from a Linux socket leaves the kernel with its checksum partial: it arrives
/// marked verified, and completed by the driver (when asked to) its checksum checks out.
#[test]
fn a_linux_datagram_arrives_verified_and_completed() {
    let mut link = Link::new(TapConfig::default().with_complete_rx_checksums(true));
    let (d, _client) = linux_datagram(&mut link);
    let f = flat(&d);
    let head = d.head().unwrap();
    assert!(head.checksum_verified());
    assert_eq!(head.gso_info(), None);
    assert!(l4_ok(&f), "completed by the driver");
    assert_eq!(&f[42..], &(0..200).map(|i| i as u8).collect::<Vec<_>>()[..]);
    assert!(link.tap.stats().rx_checksums_completed >= 1);
    drop(d);
    drop(link.tap);
    assert_eq!(link.pool.audit().unwrap().free, 256);
}

/// Without completion (the default), the kernel's datagram keeps its partial checksum (only
/// the pseudo-header sum): the verified mark is what a stack must trust.
#[test]
fn without_completion_the_kernels_checksum_stays_partial_and_marked() {
    let mut link = Link::new(TapConfig::default());
    let (d, _client) = linux_datagram(&mut link);
    let f = flat(&d);
    assert!(d.head().unwrap().checksum_verified());
    assert!(!l4_ok(&f), "left partial");
    // The field holds the pseudo-header sum of the datagram.
    assert_eq!(u16::from_be_bytes([f[40], f[41]]), pseudo(&f[14..]));
    assert_eq!(link.tap.stats().rx_checksums_completed, 0);
}

/// With the offloads off the driver reads and writes bare frames, as before: the same RST
/// exchange works and nothing is marked.
#[test]
fn without_offloads_frames_are_bare() {
    let mut link = Link::new(TapConfig::default().with_offloads(false));
    let caps = link.tap.capabilities();
    assert_eq!(caps.tx_headroom, 0);
    let mut syn = tcp(40002, 9, 9, 0, 0x02, &[]);
    // No offload to complete it: the checksum goes out complete (the field's pseudo-header
    // sum included in the sum, as a device completes it).
    let c = !ones_complement_sum(0, [&syn[20..]]);
    syn[36..38].copy_from_slice(&c.to_be_bytes());
    link.send(&syn, None);
    let rst = link.receive(|f| f.len() >= 54 && f[23] == 6 && f[36..38] == [0x9c, 0x42]);
    assert!(!rst.head().unwrap().checksum_verified());
    assert!(l4_ok(&flat(&rst)));
}

/// With TSO negotiated, a Linux client's first flight after a handshake answered by hand
/// arrives as GSO packets larger than a slot, read into chains: the head's GSO mark gives the
/// MSS, the IP total length covers the whole chain, and the payload is what was sent.
#[test]
fn with_tso_a_linux_clients_first_flight_arrives_as_gso_chains() {
    let mut link = Link::new(TapConfig::default().with_rx_gso(true));
    assert!(link.tap.capabilities().rx_chains);
    let _client = ChildGuard::spawn(link.netns.command("python3").args([
        "-c",
        &format!(
            "import socket, time\n\
             s = socket.create_connection(('{ZCNET_ADDR}', 5001), timeout=20)\n\
             s.sendall(bytes(range(256)) * 400)\n\
             time.sleep(20)\n"
        ),
    ]));
    let syn = link.receive(|f| f.len() >= 54 && f[23] == 6 && f[36..38] == [0x13, 0x89]);
    let syn = flat(&syn);
    assert_eq!(syn[47] & 0x12, 0x02, "a SYN");
    let client_port = u16::from_be_bytes([syn[34], syn[35]]);
    let client_seq = u32::from_be_bytes([syn[38], syn[39], syn[40], syn[41]]);
    // SYN-ACK: MSS 1460, window 65535 (no scaling), checksum completed by the kernel.
    let mss = [2, 4, 0x05, 0xb4];
    let syn_ack = tcp(5001, client_port, 1000, client_seq + 1, 0x12, &mss);
    link.send(&syn_ack, Some(TCP_MARK));
    // Collect data until a chain shows up (the first flight is up to 10 segments).
    let mut data = Vec::new();
    let mut chains = 0;
    let mut gso_seen = None;
    while data.len() < 14_600 && chains == 0 {
        let pkt =
            link.receive(|f| f.len() > 54 && f[23] == 6 && f[34..36] == client_port.to_be_bytes());
        let f = flat(&pkt);
        let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
        assert_eq!(total, f.len() - 14, "the IP length covers the whole packet");
        let seq = u32::from_be_bytes([f[38], f[39], f[40], f[41]]);
        let thl = usize::from(f[46] >> 4) * 4;
        let payload = &f[34 + thl..];
        if payload.is_empty() {
            continue;
        }
        assert_eq!(
            seq.wrapping_sub(client_seq + 1) as usize,
            data.len(),
            "in order"
        );
        data.extend_from_slice(payload);
        let head = pkt.head().unwrap();
        assert!(head.checksum_verified());
        if pkt.frame_count() > 1 {
            chains += 1;
            gso_seen = head.gso_info();
        }
    }
    assert!(
        chains > 0,
        "a GSO packet larger than a slot arrived as a chain"
    );
    let gso = gso_seen.expect("the chain's GSO mark");
    assert_eq!(gso.kind, GsoKind::TcpV4);
    assert_eq!(gso.segment_size, 1460);
    let sent: Vec<u8> = (0..data.len()).map(|i| i as u8).collect();
    assert_eq!(data, sent, "byte-exact");
    let s = link.tap.stats();
    assert!(s.rx_chains >= 1, "{s:?}");
}

/// A TCP super-segment written as a chain with a GSO request reaches a Linux client whole and
/// byte-exact: after a handshake answered by hand, 20,000 bytes go out as one `writev` of a
/// header frame and payload frames, the virtio-net header asking for 1400-byte segments.
#[test]
fn a_gso_chain_written_to_linux_arrives_byte_exact() {
    let mut link = Link::new(TapConfig::default().with_tx_offloads(true));
    let caps = link.tap.capabilities();
    assert_eq!(caps.gso_max_size, zcnet_tap::GSO_MAX_SIZE);
    const LEN: usize = 20_000;
    let mut client = ChildGuard::spawn(link.netns.command("python3").args([
        "-c",
        &format!(
            "import socket, hashlib\n\
             s = socket.create_connection(('{ZCNET_ADDR}', 5002), timeout=20)\n\
             d = b''\n\
             while len(d) < {LEN}:\n\
             \x20   c = s.recv(65536)\n\
             \x20   if not c:\n\
             \x20       break\n\
             \x20   d += c\n\
             print(len(d), hashlib.sha256(d).hexdigest(), flush=True)\n"
        ),
    ]));
    let syn = flat(&link.receive(|f| f.len() >= 54 && f[23] == 6 && f[36..38] == [0x13, 0x8a]));
    let client_port = u16::from_be_bytes([syn[34], syn[35]]);
    let client_seq = u32::from_be_bytes([syn[38], syn[39], syn[40], syn[41]]);
    let syn_ack = tcp(
        5002,
        client_port,
        1000,
        client_seq + 1,
        0x12,
        &[2, 4, 0x05, 0xb4],
    );
    link.send(&syn_ack, Some(TCP_MARK));
    // The client's ACK of the SYN-ACK: the connection is up.
    link.receive(|f| f.len() >= 54 && f[23] == 6 && f[34..36] == client_port.to_be_bytes());
    let payload: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
    // The header frame: Ethernet, IPv4 (total length of the whole super-segment), TCP with
    // the pseudo-header sum over the whole TCP length.
    let mut header = ipv4(6, 20 + LEN);
    let seg = tcp(5002, client_port, 1001, client_seq + 1, 0x18, &[]);
    header.extend_from_slice(&seg[20..40]);
    let tcp_len = ((20 + LEN) as u16).to_be_bytes();
    let sum = ones_complement_sum(6, [&header[12..20], &tcp_len[..]]);
    header[36..38].copy_from_slice(&sum.to_be_bytes());
    let mut head = link.pool.try_alloc_tx().unwrap();
    head.append(header.len()).unwrap().copy_from_slice(&header);
    let eth = head.push_header(14).unwrap();
    eth[..6].copy_from_slice(&link.linux_mac);
    eth[6..12].copy_from_slice(&DEFAULT_MAC);
    eth[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    head.set_checksum_partial(Some(ChecksumPartial {
        start: 34,
        offset: 16,
    }))
    .unwrap();
    head.set_gso_request(Some(zcnet_buffer::GsoRequest {
        kind: GsoKind::TcpV4,
        segment_size: 1400,
        header_len: 54,
    }))
    .unwrap();
    let mut chain = TxChain::from_frame(head);
    assert_eq!(chain.append_from(&payload, CopySite::AppToSocket), LEN);
    assert!(chain.frame_count() > 2);
    link.tap.transmit_chain(chain).expect("written");
    let exec = link.exec;
    let (status, out, err) = exec.block_on(client.wait(Duration::from_secs(20)));
    assert!(status.success(), "client: {out} {err}");
    let want = {
        use sha2::{Digest, Sha256};
        let h = Sha256::digest(&payload);
        h.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    assert_eq!(out.trim(), format!("{LEN} {want}"));
    let s = link.tap.stats();
    assert_eq!((s.tx_gso, s.tx_chains, s.tx_errors), (1, 1, 0), "{s:?}");
    drop(link.tap);
    let occ = link.pool.audit().unwrap();
    assert_eq!(occ.free, 256, "{occ:?}");
}
