//! zcnet's TCP receives without a copy: received segments stay in the pool slots the driver
//! filled, queued on the socket, until the application reads them or takes them
//! (`recv_segment`).
//!
//! * the bytes `recv_segment` returns lie in the very slot the driver completed (LENT while the
//!   application holds it), and `recv_segment` / `read_with` consumers make no payload copy;
//! * an application that hoards segments closes the window: on the wire, the receiver's window
//!   stays zero while the sender sends zero-window probes (nothing else), and the data resumes
//!   within 10 ms of the application letting go, the stream byte-exact; also with a receive
//!   capacity that is not a whole number of segments, where the slot budget runs out before
//!   the advertised right edge and the window shrinks to zero, and with the segments dropped
//!   on another thread;
//! * a small receiver pool and a lossy wire (out-of-order frames pile up, the pool runs dry)
//!   still deliver the stream byte-exact, the drops counted;
//! * 1 MiB arrives byte-exact through `read`, `read_with` and `recv_segment` each.
//!
//! Every test ends with both pools audited: all slots back (`Pair::assert_slots_back`).

use std::sync::Mutex;
use std::time::Duration;

use zcnet_buffer::ledger::{CopySite, LEDGER};
use zcnet_buffer::{FramePool, SlotState};
use zcnet_executor::time::timeout;
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpSegment, TcpSocket};
use zcnet_stack::{DropReason, Stack, StackError};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_on, pair_pools_with, Pair, ADDR, SOCKETS};
use zcnet_tests::recorder::{mark, recorded_pair, tcp_header, FrameRecord, Recorder, TcpHeader};
use zcnet_tests::wire::{Delivery, Faults};

/// The copy ledger is process-wide: the tests of this file run one at a time so that each
/// reads only its own copies.
static SERIAL: Mutex<()> = Mutex::new(());

/// Ethernet, IPv4 and TCP headers (no options) in front of a data segment's payload.
const HEADERS: usize = 14 + 20 + 20;

fn stream(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251 + seed) as u8).collect()
}

fn pair(faults: Faults, slots: usize) -> Pair {
    pair_on(Executor::leak(VirtualClock::leak()), faults, slots)
}

/// Connects a client on `a` to `port` on `b` and writes `data`, then closes and waits for the
/// close to complete.
async fn send_all(a: Stack, port: u16, data: Vec<u8>) {
    let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(16384, 65536)).unwrap();
    c.connect((ADDR[1], port)).await.unwrap();
    c.write_all(&data).await.unwrap();
    c.close();
    c.closed().await;
}

/// Runs `server` (accepting on `port` of `b` with `rx` bytes of receive capacity) against a
/// client sending `data`; returns what the server returned. Lets TIME-WAIT and the last
/// retransmissions run out before returning.
fn transfer<R: 'static>(
    p: &Pair,
    port: u16,
    rx: usize,
    data: Vec<u8>,
    server: impl AsyncFnOnce(&mut TcpSocket) -> R + 'static,
) -> R {
    let [a, b] = p.stacks;
    p.exec.block_on(async move {
        let client = a.executor().local_spawner().spawn(send_all(a, port, data));
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(rx, 4096)).unwrap();
        s.accept(port).await.unwrap();
        let r = timeout(Duration::from_secs(600), server(&mut s))
            .await
            .expect("transfer within 10 simulated minutes");
        s.close();
        s.closed().await;
        client.await;
        drop(s);
        a.executor().sleep(Duration::from_secs(30)).await;
        r
    })
}

/// Reads the whole stream with `recv_segment`, checking each segment's slot with `check`.
async fn read_segments(s: &mut TcpSocket, mut check: impl FnMut(&TcpSegment)) -> Vec<u8> {
    let mut got = Vec::new();
    while let Some(seg) = s.recv_segment().await.unwrap() {
        check(&seg);
        got.extend_from_slice(seg.payload());
    }
    got
}

#[test]
fn recv_segment_bytes_are_the_drivers_slot_and_no_payload_is_copied() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const LEN: usize = 256 * 1024;
    let p = pair(Faults::default(), 128);
    let pool_b: &'static FramePool = p.pools[1];
    let data = stream(LEN, 1);
    let before = LEDGER.snapshot();
    let (got, segments) = transfer(&p, 6001, 65536, data.clone(), async move |s| {
        let mut segments = 0;
        let got = read_segments(s, |seg| {
            segments += 1;
            let ptr = seg.payload().as_ptr();
            let slot = seg.frame().slot_index();
            // The payload is inside the slot the wire's "DMA" wrote, after the headers: the
            // headers were skipped, not copied.
            assert_eq!(pool_b.slot_of(ptr), Some(slot));
            assert_eq!(seg.frame().pool().slot_of(ptr), Some(slot));
            assert!(seg.frame().offset_in_slot() >= HEADERS);
            assert_eq!(pool_b.slot_state(slot), Some(SlotState::Lent));
        })
        .await;
        (got, segments)
    });
    let copies = LEDGER.snapshot().since(&before);
    assert!(got == data, "the stream arrived byte-exact");
    assert!(segments > LEN / 1460 / 2, "{segments} segments");
    // The receive side made no copy of a payload byte (the sender's Emit copies and the wire's
    // delivery are the other side's).
    assert_eq!(copies.bytes(CopySite::StackRx), 0, "{copies}");
    assert_eq!(copies.bytes(CopySite::SocketToApp), 0, "{copies}");
    // Full-sized segments are never merged (only ones under the copy-break threshold).
    assert!(copies.bytes(CopySite::CopyBreak) < 4096, "{copies}");
    p.assert_slots_back();
}

#[test]
fn read_with_makes_no_copy_and_read_makes_one() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const LEN: usize = 128 * 1024;
    let p = pair(Faults::default(), 128);
    let data = stream(LEN, 2);
    let before = LEDGER.snapshot();
    let got = transfer(&p, 6002, 32768, data.clone(), async |s| {
        let mut got = Vec::new();
        while let Some(n) = s
            .read_with(|d| {
                got.extend_from_slice(d);
                (d.len(), d.len())
            })
            .await
            .unwrap()
        {
            assert!(n > 0);
        }
        got
    });
    let copies = LEDGER.snapshot().since(&before);
    assert!(got == data);
    assert_eq!(copies.bytes(CopySite::StackRx), 0, "{copies}");
    assert_eq!(copies.bytes(CopySite::SocketToApp), 0, "{copies}");

    let before = LEDGER.snapshot();
    let got = transfer(&p, 6003, 32768, data.clone(), async |s| {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 5000];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break got;
            }
            got.extend_from_slice(&buf[..n]);
        }
    });
    let copies = LEDGER.snapshot().since(&before);
    assert!(got == data);
    // `read` copies each byte once, frame → buffer.
    assert_eq!(copies.bytes(CopySite::SocketToApp), LEN as u64, "{copies}");
    assert_eq!(copies.bytes(CopySite::StackRx), 0, "{copies}");
    p.assert_slots_back();
}

/// The TCP segments `rec` saw its driver transmit, in order.
fn tcp_sent(rec: &Recorder) -> Vec<(FrameRecord, TcpHeader)> {
    rec.tx_records()
        .iter()
        .filter_map(|(f, bytes)| tcp_header(bytes).map(|t| (*f, t)))
        .collect()
}

/// When the application did something: its place among the recorder's records, and the time.
#[derive(Clone, Copy, Debug)]
struct Mark {
    order: u64,
    at: Duration,
}

impl Mark {
    fn now(exec: &Executor) -> Mark {
        Mark {
            order: mark(),
            at: Duration::from_nanos(exec.now().as_nanos()),
        }
    }
}

/// 64 KiB to a receiver with `rx` bytes of receive capacity whose application takes the
/// segments and holds its whole slot budget for 20 s, then lets go and reads the rest. On the
/// wire: the receiver's window was zero while the segments were held; the sender sent
/// zero-window probes (one byte at the window's right edge, each answered with the still-zero
/// window, at growing intervals) and nothing else; after the release, the receiver's window
/// update and the sender's next data followed within `RECOVERY`. The stream arrives
/// byte-exact and every slot comes back.
/// Holds the receive budget's segments for 20 s, then lets go of them: dropped on the test's
/// thread, or (`elsewhere`) sent to another thread and dropped there.
fn hoard(rx: usize, elsewhere: bool) {
    const LEN: usize = 64 * 1024;
    const HOLD: Duration = Duration::from_secs(20);
    // Measured: the data resumes at the very instant of the release (simulated time): the
    // receiver's window update leaves as soon as the segments are dropped and the wire has no
    // delay, so no timer lies on the path. The bound allows one delayed-ACK period (10 ms),
    // the only timer that could; recovery by the sender's next probe instead would come 11 s
    // after the release (probes at 1, 3, 7 and 15 s, the next at 31 s).
    const RECOVERY: Duration = Duration::from_millis(10);
    let budget = TcpBuffers::with_capacity(rx, 4096).rx_frames();
    let exec = Executor::leak(VirtualClock::leak());
    let (p, rec) = recorded_pair(exec, Faults::default(), 128, |_, _| {});
    let (got, held, released) = transfer(&p, 6004, rx, stream(LEN, 3), async move |s| {
        let mut got = Vec::new();
        let mut kept = Vec::new();
        while kept.len() < budget {
            let seg = s.recv_segment().await.unwrap().expect("data");
            kept.push(seg);
        }
        let held = Mark::now(exec);
        let more = timeout(HOLD, s.recv_segment()).await;
        assert!(
            more.is_err(),
            "no segment while the application holds the budget"
        );
        let released = Mark::now(exec);
        for seg in &kept {
            got.extend_from_slice(seg.payload());
        }
        if elsewhere {
            std::thread::spawn(move || drop(kept)).join().unwrap();
        } else {
            drop(kept);
        }
        got.extend(read_segments(s, |_| {}).await);
        (got, held, released)
    });
    assert!(got == stream(LEN, 3), "the stream arrived byte-exact");
    let (sender, receiver) = (tcp_sent(&rec[0]), tcp_sent(&rec[1]));
    let during = |segs: &[(FrameRecord, TcpHeader)]| -> Vec<(FrameRecord, TcpHeader)> {
        segs.iter()
            .filter(|(f, _)| (held.order..released.order).contains(&f.order))
            .copied()
            .collect()
    };

    // The window was zero from before the application held the budget until it let go.
    let (_, closing) = receiver
        .iter()
        .rev()
        .find(|(f, _)| f.order < held.order)
        .expect("the receiver spoke before the hold");
    assert_eq!(
        closing.window, 0,
        "the receiver's window when the application held its whole budget: {closing:?}"
    );
    let answers = during(&receiver);
    assert!(
        answers.iter().all(|(_, t)| t.window == 0),
        "the window stayed zero during the hold: {answers:?}"
    );
    let edge = closing.ack;

    // The sender probed: every segment it sent meanwhile is one byte at the right edge, each
    // answered, at intervals that never shrink.
    let probes = during(&sender);
    assert!(
        probes.len() >= 2,
        "zero-window probes during the {HOLD:?} hold: {probes:?}"
    );
    for (_, t) in &probes {
        assert_eq!((t.seq, t.payload), (edge, 1), "a zero-window probe: {t:?}");
    }
    assert_eq!(
        answers.len(),
        probes.len(),
        "each probe answered: {answers:?}"
    );
    let times: Vec<Duration> = probes.iter().map(|(f, _)| f.at).collect();
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.windows(2).all(|g| g[1] >= g[0]),
        "probe intervals back off: {times:?}"
    );

    // Prompt recovery after the release: the receiver reopened the window, and the sender's
    // next data (from the right edge on) followed within RECOVERY.
    let (update, _) = receiver
        .iter()
        .find(|(f, t)| f.order > released.order && t.window > 0)
        .expect("the receiver reopened its window");
    let (resumed, _) = sender
        .iter()
        .find(|(f, t)| f.order > released.order && t.seq == edge && t.payload > 1)
        .expect("the sender resumed");
    assert!(update.order < resumed.order);
    assert!(
        resumed.at - released.at <= RECOVERY,
        "data resumed {:?} after the release (probes at {times:?})",
        resumed.at - released.at
    );
    eprintln!(
        "{} probes at {times:?} (hold {:?}..{:?}); data resumed {:?} after the release",
        probes.len(),
        held.at,
        released.at,
        resumed.at - released.at
    );
    p.assert_slots_back();
}

/// A receive capacity of four full segments (4 × 1460 bytes, a budget of 6 slots): the sender's
/// full-sized segments fill the slot budget exactly at the window's right edge, so holding the
/// budget closes the window.
#[test]
fn a_hoarding_application_closes_the_window_and_releasing_reopens_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    hoard(4 * 1460, false);
}

/// The same, with the segments dropped on another thread (`TcpSegment` is `Send`): the drops
/// count themselves lock-free and wake egress, which reopens the window as promptly.
#[test]
fn segments_let_go_on_another_thread_reopen_the_window() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    hoard(4 * 1460, true);
}

/// `TcpSegment` may go to any thread (and be dropped in an interrupt handler).
#[allow(dead_code)]
fn segments_are_send_and_sync(seg: TcpSegment) {
    fn send_sync<T: Send + Sync>(_: T) {}
    send_sync(seg);
}

/// A receive capacity that is not a whole number of segments (8 KiB, a budget of 8 slots):
/// the sender's first flight ends in a segment cut short by the window (892 bytes), whose rest
/// (568 bytes) later takes a slot of its own, so the budget is spent 892 bytes before the right
/// edge the receiver advertised. The window shrinks to zero there (a sender must probe a window
/// that shrank), and the wire looks as with a whole number of segments.
#[test]
fn a_hoarding_application_closes_the_window_at_any_capacity() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    hoard(8 * 1024, false);
}

/// 512 KiB over a wire that loses and reorders 5% of frames, to a receiver with a 40-slot
/// pool, a socket of `rx` bytes and the TCP share `tcp_pool_slots`: byte-exact, with segments
/// refused by the budget or out-of-order frames given up (counted), and every slot back.
fn lossy_small_pool(rx: usize, tcp_pool_slots: Option<usize>) {
    const LEN: usize = 512 * 1024;
    let faults = Faults {
        seed: 7,
        loss: 0.05,
        reorder: 0.05,
        ..Faults::default()
    };
    let p = pair_pools_with::<SOCKETS, SOCKETS>(
        Executor::leak(VirtualClock::leak()),
        faults,
        Delivery::Copy,
        [128, 40],
        |i, c| {
            if i == 1 {
                c.tcp_pool_slots = tcp_pool_slots;
            }
        },
    );
    let b = p.stacks[1];
    let data = stream(LEN, 4);
    let started = p.exec.now();
    let got = transfer(&p, 6005, rx, data.clone(), async |s| {
        read_segments(s, |_| {}).await
    });
    eprintln!(
        "512 KiB delivered in {} ms simulated (close and 30 s linger included)",
        (p.exec.now() - started).as_millis()
    );
    assert!(got == data, "the stream arrived byte-exact");
    let st = b.stats();
    let dropped = st.dropped(DropReason::TcpRxBudget) + st.dropped(DropReason::TcpOutOfOrderPurged);
    assert!(p.ends[0].tx_stats().lost > 0);
    eprintln!(
        "rx budget drops {}, out-of-order purged {}, pool {:?}",
        st.dropped(DropReason::TcpRxBudget),
        st.dropped(DropReason::TcpOutOfOrderPurged),
        p.pools[1].stats()
    );
    assert!(dropped > 0, "{st:?}");
    p.assert_slots_back();
}

/// The receiver's 40 slots give a TCP share of 30; its 24 KiB socket's budget of 24 frames is
/// less than its window once the never-shrinking right edge has run ahead, while the sender may
/// have 64 frames in flight: the budget refuses segments (unacknowledged) and out-of-order
/// frames wait within it.
#[test]
fn a_small_pool_and_a_lossy_wire_still_deliver_byte_exact() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    lossy_small_pool(24 * 1024, None);
}

/// The TCP share overcommitted past the pool, so that a 64 KiB socket (64 frames) opens on the
/// 40-slot pool: the pool runs dry, out-of-order frames past a quarter of it are refused, and
/// the sender recovers by retransmission. The stream still arrives byte-exact and the close
/// completes, although the last segment (data and FIN) first arrives out of order: its
/// retransmission, whose data is all here already, delivers the FIN.
#[test]
fn an_overcommitted_pool_that_runs_dry_still_delivers_byte_exact() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    lossy_small_pool(65536, Some(usize::MAX));
}

/// A socket whose budget does not fit in what is left of the pool's TCP share is refused at
/// open with the figures; closing another socket gives its reservation back.
#[test]
fn a_budget_the_pool_cannot_hold_is_an_error_at_open() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 64 slots: a TCP share of 48.
    let p = pair(Faults::default(), 64);
    let a = p.stacks[0];
    let big = TcpBuffers::with_capacity(32 * 1024, 8 * 1024); // 32 + 8 frames
    assert_eq!(big.frames(), 40);
    let first = TcpSocket::new(a, big).unwrap();
    match TcpSocket::new(a, big) {
        Err(StackError::PoolBudget { needed, available }) => {
            assert_eq!((needed, available), (40, 8));
        }
        other => panic!("expected PoolBudget, got {other:?}"),
    }
    // A small socket still fits in the 8 slots left.
    let small = TcpSocket::new(a, TcpBuffers::with_capacity(1024, 1024)).unwrap();
    drop(first);
    let again = TcpSocket::new(a, big).expect("the first socket's reservation came back");
    drop((small, again));
    p.assert_slots_back();
}
