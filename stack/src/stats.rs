//! Stack counters: polls, frames, drops by reason. Relaxed atomics, read as a snapshot.
//!
//! Received frames that smoltcp drops are counted by ingress, which looks at them before and
//! after smoltcp does (`ip/check.rs` says how, what it costs and what is not counted).

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Why the stack dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// No TX frame could be built to fit what smoltcp produced.
    TxTooLong,
    /// The pool's headroom is smaller than the driver needs.
    TxHeadroom,
    /// The driver refused a frame (`TxError`).
    TxDriver,
    /// A SYN for a listener whose backlog was full (every listening socket busy): dropped so
    /// the client retries, instead of refused.
    BacklogFull,
    /// A datagram for a zero-copy socket ([`DatagramSocket`](crate::datagram::DatagramSocket))
    /// whose receive queue was full: the frame went back to the pool at once.
    DatagramQueueFull,
    /// A wrong checksum: a datagram for a zero-copy socket with a wrong IPv4 header or UDP
    /// checksum (or an IPv6 UDP datagram without one), or a frame for smoltcp with a wrong IPv4
    /// header, TCP, UDP, ICMPv4 or ICMPv6 checksum (ingress verifies these in smoltcp's place,
    /// see `ip/check.rs`). Dropped, never delivered.
    BadChecksum,
    /// A zero-copy datagram held while its next hop's link-layer address was resolved, dropped
    /// because no ARP / NDP answer came in time; its sender got
    /// [`DatagramError::NeighborTimeout`](crate::datagram::DatagramError::NeighborTimeout).
    NeighborTimeout,
    /// A frame for a next hop the neighbour table had no room for: a TCP segment whose next
    /// hop got no entry (the room unsolicited answers may take was used up, see
    /// `link/neighbor.rs`) or no place to wait in, or a held frame (a zero-copy datagram,
    /// whose sender got
    /// [`DatagramError::NeighborQueueFull`](crate::datagram::DatagramError::NeighborQueueFull),
    /// or a TCP segment) whose unresolved entry was evicted for a newer one.
    NeighborTableFull,
    /// A forged or stray answer, dropped before smoltcp could take it (`ip/asked.rs`): a DHCP
    /// ACK or NAK for the client's current request from another server than the one it chose
    /// (another server identifier), or a datagram smoltcp's DNS socket would take that is not
    /// from port 53 of the server its query asked (any source port 5353, a server not asked,
    /// an answer to no query in flight).
    UnexpectedAnswer,
    /// A received frame smoltcp cannot parse: shorter than its Ethernet or IP header, IP
    /// lengths beyond the frame, the wrong IP version, a TCP, UDP or ICMP header cut short, a
    /// broken IPv6 hop-by-hop header. Also a packet received over several slots (a chain, see
    /// `Capabilities::rx_chains`) whose headers do not fit its head slot, whose IP lengths
    /// exceed what it holds, or that is not a TCP data segment (SYN, RST, no payload).
    Malformed,
    /// A received frame not addressed to the stack: an Ethernet destination that is neither
    /// its MAC, broadcast nor multicast, or an IP destination that is none of its addresses,
    /// broadcast or multicast (the stack does not forward).
    NotForUs,
    /// A received frame of a kind the stack does not handle: an Ethernet type other than ARP,
    /// IPv4 and IPv6, or an IPv4 fragment (the stack does not reassemble); a packet received
    /// over several slots that is not TCP (only TCP segments are taken whole).
    Unsupported,
    /// A received datagram or segment the stack refused, answering it with a TCP reset, an
    /// ICMP destination unreachable (port or protocol) or an ICMPv6 parameter problem (unknown
    /// next header): no socket took it (for TCP, also a segment no connection accepts, such as
    /// an ACK to a listening port). Broadcast and multicast datagrams get no answer and are not
    /// counted. A TCP segment received over several slots that no connection takes is counted
    /// here too, unanswered (the peer's retransmission gets the answer).
    NoSocket,
    /// The link was down: a frame the driver refused with
    /// [`TxError::LinkDown`](zcnet_buffer::TxError::LinkDown), or a zero-copy datagram sent
    /// while the stack knew the link was down (its sender got that error).
    LinkDown,
    /// A TCP segment whose data its connection could not hold: the connection's receive slot
    /// budget was full (the application holds its segments, or the peer sent segments smaller
    /// than the advertised window assumes), or there was no free slot for an out-of-order
    /// segment, or the pool had run dry. The data is not acknowledged: the peer sends it
    /// again.
    TcpRxBudget,
    /// Out-of-order TCP frames a connection gave up (one count per frame) to make room for
    /// in-order data or because the pool had run dry; they were never acknowledged, so the peer
    /// sends them again.
    TcpOutOfOrderPurged,
    /// An ICMP "fragmentation needed" (IPv4) or "packet too big" (IPv6) about a TCP segment
    /// the stack has not got in flight: no connection of the quoted four-tuple (a listener's
    /// port, an unknown one), or a quoted sequence number outside what the connection sent and
    /// the peer has not acknowledged (RFC 5927). Forged or stale; ignored
    /// (`transport/tcp/icmp_error.rs`).
    IcmpUnmatched,
}

impl DropReason {
    const COUNT: usize = 17;
    /// Every reason, in the order [`StackStats::drops`] lists them.
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::TxTooLong,
        DropReason::TxHeadroom,
        DropReason::TxDriver,
        DropReason::BacklogFull,
        DropReason::DatagramQueueFull,
        DropReason::BadChecksum,
        DropReason::NeighborTimeout,
        DropReason::NeighborTableFull,
        DropReason::UnexpectedAnswer,
        DropReason::Malformed,
        DropReason::NotForUs,
        DropReason::Unsupported,
        DropReason::NoSocket,
        DropReason::LinkDown,
        DropReason::TcpRxBudget,
        DropReason::TcpOutOfOrderPurged,
        DropReason::IcmpUnmatched,
    ];

    /// A stable snake_case name for logs and reports (`"backlog_full"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::TxTooLong => "tx_too_long",
            DropReason::TxHeadroom => "tx_headroom",
            DropReason::TxDriver => "tx_driver",
            DropReason::BacklogFull => "backlog_full",
            DropReason::DatagramQueueFull => "datagram_queue_full",
            DropReason::BadChecksum => "bad_checksum",
            DropReason::NeighborTimeout => "neighbor_timeout",
            DropReason::NeighborTableFull => "neighbor_table_full",
            DropReason::UnexpectedAnswer => "unexpected_answer",
            DropReason::Malformed => "malformed",
            DropReason::NotForUs => "not_for_us",
            DropReason::Unsupported => "unsupported",
            DropReason::NoSocket => "no_socket",
            DropReason::LinkDown => "link_down",
            DropReason::TcpRxBudget => "tcp_rx_budget",
            DropReason::TcpOutOfOrderPurged => "tcp_out_of_order_purged",
            DropReason::IcmpUnmatched => "icmp_unmatched",
        }
    }
}

/// A snapshot of the stack's counters ([`Stack::stats`](crate::Stack::stats)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackStats {
    /// Times the ingress task ran.
    pub ingress_polls: u64,
    /// Times the egress task ran.
    pub egress_polls: u64,
    /// Ingress or egress runs that found nothing to do.
    pub idle_polls: u64,
    /// Frames received from the driver (handed to smoltcp, or to a zero-copy socket).
    pub frames_in: u64,
    /// Frames handed to the driver (smoltcp's, zero-copy datagrams, ARP / NDP requests).
    pub frames_out: u64,
    /// Received frames moved into a zero-copy socket's queue (a subset of `frames_in`).
    pub datagrams_in: u64,
    /// Zero-copy datagrams handed to the driver (a subset of `frames_out`).
    pub datagrams_out: u64,
    /// Drops per [`DropReason`], in [`DropReason::ALL`] order.
    pub drops: [u64; DropReason::COUNT],
    /// Times autoconfiguration changed the interface: a DHCPv4 lease applied or lost, a SLAAC
    /// address or route added or removed.
    pub config_changes: u64,
    /// Times a [`TcpListener`](crate::tcp::TcpListener) failed to replace a listening socket
    /// (no free socket slot, or no buffers from its source): it has fewer listening sockets
    /// than its backlog until a retry succeeds. The listener retries whenever `accept` runs,
    /// and a pending `accept` is woken to retry whenever the stack frees a socket slot, the
    /// application drops a socket, or [`Stack::tcp_buffers_returned`](crate::Stack::tcp_buffers_returned)
    /// is called.
    pub listener_rearm_failures: u64,
    /// Times a new socket took the slot of a dropped TCP connection in TIME-WAIT because every
    /// slot was taken (the connection dropped first goes; see
    /// [`TcpListener`](crate::tcp::TcpListener)). Sockets that close first (an HTTP server
    /// answering `Connection: close`) spend 10 s in TIME-WAIT; a count that grows with the
    /// connection rate means the table is sized below rate × 10 s.
    pub time_wait_evictions: u64,
    /// Times the link went down (the driver reported [`LinkState::Down`](zcnet_buffer::LinkState)
    /// after up); [`Stack::link_state`](crate::Stack::link_state) says how it is now.
    pub link_downs: u64,
    /// TCP challenge ACKs (RFC 5961: the answers to an in-window reset not at the expected
    /// sequence number, to a SYN on an open connection, to an acknowledgement of what was never
    /// sent) not sent because the stack had spent its budget of the current second (on
    /// average [`CHALLENGE_ACKS_PER_SECOND`](crate::tcp::CHALLENGE_ACKS_PER_SECOND)). Each
    /// connection also sends at most one a second; what that limit withholds is not counted.
    pub challenge_acks_withheld: u64,
    /// TCP connections the stack ended with [`TcpError::TimedOut`](crate::tcp::TcpError::TimedOut)
    /// because the peer stopped answering: a `connect` whose SYNs went unanswered
    /// [`SYN_RETRIES`](crate::tcp::SYN_RETRIES) times, data or a FIN unacknowledged past the
    /// retransmission bound or zero-window probes unanswered past the limit
    /// ([`TcpSocket::set_retries`](crate::tcp::TcpSocket::set_retries)), or a socket's own
    /// [`set_timeout`](crate::tcp::TcpSocket::set_timeout). `connect_timeout` giving up is the
    /// application's choice and not counted.
    pub tcp_timed_out: u64,
    /// TCP connections the stack reset because data came for a socket the application had
    /// dropped: nobody could read it (RFC 1122, 4.2.2.13: a RST tells the peer the data was
    /// lost). Data a socket had not read when it was dropped is discarded then, which opens the
    /// window; a peer with more to send is reset when it sends, instead of keeping the closing
    /// connection (and its pool budget) by probing a closed window.
    pub tcp_unread_resets: u64,
    /// Batches of two or more in-order TCP segments of one connection that ingress gave to
    /// the connection in one pass (software GRO, see the crate's TCP docs).
    pub gro_batches: u64,
    /// The segments those batches carried (`gro_segments / gro_batches` is the average batch).
    pub gro_segments: u64,
    /// Received packets over several pool slots (a driver's large receive: a TAP read of a GSO
    /// packet, see `Capabilities::rx_chains`) that zcnet's TCP took, each in one pass. Chains
    /// that fail their checks are counted as drops instead (`ip/chain.rs`).
    pub rx_chains: u64,
    /// SYN-ACKs sent with a SYN cookie: SYNs for a [`TcpListener`](crate::tcp::TcpListener)
    /// whose listening sockets were all busy, answered without keeping any state
    /// ([`Config::syn_cookies`](crate::Config::syn_cookies)).
    pub syn_cookies_sent: u64,
    /// ACKs for no connection whose acknowledgement was a valid SYN cookie: each made a
    /// connection for the listener's `accept` (or was dropped for want of room, see
    /// [`syn_cookie_accept_drops`](Self::syn_cookie_accept_drops)).
    pub syn_cookies_validated: u64,
    /// ACKs for no connection on a listener's port, within two minutes of its last cookie,
    /// whose acknowledgement was no valid cookie (forged, for another four-tuple, too old):
    /// answered with a reset, nothing made.
    pub syn_cookies_rejected: u64,
    /// Valid cookies that made no connection: the listener already had its backlog of
    /// connections waiting for `accept`, or the stack had no socket slot, pool budget or
    /// buffers for one. The ACK is dropped; the peer's retransmission may find room.
    pub syn_cookie_accept_drops: u64,
    /// ICMP "fragmentation needed" / "packet too big" messages that lowered a TCP
    /// connection's path MTU: about a segment it had in flight, naming an MTU below the one
    /// it used (path MTU discovery, RFC 1191 / RFC 8201). Those about other segments are
    /// counted as [`DropReason::IcmpUnmatched`].
    pub path_mtu_reductions: u64,
    /// ICMP "fragmentation needed" / "packet too big" messages about a segment a connection had
    /// in flight that named an MTU no lower than the one it already used (usually the
    /// messages about the rest of a burst, after the first one lowered it): ignored.
    pub path_mtu_unchanged: u64,
    /// TCP super-segments sent: runs of send-queue frames a connection sent in one pass, more
    /// than one segment's payload (`transport/tcp/output.rs`). Each is either handed to the
    /// driver whole ([`tso_super_segments`](Self::tso_super_segments)) or split in software
    /// ([`gso_pieces`](Self::gso_pieces)).
    pub super_segments: u64,
    /// Super-segments handed to the driver whole for it to segment (TSO: the driver declares
    /// segmentation for the IP version): one frame out each.
    pub tso_super_segments: u64,
    /// Segments the stack cut super-segments into itself (software GSO, for a driver without
    /// segmentation offload): each is one frame out.
    pub gso_pieces: u64,
}

impl StackStats {
    /// Drops for one reason.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    /// Ingress plus egress polls.
    pub fn polls(&self) -> u64 {
        self.ingress_polls + self.egress_polls
    }
}

/// The live counters behind [`StackStats`].
///
/// Ground rule: **every write happens with the stack's state borrowed** (the runner's steps,
/// the device adapter inside a step, autoconfiguration, socket operations through
/// `State::with_socket`). So each counter has one writer at a time, and an increment is a plain
/// load and store ([`bump`]) instead of a locked read-modify-write: the per-frame and per-poll
/// counting costs no atomic instruction. Readers ([`Counters::snapshot`]) take no lock; they see
/// each counter as it was at some recent moment.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    ingress_polls: AtomicU64,
    egress_polls: AtomicU64,
    idle_polls: AtomicU64,
    frames_in: AtomicU64,
    frames_out: AtomicU64,
    datagrams_in: AtomicU64,
    datagrams_out: AtomicU64,
    drops: [AtomicU64; DropReason::COUNT],
    config_changes: AtomicU64,
    listener_rearm_failures: AtomicU64,
    time_wait_evictions: AtomicU64,
    link_downs: AtomicU64,
    challenge_acks_withheld: AtomicU64,
    tcp_timed_out: AtomicU64,
    tcp_unread_resets: AtomicU64,
    gro_batches: AtomicU64,
    gro_segments: AtomicU64,
    rx_chains: AtomicU64,
    syn_cookies_sent: AtomicU64,
    syn_cookies_validated: AtomicU64,
    syn_cookies_rejected: AtomicU64,
    syn_cookie_accept_drops: AtomicU64,
    path_mtu_reductions: AtomicU64,
    path_mtu_unchanged: AtomicU64,
    super_segments: AtomicU64,
    tso_super_segments: AtomicU64,
    gso_pieces: AtomicU64,
}

/// Adds one to a counter whose writers are serialised by the state's single owner (see [`Counters`]);
/// returns the new count.
fn bump(c: &AtomicU64) -> u64 {
    let n = c.load(Relaxed).wrapping_add(1);
    c.store(n, Relaxed);
    n
}

impl Counters {
    pub(crate) const fn new() -> Self {
        Self {
            ingress_polls: AtomicU64::new(0),
            egress_polls: AtomicU64::new(0),
            idle_polls: AtomicU64::new(0),
            frames_in: AtomicU64::new(0),
            frames_out: AtomicU64::new(0),
            datagrams_in: AtomicU64::new(0),
            datagrams_out: AtomicU64::new(0),
            drops: [const { AtomicU64::new(0) }; DropReason::COUNT],
            config_changes: AtomicU64::new(0),
            listener_rearm_failures: AtomicU64::new(0),
            time_wait_evictions: AtomicU64::new(0),
            link_downs: AtomicU64::new(0),
            challenge_acks_withheld: AtomicU64::new(0),
            tcp_timed_out: AtomicU64::new(0),
            tcp_unread_resets: AtomicU64::new(0),
            gro_batches: AtomicU64::new(0),
            gro_segments: AtomicU64::new(0),
            rx_chains: AtomicU64::new(0),
            syn_cookies_sent: AtomicU64::new(0),
            syn_cookies_validated: AtomicU64::new(0),
            syn_cookies_rejected: AtomicU64::new(0),
            syn_cookie_accept_drops: AtomicU64::new(0),
            path_mtu_reductions: AtomicU64::new(0),
            path_mtu_unchanged: AtomicU64::new(0),
            super_segments: AtomicU64::new(0),
            tso_super_segments: AtomicU64::new(0),
            gso_pieces: AtomicU64::new(0),
        }
    }

    pub(crate) fn ingress_poll(&self) {
        bump(&self.ingress_polls);
    }
    pub(crate) fn egress_poll(&self) {
        bump(&self.egress_polls);
    }
    pub(crate) fn idle_poll(&self) {
        bump(&self.idle_polls);
    }
    pub(crate) fn frame_in(&self) {
        bump(&self.frames_in);
    }
    pub(crate) fn frame_out(&self) {
        bump(&self.frames_out);
    }
    pub(crate) fn datagram_in(&self) {
        bump(&self.datagrams_in);
    }
    pub(crate) fn datagram_out(&self) {
        bump(&self.datagrams_out);
    }
    /// Frames sent so far (one load, for egress's "did this run send anything" check).
    pub(crate) fn frames_out(&self) -> u64 {
        self.frames_out.load(Relaxed)
    }
    pub(crate) fn config_change(&self) {
        bump(&self.config_changes);
    }
    /// The one exception to the ground rule above: bumped by `TcpListener::accept` after it
    /// released the state lock, so a locked read-modify-write (rare: only when re-arming fails).
    /// Logged (with a logging feature) with the listener's `port`.
    pub(crate) fn listener_rearm_failure(&self, _port: u16) {
        let _total = self
            .listener_rearm_failures
            .fetch_add(1, Relaxed)
            .wrapping_add(1);
        event!(listener_rearm_failed(_port, _total));
    }
    pub(crate) fn time_wait_eviction(&self) {
        let _total = bump(&self.time_wait_evictions);
        event!(time_wait_evicted(_total));
    }
    /// One drop for `reason`, logged with a logging feature (`events::frames_dropped`).
    pub(crate) fn drop(&self, reason: DropReason) {
        let _total = bump(&self.drops[reason as usize]);
        event!(frames_dropped(reason, 1, _total));
    }
    /// `n` drops for `reason` (nothing when `n` is 0).
    pub(crate) fn drop_n(&self, reason: DropReason, n: u64) {
        if n > 0 {
            let c = &self.drops[reason as usize];
            let total = c.load(Relaxed).wrapping_add(n);
            c.store(total, Relaxed);
            event!(frames_dropped(reason, n, total));
        }
    }
    /// The driver refused a frame: counted as [`DropReason::LinkDown`] or
    /// [`DropReason::TxDriver`].
    pub(crate) fn tx_refused(&self, error: zcnet_buffer::TxError) {
        self.drop(match error {
            zcnet_buffer::TxError::LinkDown => DropReason::LinkDown,
            _ => DropReason::TxDriver,
        });
    }
    pub(crate) fn link_down(&self) {
        bump(&self.link_downs);
    }
    /// `n` challenge ACKs the stack-wide limit withheld (nothing when `n` is 0).
    pub(crate) fn challenge_acks_withheld(&self, n: u64) {
        if n > 0 {
            let c = &self.challenge_acks_withheld;
            c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
        }
    }

    /// A TCP connection ended for want of an answer from its peer.
    pub(crate) fn tcp_timed_out(&self) {
        bump(&self.tcp_timed_out);
    }

    /// A TCP connection reset because received data could never be read.
    pub(crate) fn tcp_unread_reset(&self) {
        bump(&self.tcp_unread_resets);
    }

    /// A batch of `segments` TCP segments taken in one pass (counted from two up).
    pub(crate) fn gro_batch(&self, segments: u32) {
        if segments > 1 {
            bump(&self.gro_batches);
            let c = &self.gro_segments;
            c.store(c.load(Relaxed).wrapping_add(u64::from(segments)), Relaxed);
        }
    }

    /// A received chain taken by TCP.
    pub(crate) fn rx_chain(&self) {
        bump(&self.rx_chains);
    }

    /// A SYN cookie sent by the listener on `port` (logged with a logging feature).
    pub(crate) fn syn_cookie_sent(&self, _port: u16) {
        let _total = bump(&self.syn_cookies_sent);
        event!(syn_cookie_sent(_port, _total));
    }
    pub(crate) fn syn_cookie_validated(&self) {
        bump(&self.syn_cookies_validated);
    }
    pub(crate) fn syn_cookie_rejected(&self) {
        bump(&self.syn_cookies_rejected);
    }
    /// A valid SYN cookie for the listener on `port` that found no room (logged with a
    /// logging feature).
    pub(crate) fn syn_cookie_accept_drop(&self, _port: u16) {
        let _total = bump(&self.syn_cookie_accept_drops);
        event!(syn_cookie_accept_dropped(_port, _total));
    }
    pub(crate) fn path_mtu_reduction(&self) {
        bump(&self.path_mtu_reductions);
    }
    pub(crate) fn path_mtu_unchanged(&self) {
        bump(&self.path_mtu_unchanged);
    }
    /// A TCP super-segment sent: whole to the driver (`tso`), or as `pieces` cut in software.
    pub(crate) fn super_segment(&self, tso: bool, pieces: u64) {
        bump(&self.super_segments);
        if tso {
            bump(&self.tso_super_segments);
        } else {
            let c = &self.gso_pieces;
            c.store(c.load(Relaxed).wrapping_add(pieces), Relaxed);
        }
    }

    pub(crate) fn snapshot(&self) -> StackStats {
        let mut drops = [0; DropReason::COUNT];
        for (d, a) in drops.iter_mut().zip(&self.drops) {
            *d = a.load(Relaxed);
        }
        StackStats {
            ingress_polls: self.ingress_polls.load(Relaxed),
            egress_polls: self.egress_polls.load(Relaxed),
            idle_polls: self.idle_polls.load(Relaxed),
            frames_in: self.frames_in.load(Relaxed),
            frames_out: self.frames_out.load(Relaxed),
            datagrams_in: self.datagrams_in.load(Relaxed),
            datagrams_out: self.datagrams_out.load(Relaxed),
            drops,
            config_changes: self.config_changes.load(Relaxed),
            listener_rearm_failures: self.listener_rearm_failures.load(Relaxed),
            time_wait_evictions: self.time_wait_evictions.load(Relaxed),
            link_downs: self.link_downs.load(Relaxed),
            challenge_acks_withheld: self.challenge_acks_withheld.load(Relaxed),
            tcp_timed_out: self.tcp_timed_out.load(Relaxed),
            tcp_unread_resets: self.tcp_unread_resets.load(Relaxed),
            gro_batches: self.gro_batches.load(Relaxed),
            gro_segments: self.gro_segments.load(Relaxed),
            rx_chains: self.rx_chains.load(Relaxed),
            syn_cookies_sent: self.syn_cookies_sent.load(Relaxed),
            syn_cookies_validated: self.syn_cookies_validated.load(Relaxed),
            syn_cookies_rejected: self.syn_cookies_rejected.load(Relaxed),
            syn_cookie_accept_drops: self.syn_cookie_accept_drops.load(Relaxed),
            path_mtu_reductions: self.path_mtu_reductions.load(Relaxed),
            path_mtu_unchanged: self.path_mtu_unchanged.load(Relaxed),
            super_segments: self.super_segments.load(Relaxed),
            tso_super_segments: self.tso_super_segments.load(Relaxed),
            gso_pieces: self.gso_pieces.load(Relaxed),
        }
    }
}

/// Reads a stack's counters from any thread or interrupt handler (a [`Stack`](crate::Stack) is
/// bound to its executor's context; this is not). Get one from
/// [`Stack::stats_reader`](crate::Stack::stats_reader). `Copy`, `Send` and `Sync`.
#[derive(Clone, Copy, Debug)]
pub struct StatsReader {
    counters: &'static Counters,
}

impl StatsReader {
    pub(crate) fn new(counters: &'static Counters) -> Self {
        Self { counters }
    }

    /// A snapshot of the counters, as [`Stack::stats`](crate::Stack::stats) gives it.
    pub fn snapshot(&self) -> StackStats {
        self.counters.snapshot()
    }
}
