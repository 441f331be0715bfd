//! TCP super-segments over the in-memory wire (MTU 1500, no offloads: every super-segment is
//! split in software): 16 MiB one way arrive byte-exact (SHA-256), the sender builds its
//! segments a run of frames at a time (`StackStats::super_segments`, `gso_pieces`), every
//! piece is a full segment but the last of a run, the wire carries nothing longer than the
//! MTU, and the pool audit finds every slot back. Printed (`--nocapture`): the passes through
//! the connections' state machines per MiB, against the segments per MiB a stack that works
//! one segment at a time passes.
//!
//! Once with 16 KiB socket buffers (the stack benchmark's), once with 256 KiB, once over IPv6,
//! and once with
//! the sender on a device whose transmit queue holds 8 frames and drains every 50 µs: the
//! pieces of a run that find it full wait in the link layer and go, in order, as it drains
//! (nothing is refused, nothing is sent again).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use sha2::{Digest, Sha256};
use zcnet_buffer::{
    Capabilities, Driver, HardwareAddress, LinkState, RxFrame, TxChain, TxError, TxFrame,
};
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpSocket, TcpStats};
use zcnet_stack::{DropReason, IpAddress, IpEndpoint, StackStats};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{
    pair_on, pair_on_with, pair_wrapped, read_sha256, with_ula, Pair, PairDriver, ADDR, ULA,
};
use zcnet_tests::wire::{Faults, WireEnd};

const LEN: usize = 16 * 1024 * 1024;
const MIB: f64 = 1024.0 * 1024.0;

/// The stream: a multiplicative hash of each byte's position.
fn data() -> Vec<u8> {
    (0..LEN as u32)
        .map(|i| (i.wrapping_mul(0x9e37_79b1) >> 11) as u8)
        .collect()
}

/// Passes through a state machine on each side, from the stacks' counters: the sender's
/// sends (a super-segment, or a segment sent alone: its frames out less the pieces of its
/// super-segments, plus the super-segments) and the acknowledgements it took (a frame in
/// each), the receiver's segments taken (one pass per GRO batch, one per segment outside a
/// batch) and the acknowledgements it sent (a frame out each).
fn tcb_passes(a: &StackStats, b: &StackStats) -> u64 {
    let sender =
        a.frames_out - a.gso_pieces - a.tso_super_segments + a.super_segments + a.frames_in;
    let receiver = b.frames_in - b.gro_segments + b.gro_batches + b.frames_out;
    sender + receiver
}

/// Frames the small device's transmit queue holds.
const QUEUE: usize = 8;

/// The small device's state, shared with the task that drains its queue.
#[derive(Default)]
struct Queue {
    frames: VecDeque<TxFrame>,
    /// Who waits for room.
    waker: Option<Waker>,
    /// Frames refused because the queue was full.
    refused: u64,
}

/// A wire end behind a transmit queue of [`QUEUE`] frames, which a task hands to the wire
/// every 50 µs: `poll_transmit_ready` says `Pending` while it is full.
struct SmallQueue {
    end: Arc<Mutex<WireEnd>>,
    queue: Arc<Mutex<Queue>>,
}

impl Driver for SmallQueue {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        self.end.lock().unwrap().poll_receive(cx)
    }
    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        match self.poll_transmit_ready(cx) {
            Poll::Ready(()) => self.end.lock().unwrap().poll_transmit_frame(cx),
            Poll::Pending => Poll::Pending,
        }
    }
    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut q = self.queue.lock().unwrap();
        if q.frames.len() >= QUEUE {
            q.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(())
    }
    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        let mut q = self.queue.lock().unwrap();
        if q.frames.len() >= QUEUE {
            q.refused += 1;
            return Err(TxError::Device);
        }
        q.frames.push_back(frame);
        Ok(())
    }
    fn transmit_chain(&mut self, chain: TxChain) -> Result<(), TxError> {
        let frames = chain.frame_count();
        match (frames, chain.into_iter().next()) {
            (1, Some(frame)) => self.transmit(frame),
            _ => Err(TxError::ChainUnsupported { frames }),
        }
    }
    fn capabilities(&self) -> Capabilities {
        self.end.lock().unwrap().capabilities()
    }
    fn hardware_address(&self) -> HardwareAddress {
        self.end.lock().unwrap().hardware_address()
    }
    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        self.end.lock().unwrap().poll_link_state(cx)
    }
}

/// The queue's drain: every 50 µs of the executor's clock, the queued frames go to the wire
/// and a waiter for room is woken, until `stop`. Returns how many ticks found frames.
async fn drain(
    exec: &'static Executor,
    queue: Arc<Mutex<Queue>>,
    end: Arc<Mutex<WireEnd>>,
    stop: Arc<AtomicBool>,
) -> u64 {
    let mut busy = 0;
    while !stop.load(Ordering::SeqCst) {
        exec.sleep(Duration::from_micros(50)).await;
        let (frames, waker) = {
            let mut q = queue.lock().unwrap();
            (std::mem::take(&mut q.frames), q.waker.take())
        };
        busy += u64::from(!frames.is_empty());
        let mut end = end.lock().unwrap();
        for frame in frames {
            end.transmit(frame).expect("the wire takes the frame");
        }
        drop(end);
        if let Some(w) = waker {
            w.wake();
        }
    }
    busy
}

fn bulk(buffer: usize) {
    // Room for both sockets' frame budgets (one frame per KiB each way) in the TCP share.
    let p = pair_on(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        1024,
    );
    let _ = bulk_over(&p, buffer);
    p.assert_slots_back();
}

/// Moves `LEN` bytes from A to B with `buffer`-byte socket buffers, checks them (see the
/// module docs) and returns A's stack and connection statistics.
fn bulk_over(p: &Pair, buffer: usize) -> (StackStats, TcpStats) {
    bulk_to(p, buffer, ADDR[1].into())
}

/// [`bulk_over`] to B at `b_addr`.
fn bulk_to(p: &Pair, buffer: usize, b_addr: IpAddress) -> (StackStats, TcpStats) {
    let [a, b] = p.stacks;
    let payload = data();
    let want: [u8; 32] = Sha256::digest(&payload).into();
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(buffer, buffer)).unwrap();
        s.accept(9000).await.unwrap();
        let digest = read_sha256(&mut s, LEN, |_| {}).await;
        (s, digest)
    });
    let client = p.exec.block_on(async move {
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(buffer, buffer)).unwrap();
        c.connect_timeout(IpEndpoint::new(b_addr, 9000), Duration::from_secs(10))
            .await
            .unwrap();
        c.write_all(&payload).await.unwrap();
        c.flush().await.unwrap();
        c
    });
    let (server, digest) = p.exec.block_on(server);
    assert_eq!(digest, want, "the stream arrived byte-exact");
    let (sa, sb) = (a.stats(), b.stats());
    let (ca, cb) = (client.stats(), server.stats());
    let wire = p.ends[0].tx_stats();
    eprintln!("{buffer} B buffers:\nA {sa:?}\nB {sb:?}\nA {ca:?}\nwire A->B {wire:?}");
    assert!(sa.super_segments > 0, "{sa:?}");
    assert_eq!(
        sa.tso_super_segments, 0,
        "the wire does not segment: {sa:?}"
    );
    // The data went as full segments, but for the last of runs cut short by the window.
    let data_segments = ca.counters.segments_sent;
    assert!(
        data_segments <= LEN as u64 / ca.mss as u64 + sa.super_segments + 10,
        "{ca:?} {sa:?}"
    );
    assert_eq!((wire.too_long, wire.lost), (0, 0), "{wire:?}");
    assert_eq!(ca.counters.bytes_sent, LEN as u64);
    assert_eq!(cb.counters.bytes_received, LEN as u64);
    let passes = tcb_passes(&sa, &sb);
    let mib = LEN as f64 / MIB;
    eprintln!(
        "{buffer} B buffers: {:.0} state-machine passes per MiB ({:.0} wire segments per MiB, \
         {:.1} pieces per super-segment)",
        passes as f64 / mib,
        (sa.frames_out + sb.frames_out) as f64 / mib,
        sa.gso_pieces as f64 / sa.super_segments as f64
    );
    // Fewer passes than wire segments: the sender's runs are built once each.
    assert!(passes < sa.frames_out + sb.frames_out + sa.frames_in + sb.frames_in);
    drop((client, server));
    p.exec.block_on(p.exec.sleep(Duration::from_secs(30)));
    (sa, ca)
}

#[test]
fn sixteen_mib_in_super_segments_with_the_benchmarks_buffers() {
    bulk(16 * 1024);
}

#[test]
fn sixteen_mib_in_super_segments_with_256_kib_buffers() {
    bulk(256 * 1024);
}

#[test]
fn runs_wait_in_order_for_a_small_transmit_queue() {
    let exec = Executor::leak(VirtualClock::leak());
    let queue = Arc::new(Mutex::new(Queue::default()));
    let mut a_end = None;
    let p = pair_wrapped(
        exec,
        Faults::default(),
        1024,
        |a, b| -> [PairDriver; 2] {
            let a = Arc::new(Mutex::new(a));
            a_end = Some(a.clone());
            let small = SmallQueue {
                end: a,
                queue: queue.clone(),
            };
            [Box::new(small), Box::new(b)]
        },
        |_, _| {},
    );
    let stop = Arc::new(AtomicBool::new(false));
    let drained = p.exec.local_spawner().spawn(drain(
        exec,
        queue.clone(),
        a_end.expect("A's end"),
        stop.clone(),
    ));
    let (s, c) = bulk_over(&p, 256 * 1024);
    stop.store(true, Ordering::SeqCst);
    let busy = p.exec.block_on(drained);
    eprintln!("drain ticks with frames: {busy}");
    assert!(busy > 0);
    assert!(
        s.super_segments > 0 && s.gso_pieces > 2 * s.super_segments,
        "{s:?}"
    );
    // The queue was full often (a run is longer than 8 frames), yet nothing was refused and
    // nothing lost: every piece waited its turn.
    assert_eq!(queue.lock().unwrap().refused, 0, "nothing refused");
    assert_eq!(s.dropped(DropReason::TxDriver), 0, "{s:?}");
    assert_eq!(c.counters.bytes_retransmitted, 0, "{c:?}");
    p.assert_slots_back();
}

#[test]
fn sixteen_mib_in_super_segments_over_ipv6() {
    let p = pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        512,
        with_ula,
    );
    let (s, c) = bulk_to(&p, 64 * 1024, ULA[1].into());
    assert!(s.gso_pieces > 2 * s.super_segments, "{s:?}");
    // IPv6's header is 20 bytes longer: 1428-byte segments.
    assert_eq!(c.mss, 1428, "{c:?}");
    p.assert_slots_back();
}
