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
//! With SYN cookies on ([`Config::syn_cookies`](crate::Config::syn_cookies), the default), such
//! a SYN is answered with a SYN cookie instead (`overflow.rs`), and the connections its
//! cookies complete wait here for the listener's `accept`: at most its backlog of them per
//! listener, [`MAX_BACKLOG`] in all.
//!
//! [`State::remove_socket`]: crate::stack::State::remove_socket
//! [`State::adopt_orphan`]: crate::stack::State::adopt_orphan
//! [`Stack::tcp_buffers_returned`]: crate::Stack::tcp_buffers_returned

use core::task::Waker;

use smoltcp::time::Instant;
use smoltcp::wire::IpAddress;
use zcnet_buffer::FramePool;

use crate::socket::tcp::TcpBuffers;
use crate::socket::tcp::MAX_BACKLOG;
use crate::transport::tcp::table::TcpHandle;
use crate::StackError;

/// How many [`TcpListener`](crate::tcp::TcpListener)s a stack tracks at once (each one has an
/// entry, also when several listen on the same port).
pub const MAX_LISTENERS: usize = 16;

/// What a listener's SYN cookies need to answer a SYN and to make a connection from the
/// final ACK: given by `TcpListener::bind`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListenSpec {
    /// The listen address (`None`: any of the stack's).
    pub(crate) addr: Option<IpAddress>,
    /// The listen backlog: also the bound of connections completed from cookies that wait
    /// for `accept`.
    pub(crate) backlog: usize,
    /// The listener's buffer source, for the connections completed from cookies.
    pub(crate) make_buffers: fn() -> Option<TcpBuffers>,
    /// The stack's pool (the connections' send frames).
    pub(crate) pool: &'static FramePool,
}

/// One listener: its port, what its cookies need, its waker while it waits for a free socket
/// slot, and its `accept`'s waker for connections completed from cookies.
#[derive(Debug)]
struct Entry {
    port: u16,
    spec: ListenSpec,
    /// The receive capacity of the listener's first listening socket: the window and window
    /// scale its cookie SYN-ACKs announce (`None` until the first socket was armed).
    rx_capacity: Option<usize>,
    slot_waiter: Option<Waker>,
    accept_waiter: Option<Waker>,
    /// When the listener last sent a cookie (`None`: never): an ACK for no connection is
    /// checked as a cookie only within a cookie's lifetime of it.
    cookie_sent: Option<Instant>,
    /// Connections completed from cookies waiting for `accept`.
    queued: usize,
}

/// A connection completed from a cookie, waiting for its listener's `accept`.
#[derive(Clone, Copy, Debug)]
struct Completed {
    listener: usize,
    handle: TcpHandle,
    /// Order of arrival: `accept` takes the oldest first.
    seq: u32,
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
    /// [`Config::syn_cookies`](crate::Config::syn_cookies).
    cookies: bool,
    /// The connections completed from cookies, of all listeners.
    completed: [Option<Completed>; MAX_BACKLOG],
    /// The next [`Completed::seq`].
    next_seq: u32,
}

/// A listener's entry in [`ListenerPorts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ListenerId(usize);

impl ListenerPorts {
    /// No listeners; SYN cookies on if `cookies`.
    pub(crate) const fn new(cookies: bool) -> Self {
        Self {
            entries: [const { None }; MAX_LISTENERS],
            len: 0,
            waiting: 0,
            cookies,
            completed: [None; MAX_BACKLOG],
            next_seq: 0,
        }
    }

    /// Registers a listener on `port`.
    pub(crate) fn add(&mut self, port: u16, spec: ListenSpec) -> Result<ListenerId, StackError> {
        let i = self
            .entries
            .iter()
            .position(Option::is_none)
            .ok_or(StackError::TooManyListeners)?;
        self.entries[i] = Some(Entry {
            port,
            spec,
            rx_capacity: None,
            slot_waiter: None,
            accept_waiter: None,
            cookie_sent: None,
            queued: 0,
        });
        self.len += 1;
        Ok(ListenerId(i))
    }

    /// Unregisters a listener (dropping its wakers, if any). Take its completed connections
    /// ([`pop_completed`](Self::pop_completed)) first: those left are forgotten.
    pub(crate) fn remove(&mut self, id: ListenerId) {
        if let Some(e) = self.entries[id.0].take() {
            self.len -= 1;
            if e.slot_waiter.is_some() {
                self.waiting -= 1;
            }
            for c in &mut self.completed {
                if c.is_some_and(|c| c.listener == id.0) {
                    *c = None;
                }
            }
        }
    }

    /// Whether SYN cookies are on.
    pub(crate) fn cookies(&self) -> bool {
        self.cookies
    }

    /// Notes the receive capacity of a listening socket of `id`: the first one noted is what
    /// its cookie SYN-ACKs announce, so a SYN-ACK and the connection its ACK makes agree.
    pub(crate) fn note_rx_capacity(&mut self, id: ListenerId, capacity: usize) {
        if let Some(e) = &mut self.entries[id.0] {
            e.rx_capacity.get_or_insert(capacity);
        }
    }

    /// The listener a segment to `addr`:`port` is for (the first registered, when several
    /// listen there), with its spec and noted receive capacity.
    pub(crate) fn find(
        &self,
        addr: IpAddress,
        port: u16,
    ) -> Option<(ListenerId, ListenSpec, Option<usize>)> {
        if self.is_empty() {
            return None;
        }
        self.entries.iter().enumerate().find_map(|(i, e)| {
            let e = e.as_ref()?;
            (e.port == port && e.spec.addr.is_none_or(|a| a == addr)).then_some((
                ListenerId(i),
                e.spec,
                e.rx_capacity,
            ))
        })
    }

    /// Notes that `id` sent a cookie at `now`.
    pub(crate) fn note_cookie_sent(&mut self, id: ListenerId, now: Instant) {
        if let Some(e) = &mut self.entries[id.0] {
            e.cookie_sent = Some(now);
        }
    }

    /// Whether `id` sent a cookie that may still come back at `now` (within
    /// [`COOKIE_LIFETIME_SECS`](super::cookie::COOKIE_LIFETIME_SECS)).
    pub(crate) fn cookie_recent(&self, id: ListenerId, now: Instant) -> bool {
        let lifetime =
            smoltcp::time::Duration::from_secs(super::cookie::COOKIE_LIFETIME_SECS as u64);
        self.entries[id.0]
            .as_ref()
            .and_then(|e| e.cookie_sent)
            .is_some_and(|t| now < t + lifetime)
    }

    /// Whether `id` has its backlog of completed connections waiting (or every place for
    /// them, of all listeners, is taken).
    pub(crate) fn queue_full(&self, id: ListenerId) -> bool {
        let Some(e) = &self.entries[id.0] else {
            return true;
        };
        e.queued >= e.spec.backlog || self.completed.iter().all(Option::is_some)
    }

    /// Queues `handle`, completed from a cookie, for `id`'s `accept`; returns the waker to
    /// wake. `Err` (with the handle back) when the queue is full.
    pub(crate) fn push_completed(
        &mut self,
        id: ListenerId,
        handle: TcpHandle,
    ) -> Result<Option<Waker>, TcpHandle> {
        if self.queue_full(id) {
            return Err(handle);
        }
        let (Some(e), Some(place)) = (
            &mut self.entries[id.0],
            self.completed.iter_mut().find(|c| c.is_none()),
        ) else {
            return Err(handle);
        };
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        *place = Some(Completed {
            listener: id.0,
            handle,
            seq,
        });
        e.queued += 1;
        Ok(e.accept_waiter.take())
    }

    /// The oldest connection completed from a cookie waiting for `id`'s `accept`, taken off
    /// the queue.
    pub(crate) fn pop_completed(&mut self, id: ListenerId) -> Option<TcpHandle> {
        let next = self.next_seq;
        let place = self
            .completed
            .iter_mut()
            .filter(|c| c.is_some_and(|c| c.listener == id.0))
            // The oldest: the furthest behind the next number (modulo 2^32).
            .max_by_key(|c| c.map_or(0, |c| next.wrapping_sub(c.seq)))?;
        let c = place.take()?;
        if let Some(e) = &mut self.entries[id.0] {
            e.queued -= 1;
        }
        Some(c.handle)
    }

    /// `waker` is woken when a connection completed from a cookie is queued for `id`
    /// (replacing the earlier waker).
    pub(crate) fn wait_for_completed(&mut self, id: ListenerId, waker: &Waker) {
        if let Some(e) = &mut self.entries[id.0] {
            match &mut e.accept_waiter {
                Some(w) if w.will_wake(waker) => {}
                w => *w = Some(waker.clone()),
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

    fn spec(backlog: usize) -> ListenSpec {
        static POOL: std::sync::OnceLock<&'static FramePool> = std::sync::OnceLock::new();
        ListenSpec {
            addr: None,
            backlog,
            make_buffers: || Some(TcpBuffers::with_capacity(1024, 1024)),
            pool: POOL.get_or_init(|| FramePool::leak(zcnet_buffer::PoolConfig::new(4)).unwrap()),
        }
    }

    #[test]
    fn ports_are_counted_per_listener() {
        let mut l = ListenerPorts::new(true);
        let a = l.add(80, spec(1)).unwrap();
        let b = l.add(80, spec(1)).unwrap();
        l.remove(a);
        assert!(l.contains(80));
        l.remove(b);
        assert!(!l.contains(80) && l.is_empty());
        for p in 0..MAX_LISTENERS as u16 {
            l.add(1000 + p, spec(1)).unwrap();
        }
        assert_eq!(l.add(1, spec(1)), Err(StackError::TooManyListeners));
    }

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn slot_waiters_are_woken_once_per_registration() {
        let mut l = ListenerPorts::new(true);
        let a = l.add(80, spec(1)).unwrap();
        let b = l.add(81, spec(1)).unwrap();
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

    #[test]
    fn completed_connections_queue_per_listener_oldest_first_within_the_backlog() {
        let mut l = ListenerPorts::new(true);
        let a = l.add(80, spec(2)).unwrap();
        let b = l.add(81, spec(MAX_BACKLOG)).unwrap();
        let h = TcpHandle::for_test;
        assert!(l.push_completed(a, h(1)).unwrap().is_none());
        l.push_completed(b, h(2)).unwrap();
        l.push_completed(a, h(3)).unwrap();
        assert!(l.queue_full(a));
        assert_eq!(
            l.push_completed(a, h(4)).err(),
            Some(h(4)),
            "the backlog bounds it"
        );
        assert_eq!(l.pop_completed(a), Some(h(1)));
        // A waiter is handed back by the next push.
        let count = Arc::new(Count(AtomicUsize::new(0)));
        l.wait_for_completed(a, &Waker::from(count.clone()));
        let w = l.push_completed(a, h(5)).unwrap().expect("the waiter");
        w.wake();
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert_eq!(l.pop_completed(a), Some(h(3)));
        assert_eq!(l.pop_completed(a), Some(h(5)));
        assert_eq!(l.pop_completed(a), None);
        // Every place of all listeners together bounds it too.
        for i in 0..MAX_BACKLOG - 1 {
            l.push_completed(b, h(10 + i)).unwrap();
        }
        assert!(l.queue_full(a) && l.queue_full(b));
        assert_eq!(l.push_completed(a, h(6)).err(), Some(h(6)));
        l.remove(b);
        assert!(!l.queue_full(a), "a removed listener's places are free");
        assert_eq!(l.pop_completed(b), None);
    }

    #[test]
    fn a_listener_is_found_by_port_and_address() {
        let mut l = ListenerPorts::new(true);
        let addr = IpAddress::v4(10, 0, 0, 2);
        let other = IpAddress::v4(10, 0, 0, 3);
        assert!(l.find(addr, 80).is_none());
        let a = l
            .add(
                80,
                ListenSpec {
                    addr: Some(addr),
                    ..spec(1)
                },
            )
            .unwrap();
        l.note_rx_capacity(a, 4096);
        l.note_rx_capacity(a, 8192);
        let (id, _, cap) = l.find(addr, 80).unwrap();
        assert_eq!((id, cap), (a, Some(4096)), "the first capacity noted");
        assert!(l.find(other, 80).is_none());
        assert!(l.find(addr, 81).is_none());
        // Cookies come back for a cookie's lifetime after the last one sent.
        let t = Instant::from_secs(1000);
        assert!(!l.cookie_recent(a, t));
        l.note_cookie_sent(a, t);
        let life = super::super::cookie::COOKIE_LIFETIME_SECS;
        assert!(l.cookie_recent(a, Instant::from_secs(1000 + life - 1)));
        assert!(!l.cookie_recent(a, Instant::from_secs(1000 + life)));
    }
}
