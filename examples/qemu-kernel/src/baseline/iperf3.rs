//! An iperf3-compatible server on port 5201 over plain smoltcp sockets, enough for
//! `iperf3 -c ADDR -t N` and `-R` (and `-P` up to [`STREAMS`], `-O`, `-n`,
//! `--get-server-output`). The control protocol is the one `zcnet_examples::iperf3` documents
//! (cookie, state bytes, length-prefixed JSON parameters and results), and its parameter
//! reader ([`Params::from_json`]) is reused, and the remote CPU use reported is the kernel's
//! time outside `hlt`, as the zcnet kernel reports it; the data moves the idiomatic copying way:
//! `recv_slice` into a 64 KiB application buffer, `send_slice` from it.
//!
//! ```text
//!  Idle ─control connects─► Cookie ─37 bytes─► Params (sent PARAM_EXCHANGE)
//!    ─JSON─► Streams (sent CREATE_STREAMS; P stream sockets listen; each must send the cookie)
//!    ─all P─► Running (sent TEST_START, TEST_RUNNING; data flows)
//!    ─TEST_END─► Results (sent EXCHANGE_RESULTS; client's JSON read, ours sent, DISPLAY_RESULTS)
//!    ─IPERF_DONE or close─► Finish (flush, close) ─► Idle
//!  any error or step timeout ─► Finish (refusals send SERVER_ERROR first) ─► Idle
//! ```
//!
//! One control socket (a connection arriving while a test runs finds no listener and is
//! reset, where zcnet's server answers ACCESS_DENIED) and [`STREAMS`] stream sockets that
//! listen only while a test waits for its streams. Every wait on the client is bounded (10 s
//! per step, the test's length plus 10 s for the run); every length it sends is checked.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use zcnet_examples::iperf3::{state, Params, COOKIE_SIZE, IEUNIMP, MAX_JSON, STREAM_BUFFER};
use zcnet_examples::json::{self, object, Json};

/// The port.
pub const PORT: u16 = 5201;
/// Data streams one test may use (`-P`).
pub const STREAMS: usize = 4;
/// Control sockets.
pub const CONTROL_SOCKETS: usize = 2;
/// The control sockets' buffers.
const CONTROL_BUF: usize = 4096;
/// The application's buffer for the data streams.
const APP_BUF: usize = 64 * 1024;
/// How long the client may take for each step of the setup and the teardown.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Slack on top of the test's own length.
const RUN_SLACK: Duration = Duration::from_secs(10);
/// Longest test without a time limit (`-n` tests).
const UNTIMED_LIMIT: Duration = Duration::from_secs(3600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Cookie,
    Params,
    Streams,
    Running,
    Results,
    Done,
    Finish,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamState {
    /// Not part of a test.
    Off,
    /// Listening or connected, the cookie not complete yet.
    Waiting,
    /// Carrying the test's data.
    Active,
}

struct Stream {
    handle: SocketHandle,
    state: StreamState,
    cookie: [u8; COOKIE_SIZE],
    got: usize,
    total: u64,
    omitted: u64,
}

/// The iperf3 server.
pub struct Iperf3Server {
    /// The control sockets, each with whether it listens afresh (its next connection is a
    /// new client).
    ctrls: Vec<(SocketHandle, bool)>,
    /// The control socket of the current test.
    ctrl: SocketHandle,
    streams: Vec<Stream>,
    phase: Phase,
    deadline: Option<Instant>,
    input: Vec<u8>,
    out: Vec<u8>,
    sent: usize,
    cookie: [u8; COOKIE_SIZE],
    params: Option<Params>,
    start: Instant,
    omit_end: Instant,
    end: Instant,
    /// The kernel's busy time (outside `hlt`) at the start and the end of the test.
    busy: (u64, u64),
    data: Vec<u8>,
    /// Tests that ran to the end of the protocol.
    pub tests_done: u64,
    /// Tests refused or broken off.
    pub tests_failed: u64,
    /// Control connections turned away because a test was running.
    pub denied: u64,
}

fn stream_socket() -> tcp::Socket<'static> {
    tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; STREAM_BUFFER]),
        tcp::SocketBuffer::new(vec![0; STREAM_BUFFER]),
    )
}

impl Iperf3Server {
    /// Adds the stream sockets and the control sockets (listening) to `set`.
    pub fn new(set: &mut SocketSet<'static>) -> Iperf3Server {
        // Stream sockets first: smoltcp gives a SYN to the first listening socket in the set,
        // so while a test waits for its streams they take the new connections, not the spare
        // control socket.
        let streams = (0..STREAMS)
            .map(|_| Stream {
                handle: set.add(stream_socket()),
                state: StreamState::Off,
                cookie: [0; COOKIE_SIZE],
                got: 0,
                total: 0,
                omitted: 0,
            })
            .collect();
        let ctrls: Vec<(SocketHandle, bool)> = (0..CONTROL_SOCKETS)
            .map(|_| {
                let mut ctrl = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0; CONTROL_BUF]),
                    tcp::SocketBuffer::new(vec![0; CONTROL_BUF]),
                );
                let _ = ctrl.listen(PORT);
                (set.add(ctrl), true)
            })
            .collect();
        Iperf3Server {
            ctrl: ctrls[0].0,
            ctrls,
            streams,
            phase: Phase::Idle,
            deadline: None,
            input: Vec::new(),
            out: Vec::new(),
            sent: 0,
            cookie: [0; COOKIE_SIZE],
            params: None,
            start: Instant::ZERO,
            omit_end: Instant::ZERO,
            end: Instant::ZERO,
            busy: (0, 0),
            data: vec![0; APP_BUF],
            tests_done: 0,
            tests_failed: 0,
            denied: 0,
        }
    }

    /// When the current step times out.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn step(&mut self, phase: Phase, now: Instant) {
        self.phase = phase;
        self.deadline = Some(now + STEP_TIMEOUT);
    }

    fn send_state(&mut self, st: i8) {
        self.out.extend_from_slice(&st.to_be_bytes());
    }

    /// Ends the test: streams reset, the control connection closed once `out` is sent.
    fn fail(&mut self, set: &mut SocketSet<'static>, now: Instant) {
        self.tests_failed += 1;
        for st in &mut self.streams {
            if st.state != StreamState::Off {
                set.get_mut::<tcp::Socket>(st.handle).abort();
                st.state = StreamState::Off;
            }
        }
        self.step(Phase::Finish, now);
    }

    /// Refuses the test with iperf3's "not implemented" error.
    fn refuse(&mut self, set: &mut SocketSet<'static>, now: Instant) {
        self.send_state(state::SERVER_ERROR);
        self.out.extend_from_slice(&IEUNIMP.to_be_bytes());
        self.out.extend_from_slice(&0i32.to_be_bytes());
        self.fail(set, now);
    }

    /// Moves the test along as far as the sockets allow.
    pub fn poll(&mut self, set: &mut SocketSet<'static>, now: Instant) {
        // The control sockets: listen again once closed; a new client starts a test when
        // none runs, and is turned away otherwise.
        for (handle, fresh) in &mut self.ctrls {
            if self.phase != Phase::Idle && *handle == self.ctrl {
                continue;
            }
            let s = set.get_mut::<tcp::Socket>(*handle);
            match s.state() {
                tcp::State::Closed | tcp::State::TimeWait => {
                    let _ = s.listen(PORT);
                    *fresh = true;
                }
                tcp::State::Established | tcp::State::CloseWait if *fresh => {
                    *fresh = false;
                    if self.phase == Phase::Idle {
                        self.ctrl = *handle;
                        self.input.clear();
                        self.out.clear();
                        self.sent = 0;
                        self.phase = Phase::Cookie;
                        self.deadline = Some(now + STEP_TIMEOUT);
                    } else {
                        // Dropped if it does not fit: the close that follows tells the
                        // client as much.
                        let _ = s.send_slice(&state::ACCESS_DENIED.to_be_bytes());
                        s.close();
                        self.denied += 1;
                    }
                }
                _ => {}
            }
        }
        if self.phase == Phase::Idle {
            return;
        }
        let ctrl = set.get_mut::<tcp::Socket>(self.ctrl);
        if self.sent < self.out.len() && ctrl.can_send() {
            match ctrl.send_slice(&self.out[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(_) => self.sent = self.out.len(),
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        }
        let mut buf = [0u8; 512];
        while self.input.len() < 4 + MAX_JSON && ctrl.can_recv() {
            let room = (4 + MAX_JSON - self.input.len()).min(buf.len());
            match ctrl.recv_slice(&mut buf[..room]) {
                Ok(n) if n > 0 => self.input.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        let ctrl_gone = !ctrl.may_recv() && !ctrl.can_recv();
        let ctrl_dead = !ctrl.is_open();
        if self.phase == Phase::Finish {
            // Close once the last bytes are queued (FIN follows them); reset a client that
            // does not take them in time.
            let timed_out = self.deadline.is_some_and(|d| now >= d);
            if self.out.is_empty() || ctrl_dead || timed_out {
                let ctrl = set.get_mut::<tcp::Socket>(self.ctrl);
                if timed_out {
                    ctrl.abort();
                } else {
                    ctrl.close();
                }
                self.phase = Phase::Idle;
                self.deadline = None;
            }
            return;
        }
        if ctrl_dead || (ctrl_gone && self.phase != Phase::Done) {
            return self.fail(set, now);
        }
        if self.deadline.is_some_and(|d| now >= d) {
            return self.fail(set, now);
        }
        match self.phase {
            Phase::Idle | Phase::Finish => {}
            Phase::Cookie => {
                if self.input.len() >= COOKIE_SIZE {
                    self.cookie.copy_from_slice(&self.input[..COOKIE_SIZE]);
                    self.input.drain(..COOKIE_SIZE);
                    self.send_state(state::PARAM_EXCHANGE);
                    self.step(Phase::Params, now);
                }
            }
            Phase::Params => match self.take_json() {
                None => {}
                Some(Err(())) => self.fail(set, now),
                // Refused here too, whatever `Params` comes to accept: this server moves TCP
                // data one way only.
                Some(Ok(j))
                    if ["udp", "sctp", "bidirectional"]
                        .iter()
                        .any(|k| j.get(k).is_some()) =>
                {
                    self.refuse(set, now)
                }
                Some(Ok(j)) => match Params::from_json(&j) {
                    Err(_) => self.refuse(set, now),
                    Ok(p) if p.parallel > STREAMS => self.refuse(set, now),
                    Ok(p) => {
                        for st in self.streams.iter_mut().take(p.parallel) {
                            let s = set.get_mut::<tcp::Socket>(st.handle);
                            if s.listen(PORT).is_err() {
                                s.abort();
                                let _ = s.listen(PORT);
                            }
                            st.state = StreamState::Waiting;
                            st.got = 0;
                            st.total = 0;
                            st.omitted = 0;
                        }
                        self.params = Some(p);
                        self.send_state(state::CREATE_STREAMS);
                        self.step(Phase::Streams, now);
                    }
                },
            },
            Phase::Streams => {
                let cookie = self.cookie;
                let mut ready = true;
                for st in self.streams.iter_mut() {
                    if st.state != StreamState::Waiting {
                        continue;
                    }
                    let s = set.get_mut::<tcp::Socket>(st.handle);
                    if s.can_recv() {
                        if let Ok(n) = s.recv_slice(&mut st.cookie[st.got..]) {
                            st.got += n;
                        }
                    }
                    if st.got == COOKIE_SIZE {
                        if st.cookie == cookie {
                            st.state = StreamState::Active;
                            continue;
                        }
                        // Not one of this test's streams: reset it and listen again.
                        s.abort();
                        let _ = s.listen(PORT);
                        st.got = 0;
                    } else if !s.is_open() {
                        let _ = s.listen(PORT);
                        st.got = 0;
                    }
                    ready = false;
                }
                if ready {
                    let p = self.params.as_ref().map_or((0, 0), |p| (p.time, p.omit));
                    self.send_state(state::TEST_START);
                    self.send_state(state::TEST_RUNNING);
                    self.phase = Phase::Running;
                    self.start = now;
                    self.busy.0 = crate::platform::busy_ns();
                    self.omit_end = now + Duration::from_secs(p.1);
                    self.deadline = Some(if p.0 > 0 {
                        now + Duration::from_secs(p.0 + p.1) + RUN_SLACK
                    } else {
                        now + UNTIMED_LIMIT
                    });
                }
            }
            Phase::Running => {
                self.transfer(set, now);
                while let Some(&b) = self.input.first() {
                    self.input.remove(0);
                    match b as i8 {
                        state::TEST_END => {
                            self.end = now;
                            self.busy.1 = crate::platform::busy_ns();
                            for st in &mut self.streams {
                                if st.state == StreamState::Active {
                                    // FIN after what is queued, as iperf3's own server does.
                                    set.get_mut::<tcp::Socket>(st.handle).close();
                                }
                            }
                            self.send_state(state::EXCHANGE_RESULTS);
                            self.step(Phase::Results, now);
                            break;
                        }
                        state::CLIENT_TERMINATE => return self.fail(set, now),
                        _ => {}
                    }
                }
            }
            Phase::Results => match self.take_json() {
                None => {}
                Some(Err(())) => self.fail(set, now),
                Some(Ok(_client_results)) => {
                    let text = self.results().to_compact();
                    self.out
                        .extend_from_slice(&(text.len() as u32).to_be_bytes());
                    self.out.extend_from_slice(text.as_bytes());
                    self.send_state(state::DISPLAY_RESULTS);
                    self.step(Phase::Done, now);
                }
            },
            Phase::Done => {
                let done = match self.input.first() {
                    Some(&b) => b as i8 == state::IPERF_DONE,
                    None => ctrl_gone,
                };
                if done || !self.input.is_empty() {
                    if done {
                        self.tests_done += 1;
                    } else {
                        self.tests_failed += 1;
                    }
                    for st in &mut self.streams {
                        st.state = StreamState::Off;
                    }
                    self.input.clear();
                    self.step(Phase::Finish, now);
                }
            }
        }
    }

    /// A complete length-prefixed JSON message from the control input: `None` while
    /// incomplete, `Err` when too long or not JSON.
    fn take_json(&mut self) -> Option<Result<Json, ()>> {
        let len = u32::from_be_bytes(self.input.get(..4)?.try_into().ok()?) as usize;
        if len > MAX_JSON {
            return Some(Err(()));
        }
        let body = self.input.get(4..4 + len)?;
        let j = json::parse(body).map_err(|_| ());
        self.input.drain(..4 + len);
        Some(j)
    }

    /// Moves data on the active streams.
    fn transfer(&mut self, set: &mut SocketSet<'static>, now: Instant) {
        let Some(p) = self.params.as_ref() else {
            return;
        };
        let (reverse, limit) = (p.reverse, p.bytes);
        let counting = now >= self.omit_end;
        for st in self.streams.iter_mut() {
            if st.state != StreamState::Active {
                continue;
            }
            let s = set.get_mut::<tcp::Socket>(st.handle);
            loop {
                let r = if reverse {
                    let room = if limit == 0 {
                        self.data.len()
                    } else {
                        (limit.saturating_sub(st.total)).min(self.data.len() as u64) as usize
                    };
                    if room == 0 || !s.can_send() {
                        break;
                    }
                    s.send_slice(&self.data[..room]).map_err(|_| ())
                } else {
                    if !s.can_recv() {
                        break;
                    }
                    s.recv_slice(&mut self.data).map_err(|_| ())
                };
                match r {
                    Ok(n) if n > 0 => {
                        st.total += n as u64;
                        if !counting {
                            st.omitted += n as u64;
                        }
                    }
                    _ => break,
                }
            }
        }
    }

    /// The server's results message (what zcnet's server sends).
    fn results(&self) -> Json {
        let counted = if self.end > self.omit_end {
            (self.end - self.omit_end).total_micros() as f64 / 1e6
        } else {
            0.0
        };
        let active = self
            .streams
            .iter()
            .filter(|s| s.state == StreamState::Active);
        let stream_results: Vec<Json> = active
            .clone()
            .enumerate()
            .map(|(i, s)| {
                // iperf3 numbers streams 1, 3, 4, 5, … in the order they connected.
                let id = if i == 0 { 1 } else { i as u64 + 2 };
                object([
                    ("id", id.into()),
                    ("bytes", (s.total - s.omitted).into()),
                    ("retransmits", (-1i64).into()),
                    ("jitter", 0u64.into()),
                    ("errors", 0u64.into()),
                    ("packets", 0u64.into()),
                    ("start_time", 0u64.into()),
                    ("end_time", counted.into()),
                ])
            })
            .collect();
        let reverse = self.params.as_ref().is_some_and(|p| p.reverse);
        // The kernel's CPU use over the test: its time outside `hlt` (no user mode).
        let wall = (self.end - self.start).total_micros().max(1) as f64 * 1000.0;
        let system = self.busy.1.saturating_sub(self.busy.0) as f64 / wall * 100.0;
        let mut results = vec![
            ("cpu_util_total".to_string(), system.into()),
            ("cpu_util_user".to_string(), 0u64.into()),
            ("cpu_util_system".to_string(), system.into()),
            (
                "sender_has_retransmits".to_string(),
                (if reverse { 0i64 } else { -1 }).into(),
            ),
            ("streams".to_string(), Json::Arr(stream_results)),
        ];
        if self.params.as_ref().is_some_and(|p| p.get_server_output) {
            let bytes: u64 = active.map(|s| s.total - s.omitted).sum();
            let mbit = if counted > 0.0 {
                bytes as f64 * 8.0 / counted / 1e6
            } else {
                0.0
            };
            let text: String = format!(
                "smoltcp baseline iperf3 server: {} stream(s), {} {bytes} bytes in {counted:.2} s = {mbit:.1} Mbit/s\n",
                self.params.as_ref().map_or(0, |p| p.parallel),
                if reverse { "sent" } else { "received" },
            );
            results.push(("server_output_text".to_string(), Json::Str(text)));
        }
        Json::Obj(results)
    }
}
