//! Path MTU discovery for zcnet's TCP: ICMPv4 "fragmentation needed" (RFC 1191) and ICMPv6
//! "packet too big" (RFC 8201) about a segment a connection sent.
//!
//! ```text
//!  ingress ─► ip::check (ICMP checksum, a destination of ours) ─► parse_v4 / parse_v6: an
//!    ICMPv4 type 3 code 4 or ICMPv6 type 2 quoting a TCP segment ─► Verdict::TooBig
//!    ─► handle: the connection of the quoted four-tuple (table.rs), not a listener
//!       ─► its quoted sequence number in SND.UNA..SND.MAX (Tcb::in_flight, RFC 5927 §4.1)
//!       ─► Tcb::path_mtu_reduced: segments cut to the MTU, what is in flight sent again now
//!    everything else: ignored and counted
//! ```
//!
//! zcnet's TCP sends every segment with Don't Fragment (IPv4; IPv6 routers never fragment), so
//! a router whose next link is too small drops it and says so in one of these messages. They
//! are consumed here: smoltcp (its raw and ICMP sockets) never sees an ICMP error that quotes a
//! TCP segment of this kind, as it never sees the TCP segments themselves. Other ICMP errors
//! (port unreachable, …) and these messages about other protocols still go to smoltcp.
//!
//! | what arrives | what happens | counted in [`StackStats`](crate::StackStats) |
//! |---|---|---|
//! | about a segment in flight on a connection, an MTU below the one it uses | segments cut to the MTU (after the floor), what is in flight sent again | `path_mtu_reductions` |
//! | about a segment in flight, an MTU no lower (a later message of the same burst) | nothing | `path_mtu_unchanged` |
//! | no connection of the quoted four-tuple (a listener's port, an unknown tuple), or a quoted sequence number outside SND.UNA..SND.MAX | nothing (a forged or stale message) | [`DropReason::IcmpUnmatched`] |
//! | a quote too short for the TCP ports and sequence number | nothing | [`DropReason::Malformed`] |
//!
//! # The MTU a message names
//!
//! * **IPv4**: the next-hop MTU field. A zero field (routers older than RFC 1191) means: the
//!   largest plateau of RFC 1191 §7's table below the quoted datagram's total length.
//!   Raised to [`MIN_PATH_MTU_V4`], 552 bytes, as Linux's `min_pmtu` does: RFC 791's minimum
//!   of 68 would let a forged message (one that guessed a sequence number in flight) cut
//!   segments to 28 bytes of payload. A path that really takes less than 552 bytes stays a
//!   black hole for full-sized segments (the stack does not fragment).
//! * **IPv6**: the MTU field, raised to [`MIN_PATH_MTU_V6`], 1280 bytes, the least MTU every
//!   IPv6 link has (RFC 8200 §5; RFC 8201 §4 has a node ignore anything less).
//!
//! A message that names an MTU at or above the link's never raises anything: the estimate
//! only goes up by ageing ([`PATH_MTU_AGE`](crate::tcp::PATH_MTU_AGE) after it was last
//! lowered, RFC 1191 §6.3). The estimate is the connection's own: there is no cache per
//! destination, so a new connection to the same host learns the path again.

use smoltcp::time::Instant;
use smoltcp::wire::{
    IpAddress, IpEndpoint, IpProtocol, IpRepr, Ipv4Address, Ipv6Address, TcpRepr, TcpSeqNumber,
};

use crate::stack::State;
use crate::stats::{Counters, DropReason};

/// The least IPv4 path MTU a "fragmentation needed" message can set, in bytes (Linux's
/// default `min_pmtu`): a message naming less sets this.
pub const MIN_PATH_MTU_V4: usize = 552;

/// The least IPv6 path MTU a "packet too big" message can set, in bytes: IPv6's minimum link
/// MTU (RFC 8200 §5).
pub const MIN_PATH_MTU_V6: usize = 1280;

/// RFC 1191 §7's plateau table: the MTUs of common links, largest first, for a message that
/// names no MTU.
const PLATEAUS: [usize; 11] = [
    65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68,
];

/// ICMPv4 destination unreachable, and its code "fragmentation needed and DF set".
const V4_UNREACHABLE: u8 = 3;
const V4_FRAG_NEEDED: u8 = 4;
/// ICMPv6 packet too big.
const V6_TOO_BIG: u8 = 2;

/// An ICMP "too big" message about a TCP segment, as read from the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TooBig {
    /// The quoted segment's source: our end of the connection.
    pub(crate) local: IpEndpoint,
    /// The quoted segment's destination: the peer.
    pub(crate) remote: IpEndpoint,
    /// The quoted segment's sequence number.
    pub(crate) seq: TcpSeqNumber,
    /// The path MTU the message gives, floor applied.
    pub(crate) mtu: usize,
}

/// The largest plateau below `len`, the total length of the datagram a router could not
/// forward (RFC 1191 §7); the smallest plateau for lengths at or below it.
fn plateau_below(len: usize) -> usize {
    PLATEAUS
        .iter()
        .copied()
        .find(|&p| p < len)
        .unwrap_or(PLATEAUS[PLATEAUS.len() - 1])
}

/// The ports and sequence number of a quoted TCP header: its first 8 bytes.
fn quoted_tcp(tcp: &[u8]) -> Option<(u16, u16, TcpSeqNumber)> {
    let b = tcp.get(..8)?;
    let src = u16::from_be_bytes([b[0], b[1]]);
    let dst = u16::from_be_bytes([b[2], b[3]]);
    let seq = i32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    Some((src, dst, TcpSeqNumber(seq)))
}

/// Reads the ICMPv4 message `icmp` (checksum verified): `None` unless it is a "fragmentation
/// needed" quoting the start of an unfragmented IPv4 datagram carrying TCP (smoltcp then gets
/// it, as before); `Err` when such a quote is cut too short for the TCP ports and sequence
/// number.
pub(crate) fn parse_v4(icmp: &[u8]) -> Option<Result<TooBig, DropReason>> {
    let (&[ty, code], rest) = icmp.split_first_chunk::<2>()?;
    if ty != V4_UNREACHABLE || code != V4_FRAG_NEEDED {
        return None;
    }
    // Checksum (2), unused (2), next-hop MTU (2), then the quote.
    let next_hop_mtu = usize::from(u16::from_be_bytes([*rest.get(4)?, *rest.get(5)?]));
    let ip = rest.get(6..)?;
    let header = ip.get(..20)?;
    let ihl = usize::from(header[0] & 0x0f) * 4;
    let fragment = u16::from_be_bytes([header[6], header[7]]) & 0x1fff;
    if header[0] >> 4 != 4 || ihl < 20 || header[9] != u8::from(IpProtocol::Tcp) || fragment != 0 {
        return None;
    }
    let total_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    let src = Ipv4Address::from_octets([header[12], header[13], header[14], header[15]]);
    let dst = Ipv4Address::from_octets([header[16], header[17], header[18], header[19]]);
    let Some((sport, dport, seq)) = ip.get(ihl..).and_then(quoted_tcp) else {
        return Some(Err(DropReason::Malformed));
    };
    let mtu = if next_hop_mtu == 0 {
        plateau_below(total_len)
    } else {
        next_hop_mtu
    };
    Some(Ok(TooBig {
        local: IpEndpoint::new(IpAddress::Ipv4(src), sport),
        remote: IpEndpoint::new(IpAddress::Ipv4(dst), dport),
        seq,
        mtu: mtu.max(MIN_PATH_MTU_V4),
    }))
}

/// Reads the ICMPv6 message `icmp` (checksum verified): `None` unless it is a "packet too
/// big" quoting an IPv6 packet whose next header is TCP (zcnet's TCP sends no extension
/// headers); `Err` when the quote is cut too short for the TCP ports and sequence number.
pub(crate) fn parse_v6(icmp: &[u8]) -> Option<Result<TooBig, DropReason>> {
    let (&[ty, _code], rest) = icmp.split_first_chunk::<2>()?;
    if ty != V6_TOO_BIG {
        return None;
    }
    // Checksum (2), MTU (4), then the quote.
    let mtu = u32::from_be_bytes(rest.get(2..6)?.try_into().ok()?);
    let ip = rest.get(6..)?;
    let header = ip.get(..40)?;
    if header[0] >> 4 != 6 || header[6] != u8::from(IpProtocol::Tcp) {
        return None;
    }
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&header[at..at + 16]);
        Ipv6Address::from_octets(a)
    };
    let Some((sport, dport, seq)) = quoted_tcp(&ip[40..]) else {
        return Some(Err(DropReason::Malformed));
    };
    let mtu = usize::try_from(mtu).unwrap_or(usize::MAX);
    Some(Ok(TooBig {
        local: IpEndpoint::new(IpAddress::Ipv6(addr(8)), sport),
        remote: IpEndpoint::new(IpAddress::Ipv6(addr(24)), dport),
        seq,
        mtu: mtu.max(MIN_PATH_MTU_V6),
    }))
}

/// Acts on `msg` (see the [module docs](self)): lowers the path MTU of the connection whose
/// segment it quotes, if that segment is in flight; counts what it did.
pub(crate) fn handle(st: &mut State, msg: TooBig, now: Instant, counters: &Counters) {
    // The quoted segment went from `local` to `remote`: look the connection up as for a
    // segment coming back. An ACK is never a listener's (`Tcb::accepts`).
    let ip = IpRepr::new(msg.remote.addr, msg.local.addr, IpProtocol::Tcp, 0, 64);
    let repr = TcpRepr {
        src_port: msg.remote.port,
        dst_port: msg.local.port,
        ack_number: Some(msg.seq),
        ..super::header::BLANK
    };
    let link_mtu = st.link.caps.ip_mtu();
    let Some(i) = st.tcp.find(&ip, &repr) else {
        counters.drop(DropReason::IcmpUnmatched);
        return;
    };
    let Some(e) = st.tcp.at(i) else {
        counters.drop(DropReason::IcmpUnmatched);
        return;
    };
    if !e.tcb.in_flight(msg.seq) {
        counters.drop(DropReason::IcmpUnmatched);
        return;
    }
    if e.tcb.path_mtu_reduced(msg.mtu, link_mtu, now) {
        counters.path_mtu_reduction();
    } else {
        counters.path_mtu_unchanged();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ICMPv4 "fragmentation needed" naming `mtu`, quoting an IPv4 header of `total_len`
    /// (10.0.0.2 → 10.0.0.1, TCP) and `tcp` bytes of the TCP header.
    fn frag_needed(mtu: u16, total_len: u16, tcp: &[u8]) -> std::vec::Vec<u8> {
        let mut m = std::vec![3, 4, 0, 0, 0, 0];
        m.extend_from_slice(&mtu.to_be_bytes());
        m.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0]);
        m[10..12].copy_from_slice(&total_len.to_be_bytes());
        m.extend_from_slice(&[10, 0, 0, 2, 10, 0, 0, 1]);
        m.extend_from_slice(tcp);
        m
    }

    const TCP: [u8; 8] = [0, 80, 0x9c, 0x40, 0x12, 0x34, 0x56, 0x78];

    extern crate std;

    #[test]
    fn reads_a_frag_needed_and_applies_the_floor_and_the_plateaus() {
        let m = frag_needed(1280, 1500, &TCP);
        let got = parse_v4(&m).unwrap().unwrap();
        assert_eq!(
            got.local,
            IpEndpoint::new(Ipv4Address::new(10, 0, 0, 2).into(), 80)
        );
        assert_eq!(
            got.remote,
            IpEndpoint::new(Ipv4Address::new(10, 0, 0, 1).into(), 40000)
        );
        assert_eq!(got.seq, TcpSeqNumber(0x1234_5678));
        assert_eq!(got.mtu, 1280);
        // Below the floor: the floor.
        assert_eq!(
            parse_v4(&frag_needed(68, 1500, &TCP)).unwrap().unwrap().mtu,
            552
        );
        // No MTU: the plateau below the quoted length.
        assert_eq!(
            parse_v4(&frag_needed(0, 1500, &TCP)).unwrap().unwrap().mtu,
            1492
        );
        assert_eq!(
            parse_v4(&frag_needed(0, 1492, &TCP)).unwrap().unwrap().mtu,
            1006
        );
        assert_eq!(
            parse_v4(&frag_needed(0, 9000, &TCP)).unwrap().unwrap().mtu,
            8166
        );
        assert_eq!(
            parse_v4(&frag_needed(0, 1006, &TCP)).unwrap().unwrap().mtu,
            552
        );
        assert_eq!(plateau_below(0), 68);
        // A quote short of the sequence number, and messages of other kinds.
        assert_eq!(
            parse_v4(&frag_needed(1280, 1500, &TCP[..7])),
            Some(Err(DropReason::Malformed))
        );
        let mut udp = frag_needed(1280, 1500, &TCP);
        udp[8 + 9] = 17;
        assert_eq!(parse_v4(&udp), None);
        let mut port_unreachable = frag_needed(1280, 1500, &TCP);
        port_unreachable[1] = 3;
        assert_eq!(parse_v4(&port_unreachable), None);
        for n in 0..m.len() {
            // Never a panic on a message cut anywhere.
            let _ = parse_v4(&m[..n]);
        }
    }

    #[test]
    fn reads_a_packet_too_big_and_applies_the_floor() {
        let mut m = std::vec![2, 0, 0, 0, 0, 0, 0x05, 0x00];
        m.extend_from_slice(&[0x60, 0, 0, 0, 0, 20, 6, 64]);
        m.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        m.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        m.extend_from_slice(&TCP);
        let got = parse_v6(&m).unwrap().unwrap();
        assert_eq!(got.mtu, 1280);
        assert_eq!(got.seq, TcpSeqNumber(0x1234_5678));
        assert_eq!(got.local.port, 80);
        assert_eq!(
            got.remote.addr,
            IpAddress::Ipv6(Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 1))
        );
        m[4..8].copy_from_slice(&1400u32.to_be_bytes());
        assert_eq!(parse_v6(&m).unwrap().unwrap().mtu, 1400);
        m[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_v6(&m).unwrap().unwrap().mtu > 1500);
        assert_eq!(
            parse_v6(&m[..m.len() - 1]),
            Some(Err(DropReason::Malformed))
        );
        for n in 0..m.len() {
            let _ = parse_v6(&m[..n]);
        }
    }
}
