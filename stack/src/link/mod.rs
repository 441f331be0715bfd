//! The link layer: the driver the stack holds ([`driver`]), the driver seen as a smoltcp
//! `Device` for one step of smoltcp's protocols ([`device`]), the carrier state and its waiters
//! ([`carrier`]), the zero-copy path's neighbour table, Ethernet header writer and transmit
//! ([`neighbor`]), and TCP super-segments, handed to the driver whole or split ([`gso`]).
//!
//! The bottom layer: it depends on the driver trait and the stack's counters, nothing above
//! but the IP header writer and checksums the software split of super-segments uses.

pub(crate) mod carrier;
pub(crate) mod device;
pub(crate) mod driver;
pub(crate) mod gso;
pub(crate) mod neighbor;

use smoltcp::iface::Interface;
use smoltcp::phy::{DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use smoltcp::wire::{HardwareAddress, IpAddress};
use zcnet_buffer::{Driver, TxError, TxFrame, ETHERNET_HEADER_LEN};

use crate::datagram::DatagramError;
use crate::stats::Counters;

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
    /// The device completes TCP checksums (`ChecksumOffloads::TCP_TX`): zcnet's TCP writes
    /// only the pseudo-header's sum and marks the frame (`TxFrame::set_checksum_partial`).
    /// smoltcp is never told of transmit offloads (it cannot mark its frames): `caps` says
    /// software for every transmit checksum.
    pub(crate) tcp_tx_partial: bool,
    /// The TCP super-segments the driver segments itself (`gso.rs`); others are split in
    /// software.
    pub(crate) gso: gso::GsoSupport,
    /// Pieces of split super-segments waiting for room in the driver's queue (`gso.rs`).
    pub(crate) gso_held: gso::Held,
    /// The driver may hand up packets over several slots (`Capabilities::rx_chains`): ingress
    /// takes packets (`Driver::poll_receive_packet`) and gives chains to TCP whole
    /// (`ip/chain.rs`, `transport/tcp/chain.rs`).
    pub(crate) rx_chains: bool,
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

/// Whose IP packet [`LinkLayer::send_ip`] sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sender {
    /// An application's zero-copy datagram (the stack's own traffic), counted as a datagram
    /// out when it goes out.
    Datagram,
    /// A TCP segment, the stack's own or an unsolicited answer.
    Tcp(neighbor::Traffic),
    /// The stack's reply to an ICMPv4 echo request (`ip/echo.rs`): an unsolicited answer.
    EchoReply,
}

/// What became of an IP packet given to [`LinkLayer::send_ip`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Handed to the driver.
    Out,
    /// Held until its next hop resolves; the ticket tells the outcome
    /// ([`neighbor::Neighbors::poll_held`]).
    Held(u32),
}

impl LinkLayer {
    /// The link-layer header's length: Ethernet's on an Ethernet link, none on an IP link.
    pub(crate) fn header_len(&self) -> usize {
        match self.caps.medium {
            Medium::Ethernet => ETHERNET_HEADER_LEN,
            _ => 0,
        }
    }

    /// Hands a finished frame to the driver (see [`transmit`]); while the carrier is down the
    /// frame is dropped instead, counted as [`DropReason::LinkDown`](crate::DropReason::LinkDown).
    #[inline(always)]
    pub(crate) fn transmit(&mut self, frame: TxFrame, counters: &Counters) -> Result<(), TxError> {
        if !self.carrier.is_up() {
            // The frame's slot goes back to the pool; the sender hears why.
            counters.tx_refused(TxError::LinkDown);
            return Err(TxError::LinkDown);
        }
        transmit(&mut *self.driver, frame, counters)
    }

    /// Sends the IP packet in `frame` (IP header first) towards `hop`, its next hop (`None`:
    /// an IP link, no link-layer header). On Ethernet the destination MAC is the group address
    /// of a broadcast or multicast hop, else the neighbour table's: an unresolved hop holds
    /// the frame ([`Sent::Held`]; egress sends the ARP request or neighbour solicitation) and
    /// a stale one is used while it is refreshed. Then the Ethernet header goes in front and
    /// the frame to the driver ([`transmit`](Self::transmit)). `sender` decides the room the
    /// packet may take in the neighbour table ([`neighbor::Traffic`]) and whether it counts
    /// as a datagram out.
    ///
    /// Errors: no room in the neighbour table, no headroom for the Ethernet header, the link
    /// down or the driver's refusal (those two counted, the others left to the caller).
    #[inline(always)]
    pub(crate) fn send_ip(
        &mut self,
        mut frame: TxFrame,
        hop: Option<IpAddress>,
        iface: &Interface,
        now: Instant,
        counters: &Counters,
        sender: Sender,
    ) -> Result<Sent, DatagramError> {
        let (datagram, traffic) = match sender {
            Sender::Datagram => (true, neighbor::Traffic::Own),
            Sender::Tcp(t) => (false, t),
            Sender::EchoReply => (false, neighbor::Traffic::Unsolicited),
        };
        if let Some(hop) = hop {
            let HardwareAddress::Ethernet(our_mac) = iface.hardware_addr() else {
                return Err(DatagramError::Unaddressable);
            };
            let mac = match neighbor::group_mac(iface, hop) {
                Some(m) => m,
                None => match self.neighbors.lookup(hop, now, traffic, counters)? {
                    neighbor::Lookup::Known(m) => m,
                    neighbor::Lookup::Unknown => {
                        return self.neighbors.hold(frame, hop, datagram).map(Sent::Held)
                    }
                },
            };
            let ethertype = neighbor::ethertype_of(&frame);
            neighbor::push_ethernet(&mut frame, our_mac, mac, ethertype)?;
        }
        self.transmit(frame, counters)
            .map_err(DatagramError::Driver)?;
        if datagram {
            counters.datagram_out();
        }
        Ok(Sent::Out)
    }
}

/// Hands a finished frame to `driver`: the one place the stack transmits, counted as a frame
/// out, or as a drop with the driver's reason ([`Counters::tx_refused`]).
pub(crate) fn transmit(
    driver: &mut (dyn Driver + Send),
    frame: TxFrame,
    counters: &Counters,
) -> Result<(), TxError> {
    match driver.transmit(frame) {
        Ok(()) => {
            counters.frame_out();
            Ok(())
        }
        Err(e) => {
            counters.tx_refused(e);
            Err(e)
        }
    }
}
