//! The `stack_ingress` target: one whole [`Stack`] per process, fed frames and clock steps.
//!
//! The stack (DHCPv4 and SLAAC on, IPv6 link-local `fe80::ff:fe00:1`) runs on a
//! [`VirtualClock`] executor over a [`SimNic`] that the harness plays the device of. Its
//! application side: a [`TcpListener`] on port 80 with a backlog of 4 whose accepted
//! connections echo what they receive until they end ([`serve`]), and a zero-copy
//! [`DatagramSocket`] on port 7 that echoes every datagram back. A scripted peer (`fe80::2`,
//! MAC `02:00:00:00:00:02`) keeps one TCP connection to port 80 established across inputs and
//! answers the stack's ARP requests and neighbour solicitations for itself.
//!
//! Stacks cannot be torn down, so the one stack lives for the whole process and carries state
//! from input to input: a crash may need the inputs before it to reproduce. [`run`] records
//! every input when asked to ([`RECORD_ENV`]) and [`replay`] runs such a recording again, in
//! order; the harness is deterministic, so the failure comes back.
//!
//! An input is a sequence of operations ([`Harness::run`]): raw frames (optionally with their
//! checksums fixed), IP packets of any protocol, segments to the established connection
//! relative to its current sequence numbers, segments to the listener (a SYN with data is
//! completed, through a SYN cookie when the backlog is full), UDP datagrams, ARP,
//! NDP, DHCP replies to the client's current transaction, ICMP messages, and clock steps (at
//! most [`CLOCK_BUDGET`] an input). The executor runs until idle and every transmitted frame
//! is completed after each one; egress's timer is then never behind the clock. After the
//! input: [`FramePool::audit`] passes and no slot is unaccounted for, and the stack still
//! answers a ping and still acknowledges data on an established connection.

use std::cell::{RefCell, RefMut};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use zcnet_buffer::sim::SimNic;
use zcnet_buffer::{
    Capabilities, Driver, FramePool, HardwareAddress, LinkState, PoolConfig, RxFrame, TxError,
    TxFrame,
};
use zcnet_executor::{Executor, Platform};
use zcnet_stack::datagram::{DatagramQueue, DatagramSocket};
use zcnet_stack::fuzzing::Probe;
use zcnet_stack::tcp::{TcpBuffers, TcpListener, TcpSocket};
use zcnet_stack::{Config, Ipv4Config, Stack, StackResources, MAX_HELD_FRAMES};
use zcnet_tests::clock::VirtualClock;

use crate::frames::{self, flags, *};
use crate::input::Reader;

/// Slots in the pool.
pub const SLOTS: usize = 96;
/// The NIC's RX ring.
pub const RING: usize = 8;
/// The NIC's TX queue.
pub const TX_QUEUE: usize = 16;
/// Socket slots in the stack.
pub const SOCKETS: usize = 32;
/// The listener's port.
pub const LISTEN_PORT: u16 = 80;
/// The zero-copy echo socket's port.
pub const ECHO_PORT: u16 = 7;
/// The echo socket's queue.
pub const ECHO_QUEUE: usize = 4;
/// Operations per input at most (the rest of a longer input is ignored).
pub const MAX_OPS: usize = 64;
/// The peer's initial sequence number for the connections it opens.
pub const PEER_ISN: u32 = 0x1000_0000;
/// How far an input's clock steps may move the clock, together (a step beyond is cut short).
/// The clock keeps what earlier inputs moved it, so longer timers (DHCP leases) still run out
/// over several inputs, while millions of inputs stay well within the executor's clock
/// (`u64` nanoseconds, some 584 years).
pub const CLOCK_BUDGET: Duration = Duration::from_secs(3600);
/// Past this much virtual time an input's clock steps do nothing (the harness still moves the
/// clock for its own checks), so however long a run lasts the clock never reaches its end.
pub const CLOCK_HORIZON: Duration = Duration::from_secs(200 * 365 * 24 * 3600);

/// The device side of the harness: a [`SimNic`] behind a lock, so the harness can play the
/// device while the stack owns the driver.
struct SharedNic(&'static Mutex<SimNic>);

fn lock(nic: &Mutex<SimNic>) -> MutexGuard<'_, SimNic> {
    nic.lock().unwrap_or_else(|e| e.into_inner())
}

impl Driver for SharedNic {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        lock(self.0).poll_receive(cx)
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        lock(self.0).poll_transmit_frame(cx)
    }

    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        lock(self.0).transmit(frame)
    }

    fn capabilities(&self) -> Capabilities {
        lock(self.0).capabilities()
    }

    fn hardware_address(&self) -> HardwareAddress {
        lock(self.0).hardware_address()
    }

    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        lock(self.0).poll_link_state(cx)
    }
}

/// The scripted peer's view of its established connection.
#[derive(Clone, Copy, Debug, Default)]
struct Conn {
    /// The peer's port.
    port: u16,
    /// The next sequence number the stack expects (the last acknowledgement it sent).
    peer_seq: u32,
    /// The stack's next sequence number.
    stack_nxt: u32,
}

/// Counters of the harness, for the record.
#[derive(Clone, Copy, Debug, Default)]
pub struct HarnessStats {
    /// Inputs run.
    pub inputs: u64,
    /// Times the established connection had to be replaced (an input legitimately closed or
    /// reset it, or moved it out of ESTABLISHED).
    pub reconnects: u64,
    /// Times a reconnect needed the clock moved on first (fuzzed connections holding every
    /// socket slot until their keep-alive timeout).
    pub reconnect_waits: u64,
    /// Inputs after which the stack held a DHCP lease.
    pub with_lease: u64,
    /// Segments with data the stack sent the peer from the listener's port (the connections'
    /// echoes, retransmissions included).
    pub data_segments: u64,
}

/// The heads of the last [`FrameLog::LEN`] frames in and out, kept without allocating and
/// described only when a check fails.
#[derive(Default)]
struct FrameLog {
    /// (received, head bytes, frame length), oldest first.
    frames: std::collections::VecDeque<(bool, [u8; FrameLog::HEAD], usize)>,
}

impl FrameLog {
    const LEN: usize = 16;
    /// Enough for the Ethernet and IPv6 headers and the first bytes of the transport header.
    const HEAD: usize = 80;

    fn note(&mut self, received: bool, frame: &[u8]) {
        if self.frames.len() == Self::LEN {
            self.frames.pop_front();
        }
        let n = frame.len().min(Self::HEAD);
        let mut head = [0u8; Self::HEAD];
        head[..n].copy_from_slice(&frame[..n]);
        self.frames.push_back((received, head, frame.len()));
    }
}

impl std::fmt::Display for FrameLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (received, head, len) in &self.frames {
            let dir = if *received { "in: " } else { "out:" };
            let head = &head[..(*len).min(Self::HEAD)];
            write!(f, "\n  {dir} {}", frames::summary(head, *len))?;
        }
        Ok(())
    }
}

/// The stack under test and the scripted peer.
pub struct Harness {
    clock: &'static VirtualClock,
    exec: &'static Executor,
    pool: &'static FramePool,
    nic: &'static Mutex<SimNic>,
    stack: Stack,
    conn: Conn,
    next_port: u16,
    ping_seq: u16,
    /// The DHCP client's current transaction.
    dhcp_xid: Option<u32>,
    /// Echo replies seen: (id, sequence).
    replies: Vec<(u16, u16)>,
    /// Acknowledgement numbers the stack sent on the connection since the last check.
    acks: Vec<u32>,
    /// A SYN-ACK seen: (peer port, stack's sequence number).
    synack: Option<(u16, u32)>,
    /// Answers the peer owes (ARP replies, neighbour advertisements).
    owed: Vec<Vec<u8>>,
    /// What the current input's clock steps may still move the clock (see [`CLOCK_BUDGET`]).
    clock_budget: Duration,
    /// The last frames the device received and sent (for failure messages).
    log: FrameLog,
    stats: HarnessStats,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("conn", &self.conn)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn tcp_buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(2048, 2048))
}

/// Sequence-number order: whether `a` is after `b`.
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// An accepted connection's application: echoes what it receives until the peer closes or
/// the connection fails, then closes. Every other connection echoes without a copy: it takes
/// each received segment in its frame ([`TcpSocket::recv_segment`]), holds it while it waits
/// for a TX frame, writes the first bytes of it into that frame and queues the frame itself
/// ([`TcpSocket::send_frame`]); the others copy ([`TcpSocket::read`] /
/// [`TcpSocket::write_all`]).
async fn serve(mut s: TcpSocket, zero_copy: bool) {
    if zero_copy {
        while let Ok(Some(seg)) = s.recv_segment().await {
            let mut f = s.tx_frame().await;
            let n = seg.len().min(f.tailroom());
            if let Ok(b) = f.append(n) {
                b.copy_from_slice(&seg.payload()[..n]);
            }
            drop(seg);
            if s.send_frame(f).await.is_err() {
                break;
            }
        }
    } else {
        let mut buf = [0u8; 512];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    }
    s.close();
}

std::thread_local! {
    /// The harness: a stack belongs to the thread it was built on (libFuzzer runs every input
    /// on one thread), so it lives in a thread-local, leaked for `'static`.
    static HARNESS: &'static RefCell<Harness> = Box::leak(Box::new(RefCell::new(Harness::new())));
}

/// The calling thread's harness, built on first use.
pub fn harness() -> RefMut<'static, Harness> {
    HARNESS.with(|h| *h).borrow_mut()
}

/// Runs one fuzz input against the process's stack (the target's whole body). With the
/// environment variable [`RECORD_ENV`] set, the input is first appended to that file (see
/// [`replay`]).
pub fn run(data: &[u8]) {
    record(data);
    harness().run(data);
}

/// The environment variable naming the file [`run`] records its inputs in: each one as its
/// length (four bytes, big endian) and its bytes, written before the input runs, so the file
/// ends with the input that failed.
pub const RECORD_ENV: &str = "ZCNET_FUZZ_RECORD";

fn record(data: &[u8]) {
    static FILE: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();
    let file = FILE.get_or_init(|| {
        let path = std::env::var_os(RECORD_ENV)?;
        let f = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        Some(Mutex::new(f))
    });
    if let Some(f) = file {
        use std::io::Write;
        let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
        let len = u32::try_from(data.len()).expect("input under 4 GiB");
        f.write_all(&len.to_be_bytes())
            .and_then(|()| f.write_all(data))
            .expect("recording the input");
    }
}

/// Runs every input of a recording [`run`] made (see [`RECORD_ENV`]) against the process's
/// stack, in order: a failure that depends on the state the inputs before it built up
/// reproduces, since the harness is deterministic. Returns how many inputs ran.
pub fn replay(recording: &[u8]) -> usize {
    let mut rest = recording;
    let mut n = 0;
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        let len = (u32::from_be_bytes(*len) as usize).min(tail.len());
        let (input, tail) = tail.split_at(len);
        harness().run(input);
        rest = tail;
        n += 1;
    }
    n
}

impl Harness {
    /// Builds the stack, its application tasks and the peer's connection.
    pub fn new() -> Self {
        let clock = VirtualClock::leak();
        let exec = Executor::leak(clock);
        let pool = FramePool::leak(PoolConfig::new(SLOTS)).expect("pool");
        let nic: &'static Mutex<SimNic> =
            Box::leak(Box::new(Mutex::new(SimNic::new(pool, RING, TX_QUEUE))));
        let driver: &'static mut SharedNic = Box::leak(Box::new(SharedNic(nic)));
        let config = Config {
            ipv4: Ipv4Config::Dhcp,
            slaac: true,
            ..Config::new(zcnet_tests::secret::seeded(0xf022))
        };
        let resources: &'static StackResources<SOCKETS> = StackResources::leak();
        let (stack, runner) = Stack::new(exec, pool, driver, config, resources).expect("stack");
        let spawner = exec.local_spawner();
        runner.spawn(spawner);

        let mut listener = TcpListener::bind(stack, LISTEN_PORT, 4, tcp_buffers).expect("listener");
        spawner.spawn(async move {
            let mut zero_copy = false;
            loop {
                let mut s = listener.accept().await.expect("accept");
                s.set_keep_alive(Some(Duration::from_secs(30)));
                s.set_timeout(Some(Duration::from_secs(120)));
                zero_copy = !zero_copy;
                spawner.spawn(serve(s, zero_copy));
            }
        });
        let echo = DatagramSocket::bind(stack, ECHO_PORT, DatagramQueue::with_capacity(ECHO_QUEUE))
            .expect("datagram socket");
        spawner.spawn(async move {
            let mut copy = [0u8; 256];
            loop {
                let d = echo.recv().await;
                let src = d.src();
                let n = d.payload().len().min(copy.len());
                copy[..n].copy_from_slice(&d.payload()[..n]);
                drop(d);
                let mut f = echo.tx_frame().await;
                if let Ok(b) = f.append(n) {
                    b.copy_from_slice(&copy[..n]);
                }
                let _ = echo.send_to(f, src).await;
            }
        });

        let mut h = Harness {
            clock,
            exec,
            pool,
            nic,
            stack,
            conn: Conn::default(),
            next_port: 40000,
            ping_seq: 0,
            dhcp_xid: None,
            replies: Vec::new(),
            acks: Vec::new(),
            synack: None,
            owed: Vec::new(),
            clock_budget: CLOCK_BUDGET,
            log: FrameLog::default(),
            stats: HarnessStats::default(),
        };
        h.settle();
        assert!(h.connect(), "the first connection to the listener");
        h.check_tcp();
        h.check_ping();
        h
    }

    /// The harness's counters.
    pub fn stats(&self) -> HarnessStats {
        self.stats
    }

    /// The stack under test.
    pub fn stack(&self) -> Stack {
        self.stack
    }

    /// Runs the executor until idle and completes every transmitted frame, repeatedly, until
    /// nothing moves; then delivers the answers the peer owes (bounded).
    fn settle(&mut self) {
        for round in 0..8 {
            for _ in 0..64 {
                self.exec.run_until_idle();
                let sent = lock(self.nic).device_complete_tx(usize::MAX);
                if sent.is_empty() {
                    break;
                }
                for f in &sent {
                    self.observe(f);
                }
            }
            if self.owed.is_empty() || round == 7 {
                break;
            }
            for f in std::mem::take(&mut self.owed) {
                lock(self.nic).device_receive(&f);
            }
        }
        self.owed.clear();
        // With the executor idle, every timer due has fired: egress has run and re-armed for a
        // deadline still ahead, or has none. One left behind the clock never fired.
        let (armed, _) = Probe::new(self.stack).egress_deadlines();
        let now_ms = self.clock.now().as_nanos() / 1_000_000;
        assert!(
            armed.is_none_or(|a| a >= i64::try_from(now_ms).unwrap_or(i64::MAX)),
            "egress's timer was left behind the clock: {}",
            self.describe()
        );
    }

    /// Reads a frame the stack sent, as the peer.
    fn observe(&mut self, f: &[u8]) {
        self.log.note(false, f);
        if f.len() >= 42 && u16::from_be_bytes([f[12], f[13]]) == ETH_ARP {
            let a = &f[14..];
            // A request for the peer's IPv4 address: answer it.
            if a[6..8] == [0, 1] && a[24..28] == PEER_V4 {
                let mut sender = [0u8; 6];
                sender.copy_from_slice(&a[8..14]);
                let mut sip = [0u8; 4];
                sip.copy_from_slice(&a[14..18]);
                self.owed.push(arp(2, PEER_MAC, PEER_V4, sender, sip));
            }
            return;
        }
        if let Some((xid, _)) = frames::dhcp_client_xid(f) {
            self.dhcp_xid = Some(xid);
            return;
        }
        let Some((proto, _dst, l4)) = l4_of(f) else {
            return;
        };
        match proto {
            P_ICMP if l4.len() >= 8 && l4[0] == 0 => self.replies.push((
                u16::from_be_bytes([l4[4], l4[5]]),
                u16::from_be_bytes([l4[6], l4[7]]),
            )),
            P_ICMPV6 if l4.len() >= 8 && l4[0] == 129 => self.replies.push((
                u16::from_be_bytes([l4[4], l4[5]]),
                u16::from_be_bytes([l4[6], l4[7]]),
            )),
            // A neighbour solicitation for the peer: advertise.
            P_ICMPV6 if l4.len() >= 24 && l4[0] == 135 && l4[8..24] == PEER_V6 => {
                self.owed.push(ndp_na(PEER_MAC, PEER_V6, OUR_MAC, OUR_V6));
            }
            P_TCP => {
                let Some((seg, dst)) = parse_tcp(f) else {
                    return;
                };
                if seg.src_port != LISTEN_PORT || dst != PEER_V6 {
                    return;
                }
                if seg.flags & (flags::SYN | flags::ACK) == flags::SYN | flags::ACK {
                    self.synack = Some((seg.dst_port, seg.seq));
                }
                if seg.len > 0 {
                    self.stats.data_segments += 1;
                }
                if seg.dst_port != self.conn.port {
                    return;
                }
                if seg.flags & flags::ACK != 0 && seg.flags & flags::RST == 0 {
                    self.acks.push(seg.ack);
                    self.conn.peer_seq = seg.ack;
                }
                let end = seg
                    .seq
                    .wrapping_add(seg.len as u32)
                    .wrapping_add(u32::from(seg.flags & flags::SYN != 0))
                    .wrapping_add(u32::from(seg.flags & flags::FIN != 0));
                if after(end, self.conn.stack_nxt) {
                    self.conn.stack_nxt = end;
                }
            }
            _ => {}
        }
    }

    /// The device receives `frame`; then the stack runs.
    fn inject(&mut self, frame: &[u8]) {
        self.log.note(true, frame);
        lock(self.nic).device_receive(frame);
        self.settle();
    }

    /// The clock moves on by `d`; then the stack runs.
    fn advance(&mut self, d: Duration) {
        self.clock.advance(d);
        self.settle();
    }

    /// The peer announces its link-layer addresses (a neighbour solicitation for the stack's
    /// link-local address, and an ARP request when the stack has an IPv4 address), as a peer
    /// about to talk to it would.
    ///
    /// An address change (a DHCP lease ending, a SLAAC prefix expiring) while it announces
    /// makes smoltcp flush its whole neighbour cache (`Interface::update_ip_addrs`), IPv6
    /// neighbours included, and within a second of a failed lookup smoltcp drops a reply to an
    /// unknown neighbour without asking (one solicitation per second for the whole cache): the
    /// peer announces again then, as a peer whose first packet went unanswered would.
    fn announce(&mut self) {
        for _ in 0..2 {
            let changes = self.stack.stats().config_changes;
            self.inject(&ndp_ns(PEER_MAC, PEER_V6, OUR_V6));
            if let Some(v4) = self.stack.ipv4_config() {
                self.inject(&arp(
                    1,
                    PEER_MAC,
                    PEER_V4,
                    [0; 6],
                    v4.address.address().octets(),
                ));
            }
            if self.stack.stats().config_changes == changes {
                return;
            }
        }
    }

    /// Opens a new connection from the peer to the listener; `false` if the stack did not
    /// answer the SYN.
    fn connect(&mut self) -> bool {
        self.announce();
        let port = self.next_port;
        self.next_port = if self.next_port >= 60000 {
            40000
        } else {
            self.next_port + 1
        };
        self.synack = None;
        let mss = [2, 4, 0x05, 0xa0];
        self.inject(&tcp6_frame(
            port,
            LISTEN_PORT,
            PEER_ISN,
            0,
            flags::SYN,
            8192,
            &mss,
            &[],
        ));
        let Some((p, seq)) = self.synack.take() else {
            return false;
        };
        if p != port {
            return false;
        }
        self.conn = Conn {
            port,
            peer_seq: PEER_ISN.wrapping_add(1),
            stack_nxt: seq.wrapping_add(1),
        };
        self.inject(&tcp6_frame(
            port,
            LISTEN_PORT,
            self.conn.peer_seq,
            self.conn.stack_nxt,
            flags::ACK,
            8192,
            &[],
            &[],
        ));
        true
    }

    /// Sends one byte on the connection at the stack's expected sequence number; whether the
    /// stack acknowledged it.
    fn data_acked(&mut self) -> bool {
        self.acks.clear();
        let seq = self.conn.peer_seq;
        self.inject(&tcp6_frame(
            self.conn.port,
            LISTEN_PORT,
            seq,
            self.conn.stack_nxt,
            flags::ACK | flags::PSH,
            8192,
            &[],
            b"x",
        ));
        // Past any delayed-ACK timer.
        self.advance(Duration::from_millis(200));
        self.acks.contains(&seq.wrapping_add(1))
    }

    /// The established connection still acknowledges data; when an input ended it, a new one
    /// is opened (moving the clock on once if the stack has no room for it yet) and must.
    fn check_tcp(&mut self) {
        self.announce();
        if self.data_acked() {
            return;
        }
        self.stats.reconnects += 1;
        // Fuzzed connections may hold every socket slot or the listener's backlog until their
        // keep-alive gives up, and fuzzed neighbours every table place. And a SYN cookie answers
        // a SYN even when no socket is free; the ACK that completes it then finds no room and
        // is dropped (`syn_cookie_accept_drops`), so the client believes in a connection the
        // stack does not have. Either way the fuzzed connections time out (two minutes without
        // a segment): try again after them.
        if !self.connect() || !self.data_acked() {
            self.stats.reconnect_waits += 1;
            self.advance(Duration::from_secs(600));
            assert!(
                self.connect(),
                "the listener answers no SYN even after 10 minutes: {}",
                self.describe()
            );
        }
        assert!(
            self.data_acked(),
            "a new connection does not acknowledge data: {:?} {}",
            self.conn,
            self.describe()
        );
    }

    /// The clock, the stack's counters, the pool's occupancy, egress's timer, the stack's
    /// addresses, the last frames in and out and the TCP table, for a failure message.
    fn describe(&self) -> String {
        let probe = Probe::new(self.stack);
        let mut conns = String::new();
        probe.tcp_connections(|c| conns.push_str(&format!("\n  {c:?}")));
        format!(
            "at {:?}: {:?} {:?} {:?}\negress timer (armed, due) in ms: {:?}\naddresses: {:?}\n\
             last frames:{}{conns}",
            self.clock.now(),
            self.stack.stats(),
            self.pool.occupancy(),
            probe.tcp_totals(),
            probe.egress_deadlines(),
            self.stack.ip_addrs().as_slice(),
            self.log,
        )
    }

    /// The stack answers a ping to its link-local address, and to its IPv4 address if it has
    /// one.
    fn check_ping(&mut self) {
        self.announce();
        self.ping_seq = self.ping_seq.wrapping_add(1);
        let seq = self.ping_seq;
        self.replies.clear();
        self.inject(&ping6(0xfeed, seq, b"zcnet fuzz"));
        assert!(
            self.replies.contains(&(0xfeed, seq)),
            "no reply to a ping over IPv6: {}",
            self.describe()
        );
        if let Some(v4) = self.stack.ipv4_config() {
            self.stats.with_lease += 1;
            self.replies.clear();
            self.inject(&ping4(
                v4.address.address().octets(),
                0xbeef,
                seq,
                b"zcnet fuzz",
            ));
            assert!(
                self.replies.contains(&(0xbeef, seq)),
                "no reply to a ping over IPv4 at {v4:?}: {}",
                self.describe()
            );
        }
    }

    /// The pool is consistent and holds nothing it should not: nothing in the device; received
    /// frames (STACK) and frames kept for retransmission (RETAINED) only within the TCP
    /// connections' budgets (each connection holds at most the pool slots its budget reserved);
    /// at most the echo socket's queue lent; TX slots only for the stack's scratch and spare
    /// frames and the frames held for neighbour resolution; the ring full.
    fn check_pool(&mut self) {
        let occ = self.pool.audit().expect("pool audit");
        let (reserved, _) = Probe::new(self.stack).tcp_totals().reserved;
        let ok = occ.device == 0
            && occ.sent == 0
            && occ.stack + occ.retained <= reserved
            && occ.lent <= ECHO_QUEUE
            && occ.tx <= 2 + MAX_HELD_FRAMES
            && occ.posted == RING
            && occ.total() == SLOTS;
        assert!(ok, "slots unaccounted for: {}", self.describe());
    }

    /// Runs one input: its operations, then the checks.
    pub fn run(&mut self, data: &[u8]) {
        self.stats.inputs += 1;
        self.clock_budget = if self.clock.now().as_nanos() < CLOCK_HORIZON.as_nanos() as u64 {
            CLOCK_BUDGET
        } else {
            Duration::ZERO
        };
        let mut r = Reader::new(data);
        for _ in 0..MAX_OPS {
            if r.is_empty() {
                break;
            }
            self.op(&mut r);
        }
        self.settle();
        self.check_pool();
        self.check_ping();
        self.check_tcp();
        self.check_pool();
    }

    /// One operation.
    fn op(&mut self, r: &mut Reader<'_>) {
        let op = r.u8();
        let bit = op & 0x80 != 0;
        match (op & 0x7f) % 10 {
            // A raw frame, checksums fixed when the high bit is set.
            0 => {
                let mut f = r.long(1514).to_vec();
                if bit {
                    fix_checksums(&mut f);
                }
                self.inject(&f);
            }
            // An IP packet of any protocol from the peer, checksums fixed.
            1 => {
                let proto = r.u8();
                let payload = r.long(1400);
                let mut f = if bit {
                    let hop = r.u8();
                    eth(
                        OUR_MAC,
                        PEER_MAC,
                        ETH_IPV6,
                        &ipv6(PEER_V6, OUR_V6, proto, hop, payload),
                    )
                } else {
                    let dst = self.our_v4();
                    eth(
                        OUR_MAC,
                        PEER_MAC,
                        ETH_IPV4,
                        &ipv4(PEER_V4, dst, proto, payload),
                    )
                };
                fix_checksums(&mut f);
                self.inject(&f);
            }
            // A segment on the established connection, numbered relative to its state.
            2 => {
                let fl = r.u8();
                let (seq, ack) = if bit {
                    (r.u32(), r.u32())
                } else {
                    let s = r.u16() as i16 as i32 as u32;
                    let a = r.u16() as i16 as i32 as u32;
                    (
                        self.conn.peer_seq.wrapping_add(s),
                        self.conn.stack_nxt.wrapping_add(a),
                    )
                };
                let window = r.u16();
                let options = r.short(40);
                let payload = r.short(255);
                let f = tcp6_frame(
                    self.conn.port,
                    LISTEN_PORT,
                    seq,
                    ack,
                    fl,
                    window,
                    options,
                    payload,
                );
                self.inject(&f);
            }
            // A segment from another port of the peer to the listener (or any port).
            3 => {
                let src = r.u16();
                let dst = if r.u8() & 1 == 0 {
                    LISTEN_PORT
                } else {
                    r.u16()
                };
                let fl = r.u8();
                let (seq, ack, window) = (r.u32(), r.u32(), r.u16());
                let options = r.short(40);
                let payload = r.short(255);
                let f = if bit {
                    tcp6_frame(src, dst, seq, ack, fl, window, options, payload)
                } else {
                    let seg = tcp(src, dst, seq, ack, fl, window, options, payload);
                    let mut f = eth(
                        OUR_MAC,
                        PEER_MAC,
                        ETH_IPV4,
                        &ipv4(PEER_V4, self.our_v4(), P_TCP, &seg),
                    );
                    fix_checksums(&mut f);
                    f
                };
                // A SYN with data (over IPv6) to the listener that the stack answers is
                // completed: the peer's ACK brings the data and the SYN's options again. When
                // the backlog is full (SYNs without data fill it) the SYN-ACK carried a SYN
                // cookie, and the ACK's timestamp echo, whatever the input put there, is
                // decoded as the cookie's options.
                let complete = bit
                    && dst == LISTEN_PORT
                    && !payload.is_empty()
                    && fl & (flags::SYN | flags::ACK | flags::RST) == flags::SYN;
                if complete {
                    self.synack = None;
                }
                self.inject(&f);
                if let (true, Some((p, s))) = (complete, self.synack.take()) {
                    if p == src {
                        self.inject(&tcp6_frame(
                            src,
                            dst,
                            seq.wrapping_add(1),
                            s.wrapping_add(1),
                            flags::ACK | flags::PSH,
                            window,
                            options,
                            payload,
                        ));
                    }
                }
            }
            // A UDP datagram: to the echo socket, DHCP, or any port; checksum wrong when the
            // high bit is set.
            4 => {
                let sel = r.u8();
                let dst_port = match sel % 4 {
                    0 | 1 => ECHO_PORT,
                    2 => 68,
                    _ => r.u16(),
                };
                let src_port = r.u16();
                let payload = r.long(1400);
                let d = udp(src_port, dst_port, payload);
                let mut f = if sel & 0x10 != 0 {
                    eth(
                        OUR_MAC,
                        PEER_MAC,
                        ETH_IPV6,
                        &ipv6(PEER_V6, OUR_V6, P_UDP, 64, &d),
                    )
                } else {
                    let dst = if sel & 0x20 != 0 {
                        [255; 4]
                    } else {
                        self.our_v4()
                    };
                    let mac = if sel & 0x20 != 0 { BROADCAST } else { OUR_MAC };
                    eth(mac, PEER_MAC, ETH_IPV4, &ipv4(PEER_V4, dst, P_UDP, &d))
                };
                fix_checksums(&mut f);
                if bit {
                    let n = f.len();
                    f[n - 1] ^= 0x5a;
                }
                self.inject(&f);
            }
            // ARP.
            5 => {
                let kind = r.u16() % 4;
                let mut mac = PEER_MAC;
                if bit {
                    mac.copy_from_slice(&r.u32().to_be_bytes().repeat(2)[..6]);
                }
                let sip = if r.u8() & 1 == 0 {
                    PEER_V4
                } else {
                    r.u32().to_be_bytes()
                };
                let tip = if r.u8() & 1 == 0 {
                    self.our_v4()
                } else {
                    r.u32().to_be_bytes()
                };
                self.inject(&arp(kind, mac, sip, OUR_MAC, tip));
            }
            // NDP (router / neighbour solicitations and advertisements, redirects) with a
            // fuzzed body, or a well-formed router advertisement of a fuzzed prefix.
            6 => {
                if bit {
                    let mut prefix = [0u8; 8];
                    let b = r.bytes(8);
                    prefix[..b.len()].copy_from_slice(b);
                    if prefix.iter().all(|b| *b == 0) {
                        prefix[0] = 0xfd;
                    }
                    self.inject(&ndp_ra(prefix));
                } else {
                    let ty = 133 + r.u8() % 5;
                    let hop = if r.u8() & 1 == 0 { 255 } else { r.u8() };
                    let mut icmp = vec![ty, 0, 0, 0];
                    icmp.extend_from_slice(r.long(256));
                    let dst = if r.u8() & 1 == 0 {
                        OUR_V6
                    } else {
                        [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
                    };
                    let mut f = eth(
                        OUR_MAC,
                        PEER_MAC,
                        ETH_IPV6,
                        &ipv6(PEER_V6, dst, P_ICMPV6, hop, &icmp),
                    );
                    fix_checksums(&mut f);
                    self.inject(&f);
                }
            }
            // The clock moves on: milliseconds, or seconds with the high bit.
            // (Within the input's clock budget: see `CLOCK_BUDGET`.)
            7 => {
                let n = u64::from(r.u16());
                let d = if bit {
                    Duration::from_secs(n)
                } else {
                    Duration::from_millis(n)
                };
                let d = d.min(self.clock_budget);
                self.clock_budget -= d;
                self.advance(d);
            }
            // A DHCP reply to the client's current transaction.
            8 => {
                let kind = r.u8() % 9;
                let xid = match self.dhcp_xid {
                    Some(x) if !bit => x,
                    _ => r.u32(),
                };
                let lease = r.u32() % 200_000;
                let extra = r.short(96);
                self.inject(&dhcp_reply(kind, xid, lease, extra));
            }
            // ICMP (v4 or v6) of any type, e.g. errors quoting a segment of ours.
            _ => {
                let ty = r.u8();
                let code = r.u8();
                if bit && ty == 2 && code & 0x80 != 0 {
                    self.packet_too_big(r);
                    return;
                }
                let mut icmp = vec![ty, code, 0, 0];
                icmp.extend_from_slice(r.long(600));
                let mut f = if bit {
                    eth(
                        OUR_MAC,
                        PEER_MAC,
                        ETH_IPV6,
                        &ipv6(PEER_V6, OUR_V6, P_ICMPV6, 64, &icmp),
                    )
                } else {
                    eth(
                        OUR_MAC,
                        PEER_MAC,
                        ETH_IPV4,
                        &ipv4(PEER_V4, self.our_v4(), P_ICMP, &icmp),
                    )
                };
                fix_checksums(&mut f);
                self.inject(&f);
            }
        }
    }

    /// An ICMPv6 "packet too big" (path MTU discovery) quoting a segment of the established
    /// connection: its sequence number near the highest the stack sent (in flight or not), the
    /// MTU fuzzed.
    fn packet_too_big(&mut self, r: &mut Reader<'_>) {
        let mtu = r.u32();
        let off = r.u16() as i16 as i32 as u32;
        let seq = self.conn.stack_nxt.wrapping_add(off);
        // The quote: the IPv6 header and the first 8 bytes of the TCP header (ports and
        // sequence number), as much as the stack reads.
        let mut quoted = LISTEN_PORT.to_be_bytes().to_vec();
        quoted.extend_from_slice(&self.conn.port.to_be_bytes());
        quoted.extend_from_slice(&seq.to_be_bytes());
        let mut icmp = vec![2, 0, 0, 0];
        icmp.extend_from_slice(&mtu.to_be_bytes());
        icmp.extend_from_slice(&ipv6(OUR_V6, PEER_V6, P_TCP, 64, &quoted));
        let f = peer6_frame(P_ICMPV6, &icmp);
        self.inject(&f);
    }

    /// The stack's IPv4 address, or the one the corpus's DHCP server offers.
    fn our_v4(&self) -> [u8; 4] {
        self.stack
            .ipv4_config()
            .map(|v| v.address.address().octets())
            .unwrap_or(OUR_V4)
    }
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}
