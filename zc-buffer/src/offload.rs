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
//!   (the device computes each segment's checksum), whose pseudo-header sum counts the whole
//!   super-segment's TCP length, as Linux's own TCP writes it (its segmentation adjusts the sum
//!   by the difference to each segment's length). The device cuts the payload into MSS-sized
//!   pieces, each behind a copy of the headers with the IPv4 total length / IPv6 payload
//!   length, the IPv4 ID (incremented per segment), the TCP sequence number advanced, FIN and
//!   PSH only on the last segment, CWR only on the first, and each segment's checksums
//!   completed.
//! * **Receive.** A driver whose [`Capabilities::rx_chains`](crate::Capabilities) is set may
//!   hand up packets larger than one slot as an [`RxChain`](crate::RxChain)
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

/// The marks of a received frame, packed into the spare bytes of the
/// [`RxFrame`](crate::RxFrame) lease (which stays 24 bytes): the verified bit, the GSO kind,
/// the GSO segment size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct RxMarks {
    /// Bit 0: checksum verified; bits 1-2: GSO kind (0 none, 1 TCPv4, 2 TCPv6).
    pub(crate) flags: u8,
    pub(crate) gso_size: u16,
}

impl RxMarks {
    const VERIFIED: u8 = 1;
    const KIND_SHIFT: u8 = 1;
    const KIND_MASK: u8 = 0b110;

    pub(crate) fn verified(self) -> bool {
        self.flags & Self::VERIFIED != 0
    }

    pub(crate) fn set_verified(&mut self, on: bool) {
        self.flags = (self.flags & !Self::VERIFIED) | if on { Self::VERIFIED } else { 0 };
    }

    pub(crate) fn gso(self) -> Option<GsoInfo> {
        let kind = match (self.flags & Self::KIND_MASK) >> Self::KIND_SHIFT {
            1 => GsoKind::TcpV4,
            2 => GsoKind::TcpV6,
            _ => return None,
        };
        Some(GsoInfo {
            kind,
            segment_size: self.gso_size,
        })
    }

    pub(crate) fn set_gso(&mut self, info: Option<GsoInfo>) {
        let (kind, size) = match info {
            None => (0, 0),
            Some(GsoInfo {
                kind: GsoKind::TcpV4,
                segment_size,
            }) => (1, segment_size),
            Some(GsoInfo {
                kind: GsoKind::TcpV6,
                segment_size,
            }) => (2, segment_size),
        };
        self.flags = (self.flags & !Self::KIND_MASK) | (kind << Self::KIND_SHIFT);
        self.gso_size = size;
    }
}

/// The marks of a frame to transmit (stored in the [`TxFrame`](crate::TxFrame) lease), with
/// offsets counted from the frame's first data byte: [`grow`](Self::grow) and
/// [`shrink`](Self::shrink) keep them on the same bytes as the data start moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct TxMarks {
    /// Bit 0: a partial checksum; bit 1: a GSO request; bit 2: the request is TCPv6.
    flags: u8,
    csum_start: u16,
    csum_offset: u16,
    gso_size: u16,
    header_len: u16,
}

impl TxMarks {
    const CSUM: u8 = 1;
    const GSO: u8 = 2;
    const V6: u8 = 4;

    pub(crate) fn is_empty(&self) -> bool {
        self.flags & (Self::CSUM | Self::GSO) == 0
    }

    pub(crate) fn checksum(&self) -> Option<ChecksumPartial> {
        (self.flags & Self::CSUM != 0).then_some(ChecksumPartial {
            start: self.csum_start,
            offset: self.csum_offset,
        })
    }

    pub(crate) fn set_checksum(&mut self, mark: Option<ChecksumPartial>) {
        match mark {
            None => self.flags &= !Self::CSUM,
            Some(m) => {
                self.flags |= Self::CSUM;
                self.csum_start = m.start;
                self.csum_offset = m.offset;
            }
        }
    }

    pub(crate) fn gso(&self) -> Option<GsoRequest> {
        (self.flags & Self::GSO != 0).then_some(GsoRequest {
            kind: if self.flags & Self::V6 != 0 {
                GsoKind::TcpV6
            } else {
                GsoKind::TcpV4
            },
            segment_size: self.gso_size,
            header_len: self.header_len,
        })
    }

    pub(crate) fn set_gso(&mut self, request: Option<GsoRequest>) {
        self.flags &= !(Self::GSO | Self::V6);
        if let Some(r) = request {
            self.flags |= Self::GSO;
            if r.kind == GsoKind::TcpV6 {
                self.flags |= Self::V6;
            }
            self.gso_size = r.segment_size;
            self.header_len = r.header_len;
        }
    }

    /// `n` bytes were put in front of the data: the marks move back with their bytes; one that
    /// would no longer fit its 16 bits is dropped.
    pub(crate) fn grow(&mut self, n: usize) {
        let Ok(n) = u16::try_from(n) else {
            *self = Self::default();
            return;
        };
        match self.csum_start.checked_add(n) {
            Some(v) => self.csum_start = v,
            None => self.flags &= !Self::CSUM,
        }
        match self.header_len.checked_add(n) {
            Some(v) => self.header_len = v,
            None => self.flags &= !(Self::GSO | Self::V6),
        }
    }

    /// The first `n` data bytes were hidden: a mark whose bytes went with them is dropped.
    pub(crate) fn shrink(&mut self, n: usize) {
        let n = u16::try_from(n).unwrap_or(u16::MAX);
        match self.csum_start.checked_sub(n) {
            Some(v) => self.csum_start = v,
            None => self.flags &= !Self::CSUM,
        }
        match self.header_len.checked_sub(n) {
            Some(v) => self.header_len = v,
            None => self.flags &= !(Self::GSO | Self::V6),
        }
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
