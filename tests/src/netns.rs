//! zcnet against the real Linux stack: a network namespace the test creates, holding the kernel
//! side of a TAP whose fd zcnet drives.
//!
//! ```text
//!   test process (root namespace)                 namespace zc-<pid>-<n>
//!   ┌──────────────────────────────┐              ┌─────────────────────────────────┐
//!   │ zcnet stack 10.77.0.2/24     │  tun fd      │ zct<pid>n<n>  10.77.0.1/24 (up) │
//!   │   └─ zcnet_tap::Tap ─────────┼──────────────┼─► Linux TCP/IP, ping, python3    │
//!   └──────────────────────────────┘              └─────────────────────────────────┘
//! ```
//!
//! The TAP is created by our process in the root namespace ([`zcnet_tap::Tap::open`]), then its
//! kernel-side interface is moved into the namespace (`ip link set <tap> netns <ns>`); the fd
//! keeps working across the move. So zcnet stays in this process while its only peer is the
//! kernel inside a namespace nobody else uses: traffic never reaches the host's own interfaces,
//! and each test has its own namespace and TAP, so tests run in parallel threads.
//!
//! Teardown: dropping [`Netns`] (also while a test panics) deletes the namespace, which deletes
//! the TAP interface with it (the kernel removes a dying namespace's TAP interfaces; zcnet's
//! leaked fd then reads `EBADFD` and goes quiet). [`ChildGuard`] kills a still-running child
//! first, since a process inside the namespace would keep it alive.
//!
//! Needs root and `/dev/net/tun`; without them [`require_root_and_tun`] panics with a clear
//! message: these tests fail, they are never skipped.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use zcnet_buffer::{FramePool, PoolConfig};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::time::{now, sleep};
use zcnet_executor::Executor;
use zcnet_stack::{Config, Ipv4Address, Ipv4Cidr, Ipv4Config, Stack, StackResources, StaticV4};
use zcnet_tap::{Tap, TapConfig, TapStatsHandle};

use crate::audit::assert_slots_back;

/// The Linux side's address, inside the namespace.
pub const LINUX_ADDR: Ipv4Address = Ipv4Address::new(10, 77, 0, 1);
/// zcnet's address.
pub const ZCNET_ADDR: Ipv4Address = Ipv4Address::new(10, 77, 0, 2);
/// Sockets in a [`TapNet`]'s stack.
pub const SOCKETS: usize = 32;

/// Panics with a clear message unless we are root and `/dev/net/tun` and `ip` exist.
pub fn require_root_and_tun() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "TAP/netns tests need root (network namespaces and TAP devices); run the suite as root"
    );
    assert!(
        std::path::Path::new("/dev/net/tun").exists(),
        "TAP/netns tests need /dev/net/tun (modprobe tun)"
    );
    let ip = Command::new("ip").arg("-V").output();
    assert!(
        matches!(ip, Ok(ref o) if o.status.success()),
        "TAP/netns tests need iproute2's `ip` (apt-get install iproute2)"
    );
}

fn unique() -> (u32, usize) {
    static N: AtomicUsize = AtomicUsize::new(0);
    (std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Runs `cmd` to completion and returns its stdout; panics with its output if it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace named `zc-<pid>-<n>`, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a fresh, uniquely named namespace with its loopback up.
    pub fn new() -> Netns {
        Self::with_prefix("zc")
    }

    /// Like [`new`](Self::new), named `<prefix>-<pid>-<n>`: a test or benchmark with a prefix
    /// of its own can find (and remove) namespaces an earlier, killed run of it left behind.
    pub fn with_prefix(prefix: &str) -> Netns {
        require_root_and_tun();
        let (pid, n) = unique();
        let name = format!("{prefix}-{pid}-{n}");
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n <ns> <args>`; panics if it fails.
    pub fn ip(&self, args: &[&str]) {
        run(Command::new("ip").args(["-n", &self.name]).args(args));
    }

    /// A command running `program` inside the namespace (`ip netns exec <ns> <program>`).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Moves the root-namespace interface `ifname` into this namespace, gives it `cidr`
    /// (e.g. `10.77.0.1/24`) and brings it up.
    pub fn adopt(&self, ifname: &str, cidr: &str) {
        run(Command::new("ip").args(["link", "set", ifname, "netns", &self.name]));
        self.ip(&["addr", "add", cidr, "dev", ifname]);
        self.ip(&["link", "set", ifname, "up"]);
    }
}

impl Netns {
    /// Moves the root-namespace interface `ifname` into this namespace, gives it each address
    /// in `cidrs` (IPv4 or IPv6, e.g. `10.77.0.1/24`, `fd00:77::1/64`, `fe80::1/64`) and brings
    /// it up. IPv6 addresses are added with `nodad`, so they are usable at once (no duplicate
    /// address detection delay), and the kernel generates no link-local address of its own
    /// (`addrgenmode none`): the interface has exactly the addresses given.
    pub fn adopt_with(&self, ifname: &str, cidrs: &[&str]) {
        run(Command::new("ip").args(["link", "set", ifname, "netns", &self.name]));
        self.ip(&["link", "set", ifname, "addrgenmode", "none"]);
        for cidr in cidrs {
            if cidr.contains(':') {
                self.ip(&["-6", "addr", "add", cidr, "dev", ifname, "nodad"]);
            } else {
                self.ip(&["addr", "add", cidr, "dev", ifname]);
            }
        }
        self.ip(&["link", "set", ifname, "up"]);
    }
}

impl Default for Netns {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Runs on panic too. Deleting the namespace deletes the TAP interface in it.
        let r = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        match r {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "warning: ip netns del {} failed: {}",
                self.name,
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("warning: cannot run ip netns del {}: {e}", self.name),
        }
    }
}

/// A name for a TAP interface, unique in this process and at most 15 bytes.
pub fn tap_name() -> String {
    if_name("zct")
}

/// A name for a network interface (a TAP, a veth end), `<prefix><pid>n<n>`, unique in this
/// process. Panics if it would pass Linux's 15 bytes (a prefix of up to 4 bytes always fits a
/// 7-digit pid and 999 names).
pub fn if_name(prefix: &str) -> String {
    let (pid, n) = unique();
    let name = format!("{prefix}{pid}n{n}");
    assert!(name.len() <= 15, "interface name {name} is too long");
    name
}

/// A zcnet stack (10.77.0.2/24) over a TAP whose kernel side (10.77.0.1/24) lives in a fresh
/// namespace; the stack's runner is spawned on `exec`.
#[derive(Debug)]
pub struct TapNet {
    /// The executor the stack runs on (real time, epoll reactor with the TAP fd).
    pub exec: &'static Executor,
    /// The executor's platform (the reactor a new TAP registers with).
    pub platform: &'static LinuxPlatform,
    /// The stack.
    pub stack: Stack,
    /// The pool the TAP receives into and transmits from.
    pub pool: &'static FramePool,
    /// The TAP driver's counters.
    pub tap_stats: TapStatsHandle,
    /// The TAP interface's name (inside [`netns`](Self::netns)).
    pub tap_name: String,
    /// The namespace holding the Linux side; deleted when the `TapNet` drops.
    pub netns: Netns,
    /// Receive slots the TAP keeps posted while idle
    /// ([`TapConfig::posted_rx_slots`]: 1, or 33 with `rx_gso`).
    pub rx_posted: usize,
}

/// Pool slots that hold a whole frame at `mtu` and the TAP's virtio-net header in front of it
/// (the TAP's default configuration: [`TapConfig::slot_size`]).
pub fn slot_size_for(mtu: usize) -> usize {
    TapConfig::new("").with_mtu(mtu).slot_size()
}

impl TapNet {
    /// Builds the namespace, the TAP (MTU `mtu` on both sides), and the stack.
    pub fn new(mtu: usize) -> TapNet {
        Self::with_sockets::<SOCKETS>(mtu)
    }

    /// Like [`new`](Self::new), with a socket table of `N` slots instead of [`SOCKETS`]: for a
    /// test that holds more connections at once (the soak test's 100 `wrk` clients, its
    /// listeners' backlogs and the connections in TIME-WAIT).
    pub fn with_sockets<const N: usize>(mtu: usize) -> TapNet {
        Self::build::<N>(
            mtu,
            |netns, tap| netns.adopt(tap, &format!("{LINUX_ADDR}/24")),
            |_| {},
            |c| c,
        )
    }

    /// Like [`new`](Self::new), with the TAP's configuration adjusted by `tap` (which gets
    /// [`new`](Self::new)'s: the name and MTU set, the defaults otherwise), e.g. an offload
    /// turned off.
    pub fn with_tap(mtu: usize, tap: impl FnOnce(TapConfig) -> TapConfig) -> TapNet {
        Self::build::<SOCKETS>(
            mtu,
            |netns, name| netns.adopt(name, &format!("{LINUX_ADDR}/24")),
            |_| {},
            tap,
        )
    }

    /// Like [`new`](Self::new), with the Linux side's addresses and the stack's configuration
    /// chosen by the test: the kernel side gets exactly `linux_addrs` (see
    /// [`Netns::adopt_with`]: IPv6 without DAD, no kernel-made link-local address), and
    /// `configure` adjusts the stack's [`Config`], which starts as [`new`](Self::new)'s (static
    /// [`ZCNET_ADDR`]/24, no IPv6). For example, `Ipv4Config::Dhcp` with a DHCP server in the
    /// namespace, or a static IPv6 address.
    pub fn with(mtu: usize, linux_addrs: &[&str], configure: impl FnOnce(&mut Config)) -> TapNet {
        Self::with_all(mtu, linux_addrs, configure, |c| c)
    }

    /// [`with`](Self::with), with the TAP's configuration adjusted by `tap` as in
    /// [`with_tap`](Self::with_tap).
    pub fn with_all(
        mtu: usize,
        linux_addrs: &[&str],
        configure: impl FnOnce(&mut Config),
        tap: impl FnOnce(TapConfig) -> TapConfig,
    ) -> TapNet {
        Self::build::<SOCKETS>(
            mtu,
            |netns, name| netns.adopt_with(name, linux_addrs),
            configure,
            tap,
        )
    }

    /// The namespace, the TAP (configured by `tap`, its kernel side moved in by `adopt`), and
    /// the stack (static [`ZCNET_ADDR`]/24, then `configure`) with `N` socket slots.
    fn build<const N: usize>(
        mtu: usize,
        adopt: impl FnOnce(&Netns, &str),
        configure: impl FnOnce(&mut Config),
        tap: impl FnOnce(TapConfig) -> TapConfig,
    ) -> TapNet {
        let netns = Netns::new();
        let platform = LinuxPlatform::leak().expect("epoll");
        let exec = Executor::leak(platform);
        // 8 MiB of slots (at least 512): the examples' listeners reserve their TCP budgets
        // (iperf3: 8 sockets of 128 frames) when they bind.
        let slot_size = slot_size_for(mtu);
        let slots = (8 * 1024 * 1024 / slot_size).max(512);
        let pool = FramePool::leak(PoolConfig::new(slots).with_slot_size(slot_size)).expect("pool");
        let tap_name = tap_name();
        let tap_config = tap(TapConfig::new(&tap_name).with_mtu(mtu));
        let tap = Tap::open(platform, pool, &tap_config)
            .unwrap_or_else(|e| panic!("cannot open TAP {tap_name}: {e}"));
        let tap_stats = tap.stats_handle();
        let rx_posted = tap_config.posted_rx_slots(slot_size);
        adopt(&netns, &tap_name);
        let resources: &'static StackResources<N> = StackResources::leak();
        let mut config = Config {
            ipv4: Ipv4Config::Static(StaticV4 {
                address: Ipv4Cidr::new(ZCNET_ADDR, 24),
                gateway: None,
            }),
            ..Config::new(crate::secret::from_os())
        };
        configure(&mut config);
        // Boxed: `Stack::shutdown` gives it back, and dropping it closes the TAP.
        let (stack, runner) =
            Stack::new(exec, pool, Box::new(tap), config, resources).expect("stack");
        runner.spawn(exec.local_spawner());
        TapNet {
            exec,
            platform,
            stack,
            pool,
            tap_stats,
            tap_name,
            netns,
            rx_posted,
        }
    }
}

impl TapNet {
    /// The end-of-test pool audit ([`assert_slots_back`]): every slot back, the ones the TAP
    /// keeps posted for its next read ([`rx_posted`](Self::rx_posted)) excepted. Call it once
    /// the test's sockets are closed and dropped and the stack has run.
    pub fn assert_slots_back(&self) {
        assert_slots_back(self.pool, self.rx_posted);
    }
}

impl Drop for TapNet {
    /// Every TAP test ends with an exact pool audit: the stack is shut down (if the test did
    /// not), the TAP driver it gives back dropped (the TAP closes), the test's tasks get a
    /// moment to see their sockets fail and let go of their frames, and then every slot must
    /// be free. Skipped while a test is already panicking (its own failure is the report).
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Ok(driver) = self.stack.shutdown() {
            drop(driver);
        }
        self.exec.block_on(sleep(Duration::from_millis(100)));
        crate::audit::assert_all_free(self.pool);
    }
}

/// A child process, killed (and reaped) on drop if it still runs.
#[derive(Debug)]
pub struct ChildGuard(pub Child);

impl ChildGuard {
    /// Spawns `cmd` with stdout and stderr piped (keep their output small: they are read after
    /// the child exits).
    pub fn spawn(cmd: &mut Command) -> ChildGuard {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {cmd:?}: {e}"));
        ChildGuard(child)
    }

    /// Waits for the child without blocking the executor (polls `try_wait` between 5 ms
    /// sleeps); kills it and panics if it takes longer than `limit`. Returns its status, stdout
    /// and stderr.
    pub async fn wait(&mut self, limit: Duration) -> (ExitStatus, String, String) {
        let deadline = now().await + limit;
        let status = loop {
            match self.0.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => panic!("waiting for the child: {e}"),
            }
            if now().await >= deadline {
                let _ = self.0.kill();
                let _ = self.0.wait();
                let (out, err) = self.output();
                panic!(
                    "child still running after {limit:?}; killed.\nstdout: {out}\nstderr: {err}"
                );
            }
            sleep(Duration::from_millis(5)).await;
        };
        let (out, err) = self.output();
        (status, out, err)
    }

    fn output(&mut self) -> (String, String) {
        let mut out = String::new();
        let mut err = String::new();
        if let Some(s) = self.0.stdout.as_mut() {
            let _ = s.read_to_string(&mut out);
        }
        if let Some(s) = self.0.stderr.as_mut() {
            let _ = s.read_to_string(&mut err);
        }
        (out, err)
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
