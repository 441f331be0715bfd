//! The task header, its state word, and the transitions on it (see the module docs of `task`).

use core::cell::UnsafeCell;
use core::future::Future;
use core::pin::Pin;
use core::ptr::NonNull;
use core::task::{Context, Poll, Waker};

use crate::executor::Core;
use crate::sync::{AtomicPtr, AtomicUsize, Ordering::*};

pub(crate) const SCHEDULED: usize = 1 << 0;
pub(crate) const RUNNING: usize = 1 << 1;
pub(crate) const COMPLETE: usize = 1 << 2;
pub(crate) const JOIN_INTEREST: usize = 1 << 3;
pub(crate) const JOIN_WAKER: usize = 1 << 4;
const REF_SHIFT: u32 = 6;
pub(crate) const REF_ONE: usize = 1 << REF_SHIFT;

/// What a task is doing: its future, then its output, then nothing.
pub(crate) enum Stage<F: Future> {
    Running(F),
    Finished(F::Output),
    Consumed,
}

/// Type-erased operations on a task, one table per future type and storage kind.
pub(crate) struct TaskVTable {
    /// Polls the future (stage must be `Running`); on `Ready` stores the output.
    pub(crate) poll: unsafe fn(NonNull<Header>, &mut Context<'_>) -> Poll<()>,
    /// Moves the output into `*(dst as *mut Option<F::Output>)`.
    pub(crate) read_output: unsafe fn(NonNull<Header>, *mut ()),
    /// Drops whatever the stage holds and marks it consumed.
    pub(crate) drop_stage: unsafe fn(NonNull<Header>),
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
    pub(crate) vtable: &'static TaskVTable,
    /// The executor that runs this task.
    pub(crate) core: &'static Core,
    /// The join handle's waker; ownership per the JOIN_WAKER rule.
    pub(crate) join_waker: UnsafeCell<Option<Waker>>,
    /// The stage (`Stage<F>`), in the same allocation or static slot as the header.
    pub(crate) stage: *mut (),
}

impl Header {
    pub(crate) fn new(vtable: &'static TaskVTable, core: &'static Core, stage: *mut ()) -> Self {
        Self {
            // Two references: the run queue (the task starts scheduled) and the join handle.
            state: AtomicUsize::new(SCHEDULED | JOIN_INTEREST | (2 * REF_ONE)),
            next: AtomicPtr::new(core::ptr::null_mut()),
            vtable,
            core,
            join_waker: UnsafeCell::new(None),
            stage,
        }
    }
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

    /// Adds a reference (a waker clone).
    pub(crate) fn ref_inc(&self) {
        let prev = self.header().state.fetch_add(REF_ONE, Relaxed);
        // A reference count this large means wakers are being leaked in a loop; stop before
        // the count wraps into the flag bits.
        assert!(
            prev < usize::MAX / 2,
            "zcnet-executor: task reference count overflow"
        );
    }

    /// Drops a reference; the last one deallocates the task.
    ///
    /// # Safety
    ///
    /// The caller owns one reference and does not use `self` afterwards.
    pub(crate) unsafe fn ref_dec(self) {
        let prev = self.header().state.fetch_sub(REF_ONE, AcqRel);
        debug_assert!(prev >= REF_ONE, "task reference count underflow");
        if prev >> REF_SHIFT == 1 {
            // SAFETY: that was the last reference: nobody else can reach the task.
            unsafe { (self.header().vtable.dealloc)(self.0) };
        }
    }

    /// Schedules the task unless it is complete or already scheduled. Runs on any thread or in an
    /// interrupt handler: one compare-exchange, plus a lock-free push when it enqueues.
    pub(crate) fn wake_by_ref(self) {
        let state = &self.header().state;
        let mut cur = state.load(Acquire);
        loop {
            if cur & (COMPLETE | SCHEDULED) != 0 {
                return;
            }
            // While RUNNING, SCHEDULED alone tells the executor to re-queue after the poll.
            let enqueue = cur & RUNNING == 0;
            let next = if enqueue {
                (cur | SCHEDULED) + REF_ONE
            } else {
                cur | SCHEDULED
            };
            match state.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) => {
                    if enqueue {
                        self.core().enqueue(self);
                    }
                    return;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// The executor starts a poll: SCHEDULED → RUNNING.
    pub(crate) fn start_poll(self) {
        let state = &self.header().state;
        let mut cur = state.load(Acquire);
        loop {
            debug_assert!(cur & SCHEDULED != 0 && cur & (RUNNING | COMPLETE) == 0);
            let next = (cur & !SCHEDULED) | RUNNING;
            match state.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// The poll returned `Pending`: RUNNING is cleared, and in the same atomic step the queue's
    /// reference the executor holds is either kept or given back.
    ///
    /// Returns `true` if a wake arrived during the poll (SCHEDULED is set): the caller then
    /// re-queues the task with the queue's reference it still holds. Returns `false` otherwise:
    /// the reference is gone (and the task freed if it was the last one).
    ///
    /// One compare-exchange instead of a clear followed by a decrement: this runs once per task
    /// poll, and a locked instruction is the most expensive thing in it.
    ///
    /// # Safety
    ///
    /// Only the executor, right after a poll that returned `Pending`, holding the queue's
    /// reference; on `false` it must not use `self` again.
    pub(crate) unsafe fn end_poll_pending(self) -> bool {
        let state = &self.header().state;
        let mut cur = state.load(Acquire);
        loop {
            let requeue = cur & SCHEDULED != 0;
            let next = if requeue {
                cur & !RUNNING
            } else {
                debug_assert!(cur >= REF_ONE, "task reference count underflow");
                (cur & !RUNNING) - REF_ONE
            };
            match state.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) => {
                    if !requeue && cur >> REF_SHIFT == 1 {
                        // SAFETY: that was the last reference: nobody else can reach the task.
                        unsafe { (self.header().vtable.dealloc)(self.0) };
                    }
                    return requeue;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// The poll returned `Ready` (output stored): sets COMPLETE, delivers the output to the join
    /// handle or drops it, and wakes the join handle's waker.
    pub(crate) fn complete(self) {
        let state = &self.header().state;
        let prev = state.fetch_update(AcqRel, Acquire, |cur| {
            Some((cur & !(RUNNING | SCHEDULED)) | COMPLETE)
        });
        let prev = match prev {
            Ok(p) | Err(p) => p,
        };
        if prev & JOIN_INTEREST == 0 {
            // SAFETY: no join handle exists (JOIN_INTEREST was clear when COMPLETE was set, and
            // it is never set again), so nobody else touches the stage.
            unsafe { (self.header().vtable.drop_stage)(self.0) };
        } else if prev & JOIN_WAKER != 0 {
            // SAFETY: JOIN_WAKER was set when we set COMPLETE: the join handle no longer writes
            // the waker (it only writes while JOIN_WAKER is clear and the task not complete).
            let waker = unsafe { &*self.header().join_waker.get() };
            if let Some(w) = waker {
                w.wake_by_ref();
            }
        }
    }

    /// Polls the future through the vtable.
    ///
    /// # Safety
    ///
    /// Only the executor, between `start_poll` and the end of the poll.
    pub(crate) unsafe fn poll(self, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: RUNNING is set by the caller, which gives it exclusive use of the stage.
        unsafe { (self.header().vtable.poll)(self.0, cx) }
    }
}

/// Polls the `Stage<F>` behind `header` (the vtable's `poll`).
///
/// # Safety
///
/// `header.stage` points to a live `Stage<F>`, and the caller holds RUNNING.
pub(crate) unsafe fn poll_stage<F: Future>(
    header: NonNull<Header>,
    cx: &mut Context<'_>,
) -> Poll<()> {
    // SAFETY: per the preconditions, the stage is a live `Stage<F>` we may use exclusively; it
    // never moves (boxed or static), so pinning it is sound.
    unsafe {
        let stage = &mut *header.as_ref().stage.cast::<Stage<F>>();
        let Stage::Running(fut) = stage else {
            // A scheduled task is never complete (wakes ignore COMPLETE tasks).
            unreachable!("zcnet-executor: polled a finished task");
        };
        match Pin::new_unchecked(fut).poll(cx) {
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

/// Drops what the `Stage<F>` behind `header` holds (the vtable's `drop_stage`).
///
/// # Safety
///
/// The caller has exclusive use of the stage (see the `task` ground rules).
pub(crate) unsafe fn drop_stage<F: Future>(header: NonNull<Header>) {
    // SAFETY: exclusive use per the preconditions.
    unsafe {
        let stage = &mut *header.as_ref().stage.cast::<Stage<F>>();
        *stage = Stage::Consumed;
    }
}
