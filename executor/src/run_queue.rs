//! The run queue: an intrusive lock-free stack of task headers that any thread or interrupt
//! handler pushes onto and the executor empties in one swap.
//!
//! The head word also carries two flags in the low bits of the pointer (headers are 8-byte
//! aligned):
//!
//! * `SLEEPING`: the executor found the queue empty and is about to wait (or waits) on the
//!   platform. Set by the same compare-exchange that observes the queue empty; cleared by the
//!   push that ends the emptiness, which then signals the platform. One word, so "queue empty" and
//!   "going to sleep" cannot be separated by an enqueue: no lost wakeup, and no signal (a syscall
//!   on Linux) while the executor is awake.
//! * `MAIN_WOKEN`: `block_on`'s top-level future was woken. It is not a task, so its wake is a
//!   flag here, with the same guarantee.

use core::ptr;

use crate::sync::{AtomicPtr, Ordering::*};
use crate::task::{Header, TaskRef};

const SLEEPING: usize = 0b01;
const MAIN_WOKEN: usize = 0b10;
const FLAGS: usize = SLEEPING | MAIN_WOKEN;

/// What `push` and `wake_main` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notify {
    /// The executor is awake: nothing more to do.
    None,
    /// The executor was sleeping: the caller must signal the platform.
    Signal,
}

pub(crate) struct RunQueue {
    head: AtomicPtr<Header>,
}

/// A batch taken from the queue, oldest first.
pub(crate) struct Batch {
    /// Oldest task first, linked through `Header::next`.
    head: *mut Header,
}

impl Batch {
    pub(crate) const EMPTY: Batch = Batch {
        head: ptr::null_mut(),
    };

    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// The batch of the taken stack `newest` (newest first, flags stripped), reversed so that
    /// tasks run in the order they were woken.
    fn reversed(newest: *mut Header) -> Batch {
        match ptr::NonNull::new(newest) {
            Some(node) => Self::reversed_from(node),
            None => Batch::EMPTY,
        }
    }

    /// [`reversed`](Self::reversed) of a stack that holds at least one task.
    fn reversed_from(newest: ptr::NonNull<Header>) -> Batch {
        // One task (the common case of a loop that keeps up): nothing to reverse.
        if TaskRef(newest).header().next.load(Relaxed).is_null() {
            return Batch {
                head: newest.as_ptr(),
            };
        }
        let mut rest = newest.as_ptr();
        let mut reversed: *mut Header = ptr::null_mut();
        while let Some(node) = ptr::NonNull::new(rest) {
            let task = TaskRef(node);
            rest = task.header().next.load(Relaxed);
            task.header().next.store(reversed, Relaxed);
            reversed = node.as_ptr();
        }
        Batch { head: reversed }
    }
}

impl Iterator for Batch {
    type Item = TaskRef;

    fn next(&mut self) -> Option<TaskRef> {
        let cur = ptr::NonNull::new(self.head)?;
        let task = TaskRef(cur);
        self.head = task.header().next.load(Relaxed);
        Some(task)
    }
}

impl RunQueue {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Pushes a task whose QUEUED bit the caller just set, or that the executor holds and
    /// took out of the queue (so it is in no queue). Lock-free.
    pub(crate) fn push(&self, task: TaskRef) -> Notify {
        let node = task.0.as_ptr();
        let mut cur = self.head.load(Relaxed);
        loop {
            let next = cur.map_addr(|a| a & !FLAGS);
            task.header().next.store(next, Relaxed);
            // Keep MAIN_WOKEN, clear SLEEPING: whoever clears SLEEPING signals.
            let new = node.map_addr(|a| a | (cur.addr() & MAIN_WOKEN));
            match self.head.compare_exchange_weak(cur, new, AcqRel, Relaxed) {
                Ok(_) => {
                    return if cur.addr() & SLEEPING != 0 {
                        Notify::Signal
                    } else {
                        Notify::None
                    }
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Flags the top-level future as woken.
    pub(crate) fn wake_main(&self) -> Notify {
        let mut cur = self.head.load(Relaxed);
        loop {
            let new = cur.map_addr(|a| (a & !SLEEPING) | MAIN_WOKEN);
            if new == cur {
                return Notify::None;
            }
            match self.head.compare_exchange_weak(cur, new, AcqRel, Relaxed) {
                Ok(_) => {
                    return if cur.addr() & SLEEPING != 0 {
                        Notify::Signal
                    } else {
                        Notify::None
                    }
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Takes every queued task (oldest first) and the MAIN_WOKEN flag. A load when the word is
    /// empty, else one compare-exchange (measured faster here than a swap).
    pub(crate) fn take_all(&self) -> (Batch, bool) {
        let mut cur = self.head.load(Relaxed);
        loop {
            if cur.is_null() {
                return (Batch::EMPTY, false);
            }
            match self
                .head
                .compare_exchange_weak(cur, ptr::null_mut(), AcqRel, Relaxed)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        let main = cur.addr() & MAIN_WOKEN != 0;
        (Batch::reversed(cur.map_addr(|a| a & !FLAGS)), main)
    }

    /// Takes every queued task (oldest first) for `run_until_idle`, which neither waits nor
    /// polls `block_on`'s future: the flags stay as they are (a `block_on` on the stack, or
    /// another thread's loop, still sees its wake and its sleep). A load when nothing is queued;
    /// else, when the load saw no flag, one swap (it needs no retry, and measured faster here
    /// than a compare-exchange), otherwise one compare-exchange that keeps the flags.
    ///
    /// A flag set between the load and the swap is swapped away with the tasks, and put back
    /// at once: `MAIN_WOKEN` as `wake_main` sets it; `SLEEPING` (a loop that found the queue
    /// empty after another take and went to wait) is not, and `signal` is called instead, as a
    /// push that cleared it would (the loop wakes and looks again). `signal` is also called if
    /// putting `MAIN_WOKEN` back finds a loop asleep.
    #[inline(always)]
    pub(crate) fn take_tasks(&self, signal: impl FnOnce()) -> Batch {
        let cur = self.head.load(Relaxed);
        if cur.is_null() {
            return Batch::EMPTY;
        }
        if cur.addr() & FLAGS != 0 {
            return self.take_tasks_keeping_flags(cur);
        }
        let old = self.head.swap(ptr::null_mut(), AcqRel);
        if old.addr() & FLAGS == 0 {
            // Null if another thread took the queue meanwhile.
            return Batch::reversed(old);
        }
        if self.put_back_flags(old.addr() & FLAGS) == Notify::Signal {
            signal();
        }
        Batch::reversed(old.map_addr(|a| a & !FLAGS))
    }

    /// [`take_tasks`](Self::take_tasks) after a swap took `flags` away with the tasks: puts
    /// `MAIN_WOKEN` back; returns [`Notify::Signal`] when a loop waits that nothing else will
    /// wake (it had set `SLEEPING`, which the swap took, or is found asleep now).
    #[cold]
    #[inline(never)]
    fn put_back_flags(&self, flags: usize) -> Notify {
        // A push clears SLEEPING and `wake_main` too, and `try_sleep` needs an empty word, so
        // the two are never set together.
        if flags & SLEEPING != 0 {
            return Notify::Signal;
        }
        self.wake_main()
    }

    /// [`take_tasks`](Self::take_tasks) when the head word `cur` carries a flag: one
    /// compare-exchange that leaves the flags in place (none when there is no task).
    #[inline(never)]
    fn take_tasks_keeping_flags(&self, mut cur: *mut Header) -> Batch {
        loop {
            let Some(newest) = ptr::NonNull::new(cur.map_addr(|a| a & !FLAGS)) else {
                return Batch::EMPTY;
            };
            let flags = ptr::without_provenance_mut(cur.addr() & FLAGS);
            match self.head.compare_exchange_weak(cur, flags, AcqRel, Relaxed) {
                Ok(_) => return Batch::reversed_from(newest),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Marks the executor as going to sleep if the queue is empty and the main future not woken.
    /// Returns `false` (stay awake) otherwise.
    pub(crate) fn try_sleep(&self) -> bool {
        self.head
            .compare_exchange(
                ptr::null_mut(),
                ptr::without_provenance_mut(SLEEPING),
                AcqRel,
                Relaxed,
            )
            .is_ok()
    }

    /// The executor is awake again: clears SLEEPING if no push cleared it already.
    pub(crate) fn end_sleep(&self) {
        let _ = self.head.compare_exchange(
            ptr::without_provenance_mut(SLEEPING),
            ptr::null_mut(),
            AcqRel,
            Relaxed,
        );
    }

    /// Whether a task is queued or the main future woken.
    pub(crate) fn has_work(&self) -> bool {
        self.head.load(Acquire).addr() & !SLEEPING != 0
    }
}
