//! The connection's timers: retransmission, fast retransmit, zero-window probe, keep-alive and
//! TIME-WAIT close share one slot ([`Timer`]); delayed ACK has its own ([`AckDelayTimer`]).

use smoltcp::time::{Duration, Instant};

use super::context::PollAt;
use super::rtt::RTTE_MAX_RTO;

/// The ACK delay a new connection starts with.
pub(crate) const ACK_DELAY_DEFAULT: Duration = Duration::from_millis(10);
/// How long a connection stays in TIME-WAIT.
pub(crate) const CLOSE_DELAY: Duration = Duration::from_millis(10_000);

/// The one timer that runs at a time, by what it is for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Timer {
    /// Nothing outstanding; a keep-alive is due at `keep_alive_at`, if set.
    Idle {
        /// When to send the next keep-alive.
        keep_alive_at: Option<Instant>,
    },
    /// Unacknowledged data: retransmit from the last ACK at `expires_at`.
    Retransmit {
        /// When the retransmission timeout expires.
        expires_at: Instant,
    },
    /// Three duplicate ACKs: retransmit the first unacknowledged segment now.
    FastRetransmit,
    /// Data to send into a zero window: probe at `expires_at`.
    ZeroWindowProbe {
        /// When to send the next probe.
        expires_at: Instant,
        /// The current probe interval, doubled after each probe.
        delay: Duration,
    },
    /// TIME-WAIT: forget the connection at `expires_at`.
    Close {
        /// When TIME-WAIT ends.
        expires_at: Instant,
    },
}

impl Timer {
    /// Idle, without keep-alive.
    pub(crate) fn new() -> Timer {
        Timer::Idle {
            keep_alive_at: None,
        }
    }

    /// Whether a keep-alive is due at `timestamp`.
    pub(crate) fn should_keep_alive(&self, timestamp: Instant) -> bool {
        matches!(*self, Timer::Idle {
            keep_alive_at: Some(keep_alive_at),
        } if timestamp >= keep_alive_at)
    }

    /// Whether a retransmission (timeout or fast) is due at `timestamp`.
    pub(crate) fn should_retransmit(&self, timestamp: Instant) -> bool {
        match *self {
            Timer::Retransmit { expires_at } if timestamp >= expires_at => true,
            Timer::FastRetransmit => true,
            _ => false,
        }
    }

    /// Whether TIME-WAIT is over at `timestamp`.
    pub(crate) fn should_close(&self, timestamp: Instant) -> bool {
        matches!(*self, Timer::Close { expires_at } if timestamp >= expires_at)
    }

    /// Whether a zero-window probe is due at `timestamp`.
    pub(crate) fn should_zero_window_probe(&self, timestamp: Instant) -> bool {
        matches!(*self, Timer::ZeroWindowProbe { expires_at, .. } if timestamp >= expires_at)
    }

    /// When the timer fires.
    pub(crate) fn poll_at(&self) -> PollAt {
        match *self {
            Timer::Idle {
                keep_alive_at: Some(keep_alive_at),
            } => PollAt::Time(keep_alive_at),
            Timer::Idle {
                keep_alive_at: None,
            } => PollAt::Ingress,
            Timer::ZeroWindowProbe { expires_at, .. } => PollAt::Time(expires_at),
            Timer::Retransmit { expires_at, .. } => PollAt::Time(expires_at),
            Timer::FastRetransmit => PollAt::Now,
            Timer::Close { expires_at } => PollAt::Time(expires_at),
        }
    }

    /// Go idle at `timestamp`, with a keep-alive after `interval` if set.
    pub(crate) fn set_for_idle(&mut self, timestamp: Instant, interval: Option<Duration>) {
        *self = Timer::Idle {
            keep_alive_at: interval.map(|interval| timestamp + interval),
        }
    }

    /// Something was sent at `timestamp`, or keep-alive was set then: if idle, the next probe
    /// is due `interval` later (none without an interval).
    pub(crate) fn rewind_keep_alive(&mut self, timestamp: Instant, interval: Option<Duration>) {
        if let Timer::Idle { keep_alive_at } = self {
            *keep_alive_at = interval.map(|interval| timestamp + interval)
        }
    }

    /// Start (or restart) the retransmission timer, unless in TIME-WAIT.
    pub(crate) fn set_for_retransmit(&mut self, timestamp: Instant, delay: Duration) {
        match *self {
            Timer::Idle { .. }
            | Timer::FastRetransmit
            | Timer::Retransmit { .. }
            | Timer::ZeroWindowProbe { .. } => {
                *self = Timer::Retransmit {
                    expires_at: timestamp + delay,
                }
            }
            Timer::Close { .. } => (),
        }
    }

    /// Retransmit the first unacknowledged segment on the next dispatch.
    pub(crate) fn set_for_fast_retransmit(&mut self) {
        *self = Timer::FastRetransmit
    }

    /// Enter TIME-WAIT at `timestamp`.
    pub(crate) fn set_for_close(&mut self, timestamp: Instant) {
        *self = Timer::Close {
            expires_at: timestamp + CLOSE_DELAY,
        }
    }

    /// Start probing a zero window: first probe at `timestamp + delay`.
    pub(crate) fn set_for_zero_window_probe(&mut self, timestamp: Instant, delay: Duration) {
        *self = Timer::ZeroWindowProbe {
            expires_at: timestamp + delay,
            delay,
        }
    }

    /// A probe was sent at `timestamp`: double the interval (up to the maximum RTO).
    pub(crate) fn rewind_zero_window_probe(&mut self, timestamp: Instant) {
        if let Timer::ZeroWindowProbe { mut delay, .. } = *self {
            delay = (delay * 2).min(Duration::from_millis(u64::from(RTTE_MAX_RTO)));
            *self = Timer::ZeroWindowProbe {
                expires_at: timestamp + delay,
                delay,
            }
        }
    }

    /// Whether idle (keep-alive or not).
    pub(crate) fn is_idle(&self) -> bool {
        matches!(self, Timer::Idle { .. })
    }

    /// Whether probing a zero window.
    pub(crate) fn is_zero_window_probe(&self) -> bool {
        matches!(self, Timer::ZeroWindowProbe { .. })
    }

    /// When the retransmission timer expires, if it runs.
    pub(crate) fn retransmit_at(&self) -> Option<Instant> {
        match *self {
            Timer::Retransmit { expires_at } => Some(expires_at),
            _ => None,
        }
    }

    /// Whether a retransmission (timeout or fast) is pending.
    pub(crate) fn is_retransmit(&self) -> bool {
        matches!(self, Timer::Retransmit { .. } | Timer::FastRetransmit)
    }
}

/// The delayed-ACK timer.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum AckDelayTimer {
    /// No ACK waiting.
    Idle,
    /// An ACK is due at this instant.
    Waiting(Instant),
    /// An ACK is due now (a full segment's worth of data arrived while waiting).
    Immediate,
}
