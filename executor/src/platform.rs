//! What the integrator supplies: a clock, a way to wait, and a way to end a wait.

use core::fmt;
use core::ops::{Add, Sub};
use core::time::Duration;

/// A point on the platform's monotonic clock, in nanoseconds since an arbitrary origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    nanos: u64,
}

impl Instant {
    /// The clock's origin.
    pub const ZERO: Instant = Instant { nanos: 0 };
    /// The furthest representable point (about 584 years after the origin).
    pub const MAX: Instant = Instant { nanos: u64::MAX };

    /// The instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self { nanos }
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.nanos
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.nanos.saturating_sub(earlier.nanos))
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    pub fn saturating_add(self, d: Duration) -> Instant {
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant {
            nanos: self.nanos.saturating_add(d),
        }
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturating: a deadline past [`Instant::MAX`] is [`Instant::MAX`] ("never").
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating at zero.
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.nanos / 1_000_000_000,
            self.nanos % 1_000_000_000
        )
    }
}

/// The integrator's hook: read the clock, wait for a deadline or a signal, send a signal.
///
/// # Contract
///
/// * [`signal`](Self::signal) is **sticky**: a signal sent while nobody waits makes the next
///   [`wait`](Self::wait) return at once. (An eventfd, a futex word, a flag checked before `hlt`
///   with interrupts disabled.) The executor relies on this to never lose a wakeup between
///   deciding to sleep and sleeping.
/// * `signal` may be called from any thread and from interrupt context.
/// * `wait` may return early (spuriously); the executor re-checks its work.
/// * `now` never goes backwards.
///
/// A platform may do more while it waits: the Linux one (feature `std`) dispatches epoll
/// readiness to futures in the same `epoll_wait`.
pub trait Platform: Sync {
    /// The current time.
    fn now(&self) -> Instant;

    /// Blocks until `deadline` has passed (`None`: no deadline), a [`signal`](Self::signal)
    /// arrives, or the platform has events of its own to deliver.
    ///
    /// With a deadline already past it must not block: it delivers whatever events it has ready
    /// and returns. The executor relies on this to look at the platform's events every so many
    /// busy turns, so that tasks which keep the loop busy cannot starve them.
    fn wait(&self, deadline: Option<Instant>);

    /// Ends the current or next [`wait`](Self::wait).
    fn signal(&self);
}
