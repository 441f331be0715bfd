//! [`Doorbells`]: a `Transport` whose queue notification is one write to the queue's doorbell,
//! its address read once per queue at set-up, and which counts every notification.
//!
//! # Why
//!
//! virtio-drivers 0.13's `PciTransport::notify` makes three register accesses per doorbell: it
//! selects the queue in the common configuration (`queue_select`), reads that queue's
//! `queue_notify_off` back, and only then writes the doorbell. Under a hypervisor each access is
//! an exit; under QEMU's TCG each is an emulated MMIO access. The offset never changes once the
//! queue is set up (virtio 1.x, 4.1.4.4: it is read-only for the driver), so [`Doorbells`] reads
//! it once, when the driver calls `queue_set`, keeps the doorbell's address, and `notify` is then
//! a single 16-bit write of the queue index there, as the specification has the driver do.
//!
//! virtio-mmio's doorbell (`QueueNotify`) is already one register write at a fixed offset:
//! [`Doorbells::new`] without a PCI layout forwards to the transport's own `notify`.
//!
//! # Counting
//!
//! [`Doorbells::counted`] adds one to a counter of the caller's per notification, whichever way
//! it goes: the same count for any driver over the transport (the example kernel counts the
//! kicks of both its zcnet driver and the smoltcp baseline's `VirtIONetRaw` this way).
//!
//! # Ground rules
//!
//! * The addresses in a [`PciNotify`] are the device's mapped common configuration and notify
//!   structures (from its `VIRTIO_PCI_CAP_COMMON_CFG` and `VIRTIO_PCI_CAP_NOTIFY_CFG`
//!   capabilities): [`Doorbells::pci`] is `unsafe` for that.
//! * What the device reports is bounded: a doorbell offset that would fall outside the notify
//!   structure is not used; that queue's notifications go through the transport's own `notify`.
//! * Like every `Transport` method, these run in task context only (see
//!   [`SharedTransport`](crate::SharedTransport)'s ground rules).

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use virtio_drivers::transport::{DeviceStatus, DeviceType, InterruptStatus, Transport};
use virtio_drivers::PhysAddr;
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// Queues `0..DIRECT_QUEUES` get a doorbell address of their own; a notification of a queue
/// past them goes through the transport's `notify` (virtio-net's first RX/TX pair and its
/// control queue fit).
pub const DIRECT_QUEUES: usize = 4;

/// Offset of `queue_select` (`le16`) in the virtio-pci common configuration structure.
const COMMON_QUEUE_SELECT: usize = 0x16;
/// Offset of `queue_notify_off` (`le16`, read-only) in the common configuration structure.
const COMMON_QUEUE_NOTIFY_OFF: usize = 0x1E;

/// Where a modern virtio-pci device's doorbells are: what its `VIRTIO_PCI_CAP_COMMON_CFG` and
/// `VIRTIO_PCI_CAP_NOTIFY_CFG` capabilities say, as CPU addresses (BAR address plus the
/// capability's offset, mapped uncached).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciNotify {
    /// CPU address of the common configuration structure.
    pub common_cfg: usize,
    /// CPU address of the notify structure (its capability's BAR address plus offset).
    pub notify: usize,
    /// Length of the notify structure in bytes (the capability's `length`).
    pub notify_len: usize,
    /// The capability's `notify_off_multiplier`: queue `q`'s doorbell is at
    /// `notify + queue_notify_off(q) * notify_off_multiplier`.
    pub notify_off_multiplier: u32,
}

/// A [`Transport`] around `T` whose `notify` is one write to the queue's doorbell (with a
/// [`PciNotify`] layout) and, with [`counted`](Self::counted), counted. Everything else
/// forwards to `T`.
///
/// virtio-drivers 0.13's `PciTransport::notify` selects the queue, reads its
/// `queue_notify_off` back and then writes the doorbell: three register accesses (three exits
/// under a hypervisor) per notification. The offset is fixed once the queue is set up, so this
/// wrapper reads it once, at `queue_set`, and a notification is one 16-bit write of the queue
/// index at the doorbell. A doorbell the device places outside its notify structure is not
/// used: that queue goes through `T`'s own `notify`.
///
/// ```ignore
/// static KICKS: AtomicU64 = AtomicU64::new(0);
///
/// // PCI: the layout from the device's capabilities (the kernel's own PCI scan).
/// // SAFETY: the addresses are the device's mapped common and notify structures.
/// let transport = unsafe { Doorbells::pci(pci_transport, layout) }.counted(&KICKS);
/// let net = VirtioNet::<KernelHal, _, 256>::new(transport, pool, &NET_IRQ)?;
/// ```
#[derive(Debug)]
pub struct Doorbells<T> {
    inner: T,
    pci: Option<PciNotify>,
    /// Queue `q`'s doorbell address, once `queue_set` has read it (0: none, use `inner`).
    bells: [usize; DIRECT_QUEUES],
    /// Queue `q`'s areas as the driver gave them to `queue_set` (`None` until then).
    areas: [Option<QueueAreas>; DIRECT_QUEUES],
    count: Option<&'static AtomicU64>,
}

/// Where a split virtqueue lives, as its driver gave it to the device (`Transport::queue_set`):
/// for a diagnostic reader of the rings ([`Doorbells::queue_areas`]).
///
/// The driver area (the avail ring) holds `flags` at offset 0, `idx` at 2, the ring from 4 and,
/// with `VIRTIO_F_EVENT_IDX`, `used_event` at `4 + 2 * size`; the device area (the used ring)
/// holds `flags` at 0, `idx` at 2, `size` 8-byte elements from 4 and `avail_event` at
/// `4 + 8 * size` (virtio 1.x, 2.7). All fields are little-endian `u16`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueAreas {
    /// Entries in the queue.
    pub size: u32,
    /// Physical address of the descriptor table.
    pub descriptors: u64,
    /// Physical address of the driver area (the avail ring).
    pub driver_area: u64,
    /// Physical address of the device area (the used ring).
    pub device_area: u64,
}

impl<T: Transport> Doorbells<T> {
    /// Forwards every notification to `inner`'s own `notify` (virtio-mmio, where that is one
    /// write already; or to count a transport's notifications, with
    /// [`counted`](Self::counted)).
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            pci: None,
            bells: [0; DIRECT_QUEUES],
            areas: [None; DIRECT_QUEUES],
            count: None,
        }
    }

    /// Notifies queues `0..DIRECT_QUEUES` with one write each, at the doorbell read once at
    /// `queue_set` from `layout`.
    ///
    /// # Safety
    ///
    /// `layout` describes the device behind `inner`: `common_cfg` is its common configuration
    /// structure and `notify` its notify structure, `notify_len` bytes, both mapped at those
    /// addresses for as long as this value lives (device memory: accesses are volatile, and a
    /// write to a doorbell has no effect on memory).
    pub unsafe fn pci(inner: T, layout: PciNotify) -> Self {
        Self {
            pci: Some(layout),
            ..Self::new(inner)
        }
    }

    /// Adds one to `counter` for every notification (a kick), whichever way it goes.
    pub fn counted(mut self, counter: &'static AtomicU64) -> Self {
        self.count = Some(counter);
        self
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The doorbell address of `queue`, if it has one of its own.
    pub fn doorbell(&self, queue: u16) -> Option<usize> {
        self.bells
            .get(usize::from(queue))
            .copied()
            .filter(|&a| a != 0)
    }

    /// Where queue `queue` (below [`DIRECT_QUEUES`]) lives, once the driver has set it up:
    /// what a kernel reads to print the rings' indices when its network stalls (the device's
    /// `used.idx` against the driver's `avail.idx` and `used_event`). `None` before
    /// `queue_set`, after `queue_unset`, and for other queues.
    pub fn queue_areas(&self, queue: u16) -> Option<QueueAreas> {
        self.areas.get(usize::from(queue)).copied().flatten()
    }

    /// Reads `queue`'s doorbell address from the device (PCI layout only): selects the queue,
    /// reads its `queue_notify_off`, and checks that the doorbell lies inside the notify
    /// structure.
    fn read_doorbell(&self, queue: u16) -> Option<usize> {
        let pci = self.pci?;
        // SAFETY: `pci` describes the device's mapped common configuration (`Self::pci`'s
        // contract); `queue_select` and `queue_notify_off` are aligned 16-bit registers in it.
        // Selecting a queue only changes what the queue registers show, and every user of
        // them selects first (the transport does, in each of its queue methods).
        let off = unsafe {
            ((pci.common_cfg + COMMON_QUEUE_SELECT) as *mut u16).write_volatile(queue.to_le());
            u16::from_le(((pci.common_cfg + COMMON_QUEUE_NOTIFY_OFF) as *const u16).read_volatile())
        };
        let offset = usize::from(off).checked_mul(pci.notify_off_multiplier as usize)?;
        let end = offset.checked_add(2)?;
        (end <= pci.notify_len && offset.is_multiple_of(2)).then(|| pci.notify + offset)
    }
}

impl<T: Transport> Transport for Doorbells<T> {
    fn device_type(&self) -> DeviceType {
        self.inner.device_type()
    }
    fn read_device_features(&mut self) -> u64 {
        self.inner.read_device_features()
    }
    fn write_driver_features(&mut self, driver_features: u64) {
        self.inner.write_driver_features(driver_features)
    }
    fn max_queue_size(&mut self, queue: u16) -> u32 {
        self.inner.max_queue_size(queue)
    }
    fn notify(&mut self, queue: u16) {
        if let Some(counter) = self.count {
            counter.fetch_add(1, Relaxed);
        }
        match self.doorbell(queue) {
            // SAFETY: `queue_set` took this address from the device's notify structure and
            // checked it lies inside (`read_doorbell`), which `Self::pci`'s contract keeps
            // mapped; the write is the notification itself (virtio 1.x, 4.1.5.2: the queue's
            // index, 16 bits).
            Some(bell) => unsafe { (bell as *mut u16).write_volatile(queue.to_le()) },
            None => self.inner.notify(queue),
        }
    }
    fn get_status(&self) -> DeviceStatus {
        self.inner.get_status()
    }
    fn set_status(&mut self, status: DeviceStatus) {
        self.inner.set_status(status)
    }
    fn set_guest_page_size(&mut self, guest_page_size: u32) {
        self.inner.set_guest_page_size(guest_page_size)
    }
    fn requires_legacy_layout(&self) -> bool {
        self.inner.requires_legacy_layout()
    }
    fn queue_set(
        &mut self,
        queue: u16,
        size: u32,
        descriptors: PhysAddr,
        driver_area: PhysAddr,
        device_area: PhysAddr,
    ) {
        self.inner
            .queue_set(queue, size, descriptors, driver_area, device_area);
        // Read once here: the offset is fixed for the queue's life.
        let bell = self.read_doorbell(queue).unwrap_or(0);
        if let Some(slot) = self.bells.get_mut(usize::from(queue)) {
            *slot = bell;
        }
        if let Some(slot) = self.areas.get_mut(usize::from(queue)) {
            *slot = Some(QueueAreas {
                size,
                descriptors,
                driver_area,
                device_area,
            });
        }
    }
    fn queue_unset(&mut self, queue: u16) {
        if let Some(slot) = self.bells.get_mut(usize::from(queue)) {
            *slot = 0;
        }
        if let Some(slot) = self.areas.get_mut(usize::from(queue)) {
            *slot = None;
        }
        self.inner.queue_unset(queue)
    }
    fn queue_used(&mut self, queue: u16) -> bool {
        self.inner.queue_used(queue)
    }
    fn ack_interrupt(&mut self) -> InterruptStatus {
        self.inner.ack_interrupt()
    }
    fn read_config_generation(&self) -> u32 {
        self.inner.read_config_generation()
    }
    fn read_config_space<V: FromBytes + IntoBytes>(
        &self,
        offset: usize,
    ) -> virtio_drivers::Result<V> {
        self.inner.read_config_space(offset)
    }
    fn write_config_space<V: IntoBytes + Immutable>(
        &mut self,
        offset: usize,
        value: V,
    ) -> virtio_drivers::Result<()> {
        self.inner.write_config_space(offset, value)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::boxed::Box;

    use super::*;
    use crate::inert_transport::{Areas as Inner, COUNTED_QUEUES};

    // The test transport counts every queue the tests notify.
    const _: () = assert!(DIRECT_QUEUES < COUNTED_QUEUES);

    /// `words` zeroed `u16`s standing in for a device structure, leaked: its address.
    fn device_memory(words: usize) -> usize {
        Box::leak(std::vec![0u16; words].into_boxed_slice()).as_mut_ptr() as usize
    }

    fn read16(addr: usize) -> u16 {
        // SAFETY: `addr` is an aligned word of a leaked `device_memory`; single-threaded.
        unsafe { (addr as *const u16).read_volatile() }
    }

    fn write16(addr: usize, value: u16) {
        // SAFETY: as in `read16`.
        unsafe { (addr as *mut u16).write_volatile(value) }
    }

    #[test]
    fn a_doorbell_is_one_write_where_the_offset_read_at_set_up_says() {
        static KICKS: AtomicU64 = AtomicU64::new(0);
        let (common, notify) = (device_memory(32), device_memory(16));
        let layout = PciNotify {
            common_cfg: common,
            notify,
            notify_len: 32,
            notify_off_multiplier: 4,
        };
        // SAFETY: both structures are leaked memory that outlives the transport.
        let mut t = unsafe { Doorbells::pci(Inner::default(), layout) }.counted(&KICKS);
        write16(common + COMMON_QUEUE_NOTIFY_OFF, 3);
        t.queue_set(1, 256, 0, 0, 0);
        assert_eq!(read16(common + COMMON_QUEUE_SELECT), 1, "queue 1 selected");
        assert_eq!(t.doorbell(1), Some(notify + 12));
        // The register is not read again: what it says now does not matter.
        write16(common + COMMON_QUEUE_NOTIFY_OFF, 0xFFFF);
        write16(common + COMMON_QUEUE_SELECT, 0);
        t.notify(1);
        t.notify(1);
        assert_eq!(
            read16(notify + 12),
            1,
            "the queue index written at its doorbell"
        );
        assert_eq!(read16(common + COMMON_QUEUE_SELECT), 0, "no queue selected");
        assert_eq!(
            t.inner().notified[1],
            0,
            "the transport's notify is not used"
        );
        assert_eq!(KICKS.load(Relaxed), 2);

        // A doorbell past the notify structure (8 * 4 + 2 > 32) is not used.
        write16(common + COMMON_QUEUE_NOTIFY_OFF, 8);
        t.queue_set(0, 256, 0, 0, 0);
        assert_eq!(t.doorbell(0), None);
        t.notify(0);
        assert_eq!(t.inner().notified[0], 1, "through the transport instead");
        // A queue past the direct ones, and one unset, too.
        t.queue_set(DIRECT_QUEUES as u16, 256, 0, 0, 0);
        t.notify(DIRECT_QUEUES as u16);
        assert_eq!(t.inner().notified[DIRECT_QUEUES], 1);
        t.queue_unset(1);
        t.notify(1);
        assert_eq!(t.inner().notified[1], 1);
        assert_eq!(KICKS.load(Relaxed), 5, "every notification counted");
    }

    #[test]
    fn queue_areas_are_what_queue_set_gave_until_queue_unset() {
        let mut t = Doorbells::new(Inner::default());
        assert_eq!(t.queue_areas(0), None, "nothing before queue_set");
        t.queue_set(0, 256, 0x1000, 0x2000, 0x3000);
        t.queue_set(1, 128, 0x5000, 0x6000, 0x7000);
        t.queue_set(DIRECT_QUEUES as u16, 64, 0x9000, 0xa000, 0xb000);
        let areas = |size, descriptors, driver_area, device_area| QueueAreas {
            size,
            descriptors,
            driver_area,
            device_area,
        };
        assert_eq!(t.queue_areas(0), Some(areas(256, 0x1000, 0x2000, 0x3000)));
        assert_eq!(t.queue_areas(1), Some(areas(128, 0x5000, 0x6000, 0x7000)));
        assert_eq!(
            t.queue_areas(DIRECT_QUEUES as u16),
            None,
            "past the kept ones"
        );
        t.queue_unset(0);
        assert_eq!(t.queue_areas(0), None, "forgotten at queue_unset");
        assert_eq!(t.queue_areas(1), Some(areas(128, 0x5000, 0x6000, 0x7000)));
    }

    #[test]
    fn without_a_pci_layout_notifications_go_to_the_transport() {
        let mut t = Doorbells::new(Inner::default());
        t.queue_set(0, 256, 0, 0, 0);
        assert_eq!(t.doorbell(0), None);
        t.notify(0);
        assert_eq!(t.inner().notified[0], 1);
    }
}
