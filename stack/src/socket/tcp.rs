//! TCP: [`TcpSocket`] (connect or accept one connection), [`TcpListener`] (a real backlog).
//!
//! Data moves through smoltcp's socket rings: `read`/`write` copy once between the ring and the
//! caller's buffer (counted in the copy ledger as socket→app / app→socket); `read_with` /
//! `write_with` give in-place access to the ring instead.

use core::future::poll_fn;
use core::task::Poll;

use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use smoltcp::storage::RingBuffer;
use smoltcp::time::Duration as SmolDuration;
use zcnet_buffer::ledger::{self, CopySite};

use crate::config::{IpEndpoint, IpListenEndpoint};
use crate::stack::{Stack, State};
use crate::StackError;

pub use smoltcp::socket::tcp::State as TcpState;

/// Why a TCP operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpError {
    /// The connection is closed (reset by the peer, timed out, or aborted); no more data.
    ConnectionClosed,
    /// The operation does not fit the socket's state (e.g. connecting a socket in use, writing
    /// after `shutdown`).
    InvalidState,
    /// The remote or local address cannot be used (no route, port 0, unspecified address).
    Unaddressable,
    /// A `connect` did not complete within its timeout.
    TimedOut,
}

impl core::fmt::Display for TcpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            TcpError::ConnectionClosed => "connection closed",
            TcpError::InvalidState => "invalid socket state",
            TcpError::Unaddressable => "unaddressable endpoint",
            TcpError::TimedOut => "timed out",
        })
    }
}

impl core::error::Error for TcpError {}

/// Socket buffers: caller-provided `'static` slices, or (feature `alloc`) vectors freed when the
/// socket is dropped.
#[derive(Debug)]
pub struct TcpBuffers {
    rx: smoltcp::storage::RingBuffer<'static, u8>,
    tx: smoltcp::storage::RingBuffer<'static, u8>,
}

impl TcpBuffers {
    /// Buffers over caller-provided memory.
    pub fn from_static(rx: &'static mut [u8], tx: &'static mut [u8]) -> Self {
        Self {
            rx: RingBuffer::new(rx),
            tx: RingBuffer::new(tx),
        }
    }

    /// Heap buffers of the given sizes.
    #[cfg(feature = "alloc")]
    pub fn with_capacity(rx: usize, tx: usize) -> Self {
        extern crate alloc;
        Self {
            rx: RingBuffer::new(alloc::vec![0u8; rx]),
            tx: RingBuffer::new(alloc::vec![0u8; tx]),
        }
    }
}

fn add_socket(stack: Stack, buffers: TcpBuffers) -> Result<SocketHandle, StackError> {
    stack.with(|st| {
        if st.socket_count >= st.socket_capacity {
            return Err(StackError::NoSocketSlot);
        }
        st.socket_count += 1;
        Ok(st.sockets.add(tcp::Socket::new(buffers.rx, buffers.tx)))
    })
}

/// One TCP connection (or one socket waiting to become one).
#[derive(Debug)]
pub struct TcpSocket {
    stack: Stack,
    handle: SocketHandle,
}

impl TcpSocket {
    /// A closed socket with these buffers. Errors when the stack has no free socket slot.
    pub fn new(stack: Stack, buffers: TcpBuffers) -> Result<Self, StackError> {
        Ok(Self {
            stack,
            handle: add_socket(stack, buffers)?,
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut tcp::Socket<'static>, &mut State) -> R) -> R {
        self.stack.with(|st| {
            // Borrow the socket out of the set while keeping `st` usable for signalling: take
            // the socket by handle each time (cheap: an index).
            let sock: *mut tcp::Socket<'static> = st.sockets.get_mut::<tcp::Socket>(self.handle);
            // SAFETY: `sock` points into `st.sockets`, which `f` does not touch (it only uses
            // `st` to signal egress); the lock is held for the whole call.
            f(unsafe { &mut *sock }, st)
        })
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

    /// Connects to `remote` from an ephemeral port and waits until established. Errors with
    /// [`TcpError::ConnectionClosed`] if the peer refuses (RST) or the handshake times out in
    /// smoltcp; wrap in [`zcnet_executor::time::timeout`] for a deadline of your own, or use
    /// [`connect_timeout`](Self::connect_timeout).
    pub async fn connect(&mut self, remote: impl Into<IpEndpoint>) -> Result<(), TcpError> {
        let remote = remote.into();
        let now = self.stack.now();
        let port = self.stack.with(|st| ephemeral_port(st, now));
        self.with(|s, st| {
            let cx = st.iface.context();
            s.connect(cx, remote, port).map_err(|e| match e {
                tcp::ConnectError::InvalidState => TcpError::InvalidState,
                tcp::ConnectError::Unaddressable => TcpError::Unaddressable,
            })?;
            st.signal_egress();
            Ok(())
        })?;
        poll_fn(|cx| {
            self.with(|s, _| match s.state() {
                TcpState::Established => Poll::Ready(Ok(())),
                TcpState::Closed | TcpState::TimeWait => {
                    Poll::Ready(Err(TcpError::ConnectionClosed))
                }
                _ => {
                    s.register_send_waker(cx.waker());
                    Poll::Pending
                }
            })
        })
        .await
    }

    /// [`connect`](Self::connect) that gives up after `timeout` with [`TcpError::TimedOut`] and
    /// aborts the attempt.
    pub async fn connect_timeout(
        &mut self,
        remote: impl Into<IpEndpoint>,
        timeout: core::time::Duration,
    ) -> Result<(), TcpError> {
        let remote = remote.into();
        let r = zcnet_executor::time::timeout(timeout, self.connect(remote)).await;
        match r {
            Ok(r) => r,
            Err(_) => {
                self.abort();
                Err(TcpError::TimedOut)
            }
        }
    }

    /// Listens on `local` and waits for one connection to be established.
    pub async fn accept(&mut self, local: impl Into<IpListenEndpoint>) -> Result<(), TcpError> {
        let local = local.into();
        self.with(|s, st| {
            s.listen(local).map_err(|e| match e {
                tcp::ListenError::InvalidState => TcpError::InvalidState,
                tcp::ListenError::Unaddressable => TcpError::Unaddressable,
            })?;
            st.signal_egress();
            Ok(())
        })?;
        poll_fn(|cx| {
            self.with(|s, _| match s.state() {
                TcpState::Listen | TcpState::SynReceived => {
                    s.register_recv_waker(cx.waker());
                    Poll::Pending
                }
                TcpState::Closed => Poll::Ready(Err(TcpError::ConnectionClosed)),
                _ => Poll::Ready(Ok(())),
            })
        })
        .await
    }

    /// Reads into `buf`; `Ok(0)` means the peer closed its side (end of stream).
    pub async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TcpError> {
        self.read_with(|data| {
            let n = ledger::copy(CopySite::SocketToApp, buf, data);
            (n, n)
        })
        .await
    }

    /// Gives `f` the received bytes in place (the contiguous part of smoltcp's ring); `f`
    /// returns how many it consumed and a result. Returns `Ok` of that result, or `Ok` with
    /// `f` called on an empty slice at end of stream.
    pub async fn read_with<R>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, TcpError> {
        let mut f = Some(f);
        poll_fn(|cx| {
            self.with(|s, st| {
                if s.can_recv() {
                    let window_before = s.recv_capacity() - s.recv_queue();
                    let f = f.take().expect("read_with polled after completion");
                    let r = s.recv(f).map_err(|_| TcpError::ConnectionClosed);
                    // A read that reopens a window that was small tells egress to advertise it.
                    let window_after = s.recv_capacity() - s.recv_queue();
                    if window_before < s.recv_capacity() / 2
                        && window_after >= s.recv_capacity() / 2
                    {
                        st.signal_egress();
                    }
                    return Poll::Ready(r);
                }
                if !s.may_recv() {
                    // End of stream, or the connection is gone.
                    return Poll::Ready(match s.state() {
                        TcpState::Closed | TcpState::Listen | TcpState::SynSent
                            if s.remote_endpoint().is_none() =>
                        {
                            Err(TcpError::ConnectionClosed)
                        }
                        _ => {
                            let f = f.take().expect("read_with polled after completion");
                            Ok(f(&mut []).1)
                        }
                    });
                }
                s.register_recv_waker(cx.waker());
                Poll::Pending
            })
        })
        .await
    }

    /// Queues bytes from `buf`; returns how many were queued (waits while the send buffer is
    /// full).
    pub async fn write(&mut self, buf: &[u8]) -> Result<usize, TcpError> {
        self.write_with(|space| {
            let n = ledger::copy(CopySite::AppToSocket, space, buf);
            (n, n)
        })
        .await
    }

    /// Writes all of `buf`.
    pub async fn write_all(&mut self, mut buf: &[u8]) -> Result<(), TcpError> {
        while !buf.is_empty() {
            let n = self.write(buf).await?;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Gives `f` free space in smoltcp's send ring to write into in place; `f` returns how many
    /// bytes it wrote and a result.
    pub async fn write_with<R>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, TcpError> {
        let mut f = Some(f);
        poll_fn(|cx| {
            self.with(|s, st| {
                if !s.may_send() {
                    return Poll::Ready(Err(TcpError::ConnectionClosed));
                }
                if s.can_send() {
                    let f = f.take().expect("write_with polled after completion");
                    let r = s.send(f).map_err(|_| TcpError::ConnectionClosed);
                    st.signal_egress();
                    return Poll::Ready(r);
                }
                s.register_send_waker(cx.waker());
                Poll::Pending
            })
        })
        .await
    }

    /// Waits until everything written has been acknowledged by the peer.
    pub async fn flush(&mut self) -> Result<(), TcpError> {
        poll_fn(|cx| {
            self.with(|s, _| {
                if s.send_queue() == 0 {
                    return Poll::Ready(Ok(()));
                }
                if !s.may_send() && !s.is_active() {
                    return Poll::Ready(Err(TcpError::ConnectionClosed));
                }
                s.register_send_waker(cx.waker());
                Poll::Pending
            })
        })
        .await
    }

    /// Closes the write half (sends FIN after queued data); reading continues.
    pub fn shutdown(&mut self) {
        self.with(|s, st| {
            s.close();
            st.signal_egress();
        })
    }

    /// Closes the connection gracefully (FIN after queued data).
    pub fn close(&mut self) {
        self.shutdown()
    }

    /// Resets the connection at once (RST).
    pub fn abort(&mut self) {
        self.with(|s, st| {
            s.abort();
            st.signal_egress();
        })
    }

    /// Waits until the socket is fully closed (both FINs exchanged and acknowledged, or reset).
    pub async fn closed(&mut self) {
        poll_fn(|cx| {
            self.with(|s, _| match s.state() {
                TcpState::Closed | TcpState::TimeWait => Poll::Ready(()),
                _ => {
                    s.register_recv_waker(cx.waker());
                    Poll::Pending
                }
            })
        })
        .await
    }

    /// Sets an idle timeout: the connection is aborted if the peer does not answer for this long.
    pub fn set_timeout(&mut self, timeout: Option<core::time::Duration>) {
        self.with(|s, _| s.set_timeout(timeout.map(to_smol)))
    }

    /// Sends keep-alive probes after this much idle time.
    pub fn set_keep_alive(&mut self, interval: Option<core::time::Duration>) {
        self.with(|s, st| {
            s.set_keep_alive(interval.map(to_smol));
            st.signal_egress(); // a new deadline for egress to honour
        })
    }

    /// Disables (`true`) or enables Nagle's algorithm.
    pub fn set_nodelay(&mut self, nodelay: bool) {
        self.with(|s, _| s.set_nagle_enabled(!nodelay))
    }
}

/// How long a dropped socket may take to finish its graceful close before it is reset.
const LINGER: SmolDuration = SmolDuration::from_secs(60);

impl Drop for TcpSocket {
    /// Dropping a connected socket closes it gracefully in the background: queued data is still
    /// sent, then FIN; the stack removes the socket once the close completes (or after a minute
    /// without progress). Call [`abort`](TcpSocket::abort) first to reset instead.
    fn drop(&mut self) {
        let handle = self.handle;
        let now = self.stack.now();
        self.stack.with(|st| {
            let s = st.sockets.get_mut::<tcp::Socket>(handle);
            let lingering = match s.state() {
                TcpState::Closed | TcpState::Listen | TcpState::SynSent => false,
                _ => {
                    s.close();
                    s.set_timeout(Some(LINGER));
                    true
                }
            };
            if lingering {
                // smoltcp's timeout resets it after LINGER without progress; the orphan deadline
                // is only a backstop.
                let until = now + LINGER + LINGER;
                if st.adopt_orphan(handle, until) {
                    return;
                }
                // No room to keep it: reset it now.
            }
            st.sockets.remove(handle);
            st.socket_count -= 1;
        })
    }
}

fn to_smol(d: core::time::Duration) -> SmolDuration {
    SmolDuration::from_micros(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A port from the dynamic range not used by any socket of this stack.
fn ephemeral_port(st: &mut State, now: smoltcp::time::Instant) -> u16 {
    const FIRST: u16 = 49152;
    let span = u16::MAX - FIRST;
    let start = (now.total_micros().unsigned_abs() % u64::from(span)) as u16;
    for i in 0..span {
        let port = FIRST + (start + i) % span;
        let used = st.sockets.iter().any(|(_, s)| match s {
            smoltcp::socket::Socket::Tcp(t) => {
                t.local_endpoint().is_some_and(|e| e.port == port)
                    || t.listen_endpoint().port == port
            }
            _ => false,
        });
        if !used {
            return port;
        }
    }
    FIRST
}

/// Accepts connections on one endpoint with a backlog: `backlog` sockets listen at once, and each
/// one that becomes a connection is handed out and replaced by a fresh listening socket, so up to
/// `backlog` clients can be in the handshake at the same time.
#[derive(Debug)]
pub struct TcpListener {
    stack: Stack,
    endpoint: IpListenEndpoint,
    listening: [Option<SocketHandle>; MAX_BACKLOG],
    backlog: usize,
    make_buffers: fn() -> Option<TcpBuffers>,
}

/// The largest backlog a listener supports.
pub const MAX_BACKLOG: usize = 64;

impl TcpListener {
    /// Listens on `endpoint` with `backlog` sockets (1..=[`MAX_BACKLOG`]), each with buffers from
    /// `make_buffers` (called again for every replacement; `None` stops re-arming until an
    /// accept finds buffers again).
    pub fn bind(
        stack: Stack,
        endpoint: impl Into<IpListenEndpoint>,
        backlog: usize,
        make_buffers: fn() -> Option<TcpBuffers>,
    ) -> Result<Self, StackError> {
        let backlog = backlog.clamp(1, MAX_BACKLOG);
        let mut l = Self {
            stack,
            endpoint: endpoint.into(),
            listening: [None; MAX_BACKLOG],
            backlog,
            make_buffers,
        };
        for i in 0..backlog {
            l.arm(i)?;
        }
        Ok(l)
    }

    fn arm(&mut self, i: usize) -> Result<(), StackError> {
        let buffers = (self.make_buffers)().ok_or(StackError::NoBuffers)?;
        let handle = add_socket(self.stack, buffers)?;
        let endpoint = self.endpoint;
        let ok = self.stack.with(|st| {
            let r = st.sockets.get_mut::<tcp::Socket>(handle).listen(endpoint);
            if r.is_err() {
                st.sockets.remove(handle);
                st.socket_count -= 1;
            }
            r.is_ok()
        });
        if !ok {
            return Err(StackError::Unaddressable);
        }
        self.listening[i] = Some(handle);
        Ok(())
    }

    /// Waits for the next established connection.
    pub async fn accept(&mut self) -> Result<TcpSocket, StackError> {
        let (i, handle) = poll_fn(|cx| {
            // Re-arm slots whose buffers were unavailable earlier.
            for i in 0..self.backlog {
                if self.listening[i].is_none() {
                    let _ = self.arm(i);
                }
            }
            let found = self.stack.with(|st| {
                for (i, h) in self.listening[..self.backlog].iter().enumerate() {
                    let Some(h) = *h else { continue };
                    let s = st.sockets.get_mut::<tcp::Socket>(h);
                    match s.state() {
                        TcpState::Listen | TcpState::SynReceived => {
                            s.register_recv_waker(cx.waker())
                        }
                        // Established, or already closing: hand it out either way.
                        _ => return Some((i, h)),
                    }
                }
                None
            });
            match found {
                Some(x) => Poll::Ready(x),
                None => Poll::Pending,
            }
        })
        .await;
        self.listening[i] = None;
        let _ = self.arm(i);
        Ok(TcpSocket {
            stack: self.stack,
            handle,
        })
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        self.stack.with(|st| {
            for h in self.listening.iter_mut().filter_map(Option::take) {
                st.sockets.remove(h);
                st.socket_count -= 1;
            }
        })
    }
}
