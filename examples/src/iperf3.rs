//! An iperf3-compatible server on zcnet, so an unmodified `iperf3 -c <addr>` measures zcnet:
//! TCP, `-R` (zcnet sends), `-P N` (parallel streams), `-t`, `-O` (omit), `--get-server-output`.
//! UDP, SCTP and `--bidir` are refused with iperf3's "not implemented" error.
//!
//! # The protocol (iperf3's control channel, as its client speaks it)
//!
//! ```text
//!  client                                          server (this module)
//!  connect :5201, send cookie (36 chars + NUL) ─►
//!                                              ◄─ state PARAM_EXCHANGE (one signed byte, 9)
//!  params: u32 length (big endian) + JSON     ─►
//!                                              ◄─ CREATE_STREAMS (10)
//!  N × (connect :5201, send the same cookie)  ─►  (data streams; ids 1, 3, 4, 5, … in order)
//!                                              ◄─ TEST_START (1), TEST_RUNNING (2)
//!  data on the streams (client → server; server → client with -R)
//!  TEST_END (4)                               ─►
//!                                              ◄─ EXCHANGE_RESULTS (13)
//!  client results: u32 length + JSON          ─►
//!                                              ◄─ server results: u32 length + JSON
//!                                              ◄─ DISPLAY_RESULTS (14)
//!  IPERF_DONE (16), close                     ─►
//! ```
//!
//! A refused test gets SERVER_ERROR (-2) followed by iperf3's error number and an errno (each a
//! big-endian `i32`); a control connection arriving while a test runs gets ACCESS_DENIED (-1).
//! The server's results report, per stream, the bytes moved after the omit period and its
//! duration, plus the CPU use over the test, which the client prints as the remote CPU
//! utilisation: read from the [`Iperf3Config::cpu_time`] hook (on Linux, this process's
//! `getrusage`), or 0 without one, as iperf3 itself reports a CPU use it cannot measure.
//!
//! Data moves through the in-place socket APIs: received bytes are consumed in smoltcp's ring
//! (`read_with`) and sent bytes are claimed in it (`write_with`) without our code copying them.
//!
//! Every wait on the client is bounded (a dead client never wedges the server), every length
//! it sends is checked, and nothing it sends can make the server panic.

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::future::{pending, poll_fn, Future};
use core::pin::pin;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use core::task::{Poll, Waker};
use core::time::Duration;

use futures_util::future::{join_all, select, Either};
use spin::{Mutex, MutexGuard};
use zcnet_executor::time::timeout;
use zcnet_executor::{Executor, Instant, Spawner};
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpListener, TcpSocket};
use zcnet_stack::{Never, Stack, StackError};

use crate::json::{self, object, Json};

/// iperf3's default port.
pub const PORT: u16 = 5201;
/// Bytes of the cookie each connection starts with (36 characters and a NUL).
pub const COOKIE_SIZE: usize = 37;
/// Most parallel streams one test may ask for.
pub const MAX_STREAMS: usize = 16;
/// Largest JSON message accepted from a client.
pub const MAX_JSON: usize = 64 * 1024;
/// Longest test accepted, in seconds (iperf3's own limit for `-t`).
pub const MAX_TIME: u64 = 86_400;
/// Longest omit period accepted, in seconds (iperf3's own limit for `-O`).
pub const MAX_OMIT: u64 = 600;
/// Socket buffer size (each direction) of every stream: large enough for smoltcp's window
/// scaling to keep a fast link busy.
pub const STREAM_BUFFER: usize = 256 * 1024;

/// The control channel's state bytes.
pub mod state {
    /// The test begins (server → client).
    pub const TEST_START: i8 = 1;
    /// Data may flow (server → client).
    pub const TEST_RUNNING: i8 = 2;
    /// The client's time is up (client → server).
    pub const TEST_END: i8 = 4;
    /// Send the parameters (server → client).
    pub const PARAM_EXCHANGE: i8 = 9;
    /// Open the data streams (server → client).
    pub const CREATE_STREAMS: i8 = 10;
    /// The client gave up (client → server).
    pub const CLIENT_TERMINATE: i8 = 12;
    /// Send your results, then read mine (server → client).
    pub const EXCHANGE_RESULTS: i8 = 13;
    /// Print the results (server → client).
    pub const DISPLAY_RESULTS: i8 = 14;
    /// The client is done (client → server).
    pub const IPERF_DONE: i8 = 16;
    /// Another test is running (server → client, on a refused connection).
    pub const ACCESS_DENIED: i8 = -1;
    /// The server refuses the test; an error number and an errno follow.
    pub const SERVER_ERROR: i8 = -2;
}

/// iperf3's error number for "not implemented" (`IEUNIMP`).
pub const IEUNIMP: i32 = 13;

/// How long the client may take for each step of the setup and the teardown.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Slack on top of the test's own duration before the server gives up on a silent client.
const RUN_SLACK: Duration = Duration::from_secs(10);
/// Longest test accepted without a time limit (`-n` / `-k` tests).
const UNTIMED_LIMIT: Duration = Duration::from_secs(3600);

fn stream_buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(STREAM_BUFFER, STREAM_BUFFER))
}

/// CPU time used so far by whatever runs the server (a process, a kernel, one core), in
/// seconds, split as the platform accounts it. Only differences between two readings are used.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTime {
    /// Seconds spent in user mode (a kernel without that split: all of it here, or in
    /// `system`).
    pub user: f64,
    /// Seconds spent in the kernel on the server's behalf.
    pub system: f64,
}

/// This process's CPU time from `getrusage(RUSAGE_SELF)`; all zero if the call fails. The
/// default [`Iperf3Config::cpu_time`] with the `std` feature.
#[cfg(feature = "std")]
pub fn process_cpu_time() -> CpuTime {
    // SAFETY: `rusage` is plain old data; all-zero is valid and getrusage overwrites it.
    let mut ru: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: RUSAGE_SELF is valid and `ru` is a valid out-pointer for the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return CpuTime::default();
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    CpuTime {
        user: secs(ru.ru_utime),
        system: secs(ru.ru_stime),
    }
}

/// How to run the server.
///
/// A kernel fills in the hooks with plain functions:
///
/// ```
/// use core::fmt;
/// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use zcnet_examples::iperf3::{CpuTime, Iperf3Config};
///
/// /// Nanoseconds the kernel's one core spent outside its idle loop (which keeps the count).
/// static BUSY_NANOS: AtomicU64 = AtomicU64::new(0);
///
/// fn busy_time() -> CpuTime {
///     // No user/system split in this kernel: all of it is kernel time.
///     CpuTime { user: 0.0, system: BUSY_NANOS.load(Relaxed) as f64 / 1e9 }
/// }
///
/// fn log_line(line: fmt::Arguments<'_>) {
///     // A kernel would write `line` and a line break to its serial port here.
///     let _ = line;
/// }
///
/// let config = Iperf3Config {
///     cpu_time: Some(busy_time),
///     log: Some(log_line),
///     ..Iperf3Config::default()
/// };
/// assert_eq!(config.port, 5201);
/// ```
#[derive(Clone, Debug)]
pub struct Iperf3Config {
    /// TCP port for the control connection and the data streams.
    pub port: u16,
    /// Listening sockets, 1..=64 (at least the streams a client opens in a burst).
    pub backlog: usize,
    /// Where a line per test goes (how it went, or why it ended early), given without a line
    /// break. `None` (the default): nowhere.
    pub log: Option<fn(fmt::Arguments<'_>)>,
    /// Reads the CPU time used so far; read when the data starts and when it ends, and the
    /// difference over the wall time is the CPU use the client prints as the remote one. It
    /// runs on the test's task, so it must not block. `None`: reported as 0 %. The default is
    /// `process_cpu_time` (`getrusage`) with the `std` feature, `None` without it.
    pub cpu_time: Option<fn() -> CpuTime>,
}

impl Default for Iperf3Config {
    fn default() -> Self {
        Iperf3Config {
            port: PORT,
            backlog: 8,
            log: None,
            #[cfg(feature = "std")]
            cpu_time: Some(process_cpu_time),
            #[cfg(not(feature = "std"))]
            cpu_time: None,
        }
    }
}

/// What one finished test measured (the server's view).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TestSummary {
    /// Data streams.
    pub streams: usize,
    /// Whether the server sent (`-R`) rather than received.
    pub reverse: bool,
    /// Bytes moved over all streams after the omit period.
    pub bytes: u64,
    /// Seconds from the end of the omit period to the end of the test.
    pub seconds: f64,
}

impl TestSummary {
    /// Bits per second over the test.
    pub fn bits_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 * 8.0 / self.seconds
        } else {
            0.0
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    tests_done: AtomicU64,
    tests_failed: AtomicU64,
    denied: AtomicU64,
    last: Mutex<Option<TestSummary>>,
    last_error: Mutex<Option<String>>,
}

/// The server's counters; clone it to read them while the server runs.
#[derive(Clone, Debug, Default)]
pub struct Iperf3Stats(Arc<Counters>);

impl Iperf3Stats {
    /// Tests that ran to the end of the protocol.
    pub fn tests_done(&self) -> u64 {
        self.0.tests_done.load(Relaxed)
    }

    /// Tests that were refused or broke off.
    pub fn tests_failed(&self) -> u64 {
        self.0.tests_failed.load(Relaxed)
    }

    /// Control connections turned away because a test was running.
    pub fn denied(&self) -> u64 {
        self.0.denied.load(Relaxed)
    }

    /// The last finished test.
    pub fn last(&self) -> Option<TestSummary> {
        *self.0.last.lock()
    }

    /// Why the last test that failed failed.
    pub fn last_error(&self) -> Option<String> {
        self.0.last_error.lock().clone()
    }
}

/// Where the server is in a test: decides what a newly accepted connection is.
#[derive(Debug, PartialEq, Eq)]
enum Phase {
    /// No test: the next connection is a control connection.
    Idle,
    /// A test is being set up or runs: a new connection is turned away.
    Busy,
    /// The test waits for its data streams: new connections are queued for it.
    Streams,
}

#[derive(Debug)]
struct Dispatch {
    phase: Phase,
    queue: VecDeque<TcpSocket>,
    waker: Option<Waker>,
}

#[derive(Debug)]
struct Shared {
    dispatch: Mutex<Dispatch>,
    stats: Iperf3Stats,
    log: Option<fn(fmt::Arguments<'_>)>,
    cpu_time: Option<fn() -> CpuTime>,
    exec: &'static Executor,
}

impl Shared {
    fn dispatch(&self) -> MutexGuard<'_, Dispatch> {
        // A spin lock: critical sections are short and never wait, and only tasks take it.
        self.dispatch.lock()
    }

    fn log(&self, line: fmt::Arguments<'_>) {
        if let Some(log) = self.log {
            log(line);
        }
    }

    fn cpu_time(&self) -> CpuTime {
        self.cpu_time.map_or(CpuTime::default(), |f| f())
    }

    fn set_phase(&self, phase: Phase) {
        let mut d = self.dispatch();
        d.phase = phase;
        // Connections queued for a test that no longer wants them are reset.
        if d.phase != Phase::Streams {
            for mut s in d.queue.drain(..) {
                s.abort();
            }
        }
    }

    /// Waits for the next connection queued for the data streams.
    async fn next_stream(&self) -> TcpSocket {
        poll_fn(|cx| {
            let mut d = self.dispatch();
            match d.queue.pop_front() {
                Some(s) => Poll::Ready(s),
                None => {
                    d.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }
}

/// Sets the phase back to idle when a test ends, however it ends.
struct IdleOnDrop<'a>(&'a Shared);

impl Drop for IdleOnDrop<'_> {
    fn drop(&mut self) {
        self.0.set_phase(Phase::Idle);
    }
}

/// A bound iperf3 server; [`run`](Self::run) serves tests one after another, forever.
#[derive(Debug)]
pub struct Iperf3Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl Iperf3Server {
    /// Listens on `config.port`. Errors when the stack has too few free socket slots for the
    /// backlog or the port already has a listener.
    pub fn bind(stack: Stack, config: Iperf3Config) -> Result<Iperf3Server, StackError> {
        let listener = TcpListener::bind(stack, config.port, config.backlog, stream_buffers)?;
        Ok(Iperf3Server {
            listener,
            shared: Arc::new(Shared {
                dispatch: Mutex::new(Dispatch {
                    phase: Phase::Idle,
                    queue: VecDeque::new(),
                    waker: None,
                }),
                stats: Iperf3Stats::default(),
                log: config.log,
                cpu_time: config.cpu_time,
                exec: stack.executor(),
            }),
        })
    }

    /// A handle on the counters.
    pub fn stats(&self) -> Iperf3Stats {
        self.shared.stats.clone()
    }

    /// Accepts connections forever: a control connection starts a test in its own task; while
    /// that test waits for its streams, connections are handed to it; otherwise a connection
    /// during a test is answered ACCESS_DENIED and closed.
    pub async fn run(mut self, spawner: Spawner) -> Never {
        loop {
            let mut sock = self.listener.accept().await;
            let mut d = self.shared.dispatch();
            match d.phase {
                Phase::Idle => {
                    d.phase = Phase::Busy;
                    drop(d);
                    let shared = self.shared.clone();
                    spawner.spawn(async move {
                        let _idle = IdleOnDrop(&shared);
                        let r = run_test(&mut sock, &shared).await;
                        finish(&mut sock, &shared, r).await;
                    });
                }
                Phase::Streams if d.queue.len() < MAX_STREAMS => {
                    d.queue.push_back(sock);
                    let waker = d.waker.take();
                    drop(d);
                    if let Some(w) = waker {
                        w.wake();
                    }
                }
                Phase::Streams | Phase::Busy => {
                    drop(d);
                    self.shared.stats.0.denied.fetch_add(1, Relaxed);
                    spawner.spawn(async move {
                        let _ = timeout(STEP_TIMEOUT, send_state(&mut sock, state::ACCESS_DENIED))
                            .await;
                        // Dropping closes gracefully, after the byte went out.
                    });
                }
            }
        }
    }
}

/// Why a test ended early.
#[derive(Debug)]
enum Fail {
    /// The control connection failed or closed.
    Tcp(TcpError),
    /// The client took too long for a step.
    Timeout(&'static str),
    /// The client sent something we cannot use.
    Protocol(String),
    /// The client asked for something this server does not do (answered SERVER_ERROR).
    Refused(String),
    /// The client gave up (CLIENT_TERMINATE) or closed the control connection.
    ClientGone,
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fail::Tcp(e) => write!(f, "control connection: {e}"),
            Fail::Timeout(what) => write!(f, "client too slow: no {what} within the limit"),
            Fail::Protocol(what) => write!(f, "protocol error: {what}"),
            Fail::Refused(why) => write!(f, "refused: {why}"),
            Fail::ClientGone => f.write_str("the client ended the test"),
        }
    }
}

impl From<TcpError> for Fail {
    fn from(e: TcpError) -> Self {
        Fail::Tcp(e)
    }
}

async fn finish(ctrl: &mut TcpSocket, shared: &Shared, r: Result<TestSummary, Fail>) {
    // The next client may connect as soon as this one has its results: be ready for it.
    shared.set_phase(Phase::Idle);
    let stats = &shared.stats.0;
    match r {
        Ok(summary) => {
            stats.tests_done.fetch_add(1, Relaxed);
            *stats.last.lock() = Some(summary);
            shared.log(format_args!(
                "iperf3 test done: {} stream(s), zcnet {}, {} bytes in {:.2} s = {:.1} Mbit/s",
                summary.streams,
                if summary.reverse { "sent" } else { "received" },
                summary.bytes,
                summary.seconds,
                summary.bits_per_second() / 1e6
            ));
        }
        Err(e) => {
            stats.tests_failed.fetch_add(1, Relaxed);
            shared.log(format_args!("iperf3 test ended early: {e}"));
            *stats.last_error.lock() = Some(e.to_string());
            if matches!(e, Fail::Timeout(_) | Fail::Protocol(_)) {
                ctrl.abort();
                return;
            }
        }
    }
    // Let the last bytes (DISPLAY_RESULTS, or the error) reach the client, then close.
    let _ = timeout(STEP_TIMEOUT, ctrl.flush()).await;
}

async fn step<T>(what: &'static str, f: impl Future<Output = Result<T, Fail>>) -> Result<T, Fail> {
    timeout(STEP_TIMEOUT, f)
        .await
        .unwrap_or(Err(Fail::Timeout(what)))
}

async fn read_exact(s: &mut TcpSocket, buf: &mut [u8]) -> Result<(), Fail> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]).await? {
            0 => return Err(Fail::ClientGone),
            n => got += n,
        }
    }
    Ok(())
}

async fn send_state(s: &mut TcpSocket, st: i8) -> Result<(), Fail> {
    s.write_all(&st.to_be_bytes()).await?;
    Ok(())
}

async fn read_state(s: &mut TcpSocket) -> Result<i8, Fail> {
    let mut b = [0u8; 1];
    read_exact(s, &mut b).await?;
    Ok(i8::from_be_bytes(b))
}

async fn read_json(s: &mut TcpSocket) -> Result<Json, Fail> {
    let mut len = [0u8; 4];
    read_exact(s, &mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_JSON {
        return Err(Fail::Protocol(format!("JSON message of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    read_exact(s, &mut body).await?;
    json::parse(&body).map_err(|e| Fail::Protocol(e.to_string()))
}

async fn write_json(s: &mut TcpSocket, j: &Json) -> Result<(), Fail> {
    let text = j.to_compact();
    let len = u32::try_from(text.len()).map_err(|_| Fail::Protocol("results too long".into()))?;
    s.write_all(&len.to_be_bytes()).await?;
    s.write_all(text.as_bytes()).await?;
    Ok(())
}

/// The parameters this server acts on.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Streams (`-P`).
    pub parallel: usize,
    /// The server sends (`-R`).
    pub reverse: bool,
    /// Seconds (`-t`); 0 when the test ends by bytes or blocks.
    pub time: u64,
    /// Seconds to leave out at the start (`-O`).
    pub omit: u64,
    /// Bytes to send in all (`-n`; 0: no limit), honoured when the server sends.
    pub bytes: u64,
    /// Whether the client wants the server's output (`--get-server-output`).
    pub get_server_output: bool,
}

impl Params {
    /// Reads the client's parameter message. `Err` is what to tell the client.
    pub fn from_json(j: &Json) -> Result<Params, String> {
        if j.get("udp").is_some() {
            return Err("UDP tests are not implemented by the zcnet server".into());
        }
        if j.get("sctp").is_some() {
            return Err("SCTP tests are not implemented by the zcnet server".into());
        }
        if j.get("bidirectional").is_some() {
            return Err("--bidir is not implemented by the zcnet server".into());
        }
        // Absent: iperf3's default; present: a non-negative integer.
        let num = |k: &str| match j.get(k) {
            None => Ok(0),
            Some(v) => v
                .as_u64()
                .ok_or(format!("parameter {k} is not a non-negative integer")),
        };
        let parallel = match j.get("parallel") {
            None => 1,
            Some(v) => v.as_u64().unwrap_or(0),
        };
        if parallel == 0 || parallel > MAX_STREAMS as u64 {
            return Err(format!(
                "{parallel} streams asked for; the zcnet server takes 1..={MAX_STREAMS}"
            ));
        }
        let (time, omit) = (num("time")?, num("omit")?);
        if time > MAX_TIME || omit > MAX_OMIT {
            return Err(format!(
                "-t {time} -O {omit}: the zcnet server takes at most -t {MAX_TIME} -O {MAX_OMIT}"
            ));
        }
        Ok(Params {
            parallel: parallel as usize,
            reverse: j.get("reverse").is_some(),
            time,
            omit,
            bytes: num("num")?,
            get_server_output: j.get("get_server_output").is_some(),
        })
    }
}

async fn refuse(ctrl: &mut TcpSocket, why: String) -> Fail {
    let _ = step("refusal", async {
        send_state(ctrl, state::SERVER_ERROR).await?;
        ctrl.write_all(&IEUNIMP.to_be_bytes()).await?;
        ctrl.write_all(&0i32.to_be_bytes()).await?;
        Ok(())
    })
    .await;
    Fail::Refused(why)
}

/// One data stream's counts.
#[derive(Debug, Default)]
struct Count {
    /// All bytes moved.
    total: u64,
    /// Bytes moved during the omit period.
    omitted: u64,
}

/// Moves data on one stream until the connection ends; then waits forever (the control
/// channel decides when the test is over).
async fn transfer(
    s: &mut TcpSocket,
    count: &mut Count,
    send: bool,
    limit: u64,
    exec: &'static Executor,
    omit_end: Instant,
) {
    loop {
        let r = if send {
            if limit != 0 && count.total >= limit {
                break;
            }
            let room = if limit == 0 {
                usize::MAX
            } else {
                usize::try_from(limit - count.total).unwrap_or(usize::MAX)
            };
            // Claim space in the ring in place: the bytes sent are whatever the ring holds.
            s.write_with(|buf| {
                let n = buf.len().min(room);
                (n, n)
            })
            .await
            .map(Some)
        } else {
            s.read_with(|data| (data.len(), data.len())).await
        };
        match r {
            Ok(Some(n)) => {
                count.total += n as u64;
                if exec.now() < omit_end {
                    count.omitted += n as u64;
                }
            }
            // End of stream or an error: this stream is done.
            _ => break,
        }
    }
    pending::<()>().await;
}

/// Runs one test on the control connection `ctrl`.
async fn run_test(ctrl: &mut TcpSocket, shared: &Shared) -> Result<TestSummary, Fail> {
    let exec = shared.exec;
    let mut cookie = [0u8; COOKIE_SIZE];
    step("cookie", read_exact(ctrl, &mut cookie)).await?;
    step("parameter request", send_state(ctrl, state::PARAM_EXCHANGE)).await?;
    let pj = step("parameters", read_json(ctrl)).await?;
    let p = match Params::from_json(&pj) {
        Ok(p) => p,
        Err(why) => return Err(refuse(ctrl, why).await),
    };

    // Data streams: every connection accepted now is queued for us; each must carry our cookie.
    shared.set_phase(Phase::Streams);
    step("create streams", send_state(ctrl, state::CREATE_STREAMS)).await?;
    let mut streams: Vec<TcpSocket> = Vec::with_capacity(p.parallel);
    while streams.len() < p.parallel {
        let mut s = timeout(STEP_TIMEOUT, shared.next_stream())
            .await
            .map_err(|_| Fail::Timeout("data stream connection"))?;
        let mut c = [0u8; COOKIE_SIZE];
        match timeout(STEP_TIMEOUT, read_exact(&mut s, &mut c)).await {
            Ok(Ok(())) if c == cookie => streams.push(s),
            // Not one of this test's streams: reset it and keep waiting.
            _ => s.abort(),
        }
    }
    shared.set_phase(Phase::Busy);

    step("test start", async {
        send_state(ctrl, state::TEST_START).await?;
        send_state(ctrl, state::TEST_RUNNING).await
    })
    .await?;
    let start = exec.now();
    let cpu_start = shared.cpu_time();
    let omit_end = start + Duration::from_secs(p.omit);
    let mut counts: Vec<Count> = streams.iter().map(|_| Count::default()).collect();
    let limit = if p.time > 0 {
        Duration::from_secs(p.time + p.omit) + RUN_SLACK
    } else {
        UNTIMED_LIMIT
    };
    let ended = {
        let transfers = join_all(
            streams
                .iter_mut()
                .zip(counts.iter_mut())
                .map(|(s, c)| transfer(s, c, p.reverse, p.bytes, exec, omit_end)),
        );
        let end_msg = async {
            loop {
                match read_state(ctrl).await? {
                    state::TEST_END => return Ok(()),
                    state::CLIENT_TERMINATE => return Err(Fail::ClientGone),
                    // TEST_START and others carry no meaning here.
                    _ => {}
                }
            }
        };
        let (end_msg, transfers) = (pin!(end_msg), pin!(transfers));
        match timeout(limit, select(end_msg, transfers)).await {
            Ok(Either::Left((r, _))) => r,
            // `transfer` never completes, so `join_all` cannot.
            Ok(Either::Right(_)) => Err(Fail::Protocol("transfers ended".into())),
            Err(_) => Err(Fail::Timeout("TEST_END")),
        }
    };
    let end = exec.now();
    let cpu_end = shared.cpu_time();
    // The streams are finished with: close them as iperf3's own server does (FIN after what is
    // queued; a reset would fail a client still reading, as it may with -R). Dropped, they
    // finish closing in the background.
    for s in &mut streams {
        s.close();
    }
    drop(streams);
    ended?;

    let wall = end.saturating_duration_since(start).as_secs_f64().max(1e-9);
    let counted = end.saturating_duration_since(omit_end).as_secs_f64();
    let user = (cpu_end.user - cpu_start.user).max(0.0) / wall * 100.0;
    let system = (cpu_end.system - cpu_start.system).max(0.0) / wall * 100.0;
    let summary = TestSummary {
        streams: counts.len(),
        reverse: p.reverse,
        bytes: counts.iter().map(|c| c.total - c.omitted).sum(),
        seconds: counted,
    };
    let stream_results: Vec<Json> = counts
        .iter()
        .enumerate()
        .map(|(i, c)| {
            // iperf3 numbers streams 1, 3, 4, 5, … in the order they connected.
            let id = if i == 0 { 1 } else { i as u64 + 2 };
            object([
                ("id", id.into()),
                ("bytes", (c.total - c.omitted).into()),
                ("retransmits", (-1i64).into()),
                ("jitter", 0u64.into()),
                ("errors", 0u64.into()),
                ("packets", 0u64.into()),
                ("start_time", 0u64.into()),
                ("end_time", counted.into()),
            ])
        })
        .collect();
    let mut results = vec![
        ("cpu_util_total".to_string(), (user + system).into()),
        ("cpu_util_user".to_string(), user.into()),
        ("cpu_util_system".to_string(), system.into()),
        (
            "sender_has_retransmits".to_string(),
            (if p.reverse { 0i64 } else { -1 }).into(),
        ),
        ("streams".to_string(), Json::Arr(stream_results)),
    ];
    if p.get_server_output {
        let text = format!(
            "zcnet iperf3 server: {} stream(s), zcnet {} {} bytes in {:.2} s = {:.1} Mbit/s, CPU {:.1}% (user {:.1}%, system {:.1}%)\n",
            summary.streams,
            if p.reverse { "sent" } else { "received" },
            summary.bytes,
            summary.seconds,
            summary.bits_per_second() / 1e6,
            user + system,
            user,
            system
        );
        results.push(("server_output_text".to_string(), Json::Str(text)));
    }

    step("results", async {
        send_state(ctrl, state::EXCHANGE_RESULTS).await?;
        let _client_results = read_json(ctrl).await?;
        write_json(ctrl, &Json::Obj(results)).await?;
        send_state(ctrl, state::DISPLAY_RESULTS).await
    })
    .await?;
    // The client answers IPERF_DONE and closes; either is the end.
    match timeout(STEP_TIMEOUT, read_state(ctrl)).await {
        Ok(Ok(state::IPERF_DONE)) | Ok(Err(Fail::ClientGone)) => {}
        Ok(Ok(other)) => return Err(Fail::Protocol(format!("state {other} after results"))),
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(Fail::Timeout("IPERF_DONE")),
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_from_an_iperf3_3_12_client() {
        let j = json::parse(br#"{"tcp":true,"omit":0,"time":2,"num":0,"blockcount":0,"parallel":4,"reverse":true,"len":131072,"pacing_timer":1000,"client_version":"3.12"}"#).unwrap();
        let p = Params::from_json(&j).unwrap();
        assert_eq!(
            p,
            Params {
                parallel: 4,
                reverse: true,
                time: 2,
                omit: 0,
                bytes: 0,
                get_server_output: false
            }
        );
    }

    #[test]
    fn refuses_what_it_does_not_do() {
        for bad in [
            r#"{"udp":true,"parallel":1}"#,
            r#"{"tcp":true,"bidirectional":true}"#,
            r#"{"tcp":true,"parallel":0}"#,
            r#"{"tcp":true,"parallel":17}"#,
            r#"{"tcp":true,"parallel":-3}"#,
            r#"{"tcp":true,"time":1e300}"#,
            r#"{"tcp":true,"time":10,"omit":18446744073709551615}"#,
        ] {
            let j = json::parse(bad.as_bytes()).unwrap();
            assert!(Params::from_json(&j).is_err(), "{bad}");
        }
        // Missing fields take iperf3's defaults.
        let j = json::parse(br#"{"tcp":true}"#).unwrap();
        let p = Params::from_json(&j).unwrap();
        assert_eq!((p.parallel, p.time, p.reverse), (1, 0, false));
        let j = json::parse(br#"{"tcp":true,"time":"x"}"#).unwrap();
        assert!(Params::from_json(&j).is_err());
    }
}
