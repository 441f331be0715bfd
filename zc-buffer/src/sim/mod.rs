//! Simulated hardware for tests, benchmarks and demos (feature `sim`, which implies `std`):
//! drivers that need no device, no root and no setup.
//!
//! * [`SimNic`] ([`nic`]): one NIC with an RX ring and a TX queue whose device side the caller
//!   plays by hand ([`SimNic::device_receive`], [`SimNic::device_complete_tx`]): for watching
//!   slots move between the ring, the stack and the application (the `pool-demo` example, the
//!   driver-contract tests).
//! * [`wire_pair`] ([`wire`]): two [`Driver`](crate::Driver)s linked back to back in memory,
//!   so two stacks can talk inside one process, with seeded fault injection ([`Faults`]: loss,
//!   reorder, duplication, corruption, delay, MTU), offloads per end ([`WireOffloads`]:
//!   checksums, segmentation, chains) and counters per direction ([`WireStats`]). zcnet's stack tests, its benchmarks against smoltcp and the `demo`
//!   example run on it. [`wire_pair_one_thread`] is the same wire for two ends on one thread
//!   (no lock: the stack benchmark's two stacks on one executor).
//! * [`CountingWaker`]: a waker that only counts, for driving a driver by hand.
//!
//! Both drivers follow the [`Driver`](crate::Driver) contract as a real driver must (re-post
//! after every completion, back-pressure instead of loss on TX, wakers registered when
//! `Pending`), and both move frames in pool slots: a frame sent over the wire stays in the
//! sender's slot (state DEVICE) until the receiver takes it.
//!
//! To use it, enable the feature in the crate that needs it:
//!
//! ```toml
//! zcnet-buffer = { version = "0.1", features = ["sim"] }
//! ```
//!
//! Two stacks over a wire (a sketch; `zcnet-stack` builds a stack over any driver, and the
//! examples' `stack_demo::pair` does exactly this):
//!
//! ```ignore
//! let (a, b) = zcnet_buffer::sim::wire_pair([pool_a, pool_b], Faults::default());
//! let (handle_a, handle_b) = (a.handle(), b.handle()); // counters, kept by the caller
//! let (stack_a, runner_a) = Stack::new(exec, pool_a, Box::leak(Box::new(a)), config_a, res_a)?;
//! let (stack_b, runner_b) = Stack::new(exec, pool_b, Box::leak(Box::new(b)), config_b, res_b)?;
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

pub mod nic;
mod offload;
pub mod wire;

pub use nic::{SentPacket, SimNic, SimNicStats};
pub use wire::{
    wire_pair, wire_pair_one_thread, wire_pair_with, Delivery, Faults, GsoMode, WireEnd,
    WireHandle, WireOffloads, WireStats, WireTimer,
};

/// A waker that counts how often it was woken and does nothing else: pass it to a driver
/// polled by hand (no executor) and check afterwards that the driver woke it when it should.
///
/// ```
/// use zcnet_buffer::sim::CountingWaker;
///
/// let (count, waker) = CountingWaker::new();
/// waker.wake_by_ref();
/// assert_eq!(count.wakes(), 1);
/// ```
#[derive(Debug, Default)]
pub struct CountingWaker(AtomicUsize);

impl CountingWaker {
    /// A fresh counter and its waker: keep the `Arc` to read the count, hand out the
    /// [`Waker`] (e.g. in a `Context::from_waker`).
    pub fn new() -> (Arc<CountingWaker>, Waker) {
        let w = Arc::new(CountingWaker::default());
        (w.clone(), Waker::from(w))
    }

    /// How many times it was woken.
    pub fn wakes(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
