//! A connection's send queue holds as many frames as its `tx` buffer asks for, so what one
//! connection keeps in flight follows `TcpBuffers::tx`, past the 64 frames the connection
//! holds inline (92,672 bytes of 1,448-byte segments).
//!
//! * Over a wire with a 10 ms one-way delay, A sends 4 MiB with a 1 MiB send buffer to B,
//!   whose 1 MiB receive buffer opens the window that far: A's sent-and-unacknowledged bytes
//!   go well past 64 segments, never past the buffer, and the stream takes a few round trips
//!   of the executor's virtual clock, not one round trip per 64 segments; it arrives
//!   byte-exact (SHA-256) and every slot is back afterwards (the pool audit).
//! * The same with a 64 KiB send buffer keeps at most 64 KiB in flight: the stream takes at
//!   least one round trip per 64 KiB.

use std::time::Duration;

use sha2::{Digest, Sha256};
use zcnet_executor::time::timeout;
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::IpEndpoint;
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_on, read_sha256, ADDR};
use zcnet_tests::wire::Faults;

const LEN: usize = 4 * 1024 * 1024;
/// What 64 frames of 1,448-byte segments hold.
const SIXTY_FOUR_SEGMENTS: usize = 64 * 1448;

/// Sends `LEN` bytes from A (send buffer `tx`) to B (receive buffer 1 MiB) over a wire with a
/// 10 ms one-way delay (a 20 ms round trip); returns the most bytes A had sent and not yet
/// seen acknowledged when a write returned, and the stream's time on the virtual clock from
/// the connection to B's last byte.
fn send(tx: usize) -> (usize, Duration) {
    let faults = Faults {
        delay: Duration::from_millis(10),
        capacity: 2048,
        ..Faults::default()
    };
    let p = pair_on(Executor::leak(VirtualClock::leak()), faults, 4096);
    let [a, b] = p.stacks;
    let payload: Vec<u8> = (0..LEN as u32)
        .map(|i| (i.wrapping_mul(0x9e37_79b1) >> 13) as u8)
        .collect();
    let want: [u8; 32] = Sha256::digest(&payload).into();
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(1024 * 1024, 16 * 1024)).unwrap();
        s.accept(9000).await.unwrap();
        let digest = read_sha256(&mut s, LEN, |_| {}).await;
        (s, digest)
    });
    let client_widest = p.exec.block_on(async move {
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(64 * 1024, tx)).unwrap();
        c.connect_timeout(
            IpEndpoint::new(ADDR[1].into(), 9000),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        let start = p.exec.now();
        let mut widest = 0;
        let sent = timeout(Duration::from_secs(600), async {
            for chunk in payload.chunks(16 * 1024) {
                c.write_all(chunk).await.unwrap();
                widest = widest.max(c.stats().unacked);
            }
            c.flush().await.unwrap();
        })
        .await;
        assert!(sent.is_ok(), "stalled: A {:?}", c.stats());
        (c, widest, start)
    });
    let (client, widest, start) = client_widest;
    let (server, digest) = p
        .exec
        .block_on(timeout(Duration::from_secs(600), server))
        .expect("B read the stream");
    let took = p.exec.now() - start;
    eprintln!("tx {tx}: widest flight {widest}, {took:?}");
    assert_eq!(digest, want, "the stream arrived byte-exact");
    drop((client, server));
    p.exec.block_on(p.exec.sleep(Duration::from_secs(30)));
    p.assert_slots_back();
    (widest, took)
}

/// The one-way delay's round trip.
const RTT: Duration = Duration::from_millis(20);

#[test]
fn a_one_mib_send_buffer_keeps_more_than_64_segments_in_flight() {
    let (widest, took) = send(1024 * 1024);
    assert!(
        widest > 4 * SIXTY_FOUR_SEGMENTS,
        "A had at most {widest} bytes in flight"
    );
    assert!(widest <= 1024 * 1024, "{widest}");
    // 64 segments per round trip would take 46 round trips for 4 MiB.
    let rounds = took.as_secs_f64() / RTT.as_secs_f64();
    assert!(rounds < 16.0, "{rounds:.1} round trips");
}

#[test]
fn a_64_kib_send_buffer_bounds_the_flight() {
    let (widest, took) = send(64 * 1024);
    assert!(widest <= 64 * 1024, "{widest}");
    let rounds = took.as_secs_f64() / RTT.as_secs_f64();
    assert!(
        rounds >= (LEN / (64 * 1024)) as f64,
        "{rounds:.1} round trips"
    );
}
