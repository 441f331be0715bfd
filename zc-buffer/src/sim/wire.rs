//! An in-memory wire: two [`Driver`]s linked back to back, so two stacks can talk inside one
//! process, with seeded fault injection (loss, reorder, duplication, corruption, delay, MTU).
//!
//! [`wire_pair`] gives the two ends ([`WireEnd`]); hand each to a stack as its driver, keep a
//! [`WireHandle`] ([`WireEnd::handle`]) to read the counters ([`WireStats`]), cut the cable or
//! inject frames while the stacks own the ends. [`Faults`] says what goes wrong on the way,
//! from a seed, so a failing run repeats.
//!
//! A transmitted frame stays in its sender's pool slot (state DEVICE, like a frame on a real
//! NIC's TX ring) while it is on the wire. When the other end receives it, its bytes are written
//! into a slot of the *receiver's* pool — that write plays the receiving NIC's DMA, so it is not
//! recorded in the copy ledger (zcnet's own copies are) — and only then does the sender's slot
//! return to its pool, as after a completed transmission. So a frame crosses the wire with
//! exactly one copy and no heap allocation, and a sender that outruns its receiver runs out of
//! TX frames, as it would against a real ring. (A duplicated frame's second copy is the one
//! exception: it is kept on the heap.)
//!
//! Each end may offer its stack offloads ([`WireEnd::with_offloads`], [`WireOffloads`]), done
//! as a NIC would: partial checksums completed before a frame leaves, received checksums
//! verified and marked, a TCP super-segment cut into MSS-sized frames ([`GsoMode::Segment`],
//! each frame then meets the faults on its own) or carried whole as a chain
//! ([`GsoMode::Whole`], as a virtio host hands a GSO packet to its guest). A segmented
//! super-segment's frames are written to the heap by the sending end, which frees its slots at
//! once.
//!
//! [`Delivery::Lend`] (made by [`wire_pair_with`]) is the loopback variant: the receiver gets
//! the sender's slot itself ([`InFlight::loop_back`]), so a frame crosses with no copy at all,
//! as smoltcp's `Loopback` device hands over its buffer. Benchmarks that set zcnet beside
//! smoltcp's loopback use it; a corrupted or duplicated frame, and a retained one (a TCP
//! socket keeps its slot until acknowledged), still take the copying path.
//!
//! The wire knows no executor. A [`Faults::delay`] needs a clock and a timer at each end:
//! pass a [`WireTimer`] per end to [`wire_pair_with`] (the `zcnet-tests` crate has one over
//! `zcnet-executor`'s timers). Without a delay no timer is needed, and a frame is due as soon
//! as it is sent.
//!
//! ```
//! use std::task::{Context, Poll, Waker};
//! use zcnet_buffer::sim::{wire_pair, Faults};
//! use zcnet_buffer::{Driver, FramePool, PoolConfig};
//!
//! let pools = [
//!     FramePool::leak(PoolConfig::new(8)).unwrap(),
//!     FramePool::leak(PoolConfig::new(8)).unwrap(),
//! ];
//! let (mut a, mut b) = wire_pair(pools, Faults::default());
//! let mut cx = Context::from_waker(Waker::noop());
//!
//! // End A transmits a frame written in place in one of its pool's slots...
//! let Poll::Ready(mut frame) = a.poll_transmit_frame(&mut cx) else { unreachable!() };
//! frame.append(60).unwrap().fill(0xab);
//! a.transmit(frame).unwrap();
//! // ...and end B receives it in a slot of its own pool.
//! let Poll::Ready(got) = b.poll_receive(&mut cx) else { unreachable!() };
//! assert_eq!(&got[..], &[0xab; 60][..]);
//! assert_eq!(a.handle().tx_stats().delivered, 1);
//! ```

use std::boxed::Box;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::vec::Vec;

use core::cell::{RefCell, RefMut};
use core::ops::{Deref, DerefMut};
use core::task::{Context, Poll, Waker};
use core::time::Duration;
use spin::mutex::{SpinMutex as Mutex, SpinMutexGuard};

use super::offload;
use crate::{
    Capabilities, ChecksumOffloads, Driver, FramePool, GsoInfo, GsoKinds, HardwareAddress,
    InFlight, InFlightChain, LinkState, Medium, PostedSlot, RxChain, RxFrame, RxPacket, TxChain,
    TxError, TxFrame, MAX_CHAIN_SEGMENTS,
};

/// Time as a wire sees it: [`WireTimer::now`], from the timer's own origin.
type Instant = Duration;
/// "Due at once": a frame sent without a delay (no clock read on the fast path).
const AT_ONCE: Instant = Duration::ZERO;

/// The clock and one-shot timer one end of a wire uses for [`Faults::delay`].
///
/// The wire depends on no executor; whoever builds a delayed wire supplies one timer per end
/// (over their executor's timers, or a simulated clock). The sending end reads
/// [`now`](Self::now) to stamp a delayed frame with its due time; the receiving end, when the
/// first frame on the wire is not due yet, polls [`poll_until`](Self::poll_until) with that
/// due time and tries again when it is woken. Both ends of a wire must read the same clock.
pub trait WireTimer: Send {
    /// The current time, as a duration since an origin of the clock's choosing (the same for
    /// both ends of a wire).
    fn now(&self) -> Duration;

    /// `Ready` once `deadline` (a time as [`now`](Self::now) returns it) has passed; otherwise
    /// `Pending`, with `cx`'s waker woken when it passes. The end calls it again with the same
    /// deadline until it is `Ready`, and with another deadline when the first frame on the
    /// wire changes; only the latest deadline needs to be kept.
    fn poll_until(&mut self, deadline: Duration, cx: &mut Context<'_>) -> Poll<()>;
}

/// Faults applied to every frame crossing the wire, each with its own probability (0.0 ..= 1.0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Faults {
    /// Seed of the wire's random number generator (each direction derives its own).
    pub seed: u64,
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame is delivered after the one behind it.
    pub reorder: f64,
    /// Probability that a frame is delivered twice.
    pub duplicate: f64,
    /// Probability that one byte of a frame is flipped.
    pub corrupt: f64,
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Largest frame the wire carries (link header included); longer frames are dropped.
    pub mtu: usize,
    /// Frames in flight per direction before the wire tail-drops.
    pub capacity: usize,
}

impl Default for Faults {
    /// A perfect wire: no faults, no delay, 1514-byte frames, 1024 frames in flight.
    fn default() -> Self {
        Self {
            seed: 1,
            loss: 0.0,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            delay: Duration::ZERO,
            mtu: 1514,
            capacity: 1024,
        }
    }
}

/// How a frame gets from the sender's slot to the receiver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Delivery {
    /// The receiving NIC's DMA: the bytes are written into a slot of the receiver's pool (one
    /// copy, not in the copy ledger), and the sender's slot completes.
    #[default]
    Copy,
    /// A loopback: the sender's slot itself becomes the receiver's [`RxFrame`]
    /// ([`InFlight::loop_back`]); no copy. The slot returns to the sender's pool when the
    /// receiver drops the frame.
    Lend,
}

/// What a [`WireEnd`] does with a TCP super-segment its stack marked for segmentation
/// ([`GsoRequest`](crate::GsoRequest)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GsoMode {
    /// The sending end cuts it into MSS-sized frames, as a TSO NIC does (IP lengths and IDs,
    /// sequence numbers, FIN/PSH on the last, checksums); each frame crosses the wire, and
    /// meets the faults, on its own.
    #[default]
    Segment,
    /// It crosses whole, as one packet (faults apply to it as a whole), and arrives as a chain
    /// with a [`GsoInfo`] mark and, as from a virtio host, its checksum still partial and
    /// marked verified: the receiving end must take chains ([`WireOffloads::rx_chains`]), or
    /// it drops the packet, counted as `too_long`.
    Whole,
}

/// The offloads one [`WireEnd`] offers its stack ([`WireEnd::with_offloads`]). The default is
/// none: the end behaves exactly as a plain wire end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WireOffloads {
    /// Transmit: the end completes partial TCP and UDP checksums
    /// ([`TxFrame::set_checksum_partial`]) before the frame leaves, as a NIC does, so the other
    /// end sees correct checksums; it advertises [`ChecksumOffloads::TCP_TX`] and `UDP_TX`.
    pub tx_checksum: bool,
    /// Receive: the end checks the IPv4 header and TCP/UDP checksums of each received frame
    /// and marks the frames that pass as [verified](RxFrame::checksum_verified); a packet that
    /// crossed whole with a partial checksum ([`GsoMode::Whole`]) is marked verified unless the
    /// wire corrupted it.
    pub rx_checksum: bool,
    /// Transmit: the largest super-segment taken (IP packet bytes; 0: no segmentation
    /// offload). Advertised as [`Capabilities::gso_max_size`] for TCP over IPv4 and IPv6.
    pub gso_max_size: usize,
    /// What happens to a super-segment on the wire.
    pub gso_mode: GsoMode,
    /// Receive: packets larger than a slot arrive as chains
    /// ([`Driver::poll_receive_chain`]); advertised as [`Capabilities::rx_chains`].
    pub rx_chains: bool,
}

/// What one direction of the wire did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Frames handed to the wire.
    pub sent: u64,
    /// Frames delivered to the receiver's pool.
    pub delivered: u64,
    /// Frames lost on purpose.
    pub lost: u64,
    /// Frames delivered out of order on purpose.
    pub reordered: u64,
    /// Extra copies delivered on purpose.
    pub duplicated: u64,
    /// Frames with a flipped byte.
    pub corrupted: u64,
    /// Frames over the MTU, dropped.
    pub too_long: u64,
    /// Frames dropped because the wire was full.
    pub overflow: u64,
    /// Super-segments the sending end cut into frames ([`GsoMode::Segment`]); each frame is
    /// counted in `sent`, `delivered` and the faults as well.
    pub segmented: u64,
    /// Partial checksums the sending end completed ([`WireOffloads::tx_checksum`]).
    pub checksums_completed: u64,
}

/// xorshift64*: seeded, reproducible.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// What a queued frame's bytes are.
#[derive(Debug)]
enum Payload {
    /// The sender's slot itself, released when the frame is delivered (or dropped).
    Slot(InFlight),
    /// The sender's slots, a packet crossing whole, released when it is delivered (boxed: the
    /// queue's entries stay small).
    Chain(Box<InFlightChain>),
    /// A duplicate's own copy, an injected frame, a segment of a super-segment.
    Heap(Vec<u8>),
}

impl Payload {
    /// The bytes of a packet in one part (a slot or a heap copy); `None` for a chain.
    fn single(&self) -> Option<&[u8]> {
        match self {
            Payload::Slot(f) => Some(&f[..]),
            Payload::Heap(v) => Some(&v[..]),
            Payload::Chain(_) => None,
        }
    }

    /// Bytes in the packet.
    fn len(&self) -> usize {
        match self {
            Payload::Slot(f) => f.len(),
            Payload::Chain(c) => c.len(),
            Payload::Heap(v) => v.len(),
        }
    }

    /// Sender slots the payload holds (what counts against the sender's ring).
    fn slots(&self) -> usize {
        match self {
            Payload::Slot(_) => 1,
            Payload::Chain(c) => c.frame_count(),
            Payload::Heap(_) => 0,
        }
    }

    /// The bytes as one slice per part, in order.
    fn parts(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let (one, chain): (Option<&[u8]>, Option<&InFlightChain>) = match self {
            Payload::Slot(f) => (Some(&f[..]), None),
            Payload::Heap(v) => (Some(&v[..]), None),
            Payload::Chain(c) => (None, Some(c)),
        };
        one.into_iter()
            .chain(chain.into_iter().flat_map(|c| c.iter()))
    }

    /// A copy of the bytes on the heap.
    fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        for p in self.parts() {
            v.extend_from_slice(p);
        }
        v
    }
}

/// A frame on the wire.
#[derive(Debug)]
struct Queued {
    /// When it may be delivered.
    at: Instant,
    payload: Payload,
    /// A byte to flip on delivery: (index, bit mask).
    corrupt: Option<(usize, u8)>,
    /// How a packet crossing whole was merged ([`GsoMode::Whole`]).
    gso: Option<GsoInfo>,
    /// Its checksum is partial (crossing whole): the receiver marks it verified unless
    /// corrupted.
    partial: bool,
}

impl Queued {
    fn new(at: Instant, payload: Payload) -> Self {
        Self {
            at,
            payload,
            corrupt: None,
            gso: None,
            partial: false,
        }
    }
}

#[derive(Debug)]
struct Direction {
    faults: Faults,
    rng: Rng,
    queue: VecDeque<Queued>,
    /// Sender slots held by queued frames, and the most there may be: the sender's "TX ring".
    /// Half the sender's pool, so that each end always keeps slots to receive into (two ends
    /// whose pools were all on the wire towards each other could never receive again).
    slots_in_flight: usize,
    ring: usize,
    /// The sender's waker while its ring is full; woken when a frame is delivered.
    tx_waker: Option<Waker>,
    rx_waker: Option<Waker>,
    stats: WireStats,
    /// Everything sent this way is lost (a pulled cable), counted as `lost`.
    cut: bool,
    /// No fault can apply (all probabilities zero, no delay): `transmit` queues the frame
    /// without consulting the random number generator (a benchmark's fast path).
    perfect: bool,
}

/// Where the two directions live, and what guards them.
enum Dirs {
    /// Either end may run on any thread: a spin lock per direction (a compare-exchange to take
    /// it, a store to give it back).
    Locked([Mutex<Direction>; 2]),
    /// Both ends run on the thread that made the pair, `owner` (`crate::thread::current`): plain
    /// cells, borrow-checked, reached only after checking the calling thread.
    OneThread {
        owner: u64,
        dirs: [RefCell<Direction>; 2],
    },
}

/// One direction, held: the spin lock's guard or the cell's borrow.
enum DirGuard<'a> {
    Locked(SpinMutexGuard<'a, Direction>),
    OneThread(RefMut<'a, Direction>),
}

impl Deref for DirGuard<'_> {
    type Target = Direction;

    fn deref(&self) -> &Direction {
        match self {
            DirGuard::Locked(g) => g,
            DirGuard::OneThread(g) => g,
        }
    }
}

impl DerefMut for DirGuard<'_> {
    fn deref_mut(&mut self) -> &mut Direction {
        match self {
            DirGuard::Locked(g) => g,
            DirGuard::OneThread(g) => g,
        }
    }
}

struct Shared {
    /// `dirs[0]`: from end 0 to end 1; `dirs[1]`: from end 1 to end 0.
    dirs: Dirs,
    /// `slots_in_flight` of each direction, mirrored here (written under the direction's lock)
    /// so that the sender's check for ring space takes no lock while there is space.
    in_flight: [AtomicUsize; 2],
    delivery: Delivery,
}

// SAFETY: a one-thread wire's cells (`Dirs::OneThread`) are reached only through
// `Shared::try_dir`, which hands them out on the thread that made the pair and on no other, so
// they are never touched from two threads; their contents (`Direction`: wakers, frames in pool
// slots, plain data) are `Send`, so dropping them with the last reference, wherever that is,
// is sound. Everything else in `Shared` is a spin lock or an atomic.
unsafe impl Sync for Shared {}
// SAFETY: as above.
unsafe impl Send for Shared {}

impl Shared {
    /// Direction `i`, held; `None` on a one-thread wire called from another thread.
    fn try_dir(&self, i: usize) -> Option<DirGuard<'_>> {
        match &self.dirs {
            Dirs::Locked(dirs) => Some(DirGuard::Locked(dirs[i].lock())),
            Dirs::OneThread { owner, dirs } => (crate::thread::current() == Some(*owner))
                .then(|| DirGuard::OneThread(dirs[i].borrow_mut())),
        }
    }

    /// Direction `i`, held.
    ///
    /// # Panics
    ///
    /// On a one-thread wire ([`wire_pair_one_thread`]), if called from a thread other than the
    /// one that made the pair.
    fn dir(&self, i: usize) -> DirGuard<'_> {
        match self.try_dir(i) {
            Some(d) => d,
            None => panic!(
                "zcnet-buffer: a one-thread wire was used from a thread other than the one \
                 that made it (wire_pair_one_thread)"
            ),
        }
    }
}

/// One end of the wire: a [`Driver`] over its own pool, made by [`wire_pair`].
///
/// Ethernet, MTU `faults.mtu` less the 14-byte Ethernet header, no TX headroom, link always
/// up; no offloads unless [`with_offloads`](WireEnd::with_offloads) asks for some
/// ([`WireOffloads`]: checksum completion and verification, segmentation or whole
/// super-segments, chains on receive). Its TX side may keep half its pool's slots on the wire at once
/// (its "TX ring"); further `poll_transmit_frame` calls are `Pending` until the other end
/// receives some. Its RX side takes a slot from its pool for each frame it receives.
pub struct WireEnd {
    side: usize,
    shared: Arc<Shared>,
    pool: &'static FramePool,
    mac: [u8; 6],
    /// The clock for delays, and the timer that wakes this end when the next delayed frame
    /// becomes due; `None` on a wire without delay.
    timer: Option<Box<dyn WireTimer>>,
    /// The ring size of the direction leaving this end (`Direction::ring`, fixed).
    ring: usize,
    /// The offloads this end offers ([`WireEnd::with_offloads`]).
    offloads: WireOffloads,
    /// Receive buffers taken for a packet larger than one slot while the pool ran short; kept
    /// for the next try (at most [`MAX_CHAIN_SEGMENTS`]).
    rx_spare: Vec<PostedSlot>,
}

impl core::fmt::Debug for WireEnd {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WireEnd").field("side", &self.side).finish()
    }
}

/// Two linked ends. End `i` uses `pools[i]` and MAC `02:00:00:00:00:0i+1`. Frames cross by
/// [`Delivery::Copy`].
///
/// # Panics
///
/// If `faults.delay` is not zero: a delay needs a [`WireTimer`] per end ([`wire_pair_with`]).
pub fn wire_pair(pools: [&'static FramePool; 2], faults: Faults) -> (WireEnd, WireEnd) {
    wire_pair_with(pools, faults, Delivery::Copy, None)
}

/// [`wire_pair`] with the frames crossing by `delivery`, and with `timers` (end 0's, end 1's)
/// for a [`Faults::delay`]. Without a delay `timers` may be `None`; given anyway, they are
/// only consulted if a frame is delayed, which then never happens.
///
/// # Panics
///
/// If `faults.delay` is not zero and `timers` is `None`.
pub fn wire_pair_with(
    pools: [&'static FramePool; 2],
    faults: Faults,
    delivery: Delivery,
    timers: Option<[Box<dyn WireTimer>; 2]>,
) -> (WireEnd, WireEnd) {
    make_pair(pools, faults, delivery, timers, false)
}

/// [`wire_pair_with`] for two ends that both run on the calling thread (two stacks on one
/// executor, as zcnet's stack benchmark runs them): each direction's state sits in a plain
/// cell instead of behind a spin lock, so a frame crosses with no locked instruction, as
/// smoltcp's `Loopback` and embassy-net's in-memory links (`RefCell`s) carry theirs.
///
/// The ends are still `Send` (a stack takes a `Send` driver), but every use of them, of their
/// [`WireHandle`]s and of their drop checks the calling thread (a thread-local read) and
/// panics on any other thread than the one that made the pair; an end dropped on another
/// thread leaves its frames to be released when the other end goes.
///
/// # Panics
///
/// As [`wire_pair_with`].
pub fn wire_pair_one_thread(
    pools: [&'static FramePool; 2],
    faults: Faults,
    delivery: Delivery,
    timers: Option<[Box<dyn WireTimer>; 2]>,
) -> (WireEnd, WireEnd) {
    make_pair(pools, faults, delivery, timers, true)
}

fn make_pair(
    pools: [&'static FramePool; 2],
    faults: Faults,
    delivery: Delivery,
    timers: Option<[Box<dyn WireTimer>; 2]>,
    one_thread: bool,
) -> (WireEnd, WireEnd) {
    assert!(
        faults.delay.is_zero() || timers.is_some(),
        "a wire with Faults::delay needs a WireTimer per end (wire_pair_with)"
    );
    let dir = |k: u64, sender: &FramePool| Direction {
        slots_in_flight: 0,
        ring: (sender.slot_count() / 2).max(1),
        tx_waker: None,
        faults,
        rng: Rng(faults
            .seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(k)
            | 1),
        queue: VecDeque::new(),
        rx_waker: None,
        stats: WireStats::default(),
        cut: false,
        perfect: faults.loss == 0.0
            && faults.reorder == 0.0
            && faults.duplicate == 0.0
            && faults.corrupt == 0.0
            && faults.delay.is_zero(),
    };
    let [d0, d1] = [dir(1, pools[0]), dir(2, pools[1])];
    let dirs = if one_thread {
        Dirs::OneThread {
            owner: crate::thread::current().expect("sim implies std"),
            dirs: [RefCell::new(d0), RefCell::new(d1)],
        }
    } else {
        Dirs::Locked([Mutex::new(d0), Mutex::new(d1)])
    };
    let shared = Arc::new(Shared {
        dirs,
        in_flight: [AtomicUsize::new(0), AtomicUsize::new(0)],
        delivery,
    });
    let [t0, t1] = match timers {
        Some([t0, t1]) => [Some(t0), Some(t1)],
        None => [None, None],
    };
    let end = |side: usize, timer: Option<Box<dyn WireTimer>>| WireEnd {
        side,
        shared: shared.clone(),
        pool: pools[side],
        mac: [0x02, 0, 0, 0, 0, side as u8 + 1],
        timer,
        ring: (pools[side].slot_count() / 2).max(1),
        offloads: WireOffloads::default(),
        rx_spare: Vec::new(),
    };
    (end(0, t0), end(1, t1))
}

impl WireEnd {
    /// The same end offering `offloads` to its stack (set it before handing the end to a
    /// stack: a driver's capabilities do not change afterwards).
    pub fn with_offloads(mut self, offloads: WireOffloads) -> Self {
        self.offloads = offloads;
        self
    }

    /// The offloads this end offers.
    pub fn offloads(&self) -> WireOffloads {
        self.offloads
    }

    /// A handle to this end's counters and switches, usable while the end itself is owned
    /// (as a `&'static mut` driver) by a stack.
    pub fn handle(&self) -> WireHandle {
        WireHandle {
            side: self.side,
            shared: self.shared.clone(),
            mac: self.mac,
        }
    }
}

/// Shared access to one end of the wire ([`WireEnd::handle`]): its counters, the cut switch and
/// frame injection. Everything it touches sits behind the wire's own locks (on a one-thread
/// wire, [`wire_pair_one_thread`], in cells that only the pair's thread may reach).
#[derive(Clone)]
pub struct WireHandle {
    side: usize,
    shared: Arc<Shared>,
    mac: [u8; 6],
}

impl core::fmt::Debug for WireHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WireHandle")
            .field("side", &self.side)
            .finish()
    }
}

impl WireHandle {
    /// What the direction leaving this end did.
    pub fn tx_stats(&self) -> WireStats {
        self.shared.dir(self.side).stats
    }

    /// Cuts (`true`) or restores the direction leaving this end: while cut, every frame sent
    /// from here is lost.
    pub fn set_cut(&self, cut: bool) {
        self.shared.dir(self.side).cut = cut;
    }

    /// The MAC address of this end.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Puts `frame` on the wire as if this end had transmitted it, bypassing this end's stack
    /// (for frames the stack cannot build, e.g. a router advertisement). It arrives at the
    /// other end now, unaffected by faults, and is counted as sent and delivered normally.
    pub fn inject(&self, frame: &[u8]) {
        let mut dir = self.shared.dir(self.side);
        dir.stats.sent += 1;
        dir.queue
            .push_back(Queued::new(AT_ONCE, Payload::Heap(frame.to_vec())));
        if let Some(w) = &dir.rx_waker {
            w.wake_by_ref();
        }
    }
}

/// Stores the caller's waker unless the stored one already wakes the same task (no clone).
fn set_waker(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

impl WireEnd {
    /// Sender slots join the queue of the direction leaving this end (`d`, locked): counted
    /// against the ring, and the count mirrored for the lock-free ring check.
    fn count_in_flight(&self, d: &mut Direction, slots: usize) {
        if slots == 0 {
            return;
        }
        d.slots_in_flight += slots;
        self.shared.in_flight[self.side].store(d.slots_in_flight, Relaxed);
    }
}

impl Drop for WireEnd {
    /// The end is unplugged. Frames on their way to it are lost (counted `lost`; their
    /// senders' slots are free again) and so is anything sent to it later. Frames it sent that
    /// are still on the wire arrive all the same, copied out of its slots, which return to its
    /// pool now: a dropped end holds nothing of its pool.
    ///
    /// A one-thread wire's end dropped on another thread than its own touches nothing: its
    /// frames on the wire are released when the other end goes.
    fn drop(&mut self) {
        let waker = {
            let Some(mut dir) = self.shared.try_dir(1 - self.side) else {
                return;
            };
            let d = &mut *dir;
            d.cut = true;
            d.stats.lost += d.queue.len() as u64;
            d.queue.clear();
            d.slots_in_flight = 0;
            self.shared.in_flight[1 - self.side].store(0, Relaxed);
            d.tx_waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        let mut dir = self.shared.dir(self.side);
        for q in dir.queue.iter_mut() {
            if q.payload.slots() > 0 {
                q.payload = Payload::Heap(q.payload.to_vec());
            }
        }
        dir.slots_in_flight = 0;
        self.shared.in_flight[self.side].store(0, Relaxed);
    }
}

/// A delivered packet: one frame (no chain set up: a chain is a kilobyte and a half of leases,
/// boxed here so that a one-frame packet moves as a frame), or a chain of several.
enum Packet {
    /// A packet in one slot.
    One(RxFrame),
    /// A packet over several slots.
    Many(Box<RxChain>),
}

impl Packet {
    /// Adds `frame` after the packet's frames (`false`: the chain is full).
    fn push(self, frame: RxFrame) -> Result<Packet, Packet> {
        let mut chain = match self {
            Packet::One(first) => Box::new(RxChain::from_frame(first)),
            Packet::Many(chain) => chain,
        };
        match chain.push(frame) {
            Ok(()) => Ok(Packet::Many(chain)),
            Err(_) => Err(Packet::Many(chain)),
        }
    }

    /// The packet's first frame, where its marks go.
    fn head_mut(&mut self) -> Option<&mut RxFrame> {
        match self {
            Packet::One(f) => Some(f),
            Packet::Many(c) => c.head_mut(),
        }
    }

    /// The packet as a chain.
    fn into_chain(self) -> RxChain {
        match self {
            Packet::One(f) => RxChain::from_frame(f),
            Packet::Many(c) => *c,
        }
    }
}

impl WireEnd {
    /// The next packet from the other end (several frames only if `chains` and the packet is
    /// larger than a slot). A packet that cannot be delivered (larger than a slot while
    /// `chains` is off, or than a chain holds) is dropped and counted as `too_long`.
    /// The usual delivery, ahead of [`poll_packet`](Self::poll_packet)'s general one: the next
    /// frame is one of the sender's slots, due now, not corrupted, not crossing whole, on an
    /// end that checks no checksums, and copied (not lent: a copying wire, or a slot a TCP
    /// socket keeps): one slot of this end's pool takes a copy, as a NIC's DMA, and the
    /// sender's slot goes back. An empty wire is `Pending` here too (the receiver's waker
    /// registered, as the general path does). `None` for any other frame: the general path
    /// decides.
    #[inline(always)]
    fn poll_plain(&mut self, cx: &mut Context<'_>) -> Option<Poll<RxFrame>> {
        if self.offloads.rx_checksum || !self.rx_spare.is_empty() {
            return None;
        }
        let mut dir = self.shared.dir(1 - self.side);
        // Held once: each access through the guard would ask which kind it is.
        let d = &mut *dir;
        let Some(q) = d.queue.front() else {
            // Nothing on the wire: what the general path would answer.
            set_waker(&mut d.rx_waker, cx);
            return Some(Poll::Pending);
        };
        let Payload::Slot(f) = &q.payload else {
            return None;
        };
        let lent = self.shared.delivery == Delivery::Lend && !f.is_retained();
        if q.at != AT_ONCE
            || q.corrupt.is_some()
            || q.partial
            || q.gso.is_some()
            || lent
            || f.len() > self.pool.slot_size()
        {
            return None;
        }
        let mut slot = match self.pool.poll_alloc_rx(cx) {
            Poll::Ready(s) => s,
            Poll::Pending => return Some(Poll::Pending),
        };
        let Payload::Slot(f) = d.queue.pop_front()?.payload else {
            return None; // not reached: the front was a slot
        };
        d.stats.delivered += 1;
        d.slots_in_flight -= 1;
        self.shared.in_flight[1 - self.side].store(d.slots_in_flight, Relaxed);
        let sender = d.tx_waker.take();
        drop(dir);
        if let Some(w) = sender {
            w.wake();
        }
        let n = f.len();
        slot.buffer_mut()[..n].copy_from_slice(&f[..]); // the receiving NIC's DMA
                                                        // The sender's slot completes here and returns to its pool (or its socket).
        drop(f);
        let Ok(mut frame) = slot.complete(n) else {
            return None; // not reached: n <= the slot's capacity
        };
        frame.set_checksum_verified(false);
        frame.set_gso_info(None);
        Some(Poll::Ready(frame))
    }

    fn poll_packet(&mut self, cx: &mut Context<'_>, chains: bool) -> Poll<Packet> {
        loop {
            let mut dir = self.shared.dir(1 - self.side);
            let (due, lend, len) = match dir.queue.front() {
                None => {
                    set_waker(&mut dir.rx_waker, cx);
                    return Poll::Pending;
                }
                Some(q) => (
                    q.at,
                    self.shared.delivery == Delivery::Lend
                        && q.corrupt.is_none()
                        // A retained frame (a TCP socket keeps it) is copied, never lent.
                        && match &q.payload {
                            Payload::Slot(f) => !f.is_retained(),
                            Payload::Chain(c) => chains && c.frames().all(|f| !f.is_retained()),
                            Payload::Heap(_) => false,
                        },
                    q.payload.len(),
                ),
            };
            // Frames without a delay are queued due at zero: no clock read on the fast path.
            if due > AT_ONCE {
                let timer = self
                    .timer
                    .as_mut()
                    .expect("a delayed frame implies the wire has timers");
                if due > timer.now() {
                    set_waker(&mut dir.rx_waker, cx);
                    drop(dir);
                    if timer.poll_until(due, cx).is_ready() {
                        cx.waker().wake_by_ref();
                    }
                    return Poll::Pending;
                }
            }
            let needed = if lend {
                0
            } else {
                len.div_ceil(self.pool.slot_size()).max(1)
            };
            let deliverable = needed <= 1 || (chains && needed <= MAX_CHAIN_SEGMENTS);
            // The common case, a packet in one part copied into one slot: no spare list, no
            // chain.
            let single = !lend
                && needed == 1
                && self.rx_spare.is_empty()
                && dir
                    .queue
                    .front()
                    .is_some_and(|q| q.payload.single().is_some());
            let mut one_slot = None;
            if single {
                match self.pool.poll_alloc_rx(cx) {
                    Poll::Ready(s) => one_slot = Some(s),
                    Poll::Pending => return Poll::Pending,
                }
            }
            // Copying, the receiving NIC needs buffers; without them the packet waits (the pool
            // wakes us). Lending, the sender's slots are the buffers.
            if deliverable && !single {
                while self.rx_spare.len() < needed {
                    match self.pool.poll_alloc_rx(cx) {
                        Poll::Ready(s) => self.rx_spare.push(s),
                        Poll::Pending => return Poll::Pending,
                    }
                }
            }
            let q = dir.queue.pop_front().expect("front exists");
            if deliverable {
                dir.stats.delivered += 1;
            } else {
                dir.stats.too_long += 1;
            }
            let mut sender = None;
            let held = q.payload.slots();
            if held > 0 {
                dir.slots_in_flight -= held;
                self.shared.in_flight[1 - self.side].store(dir.slots_in_flight, Relaxed);
                sender = dir.tx_waker.take();
            }
            drop(dir);
            if let Some(w) = sender {
                w.wake();
            }
            if !deliverable {
                continue; // `q` drops: the sender's slots are free again
            }
            let corrupted = q.corrupt.is_some();
            let mut packet = if let Some(mut slot) = one_slot {
                let bytes = q.payload.single().unwrap_or(&[]);
                let n = bytes.len().min(slot.capacity());
                let buf = &mut slot.buffer_mut()[..n];
                buf.copy_from_slice(&bytes[..n]); // the receiving NIC's DMA
                if let Some((i, mask)) = q.corrupt {
                    if let Some(b) = buf.get_mut(i) {
                        *b ^= mask;
                    }
                }
                // The sender's slot (if the payload is one) completes here and returns to its
                // pool.
                drop(q.payload);
                match slot.complete(n) {
                    Ok(f) => Packet::One(f),
                    Err(_) => unreachable!("n <= capacity"),
                }
            } else if lend {
                match q.payload {
                    Payload::Slot(frame) => match frame.loop_back() {
                        Ok(rx) => Packet::One(rx),
                        Err(_) => unreachable!("retained frames are not lent"),
                    },
                    Payload::Chain(c) => match (*c).loop_back() {
                        Ok(rx) => Packet::Many(Box::new(rx)),
                        Err(_) => unreachable!("retained frames are not lent"),
                    },
                    Payload::Heap(_) => unreachable!("only slots are lent"),
                }
            } else {
                let mut packet: Option<Packet> = None;
                let mut at = 0; // bytes of the packet copied so far
                let mut parts = q.payload.parts();
                let mut part: &[u8] = &[];
                for mut slot in self.rx_spare.drain(..needed) {
                    let cap = slot.capacity();
                    let buf = slot.buffer_mut();
                    let mut n = 0;
                    while n < cap && at + n < len {
                        if part.is_empty() {
                            part = parts.next().unwrap_or(&[]);
                            if part.is_empty() {
                                break;
                            }
                        }
                        let k = part.len().min(cap - n);
                        buf[n..n + k].copy_from_slice(&part[..k]); // the receiving NIC's DMA
                        part = &part[k..];
                        n += k;
                    }
                    if let Some((i, mask)) = q.corrupt {
                        if (at..at + n).contains(&i) {
                            buf[i - at] ^= mask;
                        }
                    }
                    at += n;
                    let Ok(f) = slot.complete(n) else {
                        unreachable!("n <= capacity")
                    };
                    packet = Some(match packet {
                        None => Packet::One(f),
                        Some(p) => match p.push(f) {
                            Ok(p) => p,
                            Err(_) => unreachable!("needed <= MAX_CHAIN_SEGMENTS"),
                        },
                    });
                }
                drop(parts);
                // The sender's slots (if the payload holds any) complete here and return to
                // their pool.
                drop(q.payload);
                match packet {
                    Some(p) => p,
                    None => unreachable!("needed >= 1"),
                }
            };
            let verified = if q.partial {
                !corrupted
            } else if self.offloads.rx_checksum {
                match &packet {
                    Packet::One(f) => offload::l4_checksum_ok(f),
                    Packet::Many(chain) => {
                        let mut bytes = std::vec![0u8; chain.len()];
                        chain.copy_to(&mut bytes, crate::CopySite::Driver);
                        offload::l4_checksum_ok(&bytes)
                    }
                }
            } else {
                false
            };
            if let Some(head) = packet.head_mut() {
                head.set_checksum_verified(verified);
                head.set_gso_info(q.gso);
            }
            return Poll::Ready(packet);
        }
    }

    /// Puts one packet on the wire (its length checked against the MTU, or the GSO size for a
    /// packet crossing whole), through the faults.
    #[inline(always)]
    fn send(
        &mut self,
        payload: Payload,
        gso: Option<GsoInfo>,
        partial: bool,
    ) -> Result<(), TxError> {
        let mut dir = self.shared.dir(self.side);
        let d = &mut *dir;
        d.stats.sent += 1;
        let max = match gso {
            Some(_) => self.offloads.gso_max_size + crate::ETHERNET_HEADER_LEN,
            None => d.faults.mtu,
        };
        if payload.len() > max {
            d.stats.too_long += 1;
            return Err(TxError::TooLong {
                len: payload.len(),
                max,
            });
        }
        let queued = |at, payload| Queued {
            gso,
            partial,
            ..Queued::new(at, payload)
        };
        if d.perfect && !d.cut {
            // Nothing to draw: the frame joins the queue as it is, due at once.
            if d.queue.len() >= d.faults.capacity {
                d.stats.overflow += 1;
                return Ok(()); // tail-dropped: "transmitted", its slot is free again
            }
            self.count_in_flight(d, payload.slots());
            d.queue.push_back(queued(AT_ONCE, payload));
            if let Some(w) = &d.rx_waker {
                w.wake_by_ref();
            }
            return Ok(());
        }
        self.send_faulty(d, payload, gso, partial);
        Ok(())
    }

    /// [`send`](Self::send) on a wire with faults or cut (`d`, the direction leaving this end,
    /// held): each fault drawn for the packet, which is then queued, lost or tail-dropped.
    #[inline(never)]
    fn send_faulty(
        &self,
        d: &mut Direction,
        payload: Payload,
        gso: Option<GsoInfo>,
        partial: bool,
    ) {
        let queued = |at, payload| Queued {
            gso,
            partial,
            ..Queued::new(at, payload)
        };
        if d.cut || d.rng.chance(d.faults.loss) {
            d.stats.lost += 1;
            return; // the frame drops here: "transmitted", its slot is free again
        }
        let duplicate = d.rng.chance(d.faults.duplicate);
        let mut frames = [Some(payload), None];
        if duplicate {
            d.stats.duplicated += 1;
            frames[1] = frames[0].as_ref().map(|p| Payload::Heap(p.to_vec()));
        }
        for payload in frames.into_iter().flatten() {
            if d.queue.len() >= d.faults.capacity {
                d.stats.overflow += 1;
                continue;
            }
            self.count_in_flight(d, payload.slots());
            let len = payload.len();
            let corrupt = if d.rng.chance(d.faults.corrupt) && len > 0 {
                d.stats.corrupted += 1;
                let i = (d.rng.next() % len as u64) as usize;
                Some((i, 1u8 << (d.rng.next() % 8)))
            } else {
                None
            };
            // Due at once unless delayed (zero: no clock read, see `poll_packet`).
            let at = if d.faults.delay.is_zero() {
                AT_ONCE
            } else {
                let timer = self.timer.as_ref().expect("checked by wire_pair_with");
                timer.now() + d.faults.delay
            };
            let q = Queued {
                corrupt,
                ..queued(at, payload)
            };
            if d.rng.chance(d.faults.reorder) && !d.queue.is_empty() {
                // Deliver ahead of the last queued frame (which then arrives after this one).
                let last = d.queue.len() - 1;
                let at = d.queue[last].at;
                d.queue.insert(last, Queued { at, ..q });
                d.stats.reordered += 1;
            } else {
                d.queue.push_back(q);
            }
        }
        // The receiver's waker stays registered (it is the same task every time).
        if let Some(w) = &d.rx_waker {
            w.wake_by_ref();
        }
    }
}

/// The bytes of a chain, copied out (the simulated device reading its scatter-gather list).
fn flatten(chain: &TxChain) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(chain.len());
    for part in chain.iter() {
        bytes.extend_from_slice(part);
    }
    bytes
}

impl Driver for WireEnd {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        if let Some(r) = self.poll_plain(cx) {
            return r;
        }
        loop {
            match self.poll_packet(cx, false) {
                Poll::Ready(Packet::One(frame)) => return Poll::Ready(frame),
                // Without chains a packet is one frame.
                Poll::Ready(Packet::Many(mut chain)) => {
                    if let Some(frame) = chain.pop_front() {
                        return Poll::Ready(frame);
                    }
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Packets larger than a slot arrive as chains when this end's
    /// [`WireOffloads::rx_chains`] is on; otherwise as [`poll_receive`](Self::poll_receive).
    fn poll_receive_chain(&mut self, cx: &mut Context<'_>) -> Poll<RxChain> {
        let chains = self.offloads.rx_chains;
        self.poll_packet(cx, chains).map(Packet::into_chain)
    }

    fn poll_receive_packet(&mut self, cx: &mut Context<'_>) -> Poll<RxPacket> {
        if let Some(r) = self.poll_plain(cx) {
            return r.map(RxPacket::Frame);
        }
        let chains = self.offloads.rx_chains;
        self.poll_packet(cx, chains).map(|packet| match packet {
            Packet::One(frame) => RxPacket::Frame(frame),
            Packet::Many(chain) => RxPacket::from(*chain),
        })
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        // Only this end adds to its direction's count, so a stale read can only be too high:
        // the locked check below then decides.
        if self.shared.in_flight[self.side].load(Relaxed) >= self.ring {
            let mut dir = self.shared.dir(self.side);
            if dir.slots_in_flight >= dir.ring {
                set_waker(&mut dir.tx_waker, cx);
                return Poll::Pending;
            }
        }
        self.pool.poll_alloc_tx(cx)
    }

    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.shared.in_flight[self.side].load(Relaxed) >= self.ring {
            let mut dir = self.shared.dir(self.side);
            if dir.slots_in_flight >= dir.ring {
                set_waker(&mut dir.tx_waker, cx);
                return Poll::Pending;
            }
        }
        Poll::Ready(())
    }

    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        if frame.has_marks() {
            return self.transmit_chain(TxChain::from_frame(frame));
        }
        self.send(Payload::Slot(frame.into_device()), None, false)
    }

    /// Sends a chain: one packet over several of the sender's slots. A
    /// [`GsoRequest`](crate::GsoRequest) is honoured as the end's [`GsoMode`] says (refused with
    /// [`TxError::ChainUnsupported`] when the end offers no segmentation, or the headers are not
    /// Ethernet + IPv4/IPv6 + TCP of the kind named); a partial checksum is completed first
    /// when the end offers [`WireOffloads::tx_checksum`].
    fn transmit_chain(&mut self, mut chain: TxChain) -> Result<(), TxError> {
        let frames = chain.frame_count();
        let Some(head) = chain.head() else {
            return Err(TxError::ChainUnsupported { frames });
        };
        let csum = head.checksum_partial();
        let gso = head.gso_request();
        if let Some(req) = gso {
            if self.offloads.gso_max_size == 0
                || !GsoKinds::all().contains(req.kind.flag())
                || chain.len() > self.offloads.gso_max_size + crate::ETHERNET_HEADER_LEN
            {
                return Err(TxError::ChainUnsupported { frames });
            }
            if self.offloads.gso_mode == GsoMode::Whole {
                let info = GsoInfo {
                    kind: req.kind,
                    segment_size: req.segment_size,
                };
                return self.send(
                    Payload::Chain(Box::new(chain.into_device())),
                    Some(info),
                    csum.is_some(),
                );
            }
            // The NIC reads the packet and cuts it; the sender's slots are done with at once.
            let bytes = flatten(&chain);
            drop(chain);
            let segments =
                offload::segment(&bytes, req).map_err(|_| TxError::ChainUnsupported { frames })?;
            self.shared.dir(self.side).stats.segmented += 1;
            let mut result = Ok(());
            for seg in segments {
                if let Err(e) = self.send(Payload::Heap(seg), None, false) {
                    result = result.and(Err(e));
                }
            }
            return result;
        }
        if let (Some(c), true) = (csum, self.offloads.tx_checksum) {
            if chain.complete_checksum(usize::from(c.start), usize::from(c.offset)) {
                self.shared.dir(self.side).stats.checksums_completed += 1;
            }
        }
        let payload = if frames == 1 {
            match chain.pop_front() {
                Some(frame) => Payload::Slot(frame.into_device()),
                None => return Err(TxError::ChainUnsupported { frames }),
            }
        } else {
            Payload::Chain(Box::new(chain.into_device()))
        };
        self.send(payload, None, false)
    }

    fn capabilities(&self) -> Capabilities {
        let mtu = self.shared.dir(self.side).faults.mtu;
        let o = self.offloads;
        let checksum = if o.tx_checksum {
            ChecksumOffloads::TCP_TX.union(ChecksumOffloads::UDP_TX)
        } else {
            ChecksumOffloads::empty()
        };
        Capabilities::new(Medium::Ethernet, mtu - crate::ETHERNET_HEADER_LEN)
            .with_checksum(checksum)
            .with_gso(o.gso_max_size, GsoKinds::all())
            .with_rx_chains(o.rx_chains)
    }

    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet(self.mac)
    }

    fn poll_link_state(&mut self, _cx: &mut Context<'_>) -> LinkState {
        LinkState::Up
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sim::CountingWaker;
    use crate::{PoolConfig, SlotState};
    use std::sync::atomic::AtomicU64;

    /// Two 8-slot pools and a wire between them.
    fn ends(faults: Faults, delivery: Delivery) -> ([&'static FramePool; 2], WireEnd, WireEnd) {
        let pools = [
            FramePool::leak(PoolConfig::new(8)).unwrap(),
            FramePool::leak(PoolConfig::new(8)).unwrap(),
        ];
        let (a, b) = wire_pair_with(pools, faults, delivery, None);
        (pools, a, b)
    }

    fn send(end: &mut WireEnd, cx: &mut Context<'_>, byte: u8) -> bool {
        match end.poll_transmit_frame(cx) {
            Poll::Ready(mut f) => {
                f.set_len(60).unwrap();
                f.fill(byte);
                end.transmit(f).unwrap();
                true
            }
            Poll::Pending => false,
        }
    }

    #[test]
    fn frames_cross_in_the_senders_slot_and_the_ring_applies_backpressure() {
        let (pools, mut a, mut b) = ends(Faults::default(), Delivery::Copy);
        let (tx_wakes, tx_waker) = CountingWaker::new();
        let mut cx = Context::from_waker(&tx_waker);
        // Half of A's pool may be on the wire; then A's TX side waits.
        let mut sent = 0u8;
        while send(&mut a, &mut cx, sent) {
            sent += 1;
            assert!(sent <= 4, "the ring holds half the pool");
        }
        assert_eq!(sent, 4);
        assert_eq!(
            pools[0].occupancy().get(SlotState::Device),
            4,
            "frames stay in A's slots"
        );
        // B receives one: one copy into B's pool, A's slot completes, A's TX side is woken.
        let (_, rx_waker) = CountingWaker::new();
        let f = match b.poll_receive(&mut Context::from_waker(&rx_waker)) {
            Poll::Ready(f) => f,
            Poll::Pending => panic!("a frame is due"),
        };
        assert_eq!(&f[..], &[0u8; 60][..]);
        assert_eq!(pools[0].occupancy().get(SlotState::Device), 3);
        assert_eq!(tx_wakes.wakes(), 1);
        assert!(send(&mut a, &mut cx, 9));
        // Order is kept and bytes are exact.
        drop(f);
        for want in [1u8, 2, 3, 9] {
            match b.poll_receive(&mut Context::from_waker(&rx_waker)) {
                Poll::Ready(f) => assert!(f.iter().all(|&x| x == want)),
                Poll::Pending => panic!("frame {want} is due"),
            }
        }
        assert_eq!(pools[0].occupancy().get(SlotState::Device), 0);
        assert_eq!(pools[0].occupancy().in_use(), 0);
    }

    #[test]
    fn lending_hands_the_senders_slot_to_the_receiver_without_a_copy() {
        let (pools, mut a, mut b) = ends(Faults::default(), Delivery::Lend);
        let (tx_wakes, tx_waker) = CountingWaker::new();
        let mut cx = Context::from_waker(&tx_waker);
        let mut sent = 0u8;
        while send(&mut a, &mut cx, sent) {
            sent += 1;
            assert!(sent <= 4, "the ring still holds half the pool");
        }
        assert_eq!(sent, 4);
        let (_, rx_waker) = CountingWaker::new();
        let mut rx = Context::from_waker(&rx_waker);
        let f = match b.poll_receive(&mut rx) {
            Poll::Ready(f) => f,
            Poll::Pending => panic!("a frame is due"),
        };
        // The received frame is A's slot itself: A's pool, A's memory, B's pool untouched.
        assert!(core::ptr::eq(f.pool(), pools[0]));
        assert_eq!(pools[0].slot_of(f.as_ptr()), Some(f.slot_index()));
        assert_eq!(pools[0].slot_state(f.slot_index()), Some(SlotState::Stack));
        assert_eq!(
            pools[1].occupancy().in_use(),
            0,
            "no receive buffer was taken"
        );
        assert_eq!(&f[..], &[0u8; 60][..]);
        assert_eq!(tx_wakes.wakes(), 1, "the ring has room again");
        // The slot returns to A's pool when B drops the frame.
        let slot = f.slot_index();
        drop(f);
        assert_eq!(pools[0].slot_state(slot), Some(SlotState::Free));
        for want in 1u8..4 {
            match b.poll_receive(&mut rx) {
                Poll::Ready(f) => assert!(f.iter().all(|&x| x == want)),
                Poll::Pending => panic!("frame {want} is due"),
            }
        }
        assert!(b.poll_receive(&mut rx).is_pending());
        assert_eq!(pools[0].occupancy().in_use(), 0);
    }

    #[test]
    fn lending_still_copies_a_corrupted_frame() {
        let faults = Faults {
            corrupt: 1.0,
            ..Faults::default()
        };
        let (pools, mut a, mut b) = ends(faults, Delivery::Lend);
        let (_, waker) = CountingWaker::new();
        let mut cx = Context::from_waker(&waker);
        assert!(send(&mut a, &mut cx, 0));
        let f = match b.poll_receive(&mut cx) {
            Poll::Ready(f) => f,
            Poll::Pending => panic!("a frame is due"),
        };
        assert!(core::ptr::eq(f.pool(), pools[1]), "copied into B's pool");
        assert_eq!(f.iter().filter(|&&x| x != 0).count(), 1, "one byte flipped");
        assert_eq!(pools[0].occupancy().in_use(), 0, "A's slot completed");
    }

    /// A manual clock shared by both ends' timers: the test moves it.
    struct ManualTimer {
        nanos: &'static AtomicU64,
        polls: Arc<AtomicUsize>,
    }

    impl WireTimer for ManualTimer {
        fn now(&self) -> Duration {
            Duration::from_nanos(self.nanos.load(Relaxed))
        }

        fn poll_until(&mut self, deadline: Duration, _cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Relaxed);
            if self.now() >= deadline {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    #[test]
    fn a_delayed_frame_waits_for_its_due_time_on_the_ends_timer() {
        let nanos: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(1_000)));
        let polls = Arc::new(AtomicUsize::new(0));
        let timer = || -> Box<dyn WireTimer> {
            Box::new(ManualTimer {
                nanos,
                polls: polls.clone(),
            })
        };
        let pools = [
            FramePool::leak(PoolConfig::new(8)).unwrap(),
            FramePool::leak(PoolConfig::new(8)).unwrap(),
        ];
        let faults = Faults {
            delay: Duration::from_millis(5),
            ..Faults::default()
        };
        let (mut a, mut b) =
            wire_pair_with(pools, faults, Delivery::Copy, Some([timer(), timer()]));
        let (_, waker) = CountingWaker::new();
        let mut cx = Context::from_waker(&waker);
        assert!(send(&mut a, &mut cx, 7));
        // Not due yet: B asks its timer, receives nothing.
        assert!(b.poll_receive(&mut cx).is_pending());
        assert_eq!(polls.load(Relaxed), 1);
        nanos.fetch_add(4_999_999, Relaxed);
        assert!(b.poll_receive(&mut cx).is_pending());
        nanos.fetch_add(1, Relaxed);
        match b.poll_receive(&mut cx) {
            Poll::Ready(f) => assert!(f.iter().all(|&x| x == 7)),
            Poll::Pending => panic!("due now"),
        }
        assert_eq!(polls.load(Relaxed), 2, "a due frame needs no timer");
    }

    #[test]
    fn a_one_thread_wire_carries_frames_on_its_thread_and_refuses_others() {
        let pools = [
            FramePool::leak(PoolConfig::new(8)).unwrap(),
            FramePool::leak(PoolConfig::new(8)).unwrap(),
        ];
        let (mut a, mut b) = wire_pair_one_thread(pools, Faults::default(), Delivery::Copy, None);
        let (_, waker) = CountingWaker::new();
        let mut cx = Context::from_waker(&waker);
        assert!(send(&mut a, &mut cx, 5));
        match b.poll_receive(&mut cx) {
            Poll::Ready(f) => assert!(f.iter().all(|&x| x == 5)),
            Poll::Pending => panic!("a frame is due"),
        }
        assert_eq!(a.handle().tx_stats().delivered, 1);
        // Another thread may hold the end (it is `Send`) but not use it.
        let handle = a.handle();
        let used = std::thread::spawn(move || {
            std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| handle.tx_stats())).is_ok()
        })
        .join()
        .unwrap();
        assert!(!used, "a one-thread wire refuses another thread");
        // Dropped on another thread, an end touches nothing; its frames on the wire go back to
        // its pool with the other end.
        assert!(send(&mut a, &mut cx, 6));
        std::thread::spawn(move || drop(a)).join().unwrap();
        assert_eq!(pools[0].occupancy().get(SlotState::Device), 1);
        drop(b);
        assert_eq!(pools[0].occupancy().in_use(), 0);
        assert_eq!(pools[1].occupancy().in_use(), 0);
    }

    #[test]
    #[should_panic(expected = "needs a WireTimer")]
    fn a_delay_without_timers_is_refused() {
        let pools = [
            FramePool::leak(PoolConfig::new(8)).unwrap(),
            FramePool::leak(PoolConfig::new(8)).unwrap(),
        ];
        let faults = Faults {
            delay: Duration::from_millis(1),
            ..Faults::default()
        };
        let _ = wire_pair(pools, faults);
    }
}
