//! The smoltcp adapter: a [`Driver`] seen as a `smoltcp::phy::Device` for one step of ingress or
//! egress.
//!
//! * The RX token lends the [`RxFrame`]'s bytes to smoltcp and drops the frame (its slot goes
//!   back to the pool) when smoltcp is done with them.
//! * A TX token lets smoltcp write the frame straight into a [`TxFrame`] slot reserved for it:
//!   no copy at the device boundary. A TX token dropped without `consume` (smoltcp #1147) loses
//!   nothing: its frame stays reserved as the spare (below), and no slot leaks.
//! * Egress asks the driver for a frame in `transmit()`: when the driver has none, smoltcp is told
//!   so (`None`) and the adapter remembers it (`starved`), so egress waits for the driver's
//!   TX-completion waker instead of retrying.
//! * Every received frame comes with a TX token for a reply, reserved before smoltcp sees the
//!   frame, yet most frames need none. The reserved frame is the stack's *spare*
//!   (`State::spare_tx`): a token only refers to it, `consume` takes it, and a token dropped
//!   unused leaves it there for the next reply token or egress transmission (zcnet's TCP,
//!   `transport/tcp/`, reserves and takes the same spare for its segments). One pool
//!   round trip saved per received frame; the stack so holds at most one TX slot beyond its
//!   scratch frame.

use core::task::{Context, Poll, Waker};

use smoltcp::phy::{self, Checksum, ChecksumCapabilities, DeviceCapabilities};
use smoltcp::time::Instant as SmolInstant;
use zcnet_buffer::{ChecksumOffloads, Driver, Medium, RxFrame, TxFrame};

use crate::stats::{Counters, DropReason};

/// smoltcp's view of a driver's capabilities.
pub(crate) fn smoltcp_caps(caps: &zcnet_buffer::Capabilities) -> DeviceCapabilities {
    let mut c = DeviceCapabilities::default();
    c.medium = match caps.medium {
        Medium::Ethernet => phy::Medium::Ethernet,
        Medium::Ip => phy::Medium::Ip,
    };
    // smoltcp counts the Ethernet header in the MTU.
    c.max_transmission_unit = caps.max_frame_len();
    c.max_burst_size = caps.max_burst;
    // Transmit offloads complete a partial checksum the sender marks on the frame
    // (`ChecksumOffloads`): smoltcp cannot mark the frames it builds, so it computes every
    // transmit checksum itself; zcnet's TCP uses the offload (`LinkLayer::tcp_tx_partial`).
    let pick = |_tx: ChecksumOffloads, rx: ChecksumOffloads| {
        if caps.checksum.contains(rx) {
            Checksum::Tx // device verified on RX; software still computes
        } else {
            Checksum::Both
        }
    };
    let mut ck = ChecksumCapabilities::default();
    ck.ipv4 = pick(ChecksumOffloads::IPV4_TX, ChecksumOffloads::IPV4_RX);
    ck.udp = pick(ChecksumOffloads::UDP_TX, ChecksumOffloads::UDP_RX);
    ck.tcp = pick(ChecksumOffloads::TCP_TX, ChecksumOffloads::TCP_RX);
    ck.icmpv4 = pick(ChecksumOffloads::ICMP_TX, ChecksumOffloads::ICMP_RX);
    ck.icmpv6 = pick(ChecksumOffloads::ICMP_TX, ChecksumOffloads::ICMP_RX);
    c.checksum = ck;
    c
}

/// Looks at every frame smoltcp transmits through a [`StepDevice`], once it is written: the
/// layers above learn what their protocols asked, and of whom (`ip/asked.rs`).
pub(crate) trait TxWatch {
    /// `frame` (link-layer header first) goes to the driver now.
    fn sent(&mut self, frame: &[u8]);
}

/// One step's device: at most one received frame, and TX frames on demand.
pub(crate) struct StepDevice<'s> {
    pub(crate) driver: &'s mut (dyn Driver + Send),
    /// Registered with the driver when it has no TX frame. Always the egress task's waker once
    /// egress has run: the driver keeps one TX waiter, and egress owns it (it wakes ingress when
    /// ingress was the one waiting; see `runner/ingress.rs`).
    pub(crate) tx_waker: &'s Waker,
    pub(crate) rx: Option<RxFrame>,
    pub(crate) caps: DeviceCapabilities,
    pub(crate) tx_headroom: usize,
    pub(crate) counters: &'s Counters,
    /// MTU-sized scratch space, written only when a frame cannot hold what smoltcp builds (the
    /// frame is then dropped and counted, never a panic).
    pub(crate) scratch: &'s mut [u8],
    /// Set when the driver had no TX frame: `tx_waker` is registered for the completion that
    /// frees one.
    pub(crate) starved: bool,
    /// The stack's spare TX frame (see the module docs): the frame a live token writes into,
    /// filled by `reserve` and emptied only by `consume`.
    pub(crate) spare: &'s mut Option<TxFrame>,
    /// An ingress step: frames written are answers to the received frame, and `refused`
    /// records whether one refuses it (see `ip/check.rs`).
    pub(crate) ingress: bool,
    /// An answer written in this ingress step refused the received frame (a TCP reset, an ICMP
    /// destination unreachable, an ICMPv6 parameter problem for an unknown next header).
    pub(crate) refused: bool,
    /// Shown every frame smoltcp transmits.
    pub(crate) watch: Option<&'s mut dyn TxWatch>,
}

impl StepDevice<'_> {
    /// Makes sure the spare holds a TX frame, asking the driver for one (with the driver's
    /// headroom reserved) when it is empty; `false` when the driver has none (starvation is
    /// recorded and `tx_waker` is registered for the TX completion) or the frame cannot take
    /// the headroom.
    ///
    /// Never inlined, on purpose: inlined, its body (the `dyn Driver` call, headroom, the
    /// starvation path) makes smoltcp's `respond` closure in `Interface::socket_egress` too big
    /// to inline, and the out-of-line closure then copies smoltcp's 256-byte `Packet` once per
    /// transmitted frame to pass it on by value. The copies benchmark
    /// (`cargo bench -p zcnet-benches --bench copies`) shows that copy when it comes back.
    #[inline(never)]
    fn reserve(&mut self) -> bool {
        if self.spare.is_some() {
            return true;
        }
        match self
            .driver
            .poll_transmit_frame(&mut Context::from_waker(self.tx_waker))
        {
            Poll::Ready(mut frame) => {
                if frame.set_headroom(self.tx_headroom).is_err() {
                    self.counters.drop(DropReason::TxHeadroom);
                    return false;
                }
                *self.spare = Some(frame);
                true
            }
            Poll::Pending => {
                self.starved = true;
                false
            }
        }
    }
}

impl<'s> phy::Device for StepDevice<'s> {
    type RxToken<'a>
        = FrameRx
    where
        Self: 'a;
    type TxToken<'a>
        = FrameTx<'a, 's>
    where
        Self: 'a;

    fn receive(&mut self, _now: SmolInstant) -> Option<(FrameRx, FrameTx<'_, 's>)> {
        // Reserve the reply frame first, so a frame is never handed to smoltcp without a way to
        // answer it; without one the frame stays in `rx` and the caller keeps it for later.
        let rx = self.rx.take()?;
        if self.reserve() {
            Some((FrameRx(rx), FrameTx(self)))
        } else {
            self.rx = Some(rx);
            None
        }
    }

    fn transmit(&mut self, _now: SmolInstant) -> Option<FrameTx<'_, 's>> {
        if self.reserve() {
            Some(FrameTx(self))
        } else {
            None
        }
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.caps.clone()
    }
}

/// Lends a received frame's bytes to smoltcp.
pub(crate) struct FrameRx(RxFrame);

impl phy::RxToken for FrameRx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
        // The frame drops here: its slot returns to the pool.
    }
}

/// A TX token: the right to write one frame into the stack's spare TX frame, which
/// [`StepDevice::reserve`] filled before the token was made. Dropped without `consume`, it
/// leaves the (still empty) frame where it is, as the spare for the next token.
///
/// One pointer, on purpose: smoltcp moves its tokens by value through several `Result`s and
/// closures per transmitted frame (`lookup_hardware_addr`, `dispatch_ip`), and a token that
/// carried the frame and its device's references (72 bytes) showed in profiles as stalled
/// stores and reloads on every one of those moves.
pub(crate) struct FrameTx<'a, 's>(&'a mut StepDevice<'s>);

impl phy::TxToken for FrameTx<'_, '_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let dev = self.0;
        let Some(mut frame) = dev.spare.take() else {
            unreachable!("a token exists only while the spare holds its frame")
        };
        if frame.set_len(len).is_err() || len > dev.scratch.len() {
            // The stack sizes smoltcp's MTU to fit a slot, so this does not happen; if it did,
            // the frame is built into scratch space and dropped, counted (the empty frame
            // stays the spare).
            frame.set_len(0).ok();
            *dev.spare = Some(frame);
            dev.counters.drop(DropReason::TxTooLong);
            let n = len.min(dev.scratch.len());
            return f(&mut dev.scratch[..n]);
        }
        let r = f(&mut frame);
        if dev.ingress {
            // Answers during ingress are rare (most replies go out from egress): a look at
            // this one's headers tells whether smoltcp refused the received frame.
            dev.refused |= is_refusal(dev.caps.medium, &frame);
        }
        if let Some(w) = dev.watch.as_deref_mut() {
            w.sent(&frame);
        }
        let _ = super::transmit(&mut *dev.driver, frame, dev.counters);
        r
    }
}

/// Whether `frame`, which smoltcp wrote in answer to a received frame, refuses it: a TCP
/// reset, an ICMP destination unreachable, or an ICMPv6 parameter problem for an unknown next
/// header.
pub(crate) fn is_refusal(medium: smoltcp::phy::Medium, frame: &[u8]) -> bool {
    use smoltcp::phy::Medium;
    use smoltcp::wire::{EthernetFrame, IpProtocol, Ipv4Packet, Ipv6Packet};

    let ip = match medium {
        Medium::Ethernet => match EthernetFrame::new_checked(frame) {
            Ok(eth) => eth.payload(),
            Err(_) => return false,
        },
        _ => frame,
    };
    let (proto, payload) = match ip.first().map(|b| b >> 4) {
        Some(4) => match Ipv4Packet::new_checked(ip) {
            Ok(p) => (p.next_header(), p.payload()),
            Err(_) => return false,
        },
        Some(6) => match Ipv6Packet::new_checked(ip) {
            Ok(p) => (p.next_header(), p.payload()),
            Err(_) => return false,
        },
        _ => return false,
    };
    /// ICMPv4 destination unreachable; ICMPv6 destination unreachable and parameter problem,
    /// with that one's code for an unrecognised next header.
    const V4_UNREACHABLE: u8 = 3;
    const V6_UNREACHABLE: u8 = 1;
    const V6_PARAM_PROBLEM: u8 = 4;
    const V6_UNKNOWN_NEXT_HEADER: u8 = 1;
    match (proto, payload) {
        (IpProtocol::Icmp, [ty, ..]) => *ty == V4_UNREACHABLE,
        (IpProtocol::Icmpv6, [ty, code, ..]) => {
            *ty == V6_UNREACHABLE || (*ty == V6_PARAM_PROBLEM && *code == V6_UNKNOWN_NEXT_HEADER)
        }
        _ => false,
    }
}
