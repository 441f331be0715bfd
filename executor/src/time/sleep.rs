//! [`Sleep`]: a future that completes at a deadline, backed by an intrusive wheel entry.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::ptr::addr_of_mut;
use core::task::{Context, Poll};
use core::time::Duration;

use super::wheel::{Entry, Place};
use crate::executor::Core;
use crate::platform::Instant;

/// When a `Sleep` ends: fixed, or relative to its first poll.
#[derive(Clone, Copy, Debug)]
enum Deadline {
    At(Instant),
    After(Duration),
}

/// Completes at its deadline. Made by [`sleep()`](super::sleep()), [`sleep_until`](super::sleep_until)
/// or [`Executor::sleep`](crate::Executor::sleep).
///
/// Its timer entry is linked into the executor's wheel on the first poll (never before), and
/// unlinked when it is dropped (cancellation is O(1)). A deadline already past completes on
/// the first poll without touching the wheel. A `Sleep` from an [`Executor`](crate::Executor)
/// method is bound to that executor; one from a free function picks its executor on the first
/// poll, as the [`time`](super) module docs say (or waits there for the first executor to run, if none has yet).
///
/// `!Unpin`: the entry's address is in the wheel while it is linked, and every `&mut Sleep`
/// (a `Pin<&mut Sleep>` included) overlaps that entry; see `wheel.rs` for why that is sound.
pub struct Sleep {
    entry: Entry,
    deadline: Deadline,
    core: Option<&'static Core>,
}

// `Sleep` must stay `!Unpin` (wheel.rs, ground rules). Were it `Unpin`, both impls below would
// apply to it and the path in the last line would be ambiguous: a compile error.
const _: () = {
    trait AmbiguousIfUnpin<A> {
        fn check() {}
    }
    impl<T: ?Sized> AmbiguousIfUnpin<()> for T {}
    impl<T: ?Sized + Unpin> AmbiguousIfUnpin<u8> for T {}
    let _ = <Sleep as AmbiguousIfUnpin<_>>::check;
};

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl Sleep {
    pub(crate) fn at(deadline: Instant) -> Self {
        Self {
            entry: Entry::new(),
            deadline: Deadline::At(deadline),
            core: None,
        }
    }

    pub(crate) fn after(duration: Duration) -> Self {
        Self {
            entry: Entry::new(),
            deadline: Deadline::After(duration),
            core: None,
        }
    }

    /// Binds the sleep to `core` up front (for sleeps made outside tasks).
    pub(crate) fn bind(&mut self, core: &'static Core) {
        self.core = Some(core);
    }

    /// The deadline, once known (always for `sleep_until`; after the first poll for `sleep`).
    pub fn deadline(&self) -> Option<Instant> {
        match self.deadline {
            Deadline::At(t) => Some(t),
            Deadline::After(_) => None,
        }
    }

    /// Re-arms the sleep for a new deadline (cancelling the old one), as if newly made.
    pub fn reset(self: Pin<&mut Self>, deadline: Instant) {
        // SAFETY: nothing is moved out of the pinned struct; `entry` stays where it is. The
        // `&mut Sleep` overlaps the entry while it may be linked (the executor's thread may
        // write it through the wheel's raw pointers, under the lock): sound only because
        // `Sleep` is `!Unpin`, so the reference claims no uniqueness (wheel.rs, ground rules).
        let this = unsafe { self.get_unchecked_mut() };
        if let Some(core) = this.core {
            let mut timers = core.timers.lock();
            // SAFETY: the entry is live and pinned; the timer lock is held.
            unsafe { timers.wheel.remove(this.entry.state()) };
        }
        this.deadline = Deadline::At(deadline);
    }

    fn resolve(&mut self, core: &'static Core) -> Instant {
        let at = match self.deadline {
            Deadline::At(t) => t,
            Deadline::After(d) => core.now() + d,
        };
        self.deadline = Deadline::At(at);
        at
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: nothing is moved out of the pinned struct; `entry` stays where it is. The
        // `&mut Sleep` overlaps the entry while it may be linked (the executor's thread may
        // write it through the wheel's raw pointers, under the lock): sound only because
        // `Sleep` is `!Unpin`, so the reference claims no uniqueness (wheel.rs, ground rules).
        // The entry itself is only ever reached through `state()`'s raw pointer.
        let this = unsafe { self.get_unchecked_mut() };
        let core = match this.core {
            Some(c) => c,
            None => {
                // Before any executor has run a loop there is no clock: wait for one (woken
                // when the first starts); the duration counts from then.
                let Some(c) = Core::for_timers(cx) else {
                    return Poll::Pending;
                };
                this.core = Some(c);
                c
            }
        };
        let state = this.entry.state().as_ptr();
        let mut timers = core.timers.lock();
        // SAFETY: the entry is pinned inside `this` and only touched under the timer lock.
        let place = unsafe { *addr_of_mut!((*state).place) };
        match place {
            Place::Fired => Poll::Ready(()),
            Place::Pending => {
                // Expired but not yet collected by the executor: complete now. The waker is
                // taken out and dropped after the lock (a waker's drop may re-enter the executor).
                // SAFETY: as above.
                let old = unsafe {
                    timers.wheel.remove(this.entry.state());
                    *addr_of_mut!((*state).place) = Place::Fired;
                    (*addr_of_mut!((*state).waker)).take()
                };
                drop(timers);
                drop(old);
                Poll::Ready(())
            }
            Place::Wheel { .. } => {
                // SAFETY: as above.
                let same = unsafe { (*addr_of_mut!((*state).waker)).as_ref() }
                    .is_some_and(|w| w.will_wake(cx.waker()));
                if !same {
                    // Clone without the lock held, so a panicking clone leaves the wheel intact.
                    drop(timers);
                    let waker = cx.waker().clone();
                    timers = core.timers.lock();
                    // SAFETY: as above.
                    match unsafe { *addr_of_mut!((*state).place) } {
                        Place::Wheel { .. } => {
                            // SAFETY: as above; the old waker is dropped after the lock below.
                            let old = unsafe { (*addr_of_mut!((*state).waker)).replace(waker) };
                            drop(timers);
                            drop(old);
                        }
                        _ => {
                            // Expired meanwhile: done. If the executor has not collected the
                            // entry yet (Pending), the old waker is taken here instead. Both it
                            // and the unused clone are dropped after the lock, like every
                            // waker (a waker's drop may run foreign code, even re-enter us).
                            // SAFETY: as above.
                            let old = unsafe {
                                timers.wheel.remove(this.entry.state());
                                *addr_of_mut!((*state).place) = Place::Fired;
                                (*addr_of_mut!((*state).waker)).take()
                            };
                            drop(timers);
                            drop(waker);
                            drop(old);
                            return Poll::Ready(());
                        }
                    }
                }
                Poll::Pending
            }
            Place::Idle => {
                // One lock for the common case (a task re-arming its own timer): the deadline
                // is resolved and the entry linked without letting go of it in between.
                let deadline = this.resolve(core);
                if deadline <= core.now() {
                    drop(timers);
                    // SAFETY: not linked, so nobody else looks at it.
                    unsafe { *addr_of_mut!((*state).place) = Place::Fired };
                    return Poll::Ready(());
                }
                // A waker left from before a `reset` is kept when it would wake the same task
                // (the usual case), saving a clone and a drop.
                // SAFETY: Idle: the entry is not linked, so nobody else looks at it.
                let same = unsafe { (*addr_of_mut!((*state).waker)).as_ref() }
                    .is_some_and(|w| w.will_wake(cx.waker()));
                let mut old = None;
                if !same {
                    // Cloned without the lock held, so a panicking clone leaves the wheel
                    // intact. The entry stays Idle meanwhile: only its owner (us) links it.
                    drop(timers);
                    let waker = cx.waker().clone();
                    timers = core.timers.lock();
                    // SAFETY: Idle and not linked: nobody else looks at the entry. The
                    // replaced waker is dropped after the lock is released.
                    old = unsafe { (*addr_of_mut!((*state).waker)).replace(waker) };
                }
                let tick = core.deadline_tick(deadline);
                // SAFETY: the entry is pinned, Idle, and stays alive until `Drop` unlinks it;
                // the lock is held.
                unsafe { timers.wheel.insert(this.entry.state(), tick) };
                core.note_insert(&timers);
                let signal = timers.note_insert(tick);
                drop(timers);
                drop(old);
                if signal {
                    core.signal();
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Sleep {
    // `&mut self` overlaps the entry, which may still be linked until the `remove` below: sound
    // only because `Sleep` is `!Unpin` (wheel.rs, ground rules).
    fn drop(&mut self) {
        let Some(core) = self.core else { return };
        let mut timers = core.timers.lock();
        // SAFETY: the entry is live (we are its owner, being dropped) and the lock is held.
        unsafe { timers.wheel.remove(self.entry.state()) };
        drop(timers);
        // The entry's waker, if any, is dropped with the fields, after the lock was released.
    }
}
