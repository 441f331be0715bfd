//! zcnet's own TCP: the connection state machine ([`Tcb`](socket::Tcb)), its timers, RTT
//! estimator, congestion control and buffers.
//!
//! Derived from smoltcp 0.14.0 (`src/socket/tcp.rs` and `src/socket/tcp/congestion/`,
//! <https://github.com/smoltcp-rs/smoltcp>, 0BSD licensed), kept behaviour-for-behaviour: listen,
//! connect, close, abort, the RFC 793 state machine with RFC 9293 / RFC 5961 acceptability
//! checks, retransmission (RFC 6298 RTT estimator, exponential backoff, fast retransmit after
//! three duplicate ACKs, and recovery, see below), Nagle, delayed ACK, keep-alive, timeouts, window scaling, SACK-permitted
//! and the SACK block of our ACKs, TCP timestamps, zero-window probes, and congestion control
//! (none, Reno, CUBIC). smoltcp's unit tests come along (`tests/`), run once over IPv4 and
//! once over IPv6.
//!
//! The stack drives a [`Tcb`](socket::Tcb) the way smoltcp's interface drives its socket: for
//! an incoming segment, `accepts` then `process` (which may return a segment to send back); for
//! outgoing ones, `dispatch_polled` while `poll_at` says so (`transport/tcp/input.rs`, `output.rs`). Each call takes a
//! [`TcpContext`](context::TcpContext) with the time, the IP MTU, the interface's addresses and
//! the stack's keys. The connections live in the stack's table (`transport/tcp/table.rs`); the
//! application reaches them through `TcpSocket` (`socket/tcp.rs`).
//!
//! Parts of smoltcp's socket API the stack does not offer (ACK delay, hop limit, `peek`,
//! SYN-ACK pausing) stay for the unit tests, which are smoltcp's and exercise them
//! (`#[cfg(test)]`).
//!
//! # Differences from smoltcp
//!
//! * Names: the socket is `Tcb`, the transmission control block, and this module `tcb`
//!   (`TcpSocket`, in `socket/tcp.rs`, is the application's type).
//! * The interface context is `TcpContext` (smoltcp's `iface::Context` is crate-private):
//!   `now`, `ip_mtu`, the addresses (`LocalAddrs`, implemented for smoltcp's `Interface`, so
//!   source selection and the address check are smoltcp's) and `TcpKeys`, the keyed hash of
//!   the stack's secret that gives initial sequence numbers per RFC 6528 (a 4 µs clock plus
//!   the hash of the four-tuple; smoltcp draws them from its non-cryptographic generator) and
//!   timestamp offsets. `PollAt` and the waker registration are copies of smoltcp's
//!   crate-private types.
//! * Buffers: the state machine reaches its data only through `RecvBuffer` and `SendBuffer`
//!   ([`recv`], [`send`]). The send buffer is a queue of pool frames, one segment's payload
//!   each; the receive buffer is a queue of the received frames themselves: `process` takes
//!   the segment's frame (trimmed to its payload) and the buffer keeps it, in order or out of
//!   order, within a budget of pool slots. The receive window is the smaller of the free bytes
//!   and one full segment's payload (the MSS less the timestamp option) per free slot, and
//!   its right edge never moves back, except to zero when the budget is spent (segments
//!   shorter than a full one can spend it before the edge); a segment the budget cannot hold
//!   then is dropped unacknowledged, but the acknowledgement of a segment that starts within
//!   the furthest edge ever advertised is still taken (RFC 9293 3.10.7.4). A sender whose
//!   data lies past a window that shrank to zero probes the window instead of retransmitting
//!   on its timeout.
//! * `accepts` takes no context (smoltcp's ignored it); `dispatch`'s `emit` gets no
//!   `PacketMeta` (smoltcp's carried only packet ids and segmentation-offload sizes).
//! * No segmentation offload (smoltcp's `segmentation-offload` feature); its test is dropped.
//! * smoltcp's optional features are always on: wakers (`async`), `pause_synack`
//!   (`socket-tcp-pause-synack`), Reno and CUBIC (`socket-tcp-reno`, `socket-tcp-cubic`). The
//!   default algorithm is no congestion control, what smoltcp picks without the latter two.
//! * CUBIC's `powi(3)` and `mul_add` are not in `core`: `x * x * x` (the same value) and an
//!   unfused multiply-add in the first estimate of its cube root (refined by a Newton step).
//! * Loss recovery ([`recovery`], [`sack`]): smoltcp ignores the SACK blocks it receives and,
//!   on the third duplicate ACK, sends the first unacknowledged segment again, nothing more
//!   until the timeout. zcnet keeps a SACK scoreboard and recovers as RFC 6675 says (every
//!   hole counted lost is sent again, lowest first, within the congestion window counted as
//!   `pipe`), or as NewReno (RFC 6582) when the peer does not SACK; recovery may start from
//!   the scoreboard before three duplicate ACKs; a timeout's go-back skips what the peer
//!   SACKed; the retransmission timer keeps running after a fast retransmit. Our ACKs carry up
//!   to three SACK blocks (smoltcp's, one). Under Reno or CUBIC, what recovery sends follows
//!   proportional rate reduction (RFC 6937) instead of the inflated window of RFC 5681's fast
//!   recovery.
//! * RFC 5961 (blind in-window attacks) in full: a reset in any state but LISTEN and SYN-SENT
//!   resets only at exactly RCV.NXT, another in the window gets a challenge ACK (smoltcp
//!   resets on any in-window one); a SYN on a synchronized connection gets a challenge ACK
//!   (smoltcp drops it, or answers it only when out of the window); an acknowledgement is
//!   acceptable up to SND.MAX, what was sent (smoltcp's bound counts data queued but never
//!   sent), and down to SND.UNA less the largest window the peer advertised, below which it
//!   gets a challenge ACK; an old duplicate acknowledgement between the two no longer drops
//!   its segment: the data and FIN are taken, the acknowledgement and window ignored.
//!   Challenge ACKs are limited per connection (one a second, smoltcp's) and per stack (a
//!   keyed random budget of about [`CHALLENGE_ACKS_PER_SECOND`](context::CHALLENGE_ACKS_PER_SECOND)
//!   a second, which `TcpContext` carries into `process`).
//! * A socket's next connection (`listen`, `connect`) starts a fresh congestion controller of
//!   the same algorithm; smoltcp keeps the last connection's window and threshold.
//! * The handshake gives up: a SYN is resent at most [`socket::SYN_RETRIES`] times (the
//!   connection then closes, a timeout for `connect`), a SYN-ACK at most
//!   [`socket::SYNACK_RETRIES`] times (a socket that came from LISTEN listens again), as
//!   Linux's `tcp_syn_retries` / `tcp_synack_retries`; smoltcp resends both until the
//!   socket's timeout, or for ever without one.
//! * Connections give up on a silent peer ([`retries`]): data or a FIN unacknowledged past a
//!   bound of time (Linux's `tcp_retries2` model, 522 s by default, at least RFC 1122's
//!   100 s), or zero-window probes unanswered that many times, close the connection with a
//!   RST and a timeout for the application; smoltcp retransmits and probes for ever unless
//!   the socket has a timeout.
//! * Time-based loss detection and loss probes, RACK-TLP (RFC 8985, [`rack`]), with a peer
//!   that SACKs: a segment is lost once one sent after it was delivered and a round trip has
//!   passed (this finds lost retransmissions and losses too near the tail for three duplicate
//!   ACKs); two round trips without an ACK send a probe. smoltcp has neither.
//! * The retransmission timeout computed from RTT measurements is at least 200 ms (Linux's
//!   floor), settable per socket; smoltcp's, RFC 6298's, is 1 s. The timeout before the first
//!   measurement stays 1 s.
//! * TCP timestamps (RFC 7323) are on unless the application turns them off, and used when
//!   the peer offers them: TSval is the stack's clock in milliseconds plus an offset keyed by
//!   the connection's four-tuple (smoltcp's is a global `fn() -> u32` the application supplies); every ACK of
//!   new data gives an RTT sample from its TSecr; PAWS drops segments older than TS.Recent;
//!   TS.Recent moves only with segments at the left edge of the window, and an out-of-order
//!   segment's ACK echoes it (smoltcp echoes every segment's TSval).
//! * Statistics ([`stats`]): each connection counts the bytes and segments it sends and
//!   receives, its retransmissions, recovery episodes and timeouts where it does that work,
//!   and its RTT estimator keeps the smallest sample; `TcpSocket::stats` reads them with the
//!   estimate and the windows. They and the RTT estimator start afresh when a connection
//!   starts (`listen`, `connect`), not when one ends (smoltcp resets its estimator in
//!   `reset`), so they still describe a connection after it closed.
//! * A fast path in `process` (Linux's `tcp_rcv_established` conditions): a segment of an
//!   ESTABLISHED connection with flags ACK or ACK|PSH, the next sequence number expected, no
//!   SACK blocks, a timestamp that passes PAWS, an acceptable ACK, its payload inside an open
//!   window and a non-zero peer window, while no loss recovery runs and nothing is SACKed or
//!   queued out of order, is taken in one pass that shares the full processing's steps for
//!   the ACK, the window, TS.Recent, the timers and the data. The full processing is out of
//!   line.
//! * A fast path in `dispatch` (`socket/send_fast.rs`): new data of an ESTABLISHED
//!   connection with no timer, loss recovery, RACK or path MTU event due, whose next
//!   send-queue frame goes whole (with the frames after it, as a super-segment) within the
//!   peer's window, the congestion window and the MSS, Nagle permitting, is sent without the
//!   full preamble and checks; when everything queued went out, it returns the connection's
//!   next deadline with the segment, so egress asks no `poll_at` after it.
//! * `twin.rs` (tests and the `tcp_fast_path` fuzz target) runs two worlds side by side, one
//!   with both fast paths and one without, and requires the same state, segments, answers
//!   and bytes after every operation.
//! * Logging: smoltcp's `net_trace!` / `net_debug!` lines are gone (comments where they
//!   explained something); with the stack's `log` or `defmt` feature a connection's state
//!   changes, resets and timeouts are logged through `event!` (`events.rs`).

pub(crate) mod congestion;
pub(crate) mod context;
pub(crate) mod error;
pub(crate) mod path_mtu;
mod rack;
mod recovery;
pub(crate) mod recv;
pub(crate) mod retries;
mod ring;
mod rtt;
mod sack;
pub(crate) mod send;
pub(crate) mod socket;
pub(crate) mod state;
pub(crate) mod stats;
mod timer;
mod waker;
