//! Sockets over the stack.
//!
//! Every socket operation takes the stack lock for one bounded step through
//! [`State::with_socket`](crate::stack::State::with_socket), which lends the operation its own
//! smoltcp socket and a [`SocketCx`]: the rest of the state an operation may need, borrowed
//! apart from the socket set so that no two `&mut` ever alias.

mod buffers;
pub mod dns;
pub mod icmp;
mod io;
pub mod raw;
pub mod tcp;
mod tcp_listener;
pub mod udp;

pub use buffers::PacketBuffers;
pub use smoltcp::storage::PacketMetadata;

use core::task::Waker;

use smoltcp::iface::Interface;

use crate::socket_meta::SocketMetas;

/// What a socket operation may touch besides its own socket: the interface (for a connect's
/// source address), the per-slot socket records, and egress's waker.
pub(crate) struct SocketCx<'a> {
    pub(crate) iface: &'a mut Interface,
    pub(crate) metas: &'a mut SocketMetas,
    pub(crate) egress_waker: Option<&'a Waker>,
}

impl SocketCx<'_> {
    /// Wakes the egress task: the operation queued work for it.
    pub(crate) fn signal_egress(&self) {
        if let Some(w) = self.egress_waker {
            w.wake_by_ref();
        }
    }
}
