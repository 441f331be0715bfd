//! [`PacketBuffers`]: the send and receive queues of a datagram socket (UDP, ICMP, raw IP).

use smoltcp::storage::{PacketBuffer, PacketMetadata};

/// Buffers for a datagram socket: payload bytes and per-packet metadata, for each direction.
///
/// A socket holds at most as many packets as it has metadata entries, and at most as many bytes
/// as its payload slice; a packet that arrives when either is full is dropped (smoltcp counts
/// nothing, the sender's protocol has to cope), so size them for the burst you expect.
///
/// `H` is the per-packet header smoltcp keeps beside the bytes; the socket modules name their
/// own: [`UdpBuffers`](crate::udp::UdpBuffers), [`IcmpBuffers`](crate::icmp::IcmpBuffers),
/// [`RawBuffers`](crate::raw::RawBuffers).
#[derive(Debug)]
pub struct PacketBuffers<H: 'static> {
    pub(crate) rx: PacketBuffer<'static, H>,
    pub(crate) tx: PacketBuffer<'static, H>,
}

impl<H: 'static> PacketBuffers<H> {
    /// Buffers over caller-provided memory (e.g. `static mut` arrays claimed once): one
    /// metadata entry per packet that may be queued, and the payload bytes, per direction.
    /// Start the metadata arrays with [`PacketMetadata::EMPTY`].
    pub fn from_static(
        rx_meta: &'static mut [PacketMetadata<H>],
        rx: &'static mut [u8],
        tx_meta: &'static mut [PacketMetadata<H>],
        tx: &'static mut [u8],
    ) -> Self {
        Self {
            rx: PacketBuffer::new(rx_meta, rx),
            tx: PacketBuffer::new(tx_meta, tx),
        }
    }

    /// Heap buffers: up to `packets` packets and `bytes` payload bytes per direction, freed
    /// with the socket.
    #[cfg(feature = "alloc")]
    pub fn with_capacity(packets: usize, bytes: usize) -> Self {
        extern crate alloc;
        use alloc::vec::Vec;
        let meta = || {
            (0..packets)
                .map(|_| PacketMetadata::EMPTY)
                .collect::<Vec<_>>()
        };
        Self {
            rx: PacketBuffer::new(meta(), alloc::vec![0u8; bytes]),
            tx: PacketBuffer::new(meta(), alloc::vec![0u8; bytes]),
        }
    }
}
