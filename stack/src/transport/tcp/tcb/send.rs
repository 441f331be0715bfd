//! [`SendBuffer`]: the data the application queued, as a queue of pool frames the connection
//! keeps until the peer acknowledges them; the only way the state machine touches payload to
//! send.
//!
//! Each entry is a [`RetainedFrame`] (`zcnet_buffer`): a slot of the stack's pool whose data is
//! payload, with headroom in front for the driver's, Ethernet, IP and TCP headers. Egress sends a
//! segment that is a frame's whole unacknowledged rest from the frame itself, headers written
//! into its headroom (no payload copy), and on a link that takes super-segments the whole
//! frames after it as well, in one pass ([`take_run`](SendBuffer::take_run)); see
//! `transport/tcp/output.rs`.
//!
//! ```text
//!  frames:  [ acked | unacked ........ ] [ unacked ........ ] [ unsent ...... | free ]
//!             ▲ dropped by an ACK           whole frames sent in place        ▲ tail: `write`
//!                                                                               appends here
//! ```
//!
//! * Bytes the application writes are copied once, into the tail frame (ledger `AppToSocket`,
//!   counted by the caller); a new frame comes from the pool when the tail is full. Frames hold
//!   at most one segment's payload ([`set_frame_len`](SendBuffer::set_frame_len): the MSS), so a
//!   full frame is one full-sized segment.
//! * The application may also queue a frame it filled in place
//!   ([`push_frame`](SendBuffer::push_frame)): zero copies.
//! * Bounds: at most `capacity` queued bytes (what the application gave at open) and at most
//!   `max_frames` frames, the frame budget: one place each in a [`FrameRing`], inside the
//!   connection up to 64 frames, allocated once when the socket opens for more (with the
//!   `alloc` feature, up to [`MAX_FRAMES`]).
//!
//! | who | what |
//! |---|---|
//! | both | `capacity`, `len`, `is_empty`, `is_full` |
//! | application | `enqueue_with`, `enqueue_slice`, `push_frame`: queue data to send |
//! | state machine | `locate` then `bytes` (copy) or `take` (the frame itself): the next segment |
//! | state machine | `take_run`: the whole frames after a taken one, for a super-segment |
//! | state machine | `dequeue`: drop bytes the remote acknowledged |
//! | state machine | `clear`: forget everything (connection reset) |

use core::marker::PhantomData;
use core::task::{Context, Poll, Waker};

use zcnet_buffer::{FramePool, RetainedFrame, TxChain, TxFrame, MAX_CHAIN_SEGMENTS};

use super::ring::FrameRing;
pub(crate) use super::ring::MAX_FRAMES;

/// Where the next segment's payload is (from [`SendBuffer::locate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Segment {
    /// `len` bytes at `off` in frame `index`: a prefix of the frame's rest, or a piece that
    /// does not start at its front, to be copied ([`SendBuffer::bytes`]). `len` may be 0.
    Copy {
        /// The frame.
        index: usize,
        /// Offset into its unacknowledged data.
        off: usize,
        /// Bytes.
        len: usize,
    },
    /// The whole unacknowledged rest of frame `index` (`len` bytes), to be sent in place
    /// ([`SendBuffer::take`]).
    Frame {
        /// The frame.
        index: usize,
        /// Its bytes.
        len: usize,
    },
    /// The bytes sit in a frame the device still has from its previous send.
    Busy,
}

/// The data the application queued: first the bytes sent but not acknowledged, then those not
/// sent yet. The state machine reads segments out of it by offset and drops acknowledged bytes.
#[derive(Debug)]
pub(crate) struct SendBuffer<'a> {
    frames: FrameRing<RetainedFrame>,
    /// Bytes in `frames`.
    len: usize,
    /// The most bytes queued at once.
    capacity: usize,
    /// The most frames queued at once (`<= MAX_FRAMES`, the places of `frames`).
    max_frames: usize,
    /// Where new frames come from.
    pool: &'static FramePool,
    /// Headroom of the frames this buffer allocates.
    headroom: usize,
    /// Payload bytes per frame this buffer fills: the connection's MSS.
    frame_len: usize,
    /// A frame allocation failed: the writer waits for a slot (egress wakes it).
    starved: bool,
    /// Bytes at the front already sent (and not acknowledged): a tail frame holding any of
    /// them takes no more bytes, so that a frame is sent whole.
    sent: usize,
    /// Where the last [`locate`](Self::locate) found its segment: frame `cursor_index` starts
    /// `cursor_base` bytes into the queue. Lookups at or past `cursor_base` start there
    /// instead of at the front, so that finding the next segment costs O(1), not O(frames in
    /// flight), while the send offset moves forward. Kept exact by `dequeue` (the only change
    /// in front of a frame), reset by `clear`; a lookup below it starts at the front. Plain
    /// fields moved by `&mut self` methods only: interior mutability (a `Cell`) would take the
    /// no-alias guarantees from every `&self` method of the connection, which costs time.
    cursor_index: usize,
    /// See `cursor_index`.
    cursor_base: usize,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a> SendBuffer<'a> {
    /// A send buffer of at most `capacity` bytes in at most `max_frames` frames of `pool`, each
    /// with `headroom` bytes in front of its payload.
    pub(crate) fn new(
        pool: &'static FramePool,
        capacity: usize,
        max_frames: usize,
        headroom: usize,
    ) -> Self {
        let headroom = headroom.min(pool.slot_size().saturating_sub(1));
        let max_frames = max_frames.clamp(1, MAX_FRAMES);
        Self {
            frames: FrameRing::new(max_frames),
            len: 0,
            capacity,
            max_frames,
            pool,
            headroom,
            frame_len: pool.slot_size() - headroom,
            starved: false,
            cursor_index: 0,
            cursor_base: 0,
            sent: 0,
            _borrow: PhantomData,
        }
    }

    /// The pool frames come from.
    pub(crate) fn pool(&self) -> &'static FramePool {
        self.pool
    }

    /// Headroom a frame needs in front of its payload.
    pub(crate) fn headroom(&self) -> usize {
        self.headroom
    }

    /// Payload bytes per frame: what [`set_frame_len`](Self::set_frame_len) set, at most what
    /// a slot holds after the headroom.
    pub(crate) fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Sizes the frames filled from now on to `mss` payload bytes (one full segment).
    pub(crate) fn set_frame_len(&mut self, mss: usize) {
        self.frame_len = mss.clamp(1, self.pool.slot_size() - self.headroom);
    }

    /// The most bytes queued at once.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Queued bytes, unacknowledged ones included.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether no more bytes can be queued.
    #[inline]
    pub(crate) fn is_full(&self) -> bool {
        self.len >= self.capacity || (self.frames.len() >= self.max_frames && self.tail_room() == 0)
    }

    /// Forget all data.
    pub(crate) fn clear(&mut self) {
        self.frames.clear();
        self.len = 0;
        (self.cursor_index, self.cursor_base) = (0, 0);
    }

    /// Tells the buffer how many of its front bytes were sent (see `sent`).
    pub(crate) fn set_sent(&mut self, sent: usize) {
        self.sent = sent.min(self.len);
    }

    /// Bytes that can still go into the tail frame.
    #[inline]
    fn tail_room(&self) -> usize {
        match self.frames.back() {
            Some(t) if self.len - t.len() < self.sent => 0,
            Some(t) => self
                .frame_len
                .saturating_sub(t.len())
                .min(t.tailroom())
                .min(self.capacity.saturating_sub(self.len)),
            None => 0,
        }
    }

    /// Adds an empty frame at the tail; `false` without a budget or a free slot (with `waker`,
    /// registered in the pool's TX waiter for the next returned slot).
    #[inline(always)]
    fn grow(&mut self, waker: Option<&Waker>) -> bool {
        if self.frames.len() >= self.max_frames || self.len >= self.capacity {
            return false;
        }
        let frame = match waker {
            Some(w) => match self.pool.poll_alloc_tx(&mut Context::from_waker(w)) {
                Poll::Ready(f) => Some(f),
                Poll::Pending => None,
            },
            None => self.pool.try_alloc_tx(),
        };
        let Some(mut frame) = frame else {
            self.starved = true;
            return false;
        };
        // A fresh frame is never retained; said here, the compiler drops `retain`'s error path
        // and builds the retained frame in registers instead of through a stack copy.
        if frame.set_headroom(self.headroom).is_err() || frame.is_retained() {
            return false;
        }
        match frame.retain() {
            Ok(r) => self.frames.push_back(r).is_ok(),
            Err(_) => false,
        }
    }

    /// Records that the writer waits for a free slot (the egress task wakes it).
    pub(crate) fn set_starved(&mut self) {
        self.starved = true;
    }

    /// Whether the writer waits for a free slot (an allocation failed, not yet taken).
    pub(crate) fn is_starved(&self) -> bool {
        self.starved
    }

    /// Whether an allocation failed since the last call (the writer then waits for a slot).
    pub(crate) fn take_starved(&mut self) -> bool {
        core::mem::take(&mut self.starved)
    }

    /// Calls `f` with the free room of the tail frame (a new one if the tail is full) and
    /// queues as many bytes as it returns. `waker` is the egress task's, for a pool that has no
    /// free slot.
    ///
    /// # Panics
    /// If `f` returns more than the length of the slice it got.
    pub(crate) fn enqueue_with<R, F>(&mut self, waker: Option<&Waker>, f: F) -> (usize, R)
    where
        F: FnOnce(&mut [u8]) -> (usize, R),
    {
        match self.fill_tail(waker, f) {
            Ok(done) => done,
            Err(f) => f(&mut []),
        }
    }

    /// [`enqueue_with`](Self::enqueue_with) when there is room: `f` gets at least one byte
    /// of room. `Err(f)`, `f` not called, when the queue is full or the pool has no free slot
    /// (then `waker` waits for one).
    ///
    /// # Panics
    /// If `f` returns more than the length of the slice it got.
    pub(crate) fn fill_tail<R, F>(&mut self, waker: Option<&Waker>, f: F) -> Result<(usize, R), F>
    where
        F: FnOnce(&mut [u8]) -> (usize, R),
    {
        let mut room = self.tail_room();
        if room == 0 {
            if !self.grow(waker) {
                return Err(f);
            }
            room = self.tail_room();
        }
        let Some(tail) = self.frames.back_mut().filter(|_| room > 0) else {
            return Err(f);
        };
        let (n, r) = f(&mut tail.spare_mut()[..room]);
        assert!(n <= room, "enqueued more bytes than there was room for");
        let _ = tail.commit(n);
        self.len += n;
        Ok((n, r))
    }

    /// Queues as much of `data` as fits, copying it into the tail frames; returns how many
    /// bytes. The caller counts the copy in the ledger.
    pub(crate) fn enqueue_slice(&mut self, waker: Option<&Waker>, data: &[u8]) -> usize {
        let mut done = 0;
        while done < data.len() {
            let (n, ()) = self.enqueue_with(waker, |room| {
                let n = room.len().min(data.len() - done);
                room[..n].copy_from_slice(&data[done..done + n]);
                (n, ())
            });
            if n == 0 {
                break;
            }
            done += n;
        }
        done
    }

    /// Queues a frame the application filled in place; gives it back when the queue has no
    /// room for it (too many frames, or its bytes exceed the capacity left while others wait).
    pub(crate) fn push_frame(&mut self, frame: RetainedFrame) -> Result<(), RetainedFrame> {
        if frame.is_empty() {
            return Ok(());
        }
        if self.frames.len() >= self.max_frames
            || (self.len > 0 && self.len + frame.len() > self.capacity)
        {
            return Err(frame);
        }
        let n = frame.len();
        self.frames.push_back(frame)?;
        self.len += n;
        Ok(())
    }

    /// Where the next segment's payload is: up to `size` bytes from `offset` into the queue,
    /// never past the end of the frame holding `offset` (the state machine sends what it gets).
    pub(crate) fn locate(&mut self, offset: usize, size: usize) -> Segment {
        let Some((index, base, f)) = self.find(offset) else {
            return Segment::Copy {
                index: 0,
                off: 0,
                len: 0,
            };
        };
        let off = offset - base;
        let rest = f.len() - off;
        let idle = f.is_idle();
        (self.cursor_index, self.cursor_base) = (index, base);
        if !idle {
            return Segment::Busy;
        }
        if off == 0 && size >= rest {
            return Segment::Frame { index, len: rest };
        }
        Segment::Copy {
            index,
            off,
            len: size.min(rest),
        }
    }

    /// The frame holding byte `offset` of the queue, as `(index, base, frame)` with `base` the
    /// offset of its first byte; `None` past the end. Starts at the cursor when it can.
    #[inline]
    fn find(&self, offset: usize) -> Option<(usize, usize, &RetainedFrame)> {
        // The queue's two slices, taken once (the deque's `get` works out its length and
        // wraps the index on every call).
        let (front, back) = self.frames.as_slices();
        let (start, mut base) =
            if self.cursor_base <= offset && self.cursor_index < front.len() + back.len() {
                (self.cursor_index, self.cursor_base)
            } else {
                (0, 0)
            };
        let mut index = start;
        while let Some(f) = match index.checked_sub(front.len()) {
            None => front.get(index),
            Some(i) => back.get(i),
        } {
            let n = f.len();
            if offset < base + n {
                return Some((index, base, f));
            }
            base += n;
            index += 1;
        }
        None
    }

    /// The bytes of a [`Segment::Copy`] (empty if the frame is gone or the device has it).
    pub(crate) fn bytes(&self, index: usize, off: usize, len: usize) -> &[u8] {
        self.frames
            .get(index)
            .and_then(RetainedFrame::data)
            .and_then(|d| d.get(off..off + len))
            .unwrap_or(&[])
    }

    /// The frame of a [`Segment::Frame`], lent to the device as a retained [`TxFrame`] whose
    /// data is the payload; `None` if the device still has it.
    #[inline(always)]
    pub(crate) fn take(&mut self, index: usize) -> Option<TxFrame> {
        let f = self.frames.get_mut(index)?;
        match f.poll_send(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(tx) => Some(tx),
            Poll::Pending => None,
        }
    }

    /// Lends the frames after frame `index` to the device, in order, into `chain`: the rest of
    /// a super-segment whose first frame [`take`](Self::take) lent. A frame joins while it is
    /// idle, holds at most `mss` bytes (each frame stays one segment when the link splits the
    /// super-segment at frame boundaries) and, unless `short_ok`, exactly `mss` (Nagle: a short
    /// segment waits while data is in flight), the run stays within `limit` bytes and `chain`
    /// keeps room for the first frame in front of it (a whole super-segment is at most
    /// [`MAX_CHAIN_SEGMENTS`] frames). Returns the bytes lent. A frame after the first of the queue starts at its
    /// front (only the first is ever acknowledged in part), so the run is contiguous.
    pub(crate) fn take_run(
        &mut self,
        index: usize,
        mss: usize,
        limit: usize,
        short_ok: bool,
        chain: &mut TxChain,
    ) -> usize {
        let mut taken = 0;
        let mut i = index + 1;
        while chain.frame_count() + 1 < MAX_CHAIN_SEGMENTS {
            let Some(f) = self.frames.get_mut(i) else {
                break;
            };
            let n = f.len();
            if n == 0 || n > mss || (n < mss && !short_ok) || taken + n > limit || !f.is_idle() {
                break;
            }
            let Poll::Ready(tx) = f.poll_send(&mut Context::from_waker(Waker::noop())) else {
                break;
            };
            if chain.push(tx).is_err() {
                // Not reached: the chain had room. The frame went back to the queue, idle.
                break;
            }
            taken += n;
            i += 1;
        }
        taken
    }

    /// Whether the frame holding `offset` is still with the device. With `waker`, the pool's
    /// retained waker is registered first, so its return wakes the caller.
    pub(crate) fn blocked(&self, offset: usize, waker: Option<&Waker>) -> bool {
        match (self.find(offset), waker) {
            (None, _) => false,
            (Some((_, _, f)), Some(w)) => f.poll_idle(&mut Context::from_waker(w)).is_pending(),
            (Some((_, _, f)), None) => !f.is_idle(),
        }
    }

    /// Drop the first `count` bytes: the remote acknowledged them. Whole frames go back (to
    /// the pool now, or when the device is done with them); a partly acknowledged one keeps its
    /// rest.
    pub(crate) fn dequeue(&mut self, count: usize) {
        let removed = count.min(self.len);
        let mut left = removed;
        let mut popped = 0;
        self.len -= left;
        while left > 0 {
            let Some(front) = self.frames.front_mut() else {
                break;
            };
            let n = front.len();
            if n <= left {
                left -= n;
                drop(self.frames.pop_front());
                popped += 1;
            } else {
                front.advance(left);
                left = 0;
            }
        }
        // Every byte removed lay in front of the cursor's frame, unless that frame was
        // removed, or is now the front (then it starts at 0 whatever was cut from it).
        // (A base short of `removed` cannot happen; the front is always a right place to
        // start, so that is where such a cursor would go.)
        (self.cursor_index, self.cursor_base) = match (
            self.cursor_index.checked_sub(popped),
            self.cursor_base.checked_sub(removed),
        ) {
            (Some(index @ 1..), Some(base)) => (index, base),
            _ => (0, 0),
        };
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::{Segment, SendBuffer};
    use zcnet_buffer::{FramePool, PoolConfig, MAX_CHAIN_SEGMENTS};

    fn buffer(capacity: usize, frames: usize) -> (SendBuffer<'static>, &'static FramePool) {
        let pool = FramePool::leak(PoolConfig::new(8).with_slot_size(256)).unwrap();
        (SendBuffer::new(pool, capacity, frames, 64), pool)
    }

    #[test]
    fn writes_fill_frames_of_the_segment_size_and_acks_drop_them() {
        let (mut tx, pool) = buffer(100, 4);
        tx.set_frame_len(4);
        assert_eq!(tx.enqueue_slice(None, b"abcdef"), 6);
        assert_eq!(tx.enqueue_with(None, |b| (2, b.len())), (2, 2));
        assert_eq!(tx.len(), 8);
        assert_eq!(pool.occupancy().retained, 2);

        // A segment stops at the end of the frame holding its offset.
        assert_eq!(
            tx.locate(2, 5),
            Segment::Copy {
                index: 0,
                off: 2,
                len: 2
            }
        );
        assert_eq!(tx.bytes(0, 2, 2), b"cd");
        assert_eq!(tx.locate(4, 8), Segment::Frame { index: 1, len: 4 });

        // The frame itself goes out; while the device has it, it is busy.
        let sent = tx.take(1).unwrap();
        assert_eq!((sent.len(), &sent[..2]), (4, &b"ef"[..]));
        assert_eq!(tx.locate(4, 8), Segment::Busy);
        assert!(tx.blocked(5, None));
        drop(sent);
        assert!(!tx.blocked(5, None));

        tx.dequeue(5); // frame 0 whole, one byte of frame 1
        assert_eq!(tx.len(), 3);
        assert_eq!(pool.occupancy().retained, 1);
        assert_eq!(tx.locate(0, 10), Segment::Frame { index: 0, len: 3 });
        tx.clear();
        assert!(tx.is_empty());
        assert_eq!(pool.audit().unwrap().free, 8);
    }

    /// The queue's bytes in order, and where each frame starts, read front to back (what
    /// `locate` answered before it had a cursor).
    fn layout(tx: &SendBuffer<'_>) -> (std::vec::Vec<u8>, std::vec::Vec<usize>) {
        let mut bytes = std::vec::Vec::new();
        let mut starts = std::vec::Vec::new();
        for f in tx.frames.iter() {
            starts.push(bytes.len());
            bytes.extend_from_slice(f.data().unwrap());
        }
        (bytes, starts)
    }

    #[test]
    fn lookups_by_offset_agree_with_a_scan_from_the_front() {
        // Random writes of 1..=12 bytes into 5-byte frames, acknowledgements of 0..=9 bytes and
        // lookups forward (as sending goes) and backward (as a retransmission goes): every
        // lookup finds what a scan from the front finds. Fixed seed.
        let pool = FramePool::leak(PoolConfig::new(16).with_slot_size(256)).unwrap();
        let mut tx = SendBuffer::new(pool, 60, 12, 64);
        tx.set_frame_len(5);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as usize
        };
        let mut counter = 0u8;
        let mut offset = 0usize;
        for _ in 0..20_000 {
            match next(4) {
                0 => {
                    let want = 1 + next(12);
                    let data: std::vec::Vec<u8> = (0..want)
                        .map(|_| {
                            counter = counter.wrapping_add(1);
                            counter
                        })
                        .collect();
                    tx.enqueue_slice(None, &data);
                }
                1 => {
                    let n = next(10).min(tx.len());
                    tx.dequeue(n);
                    offset = offset.saturating_sub(n);
                }
                2 => offset = next(tx.len() as u64 + 1),
                _ => offset = (offset + 1 + next(6)).min(tx.len()),
            }
            let (bytes, starts) = layout(&tx);
            let want = 1 + next(8);
            match tx.locate(offset, want) {
                Segment::Frame { index, len } => {
                    assert_eq!(starts[index], offset);
                    assert_eq!(tx.bytes(index, 0, len), &bytes[offset..offset + len]);
                }
                Segment::Copy { index, off, len } if offset < bytes.len() => {
                    assert_eq!(starts[index] + off, offset);
                    assert!(len >= 1 && len <= want);
                    assert_eq!(tx.bytes(index, off, len), &bytes[offset..offset + len]);
                }
                Segment::Copy { len, .. } => assert_eq!((offset, len), (bytes.len(), 0)),
                Segment::Busy => unreachable!("no frame was lent to a device"),
            }
            assert!(!tx.blocked(offset, None));
        }
        drop(tx);
        assert_eq!(pool.audit().unwrap().free, 16);
    }

    #[test]
    fn a_run_leaves_room_for_its_first_frame_and_stops_where_it_must() {
        let pool = FramePool::leak(PoolConfig::new(64).with_slot_size(256)).unwrap();
        let mut tx = SendBuffer::new(pool, 10_000, 64, 64);
        tx.set_frame_len(4);
        assert_eq!(tx.enqueue_slice(None, &[7u8; 60 * 4 + 2]), 242);
        // 61 frames: 60 full, a short last one.
        assert_eq!(tx.locate(0, 4), Segment::Frame { index: 0, len: 4 });
        let head = tx.take(0).unwrap();
        let mut chain = zcnet_buffer::TxChain::new();
        let n = tx.take_run(0, 4, usize::MAX, true, &mut chain);
        assert_eq!(
            chain.frame_count(),
            MAX_CHAIN_SEGMENTS - 1,
            "room for the head"
        );
        assert_eq!(n, 4 * (MAX_CHAIN_SEGMENTS - 1));
        drop(chain);
        // Within a limit, and not past a frame the device still has (frame 0).
        let mut chain = zcnet_buffer::TxChain::new();
        assert_eq!(tx.take_run(0, 4, 10, true, &mut chain), 8);
        drop(chain);
        // Not past a frame longer than the segment size, nor (without `short_ok`) a short one.
        let mut chain = zcnet_buffer::TxChain::new();
        assert_eq!(tx.take_run(0, 3, usize::MAX, true, &mut chain), 0);
        assert_eq!(tx.take_run(58, 4, usize::MAX, false, &mut chain), 4);
        assert_eq!(
            tx.take_run(58, 4, usize::MAX, true, &mut chain),
            0,
            "frame 59 lent"
        );
        drop(chain);
        let mut chain = zcnet_buffer::TxChain::new();
        assert_eq!(tx.take_run(59, 4, usize::MAX, true, &mut chain), 2);
        drop(chain);
        drop(head);
        drop(tx);
        assert_eq!(pool.audit().unwrap().free, 64);
    }

    #[test]
    fn capacity_and_frame_budget_bound_the_queue() {
        let (mut tx, pool) = buffer(6, 2);
        tx.set_frame_len(4);
        assert_eq!(tx.enqueue_slice(None, b"abcdefgh"), 6);
        assert!(tx.is_full());
        tx.dequeue(6);
        assert!(!tx.is_full());
        tx.set_frame_len(2);
        assert_eq!(
            tx.enqueue_slice(None, b"abcdefgh"),
            4,
            "two frames of two bytes"
        );
        assert!(tx.is_full());
        let mut f = pool.try_alloc_tx().unwrap();
        f.append(1).unwrap()[0] = b'z';
        assert!(tx.push_frame(f.retain().unwrap()).is_err());
        drop(tx);
        assert_eq!(pool.audit().unwrap().free, 8);
    }
}
