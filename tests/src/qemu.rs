//! The example kernel (`examples/qemu-kernel/`, a freestanding x86_64 PVH kernel running zcnet
//! on QEMU's virtio-net) booted under QEMU, for `tests/tests/qemu_kernel.rs`.
//!
//! * [`kernel`] builds the kernel once per test process (`cargo build --release` inside its own
//!   directory, whose `.cargo/config.toml` selects the freestanding flags, with a cleared
//!   environment so the outer cargo's variables — `RUSTFLAGS`, `CARGO_TARGET_DIR`, … — do not
//!   leak into the nested build) and returns the ELF's path.
//! * [`qemu_args`] is the QEMU command line for a [`Machine`] (TCG; q35 with a modern-only
//!   virtio-net-pci, or microvm without ACPI with a modern virtio-net on virtio-mmio; serial on
//!   stdio, `isa-debug-exit`, the NIC on the given `-netdev`).
//! * [`Qemu`] runs it, collects the guest's serial output from QEMU's stdout on a thread, waits
//!   for lines and for the exit code, and kills QEMU on drop. Every wait is bounded; a failure
//!   (including any panic in the test while a [`Qemu`] is alive) prints the whole serial log.
//! * [`run_bounded`] runs a host tool (curl, iperf3, python3, …) with a time limit.
//!
//! Exit codes: the guest writes to `isa-debug-exit` (port 0xf4); QEMU then exits with
//! `(value << 1) | 1`: [`EXIT_PASS`] (33), [`EXIT_FAIL`] (35, a guest-detected failure) or
//! [`EXIT_PANIC`] (37).

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// QEMU's exit code when the guest reports success through `isa-debug-exit`.
pub const EXIT_PASS: i32 = 33;
/// QEMU's exit code when the guest detected a failure (e.g. `GET /exit` found a broken invariant).
pub const EXIT_FAIL: i32 = 35;
/// QEMU's exit code when the guest panicked.
pub const EXIT_PANIC: i32 = 37;

/// The QEMU binary.
pub const QEMU: &str = "qemu-system-x86_64";

/// How long the nested `cargo build` of the kernel may take (a cold build of the kernel and
/// its dependencies on a loaded 2-core machine, or waiting for another build's lock).
const BUILD_LIMIT: Duration = Duration::from_secs(900);

/// The kernel's cargo project, `examples/qemu-kernel/`.
pub fn kernel_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("examples")
        .join("qemu-kernel")
}

/// The kernel's ELF, built on first use (once per process; later calls wait for the first
/// build and return its result). Panics with cargo's output if the build fails.
pub fn kernel() -> &'static Path {
    static ELF: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match ELF.get_or_init(build_kernel) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// `cargo build --release` in the kernel's directory; the ELF is the one `bin` artifact cargo
/// reports (so the test does not hard-code the binary's name).
fn build_kernel() -> Result<PathBuf, String> {
    let dir = kernel_dir();
    if !dir.join("Cargo.toml").exists() {
        return Err(format!("no kernel project at {}", dir.display()));
    }
    let mut cmd = Command::new("cargo");
    cmd.args([
        "build",
        "--release",
        "--message-format=json-render-diagnostics",
    ])
    // The kernel's .cargo/config.toml (target, link flags) is found from the cwd.
    .current_dir(&dir)
    // Nothing of the outer cargo's environment: RUSTFLAGS (e.g. the ASan or loom runs'),
    // CARGO_TARGET_DIR, CARGO_ENCODED_RUSTFLAGS, RUSTC_BOOTSTRAP, CARGO_BUILD_TARGET,
    // RUSTDOCFLAGS, and the CARGO_* / CARGO_PKG_* cargo sets for this test binary.
    .env_clear();
    for var in [
        "PATH",
        "HOME",
        "RUSTUP_HOME",
        "CARGO_HOME",
        "RUSTUP_TOOLCHAIN",
        "RUSTUP_AUTO_INSTALL",
        "TMPDIR",
    ] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    let started = Instant::now();
    let out = run_bounded(&mut cmd, BUILD_LIMIT);
    if !out.status.success() {
        return Err(format!(
            "building the kernel ({} in {}) failed ({}):\n{}",
            "cargo build --release",
            dir.display(),
            out.status,
            out.stderr
        ));
    }
    let bins: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains(r#""reason":"compiler-artifact""#) && l.contains(r#""bin""#))
        .filter_map(|l| {
            let rest = &l[l.find(r#""executable":""#)? + r#""executable":""#.len()..];
            Some(&rest[..rest.find('"')?])
        })
        .collect();
    match bins[..] {
        [elf] if Path::new(elf).is_file() => {
            eprintln!("kernel {elf} built in {:.1?}", started.elapsed());
            Ok(PathBuf::from(elf))
        }
        _ => Err(format!(
            "building the kernel: expected one bin artifact, cargo reported {bins:?}\n{}",
            out.stderr
        )),
    }
}

/// The QEMU machine the kernel boots on: the same kernel finds its NIC, interrupt route and
/// clock reference on either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Machine {
    /// `q35`: virtio-net-pci (modern only, no option ROM), MSI-X, an HPET.
    Q35,
    /// `microvm,acpi=off`: no PCI, no HPET; a modern virtio-net on virtio-mmio (QEMU's default
    /// `force-legacy=true` would give the legacy interface), its line through the IOAPIC, the
    /// PIT. QEMU names the transport on the kernel command line (`virtio_mmio.device=`).
    Microvm,
}

impl Machine {
    /// Both machines.
    pub const ALL: [Machine; 2] = [Machine::Q35, Machine::Microvm];

    /// Its QEMU name.
    pub fn name(self) -> &'static str {
        match self {
            Machine::Q35 => "q35",
            Machine::Microvm => "microvm",
        }
    }

    /// `-machine`'s value.
    pub fn qemu_machine(self) -> &'static str {
        match self {
            Machine::Q35 => "q35",
            Machine::Microvm => "microvm,acpi=off",
        }
    }

    /// The arguments that add the NIC on `-netdev` id `n0`.
    pub fn nic_args(self) -> &'static [&'static str] {
        match self {
            Machine::Q35 => &[
                "-device",
                "virtio-net-pci,netdev=n0,disable-legacy=on,romfile=",
            ],
            Machine::Microvm => &[
                "-global",
                "virtio-mmio.force-legacy=false",
                "-device",
                "virtio-net-device,netdev=n0",
            ],
        }
    }

    /// What the kernel's `/stats` reports as `kernel.machine.nic_transport` on this machine.
    pub fn nic_transport(self) -> &'static str {
        match self {
            Machine::Q35 => "pci",
            Machine::Microvm => "mmio",
        }
    }

    /// What the kernel's `/stats` reports as `kernel.machine.clock_reference` on this machine
    /// (q35 has an HPET, microvm only the PIT).
    pub fn clock_reference(self) -> &'static str {
        match self {
            Machine::Q35 => "hpet",
            Machine::Microvm => "pit",
        }
    }
}

/// QEMU's arguments: TCG (no KVM on these machines) with CPU model `max` (RDRAND, the kernel's
/// source for the stack's secret), one CPU with `maxcpus=2` (TCG before QEMU 8.1 drops the
/// guest's memory fences when the machine can only have one CPU, and virtio interrupt requests
/// are then lost now and then: zcnet-virtio's crate docs), `machine`, 256 MiB, no display, the serial
/// port on stdio, no reboot, `isa-debug-exit` at 0xf4, the PVH `kernel` with command line
/// `append`, and the machine's virtio-net ([`Machine::nic_args`]) on `-netdev <netdev>`, whose
/// id must be `n0` (e.g. `user,id=n0,hostfwd=tcp:127.0.0.1:8080-:80`).
pub fn qemu_args(machine: Machine, kernel: &Path, netdev: &str, append: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "-accel",
        "tcg",
        "-cpu",
        "max",
        "-smp",
        "1,maxcpus=2",
        "-machine",
        machine.qemu_machine(),
        "-m",
        "256M",
        "-display",
        "none",
        "-serial",
        "stdio",
        "-no-reboot",
        "-device",
        "isa-debug-exit,iobase=0xf4,iosize=0x04",
        "-kernel",
    ]
    .map(String::from)
    .to_vec();
    a.push(kernel.display().to_string());
    a.extend(["-append", append].map(String::from));
    a.extend(machine.nic_args().iter().map(|s| s.to_string()));
    a.extend(["-netdev", netdev].map(String::from));
    a
}

/// Arguments that give QEMU a human monitor (HMP) on the Unix socket `path`, for [`hmp`].
pub fn monitor_args(path: &Path) -> [String; 2] {
    [
        "-monitor".to_string(),
        format!("unix:{},server=on,wait=off", path.display()),
    ]
}

/// Runs one monitor command (e.g. `set_link n0 off`) on the HMP socket at `path` and returns
/// what QEMU printed for it. Panics when the monitor does not answer within 10 s.
pub fn hmp(path: &Path, command: &str) -> String {
    use std::io::{Read, Write};
    let mut sock = std::os::unix::net::UnixStream::connect(path)
        .unwrap_or_else(|e| panic!("monitor {}: {e}", path.display()));
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let read_prompt = |sock: &mut std::os::unix::net::UnixStream| {
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !got.ends_with(b"(qemu) ") {
            let n = sock.read(&mut buf).unwrap_or_else(|e| {
                panic!("monitor: {e} after {:?}", String::from_utf8_lossy(&got))
            });
            assert!(n > 0, "monitor closed: {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    read_prompt(&mut sock); // the banner
    sock.write_all(format!("{command}\n").as_bytes())
        .expect("monitor write");
    read_prompt(&mut sock)
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed), for a
/// `hostfwd` rule.
pub fn free_local_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

/// Output collected by a reader thread.
#[derive(Debug, Default)]
struct Stream {
    text: String,
    closed: bool,
}

type Shared = Arc<(Mutex<Stream>, Condvar)>;

/// Copies `from` into a [`Shared`] stream until EOF, waking waiters on every chunk.
fn collect(mut from: impl Read + Send + 'static) -> (Shared, JoinHandle<()>) {
    let shared: Shared = Arc::default();
    let s = shared.clone();
    let h = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            let n = from.read(&mut buf).unwrap_or(0);
            let (lock, cv) = &*s;
            let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
            if n == 0 {
                st.closed = true;
                cv.notify_all();
                return;
            }
            st.text.push_str(&String::from_utf8_lossy(&buf[..n]));
            cv.notify_all();
        }
    });
    (shared, h)
}

fn text_of(s: &Shared) -> String {
    s.0.lock().unwrap_or_else(|e| e.into_inner()).text.clone()
}

/// Waits up to `limit` for the reader threads to see EOF (a grandchild holding the pipe open
/// must not hang the test).
fn join_readers(handles: Vec<JoinHandle<()>>, limit: Duration) {
    let deadline = Instant::now() + limit;
    for h in handles {
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if h.is_finished() {
            let _ = h.join();
        }
    }
}

/// A finished host tool.
#[derive(Debug)]
pub struct ToolOutput {
    /// Its exit status.
    pub status: ExitStatus,
    /// What it wrote on stdout.
    pub stdout: String,
    /// What it wrote on stderr.
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
}

impl ToolOutput {
    /// Panics (with stdout and stderr) unless the tool exited 0.
    pub fn assert_success(&self, what: &str) {
        assert!(
            self.status.success(),
            "{what} failed ({})\nstdout: {}\nstderr: {}",
            self.status,
            self.stdout,
            self.stderr
        );
    }
}

/// Runs `cmd` (stdin from /dev/null, stdout and stderr collected) to completion; kills it and
/// panics with its output if it runs longer than `limit`.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> ToolOutput {
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {cmd:?}: {e}"));
    let (out, h1) = collect(child.stdout.take().expect("piped stdout"));
    let (err, h2) = collect(child.stderr.take().expect("piped stderr"));
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => panic!("waiting for {cmd:?}: {e}"),
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            join_readers(vec![h1, h2], Duration::from_secs(2));
            panic!(
                "{cmd:?} still running after {limit:?}; killed.\nstdout: {}\nstderr: {}",
                text_of(&out),
                text_of(&err)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    join_readers(vec![h1, h2], Duration::from_secs(5));
    ToolOutput {
        status,
        stdout: text_of(&out),
        stderr: text_of(&err),
        elapsed: started.elapsed(),
    }
}

/// A running QEMU whose stdout (the guest's serial port) and stderr are collected. Dropping it
/// kills QEMU; if the thread is panicking (a failed assertion) the whole serial log is printed
/// first, unless the panic message already held it.
#[derive(Debug)]
pub struct Qemu {
    child: Child,
    serial: Shared,
    stderr: Shared,
    readers: Vec<JoinHandle<()>>,
    started: Instant,
    log_shown: bool,
}

impl Qemu {
    /// Spawns `cmd` (QEMU, or e.g. `ip netns exec <ns> qemu-system-x86_64`, with
    /// [`qemu_args`]), stdin from /dev/null.
    pub fn spawn(cmd: &mut Command) -> Qemu {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {cmd:?}: {e}"));
        let (serial, h1) = collect(child.stdout.take().expect("piped stdout"));
        let (stderr, h2) = collect(child.stderr.take().expect("piped stderr"));
        Qemu {
            child,
            serial,
            stderr,
            readers: vec![h1, h2],
            started: Instant::now(),
            log_shown: false,
        }
    }

    /// Time since QEMU was spawned.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The serial output so far.
    pub fn serial_log(&self) -> String {
        text_of(&self.serial)
    }

    /// The serial log and QEMU's stderr, for failure messages.
    fn logs(&self) -> String {
        format!(
            "--- guest serial log (QEMU stdout), {:.1?} after start ---\n{}\n--- QEMU stderr ---\n{}\n--- end ---",
            self.elapsed(),
            self.serial_log(),
            text_of(&self.stderr)
        )
    }

    /// Panics with `msg` and the whole serial log.
    pub fn fail(&mut self, msg: &str) -> ! {
        self.log_shown = true;
        // QEMU closing its stdout means it is exiting: give it a moment, for its exit code.
        let closed = self
            .serial
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed;
        let deadline = Instant::now() + Duration::from_secs(2);
        while closed && matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let status = match self.child.try_wait() {
            Ok(Some(s)) => format!("QEMU exited: {s}"),
            _ => "QEMU still running".to_string(),
        };
        panic!("{msg} ({status})\n{}", self.logs());
    }

    /// Panics with `msg` and the serial log unless `ok`.
    pub fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        if !ok {
            self.fail(&msg());
        }
    }

    /// Waits up to `limit` for a complete serial line starting with `prefix` and returns it
    /// (without the line ending). Fails if QEMU closes its stdout (exits) first.
    pub fn wait_for_line(&mut self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        let serial = self.serial.clone();
        let (lock, cv) = &*serial;
        let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let complete = match st.text.rfind('\n') {
                Some(i) => &st.text[..i],
                None => "",
            };
            if let Some(line) = complete
                .lines()
                .map(|l| l.trim_end_matches('\r'))
                .find(|l| l.starts_with(prefix))
            {
                return line.to_string();
            }
            let now = Instant::now();
            if st.closed || now >= deadline {
                let why = if st.closed {
                    "QEMU closed its output (exited)"
                } else {
                    "timed out"
                };
                drop(st);
                self.fail(&format!(
                    "no serial line starting with {prefix:?} within {limit:?}: {why}"
                ));
            }
            st = cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits up to `limit` for QEMU to exit and returns its status; kills it and fails if it
    /// is still running then.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    join_readers(std::mem::take(&mut self.readers), Duration::from_secs(2));
                    return status;
                }
                Ok(None) => {}
                Err(e) => self.fail(&format!("waiting for QEMU: {e}")),
            }
            if Instant::now() >= deadline {
                self.kill();
                self.fail(&format!(
                    "QEMU still running {limit:?} after the exit request"
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits up to `limit` for QEMU to exit with [`EXIT_PASS`] (the guest's `isa-debug-exit`
    /// success code); fails with the serial log on any other outcome.
    pub fn expect_pass(&mut self, limit: Duration) {
        let status = self.wait_exit(limit);
        if status.code() != Some(EXIT_PASS) {
            let meaning = match status.code() {
                Some(EXIT_FAIL) => "the guest detected a failure",
                Some(EXIT_PANIC) => "the guest panicked",
                _ => "not a guest exit code",
            };
            self.fail(&format!(
                "QEMU exited with {status} ({meaning}); expected {EXIT_PASS}"
            ));
        }
    }

    /// Kills QEMU (if still running) and reaps it.
    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        join_readers(std::mem::take(&mut self.readers), Duration::from_secs(2));
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() && !self.log_shown {
            eprintln!("{}", self.logs());
        }
    }
}

/// The `key=value` fields of a serial line such as
/// `IDLE seconds=3 wakeups=1 timer=1 device=0 other=0 polls=0`, as numbers; panics if `key` is
/// missing or not a number.
pub fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .parse()
        .unwrap_or_else(|e| panic!("{key} in {line:?}: {e}"))
}

/// A directory of the test's own (`$TMPDIR/zcnet-<tag>`), emptied on creation and removed on
/// drop (also when the test fails).
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/zcnet-<tag>` afresh.
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("zcnet-{tag}"));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
