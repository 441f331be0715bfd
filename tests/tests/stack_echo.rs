//! The stack's answers to ICMPv4 echo requests (`ip/echo.rs`), with crafted frames over the
//! in-memory wire on a virtual clock ([`WireTarget`]): the test plays a host that learned the
//! stack's MAC without ARP (as a DHCP server's host does from the lease it gave) and pings it.
//!
//! * The first ping, from a host the stack has not resolved, is answered once the host's ARP
//!   reply comes (not lost while the stack asks); the next one at once.
//! * A ping from a host that never answers ARP is dropped after the neighbour timeout,
//!   counted as `NeighborTimeout`, and its slot returns to the pool.

use std::time::Duration;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr,
};
use zcnet_stack::DropReason;
use zcnet_tests::audit::assert_slots_back;
use zcnet_tests::craft::{arp_answer, icmp_echo_request, Host, WireTarget, STACK};

/// A host on the stack's subnet that the stack has never heard of.
const HOST: Host = Host {
    mac: EthernetAddress([0x02, 0, 0, 0, 0, 0x33]),
    ip: Ipv4Address::new(10, 0, 0, 33),
};

/// Whether `frame` is an ARP request for `target`.
fn is_arp_request_for(frame: &[u8], target: Ipv4Address) -> bool {
    EthernetFrame::new_checked(frame)
        .ok()
        .filter(|eth| eth.ethertype() == EthernetProtocol::Arp)
        .and_then(|eth| ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok())
        .is_some_and(|r| {
            matches!(r, ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Request,
                target_protocol_addr,
                ..
            } if target_protocol_addr == target)
        })
}

/// An echo reply in `frame`: (Ethernet destination, IP source, IP destination, identifier,
/// sequence number, data), checksums verified; `None` for any other frame.
type Reply = (EthernetAddress, Ipv4Address, Ipv4Address, u16, u16, Vec<u8>);

fn echo_reply(frame: &[u8]) -> Option<Reply> {
    let caps = ChecksumCapabilities::default();
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    let ip_repr = Ipv4Repr::parse(&ip, &caps).expect("a valid IPv4 header");
    if ip_repr.next_header != IpProtocol::Icmp {
        return None;
    }
    let icmp = Icmpv4Packet::new_checked(ip.payload()).ok()?;
    match Icmpv4Repr::parse(&icmp, &caps).expect("a valid ICMP message") {
        Icmpv4Repr::EchoReply {
            ident,
            seq_no,
            data,
        } => Some((
            eth.dst_addr(),
            ip_repr.src_addr,
            ip_repr.dst_addr,
            ident,
            seq_no,
            data.to_vec(),
        )),
        _ => None,
    }
}

/// The host pings the stack, whose MAC it knows without having asked. The stack cannot answer
/// at once: it asks for the host's MAC, and nothing else goes out. Once the host's ARP reply
/// comes, the echo reply goes to the host's MAC with the request's identifier, sequence number
/// and data. The second ping is answered at once, without another ARP request.
#[test]
fn ping_from_an_unresolved_host_is_answered_once_it_resolves() {
    let mut wire = WireTarget::new::<8>(0xec40, 64);
    wire.send(&icmp_echo_request(HOST, STACK, 0x77, 1, b"first ping"));
    let asked = wire
        .recv(Duration::from_millis(100))
        .expect("the stack sends something");
    assert!(
        is_arp_request_for(&asked, HOST.ip),
        "the stack first asks for the host's MAC: {asked:02x?}"
    );
    // Whatever else the stack sends while it waits (its own repeated request, say), no reply
    // goes out before the host's MAC is known.
    while let Some(f) = wire.recv(Duration::from_millis(100)) {
        assert!(echo_reply(&f).is_none(), "a reply before the ARP answer");
    }
    wire.send(&arp_answer(HOST, &asked).expect("an ARP reply"));
    let reply = wire
        .recv(Duration::from_millis(100))
        .expect("the first ping is answered once the host's MAC is known");
    assert_eq!(
        echo_reply(&reply),
        Some((HOST.mac, STACK.ip, HOST.ip, 0x77, 1, b"first ping".to_vec()))
    );

    wire.send(&icmp_echo_request(HOST, STACK, 0x77, 2, b"second"));
    let reply = wire
        .recv(Duration::from_millis(100))
        .expect("the second ping is answered at once");
    assert_eq!(
        echo_reply(&reply),
        Some((HOST.mac, STACK.ip, HOST.ip, 0x77, 2, b"second".to_vec()))
    );
    assert_eq!(wire.recv(Duration::from_millis(100)), None);
    let drops = wire.stack.stats().drops;
    assert_eq!(drops.iter().sum::<u64>(), 0, "{drops:?}");
}

/// A ping from a host that never answers ARP: the stack asks (and asks again) and sends no
/// reply; after the neighbour timeout the held reply is dropped, counted, and every slot is
/// back in the pool.
#[test]
fn ping_from_a_host_that_never_answers_arp_is_dropped_counted() {
    let mut wire = WireTarget::new::<8>(0xec41, 64);
    wire.send(&icmp_echo_request(HOST, STACK, 0x78, 1, b"unanswered"));
    let mut requests = 0;
    while let Some(f) = wire.recv(Duration::from_secs(2)) {
        assert!(echo_reply(&f).is_none(), "a reply without the host's MAC");
        if is_arp_request_for(&f, HOST.ip) {
            requests += 1;
        }
    }
    assert!(requests >= 2, "the stack asked again: {requests} requests");
    assert_eq!(
        wire.stack.stats().dropped(DropReason::NeighborTimeout),
        1,
        "the held reply timed out, counted"
    );
    assert_slots_back(wire.pools[1], 0);
}
