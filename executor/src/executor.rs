//! [`Executor`]: the run loop, the spawner, and the timer state it owns.
//!
//! # Ground rules
//!
//! * One thread runs an executor's loop at a time (`run` or `block_on`: they wait on the
//!   platform); wakers may be woken from any thread or interrupt handler. `run_until_idle` never
//!   waits and needs no such claim: a task's QUEUED bit makes one thread at a time poll it.
//! * The run loop: take the whole run queue, poll each task once, fire due timers, and when there
//!   is nothing left, ask the platform to wait until the wheel's next deadline. It never spins:
//!   with no task ready and no timer pending it waits with no deadline at all.
//! * "Queue empty" and "going to sleep" are one compare-exchange on the run queue's head (see
//!   `run_queue.rs`), so an enqueue can never slip in between unnoticed.
//! * The timer lock is never taken in interrupt context, and wakers are never woken with it held.

use core::fmt;
use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use core::time::Duration;

use crate::platform::{Instant, Platform};
use crate::run_queue::{Batch, Notify, RunQueue};
use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering::*};
use crate::task::{header_from_waker, Header, JoinHandle, SpawnError, Start, TaskRef, TaskStorage};
use crate::time::wheel::Wheel;
use crate::time::{Sleep, Timeout};

/// The executor is called `Core` inside the crate: what task headers point to.
pub(crate) type Core = Executor;

/// Wakers taken from the wheel per lock hold; woken after the lock is released.
const WAKE_BATCH: usize = 32;

/// The timer wheel and what the executor needs to know about sleeping, under one lock.
pub(crate) struct Timers {
    pub(crate) wheel: Wheel,
    /// While the executor waits: the tick it waits for (`u64::MAX`: no deadline). `None` while
    /// it is awake.
    sleeping_until: Option<u64>,
}

impl Timers {
    /// Called after inserting a deadline: whether the executor must be signalled because it
    /// sleeps past it.
    pub(crate) fn note_insert(&mut self, tick: u64) -> bool {
        match self.sleeping_until {
            Some(until) if tick < until => {
                self.sleeping_until = Some(tick);
                true
            }
            _ => false,
        }
    }
}

/// Counters an executor keeps ([`Executor::stats`]). Bumped with plain loads and stores by the
/// thread running the executor (no locked instruction); exact while one thread at a time runs
/// it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecutorStats {
    /// Task polls (and polls of `block_on`'s future).
    pub polls: u64,
    /// Times the run loop asked the platform to wait.
    pub waits: u64,
    /// Timers that fired.
    pub timers_fired: u64,
    /// Signals sent to a waiting executor (by wakes or earlier deadlines).
    pub signals: u64,
}

/// Busy turns between two non-blocking looks at the platform's events (tokio's scheduler uses
/// 61 for the same purpose; any small number works: it bounds how long readiness can wait while
/// tasks keep the loop busy, at the cost of one `epoll_wait(0)` per interval).
pub(crate) const EVENT_INTERVAL: u32 = 61;

/// Statistics counter: relaxed, never used to synchronise, deliberately outside loom's model.
struct Counter(core::sync::atomic::AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(core::sync::atomic::AtomicU64::new(0))
    }
    /// Adds `n` from any thread (a locked read-modify-write).
    fn add(&self, n: u64) {
        self.0.fetch_add(n, core::sync::atomic::Ordering::Relaxed);
    }
    /// Adds `n` with a plain load and store: no locked instruction on the hot path.
    ///
    /// Only for counters written by the thread running the executor: with a single writer no
    /// increment can be lost, and readers on other threads still see a value that was current
    /// at some point. (`run_until_idle` on two threads at once may lose increments: the counters
    /// are statistics, nothing synchronises through them.)
    fn add_single_writer(&self, n: u64) {
        use core::sync::atomic::Ordering::Relaxed;
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(core::sync::atomic::Ordering::Relaxed)
    }
}

/// A single-threaded executor with a hierarchical timer wheel, driven by a [`Platform`].
///
/// It lives for `'static` (a `static`, or `Executor::leak` with `alloc`) because task headers and wakers
/// point to it.
///
/// ```
/// use core::time::Duration;
/// use zcnet_executor::{time, Executor};
/// # use zcnet_executor::linux::LinuxPlatform;
/// # let platform = LinuxPlatform::leak().unwrap();
/// let executor: &'static Executor = Executor::leak(platform);
/// let spawner = executor.spawner();
/// let answer = executor.block_on(async move {
///     let child = spawner.spawn(async {
///         time::sleep(Duration::from_millis(5)).await;
///         21
///     });
///     child.await * 2
/// });
/// assert_eq!(answer, 42);
/// ```
pub struct Executor {
    queue: RunQueue,
    pub(crate) timers: Mutex<Timers>,
    platform: &'static dyn Platform,
    tick_nanos: u64,
    /// Set while a thread runs the loop (`run`, `block_on`: one at a time).
    running: AtomicBool,
    /// A lower bound on the wheel's next expiration, as the expiration tick's start in
    /// nanoseconds (`tick × tick_nanos`, saturating; `u64::MAX`: no timer armed). Nanoseconds,
    /// not ticks, so that the check on every turn compares the clock with it directly instead
    /// of dividing the clock by the tick length (a 64-bit division per turn showed in profiles).
    ///
    /// Written only with the timer lock held, always to the wheel's exact next expiration at
    /// that moment: after every insert ([`Executor::note_insert`]) and after `fire_timers`
    /// collected what was due. Read without the lock by `fire_timers`, which skips the lock and
    /// the wheel while the clock is below it (most turns). Removals leave it alone, so it can
    /// only be too low (costing one locked look), never too high. It is the wheel's next
    /// expiration (the earliest deadline recorded in the first occupied slot, see the wheel's
    /// module docs), which the idle path also waits for, so `fire_timers` must then run.
    next_due: AtomicU64,
    /// Turns in a row that found work (no wait), for [`Self::poll_events_now_and_then`].
    /// Written only by the thread running the loop; outside loom's model like the counters.
    busy_turns: core::sync::atomic::AtomicU32,
    /// Written by the thread running the executor (`add_single_writer`).
    polls: Counter,
    /// Written by the thread running the executor (`add_single_writer`).
    waits: Counter,
    /// Written by the thread running the executor (`add_single_writer`).
    timers_fired: Counter,
    /// Written by any waking thread (`add`).
    signals: Counter,
    /// The context that owns this executor's local tasks (see [`LocalSpawner`]): with `std`,
    /// the id of the thread that took the first local spawner (`0`: none yet), checked before
    /// every poll of a local task; without `std`, unused (the caller of
    /// [`Executor::local_spawner_unchecked`] vouches for it). Written once; outside loom's model.
    #[cfg_attr(not(feature = "std"), allow(dead_code))]
    local_owner: core::sync::atomic::AtomicU64,
    /// Without `std`: a local spawner was taken ([`Executor::local_spawner_unchecked`]), whose
    /// caller vouched that the loop runs in one context; the local run queue is used from then
    /// on. Written once; outside loom's model.
    #[cfg_attr(feature = "std", allow(dead_code))]
    local_declared: core::sync::atomic::AtomicBool,
    /// Local tasks scheduled from the owning context ([`LocalSpawner::wake`]): no locked
    /// instruction. Touched only in that context (see [`Executor::owns_local`]).
    local: LocalQueue,
}

/// A FIFO of local tasks, linked through `Header::local_next`, with `Header::local_queued`
/// keeping a task in it at most once. Only the context that owns the executor's local tasks
/// touches it: pushes come from a [`LocalSpawner`] (which exists only there), and the loop
/// takes from it only after [`Executor::owns_local`] said it runs there. A task in it is kept
/// alive by the executor's local reference (see the task module's `LOCAL`), not by QUEUED, so
/// it may sit in the lock-free run queue at the same time (a foreign wake): it is then polled
/// once from each, which a future must tolerate like any spurious poll.
///
/// 16-byte aligned: the take clears both words with one 16-byte store, which must not straddle
/// two cache lines (a split store is slow, and the next push's load of `tail` could not be
/// forwarded from it).
#[repr(align(16))]
struct LocalQueue {
    head: core::cell::Cell<*mut Header>,
    tail: core::cell::Cell<*mut Header>,
}

// SAFETY: the cells are read and written only in the context that owns the executor's local
// tasks (see the type's docs), never from two contexts.
unsafe impl Sync for LocalQueue {}

impl LocalQueue {
    const fn new() -> Self {
        Self {
            head: core::cell::Cell::new(core::ptr::null_mut()),
            tail: core::cell::Cell::new(core::ptr::null_mut()),
        }
    }

    fn is_empty(&self) -> bool {
        self.head.get().is_null()
    }

    /// Appends `task` unless it is queued already or complete. No locked instruction.
    fn push(&self, task: TaskRef) {
        let h = task.header();
        if h.local_queued.get() || h.state.load(Relaxed) & crate::task::COMPLETE != 0 {
            return;
        }
        h.local_queued.set(true);
        h.local_next.set(core::ptr::null_mut());
        let node = task.0.as_ptr();
        match core::ptr::NonNull::new(self.tail.get()) {
            None => self.head.set(node),
            Some(tail) => TaskRef(tail).header().local_next.set(node),
        }
        self.tail.set(node);
    }

    /// Takes every queued task, oldest first; tasks queued meanwhile wait for the next take.
    fn take(&self) -> *mut Header {
        self.tail.set(core::ptr::null_mut());
        self.head.replace(core::ptr::null_mut())
    }
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor")
            .field("tick_nanos", &self.tick_nanos)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

static MAIN_VTABLE: RawWakerVTable =
    RawWakerVTable::new(main_clone, main_wake, main_wake, main_drop);

fn main_clone(data: *const ()) -> RawWaker {
    RawWaker::new(data, &MAIN_VTABLE)
}

fn main_wake(data: *const ()) {
    // SAFETY: main wakers are made only from a `&'static Executor`.
    let exec = unsafe { &*data.cast::<Executor>() };
    exec.notify(exec.queue.wake_main());
}

fn main_drop(_: *const ()) {}

/// Releases the "running" flag and restores this thread's record in [`running`] (when the
/// field drops, after this) when the run loop ends (also by unwinding).
struct RunningGuard {
    exec: &'static Executor,
    _record: running::Record,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.exec.running.store(false, Release);
    }
}

/// Which executor runs where, for timers polled with a waker that is not one of ours (see
/// [`Executor::for_timers`]).
///
/// * With `std`: a per-thread record of the executor whose code the thread runs, kept in the
///   word of `sync::polling`: while a task from the run queue is polled, that task (its executor
///   is the one); around a loop (`run`, `block_on`) and around `run_until_idle`'s polls of
///   local tasks, the executor's address with bit 0 set (`EXEC_TAG`). A nested loop of
///   another executor, or a poll, saves and restores the outer one. So `run_until_idle` keeps
///   no record of its own: each of its polls names its task anyway.
/// * Always: the process's *default* executor. An executor takes the role when it starts a loop
///   while the role is free or its holder is not running a loop, and keeps it after its loop
///   ends, until another executor takes it that way. So a program (or kernel) with one
///   executor always has that one, and starting and ending loops costs no locked instruction
///   once it holds the role. Executors are `'static`, so a pointer read from it stays valid.
///
/// Under loom neither exists (the models free their executors between executions, and poll
/// timers only with executor-bound sleeps or task wakers).
#[cfg(not(loom))]
mod running {
    use core::ptr;
    use core::task::Waker;

    use super::Executor;
    use crate::sync::{polling, AtomicPtr, Mutex, Ordering::*};

    static DEFAULT: AtomicPtr<Executor> = AtomicPtr::new(ptr::null_mut());

    /// Bit 0 of the [`polling`] word: the rest is an executor's address, not a task's (both
    /// are at least 8-byte aligned, so a task's address never has it).
    const EXEC_TAG: usize = 1;

    /// This thread's record of an executor (see the module docs); dropping it puts back what
    /// it replaced.
    pub(super) type Record = polling::Scope;

    /// How many tasks can wait for the first loop at once without waking each other early.
    const EARLY_WAITERS: usize = 16;

    /// Wakers of timers (and `time::now`) polled before any executor had run a loop: woken
    /// when the first one starts. A full list wakes everyone (they re-poll and register
    /// again) and keeps the newcomer: nobody is forgotten.
    static EARLY: Mutex<[Option<Waker>; EARLY_WAITERS]> =
        Mutex::new([const { None }; EARLY_WAITERS]);

    /// `exec`'s loop starts on this thread (its `running` flag is already set): it may take
    /// the default role, and the thread records it until the returned record drops.
    pub(super) fn enter(exec: &'static Executor) -> Record {
        claim_default(exec);
        record(exec)
    }

    /// The thread runs `exec`'s code until the returned record drops.
    #[inline]
    pub(super) fn record(exec: &'static Executor) -> Record {
        polling::Scope::enter(ptr::from_ref(exec).cast::<()>().map_addr(|a| a | EXEC_TAG))
    }

    /// `exec` found work to do: it takes the default role if the role is free or its holder is
    /// not running a loop. One load when it holds the role already. Returns whether it woke
    /// the timers that waited for a first executor (whose tasks may be queued now).
    #[inline]
    pub(super) fn claim_default(exec: &'static Executor) -> bool {
        // Acquire: the holder is read in `take_default`.
        let holder = DEFAULT.load(Acquire);
        if holder != ptr::from_ref(exec).cast_mut() {
            return take_default(exec, holder);
        }
        false
    }

    /// [`claim_default`] when `holder` holds the role (or nobody, if null).
    #[cold]
    #[inline(never)]
    fn take_default(exec: &'static Executor, holder: *mut Executor) -> bool {
        let p = ptr::from_ref(exec).cast_mut();
        // SAFETY: only pointers made from `&'static Executor` are stored.
        let busy = unsafe { holder.as_ref() }.is_some_and(|h| h.running.load(Relaxed));
        // Release: a thread that reads the pointer (Acquire) sees the executor built.
        // Failure means another executor took the role meanwhile: it keeps it.
        let took = !busy
            && DEFAULT
                .compare_exchange(holder, p, Release, Relaxed)
                .is_ok();
        if took && holder.is_null() {
            // The first executor: the timers that waited for one can start.
            wake_early();
            return true;
        }
        false
    }

    /// Wakes (and forgets) every waker in [`EARLY`], outside the lock.
    fn wake_early() {
        let mut woken: [Option<Waker>; EARLY_WAITERS] = [const { None }; EARLY_WAITERS];
        {
            let mut early = EARLY.lock();
            for (w, e) in woken.iter_mut().zip(early.iter_mut()) {
                *w = e.take();
            }
        }
        for w in woken.into_iter().flatten() {
            w.wake();
        }
    }

    /// [`get`], or, when no executor has run a loop yet, `None` with `waker` registered to be
    /// woken when the first one starts.
    pub(super) fn get_or_wait(waker: &Waker) -> Option<&'static Executor> {
        if let Some(exec) = get() {
            return Some(exec);
        }
        let mut early = EARLY.lock();
        // Again under the lock: `enter` stores the executor before it takes the lock to wake,
        // so either this sees it, or `enter` finds the waker registered below.
        if let Some(exec) = get() {
            return Some(exec);
        }
        if early.iter().flatten().any(|w| w.will_wake(waker)) {
            return None;
        }
        if let Some(place) = early.iter_mut().find(|w| w.is_none()) {
            *place = Some(waker.clone());
            return None;
        }
        let evicted = core::mem::replace(&mut *early, [const { None }; EARLY_WAITERS]);
        early[0] = Some(waker.clone());
        drop(early);
        for w in evicted.into_iter().flatten() {
            w.wake();
        }
        None
    }

    /// The executor whose code this thread runs (`std`: the record), else the default one.
    pub(super) fn get() -> Option<&'static Executor> {
        // Null without `std`.
        let word = polling::current();
        if word.addr() & EXEC_TAG != 0 {
            // SAFETY: tagged words are made by `record` from a `&'static Executor`.
            return Some(unsafe { &*word.map_addr(|a| a & !EXEC_TAG).cast::<Executor>() });
        }
        if let Some(task) = ptr::NonNull::new(word.cast_mut()) {
            // The task this thread polls from the run queue right now: the executor holds it
            // (QUEUED) until the poll ends, so its header is alive.
            return Some(crate::task::TaskRef(task.cast()).core());
        }
        let p = DEFAULT.load(Acquire);
        // SAFETY: only pointers made from `&'static Executor` are stored, and executors are
        // never freed (they live for `'static`).
        unsafe { p.as_ref() }
    }
}

/// [`running`] under loom: no records.
#[cfg(loom)]
mod running {
    use super::Executor;

    pub(super) struct Record;

    pub(super) fn enter(_: &'static Executor) -> Record {
        Record
    }

    pub(super) fn record(_: &'static Executor) -> Record {
        Record
    }

    pub(super) fn claim_default(_: &'static Executor) -> bool {
        false
    }

    pub(super) fn get_or_wait(_: &core::task::Waker) -> Option<&'static Executor> {
        None
    }
}

impl Executor {
    /// An executor with 1 ms timer ticks, for a `static`.
    #[cfg(not(loom))]
    pub const fn new(platform: &'static dyn Platform) -> Self {
        Self::with_tick(platform, Duration::from_millis(1))
    }

    /// An executor whose timer wheel counts in `tick`s (deadlines are rounded up to a tick).
    /// Panics on a zero tick.
    #[cfg(not(loom))]
    pub const fn with_tick(platform: &'static dyn Platform, tick: Duration) -> Self {
        let nanos = tick.as_nanos();
        assert!(nanos > 0 && nanos <= u64::MAX as u128, "tick out of range");
        Self {
            queue: RunQueue::new(),
            timers: Mutex::new(Timers {
                wheel: Wheel::new(),
                sleeping_until: None,
            }),
            platform,
            tick_nanos: nanos as u64,
            running: AtomicBool::new(false),
            next_due: AtomicU64::new(u64::MAX),
            busy_turns: core::sync::atomic::AtomicU32::new(0),
            polls: Counter::new(),
            waits: Counter::new(),
            timers_fired: Counter::new(),
            signals: Counter::new(),
            local_owner: core::sync::atomic::AtomicU64::new(0),
            local_declared: core::sync::atomic::AtomicBool::new(false),
            local: LocalQueue::new(),
        }
    }

    /// An executor with `tick`-long timer ticks (loom builds have no `const` constructors).
    #[cfg(loom)]
    pub fn with_tick(platform: &'static dyn Platform, tick: Duration) -> Self {
        Self {
            queue: RunQueue::new(),
            timers: Mutex::new(Timers {
                wheel: Wheel::new(),
                sleeping_until: None,
            }),
            platform,
            tick_nanos: tick.as_nanos() as u64,
            running: AtomicBool::new(false),
            next_due: AtomicU64::new(u64::MAX),
            busy_turns: core::sync::atomic::AtomicU32::new(0),
            polls: Counter::new(),
            waits: Counter::new(),
            timers_fired: Counter::new(),
            signals: Counter::new(),
            local_owner: core::sync::atomic::AtomicU64::new(0),
            local_declared: core::sync::atomic::AtomicBool::new(false),
            local: LocalQueue::new(),
        }
    }

    /// An executor on the heap with 1 ms ticks, leaked so it lives for `'static`.
    #[cfg(feature = "alloc")]
    pub fn leak(platform: &'static dyn Platform) -> &'static Executor {
        extern crate alloc;
        alloc::boxed::Box::leak(alloc::boxed::Box::new(Self::with_tick(
            platform,
            Duration::from_millis(1),
        )))
    }

    /// A handle that spawns tasks onto this executor.
    pub fn spawner(&'static self) -> Spawner {
        Spawner { exec: self }
    }

    /// A handle that spawns tasks whose futures need not be `Send` (everything holding a
    /// zcnet stack or socket) onto this executor, and binds the executor's local tasks to the
    /// calling thread: from then on a local task polled by a loop (`run`, `block_on`,
    /// `run_until_idle`) on any other thread panics before its future is touched. Panics if
    /// another thread holds that binding already.
    ///
    /// Wakers of local tasks still work from any thread or interrupt handler, and
    /// [`Spawner`] still spawns `Send` tasks from anywhere.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use zcnet_executor::Executor;
    /// # use zcnet_executor::linux::LinuxPlatform;
    /// let executor: &'static Executor = Executor::leak(LinuxPlatform::leak().unwrap());
    /// let shared = Rc::new(21); // not `Send`
    /// let task = executor.local_spawner().spawn({
    ///     let shared = shared.clone();
    ///     async move { *shared * 2 }
    /// });
    /// assert_eq!(executor.block_on(task), 42);
    /// ```
    #[cfg(feature = "std")]
    pub fn local_spawner(&'static self) -> LocalSpawner {
        let me = thread_id::current();
        if let Err(other) = self.local_owner.compare_exchange(0, me, Relaxed, Relaxed) {
            assert_eq!(
                other, me,
                "zcnet-executor: this executor's local tasks belong to another thread"
            );
        }
        LocalSpawner {
            exec: self,
            _not_send: core::marker::PhantomData,
        }
    }

    /// A [`LocalSpawner`] without a check of who runs the executor: for `no_std` platforms,
    /// where the executor cannot tell one context from another. (With `std` it binds the
    /// executor to the calling thread as `local_spawner` (with `std`) does, and
    /// the binding is checked there too.)
    ///
    /// # Safety
    ///
    /// From the first local task spawned until the last one has completed, this executor's
    /// loop (`run`, `block_on`, `run_until_idle`) runs only in the calling context: the same
    /// core and thread of control, never from an interrupt handler, never from two cores.
    /// A kernel that runs its one executor from its main loop on one core meets this.
    pub unsafe fn local_spawner_unchecked(&'static self) -> LocalSpawner {
        self.local_declared.store(true, Relaxed);
        #[cfg(feature = "std")]
        {
            let _ = self
                .local_owner
                .compare_exchange(0, thread_id::current(), Relaxed, Relaxed);
        }
        LocalSpawner {
            exec: self,
            _not_send: core::marker::PhantomData,
        }
    }

    /// Spawns `future` (a local task if `local`) into `storage` and queues it.
    fn spawn_static<F: Future + 'static, const SIZE: usize>(
        &'static self,
        storage: &'static TaskStorage<SIZE>,
        future: F,
        local: bool,
    ) -> Result<JoinHandle<F::Output>, SpawnError> {
        let task = storage.spawn(self, future, local, true)?;
        self.enqueue(task);
        Ok(JoinHandle::new(task))
    }

    /// [`spawn_static`](Self::spawn_static) with no join handle.
    fn spawn_static_detached<F: Future + 'static, const SIZE: usize>(
        &'static self,
        storage: &'static TaskStorage<SIZE>,
        future: F,
        local: bool,
    ) -> Result<(), SpawnError> {
        let task = storage.spawn(self, future, local, false)?;
        self.enqueue(task);
        Ok(())
    }

    /// Spawns `future` (a local task if `local`) in a box and queues it.
    #[cfg(feature = "alloc")]
    fn spawn_boxed<F: Future + 'static>(
        &'static self,
        future: F,
        local: bool,
    ) -> JoinHandle<F::Output> {
        let task = crate::task::spawn_boxed(self, future, local, true);
        self.enqueue(task);
        JoinHandle::new(task)
    }

    /// [`spawn_boxed`](Self::spawn_boxed) with no join handle.
    #[cfg(feature = "alloc")]
    fn spawn_boxed_detached<F: Future + 'static>(&'static self, future: F, local: bool) {
        let task = crate::task::spawn_boxed(self, future, local, false);
        // Nothing of ours refers to the task after this: it may complete and be freed at once.
        self.enqueue(task);
    }

    /// Whether the calling context owns this executor's local tasks, and so may use the local
    /// run queue: with `std`, the thread bound by the first local spawner; without, any
    /// context once [`local_spawner_unchecked`](Self::local_spawner_unchecked) was called
    /// (its caller vouched that only one context runs the loop). No locked instruction.
    #[inline]
    fn owns_local(&self) -> bool {
        #[cfg(feature = "std")]
        {
            let owner = self.local_owner.load(Relaxed);
            owner != 0 && owner == thread_id::current()
        }
        #[cfg(not(feature = "std"))]
        {
            self.local_declared.load(Relaxed)
        }
    }

    /// Whether a context is bound to this executor's local tasks (a local spawner was taken):
    /// until then the local run queue stays empty. One load.
    #[inline(always)]
    fn local_bound(&self) -> bool {
        #[cfg(feature = "std")]
        {
            self.local_owner.load(Relaxed) != 0
        }
        #[cfg(not(feature = "std"))]
        {
            self.local_declared.load(Relaxed)
        }
    }

    /// Whether the local run queue is empty (for the crate's tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn local_queue_is_empty(&self) -> bool {
        self.local.is_empty()
    }

    /// Whether the local run queue has tasks; `owns` is what [`owns_local`](Self::owns_local)
    /// said (the queue is not looked at otherwise).
    #[inline]
    fn local_work(&self, owns: bool) -> bool {
        owns && !self.local.is_empty()
    }

    /// Polls every task in the local run queue once (tasks scheduled locally meanwhile wait
    /// for the next call); returns the number of polls. Only in the owning context.
    fn poll_local(&self) -> u64 {
        let mut next = self.local.take();
        let mut polls = 0;
        while let Some(node) = core::ptr::NonNull::new(next) {
            let task = TaskRef(node);
            let h = task.header();
            next = h.local_next.get();
            h.local_queued.set(false);
            if h.state.load(Acquire) & crate::task::COMPLETE != 0 {
                // Completed (polled from the run queue) while it waited here: the local
                // reference was kept for this queue; let go of it now.
                // SAFETY: owning context, complete, local reference held, no longer queued.
                unsafe { task.release_local_ref() };
                continue;
            }
            polls += 1;
            // SAFETY: local tasks are polled only in the owning context (this one), one poll
            // at a time, and the local reference keeps the task alive; it is not complete.
            if let Poll::Ready(()) = unsafe { task.poll_local() } {
                // SAFETY: the poll from the local queue returned `Ready`; not used again.
                unsafe { task.complete_local() };
            }
        }
        polls
    }

    /// A wake of `task` through its `Waker`: with `std`, when `task` is one of this executor's
    /// local tasks and the calling thread owns them, it goes on the local run queue, as
    /// [`LocalSpawner::wake`] would put it: no locked instruction, where the lock-free path
    /// costs a compare-exchange, a push, the loop's take and the end of the poll. That thread
    /// is the only one that polls local tasks and the only one that touches the local queue,
    /// and it is not inside the loop's wait while it runs this. `false`: wake as usual (other
    /// threads, tasks that are not local, no `std`, loom).
    ///
    /// Wakers must not be woken from a signal handler on that thread (they never are
    /// async-signal-safe: a foreign wake may take the platform's lock).
    #[inline]
    pub(crate) fn wake_on_owner_thread(&self, task: TaskRef) -> bool {
        #[cfg(all(feature = "std", not(loom)))]
        {
            if task.header().local && self.owns_local() {
                self.local.push(task);
                return true;
            }
        }
        let _ = task;
        false
    }

    /// Before a local task's poll: with `std`, panics unless the calling thread owns the
    /// executor's local tasks. Out of line: only local tasks pay for it.
    #[inline(never)]
    fn check_local_owner(&self) {
        #[cfg(feature = "std")]
        {
            let owner = self.local_owner.load(Relaxed);
            assert!(
                owner == thread_id::current(),
                "zcnet-executor: a local task was polled by a thread that does not own it \
                 (run the executor on the thread that took its LocalSpawner)"
            );
        }
    }

    /// The platform's clock.
    pub fn now(&self) -> Instant {
        self.platform.now()
    }

    /// A [`Sleep`] until `deadline` on this executor's timer wheel. It knows its executor, so it
    /// works under any waker (inside a `FuturesUnordered`, under a foreign executor, on any
    /// thread) and never panics for want of one; the loop of this executor must run for it to
    /// fire.
    pub fn sleep_until(&'static self, deadline: Instant) -> Sleep {
        let mut s = Sleep::at(deadline);
        s.bind(self);
        s
    }

    /// A [`Sleep`] of `duration` from now, as [`sleep_until`](Self::sleep_until).
    pub fn sleep(&'static self, duration: Duration) -> Sleep {
        self.sleep_until(self.now() + duration)
    }

    /// Runs `future` for at most `duration` from its first poll, as
    /// [`time::timeout`](crate::time::timeout) does, with the timer on this executor's wheel:
    /// like [`sleep_until`](Self::sleep_until), it works under any waker and never looks an
    /// executor up.
    pub fn timeout<F: Future>(&'static self, duration: Duration, future: F) -> Timeout<F> {
        let mut s = Sleep::after(duration);
        s.bind(self);
        Timeout::new(future, s)
    }

    /// The counters.
    pub fn stats(&self) -> ExecutorStats {
        ExecutorStats {
            polls: self.polls.get(),
            waits: self.waits.get(),
            timers_fired: self.timers_fired.get(),
            signals: self.signals.get(),
        }
    }

    /// Timer entries currently armed (in the wheel or expired and not yet collected).
    pub fn armed_timers(&self) -> usize {
        self.timers.lock().wheel.len()
    }

    /// Runs `future` to completion on the current thread, running spawned tasks and timers
    /// meanwhile. Panics if another thread is running this executor.
    pub fn block_on<F: Future>(&'static self, future: F) -> F::Output {
        let _running = self.enter();
        let mut future = pin!(future);
        // SAFETY: MAIN_VTABLE's functions uphold the RawWaker contract for a `&'static Executor`
        // (they only read it; clone/drop are no-ops on a 'static pointer).
        let waker = unsafe {
            Waker::from_raw(RawWaker::new(
                (self as *const Self).cast::<()>(),
                &MAIN_VTABLE,
            ))
        };
        let mut cx = Context::from_waker(&waker);
        let mut main_woken = true;
        let mut owns = false;
        loop {
            if main_woken {
                self.polls.add_single_writer(1);
                if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                    return v;
                }
            }
            main_woken = self.turn(&mut owns);
        }
    }

    /// Runs tasks and timers forever (a kernel's main loop). Panics if another thread is running
    /// this executor.
    pub fn run(&'static self) -> ! {
        let _running = self.enter();
        let mut owns = false;
        loop {
            self.turn(&mut owns);
        }
    }

    /// Polls every ready task and fires every due timer, repeatedly, until nothing is ready;
    /// never waits, and never polls a `block_on` future (its wakes stay for it). For tests, and
    /// for integrators that drive the executor from a loop of their own. Returns the number of
    /// task polls it made.
    ///
    /// A call that finds no task queued and no timer due returns at once, having read a few
    /// words (and the clock only if a timer is armed). Unlike [`run`](Self::run) and
    /// [`block_on`](Self::block_on) it does not claim the executor: it never waits on the
    /// platform, which is what only one thread may do, and a task is polled by one thread at a
    /// time whoever runs it (the task's QUEUED bit, see `task`). So it may be called from inside
    /// a task of the same executor, or while another thread runs it; the [`stats`](Self::stats)
    /// are exact only while one thread at a time runs the executor.
    ///
    /// Inlined into the caller: while no timer is armed and no context is bound to the local
    /// tasks, it is a loop that takes the run queue and polls what it took (and, once the
    /// queue is empty, looks at the default role, see `running`), with nothing else to look
    /// after, so it needs no call frame of its own. Otherwise, and when a poll arms a timer or
    /// binds the local tasks, the call goes on out of line with the timers and the local run
    /// queue.
    #[inline(always)]
    pub fn run_until_idle(&'static self) -> u64 {
        if !self.no_timer_armed() || self.local_bound() {
            return self.run_until_idle_full();
        }
        let mut batch = self.queue.take_tasks(|| self.signal());
        if batch.is_empty() {
            return 0;
        }
        let mut polls = 0;
        loop {
            for task in batch {
                self.poll_task(task);
                // Counted as it ends, after its locked instruction: nothing between the take
                // and the poll but the poll's own work.
                self.polls.add_single_writer(1);
                polls += 1;
            }
            if !self.no_timer_armed() || self.local_bound() {
                // A poll armed a timer or bound the local tasks: the rest runs out of line
                // (which finds any task the default role's first taking woke).
                running::claim_default(self);
                return polls + self.run_until_idle_full();
            }
            batch = self.queue.take_tasks(|| self.signal());
            if batch.is_empty() {
                // Found work: the default role, one load when the executor holds it already.
                // Taking it first wakes the timers that waited for an executor: their tasks
                // may be queued now.
                if running::claim_default(self) {
                    return polls + self.run_until_idle_full();
                }
                return polls;
            }
        }
    }

    /// Whether no timer is armed (`next_due` says none): then none can be due, and the clock
    /// need not be read. One load.
    #[inline(always)]
    fn no_timer_armed(&self) -> bool {
        self.next_due.load(Acquire) == u64::MAX
    }

    /// [`run_until_idle`](Self::run_until_idle) with every duty: the timers, the local run
    /// queue when the calling context owns it, and the default role. Out of line.
    #[inline(never)]
    fn run_until_idle_full(&'static self) -> u64 {
        // Two copies of the whole call: the one for a thread that does not own local tasks has
        // no check of the local run queue.
        if self.owns_local() {
            self.run_until_idle_with::<true>()
        } else {
            self.run_until_idle_with::<false>()
        }
    }

    /// [`run_until_idle`](Self::run_until_idle) with `LOCAL` what
    /// [`owns_local`](Self::owns_local) said.
    #[inline(always)]
    fn run_until_idle_with<const LOCAL: bool>(&'static self) -> u64 {
        let batch = self.queue.take_tasks(|| self.signal());
        if batch.is_empty() && !self.timers_due() && (!LOCAL || self.local.is_empty()) {
            return 0;
        }
        running::claim_default(self);
        let polls = self.run_batches::<LOCAL>(batch);
        self.polls.add_single_writer(polls);
        polls
    }

    /// [`run_until_idle`](Self::run_until_idle) once it found work: polls `batch`, the local
    /// run queue if `LOCAL` (the calling context owns it), and due timers, until nothing is
    /// ready. Returns the number of polls.
    #[inline(always)]
    fn run_batches<const LOCAL: bool>(&'static self, mut batch: Batch) -> u64 {
        let mut polls = 0;
        loop {
            for task in batch {
                self.poll_task(task);
                polls += 1;
            }
            if LOCAL {
                // Polls of run-queue tasks name their task in the thread's record; local
                // polls name the executor.
                let _record = running::record(self);
                polls += self.poll_local();
            }
            // With no timer armed when `fire_timers` looked, none can be due now unless another
            // thread armed one since, which is a race this call may lose either way; so only
            // with one armed does the end of the call look at the clock again.
            let armed = self.fire_timers();
            batch = self.queue.take_tasks(|| self.signal());
            let idle = batch.is_empty() && (!LOCAL || self.local.is_empty());
            if idle && (!armed || !self.timers_due()) {
                return polls;
            }
        }
    }

    fn enter(&'static self) -> RunningGuard {
        assert!(
            self.running
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_ok(),
            "zcnet-executor: an executor is run by one thread at a time"
        );
        RunningGuard {
            exec: self,
            _record: running::enter(self),
        }
    }

    /// One turn of the loop: run the queued tasks, fire timers, and wait if there is nothing to
    /// do. Returns whether `block_on`'s future was woken. `owns` is the loop's record that
    /// this context owns the local tasks ([`owns_local`](Self::owns_local)): once it does, it
    /// always will (the owner is bound once and never changes), so it is not asked again.
    fn turn(&'static self, owns: &mut bool) -> bool {
        let (batch, mut main_woken) = self.queue.take_all();
        self.poll_batch(batch);
        if !*owns {
            *owns = self.owns_local();
        }
        let local = *owns;
        if local {
            let polls = self.poll_local();
            self.polls.add_single_writer(polls);
        }
        self.fire_timers();
        // The local queue fills only from this context, so an empty one stays empty while the
        // loop waits below.
        if main_woken || self.queue.has_work() || self.local_work(local) {
            self.poll_events_now_and_then();
            return main_woken;
        }
        self.busy_turns.store(0, Relaxed);
        // Idle: sleep until the next timer, unless an enqueue beats us to it.
        let deadline = {
            let mut timers = self.timers.lock();
            let next = timers.wheel.next_expiration();
            timers.sleeping_until = Some(next.unwrap_or(u64::MAX));
            next.map(|tick| Instant::from_nanos(tick.saturating_mul(self.tick_nanos)))
        };
        if self.queue.try_sleep() {
            self.waits.add_single_writer(1);
            self.platform.wait(deadline);
            self.queue.end_sleep();
        }
        self.timers.lock().sleeping_until = None;
        let (batch, woken) = self.queue.take_all();
        main_woken |= woken;
        self.poll_batch(batch);
        main_woken
    }

    /// Polls every task of `batch` and counts the polls. An empty batch (the usual one on an
    /// executor whose tasks wake each other on its own thread) costs no call.
    #[inline(always)]
    fn poll_batch(&self, batch: Batch) {
        if !batch.is_empty() {
            self.poll_tasks(batch);
        }
    }

    /// [`poll_batch`](Self::poll_batch) of a batch with tasks in it.
    #[inline(never)]
    fn poll_tasks(&self, batch: Batch) {
        let mut polls = 0;
        for task in batch {
            self.poll_task(task);
            polls += 1;
        }
        self.polls.add_single_writer(polls);
    }

    /// Polls a task taken from the run queue. The caller counts the poll in `polls`.
    #[inline(always)]
    fn poll_task(&self, task: TaskRef) {
        match task.start_poll() {
            Start::Poll { local: false } => {}
            Start::Poll { local: true } => self.check_local_owner(),
            Start::Completed => {
                // SAFETY: we took it from the run queue and it completed meanwhile (a local
                // task polled from the local queue); not used again.
                unsafe { task.release_hold() };
                return;
            }
        }
        // Wakers of this task used on this thread during the poll leave word in its header
        // instead of locked instructions: `scope` names the task in `sync::polling` from
        // before the poll to the end of the poll (see `TaskRef::poll`).
        // SAFETY: we took the task from the run queue: we hold it (QUEUED) until the end of
        // the poll.
        let (poll, scope) = unsafe { task.poll() };
        match poll {
            // SAFETY: we hold the task and its poll returned `Ready`; not used again.
            Poll::Ready(()) => unsafe { task.complete(scope) },
            Poll::Pending => {
                // SAFETY: we hold the task and its poll returned `Pending`; on `false` we let
                // go of it and do not use it again.
                if unsafe { task.end_poll_pending(scope) } {
                    // Woken during the poll: back in the queue, still held.
                    self.requeue(task);
                }
            }
        }
    }

    /// Moves due timers to the pending list and wakes them, in batches, outside the lock.
    /// Returns whether a timer was armed (`next_due` set) when it looked.
    fn fire_timers(&self) -> bool {
        let due = self.next_due.load(Acquire);
        if due == u64::MAX {
            // No timer armed: no clock read, no lock, no wheel walk.
            return false;
        }
        let now = self.now().as_nanos();
        if now >= due {
            self.fire_timers_at(now);
        }
        // Else nothing can be due yet: no lock, no wheel walk (most turns).
        true
    }

    /// [`fire_timers`](Self::fire_timers) once the clock (`now`, in nanoseconds) has reached
    /// `next_due`. Out of line: the loop's hot path stays small (its wake batch alone is half a
    /// kilobyte of stack).
    #[inline(never)]
    fn fire_timers_at(&self, now: u64) {
        let mut timers = self.timers.lock();
        timers.wheel.advance(now / self.tick_nanos);
        // Nothing due: return before building (and dropping) a batch.
        let Some(first) = timers.wheel.take_pending() else {
            self.reset_next_due(&timers);
            return;
        };
        let mut first = Some(first);
        loop {
            let mut batch: [Option<core::task::Waker>; WAKE_BATCH] = [const { None }; WAKE_BATCH];
            let mut n = 0;
            let mut fired = 0;
            while n < WAKE_BATCH {
                let next = match first.take() {
                    Some(w) => Some(w),
                    None => timers.wheel.take_pending(),
                };
                match next {
                    Some(w) => {
                        fired += 1;
                        if w.is_some() {
                            batch[n] = w;
                            n += 1;
                        }
                    }
                    None => break,
                }
            }
            self.reset_next_due(&timers);
            drop(timers);
            self.timers_fired.add_single_writer(fired);
            for w in batch.iter_mut().take(n) {
                if let Some(w) = w.take() {
                    w.wake();
                }
            }
            if n < WAKE_BATCH {
                return;
            }
            timers = self.timers.lock();
        }
    }

    /// Fairness for the platform's own events: a task that keeps waking itself (a stack's
    /// ingress at its batch budget, say) keeps the loop from ever waiting, and on Linux waiting is
    /// when epoll readiness is delivered. So every [`EVENT_INTERVAL`] turns in a row that found
    /// work, the loop asks the platform for a wait with a deadline already past: a non-blocking
    /// look (`epoll_wait` with timeout 0) that delivers whatever events are ready.
    fn poll_events_now_and_then(&self) {
        let n = self.busy_turns.load(Relaxed) + 1;
        if n < EVENT_INTERVAL {
            // Single writer (the loop's thread): a plain store, no locked instruction.
            self.busy_turns.store(n, Relaxed);
            return;
        }
        self.busy_turns.store(0, Relaxed);
        self.platform.wait(Some(Instant::ZERO));
    }

    /// After collecting due timers: the wheel's next expiration becomes the lower bound.
    fn reset_next_due(&self, timers: &Timers) {
        let next = timers
            .wheel
            .next_expiration()
            .map_or(u64::MAX, |tick| tick.saturating_mul(self.tick_nanos));
        self.next_due.store(next, Release);
    }

    /// An entry was just inserted; `timers` is the held lock (which makes this thread the only
    /// writer of `next_due`). The bound becomes the wheel's next expiration, which may lie before
    /// the entry's deadline (an earlier entry, or a lower bound left by a cancelled one), and the
    /// idle path waits for exactly that tick, so `fire_timers` must not skip it.
    pub(crate) fn note_insert(&self, timers: &Timers) {
        self.reset_next_due(timers);
    }

    /// The clock in nanoseconds if a timer may be due now (the clock has reached `next_due`),
    /// else `None`. Reads the clock only when a timer is armed; takes no lock.
    fn clock_if_timer_due(&self) -> Option<u64> {
        let due = self.next_due.load(Acquire);
        if due == u64::MAX {
            return None;
        }
        // `now < tick × tick_nanos` exactly when `now / tick_nanos < tick`.
        let now = self.now().as_nanos();
        (now >= due).then_some(now)
    }

    /// Whether a timer may be due (see [`clock_if_timer_due`](Self::clock_if_timer_due)): a
    /// lower bound can make this `true` once more than needed, after a cancellation, until
    /// `fire_timers` has looked at the wheel.
    fn timers_due(&self) -> bool {
        self.clock_if_timer_due().is_some()
    }

    /// The tick at or after `deadline` (deadlines round up, so a timer never fires early).
    pub(crate) fn deadline_tick(&self, deadline: Instant) -> u64 {
        deadline.as_nanos().div_ceil(self.tick_nanos)
    }

    /// [`enqueue`](Self::enqueue) for a task woken during its poll: out of line, so the common
    /// end of a poll stays short.
    #[cold]
    #[inline(never)]
    fn requeue(&self, task: TaskRef) {
        self.enqueue(task);
    }

    /// Puts a task on the run queue and signals the platform if the executor sleeps.
    pub(crate) fn enqueue(&self, task: TaskRef) {
        self.notify(self.queue.push(task));
    }

    fn notify(&self, n: Notify) {
        if n == Notify::Signal {
            self.signal();
        }
    }

    pub(crate) fn signal(&self) {
        self.signals.add(1);
        self.platform.signal();
    }

    /// The executor that serves the timers of a future polled with `cx` (the free functions of
    /// [`time`](crate::time)): the executor of `cx`'s waker if it is one of ours (a task's, or
    /// `block_on`'s); else, with `std`, the executor whose loop this thread is running (a waker
    /// wrapped by a `FuturesUnordered` or a `select` inside one of its tasks); else the
    /// process's default executor (see [`running`]: a kernel's one executor; the executor a
    /// foreign executor's thread gets). `None` when no executor has run a loop yet, with
    /// `cx`'s waker registered to be woken when the first one starts.
    pub(crate) fn for_timers(cx: &Context<'_>) -> Option<&'static Executor> {
        Self::from_waker(cx.waker()).or_else(|| running::get_or_wait(cx.waker()))
    }

    /// The executor a waker belongs to, if it is a task waker or a `block_on` waker of ours.
    pub(crate) fn from_waker(waker: &Waker) -> Option<&'static Executor> {
        if let Some(task) = header_from_waker(waker) {
            return Some(task.core());
        }
        if core::ptr::eq(waker.vtable(), &MAIN_VTABLE) {
            // SAFETY: main wakers are made only from a `&'static Executor`.
            return Some(unsafe { &*waker.data().cast::<Executor>() });
        }
        None
    }
}

/// Spawns tasks onto an executor. `Copy`; get one from [`Executor::spawner`] or, inside a task,
/// [`Spawner::current`].
#[derive(Clone, Copy, Debug)]
pub struct Spawner {
    exec: &'static Executor,
}

impl Spawner {
    /// The spawner of the executor running the task whose context this is (`None` outside a
    /// zcnet executor).
    pub fn current(cx: &Context<'_>) -> Option<Spawner> {
        Executor::from_waker(cx.waker()).map(|exec| Spawner { exec })
    }

    /// The executor this spawner spawns onto.
    pub fn executor(&self) -> &'static Executor {
        self.exec
    }

    /// Spawns `future` into a `static` slot; errors if the slot is in use or too small.
    pub fn spawn_in<F, const SIZE: usize>(
        &self,
        storage: &'static TaskStorage<SIZE>,
        future: F,
    ) -> Result<JoinHandle<F::Output>, SpawnError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.exec.spawn_static(storage, future, false)
    }

    /// Spawns `future` into a `static` slot with no join handle (its output is dropped when it
    /// completes); errors as [`spawn_in`](Self::spawn_in). The same as `spawn_in` followed by
    /// dropping the handle, one locked instruction cheaper.
    pub fn spawn_detached_in<F, const SIZE: usize>(
        &self,
        storage: &'static TaskStorage<SIZE>,
        future: F,
    ) -> Result<(), SpawnError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.exec.spawn_static_detached(storage, future, false)
    }

    /// Spawns `future` in a heap allocation.
    #[cfg(feature = "alloc")]
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.exec.spawn_boxed(future, false)
    }

    /// Spawns `future` in a heap allocation with no join handle (its output is dropped when it
    /// completes). The same as [`spawn`](Self::spawn) followed by dropping the handle, one
    /// locked instruction cheaper.
    #[cfg(feature = "alloc")]
    pub fn spawn_detached<F>(&self, future: F)
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.exec.spawn_boxed_detached(future, false);
    }
}

/// Spawns tasks whose futures need not be `Send` onto an executor, whose loop must then run
/// in the context that took the spawner (see `Executor::local_spawner`, with `std`). `Copy`, but neither
/// `Send` nor `Sync`: it stays in that context. A local task's future is polled and dropped
/// only by that loop; its wakers may be woken from anywhere.
#[derive(Clone, Copy, Debug)]
pub struct LocalSpawner {
    exec: &'static Executor,
    _not_send: core::marker::PhantomData<*const ()>,
}

impl LocalSpawner {
    /// The executor this spawner spawns onto.
    pub fn executor(&self) -> &'static Executor {
        self.exec
    }

    /// A [`Spawner`] for the same executor, for `Send` tasks and other threads.
    pub fn spawner(&self) -> Spawner {
        Spawner { exec: self.exec }
    }

    /// Wakes `waker` like `waker.wake_by_ref()`, but without a locked instruction when it is
    /// the waker of a local task of this executor: the task goes on the executor's local run
    /// queue, which only this context touches. Any other waker is woken as usual.
    ///
    /// For code that already lives in the executor's context (a zcnet stack waking its own
    /// tasks): a `LocalSpawner` exists only there, and an interrupt handler never has one.
    #[inline]
    pub fn wake(&self, waker: &Waker) {
        if let Some(task) = header_from_waker(waker) {
            if task.header().local && core::ptr::eq(task.core(), self.exec) {
                self.exec.local.push(task);
                return;
            }
        }
        waker.wake_by_ref();
    }

    /// Spawns `future` into a `static` slot; errors if the slot is in use or too small.
    pub fn spawn_in<F, const SIZE: usize>(
        &self,
        storage: &'static TaskStorage<SIZE>,
        future: F,
    ) -> Result<JoinHandle<F::Output>, SpawnError>
    where
        F: Future + 'static,
    {
        self.exec.spawn_static(storage, future, true)
    }

    /// Spawns `future` into a `static` slot with no join handle (its output is dropped when it
    /// completes); errors as [`spawn_in`](Self::spawn_in). The same as `spawn_in` followed by
    /// dropping the handle, one locked instruction cheaper.
    pub fn spawn_detached_in<F, const SIZE: usize>(
        &self,
        storage: &'static TaskStorage<SIZE>,
        future: F,
    ) -> Result<(), SpawnError>
    where
        F: Future + 'static,
    {
        self.exec.spawn_static_detached(storage, future, true)
    }

    /// Spawns `future` in a heap allocation.
    #[cfg(feature = "alloc")]
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
    {
        self.exec.spawn_boxed(future, true)
    }

    /// Spawns `future` in a heap allocation with no join handle (its output is dropped when it
    /// completes). The same as [`spawn`](Self::spawn) followed by dropping the handle, one
    /// locked instruction cheaper.
    #[cfg(feature = "alloc")]
    pub fn spawn_detached<F>(&self, future: F)
    where
        F: Future + 'static,
    {
        self.exec.spawn_boxed_detached(future, true);
    }
}

/// Thread ids for the local-task owner check: unique for the life of the process (never
/// reused, unlike thread-local addresses), never 0.
#[cfg(feature = "std")]
mod thread_id {
    use core::cell::Cell;
    use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

    static NEXT: AtomicU64 = AtomicU64::new(1);

    std::thread_local! {
        static ID: Cell<u64> = const { Cell::new(0) };
    }

    /// The calling thread's id (assigned on first use).
    pub(super) fn current() -> u64 {
        ID.with(|id| {
            let v = id.get();
            if v != 0 {
                return v;
            }
            let v = NEXT.fetch_add(1, Relaxed);
            id.set(v);
            v
        })
    }
}
