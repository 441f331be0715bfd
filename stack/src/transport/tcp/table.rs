//! The stack's TCP connections: a fixed table of [`Tcb`]s, one place per socket slot of the
//! [`StackResources`](crate::StackResources), each with the record of how its connection
//! ended.
//!
//! * **Storage**: `StackResources<SOCKETS>` holds `SOCKETS` places ([`TcpSlot`]), handed to
//!   the stack once; a [`TcpSocket`](crate::tcp::TcpSocket) or a listener's socket addresses
//!   its place by a [`TcpHandle`] (the index). Places never move and the table never
//!   allocates; a connection's data is in pool frames its [`Tcb`]'s queues hold (sized by its
//!   [`TcpBuffers`](crate::tcp::TcpBuffers)), returned to the pool when it is dropped. TCP connections and smoltcp's sockets (UDP,
//!   ICMP, raw, DNS, DHCP) share the one count of `SOCKETS` slots (`State::socket_count`), so
//!   a stack holds at most `SOCKETS` sockets of all kinds together.
//! * **Budgets**: each connection reserves the pool slots its [`TcpBuffers`](crate::tcp::TcpBuffers)
//!   budget may hold (receive and send frames) when it is placed; the table keeps the sum
//!   ([`TcpTable::reserved`]), which the stack keeps within its TCP share of the pool
//!   (`State::add_tcb`), and gives a place's reservation back when the place is emptied.
//! * **Lookup** ([`TcpTable::find`]): an index of the places by the keyed hash of their
//!   connection's four-tuple ([`DEMUX_BUCKETS`] buckets, each a chain of places linked
//!   through the places themselves), plus a chain of the listening places. A segment's
//!   connection is in its bucket's chain (tried after the place that took the previous
//!   segment, which a bulk transfer hits at once); when none there takes it, a listening place
//!   may. A connection always wins over a listener. So a segment costs its bucket's chain, not
//!   a walk over every connection, whatever it is (a SYN for a listener, a segment for no
//!   connection at all). A connection's four-tuple and state change only while the table
//!   hands it out mutably, so every such access puts the place on a list that the next lookup
//!   re-files first (`reindex`); debug builds check every lookup against a walk over all places.
//! * **Close causes** ([`TcpMeta`]): a connection that ended other than by an orderly
//!   exchange of FINs reports why. `abort()` records [`CloseCause::Aborted`]; a connection with
//!   a timeout set (*watched*) that egress's `dispatch` closes records [`CloseCause::TimedOut`]
//!   (a timeout fires only there), and so does one that `dispatch` gave up on (`Tcb::gave_up`:
//!   handshake, retransmission or probe limits); anything else that closes an open connection is the peer's
//!   reset.
//! * **Segments the application holds** ([`SegmentRelease`]): a `TcpSegment` may be dropped on
//!   any thread or in an interrupt handler, where the stack's state cannot be reached. Its drop
//!   counts itself in its place's [`SegmentRelease`] (lock-free, checked against the place's
//!   generation) and raises the stack's [`SegmentReleases`] flag, which wakes egress; the
//!   stack's own context folds the counts into the connections' receive budgets
//!   ([`TcpTable::fold_releases`]) when it next runs.
//! * **Kept deadlines** ([`TcpTable::poll_at`], [`TcpTable::keep`]): each place keeps the
//!   last [`Tcb::poll_at`] answer egress got from its connection until something changes the
//!   connection: every access that hands the connection out mutably forgets it. Egress keeps
//!   no answer that could change without that: while data waits for the device to give a
//!   frame back (the device does so in another context) or the writer waits for a pool slot.
//!   So ingress's deadline check and egress's walk ask only the connections something happened
//!   to; debug builds check every kept answer against a fresh one. Beyond a few connections
//!   they do not even visit the others: the places without a kept answer are on a list of
//!   their own, and the table knows the earliest kept deadline, so egress walks every place
//!   only when a kept deadline is due.
//! * **Orphans**: a dropped socket whose connection is still closing, or was aborted and has
//!   its RST still to send, stays in its place until the close completes (the RST sent) or its
//!   deadline passes (`State::reap_orphans`); a dropped connection
//!   in TIME-WAIT gives its place up to a new socket when the stack has no free slot
//!   (`State::free_orphan_slot`). The orphans are listed oldest first (every one gets the same
//!   grace period, so that is deadline order too), and those handed out mutably since the last
//!   reaping on a list of their own: reaping looks at those and at the expired ones, and an
//!   eviction takes the first closed or TIME-WAIT orphan, without a walk over every place.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use core::task::Waker;

use smoltcp::time::Instant;
use smoltcp::wire::{IpAddress, IpRepr, TcpRepr};
use zcnet_buffer::WakerCell;

use crate::keys::{Prf, Use};
use crate::transport::tcp::tcb::context::{ChallengeAcks, LocalAddrs, PollAt, TcpContext, TcpKeys};
use crate::transport::tcp::tcb::socket::Tcb;
use crate::transport::tcp::tcb::state::State;

/// log2 of [`DEMUX_BUCKETS`].
const DEMUX_BITS: u32 = 9;

/// Buckets of the lookup's direct-mapped cache of places (see the module docs): 1 KiB.
pub(crate) const DEMUX_BUCKETS: usize = 1 << DEMUX_BITS;

/// The lookup index's bucket of a [`TcpTable::tuple_hash`]: its top [`DEMUX_BITS`].
fn bucket_of(hash: u64) -> usize {
    (hash >> (64 - DEMUX_BITS)) as usize
}

/// Why a TCP connection closed other than by an orderly exchange of FINs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CloseCause {
    /// `abort()` on this side.
    Aborted,
    /// No answer from the peer within the socket's timeout.
    TimedOut,
    /// The stack was shut down.
    ShutDown,
}

/// What the stack remembers about a connection besides its [`Tcb`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct TcpMeta {
    /// The socket has a timeout set (see the module docs).
    watched: bool,
    /// Set once the cause is known; cleared when the place is reused.
    cause: Option<CloseCause>,
    /// The connection was established at some point (so a close nobody explains is a reset).
    connected: bool,
    /// This side closed its write half (so failing writes are the caller's mistake).
    write_shut: bool,
    /// The owner dropped the socket while its connection was still closing: the stack removes
    /// it once closed, or at this deadline.
    orphan: Option<Instant>,
}

impl TcpMeta {
    /// The record of a fresh place.
    pub(crate) const EMPTY: TcpMeta = TcpMeta {
        watched: false,
        cause: None,
        connected: false,
        write_shut: false,
        orphan: None,
    };

    /// Why the connection closed, if known.
    pub(crate) fn cause(&self) -> Option<CloseCause> {
        self.cause
    }

    /// Records a cause (the first one wins).
    pub(crate) fn set_cause(&mut self, cause: CloseCause) {
        self.cause.get_or_insert(cause);
    }

    /// Whether the connection was ever established.
    pub(crate) fn connected(&self) -> bool {
        self.connected
    }

    /// Notes that the connection was established.
    pub(crate) fn set_connected(&mut self) {
        self.connected = true;
    }

    /// Whether this side shut its write half.
    pub(crate) fn write_shut(&self) -> bool {
        self.write_shut
    }

    /// Notes that this side shut its write half.
    pub(crate) fn set_write_shut(&mut self) {
        self.write_shut = true;
    }

    /// Whether the owner dropped the socket (the connection is an orphan).
    pub(crate) fn orphaned(&self) -> bool {
        self.orphan.is_some()
    }

    /// Watch (`true`) the connection for a timeout, or stop watching it.
    pub(crate) fn set_watched(&mut self, on: bool) {
        self.watched = on;
    }

    /// A `dispatch` closed the open connection: it timed out, if it was watched (only a
    /// timeout closes a connection there). Returns whether it recorded a timeout.
    pub(crate) fn record_timeout(&mut self) -> bool {
        if self.watched {
            self.set_cause(CloseCause::TimedOut);
        }
        self.watched
    }
}

/// A place's count of received segments (`TcpSegment`s) the application let go of since the
/// stack last looked, for the connection of one generation: one word, the generation in the
/// high 32 bits and the count in the low 32, so that a segment of an earlier connection in the
/// place never counts for the current one. Written from any thread or interrupt handler;
/// lives outside the table's `&mut` places (in `StackResources`), reached by shared
/// references only.
#[derive(Debug)]
pub(crate) struct SegmentRelease {
    word: AtomicU64,
}

impl SegmentRelease {
    /// No count, generation 0.
    pub(crate) const fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
        }
    }

    /// A connection of `generation` takes the place: no count.
    fn reset(&self, generation: u32) {
        self.word.store(u64::from(generation) << 32, Release);
    }

    /// A segment of the connection of `generation` was let go of: counted if that connection
    /// still holds the place (`true`). Lock-free (one compare-exchange), for any context.
    pub(crate) fn release(&self, generation: u32) -> bool {
        let mut cur = self.word.load(Relaxed);
        loop {
            if (cur >> 32) as u32 != generation || cur as u32 == u32::MAX {
                return false;
            }
            match self
                .word
                .compare_exchange_weak(cur, cur + 1, AcqRel, Relaxed)
            {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Takes the count for the connection of `generation` (0 if another generation's).
    fn take(&self, generation: u32) -> u32 {
        let mut cur = self.word.load(Acquire);
        loop {
            if (cur >> 32) as u32 != generation || cur as u32 == 0 {
                return 0;
            }
            let next = u64::from(generation) << 32;
            match self.word.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) => return cur as u32,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// The stack-wide side of [`SegmentRelease`]: a flag that some place has a count, and
/// egress's waker, woken when the flag is raised. Lives in `StackResources`.
#[derive(Debug)]
pub(crate) struct SegmentReleases {
    pending: AtomicBool,
    egress: WakerCell,
}

impl SegmentReleases {
    /// Nothing pending, no waker.
    pub(crate) const fn new() -> Self {
        Self {
            pending: AtomicBool::new(false),
            egress: WakerCell::new(),
        }
    }

    /// A segment was counted ([`SegmentRelease::release`]): raises the flag, waking egress
    /// when it was down. Lock-free, for any context.
    pub(crate) fn note(&self) {
        if !self.pending.swap(true, AcqRel) {
            self.egress.wake();
        }
    }

    /// Egress's `waker` waits for the next [`note`](Self::note).
    pub(crate) fn register(&self, waker: &Waker) {
        self.egress.register(waker);
    }

    /// Whether counts are pending; lowers the flag. `waker` (egress's) is registered first,
    /// so a segment counted after the flag came down wakes it.
    pub(crate) fn take_pending(&self, waker: &Waker) -> bool {
        if !self.pending.load(Acquire) {
            return false;
        }
        self.egress.register(waker);
        self.pending.swap(false, AcqRel)
    }
}

/// One place of the table: a connection (or none) and its record.
#[derive(Debug)]
pub(crate) struct TcpSlot {
    tcb: Option<Tcb<'static>>,
    meta: TcpMeta,
    /// Bumped each time a connection takes the place: a `TcpSegment` the application holds
    /// names its connection by place and generation, so that dropping it after its socket is
    /// gone cannot touch a later connection in the same place.
    generation: u32,
    /// Pool slots the connection's budget reserves (its receive and send frame budgets),
    /// counted in [`TcpTable::reserved`] while the place is in use.
    slots: usize,
    /// The connection's last `poll_at` answer, while nothing changed it (see the module docs);
    /// `None`: ask it. Cleared by every access that hands the connection out mutably.
    kept: Option<PollAt>,
    /// The next and previous places in use (the table's list of used places, see
    /// [`TcpTable::first_used`]); [`NO_PLACE`] at the ends and while the place is free.
    next_used: u32,
    prev_used: u32,
    /// The lookup index chain the place is linked into (see [`Chain`]), and its successor
    /// there ([`NO_PLACE`]: the end).
    chain: Chain,
    chain_next: u32,
    /// The keyed hash of its four-tuple when filed in a bucket ([`TcpTable::tuple_hash`]): a
    /// walk along a chain compares it, next to `chain_next`, before it reads the connection.
    tuple_hash: u64,
    /// The connection was handed out mutably since the index last looked at it, so its chain
    /// may be stale (its four-tuple or state may have changed): it is on the table's list of
    /// such places, linked through `stale_next`.
    stale: bool,
    stale_next: u32,
    /// The connection's [`Tcb::index_epoch`] when the place was last filed in its chain
    /// (`None`: never, since the connection was placed).
    filed_epoch: Option<u32>,
    /// The place is on the table's list of places without a kept answer (see
    /// [`TcpTable::unkept_first`]), linked through `unkept_next`.
    unkept: bool,
    unkept_next: u32,
    /// An orphan's neighbours in the table's list of orphans, oldest first ([`NO_PLACE`]: an
    /// end, or not an orphan).
    orphan_prev: u32,
    orphan_next: u32,
    /// The place is on the table's list of orphans handed out mutably since the last reaping
    /// (one of them may have closed), linked through `touched_next`.
    touched: bool,
    touched_next: u32,
    /// The next free place on the table's stack of free places ([`NO_PLACE`]: the last, or
    /// the place is in use).
    next_free: u32,
}

/// Which chain of the lookup index a place is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chain {
    /// None: the place is free, or its connection has no four-tuple and does not listen.
    None,
    /// The bucket its connection's four-tuple hashes to.
    Bucket(u16),
    /// The listening places.
    Listen,
}

/// No place: the end of the list of used places.
const NO_PLACE: u32 = u32::MAX;

impl TcpSlot {
    /// An empty place (for `static` initialisers).
    pub(crate) const EMPTY: TcpSlot = TcpSlot {
        tcb: None,
        meta: TcpMeta::EMPTY,
        generation: 0,
        slots: 0,
        kept: None,
        next_used: NO_PLACE,
        prev_used: NO_PLACE,
        chain: Chain::None,
        chain_next: NO_PLACE,
        tuple_hash: 0,
        stale: false,
        stale_next: NO_PLACE,
        filed_epoch: None,
        unkept: false,
        unkept_next: NO_PLACE,
        orphan_prev: NO_PLACE,
        orphan_next: NO_PLACE,
        touched: false,
        touched_next: NO_PLACE,
        next_free: NO_PLACE,
    };
}

/// A connection in use, borrowed from the [`TcpTable`] with the table's shared parts.
pub(crate) struct Entry<'a> {
    /// The connection.
    pub(crate) tcb: &'a mut Tcb<'static>,
    /// Its record.
    pub(crate) meta: &'a mut TcpMeta,
    /// The stack's keys (initial sequence numbers, timestamp offsets).
    pub(crate) keys: &'a TcpKeys,
    /// The stack's challenge ACK budget, for `process` (RFC 5961 §7).
    pub(crate) challenge_acks: &'a mut ChallengeAcks,
}

/// A connection's place in the [`TcpTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TcpHandle(usize);

impl TcpHandle {
    /// The handle of place `i` (for unit tests of what stores handles).
    #[cfg(test)]
    pub(crate) fn for_test(i: usize) -> TcpHandle {
        TcpHandle(i)
    }
}

/// The connections (part of the stack's locked state).
pub(crate) struct TcpTable {
    slots: &'static mut [TcpSlot],
    /// One per place (same index): segments of the place's connection let go of elsewhere.
    releases: &'static [SegmentRelease],
    /// The flag and waker of the stack's segment releases.
    pub(crate) release_signal: &'static SegmentReleases,
    /// Places in use.
    used: usize,
    /// The first of the free places, stacked through `next_free` ([`NO_PLACE`]: none free).
    free_head: u32,
    /// The first place of the list of used places (most recently taken first), [`NO_PLACE`]
    /// when none is: the walks of egress, ingress and lookup visit only these.
    used_head: u32,
    /// Pool slots reserved by the connections in use: the sum of their places' `slots`.
    reserved: usize,
    /// Places holding an orphan: while zero, orphan scans are skipped.
    orphans: usize,
    /// The oldest and the newest orphan ([`NO_PLACE`]: none). Every orphan gets the same grace
    /// period, so the list is in deadline order too.
    orphan_head: u32,
    orphan_tail: u32,
    /// The first orphan handed out mutably (or adopted) since the last reaping: its connection
    /// may have closed ([`NO_PLACE`]: none), linked through `touched_next`.
    touched_head: u32,
    /// The place that took the last segment, tried first by [`find`](Self::find).
    last_hit: usize,
    /// The lookup index: per bucket of the keyed four-tuple hash, the first place of its chain
    /// ([`NO_PLACE`]: empty). Every connection with a four-tuple is in the chain of its
    /// tuple's bucket once [`reindex`](Self::reindex) has run (see the module docs).
    demux: [u32; DEMUX_BUCKETS],
    /// The first listening place ([`NO_PLACE`]: none), chained like a bucket.
    listeners: u32,
    /// The first place whose chain may be stale ([`NO_PLACE`]: none), linked through
    /// `stale_next`.
    stale_head: u32,
    /// The first place of the list of places whose connection has no kept `poll_at` answer
    /// ([`NO_PLACE`]: none), linked through `unkept_next`. Every place in use without a kept
    /// answer is on it; a place whose answer was kept since may be too, until
    /// [`prune_unkept`](Self::prune_unkept) takes it off.
    unkept_head: u32,
    /// The earliest deadline among the kept answers (`None`: no kept answer has one): until
    /// then egress visits only the places without a kept answer. Exact unless
    /// `kept_earliest_stale`.
    kept_earliest: Option<Instant>,
    /// The kept answer that had the earliest deadline was forgotten: `kept_earliest` may be
    /// early until [`refresh_kept_earliest`](Self::refresh_kept_earliest) recomputes it.
    kept_earliest_stale: bool,
    /// The key of the four-tuple hash (derived from the stack's secret: a peer that cannot
    /// compute the buckets cannot pile its connections into one).
    demux_key: u64,
    /// Initial sequence numbers and timestamp offsets, keyed with the stack's secret.
    pub(crate) keys: TcpKeys,
    /// The challenge ACKs all connections together may still send this second.
    challenge_acks: ChallengeAcks,
}

impl TcpTable {
    /// A table over `slots` (all empty).
    pub(crate) fn new(
        slots: &'static mut [TcpSlot],
        releases: &'static [SegmentRelease],
        release_signal: &'static SegmentReleases,
        prf: &Prf,
    ) -> Self {
        debug_assert_eq!(slots.len(), releases.len());
        // Every place starts free, the first on top.
        for (i, slot) in slots.iter_mut().enumerate() {
            slot.next_free = u32::try_from(i + 1).unwrap_or(NO_PLACE);
        }
        if let Some(last) = slots.last_mut() {
            last.next_free = NO_PLACE;
        }
        let free_head = if slots.is_empty() { NO_PLACE } else { 0 };
        // Place numbers fit the list's `u32` links (`NO_PLACE` excluded).
        debug_assert!(slots.len() < NO_PLACE as usize);
        Self {
            used_head: NO_PLACE,
            slots,
            releases,
            release_signal,
            used: 0,
            free_head,
            reserved: 0,
            orphans: 0,
            orphan_head: NO_PLACE,
            orphan_tail: NO_PLACE,
            touched_head: NO_PLACE,
            last_hit: 0,
            demux: [NO_PLACE; DEMUX_BUCKETS],
            listeners: NO_PLACE,
            stale_head: NO_PLACE,
            unkept_head: NO_PLACE,
            kept_earliest: None,
            kept_earliest_stale: false,
            demux_key: prf.of(Use::Demux, &[]),
            keys: TcpKeys::new(prf.clone()),
            challenge_acks: ChallengeAcks::new(prf),
        }
    }

    /// Places the connection `make` builds, whose budget reserves `slots` pool slots, in a free
    /// place (built there, not moved in); `None` when every place is taken (the stack's slot
    /// count keeps that from happening).
    pub(crate) fn insert_with(
        &mut self,
        slots: usize,
        make: impl FnOnce() -> Tcb<'static>,
    ) -> Option<TcpHandle> {
        let i = self.free_head as usize;
        let slot = self.slots.get_mut(i)?;
        debug_assert!(slot.tcb.is_none(), "a place on the free stack is in use");
        self.free_head = core::mem::replace(&mut slot.next_free, NO_PLACE);
        slot.tcb = Some(make());
        slot.meta = TcpMeta::EMPTY;
        slot.generation = slot.generation.wrapping_add(1);
        self.releases[i].reset(slot.generation);
        slot.slots = slots;
        slot.kept = None;
        slot.prev_used = NO_PLACE;
        slot.next_used = self.used_head;
        slot.filed_epoch = None;
        self.mark_stale(i);
        self.mark_unkept(i);
        if let Some(head) = self.slots.get_mut(self.used_head as usize) {
            head.prev_used = i as u32;
        }
        self.used_head = i as u32;
        self.used += 1;
        debug_assert_eq!(
            self.used_places().count(),
            self.used,
            "the list of used places"
        );
        self.reserved += slots;
        Some(TcpHandle(i))
    }

    /// Shutdown (`stack/shutdown.rs`): removes orphans, closes every other connection (its socket
    /// woken, its frames back in the pool, [`CloseCause::ShutDown`] recorded). Returns how many
    /// places were emptied (their socket slots are free).
    pub(crate) fn shut_down(&mut self) -> usize {
        let mut removed = 0;
        for i in 0..self.slots.len() {
            let slot = &mut self.slots[i];
            let Some(tcb) = slot.tcb.as_mut() else {
                continue;
            };
            if slot.meta.orphan.is_some() {
                self.remove(TcpHandle(i));
                removed += 1;
                continue;
            }
            tcb.abort();
            tcb.reset();
            slot.kept = None;
            slot.meta.set_cause(CloseCause::ShutDown);
            self.mark_stale(i);
            self.mark_unkept(i);
        }
        removed
    }

    /// Pool slots the connections in use reserve together.
    pub(crate) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Empties the place of `h` (its connection and buffers are dropped).
    pub(crate) fn remove(&mut self, h: TcpHandle) {
        if h.0 >= self.slots.len() {
            return;
        }
        self.unlink(h.0);
        let slot = &mut self.slots[h.0];
        // Dropped where it lies: a TCB is several KiB, not worth a move.
        let was_used = slot.tcb.is_some();
        slot.tcb = None;
        if was_used {
            self.used -= 1;
            self.reserved -= slot.slots;
            slot.next_free = self.free_head;
            self.free_head = h.0 as u32;
        }
        let (prev, next) = (slot.prev_used, slot.next_used);
        slot.prev_used = NO_PLACE;
        slot.next_used = NO_PLACE;
        slot.slots = 0;
        if let Some(PollAt::Time(t)) = slot.kept.take() {
            self.kept_earliest_stale |= self.kept_earliest.is_some_and(|e| t <= e);
        }
        let orphan = slot.meta.orphan.is_some();
        slot.meta = TcpMeta::EMPTY;
        if orphan {
            self.orphans -= 1;
            self.unlink_orphan(h.0);
        }
        if was_used {
            // Out of the list of used places.
            match self.slots.get_mut(prev as usize) {
                Some(p) => p.next_used = next,
                None => self.used_head = next,
            }
            if let Some(n) = self.slots.get_mut(next as usize) {
                n.prev_used = prev;
            }
            debug_assert_eq!(
                self.used_places().count(),
                self.used,
                "the list of used places"
            );
        }
    }

    /// The connection and record of `h`. Panics if the place is empty: a handle lives only
    /// as long as the socket that owns the place (a bug otherwise, never the network's doing).
    #[inline]
    pub(crate) fn get(&mut self, h: TcpHandle) -> (&mut Tcb<'static>, &mut TcpMeta) {
        self.touch(h.0);
        let slot = &mut self.slots[h.0];
        match &mut slot.tcb {
            Some(t) => (t, &mut slot.meta),
            None => panic!("TCP handle {} has no connection", h.0),
        }
    }

    /// The generation of the place of `h` (see [`TcpSlot`]): names the connection in it now.
    pub(crate) fn generation(&self, h: TcpHandle) -> u32 {
        self.slots.get(h.0).map_or(0, |s| s.generation)
    }

    /// The release counter of `h`'s place, for a `TcpSegment` of its connection.
    pub(crate) fn release_of(&self, h: TcpHandle) -> &'static SegmentRelease {
        let releases: &'static [SegmentRelease] = self.releases;
        &releases[h.0]
    }

    /// Gives every connection the segments the application let go of since the last call
    /// (see [`SegmentRelease`]) back to its receive budget. Returns whether one of them can
    /// now announce a window worth a window update. Only when
    /// [`SegmentReleases::take_pending`] said counts are pending.
    pub(crate) fn fold_releases(&mut self) -> bool {
        let mut update = false;
        for i in 0..self.slots.len() {
            let slot = &mut self.slots[i];
            let Some(tcb) = slot.tcb.as_mut() else {
                continue;
            };
            let n = self.releases[i].take(slot.generation);
            if n != 0 {
                slot.kept = None;
                update |= tcb.release_segments(n);
                self.mark_unkept(i);
            }
        }
        update
    }

    /// Number of places (used or not).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The first place in use (`None`: none is), for walks over the connections with
    /// [`next_used`](Self::next_used); the order is most recently taken first.
    pub(crate) fn first_used(&self) -> Option<usize> {
        (self.used_head != NO_PLACE).then_some(self.used_head as usize)
    }

    /// The place in use after `i` (a place in use) in the walk, if any. Fetch it before
    /// anything removes `i`.
    pub(crate) fn next_used(&self, i: usize) -> Option<usize> {
        let next = self.slots.get(i)?.next_used;
        (next != NO_PLACE).then_some(next as usize)
    }

    /// The places in use, most recently taken first.
    fn used_places(&self) -> impl Iterator<Item = usize> + '_ {
        core::iter::successors(self.first_used(), |&i| self.next_used(i))
    }

    /// The connection at place `i`, if the place is in use, with what a call into it needs.
    pub(crate) fn at(&mut self, i: usize) -> Option<Entry<'_>> {
        self.slots.get(i)?.tcb.as_ref()?;
        self.touch(i);
        let slot = &mut self.slots[i];
        let tcb = slot.tcb.as_mut()?;
        Some(Entry {
            tcb,
            meta: &mut slot.meta,
            keys: &self.keys,
            challenge_acks: &mut self.challenge_acks,
        })
    }

    /// The connection of `h` with what a call into it needs (`None`: an empty place).
    pub(crate) fn at_handle(&mut self, h: TcpHandle) -> Option<Entry<'_>> {
        self.at(h.0)
    }

    /// The `poll_at` of the connection at place `i` (`None`: an empty place): the kept answer
    /// when there is one, else asked now. Debug builds check a kept answer against a fresh one.
    pub(crate) fn poll_at(
        &mut self,
        i: usize,
        now: Instant,
        ip_mtu: usize,
        iface: &dyn LocalAddrs,
    ) -> Option<PollAt> {
        let slot = self.slots.get(i)?;
        let tcb = slot.tcb.as_ref()?;
        let mut cx = TcpContext::new(now, ip_mtu, iface, &self.keys);
        if let Some(at) = slot.kept {
            debug_assert_eq!(
                at,
                tcb.poll_at(&mut cx),
                "a kept poll_at went stale: something changed the connection behind the table"
            );
            return Some(at);
        }
        Some(tcb.poll_at(&mut cx))
    }

    /// The kept `poll_at` answer of place `i`, if any (checked as by [`poll_at`](Self::poll_at)
    /// in debug builds).
    pub(crate) fn kept(
        &mut self,
        i: usize,
        now: Instant,
        ip_mtu: usize,
        iface: &dyn LocalAddrs,
    ) -> Option<PollAt> {
        self.slots.get(i)?.kept?;
        self.poll_at(i, now, ip_mtu, iface)
    }

    /// Keeps `at`, the `poll_at` egress just asked of the connection at place `i`. Only for an
    /// answer that cannot change without the connection being changed: egress keeps none
    /// while data waits for the device to give a frame back or the writer waits for a pool
    /// slot (see the module docs).
    pub(crate) fn keep(&mut self, i: usize, at: PollAt) {
        if let Some(slot) = self.slots.get_mut(i) {
            slot.kept = Some(at);
            if let PollAt::Time(t) = at {
                self.note_kept(t);
            }
        }
    }

    /// Whether a kept deadline is due at `now`: then egress walks every place in use, else
    /// only the places without a kept answer ([`unkept_first`](Self::unkept_first)). Call
    /// [`refresh_kept_earliest`](Self::refresh_kept_earliest) first.
    pub(crate) fn kept_due(&self, now: Instant) -> bool {
        self.kept_earliest.is_some_and(|t| t <= now)
    }

    /// Recomputes the earliest kept deadline if the one that was earliest was forgotten (a
    /// walk over the places in use; otherwise nothing).
    pub(crate) fn refresh_kept_earliest(&mut self) {
        if !self.kept_earliest_stale {
            return;
        }
        self.kept_earliest_stale = false;
        self.kept_earliest = None;
        let mut cursor = self.first_used();
        while let Some(i) = cursor {
            cursor = self.next_used(i);
            if let Some(PollAt::Time(t)) = self.slots[i].kept {
                self.note_kept(t);
            }
        }
    }

    /// Forgets the earliest kept deadline before an egress walk over every place, which
    /// notes each kept deadline it leaves ([`note_kept`](Self::note_kept)) and keeps new
    /// answers ([`keep`](Self::keep)).
    pub(crate) fn forget_kept_earliest(&mut self) {
        self.kept_earliest = None;
        self.kept_earliest_stale = false;
    }

    /// A kept deadline `t` that stays.
    pub(crate) fn note_kept(&mut self, t: Instant) {
        self.kept_earliest = Some(self.kept_earliest.map_or(t, |e| e.min(t)));
    }

    /// The earliest kept deadline (`None`: no kept answer has one); exact after
    /// [`refresh_kept_earliest`](Self::refresh_kept_earliest).
    pub(crate) fn kept_earliest(&self) -> Option<Instant> {
        self.kept_earliest
    }

    /// Puts place `i` on the list of places without a kept answer (its answer was just
    /// forgotten).
    fn mark_unkept(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if let Some(PollAt::Time(t)) = slot.kept.take() {
            // The earliest kept deadline may be this one, now gone.
            self.kept_earliest_stale |= self.kept_earliest.is_some_and(|e| t <= e);
        }
        if !slot.unkept {
            slot.unkept = true;
            slot.unkept_next = self.unkept_head;
            self.unkept_head = i as u32;
        }
    }

    /// The first place on the list of places without a kept answer, for egress's and
    /// ingress's walks over the connections something happened to; the list holds every such
    /// place in use, and may hold others (free places, places kept since).
    pub(crate) fn unkept_first(&self) -> Option<usize> {
        (self.unkept_head != NO_PLACE).then_some(self.unkept_head as usize)
    }

    /// The place after `i` on that list. Fetch it before anything changes `i`.
    pub(crate) fn unkept_next(&self, i: usize) -> Option<usize> {
        let next = self.slots.get(i)?.unkept_next;
        (next != NO_PLACE).then_some(next as usize)
    }

    /// Takes the places that have a kept answer again, or no connection, off that list.
    pub(crate) fn prune_unkept(&mut self) {
        let mut prev = NO_PLACE;
        let mut at = self.unkept_head;
        while let Some(slot) = self.slots.get_mut(at as usize) {
            let next = slot.unkept_next;
            if slot.kept.is_some() || slot.tcb.is_none() {
                slot.unkept = false;
                slot.unkept_next = NO_PLACE;
                match self.slots.get_mut(prev as usize) {
                    Some(p) => p.unkept_next = next,
                    None => self.unkept_head = next,
                }
            } else {
                prev = at;
            }
            at = next;
        }
    }

    /// Places in use.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Whether any place is in use.
    pub(crate) fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// The connections in use, with their handles.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (TcpHandle, &Tcb<'static>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((TcpHandle(i), s.tcb.as_ref()?)))
    }

    /// The place whose connection takes the segment `repr` in `ip` (see the module docs).
    pub(crate) fn find(&mut self, ip: &IpRepr, repr: &TcpRepr) -> Option<usize> {
        self.reindex();
        let found = self.lookup(ip, repr);
        debug_assert_eq!(
            found.map(|i| self.slots[i].tcb.as_ref().map(Tcb::state) == Some(State::Listen)),
            self.find_by_walk(ip, repr)
                .map(|i| self.slots[i].tcb.as_ref().map(Tcb::state) == Some(State::Listen)),
            "the lookup index and a walk over every place disagree"
        );
        if let Some(i) = found {
            self.last_hit = i;
        }
        found
    }

    /// [`find`](Self::find) over the index, once it is fresh.
    fn lookup(&self, ip: &IpRepr, repr: &TcpRepr) -> Option<usize> {
        // One connection: it is the last hit, no hash needed to find it.
        if self.used == 1 && self.takes(self.last_hit, ip, repr) {
            return Some(self.last_hit);
        }
        let hash = self.tuple_hash(ip.src_addr(), ip.dst_addr(), repr.src_port, repr.dst_port);
        // The hashes first: a connection's own fields are read only where the hash matches.
        let last = self.slots.get(self.last_hit);
        if last.is_some_and(|s| s.tuple_hash == hash) && self.takes(self.last_hit, ip, repr) {
            return Some(self.last_hit);
        }
        let mut at = self.demux[bucket_of(hash)];
        while let Some(slot) = self.slots.get(at as usize) {
            if slot.tuple_hash == hash && self.takes(at as usize, ip, repr) {
                return Some(at as usize);
            }
            at = slot.chain_next;
        }
        let mut at = self.listeners;
        while let Some(slot) = self.slots.get(at as usize) {
            if slot.tcb.as_ref().is_some_and(|t| t.accepts(ip, repr)) {
                return Some(at as usize);
            }
            at = slot.chain_next;
        }
        None
    }

    /// The lookup without the index: every place in use, connections before listeners. Debug
    /// builds compare it with the index on every segment.
    fn find_by_walk(&self, ip: &IpRepr, repr: &TcpRepr) -> Option<usize> {
        self.used_places()
            .find(|&i| self.takes(i, ip, repr))
            .or_else(|| {
                self.used_places().find(|&i| {
                    self.slots[i]
                        .tcb
                        .as_ref()
                        .is_some_and(|t| t.state() == State::Listen && t.accepts(ip, repr))
                })
            })
    }

    /// Whether the connection at place `i` (not listening) takes the segment.
    fn takes(&self, i: usize, ip: &IpRepr, repr: &TcpRepr) -> bool {
        self.slots
            .get(i)
            .and_then(|s| s.tcb.as_ref())
            .is_some_and(|t| t.state() != State::Listen && t.accepts(ip, repr))
    }

    /// The connection at place `i` (in use) is about to be handed out mutably: its kept answer
    /// goes, and the place joins the lists that watch for changes (the lookup index's stale
    /// places, the places without a kept answer, and, for an orphan, the orphans that may have
    /// closed), each at most once.
    fn touch(&mut self, i: usize) {
        self.mark_stale(i);
        self.mark_unkept(i);
        if self.slots[i].meta.orphan.is_some() {
            self.touch_orphan(i);
        }
    }

    /// Puts place `i` on the list of places whose chain [`reindex`](Self::reindex) checks:
    /// its connection is about to be handed out mutably (or was placed or reset).
    fn mark_stale(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if !slot.stale {
            slot.stale = true;
            slot.stale_next = self.stale_head;
            self.stale_head = i as u32;
        }
    }

    /// Moves every place on the stale list to the chain its connection belongs in now: the
    /// bucket of its four-tuple, the listeners, or none.
    fn reindex(&mut self) {
        while let Some(slot) = self.slots.get_mut(self.stale_head as usize) {
            let i = self.stale_head as usize;
            self.stale_head = slot.stale_next;
            slot.stale = false;
            slot.stale_next = NO_PLACE;
            // Neither its four-tuple nor its state changed: its chain is right.
            let epoch = slot.tcb.as_ref().map(Tcb::index_epoch);
            if epoch.is_some() && epoch == slot.filed_epoch {
                continue;
            }
            let mut hash = 0;
            let want = match slot.tcb.as_ref() {
                None => Chain::None,
                Some(t) if t.state() == State::Listen => Chain::Listen,
                Some(t) => match (t.remote_endpoint(), t.local_endpoint()) {
                    (Some(r), Some(l)) => {
                        hash = self.tuple_hash(r.addr, l.addr, r.port, l.port);
                        // Buckets number fewer than 2^16 (`DEMUX_BITS`).
                        Chain::Bucket(bucket_of(hash) as u16)
                    }
                    _ => Chain::None,
                },
            };
            self.slots[i].tuple_hash = hash;
            if self.slots[i].chain != want {
                self.unlink(i);
                let head = match want {
                    Chain::None => None,
                    Chain::Bucket(b) => Some(&mut self.demux[usize::from(b)]),
                    Chain::Listen => Some(&mut self.listeners),
                };
                if let Some(head) = head {
                    let next = core::mem::replace(head, i as u32);
                    let slot = &mut self.slots[i];
                    slot.chain = want;
                    slot.chain_next = next;
                }
            }
            self.slots[i].filed_epoch = epoch;
        }
    }

    /// Takes place `i` out of its chain (chains are short: a walk from the head finds it).
    fn unlink(&mut self, i: usize) {
        let (chain, next) = (self.slots[i].chain, self.slots[i].chain_next);
        let head = match chain {
            Chain::None => return,
            Chain::Bucket(b) => &mut self.demux[usize::from(b)],
            Chain::Listen => &mut self.listeners,
        };
        if *head == i as u32 {
            *head = next;
        } else {
            let mut at = *head;
            while let Some(slot) = self.slots.get_mut(at as usize) {
                if slot.chain_next == i as u32 {
                    slot.chain_next = next;
                    break;
                }
                at = slot.chain_next;
            }
        }
        let slot = &mut self.slots[i];
        slot.chain = Chain::None;
        slot.chain_next = NO_PLACE;
        slot.filed_epoch = None;
    }

    /// The keyed hash of a four-tuple, as a received segment names it (multiply-shift: its
    /// top [`DEMUX_BITS`] are the lookup index's bucket, [`bucket_of`]). Every bit of both
    /// addresses and both ports reaches it.
    fn tuple_hash(&self, src: IpAddress, dst: IpAddress, src_port: u16, dst_port: u16) -> u64 {
        let fold = |a: IpAddress| -> u64 {
            match a {
                IpAddress::Ipv4(v4) => u64::from(u32::from_be_bytes(v4.octets())),
                IpAddress::Ipv6(v6) => {
                    let o = v6.octets();
                    let hi = u64::from_be_bytes([o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]]);
                    let lo =
                        u64::from_be_bytes([o[8], o[9], o[10], o[11], o[12], o[13], o[14], o[15]]);
                    hi ^ lo.rotate_left(32)
                }
            }
        };
        let ports = (u64::from(src_port) << 16) | u64::from(dst_port);
        (fold(src) ^ fold(dst).rotate_left(21) ^ ports.rotate_left(40))
            .wrapping_add(self.demux_key)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// Whether a connection uses local `port` (bound or listening).
    pub(crate) fn uses_port(&self, port: u16) -> bool {
        self.iter().any(|(_, t)| {
            t.local_endpoint().is_some_and(|e| e.port == port) || t.listen_endpoint().port == port
        })
    }

    /// Marks `h` an orphan, to be removed once closed or at `until` (the same grace period for
    /// every orphan: the list of orphans stays in deadline order).
    pub(crate) fn adopt(&mut self, h: TcpHandle, until: Instant) {
        let Some(slot) = self.slots.get_mut(h.0) else {
            return;
        };
        if slot.meta.orphan.replace(until).is_none() {
            self.orphans += 1;
            debug_assert!(
                self.slots
                    .get(self.orphan_tail as usize)
                    .and_then(|t| t.meta.orphan)
                    .is_none_or(|t| t <= until),
                "orphans adopted out of deadline order"
            );
            let slot = &mut self.slots[h.0];
            slot.orphan_prev = self.orphan_tail;
            slot.orphan_next = NO_PLACE;
            match self.slots.get_mut(self.orphan_tail as usize) {
                Some(t) => t.orphan_next = h.0 as u32,
                None => self.orphan_head = h.0 as u32,
            }
            self.orphan_tail = h.0 as u32;
        }
        self.touch_orphan(h.0);
    }

    /// Takes place `i`, an orphan, off the list of orphans.
    fn unlink_orphan(&mut self, i: usize) {
        let (prev, next) = (self.slots[i].orphan_prev, self.slots[i].orphan_next);
        match self.slots.get_mut(prev as usize) {
            Some(p) => p.orphan_next = next,
            None => self.orphan_head = next,
        }
        match self.slots.get_mut(next as usize) {
            Some(n) => n.orphan_prev = prev,
            None => self.orphan_tail = prev,
        }
        let slot = &mut self.slots[i];
        slot.orphan_prev = NO_PLACE;
        slot.orphan_next = NO_PLACE;
    }

    /// Puts orphan place `i` on the list of orphans that may have closed.
    fn touch_orphan(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if !slot.touched {
            slot.touched = true;
            slot.touched_next = self.touched_head;
            self.touched_head = i as u32;
        }
    }

    /// Whether reaping can find something at `now`: an orphan may have closed (one was changed
    /// or adopted since the last reaping) or the oldest one's deadline has come.
    pub(crate) fn orphans_due(&self, now: Instant) -> bool {
        self.touched_head != NO_PLACE || self.oldest_orphan_until().is_some_and(|t| t <= now)
    }

    /// The deadline of the oldest orphan, the earliest of all.
    fn oldest_orphan_until(&self) -> Option<Instant> {
        self.slots
            .get(self.orphan_head as usize)
            .and_then(|s| s.meta.orphan)
    }

    /// An orphan to remove now, if any: one whose connection closed, among those changed
    /// since the last call, else the oldest if its deadline has come. Each call looks at each
    /// changed orphan once, so reaping costs the orphans that changed and those that expired,
    /// not a walk over every place.
    pub(crate) fn next_reapable(&mut self, now: Instant) -> Option<TcpHandle> {
        while let Some(slot) = self.slots.get_mut(self.touched_head as usize) {
            let i = self.touched_head as usize;
            self.touched_head = slot.touched_next;
            slot.touched = false;
            slot.touched_next = NO_PLACE;
            // Closed, and no RST left to send (an abort's goes before the place is freed).
            let closed = slot.meta.orphan.is_some()
                && slot
                    .tcb
                    .as_ref()
                    .is_some_and(|t| t.state() == State::Closed && t.remote_endpoint().is_none());
            if closed {
                return Some(TcpHandle(i));
            }
        }
        self.oldest_orphan_until()
            .is_some_and(|t| now >= t)
            .then_some(TcpHandle(self.orphan_head as usize))
    }

    /// The orphan to evict for a new socket when every slot is taken: one whose connection
    /// closed, else the oldest in TIME-WAIT (see `State::free_orphan_slot`), with its state.
    /// Orphans still closing in another state are passed over.
    pub(crate) fn evictable_orphan(&self) -> Option<(TcpHandle, State)> {
        let mut at = self.touched_head;
        while let Some(slot) = self.slots.get(at as usize) {
            if slot.meta.orphan.is_some()
                && slot
                    .tcb
                    .as_ref()
                    .is_some_and(|t| t.state() == State::Closed)
            {
                return Some((TcpHandle(at as usize), State::Closed));
            }
            at = slot.touched_next;
        }
        let mut at = self.orphan_head;
        while let Some(slot) = self.slots.get(at as usize) {
            match slot.tcb.as_ref().map(Tcb::state) {
                Some(state @ (State::Closed | State::TimeWait)) => {
                    return Some((TcpHandle(at as usize), state))
                }
                _ => at = slot.orphan_next,
            }
        }
        None
    }

    /// Whether place `i` holds an orphan.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn is_orphan(&self, i: usize) -> bool {
        self.slots.get(i).is_some_and(|s| s.meta.orphan.is_some())
    }
}
