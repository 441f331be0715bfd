//! zcnet's zero-copy datagram socket against the Linux kernel over a TAP in a test-made network
//! namespace (needs root and `/dev/net/tun`; fails with a clear message without them).

use std::time::Duration;

use zcnet_executor::time::timeout;
use zcnet_stack::datagram::{DatagramQueue, DatagramSocket};
use zcnet_tests::netns::{require_root_and_tun, ChildGuard, TapNet, LINUX_ADDR, ZCNET_ADDR};

/// Every child gets at most this long.
const CHILD_LIMIT: Duration = Duration::from_secs(60);

/// zcnet's zero-copy socket first sends to a Linux UDP socket (resolving the kernel's MAC with
/// its own ARP request), then echoes 200 datagrams of 1 to 1472 bytes from a python3 client in
/// the namespace, byte-exact, through `recv` / `tx_frame` / `send_to`.
#[test]
fn linux_udp_client_is_echoed_by_the_zero_copy_socket() {
    require_root_and_tun();
    let net = TapNet::new(1500);
    let stack = net.stack;
    let sock = DatagramSocket::bind(stack, 7, DatagramQueue::with_capacity(32)).unwrap();
    let script = format!(
        r#"
import os, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{LINUX_ADDR}", 9000))
s.settimeout(10)
data, peer = s.recvfrom(4096)
if data != b"hello" or peer != ("{ZCNET_ADDR}", 7):
    print("bad hello", data, peer)
    sys.exit(1)
for i in range(200):
    size = 1 + (i * 7919) % 1472
    msg = os.urandom(size)
    s.sendto(msg, ("{ZCNET_ADDR}", 7))
    while True:
        got, peer = s.recvfrom(4096)
        if got != b"hello":
            break
    if got != msg or peer != ("{ZCNET_ADDR}", 7):
        print("mismatch at", i, len(got), size, peer)
        sys.exit(1)
print("zero-copy udp ok 200")
"#
    );
    let mut client = ChildGuard::spawn(net.netns.command("python3").args(["-c", &script]));
    let echo = net.exec.local_spawner().spawn(async move {
        // Say hello until the client answers (it may not have bound its socket yet).
        let mut first = None;
        for _ in 0..100 {
            let mut hello = sock.tx_frame().await;
            hello.append(5).unwrap().copy_from_slice(b"hello");
            sock.send_to(hello, (LINUX_ADDR, 9000))
                .await
                .expect("hello sent (ARP answered by Linux)");
            if let Ok(d) = timeout(Duration::from_millis(200), sock.recv()).await {
                first = Some(d);
                break;
            }
        }
        let mut next = first.expect("the client sent a datagram");
        for i in 0..200 {
            let mut reply = sock.tx_frame().await;
            let n = next.payload().len();
            reply.append(n).unwrap().copy_from_slice(next.payload());
            let to = next.src();
            drop(next); // the RX slot goes back before we wait for the next datagram
            sock.send_to(reply, to).await.expect("echo sent");
            if i < 199 {
                next = sock.recv().await;
            } else {
                break;
            }
        }
        sock
    });
    let (status, out, err) = net.exec.block_on(client.wait(CHILD_LIMIT));
    assert!(
        status.success(),
        "python client failed ({status})\nstdout: {out}\nstderr: {err}"
    );
    assert!(out.contains("zero-copy udp ok 200"), "{out}");
    let sock = net
        .exec
        .block_on(timeout(Duration::from_secs(5), echo))
        .expect("echo task finished");
    let s = stack.stats();
    assert!(s.datagrams_in >= 200, "{s:?}");
    assert!(s.datagrams_out >= 201, "{s:?}");
    assert_eq!(sock.dropped(), 0);
    drop(sock);
    assert_eq!(net.pool.occupancy().get(zcnet_buffer::SlotState::Lent), 0);
}
