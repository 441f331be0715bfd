//! Whom the stack asked: the DHCP server its client chose and the DNS server each query went
//! to, read off the requests as smoltcp sends them, so that ingress takes answers only from
//! the server asked.
//!
//! smoltcp keeps both private. Its DHCPv4 client accepts an ACK or NAK that carries its
//! transaction ID and MAC and *any* server identifier, although it chose one server's offer
//! (RFC 2131 §4.3.2 has servers tell their replies apart by that identifier); its DNS socket
//! accepts an answer from any of its servers on port 53, or from anyone on port 5353
//! (multicast DNS, which zcnet never sends a query for). So every frame smoltcp transmits
//! passes [`Asked::sent`] ([`TxWatch`], `link/device.rs`) while a DNS socket is open or the
//! DHCP client runs:
//!
//! * a DHCPDISCOVER forgets the server (offers come from anyone); a DHCPREQUEST with a server
//!   identifier option (the client chose that server's offer) records it with the transaction
//!   ID; one without (renewing or rebinding) records the transaction ID, and the server is the
//!   one that granted the lease ([`Dhcpv4Lease::server`](crate::Dhcpv4Lease::server));
//! * a UDP datagram to port 53 records its destination address against its source port (the
//!   query's port), in a ring of [`DNS_QUERIES`] records.
//!
//! Ingress then drops, counted as [`DropReason::UnexpectedAnswer`](crate::DropReason), a DHCP
//! ACK or NAK for the current transaction whose server identifier is not the recorded server
//! ([`dhcp_reply_expected`], called by `ip/check.rs`), and a datagram that smoltcp's DNS socket
//! would take unless it comes from port 53 of the server the query on its destination port
//! asked (`socket/dns.rs`, [`Asked::dns_server`]).

use smoltcp::wire::{
    DhcpMessageType, DhcpPacket, DhcpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    IpAddress, IpProtocol, Ipv4Address, Ipv4Packet, Ipv6Packet, UdpPacket,
};

use crate::link::device::TxWatch;
use crate::stack::State;

/// DNS queries whose server is remembered at once; with more in flight, the oldest records go
/// and their answers are taken from any of the stack's DNS servers.
pub(crate) const DNS_QUERIES: usize = 8;

const DNS_PORT: u16 = 53;
const DHCP_SERVER_PORT: u16 = 67;
const DHCP_CLIENT_PORT: u16 = 68;

/// The DHCP client's current request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DhcpAsked {
    xid: u32,
    /// The server whose offer the client chose; `None`: the lease's server.
    server: Option<Ipv4Address>,
}

/// What the stack asked of whom (part of its state).
#[derive(Debug)]
pub(crate) struct Asked {
    dhcp: Option<DhcpAsked>,
    /// (query port, server) of the latest DNS queries sent.
    dns: [Option<(u16, IpAddress)>; DNS_QUERIES],
    /// The record the next new query port takes.
    next: usize,
    /// [`DnsSocket`](crate::dns::DnsSocket)s open: with none, and no DHCP client, nothing
    /// needs watching ([`watch`](Self::watch)).
    pub(crate) resolvers: usize,
}

impl Asked {
    pub(crate) const fn new() -> Self {
        Self {
            dhcp: None,
            dns: [None; DNS_QUERIES],
            next: 0,
            resolvers: 0,
        }
    }

    /// The watch for a step's device: `self` while a DNS socket is open or the stack runs a
    /// DHCP client (`dhcp`), else none (a frame costs nothing then).
    pub(crate) fn watch(&mut self, dhcp: bool) -> Option<&mut dyn TxWatch> {
        if self.resolvers > 0 || dhcp {
            Some(self)
        } else {
            None
        }
    }

    /// The server the latest query from local `port` was sent to, if it is remembered.
    pub(crate) fn dns_server(&self, port: u16) -> Option<IpAddress> {
        self.dns
            .iter()
            .flatten()
            .find(|(p, _)| *p == port)
            .map(|&(_, s)| s)
    }

    fn dns_sent(&mut self, port: u16, server: IpAddress) {
        let at = match self
            .dns
            .iter()
            .position(|r| r.is_some_and(|(p, _)| p == port))
        {
            Some(i) => i,
            None => {
                let i = self.next;
                self.next = (self.next + 1) % DNS_QUERIES;
                i
            }
        };
        self.dns[at] = Some((port, server));
    }

    fn dhcp_sent(&mut self, dhcp: &[u8]) {
        let Ok(packet) = DhcpPacket::new_checked(dhcp) else {
            return;
        };
        let Ok(repr) = DhcpRepr::parse(&packet) else {
            return;
        };
        match repr.message_type {
            DhcpMessageType::Discover => self.dhcp = None,
            DhcpMessageType::Request => {
                self.dhcp = Some(DhcpAsked {
                    xid: repr.transaction_id,
                    server: repr.server_identifier,
                })
            }
            _ => {}
        }
    }
}

impl TxWatch for Asked {
    fn sent(&mut self, frame: &[u8]) {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return;
        };
        let (dst, udp) = match eth.ethertype() {
            EthernetProtocol::Ipv4 => match Ipv4Packet::new_checked(eth.payload()) {
                Ok(p) if p.next_header() == IpProtocol::Udp => {
                    (IpAddress::Ipv4(p.dst_addr()), p.payload())
                }
                _ => return,
            },
            EthernetProtocol::Ipv6 => match Ipv6Packet::new_checked(eth.payload()) {
                Ok(p) if p.next_header() == IpProtocol::Udp => {
                    (IpAddress::Ipv6(p.dst_addr()), p.payload())
                }
                _ => return,
            },
            _ => return,
        };
        let Ok(udp) = UdpPacket::new_checked(udp) else {
            return;
        };
        match (udp.src_port(), udp.dst_port()) {
            (DHCP_CLIENT_PORT, DHCP_SERVER_PORT) => self.dhcp_sent(udp.payload()),
            (port, DNS_PORT) => self.dns_sent(port, dst),
            _ => {}
        }
    }
}

/// Whether the DHCP reply `dhcp` (a UDP payload from port 67 to 68) may go to the client: it
/// is not an ACK or NAK for the client's current request carrying another server identifier
/// than the server asked (see the module docs). What smoltcp ignores anyway (other
/// transactions, other clients' MACs, offers, malformed messages) passes.
pub(crate) fn dhcp_reply_expected(st: &State, dhcp: &[u8]) -> bool {
    let Some(asked) = st.asked.dhcp else {
        return true;
    };
    let Ok(packet) = DhcpPacket::new_checked(dhcp) else {
        return true;
    };
    let Ok(repr) = DhcpRepr::parse(&packet) else {
        return true;
    };
    let ours = match st.iface.hardware_addr() {
        smoltcp::wire::HardwareAddress::Ethernet(m) => m,
        #[allow(unreachable_patterns)]
        _ => EthernetAddress([0; 6]),
    };
    if !matches!(
        repr.message_type,
        DhcpMessageType::Ack | DhcpMessageType::Nak
    ) || repr.transaction_id != asked.xid
        || repr.client_hardware_address != ours
    {
        return true;
    }
    let server = asked.server.or_else(|| st.autoconf.lease.map(|l| l.server));
    server.is_none_or(|s| repr.server_identifier == Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query's port maps to the server it was last sent to; with more ports than records, the
    /// oldest go first.
    #[test]
    fn dns_queries_remember_their_server() {
        let server = |n: u8| IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, n));
        let mut asked = Asked::new();
        asked.dns_sent(5000, server(1));
        asked.dns_sent(5000, server(2));
        assert_eq!(
            asked.dns_server(5000),
            Some(server(2)),
            "the latest send counts"
        );
        for p in 0..DNS_QUERIES as u16 - 1 {
            asked.dns_sent(6000 + p, server(3));
        }
        assert_eq!(asked.dns_server(5000), Some(server(2)));
        asked.dns_sent(7000, server(4));
        assert_eq!(asked.dns_server(5000), None, "the oldest record went");
        assert_eq!(asked.dns_server(7000), Some(server(4)));
        assert_eq!(asked.dns_server(6000), Some(server(3)));
    }
}
