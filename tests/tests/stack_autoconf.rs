//! Address autoconfiguration between two stacks over the in-memory wire: a DHCPv4 lease from a
//! small DHCP server written here on stack B (and its loss when B stops renewing it), SLAAC from
//! a router advertisement injected on the wire, and the IPv6 link-local address from the MAC.
//! Forged DHCP replies (another server identifier) and DNS answers (another source than the
//! server asked, port 5353), injected on the wire, are dropped and counted.

use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use log::Level;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{IpProtocol, IpRepr, UdpPacket, UdpRepr};
use zcnet_executor::time::{sleep, timeout};
use zcnet_executor::Executor;
use zcnet_stack::dns::{DnsError, DnsKind, DnsSocket};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::{
    Config, DropReason, IpAddress, IpCidr, IpEndpoint, Ipv4Address, Ipv4Cidr, Ipv4Config,
    Ipv6Address, Ipv6Cidr, Stack, StaticV6,
};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::log_capture::LogCapture;
use zcnet_tests::net::{pair_on_with, pair_with, Pair, ADDR};
use zcnet_tests::wire::Faults;

const LEASED: Ipv4Address = Ipv4Address::new(10, 0, 0, 50);
const ROUTER: Ipv4Address = Ipv4Address::new(10, 0, 0, 254);
const DNS: Ipv4Address = Ipv4Address::new(10, 0, 0, 53);

/// fe80::ff:fe00:1, fe80::ff:fe00:2: the link-local addresses of the wire's MACs
/// 02:00:00:00:00:01 and 02:00:00:00:00:02 (modified EUI-64, worked out by hand).
const LINK_LOCAL: [Ipv6Address; 2] = [
    Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0x00ff, 0xfe00, 0x0001),
    Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0x00ff, 0xfe00, 0x0002),
];

fn udp(stack: Stack, port: u16) -> UdpSocket {
    UdpSocket::bind(stack, port, UdpBuffers::with_capacity(8, 4096)).unwrap()
}

/// Answers one datagram on `s` with the same bytes; returns who sent it.
async fn echo_once(s: UdpSocket) -> IpEndpoint {
    let mut buf = [0u8; 512];
    let (n, from) = s.recv_from(&mut buf).await.unwrap();
    s.send_to(&buf[..n], from).await.unwrap();
    from
}

/// Sends `msg` from `s` to `to` and returns the reply and its sender.
async fn ask(s: &UdpSocket, to: IpEndpoint, msg: &[u8]) -> (Vec<u8>, IpEndpoint) {
    s.send_to(msg, to).await.unwrap();
    let mut buf = [0u8; 512];
    let (n, from) = s.recv_from(&mut buf).await.unwrap();
    (buf[..n].to_vec(), from)
}

// ---------------------------------------------------------------------------------------------
// A small DHCP server (RFC 2131) over a zcnet UDP socket on port 67.

const DISCOVER: u8 = 1;
const OFFER: u8 = 2;
const REQUEST: u8 = 3;
const ACK: u8 = 5;
const MAGIC: [u8; 4] = [99, 130, 83, 99];

/// What the server saw of one client message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    kind: u8,
    from: IpEndpoint,
    answered: bool,
}

/// The fields of a client message the server needs, or `None` if it is not one (bounded).
fn parse_client(msg: &[u8]) -> Option<(u8, [u8; 4], [u8; 16])> {
    if msg.len() < 240 || msg[0] != 1 || msg[236..240] != MAGIC {
        return None;
    }
    let xid: [u8; 4] = msg[4..8].try_into().unwrap();
    let chaddr: [u8; 16] = msg[28..44].try_into().unwrap();
    let mut kind = None;
    let mut i = 240;
    while i < msg.len() {
        match msg[i] {
            0 => i += 1,
            255 => break,
            code => {
                let len = usize::from(*msg.get(i + 1)?);
                let value = msg.get(i + 2..i + 2 + len)?;
                if code == 53 && len == 1 {
                    kind = Some(value[0]);
                }
                i += 2 + len;
            }
        }
    }
    Some((kind?, xid, chaddr))
}

/// What the server grants: `LEASED` with this subnet mask and router.
#[derive(Clone, Copy)]
struct Terms {
    lease_secs: u32,
    mask: [u8; 4],
    router: Ipv4Address,
}

impl Terms {
    /// `LEASED`/24 via `ROUTER` for `lease_secs`.
    fn usual(lease_secs: u32) -> Self {
        Terms {
            lease_secs,
            mask: [255, 255, 255, 0],
            router: ROUTER,
        }
    }
}

/// An OFFER or ACK for `LEASED` on `terms`, with DNS server.
fn server_reply(kind: u8, xid: [u8; 4], chaddr: [u8; 16], terms: Terms) -> Vec<u8> {
    let mut m = vec![0u8; 240];
    m[0] = 2; // BOOTREPLY
    m[1] = 1; // Ethernet
    m[2] = 6;
    m[4..8].copy_from_slice(&xid);
    m[16..20].copy_from_slice(&LEASED.octets()); // yiaddr
    m[28..44].copy_from_slice(&chaddr);
    m[236..240].copy_from_slice(&MAGIC);
    let mut opt = |code: u8, value: &[u8]| {
        m.push(code);
        m.push(value.len() as u8);
        m.extend_from_slice(value);
    };
    opt(53, &[kind]);
    opt(54, &ADDR[1].octets()); // server identifier
    opt(51, &terms.lease_secs.to_be_bytes());
    opt(1, &terms.mask);
    opt(3, &terms.router.octets());
    opt(6, &DNS.octets());
    m.push(255);
    m
}

/// Serves `s` forever: OFFERs every DISCOVER, ACKs the first `acks` REQUESTs and ignores the
/// rest (a server that stops renewing). Every message is recorded in `log`.
async fn dhcp_server(s: UdpSocket, terms: Terms, mut acks: usize, log: Arc<Mutex<Vec<Seen>>>) {
    let mut buf = [0u8; 1024];
    loop {
        let Ok((n, from)) = s.recv_from(&mut buf).await else {
            continue;
        };
        let Some((kind, xid, chaddr)) = parse_client(&buf[..n]) else {
            continue;
        };
        let answer = match kind {
            DISCOVER => Some(OFFER),
            REQUEST if acks > 0 => {
                acks -= 1;
                Some(ACK)
            }
            _ => None,
        };
        log.lock().unwrap().push(Seen {
            kind,
            from,
            answered: answer.is_some(),
        });
        if let Some(reply) = answer {
            let reply = server_reply(reply, xid, chaddr, terms);
            // The client has no address yet: answer to the broadcast address.
            let to = IpEndpoint::new(Ipv4Address::BROADCAST.into(), 68);
            s.send_to(&reply, to).await.unwrap();
        }
    }
}

/// A pair on simulated time with `slots` pool slots each, A's configuration changed by
/// `configure`.
fn virtual_pair(slots: usize, configure: impl Fn(&mut Config)) -> Pair {
    pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        slots,
        |i, c| {
            if i == 0 {
                configure(c);
            }
        },
    )
}

/// A pair on simulated time where A is a DHCP client and B (10.0.0.2) runs the server.
fn dhcp_pair(lease_secs: u32, acks: usize) -> (Pair, Arc<Mutex<Vec<Seen>>>) {
    dhcp_pair_on(Terms::usual(lease_secs), acks)
}

/// [`dhcp_pair`] granting `terms`.
fn dhcp_pair_on(terms: Terms, acks: usize) -> (Pair, Arc<Mutex<Vec<Seen>>>) {
    let p = virtual_pair(128, |a| a.ipv4 = Ipv4Config::Dhcp);
    let log = Arc::new(Mutex::new(Vec::new()));
    // Bound before anything runs, so the client's first DISCOVER finds it.
    let server = udp(p.stacks[1], 67);
    drop(
        p.exec
            .local_spawner()
            .spawn(dhcp_server(server, terms, acks, log.clone())),
    );
    (p, log)
}

/// A DHCP client gets 10.0.0.50/24, the default route and the DNS server from a server on the
/// other stack (which receives the client's broadcasts from 0.0.0.0 on a plain UDP socket and
/// answers to the broadcast address), and then talks to it from the leased address.
#[test]
fn dhcp_client_gets_address_route_and_dns_then_udp_works() {
    let (p, log) = dhcp_pair(3600, usize::MAX);
    let [a, b] = p.stacks;
    assert_eq!(a.ipv4_config(), None, "no address before the lease");
    assert_eq!(a.dhcp_lease(), None);
    let echo = p.exec.local_spawner().spawn(echo_once(udp(b, 7)));
    let (settings, reply) = p.exec.block_on(async move {
        // A resolver opened before the lease has no servers yet; once leased, it asks the
        // lease's server (10.0.0.53, which nobody answers for on this wire: a timeout).
        let resolver = DnsSocket::with_capacity(a, 1).unwrap();
        let name = "zcnet.test";
        assert_eq!(
            resolver.resolve(name, DnsKind::A).await.unwrap_err(),
            DnsError::NoServers
        );
        let settings = timeout(Duration::from_secs(60), a.wait_ipv4())
            .await
            .expect("leased within a simulated minute");
        let r = resolver
            .resolve_timeout(name, DnsKind::A, Duration::from_secs(1))
            .await;
        assert_eq!(r.unwrap_err(), DnsError::TimedOut);
        assert_eq!(
            resolver.servers().collect::<Vec<_>>(),
            vec![IpAddress::from(DNS)],
            "the lease's DNS server is used"
        );
        drop(resolver);
        let s = udp(a, 5000);
        let reply = ask(&s, IpEndpoint::new(ADDR[1].into(), 7), b"over the lease").await;
        (settings, reply)
    });
    assert_eq!(settings.address, Ipv4Cidr::new(LEASED, 24));
    assert_eq!(
        settings.gateway,
        Some(ROUTER),
        "default route via the router"
    );
    assert_eq!(a.ipv4_config(), Some(settings));
    let lease = a.dhcp_lease().expect("lease");
    assert_eq!(lease.address, Ipv4Cidr::new(LEASED, 24));
    assert_eq!(lease.router, Some(ROUTER));
    assert_eq!(lease.server, ADDR[1]);
    assert_eq!(lease.dns_servers(), &[DNS]);
    assert_eq!(
        a.ip_addrs().as_slice(),
        &[IpCidr::Ipv4(Ipv4Cidr::new(LEASED, 24))],
        "IPv6 off: the leased address only"
    );
    assert_eq!(
        reply,
        (
            b"over the lease".to_vec(),
            IpEndpoint::new(ADDR[1].into(), 7)
        )
    );
    let from = p.exec.block_on(echo);
    assert_eq!(
        from,
        IpEndpoint::new(LEASED.into(), 5000),
        "B saw the leased address"
    );
    let log = log.lock().unwrap().clone();
    let client = IpEndpoint::new(Ipv4Address::UNSPECIFIED.into(), 68);
    assert_eq!(
        log[..2],
        [
            Seen {
                kind: DISCOVER,
                from: client,
                answered: true
            },
            Seen {
                kind: REQUEST,
                from: client,
                answered: true
            }
        ],
        "broadcast DISCOVER and REQUEST from 0.0.0.0 reached B's port-67 socket: {log:?}"
    );
    assert_eq!(a.stats().config_changes, 1);
}

/// A /32 lease whose router (B itself) lies outside it, as some clouds hand out: the client
/// makes the router on-link (the prefix shortened until it holds it) so that it can resolve
/// it, and traffic both ways works. With the /32 taken as it is, smoltcp ignored B's ARP
/// answers (an off-link sender) and A could not send anything.
#[test]
fn dhcp_lease_with_an_off_link_router_makes_the_router_reachable() {
    let terms = Terms {
        lease_secs: 3600,
        mask: [255; 4],
        router: ADDR[1],
    };
    let (p, _log) = dhcp_pair_on(terms, usize::MAX);
    let [a, b] = p.stacks;
    let echo = p.exec.local_spawner().spawn(echo_once(udp(b, 7)));
    let (settings, reply) = p.exec.block_on(async move {
        let settings = timeout(Duration::from_secs(60), a.wait_ipv4())
            .await
            .expect("leased within a simulated minute");
        let s = udp(a, 5000);
        let reply = timeout(
            Duration::from_secs(10),
            ask(
                &s,
                IpEndpoint::new(ADDR[1].into(), 7),
                b"via an off-link router",
            ),
        )
        .await
        .expect("the router answers");
        (settings, reply)
    });
    assert_eq!(
        a.dhcp_lease().expect("lease").address,
        Ipv4Cidr::new(LEASED, 32),
        "the lease as granted"
    );
    // 10.0.0.50 and 10.0.0.2 share their first 26 bits.
    assert_eq!(settings.address, Ipv4Cidr::new(LEASED, 26), "in effect");
    assert_eq!(settings.gateway, Some(ADDR[1]));
    assert_eq!(reply.0, b"via an off-link router".to_vec());
    assert_eq!(
        p.exec.block_on(echo),
        IpEndpoint::new(LEASED.into(), 5000),
        "B saw the leased address"
    );
}

/// The server grants a 60 s lease and then ignores renewals: the client renews (unicast),
/// rebinds (broadcast), and when the lease ends it loses the address and the route.
#[test]
fn dhcp_lease_is_lost_when_the_server_stops_renewing() {
    let records = LogCapture::start();
    let (p, log) = dhcp_pair(60, 1);
    let [a, _b] = p.stacks;
    let exec = p.exec;
    let (got_at, lost_at) = p.exec.block_on(async move {
        a.wait_ipv4().await;
        let got_at = exec.now();
        let mut g = a.config_generation();
        timeout(Duration::from_secs(300), async {
            while a.dhcp_lease().is_some() {
                g = a.wait_config_change(g).await;
            }
        })
        .await
        .expect("lease lost within 5 simulated minutes");
        (got_at, exec.now())
    });
    let held = Duration::from_nanos(lost_at.as_nanos() - got_at.as_nanos());
    assert!(
        held >= Duration::from_secs(60) && held < Duration::from_secs(61),
        "lost at the end of the 60 s lease, after {held:?}"
    );
    assert_eq!(a.ipv4_config(), None, "address and route gone");
    assert!(a.ip_addrs().as_slice().is_empty());
    let log = log.lock().unwrap().clone();
    let leased = IpEndpoint::new(LEASED.into(), 68);
    let renewals: Vec<_> = log
        .iter()
        .filter(|s| s.kind == REQUEST && s.from == leased)
        .collect();
    assert!(
        renewals.len() >= 2 && renewals.iter().all(|s| !s.answered),
        "renew and rebind REQUESTs from the leased address, unanswered: {log:?}"
    );
    assert_eq!(a.stats().config_changes, 2, "configured, then deconfigured");
    // What the stack logged (its `log` feature): the lease at info, its loss as a warning.
    let dhcp = "zcnet_stack::dhcp";
    records.expect(
        Level::Info,
        dhcp,
        "DHCPv4: leased 10.0.0.50/24 from server 10.0.0.2, router 10.0.0.254",
    );
    records.expect(Level::Debug, dhcp, "DHCPv4: DNS server 10.0.0.53");
    records.expect(Level::Warn, dhcp, "DHCPv4: lease of 10.0.0.50/24 lost");
}

// ---------------------------------------------------------------------------------------------
// IPv6

/// An ICMPv6 router advertisement from `mac`/`src` to all nodes, advertising `prefix`/64 for
/// address autoconfiguration, as an Ethernet frame.
fn router_advertisement(mac: [u8; 6], src: Ipv6Address, prefix: Ipv6Address) -> Vec<u8> {
    let all_nodes = Ipv6Address::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let mut icmp = vec![134, 0, 0, 0, 64, 0];
    icmp.extend_from_slice(&1800u16.to_be_bytes()); // router lifetime
    icmp.extend_from_slice(&[0; 8]); // reachable time, retrans timer
    icmp.extend_from_slice(&[1, 1]); // source link-layer address
    icmp.extend_from_slice(&mac);
    icmp.extend_from_slice(&[3, 4, 64, 0xc0]); // prefix information: /64, on-link + autonomous
    icmp.extend_from_slice(&86400u32.to_be_bytes()); // valid lifetime
    icmp.extend_from_slice(&14400u32.to_be_bytes()); // preferred lifetime
    icmp.extend_from_slice(&[0; 4]);
    icmp.extend_from_slice(&prefix.octets());
    // Checksum over the pseudo-header and the message.
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
        }
    };
    add(&src.octets());
    add(&all_nodes.octets());
    add(&(icmp.len() as u32).to_be_bytes());
    add(&[0, 0, 0, 58]);
    add(&icmp);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    icmp[2..4].copy_from_slice(&(!(sum as u16)).to_be_bytes());

    let mut f = vec![0x33, 0x33, 0, 0, 0, 1];
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x86, 0xdd]);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, 255]); // ICMPv6, hop limit 255
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&all_nodes.octets());
    f.extend_from_slice(&icmp);
    f
}

/// With IPv6 on, each stack has fe80::/64 plus its MAC's EUI-64 identifier (also next to a
/// static IPv6 address), and the two talk UDP between their link-local addresses. The default
/// configuration (IPv4 only) has no IPv6 address at all.
#[test]
fn link_local_addresses_from_the_mac_carry_udp() {
    let p = pair_with(Faults::default(), 64, |i, c| {
        if i == 0 {
            c.ipv6_link_local = true;
        } else {
            c.ipv6 = Some(StaticV6 {
                address: Ipv6Cidr::new(Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 2), 64),
                gateway: None,
            });
        }
    });
    let [a, b] = p.stacks;
    assert_eq!(zcnet_stack::ipv6_link_local(p.ends[0].mac()), LINK_LOCAL[0]);
    assert_eq!(
        a.ip_addrs().ipv6().collect::<Vec<_>>(),
        [Ipv6Cidr::new(LINK_LOCAL[0], 64)]
    );
    assert_eq!(
        b.ip_addrs().ipv6().collect::<Vec<_>>(),
        [
            Ipv6Cidr::new(Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 2), 64),
            Ipv6Cidr::new(LINK_LOCAL[1], 64)
        ],
        "link-local next to the static address"
    );
    let echo = p.exec.local_spawner().spawn(echo_once(udp(b, 7)));
    let reply = p.exec.block_on(async move {
        let s = udp(a, 5000);
        timeout(
            Duration::from_secs(5),
            ask(&s, IpEndpoint::new(LINK_LOCAL[1].into(), 7), b"fe80"),
        )
        .await
        .expect("link-local echo")
    });
    assert_eq!(
        reply,
        (b"fe80".to_vec(), IpEndpoint::new(LINK_LOCAL[1].into(), 7))
    );
    assert_eq!(
        p.exec.block_on(echo),
        IpEndpoint::new(LINK_LOCAL[0].into(), 5000),
        "sent from A's link-local address"
    );

    let plain = zcnet_tests::net::pair(Faults::default(), 16);
    assert!(
        plain.stacks[0].ip_addrs().ipv6().next().is_none(),
        "IPv6 off by default"
    );
}

/// A router advertisement for fd00:1::/64 (hand-built, injected on the wire from B's MAC and
/// link-local address: smoltcp cannot send one) gives A, with SLAAC on, the address
/// fd00:1::ff:fe00:1 (prefix plus A's EUI-64 identifier); A then talks UDP to B's static
/// fd00:1::2 from it.
#[test]
fn slaac_address_from_a_router_advertisement_carries_udp() {
    let prefix = Ipv6Address::new(0xfd00, 1, 0, 0, 0, 0, 0, 0);
    let b_addr = Ipv6Address::new(0xfd00, 1, 0, 0, 0, 0, 0, 2);
    let a_slaac = Ipv6Address::new(0xfd00, 1, 0, 0, 0, 0x00ff, 0xfe00, 0x0001);
    let records = LogCapture::start();
    let p = pair_with(Faults::default(), 64, |i, c| {
        if i == 0 {
            c.slaac = true;
        } else {
            c.ipv6 = Some(StaticV6 {
                address: Ipv6Cidr::new(b_addr, 64),
                gateway: None,
            });
        }
    });
    let [a, b] = p.stacks;
    assert_eq!(
        a.ip_addrs().ipv6().collect::<Vec<_>>(),
        [Ipv6Cidr::new(LINK_LOCAL[0], 64)],
        "SLAAC implies the link-local address; nothing else before an advertisement"
    );
    let echo = p.exec.local_spawner().spawn(echo_once(udp(b, 7)));
    let ra = router_advertisement(p.ends[1].mac(), LINK_LOCAL[1], prefix);
    let ends = p.ends;
    let reply = p.exec.block_on(async move {
        // Let A start (and solicit) first; then the router answers.
        sleep(Duration::from_millis(10)).await;
        let mut g = a.config_generation();
        ends[1].inject(&ra);
        timeout(Duration::from_secs(5), async {
            while !a.ip_addrs().ipv6().any(|c| c.address() == a_slaac) {
                g = a.wait_config_change(g).await;
            }
        })
        .await
        .expect("SLAAC address configured");
        let s = udp(a, 5000);
        timeout(
            Duration::from_secs(5),
            ask(&s, IpEndpoint::new(b_addr.into(), 7), b"slaac"),
        )
        .await
        .expect("echo over the SLAAC address")
    });
    assert!(a
        .ip_addrs()
        .as_slice()
        .contains(&IpCidr::Ipv6(Ipv6Cidr::new(a_slaac, 64))));
    assert_eq!(
        reply,
        (b"slaac".to_vec(), IpEndpoint::new(b_addr.into(), 7))
    );
    assert_eq!(
        p.exec.block_on(echo),
        IpEndpoint::new(IpAddress::Ipv6(a_slaac), 5000),
        "B saw A's SLAAC address"
    );
    assert!(a.stats().config_changes >= 1);
    // What the stack logged (its `log` feature): the link-local address when it was created,
    // the SLAAC address when the advertisement was applied.
    records.expect(Level::Info, "zcnet_stack", "address fe80::ff:fe00:1/64");
    records.expect(
        Level::Info,
        "zcnet_stack::slaac",
        "SLAAC: address fd00:1::ff:fe00:1/64 added",
    );
}

/// SLAAC on with no router on the link: the stack sends its three router solicitations, four
/// seconds apart, and then goes quiet. Alone, smoltcp 0.14 would send one (its deadline is lost
/// when no socket has one) ...
#[test]
fn slaac_without_a_router_solicits_three_times_then_goes_quiet() {
    let p = pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        64,
        |i, c| {
            if i == 0 {
                c.slaac = true;
            }
        },
    );
    let a = p.stacks[0];
    p.exec.block_on(sleep(Duration::from_secs(60)));
    let s = a.stats();
    let sent = p.ends[0].tx_stats().sent;
    assert_eq!(sent, 3, "three router solicitations: {s:?}");
    assert!(s.egress_polls < 10, "egress quiet after them: {s:?}");
}

/// ... and with a socket deadline next to it (here the DHCP client's retransmissions) it would
/// wake egress every millisecond once its solicitations went unanswered.
#[test]
fn slaac_without_a_router_does_not_spin_next_to_socket_timers() {
    let p = pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        64,
        |i, c| {
            if i == 0 {
                c.slaac = true;
                c.ipv4 = Ipv4Config::Dhcp;
            }
        },
    );
    let a = p.stacks[0];
    p.exec.block_on(sleep(Duration::from_secs(60)));
    let s = a.stats();
    // 3 solicitations plus DISCOVERs every 10 s (nobody serves DHCP here).
    let sent = p.ends[0].tx_stats().sent;
    assert!((6..=12).contains(&sent), "{sent} frames: {s:?}");
    assert!(
        s.egress_polls < 120,
        "at most about one egress run a second in the stale state: {s:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Forged answers (`stack/src/ip/asked.rs`)

/// A UDP datagram `src` → `dst` (IPv4) carrying `payload`, as an Ethernet frame from B's MAC to
/// `dst_mac`; checksums right.
fn udp_frame(dst_mac: [u8; 6], src: IpEndpoint, dst: IpEndpoint, payload: &[u8]) -> Vec<u8> {
    let caps = ChecksumCapabilities::default();
    let udp = UdpRepr {
        src_port: src.port,
        dst_port: dst.port,
    };
    let ip = IpRepr::new(
        src.addr,
        dst.addr,
        IpProtocol::Udp,
        udp.header_len() + payload.len(),
        64,
    );
    let mut f = vec![0u8; 14 + ip.buffer_len()];
    f[..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    ip.emit(&mut f[14..], &caps);
    let at = 14 + ip.header_len();
    udp.emit(
        &mut UdpPacket::new_unchecked(&mut f[at..]),
        &src.addr,
        &dst.addr,
        payload.len(),
        |p| p.copy_from_slice(payload),
        &caps,
    );
    f
}

/// `reply` (a server's DHCP message) with its server identifier option set to `server`.
fn with_server_id(mut reply: Vec<u8>, server: Ipv4Address) -> Vec<u8> {
    let mut i = 240;
    while i + 1 < reply.len() && reply[i] != 255 {
        let len = usize::from(reply[i + 1]);
        if reply[i] == 54 {
            reply[i + 2..i + 2 + len].copy_from_slice(&server.octets());
        }
        i += 2 + len;
    }
    reply
}

/// A DHCP ACK or NAK for the client's transaction and MAC, but from another server than the one
/// whose offer it took (another server identifier), is dropped before smoltcp, counted as
/// `UnexpectedAnswer`: the forged ACK gives no lease, the forged NAK does not send the client
/// back to DISCOVER. The same ACK with the chosen server's identifier then gives the lease.
#[test]
fn dhcp_replies_from_a_server_not_chosen_are_ignored() {
    const NAK: u8 = 6;
    let forger = Ipv4Address::new(10, 0, 0, 66);
    let p = virtual_pair(128, |a| a.ipv4 = Ipv4Config::Dhcp);
    let a = p.stacks[0];
    let ends = p.ends;
    // B (server identifier 10.0.0.2) offers, and records what the client sends; the test
    // plays every answer after the offer.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = udp(p.stacks[1], 67);
    let log = seen.clone();
    drop(p.exec.local_spawner().spawn(async move {
        let mut buf = [0u8; 1024];
        loop {
            let Ok((n, _)) = server.recv_from(&mut buf).await else {
                continue;
            };
            let Some((kind, xid, chaddr)) = parse_client(&buf[..n]) else {
                continue;
            };
            log.lock().unwrap().push((kind, xid, chaddr));
            if kind == DISCOVER {
                let offer = server_reply(OFFER, xid, chaddr, Terms::usual(3600));
                let to = IpEndpoint::new(Ipv4Address::BROADCAST.into(), 68);
                server.send_to(&offer, to).await.unwrap();
            }
        }
    }));
    let count = |kind: u8| seen.lock().unwrap().iter().filter(|m| m.0 == kind).count();
    p.exec.block_on(async {
        while count(REQUEST) == 0 {
            sleep(Duration::from_millis(100)).await;
        }
        let discovers = count(DISCOVER);
        // The messages so far: the DISCOVERs, then the REQUEST for B's offer.
        let (_, xid, chaddr) = seen.lock().unwrap()[discovers];
        let frame = |m: &[u8]| {
            udp_frame(
                [0xff; 6],
                IpEndpoint::new(forger.into(), 67),
                IpEndpoint::new(Ipv4Address::BROADCAST.into(), 68),
                m,
            )
        };
        let ack = server_reply(ACK, xid, chaddr, Terms::usual(3600));
        let nak = server_reply(NAK, xid, chaddr, Terms::usual(3600));
        ends[1].inject(&frame(&with_server_id(ack.clone(), forger)));
        ends[1].inject(&frame(&with_server_id(nak, forger)));
        sleep(Duration::from_secs(2)).await;
        assert_eq!(a.dhcp_lease(), None, "the forged ACK gave no lease");
        assert_eq!(
            count(DISCOVER),
            discovers,
            "the forged NAK did not restart the client"
        );
        assert_eq!(a.stats().dropped(DropReason::UnexpectedAnswer), 2);

        // The chosen server's identifier (whatever the IP source): taken.
        ends[1].inject(&frame(&ack));
        timeout(Duration::from_secs(5), a.wait_ipv4())
            .await
            .expect("the chosen server's ACK gives the lease");
        assert_eq!(a.dhcp_lease().map(|l| l.server), Some(ADDR[1]));
        assert_eq!(a.stats().dropped(DropReason::UnexpectedAnswer), 2);
    });
}

/// The queries a server received: each one's source port and bytes.
type Queries = Arc<Mutex<Vec<(u16, Vec<u8>)>>>;

/// The query (source port, transaction ID and question) of each datagram `sock` receives;
/// nothing is answered.
async fn silent_dns_server(sock: UdpSocket, queries: Queries) {
    let mut q = [0u8; 512];
    loop {
        if let Ok((n, from)) = sock.recv_from(&mut q).await {
            queries.lock().unwrap().push((from.port, q[..n].to_vec()));
        }
    }
}

/// An answer to `query` (transaction ID and question copied) giving `addr`.
fn dns_answer(query: &[u8], addr: Ipv4Address) -> Vec<u8> {
    let mut r = query[..2].to_vec();
    r.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
    r.extend_from_slice(&query[12..]);
    r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 0, 0, 4]);
    r.extend_from_slice(&addr.octets());
    r
}

/// Forged answers with the query's port and transaction ID are dropped before smoltcp, counted
/// as `UnexpectedAnswer`: from another address's port 53, from port 5353 (smoltcp's DNS socket
/// takes any of those), and an answer from the server to a port no query uses. The answer from
/// the server's port 53 is taken.
#[test]
fn dns_answers_only_from_the_server_asked() {
    let forger = Ipv4Address::new(10, 0, 0, 66);
    let p = virtual_pair(64, |a| a.dns_servers[0] = Some(ADDR[1].into()));
    let a = p.stacks[0];
    let ends = p.ends;
    let queries = Arc::new(Mutex::new(Vec::new()));
    drop(
        p.exec
            .local_spawner()
            .spawn(silent_dns_server(udp(p.stacks[1], 53), queries.clone())),
    );
    let resolver = Rc::new(DnsSocket::with_capacity(a, 1).unwrap());
    let r = resolver.clone();
    let lookup = p.exec.local_spawner().spawn(async move {
        r.resolve_timeout("host.test", DnsKind::A, Duration::from_secs(5))
            .await
    });
    p.exec.block_on(async {
        while queries.lock().unwrap().is_empty() {
            sleep(Duration::from_millis(1)).await;
        }
        let (port, query) = queries.lock().unwrap()[0].clone();
        let a_mac = p.ends[0].mac();
        let from = |addr: Ipv4Address, sport: u16, dport: u16, answer: Ipv4Address| {
            udp_frame(
                a_mac,
                IpEndpoint::new(addr.into(), sport),
                IpEndpoint::new(ADDR[0].into(), dport),
                &dns_answer(&query, answer),
            )
        };
        let bad = Ipv4Address::new(6, 6, 6, 6);
        ends[1].inject(&from(forger, 53, port, bad));
        ends[1].inject(&from(forger, 5353, port, bad));
        ends[1].inject(&from(ADDR[1], 5353, port, bad));
        ends[1].inject(&from(ADDR[1], 53, port ^ 1, bad));
        sleep(Duration::from_millis(100)).await;
        assert_eq!(a.stats().dropped(DropReason::UnexpectedAnswer), 4);

        let good = Ipv4Address::new(10, 1, 2, 3);
        ends[1].inject(&from(ADDR[1], 53, port, good));
    });
    let got = p.exec.block_on(lookup).expect("the server's answer");
    assert_eq!(&got[..], &[IpAddress::Ipv4(Ipv4Address::new(10, 1, 2, 3))]);
    assert_eq!(a.stats().dropped(DropReason::UnexpectedAnswer), 4);
}
