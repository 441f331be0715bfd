//! The task header, its state word, and the transitions on it (see the module docs of `task`).

use core::cell::{Cell, UnsafeCell};
use core::future::Future;
use core::mem::ManuallyDrop;
use core::pin::Pin;
use core::ptr::NonNull;
use core::task::{Context, Poll, Waker};

use crate::executor::Core;
use crate::sync::{polling, AtomicPtr, AtomicUsize, Ordering::*};

pub(crate) const QUEUED: usize = 1 << 0;
pub(crate) const NOTIFIED: usize = 1 << 1;
pub(crate) const COMPLETE: usize = 1 << 2;
pub(crate) const JOIN_INTEREST: usize = 1 << 3;
pub(crate) const JOIN_WAKER: usize = 1 << 4;
/// The executor's local reference to a task spawned by a [`LocalSpawner`](crate::LocalSpawner)
/// (whose future need not be `Send`) is held. It is taken at spawn and let go once the task
/// has completed and is not in the local run queue, so until then the task is never freed,
/// and its future never dropped, by a waker or join handle let go on another thread; only the
/// executor's loop, in the context that owns the executor's local tasks, polls or drops the
/// future. The local reference is also what keeps a task alive while it sits in the local
/// run queue, which holds no QUEUED bit.
pub(crate) const LOCAL: usize = 1 << 5;
const REF_SHIFT: u32 = 6;
pub(crate) const REF_ONE: usize = 1 << REF_SHIFT;

/// The executor's spare reference: counted in the reference bits while the task is QUEUED
/// and not COMPLETE (the executor holds it). A waker cloned during a poll on the polling thread
/// takes it over without a locked instruction ([`SPARE_TAKEN`]); the executor's next
/// locked instruction on the state word (the end of the poll, or its completion) then either
/// lets go of the spare or, if a clone took it, leaves the count as it is.
const SPARE: usize = REF_ONE;

/// `Header::poll_flags`: during a poll from the run queue, the executor's spare reference (see
/// [`SPARE`]) went to a waker clone made on the polling thread.
pub(crate) const SPARE_TAKEN: u8 = 1 << 0;
/// `Header::poll_flags`: during a poll from the run queue, a wake on the polling thread asked
/// for another poll.
pub(crate) const WOKEN_IN_POLL: u8 = 1 << 1;

/// The executor holds the task: QUEUED, or (for an instant at the end of a poll, see
/// [`TaskRef::end_poll_pending`]) NOTIFIED alone.
const HELD: usize = QUEUED | NOTIFIED;

/// Whether a state word says the task is unreachable: no reference left and the executor not
/// holding it. Whoever makes this true frees the task.
fn unreachable(state: usize) -> bool {
    state < REF_ONE && state & HELD == 0
}

/// What a task is doing: its future, then its output, then nothing.
pub(crate) enum Stage<F: Future> {
    Running(F),
    Finished(F::Output),
    Consumed,
}

/// Type-erased operations on a task, one table per future type and storage kind.
pub(crate) struct TaskVTable {
    /// Polls the future (stage must be `Running`) with the task's own waker; on `Ready` stores
    /// the output. See [`poll_stage`]. Copied into [`Header::poll`] at spawn.
    pub(crate) poll: unsafe fn(NonNull<Header>) -> Poll<()>,
    /// Moves the output into `*(dst as *mut Option<F::Output>)`.
    pub(crate) read_output: unsafe fn(NonNull<Header>, *mut ()),
    /// Drops the output a finished stage holds and marks the stage consumed; `None` when the
    /// output type has no destructor, so there is nothing to do (see [`drop_output_of`]).
    pub(crate) drop_output: Option<unsafe fn(NonNull<Header>)>,
    /// Frees the task's memory (box) or returns its static slot.
    pub(crate) dealloc: unsafe fn(NonNull<Header>),
}

/// The part of every task the executor, wakers and join handles share.
///
/// `#[repr(C)]` and at least 8-byte aligned: the run queue keeps flags in the low bits of
/// header pointers.
#[repr(C, align(8))]
pub(crate) struct Header {
    /// See the `task` module docs.
    pub(crate) state: AtomicUsize,
    /// Run-queue link. Written by the thread pushing the task, before the releasing
    /// compare-exchange that publishes it; read by the executor after taking the queue.
    pub(crate) next: AtomicPtr<Header>,
    /// The vtable's `poll`, kept here so that the executor reaches it with one load.
    pub(crate) poll: unsafe fn(NonNull<Header>) -> Poll<()>,
    /// The executor that runs this task.
    pub(crate) core: &'static Core,
    pub(crate) vtable: &'static TaskVTable,
    /// The join handle's waker; ownership per the JOIN_WAKER rule.
    pub(crate) join_waker: UnsafeCell<Option<Waker>>,
    /// The stage (`Stage<F>`), in the same allocation or static slot as the header.
    pub(crate) stage: *mut (),
    /// Spawned by a `LocalSpawner` (never changes).
    pub(crate) local: bool,
    /// In the executor's local run queue (see `LocalQueue`). Read and written only in the
    /// context that owns the executor's local tasks.
    pub(crate) local_queued: Cell<bool>,
    /// The local run queue's link; same rule as `local_queued`.
    pub(crate) local_next: Cell<*mut Header>,
    /// During a poll from the run queue: [`SPARE_TAKEN`] and [`WOKEN_IN_POLL`], in one cell so
    /// that the end of a poll that had neither tests one byte. Read and written only by the
    /// thread that polls the task, while [`polling`] names it there (and zero outside a poll).
    pub(crate) poll_flags: Cell<u8>,
    /// The task's waker as the executor lends it to each poll from either run queue, made once
    /// at spawn (a `Waker` pointing to this header): a poll builds only its `Context`. Never
    /// dropped; clones count their own references.
    pub(crate) waker: ManuallyDrop<Waker>,
}

impl Header {
    /// A task header, queued (the spawner pushes it), with one reference, the join handle's,
    /// if `join`; without a join handle (a detached task) it holds none, which is the state a
    /// join handle dropped at once leaves (JOIN_INTEREST clear, its reference gone), reached
    /// without the join handle's compare-exchange. A `local` task also holds the executor's
    /// local reference (see [`LOCAL`]), released when it completes.
    ///
    /// # Safety
    ///
    /// `at` is where the header is written and stays for the task's life (its waker points
    /// there).
    pub(crate) unsafe fn new(
        vtable: &'static TaskVTable,
        core: &'static Core,
        stage: *mut (),
        local: bool,
        join: bool,
        at: *const Header,
    ) -> Self {
        // The executor's spare (QUEUED), the join handle's reference, the local one.
        let mut state = QUEUED | SPARE;
        if join {
            state |= JOIN_INTEREST;
            state += REF_ONE;
        }
        if local {
            state |= LOCAL;
            state += REF_ONE;
        }
        Self {
            state: AtomicUsize::new(state),
            next: AtomicPtr::new(core::ptr::null_mut()),
            poll: vtable.poll,
            core,
            vtable,
            join_waker: UnsafeCell::new(None),
            stage,
            local,
            local_queued: Cell::new(false),
            local_next: Cell::new(core::ptr::null_mut()),
            poll_flags: Cell::new(0),
            // SAFETY: `at` is the header's lasting address (the caller's promise).
            waker: ManuallyDrop::new(unsafe { super::waker::waker_of(at) }),
        }
    }
}

/// What the executor does with a task it took from the run queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Poll it (a local task's poll checks the owning context first).
    Poll {
        /// Spawned by a `LocalSpawner`.
        local: bool,
    },
    /// A local task that completed while queued: let go of it, do not poll.
    Completed,
}

/// A counted or borrowed pointer to a task header; all state transitions live here.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct TaskRef(pub(crate) NonNull<Header>);

// SAFETY: a TaskRef is only a pointer; every access through it follows the state-word protocol,
// which is thread-safe, and tasks' futures are required to be `Send` when spawned from `Spawner`.
unsafe impl Send for TaskRef {}

impl TaskRef {
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: a TaskRef exists only while someone holds a reference to the task (a waker, a
        // join handle, the run queue, or the executor's poll), so the header is alive.
        unsafe { self.0.as_ref() }
    }

    pub(crate) fn core(&self) -> &'static Core {
        self.header().core
    }

    /// Whether the calling thread polls this task from the run queue right now (see
    /// [`polling`]): it holds the task (QUEUED) and ends the poll after whatever it does now, so
    /// the header's poll-thread cells may stand in for locked instructions on the state word.
    #[inline]
    fn polled_here(&self) -> bool {
        core::ptr::eq(polling::current(), self.0.as_ptr().cast::<()>())
    }

    /// Adds a reference (a waker clone). The first clone made on the thread polling the task
    /// during a poll takes the executor's spare reference ([`SPARE`]): no locked instruction.
    /// Otherwise one locked addition.
    pub(crate) fn ref_inc(&self) {
        if self.polled_here() {
            let flags = &self.header().poll_flags;
            if flags.get() & SPARE_TAKEN == 0 {
                flags.set(flags.get() | SPARE_TAKEN);
                return;
            }
        }
        let prev = self.header().state.fetch_add(REF_ONE, Relaxed);
        // A reference count this large means wakers are being leaked in a loop; stop before
        // the count wraps into the flag bits.
        assert!(
            prev < usize::MAX / 2,
            "zcnet-executor: task reference count overflow"
        );
    }

    /// Frees the task's memory (and whatever its stage still holds).
    ///
    /// # Safety
    ///
    /// The caller made the state [`unreachable()`]: nobody else can reach the task.
    unsafe fn dealloc(self) {
        // SAFETY: per the precondition.
        unsafe { (self.header().vtable.dealloc)(self.0) };
    }

    /// Drops a reference (a waker or the join handle); frees the task if that made it
    /// unreachable. One locked instruction, none on the thread polling the task while a clone
    /// holds the executor's spare: the reference dropped becomes the spare again (references
    /// are interchangeable; the count stays right).
    ///
    /// # Safety
    ///
    /// The caller owns one reference and does not use `self` afterwards.
    pub(crate) unsafe fn ref_dec(self) {
        if self.polled_here() {
            let flags = &self.header().poll_flags;
            if flags.get() & SPARE_TAKEN != 0 {
                flags.set(flags.get() & !SPARE_TAKEN);
                return;
            }
        }
        let prev = self.header().state.fetch_sub(REF_ONE, AcqRel);
        debug_assert!(prev >= REF_ONE, "task reference count underflow");
        if unreachable(prev - REF_ONE) {
            // SAFETY: no reference is left and the executor does not hold the task (neither
            // QUEUED nor NOTIFIED is set, and only a wake, which needs a reference, sets them).
            unsafe { self.dealloc() };
        }
    }

    /// Schedules the task unless it is complete; a task the executor holds (QUEUED) is marked
    /// NOTIFIED instead of being queued again. Runs on any thread or in an interrupt handler.
    ///
    /// On the thread polling the task (a task waking itself, or a future inside its poll
    /// waking it): no locked instruction. That thread ends the poll after this wake, so it
    /// sets [`WOKEN_IN_POLL`] in the header's `poll_flags` and the end of the poll queues the
    /// task again (program order carries the caller's writes to the next poll).
    ///
    /// Anywhere else: no locked instruction when the task is complete, else one
    /// compare-exchange, plus a lock-free push when it enqueues. A task already QUEUED or
    /// NOTIFIED still gets the compare-exchange (writing NOTIFIED, or the state unchanged):
    /// that read-modify-write is what orders the caller's writes before the executor's
    /// `start_poll`, which clears NOTIFIED, so the due poll sees them. A plain load cannot:
    /// this thread's store may still sit in its store buffer while the executor clears the
    /// flag and polls, and the poll would read the older value and leave the task waiting with
    /// nobody to wake it (the loom models `wake_of_a_notified_task_publishes_the_write_before_it`
    /// and `wake_of_a_queued_task_publishes_the_write_before_it`).
    pub(crate) fn wake_by_ref(self) {
        if self.polled_here() {
            let flags = &self.header().poll_flags;
            flags.set(flags.get() | WOKEN_IN_POLL);
            return;
        }
        let state = &self.header().state;
        let mut cur = state.load(Acquire);
        loop {
            if cur & COMPLETE != 0 {
                return;
            }
            // Held by the executor (QUEUED, or NOTIFIED alone at the end of a poll): a poll is
            // due after this wake, so mark it; else queue it, with the executor's spare.
            let held = cur & HELD != 0;
            let next = if held {
                cur | NOTIFIED
            } else {
                (cur | QUEUED) + SPARE
            };
            match state.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) => {
                    if !held {
                        self.core().enqueue(self);
                    }
                    return;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// The common wake, tried by the waker before anything else: a task that is idle (neither
    /// QUEUED, NOTIFIED nor COMPLETE) and not local (no [`LOCAL`]: a local task holds it until
    /// it completes) is queued with one compare-exchange and a push. Such a task is being
    /// polled nowhere (a poll holds QUEUED), so the polling thread's cells and the local run
    /// queue do not apply to it. `by_value`: the caller's reference becomes the executor's
    /// spare (a waker woken by value); otherwise the spare is added. Returns `false`, having
    /// changed nothing, for any other task, or when the exchange lost a race: the caller then
    /// takes the full path ([`wake_by_ref`](Self::wake_by_ref),
    /// [`wake_and_release`](Self::wake_and_release)), whose exchange orders the caller's
    /// writes the same way.
    #[inline(always)]
    pub(crate) fn wake_if_idle(self, by_value: bool) -> bool {
        let state = &self.header().state;
        let cur = state.load(Acquire);
        if cur & (COMPLETE | HELD | LOCAL) != 0 {
            return false;
        }
        let next = if by_value {
            cur | QUEUED
        } else {
            (cur | QUEUED) + SPARE
        };
        if state.compare_exchange(cur, next, AcqRel, Acquire).is_err() {
            return false;
        }
        self.core().enqueue(self);
        true
    }

    /// [`wake_by_ref`](Self::wake_by_ref) and [`ref_dec`](Self::ref_dec) in one
    /// compare-exchange (a waker woken by value); when it enqueues, the caller's reference
    /// becomes the executor's spare. On the thread polling the task, both without a locked
    /// instruction when a clone holds the spare (see `wake_by_ref` and `ref_dec`).
    ///
    /// # Safety
    ///
    /// The caller owns one reference and does not use `self` afterwards.
    pub(crate) unsafe fn wake_and_release(self) {
        if self.polled_here() {
            let flags = &self.header().poll_flags;
            flags.set(flags.get() | WOKEN_IN_POLL);
            // SAFETY: the caller's reference, not used afterwards; the executor holds the task.
            unsafe { self.ref_dec() };
            return;
        }
        let state = &self.header().state;
        let mut cur = state.load(Acquire);
        loop {
            debug_assert!(cur >= REF_ONE, "task reference count underflow");
            let enqueue = cur & (HELD | COMPLETE) == 0;
            let next = if cur & (COMPLETE | NOTIFIED) != 0 {
                cur - REF_ONE
            } else if cur & QUEUED != 0 {
                (cur | NOTIFIED) - REF_ONE
            } else {
                cur | QUEUED
            };
            match state.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) => {
                    if enqueue {
                        // QUEUED (and the spare) keep the task alive for the executor.
                        self.core().enqueue(self);
                    } else if unreachable(next) {
                        // SAFETY: complete, not held and that was the last reference.
                        unsafe { self.dealloc() };
                    }
                    return;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// The executor starts a poll of a task it took from the run queue (QUEUED, which it keeps
    /// through the poll). A wake that arrived while the task was queued is covered by this
    /// poll: its NOTIFIED is cleared. Usually no locked instruction at all (a load). Returns
    /// what the executor must do with it.
    ///
    /// A local task may have completed in a poll from the local run queue while it sat in
    /// this queue ([`Start::Completed`]): the executor then lets go of it
    /// ([`release_hold`](Self::release_hold)) without polling.
    ///
    /// The common case is one load and one test: a task that is not local, not complete and
    /// not notified. (A local task holds [`LOCAL`] until it completes, so it always takes the
    /// other path, which tells the executor to check the owning context.)
    #[inline]
    pub(crate) fn start_poll(self) -> Start {
        let cur = self.header().state.load(Acquire);
        debug_assert!(
            cur & QUEUED != 0,
            "zcnet-executor: polled a task that is not queued"
        );
        if cur & (COMPLETE | NOTIFIED | LOCAL) == 0 {
            return Start::Poll { local: false };
        }
        self.start_poll_flagged(cur)
    }

    /// [`start_poll`](Self::start_poll) for a task whose state `cur` has COMPLETE, NOTIFIED or
    /// LOCAL set.
    #[inline(never)]
    fn start_poll_flagged(self, cur: usize) -> Start {
        let state = &self.header().state;
        if cur & COMPLETE != 0 {
            debug_assert!(
                self.header().local,
                "only a local task completes while queued"
            );
            return Start::Completed;
        }
        if cur & NOTIFIED != 0 {
            state.fetch_and(!NOTIFIED, AcqRel);
        }
        Start::Poll {
            local: self.header().local,
        }
    }

    /// The executor lets go of a task it took from the run queue that had completed meanwhile
    /// (see [`start_poll`](Self::start_poll)), freeing it if nothing else refers to it.
    ///
    /// # Safety
    ///
    /// Only the executor, for a task `start_poll` found completed; it must not use `self`
    /// afterwards.
    pub(crate) unsafe fn release_hold(self) {
        let prev = self.header().state.fetch_and(!HELD, AcqRel);
        if unreachable(prev & !HELD) {
            // SAFETY: no reference left, and we just let go of the task.
            unsafe { self.dealloc() };
        }
    }

    /// Lets go of the executor's local reference (see [`LOCAL`]), freeing the task if that
    /// made it unreachable.
    ///
    /// # Safety
    ///
    /// Only the executor, in the context that owns its local tasks, for a complete local task
    /// that holds its local reference and is not in the local run queue; it must not use
    /// `self` afterwards.
    pub(crate) unsafe fn release_local_ref(self) {
        let prev = self.header().state.fetch_sub(REF_ONE | LOCAL, AcqRel);
        debug_assert!(
            prev & LOCAL != 0 && prev & COMPLETE != 0,
            "zcnet-executor: local reference released twice, or early"
        );
        if unreachable(prev - (REF_ONE | LOCAL)) {
            // SAFETY: that was the last reference and the executor does not hold the task.
            unsafe { self.dealloc() };
        }
    }

    /// A poll from the local run queue returned `Ready` (output stored): sets COMPLETE,
    /// delivers the output to the join handle or drops it, wakes the join handle's waker, and
    /// lets go of the local reference unless the task is back in the local run queue (a wake
    /// during its last poll; that queue lets go of it then). QUEUED and NOTIFIED stay as they
    /// are: if a foreign wake put the task in the run queue meanwhile, the executor lets go of
    /// it when it takes it from there.
    ///
    /// # Safety
    ///
    /// Only the executor, in the context that owns its local tasks, right after a poll from
    /// the local run queue that returned `Ready`; it must not use `self` afterwards.
    #[inline(never)]
    pub(crate) unsafe fn complete_local(self) {
        // SAFETY: the executor polled the task in the owning context and is the only one
        // touching the stage (local polls happen nowhere else).
        // In the run queue too (QUEUED, not being polled: local tasks are polled only in this
        // context), the task's spare goes: only a task that is not complete has one.
        let cur = unsafe {
            self.mark_complete(|cur| {
                if cur & QUEUED != 0 {
                    (cur | COMPLETE) - SPARE
                } else {
                    cur | COMPLETE
                }
            })
        };
        if cur & JOIN_WAKER != 0 {
            // SAFETY: JOIN_WAKER was set when we set COMPLETE, so the join handle no longer
            // writes the waker; the local reference keeps the task alive while we read it.
            if let Some(w) = unsafe { &*self.header().join_waker.get() } {
                w.wake_by_ref();
            }
        }
        if !self.header().local_queued.get() {
            // SAFETY: complete, the local reference is held (only this executor lets go of
            // it, here or when the local queue takes the task), and not locally queued.
            unsafe { self.release_local_ref() };
        }
    }

    /// The poll returned `Pending`. If a wake arrived during it (NOTIFIED), the executor keeps
    /// the task and must queue it again: returns `true`. Otherwise QUEUED is cleared, so the
    /// next wake queues it, and the task is freed if nothing can reach it any more: returns
    /// `false`.
    ///
    /// A wake on the polling thread during the poll ([`WOKEN_IN_POLL`]) keeps the task held as
    /// it is: no locked instruction (one addition if a clone took the spare, to restore it).
    /// Otherwise one locked subtraction, with no load before it and no retry loop: it clears
    /// QUEUED whatever the state, and the spare with it unless a clone took it; only if
    /// NOTIFIED was set (a wake from another thread during the poll) a second instruction
    /// turns the NOTIFIED-alone state it left into QUEUED again, spare included. In between the
    /// task is still held: wakers see NOTIFIED and leave it alone, and nobody frees it.
    ///
    /// `scope` is the poll's record in [`polling`]: it ends right after that instruction,
    /// before anything that can run code of the task's (its drop, a requeue's signal to the
    /// platform); until then this thread runs none.
    ///
    /// # Safety
    ///
    /// Only the executor, right after a poll of a task it holds that returned `Pending`; on
    /// `false` it must not use `self` again.
    #[inline]
    pub(crate) unsafe fn end_poll_pending(self, scope: polling::Scope) -> bool {
        let flags = &self.header().poll_flags;
        match flags.get() {
            // SAFETY: forwarded from the caller; no clone took the spare.
            0 => unsafe { self.let_go_after_poll(SPARE, scope) },
            // A clone took the spare (a task that stashes its waker): inline too.
            SPARE_TAKEN => {
                flags.set(0);
                // SAFETY: forwarded from the caller.
                unsafe { self.let_go_after_poll(0, scope) }
            }
            woken => {
                drop(scope);
                self.end_poll_pending_woken(woken);
                true
            }
        }
    }

    /// [`end_poll_pending`](Self::end_poll_pending) when the poll left `flags` with
    /// [`WOKEN_IN_POLL`] in `poll_flags`: clears them and keeps the task held for its
    /// requeue, with a spare (one addition if a clone took the one it had).
    #[inline(never)]
    fn end_poll_pending_woken(self, flags: u8) {
        debug_assert!(flags & WOKEN_IN_POLL != 0, "unknown poll flags {flags:#x}");
        self.header().poll_flags.set(0);
        if flags & SPARE_TAKEN != 0 {
            self.header().state.fetch_add(SPARE, Relaxed);
        }
    }

    /// The locked end of a poll that returned `Pending` with no wake on the polling thread:
    /// clears QUEUED and lets go of `spare` (the spare, or 0 if a clone took it) in one
    /// subtraction, then ends `scope`; see [`end_poll_pending`](Self::end_poll_pending) for
    /// the result.
    ///
    /// # Safety
    ///
    /// As for `end_poll_pending`.
    #[inline(always)]
    unsafe fn let_go_after_poll(self, spare: usize, scope: polling::Scope) -> bool {
        let state = &self.header().state;
        let prev = state.fetch_sub(QUEUED + spare, AcqRel);
        drop(scope);
        debug_assert!(
            prev & QUEUED != 0,
            "zcnet-executor: ended a poll it did not hold"
        );
        if prev & NOTIFIED != 0 {
            // NOTIFIED alone → QUEUED alone, with a spare: still held, back to the run queue.
            state.fetch_add((SPARE + QUEUED) - NOTIFIED, AcqRel);
            return true;
        }
        // QUEUED and NOTIFIED are clear now, so the task is unreachable exactly when no
        // reference is left (`unreachable`, with its flag test already known).
        if prev - (QUEUED + spare) < REF_ONE {
            // SAFETY: no reference left, and we just let go of the task.
            unsafe { self.dealloc() };
        }
        false
    }

    /// Sets COMPLETE with one compare-exchange from the current state `cur` to `next(cur)`
    /// (which must set COMPLETE), first dropping the output if no join handle exists; returns
    /// the state the exchange replaced.
    ///
    /// # Safety
    ///
    /// The caller is the executor right after the task's last poll, the only one touching the
    /// stage.
    unsafe fn mark_complete(self, next: impl Fn(usize) -> usize) -> usize {
        let state = &self.header().state;
        let mut cur = state.load(Acquire);
        let mut output_dropped = false;
        loop {
            if cur & JOIN_INTEREST == 0 && !output_dropped {
                // SAFETY: no join handle exists (JOIN_INTEREST is never set again), and the
                // caller is the only one touching the stage.
                unsafe { self.drop_output() };
                output_dropped = true;
            }
            match state.compare_exchange_weak(cur, next(cur), AcqRel, Acquire) {
                Ok(_) => return cur,
                Err(actual) => cur = actual,
            }
        }
    }

    /// The poll returned `Ready` (output stored): sets COMPLETE, delivers the output to the join
    /// handle or drops it, wakes the join handle's waker, and lets go of the task (freeing it
    /// when nothing else refers to it). A [`LOCAL`] task's own reference goes in the same
    /// exchange. One compare-exchange, two when a join waker is set, none when nothing but the
    /// executor refers to the task (a detached task whose wakers are all gone: it is freed at
    /// once, with no other thread to tell).
    ///
    /// The common cases (nothing else refers to the task; or no join waker, not local, and the
    /// output either left to a join handle or without a destructor) are one load and, for the
    /// second, that compare-exchange, inline; the rest, and a failed exchange, go out of line.
    ///
    /// # Safety
    ///
    /// Only the executor, right after a poll of a task it holds that returned `Ready`; it must
    /// not use `self` afterwards. `scope` is the poll's record in [`polling`], ended before
    /// anything that can run code of the task's (the output's drop, the join waker, the
    /// task's deallocation).
    #[inline]
    pub(crate) unsafe fn complete(self, scope: polling::Scope) {
        // The spare goes now, unless a waker clone made during this poll took it over.
        let h = self.header();
        let spare = if h.poll_flags.replace(0) & SPARE_TAKEN != 0 {
            0
        } else {
            SPARE
        };
        let cur = h.state.load(Acquire);
        if cur == QUEUED + spare {
            // Nothing but the executor's hold and its spare: no waker, no join handle, no
            // local reference, no wake pending. Nobody else can reach the task (every way to
            // it takes a reference, and only a reference makes another), so no locked
            // instruction is needed to let go of it: it is freed at once, its output with it.
            // The load (Acquire) saw the last reference let go of, with what its holder did.
            drop(scope);
            // SAFETY: nothing else refers to the task (above), and we hold it.
            unsafe { self.dealloc() };
            return;
        }
        if cur & (JOIN_WAKER | LOCAL) == 0
            && (cur & JOIN_INTEREST != 0 || h.vtable.drop_output.is_none())
        {
            // Nothing to drop (a join handle takes the output, or it has no destructor), no
            // join waker to wake, no local reference: let go of the task as `complete_with`
            // would.
            let next = ((cur | COMPLETE) & !HELD) - spare;
            if h.state.compare_exchange(cur, next, AcqRel, Acquire).is_ok() {
                drop(scope);
                // HELD is clear in `next`: unreachable exactly when no reference is left.
                if next < REF_ONE {
                    // SAFETY: no reference left, and we just let go of the task.
                    unsafe { self.dealloc() };
                }
                return;
            }
        }
        drop(scope);
        // SAFETY: forwarded from the caller.
        unsafe { self.complete_with(spare) }
    }

    /// [`complete`](Self::complete) in full, with `spare` the reference count the executor's
    /// spare still holds (0 if a waker clone took it).
    ///
    /// # Safety
    ///
    /// As for `complete`.
    #[inline(never)]
    unsafe fn complete_with(self, spare: usize) {
        let next_of = |cur: usize| {
            // The output is stored: the future is gone, so a local task's reference, which kept
            // it from being dropped elsewhere, goes now, unless the task sits in the local run
            // queue, which lets go of it when it takes the task (this runs in the owning
            // context: local tasks are polled nowhere else).
            let local_ref = if cur & LOCAL != 0 && !self.header().local_queued.get() {
                REF_ONE | LOCAL
            } else {
                0
            };
            // With a join waker to wake, the executor keeps the task (QUEUED) until it has
            // woken it: the join handle may free the task as soon as it sees COMPLETE.
            if cur & JOIN_WAKER != 0 {
                (cur | COMPLETE) - local_ref - spare
            } else {
                ((cur | COMPLETE) & !HELD) - local_ref - spare
            }
        };
        // SAFETY: the executor holds the task and is the only one touching the stage.
        let cur = unsafe { self.mark_complete(next_of) };
        if cur & JOIN_WAKER == 0 {
            if unreachable(next_of(cur)) {
                // SAFETY: no reference left, and we just let go of the task.
                unsafe { self.dealloc() };
            }
            return;
        }
        // SAFETY: JOIN_WAKER was set when we set COMPLETE: the join handle no longer writes
        // the waker (it only writes while JOIN_WAKER is clear and the task not complete).
        let waker = unsafe { &*self.header().join_waker.get() };
        if let Some(w) = waker {
            w.wake_by_ref();
        }
        let prev = self.header().state.fetch_and(!HELD, AcqRel);
        if unreachable(prev & !HELD) {
            // SAFETY: no reference left, and we just let go of the task.
            unsafe { self.dealloc() };
        }
    }

    /// The join handle goes: clears JOIN_INTEREST and drops its reference in one
    /// compare-exchange, after dropping the output if the task completed first.
    ///
    /// # Safety
    ///
    /// Only the task's join handle, once; it must not use `self` afterwards.
    pub(crate) unsafe fn drop_join_handle(self) {
        let state = &self.header().state;
        let mut cur = state.load(Acquire);
        if cur & COMPLETE != 0 {
            // SAFETY: the executor saw JOIN_INTEREST when it completed the task and left the
            // output to us; after COMPLETE the join handle has exclusive use of the stage, and
            // our reference keeps the task alive until the exchange below.
            unsafe { self.drop_output() };
        }
        loop {
            let next = (cur & !JOIN_INTEREST) - REF_ONE;
            match state.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) => {
                    if unreachable(next) {
                        // SAFETY: that was the last reference and the executor does not hold
                        // the task.
                        unsafe { self.dealloc() };
                    }
                    return;
                }
                Err(actual) => {
                    if actual & !cur & COMPLETE != 0 {
                        // The task completed meanwhile (COMPLETE is set once, so this runs at
                        // most once).
                        // SAFETY: as above.
                        unsafe { self.drop_output() };
                    }
                    cur = actual;
                }
            }
        }
    }

    /// Drops the output a finished stage holds, if its type has a destructor.
    ///
    /// # Safety
    ///
    /// The caller has exclusive use of the stage, which holds the output (or was consumed).
    unsafe fn drop_output(self) {
        if let Some(drop_output) = self.header().vtable.drop_output {
            // SAFETY: per the preconditions.
            unsafe { drop_output(self.0) };
        }
    }

    /// Polls the future of a task taken from the run queue (see [`poll_stage`]); the returned
    /// scope names the task in [`polling`] on this thread, from before the poll until it is
    /// dropped (the end of the poll hands it to [`end_poll_pending`](Self::end_poll_pending)
    /// or [`complete`](Self::complete); an unwinding poll drops it on the way out).
    ///
    /// # Safety
    ///
    /// Only the executor, between `start_poll` and the end of the poll.
    #[inline(always)]
    pub(crate) unsafe fn poll(self) -> (Poll<()>, polling::Scope) {
        let scope = polling::Scope::enter(self.0.as_ptr().cast::<()>());
        // SAFETY: the caller holds the task (QUEUED, taken from the run queue, where a task is
        // at most once), which gives it exclusive use of the stage.
        let poll = unsafe { (self.header().poll)(self.0) };
        (poll, scope)
    }

    /// Polls the future of a task taken from the local run queue; [`polling`] is left as it is
    /// (the local queue holds no QUEUED bit, so the polling thread's shortcuts do not apply).
    ///
    /// # Safety
    ///
    /// Only the executor, in the context that owns its local tasks, for a local task that is
    /// not complete (see `Executor::poll_local`).
    #[inline(always)]
    pub(crate) unsafe fn poll_local(self) -> Poll<()> {
        // SAFETY: local tasks are polled only in the owning context, one poll at a time, which
        // gives the caller exclusive use of the stage.
        unsafe { (self.header().poll)(self.0) }
    }
}

/// Polls the `Stage<F>` at `stage` of the task whose header is `header` (what the vtable's
/// `poll` of each storage kind does, with the stage's address computed from the header's at a
/// fixed offset: no load of `Header::stage` on the way to the future).
///
/// The future gets a `Context` of the task's own waker (`Header::waker`). The `Context` is made
/// here, in the code generated for `F`, so that the compiler builds it only on the paths of
/// `F::poll` that use it (a poll that does not look at its waker builds none). The record in
/// [`polling`] of a poll from the run queue is the caller's ([`TaskRef::poll`]).
///
/// # Safety
///
/// `stage` points to the task's live `Stage<F>`, `header` is its header, and the caller is the
/// executor polling the task: holding it (QUEUED, taken from the run queue), or in the context
/// that owns the executor's local tasks.
#[inline(always)]
pub(crate) unsafe fn poll_stage<F: Future>(
    header: NonNull<Header>,
    stage: *mut Stage<F>,
) -> Poll<()> {
    // SAFETY: the header is alive while the executor polls the task (the caller's promise).
    let waker = unsafe { &header.as_ref().waker };
    let mut cx = Context::from_waker(waker);
    // SAFETY: per the preconditions, the stage is a live `Stage<F>` we may use exclusively; it
    // never moves (boxed or static), so pinning it is sound.
    unsafe {
        let stage = &mut *stage;
        let Stage::Running(fut) = stage else {
            // A scheduled task is never complete (wakes ignore COMPLETE tasks).
            unreachable!("zcnet-executor: polled a finished task");
        };
        match Pin::new_unchecked(fut).poll(&mut cx) {
            Poll::Ready(out) => {
                // Drops the future in place, then stores the output.
                *stage = Stage::Finished(out);
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Moves the output out of the `Stage<F>` behind `header` (the vtable's `read_output`).
///
/// # Safety
///
/// The task is COMPLETE, the caller is its join handle, and `dst` points to an
/// `Option<F::Output>`.
pub(crate) unsafe fn read_output<F: Future>(header: NonNull<Header>, dst: *mut ()) {
    // SAFETY: after COMPLETE only the join handle touches the stage (preconditions).
    unsafe {
        let stage = &mut *header.as_ref().stage.cast::<Stage<F>>();
        if let Stage::Finished(out) = core::mem::replace(stage, Stage::Consumed) {
            *dst.cast::<Option<F::Output>>() = Some(out);
        }
    }
}

/// The vtable's `drop_output` for futures `F`: `None` when `F::Output` has no destructor
/// (leaving such an output in the stage costs nothing: the stage's own drop, at deallocation,
/// does nothing with it either), else [`drop_stage::<F>`](drop_stage).
pub(crate) const fn drop_output_of<F: Future>() -> Option<unsafe fn(NonNull<Header>)> {
    if core::mem::needs_drop::<F::Output>() {
        Some(drop_stage::<F>)
    } else {
        None
    }
}

/// Drops what the `Stage<F>` behind `header` holds.
///
/// # Safety
///
/// The caller has exclusive use of the stage (see the `task` ground rules).
unsafe fn drop_stage<F: Future>(header: NonNull<Header>) {
    // SAFETY: exclusive use per the preconditions.
    unsafe {
        let stage = &mut *header.as_ref().stage.cast::<Stage<F>>();
        *stage = Stage::Consumed;
    }
}
