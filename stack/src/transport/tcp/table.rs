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
//!   a stack holds at most `SOCKETS` sockets of all kinds together, as before.
//! * **Budgets**: each connection reserves the pool slots its [`TcpBuffers`](crate::tcp::TcpBuffers)
//!   budget may hold (receive and send frames) when it is placed; the table keeps the sum
//!   ([`TcpTable::reserved`]), which the stack keeps within its TCP share of the pool
//!   (`State::add_tcb`), and gives a place's reservation back when the place is emptied.
//! * **Lookup** ([`TcpTable::find`]): the connection whose [`Tcb::accepts`] takes the segment,
//!   tried first at the place that took the previous segment (a bulk transfer finds its
//!   connection at once), then at the place the segment's four-tuple hashes to in a small
//!   direct-mapped cache of places ([`DEMUX_BUCKETS`] buckets, keyed with the stack's seed),
//!   else over every
//!   connection (not listening), which refills the bucket, else over the listening places. A
//!   connection always wins over a listener, whatever their places. The cache only ever
//!   saves the walk: a bucket's place is always checked with `accepts`, so a stale or
//!   colliding bucket costs a walk, never a wrong match.
//! * **Close causes** ([`TcpMeta`]): a connection that ended other than by an orderly
//!   exchange of FINs reports why. `abort()` records [`CloseCause::Aborted`]; a connection with
//!   a timeout set (*watched*) that egress's `dispatch` closes records [`CloseCause::TimedOut`]
//!   (a timeout fires only there); anything else that closes an open connection is the peer's
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
//!   to; debug builds check every kept answer against a fresh one.
//! * **Orphans**: a dropped socket whose connection is still closing stays in its place until
//!   the close completes or its deadline passes (`State::reap_orphans`); a dropped connection
//!   in TIME-WAIT gives its place up to a new socket when the stack has no free slot
//!   (`State::free_orphan_slot`).

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use core::task::Waker;

use smoltcp::time::Instant;
use smoltcp::wire::{IpAddress, IpRepr, TcpRepr};
use zcnet_buffer::WakerCell;

use crate::keys::{Prf, Use};
use crate::transport::tcp::tcb::context::{LocalAddrs, PollAt, TcpContext, TcpKeys};
use crate::transport::tcp::tcb::socket::Tcb;
use crate::transport::tcp::tcb::state::State;

/// log2 of [`DEMUX_BUCKETS`].
const DEMUX_BITS: u32 = 9;

/// Buckets of the lookup's direct-mapped cache of places (see the module docs): 1 KiB.
pub(crate) const DEMUX_BUCKETS: usize = 1 << DEMUX_BITS;

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

    /// Watch (`true`) the connection for a timeout, or stop watching it.
    pub(crate) fn set_watched(&mut self, on: bool) {
        self.watched = on;
    }

    /// A `dispatch` closed the open connection: it timed out, if it was watched (only a
    /// timeout closes a connection there).
    pub(crate) fn record_timeout(&mut self) {
        if self.watched {
            self.set_cause(CloseCause::TimedOut);
        }
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
}

/// A connection's place in the [`TcpTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TcpHandle(usize);

/// The connections (part of the stack's locked state).
pub(crate) struct TcpTable {
    slots: &'static mut [TcpSlot],
    /// One per place (same index): segments of the place's connection let go of elsewhere.
    releases: &'static [SegmentRelease],
    /// The flag and waker of the stack's segment releases.
    pub(crate) release_signal: &'static SegmentReleases,
    /// Places in use.
    used: usize,
    /// The first place of the list of used places (most recently taken first), [`NO_PLACE`]
    /// when none is: the walks of egress, ingress and lookup visit only these.
    used_head: u32,
    /// Pool slots reserved by the connections in use: the sum of their places' `slots`.
    reserved: usize,
    /// Places holding an orphan: while zero, orphan scans are skipped.
    orphans: usize,
    /// An orphan was handed out mutably since the last reaping scan (its connection may have
    /// closed), or one was adopted: the next [`orphans_due`](Self::orphans_due) says yes.
    orphan_touched: bool,
    /// The earliest deadline of the orphans the last reaping scan left (`None`: none).
    orphan_due: Option<Instant>,
    /// The place that took the last segment, tried first by [`find`](Self::find).
    last_hit: usize,
    /// Place + 1 of the connection a four-tuple hashed to last (0: none), tried next by
    /// [`find`](Self::find).
    demux: [u16; DEMUX_BUCKETS],
    /// The key of the four-tuple hash (derived from the stack's secret: a peer that cannot
    /// compute the buckets cannot pile its connections into one).
    demux_key: u64,
    /// Initial sequence numbers and timestamp offsets, keyed with the stack's secret.
    pub(crate) keys: TcpKeys,
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
        // Place numbers fit the list's `u32` links (`NO_PLACE` excluded).
        debug_assert!(slots.len() < NO_PLACE as usize);
        Self {
            used_head: NO_PLACE,
            slots,
            releases,
            release_signal,
            used: 0,
            reserved: 0,
            orphans: 0,
            orphan_touched: false,
            orphan_due: None,
            last_hit: 0,
            demux: [0; DEMUX_BUCKETS],
            demux_key: prf.of(Use::Demux, &[]),
            keys: TcpKeys::new(prf.clone()),
        }
    }

    /// Places a connection whose budget reserves `slots` pool slots in a free place; `None`
    /// when every place is taken (the stack's slot count keeps that from happening).
    pub(crate) fn insert(&mut self, tcb: Tcb<'static>, slots: usize) -> Option<TcpHandle> {
        let i = self.slots.iter().position(|s| s.tcb.is_none())?;
        let slot = &mut self.slots[i];
        slot.tcb = Some(tcb);
        slot.meta = TcpMeta::EMPTY;
        slot.generation = slot.generation.wrapping_add(1);
        self.releases[i].reset(slot.generation);
        slot.slots = slots;
        slot.kept = None;
        slot.prev_used = NO_PLACE;
        slot.next_used = self.used_head;
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
        }
        removed
    }

    /// Pool slots the connections in use reserve together.
    pub(crate) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Empties the place of `h` (its connection and buffers are dropped).
    pub(crate) fn remove(&mut self, h: TcpHandle) {
        let Some(slot) = self.slots.get_mut(h.0) else {
            return;
        };
        let was_used = slot.tcb.take().is_some();
        if was_used {
            self.used -= 1;
            self.reserved -= slot.slots;
        }
        let (prev, next) = (slot.prev_used, slot.next_used);
        slot.prev_used = NO_PLACE;
        slot.next_used = NO_PLACE;
        slot.slots = 0;
        slot.kept = None;
        if slot.meta.orphan.is_some() {
            self.orphans -= 1;
        }
        slot.meta = TcpMeta::EMPTY;
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
    pub(crate) fn get(&mut self, h: TcpHandle) -> (&mut Tcb<'static>, &mut TcpMeta) {
        let slot = &mut self.slots[h.0];
        slot.kept = None;
        self.orphan_touched |= slot.meta.orphan.is_some();
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
        for (slot, release) in self.slots.iter_mut().zip(self.releases) {
            let Some(tcb) = slot.tcb.as_mut() else {
                continue;
            };
            let n = release.take(slot.generation);
            if n != 0 {
                slot.kept = None;
                update |= tcb.release_segments(n);
            }
        }
        update
    }

    /// The connection of `h`, if its place holds one.
    pub(crate) fn tcb(&self, h: TcpHandle) -> Option<&Tcb<'static>> {
        self.slots.get(h.0).and_then(|s| s.tcb.as_ref())
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
        let slot = self.slots.get_mut(i)?;
        let tcb = slot.tcb.as_mut()?;
        slot.kept = None;
        self.orphan_touched |= slot.meta.orphan.is_some();
        Some(Entry {
            tcb,
            meta: &mut slot.meta,
            keys: &self.keys,
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
        }
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
        if self.takes(self.last_hit, ip, repr) {
            return Some(self.last_hit);
        }
        let bucket = self.bucket(ip, repr);
        let cached = usize::from(self.demux[bucket]).wrapping_sub(1);
        if self.takes(cached, ip, repr) {
            self.last_hit = cached;
            return Some(cached);
        }
        let connection = self.used_places().find(|&i| self.takes(i, ip, repr));
        if let Some(i) = connection {
            // Places are fewer than 2^16 (a place per socket slot of `StackResources`).
            self.demux[bucket] = u16::try_from(i + 1).unwrap_or(0);
            self.last_hit = i;
            return Some(i);
        }
        self.used_places().find(|&i| {
            self.slots[i]
                .tcb
                .as_ref()
                .is_some_and(|t| t.state() == State::Listen && t.accepts(ip, repr))
        })
    }

    /// Whether the connection at place `i` (not listening) takes the segment.
    fn takes(&self, i: usize, ip: &IpRepr, repr: &TcpRepr) -> bool {
        self.slots
            .get(i)
            .and_then(|s| s.tcb.as_ref())
            .is_some_and(|t| t.state() != State::Listen && t.accepts(ip, repr))
    }

    /// The demultiplexing cache's bucket of a segment's four-tuple (multiply-shift, keyed).
    fn bucket(&self, ip: &IpRepr, repr: &TcpRepr) -> usize {
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
        let ports = (u64::from(repr.src_port) << 16) | u64::from(repr.dst_port);
        let x = (fold(ip.src_addr()) ^ fold(ip.dst_addr()).rotate_left(21) ^ ports << 40)
            .wrapping_add(self.demux_key)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (x >> (64 - DEMUX_BITS)) as usize
    }

    /// Whether a connection uses local `port` (bound or listening).
    pub(crate) fn uses_port(&self, port: u16) -> bool {
        self.iter().any(|(_, t)| {
            t.local_endpoint().is_some_and(|e| e.port == port) || t.listen_endpoint().port == port
        })
    }

    /// Marks `h` an orphan, to be removed once closed or at `until`.
    pub(crate) fn adopt(&mut self, h: TcpHandle, until: Instant) {
        if let Some(slot) = self.slots.get_mut(h.0) {
            if slot.meta.orphan.replace(until).is_none() {
                self.orphans += 1;
            }
            self.orphan_touched = true;
        }
    }

    /// Whether a reaping scan can find something at `now`: an orphan may have closed (one was
    /// changed or adopted since the last scan) or one's deadline has come. Otherwise the
    /// stack skips the scan (`State::reap_orphans`), which would walk every place.
    pub(crate) fn orphans_due(&self, now: Instant) -> bool {
        self.orphans != 0 && (self.orphan_touched || self.orphan_due.is_some_and(|t| t <= now))
    }

    /// A reaping scan ended, leaving orphans whose earliest deadline is `due`.
    pub(crate) fn orphans_scanned(&mut self, due: Option<Instant>) {
        self.orphan_touched = false;
        self.orphan_due = due;
    }

    /// How many places to look at for orphans: none while there are none, else all.
    pub(crate) fn orphan_scan_len(&self) -> usize {
        if self.orphans == 0 {
            0
        } else {
            self.slots.len()
        }
    }

    /// The orphan at place `i`, as (handle, deadline, state).
    pub(crate) fn orphan_at(&self, i: usize) -> Option<(TcpHandle, Instant, State)> {
        let s = self.slots.get(i)?;
        let until = s.meta.orphan?;
        Some((TcpHandle(i), until, s.tcb.as_ref()?.state()))
    }
}
