//! TCP ingress: a received segment, already checked ([`TcpSeg`]), to the connection that
//! takes it.
//!
//! ```text
//!  ingress ─► ip::check (headers, addresses, TCP checksum) ─► Verdict::Tcp
//!    ─► header::parse in place ─► the connection that accepts it (table.rs), else a listener
//!          ─► an in-order data segment of an established connection: held back with the
//!             ones after it in this ingress run (gro.rs), then the connection takes them
//!             in one pass (Tcb::process_batch)
//!          ─► Tcb::process with the frame trimmed to the payload: queued on the connection
//!             as it is (no copy; a segment under 256 bytes may be copied into the previous
//!             frame's tail, ledger: CopyBreak), or dropped if not kept
//!          └─ an immediate answer (challenge ACK, ACK of out-of-order data) ─► output::emit
//!    └─ nobody takes it: a bare SYN for a TcpListener's port gets a SYN cookie, or is
//!       dropped (BacklogFull); an ACK may bring a cookie back (overflow.rs); anything else
//!       but a RST is answered with a RST (Tcb::rst_reply) ─► output::emit (NoSocket)
//! ```
//!
//! No TX frame for an answer is back-pressure: [`ingress`] gives the received frame back, the
//! runner keeps it until egress has run (as for smoltcp's answers) and hands it in again.

use core::task::Waker;

use smoltcp::time::Instant;
use smoltcp::wire::{IpProtocol, IpRepr, TcpControl, TcpPacket, TcpRepr};
use zcnet_buffer::RxFrame;

use super::gro::{self, Gro};
use super::output::{emit, hop_for, out, reserve, traffic_of};
use super::overflow::{self, Unclaimed, Unowned};
use crate::ip::check::TcpSeg;
use crate::link::neighbor::Traffic;
use crate::stack::State;
use crate::stats::{Counters, DropReason};
use crate::transport::tcp::table::CloseCause;
use crate::transport::tcp::tcb::context::TcpContext;
use crate::transport::tcp::tcb::socket::Tcb;
use crate::transport::tcp::tcb::state::State as TcpState;

/// Ingress: hands the TCP segment `seg` of `frame` to the connection that takes it, or
/// answers it (see the module docs); an in-order data segment of an established connection
/// may be held back in `gro` to be taken with the ones that follow it (`gro.rs`). Returns the
/// frame when it must wait for a TX frame (the caller keeps it and tries again after egress
/// ran); the frame is dropped otherwise.
pub(crate) fn ingress(
    st: &mut State,
    mut frame: RxFrame,
    seg: TcpSeg,
    now: Instant,
    waker: &Waker,
    counters: &Counters,
    gro: &mut Gro,
) -> Option<RxFrame> {
    // Filled where it stays for the rest of the segment's way (not built, then moved here).
    let mut repr = super::header::BLANK;
    let Some(payload_at) = parse(&frame, &seg, &mut repr) else {
        counters.drop(DropReason::Malformed);
        return None;
    };
    // Its payload: the TCP segment as it came (header, options as sent, and data).
    let ip = IpRepr::new(seg.src, seg.dst, IpProtocol::Tcp, seg.len, seg.hop_limit);
    let found = st.tcp.find(&ip, &repr);
    let payload_len = payload_at.map_or(0, |(_, len)| len);
    // (`continues` and `follows` test `gro::batchable` themselves.)
    if let (Some(i), Some((at, len))) = (found, payload_at) {
        if gro.continues(i, &repr, payload_len)
            && frame.advance(at).is_ok()
            && frame.truncate(len).is_ok()
        {
            gro.push(&repr, frame);
            return None;
        }
    }
    // Anything else: the held batch goes first.
    gro.flush(st, now, waker, counters);
    // Every segment may need an answer: make sure a frame is there for it first.
    if !reserve(st, waker) {
        return Some(frame);
    }
    let reply = match found {
        Some(i) => {
            let payload = match payload_at {
                Some((at, len)) if frame.advance(at).is_ok() && frame.truncate(len).is_ok() => {
                    Some(frame)
                }
                _ => {
                    drop(frame);
                    None
                }
            };
            match payload {
                // The segment after one processed at once, continuing it: starts a batch.
                Some(f) if gro.follows(i, &repr, payload_len) => {
                    gro.start(i, ip, &repr, f);
                    return None;
                }
                payload => {
                    // (A batch for a connection not established goes through the full
                    // processing segment by segment: batching it costs nothing extra.) A PSH
                    // ends a run: nothing follows it (`processed` would keep no hint either),
                    // so request/response segments skip the batching test.
                    if repr.control != TcpControl::Psh && gro::batchable(&repr, payload_len) {
                        gro.processed(i, &repr, payload_len);
                    } else {
                        gro.forget();
                    }
                    connection_answer(st, i, now, counters, |tcb, cx| {
                        tcb.process(cx, &ip, &repr, payload)
                    })
                }
            }
        }
        // A SYN beyond a listener's backlog, an ACK bringing a SYN cookie back (`overflow.rs`).
        None => {
            gro.forget();
            match overflow::unclaimed(
                st,
                Unowned {
                    frame,
                    payload_at,
                    ip: &ip,
                    repr: &repr,
                },
                now,
                counters,
            ) {
                Unclaimed::Handled(answer) => answer,
                Unclaimed::Refused(frame) => {
                    if repr.control == TcpControl::Rst {
                        // Never answer a reset with a reset.
                        return None;
                    }
                    counters.drop(DropReason::NoSocket);
                    drop(frame);
                    // The sender's address may be forged: the answer is unsolicited traffic
                    // for the neighbour table.
                    Some((Tcb::rst_reply(&ip, &repr), Traffic::Unsolicited))
                }
            }
        }
    };
    send_answer(st, reply, now, waker, counters);
    None
}

/// Hands the one segment of a batch (its payload `frame`) to the connection at `i`, as
/// [`deliver_batch`] does a longer batch.
#[allow(clippy::too_many_arguments)]
pub(super) fn deliver_one(
    st: &mut State,
    i: usize,
    ip: &IpRepr,
    repr: &TcpRepr<'_>,
    frame: RxFrame,
    now: Instant,
    waker: &Waker,
    counters: &Counters,
) {
    let reply = connection_answer(st, i, now, counters, |tcb, cx| {
        tcb.process(cx, ip, repr, Some(frame))
    });
    answer_reserved(st, reply, now, waker, counters);
}

/// Hands a batch of `segments` wire segments (`repr`, `frames`: see [`Tcb::process_batch`])
/// to the connection at `i` and sends the answer it gets, if any.
#[allow(clippy::too_many_arguments)]
pub(super) fn deliver_batch(
    st: &mut State,
    i: usize,
    ip: &IpRepr,
    repr: &TcpRepr<'_>,
    frames: &mut gro::Batch,
    segments: u64,
    now: Instant,
    waker: &Waker,
    counters: &Counters,
) {
    let reply = connection_answer(st, i, now, counters, |tcb, cx| {
        tcb.process_batch(cx, ip, repr, frames, segments)
    });
    answer_reserved(st, reply, now, waker, counters);
}

/// Sends a batch's answer, if any, in the TX frame the batch reserved when it started (nothing
/// took it since: ingress flushes the batch before any frame goes to smoltcp).
fn answer_reserved(
    st: &mut State,
    reply: Option<((IpRepr, TcpRepr<'static>), Traffic)>,
    now: Instant,
    waker: &Waker,
    counters: &Counters,
) {
    if reply.is_some() && !reserve(st, waker) {
        debug_assert!(false, "the batch's reserved TX frame went missing");
        return;
    }
    send_answer(st, reply, now, waker, counters);
}

/// The connection at `i` processes a segment (`process`: `Tcb::process` or
/// `Tcb::process_chain`); its immediate answer, if any.
fn connection_answer(
    st: &mut State,
    i: usize,
    now: Instant,
    counters: &Counters,
    process: impl FnOnce(&mut Tcb<'static>, &mut TcpContext<'_>) -> Option<(IpRepr, TcpRepr<'static>)>,
) -> Option<((IpRepr, TcpRepr<'static>), Traffic)> {
    let ip_mtu = st.link.caps.ip_mtu();
    // `find` returned a place in use.
    let e = st.tcp.at(i)?;
    let mut cx =
        TcpContext::new(now, ip_mtu, &st.iface, e.keys).with_challenge_acks(&mut *e.challenge_acks);
    let mut reply = process(e.tcb, &mut cx);
    counters.challenge_acks_withheld(e.challenge_acks.take_withheld());
    let drops = e.tcb.take_rx_drops();
    counters.drop_n(DropReason::TcpRxBudget, u64::from(drops.budget));
    counters.drop_n(DropReason::TcpOutOfOrderPurged, u64::from(drops.purged));
    // Data for a socket its owner dropped (what it had not read was discarded at the drop, so
    // any readable data is new): nobody will read it, so reset the connection (RFC 1122,
    // 4.2.2.13) instead of holding its frames until the peer gives up on a window that never
    // opens. The RST replaces the answer.
    let unread = e.meta.orphaned() && e.tcb.can_recv() && e.tcb.state() != TcpState::Closed;
    if unread {
        event!(tcp_aborted(e.tcb));
        e.meta.set_cause(CloseCause::Aborted);
        e.tcb.abort();
        counters.tcp_unread_reset();
        reply = None;
    }
    let reply = reply.map(|r| (r, traffic_of(e.tcb.state())));
    if unread {
        st.signal_egress();
    }
    reply
}

/// Sends an immediate answer (a TX frame was reserved for it).
fn send_answer(
    st: &mut State,
    reply: Option<((IpRepr, TcpRepr<'static>), Traffic)>,
    now: Instant,
    waker: &Waker,
    counters: &Counters,
) {
    if let Some(((ip, tcp), traffic)) = reply {
        let hop = hop_for(st, ip.dst_addr(), now);
        let mut out = out(st, waker, counters, now);
        out.set_traffic(traffic);
        // A spare frame was reserved: this cannot starve.
        let _ = emit(&mut out, hop, &ip, &tcp, None, None, None);
    }
}

/// Parses the TCP segment `seg` of `frame`: its header (a `TcpRepr` with an empty payload,
/// borrowing nothing) and, when it carries any, where its payload lies in the frame (offset
/// and length). `None` when malformed.
fn parse(
    frame: &RxFrame,
    seg: &TcpSeg,
    repr: &mut TcpRepr<'static>,
) -> Option<Option<(usize, usize)>> {
    let bytes = frame.get(seg.start..seg.start.checked_add(seg.len)?)?;
    let packet = TcpPacket::new_checked(bytes).ok()?;
    // The checksum was verified by `rx_check` (or by the device). Errors: port 0, options cut
    // short.
    super::header::parse_into(&packet, repr)?;
    // `new_checked` found the header within the segment: the rest is the payload.
    let header_len = usize::from(packet.header_len());
    let len = bytes.len() - header_len;
    Some((len > 0).then_some((seg.start + header_len, len)))
}
