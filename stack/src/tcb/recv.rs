//! [`RecvBuffer`]: the connection's received bytes, the only way the state machine touches
//! received payload.
//!
//! A byte ring for now ([`RingBuffer<u8>`], as smoltcp's socket uses it, so behaviour is
//! bit-identical to smoltcp's, wrap points included). The operation set is kept to what the
//! state machine and the application need:
//!
//! | who | what |
//! |---|---|
//! | state machine | `capacity`, `len`, `is_empty`, `window` (the free space we advertise) |
//! | state machine | `write_at`: place a segment's payload at an offset past the in-order data (out of order allowed) |
//! | state machine | `commit`: the next bytes past the in-order data are now complete: make them readable |
//! | state machine | `clear`: forget everything (connection reset) |
//! | application | `dequeue_with`, `dequeue_slice`, `peek`, `peek_slice`: read in-order data |

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

#[cfg(test)]
mod tests {
    use super::RecvBuffer;

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
}
