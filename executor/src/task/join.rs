//! [`JoinHandle`]: awaits a task's output.

use core::fmt;
use core::future::Future;
use core::marker::PhantomData;
use core::pin::Pin;
use core::task::{Context, Poll};

use super::raw::{TaskRef, COMPLETE, JOIN_WAKER};
use crate::sync::Ordering::*;

/// Awaits the output of a spawned task. Dropping it detaches the task (it keeps running; its
/// output is dropped when it completes).
pub struct JoinHandle<T> {
    task: TaskRef,
    _output: PhantomData<T>,
}

// SAFETY: the handle only moves the output (`T: Send`) out of the task, through the state-word
// protocol, which is thread-safe.
unsafe impl<T: Send> Send for JoinHandle<T> {}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl<T> Unpin for JoinHandle<T> {}

impl<T> JoinHandle<T> {
    /// Wraps the join handle's reference to `task`, whose output type is `T`.
    pub(crate) fn new(task: TaskRef) -> Self {
        Self {
            task,
            _output: PhantomData,
        }
    }

    /// Whether the task has completed.
    pub fn is_finished(&self) -> bool {
        self.task.header().state.load(Acquire) & COMPLETE != 0
    }

    fn take_output(&mut self) -> Poll<T> {
        let mut out: Option<T> = None;
        // SAFETY: COMPLETE is set (every caller checked it), this is the task's only join handle,
        // and `out` is an `Option<T>` with `T` the future's output type.
        unsafe {
            (self.task.header().vtable.read_output)(
                self.task.0,
                (&mut out as *mut Option<T>).cast::<()>(),
            )
        };
        match out {
            Some(v) => Poll::Ready(v),
            // Polled again after it returned Ready: a contract violation of `Future`.
            None => panic!("zcnet-executor: JoinHandle polled after completion"),
        }
    }

    /// Sets or clears JOIN_WAKER; returns `Err` if the task completed first.
    fn update_join_waker(&self, set: bool) -> Result<(), ()> {
        let state = &self.task.header().state;
        let mut cur = state.load(Acquire);
        loop {
            if cur & COMPLETE != 0 {
                return Err(());
            }
            let next = if set {
                cur | JOIN_WAKER
            } else {
                cur & !JOIN_WAKER
            };
            match state.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let cur = self.task.header().state.load(Acquire);
        if cur & COMPLETE != 0 {
            return self.take_output();
        }
        let cell = self.task.header().join_waker.get();
        if cur & JOIN_WAKER != 0 {
            // SAFETY: reading while JOIN_WAKER is set is allowed to anyone; only writes are
            // restricted (the executor only reads it too).
            let same = unsafe { (*cell).as_ref() }.is_some_and(|w| w.will_wake(cx.waker()));
            if same {
                return Poll::Pending;
            }
            // Take the slot back before replacing the waker.
            if self.update_join_waker(false).is_err() {
                return self.take_output();
            }
        }
        // Clone before touching the slot, so a panicking clone leaves the state consistent.
        let waker = cx.waker().clone();
        // SAFETY: JOIN_WAKER is clear and the task not complete (checked above), so the executor
        // does not read the slot; this handle is the only writer.
        unsafe { *cell = Some(waker) };
        if self.update_join_waker(true).is_err() {
            return self.take_output();
        }
        Poll::Pending
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        // SAFETY: the join handle's reference, given back once.
        unsafe { self.task.drop_join_handle() };
    }
}
