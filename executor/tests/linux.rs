//! The executor on the real Linux platform: idle costs nothing, an earlier timer inserted from
//! another thread wakes a sleeping executor, and the epoll reactor re-arms correctly.

// Real threads and the real clock: under `--cfg loom` the executor's atomics are loom's, which
// exist only inside a loom model (the crate's loom models are its `--lib` tests).
#![cfg(not(loom))]

use std::future::Future;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant as StdInstant};

use zcnet_executor::linux::{self, LinuxPlatform};
use zcnet_executor::{time, Executor};

fn executor() -> &'static Executor {
    Executor::leak(LinuxPlatform::leak().expect("epoll and eventfd"))
}

/// Opened by another thread; the future waiting on it registers, then checks.
#[derive(Default)]
struct Gate {
    open: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Gate {
    fn poll(&self, cx: &mut std::task::Context<'_>) -> Poll<()> {
        if self.open.load(SeqCst) {
            return Poll::Ready(());
        }
        *self.waker.lock().unwrap() = Some(cx.waker().clone());
        if self.open.load(SeqCst) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    fn open(&self) {
        self.open.store(true, SeqCst);
        if let Some(w) = self.waker.lock().unwrap().take() {
            w.wake();
        }
    }
}

#[test]
fn an_idle_executor_makes_no_wakeups() {
    let exec = executor();
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    // A task that is pending forever without a timer, beside the main future.
    let idle_task = exec.spawner().spawn(std::future::pending::<()>());
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        g.open();
    });
    let start = StdInstant::now();
    exec.block_on(std::future::poll_fn(|cx| gate.poll(cx)));
    opener.join().unwrap();
    assert!(start.elapsed() >= Duration::from_secs(1));
    let s = exec.stats();
    // One wait (the whole second, in one epoll_wait with no timeout), ended by the signal.
    assert_eq!(s.waits, 1, "{s:?}");
    assert_eq!(s.signals, 1, "{s:?}");
    // Polls: main future twice (start, after the wake), idle task once.
    assert_eq!(s.polls, 3, "{s:?}");
    drop(idle_task);
}

#[test]
fn an_earlier_timer_from_another_thread_wakes_a_sleeping_executor() {
    let exec = executor();
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    let runner = std::thread::spawn(move || {
        // Sleeps with a 1-hour timer armed (and waits for the gate).
        let far = exec.sleep(Duration::from_secs(3600));
        exec.block_on(async {
            let mut far = std::pin::pin!(far);
            std::future::poll_fn(|cx| {
                let _ = far.as_mut().poll(cx);
                g.poll(cx)
            })
            .await
        });
    });
    std::thread::sleep(Duration::from_millis(100)); // let it go to sleep
    let start = StdInstant::now();
    // Another thread's own executor awaits a 50 ms timer on `exec`'s wheel.
    linux::block_on(exec.sleep(Duration::from_millis(50)));
    let took = start.elapsed();
    gate.open();
    runner.join().unwrap();
    assert!(took >= Duration::from_millis(50), "{took:?}");
    assert!(
        took < Duration::from_secs(5),
        "the sleeping executor was not signalled: {took:?}"
    );
    assert!(exec.stats().timers_fired >= 1);
}

#[test]
fn sleeps_on_the_real_clock() {
    let start = StdInstant::now();
    linux::block_on(async {
        time::sleep(Duration::from_millis(30)).await;
        assert!(
            time::timeout(Duration::from_millis(10), std::future::pending::<()>())
                .await
                .is_err()
        );
    });
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(40), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

fn socketpair() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0, "socketpair: {}", std::io::Error::last_os_error());
    (fds[0], fds[1])
}

fn read_fd(fd: RawFd, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: `buf` is valid for `buf.len()` bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn write_fd(fd: RawFd, buf: &[u8]) -> std::io::Result<usize> {
    // SAFETY: `buf` is valid for `buf.len()` bytes.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[test]
fn the_reactor_delivers_readiness_and_rearms() {
    let platform = LinuxPlatform::leak().unwrap();
    let exec = Executor::leak(platform);
    let (a, b) = socketpair();
    let io = platform.register(a).unwrap();
    let writer = std::thread::spawn(move || {
        for msg in [&b"first"[..], b"second", b"third"] {
            std::thread::sleep(Duration::from_millis(50));
            write_fd(b, msg).unwrap();
        }
        b
    });
    let got = exec.block_on(async {
        let mut all = Vec::new();
        while all.len() < b"firstsecondthird".len() {
            let mut buf = [0u8; 64];
            let n = io.read_with(|| read_fd(a, &mut buf)).await.unwrap();
            all.extend_from_slice(&buf[..n]);
        }
        all
    });
    assert_eq!(got, b"firstsecondthird");
    // Each message arrived while the executor slept in epoll_wait: few waits, no spinning.
    let s = exec.stats();
    assert!(s.waits <= 6, "{s:?}");
    let b = writer.join().unwrap();

    // A full socket buffer makes writes wait for writability, which the reader restores.
    const TOTAL: usize = 4 << 20;
    let (sent, received) = exec.block_on(async {
        let chunk = [7u8; 65536];
        let mut sent = 0usize;
        let reader = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0;
            while got < TOTAL {
                match read_fd(b, &mut buf) {
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            got
        });
        while sent < TOTAL {
            let want = chunk.len().min(TOTAL - sent);
            sent += io.write_with(|| write_fd(a, &chunk[..want])).await.unwrap();
        }
        (sent, reader.join().unwrap())
    });
    assert_eq!((sent, received), (TOTAL, TOTAL));
    drop(io);
    // SAFETY: both fds are ours and no longer used.
    unsafe {
        libc::close(a);
        libc::close(b);
    }
}

/// A task that wakes itself on every poll keeps the loop from ever waiting, and waiting is where
/// epoll readiness is delivered; the loop still looks at the platform's events every
/// `EVENT_INTERVAL` busy turns, so readiness arrives while the busy task runs. (Before that
/// look existed, `block_on` below never returned.)
#[test]
fn readiness_arrives_while_a_task_keeps_the_loop_busy() {
    let platform = LinuxPlatform::leak().unwrap();
    let exec = Executor::leak(platform);
    let (a, b) = socketpair();
    let io = platform.register(a).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy_stop = stop.clone();
    let busy = exec.spawner().spawn(std::future::poll_fn(move |cx| {
        if busy_stop.load(SeqCst) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }));
    // Written after the reader found the socket empty and registered for readiness.
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        write_fd(b, b"ready").unwrap();
    });
    let (n, buf) = exec
        .block_on(time::timeout(Duration::from_secs(10), async {
            let mut buf = [0u8; 16];
            let n = io.read_with(|| read_fd(a, &mut buf)).await.unwrap();
            (n, buf)
        }))
        .expect("readiness was starved by the busy task");
    assert_eq!(&buf[..n], b"ready");
    writer.join().unwrap();
    stop.store(true, SeqCst);
    exec.block_on(busy);
    drop(io);
    // SAFETY: both fds are ours and no longer used.
    unsafe {
        libc::close(a);
        libc::close(b);
    }
}
