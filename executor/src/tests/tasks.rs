//! Tasks: spawning, joining, static slots, wakes during polls, reference counting.

use std::boxed::Box;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::vec::Vec;

use super::virtual_executor;
use crate::{SpawnError, Spawner, TaskStorage};

#[test]
fn block_on_returns_the_output() {
    let (_, exec) = virtual_executor();
    assert_eq!(exec.block_on(async { 7 }), 7);
    assert_eq!(exec.stats().polls, 1);
}

#[test]
fn spawned_tasks_run_and_join() {
    let (_, exec) = virtual_executor();
    let sp = exec.spawner();
    let out = exec.block_on(async move {
        let a = sp.spawn(async { 1 });
        let b = sp.spawn(async { 2 });
        a.await + b.await
    });
    assert_eq!(out, 3);
}

#[test]
fn spawning_from_inside_a_task() {
    let (_, exec) = virtual_executor();
    let out = exec.block_on(async {
        let sp = core::future::poll_fn(|cx| Poll::Ready(Spawner::current(cx).unwrap())).await;
        let inner = sp.spawn(async move {
            let sp2 = core::future::poll_fn(|cx| Poll::Ready(Spawner::current(cx).unwrap())).await;
            sp2.spawn(async { "grandchild" }).await
        });
        inner.await
    });
    assert_eq!(out, "grandchild");
}

#[test]
fn static_storage_is_claimed_and_reusable_after_completion() {
    static SLOT: TaskStorage<128> = TaskStorage::new();
    let (_, exec) = virtual_executor();
    let sp = exec.spawner();
    let h = sp.spawn_in(&SLOT, async { 5u32 }).unwrap();
    assert!(SLOT.is_claimed());
    assert_eq!(
        sp.spawn_in(&SLOT, async { 6u32 }).unwrap_err(),
        SpawnError::Busy
    );
    assert_eq!(exec.block_on(h), 5);
    // Completed, join handle consumed: the slot is free again.
    assert!(!SLOT.is_claimed());
    let h = sp.spawn_in(&SLOT, async { 6u32 }).unwrap();
    assert_eq!(exec.block_on(h), 6);
    assert!(!SLOT.is_claimed());

    let big = [0u8; 200];
    let err = sp.spawn_in(&SLOT, async move { big.len() }).unwrap_err();
    assert!(
        matches!(err, SpawnError::TooLarge { available: 128, .. }),
        "{err}"
    );
}

#[test]
fn detached_task_frees_its_slot_when_done() {
    static SLOT: TaskStorage<128> = TaskStorage::new();
    let (_, exec) = virtual_executor();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    drop(exec.spawner().spawn_in(&SLOT, async move {
        r.fetch_add(1, SeqCst);
        Box::new(9) // an output with a destructor, dropped by the executor
    }));
    exec.run_until_idle();
    assert_eq!(ran.load(SeqCst), 1);
    assert!(!SLOT.is_claimed());
}

/// `spawn_detached` / `spawn_detached_in`: no join handle; the task runs, is woken through a
/// stashed waker, completes, its output (with a destructor) is dropped by the executor, and its
/// memory is freed or its slot released, for `Spawner` and `LocalSpawner` tasks.
#[test]
fn detached_spawns_run_drop_their_output_and_free_the_task() {
    static SLOT: TaskStorage<256> = TaskStorage::new();
    static LOCAL_SLOT: TaskStorage<256> = TaskStorage::new();
    let (_, exec) = virtual_executor();
    let local = exec.local_spawner();
    let out = Arc::new(());
    let stash: Arc<Mutex<Vec<Waker>>> = Arc::new(Mutex::new(Vec::new()));
    let task = |out: Arc<()>, stash: Arc<Mutex<Vec<Waker>>>| {
        let mut pending = true;
        core::future::poll_fn(move |cx| {
            if core::mem::take(&mut pending) {
                stash.lock().unwrap().push(cx.waker().clone());
                return Poll::Pending;
            }
            Poll::Ready(out.clone())
        })
    };
    exec.spawner()
        .spawn_detached(task(out.clone(), stash.clone()));
    exec.spawner()
        .spawn_detached_in(&SLOT, task(out.clone(), stash.clone()))
        .unwrap();
    assert_eq!(
        exec.spawner()
            .spawn_detached_in(&SLOT, task(out.clone(), stash.clone()))
            .unwrap_err(),
        SpawnError::Busy
    );
    local.spawn_detached(task(out.clone(), stash.clone()));
    local
        .spawn_detached_in(&LOCAL_SLOT, task(out.clone(), stash.clone()))
        .unwrap();
    assert_eq!(exec.run_until_idle(), 4);
    let wakers = core::mem::take(&mut *stash.lock().unwrap());
    assert_eq!(wakers.len(), 4);
    // Each future holds a clone of `out`, and each pending poll left one in the stash's
    // closure: 1 + 4 futures.
    assert_eq!(Arc::strong_count(&out), 5);
    for w in wakers {
        w.wake();
    }
    assert_eq!(exec.run_until_idle(), 4);
    assert_eq!(Arc::strong_count(&out), 1, "futures and outputs dropped");
    assert!(!SLOT.is_claimed());
    assert!(!LOCAL_SLOT.is_claimed());
}

/// An output with a destructor is dropped exactly once whoever lets go of it: the executor
/// at completion (no join handle), or the join handle dropped after completion without
/// taking it. (Outputs without a destructor are left in place: nothing to drop.)
#[test]
fn an_output_nobody_takes_is_dropped() {
    let (_, exec) = virtual_executor();
    let out = Arc::new(());
    let o = out.clone();
    drop(exec.spawner().spawn(async move { o }));
    exec.run_until_idle();
    assert_eq!(Arc::strong_count(&out), 1, "the executor dropped it");
    let o = out.clone();
    let h = exec.spawner().spawn(async move { o });
    exec.run_until_idle();
    assert!(h.is_finished());
    assert_eq!(Arc::strong_count(&out), 2, "held for the join handle");
    drop(h);
    assert_eq!(Arc::strong_count(&out), 1, "the join handle dropped it");
}

/// A future that wakes itself during its own poll, `n` times.
struct SelfWaking {
    left: usize,
    polls: Arc<AtomicUsize>,
}

impl core::future::Future for SelfWaking {
    type Output = ();
    fn poll(mut self: core::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.polls.fetch_add(1, SeqCst);
        if self.left == 0 {
            return Poll::Ready(());
        }
        self.left -= 1;
        // Woken twice during the poll: queued once, polled once more.
        cx.waker().wake_by_ref();
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn wake_during_poll_requeues_once() {
    let (_, exec) = virtual_executor();
    let polls = Arc::new(AtomicUsize::new(0));
    let h = exec.spawner().spawn(SelfWaking {
        left: 3,
        polls: polls.clone(),
    });
    exec.run_until_idle();
    assert!(h.is_finished());
    assert_eq!(
        polls.load(SeqCst),
        4,
        "one poll per wake-during-poll, never two"
    );
}

/// Waker clones, drops and wakes made on the polling thread during a poll (which stand in for
/// locked instructions through the executor's spare reference and the header's poll-thread
/// cells) keep the reference count exact: the slot stays claimed exactly as long as a clone
/// made in a poll lives, and every self-wake, by reference or by value, polls the task again.
/// Each way a poll can end is taken with the spare given to a clone and without.
#[test]
fn waker_traffic_on_the_polling_thread_keeps_the_count_exact() {
    static SLOT: TaskStorage<128> = TaskStorage::new();
    let (_, exec) = virtual_executor();
    let polls = Arc::new(AtomicUsize::new(0));
    let kept: Arc<Mutex<Vec<Waker>>> = Arc::new(Mutex::new(Vec::new()));
    let (p, k) = (polls.clone(), kept.clone());
    let keep = move |w: Waker| k.lock().unwrap().push(w);
    let future = core::future::poll_fn(move |cx| match p.fetch_add(1, SeqCst) {
        0 => {
            // A clone dropped at once, then one kept (it takes the spare), then a self-wake:
            // the poll ends woken, with the spare taken.
            drop(cx.waker().clone());
            keep(cx.waker().clone());
            cx.waker().wake_by_ref();
            Poll::Pending
        }
        1 => {
            // Ends unwoken with the spare taken; the test wakes the task.
            keep(cx.waker().clone());
            Poll::Pending
        }
        2 => {
            // Ends woken (by value) with the spare back: the by-value path is the point.
            #[allow(clippy::waker_clone_wake)]
            cx.waker().clone().wake();
            Poll::Pending
        }
        3 => {
            // Completes with the spare taken.
            let c = cx.waker().clone();
            c.wake_by_ref();
            drop(c);
            keep(cx.waker().clone());
            Poll::Ready(())
        }
        n => unreachable!("polled {n} times"),
    });
    drop(exec.spawner().spawn_in(&SLOT, future).unwrap());
    assert_eq!(exec.run_until_idle(), 2, "the self-wake polls once more");
    kept.lock().unwrap()[1].wake_by_ref();
    assert_eq!(
        exec.run_until_idle(),
        2,
        "the self-wake by value polls once more"
    );
    for left in (0..3).rev() {
        assert!(SLOT.is_claimed(), "{} clones hold the task", left + 1);
        let w = kept.lock().unwrap().pop().unwrap();
        w.wake_by_ref(); // complete: ignored
        drop(w);
    }
    assert!(!SLOT.is_claimed(), "the last reference freed the slot");
    assert_eq!(exec.run_until_idle(), 0);
}

#[test]
fn a_pending_task_nobody_can_wake_is_dropped() {
    struct DropFlag(Arc<AtomicUsize>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let (_, exec) = virtual_executor();
    let dropped = Arc::new(AtomicUsize::new(0));
    let flag = DropFlag(dropped.clone());
    let h = exec.spawner().spawn(async move {
        let _f = flag;
        core::future::pending::<()>().await
    });
    exec.run_until_idle();
    assert_eq!(dropped.load(SeqCst), 0, "the join handle keeps it");
    drop(h);
    assert_eq!(
        dropped.load(SeqCst),
        1,
        "last reference gone: future dropped"
    );
}

#[test]
fn wakers_from_other_threads_reschedule() {
    let (_, exec) = virtual_executor();
    let slot: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
    let s = slot.clone();
    let mut first = true;
    let h = exec.spawner().spawn(core::future::poll_fn(move |cx| {
        if first {
            first = false;
            *s.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        } else {
            Poll::Ready(11)
        }
    }));
    exec.run_until_idle();
    assert!(!h.is_finished());
    let w = slot.lock().unwrap().take().unwrap();
    std::thread::spawn(move || w.wake()).join().unwrap();
    assert_eq!(exec.block_on(h), 11);
}

#[test]
fn join_handle_waker_can_change() {
    let (_, exec) = virtual_executor();
    let gate: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
    let g = gate.clone();
    let mut first = true;
    let mut h = exec.spawner().spawn(core::future::poll_fn(move |cx| {
        if first {
            first = false;
            *g.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        } else {
            Poll::Ready("done")
        }
    }));
    exec.run_until_idle();
    // Poll the join handle with two different wakers; the second must be the one woken.
    let (c1, w1) = counting();
    let (c2, w2) = counting();
    assert!(core::pin::Pin::new(&mut h)
        .poll(&mut Context::from_waker(&w1))
        .is_pending());
    assert!(core::pin::Pin::new(&mut h)
        .poll(&mut Context::from_waker(&w2))
        .is_pending());
    assert!(core::pin::Pin::new(&mut h)
        .poll(&mut Context::from_waker(&w2))
        .is_pending());
    gate.lock().unwrap().take().unwrap().wake();
    exec.run_until_idle();
    assert_eq!((c1.load(SeqCst), c2.load(SeqCst)), (0, 1));
    assert_eq!(
        core::pin::Pin::new(&mut h).poll(&mut Context::from_waker(&w2)),
        Poll::Ready("done")
    );
}

fn counting() -> (Arc<AtomicUsize>, Waker) {
    struct W(Arc<AtomicUsize>);
    impl std::task::Wake for W {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let c = Arc::new(AtomicUsize::new(0));
    (c.clone(), Waker::from(Arc::new(W(c))))
}

#[test]
fn many_tasks_many_wakes() {
    let (_, exec) = virtual_executor();
    let sp = exec.spawner();
    let total = exec.block_on(async move {
        let handles: Vec<_> = (0..1000u64)
            .map(|i| {
                sp.spawn(async move {
                    for _ in 0..(i % 5) {
                        crate::time::sleep(core::time::Duration::from_millis(i % 7)).await;
                    }
                    i
                })
            })
            .collect();
        let mut sum = 0;
        for h in handles {
            sum += h.await;
        }
        sum
    });
    assert_eq!(total, (0..1000).sum::<u64>());
}

#[test]
#[should_panic(expected = "one thread at a time")]
fn nested_block_on_is_refused() {
    let (_, exec) = virtual_executor();
    exec.block_on(async { exec.block_on(async {}) });
}

use core::future::Future;

#[test]
fn a_join_handle_survives_a_waker_whose_clone_panics() {
    let (_, exec) = virtual_executor();
    let gate: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
    let g = gate.clone();
    let mut first = true;
    let mut h = exec.spawner().spawn(core::future::poll_fn(move |cx| {
        if first {
            first = false;
            *g.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        } else {
            Poll::Ready(1)
        }
    }));
    exec.run_until_idle();
    let bad = super::panicking_clone_waker();
    let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
        let _ = core::pin::Pin::new(&mut h).poll(&mut Context::from_waker(&bad));
    }));
    assert!(r.is_err());
    // Still consistent: a good waker registers and is woken on completion.
    let (c, w) = counting();
    assert!(core::pin::Pin::new(&mut h)
        .poll(&mut Context::from_waker(&w))
        .is_pending());
    gate.lock().unwrap().take().unwrap().wake();
    exec.run_until_idle();
    assert_eq!(c.load(SeqCst), 1);
    assert_eq!(exec.block_on(h), 1);
}

/// Wakes that reach a task already queued (before its poll starts) are covered by that one
/// poll: no second poll follows.
#[test]
fn wakes_while_queued_cost_one_poll() {
    let (_, exec) = virtual_executor();
    let gate: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
    let g = gate.clone();
    let polls = Arc::new(AtomicUsize::new(0));
    let p = polls.clone();
    let h = exec.spawner().spawn(core::future::poll_fn(move |cx| {
        p.fetch_add(1, SeqCst);
        *g.lock().unwrap() = Some(cx.waker().clone());
        Poll::<()>::Pending
    }));
    exec.run_until_idle();
    assert_eq!(polls.load(SeqCst), 1);
    let w = gate.lock().unwrap().clone().unwrap();
    w.wake_by_ref();
    w.wake_by_ref();
    let by_value = w.clone();
    by_value.wake();
    exec.run_until_idle();
    assert_eq!(polls.load(SeqCst), 2, "three wakes while queued, one poll");
    drop(h);
}

/// `run_until_idle` called from inside a task of the same executor polls the other ready
/// tasks (the caller, being polled, is not polled again) and returns.
#[test]
fn run_until_idle_inside_a_task_runs_the_others() {
    let (_, exec) = virtual_executor();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let spawner = exec.spawner();
    let outer = exec.spawner().spawn(async move {
        let inner = spawner.spawn(async move {
            r.fetch_add(1, SeqCst);
        });
        assert_eq!(exec.run_until_idle(), 1, "the inner task alone");
        assert!(inner.is_finished());
    });
    exec.run_until_idle();
    assert!(outer.is_finished());
    assert_eq!(ran.load(SeqCst), 1);
}

/// Records the thread that drops it.
struct DropWitness(Arc<Mutex<Option<std::thread::ThreadId>>>);

impl Drop for DropWitness {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(std::thread::current().id());
    }
}

#[test]
fn local_tasks_run_futures_that_are_not_send() {
    static SLOT: TaskStorage<256> = TaskStorage::new();
    let (_, exec) = virtual_executor();
    let local = exec.local_spawner();
    let shared = std::rc::Rc::new(core::cell::Cell::new(0));
    let boxed = local.spawn({
        let shared = shared.clone();
        async move {
            shared.set(shared.get() + 1);
            shared.get()
        }
    });
    let in_slot = local
        .spawn_in(&SLOT, {
            let shared = shared.clone();
            async move {
                shared.set(shared.get() + 10);
            }
        })
        .unwrap();
    exec.block_on(async move {
        in_slot.await;
        boxed.await;
    });
    assert_eq!(shared.get(), 11);
    // Completed and joined: the local reference is gone with the rest, the slot is free.
    assert!(!SLOT.is_claimed());
    assert_eq!(std::rc::Rc::strong_count(&shared), 1);
}

#[test]
fn a_local_task_polled_on_another_thread_panics_before_its_future_runs() {
    let (_, exec) = virtual_executor();
    let polled = Arc::new(AtomicUsize::new(0));
    let p = polled.clone();
    let h = exec.local_spawner().spawn(async move {
        p.fetch_add(1, SeqCst);
    });
    let r = std::thread::spawn(move || exec.run_until_idle()).join();
    assert!(r.is_err(), "the foreign loop must refuse the local task");
    assert_eq!(polled.load(SeqCst), 0);
    drop(h);
}

#[test]
fn another_thread_cannot_take_the_local_binding() {
    let (_, exec) = virtual_executor();
    let _mine = exec.local_spawner();
    let r = std::thread::spawn(move || {
        let _ = exec.local_spawner();
    })
    .join();
    assert!(r.is_err());
    // The owner may take it again.
    let _again = exec.local_spawner();
}

#[test]
fn a_local_task_is_never_dropped_by_a_foreign_waker() {
    let (_, exec) = virtual_executor();
    let dropped_on = Arc::new(Mutex::new(None));
    let witness = DropWitness(dropped_on.clone());
    let stash: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
    let s = stash.clone();
    // Detached, pending for ever once its waker is gone: a plain task would be freed (and its
    // future dropped) by whoever drops the last waker.
    drop(exec.local_spawner().spawn(core::future::poll_fn(move |cx| {
        let _keep = &witness;
        *s.lock().unwrap() = Some(cx.waker().clone());
        Poll::<()>::Pending
    })));
    exec.run_until_idle();
    let waker = stash.lock().unwrap().take().unwrap();
    std::thread::spawn(move || drop(waker)).join().unwrap();
    assert_eq!(*dropped_on.lock().unwrap(), None);
}

#[test]
fn a_local_task_woken_from_another_thread_runs_on_the_owner() {
    let (_, exec) = virtual_executor();
    let polls_on: Arc<Mutex<Vec<std::thread::ThreadId>>> = Arc::new(Mutex::new(Vec::new()));
    let stash: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
    let (p, s) = (polls_on.clone(), stash.clone());
    let h = exec.local_spawner().spawn(core::future::poll_fn(move |cx| {
        p.lock().unwrap().push(std::thread::current().id());
        if p.lock().unwrap().len() == 2 {
            return Poll::Ready(());
        }
        *s.lock().unwrap() = Some(cx.waker().clone());
        Poll::Pending
    }));
    exec.run_until_idle();
    let waker = stash.lock().unwrap().take().unwrap();
    std::thread::spawn(move || waker.wake()).join().unwrap();
    exec.block_on(h);
    let me = std::thread::current().id();
    assert_eq!(*polls_on.lock().unwrap(), [me, me]);
}

/// A future that counts its polls, leaves its waker in `stash` and is ready on poll `ready_at`.
fn counted_until(
    polls: Arc<AtomicUsize>,
    stash: Arc<Mutex<Option<Waker>>>,
    ready_at: usize,
) -> impl core::future::Future<Output = usize> {
    core::future::poll_fn(move |cx| {
        let n = polls.fetch_add(1, SeqCst) + 1;
        *stash.lock().unwrap() = Some(cx.waker().clone());
        if n >= ready_at {
            Poll::Ready(n)
        } else {
            Poll::Pending
        }
    })
}

#[test]
fn a_local_wake_polls_the_task_from_the_local_queue() {
    let (_, exec) = virtual_executor();
    let local = exec.local_spawner();
    let (polls, stash) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(None)));
    let h = local.spawn(counted_until(polls.clone(), stash.clone(), 3));
    exec.run_until_idle();
    assert_eq!(polls.load(SeqCst), 1);
    let w = stash.lock().unwrap().clone().unwrap();
    // Twice before the loop runs: queued once, polled once.
    local.wake(&w);
    local.wake(&w);
    assert_eq!(exec.run_until_idle(), 1);
    assert_eq!(polls.load(SeqCst), 2);
    // Nothing woke it: nothing to do.
    assert_eq!(exec.run_until_idle(), 0);
    local.wake(&w);
    drop(w);
    assert_eq!(exec.block_on(h), 3);
}

#[test]
fn a_local_tasks_own_waker_woken_on_the_owner_thread_takes_the_local_queue() {
    let (_, exec) = virtual_executor();
    let local = exec.local_spawner();
    let (polls, stash) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(None)));
    let h = local.spawn(counted_until(polls.clone(), stash.clone(), 3));
    exec.run_until_idle();
    let w = stash.lock().unwrap().take().unwrap();
    // Through the `Waker` itself, by reference: the local queue, not the lock-free one.
    assert!(exec.local_queue_is_empty());
    w.wake_by_ref();
    assert!(!exec.local_queue_is_empty(), "queued locally");
    assert_eq!(exec.run_until_idle(), 1);
    assert_eq!(polls.load(SeqCst), 2);
    // By value: queued locally too, and the waker's reference is given back (the task is
    // freed once it completes: no leak, no double free).
    let w = stash.lock().unwrap().take().unwrap();
    w.wake();
    assert!(!exec.local_queue_is_empty(), "queued locally");
    assert_eq!(exec.block_on(h), 3);
    assert!(exec.local_queue_is_empty());
}

#[test]
fn a_local_wake_during_the_poll_polls_again() {
    let (_, exec) = virtual_executor();
    let local = exec.local_spawner();
    let polls = Arc::new(AtomicUsize::new(0));
    let p = polls.clone();
    let h = local.spawn(core::future::poll_fn(move |cx| {
        if p.fetch_add(1, SeqCst) + 1 == 3 {
            return Poll::Ready(());
        }
        local.wake(cx.waker());
        Poll::Pending
    }));
    exec.block_on(h);
    assert_eq!(polls.load(SeqCst), 3);
}

#[test]
fn a_waker_of_another_kind_is_woken_as_usual() {
    let (_, exec) = virtual_executor();
    let local = exec.local_spawner();
    let (polls, stash) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(None)));
    // A `Send` task from the plain spawner: not local, so the run queue takes it.
    let h = exec
        .spawner()
        .spawn(counted_until(polls.clone(), stash.clone(), 2));
    exec.run_until_idle();
    local.wake(&stash.lock().unwrap().take().unwrap());
    assert_eq!(exec.block_on(h), 2);
    // And a waker that is not a task's at all.
    let (count, waker) = counting();
    local.wake(&waker);
    assert_eq!(count.load(SeqCst), 1);
}

#[test]
fn local_and_foreign_wakes_of_one_task_free_it_once_whichever_completes_it() {
    static SLOT: TaskStorage<256> = TaskStorage::new();
    let (_, exec) = virtual_executor();
    let local = exec.local_spawner();
    // First: completed by a poll from the run queue while it waits in the local queue too.
    // Then: completed by a poll from the local queue while a foreign wake has queued it in
    // the run queue (the wake comes from another thread during that very poll).
    for completes_in_local_queue in [false, true] {
        let polls = Arc::new(AtomicUsize::new(0));
        let stash: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
        let keep = std::rc::Rc::new(());
        let (k, p, st) = (keep.clone(), polls.clone(), stash.clone());
        let h = local
            .spawn_in(
                &SLOT,
                core::future::poll_fn(move |cx| {
                    let _k = &k;
                    if p.fetch_add(1, SeqCst) == 0 {
                        *st.lock().unwrap() = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                    if completes_in_local_queue {
                        let w = cx.waker().clone();
                        std::thread::spawn(move || w.wake()).join().unwrap();
                    }
                    Poll::Ready(())
                }),
            )
            .unwrap();
        drop(h);
        exec.run_until_idle();
        let w = stash.lock().unwrap().take().unwrap();
        if !completes_in_local_queue {
            let w2 = w.clone();
            std::thread::spawn(move || w2.wake()).join().unwrap();
        }
        local.wake(&w);
        drop(w);
        exec.run_until_idle();
        assert_eq!(polls.load(SeqCst), 2, "completed on its second poll");
        assert_eq!(std::rc::Rc::strong_count(&keep), 1, "future dropped");
        assert!(!SLOT.is_claimed(), "task freed, slot free again");
    }
}
