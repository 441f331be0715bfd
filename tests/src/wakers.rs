//! Wakers for tests that run on plain threads instead of an executor.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

/// Unparks the thread it was made on, and counts how often it did.
#[derive(Debug)]
pub struct ThreadWaker {
    thread: Thread,
    wakes: AtomicUsize,
}

impl ThreadWaker {
    /// A waker for the current thread, and the handle to read its count.
    pub fn current() -> (Arc<ThreadWaker>, Waker) {
        let w = Arc::new(ThreadWaker {
            thread: std::thread::current(),
            wakes: AtomicUsize::new(0),
        });
        (w.clone(), Waker::from(w))
    }

    /// How many times it was woken.
    pub fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// Polls `f` on the current thread until it is ready, parking in between. A park that lasts
/// `patience` without a wake means a lost wakeup: the function panics rather than hang.
pub fn block_on_poll<T>(
    patience: Duration,
    mut f: impl FnMut(&mut std::task::Context<'_>) -> std::task::Poll<T>,
) -> T {
    let (handle, waker) = ThreadWaker::current();
    let mut cx = std::task::Context::from_waker(&waker);
    loop {
        let before = handle.wakes();
        if let std::task::Poll::Ready(v) = f(&mut cx) {
            return v;
        }
        let start = std::time::Instant::now();
        while handle.wakes() == before {
            std::thread::park_timeout(patience);
            assert!(
                handle.wakes() != before || start.elapsed() < patience,
                "no wake within {patience:?}: a lost wakeup"
            );
        }
    }
}

/// Counts wakes and does nothing else (it lives in `zcnet-buffer`'s `sim` module, beside the
/// simulated drivers it is used with).
pub use zcnet_buffer::sim::CountingWaker;
