//! The in-memory wire, on an executor: [`zcnet_buffer::sim::wire`] (two drivers linked back to
//! back, with seeded fault injection) with each end's delay timer on `zcnet-executor`'s timer
//! wheel ([`ExecutorTimer`]), so a [`Faults::delay`] works on any executor, a
//! [`VirtualClock`](crate::clock::VirtualClock)'s included.
//!
//! The wire itself lives in `zcnet-buffer` (feature `sim`), where the examples use it too; its
//! types are re-exported here so tests name them as before.

use std::boxed::Box;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use zcnet_buffer::sim::WireTimer;
use zcnet_buffer::FramePool;
use zcnet_executor::time::Sleep;
use zcnet_executor::{Executor, Instant};

pub use zcnet_buffer::sim::wire::{Delivery, Faults, WireEnd, WireHandle, WireStats};

/// A [`WireTimer`] on an executor's clock and timer wheel: what [`wire_pair`] gives each end.
pub struct ExecutorTimer {
    exec: &'static Executor,
    /// Wakes the end when the next delayed frame becomes due.
    sleep: Pin<Box<Sleep>>,
    /// The deadline `sleep` is set to, if it is armed.
    at: Option<Instant>,
}

impl ExecutorTimer {
    /// A timer on `exec`'s clock, not armed.
    pub fn new(exec: &'static Executor) -> Self {
        Self {
            exec,
            sleep: Box::pin(exec.sleep_until(Instant::MAX)),
            at: None,
        }
    }
}

impl std::fmt::Debug for ExecutorTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorTimer")
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

fn instant(d: Duration) -> Instant {
    Instant::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl WireTimer for ExecutorTimer {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.exec.now().as_nanos())
    }

    fn poll_until(&mut self, deadline: Duration, cx: &mut Context<'_>) -> Poll<()> {
        let due = instant(deadline);
        if self.at != Some(due) {
            self.sleep.as_mut().reset(due);
            self.at = Some(due);
        }
        let ready = self.sleep.as_mut().poll(cx);
        if ready.is_ready() {
            self.at = None;
        }
        ready
    }
}

/// Two linked ends on `exec`'s clock. End `i` uses `pools[i]` and MAC `02:00:00:00:00:0i+1`.
/// Frames cross by [`Delivery::Copy`].
pub fn wire_pair(
    exec: &'static Executor,
    pools: [&'static FramePool; 2],
    faults: Faults,
) -> (WireEnd, WireEnd) {
    wire_pair_with(exec, pools, faults, Delivery::Copy)
}

/// A timer on `exec` for each end.
fn timers(exec: &'static Executor) -> [Box<dyn WireTimer>; 2] {
    [
        Box::new(ExecutorTimer::new(exec)),
        Box::new(ExecutorTimer::new(exec)),
    ]
}

/// [`wire_pair`] with the frames crossing by `delivery`.
pub fn wire_pair_with(
    exec: &'static Executor,
    pools: [&'static FramePool; 2],
    faults: Faults,
    delivery: Delivery,
) -> (WireEnd, WireEnd) {
    zcnet_buffer::sim::wire_pair_with(pools, faults, delivery, Some(timers(exec)))
}

/// [`wire_pair_with`] for two ends both driven on the calling thread (two stacks on one
/// executor): no lock per direction ([`zcnet_buffer::sim::wire_pair_one_thread`]); any use
/// from another thread panics.
pub fn wire_pair_one_thread(
    exec: &'static Executor,
    pools: [&'static FramePool; 2],
    faults: Faults,
    delivery: Delivery,
) -> (WireEnd, WireEnd) {
    zcnet_buffer::sim::wire_pair_one_thread(pools, faults, delivery, Some(timers(exec)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcnet_buffer::sim::CountingWaker;
    use zcnet_buffer::{Driver, PoolConfig};

    /// A delayed frame arrives when the executor's (virtual) clock reaches its due time, woken
    /// by the end's timer on the wheel.
    #[test]
    fn delay_runs_on_the_executors_timers() {
        let clock = crate::clock::VirtualClock::leak();
        let exec = Executor::leak(clock);
        let pools = [
            FramePool::leak(PoolConfig::new(8)).unwrap(),
            FramePool::leak(PoolConfig::new(8)).unwrap(),
        ];
        let faults = Faults {
            delay: Duration::from_millis(3),
            ..Faults::default()
        };
        let (mut a, mut b) = wire_pair(exec, pools, faults);
        let (wakes, waker) = CountingWaker::new();
        let mut cx = Context::from_waker(&waker);
        let Poll::Ready(mut f) = a.poll_transmit_frame(&mut cx) else {
            panic!("a free slot")
        };
        f.append(60).unwrap().fill(5);
        a.transmit(f).unwrap();
        assert!(b.poll_receive(&mut cx).is_pending());
        assert_eq!(exec.armed_timers(), 1);
        exec.run_until_idle();
        assert_eq!(wakes.wakes(), 0, "not due yet");
        exec.block_on(exec.sleep(Duration::from_millis(3)));
        assert_eq!(wakes.wakes(), 1, "the timer woke the end");
        match b.poll_receive(&mut cx) {
            Poll::Ready(f) => assert!(f.iter().all(|&x| x == 5)),
            Poll::Pending => panic!("due"),
        }
    }
}
