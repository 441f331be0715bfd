//! Support code for zcnet's integration tests (the tests themselves are in `tests/tests/`).
//!
//! * [`sim_nic::SimNic`]: a simulated ring NIC implementing [`zcnet_buffer::Driver`] exactly as
//!   the trait's contract asks (re-post after every completion, drop and count when the ring is
//!   empty), with the "device" side driven by the test; re-exported from
//!   [`zcnet_buffer::sim`], where it lives.
//! * [`wakers`]: wakers for plain threads — one that unparks a thread, one that counts.
//! * [`clock::VirtualClock`]: simulated time, so timeout-heavy tests run at CPU speed.
//! * [`net::pair`] / [`net::pair_on`]: two stacks over a wire, ready to use; [`net::pair_with`] /
//!   [`net::pair_on_with`] let the test adjust each stack's configuration.
//! * [`cable::cable_pair`]: two stacks over a wire with a cable the test can pull (the link
//!   goes down and up).
//! * [`wire`]: two drivers linked back to back in memory, with seeded fault injection, so two
//!   stacks can talk inside one process: [`zcnet_buffer::sim::wire`] with its delays on the
//!   executor's timers.
//! * [`craft`]: crafted frames (ARP requests, TCP segments) sent to a stack on one end of a
//!   wire and its answers read back ([`craft::WireTarget`]); [`craft6`]: the same over IPv6
//!   (TCP segments, neighbour discovery, ICMPv6 "packet too big").
//! * [`recorder`]: a driver wrapper that records every frame's slot, address, time and bytes,
//!   and a wire pair built with it, to prove zero copy and to read the segments that crossed
//!   ([`recorder::tcp_header`]).
//! * [`slow_tx`]: a driver wrapper whose transmit completions lag behind delivery, logging
//!   every hand-off and completion per slot, and a wire pair built with it.
//! * [`netns`]: a network namespace holding the kernel side of a TAP that zcnet drives, so zcnet
//!   talks to the real Linux stack (needs root and `/dev/net/tun`).
//! * [`log_capture::LogCapture`]: records what the stack logs (its `log` feature) on the
//!   test's thread, for assertions on the log lines.
//! * [`secret`]: the stack's secret, fixed by a seed for the in-memory tests or from the OS's
//!   random source for real networks.
//! * [`audit::assert_slots_back`]: the pool audit a test ends with (every slot back), also as
//!   [`net::Pair::assert_slots_back`] and [`netns::TapNet::assert_slots_back`].
//! * [`qemu`]: the example kernel (`examples/qemu-kernel/`) built once and booted under QEMU,
//!   with its serial log collected, bounded waits, and QEMU killed on drop.

pub mod audit;
pub mod cable;
pub mod clock;
pub mod craft;
pub mod craft6;
pub mod log_capture;
pub mod net;
pub mod netns;
pub mod qemu;
pub mod recorder;
pub mod secret;
pub mod sim_nic;
pub mod slow_tx;
pub mod wakers;
pub mod wire;
