//! The `virtio_drivers::Hal` of an identity-mapped kernel.
//!
//! What a kernel's `Hal` must do for virtio-drivers (and so for zcnet's virtio driver):
//!
//! * `dma_alloc`: physically contiguous, page-aligned, zeroed memory for the virtqueues (their
//!   descriptor tables and rings), with its physical address. Here: pages bumped off a static
//!   arena; physical = virtual because `boot.rs` identity-maps the first 4 GiB.
//! * `dma_dealloc`: give them back. Here the arena only grows (bump allocation): virtqueues are
//!   made once at boot and live as long as the kernel, so nothing is ever returned; a freed
//!   range is leaked, which this kernel never does in practice.
//! * `mmio_phys_to_virt`: where the CPU reaches a BAR. Identity.
//! * `share` / `unshare`: make a buffer visible to the device and return its device address.
//!   zcnet posts frame-pool slots directly, so this is the place a careless `Hal` would
//!   copy (bounce buffers) and undo zero copy. Here `share` returns the buffer's own address
//!   (the pool's memory is ordinary, identity-mapped RAM the device can reach) and `unshare`
//!   does nothing. A kernel with an IOMMU or encrypted memory would map or bounce here.

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use virtio_drivers::{BufferDirection, Hal, PhysAddr, PAGE_SIZE};

/// Pages available for virtqueues: plenty for one NIC with two 256-entry queues.
const DMA_PAGES: usize = 64;

#[repr(C, align(4096))]
struct DmaArena(UnsafeCell<[u8; DMA_PAGES * PAGE_SIZE]>);

// SAFETY: pages are handed out at most once each (the bump index only grows, see `dma_alloc`),
// and each handed-out range is then owned by its virtqueue.
unsafe impl Sync for DmaArena {}

static DMA_ARENA: DmaArena = DmaArena(UnsafeCell::new([0; DMA_PAGES * PAGE_SIZE]));
/// Pages handed out so far.
static DMA_USED: AtomicUsize = AtomicUsize::new(0);

/// The kernel's `Hal`: identity mapping, DMA pages from a static arena, no bounce buffers.
#[derive(Debug)]
pub struct KernelHal;

// SAFETY: `dma_alloc` returns page-aligned, zeroed, unaliased memory (each page handed out once)
// whose physical address is its virtual address (identity map); `mmio_phys_to_virt` returns the
// identity-mapped BAR address; `share` returns the device address of the very buffer.
unsafe impl Hal for KernelHal {
    fn dma_alloc(pages: usize, _direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let first = DMA_USED.fetch_add(pages, Relaxed);
        if first + pages > DMA_PAGES {
            // virtio-drivers turns a zero physical address into `Error::DmaError`.
            DMA_USED.fetch_sub(pages, Relaxed);
            return (0, NonNull::dangling());
        }
        // SAFETY: `first..first + pages` is inside the arena and was never handed out before.
        let ptr = unsafe { DMA_ARENA.0.get().cast::<u8>().add(first * PAGE_SIZE) };
        // SAFETY: the range is inside the arena and owned by this call (see above). It is
        // zero since boot, but virtio-drivers' contract asks for zeroed pages: say it.
        unsafe { ptr.write_bytes(0, pages * PAGE_SIZE) };
        let ptr = NonNull::new(ptr).expect("the arena is not at address 0");
        (ptr.as_ptr() as PhysAddr, ptr)
    }

    unsafe fn dma_dealloc(_paddr: PhysAddr, _vaddr: NonNull<u8>, _pages: usize) -> i32 {
        // Bump allocation: the pages stay leaked (see the module docs).
        0
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, _size: usize) -> NonNull<u8> {
        NonNull::new(paddr as *mut u8).expect("virtio-drivers never maps BAR address 0")
    }

    unsafe fn share(buffer: NonNull<[u8]>, _direction: BufferDirection) -> PhysAddr {
        buffer.cast::<u8>().as_ptr() as PhysAddr
    }

    unsafe fn unshare(_paddr: PhysAddr, _buffer: NonNull<[u8]>, _direction: BufferDirection) {}
}
