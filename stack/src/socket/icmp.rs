//! ICMP echo: [`IcmpSocket`] sends echo requests ("pings") over IPv4 and IPv6 and receives the
//! replies; [`IcmpSocket::ping`] does both and measures the round trip.
//!
//! A zcnet stack answers pings by itself (IPv4: `ip/echo.rs`, which holds a reply until the
//! sender's MAC is known; IPv6: smoltcp's `auto-icmp-echo-reply`): no socket is needed to be
//! pingable.
//!
//! A socket is bound to an *identifier* (the echo message's `ident` field) and receives only
//! echo messages carrying it, so several sockets can ping at once with different identifiers.
//! Every future here is cancel-safe: a message is taken from or put into the socket's queue only
//! in the poll that returns `Ready`.

use core::future::poll_fn;
use core::task::Poll;
use core::time::Duration;

use smoltcp::iface::SocketHandle;
use smoltcp::socket::icmp;
use smoltcp::wire::{Icmpv4Message, Icmpv4Packet, Icmpv6Message, Icmpv6Packet};
use zcnet_buffer::ledger::{self, CopySite};

use crate::config::IpAddress;
use crate::socket::{routable, PacketBuffers, SocketCx};
use crate::stack::Stack;
use crate::StackError;

/// Length of an echo message's header (type, code, checksum, identifier, sequence number).
pub const ECHO_HEADER_LEN: usize = 8;

/// Why an ICMP operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcmpError {
    /// The destination cannot be used: the unspecified address, or one the stack has no route
    /// to (not on one of its subnets, and no route, default or other, covers it).
    Unaddressable,
    /// The message does not fit the socket's send buffer at all.
    TooLarge,
    /// The received payload was longer than the buffer given to `recv_echo` (the rest is lost).
    Truncated,
    /// [`ping`](IcmpSocket::ping): no matching reply within the timeout.
    TimedOut,
}

impl core::fmt::Display for IcmpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            IcmpError::Unaddressable => "unaddressable destination",
            IcmpError::TooLarge => "message larger than the send buffer",
            IcmpError::Truncated => "payload truncated",
            IcmpError::TimedOut => "no reply in time",
        })
    }
}

impl core::error::Error for IcmpError {}

/// Buffers for an ICMP socket: whole ICMP messages (header included, [`ECHO_HEADER_LEN`] bytes
/// for an echo) with the peer's address, per direction (see [`PacketBuffers`]).
pub type IcmpBuffers = PacketBuffers<IpAddress>;

/// One echo reply, as [`IcmpSocket::recv_echo`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EchoReply {
    /// Who answered.
    pub from: IpAddress,
    /// The sequence number of the request it answers.
    pub seq: u16,
    /// Payload bytes written to the caller's buffer.
    pub len: usize,
}

/// An ICMP socket bound to one echo identifier, for IPv4 and IPv6 alike.
///
/// Dropping it frees its socket slot once the echo requests it queued are sent (see
/// [`Drop`](#impl-Drop-for-IcmpSocket)); until then it also still receives.
#[derive(Debug)]
pub struct IcmpSocket {
    stack: Stack,
    handle: SocketHandle,
    ident: u16,
}

impl IcmpSocket {
    /// A socket that sends echo requests with identifier `ident` and receives the echo
    /// messages carrying it. Pick a different `ident` per concurrent pinger.
    ///
    /// Errors: [`StackError::NoSocketSlot`] when the stack's socket storage is full.
    pub fn bind(stack: Stack, ident: u16, buffers: IcmpBuffers) -> Result<Self, StackError> {
        let mut s = icmp::Socket::new(buffers.rx, buffers.tx);
        s.bind(icmp::Endpoint::Ident(ident))
            .map_err(|_| StackError::Unaddressable)?;
        let handle = stack.with(|st| st.add_socket(s))?;
        Ok(Self {
            stack,
            handle,
            ident,
        })
    }

    /// The identifier this socket is bound to.
    pub fn ident(&self) -> u16 {
        self.ident
    }

    fn with<R>(&self, f: impl FnOnce(&mut icmp::Socket<'static>, &mut SocketCx<'_>) -> R) -> R {
        self.stack.with(|st| st.with_socket(self.handle, f))
    }

    /// Queues an echo request to `remote` with sequence number `seq` and `payload`, waiting
    /// while the send buffer is full. Returns once the request is queued, not sent.
    pub async fn send_echo(
        &self,
        remote: IpAddress,
        seq: u16,
        payload: &[u8],
    ) -> Result<(), IcmpError> {
        self.send_echo_with(remote, seq, payload.len(), |buf| {
            ledger::copy(CopySite::AppToSocket, buf, payload);
        })
        .await
    }

    /// [`send_echo`](Self::send_echo) with a `len`-byte payload that `f` writes in place.
    pub async fn send_echo_with(
        &self,
        remote: IpAddress,
        seq: u16,
        len: usize,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<(), IcmpError> {
        let total = ECHO_HEADER_LEN
            .checked_add(len)
            .ok_or(IcmpError::TooLarge)?;
        let ident = self.ident;
        let mut f = Some(f);
        poll_fn(|cx| {
            self.with(|s, st| {
                if !routable(st.iface, &remote) {
                    // smoltcp would accept it and drop it silently at send time.
                    return Poll::Ready(Err(IcmpError::Unaddressable));
                }
                if total > s.payload_send_capacity() {
                    return Poll::Ready(Err(IcmpError::TooLarge));
                }
                match s.send(total, remote) {
                    Ok(buf) => {
                        let f = f.take().expect("polled after completion");
                        // The checksum is left zero: smoltcp re-emits the message with the real
                        // one (it needs the source address, chosen at send time).
                        match remote {
                            IpAddress::Ipv4(_) => {
                                let mut p = Icmpv4Packet::new_unchecked(buf);
                                p.set_msg_type(Icmpv4Message::EchoRequest);
                                p.set_msg_code(0);
                                p.set_checksum(0);
                                p.set_echo_ident(ident);
                                p.set_echo_seq_no(seq);
                                f(p.data_mut());
                            }
                            IpAddress::Ipv6(_) => {
                                let mut p = Icmpv6Packet::new_unchecked(buf);
                                p.set_msg_type(Icmpv6Message::EchoRequest);
                                p.set_msg_code(0);
                                p.set_checksum(0);
                                p.set_echo_ident(ident);
                                p.set_echo_seq_no(seq);
                                f(p.payload_mut());
                            }
                        }
                        st.signal_egress();
                        Poll::Ready(Ok(()))
                    }
                    Err(icmp::SendError::BufferFull) => {
                        s.register_send_waker(cx.waker());
                        Poll::Pending
                    }
                    Err(icmp::SendError::Unaddressable) => {
                        Poll::Ready(Err(IcmpError::Unaddressable))
                    }
                }
            })
        })
        .await
    }

    /// Receives the next echo reply: the payload is copied into `buf`. A payload longer than
    /// `buf` is cut to fit and reported as [`IcmpError::Truncated`].
    pub async fn recv_echo(&self, buf: &mut [u8]) -> Result<EchoReply, IcmpError> {
        self.recv_echo_with(|from, seq, data| {
            let len = ledger::copy(CopySite::SocketToApp, buf, data);
            if len < data.len() {
                Err(IcmpError::Truncated)
            } else {
                Ok(EchoReply { from, seq, len })
            }
        })
        .await
    }

    /// Gives `f` the next echo reply in place: who sent it, its sequence number and payload.
    ///
    /// Other messages that reach the socket (echo *requests* carrying this socket's identifier,
    /// which the stack answers by itself; malformed messages) are discarded.
    pub async fn recv_echo_with<R>(&self, f: impl FnOnce(IpAddress, u16, &[u8]) -> R) -> R {
        let mut f = Some(f);
        poll_fn(|cx| {
            self.with(|s, _| {
                // Bounded: at most the messages already queued.
                while let Ok((data, from)) = s.recv() {
                    let reply = match from {
                        IpAddress::Ipv4(_) => Icmpv4Packet::new_checked(data)
                            .ok()
                            .filter(|p| p.msg_type() == Icmpv4Message::EchoReply)
                            .map(|p| (p.echo_seq_no(), &data[ECHO_HEADER_LEN..])),
                        IpAddress::Ipv6(_) => Icmpv6Packet::new_checked(data)
                            .ok()
                            .filter(|p| p.msg_type() == Icmpv6Message::EchoReply)
                            .map(|p| (p.echo_seq_no(), &data[ECHO_HEADER_LEN..])),
                    };
                    if let Some((seq, payload)) = reply {
                        let f = f.take().expect("polled after completion");
                        return Poll::Ready(f(from, seq, payload));
                    }
                }
                s.register_recv_waker(cx.waker());
                Poll::Pending
            })
        })
        .await
    }

    /// Pings `remote`: sends an echo request with `seq` and `payload` and waits up to `timeout`
    /// for the reply from `remote` with the same sequence number and payload. Returns the round
    /// trip time on the executor's clock.
    ///
    /// Replies that do not match (late answers to earlier pings, other peers) are consumed and
    /// discarded while waiting. Errors: [`IcmpError::TimedOut`] when no matching reply came
    /// in time (a host that does not exist or does not answer), and the errors of
    /// [`send_echo`](Self::send_echo).
    pub async fn ping(
        &self,
        remote: IpAddress,
        seq: u16,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<Duration, IcmpError> {
        let exec = self.stack.executor();
        let start = exec.now();
        let attempt = async {
            self.send_echo(remote, seq, payload).await?;
            loop {
                let matched = self
                    .recv_echo_with(|from, s, data| from == remote && s == seq && data == payload)
                    .await;
                if matched {
                    return Ok(exec.now() - start);
                }
            }
        };
        // The stack's own executor serves the timer, whatever waker polls this future.
        match exec.timeout(timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(IcmpError::TimedOut),
        }
    }
}

impl Drop for IcmpSocket {
    /// Echo requests already queued are still sent after the socket is dropped (for up to three
    /// seconds, e.g. while the neighbour resolves); the socket's slot is free once they are.
    fn drop(&mut self) {
        let handle = self.handle;
        let now = self.stack.now();
        self.stack.with(|st| st.drop_datagram_socket(handle, now));
    }
}
