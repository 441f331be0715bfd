//! One registered task waker (smoltcp's `socket::WakerRegistration`).

use core::task::Waker;

/// At most one waker, woken (and forgotten) by [`wake`](Self::wake).
#[derive(Debug, Default)]
pub(crate) struct WakerRegistration {
    /// The registered waker, if any.
    waker: Option<Waker>,
}

impl WakerRegistration {
    /// No waker registered.
    pub(crate) const fn new() -> Self {
        Self { waker: None }
    }

    /// Register `w`, replacing the previous waker (kept when it wakes the same task).
    pub(crate) fn register(&mut self, w: &Waker) {
        match self.waker {
            // Both wake the same task: keep the old one and skip the clone.
            Some(ref w2) if w2.will_wake(w) => {}
            _ => self.waker = Some(w.clone()),
        }
    }

    /// Wake the registered waker, if any, and forget it.
    pub(crate) fn wake(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake()
        }
    }
}
