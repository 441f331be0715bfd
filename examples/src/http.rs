//! An HTTP/1.1 server on zcnet: a static page at `/`, the live counters at `/stats` (JSON).
//!
//! ```text
//!  TcpListener (backlog) ─accept─► ConnLimit (≤ max_connections tasks) ─► one task per connection
//!     connection: read head (≤ MAX_HEAD bytes) ─► parse ─► skip body (≤ MAX_BODY) ─► respond
//!                 └─ keep-alive: pipelined bytes stay in the buffer for the next request
//! ```
//!
//! `/stats` shows the stack's counters ([`Stack::stats`]), the driver's counters (when the
//! server was given a [`DriverStats`] hook), the frame pool's occupancy, the copy ledger
//! ([`LEDGER`]), this server's own counters with the TCP totals of the connections it has
//! finished serving ([`TcpTotals`]), the TCP statistics of the connection the request came on
//! ([`TcpSocket::stats`]: its RTT, bytes, segments, retransmissions), and any further
//! sections the caller adds through an [`ExtraStats`] hook. See [`stats_json`] for the
//! document's shape.
//!
//! Robustness: the request head is bounded ([`MAX_HEAD`], else `431`), a body is read and
//! discarded only up to [`MAX_BODY`] (else `413`), malformed requests get `400`, unknown paths
//! `404`, methods other than GET and HEAD `405`, HTTP versions other than 1.0 and 1.1 `505`,
//! chunked request bodies `501`. Nothing in the parser indexes out of bounds or panics on any
//! input (see the unit tests, which feed it every prefix and random bytes).
//!
//! # How long a connection may take
//!
//! Every connection has TCP keep-alive on ([`HttpConfig::keep_alive`]) and these deadlines:
//!
//! * **idle**: a connection waiting for the first byte of a request is ended after
//!   [`HttpConfig::idle_timeout`]: reset if it is new (it never sent a byte; counted in
//!   `timed_out`), closed if it is kept alive between requests;
//! * **request**: from its first byte, a request's head and body must be in within
//!   [`HttpConfig::request_timeout`], however the bytes trickle in (the deadline is not
//!   restarted by each byte), else the connection is reset;
//! * **response**: each response must be written (handed to the stack, which holds at most its
//!   send buffer) within [`HttpConfig::write_timeout`], else the connection is reset: a client
//!   that never reads, or keeps its window closed, cannot hold it.
//!
//! And **at most [`HttpConfig::max_connections`] connections at once**: when they are all
//! taken, a new connection sheds the one that has waited longest for its client (idle between
//! requests, or its request still arriving; see [`ConnLimit`]) if that is at least
//! [`HttpConfig::shed_after`] (1 s), which is reset, and takes its place. A connection
//! writing a response is never shed (its write deadline bounds it), nor one that waited less
//! (a keep-alive client sending its requests back to back keeps its connection). So a slowloris attack, hundreds of connections trickling request bytes, cannot lock
//! new clients out: each new client is accepted as soon as its SYN finds a listening socket
//! (the listener has [`HttpConfig::backlog`] of them, re-armed as each is accepted), and one
//! that sends its request in one go is answered before its connection is the oldest waiting.
//! The server counts what it shed and what timed out ([`HttpStatsSnapshot::shed`],
//! [`HttpStatsSnapshot::timed_out`]).

use alloc::borrow::Cow;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use core::time::Duration;

use zcnet_buffer::ledger::{CopySite, LEDGER};
use zcnet_buffer::LinkState;
use zcnet_executor::time::{now, timeout};
use zcnet_executor::LocalSpawner;
use zcnet_stack::tcp::{TcpBuffers, TcpCounters, TcpError, TcpListener, TcpSocket, TcpStats};
use zcnet_stack::{DropReason, Stack, StackError};

use crate::json::{object, Json};
use crate::limit::{keep_alive, ConnLimit, Permit};

/// The port the example listens on by default.
pub const PORT: u16 = 80;
/// Largest request head (request line and headers) accepted; larger gets `431`.
pub const MAX_HEAD: usize = 8192;
/// Largest request body accepted (and discarded); larger gets `413`.
pub const MAX_BODY: u64 = 64 * 1024;
/// Most header lines accepted in one request; more gets `431`.
pub const MAX_HEADERS: usize = 64;

/// The page served at `/` and `/index.html` unless [`HttpConfig::index_html`] names another.
pub const INDEX_HTML: &str = "<!doctype html>
<html lang=\"en\">
<head><meta charset=\"utf-8\"><title>zcnet</title></head>
<body>
<h1>Hello from zcnet</h1>
<p>This page came from a no_std, event-driven TCP/IP stack (smoltcp inside, driven by an
ingress and an egress task) running in user space over a Linux TAP device.</p>
<p>Live counters: <a href=\"/stats\">/stats</a> (stack, TAP driver, frame pool, copy ledger,
this server, and the TCP statistics of your connection).</p>
</body>
</html>
";

/// Socket buffers of each connection.
fn http_buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(4096, 8192))
}

/// A network driver's counters for `/stats`: a hook the caller supplies, since the server knows
/// nothing of the driver under the stack.
///
/// `/stats` shows them as the top-level member [`name`](Self::name), right after `"stack"`,
/// with whatever [`render`](Self::render) returns as its value. The TAP examples name it
/// `"tap"` (their tests read `tap.rx_frames` and the like); a kernel names its driver
/// (`"virtio"`) and renders that driver's counters.
///
/// ```
/// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use zcnet_examples::http::DriverStats;
/// use zcnet_examples::json::object;
///
/// static RX_FRAMES: AtomicU64 = AtomicU64::new(0);
/// let driver = DriverStats::new("virtio", || {
///     object([("rx_frames", RX_FRAMES.load(Relaxed).into())])
/// });
/// assert_eq!(driver.render().to_compact(), r#"{"rx_frames":0}"#);
/// ```
#[derive(Clone)]
pub struct DriverStats {
    name: &'static str,
    render: Arc<dyn Fn() -> Json + Send + Sync>,
}

impl DriverStats {
    /// Counters shown as the member `name`, rendered by `render`. `render` runs on the
    /// connection's task for every `/stats` request: it must not block (reading atomics is the
    /// usual body) and should return an object ([`object`] builds one).
    pub fn new(name: &'static str, render: impl Fn() -> Json + Send + Sync + 'static) -> Self {
        DriverStats {
            name,
            render: Arc::new(render),
        }
    }

    /// The member's name in `/stats`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The counters now.
    pub fn render(&self) -> Json {
        (self.render)()
    }
}

impl fmt::Debug for DriverStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DriverStats")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Further top-level sections of `/stats`, from the caller: a kernel's own counters (copies it
/// made, interrupt wakeups, ...), which the server cannot know about.
///
/// The members the hook returns are appended, in order, after the built-in ones (`"stack"`,
/// the driver's, `"pool"`, `"copy_ledger"`, `"http"`). Give them names of their own: a
/// repeated name is kept, but a reader that looks members up by name finds the first.
///
/// ```
/// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use zcnet_examples::http::ExtraStats;
/// use zcnet_examples::json::object;
///
/// static IRQ_WAKEUPS: AtomicU64 = AtomicU64::new(0);
/// let extra = ExtraStats::new(|| {
///     vec![(
///         "kernel".to_string(),
///         object([("irq_wakeups", IRQ_WAKEUPS.load(Relaxed).into())]),
///     )]
/// });
/// assert_eq!(extra.render().len(), 1);
/// ```
#[derive(Clone)]
pub struct ExtraStats(Arc<dyn Fn() -> Vec<(String, Json)> + Send + Sync>);

impl ExtraStats {
    /// Sections rendered by `render`, as `(name, value)` members. `render` runs on the
    /// connection's task for every `/stats` request: it must not block.
    pub fn new(render: impl Fn() -> Vec<(String, Json)> + Send + Sync + 'static) -> Self {
        ExtraStats(Arc::new(render))
    }

    /// The sections now.
    pub fn render(&self) -> Vec<(String, Json)> {
        (self.0)()
    }
}

impl fmt::Debug for ExtraStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ExtraStats").finish_non_exhaustive()
    }
}

/// Further paths the caller answers, such as a kernel's test hooks (`GET /exit`).
///
/// Consulted for GET and HEAD requests whose path is none of the built-in ones (`/`,
/// `/index.html`, `/stats`), so it cannot shadow them: `answer` gets the path and returns the
/// status, content type and body, or `None` for the usual `404`. It runs on the connection's
/// task for each such request: it must not block.
///
/// ```
/// use zcnet_examples::http::ExtraRoutes;
///
/// let routes = ExtraRoutes::new(|path| {
///     (path == "/hello").then(|| (200, "text/plain", b"hello\n".to_vec()))
/// });
/// assert_eq!(routes.answer("/hello").map(|r| r.0), Some(200));
/// assert!(routes.answer("/other").is_none());
/// ```
#[derive(Clone)]
#[allow(clippy::type_complexity)]
pub struct ExtraRoutes(Rc<dyn Fn(&str) -> Option<(u16, &'static str, Vec<u8>)>>);

impl ExtraRoutes {
    /// Paths answered by `answer` (see the type's docs).
    pub fn new(answer: impl Fn(&str) -> Option<(u16, &'static str, Vec<u8>)> + 'static) -> Self {
        ExtraRoutes(Rc::new(answer))
    }

    /// The answer for `path`: status, content type, body; `None` if the caller has none.
    pub fn answer(&self, path: &str) -> Option<(u16, &'static str, Vec<u8>)> {
        (self.0)(path)
    }
}

impl fmt::Debug for ExtraRoutes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ExtraRoutes").finish_non_exhaustive()
    }
}

/// How to run the server.
///
/// ```
/// use zcnet_examples::http::{DriverStats, HttpConfig};
/// use zcnet_examples::json::object;
///
/// let config = HttpConfig {
///     driver_stats: Some(DriverStats::new("virtio", || object([]))),
///     ..HttpConfig::default()
/// };
/// assert_eq!(config.port, 80);
/// ```
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// TCP port.
    pub port: u16,
    /// Listening sockets (clients that can be mid-handshake at once), 1..=64.
    pub backlog: usize,
    /// Connections served at once. When all are taken, a new connection sheds the one waiting
    /// longest for its client (see the [module docs](self)); while all are writing responses,
    /// further clients wait (one accepted, the rest in the backlog, the rest of those retrying
    /// their SYN).
    pub max_connections: usize,
    /// A connection waiting this long for the first byte of a request is closed (reset if it
    /// never sent one).
    pub idle_timeout: Duration,
    /// A request (head and body) must be complete this long after its first byte, else the
    /// connection is reset.
    pub request_timeout: Duration,
    /// Each response must be written within this long, else the connection is reset.
    pub write_timeout: Duration,
    /// TCP keep-alive interval of each connection (see [`keep_alive`]): a connection whose
    /// peer stays silent for three intervals ends.
    pub keep_alive: Duration,
    /// With every place taken, a connection that has waited this long for its client (idle,
    /// or its request still arriving) may be shed for a new one (see the module docs).
    pub shed_after: Duration,
    /// The page served at `/` and `/index.html` (as `text/html; charset=utf-8`).
    pub index_html: &'static str,
    /// The driver's counters in `/stats` (none: `/stats` has no driver section). The TAP
    /// examples fill it in with `tap_setup::tap_driver_stats`.
    pub driver_stats: Option<DriverStats>,
    /// Sections appended to `/stats` after the built-in ones (none: no further sections).
    pub extra_stats: Option<ExtraStats>,
    /// Paths answered by the caller beyond the built-in ones (none: they get `404`).
    pub extra_routes: Option<ExtraRoutes>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            port: PORT,
            backlog: 32,
            max_connections: 160,
            idle_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            keep_alive: Duration::from_secs(20),
            shed_after: Duration::from_secs(1),
            index_html: INDEX_HTML,
            driver_stats: None,
            extra_stats: None,
            extra_routes: None,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    requests: AtomicU64,
    status_2xx: AtomicU64,
    status_4xx: AtomicU64,
    status_5xx: AtomicU64,
    shed: AtomicU64,
    timed_out: AtomicU64,
    closed: spin::Mutex<TcpTotals>,
}

/// The TCP counters of the connections the server has finished serving, summed (what
/// `/stats` shows as `http.closed`): a fixed set of sums, however many connections there were.
///
/// A connection counts once its task is done with it: the client closed it, asked to close
/// it, sent something unparseable, or stayed idle past the timeout. The socket then finishes
/// closing in the background, so bytes of a last response still queued then are not in
/// `bytes_sent`, nor the FIN exchange in the segment counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpTotals {
    /// Connections counted.
    pub connections: u64,
    /// Their counters ([`TcpStats::counters`]), summed.
    pub counters: TcpCounters,
}

impl TcpTotals {
    /// Adds one connection.
    pub fn add(&mut self, s: &TcpStats) {
        self.connections += 1;
        self.counters.add(&s.counters);
    }
}

/// TCP counters as JSON members, named as [`TcpCounters`]' fields.
fn counters_json(c: &TcpCounters) -> Vec<(String, Json)> {
    [
        ("bytes_sent", c.bytes_sent),
        ("bytes_retransmitted", c.bytes_retransmitted),
        ("bytes_received", c.bytes_received),
        ("bytes_acked", c.bytes_acked),
        ("segments_sent", c.segments_sent),
        ("segments_received", c.segments_received),
        ("retransmitted_segments", c.retransmitted_segments),
        ("fast_recoveries", c.fast_recoveries),
        ("timeouts", c.timeouts),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into()))
    .collect()
}

/// The server's own counters; clone it to read them while the server runs.
#[derive(Clone, Debug, Default)]
pub struct HttpStats(Arc<Counters>);

/// A reading of [`HttpStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HttpStatsSnapshot {
    /// Connections accepted.
    pub connections: u64,
    /// Requests received (well-formed or not).
    pub requests: u64,
    /// Responses with a 2xx status.
    pub status_2xx: u64,
    /// Responses with a 4xx status.
    pub status_4xx: u64,
    /// Responses with a 5xx status.
    pub status_5xx: u64,
    /// Connections reset to make room for a new one while they waited for their client.
    pub shed: u64,
    /// Connections reset because a request or a response missed its deadline
    /// ([`HttpConfig::request_timeout`], [`HttpConfig::write_timeout`]), or a new connection
    /// sent nothing within [`HttpConfig::idle_timeout`].
    pub timed_out: u64,
    /// TCP totals of the connections the server has finished serving.
    pub closed: TcpTotals,
}

impl HttpStats {
    /// The counts now.
    pub fn get(&self) -> HttpStatsSnapshot {
        let c = &self.0;
        HttpStatsSnapshot {
            connections: c.connections.load(Relaxed),
            requests: c.requests.load(Relaxed),
            status_2xx: c.status_2xx.load(Relaxed),
            status_4xx: c.status_4xx.load(Relaxed),
            status_5xx: c.status_5xx.load(Relaxed),
            shed: c.shed.load(Relaxed),
            timed_out: c.timed_out.load(Relaxed),
            closed: *c.closed.lock(),
        }
    }

    fn count_status(&self, status: u16) {
        let c = match status {
            200..=299 => &self.0.status_2xx,
            400..=499 => &self.0.status_4xx,
            _ => &self.0.status_5xx,
        };
        c.fetch_add(1, Relaxed);
    }
}

/// What every connection task shares.
#[derive(Debug)]
struct Shared {
    stack: Stack,
    config: HttpConfig,
    stats: HttpStats,
    limit: ConnLimit,
    /// Request-head buffers of connections that ended, for the next ones: at most one per
    /// connection that can be open at once (`max_connections`), so a new connection neither
    /// allocates nor zeroes [`MAX_HEAD`] bytes.
    heads: RefCell<Vec<Vec<u8>>>,
}

impl Shared {
    /// A request-head buffer of [`MAX_HEAD`] bytes, given back when the guard drops.
    fn head_buffer(&self) -> HeadBuffer<'_> {
        let buf = self
            .heads
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| vec![0u8; MAX_HEAD]);
        HeadBuffer { buf, shared: self }
    }
}

/// A connection's request-head buffer; back to [`Shared::heads`] on drop.
struct HeadBuffer<'a> {
    buf: Vec<u8>,
    shared: &'a Shared,
}

impl Drop for HeadBuffer<'_> {
    fn drop(&mut self) {
        let mut heads = self.shared.heads.borrow_mut();
        if heads.len() < self.shared.config.max_connections {
            heads.push(core::mem::take(&mut self.buf));
        }
    }
}

/// A bound HTTP server; [`run`](Self::run) serves forever.
#[derive(Debug)]
pub struct HttpServer {
    listener: TcpListener,
    shared: Rc<Shared>,
}

impl HttpServer {
    /// Listens on `config.port`. Errors when the stack has too few free socket slots for the
    /// backlog, or the port already has a listener.
    pub fn bind(stack: Stack, config: HttpConfig) -> Result<HttpServer, StackError> {
        let listener = TcpListener::bind(stack, config.port, config.backlog, http_buffers)?;
        let limit = ConnLimit::new(config.max_connections);
        Ok(HttpServer {
            listener,
            shared: Rc::new(Shared {
                stack,
                config,
                stats: HttpStats::default(),
                limit,
                heads: RefCell::new(Vec::new()),
            }),
        })
    }

    /// A handle on the server's counters.
    pub fn stats(&self) -> HttpStats {
        self.shared.stats.clone()
    }

    /// Accepts connections until the stack shuts down, each served by its own task on
    /// `spawner` (at most `max_connections` at once).
    pub async fn run(mut self, spawner: LocalSpawner) {
        loop {
            // Fails only once the stack is shut down.
            let Ok(sock) = self.listener.accept().await else {
                return;
            };
            let permit = self
                .shared
                .limit
                .acquire_shedding(self.shared.config.shed_after)
                .await;
            self.shared.stats.0.connections.fetch_add(1, Relaxed);
            let shared = self.shared.clone();
            spawner.spawn(async move {
                let mut sock = sock;
                keep_alive(&mut sock, shared.config.keep_alive);
                serve_connection(&mut sock, &shared, &permit).await;
                shared.stats.0.closed.lock().add(&sock.stats());
                // Dropping the socket sends what is queued, then FIN.
                drop(sock);
                drop(permit);
            });
        }
    }
}

/// A parsed request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// The method token (`GET`, `HEAD`, ...).
    pub method: &'a str,
    /// The path, without query string or fragment.
    pub path: &'a str,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
    /// The body length (`Content-Length`, 0 when absent).
    pub content_length: u64,
}

/// Where the head ends: the index just past the blank line (`\r\n\r\n`, or bare `\n\n`).
pub fn head_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\n' {
            // "\n\n" or "\n\r\n" ends the head.
            match (buf.get(i + 1), buf.get(i + 2)) {
                (Some(b'\n'), _) => return Some(i + 2),
                (Some(b'\r'), Some(b'\n')) => return Some(i + 3),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// Parses a request head (as delimited by [`head_end`]). The error is the status to answer
/// with (and then close the connection).
pub fn parse_head(head: &[u8]) -> Result<Request<'_>, u16> {
    let text = core::str::from_utf8(head).map_err(|_| 400u16)?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    // Tolerate one empty line before the request line (RFC 9112, 2.2).
    let mut line = lines.next().ok_or(400u16)?;
    if line.is_empty() {
        line = lines.next().ok_or(400u16)?;
    }
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(400);
    };
    if !is_token(method) || target.is_empty() {
        return Err(400);
    }
    let minor = match version {
        "HTTP/1.1" => 1,
        "HTTP/1.0" => 0,
        v if v.len() == 8
            && v.starts_with("HTTP/")
            && v.as_bytes()[5].is_ascii_digit()
            && v.as_bytes()[6] == b'.'
            && v.as_bytes()[7].is_ascii_digit() =>
        {
            return Err(505)
        }
        _ => return Err(400),
    };
    // origin-form ("/path?q") or absolute-form ("http://host/path"); "*" only for OPTIONS.
    let path = if target.starts_with('/') {
        target
    } else if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        rest.find('/').map_or("/", |i| &rest[i..])
    } else if target == "*" && method == "OPTIONS" {
        "*"
    } else {
        return Err(400);
    };
    if path.bytes().any(|c| c <= b' ' || c == 0x7f) {
        return Err(400);
    }
    let path = path.split(['?', '#']).next().unwrap_or(path);

    let mut keep_alive = minor == 1;
    let mut content_length: Option<u64> = None;
    let mut host = false;
    let mut count = 0;
    for line in lines {
        if line.is_empty() {
            break;
        }
        count += 1;
        if count > MAX_HEADERS {
            return Err(431);
        }
        let (name, value) = line.split_once(':').ok_or(400u16)?;
        if !is_token(name) {
            return Err(400); // also rejects whitespace before the colon
        }
        let value = value.trim_matches([' ', '\t']);
        if name.eq_ignore_ascii_case("content-length") {
            if value.is_empty() || !value.bytes().all(|c| c.is_ascii_digit()) {
                return Err(400);
            }
            let n = value.parse::<u64>().map_err(|_| 413u16)?;
            if content_length.is_some_and(|old| old != n) {
                return Err(400);
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(501);
        } else if name.eq_ignore_ascii_case("connection") {
            for t in value.split(',').map(|t| t.trim()) {
                if t.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if t.eq_ignore_ascii_case("keep-alive") {
                    keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case("host") {
            host = true;
        }
    }
    if minor == 1 && !host {
        return Err(400);
    }
    let content_length = content_length.unwrap_or(0);
    if content_length > MAX_BODY {
        return Err(413);
    }
    Ok(Request {
        method,
        path,
        minor,
        keep_alive,
        content_length,
    })
}

/// The reason phrase the server sends with `status`.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// Writes a response head (status line, headers, the blank line) to `w`: the one definition of
/// the head's bytes, for [`response`] and for the server, which formats it straight into the
/// connection's TX frames.
pub fn write_head(
    w: &mut impl fmt::Write,
    status: u16,
    content_type: &str,
    content_length: usize,
    keep_alive: bool,
) -> fmt::Result {
    write!(
        w,
        "HTTP/1.1 {status} {}\r\nServer: zcnet\r\nContent-Type: {content_type}\r\nContent-Length: {content_length}\r\nConnection: {}\r\n",
        reason(status),
        if keep_alive { "keep-alive" } else { "close" }
    )?;
    if status == 405 {
        w.write_str("Allow: GET, HEAD\r\n")?;
    }
    w.write_str("\r\n")
}

/// A complete response: head and (unless `head_only`) body, as this server sends it (also
/// used by the example kernel's smoltcp baseline, so both serve the same bytes).
pub fn response(
    status: u16,
    content_type: &str,
    body: &[u8],
    keep_alive: bool,
    head_only: bool,
) -> Vec<u8> {
    // Sized first (a counting pass moves no bytes), so that neither the head nor the body is
    // copied again by a reallocation.
    let mut count = Window::counter();
    let _ = write_head(&mut count, status, content_type, body.len(), keep_alive);
    let body_len = if head_only { 0 } else { body.len() };
    let mut out = String::with_capacity(count.seen + body_len);
    // Writing to a `String` cannot fail.
    let _ = write_head(&mut out, status, content_type, body.len(), keep_alive);
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// A response as the server sends it: the head is formatted when it is written (straight into
/// the connection's frames, [`send_response`]), the body stays where it is (the page in static
/// memory, or a document built for this request).
struct Response {
    status: u16,
    content_type: &'static str,
    body: Cow<'static, [u8]>,
    keep_alive: bool,
    head_only: bool,
}

impl Response {
    fn new(
        status: u16,
        content_type: &'static str,
        body: Cow<'static, [u8]>,
        keep_alive: bool,
        head_only: bool,
    ) -> Self {
        Response {
            status,
            content_type,
            body,
            keep_alive,
            head_only,
        }
    }

    /// An error response (plain text, the connection closed after it).
    fn error(status: u16) -> Self {
        Self::new(
            status,
            "text/plain",
            error_body(status).into(),
            false,
            false,
        )
    }

    fn head(&self, w: &mut impl fmt::Write) -> fmt::Result {
        write_head(
            w,
            self.status,
            self.content_type,
            self.body.len(),
            self.keep_alive,
        )
    }

    /// The head's length in bytes (formatted into a counter: no bytes are moved).
    fn head_len(&self) -> usize {
        let mut n = Window::counter();
        // A `Window` never fails.
        let _ = self.head(&mut n);
        n.seen
    }

    /// The bytes sent after the head.
    fn body(&self) -> &[u8] {
        if self.head_only {
            &[]
        } else {
            &self.body
        }
    }
}

/// A [`fmt::Write`] that keeps only bytes `skip..skip + out.len()` of what is written, in
/// `out`: the part of a head that fits the frame at hand, formatted in place.
struct Window<'a> {
    out: &'a mut [u8],
    skip: usize,
    /// Bytes written to the window so far, kept or not.
    seen: usize,
}

impl Window<'_> {
    /// Keeps nothing, counts everything.
    fn counter() -> Window<'static> {
        Window {
            out: &mut [],
            skip: usize::MAX,
            seen: 0,
        }
    }
}

impl fmt::Write for Window<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let s = s.as_bytes();
        let start = self.seen;
        self.seen += s.len();
        // The overlap of `start..start + s.len()` with `skip..skip + out.len()`.
        let from = self.skip.max(start);
        let to = self.skip.saturating_add(self.out.len()).min(self.seen);
        if from < to {
            self.out[from - self.skip..to - self.skip]
                .copy_from_slice(&s[from - start..to - start]);
        }
        Ok(())
    }
}

/// The plain-text body of an error response: the status and its reason phrase.
pub fn error_body(status: u16) -> Vec<u8> {
    format!("{status} {}\n", reason(status)).into_bytes()
}

/// The `/stats` document, an object with these members in this order:
///
/// * `"stack"`: the stack's counters ([`Stack::stats`]), with `"drops"` by reason;
/// * the driver's section, named and rendered by `driver` (absent without one);
/// * `"pool"`: the frame pool's slots by state and its exhaustion counts;
/// * `"copy_ledger"`: copies and bytes per [`CopySite`] and `"user_space_total"`;
/// * `"http"`: this server's counters ([`HttpStatsSnapshot`]: `shed` and `timed_out` among
///   them), with `active` as its connections being served and `closed` the TCP totals of
///   those it finished serving ([`TcpTotals`]) (`null` without `http`);
/// * `"connection"`: the TCP statistics of the connection the request came on, `conn`
///   ([`tcp_stats_json`]; `null` without one);
/// * then each member `extra` renders, in order.
pub fn stats_json(
    stack: &Stack,
    driver: Option<&DriverStats>,
    extra: Option<&ExtraStats>,
    http: Option<&HttpStats>,
    active: usize,
    conn: Option<&TcpStats>,
) -> Json {
    let s = stack.stats();
    let drops = Json::Obj(
        DropReason::ALL
            .iter()
            .map(|&r| (r.name().to_string(), s.dropped(r).into()))
            .collect(),
    );
    let stack_j = object([
        ("ingress_polls", s.ingress_polls.into()),
        ("egress_polls", s.egress_polls.into()),
        ("idle_polls", s.idle_polls.into()),
        ("datagrams_in", s.datagrams_in.into()),
        ("datagrams_out", s.datagrams_out.into()),
        ("frames_in", s.frames_in.into()),
        ("frames_out", s.frames_out.into()),
        ("config_changes", s.config_changes.into()),
        ("listener_rearm_failures", s.listener_rearm_failures.into()),
        ("time_wait_evictions", s.time_wait_evictions.into()),
        ("tcp_timed_out", s.tcp_timed_out.into()),
        ("tcp_unread_resets", s.tcp_unread_resets.into()),
        ("link_up", Json::Bool(stack.link_state() == LinkState::Up)),
        ("link_downs", s.link_downs.into()),
        ("drops", drops),
    ]);
    let pool = stack.pool();
    let occ = pool.occupancy();
    let ps = pool.stats();
    let pool_j = object([
        ("slots", (pool.slot_count() as u64).into()),
        ("slot_size", (pool.slot_size() as u64).into()),
        ("free", (occ.free as u64).into()),
        ("posted", (occ.posted as u64).into()),
        ("stack", (occ.stack as u64).into()),
        ("lent", (occ.lent as u64).into()),
        ("tx", (occ.tx as u64).into()),
        ("device", (occ.device as u64).into()),
        ("sent", (occ.sent as u64).into()),
        ("retained", (occ.retained as u64).into()),
        ("rx_exhausted", ps.rx_exhausted.into()),
        ("tx_exhausted", ps.tx_exhausted.into()),
    ]);
    let l = LEDGER.snapshot();
    let mut ledger: Vec<(String, Json)> = CopySite::ALL
        .iter()
        .map(|&site| {
            (
                site.name().to_string(),
                object([
                    ("copies", l.calls(site).into()),
                    ("bytes", l.bytes(site).into()),
                ]),
            )
        })
        .collect();
    ledger.push((
        "user_space_total".to_string(),
        object([
            ("copies", l.user_calls().into()),
            ("bytes", l.user_bytes().into()),
        ]),
    ));
    let http_j = http.map_or(Json::Null, |h| {
        let h = h.get();
        object([
            ("connections", h.connections.into()),
            ("active", (active as u64).into()),
            ("requests", h.requests.into()),
            ("status_2xx", h.status_2xx.into()),
            ("status_4xx", h.status_4xx.into()),
            ("status_5xx", h.status_5xx.into()),
            ("shed", h.shed.into()),
            ("timed_out", h.timed_out.into()),
            ("closed", {
                let mut closed = vec![("connections".to_string(), h.closed.connections.into())];
                closed.extend(counters_json(&h.closed.counters));
                Json::Obj(closed)
            }),
        ])
    });
    let mut doc = vec![("stack".to_string(), stack_j)];
    if let Some(d) = driver {
        doc.push((d.name().to_string(), d.render()));
    }
    doc.push(("pool".to_string(), pool_j));
    doc.push(("copy_ledger".to_string(), Json::Obj(ledger)));
    doc.push(("http".to_string(), http_j));
    doc.push((
        "connection".to_string(),
        conn.map_or(Json::Null, tcp_stats_json),
    ));
    if let Some(e) = extra {
        doc.extend(e.render());
    }
    Json::Obj(doc)
}

/// One connection's [`TcpStats`] as JSON: `state` (as RFC 793 names it, `"ESTABLISHED"`), the
/// counters named as [`TcpCounters`]' fields, the RTT estimate in microseconds (`srtt_us`,
/// `rttvar_us`, `min_rtt_us`, `rto_us`; `null` before a measurement), and `cwnd`, `ssthresh`
/// (bytes, `null` without congestion control), `mss`, `unacked` and `peer_window` (bytes).
pub fn tcp_stats_json(s: &TcpStats) -> Json {
    let micros = |d: Option<Duration>| {
        d.map_or(Json::Null, |d| {
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX).into()
        })
    };
    let bytes = |n: Option<usize>| n.map_or(Json::Null, |n| (n as u64).into());
    let mut m = vec![("state".to_string(), s.state.to_string().as_str().into())];
    m.extend(counters_json(&s.counters));
    m.extend(
        [
            ("srtt_us", micros(s.srtt)),
            ("rttvar_us", micros(s.rttvar)),
            ("min_rtt_us", micros(s.min_rtt)),
            ("rto_us", micros(Some(s.rto))),
            ("cwnd", bytes(s.cwnd)),
            ("ssthresh", bytes(s.ssthresh)),
            ("mss", bytes(Some(s.mss))),
            ("unacked", bytes(Some(s.unacked))),
            ("peer_window", bytes(Some(s.peer_window))),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    Json::Obj(m)
}

/// Chooses the response for a well-formed request on `sock`: (status, content type, body). The
/// page is not copied: the body borrows it.
fn route(
    req: &Request<'_>,
    shared: &Shared,
    sock: &TcpSocket,
) -> (u16, &'static str, Cow<'static, [u8]>) {
    if req.method != "GET" && req.method != "HEAD" {
        return (405, "text/plain", error_body(405).into());
    }
    match req.path {
        "/" | "/index.html" => (
            200,
            "text/html; charset=utf-8",
            Cow::Borrowed(shared.config.index_html.as_bytes()),
        ),
        "/stats" => {
            let mut body = stats_json(
                &shared.stack,
                shared.config.driver_stats.as_ref(),
                shared.config.extra_stats.as_ref(),
                Some(&shared.stats),
                shared.limit.active(),
                Some(&sock.stats()),
            )
            .to_compact()
            .into_bytes();
            body.push(b'\n');
            (200, "application/json", body.into())
        }
        path => match shared
            .config
            .extra_routes
            .as_ref()
            .and_then(|r| r.answer(path))
        {
            Some((status, ctype, body)) => (status, ctype, body.into()),
            None => (404, "text/plain", error_body(404).into()),
        },
    }
}

/// How a wait on the client ended other than with what was asked for.
enum Stop {
    /// End of stream, an error, or idle too long: close (gracefully).
    Close,
    /// A deadline missed: reset, counted in `timed_out`.
    Late,
    /// Shed for a new connection: reset, counted in `shed`.
    Shed,
}

/// Reads into `buf` unless the deadline passes or the connection is shed first: `Ok(n > 0)`.
async fn read_until(
    sock: &mut TcpSocket,
    permit: &Permit,
    buf: &mut [u8],
    deadline: zcnet_executor::Instant,
    late: Stop,
) -> Result<usize, Stop> {
    let left = deadline.saturating_duration_since(now().await);
    match permit.unless_shed(timeout(left, sock.read(buf))).await {
        Ok(Ok(Ok(n))) if n > 0 => Ok(n),
        Ok(Ok(_)) => Err(Stop::Close),
        Ok(Err(_)) => Err(late),
        Err(_) => Err(Stop::Shed),
    }
}

/// Serves one connection until the client closes it, asks to close it, sends something
/// unparseable, idles past the timeout, misses a deadline or is shed (see the module docs).
async fn serve_connection(sock: &mut TcpSocket, shared: &Shared, permit: &Permit) {
    match serve_requests(sock, shared, permit).await {
        Stop::Close => {}
        Stop::Late => {
            shared.stats.0.timed_out.fetch_add(1, Relaxed);
            sock.abort();
        }
        Stop::Shed => {
            shared.stats.0.shed.fetch_add(1, Relaxed);
            sock.abort();
        }
    }
}

async fn serve_requests(sock: &mut TcpSocket, shared: &Shared, permit: &Permit) -> Stop {
    let config = &shared.config;
    let mut head = shared.head_buffer();
    let buf = &mut head.buf[..];
    let mut filled = 0usize;
    // A new connection that sends nothing is reset when idle too long (no FIN exchange to
    // hold a socket slot for a client that may never close); a kept-alive one is closed.
    let mut idle_end = Stop::Late;
    loop {
        // 1. A complete head: the first byte within the idle timeout, the rest (and the
        //    body) within the request timeout from then.
        let waiting = now().await;
        permit.waiting(waiting);
        if filled == 0 {
            let idle = waiting + config.idle_timeout;
            let end = core::mem::replace(&mut idle_end, Stop::Close);
            filled = match read_until(sock, permit, buf, idle, end).await {
                Ok(n) => n,
                Err(stop) => return stop,
            };
        }
        let deadline = now().await + config.request_timeout;
        let end = loop {
            if let Some(end) = head_end(&buf[..filled]) {
                break end;
            }
            if filled == buf.len() {
                permit.working();
                shared.stats.0.requests.fetch_add(1, Relaxed);
                shared.stats.count_status(431);
                return write_response(sock, config, &Response::error(431))
                    .await
                    .err()
                    .unwrap_or(Stop::Close);
            }
            match read_until(sock, permit, &mut buf[filled..], deadline, Stop::Late).await {
                Ok(n) => filled += n,
                Err(stop) => return stop,
            }
        };
        shared.stats.0.requests.fetch_add(1, Relaxed);
        let (out, body_len) = match parse_head(&buf[..end]) {
            Err(status) => (Response::error(status), 0),
            Ok(req) => {
                let (status, ctype, body) = route(&req, shared, sock);
                let head_only = req.method == "HEAD";
                let out = Response::new(status, ctype, body, req.keep_alive, head_only);
                (out, req.content_length)
            }
        };
        let keep_alive = out.keep_alive;
        shared.stats.count_status(out.status);
        // 2. Skip the body: what is already buffered, then the rest from the socket, by the
        //    request's deadline.
        let mut consumed = end;
        let mut left = body_len;
        let buffered = ((filled - end) as u64).min(left);
        consumed += buffered as usize;
        left -= buffered;
        while left > 0 {
            let wait = deadline.saturating_duration_since(now().await);
            let r = permit
                .unless_shed(timeout(
                    wait,
                    sock.read_with(|data| {
                        let n = (data.len() as u64).min(left) as usize;
                        (n, n)
                    }),
                ))
                .await;
            match r {
                Ok(Ok(Ok(Some(n)))) => left -= n as u64,
                Ok(Ok(_)) => return Stop::Close,
                Ok(Err(_)) => return Stop::Late,
                Err(_) => return Stop::Shed,
            }
        }
        // 3. Respond, by the write deadline.
        permit.working();
        if let Err(stop) = write_response(sock, config, &out).await {
            return stop;
        }
        if !keep_alive {
            return Stop::Close;
        }
        // 4. Keep pipelined bytes for the next request.
        buf.copy_within(consumed..filled, 0);
        filled -= consumed;
    }
}

/// Writes `out` within the write timeout: `Err(Stop::Late)` past it, `Err(Stop::Close)` when
/// the connection failed.
async fn write_response(
    sock: &mut TcpSocket,
    config: &HttpConfig,
    out: &Response,
) -> Result<(), Stop> {
    match timeout(config.write_timeout, send_response(sock, out)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Stop::Close),
        Err(_) => Err(Stop::Late),
    }
}

/// Queues `out` in the connection's TX frames, in place ([`TcpSocket::write_with`]): the head
/// is formatted straight into the frames (no buffer in between), and the body is copied from
/// where it is into them, the one copy of its bytes (counted in the copy ledger as
/// [`CopySite::AppToSocket`], as `write` would). A head longer than the room of the frame at
/// hand (a peer with a tiny MSS) is formatted again for each frame, each keeping its part.
async fn send_response(sock: &mut TcpSocket, out: &Response) -> Result<(), TcpError> {
    let head_len = out.head_len();
    let mut done = 0;
    while done < head_len {
        done += sock
            .write_with(|room| {
                let n = room.len().min(head_len - done);
                let mut w = Window {
                    out: &mut room[..n],
                    skip: done,
                    seen: 0,
                };
                // A `Window` never fails.
                let _ = out.head(&mut w);
                (n, n)
            })
            .await?;
    }
    let body = out.body();
    let mut done = 0;
    while done < body.len() {
        done += sock
            .write_with(|room| {
                let n = LEDGER.copy(CopySite::AppToSocket, room, &body[done..]);
                (n, n)
            })
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Request<'_>, u16> {
        let end = head_end(s.as_bytes()).expect("complete head");
        parse_head(&s.as_bytes()[..end])
    }

    #[test]
    fn parses_a_curl_request() {
        let r = parse("GET /stats?x=1 HTTP/1.1\r\nHost: 10.77.0.2\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n")
            .unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/stats");
        assert!(r.keep_alive);
        assert_eq!(r.content_length, 0);
        let r = parse("GET / HTTP/1.0\r\n\r\n").unwrap();
        assert!(!r.keep_alive);
        let r = parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").unwrap();
        assert!(r.keep_alive);
        let r =
            parse("POST http://h/x HTTP/1.1\nHost: h\nContent-Length: 5\nConnection: close\n\n")
                .unwrap();
        assert_eq!((r.path, r.content_length, r.keep_alive), ("/x", 5, false));
    }

    #[test]
    fn statuses_for_bad_requests() {
        assert_eq!(parse("GET /\r\n\r\n"), Err(400));
        assert_eq!(parse("GET  / HTTP/1.1\r\nHost: a\r\n\r\n"), Err(400));
        assert_eq!(parse("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), Err(505));
        assert_eq!(parse("GET / HTTQ/1.1\r\nHost: a\r\n\r\n"), Err(400));
        assert_eq!(parse("GET / HTTP/1.1\r\n\r\n"), Err(400)); // no Host
        assert_eq!(parse("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), Err(400));
        assert_eq!(
            parse("GET / HTTP/1.1\r\nHost: a\r\nbroken\r\n\r\n"),
            Err(400)
        );
        assert_eq!(
            parse("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999\r\n\r\n"),
            Err(413)
        );
        assert_eq!(
            parse("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
            Err(413)
        );
        assert_eq!(
            parse("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            Err(400)
        );
        assert_eq!(
            parse("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"),
            Err(400)
        );
        assert_eq!(
            parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(501)
        );
        let many = format!(
            "GET / HTTP/1.1\r\nHost: a\r\n{}\r\n",
            "X: y\r\n".repeat(MAX_HEADERS)
        );
        assert_eq!(parse(&many), Err(431));
        assert_eq!(parse("G\u{e9}T / HTTP/1.1\r\nHost: a\r\n\r\n"), Err(400));
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nHost: \xff\r\n\r\n"),
            Err(400)
        );
    }

    #[test]
    fn head_end_finds_the_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.0\r\n\r\nrest"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.0\n\nrest"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.0\r\n"), None);
        assert_eq!(head_end(b""), None);
        assert_eq!(head_end(b"\n"), None);
    }

    #[test]
    fn never_panics_on_any_input() {
        let req =
            b"GET /stats HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc";
        for i in 0..=req.len() {
            if let Some(end) = head_end(&req[..i]) {
                let _ = parse_head(&req[..end]);
            }
            let _ = parse_head(&req[..i]);
        }
        // Deterministic pseudo-random bytes, biased towards the characters that matter.
        let alphabet = b"GET /HTP1.0\r\n: ,\t?#*\xff\x00aA9-";
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            let len = (x % 96) as usize;
            let mut v = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v.push(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            let _ = head_end(&v);
            let _ = parse_head(&v);
        }
    }

    /// The hooks' sections sit where [`stats_json`] says: the driver's after `"stack"`, the
    /// extra ones at the end; without hooks, neither. `"connection"` is always there, `null`
    /// without a connection.
    #[cfg(feature = "std")]
    #[test]
    fn stats_json_places_the_hooks_sections() {
        let p = crate::stack_demo::pair(16, |_, _| {});
        let driver = DriverStats::new("nic", || object([("rx_frames", 7u64.into())]));
        let extra = ExtraStats::new(|| {
            vec![
                ("kernel".to_string(), object([("irq_wakeups", 3u64.into())])),
                ("build".to_string(), "test".into()),
            ]
        });
        let names = |j: &Json| -> Vec<String> {
            match j {
                Json::Obj(m) => m.iter().map(|(k, _)| k.clone()).collect(),
                other => panic!("not an object: {other:?}"),
            }
        };
        let j = stats_json(&p.stacks[0], Some(&driver), Some(&extra), None, 0, None);
        assert_eq!(
            names(&j),
            [
                "stack",
                "nic",
                "pool",
                "copy_ledger",
                "http",
                "connection",
                "kernel",
                "build"
            ]
        );
        assert_eq!(j.get("connection"), Some(&Json::Null));
        assert_eq!(
            j.path(&["nic", "rx_frames"]).and_then(Json::as_u64),
            Some(7)
        );
        assert_eq!(
            j.path(&["kernel", "irq_wakeups"]).and_then(Json::as_u64),
            Some(3)
        );
        assert_eq!(j.get("http"), Some(&Json::Null));
        let sock = TcpSocket::new(p.stacks[0], TcpBuffers::with_capacity(4096, 4096)).unwrap();
        let conn = sock.stats();
        let j = stats_json(
            &p.stacks[0],
            None,
            None,
            Some(&HttpStats::default()),
            2,
            Some(&conn),
        );
        assert_eq!(
            names(&j),
            ["stack", "pool", "copy_ledger", "http", "connection"]
        );
        assert_eq!(j.path(&["http", "active"]).and_then(Json::as_u64), Some(2));
        assert_eq!(
            j.path(&["http", "closed", "connections"])
                .and_then(Json::as_u64),
            Some(0)
        );
        // A socket that never connected: closed, nothing counted, no RTT measured yet.
        let c = j.get("connection").unwrap();
        assert_eq!(c.get("state").and_then(Json::as_str), Some("CLOSED"));
        assert_eq!(c.get("segments_sent").and_then(Json::as_u64), Some(0));
        assert_eq!(c.get("srtt_us"), Some(&Json::Null));
        assert_eq!(c.get("rto_us").and_then(Json::as_u64), Some(1_000_000));
    }

    /// Stack B of an in-memory pair (virtual clock) serving HTTP on port 8080 with `config`
    /// (backlog 2); A, the client's stack, and the server's counters.
    #[cfg(feature = "std")]
    fn serve_on_a_pair(config: HttpConfig) -> (crate::stack_demo::Pair, Stack, HttpStats) {
        let p = crate::stack_demo::pair(256, |_, _| {});
        let config = HttpConfig {
            port: 8080,
            backlog: 2,
            ..config
        };
        let server = HttpServer::bind(p.stacks[1], config).expect("bind");
        let stats = server.stats();
        p.exec
            .local_spawner()
            .spawn(server.run(p.exec.local_spawner()));
        let a = p.stacks[0];
        (p, a, stats)
    }

    /// A request trickled in a byte every half second, over the in-memory wire on a virtual
    /// clock: the request deadline counts from its first byte and is not restarted by each
    /// one, so the server resets the connection when it passes (2 s here), though the idle
    /// timeout (5 s) never would; counted in `timed_out`.
    #[cfg(feature = "std")]
    #[test]
    fn a_trickled_request_is_reset_at_its_deadline_from_the_first_byte() {
        use crate::stack_demo::ADDR;
        use zcnet_executor::time::sleep;
        use zcnet_stack::tcp::TcpError;

        let (p, a, stats) = serve_on_a_pair(HttpConfig {
            idle_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(2),
            ..HttpConfig::default()
        });
        let (took, end) = p.exec.block_on(async move {
            let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 4096)).unwrap();
            c.connect((ADDR[1], 8080)).await.unwrap();
            sleep(Duration::from_secs(1)).await;
            let bytes = b"GET / HTTP/1.1\r\nHost: a\r\nX: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
            let start = now().await;
            let mut buf = [0u8; 64];
            for b in bytes {
                c.write_all(&[*b]).await.unwrap();
                if let Ok(r) = timeout(Duration::from_millis(500), c.read(&mut buf)).await {
                    return (now().await - start, r);
                }
            }
            panic!("still open after {} bytes", bytes.len());
        });
        assert_eq!(end, Err(TcpError::ConnectionReset));
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_millis(2100),
            "{took:?}"
        );
        let s = stats.get();
        assert_eq!((s.timed_out, s.shed, s.requests), (1, 0, 0), "{s:?}");
    }

    /// A connection that sends nothing is reset at the idle timeout; one kept alive after a
    /// request is closed with a FIN (end of stream for the client) at the idle timeout.
    #[cfg(feature = "std")]
    #[test]
    fn idle_connections_end_at_the_idle_timeout() {
        use crate::stack_demo::ADDR;
        use zcnet_stack::tcp::TcpError;

        let (p, a, stats) = serve_on_a_pair(HttpConfig {
            idle_timeout: Duration::from_secs(3),
            ..HttpConfig::default()
        });
        let (silent, kept) = p.exec.block_on(async move {
            let mut buf = [0u8; 2048];
            let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 4096)).unwrap();
            c.connect((ADDR[1], 8080)).await.unwrap();
            let start = now().await;
            let r = c.read(&mut buf).await;
            let silent = (now().await - start, r);
            let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 4096)).unwrap();
            c.connect((ADDR[1], 8080)).await.unwrap();
            c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                .await
                .unwrap();
            let n = c.read(&mut buf).await.unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK\r\n"));
            let start = now().await;
            let mut r = Ok(n);
            while let Ok(n) = r {
                if n == 0 {
                    break;
                }
                r = c.read(&mut buf).await;
            }
            (silent, (now().await - start, r))
        });
        assert_eq!(silent.1, Err(TcpError::ConnectionReset));
        assert_eq!(kept.1, Ok(0), "end of stream");
        // Counted from the server's accept (or its response), a moment before the client's
        // clock starts.
        for took in [silent.0, kept.0] {
            assert!(
                took >= Duration::from_millis(2900) && took < Duration::from_millis(3100),
                "{took:?}"
            );
        }
        let s = stats.get();
        assert_eq!((s.timed_out, s.requests), (1, 1), "{s:?}");
    }

    #[test]
    fn a_head_formatted_through_windows_of_any_size_is_the_same_bytes() {
        let out = Response::new(405, "text/plain", Cow::Borrowed(b"body"), true, false);
        let whole = response(405, "text/plain", b"body", true, false);
        let head_len = out.head_len();
        assert_eq!(head_len, whole.len() - 4);
        for room in 1..=head_len {
            let mut got = Vec::new();
            while got.len() < head_len {
                let mut part = vec![0u8; room.min(head_len - got.len())];
                let mut w = Window {
                    out: &mut part,
                    skip: got.len(),
                    seen: 0,
                };
                out.head(&mut w).unwrap();
                assert_eq!(w.seen, head_len);
                got.extend_from_slice(&part);
            }
            assert_eq!(got, whole[..head_len], "windows of {room} bytes");
        }
        assert_eq!(out.body(), b"body");
        let head = Response::new(200, "text/html", Cow::Borrowed(b"body"), false, true);
        assert!(head.body().is_empty(), "HEAD: no body");
    }

    #[test]
    fn responses_are_well_formed() {
        let r = response(405, "text/plain", b"x", true, false);
        let s = String::from_utf8(r).unwrap();
        assert!(s.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
        assert!(s.contains("Allow: GET, HEAD\r\n"));
        assert!(s.contains("Content-Length: 1\r\n"));
        assert!(s.ends_with("\r\n\r\nx"));
        let head = response(200, "text/html", b"body", false, true);
        let head = String::from_utf8(head).unwrap();
        assert!(head.ends_with("Connection: close\r\n\r\n"));
        assert!(head.contains("Content-Length: 4\r\n"));
    }
}
