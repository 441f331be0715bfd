//! [`FramePool::leak`]: a pool on the heap, for std programs and tests.

extern crate alloc;

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::alloc::Layout;
use core::ptr::NonNull;

use crate::error::PoolError;
use crate::pool::{FramePool, PoolConfig};
use crate::region::{AddressMap, FrameRegion};
use crate::slot::SlotMeta;

/// Alignment of heap regions: a page, as DMA-capable memory would be.
const HEAP_ALIGN: usize = 4096;

impl FramePool {
    /// Allocates slot memory (page-aligned, zeroed), metadata and the pool on the heap and leaks
    /// them, so the pool lives for the rest of the program. Device addresses are CPU addresses.
    pub fn leak(config: PoolConfig) -> Result<&'static FramePool, PoolError> {
        config.validate()?;
        let region = leak_region(config.region_len())?;
        let meta: Vec<SlotMeta> = (0..config.slots).map(|_| SlotMeta::new()).collect();
        let meta: &'static mut [SlotMeta] = Box::leak(meta.into_boxed_slice());
        let pool = FramePool::new(region, meta, config)?;
        Ok(Box::leak(Box::new(pool)))
    }
}

fn leak_region(len: usize) -> Result<FrameRegion, PoolError> {
    let layout = Layout::from_size_align(len, HEAP_ALIGN).map_err(|_| PoolError::OutOfMemory)?;
    // SAFETY: `len` is non-zero (validated config: at least one slot of non-zero size).
    let ptr = unsafe { alloc::alloc::alloc_zeroed(layout) };
    let ptr = NonNull::new(ptr).ok_or(PoolError::OutOfMemory)?;
    // SAFETY: a fresh allocation of `len` bytes that is never freed (leaked) and reachable only
    // through this region; CPU addresses are what a host-side test device uses.
    Ok(unsafe { FrameRegion::from_raw(ptr, len, AddressMap::Identity) })
}

/// Frees a pool made by [`FramePool::leak`], for tests that build many pools (loom runs one per
/// explored execution).
///
/// # Safety
///
/// `pool` came from [`FramePool::leak`], every lease on it has been dropped, and no reference to
/// it is used afterwards.
#[cfg(all(test, loom))]
pub(crate) unsafe fn reclaim(pool: &'static FramePool) {
    let config = pool.config();
    let (region, meta) = pool.parts();
    let pool = pool as *const FramePool as *mut FramePool;
    // SAFETY: the pool, its metadata and its region were allocated by `leak` with exactly these
    // types and layouts, and the caller guarantees nobody uses them any more.
    unsafe {
        drop(Box::from_raw(pool));
        drop(Box::from_raw(meta as *mut [SlotMeta]));
        let layout = Layout::from_size_align_unchecked(config.region_len(), HEAP_ALIGN);
        alloc::alloc::dealloc(region.as_ptr(), layout);
    }
}
