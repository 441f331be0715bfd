//! Raw IP: [`RawSocket`] sends and receives whole IP packets of one IP version and protocol
//! number, for protocols the stack does not implement itself.
//!
//! Received packets include their IP header. smoltcp rebuilds that header from the fields it
//! parsed, so IPv4 options, the identification field and fragment flags are not kept (the header
//! arrives as smoltcp would have written it: identification 0, don't-fragment set). Sent
//! packets must be complete IP packets of the socket's version and protocol; smoltcp fills in
//! the IPv4 header checksum and re-emits the header the same way. Packets of the socket's
//! protocol are also handed to the stack's own handling of that protocol, if it has one (a raw
//! socket for UDP sees every UDP packet, and the UDP sockets still get theirs). TCP segments
//! addressed to the stack go to zcnet's own TCP before smoltcp, so a raw socket for TCP does
//! not see them.
//!
//! Every future here is cancel-safe: a packet moves only in the poll that returns `Ready`.

use core::future::poll_fn;
use core::task::Poll;

use smoltcp::iface::SocketHandle;
use smoltcp::socket::raw;
use smoltcp::wire::{Ipv4Packet, Ipv6Packet};
use zcnet_buffer::ledger::{self, CopySite};

pub use smoltcp::wire::{IpProtocol, IpVersion};

use crate::socket::{PacketBuffers, SocketCx};
use crate::stack::Stack;
use crate::StackError;

/// Why a raw IP operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawError {
    /// The packet does not fit the socket's send buffer at all.
    TooLarge,
    /// [`send`](RawSocket::send): not a well-formed IP packet of the socket's version and
    /// protocol (smoltcp would drop it silently when sending).
    Malformed,
    /// The received packet was longer than the buffer given to `recv` (the rest is lost).
    Truncated,
}

impl core::fmt::Display for RawError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            RawError::TooLarge => "packet larger than the send buffer",
            RawError::Malformed => "not an IP packet of the socket's version and protocol",
            RawError::Truncated => "packet truncated",
        })
    }
}

impl core::error::Error for RawError {}

/// Buffers for a raw socket: whole IP packets, headers included, per direction (see
/// [`PacketBuffers`]).
pub type RawBuffers = PacketBuffers<()>;

/// A raw IP socket for one IP version and protocol number.
///
/// Dropping it frees its socket slot once the packets it queued are sent (see
/// [`Drop`](#impl-Drop-for-RawSocket)); until then it also still receives.
#[derive(Debug)]
pub struct RawSocket {
    stack: Stack,
    handle: SocketHandle,
    version: IpVersion,
    protocol: IpProtocol,
}

impl RawSocket {
    /// A socket that receives every IP packet of `version` carrying `protocol` (e.g.
    /// `IpProtocol::Unknown(253)`, a number reserved for experiments) and sends such packets.
    ///
    /// Errors: [`StackError::NoSocketSlot`] when the stack's socket storage is full.
    pub fn new(
        stack: Stack,
        version: IpVersion,
        protocol: IpProtocol,
        buffers: RawBuffers,
    ) -> Result<Self, StackError> {
        let s = raw::Socket::new(Some(version), Some(protocol), buffers.rx, buffers.tx);
        let handle = stack.with(|st| st.add_socket(s))?;
        Ok(Self {
            stack,
            handle,
            version,
            protocol,
        })
    }

    /// The IP version this socket carries.
    pub fn ip_version(&self) -> IpVersion {
        self.version
    }

    /// The protocol number this socket carries.
    pub fn ip_protocol(&self) -> IpProtocol {
        self.protocol
    }

    fn with<R>(&self, f: impl FnOnce(&mut raw::Socket<'static>, &mut SocketCx<'_>) -> R) -> R {
        self.stack.with(|st| st.with_socket(self.handle, f))
    }

    /// Whether `packet` is an IP packet smoltcp will send for this socket.
    fn well_formed(&self, packet: &[u8]) -> bool {
        match self.version {
            IpVersion::Ipv4 => Ipv4Packet::new_checked(packet)
                .is_ok_and(|p| p.version() == 4 && p.next_header() == self.protocol),
            IpVersion::Ipv6 => Ipv6Packet::new_checked(packet)
                .is_ok_and(|p| p.version() == 6 && p.next_header() == self.protocol),
        }
    }

    /// Queues the IP packet `packet` (header included) for sending, waiting while the send
    /// buffer is full. Errors: [`RawError::Malformed`] if it is not an IP packet of this
    /// socket's version and protocol, [`RawError::TooLarge`] if it can never fit the buffer.
    pub async fn send(&self, packet: &[u8]) -> Result<(), RawError> {
        if !self.well_formed(packet) {
            return Err(RawError::Malformed);
        }
        self.send_with(packet.len(), |buf| {
            ledger::copy(CopySite::AppToSocket, buf, packet);
        })
        .await
    }

    /// Reserves `len` bytes in the send buffer and lets `f` write a whole IP packet there in
    /// place. A packet `f` leaves malformed (wrong version or protocol, lengths that do not
    /// match) is dropped by the stack when it would be sent, without an error.
    pub async fn send_with(&self, len: usize, f: impl FnOnce(&mut [u8])) -> Result<(), RawError> {
        let mut f = Some(f);
        poll_fn(|cx| {
            self.with(|s, st| {
                if len > s.payload_send_capacity() {
                    return Poll::Ready(Err(RawError::TooLarge));
                }
                match s.send(len) {
                    Ok(buf) => {
                        (f.take().expect("polled after completion"))(buf);
                        st.signal_egress();
                        Poll::Ready(Ok(()))
                    }
                    Err(_) => {
                        // Buffer full (the only error smoltcp reports here).
                        s.register_send_waker(cx.waker());
                        Poll::Pending
                    }
                }
            })
        })
        .await
    }

    /// Receives one IP packet (header included) into `buf`, returning its length. A packet
    /// longer than `buf` is cut to fit and reported as [`RawError::Truncated`].
    pub async fn recv(&self, buf: &mut [u8]) -> Result<usize, RawError> {
        self.recv_with(|packet| {
            let n = ledger::copy(CopySite::SocketToApp, buf, packet);
            if n < packet.len() {
                Err(RawError::Truncated)
            } else {
                Ok(n)
            }
        })
        .await
    }

    /// Gives `f` the next received IP packet (header included) in place.
    pub async fn recv_with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let mut f = Some(f);
        poll_fn(|cx| {
            self.with(|s, _| match s.recv() {
                Ok(packet) => Poll::Ready((f.take().expect("polled after completion"))(packet)),
                Err(_) => {
                    s.register_recv_waker(cx.waker());
                    Poll::Pending
                }
            })
        })
        .await
    }
}

impl Drop for RawSocket {
    /// Packets already accepted by `send` are still sent after the socket is dropped (for up to
    /// three seconds, e.g. while the neighbour resolves); the socket's slot is free once they
    /// are.
    fn drop(&mut self) {
        let handle = self.handle;
        let now = self.stack.now();
        self.stack.with(|st| st.drop_datagram_socket(handle, now));
    }
}
