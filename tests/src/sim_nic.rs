//! [`SimNic`]: a simulated ring NIC that follows the [`Driver`](zcnet_buffer::Driver) contract
//! to the letter, the test playing the device. It lives in `zcnet-buffer` (feature `sim`, module
//! [`zcnet_buffer::sim::nic`]), where the examples use it too; re-exported here for the tests.

pub use zcnet_buffer::sim::nic::{SimNic, SimNicStats};
