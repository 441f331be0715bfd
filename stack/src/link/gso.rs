//! TCP super-segments on the link: handed to a driver that segments them itself (TSO), or cut
//! into segments here (software GSO).
//!
//! TCP output (`transport/tcp/output.rs`) sends a run of whole send-queue frames in one pass of
//! its connection: a [`SuperSegment`] whose first frame carries the TCP header and whose IP
//! header is written here. Each frame holds at most one MSS of payload.
//!
//! ```text
//!  TSO (the driver declares segmentation for the IP version, the packet fits its GSO size):
//!    [eth|ip|tcp|payload0] [payload1] ... [payloadN]  ─► Driver::transmit_chain, one frame out
//!    marks: ChecksumPartial (pseudo-header sum over the whole TCP length), GsoRequest (MSS)
//!  software GSO (any other driver):
//!    [eth|ip|tcp|payload0]  [eth|ip'|tcp'|payload1]  ...  ─► Driver::transmit, one per frame
//!    each piece's headers written into its own frame's headroom from the first's: IP length,
//!    IPv4 identification (the next of the flow's) and header checksum, TCP sequence number
//!    advanced, FIN and PSH only on the last piece, CWR only on the first, the TCP checksum
//!    (or its pseudo-header sum when the driver completes it)
//! ```
//!
//! A piece goes to the driver when its queue has room
//! ([`Driver::poll_transmit_ready`](zcnet_buffer::Driver::poll_transmit_ready)); the pieces
//! that find it full wait in the link layer, in order ([`Held`]), and go first when room
//! comes back: TCP output sends nothing of its own before they are gone, and egress starts by
//! sending them (`LinkLayer::flush_gso_held`).
//!
//! No payload byte is copied either way and the connection is not asked again per piece. The
//! IP header comes from the stack's one writer (`ip/emit.rs`) and the checksums from
//! `ip/checksum.rs`: the one place the link layer reads into the packets it carries.

use core::task::{Context, Waker};

use smoltcp::iface::Interface;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::Instant;
use smoltcp::wire::{HardwareAddress, IpAddress, IpProtocol, IpRepr};
use zcnet_buffer::{
    ChecksumPartial, GsoKind, GsoKinds, GsoRequest, TxChain, TxFrame, MAX_CHAIN_SEGMENTS,
};

use super::neighbor::{self, Traffic};
use super::LinkLayer;
use crate::datagram::DatagramError;
use crate::ip::checksum;
use crate::ip::emit::{write_header, Ipv4Idents};
use crate::stats::{Counters, DropReason};

/// Pieces of software-split super-segments waiting for room in the driver's queue, oldest
/// first: at most one super-segment's.
pub(crate) type Held = heapless::Deque<TxFrame, MAX_CHAIN_SEGMENTS>;

/// Offset of the checksum field in a TCP header.
const TCP_CHECKSUM_AT: usize = 16;
/// Offset of the flags byte in a TCP header.
const TCP_FLAGS_AT: usize = 13;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const CWR: u8 = 0x80;
/// The longest TCP header.
const MAX_TCP_HEADER: usize = 60;

/// The largest IP packet of a super-segment whatever the driver takes: IPv4's total length
/// field (and IPv6's payload length, without jumbograms) is 16 bits.
pub(crate) const MAX_SUPER_SEGMENT: usize = 65_535;

/// What the driver segments itself ([`Capabilities`](zcnet_buffer::Capabilities)'s
/// `gso_max_size` and `gso_kinds`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GsoSupport {
    /// The largest super-segment it takes, IP packet bytes (0: none).
    pub(crate) max_size: usize,
    /// For which IP versions.
    pub(crate) kinds: GsoKinds,
}

impl GsoSupport {
    /// Whether the driver segments a TCP packet of `kind` of `ip_len` IP bytes.
    fn takes(&self, kind: GsoKind, ip_len: usize) -> bool {
        self.kinds.contains(kind.flag()) && ip_len <= self.max_size
    }
}

/// A TCP super-segment from TCP output.
pub(crate) struct SuperSegment<'r> {
    /// The first frame: `ip.header_len()` bytes of room for the IP header (written here), the
    /// TCP header (written, checksum field zero), then the first payload bytes.
    pub(crate) head: TxFrame,
    /// The payload frames after it, in order: the chain TCP output lends, emptied by the
    /// send (the frames go to the driver or out as pieces).
    pub(crate) tail: &'r mut TxChain,
    /// The IP header; its payload length is the whole TCP length (header and every frame's
    /// payload).
    pub(crate) ip: &'r IpRepr,
    /// Bytes of the TCP header.
    pub(crate) tcp_len: usize,
    /// The MSS: what a device that segments cuts the payload into. Every frame holds at most
    /// this much payload (the software split cuts at frame boundaries).
    pub(crate) mss: usize,
}

impl LinkLayer {
    /// Sends the held pieces of split super-segments while the driver has room. `true` once
    /// none is left; `false` with `waker` registered for the room.
    #[inline]
    pub(crate) fn flush_gso_held(&mut self, waker: &Waker, counters: &Counters) -> bool {
        // The usual case, nothing held, without a call.
        if self.gso_held.is_empty() {
            return true;
        }
        self.flush_gso_held_slow(waker, counters)
    }

    /// [`flush_gso_held`](Self::flush_gso_held) with pieces held.
    #[inline(never)]
    fn flush_gso_held_slow(&mut self, waker: &Waker, counters: &Counters) -> bool {
        while !self.gso_held.is_empty() {
            if !self.has_room(waker) {
                return false;
            }
            if let Some(piece) = self.gso_held.pop_front() {
                // Counted (out, or refused) by `transmit`.
                let _ = self.transmit(piece, counters);
            }
        }
        true
    }

    /// Whether the driver's queue takes a frame now (`waker` registered if not).
    fn has_room(&mut self, waker: &Waker) -> bool {
        self.driver
            .poll_transmit_ready(&mut Context::from_waker(waker))
            .is_ready()
    }

    /// Sends a super-segment towards `hop` (`None` on an IP link): whole to a driver that
    /// segments it, else split in software (see the module docs). Counted in the stack's
    /// statistics (`super_segments`, `tso_super_segments`, `gso_pieces`, frames out and drops
    /// as for any frame).
    ///
    /// The caller made sure the driver has room for one frame and no piece is held; pieces the
    /// driver has no room for are held (`waker` registered for the room, see the module docs).
    ///
    /// Errors (the frames dropped, for the caller to count): no room in the neighbour table
    /// for the next hop, no headroom for a header.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_super(
        &mut self,
        seg: SuperSegment<'_>,
        hop: Option<IpAddress>,
        iface: &Interface,
        now: Instant,
        counters: &Counters,
        traffic: Traffic,
        idents: &mut Ipv4Idents,
        waker: &Waker,
    ) -> Result<(), DatagramError> {
        // The next hop's MAC, once for every piece.
        let mac = match hop {
            None => None,
            Some(hop) => {
                let HardwareAddress::Ethernet(our) = iface.hardware_addr() else {
                    return Err(DatagramError::Unaddressable);
                };
                let theirs = match neighbor::group_mac(iface, hop) {
                    Some(m) => m,
                    None => match self.neighbors.lookup(hop, now, traffic, counters)? {
                        neighbor::Lookup::Known(m) => m,
                        neighbor::Lookup::Unknown => {
                            // Resolving: each piece waits in the table like any segment.
                            return self.send_split_held(seg, hop, iface, now, counters, idents);
                        }
                    },
                };
                Some((our, theirs))
            }
        };
        let kind = match seg.ip {
            IpRepr::Ipv4(_) => GsoKind::TcpV4,
            IpRepr::Ipv6(_) => GsoKind::TcpV6,
        };
        let ip_bytes = seg.ip.header_len() + seg.ip.payload_len();
        let caps = self.caps.checksum.clone();
        // A chain holds the head and every tail frame (TCP output leaves room for the head);
        // one that would not is split in software.
        let fits = seg.tail.frame_count() < MAX_CHAIN_SEGMENTS;
        if fits && self.gso.takes(kind, ip_bytes) {
            let chain = offload_whole(seg, kind, idents, &caps)?;
            if let (Some((our, theirs)), Some(head)) = (mac, chain.head_mut()) {
                let ethertype = neighbor::ethertype_of(head);
                neighbor::push_ethernet(head, our, theirs, ethertype)?;
            }
            if !self.carrier.is_up() {
                counters.tx_refused(zcnet_buffer::TxError::LinkDown);
                chain.drain().for_each(drop);
                return Ok(());
            }
            // The one move of the chain: the driver takes it by value.
            match self.driver.transmit_chain(core::mem::take(chain)) {
                Ok(()) => {
                    counters.frame_out();
                    counters.super_segment(true, 1);
                }
                Err(e) => counters.tx_refused(e),
            }
            return Ok(());
        }
        let partial = self.tcp_tx_partial;
        let mut pieces = 0;
        split(seg, idents, &caps, partial, |mut piece| {
            pieces += 1;
            if let Some((our, theirs)) = mac {
                let ethertype = neighbor::ethertype_of(&piece);
                if neighbor::push_ethernet(&mut piece, our, theirs, ethertype).is_err() {
                    counters.drop(DropReason::TxHeadroom);
                    return;
                }
            }
            if self.gso_held.is_empty() && self.has_room(waker) {
                // Counted (out, or refused) by `transmit`.
                let _ = self.transmit(piece, counters);
            } else if self.gso_held.push_back(piece).is_err() {
                // Not reached: at most one super-segment is held, and it fits.
                counters.drop(DropReason::TxDriver);
            }
        })?;
        counters.super_segment(false, pieces);
        Ok(())
    }

    /// The software split of a super-segment whose next hop is being resolved: each piece goes
    /// through [`send_ip`](Self::send_ip), which holds it until the answer (or drops it,
    /// counted).
    fn send_split_held(
        &mut self,
        seg: SuperSegment<'_>,
        hop: IpAddress,
        iface: &Interface,
        now: Instant,
        counters: &Counters,
        idents: &mut Ipv4Idents,
    ) -> Result<(), DatagramError> {
        let caps = self.caps.checksum.clone();
        let partial = self.tcp_tx_partial;
        let mut pieces = 0;
        split(seg, idents, &caps, partial, |piece| {
            pieces += 1;
            let sent = self.send_ip(
                piece,
                Some(hop),
                iface,
                now,
                counters,
                super::Sender::Tcp(Traffic::Own),
            );
            match sent {
                Ok(super::Sent::Out) => {}
                Ok(super::Sent::Held(ticket)) => self.neighbors.detach(ticket),
                Err(DatagramError::Driver(_)) => {}
                Err(DatagramError::NoHeadroom) => counters.drop(DropReason::TxHeadroom),
                Err(_) => counters.drop(DropReason::NeighborTableFull),
            }
        })?;
        counters.super_segment(false, pieces);
        Ok(())
    }
}

/// The super-segment as one chain for a driver that segments it (the lent chain, the head
/// put in front of its frames): the IP header written for the
/// whole packet, the TCP checksum field the pseudo-header's sum over the whole TCP length
/// (the device adjusts it per segment), the head marked with a [`ChecksumPartial`] and a
/// [`GsoRequest`]. The device numbers the segments after the first with the IPv4
/// identifications that follow the head's: they are taken from `idents` here.
fn offload_whole<'r>(
    seg: SuperSegment<'r>,
    kind: GsoKind,
    idents: &mut Ipv4Idents,
    caps: &ChecksumCapabilities,
) -> Result<&'r mut TxChain, DatagramError> {
    let SuperSegment {
        mut head,
        tail,
        ip,
        tcp_len,
        mss,
    } = seg;
    let ip_len = ip.header_len();
    let tcp_total = ip.payload_len();
    if head.len() < ip_len + tcp_len {
        return Err(DatagramError::NoHeadroom);
    }
    write_header(&mut head[..], ip, idents, caps);
    let payload = tcp_total.saturating_sub(tcp_len);
    if let IpRepr::Ipv4(v4) = ip {
        for _ in 1..payload.div_ceil(mss.max(1)) {
            idents.next(v4.src_addr, v4.dst_addr, v4.next_header);
        }
    }
    let sum = checksum::partial(&ip.src_addr(), &ip.dst_addr(), IpProtocol::Tcp, tcp_total);
    let field = ip_len + TCP_CHECKSUM_AT;
    head[field..field + 2].copy_from_slice(&sum.to_be_bytes());
    let marked = head
        .set_checksum_partial(Some(ChecksumPartial {
            start: ip_len as u16,
            offset: TCP_CHECKSUM_AT as u16,
        }))
        .and_then(|()| {
            head.set_gso_request(Some(GsoRequest {
                kind,
                segment_size: u16::try_from(mss).unwrap_or(u16::MAX),
                header_len: (ip_len + tcp_len) as u16,
            }))
        });
    if marked.is_err() {
        return Err(DatagramError::NoHeadroom);
    }
    if tail.push_front(head).is_err() {
        // Not reached: TCP output leaves room for the head.
        return Err(DatagramError::NoHeadroom);
    }
    Ok(tail)
}

/// Cuts a super-segment into one segment per frame (see the module docs) and hands each to
/// `out`, in order: a finished IP packet whose headers sit in its frame's headroom, with a
/// [`ChecksumPartial`] mark when `partial` (the driver completes TCP checksums). Errors, having
/// handed out none, when the head is shorter than its headers; a tail frame without headroom
/// for them is dropped, counted by its caller's retransmission (as a segment lost on the
/// wire), and the pieces after it still go.
pub(crate) fn split(
    seg: SuperSegment<'_>,
    idents: &mut Ipv4Idents,
    caps: &ChecksumCapabilities,
    partial: bool,
    mut out: impl FnMut(TxFrame),
) -> Result<(), DatagramError> {
    let SuperSegment {
        head,
        tail,
        ip,
        tcp_len,
        mss: _,
    } = seg;
    let ip_len = ip.header_len();
    let headers = ip_len + tcp_len;
    if head.len() < headers || tcp_len > MAX_TCP_HEADER {
        return Err(DatagramError::NoHeadroom);
    }
    // The TCP header every piece starts from.
    let mut template = [0u8; MAX_TCP_HEADER];
    template[..tcp_len].copy_from_slice(&head[ip_len..headers]);
    let seq = u32::from_be_bytes([template[4], template[5], template[6], template[7]]);
    let flags = template[TCP_FLAGS_AT];
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let count = 1 + tail.frame_count();
    let mut offset = 0u32;
    let frames = core::iter::once(head).chain(tail.drain());
    for (i, mut frame) in frames.enumerate() {
        if i > 0 {
            match frame.push_header(headers) {
                Ok(h) => h[ip_len..].copy_from_slice(&template[..tcp_len]),
                Err(_) => continue,
            }
        }
        let payload = frame.len() - headers;
        let mut piece_ip = ip.clone();
        piece_ip.set_payload_len(tcp_len + payload);
        write_header(&mut frame[..], &piece_ip, idents, caps);
        let t = &mut frame[ip_len..];
        t[4..8].copy_from_slice(&seq.wrapping_add(offset).to_be_bytes());
        let mut f = flags;
        if i + 1 < count {
            f &= !(FIN | PSH);
        }
        if i > 0 {
            f &= !CWR;
        }
        t[TCP_FLAGS_AT] = f;
        t[TCP_CHECKSUM_AT..TCP_CHECKSUM_AT + 2].fill(0);
        let sum = if partial {
            checksum::partial(&src, &dst, IpProtocol::Tcp, t.len())
        } else {
            checksum::compute(&src, &dst, IpProtocol::Tcp, t)
        };
        t[TCP_CHECKSUM_AT..TCP_CHECKSUM_AT + 2].copy_from_slice(&sum.to_be_bytes());
        if partial {
            // The field lies in the header just written.
            let _ = frame.set_checksum_partial(Some(ChecksumPartial {
                start: ip_len as u16,
                offset: TCP_CHECKSUM_AT as u16,
            }));
        }
        offset = offset.wrapping_add(payload as u32);
        out(frame);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec::Vec;

    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        IpProtocol, IpRepr, Ipv4Address, Ipv4Packet, Ipv4Repr, Ipv6Address, Ipv6Packet, Ipv6Repr,
        TcpPacket,
    };
    use zcnet_buffer::{FramePool, PoolConfig, TxChain, TxFrame};

    use super::{split, SuperSegment};
    use crate::config::Secret;
    use crate::ip::checksum;
    use crate::ip::emit::Ipv4Idents;
    use crate::keys::Prf;

    const SEQ: u32 = 0xffff_f000; // wraps inside the super-segment
    const TCP_LEN: usize = 32; // with the timestamp option

    /// A super-segment of `sizes` payload bytes per frame (byte `i` of the stream is `i as
    /// u8`), its TCP header carrying `flags`, as TCP output builds it; `ip`'s payload length
    /// is set to the whole.
    fn super_segment<'r>(
        pool: &'static FramePool,
        ip: &'r mut IpRepr,
        tail: &'r mut TxChain,
        sizes: &[usize],
        flags: u8,
    ) -> SuperSegment<'r> {
        let mut stream = 0usize;
        let mut frame = |len: usize| -> TxFrame {
            let mut f = pool.try_alloc_tx().unwrap();
            f.set_headroom(128).unwrap();
            for b in f.append(len).unwrap() {
                *b = stream as u8;
                stream += 1;
            }
            f
        };
        let mut head = frame(sizes[0]);
        let h = head.push_header(TCP_LEN).unwrap();
        h.fill(0);
        h[0..2].copy_from_slice(&40000u16.to_be_bytes());
        h[2..4].copy_from_slice(&80u16.to_be_bytes());
        h[4..8].copy_from_slice(&SEQ.to_be_bytes());
        h[8..12].copy_from_slice(&7u32.to_be_bytes());
        h[12] = ((TCP_LEN / 4) as u8) << 4;
        h[13] = flags;
        h[14..16].copy_from_slice(&1000u16.to_be_bytes());
        h[20] = 8; // timestamp option
        h[21] = 10;
        head.push_header(ip.header_len()).unwrap();
        for &n in &sizes[1..] {
            tail.push(frame(n)).unwrap();
        }
        ip.set_payload_len(TCP_LEN + sizes.iter().sum::<usize>());
        SuperSegment {
            head,
            tail,
            ip,
            tcp_len: TCP_LEN,
            mss: sizes[0],
        }
    }

    /// Splits and checks every piece: IP lengths and header checksum, consecutive IPv4
    /// identifications, sequence numbers, flags, the TCP checksum (complete, or the pseudo-header
    /// sum when `partial`), and the payload in order.
    fn check(mut ip: IpRepr, partial: bool) {
        let pool = FramePool::leak(PoolConfig::new(16)).unwrap();
        let sizes = [1448, 1448, 1448, 700];
        let mut tail = TxChain::new();
        let seg = super_segment(pool, &mut ip, &mut tail, &sizes, 0x18 | 0x01 | 0x80); // ACK PSH FIN CWR
        let mut idents = Ipv4Idents::new(Prf::new(&Secret::new([5; Secret::LEN])));
        let mut pieces = Vec::new();
        split(
            seg,
            &mut idents,
            &ChecksumCapabilities::default(),
            partial,
            |p| pieces.push(p),
        )
        .unwrap();
        assert_eq!(pieces.len(), sizes.len());
        assert!(tail.is_empty(), "the split empties the lent chain");
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let mut stream = Vec::new();
        let mut ids = Vec::new();
        for (i, piece) in pieces.iter().enumerate() {
            let tcp_bytes: &[u8] = match ip {
                IpRepr::Ipv4(_) => {
                    let p = Ipv4Packet::new_checked(&piece[..]).unwrap();
                    assert!(p.verify_checksum(), "piece {i}: IPv4 header checksum");
                    assert_eq!(usize::from(p.total_len()), piece.len());
                    assert!(p.dont_frag());
                    ids.push(p.ident());
                    &piece[20..]
                }
                IpRepr::Ipv6(_) => {
                    let p = Ipv6Packet::new_checked(&piece[..]).unwrap();
                    assert_eq!(usize::from(p.payload_len()), piece.len() - 40);
                    &piece[40..]
                }
            };
            let t = TcpPacket::new_checked(tcp_bytes).unwrap();
            let offset: usize = sizes[..i].iter().sum();
            assert_eq!(t.seq_number().0 as u32, SEQ.wrapping_add(offset as u32));
            assert_eq!(t.ack_number().0, 7);
            assert!(t.ack());
            let last = i + 1 == sizes.len();
            assert_eq!(
                (t.fin(), t.psh()),
                (last, last),
                "piece {i}: FIN and PSH last"
            );
            assert_eq!(t.cwr(), i == 0, "piece {i}: CWR first");
            assert_eq!(t.payload().len(), sizes[i]);
            if partial {
                let mark = piece.checksum_partial().expect("marked partial");
                assert_eq!(
                    (usize::from(mark.start), mark.offset),
                    (ip.header_len(), 16)
                );
                let want = checksum::partial(&src, &dst, IpProtocol::Tcp, tcp_bytes.len());
                assert_eq!(t.checksum(), want, "piece {i}: pseudo-header sum");
            } else {
                assert!(piece.checksum_partial().is_none());
                assert!(t.verify_checksum(&src, &dst), "piece {i}: TCP checksum");
            }
            stream.extend_from_slice(t.payload());
        }
        let want: Vec<u8> = (0..sizes.iter().sum::<usize>()).map(|i| i as u8).collect();
        assert_eq!(stream, want, "the payload, in order, unchanged");
        for w in ids.windows(2) {
            assert_eq!(
                w[1],
                w[0].wrapping_add(1),
                "consecutive IPv4 identifications"
            );
        }
        drop(pieces);
        assert_eq!(pool.audit().unwrap().free, 16);
    }

    fn v4() -> IpRepr {
        IpRepr::Ipv4(Ipv4Repr {
            src_addr: Ipv4Address::new(10, 0, 0, 1),
            dst_addr: Ipv4Address::new(10, 0, 0, 2),
            next_header: IpProtocol::Tcp,
            payload_len: 0,
            hop_limit: 64,
        })
    }

    fn v6() -> IpRepr {
        IpRepr::Ipv6(Ipv6Repr {
            src_addr: Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            dst_addr: Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
            next_header: IpProtocol::Tcp,
            payload_len: 0,
            hop_limit: 64,
        })
    }

    #[test]
    fn software_split_of_an_ipv4_super_segment() {
        check(v4(), false);
        check(v4(), true);
    }

    #[test]
    fn software_split_of_an_ipv6_super_segment() {
        check(v6(), false);
        check(v6(), true);
    }

    /// A head shorter than its headers is refused before any piece goes.
    #[test]
    fn a_head_without_its_headers_is_refused() {
        let pool = FramePool::leak(PoolConfig::new(4)).unwrap();
        let mut ip = v4();
        ip.set_payload_len(TCP_LEN + 10);
        let mut head = pool.try_alloc_tx().unwrap();
        head.append(10).unwrap();
        let seg = SuperSegment {
            head,
            tail: &mut TxChain::new(),
            ip: &ip,
            tcp_len: TCP_LEN,
            mss: 10,
        };
        let mut idents = Ipv4Idents::new(Prf::new(&Secret::new([5; Secret::LEN])));
        let mut n = 0;
        let r = split(
            seg,
            &mut idents,
            &ChecksumCapabilities::default(),
            false,
            |_| n += 1,
        );
        assert!(r.is_err());
        assert_eq!(n, 0);
        assert_eq!(pool.audit().unwrap().free, 4);
    }
}
