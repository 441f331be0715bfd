//! The IP layer: what the stack checks of every received frame before any protocol sees it
//! ([`check`]; a packet over several slots: [`chain`]), and the addresses it holds and how it gets them ([`autoconf`]: static
//! configuration, DHCPv4, SLAAC and the IPv6 link-local address).
//!
//! [`asked`] remembers which DHCP and DNS servers the stack asked, so that ingress takes
//! answers from those only.
//!
//! [`echo`] answers ICMPv4 echo requests (pings) to the stack's addresses through the
//! neighbour table, so that a reply to a sender not resolved yet waits for the ARP answer.
//!
//! [`emit`] writes the IP header of the packets zcnet builds itself; [`checksum`] verifies and
//! computes their TCP checksums.
//!
//! Depends on [`link`](crate::link) only; the transport layer and the sockets depend on it.

pub(crate) mod asked;
pub(crate) mod autoconf;
pub(crate) mod chain;
pub(crate) mod check;
pub(crate) mod checksum;
pub(crate) mod echo;
pub(crate) mod emit;
