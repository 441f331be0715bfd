//! Congestion control: no control, Reno (RFC 5681) and CUBIC (RFC 9438), behind one
//! [`Controller`] interface (smoltcp's `socket/tcp/congestion.rs`).

use smoltcp::time::Instant;

use super::rtt::RttEstimator;

pub(super) mod cubic;
pub(super) mod no_control;
pub(super) mod reno;

/// A TCP connection's congestion control algorithm
/// ([`TcpSocket::set_congestion_control`](crate::tcp::TcpSocket::set_congestion_control)).
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub enum CongestionControl {
    /// No congestion window: only the remote's window limits what is in flight.
    None,
    /// Reno: slow start, congestion avoidance, fast retransmit and fast recovery (RFC 5681).
    Reno,
    /// CUBIC (RFC 9438): the default of Linux, Windows and macOS. Uses `f64` arithmetic.
    Cubic,
}

/// What a congestion control algorithm is told, and what it answers ([`window`](Self::window)).
pub(super) trait Controller {
    /// Returns the number of bytes that can be sent.
    fn window(&self) -> usize;

    /// Set the remote window size.
    fn set_remote_window(&mut self, _remote_window: usize) {}

    /// An acceptable segment arrived: `len` bytes newly acknowledged (possibly 0), `in_flight`
    /// bytes still unacknowledged.
    fn on_ack(&mut self, _now: Instant, _len: usize, _in_flight: usize, _rtt: &RttEstimator) {}

    /// Fired on each duplicate ack received, after `on_loss` has been called.
    fn on_dup_ack(&mut self, _now: Instant, _len: usize, _in_flight: usize) {}

    /// Fired on a retransmission timeout.
    fn on_rto(&mut self, _now: Instant, _in_flight: usize) {}

    /// Fired after an inferred loss via three duplicate acks.
    fn on_loss(&mut self, _now: Instant, _in_flight: usize) {}

    /// The slow-start threshold, the window the controller aims for after a loss; `None`
    /// without congestion control (then loss recovery sends as the window allows, without
    /// proportional rate reduction).
    fn ssthresh(&self) -> Option<usize> {
        None
    }

    /// Fired at the start of each dispatch.
    fn pre_transmit(&mut self, _now: Instant) {}

    /// Fired after a segment occupying `len` sequence numbers was sent.
    fn post_transmit(&mut self, _now: Instant, _len: usize) {}

    /// Set the maximum segment size.
    fn set_mss(&mut self, _mss: usize) {}
}

/// One of the algorithms.
#[derive(Debug)]
pub(super) enum AnyController {
    /// [`CongestionControl::None`].
    None(no_control::NoControl),
    /// [`CongestionControl::Reno`].
    Reno(reno::Reno),
    /// [`CongestionControl::Cubic`].
    Cubic(cubic::Cubic),
}

impl AnyController {
    /// The algorithm of a new connection: no control, as smoltcp chooses when built without
    /// its `socket-tcp-reno` and `socket-tcp-cubic` features.
    #[inline]
    pub(super) fn new() -> Self {
        AnyController::None(no_control::NoControl)
    }

    /// A fresh controller of the given algorithm.
    pub(super) fn with(congestion_control: CongestionControl) -> Self {
        match congestion_control {
            CongestionControl::None => AnyController::None(no_control::NoControl),
            CongestionControl::Reno => AnyController::Reno(reno::Reno::new()),
            CongestionControl::Cubic => AnyController::Cubic(cubic::Cubic::new()),
        }
    }

    /// Which algorithm this is.
    pub(super) fn kind(&self) -> CongestionControl {
        match self {
            AnyController::None(_) => CongestionControl::None,
            AnyController::Reno(_) => CongestionControl::Reno,
            AnyController::Cubic(_) => CongestionControl::Cubic,
        }
    }

    /// The algorithm, to notify it: this controller, which hands each call to its algorithm
    /// by a `match` (each algorithm's method can then be inlined, and an empty one, as most of
    /// [`NoControl`](no_control::NoControl)'s are, costs nothing), not through a vtable.
    #[inline]
    pub(super) fn inner_mut(&mut self) -> &mut Self {
        self
    }

    /// The algorithm, to read its window (see [`inner_mut`](Self::inner_mut)).
    #[inline]
    pub(super) fn inner(&self) -> &Self {
        self
    }
}

/// Calls `$call` on the algorithm `$c` of the controller `$any`.
macro_rules! each {
    ($any:expr, $c:ident => $call:expr) => {
        match $any {
            AnyController::None($c) => $call,
            AnyController::Reno($c) => $call,
            AnyController::Cubic($c) => $call,
        }
    };
}

impl Controller for AnyController {
    #[inline]
    fn window(&self) -> usize {
        each!(self, c => c.window())
    }

    #[inline]
    fn set_remote_window(&mut self, remote_window: usize) {
        each!(self, c => c.set_remote_window(remote_window))
    }

    #[inline]
    fn on_ack(&mut self, now: Instant, len: usize, in_flight: usize, rtt: &RttEstimator) {
        each!(self, c => c.on_ack(now, len, in_flight, rtt))
    }

    #[inline]
    fn on_dup_ack(&mut self, now: Instant, len: usize, in_flight: usize) {
        each!(self, c => c.on_dup_ack(now, len, in_flight))
    }

    #[inline]
    fn on_rto(&mut self, now: Instant, in_flight: usize) {
        each!(self, c => c.on_rto(now, in_flight))
    }

    #[inline]
    fn on_loss(&mut self, now: Instant, in_flight: usize) {
        each!(self, c => c.on_loss(now, in_flight))
    }

    #[inline]
    fn ssthresh(&self) -> Option<usize> {
        each!(self, c => c.ssthresh())
    }

    #[inline]
    fn pre_transmit(&mut self, now: Instant) {
        each!(self, c => c.pre_transmit(now))
    }

    #[inline]
    fn post_transmit(&mut self, now: Instant, len: usize) {
        each!(self, c => c.post_transmit(now, len))
    }

    #[inline]
    fn set_mss(&mut self, mss: usize) {
        each!(self, c => c.set_mss(mss))
    }
}
