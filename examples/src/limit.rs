//! [`ConnLimit`]: at most N connection tasks at once; the acceptor waits for a free place.
//! [`Acceptor`]: a listener's `accept` that survives socket-slot exhaustion.

use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

use zcnet_executor::time::timeout;
use zcnet_executor::{Executor, Instant};
use zcnet_stack::tcp::{TcpListener, TcpSocket};

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

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the counts inconsistent (each critical
        // section is one assignment), so a poisoned lock is still usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
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

/// How often [`Acceptor::accept`] retries while sockets may still be closing.
pub const ACCEPT_RETRY: Duration = Duration::from_millis(500);
/// How long after the last accepted connection [`Acceptor::accept`] keeps retrying: smoltcp's
/// TIME-WAIT (10 s) plus the stack's linger limit for a dropped socket (60 s), with margin.
pub const ACCEPT_RETRY_WINDOW: Duration = Duration::from_secs(75);

/// A [`TcpListener`] whose `accept` also recovers when the stack ran out of socket slots.
///
/// `TcpListener::accept` re-arms a listening socket only when it is polled, and nothing wakes it
/// when a socket slot frees up: if every slot was taken (connections in TIME-WAIT after a burst
/// of closes) its listening sockets stay unarmed and `accept` sleeps for good. So for
/// [`ACCEPT_RETRY_WINDOW`] after each accepted connection (while closing sockets may still free
/// slots) the wait is cut into [`ACCEPT_RETRY`] slices, each of which re-arms; afterwards it waits
/// without a timer, so an idle server costs no wakeups.
#[derive(Debug)]
pub struct Acceptor {
    listener: TcpListener,
    exec: &'static Executor,
    retry_until: Instant,
}

impl Acceptor {
    /// Wraps `listener`, whose stack runs on `exec`.
    pub fn new(listener: TcpListener, exec: &'static Executor) -> Self {
        Acceptor {
            listener,
            exec,
            retry_until: exec.now(),
        }
    }

    /// The next established connection.
    pub async fn accept(&mut self) -> TcpSocket {
        loop {
            let sock = if self.exec.now() < self.retry_until {
                // `accept` is cancel-safe: a connection is taken only in the poll that returns it.
                match timeout(ACCEPT_RETRY, self.listener.accept()).await {
                    Ok(s) => s,
                    Err(_) => continue,
                }
            } else {
                self.listener.accept().await
            };
            self.retry_until = self.exec.now() + ACCEPT_RETRY_WINDOW;
            return sock;
        }
    }
}
