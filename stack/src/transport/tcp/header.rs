//! Reading a received TCP header into a `TcpRepr`: what smoltcp's `TcpRepr::parse` does (with
//! the checksum left to `rx_check`), in one pass over the option bytes.
//!
//! Why not smoltcp's: it parses each option through `TcpOption::parse`, an out-of-line call
//! that returns the option as an enum in memory, which the caller then reads back with wider
//! loads than the callee's stores (a store-forwarding stall per option on x86, measured as
//! the largest single cost in the ingress step of the stack benchmark), and dispatches on it
//! through a jump table. Here the option bytes are read where they lie.
//!
//! The result is the same as smoltcp's for every input, malformed ones included (the tests
//! compare both on generated headers): the same errors (ports 0, an invalid combination of
//! SYN, FIN and RST, an option cut short, an MSS, window scale, SACK-permitted or SACK option
//! of the wrong length), the same leniencies (an unknown option, or a timestamp option of the
//! wrong length, is skipped; a window scale above 14 reads as 14; SACK blocks past the third
//! are dropped; an end-of-list option ends the options).

use smoltcp::wire::{TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

/// Option kinds (RFC 9293, RFC 7323, RFC 2018).
const END: u8 = 0;
const NOP: u8 = 1;
const MSS: u8 = 2;
const WINDOW_SCALE: u8 = 3;
const SACK_PERMITTED: u8 = 4;
const SACK: u8 = 5;
const TIMESTAMP: u8 = 8;

/// The largest window scale shift (RFC 7323 section 2.3): a larger one reads as this.
const MAX_WINDOW_SCALE: u8 = 14;

/// The header of `packet` (a checked packet: `TcpPacket::new_checked`), payload left empty;
/// `None` where smoltcp's `TcpRepr::parse` fails. The checksum is not verified.
///
/// Inlined into each caller: the ingress of every segment (where a call costs measurably,
/// see the module docs) and the rarer one of a received chain.
#[inline(always)]
pub(crate) fn parse(packet: &TcpPacket<&[u8]>) -> Option<TcpRepr<'static>> {
    let mut repr = BLANK;
    parse_into(packet, &mut repr)?;
    Some(repr)
}

/// A header for [`parse_into`] to fill: ports and numbers zero, no flags, no options.
pub(crate) const BLANK: TcpRepr<'static> = TcpRepr {
    src_port: 0,
    dst_port: 0,
    control: TcpControl::None,
    seq_number: TcpSeqNumber(0),
    ack_number: None,
    window_len: 0,
    window_scale: None,
    max_seg_size: None,
    sack_permitted: false,
    sack_ranges: [None; 3],
    timestamp: None,
    payload: &[],
};

/// [`parse`] into `repr` (every field written; its old value is not read), where the caller
/// keeps it: a header built where it is used, not built and then moved there. Its value is
/// unspecified when `None`.
#[inline(always)]
pub(crate) fn parse_into(packet: &TcpPacket<&[u8]>, repr: &mut TcpRepr<'static>) -> Option<()> {
    if packet.src_port() == 0 || packet.dst_port() == 0 {
        return None;
    }
    let control = match (packet.syn(), packet.fin(), packet.rst(), packet.psh()) {
        (false, false, false, false) => TcpControl::None,
        (false, false, false, true) => TcpControl::Psh,
        (true, false, false, _) => TcpControl::Syn,
        (false, true, false, _) => TcpControl::Fin,
        (false, false, true, _) => TcpControl::Rst,
        _ => return None,
    };
    *repr = TcpRepr {
        src_port: packet.src_port(),
        dst_port: packet.dst_port(),
        control,
        seq_number: packet.seq_number(),
        ack_number: packet.ack().then(|| packet.ack_number()),
        window_len: packet.window_len(),
        ..BLANK
    };
    read_options(packet.options(), repr)
}

/// Reads the options in `bytes` into `repr`; `None` on a malformed one.
#[inline(always)]
fn read_options(mut bytes: &[u8], repr: &mut TcpRepr<'_>) -> Option<()> {
    while let Some(&kind) = bytes.first() {
        match kind {
            END => break,
            NOP => {
                bytes = &bytes[1..];
                continue;
            }
            _ => {}
        }
        let len = usize::from(*bytes.get(1)?);
        let data = bytes.get(2..len)?;
        match (kind, len) {
            (TIMESTAMP, 10) => {
                repr.timestamp = Some(TcpTimestampRepr::new(be32(&data[..4]), be32(&data[4..8])));
            }
            (MSS, 4) => repr.max_seg_size = Some(u16::from_be_bytes([data[0], data[1]])),
            (WINDOW_SCALE, 3) => repr.window_scale = Some(data[0].min(MAX_WINDOW_SCALE)),
            (SACK_PERMITTED, 2) => repr.sack_permitted = true,
            (SACK, _) => {
                if len < 10 || (len - 2) % 8 != 0 {
                    return None;
                }
                let mut blocks = [None; 3];
                for (slot, block) in blocks.iter_mut().zip(data.chunks_exact(8)) {
                    *slot = Some((be32(&block[..4]), be32(&block[4..])));
                }
                repr.sack_ranges = blocks;
            }
            (MSS | WINDOW_SCALE | SACK_PERMITTED, _) => return None,
            // Unknown options, and a timestamp option of another length, are skipped.
            _ => {}
        }
        bytes = &bytes[len..];
    }
    Some(())
}

/// The big-endian `u32` in the first four bytes of `b` (which has at least four).
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec::Vec;

    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{IpAddress, Ipv4Address};

    use super::*;

    const SRC: IpAddress = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1));
    const DST: IpAddress = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 2));

    /// A TCP header with `flags` and `options` (padded with zeros to a multiple of four),
    /// followed by three payload bytes.
    fn header(flags: u8, options: &[u8], src_port: u16) -> Vec<u8> {
        let padded = options.len().div_ceil(4) * 4;
        let mut b = Vec::new();
        b.extend_from_slice(&src_port.to_be_bytes());
        b.extend_from_slice(&80u16.to_be_bytes());
        b.extend_from_slice(&0x0102_0304u32.to_be_bytes());
        b.extend_from_slice(&0x0506_0708u32.to_be_bytes());
        b.push((((20 + padded) / 4) as u8) << 4);
        b.push(flags);
        b.extend_from_slice(&[0x40, 0x00, 0, 0, 0, 0]);
        b.extend_from_slice(options);
        b.resize(20 + padded, 0);
        b.extend_from_slice(b"xyz");
        b
    }

    /// Both parsers on `bytes`: equal results, or both failing.
    fn same_as_smoltcp(bytes: &[u8]) -> bool {
        let Ok(packet) = TcpPacket::new_checked(bytes) else {
            return true;
        };
        let theirs = TcpRepr::parse(&packet, &SRC, &DST, &ChecksumCapabilities::ignored())
            .ok()
            .map(|r| TcpRepr { payload: &[], ..r });
        let ours = parse(&packet);
        assert_eq!(ours, theirs, "header {bytes:02x?}");
        ours.is_some()
    }

    #[test]
    fn the_usual_headers_read_as_smoltcp_reads_them() {
        const ACK: u8 = 0x10;
        let ts = [NOP, NOP, TIMESTAMP, 10, 0, 0, 1, 2, 0, 0, 3, 4];
        let syn_options = [
            MSS,
            4,
            0x05,
            0xb4,
            SACK_PERMITTED,
            2,
            TIMESTAMP,
            10,
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            8,
            NOP,
            WINDOW_SCALE,
            3,
            7,
        ];
        let sack3 = [
            NOP, NOP, SACK, 26, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0,
            0, 6,
        ];
        for (flags, options) in [
            (ACK, &[][..]),
            (ACK | 0x08, &ts[..]),
            (0x02, &syn_options[..]),
            (0x02 | ACK, &syn_options[..]),
            (ACK | 0x01, &ts[..]),
            (0x04, &[][..]),
            (ACK, &sack3[..]),
            (ACK, &[NOP, NOP, SACK, 10, 0, 0, 0, 1, 0, 0, 0, 2][..]),
            // Window scale above 14, end of list before another option, unknown options, a
            // timestamp of the wrong length.
            (0x02, &[WINDOW_SCALE, 3, 15, END, MSS, 4, 1, 2][..]),
            (ACK, &[30, 4, 9, 9, TIMESTAMP, 6, 1, 2, 3, 4][..]),
        ] {
            assert!(
                same_as_smoltcp(&header(flags, options, 1234)),
                "{options:?}"
            );
        }
        // Four SACK blocks: the fourth is dropped.
        let mut sack4 = std::vec![NOP, NOP, SACK, 34];
        for n in 1u32..=8 {
            sack4.extend_from_slice(&n.to_be_bytes());
        }
        assert!(same_as_smoltcp(&header(ACK, &sack4, 1234)));
    }

    #[test]
    fn malformed_headers_fail_as_in_smoltcp() {
        const ACK: u8 = 0x10;
        for (flags, options, port) in [
            (ACK, &[][..], 0),
            (0x03, &[][..], 1234),
            (0x06, &[][..], 1234),
            (ACK, &[MSS, 3, 1][..], 1234),
            (ACK, &[WINDOW_SCALE, 4, 1, 1][..], 1234),
            (ACK, &[SACK_PERMITTED, 3, 1][..], 1234),
            (ACK, &[SACK, 9, 0, 0, 0, 0, 0, 0, 0][..], 1234),
            (ACK, &[SACK, 2][..], 1234),
            (ACK, &[TIMESTAMP, 1][..], 1234),
            (ACK, &[TIMESTAMP, 12, 0, 0][..], 1234),
            (ACK, &[NOP, 77][..], 1234),
        ] {
            assert!(
                !same_as_smoltcp(&header(flags, options, port)),
                "{options:?}"
            );
        }
    }

    #[test]
    fn generated_headers_read_as_smoltcp_reads_them() {
        // Options drawn from the kinds above, lengths often right and sometimes not, and
        // random flags: 200,000 headers, a fixed seed.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut parsed = 0;
        for _ in 0..200_000 {
            let r = next();
            let mut options = Vec::new();
            while options.len() < 40 {
                let r = next();
                let kind = [
                    END,
                    NOP,
                    MSS,
                    WINDOW_SCALE,
                    SACK_PERMITTED,
                    SACK,
                    TIMESTAMP,
                    42,
                ][(r % 8) as usize];
                let right = match kind {
                    END | NOP => {
                        options.push(kind);
                        continue;
                    }
                    MSS => 4,
                    WINDOW_SCALE => 3,
                    SACK_PERMITTED => 2,
                    SACK => 2 + 8 * (1 + (r >> 8) % 4) as usize,
                    TIMESTAMP => 10,
                    _ => 2 + ((r >> 8) % 6) as usize,
                };
                let len = if (r >> 16) % 8 == 0 {
                    ((r >> 24) % 42) as usize
                } else {
                    right
                };
                options.push(kind);
                options.push(len as u8);
                for i in 2..len {
                    options.push((r >> (i % 56)) as u8);
                }
            }
            options.truncate(40);
            let cut = (r % 41) as usize;
            let flags = (r >> 40) as u8 & 0x1f;
            let port = if (r >> 48) % 64 == 0 { 0 } else { 1234 };
            if same_as_smoltcp(&header(flags, &options[..cut], port)) {
                parsed += 1;
            }
        }
        // Both outcomes well represented.
        assert!(parsed > 20_000 && parsed < 180_000, "{parsed} parsed");
    }
}
