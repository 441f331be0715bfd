//! TCP transmit without a copy: the send queue keeps pool frames until acknowledged and egress
//! hands the very slots to the driver.
//!
//! * the slot an application filled through `tx_frame` / `send_frame` is the slot the driver
//!   transmits, and a bulk transfer through `send_frame` costs the stack no payload copy;
//! * completions slower than the retransmission timeout: a retransmission waits for the device
//!   to finish with the slot, nothing is freed twice, the stream is byte-exact;
//! * a peer window smaller than a segment (partial ACKs, prefixes copied, the rest resent from
//!   the frame itself);
//! * 1 MiB each way through `write`, `write_with` and `send_frame`.
//!
//! Every test ends with both pools audited: all slots back, none SENT or RETAINED
//! (`Pair::assert_slots_back`).

use std::time::Duration;

use zcnet_buffer::ledger::{CopySite, LEDGER};
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::Stack;
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_on, Pair, ADDR};
use zcnet_tests::recorder::recorded_pair;
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
    let server = to.executor().spawner().spawn(async move {
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
        let server = b.executor().spawner().spawn(async move {
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

#[test]
fn slow_completions_past_the_rto_make_retransmissions_wait_for_the_slot() {
    // Each frame stays with the sender's device (its slot SENT) for longer than the initial
    // retransmission timeout before the peer gets it.
    let faults = Faults {
        delay: Duration::from_millis(1500),
        ..Faults::default()
    };
    let p = virtual_pair(faults);
    let [a, b] = p.stacks;
    let data = pattern(96 * 1024, 3);
    let sent = data.clone();
    let got = p
        .exec
        .block_on(async move { transfer(a, b, 1, 7001, sent, Mode::SendFrame, 16384).await });
    assert!(got == data, "byte-exact");
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
