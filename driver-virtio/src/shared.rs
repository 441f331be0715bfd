//! [`SharedTransport`]: one transport used by [`VirtioNet`](crate::VirtioNet) and by other code
//! of the kernel.
//!
//! [`VirtioNet::new`](crate::VirtioNet::new) takes its transport by value and keeps it. A kernel
//! that must reach the same device elsewhere (its configuration space, the ISR status a shared
//! interrupt line needs read) puts the transport in a `'static` [`spin::Mutex`] and gives the
//! driver a `SharedTransport`, a `Transport` that forwards every call through that lock; it keeps
//! a copy for itself.
//!
//! # Ground rules
//!
//! * Only task context takes the lock: the driver's calls (from its `Driver` methods) and the
//!   kernel's own run one after the other, never nested, so the lock is never contended for
//!   long.
//! * An interrupt handler must never touch the transport through it (it would deadlock if it
//!   interrupted a holder of the lock): it calls [`VirtioIrq`](crate::VirtioIrq)'s `handle_*`
//!   methods, which take no lock, and reads the ISR status through its own mapping.

use spin::Mutex;
use virtio_drivers::transport::{DeviceStatus, DeviceType, InterruptStatus, Transport};
use virtio_drivers::PhysAddr;
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// A [`Transport`] that forwards to one kept in a `'static` lock, so that the kernel can reach
/// the device while [`VirtioNet`](crate::VirtioNet) owns a `SharedTransport` of it. `Copy`: each
/// copy refers to the same transport.
///
/// ```ignore
/// static NIC: spin::Once<spin::Mutex<PciTransport>> = spin::Once::new();
///
/// let shared = SharedTransport::new(NIC.call_once(|| spin::Mutex::new(transport)));
/// let net = VirtioNet::<KernelHal, _, 256>::new(shared, pool, &NET_IRQ)?;
/// // The kernel keeps `shared` (or the `&'static Mutex`) for its own calls.
/// ```
///
/// Only task context may use it (see the module's ground rules): never call into the
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
