//! 10 MB each way over one TCP connection, both directions at once (split halves), across a
//! wire that loses 5%, reorders 5%, duplicates 1% and corrupts 1% of frames: both streams
//! arrive byte-exact (SHA-256), and once both sockets are closed and dropped and the stacks
//! have run out their connections, every slot of both pools is back (the pool audit). Once
//! with each congestion control: none (the default), Reno and CUBIC (whose loss recovery
//! sends at proportional rate reduction's pace). Both receivers take in-order runs of
//! segments in batches (software GRO) throughout, faults and all, and both senders send
//! super-segments, split in software into one frame per segment (the wire does not segment);
//! once more over a wire whose ends segment them as a TSO NIC does (each segment then meets
//! the faults on its own), and once over ends that carry them whole and hand them up as chains
//! of slots (a super-segment lost, reordered, duplicated or corrupted as one packet; the
//! receivers check each chain once and take it whole).

use std::time::Duration;

use sha2::{Digest, Sha256};
use zcnet_buffer::sim::wire::{GsoMode, WireOffloads};
use zcnet_executor::time::timeout;
use zcnet_executor::Executor;
use zcnet_stack::tcp::{CongestionControl, TcpBuffers, TcpSocket};
use zcnet_stack::{IpEndpoint, Stack};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_drivers, pair_on, Pair, PairDriver, ADDR};
use zcnet_tests::wire::{Delivery, Faults};

const LEN: usize = 10 * 1024 * 1024;

/// A reproducible stream of `LEN` bytes, different per seed.
fn stream(seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..LEN)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Sends `out` and receives until end of stream at the same time; returns the SHA-256 of what
/// arrived and its length.
async fn exchange(mut s: TcpSocket, out: Vec<u8>) -> ([u8; 32], usize) {
    let (mut rd, mut wr) = s.split();
    let send = async {
        for chunk in out.chunks(8192) {
            wr.write_all(chunk).await.unwrap();
        }
        wr.flush().await.unwrap();
        wr.shutdown();
    };
    let recv = async {
        let mut h = Sha256::new();
        let mut n = 0;
        let mut buf = vec![0u8; 8192];
        loop {
            let k = rd.read(&mut buf).await.unwrap();
            if k == 0 {
                break;
            }
            h.update(&buf[..k]);
            n += k;
        }
        (<[u8; 32]>::from(h.finalize()), n)
    };
    let ((), got) = futures_join(send, recv).await;
    got
}

/// Polls two futures to completion in one task.
async fn futures_join<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none() {
            if let std::task::Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let std::task::Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if ra.is_some() && rb.is_some() {
            std::task::Poll::Ready((ra.take().unwrap(), rb.take().unwrap()))
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

fn socket(stack: Stack, cc: CongestionControl) -> TcpSocket {
    let mut s = TcpSocket::new(stack, TcpBuffers::with_capacity(65536, 65536)).unwrap();
    s.set_congestion_control(cc);
    s
}

/// What the wire's ends do with super-segments.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ends {
    /// Nothing: the stacks split them in software.
    Plain,
    /// They cut them into segments, as a TSO NIC does.
    Segment,
    /// They carry them whole and deliver them as chains.
    Whole,
}

#[test]
fn ten_megabytes_each_way_byte_exact_under_loss_reorder_duplication_and_corruption() {
    ten_megabytes_each_way(CongestionControl::None, Ends::Plain);
}

#[test]
fn the_same_with_reno() {
    ten_megabytes_each_way(CongestionControl::Reno, Ends::Plain);
}

#[test]
fn the_same_with_cubic() {
    ten_megabytes_each_way(CongestionControl::Cubic, Ends::Plain);
}

#[test]
fn the_same_with_cubic_over_ends_that_segment() {
    ten_megabytes_each_way(CongestionControl::Cubic, Ends::Segment);
}

#[test]
fn the_same_with_cubic_over_ends_that_deliver_chains() {
    ten_megabytes_each_way(CongestionControl::Cubic, Ends::Whole);
}

fn ten_megabytes_each_way(cc: CongestionControl, ends: Ends) {
    let tso = ends != Ends::Plain;
    let faults = Faults {
        seed: 0x5eed,
        loss: 0.05,
        reorder: 0.05,
        duplicate: 0.01,
        corrupt: 0.01,
        ..Faults::default()
    };
    // Simulated time: smoltcp's retransmission timeouts (a second or more each) pass at once
    // instead of keeping the test waiting for minutes.
    let exec = Executor::leak(VirtualClock::leak());
    let p: Pair = if tso {
        // Each end completes checksums and cuts super-segments of up to 64 KiB, as a NIC does.
        let offloads = WireOffloads {
            tx_checksum: true,
            gso_max_size: 65535,
            gso_mode: if ends == Ends::Whole {
                GsoMode::Whole
            } else {
                GsoMode::Segment
            },
            rx_checksum: ends == Ends::Whole,
            rx_chains: ends == Ends::Whole,
        };
        pair_drivers::<4, 4>(
            exec,
            faults,
            Delivery::Copy,
            [512, 512],
            |a, b| -> [PairDriver; 2] {
                [
                    Box::new(a.with_offloads(offloads)),
                    Box::new(b.with_offloads(offloads)),
                ]
            },
            |_, _| {},
        )
    } else {
        pair_on(exec, faults, 512)
    };
    let [a, b] = p.stacks;
    let (a_data, b_data) = (stream(1), stream(2));
    let (a_sum, b_sum): ([u8; 32], [u8; 32]) = (
        Sha256::digest(&a_data).into(),
        Sha256::digest(&b_data).into(),
    );
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = socket(b, cc);
        s.accept(8000).await.unwrap();
        exchange(s, b_data).await
    });
    let started = p.exec.now();
    let client = p.exec.block_on(async move {
        let mut c = socket(a, cc);
        c.connect_timeout(
            IpEndpoint::new(ADDR[1].into(), 8000),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        timeout(Duration::from_secs(600), exchange(c, a_data))
            .await
            .expect("transfer finished within 10 simulated minutes")
    });
    let server = p.exec.block_on(server);
    eprintln!(
        "10 MB each way under faults, {cc:?}: {} ms simulated",
        (p.exec.now() - started).as_millis()
    );
    // Both sockets are dropped (`exchange` consumed them) after shutting down and reading the
    // peer's FIN; TIME-WAIT (10 s) and any FIN or ACK the wire lost and a timer sends again run
    // out well within 30 simulated seconds.
    p.exec.block_on(p.exec.sleep(Duration::from_secs(30)));
    assert_eq!(client, (b_sum, LEN), "A received B's stream byte-exact");
    assert_eq!(server, (a_sum, LEN), "B received A's stream byte-exact");
    let (w0, w1) = (p.ends[0].tx_stats(), p.ends[1].tx_stats());
    eprintln!(
        "wire A->B {w0:?}\nwire B->A {w1:?}\nA {:?}\nB {:?}",
        a.stats(),
        b.stats()
    );
    for w in [w0, w1] {
        assert!(
            ends != Ends::Segment || w.segmented > 0,
            "the ends cut super-segments: {w:?}"
        );
        assert!(
            w.lost > 0 && w.reordered > 0 && w.duplicated > 0 && w.corrupted > 0,
            "{w:?}"
        );
    }
    for s in [a.stats(), b.stats()] {
        if ends == Ends::Whole {
            // Super-segments arrive whole: each chain is one pass.
            assert!(s.rx_chains > 0, "chains taken whole: {s:?}");
        } else {
            assert!(
                s.gro_batches > 0 && s.gro_segments >= 2 * s.gro_batches,
                "segments taken in batches: {s:?}"
            );
        }
        if tso {
            // The ends segment: every super-segment went to them whole.
            assert!(
                s.super_segments > 0 && s.tso_super_segments == s.super_segments,
                "data sent in super-segments, whole: {s:?}"
            );
        } else {
            // The wire does not segment: every super-segment was split in software.
            assert!(
                s.super_segments > 0
                    && s.tso_super_segments == 0
                    && s.gso_pieces >= 2 * s.super_segments,
                "data sent in super-segments, split in software: {s:?}"
            );
        }
    }
    p.assert_slots_back();
}
