//! [`TcpListener`]: accepts connections on one endpoint with a real backlog.

use core::future::poll_fn;
use core::task::Poll;

use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;

use super::tcp::{add_socket, Conn, TcpBuffers, TcpSocket, TcpState};
use crate::config::IpListenEndpoint;
use crate::stack::Stack;
use crate::StackError;

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
        let endpoint = endpoint.into();
        if endpoint.port == 0 {
            return Err(StackError::Unaddressable);
        }
        stack.with(|st| st.listener_ports.add(endpoint.port))?;
        let mut l = Self {
            stack,
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
        let endpoint = self.endpoint;
        let ok = self.stack.with(|st| {
            let r = st.sockets.get_mut::<tcp::Socket>(handle).listen(endpoint);
            if r.is_err() {
                st.remove_socket(handle);
            }
            r.is_ok()
        });
        if !ok {
            return Err(StackError::Unaddressable);
        }
        self.listening[i] = Some(handle);
        Ok(())
    }

    /// Waits for the next established connection. The listening socket that became it is
    /// replaced by a fresh one (when the stack has a slot and `make_buffers` gives buffers;
    /// otherwise the next `accept` tries again).
    pub async fn accept(&mut self) -> TcpSocket {
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
                        _ => {
                            st.metas.set_connected(h);
                            return Some((i, h));
                        }
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
        TcpSocket {
            conn: Conn {
                stack: self.stack,
                handle,
            },
        }
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        self.stack.with(|st| {
            for h in self.listening.iter_mut().filter_map(Option::take) {
                st.remove_socket(h);
            }
            st.listener_ports.remove(self.endpoint.port);
        })
    }
}
