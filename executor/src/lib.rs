//! # zcnet-executor: who runs when
//!
//! zcnet's stack is two tasks, *ingress* and *egress*, that must run only when there is work:
//! woken by a driver interrupt, by a socket, or by a protocol timer — never by a busy-poll. This
//! crate is the runtime that makes that true.
//!
//! ```text
//!  driver IRQ ─┐                         ┌─► ingress task ─► poll_ingress_single (bounded batch)
//!  socket op ──┼─► waker ─► run queue ───┤
//!  timer wheel ┘   (lock-free, queued    └─► egress task  ─► poll_egress, then sleep_until(poll_at)
//!                   at most once)
//!  idle: Platform::wait(next timer deadline) — on Linux one epoll_wait, also the fd reactor
//!  busy: every 61 turns in a row with work, Platform::wait(past deadline) — a non-blocking look
//!        at fd readiness, so self-waking tasks cannot starve it
//! ```
//!
//! * [`Executor`]: single-threaded run loop; wakers work from any thread or interrupt handler.
//!   Tasks live in `static` [`TaskStorage`] slots or, with `alloc`, in boxes; [`JoinHandle`]s
//!   yield their output (a task spawned with `spawn_detached` / `spawn_detached_in` has none,
//!   and its output is dropped); [`Executor::block_on`], [`Executor::run`],
//!   [`Executor::run_until_idle`].
//!   [`Spawner`] spawns `Send` tasks from anywhere; [`LocalSpawner`] spawns tasks that are not
//!   `Send` (a zcnet stack and its sockets), which only the loop in the owning context polls.
//! * The run queue is an intrusive lock-free stack taken whole by the executor; a QUEUED bit
//!   keeps a task queued at most once and is the executor's hold on it (a wake and a poll need
//!   no instruction of their own for reference counts), and a wake during a poll re-queues it
//!   after the poll. Wakers used on the thread that polls their task, during the poll, take
//!   no locked instruction.
//! * [`Platform`]: the integrator's clock, wait and signal. With `std`, `linux::LinuxPlatform`
//!   serves all three with one `epoll_wait` and also dispatches fd readiness.
//! * [`time`]: [`time::sleep`], [`time::sleep_until`], [`time::timeout`], [`time::interval`] on a
//!   hierarchical timer wheel (6 levels × 64 slots, 1 ms ticks by default, O(1) insert and cancel,
//!   O(levels) next deadline). Each [`time::Sleep`] embeds its wheel entry. The free functions
//!   find their executor through the polling waker, else the executor running the thread, else
//!   the process's default one (see [`time`]); [`Executor::sleep`] and [`Executor::timeout`]
//!   name theirs and work under any waker.
//!
//! This crate depends on nothing of zcnet's. `no_std`; features `alloc` (boxed tasks) and `std`
//! (the Linux platform, implies `alloc`).

#![no_std]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(any(test, feature = "std"))]
extern crate std;

mod executor;
#[cfg(feature = "std")]
pub mod linux;
mod platform;
mod run_queue;
mod sync;
mod task;
pub mod time;

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;

pub use executor::{Executor, ExecutorStats, LocalSpawner, Spawner};
pub use platform::{Instant, Platform};
pub use task::{JoinHandle, SpawnError, TaskStorage, STORAGE_ALIGN};
