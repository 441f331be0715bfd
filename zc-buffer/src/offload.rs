//! Per-frame offload marks: what a driver tells the stack about a received packet, and what the
//! stack asks a driver to finish on a packet it transmits.
//!
//! # The checksum contract
//!
//! * **Transmit, partial checksum.** When a driver advertises
//!   [`ChecksumOffloads::TCP_TX`](crate::ChecksumOffloads::TCP_TX) or
//!   [`UDP_TX`](crate::ChecksumOffloads::UDP_TX), the stack may leave that checksum to the
//!   device (Linux `CHECKSUM_PARTIAL`, virtio `VIRTIO_NET_HDR_F_NEEDS_CSUM`): it writes the
//!   ones'-complement sum of the pseudo-header (source, destination, protocol, L4 length; *not*
//!   complemented) into the checksum field and marks the frame with a [`ChecksumPartial`]
//!   ([`TxFrame::set_checksum_partial`](crate::TxFrame::set_checksum_partial)). The device sums
//!   everything from `start` to the end of the packet (the field's pseudo-header sum included),
//!   complements it and stores it at `start + offset`. `start` counts from the first byte of
//!   the frame's data, the link-layer header; for TCP `offset` is 16, for UDP 6. A frame
//!   without the mark carries a complete checksum and the device leaves it alone.
//! * **Receive, verified.** A driver sets [`RxFrame::set_checksum_verified`](crate::RxFrame::set_checksum_verified)
//!   on a packet whose L4 checksum (and IPv4 header checksum) the device verified, or that came
//!   from the host with a partial checksum (a virtio-net `NEEDS_CSUM` packet, a TAP read of a
//!   local Linux packet: its checksum field holds only the pseudo-header sum, yet the bytes
//!   never crossed a wire). A stack that honours the mark skips its own verification; one that
//!   does not must be given complete checksums (the driver's business, see the TAP driver's
//!   configuration).
//!
//! # Segmentation (GSO) and merged receive (GRO/LRO)
//!
//! * **Transmit.** A driver whose [`Capabilities::gso_max_size`](crate::Capabilities) is not 0
//!   takes TCP super-segments of up to that many bytes (IP packet, headers included) of the
//!   kinds in [`Capabilities::gso_kinds`](crate::Capabilities), usually as a
//!   [`TxChain`](crate::TxChain) ([`Driver::transmit_chain`](crate::Driver::transmit_chain)).
//!   The stack marks the head frame with a [`GsoRequest`]: the kind, the MSS, and the length of
//!   the link + IP + TCP headers. A GSO packet always carries a [`ChecksumPartial`] mark too
//!   (the device computes each segment's checksum), with the pseudo-header sum computed over a
//!   zero length, as Linux and virtio do. The device cuts the payload into MSS-sized pieces,
//!   each behind a copy of the headers with the IPv4 total length / IPv6 payload length, the
//!   IPv4 ID (incremented per segment), the TCP sequence number advanced, FIN and PSH only on
//!   the last segment, CWR only on the first, and each segment's checksums completed.
//! * **Receive.** A driver that [`delivers_chains`](crate::Capabilities) may hand up packets
//!   larger than one slot as an [`RxChain`](crate::RxChain)
//!   ([`Driver::poll_receive_chain`](crate::Driver::poll_receive_chain)): a merged TCP packet of
//!   up to 64 KiB whose IP length fields describe the whole packet. When the device says how
//!   it was merged, the head frame carries a [`GsoInfo`] (the kind and the size of the
//!   segments it was made of).
//!
//! Marks live in the lease ([`RxFrame`](crate::RxFrame), [`TxFrame`](crate::TxFrame)); for a
//! chain, the head frame's marks describe the whole packet and the tails' are ignored. A frame
//! fresh from the pool has none.

bitflags::bitflags! {
    /// Kinds of TCP super-segment a device segments on transmit.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct GsoKinds: u8 {
        /// TCP over IPv4 (virtio `GSO_TCPV4`, Linux `NETIF_F_TSO`).
        const TCPV4 = 1 << 0;
        /// TCP over IPv6 (virtio `GSO_TCPV6`, Linux `NETIF_F_TSO6`).
        const TCPV6 = 1 << 1;
    }
}

/// The kind of one super-segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GsoKind {
    /// TCP over IPv4.
    TcpV4,
    /// TCP over IPv6.
    TcpV6,
}

impl GsoKind {
    /// The [`GsoKinds`] bit of this kind (to check it against a driver's capabilities).
    pub fn flag(self) -> GsoKinds {
        match self {
            GsoKind::TcpV4 => GsoKinds::TCPV4,
            GsoKind::TcpV6 => GsoKinds::TCPV6,
        }
    }
}

/// Where a partial checksum starts and where its result goes (see the
/// [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChecksumPartial {
    /// Offset of the first byte summed, from the first byte of the frame's data (the
    /// link-layer header): the start of the TCP or UDP header.
    pub start: u16,
    /// Offset of the 16-bit checksum field from `start` (16 for TCP, 6 for UDP).
    pub offset: u16,
}

/// What the stack asks of a device that segments a TCP super-segment (see the
/// [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GsoRequest {
    /// IPv4 or IPv6.
    pub kind: GsoKind,
    /// TCP payload bytes per segment: the MSS. At least 1.
    pub segment_size: u16,
    /// Bytes of link-layer, IP and TCP headers at the front of the packet, which every segment
    /// repeats.
    pub header_len: u16,
}

/// How a received packet larger than one segment was merged by the device, when it says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GsoInfo {
    /// IPv4 or IPv6.
    pub kind: GsoKind,
    /// The TCP payload size of the segments it was merged from (the sender's MSS).
    pub segment_size: u16,
}

/// The marks of a received frame (stored in the [`RxFrame`](crate::RxFrame) lease).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct RxMarks {
    pub(crate) checksum_verified: bool,
    pub(crate) gso: Option<GsoInfo>,
}

/// The marks of a frame to transmit (stored in the [`TxFrame`](crate::TxFrame) lease), with
/// offsets counted from the slot's first byte so that headers pushed in front keep them
/// pointing at the same bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct TxMarks {
    /// `(checksum start, offset)`, the start as an offset in the slot.
    pub(crate) checksum: Option<(u32, u16)>,
    /// `(kind, segment size, end of the headers as an offset in the slot)`.
    pub(crate) gso: Option<(GsoKind, u16, u32)>,
}

impl TxMarks {
    /// The marks seen from a frame whose data starts at slot offset `start`: `None` for a mark
    /// that points in front of it (its bytes were trimmed away).
    pub(crate) fn checksum_at(&self, start: u32) -> Option<ChecksumPartial> {
        let (abs, offset) = self.checksum?;
        let rel = abs.checked_sub(start)?;
        Some(ChecksumPartial {
            start: u16::try_from(rel).ok()?,
            offset,
        })
    }

    /// As [`checksum_at`](Self::checksum_at), for the GSO request.
    pub(crate) fn gso_at(&self, start: u32) -> Option<GsoRequest> {
        let (kind, segment_size, end) = self.gso?;
        let rel = end.checked_sub(start)?;
        Some(GsoRequest {
            kind,
            segment_size,
            header_len: u16::try_from(rel).ok()?,
        })
    }
}

/// The Internet checksum's ones'-complement sum (RFC 1071) of the bytes in `parts`, read in
/// order as one byte string (a part may end on an odd byte), added to `initial`; folded to 16
/// bits, not complemented. For a driver that completes or checks checksums in software.
///
/// ```
/// use zcnet_buffer::offload::ones_complement_sum;
///
/// let whole = ones_complement_sum(0, [&[0x12u8, 0x34, 0x56][..], &[0x78]]);
/// assert_eq!(whole, ones_complement_sum(0, [&[0x12u8, 0x34, 0x56, 0x78][..]]));
/// assert_eq!(whole, 0x1234 + 0x5678);
/// ```
pub fn ones_complement_sum<'a>(initial: u16, parts: impl IntoIterator<Item = &'a [u8]>) -> u16 {
    let mut acc = u64::from(initial);
    let mut odd = false;
    for mut part in parts {
        if odd {
            if let Some((&low, rest)) = part.split_first() {
                acc += u64::from(low);
                part = rest;
                odd = false;
            }
        }
        let mut words = part.chunks_exact(2);
        for w in &mut words {
            acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [high] = words.remainder() {
            acc += u64::from(*high) << 8;
            odd = true;
        }
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}
