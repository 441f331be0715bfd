//! Sockets over the stack.
//!
//! Every socket operation borrows the stack's state for one bounded step through
//! [`State::with_socket`](crate::stack::State::with_socket), which lends the operation its own
//! smoltcp socket and a [`SocketCx`] (the rest of the state an operation may need, borrowed
//! apart from the socket set so that no two `&mut` ever alias), or, for TCP,
//! [`State::with_tcb`](crate::stack::State::with_tcb), which lends it the connection and its
//! record.

mod buffers;
pub mod datagram;
pub mod dns;
pub mod icmp;
mod io;
pub(crate) mod meta;
pub mod raw;
pub mod tcp;
mod tcp_listener;
pub mod udp;

pub use buffers::PacketBuffers;
pub use smoltcp::storage::PacketMetadata;

use core::task::Waker;

use smoltcp::iface::Interface;

/// What a socket operation may touch besides its own socket: the interface (for source
/// addresses and routes) and egress's waker.
pub(crate) struct SocketCx<'a> {
    pub(crate) iface: &'a mut Interface,
    pub(crate) egress_waker: Option<&'a Waker>,
    /// The stack's local spawner, if it has one (see `State::local`).
    pub(crate) local: Option<zcnet_executor::LocalSpawner>,
}

impl SocketCx<'_> {
    /// Wakes the egress task: the operation queued work for it.
    pub(crate) fn signal_egress(&self) {
        if let Some(w) = self.egress_waker {
            crate::stack::wake(self.local.as_ref(), w);
        }
    }
}

/// Whether smoltcp can send to `addr` at all: an address on one of the interface's subnets, an
/// IPv6 link-local or multicast address, the IPv4 broadcast address, or one a route (the default
/// route included) covers. smoltcp drops packets to anything else silently when it sends them,
/// so datagram sockets check first and report the destination as unaddressable.
pub(crate) fn routable(iface: &mut Interface, addr: &crate::config::IpAddress) -> bool {
    use crate::config::IpAddress;
    if addr.is_unspecified() {
        return false;
    }
    let on_link = match addr {
        IpAddress::Ipv4(a) => a.is_broadcast(),
        IpAddress::Ipv6(a) => a.is_unicast_link_local() || a.is_multicast(),
    };
    let has_source = match addr {
        IpAddress::Ipv4(_) => iface.get_source_address(addr).is_some(),
        IpAddress::Ipv6(_) => true,
    };
    if on_link || iface.ip_addrs().iter().any(|c| c.contains_addr(addr)) {
        return has_source;
    }
    let mut routed = false;
    iface.routes_mut().update(|routes| {
        routed = routes.iter().any(|r| r.cidr.contains_addr(addr));
    });
    routed && has_source
}
