//! Per-connection statistics: the counters a connection keeps as it works ([`TcpCounters`])
//! and what the application reads ([`TcpStats`], from `TcpSocket::stats`).

use core::time::Duration;

use smoltcp::wire::TcpSeqNumber;

use super::state::State;

/// What a TCP connection counted since it started (part of [`TcpStats`]), after the
/// counters of Linux's `struct tcp_info`.
///
/// The connection updates them where it already does the work: a few integer additions per
/// segment, with the state borrowed, so they are exact. They start from zero when the socket
/// connects or listens.
///
/// Payload bytes are TCP payload only (no headers); SYN and FIN occupy sequence space but no
/// payload. Segments are all of them, pure ACKs and RSTs included.
///
/// [`add`](Self::add) sums the counters of several connections (an application's totals).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpCounters {
    /// Payload bytes sent for the first time (Linux counts retransmissions in its
    /// `tcpi_bytes_sent`; here they are [`bytes_retransmitted`](Self::bytes_retransmitted)).
    /// A transfer of N bytes sends N, however many are lost on the way.
    pub bytes_sent: u64,
    /// Payload bytes sent again: loss recovery's retransmissions, tail loss probes and what
    /// went again after a retransmission timeout (Linux's `tcpi_bytes_retrans`). Zero-window
    /// probes and keep-alives are not counted.
    pub bytes_retransmitted: u64,
    /// Payload bytes received in order: the bytes that became readable (Linux's
    /// `tcpi_bytes_received`). Duplicates are not counted, nor out-of-order data until the
    /// hole before it fills.
    pub bytes_received: u64,
    /// Payload bytes the peer acknowledged (Linux's `tcpi_bytes_acked`).
    pub bytes_acked: u64,
    /// Segments sent: data, pure ACKs, window updates, SYN, FIN, RST, probes and keep-alives,
    /// retransmissions included (Linux's `tcpi_segs_out`).
    pub segments_sent: u64,
    /// Segments received that this connection processed, whatever their fate (data, pure
    /// ACKs, duplicates, segments outside the window; Linux's `tcpi_segs_in`).
    pub segments_received: u64,
    /// Segments sent again (Linux's `tcpi_total_retrans`): what loss recovery sent again (fast
    /// retransmit, SACK-based recovery and RACK, NewReno's partial ACKs), tail loss probes of
    /// data sent before, and what went again after a retransmission timeout. Zero-window
    /// probes and keep-alives are not counted.
    pub retransmitted_segments: u64,
    /// Loss recovery episodes: started on the third duplicate ACK, or when the peer's SACK
    /// blocks or RACK's timing showed a loss; each ends when everything sent before it is
    /// acknowledged, or at a timeout.
    pub fast_recoveries: u64,
    /// Retransmission timeouts: times the retransmission timer expired and sending went back
    /// to the first unacknowledged byte (a SYN resent on its timer included).
    pub timeouts: u64,
}

impl TcpCounters {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &TcpCounters) {
        self.bytes_sent += other.bytes_sent;
        self.bytes_retransmitted += other.bytes_retransmitted;
        self.bytes_received += other.bytes_received;
        self.bytes_acked += other.bytes_acked;
        self.segments_sent += other.segments_sent;
        self.segments_received += other.segments_received;
        self.retransmitted_segments += other.retransmitted_segments;
        self.fast_recoveries += other.fast_recoveries;
        self.timeouts += other.timeouts;
    }

    /// A segment went out whose payload (`payload` bytes, a keep-alive's fake byte not
    /// counted) starts at `seq`; `sent_max` is one past the highest sequence number sent
    /// before it, and `resent` whether the connection counts it as a retransmission (a
    /// zero-window probe sent again is not). Payload past `sent_max` is sent for the first
    /// time; the rest, in a retransmission, is sent again.
    pub(crate) fn on_send(
        &mut self,
        seq: TcpSeqNumber,
        payload: usize,
        sent_max: Option<TcpSeqNumber>,
        resent: bool,
    ) {
        let old = match sent_max {
            Some(max) if max > seq => (max - seq).min(payload),
            _ => 0,
        };
        self.segments_sent += 1;
        self.bytes_sent += (payload - old) as u64;
        if resent {
            self.bytes_retransmitted += old as u64;
        }
    }
}

/// One TCP connection's statistics, as [`TcpSocket::stats`](crate::tcp::TcpSocket::stats)
/// reads them: what it counted since it started, and its current state, round-trip time
/// estimate and windows (after Linux's `struct tcp_info`).
///
/// The counters and the RTT estimate describe the socket's current connection, or its last
/// one once it closed: they stay readable after the close (past TIME-WAIT too) and start from
/// zero when the socket connects or listens again. The MSS, the windows and the
/// unacknowledged bytes are the connection's while it lasts; once it is gone, a closed
/// socket's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpStats {
    /// The connection state.
    pub state: State,
    /// Bytes and segments each way, retransmissions, recoveries and timeouts.
    pub counters: TcpCounters,
    /// The smoothed round-trip time (RFC 6298 SRTT), `None` before the first measurement
    /// and after three timeouts in a row discarded the estimate. Millisecond resolution
    /// (measured with TCP timestamps when both ends use them, else by timing one segment per
    /// round trip).
    pub srtt: Option<Duration>,
    /// The round-trip time variance (RFC 6298 RTTVAR), `None` when [`srtt`](Self::srtt) is.
    pub rttvar: Option<Duration>,
    /// The smallest round-trip time measured in this connection, `None` before the first
    /// measurement.
    pub min_rtt: Option<Duration>,
    /// The retransmission timeout now: `srtt + 4 * rttvar`, at least the socket's minimum
    /// ([`TcpSocket::set_min_rto`](crate::tcp::TcpSocket::set_min_rto), 200 ms by default) and
    /// at most 60 s, doubled by each timeout (1 s before the first measurement).
    pub rto: Duration,
    /// The congestion window in bytes, `None` without congestion control (the default: only
    /// the peer's window limits what is in flight; see
    /// [`TcpSocket::set_congestion_control`](crate::tcp::TcpSocket::set_congestion_control)).
    pub cwnd: Option<usize>,
    /// The slow-start threshold in bytes, `None` without congestion control and until the
    /// first loss ends the initial slow start.
    pub ssthresh: Option<usize>,
    /// The send MSS: payload bytes in a full-sized segment, the smaller of the peer's MSS and
    /// ours, less the timestamp option when it is in use (1448 on Ethernet with timestamps).
    pub mss: usize,
    /// Sequence space sent and not yet acknowledged, in bytes: from the first unacknowledged
    /// byte to one past the highest sent (a SYN or FIN counts one).
    pub unacked: usize,
    /// The window the peer advertised last, in bytes (scaled).
    pub peer_window: usize,
    /// The receive window this side offers now, in bytes: from the next byte it expects to
    /// the furthest right edge it advertised (how much more the peer may send), bounded by the
    /// socket's receive size and frame budget ([`TcpBuffers`](crate::tcp::TcpBuffers)).
    pub window: usize,
}

/// Milliseconds as a [`Duration`].
pub(crate) fn millis(ms: u32) -> Duration {
    Duration::from_millis(u64::from(ms))
}
