//! An in-memory wire: two [`Driver`]s linked back to back, so two stacks can talk inside one
//! process, with seeded fault injection (loss, reorder, duplication, corruption, delay, MTU).
//!
//! A transmitted frame's bytes are carried to the other end and written into a slot of *its*
//! pool when it receives them: that write plays the receiving NIC's DMA, so it is not recorded in
//! the copy ledger (zcnet's own copies are). The sender's slot returns to its pool at once, as
//! after a completed transmission.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use zcnet_buffer::{
    Capabilities, ChecksumOffloads, Driver, FramePool, HardwareAddress, LinkState, Medium, RxFrame,
    TxError, TxFrame,
};
use zcnet_executor::time::Sleep;
use zcnet_executor::{Executor, Instant};

/// Faults applied to every frame crossing the wire, each with its own probability (0.0 ..= 1.0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Faults {
    /// Seed of the wire's random number generator (each direction derives its own).
    pub seed: u64,
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame is delivered after the one behind it.
    pub reorder: f64,
    /// Probability that a frame is delivered twice.
    pub duplicate: f64,
    /// Probability that one byte of a frame is flipped.
    pub corrupt: f64,
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Largest frame the wire carries (link header included); longer frames are dropped.
    pub mtu: usize,
    /// Frames in flight per direction before the wire tail-drops.
    pub capacity: usize,
}

impl Default for Faults {
    /// A perfect wire: no faults, no delay, 1514-byte frames, 1024 frames in flight.
    fn default() -> Self {
        Self {
            seed: 1,
            loss: 0.0,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            delay: Duration::ZERO,
            mtu: 1514,
            capacity: 1024,
        }
    }
}

/// What one direction of the wire did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Frames handed to the wire.
    pub sent: u64,
    /// Frames delivered to the receiver's pool.
    pub delivered: u64,
    /// Frames lost on purpose.
    pub lost: u64,
    /// Frames delivered out of order on purpose.
    pub reordered: u64,
    /// Extra copies delivered on purpose.
    pub duplicated: u64,
    /// Frames with a flipped byte.
    pub corrupted: u64,
    /// Frames over the MTU, dropped.
    pub too_long: u64,
    /// Frames dropped because the wire was full.
    pub overflow: u64,
}

/// xorshift64*: seeded, reproducible.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

#[derive(Debug)]
struct Direction {
    faults: Faults,
    rng: Rng,
    queue: VecDeque<(Instant, Vec<u8>)>,
    rx_waker: Option<Waker>,
    stats: WireStats,
    /// Everything sent this way is lost (a pulled cable), counted as `lost`.
    cut: bool,
}

#[derive(Debug)]
struct Shared {
    /// `dirs[0]`: from end 0 to end 1; `dirs[1]`: from end 1 to end 0.
    dirs: [Mutex<Direction>; 2],
}

/// One end of the wire: a [`Driver`] over its own pool.
pub struct WireEnd {
    side: usize,
    shared: Arc<Shared>,
    pool: &'static FramePool,
    exec: &'static Executor,
    mac: [u8; 6],
    /// Wakes this end when the next delayed frame becomes due.
    timer: Pin<Box<Sleep>>,
    timer_at: Option<Instant>,
}

impl std::fmt::Debug for WireEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireEnd").field("side", &self.side).finish()
    }
}

/// Two linked ends. End `i` uses `pools[i]` and MAC `02:00:00:00:00:0i+1`.
pub fn wire_pair(
    exec: &'static Executor,
    pools: [&'static FramePool; 2],
    faults: Faults,
) -> (WireEnd, WireEnd) {
    let dir = |k: u64| {
        Mutex::new(Direction {
            faults,
            rng: Rng(faults
                .seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(k)
                | 1),
            queue: VecDeque::new(),
            rx_waker: None,
            stats: WireStats::default(),
            cut: false,
        })
    };
    let shared = Arc::new(Shared {
        dirs: [dir(1), dir(2)],
    });
    let end = |side: usize| WireEnd {
        side,
        shared: shared.clone(),
        pool: pools[side],
        exec,
        mac: [0x02, 0, 0, 0, 0, side as u8 + 1],
        timer: Box::pin(exec.sleep_until(Instant::MAX)),
        timer_at: None,
    };
    (end(0), end(1))
}

impl WireEnd {
    /// What the direction leaving this end did.
    pub fn tx_stats(&self) -> WireStats {
        self.shared.dirs[self.side].lock().unwrap().stats
    }

    /// Cuts (`true`) or restores the direction leaving this end: while cut, every frame sent
    /// from here is lost.
    pub fn set_cut(&self, cut: bool) {
        self.shared.dirs[self.side].lock().unwrap().cut = cut;
    }

    /// The MAC address of this end.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Puts `frame` on the wire as if this end had transmitted it, bypassing this end's stack
    /// (for frames the stack cannot build, e.g. a router advertisement). It arrives at the
    /// other end now, unaffected by faults, and is counted as sent and delivered normally.
    pub fn inject(&self, frame: &[u8]) {
        let now = self.exec.now();
        let mut dir = self.shared.dirs[self.side].lock().unwrap();
        dir.stats.sent += 1;
        dir.queue.push_back((now, frame.to_vec()));
        if let Some(w) = dir.rx_waker.take() {
            w.wake();
        }
    }
}

impl Driver for WireEnd {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        let now = self.exec.now();
        let mut dir = self.shared.dirs[1 - self.side].lock().unwrap();
        let due = match dir.queue.front() {
            None => {
                dir.rx_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            Some((at, _)) => *at,
        };
        if due > now {
            dir.rx_waker = Some(cx.waker().clone());
            drop(dir);
            if self.timer_at != Some(due) {
                self.timer.as_mut().reset(due);
                self.timer_at = Some(due);
            }
            if self.timer.as_mut().poll(cx).is_ready() {
                self.timer_at = None;
                cx.waker().wake_by_ref();
            }
            return Poll::Pending;
        }
        // The receiving NIC needs a buffer; without one the frame waits (the pool wakes us).
        let mut slot = match self.pool.poll_alloc_rx(cx) {
            Poll::Ready(s) => s,
            Poll::Pending => return Poll::Pending,
        };
        let (_, bytes) = dir.queue.pop_front().expect("front exists");
        dir.stats.delivered += 1;
        drop(dir);
        let n = bytes.len().min(slot.capacity());
        slot.buffer_mut()[..n].copy_from_slice(&bytes[..n]); // the receiving NIC's DMA
        match slot.complete(n) {
            Ok(f) => Poll::Ready(f),
            Err(_) => unreachable!("n <= capacity"),
        }
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.pool.poll_alloc_tx(cx)
    }

    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        let now = self.exec.now();
        let mut dir = self.shared.dirs[self.side].lock().unwrap();
        let d = &mut *dir;
        d.stats.sent += 1;
        if frame.len() > d.faults.mtu {
            d.stats.too_long += 1;
            return Err(TxError::TooLong {
                len: frame.len(),
                max: d.faults.mtu,
            });
        }
        let bytes = frame.to_vec();
        drop(frame.into_device()); // "transmitted": the sender's slot is free again
        if d.cut || d.rng.chance(d.faults.loss) {
            d.stats.lost += 1;
            return Ok(());
        }
        let copies = if d.rng.chance(d.faults.duplicate) {
            d.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            if d.queue.len() >= d.faults.capacity {
                d.stats.overflow += 1;
                continue;
            }
            let mut b = bytes.clone();
            if d.rng.chance(d.faults.corrupt) && !b.is_empty() {
                let i = (d.rng.next() % b.len() as u64) as usize;
                b[i] ^= 1 << (d.rng.next() % 8);
                d.stats.corrupted += 1;
            }
            let at = now + d.faults.delay;
            if d.rng.chance(d.faults.reorder) && !d.queue.is_empty() {
                // Deliver ahead of the last queued frame (which then arrives after this one).
                let last = d.queue.len() - 1;
                let t = d.queue[last].0;
                d.queue.insert(last, (t, b));
                d.stats.reordered += 1;
            } else {
                d.queue.push_back((at, b));
            }
        }
        if let Some(w) = d.rx_waker.take() {
            w.wake();
        }
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        let mtu = self.shared.dirs[self.side].lock().unwrap().faults.mtu;
        Capabilities {
            medium: Medium::Ethernet,
            mtu: mtu - zcnet_buffer::ETHERNET_HEADER_LEN,
            tx_headroom: 0,
            checksum: ChecksumOffloads::empty(),
            max_burst: None,
        }
    }

    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet(self.mac)
    }

    fn poll_link_state(&mut self, _cx: &mut Context<'_>) -> LinkState {
        LinkState::Up
    }
}

use std::future::Future;
