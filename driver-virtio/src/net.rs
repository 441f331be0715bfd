//! [`VirtioNet`]: the [`Driver`] over virtio-drivers' `VirtIONetRaw`.
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
//!   pushes the virtio-net header into that headroom and hands header and frame to the device as
//!   one buffer. The frame stays an [`InFlight`] lease until the device returns its token.
//!
//! # The token tables
//!
//! virtio-drivers names each buffer chain by a token: the index of its first descriptor, always
//! below `QUEUE`. `rx_slots[token]` holds the [`PostedSlot`] the device is filling and
//! `tx_frames[token]` the [`InFlight`] frame it is sending. Both are bounded by the queue size,
//! allocated once, and looked up in O(1).

use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::Ordering::Relaxed;
use core::task::{Context, Poll};

use heapless::Vec;
use virtio_drivers::device::net::VirtIONetRaw;
use virtio_drivers::transport::Transport;
use virtio_drivers::{BufferDirection, Hal};
use zcnet_buffer::{
    Capabilities, ChecksumOffloads, Driver, FramePool, HardwareAddress, InFlight, LinkState,
    Medium, PostedSlot, RxFrame, TxError, TxFrame, ETHERNET_HEADER_LEN,
};

use crate::irq::{Counters, VirtioIrq};
use crate::shared::{LinkSource, SharedTransport};

/// The largest IP packet the driver carries: virtio-drivers 0.13 negotiates neither the MTU
/// feature nor mergeable receive buffers, so the link is standard Ethernet.
pub const MTU: usize = 1500;

/// The smallest receive buffer virtio-drivers accepts (a 1514-byte frame plus a 12-byte
/// virtio-net header). A slot must offer this much from `headroom − header` to its end.
pub const MIN_RX_BUFFER: usize = 1526;

/// Why [`VirtioNet::new`] refused a device or pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VirtioError {
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

/// A virtio-net device as a zcnet [`Driver`]: pool slots in both virtqueues, no copies.
///
/// `QUEUE` is the virtqueue size (a power of two, at most what the device offers; QEMU offers
/// 256). Build the `VirtIONetRaw` with the same `QUEUE`, over any transport (PCI or MMIO), then
/// wrap it:
///
/// ```ignore
/// static POOL: StaticPool<1024, 2048> = StaticPool::new();
/// static NET_IRQ: VirtioIrq = VirtioIrq::new();
///
/// let pool = POOL.init(DEFAULT_HEADROOM)?;          // identity-mapped DMA memory
/// let raw = VirtIONetRaw::<KernelHal, PciTransport, 256>::new(transport)?;
/// let net = VirtioNet::new(raw, pool, &NET_IRQ)?;    // then route the interrupts to NET_IRQ
/// ```
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
///   Completions shorter than the header (`rx_runt`) or longer than `mtu + 14`
///   (`rx_oversize`) are dropped and counted.
/// * **Transmit**: [`Driver::poll_transmit_frame`] first reclaims completed frames, then gives
///   out a pool frame only while the TX queue has room; a full queue registers the caller's
///   waker for the TX interrupt (back-pressure, never a drop or a spin).
///   [`Driver::transmit`] writes the virtio-net header into the frame's headroom and queues it.
/// * **Errors from the device**: a token the driver never issued, or a completion that cannot be
///   popped, marks the device broken (`device_errors`): the driver stops touching the queues and
///   keeps every slot the device might still write.
/// * **Link state** ([`Driver::poll_link_state`]) is the device's `VIRTIO_NET_S_LINK_UP` bit
///   when the driver was given a [`SharedTransport`] through
///   [`with_link_status`](Self::with_link_status); a configuration-change interrupt
///   ([`VirtioIrq::handle_config_interrupt`]) wakes the caller. Without it (or when the device
///   does not offer `VIRTIO_NET_F_STATUS`, or the read fails) the link reads as up, as the
///   virtio specification says a driver must then assume.
/// * **Drop**: virtio-drivers cannot reset a PCI device's queues, so slots still posted or in
///   flight are left with the device (they stay POSTED / DEVICE in the pool) rather than
///   returned to a pool the device could still write into.
pub struct VirtioNet<H: Hal, T: Transport, const QUEUE: usize> {
    raw: VirtIONetRaw<H, T, QUEUE>,
    pool: &'static FramePool,
    irq: &'static VirtioIrq,
    /// Where in a slot the device starts writing: `headroom - header_len`.
    rx_offset: usize,
    /// Size of the virtio-net header this device uses (12 with VERSION_1, 10 for legacy).
    header_len: usize,
    mac: [u8; 6],
    /// Invariant: `rx_slots[t]` is `Some` exactly while the device owns RX token `t`; the slot
    /// is POSTED and nothing reads or writes its bytes until `receive_complete` for `t`.
    /// `QUEUE` entries, one per possible token.
    rx_slots: Vec<Option<PostedSlot>, QUEUE>,
    /// Number of `Some` entries in `rx_slots`.
    rx_posted: usize,
    /// Invariant: `tx_frames[t]` is `Some` exactly while the device owns TX token `t`.
    tx_frames: Vec<Option<InFlight>, QUEUE>,
    /// Number of `Some` entries in `tx_frames`.
    tx_in_flight: usize,
    /// Set when the RX ring ran dry for want of slots; cleared when a slot is posted again, so
    /// each dry spell counts once.
    starved: bool,
    /// The device broke the queue protocol: the driver no longer touches the queues.
    broken: bool,
    /// Where the link status is read ([`with_link_status`](Self::with_link_status)); `None`:
    /// always up.
    link: Option<&'static dyn LinkSource>,
}

impl<H: Hal, T: Transport, const QUEUE: usize> VirtioNet<H, T, QUEUE> {
    /// Wraps an initialised `VirtIONetRaw` whose RX and TX buffers will be slots of `pool`, with
    /// `irq` shared with the device's interrupt handler.
    ///
    /// Errors if the pool's headroom cannot hold the virtio-net header, if its slots cannot hold
    /// [`MIN_RX_BUFFER`] bytes behind `headroom − header`, if it has no free slot, or if the
    /// `Hal` maps pool memory elsewhere than the pool's address map (see
    /// [`VirtioError::DmaAddressMismatch`]). Nothing is posted yet: the first
    /// [`Driver::poll_receive`] fills the RX queue.
    pub fn new(
        raw: VirtIONetRaw<H, T, QUEUE>,
        pool: &'static FramePool,
        irq: &'static VirtioIrq,
    ) -> Result<Self, VirtioError> {
        let mut probe = [0u8; 32];
        // A 32-byte buffer holds either header layout, so this cannot fail; if a future
        // virtio-drivers grew its header, refusing the pool is the safe answer.
        let header_len =
            raw.fill_buffer_header(&mut probe)
                .map_err(|_| VirtioError::HeadroomTooSmall {
                    headroom: pool.headroom(),
                    needed: probe.len(),
                })?;
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

        info!(
            "virtio-net: {} entries per queue, {}-byte virtio-net header, {} pool slots",
            QUEUE,
            header_len,
            pool.slot_count()
        );
        let mut rx_slots = Vec::new();
        let mut tx_frames = Vec::new();
        for _ in 0..QUEUE {
            // Both have capacity QUEUE, so neither push can fail.
            let _ = rx_slots.push(None);
            let _ = tx_frames.push(None);
        }
        Ok(Self {
            mac: raw.mac_address(),
            raw,
            pool,
            irq,
            rx_offset,
            header_len,
            rx_slots,
            rx_posted: 0,
            tx_frames,
            tx_in_flight: 0,
            starved: false,
            broken: false,
            link: None,
        })
    }

    /// Reads the link state from the device's configuration space through `transport`, a copy
    /// of the [`SharedTransport`] this driver's `VirtIONetRaw` was built over. Route the
    /// device's configuration-change interrupt to [`VirtioIrq::handle_config_interrupt`] so
    /// that a change wakes the task in [`Driver::poll_link_state`].
    ///
    /// A device that does not offer `VIRTIO_NET_F_STATUS` has no valid status field: the link
    /// then stays up, as without this call.
    pub fn with_link_status<X: Transport + Send>(mut self, transport: SharedTransport<X>) -> Self {
        let source = transport.link_source();
        self.link = source.offers_status().then_some(source);
        if self.link.is_none() {
            info!("virtio-net: the device reports no link status: the link is taken as up");
        }
        self
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

    /// The largest frame the link carries, Ethernet header included.
    fn max_frame_len(&self) -> usize {
        MTU + ETHERNET_HEADER_LEN
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

    /// Posts free slots until the RX queue is full or the pool is empty; an empty pool registers
    /// `cx` with the pool.
    fn refill(&mut self, cx: &mut Context<'_>) {
        while self.rx_posted < QUEUE && !self.broken {
            let slot = match self.pool.try_alloc_rx() {
                Some(slot) => slot,
                None => match self.pool.poll_alloc_rx(cx) {
                    Poll::Ready(slot) => slot,
                    Poll::Pending => {
                        if self.rx_posted == 0 && !self.starved {
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
            .store(self.rx_posted as u64, Relaxed);
    }

    /// Gives one slot to the device as a receive buffer.
    fn post(&mut self, mut slot: PostedSlot) {
        let offset = self.rx_offset;
        let buffer = &mut slot.buffer_mut()[offset..];
        // SAFETY: the slot is POSTED and owned by this driver; it is stored in `rx_slots` under
        // the returned token and nothing touches its bytes until `receive_complete` for that
        // token passes the same range back (the `rx_slots` invariant). If the device breaks the
        // protocol the slot is kept, never returned to the pool, so DMA cannot hit reused memory.
        match unsafe { self.raw.receive_begin(buffer) } {
            Ok(token) => match self.rx_slots.get_mut(usize::from(token)) {
                Some(entry @ None) => {
                    *entry = Some(slot);
                    self.rx_posted += 1;
                    self.starved = false;
                }
                _ => {
                    // A token out of range or already in use: virtio-drivers and the device
                    // disagree with our bookkeeping. The device may write this slot: keep it.
                    core::mem::forget(slot);
                    self.fail("RX token out of range or in use");
                }
            },
            Err(_) => {
                // The queue has no free descriptor although we track fewer than QUEUE posted
                // buffers: bookkeeping and device disagree. The slot was not handed over.
                drop(slot);
                self.fail("no free RX descriptor");
            }
        }
    }

    /// Pops the RX completion for `token`. Returns the frame, or `None` when it was dropped
    /// (counted) or the device broke the protocol.
    fn complete_rx(&mut self, token: u16) -> Option<RxFrame> {
        let index = usize::from(token);
        let Some(mut slot) = self.rx_slots.get_mut(index).and_then(Option::take) else {
            self.fail("RX completion for a token not posted");
            return None;
        };
        let offset = self.rx_offset;
        // SAFETY: `slot` is the buffer posted under `token` (the `rx_slots` invariant), and the
        // same range of it is passed back, as `receive_complete` requires.
        let done = unsafe {
            self.raw
                .receive_complete(token, &mut slot.buffer_mut()[offset..])
        };
        let counters = self.counters();
        match done {
            Ok((header, len)) => {
                self.rx_posted -= 1;
                if len > self.max_frame_len() {
                    debug!(
                        "virtio-net: received frame of {} bytes dropped: over {}",
                        len,
                        self.max_frame_len()
                    );
                    Counters::bump(&counters.rx_oversize);
                    return None;
                }
                match slot.complete_range(offset + header, len) {
                    Ok(frame) => {
                        Counters::bump(&counters.rx_frames);
                        counters.rx_bytes.fetch_add(len as u64, Relaxed);
                        Some(frame)
                    }
                    Err(_) => {
                        debug!(
                            "virtio-net: received frame of {} bytes dropped: over the slot",
                            len
                        );
                        Counters::bump(&counters.rx_oversize);
                        None
                    }
                }
            }
            Err(virtio_drivers::Error::IoError) => {
                // Popped, but shorter than the virtio-net header.
                self.rx_posted -= 1;
                debug!("virtio-net: received buffer shorter than the virtio-net header dropped");
                Counters::bump(&counters.rx_runt);
                None
            }
            Err(_) => {
                // Not popped: the device still owns the buffer. Keep the slot where it was.
                self.rx_slots[index] = Some(slot);
                self.fail("RX completion not popped");
                None
            }
        }
    }

    /// Returns every frame the device has finished sending to the pool.
    fn reclaim_tx(&mut self) {
        while !self.broken {
            let Some(token) = self.raw.poll_transmit() else {
                break;
            };
            let index = usize::from(token);
            let Some(frame) = self.tx_frames.get_mut(index).and_then(Option::take) else {
                self.fail("TX completion for a token not queued");
                break;
            };
            // SAFETY: `frame` is the buffer queued under `token` (the `tx_frames` invariant),
            // passed back whole as `transmit_complete` requires.
            match unsafe { self.raw.transmit_complete(token, &frame) } {
                Ok(_) => {
                    self.tx_in_flight -= 1;
                    drop(frame);
                }
                Err(_) => {
                    self.tx_frames[index] = Some(frame);
                    self.fail("TX completion not popped");
                }
            }
        }
        self.counters()
            .tx_in_flight
            .store(self.tx_in_flight as u64, Relaxed);
    }
}

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
        if self.broken {
            return Poll::Pending;
        }
        self.refill(cx);
        loop {
            if let Some(token) = self.raw.poll_receive() {
                let frame = self.complete_rx(token);
                // A fresh slot in the completed one's place before anything is handed up.
                self.refill(cx);
                match frame {
                    Some(frame) => return Poll::Ready(frame),
                    None if self.broken => return Poll::Pending,
                    None => continue,
                }
            }
            // Register, then look once more: a completion after this look raises an RX
            // interrupt, which wakes the waker registered here.
            self.irq.rx.register(cx.waker());
            if self.raw.poll_receive().is_none() {
                return Poll::Pending;
            }
        }
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        if self.broken {
            return Poll::Pending;
        }
        self.reclaim_tx();
        if self.tx_in_flight < QUEUE {
            if let Poll::Ready(frame) = self.pool.poll_alloc_tx(cx) {
                return Poll::Ready(frame);
            }
            if self.tx_in_flight == 0 {
                // Only a slot returned elsewhere can help; the pool wakes us then.
                return Poll::Pending;
            }
        }
        // The queue is full, or frames the device still holds are the slots we lack: wait for
        // a TX completion. Register, then reclaim once more, since a completion between the
        // reclaim above and the registration raised its interrupt before anyone listened.
        self.irq.tx.register(cx.waker());
        self.reclaim_tx();
        if self.tx_in_flight < QUEUE {
            return self.pool.poll_alloc_tx(cx);
        }
        Poll::Pending
    }

    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.broken {
            return Poll::Pending;
        }
        self.reclaim_tx();
        if self.tx_in_flight < QUEUE {
            return Poll::Ready(());
        }
        // Register, then reclaim once more (as in `poll_transmit_frame`).
        self.irq.tx.register(cx.waker());
        self.reclaim_tx();
        if self.tx_in_flight < QUEUE {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
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
        if self.tx_in_flight >= QUEUE {
            self.reclaim_tx();
            if self.tx_in_flight >= QUEUE {
                debug!("virtio-net: frame refused: TX queue full");
                Counters::bump(&counters.tx_queue_full);
                return Err(TxError::Device);
            }
        }
        let Ok(header) = frame.push_header(self.header_len) else {
            debug!("virtio-net: frame refused: no headroom for the virtio-net header");
            Counters::bump(&counters.tx_no_headroom);
            return Err(TxError::NoHeadroom);
        };
        if self.raw.fill_buffer_header(header).is_err() {
            Counters::bump(&counters.tx_no_headroom);
            return Err(TxError::NoHeadroom);
        }
        let frame = frame.into_device();
        // SAFETY: `frame` (DEVICE state, owned by this driver) is stored in `tx_frames` under
        // the returned token and not touched until `transmit_complete` passes it back whole.
        match unsafe { self.raw.transmit_begin(&frame) } {
            Ok(token) => match self.tx_frames.get_mut(usize::from(token)) {
                Some(entry @ None) => {
                    *entry = Some(frame);
                    self.tx_in_flight += 1;
                    counters
                        .tx_in_flight
                        .store(self.tx_in_flight as u64, Relaxed);
                    Counters::bump(&counters.tx_frames);
                    counters.tx_bytes.fetch_add(len as u64, Relaxed);
                    Ok(())
                }
                _ => {
                    // The device may read this frame: keep its slot out of the pool.
                    core::mem::forget(frame);
                    self.fail("TX token out of range or in use");
                    Err(TxError::Device)
                }
            },
            Err(_) => {
                // Not queued (no free descriptor although fewer than QUEUE are in flight).
                drop(frame);
                self.fail("no free TX descriptor");
                Err(TxError::Device)
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            medium: Medium::Ethernet,
            mtu: MTU,
            tx_headroom: self.header_len,
            checksum: ChecksumOffloads::empty(),
            max_burst: Some(QUEUE),
        }
    }

    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet(self.mac)
    }

    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        let Some(source) = self.link else {
            // The state never changes, so there is no change to register for.
            return LinkState::Up;
        };
        // Registered before the read: a change after it raises an interrupt that wakes `cx`.
        self.irq.link.register(cx.waker());
        match source.link_up() {
            Some(false) => {
                debug!("virtio-net: link status: down");
                LinkState::Down
            }
            Some(true) => {
                debug!("virtio-net: link status: up");
                LinkState::Up
            }
            None => {
                warn!("virtio-net: link status unreadable: taken as up");
                LinkState::Up
            }
        }
    }
}

impl<H: Hal, T: Transport, const QUEUE: usize> Drop for VirtioNet<H, T, QUEUE> {
    fn drop(&mut self) {
        // The device may still write posted buffers and read queued frames (PCI queues cannot be
        // unset): leave those slots with it instead of returning them to the pool.
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
            .field("rx_posted", &self.rx_posted)
            .field("tx_in_flight", &self.tx_in_flight)
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}
