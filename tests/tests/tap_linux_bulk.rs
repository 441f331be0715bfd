//! TCP bulk against the Linux kernel over a TAP in a test-made namespace (see
//! `zcnet_tests::netns`): 100 MiB from a Linux client to a zcnet server (once more with the TAP
//! handing over the kernel's super-segments as chains, and a 1 MiB receive window), and 100 MiB
//! from a zcnet
//! server to a Linux client (in super-segments the TAP segments, and again with that offload off
//! and the stack cutting them), each byte-exact by SHA-256 (both sides hash what they sent or got,
//! and the digests and byte counts are compared); and 32 MiB through a zcnet echo server, both
//! ways at once, with no retransmission timeout on the lossless path. zcnet hashes and generates its bytes in place
//! in the connection's pool frames (`read_with` / `write_with`). Wall times are printed
//! (`--nocapture`).
//!
//! Each test ends with the pool audit: every slot back once the connection is closed and
//! the sockets dropped.
//!
//! The tests take turns (a lock): each measures its transfer on its own.
//! Needs root, /dev/net/tun and `python3` (fails, never skips, without them).

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use zcnet_executor::time::{sleep, timeout};
use zcnet_stack::tcp::{TcpBuffers, TcpListener};
use zcnet_stack::DropReason;
use zcnet_tests::netns::{ChildGuard, TapNet, ZCNET_ADDR};

/// Bytes per direction.
const TOTAL: usize = 100 * 1024 * 1024;
/// The whole transfer, child included, gets at most this long.
const LIMIT: Duration = Duration::from_secs(240);
/// How long the stack runs after a transfer before the pool audit: the last segments are
/// exchanged by then (a TIME-WAIT connection holds no slot, so it need not run out).
const SETTLE: Duration = Duration::from_millis(200);
/// Socket buffers on the zcnet side (per direction).
const BUF: usize = 256 * 1024;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(BUF, BUF))
}

fn assert_success(what: &str, status: std::process::ExitStatus, out: &str, err: &str) {
    assert!(
        status.success(),
        "{what} failed ({status})\nstdout: {out}\nstderr: {err}"
    );
}

/// The value after `key=` in `out` (a line `key=value`).
fn field<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in the child's output: {out}"))
}

/// Runs the Python client `script` in the namespace (at most `LIMIT`) and then waits for the
/// zcnet side, `server`, to finish (at most 10 s more). Returns the client's output, its wall
/// time, and the server's result; panics if the client failed.
fn run_client<T>(
    net: &TapNet,
    script: &str,
    what: &str,
    server: impl Future<Output = T>,
) -> (String, Duration, T) {
    let started = Instant::now();
    let mut client = ChildGuard::spawn(net.netns.command("python3").args(["-c", script]));
    let (status, out, err) = net.exec.block_on(client.wait(LIMIT));
    let elapsed = started.elapsed();
    assert_success(what, status, &out, &err);
    let result = net
        .exec
        .block_on(timeout(Duration::from_secs(10), server))
        .expect("server finished");
    (out, elapsed, result)
}

fn report(what: &str, elapsed: Duration) {
    eprintln!(
        "{what}: {TOTAL} bytes in {elapsed:.2?} ({:.1} MB/s)",
        TOTAL as f64 / elapsed.as_secs_f64() / 1e6
    );
}

/// Once the server task has finished (its socket closed and dropped, the listener dropped) and
/// the client has exited: lets the stack run for `SETTLE`, then audits the pool: every slot
/// back but the TAP's posted one, none SENT or RETAINED.
fn settle_and_audit(net: &TapNet) {
    net.exec.block_on(sleep(SETTLE));
    net.assert_slots_back();
}

/// A Linux client sends 100 MiB of random bytes and half-closes; the zcnet server hashes what
/// it reads (in place) and answers with its SHA-256 and byte count, which the client checks
/// against its own; the test checks them against the client's too.
#[test]
fn linux_sends_100_mib_to_zcnet_byte_exact() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let net = TapNet::new(1500);
    linux_sends_100_mib(&net, buffers, "Linux -> zcnet");
    settle_and_audit(&net);
}

/// Receive buffers of 1 MiB on the zcnet side: a window past what 64 received segments allow.
fn big_buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(1024 * 1024, BUF))
}

/// [`linux_sends_100_mib_to_zcnet_byte_exact`] with the TAP taking the kernel's super-segments
/// (`TapConfig::rx_gso`: TSO negotiated on the TAP, GSO packets of up to 64 KiB read into
/// chains) and a 1 MiB receive buffer: the chains reach zcnet's TCP whole
/// (`StackStats::rx_chains`), the bytes arrive exact, and the window the connection offers
/// goes past 64 segments of 1,448 bytes.
#[test]
fn linux_sends_100_mib_to_zcnet_in_super_segments_byte_exact() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let net = TapNet::with_tap(1500, |c| c.with_rx_gso(true));
    let widest = linux_sends_100_mib(&net, big_buffers, "Linux -> zcnet, super-segments");
    let (tap, stack) = (net.tap_stats.get(), net.stack.stats());
    eprintln!("widest window {widest}\n{tap:?}\n{stack:?}");
    assert!(
        tap.rx_chains > 0,
        "the TAP read GSO packets into chains: {tap:?}"
    );
    assert!(stack.rx_chains > 0, "zcnet's TCP took chains: {stack:?}");
    for reason in [
        DropReason::Malformed,
        DropReason::BadChecksum,
        DropReason::Unsupported,
    ] {
        assert_eq!(stack.dropped(reason), 0, "{reason:?}: {stack:?}");
    }
    assert!(
        widest > 64 * 1448,
        "a 1 MiB receive buffer opens the window past 64 segments: {widest}"
    );
    settle_and_audit(&net);
}

/// A Linux client sends 100 MiB to a zcnet server whose sockets get `make_buffers` (see
/// [`linux_sends_100_mib_to_zcnet_byte_exact`]); returns the widest receive window the
/// server's connection offered while it read (`TcpStats::window`).
fn linux_sends_100_mib(
    net: &TapNet,
    make_buffers: fn() -> Option<TcpBuffers>,
    what: &str,
) -> usize {
    let mut listener = TcpListener::bind(net.stack, 5001, 1, make_buffers).expect("listen");
    let server = net.exec.local_spawner().spawn(async move {
        let mut s = listener.accept().await.expect("accept");
        let mut h = Sha256::new();
        let (mut got, mut widest) = (0usize, 0usize);
        while let Some(n) = s
            .read_with(|data| {
                h.update(&*data);
                (data.len(), data.len())
            })
            .await
            .expect("read")
        {
            got += n;
            widest = widest.max(s.stats().window);
        }
        let digest = format!("{:x}", h.finalize());
        s.write_all(format!("{digest} {got}").as_bytes())
            .await
            .expect("reply");
        s.close();
        s.closed().await;
        (digest, got, widest)
    });
    let script = format!(
        r#"
import hashlib, os, socket, sys
N = {TOTAL}
CHUNK = 1 << 20
h = hashlib.sha256()
s = socket.create_connection(("{ZCNET_ADDR}", 5001), timeout=60)
for _ in range(N // CHUNK):
    b = os.urandom(CHUNK)
    h.update(b)
    s.sendall(b)
s.shutdown(socket.SHUT_WR)
reply = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    reply += b
s.close()
print("sha256=" + h.hexdigest())
print("reply=" + reply.decode())
if reply.decode() != "%s %d" % (h.hexdigest(), N):
    sys.exit("zcnet's digest differs")
"#
    );
    let (out, elapsed, (digest, got, widest)) = run_client(net, &script, "python client", server);
    assert_eq!(got, TOTAL);
    assert_eq!(
        digest,
        field(&out, "sha256"),
        "SHA-256 of the bytes received"
    );
    report(what, elapsed);
    let s = net.tap_stats.get();
    assert_eq!(s.rx_errors + s.tx_errors, 0, "{s:?}");
    // The kernel's segments arrived with their checksums checked or partial (TAP offloads):
    // zcnet trusted the mark instead of summing them again, and still got every byte right.
    assert!(s.rx_verified > 0, "{s:?}");
    widest
}

/// A pseudo-random byte stream (xorshift64*, one 8-byte word at a time), the same for every
/// run and independent of how it is cut into pieces.
struct Stream {
    state: u64,
    word: [u8; 8],
    /// Bytes of `word` already handed out (8: none left).
    used: usize,
}

impl Stream {
    fn new(seed: u64) -> Self {
        Stream {
            state: seed,
            word: [0; 8],
            used: 8,
        }
    }

    fn next_word(&mut self) -> [u8; 8] {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes()
    }

    fn fill(&mut self, buf: &mut [u8]) {
        // The rest of a word cut by the previous piece.
        let k = (8 - self.used).min(buf.len());
        buf[..k].copy_from_slice(&self.word[self.used..self.used + k]);
        self.used += k;
        let mut words = buf[k..].chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.next_word());
        }
        let tail = words.into_remainder();
        if !tail.is_empty() {
            self.word = self.next_word();
            tail.copy_from_slice(&self.word[..tail.len()]);
            self.used = tail.len();
        }
    }
}

/// A Linux client connects and reads until end of stream, hashing; the zcnet server generates
/// 100 MiB in place in its send queue's frames, hashing as it goes, then closes. The client's SHA-256 and
/// byte count must match zcnet's. The TAP segments zcnet's super-segments (TSO).
#[test]
fn zcnet_sends_100_mib_to_linux_byte_exact() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    zcnet_sends_100_mib(TapNet::new(1500), true);
}

/// The same with the TAP's segmentation offload off ([`TapConfig::with_tso`]): zcnet cuts its
/// super-segments into MTU-sized frames itself (software GSO), the kernel still completing
/// their checksums.
///
/// [`TapConfig::with_tso`]: zcnet_tap::TapConfig::with_tso
#[test]
fn zcnet_sends_100_mib_to_linux_split_in_software_byte_exact() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    zcnet_sends_100_mib(TapNet::with_tap(1500, |c| c.with_tso(false)), false);
}

/// zcnet sends `TOTAL` bytes to a Linux client over `net` (see the tests above); `tso`: the
/// TAP segments the super-segments, else the stack does.
fn zcnet_sends_100_mib(net: TapNet, tso: bool) {
    let mut listener = TcpListener::bind(net.stack, 5002, 1, buffers).expect("listen");
    let server = net.exec.local_spawner().spawn(async move {
        let mut s = listener.accept().await.expect("accept");
        let mut h = Sha256::new();
        let mut stream = Stream::new(0x9e37_79b9_7f4a_7c15);
        let mut sent = 0usize;
        while sent < TOTAL {
            sent += s
                .write_with(|space| {
                    let n = space.len().min(TOTAL - sent);
                    stream.fill(&mut space[..n]);
                    h.update(&space[..n]);
                    (n, n)
                })
                .await
                .expect("write");
        }
        s.close();
        s.closed().await;
        (format!("{:x}", h.finalize()), sent)
    });
    let script = format!(
        r#"
import hashlib, socket
h = hashlib.sha256()
n = 0
s = socket.create_connection(("{ZCNET_ADDR}", 5002), timeout=60)
buf = bytearray(1 << 20)
view = memoryview(buf)
while True:
    k = s.recv_into(buf)
    if k == 0:
        break
    h.update(view[:k])
    n += k
s.close()
print("sha256=" + h.hexdigest())
print("bytes=%d" % n)
"#
    );
    let (out, elapsed, (digest, sent)) = run_client(&net, &script, "python client", server);
    assert_eq!(sent, TOTAL);
    assert_eq!(field(&out, "bytes"), TOTAL.to_string());
    assert_eq!(field(&out, "sha256"), digest, "SHA-256 of the bytes sent");
    report("zcnet -> Linux", elapsed);
    let s = net.tap_stats.get();
    assert_eq!(s.rx_errors + s.tx_errors, 0, "{s:?}");
    // zcnet's segments went out with partial checksums the kernel completed (TAP offloads),
    // and Linux received every byte right.
    assert!(s.tx_checksum_partial > 0, "{s:?}");
    let st = net.stack.stats();
    eprintln!("TAP {s:?}\nstack {st:?}");
    if tso {
        // The data went as super-segments the kernel segmented (TSO): one write each.
        assert!(s.tx_gso > 0 && s.tx_chains > 0, "{s:?}");
        assert!(
            st.tso_super_segments > 0 && st.gso_pieces == 0,
            "super-segments handed to the TAP whole: {st:?}"
        );
    } else {
        // Runs of frames cut into frames by the stack: no segmentation request.
        assert_eq!(s.tx_gso, 0, "{s:?}");
        assert!(
            st.super_segments > 0
                && st.tso_super_segments == 0
                && st.gso_pieces >= 2 * st.super_segments,
            "super-segments split in software: {st:?}"
        );
    }
    settle_and_audit(&net);
}

/// Bytes the echo client sends (and gets back).
const ECHO_TOTAL: usize = 32 * 1024 * 1024;

/// A Linux client writes 32 MiB of random bytes to a zcnet echo server from one thread and
/// reads the echo on another; the SHA-256 of what came back must be that of what went. The
/// server reads at most 64 KiB, then writes it all before it reads again, so its receive window
/// fills while it waits for send room: the window then shrinks below the edge it advertised
/// (a receive budget of 64 full segments is less than the 256 KiB capacity), and the
/// client's ACKs arrive with sequence numbers past it. They must still be taken: the path
/// loses nothing, so the server's connection must see no retransmission timeout.
#[test]
fn linux_echo_through_zcnet_byte_exact_without_timeouts() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let net = TapNet::new(1500);
    let mut listener = TcpListener::bind(net.stack, 5003, 1, buffers).expect("listen");
    let server = net.exec.local_spawner().spawn(async move {
        let mut s = listener.accept().await.expect("accept");
        let mut buf = vec![0u8; 64 * 1024];
        let mut echoed = 0usize;
        loop {
            let n = s.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            s.write_all(&buf[..n]).await.expect("echo");
            echoed += n;
        }
        s.close();
        let stats = s.stats();
        s.closed().await;
        (echoed, stats)
    });
    let script = format!(
        r#"
import hashlib, os, socket, sys, threading
N = {ECHO_TOTAL}
CHUNK = 1 << 16
s = socket.create_connection(("{ZCNET_ADDR}", 5003), timeout=60)
sent = hashlib.sha256()
def write():
    for _ in range(N // CHUNK):
        b = os.urandom(CHUNK)
        sent.update(b)
        s.sendall(b)
    s.shutdown(socket.SHUT_WR)
w = threading.Thread(target=write)
w.start()
got = hashlib.sha256()
n = 0
while True:
    b = s.recv(1 << 16)
    if not b:
        break
    got.update(b)
    n += len(b)
w.join()
s.close()
print("echoed=%d" % n)
if n != N or got.digest() != sent.digest():
    sys.exit("the echo differs from what was sent")
"#
    );
    let (out, elapsed, (echoed, stats)) = run_client(&net, &script, "python echo client", server);
    assert_eq!(echoed, ECHO_TOTAL);
    assert_eq!(field(&out, "echoed"), ECHO_TOTAL.to_string());
    assert_eq!(
        stats.counters.timeouts, 0,
        "retransmission timeouts on a lossless path: {stats:?}"
    );
    // The echo went back in super-segments the kernel segmented (TSO).
    let st = net.stack.stats();
    assert!(
        st.tso_super_segments > 0 && net.tap_stats.get().tx_gso > 0,
        "{st:?}"
    );
    eprintln!(
        "Linux -> zcnet echo -> Linux: {ECHO_TOTAL} bytes each way in {elapsed:.2?} ({:.1} MB/s)",
        ECHO_TOTAL as f64 / elapsed.as_secs_f64() / 1e6
    );
    settle_and_audit(&net);
}
