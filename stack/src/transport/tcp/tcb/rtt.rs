//! The round-trip time estimator and retransmission timeout (RFC 6298).

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::TcpSeqNumber;

/// RFC 6298: (2.1) Until a round-trip time (RTT) measurement has been made for a
/// segment sent between the sender and receiver, the sender SHOULD
/// set RTO <- 1 second,
const RTTE_INITIAL_RTO: u32 = 1000;

/// Minimum "safety margin" for the RTO that kicks in when the
/// variance gets very low.
const RTTE_MIN_MARGIN: u32 = 5;

/// K, according to RFC 6298
const RTTE_K: u32 = 4;

/// The default floor of a computed RTO, in milliseconds: Linux's (`TCP_RTO_MIN`). RFC 6298
/// (2.4) asks for 1 second; RFC 8961 (section 4) lets a sender go lower when, as here, it also
/// detects losses by other means (duplicate ACKs, SACK). On a path of a millisecond or less,
/// a 1 s floor turned each timeout into a second of silence: at 1% random loss each way it held
/// zcnet's echo goodput to an eighth of what this floor gives (the loss benchmark).
pub(crate) const DEFAULT_MIN_RTO_MS: u32 = 200;

/// RFC 6298 (2.5) A maximum value MAY be placed on RTO provided it is at least 60
/// seconds
pub(super) const RTTE_MAX_RTO: u32 = 60_000;

/// Smoothed RTT, RTT variance and RTO, from one timed segment at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RttEstimator {
    /// true if we have made at least one rtt measurement.
    have_measurement: bool,
    // Using u32 instead of Duration to save space (Duration is i64)
    /// Smoothed RTT
    srtt: u32,
    /// RTT variance.
    rttvar: u32,
    /// Retransmission Time-Out
    rto: u32,
    /// When the segment being timed was sent, and the sequence number its ACK must reach.
    timestamp: Option<(Instant, TcpSeqNumber)>,
    /// The highest sequence number sent so far (retransmissions are not timed).
    max_seq_sent: Option<TcpSeqNumber>,
    /// Timeouts since the last measurement.
    rto_count: u8,
    /// The smallest measurement so far (kept when three timeouts discard the estimate).
    min_rtt: Option<u32>,
    /// The least RTO a measurement may give, in milliseconds (`<=` [`RTTE_MAX_RTO`]).
    min_rto: u32,
}

impl Default for RttEstimator {
    fn default() -> Self {
        Self {
            have_measurement: false,
            srtt: 0,   // ignored, will be overwritten on first measurement.
            rttvar: 0, // ignored, will be overwritten on first measurement.
            rto: RTTE_INITIAL_RTO,
            timestamp: None,
            max_seq_sent: None,
            rto_count: 0,
            min_rtt: None,
            min_rto: DEFAULT_MIN_RTO_MS,
        }
    }
}

impl RttEstimator {
    /// A fresh estimator (no measurement yet) whose computed RTO never goes below `min_rto`
    /// milliseconds (capped at the maximum RTO).
    pub(crate) fn with_min_rto(min_rto: u32) -> Self {
        Self {
            min_rto: min_rto.min(RTTE_MAX_RTO),
            ..Self::default()
        }
    }

    /// The floor of the computed RTO, in milliseconds.
    pub(crate) fn min_rto(&self) -> u32 {
        self.min_rto
    }

    /// Sets the floor of the computed RTO (milliseconds, capped at the maximum RTO); a
    /// current RTO computed from measurements is raised to it, never lowered (the next
    /// measurement applies the new floor either way).
    pub(crate) fn set_min_rto(&mut self, min_rto: u32) {
        self.min_rto = min_rto.min(RTTE_MAX_RTO);
        if self.have_measurement {
            self.rto = self.rto.max(self.min_rto);
        }
    }

    /// The current retransmission timeout.
    pub(crate) fn retransmission_timeout(&self) -> Duration {
        Duration::from_millis(u64::from(self.rto))
    }

    /// Whether an RTT was measured (since the last reset of the measurements).
    pub(crate) fn has_measurement(&self) -> bool {
        self.have_measurement
    }

    /// The smoothed RTT in milliseconds, 0 before the first measurement.
    pub(crate) fn smoothed_rtt(&self) -> u32 {
        if self.have_measurement {
            self.srtt
        } else {
            0
        }
    }

    /// The smoothed RTT and the RTT variance in milliseconds, `None` before the first
    /// measurement and after three timeouts in a row discarded the estimate.
    pub(crate) fn estimate(&self) -> Option<(u32, u32)> {
        self.have_measurement.then_some((self.srtt, self.rttvar))
    }

    /// The smallest measurement so far in milliseconds, `None` before the first.
    pub(crate) fn min_rtt(&self) -> Option<u32> {
        self.min_rtt
    }

    /// Take one RTT measurement, in milliseconds.
    pub(super) fn sample(&mut self, new_rtt: u32) {
        self.min_rtt = Some(self.min_rtt.map_or(new_rtt, |min| min.min(new_rtt)));
        if self.have_measurement {
            // RFC 6298 (2.3) When a subsequent RTT measurement R' is made, a host MUST set (...)
            let diff = (self.srtt as i32 - new_rtt as i32).unsigned_abs();
            self.rttvar = (self.rttvar * 3 + diff).div_ceil(4);
            self.srtt = (self.srtt * 7 + new_rtt).div_ceil(8);
        } else {
            // RFC 6298 (2.2) When the first RTT measurement R is made, the host MUST set (...)
            self.have_measurement = true;
            self.srtt = new_rtt;
            self.rttvar = new_rtt / 2;
        }

        // RFC 6298 (2.2), (2.3)
        let margin = RTTE_MIN_MARGIN.max(self.rttvar * RTTE_K);
        self.rto = (self.srtt + margin).clamp(self.min_rto, RTTE_MAX_RTO);

        self.rto_count = 0;
    }

    /// A segment ending at `seq` was sent at `timestamp`: time it if nothing is being timed
    /// and it is new data.
    pub(super) fn on_send(&mut self, timestamp: Instant, seq: TcpSeqNumber) {
        if self
            .max_seq_sent
            .map(|max_seq_sent| seq > max_seq_sent)
            .unwrap_or(true)
        {
            self.max_seq_sent = Some(seq);
            if self.timestamp.is_none() {
                self.timestamp = Some((timestamp, seq));
            }
        }
    }

    /// An RTT sample from a TCP timestamp the remote echoed (`rtt` milliseconds): taken, and
    /// the segment timed the other way forgotten (it would measure the same round trip).
    pub(super) fn sample_echoed(&mut self, rtt: u32) {
        self.sample(rtt);
        self.timestamp = None;
    }

    /// An ACK up to `seq` arrived at `timestamp`: a measurement if it covers the timed segment.
    pub(super) fn on_ack(&mut self, timestamp: Instant, seq: TcpSeqNumber) {
        if let Some((sent_timestamp, sent_seq)) = self.timestamp {
            if seq >= sent_seq {
                self.sample((timestamp - sent_timestamp).total_millis() as u32);
                self.timestamp = None;
            }
        }
    }

    /// The retransmission timer expired: back off.
    pub(super) fn on_rto(&mut self) {
        // RFC 6298 (5.5) The host MUST set RTO <- RTO * 2 ("back off the timer").  The
        // maximum value discussed in (2.5) above may be used to provide
        // an upper bound to this doubling operation.
        self.rto = (self.rto * 2).min(RTTE_MAX_RTO);

        // RFC 6298: a TCP implementation MAY clear SRTT and RTTVAR after
        // backing off the timer multiple times as it is likely that the current
        // SRTT and RTTVAR are bogus in this situation.  Once SRTT and RTTVAR
        // are cleared, they should be initialized with the next RTT sample
        // taken per (2.2) rather than using (2.3).
        self.rto_count += 1;
        if self.rto_count >= 3 {
            self.rto_count = 0;
            self.have_measurement = false;
        }
    }

    /// Data is being retransmitted: its ACK would give a bogus measurement (Karn).
    pub(super) fn on_retransmit(&mut self) {
        self.timestamp = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_path_gets_the_floor_not_one_second() {
        let mut r = RttEstimator::default();
        assert_eq!(r.retransmission_timeout().total_millis(), 1000);
        r.sample(2);
        assert_eq!(
            r.retransmission_timeout().total_millis(),
            u64::from(DEFAULT_MIN_RTO_MS)
        );
        // A long path is not held to the floor.
        let mut r = RttEstimator::default();
        r.sample(300);
        assert_eq!(r.retransmission_timeout().total_millis(), 300 + 4 * 150);
    }

    #[test]
    fn the_floor_is_settable_and_survives_backoff_and_reset_of_measurements() {
        let mut r = RttEstimator::with_min_rto(1000);
        r.sample(2);
        assert_eq!(r.retransmission_timeout().total_millis(), 1000);
        r.set_min_rto(50);
        // Not lowered until the next measurement.
        assert_eq!(r.retransmission_timeout().total_millis(), 1000);
        r.sample(2);
        assert_eq!(r.retransmission_timeout().total_millis(), 50);
        r.set_min_rto(400);
        assert_eq!(r.retransmission_timeout().total_millis(), 400);
        r.on_rto();
        assert_eq!(r.retransmission_timeout().total_millis(), 800);
        // Three timeouts forget the measurements; the floor stays.
        r.on_rto();
        r.on_rto();
        r.sample(2);
        assert_eq!(r.min_rto(), 400);
        assert_eq!(r.retransmission_timeout().total_millis(), 400);
        // Capped at the maximum.
        r.set_min_rto(u32::MAX);
        assert_eq!(r.min_rto(), RTTE_MAX_RTO);
    }
}
