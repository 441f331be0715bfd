//! Time-based loss detection, RACK-TLP (RFC 8985), for connections whose peer SACKs.
//!
//! Duplicate-ACK counting (RFC 6675's `DupThresh`, in [`Recovery`](super::recovery::Recovery))
//! cannot see two kinds of loss, and before this module only the retransmission timeout found
//! them:
//!
//! * **A lost retransmission.** A hole is sent again once per recovery episode; if that copy is
//!   lost too, no count of SACKed bytes above it ever grows again.
//! * **A loss at the tail of a burst.** With fewer than three segments after the lost one, no
//!   third duplicate ACK comes; with the last segment lost, no ACK comes at all.
//!
//! RACK (*recent acknowledgement*) decides by time instead: a segment is lost when one sent
//! *after* it was delivered (cumulatively ACKed or SACKed) and a reordering window has passed on
//! top of the latest round trip since it was sent. TLP (*tail loss probe*) makes the remote
//! speak at the tail: when no ACK came for about two round trips, the last segment is sent
//! again, so that its ACK (with SACK blocks) lets RACK find what was lost before it. During
//! recovery the probe is the first segment not SACKed instead (see [`Rack::probe`]): zcnet's
//! extension for a send queue too small to keep new data flowing behind a lost
//! retransmission.
//!
//! ```text
//!  sent:   A(t0) B(t1) C(t2) D(t3)          C retransmitted at t5 → C'(t5)
//!  ACKs:   A acked, D SACKed (sent t3):      RACK.xmit = t3, RACK.rtt = now − t3
//!  B, C sent before t3 and not delivered: lost once now ≥ t1 + RACK.rtt + reo_wnd
//!  later:  E(t6) SACKed, C' not:             C' (t5 < t6) is lost again: sent a third time
//! ```
//!
//! What is tracked: a log of the segments in flight, in sequence order ([`LOG_LEN`] at most:
//! when full, a new segment is merged into the last entry, which then carries the later send
//! time: detection of that entry can only come later, never wrongly), each with its last
//! send time and whether it was sent more than once, was SACKed or is deemed lost. The log
//! is cleared on a retransmission timeout: the sender then goes back to the cumulative ACK and
//! logs the segments again as it resends them.
//!
//! The reordering window (RFC 8985 section 6.2, step 4) is a quarter of the minimum RTT times a
//! multiplier, at most the smoothed RTT. The multiplier starts at 1 and grows by one for each
//! round trip whose ACKs carried a D-SACK (RFC 2883: the remote got a segment twice, so a
//! retransmission was spurious and the path reorders more than the window allowed for); after
//! [`REO_WND_PERSIST`] recovery episodes without one it falls back to 1.
//!
//! Simplifications against RFC 8985, each on the safe side: the window is never zero (the RFC
//! uses zero during recovery while no reordering was seen); a probe retransmits a segment
//! already sent (new data, when the windows allow any, goes out anyway by the normal path); a
//! probe's own loss is not charged to the congestion window.

use heapless::Deque;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::TcpSeqNumber;

/// Most segments the log describes separately (see the module docs for what happens beyond).
pub(crate) const LOG_LEN: usize = 64;

/// The least probe timeout (Linux's floor): below it, a delayed ACK would trigger probes.
const MIN_PTO: Duration = Duration::from_millis(10);

/// RFC 8985 `WCDelAckT`: the longest a receiver may delay the ACK of a lone segment, added to
/// the probe timeout when only one segment is in flight.
const WORST_CASE_ACK_DELAY: Duration = Duration::from_millis(200);

/// Recovery episodes (and retransmission timeouts) without a D-SACK after which a widened
/// reordering window falls back to a quarter of the minimum RTT (RFC 8985
/// `RACK.reo_wnd_persist`).
pub(crate) const REO_WND_PERSIST: u8 = 16;

/// The largest reordering-window multiplier (see [`Rack::on_dsack`]).
const MAX_REO_WND_MULT: u32 = u16::MAX as u32;

/// One logged segment: `[start, end)` of sequence space, last sent at `xmit`.
#[derive(Debug, Clone, Copy)]
struct Sent {
    start: TcpSeqNumber,
    end: TcpSeqNumber,
    xmit: Instant,
    /// Sent more than once: an ACK of it may answer an earlier copy.
    retransmitted: bool,
    /// The remote SACKed all of it.
    sacked: bool,
    /// RACK deems it lost and it was not sent again since.
    lost: bool,
}

impl Sent {
    /// `[start, end)`, sent once at `xmit`.
    fn new(start: TcpSeqNumber, end: TcpSeqNumber, xmit: Instant) -> Self {
        Sent {
            start,
            end,
            xmit,
            retransmitted: false,
            sacked: false,
            lost: false,
        }
    }
}

/// The RACK-TLP state of one connection (see the module docs).
#[derive(Debug)]
pub(crate) struct Rack {
    /// Segments sent and not cumulatively acknowledged, in sequence order.
    log: Deque<Sent, LOG_LEN>,
    /// Send time and end of the most recently sent segment known delivered (`RACK.xmit_ts`,
    /// `RACK.end_seq`).
    latest: Option<(Instant, TcpSeqNumber)>,
    /// The round trip of that segment (`RACK.rtt`).
    rtt: Duration,
    /// The least round trip seen (`RACK.min_RTT`).
    min_rtt: Option<Duration>,
    /// When a segment not yet deemed lost would be, if nothing is delivered meanwhile.
    reorder_at: Option<Instant>,
    /// The tail loss probe.
    probe: Probe,
    /// Some logged segment was SACKed or sent again: only then can one be sent before the
    /// most recent delivery and still be unacknowledged (segments go out in sequence order
    /// otherwise, and cumulative ACKs deliver them in that order), so only then has
    /// [`detect`](Self::detect) anything to look at. Cleared with the log.
    irregular: bool,
    /// The reordering window in quarters of the minimum RTT (`RACK.reo_wnd_mult`): 1, plus one
    /// for each round trip that brought a D-SACK. Kept across timeouts, reset with the
    /// connection.
    reo_wnd_mult: u32,
    /// Recovery episodes left before `reo_wnd_mult` falls back to 1 (`RACK.reo_wnd_persist`).
    reo_wnd_persist: u8,
    /// The round trip that last widened the window: D-SACKs arriving while the cumulative ACK is
    /// below this sequence number belong to it and widen nothing more (`RACK.dsack_round`).
    dsack_round: Option<TcpSeqNumber>,
}

/// Where the tail loss probe stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// Not armed: nothing in flight, or an ACK brought news since the last probe.
    Idle,
    /// Goes at this time, unless an ACK brings news first.
    Armed(Instant),
    /// Its time passed: the next dispatch sends it.
    Due,
    /// Sent: no other until an ACK brings news (then the retransmission timer is next).
    Sent,
}

impl Default for Rack {
    fn default() -> Self {
        Self {
            log: Deque::new(),
            latest: None,
            rtt: Duration::ZERO,
            min_rtt: None,
            reorder_at: None,
            probe: Probe::Idle,
            irregular: false,
            reo_wnd_mult: 1,
            reo_wnd_persist: REO_WND_PERSIST,
            dsack_round: None,
        }
    }
}

impl Rack {
    /// Back to the state of a new connection.
    pub(crate) fn reset(&mut self) {
        *self = Self::default();
    }

    /// Forgets the segments in flight and any pending detection (a retransmission timeout, or
    /// a window that shrank below data sent: the sender starts again from the cumulative ACK).
    /// The round-trip figures stay.
    pub(crate) fn clear_flight(&mut self) {
        self.log.clear();
        self.latest = None;
        self.reorder_at = None;
        self.probe = Probe::Idle;
        self.irregular = false;
    }

    /// `[start, end)` was sent at `now`: appended if it is new sequence space, otherwise the
    /// logged segments it overlaps are marked sent again at `now`.
    #[inline]
    pub(crate) fn on_send(&mut self, start: TcpSeqNumber, end: TcpSeqNumber, now: Instant) {
        // New sequence space with room in the log (the usual send): appended, no call.
        let new = start < end && self.log.back().is_none_or(|last| start >= last.end);
        if new && !self.log.is_full() {
            let _ = self.log.push_back(Sent::new(start, end, now));
            return;
        }
        self.on_send_logged(start, end, now);
    }

    /// [`on_send`](Self::on_send) of a resend, or with the log full.
    #[inline(never)]
    fn on_send_logged(&mut self, start: TcpSeqNumber, end: TcpSeqNumber, now: Instant) {
        if start >= end {
            return;
        }
        let fresh = Sent::new(start, end, now);
        let full = self.log.is_full();
        match self.log.back_mut() {
            Some(last) if start >= last.end && full => {
                // Merged: the entry now carries the later send time (see the module docs).
                last.end = end;
                last.xmit = now;
                last.sacked = false;
                last.lost = false;
                return;
            }
            Some(last) if start < last.end => {}
            _ => {
                let _ = self.log.push_back(fresh);
                return;
            }
        }
        self.irregular = true;
        for s in self.log.iter_mut() {
            if s.start < end && start < s.end {
                s.xmit = now;
                s.retransmitted = true;
                s.lost = false;
            }
        }
        // Bytes past the log's end (a resend that also carries new data) are new.
        if let Some(last) = self.log.back_mut() {
            if end > last.end {
                last.end = end;
            }
        }
    }

    /// An ACK arrived at `now`: `una` is the cumulative ACK and `sacked(start, end)` says
    /// whether the remote SACKed all of `[start, end)` (`None`: nothing is SACKed). Updates
    /// the most recent delivery (RFC 8985 section 6.2, steps 1–3) and returns whether it moved
    /// (news to detect from).
    pub(crate) fn on_ack(
        &mut self,
        una: TcpSeqNumber,
        now: Instant,
        sacked: Option<impl Fn(TcpSeqNumber, TcpSeqNumber) -> bool>,
    ) -> bool {
        let mut moved = false;
        while let Some(front) = self.log.front_mut() {
            if front.end <= una {
                let s = *front;
                self.log.pop_front();
                moved |= self.delivered(&s, now);
            } else {
                if front.start < una {
                    front.start = una;
                }
                break;
            }
        }
        if self.log.is_empty() {
            self.irregular = false;
        }
        if let Some(sacked) = sacked {
            let mut newly = heapless::Vec::<Sent, LOG_LEN>::new();
            for s in self.log.iter_mut().filter(|s| !s.sacked) {
                if sacked(s.start, s.end) {
                    s.sacked = true;
                    s.lost = false;
                    let _ = newly.push(*s);
                }
            }
            self.irregular |= !newly.is_empty();
            for s in &newly {
                moved |= self.delivered(s, now);
            }
        }
        if moved {
            // The remote answered: no probe until the next send or ACK arms one.
            self.probe = Probe::Idle;
        }
        moved
    }

    /// `s` was delivered: it becomes the most recent delivery if it was sent after the current
    /// one (a retransmitted segment only if its RTT is not shorter than the minimum, so that
    /// an ACK of the first copy is not taken for one of the last, RFC 8985 step 2).
    fn delivered(&mut self, s: &Sent, now: Instant) -> bool {
        let rtt = now - s.xmit;
        if s.retransmitted && self.min_rtt.is_some_and(|min| rtt < min) {
            return false;
        }
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |min| min.min(rtt)));
        let newer = self
            .latest
            .is_none_or(|(xmit, end)| s.xmit > xmit || (s.xmit == xmit && s.end > end));
        if newer {
            self.latest = Some((s.xmit, s.end));
            self.rtt = rtt;
        }
        newer
    }

    /// The reordering window: `reo_wnd_mult` quarters of the least RTT, at most `srtt` (the
    /// smoothed RTT, when one was measured).
    fn reo_wnd(&self, srtt: Option<Duration>) -> Duration {
        let wnd = self
            .min_rtt
            .map_or(Duration::ZERO, |min| min / 4 * self.reo_wnd_mult);
        srtt.map_or(wnd, |srtt| wnd.min(srtt))
    }

    /// An ACK carried a D-SACK (the remote received something twice): widens the reordering
    /// window by a quarter of the minimum RTT, once per round trip (RFC 8985 section 6.2, step
    /// 4). `una` is the cumulative ACK, `snd_max` one past the highest sequence number sent.
    pub(crate) fn on_dsack(&mut self, una: TcpSeqNumber, snd_max: TcpSeqNumber) {
        if self.dsack_round.is_some_and(|round| una < round) {
            return;
        }
        self.dsack_round = Some(snd_max);
        // Bounded so that `min_rtt / 4 * mult` cannot overflow; the cap at the smoothed RTT
        // makes any larger multiplier irrelevant anyway.
        self.reo_wnd_mult = (self.reo_wnd_mult + 1).min(MAX_REO_WND_MULT);
        self.reo_wnd_persist = REO_WND_PERSIST;
    }

    /// A recovery episode ended, or a retransmission timeout fired: after
    /// [`REO_WND_PERSIST`] of them without a D-SACK the window is a quarter of the minimum RTT
    /// again.
    pub(crate) fn on_recovery_end(&mut self) {
        self.reo_wnd_persist = self.reo_wnd_persist.saturating_sub(1);
        if self.reo_wnd_persist == 0 {
            self.reo_wnd_mult = 1;
        }
    }

    /// Marks lost every segment sent before the most recent delivery whose time is up (RFC 8985
    /// section 6.2, step 5) and sets the reordering timer for the others; `srtt` (the smoothed
    /// RTT, if measured) caps the reordering window. Returns whether a segment was newly marked
    /// lost.
    pub(crate) fn detect(&mut self, now: Instant, srtt: Option<Duration>) -> bool {
        self.reorder_at = None;
        let Some((latest_xmit, latest_end)) = self.latest.filter(|_| self.irregular) else {
            return false;
        };
        let wait = self.rtt + self.reo_wnd(srtt);
        let mut newly = false;
        let mut reorder_at: Option<Instant> = None;
        for s in self.log.iter_mut().filter(|s| !s.sacked && !s.lost) {
            let before = s.xmit < latest_xmit || (s.xmit == latest_xmit && s.end <= latest_end);
            if !before {
                continue;
            }
            let deadline = s.xmit + wait;
            if now >= deadline {
                s.lost = true;
                newly = true;
            } else {
                reorder_at = Some(reorder_at.map_or(deadline, |at| at.min(deadline)));
            }
        }
        self.reorder_at = reorder_at;
        newly
    }

    /// The first segment deemed lost and not sent again since, as `(start, bytes)`, from the
    /// cumulative ACK `una` on.
    pub(crate) fn next_lost(&self, una: TcpSeqNumber) -> Option<(TcpSeqNumber, usize)> {
        self.log
            .iter()
            .find(|s| s.lost && s.end > una)
            .map(|s| from_una(s, una))
    }

    /// (Re)arms the tail loss probe after new data was sent or an ACK brought news at `now`,
    /// with data in flight (RFC 8985 section 7.2): two smoothed RTTs (`srtt`), plus the
    /// worst-case delayed ACK when one segment is in flight, at least [`MIN_PTO`], and only if
    /// sooner than the retransmission timer (`rto_at`). Not after a probe was sent and before
    /// an ACK brought news: one probe, then the retransmission timer.
    pub(crate) fn arm_probe(
        &mut self,
        now: Instant,
        srtt: Duration,
        one_segment: bool,
        rto_at: Option<Instant>,
    ) {
        if matches!(self.probe, Probe::Due | Probe::Sent) {
            return;
        }
        self.probe = Probe::Idle;
        if self.log.is_empty() {
            return;
        }
        let mut pto = srtt * 2;
        if one_segment {
            pto += WORST_CASE_ACK_DELAY;
        }
        let at = now + pto.max(MIN_PTO);
        // A probe due no sooner than the timeout is pointless: the timeout resends anyway.
        if rto_at.is_none_or(|rto| at < rto) {
            self.probe = Probe::Armed(at);
        }
    }

    /// Whether a probe is due at `now` (its time passed; see [`probe`](Self::probe)).
    pub(crate) fn probe_fires(&mut self, now: Instant) -> bool {
        if let Probe::Armed(at) = self.probe {
            if now >= at {
                self.probe = Probe::Due;
            }
        }
        self.probe == Probe::Due
    }

    /// Whether a probe is due (its timer fired and it was not sent yet).
    pub(crate) fn probe_is_due(&self) -> bool {
        self.probe == Probe::Due
    }

    /// The probe to send, if one is due. Outside recovery the last segment sent, unless the
    /// remote SACKed it (RFC 8985's probe). During recovery (`in_recovery`) the first segment
    /// not SACKed: everything lost was sent again and nothing answered for two round trips,
    /// so the retransmission at the left edge was probably lost too, and with nothing sent
    /// after it (the send queue full of data waiting on that hole) no delivery would show it.
    pub(crate) fn probe(
        &self,
        una: TcpSeqNumber,
        in_recovery: bool,
    ) -> Option<(TcpSeqNumber, usize)> {
        if self.probe != Probe::Due {
            return None;
        }
        let s = if in_recovery {
            self.log.iter().find(|s| !s.sacked && s.end > una)
        } else {
            self.log.back().filter(|s| !s.sacked)
        };
        s.filter(|s| s.end > una).map(|s| from_una(s, una))
    }

    /// The probe went out, or there was none to send: no other until an ACK brings news.
    pub(crate) fn probe_sent(&mut self) {
        if self.probe == Probe::Due {
            self.probe = Probe::Sent;
        }
    }

    /// Whether the reordering timer's time passed at `now` (the caller then runs
    /// [`detect`](Self::detect)).
    pub(crate) fn reorder_fires(&self, now: Instant) -> bool {
        self.reorder_at.is_some_and(|at| now >= at)
    }

    /// The earliest of the reordering and probe timers, if armed.
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        let probe_at = match self.probe {
            Probe::Armed(at) => Some(at),
            _ => None,
        };
        match (self.reorder_at, probe_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// `s`'s sequence space from `una` on (the log is trimmed to the cumulative ACK as ACKs come;
/// this keeps a caller's offset arithmetic safe regardless). `s.end > una`.
fn from_una(s: &Sent, una: TcpSeqNumber) -> (TcpSeqNumber, usize) {
    let start = s.start.max(una);
    (start, s.end - start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(n: i32) -> TcpSeqNumber {
        TcpSeqNumber(n)
    }

    fn ms(n: i64) -> Instant {
        Instant::from_millis(n)
    }

    /// Segments of 100 bytes from 0, the `i`th sent at `i` ms.
    fn sent(n: i32) -> Rack {
        let mut r = Rack::default();
        for i in 0..n {
            r.on_send(seq(i * 100), seq(i * 100 + 100), ms(i64::from(i)));
        }
        r
    }

    fn sacked(blocks: &[(i32, i32)]) -> Option<impl Fn(TcpSeqNumber, TcpSeqNumber) -> bool + '_> {
        Some(move |s, e| blocks.iter().any(|&(a, b)| seq(a) <= s && e <= seq(b)))
    }

    #[test]
    fn a_segment_sent_before_a_delivered_one_is_lost_after_an_rtt_and_the_window() {
        let mut r = sent(4);
        // Segment 0 acked at 10 ms (RTT 10), segment 3 (sent at 3) SACKed at 13 ms.
        assert!(r.on_ack(seq(100), ms(10), sacked(&[])));
        assert!(r.on_ack(seq(100), ms(13), sacked(&[(300, 400)])));
        // 1 and 2 were sent before 3: lost at xmit + RTT (10) + min RTT / 4 (2.5).
        assert!(!r.detect(ms(13), None));
        assert_eq!(r.poll_at(), Some(Instant::from_micros(13_500)));
        assert!(r.detect(Instant::from_micros(13_500), None));
        assert_eq!(r.next_lost(seq(0)), Some((seq(100), 100)));
        assert!(r.detect(ms(15), None));
        // Sent again: no longer lost; the next is.
        r.on_send(seq(100), seq(200), ms(15));
        assert_eq!(r.next_lost(seq(0)), Some((seq(200), 100)));
        r.on_send(seq(200), seq(300), ms(15));
        assert_eq!(r.next_lost(seq(0)), None);
    }

    /// The first test's situation (RTT 10, min RTT 10, segments 1 and 2 waiting on the
    /// reordering window from the SACK of 3 at 13 ms): when segment 1 counts as lost.
    fn lost_at(r: &mut Rack, srtt: Option<Duration>) -> Instant {
        assert!(r.on_ack(seq(100), ms(10), sacked(&[])));
        assert!(r.on_ack(seq(100), ms(13), sacked(&[(300, 400)])));
        assert!(!r.detect(ms(13), srtt));
        let at = r.poll_at().expect("the reordering timer is armed");
        assert!(r.detect(at, srtt));
        assert_eq!(r.next_lost(seq(0)), Some((seq(100), 100)));
        at
    }

    #[test]
    fn a_dsack_widens_the_reordering_window_once_per_round_trip() {
        // Without a D-SACK: sent at 1 + RTT 10 + min RTT / 4.
        assert_eq!(lost_at(&mut sent(4), None), Instant::from_micros(13_500));
        let mut r = sent(4);
        r.on_dsack(seq(0), seq(400));
        // A second D-SACK of the same round trip (the cumulative ACK still below 400).
        r.on_dsack(seq(300), seq(400));
        assert_eq!(lost_at(&mut r, None), ms(16));
        // The next round trip's D-SACK widens it again: three quarters.
        let mut r = sent(4);
        r.on_dsack(seq(0), seq(400));
        r.on_dsack(seq(400), seq(800));
        assert_eq!(lost_at(&mut r, None), Instant::from_micros(18_500));
        // ... but never past the smoothed RTT.
        let mut r = sent(4);
        for round in 1..=20 {
            r.on_dsack(seq(round * 400), seq(round * 400 + 400));
        }
        assert_eq!(lost_at(&mut r, Some(Duration::from_millis(4))), ms(15));
    }

    #[test]
    fn the_widened_window_lasts_sixteen_recoveries_without_a_dsack() {
        let mut r = sent(4);
        r.on_dsack(seq(0), seq(400));
        for _ in 1..REO_WND_PERSIST {
            r.on_recovery_end();
        }
        assert_eq!(lost_at(&mut r, None), ms(16));
        let mut r = sent(4);
        r.on_dsack(seq(0), seq(400));
        for _ in 0..REO_WND_PERSIST {
            r.on_recovery_end();
        }
        assert_eq!(lost_at(&mut r, None), Instant::from_micros(13_500));
        // A D-SACK in between starts the count again.
        let mut r = sent(4);
        r.on_dsack(seq(0), seq(400));
        for _ in 1..REO_WND_PERSIST {
            r.on_recovery_end();
        }
        r.on_dsack(seq(400), seq(800));
        r.on_recovery_end();
        assert_eq!(lost_at(&mut r, None), Instant::from_micros(18_500));
        // The multiplier is bounded (no overflow however many rounds bring D-SACKs).
        let mut r = Rack::default();
        for round in 0..70_000 {
            r.on_dsack(seq(round), seq(round + 1));
        }
        assert_eq!(r.reo_wnd_mult, MAX_REO_WND_MULT);
    }

    #[test]
    fn a_lost_retransmission_is_found_without_a_timeout() {
        let mut r = sent(3);
        r.on_ack(seq(0), ms(10), sacked(&[(100, 300)]));
        assert!(r.detect(ms(20), None));
        assert_eq!(r.next_lost(seq(0)), Some((seq(0), 100)));
        r.on_send(seq(0), seq(100), ms(20));
        // New data sent after the retransmission is SACKed: the retransmission is lost too.
        r.on_send(seq(300), seq(400), ms(21));
        r.on_ack(seq(0), ms(31), sacked(&[(100, 400)]));
        assert!(r.detect(ms(40), None));
        assert_eq!(r.next_lost(seq(0)), Some((seq(0), 100)));
    }

    #[test]
    fn what_it_names_to_send_starts_at_the_cumulative_ack() {
        let mut r = sent(3);
        r.on_ack(seq(0), ms(10), sacked(&[(200, 300)]));
        assert!(r.detect(ms(20), None));
        assert_eq!(r.next_lost(seq(50)), Some((seq(50), 50)));
        assert_eq!(r.next_lost(seq(200)), None);
        r.arm_probe(ms(20), Duration::ZERO, false, None);
        assert!(r.probe_fires(ms(30)));
        assert_eq!(r.probe(seq(150), true), Some((seq(150), 50)));
    }

    #[test]
    fn nothing_is_lost_without_a_later_delivery() {
        let mut r = sent(3);
        // Only the first is acked: the others may be in flight.
        r.on_ack(seq(100), ms(10), sacked(&[]));
        assert!(!r.detect(ms(1000), None));
        assert_eq!(r.next_lost(seq(0)), None);
        assert_eq!(r.poll_at(), None);
    }

    #[test]
    fn an_ack_of_a_first_copy_is_not_taken_for_the_retransmission() {
        let mut r = sent(2);
        r.on_ack(seq(100), ms(10), sacked(&[]));
        // Segment 1 resent at 50 ms; its first copy's ACK comes 1 ms later: too quick to be
        // the retransmission's (min RTT 10): not a delivery that moves RACK.
        r.on_send(seq(100), seq(200), ms(50));
        assert!(!r.on_ack(seq(200), ms(51), sacked(&[])));
    }

    #[test]
    fn the_probe_is_the_last_segment_two_rtts_after_the_send() {
        let mut r = sent(3);
        r.arm_probe(ms(2), Duration::from_millis(5), false, Some(ms(202)));
        assert_eq!(r.poll_at(), Some(ms(12)));
        assert!(!r.probe_fires(ms(11)));
        assert!(r.probe_fires(ms(12)));
        assert_eq!(r.probe(seq(0), false), Some((seq(200), 100)));
        // In recovery, the left edge.
        assert_eq!(r.probe(seq(0), true), Some((seq(0), 100)));
        r.probe_sent();
        assert_eq!(r.probe(seq(0), false), None);
        // One probe, then the retransmission timer: not re-armed until an ACK has news.
        r.arm_probe(ms(13), Duration::from_millis(5), false, Some(ms(202)));
        assert_eq!(r.poll_at(), None);
        r.on_ack(seq(0), ms(14), sacked(&[(200, 300)]));
        r.arm_probe(ms(14), Duration::from_millis(5), false, Some(ms(202)));
        assert_eq!(r.poll_at(), Some(ms(24)));
        // One segment in flight: the worst-case delayed ACK is added; later than the
        // timeout: no probe.
        let mut r = sent(1);
        r.arm_probe(ms(0), Duration::from_millis(5), true, Some(ms(200)));
        assert_eq!(r.poll_at(), None);
        // An ACK with news disarms it.
        let mut r = sent(2);
        r.arm_probe(ms(1), Duration::ZERO, false, None);
        assert_eq!(r.poll_at(), Some(ms(11)));
        r.on_ack(seq(100), ms(5), sacked(&[]));
        assert_eq!(r.poll_at(), None);
    }

    #[test]
    fn a_full_log_merges_into_its_last_entry_and_a_timeout_clears_it() {
        let mut r = sent(LOG_LEN as i32 + 3);
        assert_eq!(r.log.len(), LOG_LEN);
        let last = r.log.back().unwrap();
        assert_eq!(last.end, seq((LOG_LEN as i32 + 3) * 100));
        assert_eq!(last.xmit, ms(i64::from(LOG_LEN as i32 + 2)));
        r.clear_flight();
        assert!(r.log.is_empty());
        assert_eq!(r.next_lost(seq(0)), None);
    }
}
