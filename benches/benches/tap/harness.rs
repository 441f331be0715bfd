//! The parent's side of the TAP-style benchmarks (`--bench tap`, `--bench loss`): the stack
//! processes it starts (this binary again, `--serve <peer> <class> <tap>`), the Linux side's
//! processes it runs in their namespaces, and the medians it reports. Both benchmark binaries
//! compile this directory's modules (`loss` through `#[path]`), so a stack serves the same way,
//! and the Linux client is the same, in both.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use crate::common::{Class, LINUX_MAC, STACK_MAC};
use crate::{client, emb, raw, smol, zc};
use zcnet_benches::median;
use zcnet_tests::netns::{run, Netns, LINUX_ADDR, ZCNET_ADDR};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Peer {
    Zcnet,
    /// zcnet with its TAP's offloads and receive super-segments off: 1514-byte frames with full
    /// checksums, as the other peers' (the bulk workload only).
    ZcnetPlain,
    Smoltcp,
    Embassy,
    Raw,
}

/// TIME-WAIT sockets the Linux client's namespace keeps (`net.ipv4.tcp_max_tw_buckets`; a
/// socket closing beyond it skips TIME-WAIT, counted as `TCPTimeWaitOverflow`). A
/// `Connection: close` run opens 10,000-90,000 connections; with all of them in TIME-WAIT
/// each further `connect` spends milliseconds searching the port range (see the module doc).
/// What TIME-WAIT guards against, a stray segment of an old connection landing in a new one
/// with the same ports, needs a network that delays or duplicates segments; the TAP link to
/// the stack does neither, and the benchmark measures the stacks, not Linux's port search.
pub(crate) const CLIENT_TIME_WAIT_CAP: u32 = 1024;

impl Peer {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Peer::Zcnet => "zcnet",
            Peer::ZcnetPlain => "zcnet-plain",
            Peer::Smoltcp => "smoltcp",
            Peer::Embassy => "embassy",
            Peer::Raw => "raw",
        }
    }
    pub(crate) fn parse(s: &str) -> Peer {
        match s {
            "zcnet" => Peer::Zcnet,
            "zcnet-plain" => Peer::ZcnetPlain,
            "smoltcp" => Peer::Smoltcp,
            "embassy" => Peer::Embassy,
            "raw" => Peer::Raw,
            _ => panic!("unknown peer {s}"),
        }
    }
}

pub(crate) fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// `key=value` from a line of `k=v` words.
pub(crate) fn kv(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .parse()
        .unwrap_or_else(|e| panic!("{key} in {line:?}: {e}"))
}

/// A stack process with its namespace; killed, and the namespace deleted, on drop.
pub(crate) struct Server {
    pub(crate) peer: Peer,
    pub(crate) child: Child,
    pub(crate) stdin: ChildStdin,
    pub(crate) lines: Receiver<String>,
    pub(crate) netns: Netns,
}

/// Linux-side settings of a namespace the benchmarks run Linux in: IPv6 off (no router
/// solicitations or MLD reports landing on an idle stack), ports 1024-65535 and at most
/// [`CLIENT_TIME_WAIT_CAP`] TIME-WAIT sockets.
pub(crate) fn prepare_ns(netns: &Netns) {
    run(netns.command("sh").args([
        "-c",
        &format!(
            "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 && \
             echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6 && \
             echo '1024 65535' > /proc/sys/net/ipv4/ip_local_port_range && \
             echo {CLIENT_TIME_WAIT_CAP} > /proc/sys/net/ipv4/tcp_max_tw_buckets"
        ),
    ]));
}

impl Server {
    /// Starts `peer` serving `class` on a TAP named `tap`, whose kernel side (10.77.0.1/24,
    /// [`LINUX_MAC`]) goes into `netns` once the stack has opened it; `netns` gets
    /// [`prepare_ns`]'s settings.
    pub(crate) fn start_in(peer: Peer, class: Class, netns: Netns, tap: String) -> Server {
        prepare_ns(&netns);
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .args(["--serve", peer.name(), class.name(), &tap])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the stack process");
        let stdin = child.stdin.take().unwrap();
        let lines = zcnet_benches::line_channel(vec![Box::new(child.stdout.take().unwrap())]);
        let mut s = Server {
            peer,
            child,
            stdin,
            lines,
            netns,
        };
        let first = s.line(Duration::from_secs(20));
        assert_eq!(first, "ready", "{} did not start", peer.name());
        run(Command::new("ip").args(["link", "set", "dev", &tap, "address", &mac(LINUX_MAC)]));
        s.netns.adopt(&tap, &format!("{LINUX_ADDR}/24"));
        if peer == Peer::Raw {
            s.netns.ip(&[
                "neigh",
                "replace",
                &ZCNET_ADDR.to_string(),
                "lladdr",
                &mac(STACK_MAC),
                "dev",
                &tap,
                "nud",
                "permanent",
            ]);
        }
        s
    }

    pub(crate) fn line(&mut self, limit: Duration) -> String {
        match self.lines.recv_timeout(limit) {
            Ok(l) => l,
            Err(e) => panic!(
                "{}: no answer within {limit:?} ({e}); exited: {:?}",
                self.peer.name(),
                self.child.try_wait()
            ),
        }
    }

    pub(crate) fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").expect("write to the stack process");
        self.stdin.flush().unwrap();
    }

    /// Asks the stack process for its counters: its `stats ..` line (which also shows it is
    /// still serving).
    pub(crate) fn stats_line(&mut self) -> String {
        self.send("stats");
        let l = self.line(Duration::from_secs(10));
        assert!(l.starts_with("stats "), "unexpected {l:?}");
        l
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Then `netns` drops: the namespace and the TAP in it go away.
    }
}

/// A child process killed on drop.
pub(crate) struct Kid(pub(crate) Child);

impl Drop for Kid {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Runs `program args` in `netns` to completion within `limit`; returns its stdout.
pub(crate) fn in_netns(netns: &Netns, program: &str, args: &[String], limit: Duration) -> String {
    zcnet_benches::run_within(netns.command(program).args(args), limit, || false)
        .unwrap_or_else(|e| panic!("{program} {args:?} in {}: {e}", netns.name()))
}

pub(crate) fn self_client(netns: &Netns, args: &[&str], limit: Duration) -> String {
    let exe = std::env::current_exe().expect("own path");
    let mut a = vec!["--client".to_string()];
    a.extend(args.iter().map(|s| s.to_string()));
    let out = in_netns(netns, exe.to_str().expect("utf-8 path"), &a, limit);
    out.lines()
        .find(|l| l.starts_with("result "))
        .unwrap_or_else(|| panic!("client {args:?} printed no result: {out}"))
        .to_string()
}

// ---- measurements ---------------------------------------------------------------------------

/// Median (min–max) of a list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Med {
    pub(crate) med: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

pub(crate) fn med(v: &[f64]) -> Med {
    let mut w = v.to_vec();
    Med {
        med: median(&mut w),
        min: v.iter().copied().fold(f64::INFINITY, f64::min),
        max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    }
}

pub(crate) fn fmt_med(m: Med, digits: usize) -> String {
    format!("{:.d$} ({:.d$}–{:.d$})", m.med, m.min, m.max, d = digits)
}

/// The child roles of a benchmark binary: `--client <mode> ..` (the Linux client, run inside a
/// namespace) and `--serve <peer> <class> <tap>` (a stack process). Returns only when `args`
/// asks for neither (the parent).
pub(crate) fn run_child_role(args: &[String]) {
    if let Some(i) = args.iter().position(|a| a == "--client") {
        client::main(&args[i + 1], &args[i + 2..]);
    }
    if let Some(i) = args.iter().position(|a| a == "--serve") {
        let (peer, class, tap) = (
            Peer::parse(&args[i + 1]),
            Class::parse(&args[i + 2]),
            &args[i + 3],
        );
        match peer {
            Peer::Zcnet => zc::serve(tap, class, true),
            Peer::ZcnetPlain => zc::serve(tap, class, false),
            Peer::Smoltcp => smol::serve(tap, class),
            Peer::Embassy => emb::serve(tap, class),
            Peer::Raw => raw::serve(tap),
        }
    }
}

/// `a / b` as a ratio column: `1.23x`, or three significant digits below 0.1 (`0.00107x`),
/// where two decimals would read as zero.
pub(crate) fn ratio(a: f64, b: f64) -> String {
    let r = a / b;
    if r > 0.0 && r < 0.1 {
        let decimals = 2 - r.log10().floor() as i32;
        format!("{r:.d$}x", d = decimals as usize)
    } else {
        format!("{r:.2}x")
    }
}
