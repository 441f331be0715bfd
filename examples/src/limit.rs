//! [`ConnLimit`]: at most N connection tasks at once; when all N are taken, the acceptor makes
//! room by shedding the connection that has waited longest for its client, or waits for one
//! to end. And [`keep_alive`], the TCP keep-alive the example servers turn on.
//!
//! # Shedding
//!
//! Each connection task holds a [`Permit`] and says what it is doing: waiting for its client
//! ([`Permit::waiting`]: between requests, or while a request arrives) or working for it
//! ([`Permit::working`]: writing a response, echoing). When the acceptor has a new connection
//! and every place is taken ([`ConnLimit::acquire_shedding`]), it asks the permit that has been
//! waiting longest (by the time it started waiting), if that is at least a given time
//! (`shed_after`), to give its place up; that task sees it in [`Permit::unless_shed`], ends
//! its connection with a reset, and its place goes to the new connection. A working
//! connection is never shed: a deadline on each write bounds it. Nor is one that has waited
//! less than `shed_after`, so a keep-alive client between two requests it sends back to back
//! keeps its connection; the acceptor then waits until a place frees or a waiting connection
//! reaches that age.
//!
//! So clients that connect and then trickle bytes (slowloris) or sit idle cannot lock new
//! clients out: each new connection displaces the oldest of them, while clients that send
//! their requests promptly are served, since a request that arrives in one go is complete
//! long before its connection is the oldest waiting.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::future::{poll_fn, Future};
use core::pin::{pin, Pin};
use core::task::{Poll, Waker};
use core::time::Duration;

use spin::Mutex;
use zcnet_executor::time::{now, sleep_until};
use zcnet_executor::Instant;
use zcnet_stack::tcp::TcpSocket;

/// Keep-alive probes a server's connection may leave unanswered: the connection ends when its
/// peer stays silent for this many keep-alive intervals ([`keep_alive`]).
pub const KEEPALIVE_PROBES: u32 = 3;

/// Turns on TCP keep-alive for a server's connection: a probe after `interval` without
/// traffic, and the connection ends with `TimedOut` when the peer stays silent for
/// [`KEEPALIVE_PROBES`] intervals (the socket's timeout, which also bounds how long data may go
/// unacknowledged).
pub fn keep_alive(sock: &mut TcpSocket, interval: Duration) {
    sock.set_keep_alive(Some(interval));
    sock.set_timeout(Some(interval * KEEPALIVE_PROBES));
}

/// One place of a [`ConnLimit`].
#[derive(Debug, Default)]
struct Place {
    /// Held by a permit.
    taken: bool,
    /// Waiting for its client since then (sheddable), or working (`None`).
    waiting_since: Option<Instant>,
    /// Asked to give the place up.
    shed: bool,
    /// The holder's task, woken when asked.
    waker: Option<Waker>,
}

#[derive(Debug)]
struct Inner {
    places: Vec<Place>,
    active: usize,
    shed_asked: u64,
    waiter: Option<Waker>,
}

/// Counts running connection tasks against a maximum, and sheds waiting connections to make
/// room (see the [module docs](self)). One acceptor waits in [`acquire`](Self::acquire) or
/// [`acquire_shedding`](Self::acquire_shedding); each task holds a [`Permit`] and frees its
/// place on drop.
#[derive(Clone, Debug)]
pub struct ConnLimit(Arc<Mutex<Inner>>);

/// A place among a [`ConnLimit`]'s `max`; dropping it frees the place and wakes the acceptor.
#[derive(Debug)]
pub struct Permit {
    limit: ConnLimit,
    place: usize,
}

/// The connection was shed to make room for a new one ([`Permit::unless_shed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shed;

impl ConnLimit {
    /// A limit of `max` (at least 1) concurrent holders.
    pub fn new(max: usize) -> Self {
        let places = (0..max.max(1)).map(|_| Place::default()).collect();
        ConnLimit(Arc::new(Mutex::new(Inner {
            places,
            active: 0,
            shed_asked: 0,
            waiter: None,
        })))
    }

    fn lock(&self) -> spin::MutexGuard<'_, Inner> {
        // A spin lock: each critical section is a few assignments and a walk over at most
        // `max` places, and never waits; the lock is only taken by tasks (never by an
        // interrupt handler).
        self.0.lock()
    }

    /// Waits until fewer than `max` permits are out, then takes one. Meant for one acceptor
    /// task (a second waiter would replace the first's waker).
    pub async fn acquire(&self) -> Permit {
        self.take(None).await
    }

    /// Like [`acquire`](Self::acquire), but when every place is taken, asks the permit that
    /// has waited longest for its client to give its place up, once it has waited at least
    /// `shed_after` (one request at a time), and takes that place when it is freed. Waits as
    /// `acquire` does while no permit has waited that long.
    pub async fn acquire_shedding(&self, shed_after: Duration) -> Permit {
        self.take(Some(shed_after)).await
    }

    async fn take(&self, shed_after: Option<Duration>) -> Permit {
        // Wakes the acceptor when the oldest waiting permit becomes old enough to shed.
        let mut timer = pin!(sleep_until(Instant::MAX));
        poll_fn(|cx| {
            let mut g = self.lock();
            if let Some(place) = g.places.iter().position(|p| !p.taken) {
                g.places[place] = Place {
                    taken: true,
                    ..Place::default()
                };
                g.active += 1;
                return Poll::Ready(Permit {
                    limit: self.clone(),
                    place,
                });
            }
            g.waiter = Some(cx.waker().clone());
            let mut wake_at = None;
            if let Some(after) = shed_after {
                if !g.places.iter().any(|p| p.shed) {
                    // No clock before the executor runs a loop: nothing is old then.
                    let Poll::Ready(now) = Pin::new(&mut now()).poll(cx) else {
                        return Poll::Pending;
                    };
                    let oldest = g
                        .places
                        .iter_mut()
                        .filter(|p| p.waiting_since.is_some())
                        .min_by_key(|p| p.waiting_since);
                    if let Some(p) = oldest {
                        let since = p.waiting_since.unwrap_or(now);
                        if now.saturating_duration_since(since) >= after {
                            p.shed = true;
                            if let Some(w) = p.waker.take() {
                                w.wake();
                            }
                            g.shed_asked += 1;
                        } else {
                            wake_at = Some(since + after);
                        }
                    }
                }
            }
            drop(g);
            if let Some(at) = wake_at {
                timer.as_mut().reset(at);
                if timer.as_mut().poll(cx).is_ready() {
                    cx.waker().wake_by_ref();
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Permits out now.
    pub fn active(&self) -> usize {
        self.lock().active
    }

    /// Connections asked to give their place up so far.
    pub fn shed(&self) -> u64 {
        self.lock().shed_asked
    }
}

impl Permit {
    fn with<R>(&self, f: impl FnOnce(&mut Place, &mut Option<Waker>) -> R) -> R {
        let mut g = self.limit.lock();
        let Inner { places, waiter, .. } = &mut *g;
        f(&mut places[self.place], waiter)
    }

    /// The connection waits for its client from `now` on (between requests, or while a
    /// request arrives): it may be shed, oldest first.
    pub fn waiting(&self, now: Instant) {
        self.with(|p, _| p.waiting_since = Some(now));
    }

    /// The connection works for its client (a response, an echo): it is not shed. A request
    /// to give the place up that came meanwhile is withdrawn, and the acceptor asks another.
    pub fn working(&self) {
        let waiter = self.with(|p, waiter| {
            p.waiting_since = None;
            core::mem::take(&mut p.shed)
                .then(|| waiter.take())
                .flatten()
        });
        if let Some(w) = waiter {
            w.wake();
        }
    }

    /// Runs `f` unless the acceptor asks for this place first: `Err(Shed)` then (and `f`
    /// dropped). `f` is polled first, so an `f` that is ready wins.
    pub async fn unless_shed<F: Future>(&self, f: F) -> Result<F::Output, Shed> {
        let mut f = pin!(f);
        poll_fn(|cx| {
            if let Poll::Ready(v) = f.as_mut().poll(cx) {
                return Poll::Ready(Ok(v));
            }
            self.with(|p, _| {
                if p.shed {
                    Poll::Ready(Err(Shed))
                } else {
                    match &p.waker {
                        Some(w) if w.will_wake(cx.waker()) => {}
                        _ => p.waker = Some(cx.waker().clone()),
                    }
                    Poll::Pending
                }
            })
        })
        .await
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let waker = {
            let mut g = self.limit.lock();
            g.places[self.place] = Place::default();
            g.active -= 1;
            g.waiter.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use core::task::Context;
    use zcnet_executor::linux::LinuxPlatform;
    use zcnet_executor::Executor;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    /// Runs `f` in a task of an executor (the permits read its clock).
    fn on_executor(f: impl Future<Output = ()>) {
        let exec = Executor::leak(LinuxPlatform::leak().expect("epoll"));
        exec.block_on(f);
    }

    /// Polls `acquire_shedding(after)` once.
    fn try_take(limit: &ConnLimit, after: Duration) -> Option<Permit> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut f = pin!(limit.acquire_shedding(after));
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(p) => Some(p),
            Poll::Pending => None,
        }
    }

    /// Polls `permit.unless_shed(pending)` once: whether it was shed.
    fn is_shed(permit: &Permit) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let mut f = pin!(permit.unless_shed(core::future::pending::<()>()));
        f.as_mut().poll(&mut cx) == Poll::Ready(Err(Shed))
    }

    /// Two places: the third connection sheds the one waiting longest, never a working one,
    /// and takes its place once it is dropped.
    #[test]
    fn a_full_limit_sheds_the_oldest_waiting_permit() {
        on_executor(async {
            let limit = ConnLimit::new(2);
            let a = try_take(&limit, Duration::ZERO).unwrap();
            let b = try_take(&limit, Duration::ZERO).unwrap();
            a.waiting(at(10));
            b.waiting(at(5));
            // Full: b (waiting since 5) is asked, a is not.
            assert!(try_take(&limit, Duration::ZERO).is_none());
            assert_eq!(limit.shed(), 1);
            assert!(!is_shed(&a));
            assert!(is_shed(&b));
            // One request at a time.
            assert!(try_take(&limit, Duration::ZERO).is_none());
            assert_eq!(limit.shed(), 1);
            drop(b);
            let c = try_take(&limit, Duration::ZERO).expect("b's place");
            // a works now: with c working too, nobody can be shed.
            a.working();
            c.working();
            assert!(try_take(&limit, Duration::ZERO).is_none());
            assert_eq!((limit.shed(), limit.active()), (1, 2));
            drop(a);
            assert!(try_take(&limit, Duration::ZERO).is_some());
        });
    }

    /// A permit asked to go that starts working first keeps its place; the acceptor asks the
    /// next oldest. A permit that has waited less than `shed_after` is not asked.
    #[test]
    fn working_withdraws_the_request_and_young_waits_are_kept() {
        on_executor(async {
            let limit = ConnLimit::new(2);
            let a = try_take(&limit, Duration::ZERO).unwrap();
            let b = try_take(&limit, Duration::ZERO).unwrap();
            let start = now().await;
            a.waiting(start);
            b.waiting(start);
            // Neither has waited an hour.
            assert!(try_take(&limit, Duration::from_secs(3600)).is_none());
            assert_eq!(limit.shed(), 0);
            assert!(try_take(&limit, Duration::ZERO).is_none());
            assert_eq!(limit.shed(), 1);
            // Whichever was asked starts working: the other is asked next.
            let (asked, other) = if is_shed(&a) { (&a, &b) } else { (&b, &a) };
            asked.working();
            assert!(!is_shed(asked));
            assert!(try_take(&limit, Duration::ZERO).is_none());
            assert_eq!(limit.shed(), 2);
            assert!(is_shed(other));
        });
    }
}
