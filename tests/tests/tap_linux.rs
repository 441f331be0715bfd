//! zcnet against the Linux kernel's own stack, over a TAP whose kernel side lives in a network
//! namespace each test creates (see `zcnet_tests::netns`): ping, TCP both ways, TIME-WAIT port
//! reuse by a Linux client, UDP, link state.
//! Needs root and /dev/net/tun (fails, never skips, without them), plus `ping` and `python3`.
//! Traffic goes only to addresses inside the test's own namespace.

use std::time::{Duration, Instant as StdInstant};

use sha2::{Digest, Sha256};
use zcnet_buffer::{Driver, LinkState};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::time::{sleep, timeout};
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpListener, TcpSocket};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::IpEndpoint;
use zcnet_tap::{Tap, TapConfig};
use zcnet_tests::netns::{
    slot_size_for, tap_name, ChildGuard, Netns, TapNet, LINUX_ADDR, ZCNET_ADDR,
};

/// Every child gets at most this long.
const CHILD_LIMIT: Duration = Duration::from_secs(60);

fn python(net: &TapNet, script: &str) -> ChildGuard {
    ChildGuard::spawn(net.netns.command("python3").args(["-c", script]))
}

fn assert_success(what: &str, status: std::process::ExitStatus, out: &str, err: &str) {
    assert!(
        status.success(),
        "{what} failed ({status})\nstdout: {out}\nstderr: {err}"
    );
}

/// `ping -c 100 -i 0.01` from inside the namespace: 100 echo replies from the stack, none lost.
#[test]
fn linux_pings_zcnet_100_times_none_lost() {
    let net = TapNet::new(1500);
    let mut ping = ChildGuard::spawn(net.netns.command("ping").args([
        "-c",
        "100",
        "-i",
        "0.01",
        "-W",
        "1",
        &ZCNET_ADDR.to_string(),
    ]));
    let (status, out, err) = net.exec.block_on(ping.wait(CHILD_LIMIT));
    assert_success("ping", status, &out, &err);
    assert!(
        out.contains("100 packets transmitted, 100 received, 0% packet loss"),
        "ping output: {out}"
    );
    let s = net.tap_stats.get();
    assert!(s.rx_frames >= 100 && s.tx_frames >= 100, "{s:?}");
    assert_eq!(s.rx_errors + s.tx_errors, 0, "{s:?}");
}

/// Jumbo frames: at MTU 9000 on both sides, 8972-byte pings (9000-byte IP packets, don't
/// fragment) are answered.
#[test]
fn jumbo_pings_at_mtu_9000() {
    let net = TapNet::new(9000);
    let mut ping = ChildGuard::spawn(net.netns.command("ping").args([
        "-c",
        "5",
        "-i",
        "0.01",
        "-W",
        "1",
        "-s",
        "8972",
        "-M",
        "do",
        &ZCNET_ADDR.to_string(),
    ]));
    let (status, out, err) = net.exec.block_on(ping.wait(CHILD_LIMIT));
    assert_success("ping -s 8972", status, &out, &err);
    assert!(out.contains("5 received, 0% packet loss"), "{out}");
    assert!(out.contains("8980 bytes from"), "{out}");
}

/// A zcnet TCP echo server on port 7; a Linux client sends 10 MB (random) while reading the
/// echo, then half-closes; the echo comes back byte-exact (SHA-256 and length checked by the
/// client).
#[test]
fn zcnet_tcp_echo_server_returns_10_mb_byte_exact_to_linux() {
    let net = TapNet::new(1500);
    let stack = net.stack;
    let mut listener = TcpListener::bind(stack, 7, 1, || {
        Some(TcpBuffers::with_capacity(65536, 65536))
    })
    .expect("listen on port 7");
    let server = net.exec.local_spawner().spawn(async move {
        let mut s = listener.accept().await.expect("accept");
        let mut buf = vec![0u8; 16384];
        let mut echoed = 0usize;
        loop {
            let n = s.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            s.write_all(&buf[..n]).await.expect("write");
            echoed += n;
        }
        s.close();
        s.closed().await;
        echoed
    });
    let script = format!(
        r#"
import hashlib, os, socket, sys, threading
N = 10 * 1024 * 1024
data = os.urandom(N)
s = socket.create_connection(("{ZCNET_ADDR}", 7), timeout=20)
def send():
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
t = threading.Thread(target=send)
t.start()
h = hashlib.sha256()
got = 0
while True:
    b = s.recv(1 << 16)
    if not b:
        break
    h.update(b)
    got += len(b)
t.join()
s.close()
if got != N or h.digest() != hashlib.sha256(data).digest():
    print("mismatch: got", got, "of", N)
    sys.exit(1)
print("echoed", got, "bytes, sha256", h.hexdigest())
"#
    );
    let mut client = python(&net, &script);
    let started = StdInstant::now();
    let (status, out, err) = net.exec.block_on(client.wait(CHILD_LIMIT));
    assert_success("python TCP client", status, &out, &err);
    assert!(out.contains("echoed 10485760 bytes"), "{out}");
    let echoed = net
        .exec
        .block_on(timeout(Duration::from_secs(10), server))
        .expect("server finished");
    assert_eq!(echoed, 10 * 1024 * 1024);
    eprintln!("10 MB echoed in {:?}", started.elapsed());
}

/// A Linux client that closes first (leaving its side in TIME-WAIT for 60 s) may connect again
/// from the same port a second later, because zcnet negotiates TCP timestamps: Linux reuses a
/// TIME-WAIT port for a new connection (`tcp_tw_reuse=1`) only when that connection carried
/// them. With four local ports, the second round of four connections fails with
/// "Cannot assign requested address" without timestamps.
#[test]
fn a_linux_client_reuses_its_time_wait_ports_thanks_to_timestamps() {
    let net = TapNet::new(1500);
    for setting in [
        "net.ipv4.tcp_tw_reuse=1",
        "net.ipv4.ip_local_port_range=40000 40003",
    ] {
        zcnet_tests::netns::run(net.netns.command("sysctl").args(["-w", setting]));
    }
    let stack = net.stack;
    let mut listener =
        TcpListener::bind(stack, 7, 2, || Some(TcpBuffers::with_capacity(4096, 4096)))
            .expect("listen on port 7");
    // Reads each connection to its end, then closes: the client's FIN comes first.
    net.exec.local_spawner().spawn(async move {
        loop {
            // Fails once the stack is shut down (at the end of the test): the task ends.
            let Ok(mut s) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 512];
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
            s.close();
            let _ = timeout(Duration::from_secs(5), s.closed()).await;
        }
    });
    let script = format!(
        r#"
import socket, subprocess, sys, time
def time_wait():
    out = subprocess.run(["ss", "-tan", "state", "time-wait"], capture_output=True, text=True).stdout
    return sum(1 for l in out.splitlines() if "{ZCNET_ADDR}:7" in l)
def one():
    s = socket.create_connection(("{ZCNET_ADDR}", 7), timeout=5)
    port = s.getsockname()[1]
    s.sendall(b"x" * 100)
    s.shutdown(socket.SHUT_WR)
    while s.recv(1024):
        pass
    s.close()
    return port
first = [one() for _ in range(4)]
deadline = time.time() + 5
while time_wait() < 4 and time.time() < deadline:
    time.sleep(0.05)
print("time-wait", time_wait())
# Linux reuses a TIME-WAIT port whose last timestamp is more than a second old.
time.sleep(1.5)
second = []
for _ in range(4):
    try:
        second.append(one())
    except OSError as e:
        print("connect failed:", e)
        sys.exit(1)
print("first", sorted(first), "second", sorted(second))
print("reused", len(set(first) & set(second)))
"#
    );
    let mut client = python(&net, &script);
    let (status, out, err) = net.exec.block_on(client.wait(CHILD_LIMIT));
    assert_success("python TIME-WAIT client", status, &out, &err);
    assert!(out.contains("time-wait 4"), "{out}");
    assert!(out.contains("reused 4"), "{out}");
}

/// zcnet as a TCP client of a Linux (python) server in the namespace: 2 MB up, the server's
/// SHA-256 and byte count of what it got come back and match.
#[test]
fn zcnet_tcp_client_of_a_linux_server() {
    let net = TapNet::new(1500);
    let script = format!(
        r#"
import hashlib, socket
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("{LINUX_ADDR}", 8080))
l.listen(1)
l.settimeout(30)
c, peer = l.accept()
c.settimeout(30)
h = hashlib.sha256()
n = 0
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    h.update(b)
    n += len(b)
c.sendall(("%s %d" % (h.hexdigest(), n)).encode())
c.close()
print("served", peer[0], n)
"#
    );
    let mut server = python(&net, &script);
    let data: Vec<u8> = (0..2_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let want = format!("{:x} {}", Sha256::digest(&data), data.len());
    let stack = net.stack;
    let reply = net.exec.block_on(async move {
        let remote = IpEndpoint::new(LINUX_ADDR.into(), 8080);
        // The server may not listen yet (python starting): retry refused connects for 20 s.
        let deadline = StdInstant::now() + Duration::from_secs(20);
        let mut c = loop {
            let mut c = TcpSocket::new(stack, TcpBuffers::with_capacity(65536, 65536)).unwrap();
            match c.connect_timeout(remote, Duration::from_secs(5)).await {
                Ok(()) => break c,
                Err(TcpError::ConnectionRefused) if StdInstant::now() < deadline => {
                    drop(c);
                    sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("connect to the Linux server: {e:?}"),
            }
        };
        c.write_all(&data).await.unwrap();
        c.shutdown();
        let mut reply = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            let n = timeout(Duration::from_secs(20), c.read(&mut buf))
                .await
                .expect("reply within 20 s")
                .unwrap();
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(reply).unwrap()
    });
    let (status, out, err) = net.exec.block_on(server.wait(CHILD_LIMIT));
    assert_success("python TCP server", status, &out, &err);
    assert_eq!(reply, want);
    assert!(
        out.contains(&format!("served {ZCNET_ADDR} 2000000")),
        "{out}"
    );
}

/// A zcnet UDP echo on port 7; a Linux client sends 200 datagrams of 1..1472 bytes and gets
/// each back unchanged.
#[test]
fn zcnet_udp_echo_with_a_linux_client() {
    let net = TapNet::new(1500);
    let sock = UdpSocket::bind(net.stack, 7, UdpBuffers::with_capacity(32, 65536)).unwrap();
    let echo = net.exec.local_spawner().spawn(async move {
        let mut buf = vec![0u8; 2048];
        for _ in 0..200 {
            let (n, from) = sock.recv_from(&mut buf).await.unwrap();
            sock.send_to(&buf[..n], from).await.unwrap();
        }
    });
    let script = format!(
        r#"
import os, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
for i in range(200):
    size = 1 + (i * 7919) % 1472
    msg = os.urandom(size)
    s.sendto(msg, ("{ZCNET_ADDR}", 7))
    got, peer = s.recvfrom(4096)
    if got != msg or peer != ("{ZCNET_ADDR}", 7):
        print("mismatch at", i, len(got), size, peer)
        sys.exit(1)
print("udp ok 200")
"#
    );
    let mut client = python(&net, &script);
    let (status, out, err) = net.exec.block_on(client.wait(CHILD_LIMIT));
    assert_success("python UDP client", status, &out, &err);
    assert!(out.contains("udp ok 200"), "{out}");
    net.exec
        .block_on(timeout(Duration::from_secs(5), echo))
        .expect("echo task finished");
}

/// The driver reads the link state of its interface inside the namespace it was moved to:
/// up after `ip link set up` there, down after `ip link set down`, and a write while down is
/// refused as `LinkDown`.
#[test]
fn link_state_follows_the_interface_into_its_namespace() {
    let netns = Netns::new();
    let platform = LinuxPlatform::leak().unwrap();
    let pool = zcnet_buffer::FramePool::leak(
        zcnet_buffer::PoolConfig::new(8).with_slot_size(slot_size_for(1500)),
    )
    .unwrap();
    let name = tap_name();
    let mut tap = Tap::open(platform, pool, &TapConfig::new(&name)).unwrap();
    assert_eq!(tap.link_state().unwrap(), LinkState::Down);
    netns.adopt(&name, &format!("{LINUX_ADDR}/24"));
    assert_eq!(tap.current_name().unwrap(), name);
    assert_eq!(tap.link_state().unwrap(), LinkState::Up);
    netns.ip(&["link", "set", &name, "down"]);
    assert_eq!(tap.link_state().unwrap(), LinkState::Down);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let std::task::Poll::Ready(mut f) = tap.poll_transmit_frame(&mut cx) else {
        panic!("a TX frame is free");
    };
    f.append(60).unwrap().fill(0xff);
    assert_eq!(tap.transmit(f), Err(zcnet_buffer::TxError::LinkDown));
    netns.ip(&["link", "set", &name, "up"]);
    assert_eq!(tap.poll_link_state(&mut cx), LinkState::Up);
    drop(tap);
    assert_eq!(pool.audit().unwrap().free, 8);
}

/// A test that panics mid-way still tears down: its namespace and TAP interface are gone.
#[test]
fn a_panicking_test_leaves_no_namespace_or_tap_behind() {
    let names = std::sync::Mutex::new(None);
    let r = std::panic::catch_unwind(|| {
        let net = TapNet::new(1500);
        *names.lock().unwrap() = Some((net.netns.name().to_string(), net.tap_name.clone()));
        let mut ping = ChildGuard::spawn(net.netns.command("ping").args([
            "-c",
            "1000",
            "-i",
            "0.01",
            &ZCNET_ADDR.to_string(),
        ]));
        net.exec.block_on(async {
            sleep(Duration::from_millis(50)).await;
            panic!("deliberate failure with ping still running");
        });
        drop(ping.0.kill());
    });
    assert!(r.is_err());
    let (ns, tap) = names.into_inner().unwrap().expect("built");
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list
            .lines()
            .any(|l| l.split_whitespace().next() == Some(ns.as_str())),
        "namespace {ns} left behind: {list}"
    );
    assert!(!std::path::Path::new(&format!("/sys/class/net/{tap}")).exists());
    let links = std::process::Command::new("ip")
        .args(["-o", "link"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&links.stdout).contains(&tap));
}
