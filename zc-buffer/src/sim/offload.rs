//! The offload work a simulated device does, as a NIC would: completing partial checksums,
//! verifying received checksums, and cutting a TCP super-segment into MSS-sized frames (TSO).
//!
//! Ethernet frames only (the simulated devices are Ethernet); IPv4 with options, IPv6 without
//! extension headers. Anything else is left alone (a checksum not completed, a super-segment
//! refused), never a panic.

use std::vec::Vec;

use crate::offload::{GsoKind, GsoRequest};
use crate::ETHERNET_HEADER_LEN;

/// The ones'-complement sum of `bytes` as big-endian 16-bit words (an odd last byte padded with
/// zero), added to `acc`, not folded.
fn sum(bytes: &[u8], mut acc: u64) -> u64 {
    let mut words = bytes.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a sum to 16 bits.
fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Completes a partial checksum in `packet` (the whole frame, link header first): sums from
/// `start` to the end (the field holds the pseudo-header sum) and stores the complement at
/// `start + offset`. Returns whether the field was inside the packet.
#[cfg(test)]
pub(crate) fn complete_partial(packet: &mut [u8], start: usize, offset: usize) -> bool {
    let field = start + offset;
    if field + 2 > packet.len() {
        return false;
    }
    let mut c = !fold(sum(&packet[start..], 0));
    // UDP sends a computed 0 as 0xffff (0 means "no checksum"); harmless for TCP.
    if c == 0 && offset == 6 {
        c = 0xffff;
    }
    packet[field..field + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// The L3 header of an Ethernet frame: `(kind, IP header offset, IP header length, L4 protocol)`.
fn ip_header(frame: &[u8]) -> Option<(GsoKind, usize, usize, u8)> {
    let l3 = ETHERNET_HEADER_LEN;
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    match ethertype {
        0x0800 => {
            let ihl = usize::from(frame.get(l3)? & 0x0f) * 4;
            (ihl >= 20 && frame.len() >= l3 + ihl).then_some(())?;
            Some((GsoKind::TcpV4, l3, ihl, frame[l3 + 9]))
        }
        0x86dd => {
            (frame.len() >= l3 + 40).then_some(())?;
            Some((GsoKind::TcpV6, l3, 40, frame[l3 + 6]))
        }
        _ => None,
    }
}

/// The pseudo-header sum of an L4 segment of `l4_len` bytes and protocol `proto`.
fn pseudo_sum(frame: &[u8], kind: GsoKind, ip: usize, proto: u8, l4_len: usize) -> u64 {
    let addrs = match kind {
        GsoKind::TcpV4 => &frame[ip + 12..ip + 20],
        GsoKind::TcpV6 => &frame[ip + 8..ip + 40],
    };
    sum(addrs, 0) + u64::from(proto) + l4_len as u64
}

/// Whether a received frame's IPv4 header checksum and TCP or UDP checksum are right, as a
/// device that verifies checksums decides before setting its "verified" mark. `false` for
/// anything it does not understand (another protocol, a truncated packet, a fragment).
pub(crate) fn l4_checksum_ok(frame: &[u8]) -> bool {
    let Some((kind, ip, ihl, proto)) = ip_header(frame) else {
        return false;
    };
    let ip_len = match kind {
        GsoKind::TcpV4 => {
            if fold(sum(&frame[ip..ip + ihl], 0)) != 0xffff {
                return false;
            }
            // A fragment's L4 checksum covers the whole datagram: not checked here.
            if u16::from_be_bytes([frame[ip + 6], frame[ip + 7]]) & 0x3fff != 0 {
                return false;
            }
            usize::from(u16::from_be_bytes([frame[ip + 2], frame[ip + 3]]))
        }
        GsoKind::TcpV6 => 40 + usize::from(u16::from_be_bytes([frame[ip + 4], frame[ip + 5]])),
    };
    if !(proto == 6 || proto == 17) || ip_len < ihl || ip + ip_len > frame.len() {
        return false;
    }
    let l4 = &frame[ip + ihl..ip + ip_len];
    if proto == 17 && kind == GsoKind::TcpV4 && l4.get(6..8) == Some(&[0, 0]) {
        return true; // IPv4 UDP without a checksum
    }
    fold(sum(l4, pseudo_sum(frame, kind, ip, proto, l4.len()))) == 0xffff
}

/// Why a super-segment could not be cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NotSegmentable;

/// Cuts a TCP super-segment (`packet`: the whole frame, link header first) into frames of at
/// most `req.segment_size` payload bytes each behind a copy of the headers, as a TSO NIC does:
/// IPv4 total length, ID (+1 per segment) and header checksum, or IPv6 payload length; TCP
/// sequence number advanced; FIN and PSH only on the last, CWR only on the first; each TCP
/// checksum computed in full.
pub(crate) fn segment(packet: &[u8], req: GsoRequest) -> Result<Vec<Vec<u8>>, NotSegmentable> {
    let (kind, ip, ihl, proto) = ip_header(packet).ok_or(NotSegmentable)?;
    let tcp = ip + ihl;
    let hl = usize::from(req.header_len);
    if kind != req.kind || proto != 6 || packet.len() < tcp + 20 || hl > packet.len() {
        return Err(NotSegmentable);
    }
    let thl = usize::from(packet[tcp + 12] >> 4) * 4;
    if thl < 20 || tcp + thl != hl || req.segment_size == 0 {
        return Err(NotSegmentable);
    }
    let header = &packet[..hl];
    let payload = &packet[hl..];
    let seq0 = u32::from_be_bytes([
        packet[tcp + 4],
        packet[tcp + 5],
        packet[tcp + 6],
        packet[tcp + 7],
    ]);
    let id0 = u16::from_be_bytes([packet[ip + 4], packet[ip + 5]]);
    let flags0 = packet[tcp + 13];
    let mss = usize::from(req.segment_size);
    let count = payload.len().div_ceil(mss).max(1);
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let chunk = &payload[(i * mss).min(payload.len())..((i + 1) * mss).min(payload.len())];
        let mut seg = Vec::with_capacity(hl + chunk.len());
        seg.extend_from_slice(header);
        seg.extend_from_slice(chunk);
        let l4_len = thl + chunk.len();
        match kind {
            GsoKind::TcpV4 => {
                let total = (ihl + l4_len) as u16;
                seg[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
                let id = id0.wrapping_add(i as u16);
                seg[ip + 4..ip + 6].copy_from_slice(&id.to_be_bytes());
                seg[ip + 10..ip + 12].fill(0);
                let c = !fold(sum(&seg[ip..ip + ihl], 0));
                seg[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
            }
            GsoKind::TcpV6 => {
                seg[ip + 4..ip + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            }
        }
        let seq = seq0.wrapping_add((i * mss) as u32);
        seg[tcp + 4..tcp + 8].copy_from_slice(&seq.to_be_bytes());
        let mut flags = flags0;
        if i + 1 < count {
            flags &= !(0x01 | 0x08); // FIN, PSH: last segment only
        }
        if i > 0 {
            flags &= !0x80; // CWR: first segment only
        }
        seg[tcp + 13] = flags;
        seg[tcp + 16..tcp + 18].fill(0);
        let c = !fold(sum(&seg[tcp..], pseudo_sum(&seg, kind, ip, 6, l4_len)));
        seg[tcp + 16..tcp + 18].copy_from_slice(&c.to_be_bytes());
        out.push(seg);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    /// An Ethernet + IPv4 + TCP frame with `payload`, checksums left zero.
    fn tcp4(payload: &[u8], flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        let total = (40 + payload.len()) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[18..20].copy_from_slice(&0x1234u16.to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&1000u16.to_be_bytes());
        f[36..38].copy_from_slice(&80u16.to_be_bytes());
        f[38..42].copy_from_slice(&0xffff_fff0u32.to_be_bytes());
        f[46] = 5 << 4;
        f[47] = flags;
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_partial_checksum_completed_verifies_and_a_flipped_byte_does_not() {
        let payload: Vec<u8> = (0..301u32).map(|i| i as u8).collect();
        let mut f = tcp4(&payload, 0x18);
        let c = !fold(sum(&f[14..34], 0));
        f[24..26].copy_from_slice(&c.to_be_bytes());
        // The stack's part: the pseudo-header sum, not complemented.
        let p = fold(pseudo_sum(&f, GsoKind::TcpV4, 14, 6, 20 + payload.len()));
        f[50..52].copy_from_slice(&p.to_be_bytes());
        assert!(!l4_checksum_ok(&f));
        assert!(complete_partial(&mut f, 34, 16));
        assert!(l4_checksum_ok(&f));
        f[60] ^= 4;
        assert!(!l4_checksum_ok(&f));
        assert!(!complete_partial(&mut f[..40], 34, 16), "field outside");
    }

    #[test]
    fn segmentation_cuts_at_the_mss_and_fixes_every_header() {
        let payload: Vec<u8> = (0..2500u32).map(|i| (i * 7) as u8).collect();
        let f = tcp4(&payload, 0x18 | 0x01 | 0x80); // PSH ACK FIN CWR
        let req = GsoRequest {
            kind: GsoKind::TcpV4,
            segment_size: 1000,
            header_len: 54,
        };
        let segs = segment(&f, req).unwrap();
        assert_eq!(segs.len(), 3);
        let mut joined = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            assert!(l4_checksum_ok(s), "segment {i}");
            let want = if i < 2 { 1000 } else { 500 };
            assert_eq!(s.len(), 54 + want);
            assert_eq!(u16::from_be_bytes([s[16], s[17]]) as usize, 40 + want);
            assert_eq!(u16::from_be_bytes([s[18], s[19]]), 0x1234 + i as u16);
            let seq = u32::from_be_bytes([s[38], s[39], s[40], s[41]]);
            assert_eq!(seq, 0xffff_fff0u32.wrapping_add(1000 * i as u32));
            let last = i == 2;
            assert_eq!(s[47] & 0x09 != 0, last, "FIN/PSH on the last only");
            assert_eq!(s[47] & 0x09 == 0x09, last);
            assert_eq!(s[47] & 0x80 != 0, i == 0, "CWR on the first only");
            joined.extend_from_slice(&s[54..]);
        }
        assert_eq!(joined, payload);
        let bad = GsoRequest {
            header_len: 50,
            ..req
        };
        assert_eq!(segment(&f, bad), Err(NotSegmentable));
        let v6 = GsoRequest {
            kind: GsoKind::TcpV6,
            ..req
        };
        assert_eq!(segment(&f, v6), Err(NotSegmentable));
    }

    #[test]
    fn ipv6_segments_carry_their_payload_length_and_checksums() {
        let payload: Vec<u8> = (0..3000u32).map(|i| (i * 3) as u8).collect();
        let mut f = vec![0u8; 14 + 40 + 20];
        f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        f[14] = 0x60;
        f[18..20].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
        f[20] = 6;
        f[21] = 64;
        f[22..38].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f[38..54].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f[66] = 5 << 4;
        f[67] = 0x18;
        f.extend_from_slice(&payload);
        let req = GsoRequest {
            kind: GsoKind::TcpV6,
            segment_size: 1220,
            header_len: 74,
        };
        let segs = segment(&f, req).unwrap();
        assert_eq!(segs.len(), 3);
        let mut joined = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            assert!(l4_checksum_ok(s), "segment {i}");
            let plen = usize::from(u16::from_be_bytes([s[18], s[19]]));
            assert_eq!(plen, s.len() - 54);
            let seq = u32::from_be_bytes([s[58], s[59], s[60], s[61]]);
            assert_eq!(seq, 1220 * i as u32);
            assert_eq!(s[67] & 0x08 != 0, i == 2, "PSH on the last only");
            joined.extend_from_slice(&s[74..]);
        }
        assert_eq!(joined, payload);
    }
}
