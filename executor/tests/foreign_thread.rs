//! The free timer functions polled on a thread that runs no zcnet executor (a foreign
//! executor's thread): before any executor has run they wait for one, then they are served by
//! the process's default executor, also after its loop ended (they fire when it runs again). One test in its
//! own binary, so that no other test's executor takes the default role.

// Real threads and the real clock: under `--cfg loom` the executor's atomics are loom's, which
// exist only inside a loom model (the crate's loom models are its `--lib` tests).
#![cfg(not(loom))]

use std::future::{pending, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant as StdInstant};

use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::time::{self, Elapsed};
use zcnet_executor::Executor;

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// A minimal foreign executor: polls `f` on this thread, parking between wakes.
fn foreign_block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    let give_up = StdInstant::now() + Duration::from_secs(10);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(StdInstant::now() < give_up, "never woken");
        std::thread::park_timeout(Duration::from_secs(1));
    }
}

/// Ends the executor thread's `block_on`.
#[derive(Default)]
struct Stop {
    done: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

#[test]
fn free_timers_on_a_foreign_thread_use_the_running_executor() {
    // Before any executor has run, a sleep and `now` polled under a foreign waker wait for
    // one, woken when it starts (not by the foreign loop's once-a-second re-poll).
    let early = std::thread::spawn(|| {
        foreign_block_on(time::sleep(Duration::from_millis(20)));
        let _ = foreign_block_on(time::now());
        StdInstant::now()
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !early.is_finished(),
        "no executor, no clock: the sleep waits"
    );

    let exec = Executor::leak(LinuxPlatform::leak().expect("epoll and eventfd"));
    let stop = Arc::new(Stop::default());
    let (running_tx, running_rx) = mpsc::channel();
    let s = stop.clone();
    let runner = std::thread::spawn(move || {
        exec.block_on(std::future::poll_fn(|cx| {
            let _ = running_tx.send(());
            *s.waker.lock().unwrap() = Some(cx.waker().clone());
            if s.done.load(SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }))
    });
    running_rx.recv().unwrap();
    let started = StdInstant::now();
    let done = early.join().unwrap();
    let after = done.saturating_duration_since(started);
    assert!(
        after >= Duration::from_millis(15) && after < Duration::from_millis(500),
        "the early sleep ran its 20 ms once the executor started: {after:?}"
    );

    let before = exec.stats().timers_fired;
    let started = StdInstant::now();
    foreign_block_on(time::sleep(Duration::from_millis(30)));
    assert!(started.elapsed() >= Duration::from_millis(30));
    let r = foreign_block_on(time::timeout(Duration::from_millis(20), pending::<()>()));
    assert_eq!(r, Err(Elapsed));
    let now = foreign_block_on(time::now());
    assert!(now <= exec.now());
    assert_eq!(
        exec.stats().timers_fired - before,
        2,
        "the running executor fired both"
    );

    stop.done.store(true, SeqCst);
    if let Some(w) = stop.waker.lock().unwrap().take() {
        w.wake();
    }
    runner.join().unwrap();

    // Its loop ended; it stays the default: a sleep polled now is armed on it, and fires when
    // its loop runs again.
    let (flag, waker) = {
        struct Flag(AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, SeqCst);
            }
        }
        let f = Arc::new(Flag(AtomicBool::new(false)));
        (f.clone(), Waker::from(f))
    };
    let mut s = pin!(time::sleep(Duration::from_millis(10)));
    let mut cx = Context::from_waker(&waker);
    assert!(s.as_mut().poll(&mut cx).is_pending());
    assert_eq!(exec.armed_timers(), 1);
    exec.block_on(exec.sleep(Duration::from_millis(20)));
    assert!(flag.0.load(SeqCst), "fired by the loop that ran");
    assert!(s.as_mut().poll(&mut cx).is_ready());
    assert_eq!(exec.armed_timers(), 0);
}
