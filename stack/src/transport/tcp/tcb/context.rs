//! What the state machine takes from the interface it runs on: the time, the IP MTU, the
//! interface's addresses and the stack's keys for initial sequence numbers and timestamp
//! offsets (smoltcp's crate-private `iface::Context`, cut down to the calls `socket/tcp.rs`
//! makes, with [`TcpKeys`] in place of its random generator), and what it gives back:
//! [`PollAt`].

use smoltcp::iface::Interface;
use smoltcp::time::Instant;
use smoltcp::wire::{IpAddress, IpEndpoint, TcpSeqNumber};

use crate::keys::{Prf, Use};

/// When a connection next needs `dispatch` (smoltcp's crate-private `socket::PollAt`).
///
/// The variants are ordered `Now < Time(_) < Ingress`, with earlier instants first, so the
/// earliest of several deadlines is their `min`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PollAt {
    /// Something is ready to send now.
    Now,
    /// Something becomes due at this instant (a timer).
    Time(Instant),
    /// Nothing to do until a segment arrives or the application acts.
    Ingress,
}

/// The interface's own addresses, as the state machine needs them.
pub(crate) trait LocalAddrs {
    /// The source address for a connection to `dst` (never unspecified), or `None` if the
    /// interface has no address to reach it from.
    fn source_address(&self, dst: &IpAddress) -> Option<IpAddress>;

    /// Whether `addr` is (still) one of the interface's addresses.
    fn has_ip_addr(&self, addr: IpAddress) -> bool;
}

/// smoltcp's own source selection (RFC 6724 for IPv6, same subnet first for IPv4) and address
/// check (which honours `any_ip`): what smoltcp's socket used through its context.
impl LocalAddrs for Interface {
    fn source_address(&self, dst: &IpAddress) -> Option<IpAddress> {
        self.get_source_address(dst)
    }

    fn has_ip_addr(&self, addr: IpAddress) -> bool {
        Interface::has_ip_addr(self, addr)
    }
}

/// The keyed functions behind a connection's initial sequence number and TCP timestamp
/// offset (the stack's [`Prf`], see `keys.rs`).
#[derive(Clone)]
pub(crate) struct TcpKeys {
    prf: Prf,
}

impl TcpKeys {
    /// The functions keyed with the stack's secret.
    pub(crate) fn new(prf: Prf) -> Self {
        Self { prf }
    }

    /// The initial sequence number of the connection from `local` to `remote` at `now`, as
    /// RFC 6528 gives it: `ISN = M + F(localip, localport, remoteip, remoteport, secretkey)`,
    /// with `M` the stack's clock in units of 4 µs and `F` the keyed hash of the four-tuple.
    /// An attacker who cannot see the connection's segments cannot guess it; a four-tuple
    /// used again later starts above the earlier incarnation's numbers (the clock moved on),
    /// as RFC 793's clock-driven ISNs did.
    pub(crate) fn isn(&self, now: Instant, local: IpEndpoint, remote: IpEndpoint) -> TcpSeqNumber {
        // The clock in 4 µs units, modulo 2^32 (it wraps about every 4.77 hours).
        let m = now.total_micros().div_euclid(4) as u32;
        let f = self.prf.tuple(Use::Isn, local, remote) as u32;
        TcpSeqNumber(m.wrapping_add(f) as i32)
    }

    /// The offset added to the millisecond clock for the TSvals of the connection from
    /// `local` to `remote` (RFC 7323 §7.1): a keyed hash of the four-tuple, so the peer learns
    /// nothing of the stack's clock or of other connections' offsets, and a four-tuple used
    /// again gets the same offset and so TSvals that keep increasing across incarnations.
    pub(crate) fn ts_offset(&self, local: IpEndpoint, remote: IpEndpoint) -> u32 {
        self.prf.tuple(Use::TsOffset, local, remote) as u32
    }
}

/// Everything a [`Tcb`](super::socket::Tcb) call needs from outside the connection: built by the stack
/// for each `connect`, `process`, `dispatch` and `poll_at` call.
pub(crate) struct TcpContext<'a> {
    /// The current time.
    pub(crate) now: Instant,
    /// The largest IP packet the interface sends, IP header included (smoltcp's
    /// `DeviceCapabilities::ip_mtu`): with the IP and TCP header lengths it gives the MSS we
    /// advertise and the largest segment we send.
    pub(crate) ip_mtu: usize,
    /// The interface's addresses: source selection for `connect`, and the check in `dispatch`
    /// that the connection's local address still exists.
    pub(crate) addrs: &'a dyn LocalAddrs,
    /// The keys for initial sequence numbers and timestamp offsets.
    pub(crate) keys: &'a TcpKeys,
}

impl<'a> TcpContext<'a> {
    /// A context for one call at `now`.
    pub(crate) fn new(
        now: Instant,
        ip_mtu: usize,
        addrs: &'a dyn LocalAddrs,
        keys: &'a TcpKeys,
    ) -> Self {
        Self {
            now,
            ip_mtu,
            addrs,
            keys,
        }
    }

    /// Move the clock to `now`.
    #[cfg(test)]
    pub(crate) fn set_now(&mut self, now: Instant) {
        self.now = now;
    }
}

impl core::fmt::Debug for TcpContext<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpContext")
            .field("now", &self.now)
            .field("ip_mtu", &self.ip_mtu)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::{PollAt, TcpKeys};
    use crate::config::Secret;
    use crate::keys::{Prf, Use};
    use smoltcp::time::Instant;
    use smoltcp::wire::{IpAddress, IpEndpoint, TcpSeqNumber};

    #[test]
    fn poll_at_orders_now_then_time_then_ingress() {
        let early = PollAt::Time(Instant::from_millis(1));
        let late = PollAt::Time(Instant::from_millis(2));
        assert!(PollAt::Now < early);
        assert!(early < late);
        assert!(late < PollAt::Ingress);
    }

    fn keys(b: u8) -> TcpKeys {
        TcpKeys::new(Prf::new(&Secret::new([b; Secret::LEN])))
    }

    fn ep(last: u8, port: u16) -> IpEndpoint {
        IpEndpoint::new(IpAddress::v4(10, 0, 0, last), port)
    }

    #[test]
    fn isn_is_the_4us_clock_plus_the_keyed_hash_of_the_tuple() {
        let k = keys(3);
        let (l, r) = (ep(2, 80), ep(1, 40000));
        let f = k.prf.tuple(Use::Isn, l, r) as u32;
        assert_eq!(k.isn(Instant::ZERO, l, r), TcpSeqNumber(f as i32));
        // 1 ms is 250 ticks of 4 µs; 3 µs is not yet one.
        assert_eq!(
            k.isn(Instant::from_millis(1), l, r),
            TcpSeqNumber(f.wrapping_add(250) as i32)
        );
        assert_eq!(k.isn(Instant::from_micros(3), l, r), TcpSeqNumber(f as i32));
        // The clock wraps modulo 2^32 ticks.
        let wrap = Instant::from_micros(4 * (1i64 << 32) + 8);
        assert_eq!(k.isn(wrap, l, r), TcpSeqNumber(f.wrapping_add(2) as i32));
    }

    #[test]
    fn isn_and_timestamp_offset_depend_on_the_secret_and_the_tuple() {
        let (l, r) = (ep(2, 80), ep(1, 40000));
        let now = Instant::from_secs(5);
        assert_ne!(keys(3).isn(now, l, r), keys(4).isn(now, l, r));
        assert_ne!(keys(3).isn(now, l, r), keys(3).isn(now, l, ep(1, 40001)));
        assert_ne!(keys(3).ts_offset(l, r), keys(4).ts_offset(l, r));
        assert_ne!(keys(3).ts_offset(l, r), keys(3).ts_offset(l, ep(1, 40001)));
        assert_eq!(keys(3).ts_offset(l, r), keys(3).ts_offset(l, r));
        // Not the ISN's hash: the TSval offset reveals nothing of the ISN.
        assert_ne!(
            keys(3).ts_offset(l, r),
            keys(3).isn(Instant::ZERO, l, r).0 as u32
        );
    }
}
