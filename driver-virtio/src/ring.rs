//! [`Ring`]: one split virtqueue (virtio 1.x, section 2.7), driver side, with the event-index
//! rules done as the specification states them.
//!
//! # Why the driver keeps its own ring
//!
//! virtio-drivers 0.13's `VirtQueue` manages descriptors well, but the two event-index fields are
//! private to it and it handles them in ways this driver cannot work around:
//!
//! * `VirtQueue::should_notify` tests `avail_idx >= avail_event + 1` (no wrap-around, no "old"
//!   index), where the specification's rule is `vring_need_event(avail_event, new, old)`. With the
//!   RX ring kept full, the device's `avail_event` trails the driver's index by up to a ring's
//!   worth, so that test asks for a doorbell on nearly every refill, and near the 16-bit wrap it
//!   can also miss one the device asked for.
//! * `VirtQueue::pop_used` writes `used_event = last_used` on every pop, and
//!   `VirtQueue::set_dev_notify(false)` does nothing once `VIRTIO_F_EVENT_IDX` is negotiated: a
//!   driver cannot turn TX-completion interrupts off, so the device interrupts about once per
//!   frame.
//!
//! So [`Ring`] lays out and drives the split ring itself, on memory from the `Hal`'s
//! `dma_alloc`, giving the device buffer addresses from the `Hal`'s `share` (as `VirtQueue`
//! does); virtio-drivers' `Transport` still does everything on the device's registers.
//!
//! # Layout
//!
//! One region of `Hal::dma_alloc` pages, in the legacy layout (which every transport accepts):
//!
//! ```text
//!  0                 16·SIZE                               page-aligned
//!  | descriptors      | avail: flags idx ring[SIZE] used_event | ... | used: flags idx ring[SIZE] avail_event |
//! ```
//!
//! # Ground rules
//!
//! * Nothing read back from the ring memory is trusted: the descriptors live in a shadow copy the
//!   device cannot reach, and a used element names a chain only if that chain is in flight;
//!   anything else is a [`RingError`], never a panic.
//! * The ring's indices are written by one side each: the driver writes the avail ring and
//!   `used_event`, the device the used ring and `avail_event`. Accesses are volatile; the fences
//!   are those the specification asks for (descriptors before `avail.idx`; `avail.idx` before
//!   reading `avail_event`; `used.idx` before the used elements; `used_event` before re-reading
//!   `used.idx`).
//! * A ring is never freed while the device may still use it: [`Ring`] has no `Drop` that
//!   deallocates (see [`VirtioNet`](crate::VirtioNet)'s drop).

use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{fence, Ordering};

use virtio_drivers::transport::Transport;
use virtio_drivers::{BufferDirection, Hal, PhysAddr, PAGE_SIZE};

use crate::net::VirtioError;

/// Descriptor flag: the chain continues in `next`.
const DESC_F_NEXT: u16 = 1;
/// Descriptor flag: the device writes this buffer (otherwise it reads it).
const DESC_F_WRITE: u16 = 2;
/// Avail-ring flag: the driver does not want used-buffer notifications (without event index).
const AVAIL_F_NO_INTERRUPT: u16 = 1;
/// Used-ring flag: the device does not want available-buffer notifications (without event index).
const USED_F_NO_NOTIFY: u16 = 1;

/// The specification's event-index test (virtio 1.x, 2.7.10): after moving an index from `old`
/// to `new`, the other side asked to hear about it if `event` lies in `[old, new)`, all modulo
/// 2^16.
pub(crate) fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// The driver's trusted copy of one descriptor.
#[derive(Clone, Copy)]
struct Shadow {
    /// Device address (from `Hal::share`), while the descriptor is in a chain.
    paddr: PhysAddr,
    /// The buffer, for `Hal::unshare`.
    vaddr: *mut u8,
    len: u32,
    flags: u16,
    /// In a chain: the next descriptor of the chain; free: the next free descriptor.
    next: u16,
}

impl Shadow {
    const EMPTY: Self = Self {
        paddr: 0,
        vaddr: core::ptr::null_mut(),
        len: 0,
        flags: 0,
        next: 0,
    };

    fn direction(&self) -> BufferDirection {
        if self.flags & DESC_F_WRITE != 0 {
            BufferDirection::DeviceToDriver
        } else {
            BufferDirection::DriverToDevice
        }
    }
}

/// A buffer chain the device has finished with ([`Ring::pop_used`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Used {
    /// The chain's first descriptor: the token [`Ring::add`] returned.
    pub(crate) head: u16,
    /// Bytes the device wrote into the chain's device-writable buffers (as it reports it).
    pub(crate) len: u32,
}

/// The device broke the split-ring protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RingError {
    /// `used.idx` moved further than the number of chains in flight.
    UsedIndex,
    /// A used element names a descriptor that does not head a chain in flight.
    UsedId,
}

impl RingError {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            RingError::UsedIndex => "used index ahead of the buffers in flight",
            RingError::UsedId => "used element for a chain not in flight",
        }
    }
}

/// One split virtqueue of `SIZE` descriptors (a power of two), driver side.
///
/// Invariants:
/// * `chain_len[h] > 0` exactly while the chain headed by descriptor `h` is the device's; its
///   descriptors follow `shadow[..].next` from `h`, `chain_len[h]` of them.
/// * Free descriptors form a list from `free_head` through `shadow[..].next`, `num_free` long.
/// * `avail_idx` is what the driver last wrote to `avail.idx`; `notified_idx` its value at the
///   last notification decision ([`Ring::kick_needed`]).
pub(crate) struct Ring<H: Hal, const SIZE: usize> {
    queue: u16,
    /// The ring's DMA region: `pages` pages at `base` (the device has its physical address).
    base: NonNull<u8>,
    pages: usize,
    /// Offsets of the avail and used rings in the region.
    avail_offset: usize,
    used_offset: usize,
    shadow: [Shadow; SIZE],
    chain_len: [u16; SIZE],
    free_head: u16,
    num_free: usize,
    /// Chains the device holds.
    in_flight: usize,
    avail_idx: u16,
    notified_idx: u16,
    last_used: u16,
    event_idx: bool,
    /// Whether used-buffer notifications (interrupts) are asked for.
    interrupts: bool,
    _hal: PhantomData<H>,
}

// SAFETY: the ring's memory is owned by the `Ring` (the device aside); the raw pointers in it
// are only dereferenced through `&mut self` or, for reads of device-written fields, `&self`, so
// moving the ring to another thread moves that ownership with it.
unsafe impl<H: Hal, const SIZE: usize> Send for Ring<H, SIZE> {}

impl<H: Hal, const SIZE: usize> Ring<H, SIZE> {
    const SIZE_OK: () = assert!(SIZE.is_power_of_two() && SIZE <= 32768 && SIZE >= 2);
    const DESC_BYTES: usize = 16 * SIZE;
    const AVAIL_BYTES: usize = 6 + 2 * SIZE;
    const USED_BYTES: usize = 6 + 8 * SIZE;

    /// Allocates the ring and gives it to the device as queue `queue`.
    ///
    /// `event_idx`: whether `VIRTIO_F_EVENT_IDX` was negotiated. Used-buffer notifications start
    /// off ([`enable_interrupts`](Self::enable_interrupts) turns them on).
    pub(crate) fn new<T: Transport>(
        transport: &mut T,
        queue: u16,
        event_idx: bool,
    ) -> Result<Self, VirtioError> {
        #[allow(clippy::let_unit_value)]
        let () = Self::SIZE_OK;
        if transport.queue_used(queue) {
            return Err(VirtioError::QueueInUse { queue });
        }
        let max = transport.max_queue_size(queue);
        if (max as usize) < SIZE {
            return Err(VirtioError::QueueTooSmall {
                queue,
                max,
                needed: SIZE,
            });
        }
        let avail_offset = Self::DESC_BYTES;
        let used_offset = (avail_offset + Self::AVAIL_BYTES).next_multiple_of(PAGE_SIZE);
        let pages = (used_offset + Self::USED_BYTES).div_ceil(PAGE_SIZE);
        let (paddr, base) = H::dma_alloc(pages, BufferDirection::Both);
        if paddr == 0 {
            return Err(VirtioError::DmaAlloc);
        }
        let mut shadow = [Shadow::EMPTY; SIZE];
        for (i, d) in shadow.iter_mut().enumerate() {
            // Wraps to 0 for the last one, which `num_free` keeps from being followed.
            d.next = ((i + 1) % SIZE) as u16;
        }
        let mut ring = Self {
            queue,
            base,
            pages,
            avail_offset,
            used_offset,
            shadow,
            chain_len: [0; SIZE],
            free_head: 0,
            num_free: SIZE,
            in_flight: 0,
            avail_idx: 0,
            notified_idx: 0,
            last_used: 0,
            event_idx,
            interrupts: true,
            _hal: PhantomData,
        };
        ring.disable_interrupts();
        transport.queue_set(
            queue,
            SIZE as u32,
            paddr,
            paddr + avail_offset as u64,
            paddr + used_offset as u64,
        );
        Ok(ring)
    }

    /// A pointer to the `u16` at `offset` in the ring's region.
    fn field(&self, offset: usize) -> *mut u16 {
        debug_assert!(offset + 2 <= self.pages * PAGE_SIZE && offset.is_multiple_of(2));
        // SAFETY: every caller passes an offset inside the region (the layout constants), so
        // the result stays inside the one allocation `base` points to.
        unsafe { self.base.as_ptr().add(offset).cast::<u16>() }
    }

    fn read(&self, offset: usize) -> u16 {
        // SAFETY: `field` gives an aligned pointer into the live DMA region; the device may
        // write it concurrently, which a volatile read of a `u16` tolerates (no reference is
        // made, the value is just a snapshot).
        u16::from_le(unsafe { self.field(offset).read_volatile() })
    }

    fn write(&mut self, offset: usize, value: u16) {
        // SAFETY: as in `read`; the fields written here are the driver's side of the ring,
        // which the device only reads.
        unsafe { self.field(offset).write_volatile(value.to_le()) }
    }

    fn avail_flags(&self) -> usize {
        self.avail_offset
    }
    fn avail_idx_field(&self) -> usize {
        self.avail_offset + 2
    }
    fn avail_ring(&self, slot: usize) -> usize {
        self.avail_offset + 4 + 2 * slot
    }
    fn used_event(&self) -> usize {
        self.avail_offset + 4 + 2 * SIZE
    }
    fn used_flags(&self) -> usize {
        self.used_offset
    }
    fn used_idx_field(&self) -> usize {
        self.used_offset + 2
    }
    fn used_elem(&self, slot: usize) -> usize {
        self.used_offset + 4 + 8 * slot
    }
    fn avail_event(&self) -> usize {
        self.used_offset + 4 + 8 * SIZE
    }

    /// Copies descriptor `index` from the shadow into the ring.
    fn write_descriptor(&mut self, index: u16) {
        let d = self.shadow[usize::from(index)];
        let offset = 16 * usize::from(index);
        // SAFETY: descriptor `index < SIZE` lies at `offset` in the region, 16-byte aligned
        // (the region is page-aligned); the device reads descriptors only after `avail.idx`
        // covers them, so this write races with nothing the device does.
        unsafe {
            let p = self.base.as_ptr().add(offset);
            p.cast::<u64>().write_volatile(d.paddr.to_le());
            p.add(8).cast::<u32>().write_volatile(d.len.to_le());
            p.add(12).cast::<u16>().write_volatile(d.flags.to_le());
            p.add(14).cast::<u16>().write_volatile(d.next.to_le());
        }
    }

    /// Free descriptors: how many more buffers [`add`](Self::add) takes.
    pub(crate) fn free(&self) -> usize {
        self.num_free
    }

    /// Chains the device holds.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Makes `buffers` one chain, in order, and publishes it in the avail ring (no notification:
    /// see [`kick_needed`](Self::kick_needed)). Returns the chain's token, its head descriptor.
    /// `None` if `buffers` is empty, holds an empty buffer or more than [`free`](Self::free)
    /// buffers (nothing is changed then).
    ///
    /// # Safety
    ///
    /// Each buffer must stay valid, and not be accessed by the caller, until
    /// [`pop_used`](Self::pop_used) returns this token (or forever, if it never does): the
    /// device reads `DriverToDevice` buffers and writes `DeviceToDriver` ones meanwhile.
    pub(crate) unsafe fn add(
        &mut self,
        buffers: &[(NonNull<[u8]>, BufferDirection)],
    ) -> Option<u16> {
        if buffers.is_empty()
            || buffers.len() > self.num_free
            || buffers
                .iter()
                .any(|(b, _)| b.is_empty() || u32::try_from(b.len()).is_err())
        {
            return None;
        }
        let head = self.free_head;
        let mut index = head;
        for (i, &(buffer, direction)) in buffers.iter().enumerate() {
            // SAFETY: the caller keeps the buffer valid and untouched until it is popped, and
            // `pop_used` unshares it with the same pointer, length and direction.
            let paddr = unsafe { H::share(buffer, direction) };
            let last = i + 1 == buffers.len();
            let d = &mut self.shadow[usize::from(index)];
            d.paddr = paddr;
            d.vaddr = buffer.cast::<u8>().as_ptr();
            d.len = buffer.len() as u32;
            d.flags = match direction {
                BufferDirection::DriverToDevice => 0,
                _ => DESC_F_WRITE,
            } | if last { 0 } else { DESC_F_NEXT };
            let next = d.next;
            self.write_descriptor(index);
            if !last {
                index = next;
            } else {
                self.free_head = next;
            }
        }
        self.num_free -= buffers.len();
        self.chain_len[usize::from(head)] = buffers.len() as u16;
        self.in_flight += 1;
        let slot = usize::from(self.avail_idx) & (SIZE - 1);
        self.write(self.avail_ring(slot), head);
        // The descriptors and the ring entry before the index that makes them the device's.
        fence(Ordering::Release);
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.write(self.avail_idx_field(), self.avail_idx);
        Some(head)
    }

    /// Whether the device asked to be notified of what was published since the last call (the
    /// specification's rule: with event index, `vring_need_event(avail_event, new, old)`;
    /// without, the used ring's `NO_NOTIFY` flag). `None` when nothing was published since.
    /// The caller notifies the device when this says `Some(true)`.
    pub(crate) fn kick_needed(&mut self) -> Option<bool> {
        let new = self.avail_idx;
        let old = self.notified_idx;
        if new == old {
            return None;
        }
        self.notified_idx = new;
        // Our `avail.idx` store before the read of what the device wants.
        fence(Ordering::SeqCst);
        Some(if self.event_idx {
            need_event(self.read(self.avail_event()), new, old)
        } else {
            self.read(self.used_flags()) & USED_F_NO_NOTIFY == 0
        })
    }

    /// The descriptors of the chain headed by `head`, in order (none if `head` heads no chain
    /// in flight).
    pub(crate) fn chain(&self, head: u16) -> impl Iterator<Item = u16> + '_ {
        let count = self.chain_len.get(usize::from(head)).copied().unwrap_or(0);
        let mut next = head;
        (0..count).map(move |_| {
            let index = next;
            next = self.shadow[usize::from(index)].next;
            index
        })
    }

    /// Whether the device has used a chain the driver has not popped.
    pub(crate) fn has_used(&self) -> bool {
        self.read(self.used_idx_field()) != self.last_used
    }

    /// Takes the next chain the device has used: its buffers are the caller's again (unshared).
    /// `Ok(None)` when there is none; an error when the device broke the protocol (nothing is
    /// changed then, and the caller should stop using the ring).
    pub(crate) fn pop_used(&mut self) -> Result<Option<Used>, RingError> {
        self.pop_used_each(|_| {})
    }

    /// [`pop_used`](Self::pop_used), calling `each` with every descriptor of the chain, in
    /// order, as it is released (for a caller that keeps a buffer's owner per descriptor).
    pub(crate) fn pop_used_each(
        &mut self,
        each: impl FnMut(u16),
    ) -> Result<Option<Used>, RingError> {
        let used_idx = self.read(self.used_idx_field());
        if used_idx == self.last_used {
            return Ok(None);
        }
        if usize::from(used_idx.wrapping_sub(self.last_used)) > self.in_flight {
            return Err(RingError::UsedIndex);
        }
        // `used.idx` before the element it covers.
        fence(Ordering::Acquire);
        let slot = usize::from(self.last_used) & (SIZE - 1);
        let offset = self.used_elem(slot);
        // SAFETY: the used element `slot < SIZE` lies at `offset` in the region, 4-byte aligned
        // (the used ring is page-aligned); the device wrote it before publishing `used.idx`.
        let (id, len) = unsafe {
            let p = self.base.as_ptr().add(offset);
            (
                u32::from_le(p.cast::<u32>().read_volatile()),
                u32::from_le(p.add(4).cast::<u32>().read_volatile()),
            )
        };
        let head = match u16::try_from(id) {
            Ok(h) if usize::from(h) < SIZE && self.chain_len[usize::from(h)] > 0 => h,
            _ => return Err(RingError::UsedId),
        };
        self.release_chain(head, each);
        self.last_used = self.last_used.wrapping_add(1);
        if !self.interrupts && self.event_idx {
            // Keep `used_event` just behind what was popped, so the device never crosses it.
            self.write(self.used_event(), self.last_used.wrapping_sub(1));
        }
        Ok(Some(Used { head, len }))
    }

    /// Unshares the chain headed by `head` (in flight) and returns its descriptors to the free
    /// list.
    fn release_chain(&mut self, head: u16, mut each: impl FnMut(u16)) {
        let count = self.chain_len[usize::from(head)];
        self.chain_len[usize::from(head)] = 0;
        let mut index = head;
        for i in 0..count {
            each(index);
            let d = self.shadow[usize::from(index)];
            if let Some(buffer) =
                NonNull::new(core::ptr::slice_from_raw_parts_mut(d.vaddr, d.len as usize))
            {
                // SAFETY: `buffer`, `paddr` and the direction are what `add` shared for this
                // descriptor, and the device is done with the chain.
                unsafe { H::unshare(d.paddr, buffer, d.direction()) };
            }
            let s = &mut self.shadow[usize::from(index)];
            s.paddr = 0;
            s.vaddr = core::ptr::null_mut();
            s.len = 0;
            s.flags = 0;
            if i + 1 == count {
                s.next = self.free_head;
            } else {
                index = s.next;
            }
        }
        self.free_head = head;
        self.num_free += usize::from(count);
        self.in_flight -= 1;
    }

    /// Asks for a used-buffer notification once the device has used `after + 1` more chains
    /// than were popped (with event index; without it, for every chain). Returns whether a
    /// chain was already used meanwhile, which raised none: the caller must look again.
    pub(crate) fn enable_interrupts(&mut self, after: u16) -> bool {
        self.interrupts = true;
        if self.event_idx {
            self.write(self.used_event(), self.last_used.wrapping_add(after));
        } else {
            self.write(self.avail_flags(), 0);
        }
        // The request before the re-read of `used.idx`.
        fence(Ordering::SeqCst);
        self.has_used()
    }

    /// Asks the device not to notify used buffers (with event index: `used_event` is kept just
    /// behind the popped index, which the device cannot cross before the driver pops again).
    pub(crate) fn disable_interrupts(&mut self) {
        self.interrupts = false;
        if self.event_idx {
            self.write(self.used_event(), self.last_used.wrapping_sub(1));
        } else {
            self.write(self.avail_flags(), AVAIL_F_NO_INTERRUPT);
        }
    }

    /// Whether used-buffer notifications are asked for.
    pub(crate) fn interrupts_enabled(&self) -> bool {
        self.interrupts
    }

    /// The virtqueue's index on the device.
    pub(crate) fn queue(&self) -> u16 {
        self.queue
    }
}

#[cfg(test)]
#[path = "../tests/support/identity_hal.rs"]
mod identity_hal;

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec;
    use std::vec::Vec;

    use super::*;

    use super::identity_hal::IdentityHal as TestHal;
    use crate::inert_transport::Areas;

    const N: usize = 8;

    fn read16(addr: u64) -> u16 {
        // SAFETY: `addr` is a ring field in the test's live, leaked DMA pages; single-threaded.
        unsafe { (addr as *const u16).read_volatile() }
    }

    fn write16(addr: u64, value: u16) {
        // SAFETY: as in `read16`.
        unsafe { (addr as *mut u16).write_volatile(value) }
    }

    /// The device's view of descriptor `i`: address, length, flags, next.
    fn descriptor(areas: &Areas, i: u16) -> (u64, u32, u16, u16) {
        let d = areas.descriptors + 16 * u64::from(i);
        // SAFETY: descriptor `i < N` of the table the ring gave; single-threaded.
        unsafe {
            (
                (d as *const u64).read_volatile(),
                ((d + 8) as *const u32).read_volatile(),
                ((d + 12) as *const u16).read_volatile(),
                ((d + 14) as *const u16).read_volatile(),
            )
        }
    }

    /// The chain the device finds from head `i`: each buffer's address, length and whether the
    /// device writes it.
    fn walk(areas: &Areas, mut i: u16) -> Vec<(u64, u32, bool)> {
        let mut chain = Vec::new();
        loop {
            let (addr, len, flags, next) = descriptor(areas, i);
            chain.push((addr, len, flags & DESC_F_WRITE != 0));
            if flags & DESC_F_NEXT == 0 || chain.len() > N {
                return chain;
            }
            i = next;
        }
    }

    /// The device puts `(id, len)` on the used ring.
    fn push_used(areas: &Areas, id: u32, len: u32) {
        let idx = read16(areas.device + 2);
        let elem = areas.device + 4 + 8 * (u64::from(idx) % N as u64);
        // SAFETY: used element of the ring's used area; single-threaded.
        unsafe {
            (elem as *mut u32).write_volatile(id);
            ((elem + 4) as *mut u32).write_volatile(len);
        }
        write16(areas.device + 2, idx.wrapping_add(1));
    }

    fn ring(event_idx: bool) -> (Ring<TestHal, N>, Areas) {
        let mut areas = Areas::default();
        let ring = Ring::new(&mut areas, 0, event_idx).unwrap();
        (ring, areas)
    }

    fn out(b: &mut [u8]) -> (NonNull<[u8]>, BufferDirection) {
        (NonNull::from(b), BufferDirection::DriverToDevice)
    }

    fn inp(b: &mut [u8]) -> (NonNull<[u8]>, BufferDirection) {
        (NonNull::from(b), BufferDirection::DeviceToDriver)
    }

    #[test]
    fn need_event_is_the_specifications_window_modulo_2_16() {
        // `event` in [old, new): notify.
        assert!(need_event(0, 1, 0));
        assert!(need_event(6, 10, 6));
        assert!(need_event(9, 10, 6));
        assert!(!need_event(5, 10, 6));
        assert!(!need_event(10, 10, 6));
        // Across the wrap.
        assert!(need_event(65535, 2, 65534));
        assert!(need_event(1, 2, 65534));
        assert!(!need_event(2, 2, 65534));
        assert!(!need_event(65533, 2, 65534));
        // virtio-drivers' `avail_idx >= avail_event + 1` says no here (1 >= 65535 is false):
        // the device waits for a doorbell that would never come.
        assert!(need_event(65534, 1, 65533));
        // ... and yes here (a ring kept full: the device is far behind, it did not ask).
        assert!(!need_event(100, 300, 299));
    }

    #[test]
    fn the_layout_is_the_legacy_one_every_transport_accepts() {
        let (_ring, areas) = ring(true);
        assert_eq!(areas.descriptors % PAGE_SIZE as u64, 0);
        assert_eq!(areas.driver - areas.descriptors, 16 * N as u64);
        let avail_end = 16 * N as u64 + 2 * (N as u64 + 3);
        assert_eq!(
            areas.device - areas.descriptors,
            avail_end.next_multiple_of(PAGE_SIZE as u64)
        );
    }

    #[test]
    fn chains_of_several_buffers_come_back_whole_in_any_order() {
        let (mut ring, areas) = ring(true);
        let mut bufs: Vec<Vec<u8>> = (1..=8).map(|n| vec![n as u8; 10 * n]).collect();
        let [a0, a1, a2, b0, c0, c1, c2, c3] = bufs.as_mut_slice() else {
            unreachable!()
        };
        // SAFETY: the buffers outlive the ring's use of them (popped below, before `bufs`
        // is dropped) and are not touched meanwhile.
        let (a, b, c) = unsafe {
            (
                ring.add(&[out(a0), out(a1), inp(a2)]).unwrap(),
                ring.add(&[inp(b0)]).unwrap(),
                ring.add(&[out(c0), out(c1), inp(c2), inp(c3)]).unwrap(),
            )
        };
        assert_eq!((ring.free(), ring.in_flight()), (0, 3));
        let mut extra = [0u8; 4];
        // SAFETY: refused, so never shared.
        assert_eq!(unsafe { ring.add(&[out(&mut extra)]) }, None, "ring full");

        // The device sees three chains in order, each buffer where and as posted.
        assert_eq!(read16(areas.driver + 2), 3);
        let heads: Vec<u16> = (0..3).map(|s| read16(areas.driver + 4 + 2 * s)).collect();
        assert_eq!(heads, [a, b, c]);
        let lens = |chain: Vec<(u64, u32, bool)>| -> Vec<(u32, bool)> {
            chain.into_iter().map(|(_, l, w)| (l, w)).collect()
        };
        assert_eq!(
            lens(walk(&areas, a)),
            [(10, false), (20, false), (30, true)]
        );
        assert_eq!(lens(walk(&areas, b)), [(40, true)]);
        assert_eq!(
            lens(walk(&areas, c)),
            [(50, false), (60, false), (70, true), (80, true)]
        );
        assert_eq!(walk(&areas, a)[2].0, bufs[2].as_ptr() as u64);

        // Completed out of order: each pop frees exactly its chain.
        push_used(&areas, u32::from(c), 150);
        push_used(&areas, u32::from(a), 30);
        push_used(&areas, u32::from(b), 40);
        assert_eq!(ring.pop_used(), Ok(Some(Used { head: c, len: 150 })));
        assert_eq!((ring.free(), ring.in_flight()), (4, 2));
        assert_eq!(ring.pop_used(), Ok(Some(Used { head: a, len: 30 })));
        assert_eq!(ring.free(), 7);
        assert_eq!(ring.pop_used(), Ok(Some(Used { head: b, len: 40 })));
        assert_eq!((ring.free(), ring.in_flight()), (8, 0));
        assert_eq!(ring.pop_used(), Ok(None));

        // `chain` walks a chain's descriptors in order; `pop_used_each` hands each over.
        let mut d0 = [0u8; 4];
        let mut d1 = [0u8; 4];
        // SAFETY: popped below, before the buffers go.
        let head = unsafe { ring.add(&[out(&mut d0), out(&mut d1)]) }.unwrap();
        let listed: Vec<u16> = ring.chain(head).collect();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0], head);
        assert_eq!(ring.chain(listed[1]).count(), 0, "not a chain's head");
        push_used(&areas, u32::from(head), 0);
        let mut released = Vec::new();
        assert_eq!(
            ring.pop_used_each(|i| released.push(i)),
            Ok(Some(Used { head, len: 0 }))
        );
        assert_eq!(released, listed);

        // The free list is whole: one chain of all eight descriptors fits, each used once.
        let mut all: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; 8]).collect();
        let list: Vec<_> = all.iter_mut().map(|b| inp(b)).collect();
        // SAFETY: as above; popped before `all` is dropped.
        let head = unsafe { ring.add(&list) }.unwrap();
        let mut seen: Vec<u64> = walk(&areas, head).iter().map(|d| d.0).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), N);
        push_used(&areas, u32::from(head), 64);
        assert_eq!(ring.pop_used(), Ok(Some(Used { head, len: 64 })));
        assert_eq!(ring.free(), N);
    }

    #[test]
    fn used_elements_the_driver_did_not_post_are_errors() {
        let (mut ring, areas) = ring(true);
        let mut bufs = [[0u8; 16]; 2];
        let [x, y] = &mut bufs;
        // SAFETY: the buffers outlive the ring (never popped: the ring is dropped first, and
        // no device touches them).
        let head = unsafe { ring.add(&[out(x), inp(y)]) }.unwrap();
        let (_, _, _, second) = descriptor(&areas, head);
        // The second descriptor of a chain is not a chain's head.
        push_used(&areas, u32::from(second), 16);
        assert_eq!(ring.pop_used(), Err(RingError::UsedId));
        assert_eq!(ring.in_flight(), 1, "nothing changed");
        // Two used entries for one chain in flight.
        push_used(&areas, u32::from(head), 16);
        assert_eq!(ring.pop_used(), Err(RingError::UsedIndex));
    }

    #[test]
    fn interrupt_requests_move_used_event_and_flags() {
        let (mut ring, areas) = ring(true);
        let used_event = areas.driver + 4 + 2 * N as u64;
        assert_eq!(
            read16(used_event),
            65535,
            "off from the start: just behind 0"
        );
        assert!(!ring.enable_interrupts(3));
        assert_eq!(read16(used_event), 3, "after three more, at the fourth");
        assert_eq!(read16(areas.driver), 0, "flags stay 0 with event index");
        let mut buf = [0u8; 8];
        // SAFETY: popped below, before `buf` goes.
        let head = unsafe { ring.add(&[inp(&mut buf)]) }.unwrap();
        ring.disable_interrupts();
        push_used(&areas, u32::from(head), 8);
        assert!(ring.has_used());
        assert_eq!(ring.pop_used(), Ok(Some(Used { head, len: 8 })));
        assert_eq!(read16(used_event), 0, "kept just behind what was popped");

        let (mut ring, areas) = super::tests::ring(false);
        assert_eq!(read16(areas.driver), AVAIL_F_NO_INTERRUPT);
        assert!(!ring.enable_interrupts(0));
        assert_eq!(read16(areas.driver), 0);
    }
}
