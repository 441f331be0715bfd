//! Which thread is calling: the pool's owner cache (`pool.rs`) and the one-thread wire
//! (`sim/wire.rs`) hand out state that only one thread may touch, and check the caller with
//! [`current`].
//!
//! A thread's number is assigned from a counter on its first call, so two threads never share
//! one (unlike a thread-local's address, which a new thread may reuse), and read from a
//! thread-local after that: no locked instruction, no `Arc` clone (as `std::thread::current`
//! makes). Under loom the thread-local is loom's, so each modelled thread has its own number.
//! Without `std` there is no thread-local: [`current`] is `None` and nothing is handed out.

/// The calling thread's number (never 0), or `None` without `std`.
#[cfg(any(loom, feature = "std"))]
#[inline]
pub(crate) fn current() -> Option<u64> {
    use core::cell::Cell;
    use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

    static NEXT: AtomicU64 = AtomicU64::new(1);
    #[cfg(not(loom))]
    std::thread_local! {
        static ID: Cell<u64> = const { Cell::new(0) };
    }
    #[cfg(loom)]
    loom::thread_local! {
        static ID: Cell<u64> = Cell::new(0);
    }
    Some(ID.with(|id| match id.get() {
        0 => {
            let fresh = NEXT.fetch_add(1, Relaxed);
            id.set(fresh);
            fresh
        }
        known => known,
    }))
}

/// The calling thread's number (never 0), or `None` without `std`.
#[cfg(not(any(loom, feature = "std")))]
#[inline]
pub(crate) fn current() -> Option<u64> {
    None
}
