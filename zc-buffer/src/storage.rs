//! Giving a [`FramePool`] the `'static` home its leases need: [`StaticPool`] (memory in a
//! `static`, no allocator), [`PoolCell`] (a `static` slot for a pool over memory from elsewhere,
//! such as DMA memory), and [`FramePool::leak`] (heap memory, with the `alloc` feature).
//!
//! These need `const` constructors, which loom's atomics lack, so they do not exist under
//! `cfg(loom)` (the crate's `sync` shim explains why).

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU8, Ordering::*};

use crate::error::PoolError;
use crate::pool::{FramePool, PoolConfig};
use crate::region::FrameRegion;
use crate::slot::SlotMeta;

const EMPTY: u8 = 0;
const BUSY: u8 = 1;
const READY: u8 = 2;

/// A `static` home for one [`FramePool`], initialised once at run time.
///
/// ```
/// use zcnet_buffer::{FramePool, FrameRegion, PoolCell, PoolConfig, SlotMeta};
///
/// static CELL: PoolCell = PoolCell::new();
/// // Memory from elsewhere (DMA memory in a kernel; a leaked box here).
/// let memory: &'static mut [u8] = Box::leak(vec![0u8; 4 * 2048 + 64].into_boxed_slice());
/// let offset = memory.as_ptr().align_offset(64);
/// let region = FrameRegion::from_static(&mut memory[offset..]);
/// let meta = Box::leak(Box::new([const { SlotMeta::new() }; 4]));
///
/// let pool = CELL.init_with(|| FramePool::new(region, meta, PoolConfig::new(4))).unwrap();
/// assert_eq!(pool.slot_count(), 4);
/// assert!(CELL.get().is_some());
/// ```
pub struct PoolCell {
    /// EMPTY → BUSY (one initialiser) → READY, or back to EMPTY if the initialiser failed.
    state: AtomicU8,
    /// Written once by the initialiser that won EMPTY → BUSY; read only after READY.
    pool: UnsafeCell<MaybeUninit<FramePool>>,
}

// SAFETY: `pool` is written by exactly one thread (the winner of EMPTY -> BUSY) before the Release
// store of READY, and only read after an Acquire load sees READY; `FramePool` is `Sync`.
unsafe impl Sync for PoolCell {}

impl core::fmt::Debug for PoolCell {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PoolCell")
            .field("pool", &self.get())
            .finish()
    }
}

impl PoolCell {
    /// An empty cell.
    pub const fn new() -> Self {
        Self {
            state: AtomicU8::new(EMPTY),
            pool: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Builds the pool with `make` and stores it, once. Errors with
    /// [`PoolError::AlreadyInitialized`] if the cell is full or being filled on another core, or
    /// with `make`'s error (the cell then stays empty).
    pub fn init_with(
        &'static self,
        make: impl FnOnce() -> Result<FramePool, PoolError>,
    ) -> Result<&'static FramePool, PoolError> {
        if self
            .state
            .compare_exchange(EMPTY, BUSY, Acquire, Relaxed)
            .is_err()
        {
            return Err(PoolError::AlreadyInitialized);
        }
        match make() {
            Ok(pool) => {
                // SAFETY: winning EMPTY -> BUSY makes this the only thread touching `pool`, and no
                // reader looks at it before READY.
                unsafe { (*self.pool.get()).write(pool) };
                self.state.store(READY, Release);
                // SAFETY: just initialised; never written again.
                Ok(unsafe { (*self.pool.get()).assume_init_ref() })
            }
            Err(e) => {
                self.state.store(EMPTY, Release);
                Err(e)
            }
        }
    }

    /// The pool, once initialised.
    pub fn get(&self) -> Option<&FramePool> {
        if self.state.load(Acquire) == READY {
            // SAFETY: READY is stored (Release) only after the pool was written, and the pool is
            // never written again.
            Some(unsafe { (*self.pool.get()).assume_init_ref() })
        } else {
            None
        }
    }
}

impl Default for PoolCell {
    fn default() -> Self {
        Self::new()
    }
}

/// Slot memory aligned for DMA and cache lines.
#[repr(C, align(4096))]
struct Aligned<T>(T);

/// A complete pool in a `static`: `SLOTS` slots of `SLOT_SIZE` bytes, their metadata and the pool
/// itself, needing no allocator. `SLOT_SIZE` must be a multiple of
/// [`SLOT_ALIGN`](crate::SLOT_ALIGN). The memory sits in `.bss` and is device-addressed by CPU
/// address ([`AddressMap::Identity`](crate::AddressMap::Identity)).
///
/// ```
/// use zcnet_buffer::{StaticPool, DEFAULT_HEADROOM};
///
/// static POOL: StaticPool<64, 2048> = StaticPool::new();
/// let pool = POOL.init(DEFAULT_HEADROOM).unwrap();
/// let frame = pool.try_alloc_tx().unwrap();
/// assert_eq!(frame.headroom(), DEFAULT_HEADROOM);
/// assert!(POOL.init(DEFAULT_HEADROOM).is_err()); // once only
/// ```
pub struct StaticPool<const SLOTS: usize, const SLOT_SIZE: usize> {
    meta: UnsafeCell<[SlotMeta; SLOTS]>,
    memory: UnsafeCell<Aligned<[[u8; SLOT_SIZE]; SLOTS]>>,
    cell: PoolCell,
}

// SAFETY: `meta` and `memory` are turned into `&'static mut` exactly once, by the initialiser that
// wins the cell; afterwards they are reached only through the pool, which is `Sync`.
unsafe impl<const SLOTS: usize, const SLOT_SIZE: usize> Sync for StaticPool<SLOTS, SLOT_SIZE> {}

impl<const SLOTS: usize, const SLOT_SIZE: usize> core::fmt::Debug for StaticPool<SLOTS, SLOT_SIZE> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StaticPool")
            .field("cell", &self.cell)
            .finish_non_exhaustive()
    }
}

impl<const SLOTS: usize, const SLOT_SIZE: usize> StaticPool<SLOTS, SLOT_SIZE> {
    /// Uninitialised storage, for a `static`.
    pub const fn new() -> Self {
        Self {
            meta: UnsafeCell::new([const { SlotMeta::new() }; SLOTS]),
            memory: UnsafeCell::new(Aligned([[0; SLOT_SIZE]; SLOTS])),
            cell: PoolCell::new(),
        }
    }

    /// Builds the pool with `headroom` bytes of TX headroom, once.
    pub fn init(&'static self, headroom: usize) -> Result<&'static FramePool, PoolError> {
        self.cell.init_with(|| {
            let config = PoolConfig::new(SLOTS)
                .with_slot_size(SLOT_SIZE)
                .with_headroom(headroom);
            config.validate()?;
            // SAFETY: `init_with` runs this closure only in the one thread that won the cell, and
            // only until a pool is stored; a failed attempt (which stores nothing) dropped its
            // borrows before the cell became EMPTY again. So these are the only references.
            let (meta, memory) = unsafe { (&mut *self.meta.get(), &mut (*self.memory.get()).0) };
            let memory: &'static mut [u8] = memory.as_flattened_mut();
            FramePool::new(FrameRegion::from_static(memory), meta, config)
        })
    }

    /// The pool, once initialised.
    pub fn get(&self) -> Option<&FramePool> {
        self.cell.get()
    }
}

impl<const SLOTS: usize, const SLOT_SIZE: usize> Default for StaticPool<SLOTS, SLOT_SIZE> {
    fn default() -> Self {
        Self::new()
    }
}
