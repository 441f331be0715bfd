//! The Internet checksum (RFC 1071) of the TCP segments zcnet sends and receives: verified once
//! per received segment ([`verify`], by `check.rs`) and computed once per sent one
//! ([`compute`], by TCP output), over the whole segment in place.
//!
//! The sum runs over wide words. Short runs (headers, small segments) on x86_64 take one
//! add-with-carry chain (`adc`, eight bytes per instruction). Longer ones add the two 32-bit
//! halves of each 64-bit word into independent 64-bit accumulators (no carry chain, so the
//! adds run in parallel and the compiler may vectorise them); with the `std` feature on an
//! x86_64 CPU that has AVX2 (found at run time), 32 bytes per instruction. None can overflow
//! below 16 GiB, and all fold to the same 16-bit ones' complement sum as a sum over 16-bit
//! words (RFC 1071 §2: the sum is independent of byte order and of word size). smoltcp
//! computes the checksums of the packets it builds itself with its own code.

use smoltcp::wire::{IpAddress, IpProtocol};

/// Whether `segment` (the TCP or UDP header and payload) from `src` to `dst` carries a correct
/// checksum for `protocol`. Builds for fuzzing (`cfg(fuzzing)`) accept any checksum, as
/// smoltcp's own checks do, so that fuzzers reach what lies behind it.
pub(crate) fn verify(
    src: &IpAddress,
    dst: &IpAddress,
    protocol: IpProtocol,
    segment: &[u8],
) -> bool {
    if cfg!(fuzzing) {
        return true;
    }
    add(
        pseudo_header(src, dst, protocol, segment.len()),
        sum(segment),
    ) == 0xFFFF
}

/// Whether `header`, a whole IPv4 header (options included), carries a correct header
/// checksum. Builds for fuzzing accept any checksum, as [`verify`] does.
pub(crate) fn verify_ipv4_header(header: &[u8]) -> bool {
    // An IPv4 header is a whole number of 32-bit words: their sum in 64 bits folds to the
    // sum of its 16-bit words, and all ones reads the same in either byte order.
    let (words, rest) = header.as_chunks::<4>();
    let wide: u64 = words
        .iter()
        .map(|w| u64::from(u32::from_ne_bytes(*w)))
        .sum();
    cfg!(fuzzing) || (rest.is_empty() && fold(wide) == 0xFFFF)
}

/// [`verify`] for a segment of `len` bytes that lies in several pieces (a received chain's
/// slots), read in order; `parts` may hold more bytes than `len`, the rest is not summed. A
/// piece may end on an odd byte: the next one's sum is then byte-swapped (RFC 1071 §2(B)), so
/// each piece is summed where it lies, wide, with no copy. `false` when `parts` hold fewer
/// than `len` bytes.
pub(crate) fn verify_parts<'a>(
    src: &IpAddress,
    dst: &IpAddress,
    protocol: IpProtocol,
    len: usize,
    parts: impl IntoIterator<Item = &'a [u8]>,
) -> bool {
    if cfg!(fuzzing) {
        return true;
    }
    let mut acc = pseudo_header(src, dst, protocol, len);
    let mut left = len;
    let mut odd = false;
    for part in parts {
        if left == 0 {
            break;
        }
        let part = &part[..part.len().min(left)];
        let s = sum(part);
        acc = add(acc, if odd { s.swap_bytes() } else { s });
        odd ^= part.len() % 2 == 1;
        left -= part.len();
    }
    left == 0 && acc == 0xFFFF
}

/// The checksum field's value for `segment` (its checksum field zero) from `src` to `dst`.
pub(crate) fn compute(
    src: &IpAddress,
    dst: &IpAddress,
    protocol: IpProtocol,
    segment: &[u8],
) -> u16 {
    !add(
        pseudo_header(src, dst, protocol, segment.len()),
        sum(segment),
    )
}

/// [`compute`] for a segment of `len` bytes whose header (checksum field zero) the caller
/// just wrote and summed from the values it wrote (`header`: the plain sum of its 16-bit
/// big-endian words, not folded), followed by `rest` (which starts at an even offset). The
/// header is not read back: loads of bytes just stored by narrower stores would wait for the
/// stores to retire (no store-to-load forwarding across sizes).
pub(crate) fn compute_with_header(
    src: &IpAddress,
    dst: &IpAddress,
    protocol: IpProtocol,
    len: usize,
    header: u32,
    rest: &[u8],
) -> u16 {
    let folded = (header >> 16) + (header & 0xFFFF);
    let folded = (folded >> 16) + (folded & 0xFFFF);
    !add(
        add(pseudo_header(src, dst, protocol, len), folded as u16),
        sum(rest),
    )
}

/// What goes in the checksum field of a segment whose checksum the device completes (a
/// partial checksum, `ChecksumPartial`): the pseudo-header's sum for `len` bytes of
/// `protocol` from `src` to `dst`, not complemented.
pub(crate) fn partial(src: &IpAddress, dst: &IpAddress, protocol: IpProtocol, len: usize) -> u16 {
    pseudo_header(src, dst, protocol, len)
}

/// The ones' complement sum of the pseudo-header (RFC 9293 §3.1 for IPv4, RFC 8200 §8.1 for
/// IPv6): addresses, protocol and the upper-layer length.
#[inline]
fn pseudo_header(src: &IpAddress, dst: &IpAddress, protocol: IpProtocol, len: usize) -> u16 {
    if let (IpAddress::Ipv4(s), IpAddress::Ipv4(d)) = (src, dst) {
        // Six 16-bit words summed in registers: no buffer to fill and read back.
        let words = |a: [u8; 4]| {
            u32::from(u16::from_be_bytes([a[0], a[1]]))
                + u32::from(u16::from_be_bytes([a[2], a[3]]))
        };
        let len = len as u32;
        let total = words(s.octets())
            + words(d.octets())
            + u32::from(u8::from(protocol))
            + (len >> 16)
            + (len & 0xFFFF);
        let folded = (total >> 16) + (total & 0xFFFF);
        return ((folded >> 16) + (folded & 0xFFFF)) as u16;
    }
    pseudo_header_v6(src, dst, protocol, len)
}

/// [`pseudo_header`] for IPv6 (mixed versions never reach here, one IP header names both: the
/// addresses are summed anyway rather than panic).
#[inline(never)]
fn pseudo_header_v6(src: &IpAddress, dst: &IpAddress, protocol: IpProtocol, len: usize) -> u16 {
    let mut b = [0u8; 40];
    b[..16].copy_from_slice(&octets(src));
    b[16..32].copy_from_slice(&octets(dst));
    // Upper-layer length as 32 bits (its top half is zero for anything below 64 KiB, where the
    // IPv4 layout's 16 bits give the same sum), then three zero bytes and the protocol.
    b[32..36].copy_from_slice(&(len as u32).to_be_bytes());
    b[39] = protocol.into();
    sum(&b)
}

fn octets(a: &IpAddress) -> [u8; 16] {
    match a {
        IpAddress::Ipv4(a) => a.to_ipv6_mapped().octets(),
        IpAddress::Ipv6(a) => a.octets(),
    }
}

/// Ones' complement addition of two 16-bit sums.
fn add(a: u16, b: u16) -> u16 {
    let (s, carry) = a.overflowing_add(b);
    s + u16::from(carry)
}

/// The 16-bit ones' complement sum of `data` as big-endian words (an odd last byte padded
/// with a zero byte), not complemented.
fn sum(data: &[u8]) -> u16 {
    // The sum of native-endian words, as the big-endian word value.
    u16::from_be(fold(sum64(data)))
}

/// Folds a wide sum of native-endian words to 16 bits with end-around carries (each step adds
/// the high half to the low one).
#[inline]
fn fold(wide: u64) -> u16 {
    let mut x = (wide >> 32) + (wide & 0xFFFF_FFFF);
    x = (x >> 16) + (x & 0xFFFF);
    x = (x >> 16) + (x & 0xFFFF);
    x = (x >> 16) + (x & 0xFFFF);
    x as u16
}

/// Below this many bytes the add-with-carry chain is the fastest sum; from it on, the
/// parallel sums ([`sum64_lanes`], and `sum64_avx2` with `std`).
#[cfg(target_arch = "x86_64")]
const WIDE_FROM: usize = 128;

/// `data` summed into 64 bits whose 16-bit lanes fold to the ones' complement sum of `data`'s
/// 16-bit words (native-endian words, the tail padded with zero bytes).
#[cfg(target_arch = "x86_64")]
fn sum64(data: &[u8]) -> u64 {
    if data.len() < WIDE_FROM {
        return sum64_adc(data);
    }
    #[cfg(feature = "std")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (just detected; the macro caches the answer), and with
        // `std` an operating system saves the AVX registers across context switches.
        return unsafe { sum64_avx2(data) };
    }
    sum64_lanes(data)
}

/// [`sum64`] as native-endian 64-bit words with end-around carry: one `adc` chain.
#[cfg(target_arch = "x86_64")]
fn sum64_adc(data: &[u8]) -> u64 {
    use core::arch::x86_64::_addcarry_u64;
    let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
    let (blocks, rest) = data.as_chunks::<32>();
    let mut acc = 0u64;
    let mut carry = 0u8;
    for b in blocks {
        carry = _addcarry_u64(carry, acc, word(&b[..8]), &mut acc);
        carry = _addcarry_u64(carry, acc, word(&b[8..16]), &mut acc);
        carry = _addcarry_u64(carry, acc, word(&b[16..24]), &mut acc);
        carry = _addcarry_u64(carry, acc, word(&b[24..]), &mut acc);
    }
    let (words, tail) = rest.as_chunks::<8>();
    for w in words {
        carry = _addcarry_u64(carry, acc, u64::from_ne_bytes(*w), &mut acc);
    }
    carry = _addcarry_u64(carry, acc, tail_word(tail), &mut acc);
    _addcarry_u64(carry, acc, 0, &mut acc);
    acc
}

/// The last 0 to 7 bytes of a sum as the little-endian word they start, zero-padded: what
/// `u64::from_ne_bytes` of them padded to 8 bytes gives on x86_64, without a copy of
/// variable length (a call to `memcpy`).
#[cfg(target_arch = "x86_64")]
#[inline]
fn tail_word(tail: &[u8]) -> u64 {
    let mut word = 0u64;
    let mut at = 0;
    if let Some(four) = tail.first_chunk::<4>() {
        word = u64::from(u32::from_le_bytes(*four));
        at = 4;
    }
    if let Some(two) = tail[at..].first_chunk::<2>() {
        word |= u64::from(u16::from_le_bytes(*two)) << (8 * at);
        at += 2;
    }
    if let Some(&one) = tail.get(at) {
        word |= u64::from(one) << (8 * at);
    }
    word
}

/// `data` summed as native-endian 32-bit words into 64 bits (the tail padded with zero
/// bytes): no carry is lost below 2^32 words.
#[cfg(not(target_arch = "x86_64"))]
fn sum64(data: &[u8]) -> u64 {
    sum64_lanes(data)
}

/// [`sum64`] as the 32-bit halves of 64-bit words added into four independent 64-bit
/// accumulators: no carry chain between the adds.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn sum64_lanes(data: &[u8]) -> u64 {
    let (blocks, rest) = data.as_chunks::<32>();
    let mut acc = [0u64; 4];
    for b in blocks {
        let (words, _) = b.as_chunks::<8>();
        for (a, w) in acc.iter_mut().zip(words) {
            let w = u64::from_ne_bytes(*w);
            *a += (w & 0xFFFF_FFFF) + (w >> 32);
        }
    }
    acc[0] + acc[1] + acc[2] + acc[3] + sum64_portable(rest)
}

/// [`sum64_lanes`] 32 bytes at a time in AVX2 registers: each 64-bit lane adds its word's two
/// 32-bit halves, two loads per round into four accumulators; the last bytes (under 64) go
/// through [`sum64_adc`].
///
/// # Safety
///
/// The CPU must have AVX2 and the operating system must save its registers.
#[cfg(all(target_arch = "x86_64", feature = "std"))]
#[target_feature(enable = "avx2")]
unsafe fn sum64_avx2(data: &[u8]) -> u64 {
    use core::arch::x86_64::{
        __m256i, _mm256_add_epi64, _mm256_and_si256, _mm256_loadu_si256, _mm256_set1_epi64x,
        _mm256_setzero_si256, _mm256_srli_epi64, _mm256_storeu_si256,
    };
    let (blocks, rest) = data.as_chunks::<64>();
    let low = _mm256_set1_epi64x(0xFFFF_FFFF);
    let mut acc = [_mm256_setzero_si256(); 4];
    for b in blocks {
        let p = b.as_ptr().cast::<__m256i>();
        // SAFETY: `b` is 64 readable bytes; the loads are unaligned loads of its two halves.
        let (v0, v1) = unsafe { (_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1))) };
        acc[0] = _mm256_add_epi64(acc[0], _mm256_and_si256(v0, low));
        acc[1] = _mm256_add_epi64(acc[1], _mm256_srli_epi64::<32>(v0));
        acc[2] = _mm256_add_epi64(acc[2], _mm256_and_si256(v1, low));
        acc[3] = _mm256_add_epi64(acc[3], _mm256_srli_epi64::<32>(v1));
    }
    let both = _mm256_add_epi64(
        _mm256_add_epi64(acc[0], acc[1]),
        _mm256_add_epi64(acc[2], acc[3]),
    );
    let mut lanes = [0u64; 4];
    // SAFETY: `lanes` is 32 writable bytes; the store is unaligned.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast::<__m256i>(), both) };
    // The rest (under 64 bytes) on the carry chain, which reads its tail without a copy. Its
    // sum may use all 64 bits: the two add with an end-around carry (2^64 is 1 in the ones'
    // complement sum).
    let (total, carry) = lanes.iter().sum::<u64>().overflowing_add(sum64_adc(rest));
    total + u64::from(carry)
}

/// `data` as native-endian 32-bit words into 64 bits, one accumulator: the tails of the
/// parallel sums, and the reference the tests compare them with.
fn sum64_portable(data: &[u8]) -> u64 {
    let (words, tail) = data.as_chunks::<4>();
    let mut acc = 0u64;
    for w in words {
        acc += u64::from(u32::from_ne_bytes(*w));
    }
    let mut last = [0u8; 4];
    last[..tail.len()].copy_from_slice(tail);
    acc + u64::from(u32::from_ne_bytes(last))
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use smoltcp::wire::{Ipv4Address, Ipv6Address, TcpPacket};

    /// smoltcp's checksum over 16-bit words, the reference.
    fn reference(data: &[u8]) -> u16 {
        let mut acc = 0u32;
        for pair in data.chunks(2) {
            acc += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
        }
        while acc >> 16 != 0 {
            acc = (acc & 0xFFFF) + (acc >> 16);
        }
        acc as u16
    }

    /// IPv4 headers of every length (5 to 15 words) pass with the checksum smoltcp's
    /// reference writes, and fail with any single bit flipped, or cut short of a word.
    #[test]
    fn ipv4_headers_verify_as_the_reference_says() {
        for words in 5..=15usize {
            let mut h = bytes(words * 4, words as u32);
            h[10] = 0;
            h[11] = 0;
            let ck = !reference(&h);
            h[10..12].copy_from_slice(&ck.to_be_bytes());
            assert!(verify_ipv4_header(&h), "{words} words");
            for bit in 0..h.len() * 8 {
                let mut bad = h.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                // A flip that turns 0x0000 into 0xFFFF (or back) keeps the ones' complement
                // sum: the reference says so too.
                assert_eq!(
                    verify_ipv4_header(&bad),
                    reference(&bad) == 0xFFFF,
                    "{words} words, bit {bit}"
                );
            }
            assert!(!verify_ipv4_header(&h[..h.len() - 2]));
        }
    }

    fn bytes(n: usize, seed: u32) -> std::vec::Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    /// Every tail length gives the zero-padded word.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn tail_words_are_the_padded_bytes() {
        let data = bytes(7, 3);
        for len in 0..8 {
            let mut padded = [0u8; 8];
            padded[..len].copy_from_slice(&data[..len]);
            assert_eq!(
                tail_word(&data[..len]),
                u64::from_le_bytes(padded),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn sums_match_a_16_bit_word_sum_at_every_length_and_alignment() {
        let data = bytes(1610, 7);
        for len in (0..80).chain([1023, 1024, 1025, 1460, 1500, 1599]) {
            for start in 0..3 {
                let d = &data[start..start + len];
                assert_eq!(sum(d), reference(d), "length {len}, offset {start}");
            }
        }
        // Carries everywhere: all ones, and a sum that wraps many times.
        let ones = [0xFFu8; 1501];
        assert_eq!(sum(&ones), reference(&ones));
        // Every way of summing folds to the portable sum's value, whichever `sum64` picks here.
        let fold = |w: u64| {
            let mut x = (w >> 32) + (w & 0xFFFF_FFFF);
            for _ in 0..3 {
                x = (x >> 16) + (x & 0xFFFF);
            }
            x
        };
        type Way = fn(&[u8]) -> u64;
        let mut ways: std::vec::Vec<(&str, Way)> = std::vec![("lanes", sum64_lanes)];
        #[cfg(target_arch = "x86_64")]
        ways.push(("adc", sum64_adc));
        #[cfg(all(target_arch = "x86_64", feature = "std"))]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (just detected) and a test runs under an OS.
            ways.push(("avx2", |d| unsafe { sum64_avx2(d) }));
        }
        let big = bytes(65536 + 3, 11);
        for (name, way) in ways {
            for len in (0..200).chain([1023, 1501, 4096, 9001, 65535, 65536]) {
                for start in 0..2 {
                    let d = &big[start..start + len];
                    assert_eq!(
                        fold(way(d)),
                        fold(sum64_portable(d)),
                        "{name}, length {len}"
                    );
                }
            }
            let ones = [0xFFu8; 65536];
            assert_eq!(
                way(&ones) % 0xFFFF,
                sum64_portable(&ones) % 0xFFFF,
                "{name}"
            );
        }
    }

    #[test]
    fn computed_checksums_verify_and_agree_with_smoltcp() {
        let pairs = [
            (
                IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1)),
                IpAddress::Ipv4(Ipv4Address::new(192, 168, 200, 254)),
            ),
            // Address words whose sum carries out of 16 bits more than once.
            (
                IpAddress::Ipv4(Ipv4Address::new(255, 255, 255, 254)),
                IpAddress::Ipv4(Ipv4Address::new(255, 255, 254, 255)),
            ),
            (
                IpAddress::Ipv6(Ipv6Address::new(0xfe80, 0, 0, 0, 1, 2, 3, 4)),
                IpAddress::Ipv6(Ipv6Address::new(0x2001, 0xdb8, 0, 0, 0, 0, 0xffff, 1)),
            ),
        ];
        for (src, dst) in pairs {
            for len in [20usize, 21, 32, 33, 1044, 1480] {
                let mut seg = bytes(len, len as u32);
                seg[12] = 5 << 4; // a 20-byte header
                let mut p = TcpPacket::new_unchecked(&mut seg[..]);
                p.set_checksum(0);
                let ours = compute(&src, &dst, IpProtocol::Tcp, p.as_ref());
                p.fill_checksum(&src, &dst);
                assert_eq!(ours, p.checksum(), "length {len}");
                assert!(verify(&src, &dst, IpProtocol::Tcp, &seg));
                seg[len / 2] ^= 0x10;
                assert!(!verify(&src, &dst, IpProtocol::Tcp, &seg), "a flipped bit");
            }
        }
    }

    #[test]
    fn a_segment_in_pieces_verifies_as_it_does_whole() {
        let src = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1));
        let dst = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 2));
        let len = 3001;
        let mut seg = bytes(len, 5);
        seg[12] = 5 << 4;
        let mut p = TcpPacket::new_unchecked(&mut seg[..]);
        p.fill_checksum(&src, &dst);
        assert!(verify(&src, &dst, IpProtocol::Tcp, &seg));
        // Odd and even cut points, an empty piece, and bytes past `len` in the last piece.
        let mut padded = seg.clone();
        padded.extend_from_slice(&[0xAB; 7]);
        for cuts in [
            &[1usize, 2, 3][..],
            &[7, 8, 1000, 1001],
            &[20, 20, 2047],
            &[1500],
        ] {
            let mut parts = std::vec::Vec::new();
            let mut at = 0;
            for &c in cuts {
                parts.push(&padded[at..c]);
                at = c;
            }
            parts.push(&padded[at..]);
            assert!(
                verify_parts(&src, &dst, IpProtocol::Tcp, len, parts.iter().copied()),
                "cut at {cuts:?}"
            );
            // Fewer bytes than `len`: never valid.
            assert!(!verify_parts(
                &src,
                &dst,
                IpProtocol::Tcp,
                len + 8,
                parts.iter().copied()
            ));
        }
        let mut bad = padded.clone();
        bad[2999] ^= 1;
        assert!(!verify_parts(
            &src,
            &dst,
            IpProtocol::Tcp,
            len,
            [&bad[..999], &bad[999..]]
        ));
    }
}
