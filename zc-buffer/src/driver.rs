//! The [`Driver`] trait: what zcnet's drivers (virtio-net, TAP) implement and the stack consumes.
//!
//! It lives here, beside the frames, so that drivers depend on this crate only and keep working
//! when the stack changes.

use core::fmt;
use core::task::{Context, Poll};

use crate::chain::{RxChain, TxChain};
use crate::offload::GsoKinds;
use crate::rx::RxFrame;
use crate::tx::TxFrame;

bitflags::bitflags! {
    /// Checksums the device computes on transmit or verifies on receive, so the stack need not.
    ///
    /// The TCP and UDP transmit bits follow the *partial checksum* contract (Linux
    /// `CHECKSUM_PARTIAL`, virtio `NEEDS_CSUM`; see [`offload`](crate::offload)): the device
    /// completes only frames marked with
    /// [`TxFrame::set_checksum_partial`](crate::TxFrame::set_checksum_partial), whose checksum
    /// field the stack filled with the pseudo-header sum; an unmarked frame goes out as it is.
    /// On receive, the per-frame [`RxFrame::checksum_verified`](crate::RxFrame::checksum_verified)
    /// mark says which packets the device vouches for; the `*_RX` bits say the device verifies
    /// every packet of that kind.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct ChecksumOffloads: u16 {
        /// The device fills in IPv4 header checksums of transmitted frames.
        const IPV4_TX = 1 << 0;
        /// The device verified IPv4 header checksums of received frames.
        const IPV4_RX = 1 << 1;
        /// The device completes partial UDP checksums of frames so marked.
        const UDP_TX = 1 << 2;
        /// The device verified UDP checksums of received frames.
        const UDP_RX = 1 << 3;
        /// The device completes partial TCP checksums of frames so marked.
        const TCP_TX = 1 << 4;
        /// The device verified TCP checksums of received frames.
        const TCP_RX = 1 << 5;
        /// The device fills in ICMP/ICMPv6 checksums of transmitted frames.
        const ICMP_TX = 1 << 6;
        /// The device verified ICMP/ICMPv6 checksums of received frames.
        const ICMP_RX = 1 << 7;
    }
}

/// What frames the device carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Medium {
    /// Ethernet II frames (virtio-net, TAP).
    Ethernet,
    /// Bare IP packets (TUN, PPP).
    Ip,
}

/// What a driver can do, for the stack to size frames and skip work the device does.
///
/// Build it with [`Capabilities::new`] and the `with_*` methods, so that a driver keeps
/// compiling when a capability is added:
///
/// ```
/// use zcnet_buffer::{Capabilities, ChecksumOffloads, GsoKinds, Medium};
///
/// let caps = Capabilities::new(Medium::Ethernet, 1500)
///     .with_tx_headroom(12)
///     .with_checksum(ChecksumOffloads::TCP_TX | ChecksumOffloads::UDP_TX)
///     .with_gso(65_536, GsoKinds::TCPV4 | GsoKinds::TCPV6)
///     .with_rx_chains(true);
/// assert_eq!(caps.max_frame_len(), 1514);
/// assert!(caps.gso_kinds.contains(GsoKinds::TCPV6));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Capabilities {
    /// The frames the device carries.
    pub medium: Medium,
    /// The largest IP packet the link carries (1500 on standard Ethernet), excluding the
    /// link-layer header.
    pub mtu: usize,
    /// Bytes the driver writes in front of each frame it transmits (12 for a virtio-net header,
    /// 0 for TAP): the stack leaves at least this much headroom in a [`TxFrame`] after its
    /// headers.
    pub tx_headroom: usize,
    /// Checksum work the device does.
    pub checksum: ChecksumOffloads,
    /// The most frames worth handling per wakeup before yielding (a ring's size, say); `None`
    /// when the driver has no preference.
    pub max_burst: Option<usize>,
    /// The largest TCP super-segment the device segments on transmit (TSO), in bytes of IP
    /// packet (headers included; the link-layer header not counted): up to 65,535 for IPv4.
    /// 0: no segmentation offload, every frame must fit [`mtu`](Self::mtu). See
    /// [`offload`](crate::offload) for what the stack marks.
    pub gso_max_size: usize,
    /// The kinds of super-segment the device segments (empty when `gso_max_size` is 0).
    pub gso_kinds: GsoKinds,
    /// Whether [`Driver::poll_receive_chain`] may hand up packets larger than one slot (merged
    /// by the device: a large receive, a TAP read of a GSO packet). A driver that says `false`
    /// delivers one-frame chains only.
    pub rx_chains: bool,
}

impl Capabilities {
    /// A device carrying `medium` frames of up to `mtu` bytes of IP packet, with nothing else:
    /// no headroom, no checksum or segmentation offload, no chains, no burst preference.
    pub const fn new(medium: Medium, mtu: usize) -> Self {
        Self {
            medium,
            mtu,
            tx_headroom: 0,
            checksum: ChecksumOffloads::empty(),
            max_burst: None,
            gso_max_size: 0,
            gso_kinds: GsoKinds::empty(),
            rx_chains: false,
        }
    }

    /// The same, with [`tx_headroom`](Self::tx_headroom) `n`.
    pub const fn with_tx_headroom(mut self, n: usize) -> Self {
        self.tx_headroom = n;
        self
    }

    /// The same, with [`checksum`](Self::checksum) offloads `checksum`.
    pub const fn with_checksum(mut self, checksum: ChecksumOffloads) -> Self {
        self.checksum = checksum;
        self
    }

    /// The same, with [`max_burst`](Self::max_burst) `burst`.
    pub const fn with_max_burst(mut self, burst: Option<usize>) -> Self {
        self.max_burst = burst;
        self
    }

    /// The same, segmenting super-segments of `kinds` up to `max_size` bytes
    /// ([`gso_max_size`](Self::gso_max_size); 0, or empty `kinds`, turns it off).
    pub const fn with_gso(mut self, max_size: usize, kinds: GsoKinds) -> Self {
        if max_size == 0 || kinds.is_empty() {
            self.gso_max_size = 0;
            self.gso_kinds = GsoKinds::empty();
        } else {
            self.gso_max_size = max_size;
            self.gso_kinds = kinds;
        }
        self
    }

    /// The same, delivering (or not) received packets larger than a slot as chains
    /// ([`rx_chains`](Self::rx_chains)).
    pub const fn with_rx_chains(mut self, rx_chains: bool) -> Self {
        self.rx_chains = rx_chains;
        self
    }

    /// The largest frame the driver transmits or receives, link-layer header included
    /// (`mtu + 14` on Ethernet).
    pub fn max_frame_len(&self) -> usize {
        match self.medium {
            Medium::Ethernet => self.mtu + ETHERNET_HEADER_LEN,
            Medium::Ip => self.mtu,
        }
    }
}

/// Length of an Ethernet II header (destination, source, EtherType).
pub const ETHERNET_HEADER_LEN: usize = 14;

/// The device's link-layer address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HardwareAddress {
    /// A 48-bit Ethernet MAC address.
    Ethernet([u8; 6]),
    /// No link-layer address (an IP medium).
    Ip,
}

impl fmt::Display for HardwareAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HardwareAddress::Ethernet(m) => write!(
                f,
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            ),
            HardwareAddress::Ip => f.write_str("ip"),
        }
    }
}

/// Whether the link can carry frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkState {
    /// Frames go out and come in.
    Up,
    /// No carrier: transmits fail with [`TxError::LinkDown`].
    Down,
}

/// Why a driver refused a frame. The frame's slot has gone back to the pool; the stack counts the
/// drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxError {
    /// The frame is longer than [`Capabilities::max_frame_len`] (or than what the device takes).
    TooLong {
        /// The frame's length.
        len: usize,
        /// The largest the device takes.
        max: usize,
    },
    /// The frame's headroom is smaller than [`Capabilities::tx_headroom`].
    NoHeadroom,
    /// The link is down.
    LinkDown,
    /// The device failed (an I/O error from the host, a broken ring).
    Device,
    /// A chain of several frames given to a driver that transmits one-frame packets only (the
    /// default [`Driver::transmit_chain`]), or a GSO request the driver cannot honour.
    ChainUnsupported {
        /// Frames in the refused chain.
        frames: usize,
    },
}

impl fmt::Display for TxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TxError::TooLong { len, max } => {
                write!(f, "frame of {len} bytes exceeds the device's {max}")
            }
            TxError::NoHeadroom => f.write_str("frame lacks the driver's headroom"),
            TxError::LinkDown => f.write_str("link is down"),
            TxError::Device => f.write_str("device error"),
            TxError::ChainUnsupported { frames } => {
                write!(f, "the driver does not transmit a chain of {frames} frames")
            }
        }
    }
}

impl core::error::Error for TxError {}

/// A received packet as [`Driver::poll_receive_packet`] hands it up.
///
/// The chain variant is large and the frame variant small: a driver returns the frame written
/// in place, and a caller that matches on the result at once moves no more than the frame
/// (there is no heap to box the chain into in a kernel).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum RxPacket {
    /// A packet in one slot: the usual case.
    Frame(RxFrame),
    /// A packet over several slots, merged by the device (see
    /// [`Driver::poll_receive_chain`] for the layout).
    Chain(RxChain),
}

impl From<RxChain> for RxPacket {
    /// A chain of one frame becomes that frame; any other stays a chain.
    fn from(mut chain: RxChain) -> Self {
        if chain.frame_count() == 1 {
            if let Some(frame) = chain.pop_front() {
                return RxPacket::Frame(frame);
            }
        }
        RxPacket::Chain(chain)
    }
}

/// A network device that moves pool slots, never copies.
///
/// # The contract
///
/// * **Receive.** [`poll_receive`](Self::poll_receive) first tops up the device's RX ring from
///   the pool, then returns the oldest completed frame as an [`RxFrame`]. After *each*
///   completion the driver posts a fresh FREE slot in the completed one's place
///   ([`FramePool::try_alloc_rx`](crate::FramePool::try_alloc_rx)), so frames an application
///   holds use up the pool's spare slots, never the ring. When the pool has no slot to post,
///   the driver registers the caller's waker with
///   [`FramePool::poll_alloc_rx`](crate::FramePool::poll_alloc_rx): the next frame dropped
///   anywhere wakes it, and the next `poll_receive` refills. A frame that arrives while the ring
///   is empty is dropped by the device and counted, never queued without bound.
/// * **Wakers.** `Pending` from a `poll_*` method means the caller's waker is registered and
///   will be woken when that call may make progress (a device interrupt, a TX completion, a
///   returned slot) — never "poll me again soon".
/// * **Transmit.** [`poll_transmit_frame`](Self::poll_transmit_frame) returns a [`TxFrame`] only
///   when the device can take it now (its TX queue has room and the pool a slot); otherwise it
///   registers the waker for the TX completion that makes room. [`transmit`](Self::transmit)
///   takes the frame; the driver keeps it as an [`InFlight`](crate::InFlight) until completion
///   and drops it then, at the latest in the first [`flush`](Self::flush) after the device
///   completed it (a socket waiting to resend a retained frame is woken by that drop). A driver
///   never silently drops a frame it accepted.
/// * **Doorbells.** A driver may batch the device notifications its `poll_*` and
///   [`transmit`](Self::transmit) calls would cause (virtio's doorbells) and ring them in
///   [`flush`](Self::flush), which the stack calls after every run of such calls.
///   A driver never waits on a queue of its device without having told the device what is
///   pending there: a `poll_*` method that returns `Pending` has notified that queue first.
/// * **Retained frames.** A TCP socket keeps its frames until acknowledged and hands the very
///   slot to [`transmit`](Self::transmit), as a retained [`TxFrame`]
///   ([`is_retained`](TxFrame::is_retained)) that did not come from
///   [`poll_transmit_frame`](Self::poll_transmit_frame). The stack asks
///   [`poll_transmit_ready`](Self::poll_transmit_ready) first, which answers `Ready` when the
///   device's queue has room for one more frame. The driver treats such a frame like any other
///   (it never changes the bytes past the headers it adds); dropping it, or its
///   [`InFlight`](crate::InFlight), hands the slot back to the socket.
///
/// # Example
///
/// A loopback device that hands every transmitted frame back as received — the smallest
/// complete implementation (it copies, as a loopback must; real drivers do not):
///
/// ```
/// use core::task::{Context, Poll, Waker};
/// use zcnet_buffer::*;
///
/// struct Loopback {
///     pool: &'static FramePool,
///     ring: Option<PostedSlot>,
///     done: Option<RxFrame>,
/// }
///
/// impl Driver for Loopback {
///     fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
///         if self.ring.is_none() {
///             if let Poll::Ready(slot) = self.pool.poll_alloc_rx(cx) {
///                 self.ring = Some(slot);
///             }
///         }
///         match self.done.take() {
///             Some(frame) => Poll::Ready(frame),
///             None => Poll::Pending, // a real driver registers its RX interrupt waker here
///         }
///     }
///     fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
///         self.pool.poll_alloc_tx(cx)
///     }
///     fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
///         let mut slot = self.ring.take().ok_or(TxError::Device)?;
///         let n = ledger::copy(CopySite::Driver, slot.buffer_mut(), &frame);
///         self.done = Some(slot.complete(n).map_err(|_| TxError::Device)?);
///         drop(frame.into_device()); // "transmitted" at once
///         Ok(())
///     }
///     fn capabilities(&self) -> Capabilities {
///         Capabilities::new(Medium::Ethernet, 1500)
///     }
///     fn hardware_address(&self) -> HardwareAddress {
///         HardwareAddress::Ethernet([2, 0, 0, 0, 0, 1])
///     }
///     fn poll_link_state(&mut self, _cx: &mut Context<'_>) -> LinkState {
///         LinkState::Up
///     }
/// }
///
/// static POOL: StaticPool<8, 2048> = StaticPool::new();
/// let pool = POOL.init(DEFAULT_HEADROOM).unwrap();
/// let mut dev = Loopback { pool, ring: None, done: None };
/// let mut cx = Context::from_waker(Waker::noop());
///
/// assert!(dev.poll_receive(&mut cx).is_pending()); // posts one slot
/// let Poll::Ready(mut tx) = dev.poll_transmit_frame(&mut cx) else { unreachable!() };
/// tx.append(5).unwrap().copy_from_slice(b"hello");
/// dev.transmit(tx).unwrap();
/// let Poll::Ready(rx) = dev.poll_receive(&mut cx) else { unreachable!() };
/// assert_eq!(&rx[..], b"hello");
/// drop(rx);
/// drop(dev);
/// assert_eq!(pool.audit().unwrap().free, 8);
/// ```
pub trait Driver {
    /// Refills the RX ring, then returns the next received frame, or registers `cx`'s waker for
    /// the next RX completion (and for a returned slot if the ring could not be refilled).
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame>;

    /// Returns a frame the device can transmit right away, or registers `cx`'s waker for the TX
    /// completion (or returned slot) that makes one available.
    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame>;

    /// `Ready` when the device can take one more frame now (its TX queue has room), for a frame
    /// the caller already holds (a retained one); otherwise registers `cx`'s waker for the TX
    /// completion that makes room.
    ///
    /// The default asks [`poll_transmit_frame`](Self::poll_transmit_frame) and drops the frame
    /// it gets: right, but it needs a free slot besides the room. Drivers override it to check
    /// their queue alone.
    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_transmit_frame(cx).map(drop)
    }

    /// Hands `frame` (its bytes are the whole link-layer frame) to the device. On an error the
    /// frame's slot has gone back to the pool (a retained frame's to its socket).
    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError>;

    /// Tells the device about everything handed to it since the last flush: drivers that batch
    /// doorbells (device notifications) ring them here, once per queue, instead of once per
    /// frame or refill. The caller flushes after every run of [`transmit`](Self::transmit) and
    /// [`poll_receive`](Self::poll_receive) calls: the stack at the end of each ingress run,
    /// each egress run, and each socket call that transmits by itself (a zero-copy datagram's
    /// `send_to`). A frame transmitted and never followed by a flush may wait for the next one.
    ///
    /// The default does nothing: right for drivers that notify their device as they go.
    fn flush(&mut self) {}

    /// Receive interrupt moderation, for a caller with a timer: asked right after a
    /// `poll_receive*` call returned `Pending`. `Some(delay)`: the driver has turned its receive
    /// interrupt off again (its `Pending` had asked for it), and the caller polls again once
    /// `delay` has passed, from a timer, whether or not it was woken meanwhile; `None`: the
    /// `Pending` stands as it is, the caller waits for its waker.
    ///
    /// A driver answers `Some` only after a stretch that received a lot (a bulk stream, whose
    /// next packets are likely to come within `delay`): instead of an interrupt per burst the
    /// stream is polled from the timer, and the interrupt is asked for again when a deferred
    /// poll finds little or nothing. Request/response traffic, a packet or two per wake, and an
    /// idle link are never deferred, so they pay no latency and an idle link no wakeups.
    ///
    /// Only a caller that asks gets deferred: a driver never leaves its interrupt off by itself
    /// (its `Pending` always arms it, as the waker rule above says), and a caller that asks
    /// commits itself to poll again after the delay it gets back. The stack asks right after
    /// each ingress run's last `poll_receive*` call when that call returned `Pending`.
    ///
    /// The default answers `None`: right for drivers without interrupts to moderate (TAP).
    fn receive_deferral(&mut self) -> Option<core::time::Duration> {
        None
    }

    /// What the device can do. Constant for the driver's lifetime.
    fn capabilities(&self) -> Capabilities;

    /// The device's link-layer address.
    fn hardware_address(&self) -> HardwareAddress;

    /// The link state now; registers `cx`'s waker for the next change.
    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState;

    /// [`poll_receive`](Self::poll_receive) for a stack that takes chains: the next received
    /// packet as an [`RxChain`], with the same refill and waker rules.
    ///
    /// An ordinary packet is a one-frame chain. A driver whose
    /// [`Capabilities::rx_chains`] is true may deliver a packet larger than one slot (merged
    /// by the device) as several frames: the head frame starts with the link-layer header and
    /// carries the packet's marks ([`RxFrame::checksum_verified`], [`RxFrame::gso_info`]), the
    /// tails continue the packet's bytes in order (any split; a tail's own marks mean
    /// nothing). The IP header's length fields describe the whole chain.
    ///
    /// The default wraps [`poll_receive`](Self::poll_receive)'s frame in a one-frame chain.
    fn poll_receive_chain(&mut self, cx: &mut Context<'_>) -> Poll<RxChain> {
        self.poll_receive(cx).map(RxChain::from_frame)
    }

    /// [`poll_receive_chain`](Self::poll_receive_chain) without a chain for a packet of one
    /// frame: the next received packet as [`RxPacket::Frame`], or [`RxPacket::Chain`] for a
    /// packet over several slots, with the same refill and waker rules. This is what a stack
    /// that takes chains calls: building a chain (48 frame places, about 1 KiB) for each
    /// ordinary frame and moving it around costs more than the rest of the driver's work.
    ///
    /// The default takes [`poll_receive_chain`](Self::poll_receive_chain)'s chain apart (a
    /// chain of one frame becomes that frame): right for every driver, and the one-frame
    /// chain's cost is still paid. A driver that delivers chains overrides it; a wrapper
    /// around another driver forwards it.
    fn poll_receive_packet(&mut self, cx: &mut Context<'_>) -> Poll<RxPacket> {
        self.poll_receive_chain(cx).map(RxPacket::from)
    }

    /// [`transmit`](Self::transmit) for a packet over several frames (a TCP super-segment).
    ///
    /// The chain, in order, is the whole link-layer frame: the head frame has the driver's
    /// [`tx_headroom`](Capabilities::tx_headroom) in front and holds the link-layer, IP and
    /// TCP headers, possibly followed by payload; the tail frames hold payload (their headroom
    /// is not used). The head's marks describe the packet: a
    /// [`ChecksumPartial`](crate::ChecksumPartial) for the device to complete, and for a
    /// packet longer than [`max_frame_len`](Capabilities::max_frame_len), a
    /// [`GsoRequest`](crate::GsoRequest) (within [`gso_max_size`](Capabilities::gso_max_size)).
    /// The driver keeps the chain ([`TxChain::into_device`]) until the device completes the
    /// whole packet; on an error every slot has gone back (a retained frame's to its socket).
    ///
    /// The default sends a one-frame chain through [`transmit`](Self::transmit) and refuses a
    /// longer one with [`TxError::ChainUnsupported`] (an empty chain is refused the same way,
    /// with `frames: 0`).
    fn transmit_chain(&mut self, chain: TxChain) -> Result<(), TxError> {
        let frames = chain.frame_count();
        if frames != 1 {
            return Err(TxError::ChainUnsupported { frames });
        }
        match chain.into_iter().next() {
            Some(frame) => self.transmit(frame),
            None => Err(TxError::ChainUnsupported { frames: 0 }),
        }
    }
}
