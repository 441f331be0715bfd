//! The `sync` shim: every atomic and `UnsafeCell` that carries synchronisation in this crate comes
//! from here, so that `RUSTFLAGS="--cfg loom"` swaps in loom's model-checked versions.
//!
//! Three deliberate exceptions are described here too, so there is one place to look:
//!
//! * [`StatCounter`] is always a `core` atomic. It holds statistics only (exhaustion counts, copy
//!   ledger), is only ever touched with `Relaxed`, and no decision is taken on its value, so loom
//!   gains nothing by exploring its interleavings; keeping it out of the model also lets the
//!   global copy ledger be a plain `static`.
//! * The counter that numbers threads (`thread.rs`) is a `core` atomic in a `static`: it only
//!   hands out distinct numbers (a `Relaxed` increment, once per thread), which loom has no
//!   interleaving of interest to explore in, and loom's atomics cannot live in a `static`.
//! * The one-time initialisation cells ([`crate::PoolCell`], [`crate::StaticPool`]) need `const`
//!   constructors that loom's types do not have; they do not exist under `cfg(loom)`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

pub(crate) use core::sync::atomic::Ordering;

/// Tells the processor (or loom's scheduler) that this thread is waiting for another one to
/// finish a short critical section. Under loom this is a yield, so the model lets the other
/// thread run instead of reporting a spin.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// An `UnsafeCell` with loom's closure-based API, so that code using it is written once.
#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// An `UnsafeCell` with loom's closure-based API, so that code using it is written once.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(core::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a shared pointer to the contents. The caller upholds the aliasing rules.
    #[cfg_attr(any(not(test), loom), allow(dead_code))]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a unique pointer to the contents. The caller upholds the aliasing rules.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A statistics counter: `Relaxed` increments, never used to synchronise anything, never modelled
/// by loom (see the module docs).
#[derive(Debug)]
pub(crate) struct StatCounter(core::sync::atomic::AtomicU64);

impl StatCounter {
    pub(crate) const fn new() -> Self {
        Self(core::sync::atomic::AtomicU64::new(0))
    }

    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn take(&self) -> u64 {
        self.0.swap(0, Ordering::Relaxed)
    }
}
