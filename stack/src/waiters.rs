//! [`WaitList`]: a few tasks waiting for a state change, without allocation.

use core::task::Waker;

/// Up to `N` tasks waiting for something the stack's state will tell them (a new address, a
/// link change). Lives inside the stack's state, so its users have the state borrowed.
///
/// Waiters re-check their condition when woken and register again, so a full list may wake
/// everyone early: a newcomer that finds no room wakes the current waiters and takes the first
/// place. Nobody is ever forgotten; at worst some re-check once more than needed.
pub(crate) struct WaitList<const N: usize> {
    wakers: [Option<Waker>; N],
}

impl<const N: usize> WaitList<N> {
    /// Nobody waiting.
    pub(crate) const fn new() -> Self {
        Self {
            wakers: [const { None }; N],
        }
    }

    /// Adds `waker` (once: a waker that would wake the same task is not added twice).
    pub(crate) fn register(&mut self, waker: &Waker) {
        if self.wakers.iter().flatten().any(|w| w.will_wake(waker)) {
            return;
        }
        if let Some(slot) = self.wakers.iter_mut().find(|w| w.is_none()) {
            *slot = Some(waker.clone());
            return;
        }
        // Full: wake everyone (they re-check and re-register), keep the newcomer.
        self.wake_all();
        self.wakers[0] = Some(waker.clone());
    }

    /// Wakes and forgets every waiter.
    pub(crate) fn wake_all(&mut self) {
        for w in self.wakers.iter_mut() {
            if let Some(w) = w.take() {
                w.wake();
            }
        }
    }
}
