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
    Ipv6Address, Ipv6Packet, Ipv6Repr, NdiscRepr,
};
use zcnet_buffer::{TxFrame, ETHERNET_HEADER_LEN};

use crate::datagram::DatagramError;
use crate::stack::State;
use crate::stats::{Counters, DropReason};

/// Next hops the table remembers at once. When it is full, the stalest resolved entry with no
/// frames held makes room; a send that finds no room fails with
/// [`DatagramError::NeighborQueueFull`].
pub const MAX_NEIGHBORS: usize = 16;
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

    fn held_for(&self, ip: IpAddress) -> bool {
        self.held
            .iter()
            .flatten()
            .any(|h| h.frame.is_some() && h.next_hop == ip)
    }

    /// A place for a new entry: a free one, else the stalest resolved entry with nothing held.
    fn vacancy(&mut self) -> Option<usize> {
        if let Some(i) = self.entries.iter().position(Option::is_none) {
            return Some(i);
        }
        let mut best: Option<(usize, Instant)> = None;
        for (i, n) in self.entries.iter().enumerate() {
            let Some(n) = n else { continue };
            if n.mac.is_none() || self.held_for(n.ip) {
                continue;
            }
            if best.is_none_or(|(_, t)| n.fresh_until < t) {
                best = Some((i, n.fresh_until));
            }
        }
        best.map(|(i, _)| i)
    }

    /// The MAC for `ip`, or `Unknown` after starting a resolution (egress sends the request).
    /// Errors when the table has no room for a new entry.
    pub(crate) fn lookup(&mut self, ip: IpAddress, now: Instant) -> Result<Lookup, DatagramError> {
        if let Some(n) = self.find(ip) {
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
        let i = self.vacancy().ok_or(DatagramError::NeighborQueueFull)?;
        self.entries[i] = Some(Neighbor {
            ip,
            mac: None,
            fresh_until: now,
            request_at: Some(now),
            give_up_at: now + NEIGHBOR_TIMEOUT,
        });
        self.requests_wanted = true;
        Ok(Lookup::Unknown)
    }

    /// Starts resolving `ip` ahead of any send, unless it is known or already resolving: egress
    /// sends the request, and the answer (an ARP reply aimed at us) also fills smoltcp's own
    /// cache. The stack primes its IPv4 gateway when an address is configured, because smoltcp
    /// learns a neighbour only from ARP and drops a reply it generates to an unknown one (the
    /// first echo reply to a peer that learned our MAC from a DHCP answer, without ARP). A full
    /// table skips the priming: it is an optimisation, nothing waits on it.
    pub(crate) fn prime(&mut self, ip: IpAddress, now: Instant) {
        let _ = self.lookup(ip, now);
    }

    /// Holds `frame` (a zero-copy `datagram`, or a TCP segment) until `next_hop` resolves;
    /// returns the ticket its sender waits on.
    pub(crate) fn hold(
        &mut self,
        frame: TxFrame,
        next_hop: IpAddress,
        datagram: bool,
    ) -> Result<u32, DatagramError> {
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
    pub(crate) fn deadline(&self) -> Option<Instant> {
        if !self.requests_wanted {
            return None;
        }
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
pub(crate) fn next_hop(iface: &mut Interface, dst: IpAddress, now: Instant) -> Option<IpAddress> {
    let direct = match dst {
        IpAddress::Ipv4(a) => a.is_broadcast() || a.is_multicast(),
        IpAddress::Ipv6(a) => a.is_multicast() || a.is_unicast_link_local(),
    };
    if direct || iface.ip_addrs().iter().any(|c| c.contains_addr(&dst)) {
        return Some(dst);
    }
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
            let directed = iface.ip_addrs().iter().any(|c| match c {
                IpCidr::Ipv4(c) => c.broadcast() == Some(a),
                #[allow(unreachable_patterns)]
                _ => false,
            });
            if a.is_broadcast() || directed {
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

/// `ip` is at `mac` (a snooped ARP or NDP packet said so): update the entry, or add one, and
/// send every frame held for it at once.
fn learn(st: &mut State, ip: IpAddress, mac: EthernetAddress, now: Instant, counters: &Counters) {
    if !mac.is_unicast() {
        return;
    }
    let nb = &mut st.link.neighbors;
    match nb.find(ip) {
        Some(n) => {
            n.mac = Some(mac);
            n.fresh_until = now + NEIGHBOR_LIFETIME;
            n.request_at = None;
        }
        None => {
            let Some(i) = nb.vacancy() else { return };
            nb.entries[i] = Some(Neighbor {
                ip,
                mac: Some(mac),
                fresh_until: now + NEIGHBOR_LIFETIME,
                request_at: None,
                give_up_at: now,
            });
        }
    }
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
        let outcome = push_ethernet(&mut frame, src, mac, ethertype).and_then(|()| {
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

/// Ingress: learns from an ARP packet (the bytes after the Ethernet header). The frame goes on
/// to smoltcp whatever this finds.
pub(crate) fn snoop_arp(st: &mut State, arp: &[u8], now: Instant, counters: &Counters) {
    let Ok(packet) = ArpPacket::new_checked(arp) else {
        return;
    };
    let Ok(ArpRepr::EthernetIpv4 {
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
    let ip = IpAddress::Ipv4(source_protocol_addr);
    let known = st.link.neighbors.find(ip).is_some();
    if known || st.iface.has_ip_addr(target_protocol_addr) {
        learn(st, ip, source_hardware_addr, now, counters);
    }
}

/// Ingress: learns from an NDP neighbour solicitation or advertisement (`ip` is the whole IPv6
/// packet). The frame goes on to smoltcp whatever this finds.
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
    let (who, ll) = match ndisc {
        NdiscRepr::NeighborAdvert {
            target_addr,
            lladdr: Some(ll),
            ..
        } => (target_addr, ll),
        NdiscRepr::NeighborSolicit {
            target_addr,
            lladdr: Some(ll),
        } if !src.is_unspecified() && st.iface.has_ip_addr(target_addr) => (src, ll),
        _ => return,
    };
    let bytes = ll.as_bytes();
    if bytes.len() != 6 {
        return;
    }
    learn(
        st,
        IpAddress::Ipv6(who),
        EthernetAddress::from_bytes(bytes),
        now,
        counters,
    );
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
            IpCidr::Ipv4(c) => c.broadcast() == Some(a),
            #[allow(unreachable_patterns)]
            _ => false,
        })
}
