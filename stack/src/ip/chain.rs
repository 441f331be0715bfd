//! A received packet over several pool slots, checked once before TCP takes it.
//!
//! A driver whose `Capabilities::rx_chains` is set hands up packets larger than one slot as an
//! [`RxChain`] (a large receive, a TAP read of a GSO packet of up to 64 KiB): the head frame
//! starts with the link-layer header and holds the IP and TCP headers and the first payload
//! bytes, the tail frames hold the rest, and the IP header's length fields describe the whole
//! packet. Such a packet can only be a TCP segment for one of the stack's connections (it is
//! what devices merge); anything else over several slots is dropped here, counted.
//!
//! [`check_chain`] reads the headers from the head frame only and trusts nothing: the IP
//! header's lengths must fit in what the chain holds (trailing bytes past the IP packet are
//! ignored), the IPv4 header checksum is verified (where the driver does not), and the TCP
//! checksum is summed over every slot, in place, unless the head frame carries the driver's
//! [checksum verified](zcnet_buffer::RxFrame::checksum_verified) mark. The headers must lie in
//! the head frame: a chain whose head is too short for them is malformed.
//!
//! | what | counted as |
//! |---|---|
//! | a head too short for its Ethernet, IP or TCP header; an IP version that disagrees with the Ethernet type; IP lengths beyond the chain or below the header; a TCP data offset under 20 bytes or past the TCP length; a TCP segment from an unspecified, broadcast or multicast source | [`Malformed`](DropReason::Malformed) |
//! | an IPv4 header or TCP checksum wrong | [`BadChecksum`](DropReason::BadChecksum) |
//! | an Ethernet destination that is not ours (nor broadcast, multicast), an IP destination that is none of the stack's unicast addresses | [`NotForUs`](DropReason::NotForUs) |
//! | a chain that is not TCP: another Ethernet type, IP protocol, an IPv6 extension header, an IPv4 fragment | [`Unsupported`](DropReason::Unsupported) |

use smoltcp::phy::Medium;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, HardwareAddress, IpAddress, IpProtocol, Ipv4Packet,
    Ipv6Packet, ETHERNET_HEADER_LEN as ETH_LEN, IPV4_HEADER_LEN, IPV6_HEADER_LEN,
};
use zcnet_buffer::RxChain;

use super::check::{bad_tcp_source, TcpSeg};
use crate::stack::State;
use crate::stats::DropReason;

/// The smallest TCP header.
const TCP_HEADER_LEN: usize = 20;

/// Checks the chain `chain` (see the [module docs](self)): where its TCP segment lies (offsets
/// from the head frame's first byte; [`TcpSeg::len`] is the TCP header and payload the IP
/// header announces), or why it is dropped.
pub(crate) fn check_chain(st: &State, chain: &RxChain) -> Result<TcpSeg, DropReason> {
    let frame = chain.head().ok_or(DropReason::Malformed)?;
    let verified = frame.checksum_verified();
    let head: &[u8] = frame;
    let (l2, version) = match st.link.caps.medium {
        Medium::Ethernet => {
            let eth = EthernetFrame::new_checked(head).map_err(|_| DropReason::Malformed)?;
            let d = eth.dst_addr();
            if !(d.is_broadcast()
                || d.is_multicast()
                || st.iface.hardware_addr() == HardwareAddress::Ethernet(d))
            {
                return Err(DropReason::NotForUs);
            }
            match eth.ethertype() {
                EthernetProtocol::Ipv4 => (ETH_LEN, 4),
                EthernetProtocol::Ipv6 => (ETH_LEN, 6),
                _ => return Err(DropReason::Unsupported),
            }
        }
        Medium::Ip => (
            0,
            head.first().map(|b| b >> 4).ok_or(DropReason::Malformed)?,
        ),
        #[allow(unreachable_patterns)]
        _ => return Err(DropReason::Unsupported),
    };
    let ip = &head[l2..];
    // Bytes of IP packet the chain holds: the head's and every tail's.
    let room = chain.len() - l2;
    if ip.first().map(|b| b >> 4) != Some(version) {
        return Err(DropReason::Malformed);
    }
    let ck = &st.link.caps.checksum;
    let (src, dst, hop_limit, ip_header, ip_len) = if version == 4 {
        if ip.len() < IPV4_HEADER_LEN {
            return Err(DropReason::Malformed);
        }
        let p = Ipv4Packet::new_unchecked(ip);
        let header = usize::from(p.header_len());
        let total = usize::from(p.total_len());
        if header < IPV4_HEADER_LEN || header > ip.len() || total < header || total > room {
            return Err(DropReason::Malformed);
        }
        if ck.ipv4.rx() && !super::checksum::verify_ipv4_header(&ip[..header]) {
            return Err(DropReason::BadChecksum);
        }
        if p.more_frags() || p.frag_offset() != 0 || p.next_header() != IpProtocol::Tcp {
            return Err(DropReason::Unsupported);
        }
        let (s, d) = (IpAddress::Ipv4(p.src_addr()), IpAddress::Ipv4(p.dst_addr()));
        (s, d, p.hop_limit(), header, total)
    } else {
        if ip.len() < IPV6_HEADER_LEN {
            return Err(DropReason::Malformed);
        }
        let p = Ipv6Packet::new_unchecked(ip);
        let total = IPV6_HEADER_LEN + usize::from(p.payload_len());
        if total > room {
            return Err(DropReason::Malformed);
        }
        if p.next_header() != IpProtocol::Tcp {
            return Err(DropReason::Unsupported);
        }
        let (s, d) = (IpAddress::Ipv6(p.src_addr()), IpAddress::Ipv6(p.dst_addr()));
        (s, d, p.hop_limit(), IPV6_HEADER_LEN, total)
    };
    if !st.iface.has_ip_addr(dst) {
        return Err(DropReason::NotForUs);
    }
    if bad_tcp_source(st, src) {
        return Err(DropReason::Malformed);
    }
    let start = l2 + ip_header;
    let len = ip_len - ip_header;
    let tcp = &head[start..];
    if len < TCP_HEADER_LEN || tcp.len() < TCP_HEADER_LEN {
        return Err(DropReason::Malformed);
    }
    let data_offset = usize::from(tcp[12] >> 4) * 4;
    if data_offset < TCP_HEADER_LEN || data_offset > tcp.len() || data_offset > len {
        return Err(DropReason::Malformed);
    }
    if !verified && ck.tcp.rx() {
        let tails = chain.frames().skip(1).map(|f| &f[..]);
        let parts = core::iter::once(tcp).chain(tails);
        if !super::checksum::verify_parts(&src, &dst, IpProtocol::Tcp, len, parts) {
            return Err(DropReason::BadChecksum);
        }
    }
    Ok(TcpSeg {
        src,
        dst,
        hop_limit,
        start,
        len,
    })
}
