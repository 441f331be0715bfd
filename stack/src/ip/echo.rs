//! ICMPv4 echo requests to one of the stack's unicast addresses, answered by the stack itself
//! through the neighbour table (`link/neighbor.rs`) instead of by smoltcp.
//!
//! smoltcp answers an echo request only when its own neighbour cache already holds the
//! sender's next hop; otherwise it sends an ARP request in place of the reply, and the reply
//! is lost. A peer that learned our MAC without ARP loses its first echo that way: a DHCP
//! server that puts the address it leases into its host's ARP cache (dnsmasq does), whose host
//! pings the new address at once, before the stack's resolution of its gateway (started when
//! the lease arrives) is answered. So [`check`](super::check) hands such a request here
//! ([`Verdict::Echo`](super::check::Verdict::Echo)), and [`answer`] builds the reply into a TX
//! frame and sends it like any IPv4 packet the stack builds
//! ([`LinkLayer::send_ip`](crate::link::LinkLayer::send_ip)): to a next hop that is not
//! resolved yet it is held, as an unsolicited answer (the source may be forged, see
//! `link/neighbor.rs`, "Room"), and goes out when the ARP reply comes; after the neighbour
//! timeout it is dropped, counted ([`DropReason::NeighborTimeout`]).
//!
//! The reply is the one smoltcp would send: the request's identifier, sequence number and
//! data, from the address the request was sent to, to its source, TTL 64. The data is copied
//! once (counted in the copy ledger as [`CopySite::Emit`]). Taken here: echo requests (code 0)
//! addressed to one of the interface's unicast addresses from a unicast source, checksums
//! verified. Echo requests to a broadcast or multicast address still go to smoltcp. smoltcp's
//! sockets never see the requests taken here: an [`IcmpSocket`](crate::icmp::IcmpSocket)
//! discards echo requests anyway, and a [`RawSocket`](crate::raw::RawSocket) for ICMPv4 does
//! not see them (as one for TCP does not see TCP segments).

use core::task::{Context, Poll, Waker};

use smoltcp::phy::Medium;
use smoltcp::time::Instant;
use smoltcp::wire::{
    Icmpv4Message, Icmpv4Packet, IpAddress, IpProtocol, IpRepr, Ipv4Address, Ipv4Packet, Ipv4Repr,
};
use zcnet_buffer::ledger::{self, CopySite};

use crate::datagram::DatagramError;
use crate::link::{neighbor, Sender, Sent};
use crate::stack::State;
use crate::stats::{Counters, DropReason};

/// The TTL of an echo reply (smoltcp's for its own replies).
const REPLY_TTL: u8 = 64;

/// An echo request [`check`](super::check) found in a frame, checksums verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EchoRequest {
    /// Its IPv4 source: where the reply goes.
    pub(crate) src: Ipv4Address,
    /// Its IPv4 destination: one of the interface's unicast addresses, the reply's source.
    pub(crate) dst: Ipv4Address,
    /// Offset of the ICMP message in the frame.
    pub(crate) start: usize,
    /// Length of the ICMP message (header and data).
    pub(crate) len: usize,
}

/// The request in `packet` (an IPv4 packet inside `frame`, addressed to one of our unicast
/// addresses, its checksums verified) if it is an echo request from a unicast source the
/// stack answers (see the [module docs](self)).
pub(crate) fn request(st: &State, frame: &[u8], packet: &Ipv4Packet<&[u8]>) -> Option<EchoRequest> {
    let icmp = Icmpv4Packet::new_checked(packet.payload()).ok()?;
    if icmp.msg_type() != Icmpv4Message::EchoRequest || icmp.msg_code() != 0 {
        return None;
    }
    let src = packet.src_addr();
    if src.is_unspecified()
        || src.is_multicast()
        || src.is_loopback()
        || neighbor::is_v4_broadcast(&st.iface, src)
    {
        return None;
    }
    let message = icmp.into_inner();
    // `message` is a subslice of `frame`: its offset is the difference of their addresses.
    let start = (message.as_ptr() as usize).wrapping_sub(frame.as_ptr() as usize);
    Some(EchoRequest {
        src,
        dst: packet.dst_addr(),
        start,
        len: message.len(),
    })
}

/// No TX frame for the reply: the driver's TX waiter is registered (egress's waker once egress
/// has run, else the caller's); the caller keeps the request and tries again.
#[derive(Debug)]
pub(crate) struct NoTxFrame;

/// Answers the echo request `req` found in `frame` (see the [module docs](self)). A reply that
/// cannot be sent (no headroom, too long, no route, no room in the neighbour table, the
/// driver's refusal) is dropped, counted; `Err` only when the driver has no TX frame.
pub(crate) fn answer(
    st: &mut State,
    frame: &[u8],
    req: EchoRequest,
    now: Instant,
    waker: &Waker,
    counters: &Counters,
) -> Result<(), NoTxFrame> {
    let Some(message) = frame.get(req.start..req.start + req.len) else {
        // `request` took the message from this very frame.
        counters.drop(DropReason::Malformed);
        return Ok(());
    };
    let mut tx = match st.link.spare_tx.take() {
        Some(f) => f,
        None => {
            let w = st.tasks.egress_waker.as_ref().unwrap_or(waker);
            match st
                .link
                .driver
                .poll_transmit_frame(&mut Context::from_waker(w))
            {
                Poll::Ready(f) => f,
                Poll::Pending => return Err(NoTxFrame),
            }
        }
    };
    let link = st.link.header_len();
    if tx.set_headroom(st.link.tx_headroom + link).is_err() {
        counters.drop(DropReason::TxHeadroom);
        return Ok(());
    }
    let repr = IpRepr::Ipv4(Ipv4Repr {
        src_addr: req.dst,
        dst_addr: req.src,
        next_header: IpProtocol::Icmp,
        payload_len: message.len(),
        hop_limit: REPLY_TTL,
    });
    let ip_len = repr.header_len();
    let total = ip_len + message.len();
    if link + total > st.link.caps.max_transmission_unit || tx.set_len(total).is_err() {
        counters.drop(DropReason::TxTooLong);
        return Ok(());
    }
    let buf = &mut tx[..];
    super::emit::write_header(buf, &repr, &mut st.ipv4_idents, &st.link.caps.checksum);
    let body = &mut buf[ip_len..];
    ledger::copy(CopySite::Emit, body, message);
    let mut icmp = Icmpv4Packet::new_unchecked(body);
    icmp.set_msg_type(Icmpv4Message::EchoReply);
    icmp.fill_checksum();
    let to = IpAddress::Ipv4(req.src);
    let hop = match st.link.caps.medium {
        Medium::Ethernet => match neighbor::next_hop(&mut st.iface, to, now) {
            Some(hop) => Some(hop),
            None => {
                // No route back to the sender.
                counters.drop(DropReason::NotForUs);
                return Ok(());
            }
        },
        _ => None,
    };
    match st
        .link
        .send_ip(tx, hop, &st.iface, now, counters, Sender::EchoReply)
    {
        Ok(Sent::Out) => {}
        Ok(Sent::Held(ticket)) => st.link.neighbors.detach(ticket),
        // Counted by the link layer.
        Err(DatagramError::Driver(_)) => {}
        Err(DatagramError::NoHeadroom) => counters.drop(DropReason::TxHeadroom),
        Err(DatagramError::Unaddressable) => counters.drop(DropReason::NotForUs),
        // No room in the neighbour table for the next hop, or no place to hold the reply.
        Err(_) => counters.drop(DropReason::NeighborTableFull),
    }
    Ok(())
}
