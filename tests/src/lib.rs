//! Support code for zcnet's integration tests (the tests themselves are in `tests/tests/`).
//!
//! * [`sim_nic::SimNic`]: a simulated ring NIC implementing [`zcnet_buffer::Driver`] exactly as
//!   the trait's contract asks (re-post after every completion, drop and count when the ring is
//!   empty), with the "device" side driven by the test.
//! * [`wakers`]: wakers for plain threads — one that unparks a thread, one that counts.

pub mod sim_nic;
pub mod wakers;
