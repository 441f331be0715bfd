//! The `sync` shim: atomics, cells and the one lock this crate uses, switched to loom's
//! model-checked versions under `RUSTFLAGS="--cfg loom"`.
//!
//! (zcnet-buffer has a shim of its own: the dependency rules keep the executor free of zcnet's
//! other crates, and each shim is a dozen lines.)

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};

pub(crate) use core::sync::atomic::Ordering;

/// Which task the calling thread is polling from the lock-free run queue: set by the executor
/// from just before each such poll to just after the locked instruction that ends it, before
/// any code of the task's can run again (`TaskRef::poll`, saving and restoring an outer one,
/// for a `run_until_idle` inside a task), null otherwise. A waker that finds its own task here
/// runs on the thread that holds the task (QUEUED) and ends its poll afterwards, so it may
/// leave word of a wake or of a reference in the header's poll-thread cells instead of a
/// locked instruction on the state word (see the `task` module docs).
///
/// The same word also records which executor's code the thread runs, for timers polled with
/// a foreign waker (the executor module's `running`): a task's address names that task's
/// executor, and outside task polls a loop stores its executor's address with bit 0 set,
/// which never equals a task's address.
///
/// With `std` a thread-local (loom's under loom); without it there is no way to tell one context
/// (an interrupt handler, another core) from another, so it always reads null and wakers take
/// the lock-free path.
pub(crate) mod polling {
    use core::ptr;

    #[cfg(all(feature = "std", not(loom)))]
    std::thread_local! {
        static POLLING: core::cell::Cell<*const ()> = const { core::cell::Cell::new(ptr::null()) };
    }

    #[cfg(loom)]
    loom::thread_local! {
        static POLLING: core::cell::Cell<*const ()> = core::cell::Cell::new(ptr::null());
    }

    /// The task the calling thread polls from the run queue right now (null: none), or a
    /// tagged executor address (see the module docs).
    #[inline]
    pub(crate) fn current() -> *const () {
        #[cfg(any(feature = "std", loom))]
        {
            POLLING.with(|p| p.get())
        }
        #[cfg(not(any(feature = "std", loom)))]
        {
            ptr::null()
        }
    }

    /// A poll of one task on the calling thread: [`current`] names the task until the scope
    /// is dropped, which puts back whatever it named before (also when the poll unwinds).
    pub(crate) struct Scope {
        #[cfg_attr(not(any(feature = "std", loom)), allow(dead_code))]
        outer: *const (),
    }

    impl Scope {
        /// The calling thread starts polling `task`.
        #[inline]
        pub(crate) fn enter(task: *const ()) -> Scope {
            #[cfg(any(feature = "std", loom))]
            let outer = POLLING.with(|p| p.replace(task));
            #[cfg(not(any(feature = "std", loom)))]
            let outer = {
                let _ = task;
                ptr::null()
            };
            Scope { outer }
        }
    }

    impl Drop for Scope {
        #[inline]
        fn drop(&mut self) {
            #[cfg(any(feature = "std", loom))]
            POLLING.with(|p| p.set(self.outer));
        }
    }
}

/// The lock guarding the timer wheel: a spin lock normally (no OS needed; critical sections are
/// a few list operations), loom's mutex under loom.
#[cfg(loom)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap()
    }
}

#[cfg(not(loom))]
pub(crate) use spin::Mutex;

#[cfg(not(loom))]
mod spin {
    use core::cell::UnsafeCell;
    use core::ops::{Deref, DerefMut};
    use core::sync::atomic::{AtomicBool, Ordering};

    /// A test-and-test-and-set spin lock. Never taken in interrupt context (see the executor's
    /// ground rules), so a holder cannot be interrupted by another would-be holder on its core.
    pub(crate) struct Mutex<T> {
        locked: AtomicBool,
        value: UnsafeCell<T>,
    }

    // SAFETY: `value` is reached only through a guard, and at most one guard exists at a time
    // (`locked` is acquired with an Acquire compare-exchange and released with a Release store).
    unsafe impl<T: Send> Sync for Mutex<T> {}
    // SAFETY: moving the lock moves the value; no thread-affine state inside.
    unsafe impl<T: Send> Send for Mutex<T> {}

    impl<T> Mutex<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self {
                locked: AtomicBool::new(false),
                value: UnsafeCell::new(value),
            }
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            loop {
                if self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return MutexGuard(self);
                }
                while self.locked.load(Ordering::Relaxed) {
                    core::hint::spin_loop();
                }
            }
        }

        /// Whether some thread holds the lock right now (tests use it to prove a callback ran
        /// outside the lock).
        #[cfg(test)]
        pub(crate) fn is_locked(&self) -> bool {
            self.locked.load(Ordering::Acquire)
        }
    }

    /// Holds the lock; releases it on drop (also during unwinding).
    pub(crate) struct MutexGuard<'a, T>(&'a Mutex<T>);

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: the guard's existence means this thread holds the lock.
            unsafe { &*self.0.value.get() }
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: the guard's existence means this thread holds the lock, and `&mut self`
            // makes this borrow unique.
            unsafe { &mut *self.0.value.get() }
        }
    }

    impl<T> Drop for MutexGuard<'_, T> {
        fn drop(&mut self) {
            self.0.locked.store(false, Ordering::Release);
        }
    }
}
