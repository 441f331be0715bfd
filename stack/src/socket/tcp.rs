//! TCP: [`TcpSocket`] (connect, or accept one connection), its halves ([`TcpReader`],
//! [`TcpWriter`]), and the [`TcpListener`] with a real backlog.
//!
//! The connections are zcnet's own TCP (the stack's `tcb` module, a port of smoltcp 0.14's
//! state machine), in the stack's connection table; segments go in and out through ingress and
//! egress (`transport/tcp/output.rs`). smoltcp's TCP is not used.
//!
//! # Copies per payload byte
//!
//! **Receiving**: a segment's payload stays in the pool slot the driver received it in. The
//! connection queues the frame itself (trimmed to the payload, headers skipped), in order or,
//! until the hole before it fills, out of order. The application then
//!
//! * takes it: [`recv_segment`](TcpSocket::recv_segment) returns a [`TcpSegment`] owning the
//!   slot, **no copy**;
//! * reads it in place: `read_with` hands the caller the first segment's bytes, **no copy**;
//! * or copies it out: `read`, **one copy**, frame → the caller's buffer.
//!
//! The one exception: an in-order segment under 256 bytes is copied into the unused tail of
//! the frame queued before it, so that small segments do not each pin a slot
//! ([`CopySite::CopyBreak`]).
//!
//! Each connection holds at most a budget of slots (queued in order, out of order, and the
//! segments the application holds), derived from the receive size of its
//! [`TcpBuffers`] (one slot per KiB, 4 to 4,096): the
//! window it advertises is at most one full segment per free slot, so an application that holds
//! segments closes the window and the peer waits.
//!
//! **Sending**: the connection keeps a queue of pool frames until the peer acknowledges them, and a
//! segment goes out in the queued frame itself, headers written into its headroom. The send
//! side's byte bound is the send size of its [`TcpBuffers`] and its frame budget one frame per
//! KiB of it (2 to 4,096; to 64 without the `alloc` feature), so what one connection keeps in
//! flight follows its send size.
//!
//! * [`TcpSocket::tx_frame`] + [`TcpSocket::send_frame`]: the caller writes the payload into the
//!   frame the driver will transmit: **no copy**.
//! * `write_with` hands the caller the free room of the tail frame: no copy either.
//! * `write` copies once, the caller's buffer → the tail frame.
//! * A segment that is only a prefix of a frame's data (a peer window smaller than a segment, a
//!   zero-window probe) is copied into a fresh frame.
//!
//! Every copy goes through the copy ledger (`zcnet_buffer::ledger`) where it is made:
//! [`CopySite::SocketToApp`] / [`CopySite::AppToSocket`] for the copy `read` / `write` make,
//! [`CopySite::CopyBreak`] for small segments merged, [`CopySite::Emit`] for a prefix copied the
//! first time its bytes are sent and [`CopySite::Retransmit`] for each time after.
//!
//! Every future here is cancel-safe: bytes move only in the poll that returns `Ready`, so a
//! dropped `read` or `write` future loses nothing.
//!
//! # Errors: how a connection ended
//!
//! End of stream is `Ok(0)` from `read`. A connection that ended otherwise gives
//! [`TcpError::ConnectionReset`] (the peer reset it), [`TcpError::TimedOut`] (no answer within
//! [`set_timeout`](TcpSocket::set_timeout), or `connect_timeout`; or the peer stopped
//! answering, see below), [`TcpError::Aborted`] (this side called [`abort`](TcpSocket::abort))
//! or, from `connect`, [`TcpError::ConnectionRefused`].
//!
//! # How long a connection lasts without answers
//!
//! Every connection ends on its own when its peer stops answering, with no timeout set:
//!
//! * `connect`: after [`SYN_RETRIES`] unanswered SYNs (123 s); a listening socket's
//!   handshake after [`SYNACK_RETRIES`] SYN-ACKs (63 s, then it listens again).
//! * Data or a FIN sent and not acknowledged: at the first retransmission timeout at least
//!   [`retransmission_bound`]`(retries)` after the oldest unacknowledged transmission, with
//!   no acknowledgement of new data since; timeouts come at most 60 s apart, so within that
//!   bound plus 60 s. Default ([`TCP_RETRIES`], Linux's `tcp_retries2`): 522.2 s; the least
//!   ([`MIN_TCP_RETRIES`]): 102.2 s, RFC 1122's 100 s. Set per socket with
//!   [`TcpSocket::set_retries`].
//! * Data waiting for a zero window: after `retries` zero-window probes in a row without any
//!   segment from the peer (the probes back off from the RTO to 60 s apart). A peer that
//!   answers every probe keeps its window closed as long as it likes, as on Linux: bound that
//!   with a deadline on writes (`zcnet_executor::time::timeout`), as the example servers do.
//! * Idle: never, unless [`set_keep_alive`](TcpSocket::set_keep_alive) and
//!   [`set_timeout`](TcpSocket::set_timeout) are both set (keep-alive probes, and the timeout
//!   ends the connection when none is answered).
//!
//! Giving up sends the peer a RST, ends the connection with [`TcpError::TimedOut`] for
//! `read`, `write` and `flush`, and counts in
//! [`StackStats::tcp_timed_out`](crate::StackStats::tcp_timed_out).

use core::future::poll_fn;
use core::marker::PhantomData;
use core::task::{Context, Poll};

use smoltcp::time::Duration as SmolDuration;
use zcnet_buffer::ledger::{self, CopySite};
use zcnet_buffer::RxFrame;

use crate::config::{IpEndpoint, IpListenEndpoint};
use crate::stack::{Stack, TcpCx};
use crate::transport::tcp::table::{CloseCause, SegmentRelease, SegmentReleases, TcpHandle};
use crate::transport::tcp::tcb::context::TcpContext;
use crate::transport::tcp::tcb::error::{ConnectError, ListenError, RecvError};
use crate::transport::tcp::tcb::recv::{slot_budget, RecvBuffer};
use crate::transport::tcp::tcb::send::{SendBuffer, MAX_FRAMES};
use crate::transport::tcp::tcb::socket::Tcb;
use crate::StackError;
use zcnet_buffer::TxFrame;

pub use super::tcp_listener::{TcpListener, HANDSHAKE_TIMEOUT, MAX_BACKLOG};
pub use crate::transport::tcp::icmp_error::{MIN_PATH_MTU_V4, MIN_PATH_MTU_V6};
pub use crate::transport::tcp::tcb::congestion::CongestionControl;
pub use crate::transport::tcp::tcb::context::CHALLENGE_ACKS_PER_SECOND;
pub use crate::transport::tcp::tcb::path_mtu::PATH_MTU_AGE;
pub use crate::transport::tcp::tcb::retries::{retransmission_bound, MIN_TCP_RETRIES, TCP_RETRIES};
pub use crate::transport::tcp::tcb::socket::{SYNACK_RETRIES, SYN_RETRIES};
/// The state of a TCP connection (RFC 793).
pub use crate::transport::tcp::tcb::state::State as TcpState;
pub use crate::transport::tcp::tcb::stats::{TcpCounters, TcpStats};

/// Why a TCP operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpError {
    /// The peer reset the connection (RST), or it closed without an orderly end.
    ConnectionReset,
    /// The peer refused the connection (RST in answer to our SYN).
    ConnectionRefused,
    /// The peer did not answer within the socket's timeout (or `connect_timeout`'s), or
    /// stopped answering: SYNs, retransmissions or zero-window probes unanswered past their
    /// limits (see the [module docs](self), "How long a connection lasts without answers").
    TimedOut,
    /// This side aborted the connection ([`TcpSocket::abort`]).
    Aborted,
    /// The stack was shut down ([`Stack::shutdown`](crate::Stack::shutdown)): the connection
    /// is closed (no segment was sent) and no new one opens.
    ShutDown,
    /// The operation does not fit the socket's state: connecting a socket already in use,
    /// reading or writing one that never connected, writing after `shutdown`.
    InvalidState,
    /// The remote or local address cannot be used (no route, port 0, unspecified address), or
    /// every ephemeral port is taken.
    Unaddressable,
}

impl core::fmt::Display for TcpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            TcpError::ConnectionReset => "connection reset by peer",
            TcpError::ConnectionRefused => "connection refused",
            TcpError::TimedOut => "timed out",
            TcpError::Aborted => "connection aborted",
            TcpError::ShutDown => "stack shut down",
            TcpError::InvalidState => "invalid socket state",
            TcpError::Unaddressable => "unaddressable endpoint",
        })
    }
}

impl core::error::Error for TcpError {}

/// How much one TCP connection may hold, fixed when its socket opens: up to `rx` received
/// bytes not yet read (the largest window it offers) and up to `tx` bytes queued to send
/// (unacknowledged ones included).
///
/// The bytes live in the stack pool's frames, not in memory of the socket's own: received
/// segments stay in the slots the driver received them in, and queued data in the frames the
/// stack will transmit. So each direction has a *frame budget*, one frame per KiB
/// ([`rx_frames`](Self::rx_frames), [`tx_frames`](Self::tx_frames)), and opening the socket
/// reserves both out of the pool's TCP share
/// ([`Config::tcp_pool_slots`](crate::Config::tcp_pool_slots)): a pool too small for one
/// more socket is an error at open ([`StackError::PoolBudget`]), not a stall later.
///
/// The receive window offered is the smaller of the free bytes and one full segment per free
/// frame of the budget (1,448 bytes on Ethernet with timestamps), so it follows `rx`: one frame
/// per KiB leaves room for segments a little short of full. The receive budget's ceiling is
/// 4,096 frames with the `alloc` feature (a 4 MiB window), 64 without (92,672 bytes: an `rx`
/// above about 90 KiB then bounds the unread bytes but does not widen the window).
///
/// What a connection costs on its receive side, by `rx`:
///
/// | `rx` | frames of budget (pool slots reserved) | largest window | the queue of received frames |
/// |---|---|---|---|
/// | 4 KiB | 4 | 4 KiB | 64 places inside the connection (2 KiB), nothing allocated |
/// | 64 KiB | 64 | 64 KiB | the same |
/// | 256 KiB | 256 | 256 KiB | 8 KiB allocated when the socket opens (`alloc`) |
/// | 1 MiB | 1,024 | 1 MiB | 32 KiB allocated |
/// | 4 MiB and more | 4,096 | 4 MiB | 128 KiB allocated |
///
/// That is 32 bytes per frame of budget past 64, allocated once (the 2 KiB inside the
/// connection stay unused then); the received bytes themselves stay in the pool slots they
/// arrived in, at most one slot per frame of the budget. A segment received over several
/// slots (a large receive, see `Capabilities::rx_chains`) takes one frame of budget per slot.
///
/// The send side works the same way with `tx`: queued data lives in the pool frames egress
/// sends (one segment's payload per frame at most), so the frame budget bounds what one
/// connection can have in flight, and the queue of frames grows with it:
///
/// | `tx` | frames of budget (pool slots reserved) | most bytes in flight (MSS 1,448) | the queue of frames to send |
/// |---|---|---|---|
/// | 4 KiB | 4 | 4 KiB | 64 places inside the connection (1.5 KiB), nothing allocated |
/// | 64 KiB | 64 | 64 KiB | the same |
/// | 256 KiB | 256 | 256 KiB | 6 KiB allocated when the socket opens (`alloc`) |
/// | 1 MiB | 1,024 | 1 MiB | 24 KiB allocated |
/// | 4 MiB and more | 4,096 | 4 MiB | 96 KiB allocated |
///
/// That is 24 bytes per frame of budget past 64. Without the `alloc` feature the send budget
/// stops at 64 frames too: at most 64 segments (92,672 bytes) are queued at once, whatever
/// `tx` says.
///
/// ```
/// use zcnet_stack::tcp::TcpBuffers;
/// let b = TcpBuffers::with_capacity(16 * 1024, 4 * 1024);
/// assert_eq!((b.rx_frames(), b.tx_frames()), (16, 4));
/// assert_eq!(b.frames(), 20); // what the socket reserves of the pool
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpBuffers {
    pub(crate) rx: usize,
    pub(crate) tx: usize,
}

impl TcpBuffers {
    /// A connection holding up to `rx` received bytes and `tx` bytes to send.
    pub const fn with_capacity(rx: usize, tx: usize) -> Self {
        Self { rx, tx }
    }

    /// Received bytes the connection holds at most.
    pub const fn rx_capacity(&self) -> usize {
        self.rx
    }

    /// Bytes the connection queues to send at most.
    pub const fn tx_capacity(&self) -> usize {
        self.tx
    }

    /// Frames the receive side may hold: in order, out of order, and segments the application
    /// took with `recv_segment` and still holds (one per KiB, 4 to 4,096; to 64 without the
    /// `alloc` feature).
    pub fn rx_frames(&self) -> usize {
        slot_budget(self.rx)
    }

    /// Frames the send queue may hold, sent or not (one per KiB, 2 to 4,096; to 64 without the
    /// `alloc` feature).
    pub fn tx_frames(&self) -> usize {
        frame_budget(self.tx)
    }

    /// Pool slots the socket reserves when it opens: both budgets.
    pub fn frames(&self) -> usize {
        self.rx_frames() + self.tx_frames()
    }
}

/// Buffer bytes per frame of a budget: a connection may hold `ceil(capacity / 1024)` frames
/// each way (at least 2, at most [`MAX_FRAMES`]). A full-sized segment carries more than that
/// (1460 bytes on Ethernet), so the byte capacity is the bound that normally binds; the frame
/// budget binds when segments are small, and it is what the pool reserves.
const BYTES_PER_FRAME_BUDGET: usize = 1024;

/// The frame budget for `bytes` of buffer (see [`BYTES_PER_FRAME_BUDGET`]).
fn frame_budget(bytes: usize) -> usize {
    bytes.div_ceil(BYTES_PER_FRAME_BUDGET).clamp(2, MAX_FRAMES)
}

/// Headroom of a TCP frame: the driver's, Ethernet (on an Ethernet link), IPv6 (the larger IP
/// header) and TCP with the most options (60).
fn tcp_headroom(st: &crate::stack::State) -> usize {
    st.link.tx_headroom + st.link.header_len() + smoltcp::wire::IPV6_HEADER_LEN + 60
}

/// Adds a closed TCP connection with `buffers` to the stack. The send side is a queue of the
/// stack pool's frames bounded by `buffers.tx`'s capacity in bytes (its memory goes unused)
/// and by a frame budget derived from it.
pub(crate) fn add_socket(stack: Stack, buffers: TcpBuffers) -> Result<TcpHandle, StackError> {
    let pool = stack.pool();
    stack.with(|st| add_tcb(st, pool, buffers))
}

/// [`add_socket`] with the stack's state borrowed and its pool given (ingress makes the
/// connections of SYN cookies so).
pub(crate) fn add_tcb(
    st: &mut crate::stack::State,
    pool: &'static zcnet_buffer::FramePool,
    buffers: TcpBuffers,
) -> Result<TcpHandle, StackError> {
    let tx_frames = frame_budget(buffers.tx);
    let reserve = buffers.frames();
    let headroom = tcp_headroom(st);
    // Built where it is kept: a TCB is several KiB, not worth a move.
    st.add_tcb(reserve, || {
        let rx = RecvBuffer::new(buffers.rx);
        let tx = SendBuffer::new(pool, buffers.tx, tx_frames, headroom);
        let mut tcb = Tcb::new(rx, tx);
        tcb.set_timestamps(true);
        tcb
    })
}

/// The stack and a socket's handle: what a socket and both its halves share. Every operation
/// borrows the stack's state for one bounded step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Conn {
    pub(crate) stack: Stack,
    pub(crate) handle: TcpHandle,
}

impl Conn {
    pub(crate) fn with<R>(self, f: impl FnOnce(&mut Tcb<'static>, &mut TcpCx<'_>) -> R) -> R {
        self.stack.with(|st| st.with_tcb(self.handle, f))
    }

    /// The error for an operation that cannot proceed on a connection that is not open.
    fn closed_error(self, st: &TcpCx<'_>) -> TcpError {
        let meta = &st.meta;
        match meta.cause() {
            Some(CloseCause::Aborted) => TcpError::Aborted,
            Some(CloseCause::TimedOut) => TcpError::TimedOut,
            Some(CloseCause::ShutDown) => TcpError::ShutDown,
            None if meta.connected() && !meta.write_shut() => TcpError::ConnectionReset,
            None => TcpError::InvalidState,
        }
    }

    /// Polls for received data: once there is some, `take` (called once, with the state borrowed,
    /// with the connection and its place's generation) consumes it. `Ok(None)` is end of
    /// stream.
    fn poll_recv<R>(
        self,
        cx: &mut Context<'_>,
        take: &mut Option<impl FnOnce(&mut Tcb<'static>, u32) -> Result<R, RecvError>>,
    ) -> Poll<Result<Option<R>, TcpError>> {
        self.stack.with(|st| {
            let generation = st.tcp.generation(self.handle);
            st.with_tcb(self.handle, |s, st| {
                if s.can_recv() {
                    let take = take.take().expect("read polled after completion");
                    let r = take(s, generation)
                        .map(Some)
                        .map_err(|_| TcpError::InvalidState);
                    // A read that grew the window enough to be worth a window update (the
                    // window doubled since last advertised, see `Tcb::window_update_due`) tells
                    // egress to send it; smaller reads are left to the next ACK.
                    if s.window_update_due() {
                        st.signal_egress();
                    }
                    return Poll::Ready(r);
                }
                if s.may_recv() {
                    s.register_recv_waker(cx.waker(), st.local);
                    return Poll::Pending;
                }
                match s.recv(|_| (0, ())) {
                    Err(RecvError::Finished) => Poll::Ready(Ok(None)),
                    _ if matches!(s.state(), TcpState::SynSent | TcpState::SynReceived) => {
                        s.register_recv_waker(cx.waker(), st.local);
                        Poll::Pending
                    }
                    _ => Poll::Ready(Err(self.closed_error(st))),
                }
            })
        })
    }

    async fn read(self, buf: &mut [u8]) -> Result<usize, TcpError> {
        // Copies across as many queued segments as `buf` takes (ledger: SocketToApp).
        let mut take = Some(|s: &mut Tcb<'static>, _| s.recv_slice(buf));
        let r = poll_fn(|cx| self.poll_recv(cx, &mut take)).await?;
        Ok(r.unwrap_or(0))
    }

    async fn read_with<R>(
        self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<Option<R>, TcpError> {
        let mut take = Some(|s: &mut Tcb<'static>, _| s.recv(f));
        poll_fn(|cx| self.poll_recv(cx, &mut take)).await
    }

    fn poll_recv_segment(self, cx: &mut Context<'_>) -> Poll<Result<Option<TcpSegment>, TcpError>> {
        let (release, signal) = self
            .stack
            .with(|st| (st.tcp.release_of(self.handle), st.tcp.release_signal));
        let mut take = Some(|s: &mut Tcb<'static>, generation| {
            s.recv_segment().map(|frame| {
                frame.map(|mut frame| {
                    frame.lend_to_app();
                    TcpSegment {
                        frame,
                        release,
                        signal,
                        generation,
                    }
                })
            })
        });
        match self.poll_recv(cx, &mut take) {
            // `can_recv` held: a segment was queued.
            Poll::Ready(Ok(Some(None))) => Poll::Ready(Err(TcpError::InvalidState)),
            Poll::Ready(r) => Poll::Ready(r.map(Option::flatten)),
            Poll::Pending => Poll::Pending,
        }
    }

    async fn write(self, buf: &[u8]) -> Result<usize, TcpError> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.write_with(|space| {
            let n = ledger::copy(CopySite::AppToSocket, space, buf);
            (n, n)
        })
        .await
    }

    async fn write_all(self, mut buf: &[u8]) -> Result<(), TcpError> {
        while !buf.is_empty() {
            let n = self.write(buf).await?;
            buf = &buf[n..];
        }
        Ok(())
    }

    async fn write_with<R>(self, f: impl FnOnce(&mut [u8]) -> (usize, R)) -> Result<R, TcpError> {
        let mut f = Some(f);
        poll_fn(|cx| {
            self.with(|s, st| {
                if s.can_send() {
                    let write = f.take().expect("write polled after completion");
                    match s.send_waking(st.egress_waker, write) {
                        Ok(r) => {
                            st.signal_egress();
                            return Poll::Ready(Ok(r));
                        }
                        Err(back) => {
                            // The pool has no free slot: egress hears of the next one and
                            // wakes us.
                            f = Some(back);
                            s.note_send_starved();
                            s.register_send_waker(cx.waker(), st.local);
                            return Poll::Pending;
                        }
                    }
                }
                if s.may_send() || matches!(s.state(), TcpState::SynSent | TcpState::SynReceived) {
                    // Buffer full, or still connecting: wait.
                    s.register_send_waker(cx.waker(), st.local);
                    return Poll::Pending;
                }
                if st.meta.write_shut() {
                    return Poll::Ready(Err(TcpError::InvalidState));
                }
                Poll::Ready(Err(self.closed_error(st)))
            })
        })
        .await
    }

    fn poll_tx_frame(self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.with(|s, st| {
            let (pool, headroom, mss) = s.send_frame_geometry();
            let egress = st.egress_waker.unwrap_or(cx.waker());
            match pool.poll_alloc_tx(&mut Context::from_waker(egress)) {
                Poll::Ready(mut f) => {
                    // Headroom for the headers, and exactly one segment's room after it when the
                    // slot is larger. Cannot fail: the frame is empty and the send buffer's
                    // headroom fits a slot.
                    let _ = f.set_headroom(headroom.max(pool.slot_size().saturating_sub(mss)));
                    Poll::Ready(f)
                }
                Poll::Pending => {
                    s.note_send_starved();
                    s.register_send_waker(cx.waker(), st.local);
                    Poll::Pending
                }
            }
        })
    }

    async fn send_frame(self, frame: TxFrame) -> Result<(), TcpError> {
        let mut frame = match frame.retain() {
            Ok(f) => Some(f),
            // A retained frame belongs to a connection already: not the application's.
            Err(_) => return Err(TcpError::InvalidState),
        };
        poll_fn(|cx| {
            self.with(|s, st| {
                if s.may_send() {
                    let f = frame.take().expect("send_frame polled after completion");
                    return match s.send_frame(f) {
                        Ok(Ok(())) => {
                            st.signal_egress();
                            Poll::Ready(Ok(()))
                        }
                        Ok(Err(back)) => {
                            frame = Some(back);
                            s.register_send_waker(cx.waker(), st.local);
                            Poll::Pending
                        }
                        Err(_) => Poll::Ready(Err(TcpError::InvalidState)),
                    };
                }
                if matches!(s.state(), TcpState::SynSent | TcpState::SynReceived) {
                    s.register_send_waker(cx.waker(), st.local);
                    return Poll::Pending;
                }
                if st.meta.write_shut() {
                    return Poll::Ready(Err(TcpError::InvalidState));
                }
                Poll::Ready(Err(self.closed_error(st)))
            })
        })
        .await
    }

    async fn flush(self) -> Result<(), TcpError> {
        poll_fn(|cx| {
            self.with(|s, st| {
                if s.send_queue() == 0 {
                    return Poll::Ready(Ok(()));
                }
                if s.state() == TcpState::Closed {
                    return Poll::Ready(Err(self.closed_error(st)));
                }
                s.register_send_waker(cx.waker(), st.local);
                Poll::Pending
            })
        })
        .await
    }

    fn shutdown(self) {
        self.with(|s, st| {
            s.close();
            st.meta.set_write_shut();
            st.signal_egress();
        })
    }

    fn stats(self) -> TcpStats {
        self.with(|s, _| s.stats())
    }

    pub(crate) fn read_ready(self) -> bool {
        self.with(|s, _| {
            s.can_recv()
                || !(s.may_recv() || matches!(s.state(), TcpState::SynSent | TcpState::SynReceived))
        })
    }

    pub(crate) fn write_ready(self) -> bool {
        self.with(|s, _| {
            s.can_send()
                || !(s.may_send() || matches!(s.state(), TcpState::SynSent | TcpState::SynReceived))
        })
    }
}

/// One TCP connection (or a socket waiting to become one).
///
/// Dropping it closes the connection gracefully in the background (see [`Drop`](#impl-Drop)).
#[derive(Debug)]
pub struct TcpSocket {
    pub(crate) conn: Conn,
}

impl TcpSocket {
    /// A closed socket with these buffers. Errors when the stack has no free socket slot.
    pub fn new(stack: Stack, buffers: TcpBuffers) -> Result<Self, StackError> {
        Ok(Self {
            conn: Conn {
                stack,
                handle: add_socket(stack, buffers)?,
            },
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut Tcb<'static>, &mut TcpCx<'_>) -> R) -> R {
        self.conn.with(f)
    }

    /// The connection state.
    pub fn state(&self) -> TcpState {
        self.with(|s, _| s.state())
    }

    /// The local endpoint, once bound.
    pub fn local_endpoint(&self) -> Option<IpEndpoint> {
        self.with(|s, _| s.local_endpoint())
    }

    /// The remote endpoint, once connected.
    pub fn remote_endpoint(&self) -> Option<IpEndpoint> {
        self.with(|s, _| s.remote_endpoint())
    }

    /// The connection's statistics: bytes and segments sent and received, retransmissions,
    /// round-trip time, windows (see [`TcpStats`], which also says when the counters start
    /// from zero). A snapshot, taken with the state borrowed.
    pub fn stats(&self) -> TcpStats {
        self.conn.stats()
    }

    /// Connects to `remote` from an ephemeral port and waits until established.
    ///
    /// Errors: [`TcpError::ConnectionRefused`] when the peer answers with RST,
    /// [`TcpError::TimedOut`] when a timeout set with [`set_timeout`](Self::set_timeout)
    /// passes without an answer, or else when the SYN went unanswered [`SYN_RETRIES`] times
    /// (123 s; [`connect_timeout`](Self::connect_timeout) gives up sooner),
    /// [`TcpError::InvalidState`] when the socket is already in use,
    /// [`TcpError::Unaddressable`] for an unusable address.
    pub async fn connect(&mut self, remote: impl Into<IpEndpoint>) -> Result<(), TcpError> {
        let remote = remote.into();
        let handle = self.conn.handle;
        let now = self.conn.stack.now();
        self.conn.stack.with(|st| {
            if st.shut_down {
                return Err(TcpError::ShutDown);
            }
            let port = st.connect_port(remote).ok_or(TcpError::Unaddressable)?;
            let ip_mtu = st.link.caps.ip_mtu();
            let Some(e) = st.tcp.at_handle(handle) else {
                return Err(TcpError::InvalidState);
            };
            let mut cx = TcpContext::new(now, ip_mtu, &st.iface, e.keys);
            e.tcb.connect(&mut cx, remote, port).map_err(|e| match e {
                ConnectError::InvalidState => TcpError::InvalidState,
                ConnectError::Unaddressable => TcpError::Unaddressable,
            })?;
            st.signal_egress();
            Ok(())
        })?;
        poll_fn(|cx| {
            self.with(|s, st| match s.state() {
                TcpState::SynSent | TcpState::SynReceived => {
                    s.register_send_waker(cx.waker(), st.local);
                    Poll::Pending
                }
                TcpState::Closed => Poll::Ready(Err(match st.meta.cause() {
                    Some(CloseCause::TimedOut) => TcpError::TimedOut,
                    Some(CloseCause::Aborted) => TcpError::Aborted,
                    Some(CloseCause::ShutDown) => TcpError::ShutDown,
                    None => TcpError::ConnectionRefused,
                })),
                _ => {
                    // Established (or already past it: the peer may have sent data and FIN).
                    st.meta.set_connected();
                    Poll::Ready(Ok(()))
                }
            })
        })
        .await
    }

    /// [`connect`](Self::connect) that gives up after `timeout`: the attempt is aborted and
    /// the error is [`TcpError::TimedOut`].
    pub async fn connect_timeout(
        &mut self,
        remote: impl Into<IpEndpoint>,
        timeout: core::time::Duration,
    ) -> Result<(), TcpError> {
        let remote = remote.into();
        // The stack's own executor serves the timer, whatever waker polls this future.
        let exec = self.conn.stack.executor();
        match exec.timeout(timeout, self.connect(remote)).await {
            Ok(r) => r,
            Err(_) => {
                self.with(|s, st| {
                    event!(tcp_connect_timed_out(s));
                    st.meta.set_cause(CloseCause::TimedOut);
                    s.abort();
                    st.signal_egress();
                });
                Err(TcpError::TimedOut)
            }
        }
    }

    /// Listens on `local` and waits until one peer has connected. For many clients at once use
    /// a [`TcpListener`]. A handshake whose SYN-ACK goes unanswered [`SYNACK_RETRIES`] times
    /// over (63 s) is given up, and the socket listens again.
    pub async fn accept(&mut self, local: impl Into<IpListenEndpoint>) -> Result<(), TcpError> {
        let local = local.into();
        let handle = self.conn.handle;
        self.conn.stack.with(|st| {
            if st.shut_down {
                return Err(TcpError::ShutDown);
            }
            // Listening creates no work for egress: the SYN arrives through ingress.
            st.with_tcb(handle, |s, _| {
                s.listen(local).map_err(|e| match e {
                    ListenError::InvalidState => TcpError::InvalidState,
                    ListenError::Unaddressable => TcpError::Unaddressable,
                })
            })
        })?;
        poll_fn(|cx| {
            self.with(|s, st| match s.state() {
                TcpState::Listen | TcpState::SynReceived => {
                    s.register_recv_waker(cx.waker(), st.local);
                    Poll::Pending
                }
                TcpState::Closed => Poll::Ready(Err(self.conn.closed_error(st))),
                _ => {
                    st.meta.set_connected();
                    Poll::Ready(Ok(()))
                }
            })
        })
        .await
    }

    /// Reads into `buf`, from as many received segments as it takes; `Ok(0)` means the peer
    /// closed its side (end of stream). The one copy of each byte: segment frame → `buf`
    /// ([`CopySite::SocketToApp`]); [`read_with`](Self::read_with) and
    /// [`recv_segment`](Self::recv_segment) make none.
    pub async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TcpError> {
        self.conn.read(buf).await
    }

    /// Gives `f` the received bytes in place: the first received segment's payload (what is
    /// left of it), in the very frame the driver received it in, never empty; `f` returns how
    /// many it consumed and a result. A segment consumed to its end returns its slot to the
    /// pool; one partly consumed stays first, its front moved past what was consumed.
    /// `Ok(None)` is end of stream.
    ///
    /// No copy (see [the module docs](self#copies-per-payload-byte)).
    pub async fn read_with<R>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<Option<R>, TcpError> {
        self.conn.read_with(f).await
    }

    /// Takes the next received segment: its payload in place in the frame the driver received
    /// it in (what `read_with` left of it), owned by the returned [`TcpSegment`] until dropped.
    /// `Ok(None)` is end of stream.
    ///
    /// No copy. While the application holds segments they count against the connection's
    /// receive budget: the window the stack advertises shrinks, down to zero (the peer then
    /// waits, probing), and reopens as they are dropped.
    pub async fn recv_segment(&mut self) -> Result<Option<TcpSegment>, TcpError> {
        poll_fn(|cx| self.conn.poll_recv_segment(cx)).await
    }

    /// [`recv_segment`](Self::recv_segment) as a poll function: `Pending` (with `cx`'s waker
    /// registered) until a segment, the end of stream or an error is there.
    pub fn poll_recv_segment(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<TcpSegment>, TcpError>> {
        self.conn.poll_recv_segment(cx)
    }

    /// Queues bytes from `buf`; returns how many were queued, at least one unless `buf` is
    /// empty (waits while the send queue is full or the pool has no free slot). Copies `buf` →
    /// the send queue's tail frame ([`CopySite::AppToSocket`]), the one copy; use
    /// [`write_with`](Self::write_with) or [`send_frame`](Self::send_frame) to avoid it.
    pub async fn write(&mut self, buf: &[u8]) -> Result<usize, TcpError> {
        self.conn.write(buf).await
    }

    /// Queues all of `buf`.
    pub async fn write_all(&mut self, buf: &[u8]) -> Result<(), TcpError> {
        self.conn.write_all(buf).await
    }

    /// Gives `f` the free room of the send queue's tail frame (never empty; at most one
    /// segment) to write into in place; `f` returns how many bytes it wrote and a result.
    ///
    /// No copy: the frame is what the driver transmits (see
    /// [the module docs](self#copies-per-payload-byte)).
    pub async fn write_with<R>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, TcpError> {
        self.conn.write_with(f).await
    }

    /// A TX frame to fill with payload in place, then queue with
    /// [`send_frame`](Self::send_frame): headroom reserved for the driver, Ethernet, IP and TCP
    /// headers, and room for one segment (the connection's current MSS, or what the slot holds
    /// when smaller) after it. `Pending` (with `cx`'s waker registered) while the pool has no
    /// free slot. Dropped unsent, the slot returns to the pool.
    pub fn poll_tx_frame(&self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.conn.poll_tx_frame(cx)
    }

    /// Waits for a TX frame (see [`poll_tx_frame`](Self::poll_tx_frame)).
    pub async fn tx_frame(&self) -> TxFrame {
        poll_fn(|cx| self.conn.poll_tx_frame(cx)).await
    }

    /// Queues `frame`'s data (the payload, written in place) to be sent: the frame itself joins
    /// the send queue and is what the driver transmits, headers written in front, as often as
    /// the connection sends it; no copy. Waits while the send queue is full; errors as
    /// [`write`](Self::write) does. A frame that is not a fresh TX frame (one a connection
    /// already keeps) is refused with [`TcpError::InvalidState`].
    pub async fn send_frame(&mut self, frame: TxFrame) -> Result<(), TcpError> {
        self.conn.send_frame(frame).await
    }

    /// Waits until everything written has been acknowledged by the peer.
    pub async fn flush(&mut self) -> Result<(), TcpError> {
        self.conn.flush().await
    }

    /// Closes the write half (FIN after queued data); reading continues until the peer closes.
    pub fn shutdown(&mut self) {
        self.conn.shutdown()
    }

    /// Closes the connection gracefully: the same as [`shutdown`](Self::shutdown) (TCP has no
    /// way to close only the read half); read until `Ok(0)` or wait for
    /// [`closed`](Self::closed).
    pub fn close(&mut self) {
        self.conn.shutdown()
    }

    /// Resets the connection at once (RST); later operations fail with [`TcpError::Aborted`].
    pub fn abort(&mut self) {
        self.with(|s, st| {
            event!(tcp_aborted(s));
            st.meta.set_cause(CloseCause::Aborted);
            s.abort();
            st.signal_egress();
        })
    }

    /// Waits until the socket is closed (both FINs exchanged and acknowledged, or reset).
    pub async fn closed(&mut self) {
        poll_fn(|cx| {
            self.with(|s, st| match s.state() {
                TcpState::Closed | TcpState::TimeWait => Poll::Ready(()),
                _ => {
                    s.register_recv_waker(cx.waker(), st.local);
                    Poll::Pending
                }
            })
        })
        .await
    }

    /// Splits the socket into a read half and a write half that can be used from two tasks at
    /// once (each waits on its own waker).
    pub fn split(&mut self) -> (TcpReader<'_>, TcpWriter<'_>) {
        (
            TcpReader {
                conn: self.conn,
                _socket: PhantomData,
            },
            TcpWriter {
                conn: self.conn,
                _socket: PhantomData,
            },
        )
    }

    /// Sets an idle timeout: the connection ends with [`TcpError::TimedOut`] when the peer does
    /// not answer for this long (combine with [`set_keep_alive`](Self::set_keep_alive) to
    /// detect a silent peer while idle). `None` waits forever.
    pub fn set_timeout(&mut self, timeout: Option<core::time::Duration>) {
        self.with(|s, st| {
            s.set_timeout(timeout.map(to_smol));
            st.meta.set_watched(timeout.is_some());
            st.signal_egress(); // a new deadline for egress to honour
        })
    }

    /// Sends keep-alive probes when the connection has been idle this long, the first one
    /// this long after the call at the earliest. `None` disables.
    pub fn set_keep_alive(&mut self, interval: Option<core::time::Duration>) {
        let now = self.conn.stack.now();
        self.with(|s, st| {
            s.set_keep_alive(interval.map(to_smol), now);
            st.signal_egress(); // a new deadline for egress to honour
        })
    }

    /// How many retransmissions and unanswered zero-window probes the connection allows before
    /// it gives up (Linux's `tcp_retries2`; default [`TCP_RETRIES`], at least
    /// [`MIN_TCP_RETRIES`], lower values count as that). Unacknowledged data or FIN ends the
    /// connection at the first retransmission timeout past [`retransmission_bound`]`(retries)`
    /// since the oldest unacknowledged transmission (102.2 s for 8, 522.2 s for 15); probes
    /// after `retries` of them in a row go unanswered. The connection then sends a RST and
    /// ends with [`TcpError::TimedOut`] (see the module docs, "How long a connection lasts
    /// without answers"). Applies at once and to the socket's later connections.
    pub fn set_retries(&mut self, retries: u8) {
        self.with(|s, _| s.set_retries(retries))
    }

    /// The retransmission and probe limit ([`set_retries`](Self::set_retries)).
    pub fn retries(&self) -> u8 {
        self.with(|s, _| s.retries())
    }

    /// Disables (`true`) or enables (`false`, the default) Nagle's algorithm.
    pub fn set_nodelay(&mut self, nodelay: bool) {
        self.with(|s, _| s.set_nagle_enabled(!nodelay))
    }

    /// Whether this socket's next connections offer TCP timestamps (RFC 7323; on by default,
    /// as on Linux): 12 bytes of options on every segment, in exchange for an RTT sample per
    /// ACK (retransmissions included) and protection against old duplicates (PAWS). Used only
    /// when the peer offers them too. Set it before connecting or accepting.
    pub fn set_timestamps(&mut self, enabled: bool) {
        self.with(|s, _| s.set_timestamps(enabled))
    }

    /// The least retransmission timeout this socket's RTT measurements may give (default
    /// 200 ms, Linux's floor; RFC 6298 suggests 1 s). Before the first measurement the timeout
    /// is 1 s whatever this says. A lower floor recovers sooner from a loss nothing else
    /// detects (a lost retransmission, the last segment of a burst); too low for the path, and
    /// a delayed ACK is taken for a loss and data is sent twice.
    pub fn set_min_rto(&mut self, min_rto: core::time::Duration) {
        self.with(|s, _| s.set_min_rto(to_smol(min_rto)))
    }

    /// The least retransmission timeout ([`set_min_rto`](Self::set_min_rto)).
    pub fn min_rto(&self) -> core::time::Duration {
        self.with(|s, _| core::time::Duration::from_millis(s.min_rto().total_millis()))
    }

    /// Chooses the congestion control algorithm: [`CongestionControl::None`] (the default:
    /// only the peer's window limits what is in flight), [`CongestionControl::Reno`] or
    /// [`CongestionControl::Cubic`] (which uses `f64` arithmetic). Takes effect at once, with a
    /// fresh controller state; set it before connecting.
    pub fn set_congestion_control(&mut self, algorithm: CongestionControl) {
        self.with(|s, _| s.set_congestion_control(algorithm))
    }
}

/// The read half of a [`TcpSocket`] ([`TcpSocket::split`]).
#[derive(Debug)]
pub struct TcpReader<'a> {
    pub(crate) conn: Conn,
    _socket: PhantomData<&'a mut TcpSocket>,
}

impl TcpReader<'_> {
    /// Like [`TcpSocket::stats`].
    pub fn stats(&self) -> TcpStats {
        self.conn.stats()
    }

    /// Like [`TcpSocket::read`].
    pub async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TcpError> {
        self.conn.read(buf).await
    }

    /// Like [`TcpSocket::read_with`].
    pub async fn read_with<R>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<Option<R>, TcpError> {
        self.conn.read_with(f).await
    }

    /// Like [`TcpSocket::recv_segment`].
    pub async fn recv_segment(&mut self) -> Result<Option<TcpSegment>, TcpError> {
        poll_fn(|cx| self.conn.poll_recv_segment(cx)).await
    }

    /// Like [`TcpSocket::poll_recv_segment`].
    pub fn poll_recv_segment(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<TcpSegment>, TcpError>> {
        self.conn.poll_recv_segment(cx)
    }
}

/// A received TCP segment's payload, in place in the pool slot the driver received it in:
/// what [`TcpSocket::recv_segment`] returns. It owns the slot (state LENT) until dropped.
///
/// Dropping it, on any task or thread or in an interrupt handler (it is `Send` and `Sync`),
/// returns the slot to the pool and gives the slot back to its connection's receive budget,
/// so that the window reopens: the drop counts itself lock-free and wakes egress, which
/// credits the connection and sends a window update when it is worth one. Holding many
/// segments stalls the peer: the window shrinks to zero.
///
/// It derefs to the payload bytes.
pub struct TcpSegment {
    frame: RxFrame,
    /// Its connection's place's release counter.
    release: &'static SegmentRelease,
    /// The stack's release flag and egress's waker.
    signal: &'static SegmentReleases,
    /// The generation of the connection's place when the segment was taken: the connection is
    /// released only if it is still there (`transport/tcp/table.rs`).
    generation: u32,
}

impl TcpSegment {
    /// The payload bytes, in place.
    pub fn payload(&self) -> &[u8] {
        &self.frame
    }

    /// Payload bytes.
    pub fn len(&self) -> usize {
        self.frame.len()
    }

    /// Whether the payload is empty (a segment returned by `recv_segment` never is).
    pub fn is_empty(&self) -> bool {
        self.frame.is_empty()
    }

    /// The frame itself (its slot index and pool, e.g. to prove where the bytes are). Its
    /// visible bytes are the payload: headers were stripped with `advance`, not copied.
    pub fn frame(&self) -> &RxFrame {
        &self.frame
    }
}

impl core::ops::Deref for TcpSegment {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.frame
    }
}

impl AsRef<[u8]> for TcpSegment {
    fn as_ref(&self) -> &[u8] {
        &self.frame
    }
}

impl core::fmt::Debug for TcpSegment {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpSegment")
            .field("frame", &self.frame)
            .finish_non_exhaustive()
    }
}

impl Drop for TcpSegment {
    fn drop(&mut self) {
        // Counted only while its connection still holds the place; the stack's own context
        // credits the connection when egress runs (`TcpTable::fold_releases`).
        if self.release.release(self.generation) {
            self.signal.note();
        }
        // The frame drops after this: its slot goes back to the pool.
    }
}

/// The write half of a [`TcpSocket`] ([`TcpSocket::split`]).
#[derive(Debug)]
pub struct TcpWriter<'a> {
    pub(crate) conn: Conn,
    _socket: PhantomData<&'a mut TcpSocket>,
}

impl TcpWriter<'_> {
    /// Like [`TcpSocket::stats`].
    pub fn stats(&self) -> TcpStats {
        self.conn.stats()
    }

    /// Like [`TcpSocket::write`].
    pub async fn write(&mut self, buf: &[u8]) -> Result<usize, TcpError> {
        self.conn.write(buf).await
    }

    /// Like [`TcpSocket::write_all`].
    pub async fn write_all(&mut self, buf: &[u8]) -> Result<(), TcpError> {
        self.conn.write_all(buf).await
    }

    /// Like [`TcpSocket::write_with`].
    pub async fn write_with<R>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, TcpError> {
        self.conn.write_with(f).await
    }

    /// Like [`TcpSocket::poll_tx_frame`].
    pub fn poll_tx_frame(&self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.conn.poll_tx_frame(cx)
    }

    /// Like [`TcpSocket::tx_frame`].
    pub async fn tx_frame(&self) -> TxFrame {
        poll_fn(|cx| self.conn.poll_tx_frame(cx)).await
    }

    /// Like [`TcpSocket::send_frame`].
    pub async fn send_frame(&mut self, frame: TxFrame) -> Result<(), TcpError> {
        self.conn.send_frame(frame).await
    }

    /// Like [`TcpSocket::flush`].
    pub async fn flush(&mut self) -> Result<(), TcpError> {
        self.conn.flush().await
    }

    /// Like [`TcpSocket::shutdown`]: the read half keeps reading.
    pub fn shutdown(&mut self) {
        self.conn.shutdown()
    }
}

/// How long a dropped socket may take to finish its graceful close before it is reset.
const LINGER: SmolDuration = SmolDuration::from_secs(60);

impl Drop for TcpSocket {
    /// Dropping a connected socket closes it gracefully in the background: queued data is still
    /// sent, then FIN; the stack removes the socket once the close completes (or after a minute
    /// without progress). Call [`abort`](TcpSocket::abort) first to reset instead (the socket
    /// stays until its RST is sent). Until then the
    /// socket keeps its slot in the stack's socket storage; once in TIME-WAIT, only until a new
    /// socket finds no free slot (see
    /// [`StackStats::time_wait_evictions`](crate::StackStats::time_wait_evictions)).
    ///
    /// Received data the socket has not read is discarded when it drops: its frames go back to
    /// the pool at once, and the window opens again. Data that comes after the drop resets the
    /// connection (RFC 1122, 4.2.2.13: nobody can read it), counted in
    /// [`StackStats::tcp_unread_resets`](crate::StackStats::tcp_unread_resets). So a peer with
    /// more to send (a client still sending when the server lets go) is reset at once instead
    /// of holding the closing connection, and its pool budget, by probing a closed window;
    /// a peer that sent only what was discarded (a request the server refused unread) still
    /// gets the answer and the FIN.
    fn drop(&mut self) {
        let handle = self.conn.handle;
        let now = self.conn.stack.now();
        self.conn.stack.with(|st| {
            let lingering = st.with_tcb(handle, |s, _| match s.state() {
                // An abort whose RST egress has not sent yet: kept until it is sent.
                TcpState::Closed => s.remote_endpoint().is_some(),
                TcpState::Listen | TcpState::SynSent => false,
                _ => {
                    // Nobody reads now: the unread data's frames go back to the pool, and the
                    // window the FIN (or egress's window update) announces opens, so a peer
                    // with more to send sends it and is reset (`transport/tcp/input.rs`).
                    while s.can_recv() {
                        match s.recv(|d| (d.len(), d.len())) {
                            Ok(n) if n > 0 => {}
                            _ => break,
                        }
                    }
                    s.close();
                    s.set_timeout(Some(LINGER));
                    true
                }
            });
            // The connection's timeout resets it after LINGER without progress; the orphan
            // deadline is only a backstop.
            if lingering {
                st.adopt_tcp_orphan(handle, now + LINGER + LINGER);
            } else {
                st.remove_tcb(handle);
            }
        })
    }
}

fn to_smol(d: core::time::Duration) -> SmolDuration {
    SmolDuration::from_micros(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}
