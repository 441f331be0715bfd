//! DHCPv4 and DNS against `dnsmasq` running inside the test's namespace, on the kernel side of
//! the TAP (see `zcnet_tests::netns`): zcnet configured with `Ipv4Config::Dhcp` leases an
//! address from dnsmasq's range with a router and a DNS server, then resolves names dnsmasq
//! answers through that server.
//!
//! dnsmasq touches nothing of the host: no configuration file (`--conf-file=/dev/null`), no
//! `/etc/hosts` or `/etc/resolv.conf` (`--no-hosts --no-resolv`), bound to the TAP only
//! (`--interface --bind-interfaces`), its lease file, pid file and log in a temporary directory
//! of the test's own, and its sockets inside the namespace.
//!
//! Needs root, /dev/net/tun, `dnsmasq` and `ping` (fails, never skips, without them).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use zcnet_executor::time::timeout;
use zcnet_stack::dns::{DnsError, DnsKind, DnsSocket};
use zcnet_stack::{IpAddress, Ipv4Address, Ipv4Config, Ipv6Address};
use zcnet_tap::DEFAULT_MAC;
use zcnet_tests::netns::{ChildGuard, TapNet, LINUX_ADDR};

/// A directory of the test's own, removed on drop (also when the test fails).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
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

fn require_dnsmasq() {
    let ok = Command::new("dnsmasq")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "this test needs dnsmasq (apt-get install dnsmasq-base; .ci/run installs it)"
    );
}

/// Waits (plain thread sleep: the stack's tasks have not run yet) until `path` contains
/// `needle`; panics with the file's text after `limit`.
fn wait_for_text(path: &Path, needle: &str, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in {} after {limit:?}: {text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn mac_string(mac: [u8; 6]) -> String {
    mac.map(|b| format!("{b:02x}")).join(":")
}

/// zcnet leases an address from dnsmasq (in its range, with dnsmasq as router and DNS server),
/// dnsmasq's lease file records zcnet's MAC with that address, Linux reaches zcnet at it, and
/// zcnet resolves names through the DNS server the lease named: a host record (A and AAAA),
/// a domain-wide address, and a name dnsmasq has no answer for.
#[test]
fn zcnet_leases_an_address_from_dnsmasq_and_resolves_through_it() {
    require_dnsmasq();
    let net = TapNet::with(1500, &[&format!("{LINUX_ADDR}/24")], |c| {
        c.ipv4 = Ipv4Config::Dhcp;
    });
    let dir = TempDir::new(net.netns.name());
    let log = dir.0.join("dnsmasq.log");
    let leases = dir.0.join("leases");
    let gw = LINUX_ADDR.to_string();
    let mut dnsmasq = ChildGuard::spawn(net.netns.command("dnsmasq").args([
        "--no-daemon",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        &format!("--interface={}", net.tap_name),
        "--bind-interfaces",
        // dnsmasq otherwise pings an address for 3 s before offering it (conflict detection).
        "--no-ping",
        "--dhcp-range=10.77.0.100,10.77.0.150,255.255.255.0,1h",
        &format!("--dhcp-option=option:router,{gw}"),
        &format!("--dhcp-option=option:dns-server,{gw}"),
        "--host-record=www.zcnet.test,10.77.0.9,fd00:77::9",
        "--address=/zcnet.test/10.77.0.8",
        &format!("--pid-file={}", dir.0.join("pid").display()),
        &format!("--dhcp-leasefile={}", leases.display()),
        &format!("--log-facility={}", log.display()),
        "--log-dhcp",
        "--log-queries",
    ]));
    wait_for_text(&log, "DHCP, IP range", Duration::from_secs(10));
    assert!(net.stack.dhcp_lease().is_none() && net.stack.ipv4_config().is_none());

    let stack = net.stack;
    let started = Instant::now();
    let settings = net
        .exec
        .block_on(timeout(Duration::from_secs(30), stack.wait_ipv4()))
        .unwrap_or_else(|_| {
            panic!(
                "no lease within 30 s; dnsmasq log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
    let lease_time = started.elapsed();
    let lease = stack.dhcp_lease().expect("a lease");
    let addr = lease.address.address();
    let last = addr.octets()[3];
    assert_eq!(addr.octets()[..3], [10, 77, 0], "{lease:?}");
    assert!((100..=150).contains(&last), "outside the range: {lease:?}");
    assert_eq!(lease.address.prefix_len(), 24);
    assert_eq!(lease.router, Some(LINUX_ADDR));
    assert_eq!(lease.server, LINUX_ADDR);
    assert_eq!(lease.dns_servers(), &[LINUX_ADDR]);
    assert_eq!(settings.address, lease.address);
    assert_eq!(settings.gateway, Some(LINUX_ADDR));

    // dnsmasq's side: the lease file names zcnet's MAC with that address.
    let text = wait_for_text(&leases, &addr.to_string(), Duration::from_secs(5));
    let mac = mac_string(DEFAULT_MAC);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().nth(1) == Some(mac.as_str())
                && l.split_whitespace().nth(2) == Some(addr.to_string().as_str())),
        "lease file: {text}"
    );

    // DNS through the server the lease named (no server configured statically).
    let dns_started = Instant::now();
    net.exec.block_on(async {
        let dns = DnsSocket::with_capacity(stack, 2).expect("dns socket");
        let a = dns.resolve("www.zcnet.test", DnsKind::A).await;
        assert_eq!(
            dns.servers().collect::<Vec<_>>(),
            vec![IpAddress::from(LINUX_ADDR)]
        );
        assert_eq!(
            a.expect("A www.zcnet.test")[..],
            [IpAddress::from(Ipv4Address::new(10, 77, 0, 9))]
        );
        let aaaa = dns.resolve("www.zcnet.test", DnsKind::Aaaa).await;
        assert_eq!(
            aaaa.expect("AAAA www.zcnet.test")[..],
            [IpAddress::from(Ipv6Address::new(
                0xfd00, 0x77, 0, 0, 0, 0, 0, 9
            ))]
        );
        let any = dns.resolve("any.zcnet.test", DnsKind::A).await;
        assert_eq!(
            any.expect("A any.zcnet.test")[..],
            [IpAddress::from(Ipv4Address::new(10, 77, 0, 8))]
        );
        // No upstream servers: dnsmasq answers with an error, which is NotFound.
        let none = dns.resolve("nothing.example", DnsKind::A).await;
        assert_eq!(none, Err(DnsError::NotFound));
    });
    let dns_time = dns_started.elapsed();
    // Linux reaches zcnet at the leased address. (dnsmasq's unicast DHCP answers gave Linux
    // zcnet's MAC without any ARP; the stack resolves its gateway as soon as the lease arrives,
    // and holds an echo reply to a sender whose MAC it does not know yet until the ARP answer
    // comes. The QEMU test pings straight after the lease with no loss allowed.)
    let mut ping = ChildGuard::spawn(net.netns.command("ping").args([
        "-c",
        "3",
        "-i",
        "0.01",
        "-W",
        "2",
        &addr.to_string(),
    ]));
    let (status, out, err) = net.exec.block_on(ping.wait(Duration::from_secs(30)));
    assert!(status.success(), "ping {addr}: {out}{err}");
    assert!(out.contains("3 received"), "{out}");

    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        log_text.contains("query[A] www.zcnet.test from"),
        "dnsmasq saw no query from zcnet: {log_text}"
    );
    eprintln!("lease {lease:?} after {lease_time:?}; 4 lookups in {dns_time:?}");
    drop(dnsmasq.0.kill());
}
