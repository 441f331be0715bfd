//! Unit tests. Most run on [`VirtualPlatform`], whose clock jumps to the deadline whenever the
//! executor waits, so timer tests are exact and instant. Real-time and epoll tests are in
//! `executor/tests/`; the loom models in `loom_tests.rs`.

mod tasks;
mod timers;
mod wheel_model;

use std::boxed::Box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

use crate::{Executor, Instant, Platform};

/// Virtual time: `wait` returns at once, jumping the clock to the deadline (or consuming a
/// pending signal). Waiting with no deadline and no signal would hang forever: it panics.
#[derive(Debug, Default)]
pub(crate) struct VirtualPlatform {
    now: AtomicU64,
    signaled: AtomicBool,
    pub(crate) waits: AtomicU64,
}

impl VirtualPlatform {
    pub(crate) fn advance(&self, nanos: u64) {
        self.now.fetch_add(nanos, SeqCst);
    }
}

impl Platform for VirtualPlatform {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.now.load(SeqCst))
    }

    fn wait(&self, deadline: Option<Instant>) {
        self.waits.fetch_add(1, SeqCst);
        if self.signaled.swap(false, SeqCst) {
            return;
        }
        match deadline {
            Some(d) => {
                self.now.fetch_max(d.as_nanos(), SeqCst);
            }
            None => panic!("executor waits forever: nothing can wake it"),
        }
    }

    fn signal(&self) {
        self.signaled.store(true, SeqCst);
    }
}

pub(crate) fn virtual_executor() -> (&'static VirtualPlatform, &'static Executor) {
    let p: &'static VirtualPlatform = Box::leak(Box::default());
    (p, Executor::leak(p))
}

pub(crate) const MS: u64 = 1_000_000;

static PANIC_VTABLE: core::task::RawWakerVTable = core::task::RawWakerVTable::new(
    |_| panic!("this waker's clone panics"),
    |_| {},
    |_| {},
    |_| {},
);

/// A waker whose `clone` panics: registering it must leave every structure consistent.
pub(crate) fn panicking_clone_waker() -> core::task::Waker {
    // SAFETY: the vtable's functions never use the data pointer.
    unsafe {
        core::task::Waker::from_raw(core::task::RawWaker::new(core::ptr::null(), &PANIC_VTABLE))
    }
}
