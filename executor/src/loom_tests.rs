//! loom models of every waker handoff ARCHITECTURE.md lists for the executor. Run with
//! `RUSTFLAGS="--cfg loom -C debug-assertions" cargo test -p zcnet-executor --release --lib`
//! (`scripts/test-all.sh` sets `LOOM_MAX_PREEMPTIONS`).
//!
//! A lost wakeup shows up as a loom deadlock: the executor waits on [`LoomPlatform`], which
//! blocks until signalled (or until a test thread moves virtual time past its deadline), so an
//! execution in which nobody signals it fails. A task queued twice trips the debug assertion in
//! `TaskRef::start_poll`; a leaked task leaks the `loom::sync::Arc` its future holds, which loom
//! reports.

use core::future::{poll_fn, Future};
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use core::time::Duration;
use std::boxed::Box;
use std::sync::Arc as StdArc;
use std::task::Wake;

use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

use crate::sync::Ordering::SeqCst;
use crate::{Executor, Instant, Platform, TaskStorage};

const MS: u64 = 1_000_000;

/// Blocks in `wait` until signalled or until virtual time (moved only by `advance`) reaches the
/// deadline.
struct LoomPlatform {
    state: Mutex<(bool, u64)>,
    cv: Condvar,
}

impl LoomPlatform {
    fn new() -> Self {
        Self {
            state: Mutex::new((false, 0)),
            cv: Condvar::new(),
        }
    }

    /// Time passes: wakes waiters whose deadline is reached (this is not a signal).
    fn advance(&self, nanos: u64) {
        self.state.lock().unwrap().1 += nanos;
        self.cv.notify_all();
    }
}

impl Platform for LoomPlatform {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.state.lock().unwrap().1)
    }

    fn wait(&self, deadline: Option<Instant>) {
        let mut g = self.state.lock().unwrap();
        loop {
            if g.0 {
                g.0 = false;
                return;
            }
            if deadline.is_some_and(|d| d.as_nanos() <= g.1) {
                return;
            }
            g = self.cv.wait(g).unwrap();
        }
    }

    fn signal(&self) {
        self.state.lock().unwrap().0 = true;
        self.cv.notify_all();
    }
}

// SAFETY-free: loom's Mutex and Condvar are Sync.

/// An executor and its platform for one loom execution, freed at the end.
struct Model {
    platform: &'static LoomPlatform,
    exec: &'static Executor,
}

impl Model {
    fn new() -> Self {
        let platform: &'static LoomPlatform = Box::leak(Box::new(LoomPlatform::new()));
        let exec: &'static Executor = Box::leak(Box::new(Executor::with_tick(
            platform,
            Duration::from_millis(1),
        )));
        Self { platform, exec }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        assert_eq!(self.exec.armed_timers(), 0, "no timer left linked");
        // SAFETY: every task and sleep of this execution is gone (threads joined, handles
        // consumed), so nothing points to the executor or platform any more.
        unsafe {
            drop(Box::from_raw(self.exec as *const Executor as *mut Executor));
            drop(Box::from_raw(
                self.platform as *const LoomPlatform as *mut LoomPlatform,
            ));
        }
    }
}

/// A slot a future parks its waker in and another thread wakes it from.
#[derive(Default)]
struct Gate {
    open: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Gate {
    /// Register-then-check, the pattern every leaf future uses.
    fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.open.load(SeqCst) {
            return Poll::Ready(());
        }
        *self.waker.lock().unwrap() = Some(cx.waker().clone());
        if self.open.load(SeqCst) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    fn open(&self) {
        self.open.store(true, SeqCst);
        let w = self.waker.lock().unwrap().take();
        if let Some(w) = w {
            w.wake();
        }
    }
}

/// A thread that waits for a waker to appear in `slot`, takes it and hands it to `f`.
fn hand_off(slot: &Arc<Mutex<Option<Waker>>>, f: fn(Waker)) -> thread::JoinHandle<()> {
    let s = slot.clone();
    thread::spawn(move || loop {
        let w = s.lock().unwrap().take();
        match w {
            Some(w) => return f(w),
            None => thread::yield_now(),
        }
    })
}

/// Wake vs register on `block_on`'s own future: the executor must not sleep through it.
#[test]
fn wake_vs_register_main_future() {
    loom::model(|| {
        let m = Model::new();
        let gate = Arc::new(Gate::default());
        let g = gate.clone();
        let t = thread::spawn(move || g.open());
        m.exec.block_on(poll_fn(|cx| gate.poll(cx)));
        t.join().unwrap();
    });
}

/// `run_until_idle` on one thread takes the run queue while `block_on`'s loop on another takes
/// it too, goes to sleep, and has its top-level future woken from a third thread. The take of
/// `run_until_idle` is a swap when it saw no flag, so it may swap away a `SLEEPING` the loop
/// set meanwhile (then it signals the platform) or a `MAIN_WOKEN` the wake set (then it puts
/// it back): without either, the loop would sleep through the wake (a loom deadlock).
#[test]
fn run_until_idle_elsewhere_vs_the_loop_sleeping_and_its_wake() {
    loom::model(|| {
        let m = Model::new();
        let exec = m.exec;
        let keep = Arc::new(()); // leaked if the task is never dropped
        exec.spawner().spawn_detached(async move {
            let _keep = keep;
        });
        let gate = Arc::new(Gate::default());
        let g = gate.clone();
        let runner = thread::spawn(move || {
            exec.run_until_idle();
        });
        let waker = thread::spawn(move || g.open());
        exec.block_on(poll_fn(|cx| gate.poll(cx)));
        runner.join().unwrap();
        waker.join().unwrap();
    });
}

/// An enqueue racing the executor between "queue empty" and "wait": a task woken from another
/// thread while the executor goes idle is still run.
#[test]
fn enqueue_between_queue_empty_and_wait() {
    loom::model(|| {
        let m = Model::new();
        let gate = Arc::new(Gate::default());
        let g = gate.clone();
        let keep = Arc::new(()); // leaked if the task is never dropped
        let task = m.exec.spawner().spawn(async move {
            let _keep = keep;
            poll_fn(|cx| g.poll(cx)).await;
            5
        });
        let g2 = gate.clone();
        let t = thread::spawn(move || g2.open());
        assert_eq!(m.exec.block_on(task), 5);
        t.join().unwrap();
    });
}

/// Counts its polls; Pending until released, stashing its waker each time.
struct Counted {
    polls: Arc<AtomicUsize>,
    gate: Arc<Gate>,
}

impl Future for Counted {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.polls.fetch_add(1, SeqCst);
        self.gate.poll(cx)
    }
}

/// A wake that lands while the task is being polled re-queues it after the poll (it is polled
/// again), and it is queued once (a second queueing would trip `start_poll`'s assertion).
#[test]
fn wake_during_poll_requeues_once() {
    loom::model(|| {
        let m = Model::new();
        let polls = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Gate::default());
        // The waker exists before the task's first poll finishes only through the gate; take a
        // clone on the first poll and wake it from another thread, racing the poll itself.
        let h = m.exec.spawner().spawn(Counted {
            polls: polls.clone(),
            gate: gate.clone(),
        });
        m.exec.run_until_idle(); // first poll: registers
        let w = gate.waker.lock().unwrap().clone().unwrap();
        let g = gate.clone();
        let t = thread::spawn(move || {
            w.wake_by_ref();
            g.open();
            w.wake();
        });
        m.exec.block_on(h);
        t.join().unwrap();
        let n = polls.load(SeqCst);
        assert!((2..=4).contains(&n), "polled {n} times");
    });
}

/// A wake from another thread that finds the task held by the executor (`earlier_wakes` = 1:
/// queued, its poll not started; 2: queued and already notified, a poll due) still publishes
/// what its thread wrote before it, so the poll that is due sees it, or marks the task
/// NOTIFIED so that one more poll follows; the wake races the executor's take, `start_poll`
/// (which clears NOTIFIED) and the end of the poll. A wake that returned on a load alone would
/// give the poll no happens-before edge to the write: the poll could read the old value and
/// return `Pending` with nobody left to wake the task (a deadlock here).
fn wake_of_a_held_task_publishes_the_write_before_it(earlier_wakes: usize) {
    use crate::sync::Ordering::{Acquire, Release};
    loom::model(move || {
        let m = Model::new();
        let ready = Arc::new(AtomicBool::new(false));
        let slot: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
        let (r, s) = (ready.clone(), slot.clone());
        let h = m.exec.spawner().spawn(poll_fn(move |cx| {
            if r.load(Acquire) {
                return Poll::Ready(());
            }
            let mut g = s.lock().unwrap();
            if g.is_none() {
                *g = Some(cx.waker().clone());
            }
            Poll::Pending
        }));
        m.exec.run_until_idle();
        let w = slot.lock().unwrap().take().unwrap();
        for _ in 0..earlier_wakes {
            w.wake_by_ref(); // queued, then notified
        }
        let r = ready.clone();
        let t = thread::spawn(move || {
            r.store(true, Release);
            w.wake_by_ref();
            w // dropped after the join: no reference-count RMW in the race
        });
        m.exec.block_on(h);
        drop(t.join().unwrap());
    });
}

#[test]
fn wake_of_a_queued_task_publishes_the_write_before_it() {
    wake_of_a_held_task_publishes_the_write_before_it(1);
}

#[test]
fn wake_of_a_notified_task_publishes_the_write_before_it() {
    wake_of_a_held_task_publishes_the_write_before_it(2);
}

/// A task wakes itself during its first poll on the polling thread (no locked instruction: the
/// end of the poll must queue it again, or nothing polls it a second time and `block_on`
/// deadlocks) after cloning its waker there into a slot (the clone takes the executor's spare
/// reference), while another thread takes that clone and hands it to `elsewhere` (wake it by
/// value, a NOTIFIED racing the end of the poll; or drop it), racing the poll, its end and the
/// second poll. `by_value`: the self-wake goes through a second clone woken by value. The task
/// must be queued at most once at a time (`start_poll`'s assertion) and freed exactly once (a
/// leak of the Arc its future holds, or a double free, fails the model).
fn self_wake_in_poll_vs_another_thread(by_value: bool, elsewhere: fn(Waker)) {
    loom::model(move || {
        let m = Model::new();
        let slot: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
        let s = slot.clone();
        let keep = Arc::new(());
        let mut first = true;
        let h = m.exec.spawner().spawn(poll_fn(move |cx| {
            let _ = &keep;
            if !first {
                return Poll::Ready(());
            }
            first = false;
            *s.lock().unwrap() = Some(cx.waker().clone());
            if by_value {
                // The by-value path is the point.
                #[allow(clippy::waker_clone_wake)]
                cx.waker().clone().wake();
            } else {
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        }));
        let t = hand_off(&slot, elsewhere);
        m.exec.block_on(h);
        t.join().unwrap();
    });
}

#[test]
fn self_wake_by_ref_in_poll_vs_foreign_wake() {
    self_wake_in_poll_vs_another_thread(false, Waker::wake);
}

#[test]
fn self_wake_by_value_in_poll_vs_foreign_wake() {
    self_wake_in_poll_vs_another_thread(true, Waker::wake);
}

#[test]
fn self_wake_by_ref_in_poll_vs_foreign_drop() {
    self_wake_in_poll_vs_another_thread(false, drop);
}

#[test]
fn self_wake_by_value_in_poll_vs_foreign_drop() {
    self_wake_in_poll_vs_another_thread(true, drop);
}

/// Two threads wake an idle pending task at once: it is queued once and polled once more.
#[test]
fn two_concurrent_wakers_enqueue_once() {
    loom::model(|| {
        let m = Model::new();
        let polls = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Gate::default());
        let h = m.exec.spawner().spawn(Counted {
            polls: polls.clone(),
            gate: gate.clone(),
        });
        m.exec.run_until_idle();
        assert_eq!(polls.load(SeqCst), 1);
        let w1 = gate.waker.lock().unwrap().clone().unwrap();
        let w2 = w1.clone();
        let t1 = thread::spawn(move || w1.wake());
        let t2 = thread::spawn(move || w2.wake_by_ref());
        t1.join().unwrap();
        t2.join().unwrap();
        m.exec.run_until_idle();
        assert_eq!(polls.load(SeqCst), 2, "one enqueue, one poll");
        gate.open();
        m.exec.block_on(h);
    });
}

/// The last reference to a completed, detached task is a waker that another thread wakes and
/// drops while the executor drops its own references: freed exactly once (no leak of the Arc
/// the future held; no double free, which would corrupt loom's Arc tracking).
/// `last_reference_dropped_while_waking` and its pending variant for a task spawned with
/// no join handle (`Spawner::spawn_detached`).
#[test]
fn detached_spawn_last_reference_dropped_while_waking() {
    loom::model(|| last_waker_elsewhere(Poll::Ready(()), Waker::wake, true));
    loom::model(|| last_waker_elsewhere(Poll::Pending, drop, true));
}

/// A detached task in a `TaskStorage` slot returns `Ready`, with an output loom tracks, from
/// the poll that hands a clone of its waker to another thread, which hands it to `last` (drop
/// it, or wake it) while the executor completes the task. When the clone is gone before the
/// completion looks, nothing else refers to the task and the completion frees it with no
/// locked instruction; otherwise whichever side lets go last frees it. Either way the output is
/// dropped exactly once (a double drop or a leak of the Arc fails the model), the slot stays
/// claimed while the clone exists, and it is released once both are done.
fn detached_slot_task_completes_while_its_last_waker_goes(last: fn(Waker)) {
    loom::model(move || {
        let m = Model::new();
        let slot: &'static TaskStorage<256> = Box::leak(Box::new(TaskStorage::new()));
        let wakers: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
        let w = wakers.clone();
        let out = Arc::new(());
        let o = out.clone();
        m.exec
            .spawner()
            .spawn_detached_in(slot, async move {
                poll_fn(|cx| {
                    *w.lock().unwrap() = Some(cx.waker().clone());
                    Poll::Ready(())
                })
                .await;
                o
            })
            .unwrap();
        let t = thread::spawn(move || loop {
            let w = wakers.lock().unwrap().take();
            match w {
                Some(w) => {
                    // A waker refers to the task: its slot cannot be free yet.
                    assert!(slot.is_claimed(), "slot freed while a waker refers to it");
                    return last(w);
                }
                None => thread::yield_now(),
            }
        });
        m.exec.run_until_idle();
        t.join().unwrap();
        assert!(!slot.is_claimed(), "the task was freed");
        assert_eq!(Arc::strong_count(&out), 1, "the output was dropped");
        // SAFETY: the slot is free (checked above), so nothing refers to it any more.
        drop(unsafe { Box::from_raw(core::ptr::from_ref(slot).cast_mut()) });
    });
}

#[test]
fn detached_slot_task_completes_while_its_last_waker_is_dropped() {
    detached_slot_task_completes_while_its_last_waker_goes(drop);
}

#[test]
fn detached_slot_task_completes_while_its_last_waker_wakes() {
    detached_slot_task_completes_while_its_last_waker_goes(Waker::wake);
}

#[test]
fn last_reference_dropped_while_waking() {
    loom::model(|| last_waker_elsewhere(Poll::Ready(()), Waker::wake, false));
}

/// A detached task whose one poll returns `ready` and leaves a clone of its waker, which another
/// thread takes and hands to `last` (wake it, or drop it) while the executor runs the poll. The
/// task must be freed exactly once whatever the interleaving: a leak of the Arc its future
/// holds, or a double free (which corrupts loom's Arc tracking), fails the model.
///
/// `spawn_detached`: spawned with no join handle at all, instead of a handle dropped at once.
fn last_waker_elsewhere(ready: Poll<()>, last: fn(Waker), spawn_detached: bool) {
    let m = Model::new();
    let slot: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
    let s = slot.clone();
    let keep = Arc::new(());
    let f = poll_fn(move |cx| {
        let _ = &keep;
        *s.lock().unwrap() = Some(cx.waker().clone());
        ready
    });
    if spawn_detached {
        m.exec.spawner().spawn_detached(f);
    } else {
        drop(m.exec.spawner().spawn(f));
    }
    let t = hand_off(&slot, last);
    m.exec.run_until_idle();
    t.join().unwrap();
    // Whatever the interleaving, the waker clone is gone now, so is the task.
    assert!(slot.lock().unwrap().is_none());
}

/// A local task (spawned by a `LocalSpawner`) completes on the executor while another thread
/// drops the last waker it handed out: the executor's local reference keeps the task until
/// the completion, and the task is freed exactly once, by whichever side lets go last (a leak
/// of the Arc its future holds, or a double free, fails the model).
#[test]
fn local_task_completes_while_a_foreign_thread_drops_its_last_waker() {
    loom::model(|| {
        let m = Model::new();
        let slot: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
        let s = slot.clone();
        let keep = Arc::new(());
        let mut first = true;
        // SAFETY: only this model's main thread runs the executor's loop.
        let local = unsafe { m.exec.local_spawner_unchecked() };
        drop(local.spawn(poll_fn(move |cx| {
            let _ = &keep;
            if first {
                first = false;
                *s.lock().unwrap() = Some(cx.waker().clone());
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(())
        })));
        let t = hand_off(&slot, drop);
        m.exec.run_until_idle();
        t.join().unwrap();
        assert!(slot.lock().unwrap().is_none());
    });
}

/// A local schedule (`LocalSpawner::wake`, the local run queue) and a foreign wake (the
/// lock-free run queue) of the same task race: whatever the interleaving, the task is polled
/// to completion, is never polled after it completed, and is freed exactly once, by the
/// queue that lets go of it last (a leak of the Arc its future holds, or a double free, fails
/// the model; a poll of a completed task trips the stage's `unreachable!`).
#[test]
fn local_schedule_vs_foreign_wake_of_the_same_task() {
    loom::model(|| {
        let m = Model::new();
        let slot: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
        let s = slot.clone();
        let keep = Arc::new(());
        let polls = Arc::new(AtomicUsize::new(0));
        let p = polls.clone();
        // SAFETY: only this model's main thread runs the executor's loop.
        let local = unsafe { m.exec.local_spawner_unchecked() };
        drop(local.spawn(poll_fn(move |cx| {
            let _ = &keep;
            if p.fetch_add(1, SeqCst) == 0 {
                *s.lock().unwrap() = Some(cx.waker().clone());
                return Poll::Pending;
            }
            Poll::Ready(())
        })));
        m.exec.run_until_idle();
        let w = slot.lock().unwrap().take().unwrap();
        let w2 = w.clone();
        let t = thread::spawn(move || w2.wake());
        local.wake(&w);
        drop(w);
        m.exec.run_until_idle();
        t.join().unwrap();
        m.exec.run_until_idle();
        assert_eq!(polls.load(SeqCst), 2);
    });
}

/// A timer firing races the `Sleep` being dropped on another thread: the entry is unlinked
/// exactly once and the waker, if taken, is woken safely after the Sleep is gone.
#[test]
fn timer_fires_vs_sleep_dropped() {
    loom::model(|| {
        let m = Model::new();
        let exec = m.exec;
        let mut sleep = Box::pin(exec.sleep_until(Instant::from_nanos(MS)));
        let gate = Arc::new(Gate::default());
        let g = gate.clone();
        // Poll once (links it) with a waker that opens nothing important.
        assert!(sleep
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending());
        let t = thread::spawn(move || {
            drop(sleep);
            g.open();
        });
        m.platform.advance(MS);
        exec.run_until_idle();
        t.join().unwrap();
        assert!(gate.open.load(SeqCst));
    });
}

struct Flag(std::sync::atomic::AtomicUsize);

impl Wake for Flag {
    fn wake(self: StdArc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn flag() -> (StdArc<Flag>, Waker) {
    let f = StdArc::new(Flag(std::sync::atomic::AtomicUsize::new(0)));
    (f.clone(), Waker::from(f))
}

/// A timer firing races a re-poll of its `Sleep` with a new waker: if the re-poll returns
/// Pending, the new waker is the one woken.
#[test]
fn timer_fires_vs_repoll_with_new_waker() {
    loom::model(|| {
        let m = Model::new();
        let exec = m.exec;
        let (f1, w1) = flag();
        let (f2, w2) = flag();
        let mut sleep = Box::pin(exec.sleep_until(Instant::from_nanos(MS)));
        assert!(sleep
            .as_mut()
            .poll(&mut Context::from_waker(&w1))
            .is_pending());
        let t = thread::spawn(move || {
            let second = sleep.as_mut().poll(&mut Context::from_waker(&w2));
            (second.is_pending(), sleep)
        });
        m.platform.advance(MS);
        exec.run_until_idle();
        let (pending, sleep) = t.join().unwrap();
        let (n1, n2) = (
            f1.0.load(std::sync::atomic::Ordering::SeqCst),
            f2.0.load(std::sync::atomic::Ordering::SeqCst),
        );
        if pending {
            assert_eq!((n1, n2), (0, 1), "the newest waker is woken");
        } else {
            assert_eq!(n2, 0);
        }
        assert_eq!(n1 + n2, 1, "exactly one wake");
        drop(sleep);
    });
}

/// A waker whose every clone, wake and drop takes the executor's timer lock (as a waker whose
/// drop re-enters the executor might): one used while that lock is held deadlocks, which loom
/// reports.
static LOCKING_VTABLE: core::task::RawWakerVTable = core::task::RawWakerVTable::new(
    |data| {
        locking_touch(data);
        core::task::RawWaker::new(data, &LOCKING_VTABLE)
    },
    locking_touch,
    locking_touch,
    locking_touch,
);

fn locking_touch(data: *const ()) {
    // SAFETY: LOCKING_VTABLE is only used with pointers made from a `&'static Executor` that
    // outlives every such waker (see `locking_waker`).
    let exec = unsafe { &*data.cast::<Executor>() };
    let _ = exec.armed_timers();
}

/// A waker that takes `exec`'s timer lock whenever it is cloned, woken or dropped. Every copy
/// must be gone before the `Model` frees the executor.
fn locking_waker(exec: &'static Executor) -> Waker {
    // SAFETY: LOCKING_VTABLE's functions keep the RawWaker contract for a `&'static Executor`:
    // nothing is owned, so clone, wake and drop only read it.
    unsafe {
        Waker::from_raw(core::task::RawWaker::new(
            core::ptr::from_ref(exec).cast(),
            &LOCKING_VTABLE,
        ))
    }
}

/// A re-poll with a new waker lets go of the timer lock to clone it, and the timer fires in
/// that window: the poll completes, and the clone it no longer needs is dropped after the lock
/// is released (the clone's drop takes the lock, so dropping it under the lock deadlocks).
/// Whichever way the race goes, exactly one waker is woken.
#[test]
fn timer_fires_while_a_repoll_clones_its_waker() {
    loom::model(|| {
        let m = Model::new();
        let exec = m.exec;
        let (f1, w1) = flag();
        let mut sleep = Box::pin(exec.sleep_until(Instant::from_nanos(MS)));
        assert!(sleep
            .as_mut()
            .poll(&mut Context::from_waker(&w1))
            .is_pending());
        let t = thread::spawn(move || {
            let w2 = locking_waker(exec);
            let second = sleep.as_mut().poll(&mut Context::from_waker(&w2));
            (second.is_pending(), sleep)
        });
        m.platform.advance(MS);
        exec.run_until_idle();
        let (pending, sleep) = t.join().unwrap();
        // Pending: the new waker was linked in time and woken instead of the first; Ready: the
        // timer fired first (before the re-poll, or while it cloned) and woke the first.
        let n1 = f1.0.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(n1, if pending { 0 } else { 1 });
        drop(sleep);
    });
}

/// The executor sleeps (no deadline, or a far one) when another thread links an earlier timer
/// into its wheel: it must be signalled, re-arm its wait for the new deadline, and fire it when
/// time reaches it. Time passing is not a signal here, so without the insert's signal the
/// executor would sleep through the deadline (a loom deadlock).
#[test]
fn earlier_timer_inserted_while_the_executor_sleeps() {
    loom::model(|| {
        let m = Model::new();
        let exec = m.exec;
        let platform = m.platform;
        let gate = Arc::new(Gate::default());
        let g = gate.clone();
        let t = thread::spawn(move || {
            struct Opener(Arc<Gate>);
            impl Wake for Opener {
                fn wake(self: StdArc<Self>) {
                    self.0.open();
                }
            }
            let waker = Waker::from(StdArc::new(Opener(g)));
            let mut sleep = Box::pin(exec.sleep_until(Instant::from_nanos(MS)));
            if sleep
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_ready()
            {
                waker.wake_by_ref();
            }
            platform.advance(MS);
            sleep
        });
        let far = exec.sleep(Duration::from_secs(3600));
        exec.block_on(async {
            let mut far = core::pin::pin!(far);
            poll_fn(|cx| {
                let _ = far.as_mut().poll(cx);
                gate.poll(cx)
            })
            .await
        });
        let sleep = t.join().unwrap();
        drop(sleep);
    });
}

/// The last waker of a detached, pending task is dropped on another thread while the executor
/// polls the task (its hold, QUEUED, is the only thing keeping it alive): whichever lets go
/// last frees it, exactly once (a leak of the Arc the future holds, or a double free, fails).
#[test]
fn last_waker_dropped_while_the_task_is_polled() {
    loom::model(|| last_waker_elsewhere(Poll::Pending, drop, false));
}

/// A join handle with a registered waker is dropped on another thread while the executor
/// completes its task: the executor keeps the task while it wakes the join waker, the output
/// is dropped exactly once (by the handle, which saw it complete, or by the executor, which
/// saw the handle gone) and the task is freed exactly once.
#[test]
fn join_handle_dropped_while_its_task_completes() {
    loom::model(|| {
        let m = Model::new();
        let mut h = m.exec.spawner().spawn(async { Arc::new(()) });
        let (woken, w) = flag();
        assert!(Pin::new(&mut h)
            .poll(&mut Context::from_waker(&w))
            .is_pending());
        let t = thread::spawn(move || drop(h));
        m.exec.run_until_idle();
        t.join().unwrap();
        assert!(woken.0.load(std::sync::atomic::Ordering::SeqCst) <= 1);
    });
}

/// A join handle that never registered a waker is dropped on another thread while the executor
/// completes its task: the completion's one-exchange path (taken when it sees the handle, and
/// left for the full one when the handle's drop changed the state first) and the handle's drop
/// (which drops the output if it sees the task complete, first or on a retry) drop the output
/// exactly once and free the task exactly once.
///
/// The task lives in a `TaskStorage` slot, whose release shows that it was freed: a completed
/// task holds nothing loom tracks once its output is gone.
#[test]
fn join_handle_without_a_waker_dropped_while_its_task_completes() {
    loom::model(|| {
        let m = Model::new();
        let slot: &'static TaskStorage<64> = Box::leak(Box::new(TaskStorage::new()));
        let out = Arc::new(());
        let o = out.clone();
        let h = m.exec.spawner().spawn_in(slot, async move { o }).unwrap();
        let t = thread::spawn(move || drop(h));
        m.exec.run_until_idle();
        t.join().unwrap();
        assert!(!slot.is_claimed(), "the task was freed");
        assert_eq!(Arc::strong_count(&out), 1, "the output was dropped");
        // SAFETY: the slot is free (checked above), so nothing refers to it any more.
        drop(unsafe { Box::from_raw(core::ptr::from_ref(slot).cast_mut()) });
    });
}
