//! The benchmark's baseline: the same kernel and services on plain smoltcp 0.14, driven the
//! way kernels integrate smoltcp today (ArceOS's `axnet`, smoltcp's own examples): one loop
//! calling `Interface::poll`, sockets served with the copying `recv_slice` / `send_slice`, over
//! a virtio-net device that copies frames at its boundary. Built with `--features baseline`;
//! `benches/benches/kernel.rs` measures it against the zcnet kernel under one QEMU command
//! line.
//!
//! ```text
//!  loop {
//!      iface.poll(now, &mut device, &mut sockets)        (ingress until empty, then egress)
//!      DHCP events ─► address, READY line
//!      HTTP (:80), echo (:7), iperf3 (:5201): each socket served once, copying
//!      deadline = min(now + iface.poll_delay(), the services' own timeouts, idle / exit timers)
//!      PLATFORM.wait(deadline): cli; signalled? return; arm the LAPIC one-shot; sti; hlt
//!  }
//!  NIC interrupt (MSI-X RX / TX / config, INTx, or the virtio-mmio line) ─► PLATFORM.signal()
//!      ─► the wait returns
//! ```
//!
//! **Why this is a strong baseline, not a straw man.** The loop never busy-polls: with nothing
//! to do it halts until a device interrupt or smoltcp's own next deadline (`poll_delay`: a
//! retransmission, a delayed ACK, DHCP), on the same platform code the zcnet kernel's executor
//! idles in. Every frame that arrives while the CPU is halted wakes it at once, and frames
//! that arrive while the loop runs are picked up by the next `poll` (the interrupt's signal
//! makes the next wait return at once, so none waits for a timer). smoltcp is the same build as
//! zcnet's (cargo unifies its features across the two variants), with the same socket buffer
//! sizes as the zcnet kernel's HTTP and iperf3 servers (the measured ones), the same HTTP
//! parser, page and response bytes, and the same QEMU device. What differs is what the
//! comparison is about: one `poll` that walks every socket against zcnet's ingress / egress
//! tasks, and the copies.
//!
//! **Where payload is copied** (counted by the kernel's `memcpy` / `memmove`, `libc.rs`):
//!
//! * RX: virtio DMA buffer → the device's scratch frame ([`device`], copy 1); smoltcp: frame
//!   payload → the TCP socket's receive ring; the application: ring → its buffer
//!   (`recv_slice`).
//! * TX: the application: its buffer → the socket's send ring (`send_slice`); smoltcp: ring →
//!   the device's scratch frame (on every transmission and retransmission); the device:
//!   scratch → a TX DMA buffer (copy 2).
//!
//! With the `baseline-lend` feature the device lends its DMA buffers instead (no copy 1 or 2),
//! as ArceOS's `axnet` does: the copies left are smoltcp's and the socket API's.
//!
//! The command line is the zcnet kernel's (`ip=`, `gw=`, `test=1`, `idle=N`, `irq=`), and so
//! are the `READY`, `IDLE` and `CHECK` / `EXIT` lines and `/stats`'s `kernel` section.

mod device;
mod echo;
mod http;
mod iperf3;

use alloc::format;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::dhcpv4;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpCidr, Ipv4Address, Ipv4Cidr};
use virtio_drivers::device::net::VirtIONetRaw;
use zcnet_examples::json::{object, Json};
use zcnet_executor::Platform;

use crate::cmdline::{BootInfo, IpSetting};
use crate::exit::{exit, ExitCode};
use crate::hal::KernelHal;
use crate::net::QUEUE_SIZE;
use crate::nic::{self, Handlers, NicTransport};
use crate::nic_irq::Routing;
use crate::platform::{self, wakeups, PLATFORM};

use device::{CopyingNet, DeviceMode, DeviceStats};
use http::{HttpCounters, HttpServer};

/// The device boundary this build has.
const DEVICE_MODE: DeviceMode = if cfg!(feature = "baseline-lend") {
    DeviceMode::Lend
} else {
    DeviceMode::Copy
};

/// How long `/exit` waits before stopping QEMU, so the response leaves first (as the zcnet
/// kernel does).
const EXIT_GRACE: Duration = Duration::from_millis(200);
/// Settling time between `READY` and the idle measurement (as the zcnet kernel does).
const IDLE_SETTLE: Duration = Duration::from_secs(1);

type Nic = CopyingNet<KernelHal, NicTransport, QUEUE_SIZE>;

/// The NIC's interrupts only end the CPU's halt: the signal makes a wait that has not halted
/// yet return at once, so an interrupt that lands between the loop's last `poll` and its
/// `hlt` is not lost.
fn nic_interrupt() {
    PLATFORM.signal();
}

fn now() -> Instant {
    Instant::from_micros((crate::clock::now_ns() / 1000) as i64)
}

/// Every NIC interrupt, whatever its source, only signals the loop.
const HANDLERS: Handlers = Handlers {
    rx: nic_interrupt,
    tx: nic_interrupt,
    config: nic_interrupt,
    shared: |_status| nic_interrupt(),
};

/// The measurement `idle=N` asks for.
enum Idle {
    /// Not asked for, or done.
    Off,
    /// Waiting for the address.
    Pending(u32),
    /// Settling until the instant.
    Settling(u32, Instant),
    /// Measuring since the instant, from these counts (wakeups, `iface.poll` calls).
    Measuring(u32, Instant, platform::Wakeups, u64),
}

/// Everything `/stats` and `/exit` read.
struct Host<'a> {
    polls: u64,
    device: DeviceStats,
    routing: Routing,
    echo: (u64, u64),
    iperf3: (u64, u64, u64),
    test: bool,
    exit_at: &'a mut Option<(Instant, bool)>,
    now: Instant,
}

impl http::Host for Host<'_> {
    fn stats(&mut self, http: &HttpCounters, active: usize) -> Json {
        let d = self.device;
        Json::Obj(vec![
            (
                "stack".to_string(),
                object([
                    ("stack", "smoltcp 0.14 Interface::poll loop".into()),
                    ("polls", self.polls.into()),
                ]),
            ),
            (
                "virtio".to_string(),
                object([
                    (
                        "mode",
                        match DEVICE_MODE {
                            DeviceMode::Copy => "copy",
                            DeviceMode::Lend => "lend",
                        }
                        .into(),
                    ),
                    ("rx_frames", d.rx_frames.into()),
                    ("tx_frames", d.tx_frames.into()),
                    ("rx_errors", d.rx_errors.into()),
                    ("tx_dropped", d.tx_dropped.into()),
                ]),
            ),
            (
                "http".to_string(),
                object([
                    ("connections", http.connections.into()),
                    ("active", (active as u64).into()),
                    ("requests", http.requests.into()),
                    ("status_2xx", http.status_2xx.into()),
                    ("status_4xx", http.status_4xx.into()),
                    ("status_5xx", http.status_5xx.into()),
                ]),
            ),
            (
                "echo".to_string(),
                object([
                    ("tcp_bytes", self.echo.0.into()),
                    ("udp_datagrams", self.echo.1.into()),
                ]),
            ),
            (
                "iperf3".to_string(),
                object([
                    ("tests_done", self.iperf3.0.into()),
                    ("tests_failed", self.iperf3.1.into()),
                    ("denied", self.iperf3.2.into()),
                ]),
            ),
            ("copies".to_string(), copies_json()),
            (
                "kernel".to_string(),
                crate::services::kernel_json(self.routing),
            ),
        ])
    }

    fn exit_response(&mut self) -> Option<(u16, Vec<u8>)> {
        if !self.test {
            return None;
        }
        let pass = check_invariants(self.device, self.polls);
        *self.exit_at = Some((self.now + EXIT_GRACE, pass));
        Some((
            if pass { 200 } else { 500 },
            format!("{{\"pass\":{pass}}}\n").into_bytes(),
        ))
    }
}

/// `/stats`'s `copies`: every `memcpy` and `memmove` call and byte in the kernel, smoltcp's
/// included (`libc.rs`), as the zcnet kernel reports them.
fn copies_json() -> Json {
    let (calls, bytes) = crate::libc::copy_counts();
    object([("calls", calls.into()), ("bytes", bytes.into())])
}

/// Test mode's invariants, each printed: the device reported nothing it should not have.
fn check_invariants(d: DeviceStats, polls: u64) -> bool {
    println!("CHECK virtio: {d:?}");
    let mut pass = true;
    for (name, n) in [("rx_errors", d.rx_errors), ("tx_dropped", d.tx_dropped)] {
        if n != 0 {
            println!("CHECK virtio {name} = {n}, expected 0");
            pass = false;
        }
    }
    let (calls, bytes) = crate::libc::copy_counts();
    println!(
        "CHECK stack: polls={polls}; memcpy calls={calls} bytes={bytes}; wakeups: {:?}",
        wakeups()
    );
    pass
}

/// Applies a DHCP lease (or its loss) to the interface.
fn apply_dhcp(iface: &mut Interface, sockets: &mut SocketSet<'static>, dhcp: SocketHandle) {
    match sockets.get_mut::<dhcpv4::Socket>(dhcp).poll() {
        None => {}
        Some(dhcpv4::Event::Configured(c)) => {
            iface.update_ip_addrs(|addrs| {
                addrs.clear();
                let _ = addrs.push(IpCidr::Ipv4(c.address));
            });
            iface.routes_mut().remove_default_ipv4_route();
            if let Some(router) = c.router {
                let _ = iface.routes_mut().add_default_ipv4_route(router);
            }
        }
        Some(dhcpv4::Event::Deconfigured) => {
            iface.update_ip_addrs(|addrs| addrs.clear());
            iface.routes_mut().remove_default_ipv4_route();
        }
    }
}

/// The interface's IPv4 address and the default gateway, once it has one.
fn ipv4(iface: &Interface) -> Option<(Ipv4Cidr, Option<Ipv4Address>)> {
    let cidr = iface.ip_addrs().iter().find_map(|a| match a {
        IpCidr::Ipv4(c) => Some(*c),
        #[allow(unreachable_patterns)]
        _ => None,
    })?;
    let gw = iface
        .routes()
        .get_default_ipv4_route()
        .and_then(|r| match r.via_router {
            smoltcp::wire::IpAddress::Ipv4(a) => Some(a),
            #[allow(unreachable_patterns)]
            _ => None,
        });
    Some((cidr, gw))
}

/// Brings up the NIC and the services on plain smoltcp and runs the poll loop forever.
pub fn run(boot: BootInfo) -> ! {
    let cmdline = boot.cmdline;
    let (transport, nic) = match nic::find_virtio_net(&boot) {
        Ok(found) => found,
        Err(e) => {
            println!("net: {e}");
            exit(ExitCode::Failure)
        }
    };
    // Counted, with virtio-drivers' own notification (the baseline keeps its driver as is).
    let transport = nic::doorbells(transport, &nic, false);
    let raw = match VirtIONetRaw::<KernelHal, _, QUEUE_SIZE>::new(transport) {
        Ok(raw) => raw,
        Err(e) => {
            println!("net: virtio-net: {e}");
            exit(ExitCode::Failure)
        }
    };
    let mut dev: Nic = CopyingNet::new(raw, DEVICE_MODE);
    let Ok(routing) = nic::route_interrupts(&nic, cmdline.irq, HANDLERS) else {
        exit(ExitCode::Failure)
    };
    println!(
        "net: virtio-net up, interrupts {routing:?}; baseline: smoltcp poll loop, {} device",
        match DEVICE_MODE {
            DeviceMode::Copy => "copying",
            DeviceMode::Lend => "lending",
        }
    );

    let mut config = Config::new(HardwareAddress::Ethernet(EthernetAddress(
        dev.mac_address(),
    )));
    // From RDRAND, as the zcnet kernel's secret (`init` checked that the CPU has it).
    config.random_seed = crate::entropy::random_u64().unwrap_or_else(|e| {
        println!("baseline: {e}");
        crate::exit::exit(crate::exit::ExitCode::Failure)
    });
    let mut iface = Interface::new(config, &mut dev, now());
    let mut sockets = SocketSet::new(Vec::new());
    let dhcp = match cmdline.ip {
        IpSetting::Dhcp => Some(sockets.add(dhcpv4::Socket::new())),
        IpSetting::Static { address, prefix } => {
            iface.update_ip_addrs(|addrs| {
                let _ = addrs.push(IpCidr::Ipv4(Ipv4Cidr::new(address, prefix)));
            });
            if let Some(gw) = cmdline.gateway {
                let _ = iface.routes_mut().add_default_ipv4_route(gw);
            }
            None
        }
    };
    let mut http = HttpServer::new(&mut sockets);
    let mut echo = echo::EchoServer::new(&mut sockets);
    let mut iperf3 = iperf3::Iperf3Server::new(&mut sockets);

    let mut polls: u64 = 0;
    let mut ready = false;
    let mut idle = match cmdline.idle_secs {
        Some(secs) => Idle::Pending(secs),
        None => Idle::Off,
    };
    let mut exit_at: Option<(Instant, bool)> = None;
    loop {
        let t = now();
        // The idle measurement's window ends with a wakeup of its own, and the poll that
        // follows it is the measurement's, not the stack's: it is not counted.
        let polls_before = polls;
        iface.poll(t, &mut dev, &mut sockets);
        polls += 1;
        if let Some(dhcp) = dhcp {
            apply_dhcp(&mut iface, &mut sockets, dhcp);
        }
        if !ready {
            if let Some((cidr, gw)) = ipv4(&iface) {
                ready = true;
                match gw {
                    Some(gw) => println!(
                        "READY ip={} prefix={} gw={gw}",
                        cidr.address(),
                        cidr.prefix_len()
                    ),
                    None => println!("READY ip={} prefix={}", cidr.address(), cidr.prefix_len()),
                }
                if let Idle::Pending(secs) = idle {
                    idle = Idle::Settling(secs, t + IDLE_SETTLE);
                }
            }
        }

        // The services.
        let mut host = Host {
            polls,
            device: dev.stats(),
            routing,
            echo: (echo.tcp_bytes, echo.udp_datagrams),
            iperf3: (iperf3.tests_done, iperf3.tests_failed, iperf3.denied),
            test: cmdline.test,
            exit_at: &mut exit_at,
            now: t,
        };
        http.poll(&mut sockets, t, &mut host);
        echo.poll(&mut sockets);
        iperf3.poll(&mut sockets, t);

        // The kernel's own timers.
        let t = now();
        match idle {
            Idle::Settling(secs, until) if t >= until => {
                idle = Idle::Measuring(secs, t, wakeups(), polls);
            }
            Idle::Measuring(secs, since, w0, p0)
                if t >= since + Duration::from_secs(u64::from(secs)) =>
            {
                let w = wakeups().since(&w0);
                println!(
                    "IDLE seconds={secs} wakeups={} timer={} device={} other={} polls={}",
                    w.total(),
                    w.timer,
                    w.device,
                    w.other,
                    polls_before - p0
                );
                idle = Idle::Off;
            }
            _ => {}
        }
        if let Some((at, pass)) = exit_at {
            if t >= at {
                println!("EXIT {}", if pass { "pass" } else { "fail" });
                exit(if pass {
                    ExitCode::Success
                } else {
                    ExitCode::Failure
                });
            }
        }

        // Sleep until smoltcp, a service or a kernel timer needs the loop, or a device
        // interrupts.
        let kernel_timer = match idle {
            Idle::Settling(_, until) => Some(until),
            Idle::Measuring(secs, since, ..) => Some(since + Duration::from_secs(u64::from(secs))),
            Idle::Off | Idle::Pending(_) => None,
        };
        let deadline = [
            iface.poll_delay(t, &sockets).map(|d| t + d),
            http.next_deadline(),
            iperf3.next_deadline(),
            kernel_timer,
            exit_at.map(|(at, _)| at),
        ]
        .into_iter()
        .flatten()
        .min();
        match deadline {
            Some(d) if d <= t => {}
            Some(d) => PLATFORM.wait(Some(zcnet_executor::Instant::from_nanos(
                d.total_micros() as u64 * 1000,
            ))),
            None => PLATFORM.wait(None),
        }
    }
}
