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
    Capabilities, Driver, FramePool, HardwareAddress, InFlight, LinkState, Medium, PostedSlot,
    RxFrame, TxError, TxFrame,
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
}

/// A simulated NIC with an RX ring of `ring_size` slots and a TX queue of `tx_queue` entries.
#[derive(Debug)]
pub struct SimNic {
    pool: &'static FramePool,
    ring_size: usize,
    /// Posted slots in the order the device fills them.
    ring: VecDeque<PostedSlot>,
    /// Frames the device completed, not yet handed up.
    completed: VecDeque<RxFrame>,
    /// Woken by the device when it completes a frame (the "RX interrupt").
    rx_waker: Option<Waker>,
    tx_queue: usize,
    in_flight: VecDeque<InFlight>,
    /// Woken by the device when a TX completion makes room (the "TX interrupt").
    tx_waker: Option<Waker>,
    mtu: usize,
    tx_headroom: usize,
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
            stats: SimNicStats::default(),
        }
    }

    /// The same NIC demanding `n` bytes of TX headroom (like virtio-net's 12-byte header).
    pub fn with_tx_headroom(mut self, n: usize) -> Self {
        self.tx_headroom = n;
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
        let Some(mut slot) = self.ring.pop_front() else {
            self.stats.rx_dropped_no_buffer += 1;
            return false;
        };
        let n = bytes.len().min(slot.capacity());
        // The device's DMA write, not a copy made by zcnet.
        slot.buffer_mut()[..n].copy_from_slice(&bytes[..n]);
        match slot.complete(n) {
            Ok(frame) => self.completed.push_back(frame),
            Err(_) => unreachable!("n is at most the slot's capacity"),
        }
        self.stats.rx_frames += 1;
        if let Some(w) = self.rx_waker.take() {
            w.wake();
        }
        true
    }

    /// Device side: the oldest `n` transmitted frames complete; their slots go back to the pool.
    /// Returns the frames' bytes, oldest first.
    pub fn device_complete_tx(&mut self, n: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for _ in 0..n {
            let Some(frame) = self.in_flight.pop_front() else {
                break;
            };
            out.push(frame.to_vec());
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
        match self.completed.pop_front() {
            Some(frame) => {
                // Re-post right after the completion, so held frames drain spares, not the ring.
                self.refill(cx);
                Poll::Ready(frame)
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
        self.in_flight.push_back(frame.into_device());
        self.stats.tx_frames += 1;
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Medium::Ethernet, self.mtu)
            .with_tx_headroom(self.tx_headroom)
            .with_max_burst(Some(self.ring_size))
    }

    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet([0x02, 0, 0, 0, 0, 0x01])
    }

    fn poll_link_state(&mut self, _cx: &mut Context<'_>) -> LinkState {
        LinkState::Up
    }
}
