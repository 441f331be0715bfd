//! Tasks: a header every task starts with, the state word that governs it, and the operations
//! wakers, the executor and join handles perform on it.
//!
//! # Ground rules
//!
//! A task is a [`Header`] followed (somewhere the header points to) by its `Stage`: the future
//! while it runs, then its output. Everything about who may touch what is decided by one atomic
//! word, `Header::state`:
//!
//! ```text
//!  | reference count (bits 6..) | LOCAL | JOIN_WAKER | JOIN_INTEREST | COMPLETE | NOTIFIED | QUEUED |
//! ```
//!
//! * **QUEUED**: the executor holds the task: it is in the run queue, or being polled. Set by
//!   the wake that finds it clear (that wake pushes the task) and at spawn; cleared by the
//!   executor at the end of a poll that no wake interrupted, and at completion. So a task is in
//!   the queue at most once, and only the executor polls it while it is set. While set, the
//!   executor's hold keeps the task alive even with no reference left.
//! * **NOTIFIED**: a wake arrived while the task was QUEUED. One that arrives before the poll
//!   starts is covered by that poll (the executor clears it as the poll starts); one that
//!   arrives during the poll makes the executor queue the task again after it.
//! * **COMPLETE**: the future returned `Ready` and its output is in the stage (or was dropped).
//!   After COMPLETE the executor never touches the stage again; the join handle owns it.
//! * **JOIN_INTEREST**: a [`JoinHandle`] exists. If it is gone when the task completes, the
//!   executor drops the output at once.
//! * **JOIN_WAKER**: the join handle stored a waker in `Header::join_waker`. While set, only the
//!   executor (on completion) reads it; while clear and not COMPLETE, only the join handle writes.
//! * **References**: each `Waker` and the `JoinHandle` hold one; the executor's hold is QUEUED,
//!   not a reference. While QUEUED and not COMPLETE the count also holds the executor's
//!   *spare*: added by the same instruction that sets QUEUED (spawn, a wake's compare-exchange;
//!   a wake by value hands over its own reference), let go of by the one that ends the poll or
//!   completes the task. Whoever leaves the task with no reference and QUEUED clear
//!   deallocates it: a boxed task is freed, a static slot becomes free for reuse. A pending
//!   task that nothing can wake any more is dropped at that point too (a local task only once
//!   it completes: see LOCAL). A task that completes while the state word holds nothing but
//!   QUEUED and the spare (no waker, no join handle, no local reference, no wake pending) is
//!   deallocated by the executor at once, with no instruction on the word: nobody else can
//!   reach it.
//! * **The polling thread** (`sync::polling` names the task a thread polls from the run
//!   queue; with `std` only): that thread holds the task and ends the poll after anything its
//!   wakers do meanwhile, so there they touch a plain cell in the header (`Header::poll_flags`)
//!   instead of the state word. The first clone in a poll takes the spare (`SPARE_TAKEN`), a
//!   waker dropped while a clone holds it gives it back, and a wake sets `WOKEN_IN_POLL`, which
//!   makes the end of the poll queue the task again. The end of the poll (or the completion) folds
//!   both into its one locked instruction. Program order carries the waker's writes to the
//!   next poll; wakes from any other thread or an interrupt handler keep the lock-free path.
//! * **LOCAL**: the executor's own reference to a task spawned by a `LocalSpawner` is held (one
//!   count in the reference bits). Taken at spawn, let go once the task has completed and is not
//!   in the local run queue, so a local task is never freed, and its future never dropped, by a
//!   waker or join handle let go in another context.
//! * **The local run queue** (the executor's `LocalQueue`): `Header::local_queued` and
//!   `Header::local_next`, plain cells read and written only in the context that owns the
//!   executor's local tasks. It holds no QUEUED bit: a locally queued task stays alive through
//!   LOCAL, may be in the lock-free run queue too, and is then polled once from each.
//!
//! Locked instructions on the hot path: a wake of an idle task is one compare-exchange and a
//! push; the executor's poll from the run queue is a load at its start and one locked
//! subtraction at its end (none when the task woke itself on the polling thread); the
//! completion is one compare-exchange, none when nothing else refers to the task. A waker
//! cloned, dropped or woken on the polling thread during the poll takes none (a second clone
//! in one poll takes one). A wake from another thread of a task already QUEUED or NOTIFIED is
//! still a compare-exchange: see `TaskRef::wake_by_ref`. A local schedule
//! (`LocalSpawner::wake`) and a poll from the local run queue take none.

mod join;
mod raw;
mod storage;
mod waker;

pub use join::JoinHandle;
pub(crate) use raw::{Header, Start, TaskRef, COMPLETE};
#[cfg(feature = "alloc")]
pub(crate) use storage::spawn_boxed;
pub use storage::{SpawnError, TaskStorage, STORAGE_ALIGN};
pub(crate) use waker::header_from_waker;
