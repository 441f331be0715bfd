//! What the state machine takes from the interface it runs on: the time, the IP MTU, the
//! interface's addresses and the stack's keys for initial sequence numbers and timestamp
//! offsets (smoltcp's crate-private `iface::Context`, cut down to the calls `socket/tcp.rs`
//! makes, with [`TcpKeys`] in place of its random generator), the stack-wide challenge ACK
//! budget ([`ChallengeAcks`]), and what it gives back: [`PollAt`].

use smoltcp::iface::Interface;
use smoltcp::time::Instant;
use smoltcp::wire::{IpAddress, IpEndpoint, TcpSeqNumber};
use zcnet_buffer::TxChain;

use crate::keys::{Prf, Use};
use crate::transport::tcp::cookie::CookieKey;

/// How many challenge ACKs (RFC 5961) the stack sends in one second on average, all
/// connections together (Linux's `tcp_challenge_ack_limit`). Each second's budget is drawn
/// anew between half and one and a half times this; past it, the segments that would have had
/// one are dropped without an answer until the next second. Each connection also sends at most
/// one a second.
pub const CHALLENGE_ACKS_PER_SECOND: u32 = 1000;

/// The stack-wide budget of challenge ACKs (RFC 5961 §7). An attacker who provokes challenge
/// ACKs on many connections at once gets a bounded number of answers a second (an answer
/// reveals that a guess landed in a window).
///
/// A second starts at the first challenge ACK after the previous one ended; its budget is
/// `CHALLENGE_ACKS_PER_SECOND / 2` plus the keyed hash of the second's number modulo
/// [`CHALLENGE_ACKS_PER_SECOND`]. A fixed budget would be a side channel: an attacker who
/// spends all but a known part of it on its own connection, then counts the challenge ACKs
/// it still gets, learns how many other connections sent (CVE-2016-5696, Linux's; Linux's
/// fix draws the budget at random the same way).
pub(crate) struct ChallengeAcks {
    /// Draws each second's budget.
    prf: Prf,
    /// The number of the current second (counts the seconds started).
    second: u64,
    /// The end of the current second (`None` before the first).
    until: Option<Instant>,
    /// Challenge ACKs left in it.
    left: u32,
    /// Challenge ACKs withheld since [`take_withheld`](Self::take_withheld) last ran.
    withheld: u64,
}

impl ChallengeAcks {
    /// A budget drawn with the stack's keyed function.
    pub(crate) fn new(prf: &Prf) -> Self {
        Self {
            prf: prf.clone(),
            second: 0,
            until: None,
            left: 0,
            withheld: 0,
        }
    }

    /// Whether a challenge ACK may be sent at `now` (one is then counted), else counts one
    /// withheld.
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        if self.until.is_none_or(|until| now >= until) {
            self.second = self.second.wrapping_add(1);
            self.until = Some(now + smoltcp::time::Duration::from_secs(1));
            let draw = self.prf.of(Use::ChallengeAck, &self.second.to_le_bytes());
            self.left = CHALLENGE_ACKS_PER_SECOND / 2
                + (draw % u64::from(CHALLENGE_ACKS_PER_SECOND)) as u32;
        }
        if self.left == 0 {
            self.withheld += 1;
            return false;
        }
        self.left -= 1;
        true
    }

    /// The challenge ACKs withheld since the last call, for the stack's statistics.
    pub(crate) fn take_withheld(&mut self) -> u64 {
        core::mem::take(&mut self.withheld)
    }
}

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
    /// SYN cookies, under a key derived from the secret (`transport/tcp/cookie.rs`).
    cookie: CookieKey,
}

impl TcpKeys {
    /// The functions keyed with the stack's secret.
    pub(crate) fn new(prf: Prf) -> Self {
        Self {
            cookie: CookieKey::new(&prf),
            prf,
        }
    }

    /// The SYN cookie key.
    pub(crate) fn cookie(&self) -> &CookieKey {
        &self.cookie
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

    /// The TSval at `now` of the connection from `local` to `remote`: the millisecond clock
    /// plus its [`ts_offset`](Self::ts_offset) (what the connection's own segments carry).
    pub(crate) fn tsval(&self, now: Instant, local: IpEndpoint, remote: IpEndpoint) -> u32 {
        (now.total_millis() as u32).wrapping_add(self.ts_offset(local, remote))
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
    /// The stack-wide challenge ACK budget: every `process` call of the stack has it
    /// ([`with_challenge_acks`](Self::with_challenge_acks)); the other calls send none.
    pub(crate) challenge_acks: Option<&'a mut ChallengeAcks>,
    /// Super-segments: when set (egress sets it for a link that takes them, see
    /// `transport/tcp/output.rs`), `dispatch` may send up to this many payload bytes in one
    /// call, as several whole send-queue frames.
    pub(crate) gso: Option<SuperSegment<'a>>,
}

/// Where `dispatch` puts a super-segment's payload frames and how large it may be: the first
/// frame is `emit`'s frame as for any segment sent in place, the others go into `tail`, which
/// `emit` empties.
pub(crate) struct SuperSegment<'a> {
    /// The most payload bytes of one super-segment.
    pub(crate) max_payload: usize,
    /// The payload frames after the first, in order (empty for an ordinary segment).
    pub(crate) tail: &'a mut TxChain,
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
            challenge_acks: None,
            gso: None,
        }
    }

    /// This context with super-segments of up to `max_payload` payload bytes, their frames
    /// after the first put into `tail` (see [`SuperSegment`]).
    pub(crate) fn with_gso(mut self, max_payload: usize, tail: &'a mut TxChain) -> Self {
        self.gso = Some(SuperSegment { max_payload, tail });
        self
    }

    /// This context with the stack's challenge ACK budget.
    pub(crate) fn with_challenge_acks(mut self, budget: &'a mut ChallengeAcks) -> Self {
        self.challenge_acks = Some(budget);
        self
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
    extern crate std;

    use super::{ChallengeAcks, PollAt, TcpKeys, CHALLENGE_ACKS_PER_SECOND};
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

    /// Takes challenge ACKs at `now` until refused: how many were left.
    fn spend(b: &mut ChallengeAcks, now: Instant) -> u32 {
        let mut n = 0;
        while b.take(now) {
            n += 1;
            assert!(n < 2 * CHALLENGE_ACKS_PER_SECOND, "a bounded budget");
        }
        n
    }

    #[test]
    fn challenge_acks_are_budgeted_per_second_across_calls() {
        let prf = Prf::new(&Secret::new([3; Secret::LEN]));
        let mut b = ChallengeAcks::new(&prf);
        let (half, limit) = (CHALLENGE_ACKS_PER_SECOND / 2, CHALLENGE_ACKS_PER_SECOND);
        // Each second, from its first challenge ACK: a budget in [limit/2, 3 limit/2).
        let mut budgets = std::vec::Vec::new();
        for k in 0..8 {
            let t = Instant::from_millis(250 + 1000 * k);
            let n = spend(&mut b, t);
            assert!((half..half + limit).contains(&n), "{n}");
            // Spent until one second after the first: each refusal is counted.
            assert!(!b.take(t + smoltcp::time::Duration::from_millis(999)));
            assert_eq!(b.take_withheld(), 2);
            budgets.push(n);
        }
        // Drawn anew each second, not one fixed number an attacker could subtract.
        assert!(budgets.iter().any(|&n| n != budgets[0]), "{budgets:?}");
        // The same secret draws the same budgets; another secret others.
        let mut again = ChallengeAcks::new(&prf);
        assert_eq!(spend(&mut again, Instant::ZERO), budgets[0]);
        let mut other = ChallengeAcks::new(&Prf::new(&Secret::new([4; Secret::LEN])));
        let others: std::vec::Vec<u32> = (0..8)
            .map(|k| spend(&mut other, Instant::from_secs(k)))
            .collect();
        assert_ne!(others, budgets);
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
