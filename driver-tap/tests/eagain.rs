//! The driver's `EAGAIN`-on-write path. A TAP will not refuse a write on demand (the kernel
//! drops on its side instead), so these tests drive the same code over one end of a
//! `SOCK_SEQPACKET` socketpair ([`Tap::from_fd`]) whose send buffer fills up while the other
//! end is not read. They prove that a frame whose write hits `EAGAIN` is kept, never dropped;
//! that the driver then waits for writability (no busy loop, woken by epoll); that frames the
//! caller hands over meanwhile queue behind it up to `TX_QUEUE` and beyond that are refused and
//! counted; and that every accepted frame arrives, in order and intact, once the reader drains.
//! Needs no privileges.

use std::future::poll_fn;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use zcnet_buffer::{Driver, FramePool, PoolConfig, TxError};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::time::{sleep, timeout};
use zcnet_executor::Executor;
use zcnet_tap::{Tap, TapConfig, TX_QUEUE};

/// Bytes per test frame: a 4-byte sequence number, then a pattern derived from it.
const FRAME_LEN: usize = 1000;

/// A waker that counts its wakes.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A connected `SOCK_SEQPACKET` pair (frame boundaries kept, like a tun fd), the first end with
/// the smallest send buffer the kernel allows, so it fills after a few frames.
fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two fds socketpair writes.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0, "socketpair: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just returned by socketpair; each is owned once.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let size: libc::c_int = 1; // the kernel rounds it up to its minimum
                               // SAFETY: `a` is an open socket; the option value is a valid int for the call's duration.
    let r = unsafe {
        libc::setsockopt(
            a.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_SNDBUF: {}", std::io::Error::last_os_error());
    (a, b)
}

fn pattern(seq: u32, i: usize) -> u8 {
    (seq as usize).wrapping_mul(31).wrapping_add(i) as u8
}

/// Takes a TX frame from the driver (waiting as its `poll_transmit_frame` says), fills it with
/// frame `seq`, and hands it over; the driver must accept it.
async fn send(tap: &mut Tap, seq: u32, pending: &AtomicUsize) {
    let mut frame = poll_fn(|cx| {
        let p = tap.poll_transmit_frame(cx);
        if p.is_pending() {
            pending.fetch_add(1, Ordering::Relaxed);
        }
        p
    })
    .await;
    fill(&mut frame, seq);
    assert_eq!(tap.transmit(frame), Ok(()), "frame {seq} refused");
}

fn fill(frame: &mut zcnet_buffer::TxFrame, seq: u32) {
    let buf = frame.append(FRAME_LEN).expect("room for a test frame");
    buf[..4].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in buf[4..].iter_mut().enumerate() {
        *b = pattern(seq, i);
    }
}

/// Reads `n` frames from `fd` (blocking) after waiting `delay`, checking that they are frames
/// `0..n` in order and intact. Returns when it started reading.
fn reader(fd: OwnedFd, n: u32, delay: Duration) -> thread::JoinHandle<Instant> {
    thread::spawn(move || {
        thread::sleep(delay);
        let started = Instant::now();
        let mut buf = vec![0u8; 4096];
        for want in 0..n {
            // SAFETY: `fd` is open; `buf` is writable for its length.
            let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            assert!(r >= 0, "read: {}", std::io::Error::last_os_error());
            let got = &buf[..r as usize];
            assert_eq!(got.len(), FRAME_LEN, "frame {want}: length");
            let seq = u32::from_be_bytes(got[..4].try_into().unwrap());
            assert_eq!(seq, want, "frames out of order or lost");
            assert!(
                got[4..]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == pattern(seq, i)),
                "frame {seq}: content changed"
            );
        }
        started
    })
}

fn setup(slots: usize) -> (&'static Executor, Tap, OwnedFd) {
    let platform = LinuxPlatform::leak().expect("epoll");
    let exec = Executor::leak(platform);
    let pool = FramePool::leak(PoolConfig::new(slots)).expect("pool");
    let (ours, theirs) = seqpacket_pair();
    let tap = Tap::from_fd(platform, pool, ours, &TapConfig::new("pair0")).expect("from_fd");
    assert_eq!(tap.name(), "pair0", "not a tun fd: the configured name");
    assert_eq!(tap.kernel_mtu(), None);
    (exec, tap, theirs)
}

/// Writes until the first `EAGAIN`; returns how many frames the kernel took before it.
fn fill_until_would_block(exec: &'static Executor, tap: &mut Tap) -> u32 {
    let pending = AtomicUsize::new(0);
    let mut seq = 0;
    while tap.stats().tx_would_block == 0 {
        assert!(seq < 100_000, "the socket never filled up");
        exec.block_on(send(tap, seq, &pending));
        seq += 1;
    }
    assert_eq!(pending.load(Ordering::Relaxed), 0, "no wait before EAGAIN");
    let s = tap.stats();
    // The frame that hit EAGAIN was accepted (Ok) but not written: it waits in the driver.
    assert_eq!(s.tx_frames, u64::from(seq - 1));
    assert_eq!(s.tx_errors + s.tx_queue_full, 0, "{s:?}");
    seq
}

/// The frame that hits `EAGAIN` is kept; the driver reports `Pending` and is woken by epoll
/// only when the reader makes room (not before, and without spinning meanwhile); then that
/// frame and every later one arrive in order, intact.
#[test]
fn a_frame_hitting_eagain_is_kept_and_sent_in_order_once_writable() {
    let (exec, mut tap, theirs) = setup(64);
    let next = fill_until_would_block(exec, &mut tap);
    eprintln!("the socket took {} frames before EAGAIN", next - 1);

    // Pending while the socket is full; nobody reads, so nothing wakes us for a while.
    let counting = Arc::new(Counting::default());
    let waker = Waker::from(counting.clone());
    assert!(tap
        .poll_transmit_frame(&mut Context::from_waker(&waker))
        .is_pending());
    exec.block_on(sleep(Duration::from_millis(100)));
    assert_eq!(
        counting.0.load(Ordering::SeqCst),
        0,
        "woken while still full"
    );
    assert!(tap
        .poll_transmit_frame(&mut Context::from_waker(&waker))
        .is_pending());
    assert_eq!(tap.stats().tx_frames, u64::from(next - 1));

    // A reader drains the other end after 200 ms; 2000 frames go through in all.
    let total = 2000u32;
    let delay = Duration::from_millis(200);
    let started = Instant::now();
    let reader = reader(theirs, total, delay);
    // Woken by writability (epoll), once the reader made room.
    let woken_at = exec.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while counting.0.load(Ordering::SeqCst) == 0 {
            assert!(
                Instant::now() < deadline,
                "never woken after the reader drained"
            );
            sleep(Duration::from_millis(1)).await;
        }
        Instant::now()
    });
    assert!(
        woken_at - started >= delay,
        "woken after {:?}, before the reader started",
        woken_at - started
    );
    let pending = AtomicUsize::new(0);
    exec.block_on(timeout(Duration::from_secs(30), async {
        for seq in next..total {
            send(&mut tap, seq, &pending).await;
        }
        // Flush what still waits in the driver.
        let last = poll_fn(|cx| tap.poll_transmit_frame(cx)).await;
        drop(last);
    }))
    .expect("all frames sent within 30 s");
    let read_started = reader.join().expect("reader saw every frame in order");
    assert!(read_started - started >= delay);
    let s = tap.stats();
    eprintln!(
        "{total} frames: {} EAGAINs, {} pending polls while the reader drained; {s:?}",
        s.tx_would_block,
        pending.load(Ordering::Relaxed)
    );
    assert_eq!(s.tx_frames, u64::from(total));
    assert_eq!(s.tx_bytes, u64::from(total) * FRAME_LEN as u64);
    assert_eq!(s.tx_errors + s.tx_queue_full, 0, "{s:?}");
    // Each wait ends with an epoll event caused by the reader: a busy loop would poll far more
    // often than there are frames.
    assert!(pending.load(Ordering::Relaxed) <= total as usize);
    let pool = tap.pool();
    drop(tap);
    assert_eq!(pool.audit().expect("pool consistent").free, 64);
}

/// Frames the caller already holds when the fd is full (here taken straight from the pool)
/// queue behind the blocked one, up to `TX_QUEUE`; one more is refused as `TxError::Device` and
/// counted in `tx_queue_full` (never dropped silently). Every queued frame arrives, in order.
#[test]
fn frames_queue_behind_a_blocked_write_up_to_tx_queue_then_are_refused_and_counted() {
    let (exec, mut tap, theirs) = setup(128);
    let next = fill_until_would_block(exec, &mut tap);
    let pool = tap.pool();
    // The blocked frame is queued already: TX_QUEUE - 1 more fit.
    let mut seq = next;
    for _ in 1..TX_QUEUE {
        let mut f = pool.try_alloc_tx().expect("a free slot");
        fill(&mut f, seq);
        assert_eq!(tap.transmit(f), Ok(()), "frame {seq} queued");
        seq += 1;
    }
    let mut extra = pool.try_alloc_tx().expect("a free slot");
    fill(&mut extra, seq);
    assert_eq!(tap.transmit(extra), Err(TxError::Device));
    assert_eq!(tap.stats().tx_queue_full, 1);
    assert_eq!(tap.stats().tx_frames, u64::from(next - 1));
    // The reader gets every frame up to the last queued one, in order (not the refused one).
    let reader = reader(theirs, seq, Duration::ZERO);
    exec.block_on(timeout(Duration::from_secs(30), async {
        let f = poll_fn(|cx| tap.poll_transmit_frame(cx)).await;
        drop(f);
    }))
    .expect("the queue went out within 30 s");
    reader
        .join()
        .expect("reader saw every queued frame in order");
    let s = tap.stats();
    assert_eq!(s.tx_frames, u64::from(seq));
    assert_eq!(s.tx_errors, 0);
    drop(tap);
    assert_eq!(pool.audit().expect("pool consistent").free, 128);
}
