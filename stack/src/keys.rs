//! The keyed pseudo-random function behind every number an attacker off the path must not
//! predict: SipHash-2-4 (the `siphasher` crate) keyed with the integrator's
//! [`Secret`].
//!
//! Each use starts its input with its own [`Use`] byte, so no two uses ever hash the same
//! input (domain separation): learning one use's outputs says nothing of another's.
//!
//! | [`Use`] | input | what it gives |
//! | --- | --- | --- |
//! | `Isn` | four-tuple | TCP initial sequence numbers, added to a 4 µs clock (RFC 6528; `transport/tcp/tcb/context.rs`) |
//! | `TsOffset` | four-tuple | a connection's TCP timestamp offset (RFC 7323 §7.1) |
//! | `Port` | local address, remote address and port | ephemeral ports of `connect` (RFC 6056 algorithm 4; `transport/ports.rs`) |
//! | `Stream` | a counter | random numbers ([`KeyedStream`]): ports of binds to port 0, the random step of algorithm 4 |
//! | `Ipv4Id` | source, destination, protocol | IPv4 identification, one counter per destination bucket (`ip/emit.rs`) |
//! | `SmoltcpSeed` | nothing | the seed of smoltcp's own generator (DHCP transaction ids, DNS query ids and ports) |
//! | `Demux` | nothing | the key of the TCP table's four-tuple hash (`transport/tcp/table.rs`) |
//! | `ChallengeAck` | a counter of seconds | each second's stack-wide budget of TCP challenge ACKs (RFC 5961 §7; `transport/tcp/tcb/context.rs`) |
//! | `SynCookieKey` | 0, then 1 | the two halves of the SYN cookie key ([`Prf::derive`]) |
//! | `SynCookie` | four-tuple, a part byte, a minute counter and an MSS index | SYN cookies, under the SYN cookie key (`transport/tcp/cookie.rs`) |
//!
//! SipHash is a PRF under a 128-bit key: its outputs for inputs an attacker picks reveal
//! nothing of the key or of its outputs for other inputs, so a peer that sees its own
//! connections' sequence numbers, ports and IDs learns nothing about anyone else's.

use core::hash::Hasher;

use siphasher::sip::SipHasher24;
use smoltcp::wire::{IpAddress, IpEndpoint};

use crate::config::Secret;

/// What a hash is for: the first byte of every input (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Use {
    /// TCP initial sequence numbers.
    Isn = 1,
    /// TCP timestamp offsets.
    TsOffset = 2,
    /// Ephemeral ports of `connect`: offset and table index.
    Port = 3,
    /// The keyed random stream.
    Stream = 4,
    /// IPv4 identification: bucket and offset.
    Ipv4Id = 5,
    /// The seed of smoltcp's generator.
    SmoltcpSeed = 6,
    /// The TCP table's demultiplexing key.
    Demux = 7,
    /// The stack-wide challenge ACK budget of each second.
    ChallengeAck = 8,
    /// The derivation of the SYN cookie key.
    SynCookieKey = 9,
    /// SYN cookies (under the derived key).
    SynCookie = 10,
}

/// SipHash-2-4 under the stack's secret.
#[derive(Clone)]
pub(crate) struct Prf {
    /// The key's two halves (little-endian, as SipHash reads a 16-byte key).
    k0: u64,
    k1: u64,
}

impl Prf {
    /// The function keyed with `secret`.
    pub(crate) fn new(secret: &Secret) -> Self {
        let b = secret.bytes();
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 8];
        lo.copy_from_slice(&b[..8]);
        hi.copy_from_slice(&b[8..]);
        Self {
            k0: u64::from_le_bytes(lo),
            k1: u64::from_le_bytes(hi),
        }
    }

    /// A hasher for `purpose`, its byte already written.
    fn start(&self, purpose: Use) -> SipHasher24 {
        let mut h = SipHasher24::new_with_keys(self.k0, self.k1);
        h.write_u8(purpose as u8);
        h
    }

    /// The hash of `data` for `purpose`.
    pub(crate) fn of(&self, purpose: Use, data: &[u8]) -> u64 {
        let mut h = self.start(purpose);
        h.write(data);
        h.finish()
    }

    /// The hash of a four-tuple (`local`, `remote`) for `purpose`. Both ends have the same IP
    /// version in a connection; the version is hashed too.
    pub(crate) fn tuple(&self, purpose: Use, local: IpEndpoint, remote: IpEndpoint) -> u64 {
        self.tuple_with(purpose, local, remote, &[])
    }

    /// The hash of a four-tuple followed by `extra` for `purpose` ([`tuple`](Self::tuple) is
    /// this with nothing extra).
    pub(crate) fn tuple_with(
        &self,
        purpose: Use,
        local: IpEndpoint,
        remote: IpEndpoint,
        extra: &[u8],
    ) -> u64 {
        let mut h = self.start(purpose);
        write_addr(&mut h, local.addr);
        h.write(&local.port.to_be_bytes());
        write_addr(&mut h, remote.addr);
        h.write(&remote.port.to_be_bytes());
        h.write(extra);
        h.finish()
    }

    /// A function under a key of its own, derived from this one for `purpose`: its two halves
    /// are the hashes of 0 and 1 for `purpose`. Knowing the derived key (or outputs under
    /// it) reveals nothing of this key.
    pub(crate) fn derive(&self, purpose: Use) -> Prf {
        Prf {
            k0: self.of(purpose, &[0]),
            k1: self.of(purpose, &[1]),
        }
    }

    /// The hash of a destination as RFC 6056 keys its port choice: the local address (when
    /// known), the remote address and the remote port.
    pub(crate) fn destination(
        &self,
        purpose: Use,
        local: Option<IpAddress>,
        remote: IpEndpoint,
    ) -> u64 {
        let mut h = self.start(purpose);
        match local {
            Some(a) => write_addr(&mut h, a),
            None => h.write_u8(0),
        }
        write_addr(&mut h, remote.addr);
        h.write(&remote.port.to_be_bytes());
        h.finish()
    }
}

/// Writes `addr`'s version (4 or 6) and its bytes.
fn write_addr(h: &mut SipHasher24, addr: IpAddress) {
    match addr {
        IpAddress::Ipv4(a) => {
            h.write_u8(4);
            h.write(&a.octets());
        }
        IpAddress::Ipv6(a) => {
            h.write_u8(6);
            h.write(&a.octets());
        }
    }
}

/// Random numbers from the keyed function in counter mode: the `n`th number is the hash of
/// `n` ([`Use::Stream`]). Unpredictable without the secret, whatever numbers were seen before.
#[derive(Clone)]
pub(crate) struct KeyedStream {
    prf: Prf,
    /// The next counter value.
    next: u64,
}

impl KeyedStream {
    /// The stream of `prf`, from counter 0.
    pub(crate) fn new(prf: Prf) -> Self {
        Self { prf, next: 0 }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let n = self.next;
        self.next = n.wrapping_add(1);
        self.prf.of(Use::Stream, &n.to_le_bytes())
    }

    /// The next 32 random bits.
    pub(crate) fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::{IpAddress, IpEndpoint};

    fn prf(b: u8) -> Prf {
        Prf::new(&Secret::new([b; Secret::LEN]))
    }

    fn ep(last: u8, port: u16) -> IpEndpoint {
        IpEndpoint::new(IpAddress::v4(10, 0, 0, last), port)
    }

    /// The key of the SipHash paper's test vector (appendix A): bytes 00 01 .. 0f.
    fn paper_key() -> [u8; 16] {
        core::array::from_fn(|i| i as u8)
    }

    #[test]
    fn the_key_is_read_as_siphash_reads_it() {
        // The SipHash paper's vector: that key, input 00 01 .. 0e, SipHash-2-4 a129ca6149be45e5.
        let p = Prf::new(&Secret::new(paper_key()));
        let mut h = SipHasher24::new_with_keys(p.k0, p.k1);
        let input: [u8; 15] = core::array::from_fn(|i| i as u8);
        h.write(&input);
        assert_eq!(h.finish(), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn a_hash_is_siphash_2_4_of_the_use_byte_then_the_input() {
        let p = Prf::new(&Secret::new(paper_key()));
        let mut h = SipHasher24::new_with_key(&paper_key());
        h.write(&[Use::SmoltcpSeed as u8, 1, 2, 3]);
        assert_eq!(p.of(Use::SmoltcpSeed, &[1, 2, 3]), h.finish());
        let mut h = SipHasher24::new_with_key(&paper_key());
        h.write(&[
            Use::Isn as u8,
            4,
            10,
            0,
            0,
            1,
            0,
            80,
            4,
            10,
            0,
            0,
            2,
            0x9c,
            0x40,
        ]);
        assert_eq!(p.tuple(Use::Isn, ep(1, 80), ep(2, 40000)), h.finish());
    }

    #[test]
    fn uses_are_separated() {
        let p = prf(7);
        let (l, r) = (ep(1, 80), ep(2, 40000));
        assert_ne!(p.tuple(Use::Isn, l, r), p.tuple(Use::TsOffset, l, r));
        assert_ne!(p.of(Use::SmoltcpSeed, &[]), p.of(Use::Demux, &[]));
    }

    #[test]
    fn the_secret_and_every_part_of_the_tuple_count() {
        let (l, r) = (ep(1, 80), ep(2, 40000));
        let base = prf(7).tuple(Use::Isn, l, r);
        assert_eq!(
            base,
            prf(7).tuple(Use::Isn, l, r),
            "a function of its inputs"
        );
        assert_ne!(base, prf(8).tuple(Use::Isn, l, r));
        assert_ne!(base, prf(7).tuple(Use::Isn, ep(1, 81), r));
        assert_ne!(base, prf(7).tuple(Use::Isn, ep(3, 80), r));
        assert_ne!(base, prf(7).tuple(Use::Isn, l, ep(2, 40001)));
        assert_ne!(base, prf(7).tuple(Use::Isn, l, ep(4, 40000)));
        assert_ne!(base, prf(7).tuple(Use::Isn, r, l), "the direction counts");
        let d = prf(7).destination(Use::Port, Some(l.addr), r);
        assert_ne!(d, prf(7).destination(Use::Port, None, r));
        assert_ne!(d, prf(7).destination(Use::Port, Some(l.addr), ep(2, 40001)));
    }

    #[test]
    fn a_derived_key_is_another_key() {
        let p = prf(7);
        let d = p.derive(Use::SynCookieKey);
        let (l, r) = (ep(1, 80), ep(2, 40000));
        assert_ne!((d.k0, d.k1), (p.k0, p.k1));
        assert_ne!(d.tuple(Use::SynCookie, l, r), p.tuple(Use::SynCookie, l, r));
        assert_eq!(
            (d.k0, d.k1),
            (p.of(Use::SynCookieKey, &[0]), p.of(Use::SynCookieKey, &[1]))
        );
        let e = prf(8).derive(Use::SynCookieKey);
        assert_ne!((d.k0, d.k1), (e.k0, e.k1));
        // Nothing extra is the plain tuple hash; something extra changes it.
        assert_eq!(p.tuple_with(Use::Isn, l, r, &[]), p.tuple(Use::Isn, l, r));
        assert_ne!(p.tuple_with(Use::Isn, l, r, &[0]), p.tuple(Use::Isn, l, r));
    }

    #[test]
    fn the_stream_depends_on_the_secret_and_does_not_repeat_early() {
        let mut a = KeyedStream::new(prf(1));
        let mut b = KeyedStream::new(prf(2));
        let xs: [u64; 64] = core::array::from_fn(|_| a.next_u64());
        let ys: [u64; 64] = core::array::from_fn(|_| b.next_u64());
        assert!(xs.iter().zip(&ys).all(|(x, y)| x != y));
        for (i, x) in xs.iter().enumerate() {
            assert!(!xs[i + 1..].contains(x));
        }
        // The same secret gives the same stream (the stack is deterministic given its secret).
        let mut c = KeyedStream::new(prf(1));
        assert_eq!(c.next_u64(), xs[0]);
    }
}
