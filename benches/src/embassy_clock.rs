//! The one embassy-time driver of the benchmark crate, shared by every benchmark binary.
//!
//! embassy-time needs exactly one driver per binary (it is found through link-time symbols), and
//! cargo builds the benchmark crate's dependencies with one feature set for all its binaries. So
//! embassy-time's own `std` driver cannot serve one benchmark while another runs embassy-net on
//! virtual time: both would define the driver's symbols. This module is that single driver, with
//! two modes:
//!
//! * **real time** (the default): `now` is the time since the driver was first used, from
//!   `std::time::Instant`; alarms are fired by one background thread that sleeps until the
//!   earliest one, as embassy-time's std driver does (the TAP benchmark measures embassy-net with
//!   this cost included, as a user of that driver would pay it);
//! * **virtual time** ([`use_virtual_time`]): the clock stands still until the benchmark moves it
//!   with [`fire_next_alarm`] (when no task is ready, jump to the earliest alarm), and no thread
//!   runs — the copies benchmark counts every `memcpy` in the process, so nothing else may run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::Waker;
use std::time::{Duration, Instant};

use embassy_time_driver::{Driver, TICK_HZ};

/// The driver's state: the clock (virtual mode) and the armed alarms, one per waker.
struct BenchClock {
    state: Mutex<State>,
    /// Signals the real-time alarm thread that an earlier alarm was armed.
    changed: Condvar,
}

struct State {
    /// Virtual mode's clock, in ticks.
    virtual_now: u64,
    /// Armed alarms: (tick, waker), at most one per task (its earliest deadline).
    alarms: Vec<(u64, Waker)>,
}

static VIRTUAL: AtomicBool = AtomicBool::new(false);
static ORIGIN: OnceLock<Instant> = OnceLock::new();
static THREAD: OnceLock<()> = OnceLock::new();

fn real_now() -> u64 {
    let origin = *ORIGIN.get_or_init(Instant::now);
    let nanos = origin.elapsed().as_nanos();
    u64::try_from(nanos * u128::from(TICK_HZ) / 1_000_000_000).unwrap_or(u64::MAX)
}

/// Switches this process's embassy clock to virtual time. Call before any embassy code runs;
/// there is no way back.
pub fn use_virtual_time() {
    VIRTUAL.store(true, Ordering::SeqCst);
}

/// Virtual time: moves the clock to the earliest alarm and wakes every alarm due then. Returns
/// `false` if no alarm is armed.
pub fn fire_next_alarm() -> bool {
    let due: Vec<Waker> = {
        let mut st = CLOCK.state.lock().unwrap();
        let Some(at) = st.alarms.iter().map(|e| e.0).min() else {
            return false;
        };
        st.virtual_now = st.virtual_now.max(at);
        let now = st.virtual_now;
        let (due, keep): (Vec<_>, Vec<_>) = st.alarms.drain(..).partition(|e| e.0 <= now);
        st.alarms = keep;
        due.into_iter().map(|e| e.1).collect()
    };
    for w in due {
        w.wake();
    }
    true
}

/// Virtual time: the clock, in embassy ticks.
pub fn virtual_now() -> u64 {
    CLOCK.state.lock().unwrap().virtual_now
}

impl BenchClock {
    /// Real time: wakes due alarms, then sleeps until the next one (or until a new one is armed).
    fn alarm_thread(&'static self) {
        let mut st = self.state.lock().unwrap();
        loop {
            let now = real_now();
            let (due, keep): (Vec<_>, Vec<_>) = st.alarms.drain(..).partition(|e| e.0 <= now);
            st.alarms = keep;
            if !due.is_empty() {
                drop(st);
                for (_, w) in due {
                    w.wake();
                }
                st = self.state.lock().unwrap();
                continue;
            }
            st = match st.alarms.iter().map(|e| e.0).min() {
                Some(at) => {
                    let ticks = at - now;
                    let wait = Duration::from_nanos(
                        u64::try_from(u128::from(ticks) * 1_000_000_000 / u128::from(TICK_HZ))
                            .unwrap_or(u64::MAX),
                    );
                    self.changed.wait_timeout(st, wait).unwrap().0
                }
                None => self.changed.wait(st).unwrap(),
            };
        }
    }
}

impl Driver for BenchClock {
    fn now(&self) -> u64 {
        if VIRTUAL.load(Ordering::Relaxed) {
            self.state.lock().unwrap().virtual_now
        } else {
            real_now()
        }
    }

    fn schedule_wake(&self, at: u64, waker: &Waker) {
        let virtual_time = VIRTUAL.load(Ordering::Relaxed);
        let mut st = self.state.lock().unwrap();
        let now = if virtual_time {
            st.virtual_now
        } else {
            real_now()
        };
        if at <= now {
            drop(st);
            waker.wake_by_ref();
            return;
        }
        // One alarm per task, at its earliest deadline (what embassy's own queues keep).
        match st.alarms.iter_mut().find(|(_, w)| w.will_wake(waker)) {
            Some(e) => e.0 = e.0.min(at),
            None => st.alarms.push((at, waker.clone())),
        }
        drop(st);
        if !virtual_time {
            THREAD.get_or_init(|| {
                std::thread::Builder::new()
                    .name("embassy-alarms".into())
                    .spawn(|| CLOCK.alarm_thread())
                    .expect("spawn the embassy alarm thread");
            });
            self.changed.notify_one();
        }
    }
}

embassy_time_driver::time_driver_impl!(static CLOCK: BenchClock = BenchClock {
    state: Mutex::new(State { virtual_now: 0, alarms: Vec::new() }),
    changed: Condvar::new(),
});
