//! The README's first command: two zcnet stacks in one process, linked by the in-memory wire
//! of [`zcnet_buffer::sim`], doing what a user would, step by step, and what each step cost.
//! Needs the `std` feature; no root, no setup.
//!
//! ```text
//! cargo run -p zcnet-examples --bin demo
//! ```
//!
//! ```text
//!   stack A 10.0.0.1/24                 in-memory wire               stack B 10.0.0.2/24
//!   ping, HTTP client, TCP client,  ◄──────────────────────────►  HTTP server (port 80),
//!   zero-copy UDP, DNS lookup          (zcnet_buffer::sim)         echo (7, TCP + zero-copy
//!                                                                  UDP), DNS responder (53)
//! ```
//!
//! Both stacks and every server run on one [`Executor`] on a virtual clock ([`SimClock`]):
//! time moves only when nothing is ready to run, straight to the next timer. So the run is
//! deterministic (the same frames, polls and copies every time; only the numbers drawn from
//! the stacks' secrets, which come from the OS's random source, differ: sequence numbers,
//! ports, IPv4 identifications) and takes well under a second of real time.
//!
//! The steps: (1) static addresses (zcnet has a DHCPv4 client but no DHCP server, so both
//! sides are configured statically), (2) a ping from A to B on an ICMP socket, (3) an HTTP GET
//! from A against the examples' [`http`](crate::http) server on B, (4) 1 MiB through the
//! examples' [`echo`](crate::echo) server on B and back, compared byte for byte, (5) datagrams
//! on zcnet's zero-copy [`DatagramSocket`] to B's zero-copy UDP echo and back, (6) a DNS lookup
//! from A ([`DnsSocket`]) against a small responder on B that answers on a zero-copy datagram
//! socket. After each step the demo prints what it cost: frames on the wire each way (the
//! drivers' counters), ingress and egress polls of each stack ([`Stack::stats`]) and payload
//! bytes copied, per site ([`LEDGER`]); at the end the audit of both frame pools
//! ([`FramePool::audit`]).
//!
//! [`run`] returns a [`DemoSummary`] that says what each step achieved; `tests/tests/demo.rs`
//! checks it. [`pair`] (two stacks over the wire, ready to use) is what the examples' unit
//! tests run their servers on.

use std::fmt::Write as _;
use std::future::Future;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join;
use zcnet_buffer::ledger::{CopySite, LedgerSnapshot, LEDGER};
use zcnet_buffer::sim::{wire_pair, Faults, WireEnd, WireHandle, WireStats};
use zcnet_buffer::{AuditError, FramePool, Occupancy, PoolConfig};
use zcnet_executor::time::timeout;
use zcnet_executor::{Executor, Instant, Platform};
use zcnet_stack::datagram::{DatagramQueue, DatagramSocket};
use zcnet_stack::dns::{DnsKind, DnsSocket};
use zcnet_stack::icmp::{IcmpBuffers, IcmpSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpSocket};
use zcnet_stack::{
    Config, IpAddress, IpEndpoint, Ipv4Address, Ipv4Cidr, Ipv4Config, Stack, StackResources,
    StackStats, StaticV4,
};

use crate::echo::{EchoConfig, EchoServer, UdpEcho};
use crate::http::{HttpConfig, HttpServer};

/// Addresses of stack A (10.0.0.1) and stack B (10.0.0.2), both /24.
pub const ADDR: [Ipv4Address; 2] = [Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2)];

/// Socket slots per stack in [`pair`]: enough for the servers' listeners and a few
/// connections (smoltcp walks every slot on each egress pass, so the table is kept small).
pub const SOCKETS: usize = 48;

/// Frame-pool slots per stack in the demo.
pub const SLOTS: usize = 512;

/// The name B's DNS responder knows; it answers with B's own address.
pub const DNS_NAME: &str = "b.zcnet.test";

/// Bytes sent through the echo server in step 4 (and expected back).
pub const TCP_BYTES: usize = 1 << 20;

/// Pings in step 2.
pub const PINGS: u16 = 3;

/// Datagrams exchanged in step 5.
pub const DATAGRAMS: usize = 16;
/// Payload bytes per datagram in step 5.
pub const DATAGRAM_LEN: usize = 1024;

/// The page B's HTTP server serves at `/` in the demo.
pub const PAGE: &str = "<!doctype html>
<html lang=\"en\">
<head><meta charset=\"utf-8\"><title>zcnet demo</title></head>
<body><h1>Hello from zcnet</h1>
<p>Served by stack B to stack A over an in-memory wire, in one process.</p></body>
</html>
";

/// A virtual clock for the executor: time stands still while tasks run and jumps to the next
/// timer's deadline when none is ready, so a run with timers (delayed ACKs, timeouts) is
/// deterministic and as fast as the CPU allows.
///
/// [`wait`](Platform::wait) with no deadline and no pending signal would never return on a
/// real clock (nothing left to run, nothing scheduled): here it panics instead of hanging.
#[derive(Debug, Default)]
pub struct SimClock {
    nanos: AtomicU64,
    signalled: AtomicBool,
}

impl SimClock {
    /// A clock at zero, leaked so an executor can hold it for `'static`.
    pub fn leak() -> &'static SimClock {
        Box::leak(Box::default())
    }
}

impl Platform for SimClock {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    fn wait(&self, deadline: Option<Instant>) {
        if self.signalled.swap(false, Ordering::AcqRel) {
            return;
        }
        match deadline {
            Some(d) => {
                self.nanos.fetch_max(d.as_nanos(), Ordering::Relaxed);
            }
            None => panic!("SimClock: nothing to run and no timer: the program would hang"),
        }
    }

    fn signal(&self) {
        self.signalled.store(true, Ordering::Release);
    }
}

/// Two stacks linked by an in-memory wire on one executor, their runners spawned.
#[derive(Debug)]
pub struct Pair {
    /// The executor both stacks (and whatever the caller spawns) run on.
    pub exec: &'static Executor,
    /// Stack A ([`ADDR`]`[0]`) and stack B ([`ADDR`]`[1]`).
    pub stacks: [Stack; 2],
    /// The wire's ends, for their counters ([`WireHandle::tx_stats`]: what left that end).
    pub ends: [WireHandle; 2],
    /// Each stack's frame pool.
    pub pools: [&'static FramePool; 2],
}

/// Builds two stacks over a perfect in-memory wire ([`Faults::default`]), each with a pool of
/// `slots` slots of 2048 bytes, [`SOCKETS`] socket slots and the static address
/// [`ADDR`]`[i]`/24, on a new executor on a [`SimClock`]; `configure(i, &mut config)` may
/// adjust stack `i`'s configuration first. Everything is leaked (`'static`, as a kernel's
/// would be).
pub fn pair(slots: usize, mut configure: impl FnMut(usize, &mut Config)) -> Pair {
    let exec = Executor::leak(SimClock::leak());
    let pools = [
        FramePool::leak(PoolConfig::new(slots)).expect("pool"),
        FramePool::leak(PoolConfig::new(slots)).expect("pool"),
    ];
    let (a, b) = wire_pair(pools, Faults::default());
    let ends = [a.handle(), b.handle()];
    let mut stack = |i: usize, end: WireEnd| {
        let mut config = Config {
            ipv4: Ipv4Config::Static(StaticV4 {
                address: Ipv4Cidr::new(ADDR[i], 24),
                gateway: None,
            }),
            // Drawn from the OS at every run, as on a real network: the counts the demo prints
            // do not depend on it.
            ..Config::new(crate::secret::from_os().expect("a secret for the stack"))
        };
        configure(i, &mut config);
        let end: &'static mut WireEnd = Box::leak(Box::new(end));
        let resources: &'static StackResources<SOCKETS> = StackResources::leak();
        let (stack, runner) =
            Stack::new(exec, pools[i], end, config, resources).expect("stack over the wire");
        runner.spawn(exec.local_spawner());
        stack
    };
    let stacks = [stack(0, a), stack(1, b)];
    Pair {
        exec,
        stacks,
        ends,
        pools,
    }
}

/// What one step cost, from counters read before and after it.
#[derive(Clone, Debug, Default)]
pub struct Cost {
    /// Frames the wire carried from A to B and from B to A (the drivers' counters).
    pub frames: [u64; 2],
    /// Frames each stack handed to its driver ([`StackStats::frames_out`]).
    pub frames_out: [u64; 2],
    /// Ingress plus egress polls of stack A and of stack B ([`StackStats::polls`]).
    pub polls: [u64; 2],
    /// Payload copies made by zcnet and the code on it during the step (the copy ledger).
    pub copies: LedgerSnapshot,
    /// Simulated time the step itself took (not the settling pause after it): zero when
    /// nothing waited for a timer, since the virtual clock moves only when nothing can run.
    pub time: Duration,
}

/// One step's outcome.
#[derive(Clone, Debug)]
pub struct Step {
    /// Short name ("ping", "http", ...).
    pub name: &'static str,
    /// Whether the step did what it should.
    pub ok: bool,
    /// What happened, one line.
    pub detail: String,
    /// What it cost.
    pub cost: Cost,
}

/// What the demo achieved; its test checks every field.
#[derive(Clone, Debug, Default)]
pub struct DemoSummary {
    /// The steps in order, with their costs.
    pub steps: Vec<Step>,
    /// The IPv4 address each stack reports having.
    pub addresses: [Option<Ipv4Cidr>; 2],
    /// Echo replies A received from B, of [`PINGS`].
    pub ping_replies: u16,
    /// The HTTP status of `GET /`, if a response came.
    pub http_status: Option<u16>,
    /// Whether the body was [`PAGE`], byte for byte.
    pub http_body_exact: bool,
    /// Bytes that came back through the TCP echo, of [`TCP_BYTES`] sent.
    pub tcp_bytes_back: usize,
    /// Whether every byte that came back was the byte sent at that position.
    pub tcp_exact: bool,
    /// Datagrams that came back byte-exact through the zero-copy UDP echo, of [`DATAGRAMS`].
    pub udp_exact: usize,
    /// Whether every datagram A received was read in place in a slot of A's frame pool.
    pub udp_in_pool: bool,
    /// The addresses A's DNS lookup of [`DNS_NAME`] returned.
    pub dns: Vec<IpAddress>,
    /// Each pool's audit at the end (free list checked against the slots' states).
    pub audit: [Option<Result<Occupancy, AuditError>>; 2],
    /// Whether both audits passed and every slot is free but the ones each stack keeps for
    /// itself (at most two TX slots): nothing lost, leaked or still lent.
    pub audit_exact: bool,
}

impl DemoSummary {
    /// Every step succeeded and the audit is exact.
    pub fn all_ok(&self) -> bool {
        self.steps.len() == 6 && self.steps.iter().all(|s| s.ok) && self.audit_exact
    }
}

/// Counters at one moment.
struct Mark {
    wire: [WireStats; 2],
    stacks: [StackStats; 2],
    ledger: LedgerSnapshot,
    at: Instant,
}

impl Mark {
    fn take(p: &Pair) -> Mark {
        Mark {
            wire: [p.ends[0].tx_stats(), p.ends[1].tx_stats()],
            stacks: [p.stacks[0].stats(), p.stacks[1].stats()],
            ledger: LEDGER.snapshot(),
            at: p.exec.now(),
        }
    }

    fn cost_since(&self, before: &Mark) -> Cost {
        Cost {
            frames: [0, 1].map(|i| self.wire[i].sent - before.wire[i].sent),
            frames_out: [0, 1].map(|i| self.stacks[i].frames_out - before.stacks[i].frames_out),
            polls: [0, 1].map(|i| self.stacks[i].polls() - before.stacks[i].polls()),
            copies: self.ledger.since(&before.ledger),
            time: self.at - before.at,
        }
    }
}

/// Simulated time after each step for what it set in motion (closing handshakes, delayed
/// ACKs) to finish, so that it is counted in that step.
const SETTLE: Duration = Duration::from_millis(50);

/// Runs `step` to completion on the pair's executor, lets the wire settle, and returns the
/// step's result with its cost.
fn measured<T>(p: &Pair, step: impl Future<Output = T>) -> (T, Cost) {
    let before = Mark::take(p);
    let out = p.exec.block_on(step);
    let time = p.exec.now() - before.at;
    p.exec.block_on(p.exec.sleep(SETTLE));
    let mut cost = Mark::take(p).cost_since(&before);
    cost.time = time;
    (out, cost)
}

/// "1.0 MiB", "3.2 KiB", "512 B".
fn bytes(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20))
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

/// The cost lines under a step: frames and polls, then copies.
fn cost_lines(c: &Cost) -> [String; 2] {
    let mut copies = format!("copied {}", bytes(c.copies.user_bytes()));
    let sites: Vec<String> = CopySite::ALL
        .iter()
        .filter(|s| s.is_user_space() && c.copies.bytes(**s) > 0)
        .map(|s| format!("{} {}", s.name(), bytes(c.copies.bytes(*s))))
        .collect();
    if !sites.is_empty() {
        let _ = write!(copies, ": {}", sites.join(", "));
    }
    [
        format!(
            "frames A->B {}, B->A {} | polls A {}, B {}",
            c.frames[0], c.frames[1], c.polls[0], c.polls[1]
        ),
        copies,
    ]
}

/// Prints a step (its line and its cost lines) and adds it to the summary.
fn step(
    out: &mut dyn Write,
    sum: &mut DemoSummary,
    name: &'static str,
    ok: bool,
    detail: String,
    cost: Cost,
) -> io::Result<()> {
    let n = sum.steps.len() + 1;
    let verdict = if ok { "ok" } else { "FAILED" };
    writeln!(out, "{n}. {name:<9} {detail:<72} {verdict}")?;
    for line in cost_lines(&cost) {
        writeln!(out, "   {line}")?;
    }
    sum.steps.push(Step {
        name,
        ok,
        detail,
        cost,
    });
    Ok(())
}

/// Runs the demo, writing its report to `out` (30 lines). A failed step does not stop it:
/// the step is reported as failed, and so is the summary ([`DemoSummary::all_ok`]).
pub fn run(out: &mut dyn Write) -> io::Result<DemoSummary> {
    let p = pair(SLOTS, |i, c| {
        if i == 0 {
            c.dns_servers[0] = Some(ADDR[1].into());
        }
    });
    let [a, b] = p.stacks;
    let mut sum = DemoSummary::default();

    // B's services: the examples' HTTP and echo servers, and a DNS responder.
    let http = HttpServer::bind(
        b,
        HttpConfig {
            backlog: 2,
            max_connections: 4,
            index_html: PAGE,
            ..HttpConfig::default()
        },
    )
    .expect("HTTP on port 80");
    let echo = EchoServer::bind(
        b,
        EchoConfig {
            backlog: 2,
            max_connections: 4,
            udp: UdpEcho::ZeroCopy { queue: 8 },
            ..EchoConfig::default()
        },
    )
    .expect("echo on port 7");
    let dns = DatagramSocket::bind(b, 53, DatagramQueue::with_capacity(4)).expect("port 53");
    let spawner = p.exec.local_spawner();
    spawner.spawn(http.run(spawner));
    spawner.spawn(echo.run(spawner));
    spawner.spawn(dns_responder(dns));

    for line in [
        format!(
            "zcnet demo: stacks A ({}) and B ({}) in one process, linked by an in-memory wire;",
            ADDR[0], ADDR[1]
        ),
        format!("one executor on a virtual clock, {SLOTS} frame slots of 2 KiB per stack."),
        "B serves the examples' HTTP (port 80) and echo (port 7: TCP, zero-copy UDP) servers"
            .into(),
        "and a DNS responder on a zero-copy datagram socket (port 53); A is the client.".into(),
        String::new(),
    ] {
        writeln!(out, "{line}")?;
    }

    // 1. Addresses.
    let (_, cost) = measured(&p, async {});
    sum.addresses = [a, b].map(|s| s.ipv4_config().map(|c| c.address));
    let want = [0, 1].map(|i| Some(Ipv4Cidr::new(ADDR[i], 24)));
    let detail = match sum.addresses {
        [Some(x), Some(y)] => format!("A {x}, B {y}: static (zcnet has no DHCP server)"),
        other => format!("missing: {other:?}"),
    };
    let ok = sum.addresses == want;
    step(out, &mut sum, "addresses", ok, detail, cost)?;

    // 2. Ping.
    let (replies, cost) = measured(&p, async {
        let Ok(sock) = IcmpSocket::bind(a, 0x2a, IcmpBuffers::with_capacity(4, 2048)) else {
            return 0;
        };
        let payload: Vec<u8> = (0..56u8).collect();
        let mut replies = 0;
        for seq in 1..=PINGS {
            let ping = sock.ping(ADDR[1].into(), seq, &payload, Duration::from_secs(1));
            replies += u16::from(ping.await.is_ok());
        }
        replies
    });
    sum.ping_replies = replies;
    let detail = format!(
        "A pings {}: {replies}/{PINGS} replies (56 B) from B's stack; ARP first",
        ADDR[1]
    );
    step(out, &mut sum, "ping", replies == PINGS, detail, cost)?;

    // 3. HTTP GET.
    let (got, cost) = measured(&p, timeout(Duration::from_secs(5), http_get(a, "/")));
    let detail = match &got {
        Ok(Ok((status, body))) => {
            sum.http_status = Some(*status);
            sum.http_body_exact = body == PAGE.as_bytes();
            let exact = if sum.http_body_exact {
                "byte-exact"
            } else {
                "NOT the page served"
            };
            format!(
                "GET http://{}/ -> {status}, {} B page, {exact}",
                ADDR[1],
                body.len()
            )
        }
        Ok(Err(e)) => format!("failed: {e}"),
        Err(_) => "no answer within 5 s".into(),
    };
    let ok = sum.http_status == Some(200) && sum.http_body_exact;
    step(out, &mut sum, "http", ok, detail, cost)?;

    // 4. TCP transfer through the echo server.
    let (got, cost) = measured(&p, timeout(Duration::from_secs(60), tcp_echo(a)));
    let detail = match got {
        Ok(Ok((back, exact))) => {
            sum.tcp_bytes_back = back;
            sum.tcp_exact = exact;
            format!(
                "{} to {}:7 (echo server) and {} back, {}",
                bytes(TCP_BYTES as u64),
                ADDR[1],
                bytes(back as u64),
                if exact { "byte-exact" } else { "MISMATCH" }
            )
        }
        Ok(Err(e)) => format!("failed: {e}"),
        Err(_) => "not done within 60 s".into(),
    };
    let ok = sum.tcp_bytes_back == TCP_BYTES && sum.tcp_exact;
    step(out, &mut sum, "tcp", ok, detail, cost)?;

    // 5. Zero-copy UDP.
    let (got, cost) = measured(
        &p,
        timeout(Duration::from_secs(5), udp_exchange(a, p.pools[0])),
    );
    let detail = match got {
        Ok(Ok((exact, in_pool))) => {
            sum.udp_exact = exact;
            sum.udp_in_pool = in_pool;
            let place = if in_pool {
                "written and read in pool slots"
            } else {
                "NOT read in pool slots"
            };
            format!("{exact}/{DATAGRAMS} x {DATAGRAM_LEN} B echoed byte-exact; {place}")
        }
        Ok(Err(e)) => format!("failed: {e}"),
        Err(_) => "no echo within 5 s".into(),
    };
    let ok = sum.udp_exact == DATAGRAMS && sum.udp_in_pool && cost.copies.user_bytes() == 0;
    step(out, &mut sum, "udp", ok, detail, cost)?;

    // 6. DNS.
    let (got, cost) = measured(&p, async {
        let dns = DnsSocket::with_capacity(a, 1).map_err(|e| e.to_string())?;
        dns.resolve(DNS_NAME, DnsKind::A)
            .await
            .map(|addrs| addrs.to_vec())
            .map_err(|e| format!("{e:?}"))
    });
    let detail = match got {
        Ok(addrs) => {
            let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
            sum.dns = addrs;
            format!(
                "A resolves {DNS_NAME} at {} -> {}",
                ADDR[1],
                list.join(", ")
            )
        }
        Err(e) => format!("failed: {e}"),
    };
    let ok = sum.dns == [IpAddress::from(ADDR[1])];
    step(out, &mut sum, "dns", ok, detail, cost)?;

    // The audit: nothing lost, nothing returned twice, nothing still held.
    writeln!(out)?;
    for line in [
        "copies: TCP segments stay in the frames they arrive in and go out in the frames the",
        "app filled; emit is part of a queued frame copied out when the peer's window was",
        "smaller than it; socket->app and app->socket are read and write calls (the echo",
        "server's; the client works in place); the wire's delivery plays the NIC's DMA.",
        "pool audit (the free list checked against every slot's state):",
    ] {
        writeln!(out, "{line}")?;
    }
    let mut exact = true;
    for (i, name) in ["A", "B"].iter().enumerate() {
        let audit = p.pools[i].audit();
        let line = match &audit {
            Ok(occ) => {
                // Each stack keeps at most two TX slots (scratch, the spare for its next
                // reply); every other slot must be free.
                let fine = occ.tx <= 2 && occ.free + occ.tx == occ.total();
                exact &= fine;
                let verdict = if fine {
                    "exact (TX: the stack's own spare frames)"
                } else {
                    "NOT exact"
                };
                format!("  {name}: {occ}  {verdict}")
            }
            Err(e) => {
                exact = false;
                format!("  {name}: FAILED: {e:?}")
            }
        };
        writeln!(out, "{line}")?;
        sum.audit[i] = Some(audit);
    }
    sum.audit_exact = exact;
    let verdict = if sum.all_ok() {
        "all steps ok"
    } else {
        "SOME STEPS FAILED"
    };
    writeln!(out, "{verdict}")?;
    Ok(sum)
}

/// `GET path` from `stack` to B's HTTP server, `Connection: close`; the status and the body.
async fn http_get(stack: Stack, path: &str) -> Result<(u16, Vec<u8>), String> {
    let mut sock =
        TcpSocket::new(stack, TcpBuffers::with_capacity(8192, 1024)).map_err(|e| e.to_string())?;
    sock.connect((ADDR[1], crate::http::PORT))
        .await
        .map_err(|e| e.to_string())?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        ADDR[1]
    );
    sock.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        match sock.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e) => return Err(e.to_string()),
        }
    }
    sock.close();
    let head_end = crate::http::head_end(&response).ok_or("no complete response head")?;
    let head = std::str::from_utf8(&response[..head_end]).map_err(|_| "head not UTF-8")?;
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok())
        .ok_or("no status line")?;
    Ok((status, response[head_end..].to_vec()))
}

/// The `i`th byte of the TCP stream in step 4: a pattern that does not repeat every 256 bytes,
/// so a lost, repeated or misplaced segment shows.
fn stream_byte(i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add((i >> 8) as u8)
}

/// [`TCP_BYTES`] through B's echo server: written in place into the socket's send ring and
/// compared in place in its receive ring (no copy of ours), both directions at once. The
/// bytes that came back, and whether each was right.
async fn tcp_echo(stack: Stack) -> Result<(usize, bool), String> {
    let mut sock = TcpSocket::new(stack, TcpBuffers::with_capacity(65536, 65536))
        .map_err(|e| e.to_string())?;
    sock.connect((ADDR[1], crate::echo::PORT))
        .await
        .map_err(|e| e.to_string())?;
    let (mut rx, mut tx) = sock.split();
    let send = async {
        let mut sent = 0;
        while sent < TCP_BYTES {
            let n = tx
                .write_with(|room| {
                    let n = room.len().min(TCP_BYTES - sent);
                    for (k, b) in room[..n].iter_mut().enumerate() {
                        *b = stream_byte(sent + k);
                    }
                    (n, n)
                })
                .await?;
            sent += n;
        }
        // Half-close: the echo server sees the end of the stream and closes its side.
        tx.shutdown();
        Ok::<(), TcpError>(())
    };
    let receive = async {
        let (mut back, mut exact) = (0usize, true);
        while let Some((n, ok)) = rx
            .read_with(|data| {
                let ok = data
                    .iter()
                    .enumerate()
                    .all(|(k, &b)| b == stream_byte(back + k));
                (data.len(), (data.len(), ok))
            })
            .await?
        {
            back += n;
            exact &= ok;
        }
        Ok::<(usize, bool), TcpError>((back, exact))
    };
    let (sent, got) = join(send, receive).await;
    sent.map_err(|e| e.to_string())?;
    let got = got.map_err(|e| e.to_string())?;
    sock.close();
    Ok(got)
}

/// [`DATAGRAMS`] datagrams of [`DATAGRAM_LEN`] bytes from a zero-copy socket on `stack` to B's
/// zero-copy UDP echo: each payload written in place into a TX slot, each echo read in place
/// in the RX slot it arrived in. How many came back byte-exact, and whether every one was read
/// inside a slot of `pool`.
async fn udp_exchange(stack: Stack, pool: &'static FramePool) -> Result<(usize, bool), String> {
    let sock = DatagramSocket::bind(stack, 0, DatagramQueue::with_capacity(4))
        .map_err(|e| e.to_string())?;
    let remote = IpEndpoint::new(ADDR[1].into(), crate::echo::PORT);
    let (mut exact, mut in_pool) = (0, true);
    for i in 0..DATAGRAMS {
        let fill = |k: usize| (i * 7 + k) as u8;
        let mut frame = sock.tx_frame().await;
        let payload = frame.append(DATAGRAM_LEN).map_err(|e| format!("{e:?}"))?;
        for (k, b) in payload.iter_mut().enumerate() {
            *b = fill(k);
        }
        sock.send_to(frame, remote)
            .await
            .map_err(|e| e.to_string())?;
        let d = sock.recv().await;
        let got = d.payload();
        in_pool &= pool.slot_of(got.as_ptr()).is_some();
        if got.len() == DATAGRAM_LEN && got.iter().enumerate().all(|(k, &b)| b == fill(k)) {
            exact += 1;
        }
    }
    Ok((exact, in_pool))
}

/// A DNS responder on a zero-copy datagram socket: answers an A query for [`DNS_NAME`] with
/// B's address, any other question with NXDOMAIN, and ignores what is not a query. Each answer
/// is written in place into a TX slot.
async fn dns_responder(sock: DatagramSocket) {
    loop {
        let d = sock.recv().await;
        let Some((question_end, known)) = parse_query(d.payload()) else {
            continue;
        };
        let answer_len = if known { 16 } else { 0 };
        let mut frame = sock.tx_frame().await;
        let Ok(r) = frame.append(question_end + answer_len) else {
            continue;
        };
        let q = d.payload();
        r[..question_end].copy_from_slice(&q[..question_end]); // id, counts, question
        r[2] = 0x80 | (q[2] & 0x01); // QR, opcode 0, RD copied
        r[3] = 0x80 | if known { 0 } else { 3 }; // RA; NOERROR or NXDOMAIN
        r[6..12].copy_from_slice(&[0, u8::from(known), 0, 0, 0, 0]); // answers, no NS / AR
        if known {
            let rr = &mut r[question_end..];
            rr[..2].copy_from_slice(&[0xc0, 12]); // the name: a pointer to the question's
            rr[2..6].copy_from_slice(&[0, 1, 0, 1]); // type A, class IN
            rr[6..10].copy_from_slice(&60u32.to_be_bytes()); // TTL
            rr[10..12].copy_from_slice(&4u16.to_be_bytes());
            rr[12..16].copy_from_slice(&ADDR[1].octets());
        }
        let to = d.src();
        drop(d); // the query's slot goes back before the send may wait
        let _ = sock.send_to(frame, to).await;
    }
}

/// For a standard query with one question: where the question ends, and whether it asks for
/// the A record of [`DNS_NAME`]. `None` for anything else (never trusting lengths).
fn parse_query(q: &[u8]) -> Option<(usize, bool)> {
    if q.len() < 12 || q[2] & 0xf8 != 0 || q[4..6] != [0, 1] {
        return None;
    }
    let mut i = 12;
    let mut name = String::new();
    loop {
        let len = usize::from(*q.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        if len > 63 || i + len > q.len() || name.len() > 255 {
            return None;
        }
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(std::str::from_utf8(&q[i..i + len]).ok()?);
        i += len;
    }
    let qtype = q.get(i..i + 2)?;
    let question_end = i + 4;
    if question_end > q.len() {
        return None;
    }
    Some((
        question_end,
        name.eq_ignore_ascii_case(DNS_NAME) && qtype == [0, 1],
    ))
}
