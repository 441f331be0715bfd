//! `VirtioNet` against a fake virtio-net device that plays the device's side of the split
//! virtqueues in this process: it takes buffers from the avail rings, writes or reads them where
//! their descriptors point (pool memory, since the test `Hal` maps identity) and fills the used
//! rings. The QEMU tests (`tests/tests/qemu_kernel.rs`) run the same driver against QEMU's
//! real device; these tests reach the corners QEMU never shows: runts, oversize completions, a
//! full TX queue, an exhausted pool, a copying `Hal`.

use std::alloc::{alloc_zeroed, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use virtio_drivers::device::net::VirtIONetRaw;
use virtio_drivers::transport::{DeviceStatus, DeviceType, InterruptStatus, Transport};
use virtio_drivers::{BufferDirection, Hal, PhysAddr, PAGE_SIZE};
use zcnet_buffer::{Driver, FramePool, HardwareAddress, LinkState, PoolConfig, SlotState, TxError};
use zcnet_virtio::{SharedTransport, VirtioError, VirtioIrq, VirtioNet};
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// Virtqueue size of the fake device.
const Q: usize = 16;
const RX: usize = 0;
const TX: usize = 1;
/// virtio-net header with VERSION_1.
const HDR: usize = 12;
const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
/// VIRTIO_NET_F_MAC | VIRTIO_F_VERSION_1.
const FEATURES: u64 = (1 << 5) | (1 << 32);
/// `VIRTIO_NET_F_STATUS`: the configuration's `status` field is valid.
const F_STATUS: u64 = 1 << 16;

/// A `Hal` for a host process: DMA pages from the heap, device addresses are CPU addresses.
struct IdentityHal;

// SAFETY: `dma_alloc` returns zeroed, page-aligned memory that is never freed while in use (the
// tests leak it), and device addresses equal CPU addresses in this process.
unsafe impl Hal for IdentityHal {
    fn dma_alloc(pages: usize, _direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let layout = Layout::from_size_align(pages * PAGE_SIZE, PAGE_SIZE).unwrap();
        // SAFETY: the layout has a non-zero size (virtio-drivers never asks for 0 pages).
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).expect("out of memory");
        (ptr.as_ptr() as PhysAddr, ptr)
    }

    unsafe fn dma_dealloc(_paddr: PhysAddr, _vaddr: NonNull<u8>, _pages: usize) -> i32 {
        // Leaked: the fake device may still look at a queue the test dropped.
        0
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, _size: usize) -> NonNull<u8> {
        NonNull::new(paddr as *mut u8).unwrap()
    }

    unsafe fn share(buffer: NonNull<[u8]>, _direction: BufferDirection) -> PhysAddr {
        buffer.cast::<u8>().as_ptr() as PhysAddr
    }

    unsafe fn unshare(_paddr: PhysAddr, _buffer: NonNull<[u8]>, _direction: BufferDirection) {}
}

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
    descriptors: u64,
    driver_area: u64,
    device_area: u64,
    /// The device's position in the avail ring.
    next_avail: u16,
    /// The device's next used-ring index.
    next_used: u16,
}

#[derive(Default)]
struct DeviceState {
    status: u32,
    queues: [FakeQueue; 2],
    notified: [usize; 2],
}

/// The device side, shared between the transport (owned by the driver) and the test.
#[derive(Clone, Default)]
struct FakeDevice(Arc<Mutex<DeviceState>>);

/// Byte offsets inside the split-virtqueue structures (virtio 1.x, 2.7).
const AVAIL_IDX: u64 = 2;
const AVAIL_RING: u64 = 4;
const USED_IDX: u64 = 2;
const USED_RING: u64 = 4;

impl FakeDevice {
    /// Takes the next buffer the driver made available on `queue`: its descriptor's address,
    /// length and flags, and its head index. `None` when the driver posted nothing new.
    fn take_avail(q: &mut FakeQueue) -> Option<(u16, u64, u32, u16)> {
        // SAFETY: the driver set these areas up through `queue_set` with identity-mapped
        // addresses of live DMA pages (IdentityHal never frees them); the test is single-
        // threaded, so no access races with the driver's.
        unsafe {
            let avail_idx = ((q.driver_area + AVAIL_IDX) as *const u16).read_volatile();
            if avail_idx == q.next_avail {
                return None;
            }
            let slot = u64::from(q.next_avail) % Q as u64;
            let head = ((q.driver_area + AVAIL_RING + 2 * slot) as *const u16).read_volatile();
            let desc = q.descriptors + 16 * u64::from(head);
            let addr = (desc as *const u64).read_volatile();
            let len = ((desc + 8) as *const u32).read_volatile();
            let flags = ((desc + 12) as *const u16).read_volatile();
            q.next_avail = q.next_avail.wrapping_add(1);
            Some((head, addr, len, flags))
        }
    }

    /// Puts `head` on `queue`'s used ring with `len` bytes written.
    fn push_used(q: &mut FakeQueue, head: u16, len: u32) {
        let slot = u64::from(q.next_used) % Q as u64;
        // SAFETY: as in `take_avail`.
        unsafe {
            let elem = q.device_area + USED_RING + 8 * slot;
            (elem as *mut u32).write_volatile(u32::from(head));
            ((elem + 4) as *mut u32).write_volatile(len);
            q.next_used = q.next_used.wrapping_add(1);
            ((q.device_area + USED_IDX) as *mut u16).write_volatile(q.next_used);
        }
    }

    /// The device receives `frame` from the wire: writes a zero virtio-net header and the frame
    /// into the next posted buffer. `claimed_len` overrides the length reported (runts and
    /// oversize completions). False when no buffer was posted.
    fn receive(&self, frame: &[u8], claimed_len: Option<u32>) -> bool {
        let mut state = self.0.lock().unwrap();
        let q = &mut state.queues[RX];
        let Some((head, addr, len, flags)) = Self::take_avail(q) else {
            return false;
        };
        assert_eq!(flags & 2, 2, "RX buffers are device-writable");
        let total = HDR + frame.len();
        assert!(total <= len as usize, "frame larger than the posted buffer");
        // SAFETY: `addr..addr + len` is the buffer the driver posted (a pool slot).
        unsafe {
            std::ptr::write_bytes(addr as *mut u8, 0, HDR);
            std::ptr::copy_nonoverlapping(frame.as_ptr(), (addr as *mut u8).add(HDR), frame.len());
        }
        Self::push_used(q, head, claimed_len.unwrap_or(total as u32));
        true
    }

    /// The device sends what the driver queued: returns each buffer's address and bytes
    /// (virtio-net header included) and completes them.
    fn transmit_all(&self) -> Vec<(u64, Vec<u8>)> {
        let mut state = self.0.lock().unwrap();
        let q = &mut state.queues[TX];
        let mut sent = Vec::new();
        while let Some((head, addr, len, flags)) = Self::take_avail(q) {
            assert_eq!(flags & 2, 0, "TX buffers are device-readable");
            // SAFETY: the buffer the driver queued (a pool slot), `len` bytes long.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) };
            sent.push((addr, bytes.to_vec()));
            Self::push_used(q, head, 0);
        }
        sent
    }
}

/// The transport the driver owns; everything goes to the shared [`FakeDevice`].
struct FakeTransport {
    device: FakeDevice,
    features: u64,
    config: [u8; 12],
}

impl Transport for FakeTransport {
    fn device_type(&self) -> DeviceType {
        DeviceType::Network
    }
    fn read_device_features(&mut self) -> u64 {
        self.features
    }
    fn write_driver_features(&mut self, _driver_features: u64) {}
    fn max_queue_size(&mut self, _queue: u16) -> u32 {
        Q as u32
    }
    fn notify(&mut self, queue: u16) {
        self.device.0.lock().unwrap().notified[usize::from(queue)] += 1;
    }
    fn get_status(&self) -> DeviceStatus {
        DeviceStatus::from_bits_retain(self.device.0.lock().unwrap().status)
    }
    fn set_status(&mut self, status: DeviceStatus) {
        self.device.0.lock().unwrap().status = status.bits();
    }
    fn set_guest_page_size(&mut self, _guest_page_size: u32) {}
    fn requires_legacy_layout(&self) -> bool {
        false
    }
    fn queue_set(
        &mut self,
        queue: u16,
        _size: u32,
        descriptors: PhysAddr,
        driver_area: PhysAddr,
        device_area: PhysAddr,
    ) {
        let mut state = self.device.0.lock().unwrap();
        state.queues[usize::from(queue)] = FakeQueue {
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
        let bytes = self
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

fn transport(device: &FakeDevice, features: u64) -> FakeTransport {
    let mut config = [0u8; 12];
    config[..6].copy_from_slice(&MAC);
    config[6] = 1; // status: link up
    FakeTransport {
        device: device.clone(),
        features,
        config,
    }
}

fn raw<H: Hal>(device: &FakeDevice) -> VirtIONetRaw<H, FakeTransport, Q> {
    VirtIONetRaw::new(transport(device, FEATURES)).expect("driver init")
}

fn setup(slots: usize) -> (Net, FakeDevice, &'static FramePool, &'static VirtioIrq) {
    let device = FakeDevice::default();
    let pool = FramePool::leak(PoolConfig::new(slots)).unwrap();
    let irq: &'static VirtioIrq = Box::leak(Box::new(VirtioIrq::new()));
    let net = VirtioNet::new(raw(&device), pool, irq).expect("driver over the pool");
    (net, device, pool, irq)
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

    // Frames returned by the app (on any thread) refill the ring on the next poll.
    held.truncate(10);
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(irq.stats().rx_posted, 10, "every returned slot is posted");
    drop(held);
    assert!(net.poll_receive(&mut cx).is_pending());
    assert_eq!(irq.stats().rx_posted, Q as u64);
    assert!(device.receive(&frame(60, 9), None));
    assert!(net.poll_receive(&mut cx).is_ready());
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
    assert_eq!(net.hardware_address(), HardwareAddress::Ethernet(MAC));

    let Poll::Ready(mut tx) = net.poll_transmit_frame(&mut cx) else {
        panic!("a frame while the queue is empty");
    };
    let payload = frame(1514, 3);
    tx.append(payload.len()).unwrap().copy_from_slice(&payload);
    net.transmit(tx).unwrap();

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
fn a_full_tx_queue_is_back_pressure_until_the_tx_interrupt() {
    let (mut net, device, pool, irq) = setup(64);
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    for i in 0..Q {
        let Poll::Ready(mut tx) = net.poll_transmit_frame(&mut cx) else {
            panic!("frame {i} fits the queue");
        };
        tx.append(60).unwrap().fill(i as u8);
        net.transmit(tx).unwrap();
    }
    assert_eq!(irq.stats().tx_in_flight, Q as u64);
    assert!(net.poll_transmit_frame(&mut cx).is_pending(), "queue full");
    assert_eq!(wakes(&count), 0);

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
    irq.handle_tx_interrupt();
    assert_eq!(
        wakes(&count),
        1,
        "the TX interrupt wakes the waiting sender"
    );
    assert!(net.poll_transmit_frame(&mut cx).is_ready());
    assert_eq!(irq.stats().tx_in_flight, 0);
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
    // The device finishes: its TX interrupt must wake the sender, which waits for slots the
    // device held (not for queue room).
    assert_eq!(device.transmit_all().len(), 2);
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
fn a_copying_hal_and_unfit_pools_are_refused() {
    let device = FakeDevice::default;
    let irq: &'static VirtioIrq = Box::leak(Box::new(VirtioIrq::new()));
    let pool = FramePool::leak(PoolConfig::new(8)).unwrap();
    let err = VirtioNet::new(raw::<BounceHal>(&device()), pool, irq).unwrap_err();
    assert!(
        matches!(err, VirtioError::DmaAddressMismatch { .. }),
        "{err:?}"
    );

    let small_headroom = FramePool::leak(PoolConfig::new(8).with_headroom(8)).unwrap();
    let err = VirtioNet::new(raw::<IdentityHal>(&device()), small_headroom, irq).unwrap_err();
    assert_eq!(
        err,
        VirtioError::HeadroomTooSmall {
            headroom: 8,
            needed: HDR
        }
    );

    let small_slots = FramePool::leak(PoolConfig::new(8).with_slot_size(1024)).unwrap();
    let err = VirtioNet::new(raw::<IdentityHal>(&device()), small_slots, irq).unwrap_err();
    assert!(matches!(err, VirtioError::SlotTooSmall { .. }), "{err:?}");
    println!("{err}");
}

#[test]
fn dropping_the_driver_leaves_device_owned_slots_out_of_the_pool() {
    let (mut net, _device, pool, _irq) = setup(64);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(net.poll_receive(&mut cx).is_pending());
    let Poll::Ready(mut tx) = net.poll_transmit_frame(&mut cx) else {
        panic!("frame");
    };
    tx.append(60).unwrap();
    net.transmit(tx).unwrap();
    drop(net);
    let occupancy = pool.audit().unwrap();
    assert_eq!(occupancy.get(SlotState::Posted), Q);
    assert_eq!(occupancy.get(SlotState::Device), 1);
}

type SharedNet = VirtioNet<IdentityHal, SharedTransport<FakeTransport>, Q>;

/// A driver over a [`SharedTransport`] with link status watched, and the transport's cell (whose
/// `config[6]` is the device's `status` field).
fn setup_shared(
    features: u64,
) -> (
    SharedNet,
    &'static spin::Mutex<FakeTransport>,
    &'static VirtioIrq,
) {
    let device = FakeDevice::default();
    let pool = FramePool::leak(PoolConfig::new(32)).unwrap();
    let irq: &'static VirtioIrq = Box::leak(Box::new(VirtioIrq::new()));
    let cell: &'static spin::Mutex<FakeTransport> =
        Box::leak(Box::new(spin::Mutex::new(transport(&device, features))));
    let shared = SharedTransport::new(cell);
    let raw = VirtIONetRaw::new(shared).expect("driver init");
    let net = VirtioNet::new(raw, pool, irq)
        .expect("driver over the pool")
        .with_link_status(shared);
    (net, cell, irq)
}

#[test]
fn link_state_follows_the_device_status_and_its_interrupt_wakes_the_watcher() {
    let (mut net, cell, irq) = setup_shared(FEATURES | F_STATUS);
    let (count, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert_eq!(net.poll_link_state(&mut cx), LinkState::Up);
    assert_eq!(wakes(&count), 0);

    // The device drops its link and raises the configuration interrupt.
    cell.lock().config[6] = 0;
    irq.handle_config_interrupt();
    assert_eq!(
        wakes(&count),
        1,
        "the configuration interrupt wakes the registered task"
    );
    assert_eq!(net.poll_link_state(&mut cx), LinkState::Down);

    cell.lock().config[6] = 1;
    irq.handle_config_interrupt();
    assert_eq!(wakes(&count), 2);
    assert_eq!(net.poll_link_state(&mut cx), LinkState::Up);
    assert_eq!(irq.stats().config_interrupts, 2);

    // Frames still flow through the shared transport.
    let Poll::Ready(frame) = net.poll_transmit_frame(&mut cx) else {
        panic!("a TX frame from the pool");
    };
    drop(frame);
}

#[test]
fn a_device_without_the_status_feature_reads_as_up() {
    let (mut net, cell, _irq) = setup_shared(FEATURES);
    cell.lock().config[6] = 0; // not a valid field without VIRTIO_NET_F_STATUS
    let (_count, w) = waker();
    assert_eq!(
        net.poll_link_state(&mut Context::from_waker(&w)),
        LinkState::Up
    );
}

#[test]
fn without_a_shared_transport_the_link_is_always_up() {
    let (mut net, _device, _pool, irq) = setup(32);
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
