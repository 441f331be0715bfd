//! Packet capture (`zcnet_buffer::capture`) of real traffic, read back by `tcpdump -r`: two
//! stacks over the in-memory wire, each end wrapped in a `Capture` writing a pcap file in the
//! temp directory, exchange pings and a short TCP connection; tcpdump (Debian's, which `.ci/run`
//! installs) must decode every frame, with the right addresses, ICMP types, TCP flags and
//! payload lengths, and timestamps from the test's own time. Also: a capture cut at a snapshot
//! length with microsecond timestamps, and a sink that refuses every write, which must lose
//! records, never frames. No root needed (`tcpdump -r` reads a file); fails, never skips,
//! without tcpdump.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use zcnet_buffer::capture::{
    system_time_ns, Capture, CaptureCounters, CaptureStats, IoSink, PcapOptions, PcapSink,
    Resolution, SinkError,
};
use zcnet_buffer::{Driver, FramePool, PoolConfig};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::time::sleep;
use zcnet_executor::Executor;
use zcnet_stack::icmp::{IcmpBuffers, IcmpSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::{IpEndpoint, Stack, StackResources};
use zcnet_tests::net::{side_config, ADDR, SOCKETS};
use zcnet_tests::wire::{wire_pair, Faults, WireEnd};

const MAC: [&str; 2] = ["02:00:00:00:00:01", "02:00:00:00:00:02"];

/// A pcap file in the temp directory, removed on drop unless the test failed (then its path is
/// in the failure message, for a look with tcpdump or Wireshark).
struct TempPcap(PathBuf);

impl TempPcap {
    fn new(what: &str) -> TempPcap {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        TempPcap(
            std::env::temp_dir().join(format!("zcnet-pcap-{}-{n}-{what}.pcap", std::process::id())),
        )
    }
}

impl Drop for TempPcap {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// A file sink shared between a stack's driver and the test, and the capture's counters.
struct Tap {
    file: TempPcap,
    sink: &'static Mutex<IoSink<std::fs::File>>,
    counters: &'static CaptureCounters,
}

impl Tap {
    fn stats(&self) -> CaptureStats {
        self.counters.stats()
    }

    fn flush(&self) {
        let mut sink = self.sink;
        sink.flush().expect("capture file flushed");
    }
}

/// Stack `i` of a pair over `end`, its runner spawned on `exec`.
fn stack_over(
    exec: &'static Executor,
    pool: &'static FramePool,
    i: usize,
    driver: &'static mut (dyn Driver + Send),
) -> Stack {
    let resources: &'static StackResources<SOCKETS> = StackResources::leak();
    let (stack, runner) = Stack::new(
        exec,
        pool,
        driver,
        side_config(i, 0x9ca9 + i as u64),
        resources,
    )
    .expect("stack");
    runner.spawn(exec.local_spawner());
    stack
}

/// Two stacks (A = 10.0.0.1, B = 10.0.0.2) over a perfect wire, each end captured to its own
/// file with `options[i]`.
fn captured_pair(options: [PcapOptions; 2]) -> (&'static Executor, [Stack; 2], [Tap; 2]) {
    let exec = Executor::leak(LinuxPlatform::leak().expect("epoll"));
    let pools = [
        FramePool::leak(PoolConfig::new(128)).expect("pool"),
        FramePool::leak(PoolConfig::new(128)).expect("pool"),
    ];
    let (a, b) = wire_pair(exec, pools, Faults::default());
    let mut stacks = Vec::new();
    let mut taps = Vec::new();
    for (i, end) in [a, b].into_iter().enumerate() {
        let file = TempPcap::new(["a", "b"][i]);
        let sink =
            IoSink::create(&file.0).unwrap_or_else(|e| panic!("create {}: {e}", file.0.display()));
        let sink: &'static Mutex<IoSink<std::fs::File>> = Box::leak(Box::new(Mutex::new(sink)));
        let counters: &'static CaptureCounters = Box::leak(Box::new(CaptureCounters::new()));
        let driver: Capture<'static, WireEnd, _> =
            Capture::with_options(end, sink, system_time_ns, counters, options[i]);
        stacks.push(stack_over(exec, pools[i], i, Box::leak(Box::new(driver))));
        taps.push(Tap {
            file,
            sink,
            counters,
        });
    }
    let taps: [Tap; 2] = taps.try_into().ok().expect("two");
    (exec, [stacks[0], stacks[1]], taps)
}

/// Waits (up to 5 s) until every frame one end sent has been received by the other: the
/// captures are then complete.
fn wait_until_quiet(exec: &'static Executor, taps: &[Tap; 2]) {
    let (a, b) = (taps[0].counters, taps[1].counters);
    exec.block_on(async move {
        for _ in 0..500 {
            let (sa, sb) = (a.stats(), b.stats());
            if sa.tx_frames == sb.rx_frames && sb.tx_frames == sa.rx_frames {
                return;
            }
            sleep(Duration::from_millis(10)).await;
        }
        panic!("frames still in flight: {:?} {:?}", a.stats(), b.stats());
    });
}

/// `tcpdump -r FILE -nn -e -tt`: its lines, one per frame. Panics if tcpdump is missing or
/// complains.
fn tcpdump(file: &Path) -> Vec<String> {
    let mut cmd = None;
    for candidate in ["tcpdump", "/usr/bin/tcpdump", "/usr/sbin/tcpdump"] {
        if Command::new(candidate).arg("--version").output().is_ok() {
            cmd = Some(candidate);
            break;
        }
    }
    let cmd = cmd.expect("this test needs tcpdump (apt-get install tcpdump; .ci/run installs it)");
    let out = Command::new(cmd)
        .args(["-r"])
        .arg(file)
        .args(["-nn", "-e", "-tt"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "tcpdump -r {} failed ({})\nstdout: {stdout}\nstderr: {stderr}",
        file.display(),
        out.status
    );
    // tcpdump says "reading from file …, link-type EN10MB (Ethernet), snapshot length …" on
    // stderr; anything about a truncated or bad file is a failure.
    assert!(
        stderr.contains("link-type EN10MB (Ethernet)")
            && !stderr.contains("truncated")
            && !stderr.contains("bogus"),
        "tcpdump on {}: {stderr}",
        file.display()
    );
    stdout.lines().map(str::to_string).collect()
}

/// The line without its timestamp, and the timestamp in nanoseconds.
fn split_time(line: &str) -> (u64, &str) {
    let (t, rest) = line.split_once(' ').expect("timestamp first");
    let (s, frac) = t.split_once('.').expect("seconds.fraction");
    let frac = format!("{frac:0<9}");
    let ns = s.parse::<u64>().expect("seconds") * 1_000_000_000
        + frac[..9].parse::<u64>().expect("fraction");
    (ns, rest)
}

/// Lines of `lines` that contain every one of `parts`.
fn matching<'a>(lines: &'a [String], parts: &[&str]) -> Vec<&'a String> {
    lines
        .iter()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .collect()
}

/// Sum of the TCP payload lengths (`…, length N` at the end) of `lines`.
fn tcp_payload(lines: &[&String]) -> usize {
    lines
        .iter()
        .map(|l| {
            l.rsplit_once("length ")
                .and_then(|(_, n)| n.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("no payload length in {l}"))
        })
        .sum()
}

/// A pings B three times, then A connects to B's port 7000, sends 10 bytes and shuts down;
/// B answers 3 bytes and closes. tcpdump reads both captures: every frame, in Ethernet with the
/// wire's MAC addresses, the ARP exchange, three echo requests and replies, one SYN and one
/// SYN-ACK, a FIN each way, no reset, the payload lengths, timestamps within the test's run;
/// and what A captured is what B captured (each frame once sent, once received).
#[test]
fn tcpdump_reads_pings_and_a_tcp_exchange() {
    let started = system_time_ns();
    let (exec, [a, b], taps) = captured_pair([PcapOptions::default(); 2]);

    let server = exec.local_spawner().spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(4096, 4096)).unwrap();
        s.accept(7000).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"bye").await.unwrap();
        s.close();
        s.closed().await;
        got
    });
    let reply = exec.block_on(async move {
        let ping = IcmpSocket::bind(a, 0x7a7a, IcmpBuffers::with_capacity(8, 4096)).unwrap();
        let payload: Vec<u8> = (0..56u8).collect();
        for seq in 1..=3 {
            ping.ping(ADDR[1].into(), seq, &payload, Duration::from_secs(5))
                .await
                .unwrap();
        }
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 4096)).unwrap();
        c.connect_timeout(
            IpEndpoint::new(ADDR[1].into(), 7000),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        c.write_all(b"hello pcap").await.unwrap();
        c.shutdown();
        let mut reply = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            let n = c.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buf[..n]);
        }
        c.closed().await;
        reply
    });
    assert_eq!(reply, b"bye");
    assert_eq!(exec.block_on(server), b"hello pcap");
    wait_until_quiet(exec, &taps);
    for t in &taps {
        t.flush();
    }
    let ended = system_time_ns();

    let mut seen: [Vec<String>; 2] = Default::default();
    for (i, t) in taps.iter().enumerate() {
        let where_ = t.file.0.display();
        let s = t.stats();
        assert_eq!((s.lost, s.truncated, s.tx_refused), (0, 0, 0), "{s:?}");
        let lines = tcpdump(&t.file.0);
        assert_eq!(
            lines.len() as u64,
            s.rx_frames + s.tx_frames,
            "one line per captured frame in {where_}:\n{}",
            lines.join("\n")
        );
        let dump = lines.join("\n");
        // Every frame is Ethernet between the two ends, stamped while the test ran.
        for l in &lines {
            let (ns, rest) = split_time(l);
            assert!(
                (started / 1000 * 1000..=ended).contains(&ns),
                "timestamp of {l} outside the test's run ({started}..{ended}) in {where_}"
            );
            assert!(
                rest.starts_with(&format!("{} > {}", MAC[0], MAC[1]))
                    || rest.starts_with(&format!("{} > {}", MAC[1], MAC[0]))
                    || rest.starts_with(&format!("{} > ff:ff:ff:ff:ff:ff", MAC[0]))
                    || rest.starts_with(&format!("{} > ff:ff:ff:ff:ff:ff", MAC[1])),
                "unexpected addresses: {l} in {where_}"
            );
        }
        // A resolves B first.
        assert!(
            !matching(
                &lines,
                &["ethertype ARP", "Request who-has 10.0.0.2", "tell 10.0.0.1"]
            )
            .is_empty(),
            "no ARP request from A in {where_}:\n{dump}"
        );
        assert!(
            !matching(
                &lines,
                &["ethertype ARP", "Reply 10.0.0.2 is-at 02:00:00:00:00:02"]
            )
            .is_empty(),
            "no ARP reply from B in {where_}:\n{dump}"
        );
        // Three echo requests A → B and three replies B → A, 56 + 8 bytes of ICMP each.
        let a_to_b = format!("{} > {}, ethertype IPv4 (0x0800)", MAC[0], MAC[1]);
        let b_to_a = format!("{} > {}, ethertype IPv4 (0x0800)", MAC[1], MAC[0]);
        for seq in 1..=3 {
            let s = format!("seq {seq}, length 64");
            let req = matching(
                &lines,
                &[&a_to_b, "10.0.0.1 > 10.0.0.2: ICMP echo request", &s],
            );
            let rep = matching(
                &lines,
                &[&b_to_a, "10.0.0.2 > 10.0.0.1: ICMP echo reply", &s],
            );
            assert_eq!(
                (req.len(), rep.len()),
                (1, 1),
                "echo {seq} in {where_}:\n{dump}"
            );
        }
        assert_eq!(matching(&lines, &["ICMP"]).len(), 6, "{where_}:\n{dump}");
        // TCP: one SYN, one SYN-ACK, a FIN each way, no reset, 10 bytes out and 3 back.
        let a_tcp = matching(&lines, &[&a_to_b, "> 10.0.0.2.7000: Flags ["]);
        let b_tcp = matching(&lines, &[&b_to_a, "10.0.0.2.7000 > 10.0.0.1."]);
        assert_eq!(
            matching(&lines, &["Flags ["]).len(),
            a_tcp.len() + b_tcp.len(),
            "{where_}:\n{dump}"
        );
        let flags = |lines: &[&String], f: &str| {
            lines
                .iter()
                .filter(|l| l.contains(&format!("Flags [{f}]")))
                .count()
        };
        assert_eq!(flags(&a_tcp, "S"), 1, "one SYN in {where_}:\n{dump}");
        assert_eq!(flags(&b_tcp, "S."), 1, "one SYN-ACK in {where_}:\n{dump}");
        assert_eq!(flags(&a_tcp, "S.") + flags(&b_tcp, "S"), 0);
        assert!(
            a_tcp.iter().any(|l| l.contains("Flags [F"))
                && b_tcp.iter().any(|l| l.contains("Flags [F")),
            "a FIN each way in {where_}:\n{dump}"
        );
        assert!(!dump.contains("Flags [R"), "no reset in {where_}:\n{dump}");
        assert_eq!(tcp_payload(&a_tcp), 10, "{where_}:\n{dump}");
        assert_eq!(tcp_payload(&b_tcp), 3, "{where_}:\n{dump}");
        seen[i] = lines;
    }
    // Each frame is in both captures: sent by one end, received by the other.
    let mut without_time: Vec<Vec<&str>> = seen
        .iter()
        .map(|lines| lines.iter().map(|l| split_time(l).1).collect())
        .collect();
    for lines in &mut without_time {
        lines.sort_unstable();
    }
    assert_eq!(without_time[0], without_time[1]);
    let (sa, sb) = (taps[0].stats(), taps[1].stats());
    assert_eq!((sa.tx_frames, sa.rx_frames), (sb.rx_frames, sb.tx_frames));
}

/// B's capture keeps 64 bytes of each frame, with microsecond timestamps: tcpdump still reads
/// it, shows each frame's whole length, and the record lengths say what was cut.
#[test]
fn tcpdump_reads_a_capture_cut_at_the_snapshot_length() {
    let cut = PcapOptions {
        snaplen: 64,
        resolution: Resolution::Micros,
    };
    let (exec, [a, _b], taps) = captured_pair([PcapOptions::default(), cut]);
    exec.block_on(async move {
        let ping = IcmpSocket::bind(a, 0x5151, IcmpBuffers::with_capacity(8, 4096)).unwrap();
        let payload = [0x5au8; 500];
        ping.ping(ADDR[1].into(), 1, &payload, Duration::from_secs(5))
            .await
            .unwrap();
    });
    wait_until_quiet(exec, &taps);
    taps[1].flush();
    let s = taps[1].stats();
    // The echo request and reply (14 + 20 + 8 + 500 bytes) are cut; the ARP frames are not.
    assert_eq!(s.truncated, 2, "{s:?}");
    let bytes = std::fs::read(&taps[1].file.0).unwrap();
    assert_eq!(bytes[..4], [0xd4, 0xc3, 0xb2, 0xa1], "microsecond magic");
    assert_eq!(bytes[16..20], 64u32.to_le_bytes(), "snaplen");
    // Walk the records: every captured length is at most 64, the original lengths are whole.
    let mut at = 24;
    let mut lens = Vec::new();
    while at < bytes.len() {
        let h = &bytes[at..at + 16];
        let incl = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
        let orig = u32::from_le_bytes(h[12..16].try_into().unwrap()) as usize;
        assert!(incl <= 64 && incl == orig.min(64), "record {incl}/{orig}");
        lens.push(orig);
        at += 16 + incl;
    }
    assert_eq!(at, bytes.len(), "records end where the file ends");
    assert_eq!(lens.iter().filter(|&&l| l == 542).count(), 2, "{lens:?}");

    let lines = tcpdump(&taps[1].file.0);
    assert_eq!(lines.len(), lens.len());
    let dump = lines.join("\n");
    assert_eq!(
        matching(
            &lines,
            &["length 542: 10.0.0.1 > 10.0.0.2: ICMP echo request"]
        )
        .len(),
        1,
        "{dump}"
    );
    assert_eq!(
        matching(
            &lines,
            &["length 542: 10.0.0.2 > 10.0.0.1: ICMP echo reply"]
        )
        .len(),
        1,
        "{dump}"
    );
}

/// Refuses every write.
struct Broken;

impl PcapSink for Broken {
    fn write(&mut self, _parts: &[&[u8]]) -> Result<(), SinkError> {
        Err(SinkError)
    }
}

/// A sink that refuses every write costs the capture its records, never the traffic: pings
/// and a TCP exchange work through it, and every frame is counted as lost.
#[test]
fn a_refusing_sink_never_disturbs_the_traffic() {
    let exec = Executor::leak(LinuxPlatform::leak().expect("epoll"));
    let pools = [
        FramePool::leak(PoolConfig::new(64)).expect("pool"),
        FramePool::leak(PoolConfig::new(64)).expect("pool"),
    ];
    let (a_end, b_end) = wire_pair(exec, pools, Faults::default());
    let (wire_a, wire_b) = (a_end.handle(), b_end.handle());
    let counters: &'static CaptureCounters = Box::leak(Box::new(CaptureCounters::new()));
    let a_driver = Capture::new(a_end, Broken, system_time_ns, counters);
    let a = stack_over(exec, pools[0], 0, Box::leak(Box::new(a_driver)));
    let b = stack_over(exec, pools[1], 1, Box::leak(Box::new(b_end)));
    let server = exec.local_spawner().spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(4096, 4096)).unwrap();
        s.accept(7001).await.unwrap();
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await.unwrap();
        s.write_all(&buf[..n]).await.unwrap();
        s.close();
        s.closed().await;
    });
    exec.block_on(async move {
        let ping = IcmpSocket::bind(a, 0x1111, IcmpBuffers::with_capacity(8, 4096)).unwrap();
        for seq in 1..=3 {
            ping.ping(ADDR[1].into(), seq, b"lost", Duration::from_secs(5))
                .await
                .unwrap();
        }
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 4096)).unwrap();
        c.connect_timeout(
            IpEndpoint::new(ADDR[1].into(), 7001),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        c.write_all(b"echo").await.unwrap();
        let mut buf = [0u8; 16];
        let n = c.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"echo");
        c.close();
        c.closed().await;
    });
    exec.block_on(server);
    // Until nothing is on the wire any more: then A has seen every frame of the exchange.
    exec.block_on(async {
        for _ in 0..500 {
            let (ta, tb) = (wire_a.tx_stats(), wire_b.tx_stats());
            if ta.sent == ta.delivered && tb.sent == tb.delivered {
                return;
            }
            sleep(Duration::from_millis(10)).await;
        }
        panic!("frames still on the wire");
    });
    let s = counters.stats();
    assert_eq!((s.rx_frames, s.tx_frames, s.bytes), (0, 0, 0), "{s:?}");
    // Every frame A sent or received is lost to the capture, and only to the capture: ARP,
    // 3 echoes and a TCP connection, at least 2 + 6 + 6 frames.
    let (sent, received) = (wire_a.tx_stats().sent, wire_b.tx_stats().delivered);
    assert_eq!(s.lost, sent + received, "{s:?}");
    assert!(s.lost >= 14, "{s:?}");
}
