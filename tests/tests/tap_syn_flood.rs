//! A SYN flood from forged sources against a zcnet listener, with Linux's `curl` as the real
//! client, in a network namespace the test creates (see `zcnet_tests::netns`).
//!
//! A python script inside the namespace writes SYNs as raw Ethernet frames (an `AF_PACKET`
//! socket on the TAP's kernel side) from random addresses of the namespace's /24 that no host
//! has, with random ports and MACs, the way a flood arrives from a LAN. zcnet answers them
//! (SYN-ACKs to addresses it must resolve and never can: its neighbour table's bounds are part
//! of the attack) while `curl` fetches a page again and again. With SYN cookies every fetch is
//! served; with them off the listener is locked out.
//! Needs root, /dev/net/tun, `python3`, `curl` and `ping`. Traffic goes only to addresses
//! inside the test's own namespace.

use std::time::Duration;

use zcnet_executor::time::timeout;
use zcnet_stack::tcp::{TcpBuffers, TcpListener};
use zcnet_tests::netns::{ChildGuard, TapNet, LINUX_ADDR, ZCNET_ADDR};

/// The listener's port and backlog.
const PORT: u16 = 80;
const BACKLOG: usize = 8;

/// The page zcnet serves.
const PAGE: &str = "HTTP/1.0 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nserved";

/// The flood and the fetches: argv = interface, fetches, curl's time limit (s). Floods at about
/// 2000 SYNs a second from one second before the first fetch until the last ends; prints each
/// fetch's HTTP code and time, then `served <ok>/<fetches>` and how many SYNs it sent.
const SCRIPT: &str = r#"
import random, socket, struct, subprocess, sys, threading, time
IF, N, LIMIT = sys.argv[1], int(sys.argv[2]), sys.argv[3]
DST, PORT = "{ZCNET}", {PORT}

# zcnet's MAC: ask the kernel to resolve it.
subprocess.run(["ping", "-c", "1", "-W", "2", DST], capture_output=True)
dst_mac = None
for line in open("/proc/net/arp"):
    f = line.split()
    if f[0] == DST:
        dst_mac = bytes.fromhex(f[3].replace(":", ""))
if dst_mac is None:
    print("zcnet's MAC not resolved"); sys.exit(2)

def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff

def syn():
    # A source on the /24 that is neither the kernel's address nor zcnet's: nobody has it.
    src = "10.77.0.%d" % random.randint(10, 250)
    mac = bytes([0x02]) + random.getrandbits(40).to_bytes(5, "big")
    opts = (struct.pack("!BBH", 2, 4, 1460) + b"\x04\x02"
            + struct.pack("!BBII", 8, 10, random.getrandbits(32), 0) + b"\x01"
            + struct.pack("!BBB", 3, 3, 7))
    tlen = 20 + len(opts)
    tcp = struct.pack("!HHIIBBHHH", random.randint(1024, 65535), PORT,
                      random.getrandbits(32), 0, (tlen // 4) << 4, 0x02, 64240, 0, 0) + opts
    pseudo = socket.inet_aton(src) + socket.inet_aton(DST) + struct.pack("!BBH", 0, 6, tlen)
    tcp = tcp[:16] + struct.pack("!H", checksum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + tlen, random.getrandbits(16), 0x4000,
                     64, 6, 0, socket.inet_aton(src), socket.inet_aton(DST))
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return dst_mac + mac + b"\x08\x00" + ip + tcp

s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((IF, 0))
done = threading.Event()
sent = [0]
def flood():
    while not done.is_set():
        for _ in range(20):
            s.send(syn())
            sent[0] += 1
        time.sleep(0.01)
t = threading.Thread(target=flood)
t.start()
time.sleep(1)
ok = 0
for i in range(N):
    r = subprocess.run(["curl", "-s", "--max-time", LIMIT, "-w", " %{http_code} %{time_total}",
                        "http://%s:%d/" % (DST, PORT)], capture_output=True, text=True)
    print("fetch", i, r.returncode, r.stdout.strip())
    if r.returncode == 0 and r.stdout.startswith("served 200"):
        ok += 1
    time.sleep(0.1)
done.set()
t.join()
print("served %d/%d" % (ok, N))
print("syns", sent[0])
"#;

/// zcnet serving [`PAGE`] on [`PORT`] (backlog [`BACKLOG`]) while the script floods and
/// fetches `fetches` times; returns the script's output and the stack's statistics.
fn flood_and_fetch(
    net: &TapNet,
    fetches: usize,
    limit_s: u32,
) -> (String, zcnet_stack::StackStats) {
    let mut listener = TcpListener::bind(net.stack, PORT, BACKLOG, || {
        Some(TcpBuffers::with_capacity(4096, 4096))
    })
    .expect("listen");
    let sp = net.exec.local_spawner();
    net.exec.local_spawner().spawn(async move {
        // Ends with an error once the stack is shut down.
        while let Ok(mut s) = listener.accept().await {
            sp.spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 512];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                if s.write_all(PAGE.as_bytes()).await.is_ok() {
                    s.close();
                    let _ = timeout(Duration::from_secs(5), s.closed()).await;
                }
            });
        }
    });
    let script = SCRIPT
        .replace("{ZCNET}", &ZCNET_ADDR.to_string())
        .replace("{PORT}", &PORT.to_string());
    let mut child = ChildGuard::spawn(net.netns.command("python3").args([
        "-c",
        &script,
        &net.tap_name,
        &fetches.to_string(),
        &limit_s.to_string(),
    ]));
    let limit = Duration::from_secs(30 + u64::from(limit_s) * fetches as u64);
    let (status, out, err) = net.exec.block_on(child.wait(limit));
    assert!(
        status.success(),
        "flood script failed ({status})\n{out}\n{err}"
    );
    (out, net.stack.stats())
}

/// Every one of 30 fetches is served while forged SYNs arrive at about 2000 a second: the
/// forged handshakes hold every listening socket, and each fetch gets through with a cookie.
#[test]
fn every_fetch_is_served_during_a_syn_flood() {
    let net = TapNet::new(1500);
    let fetches = 30;
    let (out, s) = flood_and_fetch(&net, fetches, 10);
    assert!(
        out.contains(&format!("served {fetches}/{fetches}")),
        "{out}\n{s:?}"
    );
    // The flood was one: many more SYNs than the backlog, answered with cookies.
    let syns: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("syns "))
        .and_then(|n| n.parse().ok())
        .expect("the script's SYN count");
    assert!(syns > 20 * BACKLOG as u64, "{out}");
    assert!(s.syn_cookies_sent > 10 * BACKLOG as u64, "{s:?}");
    // The fetches came through cookies, not through free listening sockets.
    assert!(s.syn_cookies_validated >= fetches as u64, "{s:?}");
    assert_eq!(s.syn_cookies_rejected, 0, "{s:?}");
    eprintln!("{out}\n{s:?}");
}

/// The same flood with SYN cookies off: fetches within 3 s each fail (the backlog is held by
/// forged handshakes, and the SYNs beyond it are dropped).
#[test]
fn without_cookies_the_flood_locks_curl_out() {
    let net = TapNet::with(1500, &[&format!("{LINUX_ADDR}/24")], |c| {
        c.syn_cookies = false
    });
    let (out, s) = flood_and_fetch(&net, 3, 3);
    assert!(out.contains("served 0/3"), "{out}\n{s:?}");
    assert_eq!(s.syn_cookies_sent, 0, "{s:?}");
    assert!(s.dropped(zcnet_stack::DropReason::BacklogFull) > 0, "{s:?}");
}
