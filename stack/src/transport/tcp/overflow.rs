//! Segments no connection took on a listener's port: a SYN when every listening socket is
//! busy, and an ACK that may complete a SYN cookie handshake (`cookie.rs`).
//!
//! ```text
//!  SYN, no listening socket free ─► cookies on, a listener for its address, an MSS a cookie
//!     can carry ─► SYN-ACK, ISN = cookie, options in the TSval; nothing kept (cookie sent)
//!                  else ─► dropped, the client retries (BacklogFull)
//!  ACK (no SYN, no RST), the listener sent a cookie in the last two minutes
//!     ─► ack - 1 checks out for the four-tuple and seq - 1 (cookie validated)
//!        ─► a listening socket free by now ─► it becomes the connection: SYN-RECEIVED
//!           rebuilt from the cookie, then `process` takes the ACK (data, FIN) into it; the
//!           listener's `accept` hands it out as any other
//!        ─► else room in the listener's queue, a socket slot, buffers ─► a new connection,
//!           made the same way, queued for `accept`
//!        ─► else dropped, the peer retransmits (accept drop)
//!     ─► it does not ─► the caller answers with a RST (cookie rejected)
//! ```

use smoltcp::time::Instant;
use smoltcp::wire::{IpEndpoint, IpRepr, TcpControl, TcpRepr, TcpTimestampRepr, TCP_HEADER_LEN};
use zcnet_buffer::RxFrame;

use super::cookie::{mss_index, mss_of, ts_decode, ts_encode, CookieOptions};
use super::output::traffic_of;
use crate::link::neighbor::Traffic;
use crate::socket::tcp::{add_tcb, HANDSHAKE_TIMEOUT};
use crate::stack::State;
use crate::stats::{Counters, DropReason};
use crate::transport::tcp::tcb::context::TcpContext;
use crate::transport::tcp::tcb::socket::{CookieOpen, Tcb};
use crate::transport::tcp::tcb::state::State as TcpState;

/// A segment to send back, and whose traffic it is for the neighbour table.
pub(super) type Answer = ((IpRepr, TcpRepr<'static>), Traffic);

/// What became of a segment [`unclaimed`] looked at.
pub(super) enum Unclaimed {
    /// Taken (answered with what is given, if anything) or dropped, and counted.
    Handled(Option<Answer>),
    /// Not a listener's: the caller refuses it as before (with the frame back).
    Refused(RxFrame),
}

/// The window scale a receive buffer of `capacity` bytes announces (what `Tcb::new` takes).
fn window_shift(capacity: usize) -> u8 {
    let log2 = usize::BITS - capacity.leading_zeros();
    log2.saturating_sub(16) as u8
}

/// The unscaled window a SYN-ACK announces for a receive buffer of `capacity` bytes.
fn syn_window(capacity: usize) -> u16 {
    u16::try_from(capacity).unwrap_or(u16::MAX)
}

/// A received segment no connection took.
pub(super) struct Unowned<'a> {
    /// Its frame.
    pub(super) frame: RxFrame,
    /// Where its payload lies in the frame (offset, length), if it has any.
    pub(super) payload_at: Option<(usize, usize)>,
    /// Its IP header.
    pub(super) ip: &'a IpRepr,
    /// Its TCP header.
    pub(super) repr: &'a TcpRepr<'a>,
}

/// Looks at a segment no connection and no listening socket took (see the module docs).
pub(super) fn unclaimed(
    st: &mut State,
    seg: Unowned<'_>,
    now: Instant,
    counters: &Counters,
) -> Unclaimed {
    let (ip, repr) = (seg.ip, seg.repr);
    if repr.control == TcpControl::Syn
        && repr.ack_number.is_none()
        && st.listener_ports.contains(repr.dst_port)
    {
        let answer = syn_ack(st, ip, repr, now, counters);
        if answer.is_none() {
            // The client retries (`backlog.rs`).
            counters.drop(DropReason::BacklogFull);
        }
        return Unclaimed::Handled(answer.map(|a| (a, Traffic::Unsolicited)));
    }
    let ack_only = matches!(
        repr.control,
        TcpControl::None | TcpControl::Psh | TcpControl::Fin
    );
    if !(ack_only && repr.ack_number.is_some() && st.listener_ports.cookies()) {
        return Unclaimed::Refused(seg.frame);
    }
    match st.listener_ports.find(ip.dst_addr(), repr.dst_port) {
        Some((id, ..)) if st.listener_ports.cookie_recent(id, now) => {}
        _ => return Unclaimed::Refused(seg.frame),
    }
    cookie_ack(st, seg, now, counters)
}

/// The cookie SYN-ACK for `repr`, a SYN no listening socket took; `None` when cookies are
/// off, no listener takes its address, or no cookie can carry its MSS.
fn syn_ack(
    st: &mut State,
    ip: &IpRepr,
    repr: &TcpRepr,
    now: Instant,
    counters: &Counters,
) -> Option<(IpRepr, TcpRepr<'static>)> {
    if !st.listener_ports.cookies() {
        return None;
    }
    let (id, _, capacity) = st.listener_ports.find(ip.dst_addr(), repr.dst_port)?;
    let capacity = capacity?;
    let v6 = matches!(ip, IpRepr::Ipv6(_));
    let index = mss_index(v6, repr.max_seg_size)?;
    let local = IpEndpoint::new(ip.dst_addr(), repr.dst_port);
    let remote = IpEndpoint::new(ip.src_addr(), repr.src_port);
    let keys = &st.tcp.keys;
    let (ip_reply, mut reply) = Tcb::reply(ip, repr);
    reply.control = TcpControl::Syn;
    reply.seq_number = keys
        .cookie()
        .make(local, remote, repr.seq_number, now, index);
    reply.ack_number = Some(repr.seq_number + 1);
    reply.window_len = syn_window(capacity);
    let mss = st
        .link
        .caps
        .ip_mtu()
        .saturating_sub(ip.header_len() + TCP_HEADER_LEN);
    reply.max_seg_size = Some(u16::try_from(mss).unwrap_or(u16::MAX));
    // Window scale and SACK survive only in the timestamp: without one, neither is offered.
    if let Some(ts) = repr.timestamp {
        let opts = CookieOptions {
            wscale: repr.window_scale,
            sack: repr.sack_permitted,
        };
        reply.window_scale = repr.window_scale.map(|_| window_shift(capacity));
        reply.sack_permitted = repr.sack_permitted;
        let tsval = keys.tsval(now, local, remote);
        reply.timestamp = Some(TcpTimestampRepr::new(ts_encode(tsval, opts), ts.tsval));
    }
    let ip_reply = IpRepr::new(
        ip_reply.src_addr(),
        ip_reply.dst_addr(),
        ip_reply.next_header(),
        reply.buffer_len(),
        ip_reply.hop_limit(),
    );
    st.listener_ports.note_cookie_sent(id, now);
    counters.syn_cookie_sent(repr.dst_port);
    Some((ip_reply, reply))
}

/// An ACK for no connection on the port of a listener that sent cookies lately: a
/// connection if its acknowledgement is a valid cookie (see the module docs).
fn cookie_ack(st: &mut State, seg: Unowned<'_>, now: Instant, counters: &Counters) -> Unclaimed {
    let Unowned {
        mut frame,
        payload_at,
        ip,
        repr,
    } = seg;
    let Some((id, spec, Some(capacity))) = st.listener_ports.find(ip.dst_addr(), repr.dst_port)
    else {
        return Unclaimed::Refused(frame);
    };
    let Some(ack) = repr.ack_number else {
        return Unclaimed::Refused(frame);
    };
    let local = IpEndpoint::new(ip.dst_addr(), repr.dst_port);
    let remote = IpEndpoint::new(ip.src_addr(), repr.src_port);
    let (local_isn, remote_isn) = (ack - 1, repr.seq_number - 1);
    let checked = st
        .tcp
        .keys
        .cookie()
        .check(local, remote, remote_isn, local_isn, now);
    // Without timestamps only the MSS came back; with them, the options must be ours.
    let opts = match repr.timestamp {
        Some(ts) => ts_decode(ts.tsecr),
        None => Some(CookieOptions {
            wscale: None,
            sack: false,
        }),
    };
    let (Some(index), Some(opts)) = (checked, opts) else {
        counters.syn_cookie_rejected();
        return Unclaimed::Refused(frame);
    };
    counters.syn_cookie_validated();
    // A listening socket free by now takes the connection, as it would have taken the SYN
    // (the listener's `accept` hands it out as usual); otherwise a new connection waits in
    // the listener's queue.
    let syn = TcpRepr {
        control: TcpControl::Syn,
        ack_number: None,
        ..*repr
    };
    let listening = st
        .tcp
        .find(ip, &syn)
        .filter(|&i| matches!(st.tcp.at(i), Some(e) if e.tcb.state() == TcpState::Listen));
    let new = match listening {
        Some(_) => None,
        None if st.listener_ports.queue_full(id) => {
            counters.syn_cookie_accept_drop(repr.dst_port);
            return Unclaimed::Handled(None);
        }
        None => match (spec.make_buffers)().map(|b| add_tcb(st, spec.pool, b)) {
            Some(Ok(h)) => Some(h),
            _ => {
                counters.syn_cookie_accept_drop(repr.dst_port);
                return Unclaimed::Handled(None);
            }
        },
    };
    // The payload stays in the frame: the frame, trimmed to it, goes to the connection.
    let payload = match payload_at {
        Some((at, len)) if frame.advance(at).is_ok() && frame.truncate(len).is_ok() => Some(frame),
        _ => None,
    };
    let ip_mtu = st.link.caps.ip_mtu();
    let entry = match (new, listening) {
        (Some(h), _) => st.tcp.at_handle(h),
        (None, Some(i)) => st.tcp.at(i),
        (None, None) => None,
    };
    let Some(e) = entry else {
        return Unclaimed::Handled(None);
    };
    let mut cx =
        TcpContext::new(now, ip_mtu, &st.iface, e.keys).with_challenge_acks(&mut *e.challenge_acks);
    if new.is_some() {
        // As a listening socket's: reset if the peer stays silent until `accept` takes it.
        e.tcb.set_timeout(Some(smoltcp::time::Duration::from_secs(
            HANDSHAKE_TIMEOUT.as_secs(),
        )));
    }
    e.tcb.open_from_cookie(
        &mut cx,
        CookieOpen {
            local,
            remote,
            local_isn,
            remote_isn,
            remote_mss: mss_of(matches!(ip, IpRepr::Ipv6(_)), index),
            remote_wscale: opts.wscale,
            local_wscale: window_shift(capacity),
            sack: opts.sack,
            tsval: repr.timestamp.map(|t| t.tsval),
            window: syn_window(capacity),
        },
    );
    let reply = e.tcb.process(&mut cx, ip, repr, payload);
    counters.challenge_acks_withheld(e.challenge_acks.take_withheld());
    let drops = e.tcb.take_rx_drops();
    counters.drop_n(DropReason::TcpRxBudget, u64::from(drops.budget));
    let traffic = traffic_of(e.tcb.state());
    if let Some(handle) = new {
        match st.listener_ports.push_completed(id, handle) {
            Ok(Some(w)) => crate::stack::wake(st.tasks.local.as_ref(), &w),
            Ok(None) => {}
            Err(handle) => {
                // `queue_full` said there was room: not expected. Nothing keeps it.
                st.remove_tcb(handle);
                counters.syn_cookie_accept_drop(repr.dst_port);
                return Unclaimed::Handled(None);
            }
        }
    }
    Unclaimed::Handled(reply.map(|r| (r, traffic)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_and_scale_follow_the_buffer() {
        assert_eq!(window_shift(4096), 0);
        assert_eq!(window_shift(65535), 0);
        assert_eq!(window_shift(65536), 1);
        assert_eq!(window_shift(1 << 20), 5);
        assert_eq!(syn_window(4096), 4096);
        assert_eq!(syn_window(1 << 20), u16::MAX);
    }
}
