//! [`SharedTransport`]: one transport used by `VirtIONetRaw` and, for the link status, by
//! [`VirtioNet`](crate::VirtioNet).
//!
//! virtio-drivers' `VirtIONetRaw` owns its transport and offers no way to read the device's
//! configuration space once built, so the virtio-net `status` field (bit 0: link up) is out of
//! the driver's reach. A `SharedTransport` is a `Transport` that forwards every call to a
//! transport kept in a `'static` [`spin::Mutex`]; `VirtIONetRaw` gets the `SharedTransport`,
//! [`VirtioNet::with_link_status`](crate::VirtioNet::with_link_status) gets a copy of it and
//! reads `status` through the same lock.
//!
//! # Ground rules
//!
//! * Only the driver's task takes the lock: `VirtIONetRaw`'s calls (from the driver) and the
//!   status read (from [`Driver::poll_link_state`](zcnet_buffer::Driver::poll_link_state)) run
//!   one after the other, never nested, so the lock is never contended and never spins.
//! * An interrupt handler must never touch the transport (it would deadlock if it interrupted
//!   the driver holding the lock): it calls [`VirtioIrq`](crate::VirtioIrq)'s `handle_*`
//!   methods, which take no lock.

use spin::Mutex;
use virtio_drivers::transport::{DeviceStatus, DeviceType, InterruptStatus, Transport};
use virtio_drivers::PhysAddr;
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// Offset of the virtio-net configuration's `status` field (after the 6-byte `mac`).
const NET_CONFIG_STATUS: usize = 6;
/// `status` bit: the link is up (`VIRTIO_NET_S_LINK_UP`).
const NET_S_LINK_UP: u16 = 1;
/// Device feature bit: the `status` field is valid (`VIRTIO_NET_F_STATUS`).
const NET_F_STATUS: u64 = 1 << 16;

/// A [`Transport`] that forwards to one kept in a `'static` lock, so that the zcnet driver can
/// read the device's link status while `VirtIONetRaw` owns the transport. `Copy`: each copy
/// refers to the same transport.
///
/// ```ignore
/// static NIC: spin::Once<spin::Mutex<PciTransport>> = spin::Once::new();
///
/// let shared = SharedTransport::new(NIC.call_once(|| spin::Mutex::new(transport)));
/// let raw = VirtIONetRaw::<KernelHal, _, 256>::new(shared)?;
/// let net = VirtioNet::new(raw, pool, &NET_IRQ)?.with_link_status(shared);
/// // Route the configuration-change interrupt to NET_IRQ.handle_config_interrupt().
/// ```
///
/// Only the driver's task may use it (see the module's ground rules): never call into the
/// transport from an interrupt handler.
pub struct SharedTransport<T: 'static> {
    cell: &'static Mutex<T>,
}

impl<T> SharedTransport<T> {
    /// Shares the transport in `cell`.
    pub const fn new(cell: &'static Mutex<T>) -> Self {
        Self { cell }
    }
}

impl<T> Clone for SharedTransport<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SharedTransport<T> {}

impl<T> core::fmt::Debug for SharedTransport<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedTransport").finish_non_exhaustive()
    }
}

impl<T: Transport> Transport for SharedTransport<T> {
    fn device_type(&self) -> DeviceType {
        self.cell.lock().device_type()
    }
    fn read_device_features(&mut self) -> u64 {
        self.cell.lock().read_device_features()
    }
    fn write_driver_features(&mut self, driver_features: u64) {
        self.cell.lock().write_driver_features(driver_features)
    }
    fn max_queue_size(&mut self, queue: u16) -> u32 {
        self.cell.lock().max_queue_size(queue)
    }
    fn notify(&mut self, queue: u16) {
        self.cell.lock().notify(queue)
    }
    fn get_status(&self) -> DeviceStatus {
        self.cell.lock().get_status()
    }
    fn set_status(&mut self, status: DeviceStatus) {
        self.cell.lock().set_status(status)
    }
    fn set_guest_page_size(&mut self, guest_page_size: u32) {
        self.cell.lock().set_guest_page_size(guest_page_size)
    }
    fn requires_legacy_layout(&self) -> bool {
        self.cell.lock().requires_legacy_layout()
    }
    fn queue_set(
        &mut self,
        queue: u16,
        size: u32,
        descriptors: PhysAddr,
        driver_area: PhysAddr,
        device_area: PhysAddr,
    ) {
        self.cell
            .lock()
            .queue_set(queue, size, descriptors, driver_area, device_area)
    }
    fn queue_unset(&mut self, queue: u16) {
        self.cell.lock().queue_unset(queue)
    }
    fn queue_used(&mut self, queue: u16) -> bool {
        self.cell.lock().queue_used(queue)
    }
    fn ack_interrupt(&mut self) -> InterruptStatus {
        self.cell.lock().ack_interrupt()
    }
    fn read_config_generation(&self) -> u32 {
        self.cell.lock().read_config_generation()
    }
    fn read_config_space<V: FromBytes + IntoBytes>(
        &self,
        offset: usize,
    ) -> virtio_drivers::Result<V> {
        self.cell.lock().read_config_space(offset)
    }
    fn write_config_space<V: IntoBytes + Immutable>(
        &mut self,
        offset: usize,
        value: V,
    ) -> virtio_drivers::Result<()> {
        self.cell.lock().write_config_space(offset, value)
    }
}

/// What [`VirtioNet`](crate::VirtioNet) needs of a shared transport, with its type erased.
pub(crate) trait LinkSource: Sync {
    /// Whether the device offers a valid `status` field (`VIRTIO_NET_F_STATUS`).
    fn offers_status(&self) -> bool;
    /// The link-up bit of the device's `status` field; `None` if the read failed.
    fn link_up(&self) -> Option<bool>;
}

impl<T: Transport + Send> LinkSource for Mutex<T> {
    fn offers_status(&self) -> bool {
        self.lock().read_device_features() & NET_F_STATUS != 0
    }

    fn link_up(&self) -> Option<bool> {
        let status: u16 = self.lock().read_config_space(NET_CONFIG_STATUS).ok()?;
        Some(status & NET_S_LINK_UP != 0)
    }
}

impl<T: Transport + Send> SharedTransport<T> {
    /// The type-erased view the driver keeps.
    pub(crate) fn link_source(self) -> &'static dyn LinkSource {
        self.cell
    }
}
