//! The zero-copy send path's own neighbour table, which TCP uses too: IPv4 → MAC (ARP) and
//! IPv6 → MAC (NDP), with the frames held while an address resolves.
//!
//! smoltcp 0.14 keeps its neighbour cache private (`InterfaceInner::neighbor_cache`), so a frame
//! the application built itself cannot be addressed from it. This table is small, bounded and fed
//! the same way smoltcp feeds its own:
//!
//! * **Snooping in ingress** (every ARP packet; NDP when the IPv6 packet carries ICMPv6
//!   directly): ARP requests and replies
//!   whose sender is a neighbour we already track, or whose target is one of our addresses;
//!   NDP neighbour advertisements (target link-layer option) and neighbour solicitations for one
//!   of our addresses (source link-layer option), checksum verified. Every snooped frame still
//!   goes on to smoltcp, which answers requests and fills its own cache as it would without
//!   the snooping.
//! * **Resolution**: a send to an unknown next hop holds the finished frame (UDP and IP headers
//!   written, Ethernet header not yet) in one of [`MAX_HELD_FRAMES`] places and asks egress to
//!   send an ARP request or an NDP neighbour solicitation (built here with `smoltcp::wire`).
//!   Egress repeats the request every [`NEIGHBOR_RETRY`]. When the answer is snooped, ingress
//!   writes the Ethernet header in front of each held frame and hands it to the driver at once;
//!   after [`NEIGHBOR_TIMEOUT`] without one, every frame held for that next hop is dropped,
//!   counted ([`DropReason::NeighborTimeout`]) and its sender's `send_to` fails with
//!   [`DatagramError::NeighborTimeout`]. No frame is ever dropped silently. TCP segments
//!   (`transport/tcp/output.rs`) are held the same way, with nobody waiting: a segment that cannot be held
//!   (no place) is dropped, counted, and the connection's retransmission sends it again.
//! * **Freshness**: an entry is trusted for [`NEIGHBOR_LIFETIME`]; a send to a stale entry still
//!   goes out at once and asks egress to re-resolve in the background. An entry whose refresh
//!   goes unanswered is forgotten (the next send resolves again, holding frames).
//! * **Room** (what an attacker on the link can take): every entry is either the stack's own
//!   ([`Traffic::Own`]: made or last used by an application's datagram, a connection the
//!   application opened or past its handshake, or the gateway's priming) or *unsolicited*
//!   ([`Traffic::Unsolicited`]: made for an answer to an address that may be forged, a reset
//!   for a segment no connection takes, a half-open connection's SYN-ACK or an echo reply
//!   (`ip/echo.rs`), or snooped from an
//!   ARP request or neighbour solicitation from an address the table did not hold). Own
//!   traffic to an unsolicited entry makes it the stack's own. At most
//!   [`MAX_UNSOLICITED_NEIGHBORS`] entries are unsolicited, and at most
//!   [`MAX_UNSOLICITED_HELD`] frames are held for them. A new entry takes a free place, else
//!   the least recently used (by sends) entry it may take, resolved or not: for own traffic an
//!   unsolicited entry first, then an own one; for unsolicited traffic an unsolicited entry,
//!   or, below the unsolicited bound, an own entry no send used for [`NEIGHBOR_IDLE`]. So
//!   unsolicited traffic, however much, never pushes out an entry the stack's own traffic
//!   uses, such as the gateway of a transfer. The frames held for an evicted entry fail
//!   ([`DatagramError::NeighborQueueFull`]), counted ([`DropReason::NeighborTableFull`]).
//! * **Advertisements** (RFC 4861 §7.2.5): a neighbour advertisement only updates an entry the
//!   table holds, never makes one. An unresolved entry takes its target link-layer address
//!   (fresh if the Solicited flag is set, else stale: used, and refreshed at once). For a
//!   resolved entry, an advertisement without the Override flag does not replace a different
//!   MAC (a fresh entry only turns stale); with the Override flag, or with the same MAC, or
//!   without one, the MAC is taken and the Solicited flag makes the entry fresh. An
//!   advertisement to a multicast address with the Solicited flag set is invalid (§7.1.2) and
//!   ignored. ARP replies likewise only update entries the table holds; an ARP request for one
//!   of our addresses makes an unsolicited entry for its sender (as smoltcp's cache does).
//!
//! Next hops come from the interface's addresses and routes (the [`Config`](crate::Config)
//! gateways, DHCP and SLAAC routes): on-link destinations are their own next hop, anything else
//! goes to the longest matching route's router. Broadcast and multicast destinations map to their
//! MAC directly (no resolution).

use core::task::{Context, Poll, Waker};

use smoltcp::iface::Interface;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    HardwareAddress, Icmpv6Packet, Icmpv6Repr, IpAddress, IpCidr, IpProtocol, Ipv4Address,
    Ipv4Cidr, Ipv6Address, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr,
};
use zcnet_buffer::{TxFrame, ETHERNET_HEADER_LEN};

use crate::datagram::DatagramError;
use crate::stack::State;
use crate::stats::{Counters, DropReason};

/// Next hops the table remembers at once. When it is full, the least recently used entry that
/// a new one may take makes room (see the module docs, "Room"); an unsolicited answer that
/// finds none is dropped, counted ([`DropReason::NeighborTableFull`]).
pub const MAX_NEIGHBORS: usize = 16;
/// Entries made for unsolicited traffic (answers to addresses that may be forged, snooped
/// requests from strangers) the table holds at most; another one takes the place of the least
/// recently used of them.
pub const MAX_UNSOLICITED_NEIGHBORS: usize = MAX_NEIGHBORS / 4;
/// Frames held at most for unsolicited entries while they resolve; an answer beyond this is
/// dropped, counted ([`DropReason::NeighborTableFull`]), leaving the other places of
/// [`MAX_HELD_FRAMES`] to the stack's own traffic.
pub const MAX_UNSOLICITED_HELD: usize = MAX_HELD_FRAMES / 4;
/// How long an entry of the stack's own must go unused by any send before an unsolicited one
/// may take its place.
pub const NEIGHBOR_IDLE: Duration = Duration::from_secs(60);
/// Frames held stack-wide while their next hop resolves; a send beyond this fails with
/// [`DatagramError::NeighborQueueFull`] (the frame's slot returns to the pool).
pub const MAX_HELD_FRAMES: usize = 16;
/// How long a next hop may take to answer ARP / NDP before its held frames fail.
pub const NEIGHBOR_TIMEOUT: Duration = Duration::from_secs(3);
/// Interval between ARP requests / neighbour solicitations for one unresolved next hop.
pub const NEIGHBOR_RETRY: Duration = Duration::from_secs(1);
/// How long a resolved entry is used without asking again (smoltcp's cache uses the same).
pub const NEIGHBOR_LIFETIME: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub(crate) struct Neighbor {
    pub(crate) ip: IpAddress,
    /// `None` while resolving.
    pub(crate) mac: Option<EthernetAddress>,
    /// Until when a resolved entry is used without a refresh.
    pub(crate) fresh_until: Instant,
    /// When egress sends the next request (`None`: no request wanted).
    pub(crate) request_at: Option<Instant>,
    /// When an unanswered resolution (or refresh) gives up.
    pub(crate) give_up_at: Instant,
    /// When a send last looked the entry up (or when it was made): the order of eviction.
    pub(crate) used: Instant,
    /// Made for unsolicited traffic and not used by the stack's own since (see the module
    /// docs, "Room").
    pub(crate) unsolicited: bool,
}

/// Which traffic a send is, for the room it may take in the table (see the module docs,
/// "Room").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Traffic {
    /// The stack's own: an application's datagram, a segment of a connection the application
    /// opened or past its handshake, the gateway's priming.
    Own,
    /// An answer to an address that may be forged: a reset for a segment no connection
    /// takes, a half-open connection's SYN-ACK.
    Unsolicited,
}

#[derive(Debug)]
pub(crate) struct Held {
    /// The finished IP packet (Ethernet header not yet written); `None` once sent or failed.
    pub(crate) frame: Option<TxFrame>,
    pub(crate) next_hop: IpAddress,
    pub(crate) ticket: u32,
    /// Set when the frame was sent (or failed); collected by the waiting `send_to`.
    pub(crate) outcome: Option<Result<(), DatagramError>>,
    waker: Option<Waker>,
    /// The waiting `send_to` was dropped (or, for a TCP segment, nobody waits): free the place
    /// as soon as there is an outcome.
    pub(crate) detached: bool,
    /// A zero-copy datagram (counted as one when sent), not a TCP segment.
    datagram: bool,
}

/// The table and the held frames (part of the stack's locked state).
#[derive(Debug)]
pub(crate) struct Neighbors {
    pub(crate) entries: [Option<Neighbor>; MAX_NEIGHBORS],
    pub(crate) held: [Option<Held>; MAX_HELD_FRAMES],
    next_ticket: u32,
    /// Whether any entry wants a request (a fast check for egress).
    pub(crate) requests_wanted: bool,
}

/// What a send found for its next hop.
pub(crate) enum Lookup {
    /// Write this destination MAC and send.
    Known(EthernetAddress),
    /// Resolving: hold the frame.
    Unknown,
}

impl Neighbors {
    pub(crate) const fn new() -> Self {
        Self {
            entries: [const { None }; MAX_NEIGHBORS],
            held: [const { None }; MAX_HELD_FRAMES],
            next_ticket: 1,
            requests_wanted: false,
        }
    }

    fn find(&mut self, ip: IpAddress) -> Option<&mut Neighbor> {
        self.entries.iter_mut().flatten().find(|n| n.ip == ip)
    }

    /// Whether the table holds an entry for `ip` marked unsolicited.
    fn is_unsolicited(&self, ip: IpAddress) -> bool {
        self.entries
            .iter()
            .flatten()
            .any(|n| n.ip == ip && n.unsolicited)
    }

    /// Unsolicited entries in the table.
    pub(crate) fn unsolicited_entries(&self) -> usize {
        self.entries
            .iter()
            .flatten()
            .filter(|n| n.unsolicited)
            .count()
    }

    /// Frames held (not yet sent or failed) for unsolicited entries.
    pub(crate) fn unsolicited_held(&self) -> usize {
        self.held
            .iter()
            .flatten()
            .filter(|h| h.frame.is_some() && self.is_unsolicited(h.next_hop))
            .count()
    }

    /// A place for a new entry made for `traffic` at `now` (see the module docs, "Room"): a
    /// free one, else the least recently used entry that traffic may take. `None`: none.
    fn vacancy(&self, traffic: Traffic, now: Instant) -> Option<usize> {
        let lru = |take: &dyn Fn(&Neighbor) -> bool| {
            let mut best: Option<(usize, Instant)> = None;
            for (i, n) in self.entries.iter().enumerate() {
                let Some(n) = n else { continue };
                if take(n) && best.is_none_or(|(_, t)| n.used < t) {
                    best = Some((i, n.used));
                }
            }
            best.map(|(i, _)| i)
        };
        let free = || self.entries.iter().position(Option::is_none);
        match traffic {
            Traffic::Own => free()
                .or_else(|| lru(&|n| n.unsolicited))
                .or_else(|| lru(&|_| true)),
            Traffic::Unsolicited if self.unsolicited_entries() >= MAX_UNSOLICITED_NEIGHBORS => {
                lru(&|n| n.unsolicited)
            }
            Traffic::Unsolicited => free()
                .or_else(|| lru(&|n| n.unsolicited))
                .or_else(|| lru(&|n| now - n.used >= NEIGHBOR_IDLE)),
        }
    }

    /// Makes a new entry for `ip` made for `traffic` in the place [`vacancy`](Self::vacancy)
    /// finds, evicting what is there: the frames held for an evicted entry fail, counted.
    /// `None` when there is no place.
    fn make(
        &mut self,
        ip: IpAddress,
        mac: Option<EthernetAddress>,
        traffic: Traffic,
        now: Instant,
        counters: &Counters,
    ) -> Option<&mut Neighbor> {
        let i = self.vacancy(traffic, now)?;
        if let Some(old) = self.entries[i].take() {
            for place in self.held.iter_mut() {
                if place
                    .as_ref()
                    .is_some_and(|h| h.next_hop == old.ip && h.frame.is_some())
                {
                    if let Some(h) = place.as_mut() {
                        drop(h.frame.take());
                    }
                    counters.drop(DropReason::NeighborTableFull);
                    settle(place, Err(DatagramError::NeighborQueueFull));
                }
            }
        }
        let resolving = mac.is_none();
        self.entries[i] = Some(Neighbor {
            ip,
            mac,
            fresh_until: if resolving {
                now
            } else {
                now + NEIGHBOR_LIFETIME
            },
            request_at: resolving.then_some(now),
            give_up_at: now
                + if resolving {
                    NEIGHBOR_TIMEOUT
                } else {
                    Duration::ZERO
                },
            used: now,
            unsolicited: traffic == Traffic::Unsolicited,
        });
        if resolving {
            self.requests_wanted = true;
        }
        self.entries[i].as_mut()
    }

    /// The MAC for `ip`, or `Unknown` after starting a resolution (egress sends the request),
    /// for a send of `traffic`. Errors when the table has no room for a new entry that traffic
    /// may take (see the module docs, "Room"); an entry evicted to make room fails its held
    /// frames, counted.
    pub(crate) fn lookup(
        &mut self,
        ip: IpAddress,
        now: Instant,
        traffic: Traffic,
        counters: &Counters,
    ) -> Result<Lookup, DatagramError> {
        if let Some(n) = self.find(ip) {
            n.used = now;
            if traffic == Traffic::Own {
                n.unsolicited = false;
            }
            return Ok(match n.mac {
                Some(mac) => {
                    if now >= n.fresh_until && n.request_at.is_none() {
                        // Stale: keep using it, re-resolve in the background.
                        n.request_at = Some(now);
                        n.give_up_at = now + NEIGHBOR_TIMEOUT;
                        self.requests_wanted = true;
                    }
                    Lookup::Known(mac)
                }
                None => Lookup::Unknown,
            });
        }
        self.make(ip, None, traffic, now, counters)
            .ok_or(DatagramError::NeighborQueueFull)?;
        Ok(Lookup::Unknown)
    }

    /// Starts resolving `ip` ahead of any send, unless it is known or already resolving: egress
    /// sends the request, and the answer (an ARP reply aimed at us) also fills smoltcp's own
    /// cache. The stack primes its IPv4 gateway when an address is configured, because smoltcp
    /// learns a neighbour only from ARP and drops an answer it generates to an unknown one (an
    /// ICMP error to a peer that learned our MAC from a DHCP answer, without ARP; echo replies
    /// are the stack's own and wait for the resolution, `ip/echo.rs`). The gateway's entry is
    /// the stack's own ([`Traffic::Own`]).
    pub(crate) fn prime(&mut self, ip: IpAddress, now: Instant, counters: &Counters) {
        let _ = self.lookup(ip, now, Traffic::Own, counters);
    }

    /// Holds `frame` (a zero-copy `datagram`, or a TCP segment) until `next_hop` resolves;
    /// returns the ticket its sender waits on. Errors when every place is taken, or when
    /// `next_hop`'s entry is unsolicited and [`MAX_UNSOLICITED_HELD`] frames are held for
    /// such entries.
    pub(crate) fn hold(
        &mut self,
        frame: TxFrame,
        next_hop: IpAddress,
        datagram: bool,
    ) -> Result<u32, DatagramError> {
        if self.is_unsolicited(next_hop) && self.unsolicited_held() >= MAX_UNSOLICITED_HELD {
            return Err(DatagramError::NeighborQueueFull);
        }
        let place = self
            .held
            .iter_mut()
            .find(|h| h.is_none())
            .ok_or(DatagramError::NeighborQueueFull)?;
        let ticket = self.next_ticket;
        self.next_ticket = self.next_ticket.wrapping_add(1).max(1);
        *place = Some(Held {
            frame: Some(frame),
            next_hop,
            ticket,
            outcome: None,
            waker: None,
            detached: false,
            datagram,
        });
        Ok(ticket)
    }

    /// The outcome of the held send `ticket`, or `Pending` with `cx`'s waker registered.
    pub(crate) fn poll_held(
        &mut self,
        ticket: u32,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), DatagramError>> {
        let Some(place) = self
            .held
            .iter_mut()
            .find(|h| h.as_ref().is_some_and(|h| h.ticket == ticket))
        else {
            // A ticket's place is freed only by this poll (after an outcome) or after its
            // future detached, so a live future always finds it.
            debug_assert!(false, "held send {ticket} vanished");
            return Poll::Ready(Err(DatagramError::NeighborTimeout));
        };
        let h = place.as_mut().expect("found");
        match h.outcome {
            Some(r) => {
                *place = None;
                Poll::Ready(r)
            }
            None => {
                match &h.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => h.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }

    /// The future waiting on `ticket` was dropped: the frame is still sent (or fails, counted),
    /// and its place is freed then.
    pub(crate) fn detach(&mut self, ticket: u32) {
        for place in self.held.iter_mut() {
            if let Some(h) = place {
                if h.ticket == ticket {
                    if h.outcome.is_some() {
                        *place = None;
                    } else {
                        h.detached = true;
                        h.waker = None;
                    }
                    return;
                }
            }
        }
    }

    /// The earliest time egress must run for a request or a give-up.
    #[inline]
    pub(crate) fn deadline(&self) -> Option<Instant> {
        if !self.requests_wanted {
            return None;
        }
        self.earliest_request()
    }

    /// [`deadline`](Self::deadline) while requests are wanted: the earliest entry's.
    #[inline(never)]
    fn earliest_request(&self) -> Option<Instant> {
        self.entries
            .iter()
            .flatten()
            .filter_map(|n| n.request_at)
            .min()
    }
}

impl Neighbors {
    /// Shutdown (`stack/shutdown.rs`): every held frame is dropped (its slot back in the pool) and
    /// its send fails with [`DatagramError::ShutDown`]; no request is wanted any more.
    pub(crate) fn shut_down(&mut self) {
        for place in self.held.iter_mut() {
            if let Some(h) = place.as_mut() {
                if h.frame.take().is_some() {
                    settle(place, Err(DatagramError::ShutDown));
                }
            }
        }
        self.entries = [const { None }; MAX_NEIGHBORS];
        self.requests_wanted = false;
    }
}

/// Records an outcome for a held place and wakes (or frees, if detached) it.
fn settle(place: &mut Option<Held>, outcome: Result<(), DatagramError>) {
    if let Some(h) = place {
        if h.detached {
            *place = None;
            return;
        }
        h.outcome = Some(outcome);
        if let Some(w) = h.waker.take() {
            w.wake();
        }
    }
}

/// The next hop for `dst`: `dst` itself when on-link (one of our subnets, IPv6 link-local,
/// broadcast, multicast), else the router of the longest matching route that has not expired.
/// `None`: no route.
#[inline(always)]
pub(crate) fn next_hop(iface: &mut Interface, dst: IpAddress, now: Instant) -> Option<IpAddress> {
    let direct = match dst {
        IpAddress::Ipv4(a) => a.is_broadcast() || a.is_multicast(),
        IpAddress::Ipv6(a) => a.is_multicast() || a.is_unicast_link_local(),
    };
    if direct || iface.ip_addrs().iter().any(|c| c.contains_addr(&dst)) {
        return Some(dst);
    }
    routed_hop(iface, dst, now)
}

/// The router of the longest matching route for `dst` that has not expired (`next_hop`'s
/// off-link case).
#[inline(never)]
fn routed_hop(iface: &mut Interface, dst: IpAddress, now: Instant) -> Option<IpAddress> {
    let mut best: Option<(u8, IpAddress)> = None;
    iface.routes_mut().update(|routes| {
        for r in routes.iter() {
            if r.cidr.contains_addr(&dst)
                && r.expires_at.is_none_or(|t| t > now)
                && best.is_none_or(|(len, _)| r.cidr.prefix_len() > len)
            {
                best = Some((r.cidr.prefix_len(), r.via_router));
            }
        }
    });
    best.map(|(_, via)| via)
}

/// The MAC a broadcast or multicast next hop maps to (no resolution), or `None` for unicast.
pub(crate) fn group_mac(iface: &Interface, ip: IpAddress) -> Option<EthernetAddress> {
    match ip {
        IpAddress::Ipv4(a) => {
            if is_v4_broadcast(iface, a) {
                Some(EthernetAddress::BROADCAST)
            } else if a.is_multicast() {
                let o = a.octets();
                Some(EthernetAddress([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]))
            } else {
                None
            }
        }
        IpAddress::Ipv6(a) => a.is_multicast().then(|| {
            let o = a.octets();
            EthernetAddress([0x33, 0x33, o[12], o[13], o[14], o[15]])
        }),
    }
}

/// Writes an Ethernet header in front of `frame`'s data.
pub(crate) fn push_ethernet(
    frame: &mut TxFrame,
    src: EthernetAddress,
    dst: EthernetAddress,
    ethertype: EthernetProtocol,
) -> Result<(), DatagramError> {
    let h = frame
        .push_header(ETHERNET_HEADER_LEN)
        .map_err(|_| DatagramError::NoHeadroom)?;
    let mut eth = EthernetFrame::new_unchecked(h);
    eth.set_dst_addr(dst);
    eth.set_src_addr(src);
    eth.set_ethertype(ethertype);
    Ok(())
}

/// The EtherType of an IP packet held in `frame` (by its version nibble).
pub(crate) fn ethertype_of(frame: &TxFrame) -> EthernetProtocol {
    match frame.first().map(|b| b >> 4) {
        Some(6) => EthernetProtocol::Ipv6,
        _ => EthernetProtocol::Ipv4,
    }
}

fn our_mac(iface: &Interface) -> Option<EthernetAddress> {
    match iface.hardware_addr() {
        HardwareAddress::Ethernet(m) => Some(m),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// What a snooped packet says of a neighbour.
#[derive(Clone, Copy, Debug)]
enum News {
    /// An ARP packet or a neighbour solicitation: its sender is at the MAC it gives. `make`:
    /// it asked for one of our addresses, so an entry is made (unsolicited) when there is none.
    Claim { make: bool },
    /// A neighbour advertisement with its Solicited and Override flags (RFC 4861 §7.2.5).
    Advert { solicited: bool, override_: bool },
}

/// A neighbour advertisement for the entry `n` (RFC 4861 §7.2.5, see the module docs,
/// "Advertisements"): `mac` is its target link-layer address, if it has one.
fn advertised(
    n: &mut Neighbor,
    mac: Option<EthernetAddress>,
    solicited: bool,
    override_: bool,
    now: Instant,
) {
    let fresh = |n: &mut Neighbor| {
        n.fresh_until = now + NEIGHBOR_LIFETIME;
        n.request_at = None;
    };
    match (n.mac, mac) {
        // Resolving, and no address to resolve to.
        (None, None) => {}
        (None, Some(m)) => {
            n.mac = Some(m);
            n.request_at = None;
            if solicited {
                fresh(n);
            } else {
                // Stale: used, and the next send refreshes it.
                n.fresh_until = now;
            }
        }
        (Some(old), new) => {
            let differs = new.is_some_and(|m| m != old);
            if differs && !override_ {
                // Keep the MAC we know; a fresh entry turns stale, so the next send asks.
                n.fresh_until = n.fresh_until.min(now);
                return;
            }
            if let Some(m) = new {
                n.mac = Some(m);
            }
            if solicited {
                fresh(n);
            } else if differs {
                n.fresh_until = now;
            }
        }
    }
}

/// A snooped ARP or NDP packet says `ip` is at `mac` (`None`: an advertisement without a target
/// link-layer address): update the entry, or make one where `news` allows it (see the module
/// docs), and send every frame held for it once it has a MAC.
fn learn(
    st: &mut State,
    ip: IpAddress,
    mac: Option<EthernetAddress>,
    news: News,
    now: Instant,
    counters: &Counters,
) {
    if mac.is_some_and(|m| !m.is_unicast()) {
        return;
    }
    let nb = &mut st.link.neighbors;
    let known = match (nb.find(ip), news) {
        (Some(n), News::Claim { .. }) => {
            let Some(m) = mac else { return };
            n.mac = Some(m);
            n.fresh_until = now + NEIGHBOR_LIFETIME;
            n.request_at = None;
            m
        }
        (
            Some(n),
            News::Advert {
                solicited,
                override_,
            },
        ) => {
            advertised(n, mac, solicited, override_, now);
            match n.mac {
                Some(m) => m,
                None => return,
            }
        }
        (None, News::Claim { make: true }) => {
            let Some(m) = mac else { return };
            if nb
                .make(ip, mac, Traffic::Unsolicited, now, counters)
                .is_none()
            {
                return;
            }
            m
        }
        // RFC 4861 §7.2.5: an advertisement for a neighbour we do not track is ignored; so
        // is an ARP packet that neither comes from one nor asks for us.
        (None, _) => return,
    };
    let Some(src) = our_mac(&st.iface) else {
        return;
    };
    for i in 0..MAX_HELD_FRAMES {
        let (frame, datagram) = match &mut st.link.neighbors.held[i] {
            Some(h) if h.next_hop == ip => (h.frame.take(), h.datagram),
            _ => (None, false),
        };
        let Some(mut frame) = frame else { continue };
        let ethertype = ethertype_of(&frame);
        let outcome = push_ethernet(&mut frame, src, known, ethertype).and_then(|()| {
            st.link
                .transmit(frame, counters)
                .map_err(DatagramError::Driver)?;
            if datagram {
                counters.datagram_out();
            }
            Ok(())
        });
        settle(&mut st.link.neighbors.held[i], outcome);
    }
}

/// Ingress: learns from an ARP packet (the bytes after the Ethernet header): a request or reply
/// from a neighbour the table holds updates its entry; a request for one of our addresses
/// from one it does not hold makes an unsolicited entry. The frame goes on to smoltcp whatever
/// this finds.
pub(crate) fn snoop_arp(st: &mut State, arp: &[u8], now: Instant, counters: &Counters) {
    let Ok(packet) = ArpPacket::new_checked(arp) else {
        return;
    };
    let Ok(ArpRepr::EthernetIpv4 {
        operation,
        source_hardware_addr,
        source_protocol_addr,
        target_protocol_addr,
        ..
    }) = ArpRepr::parse(&packet)
    else {
        return;
    };
    if source_protocol_addr.is_unspecified() {
        return;
    }
    let make = operation == ArpOperation::Request && st.iface.has_ip_addr(target_protocol_addr);
    learn(
        st,
        IpAddress::Ipv4(source_protocol_addr),
        Some(source_hardware_addr),
        News::Claim { make },
        now,
        counters,
    );
}

/// Ingress: learns from an NDP neighbour solicitation for one of our addresses (its source
/// link-layer option; an unsolicited entry when the table has none) or a neighbour
/// advertisement (RFC 4861 §7.2.5: only for an entry the table holds). `ip` is the whole IPv6
/// packet. The frame goes on to smoltcp whatever this finds.
pub(crate) fn snoop_ndp(st: &mut State, ip: &Ipv6Packet<&[u8]>, now: Instant, counters: &Counters) {
    if ip.hop_limit() != 255 {
        return; // RFC 4861: NDP from off-link is ignored
    }
    let Ok(icmp) = Icmpv6Packet::new_checked(ip.payload()) else {
        return;
    };
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let Ok(Icmpv6Repr::Ndisc(ndisc)) = Icmpv6Repr::parse(&src, &dst, &icmp, &st.link.caps.checksum)
    else {
        return;
    };
    let mac = |ll: smoltcp::wire::RawHardwareAddress| {
        let bytes = ll.as_bytes();
        (bytes.len() == 6).then(|| EthernetAddress::from_bytes(bytes))
    };
    let (who, mac, news) = match ndisc {
        NdiscRepr::NeighborAdvert {
            flags,
            target_addr,
            lladdr,
        } => {
            let solicited = flags.contains(NdiscNeighborFlags::SOLICITED);
            if solicited && dst.is_multicast() {
                return; // RFC 4861 §7.1.2: invalid
            }
            let mac = match lladdr {
                Some(ll) => match mac(ll) {
                    Some(m) => Some(m),
                    None => return,
                },
                None => None,
            };
            let news = News::Advert {
                solicited,
                override_: flags.contains(NdiscNeighborFlags::OVERRIDE),
            };
            (target_addr, mac, news)
        }
        NdiscRepr::NeighborSolicit {
            target_addr,
            lladdr: Some(ll),
        } if !src.is_unspecified() && st.iface.has_ip_addr(target_addr) => {
            let Some(m) = mac(ll) else { return };
            (src, Some(m), News::Claim { make: true })
        }
        _ => return,
    };
    learn(st, IpAddress::Ipv6(who), mac, news, now, counters);
}

/// Egress: sends due ARP requests / neighbour solicitations and fails held frames whose next
/// hop did not answer in time. Returns `true` when the driver had no TX frame (`waker` is then
/// registered for the completion that frees one).
pub(crate) fn egress(st: &mut State, now: Instant, waker: &Waker, counters: &Counters) -> bool {
    if !st.link.neighbors.requests_wanted {
        return false;
    }
    let mut wanted = false;
    let mut starved = false;
    for i in 0..MAX_NEIGHBORS {
        let Some(n) = &mut st.link.neighbors.entries[i] else {
            continue;
        };
        let Some(at) = n.request_at else { continue };
        if at > now {
            wanted = true;
            continue;
        }
        let ip = n.ip;
        if now >= n.give_up_at {
            // No answer: forget the next hop and fail what waits for it.
            st.link.neighbors.entries[i] = None;
            for place in st.link.neighbors.held.iter_mut() {
                if place
                    .as_ref()
                    .is_some_and(|h| h.next_hop == ip && h.frame.is_some())
                {
                    if let Some(h) = place.as_mut() {
                        drop(h.frame.take());
                    }
                    counters.drop(DropReason::NeighborTimeout);
                    settle(place, Err(DatagramError::NeighborTimeout));
                }
            }
            continue;
        }
        wanted = true;
        if starved {
            continue;
        }
        let give_up = n.give_up_at;
        match st
            .link
            .driver
            .poll_transmit_frame(&mut Context::from_waker(waker))
        {
            Poll::Ready(mut frame) => {
                // The request is built after the driver's headroom plus the Ethernet header.
                if frame
                    .set_headroom(st.link.tx_headroom + ETHERNET_HEADER_LEN)
                    .is_err()
                {
                    counters.drop(DropReason::TxHeadroom);
                } else if build_request(&st.iface, &st.link.caps.checksum, ip, &mut frame) {
                    let _ = st.link.transmit(frame, counters);
                }
                if let Some(n) = &mut st.link.neighbors.entries[i] {
                    n.request_at = Some((now + NEIGHBOR_RETRY).min(give_up));
                }
            }
            Poll::Pending => starved = true,
        }
    }
    st.link.neighbors.requests_wanted = wanted;
    starved
}

/// Writes an ARP request (IPv4) or a neighbour solicitation (IPv6) for `target` into `frame`.
/// `false` when the interface has no MAC or no source address for it (the entry then times out
/// and its frames fail).
fn build_request(
    iface: &Interface,
    checksum: &ChecksumCapabilities,
    target: IpAddress,
    frame: &mut TxFrame,
) -> bool {
    let Some(mac) = our_mac(iface) else {
        return false;
    };
    match target {
        IpAddress::Ipv4(t) => {
            let Some(src) = iface.get_source_address_ipv4(&t) else {
                return false;
            };
            let arp = ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Request,
                source_hardware_addr: mac,
                source_protocol_addr: src,
                target_hardware_addr: EthernetAddress([0; 6]),
                target_protocol_addr: t,
            };
            if frame.set_len(arp.buffer_len()).is_err() {
                return false;
            }
            arp.emit(&mut ArpPacket::new_unchecked(&mut frame[..]));
            push_ethernet(
                frame,
                mac,
                EthernetAddress::BROADCAST,
                EthernetProtocol::Arp,
            )
            .is_ok()
        }
        IpAddress::Ipv6(t) => {
            let src = iface.get_source_address_ipv6(&t);
            if src.is_unspecified() {
                return false;
            }
            let o = t.octets();
            let dst = Ipv6Address::new(
                0xff02,
                0,
                0,
                0,
                0,
                1,
                0xff00 | u16::from(o[13]),
                u16::from_be_bytes([o[14], o[15]]),
            );
            let icmp = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target_addr: t,
                lladdr: Some(mac.into()),
            });
            let icmp_len = icmp.buffer_len();
            let ip = Ipv6Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: IpProtocol::Icmpv6,
                payload_len: icmp_len,
                hop_limit: 255,
            };
            let hlen = ip.buffer_len();
            if frame.set_len(hlen + icmp_len).is_err() {
                return false;
            }
            let buf = &mut frame[..];
            ip.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..hlen]));
            icmp.emit(
                &src,
                &dst,
                &mut Icmpv6Packet::new_unchecked(&mut buf[hlen..]),
                checksum,
            );
            let Some(dmac) = group_mac(iface, IpAddress::Ipv6(dst)) else {
                return false;
            };
            push_ethernet(frame, mac, dmac, EthernetProtocol::Ipv6).is_ok()
        }
    }
}

/// Whether `a` is an IPv4 address the stack answers to as a broadcast.
pub(crate) fn is_v4_broadcast(iface: &Interface, a: Ipv4Address) -> bool {
    a.is_broadcast()
        || iface.ip_addrs().iter().any(|c| match c {
            IpCidr::Ipv4(c) => is_directed_broadcast(c, a),
            #[allow(unreachable_patterns)]
            _ => false,
        })
}

/// Whether `a` is the broadcast address of the network `c` (`c.broadcast() == Some(a)`, as a
/// mask and two compares): all host bits set, the network bits `c`'s. A /31 or /32 has none.
fn is_directed_broadcast(c: &Ipv4Cidr, a: Ipv4Address) -> bool {
    let len = c.prefix_len();
    if len >= 31 {
        return false;
    }
    let host = u32::MAX >> len;
    let a = u32::from(a);
    a & host == host && (a ^ u32::from(c.address())) & !host == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcnet_buffer::{FramePool, PoolConfig};

    fn v4(last: u8) -> IpAddress {
        IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, last))
    }

    fn at(ms: i64) -> Instant {
        Instant::from_millis(ms)
    }

    const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 9]);

    /// Resolves `ip`'s entry to `mac` as a snooped answer would (fresh).
    fn resolve(nb: &mut Neighbors, ip: IpAddress, mac: EthernetAddress, now: Instant) {
        let n = nb.find(ip).expect("entry");
        advertised(n, Some(mac), true, true, now);
    }

    fn pool() -> &'static FramePool {
        FramePool::leak(PoolConfig::new(40)).unwrap()
    }

    /// A frame held for `ip`, as a send that found it unresolved; `Err` when refused.
    fn hold(
        nb: &mut Neighbors,
        pool: &'static FramePool,
        ip: IpAddress,
    ) -> Result<u32, DatagramError> {
        let mut f = pool.try_alloc_tx().expect("slot");
        f.append(1).unwrap()[0] = 0x45;
        nb.hold(f, ip, true)
    }

    fn outcome(nb: &mut Neighbors, ticket: u32) -> Option<Result<(), DatagramError>> {
        match nb.poll_held(ticket, &mut Context::from_waker(Waker::noop())) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        }
    }

    /// A full table of the stack's own unresolved entries: the next own lookup evicts the least
    /// recently used one (unresolved included), whose held frame fails, counted.
    #[test]
    fn own_traffic_evicts_the_least_recently_used_entry_even_unresolved() {
        let (mut nb, c, pool) = (Neighbors::new(), Counters::new(), pool());
        let mut tickets = [0; MAX_NEIGHBORS];
        for (i, t) in tickets.iter_mut().enumerate() {
            let ip = v4(10 + i as u8);
            let r = nb.lookup(ip, at(i as i64), Traffic::Own, &c);
            assert!(matches!(r, Ok(Lookup::Unknown)));
            *t = hold(&mut nb, pool, ip).unwrap();
        }
        // Entry 0 used again: entry 1 is now the least recently used.
        assert!(matches!(
            nb.lookup(v4(10), at(20), Traffic::Own, &c),
            Ok(Lookup::Unknown)
        ));
        assert!(matches!(
            nb.lookup(v4(99), at(21), Traffic::Own, &c),
            Ok(Lookup::Unknown)
        ));
        assert!(nb.find(v4(11)).is_none(), "the least recently used went");
        assert!(nb.find(v4(10)).is_some() && nb.find(v4(99)).is_some());
        assert_eq!(
            outcome(&mut nb, tickets[1]),
            Some(Err(DatagramError::NeighborQueueFull))
        );
        assert_eq!(outcome(&mut nb, tickets[0]), None, "still waiting");
        assert_eq!(c.snapshot().dropped(DropReason::NeighborTableFull), 1);
    }

    /// Unsolicited answers, however many, take at most `MAX_UNSOLICITED_NEIGHBORS` places and
    /// never one of an entry the stack's own traffic uses; they replace each other, least
    /// recently used first.
    #[test]
    fn unsolicited_traffic_never_pushes_out_an_entry_in_use() {
        let (mut nb, c) = (Neighbors::new(), Counters::new());
        let gateway = v4(1);
        nb.prime(gateway, at(0), &c);
        resolve(&mut nb, gateway, MAC, at(0));
        for i in 0..200u8 {
            let now = at(10 * i64::from(i) + 10);
            let r = nb.lookup(v4(i.wrapping_add(2)), now, Traffic::Unsolicited, &c);
            assert!(matches!(r, Ok(Lookup::Unknown)), "{i}");
            assert!(nb.unsolicited_entries() <= MAX_UNSOLICITED_NEIGHBORS);
            // The transfer through the gateway goes on.
            assert!(matches!(
                nb.lookup(gateway, now, Traffic::Own, &c),
                Ok(Lookup::Known(MAC))
            ));
        }
        assert_eq!(nb.unsolicited_entries(), MAX_UNSOLICITED_NEIGHBORS);
        // The most recent unsolicited entries are the ones left.
        for i in 200 - MAX_UNSOLICITED_NEIGHBORS as u8..200 {
            assert!(nb.find(v4(i.wrapping_add(2))).is_some(), "{i}");
        }
    }

    /// A table full of the stack's own entries: an unsolicited answer gets no place until one
    /// of them has gone unused for `NEIGHBOR_IDLE`, and then takes the least recently used.
    #[test]
    fn unsolicited_traffic_takes_only_idle_own_entries() {
        let (mut nb, c) = (Neighbors::new(), Counters::new());
        for i in 0..MAX_NEIGHBORS as u8 {
            let _ = nb.lookup(v4(10 + i), at(i64::from(i)), Traffic::Own, &c);
            resolve(&mut nb, v4(10 + i), MAC, at(0));
        }
        let idle = NEIGHBOR_IDLE.total_millis() as i64;
        assert!(nb
            .lookup(v4(200), at(idle - 1), Traffic::Unsolicited, &c)
            .is_err());
        // Entry 0 is used again; entry 1 is the least recently used and idle.
        let _ = nb.lookup(v4(10), at(idle), Traffic::Own, &c);
        assert!(matches!(
            nb.lookup(v4(200), at(idle + 1), Traffic::Unsolicited, &c),
            Ok(Lookup::Unknown)
        ));
        assert!(nb.find(v4(11)).is_none() && nb.find(v4(10)).is_some());
        assert_eq!(nb.unsolicited_entries(), 1);
    }

    /// Own traffic takes an unsolicited entry's place before any of its own, and using an
    /// unsolicited entry for own traffic makes it the stack's own.
    #[test]
    fn own_traffic_takes_unsolicited_places_first_and_adopts_entries() {
        let (mut nb, c) = (Neighbors::new(), Counters::new());
        for i in 0..(MAX_NEIGHBORS - 2) as u8 {
            let _ = nb.lookup(v4(10 + i), at(0), Traffic::Own, &c);
        }
        let _ = nb.lookup(v4(100), at(5), Traffic::Unsolicited, &c);
        let _ = nb.lookup(v4(101), at(6), Traffic::Unsolicited, &c);
        assert_eq!(nb.unsolicited_entries(), 2);
        // The peer of 101 completed its handshake: its entry is the stack's own now.
        let _ = nb.lookup(v4(101), at(7), Traffic::Own, &c);
        assert_eq!(nb.unsolicited_entries(), 1);
        let _ = nb.lookup(v4(102), at(8), Traffic::Own, &c);
        assert!(
            nb.find(v4(100)).is_none(),
            "the unsolicited entry made room"
        );
        assert!(nb.find(v4(10)).is_some(), "older own entries stay");
        assert_eq!(nb.unsolicited_entries(), 0);
    }

    /// Frames held for unsolicited entries are bounded; the stack's own still find places.
    #[test]
    fn frames_held_for_unsolicited_entries_are_bounded() {
        let (mut nb, c, pool) = (Neighbors::new(), Counters::new(), pool());
        for i in 0..MAX_UNSOLICITED_NEIGHBORS as u8 {
            let _ = nb.lookup(v4(100 + i), at(0), Traffic::Unsolicited, &c);
        }
        for _ in 0..MAX_UNSOLICITED_HELD {
            hold(&mut nb, pool, v4(100)).unwrap();
        }
        assert_eq!(
            hold(&mut nb, pool, v4(101)),
            Err(DatagramError::NeighborQueueFull)
        );
        assert_eq!(nb.unsolicited_held(), MAX_UNSOLICITED_HELD);
        let _ = nb.lookup(v4(1), at(0), Traffic::Own, &c);
        for _ in 0..MAX_HELD_FRAMES - MAX_UNSOLICITED_HELD {
            hold(&mut nb, pool, v4(1)).unwrap();
        }
    }

    /// RFC 4861 §7.2.5 on one entry: the Solicited flag, the Override flag, an advertisement
    /// without a target link-layer address.
    #[test]
    fn advertisements_follow_rfc_4861() {
        let other = EthernetAddress([2, 0, 0, 0, 0, 7]);
        let new = |mac| Neighbor {
            ip: v4(1),
            mac,
            fresh_until: at(0),
            request_at: Some(at(0)),
            give_up_at: at(3000),
            used: at(0),
            unsolicited: false,
        };
        let life = NEIGHBOR_LIFETIME;
        // Unresolved: without an address nothing changes; solicited makes it fresh, else stale.
        let mut n = new(None);
        advertised(&mut n, None, true, true, at(10));
        assert_eq!((n.mac, n.request_at), (None, Some(at(0))));
        advertised(&mut n, Some(MAC), true, false, at(10));
        assert_eq!(
            (n.mac, n.fresh_until, n.request_at),
            (Some(MAC), at(10) + life, None)
        );
        let mut n = new(None);
        advertised(&mut n, Some(MAC), false, false, at(10));
        assert_eq!(
            (n.mac, n.fresh_until, n.request_at),
            (Some(MAC), at(10), None)
        );
        // Resolved and fresh: another MAC without Override is not taken, the entry turns stale.
        let mut n = new(Some(MAC));
        n.fresh_until = at(1000);
        advertised(&mut n, Some(other), true, false, at(10));
        assert_eq!((n.mac, n.fresh_until), (Some(MAC), at(10)));
        // With Override it is; solicited: fresh, unsolicited: stale.
        advertised(&mut n, Some(other), false, true, at(20));
        assert_eq!((n.mac, n.fresh_until), (Some(other), at(20)));
        advertised(&mut n, Some(MAC), true, true, at(30));
        assert_eq!((n.mac, n.fresh_until), (Some(MAC), at(30) + life));
        // The same MAC, or none, with Solicited: a refresh answered.
        n.request_at = Some(at(40));
        advertised(&mut n, None, true, false, at(40));
        assert_eq!(
            (n.mac, n.fresh_until, n.request_at),
            (Some(MAC), at(40) + life, None)
        );
        // Neither flag, same MAC: nothing changes.
        advertised(&mut n, Some(MAC), false, false, at(50));
        assert_eq!((n.mac, n.fresh_until), (Some(MAC), at(40) + life));
    }

    /// The directed-broadcast test answers as smoltcp's `Ipv4Cidr::broadcast` for every
    /// prefix length, at the network's edges and inside it.
    #[test]
    fn directed_broadcast_is_smoltcps() {
        let nets = [
            [10, 0, 0, 1],
            [192, 168, 200, 254],
            [255, 255, 255, 255],
            [0, 0, 0, 0],
        ];
        for net in nets {
            for len in 0..=32u8 {
                let c = Ipv4Cidr::new(Ipv4Address::from(net), len);
                let edges = [c.broadcast(), Some(c.network().address())];
                let probes = [
                    0u32,
                    1,
                    0xFF,
                    0xFFFF_FFFF,
                    0x0A00_00FF,
                    0xC0A8_C8FF,
                    0x0A00_FFFF,
                ]
                .into_iter()
                .flat_map(|b| [b, u32::from_be_bytes(net) ^ b])
                .map(|b| Some(Ipv4Address::from_bits(b)));
                for a in edges.into_iter().chain(probes).flatten() {
                    assert_eq!(
                        is_directed_broadcast(&c, a),
                        c.broadcast() == Some(a),
                        "{c} {a}"
                    );
                }
            }
        }
    }
}
