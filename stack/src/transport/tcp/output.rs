//! TCP egress: segments out of the connections into pool frames, with their IP and Ethernet
//! headers.
//!
//! ```text
//!  egress ─► for each connection due (Tcb::poll_at) ─► Tcb::dispatch_polled ─► emit
//!  emit: the payload is a send-queue frame's whole unacknowledged rest (the normal case):
//!        Driver::poll_transmit_ready, then IP and TCP headers written into that frame's
//!        headroom, the very slot to the driver (RETAINED → SENT; no copy)
//!      else: a TxFrame (the stack's spare, else the driver's) ─► IP and TCP headers written in
//!        place, the payload (a prefix of a queued frame, or none) copied in (ledger: Emit, or
//!        Retransmit for bytes sent before)
//!      both: checksums unless the driver computes them ─► next hop and Ethernet header
//!        (link::neighbor: the zero-copy path's table, holding the frame while ARP / NDP
//!        resolves) ─► Driver::transmit
//!  super-segment: the payload is a run of whole send-queue frames (the first as above, the
//!        others in the chain egress lends through `TcpContext::with_gso`), up to 64 KiB less
//!        headers as the windows allow: the TCP header in the first frame's headroom, then
//!        link::gso hands the run to a driver that segments it (TSO, one chain) or cuts it
//!        into one segment per frame, each frame's headroom taking a copy of the headers
//!        (software GSO). No payload copy, one pass of the connection for the whole run.
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
//!   once, and asks its `poll_at` after each segment, unless the send fast path returned the
//!   answer with the segment (it sent everything queued): a connection with one segment of
//!   new data to send costs one `dispatch_polled` and no `poll_at`. The last answer is kept in the connection's place
//!   (`table.rs`, "Kept deadlines") until something changes the connection, so a connection
//!   nothing happened to costs no `poll_at` at all (a kept answer that is due goes straight to
//!   `dispatch`), and egress and ingress learn the earliest deadline from the kept answers.

use core::task::{Context, Poll, Waker};

use smoltcp::iface::Interface;
use smoltcp::phy::{ChecksumCapabilities, Medium};
use smoltcp::time::Instant;
use smoltcp::wire::{IpAddress, IpProtocol, IpRepr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber};
use zcnet_buffer::ledger::{self, CopySite};
use zcnet_buffer::ChecksumPartial;
use zcnet_buffer::{TxChain, TxFrame};

use crate::datagram::DatagramError;
use crate::ip::checksum;
use crate::ip::emit::write_header;
use crate::link::gso::{SuperSegment, MAX_SUPER_SEGMENT};
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
    hop_on(st.link.caps.medium, &mut st.iface, dst, now)
}

/// [`hop_for`] from the two parts of the state it reads (the TCP table stays free).
fn hop_on(
    medium: Medium,
    iface: &mut Interface,
    dst: IpAddress,
    now: Instant,
) -> Option<IpAddress> {
    match medium {
        Medium::Ethernet => neighbor::next_hop(iface, dst, now),
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
/// it is recorded as a retransmission. `zc` is the payload's send-queue frame when it is sent
/// in place; with frames in `tail` too (a super-segment, see the module docs) they all go, the
/// chain left empty. `Err` only when there is no TX frame (or the driver has no room, or, for a
/// segment with payload, pieces of a split super-segment still wait for it); a segment that
/// cannot be sent otherwise is dropped and counted, and `Ok`.
pub(super) fn emit(
    out: &mut Out<'_>,
    hop: Option<IpAddress>,
    ip: &IpRepr,
    tcp: &TcpRepr<'_>,
    sent_max: Option<TcpSeqNumber>,
    zc: Option<TxFrame>,
    tail: Option<&mut TxChain>,
) -> Result<(), Starved> {
    // No data overtakes the held pieces of a split super-segment (a segment without payload, an
    // answer ingress reserved a frame for, may).
    let data = zc.is_some() || !tcp.payload.is_empty();
    if !out.link.flush_gso_held(out.tx_waker, out.counters) && data {
        return Err(Starved);
    }
    if let Some(frame) = zc {
        if let Some(tail) = tail.filter(|t| t.frame_count() > 0) {
            let sent = emit_super(out, hop, ip, tcp, frame, tail);
            // Frames not sent (no room, no route) drop now, as their connection expects of
            // a run it handed over: it sends them again. The lent chain is left empty.
            if tail.frame_count() > 0 {
                tail.drain().for_each(drop);
            }
            return sent;
        }
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
    let tcp_len = tcp_header_len(tcp);
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
    let partial = out.link.tcp_tx_partial;
    write_tcp(&mut buf[ip_len..], ip, &header, partial);
    if partial {
        mark_partial(&mut frame, ip_len);
    }
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
    let (link, ip_len, tcp_len) = (out.link.header_len(), ip.header_len(), tcp_header_len(tcp));
    if !ready_for(out, &frame, link + ip_len + tcp_len)? {
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
    let partial = out.link.tcp_tx_partial;
    write_tcp(&mut buf[ip_len..], ip, tcp, partial);
    if partial {
        mark_partial(&mut frame, ip_len);
    }
    send(out, frame, hop);
    Ok(())
}

/// Whether a send-buffer frame can go now: `Err` when the driver has no room for it (its
/// waker registered), `Ok(false)` when its headroom cannot take the driver's headroom and
/// `headers` (link, IP and TCP; counted as [`DropReason::TxHeadroom`]; the frame goes back to
/// its connection).
fn ready_for(out: &mut Out<'_>, frame: &TxFrame, headers: usize) -> Result<bool, Starved> {
    if out
        .link
        .driver
        .poll_transmit_ready(&mut Context::from_waker(out.tx_waker))
        .is_pending()
    {
        return Err(Starved);
    }
    if frame.headroom() < out.link.tx_headroom + headers {
        out.counters.drop(DropReason::TxHeadroom);
        return Ok(false);
    }
    Ok(true)
}

/// Sends a super-segment: `head`, a send-buffer frame as for [`emit_in_place`], then the
/// frames of `tail` (whole send-buffer frames, each at most one MSS of payload, `ip`'s payload
/// length counting them all). The TCP header goes into the head's headroom, and the link layer
/// writes the IP headers and either hands the whole to a driver that segments it or splits it
/// into one segment per frame (`link/gso.rs`). No payload copy. `Err` when the driver has no
/// room (every frame goes back to its connection, which sends them again later).
fn emit_super(
    out: &mut Out<'_>,
    hop: Option<IpAddress>,
    ip: &IpRepr,
    tcp: &TcpRepr<'_>,
    mut head: TxFrame,
    tail: &mut TxChain,
) -> Result<(), Starved> {
    let (ip_len, tcp_len) = (ip.header_len(), tcp_header_len(tcp));
    if !ready_for(out, &head, out.link.header_len() + ip_len + tcp_len)? {
        return Ok(());
    }
    if out.link.caps.medium == Medium::Ethernet && hop.is_none() {
        out.counters.drop(DropReason::NotForUs);
        return Ok(());
    }
    // The segment size a device cuts at: the largest frame's payload (each is at most the
    // connection's MSS; all but the last are usually exactly that).
    let mss = tail.frames().map(|f| f.len()).fold(head.len(), usize::max);
    // The TCP header in front of the first payload, checksum field zero: the link layer fills
    // it per segment, or for the whole.
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    if let Ok(h) = head.push_header(tcp_len) {
        if write_plain_header(h, tcp).is_none() {
            let mut packet = TcpPacket::new_unchecked(&mut *h);
            tcp.emit(&mut packet, &src, &dst, &ChecksumCapabilities::ignored());
            packet.set_checksum(0);
        }
    }
    let _ = head.push_header(ip_len);
    let seg = SuperSegment {
        head,
        tail,
        ip,
        tcp_len,
        mss,
    };
    let sent = out.link.send_super(
        seg,
        hop,
        out.iface,
        out.now,
        out.counters,
        out.traffic,
        out.ident,
        out.tx_waker,
    );
    match sent {
        Ok(()) => {}
        Err(DatagramError::NoHeadroom) => out.counters.drop(DropReason::TxHeadroom),
        Err(DatagramError::Unaddressable) => out.counters.drop(DropReason::NotForUs),
        Err(_) => out.counters.drop(DropReason::NeighborTableFull),
    }
    Ok(())
}

/// `tcp.header_len()`: for the usual header (no option but a timestamp, 20 or 32 bytes)
/// without smoltcp's option-by-option count. SACK blocks count even where smoltcp writes none
/// (a segment without an ACK), as in smoltcp's.
#[inline]
pub(crate) fn tcp_header_len(tcp: &TcpRepr<'_>) -> usize {
    plain_header_len(tcp).unwrap_or_else(|| tcp.header_len())
}

/// The length of `tcp`'s header when its only option is a timestamp (or it has none): 32 or
/// 20 bytes; `None` for a header with other options. SACK blocks count in smoltcp's header
/// length even where it writes none (no ACK), so they make a header not plain.
#[inline]
fn plain_header_len(tcp: &TcpRepr<'_>) -> Option<usize> {
    let plain = tcp.max_seg_size.is_none()
        && tcp.window_scale.is_none()
        && !tcp.sack_permitted
        && tcp.sack_ranges.iter().all(Option::is_none);
    plain.then_some(if tcp.timestamp.is_some() { 32 } else { 20 })
}

/// Marks `frame` (its data the IP packet, the TCP header `ip_len` bytes in) for the device to
/// complete its TCP checksum; the link header the link layer pushes later moves the mark with
/// it.
fn mark_partial(frame: &mut TxFrame, ip_len: usize) {
    let mark = ChecksumPartial {
        start: ip_len as u16,
        offset: TCP_CHECKSUM_AT,
    };
    // The field lies in the header just written.
    let _ = frame.set_checksum_partial(Some(mark));
}

/// Offset of the checksum field in a TCP header.
const TCP_CHECKSUM_AT: u16 = 16;

/// Writes `tcp`'s header over the start of `segment` (the header's room, then the payload
/// already in place) and its checksum: the whole segment's ([`checksum::compute`]), or with
/// `partial` (the device completes it) only the pseudo-header's sum
/// ([`checksum::partial`]).
fn write_tcp(segment: &mut [u8], ip: &IpRepr, tcp: &TcpRepr<'_>, partial: bool) {
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    debug_assert!(tcp.payload.is_empty(), "the payload is in place already");
    let written = write_plain_header(segment, tcp);
    if written.is_none() {
        // Checksum field zero (smoltcp's checksum would sum the segment again): filled below.
        let mut packet = TcpPacket::new_unchecked(&mut *segment);
        tcp.emit(&mut packet, &src, &dst, &ChecksumCapabilities::ignored());
    }
    let sum = match written {
        // The device sums the segment into the field: the pseudo-header's sum, folded, not
        // complemented (Linux's CHECKSUM_PARTIAL convention).
        _ if partial => checksum::partial(&src, &dst, IpProtocol::Tcp, segment.len()),
        // The header summed from the values written, the payload from memory.
        Some((len, header)) => {
            let rest = segment.get(len..).unwrap_or(&[]);
            checksum::compute_with_header(&src, &dst, IpProtocol::Tcp, segment.len(), header, rest)
        }
        None => checksum::compute(&src, &dst, IpProtocol::Tcp, segment),
    };
    TcpPacket::new_unchecked(&mut *segment).set_checksum(sum);
}

/// Writes the header of `tcp` over the start of `segment`, checksum zero, when its only
/// option is a timestamp (every segment of an established connection but those carrying SACK
/// blocks): the bytes smoltcp's `TcpRepr::emit` writes for it (the timestamp option, then the
/// end-of-list padding), without its option-by-option walk. Returns the header's length and
/// the sum of its 16-bit words (for [`checksum::compute_with_header`]); `None` (nothing
/// written) for a header with other options, or a segment too short for it.
fn write_plain_header(segment: &mut [u8], tcp: &TcpRepr<'_>) -> Option<(usize, u32)> {
    let len = plain_header_len(tcp)?;
    let h = segment.get_mut(..len)?;
    let flags: u8 = match tcp.control {
        TcpControl::None => 0,
        TcpControl::Psh => 0x08,
        TcpControl::Syn => 0x02,
        TcpControl::Fin => 0x01,
        TcpControl::Rst => 0x04,
    } | if tcp.ack_number.is_some() { 0x10 } else { 0 };
    let seq = tcp.seq_number.0 as u32;
    let ack = tcp.ack_number.map_or(0, |a| a.0 as u32);
    // Data offset in 32-bit words in the high nibble; the reserved bits and NS clear.
    let offset_flags = (len as u16 / 4) << 12 | u16::from(flags);
    h[0..2].copy_from_slice(&tcp.src_port.to_be_bytes());
    h[2..4].copy_from_slice(&tcp.dst_port.to_be_bytes());
    h[4..8].copy_from_slice(&seq.to_be_bytes());
    h[8..12].copy_from_slice(&ack.to_be_bytes());
    h[12..14].copy_from_slice(&offset_flags.to_be_bytes());
    h[14..16].copy_from_slice(&tcp.window_len.to_be_bytes());
    // Checksum (filled by the caller) and urgent pointer.
    h[16..20].fill(0);
    let halves = |x: u32| (x >> 16) + (x & 0xFFFF);
    let mut sum = u32::from(tcp.src_port)
        + u32::from(tcp.dst_port)
        + halves(seq)
        + halves(ack)
        + u32::from(offset_flags)
        + u32::from(tcp.window_len);
    if let Some(ts) = tcp.timestamp {
        // Kind 8, length 10, TSval, TSecr, then end-of-list and its padding.
        h[20] = 8;
        h[21] = 10;
        h[22..26].copy_from_slice(&ts.tsval.to_be_bytes());
        h[26..30].copy_from_slice(&ts.tsecr.to_be_bytes());
        h[30..32].fill(0);
        sum += 0x080A + halves(ts.tsval) + halves(ts.tsecr);
    }
    Some((len, sum))
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

/// Header bytes a super-segment's IP packet may need besides its payload: the IPv6 header and
/// the longest TCP header.
const SUPER_SEGMENT_HEADERS: usize = 40 + 60;

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
    let r = egress_run(st, now, waker, counters);
    // Frames a run left in the lent chain (it stopped for want of room) go back now, as if the
    // chain had been the run's own.
    if st.gso_tail.frame_count() > 0 {
        st.gso_tail = TxChain::new();
    }
    r
}

/// [`egress`] but for emptying the lent chain.
fn egress_run(st: &mut State, now: Instant, waker: &Waker, counters: &Counters) -> Egress {
    // Pieces of a split super-segment that found the driver's queue full go first.
    let w = st.tasks.egress_waker.as_ref().unwrap_or(waker);
    if !st.link.flush_gso_held(w, counters) {
        return Egress {
            starved: true,
            deadline: None,
        };
    }
    let mut deadline: Option<Instant> = None;
    let ip_mtu = st.link.caps.ip_mtu();
    // Super-segments: as large as the driver segments, else as IP allows (split in software),
    // less the largest IPv6 and TCP headers. The chain their frames after the first go into.
    let gso_payload = match st.link.gso.max_size {
        0 => MAX_SUPER_SEGMENT,
        n => n.min(MAX_SUPER_SEGMENT),
    }
    .saturating_sub(SUPER_SEGMENT_HEADERS);
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
        let Some(e) = st.tcp.at(i) else {
            continue;
        };
        if !due_kept {
            // A writer that found the pool empty waits for a returned slot, which wakes us.
            e.tcb.wake_starved_sender();
            // Something happened to the connection (a socket call, a segment in): straight
            // to `dispatch`, which sends whatever is due and nothing else, and the `poll_at`
            // after it gives the deadline. Asking `poll_at` first would cost a second one
            // for every connection that has something to send.
        }
        // The route is looked up only for a connection that is due or that something happened
        // to.
        let hop = e
            .tcb
            .remote_endpoint()
            .and_then(|r| hop_on(st.link.caps.medium, &mut st.iface, r.addr, now));
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
        let mut cx =
            TcpContext::new(now, ip_mtu, out.iface, e.keys).with_gso(gso_payload, &mut st.gso_tail);
        // The answer of the last `poll_at`, to keep when it is not due.
        let mut kept = None;
        loop {
            let was_open = tcb.state() != TcpState::Closed;
            let sent_max = tcb.sent_max();
            let mut sent = false;
            let r = tcb.dispatch_polled(&mut cx, |cx, (ip, tcp), zc| {
                let tail = cx.gso.as_mut().map(|g| &mut *g.tail);
                emit(&mut out, hop, ip, tcp, sent_max, zc, tail)?;
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
            let known = match r {
                Ok(known) => known,
                Err(Starved) => {
                    return Egress {
                        starved: true,
                        deadline: None,
                    }
                }
            };
            // The send fast path knows the next deadline (it sent everything queued: no frame
            // waits for the device); otherwise `dispatch` may have rewound to the first
            // unacknowledged frame (a retransmission timeout, a fast retransmit) and found the
            // device still holding it: register for that frame's return too, or nothing would
            // wake egress when it comes back.
            let (blocked, polled) = match known {
                Some(at) => (false, at),
                None => (tcb.tx_blocked(Some(out.tx_waker)), tcb.poll_at(&mut cx)),
            };
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

#[cfg(test)]
mod tests {
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        IpAddress, Ipv4Address, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, TcpTimestampRepr,
    };

    use super::write_plain_header;
    use crate::ip::checksum;
    use smoltcp::wire::IpProtocol;

    /// The plain header writer gives smoltcp's bytes for every header it takes, and declines
    /// every other.
    #[test]
    fn plain_headers_are_smoltcps() {
        let a = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1));
        let b = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 2));
        let controls = [
            TcpControl::None,
            TcpControl::Psh,
            TcpControl::Syn,
            TcpControl::Fin,
            TcpControl::Rst,
        ];
        let mut taken = 0;
        for control in controls {
            for ack in [None, Some(TcpSeqNumber(0x0102_0304))] {
                for ts in [None, Some(TcpTimestampRepr::new(0xdead_beef, 0x0bad_f00d))] {
                    for options in 0..5 {
                        let mut repr = header(control, ack, ts);
                        match options {
                            1 => repr.max_seg_size = Some(1460),
                            2 => repr.window_scale = Some(7),
                            3 => repr.sack_permitted = true,
                            4 => repr.sack_ranges[0] = Some((100, 200)),
                            _ => {}
                        }
                        // Stale bytes in the frame, as in a reused slot.
                        let mut ours = [0xa5u8; 64];
                        let mut theirs = [0xa5u8; 64];
                        let len = repr.header_len();
                        assert_eq!(super::tcp_header_len(&repr), len, "{repr:?}");
                        let wrote = write_plain_header(&mut ours, &repr);
                        let expected = options == 0;
                        assert_eq!(wrote.is_some(), expected, "{repr:?}");
                        if let Some((written, header)) = wrote {
                            assert_eq!(written, len);
                            // The checksum from the header's values equals the one over the
                            // bytes (payload: the stale bytes after the header).
                            assert_eq!(
                                checksum::compute_with_header(
                                    &a,
                                    &b,
                                    IpProtocol::Tcp,
                                    ours.len(),
                                    header,
                                    &ours[len..],
                                ),
                                checksum::compute(&a, &b, IpProtocol::Tcp, &ours),
                                "{repr:?}"
                            );
                            taken += 1;
                            repr.emit(
                                &mut TcpPacket::new_unchecked(&mut theirs[..]),
                                &a,
                                &b,
                                &ChecksumCapabilities::ignored(),
                            );
                            assert_eq!(ours[..len], theirs[..len], "{repr:?}");
                        }
                    }
                }
            }
        }
        assert_eq!(taken, 5 * 2 * 2);
        // Too short a segment: nothing written.
        let mut short = [0u8; 19];
        assert!(write_plain_header(&mut short, &header(TcpControl::None, None, None)).is_none());
    }

    /// A header without options but the timestamp `ts`.
    fn header(
        control: TcpControl,
        ack_number: Option<TcpSeqNumber>,
        timestamp: Option<TcpTimestampRepr>,
    ) -> TcpRepr<'static> {
        TcpRepr {
            src_port: 49152,
            dst_port: 80,
            control,
            seq_number: TcpSeqNumber(-5),
            ack_number,
            window_len: 0xfedc,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp,
            payload: &[],
        }
    }
}
