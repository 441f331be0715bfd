//! What the state machine takes from the interface it runs on: the time, the IP MTU, the
//! interface's addresses and a random source (smoltcp's crate-private `iface::Context`, cut
//! down to the calls `socket/tcp.rs` makes), and what it gives back: [`PollAt`].

use smoltcp::iface::Interface;
use smoltcp::time::Instant;
use smoltcp::wire::IpAddress;

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

/// A small non-cryptographic generator for initial sequence numbers: sPCG32, the generator
/// smoltcp's interface uses (`smoltcp::rand::Rand`, crate-private there).
#[derive(Debug, Clone)]
pub(crate) struct TcpRand {
    /// The generator's state.
    state: u64,
}

impl TcpRand {
    /// A generator seeded with `seed` (the stack's `Config::random_seed`).
    pub(crate) const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 32 random bits.
    pub(crate) fn rand_u32(&mut self) -> u32 {
        // sPCG32 from https://www.pcg-random.org/paper.html
        // see also https://nullprogram.com/blog/2017/09/21/
        const M: u64 = 0xbb2e_fcec_3c39_611d;
        const A: u64 = 0x7590_ef39;

        let s = self.state.wrapping_mul(M).wrapping_add(A);
        self.state = s;

        let shift = 29 - (s >> 61);
        (s >> shift) as u32
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
    /// The random source for initial sequence numbers.
    pub(crate) rand: &'a mut TcpRand,
}

impl<'a> TcpContext<'a> {
    /// A context for one call at `now`.
    pub(crate) fn new(
        now: Instant,
        ip_mtu: usize,
        addrs: &'a dyn LocalAddrs,
        rand: &'a mut TcpRand,
    ) -> Self {
        Self {
            now,
            ip_mtu,
            addrs,
            rand,
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
    use super::{PollAt, TcpRand};
    use smoltcp::time::Instant;

    #[test]
    fn poll_at_orders_now_then_time_then_ingress() {
        let early = PollAt::Time(Instant::from_millis(1));
        let late = PollAt::Time(Instant::from_millis(2));
        assert!(PollAt::Now < early);
        assert!(early < late);
        assert!(late < PollAt::Ingress);
    }

    #[test]
    fn rand_is_spcg32() {
        // sPCG32 (smoltcp's `Rand`) from seed 12345, computed independently.
        let mut r = TcpRand::new(12345);
        let got = [r.rand_u32(), r.rand_u32(), r.rand_u32(), r.rand_u32()];
        assert_eq!(got, [950466856, 3767854651, 3239089691, 2878797761]);
    }
}
