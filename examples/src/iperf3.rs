//! An iperf3-compatible server on zcnet, so an unmodified `iperf3 -c <addr>` measures zcnet:
//! TCP and UDP (`-u`, with `-b` and `-l`), `-R` (zcnet sends), `--bidir` (both directions at
//! once), `-P N` (parallel streams), `-t`, `-O` (omit), `-n` (when zcnet sends),
//! `--udp-counters-64bit` and `--get-server-output`. What it refuses, and how, is listed under
//! [Refused](#refused).
//!
//! # The protocol (iperf3's control channel, as its client speaks it)
//!
//! ```text
//!  client                                          server (this module)
//!  connect :5201, send cookie (36 chars + NUL) ─►
//!                                              ◄─ state PARAM_EXCHANGE (one signed byte, 9)
//!  params: u32 length (big endian) + JSON     ─►  (checked; a refusal is SERVER_ERROR, below)
//!                                                 UDP: the datagram socket is bound to :5201 now
//!                                              ◄─ CREATE_STREAMS (10)
//!  TCP: N × (connect :5201, send the cookie)  ─►  data streams, ids 1, 3, 4, 5, … in order
//!  UDP: N × (from a new port to :5201:
//!         UDP_CONNECT_MSG, 4 bytes)           ─►
//!                                              ◄─ UDP_CONNECT_REPLY, 4 bytes, same byte order
//!                                              ◄─ TEST_START (1), TEST_RUNNING (2) (one segment)
//!  data on the streams (client → server; server → client with -R; both with --bidir)
//!  TEST_END (4)                               ─►
//!                                              ◄─ EXCHANGE_RESULTS (13)
//!  client results: u32 length + JSON          ─►
//!                                              ◄─ server results: u32 length + JSON
//!                                              ◄─ DISPLAY_RESULTS (14)
//!  IPERF_DONE (16), close                     ─►
//! ```
//!
//! A refused test gets SERVER_ERROR (-2) followed by iperf3's error number and an errno (each a
//! big-endian `i32`; the errno is always 0), which the client prints as its own error message; a
//! control connection arriving while a test runs gets ACCESS_DENIED (-1). The control
//! connection runs without Nagle's algorithm, so no state byte waits for the client's delayed
//! ACK of the one before.
//!
//! With `-P N` a test has N data streams; with `--bidir` 2N: the first N carry data from the
//! client to the server, the next N from the server to the client (the order the client opens
//! them in). The server's results report, per stream, the bytes moved after the omit period and
//! its duration, plus the CPU use over the test, which the client prints as the remote CPU
//! utilisation: read from the [`Iperf3Config::cpu_time`] hook (on Linux, this process's
//! `getrusage`), or 0 without one, as iperf3 itself reports a CPU use it cannot measure.
//!
//! # TCP streams
//!
//! Data moves through the in-place socket APIs: received bytes are consumed in smoltcp's ring
//! (`read_with`) and sent bytes are claimed in it (`write_with`) without our code copying them.
//! TCP streams are not paced: a `-b` given for a TCP test is ignored.
//!
//! # UDP streams
//!
//! A UDP test runs on zcnet's zero-copy [`DatagramSocket`], bound to the server's port from the
//! parameter exchange to the end of the test. A stream is one client port: its first datagram
//! (iperf3 sends [`UDP_CONNECT_MSG`] as a native 32-bit integer, so `39 38 37 36` from a
//! little-endian client) is answered with [`UDP_CONNECT_REPLY`] in the same byte order (the
//! legacy pair, 123456789 and 987654321, likewise). Only datagrams from the control
//! connection's address open streams, and only as many as the test asked for.
//!
//! Every data datagram starts with iperf3's header, big-endian ([`UdpHeader`]):
//!
//! ```text
//!  0         4          8                                   12 (16 with --udp-counters-64bit)
//!  │ seconds │ µseconds │ packet counter (u32, or u64)       │ rest of the -l bytes
//! ```
//!
//! * Receiving, each datagram is read in the frame the driver wrote it into and dropped at once
//!   (its slot goes back to the pool). The counts follow iperf3's own rules: the highest counter
//!   seen is the packet count; a jump forward counts the packets skipped as lost; a counter at
//!   or below the highest seen is out of order and takes one back from the lost count; the
//!   jitter is RFC 1889's (section 6.3.1, A.8): `J += (|D| − J) / 16`, where `D` is the change
//!   in transit time (arrival on the executor's clock minus the sender's timestamp, so the two
//!   clocks need not agree). The results carry `packets`, `errors` (lost), `jitter` and their
//!   values at the end of the omit period (`omitted_packets`, `omitted_errors`), which the
//!   client turns into its "Lost/Total Datagrams" and "Jitter" columns. iperf3's results have
//!   no field for the out-of-order count: it is in the [`TestSummary`], the log line and the
//!   `--get-server-output` text.
//! * Sending (`-R`, `--bidir`), each stream paces itself at `-b` bits per second with the
//!   executor's timers: datagram *k* is due *k* × `8·len/rate` after the start (iperf3's own
//!   sender keeps the same average). When it wakes, a stream sends what is due, but at most
//!   its share of [`MAX_BURST`] (a client's `-b RATE/BURST` lowers that), then sleeps until the
//!   next datagram is due and at least until the next timer tick. So a test sends at most
//!   [`MAX_BURST`] datagrams per tick, however far behind its rate it is (`-b 0`: no rate, one
//!   burst per tick), and the stack's own tasks and the control connection always get their
//!   turn. Each datagram is written in place into a TX frame from
//!   [`DatagramSocket::tx_frame`]: the header, then zeroes (so nothing a slot held before
//!   leaves the host); the stack puts the UDP, IP and Ethernet headers in front. A datagram the
//!   stack cannot send (a full driver queue) still uses its counter, so the client counts it as
//!   lost.
//!
//! # Refused
//!
//! Answered SERVER_ERROR with the iperf3 error number in brackets, which the client prints:
//!
//! * SCTP (`IEUNIMP`, "an option you are trying to set is not implemented yet");
//! * `-R` together with `--bidir` ([`IEREVERSEBIDIR`]);
//! * more than [`MAX_STREAMS`] data streams in all (`-P` over 16, or over 8 with `--bidir`),
//!   `-t` over [`MAX_TIME`], `-O` over [`MAX_OMIT`], a parameter that is not a non-negative
//!   integer (`IEUNIMP`);
//! * a UDP `-l` shorter than the header (12 or 16 bytes) or longer than one datagram the link
//!   carries unfragmented (1472 bytes on a 1500-byte IPv4 link) ([`IEUDPBLOCKSIZE`]);
//! * `-b` above [`MAX_RATE`] ([`IETOTALRATE`]);
//! * a UDP test when the port cannot be bound for datagrams (another UDP socket has it, or the
//!   stack's zero-copy sockets are all in use) ([`IESTREAMLISTEN`]).
//!
//! Accepted but not acted on, as iperf3's own server ignores what it cannot do: `-b` for TCP
//! (see above), `-k`, `-w`, `-M`, `-N`, `-C`, `-S`, `--fq-rate`,
//! `--repeating-payload` (the payload is zeroes), `--dont-fragment` (the stack always sets DF).
//!
//! Every wait on the client is bounded (a dead client never wedges the server), every length
//! and count it sends is checked, and nothing it sends can make the server panic or allocate
//! more than a bounded amount: at most [`MAX_STREAMS`] streams, a [`MAX_JSON`]-byte message,
//! and [`Iperf3Config::udp_queue`] datagrams held in a UDP test.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::future::{pending, poll_fn, Future};
use core::pin::{pin, Pin};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use core::task::{Poll, Waker};
use core::time::Duration;

use futures_util::future::{join_all, select, Either};
use spin::{Mutex, MutexGuard};
use zcnet_executor::time::{sleep, sleep_until, timeout};
use zcnet_executor::{Executor, Instant, LocalSpawner};
use zcnet_stack::datagram::{DatagramError, DatagramQueue, DatagramSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpListener, TcpSocket};
use zcnet_stack::{IpAddress, IpEndpoint, Stack, StackError};

use crate::json::{self, object, Json};
use crate::limit::keep_alive;

/// iperf3's default port.
pub const PORT: u16 = 5201;
/// Bytes of the cookie each connection starts with (36 characters and a NUL).
pub const COOKIE_SIZE: usize = 37;
/// Most data streams one test may have: `-P N` streams, 2N with `--bidir`.
pub const MAX_STREAMS: usize = 16;
/// Largest JSON message accepted from a client.
pub const MAX_JSON: usize = 64 * 1024;
/// Longest test accepted, in seconds (iperf3's own limit for `-t`).
pub const MAX_TIME: u64 = 86_400;
/// Longest omit period accepted, in seconds (iperf3's own limit for `-O`).
pub const MAX_OMIT: u64 = 600;
/// Highest `-b` accepted, in bits per second per stream (100 Gbit/s).
pub const MAX_RATE: u64 = 100_000_000_000;
/// Most datagrams a UDP test sends per timer tick of the executor, shared by its sending streams
/// (each sends at least one): 64 datagrams of 1460 bytes per 1 ms tick is about 750 Mbit/s,
/// the most a UDP test sends at that datagram length and tick, whatever `-b` asks for.
pub const MAX_BURST: u64 = 64;
/// Datagram length of a UDP test whose client gave none (iperf3's `DEFAULT_UDP_BLKSIZE`),
/// shortened to what the link carries.
pub const DEFAULT_UDP_LEN: usize = 1460;
/// Socket buffer size (each direction) of every stream: large enough for smoltcp's window
/// scaling to keep a fast link busy.
pub const STREAM_BUFFER: usize = 256 * 1024;
/// Most datagrams [`Iperf3Config::udp_queue`] may hold.
pub const MAX_UDP_QUEUE: usize = 1024;

/// What an iperf3 client sends, as a native-endian `u32`, to open a UDP stream.
pub const UDP_CONNECT_MSG: u32 = 0x3637_3839;
/// What the server answers to [`UDP_CONNECT_MSG`], in the client's byte order.
pub const UDP_CONNECT_REPLY: u32 = 0x3938_3736;
/// What iperf3 clients before 3.12 send to open a UDP stream.
pub const LEGACY_UDP_CONNECT_MSG: u32 = 123_456_789;
/// The answer to [`LEGACY_UDP_CONNECT_MSG`] (clients from 3.12 on accept it too).
pub const LEGACY_UDP_CONNECT_REPLY: u32 = 987_654_321;

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
/// iperf3's error number for a bad UDP datagram length (`IEUDPBLOCKSIZE`).
pub const IEUDPBLOCKSIZE: i32 = 20;
/// iperf3's error number for `-R` with `--bidir` (`IEREVERSEBIDIR`).
pub const IEREVERSEBIDIR: i32 = 25;
/// iperf3's error number for a rate above the server's limit (`IETOTALRATE`).
pub const IETOTALRATE: i32 = 27;
/// iperf3's error number for "unable to start stream listener" (`IESTREAMLISTEN`).
pub const IESTREAMLISTEN: i32 = 202;

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
    /// Port for the control connection and the data streams (TCP, and UDP in a UDP test).
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
    /// Datagrams a UDP test's socket may hold before further ones are dropped (and counted as
    /// lost by the client), 1..=[`MAX_UDP_QUEUE`] (clamped). Each one is a frame-pool slot, held
    /// only until the server's task has read its header; size the pool for it. Default 128.
    pub udp_queue: usize,
    /// TCP keep-alive interval of the control connection and the streams (see
    /// [`keep_alive`]): a connection whose peer stays silent for three intervals ends. The
    /// setup and teardown steps have their own deadline (10 s each) and a test its length.
    pub keep_alive: Duration,
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
            udp_queue: 128,
            keep_alive: Duration::from_secs(30),
        }
    }
}

/// What one finished test measured (the server's view).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TestSummary {
    /// Data streams, both directions.
    pub streams: usize,
    /// Whether the server sent (`-R`) rather than received.
    pub reverse: bool,
    /// Whether data went both ways (`--bidir`).
    pub bidir: bool,
    /// Whether it was a UDP test.
    pub udp: bool,
    /// Bytes moved over all streams after the omit period, both directions.
    pub bytes: u64,
    /// Of those, bytes the server received.
    pub bytes_received: u64,
    /// Of those, bytes the server sent.
    pub bytes_sent: u64,
    /// Seconds from the end of the omit period to the end of the test.
    pub seconds: f64,
    /// UDP: datagrams the client sent after the omit period, by their counters (iperf3's
    /// "Total Datagrams"), over the streams the server received.
    pub packets_received: u64,
    /// UDP: of those, lost (gaps in the counters, less late arrivals).
    pub lost: u64,
    /// UDP: datagrams that arrived after a higher counter.
    pub out_of_order: u64,
    /// UDP: jitter in seconds, the mean over the streams the server received.
    pub jitter: f64,
    /// UDP: datagrams the server sent after the omit period.
    pub packets_sent: u64,
}

impl TestSummary {
    /// Bits per second over the test, both directions.
    pub fn bits_per_second(&self) -> f64 {
        rate(self.bytes, self.seconds)
    }

    /// Lost datagrams as a percentage of those the client sent (0 without any).
    pub fn lost_percent(&self) -> f64 {
        if self.packets_received > 0 {
            self.lost as f64 * 100.0 / self.packets_received as f64
        } else {
            0.0
        }
    }

    /// Whether the server received data in this test.
    pub fn received(&self) -> bool {
        !self.reverse || self.bidir
    }

    /// Whether the server sent data in this test.
    pub fn sent(&self) -> bool {
        self.reverse || self.bidir
    }
}

fn rate(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

impl fmt::Display for TestSummary {
    /// One line: `1 stream(s), zcnet received 123 bytes in 2.00 s = 0.0 Mbit/s` for a one-way
    /// TCP test; the protocol, each direction and the UDP counts otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.udp && !self.bidir {
            return write!(
                f,
                "{} stream(s), zcnet {} {} bytes in {:.2} s = {:.1} Mbit/s",
                self.streams,
                if self.reverse { "sent" } else { "received" },
                self.bytes,
                self.seconds,
                self.bits_per_second() / 1e6
            );
        }
        write!(
            f,
            "{}{}, {} stream(s), {:.2} s:",
            if self.udp { "UDP" } else { "TCP" },
            if self.bidir { " --bidir" } else { "" },
            self.streams,
            self.seconds
        )?;
        if self.received() {
            write!(
                f,
                " zcnet received {} bytes = {:.1} Mbit/s",
                self.bytes_received,
                rate(self.bytes_received, self.seconds) / 1e6
            )?;
            if self.udp {
                write!(
                    f,
                    ", {} datagrams, {} lost ({:.2}%), {} out of order, jitter {:.3} ms",
                    self.packets_received,
                    self.lost,
                    self.lost_percent(),
                    self.out_of_order,
                    self.jitter * 1e3
                )?;
            }
        }
        if self.bidir {
            f.write_str(";")?;
        }
        if self.sent() {
            write!(
                f,
                " zcnet sent {} bytes = {:.1} Mbit/s",
                self.bytes_sent,
                rate(self.bytes_sent, self.seconds) / 1e6
            )?;
            if self.udp {
                write!(f, ", {} datagrams", self.packets_sent)?;
            }
        }
        Ok(())
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
    stack: Stack,
    port: u16,
    udp_queue: usize,
    keep_alive: Duration,
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
    shared: Rc<Shared>,
}

impl Iperf3Server {
    /// Listens on `config.port`. Errors when the stack has too few free socket slots for the
    /// backlog or the port already has a listener.
    pub fn bind(stack: Stack, config: Iperf3Config) -> Result<Iperf3Server, StackError> {
        let listener = TcpListener::bind(stack, config.port, config.backlog, stream_buffers)?;
        Ok(Iperf3Server {
            listener,
            shared: Rc::new(Shared {
                dispatch: Mutex::new(Dispatch {
                    phase: Phase::Idle,
                    queue: VecDeque::new(),
                    waker: None,
                }),
                stats: Iperf3Stats::default(),
                log: config.log,
                cpu_time: config.cpu_time,
                exec: stack.executor(),
                stack,
                port: config.port,
                udp_queue: config.udp_queue.clamp(1, MAX_UDP_QUEUE),
                keep_alive: config.keep_alive,
            }),
        })
    }

    /// A handle on the counters.
    pub fn stats(&self) -> Iperf3Stats {
        self.shared.stats.clone()
    }

    /// Accepts connections until the stack shuts down: a control connection starts a test in
    /// its own task; while that test waits for its streams, connections are handed to it;
    /// otherwise a connection during a test is answered ACCESS_DENIED and closed.
    pub async fn run(mut self, spawner: LocalSpawner) {
        loop {
            // Fails only once the stack is shut down.
            let Ok(mut sock) = self.listener.accept().await else {
                return;
            };
            keep_alive(&mut sock, self.shared.keep_alive);
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
    /// A UDP stream could not be answered.
    Datagram(DatagramError),
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
            Fail::Datagram(e) => write!(f, "UDP stream: {e}"),
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
            shared.log(format_args!("iperf3 test done: {summary}"));
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
    /// Streams in each direction the test uses (`-P`).
    pub parallel: usize,
    /// The server sends (`-R`).
    pub reverse: bool,
    /// Data flows both ways (`--bidir`): `parallel` streams each way.
    pub bidir: bool,
    /// A UDP test (`-u`).
    pub udp: bool,
    /// Seconds (`-t`); 0 when the test ends by bytes or blocks.
    pub time: u64,
    /// Seconds to leave out at the start (`-O`).
    pub omit: u64,
    /// Bytes to send in all (`-n`; 0: no limit), honoured per stream when the server sends.
    pub bytes: u64,
    /// Bytes per write, per datagram in a UDP test (`-l`); 0 when the client gave none.
    pub len: usize,
    /// Bits per second per stream (`-b`; 0: no limit), honoured by UDP streams the server
    /// sends.
    pub rate: u64,
    /// Datagrams per burst (`-b RATE/BURST`); 0 when the client gave none.
    pub burst: u64,
    /// 64-bit packet counters in UDP datagrams (`--udp-counters-64bit`).
    pub udp_counters_64bit: bool,
    /// Whether the client wants the server's output (`--get-server-output`).
    pub get_server_output: bool,
}

/// Why a client's parameters were refused: the iperf3 error number the client is sent (it prints
/// its own message for it) and the reason, for the server's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// iperf3's error number ([`IEUNIMP`], [`IEUDPBLOCKSIZE`], …).
    pub error: i32,
    /// What was wrong.
    pub reason: String,
}

impl Refusal {
    fn new(error: i32, reason: impl Into<String>) -> Self {
        Refusal {
            error,
            reason: reason.into(),
        }
    }
}

/// Longest UDP datagram payload there is (iperf3's `MAX_UDP_BLOCKSIZE`); the link's MTU usually
/// allows less, checked when the test's socket is bound.
const MAX_UDP_LEN: u64 = 65_535 - 8 - 20;

impl Params {
    /// Reads the client's parameter message: TCP or UDP, one way, `-R` or `--bidir`, with every
    /// number bounded (see the [module docs](self#refused)). `Err` is what to tell the client.
    pub fn parse(j: &Json) -> Result<Params, Refusal> {
        if j.get("sctp").is_some() {
            return Err(Refusal::new(
                IEUNIMP,
                "SCTP tests are not implemented by the zcnet server",
            ));
        }
        // Absent: iperf3's default; present: a non-negative integer.
        let num = |k: &str| match j.get(k) {
            None => Ok(0),
            Some(v) => v.as_u64().ok_or_else(|| {
                Refusal::new(
                    IEUNIMP,
                    format!("parameter {k} is not a non-negative integer"),
                )
            }),
        };
        let udp = j.get("udp").is_some();
        let reverse = j.get("reverse").is_some();
        let bidir = j.get("bidirectional").is_some();
        if reverse && bidir {
            return Err(Refusal::new(IEREVERSEBIDIR, "-R together with --bidir"));
        }
        let parallel = match j.get("parallel") {
            None => 1,
            Some(v) => v.as_u64().unwrap_or(0),
        };
        let most = if bidir { MAX_STREAMS / 2 } else { MAX_STREAMS };
        if parallel == 0 || parallel > most as u64 {
            return Err(Refusal::new(
                IEUNIMP,
                format!(
                    "{parallel} streams asked for{}; the zcnet server takes 1..={most}",
                    if bidir { " each way" } else { "" }
                ),
            ));
        }
        let (time, omit) = (num("time")?, num("omit")?);
        if time > MAX_TIME || omit > MAX_OMIT {
            return Err(Refusal::new(
                IEUNIMP,
                format!(
                    "-t {time} -O {omit}: the zcnet server takes at most -t {MAX_TIME} -O {MAX_OMIT}"
                ),
            ));
        }
        let rate = num("bandwidth")?;
        if rate > MAX_RATE {
            return Err(Refusal::new(
                IETOTALRATE,
                format!("-b {rate}: the zcnet server takes at most {MAX_RATE} bit/s per stream"),
            ));
        }
        let udp_counters_64bit = j.get("udp_counters_64bit").is_some();
        let len = num("len")?;
        let header = UdpHeader::size(udp_counters_64bit) as u64;
        if udp && len != 0 && !(header..=MAX_UDP_LEN).contains(&len) {
            return Err(Refusal::new(
                IEUDPBLOCKSIZE,
                format!("-l {len}: a UDP datagram takes {header}..={MAX_UDP_LEN} bytes"),
            ));
        }
        Ok(Params {
            parallel: parallel as usize,
            reverse,
            bidir,
            udp,
            time,
            omit,
            bytes: num("num")?,
            len: usize::try_from(len).unwrap_or(usize::MAX),
            rate,
            burst: num("burst")?,
            udp_counters_64bit,
            get_server_output: j.get("get_server_output").is_some(),
        })
    }

    /// Reads the parameters of a one-way TCP test, for a server that does only that:
    /// [`parse`](Self::parse), and UDP and `--bidir` refused too. `Err` is what to tell the
    /// client (as `IEUNIMP`).
    pub fn from_json(j: &Json) -> Result<Params, String> {
        let p = Params::parse(j).map_err(|r| r.reason)?;
        if p.udp {
            return Err("UDP tests are not implemented by this server".into());
        }
        if p.bidir {
            return Err("--bidir is not implemented by this server".into());
        }
        Ok(p)
    }

    /// Data streams in all: `parallel`, twice that with `--bidir`.
    pub fn streams(&self) -> usize {
        if self.bidir {
            2 * self.parallel
        } else {
            self.parallel
        }
    }

    /// Of [`streams`](Self::streams), those that carry data to the server: they come first.
    pub fn streams_received(&self) -> usize {
        if self.reverse {
            0
        } else {
            self.parallel
        }
    }
}

async fn refuse(ctrl: &mut TcpSocket, r: Refusal) -> Fail {
    let _ = step("refusal", async {
        send_state(ctrl, state::SERVER_ERROR).await?;
        ctrl.write_all(&r.error.to_be_bytes()).await?;
        ctrl.write_all(&0i32.to_be_bytes()).await?;
        Ok(())
    })
    .await;
    Fail::Refused(r.reason)
}

/// iperf3's header at the start of every UDP data datagram, all fields big-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpHeader {
    /// When the datagram was sent: seconds on the sender's clock.
    pub sec: u32,
    /// Microseconds on top of `sec`.
    pub usec: u32,
    /// The stream's packet counter: 1 for its first datagram.
    pub count: u64,
}

impl UdpHeader {
    /// Header bytes: 12 with 32-bit counters, 16 with 64-bit ones (`wide`).
    pub const fn size(wide: bool) -> usize {
        if wide {
            16
        } else {
            12
        }
    }

    /// The header for a datagram sent at `t` on the executor's clock.
    pub fn at(t: Instant, count: u64) -> UdpHeader {
        let micros = t.as_nanos() / 1000;
        UdpHeader {
            // Wraps after 136 years of uptime; only differences are ever used.
            sec: (micros / 1_000_000) as u32,
            usec: (micros % 1_000_000) as u32,
            count,
        }
    }

    /// Reads the header at the start of `datagram`; `None` if it is too short.
    pub fn parse(datagram: &[u8], wide: bool) -> Option<UdpHeader> {
        let word = |at: usize| -> Option<u32> {
            Some(u32::from_be_bytes(*datagram.get(at..)?.first_chunk()?))
        };
        let count = if wide {
            u64::from_be_bytes(*datagram.get(8..)?.first_chunk()?)
        } else {
            u64::from(word(8)?)
        };
        Some(UdpHeader {
            sec: word(0)?,
            usec: word(4)?,
            count,
        })
    }

    /// Writes the header at the start of `buf` (a 32-bit counter takes the low 32 bits of
    /// `count`); `false` if `buf` is too short.
    pub fn write(&self, buf: &mut [u8], wide: bool) -> bool {
        let Some(h) = buf.get_mut(..Self::size(wide)) else {
            return false;
        };
        h[..4].copy_from_slice(&self.sec.to_be_bytes());
        h[4..8].copy_from_slice(&self.usec.to_be_bytes());
        if wide {
            h[8..].copy_from_slice(&self.count.to_be_bytes());
        } else {
            h[8..].copy_from_slice(&(self.count as u32).to_be_bytes());
        }
        true
    }

    /// The send time in microseconds.
    fn micros(&self) -> i64 {
        i64::from(self.sec) * 1_000_000 + i64::from(self.usec)
    }
}

/// The answer to a UDP stream's first datagram: [`UDP_CONNECT_REPLY`] in the byte order the
/// client wrote [`UDP_CONNECT_MSG`] in, or [`LEGACY_UDP_CONNECT_REPLY`] to the legacy message;
/// little-endian [`UDP_CONNECT_REPLY`] to anything else (iperf3's own server does not look).
pub fn udp_connect_reply(hello: &[u8]) -> [u8; 4] {
    let msg: [u8; 4] = hello.first_chunk().copied().unwrap_or_default();
    if msg == UDP_CONNECT_MSG.to_be_bytes() {
        UDP_CONNECT_REPLY.to_be_bytes()
    } else if msg == LEGACY_UDP_CONNECT_MSG.to_le_bytes() {
        LEGACY_UDP_CONNECT_REPLY.to_le_bytes()
    } else if msg == LEGACY_UDP_CONNECT_MSG.to_be_bytes() {
        LEGACY_UDP_CONNECT_REPLY.to_be_bytes()
    } else {
        UDP_CONNECT_REPLY.to_le_bytes()
    }
}

/// One data stream's counts.
#[derive(Debug, Default)]
struct Count {
    /// All bytes moved.
    total: u64,
    /// Bytes moved during the omit period.
    omitted: u64,
    /// UDP: the packet counter (sending: the last one used; receiving: the highest seen).
    packets: u64,
    /// UDP: `packets` at the end of the omit period.
    omitted_packets: u64,
    /// UDP receiving: datagrams missing (iperf3's `cnt_error`).
    errors: u64,
    /// UDP receiving: `errors` at the end of the omit period.
    omitted_errors: u64,
    /// UDP receiving: datagrams that came after a higher counter.
    out_of_order: u64,
    /// UDP receiving: `out_of_order` at the end of the omit period.
    omitted_out_of_order: u64,
    /// UDP receiving: RFC 1889 jitter, in seconds.
    jitter: f64,
    /// UDP receiving: the last datagram's transit time (arrival less send time) in µs; `None`
    /// before the first datagram after the omit period.
    transit: Option<i64>,
    /// UDP receiving: the end of the omit period has been seen.
    counting: bool,
}

impl Count {
    /// Bytes moved after the omit period.
    fn bytes(&self) -> u64 {
        self.total - self.omitted
    }

    fn add(&mut self, n: u64, now: Instant, omit_end: Instant) {
        self.total += n;
        if now < omit_end {
            self.omitted += n;
        }
    }

    /// Counts a UDP datagram that arrived at `now`, as iperf3's `iperf_udp_recv` does.
    fn udp_datagram(&mut self, datagram: &[u8], wide: bool, now: Instant, omit_end: Instant) {
        if !self.counting && now >= omit_end {
            // The omit period is over: what follows is counted afresh (iperf3's
            // `iperf_reset_stats`), and the jitter starts again.
            self.counting = true;
            self.omitted_packets = self.packets;
            self.omitted_errors = self.errors;
            self.omitted_out_of_order = self.out_of_order;
            self.jitter = 0.0;
            self.transit = None;
        }
        self.add(datagram.len() as u64, now, omit_end);
        let Some(h) = UdpHeader::parse(datagram, wide) else {
            return;
        };
        if h.count > self.packets {
            // Forward; a gap is loss.
            self.errors = self.errors.saturating_add(h.count - self.packets - 1);
            self.packets = h.count;
        } else {
            // Backward (or repeated): out of order, and one fewer lost than the gap said.
            self.out_of_order += 1;
            self.errors = self.errors.saturating_sub(1);
        }
        // Arrival on our clock less send time on the client's: the clocks' offset cancels out
        // of the difference between two transits. (Both fit easily: at most 2^54 and 2^52 µs.)
        let arrival = (now.as_nanos() / 1000) as i64;
        let transit = arrival - h.micros();
        let previous = self.transit.replace(transit).unwrap_or(transit);
        let d = transit.abs_diff(previous) as f64 / 1e6;
        self.jitter += (d - self.jitter) / 16.0;
    }
}

/// Moves data on one TCP stream until the connection ends; then waits forever (the control
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
            Ok(Some(n)) => count.add(n as u64, exec.now(), omit_end),
            // End of stream or an error: this stream is done.
            _ => break,
        }
    }
    pending::<()>().await;
}

/// Waits for a UDP test's `n` streams: the first datagram from each new port at the control
/// connection's address `peer` opens a stream and is answered (a repeated one is answered
/// again). Returns the streams' client endpoints in the order they opened.
async fn udp_streams(
    sock: &DatagramSocket,
    peer: IpAddress,
    n: usize,
) -> Result<Vec<IpEndpoint>, Fail> {
    let mut peers: Vec<IpEndpoint> = Vec::with_capacity(n);
    while peers.len() < n {
        let d = sock.recv().await;
        let from = d.src();
        if from.addr != peer {
            continue;
        }
        let reply = udp_connect_reply(d.payload());
        // The receive slot goes back to the pool before the reply may wait for ARP / NDP.
        drop(d);
        if !peers.contains(&from) {
            peers.push(from);
        }
        let mut frame = sock.tx_frame().await;
        frame
            .append(reply.len())
            .map_err(|e| Fail::Protocol(format!("no room for the UDP connect reply: {e}")))?
            .copy_from_slice(&reply);
        sock.send_to(frame, from).await.map_err(Fail::Datagram)?;
    }
    Ok(peers)
}

/// Receives a UDP test's datagrams until the test ends: each is counted for the stream whose
/// client port sent it (`peers[i]` is `counts[i]`'s) and dropped at once, which returns its slot
/// to the pool; datagrams from elsewhere are dropped uncounted.
async fn udp_receive(
    sock: &DatagramSocket,
    peers: &[IpEndpoint],
    counts: &mut [Count],
    wide: bool,
    exec: &'static Executor,
    omit_end: Instant,
) {
    loop {
        let d = sock.recv().await;
        let from = d.src();
        if let Some(c) = peers
            .iter()
            .position(|p| *p == from)
            .and_then(|i| counts.get_mut(i))
        {
            c.udp_datagram(d.payload(), wide, exec.now(), omit_end);
        }
    }
}

/// How a UDP stream the server sends is paced.
#[derive(Clone, Copy, Debug)]
struct Pace {
    /// Datagram payload length (at least the header).
    len: usize,
    /// Bits per second; 0: as fast as TX frames come.
    rate: u64,
    /// Most datagrams sent in one go, once per timer tick at most, 1..=[`MAX_BURST`].
    burst: u64,
    /// 64-bit packet counters.
    wide: bool,
    /// Bytes to send in all; 0: no limit.
    limit: u64,
}

impl Pace {
    /// Nanoseconds after the start at which datagram `k` (counting from 0) is due.
    fn due_at(&self, k: u64) -> u64 {
        let ns =
            u128::from(k) * 8 * self.len as u128 * 1_000_000_000 / u128::from(self.rate.max(1));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// How many datagrams are due `elapsed` nanoseconds after the start (the first at once).
    fn due_by(&self, elapsed: u64) -> u64 {
        let per_datagram = 8 * self.len.max(1) as u128 * 1_000_000_000;
        let n = u128::from(elapsed) * u128::from(self.rate) / per_datagram + 1;
        u64::try_from(n).unwrap_or(u64::MAX)
    }
}

/// Waits at least until the executor's next timer tick (a sleep of 1 µs, which the timer wheel
/// rounds up to its tick), and returns to the executor at least once even if that sleep is
/// over by the time it is first polled.
async fn next_tick() {
    let mut nap = pin!(sleep(Duration::from_micros(1)));
    let mut first = true;
    poll_fn(|cx| {
        let r = nap.as_mut().poll(cx);
        if core::mem::take(&mut first) && r.is_ready() {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        r
    })
    .await;
}

/// Sends one UDP stream to `to` at `pace` until the test ends (or its byte limit): iperf3's
/// header written in place into each TX frame, the rest zeroed; then waits forever.
async fn udp_send(
    sock: &DatagramSocket,
    to: IpEndpoint,
    count: &mut Count,
    pace: Pace,
    exec: &'static Executor,
    omit_end: Instant,
) {
    let start = exec.now();
    let header = UdpHeader::size(pace.wide);
    'send: loop {
        let due = if pace.rate == 0 {
            pace.burst
        } else {
            let elapsed = exec.now().saturating_duration_since(start).as_nanos();
            let elapsed = u64::try_from(elapsed).unwrap_or(u64::MAX);
            pace.due_by(elapsed)
                .saturating_sub(count.packets)
                .min(pace.burst)
        };
        for _ in 0..due {
            if pace.limit != 0 && count.total >= pace.limit {
                break 'send;
            }
            let mut frame = sock.tx_frame().await;
            // The link's MTU was checked against `len` when the test began, and the pool's
            // slots hold a frame at the MTU, so this fails only on a misconfigured pool.
            let Ok(payload) = frame.append(pace.len) else {
                break 'send;
            };
            count.packets += 1;
            let now = exec.now();
            UdpHeader::at(now, count.packets).write(payload, pace.wide);
            if let Some(rest) = payload.get_mut(header..) {
                rest.fill(0);
            }
            if now < omit_end {
                count.omitted_packets = count.packets;
            }
            match sock.send_to(frame, to).await {
                Ok(()) => count.add(pace.len as u64, now, omit_end),
                // The client's endpoint cannot be sent to at all: this stream is done.
                Err(
                    DatagramError::Unaddressable
                    | DatagramError::TooLarge
                    | DatagramError::NoHeadroom,
                ) => break 'send,
                // Dropped on the way (driver queue full, neighbour silent): the counter was
                // used, so the client counts the datagram as lost.
                Err(_) => {}
            }
        }
        // Until the next datagram is due, or, behind the rate or without one, until the
        // executor's next timer tick: one burst per tick at most, so the stream never keeps
        // the executor from its other work (the stack's ingress, the control connection).
        let now = exec.now();
        let next = start.saturating_add(Duration::from_nanos(pace.due_at(count.packets)));
        if pace.rate != 0 && next > now {
            sleep_until(next).await;
        } else {
            next_tick().await;
        }
    }
    pending::<()>().await;
}

/// A test's data streams.
enum Streams {
    /// TCP connections, in the order the client opened them.
    Tcp(Vec<TcpSocket>),
    /// The UDP socket and each stream's client endpoint, in the order they opened.
    Udp(DatagramSocket, Vec<IpEndpoint>),
}

/// Waits for `n` TCP data streams carrying `cookie`.
async fn tcp_streams(
    shared: &Shared,
    cookie: &[u8; COOKIE_SIZE],
    n: usize,
) -> Result<Vec<TcpSocket>, Fail> {
    let mut streams: Vec<TcpSocket> = Vec::with_capacity(n);
    while streams.len() < n {
        let mut s = timeout(STEP_TIMEOUT, shared.next_stream())
            .await
            .map_err(|_| Fail::Timeout("data stream connection"))?;
        let mut c = [0u8; COOKIE_SIZE];
        match timeout(STEP_TIMEOUT, read_exact(&mut s, &mut c)).await {
            Ok(Ok(())) if c == *cookie => streams.push(s),
            // Not one of this test's streams: reset it and keep waiting.
            _ => s.abort(),
        }
    }
    Ok(streams)
}

/// Sets up the data streams of the test `p` asks for: binds the UDP socket, tells the client
/// to open the streams, waits for them. Returns them with the UDP datagram length.
async fn open_streams(
    ctrl: &mut TcpSocket,
    shared: &Shared,
    cookie: &[u8; COOKIE_SIZE],
    p: &Params,
) -> Result<(Streams, usize), Fail> {
    let n = p.streams();
    if !p.udp {
        // Every connection accepted now is queued for us; each must carry our cookie.
        shared.set_phase(Phase::Streams);
        step("create streams", send_state(ctrl, state::CREATE_STREAMS)).await?;
        let streams = tcp_streams(shared, cookie, n).await;
        shared.set_phase(Phase::Busy);
        return Ok((Streams::Tcp(streams?), p.len));
    }
    let Some(peer) = ctrl.remote_endpoint() else {
        return Err(Fail::ClientGone);
    };
    // Bound before CREATE_STREAMS: the client's first datagrams follow it at once.
    let queue = DatagramQueue::with_capacity(shared.udp_queue);
    let sock = match DatagramSocket::bind(shared.stack, shared.port, queue) {
        Ok(s) => s,
        Err(e) => {
            let why = format!("cannot bind UDP port {}: {e}", shared.port);
            return Err(refuse(ctrl, Refusal::new(IESTREAMLISTEN, why)).await);
        }
    };
    let most = sock.max_payload(peer.addr.version());
    let len = if p.len == 0 {
        DEFAULT_UDP_LEN.min(most)
    } else {
        p.len
    };
    if len > most || len < UdpHeader::size(p.udp_counters_64bit) {
        let why = format!("-l {len}: this link carries UDP datagrams of at most {most} bytes");
        return Err(refuse(ctrl, Refusal::new(IEUDPBLOCKSIZE, why)).await);
    }
    step("create streams", send_state(ctrl, state::CREATE_STREAMS)).await?;
    // Each stream gets the time a TCP stream gets; junk from the client cannot stretch that.
    let limit = STEP_TIMEOUT * n as u32;
    let peers = timeout(limit, udp_streams(&sock, peer.addr, n))
        .await
        .map_err(|_| Fail::Timeout("UDP stream connect message"))??;
    Ok((Streams::Udp(sock, peers), len))
}

/// Runs one test on the control connection `ctrl`.
async fn run_test(ctrl: &mut TcpSocket, shared: &Shared) -> Result<TestSummary, Fail> {
    let exec = shared.exec;
    // State bytes go out when written: Nagle's algorithm would hold one back for the ACK of
    // the one before, which a client may delay by tens of milliseconds.
    ctrl.set_nodelay(true);
    let mut cookie = [0u8; COOKIE_SIZE];
    step("cookie", read_exact(ctrl, &mut cookie)).await?;
    step("parameter request", send_state(ctrl, state::PARAM_EXCHANGE)).await?;
    let pj = step("parameters", read_json(ctrl)).await?;
    let p = match Params::parse(&pj) {
        Ok(p) => p,
        Err(r) => return Err(refuse(ctrl, r).await),
    };
    let (mut streams, len) = open_streams(ctrl, shared, &cookie, &p).await?;

    // Both in one segment: the client starts reading the data streams only once it has the
    // second, and the data (UDP with -R especially) starts at once.
    let go = [state::TEST_START, state::TEST_RUNNING].map(|s| s.to_be_bytes()[0]);
    step("test start", async { Ok(ctrl.write_all(&go).await?) }).await?;
    let start = exec.now();
    let cpu_start = shared.cpu_time();
    let omit_end = start + Duration::from_secs(p.omit);
    let received = p.streams_received();
    let mut counts: Vec<Count> = (0..p.streams()).map(|_| Count::default()).collect();
    let limit = if p.time > 0 {
        Duration::from_secs(p.time + p.omit) + RUN_SLACK
    } else {
        UNTIMED_LIMIT
    };
    let ended = {
        let (rx, tx) = counts.split_at_mut(received);
        // One future per TCP stream; for UDP one receiving all streams, one per sending stream.
        let mut tasks: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
        match &mut streams {
            Streams::Tcp(socks) => {
                let (srx, stx) = socks.split_at_mut(received);
                for (s, c) in srx.iter_mut().zip(rx.iter_mut()) {
                    tasks.push(Box::pin(transfer(s, c, false, 0, exec, omit_end)));
                }
                for (s, c) in stx.iter_mut().zip(tx.iter_mut()) {
                    tasks.push(Box::pin(transfer(s, c, true, p.bytes, exec, omit_end)));
                }
            }
            Streams::Udp(sock, peers) => {
                let sock = &*sock;
                let (prx, ptx) = peers.split_at(received);
                let wide = p.udp_counters_64bit;
                tasks.push(Box::pin(udp_receive(sock, prx, rx, wide, exec, omit_end)));
                // MAX_BURST per timer tick, shared by the sending streams (each at least 1),
                // less if the client asked for smaller bursts.
                let share = (MAX_BURST / ptx.len().max(1) as u64).max(1);
                let pace = Pace {
                    len,
                    rate: p.rate,
                    burst: if p.burst == 0 {
                        share
                    } else {
                        p.burst.min(share)
                    },
                    wide,
                    limit: p.bytes,
                };
                for (to, c) in ptx.iter().zip(tx.iter_mut()) {
                    tasks.push(Box::pin(udp_send(sock, *to, c, pace, exec, omit_end)));
                }
            }
        }
        let transfers = join_all(tasks);
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
            // No stream's future ever completes, so `join_all` cannot.
            Ok(Either::Right(_)) => Err(Fail::Protocol("transfers ended".into())),
            Err(_) => Err(Fail::Timeout("TEST_END")),
        }
    };
    let end = exec.now();
    let cpu_end = shared.cpu_time();
    match &mut streams {
        // The streams are finished with: close them as iperf3's own server does (FIN after
        // what is queued; a reset would fail a client still reading, as it may with -R).
        // Dropped, they finish closing in the background. The stack discards what a stream
        // received and we did not read, and resets a stream whose client sends more (it
        // usually has more queued when the test ends), so the streams' frames and pool budget
        // come back at once.
        Streams::Tcp(socks) => socks.iter_mut().for_each(TcpSocket::close),
        // Dropped, the socket is unbound: later datagrams go to smoltcp, which has no socket
        // for them.
        Streams::Udp(..) => {}
    }
    drop(streams);
    ended?;

    let wall = end.saturating_duration_since(start).as_secs_f64().max(1e-9);
    let counted = end.saturating_duration_since(omit_end).as_secs_f64();
    let user = (cpu_end.user - cpu_start.user).max(0.0) / wall * 100.0;
    let system = (cpu_end.system - cpu_start.system).max(0.0) / wall * 100.0;
    let (rx, tx) = counts.split_at(received);
    let summary = TestSummary {
        streams: counts.len(),
        reverse: p.reverse,
        bidir: p.bidir,
        udp: p.udp,
        bytes: counts.iter().map(Count::bytes).sum(),
        bytes_received: rx.iter().map(Count::bytes).sum(),
        bytes_sent: tx.iter().map(Count::bytes).sum(),
        seconds: counted,
        packets_received: rx
            .iter()
            .map(|c| c.packets.saturating_sub(c.omitted_packets))
            .sum(),
        lost: rx
            .iter()
            .map(|c| c.errors.saturating_sub(c.omitted_errors))
            .sum(),
        out_of_order: rx
            .iter()
            .map(|c| c.out_of_order - c.omitted_out_of_order)
            .sum(),
        jitter: if rx.is_empty() {
            0.0
        } else {
            rx.iter().map(|c| c.jitter).sum::<f64>() / rx.len() as f64
        },
        packets_sent: tx
            .iter()
            .map(|c| c.packets.saturating_sub(c.omitted_packets))
            .sum(),
    };
    let stream_results: Vec<Json> = counts
        .iter()
        .enumerate()
        .map(|(i, c)| {
            // iperf3 numbers streams 1, 3, 4, 5, … in the order they connected.
            let id = if i == 0 { 1 } else { i as u64 + 2 };
            object([
                ("id", id.into()),
                ("bytes", c.bytes().into()),
                ("retransmits", (-1i64).into()),
                ("jitter", c.jitter.into()),
                ("errors", c.errors.into()),
                ("omitted_errors", c.omitted_errors.into()),
                ("packets", c.packets.into()),
                ("omitted_packets", c.omitted_packets.into()),
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
            // -1: the server only received; 0: it sent, and has no retransmit counts to give.
            "sender_has_retransmits".to_string(),
            (if summary.sent() { 0i64 } else { -1 }).into(),
        ),
        ("streams".to_string(), Json::Arr(stream_results)),
    ];
    if p.get_server_output {
        let text = format!(
            "zcnet iperf3 server: {summary}, CPU {:.1}% (user {user:.1}%, system {system:.1}%)\n",
            user + system,
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
        let p = Params::parse(&j).unwrap();
        assert_eq!(
            p,
            Params {
                parallel: 4,
                reverse: true,
                bidir: false,
                udp: false,
                time: 2,
                omit: 0,
                bytes: 0,
                len: 131072,
                rate: 0,
                burst: 0,
                udp_counters_64bit: false,
                get_server_output: false
            }
        );
        assert_eq!(Params::from_json(&j), Ok(p.clone()));
        assert_eq!((p.streams(), p.streams_received()), (4, 0));
    }

    #[test]
    fn udp_and_bidir_params_from_an_iperf3_3_12_client() {
        // `iperf3 -c … -u -b 50M -l 1200 --udp-counters-64bit -P 2 -R`
        let j = json::parse(br#"{"udp":true,"omit":0,"time":2,"num":0,"blockcount":0,"parallel":2,"reverse":true,"len":1200,"bandwidth":50000000,"pacing_timer":1000,"udp_counters_64bit":1,"client_version":"3.12"}"#).unwrap();
        let p = Params::parse(&j).unwrap();
        assert!(p.udp && p.reverse && !p.bidir && p.udp_counters_64bit);
        assert_eq!((p.len, p.rate, p.parallel), (1200, 50_000_000, 2));
        assert_eq!((p.streams(), p.streams_received()), (2, 0));
        // A server that does only one-way TCP refuses it through `from_json`.
        assert!(Params::from_json(&j).is_err());

        // `iperf3 -c … --bidir -P 3`: three streams each way, the received ones first.
        let j =
            json::parse(br#"{"tcp":true,"time":2,"parallel":3,"bidirectional":true,"len":131072}"#)
                .unwrap();
        let p = Params::parse(&j).unwrap();
        assert!(p.bidir && !p.udp);
        assert_eq!((p.streams(), p.streams_received()), (6, 3));
        assert!(Params::from_json(&j).is_err());
    }

    #[test]
    fn refuses_what_it_does_not_do() {
        for (bad, error) in [
            (r#"{"sctp":true,"parallel":1}"#, IEUNIMP),
            (r#"{"tcp":true,"parallel":0}"#, IEUNIMP),
            (r#"{"tcp":true,"parallel":17}"#, IEUNIMP),
            (r#"{"tcp":true,"parallel":9,"bidirectional":true}"#, IEUNIMP),
            (r#"{"tcp":true,"parallel":-3}"#, IEUNIMP),
            (r#"{"tcp":true,"time":1e300}"#, IEUNIMP),
            (
                r#"{"tcp":true,"time":10,"omit":18446744073709551615}"#,
                IEUNIMP,
            ),
            (
                r#"{"tcp":true,"reverse":true,"bidirectional":true}"#,
                IEREVERSEBIDIR,
            ),
            (r#"{"udp":true,"bandwidth":100000000001}"#, IETOTALRATE),
            (r#"{"udp":true,"bandwidth":-1}"#, IEUNIMP),
            (r#"{"udp":true,"len":11}"#, IEUDPBLOCKSIZE),
            (
                r#"{"udp":true,"len":12,"udp_counters_64bit":1}"#,
                IEUDPBLOCKSIZE,
            ),
            (r#"{"udp":true,"len":65508}"#, IEUDPBLOCKSIZE),
            (r#"{"udp":true,"len":1e19}"#, IEUDPBLOCKSIZE),
            (r#"{"udp":true,"burst":"x"}"#, IEUNIMP),
        ] {
            let j = json::parse(bad.as_bytes()).unwrap();
            assert_eq!(Params::parse(&j).map_err(|r| r.error), Err(error), "{bad}");
            assert!(Params::from_json(&j).is_err(), "{bad}");
        }
        // Missing fields take iperf3's defaults.
        let j = json::parse(br#"{"tcp":true}"#).unwrap();
        let p = Params::parse(&j).unwrap();
        assert_eq!((p.parallel, p.time, p.reverse, p.len), (1, 0, false, 0));
        let j = json::parse(br#"{"tcp":true,"time":"x"}"#).unwrap();
        assert!(Params::parse(&j).is_err());
        // At the bounds.
        let j = json::parse(br#"{"udp":true,"len":16,"udp_counters_64bit":1,"bandwidth":100000000000,"parallel":8,"bidirectional":true}"#).unwrap();
        assert!(Params::parse(&j).is_ok());
    }

    #[test]
    fn udp_header_round_trips_both_counter_widths() {
        let h = UdpHeader {
            sec: 0x0102_0304,
            usec: 999_999,
            count: 0x1_0000_0002,
        };
        let mut buf = [0xaau8; 20];
        assert!(h.write(&mut buf, true));
        assert_eq!(buf[..4], [1, 2, 3, 4]);
        assert_eq!(buf[8..16], [0, 0, 0, 1, 0, 0, 0, 2]);
        assert_eq!(buf[16], 0xaa);
        assert_eq!(UdpHeader::parse(&buf, true), Some(h));
        assert!(h.write(&mut buf, false));
        // 32 bits: the counter's low half, big-endian.
        assert_eq!(buf[8..12], [0, 0, 0, 2]);
        assert_eq!(
            UdpHeader::parse(&buf, false),
            Some(UdpHeader { count: 2, ..h })
        );
        assert_eq!(UdpHeader::parse(&buf[..11], false), None);
        assert_eq!(UdpHeader::parse(&buf[..15], true), None);
        assert!(!h.write(&mut buf[..15], true));
        let t = Instant::from_nanos(12_345_678_901_234);
        let h = UdpHeader::at(t, 7);
        assert_eq!((h.sec, h.usec, h.count), (12_345, 678_901, 7));
    }

    #[test]
    fn udp_connect_reply_answers_in_the_clients_byte_order() {
        // What iperf3 3.12 on x86 sends: 0x36373839 little-endian.
        assert_eq!(udp_connect_reply(&[0x39, 0x38, 0x37, 0x36]), *b"6789");
        assert_eq!(udp_connect_reply(b"6789"), *b"9876");
        assert_eq!(
            udp_connect_reply(&123_456_789u32.to_le_bytes()),
            987_654_321u32.to_le_bytes()
        );
        assert_eq!(
            udp_connect_reply(&123_456_789u32.to_be_bytes()),
            987_654_321u32.to_be_bytes()
        );
        assert_eq!(udp_connect_reply(b""), *b"6789");
        assert_eq!(udp_connect_reply(b"junk and more"), *b"6789");
    }

    fn datagram(count: u64, sent_us: u64) -> [u8; 16] {
        let mut d = [0u8; 16];
        let h = UdpHeader::at(Instant::from_nanos(sent_us * 1000), count);
        assert!(h.write(&mut d, false));
        d
    }

    #[test]
    fn udp_counts_loss_out_of_order_and_jitter_as_iperf3_does() {
        let mut c = Count::default();
        let at = |us: u64| Instant::from_nanos(us * 1000);
        let start = at(1_000_000);
        // Counters 1, 2, 5, 4, 6, each sent 1 ms after the one before: two skipped at 5 (3 and
        // 4), then 4 comes late.
        for (count, arrive) in [(1, 0), (2, 1000), (5, 2000), (4, 3000), (6, 4000)] {
            let d = datagram(count, 5_000_000 + (count - 1) * 1000);
            c.udp_datagram(&d, false, at(1_000_000 + arrive), start);
        }
        assert_eq!(c.packets, 6);
        assert_eq!(c.errors, 1, "3 is lost, 4 was only late");
        assert_eq!(c.out_of_order, 1);
        assert_eq!(c.bytes(), 5 * 16);
        assert!(c.jitter > 0.0, "the late datagram moved the transit time");

        // Evenly spaced, constant transit: no jitter.
        let mut c = Count::default();
        for k in 1..=100u64 {
            c.udp_datagram(
                &datagram(k, 7_000 + k * 250),
                false,
                at(9_000 + k * 250),
                start,
            );
        }
        assert_eq!((c.packets, c.errors, c.out_of_order), (100, 0, 0));
        assert_eq!(c.jitter, 0.0);

        // A transit that alternates by 1 ms converges on RFC 1889's J ≈ 1 ms.
        let mut c = Count::default();
        for k in 1..=400u64 {
            let delay = if k % 2 == 0 { 1_000 } else { 0 };
            c.udp_datagram(&datagram(k, k * 1000), false, at(k * 1000 + delay), start);
        }
        assert!((c.jitter - 0.001).abs() < 1e-6, "{}", c.jitter);

        // Hostile counters and runts never panic: a jump to u64::MAX, then 0, then a runt.
        let mut c = Count::default();
        let mut d = [0u8; 16];
        assert!(UdpHeader::at(at(0), u64::MAX).write(&mut d, true));
        c.udp_datagram(&d, true, at(1), start);
        assert!(UdpHeader::at(at(0), 0).write(&mut d, true));
        c.udp_datagram(&d, true, at(2), start);
        c.udp_datagram(&d[..3], true, at(3), start);
        assert_eq!((c.packets, c.out_of_order), (u64::MAX, 1));
        assert_eq!(c.total, 16 + 16 + 3);
    }

    #[test]
    fn udp_counts_restart_after_the_omit_period() {
        let mut c = Count::default();
        let at = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        let omit_end = at(1000);
        // During the omit period: counters 1 and 3 (one lost).
        c.udp_datagram(&datagram(1, 0), false, at(10), omit_end);
        c.udp_datagram(&datagram(3, 0), false, at(20), omit_end);
        // After it: 4 and 5.
        c.udp_datagram(&datagram(4, 0), false, at(1001), omit_end);
        c.udp_datagram(&datagram(5, 0), false, at(1002), omit_end);
        assert_eq!((c.packets, c.omitted_packets), (5, 3));
        assert_eq!((c.errors, c.omitted_errors), (1, 1));
        assert_eq!(c.bytes(), 32);
    }

    #[test]
    fn udp_pacing_spreads_datagrams_over_time() {
        let pace = Pace {
            len: 1250,
            rate: 10_000_000, // 1000 datagrams of 10,000 bits per second: one per ms
            burst: MAX_BURST,
            wide: false,
            limit: 0,
        };
        assert_eq!(pace.due_at(0), 0);
        assert_eq!(pace.due_at(1), 1_000_000);
        assert_eq!(pace.due_at(2500), 2_500_000_000);
        assert_eq!(pace.due_by(0), 1);
        assert_eq!(pace.due_by(999_999), 1);
        assert_eq!(pace.due_by(1_000_000), 2);
        assert_eq!(pace.due_by(1_000_000_000), 1001);
        // Extremes saturate instead of overflowing.
        let fast = Pace {
            len: 16,
            rate: MAX_RATE,
            ..pace
        };
        assert!(fast.due_by(u64::MAX) > 0);
        assert_eq!(pace.due_at(u64::MAX), u64::MAX);
    }

    #[test]
    fn summary_lines_name_each_direction() {
        let tcp = TestSummary {
            streams: 1,
            bytes: 1_000_000,
            bytes_received: 1_000_000,
            seconds: 2.0,
            ..TestSummary::default()
        };
        assert_eq!(
            tcp.to_string(),
            "1 stream(s), zcnet received 1000000 bytes in 2.00 s = 4.0 Mbit/s"
        );
        let udp = TestSummary {
            streams: 2,
            bidir: true,
            udp: true,
            bytes: 3_000_000,
            bytes_received: 1_000_000,
            bytes_sent: 2_000_000,
            seconds: 2.0,
            packets_received: 1000,
            lost: 10,
            out_of_order: 2,
            jitter: 0.000_25,
            packets_sent: 2000,
            ..TestSummary::default()
        };
        assert_eq!(
            udp.to_string(),
            "UDP --bidir, 2 stream(s), 2.00 s: zcnet received 1000000 bytes = 4.0 Mbit/s, \
             1000 datagrams, 10 lost (1.00%), 2 out of order, jitter 0.250 ms; \
             zcnet sent 2000000 bytes = 8.0 Mbit/s, 2000 datagrams"
        );
    }
}
