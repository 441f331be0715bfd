//! TCP transmit without a copy: the send queue keeps pool frames until acknowledged and egress
//! hands the very slots to the driver.
//!
//! * the slot an application filled through `tx_frame` / `send_frame` is the slot the driver
//!   transmits, and a bulk transfer through `send_frame` costs the stack no payload copy;
//! * a device whose completions come later than the retransmission timeout (the peer gets each
//!   frame at once): no slot goes to the device again before the device completed it, and
//!   retransmissions go out of their own frames the moment the device gives them back, whether
//!   a timeout or a fast retransmit made them due;
//! * a peer window smaller than a segment (partial ACKs, prefixes copied, the rest resent from
//!   the frame itself);
//! * 1 MiB each way through `write`, `write_with` and `send_frame`.
//!
//! Every test ends with both pools audited: all slots back, none SENT or RETAINED
//! (`Pair::assert_slots_back`).

use std::collections::HashMap;
use std::time::Duration;

use zcnet_buffer::ledger::{CopySite, LEDGER};
use zcnet_executor::time::timeout;
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::Stack;
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_on, Pair, ADDR};
use zcnet_tests::recorder::{recorded_pair, tcp_header, TcpHeader};
use zcnet_tests::slow_tx::{slow_pair, DeviceEvent};
use zcnet_tests::wire::Faults;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Write,
    WriteWith,
    SendFrame,
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + i / 977 + seed) % 251) as u8)
        .collect()
}

/// Sends `data` from `from` to `to` (address `ADDR[to_side]`, port `port`) with `mode`;
/// returns what arrived. The receiver's buffers are `rx` bytes.
async fn transfer(
    from: Stack,
    to: Stack,
    to_side: usize,
    port: u16,
    data: Vec<u8>,
    mode: Mode,
    rx: usize,
) -> Vec<u8> {
    let server = to.executor().local_spawner().spawn(async move {
        let mut s = TcpSocket::new(to, TcpBuffers::with_capacity(rx, 4096)).unwrap();
        s.accept(port).await.unwrap();
        let mut got = Vec::new();
        while let Some(chunk) = s.read_with(|d| (d.len(), d.to_vec())).await.unwrap() {
            got.extend_from_slice(&chunk);
        }
        s.close();
        s.closed().await;
        got
    });
    let mut c = TcpSocket::new(from, TcpBuffers::with_capacity(4096, 32768)).unwrap();
    c.connect((ADDR[to_side], port)).await.unwrap();
    let mut off = 0;
    while off < data.len() {
        off += match mode {
            Mode::Write => c.write(&data[off..]).await.unwrap(),
            Mode::WriteWith => c
                .write_with(|space| {
                    let n = space.len().min(data.len() - off);
                    space[..n].copy_from_slice(&data[off..off + n]);
                    (n, n)
                })
                .await
                .unwrap(),
            Mode::SendFrame => {
                let mut f = c.tx_frame().await;
                let n = f.tailroom().min(data.len() - off);
                f.append(n).unwrap().copy_from_slice(&data[off..off + n]);
                c.send_frame(f).await.unwrap();
                n
            }
        };
    }
    c.close();
    c.closed().await;
    drop(c);
    let got = server.await;
    // TIME-WAIT and the last retransmissions run out.
    from.executor().sleep(Duration::from_secs(30)).await;
    got
}

fn virtual_pair(faults: Faults) -> Pair {
    pair_on(Executor::leak(VirtualClock::leak()), faults, 256)
}

#[test]
fn the_slot_the_app_filled_is_the_slot_the_driver_sends_and_nothing_is_copied() {
    let exec = Executor::leak(VirtualClock::leak());
    let (p, rec) = recorded_pair(exec, Faults::default(), 256, |_, _| {});
    let [a, b] = p.stacks;
    let before = LEDGER.snapshot();
    let got = exec.block_on(async move {
        let server = b.executor().local_spawner().spawn(async move {
            let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(65536, 4096)).unwrap();
            s.accept(7000).await.unwrap();
            let mut got = Vec::new();
            while let Some(chunk) = s.read_with(|d| (d.len(), d.to_vec())).await.unwrap() {
                got.extend_from_slice(&chunk);
            }
            s.close();
            s.closed().await;
            got
        });
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 65536)).unwrap();
        c.connect((ADDR[1], 7000)).await.unwrap();
        // One frame, remembered by address and slot.
        let mut f = c.tx_frame().await;
        assert!(f.tailroom() > 1000, "room for a segment: {}", f.tailroom());
        f.append(1000).unwrap().copy_from_slice(&pattern(1000, 1));
        let (ptr, slot) = (f.as_ptr() as usize, f.slot_index());
        c.send_frame(f).await.unwrap();
        c.flush().await.unwrap();
        let (record, bytes) = rec[0]
            .tx_containing(ptr as *const u8, 1000)
            .expect("the driver transmitted the app's own frame");
        assert_eq!(record.slot, slot, "the very slot");
        assert_eq!(&bytes[bytes.len() - 1000..], &pattern(1000, 1)[..]);
        // Then bulk, all through send_frame.
        let data = pattern(256 * 1024, 2);
        let mut off = 0;
        while off < data.len() {
            let mut f = c.tx_frame().await;
            let n = f.tailroom().min(data.len() - off);
            f.append(n).unwrap().copy_from_slice(&data[off..off + n]);
            c.send_frame(f).await.unwrap();
            off += n;
        }
        c.close();
        c.closed().await;
        drop(c);
        let got = server.await;
        a.executor().sleep(Duration::from_secs(30)).await;
        got
    });
    let mut want = pattern(1000, 1);
    want.extend_from_slice(&pattern(256 * 1024, 2));
    assert!(got == want, "byte-exact");
    let copies = LEDGER.snapshot().since(&before);
    // Other tests in this binary run alongside and add their own copies; this transfer alone
    // would add none, so the total stays well below what it moved.
    assert!(
        copies.bytes(CopySite::Emit) + copies.bytes(CopySite::Retransmit) < (want.len() / 4) as u64,
        "{copies:?}"
    );
    p.assert_slots_back();
}

/// One hand-off of a frame to a [`SlowCompletion`](zcnet_tests::slow_tx::SlowCompletion)
/// device, with its completion.
#[derive(Debug)]
struct Handoff {
    slot: usize,
    /// Position of the hand-off in the device's event log.
    order: usize,
    at: Duration,
    completed_at: Duration,
    tcp: Option<TcpHeader>,
}

/// The hand-offs in `events`, each with its completion, in hand-off order. (The device itself
/// panics when a slot is handed to it again before its previous hand-off completed.)
fn handoffs(events: &[DeviceEvent]) -> Vec<Handoff> {
    let mut done = Vec::new();
    // Slot → the hand-off the device still has.
    let mut with_device: HashMap<usize, Handoff> = HashMap::new();
    for (order, e) in events.iter().enumerate() {
        match e {
            DeviceEvent::Handed { slot, at, bytes } => {
                let h = Handoff {
                    slot: *slot,
                    order,
                    at: *at,
                    completed_at: Duration::ZERO,
                    tcp: tcp_header(bytes),
                };
                with_device.insert(*slot, h);
            }
            DeviceEvent::Completed { slot, at } => {
                let mut h = with_device
                    .remove(slot)
                    .expect("a completion follows a hand-off");
                h.completed_at = *at;
                done.push(h);
            }
        }
    }
    assert!(with_device.is_empty(), "never completed: {with_device:?}");
    done.sort_by_key(|h| h.order);
    done
}

/// Whether sequence number `a` comes before `b` (modulo 2^32).
fn seq_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// A retransmission that falls due while its frame is still with the device waits for the
/// frame and goes out the moment it returns. `dispatch` may rewind to the first unacknowledged
/// frame (a retransmission timeout, or three duplicate ACKs) and find the device holding it;
/// egress then registers for that frame's return, so its completion wakes egress even when
/// the peer stays silent and no timer is armed.
#[test]
fn slow_completions_past_the_rto_make_retransmissions_wait_for_the_slot() {
    // Stack A's device completes each frame COMPLETION after it was handed over, though the
    // peer gets it at once: the round trip is near zero, so the retransmission timeout is its
    // minimum, 1 s, and a lost segment is due again (by timeout, or at once by fast
    // retransmit) while the device still has its frame. The wire loses 3% of frames.
    const COMPLETION: Duration = Duration::from_millis(1500);
    let faults = Faults {
        seed: 3,
        loss: 0.03,
        ..Faults::default()
    };
    let exec = Executor::leak(VirtualClock::leak());
    let (p, device) = slow_pair(exec, faults, 256, COMPLETION);
    let [a, b] = p.stacks;
    let data = pattern(96 * 1024, 3);
    let sent = data.clone();
    let got = p.exec.block_on(timeout(
        Duration::from_secs(600),
        transfer(a, b, 1, 7001, sent, Mode::SendFrame, 16384),
    ));
    let got = got.unwrap_or_else(|_| {
        let last = device.events().last().cloned();
        panic!(
            "stalled: no progress within 10 simulated minutes; A's pool {}, A's device's last \
             event {last:?}",
            p.pools[0].occupancy()
        )
    });
    assert!(got == data, "byte-exact");
    assert!(p.ends[0].tx_stats().lost > 0, "{:?}", p.ends[0].tx_stats());

    // No slot went to the device again while the device still had it: the device panics on
    // such a hand-off.
    let handoffs = handoffs(&device.events());
    // The data segments A sent, in order; a segment starting below the highest sequence number
    // sent before it is a retransmission. Its original is the latest earlier segment holding its
    // first byte.
    let data_segments: Vec<(&Handoff, TcpHeader)> = handoffs
        .iter()
        .filter_map(|h| {
            h.tcp
                .filter(|t| t.dst_port == 7001 && t.payload > 0)
                .map(|t| (h, t))
        })
        .collect();
    let mut highest: Option<u32> = None;
    let mut resent = Vec::new();
    for (i, &(h, t)) in data_segments.iter().enumerate() {
        let end = t.seq.wrapping_add(t.payload as u32);
        if highest.is_some_and(|hi| seq_before(t.seq, hi)) {
            let (original, _) = data_segments[..i]
                .iter()
                .rev()
                .find(|(_, o)| {
                    !seq_before(t.seq, o.seq)
                        && seq_before(t.seq, o.seq.wrapping_add(o.payload as u32))
                })
                .expect("a retransmission has an original");
            resent.push((*original, h));
        }
        if highest.is_none_or(|hi| seq_before(hi, end)) {
            highest = Some(end);
        }
    }
    // Retransmissions went out of the original's frame itself (the retained slot, no copy;
    // after the device had completed the original, or the device would have panicked) ...
    let in_place: Vec<_> = resent.iter().filter(|(o, r)| o.slot == r.slot).collect();
    assert!(
        !in_place.is_empty(),
        "no retransmission from its own frame: {resent:#?}"
    );
    // ... and at least one waited for it: the device completed the original COMPLETION after
    // the hand-off, past the 1 s timeout, and the retransmission went out at that very moment.
    assert!(
        in_place
            .iter()
            .any(|(o, r)| o.completed_at - o.at == COMPLETION && r.at == o.completed_at),
        "no retransmission went out as its frame came back: {in_place:#?}"
    );
    eprintln!(
        "{} retransmissions, {} from their own frame; A's device: {} hand-offs",
        resent.len(),
        in_place.len(),
        handoffs.len()
    );
    p.assert_slots_back();
}

#[test]
fn a_small_peer_window_resends_partly_acknowledged_frames() {
    // The receiver's window (700 bytes) is smaller than a segment: prefixes are copied, ACKs
    // cover parts of frames, and loss makes the rest go again from the frames themselves.
    let faults = Faults {
        seed: 7,
        loss: 0.05,
        ..Faults::default()
    };
    let p = virtual_pair(faults);
    let [a, b] = p.stacks;
    let data = pattern(64 * 1024, 4);
    let sent = data.clone();
    let got = p
        .exec
        .block_on(async move { transfer(a, b, 1, 7002, sent, Mode::Write, 700).await });
    assert!(got == data, "byte-exact");
    p.assert_slots_back();
}

#[test]
fn a_mebibyte_each_way_with_every_api() {
    for (i, mode) in [Mode::Write, Mode::WriteWith, Mode::SendFrame]
        .into_iter()
        .enumerate()
    {
        let p = virtual_pair(Faults::default());
        let [a, b] = p.stacks;
        let data = pattern(1 << 20, 10 + i);
        let (d1, d2) = (data.clone(), data.clone());
        let (ab, ba) = p.exec.block_on(async move {
            let port = 7100 + 2 * i as u16;
            let there = transfer(a, b, 1, port, d1, mode, 65536).await;
            let back = transfer(b, a, 0, port + 1, d2, mode, 65536).await;
            (there, back)
        });
        assert!(ab == data, "{mode:?} A to B byte-exact");
        assert!(ba == data, "{mode:?} B to A byte-exact");
        p.assert_slots_back();
    }
}
