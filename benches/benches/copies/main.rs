//! Copies per request: how many `memcpy` / `memmove` calls, and how many bytes, one request
//! costs in zcnet, in plain smoltcp 0.14 and in embassy-net 0.9.1, measured in the same process
//! run, plus what zcnet's own copy ledger recorded.
//!
//! ```text
//! cargo bench -p zcnet-benches --bench copies                 # full run (BENCHMARKS.md)
//! cargo bench -p zcnet-benches --bench copies -- --quick      # CI smoke run
//! cargo bench -p zcnet-benches --bench copies -- --svg PATH   # chart path (from the workspace root)
//! ```
//!
//! # Method
//!
//! This binary defines `memcpy` and `memmove` itself ([`count`]), so every call of them that the
//! compiler did not inline — in zcnet, smoltcp, embassy-net, the Rust standard library and this
//! benchmark — is counted, with its length, under the window (which leg of the exchange: client
//! → server or server → client) and the scope (which host, which layer) it happened in. A
//! self-test first proves that a 4096-byte `copy_from_slice` is seen. Not seen: copies the
//! compiler inlined (small copies of a size known at compile time), copies inside the C
//! library, `memset`. That limitation is the same for every peer. The ArceOS lwIP report
//! counted the same way (inside `memcpy`).
//!
//! Layers: **app** (the application and the socket calls it makes), **stack** (zcnet's ingress
//! and egress tasks, smoltcp's `iface.poll`, embassy-net's runner) and **device** (the link
//! between the two hosts). Copies by app or stack code that read or write the device's frame
//! memory (zcnet's pools, the link's buffers) are also counted apart as *device-buffer copies*:
//! the payload moving between the device buffer and a socket buffer or the application. The device column is reported apart: zcnet's in-memory wire copies
//! each frame once into the receiver's pool (it plays the receiving NIC's DMA), while the link
//! written here for smoltcp and embassy-net lends the sender's buffer to the receiver (no copy).
//! So the comparison is on app + stack copies; device copies are shown, not added.
//!
//! # Workloads (both ends in this process)
//!
//! UDP request/response with 64 B and 1 KiB payloads; TCP request/response 1 KiB / 1 KiB; HTTP
//! GET of a 1 KiB body (a 77-byte GET, a 105-byte header plus 1 KiB body back; the connection
//! stays open across requests, set-up is not counted); TCP bulk 1 MiB (counted per MiB).
//! Applications produce and verify every payload byte from a generator without `memcpy`
//! ([`app`]), so the only copies are those of the API and the stack. Same socket buffers on
//! every peer (TCP 16 KiB rings; UDP 16 packets / 16 KiB), same 1514-byte Ethernet frames,
//! software checksums everywhere, Nagle off for request/response, virtual time everywhere.
//!
//! # Peers, each with two APIs
//!
//! * zcnet: `read_with`/`write_with` (in place) and `read`/`write` (copy); UDP on the zero-copy
//!   `datagram::DatagramSocket`: the application produces the payload in the `TxFrame` and
//!   verifies it in `Datagram::payload()` (in place), or copies it from its own buffer into the
//!   frame and out of the payload into its own buffer (copy: one copy each way, the least an
//!   application with its own buffers makes).
//! * zcnet `udp::UdpSocket` (UDP only): smoltcp's socket behind zcnet, `recv_from_with`/
//!   `send_to_with` (in place) and `recv_from`/`send_to` (copy).
//! * smoltcp 0.14: closures `recv(|buf| ..)`/`send(|buf| ..)`, UDP `recv()`/`send_with` (in
//!   place) and `recv_slice`/`send_slice` (copy, as its examples do).
//! * embassy-net 0.9.1: `read_with`/`write_with`, `recv_from_with`/`send_to_with` (in place) and
//!   `read`/`write`, `recv_from`/`send_to` (copy).

mod app;
mod count;
mod emb;
mod link;
mod smol;
mod zc;

use app::{Api, Kind, Workload};
use count::{Counts, Host, Layer, Scope, Window};
use zcnet_benches::svg::BarChart;
use zcnet_benches::{median, Mode, Table};
use zcnet_buffer::ledger::{CopySite, LedgerSnapshot};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stack {
    Zcnet,
    /// zcnet with its smoltcp-backed `udp::UdpSocket` (UDP workloads only).
    ZcnetUdpSocket,
    Smoltcp,
    Embassy,
}

#[derive(Clone, Copy, Debug)]
struct Peer {
    stack: Stack,
    api: Api,
}

const PEERS: [Peer; 8] = [
    Peer {
        stack: Stack::Zcnet,
        api: Api::InPlace,
    },
    Peer {
        stack: Stack::Zcnet,
        api: Api::Copy,
    },
    Peer {
        stack: Stack::ZcnetUdpSocket,
        api: Api::InPlace,
    },
    Peer {
        stack: Stack::ZcnetUdpSocket,
        api: Api::Copy,
    },
    Peer {
        stack: Stack::Smoltcp,
        api: Api::InPlace,
    },
    Peer {
        stack: Stack::Smoltcp,
        api: Api::Copy,
    },
    Peer {
        stack: Stack::Embassy,
        api: Api::InPlace,
    },
    Peer {
        stack: Stack::Embassy,
        api: Api::Copy,
    },
];

impl Peer {
    fn name(self) -> &'static str {
        match (self.stack, self.api) {
            (Stack::Zcnet, Api::InPlace) => "zcnet in place",
            (Stack::Zcnet, Api::Copy) => "zcnet copy",
            (Stack::ZcnetUdpSocket, Api::InPlace) => "zcnet udp::UdpSocket in place",
            (Stack::ZcnetUdpSocket, Api::Copy) => "zcnet udp::UdpSocket copy",
            (Stack::Smoltcp, Api::InPlace) => "smoltcp closures",
            (Stack::Smoltcp, Api::Copy) => "smoltcp slices",
            (Stack::Embassy, Api::InPlace) => "embassy-net in place",
            (Stack::Embassy, Api::Copy) => "embassy-net copy",
        }
    }

    /// Whether this peer runs workload `w` (the `udp::UdpSocket` rows: UDP only).
    fn runs(self, w: Workload) -> bool {
        self.stack != Stack::ZcnetUdpSocket || w.kind == Kind::Udp
    }

    fn is_zcnet(self) -> bool {
        matches!(self.stack, Stack::Zcnet | Stack::ZcnetUdpSocket)
    }

    fn run(self, w: Workload) {
        match self.stack {
            Stack::Zcnet => zc::run(w, self.api, zc::UdpImpl::Datagram),
            Stack::ZcnetUdpSocket => zc::run(w, self.api, zc::UdpImpl::SmoltcpSocket),
            Stack::Smoltcp => smol::run(w, self.api),
            Stack::Embassy => emb::run(w, self.api),
        }
    }
}

/// Per-request figures of one run.
#[derive(Clone, Copy, Debug, Default)]
struct Figures {
    /// [window]: app + stack copies of both hosts.
    calls: [f64; 2],
    bytes: [f64; 2],
    /// [window]: app + stack bytes of the sending host and of the receiving host.
    sender: [f64; 2],
    receiver: [f64; 2],
    /// [window]: app + stack copies of at least the message's length ("payload-sized").
    large: [f64; 2],
    /// [window]: app + stack copies that read or wrote a device buffer, both hosts.
    dev_calls: [f64; 2],
    dev_bytes: [f64; 2],
    /// [window]: device-buffer bytes of the sending host and of the receiving host.
    dev_sender: [f64; 2],
    dev_receiver: [f64; 2],
    device_calls: f64,
    device_bytes: f64,
    other_calls: f64,
    other_bytes: f64,
    ledger_calls: f64,
    ledger_bytes: f64,
    /// zcnet's ledger: bytes copied again for retransmissions.
    retransmit_bytes: f64,
    /// App + stack copies by length: (length, calls per request), most bytes first, top 4.
    top_sizes: [(usize, f64); 4],
}

/// App + stack of host `h` in window `w`: (calls, bytes, payload-sized calls,
/// device-buffer calls, device-buffer bytes).
fn app_stack(c: &Counts, w: Window, h: Host) -> (u64, u64, u64, u64, u64) {
    let (app, stack) = (Scope::of(h, Layer::App), Scope::of(h, Layer::Stack));
    let a = c.get(w, app);
    let s = c.get(w, stack);
    let large = c.large(w, app) + c.large(w, stack);
    let (da, ds) = (c.device_buffer(w, app), c.device_buffer(w, stack));
    (a.0 + s.0, a.1 + s.1, large, da.0 + ds.0, da.1 + ds.1)
}

fn figures(c: &Counts, ledger: &LedgerSnapshot, requests: u64) -> Figures {
    let n = requests as f64;
    let mut f = Figures::default();
    for (i, w) in [Window::C2s, Window::S2c].into_iter().enumerate() {
        let (sender, receiver) = match w {
            Window::C2s => (Host::Client, Host::Server),
            Window::S2c => (Host::Server, Host::Client),
        };
        let s = app_stack(c, w, sender);
        let r = app_stack(c, w, receiver);
        f.calls[i] = (s.0 + r.0) as f64 / n;
        f.bytes[i] = (s.1 + r.1) as f64 / n;
        f.sender[i] = s.1 as f64 / n;
        f.receiver[i] = r.1 as f64 / n;
        f.large[i] = (s.2 + r.2) as f64 / n;
        f.dev_calls[i] = (s.3 + r.3) as f64 / n;
        f.dev_bytes[i] = (s.4 + r.4) as f64 / n;
        f.dev_sender[i] = s.4 as f64 / n;
        f.dev_receiver[i] = r.4 as f64 / n;
    }
    for h in [Host::Client, Host::Server] {
        let d = c.both(Scope::of(h, Layer::Device));
        f.device_calls += d.0 as f64 / n;
        f.device_bytes += d.1 as f64 / n;
    }
    let o = c.both(Scope::OTHER);
    f.other_calls = o.0 as f64 / n;
    f.other_bytes = o.1 as f64 / n;
    f.ledger_calls = ledger.user_calls() as f64 / n;
    f.ledger_bytes = ledger.user_bytes() as f64 / n;
    f.retransmit_bytes = ledger.bytes(CopySite::Retransmit) as f64 / n;
    f
}

/// One run of `peer` on `w`: per-request figures.
fn measure(peer: Peer, w: Workload) -> Figures {
    count::reset_run();
    // "Payload-sized": at least the smaller message of the exchange (bulk: a full frame's
    // payload, as a 1 MiB message never moves in one copy).
    let large = match w.kind {
        Kind::Bulk => 1460,
        _ => w.req.len().min(w.resp.len()),
    };
    count::set_large(large);
    let before = Counts::now();
    let sizes_before = count::sizes_now();
    peer.run(w);
    count::stop();
    let d = Counts::now().since(&before);
    let mut sizes: Vec<(usize, u64)> = count::sizes_now()
        .iter()
        .zip(&sizes_before)
        .enumerate()
        .map(|(len, (a, b))| (len, a - b))
        .filter(|&(_, c)| c > 0)
        .collect();
    sizes.sort_by_key(|&(len, c)| std::cmp::Reverse(len.max(1) as u64 * c));
    assert!(
        count::single_threaded(),
        "a second thread appeared during {} / {}",
        w.name,
        peer.name()
    );
    let mut f = figures(&d, &count::ledger_delta(), w.requests);
    for (slot, &(len, c)) in f.top_sizes.iter_mut().zip(&sizes) {
        *slot = (len, c as f64 / w.requests as f64);
    }
    f
}

/// The median of each figure over the runs.
fn median_figures(runs: &[Figures]) -> Figures {
    let m = |f: &dyn Fn(&Figures) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
    let mut out = Figures::default();
    for i in 0..2 {
        out.calls[i] = m(&|r| r.calls[i]);
        out.bytes[i] = m(&|r| r.bytes[i]);
        out.sender[i] = m(&|r| r.sender[i]);
        out.receiver[i] = m(&|r| r.receiver[i]);
        out.large[i] = m(&|r| r.large[i]);
        out.dev_calls[i] = m(&|r| r.dev_calls[i]);
        out.dev_bytes[i] = m(&|r| r.dev_bytes[i]);
        out.dev_sender[i] = m(&|r| r.dev_sender[i]);
        out.dev_receiver[i] = m(&|r| r.dev_receiver[i]);
    }
    out.device_calls = m(&|r| r.device_calls);
    out.device_bytes = m(&|r| r.device_bytes);
    out.other_calls = m(&|r| r.other_calls);
    out.other_bytes = m(&|r| r.other_bytes);
    out.ledger_calls = m(&|r| r.ledger_calls);
    out.ledger_bytes = m(&|r| r.ledger_bytes);
    out.retransmit_bytes = m(&|r| r.retransmit_bytes);
    // Runs are deterministic (virtual time, fixed seeds); the size profile is the first run's.
    out.top_sizes = runs[0].top_sizes;
    out
}

/// Bytes per payload byte, "—" without payload.
fn per_payload(bytes: f64, payload: usize) -> String {
    if payload == 0 {
        "—".into()
    } else {
        format!("{:.2}", bytes / payload as f64)
    }
}

/// Where the chart goes: `--svg PATH` (relative paths from the workspace root, since cargo runs
/// benchmarks in the package directory), else `target/copies-per-request.svg`.
fn svg_path() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .iter()
        .position(|a| a == "--svg")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "target/copies-per-request.svg".into());
    root.join(path)
}

fn main() {
    let mode = Mode::from_env();
    let quick = mode == Mode::Quick;
    let runs = mode.pick(3, 1);
    // Before any embassy code: embassy-net runs on virtual time here (no alarm thread).
    zcnet_benches::embassy_clock::use_virtual_time();
    count::self_test();
    assert!(
        count::single_threaded(),
        "the counters are process-wide: the benchmark must run on one thread"
    );
    println!(
        "interposer self-test passed: a 4096-byte copy_from_slice counted as 1 memcpy of 4096 \
         bytes; two overlapping copy_within as 2 memmove"
    );
    println!(
        "zcnet UDP measured through the zero-copy datagram::DatagramSocket (rows \"zcnet ..\") \
         and through the smoltcp-backed udp::UdpSocket (rows \"zcnet udp::UdpSocket ..\")"
    );
    println!();

    let works = app::workloads(quick);
    let mut results: Vec<(Workload, Vec<(Peer, Figures)>)> = Vec::new();
    for &w in &works {
        let peers: Vec<Peer> = PEERS.iter().copied().filter(|p| p.runs(w)).collect();
        let mut per_peer: Vec<Vec<Figures>> = vec![Vec::new(); peers.len()];
        for _ in 0..runs {
            for (k, &p) in peers.iter().enumerate() {
                per_peer[k].push(measure(p, w));
            }
        }
        results.push((
            w,
            peers
                .iter()
                .zip(per_peer)
                .map(|(&p, f)| (p, median_figures(&f)))
                .collect(),
        ));
    }

    let mut t = Table::new(&[
        "workload",
        "peer (API)",
        "c→s copies",
        "c→s bytes",
        "c→s B per payload B (sender + receiver)",
        "s→c copies",
        "s→c bytes",
        "s→c B per payload B (sender + receiver)",
        "total copies",
        "total bytes",
        "payload-sized copies c→s / s→c",
        "device-buffer copies by app + stack c→s / s→c (bytes)",
        "device copies (bytes), not in totals",
        "zcnet ledger copies (bytes)",
    ]);
    for (w, rows) in &results {
        for (p, f) in rows {
            let split = |i: usize, payload: usize| {
                if payload == 0 {
                    "—".to_string()
                } else {
                    format!(
                        "{} ({} + {})",
                        per_payload(f.bytes[i], payload),
                        per_payload(f.sender[i], payload),
                        per_payload(f.receiver[i], payload)
                    )
                }
            };
            t.row(vec![
                w.name.into(),
                p.name().into(),
                format!("{:.1}", f.calls[0]),
                format!("{:.0}", f.bytes[0]),
                split(0, w.c2s()),
                format!("{:.1}", f.calls[1]),
                format!("{:.0}", f.bytes[1]),
                split(1, w.s2c()),
                format!("{:.1}", f.calls[0] + f.calls[1]),
                format!("{:.0}", f.bytes[0] + f.bytes[1]),
                format!("{:.1} / {:.1}", f.large[0], f.large[1]),
                format!(
                    "{:.1} ({:.0}) / {:.1} ({:.0})",
                    f.dev_calls[0], f.dev_bytes[0], f.dev_calls[1], f.dev_bytes[1]
                ),
                format!("{:.1} ({:.0})", f.device_calls, f.device_bytes),
                if p.is_zcnet() {
                    format!("{:.1} ({:.0})", f.ledger_calls, f.ledger_bytes)
                } else {
                    "—".into()
                },
            ]);
        }
    }
    println!(
        "Copies per request ({}; {runs} run(s) per cell, medians; per request = per exchange, \
         bulk: per MiB; app + stack copies of both hosts; device copies apart)",
        mode.label()
    );
    println!();
    print!("{}", t.to_markdown());
    println!();
    let mut sizes = Table::new(&[
        "workload",
        "peer (API)",
        "largest app + stack copies by bytes: length × calls per request",
    ]);
    for (w, rows) in &results {
        for (p, f) in rows {
            let cells: Vec<String> = f
                .top_sizes
                .iter()
                .filter(|&&(_, c)| c > 0.0)
                .map(|&(len, c)| {
                    let len = if len == count::SIZE_CAP {
                        format!("≥{len} B")
                    } else {
                        format!("{len} B")
                    };
                    format!("{len} × {c:.2}")
                })
                .collect();
            sizes.row(vec![w.name.into(), p.name().into(), cells.join(", ")]);
        }
    }
    println!("Where the bytes go (all hosts and windows, device excluded):");
    println!();
    print!("{}", sizes.to_markdown());
    println!();
    println!(
        "sizes of zcnet's frame leases: TxFrame {} B, RxFrame {} B",
        std::mem::size_of::<zcnet_buffer::TxFrame>(),
        std::mem::size_of::<zcnet_buffer::RxFrame>()
    );
    println!();
    let other: f64 = results
        .iter()
        .flat_map(|(_, r)| r.iter().map(|(_, f)| f.other_calls))
        .fold(0.0, f64::max);
    println!(
        "copies outside every scope (executor loops, harness): at most {other:.2} per request \
         in any cell"
    );
    println!();

    // Targets.
    let find = |name: &str, p: &str| -> (Workload, Figures) {
        let (w, rows) = results
            .iter()
            .find(|(w, _)| w.name == name)
            .expect("workload");
        let f = rows.iter().find(|(q, _)| q.name() == p).expect("peer").1;
        (*w, f)
    };
    println!("Targets:");
    // Targets zcnet meets today; a run that finds one missed exits non-zero, so the CI smoke run
    // catches a regression (e.g. the 256-byte `Packet` copy that `StepDevice::tx_frame`'s
    // `#[inline(never)]` removes, which shows in "every app + stack copy" below).
    let mut regressions: Vec<String> = Vec::new();
    let per = |b: f64, payload: usize| per_payload(b, payload);
    for name in ["UDP 64 B", "UDP 1 KiB"] {
        let (w, f) = find(name, "zcnet in place");
        let ok = f.dev_calls == [0.0, 0.0] && f.ledger_calls == 0.0;
        println!(
            "- zcnet datagrams copy 0 payload bytes in user space between device buffer and app, \
             both directions — {name}, zcnet in place: {} (device-buffer copies by app + stack \
             per request c→s {:.1} ({:.0} B), s→c {:.1} ({:.0} B); ledger {:.1} ({:.0} B); all \
             app + stack bytes per payload byte c→s {}, s→c {}; payload-sized copies c→s {:.1}, \
             s→c {:.1})",
            if ok {
                "met"
            } else {
                regressions.push(format!("{name}: zcnet in place copies datagram bytes"));
                "MISSED"
            },
            f.dev_calls[0],
            f.dev_bytes[0],
            f.dev_calls[1],
            f.dev_bytes[1],
            f.ledger_calls,
            f.ledger_bytes,
            per(f.bytes[0], w.c2s()),
            per(f.bytes[1], w.s2c()),
            f.large[0],
            f.large[1],
        );
        for p in [
            "zcnet copy",
            "zcnet udp::UdpSocket in place",
            "zcnet udp::UdpSocket copy",
        ] {
            let (_, f) = find(name, p);
            println!(
                "    {name}, {p}: device-buffer bytes per payload byte (sender + receiver) c→s \
                 {} + {}, s→c {} + {}; ledger {:.1} ({:.0} B)",
                per(f.dev_sender[0], w.c2s()),
                per(f.dev_receiver[0], w.c2s()),
                per(f.dev_sender[1], w.s2c()),
                per(f.dev_receiver[1], w.s2c()),
                f.ledger_calls,
                f.ledger_bytes,
            );
        }
    }
    for name in ["TCP 1 KiB / 1 KiB", "TCP bulk 1 MiB"] {
        let (w, f) = find(name, "zcnet in place");
        let (mut worst_dev, mut worst_all): (f64, f64) = (0.0, 0.0);
        for (i, payload) in [(0, w.c2s()), (1, w.s2c())] {
            if payload > 0 {
                let p = payload as f64;
                worst_dev = worst_dev
                    .max(f.dev_sender[i] / p)
                    .max(f.dev_receiver[i] / p);
                worst_all = worst_all.max(f.sender[i] / p).max(f.receiver[i] / p);
            }
        }
        // A little slack for the few non-payload copies per MiB (ACK-sized struct moves).
        if worst_dev > 1.0 || worst_all > 1.02 {
            regressions.push(format!(
                "{name}: zcnet in place copies {worst_dev:.4} device-buffer bytes and \
                 {worst_all:.2} bytes in all per payload byte on its worst path (target 1.0)"
            ));
        }
        println!(
            "- zcnet TCP at most 1.0 payload byte copied per payload byte per direction (each \
             host's TX path and RX path) — {name}, zcnet in place: {} (worst path: {worst_dev:.4} \
             device-buffer bytes, {worst_all:.2} bytes of every app + stack copy; both hosts of \
             a flow together, all bytes: c→s {}, s→c {}; ledger: {:.0} B retransmitted per \
             request)",
            if worst_dev <= 1.0 { "met" } else { "MISSED" },
            per(f.bytes[0], w.c2s()),
            per(f.bytes[1], w.s2c()),
            f.retransmit_bytes,
        );
    }
    let (_, z) = find("HTTP GET 1 KiB", "zcnet in place");
    let zb = z.bytes[0] + z.bytes[1];
    for p in [
        "smoltcp closures",
        "smoltcp slices",
        "embassy-net in place",
        "embassy-net copy",
    ] {
        let (_, f) = find("HTTP GET 1 KiB", p);
        let r = zb / (f.bytes[0] + f.bytes[1]);
        println!(
            "- bytes copied per HTTP request at most 0.5x the peer's — zcnet in place {zb:.0} vs \
             {p} {:.0}: {r:.2}x ({})",
            f.bytes[0] + f.bytes[1],
            if r <= 0.5 { "met" } else { "MISSED" }
        );
    }

    // Chart: bytes copied per payload byte, both directions, app + stack.
    let chart = BarChart {
        title: format!(
            "Bytes copied per payload byte (memcpy + memmove, app + stack, both hosts; {})",
            if quick { "QUICK run" } else { "full run" }
        ),
        y_label: "bytes copied / payload byte".into(),
        groups: results.iter().map(|(w, _)| w.name.to_string()).collect(),
        series: PEERS
            .iter()
            .map(|p| {
                (
                    p.name().to_string(),
                    results
                        .iter()
                        .map(
                            |(w, rows)| match rows.iter().find(|(q, _)| q.name() == p.name()) {
                                Some((_, f)) => {
                                    (f.bytes[0] + f.bytes[1]) / (w.c2s() + w.s2c()) as f64
                                }
                                // Not run on this workload: a gap.
                                None => f64::NAN,
                            },
                        )
                        .collect(),
                )
            })
            .collect(),
    };
    let path = svg_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("chart directory");
    }
    std::fs::write(&path, chart.to_svg()).expect("write the chart");
    println!();
    println!("chart written to {}", path.display());
    if !regressions.is_empty() {
        eprintln!("copy targets zcnet met before are missed now:");
        for r in &regressions {
            eprintln!("  {r}");
        }
        std::process::exit(1);
    }
}
