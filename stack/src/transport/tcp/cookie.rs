//! SYN cookies (RFC 4987 §3.6): the initial sequence number of a SYN-ACK that carries, under
//! a keyed MAC, what the listener would otherwise have kept for the half-open connection.
//!
//! When every listening socket of a listener is busy (`overflow.rs`), a SYN is answered with
//! a SYN-ACK whose sequence number is a cookie, and nothing is kept. The final ACK of the
//! handshake acknowledges `cookie + 1`; if `ack - 1` checks out for the ACK's four-tuple and
//! the peer's initial sequence number (`seq - 1`), the connection is made from it.
//!
//! # The sequence number (Linux's layout)
//!
//! ```text
//!   cookie = base(tuple) + peer ISN + (count << 24) + low
//!   low    = (mac(tuple, count, index) << 2 | index) mod 2^24
//! ```
//!
//! * `count` is a counter of minutes ([`COUNTER_SECS`]); its low 8 bits sit in the top byte
//!   once `base` and the peer's ISN are taken off again. A cookie is taken while the counter
//!   moved on by less than [`AGE_LIMIT`]: for one to two minutes after it was made.
//! * `index` picks the peer's MSS from a table of four ([`MSS_V4`], [`MSS_V6`]): the largest
//!   entry not above the MSS the SYN announced.
//! * `base` and `mac` are SipHash-2-4 under the SYN cookie key, which is derived from the
//!   stack's secret (`keys.rs`, [`Use::SynCookieKey`]). The MAC covers the index, so a cookie
//!   acknowledged one off (another index) does not check out; a forger who cannot compute it
//!   lands a valid cookie with a chance of 2^-22 per guess for a given minute.
//!
//! # The options (Linux's layout)
//!
//! A SYN that carried timestamps gets a SYN-ACK whose TSval holds, in its low
//! [`TS_OPTION_BITS`] bits, the peer's window scale (4 bits, 15 for none) and whether it
//! permitted SACK (bit 4); bit 5 (ECN on Linux) is always clear, as zcnet does not negotiate
//! ECN. The peer echoes it in the TSecr of its ACK ([`ts_decode`]). The TSval is the
//! connection's own clock with those bits replaced, moved 64 back if that would put it ahead
//! of the clock, so the connection's later TSvals never go backwards. Without timestamps
//! nothing but the MSS survives: the SYN-ACK then offers neither window scaling nor SACK.

use smoltcp::time::Instant;
use smoltcp::wire::{IpEndpoint, TcpSeqNumber};

use crate::keys::{Prf, Use};

/// The MSS values a cookie carries for an IPv4 peer, by index (Linux's table).
pub(crate) const MSS_V4: [u16; 4] = [536, 1300, 1440, 1460];

/// The MSS values a cookie carries for an IPv6 peer, by index (Linux's table: the IPv6
/// minimum MTU, 1480 and 1500 byte links, 9000 byte jumbo frames, less 60 bytes of headers).
pub(crate) const MSS_V6: [u16; 4] = [1220, 1420, 1440, 8940];

/// Seconds per step of the cookie counter.
pub(crate) const COUNTER_SECS: i64 = 60;

/// A cookie is taken while the counter moved on by less than this since it was made.
pub(crate) const AGE_LIMIT: u32 = 2;

/// How long after a listener last sent a cookie one may still come back: the longest a
/// cookie is taken.
pub(crate) const COOKIE_LIFETIME_SECS: i64 = COUNTER_SECS * AGE_LIMIT as i64;

/// Low bits of a cookie SYN-ACK's TSval that carry the options.
pub(crate) const TS_OPTION_BITS: u32 = 6;

/// The MSS index's bits at the bottom of a cookie.
const INDEX_BITS: u32 = 2;
/// Where the counter starts.
const COUNT_SHIFT: u32 = 24;
/// The part below the counter.
const LOW_MASK: u32 = (1 << COUNT_SHIFT) - 1;
/// The window scale field's value for "no window scaling".
const TS_NO_WSCALE: u32 = 0xf;
/// SACK permitted.
const TS_SACK: u32 = 1 << 4;
/// ECN (never set by zcnet).
const TS_ECN: u32 = 1 << 5;
/// The largest window scale (RFC 7323 §2.3).
const MAX_WSCALE: u8 = 14;

/// The value of the cookie counter at `now`.
pub(crate) fn counter(now: Instant) -> u32 {
    (now.total_millis().max(0) / (COUNTER_SECS * 1000)) as u32
}

/// The MSS table for a peer of IPv6 (`true`) or IPv4.
fn table(v6: bool) -> &'static [u16; 4] {
    if v6 {
        &MSS_V6
    } else {
        &MSS_V4
    }
}

/// The index of the largest MSS of the table not above what the SYN announced (`None` or 0:
/// the default of RFC 9293, 536 for IPv4, 1220 for IPv6). `None` when even the smallest
/// entry is above it: no cookie can carry that MSS.
pub(crate) fn mss_index(v6: bool, announced: Option<u16>) -> Option<u8> {
    let t = table(v6);
    let mss = announced.filter(|&m| m != 0).unwrap_or(t[0]);
    t.iter().rposition(|&e| e <= mss).map(|i| i as u8)
}

/// The MSS of `index` (an index [`CookieKey::check`] gave).
pub(crate) fn mss_of(v6: bool, index: u8) -> u16 {
    table(v6)[usize::from(index) % 4]
}

/// The SYN cookie key and the cookies made with it.
#[derive(Clone)]
pub(crate) struct CookieKey {
    prf: Prf,
}

impl CookieKey {
    /// The key derived from the stack's keyed function.
    pub(crate) fn new(stack: &Prf) -> Self {
        Self {
            prf: stack.derive(Use::SynCookieKey),
        }
    }

    /// `base(tuple)`.
    fn base(&self, local: IpEndpoint, remote: IpEndpoint) -> u32 {
        self.prf.tuple_with(Use::SynCookie, local, remote, &[0]) as u32
    }

    /// `low`: the MAC of the tuple, the counter and the index, above the index.
    fn low(&self, local: IpEndpoint, remote: IpEndpoint, count: u32, index: u8) -> u32 {
        let c = count.to_le_bytes();
        let extra = [1, c[0], c[1], c[2], c[3], index];
        let mac = self.prf.tuple_with(Use::SynCookie, local, remote, &extra) as u32;
        ((mac << INDEX_BITS) | u32::from(index)) & LOW_MASK
    }

    /// The cookie for a SYN from `remote` to `local` with initial sequence number `peer_isn`,
    /// carrying MSS index `index` (0..4), at `now`.
    pub(crate) fn make(
        &self,
        local: IpEndpoint,
        remote: IpEndpoint,
        peer_isn: TcpSeqNumber,
        now: Instant,
        index: u8,
    ) -> TcpSeqNumber {
        let index = index % 4;
        let count = counter(now);
        let v = self
            .base(local, remote)
            .wrapping_add(peer_isn.0 as u32)
            .wrapping_add(count << COUNT_SHIFT)
            .wrapping_add(self.low(local, remote, count, index));
        TcpSeqNumber(v as i32)
    }

    /// The MSS index `cookie` carries, if it is a cookie this key made for this four-tuple and
    /// peer ISN less than [`AGE_LIMIT`] counter steps before `now`; `None` otherwise.
    pub(crate) fn check(
        &self,
        local: IpEndpoint,
        remote: IpEndpoint,
        peer_isn: TcpSeqNumber,
        cookie: TcpSeqNumber,
        now: Instant,
    ) -> Option<u8> {
        let c = (cookie.0 as u32)
            .wrapping_sub(self.base(local, remote))
            .wrapping_sub(peer_isn.0 as u32);
        let now_count = counter(now);
        let age = now_count.wrapping_sub(c >> COUNT_SHIFT) & (u32::MAX >> COUNT_SHIFT);
        if age >= AGE_LIMIT {
            return None;
        }
        let count = now_count.wrapping_sub(age);
        let index = (c & ((1 << INDEX_BITS) - 1)) as u8;
        (c & LOW_MASK == self.low(local, remote, count, index)).then_some(index)
    }
}

/// The options a cookie SYN-ACK's timestamp carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CookieOptions {
    /// The peer's window scale (`None`: it offered none).
    pub(crate) wscale: Option<u8>,
    /// The peer permitted SACK.
    pub(crate) sack: bool,
}

/// The TSval of a cookie SYN-ACK: `tsval` (the connection's clock now) with its low
/// [`TS_OPTION_BITS`] bits replaced by `opts`, never ahead of `tsval`.
pub(crate) fn ts_encode(tsval: u32, opts: CookieOptions) -> u32 {
    let mut bits = opts
        .wscale
        .map_or(TS_NO_WSCALE, |w| u32::from(w.min(MAX_WSCALE)));
    if opts.sack {
        bits |= TS_SACK;
    }
    let mask = (1u32 << TS_OPTION_BITS) - 1;
    let ts = (tsval & !mask) | bits;
    if (ts.wrapping_sub(tsval) as i32) > 0 {
        ts.wrapping_sub(1 << TS_OPTION_BITS)
    } else {
        ts
    }
}

/// The options a peer's TSecr (the echo of a [`ts_encode`] TSval) carries; `None` when they
/// cannot be ours (the ECN bit set).
pub(crate) fn ts_decode(tsecr: u32) -> Option<CookieOptions> {
    if tsecr & TS_ECN != 0 {
        return None;
    }
    let w = tsecr & TS_NO_WSCALE;
    Some(CookieOptions {
        wscale: (w != TS_NO_WSCALE).then_some(w as u8),
        sack: tsecr & TS_SACK != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;
    use smoltcp::wire::IpAddress;

    fn key(b: u8) -> CookieKey {
        CookieKey::new(&Prf::new(&Secret::new([b; Secret::LEN])))
    }

    fn ep(last: u8, port: u16) -> IpEndpoint {
        IpEndpoint::new(IpAddress::v4(10, 0, 0, last), port)
    }

    const ISN: TcpSeqNumber = TcpSeqNumber(0x1234_5678);

    fn at(secs: i64) -> Instant {
        Instant::from_secs(secs)
    }

    #[test]
    fn every_index_and_option_round_trips() {
        let k = key(1);
        let (l, r) = (ep(2, 80), ep(1, 40000));
        for v6 in [false, true] {
            for (i, &mss) in table(v6).iter().enumerate() {
                let index = mss_index(v6, Some(mss)).unwrap();
                assert_eq!(usize::from(index), i);
                assert_eq!(mss_of(v6, index), mss);
                // One below the next entry still picks this one.
                if let Some(&next) = table(v6).get(i + 1) {
                    assert_eq!(mss_index(v6, Some(next - 1)), Some(index));
                }
                for t in [0, 59, 600, 86_400 * 365] {
                    let c = k.make(l, r, ISN, at(t), index);
                    assert_eq!(k.check(l, r, ISN, c, at(t)), Some(index), "{t}");
                }
            }
        }
        let wscales = (0..=MAX_WSCALE).map(Some).chain([None]);
        for wscale in wscales {
            for sack in [false, true] {
                let opts = CookieOptions { wscale, sack };
                for clock in [0u32, 63, 64, 1000, 0xffff_ffc0, u32::MAX] {
                    let ts = ts_encode(clock, opts);
                    assert_eq!(ts_decode(ts), Some(opts), "{clock} {opts:?}");
                    // Never ahead of the clock, at most 64 behind.
                    let behind = clock.wrapping_sub(ts);
                    assert!(behind < 1 << TS_OPTION_BITS, "{clock} {ts} {opts:?}");
                }
            }
        }
    }

    #[test]
    fn the_mss_defaults_and_the_smallest_entry_bound() {
        assert_eq!(mss_index(false, None), Some(0));
        assert_eq!(mss_index(false, Some(0)), Some(0));
        assert_eq!(mss_index(true, None), Some(0));
        assert_eq!(mss_index(false, Some(9000)), Some(3));
        assert_eq!(mss_index(false, Some(1439)), Some(1));
        // Below the smallest entry: no cookie can carry it.
        assert_eq!(mss_index(false, Some(535)), None);
        assert_eq!(mss_index(true, Some(1219)), None);
    }

    #[test]
    fn a_window_scale_above_14_is_taken_as_14() {
        let ts = ts_encode(
            5000,
            CookieOptions {
                wscale: Some(15),
                sack: false,
            },
        );
        assert_eq!(ts_decode(ts).unwrap().wscale, Some(MAX_WSCALE));
        // An echo with the ECN bit is not one of ours.
        assert_eq!(ts_decode(ts | TS_ECN), None);
    }

    #[test]
    fn another_key_tuple_or_peer_isn_does_not_check_out() {
        let (l, r) = (ep(2, 80), ep(1, 40000));
        let now = at(1000);
        let c = key(1).make(l, r, ISN, now, 2);
        assert_eq!(key(1).check(l, r, ISN, c, now), Some(2));
        assert_eq!(key(2).check(l, r, ISN, c, now), None, "another key");
        for (l2, r2) in [
            (ep(3, 80), r),
            (ep(2, 81), r),
            (l, ep(4, 40000)),
            (l, ep(1, 40001)),
            (r, l),
        ] {
            assert_eq!(key(1).check(l2, r2, ISN, c, now), None, "{l2} {r2}");
        }
        assert_eq!(
            key(1).check(l, r, ISN + 1, c, now),
            None,
            "another peer ISN"
        );
    }

    #[test]
    fn an_acknowledgement_off_by_one_does_not_check_out() {
        let k = key(1);
        let (l, r) = (ep(2, 80), ep(1, 40000));
        let now = at(1000);
        for index in 0..4 {
            for port in 40000..40064 {
                let r = IpEndpoint::new(r.addr, port);
                let c = k.make(l, r, ISN, now, index);
                assert_eq!(k.check(l, r, ISN, c, now), Some(index));
                assert_eq!(k.check(l, r, ISN, c + 1, now), None, "{index} {port}");
                assert_eq!(k.check(l, r, ISN, c - 1, now), None, "{index} {port}");
            }
        }
    }

    #[test]
    fn a_cookie_lives_one_to_two_minutes() {
        let k = key(1);
        let (l, r) = (ep(2, 80), ep(1, 40000));
        // Made at the start of a minute: taken for two minutes less a moment.
        let made = at(60 * 100);
        let c = k.make(l, r, ISN, made, 1);
        assert_eq!(k.check(l, r, ISN, c, at(60 * 100 + 119)), Some(1));
        assert_eq!(k.check(l, r, ISN, c, at(60 * 102)), None, "too old");
        assert_eq!(k.check(l, r, ISN, c, at(60 * 100 + 86_400)), None);
        // Made at the end of a minute: one minute and a moment.
        let c = k.make(l, r, ISN, at(60 * 101 - 1), 1);
        assert_eq!(k.check(l, r, ISN, c, at(60 * 102 - 1)), Some(1));
        assert_eq!(k.check(l, r, ISN, c, at(60 * 102)), None, "too old");
        // Not from the future either.
        assert_eq!(k.check(l, r, ISN, c, at(60 * 99)), None, "from the future");
        // The counter byte wraps: 256 minutes later the same byte is not the same minute.
        let c = k.make(l, r, ISN, made, 1);
        assert_eq!(k.check(l, r, ISN, c, at(60 * (100 + 256))), None);
    }

    #[test]
    fn random_acknowledgements_rarely_check_out() {
        // 2^16 guesses at a 2^-22 chance each: a handful at most would be expected to pass;
        // the stream is deterministic, so this is an exact, repeatable check.
        let k = key(1);
        let (l, r) = (ep(2, 80), ep(1, 40000));
        let mut s = crate::keys::KeyedStream::new(Prf::new(&Secret::new([9; Secret::LEN])));
        let passed = (0..1 << 16)
            .filter(|_| {
                let guess = TcpSeqNumber(s.next_u32() as i32);
                k.check(l, r, ISN, guess, at(1000)).is_some()
            })
            .count();
        assert!(passed <= 1, "{passed}");
    }
}
