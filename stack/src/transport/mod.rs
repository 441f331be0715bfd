//! The transport layer: zcnet's own TCP ([`tcp`]) and the local ports every transport
//! shares ([`ports`]: which ones are in use, and the ephemeral port allocator).
//!
//! UDP, ICMP, DNS and raw IP are smoltcp's; their sockets reach smoltcp through
//! [`State::step`](crate::stack::State::step).

pub(crate) mod ports;
pub(crate) mod tcp;
