//! When a synchronized connection gives up on a silent peer: the bounds of Linux's
//! `tcp_retries2`, for retransmissions and for zero-window probes.
//!
//! * **Retransmissions** (data, FIN): the connection ends at the first retransmission timeout
//!   that finds [`retransmission_bound`]`(retries)` passed since the first unacknowledged
//!   transmission was sent (the start of the retransmission timer that first expired for it)
//!   with no acknowledgement moving SND.UNA since. As Linux's `retransmits_timed_out`, the
//!   bound is a time, modelled on `retries` timeouts of an RTO that starts at 200 ms
//!   ([`DEFAULT_MIN_RTO_MS`]) and doubles up to its 60 s ceiling: a path with a longer RTO
//!   gives up after fewer retransmissions, not later.
//! * **Zero-window probes**: the connection ends when a probe is due after `retries` probes in
//!   a row without any segment from the peer (Linux's `tcp_retries2` probes, counted in
//!   `icsk_probes_out`). A peer that answers every probe, its window still zero, keeps the
//!   connection (as on Linux): the application bounds that with a deadline on its writes.
//!
//! The SYN and SYN-ACK have their own limits (`SYN_RETRIES`, `SYNACK_RETRIES` in
//! `socket.rs`).

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::TcpSeqNumber;

use super::rtt::{DEFAULT_MIN_RTO_MS, RTTE_MAX_RTO};

/// The default retransmission and probe limit of a socket (`TcpSocket::set_retries`): Linux's
/// `tcp_retries2` (15), a retransmission bound of 522.2 s with zcnet's 60 s RTO ceiling.
pub const TCP_RETRIES: u8 = 15;

/// The least retransmission and probe limit accepted (`TcpSocket::set_retries` raises lower
/// ones to it): 8, a retransmission bound of 102.2 s, the least that keeps RFC 1122's (4.2.3.5)
/// "at least 100 seconds" before a connection gives up.
pub const MIN_TCP_RETRIES: u8 = 8;

/// How long a connection retransmitting with `retries` allowed goes without an
/// acknowledgement before it gives up (see the module docs): the sum of `retries + 1`
/// retransmission timeouts starting at 200 ms and doubling up to 60 s. `retries` below
/// [`MIN_TCP_RETRIES`] counts as that.
///
/// 8 gives 102.2 s, 15 (the default) 522.2 s; each retry past 8 adds 60 s.
pub const fn retransmission_bound(retries: u8) -> core::time::Duration {
    let retries = if retries < MIN_TCP_RETRIES {
        MIN_TCP_RETRIES
    } else {
        retries
    } as u64;
    let base = DEFAULT_MIN_RTO_MS as u64;
    let max = RTTE_MAX_RTO as u64;
    // The timeouts that double before the ceiling stops them: ilog2(max / base).
    let doubling = (max / base).ilog2() as u64;
    let ms = if retries <= doubling {
        ((2 << retries) - 1) * base
    } else {
        ((2 << doubling) - 1) * base + (retries - doubling) * max
    };
    core::time::Duration::from_millis(ms)
}

/// A connection's retransmission and probe limits, and what it counted against them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retries {
    /// `tcp_retries2`: at least [`MIN_TCP_RETRIES`]. An option of the socket: kept when a
    /// connection ends.
    limit: u8,
    /// When the oldest unacknowledged transmission was sent, and SND.UNA then: set at its first
    /// retransmission timeout, stale once SND.UNA moved.
    since: Option<(Instant, TcpSeqNumber)>,
    /// Zero-window probes sent in a row with no segment from the peer after them.
    probes_out: u8,
    /// The connection's count of received segments when the last probe went.
    probe_mark: Option<u64>,
}

impl Default for Retries {
    fn default() -> Self {
        Self {
            limit: TCP_RETRIES,
            since: None,
            probes_out: 0,
            probe_mark: None,
        }
    }
}

impl Retries {
    /// The limit (see [`retransmission_bound`]).
    pub(crate) fn limit(&self) -> u8 {
        self.limit
    }

    /// Sets the limit, raised to [`MIN_TCP_RETRIES`].
    pub(crate) fn set_limit(&mut self, retries: u8) {
        self.limit = retries.max(MIN_TCP_RETRIES);
    }

    /// A new connection, or the end of one: nothing counted (the limit stays).
    pub(crate) fn reset(&mut self) {
        *self = Self {
            limit: self.limit,
            ..Self::default()
        };
    }

    /// The retransmission timer expired at `now`, having run for `rto`, with SND.UNA at
    /// `una`: whether the connection gives up now.
    pub(crate) fn rto_expired(&mut self, now: Instant, rto: Duration, una: TcpSeqNumber) -> bool {
        let started = match self.since {
            Some((at, since_una)) if since_una == una => at,
            // The first timeout for this SND.UNA: its transmission went when the timer started.
            _ => {
                let at = now - rto;
                self.since = Some((at, una));
                at
            }
        };
        let bound = Duration::from_millis(retransmission_bound(self.limit).as_millis() as u64);
        now - started >= bound
    }

    /// A zero-window probe is due; `received` is the connection's count of segments received
    /// so far. Whether the connection gives up instead of sending it.
    pub(crate) fn probe_due(&mut self, received: u64) -> bool {
        if self.probe_mark != Some(received) {
            // The peer said something since the last probe (or none went yet).
            self.probes_out = 0;
        }
        self.probes_out >= self.limit
    }

    /// A zero-window probe went out; `received` as for [`probe_due`](Self::probe_due).
    pub(crate) fn probe_sent(&mut self, received: u64) {
        if self.probe_mark != Some(received) {
            self.probes_out = 0;
        }
        self.probes_out = self.probes_out.saturating_add(1);
        self.probe_mark = Some(received);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_follows_linuxs_model_and_keeps_rfc_1122s_floor() {
        let ms = |r| retransmission_bound(r).as_millis();
        assert_eq!(ms(8), 102_200);
        assert_eq!(ms(9), 162_200);
        assert_eq!(ms(15), 522_200);
        assert_eq!(ms(TCP_RETRIES), 522_200);
        // Below the floor counts as the floor.
        assert_eq!(ms(0), 102_200);
        assert_eq!(ms(3), 102_200);
        assert!(retransmission_bound(0) >= core::time::Duration::from_secs(100));
        assert_eq!(ms(255), 102_200 + 247 * 60_000);
        let mut r = Retries::default();
        r.set_limit(2);
        assert_eq!(r.limit(), MIN_TCP_RETRIES);
    }

    #[test]
    fn retransmissions_give_up_past_the_bound_since_the_first_unacknowledged_transmission() {
        let mut r = Retries::default();
        r.set_limit(8);
        let una = TcpSeqNumber(1000);
        let at = |ms| Instant::from_millis(ms);
        // Sent at 0, RTO 1 s: timeouts at 1, 3, 7, ... s (60 s apart from 63 s on).
        assert!(!r.rto_expired(at(1_000), Duration::from_millis(1_000), una));
        assert!(!r.rto_expired(at(63_000), Duration::from_millis(32_000), una));
        assert!(!r.rto_expired(at(102_199), Duration::from_millis(60_000), una));
        assert!(r.rto_expired(at(123_000), Duration::from_millis(60_000), una));
        // SND.UNA moved: the count starts over from the new timer's start.
        let una = una + 10;
        assert!(!r.rto_expired(at(124_000), Duration::from_millis(1_000), una));
        assert!(!r.rto_expired(at(225_199), Duration::from_millis(60_000), una));
        assert!(r.rto_expired(at(225_200), Duration::from_millis(60_000), una));
        // After a reset, too.
        r.reset();
        assert_eq!(r.limit(), 8);
        assert!(!r.rto_expired(at(300_000), Duration::from_millis(200), una));
    }

    #[test]
    fn probes_give_up_after_the_limit_unanswered_and_any_answer_restarts_the_count() {
        let mut r = Retries::default();
        r.set_limit(8);
        for _ in 0..8 {
            assert!(!r.probe_due(5));
            r.probe_sent(5);
        }
        assert!(r.probe_due(5), "eight probes unanswered");
        // A segment from the peer (a zero-window ACK) counts as an answer.
        assert!(!r.probe_due(6));
        r.probe_sent(6);
        for _ in 0..7 {
            assert!(!r.probe_due(6));
            r.probe_sent(6);
        }
        assert!(r.probe_due(6));
    }
}
