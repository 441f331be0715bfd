//! [`SendBuffer`]: the bytes the application queued, the only way the state machine touches
//! payload to send.
//!
//! A byte ring for now ([`RingBuffer<u8>`], as smoltcp's socket uses it, so behaviour is
//! bit-identical to smoltcp's, wrap points included). The operation set is kept to what the
//! state machine and the application need:
//!
//! | who | what |
//! |---|---|
//! | both | `capacity`, `len`, `is_empty`, `is_full` |
//! | application | `enqueue_with`, `enqueue_slice`: queue bytes to send |
//! | state machine | `get`: the bytes of the next segment, from an offset into the unacknowledged data |
//! | state machine | `dequeue`: drop bytes the remote acknowledged |
//! | state machine | `clear`: forget everything (connection reset) |

use smoltcp::storage::RingBuffer;

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
    use super::SendBuffer;

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
