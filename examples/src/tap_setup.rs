//! What the example programs share: command-line options, the TAP + network-namespace setup,
//! the stack, a clean exit on Ctrl-C, a packet capture on request, and the Linux-side hooks the
//! servers take ([`tap_driver_stats`]). Needs the `std` feature.
//!
//! ```text
//!   example process (root namespace)              namespace zcnet-demo
//!   ┌──────────────────────────────┐              ┌───────────────────────────────────┐
//!   │ zcnet stack 10.77.0.2/24     │  tun fd      │ zcdemo0  10.77.0.1/24              │
//!   │   └─ zcnet_tap::Tap ─────────┼──────────────┼─► Linux: curl, iperf3, nc, ping    │
//!   └──────────────────────────────┘              └───────────────────────────────────┘
//! ```
//!
//! By default (as root) the program creates the namespace if it is missing, opens the TAP,
//! moves its kernel side into the namespace and addresses it; on Ctrl-C (or SIGTERM) it
//! deletes the namespace again if it created it. The TAP itself disappears with the process.
//!
//! With `--attach` it sets up nothing: it opens an existing TAP in the namespace it runs in, as
//! made by `scripts/netns-up.sh`, and is started inside that namespace:
//! `sudo ip netns exec zcnet-demo target/release/http --attach` (the TAP belongs to the user
//! the script names, so the program itself may then run unprivileged through `sudo -u`).
//!
//! With `-v` (`-vv`, `-vvv`) the stack's and the TAP driver's log lines go to stderr at a finer
//! level ([`logger`](crate::logger)); without it, only warnings and errors.
//!
//! With `--pcap FILE` the TAP driver is wrapped in a [`Capture`]: every frame zcnet receives or
//! sends is written to FILE in pcap format (wall-clock timestamps, nanosecond resolution), for
//! `tcpdump -r FILE` or Wireshark. The file is flushed at least every second while frames come,
//! and when the program stops. Without the option the driver is not wrapped and nothing is
//! recorded.

use std::fs::File;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::pin::pin;
use std::process::Command;
use std::sync::Mutex;

use futures_util::future::{select, Either};
use zcnet_buffer::capture::{
    system_time_ns, Capture, CaptureCounters, CaptureStats, IoSink, PcapSink,
};
use zcnet_buffer::{Driver, FramePool, PoolConfig, DEFAULT_SLOT_SIZE};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::Executor;
use zcnet_stack::{Config, Ipv4Address, Ipv4Cidr, Ipv4Config, Stack, StackResources, StaticV4};
use zcnet_tap::{Tap, TapConfig, TapStatsHandle};

use crate::http::DriverStats;
use crate::json::object;

/// The namespace the examples use by default.
pub const NETNS: &str = "zcnet-demo";
/// The TAP interface's default name.
pub const TAP: &str = "zcdemo0";
/// The Linux side's address (inside the namespace).
pub const LINUX_ADDR: Ipv4Address = Ipv4Address::new(10, 77, 0, 1);
/// zcnet's address.
pub const ZCNET_ADDR: Ipv4Address = Ipv4Address::new(10, 77, 0, 2);
/// Socket slots in an example's stack.
pub const SOCKETS: usize = 320;
/// Frames in an example's pool of 2 KiB slots (16 MiB): room for the TCP budgets of a few
/// hundred connections, or of the iperf3 example's listener with its 256 KiB streams (each
/// connection reserves its buffers' frames when it opens). With a larger MTU the slots grow
/// and the pool keeps the same memory, down to [`MIN_POOL_SLOTS`] slots.
pub const POOL_SLOTS: usize = 8192;
/// The fewest frames in an example's pool, whatever the slot size.
pub const MIN_POOL_SLOTS: usize = 512;

/// Command-line options every example takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The namespace holding the Linux side (`--netns`).
    pub netns: String,
    /// The TAP interface's name (`--tap`).
    pub tap: String,
    /// MTU of both sides (`--mtu`).
    pub mtu: usize,
    /// Use an existing TAP in the current namespace instead of setting one up (`--attach`).
    pub attach: bool,
    /// Write every frame zcnet receives or sends to this file in pcap format (`--pcap`).
    pub pcap: Option<PathBuf>,
    /// How many `-v` (`-v`, `-vv`, `-vvv`, `--verbose`): the level of the log lines the stack
    /// and the TAP driver print to stderr ([`logger::level_for`](crate::logger::level_for)).
    pub verbosity: u8,
    /// Open the TAP without its virtio-net offloads (`--no-offloads`): bare frames, as a TAP
    /// without `IFF_VNET_HDR` ([`TapConfig::offloads`]), to compare both in one run. With them
    /// (the default) the TAP also takes the kernel's TCP super-segments on receive
    /// ([`TapConfig::rx_gso`]).
    pub no_offloads: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            netns: NETNS.to_string(),
            tap: TAP.to_string(),
            mtu: 1500,
            attach: false,
            pcap: None,
            verbosity: 0,
            no_offloads: false,
        }
    }
}

impl Options {
    /// The usage text for `program`.
    pub fn usage(program: &str, what: &str) -> String {
        format!(
            "{program}: {what}\n\n\
             usage: sudo {program} [--netns NAME] [--tap NAME] [--mtu N] [--pcap FILE] [--no-offloads] [-v|-vv|-vvv]\n\
             \x20      sudo ip netns exec NAME {program} --attach [--tap NAME] [--mtu N] [--pcap FILE] [-v...]\n\n\
             Without --attach (needs root): creates network namespace NAME (default {NETNS}) if\n\
             missing, opens TAP NAME (default {TAP}) and moves its kernel side into it as\n\
             {LINUX_ADDR}/24; zcnet is {ZCNET_ADDR}. Ctrl-C removes what it created.\n\
             With --attach: opens the existing TAP made by scripts/netns-up.sh; run the program\n\
             inside that namespace.\n\
             With --pcap FILE: writes every frame zcnet receives or sends to FILE (created or\n\
             truncated) in pcap format, for `tcpdump -r FILE` or Wireshark.\n\
             With --no-offloads: opens the TAP without its virtio-net header and checksum\n\
             offload (bare frames), to compare with the default.\n\
             Log lines go to stderr: warnings and errors; with -v also link, address and\n\
             interface events; -vv TCP connections and dropped frames; -vvv every TCP state\n\
             change.\n"
        )
    }

    /// Parses `args` (without the program name). `Err` holds a message for the user.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
        let mut o = Options::default();
        let mut args: Vec<String> = args.into_iter().collect();
        o.verbosity = crate::logger::take_verbosity(&mut args);
        let mut args = args.into_iter();
        while let Some(a) = args.next() {
            let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
            match a.as_str() {
                "--netns" => o.netns = value("--netns")?,
                "--tap" => o.tap = value("--tap")?,
                "--mtu" => {
                    let v = value("--mtu")?;
                    o.mtu = v.parse().map_err(|_| format!("bad --mtu {v}"))?;
                }
                "--attach" => o.attach = true,
                "--no-offloads" => o.no_offloads = true,
                "--pcap" => o.pcap = Some(value("--pcap")?.into()),
                other => return Err(format!("unknown argument {other}")),
            }
        }
        Ok(o)
    }

    /// Parses the process's arguments; prints the usage and exits on `--help` or a bad one.
    pub fn from_env(program: &str, what: &str) -> Options {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.iter().any(|a| a == "-h" || a == "--help") {
            print!("{}", Self::usage(program, what));
            std::process::exit(0);
        }
        match Self::parse(args) {
            Ok(o) => o,
            Err(e) => {
                eprint!("error: {e}\n\n{}", Self::usage(program, what));
                std::process::exit(2);
            }
        }
    }
}

/// The TAP driver's counters as the HTTP server's [`DriverStats`] hook: the `/stats` member
/// `"tap"`, an object of the [`TapStats`](zcnet_tap::TapStats) fields (`rx_frames`,
/// `rx_bytes`, `rx_errors`, `tx_frames`, `tx_bytes`, `tx_errors`, `tx_would_block`,
/// `tx_queue_full`).
pub fn tap_driver_stats(handle: TapStatsHandle) -> DriverStats {
    DriverStats::new("tap", move || {
        let t = handle.get();
        object([
            ("rx_frames", t.rx_frames.into()),
            ("rx_bytes", t.rx_bytes.into()),
            ("rx_errors", t.rx_errors.into()),
            ("tx_frames", t.tx_frames.into()),
            ("tx_bytes", t.tx_bytes.into()),
            ("tx_errors", t.tx_errors.into()),
            ("tx_would_block", t.tx_would_block.into()),
            ("tx_queue_full", t.tx_queue_full.into()),
        ])
    })
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip` (apt-get install iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn netns_exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

/// A running example environment: the stack over the TAP, and what to undo on exit.
#[derive(Debug)]
pub struct Demo {
    /// The executor (real time, epoll reactor with the TAP fd and the signal fd).
    pub exec: &'static Executor,
    /// The stack, 10.77.0.2/24.
    pub stack: Stack,
    /// The TAP driver's counters ([`tap_driver_stats`] turns them into the HTTP server's
    /// hook).
    pub tap_stats: TapStatsHandle,
    /// The options it was started with.
    pub options: Options,
    platform: &'static LinuxPlatform,
    signals: OwnedFd,
    created_netns: bool,
    capture: Option<PcapFile>,
}

/// The file a `--pcap` capture writes to, shared with the wrapped driver (which the stack owns
/// for good), so the file can be flushed and the counts told when the program stops.
#[derive(Debug)]
struct PcapFile {
    path: PathBuf,
    sink: &'static Mutex<IoSink<File>>,
    counters: &'static CaptureCounters,
}

impl PcapFile {
    fn create(path: &std::path::Path) -> Result<PcapFile, String> {
        let sink = IoSink::create(path)
            .map_err(|e| format!("cannot create capture file {}: {e}", path.display()))?;
        Ok(PcapFile {
            path: path.to_path_buf(),
            sink: Box::leak(Box::new(Mutex::new(sink))),
            counters: Box::leak(Box::new(CaptureCounters::new())),
        })
    }

    /// Flushes the file; the counters, or why the file is incomplete.
    fn finish(&self) -> Result<CaptureStats, String> {
        let mut sink = self.sink;
        if sink.flush().is_ok() {
            return Ok(self.counters.stats());
        }
        let why = self
            .sink
            .lock()
            .ok()
            .and_then(|s| s.error().map(ToString::to_string))
            .unwrap_or_else(|| "not flushed".to_string());
        Err(format!("capture file {}: {why}", self.path.display()))
    }
}

impl Demo {
    /// Blocks SIGINT and SIGTERM (they are read from a signalfd in [`run`](Self::run)), creates
    /// the capture file (with `--pcap`), sets up the namespace and TAP (unless `--attach`), and
    /// starts the stack (over the TAP wrapped in a [`Capture`] with `--pcap`).
    pub fn start(options: Options) -> Result<Demo, String> {
        crate::logger::init(options.verbosity);
        let signals = block_exit_signals()?;
        if !options.attach {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                return Err(format!(
                    "setting up the TAP and namespace needs root: run with sudo, or set them up \
                     once with `sudo scripts/netns-up.sh` and run `sudo ip netns exec {} <program> --attach`",
                    options.netns
                ));
            }
        }
        // Before anything is set up, so a failure leaves nothing behind.
        let secret = crate::secret::from_os()?;
        let capture = options.pcap.as_deref().map(PcapFile::create).transpose()?;
        let platform = LinuxPlatform::leak().map_err(|e| format!("epoll: {e}"))?;
        let exec = Executor::leak(platform);
        let config = TapConfig::new(&options.tap)
            .with_mtu(options.mtu)
            .with_interface_mtu(!options.attach)
            .with_offloads(!options.no_offloads)
            // The stack takes packets over several slots: the kernel's TCP may hand over
            // super-segments of up to 64 KiB, read into chains.
            .with_rx_gso(!options.no_offloads);
        let slot_size = config.slot_size();
        let slots = (POOL_SLOTS * DEFAULT_SLOT_SIZE / slot_size).max(MIN_POOL_SLOTS);
        let pool = FramePool::leak(PoolConfig::new(slots).with_slot_size(slot_size))
            .map_err(|e| format!("cannot build the frame pool: {e:?}"))?;
        let mut created_netns = false;
        let tap = Tap::open(platform, pool, &config).map_err(|e| {
            format!(
                "cannot open TAP {}: {e}{}",
                options.tap,
                if options.attach {
                    " (did scripts/netns-up.sh run, and is this program inside its namespace?)"
                } else {
                    ""
                }
            )
        })?;
        if !options.attach {
            let ns = options.netns.as_str();
            if !netns_exists(ns) {
                ip(&["netns", "add", ns])?;
                created_netns = true;
            }
            let setup = || -> Result<(), String> {
                ip(&["-n", ns, "link", "set", "lo", "up"])?;
                ip(&["link", "set", &options.tap, "netns", ns])?;
                ip(&[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{LINUX_ADDR}/24"),
                    "dev",
                    &options.tap,
                ])?;
                ip(&["-n", ns, "link", "set", &options.tap, "up"])
            };
            if let Err(e) = setup() {
                if created_netns {
                    let _ = ip(&["netns", "del", ns]);
                }
                return Err(e);
            }
        }
        let tap_stats = tap.stats_handle();
        let resources: &'static StackResources<SOCKETS> = StackResources::leak();
        let config = Config {
            ipv4: Ipv4Config::Static(StaticV4 {
                address: Ipv4Cidr::new(ZCNET_ADDR, 24),
                gateway: None,
            }),
            ..Config::new(secret)
        };
        let driver: &'static mut (dyn Driver + Send) = match &capture {
            None => Box::leak(Box::new(tap)),
            Some(c) => {
                println!(
                    "capturing every frame to {} (tcpdump -r {0})",
                    c.path.display()
                );
                Box::leak(Box::new(Capture::new(
                    tap,
                    c.sink,
                    system_time_ns,
                    c.counters,
                )))
            }
        };
        let (stack, runner) = Stack::new(exec, pool, driver, config, resources)
            .map_err(|e| format!("cannot build the stack: {e}"))?;
        runner.spawn(exec.local_spawner());
        Ok(Demo {
            exec,
            stack,
            tap_stats,
            options,
            platform,
            signals,
            created_netns,
            capture,
        })
    }

    /// `cmd` as run on the Linux side: `sudo ip netns exec <ns> <cmd>`.
    pub fn peer(&self, cmd: &str) -> String {
        format!("sudo ip netns exec {} {cmd}", self.options.netns)
    }

    /// Runs `server` until it ends or SIGINT / SIGTERM arrives.
    pub fn run<F: Future>(&self, server: F) {
        let reg = match self.platform.register(self.signals.as_raw_fd()) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("warning: cannot watch for Ctrl-C ({e}); kill the process to stop");
                self.exec.block_on(server);
                return;
            }
        };
        let stop = async {
            reg.readable().await;
        };
        let (server, stop) = (pin!(server), pin!(stop));
        match self.exec.block_on(select(server, stop)) {
            Either::Left(_) => {}
            Either::Right(_) => println!("\nstopping"),
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if let Some(c) = &self.capture {
            match c.finish() {
                Ok(s) => {
                    print!(
                        "captured {} frames ({} received, {} sent) to {}",
                        s.rx_frames + s.tx_frames,
                        s.rx_frames,
                        s.tx_frames,
                        c.path.display()
                    );
                    if s.lost > 0 {
                        print!("; {} frames could not be written", s.lost);
                    }
                    println!();
                }
                Err(e) => eprintln!("warning: {e}"),
            }
        }
        if self.created_netns {
            match ip(&["netns", "del", &self.options.netns]) {
                Ok(()) => println!("removed namespace {}", self.options.netns),
                Err(e) => eprintln!("warning: {e}"),
            }
        }
    }
}

/// Blocks SIGINT and SIGTERM for this thread (and threads it starts later) and returns a
/// non-blocking signalfd that becomes readable when one arrives. Child processes started with
/// `std::process::Command` get a clean signal mask.
fn block_exit_signals() -> Result<OwnedFd, String> {
    // SAFETY: `sigset_t` is plain old data; sigemptyset initialises it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t for each call; the signal numbers are valid.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
    }
    // SAFETY: `set` is initialised; a null old-set pointer is allowed.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(format!(
            "pthread_sigmask: {}",
            std::io::Error::from_raw_os_error(r)
        ));
    }
    // SAFETY: -1 asks for a new fd; `set` is initialised; the flags are valid.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("signalfd: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by signalfd, is open, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The iperf3 example's listener (its default backlog of connections, each with the
    /// stream buffers) fits the TCP share of an example's pool (three quarters of it, the
    /// stack's default): binding it fails otherwise.
    #[test]
    fn the_iperf3_listener_fits_the_pool() {
        let config = crate::iperf3::Iperf3Config::default();
        let per_connection = zcnet_stack::tcp::TcpBuffers::with_capacity(
            crate::iperf3::STREAM_BUFFER,
            crate::iperf3::STREAM_BUFFER,
        )
        .frames();
        let share = POOL_SLOTS * 3 / 4;
        assert!(
            config.backlog * per_connection <= share,
            "{} connections of {per_connection} frames against a share of {share}",
            config.backlog
        );
    }

    fn parse(a: &[&str]) -> Result<Options, String> {
        Options::parse(a.iter().map(|s| s.to_string()))
    }

    #[test]
    fn options() {
        assert_eq!(parse(&[]).unwrap(), Options::default());
        let o = parse(&[
            "--netns",
            "n1",
            "--tap",
            "t1",
            "-v",
            "--mtu",
            "9000",
            "--attach",
            "--pcap",
            "x.pcap",
            "-vv",
            "--no-offloads",
        ])
        .unwrap();
        assert_eq!(
            o,
            Options {
                netns: "n1".into(),
                tap: "t1".into(),
                mtu: 9000,
                attach: true,
                pcap: Some("x.pcap".into()),
                verbosity: 3,
                no_offloads: true,
            }
        );
        assert!(parse(&["--mtu"]).is_err());
        assert!(parse(&["--pcap"]).is_err());
        assert!(parse(&["--mtu", "x"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
    }
}
