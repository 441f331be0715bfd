//! The example kernel (`examples/qemu-kernel/`: a freestanding x86_64 PVH kernel running zcnet
//! over QEMU's virtio-net) booted under QEMU (TCG) and driven by unmodified Linux tools, each
//! scenario on both machines the kernel supports ([`Machine`]): `q35` (virtio-net-pci, MSI-X,
//! HPET) and `microvm` without ACPI (virtio-mmio, its line through the IOAPIC, the PIT). A
//! scenario is one function taking the machine; [`on_each_machine!`] makes it two tests,
//! `<scenario>::q35` and `<scenario>::microvm`, and `/stats` must show the machine's own NIC
//! transport and clock reference:
//!
//! * user networking (slirp, no root): DHCP from QEMU, `curl` through a `hostfwd` on 127.0.0.1
//!   to the HTTP server (`/`, `/stats`), then `GET /exit` makes the guest check its invariants
//!   and leave QEMU with the pass code;
//! * a TAP inside a network namespace the test makes (root and `/dev/net/tun`; fails, never
//!   skips, without them, like the other TAP tests): DHCP from `dnsmasq`, `ping`, a 20 MB TCP
//!   echo compared by SHA-256, `iperf3` both ways, UDP echo, `GET /exit`; QEMU's TAP backend
//!   offers checksum and segmentation offload, and `/stats` must show the driver negotiated
//!   them and used checksum offload;
//! * idle: with a static address and nothing on the wire, the guest's `hlt` loop wakes only for
//!   its own measurement timer, and the stack is not polled at all;
//! * no random source: on TCG's default CPU model, which lacks RDRAND, the kernel has nothing to
//!   draw the stack's secret from and stops at boot with a message and the failure code.
//!
//! QEMU is launched by the tests themselves (`zcnet_tests::qemu`); the guest's serial output is
//! QEMU's stdout, printed in full when a test fails. Traffic goes only to 127.0.0.1 (slirp with
//! `restrict=on`: nothing is routed to the outside) or into the test's own namespace. Every
//! test's name contains `qemu`: `scripts/test-all.sh` skips them in its AddressSanitizer run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use zcnet_examples::json::{self, Json};
use zcnet_tests::netns::{tap_name, ChildGuard, Netns};
use zcnet_tests::qemu::{
    field, free_local_port, hmp, kernel, monitor_args, qemu_args, run_bounded, Machine, Qemu,
    TempDir, ToolOutput, EXIT_FAIL, QEMU,
};

/// Makes each scenario function (`fn(Machine)`) a module of two tests, `q35` and `microvm`,
/// that run it on that machine.
macro_rules! on_each_machine {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use super::Machine;

            #[test]
            fn q35() {
                super::$scenario(Machine::Q35)
            }

            #[test]
            fn microvm() {
                super::$scenario(Machine::Microvm)
            }
        }
    )*};
}

on_each_machine!(
    qemu_kernel_serves_http_over_user_networking,
    qemu_kernel_over_tap_in_a_netns_dhcp_ping_echo_iperf3,
    qemu_kernel_idles_without_wakeups_or_polls,
    qemu_kernel_without_rdrand_stops_at_boot,
);

/// From spawning QEMU to the guest's `READY` line (boot takes 0.1–0.3 s; DHCP a moment).
const READY_LIMIT: Duration = Duration::from_secs(30);
/// From the `/exit` answer to QEMU's exit.
const EXIT_LIMIT: Duration = Duration::from_secs(10);
/// Any one host tool (curl, ping, python3, iperf3).
const TOOL_LIMIT: Duration = Duration::from_secs(60);

fn require_tool(tool: &str, version_arg: &str, package: &str) {
    let ok = Command::new(tool)
        .arg(version_arg)
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "this test needs `{tool}` (apt-get install {package}; .ci/run installs it)"
    );
}

/// `READY ip=A.B.C.D` → `A.B.C.D`.
fn ready_ip(line: &str) -> String {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix("ip="))
        .unwrap_or_else(|| panic!("no ip= in {line:?}"))
        .to_string()
}

/// `curl -sS -w "\n%{http_code}" <url>`, run by `cmd` (plain or inside a namespace): the body
/// and the status code.
fn curl(mut cmd: Command, url: &str) -> (String, String, ToolOutput) {
    let out = run_bounded(
        cmd.args(["-sS", "--max-time", "20", "-w", "\n%{http_code}", url]),
        TOOL_LIMIT,
    );
    out.assert_success(&format!("curl {url}"));
    let (body, code) = out
        .stdout
        .rsplit_once('\n')
        .unwrap_or_else(|| panic!("no status line from curl -w: {:?}", out.stdout));
    (body.to_string(), code.to_string(), out)
}

/// `/stats` parses as JSON and holds the stack's and the virtio driver's counters (which saw
/// at least this request's handshake and head, and no device error), the pool's occupancy, the
/// copy ledger, and the kernel's own counters (the traffic woke its idle loop through the
/// device; its kicks are the driver's doorbells and its NIC interrupts at least those the driver
/// was told of; the NIC's transport and the clock's reference are `machine`'s).
fn check_stats(body: &str, machine: Machine) {
    let j = json::parse(body.as_bytes()).unwrap_or_else(|e| panic!("/stats: {e}: {body}"));
    let num = |path: &[&str]| {
        j.path(path)
            .and_then(Json::as_u64)
            .unwrap_or_else(|| panic!("no number at {path:?} in /stats: {body}"))
    };
    assert!(num(&["stack", "frames_in"]) >= 2, "{body}");
    assert!(num(&["virtio", "rx_frames"]) >= 2, "{body}");
    assert_eq!(num(&["virtio", "device_errors"]), 0, "{body}");
    assert!(num(&["pool", "slots"]) > 0, "{body}");
    assert!(j.get("copy_ledger").is_some(), "no copy_ledger in {body}");
    assert!(num(&["kernel", "wakeups", "device"]) >= 1, "{body}");
    // The transport wrapper counts every doorbell the driver rang (on q35 each one register
    // write at the address read at set-up); the interrupt dispatcher every NIC interrupt.
    assert!(num(&["kernel", "nic", "kicks"]) >= 1, "{body}");
    // On q35 each doorbell is one write at the address read at set-up; virtio-mmio's doorbell
    // register is one write already, through the transport.
    let doorbells = j
        .path(&["kernel", "nic", "doorbells"])
        .and_then(Json::as_str);
    let expected = match machine {
        Machine::Q35 => "direct",
        Machine::Microvm => "transport",
    };
    assert_eq!(doorbells, Some(expected), "{body}");
    assert_eq!(
        num(&["kernel", "nic", "kicks"]),
        num(&["virtio", "rx_kicks"]) + num(&["virtio", "tx_kicks"]),
        "{body}"
    );
    let handled = [
        "rx_interrupts",
        "tx_interrupts",
        "shared_interrupts",
        "config_interrupts",
    ]
    .iter()
    .map(|k| num(&["virtio", k]))
    .sum::<u64>();
    assert!(handled >= 1, "{body}");
    assert!(num(&["kernel", "nic", "interrupts"]) >= handled, "{body}");
    let text = |path: &[&str]| {
        j.path(path)
            .and_then(Json::as_str)
            .unwrap_or_else(|| panic!("no string at {path:?} in /stats: {body}"))
            .to_string()
    };
    assert_eq!(
        text(&["kernel", "machine", "nic_transport"]),
        machine.nic_transport(),
        "{body}"
    );
    assert_eq!(
        text(&["kernel", "machine", "clock_reference"]),
        machine.clock_reference(),
        "{body}"
    );
}

/// Over a TAP QEMU's virtio-net offers checksum offload (its TAP backend has the virtio-net
/// header): `/stats` must show the driver took `VIRTIO_NET_F_CSUM` and `GUEST_CSUM` (feature
/// bits 0 and 1) and `HOST_TSO4` / `HOST_TSO6`, and used checksum offload: TCP frames sent with a partial checksum for the device to
/// complete, received frames the device vouched for, none left for the driver to complete.
fn check_checksum_offload(body: &str) {
    let j = json::parse(body.as_bytes()).unwrap_or_else(|e| panic!("/stats: {e}: {body}"));
    let num = |path: &[&str]| {
        j.path(path)
            .and_then(Json::as_u64)
            .unwrap_or_else(|| panic!("no number at {path:?} in /stats: {body}"))
    };
    let features = j
        .path(&["kernel", "nic", "features"])
        .and_then(Json::as_str)
        .and_then(|f| u64::from_str_radix(f.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| panic!("no kernel.nic.features in /stats: {body}"));
    assert_eq!(features & 0b11, 0b11, "CSUM and GUEST_CSUM: {body}");
    // HOST_TSO4 and HOST_TSO6 (bits 11, 12): the device would segment super-segments.
    let host_tso = (1 << 11) | (1 << 12);
    assert_eq!(features & host_tso, host_tso, "HOST_TSO4/6: {body}");
    assert!(num(&["virtio", "tx_checksum_offloaded"]) >= 1, "{body}");
    assert!(
        num(&["virtio", "rx_checksum_valid"]) + num(&["virtio", "rx_checksum_partial"]) >= 1,
        "{body}"
    );
    assert_eq!(num(&["virtio", "tx_checksum_completed"]), 0, "{body}");
    assert_eq!(num(&["virtio", "tx_bad_checksum_mark"]), 0, "{body}");
    // Large receive (the kernel's default `lro=1`): GUEST_TSO4/6 (bits 7, 8) and MRG_RXBUF
    // (bit 15); the host's large segments of the iperf3 run came up as chains the stack took.
    let large_receive = (1 << 7) | (1 << 8) | (1 << 15);
    assert_eq!(
        features & large_receive,
        large_receive,
        "GUEST_TSO4/6 and MRG_RXBUF: {body}"
    );
    assert!(num(&["virtio", "rx_merged"]) >= 1, "merged packets: {body}");
    assert_eq!(num(&["virtio", "rx_chains_dropped"]), 0, "{body}");
}

/// `GET /exit` (the guest answers, checks its invariants — pool audit, driver drop and error
/// counters zero — and writes the verdict to `isa-debug-exit`): QEMU must exit with 33.
fn exit_through_http(qemu: &mut Qemu, cmd: Command, url: &str) {
    let (body, code, _) = curl(cmd, url);
    eprintln!("GET /exit: {code} {body}");
    qemu.expect_pass(EXIT_LIMIT);
    assert_eq!(code, "200", "GET /exit: {body}");
}

/// User networking (slirp): DHCP from QEMU, `/` and `/stats` through a `hostfwd` on 127.0.0.1;
/// the link pulled and restored from QEMU's monitor (the guest sees both changes through the
/// configuration interrupt, leases its address again and serves `/stats` after); then
/// `GET /exit` → exit code 33.
fn qemu_kernel_serves_http_over_user_networking(machine: Machine) {
    require_tool(QEMU, "--version", "qemu-system-x86");
    require_tool("curl", "--version", "curl");
    let elf = kernel();
    let port = free_local_port();
    // Per machine and process: the two machines' tests (and another checkout's) run at once.
    let dir = TempDir::new(&format!(
        "qemu-user-net-{}-{}",
        machine.name(),
        std::process::id()
    ));
    let monitor = dir.0.join("monitor.sock");
    let netdev = format!("user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:80");
    let mut qemu = Qemu::spawn(
        Command::new(QEMU)
            .args(qemu_args(machine, elf, &netdev, "test=1"))
            .args(monitor_args(&monitor)),
    );
    let ready = qemu.wait_for_line("READY ", READY_LIMIT);
    eprintln!("{ready} after {:.2?}", qemu.elapsed());
    // slirp's DHCP server hands out 10.0.2.15 first, which is where hostfwd forwards.
    assert_eq!(ready_ip(&ready), "10.0.2.15", "{ready}");

    let base = format!("http://127.0.0.1:{port}");
    let (body, code, out) = curl(Command::new("curl"), &format!("{base}/"));
    assert_eq!(code, "200", "GET /: {body}");
    assert!(
        body.contains("zcnet") && body.contains("</html>"),
        "GET / is not the kernel's page: {body:?}"
    );
    eprintln!("GET / {} bytes in {:.2?}", body.len(), out.elapsed);

    let (body, code, _) = curl(Command::new("curl"), &format!("{base}/stats"));
    assert_eq!(code, "200", "GET /stats: {body}");
    check_stats(&body, machine);

    // Link state from the device: QEMU's `set_link` flips virtio-net's status bit and raises
    // the configuration interrupt; the guest prints what its stack saw.
    hmp(&monitor, "set_link n0 off");
    qemu.wait_for_line("LINK down", Duration::from_secs(10));
    hmp(&monitor, "set_link n0 on");
    qemu.wait_for_line("LINK up", Duration::from_secs(10));
    let (body, code, _) = curl(Command::new("curl"), &format!("{base}/stats"));
    assert_eq!(code, "200", "GET /stats after the link came back: {body}");
    let j = json::parse(body.as_bytes()).unwrap_or_else(|e| panic!("/stats: {e}: {body}"));
    let num = |path: &[&str]| j.path(path).and_then(Json::as_u64);
    assert_eq!(num(&["stack", "link_downs"]), Some(1), "{body}");
    assert!(
        num(&["virtio", "config_interrupts"]).is_some_and(|n| n >= 2),
        "both changes interrupted: {body}"
    );
    assert_eq!(
        j.path(&["stack", "link_up"]),
        Some(&Json::Bool(true)),
        "{body}"
    );
    // The DHCP client started over when the link came back: the lease was given up and
    // obtained again (3 changes: the first lease, its loss, the new one).
    assert!(
        num(&["stack", "config_changes"]).is_some_and(|n| n >= 3),
        "DHCP leased again after the link came back: {body}"
    );

    exit_through_http(&mut qemu, Command::new("curl"), &format!("{base}/exit"));
}

/// Waits until `path` contains `needle`; panics with the file's text after `limit`.
fn wait_for_text(path: &Path, needle: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in {} after {limit:?}: {text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Prints a file (dnsmasq's log) when dropped during a panic, beside the serial log.
struct ShowOnPanic(PathBuf);

impl Drop for ShowOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- {} ---\n{}",
                self.0.display(),
                std::fs::read_to_string(&self.0).unwrap_or_default()
            );
        }
    }
}

/// The namespace's side of the TAP. 10.79.0.0/24 is this test's own subnet (the other TAP tests
/// use 10.77.0.0/24); dnsmasq's range is the one address [`GUEST`].
const LINUX: &str = "10.79.0.1";
const GUEST: &str = "10.79.0.2";

/// `iperf3 -c GUEST -t 3 --json <extra>` in the namespace: exits 0, no error, both ends report
/// nonzero throughput. Returns (sent, received) bits per second.
fn iperf3(netns: &Netns, extra: &[&str]) -> (f64, f64) {
    let mut args = vec![
        "-c",
        GUEST,
        "-t",
        "3",
        "--json",
        "--connect-timeout",
        "5000",
    ];
    args.extend_from_slice(extra);
    let out = run_bounded(netns.command("iperf3").args(&args), TOOL_LIMIT);
    out.assert_success(&format!("iperf3 {args:?}"));
    let j = json::parse(out.stdout.as_bytes()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    assert!(
        j.get("error").is_none(),
        "iperf3 reported an error: {}",
        out.stdout
    );
    let bps = |which: &str| {
        j.path(&["end", which, "bits_per_second"])
            .and_then(Json::as_f64)
            .unwrap_or_else(|| panic!("no end.{which}.bits_per_second in {}", out.stdout))
    };
    let (sent, received) = (bps("sum_sent"), bps("sum_received"));
    assert!(
        sent > 0.0 && received > 0.0,
        "iperf3 {extra:?}: {sent} / {received} bit/s"
    );
    eprintln!(
        "iperf3 -c {extra:?}: sent {:.1} Mbit/s, received {:.1} Mbit/s",
        sent / 1e6,
        received / 1e6
    );
    (sent, received)
}

/// A TAP in a namespace of the test's own, QEMU running inside it: the guest leases its address
/// from dnsmasq, answers 100 pings without loss, echoes 20 MB of TCP byte-exact (SHA-256) while
/// the client writes and reads concurrently, serves `iperf3 -c`, `-R` and two `-P 4` tests in
/// a row, holds no pool slot in the stack after them, echoes UDP, and exits 33 on `GET /exit`.
fn qemu_kernel_over_tap_in_a_netns_dhcp_ping_echo_iperf3(machine: Machine) {
    require_tool(QEMU, "--version", "qemu-system-x86");
    for (tool, package) in [
        ("dnsmasq", "dnsmasq-base"),
        ("curl", "curl"),
        ("iperf3", "iperf3"),
        ("python3", "python3"),
    ] {
        require_tool(tool, "--version", package);
    }
    let elf = kernel();
    // Declared in teardown order's reverse: QEMU is killed first, then dnsmasq, then the
    // namespace (with the TAP) is deleted — also when the test panics.
    let netns = Netns::new();
    let tap = tap_name();
    // The TAP is made (persistent) and configured before QEMU attaches to it, and dnsmasq is
    // listening before the guest boots: the guest's first DHCPDISCOVER is answered, not lost
    // to a link that is not up yet (which would cost a retransmission timeout).
    netns.ip(&["tuntap", "add", "dev", &tap, "mode", "tap"]);
    netns.ip(&["addr", "add", &format!("{LINUX}/24"), "dev", &tap]);
    netns.ip(&["link", "set", &tap, "up"]);
    let dir = TempDir::new(netns.name());
    let log = dir.0.join("dnsmasq.log");
    // dnsmasq touches nothing of the host: no configuration file, no /etc/hosts or
    // /etc/resolv.conf, no DNS (--port=0), bound to the TAP only, its files in `dir`, its
    // sockets in the namespace.
    let _dnsmasq = ChildGuard::spawn(netns.command("dnsmasq").args([
        "--no-daemon",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--port=0",
        &format!("--interface={tap}"),
        "--bind-interfaces",
        "--no-ping",
        &format!("--dhcp-range={GUEST},{GUEST},255.255.255.0,1h"),
        &format!("--dhcp-option=option:router,{LINUX}"),
        &format!("--pid-file={}", dir.0.join("pid").display()),
        &format!("--dhcp-leasefile={}", dir.0.join("leases").display()),
        &format!("--log-facility={}", log.display()),
    ]));
    wait_for_text(&log, "DHCP, IP range", Duration::from_secs(10));
    // Dropped before `dir` is removed (declared after it).
    let _show_log = ShowOnPanic(log.clone());

    let netdev = format!("tap,id=n0,ifname={tap},script=no,downscript=no");
    let mut qemu = Qemu::spawn(
        netns
            .command(QEMU)
            .args(qemu_args(machine, elf, &netdev, "test=1")),
    );
    let ready = qemu.wait_for_line("READY ", READY_LIMIT);
    eprintln!("{ready} after {:.2?}", qemu.elapsed());
    assert_eq!(ready_ip(&ready), GUEST, "{ready}");

    // ping: 100 echoes 20 ms apart (root may go below 200 ms), none lost.
    let out = run_bounded(
        netns
            .command("ping")
            .args(["-c", "100", "-i", "0.02", "-W", "2", GUEST]),
        TOOL_LIMIT,
    );
    out.assert_success("ping");
    assert!(
        out.stdout
            .contains("100 packets transmitted, 100 received, 0% packet loss"),
        "{}",
        out.stdout
    );
    eprintln!(
        "ping: {}",
        out.stdout.lines().last().unwrap_or_default().trim()
    );

    // TCP echo: 20,000,000 seeded-random bytes; one thread writes (then half-closes), the
    // other reads until the guest closes; both sides' SHA-256 printed and compared here.
    let script = format!(
        r#"
import hashlib, random, socket, threading, time
N = 20_000_000
data = random.Random(20240607).randbytes(N)
s = socket.create_connection(("{GUEST}", 7), timeout=30)
err = []
def send():
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except Exception as e:
        err.append(e)
t0 = time.monotonic()
t = threading.Thread(target=send); t.start()
h = hashlib.sha256(); n = 0
while True:
    b = s.recv(1 << 20)
    if not b: break
    h.update(b); n += len(b)
t.join()
s.close()
if err: raise err[0]
print("sent", N, hashlib.sha256(data).hexdigest())
print("received", n, h.hexdigest())
print("seconds", round(time.monotonic() - t0, 2))
"#
    );
    let out = run_bounded(netns.command("python3").args(["-c", &script]), TOOL_LIMIT);
    out.assert_success("python3 TCP echo client");
    let line = |tag: &str| {
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(tag))
            .unwrap_or_else(|| panic!("no {tag:?} in {}", out.stdout))
            .to_string()
    };
    let (sent, received) = (line("sent "), line("received "));
    assert_eq!(received, sent, "TCP echo differs (length, SHA-256)");
    eprintln!(
        "TCP echo: 20,000,000 bytes each way in {} s",
        line("seconds ")
    );

    iperf3(&netns, &[]);
    iperf3(&netns, &["-R"]);
    // Tests in a row where the guest receives end with the client's last data unread in the
    // guest's streams; the stack discards it and resets the streams when the client sends
    // more, so their frames and TCP budget come back: the second four-stream test finds the
    // listener re-armed, and `/stats` below finds no slot held by the stack.
    iperf3(&netns, &["-P", "4"]);
    iperf3(&netns, &["-P", "4"]);

    // UDP echo: a few datagrams of different sizes, each answered byte-exact.
    let script = format!(
        r#"
import random, socket, sys
r = random.Random(7)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(5)
for size in (1, 64, 512, 1000, 1472):
    m = r.randbytes(size)
    u.sendto(m, ("{GUEST}", 7))
    got, frm = u.recvfrom(4096)
    if got != m or frm != ("{GUEST}", 7):
        print("udp mismatch", size, len(got), frm); sys.exit(1)
print("udp ok")
"#
    );
    let out = run_bounded(netns.command("python3").args(["-c", &script]), TOOL_LIMIT);
    out.assert_success("python3 UDP echo client");
    assert_eq!(out.stdout.trim(), "udp ok");

    let (body, code, _) = curl(netns.command("curl"), &format!("http://{GUEST}/stats"));
    assert_eq!(code, "200", "GET /stats: {body}");
    check_stats(&body, machine);
    check_checksum_offload(&body);
    // The kernel defers its RX interrupt after bulk stretches (`rx_defer`, on by default):
    // the 20 MB echo and iperf3 into the guest went through deferred polls.
    let j = json::parse(body.as_bytes()).unwrap_or_else(|e| panic!("/stats: {e}: {body}"));
    let deferrals = j.path(&["virtio", "rx_deferrals"]).and_then(Json::as_u64);
    assert!(deferrals.is_some_and(|d| d >= 1), "no RX deferral: {body}");
    let held = j.path(&["pool", "stack"]).and_then(Json::as_u64);
    assert_eq!(
        held,
        Some(0),
        "slots held by the stack after the tests: {body}"
    );
    // The pool's TCP share holds every listener's armed sockets and the tests' connections
    // at once: no listener ever went without its armed sockets.
    let rearm = j
        .path(&["stack", "listener_rearm_failures"])
        .and_then(Json::as_u64);
    assert_eq!(rearm, Some(0), "listener re-arm failures: {body}");

    exit_through_http(
        &mut qemu,
        netns.command("curl"),
        &format!("http://{GUEST}/exit"),
    );
}

/// Idle: static address (no DHCP timers), no IPv6 from slirp (no router advertisements),
/// nothing on the wire. Over the guest's 3 s window its `hlt` loop wakes only for the timer
/// that ends the window, never for the device or anything else, and the stack is never
/// polled.
fn qemu_kernel_idles_without_wakeups_or_polls(machine: Machine) {
    require_tool(QEMU, "--version", "qemu-system-x86");
    let elf = kernel();
    let mut qemu = Qemu::spawn(Command::new(QEMU).args(qemu_args(
        machine,
        elf,
        "user,id=n0,restrict=on,ipv6=off",
        "ip=10.0.2.15/24 gw=10.0.2.2 idle=3",
    )));
    let ready = qemu.wait_for_line("READY ", READY_LIMIT);
    assert_eq!(ready_ip(&ready), "10.0.2.15", "{ready}");
    // 1 s settling, then the 3 s window.
    let line = qemu.wait_for_line("IDLE ", Duration::from_secs(30));
    eprintln!("{line} ({:.2?} after start)", qemu.elapsed());
    let f = |key| field(&line, key);
    let (wakeups, timer, device, other, polls) = (
        f("wakeups"),
        f("timer"),
        f("device"),
        f("other"),
        f("polls"),
    );
    assert_eq!(f("seconds"), 3, "{line}");
    assert_eq!(wakeups, timer + device + other, "wakeups by cause: {line}");
    assert_eq!(device, 0, "device wakeups while idle: {line}");
    assert_eq!(other, 0, "other wakeups while idle: {line}");
    assert!(timer <= 1, "timer wakeups beyond the window's own: {line}");
    assert_eq!(polls, 0, "stack polls while idle: {line}");
    qemu.kill();
}

/// TCG's default CPU model (`qemu64`) has no RDRAND, the kernel's only source for the stack's
/// secret: the kernel says so and stops with the failure code before it starts the network
/// (no `READY`), instead of running with a guessable secret.
fn qemu_kernel_without_rdrand_stops_at_boot(machine: Machine) {
    require_tool(QEMU, "--version", "qemu-system-x86");
    let elf = kernel();
    let mut args = qemu_args(machine, elf, "user,id=n0,restrict=on", "");
    let cpu = args
        .iter()
        .position(|a| a == "-cpu")
        .expect("qemu_args picks a CPU model");
    args[cpu + 1] = "qemu64".to_string();
    let mut qemu = Qemu::spawn(Command::new(QEMU).args(args));
    let line = qemu.wait_for_line("zcnet kernel: no secret for the stack", READY_LIMIT);
    qemu.check(line.contains("RDRAND") && line.contains("-cpu max"), || {
        format!("the message names the missing RDRAND and the fix: {line}")
    });
    let status = qemu.wait_exit(EXIT_LIMIT);
    qemu.check(status.code() == Some(EXIT_FAIL), || {
        format!("QEMU exited with {status}, expected {EXIT_FAIL}")
    });
    let log = qemu.serial_log();
    qemu.check(!log.contains("READY") && !log.contains("net:"), || {
        "the network never started".to_string()
    });
}
