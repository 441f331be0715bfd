//! Frames smoltcp drops, counted by reason in [`StackStats::drops`](crate::StackStats::drops),
//! and the TCP segments that go to zcnet's own TCP instead of smoltcp.
//!
//! smoltcp drops a frame it cannot use without a word. Ingress therefore looks at each frame
//! before smoltcp does ([`check`]: header reads only, no copy, no socket lookup) and, for the
//! frames smoltcp answers with a refusal, at the answer
//! ([`is_refusal`](crate::link::device::is_refusal)).
//!
//! A TCP segment addressed to the stack never reaches smoltcp: [`check`] verifies its
//! checksum (unless the driver did), and its addresses (a unicast destination of ours, a
//! source that is not unspecified, broadcast or multicast), then returns [`Verdict::Tcp`] with
//! where the segment sits in the frame; ingress hands it to zcnet's TCP (`transport/tcp/input.rs`), which
//! answers a segment nobody takes with a RST, counted as `NoSocket` there. A TCP segment
//! with a wrong checksum, a header cut short or such addresses is dropped here, counted.
//!
//! An ICMPv4 echo request to one of the stack's unicast addresses from a unicast source, its
//! checksums right, never reaches smoltcp either: [`check`] returns [`Verdict::Echo`] and the
//! stack answers it (`ip/echo.rs`), holding the reply while the sender's next hop resolves.
//!
//! | reason | what | how it is counted |
//! |---|---|---|
//! | [`BadChecksum`](DropReason::BadChecksum) | IPv4 header, TCP, UDP, ICMPv4 or ICMPv6 checksum wrong | ingress verifies these *instead of* smoltcp and drops the frame itself |
//! | [`Malformed`](DropReason::Malformed) | headers smoltcp cannot parse: a frame shorter than its Ethernet or IP header, IP lengths beyond the frame, the wrong IP version, a UDP or ICMP header cut short, a broken IPv6 hop-by-hop header; a router advertisement of a multicast prefix (smoltcp's SLAAC would panic on it: dropped by ingress); a TCP header cut short, a TCP segment from an unspecified, broadcast or multicast source, or with port 0 | the same `smoltcp::wire` checks smoltcp makes; smoltcp still gets the frame and drops it (TCP: dropped by ingress or zcnet's TCP) |
//! | [`NotForUs`](DropReason::NotForUs) | an Ethernet destination that is neither ours, broadcast nor multicast; an IP destination that is none of the interface's addresses, broadcast or multicast; a TCP segment to a broadcast or multicast address | as above (TCP: dropped by ingress) |
//! | [`Unsupported`](DropReason::Unsupported) | an Ethernet type other than ARP, IPv4 and IPv6; an IPv4 fragment (the stack does not reassemble) | as above |
//! | [`UnexpectedAnswer`](DropReason::UnexpectedAnswer) | a DHCP ACK or NAK for the client's request from another server than the one it chose; a datagram smoltcp's DNS socket would take that is not from port 53 of the server its query asked | ingress, before smoltcp (`ip/asked.rs`; DNS: [`Verdict::DnsAnswer`], judged by `socket/dns.rs`) |
//! | [`IcmpUnmatched`](DropReason::IcmpUnmatched) | an ICMP "fragmentation needed" / "packet too big" about a TCP segment not in flight ([`Verdict::TooBig`]) | zcnet's TCP (`transport/tcp/icmp_error.rs`); smoltcp never sees these messages |
//! | [`NoSocket`](DropReason::NoSocket) | a datagram no socket took: smoltcp answered it with an ICMP destination unreachable, or an ICMPv6 parameter problem for an unknown next header; a TCP segment no connection or listener takes, answered with a reset by zcnet's TCP | the answer smoltcp writes while it handles the frame; for TCP, zcnet's TCP as it answers |
//!
//! A frame is counted once, when smoltcp has handled it (a frame kept for a later retry is not
//! counted twice), or when ingress drops it.
//!
//! # Cost
//!
//! Each checksum is verified once per frame: smoltcp is built with receive verification off
//! for every checksum the driver does not verify ([`smoltcp_checksums`]), and ingress verifies
//! the packets smoltcp would verify with it on (every IPv4 header; the TCP, UDP and ICMP
//! messages smoltcp hands to its protocol code: addressed to the stack, and for IPv6 after a
//! hop-by-hop header, skipped as smoltcp skips it), with the same `smoltcp::wire` functions. What ingress adds per frame is
//! header parsing: a few bounds-checked loads, and a look at the interface's (at most four)
//! addresses. The answer is examined only for frames smoltcp answers during ingress.
//!
//! # Not counted
//!
//! Drops smoltcp decides from socket state: a datagram for a socket whose receive buffer is
//! full, a broadcast or multicast datagram no socket takes (smoltcp does not answer those), a
//! refusal smoltcp could not send because the sender's link-layer address is unknown (it sends
//! an ARP request or neighbour solicitation instead); and a few it decides from addresses: a
//! multicast group the interface has not joined, a packet from a broadcast, multicast or
//! unspecified source. A TCP reset that no connection takes is dropped unanswered and
//! uncounted, as smoltcp did.
//!
//! A raw socket for TCP, UDP or ICMP does not see packets whose checksum is wrong: ingress
//! drops them before smoltcp, which hands packets to raw sockets before its protocol code.

use smoltcp::phy::{Checksum, ChecksumCapabilities, Medium};
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, HardwareAddress, Icmpv4Packet, Icmpv6Message, Icmpv6Packet,
    IpAddress, IpEndpoint, IpProtocol, IpVersion, Ipv4Packet, Ipv6ExtHeader, Ipv6Packet, NdiscRepr,
    TcpPacket, UdpPacket,
};

use crate::link::neighbor::is_v4_broadcast;
use crate::stack::State;
use crate::stats::DropReason;
use crate::transport::tcp::icmp_error::{self, TooBig};

/// The checksum capabilities smoltcp is built with: the driver's, with receive verification
/// off wherever ingress verifies in smoltcp's place (wherever the driver does not).
pub(crate) fn smoltcp_checksums(driver: &ChecksumCapabilities) -> ChecksumCapabilities {
    let tx_only = |c: &Checksum| if c.tx() { Checksum::Tx } else { Checksum::None };
    let mut c = driver.clone();
    c.ipv4 = tx_only(&driver.ipv4);
    c.udp = tx_only(&driver.udp);
    c.tcp = tx_only(&driver.tcp);
    c.icmpv4 = tx_only(&driver.icmpv4);
    c.icmpv6 = tx_only(&driver.icmpv6);
    c
}

/// Where a TCP segment addressed to the stack sits in its frame, checksum verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TcpSeg {
    /// The IP source.
    pub(crate) src: IpAddress,
    /// The IP destination: one of the interface's unicast addresses.
    pub(crate) dst: IpAddress,
    /// The IP TTL / hop limit.
    pub(crate) hop_limit: u8,
    /// Offset of the TCP header in the frame.
    pub(crate) start: usize,
    /// Length of the TCP segment (header and payload).
    pub(crate) len: usize,
}

/// What ingress does with a frame before smoltcp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// smoltcp gets it.
    Pass,
    /// A TCP segment for the stack's own TCP (`transport/tcp/input.rs`); smoltcp never sees it.
    Tcp(TcpSeg),
    /// smoltcp gets it and will drop it: count the reason once smoltcp has handled it.
    Doomed(DropReason),
    /// A checksum ingress verifies for smoltcp is wrong, or a DHCP reply comes from a server
    /// the client did not ask: drop it here, counted.
    Drop(DropReason),
    /// A UDP datagram from port 53 or 5353 that passed every check: smoltcp gets it unless
    /// the DNS layer finds it is no answer to a query of ours from the server asked
    /// (`socket/dns.rs`), and then it drops, counted.
    DnsAnswer {
        /// Its source.
        src: IpEndpoint,
        /// Its destination.
        dst: IpEndpoint,
    },
    /// An ICMP "fragmentation needed" / "packet too big" to one of our addresses about a TCP
    /// segment: zcnet's TCP takes it (`transport/tcp/icmp_error.rs`), smoltcp never sees it.
    TooBig(TooBig),
    /// An ICMPv4 echo request to one of our unicast addresses from a unicast source, checksums
    /// verified: the stack answers it (`ip/echo.rs`), smoltcp never sees it.
    Echo(super::echo::EchoRequest),
}

/// Looks at `frame` as smoltcp will (see the [module docs](self)). `verified`: the driver
/// marked the frame's TCP or UDP checksum verified (`RxFrame::checksum_verified`: the device
/// checked it, or the host handed the packet over with a partial one); it is then not
/// verified again.
pub(crate) fn check(st: &State, frame: &[u8], verified: bool) -> Verdict {
    // The IP version smoltcp takes the packet for: the Ethernet type's, or the first nibble's;
    // a packet whose own version field disagrees is dropped either way.
    let version = |ip: &[u8]| ip.first().map(|b| b >> 4);
    let (ip, v) = match st.link.caps.medium {
        Medium::Ethernet => {
            let Ok(eth) = EthernetFrame::new_checked(frame) else {
                return Verdict::Doomed(DropReason::Malformed);
            };
            let d = eth.dst_addr();
            if !(d.is_broadcast()
                || d.is_multicast()
                || st.iface.hardware_addr() == HardwareAddress::Ethernet(d))
            {
                return Verdict::Doomed(DropReason::NotForUs);
            }
            match eth.ethertype() {
                EthernetProtocol::Ipv4 => (eth.payload(), 4),
                EthernetProtocol::Ipv6 => (eth.payload(), 6),
                EthernetProtocol::Arp => return Verdict::Pass,
                _ => return Verdict::Doomed(DropReason::Unsupported),
            }
        }
        Medium::Ip => match version(frame) {
            Some(v) => (frame, v),
            None => return Verdict::Doomed(DropReason::Malformed),
        },
        #[allow(unreachable_patterns)]
        _ => return Verdict::Pass,
    };
    match (v, version(ip)) {
        (4, Some(4)) => check_v4(st, frame, ip, verified),
        (6, Some(6)) => check_v6(st, frame, ip, verified),
        _ => Verdict::Doomed(DropReason::Malformed),
    }
}

/// The verdict on a TCP segment `payload` (a slice of `frame`) from `src` to `dst`: for the
/// stack's TCP when its header is whole, its checksum right and its addresses usable (a
/// unicast destination of ours, `dst_ours`: the interface has `dst`; a source that is not
/// unspecified, broadcast or multicast), else dropped here, counted.
#[allow(clippy::too_many_arguments)]
fn check_tcp(
    st: &State,
    frame: &[u8],
    src: IpAddress,
    dst: IpAddress,
    dst_ours: bool,
    hop_limit: u8,
    payload: &[u8],
    verified: bool,
) -> Verdict {
    let Ok(t) = TcpPacket::new_checked(payload) else {
        return Verdict::Drop(DropReason::Malformed);
    };
    if !verified
        && st.link.caps.checksum.tcp.rx()
        && !super::checksum::verify(&src, &dst, IpProtocol::Tcp, t.into_inner())
    {
        return Verdict::Drop(DropReason::BadChecksum);
    }
    if !dst_ours {
        // A broadcast or multicast destination: TCP is unicast only.
        return Verdict::Drop(DropReason::NotForUs);
    }
    if bad_tcp_source(st, src) {
        return Verdict::Drop(DropReason::Malformed);
    }
    // `payload` is a subslice of `frame`: its offset is the difference of their addresses.
    let start = (payload.as_ptr() as usize).wrapping_sub(frame.as_ptr() as usize);
    Verdict::Tcp(TcpSeg {
        src,
        dst,
        hop_limit,
        start,
        len: payload.len(),
    })
}

/// Whether `src` cannot be a TCP peer: unspecified, multicast or (IPv4) broadcast.
pub(super) fn bad_tcp_source(st: &State, src: IpAddress) -> bool {
    match src {
        IpAddress::Ipv4(a) => {
            a.is_unspecified() || a.is_multicast() || is_v4_broadcast(&st.iface, a)
        }
        IpAddress::Ipv6(a) => a.is_unspecified() || a.is_multicast(),
    }
}

fn check_v4(st: &State, frame: &[u8], ip: &[u8], verified: bool) -> Verdict {
    let Ok(p) = Ipv4Packet::new_checked(ip) else {
        return Verdict::Doomed(DropReason::Malformed);
    };
    let ck = &st.link.caps.checksum;
    // `new_checked` made sure the whole header is there.
    let header = ip.get(..usize::from(p.header_len())).unwrap_or(&[]);
    if ck.ipv4.rx() && !super::checksum::verify_ipv4_header(header) {
        return Verdict::Drop(DropReason::BadChecksum);
    }
    if p.more_frags() || p.frag_offset() != 0 {
        return Verdict::Doomed(DropReason::Unsupported);
    }
    let (src, dst) = (p.src_addr(), p.dst_addr());
    let payload = p.payload();
    // smoltcp hands a DHCP answer (UDP 67 → 68) to its DHCP client whatever its destination.
    let next = p.next_header();
    let dhcp = next == IpProtocol::Udp
        && UdpPacket::new_checked(payload).is_ok_and(|u| u.src_port() == 67 && u.dst_port() == 68);
    let dst_ours = st.iface.has_ip_addr(dst);
    let ours = dst_ours || dst.is_multicast() || is_v4_broadcast(&st.iface, dst) || dhcp;
    if !ours {
        return Verdict::Doomed(DropReason::NotForUs);
    }
    if next == IpProtocol::Tcp {
        return check_tcp(
            st,
            frame,
            IpAddress::Ipv4(src),
            IpAddress::Ipv4(dst),
            dst_ours,
            p.hop_limit(),
            payload,
            verified,
        );
    }
    let verdict = check_transport(
        ck,
        verified,
        next,
        IpAddress::Ipv4(src),
        IpAddress::Ipv4(dst),
        payload,
    );
    if verdict == Verdict::Pass && next == IpProtocol::Udp {
        return check_answer(st, IpAddress::Ipv4(src), IpAddress::Ipv4(dst), payload);
    }
    if verdict == Verdict::Pass && next == IpProtocol::Icmp && dst_ours {
        if let Some(req) = super::echo::request(st, frame, &p) {
            return Verdict::Echo(req);
        }
        return too_big(icmp_error::parse_v4(payload)).unwrap_or(verdict);
    }
    verdict
}

/// The verdict on an ICMP error [`icmp_error`] read (`None`: not one it takes).
fn too_big(msg: Option<Result<TooBig, DropReason>>) -> Option<Verdict> {
    Some(match msg? {
        Ok(m) => Verdict::TooBig(m),
        Err(reason) => Verdict::Drop(reason),
    })
}

fn check_v6(st: &State, frame: &[u8], ip: &[u8], verified: bool) -> Verdict {
    let Ok(p) = Ipv6Packet::new_checked(ip) else {
        return Verdict::Doomed(DropReason::Malformed);
    };
    let (mut next, mut payload) = (p.next_header(), p.payload());
    if next == IpProtocol::HopByHop {
        // Skipped as smoltcp skips it (its options are smoltcp's business).
        let Ok(h) = Ipv6ExtHeader::new_checked(payload) else {
            return Verdict::Doomed(DropReason::Malformed);
        };
        next = h.next_header();
        payload = &payload[2 + h.payload().len()..];
    }
    let dst = p.dst_addr();
    let dst_ours = st.iface.has_ip_addr(dst);
    if !(dst_ours || dst.is_multicast() || dst.is_loopback()) {
        return Verdict::Doomed(DropReason::NotForUs);
    }
    if next == IpProtocol::Tcp {
        return check_tcp(
            st,
            frame,
            IpAddress::Ipv6(p.src_addr()),
            IpAddress::Ipv6(dst),
            dst_ours,
            p.hop_limit(),
            payload,
            verified,
        );
    }
    let verdict = check_transport(
        &st.link.caps.checksum,
        verified,
        next,
        IpAddress::Ipv6(p.src_addr()),
        IpAddress::Ipv6(dst),
        payload,
    );
    if matches!(verdict, Verdict::Pass)
        && next == IpProtocol::Icmpv6
        && advertises_multicast_prefix(payload)
    {
        return Verdict::Drop(DropReason::Malformed);
    }
    if verdict == Verdict::Pass && next == IpProtocol::Udp {
        return check_answer(
            st,
            IpAddress::Ipv6(p.src_addr()),
            IpAddress::Ipv6(dst),
            payload,
        );
    }
    if verdict == Verdict::Pass && next == IpProtocol::Icmpv6 && dst_ours {
        return too_big(icmp_error::parse_v6(payload)).unwrap_or(verdict);
    }
    verdict
}

/// The verdict on a UDP datagram `udp` from `src` to `dst` that passed its checks: a DHCP
/// reply from a server the client did not ask drops here (`ip/asked.rs`); one from port 53 or
/// 5353 is [`Verdict::DnsAnswer`]; anything else goes to smoltcp.
fn check_answer(st: &State, src: IpAddress, dst: IpAddress, udp: &[u8]) -> Verdict {
    let Ok(u) = UdpPacket::new_checked(udp) else {
        return Verdict::Pass;
    };
    match (u.src_port(), u.dst_port()) {
        (67, 68) if !super::asked::dhcp_reply_expected(st, u.payload()) => {
            Verdict::Drop(DropReason::UnexpectedAnswer)
        }
        (53 | 5353, port) => Verdict::DnsAnswer {
            src: IpEndpoint::new(src, u.src_port()),
            dst: IpEndpoint::new(dst, port),
        },
        _ => Verdict::Pass,
    }
}

/// Whether `icmp` is a router advertisement whose prefix option (the one smoltcp keeps) is a
/// multicast prefix. smoltcp 0.14's SLAAC would form an address from it (prefix plus
/// interface identifier: a multicast address) and then panic in `Interface::update_ip_addrs`
/// ("IP address … is not unicast"), so ingress drops such an advertisement whole, counted as
/// `Malformed` (RFC 4862 §5.5.3 has hosts ignore prefixes they cannot use). Found by the
/// `stack_ingress` fuzz target (tests/fuzz/).
fn advertises_multicast_prefix(icmp: &[u8]) -> bool {
    let Ok(packet) = Icmpv6Packet::new_checked(icmp) else {
        return false;
    };
    if packet.msg_type() != Icmpv6Message::RouterAdvert {
        return false;
    }
    matches!(
        NdiscRepr::parse(&packet),
        Ok(NdiscRepr::RouterAdvert { prefix_info: Some(p), .. }) if p.prefix.is_multicast()
    )
}

/// The transport header smoltcp will parse, and its checksum where ingress verifies it (not
/// when the driver marked the frame `verified`).
fn check_transport(
    ck: &ChecksumCapabilities,
    verified: bool,
    proto: IpProtocol,
    src: IpAddress,
    dst: IpAddress,
    payload: &[u8],
) -> Verdict {
    let good = match proto {
        IpProtocol::Udp => match UdpPacket::new_checked(payload) {
            Ok(u) => verified || !ck.udp.rx() || u.verify_checksum(&src, &dst),
            Err(_) => return Verdict::Doomed(DropReason::Malformed),
        },
        // ICMPv4 over IPv4, ICMPv6 over IPv6; the other way round, smoltcp treats them as
        // unknown protocols.
        IpProtocol::Icmp if src.version() == IpVersion::Ipv4 => {
            match Icmpv4Packet::new_checked(payload) {
                Ok(i) => verified || !ck.icmpv4.rx() || i.verify_checksum(),
                Err(_) => return Verdict::Doomed(DropReason::Malformed),
            }
        }
        IpProtocol::Icmpv6 => match (Icmpv6Packet::new_checked(payload), src, dst) {
            (Ok(i), IpAddress::Ipv6(src), IpAddress::Ipv6(dst)) => {
                verified || !ck.icmpv6.rx() || i.verify_checksum(&src, &dst)
            }
            (Err(_), IpAddress::Ipv6(_), _) => return Verdict::Doomed(DropReason::Malformed),
            _ => true,
        },
        _ => true,
    };
    if good {
        Verdict::Pass
    } else {
        Verdict::Drop(DropReason::BadChecksum)
    }
}
