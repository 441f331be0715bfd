//! [`ConnLimit`]: at most N connection tasks at once; the acceptor waits for a free place.

use alloc::sync::Arc;
use core::future::poll_fn;
use core::task::{Poll, Waker};

use spin::Mutex;

#[derive(Debug)]
struct Inner {
    active: usize,
    max: usize,
    waiter: Option<Waker>,
}

/// Counts running connection tasks against a maximum. One acceptor waits in
/// [`acquire`](Self::acquire); each task holds a [`Permit`] and frees its place on drop.
#[derive(Clone, Debug)]
pub struct ConnLimit(Arc<Mutex<Inner>>);

/// A place among a [`ConnLimit`]'s `max`; dropping it frees the place and wakes the acceptor.
#[derive(Debug)]
pub struct Permit(ConnLimit);

impl ConnLimit {
    /// A limit of `max` (at least 1) concurrent holders.
    pub fn new(max: usize) -> Self {
        ConnLimit(Arc::new(Mutex::new(Inner {
            active: 0,
            max: max.max(1),
            waiter: None,
        })))
    }

    fn lock(&self) -> spin::MutexGuard<'_, Inner> {
        // A spin lock: each critical section is a few assignments and never waits, and the
        // lock is only taken by tasks (never by an interrupt handler).
        self.0.lock()
    }

    /// Waits until fewer than `max` permits are out, then takes one. Meant for one acceptor
    /// task (a second waiter would replace the first's waker).
    pub async fn acquire(&self) -> Permit {
        poll_fn(|cx| {
            let mut g = self.lock();
            if g.active < g.max {
                g.active += 1;
                Poll::Ready(Permit(self.clone()))
            } else {
                g.waiter = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    /// Permits out now.
    pub fn active(&self) -> usize {
        self.lock().active
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let waker = {
            let mut g = self.0.lock();
            g.active -= 1;
            g.waiter.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}
