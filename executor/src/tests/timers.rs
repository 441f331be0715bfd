//! Timers on virtual time: ordering, past and far deadlines, cancellation, timeout, interval, and
//! the 100k-sleeps ordering test.

use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use super::{virtual_executor, MS};
use crate::time::{self, Elapsed};
use crate::Instant;

#[test]
fn sleep_completes_at_its_deadline_not_before() {
    let (p, exec) = virtual_executor();
    let start = exec.now();
    exec.block_on(time::sleep(Duration::from_millis(250)));
    assert_eq!(exec.now() - start, Duration::from_millis(250));
    assert_eq!(exec.stats().timers_fired, 1);
    // Sub-tick deadlines round up to the next tick.
    p.advance(MS / 3);
    let t = exec.now() + Duration::from_micros(10);
    exec.block_on(time::sleep_until(t));
    assert!(exec.now() >= t);
    assert_eq!(exec.now().as_nanos() % MS, 0);
}

#[test]
fn a_past_deadline_fires_at_once_without_the_wheel() {
    let (p, exec) = virtual_executor();
    p.advance(10 * MS);
    exec.block_on(time::sleep_until(Instant::from_nanos(MS)));
    exec.block_on(time::sleep(Duration::ZERO));
    assert_eq!(exec.stats().timers_fired, 0);
    assert_eq!(exec.stats().waits, 0);
    assert_eq!(exec.armed_timers(), 0);
}

#[test]
fn far_deadlines_cascade_down_and_fire_on_time() {
    let (_, exec) = virtual_executor();
    for d in [
        Duration::from_millis(64),
        Duration::from_millis(4097),
        Duration::from_secs(3 * 3600),
        Duration::from_secs(3 * 24 * 3600),
        // Beyond the wheel's range (64^6 ms ≈ 2.2 years): parked at the top and re-inserted.
        Duration::from_secs(5 * 365 * 24 * 3600),
    ] {
        let start = exec.now();
        exec.block_on(time::sleep(d));
        assert_eq!(exec.now() - start, d, "deadline {d:?}");
    }
}

#[test]
fn a_far_sleep_wakes_the_idle_executor_once() {
    // 3001 ms lies in a level-1 slot that starts at 2944 ms: the executor must sleep straight to
    // the deadline, not wake at the slot's start to cascade the entry and sleep again.
    for d in [
        Duration::from_millis(3001),
        Duration::from_secs(3 * 3600 + 7),
    ] {
        let (_, exec) = virtual_executor();
        let start = exec.now();
        exec.block_on(time::sleep(d));
        assert_eq!(exec.now() - start, d);
        assert_eq!(exec.stats().waits, 1, "one wait for {d:?}");
    }
}

#[test]
fn dropping_a_sleep_cancels_it() {
    let (_, exec) = virtual_executor();
    exec.block_on(async {
        {
            let mut s = pin!(time::sleep(Duration::from_secs(10)));
            assert!(core::future::poll_fn(|cx| Poll::Ready(s.as_mut().poll(cx)))
                .await
                .is_pending());
            assert_eq!(exec.armed_timers(), 1);
        }
        assert_eq!(exec.armed_timers(), 0);
    });
    // Nothing left to wait for: the executor never slept.
    assert_eq!(exec.stats().waits, 0);
}

#[test]
fn timeout_yields_ok_or_elapsed() {
    let (_, exec) = virtual_executor();
    let r = exec.block_on(time::timeout(Duration::from_millis(10), async { 3 }));
    assert_eq!(r, Ok(3));
    let r = exec.block_on(time::timeout(
        Duration::from_millis(10),
        time::sleep(Duration::from_millis(20)),
    ));
    assert_eq!(r, Err(Elapsed));
    let start = exec.now();
    let r = exec.block_on(time::timeout(
        Duration::from_millis(30),
        time::sleep(Duration::from_millis(20)),
    ));
    assert_eq!(r, Ok(()));
    assert_eq!(exec.now() - start, Duration::from_millis(20));
    assert_eq!(exec.armed_timers(), 0, "the losing timer was cancelled");
}

#[test]
fn interval_ticks_on_schedule_and_skips_missed_ticks() {
    let (p, exec) = virtual_executor();
    let start = exec.now();
    let ticks = exec.block_on(async {
        let mut iv = time::interval(Duration::from_millis(10));
        let mut v = Vec::new();
        for i in 0..3 {
            v.push(iv.tick().await);
            if i == 1 {
                // The task is late by 35 ms: ticks at +30 and +40 are skipped.
                p.advance(35 * MS);
            }
        }
        v
    });
    let ms = |t: Instant| (t - start).as_millis();
    assert_eq!(
        ticks.iter().map(|&t| ms(t)).collect::<Vec<_>>(),
        [10, 20, 60]
    );
}

#[test]
fn reset_rearms_a_sleep() {
    let (_, exec) = virtual_executor();
    let start = exec.now();
    exec.block_on(async {
        let mut s = pin!(time::sleep(Duration::from_secs(100)));
        let _ = core::future::poll_fn(|cx| Poll::Ready(s.as_mut().poll(cx))).await;
        s.as_mut().reset(exec.now() + Duration::from_millis(5));
        s.await;
    });
    assert_eq!(exec.now() - start, Duration::from_millis(5));
}

/// A waker replaced after `reset` is dropped outside the timer lock: its drop may call back into
/// the executor (here it records whether the lock was held; taking it would deadlock).
#[test]
fn a_replaced_waker_is_dropped_outside_the_timer_lock() {
    use std::sync::atomic::{AtomicU8, Ordering::SeqCst};
    let (_, exec) = virtual_executor();
    // 0 = not dropped yet, 1 = dropped with the lock free, 2 = dropped under the lock.
    static DROPPED: AtomicU8 = AtomicU8::new(0);
    struct Probe(&'static crate::Executor);
    impl std::task::Wake for Probe {
        fn wake(self: Arc<Self>) {}
    }
    impl Drop for Probe {
        fn drop(&mut self) {
            let held = self.0.timers.is_locked();
            DROPPED.store(if held { 2 } else { 1 }, SeqCst);
        }
    }
    let mut s = std::boxed::Box::pin(exec.sleep(Duration::from_secs(100)));
    let first = std::task::Waker::from(Arc::new(Probe(exec)));
    assert!(s
        .as_mut()
        .poll(&mut Context::from_waker(&first))
        .is_pending());
    drop(first); // the entry now holds the only reference
    s.as_mut().reset(exec.now() + Duration::from_secs(50));
    assert_eq!(
        DROPPED.load(SeqCst),
        0,
        "reset keeps the waker until the next poll"
    );
    let second = std::task::Waker::noop();
    assert!(s
        .as_mut()
        .poll(&mut Context::from_waker(second))
        .is_pending());
    assert_eq!(
        DROPPED.load(SeqCst),
        1,
        "old waker dropped, and outside the lock"
    );
}

#[test]
fn re_polling_with_a_new_waker_wakes_the_newest() {
    let (_, exec) = virtual_executor();
    let a = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let b = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    struct W(Arc<std::sync::atomic::AtomicUsize>);
    impl std::task::Wake for W {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let wa = std::task::Waker::from(Arc::new(W(a.clone())));
    let wb = std::task::Waker::from(Arc::new(W(b.clone())));
    let mut s = std::boxed::Box::pin(exec.sleep(Duration::from_millis(5)));
    assert!(s.as_mut().poll(&mut Context::from_waker(&wa)).is_pending());
    assert!(s.as_mut().poll(&mut Context::from_waker(&wb)).is_pending());
    exec.block_on(time::sleep(Duration::from_millis(10)));
    use std::sync::atomic::Ordering::SeqCst;
    assert_eq!((a.load(SeqCst), b.load(SeqCst)), (0, 1));
    assert!(s.as_mut().poll(&mut Context::from_waker(&wa)).is_ready());
}

/// 100,000 concurrent sleeps with seeded random deadlines (many ties) complete in deadline order,
/// none early.
#[test]
fn a_hundred_thousand_sleeps_complete_in_deadline_order() {
    const N: u64 = 100_000;
    let (_, exec) = virtual_executor();
    let sp = exec.spawner();
    let done: Arc<Mutex<Vec<(u64, u64)>>> = Arc::new(Mutex::new(Vec::with_capacity(N as usize)));
    let mut rng = super::wheel_model::Rng(0x5eed_0001);
    let start = exec.now();
    let mut already_due = 0;
    for _ in 0..N {
        // Up to ~70 s, so every level below the top is exercised; ties are frequent.
        let ms = match rng.next() % 4 {
            0 => rng.next() % 64,
            1 => rng.next() % 4096,
            _ => rng.next() % 70_000,
        };
        let deadline = start + Duration::from_millis(ms);
        if ms == 0 {
            already_due += 1; // completes on its first poll, without the wheel
        }
        let done = done.clone();
        drop(sp.spawn(async move {
            time::sleep_until(deadline).await;
            let now = time::now().await;
            done.lock()
                .unwrap()
                .push((deadline.as_nanos(), now.as_nanos()));
        }));
    }
    exec.run_until_idle();
    assert_eq!(exec.armed_timers() as u64, N - already_due);
    exec.block_on(time::sleep(Duration::from_secs(71)));
    let done = done.lock().unwrap();
    assert_eq!(done.len() as u64, N);
    for w in done.windows(2) {
        assert!(w[0].0 <= w[1].0, "completion order follows deadlines");
    }
    for &(deadline, at) in done.iter() {
        assert!(at >= deadline, "never early");
        assert!(at - deadline < MS, "fired in the deadline's tick");
    }
    assert_eq!(exec.armed_timers(), 0);
}

#[test]
fn a_sleep_survives_a_waker_whose_clone_panics() {
    let (_, exec) = virtual_executor();
    let bad = super::panicking_clone_waker();
    let mut s = std::boxed::Box::pin(exec.sleep(Duration::from_millis(5)));
    // First poll (insertion) with the bad waker: panics before touching the wheel.
    let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
        let _ = s.as_mut().poll(&mut Context::from_waker(&bad));
    }));
    assert!(r.is_err());
    assert_eq!(exec.armed_timers(), 0);
    // A good poll links it; a bad re-poll panics without the lock held or the entry damaged.
    assert!(s
        .as_mut()
        .poll(&mut Context::from_waker(std::task::Waker::noop()))
        .is_pending());
    let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
        let _ = s.as_mut().poll(&mut Context::from_waker(&bad));
    }));
    assert!(r.is_err());
    assert_eq!(exec.armed_timers(), 1);
    exec.block_on(time::sleep(Duration::from_millis(10)));
    assert!(s
        .as_mut()
        .poll(&mut Context::from_waker(std::task::Waker::noop()))
        .is_ready());
    assert_eq!(exec.armed_timers(), 0);
}

/// A probe waker for the "expired while the re-poll cloned its waker" path: its first clone lets
/// the deadline pass and runs the executor (which fires the timer while the `Sleep` has let go of
/// the lock to clone), and every drop records whether the timer lock was held.
struct RacingClone {
    platform: &'static super::VirtualPlatform,
    exec: &'static crate::Executor,
    clones: std::sync::atomic::AtomicUsize,
    drops: std::sync::atomic::AtomicUsize,
    drops_under_lock: std::sync::atomic::AtomicUsize,
}

static RACING_CLONE_VTABLE: core::task::RawWakerVTable =
    core::task::RawWakerVTable::new(racing_clone, racing_drop, |_| {}, racing_drop);

fn racing(data: *const ()) -> &'static RacingClone {
    // SAFETY: the vtable is only used with pointers to leaked `RacingClone`s.
    unsafe { &*data.cast::<RacingClone>() }
}

fn racing_clone(data: *const ()) -> core::task::RawWaker {
    let r = racing(data);
    if r.clones.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
        r.platform.advance(5 * MS);
        r.exec.run_until_idle();
    }
    core::task::RawWaker::new(data, &RACING_CLONE_VTABLE)
}

fn racing_drop(data: *const ()) {
    use std::sync::atomic::Ordering::SeqCst;
    let r = racing(data);
    r.drops.fetch_add(1, SeqCst);
    if r.exec.timers.is_locked() {
        r.drops_under_lock.fetch_add(1, SeqCst);
    }
}

/// A re-poll with a new waker lets go of the timer lock to clone it; if the timer expires
/// meanwhile the poll completes, and the clone it no longer needs is dropped after the lock is
/// released (a waker's drop may call back into the executor).
#[test]
fn a_waker_clone_that_lost_to_the_timer_is_dropped_outside_the_lock() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let (platform, exec) = virtual_executor();
    let probe: &'static RacingClone = std::boxed::Box::leak(std::boxed::Box::new(RacingClone {
        platform,
        exec,
        clones: AtomicUsize::new(0),
        drops: AtomicUsize::new(0),
        drops_under_lock: AtomicUsize::new(0),
    }));
    let mut s = std::boxed::Box::pin(exec.sleep(Duration::from_millis(5)));
    assert!(s
        .as_mut()
        .poll(&mut Context::from_waker(std::task::Waker::noop()))
        .is_pending());
    // SAFETY: RACING_CLONE_VTABLE's functions keep the RawWaker contract for a `&'static
    // RacingClone` (clone and drop count; nothing is owned).
    let w = unsafe {
        std::task::Waker::from_raw(core::task::RawWaker::new(
            core::ptr::from_ref(probe).cast(),
            &RACING_CLONE_VTABLE,
        ))
    };
    assert!(
        s.as_mut().poll(&mut Context::from_waker(&w)).is_ready(),
        "the timer fired during the clone"
    );
    assert_eq!(exec.stats().timers_fired, 1);
    assert_eq!(probe.clones.load(SeqCst), 1);
    assert_eq!(probe.drops.load(SeqCst), 1, "the unused clone was dropped");
    assert_eq!(
        probe.drops_under_lock.load(SeqCst),
        0,
        "and dropped outside the lock"
    );
    assert_eq!(exec.armed_timers(), 0);
    drop(w);
}

/// Polls its future with a waker of its own that forwards wakes to the caller's, as
/// `FuturesUnordered` and `select`-style combinators do: the timers inside see a waker that is
/// not the executor's.
struct Wrapped<F>(std::pin::Pin<std::boxed::Box<F>>);

struct Forward(std::task::Waker);

impl std::task::Wake for Forward {
    fn wake(self: Arc<Self>) {
        self.0.wake_by_ref();
    }
}

impl<F: Future> Future for Wrapped<F> {
    type Output = F::Output;
    fn poll(mut self: core::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let w = std::task::Waker::from(Arc::new(Forward(cx.waker().clone())));
        self.0.as_mut().poll(&mut Context::from_waker(&w))
    }
}

fn wrapped<F: Future>(f: F) -> Wrapped<F> {
    Wrapped(std::boxed::Box::pin(f))
}

/// `sleep`, `sleep_until`, `timeout`, `now` and `interval` polled with a wrapped waker, in
/// `block_on` and in a spawned task, are served by the executor whose loop runs the thread.
#[test]
fn free_timers_work_under_a_wrapped_waker() {
    let (_, exec) = virtual_executor();
    let start = exec.now();
    exec.block_on(wrapped(time::sleep(Duration::from_millis(20))));
    assert_eq!(exec.now() - start, Duration::from_millis(20));
    let r = exec.block_on(wrapped(time::timeout(
        Duration::from_millis(10),
        core::future::pending::<()>(),
    )));
    assert_eq!(r, Err(Elapsed));
    assert_eq!(exec.now() - start, Duration::from_millis(30));

    let task = exec.spawner().spawn(wrapped(async {
        let t0 = time::now().await;
        time::sleep_until(t0 + Duration::from_millis(7)).await;
        let mut iv = time::interval(Duration::from_millis(5));
        iv.tick().await;
        iv.tick().await;
        time::now().await - t0
    }));
    assert_eq!(exec.block_on(task), Duration::from_millis(17));
    assert_eq!(exec.stats().timers_fired, 5);
    assert_eq!(exec.armed_timers(), 0);
}

/// A nested `block_on` of another executor inside a task hands the thread back when it returns:
/// wrapped timers after it are served by the outer executor again.
#[test]
fn a_nested_loop_restores_the_outer_executor() {
    let (_, outer) = virtual_executor();
    let (_, inner) = virtual_executor();
    outer.block_on(async {
        inner.block_on(wrapped(time::sleep(Duration::from_millis(3))));
        wrapped(time::sleep(Duration::from_millis(4))).await;
    });
    assert_eq!(inner.stats().timers_fired, 1);
    assert_eq!(outer.stats().timers_fired, 1);
    assert_eq!(outer.now(), Instant::from_nanos(4 * MS));
}

/// `run_until_idle` inside another executor's loop serves the wrapped timers of the tasks it
/// polls itself, from the run queue and from its local run queue, not the outer executor.
#[test]
fn run_until_idle_inside_another_loop_serves_its_own_tasks_timers() {
    let (_, outer) = virtual_executor();
    let (inner_clock, inner) = virtual_executor();
    let sent = inner
        .spawner()
        .spawn(wrapped(time::sleep(Duration::from_millis(3))));
    // Its second sleep is armed in a poll from the local run queue (the first sleep's timer
    // wakes it on this thread, which owns it).
    let local = inner.local_spawner().spawn(wrapped(async {
        time::sleep(Duration::from_millis(4)).await;
        time::sleep(Duration::from_millis(1)).await;
    }));
    outer.block_on(async {
        // The spawns queued both on the run queue.
        assert_eq!(inner.run_until_idle(), 2);
        assert_eq!(inner.armed_timers(), 2);
        inner_clock.advance(4 * MS);
        assert_eq!(inner.run_until_idle(), 2);
        assert_eq!(inner.armed_timers(), 1);
        inner_clock.advance(MS);
        assert_eq!(inner.run_until_idle(), 1);
    });
    assert_eq!(inner.stats().timers_fired, 3);
    assert_eq!(outer.stats().timers_fired, 0);
    assert_eq!(outer.armed_timers(), 0);
    assert!(sent.is_finished() && local.is_finished());
}
