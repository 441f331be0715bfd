//! [`Areas`], an inert test `Transport` shared by the unit tests of the ring (`src/ring.rs`) and
//! of the doorbell wrapper (`src/notify.rs`); `src/lib.rs` includes this file with `#[path]`.
//! It records where the last queue was placed and counts notifications per queue; everything
//! else does nothing.

use virtio_drivers::transport::{DeviceStatus, DeviceType, InterruptStatus, Transport};
use virtio_drivers::PhysAddr;
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// Queues whose notifications [`Areas`] counts.
pub const COUNTED_QUEUES: usize = 8;

/// Records where the last queue was placed and counts notifications; inert otherwise.
#[derive(Default)]
pub struct Areas {
    /// The descriptor table's address of the last `queue_set`.
    pub descriptors: u64,
    /// Its driver area (avail ring).
    pub driver: u64,
    /// Its device area (used ring).
    pub device: u64,
    /// Notifications per queue.
    pub notified: [u32; COUNTED_QUEUES],
}

impl Transport for Areas {
    fn device_type(&self) -> DeviceType {
        DeviceType::Network
    }
    fn read_device_features(&mut self) -> u64 {
        0
    }
    fn write_driver_features(&mut self, _driver_features: u64) {}
    fn max_queue_size(&mut self, _queue: u16) -> u32 {
        256
    }
    fn notify(&mut self, queue: u16) {
        self.notified[usize::from(queue)] += 1;
    }
    fn get_status(&self) -> DeviceStatus {
        DeviceStatus::empty()
    }
    fn set_status(&mut self, _status: DeviceStatus) {}
    fn set_guest_page_size(&mut self, _guest_page_size: u32) {}
    fn requires_legacy_layout(&self) -> bool {
        true
    }
    fn queue_set(&mut self, _queue: u16, _size: u32, d: PhysAddr, a: PhysAddr, u: PhysAddr) {
        (self.descriptors, self.driver, self.device) = (d, a, u);
    }
    fn queue_unset(&mut self, _queue: u16) {}
    fn queue_used(&mut self, _queue: u16) -> bool {
        false
    }
    fn ack_interrupt(&mut self) -> InterruptStatus {
        InterruptStatus::empty()
    }
    fn read_config_generation(&self) -> u32 {
        0
    }
    fn read_config_space<V: FromBytes + IntoBytes>(
        &self,
        _offset: usize,
    ) -> virtio_drivers::Result<V> {
        Err(virtio_drivers::Error::Unsupported)
    }
    fn write_config_space<V: IntoBytes + Immutable>(
        &mut self,
        _offset: usize,
        _value: V,
    ) -> virtio_drivers::Result<()> {
        Err(virtio_drivers::Error::Unsupported)
    }
}
