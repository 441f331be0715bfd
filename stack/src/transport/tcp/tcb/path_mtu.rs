//! [`PathMtu`]: a connection's path MTU estimate (RFC 1191 for IPv4, RFC 8201 for IPv6), as
//! ICMP "fragmentation needed" / "packet too big" messages lowered it.
//!
//! A connection starts with no estimate: it sends segments as large as the link's IP MTU (and
//! the peer's MSS) allow, with Don't Fragment set. A message about one of its segments in flight
//! (`transport/tcp/icmp_error.rs` checks that) lowers the estimate; the connection's segments are
//! then cut to it ([`Tcb::path_mtu_reduced`](super::socket::Tcb::path_mtu_reduced)). An estimate
//! is forgotten [`PATH_MTU_AGE`] after it was last lowered (RFC 1191 §6.3: ten minutes), so a
//! path that grew again is found again; if it did not, the next message lowers it once more.

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IPV4_HEADER_LEN, IPV6_HEADER_LEN, TCP_HEADER_LEN};

/// How long a lowered path MTU holds before the connection tries the link's MTU again
/// (RFC 1191 §6.3, RFC 8201 §4: at least five minutes, ten recommended; Linux's
/// `mtu_expires` is ten minutes too).
pub const PATH_MTU_AGE: core::time::Duration = core::time::Duration::from_secs(600);

/// [`PATH_MTU_AGE`] on the stack's clock.
const AGE: Duration = Duration::from_secs(PATH_MTU_AGE.as_secs());

/// A connection's path MTU estimate: `None` until an ICMP message lowered it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PathMtu {
    /// The estimate (IP MTU in bytes) and when it was last lowered.
    lowered: Option<(usize, Instant)>,
}

impl PathMtu {
    /// The IP MTU segments are cut to: the estimate, if it is below the link's `link_mtu`.
    pub(crate) fn get(&self, link_mtu: usize) -> usize {
        match self.lowered {
            Some((mtu, _)) => mtu.min(link_mtu),
            None => link_mtu,
        }
    }

    /// Lowers the estimate to `mtu` at `now`, if that is below what [`get`](Self::get) gives
    /// for `link_mtu`; `true` if it did. An `mtu` below
    /// [`MIN_PATH_MTU_V4`](crate::tcp::MIN_PATH_MTU_V4) counts as that (the messages' reader
    /// raises it already; this keeps every segment size computed from the estimate positive).
    pub(crate) fn lower(&mut self, mtu: usize, link_mtu: usize, now: Instant) -> bool {
        let mtu = mtu.max(crate::tcp::MIN_PATH_MTU_V4);
        if mtu >= self.get(link_mtu) {
            return false;
        }
        self.lowered = Some((mtu, now));
        true
    }

    /// When the estimate ages out (`None`: there is none).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.lowered.map(|(_, at)| at + AGE)
    }

    /// Forgets an estimate lowered [`PATH_MTU_AGE`] or more before `now`; `true` if it did.
    pub(crate) fn expire(&mut self, now: Instant) -> bool {
        if self.deadline().is_some_and(|end| now >= end) {
            self.lowered = None;
            return true;
        }
        false
    }
}

/// The payload a segment from `local` may carry on a path of `mtu` bytes, before TCP options:
/// the MTU less the IP and TCP headers.
pub(crate) fn mss_for(mtu: usize, local: IpAddress) -> usize {
    let ip_header_len = match local {
        IpAddress::Ipv4(_) => IPV4_HEADER_LEN,
        IpAddress::Ipv6(_) => IPV6_HEADER_LEN,
    };
    mtu.saturating_sub(ip_header_len + TCP_HEADER_LEN)
}

#[cfg(test)]
mod tests {
    use super::{PathMtu, AGE as PATH_MTU_AGE};
    use smoltcp::time::{Duration, Instant};

    #[test]
    fn lowers_only_and_ages_back_to_the_link_mtu() {
        let mut p = PathMtu::default();
        let t0 = Instant::from_secs(100);
        assert_eq!(p.get(1500), 1500);
        assert!(!p.lower(1500, 1500, t0), "not below the link's MTU");
        assert!(!p.lower(9000, 1500, t0));
        assert_eq!(p.deadline(), None);
        assert!(p.lower(1280, 1500, t0));
        assert_eq!(p.get(1500), 1280);
        assert_eq!(p.deadline(), Some(t0 + PATH_MTU_AGE));
        assert_eq!(p.get(1000), 1000, "a smaller link MTU still wins");
        assert!(!p.lower(1400, 1500, t0), "never raised by a message");
        assert!(!p.lower(1280, 1500, t0));
        let t1 = t0 + Duration::from_secs(60);
        assert!(p.lower(1000, 1500, t1));
        let mut floor = PathMtu::default();
        assert!(floor.lower(20, 1500, t0));
        assert_eq!(floor.get(1500), crate::tcp::MIN_PATH_MTU_V4);
        // The age counts from the last lowering.
        assert!(!p.expire(t0 + PATH_MTU_AGE));
        assert_eq!(p.get(1500), 1000);
        assert!(!p.expire(t1 + PATH_MTU_AGE - Duration::from_millis(1)));
        assert_eq!(p.get(1500), 1000);
        assert!(p.expire(t1 + PATH_MTU_AGE));
        assert_eq!(p.get(1500), 1500);
        assert_eq!(p.deadline(), None);
    }
}
