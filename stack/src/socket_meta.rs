//! What smoltcp forgets about a TCP connection: *why* it ended.
//!
//! smoltcp reports a connection reset by the peer, one that timed out, and one this side
//! aborted all as `State::Closed`. The socket API promises distinct errors, so the stack keeps a
//! small record per socket slot, indexed like smoltcp's socket storage:
//!
//! * `abort()` marks the record [`CloseCause::Aborted`] itself.
//! * A timeout can only fire in smoltcp's *egress* path (`dispatch` checks the timer), and only
//!   for sockets with a timeout set. Such sockets are *watched*: the egress task notes which
//!   watched sockets are open before `poll_egress` and marks those closed after it as
//!   [`CloseCause::TimedOut`]. With no socket watched the scan is skipped entirely.
//! * Anything else that closes an open connection is the peer's reset (ingress path).
//!
//! The records live in the [`StackResources`](crate::StackResources), one per socket slot, so
//! the bookkeeping never allocates.

use core::hash::{Hash, Hasher};

use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::{tcp, Socket};
use smoltcp::time::Instant as SmolInstant;

/// Why a TCP connection closed other than by an orderly exchange of FINs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CloseCause {
    /// `abort()` on this side.
    Aborted,
    /// No answer from the peer within the socket's timeout.
    TimedOut,
}

/// The record for one socket slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SocketMeta {
    /// The socket has a timeout set (see the module doc).
    watched: bool,
    /// Set by the egress scan before `poll_egress`: the socket was not closed.
    open_before: bool,
    /// Set once the cause is known; cleared when the slot is reused.
    cause: Option<CloseCause>,
    /// The connection was established at some point (so a close nobody explains is a reset).
    connected: bool,
    /// This side closed its write half (so failing writes are the caller's mistake).
    write_shut: bool,
    /// The owner dropped the socket with work left (a TCP close in progress, UDP datagrams
    /// queued): the stack finishes it and removes it once done, or at this deadline. Kept per
    /// slot, so every socket can be an orphan at once and adopting one never fails.
    orphan: Option<(SocketHandle, SmolInstant)>,
}

impl SocketMeta {
    /// Why the connection closed, if known.
    pub(crate) fn cause(&self) -> Option<CloseCause> {
        self.cause
    }

    /// Whether the connection was ever established.
    pub(crate) fn connected(&self) -> bool {
        self.connected
    }

    /// Whether this side shut its write half.
    pub(crate) fn write_shut(&self) -> bool {
        self.write_shut
    }

    /// A record for an empty slot (for `static` initialisers).
    pub(crate) const EMPTY: SocketMeta = SocketMeta {
        watched: false,
        open_before: false,
        cause: None,
        connected: false,
        write_shut: false,
        orphan: None,
    };
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

/// The per-slot records and the counts of watched and orphaned sockets (scans are skipped
/// while a count is zero).
pub(crate) struct SocketMetas {
    slots: &'static mut [SocketMeta],
    watched: usize,
    orphans: usize,
}

impl SocketMetas {
    pub(crate) fn new(slots: &'static mut [SocketMeta]) -> Self {
        Self {
            slots,
            watched: 0,
            orphans: 0,
        }
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

    /// A socket was added in `handle`'s slot: start with a clean record.
    pub(crate) fn reset(&mut self, handle: SocketHandle) {
        self.unwatch(handle);
        if let Some(m) = self.slot(handle) {
            let was_orphan = m.orphan.is_some();
            *m = SocketMeta::EMPTY;
            if was_orphan {
                self.orphans -= 1;
            }
        }
    }

    /// Watch (`true`) or stop watching the socket for a timeout.
    pub(crate) fn set_watched(&mut self, handle: SocketHandle, on: bool) {
        if on {
            if let Some(m) = self.slot(handle) {
                if !m.watched {
                    m.watched = true;
                    self.watched += 1;
                }
            }
        } else {
            self.unwatch(handle);
        }
    }

    fn unwatch(&mut self, handle: SocketHandle) {
        if let Some(m) = self.slot(handle) {
            if m.watched {
                m.watched = false;
                self.watched -= 1;
            }
        }
    }

    /// Records a cause (the first one wins).
    pub(crate) fn set_cause(&mut self, handle: SocketHandle, cause: CloseCause) {
        if let Some(m) = self.slot(handle) {
            m.cause.get_or_insert(cause);
        }
    }

    /// Notes that the connection was established.
    pub(crate) fn set_connected(&mut self, handle: SocketHandle) {
        if let Some(m) = self.slot(handle) {
            m.connected = true;
        }
    }

    /// Notes that this side shut its write half.
    pub(crate) fn set_write_shut(&mut self, handle: SocketHandle) {
        if let Some(m) = self.slot(handle) {
            m.write_shut = true;
        }
    }

    /// The record for `handle` (a clean one if the index is out of range, which cannot happen
    /// for handles of this stack's socket set).
    pub(crate) fn get(&self, handle: SocketHandle) -> SocketMeta {
        self.slots
            .get(index(handle))
            .copied()
            .unwrap_or(SocketMeta::EMPTY)
    }

    /// Before `poll_egress`: note which watched sockets are open.
    pub(crate) fn before_egress(&mut self, sockets: &SocketSet<'_>) {
        if self.watched == 0 {
            return;
        }
        for (h, s) in sockets.iter() {
            if let Socket::Tcp(t) = s {
                let open = t.state() != tcp::State::Closed;
                if let Some(m) = self.slot(h).filter(|m| m.watched) {
                    m.open_before = open;
                }
            }
        }
    }

    /// After `poll_egress`: watched sockets it closed timed out.
    pub(crate) fn after_egress(&mut self, sockets: &SocketSet<'_>) {
        if self.watched == 0 {
            return;
        }
        for (h, s) in sockets.iter() {
            if let Socket::Tcp(t) = s {
                let closed = t.state() == tcp::State::Closed;
                if let Some(m) = self.slot(h).filter(|m| m.watched) {
                    if m.open_before && closed {
                        m.cause.get_or_insert(CloseCause::TimedOut);
                    }
                    m.open_before = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;

    use smoltcp::iface::{SocketSet, SocketStorage};
    use smoltcp::socket::tcp;

    use super::index;

    /// The handle's slot index recovered through `Hash` is the one smoltcp prints.
    #[test]
    fn index_matches_smoltcp_slot() {
        let mut storage: [SocketStorage<'_>; 4] = Default::default();
        let mut set = SocketSet::new(&mut storage[..]);
        let mk = || {
            tcp::Socket::new(
                tcp::SocketBuffer::new(&mut [][..]),
                tcp::SocketBuffer::new(&mut [][..]),
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
