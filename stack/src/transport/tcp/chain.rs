//! TCP ingress of a received chain: a segment over several pool slots (a large receive, a TAP
//! read of a GSO packet), checked by `ip/chain.rs`, to the connection that takes it.
//!
//! ```text
//!  RxChain (head: headers + first payload bytes, tails: payload)
//!    ─► ip::chain::check_chain ─► header::parse (from the head) ─► the connection (table.rs)
//!    ─► the headers trimmed off (the head's slot goes back if it held no payload)
//!    ─► the slots, in order, as one batch of consecutive payload frames
//!       (Tcb::process_batch: one pass, one ACK decision; each slot one receive entry)
//! ```
//!
//! Each slot becomes one entry of the connection's receive queue, so `recv_segment`,
//! `read_with` and `read` see slot-sized segments and nothing is copied. A chain longer than
//! a batch ([`MAX_BATCH_SEGMENTS`](super::gro::MAX_BATCH_SEGMENTS) slots) is handed over in
//! consecutive batches, the flags (PSH, FIN) on the last.
//!
//! A chain is always a data segment of an open connection: one with SYN or RST, or without
//! payload, is dropped as [`Malformed`](DropReason::Malformed); one that no connection takes
//! (or that is for a listening port) is dropped as [`NoSocket`](DropReason::NoSocket),
//! unanswered (the peer's retransmission comes in ordinary segments, which get the usual
//! answer). No TX frame for a possible answer is back-pressure, as for single frames: the
//! chain is given back and ingress keeps it until egress has run.

use core::task::Waker;

use smoltcp::time::Instant;
use smoltcp::wire::{IpProtocol, IpRepr, TcpControl, TcpPacket};
use zcnet_buffer::RxChain;

use super::gro::{Batch, Gro};
use super::output::reserve;
use crate::ip::check::TcpSeg;
use crate::stack::State;
use crate::stats::{Counters, DropReason};
use crate::transport::tcp::tcb::state::State as TcpState;

/// Hands the TCP segment `seg` carried by `chain` to the connection that takes it (see the
/// module docs). Returns the chain when it must wait for a TX frame (the caller keeps it and
/// tries again after egress ran); it is dropped otherwise, counted if refused.
pub(crate) fn ingress(
    st: &mut State,
    mut chain: RxChain,
    seg: TcpSeg,
    now: Instant,
    waker: &Waker,
    counters: &Counters,
    gro: &mut Gro,
) -> Option<RxChain> {
    let parsed = chain.head().and_then(|head| {
        let tcp = head.get(seg.start..)?;
        let header_len = usize::from(tcp.get(12)? >> 4) * 4;
        let packet = TcpPacket::new_checked(tcp.get(..header_len)?).ok()?;
        Some((super::header::parse(&packet)?, header_len))
    });
    let gso_size = chain
        .head()
        .and_then(|h| h.gso_info())
        .map(|g| usize::from(g.segment_size));
    let Some((repr, header_len)) = parsed else {
        counters.drop(DropReason::Malformed);
        return None;
    };
    let payload_len = seg.len.saturating_sub(header_len);
    if payload_len == 0 || matches!(repr.control, TcpControl::Syn | TcpControl::Rst) {
        counters.drop(DropReason::Malformed);
        return None;
    }
    let ip = IpRepr::new(seg.src, seg.dst, IpProtocol::Tcp, seg.len, seg.hop_limit);
    let place = st.tcp.find(&ip, &repr).filter(|&i| {
        st.tcp
            .at(i)
            .is_some_and(|e| e.tcb.state() != TcpState::Listen)
    });
    let Some(place) = place else {
        counters.drop(DropReason::NoSocket);
        return None;
    };
    // A batch held for this or another connection goes first: it came before.
    gro.flush(st, now, waker, counters);
    if !reserve(st, waker) {
        return Some(chain);
    }
    // The payload only: the head's slot goes back at once if the headers were all it held.
    if chain.advance(seg.start + header_len).is_err() || chain.truncate(payload_len).is_err() {
        counters.drop(DropReason::Malformed);
        return None;
    }
    counters.rx_chain();
    // The wire segments the packet was (a device merged them, as its GSO mark says): the
    // connection counts those as received, not the slots they came in. A chain cut into
    // batches counts whole segments per batch, the rest with the last one.
    let mss = gso_size.filter(|&s| s > 0);
    let total = mss.map_or(chain.frame_count(), |s| payload_len.div_ceil(s)) as u64;
    let mut counted = 0u64;
    let mut seq = repr.seq_number;
    let mut frames = Batch::new();
    loop {
        while !frames.is_full() {
            let Some(frame) = chain.pop_front() else {
                break;
            };
            // Full: cannot fail.
            let _ = frames.push_back(frame);
        }
        let last = chain.frame_count() == 0;
        let n: usize = frames.iter().map(|f| f.len()).sum();
        let piece = smoltcp::wire::TcpRepr {
            seq_number: seq,
            control: if last { repr.control } else { TcpControl::None },
            ..repr
        };
        let ip = IpRepr::new(
            seg.src,
            seg.dst,
            IpProtocol::Tcp,
            piece.buffer_len() + n,
            seg.hop_limit,
        );
        let segments = match mss {
            _ if last => total.saturating_sub(counted),
            Some(s) => (n / s) as u64,
            None => frames.len() as u64,
        };
        counted += segments;
        super::input::deliver_batch(
            st,
            place,
            &ip,
            &piece,
            &mut frames,
            segments,
            now,
            waker,
            counters,
        );
        // What the connection did not take (it ended mid-chain) is dropped.
        frames.clear();
        if last {
            return None;
        }
        seq += n;
        // The next batch may need an answer too; without a TX frame for it the rest of the
        // chain is dropped unacknowledged (the peer sends it again).
        if !reserve(st, waker) {
            counters.drop(DropReason::TcpRxBudget);
            return None;
        }
    }
}
