//! Timers: [`sleep`], [`sleep_until`], [`timeout`], [`interval`], all backed by the executor's
//! hierarchical timer wheel (see `wheel.rs` for its ground rules).
//!
//! These functions find the executor through the waker of the task that polls them, so they work
//! in any task of a zcnet [`Executor`](crate::Executor) (and in its `block_on`).

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

/// Completes `duration` after its first poll.
pub fn sleep(duration: Duration) -> Sleep {
    Sleep::after(duration)
}

/// Completes at `deadline` (at once if it has passed).
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep::at(deadline)
}

/// The executor's clock, read from inside a task.
pub fn now() -> Now {
    Now
}

/// The future returned by [`now`].
#[derive(Debug)]
pub struct Now;

impl Future for Now {
    type Output = Instant;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Instant> {
        let core = Core::from_waker(cx.waker())
            .expect("zcnet-executor: now() polled outside a zcnet executor");
        Poll::Ready(core.now())
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

/// Runs `future` for at most `duration`: `Ok(output)`, or `Err(Elapsed)` and the future dropped.
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    Timeout {
        future,
        sleep: sleep(duration),
    }
}

/// The future returned by [`timeout`]. The inner future is polled first, so a future that is
/// ready at the deadline wins.
#[derive(Debug)]
pub struct Timeout<F> {
    future: F,
    sleep: Sleep,
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning: neither field is moved out of the pinned struct.
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
