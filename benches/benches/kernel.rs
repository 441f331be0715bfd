//! The example kernel twice, under QEMU: once on zcnet, once on plain smoltcp 0.14 with its own
//! `Interface::poll` loop over a copying virtio device (the `baseline` feature of
//! `examples/qemu-kernel`), measured in one run with the same QEMU command line and reported as
//! ratios.
//!
//! ```text
//! cargo bench -p zcnet-benches --bench kernel            # full run (BENCHMARKS.md); root, QEMU
//! cargo bench -p zcnet-benches --bench kernel -- --quick # CI smoke run
//! ```
//!
//! Needs root (a network namespace and a TAP device), `/dev/net/tun`, `qemu-system-x86_64`,
//! `iperf3`, `wrk` and `curl`; without one of them it says which and exits with status 2.
//!
//! # What it does
//!
//! 1. Builds the kernel twice in `examples/qemu-kernel/` (its own cargo project):
//!    `cargo build --release` and `cargo build --release --features baseline`, from that
//!    directory, with the environment cleared of what would change the build (`RUSTFLAGS`,
//!    `CARGO_TARGET_DIR`, `CARGO_BUILD_*`, the variables cargo set for this benchmark, ...), and
//!    copies each ELF to `examples/qemu-kernel/target/kernel-bench/{zcnet,baseline}.elf`.
//! 2. Makes one network namespace (`zcnet_tests::netns::Netns`, deleted on drop, also on a
//!    panic or Ctrl-C) holding a TAP `zck0` with 10.80.0.1/24, IPv6 off (no router
//!    solicitations or MLD reports reach an idle guest). QEMU runs inside it
//!    (`ip netns exec`), attached to that TAP (`-netdev tap,ifname=zck0,script=no,downscript=no`);
//!    the guest is `ip=10.80.0.2/24 gw=10.80.0.1`. All traffic stays in the namespace.
//! 3. Boots a fresh guest for every measurement and variant, alternating zcnet and baseline
//!    measurement by measurement, `runs` times:
//!    * **TCP throughput** both ways: `iperf3 -c 10.80.0.2 -t T -J` (Linux sends) and with `-R`
//!      (the guest sends); the figure is `end.sum_received.bits_per_second`.
//!    * **HTTP requests per second**: `wrk -t 1 -c C -d T http://10.80.0.2/` at C = 1, 10, 50
//!      (keep-alive, the static page).
//!    * **copies per request**, counted in the guest by its counting `memcpy` / `memmove`
//!      (`/stats` → `copies.calls`, `copies.bytes`): `/stats` twice (s0, s1), then `N`
//!      keep-alive requests for `/` on one connection (`curl` with a URL range `/?[1-N]`; the
//!      query string is ignored by both servers), then `/stats` again (s2). The window s1→s2
//!      holds the N requests plus the tail of the `/stats` exchange that read s1 (its response
//!      being built and sent) and the head of the one that reads s2 (its connection and
//!      request); the window s0→s1 holds exactly one such pair, so per request =
//!      ((s2 − s1) − (s1 − s0)) / N. What is left is the difference between two `/stats`
//!      exchanges (a few digits of JSON), well under one request's worth in N.
//!    * **guest CPU**: around each iperf3 and wrk run the benchmark reads `/stats` and reports
//!      the share of the time the guest was not halted (`kernel.busy_ns` over
//!      `kernel.uptime_ns`), for iperf3 the guest's busy microseconds per MB received by the
//!      receiving end, and for wrk its busy microseconds per request.
//!    * **host CPU per request**: around each wrk run the QEMU process's CPU time (user and
//!      system, `/proc/<pid>/stat`, all its threads: the vCPU, the main loop with the device
//!      emulation and the TAP) over wrk's requests: the host's side of each request, including
//!      what handing work between QEMU's threads costs the host (more when they run on
//!      different CPUs, see `ZCNET_KERNEL_CPUS` below).
//!    * **where QEMU and wrk ran**: during each wrk run the benchmark reads, every
//!      millisecond, which host CPU QEMU's vCPU thread, its main loop and wrk last ran on
//!      (`/proc/<pid>/task/<tid>/stat`; QEMU names its threads, `-name debug-threads=on`) and
//!      reports the share of readings that found all three on the same CPU.
//!    * **kicks and interrupts per MB** of each iperf3 run (10^6 bytes received by the
//!      receiving end): `/stats`'s `kernel.nic.kicks` (queue notifications, counted by the
//!      transport wrapper both kernels' drivers go through) and `kernel.nic.interrupts` (NIC
//!      interrupts taken, counted by the kernel's interrupt dispatcher), read around the run. Under TCG
//!      the guest's emulated CPU is the scarce resource; these say how much of it each kernel
//!      spends for its throughput.
//!    * **idle wakeups**: a boot with `idle=S`; the guest settles for a second after `READY`,
//!      then prints `IDLE seconds=S wakeups=W timer=T device=D other=O polls=P` after S idle
//!      seconds. The window ends with a timer wakeup of its own (the measurement's deadline),
//!      counted in `W` by both kernels: the benchmark reports `W − 1` wakeups (when `T ≥ 1`),
//!      the stack's own.
//! 4. Prints the medians (with min–max), the median of the paired ratios zcnet / baseline (run
//!    `i` of zcnet and run `i` of the baseline ran back to back, so a slow phase of the shared
//!    machine cancels within the pair, as in the `stack` benchmark) and the targets: zcnet
//!    ≥ 3x the baseline's TCP throughput both ways and ≤ 0.4x its guest CPU per MB of it,
//!    ≥ 1.2x its request rate, ≤ 0.5x its bytes copied per request, ≤ 0.1x its kicks and
//!    interrupts per MB of bulk, and 0 wakeups while idle.
//!
//! Everything runs under QEMU's TCG (no KVM on these machines): every guest instruction is
//! translated, so the absolute figures are a fraction of what the same kernels do on hardware,
//! and the ratios compare how much guest work each kernel does per byte and per request as TCG
//! weighs it (translated code for computation and copies, QEMU's device emulation for each
//! virtqueue notification and interrupt).
//!
//! Environment:
//!
//! * `ZCNET_KERNEL_ONLY=iperf,wrk,copies,idle` (any subset) runs only those measurements;
//! * `ZCNET_KERNEL_BASELINE=lend` builds the baseline with `--features baseline-lend`: its
//!   device lends the DMA buffers to smoltcp instead of copying (as ArceOS's `axnet` does);
//! * `ZCNET_KERNEL_BASELINE_ARGS` appends words to the baseline's kernel command line;
//! * `ZCNET_KERNEL_MACHINE=microvm` boots both kernels on QEMU's `microvm` (virtio-net on
//!   virtio-mmio, no PCI, no ACPI) instead of `q35`;
//! * `ZCNET_KERNEL_ZCNET_ARGS` appends words to zcnet's (`csum=0`, `rx_recheck=0`: see
//!   `examples/qemu-kernel/README.md`);
//! * `ZCNET_KERNEL_NO_BUILD=1` uses the ELFs already in `target/kernel-bench/`;
//! * `ZCNET_KERNEL_CPUS=LIST` runs QEMU and the Linux side (iperf3, wrk, curl) under
//!   `taskset -c LIST` (e.g. `0`: all on one host CPU). Without it the host's scheduler places
//!   them. At one connection the request rate depends on that placement more than on either
//!   kernel: each request passes twice between QEMU's vCPU thread and its main loop (the
//!   request's interrupt, the response's queue notification), and a hand-over to a thread
//!   whose CPU sleeps waits for that CPU to wake (BENCHMARKS.md, the kernel section).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use zcnet_benches::{median, Mode, Table};
use zcnet_examples::json::{self, Json};
use zcnet_tests::netns::{self, Netns};
use zcnet_tests::qemu::Machine;

/// The guest's address.
const GUEST: &str = "10.80.0.2";
/// The guest's kernel command line (both variants).
const GUEST_NET: &str = "ip=10.80.0.2/24 gw=10.80.0.1";
/// Linux's side of the TAP, inside the namespace.
const HOST_CIDR: &str = "10.80.0.1/24";
/// The TAP's name (alone in its namespace, so a fixed name is unique).
const TAP: &str = "zck0";
/// Memory given to the guest.
const GUEST_MEM: &str = "256M";
/// How long a boot may take to print `READY`.
const BOOT_LIMIT: Duration = Duration::from_secs(60);
/// Serial lines kept per guest for the error message when something fails.
const LOG_LINES: usize = 60;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Zcnet,
    Baseline,
}

const VARIANTS: [Variant; 2] = [Variant::Zcnet, Variant::Baseline];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Zcnet => "zcnet",
            Variant::Baseline => "baseline",
        }
    }
}

/// How much to measure.
struct Plan {
    runs: usize,
    iperf_secs: u64,
    wrk_secs: u64,
    conns: &'static [u32],
    requests: u32,
    idle_secs: u64,
}

// ---- Ctrl-C ---------------------------------------------------------------------------------

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM only set a flag: QEMU and the clients, in our process group, get the
/// signal too and exit; the wait that notices panics, and unwinding kills what is left and
/// deletes the namespace.
fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` is an `extern "C" fn(c_int)` that only stores to an atomic, which
        // is async-signal-safe; replacing the default disposition has no other effect.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

fn check_interrupted() {
    assert!(
        !INTERRUPTED.load(Ordering::SeqCst),
        "interrupted: cleaning up"
    );
}

// ---- prerequisites and build ----------------------------------------------------------------

/// Says what is missing and exits with status 2.
fn require_tools() {
    let mut missing = Vec::new();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        missing.push(
            "root (the benchmark makes a network namespace and a TAP device): run it with sudo"
                .to_string(),
        );
    }
    if !Path::new("/dev/net/tun").exists() {
        missing.push("/dev/net/tun (modprobe tun)".into());
    }
    for (tool, arg, pkg) in [
        ("qemu-system-x86_64", "--version", "qemu-system-x86"),
        ("iperf3", "--version", "iperf3"),
        ("wrk", "--version", "wrk"),
        ("curl", "--version", "curl"),
        ("ip", "-V", "iproute2"),
        ("taskset", "--version", "util-linux"),
    ] {
        if tool == "taskset" && host_cpus().is_none() {
            continue;
        }
        let found = Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            missing.push(format!("{tool} (apt-get install {pkg})"));
        }
    }
    if !missing.is_empty() {
        eprintln!("the kernel benchmark cannot run; it needs:");
        for m in &missing {
            eprintln!("  - {m}");
        }
        std::process::exit(2);
    }
}

fn kernel_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/qemu-kernel")
}

/// Whether `name` is an environment variable that would change how cargo builds the kernel, or
/// that cargo set for this benchmark's own run.
fn build_env_var(name: &str) -> bool {
    const KEEP: [&str; 5] = [
        "CARGO_HOME",
        "CARGO_NET_",
        "CARGO_HTTP_",
        "CARGO_REGISTRIES_",
        "CARGO_TERM_",
    ];
    if KEEP.iter().any(|k| name.starts_with(k)) {
        return false;
    }
    name.starts_with("CARGO_")
        || name.starts_with("__CARGO")
        || matches!(
            name,
            "RUSTFLAGS"
                | "RUSTDOCFLAGS"
                | "RUSTC_WORKSPACE_WRAPPER"
                | "MAKEFLAGS"
                | "MFLAGS"
                | "OUT_DIR"
                | "TARGET"
                | "HOST"
                | "PROFILE"
                | "OPT_LEVEL"
                | "DEBUG"
        )
}

/// The QEMU machine both kernels boot on: `q35` (virtio-net-pci, MSI-X), or `microvm` (virtio-net
/// on virtio-mmio, its line through the IOAPIC) with `ZCNET_KERNEL_MACHINE=microvm`.
fn machine() -> Machine {
    match std::env::var("ZCNET_KERNEL_MACHINE").as_deref() {
        Err(_) | Ok("" | "q35") => Machine::Q35,
        Ok("microvm") => Machine::Microvm,
        Ok(other) => panic!("ZCNET_KERNEL_MACHINE must be `q35` or `microvm`, not {other:?}"),
    }
}

/// The cargo feature the baseline is built with: `baseline` (a copying device), or
/// `baseline-lend` (a device that lends its DMA buffers) with `ZCNET_KERNEL_BASELINE=lend`.
fn baseline_feature() -> &'static str {
    match std::env::var("ZCNET_KERNEL_BASELINE").as_deref() {
        Err(_) | Ok("" | "copy") => "baseline",
        Ok("lend") => "baseline-lend",
        Ok(other) => panic!("ZCNET_KERNEL_BASELINE must be `copy` or `lend`, not {other:?}"),
    }
}

/// Builds one variant and copies its ELF to `target/kernel-bench/<variant>.elf`.
fn build(variant: Variant) -> PathBuf {
    let dir = kernel_dir();
    let out = dir.join("target/kernel-bench");
    let elf = out.join(format!("{}.elf", variant.name()));
    if std::env::var_os("ZCNET_KERNEL_NO_BUILD").is_some_and(|v| v != "0") {
        assert!(
            elf.exists(),
            "ZCNET_KERNEL_NO_BUILD: {} is missing",
            elf.display()
        );
        return elf;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&dir).args([
        "build",
        "--release",
        "--message-format=json-render-diagnostics",
    ]);
    if variant == Variant::Baseline {
        cmd.args(["--features", baseline_feature()]);
    }
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str() {
            if build_env_var(k) {
                cmd.env_remove(k);
            }
        }
    }
    eprintln!(
        "building the {} kernel in {}",
        variant.name(),
        dir.display()
    );
    let output = cmd
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo: {e}"));
    assert!(
        output.status.success(),
        "building the {} kernel failed ({})",
        variant.name(),
        output.status
    );
    // The kernel: the (last) binary target cargo reports an executable for.
    let is_bin = |m: &Json| {
        m.path(&["target", "kind"])
            .and_then(Json::as_array)
            .is_some_and(|k| k.iter().any(|k| k.as_str() == Some("bin")))
    };
    let exe = String::from_utf8_lossy(&output.stdout)
        .lines()
        .rev()
        .filter_map(|l| json::parse(l.as_bytes()).ok())
        .filter(|m| m.get("reason").and_then(Json::as_str) == Some("compiler-artifact"))
        .filter(is_bin)
        .find_map(|m| {
            m.get("executable")
                .and_then(Json::as_str)
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| panic!("cargo built no executable for {}", variant.name()));
    std::fs::create_dir_all(&out).expect("create target/kernel-bench");
    std::fs::copy(&exe, &elf)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", exe.display(), elf.display()));
    elf
}

// ---- the namespace and the guest -------------------------------------------------------------

/// The namespace with the TAP QEMU attaches to.
fn make_netns() -> Netns {
    let ns = Netns::new();
    netns::run(ns.command("sh").args([
        "-c",
        "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 && \
         echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6",
    ]));
    ns.ip(&["tuntap", "add", "dev", TAP, "mode", "tap"]);
    ns.ip(&["addr", "add", HOST_CIDR, "dev", TAP]);
    ns.ip(&["link", "set", TAP, "up"]);
    ns
}

/// A QEMU process running one kernel; killed on drop.
struct Guest {
    child: Child,
    /// The namespace the Linux side runs in (for the teardown's socket check).
    netns: String,
    lines: Receiver<String>,
    log: VecDeque<String>,
    what: String,
}

impl Guest {
    /// Boots `elf` with `cmdline` and waits for `READY`.
    fn boot(ns: &Netns, variant: Variant, elf: &Path, cmdline: &str) -> Guest {
        check_interrupted();
        let mut child = ns_command(ns, "qemu-system-x86_64")
            // One CPU; `maxcpus=2` keeps TCG (before QEMU 8.1) from dropping the guest's fences,
            // which lost virtio interrupt requests (zcnet-virtio's crate docs).
            .args(["-accel", "tcg", "-cpu", "max", "-m", GUEST_MEM])
            .args(["-smp", "1,maxcpus=2"])
            .args(["-machine", machine().qemu_machine()])
            .args(["-display", "none", "-serial", "stdio", "-monitor", "none"])
            // Thread names ("CPU 0/TCG" for the vCPU), for `Placement`.
            .args(["-name", "debug-threads=on"])
            .args([
                "-no-reboot",
                "-device",
                "isa-debug-exit,iobase=0xf4,iosize=0x04",
            ])
            .arg("-kernel")
            .arg(elf)
            .args(["-append", cmdline])
            .args([
                "-netdev",
                &format!("tap,id=n0,ifname={TAP},script=no,downscript=no"),
            ])
            .args(machine().nic_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start QEMU: {e}"));
        let lines = zcnet_benches::line_channel(vec![
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ]);
        let mut g = Guest {
            child,
            netns: ns.name().to_string(),
            lines,
            log: VecDeque::new(),
            what: format!("{} guest ({cmdline})", variant.name()),
        };
        let ready = g.wait_for("READY ", BOOT_LIMIT);
        assert!(
            ready.contains(&format!("ip={GUEST}")),
            "{} came up with another address: {ready}",
            g.what
        );
        g
    }

    /// The first serial line starting with `prefix`, within `limit`.
    fn wait_for(&mut self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            check_interrupted();
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(line) => {
                    if self.log.len() == LOG_LINES {
                        self.log.pop_front();
                    }
                    self.log.push_back(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) if !left.is_zero() => {
                    if let Ok(Some(st)) = self.child.try_wait() {
                        self.fail(&format!("QEMU exited ({st}) before `{prefix}`"));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("no `{prefix}` line within {limit:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail(&format!("QEMU closed its output before `{prefix}`"))
                }
            }
        }
    }

    fn fail(&mut self, what: &str) -> ! {
        // Collect what the guest printed last.
        while let Ok(line) = self.lines.try_recv() {
            self.log.push_back(line);
        }
        let log: Vec<&str> = self.log.iter().map(String::as_str).collect();
        panic!(
            "{}: {what}\nlast serial lines:\n{}",
            self.what,
            log.join("\n")
        );
    }
}

impl Drop for Guest {
    /// Stops QEMU once the Linux side has no TCP connection to the guest still waiting for an
    /// answer (a FIN or SYN not yet acknowledged): killed before it answers, the guest would
    /// leave Linux resending to its address, and the next guest booted there would take those
    /// segments, waking in what should be an idle window. Waits at most a second.
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline && linux_waits_on_guest(&self.netns) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a TCP socket in namespace `netns` waits for the guest to acknowledge something:
/// its FIN (FIN-WAIT-1, CLOSING, LAST-ACK) or its SYN (SYN-SENT).
fn linux_waits_on_guest(netns: &str) -> bool {
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "ss", "-Htn"])
        .args([
            "state",
            "fin-wait-1",
            "state",
            "closing",
            "state",
            "last-ack",
        ])
        .args(["state", "syn-sent", "dst", GUEST])
        .output();
    match out {
        Ok(o) if o.status.success() => !o.stdout.iter().all(u8::is_ascii_whitespace),
        // No `ss`: nothing to wait for that can be seen.
        _ => false,
    }
}

/// `ZCNET_KERNEL_CPUS`: the host CPUs QEMU and the Linux side are confined to, if any.
fn host_cpus() -> Option<String> {
    std::env::var("ZCNET_KERNEL_CPUS")
        .ok()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
}

/// `program` inside the namespace, under `taskset -c` with `ZCNET_KERNEL_CPUS`. `ip netns exec`
/// and `taskset` both exec what they run, so the child's pid is `program`'s.
fn ns_command(ns: &Netns, program: &str) -> Command {
    match host_cpus() {
        None => ns.command(program),
        Some(cpus) => {
            let mut c = ns.command("taskset");
            c.args(["-c", &cpus, program]);
            c
        }
    }
}

/// CPU time (user and system, all threads, nanoseconds) process `pid` has used so far.
fn process_cpu_ns(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/stat: {e}"));
    // The fields after the command name, which is in parentheses and may hold spaces:
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the `)`.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> f64 {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("/proc/{pid}/stat has no field {}: {stat}", i + 3))
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert!(hz > 0, "sysconf(_SC_CLK_TCK) failed");
    (ticks(11) + ticks(12)) * 1e9 / hz as f64
}

/// Field `n` (1-based, as in proc(5)) of thread `tid`'s `stat` line in process `pid`.
fn stat_field(pid: u32, tid: u32, n: usize) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // The fields after the `)` that ends the command name (which may hold spaces) start at 3.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(n - 3)?
        .parse()
        .ok()
}

/// The host CPU thread `tid` of process `pid` last ran on (field 39, `processor`).
fn last_cpu(pid: u32, tid: u32) -> Option<u32> {
    stat_field(pid, tid, 39)
}

/// This process's child named `wrk` (`ip netns exec` and `taskset` exec what they run, so wrk
/// is the benchmark's own child), if one runs.
fn wrk_pid() -> Option<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "wrk")
                && stat_field(pid, pid, 4) == Some(me)
        })
}

/// Samples, every millisecond until stopped, whether QEMU's vCPU thread (named `CPU 0/TCG`), its
/// main loop (the thread whose id is the process's) and wrk last ran on the same host CPU.
struct Placement {
    stop: std::sync::Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<(u32, u32)>,
}

impl Placement {
    fn start(pid: u32) -> Placement {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sampler = std::thread::spawn(move || {
            let vcpu = std::fs::read_dir(format!("/proc/{pid}/task"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .find(|tid| {
                    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                        .is_ok_and(|c| c.contains("/TCG"))
                });
            let (mut same, mut all) = (0, 0);
            let mut wrk = None;
            while !flag.load(Ordering::Relaxed) {
                if wrk.is_none() {
                    wrk = wrk_pid();
                }
                if let (Some(vcpu), Some(wrk)) = (vcpu, wrk) {
                    if let (Some(a), Some(b), Some(c)) =
                        (last_cpu(pid, vcpu), last_cpu(pid, pid), last_cpu(wrk, wrk))
                    {
                        all += 1;
                        same += u32::from(a == b && b == c);
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            (same, all)
        });
        Placement { stop, sampler }
    }

    /// The share of readings (percent) that found all three on one CPU; `None` without any
    /// reading (no thread named as a TCG vCPU, or no wrk found).
    fn finish(self) -> Option<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let (same, all) = self.sampler.join().expect("the placement sampler panicked");
        (all > 0).then(|| f64::from(same) * 100.0 / f64::from(all))
    }
}

/// Runs `program args` inside the namespace; its stdout. Killed (and the benchmark fails) past
/// `limit`, or when it fails.
fn in_netns(ns: &Netns, program: &str, args: &[String], limit: Duration) -> String {
    check_interrupted();
    let r = zcnet_benches::run_within(ns_command(ns, program).args(args), limit, || {
        INTERRUPTED.load(Ordering::SeqCst)
    });
    check_interrupted();
    r.unwrap_or_else(|e| panic!("{program} {args:?} {e}"))
}

// ---- measurements ---------------------------------------------------------------------------

/// Mbit/s and bytes received by the receiving end, from `iperf3 -J` against guest `g` (whose
/// console the benchmark prints if iperf3 fails).
fn iperf(ns: &Netns, g: &mut Guest, secs: u64, reverse: bool) -> (f64, f64) {
    let mut args: Vec<String> = ["-c", GUEST, "-J", "-t"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(secs.to_string());
    if reverse {
        args.push("-R".into());
    }
    let out = in_netns(ns, "iperf3", &args, Duration::from_secs(secs + 60));
    let j = json::parse(out.as_bytes())
        .unwrap_or_else(|e| panic!("iperf3 -J gave no JSON ({e}): {out}"));
    if let Some(e) = j.get("error").and_then(Json::as_str) {
        g.fail(&format!("iperf3 failed: {e}"));
    }
    let get = |key: &str| {
        j.path(&["end", "sum_received", key])
            .and_then(Json::as_f64)
            .unwrap_or_else(|| panic!("no end.sum_received.{key} in: {out}"))
    };
    (get("bits_per_second") / 1e6, get("bytes"))
}

/// (requests per second, requests, errors) from `wrk`'s output.
fn wrk(ns: &Netns, conns: u32, secs: u64) -> (f64, u64, u64) {
    let args = vec![
        "-t1".to_string(),
        format!("-c{conns}"),
        format!("-d{secs}s"),
        format!("http://{GUEST}/"),
    ];
    let out = in_netns(ns, "wrk", &args, Duration::from_secs(secs + 60));
    let rps = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk's output: {out}"));
    let requests = out
        .lines()
        .find_map(|l| {
            let (n, rest) = l.trim().split_once(' ')?;
            rest.starts_with("requests in")
                .then(|| n.parse::<u64>().ok())?
        })
        .unwrap_or_else(|| panic!("no request count in wrk's output: {out}"));
    let mut errors = 0;
    for l in out.lines().map(str::trim) {
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
    (rps, requests, errors)
}

/// One reading of the guest's `/stats`.
#[derive(Clone, Copy)]
struct GuestStats {
    /// `memcpy` + `memmove` calls so far (`copies.calls`).
    calls: f64,
    /// Bytes they copied (`copies.bytes`).
    bytes: f64,
    /// HTTP requests received (`http.requests`).
    requests: f64,
    /// Nanoseconds the guest was not halted (`kernel.busy_ns`).
    busy_ns: f64,
    /// Nanoseconds since the guest's clock started (`kernel.uptime_ns`).
    uptime_ns: f64,
    /// Queue notifications the guest's driver made (`kernel.nic.kicks`).
    kicks: f64,
    /// zcnet-virtio's own counters (`virtio.*`; the baseline's device reports others): RX and
    /// TX interrupts, frames sent with a partial checksum for the device to complete, frames
    /// received that the device vouched for (`DATA_VALID` or `NEEDS_CSUM`).
    virtio: Option<VirtioCounts>,
    /// NIC interrupts the guest took (`kernel.nic.interrupts`).
    interrupts: f64,
    /// Wakeups from `hlt` by the guest's timer (`kernel.wakeups.timer`): with receive
    /// deferral (`rx_defer`), the deferred polls among them.
    timer_wakeups: f64,
}

fn stats(ns: &Netns) -> GuestStats {
    let args = vec![
        "-sS".to_string(),
        "-m".into(),
        "20".into(),
        format!("http://{GUEST}/stats"),
    ];
    let out = in_netns(ns, "curl", &args, Duration::from_secs(30));
    let j = json::parse(out.trim().as_bytes())
        .unwrap_or_else(|e| panic!("/stats is not JSON ({e}): {out}"));
    let num = |path: &[&str]| {
        j.path(path)
            .and_then(Json::as_f64)
            .unwrap_or_else(|| panic!("no {} in /stats: {out}", path.join(".")))
    };
    GuestStats {
        calls: num(&["copies", "calls"]),
        bytes: num(&["copies", "bytes"]),
        requests: num(&["http", "requests"]),
        busy_ns: num(&["kernel", "busy_ns"]),
        uptime_ns: num(&["kernel", "uptime_ns"]),
        kicks: num(&["kernel", "nic", "kicks"]),
        virtio: j.path(&["virtio", "rx_interrupts"]).map(|_| {
            let n = |k: &str| num(&["virtio", k]);
            VirtioCounts {
                rx_interrupts: n("rx_interrupts"),
                tx_interrupts: n("tx_interrupts"),
                shared_interrupts: n("shared_interrupts"),
                tx_checksum_offloaded: n("tx_checksum_offloaded"),
                rx_checksum_vouched: n("rx_checksum_valid") + n("rx_checksum_partial"),
                rx_deferrals: n("rx_deferrals"),
            }
        }),
        interrupts: num(&["kernel", "nic", "interrupts"]),
        timer_wakeups: num(&["kernel", "wakeups", "timer"]),
    }
}

/// zcnet-virtio's counters in `/stats` (see [`GuestStats::virtio`]).
#[derive(Clone, Copy, Debug)]
struct VirtioCounts {
    rx_interrupts: f64,
    tx_interrupts: f64,
    shared_interrupts: f64,
    tx_checksum_offloaded: f64,
    rx_checksum_vouched: f64,
    rx_deferrals: f64,
}

/// What zcnet-virtio did between two readings of an iperf3 run of `mb` MB, for the log: RX,
/// TX and shared (one line for both queues: INTx, virtio-mmio) interrupts per MB, receive
/// deferrals per MB, and the frames whose checksums the device handled; for either kernel,
/// the guest's timer wakeups per MB.
fn virtio_note(before: GuestStats, after: GuestStats, mb: f64) -> String {
    let timer = format!(
        "; {:.1} timer wakeups per MB",
        (after.timer_wakeups - before.timer_wakeups) / mb
    );
    match (before.virtio, after.virtio) {
        (Some(b), Some(a)) => format!(
            " (RX {:.1} + TX {:.1} + shared {:.1} interrupts per MB, {:.1} RX deferrals per MB; \
             checksums: {:.0} sent partial, {:.0} received vouched for){timer}",
            (a.rx_interrupts - b.rx_interrupts) / mb,
            (a.tx_interrupts - b.tx_interrupts) / mb,
            (a.shared_interrupts - b.shared_interrupts) / mb,
            (a.rx_deferrals - b.rx_deferrals) / mb,
            a.tx_checksum_offloaded - b.tx_checksum_offloaded,
            a.rx_checksum_vouched - b.rx_checksum_vouched,
        ),
        _ => timer,
    }
}

/// The share of the time between two readings that the guest was not halted, in percent.
fn busy_percent(before: GuestStats, after: GuestStats) -> f64 {
    (after.busy_ns - before.busy_ns) / (after.uptime_ns - before.uptime_ns).max(1.0) * 100.0
}

/// memcpy calls and bytes per keep-alive request for `/`, and the correction applied (the
/// `/stats` exchange's own share, in calls and bytes), see the module docs.
struct Copies {
    calls: f64,
    bytes: f64,
    overhead_calls: f64,
    overhead_bytes: f64,
}

fn copies(ns: &Netns, n: u32) -> Copies {
    let s0 = stats(ns);
    let s1 = stats(ns);
    // One connection, keep-alive, `n` requests; the bodies are read and dropped.
    let args = vec![
        "-sS".to_string(),
        "-m".into(),
        "120".into(),
        format!("http://{GUEST}/?[1-{n}]"),
    ];
    in_netns(ns, "curl", &args, Duration::from_secs(180));
    let s2 = stats(ns);
    let (oc, ob) = (s1.calls - s0.calls, s1.bytes - s0.bytes);
    let served = (s2.requests - s1.requests) - (s1.requests - s0.requests);
    assert!(
        (served - f64::from(n)).abs() < 0.5,
        "the guest counted {served} requests for the {n} sent"
    );
    Copies {
        calls: ((s2.calls - s1.calls) - oc) / f64::from(n),
        bytes: ((s2.bytes - s1.bytes) - ob) / f64::from(n),
        overhead_calls: oc,
        overhead_bytes: ob,
    }
}

/// `key=value` from the IDLE line.
fn kv(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

// ---- samples and the report -----------------------------------------------------------------

/// Samples per (metric, variant), in run order.
#[derive(Default)]
struct Samples(Vec<(String, Variant, Vec<f64>)>);

impl Samples {
    fn add(&mut self, metric: &str, v: Variant, x: f64) {
        match self.0.iter_mut().find(|(m, w, _)| m == metric && *w == v) {
            Some((_, _, xs)) => xs.push(x),
            None => self.0.push((metric.to_string(), v, vec![x])),
        }
    }

    fn get(&self, metric: &str, v: Variant) -> Option<&[f64]> {
        self.0
            .iter()
            .find(|(m, w, _)| m == metric && *w == v)
            .map(|(_, _, xs)| xs.as_slice())
    }
}

fn spread(xs: &[f64]) -> (f64, f64, f64) {
    let mut v = xs.to_vec();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(&mut v), lo, hi)
}

fn fmt_num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn fmt_spread(xs: &[f64]) -> String {
    let (m, lo, hi) = spread(xs);
    if xs.len() == 1 {
        fmt_num(m)
    } else {
        format!("{} ({}–{})", fmt_num(m), fmt_num(lo), fmt_num(hi))
    }
}

/// The target a metric is held to.
#[derive(Clone, Copy)]
enum Target {
    /// zcnet / baseline at least this.
    AtLeast(f64),
    /// zcnet / baseline at most this.
    AtMost(f64),
    /// zcnet's own value is 0 in every run.
    Zero,
    /// Shown, no target.
    None,
}

struct Row {
    metric: &'static str,
    key: String,
    unit: &'static str,
    target: Target,
}

fn report(plan: &Plan, mode: Mode, s: &Samples) {
    let mut rows = vec![
        Row {
            metric: "TCP Linux → guest (iperf3)",
            key: "iperf".into(),
            unit: "Mbit/s",
            target: Target::AtLeast(3.0),
        },
        Row {
            metric: "TCP guest → Linux (iperf3 -R)",
            key: "iperf -R".into(),
            unit: "Mbit/s",
            target: Target::AtLeast(3.0),
        },
    ];
    for &c in plan.conns {
        rows.push(Row {
            metric: match c {
                1 => "HTTP keep-alive, 1 connection (wrk)",
                10 => "HTTP keep-alive, 10 connections (wrk)",
                50 => "HTTP keep-alive, 50 connections (wrk)",
                _ => "HTTP keep-alive (wrk)",
            },
            key: format!("wrk c={c}"),
            unit: "req/s",
            target: Target::AtLeast(1.2),
        });
    }
    rows.extend([
        Row {
            metric: "guest busy during iperf3",
            key: "iperf busy".into(),
            unit: "%",
            target: Target::None,
        },
        Row {
            metric: "guest busy during iperf3 -R",
            key: "iperf -R busy".into(),
            unit: "%",
            target: Target::None,
        },
        Row {
            metric: "guest CPU per MB, iperf3",
            key: "iperf cpu".into(),
            unit: "µs per MB",
            target: Target::AtMost(0.4),
        },
        Row {
            metric: "guest CPU per MB, iperf3 -R",
            key: "iperf -R cpu".into(),
            unit: "µs per MB",
            target: Target::AtMost(0.4),
        },
        Row {
            metric: "kicks per MB, iperf3",
            key: "iperf kicks".into(),
            unit: "per MB",
            target: Target::AtMost(0.1),
        },
        Row {
            metric: "kicks per MB, iperf3 -R",
            key: "iperf -R kicks".into(),
            unit: "per MB",
            target: Target::AtMost(0.1),
        },
        Row {
            metric: "NIC interrupts per MB, iperf3",
            key: "iperf irqs".into(),
            unit: "per MB",
            target: Target::AtMost(0.1),
        },
        Row {
            metric: "NIC interrupts per MB, iperf3 -R",
            key: "iperf -R irqs".into(),
            unit: "per MB",
            target: Target::AtMost(0.1),
        },
    ]);
    for &c in plan.conns {
        rows.push(Row {
            metric: match c {
                1 => "guest CPU per request, 1 connection",
                10 => "guest CPU per request, 10 connections",
                50 => "guest CPU per request, 50 connections",
                _ => "guest CPU per request",
            },
            key: format!("wrk c={c} cpu"),
            unit: "µs",
            target: Target::None,
        });
    }
    for &c in plan.conns {
        rows.push(Row {
            metric: match c {
                1 => "QEMU host CPU per request, 1 connection",
                10 => "QEMU host CPU per request, 10 connections",
                50 => "QEMU host CPU per request, 50 connections",
                _ => "QEMU host CPU per request",
            },
            key: format!("wrk c={c} host"),
            unit: "µs",
            target: Target::None,
        });
    }
    for &c in plan.conns {
        rows.push(Row {
            metric: match c {
                1 => "QEMU's vCPU, main loop and wrk on one host CPU, 1 connection",
                10 => "QEMU's vCPU, main loop and wrk on one host CPU, 10 connections",
                50 => "QEMU's vCPU, main loop and wrk on one host CPU, 50 connections",
                _ => "QEMU's vCPU, main loop and wrk on one host CPU",
            },
            key: format!("wrk c={c} together"),
            unit: "% of readings",
            target: Target::None,
        });
    }
    rows.extend([
        Row {
            metric: "bytes copied per request (memcpy + memmove)",
            key: "copy bytes".into(),
            unit: "bytes",
            target: Target::AtMost(0.5),
        },
        Row {
            metric: "memcpy + memmove calls per request",
            key: "copy calls".into(),
            unit: "calls",
            target: Target::None,
        },
        Row {
            metric: "idle wakeups",
            key: "idle wakeups".into(),
            unit: "per s",
            target: Target::Zero,
        },
        Row {
            metric: "idle stack polls",
            key: "idle polls".into(),
            unit: "per s",
            target: Target::None,
        },
    ]);
    let mut t = Table::new(&[
        "metric",
        "unit",
        "zcnet (min–max)",
        "baseline (min–max)",
        "zcnet / baseline (min–max)",
        "target",
        "verdict",
    ]);
    let mut verdicts = Vec::new();
    for r in rows {
        let (Some(z), Some(b)) = (
            s.get(&r.key, Variant::Zcnet),
            s.get(&r.key, Variant::Baseline),
        ) else {
            continue;
        };
        let ratios: Vec<f64> = z
            .iter()
            .zip(b)
            .filter(|(_, &b)| b != 0.0)
            .map(|(&z, &b)| z / b)
            .collect();
        let ratio = if ratios.is_empty() {
            None
        } else {
            Some(spread(&ratios))
        };
        let ratio_cell = match ratio {
            None => "n/a (baseline 0)".to_string(),
            Some((m, lo, hi)) if ratios.len() > 1 => format!("{m:.2}x ({lo:.2}–{hi:.2})"),
            Some((m, _, _)) => format!("{m:.2}x"),
        };
        let (target, verdict) = match (r.target, ratio) {
            (Target::AtLeast(x), Some((m, _, _))) => (
                format!("≥ {x:.1}x"),
                if m >= x {
                    format!("met ({m:.2}x)")
                } else {
                    format!("MISSED ({m:.2}x, {:.0}% short)", (1.0 - m / x) * 100.0)
                },
            ),
            (Target::AtMost(x), Some((m, _, _))) => (
                format!("≤ {x:.1}x"),
                if m <= x {
                    format!("met ({m:.2}x)")
                } else {
                    format!("MISSED ({m:.2}x, {:.2}x over)", m / x)
                },
            ),
            (Target::Zero, _) => {
                let worst = z.iter().copied().fold(0.0, f64::max);
                (
                    "zcnet 0".to_string(),
                    if worst == 0.0 {
                        "met (0 in every run)".to_string()
                    } else {
                        format!("MISSED (up to {} per s)", fmt_num(worst))
                    },
                )
            }
            (Target::AtLeast(_) | Target::AtMost(_), None) => {
                ("-".to_string(), "no ratio".to_string())
            }
            (Target::None, _) => ("-".to_string(), "-".to_string()),
        };
        if !matches!(r.target, Target::None) {
            verdicts.push(format!("{}: {verdict}", r.metric));
        }
        t.row(vec![
            r.metric.to_string(),
            r.unit.to_string(),
            fmt_spread(z),
            fmt_spread(b),
            ratio_cell,
            target,
            verdict,
        ]);
    }
    println!();
    println!(
        "example kernel under QEMU TCG ({}), zcnet vs smoltcp's own poll loop (`--features {}`) \
         ({}): {} run(s) each, interleaved; iperf3 {} s, wrk {} s, {} requests for the copy \
         count, idle {} s; host CPUs {}; medians",
        machine().name(),
        baseline_feature(),
        mode.label(),
        plan.runs,
        plan.iperf_secs,
        plan.wrk_secs,
        plan.requests,
        plan.idle_secs,
        host_cpus().map_or("as the scheduler places them".to_string(), |c| format!(
            "{c} (taskset)"
        ))
    );
    println!();
    print!("{}", t.to_markdown());
    println!();
    for v in verdicts {
        println!("{v}");
    }
    if let (Some(z), Some(b)) = (
        s.get("copy overhead", Variant::Zcnet),
        s.get("copy overhead", Variant::Baseline),
    ) {
        println!(
            "\n/stats exchange subtracted from the copy window (bytes, median): zcnet {}, baseline {}",
            fmt_spread(z),
            fmt_spread(b)
        );
    }
    for (key, what) in [("wrk errors", "wrk errors (all runs)")] {
        if let (Some(z), Some(b)) = (s.get(key, Variant::Zcnet), s.get(key, Variant::Baseline)) {
            println!(
                "{what}: zcnet {}, baseline {}",
                z.iter().sum::<f64>(),
                b.iter().sum::<f64>()
            );
        }
    }
}

// ---- main -----------------------------------------------------------------------------------

fn main() {
    require_tools();
    catch_signals();
    let mode = Mode::from_env();
    let plan = mode.pick(
        Plan {
            runs: 5,
            iperf_secs: 8,
            wrk_secs: 5,
            conns: &[1, 10, 50],
            requests: 1000,
            idle_secs: 10,
        },
        Plan {
            runs: 1,
            iperf_secs: 2,
            wrk_secs: 1,
            conns: &[1, 10, 50],
            requests: 100,
            idle_secs: 2,
        },
    );
    let only = std::env::var("ZCNET_KERNEL_ONLY").unwrap_or_default();
    let want = |w: &str| only.is_empty() || only.split(',').any(|o| o.trim() == w);
    let extra = std::env::var("ZCNET_KERNEL_BASELINE_ARGS").unwrap_or_default();
    let zcnet_extra = std::env::var("ZCNET_KERNEL_ZCNET_ARGS").unwrap_or_default();
    let cmdline = |v: Variant, more: &str| {
        let mut c = GUEST_NET.to_string();
        if !more.is_empty() {
            c.push(' ');
            c.push_str(more);
        }
        if v == Variant::Baseline && !extra.trim().is_empty() {
            c.push(' ');
            c.push_str(extra.trim());
        }
        if v == Variant::Zcnet && !zcnet_extra.trim().is_empty() {
            c.push(' ');
            c.push_str(zcnet_extra.trim());
        }
        c
    };

    let build_start = Instant::now();
    let elfs: Vec<(Variant, PathBuf)> = VARIANTS.iter().map(|&v| (v, build(v))).collect();
    eprintln!(
        "kernels ready in {:.0} s",
        build_start.elapsed().as_secs_f64()
    );
    let start = Instant::now();
    let ns = make_netns();
    let mut s = Samples::default();
    for run in 0..plan.runs {
        if want("iperf") {
            for reverse in [false, true] {
                let key = if reverse { "iperf -R" } else { "iperf" };
                for (v, elf) in &elfs {
                    let mut g = Guest::boot(&ns, *v, elf, &cmdline(*v, ""));
                    let before = stats(&ns);
                    let (mbit, bytes) = iperf(&ns, &mut g, plan.iperf_secs, reverse);
                    let after = stats(&ns);
                    drop(g);
                    let busy = busy_percent(before, after);
                    let mb = (bytes / 1e6).max(1e-9);
                    let kicks = (after.kicks - before.kicks) / mb;
                    let irqs = (after.interrupts - before.interrupts) / mb;
                    let cpu = (after.busy_ns - before.busy_ns) / 1e3 / mb;
                    s.add(key, *v, mbit);
                    s.add(&format!("{key} busy"), *v, busy);
                    s.add(&format!("{key} kicks"), *v, kicks);
                    s.add(&format!("{key} irqs"), *v, irqs);
                    s.add(&format!("{key} cpu"), *v, cpu);
                    eprintln!(
                        "run {run} {key} {}: {mbit:.1} Mbit/s, guest busy {busy:.0}% \
                         ({cpu:.0} us per MB), {kicks:.1} kicks and {irqs:.1} interrupts per MB{}",
                        v.name(),
                        virtio_note(before, after, mb)
                    );
                }
            }
        }
        if want("wrk") {
            for &c in plan.conns {
                let key = format!("wrk c={c}");
                for (v, elf) in &elfs {
                    let g = Guest::boot(&ns, *v, elf, &cmdline(*v, ""));
                    let before = stats(&ns);
                    let host_before = process_cpu_ns(g.child.id());
                    let placement = Placement::start(g.child.id());
                    let (rps, n, errors) = wrk(&ns, c, plan.wrk_secs);
                    let together = placement.finish();
                    let host_after = process_cpu_ns(g.child.id());
                    let after = stats(&ns);
                    drop(g);
                    // Guest CPU per request: its time outside `hlt` over wrk's requests (the
                    // second `/stats` request adds one request's worth, a fraction of a
                    // percent of a run).
                    let cpu_us = (after.busy_ns - before.busy_ns) / 1e3 / (n.max(1) as f64);
                    s.add(&key, *v, rps);
                    let host_us = (host_after - host_before) / 1e3 / (n.max(1) as f64);
                    s.add(&format!("{key} cpu"), *v, cpu_us);
                    s.add(&format!("{key} host"), *v, host_us);
                    if let Some(p) = together {
                        s.add(&format!("{key} together"), *v, p);
                    }
                    s.add("wrk errors", *v, errors as f64);
                    eprintln!(
                        "run {run} {key} {}: {rps:.0} req/s ({n} requests, {errors} errors), \
                         guest busy {cpu_us:.1} us per request, {:.0}%; QEMU {host_us:.1} us \
                         of host CPU per request; its vCPU thread, main loop and wrk on one \
                         host CPU in {} of the readings",
                        v.name(),
                        busy_percent(before, after),
                        together.map_or("none".to_string(), |p| format!("{p:.0}%"))
                    );
                }
            }
        }
        if want("copies") {
            for (v, elf) in &elfs {
                let g = Guest::boot(&ns, *v, elf, &cmdline(*v, ""));
                let c = copies(&ns, plan.requests);
                drop(g);
                s.add("copy calls", *v, c.calls);
                s.add("copy bytes", *v, c.bytes);
                s.add("copy overhead", *v, c.overhead_bytes);
                eprintln!(
                    "run {run} copies {}: {:.1} calls, {:.0} bytes per request (subtracted: one /stats exchange, {:.0} calls, {:.0} bytes)",
                    v.name(),
                    c.calls,
                    c.bytes,
                    c.overhead_calls,
                    c.overhead_bytes
                );
            }
        }
        if want("idle") {
            for (v, elf) in &elfs {
                let more = format!("idle={}", plan.idle_secs);
                let mut g = Guest::boot(&ns, *v, elf, &cmdline(*v, &more));
                let line = g.wait_for("IDLE ", Duration::from_secs(plan.idle_secs + 60));
                drop(g);
                let secs = kv(&line, "seconds").max(1e-9);
                // Less the measurement's own end-of-window timer wakeup.
                let own = kv(&line, "timer").min(1.0);
                s.add("idle wakeups", *v, (kv(&line, "wakeups") - own) / secs);
                s.add("idle polls", *v, kv(&line, "polls") / secs);
                eprintln!("run {run} idle {}: {line}", v.name());
            }
        }
    }
    drop(ns);
    report(&plan, mode, &s);
    eprintln!(
        "kernel benchmark: measured in {:.0} s (plus {:.0} s of building)",
        start.elapsed().as_secs_f64(),
        build_start.elapsed().as_secs_f64() - start.elapsed().as_secs_f64()
    );
}
