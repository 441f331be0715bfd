//! The IP header of every packet zcnet builds itself (TCP segments, zero-copy datagrams):
//! [`write_header`] is its one writer. smoltcp writes the headers of its own packets.

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{IpRepr, Ipv4Packet};

/// Writes `repr`'s header at the start of `buf` (at least `repr.header_len()` bytes; the rest
/// is left as it is). IPv4 gets the identification `*ident`, which then advances, and its
/// header checksum unless the driver computes it (`checksum.ipv4`), computed once with the
/// identification in place. Don't Fragment is set; IPv6 has no checksum.
pub(crate) fn write_header(
    buf: &mut [u8],
    repr: &IpRepr,
    ident: &mut u16,
    checksum: &ChecksumCapabilities,
) {
    let buf = &mut buf[..repr.header_len()];
    // Without a checksum here: it is filled below, once the identification is in.
    repr.emit(&mut *buf, &ChecksumCapabilities::ignored());
    if let IpRepr::Ipv4(_) = repr {
        let mut p = Ipv4Packet::new_unchecked(buf);
        p.set_ident(*ident);
        *ident = ident.wrapping_add(1);
        if checksum.ipv4.tx() {
            p.fill_checksum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::{IpProtocol, Ipv4Address, Ipv4Repr};

    fn v4() -> IpRepr {
        IpRepr::Ipv4(Ipv4Repr {
            src_addr: Ipv4Address::new(10, 0, 0, 1),
            dst_addr: Ipv4Address::new(10, 0, 0, 2),
            next_header: IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 64,
        })
    }

    #[test]
    fn ipv4_gets_the_next_identification_and_a_valid_checksum() {
        let mut buf = [0xAAu8; 28];
        let mut ident = 0xFFFF;
        write_header(
            &mut buf,
            &v4(),
            &mut ident,
            &ChecksumCapabilities::default(),
        );
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.ident(), 0xFFFF);
        assert_eq!(ident, 0, "the identification wraps");
        assert!(p.verify_checksum());
        assert!(p.dont_frag());
        assert_eq!(usize::from(p.total_len()), 28);
        assert_eq!(buf[20..], [0xAA; 8], "the payload is left alone");
    }

    #[test]
    fn a_checksum_the_driver_computes_is_left_zero() {
        let mut buf = [0u8; 28];
        let mut ident = 7;
        let mut caps = ChecksumCapabilities::default();
        caps.ipv4 = smoltcp::phy::Checksum::None;
        write_header(&mut buf, &v4(), &mut ident, &caps);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.checksum(), 0);
        assert_eq!(p.ident(), 7);
        assert_eq!(ident, 8);
    }
}
