//! Local ports: which ones the stack's sockets use, and the one allocator every ephemeral port
//! comes from.
//!
//! A UDP port is in use while a smoltcp [`UdpSocket`](crate::udp::UdpSocket) is bound to it
//! (also while a dropped one still sends what it queued), a zero-copy
//! [`DatagramSocket`](crate::datagram::DatagramSocket) is bound to it, the DHCPv4 client runs
//! (68), or a [`DnsSocket`](crate::dns::DnsSocket) query is in flight from it. A TCP port is in
//! use while a TCP socket is bound to it or listens on it.
//!
//! Ephemeral ports come from the dynamic range (49152–65535), among the ports no socket uses
//! for either protocol, chosen so that an attacker off the path cannot guess them (RFC 6056):
//!
//! * TCP `connect` takes its port from [`State::connect_port`], RFC 6056's algorithm 4
//!   ("double-hash"): the port is `49152 + (F(local address, remote address, remote port) +
//!   table[G(same)]) mod 16384`, with `F` and `G` two halves of the stack's keyed hash
//!   (`keys.rs`) and `table` [`PORT_TABLE`] counters. Each port tried advances the counter by
//!   one and a port taken by a further random 0–7 (as Linux does), so successive
//!   connections to one destination do not get consecutive ports, yet a four-tuple is not
//!   used again soon; connections to different destinations get unrelated ports, and a peer
//!   that sees its own connections' ports learns nothing of the ports used towards others.
//! * UDP `bind` to port 0 and zero-copy `bind` to port 0 have no remote end: their port is
//!   drawn from the stack's keyed random stream ([`State::ephemeral_port`]; RFC 6056's
//!   algorithm 1 with an unpredictable generator).
//!
//! Binding a UDP or zero-copy socket to a port a DNS query is using fails with
//! [`StackError::AddressInUse`](crate::StackError::AddressInUse).
//!
//! # DNS query ports
//!
//! smoltcp's DNS socket picks each query's port itself (at random above 1024, from the
//! interface's generator) and keeps it private; it shows only in the socket's `Debug` output,
//! which is where the stack reads it ([`query_ports`]: a scan of the text for `port: `, no
//! allocation). [`State::start_dns_query`] reads the socket's query ports before and after
//! starting a query (the new port is the difference of the sums), and when that port is in
//! use by another socket, or by another query, it cancels the query and starts it again on a
//! new random port, at most [`DNS_PORT_TRIES`] times. A DNS socket costs the allocator one
//! such scan per candidate port (a few hundred bytes of text per query in flight).
//!
//! Should smoltcp's `Debug` output ever stop showing the port, the scan finds no new port and
//! the query goes ahead unchecked (smoltcp's own choice, as without this module); the stack's
//! tests (`tests/tests/stack_defects.rs`) catch that.

use core::fmt::{self, Write};

use smoltcp::iface::SocketHandle;
use smoltcp::socket::{dns, Socket};
use smoltcp::wire::{DnsQueryType, IpEndpoint};

use crate::keys::{Prf, Use};
use crate::stack::State;

/// The first port of the dynamic range (RFC 6335).
const FIRST: u16 = 49152;
/// How many ports the dynamic range holds (16384).
const SPAN: u32 = (u16::MAX - FIRST) as u32 + 1;
/// Counters in RFC 6056 algorithm 4's table ([`ConnectPorts`]).
pub(crate) const PORT_TABLE: usize = 256;

/// The state of RFC 6056's algorithm 4 (see the [module docs](self)): the keyed hash and the
/// table of counters.
pub(crate) struct ConnectPorts {
    prf: Prf,
    table: [u16; PORT_TABLE],
}

impl ConnectPorts {
    /// The algorithm keyed with `prf`, its counters at zero (the keyed offset makes their
    /// starting value unpredictable).
    pub(crate) fn new(prf: Prf) -> Self {
        Self {
            prf,
            table: [0; PORT_TABLE],
        }
    }

    /// The keyed offset and the table index of a connection from `local` to `remote`.
    fn offset_and_index(
        &self,
        local: Option<smoltcp::wire::IpAddress>,
        remote: IpEndpoint,
    ) -> (u32, usize) {
        let h = self.prf.destination(Use::Port, local, remote);
        (h as u32, (h >> 32) as usize % PORT_TABLE)
    }
}

/// Port number `n` of the dynamic range, counted modulo its size.
fn dynamic_port(n: u32) -> u16 {
    FIRST + (n % SPAN) as u16
}

/// How many random ports [`State::start_dns_query`] tries before it gives up.
pub(crate) const DNS_PORT_TRIES: usize = 16;

/// Why [`State::start_dns_query`] started no query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DnsStartError {
    /// smoltcp refused it (no free query slot, a bad name).
    Query(dns::StartQueryError),
    /// Every port tried was in use.
    NoFreePort,
}

/// Feeds the ports of `d`'s queries in flight, in slot order, to `f` until `f` returns `false`.
///
/// They are read from the socket's derived `Debug` output: each pending query prints
/// `port: <n>` (no other field of the socket has a name ending in ` port`).
pub(crate) fn query_ports(d: &dns::Socket<'_>, f: impl FnMut(u16) -> bool) {
    let mut scan = PortScan::new(f);
    // `Err` only when `f` asked to stop.
    if write!(scan, "{d:?}").is_ok() {
        scan.finish();
    }
}

/// The streaming matcher behind [`query_ports`].
struct PortScan<F> {
    /// Bytes of [`KEY`] matched so far.
    matched: usize,
    /// Right after [`KEY`]: reading the number that follows.
    in_number: bool,
    /// The number's value so far (`None` until its first digit).
    value: Option<u32>,
    f: F,
}

/// What precedes a query's port in smoltcp's `Debug` output.
const KEY: &[u8] = b" port: ";

impl<F: FnMut(u16) -> bool> PortScan<F> {
    fn new(f: F) -> Self {
        Self {
            matched: 0,
            in_number: false,
            value: None,
            f,
        }
    }

    /// Ends a number in progress, handing it to `f` if it is a port; `false` when `f` asked
    /// to stop.
    fn finish(&mut self) -> bool {
        self.in_number = false;
        match self.value.take().map(u16::try_from) {
            Some(Ok(port)) => (self.f)(port),
            _ => true,
        }
    }

    fn byte(&mut self, b: u8) -> bool {
        if self.in_number {
            if b.is_ascii_digit() {
                let v = self.value.unwrap_or(0);
                // Saturates past any port: such a number is skipped by `finish`.
                self.value = Some((v * 10 + u32::from(b - b'0')).min(1 << 20));
                return true;
            }
            if !self.finish() {
                return false;
            }
        }
        if b == KEY[self.matched] {
            self.matched += 1;
            if self.matched == KEY.len() {
                self.matched = 0;
                self.in_number = true;
            }
        } else {
            // Only the first byte of KEY (a space) can restart a match.
            self.matched = usize::from(b == KEY[0]);
        }
        true
    }
}

impl<F: FnMut(u16) -> bool> Write for PortScan<F> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if !self.byte(b) {
                return Err(fmt::Error);
            }
        }
        Ok(())
    }
}

/// Whether one of `d`'s queries in flight uses `port`.
fn dns_uses(d: &dns::Socket<'_>, port: u16) -> bool {
    let mut found = false;
    query_ports(d, |p| {
        found = p == port;
        !found
    });
    found
}

/// The sum and the number of `d`'s query ports.
fn port_sum(d: &dns::Socket<'_>) -> (u32, usize) {
    let (mut sum, mut n) = (0u32, 0);
    query_ports(d, |p| {
        sum = sum.wrapping_add(u32::from(p));
        n += 1;
        true
    });
    (sum, n)
}

impl State {
    /// A port from the dynamic range (49152–65535) that no socket of this stack uses, for TCP
    /// or UDP, drawn from the keyed random stream (see the [module docs](self)) for binds to
    /// port 0, or `None` when all are taken.
    pub(crate) fn ephemeral_port(&mut self) -> Option<u16> {
        let start = self.random_u32();
        (0..SPAN)
            .map(|i| dynamic_port(start.wrapping_add(i)))
            .find(|&port| self.port_free(port))
    }

    /// The local port for a TCP connection to `remote`: RFC 6056's algorithm 4 (see the
    /// [module docs](self)), among the ports no socket uses, or `None` when all are taken.
    pub(crate) fn connect_port(&mut self, remote: IpEndpoint) -> Option<u16> {
        let local = self.iface.get_source_address(&remote.addr);
        let (offset, index) = self.ports.offset_and_index(local, remote);
        for _ in 0..SPAN {
            let counter = self.ports.table[index];
            self.ports.table[index] = counter.wrapping_add(1);
            // SPAN divides 2^32: the sum may wrap.
            let port = dynamic_port(offset.wrapping_add(u32::from(counter)));
            if self.port_free(port) {
                let step = (self.random_u32() % 8) as u16;
                self.ports.table[index] = self.ports.table[index].wrapping_add(step);
                return Some(port);
            }
        }
        None
    }

    /// Whether no socket uses `port`, for TCP or UDP.
    fn port_free(&self, port: u16) -> bool {
        !self.tcp_port_in_use(port) && !self.udp_port_in_use(port, None)
    }

    fn tcp_port_in_use(&self, port: u16) -> bool {
        self.tcp.uses_port(port)
    }

    /// Whether a socket other than `except` uses UDP `port` (see the [module docs](self)).
    pub(crate) fn udp_port_in_use(&self, port: u16, except: Option<SocketHandle>) -> bool {
        self.zc.uses_port(port)
            || self.sockets.iter().any(|(h, s)| match s {
                _ if Some(h) == except => false,
                Socket::Udp(u) => u.endpoint().port == port,
                Socket::Dhcpv4(_) => port == 68,
                Socket::Dns(d) => dns_uses(d, port),
                #[allow(unreachable_patterns)]
                _ => false,
            })
    }

    /// Whether a DNS query in flight uses UDP `port` (an explicit bind to it is refused).
    pub(crate) fn dns_query_uses(&self, port: u16) -> bool {
        self.sockets.iter().any(|(_, s)| match s {
            Socket::Dns(d) => dns_uses(d, port),
            #[allow(unreachable_patterns)]
            _ => false,
        })
    }

    /// Starts a query for `name` on the DNS socket `handle` from a local port no other socket
    /// or query uses (see the [module docs](self#dns-query-ports)).
    pub(crate) fn start_dns_query(
        &mut self,
        handle: SocketHandle,
        name: &str,
        kind: DnsQueryType,
    ) -> Result<dns::QueryHandle, DnsStartError> {
        // A query to send, or one cancelled: smoltcp's next deadline changes.
        self.smoltcp_touched();
        for _ in 0..DNS_PORT_TRIES {
            let d = self.sockets.get_mut::<dns::Socket>(handle);
            let (before, n) = port_sum(d);
            let q = d
                .start_query(self.iface.context(), name, kind)
                .map_err(DnsStartError::Query)?;
            let (after, m) = port_sum(d);
            if m != n + 1 {
                // The port cannot be read (see the module docs): smoltcp's choice stands.
                return Ok(q);
            }
            // Truncation is exact: the sums differ by one port.
            let port = after.wrapping_sub(before) as u16;
            let mut uses = 0;
            query_ports(d, |p| {
                uses += usize::from(p == port);
                true
            });
            if uses == 1 && !self.udp_port_in_use(port, Some(handle)) {
                return Ok(q);
            }
            self.sockets.get_mut::<dns::Socket>(handle).cancel_query(q);
        }
        Err(DnsStartError::NoFreePort)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::PortScan;
    use core::fmt::Write;

    fn ports(text: &str) -> Vec<u16> {
        let mut out = Vec::new();
        let mut scan = PortScan::new(|p| {
            out.push(p);
            true
        });
        // Fed in pieces, as `Debug` writes it.
        for piece in text.as_bytes().chunks(3) {
            scan.write_str(core::str::from_utf8(piece).unwrap())
                .unwrap();
        }
        scan.finish();
        out
    }

    #[test]
    fn ports_are_read_from_debug_text() {
        let text = "Socket { servers: [10.0.0.2], queries: Owned([Some(DnsQuery { state: \
                    Pending(PendingQuery { name: [4, 104], type_: A, port: 40001, txid: 7 }) }), \
                    None, Some(DnsQuery { state: Pending(PendingQuery { name: [], type_: A, \
                    port: 1025, txid: 8 }) })]), hop_limit: None }";
        assert_eq!(ports(text), [40001, 1025]);
        // Look-alikes are not ports: another field name, a number too large, no space.
        assert_eq!(
            ports("src_port: 5, port: 70000, x{port: 9}, port: 12"),
            [12]
        );
        assert_eq!(ports("  port:  port: 80"), [80]);
        assert_eq!(ports(""), []);
    }

    #[test]
    fn dynamic_ports_wrap_around_the_range() {
        use super::{dynamic_port, ConnectPorts, PORT_TABLE};
        assert_eq!(dynamic_port(0), 49152);
        assert_eq!(dynamic_port(16383), 65535);
        assert_eq!(dynamic_port(16384), 49152);
        // The range's size divides 2^32: a sum that wraps continues where it left off.
        assert_eq!(dynamic_port(u32::MAX), 65535);
        assert_eq!(dynamic_port(u32::MAX.wrapping_add(1)), 49152);
        // Offset and index come from one keyed hash of the destination.
        let prf = crate::keys::Prf::new(&crate::config::Secret::new([9; 16]));
        let ports = ConnectPorts::new(prf.clone());
        let remote = smoltcp::wire::IpEndpoint::new(smoltcp::wire::IpAddress::v4(10, 0, 0, 2), 80);
        let local = Some(smoltcp::wire::IpAddress::v4(10, 0, 0, 1));
        let h = prf.destination(crate::keys::Use::Port, local, remote);
        assert_eq!(
            ports.offset_and_index(local, remote),
            (h as u32, (h >> 32) as usize % PORT_TABLE)
        );
        let other = smoltcp::wire::IpEndpoint::new(remote.addr, 81);
        assert_ne!(
            ports.offset_and_index(local, remote),
            ports.offset_and_index(local, other)
        );
    }

    #[test]
    fn a_scan_stops_when_asked() {
        let mut seen = 0;
        let mut scan = PortScan::new(|_| {
            seen += 1;
            false
        });
        assert!(scan.write_str(" port: 1, port: 2,").is_err());
        assert_eq!(seen, 1);
    }
}
