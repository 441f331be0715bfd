//! # zcnet-executor: who runs when
//!
//! zcnet's stack is two tasks, *ingress* and *egress*, that must run only when there is work:
//! woken by a driver interrupt, by a socket, or by a protocol timer — never by a busy-poll. This
//! crate is the runtime that makes that true:
//!
//! ```text
//!  driver IRQ ─┐                         ┌─► ingress task ─► poll_ingress_single (bounded batch)
//!  socket op ──┼─► waker ─► run queue ───┤
//!  timer wheel ┘   (lock-free, queued    └─► egress task  ─► poll_egress, then sleep_until(poll_at)
//!                   at most once)
//!  idle: wait until the wheel's next deadline or a signal (Linux: one epoll_wait)
//! ```
//!
//! Status: the executor, the intrusive hierarchical timer wheel and the Linux platform arrive
//! with issue 3 ("zcnet-executor: a no_std executor with an intrusive hierarchical timer
//! wheel"). This crate depends on nothing of zcnet's, so it can be used on its own.

#![no_std]
#![deny(missing_docs)]
