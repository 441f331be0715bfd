//! The link layer: the driver the stack holds ([`driver`]), the driver seen as a smoltcp
//! `Device` for one step of smoltcp's protocols ([`device`]), the carrier state and its waiters
//! ([`carrier`]), and the zero-copy path's neighbour table, Ethernet header writer and transmit
//! ([`neighbor`]).
//!
//! The bottom layer: it depends on the driver trait and the stack's counters, nothing above.

pub(crate) mod carrier;
pub(crate) mod device;
pub(crate) mod driver;
pub(crate) mod neighbor;

use smoltcp::phy::DeviceCapabilities;
use zcnet_buffer::TxFrame;

/// The link layer's part of the stack's state: the driver and what the stack knows of it.
pub(crate) struct LinkLayer {
    /// The driver (a detached placeholder once the stack is shut down, see `driver.rs`).
    pub(crate) driver: driver::StackDriver,
    /// The driver's capabilities as smoltcp names them: the checksums they leave to software
    /// are the ones ingress and the zero-copy path verify and compute.
    pub(crate) caps: DeviceCapabilities,
    /// What smoltcp is told: `caps` with receive checksum verification off, which ingress does
    /// in its place (`ip/check.rs`).
    pub(crate) smol_caps: DeviceCapabilities,
    /// Bytes the driver needs in front of every frame it transmits.
    pub(crate) tx_headroom: usize,
    /// A slot leased as scratch space (see `device.rs`) until shutdown gives it back.
    pub(crate) scratch: Option<TxFrame>,
    /// The TX frame the next TX token writes into (see `device.rs`): reserved for a reply
    /// before smoltcp sees a received frame, and kept when smoltcp needs no reply. At most one.
    pub(crate) spare_tx: Option<TxFrame>,
    /// The link state egress obeys, and the tasks waiting for a change (`carrier.rs`).
    pub(crate) carrier: carrier::Link,
    /// The zero-copy send path's neighbour table and held frames (`neighbor.rs`).
    pub(crate) neighbors: neighbor::Neighbors,
}
