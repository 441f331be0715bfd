//! # zcnet-stack: smoltcp, split and woken only by work
//!
//! The stack sits between a [`zcnet_buffer::Driver`] and the application's sockets:
//!
//! ```text
//!  Driver ─RxFrame─► ingress task ─┬─ datagram for a zero-copy socket ─► socket queue ─► app
//!                                  └─ everything else ─► smoltcp poll_ingress_single
//!  app / sockets ─signal─► egress task ─► smoltcp poll_egress ─► TxFrame ─► Driver
//!                              └─ sleeps on the timer wheel until smoltcp's poll_at
//! ```
//!
//! Status: the `Stack` handle, the `Runner` with its ingress and egress tasks, and the sockets
//! arrive with issue 4 ("zcnet-stack: async smoltcp with separate ingress and egress tasks");
//! zero-copy datagram sockets with issue 5. Until then this crate only fixes its place in the
//! dependency graph: it builds on `zcnet-buffer` (frames, the driver trait) and `zcnet-executor`
//! (tasks, timers).

#![no_std]
#![deny(missing_docs)]

pub use zcnet_buffer as buffer;
pub use zcnet_executor as executor;
