//! [`FrameRegion`]: the `'static` memory a pool carves into slots, and how the device addresses it.

use core::ptr::NonNull;

/// How a CPU address inside the region becomes the address the device must be given.
#[derive(Clone, Copy, Debug)]
pub enum AddressMap {
    /// The device sees CPU addresses (identity-mapped kernels, TAP, tests).
    Identity,
    /// The region is physically contiguous and starts at `phys_base` (what a virtio `Hal`'s
    /// `dma_alloc` returns).
    Contiguous {
        /// Device (physical) address of the region's first byte.
        phys_base: u64,
    },
    /// Anything else: called with the CPU address of a slot's first byte, returns that byte's
    /// device address. The device is given one address per slot, so each slot must be contiguous
    /// in device memory (choose slot size and region alignment so that no slot straddles a
    /// discontinuity, e.g. slots that divide the page size on a page-aligned region).
    Custom(fn(usize) -> u64),
}

/// Memory for a pool's slots: `'static`, never moved, never freed while the pool lives.
#[derive(Debug)]
pub struct FrameRegion {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) len: usize,
    pub(crate) map: AddressMap,
}

impl FrameRegion {
    /// A region over ordinary memory the device addresses by CPU address: a `static` buffer or a
    /// leaked box.
    pub fn from_static(memory: &'static mut [u8]) -> Self {
        Self {
            len: memory.len(),
            ptr: NonNull::from(memory).cast(),
            map: AddressMap::Identity,
        }
    }

    /// A region over raw memory, typically DMA memory from the platform.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must be valid for reads and writes for the rest of the program
    /// (`'static`), must not be accessed through any other pointer while the pool built on it
    /// lives, and `map` must translate every slot start inside it to the address the device
    /// uses for that byte.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize, map: AddressMap) -> Self {
        Self { ptr, len, map }
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn device_addr(&self, cpu_addr: usize) -> u64 {
        match self.map {
            AddressMap::Identity => cpu_addr as u64,
            AddressMap::Contiguous { phys_base } => {
                phys_base + (cpu_addr - self.ptr.as_ptr() as usize) as u64
            }
            AddressMap::Custom(f) => f(cpu_addr),
        }
    }
}
