//! One registered task waker (smoltcp's `socket::WakerRegistration`), woken through the
//! executor's local run queue when the stack has its local spawner.

use core::task::Waker;

use zcnet_executor::LocalSpawner;

/// At most one waker, woken by [`wake`](Self::wake) once per registration.
#[derive(Debug, Default)]
pub(crate) struct WakerRegistration {
    /// The registered waker, if any. Kept after a local wake, so that the next registration by
    /// the same task neither clones nor drops one (each is a locked instruction).
    waker: Option<Waker>,
    /// A registration not yet woken.
    armed: bool,
    /// The stack's local spawner when the waker was registered (see `State::local`).
    local: Option<LocalSpawner>,
}

impl WakerRegistration {
    /// No waker registered.
    pub(crate) const fn new() -> Self {
        Self {
            waker: None,
            armed: false,
            local: None,
        }
    }

    /// Register `w`, replacing the previous waker (kept when it wakes the same task); `local`
    /// is the stack's local spawner, if it has one.
    pub(crate) fn register(&mut self, w: &Waker, local: Option<LocalSpawner>) {
        match self.waker {
            // Both wake the same task: keep the old one and skip the clone.
            Some(ref w2) if w2.will_wake(w) => {}
            _ => self.waker = Some(w.clone()),
        }
        self.armed = true;
        self.local = local;
    }

    /// Wake the registered waker, if it was not woken since it was registered: through the
    /// local run queue (the waker is kept for the next registration), else by value (and
    /// forgotten).
    pub(crate) fn wake(&mut self) {
        if !core::mem::take(&mut self.armed) {
            return;
        }
        match (&self.waker, &self.local) {
            (Some(w), Some(local)) => local.wake(w),
            _ => {
                if let Some(w) = self.waker.take() {
                    w.wake()
                }
            }
        }
    }
}
