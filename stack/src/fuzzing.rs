//! Entry points for zcnet's fuzz targets (`tests/fuzz/`), behind the `fuzzing` feature: the
//! zero-copy path's frame classifier (`socket/datagram.rs`) and the neighbour table with its
//! ARP / NDP snooping (`link/neighbor.rs`), driven one call at a time without the stack's tasks, so a
//! fuzzer reaches them at millions of inputs per minute; and a read-only view of the TCP table
//! for the checks of a target that runs the whole stack.
//!
//! Not an API: nothing here is stable, and nothing but the fuzz targets should use it. A
//! [`Probe`]'s classifier and neighbour calls need a [`Stack`] whose
//! [`Runner`](crate::Runner) was *not* spawned (they stand in for the ingress and egress
//! tasks; with the tasks running too, the two would interleave in ways the stack never does).
//! [`Probe::tcp_connections`] and [`Probe::tcp_totals`] only read, under the stack's lock, and
//! work on any stack.

use core::task::{Context, Poll, Waker};

use smoltcp::time::Instant;
use zcnet_buffer::TxFrame;

use crate::config::{IpAddress, IpEndpoint};
use crate::datagram::DatagramError;
use crate::link::neighbor::{
    self, Lookup, Traffic, MAX_UNSOLICITED_HELD, MAX_UNSOLICITED_NEIGHBORS,
};
use crate::socket::datagram::{self as dg, Class};
use crate::stack::Stack;
use crate::tcp::TcpState;
use crate::DropReason;

/// What ingress would do with a frame, as [`Probe::classify`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not for a zero-copy socket: smoltcp (or zcnet's TCP) gets it.
    Pass,
    /// For a zero-copy socket but broken: dropped and counted.
    Drop(DropReason),
    /// For zero-copy socket number `socket`: the UDP payload is `len` bytes at `offset`.
    Deliver {
        /// Index of the socket in the stack's table.
        socket: usize,
        /// Where the payload starts in the frame.
        offset: usize,
        /// Payload length.
        len: usize,
    },
}

/// What a next-hop lookup found, as [`Probe::lookup`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Resolved: this MAC.
    Known([u8; 6]),
    /// Resolving (a request is due): a send would hold its frame.
    Unknown,
    /// No room in the table for another next hop.
    Full,
}

/// One connection of the stack's TCP table, as [`Probe::tcp_connections`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpEntry {
    /// Its place in the table.
    pub place: usize,
    /// Its state.
    pub state: TcpState,
    /// The local port it listens on or is connected from.
    pub local_port: u16,
    /// The peer, once there is one.
    pub remote: Option<IpEndpoint>,
    /// Whether its socket was dropped while it was still closing (the stack removes it once
    /// closed, or at its deadline).
    pub orphan: bool,
}

/// The TCP table's totals, as [`Probe::tcp_totals`] reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpTotals {
    /// Sockets of every kind in use, and the stack's socket slots.
    pub sockets: (usize, usize),
    /// Pool slots the TCP connections' budgets reserve, and the TCP share they may take.
    pub reserved: (usize, usize),
}

/// The classifier and the neighbour table of one stack, called directly, and its TCP table.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    stack: Stack,
}

fn at(now_ms: u64) -> Instant {
    Instant::from_millis(i64::try_from(now_ms).unwrap_or(i64::MAX / 1000))
}

impl Probe {
    /// A probe over `stack` (see the module docs for which calls need its runner stopped).
    pub fn new(stack: Stack) -> Self {
        Self { stack }
    }

    /// Ingress's first look at `frame` at time `now_ms` (milliseconds): with no zero-copy
    /// socket bound, ARP / NDP snooping only (always [`Verdict::Pass`]); otherwise the full
    /// classification, snooping included. The frame itself is not delivered anywhere.
    pub fn classify(&self, frame: &[u8], now_ms: u64) -> Verdict {
        let inner = self.stack.inner;
        self.stack.with(|st| {
            if st.zc.bound == 0 {
                dg::snoop_only(st, frame, at(now_ms), &inner.counters);
                return Verdict::Pass;
            }
            match dg::classify(st, frame, false, at(now_ms), &inner.counters) {
                Class::Pass => Verdict::Pass,
                Class::Drop(reason) => Verdict::Drop(reason),
                Class::Deliver {
                    sock, offset, len, ..
                } => Verdict::Deliver {
                    socket: sock,
                    offset,
                    len,
                },
            }
        })
    }

    /// A send's next-hop lookup for `ip` at `now_ms`: an unsolicited answer's (a reset, a
    /// SYN-ACK) when `unsolicited`, else the stack's own traffic's.
    pub fn lookup(&self, ip: IpAddress, now_ms: u64, unsolicited: bool) -> Resolution {
        let inner = self.stack.inner;
        let traffic = if unsolicited {
            Traffic::Unsolicited
        } else {
            Traffic::Own
        };
        self.stack.with(|st| {
            match st
                .link
                .neighbors
                .lookup(ip, at(now_ms), traffic, &inner.counters)
            {
                Ok(Lookup::Known(mac)) => Resolution::Known(mac.0),
                Ok(Lookup::Unknown) => Resolution::Unknown,
                Err(_) => Resolution::Full,
            }
        })
    }

    /// Starts resolving `ip` ahead of any send (what the stack does for its IPv4 gateway).
    pub fn prime(&self, ip: IpAddress, now_ms: u64) {
        let inner = self.stack.inner;
        self.stack
            .with(|st| st.link.neighbors.prime(ip, at(now_ms), &inner.counters));
    }

    /// Whether the table holds an entry for `ip`, and whether it is resolved.
    pub fn entry(&self, ip: IpAddress) -> Option<bool> {
        self.stack.with(|st| {
            st.link
                .neighbors
                .entries
                .iter()
                .flatten()
                .find(|n| n.ip == ip)
                .map(|n| n.mac.is_some())
        })
    }

    /// Holds `frame` until `next_hop` resolves, as a send does after
    /// [`Resolution::Unknown`]; the ticket to poll, or `None` when every place is taken (the
    /// frame is dropped then).
    pub fn hold(&self, frame: TxFrame, next_hop: IpAddress, datagram: bool) -> Option<u32> {
        self.stack
            .with(|st| st.link.neighbors.hold(frame, next_hop, datagram).ok())
    }

    /// The outcome of held send `ticket` (its place is freed when it has one), or `None` while
    /// it waits. Only for a ticket [`hold`](Self::hold) returned that has neither been detached
    /// nor returned an outcome yet.
    pub fn poll_held(&self, ticket: u32) -> Option<Result<(), DatagramError>> {
        let mut cx = Context::from_waker(Waker::noop());
        match self
            .stack
            .with(|st| st.link.neighbors.poll_held(ticket, &mut cx))
        {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        }
    }

    /// The sender of `ticket` stopped waiting.
    pub fn detach(&self, ticket: u32) {
        self.stack.with(|st| st.link.neighbors.detach(ticket));
    }

    /// Egress's neighbour step at `now_ms`: due requests, give-ups. `true` when the driver had
    /// no TX frame.
    pub fn egress(&self, now_ms: u64) -> bool {
        let inner = self.stack.inner;
        self.stack
            .with(|st| neighbor::egress(st, at(now_ms), Waker::noop(), &inner.counters))
    }

    /// When egress must run next for the table, in milliseconds.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.stack.with(|st| {
            st.link
                .neighbors
                .deadline()
                .map(|t| u64::try_from(t.total_millis()).unwrap_or(0))
        })
    }

    /// Frames held right now.
    pub fn held_frames(&self) -> usize {
        self.stack.with(|st| {
            st.link
                .neighbors
                .held
                .iter()
                .flatten()
                .filter(|h| h.frame.is_some())
                .count()
        })
    }

    /// The table's invariants; the first one broken, if any:
    ///
    /// * no next hop has two entries;
    /// * an unresolved entry always has a request (or give-up) scheduled, and egress knows a
    ///   request is wanted whenever one is scheduled (else the entry, and the frames held for
    ///   it, would stay forever);
    /// * a held frame waits for a next hop that has an unresolved entry (else nothing would
    ///   ever send or fail it), and has no outcome yet;
    /// * a place whose frame is gone has an outcome, and a detached place with an outcome has
    ///   been freed;
    /// * at most [`MAX_UNSOLICITED_NEIGHBORS`] entries are unsolicited, and at most
    ///   [`MAX_UNSOLICITED_HELD`] frames are held for them (what unsolicited traffic may take).
    pub fn check(&self) -> Result<(), &'static str> {
        self.stack.with(|st| {
            let nb = &st.link.neighbors;
            if nb.unsolicited_entries() > MAX_UNSOLICITED_NEIGHBORS {
                return Err("more unsolicited entries than allowed");
            }
            if nb.unsolicited_held() > MAX_UNSOLICITED_HELD {
                return Err("more frames held for unsolicited entries than allowed");
            }
            let entries = || nb.entries.iter().flatten();
            for (i, a) in entries().enumerate() {
                if entries().skip(i + 1).any(|b| b.ip == a.ip) {
                    return Err("two entries for one next hop");
                }
                if a.mac.is_none() && a.request_at.is_none() {
                    return Err("unresolved entry with no request scheduled");
                }
                if a.request_at.is_some() && !nb.requests_wanted {
                    return Err("request scheduled but egress is not told");
                }
            }
            for h in nb.held.iter().flatten() {
                if h.frame.is_some() {
                    if h.outcome.is_some() {
                        return Err("held frame with an outcome");
                    }
                    if !entries().any(|n| n.ip == h.next_hop && n.mac.is_none()) {
                        return Err("held frame with no unresolved entry for its next hop");
                    }
                } else {
                    if h.outcome.is_none() {
                        return Err("held frame gone without an outcome");
                    }
                    if h.detached {
                        return Err("detached place with an outcome not freed");
                    }
                }
            }
            Ok(())
        })
    }

    /// Calls `f` with every connection of the stack's TCP table (listening sockets included),
    /// in place order.
    pub fn tcp_connections(&self, mut f: impl FnMut(TcpEntry)) {
        self.stack.with(|st| {
            for place in 0..st.tcp.len() {
                let orphan = st.tcp.is_orphan(place);
                let Some(e) = st.tcp.at(place) else {
                    continue;
                };
                let t = &*e.tcb;
                f(TcpEntry {
                    place,
                    state: t.state(),
                    local_port: t
                        .local_endpoint()
                        .map_or(t.listen_endpoint().port, |e| e.port),
                    remote: t.remote_endpoint(),
                    orphan,
                });
            }
        })
    }

    /// The socket and pool-budget totals (see [`TcpTotals`]).
    pub fn tcp_totals(&self) -> TcpTotals {
        self.stack.with(|st| TcpTotals {
            sockets: (st.socket_count, st.socket_capacity),
            reserved: (st.tcp.reserved(), st.tcp_slot_limit),
        })
    }

    /// Egress's timer: the deadline it is armed for, and the earliest deadline the stack has
    /// now (smoltcp's, the TCP connections', autoconfiguration's and the neighbour table's, as
    /// ingress computes it after a batch), both in milliseconds of the stack's clock. Egress
    /// may be armed earlier than due (it re-arms lazily). With the executor idle, an armed
    /// deadline behind the clock is a timer that never fired.
    pub fn egress_deadlines(&self) -> (Option<i64>, Option<i64>) {
        let now = self.stack.now();
        self.stack.with(|st| {
            let at = st.iface.poll_at(now, &st.sockets);
            let at = crate::stack::earliest(at, crate::transport::tcp::output::deadline(st, now));
            let at = crate::ip::autoconf::deadline(st, now, at, false);
            let at = crate::stack::earliest(at, st.link.neighbors.deadline());
            (
                st.tasks.egress_deadline.map(|t| t.total_millis()),
                at.map(|t| t.total_millis()),
            )
        })
    }
}

/// How many segments each path took in a [`FastPathCheck::run`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastPathTaken {
    /// Segments the fast path took.
    pub fast: u64,
    /// Segments the full processing took.
    pub slow: u64,
}

/// The differential check of TCP's fast path: two pairs of connections, one taking segments on
/// the fast path and one always through the full processing, driven by the same operations.
/// Its pools are made once ([`new`](Self::new) leaks them) and every run returns what it took,
/// so a fuzz target keeps one for all its inputs.
pub struct FastPathCheck(&'static crate::transport::tcp::tcb::socket::twin::TwinEnv);

impl FastPathCheck {
    /// The check's keys and pools (leaked).
    pub fn new() -> Self {
        Self(crate::transport::tcp::tcb::socket::twin::TwinEnv::leak())
    }

    /// Runs the operations `data` encodes (writes, reads, sends, deliveries, losses,
    /// reordering, duplicates, forged segments, the clock; see
    /// `transport/tcp/tcb/twin.rs`) in both worlds. Panics at the first difference in a
    /// connection's state, the segments sent, the answers or the bytes read.
    pub fn run(&self, data: &[u8]) -> FastPathTaken {
        let taken = crate::transport::tcp::tcb::socket::twin::run(self.0, data);
        FastPathTaken {
            fast: taken.fast,
            slow: taken.slow,
        }
    }
}

impl core::fmt::Debug for FastPathCheck {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("FastPathCheck")
    }
}

impl Default for FastPathCheck {
    fn default() -> Self {
        Self::new()
    }
}
