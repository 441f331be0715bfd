//! IPv6 frames for [`craft`](crate::craft)'s [`WireTarget`](crate::craft::WireTarget): a stack
//! given [`STACK6`]'s address ([`static_v6`]) and a test that plays [`PEER6`] and routers, with
//! TCP segments ([`tcp6_frame`], [`tcp6_in`]), neighbour discovery ([`solicits`],
//! [`neighbor_advert`]) and ICMPv6 "packet too big" ([`packet_too_big`]) written and read byte
//! by byte.

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    IpProtocol, Ipv6Address, Ipv6Cidr, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr,
    TcpPacket, TcpRepr,
};
use zcnet_stack::{Config, StaticV6};

use crate::craft::{tcp_bytes, PEER, STACK};

/// A host on the wire: its MAC and IPv6 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Host6 {
    /// Its MAC.
    pub mac: EthernetAddress,
    /// Its address.
    pub ip: Ipv6Address,
}

/// The stack: fd00::2 at [`STACK`]'s MAC.
pub const STACK6: Host6 = Host6 {
    mac: STACK.mac,
    ip: Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
};

/// The usual peer: fd00::1 at [`PEER`]'s MAC.
pub const PEER6: Host6 = Host6 {
    mac: PEER.mac,
    ip: Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
};

/// Gives the stack [`STACK6`]'s address (fd00::2/64, no gateway): pass it to
/// [`WireTarget::with_config`](crate::craft::WireTarget::with_config).
pub fn static_v6(config: &mut Config) {
    config.ipv6 = Some(StaticV6 {
        address: Ipv6Cidr::new(STACK6.ip, 64),
        gateway: None,
    });
}

/// The Ethernet frame carrying `payload` (an IPv6 payload, checksum included) from `from` to
/// `to`, hop limit `hop_limit`.
fn ipv6_frame(
    from: Host6,
    to: Host6,
    next_header: IpProtocol,
    hop_limit: u8,
    payload: &[u8],
) -> Vec<u8> {
    let ip = Ipv6Repr {
        src_addr: from.ip,
        dst_addr: to.ip,
        next_header,
        payload_len: payload.len(),
        hop_limit,
    };
    let mut f = vec![0u8; 14 + ip.buffer_len() + payload.len()];
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr {
        src_addr: from.mac,
        dst_addr: to.mac,
        ethertype: EthernetProtocol::Ipv6,
    }
    .emit(&mut eth);
    let mut p = Ipv6Packet::new_unchecked(eth.payload_mut());
    ip.emit(&mut p);
    p.payload_mut().copy_from_slice(payload);
    f
}

/// The Ethernet frame carrying `tcp` from `from` to `to` in IPv6 (hop limit 64), checksum
/// computed.
pub fn tcp6_frame(from: Host6, to: Host6, tcp: &TcpRepr<'_>) -> Vec<u8> {
    let segment = tcp_bytes(from.ip.into(), to.ip.into(), tcp);
    ipv6_frame(from, to, IpProtocol::Tcp, 64, &segment)
}

/// The TCP segment in `frame` (an Ethernet frame carrying IPv6), checksum verified (a bad one
/// panics: the stack never sends one), and the IP packet's length; `None` for anything else.
pub fn tcp6_in(frame: &[u8]) -> Option<(TcpRepr<'_>, usize)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv6 {
        return None;
    }
    let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let (src, dst) = (ip.src_addr().into(), ip.dst_addr().into());
    let len = 40 + usize::from(ip.payload_len());
    let t = TcpPacket::new_checked(&eth.payload()[40..len]).ok()?;
    assert!(t.verify_checksum(&src, &dst), "TCP checksum");
    let tcp = TcpRepr::parse(&t, &src, &dst, &ChecksumCapabilities::default()).ok()?;
    Some((tcp, len))
}

/// Whether `frame` is a neighbour solicitation for `target`.
pub fn solicits(frame: &[u8], target: Ipv6Address) -> bool {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return false;
    };
    let Ok(ip) = Ipv6Packet::new_checked(eth.payload()) else {
        return false;
    };
    if eth.ethertype() != EthernetProtocol::Ipv6 || ip.next_header() != IpProtocol::Icmpv6 {
        return false;
    }
    let Ok(icmp) = Icmpv6Packet::new_checked(ip.payload()) else {
        return false;
    };
    matches!(
        NdiscRepr::parse(&icmp),
        Ok(NdiscRepr::NeighborSolicit { target_addr, .. }) if target_addr == target
    )
}

/// A solicited neighbour advertisement from `from` to `to`: `from`'s address is at its MAC
/// (override set), hop limit 255, checksum computed.
pub fn neighbor_advert(from: Host6, to: Host6) -> Vec<u8> {
    let icmp = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
        target_addr: from.ip,
        lladdr: Some(from.mac.into()),
    });
    let mut m = vec![0u8; icmp.buffer_len()];
    icmp.emit(
        &from.ip,
        &to.ip,
        &mut Icmpv6Packet::new_unchecked(&mut m[..]),
        &ChecksumCapabilities::default(),
    );
    ipv6_frame(from, to, IpProtocol::Icmpv6, 255, &m)
}

/// An ICMPv6 "packet too big" (type 2) from `router` to `to`, naming the MTU `mtu` and quoting
/// `quoted`, the start of the packet the router could not forward (its IPv6 header and at least
/// 8 bytes of what follows); checksum computed.
pub fn packet_too_big(router: Host6, to: Host6, mtu: u32, quoted: &[u8]) -> Vec<u8> {
    let mut m = vec![2, 0, 0, 0];
    m.extend_from_slice(&mtu.to_be_bytes());
    m.extend_from_slice(quoted);
    Icmpv6Packet::new_unchecked(&mut m[..]).fill_checksum(&router.ip, &to.ip);
    ipv6_frame(router, to, IpProtocol::Icmpv6, 64, &m)
}
