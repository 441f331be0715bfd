//! [`IdentityHal`], the test `Hal` of a host process, shared by the ring's unit tests
//! (`src/ring.rs`) and the fake-device tests (`tests/fake_device.rs`), which include this file
//! with `#[path]`.

extern crate std;

use core::ptr::NonNull;
use std::alloc::{alloc_zeroed, Layout};

use virtio_drivers::{BufferDirection, Hal, PhysAddr, PAGE_SIZE};

/// A `Hal` for a host process: DMA pages from the heap, device addresses are CPU addresses.
pub struct IdentityHal;

// SAFETY: `dma_alloc` returns zeroed, page-aligned memory that is never freed (the tests leak
// it, since a fake device may still look at a queue a test dropped), and device addresses equal
// CPU addresses in this process.
unsafe impl Hal for IdentityHal {
    fn dma_alloc(pages: usize, _direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let layout = Layout::from_size_align(pages * PAGE_SIZE, PAGE_SIZE).unwrap();
        // SAFETY: the layout has a non-zero size (the driver never asks for 0 pages).
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).expect("out of memory");
        (ptr.as_ptr() as PhysAddr, ptr)
    }

    unsafe fn dma_dealloc(_paddr: PhysAddr, _vaddr: NonNull<u8>, _pages: usize) -> i32 {
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
