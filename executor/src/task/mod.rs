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
//!  | reference count (bits 6..) | JOIN_WAKER | JOIN_INTEREST | COMPLETE | RUNNING | SCHEDULED |
//! ```
//!
//! * **SCHEDULED**: the task is in the run queue, or will be put there when its current poll
//!   ends. Set by the first wake after a poll started; cleared by the executor as it starts a poll.
//!   So a task is queued at most once, and a wake during a poll re-queues it after the poll.
//! * **RUNNING**: the executor is polling the future; only it touches the stage then.
//! * **COMPLETE**: the future returned `Ready` and its output is in the stage (or was dropped).
//!   After COMPLETE the executor never touches the stage again; the join handle owns it.
//! * **JOIN_INTEREST**: a [`JoinHandle`] exists. If it is gone when the task completes, the
//!   executor drops the output at once.
//! * **JOIN_WAKER**: the join handle stored a waker in `Header::join_waker`. While set, only the
//!   executor (on completion) reads it; while clear and not COMPLETE, only the join handle writes.
//! * **References**: each `Waker`, the `JoinHandle`, and the run queue (while SCHEDULED) hold one.
//!   The last one to go deallocates: a boxed task is freed, a static slot becomes free for reuse.
//!   A pending task that nothing can wake any more is dropped at that point too.

mod join;
mod raw;
mod storage;
mod waker;

pub use join::JoinHandle;
pub(crate) use raw::{Header, TaskRef};
#[cfg(feature = "alloc")]
pub(crate) use storage::spawn_boxed;
pub use storage::{SpawnError, TaskStorage, STORAGE_ALIGN};
pub(crate) use waker::{header_from_waker, task_waker};
