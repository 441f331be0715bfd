//! [`SendBuffer`]: the data the application queued, as a queue of pool frames the connection
//! keeps until the peer acknowledges them; the only way the state machine touches payload to
//! send.
//!
//! Each entry is a [`RetainedFrame`] (`zcnet_buffer`): a slot of the stack's pool whose data is
//! payload, with headroom in front for the driver's, Ethernet, IP and TCP headers. Egress sends a
//! segment that is a frame's whole unacknowledged rest from the frame itself, headers written
//! into its headroom (no payload copy); see `tcp_io.rs`.
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
//!   `max_frames` frames ([`MAX_FRAMES`] at most, stored inline).
//!
//! | who | what |
//! |---|---|
//! | both | `capacity`, `len`, `is_empty`, `is_full` |
//! | application | `enqueue_with`, `enqueue_slice`, `push_frame`: queue data to send |
//! | state machine | `locate` then `bytes` (copy) or `take` (the frame itself): the next segment |
//! | state machine | `dequeue`: drop bytes the remote acknowledged |
//! | state machine | `clear`: forget everything (connection reset) |

use core::marker::PhantomData;
use core::task::{Context, Poll, Waker};

use heapless::Deque;
use zcnet_buffer::{FramePool, RetainedFrame, TxFrame};

/// The most frames one connection's send queue holds.
pub(crate) const MAX_FRAMES: usize = 64;

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
    frames: Deque<RetainedFrame, MAX_FRAMES>,
    /// Bytes in `frames`.
    len: usize,
    /// The most bytes queued at once.
    capacity: usize,
    /// The most frames queued at once (`<= MAX_FRAMES`).
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
        Self {
            frames: Deque::new(),
            len: 0,
            capacity,
            max_frames: max_frames.clamp(1, MAX_FRAMES),
            pool,
            headroom,
            frame_len: pool.slot_size() - headroom,
            starved: false,
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

    /// Queued bytes, unacknowledged ones included.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether no more bytes can be queued.
    pub(crate) fn is_full(&self) -> bool {
        self.len >= self.capacity || (self.tail_room() == 0 && self.frames.len() >= self.max_frames)
    }

    /// Forget all data.
    pub(crate) fn clear(&mut self) {
        self.frames.clear();
        self.len = 0;
    }

    /// Tells the buffer how many of its front bytes were sent (see `sent`).
    pub(crate) fn set_sent(&mut self, sent: usize) {
        self.sent = sent.min(self.len);
    }

    /// Bytes that can still go into the tail frame.
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
        if frame.set_headroom(self.headroom).is_err() {
            return false;
        }
        match frame.retain() {
            Ok(r) => self.frames.push_back(r).is_ok(),
            Err(_) => false,
        }
    }

    /// Makes sure the tail frame has room for at least one byte (allocating a frame if needed;
    /// see [`enqueue_with`](Self::enqueue_with) for `waker`). `false`: the queue is full or the
    /// pool has no free slot.
    pub(crate) fn ensure_room(&mut self, waker: Option<&Waker>) -> bool {
        self.tail_room() > 0 || self.grow(waker)
    }

    /// Records that the writer waits for a free slot (the egress task wakes it).
    pub(crate) fn set_starved(&mut self) {
        self.starved = true;
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
        if self.tail_room() == 0 && !self.grow(waker) {
            return f(&mut []);
        }
        let room = self.tail_room();
        let Some(tail) = self.frames.back_mut() else {
            return f(&mut []);
        };
        let (n, r) = f(&mut tail.spare_mut()[..room]);
        assert!(n <= room, "enqueued more bytes than there was room for");
        let _ = tail.commit(n);
        self.len += n;
        (n, r)
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
    pub(crate) fn locate(&self, offset: usize, size: usize) -> Segment {
        let mut base = 0;
        for (index, f) in self.frames.iter().enumerate() {
            let n = f.len();
            if offset < base + n {
                let off = offset - base;
                let rest = n - off;
                if !f.is_idle() {
                    return Segment::Busy;
                }
                if off == 0 && size >= rest {
                    return Segment::Frame { index, len: rest };
                }
                return Segment::Copy {
                    index,
                    off,
                    len: size.min(rest),
                };
            }
            base += n;
        }
        Segment::Copy {
            index: 0,
            off: 0,
            len: 0,
        }
    }

    /// The bytes of a [`Segment::Copy`] (empty if the frame is gone or the device has it).
    pub(crate) fn bytes(&self, index: usize, off: usize, len: usize) -> &[u8] {
        self.frames
            .iter()
            .nth(index)
            .and_then(RetainedFrame::data)
            .and_then(|d| d.get(off..off + len))
            .unwrap_or(&[])
    }

    /// The frame of a [`Segment::Frame`], lent to the device as a retained [`TxFrame`] whose
    /// data is the payload; `None` if the device still has it.
    pub(crate) fn take(&mut self, index: usize) -> Option<TxFrame> {
        let f = self.frames.iter_mut().nth(index)?;
        match f.poll_send(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(tx) => Some(tx),
            Poll::Pending => None,
        }
    }

    /// Whether the frame holding `offset` is still with the device. With `waker`, the pool's
    /// retained waker is registered first, so its return wakes the caller.
    pub(crate) fn blocked(&self, offset: usize, waker: Option<&Waker>) -> bool {
        let mut base = 0;
        for f in self.frames.iter() {
            let n = f.len();
            if offset < base + n {
                return match waker {
                    Some(w) => f.poll_idle(&mut Context::from_waker(w)).is_pending(),
                    None => !f.is_idle(),
                };
            }
            base += n;
        }
        false
    }

    /// Drop the first `count` bytes: the remote acknowledged them. Whole frames go back (to
    /// the pool now, or when the device is done with them); a partly acknowledged one keeps its
    /// rest.
    pub(crate) fn dequeue(&mut self, count: usize) {
        let mut left = count.min(self.len);
        self.len -= left;
        while left > 0 {
            let Some(front) = self.frames.front_mut() else {
                break;
            };
            let n = front.len();
            if n <= left {
                left -= n;
                drop(self.frames.pop_front());
            } else {
                front.advance(left);
                left = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Segment, SendBuffer};
    use zcnet_buffer::{FramePool, PoolConfig};

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
