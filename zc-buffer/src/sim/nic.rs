//! [`SimNic`]: a simulated ring NIC that follows the [`Driver`] contract to the letter.
//!
//! The caller plays the device: [`SimNic::device_receive`] "DMAs" a frame into the oldest
//! posted slot (or drops it, counted, when the ring is empty), and
//! [`SimNic::device_complete_tx`] completes transmitted frames. The driver side — ring refill
//! after each completion, waker registration, TX checks — is what a real driver must do, so a
//! test (or the `pool-demo` example) can watch slots move between the ring, the stack and the
//! application.
//!
//! ```
//! use std::task::{Context, Poll, Waker};
//! use zcnet_buffer::sim::SimNic;
//! use zcnet_buffer::{Driver, FramePool, PoolConfig};
//!
//! let pool = FramePool::leak(PoolConfig::new(8)).unwrap();
//! let mut nic = SimNic::new(pool, 4, 2);
//! let mut cx = Context::from_waker(Waker::noop());
//!
//! // The first poll fills the ring; nothing has arrived yet.
//! assert!(nic.poll_receive(&mut cx).is_pending());
//! assert_eq!(nic.posted(), 4);
//!
//! // A frame arrives: it lands in a posted slot and the driver re-posts a fresh one.
//! assert!(nic.device_receive(b"hello"));
//! let Poll::Ready(frame) = nic.poll_receive(&mut cx) else { unreachable!() };
//! assert_eq!(&frame[..], b"hello");
//! assert_eq!(nic.posted(), 4);
//! drop(frame);
//! assert_eq!(pool.audit().unwrap().posted, 4);
//! ```

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};
use std::vec::Vec;

use crate::{
    Capabilities, ChecksumOffloads, ChecksumPartial, Driver, FramePool, GsoInfo, GsoKinds,
    GsoRequest, HardwareAddress, InFlightChain, LinkState, Medium, PostedSlot, RxChain, RxFrame,
    TxChain, TxError, TxFrame, MAX_CHAIN_SEGMENTS,
};

/// Counters a [`SimNic`] keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimNicStats {
    /// Frames the device wrote into posted slots.
    pub rx_frames: u64,
    /// Frames the device dropped because no slot was posted.
    pub rx_dropped_no_buffer: u64,
    /// Frames handed to the device for transmission.
    pub tx_frames: u64,
    /// Times the ring could not be topped up because the pool was empty.
    pub refill_stalls: u64,
    /// Packets larger than a slot dropped by [`poll_receive`](Driver::poll_receive), which
    /// hands up single frames (take them with
    /// [`poll_receive_chain`](Driver::poll_receive_chain)).
    pub rx_chains_refused: u64,
}

/// A packet the device transmitted, with the marks the stack put on it
/// ([`SimNic::device_complete_tx_marked`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentPacket {
    /// The packet's bytes (every frame of a chain, in order).
    pub bytes: Vec<u8>,
    /// Frames it was made of.
    pub frames: usize,
    /// The head frame's partial-checksum mark.
    pub checksum: Option<ChecksumPartial>,
    /// The head frame's segmentation request.
    pub gso: Option<GsoRequest>,
}

/// A simulated NIC with an RX ring of `ring_size` slots and a TX queue of `tx_queue` entries.
#[derive(Debug)]
pub struct SimNic {
    pool: &'static FramePool,
    ring_size: usize,
    /// Posted slots in the order the device fills them.
    ring: VecDeque<PostedSlot>,
    /// Packets the device completed, not yet handed up.
    completed: VecDeque<RxChain>,
    /// Woken by the device when it completes a frame (the "RX interrupt").
    rx_waker: Option<Waker>,
    tx_queue: usize,
    in_flight: VecDeque<InFlightChain>,
    /// Woken by the device when a TX completion makes room (the "TX interrupt").
    tx_waker: Option<Waker>,
    mtu: usize,
    tx_headroom: usize,
    /// Offloads advertised ([`SimNic::with_offloads`]).
    checksum: ChecksumOffloads,
    gso_max_size: usize,
    rx_chains: bool,
    stats: SimNicStats,
}

impl SimNic {
    /// A NIC over `pool` with an RX ring of `ring_size` slots and room for `tx_queue` frames in
    /// flight (further `poll_transmit_frame` calls are `Pending` until
    /// [`device_complete_tx`](Self::device_complete_tx) completes some). The ring is filled on
    /// the first `poll_receive`. MTU 1500, MAC `02:00:00:00:00:01`, no TX headroom.
    pub fn new(pool: &'static FramePool, ring_size: usize, tx_queue: usize) -> Self {
        Self {
            pool,
            ring_size,
            ring: VecDeque::with_capacity(ring_size),
            completed: VecDeque::new(),
            rx_waker: None,
            tx_queue,
            in_flight: VecDeque::with_capacity(tx_queue),
            tx_waker: None,
            mtu: 1500,
            tx_headroom: 0,
            checksum: ChecksumOffloads::empty(),
            gso_max_size: 0,
            rx_chains: false,
            stats: SimNicStats::default(),
        }
    }

    /// The same NIC demanding `n` bytes of TX headroom (like virtio-net's 12-byte header).
    pub fn with_tx_headroom(mut self, n: usize) -> Self {
        self.tx_headroom = n;
        self
    }

    /// The same NIC advertising offloads: `checksum` ([`Capabilities::checksum`]),
    /// segmentation of TCP super-segments up to `gso_max_size` bytes (0: none; IPv4 and IPv6),
    /// and, with `rx_chains`, packets larger than a slot received over several ring slots
    /// ([`device_receive_marked`](Self::device_receive_marked)). The test playing the device
    /// does the work: it reads the marks of what was sent
    /// ([`device_complete_tx_marked`](Self::device_complete_tx_marked)) and says what it
    /// verified on receive.
    pub fn with_offloads(
        mut self,
        checksum: ChecksumOffloads,
        gso_max_size: usize,
        rx_chains: bool,
    ) -> Self {
        self.checksum = checksum;
        self.gso_max_size = gso_max_size;
        self.rx_chains = rx_chains;
        self
    }

    /// Slots currently posted in the RX ring.
    pub fn posted(&self) -> usize {
        self.ring.len()
    }

    /// The counters.
    pub fn stats(&self) -> SimNicStats {
        self.stats
    }

    /// Frames in flight on the TX side.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Device side: a frame arrives from the wire. It lands in the oldest posted slot, or is
    /// dropped (and counted) when the ring is empty. Returns whether it landed.
    pub fn device_receive(&mut self, bytes: &[u8]) -> bool {
        self.device_receive_marked(bytes, false, None)
    }

    /// [`device_receive`](Self::device_receive) with the device's marks: `verified` sets
    /// [`RxFrame::checksum_verified`], `gso` [`RxFrame::gso_info`], on the packet's head frame.
    /// With `rx_chains` ([`with_offloads`](Self::with_offloads)), a packet larger than a slot
    /// fills as many posted slots as it needs (as merged receive buffers) and arrives as a
    /// chain; it is dropped, counted, when fewer are posted. Without, it is cut to one slot.
    pub fn device_receive_marked(
        &mut self,
        bytes: &[u8],
        verified: bool,
        gso: Option<GsoInfo>,
    ) -> bool {
        let cap = self.pool.slot_size();
        let needed = if self.rx_chains {
            bytes.len().div_ceil(cap).clamp(1, MAX_CHAIN_SEGMENTS)
        } else {
            1
        };
        if self.ring.len() < needed {
            self.stats.rx_dropped_no_buffer += 1;
            return false;
        }
        let mut chain = RxChain::new();
        let mut rest = bytes;
        for mut slot in self.ring.drain(..needed) {
            let n = rest.len().min(slot.capacity());
            // The device's DMA write, not a copy made by zcnet.
            slot.buffer_mut()[..n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            match slot.complete(n) {
                Ok(frame) => {
                    if chain.push(frame).is_err() {
                        unreachable!("needed <= MAX_CHAIN_SEGMENTS");
                    }
                }
                Err(_) => unreachable!("n is at most the slot's capacity"),
            }
        }
        if let Some(head) = chain.head_mut() {
            head.set_checksum_verified(verified);
            head.set_gso_info(gso);
        }
        self.completed.push_back(chain);
        self.stats.rx_frames += 1;
        if let Some(w) = self.rx_waker.take() {
            w.wake();
        }
        true
    }

    /// Device side: the oldest `n` transmitted frames complete; their slots go back to the pool.
    /// Returns the frames' bytes, oldest first.
    pub fn device_complete_tx(&mut self, n: usize) -> Vec<Vec<u8>> {
        self.device_complete_tx_marked(n)
            .into_iter()
            .map(|p| p.bytes)
            .collect()
    }

    /// [`device_complete_tx`](Self::device_complete_tx) with each packet's marks and frame
    /// count (a chain from [`Driver::transmit_chain`] is one packet).
    pub fn device_complete_tx_marked(&mut self, n: usize) -> Vec<SentPacket> {
        let mut out = Vec::new();
        for _ in 0..n {
            let Some(chain) = self.in_flight.pop_front() else {
                break;
            };
            let head = chain.frames().next();
            let mut bytes = Vec::with_capacity(chain.len());
            for part in chain.iter() {
                bytes.extend_from_slice(part);
            }
            out.push(SentPacket {
                bytes,
                frames: chain.frame_count(),
                checksum: head.and_then(|f| f.checksum_partial()),
                gso: head.and_then(|f| f.gso_request()),
            });
        }
        if !out.is_empty() {
            if let Some(w) = self.tx_waker.take() {
                w.wake();
            }
        }
        out
    }

    /// Tops the ring up to `ring_size`; when the pool is empty, registers `cx` for the next
    /// returned slot.
    fn refill(&mut self, cx: &mut Context<'_>) {
        while self.ring.len() < self.ring_size {
            match self.pool.poll_alloc_rx(cx) {
                Poll::Ready(slot) => self.ring.push_back(slot),
                Poll::Pending => {
                    self.stats.refill_stalls += 1;
                    break;
                }
            }
        }
    }
}

fn store_waker(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

impl Driver for SimNic {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        self.refill(cx);
        while let Some(mut chain) = self.completed.pop_front() {
            // Re-post right after the completion, so held frames drain spares, not the ring.
            self.refill(cx);
            match (chain.frame_count(), chain.pop_front()) {
                (1, Some(frame)) => return Poll::Ready(frame),
                _ => self.stats.rx_chains_refused += 1,
            }
        }
        store_waker(&mut self.rx_waker, cx);
        Poll::Pending
    }

    fn poll_receive_chain(&mut self, cx: &mut Context<'_>) -> Poll<RxChain> {
        self.refill(cx);
        match self.completed.pop_front() {
            Some(chain) => {
                self.refill(cx);
                Poll::Ready(chain)
            }
            None => {
                store_waker(&mut self.rx_waker, cx);
                Poll::Pending
            }
        }
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        if self.in_flight.len() >= self.tx_queue {
            store_waker(&mut self.tx_waker, cx);
            return Poll::Pending;
        }
        self.pool.poll_alloc_tx(cx)
    }

    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.in_flight.len() >= self.tx_queue {
            store_waker(&mut self.tx_waker, cx);
            return Poll::Pending;
        }
        Poll::Ready(())
    }

    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        if frame.gso_request().is_some() {
            // May be longer than the MTU: checked against the GSO size.
            return self.transmit_chain(TxChain::from_frame(frame));
        }
        let max = self.capabilities().max_frame_len();
        if frame.len() > max {
            return Err(TxError::TooLong {
                len: frame.len(),
                max,
            });
        }
        if frame.headroom() < self.tx_headroom {
            return Err(TxError::NoHeadroom);
        }
        if self.in_flight.len() >= self.tx_queue {
            // The contract says poll_transmit_frame first; a caller that skipped it still loses
            // no frame silently: it gets an error and the slot returns to the pool.
            return Err(TxError::Device);
        }
        self.in_flight
            .push_back(TxChain::from_frame(frame).into_device());
        self.stats.tx_frames += 1;
        Ok(())
    }

    /// Takes a chain as one packet: up to the MTU, or with a GSO request up to
    /// [`with_offloads`](SimNic::with_offloads)' `gso_max_size` (refused with
    /// [`TxError::ChainUnsupported`] when it is 0).
    fn transmit_chain(&mut self, chain: TxChain) -> Result<(), TxError> {
        let frames = chain.frame_count();
        let Some(head) = chain.head() else {
            return Err(TxError::ChainUnsupported { frames });
        };
        let max = match head.gso_request() {
            None => self.capabilities().max_frame_len(),
            Some(_) if self.gso_max_size == 0 => {
                return Err(TxError::ChainUnsupported { frames });
            }
            Some(_) => self.gso_max_size + crate::ETHERNET_HEADER_LEN,
        };
        if chain.len() > max {
            return Err(TxError::TooLong {
                len: chain.len(),
                max,
            });
        }
        if chain.headroom() < self.tx_headroom {
            return Err(TxError::NoHeadroom);
        }
        if self.in_flight.len() >= self.tx_queue {
            return Err(TxError::Device);
        }
        self.in_flight.push_back(chain.into_device());
        self.stats.tx_frames += 1;
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Medium::Ethernet, self.mtu)
            .with_tx_headroom(self.tx_headroom)
            .with_max_burst(Some(self.ring_size))
            .with_checksum(self.checksum)
            .with_gso(self.gso_max_size, GsoKinds::TCPV4.union(GsoKinds::TCPV6))
            .with_rx_chains(self.rx_chains)
    }

    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet([0x02, 0, 0, 0, 0, 0x01])
    }

    fn poll_link_state(&mut self, _cx: &mut Context<'_>) -> LinkState {
        LinkState::Up
    }
}
