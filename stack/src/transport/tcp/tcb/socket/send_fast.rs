//! The send side's fast path: new data of an established connection in its steady state,
//! one whole send-queue frame (or a run of them), with the connection's next deadline worked
//! out from what the send just did instead of asked again.
//!
//! [`Tcb::dispatch_polled`] tries it first; whatever it does not take goes to the full
//! `dispatch`. Both send the same segment and leave the same state: the differential harness
//! (`twin.rs`) runs one world with the fast paths and one without on every operation, and its
//! fuzz target on arbitrary ones.

use smoltcp::time::Instant;
use smoltcp::wire::{IpProtocol, IpRepr, TcpControl, TcpRepr};
use zcnet_buffer::TxFrame;

use super::{wire_segments_of, State, Tcb, TCP_HEADER_LEN};
use crate::transport::tcp::tcb::congestion::Controller;
use crate::transport::tcp::tcb::context::{PollAt, TcpContext};
use crate::transport::tcp::tcb::send::Segment;
use crate::transport::tcp::tcb::timer::{AckDelayTimer, Timer};

/// Why the fast path declined a dispatch (the full one then runs from the start).
pub(super) struct Declined;

impl Tcb<'_> {
    /// Whether nothing of the connection's timers, loss recovery or RACK is due or running at
    /// `now`: the preamble of the full `dispatch` would change nothing but what the fast path
    /// does itself (the congestion controller's `pre_transmit`).
    #[inline(always)]
    fn quiet_at(&self, now: Instant) -> bool {
        let timer_quiet = match self.timer {
            Timer::Idle { keep_alive_at } => keep_alive_at.is_none_or(|at| at > now),
            Timer::Retransmit { expires_at } => expires_at > now,
            _ => false,
        };
        // A connection that was quiet (nothing to send) counts its timeout from now on, as
        // the full path does.
        timer_quiet
            && self
                .timeout
                .is_none_or(|timeout| now < self.remote_last_ts.unwrap_or(now) + timeout)
            && !self.recovery.in_recovery()
            && !self.recovery.has_sacked()
            && !self.rack.probe_is_due()
            && self.rack.poll_at().is_none_or(|at| at > now)
            && self.path_mtu.deadline().is_none()
    }

    /// The fast path of [`dispatch_polled`](Self::dispatch_polled) (see the module docs): an
    /// ESTABLISHED connection with no timer, recovery, RACK or path MTU event due, new data
    /// queued whose next frame goes whole within the peer's window, the congestion window and
    /// the MSS (Nagle and the super-segment deferral permitting). Sends it (with the frames
    /// after it, on a link that takes super-segments) and returns the connection's next
    /// [`poll_at`](Self::poll_at) answer when it knows it (everything queued is sent),
    /// `Ok(None)` when the caller must ask. `Err(Declined)` when the segment is not one it
    /// takes, with nothing changed: the full path runs.
    #[inline(always)]
    pub(super) fn dispatch_fast<F, E>(
        &mut self,
        cx: &mut TcpContext<'_>,
        emit: F,
    ) -> Result<Result<Option<PollAt>, E>, (Declined, F)>
    where
        F: FnOnce(&mut TcpContext<'_>, (&IpRepr, &TcpRepr), Option<TxFrame>) -> Result<(), E>,
    {
        let now = cx.now;
        let Some(tuple) = self.tuple else {
            return Err((Declined, emit));
        };
        if !self.fast_path || self.state != State::Established || !self.quiet_at(now) {
            return Err((Declined, emit));
        }
        // New data only (a segment below SND.MAX is a retransmission: the full path).
        let offset = self.flight_size();
        if self.sent_max.is_some_and(|max| self.remote_last_seq < max)
            || offset >= self.tx_buffer.len()
        {
            return Err((Declined, emit));
        }
        let ip_header_len = match tuple.local.addr {
            smoltcp::wire::IpAddress::Ipv4(_) => super::IPV4_HEADER_LEN,
            smoltcp::wire::IpAddress::Ipv6(_) => super::IPV6_HEADER_LEN,
        };
        let local_mss = self.path_mtu.get(cx.ip_mtu) - ip_header_len - TCP_HEADER_LEN;
        let effective_mss = local_mss
            .min(self.remote_mss)
            .saturating_sub(self.timestamp_option_len());
        // The peer's window from the next sequence number (nothing SACKed to skip).
        let win_right_edge = self.local_seq_no + self.remote_win_len;
        let win_limit = if win_right_edge >= self.remote_last_seq {
            win_right_edge - self.remote_last_seq
        } else {
            0
        };
        let cwnd = self.cwnd_remaining();
        let size = win_limit.min(effective_mss).min(cwnd);
        // What `seq_to_transmit` would let out: at least one octet, Nagle's full segment
        // while data is in flight, and not held by the super-segment deferral.
        let max_send = (self.local_seq_no + self.remote_win_len.min(self.tx_buffer.len()))
            .max(self.remote_last_seq)
            - self.remote_last_seq;
        let max_send = max_send.min(cwnd);
        let in_flight = offset != 0;
        let deferred = cx.gso.is_some()
            && in_flight
            && self.tx_buffer.is_full()
            && max_send
                < self
                    .tx_buffer
                    .capacity()
                    .min(self.remote_win_len)
                    .min(self.congestion_controller.inner().window())
                    / 4;
        if size == 0
            || max_send == 0
            || (self.nagle && in_flight && max_send < effective_mss)
            || deferred
            || !cx.addrs.has_ip_addr(tuple.local.addr)
        {
            return Err((Declined, emit));
        }
        let Segment::Frame { index, len } = self.tx_buffer.locate(offset, size) else {
            return Err((Declined, emit));
        };
        let Some(zc) = self.tx_buffer.take(index) else {
            return Err((Declined, emit));
        };

        // Taken: from here on, what the full path does for this segment.
        if self.remote_last_ts.is_none() {
            self.remote_last_ts = Some(now);
        }
        self.super_segments = cx.gso.is_some();
        self.congestion_controller.inner_mut().pre_transmit(now);
        self.note_rx_mss(cx, ip_header_len);
        self.local_mss = Some(local_mss);
        let mut zc_len = len;
        let mut wire_segments = 1;
        if let Some(gso) = cx.gso.as_mut() {
            let limit = win_limit.min(cwnd).min(gso.max_payload);
            if limit > zc_len {
                zc_len += self.tx_buffer.take_run(
                    index,
                    effective_mss,
                    limit - zc_len,
                    !self.nagle,
                    gso.tail,
                );
                wire_segments = wire_segments_of(zc_len, effective_mss);
            }
        }
        let seq = self.remote_last_seq;
        let mut repr = self.ack_repr(tuple, now);
        if offset + zc_len == self.tx_buffer.len() {
            repr.control = TcpControl::Psh;
        }
        let ip_repr = IpRepr::new(
            tuple.local.addr,
            tuple.remote.addr,
            IpProtocol::Tcp,
            TCP_HEADER_LEN + self.timestamp_option_len() + zc_len,
            self.hop_limit.unwrap_or(64),
        );
        if let Err(e) = emit(cx, (&ip_repr, &repr), Some(zc)) {
            return Ok(Err(e));
        }

        let end = seq + zc_len;
        self.counters.on_send(seq, zc_len, self.sent_max, false);
        self.counters.segments_sent += wire_segments as u64 - 1;
        self.sent_max = Some(end);
        self.timer.rewind_keep_alive(now, self.keep_alive);
        self.ack_delay_timer = AckDelayTimer::Idle;
        self.recovery.on_sent(zc_len);
        if self.remote_has_sack {
            self.rack.on_send(seq, end, now);
        }
        self.remote_last_seq = end;
        self.note_advertised(repr.ack_number, repr.window_len, self.remote_win_shift);
        self.rtte.on_send(now, end);
        self.congestion_controller
            .inner_mut()
            .post_transmit(now, zc_len);
        if !self.timer.is_retransmit() {
            let rto = self.rtte.retransmission_timeout();
            self.timer.set_for_retransmit(now, rto);
        }
        self.arm_probe(now);

        // Everything queued went out, with the ACK of everything received and the window
        // just worked out (a window update is due only once the window doubles past the one
        // advertised): nothing is due but the timers.
        if end != self.local_seq_no + self.tx_buffer.len() {
            return Ok(Ok(None));
        }
        Ok(Ok(Some(self.timers_at())))
    }
}
