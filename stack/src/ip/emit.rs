//! The IP header of every packet zcnet builds itself (TCP segments, zero-copy datagrams):
//! [`write_header`] is its one writer, and [`Ipv4Idents`] numbers its IPv4 packets. smoltcp
//! writes the headers of its own packets (identification 0, Don't Fragment set).
//!
//! # IPv4 identification
//!
//! Every IPv4 packet zcnet builds has Don't Fragment set and is never fragmented: it is an
//! atomic datagram, whose identification RFC 6864 (§4.1) lets the source set to any value. A
//! single counter for all packets (what the stack had, and what old stacks have) tells anyone
//! who receives two of them how many the stack sent in between to anyone: idle scans and
//! traffic counting. Zero on every packet (what smoltcp and Linux's unconnected sockets do)
//! leaks nothing, but leaves reassembly nothing to tell packets apart by should a middlebox
//! clear Don't Fragment and fragment them anyway (RFC 6864 §5 names such devices). So zcnet
//! keeps counters per destination, as RFC 7739 §5.3.2 describes and Linux's `ip_idents`
//! does: the keyed hash (`keys.rs`) of source, destination and protocol picks one of
//! [`IDENT_BUCKETS`] counters and an offset; the identification is the offset plus that
//! counter, which then advances. A destination sees its own packets numbered in sequence from
//! an unpredictable start, unaffected by traffic to other destinations unless these share its
//! counter (one chance in [`IDENT_BUCKETS`] for a given pair, under a secret the attacker does
//! not know and that changes with every boot).

use smoltcp::phy::ChecksumCapabilities;
#[cfg(test)]
use smoltcp::wire::Ipv4Packet;
use smoltcp::wire::{IpProtocol, IpRepr, Ipv4Address, Ipv4Repr};

use crate::keys::{Prf, Use};

/// Counters of [`Ipv4Idents`]: one per value of a byte, which indexes them.
pub(crate) const IDENT_BUCKETS: usize = 256;
const _: () = assert!(IDENT_BUCKETS == u8::MAX as usize + 1);

/// The IPv4 identification of zcnet's packets: keyed counters per destination (see the
/// [module docs](self)).
pub(crate) struct Ipv4Idents {
    prf: Prf,
    counters: [u16; IDENT_BUCKETS],
    /// The last flow numbered and its bucket and offset, so a run of packets to one
    /// destination hashes once.
    last: Option<(Ipv4Address, Ipv4Address, IpProtocol, u8, u16)>,
}

impl Ipv4Idents {
    /// Identifications keyed with `prf`, every counter at zero (the keyed offset makes the
    /// first value of each destination unpredictable).
    pub(crate) fn new(prf: Prf) -> Self {
        Self {
            prf,
            counters: [0; IDENT_BUCKETS],
            last: None,
        }
    }

    /// The identification of the next packet from `src` to `dst` carrying `protocol`.
    #[inline]
    pub(crate) fn next(&mut self, src: Ipv4Address, dst: Ipv4Address, protocol: IpProtocol) -> u16 {
        let (bucket, offset) = match self.last {
            Some((s, d, p, bucket, offset)) if s == src && d == dst && p == protocol => {
                (bucket, offset)
            }
            _ => self.flow(src, dst, protocol),
        };
        let counter = &mut self.counters[usize::from(bucket)];
        let id = offset.wrapping_add(*counter);
        *counter = counter.wrapping_add(1);
        id
    }

    /// The bucket and offset of the flow from `src` to `dst` carrying `protocol` (a keyed
    /// hash), kept as the last flow numbered.
    #[inline(never)]
    fn flow(&mut self, src: Ipv4Address, dst: Ipv4Address, protocol: IpProtocol) -> (u8, u16) {
        let mut input = [0u8; 9];
        input[..4].copy_from_slice(&src.octets());
        input[4..8].copy_from_slice(&dst.octets());
        input[8] = u8::from(protocol);
        let h = self.prf.of(Use::Ipv4Id, &input);
        // The low byte is the bucket (IDENT_BUCKETS is 256, checked above).
        let (bucket, offset) = (h as u8, (h >> 16) as u16);
        self.last = Some((src, dst, protocol, bucket, offset));
        (bucket, offset)
    }
}

/// Writes `repr`'s header at the start of `buf` (at least `repr.header_len()` bytes; the rest
/// is left as it is). IPv4 gets the next identification from `idents`, and its header
/// checksum unless the driver computes it (`checksum.ipv4`), computed once with the
/// identification in place. Don't Fragment is set; IPv6 has no checksum.
#[inline(always)]
pub(crate) fn write_header(
    buf: &mut [u8],
    repr: &IpRepr,
    idents: &mut Ipv4Idents,
    checksum: &ChecksumCapabilities,
) {
    let buf = &mut buf[..repr.header_len()];
    match repr {
        IpRepr::Ipv4(v4) => {
            let ident = idents.next(v4.src_addr, v4.dst_addr, v4.next_header);
            write_ipv4(buf, v4, ident, checksum.ipv4.tx());
        }
        IpRepr::Ipv6(_) => repr.emit(&mut *buf, &ChecksumCapabilities::ignored()),
    }
}

/// The 20-byte IPv4 header of `v4` with identification `ident` into `h`: the bytes smoltcp's
/// `Ipv4Repr::emit` writes (no options, DSCP and ECN zero, Don't Fragment set), the checksum
/// (if `checksum`) computed from the values written rather than read back from `h`.
fn write_ipv4(h: &mut [u8], v4: &Ipv4Repr, ident: u16, checksum: bool) {
    let total = (v4.payload_len + 20) as u16;
    let ttl_proto = u16::from(v4.hop_limit) << 8 | u16::from(u8::from(v4.next_header));
    let (src, dst) = (v4.src_addr.octets(), v4.dst_addr.octets());
    let word = |b: [u8; 4]| {
        u32::from(u16::from_be_bytes([b[0], b[1]])) + u32::from(u16::from_be_bytes([b[2], b[3]]))
    };
    let mut sum = 0x4500 + u32::from(total) + u32::from(ident) + 0x4000;
    sum += u32::from(ttl_proto) + word(src) + word(dst);
    sum = (sum >> 16) + (sum & 0xFFFF);
    sum = (sum >> 16) + (sum & 0xFFFF);
    let check = if checksum { !(sum as u16) } else { 0 };
    h[0] = 0x45;
    h[1] = 0;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&ident.to_be_bytes());
    h[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
    h[8..10].copy_from_slice(&ttl_proto.to_be_bytes());
    h[10..12].copy_from_slice(&check.to_be_bytes());
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    const A: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
    const B: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

    fn v4(dst: Ipv4Address) -> IpRepr {
        IpRepr::Ipv4(Ipv4Repr {
            src_addr: A,
            dst_addr: dst,
            next_header: IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 64,
        })
    }

    fn idents(b: u8) -> Ipv4Idents {
        Ipv4Idents::new(Prf::new(&Secret::new([b; Secret::LEN])))
    }

    /// The identification `write_header` gives a packet to `dst`.
    fn written(idents: &mut Ipv4Idents, dst: Ipv4Address) -> u16 {
        let mut buf = [0u8; 28];
        write_header(&mut buf, &v4(dst), idents, &ChecksumCapabilities::default());
        Ipv4Packet::new_checked(&buf[..]).unwrap().ident()
    }

    #[test]
    fn ipv4_gets_the_next_identification_and_a_valid_checksum() {
        let mut buf = [0xAAu8; 28];
        let mut ids = idents(1);
        let mut reference = idents(1);
        write_header(&mut buf, &v4(B), &mut ids, &ChecksumCapabilities::default());
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.ident(), reference.next(A, B, IpProtocol::Udp));
        assert!(p.verify_checksum());
        assert!(p.dont_frag());
        assert_eq!(usize::from(p.total_len()), 28);
        assert_eq!(buf[20..], [0xAA; 8], "the payload is left alone");
        assert_eq!(
            written(&mut ids, B),
            p.ident().wrapping_add(1),
            "the destination's counter advances"
        );
    }

    #[test]
    fn a_checksum_the_driver_computes_is_left_zero() {
        let mut buf = [0u8; 28];
        let mut caps = ChecksumCapabilities::default();
        caps.ipv4 = smoltcp::phy::Checksum::None;
        write_header(&mut buf, &v4(B), &mut idents(1), &caps);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.checksum(), 0);
    }

    #[test]
    fn each_destination_counts_its_own_packets_from_a_keyed_start() {
        let c = Ipv4Address::new(10, 0, 0, 3);
        let mut ids = idents(1);
        let first_b = written(&mut ids, B);
        let first_c = written(&mut ids, c);
        // Under this secret B and C have counters of their own (checked: their buckets differ).
        let mut probe = idents(1);
        probe.next(A, B, IpProtocol::Udp);
        let bucket_b = probe.last.unwrap().3;
        probe.next(A, c, IpProtocol::Udp);
        assert_ne!(bucket_b, probe.last.unwrap().3);
        // A thousand packets to C do not move B's numbers: B's next is its first plus one.
        for _ in 0..1000 {
            written(&mut ids, c);
        }
        assert_eq!(written(&mut ids, B), first_b.wrapping_add(1));
        assert_eq!(written(&mut ids, c), first_c.wrapping_add(1001));
        // Another secret, other starting values.
        let mut other = idents(2);
        assert_ne!(written(&mut other, B), first_b);
        // The protocol counts: UDP and TCP to one destination are numbered apart.
        let mut ids = idents(1);
        let udp = ids.next(A, B, IpProtocol::Udp);
        assert_ne!(ids.next(A, B, IpProtocol::Tcp), udp.wrapping_add(1));
    }

    #[test]
    fn the_counter_wraps() {
        let mut ids = idents(1);
        let first = ids.next(A, B, IpProtocol::Udp);
        for _ in 0..u16::MAX {
            ids.next(A, B, IpProtocol::Udp);
        }
        assert_eq!(
            ids.next(A, B, IpProtocol::Udp),
            first,
            "2^16 packets later, the same value"
        );
    }

    /// The header is smoltcp's, byte for byte, with and without the checksum.
    #[test]
    fn ipv4_header_is_smoltcps() {
        for (len, ttl, proto, ident) in [
            (0, 64, IpProtocol::Tcp, 0),
            (1480, 1, IpProtocol::Udp, 0xffff),
            (65515, 255, IpProtocol::Icmp, 0x1234),
        ] {
            let v4 = Ipv4Repr {
                src_addr: A,
                dst_addr: Ipv4Address::new(192, 168, 255, 254),
                next_header: proto,
                payload_len: len,
                hop_limit: ttl,
            };
            for checksum in [false, true] {
                let (mut ours, mut theirs) = ([0xAAu8; 20], [0x55u8; 20]);
                write_ipv4(&mut ours, &v4, ident, checksum);
                let mut p = Ipv4Packet::new_unchecked(&mut theirs[..]);
                v4.emit(&mut p, &ChecksumCapabilities::ignored());
                p.set_ident(ident);
                if checksum {
                    p.fill_checksum();
                } else {
                    p.set_checksum(0);
                }
                assert_eq!(ours, theirs, "{v4:?} checksum {checksum}");
            }
        }
    }
}
