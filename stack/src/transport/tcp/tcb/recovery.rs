//! Loss recovery: which unacknowledged bytes to send again, and when, between the first sign of
//! a loss and the cumulative ACK that covers everything sent before it.
//!
//! * With SACK (RFC 2018, negotiated on the SYN): conservative SACK-based recovery, RFC 6675.
//!   The [`Scoreboard`] holds what the remote reported; a hole is sent again once it counts as
//!   lost, lowest first, each at most once per recovery episode; the bytes in flight (`pipe`)
//!   leave out SACKed and lost bytes, so that the congestion window is spent on what is really
//!   in the network.
//! * Without SACK: NewReno (RFC 6582). The first unacknowledged segment is sent again when
//!   recovery starts and after every partial ACK, until the ACK reaches the recovery point.
//! * Recovery starts on the third duplicate ACK, or as soon as the scoreboard says the first
//!   unacknowledged byte is lost (RFC 6675 section 5); it ends when the cumulative ACK reaches
//!   the highest sequence number sent when it started (the recovery point).
//! * Under a congestion controller (Reno, CUBIC), how much recovery may send follows
//!   proportional rate reduction (RFC 6937, [`send_quota`](Recovery::send_quota)): in
//!   proportion to what the remote reports delivered, down to the controller's slow-start
//!   threshold. Without one, the peer's window alone limits it.
//! * A retransmission timeout ends recovery. The scoreboard survives the first timeout, so
//!   that the bytes sent again from the cumulative ACK skip what the remote holds (Linux does
//!   the same); a second timeout in a row clears it, in case the remote dropped data it had
//!   SACKed (RFC 2018 allows it, and zcnet's own receiver does so when its pool runs dry).
//!
//! The connection (`socket.rs`) asks [`next_retransmission`](Recovery::next_retransmission)
//! before sending new data, and reports each retransmission sent
//! ([`retransmitted_segments`](Recovery::retransmitted_segments)). With a peer that SACKs,
//! what RACK ([`rack`](super::rack)) deems lost goes first, within the same congestion
//! window: RACK also finds a retransmission that was lost, which a hole sent once per episode
//! never would, and starts recovery when it finds a loss outside one.

use smoltcp::wire::TcpSeqNumber;

use super::sack::Scoreboard;

/// A connection's loss recovery state (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Recovery {
    /// What the remote SACKed past the cumulative ACK (empty when it does not SACK).
    scoreboard: Scoreboard,
    /// In recovery: the highest sequence number sent when it began (RFC 6675 `RecoveryPoint`).
    point: Option<TcpSeqNumber>,
    /// Bytes below this were sent again in this recovery (RFC 6675 `HighRxt`).
    high_rxt: TcpSeqNumber,
    /// Whether this recovery's first retransmission, which goes regardless of the congestion
    /// window (RFC 6675 4.3), was sent.
    first_sent: bool,
    /// A retransmission timeout fired and no data was acknowledged since.
    rto_unanswered: bool,
    /// The cumulative ACK at the last [`on_ack`](Self::on_ack).
    una: TcpSeqNumber,
    /// Bytes the last ACK reported delivered: newly cumulatively acknowledged plus newly
    /// SACKed (RFC 6937 `DeliveredData`).
    delivered: usize,
    /// PRR (RFC 6937), during recovery: bytes delivered since it began (`prr_delivered`)...
    prr_delivered: usize,
    /// ... bytes sent since it began (`prr_out`) ...
    prr_out: usize,
    /// ... and the bytes in flight when it began (`RecoverFS`).
    recover_fs: usize,
    /// Segments sent again since the connection opened (timeouts included).
    retransmissions: u32,
}

impl Recovery {
    /// Back to the state of a new connection.
    pub(crate) fn reset(&mut self) {
        *self = Self::default();
    }

    /// Whether a recovery episode is under way.
    pub(crate) fn in_recovery(&self) -> bool {
        self.point.is_some()
    }

    /// Segments sent again since the connection opened.
    pub(crate) fn retransmissions(&self) -> u32 {
        self.retransmissions
    }

    /// An acceptable ACK arrived: `una` is the cumulative ACK now, `sack` its SACK blocks (if
    /// the remote SACKs), `snd_max` one past the highest sequence number sent, and `acked`
    /// whether it acknowledged new data.
    pub(crate) fn on_ack(
        &mut self,
        una: TcpSeqNumber,
        sack: Option<&[Option<(u32, u32)>]>,
        snd_max: TcpSeqNumber,
        acked: bool,
    ) {
        let sacked_before = self.scoreboard.sacked_bytes();
        match sack {
            Some(blocks) => self.scoreboard.record(blocks, una, snd_max),
            None => self.scoreboard.advance(una),
        }
        // DeliveredData: the ACK's advance plus the change in SACKed bytes (which falls by
        // what the advance covered of them).
        let advance = if una > self.una { una - self.una } else { 0 };
        self.una = una;
        self.delivered = (advance + self.scoreboard.sacked_bytes()).saturating_sub(sacked_before);
        if self.in_recovery() {
            self.prr_delivered += self.delivered;
        }
        if acked {
            self.rto_unanswered = false;
        }
        if self.point.is_some_and(|point| una >= point) {
            self.point = None;
        }
    }

    /// Whether the SACK scoreboard alone says the first unacknowledged byte `una` is lost, so
    /// that recovery should start without waiting for a third duplicate ACK.
    pub(crate) fn sack_says_lost(&self, una: TcpSeqNumber, mss: usize) -> bool {
        !self.in_recovery() && self.scoreboard.is_lost(una, mss)
    }

    /// Starts a recovery episode (no-op during one): `una` the cumulative ACK, `snd_nxt` the
    /// highest sequence number sent. Returns whether one started (the congestion controller
    /// then reduces its window, once per episode).
    pub(crate) fn enter(&mut self, una: TcpSeqNumber, snd_nxt: TcpSeqNumber) -> bool {
        if self.in_recovery() || snd_nxt <= una {
            return false;
        }
        self.point = Some(snd_nxt);
        self.high_rxt = una;
        self.first_sent = false;
        // PRR: the ACK that started it counts as delivered within it.
        self.prr_delivered = self.delivered;
        self.prr_out = 0;
        self.recover_fs = snd_nxt - una;
        true
    }

    /// `len` bytes of sequence space were sent (new data or again): counted against PRR's
    /// quota during recovery.
    pub(crate) fn on_sent(&mut self, len: usize) {
        if self.in_recovery() {
            self.prr_out += len;
        }
    }

    /// Proportional rate reduction (RFC 6937), during recovery: how many bytes may be sent
    /// now, with `pipe` the bytes in flight, `ssthresh` the congestion controller's slow-start
    /// threshold (its target window) and `mss` the segment size. Above `ssthresh`, sending
    /// follows delivery in the proportion `ssthresh / RecoverFS`, so the window comes down to
    /// `ssthresh` smoothly over one round trip instead of stopping until half the flight
    /// drained (rounded up to whole segments); below it, slow start back up to it, at most
    /// one segment more than was delivered (PRR-SSRB).
    pub(crate) fn send_quota(&self, pipe: usize, ssthresh: usize, mss: usize) -> usize {
        if pipe > ssthresh {
            let target = (self.prr_delivered as u64 * ssthresh as u64)
                .div_ceil(self.recover_fs.max(1) as u64);
            let quota = usize::try_from(target)
                .unwrap_or(usize::MAX)
                .saturating_sub(self.prr_out);
            // Whole segments, as Linux counts: a share of a segment sends the segment.
            quota.div_ceil(mss.max(1)).saturating_mul(mss)
        } else {
            let limit = self
                .prr_delivered
                .saturating_sub(self.prr_out)
                .max(self.delivered)
                + mss;
            (ssthresh - pipe).min(limit)
        }
    }

    /// A retransmission timeout fired: recovery ends (the sender goes back to the cumulative
    /// ACK), and a second timeout in a row forgets the scoreboard.
    pub(crate) fn on_rto(&mut self) {
        self.point = None;
        if self.rto_unanswered {
            self.scoreboard.clear();
        }
        self.rto_unanswered = true;
    }

    /// The next bytes to send again, as `(start, most bytes)`, or `None`: the first hole at or
    /// past what this recovery already sent again, if it counts as lost (the first
    /// unacknowledged byte always does, RFC 6675 and RFC 6582 alike). `room` is what the
    /// congestion window allows to send now (`cwnd - pipe`, or PRR's
    /// [`send_quota`](Self::send_quota)): after the first one, a retransmission waits until it
    /// is not 0.
    pub(crate) fn next_retransmission(
        &self,
        una: TcpSeqNumber,
        mss: usize,
        room: usize,
    ) -> Option<(TcpSeqNumber, usize)> {
        let point = self.point?;
        if !self.may_retransmit(room) {
            return None;
        }
        let from = self.high_rxt.max(una);
        if from >= point {
            return None;
        }
        match self.scoreboard.hole_from(una, from) {
            Some((start, end)) if start < point => (start == una
                || self.scoreboard.is_lost(start, mss))
            .then(|| (start, end.min(point) - start)),
            // No hole reported past `from`: NewReno's rule, the first unacknowledged segment.
            _ => (from == una).then(|| (una, point - una)),
        }
    }

    /// Whether the remote SACKed anything past the cumulative ACK.
    pub(crate) fn has_sacked(&self) -> bool {
        self.scoreboard.sacked_bytes() > 0
    }

    /// Whether the remote SACKed all of `[start, end)`.
    pub(crate) fn is_sacked(&self, start: TcpSeqNumber, end: TcpSeqNumber) -> bool {
        self.scoreboard.sacked_end(start).is_some_and(|e| e >= end)
    }

    /// Whether the congestion window lets another retransmission go (the first of an episode
    /// always may, RFC 6675 4.3); `room` as for
    /// [`next_retransmission`](Self::next_retransmission).
    pub(crate) fn may_retransmit(&self, room: usize) -> bool {
        !self.first_sent || room > 0
    }

    /// Bytes `[.., end)` were sent again (by recovery or after a timeout), as one segment.
    #[cfg(test)]
    pub(crate) fn retransmitted(&mut self, end: TcpSeqNumber) {
        self.retransmitted_segments(end, 1);
    }

    /// Bytes `[.., end)` were sent again as `segments` segments on the wire (a super-segment
    /// after a timeout is several).
    pub(crate) fn retransmitted_segments(&mut self, end: TcpSeqNumber, segments: u32) {
        if self.in_recovery() {
            self.high_rxt = self.high_rxt.max(end);
            self.first_sent = true;
        }
        self.retransmissions = self.retransmissions.saturating_add(segments);
    }

    /// Bytes in the network (RFC 6675 `pipe`): those sent past `una` up to `snd_nxt`, less
    /// those the remote SACKed and, during recovery, those in holes counted as lost and not
    /// sent again yet.
    pub(crate) fn pipe(&self, una: TcpSeqNumber, snd_nxt: TcpSeqNumber, mss: usize) -> usize {
        if snd_nxt <= una {
            return 0;
        }
        let mut pipe = (snd_nxt - una).saturating_sub(self.scoreboard.sacked_bytes());
        if self.in_recovery() {
            let from = self.high_rxt.max(una);
            pipe = pipe.saturating_sub(self.scoreboard.lost_bytes(una, from, mss));
        }
        pipe
    }

    /// Where sending resumes if `seq` lies in a block the remote SACKed (after a timeout sends
    /// again from the cumulative ACK): the block's end.
    pub(crate) fn skip_sacked(&self, seq: TcpSeqNumber) -> Option<TcpSeqNumber> {
        self.scoreboard.sacked_end(seq)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    const MSS: usize = 100;

    fn seq(n: i32) -> TcpSeqNumber {
        TcpSeqNumber(n)
    }

    /// Ten segments 0..1000 in flight, the remote SACKing `blocks` with the ACK at `una`.
    fn recovering(una: i32, blocks: &[(u32, u32)]) -> Recovery {
        let mut r = Recovery::default();
        let sack: std::vec::Vec<_> = blocks.iter().map(|&b| Some(b)).collect();
        r.on_ack(seq(una), Some(&sack), seq(1000), false);
        assert!(r.sack_says_lost(seq(una), MSS));
        assert!(r.enter(seq(una), seq(1000)));
        r
    }

    #[test]
    fn sack_recovery_sends_each_lost_hole_once_lowest_first() {
        // Segments 0 and 300 lost, the rest up to 700 SACKed.
        let mut r = recovering(0, &[(100, 300), (400, 700)]);
        assert_eq!(
            r.next_retransmission(seq(0), MSS, usize::MAX),
            Some((seq(0), 100))
        );
        r.retransmitted(seq(100));
        assert_eq!(
            r.next_retransmission(seq(0), MSS, usize::MAX),
            Some((seq(300), 100))
        );
        r.retransmitted(seq(400));
        // Nothing else is known lost (700..1000 may be in flight).
        assert_eq!(r.next_retransmission(seq(0), MSS, usize::MAX), None);
        // The first hole is filled: the ACK jumps to 300; then to the point: recovery ends.
        r.on_ack(seq(300), Some(&[Some((400, 700))]), seq(1000), true);
        assert!(r.in_recovery());
        r.on_ack(seq(1000), Some(&[]), seq(1000), true);
        assert!(!r.in_recovery());
        assert_eq!(r.retransmissions(), 2);
    }

    #[test]
    fn pipe_leaves_out_sacked_and_lost_bytes() {
        let mut r = recovering(0, &[(100, 300), (400, 700)]);
        // 1000 sent, 500 SACKed, 200 lost and not sent again.
        assert_eq!(r.pipe(seq(0), seq(1000), MSS), 300);
        r.retransmitted(seq(100));
        assert_eq!(r.pipe(seq(0), seq(1000), MSS), 400);
        // After the first retransmission, a full window holds the next one back.
        assert_eq!(r.next_retransmission(seq(0), MSS, 0), None);
        assert_eq!(
            r.next_retransmission(seq(0), MSS, 100),
            Some((seq(300), 100))
        );
    }

    #[test]
    fn the_first_retransmission_ignores_the_congestion_window() {
        let r = recovering(0, &[(100, 400)]);
        assert_eq!(r.next_retransmission(seq(0), MSS, 0), Some((seq(0), 100)));
    }

    #[test]
    fn a_hole_not_yet_lost_waits() {
        // 500 SACKed above 0 (lost), only 100 above 300: not lost yet.
        let mut r = recovering(0, &[(100, 300), (400, 500), (600, 700)]);
        r.retransmitted(seq(100));
        // Three blocks above 0, two above 300, 200 bytes above 300 (not more than 2 MSS).
        assert_eq!(r.next_retransmission(seq(0), MSS, usize::MAX), None);
        // One more block SACKed above: 300 is lost now.
        r.on_ack(seq(0), Some(&[Some((800, 900))]), seq(1000), false);
        assert_eq!(
            r.next_retransmission(seq(0), MSS, usize::MAX),
            Some((seq(300), 100))
        );
    }

    #[test]
    fn newreno_sends_the_first_segment_after_each_partial_ack() {
        let mut r = Recovery::default();
        r.on_ack(seq(0), None, seq(1000), false);
        assert!(r.enter(seq(0), seq(1000)));
        // Already in recovery: no second episode (no second window reduction).
        assert!(!r.enter(seq(0), seq(1000)));
        assert_eq!(
            r.next_retransmission(seq(0), MSS, usize::MAX),
            Some((seq(0), 1000))
        );
        r.retransmitted(seq(100));
        assert_eq!(r.next_retransmission(seq(0), MSS, usize::MAX), None);
        // Partial ACK to 400 (300 was lost too): send it.
        r.on_ack(seq(300), None, seq(1000), true);
        assert_eq!(
            r.next_retransmission(seq(300), MSS, usize::MAX),
            Some((seq(300), 700))
        );
    }

    #[test]
    fn prr_sends_one_segment_for_every_two_delivered_down_to_half_the_flight() {
        // Twenty segments in flight, the first lost; the controller halves: ssthresh 1000.
        let mut r = Recovery::default();
        r.on_ack(seq(0), Some(&[]), seq(2000), false);
        r.on_ack(seq(0), Some(&[Some((100, 200))]), seq(2000), false);
        assert!(r.enter(seq(0), seq(2000)));
        let ssthresh = 1000;
        let mut snd_nxt = 2000;
        let mut sent_per_ack = std::vec::Vec::new();
        for i in 2..12 {
            let pipe = r.pipe(seq(0), seq(snd_nxt), MSS);
            assert!(pipe > ssthresh);
            let quota = r.send_quota(pipe, ssthresh, MSS);
            sent_per_ack.push(quota / MSS);
            // New data goes out.
            r.on_sent(quota);
            snd_nxt += quota as i32;
            // The next ACK SACKs one more of the first flight's segments.
            let block = Some((100, 100 * i + 100));
            r.on_ack(seq(0), Some(&[block]), seq(snd_nxt), false);
        }
        assert_eq!(sent_per_ack, [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]);
    }

    #[test]
    fn prr_below_ssthresh_slow_starts_back_at_most_a_segment_past_delivery() {
        let mut r = Recovery::default();
        r.on_ack(seq(0), Some(&[]), seq(1000), false);
        r.on_ack(seq(0), Some(&[Some((500, 1000))]), seq(1000), false);
        assert!(r.enter(seq(0), seq(1000)));
        // 500 delivered by the entering ACK, 500 lost: pipe 0 (nothing sent again yet).
        let pipe = r.pipe(seq(0), seq(1000), MSS);
        assert_eq!(pipe, 0);
        // Far below ssthresh: delivered plus one segment, not the whole gap to ssthresh.
        assert_eq!(r.send_quota(pipe, 2000, MSS), 600);
        r.on_sent(600);
        // Nothing delivered since: the last ACK's delivery plus one segment.
        assert_eq!(r.send_quota(600, 2000, MSS), 600);
        // Close to ssthresh: the gap.
        assert_eq!(r.send_quota(1950, 2000, MSS), 50);
    }

    #[test]
    fn a_second_timeout_in_a_row_forgets_the_scoreboard() {
        let mut r = recovering(0, &[(100, 400)]);
        r.on_rto();
        assert!(!r.in_recovery());
        assert_eq!(r.skip_sacked(seq(100)), Some(seq(400)));
        r.on_rto();
        assert_eq!(r.skip_sacked(seq(100)), None);
        // An ACK of new data between two timeouts keeps it.
        let mut r = recovering(0, &[(100, 400)]);
        r.on_rto();
        r.on_ack(seq(50), Some(&[]), seq(1000), true);
        r.on_rto();
        assert_eq!(r.skip_sacked(seq(100)), Some(seq(400)));
    }
}
