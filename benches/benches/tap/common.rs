//! What the stack processes (one per peer) share: ports, the four server protocols, the HTTP
//! request parser, and the stats channel the parent reads CPU and wakeup counts through.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// Sink: the server reads and discards until end of stream, then closes.
pub const SINK_PORT: u16 = 9000;
/// Source: the client sends an 8-byte little-endian count, the server writes that many bytes,
/// then waits for the client to close first (so the server never holds a TIME-WAIT socket).
pub const SOURCE_PORT: u16 = 9001;
/// Echo: the server writes back every byte it reads, until end of stream (or a reset).
pub const ECHO_PORT: u16 = 9002;
/// The HTTP/1.1 responder.
pub const HTTP_PORT: u16 = 8080;
/// Socket receive and send rings, in bytes, the same on every socket of every peer: 64 KiB,
/// or `ZCNET_SOCK_BUF` from the environment (the server processes inherit it), for a look at
/// how a benchmark's figures depend on the window.
pub fn sock_buf() -> usize {
    match std::env::var("ZCNET_SOCK_BUF") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("ZCNET_SOCK_BUF={v}: not a byte count")),
        Err(_) => 64 * 1024,
    }
}
/// Whether the sink servers take what they receive in place (each stack's closure read:
/// zcnet's and embassy-net's `read_with`, smoltcp's `recv`) instead of copying it into the
/// application's buffer: `ZCNET_TAP_SINK=in-place` in the environment (the server processes
/// inherit it). Off by default: every peer copies.
pub fn sink_in_place() -> bool {
    std::env::var("ZCNET_TAP_SINK").is_ok_and(|v| v == "in-place")
}
/// The application's own read / write buffer (every peer copies through one of this size).
pub const APP_BUF: usize = 64 * 1024;
/// The stacks' MAC address (and the frame blaster's).
pub const STACK_MAC: [u8; 6] = [0x02, 0x7a, 0x63, 0x00, 0x00, 0x02];
/// The MAC the parent gives the Linux side of every TAP.
pub const LINUX_MAC: [u8; 6] = [0x02, 0x7a, 0x63, 0x00, 0x00, 0x01];

/// What a source server writes: a constant pattern (producing payload is not the stack's cost).
pub static PATTERN: [u8; APP_BUF] = [0x5a; APP_BUF];

/// HTTP response with keep-alive (HTTP/1.1's default).
pub const RESPONSE_KEEP: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, world\n";
/// HTTP response when the request asked for `Connection: close`: the client closes after it.
pub const RESPONSE_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nConnection: close\r\n\r\nHello, world\n";

/// Loop wakeups of the stack's thread (smoltcp: returns from `phy::wait`; embassy: returns
/// from parking with work pended). zcnet reports its executor's own counter instead.
pub static WAKEUPS: AtomicU64 = AtomicU64::new(0);
/// Stack polls (smoltcp: `iface.poll` calls; embassy: polls of the net runner).
pub static POLLS: AtomicU64 = AtomicU64::new(0);
/// HTTP requests answered.
pub static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// Where the stats thread reads (wakeups, polls) from, when not [`WAKEUPS`] / [`POLLS`].
pub static COUNTERS: OnceLock<fn() -> (u64, u64)> = OnceLock::new();

/// One complete HTTP request at the start of `buf`: its length and whether it asked for
/// `Connection: close`. `None` while the header is incomplete.
pub fn parse_request(buf: &[u8]) -> Option<(usize, bool)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = &buf[..end];
    let close = head.split(|&b| b == b'\n').any(|line| {
        line.len() > 11 && line[..11].eq_ignore_ascii_case(b"connection:") && {
            let v = &line[11..];
            v.windows(5).any(|w| w.eq_ignore_ascii_case(b"close"))
        }
    });
    Some((end, close))
}

/// CPU time (user + system, ns) and voluntary / involuntary context switches of `who`.
pub fn rusage(who: libc::c_int) -> (u64, u64, u64) {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; `who` is RUSAGE_SELF or RUSAGE_THREAD.
    let r = unsafe { libc::getrusage(who, &mut ru) };
    assert_eq!(r, 0, "getrusage: {}", std::io::Error::last_os_error());
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    (
        ns(ru.ru_utime) + ns(ru.ru_stime),
        ru.ru_nvcsw as u64,
        ru.ru_nivcsw as u64,
    )
}

/// Starts the thread that answers the parent: each `stats` line on stdin gets one line on
/// stdout with the process's CPU time and context switches (every thread but this one) and the
/// stack's counters. End of stdin (the parent is gone) ends the process.
pub fn start_stats_thread() {
    std::thread::Builder::new()
        .name("stats".into())
        .spawn(|| {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                let Ok(line) = line else { break };
                if line.trim() != "stats" {
                    continue;
                }
                let (cpu, vcs, ivcs) = rusage(libc::RUSAGE_SELF);
                let (my_cpu, my_vcs, my_ivcs) = rusage(libc::RUSAGE_THREAD);
                let (wakeups, polls) = match COUNTERS.get() {
                    Some(f) => f(),
                    None => (WAKEUPS.load(Relaxed), POLLS.load(Relaxed)),
                };
                let mut out = std::io::stdout().lock();
                let _ = writeln!(
                    out,
                    "stats cpu_ns={} vcsw={} ivcsw={} wakeups={} polls={} requests={}",
                    cpu.saturating_sub(my_cpu),
                    vcs.saturating_sub(my_vcs),
                    ivcs.saturating_sub(my_ivcs),
                    wakeups,
                    polls,
                    REQUESTS.load(Relaxed)
                );
                let _ = out.flush();
            }
            std::process::exit(0);
        })
        .expect("stats thread");
}

/// Tells the parent the stack is up (the TAP is open; the parent may now move it).
pub fn ready() {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready");
    let _ = out.flush();
}

/// Which sockets a stack process serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Sink and source, a few sockets (bulk throughput).
    Bulk,
    /// The HTTP responder with room for 100+ connections.
    Http,
    /// The sink with room for 100+ idle connections.
    Idle,
    /// Echo, a few sockets (the loss benchmark).
    Echo,
}

impl Class {
    /// Parses `bulk` / `http` / `idle`.
    pub fn parse(s: &str) -> Class {
        match s {
            "bulk" => Class::Bulk,
            "http" => Class::Http,
            "idle" => Class::Idle,
            "echo" => Class::Echo,
            _ => panic!("unknown class {s}"),
        }
    }
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Class::Bulk => "bulk",
            Class::Http => "http",
            Class::Idle => "idle",
            Class::Echo => "echo",
        }
    }
    /// (port, server sockets) pairs: for smoltcp and embassy, the sockets each port gets
    /// (each serves one connection at a time); zcnet's listener gets `ZC_BACKLOG_*` listening
    /// sockets per port and the rest of its table for accepted ones.
    pub fn ports(self) -> &'static [(u16, usize)] {
        match self {
            Class::Bulk => &[(SINK_PORT, 2), (SOURCE_PORT, 2)],
            Class::Http => &[(HTTP_PORT, CONN_SOCKETS)],
            Class::Idle => &[(SINK_PORT, CONN_SOCKETS)],
            Class::Echo => &[(ECHO_PORT, 2)],
        }
    }
}

/// Sockets per port for the HTTP and idle classes: 100 connections plus room for new ones.
pub const CONN_SOCKETS: usize = 128;
/// zcnet listener backlog for the bulk and echo classes (listening sockets kept armed per port).
pub const ZC_BACKLOG_BULK: usize = 2;
/// zcnet listener backlog for the HTTP and idle classes: a SYN that finds every listening
/// socket busy is dropped (the client retries after 1 s), so bursts of new connections (wrk
/// without keep-alive, 100 idle clients connecting at once) need room.
pub const ZC_BACKLOG_CONN: usize = 32;
/// zcnet's socket table for the HTTP and idle classes: 100 connections, the backlog, and the
/// connections still closing.
pub const ZC_CONN_SOCKETS: usize = CONN_SOCKETS + ZC_BACKLOG_CONN;

/// A connection the shared server logic drives (zcnet's and embassy-net's sockets).
pub trait Conn {
    /// Reads into `buf`: `Some(0)` at end of stream, `None` on an error.
    async fn recv(&mut self, buf: &mut [u8]) -> Option<usize>;
    /// Takes what was received in place and drops it: the count, `Some(0)` at end of stream,
    /// `None` on an error.
    async fn discard(&mut self) -> Option<usize>;
    /// Writes some of `buf`: the count, `None` on an error.
    async fn send(&mut self, buf: &[u8]) -> Option<usize>;
    /// Closes the sending half and, where the API has one, waits for the close to go out.
    async fn finish(&mut self);
}

async fn send_all<C: Conn>(c: &mut C, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        match c.send(buf).await {
            Some(n) if n > 0 => buf = &buf[n..],
            _ => return false,
        }
    }
    true
}

/// Serves one connection on `port` with the shared logic.
pub async fn serve_conn<C: Conn>(c: &mut C, port: u16, buf: &mut [u8]) {
    match port {
        SINK_PORT if sink_in_place() => while let Some(1..) = c.discard().await {},
        SINK_PORT => while let Some(1..) = c.recv(buf).await {},
        ECHO_PORT => {
            while let Some(n @ 1..) = c.recv(buf).await {
                if !send_all(c, &buf[..n]).await {
                    return;
                }
            }
        }
        SOURCE_PORT => {
            let mut got = 0;
            while got < 8 {
                match c.recv(&mut buf[got..8]).await {
                    Some(n @ 1..) => got += n,
                    _ => return,
                }
            }
            let mut left = u64::from_le_bytes(buf[..8].try_into().unwrap()) as usize;
            while left > 0 {
                match c.send(&PATTERN[..left.min(APP_BUF)]).await {
                    Some(n @ 1..) => left -= n,
                    _ => return,
                }
            }
            // The client closes first.
            while let Some(1..) = c.recv(buf).await {}
        }
        HTTP_PORT => {
            let mut len = 0;
            'conn: loop {
                let n = match c.recv(&mut buf[len..]).await {
                    Some(n @ 1..) => n,
                    _ => break,
                };
                len += n;
                let mut start = 0;
                while let Some((used, close)) = parse_request(&buf[start..len]) {
                    start += used;
                    REQUESTS.fetch_add(1, Relaxed);
                    let resp = if close { RESPONSE_CLOSE } else { RESPONSE_KEEP };
                    if !send_all(c, resp).await {
                        break 'conn;
                    }
                    if close {
                        // The client closes after reading the response.
                        while let Some(1..) = c.recv(buf).await {}
                        break 'conn;
                    }
                }
                buf.copy_within(start..len, 0);
                len -= start;
                if len == buf.len() {
                    break; // a header larger than the buffer: give up on this client
                }
            }
        }
        _ => unreachable!("port {port}"),
    }
    c.finish().await;
}
