//! UDP over smoltcp's sockets: [`UdpSocket`] with `send_to` / `recv_from` and in-place
//! variants. (For datagrams that stay in the driver's slots, see
//! [`datagram`](crate::datagram).)
//!
//! # Copies per payload byte
//!
//! smoltcp copies each datagram once into its packet buffer on receive and once from it into
//! the frame on send. `recv_from_with` / `send_to_with` add none; `recv_from` / `send_to` add
//! one (buffer ↔ the caller's slice). The copy ledger records all of them: smoltcp's as
//! [`CopySite::StackRx`] / [`CopySite::Emit`] (when the application takes or queues the
//! datagram: smoltcp does not report its copies), ours as [`CopySite::SocketToApp`] /
//! [`CopySite::AppToSocket`].

use core::future::poll_fn;
use core::task::Poll;

use smoltcp::iface::SocketHandle;
use smoltcp::socket::udp;
use zcnet_buffer::ledger::{self, CopySite};

use crate::config::{IpEndpoint, IpListenEndpoint};
use crate::socket::{PacketBuffers, SocketCx};
use crate::stack::Stack;
use crate::StackError;

/// Why a UDP operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpError {
    /// The socket is not bound.
    Unbound,
    /// The destination cannot be used (no route, port 0, unspecified address).
    Unaddressable,
    /// The datagram does not fit the socket's send buffer at all.
    TooLarge,
    /// The received datagram was longer than the buffer given to `recv_from` (the rest is lost).
    Truncated,
}

impl core::fmt::Display for UdpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            UdpError::Unbound => "socket not bound",
            UdpError::Unaddressable => "unaddressable endpoint",
            UdpError::TooLarge => "datagram larger than the send buffer",
            UdpError::Truncated => "datagram truncated",
        })
    }
}

impl core::error::Error for UdpError {}

/// Buffers for a UDP socket: payload bytes and per-datagram metadata, for each direction
/// (see [`PacketBuffers`]).
pub type UdpBuffers = PacketBuffers<udp::UdpMetadata>;

/// A UDP socket.
#[derive(Debug)]
pub struct UdpSocket {
    stack: Stack,
    handle: SocketHandle,
}

impl UdpSocket {
    /// A socket bound to `endpoint`; port 0 picks a free ephemeral port at random (see
    /// [`local_port`](Self::local_port)).
    ///
    /// Errors: [`StackError::Unaddressable`] when no ephemeral port is free,
    /// [`StackError::AddressInUse`] when a zero-copy
    /// [`DatagramSocket`](crate::datagram::DatagramSocket) receives on an overlapping endpoint
    /// or a [`DnsSocket`](crate::dns::DnsSocket) query in flight uses the port,
    /// [`StackError::NoSocketSlot`] when the stack's socket storage is full.
    pub fn bind(
        stack: Stack,
        endpoint: impl Into<IpListenEndpoint>,
        buffers: UdpBuffers,
    ) -> Result<Self, StackError> {
        let mut endpoint = endpoint.into();
        let mut s = udp::Socket::new(buffers.rx, buffers.tx);
        let handle = stack.with(|st| {
            if endpoint.port == 0 {
                endpoint.port = st.ephemeral_port().ok_or(StackError::Unaddressable)?;
            }
            if st.zc.conflicts(&endpoint) || st.dns_query_uses(endpoint.port) {
                return Err(StackError::AddressInUse);
            }
            s.bind(endpoint).map_err(|_| StackError::Unaddressable)?;
            st.add_socket(s)
        })?;
        Ok(Self { stack, handle })
    }

    /// The port this socket is bound to.
    pub fn local_port(&self) -> u16 {
        self.with(|s, _| s.endpoint().port)
    }

    fn with<R>(&self, f: impl FnOnce(&mut udp::Socket<'static>, &mut SocketCx<'_>) -> R) -> R {
        self.stack.with(|st| st.with_socket(self.handle, f))
    }

    /// Sends `data` to `remote`, waiting while the send buffer is full.
    pub async fn send_to(
        &self,
        data: &[u8],
        remote: impl Into<IpEndpoint>,
    ) -> Result<(), UdpError> {
        let remote = remote.into();
        self.send_to_with(data.len(), remote, |buf| {
            ledger::copy(CopySite::AppToSocket, buf, data);
        })
        .await
    }

    /// Reserves `len` bytes in the send buffer for a datagram to `remote` and lets `f` write them
    /// in place.
    pub async fn send_to_with(
        &self,
        len: usize,
        remote: IpEndpoint,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<(), UdpError> {
        let mut f = Some(f);
        poll_fn(|cx| {
            self.with(|s, st| {
                if len > s.payload_send_capacity() {
                    return Poll::Ready(Err(UdpError::TooLarge));
                }
                match s.send(len, remote) {
                    Ok(buf) => {
                        (f.take().expect("polled after completion"))(buf);
                        // smoltcp copies the datagram buffer → frame when it emits it.
                        ledger::record(CopySite::Emit, len);
                        st.signal_egress();
                        Poll::Ready(Ok(()))
                    }
                    Err(udp::SendError::BufferFull) => {
                        s.register_send_waker(cx.waker());
                        Poll::Pending
                    }
                    Err(udp::SendError::Unaddressable) => Poll::Ready(Err(UdpError::Unaddressable)),
                }
            })
        })
        .await
    }

    /// Receives one datagram into `buf`: its length and sender. A datagram longer than `buf`
    /// is cut to fit and reported as [`UdpError::Truncated`].
    pub async fn recv_from(&self, buf: &mut [u8]) -> Result<(usize, IpEndpoint), UdpError> {
        self.recv_from_with(|data, from| {
            let n = ledger::copy(CopySite::SocketToApp, buf, data);
            if n < data.len() {
                Err(UdpError::Truncated)
            } else {
                Ok((n, from))
            }
        })
        .await
    }

    /// Gives `f` the next datagram in place, with its sender.
    pub async fn recv_from_with<R>(&self, f: impl FnOnce(&[u8], IpEndpoint) -> R) -> R {
        let mut f = Some(f);
        poll_fn(|cx| {
            self.with(|s, _| match s.recv() {
                Ok((data, meta)) => {
                    // smoltcp copied the datagram frame → buffer when it arrived.
                    ledger::record(CopySite::StackRx, data.len());
                    Poll::Ready((f.take().expect("polled after completion"))(
                        data,
                        meta.endpoint,
                    ))
                }
                Err(_) => {
                    s.register_recv_waker(cx.waker());
                    Poll::Pending
                }
            })
        })
        .await
    }
}

impl Drop for UdpSocket {
    /// Datagrams already accepted by `send_to` are still sent after the socket is dropped (for up
    /// to three seconds, e.g. while the neighbour resolves); the port is free again once they
    /// are.
    fn drop(&mut self) {
        let handle = self.handle;
        let now = self.stack.now();
        self.stack.with(|st| st.drop_datagram_socket(handle, now))
    }
}
