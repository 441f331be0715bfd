//! Timers: [`sleep()`], [`sleep_until`], [`timeout`], [`interval`], all backed by the executor's
//! hierarchical timer wheel (see `wheel.rs` for its ground rules).
//!
//! # Which executor serves them
//!
//! The free functions here are not tied to an executor; a [`Sleep`] (also the one inside a
//! [`Timeout`]) picks one on its first poll, and [`now`] on each:
//!
//! 1. the executor of the waker it is polled with, when that is one of ours: any task of a
//!    zcnet [`Executor`](crate::Executor), and its `block_on`;
//! 2. otherwise (a waker wrapped by a `FuturesUnordered`, a `select`, any combinator that
//!    polls with a waker of its own), with the `std` feature, the executor whose loop the
//!    polling thread is running, so wrapped wakers inside a task behave as if unwrapped;
//! 3. otherwise (no `std`, or a thread that runs no zcnet executor: a foreign executor), the
//!    process's *default* executor: an executor takes that role when it starts a loop (`run`,
//!    `block_on`, or a `run_until_idle` that found a task or a due timer) while the role is
//!    free or its holder is not running a loop, and keeps it after its loop ends. A program or kernel with one executor always
//!    gets that one; with several, the one that took the role last. Its timers wake whatever
//!    waker was registered, on any thread.
//!
//! Before any zcnet executor has run a loop there is no clock: a timer (or [`now`]) polled
//! then waits for one. Its waker is kept (up to 16 at once without waking each other early)
//! and woken when the first executor starts a loop; a [`sleep()`]'s duration counts from then.
//! A timer bound to an executor whose loop is not running fires once that loop runs again.
//!
//! [`Executor::sleep`](crate::Executor::sleep), [`Executor::sleep_until`](crate::Executor::sleep_until)
//! and [`Executor::timeout`](crate::Executor::timeout) name their executor instead: they work
//! under any waker, on any thread, and never look one up. Code that holds its executor (the
//! stack's sockets do) uses them.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

use crate::executor::Core;
use crate::platform::Instant;

mod sleep;
pub(crate) mod wheel;

pub use sleep::Sleep;

/// Completes `duration` after its first poll, on the executor chosen as the [module
/// docs](self) say (polled before any executor has run a loop, after the first one starts).
pub fn sleep(duration: Duration) -> Sleep {
    Sleep::after(duration)
}

/// Completes at `deadline` (at once if it has passed), on the executor chosen as the [module
/// docs](self) say.
///
/// Polled before any zcnet executor has run a loop, it waits for one (even a past deadline
/// needs a clock to be known as past).
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep::at(deadline)
}

/// The clock of the executor chosen as the [module docs](self) say (usually the running task's).
///
/// Polled before any zcnet executor has run a loop, it waits for the first one to start.
pub fn now() -> Now {
    Now
}

/// The future returned by [`now`].
#[derive(Debug)]
pub struct Now;

impl Future for Now {
    type Output = Instant;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Instant> {
        match Core::for_timers(cx) {
            Some(core) => Poll::Ready(core.now()),
            // No clock before any executor has run a loop: woken when the first starts.
            None => Poll::Pending,
        }
    }
}

/// The future did not finish in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline elapsed")
    }
}

impl core::error::Error for Elapsed {}

/// Runs `future` for at most `duration` from its first poll: `Ok(output)`, or `Err(Elapsed)`
/// and the future dropped. Its timer is served by the executor chosen as the [module
/// docs](self) say; [`Executor::timeout`](crate::Executor::timeout) names it instead.
/// Before any executor has run a loop the deadline waits for one, as [`sleep()`]'s does.
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    Timeout::new(future, sleep(duration))
}

/// The future returned by [`timeout`] and [`Executor::timeout`](crate::Executor::timeout). The
/// inner future is polled first, so a future that is ready at the deadline wins.
#[derive(Debug)]
pub struct Timeout<F> {
    future: F,
    sleep: Sleep,
}

impl<F> Timeout<F> {
    pub(crate) fn new(future: F, sleep: Sleep) -> Self {
        Self { future, sleep }
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning: neither field is moved out of the pinned struct. The
        // `&mut Timeout` covers `sleep`'s timer entry, which may be linked into the wheel and
        // written through the wheel's raw pointers: sound because `Timeout` is `!Unpin` (its
        // `Sleep` is), and a `&mut` to a `!Unpin` type claims no uniqueness (see `wheel.rs`).
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: `future` is pinned as part of `self`.
        if let Poll::Ready(v) = unsafe { Pin::new_unchecked(&mut this.future) }.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        // SAFETY: `sleep` is pinned as part of `self`.
        match unsafe { Pin::new_unchecked(&mut this.sleep) }.poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Ticks every `period`, starting one period after the first tick is awaited. Ticks missed
/// because the task was late are skipped, not bunched: the next tick is the first multiple of
/// `period` after now.
pub fn interval(period: Duration) -> Interval {
    assert!(
        !period.is_zero(),
        "zcnet-executor: interval period must be non-zero"
    );
    Interval { period, next: None }
}

/// Made by [`interval`]; call [`tick`](Interval::tick).
#[derive(Debug)]
pub struct Interval {
    period: Duration,
    /// The instant of the next tick, once the first tick was awaited.
    next: Option<Instant>,
}

impl Interval {
    /// Waits for the next tick; returns its scheduled instant.
    pub async fn tick(&mut self) -> Instant {
        let now = now().await;
        let next = match self.next {
            None => now + self.period,
            Some(n) if n > now => n,
            Some(n) => {
                // Skip missed ticks.
                let behind = now.saturating_duration_since(n).as_nanos();
                let p = self.period.as_nanos();
                let skipped = behind / p + 1;
                n + Duration::from_nanos((skipped * p).min(u128::from(u64::MAX)) as u64)
            }
        };
        sleep_until(next).await;
        self.next = Some(next + self.period);
        next
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }
}
