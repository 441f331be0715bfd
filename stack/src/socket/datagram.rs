//! Zero-copy UDP: [`DatagramSocket`] receives [`Datagram`]s that *are* the driver's receive
//! buffers, and sends payloads the application wrote straight into a transmit slot.
//!
//! ```text
//!  RX  driver ─RxFrame─► ingress: Ethernet ─► IPv4/IPv6 ─► UDP ─► bound (address, port)?
//!         │                 no ──► smoltcp (ARP, ICMP, TCP, UdpSocket, …), see below
//!         │                 yes ─► checksum ok? ── no ──► drop, count DropReason::BadChecksum
//!         │                          │ yes
//!         │                          ▼
//!         │               socket queue full? ── yes ──► drop, count DropReason::DatagramQueueFull
//!         │                          │ no: the RxFrame itself moves into the queue (slot LENT)
//!         ▼                          ▼
//!  app:  recv().await ─► Datagram { RxFrame, src, dst } ─► payload(): a view into the slot
//!                                    └─ drop ─► slot FREE, the driver may post it again
//!
//!  TX  app: tx_frame().await ─► TxFrame, data empty, headroom for driver + Ethernet + IPv6 + UDP
//!           write the payload in place (append / buffer_mut + set_len)
//!      send_to(frame, dst).await ─► UDP header, then IP header, written in front (smoltcp::wire)
//!           ─► next hop (our subnets, then routes) ─► neighbour known? ─► Ethernet header
//!           ─► Driver::transmit(frame): the very slot the app wrote goes to the device
//!           neighbour unknown ─► frame held (bounded), ARP request / NDP solicitation sent by
//!           egress ─► answer snooped by ingress ─► Ethernet header, transmit, send_to returns
//!           Ok ─ or no answer in NEIGHBOR_TIMEOUT ─► dropped, counted, send_to returns Err
//! ```
//!
//! # Who owns a frame when
//!
//! * The driver owns a slot while it is posted to its RX ring. A completed frame goes to the
//!   ingress task (slot state STACK). Ingress either hands its bytes to smoltcp (which copies
//!   what it keeps, and the frame is dropped right after) or, for a datagram addressed to a
//!   bound `DatagramSocket`, moves the `RxFrame` itself into that socket's queue and marks it
//!   LENT. From then on the application owns it: through the queue, then the [`Datagram`]
//!   `recv` returns. Dropping the `Datagram` (on any thread) returns the slot to the pool; the
//!   driver posts a fresh slot after every completion, so held datagrams use up the pool's spare
//!   slots, never the driver's ring (size the pool for ring + queues + in-flight TX).
//! * On send, the application owns the [`TxFrame`] from `tx_frame` until it passes it to
//!   `send_to`. `send_to` writes the headers and hands the frame to the driver (state DEVICE)
//!   before it returns, or holds it in the stack while the next hop's MAC is resolved (then
//!   the stack owns it until it is sent or dropped).
//!
//! # Bounds
//!
//! * Each socket's queue holds at most as many datagrams as the [`DatagramQueue`] given to
//!   [`bind`](DatagramSocket::bind) has places; the stack never allocates for it.
//! * At most [`MAX_DATAGRAM_SOCKETS`] zero-copy sockets per stack.
//! * Neighbour resolution: at most [`MAX_HELD_FRAMES`](crate::MAX_HELD_FRAMES) frames held
//!   stack-wide and [`MAX_NEIGHBORS`](crate::MAX_NEIGHBORS) next hops remembered
//!   (`link/neighbor.rs` has the design).
//!
//! # What goes to smoltcp
//!
//! Everything that is not a UDP datagram for a bound zero-copy socket, nor a TCP segment for
//! the stack (zcnet's TCP takes those, `transport/tcp/input.rs`): ARP, ICMP, NDP, UDP for ordinary [`UdpSocket`](crate::udp::UdpSocket)s or for no socket (smoltcp answers
//! with ICMP port unreachable), IPv4 fragments, IPv6 packets with extension headers, and
//! anything malformed; first, ingress counts what smoltcp will drop and drops (counted) what
//! has a wrong IPv4, UDP or ICMP checksum, which smoltcp leaves to it (`ip/check.rs`).
//! ARP and NDP packets are also snooped, before smoltcp sees them, to
//! learn neighbours for the zero-copy send path and TCP. A datagram matched to a zero-copy
//! socket is never seen by smoltcp, so a [`RawSocket`](crate::raw::RawSocket) for UDP does not
//! see it (nor does one for TCP see TCP segments). While no zero-copy socket is bound, ingress
//! classifies nothing but ARP and NDP for snooping.
//!
//! # Checksums
//!
//! Verified on receive (IPv4 header and UDP; an IPv6 UDP datagram must carry one) unless the
//! driver's capabilities say the device verified them; computed once on send, in place over
//! the payload the application wrote, unless the device computes them (then the field is left
//! zero, as smoltcp does).
//!
//! # Ports
//!
//! A zero-copy socket and a smoltcp [`UdpSocket`](crate::udp::UdpSocket) cannot share a port
//! (either `bind` fails with [`StackError::AddressInUse`]); neither can two zero-copy sockets
//! whose addresses overlap, nor a zero-copy socket and the DHCPv4 client (port 68), nor a
//! zero-copy socket and a [`DnsSocket`](crate::dns::DnsSocket) query in flight. Port 0 picks a
//! free ephemeral port from the stack's one allocator, which UDP sockets, TCP connections and
//! DNS queries use too: a DNS query never starts from a port a zero-copy socket is bound to,
//! and a zero-copy socket never gets the port of a query in flight (`transport/ports.rs`).
//!
//! # Not covered
//!
//! Multicast groups (IPv4 multicast and IPv6 multicast destinations are not received on this
//! path; they go to smoltcp), IP fragmentation (a datagram must fit the MTU), raw IP (use
//! [`RawSocket`](crate::raw::RawSocket), which copies), and sending to one of the stack's own
//! addresses ([`DatagramError::Unaddressable`]).

#[cfg(feature = "alloc")]
extern crate alloc;

use core::future::{poll_fn, Future};
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use smoltcp::iface::Interface;
use smoltcp::phy::Medium;
use smoltcp::socket::Socket;
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, HardwareAddress, IpAddress, IpProtocol, IpRepr, Ipv4Packet,
    Ipv4Repr, Ipv6Packet, Ipv6Repr, UdpPacket,
};
use zcnet_buffer::{RxFrame, TxError, TxFrame, ETHERNET_HEADER_LEN};

pub use smoltcp::wire::IpVersion;

use crate::config::{IpEndpoint, IpListenEndpoint};
use crate::ip::emit::write_header;
use crate::link::neighbor::{self};
use crate::link::Sender;
use crate::link::Sent;
use crate::stack::{Stack, State};
use crate::stats::{Counters, DropReason};
use crate::StackError;

/// Zero-copy sockets one stack can have bound at once.
pub const MAX_DATAGRAM_SOCKETS: usize = 16;

/// IPv4 header without options, as the stack writes it.
const IPV4_HEADER_LEN: usize = 20;
/// IPv6 header without extension headers.
const IPV6_HEADER_LEN: usize = 40;
/// UDP header.
const UDP_HEADER_LEN: usize = 8;
/// Hop limit / TTL of datagrams the stack sends (smoltcp's default too).
const HOP_LIMIT: u8 = 64;

/// Why a zero-copy send failed. The frame is gone in every case (its slot returned to the
/// pool), and the drop is counted where the stack dropped it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatagramError {
    /// The destination cannot be used: port 0, the unspecified address, one of the stack's own
    /// addresses, no route to it, no source address of its IP version, or a version other than
    /// the address the socket is bound to.
    Unaddressable,
    /// Payload plus headers exceed the link's MTU (see [`DatagramSocket::max_payload`]).
    TooLarge,
    /// The frame has too little headroom for the headers: it did not come from
    /// [`DatagramSocket::tx_frame`], or its data was moved.
    NoHeadroom,
    /// The next hop is unresolved and the stack already holds
    /// [`MAX_HELD_FRAMES`](crate::MAX_HELD_FRAMES) frames; or, while the frame waited, the
    /// neighbour table gave the next hop's place to a more recently used one (it remembers
    /// [`MAX_NEIGHBORS`](crate::MAX_NEIGHBORS)), counted as
    /// [`DropReason::NeighborTableFull`].
    NeighborQueueFull,
    /// The next hop did not answer ARP / NDP within
    /// [`NEIGHBOR_TIMEOUT`](crate::NEIGHBOR_TIMEOUT); counted as
    /// [`DropReason::NeighborTimeout`].
    NeighborTimeout,
    /// The driver refused the frame; counted as [`DropReason::TxDriver`].
    Driver(TxError),
    /// The stack was shut down ([`Stack::shutdown`](crate::Stack::shutdown)) before the frame
    /// went out.
    ShutDown,
}

impl core::fmt::Display for DatagramError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DatagramError::Unaddressable => f.write_str("unaddressable endpoint"),
            DatagramError::TooLarge => f.write_str("datagram larger than the MTU"),
            DatagramError::NoHeadroom => f.write_str("frame lacks headroom for the headers"),
            DatagramError::NeighborQueueFull => {
                f.write_str("too many frames waiting for neighbour resolution")
            }
            DatagramError::NeighborTimeout => f.write_str("neighbour did not answer ARP/NDP"),
            DatagramError::Driver(e) => write!(f, "driver refused the frame: {e}"),
            DatagramError::ShutDown => f.write_str("stack shut down"),
        }
    }
}

impl core::error::Error for DatagramError {}

/// A received UDP datagram that owns the driver's receive slot it arrived in.
///
/// [`payload`](Self::payload) is a view into that slot — the bytes the device wrote, never
/// copied. Dropping the datagram (on any thread) returns the slot to the pool. Hold datagrams
/// only as long as needed: each one is a pool slot the driver cannot receive into.
#[derive(Debug)]
pub struct Datagram {
    frame: RxFrame,
    src: IpEndpoint,
    dst: IpEndpoint,
}

impl Datagram {
    /// The UDP payload, in place in the receive slot.
    pub fn payload(&self) -> &[u8] {
        &self.frame
    }

    /// Who sent it (address and port).
    pub fn src(&self) -> IpEndpoint {
        self.src
    }

    /// Where it was sent: one of the stack's addresses (or a broadcast address) and the
    /// socket's port.
    pub fn dst(&self) -> IpEndpoint {
        self.dst
    }

    /// The frame itself (its slot index and pool, e.g. to prove where the bytes are). Its
    /// visible bytes are the payload: headers were stripped with `advance`, not copied.
    pub fn frame(&self) -> &RxFrame {
        &self.frame
    }

    /// Gives up the endpoints and keeps the frame.
    pub fn into_frame(self) -> RxFrame {
        self.frame
    }
}

/// One place in a [`DatagramQueue`]: empty, or a queued [`Datagram`]. Caller-supplied storage
/// starts as an array of [`DatagramSlot::EMPTY`].
#[derive(Debug)]
pub struct DatagramSlot(Option<Datagram>);

impl DatagramSlot {
    /// An empty place.
    pub const EMPTY: DatagramSlot = DatagramSlot(None);
}

#[derive(Debug)]
enum Places {
    Static(&'static mut [DatagramSlot]),
    #[cfg(feature = "alloc")]
    Heap(alloc::boxed::Box<[DatagramSlot]>),
}

/// The receive queue of a [`DatagramSocket`]: how many datagrams (pool slots) the socket may
/// hold before further ones are dropped and counted ([`DropReason::DatagramQueueFull`]).
///
/// ```
/// use zcnet_stack::datagram::{DatagramQueue, DatagramSlot};
///
/// // no_std: storage in a static, claimed once.
/// static mut PLACES: [DatagramSlot; 16] = [DatagramSlot::EMPTY; 16];
/// // SAFETY (in real code): this is the only reference ever taken to PLACES.
/// let queue = DatagramQueue::from_static(unsafe { &mut *core::ptr::addr_of_mut!(PLACES) });
/// assert_eq!(queue.capacity(), 16);
/// ```
#[derive(Debug)]
pub struct DatagramQueue {
    places: Places,
}

impl DatagramQueue {
    /// A queue over caller-provided places (e.g. a `static mut` array claimed once). Dropping
    /// the queue (with its socket) drops the datagrams still in it, returning their slots to
    /// the pool, and leaves the places empty.
    pub fn from_static(places: &'static mut [DatagramSlot]) -> Self {
        Self {
            places: Places::Static(places),
        }
    }

    /// A queue of `capacity` places on the heap, freed with the socket.
    #[cfg(feature = "alloc")]
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            places: Places::Heap((0..capacity).map(|_| DatagramSlot::EMPTY).collect()),
        }
    }

    /// How many datagrams the queue holds at most.
    pub fn capacity(&self) -> usize {
        match &self.places {
            Places::Static(p) => p.len(),
            #[cfg(feature = "alloc")]
            Places::Heap(p) => p.len(),
        }
    }

    fn places(&mut self) -> &mut [DatagramSlot] {
        match &mut self.places {
            Places::Static(p) => p,
            #[cfg(feature = "alloc")]
            Places::Heap(p) => p,
        }
    }
}

impl Drop for DatagramQueue {
    /// Drops the datagrams still queued, so their slots return to the pool whoever owns the
    /// places (caller-provided places outlive the queue; heap places are freed after this).
    fn drop(&mut self) {
        for place in self.places() {
            drop(place.0.take());
        }
    }
}

/// A bound zero-copy socket's record in the stack.
#[derive(Debug)]
struct Entry {
    endpoint: IpListenEndpoint,
    queue: DatagramQueue,
    head: usize,
    len: usize,
    recv_waker: Option<Waker>,
    tx_waker: Option<Waker>,
    dropped: u64,
}

impl Entry {
    fn pop(&mut self) -> Option<Datagram> {
        if self.len == 0 {
            return None;
        }
        let cap = self.queue.capacity();
        let d = self.queue.places()[self.head].0.take();
        self.head = (self.head + 1) % cap;
        self.len -= 1;
        d
    }
}

/// The zero-copy sockets (part of the stack's locked state).
#[derive(Debug)]
pub(crate) struct ZcSockets {
    entries: [Option<Entry>; MAX_DATAGRAM_SOCKETS],
    pub(crate) bound: usize,
    /// Some socket waits for a TX frame: egress wakes it when it runs.
    tx_waiting: bool,
}

/// Whether two bound endpoints would receive the same datagrams.
fn overlaps(a: &IpListenEndpoint, b: &IpListenEndpoint) -> bool {
    a.port == b.port && (a.addr.is_none() || b.addr.is_none() || a.addr == b.addr)
}

impl ZcSockets {
    pub(crate) const fn new() -> Self {
        Self {
            entries: [const { None }; MAX_DATAGRAM_SOCKETS],
            bound: 0,
            tx_waiting: false,
        }
    }

    /// Whether a zero-copy socket is bound to `port`.
    pub(crate) fn uses_port(&self, port: u16) -> bool {
        self.entries
            .iter()
            .flatten()
            .any(|e| e.endpoint.port == port)
    }

    /// Whether a zero-copy socket's endpoint overlaps `ep` (a UDP socket's bind checks this).
    pub(crate) fn conflicts(&self, ep: &IpListenEndpoint) -> bool {
        self.entries
            .iter()
            .flatten()
            .any(|e| overlaps(&e.endpoint, ep))
    }

    /// The socket a datagram to `dst`:`port` belongs to.
    fn find(&self, iface: &Interface, dst: IpAddress, port: u16) -> Option<usize> {
        self.entries.iter().enumerate().find_map(|(i, e)| {
            let e = e.as_ref()?;
            if e.endpoint.port != port {
                return None;
            }
            let ours = match e.endpoint.addr {
                Some(a) => a == dst,
                None => {
                    iface.has_ip_addr(dst)
                        || matches!(dst, IpAddress::Ipv4(a) if neighbor::is_v4_broadcast(iface, a))
                }
            };
            ours.then_some(i)
        })
    }

    /// Shutdown (`stack/shutdown.rs`): drops every queued datagram (their slots return to the pool)
    /// and wakes the sockets' waiting receives and TX-frame waits to re-check.
    pub(crate) fn shut_down(&mut self) {
        for e in self.entries.iter_mut().flatten() {
            while let Some(d) = e.pop() {
                drop(d);
            }
            if let Some(w) = e.recv_waker.take() {
                w.wake();
            }
            if let Some(w) = e.tx_waker.take() {
                w.wake();
            }
        }
        self.tx_waiting = false;
    }

    /// Wakes every socket waiting for a TX frame (egress runs after TX completions).
    pub(crate) fn wake_tx_waiters(&mut self) {
        if !core::mem::take(&mut self.tx_waiting) {
            return;
        }
        for e in self.entries.iter_mut().flatten() {
            if let Some(w) = e.tx_waker.take() {
                w.wake();
            }
        }
    }
}

/// What ingress does with a frame.
pub(crate) enum Class {
    /// Not ours: smoltcp gets it.
    Pass,
    /// Ours but broken: dropped and counted.
    Drop(DropReason),
    /// Ours: the UDP payload is `len` bytes at `offset`.
    Deliver {
        sock: usize,
        offset: usize,
        len: usize,
        src: IpEndpoint,
        dst: IpEndpoint,
    },
}

/// Ingress, before smoltcp: takes the frame if it is a datagram for a zero-copy socket
/// (delivered, or dropped and counted) and returns `None`; otherwise returns it for smoltcp,
/// after learning neighbours from ARP and NDP.
pub(crate) fn ingress(
    st: &mut State,
    mut frame: RxFrame,
    now: Instant,
    counters: &Counters,
) -> Option<RxFrame> {
    if st.zc.bound == 0 {
        snoop_only(st, &frame, now, counters);
        return Some(frame);
    }
    match classify(st, &frame, frame.checksum_verified(), now, counters) {
        Class::Pass => Some(frame),
        Class::Drop(reason) => {
            counters.drop(reason);
            None
        }
        Class::Deliver {
            sock,
            offset,
            len,
            src,
            dst,
        } => {
            let Some(e) = st.zc.entries[sock].as_mut() else {
                return Some(frame);
            };
            let cap = e.queue.capacity();
            if e.len >= cap {
                e.dropped += 1;
                counters.drop(DropReason::DatagramQueueFull);
                return None; // the slot returns to the pool here
            }
            if frame.advance(offset).is_err() || frame.truncate(len).is_err() {
                return Some(frame); // lengths were checked; never taken
            }
            frame.lend_to_app();
            let at = (e.head + e.len) % cap;
            e.queue.places()[at] = DatagramSlot(Some(Datagram { frame, src, dst }));
            e.len += 1;
            counters.datagram_in();
            if let Some(w) = e.recv_waker.take() {
                w.wake();
            }
            None
        }
    }
}

/// With no zero-copy socket bound: learns neighbours from ARP and NDP (for TCP, the gateway
/// priming and any resolution in progress), classifying nothing else.
pub(crate) fn snoop_only(st: &mut State, bytes: &[u8], now: Instant, counters: &Counters) {
    if st.link.caps.medium != Medium::Ethernet {
        return;
    }
    let Ok(eth) = EthernetFrame::new_checked(bytes) else {
        return;
    };
    match eth.ethertype() {
        EthernetProtocol::Arp => neighbor::snoop_arp(st, eth.payload(), now, counters),
        EthernetProtocol::Ipv6 => {
            if let Ok(p) = Ipv6Packet::new_checked(eth.payload()) {
                if p.next_header() == IpProtocol::Icmpv6 {
                    neighbor::snoop_ndp(st, &p, now, counters);
                }
            }
        }
        _ => {}
    }
}

pub(crate) fn classify(
    st: &mut State,
    bytes: &[u8],
    verified: bool,
    now: Instant,
    counters: &Counters,
) -> Class {
    let l3 = match st.link.caps.medium {
        Medium::Ethernet => {
            let Ok(eth) = EthernetFrame::new_checked(bytes) else {
                return Class::Pass;
            };
            match eth.ethertype() {
                EthernetProtocol::Arp => {
                    neighbor::snoop_arp(st, eth.payload(), now, counters);
                    return Class::Pass;
                }
                EthernetProtocol::Ipv4 | EthernetProtocol::Ipv6 => {}
                _ => return Class::Pass,
            }
            let d = eth.dst_addr();
            let ours = match st.iface.hardware_addr() {
                HardwareAddress::Ethernet(m) => m == d,
                #[allow(unreachable_patterns)]
                _ => false,
            };
            if !(ours || d.is_broadcast() || d.is_multicast()) {
                return Class::Pass;
            }
            ETHERNET_HEADER_LEN
        }
        _ => 0,
    };
    let ip = &bytes[l3..];
    match ip.first().map(|b| b >> 4) {
        Some(4) => classify_v4(st, ip, l3, verified),
        Some(6) => classify_v6(st, ip, l3, verified, now, counters),
        _ => Class::Pass,
    }
}

fn classify_v4(st: &State, ip: &[u8], l3: usize, verified: bool) -> Class {
    let Ok(p) = Ipv4Packet::new_checked(ip) else {
        return Class::Pass;
    };
    if p.next_header() != IpProtocol::Udp || p.more_frags() || p.frag_offset() != 0 {
        return Class::Pass;
    }
    let (src, dst) = (p.src_addr(), p.dst_addr());
    let Ok(udp) = UdpPacket::new_checked(p.payload()) else {
        return Class::Pass;
    };
    let dst_ip = IpAddress::Ipv4(dst);
    let Some(sock) = st.zc.find(&st.iface, dst_ip, udp.dst_port()) else {
        return Class::Pass;
    };
    if src.is_broadcast() || src.is_multicast() || src.is_unspecified() {
        return Class::Pass; // smoltcp drops these as it always did
    }
    let src_ip = IpAddress::Ipv4(src);
    if st.link.caps.checksum.ipv4.rx() && !p.verify_checksum() {
        return Class::Drop(DropReason::BadChecksum);
    }
    if !verified && st.link.caps.checksum.udp.rx() && !udp.verify_checksum(&src_ip, &dst_ip) {
        return Class::Drop(DropReason::BadChecksum);
    }
    Class::Deliver {
        sock,
        offset: l3 + p.header_len() as usize + UDP_HEADER_LEN,
        len: udp.len() as usize - UDP_HEADER_LEN,
        src: IpEndpoint::new(src_ip, udp.src_port()),
        dst: IpEndpoint::new(dst_ip, udp.dst_port()),
    }
}

fn classify_v6(
    st: &mut State,
    ip: &[u8],
    l3: usize,
    verified: bool,
    now: Instant,
    counters: &Counters,
) -> Class {
    let Ok(p) = Ipv6Packet::new_checked(ip) else {
        return Class::Pass;
    };
    match p.next_header() {
        IpProtocol::Icmpv6 => {
            neighbor::snoop_ndp(st, &p, now, counters);
            return Class::Pass;
        }
        IpProtocol::Udp => {}
        _ => return Class::Pass,
    }
    let (src, dst) = (p.src_addr(), p.dst_addr());
    let Ok(udp) = UdpPacket::new_checked(p.payload()) else {
        return Class::Pass;
    };
    let dst_ip = IpAddress::Ipv6(dst);
    let Some(sock) = st.zc.find(&st.iface, dst_ip, udp.dst_port()) else {
        return Class::Pass;
    };
    if src.is_multicast() || src.is_unspecified() {
        return Class::Pass;
    }
    let src_ip = IpAddress::Ipv6(src);
    // IPv6 makes the UDP checksum mandatory (RFC 8200 §8.1): zero is invalid.
    if !verified
        && st.link.caps.checksum.udp.rx()
        && (udp.checksum() == 0 || !udp.verify_checksum(&src_ip, &dst_ip))
    {
        return Class::Drop(DropReason::BadChecksum);
    }
    Class::Deliver {
        sock,
        offset: l3 + IPV6_HEADER_LEN + UDP_HEADER_LEN,
        len: udp.len() as usize - UDP_HEADER_LEN,
        src: IpEndpoint::new(src_ip, udp.src_port()),
        dst: IpEndpoint::new(dst_ip, udp.dst_port()),
    }
}

/// Headroom of a frame from `tx_frame`: the driver's, then room for the largest headers.
fn tx_headroom(st: &State) -> usize {
    st.link.tx_headroom + st.link.header_len() + IPV6_HEADER_LEN + UDP_HEADER_LEN
}

/// Writes the UDP and IP headers, picks the next hop, and transmits the frame or holds it.
/// `Ok(Some(ticket))`: held while the next hop resolves.
fn start_send(
    st: &mut State,
    index: usize,
    mut frame: TxFrame,
    remote: IpEndpoint,
    now: Instant,
    counters: &Counters,
) -> Result<Option<u32>, DatagramError> {
    if st.shut_down {
        return Err(DatagramError::ShutDown);
    }
    if remote.port == 0 || remote.addr.is_unspecified() || st.iface.has_ip_addr(remote.addr) {
        return Err(DatagramError::Unaddressable);
    }
    if !st.link.carrier.is_up() {
        // Refused before a neighbour lookup could hold the frame: nothing resolves while the
        // link is down (`link/carrier.rs`).
        counters.drop(crate::DropReason::LinkDown);
        return Err(DatagramError::Driver(zcnet_buffer::TxError::LinkDown));
    }
    let bound = st.zc.entries[index]
        .as_ref()
        .map(|e| e.endpoint)
        .ok_or(DatagramError::Unaddressable)?;
    let src = match bound.addr {
        Some(a) => a,
        None => st
            .iface
            .get_source_address(&remote.addr)
            .ok_or(DatagramError::Unaddressable)?,
    };
    if src.is_unspecified() || src.version() != remote.addr.version() {
        return Err(DatagramError::Unaddressable);
    }
    let ip_len = match src {
        IpAddress::Ipv4(_) => IPV4_HEADER_LEN,
        IpAddress::Ipv6(_) => IPV6_HEADER_LEN,
    };
    let link = st.link.header_len();
    let payload = frame.len();
    if link + ip_len + UDP_HEADER_LEN + payload > st.link.caps.max_transmission_unit {
        return Err(DatagramError::TooLarge);
    }
    if frame.headroom() < st.link.tx_headroom + link + ip_len + UDP_HEADER_LEN {
        return Err(DatagramError::NoHeadroom);
    }
    let hop = match st.link.caps.medium {
        Medium::Ethernet => Some(
            neighbor::next_hop(&mut st.iface, remote.addr, now)
                .ok_or(DatagramError::Unaddressable)?,
        ),
        _ => None,
    };

    // UDP header, checksum over the payload in place (once).
    let udp_len = UDP_HEADER_LEN + payload;
    frame
        .push_header(UDP_HEADER_LEN)
        .map_err(|_| DatagramError::NoHeadroom)?;
    {
        let mut udp = UdpPacket::new_unchecked(&mut frame[..]);
        udp.set_src_port(bound.port);
        udp.set_dst_port(remote.port);
        udp.set_len(udp_len as u16);
        if st.link.caps.checksum.udp.tx() {
            udp.fill_checksum(&src, &remote.addr);
        } else {
            udp.set_checksum(0);
        }
    }
    // IP header.
    let repr = match (src, remote.addr) {
        (IpAddress::Ipv4(s), IpAddress::Ipv4(d)) => IpRepr::Ipv4(Ipv4Repr {
            src_addr: s,
            dst_addr: d,
            next_header: IpProtocol::Udp,
            payload_len: udp_len,
            hop_limit: HOP_LIMIT,
        }),
        (IpAddress::Ipv6(s), IpAddress::Ipv6(d)) => IpRepr::Ipv6(Ipv6Repr {
            src_addr: s,
            dst_addr: d,
            next_header: IpProtocol::Udp,
            payload_len: udp_len,
            hop_limit: HOP_LIMIT,
        }),
        _ => return Err(DatagramError::Unaddressable), // versions were checked above
    };
    let h = frame
        .push_header(ip_len)
        .map_err(|_| DatagramError::NoHeadroom)?;
    write_header(h, &repr, &mut st.ipv4_idents, &st.link.caps.checksum);
    match st
        .link
        .send_ip(frame, hop, &st.iface, now, counters, Sender::Datagram)?
    {
        Sent::Held(ticket) => {
            st.signal_egress(); // egress sends the ARP request / solicitation
            Ok(Some(ticket))
        }
        Sent::Out => {
            if st.link.neighbors.deadline().is_some() {
                st.signal_egress(); // a stale entry's refresh
            }
            Ok(None)
        }
    }
}

/// A zero-copy UDP socket: received datagrams stay in the driver's slots, sent payloads are
/// written once into a transmit slot. See the [module docs](self) for the design.
///
/// ```no_run
/// # async fn echo(stack: zcnet_stack::Stack) -> Result<(), zcnet_stack::datagram::DatagramError> {
/// use zcnet_stack::datagram::{DatagramQueue, DatagramSlot, DatagramSocket};
///
/// static mut PLACES: [DatagramSlot; 32] = [DatagramSlot::EMPTY; 32];
/// // SAFETY (in real code): the only reference ever taken to PLACES.
/// let queue = DatagramQueue::from_static(unsafe { &mut *core::ptr::addr_of_mut!(PLACES) });
/// let sock = DatagramSocket::bind(stack, 7, queue).unwrap();
/// loop {
///     let d = sock.recv().await; // owns the RX slot
///     let mut tx = sock.tx_frame().await; // a TX slot, headroom reserved
///     let n = d.payload().len();
///     tx.append(n).unwrap().copy_from_slice(d.payload()); // an echo must copy; a reply need not
///     let from = d.src();
///     drop(d); // the RX slot goes back to the pool
///     sock.send_to(tx, from).await?; // headers in front, then the driver: no copy
/// }
/// # }
/// ```
///
/// One task should receive from a socket at a time (a second `recv` replaces the first's
/// waker); sending works from any number of tasks. Dropping the socket unbinds it and returns
/// every queued datagram's slot; frames already passed to `send_to` are still sent.
#[derive(Debug)]
pub struct DatagramSocket {
    stack: Stack,
    index: usize,
    endpoint: IpListenEndpoint,
}

impl DatagramSocket {
    /// Binds a zero-copy socket to `endpoint` (a port, or an address and port; port 0 picks a
    /// free ephemeral port) with `queue` as its receive queue.
    ///
    /// Errors: [`StackError::AddressInUse`] when a [`UdpSocket`](crate::udp::UdpSocket), the
    /// DHCPv4 client, a DNS query in flight or another zero-copy socket already receives on
    /// that endpoint;
    /// [`StackError::NoBuffers`] for a queue of capacity zero; [`StackError::NoSocketSlot`] when
    /// [`MAX_DATAGRAM_SOCKETS`] are bound; [`StackError::Unaddressable`] when no ephemeral
    /// port is free.
    pub fn bind(
        stack: Stack,
        endpoint: impl Into<IpListenEndpoint>,
        queue: DatagramQueue,
    ) -> Result<Self, StackError> {
        let mut endpoint = endpoint.into();
        if queue.capacity() == 0 {
            return Err(StackError::NoBuffers);
        }
        let index = stack.with(|st| {
            if st.shut_down {
                return Err(StackError::ShutDown);
            }
            if endpoint.port == 0 {
                endpoint.port = st.ephemeral_port().ok_or(StackError::Unaddressable)?;
            }
            let taken = st.zc.conflicts(&endpoint)
                || st.dns_query_uses(endpoint.port)
                || st.sockets.iter().any(|(_, s)| match s {
                    Socket::Udp(u) => overlaps(&u.endpoint(), &endpoint),
                    Socket::Dhcpv4(_) => endpoint.port == 68,
                    #[allow(unreachable_patterns)]
                    _ => false,
                });
            if taken {
                return Err(StackError::AddressInUse);
            }
            let i = st
                .zc
                .entries
                .iter()
                .position(Option::is_none)
                .ok_or(StackError::NoSocketSlot)?;
            st.zc.entries[i] = Some(Entry {
                endpoint,
                queue,
                head: 0,
                len: 0,
                recv_waker: None,
                tx_waker: None,
                dropped: 0,
            });
            st.zc.bound += 1;
            Ok(i)
        })?;
        Ok(Self {
            stack,
            index,
            endpoint,
        })
    }

    /// The endpoint the socket is bound to (with the port picked, if 0 was asked for).
    pub fn local_endpoint(&self) -> IpListenEndpoint {
        self.endpoint
    }

    fn with<R>(&self, f: impl FnOnce(&mut Entry) -> R) -> R {
        self.stack
            .with(|st| f(st.zc.entries[self.index].as_mut().expect("bound socket")))
    }

    /// The next datagram, or `Pending` with `cx`'s waker registered for the next arrival.
    pub fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Datagram> {
        self.with(|e| match e.pop() {
            Some(d) => Poll::Ready(d),
            None => {
                match &e.recv_waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => e.recv_waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        })
    }

    /// Waits for the next datagram. Cancel-safe: a datagram leaves the queue only in the poll
    /// that returns it.
    pub async fn recv(&self) -> Datagram {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The next datagram if one is queued.
    pub fn try_recv(&self) -> Option<Datagram> {
        self.with(Entry::pop)
    }

    /// Datagrams waiting in the queue.
    pub fn queued(&self) -> usize {
        self.with(|e| e.len)
    }

    /// Datagrams this socket dropped because its queue was full (also counted stack-wide as
    /// [`DropReason::DatagramQueueFull`]).
    pub fn dropped(&self) -> u64 {
        self.with(|e| e.dropped)
    }

    /// The largest payload [`send_to`](Self::send_to) takes for destinations of `version`:
    /// the link's MTU less the IP and UDP headers (1472 for IPv4 on standard Ethernet, 1452 for
    /// IPv6).
    pub fn max_payload(&self, version: IpVersion) -> usize {
        self.stack.with(|st| {
            let ip = match version {
                IpVersion::Ipv4 => IPV4_HEADER_LEN,
                IpVersion::Ipv6 => IPV6_HEADER_LEN,
            };
            st.link
                .caps
                .max_transmission_unit
                .saturating_sub(st.link.header_len() + ip + UDP_HEADER_LEN)
        })
    }

    /// A TX frame from the driver with room reserved in front for the driver, Ethernet, IPv6
    /// (or IPv4) and UDP headers, data empty; or `Pending` with `cx`'s waker registered for the
    /// TX completion that frees one.
    pub fn poll_tx_frame(&self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.stack.with(|st| {
            // The driver keeps one TX waiter, and egress owns it: egress wakes us when it runs.
            let egress = st.tasks.egress_waker.clone();
            let w = egress.as_ref().unwrap_or(cx.waker());
            let headroom = tx_headroom(st);
            match st
                .link
                .driver
                .poll_transmit_frame(&mut Context::from_waker(w))
            {
                Poll::Ready(mut f) => {
                    // Cannot fail: `Stack::new` made sure a slot holds the driver's headroom
                    // plus 64 bytes, more than the 62 added here (an empty frame is accepted).
                    let _ = f.set_headroom(headroom);
                    Poll::Ready(f)
                }
                Poll::Pending => {
                    if let Some(e) = st.zc.entries[self.index].as_mut() {
                        e.tx_waker = Some(cx.waker().clone());
                    }
                    st.zc.tx_waiting = true;
                    Poll::Pending
                }
            }
        })
    }

    /// Waits for a TX frame (see [`poll_tx_frame`](Self::poll_tx_frame)). Write the payload
    /// in place — [`TxFrame::append`], or [`TxFrame::buffer_mut`] then
    /// [`TxFrame::set_len`] — at most [`max_payload`](Self::max_payload) bytes, then pass it to
    /// [`send_to`](Self::send_to). Dropped unsent, the slot returns to the pool.
    pub async fn tx_frame(&self) -> TxFrame {
        poll_fn(|cx| self.poll_tx_frame(cx)).await
    }

    /// Sends `frame`'s data (the payload, written in place) to `remote`: writes the UDP header
    /// (checksum computed once, over the payload in place, unless the driver offloads it), the
    /// IP header (source address chosen like smoltcp's `Interface::get_source_address` unless
    /// the socket is bound to one) and the Ethernet header in front of it, and hands the very
    /// slot to the driver.
    ///
    /// Returns once the frame is with the driver. When the next hop's MAC is unknown the frame
    /// is held while egress sends ARP / NDP requests, and this waits: `Ok` once the answer came
    /// and the frame was sent, [`DatagramError::NeighborTimeout`] after
    /// [`NEIGHBOR_TIMEOUT`](crate::NEIGHBOR_TIMEOUT). Dropping the future then does not cancel
    /// the send (a timeout is still counted in [`StackStats`](crate::StackStats)); dropping it
    /// before its first poll drops the frame unsent.
    pub async fn send_to(
        &self,
        frame: TxFrame,
        remote: impl Into<IpEndpoint>,
    ) -> Result<(), DatagramError> {
        let remote = remote.into();
        let stack = self.stack;
        let now = stack.now();
        let counters = &stack.inner.counters;
        let held = stack.with(|st| {
            let sent = start_send(st, self.index, frame, remote, now, counters);
            // Sent from the application's call, outside ingress and egress: its doorbell.
            st.link.driver.flush();
            sent
        })?;
        match held {
            None => Ok(()),
            Some(ticket) => {
                HeldSend {
                    stack,
                    ticket,
                    done: false,
                }
                .await
            }
        }
    }
}

impl Drop for DatagramSocket {
    fn drop(&mut self) {
        // The entry (and every queued datagram's slot) is dropped after the state is released.
        let entry = self.stack.with(|st| {
            st.zc.bound -= 1;
            st.zc.entries[self.index].take()
        });
        drop(entry);
    }
}

/// A send waiting for its next hop to resolve.
struct HeldSend {
    stack: Stack,
    ticket: u32,
    done: bool,
}

impl Future for HeldSend {
    type Output = Result<(), DatagramError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let ticket = this.ticket;
        let r = this
            .stack
            .with(|st| st.link.neighbors.poll_held(ticket, cx));
        this.done = r.is_ready();
        r
    }
}

impl Drop for HeldSend {
    fn drop(&mut self) {
        if !self.done {
            let ticket = self.ticket;
            self.stack.with(|st| st.link.neighbors.detach(ticket));
        }
    }
}
