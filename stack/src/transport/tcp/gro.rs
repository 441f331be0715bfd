//! Software GRO (generic receive offload): the in-order data segments of one connection that
//! arrive in one ingress run are held back and taken by its state machine in one pass
//! ([`Tcb::process_batch`](super::tcb::socket::Tcb::process_batch)), their frames queued as
//! they are (no copy).
//!
//! A run's first segment of a connection goes through at once (most runs carry one segment:
//! request/response traffic pays nothing for GRO), leaving a hint of what would continue it;
//! the segment that does starts a batch, and the ones after it join.
//!
//! A segment continues the held ones (Linux's `tcp_gro_receive` rules) when it is for the same
//! connection, starts where they end, carries the same acknowledgement number and the same
//! timestamp, has flags ACK or ACK|PSH and no other options (no SACK blocks), carries data,
//! and is no longer than the first. A PSH, a shorter segment, a full chain
//! ([`MAX_BATCH_SEGMENTS`] segments) or 64 KiB end the batch: the next segment starts a new one.
//! Anything else first hands the held segments over ([`Gro::flush`]), then goes its usual
//! way. Ingress flushes at the end of every run, so nothing is held between runs.
//!
//! The acknowledgement of what a batch carried follows the delayed-ACK rule segment by
//! segment (an ACK is due once two full segments wait), as without GRO.

use core::task::Waker;

use smoltcp::time::Instant;
use smoltcp::wire::{IpProtocol, IpRepr, TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};
use zcnet_buffer::RxFrame;

use crate::stack::State;
use crate::stats::Counters;

/// The most segments in a batch: 64 KiB of full 1460-byte segments.
pub(crate) const MAX_BATCH_SEGMENTS: usize = 45;

/// The payloads of a batch, one frame per segment, in order. Lives in the [`Gro`] of an
/// ingress run and is drained by the connection in place (a batch's frames are never moved
/// as a whole: that is a kilobyte of leases).
pub(crate) type Batch = heapless::Deque<RxFrame, MAX_BATCH_SEGMENTS>;

/// The largest batch, in payload bytes (an IP packet's worth).
const MAX_BATCH: usize = 65_535 - 40 - 60;

/// The segments held back in one ingress run (at most one batch). Owned by the ingress task
/// and empty between runs ([`flush`](Self::flush) at the end of each).
#[derive(Default)]
pub(crate) struct Gro {
    /// What would continue the segment processed last, while no batch is held.
    hint: Option<Hint>,
    /// The batch's headers and bookkeeping, while one is held.
    held: Option<Held>,
    /// Its payloads.
    frames: Batch,
}

/// What continues a segment processed at once: the next segment of its run, if it matches.
struct Hint {
    /// The connection's place in the table.
    place: usize,
    /// Where the next segment must start.
    next: TcpSeqNumber,
    /// Its acknowledgement number.
    ack: Option<TcpSeqNumber>,
    /// Its timestamp.
    timestamp: Option<TcpTimestampRepr>,
    /// The payload length the next one may not exceed.
    len: usize,
}

/// A batch: in-order segments of one connection.
struct Held {
    /// The connection's place in the table.
    place: usize,
    /// The first segment's IP header (its payload length is the batch's at the flush).
    ip: IpRepr,
    /// The first segment's TCP header, with the last one's window and PSH if any had it.
    repr: TcpRepr<'static>,
    /// The sequence number the next segment must start at.
    next: TcpSeqNumber,
    /// The first segment's payload length: later ones are no longer.
    first_len: usize,
    /// Payload bytes held.
    len: usize,
    /// A PSH or a short segment ended the batch.
    closed: bool,
}

/// Whether a segment with header `repr` may be part of a batch at all.
pub(super) fn batchable(repr: &TcpRepr<'_>, payload_len: usize) -> bool {
    payload_len > 0
        && matches!(repr.control, TcpControl::None | TcpControl::Psh)
        && repr.ack_number.is_some()
        && repr.sack_ranges[0].is_none()
        && repr.max_seg_size.is_none()
        && repr.window_scale.is_none()
        && !repr.sack_permitted
}

impl Gro {
    /// Whether the segment (`repr` with `payload_len` bytes, for the connection at `place`)
    /// continues the held batch.
    pub(super) fn continues(&self, place: usize, repr: &TcpRepr<'_>, payload_len: usize) -> bool {
        self.held.as_ref().is_some_and(|h| {
            !h.closed
                && h.place == place
                && repr.seq_number == h.next
                && repr.ack_number == h.repr.ack_number
                && repr.timestamp == h.repr.timestamp
                && batchable(repr, payload_len)
                && payload_len <= h.first_len
                && h.len + payload_len <= MAX_BATCH
        })
    }

    /// Whether the segment (`repr` with `payload_len` bytes, for the connection at `place`)
    /// continues the one processed last (it then starts a batch).
    pub(super) fn follows(&self, place: usize, repr: &TcpRepr<'_>, payload_len: usize) -> bool {
        self.hint.as_ref().is_some_and(|h| {
            h.place == place
                && repr.seq_number == h.next
                && repr.ack_number == h.ack
                && repr.timestamp == h.timestamp
                && payload_len <= h.len
                && batchable(repr, payload_len)
        })
    }

    /// A segment (`repr` with `payload_len` bytes) went to the connection at `place` at once:
    /// the next one may start a batch if it continues it (a PSH or short segment ends runs).
    pub(super) fn processed(&mut self, place: usize, repr: &TcpRepr<'_>, payload_len: usize) {
        self.hint = (repr.control != TcpControl::Psh).then(|| Hint {
            place,
            next: repr.seq_number + payload_len,
            ack: repr.ack_number,
            timestamp: repr.timestamp,
            len: payload_len,
        });
    }

    /// Any other segment was processed: no hint holds.
    pub(super) fn forget(&mut self) {
        self.hint = None;
    }

    /// Adds the segment (`repr`, its payload `frame`) to the held batch, which it
    /// [`continues`](Self::continues).
    pub(super) fn push(&mut self, repr: &TcpRepr<'_>, frame: RxFrame) {
        let Some(h) = self.held.as_mut() else {
            return;
        };
        let n = frame.len();
        // `continues` saw room: a batch is closed when it is full.
        if self.frames.push_back(frame).is_err() {
            return;
        }
        h.next += n;
        h.len += n;
        h.repr.window_len = repr.window_len;
        if repr.control == TcpControl::Psh {
            h.repr.control = TcpControl::Psh;
        }
        h.closed = repr.control == TcpControl::Psh || n < h.first_len || self.frames.is_full();
    }

    /// Starts a batch with the segment (`ip`, `repr`, its payload `frame`) for the connection
    /// at `place`. The caller flushed the previous batch and reserved a TX frame for the
    /// answer the batch may get.
    pub(super) fn start(&mut self, place: usize, ip: IpRepr, repr: &TcpRepr<'_>, frame: RxFrame) {
        debug_assert!(self.held.is_none() && self.frames.is_empty());
        self.hint = None;
        let n = frame.len();
        // Empty: cannot fail.
        let _ = self.frames.push_back(frame);
        self.held = Some(Held {
            place,
            ip,
            repr: TcpRepr {
                payload: &[],
                ..*repr
            },
            next: repr.seq_number + n,
            first_len: n,
            len: n,
            closed: repr.control == TcpControl::Psh,
        });
    }

    /// Hands the held batch, if any, to its connection (see the module docs) and sends the
    /// answer it gets, if any (a TX frame was reserved when the batch started).
    #[inline]
    pub(crate) fn flush(
        &mut self,
        st: &mut State,
        now: Instant,
        waker: &Waker,
        counters: &Counters,
    ) {
        if self.held.is_some() {
            self.flush_held(st, now, waker, counters);
        }
    }

    /// [`flush`](Self::flush) with a batch held.
    #[inline(never)]
    fn flush_held(&mut self, st: &mut State, now: Instant, waker: &Waker, counters: &Counters) {
        let Some(h) = self.held.take() else {
            return;
        };
        let ip = IpRepr::new(
            h.ip.src_addr(),
            h.ip.dst_addr(),
            IpProtocol::Tcp,
            h.repr.buffer_len() + h.len,
            h.ip.hop_limit(),
        );
        let segments = self.frames.len() as u32;
        counters.gro_batch(segments);
        if segments == 1 {
            if let Some(frame) = self.frames.pop_front() {
                super::input::deliver_one(st, h.place, &ip, &h.repr, frame, now, waker, counters);
            }
        } else {
            super::input::deliver_batch(
                st,
                h.place,
                &ip,
                &h.repr,
                &mut self.frames,
                u64::from(segments),
                now,
                waker,
                counters,
            );
        }
        // What the connection did not take (it ended mid-batch) is dropped.
        if !self.frames.is_empty() {
            self.frames.clear();
        }
    }

    /// The end of an ingress run: the held batch goes to its connection, and no hint holds
    /// into the next run.
    pub(crate) fn end_run(
        &mut self,
        st: &mut State,
        now: Instant,
        waker: &Waker,
        counters: &Counters,
    ) {
        self.flush(st, now, waker, counters);
        self.hint = None;
    }
}

#[cfg(test)]
mod tests {
    use smoltcp::wire::{IpAddress, IpRepr, Ipv4Address, TcpControl, TcpRepr, TcpSeqNumber};
    use smoltcp::wire::{IpProtocol, TcpTimestampRepr};

    use super::{batchable, Gro, MAX_BATCH_SEGMENTS};
    use crate::transport::tcp::tcb::recv::test_frame;

    fn seg(seq: i32, control: TcpControl) -> TcpRepr<'static> {
        TcpRepr {
            src_port: 80,
            dst_port: 49152,
            control,
            seq_number: TcpSeqNumber(seq),
            ack_number: Some(TcpSeqNumber(7)),
            window_len: 100,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: Some(TcpTimestampRepr::new(1, 2)),
            payload: &[],
        }
    }

    fn ip() -> IpRepr {
        let a = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1));
        let b = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 2));
        IpRepr::new(a, b, IpProtocol::Tcp, 0, 64)
    }

    #[test]
    fn only_plain_data_segments_batch() {
        assert!(batchable(&seg(0, TcpControl::None), 10));
        assert!(batchable(&seg(0, TcpControl::Psh), 10));
        assert!(!batchable(&seg(0, TcpControl::None), 0), "no data");
        for c in [TcpControl::Syn, TcpControl::Fin, TcpControl::Rst] {
            assert!(!batchable(&seg(0, c), 10), "{c:?}");
        }
        let mut s = seg(0, TcpControl::None);
        s.sack_ranges[0] = Some((1, 2));
        assert!(!batchable(&s, 10), "SACK blocks");
        let mut s = seg(0, TcpControl::None);
        s.ack_number = None;
        assert!(!batchable(&s, 10), "no ACK");
    }

    #[test]
    fn a_batch_takes_what_continues_it_and_stops() {
        let mut g = Gro::default();
        let first = seg(100, TcpControl::None);
        // Nothing processed yet: nothing follows.
        assert!(!g.follows(3, &first, 10));
        g.processed(3, &first, 10);
        let second = seg(110, TcpControl::None);
        assert!(g.follows(3, &second, 10));
        assert!(!g.follows(4, &second, 10), "another connection");
        assert!(!g.follows(3, &seg(111, TcpControl::None), 10), "a gap");
        assert!(!g.follows(3, &second, 11), "longer than the first");
        let mut other_ack = second;
        other_ack.ack_number = Some(TcpSeqNumber(8));
        assert!(!g.follows(3, &other_ack, 10), "another ACK");
        let mut other_ts = second;
        other_ts.timestamp = Some(TcpTimestampRepr::new(2, 2));
        assert!(!g.follows(3, &other_ts, 10), "another timestamp");

        g.start(3, ip(), &second, test_frame(&[1; 10]));
        let third = seg(120, TcpControl::None);
        assert!(g.continues(3, &third, 10));
        g.push(&third, test_frame(&[2; 10]));
        // A short segment ends the batch.
        let fourth = seg(130, TcpControl::None);
        g.push(&fourth, test_frame(&[3; 4]));
        assert!(!g.continues(3, &seg(134, TcpControl::None), 4));
        assert_eq!(g.frames.len(), 3);
        let h = g.held.as_ref().unwrap();
        assert_eq!((h.next, h.len, h.closed), (TcpSeqNumber(134), 24, true));
    }

    #[test]
    fn psh_ends_a_batch_and_a_full_batch_closes() {
        let mut g = Gro::default();
        g.start(1, ip(), &seg(0, TcpControl::None), test_frame(&[0; 8]));
        g.push(&seg(8, TcpControl::Psh), test_frame(&[0; 8]));
        assert_eq!(g.held.as_ref().unwrap().repr.control, TcpControl::Psh);
        assert!(!g.continues(1, &seg(16, TcpControl::None), 8));

        let mut g = Gro::default();
        g.start(1, ip(), &seg(0, TcpControl::None), test_frame(&[0; 8]));
        for k in 1..MAX_BATCH_SEGMENTS {
            let s = seg(8 * k as i32, TcpControl::None);
            assert!(g.continues(1, &s, 8), "segment {k}");
            g.push(&s, test_frame(&[0; 8]));
        }
        let s = seg(8 * MAX_BATCH_SEGMENTS as i32, TcpControl::None);
        assert!(!g.continues(1, &s, 8), "full");
        // A PSH ends a run: nothing follows it.
        let mut g = Gro::default();
        g.processed(1, &seg(0, TcpControl::Psh), 8);
        assert!(!g.follows(1, &seg(8, TcpControl::None), 8));
    }
}
