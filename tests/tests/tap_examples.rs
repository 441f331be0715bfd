//! The examples (`zcnet-examples`) against unmodified Linux tools: each test runs an example's
//! server in-process on a zcnet stack over a TAP whose kernel side lives in a namespace the test
//! creates (`zcnet_tests::netns::TapNet`), and drives it with `curl`, `iperf3` or `python3` from
//! inside that namespace. Needs root, /dev/net/tun, `curl` and `iperf3` (fails, never skips,
//! without them). Traffic goes only to addresses inside the test's own namespace.

use std::process::{Command, ExitStatus};
use std::time::Duration;

use zcnet_examples::echo::{EchoConfig, EchoServer};
use zcnet_examples::http::{response, HttpConfig, HttpServer, HttpStats, INDEX_HTML};
use zcnet_examples::iperf3::{Iperf3Config, Iperf3Server, Iperf3Stats};
use zcnet_examples::json::{self, Json};
use zcnet_examples::tap_setup::tap_driver_stats;
use zcnet_executor::time::sleep;
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_tests::netns::{ChildGuard, TapNet, ZCNET_ADDR};

/// Every child gets at most this long.
const CHILD_LIMIT: Duration = Duration::from_secs(60);

fn require_tool(tool: &str, package: &str) {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "this test needs `{tool}` (apt-get install {package}; .ci/run installs it)"
    );
}

fn assert_success(what: &str, status: ExitStatus, out: &str, err: &str) {
    assert!(
        status.success(),
        "{what} failed ({status})\nstdout: {out}\nstderr: {err}"
    );
}

/// Runs `program args…` inside the namespace to completion (without blocking the stack).
fn run_in_ns(net: &TapNet, program: &str, args: &[&str]) -> (ExitStatus, String, String) {
    let mut child = ChildGuard::spawn(net.netns.command(program).args(args));
    net.exec.block_on(child.wait(CHILD_LIMIT))
}

fn http_server(net: &TapNet) -> HttpStats {
    let config = HttpConfig {
        backlog: 4,
        max_connections: 8,
        ..HttpConfig::default()
    };
    http_server_with(net, config)
}

/// The HTTP example with `config` (and the TAP's counters in `/stats`), running.
fn http_server_with(net: &TapNet, config: HttpConfig) -> HttpStats {
    let config = HttpConfig {
        driver_stats: Some(tap_driver_stats(net.tap_stats.clone())),
        ..config
    };
    let server = HttpServer::bind(net.stack, config).expect("bind port 80");
    let stats = server.stats();
    net.exec
        .local_spawner()
        .spawn(server.run(net.exec.local_spawner()));
    stats
}

/// Waits (up to 20 s) until the server has finished serving `n` connections, and returns its
/// counters then.
fn wait_for_closed(
    net: &TapNet,
    stats: &HttpStats,
    n: u64,
) -> zcnet_examples::http::HttpStatsSnapshot {
    net.exec.block_on(async {
        for _ in 0..400 {
            if stats.get().closed.connections >= n {
                break;
            }
            sleep(Duration::from_millis(50)).await;
        }
    });
    let s = stats.get();
    assert_eq!(s.closed.connections, n, "{s:?}");
    s
}

/// The response the server sends for `/` on a keep-alive connection.
fn index_response_len() -> u64 {
    let r = response(
        200,
        "text/html; charset=utf-8",
        INDEX_HTML.as_bytes(),
        true,
        false,
    );
    r.len() as u64
}

/// `curl http://10.77.0.2/`: status 200 and the page byte-exact; then a HEAD, a 404 and a 405.
#[test]
fn curl_gets_the_http_example_page_byte_exact() {
    require_tool("curl", "curl");
    let net = TapNet::new(1500);
    let stats = http_server(&net);
    let url = format!("http://{ZCNET_ADDR}/");
    let (status, out, err) = run_in_ns(
        &net,
        "curl",
        &["-sS", "--max-time", "20", "-w", "\n%{http_code}", &url],
    );
    assert_success("curl", status, &out, &err);
    let (body, code) = out.rsplit_once('\n').expect("status line from -w");
    assert_eq!(code, "200");
    assert_eq!(body, INDEX_HTML, "body differs");

    let (status, out, err) = run_in_ns(&net, "curl", &["-sS", "--max-time", "20", "-I", &url]);
    assert_success("curl -I", status, &out, &err);
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(
        out.contains(&format!("Content-Length: {}\r\n", INDEX_HTML.len())),
        "{out}"
    );

    for (args, want) in [
        (vec!["/nope"], "404"),
        (vec!["/", "-X", "POST", "-d", "x=1"], "405"),
    ] {
        let target = format!("http://{ZCNET_ADDR}{}", args[0]);
        let mut a = vec![
            "-sS",
            "--max-time",
            "20",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            target.as_str(),
        ];
        a.extend_from_slice(&args[1..]);
        let (status, out, err) = run_in_ns(&net, "curl", &a);
        assert_success("curl", status, &out, &err);
        assert_eq!(out, want, "{args:?}");
    }
    let s = stats.get();
    assert_eq!((s.requests, s.status_2xx, s.status_4xx), (4, 2, 2), "{s:?}");
}

/// `/stats` is JSON with the stack's, the TAP's and the copy ledger's counters, and they count
/// the traffic that got it there; its `connection` section is the TCP statistics of curl's
/// connection as the request found it: established, the request received, nothing sent yet but
/// the SYN-ACK, an RTT measured on the handshake.
#[test]
fn stats_page_shows_stack_tap_and_ledger_counters() {
    require_tool("curl", "curl");
    let net = TapNet::new(1500);
    let _stats = http_server(&net);
    let url = format!("http://{ZCNET_ADDR}/stats");
    let (status, out, err) = run_in_ns(&net, "curl", &["-sS", "--max-time", "20", &url]);
    assert_success("curl /stats", status, &out, &err);
    let j = json::parse(out.as_bytes()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let num = |path: &[&str]| {
        j.path(path)
            .and_then(Json::as_u64)
            .unwrap_or_else(|| panic!("no number at {path:?} in {out}"))
    };
    // The request itself arrived as frames: handshake and request at least.
    assert!(num(&["stack", "frames_in"]) >= 2, "{out}");
    assert!(num(&["stack", "ingress_polls"]) >= 1, "{out}");
    assert!(num(&["tap", "rx_frames"]) >= 2, "{out}");
    assert!(num(&["tap", "rx_bytes"]) > 0, "{out}");
    assert_eq!(num(&["tap", "rx_errors"]), 0, "{out}");
    // The request's bytes crossed the fd (the kernel's copy) and were read by the server.
    assert!(num(&["copy_ledger", "kernel-fd", "bytes"]) > 0, "{out}");
    assert!(num(&["copy_ledger", "socket->app", "bytes"]) > 0, "{out}");
    assert_eq!(num(&["http", "requests"]), 1, "{out}");
    assert_eq!(num(&["http", "connections"]), 1, "{out}");
    assert_eq!(num(&["http", "closed", "connections"]), 0, "{out}");
    assert!(num(&["pool", "slots"]) > 0, "{out}");
    assert_eq!(
        j.path(&["connection", "state"]).and_then(Json::as_str),
        Some("ESTABLISHED"),
        "{out}"
    );
    // The SYN and the request (the handshake's ACK may ride on it); the SYN-ACK.
    assert!(num(&["connection", "segments_received"]) >= 2, "{out}");
    assert!(num(&["connection", "segments_sent"]) >= 1, "{out}");
    let request = num(&["connection", "bytes_received"]);
    assert!(
        request > 0 && request <= zcnet_examples::http::MAX_HEAD as u64,
        "{out}"
    );
    // Nothing written yet: the response is what this document is part of.
    assert_eq!(num(&["connection", "bytes_sent"]), 0, "{out}");
    assert_eq!(num(&["connection", "bytes_acked"]), 0, "{out}");
    assert_eq!(num(&["connection", "retransmitted_segments"]), 0, "{out}");
    // 1500-byte MTU: 1460 payload bytes, 1448 with timestamps (Linux offers them).
    let mss = num(&["connection", "mss"]);
    assert!(mss == 1448 || mss == 1460, "{out}");
    // The handshake's ACK timed the SYN-ACK: a local RTT, well under a second; the RTO at
    // least the default floor, 200 ms.
    let srtt = num(&["connection", "srtt_us"]);
    assert!(num(&["connection", "min_rtt_us"]) <= srtt, "{out}");
    assert!(srtt < 1_000_000, "{out}");
    assert!(num(&["connection", "rto_us"]) >= 200_000, "{out}");
    assert!(j.path(&["connection", "cwnd"]).is_some(), "{out}");
}

/// curl fetching two URLs reuses one connection (keep-alive): it says so, and the server
/// accepted one connection for two requests. The second is `/stats`: its `connection`
/// section counts the first response sent and acknowledged, byte for byte; once curl has
/// closed, the server's totals of closed connections count both responses.
#[test]
fn curl_reuses_one_connection_for_two_requests() {
    require_tool("curl", "curl");
    let net = TapNet::new(1500);
    let stats = http_server(&net);
    let a = format!("http://{ZCNET_ADDR}/");
    let b = format!("http://{ZCNET_ADDR}/stats");
    let (status, out, err) = run_in_ns(
        &net,
        "curl",
        &["-sSv", "--max-time", "20", "-o", "/dev/null", &a, &b],
    );
    assert_success("curl two URLs", status, &out, &err);
    let j = json::parse(out.as_bytes()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let num = |path: &[&str]| {
        j.path(path)
            .and_then(Json::as_u64)
            .unwrap_or_else(|| panic!("no number at {path:?} in {out}"))
    };
    let first = index_response_len();
    assert_eq!(num(&["connection", "bytes_sent"]), first, "{out}");
    assert_eq!(num(&["connection", "bytes_acked"]), first, "{out}");
    assert!(num(&["connection", "segments_received"]) >= 3, "{out}");
    assert!(
        err.contains("Re-using existing connection"),
        "curl did not reuse the connection:\n{err}"
    );
    assert_eq!(err.matches("< HTTP/1.1 200 OK").count(), 2, "{err}");
    let s = wait_for_closed(&net, &stats, 1);
    assert_eq!((s.connections, s.requests), (1, 2), "{s:?}");
    let second = response(200, "application/json", out.as_bytes(), true, false).len() as u64;
    assert_eq!(s.closed.counters.bytes_sent, first + second, "{s:?}");
    assert_eq!(s.closed.counters.bytes_acked, first + second, "{s:?}");
    // Both requests had arrived when `/stats` was answered.
    assert_eq!(
        s.closed.counters.bytes_received,
        num(&["connection", "bytes_received"]),
        "{s:?}"
    );
}

/// 40 clients at once (python threads, each with three keep-alive requests, against a backlog
/// of 4 and 8 connection tasks) all get the page; then garbage, an oversized head and an
/// oversized body get 400, 431 and 413 and the server still answers.
#[test]
fn http_serves_many_clients_and_survives_bad_requests() {
    require_tool("python3", "python3");
    let net = TapNet::new(1500);
    let stats = http_server(&net);
    let script = format!(
        r#"
import http.client, socket, sys, threading
ok = []
def client(i):
    c = http.client.HTTPConnection("{ZCNET_ADDR}", 80, timeout=30)
    for _ in range(3):
        c.request("GET", "/")
        r = c.getresponse()
        body = r.read()
        if r.status != 200 or len(body) != {len}:
            print("bad", i, r.status, len(body)); sys.exit(1)
    c.close()
    ok.append(i)
ts = [threading.Thread(target=client, args=(i,)) for i in range(40)]
for t in ts: t.start()
for t in ts: t.join()
def raw(data):
    s = socket.create_connection(("{ZCNET_ADDR}", 80), timeout=20)
    s.sendall(data)
    got = b""
    while True:
        b = s.recv(65536)
        if not b: break
        got += b
    s.close()
    return got.split(b"\r\n", 1)[0].decode()
print("clients", len(ok))
print(raw(b"\x00\xff\xfe garbage\r\n\r\n"))
print(raw(b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"a" * 9000 + b"\r\n\r\n"))
print(raw(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n"))
print(raw(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"))
"#,
        len = INDEX_HTML.len()
    );
    let (status, out, err) = run_in_ns(&net, "python3", &["-c", &script]);
    assert_success("python clients", status, &out, &err);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "clients 40",
            "HTTP/1.1 400 Bad Request",
            "HTTP/1.1 431 Request Header Fields Too Large",
            "HTTP/1.1 413 Content Too Large",
            "HTTP/1.1 200 OK"
        ],
        "{out}"
    );
    let s = wait_for_closed(&net, &stats, 44);
    assert_eq!(s.connections, 44, "{s:?}");
    assert_eq!(s.status_2xx, 121, "{s:?}");
    // The 40 clients read their three pages each before closing: all sent when counted.
    assert!(
        s.closed.counters.bytes_sent >= 120 * index_response_len(),
        "{s:?}"
    );
    assert!(s.closed.counters.segments_received >= 44 * 2, "{s:?}");
}

/// The slowloris test's places, listening sockets and deadlines (short, so the test is).
const SLOW_PLACES: usize = 32;
const SLOW_BACKLOG: usize = 32;

/// A slowloris of 400 connections: python opens 400 connections, sends each the start of a
/// request head and then one more byte every second, and reopens every connection the server
/// ends, for 20 s; `curl` asks for the page once a second meanwhile. With its places all taken by connections that trickle, the server sheds the
/// one waiting longest for each new connection and resets requests that miss their deadline,
/// so `curl`, started once the attack holds every place, gets the page each time, within its
/// 10 s limit (its SYN retries included). The server's counters show it shed and timed out
/// the attack's connections.
#[test]
fn http_serves_new_clients_through_a_slowloris_of_400_connections() {
    require_tool("curl", "curl");
    require_tool("python3", "python3");
    let net = TapNet::with_sockets::<128>(1500);
    let config = HttpConfig {
        backlog: SLOW_BACKLOG,
        max_connections: SLOW_PLACES,
        idle_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
        write_timeout: Duration::from_secs(2),
        shed_after: Duration::from_millis(100),
        ..HttpConfig::default()
    };
    let stats = http_server_with(&net, config);
    let script = format!(
        r#"
import socket, time
N, ROUNDS = 400, 20
head = b"GET / HTTP/1.1\r\nHost: a\r\nX-Slow: "
socks = {{}}
opened = reopened = 0
def open_one():
    global opened
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("{ZCNET_ADDR}", 80))
    except BlockingIOError:
        pass
    socks[s] = False
    opened += 1
for _ in range(N):
    open_one()
for r in range(ROUNDS):
    time.sleep(1)
    for s in list(socks):
        try:
            s.send(b"a" if socks[s] else head)
            socks[s] = True
        except BlockingIOError:
            pass  # still connecting
        except OSError:
            s.close(); del socks[s]; reopened += 1; open_one()
print("opened", opened, "reopened", reopened)
"#
    );
    let mut slowloris = ChildGuard::spawn(net.netns.command("python3").args(["-c", &script]));
    // The attack takes every place.
    net.exec.block_on(async {
        for _ in 0..100 {
            if stats.get().connections >= SLOW_PLACES as u64 {
                break;
            }
            sleep(Duration::from_millis(50)).await;
        }
    });
    let before = stats.get();
    assert!(
        before.connections >= SLOW_PLACES as u64,
        "the attack takes every place: {before:?}"
    );
    let url = format!("http://{ZCNET_ADDR}/");
    let mut took = Vec::new();
    for _ in 0..10 {
        // Spread over the attack.
        net.exec.block_on(sleep(Duration::from_millis(1000)));
        let start = std::time::Instant::now();
        let (status, out, err) = run_in_ns(
            &net,
            "curl",
            &[
                "-sS",
                "--max-time",
                "10",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &url,
            ],
        );
        took.push(start.elapsed());
        assert_success("curl during the slowloris", status, &out, &err);
        assert_eq!(out, "200", "{err}");
    }
    let (status, out, err) = net.exec.block_on(slowloris.wait(CHILD_LIMIT));
    assert_success("slowloris", status, &out, &err);
    let s = stats.get();
    // The attack ran all along: its connections were shed and timed out, and reopened.
    let reopened: u64 = out
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("slowloris output: {out}"));
    assert!(reopened >= 100, "{out}; {s:?}");
    assert!(s.shed + s.timed_out >= 100, "{s:?}");
    assert!(s.status_2xx >= 10, "{s:?}");
    eprintln!("curl took {took:?}; server {s:?}; slowloris {out}");
}

/// TCP echo: `python3` sends 1 MB and reads it back byte-exact; UDP echo: 50 datagrams.
#[test]
fn echo_example_echoes_tcp_and_udp() {
    require_tool("python3", "python3");
    let net = TapNet::new(1500);
    let server = EchoServer::bind(net.stack, EchoConfig::default()).expect("bind port 7");
    let stats = server.stats();
    net.exec
        .local_spawner()
        .spawn(server.run(net.exec.local_spawner()));
    let script = format!(
        r#"
import os, socket, sys, threading
data = os.urandom(1 << 20)
s = socket.create_connection(("{ZCNET_ADDR}", 7), timeout=20)
def send():
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
t = threading.Thread(target=send); t.start()
got = bytearray()
while True:
    b = s.recv(65536)
    if not b: break
    got += b
t.join()
if bytes(got) != data: print("tcp mismatch", len(got)); sys.exit(1)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(5)
for i in range(50):
    m = os.urandom(1 + i * 29)
    u.sendto(m, ("{ZCNET_ADDR}", 7))
    if u.recvfrom(4096)[0] != m: print("udp mismatch", i); sys.exit(1)
print("echo ok")
"#
    );
    let (status, out, err) = run_in_ns(&net, "python3", &["-c", &script]);
    assert_success("python echo client", status, &out, &err);
    assert!(out.contains("echo ok"), "{out}");
    let s = stats.get();
    assert_eq!((s.tcp_connections, s.tcp_bytes), (1, 1 << 20), "{s:?}");
    assert_eq!(s.udp_datagrams, 50, "{s:?}");
}

fn iperf3_server(net: &TapNet) -> Iperf3Stats {
    let config = Iperf3Config {
        backlog: 4,
        ..Iperf3Config::default()
    };
    let server = Iperf3Server::bind(net.stack, config).expect("bind port 5201");
    let stats = server.stats();
    net.exec
        .local_spawner()
        .spawn(server.run(net.exec.local_spawner()));
    stats
}

/// Runs `iperf3 -c 10.77.0.2 -t 2 --json <extra>` in the namespace; checks it exits 0, both
/// sides report nonzero throughput and the server counted the test; returns the client's JSON.
fn iperf3_run(net: &TapNet, stats: &Iperf3Stats, extra: &[&str]) -> Json {
    let addr = ZCNET_ADDR.to_string();
    let mut args = vec!["-c", addr.as_str(), "-t", "2", "--json"];
    args.extend_from_slice(extra);
    let done_before = stats.tests_done();
    let (status, out, err) = run_in_ns(net, "iperf3", &args);
    assert_success(
        &format!("iperf3 {args:?} (server: {:?})", stats.last_error()),
        status,
        &out,
        &err,
    );
    let j = json::parse(out.as_bytes()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(j.get("error").is_none(), "iperf3 reported an error: {out}");
    let bps = |which: &str| {
        j.path(&["end", which, "bits_per_second"])
            .and_then(Json::as_f64)
            .unwrap_or_else(|| panic!("no end.{which}.bits_per_second in {out}"))
    };
    let (sent, received) = (bps("sum_sent"), bps("sum_received"));
    assert!(
        sent > 0.0 && received > 0.0,
        "{extra:?}: {sent} / {received}"
    );
    wait_for_test(net, stats, done_before);
    let summary = stats.last().expect("a finished test");
    assert!(summary.bytes > 0, "{summary:?}");
    eprintln!(
        "iperf3 {extra:?}: sent {:.0} Mbit/s, received {:.0} Mbit/s (server: {summary})",
        sent / 1e6,
        received / 1e6,
    );
    j
}

/// Runs `iperf3 -c 10.77.0.2 <args>` without `--json`, checks it exits 0 and returns what it
/// printed (shown with `--nocapture`).
fn iperf3_text(net: &TapNet, stats: &Iperf3Stats, args: &[&str]) -> String {
    let addr = ZCNET_ADDR.to_string();
    let mut all = vec!["-c", addr.as_str()];
    all.extend_from_slice(args);
    let done_before = stats.tests_done();
    let (status, out, err) = run_in_ns(net, "iperf3", &all);
    assert_success(
        &format!("iperf3 {all:?} (server: {:?})", stats.last_error()),
        status,
        &out,
        &err,
    );
    eprintln!("$ iperf3 {}\n{out}", all.join(" "));
    wait_for_test(net, stats, done_before);
    out
}

/// Runs the server until it has counted the test the client just finished: the client exits
/// on DISPLAY_RESULTS, the server counts the test once its IPERF_DONE (or close) arrives, a
/// moment later, and the server runs only while the test drives the executor.
fn wait_for_test(net: &TapNet, stats: &Iperf3Stats, done_before: u64) {
    net.exec.block_on(async {
        for _ in 0..1000 {
            if stats.tests_done() > done_before {
                break;
            }
            sleep(Duration::from_millis(5)).await;
        }
    });
    assert_eq!(
        stats.tests_done(),
        done_before + 1,
        "server: {:?}",
        stats.last_error()
    );
}

/// A number at `path` in iperf3's JSON output.
fn num_at(j: &Json, path: &[&str]) -> f64 {
    j.path(path)
        .and_then(Json::as_f64)
        .unwrap_or_else(|| panic!("no number at {path:?} in {}", j.to_compact()))
}

/// An unmodified `iperf3 -c` measures zcnet receiving, then (same server) `-R` with zcnet
/// sending, then `-P 4` with four parallel streams.
#[test]
fn iperf3_client_measures_zcnet_normal_reverse_and_parallel() {
    require_tool("iperf3", "iperf3");
    let net = TapNet::new(1500);
    let stats = iperf3_server(&net);
    iperf3_run(&net, &stats, &[]);
    assert!(!stats.last().unwrap().reverse);
    iperf3_run(&net, &stats, &["-R"]);
    assert!(stats.last().unwrap().reverse);
    iperf3_run(&net, &stats, &["-P", "4"]);
    assert_eq!(stats.last().unwrap().streams, 4);
    assert_eq!(stats.tests_failed(), 0, "{:?}", stats.last_error());
}

/// iperf3 tests in a row on one server, each followed by a pool audit that wants every slot
/// back. A test where zcnet receives ends with the client's last data unread in the server's
/// stream sockets (and more queued at the client behind the closed window); the server closes
/// and drops them, and the stack resets them (counted in `tcp_unread_resets`) so that their
/// frames come back at once. Kept open until the client's zero-window probing gave up, each
/// would hold a receive buffer of frames and its pool budget, and after a few tests the
/// listener could not re-arm for the next test's streams.
#[test]
fn iperf3_tests_in_a_row_give_every_slot_back() {
    require_tool("iperf3", "iperf3");
    let net = TapNet::new(1500);
    let stats = iperf3_server(&net);
    let tests: [&[&str]; 6] = [
        &[],
        &["-R"],
        &["-P", "4"],
        &[],
        &["-R", "-P", "4"],
        &["-P", "4"],
    ];
    let mut receiving_streams = 0;
    for (i, extra) in tests.into_iter().enumerate() {
        iperf3_run(&net, &stats, extra);
        if !extra.contains(&"-R") {
            receiving_streams += if extra.contains(&"-P") { 4 } else { 1 };
        }
        // The resets go out and the closed connections are removed.
        net.exec.block_on(sleep(Duration::from_millis(200)));
        eprintln!("after test {i} ({extra:?}): {}", net.pool.occupancy());
        net.assert_slots_back();
    }
    assert_eq!(stats.tests_failed(), 0, "{:?}", stats.last_error());
    let st = net.stack.stats();
    // At most one reset per stream zcnet received on (a stream the client had fully drained
    // into the server's reads by the time it was closed needs none).
    assert!(
        st.tcp_unread_resets <= receiving_streams,
        "{} resets for {receiving_streams} receiving streams",
        st.tcp_unread_resets
    );
    assert_eq!(st.syn_cookie_accept_drops, 0, "{st:?}");
}

/// `iperf3 -u -b 50M -t 2`: zcnet receives the client's UDP stream on its zero-copy datagram
/// socket; the client prints the loss and jitter the server measured (its JSON's `end.sum`
/// fields come from the server's results), and they agree with the server's own counts.
/// Then the same with 64-bit counters, a datagram length of 1000 and two streams, and once
/// in text mode.
#[test]
fn iperf3_udp_client_measures_zcnet_receiving() {
    require_tool("iperf3", "iperf3");
    let net = TapNet::new(1500);
    let stats = iperf3_server(&net);
    let before = net.stack.stats();
    let j = iperf3_run(&net, &stats, &["-u", "-b", "50M"]);
    let s = stats.last().unwrap();
    assert!(s.udp && !s.reverse && !s.bidir, "{s:?}");
    // The client's view of the receiving end is the server's results.
    let packets = num_at(&j, &["end", "sum", "packets"]);
    let lost = num_at(&j, &["end", "sum", "lost_packets"]);
    let lost_percent = num_at(&j, &["end", "sum", "lost_percent"]);
    let jitter_ms = num_at(&j, &["end", "sum", "jitter_ms"]);
    let received = num_at(&j, &["end", "sum_received", "bytes"]);
    // 50 Mbit/s for 2 s in datagrams of about 1.4 kB: some 8,500 datagrams.
    assert!(packets > 4000.0, "{packets} datagrams");
    assert!(lost_percent < 5.0, "{lost_percent}% lost");
    assert_eq!(lost, s.lost as f64);
    assert_eq!(received, s.bytes_received as f64);
    assert!(s.packets_received > 4000, "{s:?}");
    assert!((0.0..100.0).contains(&jitter_ms), "{jitter_ms} ms");
    assert!((jitter_ms - s.jitter * 1e3).abs() <= 1e-9 * jitter_ms.max(1.0));
    // The data arrived on the zero-copy path, not in smoltcp's UDP.
    let after = net.stack.stats();
    assert!(
        after.datagrams_in - before.datagrams_in >= s.packets_received - s.lost,
        "{after:?}"
    );

    let j = iperf3_run(
        &net,
        &stats,
        &[
            "-u",
            "-b",
            "20M",
            "-l",
            "1000",
            "--udp-counters-64bit",
            "-P",
            "2",
        ],
    );
    let s = stats.last().unwrap();
    assert_eq!(s.streams, 2);
    let streams = j
        .path(&["end", "streams"])
        .and_then(Json::as_array)
        .unwrap();
    assert_eq!(streams.len(), 2);
    for st in streams {
        let bytes = num_at(st, &["udp", "bytes"]);
        let packets = num_at(st, &["udp", "packets"]);
        assert_eq!(bytes, packets * 1000.0, "{}", st.to_compact());
    }
    assert!(num_at(&j, &["end", "sum", "lost_percent"]) < 5.0);

    let out = iperf3_text(&net, &stats, &["-u", "-b", "10M", "-t", "1"]);
    assert!(out.contains("Lost/Total Datagrams"), "{out}");
    assert!(out.contains("receiver"), "{out}");
    assert_eq!(stats.tests_failed(), 0, "{:?}", stats.last_error());
    assert_eq!(
        net.pool.occupancy().lent,
        0,
        "every datagram's slot came back"
    );
}

/// `iperf3 -u -R -b 50M -t 2`: zcnet sends, pacing itself at the requested rate with the
/// executor's timers; the client receives the datagrams, counts them by iperf3's header and
/// finds few lost and the rate near 50 Mbit/s.
#[test]
fn iperf3_udp_reverse_zcnet_sends_at_the_requested_rate() {
    require_tool("iperf3", "iperf3");
    let net = TapNet::new(1500);
    let stats = iperf3_server(&net);
    let before = net.stack.stats();
    let j = iperf3_run(&net, &stats, &["-u", "-R", "-b", "50M"]);
    let s = stats.last().unwrap();
    assert!(s.udp && s.reverse, "{s:?}");
    // The client measured these itself, from our datagrams' counters.
    let packets = num_at(&j, &["end", "sum", "packets"]);
    let lost_percent = num_at(&j, &["end", "sum", "lost_percent"]);
    let received = num_at(&j, &["end", "sum_received", "bits_per_second"]);
    let sent = num_at(&j, &["end", "sum_sent", "bits_per_second"]);
    assert!(packets > 4000.0, "{packets} datagrams");
    assert!(lost_percent < 5.0, "{lost_percent}% lost");
    // Paced: near the 50 Mbit/s asked for, not as fast as the TAP goes.
    assert!((40e6..56e6).contains(&sent), "sent at {sent} bit/s");
    assert!(received > 38e6, "received at {received} bit/s");
    assert!(s.packets_sent as f64 >= packets * 0.95, "{s:?}");
    let after = net.stack.stats();
    assert!(
        after.datagrams_out - before.datagrams_out >= s.packets_sent,
        "sent on the zero-copy path: {after:?}"
    );

    iperf3_text(&net, &stats, &["-u", "-R", "-b", "20M", "-t", "1"]);
    assert_eq!(stats.tests_failed(), 0, "{:?}", stats.last_error());
}

/// `iperf3 --bidir -t 2` (TCP): data flows both ways at once, and the client's JSON has both
/// directions' sums; then UDP `--bidir`, and once in text mode.
#[test]
fn iperf3_bidir_moves_data_both_ways() {
    require_tool("iperf3", "iperf3");
    let net = TapNet::new(1500);
    let stats = iperf3_server(&net);
    let j = iperf3_run(&net, &stats, &["--bidir"]);
    let s = stats.last().unwrap();
    assert!(s.bidir && !s.udp && s.streams == 2, "{s:?}");
    assert!(s.bytes_received > 0 && s.bytes_sent > 0, "{s:?}");
    for sum in ["sum_sent_bidir_reverse", "sum_received_bidir_reverse"] {
        assert!(num_at(&j, &["end", sum, "bytes"]) > 0.0, "{sum}");
    }
    // The reverse direction's sender is zcnet: its byte count is the server's.
    assert_eq!(
        num_at(&j, &["end", "sum_sent_bidir_reverse", "bytes"]),
        s.bytes_sent as f64
    );
    assert_eq!(
        num_at(&j, &["end", "sum_received", "bytes"]),
        s.bytes_received as f64
    );

    let j = iperf3_run(&net, &stats, &["--bidir", "-u", "-b", "20M"]);
    let s = stats.last().unwrap();
    assert!(
        s.bidir && s.udp && s.packets_sent > 0 && s.packets_received > 0,
        "{s:?}"
    );
    assert!(num_at(&j, &["end", "sum_received_bidir_reverse", "bytes"]) > 0.0);

    iperf3_text(&net, &stats, &["--bidir", "-t", "1", "-P", "2"]);
    assert_eq!(stats.last().unwrap().streams, 4);
    assert_eq!(stats.tests_failed(), 0, "{:?}", stats.last_error());
}

/// What the server cannot do is refused with iperf3's own error messages (the client exits 1
/// and prints them): datagrams longer than the link carries, too many streams, too high a
/// rate, a UDP test while an ordinary UDP socket holds the port. The server is still usable
/// afterwards, for TCP and UDP.
#[test]
fn iperf3_refusals_are_clean() {
    require_tool("iperf3", "iperf3");
    let net = TapNet::new(1500);
    let stats = iperf3_server(&net);
    let addr = ZCNET_ADDR.to_string();
    for (args, says) in [
        // Datagrams larger than the link carries unfragmented.
        (vec!["-u", "-l", "2000"], "block size invalid"),
        // 9 streams each way: more than the server takes.
        (vec!["--bidir", "-P", "9"], "not implemented"),
        (vec!["-u", "-b", "200G"], "larger than server limit"),
    ] {
        let mut all = vec!["-c", addr.as_str(), "-t", "1"];
        all.extend_from_slice(&args);
        let (status, out, err) = run_in_ns(&net, "iperf3", &all);
        assert!(
            !status.success(),
            "iperf3 {args:?} should fail\n{out}\n{err}"
        );
        assert!(
            format!("{out}{err}").contains(says),
            "{args:?}: {out}\n{err}"
        );
        eprintln!("$ iperf3 {}\n{out}{err}", all.join(" "));
    }
    assert_eq!(stats.tests_failed(), 3);
    // Port 5201 taken for UDP by an ordinary socket: a UDP test cannot bind its own.
    let blocker = UdpSocket::bind(net.stack, 5201, UdpBuffers::with_capacity(4, 2048)).unwrap();
    let (status, out, err) = run_in_ns(&net, "iperf3", &["-c", &addr, "-t", "1", "-u"]);
    assert!(!status.success(), "iperf3 -u should fail\n{out}\n{err}");
    let text = format!("{out}{err}");
    assert!(text.contains("unable to start stream listener"), "{text}");
    eprintln!("$ iperf3 -c {addr} -t 1 -u   (5201/udp taken)\n{text}");
    drop(blocker);
    assert_eq!(stats.tests_failed(), 4);
    iperf3_run(&net, &stats, &["-t", "1"]);
    iperf3_run(&net, &stats, &["-t", "1", "-u"]);
}
