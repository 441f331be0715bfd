//! [`Stack`], the `Copy` handle sockets use, and the state it owns.
//!
//! # Ground rules
//!
//! * All protocol state (smoltcp's interface and sockets, the TCP connections) and the driver
//!   live in one [`State`] in a `RefCell`: the state has one owner, the executor context that
//!   runs the stack. [`Stack`] and every socket handle are neither `Send` nor `Sync`, so only
//!   that context reaches the cell, and no lock or locked instruction guards it. Every user
//!   (the ingress task, the egress task, a socket operation) borrows it for a bounded step and
//!   never across an `.await`.
//! * Nothing called while the state is borrowed borrows it again (a second borrow panics
//!   instead of deadlocking or aliasing). Wakers woken meanwhile are executor wakers, which
//!   merely queue a task.
//! * What other contexts may touch lives outside the cell and is lock-free: the counters
//!   ([`Stack::stats_reader`] reads them from anywhere), the pool, the driver's wakers.
//! * Socket operations signal egress only when they created work for it (data queued, connect,
//!   close, listen, a read that reopened the receive window); registering a waker is not work.

use core::cell::{RefCell, UnsafeCell};
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, Ordering};
use core::task::Waker;

use smoltcp::iface::{Interface, SocketHandle, SocketSet, SocketStorage};
use smoltcp::socket::AnySocket;
use smoltcp::socket::Socket;
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{EthernetAddress, HardwareAddress as SmolHardwareAddress, IpAddress, IpCidr};
use zcnet_buffer::{FramePool, HardwareAddress, RxFrame};
use zcnet_executor::{Executor, Instant};

use crate::config::{Config, Ipv4Config, StaticV4};
use crate::keys::{Prf, Use};
use crate::link::device::{smoltcp_caps, StepDevice};
use crate::link::driver::StackDriver;
use crate::socket::meta::{SocketMeta, SocketMetas};
use crate::socket::SocketCx;
use crate::stats::{Counters, StackStats};
use crate::transport::tcp::backlog::ListenerPorts;
use crate::transport::tcp::table::{
    SegmentRelease, SegmentReleases, TcpHandle, TcpMeta, TcpSlot, TcpTable,
};
use crate::transport::tcp::tcb::socket::Tcb;
use crate::transport::tcp::tcb::state::State as TcpState;
use crate::StackError;

pub(crate) mod shutdown;

/// Everything the stack's executor context owns (see the module's ground rules).
pub(crate) struct State {
    pub(crate) iface: Interface,
    pub(crate) sockets: SocketSet<'static>,
    /// Sockets in use (smoltcp's and TCP connections together) and the number of slots: adding
    /// one beyond fails with [`StackError::NoSocketSlot`] (smoltcp's `SocketSet::add` would
    /// panic).
    pub(crate) socket_count: usize,
    pub(crate) socket_capacity: usize,
    /// Dropped smoltcp sockets still sending what they queued; one record per socket slot.
    pub(crate) metas: SocketMetas,
    /// The TCP connections (`transport/tcp/table.rs`).
    pub(crate) tcp: TcpTable,
    /// Pool slots the TCP connections' budgets may reserve together
    /// ([`Config::tcp_pool_slots`]).
    pub(crate) tcp_slot_limit: usize,
    /// Ports with a `TcpListener`: SYNs beyond their backlog are dropped, not refused. Also the
    /// listeners waiting for a free socket slot.
    pub(crate) listener_ports: ListenerPorts,
    /// Set by [`Stack::shutdown`]: the tasks end, nothing is sent or received, and no socket
    /// opens (see `stack/shutdown.rs`).
    pub(crate) shut_down: bool,
    /// The link layer: the driver, its capabilities, the carrier and the neighbour table.
    pub(crate) link: crate::link::LinkLayer,
    /// The stack's tasks: their wakers, egress's timer, what ingress holds back.
    pub(crate) tasks: crate::runner::Tasks,
    /// Tasks waiting in [`Stack::wait_shut_down`].
    pub(crate) shutdown_waiters: crate::waiters::WaitList<{ crate::MAX_SHUTDOWN_WAITERS }>,
    /// The stack's counters, for the few counted events inside `State`'s own methods. `None`
    /// only while [`Stack::new`] builds the state (the counters move into place after it).
    counters: Option<&'static Counters>,
    /// Random numbers: the keyed hash of a counter (`keys.rs`), unpredictable without the
    /// secret.
    random: crate::keys::KeyedStream,
    /// RFC 6056 algorithm 4's keyed table for the ports of TCP `connect` (`transport/ports.rs`).
    pub(crate) ports: crate::transport::ports::ConnectPorts,
    /// [`Config::dns_servers`], for the DNS sockets the application opens.
    pub(crate) dns_servers: [Option<crate::config::IpAddress>; crate::config::MAX_DNS_SERVERS],
    /// DHCPv4 client, SLAAC watch, DHCP-learned DNS servers, config waiters (`ip/autoconf.rs`).
    pub(crate) autoconf: crate::ip::autoconf::Autoconf,
    /// Zero-copy datagram sockets (`socket/datagram.rs`).
    pub(crate) zc: crate::socket::datagram::ZcSockets,
    /// IPv4 identification of the packets zcnet builds itself (TCP segments, zero-copy
    /// datagrams): keyed counters per destination (`ip/emit.rs`); smoltcp numbers its own
    /// packets.
    pub(crate) ipv4_idents: crate::ip::emit::Ipv4Idents,
    /// The chain egress lends a connection for the frames of a super-segment after its first
    /// (`transport/tcp/output.rs`): empty between egress runs, kept here so that a run does not
    /// build one (48 frame places) each time.
    pub(crate) gso_tail: zcnet_buffer::TxChain,
    /// smoltcp's last `poll_at` answer (`None`: forgotten), kept until something touches
    /// smoltcp: a frame or a step for it ([`step`](Self::step)), a socket operation
    /// ([`with_socket`](Self::with_socket)), a socket added or removed, an address, route or
    /// DHCP change. Between those, smoltcp's answer moves only with time, so egress and ingress
    /// reuse it and egress skips smoltcp's `poll_egress` while it is not due: a stack whose
    /// traffic is all zcnet's TCP pays nothing for smoltcp's sockets.
    smol_at: Option<Option<SmolInstant>>,
    /// The DHCP and DNS servers smoltcp's requests went to, for ingress to take answers from
    /// those only (`ip/asked.rs`).
    pub(crate) asked: crate::ip::asked::Asked,
}

/// Wakes `w`: through the executor's local run queue when `local` is given and `w` is one of
/// its local tasks (no locked instruction), else as usual. The stack's state is reachable only
/// in the executor's own context, so a `local` taken from it is always used there.
#[inline]
pub(crate) fn wake(local: Option<&zcnet_executor::LocalSpawner>, w: &Waker) {
    match local {
        Some(l) => l.wake(w),
        None => w.wake_by_ref(),
    }
}

impl State {
    /// A device for one ingress or egress step. `waker` is the stepping task's; the driver's TX
    /// waiter is always the egress task's waker once egress has run (see `runner/egress.rs`).
    pub(crate) fn step<'s>(
        &'s mut self,
        waker: &'s Waker,
        rx: Option<RxFrame>,
        counters: &'s Counters,
    ) -> (
        StepDevice<'s>,
        &'s mut Interface,
        &'s mut SocketSet<'static>,
    ) {
        self.smol_at = None;
        let dev = StepDevice {
            driver: &mut *self.link.driver,
            tx_waker: self.tasks.egress_waker.as_ref().unwrap_or(waker),
            ingress: rx.is_some(),
            rx,
            caps: self.link.smol_caps.clone(),
            tx_headroom: self.link.tx_headroom,
            counters,
            scratch: match &mut self.link.scratch {
                Some(f) => f.buffer_mut(),
                None => &mut [],
            },
            starved: false,
            spare: &mut self.link.spare_tx,
            refused: false,
            watch: self.asked.watch(self.autoconf.runs_dhcp()),
        };
        (dev, &mut self.iface, &mut self.sockets)
    }

    /// Runs `f` on the socket behind `handle` and a [`SocketCx`] with the rest of the state it may
    /// touch. Panics if `handle` is not a `T` (a bug: handles never leave their socket type).
    pub(crate) fn with_socket<T: AnySocket<'static>, R>(
        &mut self,
        handle: SocketHandle,
        f: impl FnOnce(&mut T, &mut SocketCx<'_>) -> R,
    ) -> R {
        self.smol_at = None;
        let sock = self.sockets.get_mut::<T>(handle);
        let mut cx = SocketCx {
            iface: &mut self.iface,
            egress_waker: self.tasks.egress_waker.as_ref(),
            local: self.tasks.local,
        };
        f(sock, &mut cx)
    }

    /// Runs `f` on the TCP connection behind `handle`, its record, and egress's waker. Panics
    /// if the handle's place is empty (a bug: a handle lives only as long as its socket).
    pub(crate) fn with_tcb<R>(
        &mut self,
        handle: TcpHandle,
        f: impl FnOnce(&mut Tcb<'static>, &mut TcpCx<'_>) -> R,
    ) -> R {
        let (tcb, meta) = self.tcp.get(handle);
        let mut cx = TcpCx {
            meta,
            egress_waker: self.tasks.egress_waker.as_ref(),
            local: self.tasks.local,
        };
        f(tcb, &mut cx)
    }

    /// The next 32 bits of the stack's keyed random stream (from [`Config::secret`]).
    pub(crate) fn random_u32(&mut self) -> u32 {
        self.random.next_u32()
    }

    /// The DNS servers in effect: [`Config::dns_servers`] if any are configured, else the
    /// current DHCP lease's.
    pub(crate) fn dns_servers(&self) -> [Option<IpAddress>; crate::config::MAX_DNS_SERVERS] {
        if self.dns_servers.iter().any(Option::is_some) {
            return self.dns_servers;
        }
        let mut out = [None; crate::config::MAX_DNS_SERVERS];
        if let Some(lease) = &self.autoconf.lease {
            for (o, a) in out.iter_mut().zip(lease.dns_servers()) {
                *o = Some(IpAddress::Ipv4(*a));
            }
        }
        out
    }

    /// Adds a socket, or errors when every slot is taken (smoltcp's `add` would panic). When
    /// every slot is taken, a dropped socket that has finished (not reaped yet) or a dropped
    /// connection in TIME-WAIT gives its slot up (see [`free_orphan_slot`](Self::free_orphan_slot)).
    pub(crate) fn add_socket<T: AnySocket<'static>>(
        &mut self,
        socket: T,
    ) -> Result<SocketHandle, StackError> {
        if self.shut_down {
            return Err(StackError::ShutDown);
        }
        if self.socket_count >= self.socket_capacity && !self.free_orphan_slot() {
            return Err(StackError::NoSocketSlot);
        }
        self.socket_count += 1;
        self.smol_at = None;
        let handle = self.sockets.add(socket);
        self.metas.reset(handle);
        Ok(handle)
    }

    /// Adds a TCP connection (closed) whose budget reserves `slots` pool slots, or errors when
    /// every socket slot is taken or the TCP share of the pool cannot take the budget; like
    /// [`add_socket`](Self::add_socket), a finished orphan or a dropped connection in
    /// TIME-WAIT gives its slot (and reservation) up first.
    pub(crate) fn add_tcb(
        &mut self,
        slots: usize,
        make: impl FnOnce() -> Tcb<'static>,
    ) -> Result<TcpHandle, StackError> {
        if self.shut_down {
            return Err(StackError::ShutDown);
        }
        if self.socket_count >= self.socket_capacity && !self.free_orphan_slot() {
            return Err(StackError::NoSocketSlot);
        }
        while self.tcp.reserved() + slots > self.tcp_slot_limit {
            if !self.free_orphan_slot() {
                return Err(StackError::PoolBudget {
                    needed: slots,
                    available: self.tcp_slot_limit.saturating_sub(self.tcp.reserved()),
                });
            }
        }
        // The TCP table has a place per slot, so a free slot means a free place.
        let handle = self
            .tcp
            .insert_with(slots, make)
            .ok_or(StackError::NoSocketSlot)?;
        self.socket_count += 1;
        Ok(handle)
    }

    /// Removes a socket and frees its slot, waking listeners that wait for a slot to re-arm
    /// (every smoltcp slot freed goes through here: orphans reaped, sockets dropped or closed).
    pub(crate) fn remove_socket(&mut self, handle: SocketHandle) {
        self.smol_at = None;
        self.sockets.remove(handle);
        self.metas.reset(handle);
        self.socket_count -= 1;
        self.listener_ports.wake_slot_waiters();
    }

    /// Removes a TCP connection and frees its slot, waking listeners that wait for a slot
    /// (every TCP slot freed goes through here, but for a TIME-WAIT eviction).
    pub(crate) fn remove_tcb(&mut self, handle: TcpHandle) {
        self.tcp.remove(handle);
        self.socket_count -= 1;
        self.listener_ports.wake_slot_waiters();
    }

    /// Whether the orphan `handle` has finished its work: its datagrams (UDP, ICMP, raw IP)
    /// sent.
    fn orphan_done(&self, handle: SocketHandle) -> bool {
        !datagrams_queued(self.sockets.get(handle))
    }

    /// Drops the datagram socket (UDP, ICMP, raw IP) behind `handle`: removed at once when it
    /// has nothing queued to send, else kept until what it queued is sent or
    /// [`DATAGRAM_LINGER`] has passed (an orphan, see [`adopt_orphan`](Self::adopt_orphan));
    /// its port, identifier or protocol stays taken until then.
    pub(crate) fn drop_datagram_socket(&mut self, handle: SocketHandle, now: SmolInstant) {
        if datagrams_queued(self.sockets.get(handle)) {
            self.adopt_orphan(handle, now + DATAGRAM_LINGER);
        } else {
            self.remove_socket(handle);
        }
    }

    /// Frees one orphan's slot, without waking anyone (the caller takes the slot at once): an
    /// orphan that has finished but was not reaped yet, else the TCP connection in TIME-WAIT
    /// that its owner dropped first. `false` when there is neither.
    ///
    /// TIME-WAIT is smoltcp's 10 s wait after a close this side started (an HTTP server
    /// answering `Connection: close`): the connection is over, the slot is held only to answer
    /// a retransmitted FIN and to keep a new connection on the same four ports from taking the
    /// old one's stray segments. A socket slot is worth more than that: without eviction a
    /// table of N slots serves N such connections per 10 s and then drops every SYN. lwIP makes
    /// the same trade (`tcp_alloc` kills its oldest TIME-WAIT PCB when none is free), as does
    /// Linux past `tcp_max_tw_buckets`. Connections still closing in any other state (FIN-WAIT,
    /// CLOSING, LAST-ACK) keep their slots: their peer still waits for them.
    fn free_orphan_slot(&mut self) -> bool {
        for i in 0..self.metas.orphan_scan_len() {
            let Some((handle, _)) = self.metas.orphan_at(i) else {
                continue;
            };
            if self.orphan_done(handle) {
                self.smol_at = None;
                self.sockets.remove(handle);
                self.metas.reset(handle);
                self.socket_count -= 1;
                return true;
            }
        }
        let Some((handle, state)) = self.tcp.evictable_orphan() else {
            return false;
        };
        if state != TcpState::Closed {
            if let Some(c) = self.counters {
                c.time_wait_eviction();
            }
        }
        self.tcp.remove(handle);
        self.socket_count -= 1;
        true
    }

    /// Keeps a dropped socket until its work is done or `until` (see [`SocketMetas::adopt`]):
    /// a TCP connection still closing, datagrams (UDP, ICMP, raw IP) still queued.
    ///
    /// Also wakes the listeners short of listening sockets: the application is done with this
    /// socket, which is when a buffer source that counts per connection gets its buffers back
    /// (the slot itself frees later, when the orphan is removed, and wakes them again).
    pub(crate) fn adopt_orphan(&mut self, handle: SocketHandle, until: SmolInstant) {
        self.metas.adopt(handle, until);
        self.listener_ports.wake_slot_waiters();
        self.signal_egress();
    }

    /// [`adopt_orphan`](Self::adopt_orphan) for a TCP connection still closing.
    pub(crate) fn adopt_tcp_orphan(&mut self, handle: TcpHandle, until: SmolInstant) {
        self.tcp.adopt(handle, until);
        self.listener_ports.wake_slot_waiters();
        self.signal_egress();
    }

    /// Removes orphaned sockets that have finished their work or reached their deadline. A TCP
    /// connection still open at its deadline was already reset by its own timeout (set when it
    /// was orphaned); the deadline is a backstop. Only the TCP orphans that changed since the
    /// last reaping and those whose deadline came are looked at (`TcpTable::next_reapable`).
    #[inline]
    pub(crate) fn reap_orphans(&mut self, now: SmolInstant) {
        // No orphan at all, the usual case: nothing to look at, no call.
        if self.metas.orphan_scan_len() == 0 && !self.tcp.orphans_due(now) {
            return;
        }
        self.reap_orphans_now(now);
    }

    /// [`reap_orphans`](Self::reap_orphans) with orphans to look at.
    #[inline(never)]
    fn reap_orphans_now(&mut self, now: SmolInstant) {
        for i in 0..self.metas.orphan_scan_len() {
            let Some((handle, until)) = self.metas.orphan_at(i) else {
                continue;
            };
            if self.orphan_done(handle) || now >= until {
                self.remove_socket(handle);
            }
        }
        if !self.tcp.orphans_due(now) {
            return;
        }
        while let Some(handle) = self.tcp.next_reapable(now) {
            self.remove_tcb(handle);
        }
    }

    /// smoltcp's `poll_at` (see `smol_at`): the kept answer, or a fresh one, kept.
    pub(crate) fn smoltcp_poll_at(&mut self, now: SmolInstant) -> Option<SmolInstant> {
        match self.smol_at {
            Some(at) => at,
            None => {
                let at = self.iface.poll_at(now, &self.sockets);
                self.smol_at = Some(at);
                at
            }
        }
    }

    /// Keeps `at`, a `poll_at` answer smoltcp just gave, and returns it.
    pub(crate) fn smoltcp_keep(&mut self, at: Option<SmolInstant>) -> Option<SmolInstant> {
        self.smol_at = Some(at);
        at
    }

    /// Forgets smoltcp's kept `poll_at` answer: its interface or its sockets changed behind
    /// [`step`](Self::step) and [`with_socket`](Self::with_socket) (addresses, routes, DHCP).
    pub(crate) fn smoltcp_touched(&mut self) {
        self.smol_at = None;
    }

    /// Wakes the egress task: something was queued for it.
    pub(crate) fn signal_egress(&self) {
        self.tasks.signal_egress();
    }

    /// After ingress: wakes egress if smoltcp wants to transmit now. Otherwise moves egress's
    /// timer to smoltcp's new deadline without waking egress: earlier (a delayed ACK is due) or
    /// away (nothing pending), so egress never runs for a deadline that no longer exists. A
    /// later deadline (an ACK moved a retransmission deadline) keeps the timer where it is
    /// (lazy re-arm, see `arm_egress_timer`): egress then runs once early and re-arms.
    pub(crate) fn signal_egress_if_due(&mut self, now: SmolInstant) {
        let at = self.smoltcp_poll_at(now);
        let at = earliest(at, crate::transport::tcp::output::deadline(self, now));
        let at = crate::ip::autoconf::deadline(self, now, at, false);
        let at = earliest(at, self.link.neighbors.deadline());
        if at.is_some_and(|at| at <= now) {
            self.signal_egress();
        } else if at != self.tasks.egress_deadline {
            // Before egress first runs there is no waker; its first run computes the deadline.
            if let Some(w) = self.tasks.egress_waker.take() {
                self.tasks.arm_egress_timer(now, at, &w);
                self.tasks.egress_waker = Some(w);
            }
        }
    }
}

/// How long a dropped datagram socket (UDP, ICMP, raw IP) keeps trying to send what it queued
/// (e.g. while its neighbour resolves) before the rest is discarded.
pub(crate) const DATAGRAM_LINGER: smoltcp::time::Duration = smoltcp::time::Duration::from_secs(3);

/// Whether `s` is a datagram socket with packets queued to send.
fn datagrams_queued(s: &Socket<'_>) -> bool {
    match s {
        Socket::Udp(u) => u.send_queue() > 0,
        Socket::Icmp(i) => i.send_queue() > 0,
        Socket::Raw(r) => r.send_queue() > 0,
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

/// The part of a stack its handles point to: its state, counters, clock and pool.
pub struct StackInner {
    /// Borrowed by one step at a time, on the stack's executor only.
    pub(crate) state: RefCell<State>,
    pub(crate) counters: Counters,
    pub(crate) exec: &'static Executor,
    pub(crate) pool: &'static FramePool,
    /// What the driver's link-change wakes reach (`link/carrier.rs`).
    pub(crate) link_signal: crate::link::carrier::LinkSignal,
}

impl core::fmt::Debug for StackInner {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StackInner")
            .field("stats", &self.counters.snapshot())
            .finish_non_exhaustive()
    }
}

/// Memory for a stack: socket slots and the stack's state, in a `static` (or leaked).
///
/// `SOCKETS` is the number of sockets the stack holds at once, of every kind together: TCP
/// connections (each [`TcpSocket`](crate::tcp::TcpSocket), each listening socket of a
/// [`TcpListener`](crate::tcp::TcpListener), each dropped connection still closing) and
/// smoltcp's sockets (UDP, ICMP, raw IP, DNS, the DHCPv4 client). The memory holds a place for
/// `SOCKETS` of each: smoltcp's socket storage, and the TCP table's connection blocks (about
/// 4 KiB each, most of it the receive and send queues' 64 frame handles each; the frames
/// themselves are the pool's).
///
/// A table of a few hundred places is too large to build on a thread's stack and then move
/// (which `Box::new(StackResources::new())` may do): put it in a `static`, or, with the `alloc`
/// feature, use `StackResources::leak`, which builds it in place on the heap.
pub struct StackResources<const SOCKETS: usize> {
    claimed: AtomicBool,
    sockets: UnsafeCell<[SocketStorage<'static>; SOCKETS]>,
    metas: UnsafeCell<[SocketMeta; SOCKETS]>,
    tcbs: UnsafeCell<[TcpSlot; SOCKETS]>,
    /// Per TCP place: segments the application let go of in other contexts (atomics, reached
    /// by shared references only).
    releases: [SegmentRelease; SOCKETS],
    /// The flag and egress's waker for `releases`.
    segment_releases: SegmentReleases,
    inner: UnsafeCell<MaybeUninit<StackInner>>,
}

// SAFETY: the cells are written only by the caller that holds `claimed`: once, before any
// reference to their contents is handed out (afterwards only the stack's handles reach them,
// and those are neither `Send` nor `Sync`: one context), or, by a `Stack::new` that failed,
// cleared after its own references are gone and before it releases the claim.
unsafe impl<const SOCKETS: usize> Sync for StackResources<SOCKETS> {}

impl<const SOCKETS: usize> core::fmt::Debug for StackResources<SOCKETS> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StackResources")
            .field("sockets", &SOCKETS)
            .finish_non_exhaustive()
    }
}

impl<const SOCKETS: usize> StackResources<SOCKETS> {
    /// Unused resources, for a `static`.
    pub const fn new() -> Self {
        Self {
            claimed: AtomicBool::new(false),
            sockets: UnsafeCell::new([SocketStorage::EMPTY; SOCKETS]),
            metas: UnsafeCell::new([SocketMeta::EMPTY; SOCKETS]),
            tcbs: UnsafeCell::new([const { TcpSlot::EMPTY }; SOCKETS]),
            releases: [const { SegmentRelease::new() }; SOCKETS],
            segment_releases: SegmentReleases::new(),
            inner: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
}

#[cfg(feature = "alloc")]
impl<const SOCKETS: usize> StackResources<SOCKETS> {
    /// Unused resources on the heap, leaked for `'static`: built in place, never on the
    /// stack, whatever `SOCKETS`.
    pub fn leak() -> &'static Self {
        extern crate alloc;
        let mut b = alloc::boxed::Box::<Self>::new_uninit();
        let p = b.as_mut_ptr();
        // SAFETY: `p` points to memory for one `Self`, valid for writes and owned by `b`.
        // Every field is written once through a raw pointer (no reference to uninitialised
        // memory is made); an array `[T; N]`, and `UnsafeCell<[T; N]>`, which has its layout
        // (`repr(transparent)`), are `N` consecutive `T`s, written one by one. `inner` is `MaybeUninit` and needs no value. After that, every field holds
        // what `new` would have put there, so `assume_init` is sound.
        unsafe {
            core::ptr::addr_of_mut!((*p).claimed).write(AtomicBool::new(false));
            let sockets = core::ptr::addr_of_mut!((*p).sockets).cast::<SocketStorage<'static>>();
            let metas = core::ptr::addr_of_mut!((*p).metas).cast::<SocketMeta>();
            let tcbs = core::ptr::addr_of_mut!((*p).tcbs).cast::<TcpSlot>();
            let releases = core::ptr::addr_of_mut!((*p).releases).cast::<SegmentRelease>();
            for i in 0..SOCKETS {
                sockets.add(i).write(SocketStorage::EMPTY);
                metas.add(i).write(SocketMeta::EMPTY);
                tcbs.add(i).write(TcpSlot::EMPTY);
                releases.add(i).write(SegmentRelease::new());
            }
            core::ptr::addr_of_mut!((*p).segment_releases).write(SegmentReleases::new());
            alloc::boxed::Box::leak(b.assume_init())
        }
    }
}

impl<const SOCKETS: usize> Default for StackResources<SOCKETS> {
    fn default() -> Self {
        Self::new()
    }
}

/// A cheap, `Copy` handle to a running stack, for opening sockets and reading counters.
///
/// Neither `Send` nor `Sync`, like every socket made from it: the stack's state belongs to
/// the executor context that runs it (spawn the stack's tasks and the tasks using its sockets
/// with a [`LocalSpawner`](zcnet_executor::LocalSpawner)). To read the counters from another
/// thread, hand it a [`StatsReader`](crate::StatsReader) ([`Stack::stats_reader`]).
#[derive(Clone, Copy, Debug)]
pub struct Stack {
    pub(crate) inner: &'static StackInner,
    /// Keeps the handle in its context.
    _local: PhantomData<*const ()>,
}

/// Converts our clock to smoltcp's (microseconds).
pub(crate) fn smol_now(exec: &Executor) -> SmolInstant {
    SmolInstant::from_micros((exec.now().as_nanos() / 1000) as i64)
}

/// The earlier of two optional deadlines (`None`: no deadline).
pub(crate) fn earliest(a: Option<SmolInstant>, b: Option<SmolInstant>) -> Option<SmolInstant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Converts smoltcp's clock back to ours.
pub(crate) fn from_smol(t: SmolInstant) -> Instant {
    Instant::from_nanos((t.total_micros().max(0) as u64).saturating_mul(1000))
}

impl Stack {
    /// Builds a stack over `driver`, whose frames come from `pool`, running on `exec`. Returns
    /// the handle and the [`Runner`](crate::Runner) whose two tasks must be spawned (or run) for
    /// anything to happen.
    ///
    /// Errors if `resources` hold a stack already, if the pool has no slot to spare, if the
    /// pool's slots cannot hold the driver's largest frame plus its headroom, if the
    /// configuration needs an Ethernet driver or a socket slot it does not have, or if a route
    /// does not fit. A failed call keeps nothing: `resources` are free for the next call and
    /// the slot taken for scratch space is back in the pool (`driver`, moved in, is dropped).
    ///
    /// `driver` is a `&'static mut` driver or, with the `alloc` feature, a boxed one (see
    /// [`StackDriver`]); [`shutdown`](Self::shutdown) gives it back.
    pub fn new<const SOCKETS: usize>(
        exec: &'static Executor,
        pool: &'static FramePool,
        driver: impl Into<StackDriver>,
        config: Config,
        resources: &'static StackResources<SOCKETS>,
    ) -> Result<(Stack, crate::Runner), StackError> {
        let driver = driver.into();
        if resources
            .claimed
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(StackError::ResourcesInUse);
        }
        let built = Self::build(exec, pool, driver, config, resources);
        if built.is_err() {
            // `build` dropped everything it made (the state, and with it the scratch frame and
            // the socket set's borrow of the storage) before returning. Sockets it added (the
            // DHCP client) are still in the storage: clear it and the records, then release.
            // SAFETY: this call still holds `claimed`, and the state that borrowed the storage,
            // the records and the TCP table is gone, so these are the only references to them.
            let (storage, metas, tcbs) = unsafe {
                (
                    &mut *resources.sockets.get(),
                    &mut *resources.metas.get(),
                    &mut *resources.tcbs.get(),
                )
            };
            storage.fill_with(|| SocketStorage::EMPTY);
            metas.fill(SocketMeta::EMPTY);
            tcbs.fill_with(|| TcpSlot::EMPTY);
            resources.claimed.store(false, Ordering::Release);
        }
        built
    }

    /// [`new`](Self::new) once `resources` are claimed; on error, everything it made is dropped
    /// before it returns.
    fn build<const SOCKETS: usize>(
        exec: &'static Executor,
        pool: &'static FramePool,
        mut driver: StackDriver,
        config: Config,
        resources: &'static StackResources<SOCKETS>,
    ) -> Result<(Stack, crate::Runner), StackError> {
        let dcaps = driver.capabilities();
        let mut caps = smoltcp_caps(&dcaps);
        let room = pool.slot_size().saturating_sub(dcaps.tx_headroom);
        if room < 64 {
            return Err(StackError::PoolTooSmall {
                slot_size: pool.slot_size(),
                needed: dcaps.tx_headroom + 64,
            });
        }
        // Never let smoltcp build a frame that does not fit a slot after the driver's headroom.
        caps.max_transmission_unit = caps.max_transmission_unit.min(room);
        let mut smol_caps = caps.clone();
        smol_caps.checksum = crate::ip::check::smoltcp_checksums(&caps.checksum);
        let mut scratch = pool.try_alloc_tx().ok_or(StackError::PoolExhausted)?;
        // The whole slot as scratch space.
        let _ = scratch.set_headroom(0);
        let hw = match driver.hardware_address() {
            HardwareAddress::Ethernet(mac) => SmolHardwareAddress::Ethernet(EthernetAddress(mac)),
            HardwareAddress::Ip => SmolHardwareAddress::Ip,
        };
        crate::ip::autoconf::check(&config, &hw)?;
        let prf = Prf::new(&config.secret);
        let mut iconfig = smoltcp::iface::Config::new(hw);
        // smoltcp's own generator (DHCP transaction ids, DNS query ids and ports) gets a seed
        // of its own: its outputs, which reveal its state, reveal nothing of the secret.
        iconfig.random_seed = prf.of(Use::SmoltcpSeed, &[]);
        crate::ip::autoconf::interface_config(&mut iconfig, &config);
        // SAFETY: the caller won `claimed`, which makes this the only access to the socket
        // storage: for good if this call succeeds; if it fails, the state borrowing it is
        // dropped before `new` touches the storage again and releases the claim.
        let storage: &'static mut [SocketStorage<'static>] =
            unsafe { &mut *resources.sockets.get() };
        // SAFETY: as above.
        let metas: &'static mut [SocketMeta] = unsafe { &mut *resources.metas.get() };
        // SAFETY: as above.
        let tcbs: &'static mut [TcpSlot] = unsafe { &mut *resources.tcbs.get() };
        let socket_capacity = storage.len();
        let now = smol_now(exec);
        let counters = Counters::new();
        let mut state = State {
            iface: {
                // A throwaway device, only for smoltcp to read the capabilities.
                let mut scratch_tx = [0u8; 0];
                let mut spare = None;
                let mut dev = StepDevice {
                    driver: &mut *driver,
                    tx_waker: Waker::noop(),
                    rx: None,
                    caps: smol_caps.clone(),
                    tx_headroom: dcaps.tx_headroom,
                    counters: &counters,
                    scratch: &mut scratch_tx,
                    starved: false,
                    spare: &mut spare,
                    ingress: false,
                    refused: false,
                    watch: None,
                };
                Interface::new(iconfig, &mut dev, now)
            },
            sockets: SocketSet::new(storage),
            socket_count: 0,
            socket_capacity,
            metas: SocketMetas::new(metas),
            tcp: TcpTable::new(tcbs, &resources.releases, &resources.segment_releases, &prf),
            tcp_slot_limit: config.tcp_pool_slots.unwrap_or(pool.slot_count() / 4 * 3),
            listener_ports: ListenerPorts::new(config.syn_cookies),
            link: crate::link::LinkLayer {
                driver,
                caps,
                smol_caps,
                tx_headroom: dcaps.tx_headroom,
                tcp_tx_partial: dcaps
                    .checksum
                    .contains(zcnet_buffer::ChecksumOffloads::TCP_TX),
                gso: crate::link::gso::GsoSupport {
                    max_size: dcaps.gso_max_size,
                    kinds: dcaps.gso_kinds,
                },
                gso_held: heapless::Deque::new(),
                rx_chains: dcaps.rx_chains,
                scratch: Some(scratch),
                spare_tx: None,
                carrier: crate::link::carrier::Link::new(),
                neighbors: crate::link::neighbor::Neighbors::new(),
            },
            tasks: crate::runner::Tasks::new(
                exec.sleep_until(Instant::MAX),
                exec.sleep_until(Instant::MAX),
                config.ingress_budget,
            ),
            shut_down: false,
            shutdown_waiters: crate::waiters::WaitList::new(),
            counters: None,
            random: crate::keys::KeyedStream::new(prf.clone()),
            ports: crate::transport::ports::ConnectPorts::new(prf.clone()),
            dns_servers: config.dns_servers,
            autoconf: crate::ip::autoconf::Autoconf::EMPTY,
            zc: crate::socket::datagram::ZcSockets::new(),
            ipv4_idents: crate::ip::emit::Ipv4Idents::new(prf),
            gso_tail: zcnet_buffer::TxChain::new(),
            smol_at: None,
            asked: crate::ip::asked::Asked::new(),
        };
        state.iface.update_ip_addrs(|addrs| {
            if let Ipv4Config::Static(v4) = config.ipv4 {
                let _ = addrs.push(IpCidr::Ipv4(v4.address));
            }
            if let Some(v6) = config.ipv6 {
                let _ = addrs.push(IpCidr::Ipv6(v6.address));
            }
        });
        if let Ipv4Config::Static(StaticV4 {
            gateway: Some(gw), ..
        }) = config.ipv4
        {
            state
                .iface
                .routes_mut()
                .add_default_ipv4_route(gw)
                .map_err(|_| StackError::TooManyRoutes)?;
            // Resolve the gateway at once (see `Neighbors::prime`); egress's first run asks.
            state
                .link
                .neighbors
                .prime(gw.into(), smol_now(exec), &counters);
        }
        if let Some(gw) = config.ipv6.and_then(|v| v.gateway) {
            state
                .iface
                .routes_mut()
                .add_default_ipv6_route(gw)
                .map_err(|_| StackError::TooManyRoutes)?;
        }
        state.autoconf = crate::ip::autoconf::setup(&mut state, &config)?;
        event!(stack_created(&state));
        let inner = StackInner {
            state: RefCell::new(state),
            counters,
            exec,
            pool,
            link_signal: crate::link::carrier::LinkSignal::new(),
        };
        // SAFETY: as above, `claimed` gives this call the only access; written once (nothing
        // fails after this point, so the claim is never released again), then only shared
        // references are handed out.
        let inner: &'static StackInner = unsafe { (*resources.inner.get()).write(inner) };
        inner.state.borrow_mut().counters = Some(&inner.counters);
        let stack = Stack {
            inner,
            _local: PhantomData,
        };
        Ok((stack, crate::Runner { stack }))
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> StackStats {
        self.inner.counters.snapshot()
    }

    /// A handle that reads this stack's counters from any thread or interrupt handler.
    pub fn stats_reader(&self) -> crate::StatsReader {
        crate::StatsReader::new(&self.inner.counters)
    }

    /// The executor the stack runs on.
    pub fn executor(&self) -> &'static Executor {
        self.inner.exec
    }

    /// The pool the stack's frames come from.
    pub fn pool(&self) -> &'static FramePool {
        self.inner.pool
    }

    /// Tells this stack's [`TcpListener`](crate::tcp::TcpListener)s that their buffer sources
    /// may have buffers again: every listener short of listening sockets (its `make_buffers`
    /// returned `None`, or no socket slot was free) tries to re-arm at once.
    ///
    /// The stack does this by itself whenever the application drops a socket (TCP, UDP, ICMP,
    /// raw or DNS) and whenever a socket's slot is freed; call this when buffers come back any
    /// other way (a source that is refilled later, or by another part of the system), from the
    /// stack's own context.
    pub fn tcp_buffers_returned(&self) {
        self.with(|st| st.listener_ports.wake_slot_waiters());
    }

    pub(crate) fn now(&self) -> SmolInstant {
        smol_now(self.inner.exec)
    }

    /// Runs `f` with the state borrowed. Never called while it is borrowed already.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.inner.state.borrow_mut())
    }
}

/// What a TCP socket operation may touch besides its connection: the connection's record and
/// egress's waker.
pub(crate) struct TcpCx<'a> {
    pub(crate) meta: &'a mut TcpMeta,
    pub(crate) egress_waker: Option<&'a Waker>,
    /// [`Tasks::local`](crate::runner::Tasks::local), for the wakes the operation makes and the wakers it registers.
    pub(crate) local: Option<zcnet_executor::LocalSpawner>,
}

impl TcpCx<'_> {
    /// Wakes the egress task: the operation queued work for it.
    pub(crate) fn signal_egress(&self) {
        if let Some(w) = self.egress_waker {
            wake(self.local.as_ref(), w);
        }
    }
}
