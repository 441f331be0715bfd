//! The TCP state machine: [`Tcb`], smoltcp 0.14's `tcp::Socket` (see the module docs of
//! [`tcp`](super) for what differs).

// Heads up! Before working on this file you should read, at least, RFC 793 and
// the parts of RFC 1122 that discuss TCP, as well as RFC 7323 for some of the TCP options.
// Consult RFC 7414 when implementing a new feature.

use core::fmt;
use core::task::Waker;

use smoltcp::storage::Assembler;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    IpAddress, IpEndpoint, IpListenEndpoint, IpProtocol, IpRepr, TcpControl, TcpRepr, TcpSeqNumber,
    TcpTimestampRepr, IPV4_HEADER_LEN, IPV6_HEADER_LEN, TCP_HEADER_LEN,
};
use zcnet_buffer::{RxFrame, TxFrame};

use crate::transport::tcp::gro::Batch;
use zcnet_executor::LocalSpawner;

use super::congestion::{AnyController, CongestionControl, Controller};
use super::context::{PollAt, TcpContext};
use super::error::{ConnectError, ListenError, RecvError, SendError};
use super::path_mtu::{mss_for, PathMtu};
use super::rack::Rack;
use super::recovery::Recovery;
use super::recv::{RecvBuffer, RxDrops};
use super::retries::Retries;
use super::rtt::RttEstimator;
use super::sack;
use super::send::{Segment, SendBuffer};
use super::state::State;
use super::stats::{millis, TcpCounters, TcpStats};
use super::timer::{AckDelayTimer, Timer, ACK_DELAY_DEFAULT};
use super::waker::WakerRegistration;

mod cookie_open;
mod send_fast;
pub(crate) use cookie_open::CookieOpen;

/// A connection's local and remote endpoints.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub(crate) struct Tuple {
    /// Our end.
    pub(crate) local: IpEndpoint,
    /// The remote end.
    pub(crate) remote: IpEndpoint,
}

impl fmt::Display for Tuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.local, self.remote)
    }
}

/// A TCP connection's transmission control block: smoltcp's `tcp::Socket`.
///
/// It may passively listen for connections or actively connect to another endpoint. A
/// listening TCB takes one connection: there is no backlog here (the stack keeps one).
#[derive(Debug)]
pub(crate) struct Tcb<'a> {
    /// The RFC 793 state.
    state: State,
    /// Retransmission, zero-window probe, keep-alive or TIME-WAIT timer.
    timer: Timer,
    /// The RTT estimator, which gives the retransmission timeout.
    rtte: RttEstimator,
    /// Which bytes past the in-order data of `rx_buffer` arrived out of order.
    assembler: Assembler,
    /// Received data, in the frames it arrived in.
    rx_buffer: RecvBuffer,
    /// The MSS we offer (the IP MTU less the IP and TCP headers), learnt from the context of
    /// each `process` and `dispatch`: the payload one slot of the receive budget is counted
    /// for in the window. Not smoltcp's.
    rx_mss: usize,
    /// Whether the remote's FIN arrived (reads then end with `Finished`).
    rx_fin_received: bool,
    /// Data to send, and sent but unacknowledged.
    tx_buffer: SendBuffer<'a>,
    /// Interval after which, if no inbound packets are received, the connection is aborted.
    timeout: Option<Duration>,
    /// Interval at which keep-alive packets will be sent.
    keep_alive: Option<Duration>,
    /// The time-to-live (IPv4) or hop limit (IPv6) value used in outgoing packets.
    hop_limit: Option<u8>,
    /// Address passed to listen(). Listen address is set when listen() is called and
    /// used every time the socket is reset back to the LISTEN state.
    listen_endpoint: IpListenEndpoint,
    /// Current 4-tuple (local and remote endpoints). Changed only through
    /// [`set_tuple`](Self::set_tuple), which counts the change in `index_epoch`.
    tuple: Option<Tuple>,
    /// Bumped by every change of the four-tuple or the state: the connection table's lookup
    /// index re-files the connection only when this moved (see `table.rs`).
    index_epoch: u32,
    /// The sequence number corresponding to the beginning of the transmit buffer.
    /// I.e. an ACK(local_seq_no+n) packet removes n bytes from the transmit buffer.
    local_seq_no: TcpSeqNumber,
    /// The sequence number corresponding to the beginning of the receive buffer.
    /// I.e. userspace reading n bytes adds n to remote_seq_no.
    remote_seq_no: TcpSeqNumber,
    /// The last sequence number sent.
    /// I.e. in an idle socket, local_seq_no+tx_buffer.len().
    remote_last_seq: TcpSeqNumber,
    /// The last acknowledgement number sent.
    /// I.e. in an idle socket, remote_seq_no+rx_buffer.len().
    remote_last_ack: Option<TcpSeqNumber>,
    /// The last window length sent.
    remote_last_win: u16,
    /// The furthest right edge of the receive window ever advertised on this connection
    /// (`None` before the first ACK we sent). Only grows: the window can shrink to zero below
    /// it (see `rx_window`), and a peer that sent into it meanwhile still sends ACKs with
    /// sequence numbers up to it, which `process` must not discard.
    rx_edge_max: Option<TcpSeqNumber>,
    /// The sending window scaling factor advertised to remotes which support RFC 1323.
    /// It is zero if the window <= 64KiB and/or the remote does not support it.
    remote_win_shift: u8,
    /// The remote window size, relative to local_seq_no
    /// I.e. we're allowed to send octets until local_seq_no+remote_win_len
    remote_win_len: usize,
    /// The largest window the remote advertised in this connection (RFC 5961's MAX.SND.WND):
    /// an ACK further than this below SND.UNA is not believed. Not smoltcp's.
    max_remote_win: usize,
    /// The receive window scaling factor for remotes which support RFC 1323, None if unsupported.
    remote_win_scale: Option<u8>,
    /// Whether or not the remote supports selective ACK as described in RFC 2018.
    remote_has_sack: bool,
    /// The maximum number of data octets that the remote side may receive.
    remote_mss: usize,
    /// The timestamp of the last packet received.
    remote_last_ts: Option<Instant>,
    /// The sequence number of the last packet received, used for sACK
    local_rx_last_seq: Option<TcpSeqNumber>,
    /// The ACK number of the last packet received.
    local_rx_last_ack: Option<TcpSeqNumber>,
    /// The number of packets received directly after
    /// each other which have the same ACK number.
    local_rx_dup_acks: u8,
    /// Loss recovery: the SACK scoreboard, the recovery episode, what to send again. Not
    /// smoltcp's (smoltcp sends only the first unacknowledged segment again on the third
    /// duplicate ACK).
    recovery: Recovery,
    /// Time-based loss detection and the tail loss probe (RACK-TLP), used when the remote
    /// SACKs. Not smoltcp's.
    rack: Rack,

    /// Duration for Delayed ACK. If None no ACKs will be delayed.
    ack_delay: Option<Duration>,
    /// Delayed ack timer. If set, packets containing exclusively
    /// ACK or window updates (ie, no data) won't be sent until expiry.
    ack_delay_timer: AckDelayTimer,

    /// Used for rate-limiting: No more challenge ACKs will be sent until this instant.
    challenge_ack_timer: Instant,

    /// Nagle's Algorithm enabled.
    nagle: bool,

    /// The link takes super-segments (the last `dispatch` was offered them): a short run waits
    /// for the next acknowledgement while the send queue is full (see `seq_to_transmit`).
    super_segments: bool,

    /// The congestion control algorithm.
    congestion_controller: AnyController,

    /// tsval generator - if some, tcp timestamp is enabled
    tsval_generator: Option<TsvalSource>,
    /// Whether new connections offer TCP timestamps (RFC 7323): set by the stack
    /// ([`set_timestamps`](Self::set_timestamps)). Not smoltcp's.
    timestamps_wanted: bool,

    /// 0 if not seen or timestamp not enabled
    last_remote_tsval: u32,
    /// Woken when `recv` may return something new.
    rx_waker: WakerRegistration,
    /// Woken when `send` may accept more.
    tx_waker: WakerRegistration,

    /// If this is set, we will not send a SYN|ACK until this is unset.
    synack_paused: bool,

    /// Retransmission timeouts in this handshake (SYN-SENT or SYN-RECEIVED); past
    /// [`SYN_RETRIES`] / [`SYNACK_RETRIES`] the handshake is given up. Zcnet's, not smoltcp's.
    handshake_rtos: u8,
    /// The connection closed for want of an answer (a timeout for the caller): its SYN went
    /// unanswered [`SYN_RETRIES`] times, or it passed its retransmission or probe limit
    /// (`retries`); cleared when the connection is reset.
    gave_up: bool,
    /// The retransmission and zero-window probe limits and their counts (`retries.rs`). Not
    /// smoltcp's.
    retries: Retries,

    /// One past the highest sequence number ever handed to `emit` in this connection (`None`
    /// before the first segment): payload below it is a retransmission. Not smoltcp's; read
    /// by the stack to tell first transmissions from retransmissions in the copy ledger.
    sent_max: Option<TcpSeqNumber>,

    /// Our MSS (IP MTU less IP and TCP headers) as `dispatch` last computed it (`None` before):
    /// frames of the send buffer are sized from it. Not smoltcp's.
    local_mss: Option<usize>,

    /// The path MTU estimate ICMP "too big" messages lowered
    /// ([`path_mtu_reduced`](Self::path_mtu_reduced)): segments are cut to it. Not smoltcp's.
    path_mtu: PathMtu,

    /// This connection's statistics counters ([`stats`](Self::stats)). Not smoltcp's.
    counters: TcpCounters,

    /// Whether `process` may take segments on the fast path (always, but for the
    /// differential checks in `twin.rs`, which compare it with the full processing).
    fast_path: bool,

    /// Segments the send fast path sent (for the differential checks).
    #[cfg(any(test, feature = "fuzzing"))]
    fast_sends: u64,
}

/// The remote's MSS until it announces one (RFC 1122).
const DEFAULT_MSS: usize = 536;

/// How many times a SYN is resent before `connect` gives up with a timeout (Linux's
/// `tcp_syn_retries`): with the initial 1 s retransmission timeout doubling up to its 60 s
/// ceiling, after 123 s.
pub const SYN_RETRIES: u8 = 6;

/// How many times a SYN-ACK is resent before a listening socket gives the handshake up and
/// listens again: after 63 s (Linux's `tcp_synack_retries`). Without it, SYNs from peers that
/// never answer would hold listening sockets for ever.
pub const SYNACK_RETRIES: u8 = 5;

/// Minimum MSS we accept from the remote, same value as Linux's `TCP_MIN_SND_MSS`.
/// Without it, a peer advertising a tiny MSS could force segments to carry little
/// or no payload once the TCP options length is subtracted from the effective MSS,
/// stalling the connection in an endless stream of empty segments.
///
/// Must exceed the maximum possible length of the TCP options (currently 12, for
/// timestamps) so that every segment carries some payload.
const MIN_REMOTE_MSS: usize = 48;

/// Bytes the timestamp option takes in every segment once timestamps are on: 10, padded to a
/// multiple of 4.
const TIMESTAMP_OPTION_LEN: usize = 12;

impl<'a> Tcb<'a> {
    /// A closed connection over the given buffers.
    ///
    /// # Panics
    /// If the receive buffer is larger than 1 GiB (the largest window scaling allows).
    pub(crate) fn new(rx_buffer: RecvBuffer, tx_buffer: SendBuffer<'a>) -> Tcb<'a> {
        let rx_capacity = rx_buffer.capacity();

        // From RFC 1323:
        // [...] the above constraints imply that 2 * the max window size must be less
        // than 2**31 [...] Thus, the shift count must be limited to 14 (which allows
        // windows of 2**30 = 1 Gbyte).
        if rx_capacity > (1 << 30) {
            panic!("receiving buffer too large, cannot exceed 1 GiB")
        }
        let rx_cap_log2 = usize::BITS as usize - rx_capacity.leading_zeros() as usize;

        Tcb {
            state: State::Closed,
            timer: Timer::new(),
            rtte: RttEstimator::default(),
            assembler: Assembler::new(),
            tx_buffer,
            rx_buffer,
            rx_mss: DEFAULT_MSS,
            rx_fin_received: false,
            timeout: None,
            keep_alive: None,
            hop_limit: None,
            listen_endpoint: IpListenEndpoint::default(),
            tuple: None,
            index_epoch: 0,
            local_seq_no: TcpSeqNumber::default(),
            remote_seq_no: TcpSeqNumber::default(),
            remote_last_seq: TcpSeqNumber::default(),
            remote_last_ack: None,
            remote_last_win: 0,
            rx_edge_max: None,
            remote_win_len: 0,
            max_remote_win: 0,
            remote_win_shift: rx_cap_log2.saturating_sub(16) as u8,
            remote_win_scale: None,
            remote_has_sack: false,
            remote_mss: DEFAULT_MSS,
            remote_last_ts: None,
            local_rx_last_ack: None,
            local_rx_last_seq: None,
            local_rx_dup_acks: 0,
            recovery: Recovery::default(),
            rack: Rack::default(),
            ack_delay: Some(ACK_DELAY_DEFAULT),
            ack_delay_timer: AckDelayTimer::Idle,
            challenge_ack_timer: Instant::from_secs(0),
            nagle: true,
            super_segments: false,
            tsval_generator: None,
            timestamps_wanted: false,
            last_remote_tsval: 0,
            congestion_controller: AnyController::new(),
            rx_waker: WakerRegistration::new(),
            tx_waker: WakerRegistration::new(),
            synack_paused: false,
            handshake_rtos: 0,
            gave_up: false,
            retries: Retries::default(),
            sent_max: None,
            local_mss: None,
            path_mtu: PathMtu::default(),
            counters: TcpCounters::default(),
            fast_path: true,
            #[cfg(any(test, feature = "fuzzing"))]
            fast_sends: 0,
        }
    }

    /// Enable or disable TCP Timestamp.
    #[cfg(test)]
    pub(crate) fn set_tsval_generator(&mut self, generator: Option<fn() -> u32>) {
        self.tsval_generator = generator.map(TsvalSource::Fn);
    }

    /// The least retransmission timeout an RTT measurement may give (see
    /// [`DEFAULT_MIN_RTO_MS`](super::rtt::DEFAULT_MIN_RTO_MS)); the timeout before the first
    /// measurement stays 1 s. Applies at once and to later connections.
    pub(crate) fn set_min_rto(&mut self, min_rto: Duration) {
        self.rtte
            .set_min_rto(u32::try_from(min_rto.total_millis()).unwrap_or(u32::MAX));
    }

    /// The least retransmission timeout an RTT measurement may give.
    pub(crate) fn min_rto(&self) -> Duration {
        Duration::from_millis(u64::from(self.rtte.min_rto()))
    }

    /// Whether connections opened from now on offer TCP timestamps (RFC 7323): TSval is the
    /// stack's clock in milliseconds plus an offset keyed by the four-tuple; RTT samples come
    /// from the echoed TSecr; segments older than the last one in order are rejected (PAWS).
    /// The remote must offer them too (on its SYN or SYN-ACK).
    pub(crate) fn set_timestamps(&mut self, enabled: bool) {
        self.timestamps_wanted = enabled;
    }

    /// Sets this connection's TSval offset (keyed by its four-tuple, which must be set), if
    /// timestamps are wanted.
    fn arm_timestamps(&mut self, cx: &mut TcpContext<'_>) {
        if let (true, Some(t)) = (self.timestamps_wanted, self.tuple) {
            self.tsval_generator = Some(TsvalSource::Clock {
                offset: cx.keys.ts_offset(t.local, t.remote),
            });
        }
    }

    /// Our TSval at `now`, with timestamps on.
    fn tsval(&self, now: Instant) -> Option<u32> {
        self.tsval_generator.map(|source| source.tsval(now))
    }

    /// Whether PAWS rejects `repr` (see `process`): timestamps on, the connection
    /// synchronized, not a RST, and its TSval before TS.Recent (modulo 2³²).
    fn paws_rejects(&self, repr: &TcpRepr) -> bool {
        let Some(ts) = repr.timestamp else {
            return false;
        };
        self.tsval_generator.is_some()
            && !matches!(self.state, State::Listen | State::SynSent | State::Closed)
            && repr.control != TcpControl::Rst
            && (ts.tsval.wrapping_sub(self.last_remote_tsval) as i32) < 0
    }

    /// Option bytes every segment of the connection carries: the timestamp option once
    /// timestamps are on, else none.
    fn timestamp_option_len(&self) -> usize {
        if self.tsval_generator.is_some() {
            TIMESTAMP_OPTION_LEN
        } else {
            0
        }
    }

    /// Return whether TCP Timestamp is enabled.
    #[cfg(test)]
    pub(crate) fn timestamp_enabled(&self) -> bool {
        self.tsval_generator.is_some()
    }

    /// Set an algorithm for congestion control.
    ///
    /// `CongestionControl::None` indicates that no congestion control is applied (the default).
    /// Options `CongestionControl::Cubic` and `CongestionControl::Reno` are also available.
    ///
    /// `CongestionControl::Reno` is a classic congestion control algorithm valued for its simplicity.
    /// Despite having a lower algorithmic complexity than `Cubic`,
    /// it is less efficient in terms of bandwidth usage.
    ///
    /// `CongestionControl::Cubic` represents a modern congestion control algorithm designed to
    /// be more efficient and fair compared to `CongestionControl::Reno`.
    /// It is the default choice for Linux, Windows, and macOS.
    /// `CongestionControl::Cubic` relies on double precision (`f64`) floating point operations, which may cause issues in some contexts:
    /// * Small embedded processors (such as Cortex-M0, Cortex-M1, and Cortex-M3) do not have an FPU, and floating point operations consume significant amounts of CPU time and Flash space.
    /// * Interrupt handlers should almost always avoid floating-point operations.
    /// * Kernel-mode code on desktop processors usually avoids FPU operations to reduce the penalty of saving and restoring FPU registers.
    ///
    /// In all these cases, `CongestionControl::Reno` is a better choice of congestion control algorithm.
    pub(crate) fn set_congestion_control(&mut self, congestion_control: CongestionControl) {
        self.congestion_controller = AnyController::with(congestion_control);
    }

    /// Return the current congestion control algorithm.
    #[cfg(test)]
    pub(crate) fn congestion_control(&self) -> CongestionControl {
        self.congestion_controller.kind()
    }

    /// Register a waker for receive operations.
    ///
    /// The waker is woken on state changes that might affect the return value
    /// of `recv` method calls, such as receiving data, or the socket closing.
    ///
    /// Notes:
    ///
    /// - Only one waker can be registered at a time. If another waker was previously registered,
    ///   it is overwritten and will no longer be woken.
    /// - The Waker is woken only once. Once woken, you must register it again to receive more wakes.
    /// - "Spurious wakes" are allowed: a wake doesn't guarantee the result of `recv` has
    ///   necessarily changed.
    ///
    /// `local` is the stack's local spawner, if it has one: the wake then goes through the
    /// executor's local run queue.
    pub(crate) fn register_recv_waker(&mut self, waker: &Waker, local: Option<LocalSpawner>) {
        self.rx_waker.register(waker, local)
    }

    /// Register a waker for send operations.
    ///
    /// The waker is woken on state changes that might affect the return value
    /// of `send` method calls, such as space becoming available in the transmit
    /// buffer, or the socket closing.
    ///
    /// Notes:
    ///
    /// - Only one waker can be registered at a time. If another waker was previously registered,
    ///   it is overwritten and will no longer be woken.
    /// - The Waker is woken only once. Once woken, you must register it again to receive more wakes.
    /// - "Spurious wakes" are allowed: a wake doesn't guarantee the result of `send` has
    ///   necessarily changed.
    ///
    /// `local`: as for [`register_recv_waker`](Self::register_recv_waker).
    pub(crate) fn register_send_waker(&mut self, waker: &Waker, local: Option<LocalSpawner>) {
        self.tx_waker.register(waker, local)
    }

    /// Pause sending of SYN|ACK packets.
    ///
    /// When this flag is set, the socket will get stuck in `SynReceived` state without sending
    /// any SYN|ACK packets back, until this flag is unset. This is useful for certain niche TCP
    /// proxy usecases.
    #[cfg(test)]
    pub(crate) fn pause_synack(&mut self, pause: bool) {
        self.synack_paused = pause;
    }

    /// Return the current window field value, including scaling according to RFC 1323.
    ///
    /// Used in internal calculations as well as packet generation.
    ///
    /// Not smoltcp's: the window is [`rx_window`](Self::rx_window), rounded up when rounding
    /// down to the scale would pull the right edge back.
    #[inline]
    fn scaled_window(&self) -> u16 {
        // `rx_window`, with the floor computed once for both uses.
        if self.rx_buffer.budget_spent() {
            return 0;
        }
        let shift = self.remote_win_shift;
        let floor = self.rx_window_floor();
        let window = self.rx_buffer.window(self.rx_seg_payload()).max(floor);
        let mut scaled = window >> shift;
        if (scaled << shift) < floor {
            scaled += 1;
        }
        u16::try_from(scaled).unwrap_or(u16::MAX)
    }

    /// The receive window to offer now, in bytes: what the receive buffer can take (its free
    /// bytes, and one full segment's payload per free slot of its budget), but never less
    /// than keeps the right edge we advertised last where it was (RFC 9293 3.8.6.2.2: a
    /// receiver should not shrink its window) — except when the slot budget is spent: then
    /// the window is zero.
    ///
    /// Why the exception: the window counts a full segment per free slot, but a sender may
    /// fill a slot with less (the part of a segment that the right edge cut off arrives later
    /// as a segment of its own), so the budget can run out before the advertised edge. Every
    /// segment short of that edge would then be dropped unacknowledged and the sender would
    /// retransmit on its timeout for as long as the application holds its segments; a zero
    /// window instead turns it to zero-window probing, which every sender must do on a window
    /// that shrank to zero (RFC 9293 MUST-34, MUST-35; Linux's `tcp_shrink_window` does the
    /// same under memory pressure). The ACKs it sends meanwhile, with sequence numbers past
    /// the zero window, are still taken ([`takes_ack_only`](Self::takes_ack_only)). Not
    /// smoltcp's (smoltcp's window is the free space of its byte ring, whose right edge cannot
    /// retreat).
    fn rx_window(&self) -> usize {
        if self.rx_buffer.budget_spent() {
            return 0;
        }
        self.rx_buffer
            .window(self.rx_seg_payload())
            .max(self.rx_window_floor())
    }

    /// How far the right edge we advertised last lies past the in-order data (0 before the
    /// first advertisement, or when the data reached it).
    fn rx_window_floor(&self) -> usize {
        let Some(edge) = self.last_edge() else {
            return 0;
        };
        let next = self.remote_seq_no + self.rx_buffer.len();
        if edge > next {
            edge - next
        } else {
            0
        }
    }

    /// The right edge of the window we advertised last (`None` before the first ACK we sent).
    #[inline]
    fn last_edge(&self) -> Option<TcpSeqNumber> {
        let window = usize::from(self.remote_last_win) << self.remote_win_shift;
        self.remote_last_ack.map(|ack| ack + window)
    }

    /// Records the ACK number and window field of a segment we send (`window` scaled by
    /// `shift`): what [`rx_window_floor`](Self::rx_window_floor) and the acceptability test of
    /// `process` measure against.
    #[inline]
    fn note_advertised(&mut self, ack: Option<TcpSeqNumber>, window: u16, shift: u8) {
        self.remote_last_ack = ack;
        // Kept in the scale of the segments after the handshake (`last_edge` shifts it): a
        // SYN's unscaled window is stored scaled down, its edge rounded down, so that the
        // window after the handshake never starts past the receive buffer.
        self.remote_last_win = if shift < self.remote_win_shift {
            u16::try_from((usize::from(window) << shift) >> self.remote_win_shift)
                .unwrap_or(u16::MAX)
        } else {
            window
        };
        if let Some(ack) = ack {
            let edge = ack + (usize::from(window) << shift);
            self.rx_edge_max = Some(self.rx_edge_max.map_or(edge, |max| max.max(edge)));
        }
    }

    /// Payload bytes we expect in a full-sized segment from the remote: our MSS, less the
    /// timestamp option every segment carries once timestamps are on (Linux sends 1448-byte
    /// segments to a 1460-byte MSS). The receive window counts this much per free slot.
    fn rx_seg_payload(&self) -> usize {
        self.rx_mss.saturating_sub(self.timestamp_option_len())
    }

    /// Notes the MSS we offer on an IP link of `cx.ip_mtu` with IP headers of `ip_header_len`.
    fn note_rx_mss(&mut self, cx: &TcpContext<'_>, ip_header_len: usize) {
        let mss = cx.ip_mtu.saturating_sub(ip_header_len + TCP_HEADER_LEN);
        self.rx_mss = mss.max(MIN_REMOTE_MSS);
    }

    /// Return the last window field value, including scaling according to RFC 1323.
    ///
    /// Used in internal calculations as well as packet generation.
    ///
    /// Unlike `remote_last_win`, we take into account new packets received (but not acknowledged)
    /// since the last window update and adjust the window length accordingly. This ensures a fair
    /// comparison between the last window length and the new window length we're going to
    /// advertise.
    #[inline]
    fn last_scaled_window(&self) -> Option<u16> {
        let next_ack = self.remote_seq_no + self.rx_buffer.len();
        let last_win_adjusted = self.last_edge()? - next_ack;

        Some(u16::try_from(last_win_adjusted >> self.remote_win_shift).unwrap_or(u16::MAX))
    }

    /// Set the timeout duration.
    ///
    /// A socket with a timeout duration set will abort the connection if either of the following
    /// occurs:
    ///
    ///   * After a [connect](#method.connect) call, the remote endpoint does not respond within
    ///     the specified duration;
    ///   * After establishing a connection, there is data in the transmit buffer and the remote
    ///     endpoint exceeds the specified duration between any two packets it sends;
    ///   * After enabling [keep-alive](#method.set_keep_alive), the remote endpoint exceeds
    ///     the specified duration between any two packets it sends.
    pub(crate) fn set_timeout(&mut self, duration: Option<Duration>) {
        self.timeout = duration
    }

    /// How many retransmission timeouts (of the RTO model in `retries.rs`) and unanswered
    /// zero-window probes the connection allows before it gives up, resets and reports a
    /// timeout: Linux's `tcp_retries2`, default
    /// [`TCP_RETRIES`](super::retries::TCP_RETRIES), at least
    /// [`MIN_TCP_RETRIES`](super::retries::MIN_TCP_RETRIES). Applies at once and to later
    /// connections. Not smoltcp's.
    pub(crate) fn set_retries(&mut self, retries: u8) {
        self.retries.set_limit(retries);
    }

    /// The retransmission and probe limit ([`set_retries`](Self::set_retries)).
    pub(crate) fn retries(&self) -> u8 {
        self.retries.limit()
    }

    /// Set the ACK delay duration.
    ///
    /// By default, the ACK delay is set to 10ms.
    #[cfg(test)]
    pub(crate) fn set_ack_delay(&mut self, duration: Option<Duration>) {
        self.ack_delay = duration
    }

    /// Enable or disable Nagle's Algorithm.
    ///
    /// Also known as "tinygram prevention". By default, it is enabled.
    /// Disabling it is equivalent to Linux's TCP_NODELAY flag.
    ///
    /// When enabled, Nagle's Algorithm prevents sending segments smaller than MSS if
    /// there is data in flight (sent but not acknowledged). In other words, it ensures
    /// at most only one segment smaller than MSS is in flight at a time.
    ///
    /// It ensures better network utilization by preventing sending many very small packets,
    /// at the cost of increased latency in some situations, particularly when the remote peer
    /// has ACK delay enabled.
    pub(crate) fn set_nagle_enabled(&mut self, enabled: bool) {
        self.nagle = enabled
    }

    /// Set the keep-alive interval.
    ///
    /// An idle socket with a keep-alive interval set will transmit a "keep-alive ACK" packet
    /// every time it receives no communication during that interval. As a result, three things
    /// may happen:
    ///
    ///   * The remote endpoint is fine and answers with an ACK packet.
    ///   * The remote endpoint has rebooted and answers with an RST packet.
    ///   * The remote endpoint has crashed and does not answer.
    ///
    /// The keep-alive functionality together with the timeout functionality allows to react
    /// to these error conditions.
    ///
    /// Set at `now`, the first probe of an idle connection is due one `interval` later (never at
    /// once: RFC 1122 4.2.3.6 sends one only after an interval without traffic); `None` disarms
    /// a probe that was due.
    pub(crate) fn set_keep_alive(&mut self, interval: Option<Duration>, now: Instant) {
        self.keep_alive = interval;
        self.timer.rewind_keep_alive(now, interval);
    }

    /// Return the time-to-live (IPv4) or hop limit (IPv6) value used in outgoing packets.
    ///
    /// See also the [set_hop_limit](#method.set_hop_limit) method
    #[cfg(test)]
    pub(crate) fn hop_limit(&self) -> Option<u8> {
        self.hop_limit
    }

    /// Set the time-to-live (IPv4) or hop limit (IPv6) value used in outgoing packets.
    ///
    /// A socket without an explicitly set hop limit value uses the default [IANA recommended]
    /// value (64).
    ///
    /// # Panics
    ///
    /// This function panics if a hop limit value of 0 is given. See [RFC 1122 § 3.2.1.7].
    ///
    /// [IANA recommended]: https://www.iana.org/assignments/ip-parameters/ip-parameters.xhtml
    /// [RFC 1122 § 3.2.1.7]: https://tools.ietf.org/html/rfc1122#section-3.2.1.7
    #[cfg(test)]
    pub(crate) fn set_hop_limit(&mut self, hop_limit: Option<u8>) {
        // A host MUST NOT send a datagram with a hop limit value of 0
        if let Some(0) = hop_limit {
            panic!("the time-to-live value of a packet must not be zero")
        }

        self.hop_limit = hop_limit
    }

    /// Return the listen endpoint
    #[inline]
    pub(crate) fn listen_endpoint(&self) -> IpListenEndpoint {
        self.listen_endpoint
    }

    /// Return the local endpoint, or None if not connected.
    #[inline]
    pub(crate) fn local_endpoint(&self) -> Option<IpEndpoint> {
        Some(self.tuple?.local)
    }

    /// Return the remote endpoint, or None if not connected.
    #[inline]
    pub(crate) fn remote_endpoint(&self) -> Option<IpEndpoint> {
        Some(self.tuple?.remote)
    }

    /// Return the connection state, in terms of the TCP state machine.
    #[inline]
    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// Back to a fresh closed connection (options kept), waking both wakers. The RTT
    /// estimator and the statistics counters stay, for [`stats`](Self::stats) to report the
    /// connection that ended, until the next one starts ([`start`](Self::start)).
    pub(crate) fn reset(&mut self) {
        let rx_cap_log2 = usize::BITS as usize - self.rx_buffer.capacity().leading_zeros() as usize;

        self.state = State::Closed;
        self.index_epoch = self.index_epoch.wrapping_add(1);
        self.timer = Timer::new();
        self.assembler = Assembler::new();
        self.tx_buffer.clear();
        self.rx_buffer.clear();
        self.rx_fin_received = false;
        self.listen_endpoint = IpListenEndpoint::default();
        self.set_tuple(None);
        self.local_seq_no = TcpSeqNumber::default();
        self.remote_seq_no = TcpSeqNumber::default();
        self.remote_last_seq = TcpSeqNumber::default();
        self.remote_last_ack = None;
        self.remote_last_win = 0;
        self.rx_edge_max = None;
        self.remote_win_len = 0;
        self.max_remote_win = 0;
        self.remote_win_scale = None;
        self.remote_win_shift = rx_cap_log2.saturating_sub(16) as u8;
        self.remote_mss = DEFAULT_MSS;
        self.remote_last_ts = None;
        self.ack_delay_timer = AckDelayTimer::Idle;
        self.challenge_ack_timer = Instant::from_secs(0);
        self.sent_max = None;
        self.path_mtu = PathMtu::default();
        self.recovery.reset();
        self.rack.reset();
        self.local_rx_dup_acks = 0;
        self.local_rx_last_ack = None;
        self.handshake_rtos = 0;
        self.gave_up = false;
        self.retries.reset();

        self.rx_waker.wake();
        self.tx_waker.wake();
    }

    /// Whether the connection closed for want of an answer: its SYN went unanswered
    /// [`SYN_RETRIES`] times over, or it gave up retransmitting or probing (see
    /// [`set_retries`](Self::set_retries)). The stack reports a timeout.
    pub(crate) fn gave_up(&self) -> bool {
        self.gave_up
    }

    /// [`reset`](Self::reset) for a new connection: a fresh RTT estimator, congestion
    /// controller (same algorithm) and statistics too.
    fn start(&mut self) {
        self.reset();
        self.rtte = RttEstimator::with_min_rto(self.rtte.min_rto());
        self.congestion_controller = AnyController::with(self.congestion_controller.kind());
        self.counters = TcpCounters::default();
    }

    /// This connection's statistics now (see [`TcpStats`]).
    pub(crate) fn stats(&self) -> TcpStats {
        let estimate = self.rtte.estimate();
        let cc = self.congestion_controller.inner();
        let cwnd = cc.window();
        TcpStats {
            state: self.state,
            counters: TcpCounters {
                // Loss recovery counts the segments it sends again.
                retransmitted_segments: u64::from(self.retransmissions()),
                ..self.counters
            },
            srtt: estimate.map(|(srtt, _)| millis(srtt)),
            rttvar: estimate.map(|(_, rttvar)| millis(rttvar)),
            min_rtt: self.rtte.min_rtt().map(millis),
            rto: self.rtte.retransmission_timeout().into(),
            cwnd: (cwnd != usize::MAX).then_some(cwnd),
            // A controller's threshold is unbounded until the first loss.
            ssthresh: cc.ssthresh().filter(|&t| t != usize::MAX),
            mss: self.data_mss(),
            unacked: self
                .sent_max
                .filter(|&max| max > self.local_seq_no)
                .map_or(0, |max| max - self.local_seq_no),
            peer_window: self.remote_win_len,
            window: self.rx_edge_max.map_or(0, |edge| {
                let next = self.remote_seq_no + self.rx_buffer.len();
                if edge > next {
                    edge - next
                } else {
                    0
                }
            }),
        }
    }

    /// Start listening on the given endpoint.
    ///
    /// This function returns `Err(ListenError::InvalidState)` if the socket was already open
    /// (see [is_open](#method.is_open)), and `Err(ListenError::Unaddressable)`
    /// if the port in the given endpoint is zero.
    pub(crate) fn listen<T>(&mut self, local_endpoint: T) -> Result<(), ListenError>
    where
        T: Into<IpListenEndpoint>,
    {
        let local_endpoint = local_endpoint.into();
        if local_endpoint.port == 0 {
            return Err(ListenError::Unaddressable);
        }

        if self.is_open() {
            // If we were already listening to same endpoint there is nothing to do; exit early.
            //
            // In the past listening on an socket that was already listening was an error,
            // however this makes writing an acceptor loop with multiple sockets impossible.
            // Without this early exit, if you tried to listen on a socket that's already listening you'll
            // immediately get an error. The only way around this is to abort the socket first
            // before listening again, but this means that incoming connections can actually
            // get aborted between the abort() and the next listen().
            if matches!(self.state, State::Listen) && self.listen_endpoint == local_endpoint {
                return Ok(());
            } else {
                return Err(ListenError::InvalidState);
            }
        }

        self.start();
        self.listen_endpoint = local_endpoint;
        self.set_tuple(None);
        self.set_state(State::Listen);
        Ok(())
    }

    /// Connect to a given endpoint.
    ///
    /// The local port must be provided explicitly (the stack's ephemeral port allocator
    /// picks it).
    ///
    /// The local address may optionally be provided; without it the context's
    /// [`LocalAddrs::source_address`](super::context::LocalAddrs::source_address) chooses one.
    ///
    /// This function returns an error if the socket was open; see [is_open](#method.is_open).
    /// It also returns an error if the local or remote port is zero, or if the remote address
    /// is unspecified.
    pub(crate) fn connect<T, U>(
        &mut self,
        cx: &mut TcpContext<'_>,
        remote_endpoint: T,
        local_endpoint: U,
    ) -> Result<(), ConnectError>
    where
        T: Into<IpEndpoint>,
        U: Into<IpListenEndpoint>,
    {
        let remote_endpoint: IpEndpoint = remote_endpoint.into();
        let local_endpoint: IpListenEndpoint = local_endpoint.into();

        if self.is_open() {
            return Err(ConnectError::InvalidState);
        }
        if remote_endpoint.port == 0 || remote_endpoint.addr.is_unspecified() {
            return Err(ConnectError::Unaddressable);
        }
        if local_endpoint.port == 0 {
            return Err(ConnectError::Unaddressable);
        }

        // If local address is not provided, choose it automatically.
        let local_endpoint = IpEndpoint {
            addr: match local_endpoint.addr {
                Some(addr) => {
                    if addr.is_unspecified() {
                        return Err(ConnectError::Unaddressable);
                    }
                    addr
                }
                None => cx
                    .addrs
                    .source_address(&remote_endpoint.addr)
                    .ok_or(ConnectError::Unaddressable)?,
            },
            port: local_endpoint.port,
        };

        if local_endpoint.addr.version() != remote_endpoint.addr.version() {
            return Err(ConnectError::Unaddressable);
        }

        self.start();
        let tuple = Tuple {
            local: local_endpoint,
            remote: remote_endpoint,
        };
        self.set_tuple(Some(tuple));
        self.arm_timestamps(cx);
        self.set_state(State::SynSent);

        let seq = Self::initial_seq_no(cx, tuple);
        self.local_seq_no = seq;
        self.remote_last_seq = seq;
        Ok(())
    }

    /// The initial sequence number of `tuple`. Unit tests expect a fixed one (as smoltcp's
    /// do): 10000.
    #[cfg(test)]
    fn initial_seq_no(_: &TcpContext<'_>, _: Tuple) -> TcpSeqNumber {
        TcpSeqNumber(10000)
    }

    /// The initial sequence number of `tuple`: RFC 6528's clock plus keyed hash
    /// ([`TcpKeys::isn`](super::context::TcpKeys::isn)).
    #[cfg(not(test))]
    fn initial_seq_no(cx: &TcpContext<'_>, tuple: Tuple) -> TcpSeqNumber {
        cx.keys.isn(cx.now, tuple.local, tuple.remote)
    }

    /// Close the transmit half of the full-duplex connection.
    ///
    /// Note that there is no corresponding function for the receive half of the full-duplex
    /// connection; only the remote end can close it. If you no longer wish to receive any
    /// data and would like to reuse the socket right away, use [abort](#method.abort).
    pub(crate) fn close(&mut self) {
        match self.state {
            // In the LISTEN state there is no established connection.
            State::Listen => self.set_state(State::Closed),
            // In the SYN-SENT state the remote endpoint is not yet synchronized and, upon
            // receiving an RST, will abort the connection.
            State::SynSent => self.set_state(State::Closed),
            // In the SYN-RECEIVED, ESTABLISHED and CLOSE-WAIT states the transmit half
            // of the connection is open, and needs to be explicitly closed with a FIN.
            State::SynReceived | State::Established => self.set_state(State::FinWait1),
            State::CloseWait => self.set_state(State::LastAck),
            // In the FIN-WAIT-1, FIN-WAIT-2, CLOSING, LAST-ACK, TIME-WAIT and CLOSED states,
            // the transmit half of the connection is already closed, and no further
            // action is needed.
            State::FinWait1
            | State::FinWait2
            | State::Closing
            | State::TimeWait
            | State::LastAck
            | State::Closed => (),
        }
    }

    /// Aborts the connection, if any.
    ///
    /// This function instantly closes the socket. One reset packet will be sent to the remote
    /// endpoint.
    ///
    /// In terms of the TCP state machine, the socket may be in any state and is moved to
    /// the `CLOSED` state.
    pub(crate) fn abort(&mut self) {
        self.set_state(State::Closed);
    }

    /// Return whether the socket is open.
    ///
    /// This function returns true if the socket will process incoming or dispatch outgoing
    /// packets. Note that this does not mean that it is possible to send or receive data through
    /// the socket; for that, use [can_send](#method.can_send) or [can_recv](#method.can_recv).
    ///
    /// In terms of the TCP state machine, the socket must not be in the `CLOSED`
    /// or `TIME-WAIT` states.
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        !matches!(self.state, State::Closed | State::TimeWait)
    }

    /// Return whether the transmit half of the full-duplex connection is open.
    ///
    /// This function returns true if it's possible to send data and have it arrive
    /// to the remote endpoint. However, it does not make any guarantees about the state
    /// of the transmit buffer, and even if it returns true, [send](#method.send) may
    /// not be able to enqueue any octets.
    ///
    /// In terms of the TCP state machine, the socket must be in the `ESTABLISHED` or
    /// `CLOSE-WAIT` state.
    #[inline]
    pub(crate) fn may_send(&self) -> bool {
        match self.state {
            State::Established => true,
            // In CLOSE-WAIT, the remote endpoint has closed our receive half of the connection
            // but we still can transmit indefinitely.
            State::CloseWait => true,
            _ => false,
        }
    }

    /// Return whether the receive half of the full-duplex connection is open.
    ///
    /// This function returns true if it's possible to receive data from the remote endpoint.
    /// It will return true while there is data in the receive buffer, and if there isn't,
    /// as long as the remote endpoint has not closed the connection.
    ///
    /// In terms of the TCP state machine, the socket must be in the `ESTABLISHED`,
    /// `FIN-WAIT-1`, or `FIN-WAIT-2` state, or have data in the receive buffer instead.
    #[inline]
    pub(crate) fn may_recv(&self) -> bool {
        match self.state {
            State::Established => true,
            // In FIN-WAIT-1/2, we have closed our transmit half of the connection but
            // we still can receive indefinitely.
            State::FinWait1 | State::FinWait2 => true,
            // If we have something in the receive buffer, we can receive that.
            _ if self.can_recv() => true,
            _ => false,
        }
    }

    /// Check whether the transmit half of the full-duplex connection is open
    /// (see [may_send](#method.may_send)), and the transmit buffer is not full.
    #[inline]
    pub(crate) fn can_send(&self) -> bool {
        if !self.may_send() {
            return false;
        }

        !self.tx_buffer.is_full()
    }

    /// Check whether the receive buffer is not empty.
    #[inline]
    pub(crate) fn can_recv(&self) -> bool {
        !self.rx_buffer.is_empty()
    }

    /// Queue bytes with `f` (which returns how many it queued) if the transmit half is open,
    /// and restart the timeout and zero-window-probe clocks when data starts waiting.
    pub(crate) fn send_impl<F, R>(&mut self, f: F) -> Result<R, SendError>
    where
        F: FnOnce(&mut SendBuffer<'a>) -> (usize, R),
    {
        if !self.may_send() {
            return Err(SendError::InvalidState);
        }
        let old_length = self.begin_send();
        let (size, result) = f(&mut self.tx_buffer);
        self.end_send(old_length, size);
        Ok(result)
    }

    /// Readies the send buffer for the application's bytes; returns its length before them
    /// (for [`end_send`](Self::end_send)).
    #[inline]
    fn begin_send(&mut self) -> usize {
        // New frames hold one full segment; a frame some of whose bytes went out takes no more.
        self.tx_buffer.set_frame_len(self.data_mss());
        self.tx_buffer.set_sent(self.flight_size());
        self.tx_buffer.len()
    }

    /// After `size` bytes were queued on a send buffer `old_length` long: restarts the
    /// timeout and zero-window-probe clocks when data starts waiting.
    #[inline]
    fn end_send(&mut self, old_length: usize, size: usize) {
        if size > 0 {
            // The connection might have been idle for a long time, and so remote_last_ts
            // would be far in the past. Unless we clear it here, we'll abort the connection
            // down over in dispatch() by erroneously detecting it as timed out.
            if old_length == 0 {
                self.remote_last_ts = None
            }

            // if remote win is zero and we go from having no data to some data pending to
            // send, start the zero window probe timer.
            if self.remote_win_len == 0 && self.timer.is_idle() {
                let delay = self.rtte.retransmission_timeout();

                // We don't have access to the current time here, so use Instant::ZERO instead.
                // this will cause the first ZWP to be sent immediately, but that's okay.
                self.timer.set_for_zero_window_probe(Instant::ZERO, delay);
            }
        }
    }

    /// Enqueue a sequence of octets to be sent, and fill it from a slice.
    ///
    /// This function returns the amount of octets actually enqueued, which is limited
    /// by the amount of free space in the transmit buffer; down to zero.
    ///
    /// See also [send](#method.send).
    pub(crate) fn send_slice(&mut self, data: &[u8]) -> Result<usize, SendError> {
        self.send_impl(|tx_buffer| {
            let size = tx_buffer.enqueue_slice(None, data);
            (size, size)
        })
    }

    /// Whether the application may read: `Finished` after the remote's FIN, `InvalidState`
    /// before the connection is open or after it was reset.
    fn recv_error_check(&mut self) -> Result<(), RecvError> {
        // We may have received some data inside the initial SYN, but until the connection
        // is fully open we must not dequeue any data, as it may be overwritten by e.g.
        // another (stale) SYN. (We do not support TCP Fast Open.)
        if !self.may_recv() {
            if self.rx_fin_received {
                return Err(RecvError::Finished);
            }
            return Err(RecvError::InvalidState);
        }

        Ok(())
    }

    /// Consume received bytes with `f` (which returns how many it consumed) if the
    /// application may read, and move the receive window's left edge past them.
    fn recv_impl<F, R>(&mut self, f: F) -> Result<R, RecvError>
    where
        F: FnOnce(&mut RecvBuffer) -> (usize, R),
    {
        self.recv_error_check()?;

        let (size, result) = f(&mut self.rx_buffer);
        self.remote_seq_no += size;
        Ok(result)
    }

    /// Call `f` with the largest contiguous slice of octets in the receive buffer,
    /// and dequeue the amount of elements returned by `f`.
    ///
    /// This function errors if the receive half of the connection is not open.
    ///
    /// If the receive half has been gracefully closed (with a FIN packet),
    /// `Err(RecvError::Finished)` is returned. In this case, the previously received data is
    /// guaranteed to be complete.
    ///
    /// In all other cases, `Err(RecvError::InvalidState)` is returned and previously received
    /// data (if any) may be incomplete (truncated).
    ///
    /// Not smoltcp's: the slice is the first queued segment's payload (what is left of it), in
    /// place in its frame; a segment consumed to its end returns its slot to the pool.
    pub(crate) fn recv<F, R>(&mut self, f: F) -> Result<R, RecvError>
    where
        F: FnOnce(&mut [u8]) -> (usize, R),
    {
        self.recv_impl(|rx_buffer| rx_buffer.dequeue_with(f))
    }

    /// Dequeue a sequence of received octets, and fill a slice from it.
    ///
    /// This function returns the amount of octets actually dequeued, which is limited
    /// by the amount of occupied space in the receive buffer; down to zero.
    ///
    /// See also [recv](#method.recv). The copy is recorded in the copy ledger as
    /// `SocketToApp`.
    pub(crate) fn recv_slice(&mut self, data: &mut [u8]) -> Result<usize, RecvError> {
        self.recv_impl(|rx_buffer| {
            let size = rx_buffer.dequeue_slice(data);
            (size, size)
        })
    }

    /// Peek at a sequence of received octets without removing them from
    /// the receive buffer, and fill a slice from it.
    ///
    /// This function otherwise behaves identically to [recv_slice](#method.recv_slice).
    #[cfg(test)]
    pub(crate) fn peek_slice(&mut self, data: &mut [u8]) -> Result<usize, RecvError> {
        Ok(self.rx_buffer.peek_slice(data))
    }

    /// Take the first queued segment's frame (its payload, what is left of it, unread) for the
    /// application, which holds it until it calls [`release_segments`](Self::release_segments):
    /// a slot of the receive budget stays taken meanwhile. `Ok(None)` when nothing is queued.
    /// Errors as [`recv`](Self::recv). Not smoltcp's.
    pub(crate) fn recv_segment(&mut self) -> Result<Option<RxFrame>, RecvError> {
        self.recv_impl(|rx_buffer| match rx_buffer.pop_segment() {
            Some(frame) => (frame.len(), Some(frame)),
            None => (0, None),
        })
    }

    /// The application dropped `n` frames [`recv_segment`](Self::recv_segment) gave it. Returns
    /// whether the window grew enough to be worth a window update (see `window_to_update`).
    /// Not smoltcp's.
    pub(crate) fn release_segments(&mut self, n: u32) -> bool {
        self.rx_buffer.release_segments(n);
        self.window_to_update()
    }

    /// Whether the receive window grew enough since it was last advertised to be worth a
    /// window update now (what makes `dispatch` send one). Not smoltcp's.
    pub(crate) fn window_update_due(&self) -> bool {
        self.window_to_update()
    }

    /// Segments the receive buffer dropped since the last call (slot budget full, or the
    /// out-of-order queue given up). Not smoltcp's.
    pub(crate) fn take_rx_drops(&mut self) -> RxDrops {
        self.rx_buffer.take_drops()
    }

    /// Return the amount of octets queued in the transmit buffer.
    ///
    /// Note that the Berkeley sockets interface does not have an equivalent of this API.
    pub(crate) fn send_queue(&self) -> usize {
        self.tx_buffer.len()
    }

    /// The send buffer's geometry: its pool, the headroom its frames need, and the payload
    /// bytes per frame (the MSS).
    pub(crate) fn send_frame_geometry(&self) -> (&'static zcnet_buffer::FramePool, usize, usize) {
        (
            self.tx_buffer.pool(),
            self.tx_buffer.headroom(),
            self.tx_buffer.frame_len(),
        )
    }

    /// Records that the writer waits for a free pool slot: the egress task, which the pool wakes
    /// when a slot returns, wakes the writer ([`wake_starved_sender`](Self::wake_starved_sender)).
    pub(crate) fn note_send_starved(&mut self) {
        self.tx_buffer.set_starved();
    }

    /// Calls `f` with the free room of the send buffer's tail frame (a new frame if the tail
    /// is full) and queues as many bytes as it returns. `Err(f)`, `f` not called, when there is
    /// no room now: the buffer is full, or the pool has no free slot (then `egress` is
    /// registered for a returned one). For a connection whose transmit half is open
    /// ([`may_send`](Self::may_send)).
    pub(crate) fn send_waking<F, R>(&mut self, egress: Option<&Waker>, f: F) -> Result<R, F>
    where
        F: FnOnce(&mut [u8]) -> (usize, R),
    {
        let old_length = self.begin_send();
        let (size, r) = self.tx_buffer.fill_tail(egress, f)?;
        self.end_send(old_length, size);
        Ok(r)
    }

    /// Queues a frame the application filled in place; `Ok(Err(frame))` gives it back when the
    /// send buffer has no room for it now.
    pub(crate) fn send_frame(
        &mut self,
        frame: zcnet_buffer::RetainedFrame,
    ) -> Result<Result<(), zcnet_buffer::RetainedFrame>, SendError> {
        self.send_impl(|tx_buffer| {
            let n = frame.len();
            match tx_buffer.push_frame(frame) {
                Ok(()) => (n, Ok(())),
                Err(f) => (0, Err(f)),
            }
        })
    }

    /// Whether a frame allocation for the send buffer failed since the last call; the writer
    /// is then woken (it waits for a free slot, which wakes the egress task that calls this).
    pub(crate) fn wake_starved_sender(&mut self) {
        if self.tx_buffer.take_starved() {
            self.tx_waker.wake();
        }
    }

    /// Payload bytes of a full segment: the smaller of our MSS (known once `dispatch` ran) and
    /// the remote's, less the timestamp option.
    fn data_mss(&self) -> usize {
        let options_len = self.timestamp_option_len();
        self.local_mss
            .unwrap_or(usize::MAX)
            .min(self.remote_mss)
            .saturating_sub(options_len)
    }

    /// Offset into the send buffer of the next payload `dispatch` would send.
    fn next_send_offset(&self) -> usize {
        match self.retransmission_due() {
            Some((seq, _)) => seq - self.local_seq_no,
            None => self.flight_size(),
        }
    }

    /// The bytes loss recovery wants sent again now, as `(start, most bytes)` (see
    /// [`Recovery::next_retransmission`]).
    #[inline]
    fn retransmission_due(&self) -> Option<(TcpSeqNumber, usize)> {
        // Asked a dozen times per round trip (polls, dispatches, the blocked-frame check): the
        // common answer inline, the rest out of line.
        if !self.recovery.in_recovery() && !self.rack.probe_is_due() {
            return None;
        }
        self.retransmission_or_probe()
    }

    /// [`retransmission_due`](Self::retransmission_due) in recovery or with a probe due.
    #[inline(never)]
    fn retransmission_or_probe(&self) -> Option<(TcpSeqNumber, usize)> {
        let in_recovery = self.recovery.in_recovery();
        if self.tx_buffer.is_empty() {
            return None;
        }
        // A due loss probe (regardless of the congestion window, see `Rack::probe`).
        if let Some(probe) = self.rack.probe(self.local_seq_no, in_recovery) {
            return Some(probe);
        }
        if !in_recovery {
            return None;
        }
        let room = self.cwnd_remaining();
        // What RACK found lost (a lost retransmission among it) before the next hole.
        if let Some(lost) = self.rack.next_lost(self.local_seq_no) {
            return self.recovery.may_retransmit(room).then_some(lost);
        }
        self.recovery
            .next_retransmission(self.local_seq_no, self.remote_mss, room)
    }

    /// (Re)arms the loss probe (RACK-TLP, with a SACKing remote) for the data in flight, from
    /// the smoothed RTT and the retransmission timer.
    fn arm_probe(&mut self, now: Instant) {
        // Without an RTT measured, the probe timeout would be the initial RTO (RFC 8985 7.2).
        if !self.remote_has_sack || self.flight_size() == 0 || !self.rtte.has_measurement() {
            return;
        }
        let srtt = Duration::from_millis(u64::from(self.rtte.smoothed_rtt()));
        let one_segment = self.flight_size() <= self.remote_mss;
        self.rack
            .arm_probe(now, srtt, one_segment, self.timer.retransmit_at());
    }

    /// The smoothed RTT, once one was measured.
    fn srtt(&self) -> Option<Duration> {
        self.rtte
            .has_measurement()
            .then(|| Duration::from_millis(u64::from(self.rtte.smoothed_rtt())))
    }

    /// Bytes in the network: sent and not acknowledged, less what the remote SACKed and what
    /// recovery counts as lost ([`Recovery::pipe`]).
    fn pipe(&self) -> usize {
        self.recovery
            .pipe(self.local_seq_no, self.remote_last_seq, self.remote_mss)
    }

    /// Segments this connection sent again (after a loss or a timeout).
    pub(crate) fn retransmissions(&self) -> u32 {
        self.recovery.retransmissions()
    }

    /// Whether the next payload to send sits in a frame the device still has from its previous
    /// send (a retransmission must wait for it). With `waker`, it is registered in the pool's
    /// retained waker first, so the frame's return wakes it.
    pub(crate) fn tx_blocked(&self, waker: Option<&Waker>) -> bool {
        if !self.state_sends_data() {
            return false;
        }
        let offset = self.next_send_offset();
        // Nothing left to send (the usual answer right after a dispatch), or only data never
        // sent (the usual answer before one): nothing waits for the device, without looking
        // for the frame. A frame goes to the device only with all of its unacknowledged rest
        // and takes no more bytes while there, so a frame holding an octet at or past SND.MAX
        // is not with the device.
        let sent_before = match self.sent_max {
            Some(max) => self.local_seq_no + offset < max,
            None => false,
        };
        sent_before && offset < self.tx_buffer.len() && self.tx_buffer.blocked(offset, waker)
    }

    /// Whether the writer waits for a free pool slot (egress wakes it on its next run).
    pub(crate) fn send_starved(&self) -> bool {
        self.tx_buffer.is_starved()
    }

    /// Number of octets transmitted but not yet ACKed.
    fn flight_size(&self) -> usize {
        self.remote_last_seq - self.local_seq_no
    }

    /// What the congestion window still allows to send now: the window less the bytes in
    /// flight ([`pipe`](Self::pipe)), or during recovery under a congestion controller,
    /// proportional rate reduction's quota ([`Recovery::send_quota`]).
    #[inline]
    fn cwnd_remaining(&self) -> usize {
        let cc = self.congestion_controller.inner();
        let window = cc.window();
        // No congestion control: nothing to subtract from (and `pipe` not worth computing).
        if window == usize::MAX {
            return usize::MAX;
        }
        let pipe = self.pipe();
        match cc.ssthresh() {
            Some(ssthresh) if self.recovery.in_recovery() => {
                self.recovery.send_quota(pipe, ssthresh, self.remote_mss)
            }
            _ => window.saturating_sub(pipe),
        }
    }

    /// One past the highest sequence number sent so far in this connection (`None` before the
    /// first segment): payload of a segment below it is sent again.
    pub(crate) fn sent_max(&self) -> Option<TcpSeqNumber> {
        self.sent_max
    }

    /// Whether `seq`, the sequence number an ICMP error quotes, lies in what this connection
    /// sent and the peer has not acknowledged, SND.UNA up to SND.MAX (RFC 5927 §4.1; SND.MAX,
    /// not SND.NXT, because a timeout or a path MTU reduction moves SND.NXT back to SND.UNA
    /// while the segments sent before are still on their way). A listening or closed
    /// connection has nothing in flight.
    pub(crate) fn in_flight(&self, seq: TcpSeqNumber) -> bool {
        match self.sent_max {
            Some(max) if !matches!(self.state, State::Listen | State::Closed) => {
                self.local_seq_no <= seq && seq < max
            }
            _ => false,
        }
    }

    /// An ICMP "fragmentation needed" / "packet too big" about a segment of this connection in
    /// flight ([`in_flight`](Self::in_flight)) says the path takes IP packets of at most `mtu`
    /// bytes (already raised to the stack's floor). If that is below what the connection
    /// uses on a link of `link_mtu` (`true` is returned), segments are cut to it from now on,
    /// new frames of the send queue are sized to it, and everything in flight is sent again
    /// at once from SND.UNA (Linux's `tcp_simple_retransmit`: the larger segments were
    /// dropped on the way). Queued frames larger than the new segment size go out as a full
    /// segment and the rest of the frame (both copied out of it). Unlike a timeout, this
    /// neither backs off the retransmission timer nor shrinks the congestion window: nothing
    /// says the path is congested. Else nothing changes (`false`).
    pub(crate) fn path_mtu_reduced(&mut self, mtu: usize, link_mtu: usize, now: Instant) -> bool {
        if !self.path_mtu.lower(mtu, link_mtu, now) {
            return false;
        }
        if let Some(tuple) = self.tuple {
            // New frames of the send queue hold one segment of the new size.
            self.local_mss = Some(mss_for(mtu, tuple.local.addr));
        }
        if self.state_sends_data() && self.remote_last_seq != self.local_seq_no {
            // Go back to SND.UNA as a timeout does; what the peer SACKed is skipped.
            self.remote_last_seq = self.local_seq_no;
            self.recovery.on_rto();
            self.rack.on_recovery_end();
            self.rack.clear_flight();
            // No RTT sample from what is sent again (Karn).
            self.rtte.on_retransmit();
        }
        true
    }

    /// Move to `state`, waking both wakers.
    /// Sets the four-tuple, counting the change for the connection table's index.
    fn set_tuple(&mut self, tuple: Option<Tuple>) {
        self.tuple = tuple;
        self.index_epoch = self.index_epoch.wrapping_add(1);
    }

    /// Changes of the four-tuple or the state so far (see `index_epoch`): the connection
    /// table's index re-files the connection when this moved.
    pub(crate) fn index_epoch(&self) -> u32 {
        self.index_epoch
    }

    fn set_state(&mut self, state: State) {
        event!(tcp_state(self, state));
        let handshake = |s: State| matches!(s, State::SynSent | State::SynReceived);
        if handshake(state) && !handshake(self.state) {
            self.handshake_rtos = 0;
        }
        self.state = state;
        self.index_epoch = self.index_epoch.wrapping_add(1);

        // Wake all tasks waiting. Even if we haven't received/sent data, this
        // is needed because return values of functions may change depending on the state.
        // For example, a pending read has to fail with an error if the socket is closed.
        self.rx_waker.wake();
        self.tx_waker.wake();
    }

    /// An empty reply to `repr` (ports and addresses swapped, no flags, sequence numbers 0),
    /// for the caller to fill in.
    pub(crate) fn reply(ip_repr: &IpRepr, repr: &TcpRepr) -> (IpRepr, TcpRepr<'static>) {
        let reply_repr = TcpRepr {
            src_port: repr.dst_port,
            dst_port: repr.src_port,
            ..crate::transport::tcp::header::BLANK
        };
        let ip_reply_repr = IpRepr::new(
            ip_repr.dst_addr(),
            ip_repr.src_addr(),
            IpProtocol::Tcp,
            reply_repr.buffer_len(),
            64,
        );
        (ip_reply_repr, reply_repr)
    }

    /// The RST answering `repr`, a segment no connection accepts (RFC 793, "Reset
    /// Generation"). `repr` must not be an RST itself.
    pub(crate) fn rst_reply(ip_repr: &IpRepr, repr: &TcpRepr) -> (IpRepr, TcpRepr<'static>) {
        debug_assert!(repr.control != TcpControl::Rst);

        let (ip_reply_repr, mut reply_repr) = Self::reply(ip_repr, repr);

        // See https://www.snellman.net/blog/archive/2016-02-01-tcp-rst/ for explanation
        // of why we sometimes send an RST and sometimes an RST|ACK
        reply_repr.control = TcpControl::Rst;
        reply_repr.seq_number = repr.ack_number.unwrap_or_default();
        if repr.control == TcpControl::Syn && repr.ack_number.is_none() {
            reply_repr.ack_number = Some(repr.seq_number + repr.segment_len());
        }

        (ip_reply_repr, reply_repr)
    }

    /// An ACK of everything received so far, with our window and (if the remote supports it)
    /// one SACK block; records the ACK and window as sent.
    fn ack_reply(
        &mut self,
        now: Instant,
        ip_repr: &IpRepr,
        repr: &TcpRepr,
    ) -> (IpRepr, TcpRepr<'static>) {
        let (mut ip_reply_repr, mut reply_repr) = Self::reply(ip_repr, repr);
        // TSecr echoes the segment's TSval if it reached the left edge of the window we
        // advertised, TS.Recent otherwise (RFC 7323 section 4.3), so that the remote's RTT
        // samples include the time a hole before an out-of-order segment took to fill.
        let in_order = self
            .remote_last_ack
            .is_none_or(|last_ack| repr.seq_number <= last_ack);
        reply_repr.timestamp = repr.timestamp.zip(self.tsval(now)).map(|(theirs, tsval)| {
            let tsecr = if in_order {
                theirs.tsval
            } else {
                self.last_remote_tsval
            };
            TcpTimestampRepr::new(tsval, tsecr)
        });

        // From RFC 793:
        // [...] an empty acknowledgment segment containing the current send-sequence number
        // and an acknowledgment indicating the next sequence number expected
        // to be received.
        reply_repr.seq_number = self.remote_last_seq;
        reply_repr.ack_number = Some(self.remote_seq_no + self.rx_buffer.len());

        // From RFC 1323:
        // The window field [...] of every outgoing segment, with the exception of SYN
        // segments, is right-shifted by [advertised scale value] bits[...]
        //
        // (Computed before `remote_last_ack` moves: the window keeps the right edge of the
        // last ACK sent, see `rx_window`.)
        reply_repr.window_len = self.scaled_window();
        self.note_advertised(
            reply_repr.ack_number,
            reply_repr.window_len,
            self.remote_win_shift,
        );

        // If the remote supports selective acknowledgement, add the option to the outgoing
        // segment.
        if self.remote_has_sack {
            // RFC 2018: The first SACK block (i.e., the one immediately following the kind and
            // length fields in the option) MUST specify the contiguous block of data containing
            // the segment which triggered this ACK, unless that segment advanced the
            // Acknowledgment Number field in the header.
            reply_repr.sack_ranges[0] = None;

            let ack = reply_repr.ack_number.unwrap_or(TcpSeqNumber(0));

            if let Some(last_seg_seq) = self.local_rx_last_seq {
                reply_repr.sack_ranges[0] = self
                    .assembler
                    .iter_data()
                    .map(|(left, right)| (ack + left, ack + right))
                    .find(|&(left, right)| left <= last_seg_seq && right >= last_seg_seq)
                    .map(|(left, right)| (left.0 as u32, right.0 as u32));
            }

            if reply_repr.sack_ranges[0].is_none() {
                // The matching segment was removed from the assembler, meaning the acknowledgement
                // number has advanced, or there was no previous sACK.
                //
                // While the RFC says we SHOULD keep a list of reported sACK ranges, and iterate
                // through those, that is currently infeasible. Instead, we offer the range with
                // the lowest sequence number (if one exists) to hint at what segments would
                // most quickly advance the acknowledgement number.
                reply_repr.sack_ranges[0] = self
                    .assembler
                    .iter_data()
                    .map(|(left, right)| (ack + left, ack + right))
                    .next()
                    .map(|(left, right)| (left.0 as u32, right.0 as u32));
            }

            // zcnet: the other blocks follow, lowest first, up to the option's three (RFC 2018
            // asks for as many as fit), so that a sender recovering from several losses in
            // one window learns about every hole.
            if let Some(first) = reply_repr.sack_ranges[0] {
                let others = self
                    .assembler
                    .iter_data()
                    .map(|(left, right)| ((ack + left).0 as u32, (ack + right).0 as u32))
                    .filter(|&block| block != first);
                for (slot, block) in reply_repr.sack_ranges[1..].iter_mut().zip(others) {
                    *slot = Some(block);
                }
            }
        }

        // Since the sACK option may have changed the length of the payload, update that.
        ip_reply_repr.set_payload_len(reply_repr.buffer_len());
        (ip_reply_repr, reply_repr)
    }

    /// Reports `[start, end)`, data received before, in the first SACK block of `reply` (a
    /// D-SACK, RFC 2883), the other blocks moving down one: the sender learns that its
    /// retransmission was spurious (and widens its reordering window; Linux also undoes the
    /// congestion window reduction). Only when the remote SACKs (`reply` then carries the
    /// option already).
    fn report_duplicate(
        &self,
        ip_reply: &mut IpRepr,
        reply: &mut TcpRepr,
        start: TcpSeqNumber,
        end: TcpSeqNumber,
    ) {
        if !self.remote_has_sack {
            return;
        }
        reply.sack_ranges = [
            Some((start.0 as u32, end.0 as u32)),
            reply.sack_ranges[0],
            reply.sack_ranges[1],
        ];
        ip_reply.set_payload_len(reply.buffer_len());
    }

    /// Whether `process` takes the acknowledgement (and window, SACK, timestamps) of a segment
    /// starting at `segment_start` that the receive window does not accept, dropping its data:
    /// when the segment starts between the left edge of the window (`window_start`) and the
    /// furthest right edge ever advertised.
    ///
    /// The window we offer shrinks to zero when the slot budget runs out before its right edge
    /// (see [`rx_window`](Self::rx_window)). A remote that sent up to that edge meanwhile
    /// goes on sending ACKs with sequence numbers past the window (its next sequence number),
    /// and probes; RFC 9293 (3.10.7.4) asks that a zero window still take valid ACKs. Were
    /// those ACKs dropped, a connection whose application waits for send room before it reads
    /// (an echo) would never get the room, and the two ends would exchange retransmissions on
    /// timeouts for as long as the connection lived. The acknowledgement
    /// was already checked against what we sent (RFC 5961's ACK test, before this); RSTs and
    /// SYNs keep their stricter rules.
    fn takes_ack_only(
        &self,
        repr: &TcpRepr,
        segment_start: TcpSeqNumber,
        window_start: TcpSeqNumber,
    ) -> bool {
        matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        ) && matches!(
            repr.control,
            TcpControl::None | TcpControl::Psh | TcpControl::Fin
        ) && self
            .rx_edge_max
            .is_some_and(|edge| window_start <= segment_start && segment_start <= edge)
    }

    /// SND.MAX: one past the highest sequence number sent in this connection (SYN and FIN
    /// included), what an acknowledgement may reach at most.
    fn snd_max(&self) -> TcpSeqNumber {
        self.sent_max
            .map_or(self.remote_last_seq, |max| max.max(self.remote_last_seq))
    }

    /// An ACK answering an unacceptable segment (RFC 5961), at most one per second for this
    /// connection and within the stack's budget (`ChallengeAcks`, when the context has it).
    fn challenge_ack_reply(
        &mut self,
        cx: &mut TcpContext<'_>,
        ip_repr: &IpRepr,
        repr: &TcpRepr,
    ) -> Option<(IpRepr, TcpRepr<'static>)> {
        if cx.now < self.challenge_ack_timer {
            return None;
        }
        if let Some(budget) = cx.challenge_acks.as_deref_mut() {
            if !budget.take(cx.now) {
                return None;
            }
        }

        // Rate-limit to 1 per second max.
        self.challenge_ack_timer = cx.now + Duration::from_secs(1);

        Some(self.ack_reply(cx.now, ip_repr, repr))
    }

    /// Whether the segment `repr` in the packet `ip_repr` belongs to this connection (its
    /// 4-tuple, or, when listening, a SYN to the listen endpoint). Call [`process`](Self::process)
    /// with the segments this accepts; answer the others with [`rst_reply`](Self::rst_reply)
    /// if no other connection accepts them.
    pub(crate) fn accepts(&self, ip_repr: &IpRepr, repr: &TcpRepr) -> bool {
        if self.state == State::Closed {
            return false;
        }

        // If we're still listening for SYNs and the packet has an ACK or a RST,
        // it cannot be destined to this socket, but another one may well listen
        // on the same local endpoint.
        if self.state == State::Listen
            && (repr.ack_number.is_some() || repr.control == TcpControl::Rst)
        {
            return false;
        }

        if let Some(tuple) = &self.tuple {
            // Reject packets not matching the 4-tuple
            ip_repr.dst_addr() == tuple.local.addr
                && repr.dst_port == tuple.local.port
                && ip_repr.src_addr() == tuple.remote.addr
                && repr.src_port == tuple.remote.port
        } else {
            // We're listening, reject packets not matching the listen endpoint.
            let addr_ok = match self.listen_endpoint.addr {
                Some(addr) => ip_repr.dst_addr() == addr,
                None => true,
            };
            addr_ok && repr.dst_port != 0 && repr.dst_port == self.listen_endpoint.port
        }
    }

    /// Handle a segment [`accepts`](Self::accepts) accepted: the RFC 793 "SEGMENT ARRIVES"
    /// processing (acceptability, RST, SYN, ACK, window, data, FIN), with the accepted data
    /// queued in the receive buffer.
    ///
    /// `payload` is the segment's payload in the frame it arrived in, the frame trimmed to it
    /// (its visible bytes are the payload); `repr.payload` is then ignored (ingress passes a
    /// header-only `repr`). Without a frame, `repr.payload` is the payload, which cannot be
    /// kept: its data is dropped unacknowledged, as when the receive budget is full. The frame
    /// is queued, trimmed to the part inside the window, when its data is taken (in order, or
    /// out of order within the slot budget), and dropped otherwise. Not smoltcp's: smoltcp
    /// copies the payload into its ring.
    ///
    /// Returns the segment to send back right away, if any (an RST, a challenge ACK, the ACK
    /// of out-of-order data); other answers wait for [`dispatch_polled`](Self::dispatch_polled). The segment
    /// and the answer count in the connection's statistics (the caller sends the answer: it
    /// reserved a frame for it before).
    pub(crate) fn process(
        &mut self,
        cx: &mut TcpContext<'_>,
        ip_repr: &IpRepr,
        repr: &TcpRepr,
        payload: Option<RxFrame>,
    ) -> Option<(IpRepr, TcpRepr<'static>)> {
        self.counters.segments_received += 1;
        let seg_len = payload.as_ref().map_or(repr.payload.len(), |f| f.len());
        if self.fast_path {
            if let Some(ack_len) = self.fast_path_takes(repr, seg_len) {
                self.process_fast(cx, ip_repr, repr, ack_len, seg_len, payload);
                return None;
            }
        }
        let reply = self.process_segment(cx, ip_repr, repr, payload);
        if reply.is_some() {
            self.counters.segments_sent += 1;
        }
        reply
    }

    /// [`process`](Self::process) for in-order segments taken together (software GRO,
    /// `transport/tcp/gro.rs`, and the packets a device merged, `transport/tcp/chain.rs`;
    /// `segments` of them on the wire, counted as received): `repr` is the first one's header
    /// with the last one's window
    /// (and PSH if any had it), `frames` their payloads in order, one frame each, which this
    /// takes from the front (what it leaves, the connection did not take). They share the
    /// acknowledgement and the timestamp (the GRO rules). On the fast path they are one pass:
    /// the ACK taken once, each frame queued as it comes (the delayed ACK forced once two full
    /// segments wait, as for segments taken one by one). Otherwise each frame goes through the
    /// full processing as the segment it was; the last immediate answer is returned.
    pub(crate) fn process_batch(
        &mut self,
        cx: &mut TcpContext<'_>,
        ip_repr: &IpRepr,
        repr: &TcpRepr,
        frames: &mut Batch,
        segments: u64,
    ) -> Option<(IpRepr, TcpRepr<'static>)> {
        let count = frames.len();
        self.counters.segments_received += segments;
        let seg_len = frames.iter().map(|f| f.len()).sum();
        if self.fast_path {
            if let Some(ack_len) = self.fast_path_takes(repr, seg_len) {
                let drain = core::iter::from_fn(|| frames.pop_front());
                self.process_fast(cx, ip_repr, repr, ack_len, seg_len, drain);
                return None;
            }
        }
        let mut seq = repr.seq_number;
        let mut reply = None;
        for k in 0..count {
            let Some(frame) = frames.pop_front() else {
                break;
            };
            let n = frame.len();
            let piece = TcpRepr {
                seq_number: seq,
                control: if k + 1 == count {
                    repr.control
                } else {
                    TcpControl::None
                },
                payload: &[],
                ..*repr
            };
            let ip = IpRepr::new(
                ip_repr.src_addr(),
                ip_repr.dst_addr(),
                IpProtocol::Tcp,
                piece.buffer_len() + n,
                ip_repr.hop_limit(),
            );
            // An earlier piece may have ended the connection.
            if !self.accepts(&ip, &piece) {
                break;
            }
            reply = self.process_segment(cx, &ip, &piece, Some(frame)).or(reply);
            seq += n;
        }
        if reply.is_some() {
            self.counters.segments_sent += 1;
        }
        reply
    }

    /// Whether the fast path takes the segment `repr` (with `seg_len` bytes of payload), and
    /// if so how many new bytes it acknowledges.
    ///
    /// It takes the segments of an established connection's steady state, where
    /// request/response and bulk traffic spend their time (the conditions of Linux's
    /// `tcp_rcv_established`, not BSD's header prediction, which never matches
    /// request/response: there each segment carries data and a new ACK):
    ///
    /// * ESTABLISHED, flags ACK or ACK|PSH, sequence number = RCV.NXT, no SACK blocks (the
    ///   parser keeps only MSS, window scale, SACK-permitted, SACK blocks and timestamps; the
    ///   first three only mean something on a SYN);
    /// * the timestamp, if any, passes PAWS;
    /// * an acceptable ACK: SND.UNA <= SEG.ACK <= SND.MAX, within what is queued;
    /// * the payload lies within the window (no trimming), and a non-zero window offered
    ///   (no zero-window probing to start or stop);
    /// * no loss recovery running, nothing SACKed, no out-of-order data queued.
    ///
    /// Everything else goes to [`process_segment`](Self::process_segment): the full RFC 9293
    /// processing, out of line. Both give the same result for a segment the fast path takes
    /// (`twin.rs` checks it on every segment of its runs, and its fuzz target on arbitrary
    /// segments).
    #[inline(always)]
    fn fast_path_takes(&self, repr: &TcpRepr, seg_len: usize) -> Option<usize> {
        let ack = repr.ack_number?;
        let window_start = self.remote_seq_no + self.rx_buffer.len();
        let takes = self.state == State::Established
            && matches!(repr.control, TcpControl::None | TcpControl::Psh)
            && repr.seq_number == window_start
            && repr.sack_ranges[0].is_none()
            && !self.paws_rejects(repr)
            && self.assembler.is_empty()
            && !self.rx_buffer.has_out_of_order()
            && !self.recovery.in_recovery()
            && !self.recovery.has_sacked()
            && !self.timer.is_zero_window_probe()
            && repr.window_len != 0
            && ack >= self.local_seq_no
            && ack <= self.snd_max().min(self.local_seq_no + self.tx_buffer.len())
            && match (seg_len, self.last_edge()) {
                // A bare ACK: acceptable at RCV.NXT unless the window's edge lies behind it.
                (0, edge) => edge.is_none_or(|edge| edge >= window_start),
                // Data: all of it inside a window that is open.
                (_, Some(edge)) => window_start < edge && window_start + seg_len <= edge,
                (_, None) => false,
            };
        takes.then(|| ack - self.local_seq_no)
    }

    /// The fast path's processing of a segment [`fast_path_takes`](Self::fast_path_takes)
    /// took (`seg_len` bytes of payload in `frames`, in order: one frame, or the frames of
    /// segments taken together): what [`process_segment`](Self::process_segment) does for it,
    /// without the checks that cannot fail and the branches that cannot be taken. Sends nothing
    /// back at once (in-order data is acknowledged by `dispatch`).
    fn process_fast(
        &mut self,
        cx: &mut TcpContext<'_>,
        ip_repr: &IpRepr,
        repr: &TcpRepr,
        ack_len: usize,
        seg_len: usize,
        frames: impl IntoIterator<Item = RxFrame>,
    ) {
        debug_assert!(self.accepts(ip_repr, repr));
        self.note_rx_mss(cx, ip_repr.header_len());
        // `fast_path_takes` returns only with an ACK number.
        let ack_number = self.local_seq_no + ack_len;
        self.local_rx_last_seq = Some(repr.seq_number);
        let ack_all = self.remote_last_seq <= ack_number;

        self.remote_last_ts = Some(cx.now);
        let is_window_update = self.take_window(repr, false);
        let rack_news = self.take_ack(cx, repr, ack_number, ack_len, seg_len, is_window_update);
        self.take_ts_recent(repr);
        self.rearm_after_ack(cx.now, ack_len, ack_all, rack_news);

        if seg_len == 0 {
            return;
        }
        // In order and within the window: each frame is queued as it is while the receive
        // budget has room; the rest is dropped unacknowledged (the peer sends it again).
        let mut taken = 0;
        for frame in frames {
            let n = frame.len();
            if !self.rx_buffer.fits_in_order(n) {
                break;
            }
            // `fast_path_takes` found no out-of-order data queued.
            self.rx_buffer.accept_in_order(frame);
            self.counters.bytes_received += n as u64;
            taken += n;
            self.schedule_delayed_ack(cx.now);
        }
        if taken > 0 {
            self.rx_waker.wake();
        }
        if taken < seg_len {
            self.rx_buffer.note_budget_drop();
        }
    }

    /// [`process`](Self::process) but for the statistics: smoltcp's `process`, for every
    /// segment the fast path does not take.
    #[inline(never)]
    fn process_segment(
        &mut self,
        cx: &mut TcpContext<'_>,
        ip_repr: &IpRepr,
        repr: &TcpRepr,
        payload: Option<RxFrame>,
    ) -> Option<(IpRepr, TcpRepr<'static>)> {
        debug_assert!(self.accepts(ip_repr, repr));
        self.note_rx_mss(cx, ip_repr.header_len());
        let seg_len = payload.as_ref().map_or(repr.payload.len(), |f| f.len());

        // Consider how much the sequence number space differs from the transmit buffer space.
        let (sent_syn, sent_fin) = match self.state {
            // In SYN-SENT or SYN-RECEIVED, we've just sent a SYN.
            State::SynSent | State::SynReceived => (true, false),
            // In FIN-WAIT-1, LAST-ACK, or CLOSING, we've just sent a FIN.
            State::FinWait1 | State::LastAck | State::Closing => (false, true),
            // In all other states we've already got acknowledgements for
            // all of the control flags we sent.
            _ => (false, false),
        };

        // RFC 5961 §4.2: a SYN on a synchronized connection, whatever its sequence number, may
        // be forged (a blind reset attempt) or come from a peer that restarted: answer it with
        // a challenge ACK and ignore it. A restarted peer answers the ACK with a reset whose
        // sequence number is the one the ACK acknowledged, which closes this connection (TIME-WAIT
        // included: no new connection reuses a TIME-WAIT four-tuple before that).
        if repr.control == TcpControl::Syn
            && matches!(
                self.state,
                State::Established
                    | State::FinWait1
                    | State::FinWait2
                    | State::CloseWait
                    | State::Closing
                    | State::LastAck
                    | State::TimeWait
            )
        {
            return self.challenge_ack_reply(cx, ip_repr, repr);
        }

        // An acknowledgement below SND.UNA but within the largest window the remote advertised:
        // an old duplicate, whose acknowledgement and window are ignored while its data and
        // FIN are taken (RFC 9293 3.10.7.4, RFC 5961 §5.2).
        let mut old_ack = false;

        // Reject unacceptable acknowledgements.
        match (self.state, repr.control, repr.ack_number) {
            // An RST received in response to initial SYN is acceptable if it acknowledges
            // the initial SYN.
            // An RST without ACK in response to the initial SYN is unacceptable (we expect an
            // RST|ACK).
            (State::SynSent, TcpControl::Rst, None) => {
                return None;
            }
            // Unacceptable RST|ACK in response to the initial SYN.
            (State::SynSent, TcpControl::Rst, Some(ack_number)) => {
                if ack_number != self.local_seq_no + 1 {
                    return None;
                }
            }
            // Any other RST is judged by its sequence number alone (below), whatever it
            // acknowledges.
            (_, TcpControl::Rst, _) => (),
            // The initial SYN cannot contain an acknowledgement.
            (State::Listen, _, None) => (),
            // This case is handled in `accepts()`.
            (State::Listen, _, Some(_)) => unreachable!(),
            // SYN|ACK in the SYN-SENT state must have the exact ACK number.
            (State::SynSent, TcpControl::Syn, Some(ack_number)) => {
                if ack_number != self.local_seq_no + 1 {
                    // Unacceptable SYN|ACK in response to the initial SYN.
                    return Some(Self::rst_reply(ip_repr, repr));
                }
            }
            // TCP simultaneous open.
            // This is required by RFC 9293, which states "A TCP implementation MUST support
            // simultaneous open attempts (MUST-10)."
            (State::SynSent, TcpControl::Syn, None) => (),
            // ACKs in the SYN-SENT state are invalid.
            (State::SynSent, TcpControl::None, Some(ack_number)) => {
                // If the sequence number matches, ignore it instead of RSTing.
                // I'm not sure why, I think it may be a workaround for broken TCP
                // servers, or a defense against reordering. Either way, if Linux
                // does it, we do too.
                if ack_number == self.local_seq_no + 1 {
                    // Expecting a SYN|ACK, received an ACK with the right ack_number: ignore.
                    return None;
                }

                // Expecting a SYN|ACK, received an ACK with the wrong ack_number: RST.
                return Some(Self::rst_reply(ip_repr, repr));
            }
            // Anything else in the SYN-SENT state is invalid: we expect a SYN|ACK.
            (State::SynSent, _, _) => {
                return None;
            }
            // Every packet after the initial SYN must be an acknowledgement.
            (_, _, None) => {
                return None;
            }
            // ACK in the SYN-RECEIVED state must have the exact ACK number, or we RST it.
            (State::SynReceived, _, Some(ack_number)) => {
                if ack_number != self.local_seq_no + 1 {
                    return Some(Self::rst_reply(ip_repr, repr));
                }
            }
            // RFC 5961 §5.2: an acknowledgement must lie in SND.UNA - MAX.SND.WND ..= SND.MAX.
            (_, _, Some(ack_number)) => {
                // SND.UNA (a SYN we sent must be acknowledged).
                let snd_una = self.local_seq_no + usize::from(sent_syn);

                // Beyond SND.MAX: acknowledges what was never sent (queued data and a FIN not
                // yet sent included). Answered with a challenge ACK and dropped. What was sent
                // lies within the send buffer and the SYN and FIN in flight; the bound keeps
                // that so even if SND.MAX were ever wrong.
                let queued_end = self.local_seq_no
                    + self.tx_buffer.len()
                    + usize::from(sent_syn)
                    + usize::from(sent_fin);
                if ack_number > self.snd_max().min(queued_end) {
                    return self.challenge_ack_reply(cx, ip_repr, repr);
                }

                if ack_number < snd_una {
                    // Further below SND.UNA than any window the remote advertised: not
                    // believed. Answered with a challenge ACK and dropped. (The distance is
                    // taken modulo 2^32: 2^31 behind is also "below" and must not underflow.)
                    let max_snd_wnd = self.max_remote_win.max(self.remote_win_len);
                    let behind = snd_una.0.wrapping_sub(ack_number.0).unsigned_abs() as usize;
                    if behind > max_snd_wnd {
                        return self.challenge_ack_reply(cx, ip_repr, repr);
                    }
                    old_ack = true;
                }
            }
        }

        let window_start = self.remote_seq_no + self.rx_buffer.len();
        let window_end = self.last_edge().unwrap_or(window_start);
        let segment_start = repr.seq_number;
        let segment_end = repr.seq_number + seg_len;

        // PAWS (RFC 7323 section 5): with timestamps on, a segment other than RST whose TSval
        // is older than the last one taken in order (TS.Recent) is an old duplicate from an
        // earlier incarnation of the sequence space: acknowledge it (echoing TS.Recent) and
        // drop it. Not smoltcp's.
        if self.paws_rejects(repr) {
            let (ip_reply, mut reply) = self.ack_reply(cx.now, ip_repr, repr);
            if let Some(ts) = reply.timestamp.as_mut() {
                ts.tsecr = self.last_remote_tsval;
            }
            return Some((ip_reply, reply));
        }

        // Whether only the segment's acknowledgement is taken, its data dropped (see below).
        let mut ack_only = false;

        // The accepted part of the payload (a range of it) and its offset past the in-order
        // data.
        let (payload_range, payload_offset) = match self.state {
            // In LISTEN and SYN-SENT states, we have not yet synchronized with the remote end.
            State::Listen | State::SynSent => (0..0, 0),
            _ => {
                // https://www.rfc-editor.org/rfc/rfc9293.html#name-segment-acceptability-tests
                let segment_in_window =
                    match (segment_start == segment_end, window_start == window_end) {
                        // A keep-alive or window probe packet: send an ACK.
                        (true, _) if segment_end == window_start - 1 => false,
                        // A zero-length segment is acceptable in a zero-length window only at its
                        // start; otherwise send an ACK.
                        (true, true) => window_start == segment_start,
                        // A zero-length segment must start inside the window; otherwise send an ACK.
                        (true, false) => {
                            window_start <= segment_start && segment_start < window_end
                        }
                        // A segment whose data all arrived before but whose FIN is the next
                        // sequence number we expect (the FIN was ignored when the segment first
                        // came out of order): take the FIN. Not smoltcp's, which ACKs and ignores
                        // it, so the peer retransmits the FIN forever.
                        (false, _)
                            if repr.control == TcpControl::Fin && segment_end == window_start =>
                        {
                            true
                        }
                        // A non-zero-length segment with a zero receive window: only send an ACK.
                        (false, true) => false,
                        // A segment must intersect the receive window; otherwise send a challenge ACK.
                        (false, false) => {
                            (window_start <= segment_start && segment_start < window_end)
                                || (window_start < segment_end && segment_end <= window_end)
                        }
                    };

                if segment_in_window {
                    let overlap_start = window_start.max(segment_start);
                    let overlap_end = window_end.min(segment_end);

                    // the checks done above imply this.
                    debug_assert!(overlap_start <= overlap_end);

                    self.local_rx_last_seq = Some(repr.seq_number);

                    (
                        overlap_start - segment_start..overlap_end - segment_start,
                        overlap_start - window_start,
                    )
                } else if self.takes_ack_only(repr, segment_start, window_start) {
                    ack_only = true;
                    (0..0, 0)
                } else {
                    // Out-of-window RSTs are silently dropped, per RFC 9293
                    // (3.10.7.4) and RFC 5961 (3.2): no reply is sent, and the
                    // TIME-WAIT timer below is not refreshed. RST senders don't
                    // need a reply to make progress.
                    if repr.control == TcpControl::Rst {
                        return None;
                    }

                    // If we're in the TIME-WAIT state, restart the TIME-WAIT timeout, since
                    // the remote end may not have realized we've closed the connection.
                    if self.state == State::TimeWait {
                        self.timer.set_for_close(cx.now);
                    }

                    // Segments carrying data are exempt from challenge ACK rate
                    // limiting: an out-of-window data segment is a retransmission
                    // whose ACK was lost, or a window probe, and per RFC 9293
                    // (3.10.7.4, 3.8.6.1) it should elicit an ACK so the remote
                    // can make progress. Withholding these ACKs strands the
                    // remote in retransmission backoff or persist state. The
                    // rate limit exists to break ACK loops between desynced
                    // peers, and exempting data segments cannot sustain such a
                    // loop: the remote paces them with its retransmission and
                    // persist timers, and the data it may send in response to a
                    // duplicate ACK of ours (fast recovery) is bounded by its
                    // send window, which never advances during a desync.
                    //
                    // The exemption covers FIN (a retransmitted final segment is
                    // the same lost-ACK situation) but not SYN: a SYN in a
                    // synchronized state is a challenge ACK situation (RFC 5961
                    // 4.2), and challenge ACKs should be throttled (RFC 5961 7).
                    // One per second is ample for a restarted peer to complete
                    // the challenge exchange, since it retransmits its SYN on
                    // its own timer.
                    if seg_len != 0
                        && matches!(
                            repr.control,
                            TcpControl::None | TcpControl::Psh | TcpControl::Fin
                        )
                    {
                        let (mut ip_reply, mut reply) = self.ack_reply(cx.now, ip_repr, repr);
                        let payload_end = segment_start + repr.payload.len();
                        if !repr.payload.is_empty() && payload_end <= window_start {
                            self.report_duplicate(
                                &mut ip_reply,
                                &mut reply,
                                segment_start,
                                payload_end,
                            );
                        }
                        return Some((ip_reply, reply));
                    }

                    return self.challenge_ack_reply(cx, ip_repr, repr);
                }
            }
        };

        // Compute the amount of acknowledged octets, removing the SYN and FIN bits
        // from the sequence space.
        let mut ack_len = 0;
        let mut ack_of_fin = false;
        let mut ack_all = false;
        let ack_number = match repr.control {
            TcpControl::Rst => None,
            _ if old_ack => None,
            _ => repr.ack_number,
        };
        if let Some(ack_number) = ack_number {
            // Sequence number corresponding to the first byte in `tx_buffer`.
            // This normally equals `local_seq_no`, but is 1 higher if we have sent a SYN,
            // as the SYN occupies 1 sequence number "before" the data.
            let tx_buffer_start_seq = self.local_seq_no + usize::from(sent_syn);

            if ack_number >= tx_buffer_start_seq {
                ack_len = ack_number - tx_buffer_start_seq;

                // We could've sent data before the FIN, so only remove FIN from the sequence
                // space if all of that data is acknowledged.
                if sent_fin && self.tx_buffer.len() + 1 == ack_len {
                    ack_len -= 1;
                    ack_of_fin = true;
                }

                ack_all = self.remote_last_seq <= ack_number;
            }
        }

        // Disregard control flags we don't care about or shouldn't act on yet.
        let mut control = repr.control;
        control = control.quash_psh();

        // If a FIN is received at the end of the current segment, but
        // we have a hole in the assembler before the current segment, disregard this FIN.
        // Nor is the FIN of data that was not taken.
        if control == TcpControl::Fin && (window_start < segment_start || ack_only) {
            control = TcpControl::None;
        }

        // RFC 5961 §3.2: past SYN-SENT, a reset inside the window resets the connection only
        // if its sequence number is exactly the next one expected (RCV.NXT); any other is
        // answered with a challenge ACK and ignored (a blind attacker must guess RCV.NXT, not
        // just land in the window). Out-of-window resets were dropped above.
        if control == TcpControl::Rst
            && !matches!(self.state, State::Listen | State::SynSent)
            && repr.seq_number != window_start
        {
            return self.challenge_ack_reply(cx, ip_repr, repr);
        }

        // Validate and update the state.
        match (self.state, control) {
            // RSTs are not accepted in the LISTEN state.
            (State::Listen, TcpControl::Rst) => return None,

            // RSTs in SYN-RECEIVED flip the socket back to the LISTEN state.
            // Here we need to additionally check `listen_endpoint`, because we want to make sure
            // that SYN-RECEIVED was actually converted from the LISTEN state (another possible
            // reason is TCP simultaneous open).
            (State::SynReceived, TcpControl::Rst) if self.listen_endpoint.port != 0 => {
                self.set_tuple(None);
                self.set_state(State::Listen);
                // The handshake that failed is no connection to report.
                self.counters = TcpCounters::default();
                return None;
            }

            // RSTs in any other state close the socket.
            (_, TcpControl::Rst) => {
                event!(tcp_reset(self));
                self.set_state(State::Closed);
                self.set_tuple(None);
                return None;
            }

            // SYN packets in the LISTEN state change it to SYN-RECEIVED.
            (State::Listen, TcpControl::Syn) => {
                if let Some(max_seg_size) = repr.max_seg_size {
                    // Treat a zero MSS as if the option were absent, like Linux does.
                    if max_seg_size != 0 {
                        self.remote_mss = usize::from(max_seg_size).max(MIN_REMOTE_MSS);
                        self.congestion_controller
                            .inner_mut()
                            .set_mss(self.remote_mss);
                    }
                }

                let tuple = Tuple {
                    local: IpEndpoint::new(ip_repr.dst_addr(), repr.dst_port),
                    remote: IpEndpoint::new(ip_repr.src_addr(), repr.src_port),
                };
                self.set_tuple(Some(tuple));
                // A socket back in LISTEN after a failed handshake (a reset, the SYN-ACK
                // given up) still has that handshake's SND.MAX and largest window: this
                // connection has sent nothing and seen no window yet.
                self.sent_max = None;
                self.max_remote_win = 0;
                self.local_seq_no = Self::initial_seq_no(cx, tuple);
                self.remote_seq_no = repr.seq_number + 1;
                self.remote_last_seq = self.local_seq_no;
                self.remote_has_sack = repr.sack_permitted;
                self.remote_win_scale = repr.window_scale;
                // Remote doesn't support window scaling, don't do it.
                if self.remote_win_scale.is_none() {
                    self.remote_win_shift = 0;
                }
                // Remote doesn't support timestamping, don't do it.
                self.arm_timestamps(cx);
                if repr.timestamp.is_none() {
                    self.tsval_generator = None;
                }
                self.set_state(State::SynReceived);
                self.timer.set_for_idle(cx.now, self.keep_alive);
            }

            // ACK packets in the SYN-RECEIVED state change it to ESTABLISHED.
            (State::SynReceived, TcpControl::None) => {
                self.set_state(State::Established);
            }

            // FIN packets in the SYN-RECEIVED state change it to CLOSE-WAIT.
            // It's not obvious from RFC 793 that this is permitted, but
            // 7th and 8th steps in the "SEGMENT ARRIVES" event describe this behavior.
            (State::SynReceived, TcpControl::Fin) => {
                self.remote_seq_no += 1;
                self.rx_fin_received = true;
                self.set_state(State::CloseWait);
            }

            // SYN|ACK packets in the SYN-SENT state change it to ESTABLISHED.
            // SYN packets in the SYN-SENT state change it to SYN-RECEIVED.
            (State::SynSent, TcpControl::Syn) => {
                if let Some(max_seg_size) = repr.max_seg_size {
                    // Treat a zero MSS as if the option were absent, like Linux does.
                    if max_seg_size != 0 {
                        self.remote_mss = usize::from(max_seg_size).max(MIN_REMOTE_MSS);
                        self.congestion_controller
                            .inner_mut()
                            .set_mss(self.remote_mss);
                    }
                }

                self.remote_seq_no = repr.seq_number + 1;
                self.remote_last_seq = self.local_seq_no + 1;
                self.remote_last_ack = Some(repr.seq_number);
                self.remote_has_sack = repr.sack_permitted;
                self.remote_win_scale = repr.window_scale;
                // Remote doesn't support window scaling, don't do it.
                if self.remote_win_scale.is_none() {
                    self.remote_win_shift = 0;
                }
                // Remote doesn't support timestamping, don't do it.
                if repr.timestamp.is_none() {
                    self.tsval_generator = None;
                }

                if repr.ack_number.is_some() {
                    self.set_state(State::Established);
                } else {
                    self.set_state(State::SynReceived);
                }
            }

            (State::Established, TcpControl::None) => {}

            // FIN packets in ESTABLISHED state indicate the remote side has closed.
            (State::Established, TcpControl::Fin) => {
                self.remote_seq_no += 1;
                self.rx_fin_received = true;
                self.set_state(State::CloseWait);
            }

            // ACK packets in FIN-WAIT-1 state change it to FIN-WAIT-2, if we've already
            // sent everything in the transmit buffer. If not, they reset the retransmit timer.
            (State::FinWait1, TcpControl::None) => {
                if ack_of_fin {
                    self.set_state(State::FinWait2);
                }
            }

            // FIN packets in FIN-WAIT-1 state change it to CLOSING, or to TIME-WAIT
            // if they also acknowledge our FIN.
            (State::FinWait1, TcpControl::Fin) => {
                self.remote_seq_no += 1;
                self.rx_fin_received = true;
                if ack_of_fin {
                    self.set_state(State::TimeWait);
                    self.timer.set_for_close(cx.now);
                } else {
                    self.set_state(State::Closing);
                }
            }

            (State::FinWait2, TcpControl::None) => {}

            // FIN packets in FIN-WAIT-2 state change it to TIME-WAIT.
            (State::FinWait2, TcpControl::Fin) => {
                self.remote_seq_no += 1;
                self.rx_fin_received = true;
                self.set_state(State::TimeWait);
                self.timer.set_for_close(cx.now);
            }

            // ACK packets in CLOSING state change it to TIME-WAIT.
            (State::Closing, TcpControl::None) => {
                if ack_of_fin {
                    self.set_state(State::TimeWait);
                    self.timer.set_for_close(cx.now);
                }
            }

            (State::CloseWait, TcpControl::None) => {}

            // ACK packets in LAST-ACK state change it to CLOSED.
            (State::LastAck, TcpControl::None) => {
                if ack_of_fin {
                    // Clear the remote endpoint, or we'll send an RST there.
                    self.set_state(State::Closed);
                    self.set_tuple(None);
                } else if ack_len == 0 && !old_ack {
                    // Duplicate ACK; our FIN has not been acknowledged.
                    // Per RFC 9293 (3.10.7.4), send a challenge ACK.
                    return self.challenge_ack_reply(cx, ip_repr, repr);
                }
                // Partial ACK: fall through to advance SND.UNA normally.
            }

            // Unexpected packet.
            _ => {
                return None;
            }
        }

        // Update remote state.
        self.remote_last_ts = Some(cx.now);
        let is_window_update = self.take_window(repr, old_ack);
        let rack_news = match ack_number {
            Some(ack_number) => {
                self.take_ack(cx, repr, ack_number, ack_len, seg_len, is_window_update)
            }
            None => false,
        };
        self.take_ts_recent(repr);
        self.rearm_after_ack(cx.now, ack_len, ack_all, rack_news);
        // A window that shrank to zero below data already sent (the receiver ran out of room
        // before the right edge it had advertised): what lies past it is no longer in flight
        // (RFC 9293 MUST-34). It goes again when the window opens; until then the window is
        // probed (MUST-35), not the data retransmitted on the timeout. Not smoltcp's.
        let shrank = self.remote_win_len == 0
            && self.remote_last_seq > self.local_seq_no
            && !self.tx_buffer.is_empty()
            && !self.timer.is_zero_window_probe();
        if shrank {
            self.remote_last_seq = self.local_seq_no;
            self.rack.clear_flight();
        }

        // start/stop the Zero Window Probe timer.
        if self.remote_win_len == 0
            && !self.tx_buffer.is_empty()
            && (self.timer.is_idle() || ack_len > 0 || shrank)
        {
            let delay = self.rtte.retransmission_timeout();
            self.timer.set_for_zero_window_probe(cx.now, delay);
        }
        if self.remote_win_len != 0 && self.timer.is_zero_window_probe() {
            self.timer.set_for_idle(cx.now, self.keep_alive);
        }

        let payload_len = payload_range.len();
        if payload_len == 0 {
            // Data (or a FIN) past the window, dropped: the ACK tells the remote where the
            // window is.
            if ack_only && (seg_len != 0 || repr.control == TcpControl::Fin) {
                return Some(self.ack_reply(cx.now, ip_repr, repr));
            }
            return None;
        }

        // The frame, trimmed to the accepted payload (not smoltcp's: from here to the
        // assembler, the frame is the payload, kept only if the receive buffer has room).
        let Some(mut frame) = payload else {
            // No frame to keep the data in.
            self.rx_buffer.note_budget_drop();
            return None;
        };
        if frame.advance(payload_range.start).is_err() || frame.truncate(payload_len).is_err() {
            // The range lies inside the frame (it was cut from its length): not expected.
            return None;
        }

        let assembler_was_empty = self.assembler.is_empty();

        if payload_offset == 0 {
            // In-order data comes first: out-of-order frames make room for it if need be.
            if !self.rx_buffer.fits_in_order(payload_len) && self.rx_buffer.has_out_of_order() {
                self.rx_buffer.purge_out_of_order();
                self.assembler.clear();
            }
            if !self.rx_buffer.fits_in_order(payload_len) {
                // The slot budget is full (the application holds its segments, or the peer
                // sends segments smaller than the window assumes): drop the data without
                // acknowledging it; the peer sends it again.
                self.rx_buffer.note_budget_drop();
                return None;
            }
        } else {
            let pressure = self.rx_buffer.pool_pressure(&frame);
            if pressure || !self.rx_buffer.fits_out_of_order(&frame) {
                // The pool ran dry: give the out-of-order queue up (the peer sends it again).
                if pressure && self.rx_buffer.has_out_of_order() {
                    self.rx_buffer.purge_out_of_order();
                    self.assembler.clear();
                }
                // No slot for this segment either way: drop it and answer with a duplicate
                // ACK, as for any out-of-order segment.
                self.rx_buffer.note_budget_drop();
                return Some(self.ack_reply(cx.now, ip_repr, repr));
            }
        }

        // Try adding payload octets to the assembler.
        let Ok(contig_len) = self
            .assembler
            .add_then_remove_front(payload_offset, payload_len)
        else {
            // Too many holes in the assembler to add this segment: drop it.
            return None;
        };

        // Queue the frame, and make the contiguous data octets readable.
        self.rx_buffer.accept(payload_offset, frame, contig_len);
        self.counters.bytes_received += contig_len as u64;

        if contig_len != 0 {
            // There's new data in rx_buffer, notify waiting task if any.
            self.rx_waker.wake();
        }

        self.schedule_delayed_ack(cx.now);
        // Per RFC 5681, we should send an immediate ACK when either:
        //  1) an out-of-order segment is received, or
        //  2) a segment arrives that fills in all or part of a gap in sequence space.
        if !self.assembler.is_empty() || !assembler_was_empty {
            // Note that we change the transmitter state here.
            // This is fine because smoltcp assumes that it can always transmit zero or one
            // packets for every packet it receives.
            Some(self.ack_reply(cx.now, ip_repr, repr))
        } else {
            None
        }
    }

    /// Takes the window of an acceptable segment (RFC 9293 3.10.7.4, SND.WND): scaled unless
    /// it is a SYN, left alone for an old duplicate ACK (`old_ack`). Returns whether it
    /// changed.
    fn take_window(&mut self, repr: &TcpRepr, old_ack: bool) -> bool {
        // RFC 1323: The window field (SEG.WND) in the header of every incoming segment, with the
        // exception of SYN segments, is left-shifted by Snd.Wind.Scale bits before updating SND.WND.
        let scale = match repr.control {
            TcpControl::Syn => 0,
            _ => self.remote_win_scale.unwrap_or(0),
        };
        // An old duplicate ACK's window is as old as its acknowledgement: SND.WND follows
        // segments that acknowledge SND.UNA or more (RFC 9293 3.10.7.4).
        let new_remote_win_len = if old_ack {
            self.remote_win_len
        } else {
            usize::from(repr.window_len) << usize::from(scale)
        };
        let is_window_update = new_remote_win_len != self.remote_win_len;
        self.remote_win_len = new_remote_win_len;
        self.max_remote_win = self.max_remote_win.max(new_remote_win_len);

        self.congestion_controller
            .inner_mut()
            .set_remote_window(new_remote_win_len);
        is_window_update
    }

    /// Takes the acknowledgement `ack_number` of an acceptable segment that acknowledges
    /// `ack_len` new bytes (`seg_len` is the segment's payload length): dequeues what it
    /// acknowledged, counts a duplicate ACK (a fast retransmit on the third) or feeds the RTT
    /// estimator and the congestion controller, moves SND.UNA, and tells loss recovery and RACK.
    /// Returns whether RACK learnt of a delivery (the tail loss probe is then armed again).
    fn take_ack(
        &mut self,
        cx: &mut TcpContext<'_>,
        repr: &TcpRepr,
        ack_number: TcpSeqNumber,
        ack_len: usize,
        seg_len: usize,
        is_window_update: bool,
    ) -> bool {
        if ack_len > 0 {
            // Dequeue acknowledged octets.
            debug_assert!(self.tx_buffer.len() >= ack_len);
            self.tx_buffer.dequeue(ack_len);
            self.counters.bytes_acked += ack_len as u64;

            // There's new room available in tx_buffer, wake the waiting task if any.
            self.tx_waker.wake();
        }

        let mut rack_news = false;
        // TODO: When flow control is implemented,
        // refractor the following block within that implementation

        match self.local_rx_last_ack {
            // Duplicate ACK if payload empty and ACK doesn't move send window ->
            // Increment duplicate ACK count, notify congestion controller and
            // set for retransmit if we just received the third duplicate ACK
            Some(last_rx_ack)
                if seg_len == 0
                    && last_rx_ack == ack_number
                    && ack_number < self.remote_last_seq
                    && !is_window_update =>
            {
                // Increment duplicate ACK count
                self.local_rx_dup_acks = self.local_rx_dup_acks.saturating_add(1);

                // Start fast retransmit on the third duplicate ACK.
                if self.local_rx_dup_acks == 3 {
                    self.timer.set_for_fast_retransmit();
                }

                // Notify of duplicate ACK
                let in_flight = self.flight_size();
                self.congestion_controller.inner_mut().on_dup_ack(
                    cx.now,
                    self.remote_mss,
                    in_flight,
                );
            }

            // No duplicate ACK means we reset the duplicate ACK count
            // and notify the congestion controller of the fresh ACK
            _ => {
                self.local_rx_dup_acks = 0;
                self.local_rx_last_ack = Some(ack_number);

                // Notify of fresh ACK. With timestamps, an ACK of new data echoes the
                // TSval of the segment it answers: an RTT sample even for a retransmission
                // (RFC 7323 section 4). Without them, the RTT estimator times one segment.
                let echoed = repr
                    .timestamp
                    .filter(|ts| ack_len > 0 && ts.tsecr != 0)
                    .zip(self.tsval_generator)
                    .and_then(|(ts, source)| source.elapsed_ms(cx.now, ts.tsecr));
                match echoed {
                    Some(rtt) => self.rtte.sample_echoed(rtt),
                    None => self.rtte.on_ack(cx.now, ack_number),
                }
                let new_flight_size = self.flight_size().saturating_sub(ack_len);
                self.congestion_controller.inner_mut().on_ack(
                    cx.now,
                    ack_len,
                    new_flight_size,
                    &self.rtte,
                );
            }
        };

        // We've processed everything in the incoming segment, so advance the local
        // sequence number past it.
        self.local_seq_no = ack_number;

        // During retransmission, if an earlier segment got lost but later was
        // successfully received, self.local_seq_no can move past self.remote_last_seq.
        // Do not attempt to retransmit the latter segments; not only this is pointless
        // in theory but also impossible in practice, since they have been already
        // deallocated from the buffer.
        if self.remote_last_seq < self.local_seq_no {
            self.remote_last_seq = self.local_seq_no
        }

        // Loss recovery learns what the remote holds; enough SACKed above the first
        // unacknowledged byte starts recovery without waiting for duplicate ACKs.
        let snd_max = self.sent_max.unwrap_or(self.remote_last_seq);
        // (No blocks at all, the usual ACK: the scoreboard only advances, as recording none
        // would do. The parser fills the blocks from the first.)
        let sack = (self.remote_has_sack && repr.sack_ranges[0].is_some())
            .then_some(&repr.sack_ranges[..]);
        let was_in_recovery = self.recovery.in_recovery();
        self.recovery
            .on_ack(self.local_seq_no, sack, snd_max, ack_len > 0);
        if was_in_recovery && !self.recovery.in_recovery() {
            self.rack.on_recovery_end();
        }
        // A D-SACK: the remote got something twice, so a retransmission was spurious (or
        // the path duplicates). RACK waits longer for reordering before it deems a
        // segment lost.
        if self.remote_has_sack && sack::is_dsack(&repr.sack_ranges, self.local_seq_no) {
            self.rack.on_dsack(self.local_seq_no, snd_max);
        }
        if self
            .recovery
            .sack_says_lost(self.local_seq_no, self.remote_mss)
            && !matches!(self.timer, Timer::FastRetransmit)
        {
            self.timer.set_for_fast_retransmit();
        }

        // RACK: a delivery of data sent later than some unacknowledged segment may show
        // that segment lost (a lost retransmission, a loss too near the tail for three
        // duplicate ACKs); outside recovery that starts one.
        if self.remote_has_sack {
            let recovery = &self.recovery;
            let sacked = recovery
                .has_sacked()
                .then_some(|s, e| recovery.is_sacked(s, e));
            let news = self.rack.on_ack(self.local_seq_no, cx.now, sacked);
            if news {
                if self.rack.detect(cx.now, self.srtt())
                    && !self.recovery.in_recovery()
                    && !matches!(self.timer, Timer::FastRetransmit)
                {
                    self.timer.set_for_fast_retransmit();
                }
                rack_news = true;
            }
        }
        rack_news
    }

    /// Takes the TSval of an acceptable segment as TS.Recent when it may (RFC 7323 section 4.3).
    fn take_ts_recent(&mut self, repr: &TcpRepr) {
        // TS.Recent, the TSval we echo, follows segments that reach the left edge of the
        // window we advertised (RFC 7323 section 4.3: `SEG.SEQ <= Last.ACK.sent`), so that a
        // delayed or out-of-order segment does not move it.
        if let Some(timestamp) = repr.timestamp {
            if self
                .remote_last_ack
                .is_none_or(|last_ack| repr.seq_number <= last_ack)
            {
                self.last_remote_tsval = timestamp.tsval;
            }
        }
    }

    /// After an acceptable ACK: the retransmission timer stops when everything was
    /// acknowledged (`ack_all`), restarts when new data was (`ack_len`), the keep-alive timer
    /// restarts; a delivery RACK learnt of (`rack_news`) arms the tail loss probe again.
    fn rearm_after_ack(&mut self, now: Instant, ack_len: usize, ack_all: bool, rack_news: bool) {
        // update timers.
        match self.timer {
            Timer::Retransmit { .. } | Timer::FastRetransmit => {
                if ack_all {
                    // RFC 6298: (5.2) ACK of all outstanding data turn off the retransmit timer.
                    self.timer.set_for_idle(now, self.keep_alive);
                } else if ack_len > 0 {
                    // (5.3) ACK of new data in ESTABLISHED state restart the retransmit timer.
                    let rto = self.rtte.retransmission_timeout();
                    self.timer.set_for_retransmit(now, rto);
                }
            }
            Timer::Idle { .. } => {
                // any packet on idle refresh the keepalive timer.
                self.timer.set_for_idle(now, self.keep_alive);
            }
            _ => {}
        }
        if rack_news && !ack_all {
            self.arm_probe(now);
        }
    }

    /// In-order data was queued: starts the delayed ACK timer, or forces it to expire when a
    /// full segment's worth waits.
    fn schedule_delayed_ack(&mut self, now: Instant) {
        if let Some(ack_delay) = self.ack_delay {
            if self.ack_to_transmit() {
                self.ack_delay_timer = match self.ack_delay_timer {
                    // Start the delayed ack timer.
                    AckDelayTimer::Idle => AckDelayTimer::Waiting(now + ack_delay),
                    // Already started: a full segment's worth is waiting, force expiry.
                    AckDelayTimer::Waiting(_) if self.immediate_ack_to_transmit() => {
                        AckDelayTimer::Immediate
                    }
                    // Wait until the delayed ack timer expires.
                    timer @ AckDelayTimer::Waiting(_) => timer,
                    // Already force-expired.
                    AckDelayTimer::Immediate => AckDelayTimer::Immediate,
                };
            }
        }
    }

    /// Counts a retransmission timeout during the handshake and gives the handshake up past
    /// the limit (`true`: nothing more to send). A SYN-RECEIVED that came from LISTEN listens
    /// again, as after a reset (Linux drops the request after `tcp_synack_retries`); a SYN
    /// that went unanswered closes the connection ([`gave_up`](Self::gave_up)).
    fn handshake_expired(&mut self) -> bool {
        let limit = match self.state {
            State::SynSent => SYN_RETRIES,
            State::SynReceived => SYNACK_RETRIES,
            _ => return false,
        };
        self.handshake_rtos = self.handshake_rtos.saturating_add(1);
        if self.handshake_rtos <= limit {
            return false;
        }
        event!(tcp_timed_out(self));
        if self.state == State::SynReceived && self.listen_endpoint.port != 0 {
            self.set_tuple(None);
            self.timer = Timer::new();
            self.rtte = RttEstimator::with_min_rto(self.rtte.min_rto());
            self.set_state(State::Listen);
            self.counters = TcpCounters::default();
        } else {
            self.gave_up = true;
            self.set_state(State::Closed);
        }
        true
    }

    /// Whether the state is one that sends (and resends) data or a FIN: ESTABLISHED,
    /// FIN-WAIT-1, CLOSING, CLOSE-WAIT, LAST-ACK.
    fn state_sends_data(&self) -> bool {
        matches!(
            self.state,
            State::Established
                | State::FinWait1
                | State::Closing
                | State::CloseWait
                | State::LastAck
        )
    }

    /// Whether a synchronized connection whose retransmission timer or zero-window probe is
    /// due at `now` passed its limit instead (see `retries.rs`). Not smoltcp's.
    fn retries_exhausted(&mut self, now: Instant) -> bool {
        if !self.state_sends_data() {
            return false;
        }
        match self.timer {
            Timer::Retransmit { expires_at } if now >= expires_at => {
                let rto = self.rtte.retransmission_timeout();
                self.retries.rto_expired(now, rto, self.local_seq_no)
            }
            Timer::ZeroWindowProbe { expires_at, .. } if now >= expires_at => {
                self.retries.probe_due(self.counters.segments_received)
            }
            _ => false,
        }
    }

    /// Whether the remote has been silent longer than the timeout at `timestamp`.
    fn timed_out(&self, timestamp: Instant) -> bool {
        match (self.remote_last_ts, self.timeout) {
            (Some(remote_last_ts), Some(timeout)) => timestamp >= remote_last_ts + timeout,
            (_, _) => false,
        }
    }

    /// Everything queued has gone out (the usual answer after a dispatch, or with nothing
    /// written) in a state with no SYN or FIN to send: [`seq_to_transmit`](Self::seq_to_transmit)
    /// is false, unless loss recovery has something to send again. Its general computation
    /// gives the same answer (no octet between the next sequence number and the end of the
    /// queue), at several times the cost.
    #[inline(always)]
    fn all_sent(&self) -> bool {
        matches!(self.state, State::Established | State::CloseWait)
            && self.remote_last_seq == self.local_seq_no + self.tx_buffer.len()
    }

    /// Whether a segment occupying sequence space (SYN, data, FIN) may be sent now: window,
    /// congestion window and Nagle permitting.
    fn seq_to_transmit(&self, cx: &mut TcpContext<'_>) -> bool {
        // Loss recovery's retransmissions go before new data (the congestion window was
        // checked by `retransmission_due`) ...
        if self.retransmission_due().is_some() {
            // ... once the device is done with the frame to resend.
            return !self.tx_blocked(None);
        }

        if self.all_sent() {
            return false;
        }

        let ip_header_len = match self.tuple.unwrap().local.addr {
            IpAddress::Ipv4(_) => IPV4_HEADER_LEN,
            IpAddress::Ipv6(_) => IPV6_HEADER_LEN,
        };

        // The effective max segment size, taking into account the options and the local and remote limits.
        let options_len = self.timestamp_option_len();

        let local_mss = self.path_mtu.get(cx.ip_mtu) - ip_header_len - TCP_HEADER_LEN;
        let effective_mss = local_mss.min(self.remote_mss).saturating_sub(options_len);

        // Have we sent data that hasn't been ACKed yet?
        let data_in_flight = self.remote_last_seq != self.local_seq_no;

        // If we want to send a SYN and we haven't done so, do it!
        if matches!(self.state, State::SynSent | State::SynReceived) && !data_in_flight {
            return true;
        }

        // max sequence number we can send.
        let max_send_seq =
            self.local_seq_no + core::cmp::min(self.remote_win_len, self.tx_buffer.len());

        // Where the next new segment starts: past what the remote SACKed, if the last
        // sequence number sent lies in it (see `dispatch`).
        let next_seq = self
            .recovery
            .skip_sacked(self.remote_last_seq)
            .unwrap_or(self.remote_last_seq);

        // Max amount of octets we can send.
        let capped_send_seq = if max_send_seq >= next_seq {
            max_send_seq - next_seq
        } else {
            0
        };

        // compare max bytes allowed by cwnd with max bytes allowed by remote
        let max_send = capped_send_seq.min(self.cwnd_remaining());

        // Can we send at least 1 octet?
        let mut can_send = max_send != 0;
        // Can we send at least 1 full segment?
        let can_send_full = max_send >= effective_mss;

        // Do we have to send a FIN?
        let want_fin = matches!(
            self.state,
            State::FinWait1 | State::Closing | State::LastAck
        );

        // If we're applying the Nagle algorithm we don't want to send more
        // until one of:
        // * There's no data in flight
        // * We can send a full packet
        // * We have all the data we'll ever send (we're closing send)
        if self.nagle && data_in_flight && !can_send_full && !want_fin {
            can_send = false;
        }

        // Super-segments: while the send queue is full and data is in flight, a run shorter
        // than a quarter of what may be in flight (the queue, the peer's window, the congestion
        // window) waits for the next acknowledgement, which frees room for more (Linux's TSO
        // deferral, simplified). Without it, each ACK of two segments lets two segments out
        // and the peer acknowledges those two again: runs never grow. The ACK is sure to come
        // (data is in flight); a retransmission (above), a FIN and what loss recovery lets
        // out never wait.
        if self.super_segments
            && can_send
            && data_in_flight
            && !want_fin
            && !self.recovery.in_recovery()
        {
            let ceiling = self
                .tx_buffer
                .capacity()
                .min(self.remote_win_len)
                .min(self.congestion_controller.inner().window());
            if self.tx_buffer.is_full() && max_send < ceiling / 4 {
                can_send = false;
            }
        }

        // Can we actually send the FIN? We can send it if:
        // 1. We have unsent data that fits in the remote window.
        // 2. We have no unsent data.
        // This condition matches only if #2, because #1 is already covered by can_data and we're ORing them.
        let can_fin = want_fin && self.remote_last_seq == self.local_seq_no + self.tx_buffer.len();

        // Data waits while the frame it sits in is still with the device (a retransmission of
        // a frame sent in place); egress is woken when the device is done with it.
        (can_send && !self.tx_blocked(None)) || can_fin
    }

    /// Whether a delayed ACK may go out at `timestamp`.
    fn delayed_ack_expired(&self, timestamp: Instant) -> bool {
        match self.ack_delay_timer {
            AckDelayTimer::Idle => true,
            AckDelayTimer::Waiting(t) => t <= timestamp,
            AckDelayTimer::Immediate => true,
        }
    }

    /// Whether received data has not been acknowledged yet.
    fn ack_to_transmit(&self) -> bool {
        if let Some(remote_last_ack) = self.remote_last_ack {
            remote_last_ack < self.remote_seq_no + self.rx_buffer.len()
        } else {
            false
        }
    }

    /// Return whether to send ACK immediately due to the amount of unacknowledged data.
    ///
    /// RFC 9293 states "An ACK SHOULD be generated for at least every second full-sized segment or
    /// 2*RMSS bytes of new data (where RMSS is the MSS specified by the TCP endpoint receiving the
    /// segments to be acknowledged, or the default value if not specified) (SHLD-19)."
    ///
    /// Note that the RFC above only says "at least 2*RMSS bytes", which is not a hard requirement.
    /// In practice, we follow the Linux kernel's empirical value of sending an ACK for every RMSS
    /// byte of new data. For details, see
    /// <https://elixir.bootlin.com/linux/v6.11.4/source/net/ipv4/tcp_input.c#L5747>.
    fn immediate_ack_to_transmit(&self) -> bool {
        if let Some(remote_last_ack) = self.remote_last_ack {
            remote_last_ack + self.remote_mss < self.remote_seq_no + self.rx_buffer.len()
        } else {
            false
        }
    }

    /// Return whether we should send ACK immediately due to significant window updates.
    ///
    /// ACKs with significant window updates should be sent immediately to let the sender know that
    /// more data can be sent. According to the Linux kernel implementation, "significant" means
    /// doubling the receive window. The Linux kernel implementation can be found at
    /// <https://elixir.bootlin.com/linux/v6.9.9/source/net/ipv4/tcp.c#L1472>.
    ///
    /// Never during the handshake: every segment sent then is a SYN, whose window is unscaled
    /// and at most 65,535 bytes, so a window past that could never be advertised and the update
    /// would be due again after each one.
    #[inline(always)]
    fn window_to_update(&self) -> bool {
        match self.state {
            State::Established | State::FinWait1 | State::FinWait2 => {
                let Some(last_win) = self.last_scaled_window() else {
                    return false;
                };
                // The window never exceeds the buffer's capacity, nor the edge already
                // advertised by more than one unit of the scale: when neither could double
                // the last window (of at least 2 units), no update is due, whatever the
                // buffer holds (the usual answer, without working the window out).
                let ceiling = (self.rx_buffer.capacity() >> self.remote_win_shift) + 1;
                if last_win >= 2 && usize::from(last_win) * 2 > ceiling {
                    return false;
                }
                self.window_doubles(last_win)
            }
            _ => false,
        }
    }

    /// Whether the window to offer now is at least twice `last_win` (in units of the scale),
    /// and not zero: [`window_to_update`](Self::window_to_update) once the cheap answers
    /// failed.
    #[inline(never)]
    fn window_doubles(&self, last_win: u16) -> bool {
        let new_win = self.scaled_window();
        new_win > 0 && new_win / 2 >= last_win
    }

    /// [`dispatch_polled`](Self::dispatch_polled) without its answer (the unit tests' and the
    /// differential checks' way to send).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn dispatch<F, E>(&mut self, cx: &mut TcpContext<'_>, emit: F) -> Result<(), E>
    where
        F: FnOnce(&mut TcpContext<'_>, (&IpRepr, &TcpRepr), Option<TxFrame>) -> Result<(), E>,
    {
        self.dispatch_polled(cx, emit).map(|_| ())
    }

    /// Run the timers and, if there is anything to send (a SYN, data, FIN, ACK, window
    /// update, RST, keep-alive or zero-window probe), build one segment and hand it to `emit`.
    ///
    /// `emit` gets the context back, the IP and TCP headers, and the payload's frame when the
    /// segment's payload is a send-buffer frame's whole unacknowledged rest (lent to the device
    /// as a retained `TxFrame`, data = payload; `repr.payload` is then empty), else `None` (the
    /// payload, possibly empty, is `repr.payload`, a view into the send buffer to copy); it
    /// returns an error if it could not send the segment (no buffer, no neighbour yet), which
    /// is returned after leaving the connection as if nothing was sent. Call again while
    /// [`poll_at`](Self::poll_at) says `Now`: one segment per call, or with a context that
    /// offers super-segments ([`TcpContext::with_gso`]) one run of whole frames: `emit`'s
    /// frame is the first, the others are in the context's chain.
    ///
    /// Returns the connection's next [`poll_at`](Self::poll_at) answer when the send path
    /// knows it without asking (`None`: ask). An established connection's new data goes
    /// through the send fast path (`socket/send_fast.rs`), the rest through the full
    /// processing ([`dispatch_full`](Self::dispatch_full)).
    pub(crate) fn dispatch_polled<F, E>(
        &mut self,
        cx: &mut TcpContext<'_>,
        emit: F,
    ) -> Result<Option<PollAt>, E>
    where
        F: FnOnce(&mut TcpContext<'_>, (&IpRepr, &TcpRepr), Option<TxFrame>) -> Result<(), E>,
    {
        match self.dispatch_fast(cx, emit) {
            Ok(sent) => {
                #[cfg(any(test, feature = "fuzzing"))]
                {
                    self.fast_sends += 1;
                }
                if let Ok(Some(at)) = sent {
                    debug_assert_eq!(at, self.poll_at(cx), "the send fast path's deadline");
                }
                sent
            }
            Err((send_fast::Declined, emit)) => self.dispatch_full(cx, emit).map(|()| None),
        }
    }

    /// The header every segment `dispatch` sends starts from: an empty ACK of everything
    /// received, at SND.NXT, with the window to offer and the timestamp option (when on).
    #[inline(always)]
    fn ack_repr(&self, tuple: Tuple, now: Instant) -> TcpRepr<'static> {
        TcpRepr {
            src_port: tuple.local.port,
            dst_port: tuple.remote.port,
            control: TcpControl::None,
            seq_number: self.remote_last_seq,
            ack_number: Some(self.remote_seq_no + self.rx_buffer.len()),
            window_len: self.scaled_window(),
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None, None, None],
            timestamp: self
                .tsval(now)
                .map(|tsval| TcpTimestampRepr::new(tsval, self.last_remote_tsval)),
            payload: &[],
        }
    }

    /// [`dispatch_polled`](Self::dispatch_polled)'s full processing: smoltcp's `dispatch`,
    /// for every segment the send fast path does not take.
    #[inline(never)]
    fn dispatch_full<F, E>(&mut self, cx: &mut TcpContext<'_>, emit: F) -> Result<(), E>
    where
        F: FnOnce(&mut TcpContext<'_>, (&IpRepr, &TcpRepr), Option<TxFrame>) -> Result<(), E>,
    {
        if self.tuple.is_none() {
            return Ok(());
        }

        // NOTE(unwrap): we check tuple is not None above.
        let tuple = self.tuple.unwrap();

        // Check if the interface still has our source IP address.
        // If not (e.g. the interface's IP changed), reset the socket.
        // We use reset() instead of set_state(Closed) to avoid sending
        // an RST packet with the now-invalid source IP.
        if !cx.addrs.has_ip_addr(tuple.local.addr) {
            // The source IP address is no longer available: close the connection.
            event!(tcp_address_gone(self));
            self.reset();
            return Ok(());
        }

        if self.remote_last_ts.is_none() {
            // We get here in exactly two cases:
            //  1) This socket just transitioned into SYN-SENT.
            //  2) This socket had an empty transmit buffer and some data was added there.
            // Both are similar in that the socket has been quiet for an indefinite
            // period of time, it isn't anymore, and the local endpoint is talking.
            // So, we start counting the timeout not from the last received packet
            // but from the first transmitted one.
            self.remote_last_ts = Some(cx.now);
        }

        self.super_segments = cx.gso.is_some();
        self.congestion_controller.inner_mut().pre_transmit(cx.now);
        // A lowered path MTU is tried again once it is old (`path_mtu.rs`): frames filled
        // from now on hold a segment of the link's MTU again.
        if self.path_mtu.expire(cx.now) {
            self.local_mss = Some(mss_for(cx.ip_mtu, tuple.local.addr));
        }

        // RACK's reordering timer: segments not yet deemed lost may be now (outside recovery,
        // that starts one); the tail loss probe's timer makes a probe due (a due probe with
        // nothing to send, the last segment SACKed, is done with).
        if self.remote_has_sack {
            if self.rack.reorder_fires(cx.now)
                && self.rack.detect(cx.now, self.srtt())
                && !self.recovery.in_recovery()
                && !matches!(self.timer, Timer::FastRetransmit)
            {
                self.timer.set_for_fast_retransmit();
            }
            if self.rack.probe_fires(cx.now)
                && self
                    .rack
                    .probe(self.local_seq_no, self.recovery.in_recovery())
                    .is_none()
            {
                self.rack.probe_sent();
            }
        }

        // Check if any state needs to be changed because of a timer.
        if self.timed_out(cx.now) {
            // If a timeout expires, we should abort the connection.
            event!(tcp_timed_out(self));
            self.set_state(State::Closed);
        } else if self.retries_exhausted(cx.now) {
            // zcnet: the retransmission or probe limit passed; a RST goes below (the
            // state is CLOSED with the four-tuple still set).
            event!(tcp_gave_up(self));
            self.gave_up = true;
            self.set_state(State::Closed);
        } else if self.timer.should_retransmit(cx.now) {
            if matches!(self.timer, Timer::Retransmit { .. }) && self.handshake_expired() {
                return Ok(());
            }
            if let Timer::Retransmit { .. } = self.timer {
                // If a retransmit timer expired, we should resend data starting at the last ACK.

                // Inform the congestion controller that we're retransmitting and should enter the slow start state
                let in_flight = self.flight_size();
                self.congestion_controller
                    .inner_mut()
                    .on_rto(cx.now, in_flight);

                // Rewind "last sequence number sent", as if we never
                // had sent them. This will cause all data in the queue
                // to be sent again.
                self.remote_last_seq = self.local_seq_no;

                // Recovery ends; what the remote SACKed is skipped (see `Recovery::on_rto`).
                self.recovery.on_rto();
                self.rack.on_recovery_end();
                self.rack.clear_flight();

                // Inform RTTE, so that it can can handle RTO backoff
                self.rtte.on_rto();
                self.counters.timeouts += 1;
            } else {
                // Three duplicate ACKs, or the SACK scoreboard, signalled a loss.

                // A fast retransmit starts loss recovery (once per episode), and the
                // congestion controller reduces its window.
                if self.recovery.enter(self.local_seq_no, self.remote_last_seq) {
                    self.counters.fast_recoveries += 1;
                    let in_flight = self.flight_size();
                    self.congestion_controller
                        .inner_mut()
                        .on_loss(cx.now, in_flight);
                }
            }

            // Clear the `should_retransmit` state. If we can't retransmit right
            // now for whatever reason (like zero window), this avoids an
            // infinite polling loop where `poll_at` returns `Now` but `dispatch`
            // can't actually do anything.
            //
            // zcnet: after a fast retransmit, the retransmission timer keeps running (from
            // now): data is still unacknowledged, and if recovery sends nothing (the
            // device still has the frame, the window is full) and no ACK comes, only the
            // timer recovers the connection.
            match self.timer {
                Timer::FastRetransmit => self
                    .timer
                    .set_for_retransmit(cx.now, self.rtte.retransmission_timeout()),
                _ => self.timer.set_for_idle(cx.now, self.keep_alive),
            }

            // Inform RTTE, so that it can avoid bogus measurements.
            self.rtte.on_retransmit();
        }

        if matches!(self.state, State::SynReceived) && self.synack_paused {
            return Ok(());
        }

        // Decide whether we're sending a packet.
        // If we have data to transmit and it fits into partner's window, do it.
        let send = self.seq_to_transmit(cx)
            // If we have data to acknowledge, do it.
            || (self.ack_to_transmit() && self.delayed_ack_expired(cx.now))
            // If we have window length increase to advertise, do it.
            || self.window_to_update()
            // If we need to abort the connection, do it.
            || self.state == State::Closed
            // If we need to transmit a keep-alive packet, do it.
            || self.timer.should_keep_alive(cx.now)
            // If a zero-window probe is due, send it.
            || self.timer.should_zero_window_probe(cx.now);
        if !send {
            if self.timer.should_close(cx.now) {
                // If we have spent enough time in the TIME-WAIT state, close the socket.
                self.reset();
            }
            return Ok(());
        }

        // Construct the lowered IP representation.
        // We might need this to calculate the MSS, so do it early.
        let mut ip_repr = IpRepr::new(
            tuple.local.addr,
            tuple.remote.addr,
            IpProtocol::Tcp,
            0,
            self.hop_limit.unwrap_or(64),
        );
        self.note_rx_mss(cx, ip_repr.header_len());

        // Construct the basic TCP representation, an empty ACK packet.
        // We'll adjust this to be more specific as needed.
        let mut repr = self.ack_repr(tuple, cx.now);

        let mut is_zero_window_probe = false;
        // Whether the segment is loss recovery's retransmission of a hole.
        let mut is_retransmission = false;
        // The payload when it is a send-buffer frame sent in place (then `repr.payload` is
        // empty and `zc_len` is the frame's length).
        let mut zc: Option<TxFrame> = None;
        let mut zc_len = 0;
        // Segments on the wire: more than one for a super-segment.
        let mut wire_segments = 1;

        // Frames the application fills hold one full segment each (`data_mss`), cut to the
        // path MTU.
        self.local_mss = Some(self.path_mtu.get(cx.ip_mtu) - ip_repr.header_len() - TCP_HEADER_LEN);

        match self.state {
            // We transmit an RST in the CLOSED state. If we ended up in the CLOSED state
            // with a specified endpoint, it means that the socket was aborted.
            State::Closed => {
                repr.control = TcpControl::Rst;
            }

            // We never transmit anything in the LISTEN state.
            State::Listen => return Ok(()),

            // We transmit a SYN in the SYN-SENT state.
            // We transmit a SYN|ACK in the SYN-RECEIVED state.
            State::SynSent | State::SynReceived => {
                repr.control = TcpControl::Syn;
                repr.seq_number = self.local_seq_no;
                // window len must NOT be scaled in SYNs.
                repr.window_len = u16::try_from(self.rx_window()).unwrap_or(u16::MAX);
                if self.state == State::SynSent {
                    repr.ack_number = None;
                    repr.window_scale = Some(self.remote_win_shift);
                    repr.sack_permitted = true;
                } else {
                    repr.sack_permitted = self.remote_has_sack;
                    repr.window_scale = self.remote_win_scale.map(|_| self.remote_win_shift);
                }
            }

            // We transmit data in all states where we may have data in the buffer,
            // or the transmit half of the connection is still open.
            State::Established
            | State::FinWait1
            | State::Closing
            | State::CloseWait
            | State::LastAck => {
                // Extract as much data as the remote side can receive in this packet
                // from the transmit buffer.

                // Maximum size we're allowed to send. This can be limited by 4 factors:
                // 1. remote window
                // 2. MSS the remote is willing to accept, probably determined by their MTU
                // 3. MSS we can send, determined by our MTU.
                // 4. Our congestion window
                let options_len = repr.header_len() - TCP_HEADER_LEN;
                let local_mss =
                    self.path_mtu.get(cx.ip_mtu) - ip_repr.header_len() - TCP_HEADER_LEN;
                let effective_mss = local_mss.min(self.remote_mss).saturating_sub(options_len);

                let offset = if let Some((seq, len)) = self.retransmission_due() {
                    // Loss recovery sends a hole again (the frame itself when the hole
                    // starts at its unacknowledged front).
                    let offset = seq - self.local_seq_no;
                    let size = effective_mss.min(len);
                    repr.seq_number = seq;
                    is_retransmission = true;
                    match self.tx_buffer.locate(offset, size) {
                        Segment::Copy { index, off, len } => {
                            repr.payload = self.tx_buffer.bytes(index, off, len);
                        }
                        Segment::Frame { index, len } => {
                            zc = self.tx_buffer.take(index);
                            zc_len = if zc.is_some() { len } else { 0 };
                        }
                        Segment::Busy => {}
                    }
                    offset
                } else {
                    // After a timeout, sending resumes from the cumulative ACK: skip what the
                    // remote SACKed.
                    if let Some(end) = self.recovery.skip_sacked(self.remote_last_seq) {
                        self.remote_last_seq = end;
                        repr.seq_number = end;
                    }

                    // Right edge of window, ie the max sequence number we're allowed to send.
                    let win_right_edge = self.local_seq_no + self.remote_win_len;

                    // Max amount of octets we're allowed to send according to the remote window.
                    let mut win_limit = if win_right_edge >= self.remote_last_seq {
                        win_right_edge - self.remote_last_seq
                    } else {
                        // This can happen if we've sent some data and later the remote side
                        // has shrunk its window so that data is no longer inside the window.
                        // This should be very rare and is strongly discouraged by the RFCs,
                        // but it does happen in practice.
                        // http://www.tcpipguide.com/free/t_TCPWindowManagementIssues.htm
                        0
                    };

                    // To send a zero-window-probe, force the window limit to at least 1 byte.
                    if win_limit == 0 && self.timer.should_zero_window_probe(cx.now) {
                        win_limit = 1;
                        is_zero_window_probe = true;
                    }

                    // Maximum size we're allowed to send. This can be limited by 4 factors:
                    // 1. remote window
                    // 2. congestion window
                    // 3. MSS the remote is willing to accept, probably determined by their MTU
                    // 4. MSS we can send, determined by our MTU.
                    //
                    // (A link that takes super-segments gets whole frames past this one's
                    // MSS below, within the same windows.)
                    let device_limit = effective_mss;
                    // What the congestion window allows, for this segment and a run after it
                    // (taking frames out of the queue below does not change it).
                    let cwnd = self.cwnd_remaining();

                    let size = if is_zero_window_probe {
                        // Zero-window probes are exempt from the congestion window: they
                        // are sent precisely when normal transmission is impossible, and
                        // an empty segment elicits no reply, so capping the probe to a
                        // zero length would stall the connection if a window update from
                        // the remote got lost.
                        win_limit.min(device_limit)
                    } else {
                        win_limit.min(device_limit).min(cwnd)
                    };

                    let offset = self.flight_size();
                    match self.tx_buffer.locate(offset, size) {
                        Segment::Copy { index, off, len } => {
                            repr.payload = self.tx_buffer.bytes(index, off, len);
                        }
                        Segment::Frame { index, len } => {
                            zc = self.tx_buffer.take(index);
                            zc_len = if zc.is_some() { len } else { 0 };
                            // A link that takes super-segments gets the whole frames after
                            // this one too, as far as the windows allow (`output.rs`).
                            if let (Some(gso), true) = (cx.gso.as_mut(), zc_len > 0) {
                                let limit = win_limit.min(cwnd).min(gso.max_payload);
                                // Nagle holds a short last segment while data is in
                                // flight (as `seq_to_transmit` does), unless a FIN follows.
                                let short_ok = !self.nagle
                                    || matches!(
                                        self.state,
                                        State::FinWait1 | State::LastAck | State::Closing
                                    );
                                if !is_zero_window_probe && limit > zc_len {
                                    zc_len += self.tx_buffer.take_run(
                                        index,
                                        effective_mss,
                                        limit - zc_len,
                                        short_ok,
                                        gso.tail,
                                    );
                                    wire_segments = wire_segments_of(zc_len, effective_mss);
                                }
                            }
                        }
                        // The device still has the frame: no payload this time (egress waits
                        // for it, see `tx_blocked`).
                        Segment::Busy => {}
                    }

                    offset
                };

                // If we've sent everything we had in the buffer, follow it with the PSH or FIN
                // flags, depending on whether the transmit half of the connection is open.
                if offset + repr.payload.len() + zc_len == self.tx_buffer.len() {
                    match self.state {
                        State::FinWait1 | State::LastAck | State::Closing => {
                            repr.control = TcpControl::Fin
                        }
                        State::Established | State::CloseWait
                            if !repr.payload.is_empty() || zc_len > 0 =>
                        {
                            repr.control = TcpControl::Psh
                        }
                        _ => (),
                    }
                }
            }

            // In FIN-WAIT-2 and TIME-WAIT states we may only transmit ACKs for incoming data or FIN
            State::FinWait2 | State::TimeWait => {}
        }

        // There might be more than one reason to send a packet. E.g. the keep-alive timer
        // has expired, and we also have data in transmit buffer. Since any packet that occupies
        // sequence space will elicit an ACK, we only need to send an explicit packet if we
        // couldn't fill the sequence space with anything.
        let is_keep_alive;
        if self.timer.should_keep_alive(cx.now) && repr.is_empty() && zc_len == 0 {
            repr.seq_number = repr.seq_number - 1;
            repr.payload = b"\x00"; // RFC 1122 says we should do this
            is_keep_alive = true;
        } else {
            is_keep_alive = false;
        }

        if repr.control == TcpControl::Syn {
            // Fill the MSS option. See RFC 6691 for an explanation of this calculation.
            let max_segment_size = cx.ip_mtu - ip_repr.header_len() - TCP_HEADER_LEN;
            repr.max_seg_size = Some(max_segment_size as u16);
        }

        // Actually send the packet. If this succeeds, it means the packet is in
        // the device buffer, and its transmission is imminent. If not, we might have
        // a number of problems, e.g. we need neighbor discovery.
        //
        // Bailing out if the packet isn't placed in the device buffer allows us
        // to not waste time waiting for the retransmit timer on packets that we know
        // for sure will not be successfully transmitted.
        ip_repr.set_payload_len(repr.buffer_len() + zc_len);
        emit(cx, (&ip_repr, &repr), zc)?;

        // Sequence space the segment occupies (a payload sent in place is not in `repr`).
        let segment_len = repr.segment_len() + zc_len;
        let end = repr.seq_number + segment_len;
        // Sequence space sent before, other than a probe or a keep-alive: a retransmission.
        let resent = is_retransmission
            || (!is_zero_window_probe
                && !is_keep_alive
                && self.sent_max.is_some_and(|max| repr.seq_number < max));
        let payload_len = if is_keep_alive {
            0
        } else {
            repr.payload.len() + zc_len
        };
        self.counters
            .on_send(repr.seq_number, payload_len, self.sent_max, resent);
        self.counters.segments_sent += wire_segments as u64 - 1;
        if self.sent_max.is_none_or(|max| end > max) {
            self.sent_max = Some(end);
        }

        // We've sent something, whether useful data or a keep-alive packet, so rewind
        // the keep-alive timer.
        self.timer.rewind_keep_alive(cx.now, self.keep_alive);

        // Reset delayed-ack timer
        self.ack_delay_timer = AckDelayTimer::Idle;

        if segment_len > 0 && resent {
            self.recovery
                .retransmitted_segments(end, u32::try_from(wire_segments).unwrap_or(u32::MAX));
            self.rtte.on_retransmit();
        }
        if segment_len > 0 && !is_zero_window_probe && !is_keep_alive {
            self.recovery.on_sent(segment_len);
        }
        if segment_len > 0 && self.remote_has_sack && !is_zero_window_probe && !is_keep_alive {
            self.rack.on_send(repr.seq_number, end, cx.now);
            if is_retransmission {
                // A due probe goes first (`retransmission_due`): this was it.
                self.rack.probe_sent();
            }
        }

        // Leave the rest of the state intact if sending a zero-window probe.
        if is_zero_window_probe {
            self.retries.probe_sent(self.counters.segments_received);
            self.timer.rewind_zero_window_probe(cx.now);
            return Ok(());
        }

        // Leave the rest of the state intact if sending a keep-alive packet, since those
        // carry a fake segment.
        if is_keep_alive {
            return Ok(());
        }

        // We've sent a packet successfully, so we can update the internal state now.
        // Use max() so a fast-retransmit segment (whose seq_number is local_seq_no, well
        // behind the current frontier) doesn't rewind the tracked "highest sent" sequence.
        let seq_end = repr.seq_number + segment_len;
        self.remote_last_seq = self.remote_last_seq.max(seq_end);
        // A SYN's window is not scaled (RFC 7323 section 2.2).
        let shift = if repr.control == TcpControl::Syn {
            0
        } else {
            self.remote_win_shift
        };
        let (ack_number, window_len) = (repr.ack_number, repr.window_len);
        self.note_advertised(ack_number, window_len, shift);

        if segment_len > 0 {
            self.rtte.on_send(cx.now, seq_end);
            self.congestion_controller
                .inner_mut()
                .post_transmit(cx.now, segment_len);
        }

        if segment_len > 0 && !self.timer.is_retransmit() {
            // RFC 6298 (5.1) Every time a packet containing data is sent (including a
            // retransmission), if the timer is not running, start it running
            // so that it will expire after RTO seconds.
            let rto = self.rtte.retransmission_timeout();
            self.timer.set_for_retransmit(cx.now, rto);
        }

        // Data in flight: the loss probe goes if no ACK comes for two round trips.
        if segment_len > 0 {
            self.arm_probe(cx.now);
        }

        if self.state == State::Closed {
            // When aborting a connection, forget about it after sending a single RST packet.
            self.set_tuple(None);
            // Wake tx now so that async users can wait for the RST to be sent
            self.tx_waker.wake();
        }

        Ok(())
    }

    /// When [`dispatch_polled`](Self::dispatch_polled) next has something to do: now, at a timer's
    /// deadline, or only after a segment arrives or the application acts.
    pub(crate) fn poll_at(&self, cx: &mut TcpContext<'_>) -> PollAt {
        // The logic here mirrors the beginning of dispatch() closely.
        if self.tuple.is_none() {
            // No one to talk to, nothing to transmit.
            return PollAt::Ingress;
        }
        // Socket stopped being quiet recently, we need to acquire a timestamp.
        let now = self.remote_last_ts.is_none()
            // Socket was aborted, we have an RST packet to transmit.
            || self.state == State::Closed
            // We have a data or flag packet to transmit (the usual answer, that nothing is
            // left, without the call).
            || (!(self.all_sent() && self.retransmission_due().is_none())
                && self.seq_to_transmit(cx))
            // The receive window has been raised significantly.
            || self.window_to_update();
        if now {
            return PollAt::Now;
        }
        self.timers_at()
    }

    /// [`poll_at`](Self::poll_at)'s answer when nothing is to be sent now but what the timers
    /// and a delayed ACK say: the earliest of them.
    fn timers_at(&self) -> PollAt {
        // The earliest of the timers, without building the candidates first: this runs after
        // every segment in and out.
        let mut at: Option<Instant> = None;
        match self.timer.poll_at() {
            PollAt::Now => return PollAt::Now,
            PollAt::Time(t) => at = Some(t),
            PollAt::Ingress => {}
        }
        if self.ack_to_transmit() {
            match self.ack_delay_timer {
                AckDelayTimer::Idle | AckDelayTimer::Immediate => return PollAt::Now,
                AckDelayTimer::Waiting(t) => at = Some(earlier(at, t)),
            }
        }
        // Transmitting or retransmitting data: the moment the connection's timeout expires.
        if let (Some(remote_last_ts), Some(timeout)) = (self.remote_last_ts, self.timeout) {
            at = Some(earlier(at, remote_last_ts + timeout));
        }
        // RACK's reordering and probe timers.
        if let Some(t) = self.rack.poll_at() {
            at = Some(earlier(at, t));
        }
        // A lowered path MTU's age (`dispatch` forgets it then).
        if let Some(t) = self.path_mtu.deadline() {
            at = Some(earlier(at, t));
        }
        at.map_or(PollAt::Ingress, PollAt::Time)
    }
}

/// Segments on the wire for a run of `len` payload bytes cut at `mss`: one without a
/// division for a run that fits one segment (every request/response segment).
#[inline(always)]
fn wire_segments_of(len: usize, mss: usize) -> usize {
    if len <= mss {
        1
    } else {
        len.div_ceil(mss.max(1))
    }
}

/// The earlier of a deadline so far (`None`: none yet) and `t`.
#[inline]
fn earlier(at: Option<Instant>, t: Instant) -> Instant {
    match at {
        Some(a) if a < t => a,
        _ => t,
    }
}

/// Formatted text into the send buffer (all of it, or an error).
impl fmt::Write for Tcb<'_> {
    fn write_str(&mut self, slice: &str) -> fmt::Result {
        let slice = slice.as_bytes();
        if self.send_slice(slice) == Ok(slice.len()) {
            Ok(())
        } else {
            Err(fmt::Error)
        }
    }
}

#[cfg(test)]
#[path = "tests/mod.rs"]
mod tests;

#[cfg(any(test, feature = "fuzzing"))]
#[path = "twin.rs"]
pub(crate) mod twin;

/// Where a connection's TSval comes from (TCP timestamps, RFC 7323).
#[derive(Debug, Clone, Copy)]
enum TsvalSource {
    /// The stack's clock in milliseconds plus `offset`, a keyed hash of the connection's
    /// four-tuple (RFC 7323 section 7.1: the peer learns nothing of our clock or of other
    /// connections' offsets; a four-tuple used again continues where it left off).
    Clock {
        /// Added to the clock's milliseconds.
        offset: u32,
    },
    /// A fixed function (smoltcp's unit tests).
    #[cfg(test)]
    Fn(fn() -> u32),
}

impl TsvalSource {
    /// The TSval to send at `now`.
    fn tsval(self, now: Instant) -> u32 {
        match self {
            TsvalSource::Clock { offset } => (now.total_millis() as u32).wrapping_add(offset),
            #[cfg(test)]
            TsvalSource::Fn(f) => f(),
        }
    }

    /// The time in milliseconds since a TSval of ours that the remote echoed, if it is one
    /// (an RTT sample).
    fn elapsed_ms(self, now: Instant, echoed: u32) -> Option<u32> {
        match self {
            TsvalSource::Clock { .. } => {
                let elapsed = self.tsval(now).wrapping_sub(echoed);
                // An echo from the future, or older than a minute: not a sample.
                (elapsed <= 60_000).then_some(elapsed)
            }
            #[cfg(test)]
            TsvalSource::Fn(_) => None,
        }
    }
}
