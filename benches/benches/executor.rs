//! Executor benchmark: spawn + wake + poll round trips and wake + poll of a long-lived task, on
//! zcnet's executor beside embassy-executor 0.10 (its raw executor) and futures' `LocalPool`,
//! measured in the same run.
//!
//! ```text
//! cargo bench -p zcnet-benches --bench executor            # full run (BENCHMARKS.md)
//! cargo bench -p zcnet-benches --bench executor -- --quick # CI smoke run
//! ZCNET_EXEC_ONLY=wake+poll, cargo bench ...                # only the workloads so named
//! ZCNET_EXEC_ONLY='wake+poll, long-lived task$' cargo bench ... # only the one named exactly
//! ```
//!
//! Workloads, each reported as the median ns per round trip over several runs (interleaved run
//! by run across the executors):
//!
//! * `spawn+wake+poll, detached`: spawn a task whose future stashes a clone of its waker and
//!   returns `Pending` on its first poll; run the executor (first poll); wake the stashed waker;
//!   run the executor again (second poll: `Ready`, the task is freed or its slot released).
//!   zcnet spawns it with no join handle (`spawn_detached`, `spawn_detached_in`), as embassy
//!   and `spawn_local` do.
//! * `spawn+wake+poll+join`: the same, keeping the join handle and taking the output through it
//!   once the task is done (zcnet `JoinHandle`, futures `RemoteHandle`), then dropping it.
//!   embassy-executor has no join handles: n/a.
//! * `wake+poll, long-lived task`: one task, spawned before the timing; each round trip wakes it
//!   through a waker clone taken at its first poll and runs the executor once (one poll,
//!   `Pending`). The task does not re-register its waker on every poll; all three executors give
//!   a task the same waker identity on every poll, so the clone stays valid.
//! * `wake+poll, long-lived task, local wake`: the same from the executor's own context, as a
//!   stack signals its own tasks: zcnet spawns the task with a `LocalSpawner` (on executors of
//!   their own, so the other rows do not pay for a local owner) and wakes it with
//!   `LocalSpawner::wake`, which puts it on the executor's local run queue (no locked
//!   instruction); embassy-executor and `LocalPool` have no such path and wake as in the row
//!   above.
//! * `wake+poll, task waking itself`: one task that wakes itself (`cx.waker().wake_by_ref()`)
//!   and returns `Pending` on every poll, `ops` times, then `Ready`; a round trip is one such
//!   poll. zcnet and `LocalPool` run them all in one call (`run_until_idle`,
//!   `run_until_stalled`: the task is ready again after each poll); embassy's `poll()` runs each
//!   task once per call (a task woken during its poll waits for the next call), so it is called
//!   once per round trip, as its own run loop would. The pattern of a task that yields, or of a
//!   stack task that has used up its batch budget.
//! * `run, nothing to do`: one call that runs the executor with no task ready (the fixed cost of
//!   a turn of the loop, paid twice per spawn round trip and once per wake round trip above).
//!
//! Each workload's function (`zc_wake_poll`, `embassy_round_trip`, `local_idle`, ...) stays out
//! of line, so a profiler can count one workload of one executor by its name, e.g.
//! `valgrind --tool=callgrind --toggle-collect='*embassy_wake_poll*'` (see BENCHMARKS.md).
//!
//! "Run the executor" is, for zcnet, `Executor::run_until_idle()` (it also checks the timer wheel
//! for due timers, which the others do not have); for embassy, `raw::Executor::poll()`; for
//! `LocalPool`, `run_until_stalled()`.
//!
//! The executors:
//!
//! * **zcnet Box**: `Spawner::spawn` (a heap-allocated task) on an executor whose platform is a
//!   virtual clock (`VirtualClock`, an atomic load per clock read).
//! * **zcnet Box, Linux clock**: the same on `LinuxPlatform`, whose clock is `clock_gettime`
//!   (vDSO); `run_until_idle` reads the clock on every turn for its timers.
//! * **zcnet static**: `Spawner::spawn_in` a `static TaskStorage` slot (no allocation).
//! * **embassy static**: embassy-executor 0.10.0's `raw::Executor` with a `static raw::TaskStorage`
//!   (no allocation), spawned through `raw::TaskStorage::spawn` and `Spawner::spawn`. Its
//!   `platform-std` thread executor (`executor-thread`) cannot be driven step by step (its `run`
//!   never returns, and it signals a Mutex + Condvar on every pend); so the benchmark enables
//!   `platform-std` without `executor-thread` and supplies the `__pender` the raw executor calls:
//!   it sets a flag (zcnet's `run_until_idle` never signals either).
//! * **LocalPool Box**: `futures::executor::LocalPool` with `LocalSpawnExt::spawn_local`
//!   (boxes the future into a `FuturesUnordered`).

use std::cell::Cell;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use embassy_executor::raw;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use zcnet_benches::{ns_per_op, time_ops, Mode, Sample, Table, VirtualClock};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::{Executor, TaskStorage};

thread_local! {
    /// Where a task leaves a clone of its waker for the benchmark to wake.
    static STASH: Cell<Option<Waker>> = const { Cell::new(None) };
}

fn take_stash() -> Waker {
    STASH.take().expect("the task stashed its waker")
}

/// `Pending` on its first poll (stashing its waker), `Ready` on the second.
struct PendOnce {
    polled: bool,
}

impl PendOnce {
    fn new() -> Self {
        Self { polled: false }
    }
}

impl Future for PendOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.polled {
            return Poll::Ready(());
        }
        self.polled = true;
        STASH.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

/// `Pending` `polls` times (stashing its waker on the first), then `Ready`.
struct Countdown {
    polls: u64,
    stashed: bool,
}

impl Countdown {
    fn new(polls: u64) -> Self {
        Self {
            polls,
            stashed: false,
        }
    }
}

impl Future for Countdown {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.polls == 0 {
            return Poll::Ready(());
        }
        self.polls -= 1;
        if !self.stashed {
            self.stashed = true;
            STASH.set(Some(cx.waker().clone()));
        }
        Poll::Pending
    }
}

thread_local! {
    /// Polls of `SelfWaking` futures, for the benchmark's checks.
    static SELF_WAKING_POLLS: Cell<u64> = const { Cell::new(0) };
}

/// Wakes itself and returns `Pending` on each of its first `left` polls, then `Ready`.
struct SelfWaking {
    left: u64,
}

impl SelfWaking {
    fn new(left: u64) -> Self {
        Self { left }
    }
}

impl Future for SelfWaking {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        SELF_WAKING_POLLS.set(SELF_WAKING_POLLS.get() + 1);
        if self.left == 0 {
            return Poll::Ready(());
        }
        self.left -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Runs `f`, then checks that it polled `SelfWaking` futures `ops + 1` times (`ops` self-wakes
/// and the last poll) and returns its time for `ops` round trips.
fn self_waking_run(ops: u64, f: impl FnOnce()) -> (Duration, u64) {
    let polls = SELF_WAKING_POLLS.get();
    let start = std::time::Instant::now();
    f();
    let took = start.elapsed();
    assert_eq!(
        SELF_WAKING_POLLS.get() - polls,
        ops + 1,
        "one poll per self-wake"
    );
    (took, ops)
}

// ---- zcnet ----

static ZC_SLOT: TaskStorage<64> = TaskStorage::new();
static ZC_LONG_SLOT: TaskStorage<64> = TaskStorage::new();
static ZC_LOCAL_SLOT: TaskStorage<64> = TaskStorage::new();

/// How zcnet spawns in a benchmark: boxed or into `ZC_SLOT`.
#[derive(Clone, Copy)]
enum ZcSpawn {
    Boxed,
    Static,
}

fn zc_spawn<F>(
    exec: &'static Executor,
    how: ZcSpawn,
    slot: &'static TaskStorage<64>,
    f: F,
) -> zcnet_executor::JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    match how {
        ZcSpawn::Boxed => exec.spawner().spawn(f),
        ZcSpawn::Static => exec.spawner().spawn_in(slot, f).expect("slot free"),
    }
}

#[inline(never)]
fn zc_round_trip(exec: &'static Executor, how: ZcSpawn, join: bool, ops: u64) -> (Duration, u64) {
    let mut cx = Context::from_waker(Waker::noop());
    let polls = exec.stats().polls;
    let r = time_ops(ops, || {
        if !join {
            match how {
                ZcSpawn::Boxed => exec.spawner().spawn_detached(PendOnce::new()),
                ZcSpawn::Static => exec
                    .spawner()
                    .spawn_detached_in(&ZC_SLOT, PendOnce::new())
                    .expect("slot free"),
            }
            exec.run_until_idle();
            take_stash().wake();
            exec.run_until_idle();
        } else {
            let mut handle = zc_spawn(exec, how, &ZC_SLOT, PendOnce::new());
            exec.run_until_idle();
            take_stash().wake();
            exec.run_until_idle();
            assert!(Pin::new(&mut handle).poll(&mut cx).is_ready());
        }
    });
    assert_eq!(
        exec.stats().polls - polls,
        2 * ops,
        "two polls per round trip"
    );
    assert!(!ZC_SLOT.is_claimed(), "static slot released");
    r
}

#[inline(never)]
fn zc_wake_poll(exec: &'static Executor, how: ZcSpawn, ops: u64) -> (Duration, u64) {
    drop(zc_spawn(exec, how, &ZC_LONG_SLOT, Countdown::new(ops + 1)));
    exec.run_until_idle();
    let waker = take_stash();
    let polls = exec.stats().polls;
    let r = time_ops(ops, || {
        waker.wake_by_ref();
        exec.run_until_idle();
    });
    assert_eq!(exec.stats().polls - polls, ops, "one poll per wake");
    waker.wake();
    exec.run_until_idle();
    assert!(!ZC_LONG_SLOT.is_claimed(), "long-lived task finished");
    r
}

/// `zc_wake_poll` with the task spawned by a `LocalSpawner` and woken through
/// `LocalSpawner::wake` (the executor's local run queue).
#[inline(never)]
fn zc_local_wake_poll(exec: &'static Executor, how: ZcSpawn, ops: u64) -> (Duration, u64) {
    let local = exec.local_spawner();
    let f = Countdown::new(ops + 1);
    drop(match how {
        ZcSpawn::Boxed => local.spawn(f),
        ZcSpawn::Static => local.spawn_in(&ZC_LOCAL_SLOT, f).expect("slot free"),
    });
    exec.run_until_idle();
    let waker = take_stash();
    let polls = exec.stats().polls;
    let r = time_ops(ops, || {
        local.wake(&waker);
        exec.run_until_idle();
    });
    assert_eq!(exec.stats().polls - polls, ops, "one poll per wake");
    local.wake(&waker);
    drop(waker);
    exec.run_until_idle();
    assert!(!ZC_LOCAL_SLOT.is_claimed(), "long-lived task finished");
    r
}

/// `wake+poll, task waking itself`: one `run_until_idle` call polls the task to its end.
#[inline(never)]
fn zc_self_wake(exec: &'static Executor, how: ZcSpawn, ops: u64) -> (Duration, u64) {
    drop(zc_spawn(exec, how, &ZC_LONG_SLOT, SelfWaking::new(ops)));
    let r = self_waking_run(ops, || {
        exec.run_until_idle();
    });
    assert!(!ZC_LONG_SLOT.is_claimed(), "the self-waking task finished");
    r
}

#[inline(never)]
fn zc_idle(exec: &'static Executor, ops: u64) -> (Duration, u64) {
    let polls = exec.stats().polls;
    let r = time_ops(ops, || {
        black_box(exec.run_until_idle());
    });
    assert_eq!(exec.stats().polls, polls, "nothing polled");
    r
}

// ---- embassy-executor (raw) ----

/// Set by embassy's raw executor when its run queue goes from empty to non-empty.
static EMBASSY_PENDED: AtomicBool = AtomicBool::new(false);

/// The pender embassy's raw executor calls (`executor-thread` is off, so no other is linked):
/// a flag, like a bare-metal "work pending" bit. The benchmark polls the executor itself.
#[unsafe(export_name = "__pender")]
fn embassy_pender(_context: *mut ()) {
    EMBASSY_PENDED.store(true, Ordering::Relaxed);
}

static EMB_SLOT: raw::TaskStorage<PendOnce> = raw::TaskStorage::new();
static EMB_LONG_SLOT: raw::TaskStorage<Countdown> = raw::TaskStorage::new();
static EMB_SELF_SLOT: raw::TaskStorage<SelfWaking> = raw::TaskStorage::new();

fn embassy_poll(exec: &'static raw::Executor) {
    // SAFETY: only this thread polls the executor, never re-entrantly (the pender only sets a
    // flag, it does not poll).
    unsafe { exec.poll() };
}

#[inline(never)]
fn embassy_round_trip(exec: &'static raw::Executor, ops: u64) -> (Duration, u64) {
    let spawner = exec.spawner();
    time_ops(ops, || {
        spawner.spawn(EMB_SLOT.spawn(PendOnce::new).expect("slot free"));
        embassy_poll(exec);
        take_stash().wake();
        embassy_poll(exec);
    })
}

#[inline(never)]
fn embassy_wake_poll(exec: &'static raw::Executor, ops: u64) -> (Duration, u64) {
    let spawner = exec.spawner();
    spawner.spawn(
        EMB_LONG_SLOT
            .spawn(|| Countdown::new(ops + 1))
            .expect("slot free"),
    );
    embassy_poll(exec);
    let waker = take_stash();
    let r = time_ops(ops, || {
        waker.wake_by_ref();
        embassy_poll(exec);
    });
    waker.wake();
    embassy_poll(exec);
    r
}

/// `wake+poll, task waking itself`: one `poll()` per round trip (the task woke itself during
/// its poll, so the next call polls it again), and one more for its last poll.
#[inline(never)]
fn embassy_self_wake(exec: &'static raw::Executor, ops: u64) -> (Duration, u64) {
    let spawner = exec.spawner();
    spawner.spawn(
        EMB_SELF_SLOT
            .spawn(|| SelfWaking::new(ops))
            .expect("slot free"),
    );
    self_waking_run(ops, || {
        for _ in 0..=ops {
            embassy_poll(exec);
        }
    })
}

#[inline(never)]
fn embassy_idle(exec: &'static raw::Executor, ops: u64) -> (Duration, u64) {
    time_ops(ops, || embassy_poll(exec))
}

// ---- futures LocalPool ----

#[inline(never)]
fn local_round_trip(pool: &mut LocalPool, join: bool, ops: u64) -> (Duration, u64) {
    let spawner = pool.spawner();
    let mut cx = Context::from_waker(Waker::noop());
    time_ops(ops, || {
        if !join {
            spawner.spawn_local(PendOnce::new()).expect("pool alive");
            pool.run_until_stalled();
            take_stash().wake();
            pool.run_until_stalled();
        } else {
            let mut handle = spawner
                .spawn_local_with_handle(PendOnce::new())
                .expect("pool alive");
            pool.run_until_stalled();
            take_stash().wake();
            pool.run_until_stalled();
            assert!(Pin::new(&mut handle).poll(&mut cx).is_ready());
        }
    })
}

#[inline(never)]
fn local_wake_poll(pool: &mut LocalPool, ops: u64) -> (Duration, u64) {
    pool.spawner()
        .spawn_local(Countdown::new(ops + 1))
        .expect("pool alive");
    pool.run_until_stalled();
    let waker = take_stash();
    let r = time_ops(ops, || {
        waker.wake_by_ref();
        pool.run_until_stalled();
    });
    waker.wake();
    pool.run_until_stalled();
    r
}

/// `wake+poll, task waking itself`: one `run_until_stalled` call polls the task to its end.
#[inline(never)]
fn local_self_wake(pool: &mut LocalPool, ops: u64) -> (Duration, u64) {
    pool.spawner()
        .spawn_local(SelfWaking::new(ops))
        .expect("pool alive");
    self_waking_run(ops, || pool.run_until_stalled())
}

#[inline(never)]
fn local_idle(pool: &mut LocalPool, ops: u64) -> (Duration, u64) {
    time_ops(ops, || pool.run_until_stalled())
}

// ---- the run ----

type Bench<'a> = Box<dyn FnMut(u64) -> (Duration, u64) + 'a>;

fn cell(s: &Option<Sample>) -> String {
    match s {
        Some(s) => format!("{:.1} ({:.1}–{:.1})", s.median, s.min, s.max),
        None => "n/a".to_string(),
    }
}

fn ratio(peer: &Option<Sample>, zc: &Option<Sample>) -> String {
    match (peer, zc) {
        (Some(p), Some(z)) => format!("{:.2}x", p.median / z.median),
        _ => "n/a".to_string(),
    }
}

fn main() {
    let mode = Mode::from_env();
    let runs = mode.pick(9, 3);
    let ops: u64 = mode.pick(500_000, 5_000);

    let zc_virtual = Executor::leak(VirtualClock::leak());
    let zc_linux = Executor::leak(LinuxPlatform::leak().expect("epoll and eventfd"));
    // For the local-wake row: executors whose local tasks this thread owns.
    let zc_virtual_local = Executor::leak(VirtualClock::leak());
    let zc_linux_local = Executor::leak(LinuxPlatform::leak().expect("epoll and eventfd"));
    let embassy: &'static raw::Executor =
        Box::leak(Box::new(raw::Executor::new(std::ptr::null_mut())));
    let mut pool_a = LocalPool::new();
    let mut pool_b = LocalPool::new();
    let mut pool_c = LocalPool::new();
    let mut pool_d = LocalPool::new();
    let mut pool_e = LocalPool::new();
    let mut pool_f = LocalPool::new();

    const COLUMNS: [&str; 5] = [
        "zcnet Box",
        "zcnet Box, Linux clock",
        "zcnet static",
        "embassy static",
        "LocalPool Box",
    ];
    let workloads: Vec<(&str, [Option<Bench>; 5])> = vec![
        (
            "spawn+wake+poll, detached",
            [
                Some(Box::new(|n| {
                    zc_round_trip(zc_virtual, ZcSpawn::Boxed, false, n)
                })),
                Some(Box::new(|n| {
                    zc_round_trip(zc_linux, ZcSpawn::Boxed, false, n)
                })),
                Some(Box::new(|n| {
                    zc_round_trip(zc_virtual, ZcSpawn::Static, false, n)
                })),
                Some(Box::new(|n| embassy_round_trip(embassy, n))),
                Some(Box::new(|n| local_round_trip(&mut pool_a, false, n))),
            ],
        ),
        (
            "spawn+wake+poll+join",
            [
                Some(Box::new(|n| {
                    zc_round_trip(zc_virtual, ZcSpawn::Boxed, true, n)
                })),
                Some(Box::new(|n| {
                    zc_round_trip(zc_linux, ZcSpawn::Boxed, true, n)
                })),
                Some(Box::new(|n| {
                    zc_round_trip(zc_virtual, ZcSpawn::Static, true, n)
                })),
                None,
                Some(Box::new(|n| local_round_trip(&mut pool_b, true, n))),
            ],
        ),
        (
            "wake+poll, long-lived task",
            [
                Some(Box::new(|n| zc_wake_poll(zc_virtual, ZcSpawn::Boxed, n))),
                Some(Box::new(|n| zc_wake_poll(zc_linux, ZcSpawn::Boxed, n))),
                Some(Box::new(|n| zc_wake_poll(zc_virtual, ZcSpawn::Static, n))),
                Some(Box::new(|n| embassy_wake_poll(embassy, n))),
                Some(Box::new(|n| local_wake_poll(&mut pool_c, n))),
            ],
        ),
        (
            "wake+poll, long-lived task, local wake",
            [
                Some(Box::new(|n| {
                    zc_local_wake_poll(zc_virtual_local, ZcSpawn::Boxed, n)
                })),
                Some(Box::new(|n| {
                    zc_local_wake_poll(zc_linux_local, ZcSpawn::Boxed, n)
                })),
                Some(Box::new(|n| {
                    zc_local_wake_poll(zc_virtual_local, ZcSpawn::Static, n)
                })),
                Some(Box::new(|n| embassy_wake_poll(embassy, n))),
                Some(Box::new(|n| local_wake_poll(&mut pool_e, n))),
            ],
        ),
        (
            "wake+poll, task waking itself",
            [
                Some(Box::new(|n| zc_self_wake(zc_virtual, ZcSpawn::Boxed, n))),
                Some(Box::new(|n| zc_self_wake(zc_linux, ZcSpawn::Boxed, n))),
                Some(Box::new(|n| zc_self_wake(zc_virtual, ZcSpawn::Static, n))),
                Some(Box::new(|n| embassy_self_wake(embassy, n))),
                Some(Box::new(|n| local_self_wake(&mut pool_f, n))),
            ],
        ),
        (
            "run, nothing to do",
            [
                Some(Box::new(|n| zc_idle(zc_virtual, n))),
                Some(Box::new(|n| zc_idle(zc_linux, n))),
                // The same executor as "zcnet Box" (no task involved), measured again.
                Some(Box::new(|n| zc_idle(zc_virtual, n))),
                Some(Box::new(|n| embassy_idle(embassy, n))),
                Some(Box::new(|n| local_idle(&mut pool_d, n))),
            ],
        ),
    ];

    let mut header = vec!["workload"];
    header.extend(COLUMNS);
    header.extend(["embassy / zcnet static", "LocalPool / zcnet Box"]);
    let mut table = Table::new(&header);

    // `ZCNET_EXEC_ONLY=<text>`: only the workloads whose name contains it (for profiling one);
    // `<name>$`: only the workload of exactly that name.
    let only = std::env::var("ZCNET_EXEC_ONLY").ok();
    for (name, mut benches) in workloads {
        if only.as_deref().is_some_and(|o| match o.strip_suffix('$') {
            Some(exact) => name != exact,
            None => !name.contains(o),
        }) {
            continue;
        }
        // Warm-up, unmeasured.
        for b in benches.iter_mut().flatten() {
            black_box(b(ops / 10));
        }
        let mut measured: [Vec<(Duration, u64)>; 5] = Default::default();
        for _ in 0..runs {
            for (k, b) in benches.iter_mut().enumerate() {
                if let Some(b) = b {
                    measured[k].push(b(ops));
                }
            }
        }
        let samples: Vec<Option<Sample>> = measured
            .iter()
            .map(|m| {
                (!m.is_empty()).then(|| {
                    let mut it = m.iter().copied();
                    ns_per_op(runs, || it.next().expect("one per run"))
                })
            })
            .collect();
        let mut row = vec![name.to_string()];
        row.extend(samples.iter().map(cell));
        row.push(ratio(&samples[3], &samples[2]));
        row.push(ratio(&samples[4], &samples[0]));
        table.row(row);
    }
    assert!(
        EMBASSY_PENDED.load(Ordering::Relaxed),
        "embassy's raw executor called the benchmark's pender"
    );

    println!(
        "executor: ns per round trip, median (min–max) of {runs} runs x {ops} round trips, {}",
        mode.label()
    );
    println!();
    print!("{}", table.to_markdown());
    println!();
    println!("ratios above 1 mean the peer is slower than zcnet (same run, medians)");
}
