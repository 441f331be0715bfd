//! zcnet against the Linux kernel over TAP, side by side with plain smoltcp 0.14 and
//! embassy-net 0.9.1 in one run, reported as ratios.
//!
//! ```text
//! cargo bench -p zcnet-benches --bench tap            # full run (BENCHMARKS.md); needs root, wrk
//! cargo bench -p zcnet-benches --bench tap -- --quick # CI smoke run (< 60 s)
//! cargo bench -p zcnet-benches --bench tap -- --svg-dir benches/results  # charts there (default target/)
//! ```
//!
//! # Layout
//!
//! Every stack runs in a process of its own: this binary started again as
//! `--serve <peer> <class> <tap>`. That child opens a TAP by name in the root namespace (each
//! peer its own way: `zcnet_tap::Tap`, `smoltcp::phy::TunTapInterface`, embassy-net-tuntap's
//! `TunTapDevice`), says `ready`, and the parent moves the TAP's kernel side into a fresh network
//! namespace (`zcnet_tests::netns::Netns`, deleted on drop, also on panic) as 10.77.0.1/24; the
//! stack is 10.77.0.2. The Linux client is the same for every peer: this binary again, run
//! inside the namespace (`ip netns exec <ns> <bench> --client ..`, plain `std::net` sockets),
//! or `wrk` there. Nothing else on the machine is addressed. IPv6 is off in the namespaces
//! (no router solicitations or MLD reports landing on an idle stack), and the namespace's
//! client side keeps at most [`harness::CLIENT_TIME_WAIT_CAP`] TIME-WAIT sockets (ports 1024-65535).
//! Without the cap wrk's `Connection: close` runs leave tens of thousands of client sockets in
//! TIME-WAIT (60 s on Linux), and every `connect` then walks the ephemeral ports looking for a
//! free one (`__inet_hash_connect`, measured at 7 ms per call with 35,000 of them): every peer
//! collapses to 80-300 requests per second, whichever stack serves. `tcp_tw_reuse` cannot help
//! every peer: Linux reuses a TIME-WAIT port only for connections that carried TCP timestamps,
//! which zcnet negotiates and plain smoltcp and embassy-net do not; the cap treats all three
//! alike.
//!
//! The parent reads a child's counters over its stdin/stdout (`stats`): CPU time (user +
//! system) and context switches from `getrusage(RUSAGE_SELF)` minus the answering thread's own
//! `RUSAGE_THREAD`, so every thread the peer uses counts (embassy-net-tuntap's async-io reactor
//! thread, embassy-time's alarm thread), plus the stack's loop turns and polls:
//!
//! * **loop turns**: zcnet: the executor's `waits` (times its loop blocked in `epoll_wait`);
//!   smoltcp: iterations of its canonical loop (one `phy::wait` each); embassy: returns from
//!   parking the executor thread with work pended.
//! * **polls**: zcnet: task polls (ingress, egress, the application's tasks); smoltcp:
//!   `iface.poll` calls; embassy: polls of the net runner (the task that drives smoltcp).
//!
//! # Workloads
//!
//! * **bulk** (`sink` / `source`): one TCP connection moves N bytes, Linux to the stack (the
//!   server reads into a 64 KiB buffer and discards) or the stack to Linux (the server writes
//!   a constant 64 KiB buffer); timed by the client from connect to the last byte. 64 KiB
//!   receive and send rings on every socket of every peer, MTU 1500. With
//!   `ZCNET_TAP_SINK=in-place` the sink servers take the data in place and drop it (each
//!   stack's closure read: zcnet's and embassy-net's `read_with`, smoltcp's `recv`), copying
//!   nothing (the row is then `bulk sink in place`). zcnet runs twice here: with its TAP's
//!   offloads (virtio-net header, partial checksums, TSO, receive super-segments) and as
//!   `zcnet-plain` without any (1514-byte frames with full checksums, as the others).
//! * **ceiling**: no stack; a frame blaster on the same kind of TAP fd writes 1514-byte
//!   UDP frames to a UDP sink in the namespace (frames Linux delivered to the socket, per
//!   second), and reads the frames a Linux UDP blaster sends (frames read per second).
//! * **http**: `wrk` in the namespace against each stack's HTTP/1.1 responder (13-byte body),
//!   1/10/50/100 connections, keep-alive, and `Connection: close` (a new connection per
//!   request; wrk closes after each response).
//! * **idle**: 100 idle TCP connections open to each stack; loop turns, polls, context
//!   switches and CPU per second over a window.
//!
//! Runs are interleaved peer by peer; every figure is a median over the runs.

mod capture;
mod client;
mod common;
mod echo;
mod emb;
mod harness;
mod raw;
mod smol;
mod zc;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Class;
use harness::{fmt_med, in_netns, kv, med, ratio, self_client, Kid, Med, Peer, Server};
use zcnet_benches::{Mode, Table};
use zcnet_tests::netns::{require_root_and_tun, tap_name, Netns, ZCNET_ADDR};

const PEERS: [Peer; 3] = [Peer::Zcnet, Peer::Smoltcp, Peer::Embassy];
/// The bulk workload's peers: zcnet also without offloads, at the MTU-1500 frames the others
/// send and receive.
const BULK_PEERS: [Peer; 4] = [Peer::Zcnet, Peer::ZcnetPlain, Peer::Smoltcp, Peer::Embassy];

/// One `stats` answer.
#[derive(Clone, Copy, Debug)]
struct Stats {
    cpu_ns: u64,
    csw: u64,
    vcsw: u64,
    wakeups: u64,
    polls: u64,
    requests: u64,
}

impl Stats {
    /// The change since `before`. Saturating: the process-minus-answering-thread figures come
    /// from two `getrusage` calls with different accounting granularity, so over an idle window
    /// the difference can shrink by a tick; that reads as 0, not as a wrapped-around huge value.
    fn since(self, before: Stats) -> Stats {
        Stats {
            cpu_ns: self.cpu_ns.saturating_sub(before.cpu_ns),
            csw: self.csw.saturating_sub(before.csw),
            vcsw: self.vcsw.saturating_sub(before.vcsw),
            wakeups: self.wakeups.saturating_sub(before.wakeups),
            polls: self.polls.saturating_sub(before.polls),
            requests: self.requests.saturating_sub(before.requests),
        }
    }
}

impl Server {
    /// Starts `peer` serving `class` on a fresh TAP whose kernel side goes into a fresh
    /// namespace.
    fn start(peer: Peer, class: Class) -> Server {
        Self::start_in(peer, class, Netns::new(), tap_name())
    }

    /// The stack process's counters now.
    fn stats(&mut self) -> Stats {
        let l = self.stats_line();
        Stats {
            cpu_ns: kv(&l, "cpu_ns"),
            csw: kv(&l, "vcsw") + kv(&l, "ivcsw"),
            vcsw: kv(&l, "vcsw"),
            wakeups: kv(&l, "wakeups"),
            polls: kv(&l, "polls"),
            requests: kv(&l, "requests"),
        }
    }
}

/// Per-run samples keyed by (workload, peer, metric).
#[derive(Default)]
struct Samples(BTreeMap<(String, Peer, &'static str), Vec<f64>>);

impl Samples {
    fn add(&mut self, work: &str, peer: Peer, metric: &'static str, v: f64) {
        self.0
            .entry((work.to_string(), peer, metric))
            .or_default()
            .push(v);
    }
    fn get(&self, work: &str, peer: Peer, metric: &'static str) -> Med {
        med(self
            .0
            .get(&(work.to_string(), peer, metric))
            .unwrap_or_else(|| panic!("no samples for {work} {peer:?} {metric}")))
    }
}

struct Plan {
    runs: usize,
    bulk_bytes: u64,
    blast_ms: u64,
    http_runs: usize,
    http_conns: &'static [usize],
    http_secs: u64,
    idle_conns: usize,
    idle_secs: u64,
}

/// The name of the Linux → stack bulk rows: `bulk sink`, or `bulk sink in place` when the
/// servers take what they receive in place ([`common::sink_in_place`]).
fn sink_work() -> &'static str {
    if common::sink_in_place() {
        "bulk sink in place"
    } else {
        "bulk sink"
    }
}

fn bulk(plan: &Plan, s: &mut Samples) {
    let mut servers: Vec<Server> = BULK_PEERS
        .iter()
        .map(|&p| Server::start(p, Class::Bulk))
        .collect();
    // The ceiling is measured in the same rounds, so it sees the same machine load.
    let mut raw = Server::start(Peer::Raw, Class::Bulk);
    let bytes = plan.bulk_bytes.to_string();
    for run in 0..plan.runs {
        ceiling(plan, &mut raw, s);
        for dir in ["sink", "source"] {
            for srv in &mut servers {
                let before = srv.stats();
                let r = self_client(&srv.netns, &[dir, &bytes], Duration::from_secs(120));
                let d = srv.stats().since(before);
                let b = kv(&r, "bytes") as f64;
                let ns = kv(&r, "ns") as f64;
                let gb = b / 1e9;
                let work = if dir == "sink" {
                    sink_work().to_string()
                } else {
                    format!("bulk {dir}")
                };
                s.add(&work, srv.peer, "MB/s", b / ns * 1e3);
                s.add(&work, srv.peer, "cpu s/GB", d.cpu_ns as f64 / 1e9 / gb);
                s.add(
                    &work,
                    srv.peer,
                    "client cpu s/GB",
                    kv(&r, "client_cpu_ns") as f64 / 1e9 / gb,
                );
                s.add(&work, srv.peer, "csw/GB", d.csw as f64 / gb);
                s.add(&work, srv.peer, "vcsw/GB", d.vcsw as f64 / gb);
                s.add(&work, srv.peer, "turns/MB", d.wakeups as f64 / (b / 1e6));
                s.add(&work, srv.peer, "polls/MB", d.polls as f64 / (b / 1e6));
                eprintln!(
                    "run {run} {work} {}: {:.1} MB/s, {:.2} cpu s/GB",
                    srv.peer.name(),
                    b / ns * 1e3,
                    d.cpu_ns as f64 / 1e9 / gb
                );
            }
        }
    }
}

/// One run of the raw TAP ceiling, both directions, on the blaster `raw`.
fn ceiling(plan: &Plan, raw: &mut Server, s: &mut Samples) {
    let exe = std::env::current_exe().expect("own path");
    // Stack -> Linux: frames Linux delivered to its UDP socket.
    let mut sink = Kid(raw
        .netns
        .command(exe.to_str().unwrap())
        .args(["--client", "udp-sink"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("udp sink"));
    let mut out = BufReader::new(sink.0.stdout.take().unwrap());
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    assert_eq!(l.trim(), "ready", "udp sink: {l}");
    raw.send(&format!("tx {}", plan.blast_ms));
    let done = raw.line(Duration::from_secs(30));
    let written = kv(&done, "frames") as f64;
    let written_cpu = kv(&done, "cpu_ns") as f64 / 1e9;
    l.clear();
    out.read_line(&mut l).unwrap();
    let delivered = kv(&l, "frames") as f64;
    let delivered_rate = delivered / kv(&l, "ns").max(1) as f64 * 1e9;
    let _ = sink.0.wait();
    s.add("ceiling tx", Peer::Raw, "frames/s", delivered_rate);
    // Frames Linux delivered per CPU-second of the writer.
    s.add(
        "ceiling tx",
        Peer::Raw,
        "frames/cpu-s",
        delivered / written_cpu,
    );
    s.add(
        "ceiling tx",
        Peer::Raw,
        "delivered share",
        delivered / written,
    );
    // Linux -> stack: frames the blaster read.
    raw.send(&format!("rx {}", plan.blast_ms));
    let ms = (plan.blast_ms + 200).to_string();
    self_client(&raw.netns, &["udp-blast", &ms], Duration::from_secs(60));
    let done = raw.line(Duration::from_secs(30));
    let read = kv(&done, "frames") as f64;
    let read_rate = read / kv(&done, "ns").max(1) as f64 * 1e9;
    s.add("ceiling rx", Peer::Raw, "frames/s", read_rate);
    s.add(
        "ceiling rx",
        Peer::Raw,
        "frames/cpu-s",
        read / (kv(&done, "cpu_ns") as f64 / 1e9),
    );
    eprintln!(
        "ceiling: tx delivered {delivered_rate:.0}/s ({:.0}/cpu-s), rx read {read_rate:.0}/s ({:.0}/cpu-s)",
        delivered / written_cpu,
        read / (kv(&done, "cpu_ns") as f64 / 1e9)
    );
}

fn wrk_rps(out: &str) -> (f64, u64) {
    let rps = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .unwrap_or_else(|| panic!("no Requests/sec in wrk output: {out}"))
        .trim()
        .parse()
        .expect("wrk rate");
    let mut errors = 0;
    for l in out.lines() {
        let l = l.trim();
        if let Some(e) = l.strip_prefix("Socket errors:") {
            errors += e
                .split(',')
                .filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok())
                .sum::<u64>();
        }
        if let Some(e) = l.strip_prefix("Non-2xx or 3xx responses:") {
            errors += e.trim().parse::<u64>().unwrap_or(0);
        }
    }
    (rps, errors)
}

fn http(plan: &Plan, s: &mut Samples) {
    let mut servers: Vec<Server> = PEERS
        .iter()
        .map(|&p| Server::start(p, Class::Http))
        .collect();
    let url = format!("http://{ZCNET_ADDR}:{}/", common::HTTP_PORT);
    for &conns in plan.http_conns {
        for keep in [true, false] {
            let work = format!(
                "http c={conns} {}",
                if keep { "keep-alive" } else { "close" }
            );
            for run in 0..plan.http_runs {
                for srv in &mut servers {
                    let mut args = vec![
                        format!("-t{}", conns.min(2)),
                        format!("-c{conns}"),
                        format!("-d{}s", plan.http_secs),
                    ];
                    if !keep {
                        args.extend(["-H".to_string(), "Connection: close".to_string()]);
                    }
                    args.push(url.clone());
                    let before = srv.stats();
                    let out = in_netns(
                        &srv.netns,
                        "wrk",
                        &args,
                        Duration::from_secs(plan.http_secs + 30),
                    );
                    let d = srv.stats().since(before);
                    let (rps, errors) = wrk_rps(&out);
                    s.add(&work, srv.peer, "rps", rps);
                    s.add(&work, srv.peer, "errors", errors as f64);
                    s.add(
                        &work,
                        srv.peer,
                        "cpu us/req",
                        d.cpu_ns as f64 / 1e3 / d.requests.max(1) as f64,
                    );
                    s.add(
                        &work,
                        srv.peer,
                        "turns/req",
                        d.wakeups as f64 / d.requests.max(1) as f64,
                    );
                    eprintln!(
                        "run {run} {work} {}: {rps:.0} req/s, {errors} errors",
                        srv.peer.name()
                    );
                }
            }
        }
    }
}

fn idle(plan: &Plan, s: &mut Samples) {
    let exe = std::env::current_exe().expect("own path");
    for peer in PEERS {
        let mut srv = Server::start(peer, Class::Idle);
        let mut client = Kid(srv
            .netns
            .command(exe.to_str().unwrap())
            .args(["--client", "idle", &plan.idle_conns.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("idle client"));
        let mut out = BufReader::new(client.0.stdout.take().unwrap());
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        assert_eq!(
            l.trim(),
            format!("open {}", plan.idle_conns),
            "idle client: {l}"
        );
        // Let delayed ACKs and the like settle.
        std::thread::sleep(Duration::from_secs(1));
        let before = srv.stats();
        let t = Instant::now();
        std::thread::sleep(Duration::from_secs(plan.idle_secs));
        let d = srv.stats().since(before);
        let secs = t.elapsed().as_secs_f64();
        drop(client.0.stdin.take());
        let _ = client.0.wait();
        s.add("idle", peer, "turns/s", d.wakeups as f64 / secs);
        s.add("idle", peer, "polls/s", d.polls as f64 / secs);
        s.add("idle", peer, "csw/s", d.csw as f64 / secs);
        s.add("idle", peer, "cpu ms/s", d.cpu_ns as f64 / 1e6 / secs);
        eprintln!("idle {}: {:?} over {secs:.1} s", peer.name(), d);
    }
}

// ---- report ---------------------------------------------------------------------------------

fn report(plan: &Plan, mode: Mode, s: &Samples) {
    let z = Peer::Zcnet;
    let sm = Peer::Smoltcp;
    let e = Peer::Embassy;
    println!(
        "\n## TAP benchmark ({}; medians of {} runs, min–max in brackets)\n",
        mode.label(),
        plan.runs
    );
    println!("### Raw TAP frame ceiling (1514-byte frames, no stack)\n");
    let mut t = Table::new(&[
        "direction",
        "frames/s (wall)",
        "frames per CPU-second of the blaster",
        "as TCP payload MB/s (×1460 B): wall / per CPU-s",
    ]);
    let tx = s.get("ceiling tx", Peer::Raw, "frames/s");
    let rx = s.get("ceiling rx", Peer::Raw, "frames/s");
    let txc = s.get("ceiling tx", Peer::Raw, "frames/cpu-s");
    let rxc = s.get("ceiling rx", Peer::Raw, "frames/cpu-s");
    for (label, w, c) in [
        (
            "stack → Linux (written to the fd, delivered to a UDP socket)",
            tx,
            txc,
        ),
        ("Linux → stack (UDP GSO sends, read from the fd)", rx, rxc),
    ] {
        t.row(vec![
            label.into(),
            fmt_med(w, 0),
            fmt_med(c, 0),
            format!("{:.1} / {:.1}", w.med * 1460.0 / 1e6, c.med * 1460.0 / 1e6),
        ]);
    }
    print!("{}", t.to_markdown());
    println!(
        "\n(Linux delivered {:.1}% of the frames the blaster wrote.)\n",
        s.get("ceiling tx", Peer::Raw, "delivered share").med * 100.0
    );

    println!(
        "### TCP bulk throughput, MB/s (10^6 B/s), {} MB per run\n",
        plan.bulk_bytes / 1_000_000
    );
    let mut t = Table::new(&[
        "direction",
        "zcnet",
        "zcnet, no offloads",
        "smoltcp",
        "embassy-net",
        "zcnet / smoltcp",
        "zcnet / embassy",
        "no offloads: zcnet / smoltcp, / embassy",
        "zcnet share of ceiling: wall / per CPU-s",
    ]);
    for (dir, label, ceil, ceil_cpu) in [
        (sink_work(), "Linux → stack", rx.med, rxc.med),
        ("bulk source", "stack → Linux", tx.med, txc.med),
    ] {
        let (a, p, b, c) = (
            s.get(dir, z, "MB/s"),
            s.get(dir, Peer::ZcnetPlain, "MB/s"),
            s.get(dir, sm, "MB/s"),
            s.get(dir, e, "MB/s"),
        );
        t.row(vec![
            label.into(),
            fmt_med(a, 1),
            fmt_med(p, 1),
            fmt_med(b, 1),
            fmt_med(c, 1),
            ratio(a.med, b.med),
            ratio(a.med, c.med),
            format!("{}, {}", ratio(p.med, b.med), ratio(p.med, c.med)),
            format!(
                "{:.0}% / {:.0}%",
                a.med / (ceil * 1460.0 / 1e6) * 100.0,
                a.med / (ceil_cpu * 1460.0 / 1e6) * 100.0
            ),
        ]);
    }
    print!("{}", t.to_markdown());

    println!(
        "\n### CPU and context switches per GB (bulk; the stack's process, all its threads)\n"
    );
    let mut t = Table::new(&[
        "direction",
        "peer",
        "stack CPU s/GB",
        "Linux client CPU s/GB",
        "ctx switches/GB (voluntary)",
        "loop turns/MB",
        "polls/MB",
    ]);
    for (dir, label) in [
        (sink_work(), "Linux → stack"),
        ("bulk source", "stack → Linux"),
    ] {
        for p in BULK_PEERS {
            t.row(vec![
                label.into(),
                p.name().into(),
                fmt_med(s.get(dir, p, "cpu s/GB"), 2),
                fmt_med(s.get(dir, p, "client cpu s/GB"), 2),
                format!(
                    "{:.0} ({:.0})",
                    s.get(dir, p, "csw/GB").med,
                    s.get(dir, p, "vcsw/GB").med
                ),
                format!("{:.1}", s.get(dir, p, "turns/MB").med),
                format!("{:.1}", s.get(dir, p, "polls/MB").med),
            ]);
        }
    }
    print!("{}", t.to_markdown());
    let mut t = Table::new(&[
        "direction",
        "zcnet / embassy CPU per GB",
        "zcnet / smoltcp CPU per GB",
        "no offloads: zcnet / embassy, / smoltcp CPU per GB",
    ]);
    for (dir, label) in [
        (sink_work(), "Linux → stack"),
        ("bulk source", "stack → Linux"),
    ] {
        let a = s.get(dir, z, "cpu s/GB").med;
        let p = s.get(dir, Peer::ZcnetPlain, "cpu s/GB").med;
        let (pe, ps) = (
            s.get(dir, e, "cpu s/GB").med,
            s.get(dir, sm, "cpu s/GB").med,
        );
        t.row(vec![
            label.into(),
            ratio(a, pe),
            ratio(a, ps),
            format!("{}, {}", ratio(p, pe), ratio(p, ps)),
        ]);
    }
    println!();
    print!("{}", t.to_markdown());

    println!(
        "\n### HTTP/1.1 requests per second (wrk, {} s per run, medians of {} runs, 13-byte body)\n",
        plan.http_secs, plan.http_runs
    );
    let mut t = Table::new(&[
        "connections",
        "mode",
        "zcnet",
        "smoltcp",
        "embassy-net",
        "zcnet / embassy",
        "zcnet / smoltcp",
        "stack CPU µs/req z / s / e",
        "wrk errors z / s / e",
    ]);
    for &c in plan.http_conns {
        for mode in ["keep-alive", "close"] {
            let work = format!("http c={c} {mode}");
            let (a, b, d) = (
                s.get(&work, z, "rps"),
                s.get(&work, sm, "rps"),
                s.get(&work, e, "rps"),
            );
            t.row(vec![
                c.to_string(),
                mode.into(),
                fmt_med(a, 0),
                fmt_med(b, 0),
                fmt_med(d, 0),
                ratio(a.med, d.med),
                ratio(a.med, b.med),
                PEERS
                    .iter()
                    .map(|&p| format!("{:.1}", s.get(&work, p, "cpu us/req").med))
                    .collect::<Vec<_>>()
                    .join(" / "),
                PEERS
                    .iter()
                    .map(|&p| format!("{:.0}", s.get(&work, p, "errors").max))
                    .collect::<Vec<_>>()
                    .join(" / "),
            ]);
        }
    }
    print!("{}", t.to_markdown());
    let (lo, hi) = (
        plan.http_conns[0],
        plan.http_conns[plan.http_conns.len() - 1],
    );
    if lo != hi {
        println!();
        for mode in ["keep-alive", "close"] {
            let f: Vec<String> = PEERS
                .iter()
                .map(|&p| {
                    let a = s.get(&format!("http c={lo} {mode}"), p, "rps").med;
                    let b = s.get(&format!("http c={hi} {mode}"), p, "rps").med;
                    format!("{} {:.2}", p.name(), b / a)
                })
                .collect();
            println!(
                "Flatness {mode}, RPS at {hi} / RPS at {lo} connections: {}",
                f.join(", ")
            );
        }
    }

    println!(
        "\n### Idle: {} idle TCP connections open, {} s window\n",
        plan.idle_conns, plan.idle_secs
    );
    let mut t = Table::new(&[
        "peer",
        "loop turns/s",
        "polls/s",
        "ctx switches/s",
        "CPU ms/s",
    ]);
    for p in PEERS {
        t.row(vec![
            p.name().into(),
            format!("{:.1}", s.get("idle", p, "turns/s").med),
            format!("{:.1}", s.get("idle", p, "polls/s").med),
            format!("{:.1}", s.get("idle", p, "csw/s").med),
            format!("{:.2}", s.get("idle", p, "cpu ms/s").med),
        ]);
    }
    print!("{}", t.to_markdown());
}

/// Where the charts go: `--svg-dir DIR` (relative paths from the workspace root, since cargo
/// runs benchmarks in the package directory), else `target/`.
fn svg_dir() -> std::path::PathBuf {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .iter()
        .position(|a| a == "--svg-dir")
        .and_then(|i| args.get(i + 1))
        .map_or_else(|| "target".into(), std::path::PathBuf::from);
    if dir.is_absolute() {
        dir
    } else {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(dir)
    }
}

/// Two bar charts of this run's medians: bulk throughput per direction (with the raw TAP
/// ceiling as TCP payload) and keep-alive requests per second per connection count.
fn charts(plan: &Plan, s: &Samples) {
    let dir = svg_dir();
    std::fs::create_dir_all(&dir).expect("create the chart directory");
    let mut bulk = zcnet_benches::svg::BarChart {
        title: "TCP bulk over TAP against Linux (medians)".into(),
        y_label: "MB/s (10^6 B/s)".into(),
        groups: vec!["Linux → stack".into(), "stack → Linux".into()],
        series: Vec::new(),
    };
    for p in BULK_PEERS {
        bulk.series.push((
            p.name().into(),
            vec![
                s.get(sink_work(), p, "MB/s").med,
                s.get("bulk source", p, "MB/s").med,
            ],
        ));
    }
    bulk.series.push((
        "raw TAP ceiling (×1460 B)".into(),
        vec![
            s.get("ceiling rx", Peer::Raw, "frames/s").med * 1460.0 / 1e6,
            s.get("ceiling tx", Peer::Raw, "frames/s").med * 1460.0 / 1e6,
        ],
    ));
    let mut rps = zcnet_benches::svg::BarChart {
        title: "HTTP/1.1 keep-alive requests per second (wrk, medians)".into(),
        y_label: "requests/s".into(),
        groups: plan
            .http_conns
            .iter()
            .map(|c| format!("{c} connections"))
            .collect(),
        series: Vec::new(),
    };
    for p in PEERS {
        rps.series.push((
            p.name().into(),
            plan.http_conns
                .iter()
                .map(|c| s.get(&format!("http c={c} keep-alive"), p, "rps").med)
                .collect(),
        ));
    }
    for (name, chart) in [("tap-bulk.svg", bulk), ("tap-rps.svg", rps)] {
        let path = dir.join(name);
        std::fs::write(&path, chart.to_svg()).expect("write a chart");
        println!("chart written to {}", path.display());
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    harness::run_child_role(&args);
    require_root_and_tun();
    assert!(
        Command::new("wrk").arg("--version").output().is_ok(),
        "the TAP benchmark needs wrk (apt-get install wrk)"
    );
    let mode = Mode::from_env();
    let plan = mode.pick(
        Plan {
            runs: 5,
            http_runs: 3,
            bulk_bytes: 200_000_000,
            blast_ms: 1000,
            http_conns: &[1, 10, 50, 100],
            http_secs: 3,
            idle_conns: 100,
            idle_secs: 5,
        },
        Plan {
            runs: 1,
            http_runs: 1,
            bulk_bytes: 20_000_000,
            blast_ms: 200,
            http_conns: &[10],
            http_secs: 1,
            idle_conns: 100,
            idle_secs: 1,
        },
    );
    let only = std::env::var("ZCNET_TAP_ONLY").unwrap_or_default();
    let want = |w: &str| only.is_empty() || only.split(',').any(|o| o == w);
    let start = Instant::now();
    let mut s = Samples::default();
    if want("bulk") {
        bulk(&plan, &mut s);
    }
    if want("http") {
        http(&plan, &mut s);
    }
    if want("idle") {
        idle(&plan, &mut s);
    }
    if only.is_empty() {
        report(&plan, mode, &s);
        charts(&plan, &s);
    } else {
        for ((w, p, m), v) in &s.0 {
            println!("{w} {} {m}: {}", p.name(), fmt_med(med(v), 2));
        }
    }
    eprintln!(
        "tap benchmark finished in {:.0} s",
        start.elapsed().as_secs_f64()
    );
}
