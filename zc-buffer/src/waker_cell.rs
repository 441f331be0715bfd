//! [`WakerCell`]: one waker slot that one party registers in and any thread or interrupt handler
//! wakes, without a lock.
//!
//! # Ground rules
//!
//! * At most one registrant at a time (the pool has one cell for the RX refiller and one for the
//!   TX waiter). A second concurrent `register` is ignored rather than corrupting the cell.
//! * Any number of concurrent `wake` calls, from any thread or from interrupt context.
//! * No lock, no waiting on the other side: when a `wake` lands while `register` is storing a
//!   waker, `register` itself does the wake before returning; when a `register` lands while a
//!   `wake` is taking the old waker, `register` wakes the new waker at once (its task is re-polled
//!   after the other side's few-instruction critical section). Either way the newest registered
//!   waker learns of every wake that happened after it was registered.
//! * The stored `Waker` is only touched by the party that moved `state` out of [`WAITING`]: the
//!   registrant while it holds [`REGISTERING`], a waker while it holds [`WAKING`] alone.

use core::task::Waker;

use crate::sync::{AtomicUsize, Ordering::*, UnsafeCell};

/// Idle: nobody is inside the cell. Whoever moves the state away from here owns the waker slot.
const WAITING: usize = 0;
/// A `register` call owns the waker slot.
const REGISTERING: usize = 0b01;
/// A `wake` call owns the waker slot (or, combined with `REGISTERING`, a wake arrived while a
/// registration was in progress and the registrant must deliver it).
const WAKING: usize = 0b10;

/// A lock-free single-registrant waker slot: one task registers, any thread or interrupt handler
/// wakes (see the module docs for the rules).
///
/// The pool uses two for its RX refiller and TX waiter; drivers use them to connect a device
/// interrupt to the task waiting on it (a `static` cell woken from the interrupt handler, the
/// waker registered by `Driver::poll_receive`), because [`wake`](Self::wake) never takes a lock
/// and never waits for the registrant.
///
/// ```
/// use core::task::{Context, Waker};
/// use zcnet_buffer::WakerCell;
///
/// static RX_DONE: WakerCell = WakerCell::new();
///
/// // Task side: register before checking the device, so a completion after the check wakes it.
/// RX_DONE.register(&Waker::noop());
/// // Interrupt side: wake whoever waits (nothing happens if nobody is registered).
/// RX_DONE.wake();
/// ```
pub struct WakerCell {
    state: AtomicUsize,
    /// Touched only by the owner of the slot, as defined by `state`.
    waker: UnsafeCell<Option<Waker>>,
}

impl core::fmt::Debug for WakerCell {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WakerCell")
            .field("state", &self.state.load(Relaxed))
            .finish_non_exhaustive()
    }
}

/// Ends a registration: leaves `REGISTERING` and delivers a wake that arrived meanwhile. It runs on
/// the normal path and also if cloning or dropping a waker panics while the registrant owns the
/// slot, so a panicking waker can neither wedge the cell nor swallow a wake.
struct FinishRegistration<'a>(&'a WakerCell);

impl Drop for FinishRegistration<'_> {
    fn drop(&mut self) {
        let cell = self.0;
        if cell
            .state
            .compare_exchange(REGISTERING, WAITING, AcqRel, Acquire)
            .is_err()
        {
            // A wake arrived while we were registering (state is REGISTERING|WAKING) and left
            // the delivery to us.
            // SAFETY: REGISTERING is still set, so this registration still owns the slot.
            let waker = cell.waker.with_mut(|slot| unsafe { (*slot).take() });
            cell.state.swap(WAITING, AcqRel);
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

impl WakerCell {
    /// An empty cell.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            state: AtomicUsize::new(WAITING),
            waker: UnsafeCell::new(None),
        }
    }

    /// An empty cell.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            state: AtomicUsize::new(WAITING),
            waker: UnsafeCell::new(None),
        }
    }

    /// Stores `waker` so that the next [`wake`](Self::wake) wakes it.
    ///
    /// An unchanged waker (`will_wake`) is kept without cloning; a different one replaces the old,
    /// which is dropped without being woken. One registrant at a time: a second `register` racing
    /// the first is ignored.
    pub fn register(&self, waker: &Waker) {
        self.register_stored(waker);
    }

    /// [`register`](Self::register), telling whether `waker` is now the stored one: `false`
    /// when a wake was taking the previous waker at that moment (then `waker` was woken at
    /// once instead, and its task must register again when it runs) or another registration
    /// was in progress.
    pub(crate) fn register_stored(&self, waker: &Waker) -> bool {
        match self
            .state
            .compare_exchange(WAITING, REGISTERING, Acquire, Acquire)
        {
            Ok(_) => {
                let finish = FinishRegistration(self);
                // SAFETY: moving `state` from WAITING to REGISTERING gave this call exclusive
                // ownership of the waker slot until it leaves REGISTERING (module ground rules);
                // `wake` never touches the slot while REGISTERING is set.
                let old = self.waker.with_mut(|slot| unsafe {
                    match &*slot {
                        Some(current) if current.will_wake(waker) => None,
                        _ => (*slot).replace(waker.clone()),
                    }
                });
                // Dropping the replaced waker may run foreign code; do it while we still own the
                // slot so that `finish` also runs if it panics.
                drop(old);
                drop(finish);
                true
            }
            Err(WAKING) => {
                // A wake is taking the previous waker right now (a few instructions); it happened
                // after our caller decided to wait, so the new waker must hear of it: the task is
                // re-polled once that wake is done. This is the only place a task is re-polled
                // without new work, and only while another core is inside `take`.
                crate::sync::spin_hint();
                waker.wake_by_ref();
                false
            }
            Err(_) => {
                // A concurrent `register` (a contract violation: one registrant at a time). Leave
                // the other registration in place; this caller is not woken by the cell.
                false
            }
        }
    }

    /// Wakes the registered waker, if any, and empties the cell. Callable from any thread and
    /// from interrupt context, any number of times concurrently.
    pub fn wake(&self) {
        if let Some(waker) = self.take() {
            waker.wake();
        }
    }

    /// Removes and returns the registered waker, if any.
    fn take(&self) -> Option<Waker> {
        match self.state.fetch_or(WAKING, AcqRel) {
            WAITING => {
                // SAFETY: we moved the state from WAITING to WAKING, so we own the slot until we
                // clear WAKING; `register` only touches it after winning WAITING -> REGISTERING.
                let waker = self.waker.with_mut(|slot| unsafe { (*slot).take() });
                self.state.fetch_and(!WAKING, Release);
                waker
            }
            _ => {
                // Either a registration is in progress (it will see WAKING and deliver the wake)
                // or another wake owns the slot and is delivering it already.
                None
            }
        }
    }

    /// Whether a waker is currently stored. Only meaningful when nobody else uses the cell.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn is_registered(&self) -> bool {
        if self.state.load(Acquire) != WAITING {
            return true;
        }
        // SAFETY: tests call this only when no other thread uses the cell.
        self.waker.with(|slot| unsafe { (*slot).is_some() })
    }
}

#[cfg(not(loom))]
impl Default for WakerCell {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the `Waker` inside is `Send + Sync`; access to it is serialised by `state` as the
// module's ground rules describe.
unsafe impl Send for WakerCell {}
// SAFETY: as above; every method takes `&self` and synchronises through `state`.
unsafe impl Sync for WakerCell {}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The cell on its own: a wake racing a re-registration with a different waker.

    use std::boxed::Box;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    use loom::thread;

    use super::WakerCell;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    /// A wake racing `register(new)` must wake someone: the old waker if it won, the new one if
    /// the registration won or overlapped (possibly both). And a wake that starts after the registration
    /// finished must wake the new waker.
    #[test]
    fn wake_vs_reregister_loses_no_wake() {
        loom::model(|| {
            let cell: &'static WakerCell = Box::leak(Box::new(WakerCell::new()));
            let (old_count, old) = waker();
            let (new_count, new) = waker();
            cell.register(&old);
            let done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
            let done2 = done.clone();
            let waker_thread = thread::spawn(move || {
                let registered_before = done2.load(Ordering::Acquire);
                cell.wake();
                registered_before
            });
            cell.register(&new);
            done.store(true, Ordering::Release);
            let registered_before = waker_thread.join().unwrap();
            let (o, n) = (
                old_count.0.load(Ordering::SeqCst),
                new_count.0.load(Ordering::SeqCst),
            );
            // Both may be woken (a registration landing inside a wake wakes the new waker too);
            // none is a lost wakeup.
            assert!(o + n >= 1, "a wake was lost (old {o}, new {n})");
            if registered_before {
                assert_eq!(n, 1, "a wake after the registration wakes the new waker");
            }
            // SAFETY: both threads are done with the cell.
            drop(unsafe { Box::from_raw(cell as *const WakerCell as *mut WakerCell) });
        });
    }
}
