//! Unit tests of frame chains: building, the full chain, splitting, trimming, the views, the
//! counted copies, TX growth and transmission, and slots coming back on drop (every test ends
//! with a pool audit). The chain dropped on another thread against the driver's refill is a
//! loom model in `loom_tests`.

use std::task::Poll;
use std::vec::Vec;

use crate::ledger::{self, CopySite};
use crate::*;

/// A pool of `slots` small slots (`slot_size` bytes, `headroom` bytes of TX headroom).
fn pool(slots: usize, slot_size: usize, headroom: usize) -> &'static FramePool {
    FramePool::leak(
        PoolConfig::new(slots)
            .with_slot_size(slot_size)
            .with_headroom(headroom),
    )
    .unwrap()
}

/// A received frame holding `bytes`.
fn rx(p: &'static FramePool, bytes: &[u8]) -> RxFrame {
    let mut posted = p.try_alloc_rx().unwrap();
    posted.buffer_mut()[..bytes.len()].copy_from_slice(bytes);
    posted.complete(bytes.len()).unwrap()
}

/// A TX frame holding `bytes` after the pool's headroom.
fn tx(p: &'static FramePool, bytes: &[u8]) -> TxFrame {
    let mut frame = p.try_alloc_tx().unwrap();
    frame.append(bytes.len()).unwrap().copy_from_slice(bytes);
    frame
}

fn rx_chain(p: &'static FramePool, parts: &[&[u8]]) -> RxChain {
    let mut chain = RxChain::new();
    for part in parts {
        chain.push(rx(p, part)).unwrap();
    }
    chain
}

fn tx_chain(p: &'static FramePool, parts: &[&[u8]]) -> TxChain {
    let mut chain = TxChain::new();
    for part in parts {
        chain.push(tx(p, part)).unwrap();
    }
    chain
}

/// All of a chain's bytes, through its scatter-gather slices.
fn bytes<'a>(slices: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    slices.flat_map(|s| s.iter().copied()).collect()
}

fn slots<F: ChainFrame>(chain: &FrameChain<F>) -> Vec<usize> {
    chain
        .frames()
        .map(|f| f.pool().slot_of(f.as_ptr()).unwrap())
        .collect()
}

/// Every slot of `p` is free and listed once.
fn all_free(p: &FramePool) {
    let occ = p.audit().unwrap();
    assert_eq!(occ.free, p.slot_count(), "{occ}");
}

#[test]
fn build_iterate_and_read_across_slots() {
    let p = pool(4, 64, 0);
    let chain = rx_chain(p, &[b"abc", b"", b"defg", b"h"]);
    assert_eq!(chain.len(), 8);
    assert!(!chain.is_empty());
    assert_eq!(chain.frame_count(), 4);
    assert_eq!(p.occupancy().stack, 4);
    // The empty frame gives no scatter-gather entry.
    let slices: Vec<&[u8]> = chain.iter().collect();
    assert_eq!(slices, [&b"abc"[..], b"defg", b"h"]);
    let back: Vec<&[u8]> = chain.iter().rev().collect();
    assert_eq!(back, [&b"h"[..], b"defg", b"abc"]);
    assert_eq!(chain.head().map(|f| &f[..]), Some(&b"abc"[..]));
    assert_eq!(chain.last().map(|f| &f[..]), Some(&b"h"[..]));

    let mut cursor = chain.cursor();
    assert_eq!(cursor.next_slice(2), Some(&b"ab"[..]));
    cursor.skip(2).unwrap(); // "c" and "d", across a slot boundary
    assert_eq!(cursor.position(), 4);
    assert_eq!(cursor.remaining(), 4);
    assert!(cursor.skip(5).is_err());
    assert_eq!(cursor.position(), 4, "a failed skip moves nothing");
    let mut out = [0u8; 8];
    assert_eq!(cursor.read(&mut out, CopySite::SocketToApp), 4);
    assert_eq!(&out[..4], b"efgh");
    assert_eq!(cursor.next_slice(1), None);
    assert_eq!(cursor.next_slice(0), None);

    std::thread::spawn(move || drop(chain)).join().unwrap();
    all_free(p);
}

#[test]
fn a_full_chain_hands_the_frame_back() {
    let p = pool(MAX_CHAIN_SEGMENTS + 1, 64, 0);
    let mut chain = TxChain::new();
    for i in 0..MAX_CHAIN_SEGMENTS {
        chain.push(tx(p, &[i as u8; 64])).unwrap();
    }
    assert!(chain.is_full());
    let extra = tx(p, b"x");
    let slot = extra.slot_index();
    let extra = chain.push(extra).unwrap_err();
    assert_eq!(extra.slot_index(), slot);
    let extra = chain.push_front(extra).unwrap_err();
    assert_eq!((&extra[..], extra.slot_index()), (&b"x"[..], slot));
    assert_eq!(p.slot_state(slot), Some(SlotState::Tx));
    assert_eq!(chain.len(), MAX_CHAIN_SEGMENTS * 64);
    // Full chain and empty pool: growing errors, never panics.
    drop(extra);
    let _last = p.try_alloc_tx().unwrap();
    assert_eq!(chain.write_with(|_| (1, ())), Err(ChainError::Full));
    assert_eq!(chain.append_from(b"more", CopySite::AppToSocket), 0);
    drop(chain);
    drop(_last);
    all_free(p);
}

#[test]
fn push_front_pop_and_append() {
    let p = pool(6, 64, 0);
    let mut chain = rx_chain(p, &[b"b", b"c"]);
    chain.push_front(rx(p, b"a")).unwrap();
    assert_eq!(bytes(chain.iter()), b"abc");
    let first = chain.pop_front().unwrap();
    assert_eq!(&first[..], b"a");
    let last = chain.pop_back().unwrap();
    assert_eq!(&last[..], b"c");
    assert_eq!(bytes(chain.iter()), b"b");

    let other = rx_chain(p, &[b"d", b"e"]);
    chain.append(other).unwrap();
    assert_eq!(bytes(chain.iter()), b"bde");
    assert_eq!(chain.frame_count(), 3);

    // Concatenating past the bound changes nothing and hands the other chain back.
    let mut many = RxChain::from_frame(first);
    let q = pool(MAX_CHAIN_SEGMENTS, 64, 0);
    let mut big = RxChain::new();
    for _ in 0..MAX_CHAIN_SEGMENTS - 1 {
        big.push(rx(q, b"z")).unwrap();
    }
    many.push(last).unwrap();
    let many = big.append(many).unwrap_err();
    assert_eq!(bytes(many.iter()), b"ac");
    assert_eq!(big.frame_count(), MAX_CHAIN_SEGMENTS - 1);

    // Taking the frames out one by one; the ones not taken go back when the iterator drops.
    let mut frames = chain.into_iter();
    assert_eq!(frames.next().map(|f| f[0]), Some(b'b'));
    assert_eq!(frames.next_back().map(|f| f[0]), Some(b'e'));
    drop(frames);
    drop((many, big));
    all_free(p);
    all_free(q);
}

/// `drain` hands the frames out in order and leaves the chain empty and usable; frames it
/// did not hand out go back to the pool when it drops.
#[test]
fn drain_empties_the_chain_in_place() {
    let p = pool(8, 64, 0);
    let mut chain = tx_chain(p, &[b"a", b"b", b"c"]);
    let got: Vec<u8> = chain.drain().map(|f| f[0]).collect();
    assert_eq!(got, b"abc");
    assert!(chain.is_empty());
    assert_eq!(chain.frame_count(), 0);
    all_free(p);

    chain.push(tx(p, b"d")).unwrap();
    chain.push(tx(p, b"e")).unwrap();
    chain.push(tx(p, b"f")).unwrap();
    let mut frames = chain.drain();
    assert_eq!(frames.size_hint(), (3, Some(3)));
    assert_eq!(frames.next().map(|f| f[0]), Some(b'd'));
    drop(frames);
    assert_eq!(chain.frame_count(), 0);
    all_free(p);
    chain.push(tx(p, b"g")).unwrap();
    assert_eq!(bytes(chain.iter()), b"g");
    drop(chain);
    all_free(p);
}

#[test]
fn advance_returns_each_emptied_slot_at_once() {
    let p = pool(3, 64, 0);
    let mut chain = rx_chain(p, &[b"abc", b"de", b"fgh"]);
    assert_eq!(
        chain.advance(9),
        Err(FrameError::Length {
            requested: 9,
            available: 8
        })
    );
    assert_eq!(chain.len(), 8, "a failed advance changes nothing");
    chain.advance(4).unwrap(); // "abc" gone, "d" hidden
    assert_eq!(bytes(chain.iter()), b"efgh");
    assert_eq!(chain.frame_count(), 2);
    assert_eq!(p.occupancy().free, 1);
    chain.advance(1).unwrap(); // "e": the frame it emptied goes too
    assert_eq!(chain.frame_count(), 1);
    assert_eq!(p.occupancy().free, 2);
    chain.advance(0).unwrap();
    chain.advance(3).unwrap();
    assert_eq!(chain.frame_count(), 0);
    assert!(chain.is_empty());
    all_free(p);
}

#[test]
fn truncate_returns_the_slots_past_the_end() {
    let p = pool(3, 64, 0);
    let mut chain = rx_chain(p, &[b"abc", b"de", b"fgh"]);
    assert!(chain.truncate(9).is_err());
    chain.truncate(4).unwrap();
    assert_eq!(bytes(chain.iter()), b"abcd");
    assert_eq!(chain.frame_count(), 2);
    assert_eq!(p.occupancy().free, 1);
    chain.truncate(3).unwrap(); // ends on a boundary: the second frame goes
    assert_eq!(chain.frame_count(), 1);
    chain.truncate(0).unwrap();
    assert_eq!(chain.frame_count(), 0);
    all_free(p);
}

#[test]
fn split_at_a_boundary_moves_no_byte() {
    let p = pool(3, 64, 0);
    let mut chain = rx_chain(p, &[b"abc", b"de", b"fgh"]);
    let before = slots(&chain);
    let back = chain.split_off(5).unwrap();
    assert_eq!(bytes(chain.iter()), b"abcde");
    assert_eq!(bytes(back.iter()), b"fgh");
    // The same slots, no new one: nothing was copied.
    assert_eq!([slots(&chain), slots(&back)].concat(), before);
    assert_eq!(p.occupancy().stack, 3);

    let mut whole = chain;
    let empty = whole.split_off(whole.len()).unwrap();
    assert_eq!((empty.frame_count(), whole.len()), (0, 5));
    let all = whole.split_off(0).unwrap();
    assert_eq!((whole.frame_count(), all.len()), (0, 5));
    assert_eq!(
        whole.split_off(1).unwrap_err(),
        ChainError::Length {
            requested: 1,
            available: 0
        }
    );
    drop((back, all));
    all_free(p);
}

#[test]
fn split_inside_a_frame_copies_its_tail_into_a_fresh_slot() {
    let p = pool(4, 64, 16);
    let mut chain = tx_chain(p, &[b"0123456789", b"abcdef"]);
    let first = chain.head().unwrap().slot_index();
    let before = ledger::LEDGER.snapshot();
    let back = chain.split_off(4).unwrap();
    let d = ledger::LEDGER.snapshot().since(&before);
    assert!(d.calls(CopySite::ChainSplit) >= 1);
    assert!(d.bytes(CopySite::ChainSplit) >= 6);

    assert_eq!(bytes(chain.iter()), b"0123");
    assert_eq!(chain.head().unwrap().slot_index(), first);
    assert_eq!(bytes(back.iter()), b"456789abcdef");
    assert_eq!(back.frame_count(), 2);
    // The copy is a fresh head with the pool's headroom, ready for headers.
    assert_ne!(back.head().unwrap().slot_index(), first);
    assert_eq!(back.headroom(), 16);
    assert_eq!(p.occupancy().tx, 3);

    // No slot for the copy: an error, and the chain is as it was.
    let _hog = p.try_alloc_tx().unwrap();
    let mut back = back;
    assert_eq!(back.split_off(1).unwrap_err(), ChainError::Exhausted);
    assert_eq!(bytes(back.iter()), b"456789abcdef");
    assert_eq!(back.frame_count(), 2);
    drop((chain, back, _hog));
    all_free(p);
}

#[test]
fn split_copy_of_a_nearly_full_slot_gives_up_headroom_to_fit() {
    let p = pool(2, 64, 32);
    let mut frame = p.try_alloc_tx().unwrap();
    frame.set_headroom(0).unwrap();
    frame.append(64).unwrap().fill(7);
    let mut chain = TxChain::from(frame);
    let back = chain.split_off(10).unwrap();
    assert_eq!(back.len(), 54);
    assert_eq!(back.headroom(), 10);
    assert!(back.iter().flatten().all(|&b| b == 7));
    drop((chain, back));
    all_free(p);
}

#[test]
fn split_of_a_lent_chain_lends_the_copy() {
    let p = pool(3, 64, 0);
    let mut chain = rx_chain(p, &[b"abcd", b"ef"]);
    chain.lend_to_app();
    assert!(chain.is_lent());
    assert_eq!(p.occupancy().lent, 2);
    let back = chain.split_off(2).unwrap();
    assert!(back.is_lent());
    assert_eq!(bytes(back.iter()), b"cdef");
    assert_eq!(p.occupancy().lent, 3);
    drop((chain, back));
    all_free(p);
}

#[test]
fn split_to_takes_the_first_bytes_with_the_head() {
    let p = pool(4, 64, 16);
    let mut queue = tx_chain(p, &[b"aaaa", b"bbbb", b"cccc"]);
    let head = queue.head().unwrap().slot_index();
    let mut send = queue.split_to(6).unwrap();
    assert_eq!(bytes(send.iter()), b"aaaabb");
    assert_eq!(bytes(queue.iter()), b"bbcccc");
    assert_eq!(send.head().unwrap().slot_index(), head);
    send.push_header(3).unwrap().copy_from_slice(b"HDR");
    assert_eq!(bytes(send.iter()), b"HDRaaaabb");
    drop((send, queue));
    all_free(p);
}

#[test]
fn read_with_lends_the_first_bytes_and_frees_consumed_frames() {
    let p = pool(3, 64, 0);
    let mut chain = rx_chain(p, &[b"", b"abc", b"de"]);
    let got = chain.read_with(|b| {
        assert_eq!(b, b"abc");
        b[0] = b'A';
        (1, b.len())
    });
    assert_eq!(got, Some(3));
    assert_eq!(bytes(chain.iter()), b"bcde");
    assert_eq!(p.occupancy().free, 1, "the empty front frame went");
    // Consuming more than offered counts as all of it.
    assert_eq!(chain.read_with(|b| (b.len() + 10, ())), Some(()));
    assert_eq!(bytes(chain.iter()), b"de");
    assert_eq!(p.occupancy().free, 2);
    assert_eq!(chain.read_with(|b| (b.len(), ())), Some(()));
    assert_eq!(chain.read_with(|_| -> (usize, ()) { unreachable!() }), None);
    assert_eq!(chain.frame_count(), 0);
    all_free(p);
}

#[test]
fn copies_go_through_the_ledger() {
    let p = pool(3, 64, 0);
    let mut chain = rx_chain(p, &[b"abc", b"de", b"fgh"]);
    let before = ledger::LEDGER.snapshot();
    let mut out = [0u8; 6];
    assert_eq!(chain.copy_to(&mut out, CopySite::StackRx), 6);
    assert_eq!(&out, b"abcdef");
    assert_eq!(chain.copy_from(b"ABCDEFGHIJ", CopySite::StackRx), 8);
    assert_eq!(bytes(chain.iter()), b"ABCDEFGH");
    let mut big = [0u8; 20];
    assert_eq!(chain.copy_to(&mut big, CopySite::StackRx), 8);
    let d = ledger::LEDGER.snapshot().since(&before);
    assert!(d.calls(CopySite::StackRx) >= 3);
    assert!(d.bytes(CopySite::StackRx) >= 22);
    drop(chain);
    all_free(p);
}

#[test]
fn tx_chain_grows_into_new_frames_without_headroom() {
    let p = pool(4, 64, 16);
    let mut chain = TxChain::new();
    assert_eq!(chain.write_with(|_| (0, ())), Err(ChainError::Empty));
    assert_eq!(chain.append_from(b"x", CopySite::AppToSocket), 0);
    assert_eq!(
        chain.push_header(1).unwrap_err(),
        FrameError::Headroom {
            requested: 1,
            available: 0
        }
    );
    chain.push(p.try_alloc_tx().unwrap()).unwrap(); // the head: 16 bytes of headroom, 48 of room

    let payload: Vec<u8> = (0..100u8).collect();
    assert_eq!(chain.append_from(&payload, CopySite::AppToSocket), 100);
    assert_eq!(chain.frame_count(), 2); // 48 + 64 (no headroom in tails) >= 100
    assert!(chain.frames().skip(1).all(|f| f.headroom() == 0));
    let wrote = chain
        .write_with(|room| {
            assert_eq!(room.len(), 12);
            room[..2].copy_from_slice(&[100, 101]);
            (2, "ok")
        })
        .unwrap();
    assert_eq!(wrote, "ok");
    chain.push_header(4).unwrap().copy_from_slice(b"HEAD");
    assert_eq!(chain.headroom(), 12);
    let all = bytes(chain.iter());
    assert_eq!(&all[..4], b"HEAD");
    assert_eq!(all[4..], (0..102u8).collect::<Vec<_>>()[..]);

    // The pool runs out: a partial append, then `Exhausted`.
    assert_eq!(
        chain.append_from(&[9; 200], CopySite::AppToSocket),
        10 + 64 + 64
    );
    assert_eq!(chain.frame_count(), 4);
    assert_eq!(chain.write_with(|_| (1, ())), Err(ChainError::Exhausted));
    drop(chain);
    all_free(p);
}

#[test]
fn a_tx_chain_goes_to_the_device_and_comes_back_on_drop() {
    let p = pool(3, 64, 16);
    let mut chain = tx_chain(p, &[b"payload-1", b"payload-2"]);
    chain.push_header(2).unwrap().copy_from_slice(b"H:");
    let inflight = chain.into_device();
    assert_eq!(p.occupancy().device, 2);
    assert_eq!(inflight.len(), 20);
    assert!(!inflight.is_empty());
    assert_eq!(inflight.frame_count(), 2);
    assert_eq!(bytes(inflight.iter()), b"H:payload-1payload-2");
    let segments: Vec<(u64, usize)> = inflight.device_segments().collect();
    let expected: Vec<(u64, usize)> = inflight
        .frames()
        .map(|f| (f.device_addr(), f.len()))
        .collect();
    assert_eq!(segments, expected);
    assert_eq!(segments.iter().map(|s| s.1).sum::<usize>(), 20);
    let mut cursor = inflight.cursor();
    cursor.skip(2).unwrap();
    assert_eq!(cursor.remaining(), 18);
    // Completion on another thread.
    std::thread::spawn(move || drop(inflight)).join().unwrap();
    all_free(p);
}

#[test]
fn a_loopback_device_receives_the_chain_it_sent() {
    let p = pool(2, 64, 16);
    let chain = tx_chain(p, &[b"ab", b"cd"]);
    let before = slots(&chain);
    let mut received = chain.into_device().loop_back().unwrap();
    assert_eq!(p.occupancy().stack, 2);
    assert_eq!(slots(&received), before);
    assert_eq!(bytes(received.iter()), b"abcd");
    received.lend_to_app();
    assert_eq!(p.occupancy().lent, 2);
    drop(received);
    all_free(p);
}

#[test]
fn a_chain_of_retained_frames_hands_them_back_to_their_socket() {
    let p = pool(3, 64, 16);
    let mut kept = Vec::new();
    let mut chain = TxChain::new();
    for part in [&b"one"[..], b"two"] {
        let mut r = tx(p, part).retain().unwrap();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let Poll::Ready(frame) = r.poll_send(&mut cx) else {
            panic!("an idle retained frame sends")
        };
        chain.push(frame).unwrap();
        kept.push(r);
    }
    assert_eq!(p.occupancy().sent, 2);
    // Growing does not write past a retained frame's payload: a new frame is taken instead.
    assert_eq!(chain.append_from(b"!", CopySite::Emit), 1);
    assert_eq!(chain.frame_count(), 3);
    assert_eq!(chain.last().unwrap().headroom(), 0);
    // Trimmed off, a retained frame goes back to its socket, not to the pool.
    chain.truncate(3).unwrap();
    assert_eq!(p.occupancy().sent, 1);
    assert_eq!(p.occupancy().retained, 1);
    assert_eq!(kept[1].data(), Some(&b"two"[..]));
    // The retained chain cannot be lent by a loopback device.
    let inflight = chain.into_device();
    let inflight = inflight.loop_back().unwrap_err();
    drop(inflight);
    assert_eq!(p.occupancy().retained, 2);
    drop(kept);
    all_free(p);
}

#[test]
fn chains_are_send_and_sync_and_small() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RxChain>();
    send_sync::<TxChain>();
    send_sync::<InFlightChain>();
    // The leases inline, no allocation: 24 bytes per received frame, 32 per frame to send
    // (its offload marks).
    assert!(core::mem::size_of::<RxChain>() <= MAX_CHAIN_SEGMENTS * 24 + 16);
    assert!(core::mem::size_of::<TxChain>() <= MAX_CHAIN_SEGMENTS * 32 + 16);
}

#[test]
fn a_64_kib_super_segment_fits_in_default_slots() {
    // 65,535 bytes over 2 KiB RX slots after a 12-byte virtio-net header in each, and over TX
    // frames that all keep the default headroom.
    let p = FramePool::leak(PoolConfig::new(MAX_CHAIN_SEGMENTS)).unwrap();
    let mut rx_chain = RxChain::new();
    let mut left = 65_535usize;
    while left > 0 {
        let n = left.min(DEFAULT_SLOT_SIZE - 12);
        let frame = p.try_alloc_rx().unwrap().complete_range(12, n).unwrap();
        rx_chain.push(frame).unwrap();
        left -= n;
    }
    assert_eq!(rx_chain.len(), 65_535);
    drop(rx_chain);

    let mut tx_chain = TxChain::new();
    let mut left = 65_535usize;
    while left > 0 {
        let mut frame = p.try_alloc_tx().unwrap();
        let n = left.min(frame.capacity());
        frame.set_len(n).unwrap();
        tx_chain.push(frame).unwrap();
        left -= n;
    }
    assert!(tx_chain.frame_count() <= 38);
    assert!(p.occupancy().free >= MAX_CHAIN_SEGMENTS - 38);
    drop(tx_chain);
    all_free(p);
}

#[test]
fn chain_error_displays() {
    use std::string::ToString;
    assert_eq!(
        ChainError::Length {
            requested: 5,
            available: 3
        }
        .to_string(),
        "offset 5 past a chain of 3 bytes"
    );
    assert!(ChainError::Full.to_string().contains("48"));
    assert!(!ChainError::Exhausted.to_string().is_empty());
    assert!(!ChainError::Empty.to_string().is_empty());
    let p = pool(1, 64, 0);
    let chain = rx_chain(p, &[b"a"]);
    assert!(std::format!("{chain:?} {:?} {:?}", chain.iter(), chain.cursor()).contains("slot"));
    drop(chain);
    all_free(p);
}
