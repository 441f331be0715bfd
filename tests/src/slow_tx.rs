//! A [`Driver`] wrapper whose transmit completions lag: [`SlowCompletion`] hands the inner
//! driver a copy of each frame at once (the peer gets it without delay), while the frame's own
//! slot stays with the "device" (DEVICE, or SENT for a frame a TCP socket retains) for a fixed
//! time, until a task on the executor completes it by dropping its lease, as a NIC whose TX
//! completions come late. A slot handed to it again while it still has the slot from a previous
//! hand-off is a bug in the caller: it panics, naming the slot. Its [`DeviceLog`] lists every
//! hand-off (slot, time, the frame's bytes) and every completion (slot, time) in the order they
//! happened.
//!
//! [`slow_pair`] builds two stacks over the in-memory [`wire`](crate::wire) with stack A's end
//! wrapped in a [`SlowCompletion`].

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use zcnet_buffer::sim::WireTimer;
use zcnet_buffer::{
    Capabilities, Driver, HardwareAddress, InFlight, LinkState, RxFrame, TxError, TxFrame,
};
use zcnet_executor::Executor;

use crate::net::{pair_wrapped, Pair, PairDriver};
use crate::wire::{ExecutorTimer, Faults};

/// What happened to a frame at a [`SlowCompletion`] device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceEvent {
    /// The stack handed the device the frame in `slot` at `at` (the executor's time); `bytes`
    /// is a copy of the frame.
    Handed {
        /// The pool slot.
        slot: usize,
        /// When.
        at: Duration,
        /// The frame's bytes.
        bytes: Vec<u8>,
    },
    /// The device completed the frame in `slot` at `at`: its lease is dropped, the slot back
    /// with the pool (or with the socket that retains it).
    Completed {
        /// The pool slot.
        slot: usize,
        /// When.
        at: Duration,
    },
}

#[derive(Debug, Default)]
struct Shared {
    /// Frames with the device, oldest first, each with the time it completes.
    held: VecDeque<(Duration, InFlight)>,
    /// The completion task's waker, woken when a frame joins `held`.
    waker: Option<Waker>,
    /// Everything that happened, in order.
    events: Vec<DeviceEvent>,
}

/// Read access to a [`SlowCompletion`]'s events (shared with the driver, which a stack owns).
#[derive(Clone, Debug)]
pub struct DeviceLog(Arc<Mutex<Shared>>);

impl DeviceLog {
    /// Every hand-off and completion so far, in the order they happened.
    pub fn events(&self) -> Vec<DeviceEvent> {
        self.0.lock().unwrap().events.clone()
    }
}

/// A driver that passes a copy of each frame to `inner` at once and completes the frame itself
/// `delay` later (see the module docs).
#[derive(Debug)]
pub struct SlowCompletion<D> {
    inner: D,
    /// A frame of the inner driver's, ready for the next copy.
    spare: Option<TxFrame>,
    shared: Arc<Mutex<Shared>>,
    exec: &'static Executor,
    delay: Duration,
}

impl<D> SlowCompletion<D> {
    /// Wraps `inner`, completing each frame `delay` after it is handed over, on `exec`'s clock;
    /// spawns the task that completes them on `exec`.
    pub fn new(inner: D, exec: &'static Executor, delay: Duration) -> (Self, DeviceLog) {
        let shared = Arc::new(Mutex::new(Shared::default()));
        exec.local_spawner().spawn(complete(shared.clone(), exec));
        let log = DeviceLog(shared.clone());
        (
            Self {
                inner,
                spare: None,
                shared,
                exec,
                delay,
            },
            log,
        )
    }

    fn now(&self) -> Duration {
        Duration::from_nanos(self.exec.now().as_nanos())
    }
}

/// The device's completions: drops each held frame's lease when its time comes, then logs it.
async fn complete(shared: Arc<Mutex<Shared>>, exec: &'static Executor) {
    let mut timer = ExecutorTimer::new(exec);
    poll_fn(|cx| loop {
        let now = timer.now();
        let (due, next) = {
            let mut s = shared.lock().unwrap();
            let mut due = Vec::new();
            while s.held.front().is_some_and(|(at, _)| *at <= now) {
                due.extend(s.held.pop_front().map(|(_, f)| f));
            }
            s.waker = Some(cx.waker().clone());
            (due, s.held.front().map(|(at, _)| *at))
        };
        for frame in due {
            let slot = frame.slot_index();
            // Completion: the slot goes back (a retained one to its socket, whose waiting
            // retransmission this wakes).
            drop(frame);
            let mut s = shared.lock().unwrap();
            s.events.push(DeviceEvent::Completed { slot, at: now });
        }
        match next {
            Some(at) if timer.poll_until(at, cx).is_ready() => continue,
            _ => return Poll::<()>::Pending,
        }
    })
    .await
}

impl<D: Driver> SlowCompletion<D> {
    /// `Ready` once a frame of the inner driver's is set aside for the next copy.
    fn poll_spare(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.spare.is_none() {
            self.spare = Some(ready!(self.inner.poll_transmit_frame(cx)));
        }
        Poll::Ready(())
    }
}

/// The receive side, flushes and the receive deferral are the inner driver's, as they are.
impl<D: Driver> Driver for SlowCompletion<D> {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        self.inner.poll_receive(cx)
    }

    fn poll_receive_chain(&mut self, cx: &mut Context<'_>) -> Poll<zcnet_buffer::RxChain> {
        self.inner.poll_receive_chain(cx)
    }

    fn poll_receive_packet(&mut self, cx: &mut Context<'_>) -> Poll<zcnet_buffer::RxPacket> {
        self.inner.poll_receive_packet(cx)
    }

    fn receive_deferral(&mut self) -> Option<Duration> {
        self.inner.receive_deferral()
    }

    fn flush(&mut self) {
        self.inner.flush()
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        ready!(self.poll_spare(cx));
        self.inner.poll_transmit_frame(cx)
    }

    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        ready!(self.poll_spare(cx));
        self.inner.poll_transmit_ready(cx)
    }

    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        let mut cx = Context::from_waker(Waker::noop());
        if self.poll_spare(&mut cx).is_pending() {
            return Err(TxError::Device);
        }
        let mut copy = self.spare.take().expect("a spare frame");
        let max = copy.tailroom();
        match copy.append(frame.len()) {
            Ok(buf) => buf.copy_from_slice(&frame),
            Err(_) => {
                let len = frame.len();
                return Err(TxError::TooLong { len, max });
            }
        }
        let at = self.now();
        let slot = frame.slot_index();
        {
            let s = self.shared.lock().unwrap();
            if let Some((due, _)) = s.held.iter().find(|(_, f)| f.slot_index() == slot) {
                panic!(
                    "slot {slot} (retained: {}) handed to the device again at {at:?} while the \
                     device still has it (its previous hand-off completes at {due:?})",
                    frame.is_retained()
                );
            }
        }
        self.inner.transmit(copy)?;
        let mut s = self.shared.lock().unwrap();
        s.events.push(DeviceEvent::Handed {
            slot,
            at,
            bytes: frame.to_vec(),
        });
        s.held.push_back((at + self.delay, frame.into_device()));
        if let Some(w) = &s.waker {
            w.wake_by_ref();
        }
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        // Frames only: the device model holds one slot per hand-off, so a super-segment is
        // cut into frames by the stack (software GSO) rather than handed over as a chain.
        self.inner
            .capabilities()
            .with_gso(0, zcnet_buffer::GsoKinds::empty())
    }

    fn hardware_address(&self) -> HardwareAddress {
        self.inner.hardware_address()
    }

    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        self.inner.poll_link_state(cx)
    }
}

/// Two stacks over a wire with `faults` and pools of `slots` slots, like
/// [`net::pair_on`](crate::net::pair_on), with stack A's wire end wrapped in a
/// [`SlowCompletion`] that completes each frame `delay` after it is handed over. Returns the
/// pair and A's device log.
pub fn slow_pair(
    exec: &'static Executor,
    faults: Faults,
    slots: usize,
    delay: Duration,
) -> (Pair, DeviceLog) {
    let mut log = None;
    let wrap = |a, b| {
        let (a, l) = SlowCompletion::new(a, exec, delay);
        log = Some(l);
        [Box::new(a) as PairDriver, Box::new(b)]
    };
    let pair = pair_wrapped(exec, faults, slots, wrap, |_, _| {});
    (pair, log.expect("the pair made its drivers"))
}
