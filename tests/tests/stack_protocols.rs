//! ICMP echo, DNS and raw IP between two stacks over the in-memory wire: pings answered by the
//! stack itself (IPv4 and IPv6) with a round-trip time, pings into the void timing out; A and
//! AAAA lookups against a hand-written DNS responder on stack B, NXDOMAIN, a silent server,
//! too many queries and a cancelled query; a raw packet of an experimental protocol arriving
//! byte-exact; and socket slots freed on drop.

use std::future::Future;
use std::task::{Context, Poll};
use std::time::Duration;

use zcnet_executor::Executor;
use zcnet_stack::dns::{DnsError, DnsKind, DnsSocket};
use zcnet_stack::icmp::{IcmpBuffers, IcmpError, IcmpSocket};
use zcnet_stack::raw::{IpProtocol, IpVersion, RawBuffers, RawError, RawSocket};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::{IpAddress, Ipv4Address, Ipv6Address, StackError};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair, pair_on_with, pair_with, with_ula, ADDR, SOCKETS, ULA};
use zcnet_tests::wire::Faults;

fn icmp(stack: zcnet_stack::Stack, ident: u16) -> IcmpSocket {
    IcmpSocket::bind(stack, ident, IcmpBuffers::with_capacity(8, 4096)).unwrap()
}

/// A pings B over IPv4 and IPv6; B has no ICMP socket, the stack answers by itself. A ping to
/// an address nobody on the wire has times out with `TimedOut`.
#[test]
fn ping_is_answered_with_rtt_and_unknown_host_times_out() {
    let p = pair_with(Faults::default(), 128, with_ula);
    let a = p.stacks[0];
    p.exec.block_on(async move {
        let sock = icmp(a, 0x5a5a);
        let payload: Vec<u8> = (0..56u8).collect();
        let t = Duration::from_secs(5);
        let rtt = sock.ping(ADDR[1].into(), 1, &payload, t).await.unwrap();
        assert!(rtt < t, "rtt {rtt:?}");
        let rtt6 = sock.ping(ULA[1].into(), 2, &payload, t).await.unwrap();
        assert!(rtt6 < t, "rtt {rtt6:?}");

        // The lower-level calls: the reply carries the sequence number and payload back.
        sock.send_echo(ADDR[1].into(), 7, b"hello").await.unwrap();
        let mut buf = [0u8; 16];
        let r = sock.recv_echo(&mut buf).await.unwrap();
        assert_eq!(r.from, IpAddress::from(ADDR[1]));
        assert_eq!(r.seq, 7);
        assert_eq!(&buf[..r.len], b"hello");

        let nobody = Ipv4Address::new(10, 0, 0, 99);
        let start = std::time::Instant::now();
        let r = sock
            .ping(nobody.into(), 3, &payload, Duration::from_millis(200))
            .await;
        assert_eq!(r, Err(IcmpError::TimedOut));
        assert!(start.elapsed() >= Duration::from_millis(200));
        assert_eq!(
            sock.ping(Ipv4Address::UNSPECIFIED.into(), 4, &payload, t)
                .await,
            Err(IcmpError::Unaddressable)
        );
        // Off-link with no gateway: refused at once instead of vanishing.
        assert_eq!(
            sock.send_echo(Ipv4Address::new(192, 168, 9, 9).into(), 5, b"x")
                .await,
            Err(IcmpError::Unaddressable)
        );
    });
}

/// A minimal DNS server: answers one question per query, by hand, never trusting lengths.
///
/// * `host.test` A → 10.1.2.3, 10.1.2.4; AAAA → nothing (NOERROR, no answers)
/// * `v6.test` AAAA → fd00::1:2
/// * `silent.test` → no answer at all
/// * anything else → NXDOMAIN
async fn dns_responder(sock: UdpSocket) {
    let mut query = [0u8; 512];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut query).await else {
            continue;
        };
        if let Some(reply) = dns_answer(&query[..n]) {
            sock.send_to(&reply, from).await.unwrap();
        }
    }
}

/// The answer to `q`, or `None` to stay silent (malformed query, `silent.test`).
fn dns_answer(q: &[u8]) -> Option<Vec<u8>> {
    if q.len() < 12 || q[4..6] != [0, 1] || q[2] & 0x80 != 0 {
        return None;
    }
    // QNAME: labels, bounded by the packet and by 255 bytes.
    let mut i = 12;
    let mut name = String::new();
    loop {
        let len = *q.get(i)? as usize;
        i += 1;
        if len == 0 {
            break;
        }
        if len > 63 || i + len > q.len() || i > 12 + 255 {
            return None;
        }
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(std::str::from_utf8(&q[i..i + len]).ok()?);
        i += len;
    }
    let qtype = u16::from_be_bytes([*q.get(i)?, *q.get(i + 1)?]);
    let question_end = i + 4;
    if question_end > q.len() {
        return None;
    }
    const A: u16 = 1;
    const AAAA: u16 = 28;
    let (rcode, answers): (u8, Vec<(u16, Vec<u8>)>) = match (name.as_str(), qtype) {
        ("silent.test", _) => return None,
        ("host.test", A) => (0, vec![(A, vec![10, 1, 2, 3]), (A, vec![10, 1, 2, 4])]),
        ("host.test", _) => (0, vec![]),
        ("v6.test", AAAA) => (
            0,
            vec![(
                AAAA,
                Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 1, 2)
                    .octets()
                    .to_vec(),
            )],
        ),
        ("v6.test", _) => (0, vec![]),
        _ => (3, vec![]),
    };
    let mut r = Vec::with_capacity(512);
    r.extend_from_slice(&q[0..2]); // transaction id
    r.push(0x80 | (q[2] & 0x01)); // QR, opcode 0, RD copied
    r.push(0x80 | rcode); // RA, rcode
    r.extend_from_slice(&[0, 1]); // one question
    r.extend_from_slice(&(answers.len() as u16).to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]); // no authority, no additional records
    r.extend_from_slice(&q[12..question_end]);
    for (ty, data) in answers {
        r.extend_from_slice(&[0xc0, 12]); // the name: a pointer to the question's
        r.extend_from_slice(&ty.to_be_bytes());
        r.extend_from_slice(&[0, 1]); // class IN
        r.extend_from_slice(&300u32.to_be_bytes()); // TTL
        r.extend_from_slice(&(data.len() as u16).to_be_bytes());
        r.extend_from_slice(&data);
    }
    Some(r)
}

/// Stack A resolves names against a responder on stack B (A and AAAA, NXDOMAIN, no record of
/// that kind, a silent server, too many queries, a cancelled query), in simulated time.
#[test]
fn dns_resolves_a_and_aaaa_and_reports_not_found_timeout_and_too_many_queries() {
    let clock = VirtualClock::leak();
    let p = pair_on_with(Executor::leak(clock), Faults::default(), 128, |i, c| {
        if i == 0 {
            c.dns_servers[0] = Some(ADDR[1].into());
        }
    });
    let [a, b] = p.stacks;
    let responder = UdpSocket::bind(b, 53, UdpBuffers::with_capacity(8, 4096)).unwrap();
    let _server = p.exec.local_spawner().spawn(dns_responder(responder));
    p.exec.block_on(async move {
        let dns = DnsSocket::with_capacity(a, 1).unwrap();
        assert_eq!(
            dns.servers().collect::<Vec<_>>(),
            [IpAddress::from(ADDR[1])]
        );

        let got = dns.resolve("host.test", DnsKind::A).await.unwrap();
        assert_eq!(
            &got[..],
            [IpAddress::v4(10, 1, 2, 3), IpAddress::v4(10, 1, 2, 4)]
        );
        let got = dns.resolve("v6.test.", DnsKind::Aaaa).await.unwrap();
        assert_eq!(
            &got[..],
            [IpAddress::Ipv6(Ipv6Address::new(
                0xfd00, 0, 0, 0, 0, 0, 1, 2
            ))]
        );
        assert_eq!(
            dns.resolve("missing.test", DnsKind::A).await,
            Err(DnsError::NotFound),
            "NXDOMAIN"
        );
        assert_eq!(
            dns.resolve("host.test", DnsKind::Aaaa).await,
            Err(DnsError::NotFound),
            "no record of that kind"
        );
        assert_eq!(
            dns.resolve("bad..name", DnsKind::A).await,
            Err(DnsError::InvalidName)
        );

        // The server never answers: TimedOut, after the time limit (simulated time).
        let exec = a.executor();
        let start = exec.now();
        assert_eq!(
            dns.resolve_timeout("silent.test", DnsKind::A, Duration::from_secs(3))
                .await,
            Err(DnsError::TimedOut)
        );
        let waited = exec.now() - start;
        assert!(
            waited >= Duration::from_secs(3) && waited < Duration::from_secs(4),
            "{waited:?}"
        );
        // A limit beyond smoltcp's own per-server silence is capped, still TimedOut.
        assert_eq!(
            dns.resolve_timeout("silent.test", DnsKind::A, Duration::from_secs(3600))
                .await,
            Err(DnsError::TimedOut)
        );
        assert!(exec.now() - start < Duration::from_secs(15));

        // One slot: a second query while one is in flight is refused; dropping the first
        // (cancelling it) frees the slot.
        let mut first = Box::pin(dns.resolve("silent.test", DnsKind::A));
        std::future::poll_fn(|cx: &mut Context<'_>| {
            assert!(first.as_mut().poll(cx).is_pending());
            Poll::Ready(())
        })
        .await;
        assert_eq!(
            dns.resolve("host.test", DnsKind::A).await,
            Err(DnsError::TooManyQueries)
        );
        drop(first);
        assert_eq!(dns.resolve("host.test", DnsKind::A).await.unwrap().len(), 2);
    });
}

/// Without servers, or with a server the stack has no route to, `resolve` fails at once.
#[test]
fn dns_without_servers_or_route_fails_at_once() {
    let clock = VirtualClock::leak();
    let p = pair_on_with(Executor::leak(clock), Faults::default(), 64, |_, _| {});
    let [a, _b] = p.stacks;
    p.exec.block_on(async move {
        let dns = DnsSocket::with_capacity(a, 2).unwrap();
        assert_eq!(
            dns.resolve("host.test", DnsKind::A).await,
            Err(DnsError::NoServers)
        );
    });
    let p2 = pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        64,
        |_, c| {
            c.dns_servers[0] = Some(Ipv4Address::new(192, 168, 9, 9).into());
        },
    );
    p2.exec.block_on(async move {
        // 192.168.9.9 is off-link and there is no gateway: no source address, no route.
        let dns = DnsSocket::with_capacity(p2.stacks[0], 2).unwrap();
        assert_eq!(
            dns.resolve("host.test", DnsKind::A).await,
            Err(DnsError::Failed)
        );
    });
}

/// Builds an IPv4 packet by hand (no options, identification 0, don't-fragment), as smoltcp
/// itself writes headers, so that it can arrive byte-exact.
fn ipv4_packet(src: Ipv4Address, dst: Ipv4Address, proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = 20 + payload.len();
    let mut p = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        proto,
        0,
        0,
    ];
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let mut sum: u32 = p
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let ck = !(sum as u16);
    p[10..12].copy_from_slice(&ck.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// A sends an IPv4 packet of protocol 253 (experimental) to B; B's raw socket receives it
/// byte-exact, and A's raw socket does not see its own packet.
#[test]
fn raw_packet_of_experimental_protocol_arrives_byte_exact() {
    let p = pair(Faults::default(), 128);
    let [a, b] = p.stacks;
    let proto = IpProtocol::Unknown(253);
    let ra = RawSocket::new(
        a,
        IpVersion::Ipv4,
        proto,
        RawBuffers::with_capacity(4, 4096),
    )
    .unwrap();
    let rb = RawSocket::new(
        b,
        IpVersion::Ipv4,
        proto,
        RawBuffers::with_capacity(4, 4096),
    )
    .unwrap();
    assert_eq!(rb.ip_protocol(), proto);
    assert_eq!(rb.ip_version(), IpVersion::Ipv4);
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 256) as u8).collect();
    let packet = ipv4_packet(ADDR[0], ADDR[1], 253, &payload);
    p.exec.block_on(async move {
        ra.send(&packet).await.unwrap();
        let mut buf = vec![0u8; 2048];
        let n = zcnet_executor::time::timeout(Duration::from_secs(5), rb.recv(&mut buf))
            .await
            .expect("packet arrived")
            .unwrap();
        assert_eq!(&buf[..n], &packet[..], "byte-exact, header included");

        // In place, the other way round.
        let back = ipv4_packet(ADDR[1], ADDR[0], 253, b"pong");
        rb.send_with(back.len(), |buf| buf.copy_from_slice(&back))
            .await
            .unwrap();
        let got =
            zcnet_executor::time::timeout(Duration::from_secs(5), ra.recv_with(|p| p.to_vec()))
                .await
                .expect("reply arrived");
        assert_eq!(got, back);

        // Not a packet of this socket's protocol, not IPv4 at all, too short a buffer.
        let udp = ipv4_packet(ADDR[0], ADDR[1], 17, b"x");
        assert_eq!(ra.send(&udp).await, Err(RawError::Malformed));
        assert_eq!(ra.send(&payload[..40]).await, Err(RawError::Malformed));
        ra.send(&ipv4_packet(ADDR[0], ADDR[1], 253, &payload))
            .await
            .unwrap();
        let mut small = [0u8; 100];
        assert_eq!(rb.recv(&mut small).await, Err(RawError::Truncated));
        assert_eq!(small[..], packet[..100]);
    });
}

/// Opening and dropping ICMP, DNS and raw sockets many more times than the stack has slots
/// never runs out; a full stack says `NoSocketSlot` (no panic) and recovers after a drop.
#[test]
fn dropping_sockets_frees_their_slots() {
    let p = pair(Faults::default(), 64);
    let a = p.stacks[0];
    for i in 0..(3 * SOCKETS) {
        let s = IcmpSocket::bind(a, i as u16, IcmpBuffers::with_capacity(1, 64)).unwrap();
        drop(s);
        let d = DnsSocket::with_capacity(a, 1).unwrap();
        drop(d);
        let r = RawSocket::new(
            a,
            IpVersion::Ipv6,
            IpProtocol::Unknown(253),
            RawBuffers::with_capacity(1, 64),
        )
        .unwrap();
        drop(r);
    }
    let mut held: Vec<RawSocket> = (0..SOCKETS)
        .map(|_| {
            RawSocket::new(
                a,
                IpVersion::Ipv4,
                IpProtocol::Unknown(253),
                RawBuffers::with_capacity(1, 64),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(
        IcmpSocket::bind(a, 1, IcmpBuffers::with_capacity(1, 64)).err(),
        Some(StackError::NoSocketSlot)
    );
    assert_eq!(
        DnsSocket::with_capacity(a, 1).err(),
        Some(StackError::NoSocketSlot)
    );
    held.pop();
    let _icmp = IcmpSocket::bind(a, 1, IcmpBuffers::with_capacity(1, 64)).unwrap();
}

/// Compile-time check: a stack's counters can be read from other threads through its
/// `StatsReader` (the stack and its sockets stay on their executor).
#[allow(dead_code)]
fn stats_reader_is_send_and_sync(reader: zcnet_stack::StatsReader) {
    fn send_sync<T: Send + Sync>(_: T) {}
    send_sync(reader);
}
