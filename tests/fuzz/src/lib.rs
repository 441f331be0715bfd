//! zcnet's fuzz targets, as library code: each target in `fuzz_targets/` is one call into a
//! module here, so the seed corpus can be written and replayed by ordinary tests
//! (`tests/corpus.rs`) on the stable toolchain, without libFuzzer.
//!
//! * [`input::Reader`]: the small decoder every structured target reads its input with.
//! * [`frames`]: well-formed frames (ARP, ICMP echo, TCP, UDP, DHCP, NDP) built with
//!   `smoltcp::wire`, and a checksum fixer for fuzzed frames.
//! * [`ingress`]: the `stack_ingress` target (a whole stack fed frames and clock steps).
//! * [`neighbors`]: the `classifier_neighbors` target (the zero-copy classifier and the
//!   neighbour table, through `zcnet_stack::fuzzing`).
//! * [`leases`]: the `buffer_leases` target (frame pool operations).
//! * [`parsers`]: the `http_parser` and `iperf3_control` targets.
//! * [`fast_path`]: the `tcp_fast_path` target (TCP's fast path against the full processing).

pub mod fast_path;
pub mod frames;
pub mod ingress;
pub mod input;
pub mod leases;
pub mod neighbors;
pub mod parsers;
