//! loom models of the pool's concurrent paths: returns racing the driver's refill (a frame's and
//! a frame chain's), concurrent returns, returns racing waker registration, the free list's ABA
//! defence, a retained frame's two owners (device completion against the socket letting go,
//! and against the egress task waiting to resend, a watched slot among others), and the owner
//! cache (against a return on another thread, and against a waiter on another thread).
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p zcnet-buffer --release --lib` (see
//! `scripts/test-all.sh`, which also sets `LOOM_MAX_PREEMPTIONS`).
//!
//! A lost wakeup shows up as a loom deadlock: every waiter here blocks in `loom::future::block_on`,
//! which parks until woken, so an execution in which the pool forgets to wake fails. A lost or
//! doubly returned slot shows up in `FramePool::audit`, run after every execution.

use core::future::poll_fn;

use loom::future::block_on;
use loom::thread;

use crate::*;

/// A small pool freed at the end of each explored execution, after an audit that proves the slot
/// count was conserved exactly.
struct ModelPool {
    pool: &'static FramePool,
    slots: usize,
}

impl ModelPool {
    fn new(slots: usize) -> Self {
        let pool = FramePool::leak(
            PoolConfig::new(slots)
                .with_slot_size(SLOT_ALIGN)
                .with_headroom(0),
        )
        .unwrap();
        Self { pool, slots }
    }
}

impl Drop for ModelPool {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return; // leak rather than double-panic; loom reports the first failure
        }
        let occ = self.pool.audit().expect("free list consistent");
        assert_eq!(
            occ.free, self.slots,
            "every slot back on the free list: {occ}"
        );
        // SAFETY: made by `FramePool::leak`; every lease was dropped (the audit just counted all
        // slots FREE) and `self` is the last user.
        unsafe { crate::heap::reclaim(self.pool) };
    }
}

fn rx_frame(pool: &'static FramePool) -> RxFrame {
    pool.try_alloc_rx().unwrap().complete(1).unwrap()
}

/// The app drops its frame on another thread while the driver, out of slots, waits to refill its
/// ring: the driver gets the slot and is woken (no lost wakeup), exactly once returned.
#[test]
fn frame_dropped_on_another_thread_vs_driver_refill() {
    loom::model(|| {
        let m = ModelPool::new(1);
        let pool = m.pool;
        let mut frame = rx_frame(pool);
        frame.lend_to_app();
        let app = thread::spawn(move || drop(frame));
        let posted = block_on(poll_fn(|cx| pool.poll_alloc_rx(cx)));
        app.join().unwrap();
        assert_eq!(pool.occupancy().posted, 1);
        assert_eq!(pool.audit().unwrap().free, 0);
        drop(posted);
    });
}

/// The app drops a received chain of two slots on another thread while the driver, out of
/// slots, waits to refill its ring with both: each slot of the chain returns on its own and
/// wakes the driver (no lost wakeup: `block_on` would deadlock), and every slot is returned
/// exactly once (the audit).
#[test]
fn chain_dropped_on_another_thread_vs_driver_refill() {
    loom::model(|| {
        let m = ModelPool::new(2);
        let pool = m.pool;
        let mut chain = RxChain::from_frame(rx_frame(pool));
        chain.push(rx_frame(pool)).unwrap();
        chain.lend_to_app();
        // The driver's marks travel with the head frame's lease.
        if let Some(head) = chain.head_mut() {
            head.set_checksum_verified(true);
            head.set_gso_info(Some(GsoInfo {
                kind: GsoKind::TcpV4,
                segment_size: 1448,
            }));
        }
        let app = thread::spawn(move || {
            assert!(chain.head().is_some_and(RxFrame::checksum_verified));
            drop(chain)
        });
        let first = block_on(poll_fn(|cx| pool.poll_alloc_rx(cx)));
        let second = block_on(poll_fn(|cx| pool.poll_alloc_rx(cx)));
        app.join().unwrap();
        assert_ne!(first.slot_index(), second.slot_index());
        assert_eq!(pool.audit().unwrap().posted, 2);
        drop((first, second));
    });
}

/// A transmitted chain completes on the device's thread (each slot DEVICE → FREE) while the
/// stack's egress, out of slots, waits for a TX frame and the driver refills its ring without
/// waiting: egress is woken and gets a slot, and nothing is lost or returned twice.
#[test]
fn chain_completion_vs_tx_waiter_and_try_refill() {
    loom::model(|| {
        let m = ModelPool::new(2);
        let pool = m.pool;
        let mut head = pool.try_alloc_tx().unwrap();
        head.append(20).unwrap().fill(0);
        let mark = ChecksumPartial {
            start: 0,
            offset: 16,
        };
        head.set_checksum_partial(Some(mark)).unwrap();
        let mut chain = TxChain::from_frame(head);
        chain.push(pool.try_alloc_tx().unwrap()).unwrap();
        let inflight = chain.into_device();
        assert_eq!(
            inflight
                .frames()
                .next()
                .and_then(InFlight::checksum_partial),
            Some(mark)
        );
        let device = thread::spawn(move || drop(inflight));
        let refill = pool.try_alloc_rx();
        let frame = block_on(poll_fn(|cx| pool.poll_alloc_tx(cx)));
        device.join().unwrap();
        let occ = pool.audit().unwrap();
        assert_eq!((occ.tx, occ.posted + occ.free), (1, 1));
        drop((refill, frame));
    });
}

/// Same race, but the driver uses the non-blocking path and the frame may still be in the app's
/// hands: either it gets the slot or it sees `None`; the slot is never lost or duplicated.
#[test]
fn try_refill_vs_concurrent_drop() {
    loom::model(|| {
        let m = ModelPool::new(2);
        let pool = m.pool;
        let held = rx_frame(pool);
        let ring = pool.try_alloc_rx().unwrap();
        let app = thread::spawn(move || drop(held));
        let refill = pool.try_alloc_rx();
        app.join().unwrap();
        let occ = pool.audit().unwrap();
        match &refill {
            Some(_) => assert_eq!((occ.posted, occ.free), (2, 0)),
            None => assert_eq!((occ.posted, occ.free), (1, 1)),
        }
        drop((ring, refill));
    });
}

/// Two threads return slots at the same moment while the TX waiter sleeps on an empty pool: both
/// returns land on the free list, the waiter is woken and takes one.
#[test]
fn two_concurrent_returns_with_a_waiter() {
    loom::model(|| {
        let m = ModelPool::new(2);
        let pool = m.pool;
        let a = rx_frame(pool);
        let b = pool.try_alloc_tx().unwrap();
        let t1 = thread::spawn(move || drop(a));
        let t2 = thread::spawn(move || drop(b));
        let got = block_on(poll_fn(|cx| pool.poll_alloc_tx(cx)));
        t1.join().unwrap();
        t2.join().unwrap();
        assert_eq!(pool.audit().unwrap().free, 1);
        drop(got);
    });
}

/// Two concurrent returns with nobody waiting: the free list ends up with both, each once.
#[test]
fn two_concurrent_returns() {
    loom::model(|| {
        let m = ModelPool::new(2);
        let pool = m.pool;
        let a = pool.try_alloc_tx().unwrap().into_device();
        let b = rx_frame(pool);
        let t = thread::spawn(move || drop(a));
        drop(b);
        t.join().unwrap();
    });
}

/// The RX and TX waiters register while slots come back: each registration races a return, and
/// both waiters must finish (their wakeups are carried by the bits in the free-list head).
#[test]
fn return_vs_waker_registration_both_directions() {
    loom::model(|| {
        let m = ModelPool::new(2);
        let pool = m.pool;
        let a = pool.try_alloc_tx().unwrap();
        let b = pool.try_alloc_tx().unwrap();
        let rx = thread::spawn(move || {
            let slot = block_on(poll_fn(|cx| pool.poll_alloc_rx(cx)));
            drop(slot);
        });
        let tx = thread::spawn(move || {
            let frame = block_on(poll_fn(|cx| pool.poll_alloc_tx(cx)));
            drop(frame);
        });
        drop(a);
        drop(b);
        rx.join().unwrap();
        tx.join().unwrap();
    });
}

/// A popper is preempted between reading the head and its compare-exchange while another thread
/// pops two slots and pushes the first back (the ABA pattern): the tag must make the stale
/// compare-exchange fail, so no slot is leased twice and none is lost.
#[test]
fn free_list_survives_aba() {
    loom::model(|| {
        let m = ModelPool::new(3);
        let pool = m.pool;
        let t = thread::spawn(move || {
            let x = pool.try_alloc_tx().unwrap();
            let y = pool.try_alloc_tx().unwrap();
            drop(x);
            drop(y);
        });
        let mine = pool.try_alloc_tx().unwrap();
        let slot = mine.slot_index();
        t.join().unwrap();
        // `mine` is still leased: nobody else may have been handed its slot.
        assert_eq!(pool.slot_state(slot), Some(SlotState::Tx));
        assert_eq!(pool.audit().unwrap().free, 2);
        drop(mine);
    });
}

/// A retained frame, sent: returns the socket's lease and the device's.
fn sent_frame(pool: &'static FramePool) -> (RetainedFrame, InFlight) {
    let mut tx = pool.try_alloc_tx().unwrap();
    tx.append(1).unwrap()[0] = 7;
    let mut kept = tx.retain().unwrap();
    let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
    let core::task::Poll::Ready(tx) = kept.poll_send(&mut cx) else {
        panic!("an idle retained frame sends")
    };
    (kept, tx.into_device())
}

/// The device completes a retained frame on one thread while the ACK makes the socket let go
/// of it on another: whatever the interleaving, the slot is freed exactly once (the audit in
/// `ModelPool::drop` counts every slot FREE and listed once).
#[test]
fn retained_completion_vs_socket_release() {
    loom::model(|| {
        let m = ModelPool::new(2);
        let pool = m.pool;
        let (kept, inflight) = sent_frame(pool);
        let device = thread::spawn(move || drop(inflight));
        drop(kept);
        device.join().unwrap();
    });
}

/// Same race with the completion inside a refused, unsent frame, and a second slot returned
/// concurrently (the free list sees both pushes).
#[test]
fn retained_refusal_vs_release_and_other_returns() {
    loom::model(|| {
        let m = ModelPool::new(2);
        let pool = m.pool;
        let mut tx = pool.try_alloc_tx().unwrap();
        tx.append(1).unwrap()[0] = 1;
        let mut kept = tx.retain().unwrap();
        let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
        let core::task::Poll::Ready(resend) = kept.poll_send(&mut cx) else {
            panic!("send")
        };
        let other = pool.try_alloc_tx().unwrap();
        let device = thread::spawn(move || {
            drop(resend);
            drop(other);
        });
        drop(kept);
        device.join().unwrap();
    });
}

/// The egress task waits to resend a frame the device still has, while the device completes it
/// on another thread: egress is woken (no lost wakeup; a lost one deadlocks `block_on`) and
/// sends the very slot again.
#[test]
fn retained_completion_vs_waiting_egress() {
    loom::model(|| {
        let m = ModelPool::new(1);
        let pool = m.pool;
        let (mut kept, inflight) = sent_frame(pool);
        let slot = kept.slot_index();
        let device = thread::spawn(move || drop(inflight));
        let again = block_on(poll_fn(|cx| kept.poll_send(cx)));
        assert_eq!(again.slot_index(), slot);
        assert_eq!(pool.slot_state(slot), Some(SlotState::Sent));
        drop(again);
        device.join().unwrap();
        assert_eq!(pool.slot_state(slot), Some(SlotState::Retained));
        drop(kept);
    });
}

/// The egress task waits for one of two sent slots while the device completes both on another
/// thread, the other one first: only the watched slot's completion wakes the retained waker, and
/// that wake is not lost whichever comes first, the mark or the completion.
#[test]
fn retained_completion_of_a_watched_slot_among_others() {
    loom::model(|| {
        let m = ModelPool::new(2);
        let pool = m.pool;
        let (a_kept, a_dev) = sent_frame(pool);
        let (b_kept, b_dev) = sent_frame(pool);
        let device = thread::spawn(move || {
            drop(a_dev);
            drop(b_dev);
        });
        block_on(poll_fn(|cx| b_kept.poll_idle(cx)));
        assert_eq!(
            pool.slot_state(b_kept.slot_index()),
            Some(SlotState::Retained)
        );
        device.join().unwrap();
        drop(a_kept);
        drop(b_kept);
    });
}

/// The socket lets go of a sent slot the egress task has marked watched while the device
/// completes it: the slot is freed exactly once (the audit), whoever comes first.
#[test]
fn watched_slot_released_by_the_socket_vs_completion() {
    loom::model(|| {
        let m = ModelPool::new(1);
        let pool = m.pool;
        let (kept, dev) = sent_frame(pool);
        let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
        let _ = kept.poll_idle(&mut cx);
        let device = thread::spawn(move || drop(dev));
        drop(kept);
        device.join().unwrap();
    });
}

/// The owner thread frees into its cache and allocates while another thread returns a slot to
/// the shared list: both slots are found again, none is lost or handed out twice (the audit).
#[test]
fn owner_cache_vs_a_return_on_another_thread() {
    loom::model(|| {
        let m = ModelPool::new(2);
        let pool = m.pool;
        let owner = pool.bind_owner(core::task::Waker::noop()).unwrap();
        let a = pool.try_alloc_tx().unwrap();
        let b = pool.try_alloc_tx().unwrap();
        let t = thread::spawn(move || drop(b));
        drop(a);
        let first = pool.try_alloc_tx().expect("the cached slot");
        t.join().unwrap();
        let second = pool
            .try_alloc_tx()
            .expect("the slot the other thread returned");
        assert_ne!(first.slot_index(), second.slot_index());
        drop(first);
        drop(second);
        drop(owner);
    });
}

/// Another thread waits for a slot while the owner frees the only one, into its cache or not,
/// bound before or after the waiter asked: the waiter gets the slot and the owner's task is
/// woken to flush when it must (a lost request or wake leaves one of them parked: a loom
/// deadlock).
#[test]
fn waiter_on_another_thread_vs_the_owner_cache() {
    loom::model(|| {
        let m = ModelPool::new(1);
        let pool = m.pool;
        let frame = pool.try_alloc_tx().unwrap();
        let waiter = thread::spawn(move || {
            let f = block_on(poll_fn(|cx| pool.poll_alloc_tx(cx)));
            drop(f);
        });
        let mut owner = None;
        let mut frame = Some(frame);
        block_on(poll_fn(|cx| {
            let o = owner.get_or_insert_with(|| pool.bind_owner(cx.waker()).unwrap());
            drop(frame.take()); // the first time: into the cache, unless the waiter's bit shows
            o.service(cx);
            if pool.owner_cached() == 0 {
                core::task::Poll::Ready(())
            } else {
                core::task::Poll::Pending
            }
        }));
        waiter.join().unwrap();
        drop(owner);
    });
}
