//! TCP egress: segments out of the connections into pool frames, with their IP and Ethernet
//! headers.
//!
//! ```text
//!  egress ─► for each connection due (Tcb::poll_at) ─► Tcb::dispatch ─► emit
//!  emit: the payload is a send-queue frame's whole unacknowledged rest (the normal case):
//!        Driver::poll_transmit_ready, then IP and TCP headers written into that frame's
//!        headroom, the very slot to the driver (RETAINED → SENT; no copy)
//!      else: a TxFrame (the stack's spare, else the driver's) ─► IP and TCP headers written in
//!        place, the payload (a prefix of a queued frame, or none) copied in (ledger: Emit, or
//!        Retransmit for bytes sent before)
//!      both: checksums unless the driver computes them ─► next hop and Ethernet header
//!        (link::neighbor: the zero-copy path's table, holding the frame while ARP / NDP
//!        resolves) ─► Driver::transmit
//! ```
//!

//! * Data whose frame the device still has from its previous send (a retransmission) waits:
//!   the connection's `poll_at` leaves it out, and egress registers in the pool's retained
//!   waker, which the device's completion wakes.
//! * No TX frame is back-pressure: an ingress step keeps the received frame until egress has
//!   run (as for smoltcp's answers, `runner/ingress.rs`), and `dispatch` leaves the connection as if
//!   nothing was sent, so egress waits for the driver's TX-completion waker.
//! * A segment the driver refuses, one lost to a link that is down, and one whose next hop
//!   never answers are counted where they drop ([`DropReason`]); the connection's own
//!   retransmission covers them, as for a segment lost on the wire.
//! * Egress dispatches a connection something happened to (a socket call, a segment in) at
//!   once, and asks its `poll_at` after each segment: a connection with one segment to send
//!   costs one `dispatch` and one `poll_at`. The last answer is kept in the connection's place
//!   (`table.rs`, "Kept deadlines") until something changes the connection, so a connection
//!   nothing happened to costs no `poll_at` at all (a kept answer that is due goes straight to
//!   `dispatch`), and egress and ingress learn the earliest deadline from the kept answers.

use core::task::{Context, Poll, Waker};

use smoltcp::iface::Interface;
use smoltcp::phy::{ChecksumCapabilities, Medium};
use smoltcp::time::Instant;
use smoltcp::wire::{IpAddress, IpProtocol, IpRepr, TcpPacket, TcpRepr, TcpSeqNumber};
use zcnet_buffer::ledger::{self, CopySite};
use zcnet_buffer::TxFrame;

use crate::datagram::DatagramError;
use crate::ip::checksum;
use crate::ip::emit::write_header;
use crate::link::neighbor::{self, Traffic};
use crate::link::{LinkLayer, Sender, Sent};
use crate::runner::Tasks;
use crate::stack::State;
use crate::stats::{Counters, DropReason};
use crate::transport::tcp::tcb::context::{PollAt, TcpContext};
use crate::transport::tcp::tcb::state::State as TcpState;

/// The driver had no TX frame: `tx_waker` is registered for the completion that frees one.

#[derive(Debug)]
pub(crate) struct Starved;

/// What [`emit`] needs from the stack's state, borrowed apart from the TCP table.
pub(super) struct Out<'a> {
    link: &'a mut LinkLayer,
    tx_waker: &'a Waker,
    iface: &'a Interface,
    ident: &'a mut crate::ip::emit::Ipv4Idents,
    counters: &'a Counters,
    now: Instant,
    /// Whose segments these are, for the neighbour table's room (set per connection).
    traffic: Traffic,
}

impl<'a> Out<'a> {
    /// Borrows the parts of the stack's state a transmit needs (the TCP table stays free).
    fn new(
        link: &'a mut LinkLayer,
        tasks: &'a Tasks,
        iface: &'a Interface,
        ident: &'a mut crate::ip::emit::Ipv4Idents,
        waker: &'a Waker,
        counters: &'a Counters,
        now: Instant,
    ) -> Self {
        Self {
            link,
            tx_waker: tasks.egress_waker.as_ref().unwrap_or(waker),
            iface,
            ident,
            counters,
            now,
            traffic: Traffic::Own,
        }
    }

    /// Marks what follows as `traffic` for the neighbour table (see [`traffic_of`]).
    pub(super) fn set_traffic(&mut self, traffic: Traffic) {
        self.traffic = traffic;
    }
}

/// Whose segments a connection in `state` sends, for the neighbour table
/// (`link/neighbor.rs`, "Room"): a half-open connection's (SYN-RECEIVED: its peer's address
/// may be forged) are unsolicited answers, every other connection's the stack's own.
pub(super) fn traffic_of(state: TcpState) -> Traffic {
    if state == TcpState::SynReceived {
        Traffic::Unsolicited
    } else {
        Traffic::Own
    }
}

/// Converts a connection's [`PollAt`] to a deadline (`None`: none).
fn deadline_of(at: PollAt, now: Instant) -> Option<Instant> {
    match at {
        PollAt::Now => Some(now),
        PollAt::Time(t) => Some(t),
        PollAt::Ingress => None,
    }
}

/// Makes sure the stack's spare TX frame is there, asking the driver for one (its waiter is
/// egress's waker once egress has run, else `waker`). `false` when the driver has none.
pub(crate) fn reserve(st: &mut State, waker: &Waker) -> bool {
    if st.link.spare_tx.is_some() {
        return true;
    }
    let w = st.tasks.egress_waker.as_ref().unwrap_or(waker);
    match st
        .link
        .driver
        .poll_transmit_frame(&mut Context::from_waker(w))
    {
        Poll::Ready(f) => {
            st.link.spare_tx = Some(f);
            true
        }
        Poll::Pending => false,
    }
}

/// The next hop for `dst` on an Ethernet link (`None` on an IP link, or without a route: the
/// segment is then dropped by [`emit`], counted).
pub(super) fn hop_for(st: &mut State, dst: IpAddress, now: Instant) -> Option<IpAddress> {
    match st.link.caps.medium {
        Medium::Ethernet => neighbor::next_hop(&mut st.iface, dst, now),
        _ => None,
    }
}

/// Borrows what [`emit`] needs from `st`.
pub(super) fn out<'a>(
    st: &'a mut State,
    waker: &'a Waker,
    counters: &'a Counters,
    now: Instant,
) -> Out<'a> {
    Out::new(
        &mut st.link,
        &st.tasks,
        &st.iface,
        &mut st.ipv4_idents,
        waker,
        counters,
        now,
    )
}

/// Builds the segment (`ip`, `tcp`) into a TX frame and sends it towards `hop` (see the module
/// docs). `sent_max` is the connection's [`Tcb::sent_max`](crate::transport::tcp::tcb::socket::Tcb::sent_max) before this segment: payload below
/// it is recorded as a retransmission. `Err` only when there is no TX frame; a segment that
/// cannot be sent otherwise is dropped and counted, and `Ok`.
pub(super) fn emit(
    out: &mut Out<'_>,
    hop: Option<IpAddress>,
    ip: &IpRepr,
    tcp: &TcpRepr<'_>,
    sent_max: Option<TcpSeqNumber>,
    zc: Option<TxFrame>,
) -> Result<(), Starved> {
    if let Some(frame) = zc {
        return emit_in_place(out, hop, ip, tcp, frame);
    }
    let mut frame = match out.link.spare_tx.take() {
        Some(f) => f,
        None => match out
            .link
            .driver
            .poll_transmit_frame(&mut Context::from_waker(out.tx_waker))
        {
            Poll::Ready(f) => f,
            Poll::Pending => return Err(Starved),
        },
    };
    let link = out.link.header_len();
    if frame.set_headroom(out.link.tx_headroom + link).is_err() {
        out.counters.drop(DropReason::TxHeadroom);
        return Ok(());
    }
    let ip_len = ip.header_len();
    let tcp_len = tcp.header_len();
    let payload = tcp.payload;
    let total = ip_len + tcp_len + payload.len();
    if link + total > out.link.caps.max_transmission_unit || frame.set_len(total).is_err() {
        // The MSS is derived from the MTU, which the stack sized to fit a slot: not expected.
        out.counters.drop(DropReason::TxTooLong);
        return Ok(());
    }
    let buf = &mut frame[..];
    write_header(buf, ip, out.ident, &out.link.caps.checksum);
    // The payload: a part of a queued frame sent alone (the peer's window cut it), copied into
    // this fresh frame.
    let body = &mut buf[ip_len + tcp_len..];
    let resent = match sent_max {
        Some(max) => {
            let ahead = max.0.wrapping_sub(tcp.seq_number.0);
            usize::try_from(ahead).map_or(0, |n| n.min(payload.len()))
        }
        None => 0,
    };
    ledger::copy(
        CopySite::Retransmit,
        &mut body[..resent],
        &payload[..resent],
    );
    ledger::copy(CopySite::Emit, &mut body[resent..], &payload[resent..]);
    // Headers over the payload in place; the checksum covers it.
    let header = TcpRepr {
        payload: &[],
        ..*tcp
    };
    write_tcp(&mut buf[ip_len..], ip, &header, &out.link.caps.checksum);
    send(out, frame, hop);
    Ok(())
}

/// Sends a segment whose payload is a send-buffer frame (`frame`, retained, data = payload):
/// TCP and IP headers go into its headroom and the very slot goes to the driver, once the
/// driver has room for it. No payload copy. `Err` when the driver has no room (the frame goes
/// back to its connection, which sends it again later).
fn emit_in_place(
    out: &mut Out<'_>,
    hop: Option<IpAddress>,
    ip: &IpRepr,
    tcp: &TcpRepr<'_>,
    mut frame: TxFrame,
) -> Result<(), Starved> {
    if out
        .link
        .driver
        .poll_transmit_ready(&mut Context::from_waker(out.tx_waker))
        .is_pending()
    {
        return Err(Starved);
    }
    let link = out.link.header_len();
    let ip_len = ip.header_len();
    let tcp_len = tcp.header_len();
    if frame.headroom() < out.link.tx_headroom + link + ip_len + tcp_len {
        out.counters.drop(DropReason::TxHeadroom);
        return Ok(());
    }
    if link + ip_len + tcp_len + frame.len() > out.link.caps.max_transmission_unit {
        out.counters.drop(DropReason::TxTooLong);
        return Ok(());
    }
    // Headers in front of the payload, innermost first; then the whole packet is in view.
    let _ = frame.push_header(tcp_len);
    let _ = frame.push_header(ip_len);
    let buf = &mut frame[..];
    write_header(buf, ip, out.ident, &out.link.caps.checksum);
    // `tcp.payload` is empty: the header goes over the start of the packet and the checksum
    // covers the payload in place.
    write_tcp(&mut buf[ip_len..], ip, tcp, &out.link.caps.checksum);
    send(out, frame, hop);
    Ok(())
}

/// Writes `tcp`'s header over the start of `segment` (the header's room, then the payload
/// already in place) and, unless the driver computes it, the checksum over the whole segment
/// ([`checksum::compute`]).
fn write_tcp(segment: &mut [u8], ip: &IpRepr, tcp: &TcpRepr<'_>, caps: &ChecksumCapabilities) {
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let mut packet = TcpPacket::new_unchecked(&mut *segment);
    // Without a checksum here (smoltcp's would sum the segment again): filled below, once.
    tcp.emit(&mut packet, &src, &dst, &ChecksumCapabilities::ignored());
    if caps.tcp.tx() {
        let sum = checksum::compute(&src, &dst, IpProtocol::Tcp, packet.as_ref());
        packet.set_checksum(sum);
    }
}

/// Hands a finished IP packet to the link layer ([`LinkLayer::send_ip`]): sent, held while
/// `hop` resolves (nobody waits on it: the connection's retransmission covers a hold that
/// fails), or dropped, counted.
fn send(out: &mut Out<'_>, frame: TxFrame, hop: Option<IpAddress>) {
    if out.link.caps.medium == Medium::Ethernet && hop.is_none() {
        // No route (the address or route went away under the connection).
        out.counters.drop(DropReason::NotForUs);
        return;
    }
    match out.link.send_ip(
        frame,
        hop,
        out.iface,
        out.now,
        out.counters,
        Sender::Tcp(out.traffic),
    ) {
        Ok(Sent::Out) => {}
        Ok(Sent::Held(ticket)) => out.link.neighbors.detach(ticket),
        // Counted by the link layer.
        Err(DatagramError::Driver(_)) => {}
        Err(DatagramError::NoHeadroom) => out.counters.drop(DropReason::TxHeadroom),
        Err(DatagramError::Unaddressable) => out.counters.drop(DropReason::NotForUs),
        // No room in the neighbour table for the next hop, or no place to hold the segment.
        Err(_) => out.counters.drop(DropReason::NeighborTableFull),
    }
}

/// Up to this many connections, egress and ingress's deadline check walk every one (each
/// kept answer costs a load); beyond, only those without a kept answer, plus every one when a
/// kept deadline is due (see `table.rs`, "Kept deadlines").
const WALK_ALL_UP_TO: usize = 8;

/// What one egress pass over the connections found.
pub(crate) struct Egress {
    /// The driver ran out of TX frames.
    pub(crate) starved: bool,
    /// The earliest deadline of the connections not dispatched to the end (`None`: none).
    pub(crate) deadline: Option<Instant>,
}

/// Egress: sends what every connection has due (see the module docs), records timeouts, and
/// returns the connections' earliest deadline.
pub(crate) fn egress(st: &mut State, now: Instant, waker: &Waker, counters: &Counters) -> Egress {
    let mut deadline: Option<Instant> = None;
    let ip_mtu = st.link.caps.ip_mtu();
    // Only the connections without a kept answer (something happened to them) unless a kept
    // deadline may be due: then every connection (see `table.rs`, "Kept deadlines").
    // A small table is walked whole: cheaper than keeping the earliest kept deadline exact.
    let small = st.tcp.used() <= WALK_ALL_UP_TO;
    if !small {
        st.tcp.refresh_kept_earliest();
    }
    let all = small || st.tcp.kept_due(now);
    if all {
        st.tcp.forget_kept_earliest();
    }
    let mut cursor = if all {
        st.tcp.first_used()
    } else {
        st.tcp.unkept_first()
    };
    while let Some(i) = cursor {
        cursor = if all {
            st.tcp.next_used(i)
        } else {
            st.tcp.unkept_next(i)
        };
        // A connection nothing happened to since egress kept its `poll_at` answer (see
        // `transport/tcp/table.rs`, "Kept deadlines"): not due, nothing to do; due, straight to
        // `dispatch` (no writer waits for a slot and no data for the device, or nothing would
        // have been kept).
        let due_kept = match st.tcp.kept(i, now, ip_mtu, &st.iface) {
            Some(at) => match deadline_of(at, now) {
                Some(t) if t <= now => true,
                later => {
                    if let (true, Some(t)) = (all, later) {
                        st.tcp.note_kept(t);
                    }
                    deadline = crate::stack::earliest(deadline, later);
                    continue;
                }
            },
            None => false,
        };
        // The route is looked up only for a connection that is due or that something happened
        // to.
        let remote = match st.tcp.at(i) {
            Some(e) if due_kept => e.tcb.remote_endpoint(),
            Some(e) => {
                // A writer that found the pool empty waits for a returned slot, which wakes us.
                e.tcb.wake_starved_sender();
                // Data to resend that the device still has: register for its return first, so
                // `poll_at` (which then leaves that data out) cannot miss it.
                e.tcb
                    .tx_blocked(Some(st.tasks.egress_waker.as_ref().unwrap_or(waker)));
                // Something happened to the connection (a socket call, a segment in): straight
                // to `dispatch`, which sends whatever is due and nothing else, and the `poll_at`
                // after it gives the deadline. Asking `poll_at` first would cost a second one
                // for every connection that has something to send.
                e.tcb.remote_endpoint()
            }
            None => continue,
        };
        let hop = remote.and_then(|r| hop_for(st, r.addr, now));
        let Some(e) = st.tcp.at(i) else {
            continue;
        };
        let mut out = Out::new(
            &mut st.link,
            &st.tasks,
            &st.iface,
            &mut st.ipv4_idents,
            waker,
            counters,
            now,
        );
        let tcb = e.tcb;
        out.set_traffic(traffic_of(tcb.state()));
        let mut cx = TcpContext::new(now, ip_mtu, out.iface, e.keys);
        // The answer of the last `poll_at`, to keep when it is not due.
        let mut kept = None;
        loop {
            let was_open = tcb.state() != TcpState::Closed;
            let sent_max = tcb.sent_max();
            let mut sent = false;
            let r = tcb.dispatch(&mut cx, |_, (ip, tcp), zc| {
                emit(&mut out, hop, &ip, &tcp, sent_max, zc)?;
                sent = true;
                Ok::<(), Starved>(())
            });
            // Only a timeout closes an open connection in `dispatch` (the socket's own, or
            // the SYN, retransmission or probe limits running out; an abort closes it before,
            // a reset from the peer in `process`).
            if was_open && tcb.state() == TcpState::Closed {
                let timed_out = if tcb.gave_up() {
                    e.meta
                        .set_cause(crate::transport::tcp::table::CloseCause::TimedOut);
                    true
                } else {
                    e.meta.record_timeout()
                };
                if timed_out {
                    out.counters.tcp_timed_out();
                }
            }
            if r.is_err() {
                return Egress {
                    starved: true,
                    deadline: None,
                };
            }
            // `dispatch` may have rewound to the first unacknowledged frame (a retransmission
            // timeout, a fast retransmit) and found the device still holding it: register for
            // that frame's return too, or nothing would wake egress when it comes back.
            let blocked = tcb.tx_blocked(Some(out.tx_waker));
            let polled = tcb.poll_at(&mut cx);
            match deadline_of(polled, now) {
                Some(t) if t <= now && sent => continue,
                // Due, yet `dispatch` sent nothing: it only ran its timers. Come back in a
                // moment rather than spin.
                Some(t) if t <= now => deadline = crate::stack::earliest(deadline, Some(now)),
                at => {
                    // Kept unless the device's return of a frame changes it (a writer that
                    // waits for a slot was woken above, and its retry changes the connection).
                    if !blocked && !tcb.send_starved() {
                        kept = Some(polled);
                    }
                    deadline = crate::stack::earliest(deadline, at);
                }
            }
            break;
        }
        if let Some(at) = kept {
            st.tcp.keep(i, at);
        }
    }
    if !small {
        st.tcp.prune_unkept();
    }
    Egress {
        starved: false,
        deadline: crate::stack::earliest(deadline, st.tcp.kept_earliest()),
    }
}

/// The earliest deadline of every connection (`None`: none), for ingress's check whether
/// egress must run earlier.
pub(crate) fn deadline(st: &mut State, now: Instant) -> Option<Instant> {
    if st.tcp.is_empty() {
        return None;
    }
    let ip_mtu = st.link.caps.ip_mtu();
    // The kept deadlines, then the connections without a kept answer; a small table whole.
    let small = st.tcp.used() <= WALK_ALL_UP_TO;
    let mut at = None;
    let mut cursor = if small {
        st.tcp.first_used()
    } else {
        st.tcp.refresh_kept_earliest();
        at = st.tcp.kept_earliest();
        st.tcp.unkept_first()
    };
    while let Some(i) = cursor {
        cursor = if small {
            st.tcp.next_used(i)
        } else {
            st.tcp.unkept_next(i)
        };
        // Kept answers cost nothing; a connection something happened to is asked.
        if let Some(polled) = st.tcp.poll_at(i, now, ip_mtu, &st.iface) {
            at = crate::stack::earliest(at, deadline_of(polled, now));
            if at.is_some_and(|t| t <= now) {
                break;
            }
        }
    }
    at
}
