//! Frames for the fuzz targets and their seed corpus: Ethernet, IPv4 / IPv6, TCP, UDP, ICMP,
//! ARP, NDP and DHCP, written byte by byte, and [`fix_checksums`], which makes a fuzzed frame's
//! checksums right so it gets past the stack's checks into the code behind them.

/// The simulated NIC's MAC (`zcnet_buffer::sim::SimNic`): the stack under test.
pub const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// The scripted peer's MAC.
pub const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
/// The stack's IPv6 link-local address (EUI-64 of [`OUR_MAC`]).
pub const OUR_V6: [u8; 16] = [
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 0x01,
];
/// The peer's IPv6 link-local address.
pub const PEER_V6: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02];
/// The address the DHCP server in the corpus offers the stack.
pub const OUR_V4: [u8; 4] = [10, 0, 0, 2];
/// The peer's IPv4 address (also the DHCP server and router).
pub const PEER_V4: [u8; 4] = [10, 0, 0, 1];
/// Ethernet broadcast.
pub const BROADCAST: [u8; 6] = [0xff; 6];

/// EtherType IPv4.
pub const ETH_IPV4: u16 = 0x0800;
/// EtherType ARP.
pub const ETH_ARP: u16 = 0x0806;
/// EtherType IPv6.
pub const ETH_IPV6: u16 = 0x86dd;
/// IP protocol ICMP.
pub const P_ICMP: u8 = 1;
/// IP protocol TCP.
pub const P_TCP: u8 = 6;
/// IP protocol UDP.
pub const P_UDP: u8 = 17;
/// IP protocol ICMPv6.
pub const P_ICMPV6: u8 = 58;

/// TCP flags.
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// An Ethernet frame.
pub fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An IPv4 packet (20-byte header, TTL 64, header checksum set).
pub fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = checksum(&p[..20], 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// An IPv6 packet (no extension headers).
pub fn ipv6(src: [u8; 16], dst: [u8; 16], next: u8, hop_limit: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    p.push(next);
    p.push(hop_limit);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(payload);
    p
}

/// A TCP segment, checksum left zero (see [`fix_checksums`]). `options` is padded to a
/// multiple of four bytes (at most 40).
#[allow(clippy::too_many_arguments)]
pub fn tcp(
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let opts = &options[..options.len().min(40)];
    let pad = (4 - opts.len() % 4) % 4;
    let hlen = 20 + opts.len() + pad;
    let mut s = Vec::with_capacity(hlen + payload.len());
    s.extend_from_slice(&src_port.to_be_bytes());
    s.extend_from_slice(&dst_port.to_be_bytes());
    s.extend_from_slice(&seq.to_be_bytes());
    s.extend_from_slice(&ack.to_be_bytes());
    s.push(((hlen / 4) as u8) << 4);
    s.push(flags);
    s.extend_from_slice(&window.to_be_bytes());
    s.extend_from_slice(&[0, 0, 0, 0]);
    s.extend_from_slice(opts);
    s.extend(std::iter::repeat_n(0u8, pad));
    s.extend_from_slice(payload);
    s
}

/// A UDP datagram, checksum left zero (see [`fix_checksums`]).
pub fn udp(src_port: u16, dst_port: u16, payload: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(8 + payload.len());
    d.extend_from_slice(&src_port.to_be_bytes());
    d.extend_from_slice(&dst_port.to_be_bytes());
    d.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    d.extend_from_slice(&[0, 0]);
    d.extend_from_slice(payload);
    d
}

/// A TCP segment from the peer to the stack over IPv6 link-local, checksums right.
#[allow(clippy::too_many_arguments)]
pub fn tcp6_frame(
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let seg = tcp(
        src_port, dst_port, seq, ack, flags, window, options, payload,
    );
    peer6_frame(P_TCP, &seg)
}

/// An IPv6 packet of protocol `next` from the peer to the stack over link-local (hop limit
/// 64), in its Ethernet frame, checksums right.
pub fn peer6_frame(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = eth(
        OUR_MAC,
        PEER_MAC,
        ETH_IPV6,
        &ipv6(PEER_V6, OUR_V6, next, 64, payload),
    );
    fix_checksums(&mut f);
    f
}

/// A TCP segment from the peer to the stack over IPv4, checksums right.
#[allow(clippy::too_many_arguments)]
pub fn tcp4_frame(
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let seg = tcp(
        src_port, dst_port, seq, ack, flags, window, options, payload,
    );
    let mut f = eth(
        OUR_MAC,
        PEER_MAC,
        ETH_IPV4,
        &ipv4(PEER_V4, OUR_V4, P_TCP, &seg),
    );
    fix_checksums(&mut f);
    f
}

/// An ARP packet (Ethernet / IPv4) in an Ethernet frame: `op` 1 is a request, 2 a reply.
pub fn arp(
    op: u16,
    sender_mac: [u8; 6],
    sender_ip: [u8; 4],
    target_mac: [u8; 6],
    target_ip: [u8; 4],
) -> Vec<u8> {
    let mut a = vec![0, 1, 0x08, 0, 6, 4];
    a.extend_from_slice(&op.to_be_bytes());
    a.extend_from_slice(&sender_mac);
    a.extend_from_slice(&sender_ip);
    a.extend_from_slice(&target_mac);
    a.extend_from_slice(&target_ip);
    let dst = if op == 1 { BROADCAST } else { target_mac };
    eth(dst, sender_mac, ETH_ARP, &a)
}

/// An ICMPv4 echo request from the peer to `dst`, checksums right.
pub fn ping4(dst: [u8; 4], id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let mut icmp = vec![8, 0, 0, 0];
    icmp.extend_from_slice(&id.to_be_bytes());
    icmp.extend_from_slice(&seq.to_be_bytes());
    icmp.extend_from_slice(data);
    let mut f = eth(
        OUR_MAC,
        PEER_MAC,
        ETH_IPV4,
        &ipv4(PEER_V4, dst, P_ICMP, &icmp),
    );
    fix_checksums(&mut f);
    f
}

/// An ICMPv6 echo request from the peer to the stack's link-local address, checksums right.
pub fn ping6(id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let mut icmp = vec![128, 0, 0, 0];
    icmp.extend_from_slice(&id.to_be_bytes());
    icmp.extend_from_slice(&seq.to_be_bytes());
    icmp.extend_from_slice(data);
    let mut f = eth(
        OUR_MAC,
        PEER_MAC,
        ETH_IPV6,
        &ipv6(PEER_V6, OUR_V6, P_ICMPV6, 64, &icmp),
    );
    fix_checksums(&mut f);
    f
}

/// The solicited-node multicast address of `ip` and its MAC.
pub fn solicited_node(ip: [u8; 16]) -> ([u8; 16], [u8; 6]) {
    let a = [
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, ip[13], ip[14], ip[15],
    ];
    (a, [0x33, 0x33, 0xff, ip[13], ip[14], ip[15]])
}

/// An NDP neighbour solicitation from `src` (`src_mac`, given as its source link-layer
/// option) for `target`, to `target`'s solicited-node group; hop limit 255, checksums right.
pub fn ndp_ns(src_mac: [u8; 6], src: [u8; 16], target: [u8; 16]) -> Vec<u8> {
    let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&target);
    icmp.extend_from_slice(&[1, 1]);
    icmp.extend_from_slice(&src_mac);
    let (group, group_mac) = solicited_node(target);
    let mut f = eth(
        group_mac,
        src_mac,
        ETH_IPV6,
        &ipv6(src, group, P_ICMPV6, 255, &icmp),
    );
    fix_checksums(&mut f);
    f
}

/// An NDP neighbour advertisement from `src_mac` / `target` (solicited and override flags,
/// target link-layer option) to `dst_mac` / `dst`; hop limit 255, checksums right.
pub fn ndp_na(src_mac: [u8; 6], target: [u8; 16], dst_mac: [u8; 6], dst: [u8; 16]) -> Vec<u8> {
    let mut icmp = vec![136, 0, 0, 0, 0x60, 0, 0, 0];
    icmp.extend_from_slice(&target);
    icmp.extend_from_slice(&[2, 1]);
    icmp.extend_from_slice(&src_mac);
    let mut f = eth(
        dst_mac,
        src_mac,
        ETH_IPV6,
        &ipv6(target, dst, P_ICMPV6, 255, &icmp),
    );
    fix_checksums(&mut f);
    f
}

/// An NDP router advertisement from the peer to all nodes: router lifetime 1800 s, a
/// prefix-information option for `prefix`/64 (on-link, autonomous, valid 3600 s, preferred
/// 1800 s), and the peer's link-layer address. Hop limit 255, checksums right.
pub fn ndp_ra(prefix: [u8; 8]) -> Vec<u8> {
    let mut icmp = vec![134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&[1, 1]);
    icmp.extend_from_slice(&PEER_MAC);
    icmp.extend_from_slice(&[3, 4, 64, 0xc0]);
    icmp.extend_from_slice(&3600u32.to_be_bytes());
    icmp.extend_from_slice(&1800u32.to_be_bytes());
    icmp.extend_from_slice(&[0, 0, 0, 0]);
    icmp.extend_from_slice(&prefix);
    icmp.extend_from_slice(&[0; 8]);
    let all_nodes = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let mut f = eth(
        [0x33, 0x33, 0, 0, 0, 1],
        PEER_MAC,
        ETH_IPV6,
        &ipv6(PEER_V6, all_nodes, P_ICMPV6, 255, &icmp),
    );
    fix_checksums(&mut f);
    f
}

/// DHCP message types.
pub mod dhcp {
    /// DHCPOFFER.
    pub const OFFER: u8 = 2;
    /// DHCPACK.
    pub const ACK: u8 = 5;
    /// DHCPNAK.
    pub const NAK: u8 = 6;
}

/// A DHCP reply (`kind`: [`dhcp::OFFER`], [`dhcp::ACK`], …) from the peer (server and
/// router at [`PEER_V4`]) to the stack for transaction `xid`, offering [`OUR_V4`]/24 for
/// `lease` seconds, with `extra` options appended before the end option. Broadcast, checksums
/// right.
pub fn dhcp_reply(kind: u8, xid: u32, lease: u32, extra: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 236];
    b[0] = 2; // BOOTREPLY
    b[1] = 1;
    b[2] = 6;
    b[4..8].copy_from_slice(&xid.to_be_bytes());
    b[16..20].copy_from_slice(&OUR_V4);
    b[20..24].copy_from_slice(&PEER_V4);
    b[28..34].copy_from_slice(&OUR_MAC);
    b.extend_from_slice(&[99, 130, 83, 99]);
    b.extend_from_slice(&[53, 1, kind]);
    b.extend_from_slice(&[54, 4]);
    b.extend_from_slice(&PEER_V4);
    b.extend_from_slice(&[1, 4, 255, 255, 255, 0]);
    b.extend_from_slice(&[3, 4]);
    b.extend_from_slice(&PEER_V4);
    b.extend_from_slice(&[6, 4]);
    b.extend_from_slice(&PEER_V4);
    b.extend_from_slice(&[51, 4]);
    b.extend_from_slice(&lease.to_be_bytes());
    b.extend_from_slice(extra);
    b.push(255);
    let mut f = eth(
        BROADCAST,
        PEER_MAC,
        ETH_IPV4,
        &ipv4(PEER_V4, [255; 4], P_UDP, &udp(67, 68, &b)),
    );
    fix_checksums(&mut f);
    f
}

/// The transaction id of a DHCP client message (DISCOVER or REQUEST) in `frame`, with its
/// message type.
pub fn dhcp_client_xid(frame: &[u8]) -> Option<(u32, u8)> {
    if frame.len() < 14 + 20 + 8 + 240 || u16::from_be_bytes([frame[12], frame[13]]) != ETH_IPV4 {
        return None;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[9] != P_UDP || ip.len() < ihl + 8 + 240 {
        return None;
    }
    let u = &ip[ihl..];
    if u16::from_be_bytes([u[2], u[3]]) != 67 {
        return None;
    }
    let b = &u[8..];
    let xid = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    let mut o = &b[240..];
    while o.len() >= 2 {
        match o[0] {
            0 => o = &o[1..],
            255 => break,
            53 if o[1] == 1 && o.len() >= 3 => return Some((xid, o[2])),
            _ => {
                let n = 2 + usize::from(o[1]);
                o = o.get(n..)?;
            }
        }
    }
    None
}

/// The Internet checksum of `data`, starting from the partial sum `sum`.
pub fn checksum(data: &[u8], mut sum: u32) -> u16 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        sum += u32::from(*b) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn pseudo_sum(src: &[u8], dst: &[u8], proto: u8, len: usize) -> u32 {
    let mut s = 0u32;
    for c in src.chunks(2).chain(dst.chunks(2)) {
        s += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    s + u32::from(proto) + (len as u32 & 0xffff) + (len as u32 >> 16)
}

/// Sets the transport checksum of `l4` (protocol `proto`) over the pseudo-header of `src`,
/// `dst`; nothing for other protocols or a segment too short to have the field.
fn fix_l4(l4: &mut [u8], proto: u8, src: &[u8], dst: &[u8], v6: bool) {
    let at = match proto {
        P_TCP => 16,
        P_UDP => 6,
        P_ICMPV6 => 2,
        P_ICMP if !v6 => 2,
        _ => return,
    };
    if l4.len() < at + 2 {
        return;
    }
    l4[at..at + 2].copy_from_slice(&[0, 0]);
    let sum = if proto == P_ICMP {
        0
    } else {
        pseudo_sum(src, dst, proto, l4.len())
    };
    let mut c = checksum(l4, sum);
    if proto == P_UDP && c == 0 {
        c = 0xffff;
    }
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Makes the IPv4 header checksum and the TCP / UDP / ICMP / ICMPv6 checksum of an Ethernet
/// frame right, as far as its lengths allow (a frame whose headers do not parse is left as it
/// is). Lengths themselves are not touched: a fuzzed length stays fuzzed.
pub fn fix_checksums(frame: &mut [u8]) {
    if frame.len() < 14 {
        return;
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let ip = &mut frame[14..];
    match ethertype {
        ETH_IPV4 => {
            if ip.len() < 20 || ip[0] >> 4 != 4 {
                return;
            }
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            if ihl < 20 || ip.len() < ihl {
                return;
            }
            ip[10..12].copy_from_slice(&[0, 0]);
            let c = checksum(&ip[..ihl], 0);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            let frag = u16::from_be_bytes([ip[6], ip[7]]);
            if total < ihl || total > ip.len() || frag & 0x3fff != 0 {
                return;
            }
            let proto = ip[9];
            let (src, dst) = (
                [ip[12], ip[13], ip[14], ip[15]],
                [ip[16], ip[17], ip[18], ip[19]],
            );
            fix_l4(&mut ip[ihl..total], proto, &src, &dst, false);
        }
        ETH_IPV6 => {
            if ip.len() < 40 || ip[0] >> 4 != 6 {
                return;
            }
            let len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            if 40 + len > ip.len() {
                return;
            }
            let proto = ip[6];
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src.copy_from_slice(&ip[8..24]);
            dst.copy_from_slice(&ip[24..40]);
            fix_l4(&mut ip[40..40 + len], proto, &src, &dst, true);
        }
        _ => {}
    }
}

/// A TCP segment in a frame the stack sent, as the scripted peer reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    /// Source port (the stack's).
    pub src_port: u16,
    /// Destination port (the peer's).
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Flags.
    pub flags: u8,
    /// Payload length.
    pub len: usize,
}

/// The TCP segment in `frame` if it is one (IPv4 or IPv6), with its destination address.
pub fn parse_tcp(frame: &[u8]) -> Option<(Seg, Vec<u8>)> {
    let (proto, dst, l4) = l4_of(frame)?;
    if proto != P_TCP || l4.len() < 20 {
        return None;
    }
    let hlen = usize::from(l4[12] >> 4) * 4;
    Some((
        Seg {
            src_port: u16::from_be_bytes([l4[0], l4[1]]),
            dst_port: u16::from_be_bytes([l4[2], l4[3]]),
            seq: u32::from_be_bytes([l4[4], l4[5], l4[6], l4[7]]),
            ack: u32::from_be_bytes([l4[8], l4[9], l4[10], l4[11]]),
            flags: l4[13],
            len: l4.len().saturating_sub(hlen),
        },
        dst,
    ))
}

/// The transport protocol, destination address and transport bytes of an IPv4 / IPv6 frame.
pub fn l4_of(frame: &[u8]) -> Option<(u8, Vec<u8>, &[u8])> {
    if frame.len() < 14 {
        return None;
    }
    let ip = &frame[14..];
    match u16::from_be_bytes([frame[12], frame[13]]) {
        ETH_IPV4 if ip.len() >= 20 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]])).min(ip.len());
            Some((ip[9], ip[16..20].to_vec(), ip.get(ihl..total)?))
        }
        ETH_IPV6 if ip.len() >= 40 => {
            let len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            Some((ip[6], ip[24..40].to_vec(), ip.get(40..40 + len)?))
        }
        _ => None,
    }
}

/// One line about a frame, of which `head` holds the first bytes (`len` in all): destination
/// MAC, EtherType, length, and for IP the protocol, destination and the first bytes of the
/// transport header (for failure messages).
pub fn summary(head: &[u8], len: usize) -> String {
    if head.len() < 14 {
        return format!("runt {head:02x?}");
    }
    let ty = u16::from_be_bytes([head[12], head[13]]);
    let ip = &head[14..];
    let (proto, dst, l4) = match ty {
        ETH_IPV4 if ip.len() >= 20 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            (ip[9], &ip[16..20], ip.get(ihl..).unwrap_or(&[]))
        }
        ETH_IPV6 if ip.len() >= 40 => (ip[6], &ip[24..40], &ip[40..]),
        _ => return format!("to {:02x?} type {ty:#06x} len {len}", &head[..6]),
    };
    format!(
        "to {:02x?} type {ty:#06x} len {len} proto {proto} dst {dst:02x?} l4 {:02x?}",
        &head[..6],
        &l4[..l4.len().min(8)]
    )
}
