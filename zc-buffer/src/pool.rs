//! [`FramePool`]: fixed-size slots over `'static` memory, handed out as leases and returned on
//! drop through a lock-free free list.
//!
//! # Ground rules
//!
//! * **Slots never move.** The region is `'static` and the pool never frees it; a slot's bytes are
//!   reachable only through the one lease that owns the slot (a [`PostedSlot`], [`RxFrame`](crate::RxFrame),
//!   [`TxFrame`] or [`InFlight`](crate::InFlight)). Leases are neither `Clone` nor `Copy`, so exactly one owner
//!   exists per slot that is not FREE.
//! * **The free list** is a Treiber stack threaded through [`SlotMeta::next`], whose head is one
//!   `AtomicU64` (`head`, layout below). Pop and push are each one compare-exchange loop: no lock,
//!   no allocation, safe from any thread and from interrupt context (an interrupted
//!   compare-exchange simply retries). The 38-bit tag, bumped by every successful
//!   compare-exchange, defeats ABA: a popper that read `head = x, next(x) = y` cannot install `y`
//!   after `x` was popped and pushed back meanwhile.
//! * **Waiting for a slot** needs no second atomic on the return path. A waiter that finds the
//!   list empty first registers its waker in its [`WakerCell`], then sets its *waiting bit* in
//!   `head` with the same compare-exchange that observes the list empty. A return clears both
//!   waiting bits with the compare-exchange that pushes the slot, then wakes the cells whose bits
//!   it cleared. Because both sides modify the same word, one of them always sees the other:
//!   no wakeup is lost, and a return when nobody waits costs exactly one compare-exchange.
//! * One waiter per direction: the RX cell belongs to the driver refilling its ring, the TX cell
//!   to the one task that allocates TX frames (the stack's egress). A second party must
//!   multiplex through that owner; registering it in the same cell would displace the first.
//! * **Retained slots** (SENT, RETAINED: a TCP frame kept until acknowledged, see `slot.rs`)
//!   have two owners while SENT: the socket's [`RetainedFrame`](crate::RetainedFrame) and the
//!   device's retained [`TxFrame`] / [`InFlight`](crate::InFlight). Out of SENT each lets go
//!   with a compare-exchange on the slot's state byte (in every build, not only the debug
//!   check), so exactly one of them frees the slot: the device moves SENT → RETAINED, or frees
//!   a slot the socket left in DEVICE; the socket leaves a SENT slot in DEVICE for the device to
//!   free. A RETAINED slot has the socket as its only owner (the device moved it there as it
//!   let go), so the socket's moves out of RETAINED (resend: → SENT; let go: → FREE) are a load
//!   and a store. Whoever waits for a SENT slot to come back (the stack's egress, to retransmit
//!   it) registers in the pool's one *retained waker* and then marks the slot *watched* with a
//!   compare-exchange on its state byte (SENT → SENT|`WATCHED`); the device's SENT → RETAINED
//!   is a compare-exchange on the same byte, so one of the two always sees the other, and only
//!   the completion of a watched slot wakes the cell (a completion nobody waits for touches no
//!   waker).
//! * **The owner's cache.** A thread that binds the pool ([`FramePool::bind_owner`], `std`
//!   only: the stack binds it where it runs) keeps up to [`OWNER_CACHE`] free slots in plain
//!   cells that only it touches ([`PoolOwner`] is neither `Send` nor `Sync`, and the pool
//!   checks the calling thread's number, which is never reused, against the bound one). A
//!   slot freed on that thread goes into the cache, and an allocation on it takes from the
//!   cache first: no locked instruction either way. Slots freed on any other thread, or in
//!   an interrupt handler (no `std`: no owner), take the lock-free list. The cache
//!   never keeps a slot from a waiter: while a waiting bit is set in `head` the owner frees
//!   to the shared list and flushes the cache before it allocates; and a context other than
//!   the owner that finds no free slot sets a flag and wakes the owner's task, which flushes
//!   the cache when it runs ([`PoolOwner::service`]). That covers a waiter that registered
//!   just after the owner put a slot in its cache: the flag is set before the wake, and the
//!   owner registers its waker before it reads the flag, so one of the two sees the other.
//!
//! ```text
//!  head: | tag (38 bits) | TX waiting | RX waiting | index of the first free slot (24 bits) |
//!          63        26        25           24        23                                   0
//!  index == NIL (0xFF_FFFF): the list is empty
//! ```

use core::cell::Cell;
use core::fmt;
use core::marker::PhantomData;
use core::task::{Context, Poll, Waker};

use crate::error::PoolError;
use crate::region::FrameRegion;
use crate::rx::PostedSlot;
use crate::slot::{SlotMeta, SlotState, WATCHED};
use crate::sync::{AtomicU64, AtomicU8, AtomicUsize, Ordering::*, StatCounter};
use crate::tx::TxFrame;
use crate::waker_cell::WakerCell;

/// Slot sizes are multiples of this, and regions start on this boundary (one cache line).
pub const SLOT_ALIGN: usize = 64;
/// The largest slot: 1 MiB (a 65535-byte MTU frame plus headroom fits many times over).
pub const MAX_SLOT_SIZE: usize = 1 << 20;
/// The most slots one pool can have (the free-list head stores a 24-bit index).
pub const MAX_SLOTS: usize = (1 << INDEX_BITS) - 1;
/// The slot size when none is configured: a 1514-byte Ethernet frame plus headroom, rounded up.
pub const DEFAULT_SLOT_SIZE: usize = 2048;
/// TX headroom when none is configured: virtio-net header (12) + Ethernet (14) + IPv6 (40) + TCP
/// with options (60) = 126, rounded up to 128.
pub const DEFAULT_HEADROOM: usize = 128;

const INDEX_BITS: u32 = 24;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
/// The "no slot" index: end of the free list, or an empty list when it is the head's index.
const NIL: u32 = INDEX_MASK as u32;
/// Set in `head` while the RX waiter sleeps until a slot is returned.
const RX_WAITING: u64 = 1 << INDEX_BITS;
/// Set in `head` while the TX waiter sleeps until a slot is returned.
const TX_WAITING: u64 = 1 << (INDEX_BITS + 1);
const WAITING_BITS: u64 = RX_WAITING | TX_WAITING;
/// One step of the ABA tag, which takes the bits above the waiting bits.
const TAG_ONE: u64 = 1 << (INDEX_BITS + 2);

#[inline]
fn head_index(word: u64) -> u32 {
    (word & INDEX_MASK) as u32
}

/// The head word after a successful change from `old`: new index, new waiting bits, tag + 1.
#[inline]
fn next_head(old: u64, index: u32, waiting: u64) -> u64 {
    ((old & !(INDEX_MASK | WAITING_BITS)).wrapping_add(TAG_ONE)) | waiting | u64::from(index)
}

/// Exponential backoff after a failed compare-exchange on the head: under contention, retrying at
/// once only steals the cache line back from the thread about to succeed. Bounded (at most
/// 2^MAX_STEP spin hints per retry) and never sleeps, so it stays safe in interrupt context.
struct Backoff(u32);

impl Backoff {
    const MAX_STEP: u32 = 6;

    fn new() -> Self {
        Self(0)
    }

    #[inline]
    fn snooze(&mut self) {
        #[cfg(not(loom))]
        for _ in 0..(1u32 << self.0) {
            core::hint::spin_loop();
        }
        if self.0 < Self::MAX_STEP {
            self.0 += 1;
        }
    }
}

/// Keeps a hot atomic on a cache line of its own.
#[repr(align(64))]
struct CachePadded<T>(T);

/// Free slots the owner cache holds at most.
pub const OWNER_CACHE: usize = 16;

/// The owner thread's free slots (module docs, "The owner's cache").
struct OwnerCache {
    /// The owner thread's number (`thread::current`), 0 while none is bound.
    thread: AtomicU64,
    /// `slots[..len]` are FREE slots on no list. Touched only on the owner thread.
    slots: [Cell<u32>; OWNER_CACHE],
    len: Cell<usize>,
    /// `len`, for [`FramePool::owner_cached`] and the audit on any thread (a plain store).
    len_seen: AtomicUsize,
    /// 1: a context other than the owner found no free slot and wants the cache flushed.
    flush_wanted: AtomicU8,
    /// The owner's task, woken after `flush_wanted` is set.
    waker: WakerCell,
}

impl OwnerCache {
    fn new() -> Self {
        Self {
            thread: AtomicU64::new(0),
            slots: [const { Cell::new(0) }; OWNER_CACHE],
            len: Cell::new(0),
            len_seen: AtomicUsize::new(0),
            flush_wanted: AtomicU8::new(0),
            waker: WakerCell::new(),
        }
    }
}

/// The right to a pool's owner cache, held by the one thread that bound it
/// ([`FramePool::bind_owner`]); neither `Send` nor `Sync`. Dropped, it flushes the cache to the
/// shared free list and unbinds.
pub struct PoolOwner {
    pool: &'static FramePool,
    _one_thread: PhantomData<*const ()>,
}

impl PoolOwner {
    /// Flushes the cache if another context asked for it (it found no free slot), and then
    /// keeps `cx`'s waker for the next request. Call it each time the owner's task runs: it
    /// costs one load while nobody asks.
    #[inline]
    pub fn service(&self, cx: &Context<'_>) {
        // Acquire (a plain load on x86 as on most targets): the request's flag store is
        // seen together with whatever the requester did before it.
        if self.pool.owner.flush_wanted.load(Acquire) != 0 {
            self.take_request(cx.waker());
        }
    }

    /// Registers `waker`, then serves every request made before: clears the flag, flushes.
    /// A request whose wake found no waker (between an earlier wake and this registration)
    /// set its flag before that wake, and this registration acquires the wake's release, so
    /// the flag is seen here. A request's wake takes the waker, so the owner registers again
    /// each time it serves one; a registration that met a wake in progress was woken instead
    /// of stored, so the flag stays up and the task, run again by that wake, registers again.
    #[cold]
    fn take_request(&self, waker: &Waker) {
        let c = &self.pool.owner;
        let stored = c.waker.register_stored(waker);
        while c.flush_wanted.swap(0, Acquire) != 0 {
            self.pool.flush_cache();
        }
        if !stored {
            c.flush_wanted.swap(1, Relaxed);
        }
    }
}

impl Drop for PoolOwner {
    fn drop(&mut self) {
        self.pool.flush_cache();
        // Release: a later owner sees the empty cache.
        self.pool.owner.thread.store(0, Release);
    }
}

impl fmt::Debug for PoolOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolOwner")
            .field("cached", &self.pool.owner_cached())
            .finish_non_exhaustive()
    }
}

/// Geometry of a pool: how many slots, how large, and how much TX headroom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Number of slots (1 ..= [`MAX_SLOTS`]).
    pub slots: usize,
    /// Bytes per slot: a non-zero multiple of [`SLOT_ALIGN`], at most [`MAX_SLOT_SIZE`].
    /// Default [`DEFAULT_SLOT_SIZE`].
    pub slot_size: usize,
    /// Bytes reserved in front of a fresh [`TxFrame`]'s data for headers pushed later.
    /// Default [`DEFAULT_HEADROOM`]; must be smaller than `slot_size`.
    pub headroom: usize,
}

impl PoolConfig {
    /// `slots` slots of [`DEFAULT_SLOT_SIZE`] bytes with [`DEFAULT_HEADROOM`].
    pub const fn new(slots: usize) -> Self {
        Self {
            slots,
            slot_size: DEFAULT_SLOT_SIZE,
            headroom: DEFAULT_HEADROOM,
        }
    }

    /// The same configuration with another slot size.
    pub const fn with_slot_size(mut self, slot_size: usize) -> Self {
        self.slot_size = slot_size;
        self
    }

    /// The same configuration with another TX headroom.
    pub const fn with_headroom(mut self, headroom: usize) -> Self {
        self.headroom = headroom;
        self
    }

    /// Bytes of memory the region must provide: `slots * slot_size` (saturating).
    pub const fn region_len(&self) -> usize {
        self.slots.saturating_mul(self.slot_size)
    }

    /// Checks the geometry on its own (region and metadata are checked by [`FramePool::new`]).
    pub const fn validate(&self) -> Result<(), PoolError> {
        if self.slots == 0 {
            return Err(PoolError::NoSlots);
        }
        if self.slots > MAX_SLOTS {
            return Err(PoolError::TooManySlots {
                requested: self.slots,
            });
        }
        if self.slot_size == 0
            || !self.slot_size.is_multiple_of(SLOT_ALIGN)
            || self.slot_size > MAX_SLOT_SIZE
        {
            return Err(PoolError::BadSlotSize {
                slot_size: self.slot_size,
            });
        }
        if self.headroom >= self.slot_size {
            return Err(PoolError::HeadroomTooLarge {
                headroom: self.headroom,
                slot_size: self.slot_size,
            });
        }
        Ok(())
    }
}

/// How many slots are in each state, from [`FramePool::occupancy`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// On the free list.
    pub free: usize,
    /// In the driver's RX ring.
    pub posted: usize,
    /// Received, held by the stack.
    pub stack: usize,
    /// Received, held by the application.
    pub lent: usize,
    /// Being filled for transmission.
    pub tx: usize,
    /// Handed to the device for transmission.
    pub device: usize,
    /// With the device for transmission and kept by a socket until acknowledged.
    pub sent: usize,
    /// Kept by a socket until acknowledged; the device is done with them.
    pub retained: usize,
}

impl Occupancy {
    /// The count for one state.
    pub fn get(&self, state: SlotState) -> usize {
        match state {
            SlotState::Free => self.free,
            SlotState::Posted => self.posted,
            SlotState::Stack => self.stack,
            SlotState::Lent => self.lent,
            SlotState::Tx => self.tx,
            SlotState::Device => self.device,
            SlotState::Sent => self.sent,
            SlotState::Retained => self.retained,
        }
    }

    fn count(&mut self, state: SlotState) {
        match state {
            SlotState::Free => self.free += 1,
            SlotState::Posted => self.posted += 1,
            SlotState::Stack => self.stack += 1,
            SlotState::Lent => self.lent += 1,
            SlotState::Tx => self.tx += 1,
            SlotState::Device => self.device += 1,
            SlotState::Sent => self.sent += 1,
            SlotState::Retained => self.retained += 1,
        }
    }

    /// Sum over all states: always the pool's slot count.
    pub fn total(&self) -> usize {
        self.free
            + self.posted
            + self.stack
            + self.lent
            + self.tx
            + self.device
            + self.sent
            + self.retained
    }

    /// Slots not on the free list.
    pub fn in_use(&self) -> usize {
        self.total() - self.free
    }
}

impl fmt::Display for Occupancy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, state) in SlotState::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}={}", state.name(), self.get(*state))?;
        }
        Ok(())
    }
}

/// Exhaustion counters, from [`FramePool::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// RX allocations that found no free slot (`try_alloc_rx` returning `None`, `poll_alloc_rx`
    /// returning `Pending`).
    pub rx_exhausted: u64,
    /// TX allocations that found no free slot.
    pub tx_exhausted: u64,
}

/// What [`FramePool::audit`] found wrong. Any of these means a bug in zcnet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditError {
    /// The free list is longer than the pool: it has a cycle (a slot was returned twice).
    FreeListCycle,
    /// A slot on the free list is not in the FREE state.
    ListedSlotNotFree {
        /// The slot.
        slot: usize,
        /// Its state.
        state: SlotState,
    },
    /// The free list and the FREE state disagree on how many slots are free (a slot was lost).
    FreeCountMismatch {
        /// Slots on the free list.
        listed: usize,
        /// Slots in the FREE state.
        free: usize,
    },
}

impl fmt::Display for AuditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AuditError::FreeListCycle => f.write_str("the free list has a cycle"),
            AuditError::ListedSlotNotFree { slot, state } => {
                write!(f, "slot {slot} is on the free list but {}", state.name())
            }
            AuditError::FreeCountMismatch { listed, free } => {
                write!(f, "{listed} slots on the free list, {free} in state FREE")
            }
        }
    }
}

impl core::error::Error for AuditError {}

/// A pool of fixed-size frame slots over `'static` memory. The rules it keeps (slots never move,
/// one owner per slot, a lock-free free list) are the "Ground rules" at the top of
/// `zc-buffer/src/pool.rs`; [the crate docs](crate) have a complete example.
///
/// Leases borrow the pool for `'static`, so a pool lives in a `static`
/// ([`StaticPool`](crate::StaticPool), [`PoolCell`](crate::PoolCell)) or is leaked
/// ([`FramePool::leak`] with the `alloc` feature).
pub struct FramePool {
    /// The free-list head (layout in the module docs). The only word every lease and return
    /// touches.
    head: CachePadded<AtomicU64>,
    /// The driver refilling its RX ring waits here (see `RX_WAITING`).
    rx_waiter: WakerCell,
    /// The task allocating TX frames waits here (see `TX_WAITING`).
    tx_waiter: WakerCell,
    /// The task waiting for a SENT slot to become RETAINED waits here (module ground rules).
    retained_waiter: WakerCell,
    /// Free slots kept by the owner thread (module docs, "The owner's cache").
    owner: OwnerCache,
    region: FrameRegion,
    meta: &'static [SlotMeta],
    slot_size: usize,
    headroom: usize,
    rx_exhausted: StatCounter,
    tx_exhausted: StatCounter,
}

// SAFETY: the region's bytes are reached only through the unique lease that owns a slot (module
// ground rules); every shared field is an atomic or a `WakerCell`, which is `Sync`, except the
// owner cache's cells, which only the bound owner thread touches (`FramePool::owned` is checked
// before every access, and a thread's number is never another's).
unsafe impl Sync for FramePool {}
// SAFETY: as above; nothing in the pool is tied to the thread that built it.
unsafe impl Send for FramePool {}

impl fmt::Debug for FramePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FramePool")
            .field("slots", &self.meta.len())
            .field("slot_size", &self.slot_size)
            .field("headroom", &self.headroom)
            .field("occupancy", &self.occupancy())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl FramePool {
    /// Builds a pool of `config.slots` slots over `region`, with `meta` for bookkeeping (its first
    /// `config.slots` entries are used and reset). All slots start FREE.
    ///
    /// Errors when the configuration is invalid ([`PoolConfig::validate`]), the region is too
    /// small or not aligned to [`SLOT_ALIGN`], or `meta` is too short.
    pub fn new(
        region: FrameRegion,
        meta: &'static mut [SlotMeta],
        config: PoolConfig,
    ) -> Result<Self, PoolError> {
        config.validate()?;
        let needed = config.region_len();
        if region.len < needed {
            return Err(PoolError::RegionTooSmall {
                needed,
                given: region.len,
            });
        }
        if !(region.ptr.as_ptr() as usize).is_multiple_of(SLOT_ALIGN) {
            return Err(PoolError::Misaligned);
        }
        if meta.len() < config.slots {
            return Err(PoolError::MetaTooSmall {
                needed: config.slots,
                given: meta.len(),
            });
        }
        let meta: &'static [SlotMeta] = &meta[..config.slots];
        for (i, m) in meta.iter().enumerate() {
            m.state.store(SlotState::Free as u8, Relaxed);
            let next = if i + 1 < config.slots {
                (i + 1) as u32
            } else {
                NIL
            };
            m.next.store(next, Relaxed);
        }
        Ok(Self {
            head: CachePadded(AtomicU64::new(0)),
            rx_waiter: WakerCell::new(),
            tx_waiter: WakerCell::new(),
            retained_waiter: WakerCell::new(),
            owner: OwnerCache::new(),
            region,
            meta,
            slot_size: config.slot_size,
            headroom: config.headroom,
            rx_exhausted: StatCounter::new(),
            tx_exhausted: StatCounter::new(),
        })
    }

    /// The pool's geometry.
    pub fn config(&self) -> PoolConfig {
        PoolConfig {
            slots: self.meta.len(),
            slot_size: self.slot_size,
            headroom: self.headroom,
        }
    }

    /// Number of slots.
    pub fn slot_count(&self) -> usize {
        self.meta.len()
    }

    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Headroom of a fresh [`TxFrame`].
    pub fn headroom(&self) -> usize {
        self.headroom
    }

    /// Takes a free slot to post to the device's RX ring (FREE → POSTED), or `None` (counted in
    /// [`PoolStats::rx_exhausted`]) when every slot is in use.
    pub fn try_alloc_rx(&'static self) -> Option<PostedSlot> {
        match self.pop() {
            Some(slot) => Some(self.posted(slot)),
            None => {
                self.rx_exhausted.add(1);
                self.want_flush();
                None
            }
        }
    }

    /// Like [`try_alloc_rx`](Self::try_alloc_rx), but when no slot is free it registers `cx`'s
    /// waker, which the next returned slot wakes. For the one driver that refills from this pool.
    pub fn poll_alloc_rx(&'static self, cx: &mut Context<'_>) -> Poll<PostedSlot> {
        match self.poll_pop(cx, RX_WAITING, &self.rx_waiter) {
            Poll::Ready(slot) => Poll::Ready(self.posted(slot)),
            Poll::Pending => {
                self.rx_exhausted.add(1);
                Poll::Pending
            }
        }
    }

    /// Takes a free slot as a [`TxFrame`] with [`headroom`](Self::headroom) reserved (FREE → TX),
    /// or `None` (counted in [`PoolStats::tx_exhausted`]).
    #[inline(always)]
    pub fn try_alloc_tx(&'static self) -> Option<TxFrame> {
        match self.pop() {
            Some(slot) => Some(self.tx(slot)),
            None => {
                self.tx_exhausted.add(1);
                self.want_flush();
                None
            }
        }
    }

    /// Like [`try_alloc_tx`](Self::try_alloc_tx), but when no slot is free it registers `cx`'s
    /// waker, which the next returned slot wakes. For the one task that allocates TX frames.
    #[inline(always)]
    pub fn poll_alloc_tx(&'static self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        match self.poll_pop(cx, TX_WAITING, &self.tx_waiter) {
            Poll::Ready(slot) => Poll::Ready(self.tx(slot)),
            Poll::Pending => {
                self.tx_exhausted.add(1);
                Poll::Pending
            }
        }
    }

    /// Counts the slots in each state by reading every slot's state byte. Exact when no other
    /// thread is moving slots; a consistent-enough picture otherwise (each slot is counted once,
    /// in a state it was in during the scan).
    pub fn occupancy(&self) -> Occupancy {
        let mut occ = Occupancy::default();
        for m in self.meta {
            occ.count(m.state());
        }
        occ
    }

    /// Exhaustion counters since the pool was built or [`take_stats`](Self::take_stats) last ran.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            rx_exhausted: self.rx_exhausted.get(),
            tx_exhausted: self.tx_exhausted.get(),
        }
    }

    /// Returns the exhaustion counters and resets them to zero.
    pub fn take_stats(&self) -> PoolStats {
        PoolStats {
            rx_exhausted: self.rx_exhausted.take(),
            tx_exhausted: self.tx_exhausted.take(),
        }
    }

    /// Walks the free list and checks it against the slots' states: every listed slot is FREE,
    /// every FREE slot is listed once, no slot is lost or listed twice. Returns the occupancy.
    ///
    /// Meaningful only while no other thread leases or returns slots (at the end of a test, or
    /// with the driver stopped); it never misbehaves otherwise, but may then report a spurious
    /// mismatch.
    pub fn audit(&self) -> Result<Occupancy, AuditError> {
        let occ = self.occupancy();
        let mut listed = 0usize;
        let mut at = head_index(self.head.0.load(Acquire));
        while at != NIL {
            listed += 1;
            if listed > self.meta.len() {
                return Err(AuditError::FreeListCycle);
            }
            let m = &self.meta[at as usize];
            let state = m.state();
            if state != SlotState::Free {
                return Err(AuditError::ListedSlotNotFree {
                    slot: at as usize,
                    state,
                });
            }
            at = m.next.load(Relaxed);
        }
        // Slots in the owner's cache are FREE but not listed; the owner thread checks them too.
        let cached = self.owner_cached();
        if self.owned() {
            for i in 0..self.owner.len.get() {
                let at = self.owner.slots[i].get();
                let state = self.meta[at as usize].state();
                if state != SlotState::Free {
                    return Err(AuditError::ListedSlotNotFree {
                        slot: at as usize,
                        state,
                    });
                }
            }
        }
        if listed + cached != occ.free {
            return Err(AuditError::FreeCountMismatch {
                listed: listed + cached,
                free: occ.free,
            });
        }
        Ok(occ)
    }

    /// The slot whose memory contains `ptr`, if any: lets tests and benchmarks prove that bytes
    /// an application sees are the very bytes the device wrote.
    pub fn slot_of(&self, ptr: *const u8) -> Option<usize> {
        let base = self.region.ptr.as_ptr() as usize;
        let offset = (ptr as usize).checked_sub(base)?;
        let slot = offset / self.slot_size;
        (slot < self.meta.len()).then_some(slot)
    }

    /// The state a slot is in right now (`None` for an index out of range).
    pub fn slot_state(&self, slot: usize) -> Option<SlotState> {
        self.meta.get(slot).map(SlotMeta::state)
    }

    // ---- crate-internal: used by the lease types -------------------------------------------

    /// First byte of `slot`.
    pub(crate) fn slot_ptr(&self, slot: u32) -> *mut u8 {
        debug_assert!((slot as usize) < self.meta.len());
        // SAFETY: `slot < slots` (leases only carry indices the pool handed out), and the region
        // holds at least `slots * slot_size` bytes (checked in `new`), so the offset stays inside
        // the region's allocation.
        unsafe { self.region.ptr.as_ptr().add(slot as usize * self.slot_size) }
    }

    /// Bytes `start..end` of `slot`.
    ///
    /// # Safety
    ///
    /// The caller owns the lease on `slot` and no `&mut` to those bytes exists for `'a`;
    /// `start <= end <= slot_size`.
    pub(crate) unsafe fn bytes<'a>(&self, slot: u32, start: u32, end: u32) -> &'a [u8] {
        debug_assert!(start <= end && end as usize <= self.slot_size);
        let ptr = self.slot_ptr(slot).wrapping_add(start as usize);
        // SAFETY: the range lies inside the slot, which lies inside the 'static region
        // (precondition and `slot_ptr`); the caller guarantees no mutable alias for `'a`.
        unsafe { core::slice::from_raw_parts(ptr, (end - start) as usize) }
    }

    /// Bytes `start..end` of `slot`, writable.
    ///
    /// # Safety
    ///
    /// The caller owns the lease on `slot` and no other reference to those bytes exists for
    /// `'a`; `start <= end <= slot_size`.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut<'a>(&self, slot: u32, start: u32, end: u32) -> &'a mut [u8] {
        debug_assert!(start <= end && end as usize <= self.slot_size);
        let ptr = self.slot_ptr(slot).wrapping_add(start as usize);
        // SAFETY: as in `bytes`, and the caller guarantees the borrow is unique for `'a`.
        unsafe { core::slice::from_raw_parts_mut(ptr, (end - start) as usize) }
    }

    /// Device address of byte `offset` of `slot`.
    pub(crate) fn device_addr(&self, slot: u32, offset: usize) -> u64 {
        self.region.device_addr(self.slot_ptr(slot) as usize) + offset as u64
    }

    /// Moves `slot` from `from` to `to`. Debug builds check the edge and the current state.
    #[inline]
    pub(crate) fn transition(&self, slot: u32, from: SlotState, to: SlotState) {
        let m = &self.meta[slot as usize];
        if cfg!(debug_assertions) {
            assert!(
                from.can_become(to),
                "zcnet-buffer: {} -> {} is not a slot transition",
                from.name(),
                to.name()
            );
            if let Err(found) = m
                .state
                .compare_exchange(from as u8, to as u8, Relaxed, Relaxed)
            {
                panic!(
                    "zcnet-buffer: slot {slot} moved {} -> {} but was {:?}",
                    from.name(),
                    to.name(),
                    SlotState::from_u8(found)
                );
            }
        } else {
            m.state.store(to as u8, Relaxed);
        }
    }

    /// Returns `slot`, currently in state `from`, to the free list and wakes whoever waits.
    pub(crate) fn release(&self, slot: u32, from: SlotState) {
        self.transition(slot, from, SlotState::Free);
        self.free(slot);
    }

    /// For the task waiting to resend `slot` (the stack's egress): registers `waker` in the
    /// pool's one retained waker and marks the SENT slot *watched* (SENT → SENT|[`WATCHED`]),
    /// so that the device's SENT → RETAINED wakes it. `true` if the slot is RETAINED already
    /// (nothing to wait for).
    ///
    /// The mark and the device's move out of SENT are compare-exchanges on the same state
    /// byte, so exactly one of them comes first: either the mark finds the slot RETAINED (and
    /// the caller does not wait), or the device finds the mark (and wakes the waker registered
    /// before it, whose registration its compare-exchange acquires). A completion of a slot
    /// nobody watches wakes nobody and touches no waker.
    pub(crate) fn watch_retained(&self, slot: u32, waker: &core::task::Waker) -> bool {
        self.retained_waiter.register(waker);
        let state = &self.meta[slot as usize].state;
        let mut cur = state.load(Acquire);
        loop {
            if cur == SlotState::Retained as u8 {
                return true;
            }
            if cur & WATCHED != 0 {
                return false; // marked by an earlier wait; the device will see it
            }
            debug_assert_eq!(cur, SlotState::Sent as u8, "slot {slot} is retained");
            match state.compare_exchange(cur, cur | WATCHED, AcqRel, Acquire) {
                Ok(_) => return false,
                Err(found) => cur = found,
            }
        }
    }

    /// The device is done with a retained slot (completion, refusal, or a frame dropped unsent):
    /// SENT → RETAINED, waking the retained waiter if the slot was watched
    /// ([`watch_retained`](Self::watch_retained)), or free it if the socket let go first.
    pub(crate) fn device_done(&self, slot: u32) {
        let state = &self.meta[slot as usize].state;
        let mut from = SlotState::Sent as u8;
        loop {
            match state.compare_exchange(from, SlotState::Retained as u8, AcqRel, Acquire) {
                Ok(_) => {
                    if from & WATCHED != 0 {
                        self.retained_waiter.wake();
                    }
                    return;
                }
                // The egress task marked the slot since (or before) we looked: move that.
                Err(found) if found == SlotState::Sent as u8 | WATCHED => from = found,
                Err(found) => {
                    // Only the device leaves DEVICE, so nobody races this release.
                    debug_assert_eq!(found, SlotState::Device as u8, "slot {slot}");
                    self.release(slot, SlotState::Device);
                    return;
                }
            }
        }
    }

    /// The socket lets go of a retained slot: RETAINED → FREE, or SENT (watched or not) →
    /// DEVICE for the device's completion to free it.
    ///
    /// A RETAINED slot has one owner, the socket (the device moved it there when it let go, and
    /// only the socket moves it on): a load that sees RETAINED (Acquire: the device's release
    /// of the bytes) is followed by a plain store, no compare-exchange. A SENT slot races the
    /// device's completion, so that edge keeps its compare-exchange.
    pub(crate) fn socket_done(&self, slot: u32) {
        let state = &self.meta[slot as usize].state;
        let mut cur = state.load(Acquire);
        loop {
            if cur == SlotState::Retained as u8 {
                // Only the socket, the caller, moves a slot out of RETAINED.
                state.store(SlotState::Free as u8, Relaxed);
                self.free(slot);
                return;
            }
            debug_assert_eq!(cur & !WATCHED, SlotState::Sent as u8, "slot {slot}");
            match state.compare_exchange(cur, SlotState::Device as u8, AcqRel, Acquire) {
                Ok(_) => return,
                // The device moved it to RETAINED (or the egress task marked it) meanwhile.
                Err(found) => cur = found,
            }
        }
    }

    /// RETAINED → SENT, or `false` if the slot is SENT (the device still has it).
    ///
    /// Only the socket, the caller, moves a slot out of RETAINED (see
    /// [`socket_done`](Self::socket_done)), so a load and a store do: the load (Acquire) sees
    /// the device's SENT → RETAINED with the device done with the bytes, and the store
    /// (Release) hands the device the bytes written since, as the compare-exchange that
    /// takes it back out of SENT acquires them.
    pub(crate) fn try_resend(&self, slot: u32) -> bool {
        let state = &self.meta[slot as usize].state;
        if state.load(Acquire) != SlotState::Retained as u8 {
            return false;
        }
        state.store(SlotState::Sent as u8, Release);
        true
    }

    /// Whether a SENT slot is marked watched ([`watch_retained`](Self::watch_retained)): a task
    /// waits for the device to let go of it. A statistic-grade read (Relaxed): the caller only
    /// decides whether to ask its device for a completion interrupt.
    pub(crate) fn is_watched(&self, slot: u32) -> bool {
        self.meta[slot as usize].state.load(Relaxed) & WATCHED != 0
    }

    /// Whether a retained slot is RETAINED (device done) rather than SENT.
    pub(crate) fn is_idle(&self, slot: u32) -> bool {
        self.meta[slot as usize].state.load(Acquire) == SlotState::Retained as u8
    }

    fn posted(&'static self, slot: u32) -> PostedSlot {
        self.transition(slot, SlotState::Free, SlotState::Posted);
        PostedSlot::new(self, slot)
    }

    fn tx(&'static self, slot: u32) -> TxFrame {
        self.transition(slot, SlotState::Free, SlotState::Tx);
        TxFrame::new(self, slot, self.headroom as u32)
    }

    // ---- the owner's cache -----------------------------------------------------------------

    /// Binds the pool's owner cache to the calling thread (module docs, "The owner's cache"):
    /// from now on, slots freed on this thread go into a small cache that allocations on this
    /// thread take from, with no locked instruction. `waker` is the owner's task, woken when a
    /// context that found no free slot asks for the cache to be flushed; that task calls
    /// [`PoolOwner::service`] each time it runs.
    ///
    /// `None` when the pool has an owner already, or without `std` (no way to tell threads
    /// apart: every slot then takes the lock-free list).
    ///
    /// Bind it on the thread where the pool's allocations and waits happen (the stack binds it
    /// in its ingress task, where the driver refills and beside egress, which allocates TX
    /// frames). Frames must not be dropped in a signal handler on that thread. A thread that
    /// ends while it still holds the [`PoolOwner`] (forgotten, or kept by a stack that was
    /// never shut down) keeps the slots in the cache, at most [`OWNER_CACHE`], out of the pool
    /// for good: its number is never anyone else's.
    pub fn bind_owner(&'static self, waker: &Waker) -> Option<PoolOwner> {
        let me = crate::thread::current()?;
        self.owner
            .thread
            .compare_exchange(0, me, Acquire, Relaxed)
            .ok()?;
        let owner = PoolOwner {
            pool: self,
            _one_thread: PhantomData,
        };
        owner.take_request(waker);
        Some(owner)
    }

    /// Whether the calling thread is the bound owner. A thread reads its own number here only
    /// if it stored it (`bind_owner`) and has not cleared it since (`PoolOwner`'s drop):
    /// numbers are never reused.
    #[inline]
    fn owned(&self) -> bool {
        let owner = self.owner.thread.load(Relaxed);
        owner != 0 && crate::thread::current() == Some(owner)
    }

    /// Slots in the owner's cache (an instant's count, from any thread).
    pub fn owner_cached(&self) -> usize {
        self.owner.len_seen.load(Relaxed)
    }

    /// A slot from the owner's cache. Only on the owner thread.
    fn cache_take(&self) -> Option<u32> {
        let c = &self.owner;
        let n = c.len.get().checked_sub(1)?;
        c.len.set(n);
        c.len_seen.store(n, Relaxed);
        Some(c.slots[n].get())
    }

    /// Puts a FREE slot in the owner's cache; `false` when it is full. Only on the owner thread.
    fn cache_put(&self, slot: u32) -> bool {
        let c = &self.owner;
        let n = c.len.get();
        if n == OWNER_CACHE {
            return false;
        }
        c.slots[n].set(slot);
        c.len.set(n + 1);
        c.len_seen.store(n + 1, Relaxed);
        true
    }

    /// Moves every cached slot to the shared list, waking whoever waits. Only on the owner
    /// thread. A wake that runs code which frees or takes a slot finds the cache consistent:
    /// each slot leaves the cache before it is pushed.
    fn flush_cache(&self) {
        while let Some(slot) = self.cache_take() {
            self.push(slot);
        }
    }

    /// A context other than the owner found no free slot: asks the owner to flush its cache.
    /// The flag is set before the owner's waker is woken, and the owner registers before it
    /// reads the flag ([`PoolOwner::take_request`]), so one of the two sees the other. Also
    /// while no owner is bound: a later `bind_owner` reads the flag.
    fn want_flush(&self) {
        if self.owned() {
            return; // the owner took from its cache first: it is empty, or was just flushed
        }
        // A read-modify-write, not a store: it lands after the owner's last clearing swap in
        // the flag's modification order, whatever the interleaving (a cold path).
        self.owner.flush_wanted.swap(1, Release);
        self.owner.waker.wake();
    }

    /// Returns a FREE slot: to the owner's cache when the caller is the owner, nobody waits
    /// for a slot and the cache has room; else to the shared list.
    fn free(&self, slot: u32) {
        if self.owned() && self.head.0.load(Relaxed) & WAITING_BITS == 0 && self.cache_put(slot) {
            return;
        }
        self.push(slot);
    }

    // ---- the free list -------------------------------------------------------------------

    /// Takes a free slot: on the owner thread from its cache first (unless someone waits for a
    /// slot: then the cache goes to the shared list, where the waiter looks), then from the
    /// shared list.
    fn pop(&self) -> Option<u32> {
        if self.owned() {
            if self.head.0.load(Relaxed) & WAITING_BITS != 0 {
                self.flush_cache();
            } else if let Some(slot) = self.cache_take() {
                return Some(slot);
            }
        }
        self.pop_shared()
    }

    fn pop_shared(&self) -> Option<u32> {
        let mut backoff = Backoff::new();
        let mut cur = self.head.0.load(Acquire);
        loop {
            let index = head_index(cur);
            if index == NIL {
                return None;
            }
            // A stale `next` (the slot was popped and pushed back since we loaded `cur`) is
            // harmless: the tag has moved on, so the compare-exchange below fails.
            let next = self.meta[index as usize].next.load(Relaxed);
            let new = next_head(cur, next, cur & WAITING_BITS);
            match self
                .head
                .0
                .compare_exchange_weak(cur, new, Acquire, Acquire)
            {
                Ok(_) => return Some(index),
                Err(actual) => {
                    backoff.snooze();
                    cur = actual;
                }
            }
        }
    }

    /// Pops a slot, or registers `cx` in `cell` and sets `bit` in the head in the same
    /// compare-exchange that finds the list empty (module ground rules).
    #[inline]
    fn poll_pop(&self, cx: &mut Context<'_>, bit: u64, cell: &WakerCell) -> Poll<u32> {
        if let Some(slot) = self.pop() {
            return Poll::Ready(slot);
        }
        self.poll_pop_empty(cx, bit, cell)
    }

    /// [`poll_pop`](Self::poll_pop) once the list was found empty: registers, then takes a
    /// slot that came back meanwhile or marks the head waiting.
    #[inline(never)]
    fn poll_pop_empty(&self, cx: &mut Context<'_>, bit: u64, cell: &WakerCell) -> Poll<u32> {
        cell.register(cx.waker());
        let mut cur = self.head.0.load(Acquire);
        loop {
            let index = head_index(cur);
            let new = if index == NIL {
                next_head(cur, NIL, (cur & WAITING_BITS) | bit)
            } else {
                // A slot came back between the first attempt and now: take it and stop waiting.
                let next = self.meta[index as usize].next.load(Relaxed);
                next_head(cur, next, (cur & WAITING_BITS) & !bit)
            };
            match self.head.0.compare_exchange_weak(cur, new, AcqRel, Acquire) {
                Ok(_) if index == NIL => {
                    self.want_flush();
                    return Poll::Pending;
                }
                Ok(_) => return Poll::Ready(index),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Pushes a FREE slot on the shared list and wakes the waiters whose bits it cleared.
    fn push(&self, slot: u32) {
        let mut backoff = Backoff::new();
        let mut cur = self.head.0.load(Relaxed);
        loop {
            self.meta[slot as usize]
                .next
                .store(head_index(cur), Relaxed);
            // Clearing the waiting bits here is what hands the wakeup to us (module docs).
            let new = next_head(cur, slot, 0);
            match self.head.0.compare_exchange_weak(cur, new, AcqRel, Relaxed) {
                Ok(_) => break,
                Err(actual) => {
                    backoff.snooze();
                    cur = actual;
                }
            }
        }
        if cur & RX_WAITING != 0 {
            self.rx_waiter.wake();
        }
        if cur & TX_WAITING != 0 {
            self.tx_waiter.wake();
        }
    }

    /// The region's start and the metadata slice, for `heap::reclaim`.
    #[cfg(all(test, loom))]
    pub(crate) fn parts(&self) -> (core::ptr::NonNull<u8>, *const [SlotMeta]) {
        (self.region.ptr, self.meta as *const [SlotMeta])
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn waiting_bits(&self) -> (bool, bool) {
        let h = self.head.0.load(Acquire);
        (h & RX_WAITING != 0, h & TX_WAITING != 0)
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn waiters_registered(&self) -> (bool, bool) {
        (
            self.rx_waiter.is_registered(),
            self.tx_waiter.is_registered(),
        )
    }
}
