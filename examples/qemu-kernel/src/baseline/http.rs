//! HTTP/1.1 on port 80 over plain smoltcp sockets: the same requests, answers and bytes as the
//! zcnet kernel's server (`zcnet_examples::http`), written the way a smoltcp application
//! usually is: a fixed set of listening sockets, and each poll-loop turn reads with
//! `recv_slice` into the connection's buffer and writes the response with `send_slice`.
//!
//! ```text
//!  HTTP_SOCKETS sockets, all listening on :80 (smoltcp has no backlog: one socket per
//!  connection; a SYN finding none listening is answered RST)
//!  per established socket, each turn:
//!    flush the pending response (send_slice) ─► skip a request body ─► a complete head in the
//!    buffer? parse it (zcnet_examples::http::parse_head), build the response, queue it
//!    ─► else recv_slice more ─► peer closed? close
//!  a socket back in Closed listens again
//! ```
//!
//! The parser is zcnet's (`head_end`, `parse_head`), the page the zcnet kernel's
//! (`services::INDEX_HTML`); the response
//! head is built byte for byte as zcnet's server builds it (including `Server: zcnet`, so both
//! kernels send the same bytes), as is `/stats`'s body through the same JSON writer. Like
//! zcnet's server, a request head is bounded ([`MAX_HEAD`], else `431`), a body is discarded up
//! to [`MAX_BODY`](zcnet_examples::http::MAX_BODY), and a connection with no complete request
//! for [`IDLE_TIMEOUT`] is closed.

use alloc::vec;
use alloc::vec::Vec;

use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use zcnet_examples::http::{error_body, head_end, parse_head, response, MAX_HEAD};
use zcnet_examples::json::Json;

/// The port.
pub const PORT: u16 = 80;
/// Sockets for HTTP: at most this many connections at once (and this many SYNs in a burst).
pub const HTTP_SOCKETS: usize = 64;
/// Receive buffer of each socket (zcnet's HTTP server uses the same sizes).
const RX_BUF: usize = 8192;
/// Send buffer of each socket.
const TX_BUF: usize = 16384;
/// A connection with no complete request for this long is closed (zcnet's default too).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The server's counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpCounters {
    /// Connections established.
    pub connections: u64,
    /// Requests received (well-formed or not).
    pub requests: u64,
    /// Responses with a 2xx status.
    pub status_2xx: u64,
    /// Responses with a 4xx status.
    pub status_4xx: u64,
    /// Responses with a 5xx status.
    pub status_5xx: u64,
}

impl HttpCounters {
    fn count_status(&mut self, status: u16) {
        match status {
            200..=299 => self.status_2xx += 1,
            400..=499 => self.status_4xx += 1,
            _ => self.status_5xx += 1,
        }
    }
}

/// What `/stats` and `/exit` need from the rest of the kernel.
pub trait Host {
    /// The `/stats` document, given the server's counters and its active connections.
    fn stats(&mut self, http: &HttpCounters, active: usize) -> Json;
    /// `GET /exit`: the verdict's status and JSON body, `None` (a `404`) unless `test=1`. The
    /// host stops the machine a little later, once the answer has left.
    fn exit_response(&mut self) -> Option<(u16, Vec<u8>)>;
}

/// An established connection's state.
struct Conn {
    buf: Vec<u8>,
    filled: usize,
    out: Vec<u8>,
    sent: usize,
    /// Close once `out` is sent.
    close_after: bool,
    /// Body bytes still to discard.
    skip: u64,
    last_activity: Instant,
}

/// What the server does with one socket.
enum Slot {
    /// Listening, or in the handshake.
    Listening,
    /// Established and served.
    Serving(Conn),
    /// The server is done with it; it listens again once smoltcp has closed it.
    Closing,
}

/// The HTTP server: its sockets and counters.
pub struct HttpServer {
    sockets: Vec<(SocketHandle, Slot)>,
    counters: HttpCounters,
}

impl HttpServer {
    /// Adds [`HTTP_SOCKETS`] listening sockets to `set`.
    pub fn new(set: &mut SocketSet<'static>) -> HttpServer {
        let sockets = (0..HTTP_SOCKETS)
            .map(|_| {
                let mut s = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0; RX_BUF]),
                    tcp::SocketBuffer::new(vec![0; TX_BUF]),
                );
                // A fresh socket on a non-zero port always listens.
                let _ = s.listen(PORT);
                (set.add(s), Slot::Listening)
            })
            .collect();
        HttpServer {
            sockets,
            counters: HttpCounters::default(),
        }
    }

    /// Connections being served.
    pub fn active(&self) -> usize {
        self.sockets
            .iter()
            .filter(|(_, slot)| matches!(slot, Slot::Serving(_)))
            .count()
    }

    /// When the earliest idle connection times out.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.sockets
            .iter()
            .filter_map(|(_, slot)| match slot {
                Slot::Serving(c) => Some(c.last_activity + IDLE_TIMEOUT),
                _ => None,
            })
            .min()
    }

    /// Serves every socket once.
    pub fn poll(&mut self, set: &mut SocketSet<'static>, now: Instant, host: &mut dyn Host) {
        let active = self.active();
        for (handle, slot) in &mut self.sockets {
            let s = set.get_mut::<tcp::Socket>(*handle);
            match (s.state(), &mut *slot) {
                (tcp::State::Closed, _) => {
                    *slot = Slot::Listening;
                    let _ = s.listen(PORT);
                }
                (tcp::State::Listen | tcp::State::SynReceived, _) | (_, Slot::Closing) => {}
                (_, Slot::Listening) => {
                    self.counters.connections += 1;
                    let mut c = Conn {
                        buf: vec![0; MAX_HEAD],
                        filled: 0,
                        out: Vec::new(),
                        sent: 0,
                        close_after: false,
                        skip: 0,
                        last_activity: now,
                    };
                    *slot = if serve(s, &mut c, now, &mut self.counters, host, active + 1) {
                        Slot::Closing
                    } else {
                        Slot::Serving(c)
                    };
                }
                (_, Slot::Serving(c)) => {
                    if serve(s, c, now, &mut self.counters, host, active) {
                        *slot = Slot::Closing;
                    }
                }
            }
        }
    }
}

/// One turn of a connection; `true` when the server is finished with it.
fn serve(
    s: &mut tcp::Socket<'static>,
    c: &mut Conn,
    now: Instant,
    counters: &mut HttpCounters,
    host: &mut dyn Host,
    active: usize,
) -> bool {
    loop {
        // 1. Send what is pending.
        if c.sent < c.out.len() {
            if s.can_send() {
                match s.send_slice(&c.out[c.sent..]) {
                    Ok(n) => c.sent += n,
                    Err(_) => return close(s),
                }
            }
            if c.sent < c.out.len() {
                return false;
            }
            c.out.clear();
            c.sent = 0;
            if c.close_after {
                return close(s);
            }
        }
        // 2. Discard a request body.
        if c.skip > 0 {
            let take = (c.filled as u64).min(c.skip) as usize;
            if take > 0 {
                c.buf.copy_within(take..c.filled, 0);
                c.filled -= take;
                c.skip -= take as u64;
            }
            while c.skip > 0 && s.can_recv() {
                let want = (c.buf.len() as u64).min(c.skip) as usize;
                match s.recv_slice(&mut c.buf[..want]) {
                    Ok(n) if n > 0 => {
                        c.skip -= n as u64;
                        c.last_activity = now;
                    }
                    Ok(_) => break,
                    Err(_) => return close(s),
                }
            }
            if c.skip > 0 {
                return peer_gone(s, c, now);
            }
            continue;
        }
        // 3. A complete request head: answer it.
        if let Some(end) = head_end(&c.buf[..c.filled]) {
            counters.requests += 1;
            let (status, out, keep_alive, body) = match parse_head(&c.buf[..end]) {
                Err(status) => (
                    status,
                    response(status, "text/plain", &error_body(status), false, false),
                    false,
                    0,
                ),
                Ok(req) => {
                    let head_only = req.method == "HEAD";
                    let (status, ctype, body) = if req.method != "GET" && req.method != "HEAD" {
                        (405, "text/plain", error_body(405))
                    } else {
                        match req.path {
                            "/" | "/index.html" => (
                                200,
                                "text/html; charset=utf-8",
                                crate::services::INDEX_HTML.as_bytes().to_vec(),
                            ),
                            "/stats" => {
                                let mut body =
                                    host.stats(counters, active).to_compact().into_bytes();
                                body.push(b'\n');
                                (200, "application/json", body)
                            }
                            "/exit" => match host.exit_response() {
                                Some((status, body)) => (status, "application/json", body),
                                None => (404, "text/plain", error_body(404)),
                            },
                            _ => (404, "text/plain", error_body(404)),
                        }
                    };
                    let out = response(status, ctype, &body, req.keep_alive, head_only);
                    (status, out, req.keep_alive, req.content_length)
                }
            };
            counters.count_status(status);
            c.out = out;
            c.sent = 0;
            c.close_after = !keep_alive;
            c.skip = body;
            c.last_activity = now;
            // Keep pipelined bytes for the next request.
            c.buf.copy_within(end..c.filled, 0);
            c.filled -= end;
            continue;
        }
        if c.filled == c.buf.len() {
            counters.requests += 1;
            counters.count_status(431);
            c.out = response(431, "text/plain", &error_body(431), false, false);
            c.sent = 0;
            c.close_after = true;
            c.filled = 0;
            continue;
        }
        // 4. Read more.
        if s.can_recv() {
            match s.recv_slice(&mut c.buf[c.filled..]) {
                Ok(n) if n > 0 => {
                    c.filled += n;
                    c.last_activity = now;
                    continue;
                }
                Ok(_) => {}
                Err(_) => return close(s),
            }
        }
        return peer_gone(s, c, now);
    }
}

/// Nothing more to read now: closes when the peer has closed its side or the connection
/// idled past the timeout; `true` when closed.
fn peer_gone(s: &mut tcp::Socket<'static>, c: &Conn, now: Instant) -> bool {
    if !s.may_recv() || now >= c.last_activity + IDLE_TIMEOUT {
        return close(s);
    }
    false
}

fn close(s: &mut tcp::Socket<'static>) -> bool {
    s.close();
    true
}
