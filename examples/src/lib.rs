//! # zcnet-examples: servers on zcnet that unmodified Linux tools talk to
//!
//! The servers are `no_std` + `alloc` library code, the same code whether it runs in a Linux
//! process over a TAP or in a freestanding kernel over its own driver:
//!
//! * [`echo`]: TCP and UDP echo on port 7 (`nc`, `socat`); UDP on smoltcp's copying socket or
//!   on zcnet's zero-copy datagram socket;
//! * [`http`]: an HTTP/1.1 server with keep-alive, a static page and `/stats` (`curl`, `wrk`);
//! * [`iperf3`]: an iperf3-compatible server (`iperf3 -c`, `-R`, `-P N`, `--bidir`, UDP with
//!   `-u -b RATE`);
//! * [`json`] and [`limit`]: what they share (a small JSON reader and writer; a cap on
//!   connection tasks that sheds the connection waiting longest for its client when full, and
//!   the TCP keep-alive every server turns on).
//!
//! With `std`, `stack_demo` runs the servers on two stacks in one process over
//! zcnet-buffer's simulated wire, step by step (the `demo` program, the README's first
//! command).
//!
//! Each server is bound with `XServer::bind(stack, XConfig)` and served by the future
//! `run(spawner)`. What the servers need from their surroundings that `core` and `alloc` do not
//! give is a hook in their config, which the caller fills in: the driver's counters for the
//! HTTP server's `/stats` ([`http::DriverStats`]) and any further sections
//! ([`http::ExtraStats`]), the process's CPU clock for iperf3's results
//! ([`iperf3::Iperf3Config::cpu_time`]) and where iperf3's one-line test reports go
//! ([`iperf3::Iperf3Config::log`]). Time comes from the executor's clock.
//!
//! ## Features
//!
//! * `std` (default): the Linux side. The `demo` module (TAP and network-namespace setup, and
//!   the hooks filled in for Linux), `secret` (the stack's secret from the OS's random
//!   source), `stack_demo` (two stacks over an in-memory wire: what
//!   `cargo run -p zcnet-examples --bin demo` shows), the programs in `src/bin/` and
//!   `getrusage` as iperf3's CPU clock, and `logger`, the programs' stderr logger: they log the
//!   stack's and the TAP driver's events (zcnet-stack's and zcnet-tap's `log` feature, which
//!   `std` turns on) with `-v`, `-vv`, `-vvv`. The programs are driven by `demo`; the integration tests
//!   (`tests/tests/tap_examples.rs`) run the same servers in-process against the Linux stack
//!   in a test-made namespace.
//! * Without it (`default-features = false`) the crate is `#![no_std]` and needs only a global
//!   allocator: what a kernel links.
//!
//! ```text
//! sudo target/release/http      # then: sudo ip netns exec zcnet-demo curl http://10.77.0.2/
//! ```

#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]

extern crate alloc;

pub mod echo;
pub mod http;
pub mod iperf3;
pub mod json;
pub mod limit;
#[cfg(feature = "std")]
pub mod logger;
#[cfg(feature = "std")]
pub mod secret;
#[cfg(feature = "std")]
pub mod stack_demo;
#[cfg(feature = "std")]
pub mod tap_setup;
