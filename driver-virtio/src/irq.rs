//! [`VirtioIrq`]: what the device's interrupt handler and the driver share — the RX, TX and
//! link wakers and the counters.
//!
//! # Ground rules
//!
//! * The interrupt handler only calls `handle_*_interrupt`: it counts the interrupt and wakes the
//!   task waiting on that queue. It never touches the virtqueues, so it needs no lock and cannot
//!   deadlock with the driver it interrupted.
//! * The driver (one [`VirtioNet`](crate::VirtioNet), running in a task) registers its caller's
//!   waker *before* it looks at the used ring for the last time, so a completion that lands after
//!   that look raises an interrupt that wakes the new waker (the wakers are
//!   [`WakerCell`]s: lock-free, one registrant, any number of wakers).
//! * Counters are statistics: each has one writer (the driver, or the interrupt handler for the
//!   interrupt counts), `Relaxed` atomics, and no decision is taken on their values.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use zcnet_buffer::WakerCell;

/// The state a virtio-net device's interrupt handler shares with its
/// [`VirtioNet`](crate::VirtioNet) driver: the RX and TX wakers and the driver's counters.
///
/// Put it in a `static` and pass it to [`VirtioNet::new`](crate::VirtioNet::new); the interrupt
/// handler calls [`handle_rx_interrupt`](Self::handle_rx_interrupt) and
/// [`handle_tx_interrupt`](Self::handle_tx_interrupt) (one MSI-X vector per queue), or
/// [`handle_interrupt`](Self::handle_interrupt) for a shared line (INTx).
///
/// ```
/// use zcnet_virtio::VirtioIrq;
///
/// static NET_IRQ: VirtioIrq = VirtioIrq::new();
///
/// // In the kernel's handler for the RX queue's MSI-X vector, before the EOI:
/// NET_IRQ.handle_rx_interrupt();
/// assert_eq!(NET_IRQ.stats().rx_interrupts, 1);
/// ```
#[derive(Debug)]
pub struct VirtioIrq {
    /// Woken by RX interrupts; registered by `Driver::poll_receive`.
    pub(crate) rx: WakerCell,
    /// Woken by TX interrupts; registered by `Driver::poll_transmit_frame` when the TX queue is
    /// full.
    pub(crate) tx: WakerCell,
    /// Woken by configuration-change interrupts; registered by `Driver::poll_link_state`.
    pub(crate) link: WakerCell,
    pub(crate) counters: Counters,
}

impl VirtioIrq {
    /// Shared state with no waker registered and all counters zero.
    pub const fn new() -> Self {
        Self {
            rx: WakerCell::new(),
            tx: WakerCell::new(),
            link: WakerCell::new(),
            counters: Counters::new(),
        }
    }

    /// The receive queue used a buffer: wakes the task waiting for frames. Callable from
    /// interrupt context (no lock, no allocation); the device needs no further acknowledgement
    /// when its interrupts are MSI-X messages.
    pub fn handle_rx_interrupt(&self) {
        self.counters.rx_interrupts.fetch_add(1, Relaxed);
        self.rx.wake();
    }

    /// The transmit queue used a buffer: wakes the task waiting for room to transmit. Callable
    /// from interrupt context.
    pub fn handle_tx_interrupt(&self) {
        self.counters.tx_interrupts.fetch_add(1, Relaxed);
        self.tx.wake();
    }

    /// The device's configuration changed (with virtio-net: the link went up or down): wakes
    /// the task waiting in `Driver::poll_link_state`. Callable from interrupt context. With
    /// MSI-X this is the `msix_config` vector's handler; on a shared INTx line, call it when the
    /// ISR status read has bit 1 (configuration change) set.
    pub fn handle_config_interrupt(&self) {
        self.counters.config_interrupts.fetch_add(1, Relaxed);
        self.link.wake();
    }

    /// One interrupt for both queues (a legacy INTx line, or a single MSI vector): wakes both
    /// tasks, counted once as `shared_interrupts`. Callable from interrupt context. A
    /// configuration change is told apart by the ISR status (bit 1): call
    /// [`handle_config_interrupt`](Self::handle_config_interrupt) for it.
    ///
    /// With a level-triggered INTx line the handler must first *acknowledge* the device by
    /// reading its ISR status register (the virtio PCI capability of type 3, or the MMIO
    /// `InterruptStatus`/`InterruptACK` pair); otherwise the line stays asserted and the interrupt
    /// fires again as soon as the handler returns.
    pub fn handle_interrupt(&self) {
        self.counters.shared_interrupts.fetch_add(1, Relaxed);
        self.rx.wake();
        self.tx.wake();
    }

    /// The driver's counters now.
    pub fn stats(&self) -> VirtioStats {
        self.counters.snapshot()
    }
}

impl Default for VirtioIrq {
    fn default() -> Self {
        Self::new()
    }
}

/// The driver's counters (see [`VirtioStats`] for their meaning).
#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) rx_frames: AtomicU64,
    pub(crate) rx_bytes: AtomicU64,
    pub(crate) tx_frames: AtomicU64,
    pub(crate) tx_bytes: AtomicU64,
    pub(crate) rx_runt: AtomicU64,
    pub(crate) rx_oversize: AtomicU64,
    pub(crate) rx_starved: AtomicU64,
    pub(crate) tx_too_long: AtomicU64,
    pub(crate) tx_no_headroom: AtomicU64,
    pub(crate) tx_queue_full: AtomicU64,
    pub(crate) device_errors: AtomicU64,
    pub(crate) rx_interrupts: AtomicU64,
    pub(crate) tx_interrupts: AtomicU64,
    pub(crate) shared_interrupts: AtomicU64,
    pub(crate) config_interrupts: AtomicU64,
    pub(crate) rx_posted: AtomicU64,
    pub(crate) tx_in_flight: AtomicU64,
    pub(crate) rx_kicks: AtomicU64,
    pub(crate) tx_kicks: AtomicU64,
    pub(crate) kicks_suppressed: AtomicU64,
    pub(crate) rx_interrupt_requests: AtomicU64,
    pub(crate) tx_interrupt_requests: AtomicU64,
    pub(crate) rx_checksum_valid: AtomicU64,
    pub(crate) rx_checksum_partial: AtomicU64,
    pub(crate) tx_checksum_offloaded: AtomicU64,
    pub(crate) tx_checksum_completed: AtomicU64,
    pub(crate) tx_bad_checksum_mark: AtomicU64,
    pub(crate) rx_rechecks: AtomicU64,
    pub(crate) rx_deferrals: AtomicU64,
    pub(crate) rx_merged: AtomicU64,
    pub(crate) rx_chains_dropped: AtomicU64,
    pub(crate) tx_gso: AtomicU64,
}

impl Counters {
    const fn new() -> Self {
        Self {
            rx_frames: AtomicU64::new(0),
            rx_bytes: AtomicU64::new(0),
            tx_frames: AtomicU64::new(0),
            tx_bytes: AtomicU64::new(0),
            rx_runt: AtomicU64::new(0),
            rx_oversize: AtomicU64::new(0),
            rx_starved: AtomicU64::new(0),
            tx_too_long: AtomicU64::new(0),
            tx_no_headroom: AtomicU64::new(0),
            tx_queue_full: AtomicU64::new(0),
            device_errors: AtomicU64::new(0),
            rx_interrupts: AtomicU64::new(0),
            tx_interrupts: AtomicU64::new(0),
            shared_interrupts: AtomicU64::new(0),
            config_interrupts: AtomicU64::new(0),
            rx_posted: AtomicU64::new(0),
            tx_in_flight: AtomicU64::new(0),
            rx_kicks: AtomicU64::new(0),
            tx_kicks: AtomicU64::new(0),
            kicks_suppressed: AtomicU64::new(0),
            rx_interrupt_requests: AtomicU64::new(0),
            tx_interrupt_requests: AtomicU64::new(0),
            rx_checksum_valid: AtomicU64::new(0),
            rx_checksum_partial: AtomicU64::new(0),
            tx_checksum_offloaded: AtomicU64::new(0),
            tx_checksum_completed: AtomicU64::new(0),
            tx_bad_checksum_mark: AtomicU64::new(0),
            rx_rechecks: AtomicU64::new(0),
            rx_deferrals: AtomicU64::new(0),
            rx_merged: AtomicU64::new(0),
            rx_chains_dropped: AtomicU64::new(0),
            tx_gso: AtomicU64::new(0),
        }
    }

    /// Adds one to `counter` (single writer, statistics only).
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    fn snapshot(&self) -> VirtioStats {
        let get = |c: &AtomicU64| c.load(Relaxed);
        VirtioStats {
            rx_frames: get(&self.rx_frames),
            rx_bytes: get(&self.rx_bytes),
            tx_frames: get(&self.tx_frames),
            tx_bytes: get(&self.tx_bytes),
            rx_runt: get(&self.rx_runt),
            rx_oversize: get(&self.rx_oversize),
            rx_starved: get(&self.rx_starved),
            tx_too_long: get(&self.tx_too_long),
            tx_no_headroom: get(&self.tx_no_headroom),
            tx_queue_full: get(&self.tx_queue_full),
            device_errors: get(&self.device_errors),
            rx_interrupts: get(&self.rx_interrupts),
            tx_interrupts: get(&self.tx_interrupts),
            shared_interrupts: get(&self.shared_interrupts),
            config_interrupts: get(&self.config_interrupts),
            rx_posted: get(&self.rx_posted),
            tx_in_flight: get(&self.tx_in_flight),
            rx_kicks: get(&self.rx_kicks),
            tx_kicks: get(&self.tx_kicks),
            kicks_suppressed: get(&self.kicks_suppressed),
            rx_interrupt_requests: get(&self.rx_interrupt_requests),
            tx_interrupt_requests: get(&self.tx_interrupt_requests),
            rx_checksum_valid: get(&self.rx_checksum_valid),
            rx_checksum_partial: get(&self.rx_checksum_partial),
            tx_checksum_offloaded: get(&self.tx_checksum_offloaded),
            tx_checksum_completed: get(&self.tx_checksum_completed),
            tx_bad_checksum_mark: get(&self.tx_bad_checksum_mark),
            rx_rechecks: get(&self.rx_rechecks),
            rx_deferrals: get(&self.rx_deferrals),
            rx_merged: get(&self.rx_merged),
            rx_chains_dropped: get(&self.rx_chains_dropped),
            tx_gso: get(&self.tx_gso),
        }
    }
}

/// A snapshot of a virtio-net driver's counters ([`VirtioIrq::stats`]).
///
/// Drops are counted by reason; a healthy link under normal load shows zeros in every `rx_*`
/// drop, `tx_*` refusal and `device_errors` field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VirtioStats {
    /// Frames received and handed to the stack.
    pub rx_frames: u64,
    /// Bytes of those frames (Ethernet header included, virtio-net header excluded).
    pub rx_bytes: u64,
    /// Frames given to the device to transmit.
    pub tx_frames: u64,
    /// Bytes of those frames (virtio-net header excluded).
    pub tx_bytes: u64,
    /// Completions shorter than the virtio-net header: dropped.
    pub rx_runt: u64,
    /// Completions longer than the link's largest frame (`mtu + 14`): dropped.
    pub rx_oversize: u64,
    /// Times the RX ring had no buffer posted because the pool was empty: the device drops
    /// what arrives meanwhile (it does not say how many).
    pub rx_starved: u64,
    /// Frames refused by `transmit` for being longer than the link's largest frame.
    pub tx_too_long: u64,
    /// Frames refused by `transmit` for lacking room for the virtio-net header in front.
    pub tx_no_headroom: u64,
    /// Frames refused by `transmit` because the TX queue was full (a caller that did not wait
    /// for `poll_transmit_frame`).
    pub tx_queue_full: u64,
    /// The device broke the virtqueue protocol (an unknown token, a completion that could not
    /// be popped): the driver stops using the device and keeps the affected slots, which the
    /// device may still write.
    pub device_errors: u64,
    /// RX interrupts ([`VirtioIrq::handle_rx_interrupt`]).
    pub rx_interrupts: u64,
    /// TX interrupts ([`VirtioIrq::handle_tx_interrupt`]).
    pub tx_interrupts: u64,
    /// Interrupts for both queues ([`VirtioIrq::handle_interrupt`]).
    pub shared_interrupts: u64,
    /// Configuration-change interrupts ([`VirtioIrq::handle_config_interrupt`]).
    pub config_interrupts: u64,
    /// RX buffers posted to the device now (the ring's fill level).
    pub rx_posted: u64,
    /// TX frames the device holds now.
    pub tx_in_flight: u64,
    /// Notifications (doorbells) of the RX queue: the device had asked to hear of new buffers.
    pub rx_kicks: u64,
    /// Notifications (doorbells) of the TX queue.
    pub tx_kicks: u64,
    /// Notification decisions with something new published where the device had asked not to
    /// be notified (it was still working through the queue): doorbells saved.
    pub kicks_suppressed: u64,
    /// Times the driver asked for an RX interrupt: once per drained batch (with
    /// [`VirtioConfig::rx_recheck`](crate::VirtioConfig::rx_recheck), once per run of that many
    /// passes that found nothing after one that found frames).
    pub rx_interrupt_requests: u64,
    /// Times the driver asked for a TX interrupt: only while the stack waits for TX room, or
    /// for the return of a retained frame it waits to send again.
    pub tx_interrupt_requests: u64,
    /// Received frames the device marked checked (`DATA_VALID`): handed up
    /// [verified](zcnet_buffer::RxFrame::checksum_verified).
    pub rx_checksum_valid: u64,
    /// Received frames with a partial checksum (`NEEDS_CSUM`: a local sender's, never on a
    /// wire): handed up verified, their checksum field holding the pseudo-header sum.
    pub rx_checksum_partial: u64,
    /// Frames sent with `NEEDS_CSUM`: the device completes their checksum.
    pub tx_checksum_offloaded: u64,
    /// Frames marked checksum-partial that the driver completed itself (the device has no
    /// `VIRTIO_NET_F_CSUM`, or checksum offload is off).
    pub tx_checksum_completed: u64,
    /// Frames refused by `transmit` because their checksum mark lies past their end.
    pub tx_bad_checksum_mark: u64,
    /// Drained RX passes that woke their caller to look again (frames had come in lately)
    /// instead of asking for an RX interrupt ([`VirtioConfig::rx_recheck`](crate::VirtioConfig::rx_recheck)).
    pub rx_rechecks: u64,
    /// Drained RX passes whose interrupt request was taken back because the caller polls again
    /// from a timer ([`VirtioConfig::rx_defer`](crate::VirtioConfig::rx_defer)); each is also
    /// counted in `rx_interrupt_requests`, so the requests that stood are the difference.
    pub rx_deferrals: u64,
    /// Packets received over several buffers (merged receive buffers: large receive).
    pub rx_merged: u64,
    /// Merged packets dropped because the caller took frames (`Driver::poll_receive`), not
    /// chains.
    pub rx_chains_dropped: u64,
    /// Super-segments the device was asked to segment (`HOST_TSO4` / `HOST_TSO6`).
    pub tx_gso: u64,
}
