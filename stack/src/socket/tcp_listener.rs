//! [`TcpListener`]: accepts connections on one endpoint with a real backlog.

use core::future::poll_fn;
use core::task::Poll;
use core::time::Duration;

use smoltcp::time::Duration as SmolDuration;

use super::tcp::{add_socket, Conn, TcpBuffers, TcpError, TcpSocket, TcpState};
use crate::config::IpListenEndpoint;
use crate::stack::Stack;
use crate::transport::tcp::backlog::{ListenSpec, ListenerId};
use crate::transport::tcp::table::TcpHandle;
use crate::StackError;

/// Accepts connections on one endpoint with a backlog: `backlog` sockets listen at once, and each
/// one that becomes a connection is handed out and replaced by a fresh listening socket, so up to
/// `backlog` clients can be in the handshake at the same time.
///
/// A replacement needs a free socket slot in the stack and buffers from `make_buffers`. A
/// dropped connection in TIME-WAIT (what a server that closes first leaves behind for 10 s)
/// gives its slot up to it, counted in
/// [`StackStats::time_wait_evictions`](crate::StackStats::time_wait_evictions). When open
/// connections and connections still closing in other states hold every slot, or
/// `make_buffers` returns `None`, the listener runs short, counted in
/// [`StackStats::listener_rearm_failures`](crate::StackStats::listener_rearm_failures). A
/// pending [`accept`](Self::accept) then re-arms when it is woken: whenever the stack frees a
/// slot, whenever the application drops a socket (when a buffer source that counts per
/// connection gets its buffers back), and when the application calls
/// [`Stack::tcp_buffers_returned`] (buffers that come back any other way).
///
/// A listening socket that a SYN moved to SYN-RECEIVED gives the handshake up when the peer
/// sends nothing more for [`HANDSHAKE_TIMEOUT`] (a client that vanished, or a spoofed SYN):
/// the stack resets it, and `accept` makes it listen again. Otherwise `backlog` such SYNs
/// would hold every listening socket for good, and the listener would drop every later SYN.
/// The same timeout covers a connection that completed its handshake but waits to be
/// accepted: one whose peer stays silent that long is reset and never handed out. A socket
/// `accept` hands out has no timeout (what [`TcpSocket::set_timeout`] sets is the
/// application's).
///
/// With every listening socket busy, a SYN is answered with a SYN cookie when
/// [`Config::syn_cookies`](crate::Config::syn_cookies) is on (the default), so clients still get
/// through a flood of handshakes that never complete: the peer's final ACK brings the cookie
/// back and makes a connection. A listening socket free by then becomes it; otherwise a new
/// socket (a free slot, buffers from `make_buffers`) does and waits for `accept` beside the
/// listening sockets (at most `backlog` of them, under the same timeout). Either is handed out
/// like any other connection. Its receive window and window scale are those the cookie's
/// SYN-ACK announced: the listener's first buffers'.
#[derive(Debug)]
pub struct TcpListener {
    stack: Stack,
    id: ListenerId,
    endpoint: IpListenEndpoint,
    listening: [Option<TcpHandle>; MAX_BACKLOG],
    backlog: usize,
    make_buffers: fn() -> Option<TcpBuffers>,
}

/// The largest backlog a listener supports.
pub const MAX_BACKLOG: usize = 64;

/// How long a listening socket in SYN-RECEIVED waits for its peer's next segment before it
/// gives the handshake up (see [`TcpListener`]): BSD's connection-establishment timer, longer
/// than a client's SYN retries at their usual timeouts (1, 2, 4, 8, 16 s) take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(75);

impl TcpListener {
    /// Listens on `endpoint` with `backlog` sockets (1..=[`MAX_BACKLOG`]), each with buffers from
    /// `make_buffers` (called again for every replacement; after a `None` the listener is short
    /// until a pending [`accept`](Self::accept), woken as the type's docs say, finds buffers
    /// again).
    pub fn bind(
        stack: Stack,
        endpoint: impl Into<IpListenEndpoint>,
        backlog: usize,
        make_buffers: fn() -> Option<TcpBuffers>,
    ) -> Result<Self, StackError> {
        let backlog = backlog.clamp(1, MAX_BACKLOG);
        let endpoint = endpoint.into();
        if endpoint.port == 0 {
            return Err(StackError::Unaddressable);
        }
        let spec = ListenSpec {
            addr: endpoint.addr,
            backlog,
            make_buffers,
            pool: stack.pool(),
        };
        let id = stack.with(|st| st.listener_ports.add(endpoint.port, spec))?;
        let mut l = Self {
            stack,
            id,
            endpoint,
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
        let (endpoint, id) = (self.endpoint, self.id);
        let ok = self.stack.with(|st| {
            st.listener_ports
                .note_rx_capacity(id, buffers.rx_capacity());
            let r = st.with_tcb(handle, |s, _| {
                s.set_timeout(Some(SmolDuration::from_secs(HANDSHAKE_TIMEOUT.as_secs())));
                s.listen(endpoint)
            });
            if r.is_err() {
                st.remove_tcb(handle);
            }
            r.is_ok()
        });
        if !ok {
            return Err(StackError::Unaddressable);
        }
        self.listening[i] = Some(handle);
        Ok(())
    }

    /// [`arm`](Self::arm) for a replacement: a failure is counted, and retried later.
    fn rearm(&mut self, i: usize) {
        if self.arm(i).is_err() {
            let port = self.endpoint.port;
            self.stack.inner.counters.listener_rearm_failure(port);
        }
    }

    /// How many sockets listen now: the backlog, or fewer while replacements could not be
    /// made (no free socket slot, or no buffers).
    pub fn listening(&self) -> usize {
        self.listening[..self.backlog]
            .iter()
            .filter(|h| h.is_some())
            .count()
    }

    /// Waits for the next established connection. The listening socket that became it is
    /// replaced by a fresh one when the stack has a slot and `make_buffers` gives buffers;
    /// otherwise `accept` tries again each time it runs, and it is woken to do so whenever the
    /// stack frees a socket slot, the application drops a socket, or
    /// [`Stack::tcp_buffers_returned`] is called.
    ///
    /// Errors only with [`TcpError::ShutDown`] once the stack is shut down.
    pub async fn accept(&mut self) -> Result<TcpSocket, TcpError> {
        let (i, handle) = poll_fn(|cx| {
            if self.stack.is_shut_down() {
                return Poll::Ready(Err(TcpError::ShutDown));
            }
            if let Some(h) = self.take_completed(cx.waker()) {
                return Poll::Ready(Ok((None, h)));
            }
            if self.listening() < self.backlog {
                // Ask to be woken when a slot frees up *before* trying, so a slot freed just
                // after a failed try still wakes this task.
                let id = self.id;
                self.stack
                    .with(|st| st.listener_ports.wait_for_slot(id, cx.waker()));
                for i in 0..self.backlog {
                    if self.listening[i].is_none() {
                        self.rearm(i);
                    }
                }
            }
            let endpoint = self.endpoint;
            let found = self.stack.with(|st| {
                for (i, h) in self.listening[..self.backlog].iter().enumerate() {
                    let Some(h) = *h else { continue };
                    let ready = st.with_tcb(h, |s, st| match s.state() {
                        TcpState::Listen | TcpState::SynReceived => {
                            s.register_recv_waker(cx.waker(), st.local);
                            false
                        }
                        // Closed before it was handed out (the handshake timed out, the peer
                        // reset it, or its local address went away): listen again. `listen`
                        // cannot fail here: the socket is closed and the endpoint was good.
                        TcpState::Closed => {
                            let _ = s.listen(endpoint);
                            s.register_recv_waker(cx.waker(), st.local);
                            false
                        }
                        // Established, or already closing: hand it out either way, without
                        // the listener's handshake timeout.
                        _ => {
                            event!(tcp_accepted(s));
                            s.set_timeout(None);
                            st.meta.set_connected();
                            true
                        }
                    });
                    if ready {
                        return Some((Some(i), h));
                    }
                }
                None
            });
            match found {
                Some(x) => Poll::Ready(Ok(x)),
                None => Poll::Pending,
            }
        })
        .await?;
        if let Some(i) = i {
            self.listening[i] = None;
            self.rearm(i);
        }
        Ok(TcpSocket {
            conn: Conn {
                stack: self.stack,
                handle,
            },
        })
    }
}

impl TcpListener {
    /// The oldest connection completed from a SYN cookie that is still open, its listener's
    /// timeout cleared, if any; otherwise `waker` is woken when one comes. Those that closed
    /// while they waited (a reset, the listener's timeout) are removed.
    fn take_completed(&mut self, waker: &core::task::Waker) -> Option<TcpHandle> {
        let id = self.id;
        self.stack.with(|st| loop {
            let Some(h) = st.listener_ports.pop_completed(id) else {
                st.listener_ports.wait_for_completed(id, waker);
                return None;
            };
            let open = st.with_tcb(h, |s, st| {
                if s.state() == TcpState::Closed {
                    return false;
                }
                event!(tcp_accepted(s));
                s.set_timeout(None);
                st.meta.set_connected();
                true
            });
            if open {
                return Some(h);
            }
            st.remove_tcb(h);
        })
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        self.stack.with(|st| {
            while let Some(h) = st.listener_ports.pop_completed(self.id) {
                st.remove_tcb(h);
            }
            st.listener_ports.remove(self.id);
            for h in self.listening.iter_mut().filter_map(Option::take) {
                st.remove_tcb(h);
            }
        })
    }
}
