//! The connection's receive and send buffers: the only way the state machine touches payload
//! bytes.
//!
//! Both are byte rings for now ([`RingBuffer<u8>`], as smoltcp's socket uses them, so behaviour
//! is bit-identical to smoltcp's, wrap points included). The operation set is kept to what
//! the state machine and the application need, so that a frame-queue implementation can
//! replace the rings without touching the state machine:
//!
//! | [`RecvBuffer`] | who | what |
//! |---|---|---|
//! | `capacity`, `len`, `is_empty`, `window` | state machine | sizes; `window` is the free space we advertise |
//! | `write_at` | state machine | place a segment's payload at an offset past the in-order data (out of order allowed) |
//! | `commit` | state machine | the next bytes past the in-order data are now complete: make them readable |
//! | `clear` | state machine | forget everything (connection reset) |
//! | `dequeue_with`, `dequeue_slice`, `peek`, `peek_slice` | application | read in-order data |
//!
//! | [`SendBuffer`] | who | what |
//! |---|---|---|
//! | `capacity`, `len`, `is_empty`, `is_full` | both | sizes |
//! | `enqueue_with`, `enqueue_slice` | application | queue bytes to send |
//! | `get` | state machine | the bytes of the next segment, from an offset into the unacknowledged data |
//! | `dequeue` | state machine | drop bytes the remote acknowledged |
//! | `clear` | state machine | forget everything (connection reset) |

use smoltcp::storage::RingBuffer;
use zcnet_buffer::ledger::{self, CopySite};

/// Received bytes: in-order data the application has not read yet, then room for the
/// receive window, in which out-of-order segments are placed until the gap before them fills.
#[derive(Debug)]
pub(crate) struct RecvBuffer<'a> {
    /// The ring: allocated bytes are the in-order data, unallocated ones the window.
    ring: RingBuffer<'a, u8>,
}

impl<'a> RecvBuffer<'a> {
    /// A receive buffer over `storage`; its length is the largest window we can offer.
    #[cfg(test)]
    pub(crate) fn new(storage: &'a mut [u8]) -> Self {
        Self::from_ring(RingBuffer::new(storage))
    }

    /// A receive buffer over an (empty) ring: the application's `TcpBuffers`.
    pub(crate) fn from_ring(ring: RingBuffer<'a, u8>) -> Self {
        Self { ring }
    }

    /// Bytes the buffer holds at most.
    pub(crate) fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// In-order bytes not yet read by the application.
    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether there are no in-order bytes to read.
    pub(crate) fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Free space past the in-order data: the receive window.
    pub(crate) fn window(&self) -> usize {
        self.ring.window()
    }

    /// Forget all data.
    pub(crate) fn clear(&mut self) {
        self.ring.clear()
    }

    /// Place `data` `offset` bytes past the end of the in-order data, without making it
    /// readable; returns how many bytes fit in the window (all of them when the caller
    /// trimmed the segment to the window).
    ///
    /// This is the receive path's one copy of a payload byte (frame → ring), recorded in the
    /// copy ledger as [`CopySite::StackRx`]: in two pieces when the placement wraps around the
    /// end of the ring, as `RingBuffer::write_unallocated` places it.
    #[must_use]
    pub(crate) fn write_at(&mut self, offset: usize, data: &[u8]) -> usize {
        let first = self.ring.get_unallocated(offset, data.len());
        let n = ledger::copy(CopySite::StackRx, first, data);
        if n == data.len() {
            return n;
        }
        let rest = &data[n..];
        let second = self.ring.get_unallocated(offset + n, rest.len());
        n + ledger::copy(CopySite::StackRx, second, rest)
    }

    /// Make the `count` bytes past the in-order data (written with [`write_at`](Self::write_at))
    /// readable.
    ///
    /// # Panics
    /// If `count` exceeds the window.
    pub(crate) fn commit(&mut self, count: usize) {
        self.ring.enqueue_unallocated(count)
    }

    /// Call `f` with the longest contiguous run of readable bytes and consume as many as it
    /// returns.
    ///
    /// # Panics
    /// If `f` returns more than the length of the slice it got.
    pub(crate) fn dequeue_with<'b, R, F>(&'b mut self, f: F) -> (usize, R)
    where
        F: FnOnce(&'b mut [u8]) -> (usize, R),
    {
        self.ring.dequeue_many_with(f)
    }

    /// Move readable bytes into `data`; returns how many.
    #[cfg(test)]
    pub(crate) fn dequeue_slice(&mut self, data: &mut [u8]) -> usize {
        self.ring.dequeue_slice(data)
    }

    /// Up to `size` readable bytes, without consuming them (the contiguous run only).
    #[cfg(test)]
    pub(crate) fn peek(&self, size: usize) -> &[u8] {
        self.ring.get_allocated(0, size)
    }

    /// Copy readable bytes into `data` without consuming them; returns how many.
    #[cfg(test)]
    pub(crate) fn peek_slice(&mut self, data: &mut [u8]) -> usize {
        self.ring.read_allocated(0, data)
    }
}

/// Bytes the application queued: first those sent but not acknowledged, then those not sent
/// yet. The state machine reads segments out of it by offset and drops acknowledged bytes.
#[derive(Debug)]
pub(crate) struct SendBuffer<'a> {
    /// The ring: allocated bytes are the queued data.
    ring: RingBuffer<'a, u8>,
}

impl<'a> SendBuffer<'a> {
    /// A send buffer over `storage`.
    #[cfg(test)]
    pub(crate) fn new(storage: &'a mut [u8]) -> Self {
        Self::from_ring(RingBuffer::new(storage))
    }

    /// A send buffer over an (empty) ring: the application's `TcpBuffers`.
    pub(crate) fn from_ring(ring: RingBuffer<'a, u8>) -> Self {
        Self { ring }
    }

    /// Queued bytes, unacknowledged ones included.
    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Whether no more bytes can be queued.
    pub(crate) fn is_full(&self) -> bool {
        self.ring.is_full()
    }

    /// Forget all data.
    pub(crate) fn clear(&mut self) {
        self.ring.clear()
    }

    /// Call `f` with the longest contiguous run of free space and queue as many bytes as it
    /// returns.
    ///
    /// # Panics
    /// If `f` returns more than the length of the slice it got.
    pub(crate) fn enqueue_with<'b, R, F>(&'b mut self, f: F) -> (usize, R)
    where
        F: FnOnce(&'b mut [u8]) -> (usize, R),
    {
        self.ring.enqueue_many_with(f)
    }

    /// Queue as much of `data` as fits; returns how many bytes.
    pub(crate) fn enqueue_slice(&mut self, data: &[u8]) -> usize {
        self.ring.enqueue_slice(data)
    }

    /// Up to `size` queued bytes starting `offset` bytes into the queue: the payload of the
    /// next segment. Shorter than `size` when the data runs out or (rings) at the wrap point;
    /// the state machine sends what it gets.
    pub(crate) fn get(&self, offset: usize, size: usize) -> &[u8] {
        self.ring.get_allocated(offset, size)
    }

    /// Drop the first `count` bytes: the remote acknowledged them.
    ///
    /// # Panics
    /// If `count` exceeds [`len`](Self::len).
    pub(crate) fn dequeue(&mut self, count: usize) {
        self.ring.dequeue_allocated(count)
    }
}

#[cfg(test)]
mod tests {
    use super::{RecvBuffer, SendBuffer};

    #[test]
    fn recv_places_out_of_order_data_then_commits_it() {
        let mut storage = [0; 8];
        let mut rx = RecvBuffer::new(&mut storage);
        assert_eq!((rx.capacity(), rx.len(), rx.window()), (8, 0, 8));

        // A segment past a hole: written, not readable.
        assert_eq!(rx.write_at(3, b"def"), 3);
        assert!(rx.is_empty());
        // The hole fills: all six bytes become readable.
        assert_eq!(rx.write_at(0, b"abc"), 3);
        rx.commit(6);
        assert_eq!((rx.len(), rx.window()), (6, 2));
        assert_eq!(rx.peek(4), b"abcd");

        let mut data = [0; 6];
        assert_eq!(rx.peek_slice(&mut data), 6);
        assert_eq!(rx.dequeue_with(|b| (2, b[0])), (2, b'a'));
        assert_eq!(rx.dequeue_slice(&mut data), 4);
        assert_eq!(&data[..4], b"cdef");
        assert!(rx.is_empty());
    }

    #[test]
    fn send_reads_segments_by_offset_and_drops_acked_bytes() {
        let mut storage = [0; 8];
        let mut tx = SendBuffer::new(&mut storage);
        assert_eq!(tx.enqueue_slice(b"abcdef"), 6);
        assert_eq!(tx.enqueue_with(|b| (2, b.len())), (2, 2));
        assert!(tx.is_full());

        assert_eq!(tx.get(2, 3), b"cde");
        tx.dequeue(2);
        assert_eq!((tx.len(), tx.get(0, 2)), (6, &b"cd"[..]));

        // Queued past the wrap point: `get` stops there.
        assert_eq!(tx.enqueue_slice(b"gh"), 2);
        assert_eq!(tx.get(4, 4), &[0, 0][..]);
        assert_eq!(tx.get(6, 2), b"gh");
        tx.clear();
        assert!(tx.is_empty());
    }
}
