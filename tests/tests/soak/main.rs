//! Soak: one zcnet stack over a TAP serves the examples' HTTP server, TCP echo and UDP echo at
//! once while Linux, in a network namespace the test creates, loads all three and pings the
//! stack, for `ZCNET_SOAK_SECS` seconds (default [`DEFAULT_SECS`]); every few seconds the test
//! samples the process's memory, the frame pool's occupancy, the stack's and the servers'
//! counters and the clients' counts. Needs root, `/dev/net/tun`, `wrk`, `python3`, `ping`,
//! `curl` and `ss` (fails, never skips, without them). RELIABILITY.md ("Soak") has the figures
//! of the full form.
//!
//! ```text
//! cargo test -p zcnet-tests --test soak -- --ignored --nocapture                  # short (CI)
//! ZCNET_SOAK_SECS=600 cargo test -p zcnet-tests --release --test soak -- --ignored --nocapture
//! ```
//!
//! It is `#[ignore]`d so that `cargo test --workspace` (and the AddressSanitizer run) leave it
//! out; `scripts/test-all.sh` runs it on its own.
//!
//! # Load, all at once, from the namespace
//!
//! * `wrk -t2 -c100 --timeout 10s` against `http://10.77.0.2/` (keep-alive: 100 connections
//!   for the whole run);
//! * `wrk -t1 -c4 -H 'Connection: close'` (a new connection per request; zcnet closes first,
//!   so its side goes through TIME-WAIT);
//! * `echo_client.py`: 4 TCP echo connections, each a loop of connect, 1 to 50 chunks of
//!   random bytes (1 byte to 64 KiB) echoed and compared byte by byte, close; and UDP echo,
//!   [`UDP_RATE`] datagrams a second, one at a time, each compared;
//! * `ping -i 0.1` (10 a second).
//!
//! The namespace runs with IPv6 off, client ports 1024-65535 and at most 1024 client sockets
//! in TIME-WAIT (as the TAP benchmark's): `Connection: close` traffic would otherwise run the
//! client out of ports.
//!
//! # Pass criteria
//!
//! * every client exits 0: `wrk` with no socket error of any kind (connect, read, write,
//!   timeout at 10 s) and no non-2xx response; the echo client with no TCP or UDP error and no
//!   mismatched byte; the HTTP server answered no request with 4xx or 5xx, and at least as
//!   many with 2xx as the two `wrk`s completed;
//! * echo: the bytes the client verified equal the bytes the server echoed; UDP datagrams
//!   never answered (lost and not late) at most [`UDP_NEVER_MAX_PERMILLE`] ‰ of those sent;
//! * ping: at most [`PING_LOSS_MAX_PERMILLE`] ‰ lost;
//! * no stack drop for a reason a healthy link never causes ([`ERROR_DROPS`]), no TAP read or
//!   write error;
//! * no stuck connection: once the clients are done, `/stats` shows one active HTTP connection
//!   (its own), and within [`SETTLE`] no TCP socket in the namespace is in a state other than
//!   TIME-WAIT;
//! * memory flat after warm-up: the heap's live bytes (a counting global allocator) and the
//!   process's RSS (`VmRSS`), sampled after the first [`WARMUP_PERCENT`] % of the run, grow by
//!   at most [`HEAP_SLACK_KIB`] and [`RSS_SLACK_KIB`] KiB in any later sample. The pool's
//!   pages are all touched before the run starts, so its memory is in the RSS from the first
//!   sample on and its slots coming and going do not show up as growth; the test's own
//!   bookkeeping does not grow either (room for every sample reserved up front, ping's output
//!   read as it comes);
//! * the final audit exact: with the load stopped and the servers' listeners dropped, every
//!   slot is back within [`SETTLE`] ([`TapNet::assert_slots_back`]: `FramePool::audit`, one
//!   slot posted for the TAP's next read, at most two TX slots kept by the stack). The UDP
//!   echo's task keeps its socket (the echo example spawns it itself); waiting for a datagram,
//!   it holds no slot.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::future::Future;
use std::io::Read;
use std::path::PathBuf;
use std::pin::pin;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::select;
use zcnet_buffer::{FramePool, Occupancy};
use zcnet_examples::echo::{self, EchoConfig, EchoServer, EchoStatsSnapshot, UdpEcho};
use zcnet_examples::http::{HttpConfig, HttpServer, HttpStatsSnapshot};
use zcnet_examples::json::{self, Json};
use zcnet_examples::tap_setup::tap_driver_stats;
use zcnet_executor::time::sleep;
use zcnet_stack::{DropReason, StackStats};
use zcnet_tests::netns::{run, ChildGuard, TapNet, ZCNET_ADDR};

/// The run's length without `ZCNET_SOAK_SECS`: the short form CI runs.
const DEFAULT_SECS: u64 = 40;
/// `wrk` keep-alive connections, and its threads.
const WRK_CONNS: usize = 100;
const WRK_THREADS: usize = 2;
/// `wrk` connections sending `Connection: close`.
const CLOSE_CONNS: usize = 4;
/// A `wrk` request unanswered this long is a timeout error.
const WRK_TIMEOUT_SECS: u64 = 10;
/// TCP echo connections the client keeps going.
const ECHO_TCP_CONNS: usize = 4;
/// UDP echo datagrams a second.
const UDP_RATE: u32 = 200;
/// Pings a second (`ping -i 0.1`).
const PINGS_PER_SEC: u64 = 10;
/// Socket slots: 100 + 4 HTTP connections, the HTTP and echo listeners' backlogs (32 + 8),
/// the echo connections, and room for connections in TIME-WAIT.
const SOCKETS: usize = 320;
/// The part of the run, in percent, after which memory must stay flat.
const WARMUP_PERCENT: u64 = 20;
/// How much the heap's live bytes may grow after warm-up. What may rightly differ from one
/// sample to the next is bounded by the clients: the tasks and buffers of the connections being
/// opened or closed at that moment (4 `Connection: close` and 4 echo connections: some
/// 110 KiB at most). A leak of 2 bytes per request or 100 bytes per connection passes it in
/// the short form (RELIABILITY.md, "Soak", has the arithmetic and the measured figures).
const HEAP_SLACK_KIB: u64 = 512;
/// How much the RSS may grow after warm-up: the heap's slack, and as much again for the
/// allocator's own pages.
const RSS_SLACK_KIB: u64 = 1024;
/// Pings lost at most, per thousand sent.
const PING_LOSS_MAX_PERMILLE: u64 = 1;
/// UDP echo datagrams never answered at most, per thousand sent.
const UDP_NEVER_MAX_PERMILLE: u64 = 1;
/// How long the stack gets, once the load stops, to close every connection and return every
/// slot.
const SETTLE: Duration = Duration::from_secs(30);
/// Drop reasons a healthy TAP link never causes: any of these is a failure.
const ERROR_DROPS: [DropReason; 8] = [
    DropReason::TxTooLong,
    DropReason::TxHeadroom,
    DropReason::TxDriver,
    DropReason::BadChecksum,
    DropReason::NeighborTimeout,
    DropReason::NeighborTableFull,
    DropReason::Malformed,
    DropReason::LinkDown,
];
/// The TCP and UDP echo clients (see the script's header).
const ECHO_CLIENT: &str = include_str!("echo_client.py");

/// The global allocator: `System`, counting the bytes allocated and not yet freed.
struct CountingAlloc;

/// Bytes allocated through [`CountingAlloc`] and not freed.
static HEAP_LIVE: AtomicUsize = AtomicUsize::new(0);

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

// SAFETY: every method hands the caller's arguments to `System` unchanged and returns what it
// returns, so `System`'s guarantees are this allocator's; the counter is bookkeeping only.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller keeps `alloc`'s contract, which is `System::alloc`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            HEAP_LIVE.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            HEAP_LIVE.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        HEAP_LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller keeps `realloc`'s contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            HEAP_LIVE.fetch_add(new_size, Relaxed);
            HEAP_LIVE.fetch_sub(layout.size(), Relaxed);
        }
        p
    }
}

/// The run's length: `ZCNET_SOAK_SECS`, else [`DEFAULT_SECS`]; at least 10 s.
fn soak_secs() -> u64 {
    match std::env::var("ZCNET_SOAK_SECS") {
        Ok(v) => v
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("ZCNET_SOAK_SECS={v}: not a number of seconds"))
            .max(10),
        Err(_) => DEFAULT_SECS,
    }
}

fn require_tool(tool: &str, arg: &str, package: &str) {
    let ok = std::process::Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        ok,
        "the soak test needs `{tool}` (apt-get install {package}; .ci/run installs it)"
    );
}

/// A scratch directory for the clients' output, removed on drop (also when the test panics).
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("zcnet-soak-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch directory");
        ScratchDir(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn read(&self, name: &str) -> String {
        fs::read_to_string(self.file(name)).unwrap_or_default()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A client running in the namespace, its stdout and stderr going to `<name>.out` and
/// `<name>.err` in the scratch directory; killed on drop if it still runs.
struct Client {
    name: &'static str,
    child: ChildGuard,
    status: Option<ExitStatus>,
}

impl Client {
    fn spawn(
        net: &TapNet,
        dir: &ScratchDir,
        name: &'static str,
        program: &str,
        args: &[String],
    ) -> Client {
        let out = File::create(dir.file(&format!("{name}.out"))).expect("client stdout");
        let err = File::create(dir.file(&format!("{name}.err"))).expect("client stderr");
        let child = net
            .netns
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        Client {
            name,
            child: ChildGuard(child),
            status: None,
        }
    }

    /// Whether it has exited (its status kept).
    fn done(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.0.try_wait().expect("try_wait");
        }
        self.status.is_some()
    }
}

/// Runs `server` on the stack's executor until `stop` is set, then drops it (its listener
/// with it); connection tasks it spawned run on until their clients are done.
fn spawn_until(net: &TapNet, server: impl Future<Output = ()> + 'static, stop: Arc<AtomicBool>) {
    net.exec.local_spawner().spawn(async move {
        let stopped = async {
            while !stop.load(Relaxed) {
                sleep(Duration::from_millis(100)).await;
            }
        };
        let _ = select(pin!(server), pin!(stopped)).await;
    });
}

/// Touches every page of the pool's free slots (each taken as a TX frame, zeroed, returned),
/// so the pool's memory is resident from the start and later RSS samples show growth of
/// everything else.
fn pretouch(pool: &'static FramePool) {
    let mut frames = Vec::new();
    while let Some(mut f) = pool.try_alloc_tx() {
        f.set_headroom(0).expect("a fresh frame is empty");
        f.buffer_mut().fill(0);
        frames.push(f);
    }
    drop(frames);
    // The loop ended on an empty pool, which the pool counted: not the load's doing.
    pool.take_stats();
}

/// Namespace settings (see the module docs).
fn prepare_ns(net: &TapNet) {
    for setting in [
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
        "net.ipv4.ip_local_port_range=1024 65535",
        "net.ipv4.tcp_max_tw_buckets=1024",
    ] {
        run(net.netns.command("sysctl").args(["-q", "-w", setting]));
    }
}

/// This process's resident memory, KiB: (`VmRSS`, `RssAnon`) from `/proc/self/status`. The
/// difference is mostly file-backed pages (the program's code as it runs).
fn rss_kib() -> (u64, u64) {
    let status = fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/self/status"))
    };
    (field("VmRSS:"), field("RssAnon:"))
}

/// Follows `ping`'s output as it grows, reading only what is new each time, into buffers of
/// fixed size: reading the whole file at every sample would make this test's own memory grow
/// with the output (a 600 s run writes some 360 KiB), and show up as growth.
struct PingLog {
    file: File,
    /// The line read so far (up to the next newline).
    line: Vec<u8>,
    replies: u64,
    /// The summary line's (transmitted, received), once ping has printed it.
    summary: Option<(u64, u64)>,
}

impl PingLog {
    fn open(path: &std::path::Path) -> PingLog {
        PingLog {
            file: File::open(path).expect("ping's output"),
            line: Vec::with_capacity(256),
            replies: 0,
            summary: None,
        }
    }

    /// Reads what ping has written since the last call.
    fn update(&mut self) -> &mut PingLog {
        let mut buf = [0u8; 4096];
        loop {
            let n = self.file.read(&mut buf).expect("read ping's output");
            if n == 0 {
                return self;
            }
            for &b in &buf[..n] {
                if b != b'\n' {
                    if self.line.len() < self.line.capacity() {
                        self.line.push(b);
                    }
                    continue;
                }
                let line = String::from_utf8_lossy(&self.line);
                if line.contains("bytes from") {
                    self.replies += 1;
                } else if line.contains("packets transmitted") {
                    self.summary = parse_ping(&line);
                }
                self.line.clear();
            }
        }
    }
}

/// What the echo client has counted so far (zero before its first report).
#[derive(Clone, Copy, Debug, Default)]
struct ClientCounts {
    tcp_connections: u64,
    tcp_bytes: u64,
    tcp_bad: u64,
    udp_sent: u64,
    udp_ok: u64,
    udp_lost: u64,
    udp_late: u64,
    udp_bad: u64,
    done: bool,
}

impl ClientCounts {
    fn read(dir: &ScratchDir) -> (ClientCounts, Vec<String>) {
        let text = dir.read("echo-client.json");
        let Ok(j) = json::parse(text.as_bytes()) else {
            return (ClientCounts::default(), Vec::new());
        };
        let n = |k: &str| j.get(k).and_then(Json::as_u64).unwrap_or(0);
        let errors = j
            .get("errors")
            .and_then(Json::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let counts = ClientCounts {
            tcp_connections: n("tcp_connections"),
            tcp_bytes: n("tcp_bytes"),
            tcp_bad: n("tcp_errors") + n("tcp_mismatches"),
            udp_sent: n("udp_sent"),
            udp_ok: n("udp_ok"),
            udp_lost: n("udp_lost"),
            udp_late: n("udp_late"),
            udp_bad: n("udp_errors") + n("udp_mismatches"),
            done: matches!(j.get("done"), Some(Json::Bool(true))),
        };
        (counts, errors)
    }

    /// Datagrams that never came back (lost and not late).
    fn udp_never(&self) -> u64 {
        self.udp_lost.saturating_sub(self.udp_late)
    }
}

/// One sample of the run.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Seconds since the load started.
    t: f64,
    rss_kib: u64,
    anon_kib: u64,
    heap_kib: u64,
    occ: Occupancy,
    stack: StackStats,
    http: HttpStatsSnapshot,
    echo: EchoStatsSnapshot,
    client: ClientCounts,
    ping_replies: u64,
}

impl Sample {
    fn header() -> &'static str {
        "    t/s  rss KiB anon KiB heap KiB | pool: free post stack lent  tx dev sent retd | http reqs   echo MB  udp echo   pings | drops | client errors"
    }

    fn line(&self) -> String {
        let o = &self.occ;
        let drops: u64 = self.stack.drops.iter().sum();
        format!(
            "{:7.1} {:8} {:8} {:8} | {:10} {:4} {:5} {:4} {:3} {:3} {:4} {:4} | {:9} {:9.1} {:9} {:7} | {:5} | {}",
            self.t,
            self.rss_kib,
            self.anon_kib,
            self.heap_kib,
            o.free,
            o.posted,
            o.stack,
            o.lent,
            o.tx,
            o.device,
            o.sent,
            o.retained,
            self.http.requests,
            self.echo.tcp_bytes as f64 / 1e6,
            self.echo.udp_datagrams,
            self.ping_replies,
            drops,
            self.client.tcp_bad + self.client.udp_bad,
        )
    }
}

/// `wrk`'s summary: requests completed, socket errors of every kind, non-2xx/3xx responses.
#[derive(Clone, Copy, Debug, Default)]
struct WrkResult {
    requests: u64,
    socket_errors: u64,
    non_2xx: u64,
}

fn parse_wrk(out: &str) -> WrkResult {
    let mut r = WrkResult::default();
    for l in out.lines().map(str::trim) {
        if l.contains(" requests in ") {
            r.requests = l
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("wrk: no request count in {l:?}"));
        }
        if let Some(e) = l.strip_prefix("Socket errors:") {
            r.socket_errors += e
                .split(',')
                .filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok())
                .sum::<u64>();
        }
        if let Some(e) = l.strip_prefix("Non-2xx or 3xx responses:") {
            r.non_2xx += e.trim().parse::<u64>().unwrap_or(0);
        }
    }
    r
}

/// `ping`'s summary line ("N packets transmitted, M received, ..."): (N, M).
fn parse_ping(l: &str) -> Option<(u64, u64)> {
    let mut nums = l
        .split(',')
        .filter_map(|p| p.split_whitespace().next()?.parse::<u64>().ok());
    Some((nums.next()?, nums.next()?))
}

/// TCP sockets in the namespace in a state other than TIME-WAIT (`ss -Htan`).
fn open_tcp_sockets(net: &TapNet) -> Vec<String> {
    let out = run(net.netns.command("ss").args(["-Htan"]));
    out.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("TIME-WAIT"))
        .map(str::to_string)
        .collect()
}

/// Linear growth of `value` over `samples`, per minute (least squares).
fn slope_per_min(samples: &[Sample], value: impl Fn(&Sample) -> u64) -> f64 {
    let n = samples.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mt = samples.iter().map(|s| s.t).sum::<f64>() / n;
    let mv = samples.iter().map(|s| value(s) as f64).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for s in samples {
        num += (s.t - mt) * (value(s) as f64 - mv);
        den += (s.t - mt) * (s.t - mt);
    }
    if den == 0.0 {
        0.0
    } else {
        num / den * 60.0
    }
}

#[test]
#[ignore = "the soak runs on its own (scripts/test-all.sh): see the file's docs"]
fn soak_http_echo_udp_and_ping_over_tap() {
    for (tool, arg, package) in [
        ("wrk", "--version", "wrk"),
        ("python3", "--version", "python3"),
        ("ping", "-V", "iputils-ping"),
        ("curl", "--version", "curl"),
        ("ss", "--version", "iproute2"),
    ] {
        require_tool(tool, arg, package);
    }
    let secs = soak_secs();
    let interval = Duration::from_secs((secs / 20).clamp(2, 5));
    let net = TapNet::with_sockets::<SOCKETS>(1500);
    prepare_ns(&net);
    pretouch(net.pool);
    let dir = ScratchDir::new();

    // The servers, each until `stop`.
    let stop = Arc::new(AtomicBool::new(false));
    let http_config = HttpConfig {
        driver_stats: Some(tap_driver_stats(net.tap_stats.clone())),
        ..HttpConfig::default()
    };
    let http_server = HttpServer::bind(net.stack, http_config).expect("bind port 80");
    let http_stats = http_server.stats();
    spawn_until(
        &net,
        http_server.run(net.exec.local_spawner()),
        stop.clone(),
    );
    let echo_config = EchoConfig {
        udp: UdpEcho::ZeroCopy { queue: 32 },
        ..EchoConfig::default()
    };
    let echo_server = EchoServer::bind(net.stack, echo_config).expect("bind port 7");
    let echo_stats = echo_server.stats();
    spawn_until(
        &net,
        echo_server.run(net.exec.local_spawner()),
        stop.clone(),
    );

    // The load.
    let addr = ZCNET_ADDR.to_string();
    let url = format!("http://{addr}/");
    let wrk_args = |threads: usize, conns: usize| {
        vec![
            format!("-t{threads}"),
            format!("-c{conns}"),
            format!("-d{secs}s"),
            "--timeout".to_string(),
            format!("{WRK_TIMEOUT_SECS}s"),
        ]
    };
    let mut keep_args = wrk_args(WRK_THREADS, WRK_CONNS);
    keep_args.push(url.clone());
    let mut close_args = wrk_args(1, CLOSE_CONNS);
    close_args.extend([
        "-H".to_string(),
        "Connection: close".to_string(),
        url.clone(),
    ]);
    let stats_file = dir.file("echo-client.json");
    let mut clients = [
        Client::spawn(&net, &dir, "wrk-keepalive", "wrk", &keep_args),
        Client::spawn(&net, &dir, "wrk-close", "wrk", &close_args),
        Client::spawn(
            &net,
            &dir,
            "echo-client",
            "python3",
            &[
                "-c".to_string(),
                ECHO_CLIENT.to_string(),
                addr.clone(),
                echo::PORT.to_string(),
                secs.to_string(),
                ECHO_TCP_CONNS.to_string(),
                UDP_RATE.to_string(),
                stats_file.display().to_string(),
            ],
        ),
        Client::spawn(
            &net,
            &dir,
            "ping",
            "ping",
            &[
                "-i".to_string(),
                format!("{}", 1.0 / PINGS_PER_SEC as f64),
                "-c".to_string(),
                (secs * PINGS_PER_SEC).to_string(),
                "-W".to_string(),
                "2".to_string(),
                addr.clone(),
            ],
        ),
    ];

    // Sampling until every client has exited.
    let ping_log = std::cell::RefCell::new(PingLog::open(&dir.file("ping.out")));
    let take_sample = |t: f64| {
        let (rss_kib, anon_kib) = rss_kib();
        Sample {
            t,
            rss_kib,
            anon_kib,
            heap_kib: (HEAP_LIVE.load(Relaxed) / 1024) as u64,
            occ: net.pool.occupancy(),
            stack: net.stack.stats(),
            http: http_stats.get(),
            echo: echo_stats.get(),
            client: ClientCounts::read(&dir).0,
            ping_replies: ping_log.borrow_mut().update().replies,
        }
    };
    eprintln!(
        "soak: {secs} s, samples every {} s; namespace {}, TAP {}, pool of {} slots",
        interval.as_secs(),
        net.netns.name(),
        net.tap_name,
        net.pool.slot_count()
    );
    eprintln!("{}", Sample::header());
    let limit = Duration::from_secs(secs + 60);
    let start = net.exec.now();
    let samples = net.exec.block_on(async {
        // Room for every sample up front: a vector growing during the run would be growth.
        let mut samples = Vec::with_capacity((limit.as_secs() / interval.as_secs() + 2) as usize);
        let mut k = 0u32;
        loop {
            k += 1;
            net.exec.sleep_until(start + interval * k).await;
            let elapsed = net.exec.now() - start;
            let s = take_sample(elapsed.as_secs_f64());
            eprintln!("{}", s.line());
            samples.push(s);
            if clients.iter_mut().all(Client::done) {
                break samples;
            }
            if elapsed > limit {
                let running: Vec<&str> = clients
                    .iter_mut()
                    .filter_map(|c| (!c.done()).then_some(c.name))
                    .collect();
                panic!("clients still running {limit:?} after the start: {running:?}");
            }
        }
    });

    // What the clients say.
    let mut failures: Vec<String> = Vec::new();
    for c in &clients {
        let status = c.status.expect("exited");
        if !status.success() {
            failures.push(format!(
                "{} exited with {status}: {}{}",
                c.name,
                dir.read(&format!("{}.out", c.name)),
                dir.read(&format!("{}.err", c.name))
            ));
        }
    }
    let keep = parse_wrk(&dir.read("wrk-keepalive.out"));
    let close = parse_wrk(&dir.read("wrk-close.out"));
    for (name, w) in [("keepalive", keep), ("close", close)] {
        if w.requests == 0 || w.socket_errors != 0 || w.non_2xx != 0 {
            failures.push(format!(
                "wrk {name}: {w:?}\n{}",
                dir.read(&format!("wrk-{name}.out"))
            ));
        }
    }
    let (client, client_errors) = ClientCounts::read(&dir);
    if !client.done || client.tcp_bad != 0 || client.udp_bad != 0 {
        failures.push(format!(
            "echo client: {client:?}, first errors: {client_errors:?}"
        ));
    }
    if client.udp_never() * 1000 > client.udp_sent * UDP_NEVER_MAX_PERMILLE {
        failures.push(format!(
            "UDP echo: {} of {} datagrams never answered (at most {UDP_NEVER_MAX_PERMILLE} per thousand)",
            client.udp_never(),
            client.udp_sent
        ));
    }
    let (ping_sent, ping_received) = ping_log
        .borrow_mut()
        .update()
        .summary
        .unwrap_or_else(|| panic!("no ping summary in: {}", dir.read("ping.out")));
    if (ping_sent - ping_received) * 1000 > ping_sent * PING_LOSS_MAX_PERMILLE {
        failures.push(format!(
            "ping: {ping_received} of {ping_sent} answered (at most {PING_LOSS_MAX_PERMILLE} per thousand lost)"
        ));
    }

    // No stuck connection: the servers' connections close once their clients are gone; /stats
    // then counts one active HTTP connection, its own.
    let stats_url = format!("http://{addr}/stats");
    let stats_json = net.exec.block_on(async {
        let deadline = net.exec.now() + SETTLE;
        loop {
            sleep(Duration::from_millis(500)).await;
            let mut curl = ChildGuard::spawn(net.netns.command("curl").args([
                "-sS",
                "--max-time",
                "10",
                &stats_url,
            ]));
            let (status, out, err) = curl.wait(Duration::from_secs(20)).await;
            assert!(status.success(), "curl /stats: {status} {out} {err}");
            let j = json::parse(out.as_bytes()).unwrap_or_else(|e| panic!("{e}: {out}"));
            let active = j.path(&["http", "active"]).and_then(Json::as_u64);
            if active == Some(1) || net.exec.now() >= deadline {
                break j;
            }
        }
    });
    let active = stats_json.path(&["http", "active"]).and_then(Json::as_u64);
    if active != Some(1) {
        failures.push(format!(
            "HTTP connections still served {SETTLE:?} after the load: {active:?} (1 is /stats's own)"
        ));
    }

    // Stop the servers; every slot comes back and the Linux side's connections close.
    stop.store(true, Relaxed);
    let open = net.exec.block_on(async {
        let deadline = net.exec.now() + SETTLE;
        loop {
            sleep(Duration::from_millis(200)).await;
            let o = net.pool.occupancy();
            let held = o.stack + o.lent + o.device + o.sent + o.retained;
            let open = open_tcp_sockets(&net);
            if (held == 0 && open.is_empty()) || net.exec.now() >= deadline {
                break open;
            }
        }
    });
    if !open.is_empty() {
        failures.push(format!(
            "TCP sockets in the namespace still open {SETTLE:?} after the load:\n{}",
            open.join("\n")
        ));
    }
    let end = take_sample((net.exec.now() - start).as_secs_f64());
    let http_end = http_stats.get();
    let echo_end = echo_stats.get();
    let stack_end = net.stack.stats();
    let tap = net.tap_stats.get();
    let pool_stats = net.pool.stats();

    if http_end.status_4xx + http_end.status_5xx != 0 {
        failures.push(format!("HTTP errors answered: {http_end:?}"));
    }
    if http_end.status_2xx < keep.requests + close.requests {
        failures.push(format!(
            "the server answered {} requests with 2xx, wrk counted {}",
            http_end.status_2xx,
            keep.requests + close.requests
        ));
    }
    if client.tcp_bad == 0 && echo_end.tcp_bytes != client.tcp_bytes {
        failures.push(format!(
            "TCP echo: the server echoed {} bytes, the client verified {}",
            echo_end.tcp_bytes, client.tcp_bytes
        ));
    }
    for r in ERROR_DROPS {
        if stack_end.dropped(r) != 0 {
            failures.push(format!("{} drops: {}", r.name(), stack_end.dropped(r)));
        }
    }
    if tap.rx_errors + tap.tx_errors != 0 {
        failures.push(format!("TAP errors: {tap:?}"));
    }

    // Memory: flat after warm-up.
    let warm_t = secs as f64 * WARMUP_PERCENT as f64 / 100.0;
    let warm_i = samples
        .iter()
        .position(|s| s.t >= warm_t)
        .expect("a sample after warm-up");
    let warm = samples[warm_i];
    let after = &samples[warm_i..];
    // The samples taken while the load ran, for the growth rates.
    let loaded: Vec<Sample> = after
        .iter()
        .copied()
        .filter(|s| s.t <= secs as f64)
        .collect();
    let heap_max = after.iter().map(|s| s.heap_kib).max().unwrap();
    let rss_max = after.iter().map(|s| s.rss_kib).max().unwrap();
    if heap_max > warm.heap_kib + HEAP_SLACK_KIB {
        failures.push(format!(
            "heap grew after warm-up: {} KiB at {:.0} s, up to {heap_max} KiB later (at most +{HEAP_SLACK_KIB})",
            warm.heap_kib, warm.t
        ));
    }
    if rss_max > warm.rss_kib + RSS_SLACK_KIB {
        failures.push(format!(
            "RSS grew after warm-up: {} KiB at {:.0} s, up to {rss_max} KiB later (at most +{RSS_SLACK_KIB})",
            warm.rss_kib, warm.t
        ));
    }

    // The report.
    let in_use = |s: &Sample| s.occ.in_use();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "\nsoak summary ({secs} s of load, {} samples)",
        samples.len()
    );
    let _ = writeln!(
        report,
        "memory: heap {} KiB at warm-up ({:.0} s), max {heap_max} after, {} once the clients had exited, {} settled; slope under load after warm-up {:+.1} KiB/min",
        warm.heap_kib,
        warm.t,
        samples.last().unwrap().heap_kib,
        end.heap_kib,
        slope_per_min(&loaded, |s| s.heap_kib)
    );
    let _ = writeln!(
        report,
        "        RSS {} KiB at warm-up, max {rss_max} after, {} once the clients had exited, {} settled; slope under load after warm-up {:+.1} KiB/min (anonymous memory: {} KiB at warm-up, {} settled, {:+.1} KiB/min)",
        warm.rss_kib,
        samples.last().unwrap().rss_kib,
        end.rss_kib,
        slope_per_min(&loaded, |s| s.rss_kib),
        warm.anon_kib,
        end.anon_kib,
        slope_per_min(&loaded, |s| s.anon_kib)
    );
    let _ = writeln!(
        report,
        "pool: {} slots; in use min {} max {} (samples); settled: {}; exhausted rx {} tx {}",
        net.pool.slot_count(),
        samples.iter().map(in_use).min().unwrap(),
        samples.iter().map(in_use).max().unwrap(),
        end.occ,
        pool_stats.rx_exhausted,
        pool_stats.tx_exhausted
    );
    for (state, get) in [
        (
            "stack",
            (|o: &Occupancy| o.stack) as fn(&Occupancy) -> usize,
        ),
        ("lent", |o| o.lent),
        ("tx", |o| o.tx),
        ("device", |o| o.device),
        ("sent", |o| o.sent),
        ("retained", |o| o.retained),
    ] {
        let v = samples.iter().map(|s| get(&s.occ));
        let _ = write!(
            report,
            "  {state} {}..{}",
            v.clone().min().unwrap(),
            v.max().unwrap()
        );
    }
    let _ = writeln!(report);
    let _ = writeln!(
        report,
        "http: wrk keep-alive {} requests ({:.0}/s), close {} ({:.0}/s); server: {} connections, {} requests, 2xx {}, 4xx {}, 5xx {}",
        keep.requests,
        keep.requests as f64 / secs as f64,
        close.requests,
        close.requests as f64 / secs as f64,
        http_end.connections,
        http_end.requests,
        http_end.status_2xx,
        http_end.status_4xx,
        http_end.status_5xx
    );
    let _ = writeln!(
        report,
        "tcp echo: {} connections, {} bytes verified by the client, {} echoed by the server; errors+mismatches {}",
        client.tcp_connections, client.tcp_bytes, echo_end.tcp_bytes, client.tcp_bad
    );
    let _ = writeln!(
        report,
        "udp echo: {} sent, {} answered byte-exact, {} late, {} never answered; server echoed {}; errors+mismatches {}",
        client.udp_sent,
        client.udp_ok,
        client.udp_late,
        client.udp_never(),
        echo_end.udp_datagrams,
        client.udp_bad
    );
    let _ = writeln!(report, "ping: {ping_sent} sent, {ping_received} answered");
    let drops: Vec<String> = DropReason::ALL
        .iter()
        .filter(|&&r| stack_end.dropped(r) != 0)
        .map(|&r| format!("{} {}", r.name(), stack_end.dropped(r)))
        .collect();
    let _ = writeln!(
        report,
        "stack: frames in {} out {}, datagrams in {} out {}, drops: {}, listener re-arm failures {}, TIME-WAIT evictions {}",
        stack_end.frames_in,
        stack_end.frames_out,
        stack_end.datagrams_in,
        stack_end.datagrams_out,
        if drops.is_empty() { "none".to_string() } else { drops.join(", ") },
        stack_end.listener_rearm_failures,
        stack_end.time_wait_evictions
    );
    let _ = writeln!(report, "tap: {tap:?}");
    eprintln!("{report}");
    assert!(failures.is_empty(), "soak failed:\n{}", failures.join("\n"));

    // The final audit: every slot back.
    let occ = net.pool.occupancy();
    eprintln!("final audit: {occ}");
    net.assert_slots_back();
}
