//! A real listen backlog: a SYN for a [`TcpListener`](crate::tcp::TcpListener)'s port that finds
//! every one of its listening sockets busy is dropped, not answered.
//!
//! smoltcp answers a SYN that matches no listening socket with RST, so with a backlog of 16 the
//! 17th simultaneous client would be refused. Real stacks drop such a SYN instead: the client
//! retransmits it after its timeout, by when the listener has re-armed. Ingress therefore
//! peeks at each frame before smoltcp sees it (a few header reads, no copy) and drops a SYN for
//! a registered listener port when no socket is in `Listen` on that port, counting it as
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

use smoltcp::iface::SocketSet;
use smoltcp::phy::Medium;
use smoltcp::socket::{tcp, Socket};
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket,
};

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
    /// How many entries are `Some`: ingress asks "any listener?" for every frame, and a count
    /// answers without walking the table.
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

    fn contains(&self, port: u16) -> bool {
        self.entries.iter().flatten().any(|e| e.port == port)
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `frame` is a SYN for a listener port whose listening sockets are all busy.
    pub(crate) fn overflows(&self, medium: Medium, frame: &[u8], sockets: &SocketSet<'_>) -> bool {
        if self.is_empty() {
            return false;
        }
        let Some(port) = syn_port(medium, frame) else {
            return false;
        };
        self.contains(port)
            && !sockets.iter().any(|(_, s)| match s {
                Socket::Tcp(t) => {
                    t.state() == tcp::State::Listen && t.listen_endpoint().port == port
                }
                #[allow(unreachable_patterns)]
                _ => false,
            })
    }
}

/// The destination port of a connection-opening TCP segment (SYN without ACK), or `None` for
/// anything else or anything malformed (smoltcp then judges it as usual).
fn syn_port(medium: Medium, frame: &[u8]) -> Option<u16> {
    let ip = match medium {
        Medium::Ethernet => {
            let eth = EthernetFrame::new_checked(frame).ok()?;
            match eth.ethertype() {
                EthernetProtocol::Ipv4 | EthernetProtocol::Ipv6 => {
                    &frame[EthernetFrame::<&[u8]>::header_len()..]
                }
                _ => return None,
            }
        }
        Medium::Ip => frame,
        #[allow(unreachable_patterns)]
        _ => return None,
    };
    let segment = match ip.first()? >> 4 {
        4 => {
            let p = Ipv4Packet::new_checked(ip).ok()?;
            if p.next_header() != IpProtocol::Tcp || p.more_frags() || p.frag_offset() != 0 {
                return None;
            }
            &ip[p.header_len() as usize..usize::from(p.total_len())]
        }
        6 => {
            let p = Ipv6Packet::new_checked(ip).ok()?;
            if p.next_header() != IpProtocol::Tcp {
                return None;
            }
            &ip[40..40 + usize::from(p.payload_len())]
        }
        _ => return None,
    };
    let tcp = TcpPacket::new_checked(segment).ok()?;
    (tcp.syn() && !tcp.ack()).then(|| tcp.dst_port())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;

    /// An Ethernet + IPv4 + TCP frame with the given flags to port 80.
    fn frame(syn: bool, ack: bool) -> [u8; 54] {
        let mut f = [0u8; 54];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&40u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        let tcp = &mut f[34..54];
        tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = (u8::from(syn) << 1) | (u8::from(ack) << 4);
        f
    }

    #[test]
    fn only_a_bare_syn_counts() {
        assert_eq!(syn_port(Medium::Ethernet, &frame(true, false)), Some(80));
        assert_eq!(syn_port(Medium::Ethernet, &frame(true, true)), None);
        assert_eq!(syn_port(Medium::Ethernet, &frame(false, true)), None);
        assert_eq!(syn_port(Medium::Ip, &frame(true, false)[14..]), Some(80));
    }

    #[test]
    fn truncated_or_foreign_frames_are_left_alone() {
        let f = frame(true, false);
        for n in 0..f.len() {
            assert_eq!(syn_port(Medium::Ethernet, &f[..n]), None, "cut at {n}");
        }
        let mut arp = f;
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(syn_port(Medium::Ethernet, &arp), None);
    }

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
