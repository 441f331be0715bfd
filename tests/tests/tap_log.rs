//! The TAP driver's and the stack's log lines (their `log` feature) over a real TAP in a
//! test-made network namespace (needs root and `/dev/net/tun`; fails with a clear message
//! without them): the TAP opened, a write refused while the interface is down, and the link
//! going down and up as the driver and the stack see it.

use std::time::Duration;

use log::Level;
use zcnet_buffer::LinkState;
use zcnet_executor::time::{sleep, timeout};
use zcnet_stack::datagram::{DatagramQueue, DatagramSocket};
use zcnet_tests::log_capture::LogCapture;
use zcnet_tests::netns::{require_root_and_tun, TapNet, LINUX_ADDR};

#[test]
fn tap_opened_and_the_link_going_down_and_up_are_logged() {
    require_root_and_tun();
    let log = LogCapture::start();
    let net = TapNet::new(1500);
    let stack = net.stack;
    let name = net.tap_name.clone();
    log.expect(
        Level::Info,
        "zcnet_tap",
        &format!("TAP {name}: opened, MTU 1500"),
    );
    // The link task's first look finds the interface up.
    net.exec.block_on(sleep(Duration::from_millis(100)));
    log.expect(Level::Debug, "zcnet_tap", &format!("TAP {name}: link up"));

    // Down: nothing tells the driver until a write fails (the ARP request for the datagram's
    // next hop); then the stack learns it.
    net.netns.ip(&["link", "set", &name, "down"]);
    let sock = DatagramSocket::bind(stack, 7, DatagramQueue::with_capacity(4)).unwrap();
    net.exec.block_on(async move {
        let mut f = sock.tx_frame().await;
        f.append(4).unwrap().copy_from_slice(b"ping");
        let _ = timeout(Duration::from_millis(500), sock.send_to(f, (LINUX_ADDR, 9))).await;
        timeout(Duration::from_secs(3), stack.wait_link(LinkState::Down))
            .await
            .expect("the stack sees the link down");
    });
    net.netns.ip(&["link", "set", &name, "up"]);
    net.exec
        .block_on(timeout(
            Duration::from_secs(3),
            stack.wait_link(LinkState::Up),
        ))
        .expect("the stack sees the link back (it asks every second while down)");

    log.expect(
        Level::Debug,
        "zcnet_tap",
        &format!("TAP {name}: write refused: the interface is down"),
    );
    log.expect(Level::Debug, "zcnet_tap", &format!("TAP {name}: link down"));
    log.expect(Level::Warn, "zcnet_stack::link", "link down");
    log.expect(Level::Info, "zcnet_stack::link", "link up");
    assert_eq!(
        log.matching("zcnet_tap", &format!("TAP {name}: link up"))
            .len(),
        2,
        "up at start and again:\n{}",
        log.dump()
    );
}
