//! Dropped smoltcp sockets that still have work: the orphan record per smoltcp socket slot.
//!
//! A UDP, ICMP or raw IP socket dropped with datagrams still queued stays in smoltcp's socket
//! set until they are sent or [`DATAGRAM_LINGER`](crate::stack::DATAGRAM_LINGER) has passed
//! (`State::drop_datagram_socket`). The records live in the
//! [`StackResources`](crate::StackResources), one per smoltcp socket slot, indexed like
//! smoltcp's socket storage, so the bookkeeping never allocates. (TCP connections keep their
//! own records in the TCP table, `transport/tcp/table.rs`.)

use core::hash::{Hash, Hasher};

use smoltcp::iface::SocketHandle;
use smoltcp::time::Instant as SmolInstant;

/// The record for one socket slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SocketMeta {
    /// The owner dropped the socket with work left (datagrams queued): the stack removes it
    /// once done, or at this deadline. Kept per slot, so every socket can be an orphan at once
    /// and adopting one never fails.
    orphan: Option<(SocketHandle, SmolInstant)>,
}

impl SocketMeta {
    /// A record for an empty slot (for `static` initialisers).
    pub(crate) const EMPTY: SocketMeta = SocketMeta { orphan: None };
}

/// Recovers smoltcp's slot index from a handle. `SocketHandle` is a newtype over the index with
/// a derived `Hash`, which feeds exactly that `usize` to the hasher; this hasher keeps it.
#[derive(Default)]
struct IndexOf(usize);

impl Hasher for IndexOf {
    fn finish(&self) -> u64 {
        self.0 as u64
    }
    fn write(&mut self, _bytes: &[u8]) {}
    fn write_usize(&mut self, i: usize) {
        self.0 = i;
    }
}

fn index(handle: SocketHandle) -> usize {
    let mut h = IndexOf::default();
    handle.hash(&mut h);
    h.0
}

/// The per-slot records and the count of orphans (scans are skipped while it is zero).
pub(crate) struct SocketMetas {
    slots: &'static mut [SocketMeta],
    orphans: usize,
}

impl SocketMetas {
    pub(crate) fn new(slots: &'static mut [SocketMeta]) -> Self {
        Self { slots, orphans: 0 }
    }

    /// Marks the socket an orphan, to be removed once done or at `until`.
    pub(crate) fn adopt(&mut self, handle: SocketHandle, until: SmolInstant) {
        if let Some(m) = self.slot(handle) {
            if m.orphan.replace((handle, until)).is_none() {
                self.orphans += 1;
            }
        }
    }

    /// How many slots to look at for orphans: none while there are none, else all.
    pub(crate) fn orphan_scan_len(&self) -> usize {
        if self.orphans == 0 {
            0
        } else {
            self.slots.len()
        }
    }

    /// The orphan in slot `i`, as (handle, deadline).
    pub(crate) fn orphan_at(&self, i: usize) -> Option<(SocketHandle, SmolInstant)> {
        self.slots.get(i).and_then(|m| m.orphan)
    }

    fn slot(&mut self, handle: SocketHandle) -> Option<&mut SocketMeta> {
        self.slots.get_mut(index(handle))
    }

    /// A socket was added to or removed from `handle`'s slot: start with a clean record.
    pub(crate) fn reset(&mut self, handle: SocketHandle) {
        if let Some(m) = self.slot(handle) {
            let was_orphan = m.orphan.is_some();
            *m = SocketMeta::EMPTY;
            if was_orphan {
                self.orphans -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;

    use smoltcp::iface::{SocketSet, SocketStorage};
    use smoltcp::socket::udp;
    use smoltcp::storage::PacketMetadata;

    use super::index;

    /// The handle's slot index recovered through `Hash` is the one smoltcp prints.
    #[test]
    fn index_matches_smoltcp_slot() {
        let mut storage: [SocketStorage<'_>; 4] = Default::default();
        let mut set = SocketSet::new(&mut storage[..]);
        let mk = || {
            udp::Socket::new(
                udp::PacketBuffer::new(&mut [][..] as &mut [PacketMetadata<_>], &mut [][..]),
                udp::PacketBuffer::new(&mut [][..] as &mut [PacketMetadata<_>], &mut [][..]),
            )
        };
        let a = set.add(mk());
        let b = set.add(mk());
        let c = set.add(mk());
        set.remove(b);
        let d = set.add(mk()); // reuses b's slot
        for (h, want) in [(a, 0), (c, 2), (d, 1)] {
            assert_eq!(index(h), want);
            assert_eq!(format!("{h}"), format!("#{want}"));
        }
    }
}
