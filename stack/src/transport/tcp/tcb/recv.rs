//! [`RecvBuffer`]: the connection's received data, the only way the state machine touches
//! received payload.
//!
//! Received payload stays in the frame it arrived in. A segment the state machine accepts is
//! handed over as its [`RxFrame`], trimmed to the accepted payload (`advance` / `truncate`,
//! no copy), and queued: in order, behind the data the application has not read yet, or out
//! of order, until the hole before it fills (the connection's `Assembler` tracks the holes;
//! this buffer keeps the frames). Both share one ring of places, one per frame of the slot
//! budget ([`FrameRing`]): inside the connection for budgets up to [`INLINE_FRAMES`] (nothing
//! allocated, and the only form without the `alloc` feature), allocated once when the socket
//! opens for larger ones (with `alloc`, up to [`MAX_SEGMENTS`]), so the memory grows with the
//! buffer the socket asked for: 32 bytes per frame of budget (see `TcpBuffers`).
//!
//! Two bounds limit what the buffer holds:
//!
//! * **bytes**: the capacity the socket was opened with (in-order bytes not read yet), as the
//!   byte ring had; window scaling is derived from it;
//! * **slots**: a budget of pool slots ([`slot_budget`]): frames queued in order, frames
//!   queued out of order, and frames the application holds through `recv_segment`. The
//!   advertised window is at most the free slots times a full segment's payload
//!   ([`window`](RecvBuffer::window)),
//!   and zero once in-order frames and the application's segments spend the whole budget
//!   ([`budget_spent`](RecvBuffer::budget_spent)).
//!
//! The only copies of payload bytes here: a small in-order segment (under [`COPY_BREAK`]
//! bytes) is copied into the unused tail of the frame queued before it
//! ([`RxFrame::append_from`], ledger [`CopySite::CopyBreak`]) so that it does not pin a slot
//! of its own; and `dequeue_slice` (the application's `read`) copies frames → the caller's
//! buffer ([`CopySite::SocketToApp`]).
//!
//! Out-of-order frames give way first. A connection keeps at most a quarter of its pool's slots
//! in them ([`OOO_POOL_SHARE`]), so that they never take the slots the driver needs to receive
//! the segment filling the hole; past that (or the budget) an out-of-order segment is dropped.
//! When an in-order segment finds the budget full, or when the pool ran dry since the last
//! out-of-order segment ([`PoolStats::rx_exhausted`] moved, a cheap read), the out-of-order
//! queue is dropped (the caller clears the assembler and counts it). The peer sends that data
//! again; acknowledged data is never dropped.
//!
//! | who | what |
//! |---|---|
//! | state machine | `capacity`, `len`, `is_empty`, `window` (what we may advertise) |
//! | state machine | `fits_in_order`, `fits_out_of_order`, `pool_pressure`, `purge_out_of_order`: room checks |
//! | state machine | `accept`: queue a segment's frame (in order or not) and make the next `contig` bytes readable |
//! | state machine | `clear`: forget everything (connection reset) |
//! | application | `dequeue_with`, `dequeue_slice`, `pop_segment`, `release_segments` (and `peek`, `peek_slice` for the tests) |
//!
//! [`PoolStats::rx_exhausted`]: zcnet_buffer::PoolStats::rx_exhausted
//! [`INLINE_FRAMES`]: super::ring::INLINE_FRAMES

use super::ring::{FrameRing, MAX_FRAMES};
use zcnet_buffer::ledger::{self, CopySite};
use zcnet_buffer::RxFrame;

/// The largest slot budget: 4,096 frames with the `alloc` feature (a 4 MiB receive buffer at
/// one frame per KiB; the places are allocated when the socket opens past
/// [`INLINE_FRAMES`](super::ring::INLINE_FRAMES)), that many without.
pub(crate) const MAX_SEGMENTS: usize = MAX_FRAMES;

/// The smallest slot budget: even a socket opened with a tiny byte capacity may hold this many
/// frames (a few out-of-order segments beside the in-order one).
pub(crate) const MIN_SEGMENTS: usize = 4;

/// Bytes of capacity per slot of budget when the budget is derived from a byte capacity
/// ([`slot_budget`]): a 2 KiB slot carries at most one MSS (1460 bytes on Ethernet), so one
/// slot per KiB leaves room for segments smaller than a full MSS.
pub(crate) const BYTES_PER_SLOT: usize = 1024;

/// In-order segments shorter than this are copied into the tail of the frame queued before
/// them (when it has room) instead of keeping their own slot: an interactive stream of small
/// segments then costs one slot, not one per segment.
pub(crate) const COPY_BREAK: usize = 256;

/// A connection keeps at most `1 / OOO_POOL_SHARE` of its pool's slots in out-of-order
/// frames: frames waiting for a hole must never take the slots the driver needs to receive
/// the segment that fills it (a pool full of them would stall every connection on it).
pub(crate) const OOO_POOL_SHARE: usize = 4;

/// The slot budget of a socket opened with `bytes` of receive capacity (one frame per KiB):
/// `clamp(ceil(bytes / BYTES_PER_SLOT), MIN_SEGMENTS, MAX_SEGMENTS)`.
pub(crate) fn slot_budget(bytes: usize) -> usize {
    bytes
        .div_ceil(BYTES_PER_SLOT)
        .clamp(MIN_SEGMENTS, MAX_SEGMENTS)
}

/// A queued frame.
#[derive(Debug)]
struct Seg {
    /// Stream position of its first byte (see [`RecvBuffer::end`]).
    start: u64,
    /// The payload, trimmed (never empty).
    frame: RxFrame,
}

impl Seg {
    /// Stream position one past its last byte.
    fn end(&self) -> u64 {
        self.start + self.frame.len() as u64
    }
}

/// The queued frames, oldest first, one place per frame of the slot budget.
type SegQueue = FrameRing<Seg>;

/// Segments dropped by the receive buffer since the stack last asked
/// ([`RecvBuffer::take_drops`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RxDrops {
    /// Segments whose data could not be held (slot budget full): not acknowledged.
    pub(crate) budget: u32,
    /// Out-of-order frames dropped to make room (budget full, or the pool ran dry).
    pub(crate) purged: u32,
}

/// Received data: in-order frames the application has not read yet, then out-of-order frames
/// waiting for the hole before them to fill (see the module docs).
#[derive(Debug)]
pub(crate) struct RecvBuffer {
    /// Largest number of in-order bytes held (the byte bound of the window).
    capacity: usize,
    /// Most frames held at once (in order, out of order, held by the application).
    budget: usize,
    /// The frames: the first `in_order` in order, oldest first, then the out-of-order ones
    /// sorted by `start`. One place per frame of the budget.
    segs: SegQueue,
    /// How many of `segs` are in order.
    in_order: usize,
    /// In-order bytes (the sum of the lengths of the in-order frames).
    len: usize,
    /// Stream position one past the in-order data: a running count of the bytes made
    /// readable (offsets given by the state machine are relative to it).
    end: u64,
    /// Frames the application holds (`pop_segment` minus `release_segments`).
    held: usize,
    /// The pool's `rx_exhausted` count when the last out-of-order segment came.
    exhausted_seen: u64,
    /// Drops since `take_drops`.
    drops: RxDrops,
}

impl RecvBuffer {
    /// An empty buffer of `capacity` bytes and the slot budget [`slot_budget`] derives from it.
    pub(crate) fn new(capacity: usize) -> Self {
        let budget = slot_budget(capacity);
        Self {
            capacity,
            budget,
            segs: SegQueue::new(budget),
            in_order: 0,
            len: 0,
            end: 0,
            held: 0,
            exhausted_seen: 0,
            drops: RxDrops::default(),
        }
    }

    /// Bytes the buffer holds at most.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Sets the slot budget (at most the places the buffer was made with).
    #[cfg(test)]
    pub(crate) fn set_budget(&mut self, budget: usize) {
        self.budget = budget.min(self.segs.capacity());
    }

    /// In-order bytes not yet read by the application.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no in-order bytes to read.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether one more frame fits in the budget (and in the queue).
    #[inline]
    fn slot_free(&self) -> bool {
        self.segs.len() + self.held < self.budget && !self.segs.is_full()
    }

    /// The window we could offer past the in-order data: the free bytes, and at most
    /// `per_slot` bytes (a full segment's payload) for each slot of the budget not holding
    /// in-order data or the application's segments (out-of-order frames lie inside the window
    /// already offered).
    pub(crate) fn window(&self, per_slot: usize) -> usize {
        let bytes = self.capacity.saturating_sub(self.len);
        let slots = self.budget.saturating_sub(self.in_order + self.held);
        bytes.min(slots.saturating_mul(per_slot))
    }

    /// Whether in-order frames and the application's segments fill the whole slot budget: no
    /// in-order segment can be kept now, however small or short (the out-of-order frames,
    /// which would give way, aside), unless it is copied into the last in-order frame.
    pub(crate) fn budget_spent(&self) -> bool {
        self.in_order + self.held >= self.budget
    }

    /// Forget all queued data (the application's segments stay counted until released).
    pub(crate) fn clear(&mut self) {
        self.segs.clear();
        self.in_order = 0;
        self.len = 0;
        self.end = 0;
    }

    /// Whether an in-order payload of `len` bytes can be kept now: in a slot of the budget, or
    /// (under [`COPY_BREAK`] bytes) in the tail of the last in-order frame.
    #[inline]
    pub(crate) fn fits_in_order(&self, len: usize) -> bool {
        self.slot_free() || self.copy_break_fits(len)
    }

    /// Whether an in-order payload of `len` bytes would be copied into the last in-order frame.
    #[inline]
    fn copy_break_fits(&self, len: usize) -> bool {
        len < COPY_BREAK
            && self.in_order > 0
            && self
                .segs
                .get(self.in_order - 1)
                .is_some_and(|s| !s.frame.is_lent() && s.frame.tail_room() >= len)
    }

    /// Whether the out-of-order payload in `frame` can be kept now: a slot of the budget is
    /// free, and fewer than `1 / OOO_POOL_SHARE` of the pool's slots hold out-of-order frames.
    pub(crate) fn fits_out_of_order(&self, frame: &RxFrame) -> bool {
        let share = (frame.pool().slot_count() / OOO_POOL_SHARE).max(1);
        self.slot_free() && self.segs.len() - self.in_order < share
    }

    /// Whether the pool of `frame` ran out of free slots (its `rx_exhausted` count moved)
    /// since the last call: pool pressure, under which the state machine keeps no out-of-order
    /// frames. One relaxed atomic load.
    pub(crate) fn pool_pressure(&mut self, frame: &RxFrame) -> bool {
        let seen = frame.pool().stats().rx_exhausted;
        let pressure = seen != self.exhausted_seen;
        self.exhausted_seen = seen;
        pressure
    }

    /// Whether out-of-order frames are queued.
    pub(crate) fn has_out_of_order(&self) -> bool {
        self.segs.len() > self.in_order
    }

    /// Drops every out-of-order frame (counted); the caller clears its assembler to match.
    pub(crate) fn purge_out_of_order(&mut self) {
        while self.segs.len() > self.in_order {
            self.segs.pop_back();
            self.drops.purged = self.drops.purged.saturating_add(1);
        }
    }

    /// Counts a segment whose data could not be held.
    pub(crate) fn note_budget_drop(&mut self) {
        self.drops.budget = self.drops.budget.saturating_add(1);
    }

    /// The drops counted since the last call.
    pub(crate) fn take_drops(&mut self) -> RxDrops {
        core::mem::take(&mut self.drops)
    }

    /// Queues `frame` (trimmed to the payload) `offset` bytes past the in-order data, then
    /// makes the `contig` bytes past the in-order data readable (the assembler's count of
    /// bytes now contiguous, this segment's included). Call after the matching `fits_*`
    /// check; a frame that does not fit after all is dropped.
    pub(crate) fn accept(&mut self, offset: usize, frame: RxFrame, contig: usize) {
        let base = self.end;
        if offset == 0 {
            self.push_in_order(frame);
        } else {
            let start = base + offset as u64;
            let end = start + frame.len() as u64;
            let covered = self
                .out_of_order()
                .any(|s| s.start <= start && end <= s.end());
            // (A frame inside one already queued adds nothing: dropped.)
            if !covered && self.segs.push_back(Seg { start, frame }).is_ok() {
                // Sorted by start: move it in front of the ones that start later.
                let mut i = self.segs.len() - 1;
                while i > self.in_order && self.segs.get(i - 1).is_some_and(|s| s.start > start) {
                    self.segs.swap(i - 1, i);
                    i -= 1;
                }
            }
        }
        // Out-of-order frames the new data reaches become in-order, their overlap trimmed.
        while let Some(first) = self.segs.get_mut(self.in_order) {
            if first.start > self.end {
                break;
            }
            if first.end() <= self.end {
                self.remove(self.in_order);
                continue;
            }
            // `self.end - start < len`: cannot fail.
            let _ = first.frame.advance((self.end - first.start) as usize);
            first.start = self.end;
            let n = first.frame.len();
            self.in_order += 1;
            self.len += n;
            self.end += n as u64;
        }
        // The frames and the assembler agree on what is contiguous.
        debug_assert!(contig == 0 || self.end == base + contig as u64);
    }

    /// [`accept`](Self::accept) of an in-order frame while no out-of-order frame is queued
    /// (the fast path's segments): nothing queued becomes in-order with it, so it only joins
    /// the back of the queue.
    pub(crate) fn accept_in_order(&mut self, frame: RxFrame) {
        debug_assert!(!self.has_out_of_order());
        self.push_in_order(frame);
    }

    /// The out-of-order frames.
    fn out_of_order(&self) -> impl Iterator<Item = &Seg> {
        self.segs.iter().skip(self.in_order)
    }

    /// Drops the frame at `i` (moved to the back first: the order of the others is kept).
    fn remove(&mut self, i: usize) {
        for j in i..self.segs.len().saturating_sub(1) {
            self.segs.swap(j, j + 1);
        }
        self.segs.pop_back();
    }

    /// Appends a payload to the in-order data: into the last in-order frame's tail if small
    /// (copy-break), else as a frame of its own, in front of the out-of-order ones.
    #[inline(always)]
    fn push_in_order(&mut self, frame: RxFrame) {
        let n = frame.len();
        if n == 0 {
            return;
        }
        if self.copy_break_fits(n) {
            if let Some(last) = self.segs.get_mut(self.in_order - 1) {
                if last.frame.append_from(&frame).is_ok() {
                    ledger::record(CopySite::CopyBreak, n);
                    self.len += n;
                    self.end += n as u64;
                    return;
                }
            }
        }
        let start = self.end;
        if self.segs.push_back(Seg { start, frame }).is_err() {
            return;
        }
        let mut i = self.segs.len() - 1;
        while i > self.in_order {
            self.segs.swap(i - 1, i);
            i -= 1;
        }
        self.in_order += 1;
        self.len += n;
        self.end += n as u64;
    }

    /// The first in-order frame.
    #[inline]
    fn front_mut(&mut self) -> Option<&mut RxFrame> {
        if self.in_order == 0 {
            return None;
        }
        self.segs.front_mut().map(|s| &mut s.frame)
    }

    /// Call `f` with the first in-order frame's bytes (empty if none) and consume as many as it
    /// returns (at most all of them); a frame read to its end returns to the pool.
    pub(crate) fn dequeue_with<R, F>(&mut self, f: F) -> (usize, R)
    where
        F: FnOnce(&mut [u8]) -> (usize, R),
    {
        let Some(front) = self.front_mut() else {
            return f(&mut []);
        };
        let (n, r) = f(front.bytes_mut());
        let n = n.min(front.len());
        self.consume_front(n);
        (n, r)
    }

    /// Consumes `n` bytes (at most its length) of the first in-order frame.
    #[inline]
    fn consume_front(&mut self, n: usize) {
        let Some(front) = self.front_mut() else {
            return;
        };
        let len = front.len();
        if n >= len {
            self.len -= len;
            self.in_order -= 1;
            self.segs.pop_front();
        } else {
            // `n < len`: cannot fail.
            let _ = front.advance(n);
            self.len -= n;
        }
    }

    /// Copy in-order bytes into `data` and consume them; returns how many. Recorded in the
    /// ledger as [`CopySite::SocketToApp`], one record per frame read from.
    pub(crate) fn dequeue_slice(&mut self, data: &mut [u8]) -> usize {
        let mut done = 0;
        while done < data.len() {
            let Some(front) = self.front_mut() else {
                break;
            };
            let n = ledger::copy(CopySite::SocketToApp, &mut data[done..], front);
            self.consume_front(n);
            done += n;
        }
        done
    }

    /// Takes the first in-order frame for the application, which then holds it (counted against
    /// the budget until [`release_segments`](Self::release_segments)).
    pub(crate) fn pop_segment(&mut self) -> Option<RxFrame> {
        if self.in_order == 0 {
            return None;
        }
        let seg = self.segs.pop_front()?;
        self.in_order -= 1;
        self.len -= seg.frame.len();
        self.held += 1;
        Some(seg.frame)
    }

    /// The application dropped `n` frames [`pop_segment`](Self::pop_segment) gave it.
    pub(crate) fn release_segments(&mut self, n: u32) {
        self.held = self.held.saturating_sub(n as usize);
    }

    /// Up to `size` readable bytes, without consuming them (the first frame only).
    #[cfg(test)]
    pub(crate) fn peek(&self, size: usize) -> &[u8] {
        match self.segs.front().filter(|_| self.in_order > 0) {
            Some(s) => &s.frame[..size.min(s.frame.len())],
            None => &[],
        }
    }

    /// Copy readable bytes into `data` without consuming them; returns how many.
    #[cfg(test)]
    pub(crate) fn peek_slice(&mut self, data: &mut [u8]) -> usize {
        let mut done = 0;
        for s in self.segs.iter().take(self.in_order) {
            let n = (data.len() - done).min(s.frame.len());
            data[done..done + n].copy_from_slice(&s.frame[..n]);
            done += n;
        }
        done
    }

    /// Queues `data` in order, in a frame of the test pool (a test's direct fill).
    #[cfg(test)]
    pub(crate) fn push_bytes(&mut self, data: &[u8]) {
        let frame = test_frame(data);
        self.accept(0, frame, data.len());
    }
}

/// A frame holding `data` (after 54 bytes standing for the headers), from a pool shared by the
/// unit tests.
#[cfg(test)]
pub(crate) fn test_frame(data: &[u8]) -> RxFrame {
    extern crate std;
    use zcnet_buffer::{FramePool, PoolConfig};
    static POOL: std::sync::OnceLock<&'static FramePool> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| FramePool::leak(PoolConfig::new(4096)).unwrap());
    let mut slot = pool.try_alloc_rx().expect("test pool exhausted");
    slot.buffer_mut()[54..54 + data.len()].copy_from_slice(data);
    slot.complete_range(54, data.len()).unwrap()
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::{slot_budget, test_frame, RecvBuffer, COPY_BREAK, MIN_SEGMENTS};
    use zcnet_buffer::ledger::{CopySite, LEDGER};

    #[test]
    fn budget_follows_the_byte_capacity() {
        assert_eq!(slot_budget(6), MIN_SEGMENTS);
        assert_eq!(slot_budget(64 * 1024), 64);
        assert_eq!(slot_budget(10 * 1024 + 1), 11);
        assert_eq!(slot_budget(1 << 30), super::MAX_SEGMENTS);
        #[cfg(feature = "alloc")]
        assert_eq!(slot_budget(1024 * 1024), 1024);
    }

    #[test]
    fn out_of_order_frames_become_readable_when_the_hole_fills() {
        let mut rx = RecvBuffer::new(4096);
        assert_eq!((rx.capacity(), rx.len(), rx.window(1000)), (4096, 0, 4000));

        // A segment past a hole: queued, not readable.
        let f = test_frame(b"defgh");
        assert!(rx.fits_out_of_order(&f) && !rx.pool_pressure(&f));
        rx.accept(3, f, 0);
        assert!(rx.is_empty() && rx.has_out_of_order());
        // The hole fills, overlapping the queued frame by two bytes: all eight readable.
        rx.accept(0, test_frame(b"abcde"), 8);
        assert!(!rx.has_out_of_order());
        // Two frames queued (the second trimmed to its last three bytes): two slots free.
        assert_eq!((rx.len(), rx.window(1000)), (8, 2000));
        assert_eq!(rx.peek(4), b"abcd");

        let mut data = [0; 8];
        assert_eq!(rx.peek_slice(&mut data), 8);
        assert_eq!(&data, b"abcdefgh");
        assert_eq!(rx.dequeue_with(|b| (2, b[0])), (2, b'a'));
        assert_eq!(rx.dequeue_slice(&mut data), 6);
        assert_eq!(&data[..6], b"cdefgh");
        assert!(rx.is_empty());
        assert_eq!(rx.window(1000), 4000);
    }

    #[test]
    fn small_segments_share_a_slot_and_the_budget_bounds_frames() {
        let mut rx = RecvBuffer::new(4 * 1024);
        let before = LEDGER.snapshot();
        rx.accept(0, test_frame(&[1; 1000]), 1000);
        rx.accept(0, test_frame(&[2; COPY_BREAK - 1]), COPY_BREAK - 1);
        // Copied into the first frame's tail: still one frame, one copy of 255 bytes.
        let d = LEDGER.snapshot().since(&before);
        assert!(d.bytes(CopySite::CopyBreak) >= (COPY_BREAK - 1) as u64);
        assert_eq!(rx.peek(2000).len(), 1000 + COPY_BREAK - 1);
        // Three more full frames fill the budget of four.
        for _ in 0..3 {
            assert!(rx.fits_in_order(1000));
            rx.accept(0, test_frame(&[3; 1000]), 1000);
        }
        assert!(!rx.fits_in_order(1000));
        assert_eq!(rx.window(1460), 0);
        // The application takes one and holds it: still no room; released: room.
        let seg = rx.pop_segment().unwrap();
        assert!(!rx.fits_in_order(1000));
        drop(seg);
        rx.release_segments(1);
        assert!(rx.fits_in_order(1000));
        // One slot free, but fewer bytes: 4096 - 3000 in order.
        assert_eq!(rx.window(1460), 1096);
    }

    /// A 1 MiB buffer's budget of 1,024 frames (places allocated when it was made): more than
    /// 64 frames held in order and out of order, the window counted over all of them, and
    /// everything read back in order.
    #[cfg(feature = "alloc")]
    #[test]
    fn a_large_budget_holds_more_than_64_frames() {
        let mut rx = RecvBuffer::new(1024 * 1024);
        assert_eq!(rx.window(1000), 1024 * 1000);
        // 200 frames of 100 bytes in order, then 50 past a hole of 100 bytes.
        for k in 0..200u32 {
            assert!(rx.fits_in_order(300), "frame {k}");
            rx.accept(0, test_frame(&[k as u8; 300]), 300);
        }
        for k in 0..50u32 {
            let f = test_frame(&[(200 + k) as u8; 300]);
            assert!(rx.fits_out_of_order(&f), "out-of-order frame {k}");
            rx.accept(100 + 300 * k as usize, f, 0);
        }
        assert_eq!(rx.len(), 200 * 300);
        // Out-of-order frames lie inside the window already offered: only in-order ones count.
        assert_eq!(rx.window(1000), (1024 - 200) * 1000);
        // The hole fills: all 250 frames and the filler in order.
        rx.accept(0, test_frame(&[0xEE; 100]), 100 + 50 * 300);
        assert!(!rx.has_out_of_order());
        assert_eq!(rx.len(), 250 * 300 + 100);
        let mut out = std::vec![0u8; rx.len()];
        assert_eq!(rx.dequeue_slice(&mut out), out.len());
        for k in 0..200usize {
            assert!(out[k * 300..(k + 1) * 300].iter().all(|&b| b == k as u8));
        }
        assert!(out[60_000..60_100].iter().all(|&b| b == 0xEE));
        assert!(out[60_100..]
            .chunks(300)
            .enumerate()
            .all(|(k, c)| c.iter().all(|&b| b == (200 + k) as u8)));
        assert!(rx.is_empty());
    }

    #[test]
    fn out_of_order_queue_can_be_purged() {
        let mut rx = RecvBuffer::new(4096);
        rx.accept(10, test_frame(b"x"), 0);
        rx.accept(20, test_frame(b"y"), 0);
        rx.purge_out_of_order();
        assert!(!rx.has_out_of_order());
        assert_eq!(rx.take_drops().purged, 2);
        assert_eq!(rx.take_drops().purged, 0);
    }
}
