//! [`VirtioNet`]: the [`Driver`] for a virtio-net device, over virtio-drivers' `Transport` and
//! this crate's split virtqueues ([`Ring`]).
//!
//! # Where a slot's bytes go
//!
//! ```text
//!  slot: | headroom − 12 | virtio-net header (12) | Ethernet frame ...                 |
//!        0               rx_offset                headroom  (where an RxFrame starts)
//! ```
//!
//! * **RX**: each posted slot is given to the device from `rx_offset = headroom − header`, so the
//!   device writes the virtio-net header into the end of the headroom and the frame exactly where
//!   [`PostedSlot::complete_range`] makes the [`RxFrame`] start. No copy, no bounce buffer.
//! * **TX**: the stack builds the frame in a [`TxFrame`] with headroom left in front; the driver
//!   pushes the virtio-net header into that headroom and hands header and frame to the device
//!   as one descriptor. The header is zero but for a frame marked
//!   [checksum-partial](TxFrame::checksum_partial) when `VIRTIO_NET_F_CSUM` was negotiated:
//!   `NEEDS_CSUM` with the mark's `csum_start` / `csum_offset` (without that feature the driver
//!   completes such a checksum itself). The frame stays an [`InFlight`] lease until the device
//!   returns it.
//! * **TX chains** ([`Driver::transmit_chain`]): a [`TxChain`] goes to the device as one
//!   descriptor list, one descriptor per frame, the header in the head frame's headroom; a
//!   packet over the MTU marked with a [`GsoRequest`] gets the GSO type, `hdr_len` and
//!   `gso_size` in its header for the device to segment (`HOST_TSO4` / `HOST_TSO6`).
//!   Descriptors, not packets, are what the TX queue runs out of.
//! * **Merged RX buffers** ([`VirtioConfig::large_receive`]): with `MRG_RXBUF`, a packet spans
//!   `num_buffers` posted slots; the first holds the header and the Ethernet frame's start, the
//!   others continue from their buffer's first byte. The driver gathers them into an
//!   [`RxChain`] (the head carrying the checksum and [`GsoInfo`] marks) for
//!   [`Driver::poll_receive_chain`]; each slot is replaced in the ring as it is taken.
//! * **RX checksums**: with `VIRTIO_NET_F_GUEST_CSUM`, a frame whose header says `DATA_VALID`
//!   (the device checked it) or `NEEDS_CSUM` (a local sender left it partial) is marked
//!   [verified](RxFrame::checksum_verified); any other is left for the stack to check.
//!
//! # Notifications
//!
//! Posting a buffer only publishes it in the avail ring. The device is notified (a doorbell, on
//! PCI a register write that exits to the hypervisor) at a flush point — [`Driver::flush`],
//! and before the driver waits on the device (a `poll_*` about to return `Pending`) — and only
//! if the device asked for it (the event-index rule, in [`Ring::kick_needed`]). Until its user
//! first calls [`Driver::flush`], the driver notifies after every transmit instead, still under
//! that rule, so a user that never flushes still gets its frames out; from the first flush on
//! it counts on one after every run of transmits.
//!
//! Interrupts: the RX queue's used-buffer notification is off while a batch is being handled
//! and asked for again only when [`Driver::poll_receive`] finds nothing and is about to return
//! `Pending`. With [`VirtioConfig::rx_recheck`] (1 by default) a pass that handed frames up
//! does not ask for it when it drains the queue: it wakes its caller to look again after the
//! other tasks ran, and only a pass after that many that found nothing arms the interrupt, so
//! a steady stream is polled, not interrupted per batch. With [`VirtioConfig::rx_defer`] a
//! caller with a timer also waits out the pauses between a bulk sender's bursts: after a
//! stretch of at least [`VirtioConfig::rx_defer_bytes`], [`Driver::receive_deferral`] takes the
//! interrupt request back and the caller polls again after the delay. TX completions
//! interrupt only while the stack waits for room (a `poll_transmit_*` returning `Pending`), or
//! for a retained frame the device still has ([`InFlight::is_watched`]: a retransmission that
//! must wait for the frame's return; the interrupt wakes the sender, whose flush takes the
//! frame back).
//!
//! # The token tables
//!
//! A [`Ring`] names each buffer chain by its head descriptor, always below `QUEUE`.
//! `rx_slots[token]` holds the [`PostedSlot`] the device is filling and `tx_frames[token]` the
//! [`InFlight`] frame it is sending. Both are bounded by the queue size, allocated once, and
//! looked up in O(1).

use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use core::task::{Context, Poll, Waker};
use core::time::Duration;

use heapless::Vec;
use virtio_drivers::transport::{DeviceStatus, DeviceType, Transport};
use virtio_drivers::{BufferDirection, Hal, PAGE_SIZE};
use zcnet_buffer::offload::ones_complement_sum;
use zcnet_buffer::{
    Capabilities, ChecksumOffloads, ChecksumPartial, Driver, FramePool, GsoInfo, GsoKind, GsoKinds,
    GsoRequest, HardwareAddress, InFlight, LinkState, Medium, PostedSlot, RxChain, RxFrame,
    RxPacket, TxChain, TxError, TxFrame, ETHERNET_HEADER_LEN, MAX_CHAIN_SEGMENTS,
};

use crate::irq::{Counters, VirtioIrq};
use crate::ring::Ring;

/// The IP MTU of the link when the device advises none (no `VIRTIO_NET_F_MTU`), or advises one
/// the pool's slots cannot hold: standard Ethernet.
pub const MTU: usize = 1500;

/// The smallest receive buffer the driver posts: a 1514-byte frame behind the 12-byte
/// virtio-net header, as the virtio specification asks of drivers without merged receive
/// buffers. A pool slot must offer this much from `headroom − header` to its end.
pub const MIN_RX_BUFFER: usize = 1526;

/// The smallest MTU the driver accepts from the device (IPv4's minimum).
const MIN_DEVICE_MTU: usize = 68;

/// Feature bits (virtio 1.x, sections 5.1.3 and 6). Only these are ever accepted; whatever the
/// device does not offer is not used.
mod feature {
    /// The device completes partial checksums of frames the driver sends (`NEEDS_CSUM`).
    pub(super) const CSUM: u64 = 1 << 0;
    /// The driver takes received frames with partial checksums (`NEEDS_CSUM`) and the device
    /// marks the frames whose checksum it checked (`DATA_VALID`).
    pub(super) const GUEST_CSUM: u64 = 1 << 1;
    /// The driver takes merged TCPv4 packets (needs `GUEST_CSUM`; here also `MRG_RXBUF`).
    pub(super) const GUEST_TSO4: u64 = 1 << 7;
    /// The driver takes merged TCPv6 packets.
    pub(super) const GUEST_TSO6: u64 = 1 << 8;
    /// The device segments TCPv4 super-segments (needs `CSUM`).
    pub(super) const HOST_TSO4: u64 = 1 << 11;
    /// The device segments TCPv6 super-segments (needs `CSUM`).
    pub(super) const HOST_TSO6: u64 = 1 << 12;
    /// A received packet may span several receive buffers (`num_buffers` in its header).
    pub(super) const MRG_RXBUF: u64 = 1 << 15;
    /// The device advises an MTU (configuration field `mtu`).
    pub(super) const MTU: u64 = 1 << 3;
    /// The device has a MAC address (configuration field `mac`).
    pub(super) const MAC: u64 = 1 << 5;
    /// The configuration field `status` (link up) is valid.
    pub(super) const STATUS: u64 = 1 << 16;
    /// The `used_event` / `avail_event` fields suppress notifications.
    pub(super) const RING_EVENT_IDX: u64 = 1 << 29;
    /// virtio 1.0 or later (a 12-byte virtio-net header).
    pub(super) const VERSION_1: u64 = 1 << 32;
}

/// Offsets in the virtio-net configuration space.
mod config {
    /// `u8[6]`: the MAC address.
    pub(super) const MAC: usize = 0;
    /// `le16`: bit 0 is link up.
    pub(super) const STATUS: usize = 6;
    /// `le16`: the MTU the device advises.
    pub(super) const MTU: usize = 10;
    /// `status` bit: the link is up (`VIRTIO_NET_S_LINK_UP`).
    pub(super) const S_LINK_UP: u16 = 1;
}

/// The virtio-net header's fields (virtio 1.x, 5.1.6): byte offsets and flag values.
mod hdr {
    /// `u8`: `NEEDS_CSUM`, `DATA_VALID`.
    pub(super) const FLAGS: usize = 0;
    /// `u8`: the segmentation asked for, or done (`GSO_NONE` = 0).
    pub(super) const GSO_TYPE: usize = 1;
    /// `le16`: bytes of link, IP and TCP headers (transmit, with a GSO type).
    pub(super) const HDR_LEN: usize = 2;
    /// `le16`: TCP payload bytes per segment.
    pub(super) const GSO_SIZE: usize = 4;
    /// `le16`: where the checksummed bytes start, from the Ethernet header's first byte.
    pub(super) const CSUM_START: usize = 6;
    /// `le16`: where the checksum goes, from `csum_start`.
    pub(super) const CSUM_OFFSET: usize = 8;
    /// `flags` bit: the checksum is partial; the other side completes it (or, received, may
    /// rely on the packet never having crossed a wire).
    pub(super) const F_NEEDS_CSUM: u8 = 1;
    /// `flags` bit, received: the device checked the packet's checksums.
    pub(super) const F_DATA_VALID: u8 = 2;
    /// `le16`, received with `MRG_RXBUF`: how many receive buffers the packet spans.
    pub(super) const NUM_BUFFERS: usize = 10;
    /// `gso_type`: TCP over IPv4.
    pub(super) const GSO_TCPV4: u8 = 1;
    /// `gso_type`: TCP over IPv6.
    pub(super) const GSO_TCPV6: u8 = 4;
    /// `gso_type` bit: the packet has ECN's CWR set.
    pub(super) const GSO_ECN: u8 = 0x80;
}

/// The largest IP packet of a TCP super-segment, either way (IPv4's total length field).
const GSO_MAX_SIZE: usize = 65_535;

/// How many times [`VirtioNet::new`] reads the device status waiting for a reset to finish.
const RESET_READS: u32 = 1_000_000;

/// Virtqueue indices of the first queue pair.
const RX_QUEUE: u16 = 0;
const TX_QUEUE: u16 = 1;

/// Why [`VirtioNet::new`] refused a device or pool. After any of these the device has been
/// marked `FAILED` (if it was reached at all) and nothing was posted to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum VirtioError {
    /// The transport's device is not a network device.
    NotNetwork,
    /// The device's status did not read back as 0 after the reset (a million reads).
    ResetTimeout,
    /// The device did not accept the feature set the driver chose (`FEATURES_OK` did not stick).
    FeaturesRejected,
    /// The device offers no MAC address (`VIRTIO_NET_F_MAC`), and the driver does not invent
    /// one.
    NoMacAddress,
    /// The configuration space could not be read.
    ConfigSpace,
    /// The virtqueue is already set up on the device.
    QueueInUse {
        /// The virtqueue's index.
        queue: u16,
    },
    /// The device's virtqueue is smaller than the driver's `QUEUE`.
    QueueTooSmall {
        /// The virtqueue's index.
        queue: u16,
        /// The largest size the device offers.
        max: u32,
        /// The driver's `QUEUE`.
        needed: usize,
    },
    /// The `Hal`'s `dma_alloc` returned no memory for a virtqueue.
    DmaAlloc,
    /// The pool's headroom cannot hold the virtio-net header in front of a frame.
    HeadroomTooSmall {
        /// The pool's headroom.
        headroom: usize,
        /// The virtio-net header's size.
        needed: usize,
    },
    /// The pool's slots are too small for a full frame behind the virtio-net header.
    SlotTooSmall {
        /// The pool's slot size.
        slot_size: usize,
        /// The smallest slot that works with this pool's headroom.
        needed: usize,
    },
    /// The pool had no free slot for the start-up check.
    PoolExhausted,
    /// The `Hal` gave the device another address for a pool slot than the pool's address map
    /// does: the `Hal` copies through a bounce buffer (or the pool's [`zcnet_buffer::AddressMap`]
    /// is wrong). Zero-copy needs the pool's memory to *be* the DMA memory.
    DmaAddressMismatch {
        /// The device address the pool's map gives for the slot.
        pool: u64,
        /// The address the `Hal`'s `share` returned.
        hal: u64,
    },
}

impl fmt::Display for VirtioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            VirtioError::NotNetwork => f.write_str("the device is not a network device"),
            VirtioError::ResetTimeout => f.write_str("the device did not finish its reset"),
            VirtioError::FeaturesRejected => {
                f.write_str("the device did not accept the driver's features")
            }
            VirtioError::NoMacAddress => f.write_str("the device offers no MAC address"),
            VirtioError::ConfigSpace => f.write_str("the configuration space could not be read"),
            VirtioError::QueueInUse { queue } => write!(f, "virtqueue {queue} is already in use"),
            VirtioError::QueueTooSmall { queue, max, needed } => write!(
                f,
                "virtqueue {queue} holds at most {max} entries, the driver needs {needed}"
            ),
            VirtioError::DmaAlloc => f.write_str("the Hal allocated no DMA memory for a queue"),
            VirtioError::HeadroomTooSmall { headroom, needed } => write!(
                f,
                "pool headroom of {headroom} bytes cannot hold the {needed}-byte virtio-net header"
            ),
            VirtioError::SlotTooSmall { slot_size, needed } => write!(
                f,
                "pool slots of {slot_size} bytes are too small for a full frame (need {needed})"
            ),
            VirtioError::PoolExhausted => f.write_str("the pool has no free slot"),
            VirtioError::DmaAddressMismatch { pool, hal } => write!(
                f,
                "the Hal shares pool memory at {hal:#x}, the pool maps it to {pool:#x}: \
                 a copying Hal or a wrong address map"
            ),
        }
    }
}

impl core::error::Error for VirtioError {}

/// What [`VirtioNet::with_config`] negotiates beyond what every driver needs, and how it
/// waits for received frames. Build it from
/// [`VirtioConfig::new`] (everything the device offers is used) and the `with_*` methods.
///
/// ```
/// use zcnet_virtio::VirtioConfig;
///
/// // For a stack that verifies every received checksum itself and marks no frame partial.
/// let config = VirtioConfig::new().with_checksum_offload(false);
/// assert!(!config.checksum_offload);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct VirtioConfig {
    /// Checksum offload, when the device offers it (on by default):
    ///
    /// * `VIRTIO_NET_F_CSUM`: frames the stack marks
    ///   [checksum-partial](zcnet_buffer::TxFrame::checksum_partial) go out with `NEEDS_CSUM`
    ///   and the device completes their checksum; [`Driver::capabilities`] then advertises
    ///   [`TCP_TX`](zcnet_buffer::ChecksumOffloads::TCP_TX) and
    ///   [`UDP_TX`](zcnet_buffer::ChecksumOffloads::UDP_TX).
    /// * `VIRTIO_NET_F_GUEST_CSUM`: received frames the device checked (`DATA_VALID`), or that
    ///   a local sender handed over with a partial checksum (`NEEDS_CSUM`: their checksum field
    ///   holds only the pseudo-header sum), are marked
    ///   [verified](zcnet_buffer::RxFrame::checksum_verified).
    ///
    /// Turn it off for a stack that ignores the verified mark: with `GUEST_CSUM` it would
    /// receive partial checksums it takes for wrong ones. Off, or without the device's
    /// `CSUM`, a frame marked partial anyway gets its checksum completed by the driver.
    pub checksum_offload: bool,
    /// Segmentation offload on transmit (`VIRTIO_NET_F_HOST_TSO4` / `HOST_TSO6`), when the
    /// device offers it and checksum offload is on (on by default): [`Driver::capabilities`]
    /// then advertises TCP super-segments of up to 65,535 bytes, which the stack hands over as
    /// [`TxChain`]s ([`Driver::transmit_chain`]) marked with a
    /// [`GsoRequest`], one descriptor per frame.
    pub tso: bool,
    /// Large receive (`VIRTIO_NET_F_MRG_RXBUF` with `GUEST_TSO4` / `GUEST_TSO6`), when the
    /// device offers it and checksum offload is on (off by default): the device merges TCP
    /// segments into packets of up to 64 KiB spread over several receive buffers, which the
    /// driver hands up as [`RxChain`]s from [`Driver::poll_receive_chain`]
    /// ([`Capabilities::rx_chains`]). Turn it on only for a stack that receives chains:
    /// [`Driver::poll_receive`] drops such a packet (counted in `rx_chains_dropped`).
    pub large_receive: bool,
    /// How many more times the driver looks at a drained RX queue before asking for an
    /// interrupt (1 by default).
    ///
    /// When a [`Driver::poll_receive`] pass that handed frames up finds the queue empty, the
    /// driver wakes its caller at once and returns `Pending` with RX interrupts still off, up
    /// to `rx_recheck` times in a row; a pass that finds a frame starts the count again, and
    /// only after `rx_recheck` passes that found nothing does a pass ask for the interrupt.
    /// Under a stream of frames the queue is then polled between the other tasks' runs instead
    /// of interrupting once per batch; at the end of the stream it costs `rx_recheck` passes
    /// that find nothing. 0: every drained pass asks for the interrupt.
    pub rx_recheck: u8,
    /// Receive interrupt moderation: how long a caller that asks
    /// ([`Driver::receive_deferral`]) waits before it polls a drained RX queue again, with the
    /// RX interrupt left off, after a stretch that received at least
    /// [`rx_defer_bytes`](Self::rx_defer_bytes) (`Duration::ZERO`, the default: never defer).
    ///
    /// A stretch runs from the point the RX interrupt was last asked for (or the last
    /// deferral) to the drained pass that asks for it again. A bulk sender's bursts come with
    /// pauses between them longer than a pass ([`rx_recheck`](Self::rx_recheck) does not wait
    /// them out), so without deferral each burst costs an interrupt. With it, the pass that
    /// drained a large stretch hands the queue to the caller's timer instead: the deferred
    /// poll takes what came in meanwhile, and a stretch that again reaches `rx_defer_bytes`
    /// defers again, so a steady stream is polled from the timer and interrupts only at its
    /// start. A stretch below the threshold (the stream ended, request/response traffic, an
    /// idle link) keeps the interrupt armed, as without deferral: no latency for small
    /// exchanges, no wakeups on an idle link. The price is latency for the packets of a bulk
    /// stream that arrive during the delay (at most the delay plus the caller's timer
    /// granularity) and one timer wakeup per deferral, one of which, at the stream's end,
    /// finds nothing.
    ///
    /// The caller's timer rounds the delay up to its granularity: zcnet's executor to its tick,
    /// 1 ms unless built with `Executor::with_tick`. A millisecond is longer than the RX queue
    /// lasts under a fast stream (256 buffers of 2 KiB fill in about 0.7 ms at 6 Gbit/s), and
    /// the queue then sits full while the guest waits: give the executor a tick of some
    /// microseconds when deferring (the example kernel runs 10 µs ticks and defers 50 µs).
    pub rx_defer: Duration,
    /// The bytes a stretch must receive for its drained pass to be deferred
    /// ([`rx_defer`](Self::rx_defer)), counted as the device wrote them (virtio-net headers
    /// included); 64 KiB by default, about one large-receive packet, far above what
    /// request/response traffic brings per wake.
    pub rx_defer_bytes: u32,
}

impl VirtioConfig {
    /// Every offload the device offers.
    pub const fn new() -> Self {
        Self {
            checksum_offload: true,
            tso: true,
            large_receive: false,
            rx_recheck: 1,
            rx_defer: Duration::ZERO,
            rx_defer_bytes: 64 * 1024,
        }
    }

    /// The same, with [`checksum_offload`](Self::checksum_offload) `on`.
    pub const fn with_checksum_offload(mut self, on: bool) -> Self {
        self.checksum_offload = on;
        self
    }

    /// The same, with [`tso`](Self::tso) `on`.
    pub const fn with_tso(mut self, on: bool) -> Self {
        self.tso = on;
        self
    }

    /// The same, with [`large_receive`](Self::large_receive) `on`.
    pub const fn with_large_receive(mut self, on: bool) -> Self {
        self.large_receive = on;
        self
    }

    /// The same, with [`rx_recheck`](Self::rx_recheck) `looks`.
    pub const fn with_rx_recheck(mut self, looks: u8) -> Self {
        self.rx_recheck = looks;
        self
    }

    /// The same, deferring drained RX passes by `delay` after stretches of at least `bytes`
    /// ([`rx_defer`](Self::rx_defer), [`rx_defer_bytes`](Self::rx_defer_bytes));
    /// `Duration::ZERO` turns deferral off.
    pub const fn with_rx_defer(mut self, delay: Duration, bytes: u32) -> Self {
        self.rx_defer = delay;
        self.rx_defer_bytes = bytes;
        self
    }
}

impl Default for VirtioConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// A virtio-net device as a zcnet [`Driver`]: pool slots in both virtqueues, no copies.
///
/// `QUEUE` is the size of each virtqueue (a power of two, at most what the device offers; QEMU
/// offers 256). [`new`](Self::new) takes the device's transport (PCI or MMIO) and does the whole
/// device initialisation:
///
/// ```ignore
/// static POOL: StaticPool<1024, 2048> = StaticPool::new();
/// static NET_IRQ: VirtioIrq = VirtioIrq::new();
///
/// let pool = POOL.init(DEFAULT_HEADROOM)?;              // identity-mapped DMA memory
/// let net = VirtioNet::<KernelHal, PciTransport, 256>::new(transport, pool, &NET_IRQ)?;
/// // then route the device's interrupts to NET_IRQ
/// ```
///
/// # Features
///
/// The driver accepts, of what the device offers: `VIRTIO_F_VERSION_1`, `VIRTIO_F_EVENT_IDX`
/// (notification suppression), `VIRTIO_NET_F_MAC` (required: the driver refuses a device
/// without it), `VIRTIO_NET_F_STATUS` (link state) and `VIRTIO_NET_F_MTU` when the advised MTU
/// fits the pool's slots (otherwise the link runs at [`MTU`]). Without `VERSION_1` the device is
/// driven with the 10-byte legacy header.
///
/// # What the kernel provides
///
/// * **Memory**: the pool's region is the DMA memory. The device is given slot addresses
///   through the `Hal`'s `share`, which must return the device address of the buffer itself,
///   never a copy: [`new`](Self::new) checks this on one slot against the pool's
///   [`AddressMap`](zcnet_buffer::AddressMap) and refuses a `Hal` that disagrees. The virtqueues
///   themselves come from the `Hal`'s `dma_alloc`.
/// * **Interrupts**: the handler calls the [`VirtioIrq`]'s `handle_*` methods. Without them the
///   driver still works when something else wakes its tasks, but nothing tells it a frame
///   arrived.
///
/// # Behaviour
///
/// * **Receive** ([`Driver::poll_receive`]): the RX queue is kept full from the pool; after
///   every completion a fresh slot is posted before the frame is returned, so frames the
///   application holds use up the pool's spare slots, never the ring. An empty pool registers
///   the caller with the pool (a returned slot wakes it) and is counted as `rx_starved`.
///   Completions shorter than the header (`rx_runt`) or longer than `mtu + 14` (with large
///   receive, a merged packet over 64 KiB or [`MAX_CHAIN_SEGMENTS`] buffers) (`rx_oversize`)
///   are dropped and counted. The RX interrupt is asked for only when the queue has been
///   drained, and with [`VirtioConfig::rx_recheck`] only after the caller looked again; with
///   [`VirtioConfig::rx_defer`], a caller that asks [`Driver::receive_deferral`] after a bulk
///   stretch polls again from its timer instead.
/// * **Transmit**: [`Driver::poll_transmit_frame`] first reclaims completed frames, then gives
///   out a pool frame only while the TX queue has room (a free descriptor; with segmentation
///   offload, room for a whole chain: [`MAX_CHAIN_SEGMENTS`] descriptors, or the whole queue if
///   smaller); otherwise it asks for a TX interrupt and registers the caller's waker
///   (back-pressure, never a drop or a spin). [`Driver::poll_transmit_ready`] answers the same
///   way, so a chain offered after it is ready always fits. [`Driver::transmit`] writes the
///   virtio-net header into the frame's headroom and publishes it; [`Driver::transmit_chain`]
///   publishes a chain as one descriptor list and needs a free descriptor per frame (a chain
///   offered without that room is refused and counted in `tx_queue_full`).
/// * **Doorbells**: [`Driver::flush`] returns the frames the device has finished sending to
///   the pool (or, retained ones, to their sockets) and notifies the device of everything
///   published since the last flush, if the device asked for it; the `poll_*` methods notify
///   before they return `Pending`, and [`Driver::poll_receive`] returns sent frames then too. Until its user first calls `flush`, the driver notifies after each transmit;
///   from then on it relies on a flush after every run of transmits, as the trait asks.
/// * **Errors from the device**: a used element for a buffer the driver never posted, or a used
///   index that runs ahead of the buffers posted, marks the device broken (`device_errors`):
///   the driver stops touching the queues and keeps every slot the device might still write.
/// * **Link state** ([`Driver::poll_link_state`]) is the device's `VIRTIO_NET_S_LINK_UP` bit,
///   read from the configuration space, when the device offers `VIRTIO_NET_F_STATUS`; a
///   configuration-change interrupt ([`VirtioIrq::handle_config_interrupt`]) wakes the caller.
///   Without that feature (or when the read fails) the link reads as up, as the virtio
///   specification says a driver must then assume.
/// * **Drop**: slots still posted or in flight, and the virtqueues, are left with the device
///   (they stay POSTED / DEVICE in the pool) rather than returned to memory the device could
///   still write.
pub struct VirtioNet<H: Hal, T: Transport, const QUEUE: usize> {
    transport: T,
    rx: Ring<H, QUEUE>,
    tx: Ring<H, QUEUE>,
    pool: &'static FramePool,
    irq: &'static VirtioIrq,
    /// Where in a slot the device starts writing: `headroom - header_len`.
    rx_offset: usize,
    /// Size of the virtio-net header this device uses (12 with VERSION_1, 10 for legacy).
    header_len: usize,
    /// The link's IP MTU.
    mtu: usize,
    mac: [u8; 6],
    /// The features accepted.
    features: u64,
    /// `VIRTIO_NET_F_CSUM` was accepted: partial checksums go to the device.
    tx_csum: bool,
    /// `VIRTIO_NET_F_GUEST_CSUM` was accepted: received headers carry checksum flags.
    rx_csum: bool,
    /// The kinds of super-segment the device segments (`HOST_TSO4` / `HOST_TSO6`).
    tx_gso: GsoKinds,
    /// `VIRTIO_NET_F_MRG_RXBUF` was accepted: a packet may span several RX buffers.
    rx_merged: bool,
    /// The packet being gathered from several RX buffers, and how many buffers it still
    /// lacks; with 0 left it is complete, waiting for [`Driver::poll_receive_chain`].
    rx_chain: Option<(RxChain, u16)>,
    /// RX buffers still to drop: the rest of a packet that was dropped after its first one.
    rx_skip: u16,
    /// Invariant: `rx_slots[t]` is `Some` exactly while the device owns RX token `t`; the slot
    /// is POSTED and nothing reads or writes its bytes until the ring pops `t`.
    /// `QUEUE` entries, one per possible token.
    rx_slots: Vec<Option<PostedSlot>, QUEUE>,
    /// Invariant: `tx_frames[d]` is `Some` exactly while TX descriptor `d` holds that frame
    /// for the device (a frame is one descriptor, a chain one per non-empty frame).
    tx_frames: Vec<Option<InFlight>, QUEUE>,
    /// Set when the RX ring ran dry for want of slots; cleared when a slot is posted again, so
    /// each dry spell counts once.
    starved: bool,
    /// How many more drained passes wake their caller instead of arming the RX interrupt:
    /// [`VirtioConfig::rx_recheck`] after a pass that handed a frame up, one less per pass
    /// that found none.
    rx_looks_left: u8,
    /// [`VirtioConfig::rx_recheck`].
    rx_recheck: u8,
    /// [`VirtioConfig::rx_defer`].
    rx_defer: Duration,
    /// [`VirtioConfig::rx_defer_bytes`].
    rx_defer_bytes: u32,
    /// Bytes received in the current stretch: since the RX interrupt was last asked for, or
    /// the last deferral.
    rx_stretch_bytes: u64,
    /// The last `Pending` ended a stretch of at least `rx_defer_bytes` (with deferral on):
    /// [`Driver::receive_deferral`] may take its interrupt request back. Cleared by the next
    /// poll.
    rx_defer_offer: bool,
    /// The device broke the queue protocol: the driver no longer touches the queues.
    broken: bool,
    /// The user calls [`Driver::flush`]: transmits only publish, the flush notifies.
    batched: bool,
    /// The waker of the task that last asked for TX room or a TX frame (the stack's egress):
    /// woken by the TX interrupt asked for while a frame in flight is watched
    /// ([`InFlight::is_watched`]), see [`VirtioNet::watch_tx_returns`].
    tx_waker: Option<Waker>,
}

/// What one used RX buffer came to ([`VirtioNet::complete_rx`]).
enum RxStep {
    /// A packet in one frame.
    Frame(RxFrame),
    /// The last buffer of a merged packet: complete in `rx_chain`.
    Chain,
    /// Nothing to hand up: a buffer dropped (counted), or one of a packet still incomplete.
    Nothing,
}

/// What [`VirtioNet::poll_packet`] found: a frame, or a merged packet complete in `rx_chain`
/// (left there rather than moved through the return value: a chain is over a kilobyte).
enum Packet {
    Frame(RxFrame),
    Chain,
}

/// The super-segment kinds the device segments, from the accepted `features`.
fn gso_kinds(features: u64) -> GsoKinds {
    let mut kinds = GsoKinds::empty();
    if features & feature::HOST_TSO4 != 0 {
        kinds |= GsoKinds::TCPV4;
    }
    if features & feature::HOST_TSO6 != 0 {
        kinds |= GsoKinds::TCPV6;
    }
    kinds
}

/// Fills a transmit virtio-net `header` for a packet with the partial checksum `csum` (to be
/// completed by the device) and the segmentation `gso`, offsets from the Ethernet header's
/// first byte; all zero without either.
fn fill_tx_header(header: &mut [u8], csum: Option<ChecksumPartial>, gso: Option<GsoRequest>) {
    header.fill(0);
    if let Some(mark) = csum {
        header[hdr::FLAGS] = hdr::F_NEEDS_CSUM;
        header[hdr::CSUM_START..hdr::CSUM_START + 2].copy_from_slice(&mark.start.to_le_bytes());
        header[hdr::CSUM_OFFSET..hdr::CSUM_OFFSET + 2].copy_from_slice(&mark.offset.to_le_bytes());
    }
    if let Some(request) = gso {
        header[hdr::GSO_TYPE] = match request.kind {
            GsoKind::TcpV4 => hdr::GSO_TCPV4,
            GsoKind::TcpV6 => hdr::GSO_TCPV6,
        };
        header[hdr::HDR_LEN..hdr::HDR_LEN + 2].copy_from_slice(&request.header_len.to_le_bytes());
        header[hdr::GSO_SIZE..hdr::GSO_SIZE + 2]
            .copy_from_slice(&request.segment_size.to_le_bytes());
    }
}

/// What device initialisation settled, before the driver takes the transport.
struct Setup<H: Hal, const QUEUE: usize> {
    rx: Ring<H, QUEUE>,
    tx: Ring<H, QUEUE>,
    rx_offset: usize,
    header_len: usize,
    mtu: usize,
    mac: [u8; 6],
    features: u64,
}

impl<H: Hal, T: Transport, const QUEUE: usize> VirtioNet<H, T, QUEUE> {
    /// Initialises the virtio-net device behind `transport` (reset, feature negotiation, one RX
    /// and one TX virtqueue of `QUEUE` entries, `DRIVER_OK`) for RX and TX buffers that will be
    /// slots of `pool`, with `irq` shared with the device's interrupt handler.
    ///
    /// Errors (see [`VirtioError`]) if the device is not a network device, rejects the
    /// features, has no MAC address or too small queues; if the pool's headroom cannot hold the
    /// virtio-net header, its slots cannot hold [`MIN_RX_BUFFER`] bytes behind
    /// `headroom − header`, it has no free slot, or the `Hal` maps pool memory elsewhere than
    /// the pool's address map ([`VirtioError::DmaAddressMismatch`]). Nothing is posted yet: the
    /// first [`Driver::poll_receive`] fills the RX queue.
    ///
    /// The initialisation resets the device, and with it any MSI-X vectors: program them after
    /// this returns.
    pub fn new(
        transport: T,
        pool: &'static FramePool,
        irq: &'static VirtioIrq,
    ) -> Result<Self, VirtioError> {
        Self::with_config(transport, pool, irq, VirtioConfig::new())
    }

    /// [`new`](Self::new), negotiating the offloads `config` allows (and the device offers).
    pub fn with_config(
        mut transport: T,
        pool: &'static FramePool,
        irq: &'static VirtioIrq,
        config: VirtioConfig,
    ) -> Result<Self, VirtioError> {
        if transport.device_type() != DeviceType::Network {
            return Err(VirtioError::NotNetwork);
        }
        let setup = match Self::init(&mut transport, pool, config) {
            Ok(setup) => setup,
            Err(e) => {
                error!("virtio-net: initialisation failed: {}", e);
                transport.set_status(DeviceStatus::FAILED);
                return Err(e);
            }
        };
        let mut rx_slots = Vec::new();
        let mut tx_frames = Vec::new();
        for _ in 0..QUEUE {
            // Both have capacity QUEUE, so neither push can fail.
            let _ = rx_slots.push(None);
            let _ = tx_frames.push(None);
        }
        Ok(Self {
            transport,
            rx: setup.rx,
            tx: setup.tx,
            pool,
            irq,
            rx_offset: setup.rx_offset,
            header_len: setup.header_len,
            mtu: setup.mtu,
            mac: setup.mac,
            features: setup.features,
            tx_csum: setup.features & feature::CSUM != 0,
            rx_csum: setup.features & feature::GUEST_CSUM != 0,
            tx_gso: gso_kinds(setup.features),
            rx_merged: setup.features & feature::MRG_RXBUF != 0,
            rx_chain: None,
            rx_skip: 0,
            rx_slots,
            tx_frames,
            starved: false,
            rx_looks_left: 0,
            rx_recheck: config.rx_recheck,
            rx_defer: config.rx_defer,
            rx_defer_bytes: config.rx_defer_bytes,
            rx_stretch_bytes: 0,
            rx_defer_offer: false,
            broken: false,
            batched: false,
            tx_waker: None,
        })
    }

    /// The device initialisation proper (virtio 1.x, 3.1.1), up to `DRIVER_OK`.
    fn init(
        transport: &mut T,
        pool: &'static FramePool,
        config: VirtioConfig,
    ) -> Result<Setup<H, QUEUE>, VirtioError> {
        // Reset, and wait for the device to say it is done (virtio 1.x, 4.1.4.3.2).
        transport.set_status(DeviceStatus::empty());
        let mut reads = 0;
        while transport.get_status() != DeviceStatus::empty() {
            reads += 1;
            if reads == RESET_READS {
                return Err(VirtioError::ResetTimeout);
            }
            core::hint::spin_loop();
        }
        transport.set_status(DeviceStatus::ACKNOWLEDGE | DeviceStatus::DRIVER);
        let offered = transport.read_device_features();
        let mut wanted =
            feature::MAC | feature::STATUS | feature::RING_EVENT_IDX | feature::VERSION_1;
        if config.checksum_offload {
            wanted |= feature::CSUM | feature::GUEST_CSUM;
        }
        let mut features = offered & wanted;
        // Segmentation needs the checksum offload of its direction (virtio 1.x, 5.1.3.1); large
        // receive also needs merged buffers: the driver posts no 64 KiB buffers.
        if config.tso && features & feature::CSUM != 0 {
            features |= offered & (feature::HOST_TSO4 | feature::HOST_TSO6);
        }
        let guest_tso = offered & (feature::GUEST_TSO4 | feature::GUEST_TSO6);
        if config.large_receive
            && features & feature::GUEST_CSUM != 0
            && offered & feature::MRG_RXBUF != 0
            && guest_tso != 0
        {
            features |= feature::MRG_RXBUF | guest_tso;
        }
        let header_len = if features & (feature::VERSION_1 | feature::MRG_RXBUF) != 0 {
            12
        } else {
            10
        };

        let headroom = pool.headroom();
        let Some(rx_offset) = headroom.checked_sub(header_len) else {
            return Err(VirtioError::HeadroomTooSmall {
                headroom,
                needed: header_len,
            });
        };
        let needed = rx_offset + MIN_RX_BUFFER.max(header_len + MTU + ETHERNET_HEADER_LEN);
        if pool.slot_size() < needed {
            return Err(VirtioError::SlotTooSmall {
                slot_size: pool.slot_size(),
                needed,
            });
        }
        check_dma_mapping::<H>(pool, rx_offset)?;

        // The advised MTU is accepted only if a frame that large fits a posted slot: a driver
        // that accepts it must post buffers that hold one. (Transport::begin_init would accept
        // the features before this could be looked at, so the driver does the steps itself.)
        let mut mtu = MTU;
        if offered & feature::MTU != 0 {
            let room = pool.slot_size() - rx_offset - header_len - ETHERNET_HEADER_LEN;
            match transport.read_config_space::<u16>(config::MTU) {
                Ok(advised) if (MIN_DEVICE_MTU..=room).contains(&usize::from(advised)) => {
                    mtu = usize::from(advised);
                    features |= feature::MTU;
                }
                Ok(advised) => info!(
                    "virtio-net: advised MTU {} ignored: slots hold at most {}",
                    advised, room
                ),
                Err(_) => warn!("virtio-net: advised MTU unreadable: using {}", MTU),
            }
        }

        transport.write_driver_features(features);
        transport.set_status(
            DeviceStatus::ACKNOWLEDGE | DeviceStatus::DRIVER | DeviceStatus::FEATURES_OK,
        );
        if !transport.get_status().contains(DeviceStatus::FEATURES_OK) {
            return Err(VirtioError::FeaturesRejected);
        }
        transport.set_guest_page_size(PAGE_SIZE as u32);

        if features & feature::MAC == 0 {
            return Err(VirtioError::NoMacAddress);
        }
        let mac = transport
            .read_consistent(|| transport.read_config_space::<[u8; 6]>(config::MAC))
            .map_err(|_| VirtioError::ConfigSpace)?;

        let event_idx = features & feature::RING_EVENT_IDX != 0;
        let rx = Ring::new(transport, RX_QUEUE, event_idx)?;
        let tx = Ring::new(transport, TX_QUEUE, event_idx)?;
        transport.finish_init();

        info!(
            "virtio-net: features {:#x} of {:#x}, {} entries per queue, {}-byte header, MTU {}, \
             {} pool slots",
            features,
            offered,
            QUEUE,
            header_len,
            mtu,
            pool.slot_count()
        );
        Ok(Setup {
            rx,
            tx,
            rx_offset,
            header_len,
            mtu,
            mac,
            features,
        })
    }

    /// The counters and wakers shared with the interrupt handler.
    pub fn irq(&self) -> &'static VirtioIrq {
        self.irq
    }

    /// Size of the virtio-net header this device uses, which the driver writes into each TX
    /// frame's headroom (and so [`Capabilities::tx_headroom`]).
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// The transport the driver owns, to look at (a wrapper's state, such as which queues
    /// [`Doorbells`](crate::Doorbells) rings directly). Calls through it that touch the device
    /// would race the driver's own: use [`SharedTransport`](crate::SharedTransport) for those.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The feature bits the driver accepted (virtio 1.x numbering: bit 5 `VIRTIO_NET_F_MAC`,
    /// 29 `VIRTIO_F_EVENT_IDX`, 32 `VIRTIO_F_VERSION_1`, ...).
    pub fn features(&self) -> u64 {
        self.features
    }

    /// The largest frame the link carries, Ethernet header included.
    fn max_frame_len(&self) -> usize {
        self.mtu + ETHERNET_HEADER_LEN
    }

    /// The largest packet the device hands up, Ethernet header included: a merged one of up
    /// to [`GSO_MAX_SIZE`] bytes of IP packet with large receive, one frame otherwise.
    fn max_rx_len(&self) -> usize {
        if self.rx_merged {
            self.max_frame_len().max(GSO_MAX_SIZE + ETHERNET_HEADER_LEN)
        } else {
            self.max_frame_len()
        }
    }

    fn counters(&self) -> &'static Counters {
        &self.irq.counters
    }

    /// Stops using the device after it broke the queue protocol (`what` it did).
    fn fail(&mut self, what: &'static str) {
        error!(
            "virtio-net: {}: the device broke the queue protocol; the driver stops using it",
            what
        );
        self.broken = true;
        Counters::bump(&self.counters().device_errors);
    }

    /// Notifies the RX queue if the device asked to hear of what was posted since the last
    /// notification decision.
    fn kick_rx(&mut self) {
        let counters = self.counters();
        kick(
            &mut self.rx,
            &mut self.transport,
            &counters.rx_kicks,
            counters,
        );
    }

    /// As [`kick_rx`](Self::kick_rx), for the TX queue.
    fn kick_tx(&mut self) {
        let counters = self.counters();
        kick(
            &mut self.tx,
            &mut self.transport,
            &counters.tx_kicks,
            counters,
        );
    }

    /// Posts free slots until the RX queue is full or the pool is empty; an empty pool registers
    /// `cx` with the pool. Frames the device has finished sending are reclaimed first when the
    /// pool runs dry (nothing else returns them while the stack is not transmitting).
    fn refill(&mut self, cx: &mut Context<'_>) {
        while self.rx.free() > 0 && !self.broken {
            let slot = match self.pool.try_alloc_rx() {
                Some(slot) => slot,
                None if self.tx.has_used() => {
                    self.reclaim_tx();
                    continue;
                }
                None => match self.pool.poll_alloc_rx(cx) {
                    Poll::Ready(slot) => slot,
                    Poll::Pending => {
                        if self.rx.in_flight() == 0 && !self.starved {
                            warn!("virtio-net: RX queue empty: the pool has no free slot");
                            self.starved = true;
                            Counters::bump(&self.counters().rx_starved);
                        }
                        break;
                    }
                },
            };
            self.post(slot);
        }
        self.counters()
            .rx_posted
            .store(self.rx.in_flight() as u64, Relaxed);
    }

    /// Publishes one slot to the device as a receive buffer.
    fn post(&mut self, mut slot: PostedSlot) {
        let buffer = NonNull::from(&mut slot.buffer_mut()[self.rx_offset..]);
        // SAFETY: the slot is POSTED and owned by this driver; it is stored in `rx_slots` under
        // the returned token and nothing touches its bytes until the ring pops that token (the
        // `rx_slots` invariant). If the device breaks the protocol the slot is kept, never
        // returned to the pool, so DMA cannot hit reused memory.
        let token = unsafe { self.rx.add(&[(buffer, BufferDirection::DeviceToDriver)]) };
        match token.map(|t| self.rx_slots.get_mut(usize::from(t))) {
            Some(Some(entry @ None)) => {
                *entry = Some(slot);
                self.starved = false;
            }
            Some(_) => {
                // The ring handed out a token our table says is taken: keep the slot, the
                // device may write it.
                core::mem::forget(slot);
                self.fail("RX token already in use");
            }
            None => {
                // Not published (the caller checked for a free descriptor; the slot is not
                // empty): bookkeeping disagrees. The device never saw the slot.
                drop(slot);
                self.fail("no free RX descriptor");
            }
        }
    }

    /// Takes the next used RX buffer: `None` when there is none (or the device broke the
    /// protocol), otherwise what it came to.
    fn next_rx(&mut self) -> Option<RxStep> {
        let used = match self.rx.pop_used() {
            Ok(Some(used)) => used,
            Ok(None) => return None,
            Err(e) => {
                self.fail(e.describe());
                return None;
            }
        };
        let Some(slot) = self
            .rx_slots
            .get_mut(usize::from(used.head))
            .and_then(Option::take)
        else {
            self.fail("RX completion for a token not posted");
            return None;
        };
        self.rx_stretch_bytes += u64::from(used.len);
        Some(self.complete_rx(slot, used.len as usize))
    }

    /// Turns the used RX buffer `slot`, `written` bytes long (as the device says), into a frame,
    /// or into a part of the packet being gathered ([`RxStep::Nothing`] until its last buffer,
    /// then [`RxStep::Chain`]); a buffer dropped (counted) is [`RxStep::Nothing`] too.
    fn complete_rx(&mut self, mut slot: PostedSlot, written: usize) -> RxStep {
        let counters = self.counters();
        if self.rx_skip > 0 {
            // The rest of a packet dropped at its first buffer (counted then).
            self.rx_skip -= 1;
            return RxStep::Nothing;
        }
        let max_rx_len = self.max_rx_len();
        if let Some((chain, left)) = self.rx_chain.as_mut().filter(|(_, left)| *left > 0) {
            // A further buffer of a merged packet: its bytes start at the buffer's start.
            let left_after = *left - 1;
            let pushed = match slot.complete_range(self.rx_offset, written) {
                Ok(tail) => chain.push(tail).is_ok(),
                Err(_) => false,
            };
            if !pushed || chain.len() > max_rx_len {
                debug!("virtio-net: merged packet dropped: over the largest packet or chain");
                Counters::bump(&counters.rx_oversize);
                self.rx_chain = None;
                self.rx_skip = left_after;
                return RxStep::Nothing;
            }
            *left = left_after;
            if left_after > 0 {
                return RxStep::Nothing;
            }
            Counters::bump(&counters.rx_frames);
            Counters::bump(&counters.rx_merged);
            counters.rx_bytes.fetch_add(chain.len() as u64, Relaxed);
            return RxStep::Chain;
        }
        let Some(len) = written.checked_sub(self.header_len) else {
            debug!("virtio-net: received buffer shorter than the virtio-net header dropped");
            Counters::bump(&counters.rx_runt);
            return RxStep::Nothing;
        };
        // The header, which the device wrote (`written >= header_len`).
        let header = &slot.buffer_mut()[self.rx_offset..self.rx_offset + self.header_len];
        let flags = header[hdr::FLAGS];
        let gso_type = header[hdr::GSO_TYPE];
        let gso_size = u16::from_le_bytes([header[hdr::GSO_SIZE], header[hdr::GSO_SIZE + 1]]);
        let buffers = if self.rx_merged {
            u16::from_le_bytes([header[hdr::NUM_BUFFERS], header[hdr::NUM_BUFFERS + 1]])
        } else {
            1
        };
        if buffers == 0 || usize::from(buffers) > MAX_CHAIN_SEGMENTS.min(QUEUE) {
            debug!(
                "virtio-net: packet over {} receive buffers dropped",
                buffers
            );
            Counters::bump(&counters.rx_oversize);
            self.rx_skip = buffers.saturating_sub(1);
            return RxStep::Nothing;
        }
        if len > self.max_rx_len() {
            debug!(
                "virtio-net: received frame of {} bytes dropped: over {}",
                len,
                self.max_rx_len()
            );
            Counters::bump(&counters.rx_oversize);
            self.rx_skip = buffers - 1;
            return RxStep::Nothing;
        }
        let mut frame = match slot.complete_range(self.rx_offset + self.header_len, len) {
            Ok(frame) => frame,
            Err(_) => {
                debug!(
                    "virtio-net: received frame of {} bytes dropped: over the slot",
                    len
                );
                Counters::bump(&counters.rx_oversize);
                self.rx_skip = buffers - 1;
                return RxStep::Nothing;
            }
        };
        if self.rx_csum {
            // Either flag vouches for the checksum: DATA_VALID, the device checked it;
            // NEEDS_CSUM, a local sender left it partial and it crossed no wire.
            if flags & hdr::F_DATA_VALID != 0 {
                frame.set_checksum_verified(true);
                Counters::bump(&counters.rx_checksum_valid);
            } else if flags & hdr::F_NEEDS_CSUM != 0 {
                frame.set_checksum_verified(true);
                Counters::bump(&counters.rx_checksum_partial);
            }
        }
        if self.rx_merged {
            let kind = match gso_type & !hdr::GSO_ECN {
                hdr::GSO_TCPV4 => Some(GsoKind::TcpV4),
                hdr::GSO_TCPV6 => Some(GsoKind::TcpV6),
                _ => None,
            };
            if let Some(kind) = kind {
                frame.set_gso_info(Some(GsoInfo {
                    kind,
                    segment_size: gso_size,
                }));
            }
        }
        if buffers > 1 {
            self.rx_chain = Some((RxChain::from_frame(frame), buffers - 1));
            return RxStep::Nothing;
        }
        Counters::bump(&counters.rx_frames);
        counters.rx_bytes.fetch_add(len as u64, Relaxed);
        RxStep::Frame(frame)
    }

    /// [`Driver::poll_receive`] and [`Driver::poll_receive_chain`]: the next packet, a frame or
    /// (with large receive) a chain left complete in `rx_chain`.
    fn poll_packet(&mut self, cx: &mut Context<'_>) -> Poll<Packet> {
        // An offer not taken at once lapses: the caller did not defer.
        self.rx_defer_offer = false;
        if self.broken {
            return Poll::Pending;
        }
        self.refill(cx);
        loop {
            while let Some(step) = self.next_rx() {
                // A fresh slot in the completed one's place before anything is handed up.
                self.refill(cx);
                let packet = match step {
                    RxStep::Frame(frame) => Packet::Frame(frame),
                    RxStep::Chain => Packet::Chain,
                    RxStep::Nothing => continue,
                };
                if self.rx.interrupts_enabled() {
                    // A batch begins: no RX interrupts until it has been drained.
                    self.rx.disable_interrupts();
                }
                self.rx_looks_left = self.rx_recheck;
                return Poll::Ready(packet);
            }
            if self.broken {
                return Poll::Pending;
            }
            // Drained.
            self.irq.rx.register(cx.waker());
            if self.rx_looks_left > 0 {
                // Frames came in lately: more are likely on their way. Rather than ask for an
                // interrupt, have the caller look again once the other tasks have run
                // (interrupts stay off).
                self.rx_looks_left -= 1;
                Counters::bump(&self.counters().rx_rechecks);
                self.kick_rx();
                self.reclaim_tx();
                self.watch_tx_returns();
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            // Ask for the RX interrupt and look once more: a buffer used before the request
            // raised no interrupt.
            if !self.rx.interrupts_enabled() {
                Counters::bump(&self.counters().rx_interrupt_requests);
            }
            if !self.rx.enable_interrupts(0) {
                // A large stretch ends here: a caller with a timer may poll again later instead
                // (`receive_deferral`). The next stretch starts now either way.
                self.rx_defer_offer = !self.rx_defer.is_zero()
                    && self.rx_stretch_bytes >= u64::from(self.rx_defer_bytes);
                self.rx_stretch_bytes = 0;
                self.kick_rx();
                // The end of an ingress run: sent frames go back, as in `flush`.
                self.reclaim_tx();
                self.watch_tx_returns();
                return Poll::Pending;
            }
        }
    }

    /// Returns every frame the device has finished sending to the pool.
    fn reclaim_tx(&mut self) {
        while !self.broken {
            // Each descriptor of the completed chain holds one frame: dropped as it is released.
            let frames = &mut self.tx_frames;
            let mut missing = false;
            let popped = self.tx.pop_used_each(|d| {
                match frames.get_mut(usize::from(d)).and_then(Option::take) {
                    Some(frame) => drop(frame),
                    None => missing = true,
                }
            });
            match popped {
                Ok(Some(_)) if missing => self.fail("TX completion for a token not queued"),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    self.fail(e.describe());
                    break;
                }
            }
        }
        self.counters()
            .tx_in_flight
            .store(self.tx.in_flight() as u64, Relaxed);
    }

    /// Keeps `cx`'s waker as the sender's (cloned only when it changed).
    fn note_sender(&mut self, cx: &Context<'_>) {
        match &mut self.tx_waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
    }

    /// At the end of a run, after the reclaim: while a frame the device still has is watched (a
    /// task waits for its return to send it again, [`InFlight::is_watched`]), asks for a TX
    /// interrupt at the next completion, for the sender's waker. TX completions raise no
    /// interrupt otherwise, and this driver returns frames only when it is called, so without
    /// it the watcher would wait for unrelated traffic to call the driver. The interrupt wakes
    /// the sender, whose run ends with a flush that reclaims the frame, and dropping it wakes
    /// the watcher.
    fn watch_tx_returns(&mut self) {
        while !self.broken && self.tx.in_flight() > 0 {
            let Some(waker) = self.tx_waker.as_ref() else {
                return;
            };
            if !self.tx_frames.iter().flatten().any(InFlight::is_watched) {
                return;
            }
            self.irq.tx.register(waker);
            Counters::bump(&self.counters().tx_interrupt_requests);
            if !self.tx.enable_interrupts(0) {
                return;
            }
            // Completions landed before the request and raised no interrupt: take them back
            // and look again.
            self.reclaim_tx();
        }
    }

    /// Makes sure `n` TX descriptors are free, reclaiming sent frames if they are not; a full
    /// queue refuses the packet (counted).
    fn room_for(&mut self, n: usize) -> Result<(), TxError> {
        if self.tx.free() < n {
            self.reclaim_tx();
            if self.broken {
                return Err(TxError::Device);
            }
            if self.tx.free() < n {
                debug!("virtio-net: packet refused: TX queue full");
                Counters::bump(&self.counters().tx_queue_full);
                return Err(TxError::Device);
            }
        }
        Ok(())
    }

    /// The TX queue has room for what a stack may hand over next: a frame, or with segmentation
    /// offload a whole super-segment (a descriptor per frame of its chain, at most
    /// [`MAX_CHAIN_SEGMENTS`]), so that a chain offered after `poll_transmit_ready` is never
    /// refused for want of descriptors.
    fn tx_room(&self) -> bool {
        let needed = if self.tx_gso.is_empty() {
            1
        } else {
            MAX_CHAIN_SEGMENTS.min(QUEUE)
        };
        self.tx.free() >= needed
    }

    /// Before waiting for a TX completion: registers `cx`, asks for the TX interrupt (at the
    /// next completion if `soon`, otherwise once three quarters of the frames in flight are
    /// done), makes sure the device knows what was published, and reclaims once more (a
    /// completion before the request raised no interrupt).
    fn wait_tx(&mut self, cx: &mut Context<'_>, soon: bool) {
        self.irq.tx.register(cx.waker());
        let in_flight = self.tx.in_flight();
        let after = if soon {
            0
        } else {
            (in_flight * 3 / 4).min(in_flight.saturating_sub(1))
        };
        // `after < QUEUE <= 32768`.
        self.tx.enable_interrupts(after as u16);
        Counters::bump(&self.counters().tx_interrupt_requests);
        self.kick_tx();
        self.reclaim_tx();
    }

    /// The stack has room again: TX completions need not interrupt.
    fn tx_interrupts_off(&mut self) {
        if self.tx.interrupts_enabled() {
            self.tx.disable_interrupts();
        }
    }
}

/// Notifies `ring`'s queue through `transport` if the device asked to hear of what was published
/// since the last decision, counted in `kicks` (or as suppressed).
fn kick<H: Hal, T: Transport, const QUEUE: usize>(
    ring: &mut Ring<H, QUEUE>,
    transport: &mut T,
    kicks: &AtomicU64,
    counters: &Counters,
) {
    match ring.kick_needed() {
        Some(true) => {
            transport.notify(ring.queue());
            Counters::bump(kicks);
        }
        Some(false) => Counters::bump(&counters.kicks_suppressed),
        None => {}
    }
}

/// Completes `frame`'s partial checksum in software, as a device with `VIRTIO_NET_F_CSUM` would:
/// the ones'-complement sum of the bytes from `mark.start` to the end (the field holds the
/// pseudo-header sum), complemented, stored at `mark.start + mark.offset`. The caller checked
/// that the field lies inside the frame. A UDP checksum (`offset` 6) that comes out as 0 is sent
/// as `0xffff`: 0 says "no checksum" there (RFC 768).
fn complete_checksum(frame: &mut TxFrame, mark: ChecksumPartial) {
    let start = usize::from(mark.start);
    let field = start + usize::from(mark.offset);
    let mut sum = !ones_complement_sum(0, [&frame[start..]]);
    if sum == 0 && mark.offset == UDP_CHECKSUM_OFFSET {
        sum = 0xffff;
    }
    frame[field..field + 2].copy_from_slice(&sum.to_be_bytes());
}

/// `mark`, a packet's partial checksum mark, if its field lies inside the packet's `len`
/// bytes; a mark past the end refuses the packet (counted).
fn checked_mark(
    mark: Option<ChecksumPartial>,
    len: usize,
    counters: &Counters,
) -> Result<Option<ChecksumPartial>, TxError> {
    match mark {
        Some(m) if usize::from(m.start) + usize::from(m.offset) + 2 > len => {
            debug!("virtio-net: packet refused: its checksum mark lies past its end");
            Counters::bump(&counters.tx_bad_checksum_mark);
            Err(TxError::Device)
        }
        mark => Ok(mark),
    }
}

/// Where a UDP header's checksum field sits (a [`ChecksumPartial::offset`]).
const UDP_CHECKSUM_OFFSET: u16 = 6;

/// Shares one pool slot with the device through the `Hal` and checks that the device address it
/// gets is the one the pool's address map gives: a `Hal` that bounces through its own buffers
/// would silently add a copy per frame.
fn check_dma_mapping<H: Hal>(pool: &'static FramePool, offset: usize) -> Result<(), VirtioError> {
    let mut slot = pool.try_alloc_rx().ok_or(VirtioError::PoolExhausted)?;
    let expected = slot.device_addr() + offset as u64;
    let buffer = NonNull::from(&mut slot.buffer_mut()[offset..]);
    // SAFETY: `buffer` is a non-empty range of a slot this function owns exclusively (POSTED
    // lease) for the duration of both calls, and `unshare` gets the address `share` returned.
    let hal = unsafe {
        let hal = H::share(buffer, BufferDirection::DeviceToDriver);
        H::unshare(hal, buffer, BufferDirection::DeviceToDriver);
        hal
    };
    if hal == expected {
        Ok(())
    } else {
        Err(VirtioError::DmaAddressMismatch {
            pool: expected,
            hal,
        })
    }
}

impl<H: Hal, T: Transport, const QUEUE: usize> Driver for VirtioNet<H, T, QUEUE> {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        loop {
            match self.poll_packet(cx) {
                Poll::Ready(Packet::Frame(frame)) => return Poll::Ready(frame),
                Poll::Ready(Packet::Chain) => {
                    // A merged packet for a caller that takes frames only: dropped.
                    debug!("virtio-net: merged packet dropped: the caller takes no chains");
                    self.rx_chain = None;
                    Counters::bump(&self.counters().rx_chains_dropped);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn poll_receive_chain(&mut self, cx: &mut Context<'_>) -> Poll<RxChain> {
        match self.poll_packet(cx) {
            Poll::Ready(Packet::Frame(frame)) => Poll::Ready(RxChain::from_frame(frame)),
            Poll::Ready(Packet::Chain) => match self.rx_chain.take() {
                Some((chain, _)) => Poll::Ready(chain),
                None => {
                    // `Packet::Chain` is returned only with the chain left complete there.
                    self.fail("merged packet lost");
                    Poll::Pending
                }
            },
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_receive_packet(&mut self, cx: &mut Context<'_>) -> Poll<RxPacket> {
        match self.poll_packet(cx) {
            Poll::Ready(Packet::Frame(frame)) => Poll::Ready(RxPacket::Frame(frame)),
            Poll::Ready(Packet::Chain) => match self.rx_chain.take() {
                Some((chain, _)) => Poll::Ready(RxPacket::from(chain)),
                None => {
                    // `Packet::Chain` is returned only with the chain left complete there.
                    self.fail("merged packet lost");
                    Poll::Pending
                }
            },
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        if self.broken {
            return Poll::Pending;
        }
        self.note_sender(cx);
        self.reclaim_tx();
        if self.broken {
            return Poll::Pending;
        }
        if self.tx_room() {
            if let Poll::Ready(frame) = self.pool.poll_alloc_tx(cx) {
                self.tx_interrupts_off();
                return Poll::Ready(frame);
            }
            if self.tx.in_flight() == 0 {
                // Only a slot returned elsewhere can help; the pool wakes us then.
                return Poll::Pending;
            }
        }
        // The queue is full, or frames the device still holds are the slots we lack: wait for
        // a TX completion (the next one, if it is a slot we lack).
        let pool_dry = self.tx_room();
        self.wait_tx(cx, pool_dry);
        if self.tx_room() && !self.broken {
            if let Poll::Ready(frame) = self.pool.poll_alloc_tx(cx) {
                self.tx_interrupts_off();
                return Poll::Ready(frame);
            }
        }
        Poll::Pending
    }

    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.broken {
            return Poll::Pending;
        }
        self.note_sender(cx);
        self.reclaim_tx();
        if !self.tx_room() {
            self.wait_tx(cx, false);
        }
        if !self.tx_room() || self.broken {
            return Poll::Pending;
        }
        self.tx_interrupts_off();
        Poll::Ready(())
    }

    fn transmit(&mut self, mut frame: TxFrame) -> Result<(), TxError> {
        let counters = self.counters();
        let len = frame.len();
        let max = self.max_frame_len();
        if len > max {
            debug!("virtio-net: frame of {} bytes refused: over {}", len, max);
            Counters::bump(&counters.tx_too_long);
            return Err(TxError::TooLong { len, max });
        }
        if self.broken {
            return Err(TxError::Device);
        }
        self.room_for(1)?;
        if frame.headroom() < self.header_len {
            debug!("virtio-net: frame refused: no headroom for the virtio-net header");
            Counters::bump(&counters.tx_no_headroom);
            return Err(TxError::NoHeadroom);
        }
        // The mark counts from the frame's first byte as it is before the header goes in front.
        let partial = match checked_mark(frame.checksum_partial(), len, counters)? {
            Some(mark) if !self.tx_csum => {
                complete_checksum(&mut frame, mark);
                Counters::bump(&counters.tx_checksum_completed);
                None
            }
            mark => mark,
        };
        let Ok(header) = frame.push_header(self.header_len) else {
            // Checked above: the headroom holds the header.
            Counters::bump(&counters.tx_no_headroom);
            return Err(TxError::NoHeadroom);
        };
        // A GSO request is not passed on: the frame fits the MTU (checked above), so it goes
        // out as the one segment it is.
        fill_tx_header(header, partial, None);
        if partial.is_some() {
            Counters::bump(&counters.tx_checksum_offloaded);
        }
        let frame = frame.into_device();
        let buffer = NonNull::from(&*frame);
        // SAFETY: `frame` (DEVICE state, owned by this driver) is stored in `tx_frames` under
        // the returned token and neither read mutably nor dropped until the ring pops that
        // token; the device only reads it.
        let token = unsafe { self.tx.add(&[(buffer, BufferDirection::DriverToDevice)]) };
        match token.map(|t| self.tx_frames.get_mut(usize::from(t))) {
            Some(Some(entry @ None)) => {
                *entry = Some(frame);
                counters
                    .tx_in_flight
                    .store(self.tx.in_flight() as u64, Relaxed);
                Counters::bump(&counters.tx_frames);
                counters.tx_bytes.fetch_add(len as u64, Relaxed);
                if !self.batched {
                    self.kick_tx();
                }
                Ok(())
            }
            Some(_) => {
                // The device may read this frame: keep its slot out of the pool.
                core::mem::forget(frame);
                self.fail("TX token already in use");
                Err(TxError::Device)
            }
            None => {
                // Not published although a descriptor was free: bookkeeping disagrees.
                drop(frame);
                self.fail("no free TX descriptor");
                Err(TxError::Device)
            }
        }
    }

    fn transmit_chain(&mut self, mut chain: TxChain) -> Result<(), TxError> {
        let counters = self.counters();
        let len = chain.len();
        let Some(head) = chain.head() else {
            return Err(TxError::ChainUnsupported { frames: 0 });
        };
        // Descriptors: one per non-empty frame, the head's counted even if empty now (the
        // header goes there).
        let frames = 1 + chain.frames().skip(1).filter(|f| !f.is_empty()).count();
        // The marks count from the packet's first byte as it is before the header goes in front.
        let csum = head.checksum_partial();
        let gso = head.gso_request();
        let max = self.max_frame_len();
        let gso = match gso {
            // Segmentation is asked only of a packet that needs it.
            Some(request) if len > max => {
                if !self.tx_gso.contains(request.kind.flag()) || csum.is_none() {
                    debug!("virtio-net: super-segment refused: the device does not segment it");
                    Counters::bump(&counters.tx_too_long);
                    return Err(TxError::ChainUnsupported { frames });
                }
                let gso_max = GSO_MAX_SIZE + ETHERNET_HEADER_LEN;
                if len > gso_max || request.segment_size == 0 {
                    Counters::bump(&counters.tx_too_long);
                    return Err(TxError::TooLong { len, max: gso_max });
                }
                Some(request)
            }
            _ if len > max => {
                debug!("virtio-net: chain of {} bytes refused: over {}", len, max);
                Counters::bump(&counters.tx_too_long);
                return Err(TxError::TooLong { len, max });
            }
            _ => None,
        };
        if self.broken {
            return Err(TxError::Device);
        }
        if frames == 0 || frames > MAX_CHAIN_SEGMENTS || frames > QUEUE {
            return Err(TxError::ChainUnsupported { frames });
        }
        self.room_for(frames)?;
        if chain.headroom() < self.header_len {
            debug!("virtio-net: chain refused: no headroom for the virtio-net header");
            Counters::bump(&counters.tx_no_headroom);
            return Err(TxError::NoHeadroom);
        }
        let partial = match checked_mark(csum, len, counters)? {
            Some(mark) if !self.tx_csum => {
                // (Checked above: the field is inside the chain, so this completes it.)
                chain.complete_checksum(usize::from(mark.start), usize::from(mark.offset));
                Counters::bump(&counters.tx_checksum_completed);
                None
            }
            mark => mark,
        };
        let Ok(header) = chain.push_header(self.header_len) else {
            Counters::bump(&counters.tx_no_headroom);
            return Err(TxError::NoHeadroom);
        };
        fill_tx_header(header, partial, gso);
        let chain = chain.into_device();
        // One descriptor per non-empty frame, the header in the head's.
        let mut buffers =
            [(NonNull::from(&[][..]), BufferDirection::DriverToDevice); MAX_CHAIN_SEGMENTS];
        let mut n = 0;
        for (slot, bytes) in buffers.iter_mut().zip(chain.iter()) {
            *slot = (NonNull::from(bytes), BufferDirection::DriverToDevice);
            n += 1;
        }
        // SAFETY: the chain's frames (DEVICE state, owned by this driver) are stored in
        // `tx_frames` under the returned token and neither read mutably nor dropped until the
        // ring pops that token; the device only reads them (the pointers made from shared
        // slices are never written through).
        let token = unsafe { self.tx.add(&buffers[..n]) };
        let Some(head) = token else {
            // Not published although descriptors were free: bookkeeping disagrees.
            drop(chain);
            self.fail("no free TX descriptor");
            return Err(TxError::Device);
        };
        // Each frame under its descriptor (in order; an empty frame got none and goes back now).
        let mut descriptors = self.tx.chain(head);
        let mut clash = false;
        let tx_frames = &mut self.tx_frames;
        for frame in chain {
            if frame.is_empty() {
                continue;
            }
            match descriptors
                .next()
                .and_then(|d| tx_frames.get_mut(usize::from(d)))
            {
                Some(entry @ None) => *entry = Some(frame),
                _ => {
                    // The device may read this frame: keep its slot out of the pool.
                    core::mem::forget(frame);
                    clash = true;
                }
            }
        }
        drop(descriptors);
        match clash {
            false => {
                counters
                    .tx_in_flight
                    .store(self.tx.in_flight() as u64, Relaxed);
                Counters::bump(&counters.tx_frames);
                counters.tx_bytes.fetch_add(len as u64, Relaxed);
                if partial.is_some() {
                    Counters::bump(&counters.tx_checksum_offloaded);
                }
                if gso.is_some() {
                    Counters::bump(&counters.tx_gso);
                }
                if !self.batched {
                    self.kick_tx();
                }
                Ok(())
            }
            true => {
                self.fail("TX descriptor already in use");
                Err(TxError::Device)
            }
        }
    }

    fn receive_deferral(&mut self) -> Option<Duration> {
        if !core::mem::take(&mut self.rx_defer_offer) || self.broken {
            return None;
        }
        // The caller polls again after the delay: the interrupt the drained pass asked for is
        // taken back. A buffer the device uses before this may still interrupt (it wakes the
        // caller early: harmless); one used after raises none, and the deferred poll takes it.
        self.rx.disable_interrupts();
        Counters::bump(&self.counters().rx_deferrals);
        Some(self.rx_defer)
    }

    fn flush(&mut self) {
        self.batched = true;
        if !self.broken {
            // Frames the device is done with go back now: a socket may wait on a retained
            // frame's return (to send it again); for one the device still has, a TX interrupt
            // is asked for (after the doorbell, which may be what starts its transmission).
            self.reclaim_tx();
            self.kick_rx();
            self.kick_tx();
            self.watch_tx_returns();
        }
    }

    fn capabilities(&self) -> Capabilities {
        let checksum = if self.tx_csum {
            ChecksumOffloads::TCP_TX.union(ChecksumOffloads::UDP_TX)
        } else {
            ChecksumOffloads::empty()
        };
        Capabilities::new(Medium::Ethernet, self.mtu)
            .with_tx_headroom(self.header_len)
            .with_checksum(checksum)
            .with_gso(GSO_MAX_SIZE, self.tx_gso)
            .with_rx_chains(self.rx_merged)
            .with_max_burst(Some(QUEUE))
    }

    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet(self.mac)
    }

    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        if self.features & feature::STATUS == 0 {
            // The state never changes, so there is no change to register for.
            return LinkState::Up;
        }
        // Registered before the read: a change after it raises an interrupt that wakes `cx`.
        self.irq.link.register(cx.waker());
        match self.transport.read_config_space::<u16>(config::STATUS) {
            Ok(status) if status & config::S_LINK_UP == 0 => {
                debug!("virtio-net: link status: down");
                LinkState::Down
            }
            Ok(_) => {
                debug!("virtio-net: link status: up");
                LinkState::Up
            }
            Err(_) => {
                warn!("virtio-net: link status unreadable: taken as up");
                LinkState::Up
            }
        }
    }
}

impl<H: Hal, T: Transport, const QUEUE: usize> Drop for VirtioNet<H, T, QUEUE> {
    fn drop(&mut self) {
        // The device may still write posted buffers and read queued frames: leave those slots
        // (and the rings, which `Ring` never frees) with it instead of returning them to a pool
        // the device could still write into.
        for entry in self.rx_slots.iter_mut() {
            if let Some(slot) = entry.take() {
                core::mem::forget(slot);
            }
        }
        for entry in self.tx_frames.iter_mut() {
            if let Some(frame) = entry.take() {
                core::mem::forget(frame);
            }
        }
    }
}

impl<H: Hal, T: Transport, const QUEUE: usize> fmt::Debug for VirtioNet<H, T, QUEUE> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtioNet")
            .field("mac", &HardwareAddress::Ethernet(self.mac))
            .field("mtu", &self.mtu)
            .field("features", &self.features)
            .field("rx_posted", &self.rx.in_flight())
            .field("tx_in_flight", &self.tx.in_flight())
            .field("batched", &self.batched)
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}
