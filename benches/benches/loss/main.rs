//! TCP under random loss: zcnet, plain smoltcp 0.14 and embassy-net 0.9.1 on a TAP, and Linux
//! ↔ Linux over a veth, through the same random loss each way, in one run.
//!
//! ```text
//! cargo bench -p zcnet-benches --bench loss            # full run (BENCHMARKS.md); needs root, nft, ethtool
//! cargo bench -p zcnet-benches --bench loss -- --quick # CI smoke run: 1% loss, 3 s per server
//! cargo bench -p zcnet-benches --bench loss -- --gate  # exits 1 if zcnet < 0.5x Linux at 1% loss
//! ```
//!
//! `--gate` combines with `--quick` (which then runs three times, the gate judging medians).
//!
//! For a look at one stack: `ZCNET_LOSS_ONLY=zcnet` (a server's name as the tables give it:
//! `zcnet`, `smoltcp`, `embassy-net`, `Linux`; several separated by commas) and
//! `ZCNET_LOSS_RATES=10,50` (per mille) run only those; each run's figures are printed, the
//! tables and the gate are left out. `ZCNET_SOCK_BUF=90112` gives every server's sockets
//! rings of that many bytes instead of 64 KiB (a look at how goodput follows the window).
//!
//! # Paths
//!
//! Every run gets fresh namespaces, named `zcloss-<pid>-<n>` (deleted on drop, also on panic;
//! leftovers of a killed run, whose pid is gone, are deleted at start).
//!
//! * **zcnet, smoltcp, embassy-net**: the stack in a process of its own (this binary again,
//!   `--serve <peer> echo <tap>`, the TAP benchmark's servers) on a TAP whose kernel side is in
//!   the client's namespace, 10.77.0.1/24; the stack is 10.77.0.2. 64 KiB socket rings.
//! * **Linux ↔ Linux**: a veth pair between the client's namespace (10.77.0.1/24) and a second
//!   namespace (10.77.0.2/24) where this binary runs a Linux echo server (`--client
//!   echo-server`, a thread per connection, default socket buffers).
//!
//! The client's interface (the TAP's kernel side or the client's veth end) has MTU 1500 and,
//! like the server's veth end, `ethtool -K <if> tso off gso off gro off`, so Linux sends and
//! receives segments of at most one MTU on every path.
//!
//! # Loss
//!
//! The client's namespace gets an nftables table `inet zcnet_loss` whose `input` and `output`
//! hooks each drop a packet when `numgen random mod 1000 < N` (N = 0, 1, 10, 50 for 0%, 0.1%,
//! 1%, 5%), the same rules for every server. Their counters give the share actually dropped,
//! reported beside the results. ARP is not filtered (the `inet` family sees IP only).
//!
//! What that loss is, since the client is Linux: the `input` hook drops the server's segments
//! one by one (GRO is off), a loss on the wire the server has to repair. The `output` hook sees
//! what the client's TCP hands to IP: GSO packets of up to 64 KiB (Linux's TCP builds them
//! whatever the device's offloads; the device segments them in software), so one drop there
//! takes a burst of segments; and the drop comes back to the client's TCP as a send error,
//! which keeps the data queued and sends it again as new data. So the client's data is
//! delayed there, not lost on the wire; what is lost from client to server is pure ACKs. The
//! counters count packets at the hooks (GSO packets on the way out), not frames on the wire.
//!
//! # Workload
//!
//! The echo client (`--client echo`, the same Linux program for every server) connects to port
//! [`common::ECHO_PORT`], writes a seeded pseudo-random stream from one thread and reads the
//! echo on another, checking every byte against the stream (a difference fails the benchmark).
//! Goodput = bytes checked / the run's fixed duration (10 s, 3 s in `--quick`), timed from the
//! connection's establishment; then it resets the connection. Retransmissions are counted on
//! the wire by an `AF_PACKET` capture on the client's interface (`tap/capture.rs` says what it
//! sees and misses), per sender: the server's and the Linux client's.
//!
//! Runs are interleaved: each repeat runs every loss rate, each loss rate every server.

#[path = "../tap/capture.rs"]
mod capture;
#[path = "../tap/client.rs"]
mod client;
#[path = "../tap/common.rs"]
mod common;
#[path = "../tap/echo.rs"]
mod echo;
#[path = "../tap/emb.rs"]
mod emb;
#[path = "../tap/harness.rs"]
mod harness;
#[path = "../tap/raw.rs"]
mod raw;
#[path = "../tap/smol.rs"]
mod smol;
#[path = "../tap/zc.rs"]
mod zc;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Class;
use harness::{fmt_med, kv, med, prepare_ns, ratio, self_client, Kid, Med, Peer, Server};
use zcnet_benches::{Mode, Table};
use zcnet_tests::netns::{if_name, require_root_and_tun, run, Netns, LINUX_ADDR, ZCNET_ADDR};

/// Prefix of every namespace this benchmark makes.
const NS_PREFIX: &str = "zcloss";
/// Loss each way, per mille, in the full run.
const RATES: [u32; 4] = [0, 1, 10, 50];
/// The gate's loss rate (per mille) and the least zcnet / Linux goodput ratio it accepts.
const GATE: (u32, f64) = (10, 0.5);

/// A server the echo client runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    Stack(Peer),
    Linux,
}

const WHO: [Who; 4] = [
    Who::Stack(Peer::Zcnet),
    Who::Stack(Peer::Smoltcp),
    Who::Stack(Peer::Embassy),
    Who::Linux,
];

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Stack(Peer::Embassy) => "embassy-net",
            Who::Stack(p) => p.name(),
            Who::Linux => "Linux",
        }
    }
}

/// One run's path: the client's namespace and interface, and what keeps the server alive
/// (dropped first: the stack process or Linux echo server is killed before its namespaces go).
enum Path {
    Tap {
        server: Server,
        tap: String,
    },
    Veth {
        server: Kid,
        client_ns: Netns,
        _server_ns: Netns,
        veth: String,
    },
}

impl Path {
    fn open(who: Who) -> Path {
        match who {
            Who::Stack(peer) => {
                let tap = if_name("zcl");
                let server = Server::start_in(
                    peer,
                    Class::Echo,
                    Netns::with_prefix(NS_PREFIX),
                    tap.clone(),
                );
                Path::Tap { server, tap }
            }
            Who::Linux => {
                let client_ns = Netns::with_prefix(NS_PREFIX);
                let server_ns = Netns::with_prefix(NS_PREFIX);
                prepare_ns(&client_ns);
                prepare_ns(&server_ns);
                let (veth, peer) = (if_name("zlv"), if_name("zlv"));
                client_ns.ip(&[
                    "link",
                    "add",
                    &veth,
                    "mtu",
                    "1500",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &peer,
                    "mtu",
                    "1500",
                    "netns",
                    server_ns.name(),
                ]);
                for (ns, dev, addr) in [
                    (&client_ns, &veth, LINUX_ADDR),
                    (&server_ns, &peer, ZCNET_ADDR),
                ] {
                    ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", dev]);
                    ns.ip(&["link", "set", dev, "up"]);
                }
                no_offloads(&server_ns, &peer);
                let exe = std::env::current_exe().expect("own path");
                let mut server = Kid(server_ns
                    .command(exe.to_str().expect("utf-8 path"))
                    .args(["--client", "echo-server"])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("the Linux echo server"));
                let mut l = String::new();
                BufReader::new(server.0.stdout.take().unwrap())
                    .read_line(&mut l)
                    .expect("the echo server's ready");
                assert_eq!(l.trim(), "ready", "Linux echo server: {l}");
                Path::Veth {
                    server,
                    client_ns,
                    _server_ns: server_ns,
                    veth,
                }
            }
        }
    }

    /// The client's namespace and its interface on the path.
    fn client_side(&self) -> (&Netns, &str) {
        match self {
            Path::Tap { server, tap } => (&server.netns, tap),
            Path::Veth {
                client_ns, veth, ..
            } => (client_ns, veth),
        }
    }

    /// Panics unless the server is still serving: a stack process answers its `stats`
    /// query, the Linux echo server still runs.
    fn check_server(&mut self, who: Who) {
        match self {
            Path::Tap { server, .. } => {
                server.stats_line();
            }
            Path::Veth { server, .. } => assert!(
                matches!(server.0.try_wait(), Ok(None)),
                "{} exited during the run",
                who.name()
            ),
        }
    }
}

fn no_offloads(ns: &Netns, dev: &str) {
    run(ns
        .command("ethtool")
        .args(["-K", dev, "tso", "off", "gso", "off", "gro", "off"]));
}

/// Drops `per_mille` of the packets each way in `ns` (see the module doc), with counters.
fn add_loss(ns: &Netns, per_mille: u32) {
    let rules = format!(
        "table inet zcnet_loss {{\n\
         chain input {{ type filter hook input priority 0; policy accept; counter; \
         numgen random mod 1000 < {per_mille} counter drop; }}\n\
         chain output {{ type filter hook output priority 0; policy accept; counter; \
         numgen random mod 1000 < {per_mille} counter drop; }}\n\
         }}\n"
    );
    let dir = std::env::temp_dir().join(format!("zcnet-loss-{}.nft", std::process::id()));
    std::fs::write(&dir, rules).expect("write the nft rules");
    run(ns.command("nft").args(["-f", dir.to_str().unwrap()]));
    let _ = std::fs::remove_file(&dir);
}

/// (packets, dropped) per hook, input then output, from the table's counters.
fn loss_counters(ns: &Netns) -> [(u64, u64); 2] {
    let out = run(ns
        .command("nft")
        .args(["list", "table", "inet", "zcnet_loss"]));
    let counts: Vec<u64> = out
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "packets")
        .map(|w| w[1].parse().expect("counter"))
        .collect();
    assert_eq!(counts.len(), 4, "nft counters: {out}");
    [(counts[0], counts[1]), (counts[2], counts[3])]
}

/// Deletes namespaces this benchmark made in runs whose process is gone.
fn remove_leftovers() {
    let list = run(Command::new("ip").args(["netns", "list"]));
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = name
            .strip_prefix(NS_PREFIX)
            .and_then(|r| r.strip_prefix('-'))
            .and_then(|r| r.split('-').next())
        else {
            continue;
        };
        if !std::path::Path::new("/proc").join(pid).exists() {
            eprintln!("removing namespace {name}, left by an earlier run");
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
}

struct Plan {
    rates: &'static [u32],
    secs: u64,
    repeats: usize,
}

/// One run's figures.
#[derive(Default)]
struct Run {
    mbps: f64,
    server_segs: f64,
    server_retx: f64,
    client_segs: f64,
    client_retx: f64,
    drops: f64,
    /// Share of packets dropped, input / output hook.
    lost_in: f64,
    lost_out: f64,
}

fn one_run(who: Who, per_mille: u32, secs: u64, seed: u64) -> Run {
    let mut path = Path::open(who);
    let (ns, dev) = path.client_side();
    no_offloads(ns, dev);
    add_loss(ns, per_mille);
    let r = self_client(
        ns,
        &["echo", &secs.to_string(), &seed.to_string(), dev],
        Duration::from_secs(secs + 60),
    );
    let [(pin, din), (pout, dout)] = loss_counters(ns);
    path.check_server(who);
    let f = |k| kv(&r, k) as f64;
    Run {
        mbps: f("bytes") / f("ns") * 1e3,
        server_segs: f("server_segs"),
        server_retx: f("server_retx"),
        client_segs: f("client_segs"),
        client_retx: f("client_retx"),
        drops: f("drops"),
        lost_in: din as f64 / pin.max(1) as f64,
        lost_out: dout as f64 / pout.max(1) as f64,
    }
}

fn pct(per_mille: u32) -> String {
    format!("{}%", f64::from(per_mille) / 10.0)
}

/// A figure's median (min–max) over the runs of one loss rate and server.
type Get<'a> = dyn Fn(u32, Who, fn(&Run) -> f64) -> Med + 'a;

fn goodput_table(rates: &[u32], get: &Get) -> Table {
    let mut t = Table::new(&[
        "loss each way",
        "zcnet",
        "smoltcp",
        "embassy-net",
        "Linux ↔ Linux",
        "zcnet / Linux",
        "zcnet / smoltcp",
        "zcnet / embassy-net",
    ]);
    for &rate in rates {
        let m: Vec<Med> = WHO.iter().map(|&w| get(rate, w, |r| r.mbps)).collect();
        let mut row = vec![pct(rate)];
        row.extend(m.iter().map(|&x| fmt_med(x, 2)));
        row.push(ratio(m[0].med, m[3].med));
        row.push(ratio(m[0].med, m[1].med));
        row.push(ratio(m[0].med, m[2].med));
        t.row(row);
    }
    t
}

fn retx_table(rates: &[u32], get: &Get) -> Table {
    let share = |a: f64, b: f64| format!("{:.0} / {:.0} ({:.2}%)", a, b, a / b.max(1.0) * 100.0);
    let mut t = Table::new(&[
        "loss each way",
        "server",
        "server's retransmitted / sent",
        "Linux client's retransmitted / sent",
        "dropped by nft: in / out",
        "frames the capture lost (most in one run)",
    ]);
    for &rate in rates {
        for who in WHO {
            t.row(vec![
                pct(rate),
                who.name().into(),
                share(
                    get(rate, who, |r| r.server_retx).med,
                    get(rate, who, |r| r.server_segs).med,
                ),
                share(
                    get(rate, who, |r| r.client_retx).med,
                    get(rate, who, |r| r.client_segs).med,
                ),
                format!(
                    "{:.2}% / {:.2}%",
                    get(rate, who, |r| r.lost_in).med * 100.0,
                    get(rate, who, |r| r.lost_out).med * 100.0
                ),
                format!("{:.0}", get(rate, who, |r| r.drops).max),
            ]);
        }
    }
    t
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    harness::run_child_role(&args);
    require_root_and_tun();
    for (tool, pkg) in [("nft", "nftables"), ("ethtool", "ethtool")] {
        assert!(
            Command::new(tool).arg("--version").output().is_ok(),
            "the loss benchmark needs {tool} (apt-get install {pkg})"
        );
    }
    remove_leftovers();
    let mode = Mode::from_env();
    let gate = args.iter().any(|a| a == "--gate");
    let plan = mode.pick(
        Plan {
            rates: &RATES,
            secs: 10,
            repeats: 3,
        },
        Plan {
            rates: &[GATE.0],
            secs: 3,
            // A gate decides on medians of three runs: one 3 s run is too noisy to fail CI on.
            repeats: if gate { 3 } else { 1 },
        },
    );
    let only = std::env::var("ZCNET_LOSS_ONLY").ok();
    let picked_rates: Option<Vec<u32>> = std::env::var("ZCNET_LOSS_RATES").ok().map(|v| {
        v.split(',')
            .map(|r| {
                r.trim()
                    .parse()
                    .expect("ZCNET_LOSS_RATES: per mille, comma-separated")
            })
            .collect()
    });
    let filtered = only.is_some() || picked_rates.is_some();
    let rates: Vec<u32> = picked_rates.unwrap_or_else(|| plan.rates.to_vec());
    let who: Vec<Who> = WHO
        .into_iter()
        .filter(|w| {
            only.as_ref()
                .is_none_or(|o| o.split(',').any(|n| n.trim() == w.name()))
        })
        .collect();
    assert!(!who.is_empty(), "ZCNET_LOSS_ONLY names no server");
    let start = Instant::now();
    let mut runs: BTreeMap<(u32, Who), Vec<Run>> = BTreeMap::new();
    for rep in 0..plan.repeats {
        for &rate in &rates {
            // The same stream for every server at this rate and repeat.
            let seed = 0x6c6f_7373_0000 + (rep as u64) * 1000 + u64::from(rate);
            for &who in &who {
                let r = one_run(who, rate, plan.secs, seed);
                eprintln!(
                    "run {rep} loss {} {}: {:.2} MB/s, retransmitted: server {} of {}, client {} of {}, dropped in {:.2}% out {:.2}%",
                    pct(rate),
                    who.name(),
                    r.mbps,
                    r.server_retx,
                    r.server_segs,
                    r.client_retx,
                    r.client_segs,
                    r.lost_in * 100.0,
                    r.lost_out * 100.0
                );
                runs.entry((rate, who)).or_default().push(r);
            }
        }
    }
    if filtered {
        eprintln!(
            "loss benchmark (filtered) finished in {:.0} s",
            start.elapsed().as_secs_f64()
        );
        return;
    }
    let get = |rate: u32, who: Who, f: fn(&Run) -> f64| {
        med(&runs[&(rate, who)].iter().map(f).collect::<Vec<_>>())
    };
    println!(
        "\n## TCP under random loss ({}; {} s per run, medians of {} runs, min–max in brackets)\n",
        mode.label(),
        plan.secs,
        plan.repeats
    );
    println!(
        "### Echo goodput, MB/s (10^6 B/s of echoed bytes checked)\n\n{}",
        goodput_table(plan.rates, &get).to_markdown()
    );
    println!(
        "### Retransmitted data segments per run, on the wire (medians; share of the sender's data segments)\n\n{}",
        retx_table(plan.rates, &get).to_markdown()
    );
    let z = get(GATE.0, Who::Stack(Peer::Zcnet), |r| r.mbps).med;
    let l = get(GATE.0, Who::Linux, |r| r.mbps).med;
    let verdict = if z >= GATE.1 * l { "met" } else { "missed" };
    println!(
        "\nTarget at {} loss: zcnet ≥ {}x Linux ↔ Linux: {verdict} ({})",
        pct(GATE.0),
        GATE.1,
        ratio(z, l)
    );
    eprintln!(
        "loss benchmark finished in {:.0} s",
        start.elapsed().as_secs_f64()
    );
    if gate && verdict == "missed" {
        eprintln!(
            "--gate: zcnet below {}x Linux at {} loss",
            GATE.1,
            pct(GATE.0)
        );
        std::process::exit(1);
    }
}
