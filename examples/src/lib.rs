//! # zcnet-examples: servers on zcnet that unmodified Linux tools talk to
//!
//! Each example is library code here, driven by a small program in `src/bin/` (which sets up a
//! TAP and a network namespace, see [`demo`]) and by the integration tests
//! (`tests/tests/tap_examples.rs`, which run the same servers in-process against the Linux
//! stack in a test-made namespace):
//!
//! * [`echo`]: TCP and UDP echo on port 7 (`nc`, `socat`);
//! * [`http`]: an HTTP/1.1 server with keep-alive, a static page and `/stats` (`curl`, `wrk`);
//! * [`iperf3`]: an iperf3-compatible server (`iperf3 -c`, `-R`, `-P N`).
//!
//! ```text
//! sudo target/release/http      # then: sudo ip netns exec zcnet-demo curl http://10.77.0.2/
//! ```

#![deny(missing_docs)]

pub mod demo;
pub mod echo;
pub mod http;
pub mod iperf3;
pub mod json;
pub mod limit;
