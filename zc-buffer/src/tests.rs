//! Unit tests: every slot transition, exhaustion and recovery, bounds, storage, the ledger and the
//! waker cell. The concurrent properties are proven by `loom_tests` and stressed by the
//! integration crate.

use std::boxed::Box;
use std::format;
use std::string::ToString;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::vec;
use std::vec::Vec;

use crate::ledger::{CopyLedger, CopySite};
use crate::waker_cell::WakerCell;
use crate::*;

struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let w = Arc::new(CountingWaker(AtomicUsize::new(0)));
    (w.clone(), Waker::from(w))
}

fn wakes(w: &CountingWaker) -> usize {
    w.0.load(Ordering::SeqCst)
}

fn pool(slots: usize) -> &'static FramePool {
    FramePool::leak(PoolConfig::new(slots)).unwrap()
}

fn small_pool(slots: usize, slot_size: usize, headroom: usize) -> &'static FramePool {
    FramePool::leak(
        PoolConfig::new(slots)
            .with_slot_size(slot_size)
            .with_headroom(headroom),
    )
    .unwrap()
}

fn occ(
    free: usize,
    posted: usize,
    stack: usize,
    lent: usize,
    tx: usize,
    device: usize,
) -> Occupancy {
    Occupancy {
        free,
        posted,
        stack,
        lent,
        tx,
        device,
        sent: 0,
        retained: 0,
    }
}

fn meta(n: usize) -> &'static mut [SlotMeta] {
    Box::leak(
        (0..n)
            .map(|_| SlotMeta::new())
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

fn aligned_memory(len: usize) -> &'static mut [u8] {
    let mem: &'static mut [u8] = Box::leak(vec![0u8; len + SLOT_ALIGN].into_boxed_slice());
    let off = mem.as_ptr().align_offset(SLOT_ALIGN);
    &mut mem[off..off + len]
}

// ---- construction -------------------------------------------------------------------------

#[test]
fn config_validation_rejects_bad_geometry() {
    assert_eq!(PoolConfig::new(0).validate(), Err(PoolError::NoSlots));
    assert_eq!(
        PoolConfig::new(MAX_SLOTS + 1).validate(),
        Err(PoolError::TooManySlots {
            requested: MAX_SLOTS + 1
        })
    );
    for bad in [0, 100, MAX_SLOT_SIZE + SLOT_ALIGN] {
        assert_eq!(
            PoolConfig::new(1).with_slot_size(bad).validate(),
            Err(PoolError::BadSlotSize { slot_size: bad })
        );
    }
    assert_eq!(
        PoolConfig::new(1)
            .with_slot_size(128)
            .with_headroom(128)
            .validate(),
        Err(PoolError::HeadroomTooLarge {
            headroom: 128,
            slot_size: 128
        })
    );
    assert_eq!(PoolConfig::new(3).validate(), Ok(()));
    assert_eq!(PoolConfig::new(3).region_len(), 3 * DEFAULT_SLOT_SIZE);
}

#[test]
fn new_checks_region_and_meta() {
    let cfg = PoolConfig::new(4).with_slot_size(64).with_headroom(0);
    let err = FramePool::new(FrameRegion::from_static(aligned_memory(255)), meta(4), cfg);
    assert_eq!(
        err.unwrap_err(),
        PoolError::RegionTooSmall {
            needed: 256,
            given: 255
        }
    );
    let mem = aligned_memory(257);
    let err = FramePool::new(FrameRegion::from_static(&mut mem[1..]), meta(4), cfg);
    assert_eq!(err.unwrap_err(), PoolError::Misaligned);
    let err = FramePool::new(FrameRegion::from_static(aligned_memory(256)), meta(3), cfg);
    assert_eq!(
        err.unwrap_err(),
        PoolError::MetaTooSmall {
            needed: 4,
            given: 3
        }
    );
    // Stale metadata is reset: mark a slot busy, then build a pool on it.
    let m = meta(4);
    m[2].state.store(
        SlotState::Device as u8,
        core::sync::atomic::Ordering::Relaxed,
    );
    let p = FramePool::new(FrameRegion::from_static(aligned_memory(256)), m, cfg).unwrap();
    assert_eq!(p.audit().unwrap(), occ(4, 0, 0, 0, 0, 0));
    assert!(!format!("{p:?}").is_empty());
}

#[test]
fn leaked_pool_starts_all_free() {
    let p = pool(8);
    assert_eq!(p.slot_count(), 8);
    assert_eq!(p.slot_size(), DEFAULT_SLOT_SIZE);
    assert_eq!(p.headroom(), DEFAULT_HEADROOM);
    assert_eq!(p.config(), PoolConfig::new(8));
    assert_eq!(p.audit().unwrap(), occ(8, 0, 0, 0, 0, 0));
    assert_eq!(p.stats(), PoolStats::default());
}

// ---- every transition ---------------------------------------------------------------------

#[test]
fn rx_path_free_posted_stack_lent_free() {
    let p = pool(2);
    let mut posted = p.try_alloc_rx().unwrap(); // FREE -> POSTED
    assert_eq!(p.slot_state(posted.slot_index()), Some(SlotState::Posted));
    assert_eq!(p.audit().unwrap(), occ(1, 1, 0, 0, 0, 0));
    assert_eq!(posted.capacity(), DEFAULT_SLOT_SIZE);
    posted.buffer_mut()[..4].copy_from_slice(b"abcd");
    let slot = posted.slot_index();

    let mut frame = posted.complete(4).unwrap(); // POSTED -> STACK
    assert_eq!(&frame[..], b"abcd");
    assert_eq!(p.slot_state(slot), Some(SlotState::Stack));
    assert_eq!(p.audit().unwrap(), occ(1, 0, 1, 0, 0, 0));

    frame.lend_to_app(); // STACK -> LENT
    frame.lend_to_app(); // idempotent
    assert!(frame.is_lent());
    assert_eq!(p.audit().unwrap(), occ(1, 0, 0, 1, 0, 0));

    drop(frame); // LENT -> FREE
    assert_eq!(p.slot_state(slot), Some(SlotState::Free));
    assert_eq!(p.audit().unwrap(), occ(2, 0, 0, 0, 0, 0));
}

#[test]
fn rx_path_stack_to_free_and_posted_to_free() {
    let p = pool(2);
    let posted = p.try_alloc_rx().unwrap();
    drop(posted); // POSTED -> FREE (ring reset)
    assert_eq!(p.audit().unwrap(), occ(2, 0, 0, 0, 0, 0));

    let frame = p.try_alloc_rx().unwrap().complete(10).unwrap();
    assert!(!frame.is_lent());
    drop(frame); // STACK -> FREE
    assert_eq!(p.audit().unwrap(), occ(2, 0, 0, 0, 0, 0));
}

#[test]
fn tx_path_free_tx_device_free_and_tx_free() {
    let p = pool(2);
    let mut tx = p.try_alloc_tx().unwrap(); // FREE -> TX
    assert_eq!(p.audit().unwrap(), occ(1, 0, 0, 0, 1, 0));
    tx.append(3).unwrap().copy_from_slice(b"xyz");
    let slot = tx.slot_index();
    let inflight = tx.into_device(); // TX -> DEVICE
    assert_eq!(&inflight[..], b"xyz");
    assert_eq!(inflight.slot_index(), slot);
    assert_eq!(p.slot_state(slot), Some(SlotState::Device));
    assert_eq!(p.audit().unwrap(), occ(1, 0, 0, 0, 0, 1));
    drop(inflight); // DEVICE -> FREE
    assert_eq!(p.audit().unwrap(), occ(2, 0, 0, 0, 0, 0));

    let tx = p.try_alloc_tx().unwrap();
    drop(tx); // TX -> FREE (never sent)
    assert_eq!(p.audit().unwrap(), occ(2, 0, 0, 0, 0, 0));
}

#[test]
fn loop_back_turns_the_transmitted_slot_into_a_received_frame_without_a_copy() {
    let p = pool(2);
    let mut tx = p.try_alloc_tx().unwrap();
    tx.append(4).unwrap().copy_from_slice(b"ping");
    let slot = tx.slot_index();
    let addr = tx.as_ptr();
    let mut rx = tx.into_device().loop_back().unwrap(); // TX -> DEVICE -> STACK
    assert_eq!(&rx[..], b"ping");
    assert_eq!(rx.slot_index(), slot);
    assert_eq!(rx.as_ptr(), addr, "the same bytes, not a copy");
    assert_eq!(p.slot_state(slot), Some(SlotState::Stack));
    assert_eq!(p.audit().unwrap(), occ(1, 0, 1, 0, 0, 0));
    rx.advance(1).unwrap();
    assert_eq!(&rx[..], b"ing");
    drop(rx); // STACK -> FREE
    assert_eq!(p.audit().unwrap(), occ(2, 0, 0, 0, 0, 0));
}

#[test]
fn transition_table_is_exactly_the_design() {
    use SlotState::*;
    let legal = [
        (Free, Posted),
        (Free, Tx),
        (Posted, Stack),
        (Posted, Free),
        (Stack, Lent),
        (Stack, Free),
        (Lent, Free),
        (Tx, Device),
        (Tx, Free),
        (Device, Free),
        (Device, Stack),
        (Tx, Retained),
        (Retained, Sent),
        (Retained, Free),
        (Sent, Retained),
        (Sent, Device),
    ];
    for from in SlotState::ALL {
        for to in SlotState::ALL {
            assert_eq!(
                from.can_become(to),
                legal.contains(&(from, to)),
                "{from:?} -> {to:?}"
            );
        }
        assert_eq!(SlotState::from_u8(from as u8), Some(from));
    }
    assert_eq!(SlotState::from_u8(8), None);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "but was")]
fn debug_build_catches_a_transition_from_the_wrong_state() {
    let p = pool(1);
    let frame = p.try_alloc_tx().unwrap();
    // The slot is TX; claiming it is POSTED is a bug the debug check must catch.
    p.transition(
        frame.slot_index() as u32,
        SlotState::Posted,
        SlotState::Stack,
    );
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "is not a slot transition")]
fn debug_build_catches_an_illegal_edge() {
    let p = pool(1);
    let frame = p.try_alloc_tx().unwrap();
    p.transition(frame.slot_index() as u32, SlotState::Tx, SlotState::Lent);
}

// ---- exhaustion and recovery --------------------------------------------------------------

#[test]
fn exhaustion_is_none_and_counted_then_recovers() {
    let p = pool(3);
    let held: Vec<_> = (0..3).map(|_| p.try_alloc_tx().unwrap()).collect();
    assert!(p.try_alloc_tx().is_none());
    assert!(p.try_alloc_rx().is_none());
    assert!(p.try_alloc_rx().is_none());
    assert_eq!(
        p.stats(),
        PoolStats {
            rx_exhausted: 2,
            tx_exhausted: 1
        }
    );
    drop(held);
    assert_eq!(p.audit().unwrap().free, 3);
    assert!(p.try_alloc_rx().is_some());
    assert_eq!(
        p.take_stats(),
        PoolStats {
            rx_exhausted: 2,
            tx_exhausted: 1
        }
    );
    assert_eq!(p.stats(), PoolStats::default());
}

#[test]
fn rx_waiter_is_woken_by_a_return_and_then_gets_the_slot() {
    let p = pool(1);
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let frame = p.try_alloc_rx().unwrap().complete(1).unwrap();
    assert!(p.poll_alloc_rx(&mut cx).is_pending());
    assert_eq!(p.waiting_bits(), (true, false));
    assert_eq!(p.stats().rx_exhausted, 1);
    assert_eq!(wakes(&count), 0);

    drop(frame);
    assert_eq!(wakes(&count), 1, "the return must wake the refiller");
    assert_eq!(p.waiting_bits(), (false, false));
    let Poll::Ready(posted) = p.poll_alloc_rx(&mut cx) else {
        panic!("slot was returned")
    };
    drop(posted);
    // A return with nobody waiting wakes nobody.
    assert_eq!(wakes(&count), 1);
    assert_eq!(p.audit().unwrap().free, 1);
}

#[test]
fn both_waiters_are_woken_by_one_return() {
    let p = pool(1);
    let (rx_count, rx_waker) = counting_waker();
    let (tx_count, tx_waker) = counting_waker();
    let held = p.try_alloc_tx().unwrap();
    assert!(p
        .poll_alloc_rx(&mut Context::from_waker(&rx_waker))
        .is_pending());
    assert!(p
        .poll_alloc_tx(&mut Context::from_waker(&tx_waker))
        .is_pending());
    assert_eq!(p.waiting_bits(), (true, true));
    assert_eq!(p.waiters_registered(), (true, true));
    drop(held);
    assert_eq!((wakes(&rx_count), wakes(&tx_count)), (1, 1));
    assert_eq!(p.waiting_bits(), (false, false));
    // The TX waiter wins the slot; the RX waiter polls, finds none, and waits again.
    let Poll::Ready(tx) = p.poll_alloc_tx(&mut Context::from_waker(&tx_waker)) else {
        panic!("slot was returned")
    };
    assert!(p
        .poll_alloc_rx(&mut Context::from_waker(&rx_waker))
        .is_pending());
    drop(tx);
    assert_eq!((wakes(&rx_count), wakes(&tx_count)), (2, 1));
    assert_eq!(p.audit().unwrap().free, 1);
}

#[test]
fn waiter_that_finds_a_slot_clears_its_bit() {
    let p = pool(2);
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let a = p.try_alloc_tx().unwrap();
    let b = p.try_alloc_tx().unwrap();
    assert!(p.poll_alloc_tx(&mut cx).is_pending());
    drop(a);
    assert_eq!(wakes(&count), 1);
    let Poll::Ready(a) = p.poll_alloc_tx(&mut cx) else {
        panic!()
    };
    drop((a, b));
    assert_eq!(wakes(&count), 1);
    assert_eq!(p.waiting_bits(), (false, false));
    assert_eq!(p.audit().unwrap().free, 2);
}

// ---- bounds ---------------------------------------------------------------------------------

#[test]
fn rx_advance_and_truncate_bounds() {
    let p = pool(1);
    let mut posted = p.try_alloc_rx().unwrap();
    posted.buffer_mut()[..10].copy_from_slice(b"0123456789");
    let mut f = posted.complete(10).unwrap();
    assert_eq!(
        f.advance(11),
        Err(FrameError::Length {
            requested: 11,
            available: 10
        })
    );
    f.advance(2).unwrap();
    assert_eq!(&f[..], b"23456789");
    assert_eq!(f.offset_in_slot(), 2);
    assert_eq!(
        f.truncate(9),
        Err(FrameError::Length {
            requested: 9,
            available: 8
        })
    );
    f.truncate(5).unwrap();
    assert_eq!(&f[..], b"23456");
    f.advance(5).unwrap();
    assert!(f.is_empty());
    f.truncate(0).unwrap();
    assert_eq!(
        f.advance(1).unwrap_err().to_string(),
        "1 bytes requested, 0 available"
    );
    assert_eq!(f.as_ref(), b"");
    drop(f);
    assert_eq!(p.audit().unwrap().free, 1);
}

#[test]
fn complete_out_of_range_is_an_error_and_frees_the_slot() {
    let p = small_pool(1, 128, 0);
    let posted = p.try_alloc_rx().unwrap();
    assert_eq!(
        posted.complete(129).unwrap_err(),
        FrameError::Length {
            requested: 129,
            available: 128
        }
    );
    assert_eq!(p.audit().unwrap().free, 1);
    let posted = p.try_alloc_rx().unwrap();
    assert!(posted.complete_range(usize::MAX, 2).is_err());
    assert_eq!(p.audit().unwrap().free, 1);
    let posted = p.try_alloc_rx().unwrap();
    let f = posted.complete_range(12, 116).unwrap();
    assert_eq!((f.offset_in_slot(), f.len()), (12, 116));
}

#[test]
fn tx_headroom_payload_and_headers() {
    let p = small_pool(1, 256, 64);
    let mut tx = p.try_alloc_tx().unwrap();
    assert_eq!(
        (tx.headroom(), tx.len(), tx.tailroom(), tx.capacity()),
        (64, 0, 192, 192)
    );

    // Payload written in place, then headers in front, innermost first.
    tx.buffer_mut()[..4].copy_from_slice(b"DATA");
    tx.set_len(4).unwrap();
    tx.push_header(3).unwrap().copy_from_slice(b"UDP");
    tx.push_header(2).unwrap().copy_from_slice(b"IP");
    assert_eq!(&tx[..], b"IPUDPDATA");
    assert_eq!(tx.headroom(), 59);
    assert_eq!(tx.offset_in_slot(), 59);

    assert_eq!(
        tx.push_header(60).unwrap_err(),
        FrameError::Headroom {
            requested: 60,
            available: 59
        }
    );
    assert_eq!(
        tx.set_len(198).unwrap_err(),
        FrameError::Length {
            requested: 198,
            available: 197
        }
    );
    assert_eq!(
        tx.append(189).unwrap_err(),
        FrameError::Length {
            requested: 189,
            available: 188
        }
    );
    tx.append(188).unwrap().fill(b'!');
    assert_eq!(tx.tailroom(), 0);
    assert_eq!(tx.len(), 197);
    tx[0] = b'i';
    assert_eq!(&tx[..3], b"iPU");
    assert_eq!(tx.set_headroom(0), Err(FrameError::NotEmpty));
    tx.set_len(0).unwrap();
    assert_eq!(
        tx.set_headroom(257),
        Err(FrameError::Headroom {
            requested: 257,
            available: 256
        })
    );
    tx.set_headroom(0).unwrap();
    assert_eq!((tx.headroom(), tx.capacity()), (0, 256));
    assert_eq!(
        tx.push_header(1).unwrap_err().to_string(),
        "1 bytes of headroom requested, 0 available"
    );
    tx.set_headroom(256).unwrap();
    assert_eq!(tx.capacity(), 0);
    assert!(tx.append(1).is_err());
    assert!(!format!("{tx:?}").is_empty());
}

#[test]
fn bytes_written_through_one_lease_are_read_through_the_next() {
    let p = small_pool(1, 128, 16);
    let mut tx = p.try_alloc_tx().unwrap();
    tx.append(4).unwrap().copy_from_slice(b"keep");
    let addr = tx.as_ptr();
    drop(tx);
    let mut posted = p.try_alloc_rx().unwrap();
    assert_eq!(
        &posted.buffer_mut()[16..20],
        b"keep",
        "slots are not zeroed, nor moved"
    );
    let f = posted.complete_range(16, 4).unwrap();
    assert_eq!(f.as_ptr(), addr, "the same slot memory, never moved");
}

// ---- addresses ------------------------------------------------------------------------------

#[test]
fn device_addresses_follow_the_address_map() {
    let cfg = PoolConfig::new(4).with_slot_size(128).with_headroom(32);
    let mem = aligned_memory(512);
    let base = mem.as_mut_ptr();
    // SAFETY: leaked memory, used only by this pool.
    let region = unsafe {
        FrameRegion::from_raw(
            core::ptr::NonNull::new(base).unwrap(),
            512,
            AddressMap::Contiguous {
                phys_base: 0x8000_0000,
            },
        )
    };
    assert_eq!(region.len(), 512);
    assert!(!region.is_empty());
    let p: &'static FramePool = Box::leak(Box::new(FramePool::new(region, meta(4), cfg).unwrap()));
    let posted = p.try_alloc_rx().unwrap();
    assert_eq!(
        posted.device_addr(),
        0x8000_0000 + 128 * posted.slot_index() as u64
    );
    let tx = p.try_alloc_tx().unwrap();
    let inflight = tx.into_device();
    assert_eq!(
        inflight.device_addr(),
        0x8000_0000 + 128 * inflight.slot_index() as u64 + 32
    );
    assert_eq!(p.slot_of(inflight.as_ptr()), Some(inflight.slot_index()));
    assert_eq!(p.slot_of(base.wrapping_add(511)), Some(3));
    assert_eq!(p.slot_of(base.wrapping_add(512)), None);
    assert_eq!(p.slot_of(base.wrapping_sub(1)), None);

    fn shifted(cpu: usize) -> u64 {
        cpu as u64 ^ 0xF000_0000_0000
    }
    let mem = aligned_memory(128);
    let addr = mem.as_ptr() as usize;
    // SAFETY: leaked memory, used only by this pool.
    let region = unsafe {
        FrameRegion::from_raw(
            core::ptr::NonNull::new(mem.as_mut_ptr()).unwrap(),
            128,
            AddressMap::Custom(shifted),
        )
    };
    let p: &'static FramePool = Box::leak(Box::new(
        FramePool::new(
            region,
            meta(1),
            PoolConfig::new(1).with_slot_size(128).with_headroom(0),
        )
        .unwrap(),
    ));
    assert_eq!(p.try_alloc_rx().unwrap().device_addr(), shifted(addr));
    let identity = pool(1);
    let posted = identity.try_alloc_rx().unwrap();
    let mut posted = posted;
    let cpu = posted.buffer_mut().as_ptr() as u64;
    assert_eq!(posted.device_addr(), cpu);
    assert!(core::ptr::eq(posted.pool(), identity));
}

// ---- types ----------------------------------------------------------------------------------

#[test]
fn leases_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RxFrame>();
    send_sync::<TxFrame>();
    send_sync::<PostedSlot>();
    send_sync::<InFlight>();
    send_sync::<FramePool>();
}

#[test]
fn occupancy_display_and_totals() {
    let o = Occupancy {
        sent: 7,
        retained: 8,
        ..occ(1, 2, 3, 4, 5, 6)
    };
    assert_eq!(o.total(), 36);
    assert_eq!(o.in_use(), 35);
    assert_eq!(
        o.to_string(),
        "FREE=1 POSTED=2 STACK=3 LENT=4 TX=5 DEVICE=6 SENT=7 RETAINED=8"
    );
    for s in SlotState::ALL {
        assert!(o.get(s) >= 1);
    }
}

// ---- storage --------------------------------------------------------------------------------

#[test]
fn static_pool_initialises_once() {
    static POOL: StaticPool<4, 256> = StaticPool::new();
    assert!(POOL.get().is_none());
    assert_eq!(
        POOL.init(256).unwrap_err(),
        PoolError::HeadroomTooLarge {
            headroom: 256,
            slot_size: 256
        }
    );
    // A failed attempt leaves the cell empty, so a correct one can follow.
    let p = POOL.init(64).unwrap();
    assert_eq!(
        p.config(),
        PoolConfig::new(4).with_slot_size(256).with_headroom(64)
    );
    assert_eq!(p.audit().unwrap().free, 4);
    assert_eq!(POOL.init(64).unwrap_err(), PoolError::AlreadyInitialized);
    assert!(core::ptr::eq(POOL.get().unwrap(), p));
    let f = p.try_alloc_tx().unwrap();
    assert_eq!(
        f.as_ptr() as usize % SLOT_ALIGN,
        0,
        "headroom 64 keeps cache-line alignment"
    );
    assert!(!format!("{POOL:?}").is_empty());
}

#[test]
fn pool_cell_rejects_a_second_pool() {
    static CELL: PoolCell = PoolCell::new();
    let mk = || {
        FramePool::new(
            FrameRegion::from_static(aligned_memory(128)),
            meta(1),
            PoolConfig::new(1).with_slot_size(128).with_headroom(0),
        )
    };
    let p = CELL.init_with(mk).unwrap();
    assert_eq!(p.slot_count(), 1);
    assert_eq!(
        CELL.init_with(mk).unwrap_err(),
        PoolError::AlreadyInitialized
    );
}

#[test]
fn errors_display() {
    let all = [
        PoolError::NoSlots,
        PoolError::TooManySlots { requested: 1 },
        PoolError::BadSlotSize { slot_size: 1 },
        PoolError::HeadroomTooLarge {
            headroom: 1,
            slot_size: 1,
        },
        PoolError::RegionTooSmall {
            needed: 1,
            given: 0,
        },
        PoolError::Misaligned,
        PoolError::MetaTooSmall {
            needed: 1,
            given: 0,
        },
        PoolError::AlreadyInitialized,
        PoolError::OutOfMemory,
    ];
    for e in all {
        assert!(!e.to_string().is_empty());
    }
    assert_eq!(
        FrameError::NotEmpty.to_string(),
        "the frame already holds data"
    );
    assert_eq!(
        AuditError::FreeCountMismatch { listed: 1, free: 2 }.to_string(),
        "1 slots on the free list, 2 in state FREE"
    );
}

// ---- the copy ledger ------------------------------------------------------------------------

#[test]
fn ledger_counts_calls_and_bytes_per_site() {
    let l = CopyLedger::new();
    let mut dst = [0u8; 8];
    assert_eq!(l.copy(CopySite::StackRx, &mut dst, b"abc"), 3);
    assert_eq!(&dst[..3], b"abc");
    // Mismatched lengths copy the common prefix, never panic.
    assert_eq!(l.copy(CopySite::StackRx, &mut dst[..2], b"xyz"), 2);
    assert_eq!(&dst[..3], b"xyc");
    l.record(CopySite::KernelFd, 1500);
    let s = l.snapshot();
    assert_eq!(
        (s.calls(CopySite::StackRx), s.bytes(CopySite::StackRx)),
        (2, 5)
    );
    assert_eq!(
        (s.calls(CopySite::KernelFd), s.bytes(CopySite::KernelFd)),
        (1, 1500)
    );
    assert_eq!((s.user_calls(), s.user_bytes()), (2, 5));

    l.copy(CopySite::Emit, &mut dst, b"12345678");
    let d = l.snapshot().since(&s);
    assert_eq!((d.calls(CopySite::Emit), d.bytes(CopySite::Emit)), (1, 8));
    assert_eq!(d.calls(CopySite::StackRx), 0);

    let taken = l.reset();
    assert_eq!(taken.bytes(CopySite::Emit), 8);
    assert_eq!(l.snapshot(), ledger::LedgerSnapshot::default());
    let table = taken.to_string();
    assert!(table.contains("| stack-rx | 2 | 5 |"), "{table}");
    assert!(table.contains("| user space total | 3 | 13 |"), "{table}");
    for site in CopySite::ALL {
        assert!(table.contains(site.name()));
    }
}

#[test]
fn a_paused_ledger_still_copies_but_records_nothing() {
    let l = CopyLedger::new();
    assert!(l.is_counting());
    l.set_counting(false);
    assert!(!l.is_counting());
    let mut dst = [0u8; 4];
    assert_eq!(l.copy(CopySite::AppToSocket, &mut dst, b"wxyz"), 4);
    assert_eq!(&dst, b"wxyz");
    l.record(CopySite::KernelFd, 1500);
    assert_eq!(l.snapshot(), ledger::LedgerSnapshot::default());
    l.set_counting(true);
    l.record(CopySite::KernelFd, 10);
    let s = l.snapshot();
    assert_eq!(
        (s.calls(CopySite::KernelFd), s.bytes(CopySite::KernelFd)),
        (1, 10)
    );
}

#[test]
fn global_ledger_records_through_free_functions() {
    // Other tests may copy concurrently; only what this test adds at its own site is checked.
    let before = ledger::LEDGER.snapshot();
    let mut dst = [0u8; 16];
    ledger::copy(CopySite::Retransmit, &mut dst, &[7u8; 16]);
    ledger::record(CopySite::Retransmit, 100);
    let d = ledger::LEDGER.snapshot().since(&before);
    assert!(d.calls(CopySite::Retransmit) >= 2);
    assert!(d.bytes(CopySite::Retransmit) >= 116);
}

// ---- the waker cell -------------------------------------------------------------------------

#[test]
fn waker_cell_wakes_the_newest_registration_once() {
    let cell = WakerCell::new();
    cell.wake(); // nothing registered: nothing happens
    let (a, wa) = counting_waker();
    let (b, wb) = counting_waker();
    cell.register(&wa);
    cell.register(&wa); // same waker: kept
    cell.register(&wb); // replaced, and the replaced one is not woken
    cell.wake();
    cell.wake(); // emptied by the first wake
    assert_eq!((wakes(&a), wakes(&b)), (0, 1));
    assert!(!cell.is_registered());
}

struct PanicOnClone;

static PANIC_VTABLE: core::task::RawWakerVTable =
    core::task::RawWakerVTable::new(|_| panic!("clone panics"), |_| {}, |_| {}, |_| {});

impl PanicOnClone {
    fn waker() -> Waker {
        // SAFETY: the vtable's functions ignore the data pointer, so any pointer is fine.
        unsafe { Waker::from_raw(core::task::RawWaker::new(core::ptr::null(), &PANIC_VTABLE)) }
    }
}

#[test]
fn waker_cell_stays_consistent_when_clone_panics() {
    let cell = WakerCell::new();
    let (a, wa) = counting_waker();
    cell.register(&wa);
    let bad = PanicOnClone::waker();
    let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| cell.register(&bad)));
    assert!(r.is_err());
    // The cell is usable and still holds the previous waker.
    cell.wake();
    assert_eq!(wakes(&a), 1);
    cell.register(&wa);
    cell.wake();
    assert_eq!(wakes(&a), 2);
}

#[test]
fn rx_append_from_fills_the_tail_room_only() {
    let pool = small_pool(2, 64, 0);
    let mut f = pool.try_alloc_rx().unwrap().complete_range(10, 20).unwrap();
    f.advance(4).unwrap();
    f.truncate(6).unwrap();
    // The tail room starts after the visible bytes, whatever the device wrote past them.
    assert_eq!(f.tail_room(), 64 - 20);
    f.bytes_mut().copy_from_slice(b"abcdef");
    f.append_from(b"gh").unwrap();
    assert_eq!(&f[..], b"abcdefgh");
    assert_eq!(f.tail_room(), 64 - 22);
    let too_long = [0u8; 43];
    assert_eq!(
        f.append_from(&too_long),
        Err(FrameError::Length {
            requested: 43,
            available: 42
        })
    );
    f.append_from(&too_long[..42]).unwrap();
    assert_eq!((f.len(), f.tail_room()), (50, 0));
    f.lend_to_app();
    assert_eq!(f.append_from(b""), Err(FrameError::Lent));
    drop(f);
    assert_eq!(pool.audit().unwrap().free, 2);
}

// ---- retained frames (TX -> RETAINED <-> SENT, DEVICE) ----------------------------------------

fn retained(p: &'static FramePool, payload: &[u8]) -> RetainedFrame {
    let mut tx = p.try_alloc_tx().unwrap();
    tx.append(payload.len()).unwrap().copy_from_slice(payload);
    tx.retain().unwrap()
}

fn state(p: &FramePool, slot: usize) -> SlotState {
    p.slot_state(slot).unwrap()
}

#[test]
fn retain_keeps_the_slot_and_dropping_a_retained_frame_frees_it() {
    let p = pool(2);
    let r = retained(p, b"hello");
    let slot = r.slot_index();
    assert_eq!(state(p, slot), SlotState::Retained);
    assert_eq!(p.occupancy().retained, 1);
    assert_eq!(r.data(), Some(&b"hello"[..]));
    assert_eq!(r.headroom(), DEFAULT_HEADROOM);
    drop(r); // RETAINED -> FREE
    assert_eq!(p.audit().unwrap().free, 2);
}

#[test]
fn send_then_completion_returns_the_slot_to_the_socket() {
    let p = pool(2);
    let mut r = retained(p, b"payload");
    let slot = r.slot_index();
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(mut tx) = r.poll_send(&mut cx) else {
        panic!("idle frame must send")
    };
    assert!(tx.is_retained());
    assert_eq!(&tx[..], b"payload");
    assert_eq!(state(p, slot), SlotState::Sent);
    // While SENT: no second send, no bytes for the socket, no tailroom.
    assert!(r.poll_send(&mut cx).is_pending());
    assert_eq!(r.data(), None);
    assert_eq!(r.tailroom(), 0);
    assert!(r.append(1).is_err());
    tx.push_header(2).unwrap().copy_from_slice(b"H:");
    assert_eq!(tx.slot_index(), slot, "the very slot goes to the device");
    let inflight = tx.into_device(); // stays SENT
    assert!(inflight.is_retained());
    assert_eq!(state(p, slot), SlotState::Sent);
    assert_eq!(p.occupancy().sent, 1);
    drop(inflight); // device done: SENT -> RETAINED
    assert_eq!(state(p, slot), SlotState::Retained);
    assert_eq!(
        r.data(),
        Some(&b"payload"[..]),
        "headers went into the headroom"
    );
    // A resend: RETAINED -> SENT again, then the driver refuses it (dropped unsent).
    let Poll::Ready(tx) = r.poll_send(&mut cx) else {
        panic!("resend")
    };
    drop(tx);
    assert_eq!(state(p, slot), SlotState::Retained);
    drop(r);
    assert_eq!(p.audit().unwrap().free, 2);
}

#[test]
fn socket_letting_go_while_sent_leaves_the_slot_to_the_device() {
    let p = pool(1);
    let mut r = retained(p, b"x");
    let slot = r.slot_index();
    let Poll::Ready(tx) = r.poll_send(&mut Context::from_waker(Waker::noop())) else {
        panic!("send")
    };
    let inflight = tx.into_device();
    drop(r); // ACK arrived: SENT -> DEVICE
    assert_eq!(state(p, slot), SlotState::Device);
    assert_eq!(p.occupancy().free, 0);
    drop(inflight); // completion: DEVICE -> FREE
    assert_eq!(p.audit().unwrap().free, 1);
}

#[test]
fn a_retained_frame_is_not_lent_by_loop_back() {
    let p = pool(1);
    let mut r = retained(p, b"x");
    let Poll::Ready(tx) = r.poll_send(&mut Context::from_waker(Waker::noop())) else {
        panic!("send")
    };
    let back = tx.into_device().loop_back();
    let inflight = back.expect_err("a retained frame is not lent");
    drop(inflight);
    assert_eq!(state(p, r.slot_index()), SlotState::Retained);
    // A retained TxFrame cannot be retained again.
    let Poll::Ready(tx) = r.poll_send(&mut Context::from_waker(Waker::noop())) else {
        panic!("send")
    };
    let tx = tx.retain().expect_err("already retained");
    drop(tx);
    drop(r);
    assert_eq!(p.audit().unwrap().free, 1);
}

#[test]
fn completion_wakes_the_retained_waiter() {
    let p = pool(1);
    let mut r = retained(p, b"x");
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let Poll::Ready(tx) = r.poll_send(&mut cx) else {
        panic!("send")
    };
    assert!(r.poll_idle(&mut cx).is_pending());
    assert_eq!(wakes(&count), 0);
    drop(tx);
    assert_eq!(wakes(&count), 1);
    assert!(r.poll_idle(&mut cx).is_ready());
    drop(r);
    assert_eq!(p.audit().unwrap().free, 1);
}

#[test]
fn retained_frame_appends_and_advances() {
    let p = small_pool(1, 256, 64);
    let mut r = retained(p, b"abc");
    assert_eq!(r.tailroom(), 256 - 64 - 3);
    r.append(3).unwrap().copy_from_slice(b"def");
    r.spare_mut()[..2].copy_from_slice(b"gh");
    r.commit(2).unwrap();
    assert!(r.commit(1000).is_err());
    assert_eq!(r.data(), Some(&b"abcdefgh"[..]));
    r.advance(2);
    assert_eq!((r.len(), r.headroom()), (6, 66));
    let Poll::Ready(tx) = r.poll_send(&mut Context::from_waker(Waker::noop())) else {
        panic!("send")
    };
    assert_eq!(&tx[..], b"cdefgh");
    drop(tx);
    r.advance(100);
    assert!(r.is_empty());
    drop(r);
    assert_eq!(p.audit().unwrap().free, 1);
}

// ---- the owner cache ----------------------------------------------------------------------

#[test]
fn owner_frees_into_its_cache_and_allocates_from_it() {
    let p = pool(4);
    let (_, w) = counting_waker();
    let owner = p.bind_owner(&w).expect("first owner");
    assert!(p.bind_owner(&w).is_none(), "one owner at a time");
    let f = p.try_alloc_tx().unwrap();
    let slot = f.slot_index();
    drop(f);
    assert_eq!(p.owner_cached(), 1, "freed on the owner thread: cached");
    assert_eq!(p.slot_state(slot), Some(SlotState::Free));
    assert_eq!(p.audit().unwrap().free, 4, "a cached slot is free");
    let again = p.try_alloc_rx().unwrap();
    assert_eq!(again.slot_index(), slot, "taken from the cache");
    assert_eq!(p.owner_cached(), 0);
    drop(again);
    assert_eq!(p.owner_cached(), 1);
    drop(owner);
    assert_eq!(p.owner_cached(), 0, "unbinding flushes the cache");
    assert_eq!(p.audit().unwrap().free, 4);
    // Unbound, a new owner may bind.
    assert!(p.bind_owner(&w).is_some());
}

#[test]
fn cache_is_bounded_and_frees_on_other_threads_take_the_shared_list() {
    let p = pool(OWNER_CACHE + 4);
    let (_, w) = counting_waker();
    let _owner = p.bind_owner(&w).unwrap();
    let frames: Vec<TxFrame> = (0..OWNER_CACHE + 4)
        .map(|_| p.try_alloc_tx().unwrap())
        .collect();
    let mut frames = frames.into_iter();
    let elsewhere: Vec<TxFrame> = frames.by_ref().take(2).collect();
    std::thread::spawn(move || drop(elsewhere)).join().unwrap();
    assert_eq!(
        p.owner_cached(),
        0,
        "another thread's frees go to the shared list"
    );
    drop(frames);
    assert_eq!(
        p.owner_cached(),
        OWNER_CACHE,
        "the cache holds at most OWNER_CACHE"
    );
    assert_eq!(p.audit().unwrap().free, OWNER_CACHE + 4);
}

#[test]
fn another_thread_that_finds_no_slot_gets_the_cache_flushed() {
    let p = pool(2);
    let (owner_wakes, w) = counting_waker();
    let owner = p.bind_owner(&w).unwrap();
    drop([p.try_alloc_tx().unwrap(), p.try_alloc_tx().unwrap()]);
    assert_eq!(p.owner_cached(), 2);
    // Another thread sees no free slot: it asks, and the owner's task is woken.
    let got = std::thread::spawn(move || p.try_alloc_tx().map(|f| f.slot_index()))
        .join()
        .unwrap();
    assert_eq!(got, None, "the cache is the owner's");
    assert_eq!(wakes(&owner_wakes), 1, "the owner is asked to flush");
    // The owner's task runs: the cache goes to the shared list.
    owner.service(&Context::from_waker(&w));
    assert_eq!(p.owner_cached(), 0);
    let got = std::thread::spawn(move || p.try_alloc_tx().is_some())
        .join()
        .unwrap();
    assert!(got, "the flushed slots are there for everyone");
    // Nothing asked since: serving again does nothing.
    owner.service(&Context::from_waker(&w));
    assert_eq!(wakes(&owner_wakes), 1);
}

#[test]
fn a_waiter_on_another_thread_makes_the_owner_free_to_the_shared_list() {
    let p = pool(1);
    let (_, w) = counting_waker();
    let _owner = p.bind_owner(&w).unwrap();
    let f = p.try_alloc_tx().unwrap();
    // Another thread waits for a slot (its waiting bit is set in the list head).
    let (waiter_wakes, waiter) = counting_waker();
    let pending = std::thread::spawn(move || {
        p.poll_alloc_tx(&mut Context::from_waker(&waiter))
            .is_pending()
    })
    .join()
    .unwrap();
    assert!(pending);
    drop(f);
    assert_eq!(
        p.owner_cached(),
        0,
        "someone waits: the slot goes where it looks"
    );
    assert_eq!(wakes(&waiter_wakes), 1, "and the waiter is woken");
    let got = std::thread::spawn(move || p.try_alloc_tx().is_some())
        .join()
        .unwrap();
    assert!(got);
}
