//! Path MTU discovery against Linux routing: zcnet (TAP, MTU 1500) reaches a Linux client
//! through a Linux router in test-made namespaces, and the router's link to the client takes
//! 1280-byte packets only.
//!
//! ```text
//!   zcnet 10.77.0.2 ── TAP (1500) ── 10.77.0.1 router ns 10.78.0.1 ── veth (1280 | 1500) ── 10.78.0.2 client ns
//! ```
//!
//! The client's own interface has MTU 1500, so it announces an MSS of 1460 and the handshake
//! hides nothing: zcnet's full-sized segments (1500 bytes, Don't Fragment) reach the router,
//! which cannot forward them and answers with ICMP "fragmentation needed" (MTU 1280). Without
//! path MTU discovery every full-sized segment is lost and the transfer stalls; with it zcnet
//! cuts its segments to 1280 bytes and the 8 MiB arrive byte-exact (SHA-256 on both sides).
//!
//! Both namespaces (and the veth pair inside them) are the test's own and go when it ends.
//! Needs root, /dev/net/tun, `ip`, `sysctl` and `python3` (fails, never skips, without them).

use std::time::Duration;

use sha2::{Digest, Sha256};
use zcnet_executor::time::{sleep, timeout};
use zcnet_stack::tcp::{TcpBuffers, TcpListener};
use zcnet_stack::{DropReason, Ipv4Cidr, Ipv4Config, StaticV4};
use zcnet_tests::netns::{if_name, run, ChildGuard, Netns, TapNet, LINUX_ADDR, ZCNET_ADDR};

/// Bytes zcnet sends.
const TOTAL: usize = 8 * 1024 * 1024;
/// The client (and so the whole transfer) gets at most this long: 8 MiB over a TAP take well
/// under a second; a path that black-holes full-sized segments never finishes.
const LIMIT: Duration = Duration::from_secs(60);
/// The MTU of the router's link to the client.
const NARROW: usize = 1280;

#[test]
fn zcnet_finds_the_narrower_path_mtu_through_a_linux_router() {
    let net = TapNet::with(1500, &[&format!("{LINUX_ADDR}/24")], |c| {
        c.ipv4 = Ipv4Config::Static(StaticV4 {
            address: Ipv4Cidr::new(ZCNET_ADDR, 24),
            gateway: Some(LINUX_ADDR),
        });
    });
    let router = &net.netns;
    let client = Netns::new();
    // The veth pair is made inside the namespaces: nothing is left in the root namespace if
    // the test fails half-way.
    let (r_if, c_if) = (if_name("zpr"), if_name("zpc"));
    let narrow = NARROW.to_string();
    router.ip(&[
        "link",
        "add",
        &r_if,
        "mtu",
        &narrow,
        "type",
        "veth",
        "peer",
        "name",
        &c_if,
        "mtu",
        "1500",
        "netns",
        client.name(),
    ]);
    router.ip(&["addr", "add", "10.78.0.1/24", "dev", &r_if]);
    router.ip(&["link", "set", &r_if, "up"]);
    client.ip(&["addr", "add", "10.78.0.2/24", "dev", &c_if]);
    client.ip(&["link", "set", &c_if, "up"]);
    client.ip(&["route", "add", "default", "via", "10.78.0.1"]);
    run(router
        .command("sysctl")
        .args(["-qw", "net.ipv4.ip_forward=1"]));

    let mut listener = TcpListener::bind(net.stack, 5003, 1, || {
        Some(TcpBuffers::with_capacity(64 * 1024, 256 * 1024))
    })
    .expect("listen");
    let server = net.exec.local_spawner().spawn(async move {
        let mut s = listener.accept().await.expect("accept");
        let mut h = Sha256::new();
        let mut sent = 0usize;
        while sent < TOTAL {
            // An error (the client gave up on a stalled path) ends the server; the client's
            // failure is the test's report.
            sent += s
                .write_with(|space| {
                    let n = space.len().min(TOTAL - sent);
                    for (i, b) in space[..n].iter_mut().enumerate() {
                        let k = sent + i;
                        *b = (k as u8).wrapping_mul(31) ^ (k >> 11) as u8;
                    }
                    h.update(&space[..n]);
                    (n, n)
                })
                .await?;
        }
        s.close();
        s.closed().await;
        Ok::<_, zcnet_stack::tcp::TcpError>(format!("{:x}", h.finalize()))
    });
    // 8 MiB fit in memory: read everything, then hash it.
    let script = format!(
        r#"
import hashlib, socket
s = socket.create_connection(("{ZCNET_ADDR}", 5003), timeout=30)
print("mss=%d" % s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG))
data = bytearray()
while chunk := s.recv(1 << 20):
    data += chunk
print("sha256=" + hashlib.sha256(data).hexdigest())
print("bytes=%d" % len(data))
"#
    );
    let mut child = ChildGuard::spawn(client.command("python3").args(["-c", &script]));
    let (status, out, err) = net.exec.block_on(child.wait(LIMIT));
    assert!(status.success(), "client failed ({status})\n{out}\n{err}");
    let digest = net
        .exec
        .block_on(timeout(Duration::from_secs(10), server))
        .expect("server finished")
        .expect("server wrote everything");
    let field = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {key}= in {out}"))
            .to_string()
    };
    assert_eq!(field("bytes"), TOTAL.to_string());
    assert_eq!(field("sha256"), digest, "SHA-256 of the bytes sent");
    let st = net.stack.stats();
    assert!(
        st.path_mtu_reductions >= 1,
        "the router's message lowered the path MTU: {st:?}"
    );
    assert_eq!(st.dropped(DropReason::IcmpUnmatched), 0, "{st:?}");
    eprintln!(
        "8 MiB through a {NARROW}-byte hop; the client saw MSS {}; {} reductions, {} unchanged",
        field("mss"),
        st.path_mtu_reductions,
        st.path_mtu_unchanged
    );
    net.exec.block_on(sleep(Duration::from_millis(200)));
    drop(client);
}
