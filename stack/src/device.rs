//! The smoltcp adapter: a [`Driver`] seen as a `smoltcp::phy::Device` for one step of ingress or
//! egress.
//!
//! * The RX token lends the [`RxFrame`]'s bytes to smoltcp and drops the frame (its slot goes
//!   back to the pool) when smoltcp is done with them.
//! * A TX token owns a [`TxFrame`] and lets smoltcp write the frame straight into the slot: no
//!   copy at the device boundary. A TX token dropped without `consume` drops its frame, which
//!   returns the slot (smoltcp #1147).
//! * Egress asks the driver for a frame in `transmit()`: when the driver has none, smoltcp is told
//!   so (`None`) and the adapter remembers it (`starved`), so egress waits for the driver's
//!   TX-completion waker instead of retrying.
//! * Every received frame comes with a TX token for a reply (reserved before smoltcp sees the
//!   frame), yet most frames (TCP data and ACKs) need none. An unused reply frame is kept as the
//!   stack's *spare* (`State::spare_tx`) rather than returned to the pool, and the next reply
//!   token or egress transmission takes the spare first: one pool round trip saved per received
//!   frame. The stack so holds at most one TX slot beyond its scratch frame.

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
    let pick = |tx: ChecksumOffloads, rx: ChecksumOffloads| {
        let o = caps.checksum;
        match (o.contains(tx), o.contains(rx)) {
            (false, false) => Checksum::Both,
            (true, false) => Checksum::Rx, // device computes on TX; smoltcp still verifies
            (false, true) => Checksum::Tx, // device verified on RX; smoltcp still computes
            (true, true) => Checksum::None,
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

/// One step's device: at most one received frame, and TX frames on demand.
pub(crate) struct StepDevice<'s> {
    pub(crate) driver: &'s mut (dyn Driver + Send),
    /// Registered with the driver when it has no TX frame. Always the egress task's waker once
    /// egress has run: the driver keeps one TX waiter, and egress owns it (it wakes ingress when
    /// ingress was the one waiting; see `runner.rs`).
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
    /// The stack's spare TX frame (see the module docs): taken before asking the driver, and
    /// refilled by a reply token dropped unused.
    pub(crate) spare: &'s mut Option<TxFrame>,
}

impl StepDevice<'_> {
    /// Asks the driver for a TX frame with the driver's headroom reserved; records starvation
    /// (`tx_waker` is then registered for the TX completion).
    ///
    /// Never inlined, on purpose: inlined, its body (the `dyn Driver` call, headroom, the
    /// starvation path) makes smoltcp's `respond` closure in `Interface::socket_egress` too big
    /// to inline, and the out-of-line closure then copies smoltcp's 256-byte `Packet` once per
    /// transmitted frame to pass it on by value. The copies benchmark
    /// (`cargo bench -p zcnet-benches --bench copies`) shows that copy when it comes back.
    #[inline(never)]
    fn tx_frame(&mut self) -> Option<TxFrame> {
        if let Some(frame) = self.spare.take() {
            return Some(frame);
        }
        match self
            .driver
            .poll_transmit_frame(&mut Context::from_waker(self.tx_waker))
        {
            Poll::Ready(mut frame) => {
                if frame.set_headroom(self.tx_headroom).is_err() {
                    self.counters.drop(DropReason::TxHeadroom);
                    return None;
                }
                Some(frame)
            }
            Poll::Pending => {
                self.starved = true;
                None
            }
        }
    }

    fn token(&mut self, frame: TxFrame) -> FrameTx<'_> {
        FrameTx {
            frame: Some(frame),
            driver: &mut *self.driver,
            counters: self.counters,
            scratch: &mut *self.scratch,
            spare: &mut *self.spare,
        }
    }
}

impl phy::Device for StepDevice<'_> {
    type RxToken<'a>
        = FrameRx
    where
        Self: 'a;
    type TxToken<'a>
        = FrameTx<'a>
    where
        Self: 'a;

    fn receive(&mut self, _now: SmolInstant) -> Option<(FrameRx, FrameTx<'_>)> {
        // Reserve the reply frame first, so a frame is never handed to smoltcp without a way to
        // answer it; without one the frame stays in `rx` and the caller keeps it for later.
        let rx = self.rx.take()?;
        match self.tx_frame() {
            Some(frame) => Some((FrameRx(rx), self.token(frame))),
            None => {
                self.rx = Some(rx);
                None
            }
        }
    }

    fn transmit(&mut self, _now: SmolInstant) -> Option<FrameTx<'_>> {
        let frame = self.tx_frame()?;
        Some(self.token(frame))
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

/// A TX frame smoltcp writes a whole frame into. Dropped without `consume`, it leaves its
/// (still empty) frame as the stack's spare.
pub(crate) struct FrameTx<'a> {
    /// `Some` until `consume` takes it.
    frame: Option<TxFrame>,
    driver: &'a mut (dyn Driver + Send),
    counters: &'a Counters,
    scratch: &'a mut [u8],
    spare: &'a mut Option<TxFrame>,
}

impl phy::TxToken for FrameTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(mut self, len: usize, f: F) -> R {
        let Some(mut frame) = self.frame.take() else {
            unreachable!("a token is consumed once")
        };
        if frame.set_len(len).is_err() || len > self.scratch.len() {
            // The stack sizes smoltcp's MTU to fit a slot, so this does not happen; if it did,
            // the frame is built into scratch space and dropped, counted.
            self.counters.drop(DropReason::TxTooLong);
            let n = len.min(self.scratch.len());
            return f(&mut self.scratch[..n]);
        }
        let r = f(&mut frame);
        match self.driver.transmit(frame) {
            Ok(()) => self.counters.frame_out(),
            Err(_) => self.counters.drop(DropReason::TxDriver),
        }
        r
    }
}

impl Drop for FrameTx<'_> {
    fn drop(&mut self) {
        if let Some(frame) = self.frame.take() {
            // Unused (no reply to this frame): empty, headroom reserved; keep it for next time.
            *self.spare = Some(frame);
        }
    }
}
