//! `VirtioNet` against a fake virtio-net device that plays the device's side of the split
//! virtqueues in this process: it takes buffers from the avail rings, writes or reads them where
//! their descriptors point (pool memory, since the test `Hal` maps identity), fills the used
//! rings, and keeps the event-index fields as QEMU does (`avail_event` follows what it has
//! consumed; it interrupts only when `used_event` says so, and counts those interrupts). The
//! QEMU tests (`tests/tests/qemu_kernel.rs`) run the same driver against QEMU's real device;
//! these tests reach the corners QEMU never shows: runts, oversize completions, a full TX
//! queue, an exhausted pool, a copying `Hal`, a device that breaks the protocol, exact
//! doorbell and interrupt counts, checksum marks both ways, merged receive buffers and chained
//! transmits.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use virtio_drivers::transport::{DeviceStatus, DeviceType, InterruptStatus, Transport};
use virtio_drivers::{BufferDirection, Hal, PhysAddr};
use zcnet_buffer::{
    ChecksumOffloads, ChecksumPartial, Driver, FramePool, GsoInfo, GsoKind, GsoKinds, GsoRequest,
    HardwareAddress, LinkState, PoolConfig, RxPacket, SlotState, TxChain, TxError, TxFrame,
};
use zcnet_virtio::{SharedTransport, VirtioConfig, VirtioError, VirtioIrq, VirtioNet, MTU};
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// Virtqueue size of the fake device.
const Q: usize = 16;
const RX: usize = 0;
const TX: usize = 1;
/// virtio-net header with VERSION_1.
const HDR: usize = 12;
const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
const F_CSUM: u64 = 1 << 0;
const F_GUEST_CSUM: u64 = 1 << 1;
const F_GUEST_TSO4: u64 = 1 << 7;
const F_GUEST_TSO6: u64 = 1 << 8;
const F_HOST_TSO4: u64 = 1 << 11;
const F_HOST_TSO6: u64 = 1 << 12;
const F_MTU: u64 = 1 << 3;
const F_MAC: u64 = 1 << 5;
const F_MRG_RXBUF: u64 = 1 << 15;
/// `VIRTIO_NET_F_STATUS`: the configuration's `status` field is valid.
const F_STATUS: u64 = 1 << 16;
const F_INDIRECT: u64 = 1 << 28;
const F_EVENT_IDX: u64 = 1 << 29;
const F_VERSION_1: u64 = 1 << 32;
/// What the fake device offers by default: MAC, event index, VERSION_1.
const FEATURES: u64 = F_MAC | F_EVENT_IDX | F_VERSION_1;

#[path = "support/identity_hal.rs"]
mod identity_hal;
use identity_hal::IdentityHal;

/// A `Hal` whose `share` hands the device a bounce buffer instead of the caller's memory, as a
/// copying `Hal` does.
struct BounceHal;

// SAFETY: as `IdentityHal`; `share` returns a leaked heap buffer of the requested length.
unsafe impl Hal for BounceHal {
    fn dma_alloc(pages: usize, direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        IdentityHal::dma_alloc(pages, direction)
    }

    unsafe fn dma_dealloc(_paddr: PhysAddr, _vaddr: NonNull<u8>, _pages: usize) -> i32 {
        0
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, _size: usize) -> NonNull<u8> {
        NonNull::new(paddr as *mut u8).unwrap()
    }

    unsafe fn share(buffer: NonNull<[u8]>, _direction: BufferDirection) -> PhysAddr {
        let bounce = vec![0u8; buffer.len()].leak();
        bounce.as_ptr() as PhysAddr
    }

    unsafe fn unshare(_paddr: PhysAddr, _buffer: NonNull<[u8]>, _direction: BufferDirection) {}
}

#[derive(Default)]
struct FakeQueue {
    size: u32,
    descriptors: u64,
    driver_area: u64,
    device_area: u64,
    /// The device's position in the avail ring.
    next_avail: u16,
    /// The device's next used-ring index.
    next_used: u16,
}

struct DeviceState {
    /// What the device offers.
    offered: u64,
    /// What the driver accepted (`write_driver_features`).
    accepted: u64,
    /// The device clears `FEATURES_OK` (it dislikes the driver's features).
    reject_features: bool,
    /// Status reads after a reset that still show the old status (a reset in progress).
    reset_reads: usize,
    /// Status reads the driver made.
    status_reads: usize,
    status: u32,
    /// `mac`, `status`, `max_virtqueue_pairs`, `mtu`.
    config: [u8; 12],
    queues: [FakeQueue; 2],
    /// Doorbells per queue.
    notified: [usize; 2],
    /// Used-buffer notifications (interrupts) the device sent per queue.
    interrupts: [usize; 2],
    /// RX used elements [`FakeDevice::receive_merged`] has not published yet.
    held_used: Vec<(u32, u32)>,
}

/// The device side, shared between the transport (owned by the driver) and the test.
#[derive(Clone)]
struct FakeDevice(Arc<Mutex<DeviceState>>);

/// Byte offsets inside the split-virtqueue structures (virtio 1.x, 2.7).
const AVAIL_FLAGS: u64 = 0;
const AVAIL_IDX: u64 = 2;
const AVAIL_RING: u64 = 4;
const USED_FLAGS: u64 = 0;
const USED_IDX: u64 = 2;
const USED_RING: u64 = 4;

/// The specification's `vring_need_event`, as a device evaluates it.
fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// One descriptor as the device reads it: address, length, flags.
type Desc = (u64, u32, u16);

impl FakeQueue {
    fn event_fields(&self) -> (u64, u64) {
        let n = u64::from(self.size);
        // (used_event in the avail ring, avail_event in the used ring)
        (
            self.driver_area + AVAIL_RING + 2 * n,
            self.device_area + USED_RING + 8 * n,
        )
    }

    /// Reads the `u16` at `addr` (a ring field).
    fn read16(addr: u64) -> u16 {
        // SAFETY: the driver set the ring areas up through `queue_set` with identity-mapped
        // addresses of live DMA pages (IdentityHal never frees them), `addr` is a field inside
        // them, and the test is single-threaded, so no access races with the driver's.
        unsafe { (addr as *const u16).read_volatile() }
    }

    fn write16(addr: u64, value: u16) {
        // SAFETY: as in `read16`.
        unsafe { (addr as *mut u16).write_volatile(value) }
    }

    /// Takes the next buffer chain the driver made available: its head index and each
    /// descriptor's address, length and flags. `None` when the driver posted nothing new. Like
    /// QEMU with event index, the device then sets `avail_event` to what it has consumed.
    fn take_avail(&mut self, event_idx: bool) -> Option<(u16, Vec<Desc>)> {
        let avail_idx = Self::read16(self.driver_area + AVAIL_IDX);
        if avail_idx == self.next_avail {
            return None;
        }
        let slot = u64::from(self.next_avail) % u64::from(self.size);
        let head = Self::read16(self.driver_area + AVAIL_RING + 2 * slot);
        let mut chain = Vec::new();
        let mut index = head;
        loop {
            assert!(u32::from(index) < self.size, "descriptor index in range");
            let desc = self.descriptors + 16 * u64::from(index);
            // SAFETY: descriptor `index` of the table the driver gave, as in `read16`.
            let (addr, len, flags, next) = unsafe {
                (
                    (desc as *const u64).read_volatile(),
                    ((desc + 8) as *const u32).read_volatile(),
                    ((desc + 12) as *const u16).read_volatile(),
                    ((desc + 14) as *const u16).read_volatile(),
                )
            };
            chain.push((addr, len, flags));
            if flags & 1 == 0 {
                break;
            }
            assert!(chain.len() <= self.size as usize, "descriptor loop");
            index = next;
        }
        self.next_avail = self.next_avail.wrapping_add(1);
        if event_idx {
            let (_, avail_event) = self.event_fields();
            Self::write16(avail_event, self.next_avail);
        }
        Some((head, chain))
    }

    /// Puts used element `(id, len)` on the used ring and publishes it.
    fn push_used(&mut self, id: u32, len: u32) {
        let slot = u64::from(self.next_used) % u64::from(self.size);
        let elem = self.device_area + USED_RING + 8 * slot;
        // SAFETY: used element `slot` of the used ring the driver gave, as in `read16`.
        unsafe {
            (elem as *mut u32).write_volatile(id);
            ((elem + 4) as *mut u32).write_volatile(len);
        }
        self.next_used = self.next_used.wrapping_add(1);
        Self::write16(self.device_area + USED_IDX, self.next_used);
    }

    /// Whether the driver wants an interrupt for used entries `old..next_used`.
    fn wants_interrupt(&self, old: u16, event_idx: bool) -> bool {
        if event_idx {
            let (used_event, _) = self.event_fields();
            need_event(Self::read16(used_event), self.next_used, old)
        } else {
            Self::read16(self.driver_area + AVAIL_FLAGS) & 1 == 0
        }
    }
}

impl FakeDevice {
    fn new(offered: u64) -> Self {
        let mut config = [0u8; 12];
        config[..6].copy_from_slice(&MAC);
        config[6] = 1; // status: link up
        FakeDevice(Arc::new(Mutex::new(DeviceState {
            offered,
            accepted: 0,
            reject_features: false,
            reset_reads: 0,
            status_reads: 0,
            status: 0,
            config,
            queues: Default::default(),
            notified: [0; 2],
            interrupts: [0; 2],
            held_used: Vec::new(),
        })))
    }

    fn event_idx(state: &DeviceState) -> bool {
        state.accepted & F_EVENT_IDX != 0
    }

    fn header_len(state: &DeviceState) -> usize {
        if state.accepted & F_VERSION_1 != 0 {
            HDR
        } else {
            10
        }
    }

    /// The device receives `frame` from the wire: writes a zero virtio-net header and the frame
    /// into the next posted buffer, and interrupts if the driver asked. `claimed_len` overrides
    /// the length reported (runts and oversize completions). False when no buffer was posted.
    fn receive(&self, frame: &[u8], claimed_len: Option<u32>) -> bool {
        self.receive_with_header(frame, &[], claimed_len)
    }

    /// As [`receive`](Self::receive), with the virtio-net header's first bytes set to `header`
    /// (flags, GSO type, ...) and the rest zero.
    fn receive_with_header(&self, frame: &[u8], header: &[u8], claimed_len: Option<u32>) -> bool {
        let mut state = self.0.lock().unwrap();
        let event_idx = Self::event_idx(&state);
        let hdr = Self::header_len(&state);
        let q = &mut state.queues[RX];
        let Some((head, chain)) = q.take_avail(event_idx) else {
            return false;
        };
        assert_eq!(chain.len(), 1, "one buffer per RX descriptor chain");
        let (addr, len, flags) = chain[0];
        assert_eq!(flags & 2, 2, "RX buffers are device-writable");
        let total = hdr + frame.len();
        assert!(total <= len as usize, "frame larger than the posted buffer");
        // SAFETY: `addr..addr + len` is the buffer the driver posted (a pool slot).
        unsafe {
            std::ptr::write_bytes(addr as *mut u8, 0, hdr);
            std::ptr::copy_nonoverlapping(header.as_ptr(), addr as *mut u8, header.len().min(hdr));
            std::ptr::copy_nonoverlapping(frame.as_ptr(), (addr as *mut u8).add(hdr), frame.len());
        }
        let old = q.next_used;
        q.push_used(u32::from(head), claimed_len.unwrap_or(total as u32));
        if q.wants_interrupt(old, event_idx) {
            state.interrupts[RX] += 1;
        }
        true
    }

    /// With merged receive buffers: the device receives `packet` behind a virtio-net header
    /// whose first bytes are `header` (the rest zero but `num_buffers`), spread over as many
    /// posted buffers as it takes, each filled to its length. The used elements of the first
    /// `publish` buffers are published; the rest wait for [`publish_held`](Self::publish_held).
    /// Returns the number of buffers taken.
    fn receive_merged(&self, packet: &[u8], header: &[u8], publish: usize) -> usize {
        let mut state = self.0.lock().unwrap();
        let event_idx = Self::event_idx(&state);
        let hdr = Self::header_len(&state);
        let mut bytes = vec![0u8; hdr];
        bytes[..header.len()].copy_from_slice(header);
        bytes.extend_from_slice(packet);
        let q = &mut state.queues[RX];
        let mut used = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let (head, chain) = q.take_avail(event_idx).expect("a posted buffer");
            let (addr, len, _) = chain[0];
            let n = (len as usize).min(bytes.len() - at);
            // SAFETY: `addr..addr + len` is the buffer the driver posted (a pool slot).
            unsafe {
                std::ptr::copy_nonoverlapping(bytes[at..].as_ptr(), addr as *mut u8, n);
            }
            used.push((u32::from(head), n as u32, addr));
            at += n;
        }
        let count = used.len();
        // num_buffers, in the first buffer's header.
        // SAFETY: as above; the first buffer holds the header.
        unsafe {
            let p = (used[0].2 as *mut u8).add(10);
            std::ptr::copy_nonoverlapping((count as u16).to_le_bytes().as_ptr(), p, 2);
        }
        let held: Vec<(u32, u32)> = used[publish.min(count)..]
            .iter()
            .map(|&(id, len, _)| (id, len))
            .collect();
        let old = q.next_used;
        for &(id, len, _) in &used[..publish.min(count)] {
            q.push_used(id, len);
        }
        if q.next_used != old && q.wants_interrupt(old, event_idx) {
            state.interrupts[RX] += 1;
        }
        state.held_used = held;
        count
    }

    /// Publishes the used elements [`receive_merged`](Self::receive_merged) held back.
    fn publish_held(&self) {
        let mut state = self.0.lock().unwrap();
        let held = std::mem::take(&mut state.held_used);
        let q = &mut state.queues[RX];
        for (id, len) in held {
            q.push_used(id, len);
        }
    }

    /// The device sends what the driver queued, as one batch: returns each packet as the bytes
    /// of each of its descriptors (virtio-net header included), completes them, then
    /// interrupts once if the driver asked for any of them.
    fn transmit_chains(&self) -> Vec<Vec<Vec<u8>>> {
        let mut state = self.0.lock().unwrap();
        let event_idx = Self::event_idx(&state);
        let q = &mut state.queues[TX];
        let old = q.next_used;
        let mut sent = Vec::new();
        while let Some((head, chain)) = q.take_avail(event_idx) {
            let mut parts = Vec::new();
            for &(addr, len, flags) in &chain {
                assert_eq!(flags & 2, 0, "TX buffers are device-readable");
                // SAFETY: the buffer the driver queued (a pool slot), `len` bytes long.
                parts.push(
                    unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) }.to_vec(),
                );
            }
            sent.push(parts);
            q.push_used(u32::from(head), 0);
        }
        if q.next_used != old && q.wants_interrupt(old, event_idx) {
            state.interrupts[TX] += 1;
        }
        sent
    }

    /// The device sends what the driver queued, as one batch: returns each buffer's address and
    /// bytes (virtio-net header included), completes them, then interrupts once if the driver
    /// asked for any of them.
    fn transmit_all(&self) -> Vec<(u64, Vec<u8>)> {
        let mut state = self.0.lock().unwrap();
        let event_idx = Self::event_idx(&state);
        let q = &mut state.queues[TX];
        let old = q.next_used;
        let mut sent = Vec::new();
        while let Some((head, chain)) = q.take_avail(event_idx) {
            let mut bytes = Vec::new();
            for &(addr, len, flags) in &chain {
                assert_eq!(flags & 2, 0, "TX buffers are device-readable");
                // SAFETY: the buffer the driver queued (a pool slot), `len` bytes long.
                bytes.extend_from_slice(unsafe {
                    std::slice::from_raw_parts(addr as *const u8, len as usize)
                });
            }
            sent.push((chain[0].0, bytes));
            q.push_used(u32::from(head), 0);
        }
        if q.next_used != old && q.wants_interrupt(old, event_idx) {
            state.interrupts[TX] += 1;
        }
        sent
    }

    /// Puts a used element on `queue` that no posted buffer asked for.
    fn push_bogus_used(&self, queue: usize, id: u32) {
        self.0.lock().unwrap().queues[queue].push_used(id, 64);
    }

    /// Sets the device's `used.flags` (bit 0: no notifications wanted, without event index).
    fn set_used_flags(&self, queue: usize, flags: u16) {
        let state = self.0.lock().unwrap();
        FakeQueue::write16(state.queues[queue].device_area + USED_FLAGS, flags);
    }

    /// The driver's `avail.flags` (bit 0: no interrupts wanted, without event index).
    fn avail_flags(&self, queue: usize) -> u16 {
        let state = self.0.lock().unwrap();
        FakeQueue::read16(state.queues[queue].driver_area + AVAIL_FLAGS)
    }

    fn notified(&self, queue: usize) -> usize {
        self.0.lock().unwrap().notified[queue]
    }

    fn interrupts(&self, queue: usize) -> usize {
        self.0.lock().unwrap().interrupts[queue]
    }

    fn accepted(&self) -> u64 {
        self.0.lock().unwrap().accepted
    }

    fn status(&self) -> DeviceStatus {
        DeviceStatus::from_bits_retain(self.0.lock().unwrap().status)
    }

    fn set_config(&self, offset: usize, bytes: &[u8]) {
        self.0.lock().unwrap().config[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
}

/// The transport the driver owns; everything goes to the shared [`FakeDevice`].
struct FakeTransport {
    device: FakeDevice,
}

impl Transport for FakeTransport {
    fn device_type(&self) -> DeviceType {
        DeviceType::Network
    }
    fn read_device_features(&mut self) -> u64 {
        self.device.0.lock().unwrap().offered
    }
    fn write_driver_features(&mut self, driver_features: u64) {
        self.device.0.lock().unwrap().accepted = driver_features;
    }
    fn max_queue_size(&mut self, _queue: u16) -> u32 {
        Q as u32
    }
    fn notify(&mut self, queue: u16) {
        self.device.0.lock().unwrap().notified[usize::from(queue)] += 1;
    }
    fn get_status(&self) -> DeviceStatus {
        let mut state = self.device.0.lock().unwrap();
        state.status_reads += 1;
        if state.status == 0 && state.reset_reads > 0 {
            state.reset_reads -= 1;
            return DeviceStatus::ACKNOWLEDGE;
        }
        DeviceStatus::from_bits_retain(state.status)
    }
    fn set_status(&mut self, status: DeviceStatus) {
        let mut state = self.device.0.lock().unwrap();
        state.status = if state.reject_features {
            (status - DeviceStatus::FEATURES_OK).bits()
        } else {
            status.bits()
        };
    }
    fn set_guest_page_size(&mut self, _guest_page_size: u32) {}
    fn requires_legacy_layout(&self) -> bool {
        false
    }
    fn queue_set(
        &mut self,
        queue: u16,
        size: u32,
        descriptors: PhysAddr,
        driver_area: PhysAddr,
        device_area: PhysAddr,
    ) {
        let mut state = self.device.0.lock().unwrap();
        state.queues[usize::from(queue)] = FakeQueue {
            size,
            descriptors,
            driver_area,
            device_area,
            ..FakeQueue::default()
        };
    }
    fn queue_unset(&mut self, _queue: u16) {}
    fn queue_used(&mut self, queue: u16) -> bool {
        self.device.0.lock().unwrap().queues[usize::from(queue)].descriptors != 0
    }
    fn ack_interrupt(&mut self) -> InterruptStatus {
        InterruptStatus::empty()
    }
    fn read_config_generation(&self) -> u32 {
        0
    }
    fn read_config_space<T: FromBytes + IntoBytes>(
        &self,
        offset: usize,
    ) -> virtio_drivers::Result<T> {
        let state = self.device.0.lock().unwrap();
        let bytes = state
            .config
            .get(offset..offset + size_of::<T>())
            .ok_or(virtio_drivers::Error::ConfigSpaceTooSmall)?;
        Ok(T::read_from_bytes(bytes).unwrap())
    }
    fn write_config_space<T: IntoBytes + Immutable>(
        &mut self,
        _offset: usize,
        _value: T,
    ) -> virtio_drivers::Result<()> {
        Err(virtio_drivers::Error::Unsupported)
    }
}

type Net = VirtioNet<IdentityHal, FakeTransport, Q>;

fn transport(device: &FakeDevice) -> FakeTransport {
    FakeTransport {
        device: device.clone(),
    }
}

fn leak_irq() -> &'static VirtioIrq {
    Box::leak(Box::new(VirtioIrq::new()))
}

/// A driver over a fake device offering `features`, with a pool of `slots`.
fn setup_with(
    features: u64,
    slots: usize,
) -> (Net, FakeDevice, &'static FramePool, &'static VirtioIrq) {
    setup_config(features, slots, VirtioConfig::new())
}

/// As [`setup_with`], with the driver configured by `config`.
fn setup_config(
    features: u64,
    slots: usize,
    config: VirtioConfig,
) -> (Net, FakeDevice, &'static FramePool, &'static VirtioIrq) {
    let device = FakeDevice::new(features);
    let pool = FramePool::leak(PoolConfig::new(slots)).unwrap();
    let irq = leak_irq();
    let net = VirtioNet::with_config(transport(&device), pool, irq, config)
        .expect("driver over the pool");
    (net, device, pool, irq)
}

fn setup(slots: usize) -> (Net, FakeDevice, &'static FramePool, &'static VirtioIrq) {
    setup_with(FEATURES, slots)
}

/// Counts its wakes.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn waker() -> (Arc<CountingWaker>, Waker) {
    let count = Arc::new(CountingWaker::default());
    (count.clone(), Waker::from(count))
}

fn wakes(count: &CountingWaker) -> usize {
    count.0.load(Ordering::SeqCst)
}

fn frame(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Whether `addr` lies inside one of `pool`'s slots.
fn in_pool(pool: &FramePool, addr: u64) -> bool {
    pool.slot_of(addr as *const u8).is_some()
}

/// Takes a TX frame (the queue must have room) holding `len` bytes of `fill`.
fn tx_frame(net: &mut Net, cx: &mut Context<'_>, len: usize, fill: u8) -> TxFrame {
    let Poll::Ready(mut tx) = net.poll_transmit_frame(cx) else {
        panic!("a TX frame while the queue has room");
    };
    tx.append(len).unwrap().fill(fill);
    tx
}

/// Transmits a 60-byte frame of `fill` (the queue must have room).
fn send(net: &mut Net, cx: &mut Context<'_>, fill: u8) {
    let tx = tx_frame(net, cx, 60, fill);
    net.transmit(tx).unwrap();
}

#[test]
fn received_frames_are_pool_slots_at_the_headroom() {
    let (mut net, device, pool, irq) = setup(64);
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);

    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(irq.stats().rx_posted, Q as u64, "the RX queue is filled");
    assert_eq!(pool.occupancy().get(SlotState::Posted), Q);

    let sent = frame(1514, 7);
    assert!(device.receive(&sent, None));
    irq.handle_rx_interrupt();
    assert_eq!(
        wakes(&count),
        1,
        "the RX interrupt wakes the registered waker"
    );

    let Poll::Ready(rx) = net.poll_receive(&mut cx) else {
        panic!("a completed frame is returned");
    };
    assert_eq!(&rx[..], &sent[..]);
    assert_eq!(
        rx.offset_in_slot(),
        pool.headroom(),
        "the frame starts at the headroom"
    );
    assert!(
        in_pool(pool, rx.as_ptr() as u64),
        "no copy: the frame is in a pool slot"
    );
    assert_eq!(
        irq.stats().rx_posted,
        Q as u64,
        "a fresh slot replaced the completed one"
    );
    assert_eq!(irq.stats().rx_frames, 1);
    assert_eq!(irq.stats().rx_bytes, 1514);
    drop(rx);
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(pool.audit().unwrap().get(SlotState::Posted), Q);
}

#[test]
fn frames_the_app_holds_drain_spare_slots_then_starve_and_recover() {
    // Q ring slots + 4 spare + 1 the start-up check returns.
    let (mut net, device, pool, irq) = setup(Q + 4);
    let (_count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert!(net.poll_receive(&mut cx).is_pending());

    let mut held = Vec::new();
    for i in 0..4u8 {
        assert!(device.receive(&frame(100, i), None));
        let Poll::Ready(rx) = net.poll_receive(&mut cx) else {
            panic!("frame {i}");
        };
        held.push(rx);
        assert_eq!(irq.stats().rx_posted, Q as u64, "spares refill the ring");
    }
    // No spare left: every further completion shrinks the ring.
    for i in 0..Q as u8 {
        assert!(device.receive(&frame(60, i), None));
        let Poll::Ready(rx) = net.poll_receive(&mut cx) else {
            panic!("frame {i}");
        };
        held.push(rx);
    }
    assert_eq!(irq.stats().rx_posted, 0);
    assert_eq!(irq.stats().rx_starved, 1, "one dry spell, counted once");
    assert!(
        !device.receive(&frame(60, 0), None),
        "the device has no buffer"
    );
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(irq.stats().rx_starved, 1);

    // Frames returned by the app (on any thread) refill the ring on the next poll, and the
    // device, which had run dry, is told.
    let kicks = device.notified(RX);
    held.truncate(10);
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(irq.stats().rx_posted, 10, "every returned slot is posted");
    assert_eq!(device.notified(RX), kicks + 1, "the dry device is notified");
    drop(held);
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(irq.stats().rx_posted, Q as u64);
    assert!(device.receive(&frame(60, 9), None));
    assert!(net.poll_receive(&mut cx).is_ready());
    pool.audit().unwrap();
}

#[test]
fn rx_refill_takes_back_the_slots_of_frames_the_device_has_sent() {
    // Q ring slots + 2 spare + 1 the start-up check returns.
    let (mut net, device, pool, irq) = setup(Q + 2);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(net.poll_receive(&mut cx).is_pending());
    send(&mut net, &mut cx, 1);
    send(&mut net, &mut cx, 2);
    assert!(
        pool.try_alloc_rx().is_none(),
        "the spares are TX frames now"
    );
    // The device sends both (no TX interrupt: nobody waits), then receives two frames.
    assert_eq!(device.transmit_all().len(), 2);
    assert!(device.receive(&frame(60, 3), None));
    assert!(device.receive(&frame(60, 4), None));
    let held: Vec<_> = (0..2)
        .map(|_| match net.poll_receive(&mut cx) {
            Poll::Ready(rx) => rx,
            Poll::Pending => panic!("two frames were received"),
        })
        .collect();
    assert_eq!(
        irq.stats().rx_posted,
        Q as u64,
        "the sent frames' slots refilled the ring"
    );
    assert_eq!(irq.stats().tx_in_flight, 0);
    drop(held);
    pool.audit().unwrap();
}

#[test]
fn a_retained_frame_the_device_has_sent_is_returned_at_the_next_flush() {
    let (mut net, device, pool, _irq) = setup(64);
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    net.flush();
    // A socket's frame: sent, then waited for (to send it again) while the device has it.
    let mut tx = pool.try_alloc_tx().unwrap();
    tx.append(60).unwrap().fill(7);
    let mut kept = tx.retain().unwrap();
    let Poll::Ready(lent) = kept.poll_send(&mut cx) else {
        panic!("a fresh retained frame goes out");
    };
    net.transmit(lent).unwrap();
    net.flush();
    assert!(kept.poll_idle(&mut cx).is_pending());
    assert_eq!(device.transmit_all().len(), 1);
    assert_eq!(
        wakes(&count),
        0,
        "the device is done, the driver has not looked"
    );
    // The end of the socket's next run (a retransmission timeout, say): the flush takes the
    // frame back and the socket is woken.
    net.flush();
    assert_eq!(wakes(&count), 1);
    assert!(kept.poll_idle(&mut cx).is_ready());
    assert!(kept.poll_send(&mut cx).is_ready(), "it can be sent again");

    // The same at the end of an ingress run (a receive that finds nothing).
    let mut kept = {
        let mut tx = pool.try_alloc_tx().unwrap();
        tx.append(60).unwrap();
        tx.retain().unwrap()
    };
    let Poll::Ready(lent) = kept.poll_send(&mut cx) else {
        panic!("sent");
    };
    net.transmit(lent).unwrap();
    net.flush();
    assert_eq!(device.transmit_all().len(), 1);
    assert!(!kept.is_idle());
    assert!(net.poll_receive(&mut cx).is_pending());
    assert!(kept.is_idle());
}

#[test]
fn a_retransmission_waiting_for_the_device_is_woken_by_the_tx_completion() {
    let (mut net, device, pool, irq) = setup(64);
    // The sender (the stack's egress) and, apart so that the test tells them apart, the
    // waker the pool's retained waiter holds (in the stack: the egress's too).
    let (sender_wakes, sender) = waker();
    let (watcher_wakes, watcher) = waker();
    let mut cx = Context::from_waker(&sender);
    net.flush();
    // A TCP segment goes out in a frame its socket keeps.
    assert!(net.poll_transmit_ready(&mut cx).is_ready());
    let mut tx = pool.try_alloc_tx().unwrap();
    tx.append(60).unwrap().fill(9);
    let mut kept = tx.retain().unwrap();
    let Poll::Ready(lent) = kept.poll_send(&mut cx) else {
        panic!("a fresh retained frame goes out");
    };
    net.transmit(lent).unwrap();
    net.flush();
    assert_eq!(
        irq.stats().tx_interrupt_requests,
        0,
        "nobody waits for the frame: no TX interrupt"
    );

    // A retransmission timeout: the segment must go again, its frame is still with the device,
    // so the sender watches it and ends its run.
    assert!(kept
        .poll_idle(&mut Context::from_waker(&watcher))
        .is_pending());
    net.flush();
    assert_eq!(
        irq.stats().tx_interrupt_requests,
        1,
        "a TX interrupt is asked for the watched frame"
    );
    // The device sends it and, asked to, interrupts.
    assert_eq!(device.transmit_all().len(), 1);
    assert_eq!(device.interrupts(TX), 1);
    assert_eq!(
        wakes(&watcher_wakes),
        0,
        "nothing has called the driver yet"
    );
    irq.handle_tx_interrupt();
    assert_eq!(wakes(&sender_wakes), 1, "the TX interrupt wakes the sender");
    // The sender's run ends with a flush, which takes the frame back: the watcher wakes.
    net.flush();
    assert_eq!(
        wakes(&watcher_wakes),
        1,
        "the frame's return wakes the watcher"
    );
    let Poll::Ready(again) = kept.poll_send(&mut cx) else {
        panic!("the returned frame can be sent again");
    };
    net.transmit(again).unwrap();
    net.flush();

    // Nobody watches the resent frame: its completion raises no interrupt.
    assert_eq!(device.transmit_all().len(), 1);
    assert_eq!(
        device.interrupts(TX),
        1,
        "no TX interrupt for an unwatched frame"
    );
    assert_eq!(irq.stats().tx_interrupt_requests, 1);
    net.flush();
    assert!(kept.is_idle());
    drop(kept);
    pool.audit().unwrap();
}

#[test]
fn runt_and_oversize_completions_are_dropped_and_counted() {
    let (mut net, device, pool, irq) = setup(64);
    let (_count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert!(net.poll_receive(&mut cx).is_pending());

    assert!(device.receive(&[], Some(4)), "shorter than the header");
    assert!(
        device.receive(&frame(1600, 1), None),
        "longer than mtu + 14"
    );
    assert!(device.receive(&frame(64, 2), None));
    let Poll::Ready(rx) = net.poll_receive(&mut cx) else {
        panic!("the good frame after the bad ones");
    };
    assert_eq!(&rx[..], &frame(64, 2)[..]);
    let stats = irq.stats();
    assert_eq!(
        (stats.rx_runt, stats.rx_oversize, stats.rx_frames),
        (1, 1, 1)
    );
    assert_eq!(
        stats.rx_posted, Q as u64,
        "dropped completions were replaced too"
    );
    drop(rx);
    assert_eq!(pool.audit().unwrap().get(SlotState::Posted), Q);
}

#[test]
fn transmit_writes_the_header_into_the_headroom_and_sends_the_slot() {
    let (mut net, device, pool, irq) = setup(64);
    let (_count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert_eq!(net.capabilities().tx_headroom, HDR);
    assert_eq!(net.capabilities().mtu, MTU);
    assert_eq!(net.hardware_address(), HardwareAddress::Ethernet(MAC));

    let Poll::Ready(mut tx) = net.poll_transmit_frame(&mut cx) else {
        panic!("a frame while the queue is empty");
    };
    // Stale bytes in the headroom, where the header goes, must not reach the device.
    let headroom = tx.headroom();
    tx.set_headroom(0).unwrap();
    tx.buffer_mut().fill(0xee);
    tx.set_headroom(headroom).unwrap();
    let payload = frame(1514, 3);
    tx.append(payload.len()).unwrap().copy_from_slice(&payload);
    net.transmit(tx).unwrap();
    net.flush();

    let sent = device.transmit_all();
    assert_eq!(sent.len(), 1);
    let (addr, bytes) = &sent[0];
    assert!(
        in_pool(pool, *addr),
        "the device reads the pool slot itself"
    );
    assert_eq!(&bytes[..HDR], &[0u8; HDR][..], "a zero virtio-net header");
    assert_eq!(&bytes[HDR..], &payload[..]);
    assert_eq!(irq.stats().tx_frames, 1);
    assert_eq!(irq.stats().tx_bytes, 1514);
    assert_eq!(pool.occupancy().get(SlotState::Device), 1);

    // The next poll reclaims the completed frame.
    let Poll::Ready(next) = net.poll_transmit_frame(&mut cx) else {
        panic!("room again");
    };
    drop(next);
    assert_eq!(pool.occupancy().get(SlotState::Device), 0);
    pool.audit().unwrap();
}

#[test]
fn a_full_tx_queue_is_back_pressure_with_one_tx_interrupt_asked_for() {
    let (mut net, device, pool, irq) = setup(64);
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    net.flush();
    for i in 0..Q {
        send(&mut net, &mut cx, i as u8);
    }
    assert_eq!(irq.stats().tx_in_flight, Q as u64);
    assert_eq!(
        irq.stats().tx_interrupt_requests,
        0,
        "no TX interrupt asked for while there was room"
    );
    assert_eq!(
        device.notified(TX),
        0,
        "batched: nothing notified before a flush"
    );
    assert!(net.poll_transmit_frame(&mut cx).is_pending(), "queue full");
    assert!(net.poll_transmit_ready(&mut cx).is_pending(), "queue full");
    assert_eq!(wakes(&count), 0);
    assert_eq!(
        device.notified(TX),
        1,
        "waiting on the device first tells it what is queued"
    );
    assert_eq!(irq.stats().tx_interrupt_requests, 2);

    // Pushing a frame anyway is refused with an error and counted, never dropped silently.
    let mut extra = pool.try_alloc_tx().unwrap();
    extra.append(60).unwrap();
    assert_eq!(net.transmit(extra), Err(TxError::Device));
    assert_eq!(irq.stats().tx_queue_full, 1);

    let sent = device.transmit_all();
    assert_eq!(sent.len(), Q);
    for (i, (_, bytes)) in sent.iter().enumerate() {
        assert!(
            bytes[HDR..].iter().all(|&b| b == i as u8),
            "frames in order"
        );
    }
    assert_eq!(device.interrupts(TX), 1, "the device interrupts once");
    irq.handle_tx_interrupt();
    assert_eq!(
        wakes(&count),
        1,
        "the TX interrupt wakes the waiting sender"
    );
    assert!(net.poll_transmit_frame(&mut cx).is_ready());
    assert_eq!(irq.stats().tx_in_flight, 0);

    // Room again: TX interrupts are off, a full round of frames completes without one.
    for i in 0..4 {
        send(&mut net, &mut cx, i);
    }
    net.flush();
    assert_eq!(device.transmit_all().len(), 4);
    assert_eq!(
        device.interrupts(TX),
        1,
        "no TX interrupt while not waiting"
    );
    pool.audit().unwrap();
}

#[test]
fn frames_held_by_the_device_are_waited_for_when_the_pool_runs_dry() {
    // Few slots: the RX ring takes Q of them, TX frames in flight the rest.
    let (mut net, device, pool, irq) = setup(Q + 2);
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert!(net.poll_receive(&mut cx).is_pending());
    let mut sent = 0;
    while let Poll::Ready(mut tx) = net.poll_transmit_frame(&mut cx) {
        tx.append(60).unwrap();
        net.transmit(tx).unwrap();
        sent += 1;
    }
    assert_eq!(sent, 2);
    // The device finishes: its TX interrupt (asked for at the next completion) must wake the
    // sender, which waits for slots the device held (not for queue room).
    assert_eq!(device.transmit_all().len(), 2);
    assert_eq!(device.interrupts(TX), 1);
    irq.handle_tx_interrupt();
    assert!(wakes(&count) >= 1);
    assert!(net.poll_transmit_frame(&mut cx).is_ready());
    pool.audit().unwrap();
}

#[test]
fn oversize_and_headroomless_frames_are_refused_with_their_reason() {
    let (mut net, _device, pool, irq) = setup(64);
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(mut tx) = net.poll_transmit_frame(&mut cx) else {
        panic!("frame");
    };
    tx.append(1515).unwrap();
    assert_eq!(
        net.transmit(tx),
        Err(TxError::TooLong {
            len: 1515,
            max: 1514
        })
    );
    let mut tx = pool.try_alloc_tx().unwrap();
    tx.set_headroom(4).unwrap();
    tx.append(60).unwrap();
    assert_eq!(net.transmit(tx), Err(TxError::NoHeadroom));
    let stats = irq.stats();
    assert_eq!((stats.tx_too_long, stats.tx_no_headroom), (1, 1));
    assert_eq!(
        pool.audit().unwrap().in_use(),
        0,
        "refused frames went back to the pool"
    );
}

#[test]
fn a_copying_hal_and_unfit_pools_are_refused_and_the_device_marked_failed() {
    let irq = leak_irq();
    let pool = FramePool::leak(PoolConfig::new(8)).unwrap();
    let device = FakeDevice::new(FEATURES);
    let err = VirtioNet::<BounceHal, _, Q>::new(transport(&device), pool, irq).unwrap_err();
    assert!(
        matches!(err, VirtioError::DmaAddressMismatch { .. }),
        "{err:?}"
    );
    assert!(device.status().contains(DeviceStatus::FAILED));
    assert_eq!(
        pool.audit().unwrap().in_use(),
        0,
        "the probe slot went back"
    );

    let small_headroom = FramePool::leak(PoolConfig::new(8).with_headroom(8)).unwrap();
    let device = FakeDevice::new(FEATURES);
    let err = Net::new(transport(&device), small_headroom, irq).unwrap_err();
    assert_eq!(
        err,
        VirtioError::HeadroomTooSmall {
            headroom: 8,
            needed: HDR
        }
    );

    let small_slots = FramePool::leak(PoolConfig::new(8).with_slot_size(1024)).unwrap();
    let err = Net::new(transport(&FakeDevice::new(FEATURES)), small_slots, irq).unwrap_err();
    assert!(matches!(err, VirtioError::SlotTooSmall { .. }), "{err:?}");
    assert!(err.to_string().contains("too small"), "{err}");
}

#[test]
fn only_the_features_the_driver_uses_are_accepted() {
    let offered = FEATURES | F_STATUS | F_CSUM | F_GUEST_CSUM | F_MRG_RXBUF | F_INDIRECT | F_MTU;
    let (net, device, _pool, _irq) = setup_with(offered, 64);
    assert_eq!(
        device.accepted(),
        F_MAC | F_EVENT_IDX | F_VERSION_1 | F_STATUS | F_CSUM | F_GUEST_CSUM,
        "checksum offload both ways, no merged buffers, no indirect descriptors; the MTU \
         field reads 0, below the minimum, so not that either"
    );
    assert_eq!(net.features(), device.accepted());
    assert!(device.status().contains(
        DeviceStatus::ACKNOWLEDGE
            | DeviceStatus::DRIVER
            | DeviceStatus::FEATURES_OK
            | DeviceStatus::DRIVER_OK
    ));
}

#[test]
fn an_advised_mtu_is_used_when_the_slots_hold_it() {
    let device = FakeDevice::new(FEATURES | F_MTU);
    device.set_config(10, &1400u16.to_le_bytes());
    let pool = FramePool::leak(PoolConfig::new(32)).unwrap();
    let mut net = Net::new(transport(&device), pool, leak_irq()).unwrap();
    assert_eq!(device.accepted() & F_MTU, F_MTU);
    assert_eq!(net.capabilities().mtu, 1400);
    let mut cx = Context::from_waker(Waker::noop());
    let tx = tx_frame(&mut net, &mut cx, 1415, 0);
    assert_eq!(
        net.transmit(tx),
        Err(TxError::TooLong {
            len: 1415,
            max: 1414
        })
    );

    // 9000 bytes do not fit 2048-byte slots: not accepted, standard Ethernet instead.
    let device = FakeDevice::new(FEATURES | F_MTU);
    device.set_config(10, &9000u16.to_le_bytes());
    let pool = FramePool::leak(PoolConfig::new(32)).unwrap();
    let net = Net::new(transport(&device), pool, leak_irq()).unwrap();
    assert_eq!(device.accepted() & F_MTU, 0);
    assert_eq!(net.capabilities().mtu, MTU);
}

#[test]
fn a_device_that_rejects_the_features_or_has_no_mac_is_refused() {
    let device = FakeDevice::new(FEATURES);
    device.0.lock().unwrap().reject_features = true;
    let pool = FramePool::leak(PoolConfig::new(8)).unwrap();
    let err = Net::new(transport(&device), pool, leak_irq()).unwrap_err();
    assert_eq!(err, VirtioError::FeaturesRejected);

    let device = FakeDevice::new(F_EVENT_IDX | F_VERSION_1);
    let err = Net::new(transport(&device), pool, leak_irq()).unwrap_err();
    assert_eq!(err, VirtioError::NoMacAddress);
    assert!(device.status().contains(DeviceStatus::FAILED));
}

#[test]
fn the_driver_waits_for_the_reset_to_finish_and_gives_up_on_a_device_that_never_does() {
    let device = FakeDevice::new(FEATURES);
    device.0.lock().unwrap().reset_reads = 5;
    let pool = FramePool::leak(PoolConfig::new(32)).unwrap();
    Net::new(transport(&device), pool, leak_irq()).expect("a slow reset is waited for");
    assert_eq!(
        device.0.lock().unwrap().reset_reads,
        0,
        "every pending read was made"
    );

    let device = FakeDevice::new(FEATURES);
    device.0.lock().unwrap().reset_reads = usize::MAX;
    let err = Net::new(transport(&device), pool, leak_irq()).unwrap_err();
    assert_eq!(err, VirtioError::ResetTimeout);
    assert_eq!(device.0.lock().unwrap().status_reads, 1_000_000);
    assert_eq!(device.accepted(), 0, "no feature was negotiated");
}

#[test]
fn a_legacy_device_gets_the_ten_byte_header() {
    let (mut net, device, pool, _irq) = setup_with(F_MAC | F_EVENT_IDX, 64);
    assert_eq!(net.header_len(), 10);
    assert_eq!(net.capabilities().tx_headroom, 10);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(net.poll_receive(&mut cx).is_pending());
    assert!(device.receive(&frame(200, 5), None));
    let Poll::Ready(rx) = net.poll_receive(&mut cx) else {
        panic!("frame");
    };
    assert_eq!(&rx[..], &frame(200, 5)[..]);
    assert_eq!(rx.offset_in_slot(), pool.headroom());
    let tx = tx_frame(&mut net, &mut cx, 100, 9);
    net.transmit(tx).unwrap();
    let sent = device.transmit_all();
    assert_eq!(sent[0].1.len(), 110);
    assert!(sent[0].1[..10].iter().all(|&b| b == 0));
}

#[test]
fn one_doorbell_per_burst_and_none_while_the_device_is_still_busy() {
    let (mut net, device, _pool, irq) = setup(64);
    let (_count, w) = waker();
    let mut cx = Context::from_waker(&w);

    // RX: filling the empty ring notifies once.
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(device.notified(RX), 1);
    // The device uses three buffers; the driver takes them and posts three more while the
    // device still holds thirteen: the device did not ask to hear of them.
    for i in 0..3 {
        assert!(device.receive(&frame(60, i), None));
    }
    for _ in 0..3 {
        assert!(net.poll_receive(&mut cx).is_ready());
    }
    assert!(net.poll_receive(&mut cx).is_pending());
    net.flush();
    assert_eq!(
        device.notified(RX),
        1,
        "refills of a busy ring ring no doorbell"
    );
    // The device uses every buffer it has: now it waits for a notification.
    for i in 0..Q as u8 {
        assert!(device.receive(&frame(60, i), None));
    }
    assert!(!device.receive(&frame(60, 0), None));
    for _ in 0..Q {
        assert!(net.poll_receive(&mut cx).is_ready());
    }
    net.flush();
    assert_eq!(device.notified(RX), 2, "a drained device is notified once");

    // TX: a burst of ten, one flush, one doorbell.
    for i in 0..10 {
        send(&mut net, &mut cx, i);
    }
    assert_eq!(device.notified(TX), 0, "transmit only publishes");
    net.flush();
    assert_eq!(device.notified(TX), 1);
    net.flush();
    assert_eq!(device.notified(TX), 1, "nothing new, no doorbell");
    // The device has not yet looked at the queue (its avail_event still says 0): a second
    // burst needs no doorbell.
    send(&mut net, &mut cx, 10);
    net.flush();
    assert_eq!(
        device.notified(TX),
        1,
        "the device is still to read the first burst"
    );
    assert_eq!(device.transmit_all().len(), 11);
    // The device caught up: the next burst is notified.
    send(&mut net, &mut cx, 11);
    net.flush();
    assert_eq!(device.notified(TX), 2);
    let stats = irq.stats();
    assert_eq!((stats.rx_kicks, stats.tx_kicks), (2, 2));
    assert!(stats.kicks_suppressed >= 2, "{stats:?}");
}

#[test]
fn without_flush_calls_every_transmit_is_notified_when_the_device_asks() {
    let (mut net, device, _pool, _irq) = setup(64);
    let mut cx = Context::from_waker(Waker::noop());
    send(&mut net, &mut cx, 1);
    assert_eq!(
        device.notified(TX),
        1,
        "a user that never flushes still gets frames out"
    );
    send(&mut net, &mut cx, 2);
    assert_eq!(
        device.notified(TX),
        1,
        "the device has not caught up: no doorbell"
    );
    assert_eq!(device.transmit_all().len(), 2);
    send(&mut net, &mut cx, 3);
    assert_eq!(device.notified(TX), 2);
}

#[test]
fn without_rechecks_the_rx_interrupt_is_asked_for_once_per_drained_batch() {
    let no_recheck = VirtioConfig::new().with_rx_recheck(0);
    let (mut net, device, _pool, irq) = setup_config(FEATURES, 64, no_recheck);
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(irq.stats().rx_interrupt_requests, 1);

    // Five frames arrive in a row: the device interrupts for the first only.
    for i in 0..5 {
        assert!(device.receive(&frame(60, i), None));
    }
    assert_eq!(device.interrupts(RX), 1);
    irq.handle_rx_interrupt();
    assert_eq!(wakes(&count), 1);
    for _ in 0..3 {
        assert!(net.poll_receive(&mut cx).is_ready());
    }
    // More arrive mid-batch: still no interrupt.
    assert!(device.receive(&frame(60, 9), None));
    assert_eq!(device.interrupts(RX), 1);
    for _ in 0..3 {
        assert!(net.poll_receive(&mut cx).is_ready());
    }
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(
        irq.stats().rx_interrupt_requests,
        2,
        "re-armed once, when drained"
    );
    assert!(device.receive(&frame(60, 10), None));
    assert_eq!(device.interrupts(RX), 2);
    assert_eq!(irq.stats().rx_rechecks, 0);
}

/// The device receives `burst` frames, then the driver's caller runs one pass (polls until
/// `Pending`); `rounds` times. Returns the frames the passes took and the device's RX interrupts.
fn stream(
    net: &mut Net,
    device: &FakeDevice,
    cx: &mut Context<'_>,
    rounds: usize,
    burst: u8,
) -> (usize, usize) {
    let mut taken = 0;
    for r in 0..rounds {
        for i in 0..burst {
            assert!(device.receive(&frame(60, r as u8 ^ i), None));
        }
        while net.poll_receive(cx).is_ready() {
            taken += 1;
        }
    }
    (taken, device.interrupts(RX))
}

#[test]
fn a_stream_of_frames_is_polled_and_interrupts_once() {
    let (mut net, device, _pool, irq) = setup(64);
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(
        wakes(&count),
        0,
        "nothing received: no recheck, the interrupt is armed"
    );
    assert_eq!(irq.stats().rx_interrupt_requests, 1);

    // Frames keep arriving between passes: each pass that took some wakes its caller to look
    // again, and the device never interrupts after the first frame.
    let (taken, interrupts) = stream(&mut net, &device, &mut cx, 50, 3);
    assert_eq!((taken, interrupts), (150, 1));
    assert_eq!(wakes(&count), 50, "every pass woke its caller for the next");
    assert_eq!(irq.stats().rx_rechecks, 50);
    assert_eq!(irq.stats().rx_interrupt_requests, 1, "never re-armed");

    // The stream stops: the recheck pass finds nothing and arms the interrupt, without a wake.
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(wakes(&count), 50);
    assert_eq!(irq.stats().rx_interrupt_requests, 2);
    assert!(device.receive(&frame(60, 1), None));
    assert_eq!(device.interrupts(RX), 2, "the next frame interrupts");

    // With one recheck a pause of one pass between bursts arms the interrupt; with two the
    // queue is still polled through it.
    for (looks, interrupts_expected, requests_expected) in [(1u8, 10, 11), (2, 1, 1)] {
        let config = VirtioConfig::new().with_rx_recheck(looks);
        let (mut net, device, _pool, irq) = setup_config(FEATURES, 64, config);
        let (count, w) = waker();
        let mut cx = Context::from_waker(&w);
        assert!(net.poll_receive(&mut cx).is_pending());
        for round in 0..10 {
            for i in 0..3 {
                assert!(device.receive(&frame(60, round ^ i), None));
            }
            // The pass that takes them, then one that finds nothing.
            while net.poll_receive(&mut cx).is_ready() {}
            assert!(net.poll_receive(&mut cx).is_pending());
        }
        assert_eq!(
            (device.interrupts(RX), irq.stats().rx_interrupt_requests),
            (interrupts_expected, requests_expected),
            "{looks} recheck(s)"
        );
        // The end of the stream: `looks` passes that find nothing, each woken, then the
        // interrupt is armed and nothing wakes the caller any more.
        let before = wakes(&count);
        for _ in 0..4 {
            assert!(net.poll_receive(&mut cx).is_pending());
        }
        let rechecks_at_end = wakes(&count) - before;
        assert!(
            rechecks_at_end < usize::from(looks),
            "{looks}: {rechecks_at_end}"
        );
        assert!(device.receive(&frame(60, 99), None));
        assert_eq!(device.interrupts(RX), interrupts_expected + 1);
    }

    // The same stream without rechecks: one interrupt per pass.
    let no_recheck = VirtioConfig::new().with_rx_recheck(0);
    let (mut net, device, _pool, irq) = setup_config(FEATURES, 64, no_recheck);
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert!(net.poll_receive(&mut cx).is_pending());
    let (taken, interrupts) = stream(&mut net, &device, &mut cx, 50, 3);
    assert_eq!((taken, interrupts), (150, 50));
    assert_eq!(wakes(&count), 0);
    assert_eq!(irq.stats().rx_rechecks, 0);
}

#[test]
fn a_frame_that_lands_while_the_interrupt_is_being_armed_is_not_lost() {
    let (mut net, device, _pool, _irq) = setup(64);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(net.poll_receive(&mut cx).is_pending());
    assert!(device.receive(&frame(60, 1), None));
    assert!(net.poll_receive(&mut cx).is_ready());
    // The device uses a buffer while the RX interrupt is off (mid-batch): no interrupt comes
    // for it, so the drained check must find it.
    assert!(device.receive(&frame(60, 2), None));
    assert_eq!(device.interrupts(RX), 1);
    let Poll::Ready(rx) = net.poll_receive(&mut cx) else {
        panic!("the frame used before the interrupt was asked for");
    };
    assert_eq!(&rx[..], &frame(60, 2)[..]);
}

#[test]
fn doorbells_follow_the_event_index_across_the_16_bit_wrap() {
    let (mut net, device, pool, irq) = setup(64);
    let mut cx = Context::from_waker(Waker::noop());
    net.flush();
    // 7,000 bursts of ten frames take the TX ring's indices past 65,535: each burst after the
    // device caught up is notified exactly once.
    let bursts = 7_000;
    for b in 0..bursts {
        for i in 0..10 {
            let tx = tx_frame(&mut net, &mut cx, 60, (b + i) as u8);
            net.transmit(tx).unwrap();
        }
        net.flush();
        assert_eq!(device.notified(TX), b + 1, "burst {b}");
        assert_eq!(device.transmit_all().len(), 10);
    }
    assert_eq!(irq.stats().tx_frames, 70_000);
    assert_eq!(
        device.interrupts(TX),
        0,
        "no TX interrupt was ever asked for"
    );
    drop(net);
    assert_eq!(pool.audit().unwrap().get(SlotState::Device), 10);
}

#[test]
fn without_event_index_the_ring_flags_suppress_doorbells_and_interrupts() {
    let (mut net, device, _pool, irq) = setup_with(F_MAC | F_VERSION_1, 64);
    let (_count, w) = waker();
    let mut cx = Context::from_waker(&w);
    net.flush();
    assert_eq!(
        device.avail_flags(TX),
        1,
        "TX interrupts off from the start"
    );
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(
        device.avail_flags(RX),
        0,
        "RX interrupt asked for when drained"
    );
    assert_eq!(device.notified(RX), 1);

    // The device says it is busy with TX: no doorbell.
    device.set_used_flags(TX, 1);
    send(&mut net, &mut cx, 1);
    net.flush();
    assert_eq!(device.notified(TX), 0);
    device.set_used_flags(TX, 0);
    send(&mut net, &mut cx, 2);
    net.flush();
    assert_eq!(device.notified(TX), 1);
    assert_eq!(device.transmit_all().len(), 2);
    assert_eq!(device.interrupts(TX), 0);

    assert!(device.receive(&frame(60, 3), None));
    assert_eq!(device.interrupts(RX), 1);
    assert!(net.poll_receive(&mut cx).is_ready());
    assert_eq!(
        device.avail_flags(RX),
        1,
        "RX interrupts off during a batch"
    );
    assert_eq!(irq.stats().device_errors, 0);
}

#[test]
fn a_device_that_breaks_the_protocol_stops_the_driver_without_a_panic() {
    let (mut net, device, pool, irq) = setup(64);
    let (_count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert!(net.poll_receive(&mut cx).is_pending());
    send(&mut net, &mut cx, 0);
    // A used element for a descriptor that heads no chain in flight on the TX queue (the frame
    // went out in descriptor 0).
    device.push_bogus_used(TX, 3);
    assert!(net.poll_transmit_frame(&mut cx).is_pending());
    assert_eq!(irq.stats().device_errors, 1);
    let mut tx = pool.try_alloc_tx().unwrap();
    tx.append(60).unwrap();
    assert_eq!(net.transmit(tx), Err(TxError::Device));
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(
        irq.stats().device_errors,
        1,
        "counted once: the driver stopped"
    );

    // An RX id out of range, and a used index that runs ahead of the buffers posted.
    let (mut net, device, _pool, irq) = setup(64);
    assert!(net.poll_receive(&mut cx).is_pending());
    device.push_bogus_used(RX, 1000);
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(irq.stats().device_errors, 1);

    let (mut net, device, _pool, irq) = setup(64);
    send(&mut net, &mut cx, 0);
    device.push_bogus_used(TX, 0);
    device.push_bogus_used(TX, 0);
    assert!(net.poll_transmit_ready(&mut cx).is_pending());
    assert_eq!(irq.stats().device_errors, 1);
}

#[test]
fn dropping_the_driver_leaves_device_owned_slots_out_of_the_pool() {
    let (mut net, _device, pool, _irq) = setup(64);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(net.poll_receive(&mut cx).is_pending());
    send(&mut net, &mut cx, 0);
    drop(net);
    let occupancy = pool.audit().unwrap();
    assert_eq!(occupancy.get(SlotState::Posted), Q);
    assert_eq!(occupancy.get(SlotState::Device), 1);
}

#[test]
fn link_state_follows_the_device_status_and_its_interrupt_wakes_the_watcher() {
    let (mut net, device, _pool, irq) = setup_with(FEATURES | F_STATUS, 32);
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert_eq!(net.poll_link_state(&mut cx), LinkState::Up);
    assert_eq!(wakes(&count), 0);

    // The device drops its link and raises the configuration interrupt.
    device.set_config(6, &[0]);
    irq.handle_config_interrupt();
    assert_eq!(
        wakes(&count),
        1,
        "the configuration interrupt wakes the registered task"
    );
    assert_eq!(net.poll_link_state(&mut cx), LinkState::Down);

    device.set_config(6, &[1]);
    irq.handle_config_interrupt();
    assert_eq!(wakes(&count), 2);
    assert_eq!(net.poll_link_state(&mut cx), LinkState::Up);
    assert_eq!(irq.stats().config_interrupts, 2);
}

#[test]
fn a_device_without_the_status_feature_reads_as_up() {
    let (mut net, device, _pool, irq) = setup(32);
    device.set_config(6, &[0]); // not a valid field without VIRTIO_NET_F_STATUS
    let (count, w) = waker();
    assert_eq!(
        net.poll_link_state(&mut Context::from_waker(&w)),
        LinkState::Up
    );
    irq.handle_config_interrupt();
    assert_eq!(
        wakes(&count),
        0,
        "nothing registered: the state cannot change"
    );
}

#[test]
fn a_shared_transport_serves_the_driver_and_the_kernel() {
    let device = FakeDevice::new(FEATURES | F_STATUS);
    let cell: &'static spin::Mutex<FakeTransport> =
        Box::leak(Box::new(spin::Mutex::new(transport(&device))));
    let shared = SharedTransport::new(cell);
    let pool = FramePool::leak(PoolConfig::new(32)).unwrap();
    let mut net =
        VirtioNet::<IdentityHal, _, Q>::new(shared, pool, leak_irq()).expect("driver init");
    // The kernel's copy reaches the same device.
    let mac: [u8; 6] = shared.read_config_space(0).unwrap();
    assert_eq!(mac, MAC);
    let (_count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert_eq!(net.poll_link_state(&mut cx), LinkState::Up);
    let Poll::Ready(mut tx) = net.poll_transmit_frame(&mut cx) else {
        panic!("a TX frame from the pool");
    };
    tx.append(60).unwrap();
    net.transmit(tx).unwrap();
    assert_eq!(device.notified(TX), 1);
}

// ---- checksum offload ----------------------------------------------------------------------

/// virtio-net header flags.
const NEEDS_CSUM: u8 = 1;
const DATA_VALID: u8 = 2;
/// Where the Ethernet and IPv4 headers (20 bytes, no options) put the L4 header.
const L4_START: usize = 14 + 20;

/// The Internet checksum's ones'-complement sum of `parts` (each even-length but the last),
/// folded, written out here rather than taken from the crates under test.
fn fold_sum(parts: &[&[u8]]) -> u16 {
    let mut acc: u64 = 0;
    for part in parts {
        for pair in part.chunks(2) {
            let hi = u64::from(pair[0]) << 8;
            acc += hi | pair.get(1).map_or(0, |&b| u64::from(b));
        }
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The IPv4 pseudo-header of `frame`'s L4 segment (built by [`ipv4_frame`]).
fn pseudo_header(frame: &[u8]) -> Vec<u8> {
    let l4_len = (frame.len() - L4_START) as u16;
    let mut p = frame[26..34].to_vec(); // source, destination
    p.extend_from_slice(&[0, frame[23]]);
    p.extend_from_slice(&l4_len.to_be_bytes());
    p
}

/// Whether `frame`'s L4 checksum is right, as a receiver checks it.
fn l4_checksum_ok(frame: &[u8]) -> bool {
    fold_sum(&[&pseudo_header(frame), &frame[L4_START..]]) == 0xffff
}

/// An Ethernet + IPv4 frame carrying `l4` (a TCP or UDP header and payload) of protocol `proto`,
/// with the L4 checksum field (at `csum_offset` in `l4`) holding the pseudo-header sum, as a
/// stack leaves it for the device: returns the frame and its checksum mark.
fn ipv4_frame(proto: u8, mut l4: Vec<u8>, csum_offset: usize) -> (Vec<u8>, ChecksumPartial) {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + l4.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[
        0x12, 0x34, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    let ip_sum = !fold_sum(&[&ip]);
    ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    f.extend_from_slice(&ip);
    l4[csum_offset..csum_offset + 2].fill(0);
    f.extend_from_slice(&l4);
    let partial = fold_sum(&[&pseudo_header(&f)]);
    f[L4_START + csum_offset..L4_START + csum_offset + 2].copy_from_slice(&partial.to_be_bytes());
    let mark = ChecksumPartial {
        start: L4_START as u16,
        offset: csum_offset as u16,
    };
    (f, mark)
}

/// A TCP segment (20-byte header, PSH|ACK) with `payload`.
fn tcp_frame(payload: &[u8]) -> (Vec<u8>, ChecksumPartial) {
    let mut l4 = vec![
        0x1f, 0x90, 0xc3, 0x50, 0, 0, 0x10, 0, 0, 0, 0x20, 0, 0x50, 0x18, 0xfa, 0xf0, 0, 0, 0, 0,
    ];
    l4.extend_from_slice(payload);
    ipv4_frame(6, l4, 16)
}

/// A UDP datagram with `payload`.
fn udp_frame(payload: &[u8]) -> (Vec<u8>, ChecksumPartial) {
    let len = (8 + payload.len()) as u16;
    let mut l4 = vec![0x30, 0x39, 0x00, 0x35];
    l4.extend_from_slice(&len.to_be_bytes());
    l4.extend_from_slice(&[0, 0]);
    l4.extend_from_slice(payload);
    ipv4_frame(17, l4, 6)
}

/// What the device does with a sent buffer (virtio-net header first): with `NEEDS_CSUM`,
/// completes the checksum at `csum_start + csum_offset` over the bytes from `csum_start` on.
/// Returns the frame as it goes on the wire.
fn device_completes(sent: &[u8]) -> Vec<u8> {
    let (header, frame) = sent.split_at(HDR);
    let mut frame = frame.to_vec();
    if header[0] & NEEDS_CSUM != 0 {
        let start = usize::from(u16::from_le_bytes([header[6], header[7]]));
        let field = start + usize::from(u16::from_le_bytes([header[8], header[9]]));
        let sum = !fold_sum(&[&frame[start..]]);
        frame[field..field + 2].copy_from_slice(&sum.to_be_bytes());
    }
    frame
}

/// Transmits `bytes` marked with `mark` and returns what the device got (header included).
fn send_marked(
    net: &mut Net,
    device: &FakeDevice,
    bytes: &[u8],
    mark: Option<ChecksumPartial>,
) -> Vec<u8> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut tx = tx_frame(net, &mut cx, bytes.len(), 0);
    tx.copy_from_slice(bytes);
    tx.set_checksum_partial(mark).unwrap();
    net.transmit(tx).unwrap();
    net.flush();
    let mut sent = device.transmit_all();
    assert_eq!(sent.len(), 1);
    sent.pop().unwrap().1
}

#[test]
fn partial_checksums_go_to_the_device_as_needs_csum_in_the_headroom() {
    let (mut net, device, _pool, irq) = setup_with(FEATURES | F_CSUM | F_GUEST_CSUM, 64);
    assert_eq!(
        device.accepted() & (F_CSUM | F_GUEST_CSUM),
        F_CSUM | F_GUEST_CSUM
    );
    let caps = net.capabilities();
    assert_eq!(
        caps.checksum,
        ChecksumOffloads::TCP_TX | ChecksumOffloads::UDP_TX
    );
    assert_eq!(caps.tx_headroom, HDR);

    let (frame, mark) = tcp_frame(b"GET / HTTP/1.1\r\nHost: zcnet\r\n\r\n");
    assert!(!l4_checksum_ok(&frame), "only the pseudo-header sum so far");
    let sent = send_marked(&mut net, &device, &frame, Some(mark));
    assert_eq!(sent.len(), HDR + frame.len());
    let header = &sent[..HDR];
    assert_eq!(header[0], NEEDS_CSUM, "flags");
    assert_eq!(header[1], 0, "no segmentation");
    assert_eq!(u16::from_le_bytes([header[6], header[7]]), 34, "csum_start");
    assert_eq!(
        u16::from_le_bytes([header[8], header[9]]),
        16,
        "csum_offset"
    );
    assert_eq!(
        &sent[HDR..],
        &frame[..],
        "the driver left the frame's bytes alone"
    );
    assert!(l4_checksum_ok(&device_completes(&sent)));

    let (frame, mark) = udp_frame(b"a datagram of odd length");
    let sent = send_marked(&mut net, &device, &frame, Some(mark));
    assert_eq!(
        (sent[0], u16::from_le_bytes([sent[8], sent[9]])),
        (NEEDS_CSUM, 6)
    );
    assert!(l4_checksum_ok(&device_completes(&sent)));

    // An unmarked frame carries its own checksum: the header asks nothing.
    let (mut frame, _) = tcp_frame(b"complete");
    frame[L4_START + 16..L4_START + 18].fill(0);
    let sum = !fold_sum(&[&pseudo_header(&frame), &frame[L4_START..]]);
    frame[L4_START + 16..L4_START + 18].copy_from_slice(&sum.to_be_bytes());
    let sent = send_marked(&mut net, &device, &frame, None);
    assert!(sent[..HDR].iter().all(|&b| b == 0));
    assert!(l4_checksum_ok(&sent[HDR..]));

    let stats = irq.stats();
    assert_eq!(
        (stats.tx_checksum_offloaded, stats.tx_checksum_completed),
        (2, 0)
    );
}

#[test]
fn without_the_devices_csum_the_driver_completes_marked_checksums() {
    // The device offers no checksum offload.
    let (mut net, device, _pool, irq) = setup(64);
    assert_eq!(net.capabilities().checksum, ChecksumOffloads::empty());
    let (frame, mark) = tcp_frame(b"seventeen bytes!!");
    let sent = send_marked(&mut net, &device, &frame, Some(mark));
    assert!(
        sent[..HDR].iter().all(|&b| b == 0),
        "nothing asked of the device"
    );
    assert!(l4_checksum_ok(&sent[HDR..]));

    // A UDP checksum that comes out 0 goes out as 0xffff (0 would mean "none"): the payload's
    // last word is chosen so that the whole sum is 0xffff.
    let (mut frame, mark) = udp_frame(&[7, 7, 7, 7, 0, 0]);
    let n = frame.len();
    let rest = fold_sum(&[&frame[L4_START..]]);
    frame[n - 2..].copy_from_slice(&(0xffff - rest).to_be_bytes());
    let sent = send_marked(&mut net, &device, &frame, Some(mark));
    assert_eq!(&sent[HDR + L4_START + 6..HDR + L4_START + 8], &[0xff, 0xff]);
    assert!(l4_checksum_ok(&sent[HDR..]));

    // Offload turned off on a device that offers it: neither feature is taken.
    let device = FakeDevice::new(FEATURES | F_CSUM | F_GUEST_CSUM);
    let pool = FramePool::leak(PoolConfig::new(64)).unwrap();
    let config = VirtioConfig::new().with_checksum_offload(false);
    let mut off = Net::with_config(transport(&device), pool, leak_irq(), config).unwrap();
    assert_eq!(device.accepted() & (F_CSUM | F_GUEST_CSUM), 0);
    assert_eq!(off.capabilities().checksum, ChecksumOffloads::empty());
    let (frame, mark) = tcp_frame(b"x");
    let sent = send_marked(&mut off, &device, &frame, Some(mark));
    assert_eq!(sent[0], 0);
    assert!(l4_checksum_ok(&sent[HDR..]));
    assert_eq!(
        (
            off.irq().stats().tx_checksum_completed,
            irq.stats().tx_checksum_completed
        ),
        (1, 2)
    );
    assert_eq!(irq.stats().tx_checksum_offloaded, 0);
}

#[test]
fn a_checksum_mark_past_the_frames_end_is_refused_and_counted() {
    let (mut net, _device, pool, irq) = setup_with(FEATURES | F_CSUM, 64);
    let mut cx = Context::from_waker(Waker::noop());
    let (frame, mark) = tcp_frame(b"payload");
    let mut tx = tx_frame(&mut net, &mut cx, frame.len(), 0);
    tx.copy_from_slice(&frame);
    tx.set_checksum_partial(Some(mark)).unwrap();
    // Cut short after marking: the checksum field is gone.
    tx.set_len(L4_START + 10).unwrap();
    assert_eq!(net.transmit(tx), Err(TxError::Device));
    assert_eq!(irq.stats().tx_bad_checksum_mark, 1);
    assert_eq!(irq.stats().tx_frames, 0);
    assert_eq!(pool.audit().unwrap().get(SlotState::Device), 0);
}

#[test]
fn received_frames_are_verified_when_the_device_vouches_and_only_then() {
    let (mut net, device, _pool, irq) = setup_with(FEATURES | F_CSUM | F_GUEST_CSUM, 64);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(net.poll_receive(&mut cx).is_pending());
    let (checked, _) = tcp_frame(b"checked by the device");
    let (partial, _) = tcp_frame(b"left partial by a local sender");
    let (unchecked, _) = tcp_frame(b"not looked at");
    assert!(device.receive_with_header(&checked, &[DATA_VALID], None));
    assert!(device.receive_with_header(&partial, &[NEEDS_CSUM, 0, 0, 0, 0, 0, 34, 0, 16, 0], None));
    assert!(device.receive_with_header(&unchecked, &[0], None));
    let mut got = Vec::new();
    while let Poll::Ready(rx) = net.poll_receive(&mut cx) {
        got.push((rx.to_vec(), rx.checksum_verified()));
    }
    assert_eq!(
        got,
        [(checked, true), (partial, true), (unchecked, false)],
        "a frame the device did not validate is left for the stack to check"
    );
    let stats = irq.stats();
    assert_eq!((stats.rx_checksum_valid, stats.rx_checksum_partial), (1, 1));

    // Without GUEST_CSUM the flags mean nothing (a device must not set them): never verified.
    let device = FakeDevice::new(FEATURES | F_CSUM);
    let pool = FramePool::leak(PoolConfig::new(64)).unwrap();
    let mut net = Net::new(transport(&device), pool, leak_irq()).unwrap();
    assert!(net.poll_receive(&mut cx).is_pending());
    let (frame, _) = tcp_frame(b"flags ignored");
    assert!(device.receive_with_header(&frame, &[DATA_VALID | NEEDS_CSUM], None));
    let Poll::Ready(rx) = net.poll_receive(&mut cx) else {
        panic!("frame");
    };
    assert!(!rx.checksum_verified());
    assert_eq!(net.irq().stats().rx_checksum_valid, 0);
}

// ---- segmentation offload and merged receive buffers ---------------------------------------

/// Everything a device can offer for large receive and segmentation.
const ALL_OFFLOADS: u64 =
    F_CSUM | F_GUEST_CSUM | F_HOST_TSO4 | F_HOST_TSO6 | F_GUEST_TSO4 | F_GUEST_TSO6 | F_MRG_RXBUF;

/// A driver taking large receives, over a device offering every offload, with 64 slots.
fn large_receive() -> (Net, FakeDevice, &'static FramePool, &'static VirtioIrq) {
    let config = VirtioConfig::new().with_large_receive(true);
    setup_config(FEATURES | ALL_OFFLOADS, 64, config)
}

#[test]
fn large_receive_is_negotiated_only_when_asked_for_and_with_its_prerequisites() {
    let (net, device, _pool, _irq) = setup_with(FEATURES | ALL_OFFLOADS, 64);
    assert_eq!(
        device.accepted() & ALL_OFFLOADS,
        F_CSUM | F_GUEST_CSUM | F_HOST_TSO4 | F_HOST_TSO6,
        "segmentation by default, large receive only when asked for"
    );
    let caps = net.capabilities();
    assert_eq!(
        (caps.gso_max_size, caps.gso_kinds, caps.rx_chains),
        (65_535, GsoKinds::TCPV4 | GsoKinds::TCPV6, false)
    );

    let (net, device, _pool, _irq) = large_receive();
    assert_eq!(device.accepted() & ALL_OFFLOADS, ALL_OFFLOADS);
    assert!(net.capabilities().rx_chains);

    // Without checksum offload neither segmentation nor large receive is taken.
    let config = VirtioConfig::new()
        .with_large_receive(true)
        .with_checksum_offload(false);
    let (net, device, _pool, _irq) = setup_config(FEATURES | ALL_OFFLOADS, 64, config);
    assert_eq!(device.accepted() & ALL_OFFLOADS, 0);
    assert_eq!(net.capabilities().gso_max_size, 0);
    // Large receive needs merged buffers: GUEST_TSO alone is not taken.
    let config = VirtioConfig::new().with_large_receive(true);
    let offered = FEATURES | F_CSUM | F_GUEST_CSUM | F_GUEST_TSO4;
    let (_net, device, _pool, _irq) = setup_config(offered, 64, config);
    assert_eq!(device.accepted() & (F_GUEST_TSO4 | F_MRG_RXBUF), 0);
}

#[test]
fn a_packet_over_merged_buffers_comes_up_as_one_chain_with_its_marks() {
    let (mut net, device, pool, irq) = large_receive();
    let mut cx = Context::from_waker(Waker::noop());
    assert!(net.poll_receive_chain(&mut cx).is_pending());
    let payload: Vec<u8> = (0..4946u32).map(|i| (i * 7) as u8).collect();
    let (packet, _) = tcp_frame(&payload);
    assert_eq!(packet.len(), 5000);
    // NEEDS_CSUM, GSO_TCPV4, gso_size 1448; the first buffer alone is published at first.
    let header = [NEEDS_CSUM, 1, 54, 0, 0xa8, 0x05, 34, 0, 16, 0];
    let buffers = device.receive_merged(&packet, &header, 1);
    assert_eq!(buffers, 3, "posted buffers hold 1,932 bytes each");
    assert!(
        net.poll_receive_chain(&mut cx).is_pending(),
        "the packet is not whole yet"
    );
    assert_eq!(
        irq.stats().rx_posted,
        Q as u64,
        "its first buffer was replaced"
    );
    device.publish_held();
    let Poll::Ready(chain) = net.poll_receive_chain(&mut cx) else {
        panic!("the whole packet");
    };
    assert_eq!(chain.frame_count(), 3);
    let mut bytes = vec![0u8; chain.len()];
    chain.copy_to(&mut bytes, zcnet_buffer::CopySite::Driver);
    assert_eq!(bytes, packet);
    let head = chain.head().unwrap();
    assert!(head.checksum_verified());
    assert_eq!(
        head.gso_info(),
        Some(GsoInfo {
            kind: GsoKind::TcpV4,
            segment_size: 1448
        })
    );
    assert!(chain.frames().all(|f| pool.slot_of(f.as_ptr()).is_some()));
    let stats = irq.stats();
    assert_eq!(
        (stats.rx_frames, stats.rx_merged, stats.rx_bytes),
        (1, 1, 5000)
    );
    assert_eq!(stats.rx_posted, Q as u64);

    // A one-buffer packet is a one-frame chain, without a GSO mark.
    let (small, _) = tcp_frame(b"small");
    device.receive_merged(&small, &[DATA_VALID], 1);
    let Poll::Ready(chain) = net.poll_receive_chain(&mut cx) else {
        panic!("the small packet");
    };
    assert_eq!(chain.frame_count(), 1);
    assert_eq!(chain.head().unwrap().gso_info(), None);
    drop(chain);

    // As packets: a merged one as a chain, a one-buffer one as a frame.
    device.receive_merged(&packet, &header, 3);
    device.receive_merged(&small, &[DATA_VALID], 1);
    match net.poll_receive_packet(&mut cx) {
        Poll::Ready(RxPacket::Chain(chain)) => assert_eq!(chain.len(), packet.len()),
        other => panic!("the merged packet as a chain, got {other:?}"),
    }
    match net.poll_receive_packet(&mut cx) {
        Poll::Ready(RxPacket::Frame(frame)) => assert_eq!(&frame[..], &small[..]),
        other => panic!("the small packet as a frame, got {other:?}"),
    }
    assert!(net.poll_receive_packet(&mut cx).is_pending());

    // A caller taking frames only gets the small packets; a merged one is dropped, counted.
    device.receive_merged(&packet, &header, 3);
    device.receive_merged(&small, &[], 1);
    let Poll::Ready(frame) = net.poll_receive(&mut cx) else {
        panic!("the small packet after the merged one");
    };
    assert_eq!(&frame[..], &small[..]);
    assert_eq!(irq.stats().rx_chains_dropped, 1);
    assert_eq!(irq.stats().rx_posted, Q as u64);
}

#[test]
fn merged_packets_that_break_the_rules_are_dropped_whole() {
    let (mut net, device, _pool, irq) = large_receive();
    let mut cx = Context::from_waker(Waker::noop());
    assert!(net.poll_receive_chain(&mut cx).is_pending());
    let (small, _) = tcp_frame(b"after");
    // num_buffers 0: no packet spans no buffer.
    device.receive_merged(&small, &[], 1);
    {
        // Overwrite num_buffers of the element just published with 0.
        let state = device.0.lock().unwrap();
        let q = &state.queues[RX];
        let slot = u64::from(q.next_used.wrapping_sub(1)) % u64::from(q.size);
        let elem = q.device_area + USED_RING + 8 * slot;
        // SAFETY: the used element just published (identity-mapped ring memory), and the
        // buffer it names, a pool slot the driver posted; single-threaded.
        unsafe {
            let id = (elem as *const u32).read_volatile();
            let desc = q.descriptors + 16 * u64::from(id);
            let addr = (desc as *const u64).read_volatile();
            ((addr + 10) as *mut u16).write_volatile(0);
        }
    }
    device.receive_merged(&small, &[], 1);
    let Poll::Ready(chain) = net.poll_receive_chain(&mut cx) else {
        panic!("the packet after the bad one");
    };
    assert_eq!(chain.len(), small.len());
    assert_eq!(irq.stats().rx_oversize, 1);
    assert_eq!(irq.stats().rx_frames, 1);
    assert_eq!(irq.stats().device_errors, 0);
}

/// A TCP super-segment as a chain: the head frame holds Ethernet, IPv4 and TCP headers and the
/// first `first` payload bytes, then one tail frame per entry of `tails`. The head carries the
/// checksum mark (pseudo-header sum over the whole TCP length) and, if `mss`, a GSO request.
fn super_segment(
    pool: &'static FramePool,
    first: usize,
    tails: &[usize],
    mss: Option<u16>,
) -> (TxChain, Vec<u8>) {
    let total: usize = first + tails.iter().sum::<usize>();
    let payload: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
    let (packet, mark) = tcp_frame(&payload);
    let mut head = pool.try_alloc_tx().unwrap();
    head.append(54 + first)
        .unwrap()
        .copy_from_slice(&packet[..54 + first]);
    head.set_checksum_partial(Some(mark)).unwrap();
    if let Some(mss) = mss {
        head.set_gso_request(Some(GsoRequest {
            kind: GsoKind::TcpV4,
            segment_size: mss,
            header_len: 54,
        }))
        .unwrap();
    }
    let mut chain = TxChain::from_frame(head);
    let mut at = 54 + first;
    for &n in tails {
        let mut tail = pool.try_alloc_tx().unwrap();
        tail.append(n).unwrap().copy_from_slice(&packet[at..at + n]);
        at += n;
        chain.push(tail).unwrap();
    }
    (chain, packet)
}

#[test]
fn a_super_segment_goes_out_as_one_descriptor_list_with_its_gso_request() {
    let (mut net, device, pool, irq) =
        setup_with(FEATURES | F_CSUM | F_HOST_TSO4 | F_HOST_TSO6, 64);
    let (chain, packet) = super_segment(pool, 1000, &[1400, 1400, 600], Some(1400));
    assert_eq!(packet.len(), 4454);
    net.transmit_chain(chain).unwrap();
    net.flush();
    let sent = device.transmit_chains();
    assert_eq!(sent.len(), 1);
    let parts = &sent[0];
    assert_eq!(parts.len(), 4, "one descriptor per frame");
    let header = &parts[0][..HDR];
    let le = |i: usize| u16::from_le_bytes([header[i], header[i + 1]]);
    assert_eq!((header[0], header[1]), (NEEDS_CSUM, 1), "flags, GSO_TCPV4");
    assert_eq!((le(2), le(4), le(6), le(8)), (54, 1400, 34, 16));
    let mut wire: Vec<u8> = parts.concat();
    let bytes = wire.split_off(HDR);
    assert_eq!(bytes, packet, "the packet's bytes, in order, untouched");
    let stats = irq.stats();
    assert_eq!(
        (stats.tx_gso, stats.tx_checksum_offloaded, stats.tx_frames),
        (1, 1, 1)
    );
    assert_eq!(stats.tx_bytes, 4454);

    // Back from the device: every slot returns at the next flush.
    assert_eq!(pool.audit().unwrap().get(SlotState::Device), 4);
    net.flush();
    assert_eq!(pool.audit().unwrap().free, 64);
}

#[test]
fn chains_are_counted_by_descriptor_and_refused_when_the_device_cannot_take_them() {
    let (mut net, device, pool, irq) = setup_with(FEATURES | F_CSUM | F_HOST_TSO4, 128);
    let mut cx = Context::from_waker(Waker::noop());
    // A chain that fits the MTU needs no segmentation: two descriptors, no GSO type.
    let (chain, packet) = super_segment(pool, 200, &[300], None);
    net.transmit_chain(chain).unwrap();
    // Three chains of four frames take twelve of the sixteen descriptors.
    for _ in 0..3 {
        let (chain, _) = super_segment(pool, 1000, &[1400, 1400, 600], Some(1400));
        net.transmit_chain(chain).unwrap();
    }
    // Two descriptors left: a chain of four offered anyway is refused. With segmentation on,
    // the queue says it is ready only with room for a whole chain (sixteen descriptors here,
    // the whole queue), so a stack that asks first waits instead.
    let (chain, _) = super_segment(pool, 1000, &[1400, 1400, 600], Some(1400));
    assert_eq!(net.transmit_chain(chain), Err(TxError::Device));
    assert_eq!(irq.stats().tx_queue_full, 1);
    assert!(net.poll_transmit_ready(&mut cx).is_pending());
    net.flush();
    let sent = device.transmit_chains();
    assert_eq!(sent.iter().map(Vec::len).collect::<Vec<_>>(), [2, 4, 4, 4]);
    assert_eq!(sent[0][0][1], 0, "no GSO type for a packet within the MTU");
    assert_eq!(sent[0].concat()[HDR..], packet[..]);

    // TCPv6 is not segmented by this device; a chain over the MTU without a request is too long.
    let (mut chain, _) = super_segment(pool, 1000, &[1400, 1400], Some(1400));
    let mut request = chain.head().unwrap().gso_request().unwrap();
    request.kind = GsoKind::TcpV6;
    chain
        .head_mut()
        .unwrap()
        .set_gso_request(Some(request))
        .unwrap();
    assert_eq!(
        net.transmit_chain(chain),
        Err(TxError::ChainUnsupported { frames: 3 })
    );
    let (chain, _) = super_segment(pool, 1000, &[1400, 1400], None);
    assert!(matches!(
        net.transmit_chain(chain),
        Err(TxError::TooLong { len: 3854, .. })
    ));
    net.flush();
    let occupancy = pool.audit().unwrap();
    assert_eq!(
        occupancy.get(SlotState::Device),
        0,
        "refused chains went back"
    );
}

/// The delay the deferral tests configure.
const DEFER: std::time::Duration = std::time::Duration::from_micros(50);

/// A driver deferring after stretches of three full frames (each `HDR + 1514` bytes in its
/// buffer), rechecks off so that every drained pass is the end of a stretch.
fn deferring() -> (Net, FakeDevice, &'static VirtioIrq) {
    let config = VirtioConfig::new()
        .with_rx_recheck(0)
        .with_rx_defer(DEFER, 3 * (HDR as u32 + 1514));
    let (net, device, _pool, irq) = setup_config(FEATURES, 64, config);
    (net, device, irq)
}

/// The device receives `n` full frames; then one pass takes them all (polls until `Pending`).
fn full_frames_then_pass(net: &mut Net, device: &FakeDevice, cx: &mut Context<'_>, n: u8) {
    for i in 0..n {
        assert!(device.receive(&frame(1514, i), None));
    }
    let mut taken = 0;
    while net.poll_receive(cx).is_ready() {
        taken += 1;
    }
    assert_eq!(taken, usize::from(n));
}

#[test]
fn a_bulk_stretch_is_deferred_and_a_short_one_arms_the_interrupt() {
    let (mut net, device, irq) = deferring();
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(
        net.receive_deferral(),
        None,
        "nothing received: no deferral"
    );

    // A bulk burst: one interrupt, then the drained pass hands the queue to the caller's timer.
    full_frames_then_pass(&mut net, &device, &mut cx, 4);
    assert_eq!(device.interrupts(RX), 1);
    assert_eq!(net.receive_deferral(), Some(DEFER));
    assert_eq!(net.receive_deferral(), None, "one answer per drained pass");
    assert_eq!(irq.stats().rx_deferrals, 1);
    // The next bursts land while the caller waits for its timer: no interrupt, and each
    // deferred poll that again takes a bulk stretch defers again.
    for _ in 0..5 {
        full_frames_then_pass(&mut net, &device, &mut cx, 3);
        assert_eq!(net.receive_deferral(), Some(DEFER));
    }
    assert_eq!(device.interrupts(RX), 1, "the stream interrupted once");
    assert_eq!(irq.stats().rx_deferrals, 6);
    // The stream thins out: a stretch of two frames arms the interrupt again, and the caller
    // waits for its waker.
    full_frames_then_pass(&mut net, &device, &mut cx, 2);
    assert_eq!(net.receive_deferral(), None);
    assert_eq!(wakes(&count), 0);
    assert!(device.receive(&frame(60, 1), None));
    assert_eq!(device.interrupts(RX), 2);
    assert_eq!(wakes(&count), 0, "the test delivers interrupts by hand");
    irq.handle_rx_interrupt();
    assert_eq!(wakes(&count), 1, "the interrupt wakes the caller");
    assert!(net.poll_receive(&mut cx).is_ready());

    // A deferred poll that finds nothing arms the interrupt: an idle link is not polled.
    assert!(net.poll_receive(&mut cx).is_pending());
    full_frames_then_pass(&mut net, &device, &mut cx, 3);
    assert_eq!(net.receive_deferral(), Some(DEFER));
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(net.receive_deferral(), None);
    let interrupts = device.interrupts(RX);
    assert!(device.receive(&frame(60, 2), None));
    assert_eq!(device.interrupts(RX), interrupts + 1);
}

#[test]
fn request_response_traffic_is_never_deferred() {
    let (mut net, device, irq) = deferring();
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert!(net.poll_receive(&mut cx).is_pending());
    // A request per wake, even of full frames, two at a time: every one interrupts at once.
    for round in 1..=20 {
        full_frames_then_pass(&mut net, &device, &mut cx, 1 + (round % 2) as u8);
        assert_eq!(net.receive_deferral(), None);
        assert_eq!(device.interrupts(RX), round);
    }
    // Many small frames in one stretch stay below the threshold too.
    for i in 0..8 {
        assert!(device.receive(&frame(100, i), None));
    }
    while net.poll_receive(&mut cx).is_ready() {}
    assert_eq!(net.receive_deferral(), None);
    assert_eq!(irq.stats().rx_deferrals, 0);
    assert_eq!(wakes(&count), 0);
}

#[test]
fn a_deferral_stands_only_for_a_caller_that_asks_at_once() {
    // Off by default: a bulk stretch keeps its interrupt request.
    let (mut net, device, _pool, irq) = setup_config(FEATURES, 64, VirtioConfig::new());
    let mut cx = Context::from_waker(Waker::noop());
    assert!(net.poll_receive(&mut cx).is_pending());
    for _ in 0..3 {
        full_frames_then_pass(&mut net, &device, &mut cx, 8);
        // (The default recheck: one more pass before the interrupt is asked for.)
        assert!(net.poll_receive(&mut cx).is_pending());
        assert_eq!(net.receive_deferral(), None);
    }
    assert_eq!(irq.stats().rx_deferrals, 0);

    // A caller that does not ask gets the interrupt as without deferral.
    let (mut net, device, irq) = deferring();
    assert!(net.poll_receive(&mut cx).is_pending());
    full_frames_then_pass(&mut net, &device, &mut cx, 4);
    let interrupts = device.interrupts(RX);
    assert!(device.receive(&frame(60, 1), None));
    assert_eq!(device.interrupts(RX), interrupts + 1, "the interrupt stood");
    // An offer not taken before the next poll lapses.
    while net.poll_receive(&mut cx).is_ready() {}
    full_frames_then_pass(&mut net, &device, &mut cx, 4);
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(net.receive_deferral(), None);
    assert_eq!(irq.stats().rx_deferrals, 0);

    // With rechecks, the stretch spans the recheck passes: the pass that arms the interrupt
    // after them is the one deferred.
    let config = VirtioConfig::new()
        .with_rx_recheck(1)
        .with_rx_defer(DEFER, 3 * (HDR as u32 + 1514));
    let (mut net, device, _pool, irq) = setup_config(FEATURES, 64, config);
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert!(net.poll_receive(&mut cx).is_pending());
    full_frames_then_pass(&mut net, &device, &mut cx, 3);
    assert_eq!(wakes(&count), 1, "the recheck wake");
    assert_eq!(
        net.receive_deferral(),
        None,
        "not yet: the caller looks again"
    );
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(net.receive_deferral(), Some(DEFER));
    assert_eq!(irq.stats().rx_deferrals, 1);
    let interrupts = device.interrupts(RX);
    assert!(device.receive(&frame(60, 3), None));
    assert_eq!(device.interrupts(RX), interrupts, "deferred: no interrupt");
}
