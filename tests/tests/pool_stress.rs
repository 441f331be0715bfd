//! Multi-threaded stress of the frame pool: a driver thread receives frames into a simulated ring
//! and re-posts after every completion while worker threads hold, lend and drop the frames (and
//! lease and drop TX frames of their own). At least one million round trips; afterwards every
//! slot is back and the free list is exact.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, TryRecvError};
use std::sync::Arc;
use std::task::Poll;
use std::thread;
use std::time::Duration;

use zcnet_buffer::{Driver, FramePool, PoolConfig, RxFrame};
use zcnet_tests::sim_nic::SimNic;
use zcnet_tests::wakers::block_on_poll;

const ROUND_TRIPS: u64 = 1_000_000;
const WORKERS: usize = 3;
const SLOTS: usize = RING + 3;
const RING: usize = 16;
/// Frames a worker keeps before dropping the oldest. The pool has only 3 spare slots beyond the
/// ring, so frames in the channels and in the workers drain it: the driver really runs dry and
/// must wait for returns through its waker.
const HOLD: usize = 8;
const PATIENCE: Duration = Duration::from_secs(20);

fn worker(
    rx: std::sync::mpsc::Receiver<RxFrame>,
    pool: &'static FramePool,
    id: usize,
    seen: Arc<AtomicU64>,
) {
    let mut held: VecDeque<RxFrame> = VecDeque::new();
    let mut n = 0u64;
    loop {
        let frame = match rx.try_recv() {
            Ok(f) => f,
            Err(TryRecvError::Empty) => {
                // Nothing queued: give everything back before blocking, or the driver could
                // wait for slots we sit on.
                held.clear();
                match rx.recv() {
                    Ok(f) => f,
                    Err(_) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        };
        let mut frame = frame;
        // The payload is the sequence number the "device" wrote; check it survived the trip.
        let seq = u64::from_le_bytes(frame[..8].try_into().unwrap());
        assert_eq!(frame.len(), 8 + (seq % 64) as usize, "frame {seq} intact");
        n += 1;
        match n % 4 {
            0 => drop(frame),
            1 => {
                frame.lend_to_app();
                held.push_back(frame);
            }
            2 => {
                frame.advance(8).unwrap();
                held.push_back(frame);
            }
            _ => {
                held.push_back(frame);
                // A TX lease of our own, racing the driver for slots.
                if let Some(mut tx) = pool.try_alloc_tx() {
                    tx.append(8)
                        .unwrap()
                        .copy_from_slice(&(id as u64).to_le_bytes());
                    if n % 8 == 3 {
                        drop(tx.into_device());
                    }
                }
            }
        }
        while held.len() > HOLD {
            held.pop_front();
        }
    }
    seen.fetch_add(n, Ordering::Relaxed);
}

#[test]
fn a_million_round_trips_conserve_every_slot() {
    let pool =
        FramePool::leak(PoolConfig::new(SLOTS).with_slot_size(128).with_headroom(0)).unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let mut senders = Vec::new();
    let mut handles = Vec::new();
    for id in 0..WORKERS {
        let (tx, rx) = sync_channel::<RxFrame>(4);
        senders.push(tx);
        let seen = seen.clone();
        handles.push(thread::spawn(move || worker(rx, pool, id, seen)));
    }

    let mut nic = SimNic::new(pool, RING, 8);
    let mut payload = [0u8; 72];
    let mut delivered = 0u64;
    let mut seq = 0u64;
    while delivered < ROUND_TRIPS {
        // Device side: one frame arrives (dropped by the device if the ring is empty).
        payload[..8].copy_from_slice(&seq.to_le_bytes());
        let len = 8 + (seq % 64) as usize;
        if nic.device_receive(&payload[..len]) {
            seq += 1;
        } else {
            // The ring ran dry: the frame was dropped; the next has the same sequence number.
        }
        // Driver side: hand the frame up (refilling the ring), waiting for returned slots
        // through the pool's waker when the ring cannot be refilled.
        let frame = block_on_poll(PATIENCE, |cx| match nic.poll_receive(cx) {
            Poll::Ready(f) => Poll::Ready(Some(f)),
            Poll::Pending if nic.posted() == 0 => Poll::Pending,
            Poll::Pending => Poll::Ready(None),
        });
        if let Some(frame) = frame {
            senders[(delivered % WORKERS as u64) as usize]
                .send(frame)
                .unwrap();
            delivered += 1;
        }
    }
    drop(senders);
    for h in handles {
        h.join().unwrap();
    }
    drop(nic);

    assert_eq!(seen.load(Ordering::Relaxed), ROUND_TRIPS);
    let occ = pool.audit().expect("free list consistent after the run");
    assert_eq!(occ.free, SLOTS, "every slot returned: {occ}");
    assert_eq!(occ.total(), SLOTS);
    let stats = pool.stats();
    eprintln!(
        "{ROUND_TRIPS} round trips; rx exhausted {} times, tx exhausted {} times",
        stats.rx_exhausted, stats.tx_exhausted
    );
    assert!(
        stats.rx_exhausted > 0,
        "the workers never drained the pool: the waker path went untested"
    );
}

/// Many threads lease and drop TX frames as fast as they can on a tiny pool while one thread
/// waits for RX slots through the pool's waker: no slot is lost, no wakeup is lost.
#[test]
fn contended_lease_and_drop_with_a_waiting_refiller() {
    const SLOTS: usize = 4;
    const PER_THREAD: u64 = 250_000;
    let pool = FramePool::leak(PoolConfig::new(SLOTS).with_slot_size(64).with_headroom(0)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(thread::spawn(move || {
            let mut got = 0u64;
            while got < PER_THREAD {
                if let Some(f) = pool.try_alloc_tx() {
                    got += 1;
                    drop(f);
                }
            }
        }));
    }
    let refiller = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut posted = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let slot = block_on_poll(PATIENCE, |cx| pool.poll_alloc_rx(cx));
                posted += 1;
                drop(slot);
            }
            posted
        })
    };
    for h in handles {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let posted = refiller.join().unwrap();
    assert!(posted > 0);
    assert_eq!(pool.audit().unwrap().free, SLOTS);
}

/// The owner cache under contention: the owner thread binds the pool's cache, refills from it
/// (waiting through the pool's waker when nothing is free) and frees half of its frames itself,
/// into the cache, while a worker drops the other half (to the shared list) and two more lease
/// TX frames of their own on a tiny pool, finding none whenever the free slots sit in the
/// owner's cache (then they ask the owner, whose task is woken, to flush it). No slot is lost,
/// no waiter starves.
#[test]
fn owner_cache_with_returns_and_leases_on_other_threads() {
    const SLOTS: usize = 6;
    const ROUNDS: u64 = 300_000;
    let pool = FramePool::leak(PoolConfig::new(SLOTS).with_slot_size(64).with_headroom(0)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (to_worker, from_owner) = sync_channel::<RxFrame>(2);
    let dropper = thread::spawn(move || {
        let mut n = 0u64;
        while let Ok(f) = from_owner.recv() {
            n += 1;
            drop(f);
        }
        n
    });
    let leasers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut got = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match pool.try_alloc_tx() {
                        Some(f) => {
                            got += 1;
                            drop(f);
                        }
                        None => thread::yield_now(),
                    }
                }
                got
            })
        })
        .collect();

    // The owner's task: one waker for the whole run, as a task has.
    let (handle, waker) = zcnet_tests::wakers::ThreadWaker::current();
    let mut cx = std::task::Context::from_waker(&waker);
    let owner = pool.bind_owner(&waker).expect("the pool's first owner");
    let mut cached_frees = 0u64;
    for i in 0..ROUNDS {
        let posted = loop {
            let before = handle.wakes();
            owner.service(&cx);
            if let Poll::Ready(s) = pool.poll_alloc_rx(&mut cx) {
                break s;
            }
            let start = std::time::Instant::now();
            while handle.wakes() == before {
                thread::park_timeout(PATIENCE);
                assert!(
                    handle.wakes() != before || start.elapsed() < PATIENCE,
                    "the owner was never woken: a lost wakeup"
                );
            }
        };
        let frame = posted.complete(1).unwrap();
        if i % 2 == 0 {
            drop(frame);
            cached_frees += u64::from(pool.owner_cached() > 0);
        } else {
            to_worker.send(frame).unwrap();
        }
    }
    drop(to_worker);
    let dropped = dropper.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let leased: u64 = leasers.into_iter().map(|h| h.join().unwrap()).sum();
    drop(owner);

    assert_eq!(dropped, ROUNDS / 2);
    let occ = pool.audit().expect("free list consistent after the run");
    assert_eq!(occ.free, SLOTS, "every slot returned: {occ}");
    assert_eq!(pool.owner_cached(), 0, "unbinding flushed the cache");
    eprintln!("{ROUNDS} owner rounds ({cached_frees} frees found the cache in use); {leased} TX leases on other threads");
    assert!(cached_frees > 0, "the owner's frees never used the cache");
    assert!(leased > 0, "the other threads never got a slot");
}
