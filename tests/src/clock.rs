//! A virtual clock for the executor: simulated time for deterministic tests and benchmarks.
//!
//! With it, a test of retransmissions, timeouts or keep-alive runs as fast as the CPU allows:
//! whenever no task is ready, the executor "waits" by jumping the clock to its next timer
//! deadline. Everything runs on the one thread that drives the executor.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use zcnet_executor::Platform;

/// A [`Platform`] on a virtual clock for deterministic tests and benchmarks: time moves only when
/// the caller calls [`advance`](Self::advance) or when the executor waits (`wait` jumps the clock
/// to the deadline). `signal` sets a sticky flag that the next `wait` consumes.
#[derive(Debug, Default)]
pub struct VirtualClock {
    nanos: AtomicU64,
    signalled: AtomicBool,
}

impl VirtualClock {
    /// A clock at zero, leaked so an executor can hold it for `'static`.
    pub fn leak() -> &'static VirtualClock {
        Box::leak(Box::default())
    }

    /// Moves the clock forward by `d`. Panics if the clock would pass `u64::MAX` nanoseconds
    /// (some 584 years): it never wraps around to run backwards.
    pub fn advance(&self, d: Duration) {
        let d = u64::try_from(d.as_nanos()).expect("duration fits in u64 nanoseconds");
        let moved = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(d));
        assert!(
            moved.is_ok(),
            "VirtualClock: advanced past u64::MAX nanoseconds"
        );
    }

    /// Whether a signal is pending (sent and not yet consumed by a `wait`).
    pub fn is_signalled(&self) -> bool {
        self.signalled.load(Ordering::Relaxed)
    }
}

impl Platform for VirtualClock {
    fn now(&self) -> zcnet_executor::Instant {
        zcnet_executor::Instant::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    fn wait(&self, deadline: Option<zcnet_executor::Instant>) {
        if self.signalled.swap(false, Ordering::AcqRel) {
            return;
        }
        match deadline {
            Some(d) => {
                self.nanos.fetch_max(d.as_nanos(), Ordering::Relaxed);
            }
            None => panic!("VirtualClock: wait with no deadline and no signal would never end"),
        }
    }

    fn signal(&self) {
        self.signalled.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use zcnet_executor::Platform;

    #[test]
    fn virtual_clock_advances_waits_and_keeps_signals() {
        use zcnet_executor::Instant as At;
        let c = VirtualClock::leak();
        assert_eq!(c.now(), At::ZERO);
        c.advance(Duration::from_millis(2));
        assert_eq!(c.now().as_nanos(), 2_000_000);
        // A wait jumps to its deadline, never backwards.
        c.wait(Some(At::from_nanos(5_000_000)));
        assert_eq!(c.now().as_nanos(), 5_000_000);
        c.wait(Some(At::from_nanos(1)));
        assert_eq!(c.now().as_nanos(), 5_000_000);
        // A signal sent before the wait ends it at once, without moving the clock.
        c.signal();
        assert!(c.is_signalled());
        c.wait(None);
        assert!(!c.is_signalled());
        assert_eq!(c.now().as_nanos(), 5_000_000);
    }

    /// The clock never wraps around to run backwards: advancing to its last nanosecond works,
    /// one more panics.
    #[test]
    #[should_panic(expected = "advanced past u64::MAX nanoseconds")]
    fn virtual_clock_does_not_wrap() {
        let c = VirtualClock::leak();
        c.advance(Duration::from_nanos(u64::MAX));
        assert_eq!(c.now().as_nanos(), u64::MAX);
        c.advance(Duration::from_nanos(1));
    }

    #[test]
    fn virtual_clock_drives_executor_timers() {
        use std::future::Future;
        use std::task::{Context, Waker};
        let clock = VirtualClock::leak();
        let exec = zcnet_executor::Executor::leak(clock);
        let mut cx = Context::from_waker(Waker::noop());
        let mut sleep = std::pin::pin!(exec.sleep(Duration::from_millis(3)));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        assert_eq!(exec.armed_timers(), 1);
        clock.advance(Duration::from_millis(2));
        exec.run_until_idle();
        assert_eq!(exec.stats().timers_fired, 0);
        clock.advance(Duration::from_millis(1));
        exec.run_until_idle();
        assert_eq!(exec.stats().timers_fired, 1);
        assert!(sleep.as_mut().poll(&mut cx).is_ready());
        // block_on sleeps on the virtual clock: the wait jumps straight to the deadline.
        exec.block_on(exec.sleep(Duration::from_secs(60)));
        assert_eq!(clock.now().as_nanos(), 60_003_000_000);
    }
}
