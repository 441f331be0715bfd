//! Restarting an interface over a real TAP (in a network namespace the test makes; needs root
//! and `/dev/net/tun`, fails without them): the stack shuts down, the TAP driver it gives back
//! is dropped and the TAP interface disappears with its file descriptor, every pool slot is
//! back, and a new TAP of the same name under a new stack on the same pool answers Linux again.

use std::process::Command;
use std::time::Duration;

use zcnet_executor::time::{sleep, timeout};
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpListener};
use zcnet_stack::{Config, Ipv4Cidr, Ipv4Config, Stack, StackResources, StaticV4};
use zcnet_tap::{Tap, TapConfig};
use zcnet_tests::audit::assert_all_free;
use zcnet_tests::netns::{require_root_and_tun, ChildGuard, Netns, TapNet, LINUX_ADDR, ZCNET_ADDR};

const PORT: u16 = 7000;

/// Pings the stack once from the namespace while `stack`'s executor runs; panics unless the
/// reply came.
fn ping_once(net: &TapNet, what: &str) {
    let mut ping = ChildGuard::spawn(net.netns.command("ping").args([
        "-c",
        "1",
        "-W",
        "2",
        &ZCNET_ADDR.to_string(),
    ]));
    let (status, out, err) = net.exec.block_on(ping.wait(Duration::from_secs(10)));
    assert!(
        status.success(),
        "{what}: ping failed ({status})\nstdout: {out}\nstderr: {err}"
    );
}

/// Whether the namespace has an interface called `name`.
fn has_link(netns: &Netns, name: &str) -> bool {
    Command::new("ip")
        .args(["-n", netns.name(), "link", "show", name])
        .output()
        .expect("ip")
        .status
        .success()
}

#[test]
fn shutdown_closes_the_tap_and_a_new_stack_takes_over() {
    require_root_and_tun();
    let net = TapNet::new(1500);
    let stack = net.stack;
    ping_once(&net, "first stack");

    // A connection from Linux whose data the application has not read: the stack holds
    // received frames when it shuts down.
    let mut listener = TcpListener::bind(stack, PORT, 1, || {
        Some(TcpBuffers::with_capacity(16 * 1024, 16 * 1024))
    })
    .unwrap();
    let _client = ChildGuard::spawn(net.netns.command("bash").args([
        "-c",
        &format!("exec 3<>/dev/tcp/{ZCNET_ADDR}/{PORT}; printf unread >&3; sleep 30"),
    ]));
    let mut conn = net
        .exec
        .block_on(timeout(Duration::from_secs(10), listener.accept()))
        .expect("Linux connects")
        .unwrap();
    net.exec.block_on(sleep(Duration::from_millis(200)));
    assert!(net.pool.occupancy().stack > 0, "{}", net.pool.occupancy());

    let driver = stack.shutdown().expect("shutdown");
    net.exec.block_on(sleep(Duration::from_millis(50)));
    assert!(
        has_link(&net.netns, &net.tap_name),
        "the TAP stays while its driver is held"
    );
    let mut buf = [0u8; 16];
    assert_eq!(
        net.exec.block_on(conn.read(&mut buf)),
        Err(TcpError::ShutDown)
    );
    drop(driver);
    assert!(
        !has_link(&net.netns, &net.tap_name),
        "dropping the driver closed the TAP, and the kernel removed the interface"
    );
    drop((conn, listener));
    assert_all_free(net.pool);

    // The same name, pool and executor again; new stack resources (the old stay claimed).
    let tap = Tap::open(
        net.platform,
        net.pool,
        &TapConfig::new(&net.tap_name).with_mtu(1500),
    )
    .expect("the name is free again");
    net.netns.adopt(&net.tap_name, &format!("{LINUX_ADDR}/24"));
    let config = Config {
        ipv4: Ipv4Config::Static(StaticV4 {
            address: Ipv4Cidr::new(ZCNET_ADDR, 24),
            gateway: None,
        }),
        ..Config::new(zcnet_tests::secret::from_os())
    };
    let resources: &'static StackResources<8> = StackResources::leak();
    let (second, runner) =
        Stack::new(net.exec, net.pool, Box::new(tap), config, resources).expect("second stack");
    runner.spawn(net.exec.local_spawner());
    // Linux still has the old stack's MAC for 10.77.0.2; the new TAP has a new one.
    net.netns.ip(&["neigh", "flush", "dev", &net.tap_name]);
    ping_once(&net, "second stack");
    drop(second.shutdown().expect("second shutdown"));
    assert_all_free(net.pool);
}
