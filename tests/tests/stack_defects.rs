//! The stack's resources, ports, lingering sockets, zero-copy queues, listeners and drop
//! counters, each at its edge case:
//!
//! * `Stack::new` that fails keeps nothing: the same `StackResources` build a stack on the
//!   next try, and the pool gets its scratch slot back;
//! * DNS queries and zero-copy sockets never share a local port, whichever came first;
//! * dropped ICMP and raw sockets still send what they queued (bounded, like UDP);
//! * a zero-copy socket over caller-provided (`from_static`) queue places returns every queued
//!   datagram's slot when dropped;
//! * a `TcpListener` short of buffers re-arms once its buffer source has buffers again;
//! * frames smoltcp would drop silently show in `Stack::stats()` with their reason.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use zcnet_buffer::{FramePool, PoolConfig, SlotState};
use zcnet_executor::time::timeout;
use zcnet_executor::Executor;
use zcnet_stack::datagram::{DatagramQueue, DatagramSlot, DatagramSocket};
use zcnet_stack::dns::{DnsKind, DnsSocket};
use zcnet_stack::icmp::{IcmpBuffers, IcmpSocket};
use zcnet_stack::raw::{IpProtocol, IpVersion, RawBuffers, RawSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpListener, TcpSocket};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::{
    Config, DropReason, IpAddress, IpEndpoint, Ipv4Address, Ipv4Config, Ipv6Address, Stack,
    StackError, StackResources,
};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_on_with, side_config, with_ula, Pair, ADDR, ULA};
use zcnet_tests::recorder::{recorded_pair, Recorder};
use zcnet_tests::sim_nic::SimNic;
use zcnet_tests::wire::Faults;

fn leak_nic(pool: &'static FramePool) -> &'static mut SimNic {
    Box::leak(Box::new(SimNic::new(pool, 4, 4)))
}

/// `Stack::new` that fails (slots too small for a frame, no slot for the scratch frame, no
/// socket slot for the DHCP client) releases its `StackResources` and returns the scratch slot:
/// the same resources then build a stack, and the pool audits clean.
#[test]
fn failed_stack_new_releases_its_resources() {
    let exec = Executor::leak(VirtualClock::leak());
    let resources: &'static StackResources<4> = StackResources::leak();
    let config = || side_config(0, 1);

    // Slots too small for the headroom plus a minimal frame.
    let tiny = FramePool::leak(PoolConfig::new(8).with_slot_size(64).with_headroom(0)).unwrap();
    let nic = Box::leak(Box::new(SimNic::new(tiny, 4, 4).with_tx_headroom(16)));
    let r = Stack::new(exec, tiny, nic, config(), resources);
    assert!(
        matches!(r, Err(StackError::PoolTooSmall { .. })),
        "{:?}",
        r.err()
    );

    // No slot for the scratch frame: it fails, and retrying once a slot is free works.
    let pool = FramePool::leak(PoolConfig::new(16)).unwrap();
    let held: Vec<_> = std::iter::from_fn(|| pool.try_alloc_tx()).collect();
    assert_eq!(held.len(), 16);
    let r = Stack::new(exec, pool, leak_nic(pool), config(), resources);
    assert_eq!(r.err(), Some(StackError::PoolExhausted));
    drop(held);
    assert_eq!(pool.occupancy().in_use(), 0);

    // A DHCP client needs a socket slot, and a stack with none fails after the whole state was
    // built (scratch frame taken); that slot comes back too.
    let none: &'static StackResources<0> = StackResources::leak();
    let dhcp = Config {
        ipv4: Ipv4Config::Dhcp,
        ..config()
    };
    let r = Stack::new(exec, pool, leak_nic(pool), dhcp, none);
    assert_eq!(r.err(), Some(StackError::NoSocketSlot));
    assert_eq!(pool.occupancy().in_use(), 0, "{:?}", pool.occupancy());
    pool.audit().unwrap();
    // The same zero-slot resources work for a configuration that needs no socket.
    let (s0, _runner0) = Stack::new(exec, pool, leak_nic(pool), config(), none)
        .expect("the failed attempt released the resources");
    assert_eq!(s0.stats().frames_in, 0);

    // And the first resources, after two failures.
    let (s, _runner) = Stack::new(exec, pool, leak_nic(pool), config(), resources)
        .expect("the failed attempts released the resources");
    assert_eq!(s.stats().frames_in, 0);
    // Used now: a second stack on them is refused.
    assert_eq!(
        Stack::new(exec, pool, leak_nic(pool), config(), resources).err(),
        Some(StackError::ResourcesInUse)
    );
    // Each stack holds its scratch frame (TX) and nothing else.
    assert_eq!(pool.occupancy().get(SlotState::Tx), 2);
    pool.audit().unwrap();
}

/// A DNS server on `sock`: answers every A query with 10.1.2.3, except for `silent.test`,
/// which it never answers; records each query's source port in `ports`.
async fn dns_server(sock: UdpSocket, ports: Arc<Mutex<Vec<u16>>>) {
    let mut q = [0u8; 512];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut q).await else {
            continue;
        };
        ports.lock().unwrap().push(from.port);
        let q = &q[..n];
        // Header, then the question: labels up to the root label, type and class.
        let Some(end) = q
            .iter()
            .skip(12)
            .position(|&b| b == 0)
            .map(|i| 12 + i + 1 + 4)
        else {
            continue;
        };
        if end > n || q.windows(6).any(|w| w == b"silent") {
            continue;
        }
        let mut r = Vec::new();
        r.extend_from_slice(&q[0..2]); // transaction id
        r.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
        r.extend_from_slice(&q[12..end]);
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 0, 0, 4, 10, 1, 2, 3]);
        sock.send_to(&r, from).await.unwrap();
    }
}

/// A pair on simulated time where A (its secret made from `seed`) resolves through a DNS
/// server on B; the server's record of query source ports.
fn dns_pair(seed: u64) -> (Pair, Arc<Mutex<Vec<u16>>>) {
    let p = pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        64,
        |i, c| {
            if i == 0 {
                c.dns_servers[0] = Some(ADDR[1].into());
                c.secret = zcnet_tests::secret::seeded(seed);
            }
        },
    );
    let ports = Arc::new(Mutex::new(Vec::new()));
    let server = UdpSocket::bind(p.stacks[1], 53, UdpBuffers::with_capacity(8, 4096)).unwrap();
    drop(
        p.exec
            .local_spawner()
            .spawn(dns_server(server, ports.clone())),
    );
    (p, ports)
}

/// Starts resolving `silent.test` (which the server never answers) on `dns` of `stack` and
/// polls until the query has reached the server: returns the query, in flight, and its port.
async fn query_in_flight<'a>(
    stack: Stack,
    dns: &'a DnsSocket,
    ports: &Mutex<Vec<u16>>,
) -> (Pin<Box<impl Future + 'a>>, u16) {
    let mut pending = Box::pin(dns.resolve("silent.test", DnsKind::A));
    let before = ports.lock().unwrap().len();
    while ports.lock().unwrap().len() == before {
        let polled = std::future::poll_fn(|cx| Poll::Ready(pending.as_mut().poll(cx))).await;
        assert!(polled.is_pending());
        stack.executor().sleep(Duration::from_millis(1)).await;
    }
    let port = *ports.lock().unwrap().last().unwrap();
    (pending, port)
}

/// smoltcp's DNS socket picks its query port at random, from a generator seeded by the
/// configuration, so a stack built the same way picks the same port again. The port the first
/// stack's query used is taken by a zero-copy socket on the second before it resolves: the
/// query must start from another port (or the zero-copy socket swallows the answer and the
/// lookup times out). While a query is in flight, its port cannot be bound; once it is gone,
/// it can.
#[test]
fn dns_queries_avoid_the_ports_of_zero_copy_sockets() {
    let host = [IpAddress::v4(10, 1, 2, 3)];
    // The port the query of a stack built this way uses.
    let (p, ports) = dns_pair(0x1234);
    let a = p.stacks[0];
    p.exec.block_on(async move {
        let dns = DnsSocket::with_capacity(a, 2).unwrap();
        let got = dns.resolve("host.test", DnsKind::A).await.unwrap();
        assert_eq!(&got[..], host);
    });
    let port = ports.lock().unwrap()[0];

    // The same stack again, with a zero-copy socket on that port first.
    let (p, ports) = dns_pair(0x1234);
    let a = p.stacks[0];
    let zc = DatagramSocket::bind(a, port, DatagramQueue::with_capacity(4)).unwrap();
    p.exec.block_on(async {
        let dns = DnsSocket::with_capacity(a, 2).unwrap();
        let got = dns.resolve("host.test", DnsKind::A).await;
        let used = ports.lock().unwrap().clone();
        let got = got.map(|g| g.to_vec());
        assert_eq!(got, Ok(host.to_vec()), "queries from {used:?}");
        assert!(!used.contains(&port), "{used:?} avoid {port}");
        assert_eq!(zc.queued(), 0);

        // A query in flight: its port cannot be bound, by a zero-copy socket or a UDP socket.
        let (pending, busy) = query_in_flight(a, &dns, &ports).await;
        let q = || DatagramQueue::with_capacity(4);
        assert_eq!(
            DatagramSocket::bind(a, busy, q()).err(),
            Some(StackError::AddressInUse)
        );
        assert_eq!(
            UdpSocket::bind(a, busy, UdpBuffers::with_capacity(2, 512)).err(),
            Some(StackError::AddressInUse)
        );
        drop(pending);
        DatagramSocket::bind(a, busy, q()).expect("free again");
    });
}

/// A zero-copy socket bound to port 0 never gets the port of a DNS query in flight. With the
/// secret made from this seed the stack's port allocator picks first the very port smoltcp
/// picks for the first DNS query (checked below, on a stack that binds before it resolves), so
/// the second stack, which resolves first, must pick another.
#[test]
fn zero_copy_sockets_avoid_the_ports_of_dns_queries() {
    // Found by replaying both generators over seeds: smoltcp's sPCG32 from the seed the stack
    // derives for it, and the stack's keyed stream (SipHash-2-4 of a counter).
    const SEED: u64 = 0x16d9a;
    let (p, ports) = dns_pair(SEED);
    let a = p.stacks[0];
    let picked = p.exec.block_on(async {
        let port = DatagramSocket::bind(a, 0, DatagramQueue::with_capacity(4))
            .unwrap()
            .local_endpoint()
            .port;
        let dns = DnsSocket::with_capacity(a, 2).unwrap();
        let (pending, _) = query_in_flight(a, &dns, &ports).await;
        drop(pending);
        port
    });
    let queried = ports.lock().unwrap()[0];
    assert_eq!(
        picked, queried,
        "the secret makes both pick the same port first"
    );

    let (p, ports) = dns_pair(SEED);
    let a = p.stacks[0];
    p.exec.block_on(async move {
        let dns = DnsSocket::with_capacity(a, 2).unwrap();
        let (_pending, busy) = query_in_flight(a, &dns, &ports).await;
        assert_eq!(busy, queried);
        let zc = DatagramSocket::bind(a, 0, DatagramQueue::with_capacity(4)).unwrap();
        assert_ne!(zc.local_endpoint().port, busy);
        let udp = UdpSocket::bind(a, 0, UdpBuffers::with_capacity(2, 512)).unwrap();
        assert_ne!(udp.local_port(), busy);
    });
}

/// Ethernet + IPv4 headers: where an IPv4 packet's payload starts in a frame.
const V4_PAYLOAD: usize = 14 + 20;

/// An IPv4 packet of protocol `proto` from A to B (no options, identification 0,
/// don't-fragment), header checksum filled in.
fn ipv4_packet(proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0];
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&ADDR[0].octets());
    p.extend_from_slice(&ADDR[1].octets());
    let c = !(ones_sum(0, &p) as u16);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// Frames in `rec`'s TX log that are IPv4 of protocol `proto` and carry `payload` at the end.
fn sent_with(rec: &Recorder, proto: u8, payload: &[u8]) -> usize {
    rec.tx_frames()
        .iter()
        .filter(|f| f.len() >= V4_PAYLOAD && f[12..14] == [0x08, 0x00] && f[23] == proto)
        .filter(|f| f.ends_with(payload))
        .count()
}

/// An ICMP echo request and a raw packet queued right before their sockets are dropped are
/// still sent (the first packet to B waits for ARP, so neither could have left yet), as a
/// dropped UDP socket's datagrams are. What can never be sent (no host answers ARP) is given
/// up after a bounded linger, and the sockets' slots come back.
#[test]
fn dropped_icmp_and_raw_sockets_send_what_they_queued() {
    let (p, rec) = recorded_pair(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        64,
        |_, _| {},
    );
    let [a, _b] = p.stacks;
    let raw = ipv4_packet(253, b"raw, then dropped");
    p.exec.block_on(async {
        let icmp = IcmpSocket::bind(a, 0x77, IcmpBuffers::with_capacity(2, 512)).unwrap();
        icmp.send_echo(ADDR[1].into(), 1, b"echo, then dropped")
            .await
            .unwrap();
        drop(icmp);
        let r = RawSocket::new(
            a,
            IpVersion::Ipv4,
            IpProtocol::Unknown(253),
            RawBuffers::with_capacity(2, 512),
        )
        .unwrap();
        r.send(&raw).await.unwrap();
        drop(r);
        a.executor().sleep(Duration::from_millis(500)).await;
    });
    assert_eq!(sent_with(&rec[0], 1, b"echo, then dropped"), 1);
    assert_eq!(sent_with(&rec[0], 253, b"raw, then dropped"), 1);

    // To a host nobody has: the packets wait for ARP that never comes; the sockets hold their
    // slots meanwhile, and give them up after the linger.
    let nobody = Ipv4Address::new(10, 0, 0, 99);
    let all = sockets_free(a);
    p.exec.block_on(async {
        let icmp = IcmpSocket::bind(a, 0x78, IcmpBuffers::with_capacity(2, 512)).unwrap();
        icmp.send_echo(nobody.into(), 1, b"to nobody")
            .await
            .unwrap();
        drop(icmp);
        a.executor().sleep(Duration::from_millis(100)).await;
        assert_eq!(sockets_free(a), all - 1, "the dropped socket lingers");
        a.executor().sleep(Duration::from_secs(10)).await;
        assert_eq!(sockets_free(a), all, "the linger is bounded");
    });
}

/// How many sockets `stack` can open now (opens raw sockets until it is full, then drops
/// them).
fn sockets_free(stack: Stack) -> usize {
    let held: Vec<RawSocket> = std::iter::from_fn(|| {
        RawSocket::new(
            stack,
            IpVersion::Ipv6,
            IpProtocol::Unknown(254),
            RawBuffers::with_capacity(1, 64),
        )
        .ok()
    })
    .collect();
    held.len()
}

/// A zero-copy socket over caller-provided queue places (`DatagramQueue::from_static`, the
/// `no_std` way) that is dropped with datagrams queued returns their slots to the pool, as one
/// with a heap queue does.
#[test]
fn dropping_a_zero_copy_socket_returns_its_static_queue_slots() {
    let p = pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        64,
        |_, _| {},
    );
    let [a, b] = p.stacks;
    let pool_b = p.pools[1];
    let places: &'static mut [DatagramSlot] =
        Box::leak(Box::new([const { DatagramSlot::EMPTY }; 4]));
    let zs = DatagramSocket::bind(b, 7000, DatagramQueue::from_static(places)).unwrap();
    p.exec.block_on(async {
        let us = UdpSocket::bind(a, 6000, UdpBuffers::with_capacity(8, 4096)).unwrap();
        for i in 0..3u8 {
            us.send_to(&[i; 100], (ADDR[1], 7000)).await.unwrap();
        }
        while zs.queued() < 3 {
            a.executor().sleep(Duration::from_millis(1)).await;
        }
    });
    assert_eq!(pool_b.occupancy().get(SlotState::Lent), 3);
    drop(zs);
    assert_eq!(
        pool_b.occupancy().get(SlotState::Lent),
        0,
        "{:?}",
        pool_b.occupancy()
    );
    pool_b.audit().unwrap();
}

/// Buffer pairs [`budget_buffers`] may still hand out: a server's buffer budget, taken by its
/// listener for each listening socket and given back by the server when it is done with a
/// connection.
static BUDGET: AtomicUsize = AtomicUsize::new(0);

/// Buffers while the budget lasts, `None` after.
fn budget_buffers() -> Option<TcpBuffers> {
    BUDGET
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .ok()
        .map(|_| TcpBuffers::with_capacity(256, 256))
}

/// A listener whose buffer source runs dry stops re-arming. The server closes each connection
/// first and gives its buffers back to the source when it drops the socket; the socket itself
/// lingers in TIME-WAIT for 10 s, holding its slot (the stack has plenty of others). Dropping
/// the socket must wake the listener at once: the next client is served without waiting for a
/// SYN retransmission. Then the server gives the buffers back later, after the drop, and says
/// so with `Stack::tcp_buffers_returned`: the listener re-arms then.
#[test]
fn listener_short_of_buffers_rearms_when_buffers_return() {
    const PORT: u16 = 8080;
    // One pair: the listener's one listening socket takes it, and after the first accept the
    // listener has none until a connection's buffers come back.
    BUDGET.store(1, Ordering::Release);
    static LATER: AtomicBool = AtomicBool::new(false);
    let p = pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        64,
        |_, _| {},
    );
    let [a, b] = p.stacks;
    let sp = p.exec.local_spawner();
    let server = sp.spawn(async move {
        let mut l = TcpListener::bind(b, PORT, 1, budget_buffers).unwrap();
        loop {
            let mut s = l.accept().await.expect("accept");
            sp.spawn(async move {
                let mut buf = [0u8; 16];
                let n = s.read(&mut buf).await.unwrap();
                s.write_all(&buf[..n]).await.unwrap();
                s.close();
                drop(s);
                if LATER.load(Ordering::Acquire) {
                    b.executor().sleep(Duration::from_millis(100)).await;
                    BUDGET.fetch_add(1, Ordering::AcqRel);
                    b.tcp_buffers_returned();
                } else {
                    BUDGET.fetch_add(1, Ordering::AcqRel);
                }
            });
        }
    });
    let exchange = |i: u8| async move {
        timeout(Duration::from_millis(500), async {
            let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(256, 256)).unwrap();
            c.connect(IpEndpoint::new(ADDR[1].into(), PORT))
                .await
                .unwrap();
            c.write_all(&[i; 4]).await.unwrap();
            let mut buf = [0u8; 16];
            let n = c.read(&mut buf).await.unwrap();
            buf[..n].to_vec()
        })
        .await
        .unwrap_or_else(|_| panic!("client {i} served at once; server {:?}", b.stats()))
    };
    for i in 0..6u8 {
        assert_eq!(p.exec.block_on(exchange(i)), [i; 4]);
    }
    let st = b.stats();
    assert!(
        st.listener_rearm_failures > 0,
        "the listener ran short: {st:?}"
    );

    LATER.store(true, Ordering::Release);
    for i in 6..12u8 {
        assert_eq!(p.exec.block_on(exchange(i)), [i; 4]);
        // The server gives the buffers back 100 ms after the exchange.
        p.exec
            .block_on(a.executor().sleep(Duration::from_millis(200)));
    }
    assert_eq!(b.stats().dropped(DropReason::BacklogFull), 0);
    drop(server);
}

/// The folded one's-complement sum of `data` (odd length padded with a zero byte) plus `init`.
fn ones_sum(init: u32, data: &[u8]) -> u32 {
    let mut sum = init;
    for w in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// A TCP, UDP, ICMP or ICMPv6 message `t` (checksum field zero) with its checksum filled in:
/// over the message alone (`pseudo: None`, ICMPv4) or with the IP pseudo-header.
fn with_checksum(mut t: Vec<u8>, at: usize, pseudo: Option<(&[u8], &[u8], u8)>) -> Vec<u8> {
    let mut sum = 0;
    if let Some((src, dst, proto)) = pseudo {
        sum = ones_sum(sum, src);
        sum = ones_sum(sum, dst);
        sum = ones_sum(sum, &[0, proto]);
        sum = ones_sum(sum, &(t.len() as u32).to_be_bytes());
    }
    let c = !(ones_sum(sum, &t) as u16);
    t[at..at + 2].copy_from_slice(&c.to_be_bytes());
    t
}

/// A UDP datagram from port 6000 to `port`, checksummed for `src` → `dst`.
fn udp(src: &[u8], dst: &[u8], port: u16, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&6000u16.to_be_bytes());
    t.extend_from_slice(&port.to_be_bytes());
    t.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    t.extend_from_slice(&[0, 0]);
    t.extend_from_slice(payload);
    with_checksum(t, 6, Some((src, dst, 17)))
}

/// A TCP SYN from port 6000 to `port`, checksummed for `src` → `dst`.
fn tcp_syn(src: &[u8], dst: &[u8], port: u16) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&6000u16.to_be_bytes());
    t[2..4].copy_from_slice(&port.to_be_bytes());
    t[4..8].copy_from_slice(&1000u32.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x02; // SYN
    t[14..16].copy_from_slice(&4096u16.to_be_bytes());
    with_checksum(t, 16, Some((src, dst, 6)))
}

/// An Ethernet frame from A's MAC to `mac` carrying an IPv4 packet `src` → `dst` of protocol
/// `proto` around `t`; `flags_frag` is the flags and fragment offset field.
fn v4_frame(mac: [u8; 6], dst: Ipv4Address, proto: u8, flags_frag: u16, t: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00]);
    let total = (20 + t.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6..8].copy_from_slice(&flags_frag.to_be_bytes());
    ip.extend_from_slice(&ADDR[0].octets());
    ip.extend_from_slice(&dst.octets());
    let c = !(ones_sum(0, &ip) as u16);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(t);
    f
}

/// An Ethernet frame from A to B carrying an IPv6 packet A → `dst` with `next` and `payload`.
fn v6_frame(dst: Ipv6Address, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x86, 0xdd]);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[next, 64]);
    f.extend_from_slice(&ULA[0].octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(payload);
    f
}

/// Hand-made frames injected on the wire, each of which smoltcp drops, land in B's drop
/// counters by reason: wrong checksums (IPv4 header, TCP, UDP, ICMP, UDP over IPv6 with and
/// without a hop-by-hop header), malformed headers, frames for someone else, frame kinds the
/// stack does not handle, and datagrams and segments no socket takes. The same frames with
/// right checksums are delivered and counted nowhere.
#[test]
fn frames_smoltcp_drops_are_counted_by_reason() {
    let p = pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        64,
        with_ula,
    );
    let [a, b] = p.stacks;
    let wire = p.ends[0];
    let b_mac = p.ends[1].mac();
    let (a4, b4) = (ADDR[0].octets(), ADDR[1].octets());
    let (a6, b6) = (ULA[0].octets(), ULA[1].octets());
    p.exec.block_on(async move {
        let sb = UdpSocket::bind(b, 5000, UdpBuffers::with_capacity(16, 8192)).unwrap();
        // B learns A's MAC (from A's ARP request), so that its answers can go out.
        let sa = UdpSocket::bind(a, 6000, UdpBuffers::with_capacity(4, 1024)).unwrap();
        sa.send_to(b"hello", (ADDR[1], 5000)).await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(sb.recv_from(&mut buf).await.unwrap().0, 5);
        let before = b.stats();

        let good_udp = udp(&a4, &b4, 5000, b"good v4");
        let mut bad_udp = udp(&a4, &b4, 5000, b"bad v4");
        bad_udp[9] ^= 0x20;
        let mut bad_syn = tcp_syn(&a4, &b4, 81);
        bad_syn[14] ^= 0x01;
        let mut echo = vec![8, 0, 0, 0, 0, 7, 0, 1];
        echo.extend_from_slice(b"ping");
        let mut bad_echo = with_checksum(echo, 2, None);
        bad_echo[9] ^= 0x04;
        let mut bad_ip = v4_frame(b_mac, ADDR[1], 17, 0x4000, &udp(&a4, &b4, 5000, b"bad ip"));
        bad_ip[14 + 8] ^= 0x01; // the TTL, under the header checksum
        let good_v6 = udp(&a6, &b6, 5000, b"good v6");
        let mut bad_v6 = udp(&a6, &b6, 5000, b"bad v6");
        bad_v6[10] ^= 0x40;
        // A hop-by-hop header (next: UDP, 8 bytes, padding only) in front of the datagram.
        let hbh = |d: &[u8]| [&[17, 0, 1, 4, 0, 0, 0, 0][..], d].concat();
        let good_hbh = udp(&a6, &b6, 5000, b"good hbh");
        let mut bad_hbh = udp(&a6, &b6, 5000, b"bad hbh");
        bad_hbh[8] ^= 0x01;

        let frames: Vec<Vec<u8>> = vec![
            // Right: delivered.
            v4_frame(b_mac, ADDR[1], 17, 0x4000, &good_udp),
            v6_frame(ULA[1], 17, &good_v6),
            v6_frame(ULA[1], 0, &hbh(&good_hbh)),
            // Wrong checksums: 6.
            v4_frame(b_mac, ADDR[1], 17, 0x4000, &bad_udp),
            v4_frame(b_mac, ADDR[1], 6, 0x4000, &bad_syn),
            v4_frame(b_mac, ADDR[1], 1, 0x4000, &bad_echo),
            bad_ip,
            v6_frame(ULA[1], 17, &bad_v6),
            v6_frame(ULA[1], 0, &hbh(&bad_hbh)),
            // Malformed: 2 (cut inside the IPv4 header; a UDP header cut short).
            v4_frame(b_mac, ADDR[1], 17, 0x4000, &good_udp)[..14 + 12].to_vec(),
            v4_frame(b_mac, ADDR[1], 17, 0x4000, &good_udp[..4]),
            // Not for us: 3.
            v4_frame([2, 0, 0, 0, 0, 9], ADDR[1], 17, 0x4000, &good_udp),
            v4_frame(b_mac, Ipv4Address::new(10, 0, 0, 77), 17, 0x4000, &good_udp),
            v6_frame(
                Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x77),
                17,
                &good_v6,
            ),
            // Unsupported: 2 (an experimental Ethernet type; an IPv4 fragment).
            [&b_mac[..], &[2, 0, 0, 0, 0, 1, 0x88, 0xb5], &[0u8; 46][..]].concat(),
            v4_frame(b_mac, ADDR[1], 17, 0x2000, &good_udp),
            // No socket: 3 (UDP to a closed port, a SYN to a closed port, protocol 253).
            v4_frame(b_mac, ADDR[1], 17, 0x4000, &udp(&a4, &b4, 5001, b"nobody")),
            v4_frame(b_mac, ADDR[1], 6, 0x4000, &tcp_syn(&a4, &b4, 81)),
            v4_frame(b_mac, ADDR[1], 253, 0x4000, b"experimental"),
        ];
        for f in &frames {
            wire.inject(f);
        }
        b.executor().sleep(Duration::from_millis(50)).await;
        let mut got = Vec::new();
        while got.len() < 3 {
            let n = sb.recv_from(&mut buf).await.unwrap().0;
            got.push(buf[..n].to_vec());
        }
        assert_eq!(got, [&b"good v4"[..], b"good v6", b"good hbh"]);
        let after = b.stats();
        let counted = |r: DropReason| after.dropped(r) - before.dropped(r);
        let want = [
            (DropReason::BadChecksum, 6),
            (DropReason::Malformed, 2),
            (DropReason::NotForUs, 3),
            (DropReason::Unsupported, 2),
            (DropReason::NoSocket, 3),
        ];
        let seen: Vec<_> = want.iter().map(|&(r, _)| (r, counted(r))).collect();
        assert_eq!(seen, want, "{after:?}");
        assert_eq!(after.frames_in - before.frames_in, frames.len() as u64);
        let more = std::future::poll_fn(|cx| {
            Poll::Ready(std::pin::pin!(sb.recv_from_with(|_, _| ())).poll(cx))
        })
        .await;
        assert!(more.is_pending(), "nothing else delivered");
    });
}
