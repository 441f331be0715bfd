//! A real listen backlog: a SYN for a [`TcpListener`](crate::tcp::TcpListener)'s port that finds
//! every one of its listening sockets busy is dropped, not answered.
//!
//! A SYN that no connection and no listening socket takes is answered with RST, so with a
//! backlog of 16 the 17th simultaneous client would be refused. Real stacks drop such a SYN
//! instead: the client retransmits it after its timeout, by when the listener has re-armed.
//! TCP ingress (`input.rs`) therefore drops a SYN (without ACK) that nothing takes when its
//! port is a registered listener port, counting it as
//! [`DropReason::BacklogFull`](crate::DropReason::BacklogFull).
//!
//! The same table lets a listener that is short of listening sockets (the stack's socket slots
//! were all taken, or its buffer source had none, when it tried to re-arm) wait for what it
//! lacks: [`State::remove_socket`] wakes it when a slot frees, [`State::adopt_orphan`] when
//! the application drops a socket that lingers (its buffers go back to a source that counts
//! per connection), and [`Stack::tcp_buffers_returned`] when the application says buffers came
//! back; its `accept` then re-arms.
//!
//! [`State::remove_socket`]: crate::stack::State::remove_socket
//! [`State::adopt_orphan`]: crate::stack::State::adopt_orphan
//! [`Stack::tcp_buffers_returned`]: crate::Stack::tcp_buffers_returned

use core::task::Waker;

use crate::StackError;

/// How many [`TcpListener`](crate::tcp::TcpListener)s a stack tracks at once (each one has an
/// entry, also when several listen on the same port).
pub const MAX_LISTENERS: usize = 16;

/// One listener: its port, and its waker while it waits for a free socket slot.
#[derive(Debug)]
struct Entry {
    port: u16,
    slot_waiter: Option<Waker>,
}

/// The listeners' ports and slot waiters, one entry per listener.
#[derive(Debug)]
pub(crate) struct ListenerPorts {
    entries: [Option<Entry>; MAX_LISTENERS],
    /// How many entries are `Some`: ingress asks "a listener on this port?" for every SYN
    /// nothing takes, and a count answers without walking the table when there is none.
    len: usize,
    /// How many entries hold a slot waiter (`Entry::slot_waiter` is `Some`): asked after every
    /// ingress batch, answered the same way.
    waiting: usize,
}

/// A listener's entry in [`ListenerPorts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ListenerId(usize);

impl ListenerPorts {
    pub(crate) const fn new() -> Self {
        Self {
            entries: [const { None }; MAX_LISTENERS],
            len: 0,
            waiting: 0,
        }
    }

    /// Registers a listener on `port`.
    pub(crate) fn add(&mut self, port: u16) -> Result<ListenerId, StackError> {
        let i = self
            .entries
            .iter()
            .position(Option::is_none)
            .ok_or(StackError::TooManyListeners)?;
        self.entries[i] = Some(Entry {
            port,
            slot_waiter: None,
        });
        self.len += 1;
        Ok(ListenerId(i))
    }

    /// Unregisters a listener (dropping its slot waiter, if any).
    pub(crate) fn remove(&mut self, id: ListenerId) {
        if let Some(e) = self.entries[id.0].take() {
            self.len -= 1;
            if e.slot_waiter.is_some() {
                self.waiting -= 1;
            }
        }
    }

    /// Until the next [`wake_slot_waiters`](Self::wake_slot_waiters), `waker` is woken when a
    /// socket slot is freed or buffers may have come back (replacing this listener's earlier
    /// waker: one per listener).
    pub(crate) fn wait_for_slot(&mut self, id: ListenerId, waker: &Waker) {
        if let Some(e) = &mut self.entries[id.0] {
            match &mut e.slot_waiter {
                Some(w) if w.will_wake(waker) => {}
                Some(w) => *w = waker.clone(),
                w @ None => {
                    *w = Some(waker.clone());
                    self.waiting += 1;
                }
            }
        }
    }

    /// Whether any listener waits for a free socket slot.
    pub(crate) fn has_slot_waiters(&self) -> bool {
        self.waiting > 0
    }

    /// A socket slot was freed or buffers may have come back: wakes (and forgets) every
    /// listener waiting.
    pub(crate) fn wake_slot_waiters(&mut self) {
        if self.waiting == 0 {
            return;
        }
        self.waiting = 0;
        for e in self.entries.iter_mut().flatten() {
            if let Some(w) = e.slot_waiter.take() {
                w.wake();
            }
        }
    }

    /// Whether a listener is registered on `port`.
    pub(crate) fn contains(&self, port: u16) -> bool {
        !self.is_empty() && self.entries.iter().flatten().any(|e| e.port == port)
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;

    #[test]
    fn ports_are_counted_per_listener() {
        let mut l = ListenerPorts::new();
        let a = l.add(80).unwrap();
        let b = l.add(80).unwrap();
        l.remove(a);
        assert!(l.contains(80));
        l.remove(b);
        assert!(!l.contains(80) && l.is_empty());
        for p in 0..MAX_LISTENERS as u16 {
            l.add(1000 + p).unwrap();
        }
        assert_eq!(l.add(1), Err(StackError::TooManyListeners));
    }

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn slot_waiters_are_woken_once_per_registration() {
        let mut l = ListenerPorts::new();
        let a = l.add(80).unwrap();
        let b = l.add(81).unwrap();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let w = Waker::from(count.clone());
        // Registering twice keeps one waker.
        assert!(!l.has_slot_waiters());
        l.wait_for_slot(a, &w);
        l.wait_for_slot(a, &w);
        assert!(l.has_slot_waiters());
        l.wake_slot_waiters();
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert!(!l.has_slot_waiters());
        // Woken wakers are forgotten; a removed listener's waker is never woken.
        l.wake_slot_waiters();
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        l.wait_for_slot(b, &w);
        assert!(l.has_slot_waiters());
        l.remove(b);
        assert!(!l.has_slot_waiters());
        l.wake_slot_waiters();
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        // A waiter replaced by another task's waker is still one waiter.
        let other = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        l.wait_for_slot(a, &w);
        l.wait_for_slot(a, &other);
        l.remove(a);
        assert!(!l.has_slot_waiters() && l.is_empty());
    }
}
