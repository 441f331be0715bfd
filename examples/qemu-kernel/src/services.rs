//! What runs on the stack: zcnet-examples' servers (the same code the Linux TAP programs run),
//! the kernel's `/stats` sections, the `READY` line, the idle measurement and test mode's
//! `GET /exit`.
//!
//! | port | service |
//! |---|---|
//! | 80 | HTTP: `/`, `/stats` (JSON), and `/exit` with `test=1` |
//! | 7 | TCP echo, UDP echo (zero-copy datagram socket) |
//! | 5201 | iperf3 server (`iperf3 -c`, `-R`, `-P N`, `--bidir`, `-u -b RATE`) |
//! | — | ping: the stack answers by itself |
//!
//! `/stats` is the HTTP server's document (stack, `"virtio"` driver counters, pool, copy ledger,
//! server, the asking connection's TCP statistics) plus two kernel sections: `"copies"`, every `memcpy` and `memmove` call and byte in
//! the kernel (`libc.rs`; smoltcp's copies included), and `"kernel"`, wakeups from `hlt` by
//! cause, uptime and busy time, heap use, and how the NIC interrupts.

use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use zcnet_buffer::{FramePool, LinkState};
use zcnet_examples::echo::{EchoConfig, EchoServer, UdpEcho};
use zcnet_examples::http::{DriverStats, ExtraRoutes, ExtraStats, HttpConfig, HttpServer};
use zcnet_examples::iperf3::{CpuTime, Iperf3Config, Iperf3Server};
use zcnet_examples::json::{object, Json};
use zcnet_executor::{time, LocalSpawner};
use zcnet_stack::StatsReader;
use zcnet_virtio::VirtioStats;

use crate::cmdline::Cmdline;
use crate::exit::{exit, ExitCode};
use crate::net::{Net, NET_IRQ};
use crate::nic;
use crate::nic_irq::Routing;
use crate::platform::{self, wakeups};

/// The page at `/`.
pub const INDEX_HTML: &str = "<!doctype html>
<html lang=\"en\">
<head><meta charset=\"utf-8\"><title>zcnet</title></head>
<body>
<h1>Hello from zcnet</h1>
<p>This page came from a no_std, event-driven TCP/IP stack (smoltcp inside, driven by an
ingress and an egress task) running in a freestanding x86_64 kernel under QEMU, over
virtio-net, with frame-pool slots as the device's buffers.</p>
<p>Live counters: <a href=\"/stats\">/stats</a> (stack, virtio driver, frame pool, copy
ledger, this server, the kernel's memcpy and wakeups).</p>
</body>
</html>
";

/// How long `/exit` waits before stopping QEMU, so the response leaves first.
const EXIT_GRACE: Duration = Duration::from_millis(200);

/// Starts the servers and the kernel's own tasks on `spawner`. A server that cannot bind is
/// reported and left out; the others still run.
pub fn spawn(net: Net, cmdline: Cmdline, spawner: LocalSpawner) {
    NIC_STATE_SOURCES.call_once(|| (net.pool, net.stack.stats_reader()));
    let http = HttpConfig {
        index_html: INDEX_HTML,
        backlog: 16,
        max_connections: 64,
        driver_stats: Some(DriverStats::new("virtio", || virtio_json(&NET_IRQ.stats()))),
        extra_stats: Some(ExtraStats::new(move || {
            let (calls, bytes) = crate::libc::copy_counts();
            vec![
                (
                    "copies".to_string(),
                    object([("calls", calls.into()), ("bytes", bytes.into())]),
                ),
                ("kernel".to_string(), kernel_json(net.routing)),
            ]
        })),
        extra_routes: cmdline
            .test
            .then(|| ExtraRoutes::new(move |path| exit_route(net, path))),
        ..HttpConfig::default()
    };
    match HttpServer::bind(net.stack, http) {
        Ok(server) => drop(spawner.spawn(server.run(spawner))),
        Err(e) => println!("http: cannot listen: {e}"),
    }
    let echo = EchoConfig {
        udp: UdpEcho::ZeroCopy { queue: 16 },
        backlog: 4,
        max_connections: 8,
        ..EchoConfig::default()
    };
    match EchoServer::bind(net.stack, echo) {
        Ok(server) => drop(spawner.spawn(server.run(spawner))),
        Err(e) => println!("echo: cannot listen: {e}"),
    }
    let iperf3 = Iperf3Config {
        log: Some(iperf3_log),
        backlog: 4,
        cpu_time: Some(cpu_time),
        ..Iperf3Config::default()
    };
    match Iperf3Server::bind(net.stack, iperf3) {
        Ok(server) => drop(spawner.spawn(server.run(spawner))),
        Err(e) => println!("iperf3: cannot listen: {e}"),
    }
    drop(spawner.spawn(announce(net, cmdline.idle_secs)));
    drop(spawner.spawn(report_link(net)));
}

/// Prints `LINK down` and `LINK up` as the stack sees the link change (QEMU's `set_link`).
async fn report_link(net: Net) -> ! {
    loop {
        net.stack.wait_link(LinkState::Down).await;
        println!("LINK down");
        net.stack.wait_link(LinkState::Up).await;
        println!("LINK up");
    }
}

/// Prints `READY ip=…` once the stack has an address (the tests wait for it), then, with
/// `idle=N`, measures N idle seconds after one second of settling.
async fn announce(net: Net, idle_secs: Option<u32>) {
    let v4 = net.stack.wait_ipv4().await;
    match v4.gateway {
        Some(gw) => println!(
            "READY ip={} prefix={} gw={gw}",
            v4.address.address(),
            v4.address.prefix_len()
        ),
        None => println!(
            "READY ip={} prefix={}",
            v4.address.address(),
            v4.address.prefix_len()
        ),
    }
    let Some(secs) = idle_secs else { return };
    time::sleep(Duration::from_secs(1)).await;
    let (w0, s0) = (wakeups(), net.stack.stats());
    time::sleep(Duration::from_secs(u64::from(secs))).await;
    let (w, s) = (wakeups().since(&w0), net.stack.stats());
    println!(
        "IDLE seconds={secs} wakeups={} timer={} device={} other={} polls={}",
        w.total(),
        w.timer,
        w.device,
        w.other,
        s.polls() - s0.polls()
    );
}

fn virtio_json(s: &VirtioStats) -> Json {
    object([
        ("rx_frames", s.rx_frames.into()),
        ("rx_bytes", s.rx_bytes.into()),
        ("tx_frames", s.tx_frames.into()),
        ("tx_bytes", s.tx_bytes.into()),
        ("rx_runt", s.rx_runt.into()),
        ("rx_oversize", s.rx_oversize.into()),
        ("rx_starved", s.rx_starved.into()),
        ("tx_too_long", s.tx_too_long.into()),
        ("tx_no_headroom", s.tx_no_headroom.into()),
        ("tx_queue_full", s.tx_queue_full.into()),
        ("device_errors", s.device_errors.into()),
        ("rx_interrupts", s.rx_interrupts.into()),
        ("tx_interrupts", s.tx_interrupts.into()),
        ("shared_interrupts", s.shared_interrupts.into()),
        ("config_interrupts", s.config_interrupts.into()),
        ("rx_posted", s.rx_posted.into()),
        ("tx_in_flight", s.tx_in_flight.into()),
        ("rx_kicks", s.rx_kicks.into()),
        ("tx_kicks", s.tx_kicks.into()),
        ("kicks_suppressed", s.kicks_suppressed.into()),
        ("rx_interrupt_requests", s.rx_interrupt_requests.into()),
        ("tx_interrupt_requests", s.tx_interrupt_requests.into()),
        ("rx_checksum_valid", s.rx_checksum_valid.into()),
        ("rx_checksum_partial", s.rx_checksum_partial.into()),
        ("tx_checksum_offloaded", s.tx_checksum_offloaded.into()),
        ("tx_checksum_completed", s.tx_checksum_completed.into()),
        ("tx_bad_checksum_mark", s.tx_bad_checksum_mark.into()),
        ("rx_rechecks", s.rx_rechecks.into()),
        ("rx_deferrals", s.rx_deferrals.into()),
        ("rx_merged", s.rx_merged.into()),
        ("rx_chains_dropped", s.rx_chains_dropped.into()),
        ("tx_gso", s.tx_gso.into()),
    ])
}

/// The kernel's section of `/stats`: why the CPU woke from `hlt`, CPU time, heap use, the
/// machine (the NIC's transport and address, the clock's calibration reference), how the NIC
/// interrupts, and `nic`: how doorbells are rung (`"direct"`: one write each, else through the
/// transport), the virtio features the driver accepted (hex; 0 when it does not say), the queue notifications (kicks) the driver made and the NIC's interrupts the CPU
/// took, counted alike in both kernels (the transport wrapper in `nic.rs`, the interrupt
/// dispatcher in `idt.rs`). (Its `"copies"` section beside this one counts every `memcpy` and
/// `memmove` in the kernel, smoltcp's and zcnet's alike.) The smoltcp baseline reports the same
/// section.
pub fn kernel_json(routing: Routing) -> Json {
    let w = wakeups();
    let (heap_used, heap_free) = crate::heap::usage();
    let irq = match routing {
        Routing::Msix => "msix".to_string(),
        Routing::Intx { pin } => alloc::format!("intx (IOAPIC pin {pin})"),
        Routing::Mmio { pin } => alloc::format!("virtio-mmio line (IOAPIC pin {pin})"),
    };
    let nic = crate::nic::location();
    let machine = object([
        (
            "nic_transport",
            nic.map_or("none", |n| n.transport()).into(),
        ),
        (
            "nic",
            nic.map(|n| alloc::format!("{n}"))
                .unwrap_or_default()
                .as_str()
                .into(),
        ),
        (
            "clock_reference",
            crate::clock::reference()
                .map_or("none", |r| r.name())
                .into(),
        ),
    ]);
    object([
        (
            "wakeups",
            object([
                ("timer", w.timer.into()),
                ("device", w.device.into()),
                ("other", w.other.into()),
            ]),
        ),
        ("uptime_ns", crate::clock::now_ns().into()),
        ("busy_ns", platform::busy_ns().into()),
        (
            "heap",
            object([
                ("used", (heap_used as u64).into()),
                ("free", (heap_free as u64).into()),
            ]),
        ),
        ("machine", machine),
        ("nic_interrupts", irq.as_str().into()),
        (
            "nic",
            object([
                ("doorbells", crate::nic::doorbell_kind().into()),
                (
                    "features",
                    alloc::format!("{:#x}", crate::nic::features())
                        .as_str()
                        .into(),
                ),
                ("kicks", crate::nic::kicks().into()),
                ("interrupts", crate::idt::device_interrupts().into()),
            ]),
        ),
    ])
}

/// Prints the iperf3 server's line, then the NIC's state ([`print_nic_state`]): a test's end,
/// or a test given up on (`client too slow`), is when a stuck receive or transmit path shows.
fn iperf3_log(line: fmt::Arguments<'_>) {
    println!("iperf3: {line}");
    print_nic_state();
}

/// The frame pool and the stack's counters, for [`print_nic_state`] (which `iperf3_log`, a plain
/// `fn`, calls without a `Net` at hand).
static NIC_STATE_SOURCES: spin::Once<(&'static FramePool, StatsReader)> = spin::Once::new();

/// Prints, on lines starting `nic-state:`, the virtqueues' indices as they are in memory
/// ([`nic::Rings`]), the driver's counters, the frame pool's occupancy and the stack's
/// counters.
fn print_nic_state() {
    println!("nic-state: rings: {}", nic::Rings);
    println!("nic-state: virtio: {:?}", NET_IRQ.stats());
    if let Some((pool, stats)) = NIC_STATE_SOURCES.get() {
        println!("nic-state: pool: {:?}", pool.occupancy());
        println!("nic-state: stack: {:?}", stats.snapshot());
    }
}

/// The kernel's CPU time: everything outside `hlt` (there is no user mode).
fn cpu_time() -> CpuTime {
    CpuTime {
        user: 0.0,
        system: platform::busy_ns() as f64 / 1e9,
    }
}

/// Test mode's `GET /exit`: checks the invariants, answers with the verdict, and stops QEMU
/// with it once the answer has had [`EXIT_GRACE`] to leave.
fn exit_route(net: Net, path: &str) -> Option<(u16, &'static str, Vec<u8>)> {
    if path != "/exit" {
        return None;
    }
    let pass = check_invariants(&net);
    let code = if pass {
        ExitCode::Success
    } else {
        ExitCode::Failure
    };
    drop(net.stack.executor().spawner().spawn(async move {
        time::sleep(EXIT_GRACE).await;
        println!("EXIT {}", if pass { "pass" } else { "fail" });
        exit(code)
    }));
    let body = alloc::format!("{{\"pass\":{pass}}}\n").into_bytes();
    Some((if pass { 200 } else { 500 }, "application/json", body))
}

/// The end-of-test invariants, each printed: the frame pool's audit succeeds (no slot lost or
/// returned twice) and the driver counted no drop or error.
fn check_invariants(net: &Net) -> bool {
    let audit = net.pool.audit();
    println!("CHECK pool audit: {audit:?}");
    let v = NET_IRQ.stats();
    println!("CHECK virtio: {v:?}");
    let drops = [
        ("rx_runt", v.rx_runt),
        ("rx_oversize", v.rx_oversize),
        ("rx_starved", v.rx_starved),
        ("tx_too_long", v.tx_too_long),
        ("tx_no_headroom", v.tx_no_headroom),
        ("tx_queue_full", v.tx_queue_full),
        ("device_errors", v.device_errors),
    ];
    let mut pass = audit.is_ok();
    for (name, n) in drops {
        if n != 0 {
            println!("CHECK virtio {name} = {n}, expected 0");
            pass = false;
        }
    }
    let (calls, bytes) = crate::libc::copy_counts();
    println!(
        "CHECK stack: {:?}; memcpy calls={calls} bytes={bytes}; wakeups: {:?}",
        net.stack.stats(),
        wakeups()
    );
    pass
}
