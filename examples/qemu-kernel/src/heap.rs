//! The global allocator: a first-fit free list (`linked_list_allocator`) over a static arena.
//!
//! zcnet itself allocates nothing on its data path; the heap holds what the services build
//! once per connection or once at start (tasks, socket buffers, the driver). The arena is a
//! zero-initialised `static`, so it costs nothing in the ELF and `boot.rs` clears it with the
//! rest of `.bss`. When it runs out, Rust's allocation-error path panics ("memory allocation of
//! N bytes failed"), and the panic handler prints that and stops QEMU.
//!
//! The allocator's lock is a spin lock, so interrupt handlers must never allocate (they would
//! spin forever on a lock the interrupted code holds); none does.

use core::cell::UnsafeCell;

use linked_list_allocator::LockedHeap;

/// Size of the heap arena.
pub const HEAP_SIZE: usize = 32 * 1024 * 1024;

#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; HEAP_SIZE]>);

// SAFETY: the arena is handed to the allocator once, in `init`; afterwards only the allocator
// (behind its lock) reaches it.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0; HEAP_SIZE]));

#[global_allocator]
static ALLOCATOR: LockedHeap = LockedHeap::empty();

/// Gives the arena to the allocator. Call once, before anything allocates.
pub fn init() {
    // SAFETY: the arena is 'static, unused by anything else, and given to the allocator exactly
    // once (a second `init` would be a kernel bug: `main.rs` calls it once, at boot).
    unsafe { ALLOCATOR.lock().init(ARENA.0.get().cast::<u8>(), HEAP_SIZE) };
}

/// Bytes allocated now, and bytes still free.
pub fn usage() -> (usize, usize) {
    let heap = ALLOCATOR.lock();
    (heap.used(), heap.free())
}
