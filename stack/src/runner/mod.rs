//! [`Runner`]: the stack's tasks — ingress and egress, which move every frame, and the link
//! watcher.
//!
//! * **ingress** runs when the driver has frames (its waker is registered by
//!   `Driver::poll_receive`), handles at most `ingress_budget` frames (a chain counts as its
//!   slots, so a super-segment's ACK goes out before the next read; TCP segments for the
//!   stack to zcnet's TCP, `transport/tcp/input.rs`; the rest to smoltcp's `poll_ingress_single`), then
//!   yields. It wakes egress only if smoltcp or a TCP connection now wants to transmit earlier
//!   than egress planned to wake (a reply, an ACK due).
//! * **egress** runs when signalled (a socket created work, ingress made something due), when the
//!   driver completes a transmission it was waiting for, or when its timer reaches the earliest
//!   deadline. It dispatches every TCP connection that has something due, sends due ARP / NDP
//!   requests, and calls smoltcp's `poll_egress` until nothing more goes out; then it sleeps on
//!   the timer wheel until the earliest of smoltcp's `poll_at`, the connections' `poll_at` and
//!   the neighbour table's deadline, or with no timer at all when there is none. A timer still armed for
//!   an earlier deadline is left as it is (lazy re-arm: it fires early, egress finds nothing and
//!   re-arms), which spares the wheel an unlink and relink on nearly every TCP segment. When the
//!   driver has no TX frame it waits for the driver's TX-completion waker instead of retrying.
//!
//! * **link** runs only when the driver reports a link change, and every
//!   [`LINK_DOWN_RECHECK`](crate::LINK_DOWN_RECHECK) while the link is down (`runner/link.rs`). While
//!   down, egress transmits nothing.
//!
//! Neither ingress nor egress ever polls smoltcp's whole `poll()`.

use core::future::{poll_fn, Future};
use core::pin::pin;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use smoltcp::time::Instant as SmolInstant;
use zcnet_buffer::{RxChain, RxFrame};
use zcnet_executor::time::Sleep;
use zcnet_executor::Instant;

use crate::stack::{from_smol, wake, Stack};

mod egress;
mod ingress;
mod link;

/// The stack's tasks. Spawn them (`Runner::spawn`, feature `alloc`), run them in a task of your
/// own ([`Runner::run`]), or spawn [`Runner::ingress`], [`Runner::egress`] and [`Runner::link`]
/// into static task slots; the stack does nothing until ingress and egress run. Without the
/// link task the stack takes the link for up whatever the driver says.
#[derive(Debug)]
pub struct Runner {
    pub(crate) stack: Stack,
}

/// Awaited forever.
#[derive(Debug)]
pub enum Never {}

impl Runner {
    /// The ingress task. Ends when the stack is shut down ([`Stack::shutdown`]).
    pub async fn ingress(stack: Stack) {
        let mut gro = crate::transport::tcp::gro::Gro::default();
        poll_fn(|cx| ingress::step(stack, cx, &mut gro)).await
    }

    /// The egress task. Ends when the stack is shut down.
    pub async fn egress(stack: Stack) {
        poll_fn(|cx| egress::step(stack, cx)).await
    }

    /// The link task: applies the driver's link changes (see [`Stack::link_state`]). It sleeps
    /// until the driver reports a change, so it costs nothing while the link is up and steady.
    /// Ends when the stack is shut down.
    pub async fn link(stack: Stack) {
        link::watch(stack).await
    }

    /// Spawns the three tasks on `spawner` (boxed; feature `alloc`). Without an allocator, run
    /// [`Runner::run`] in a task of your own.
    ///
    /// The stack keeps `spawner`: its signals to its own tasks and to the tasks that use its
    /// sockets (egress has work, data arrived for a reader) then go through the executor's
    /// local run queue, without a locked instruction.
    #[cfg(feature = "alloc")]
    pub fn spawn(self, spawner: zcnet_executor::LocalSpawner) {
        let s = self.stack;
        s.with(|st| st.tasks.local = Some(spawner));
        drop(spawner.spawn(Self::ingress(s)));
        drop(spawner.spawn(Self::egress(s)));
        drop(spawner.spawn(Self::link(s)));
    }

    /// Runs the three tasks in the current task (each wake polls those not finished) until
    /// the stack is shut down.
    pub async fn run(self) {
        let s = self.stack;
        let mut ingress = pin!(Self::ingress(s));
        let mut egress = pin!(Self::egress(s));
        let mut link = pin!(Self::link(s));
        let mut done = [false; 3];
        poll_fn(|cx| {
            if !done[0] {
                done[0] = ingress.as_mut().poll(cx).is_ready();
            }
            if !done[1] {
                done[1] = egress.as_mut().poll(cx).is_ready();
            }
            if !done[2] {
                done[2] = link.as_mut().poll(cx).is_ready();
            }
            if done == [true; 3] {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

/// The tasks' part of the stack's state: their wakers, egress's timer, and the frame ingress
/// holds back.
pub(crate) struct Tasks {
    /// The ingress task's waker, kept so that shutdown can end the task (the driver, which
    /// holds it otherwise, is handed back).
    pub(crate) ingress_waker: Option<Waker>,
    /// The egress task's waker, once egress has run; it is also the driver's TX waiter.
    pub(crate) egress_waker: Option<Waker>,
    /// The ingress task's waker while it holds a frame it could not process for want of a TX
    /// frame: egress, which owns the driver's TX waiter, wakes it when it next runs.
    pub(crate) ingress_waiting_tx: Option<Waker>,
    /// A frame taken from the driver that could not be processed yet (no TX frame for a reply).
    pub(crate) pending_rx: Option<RxFrame>,
    /// The same for a packet received over several slots (`transport/tcp/chain.rs`).
    pub(crate) pending_rx_chain: Option<RxChain>,
    /// What the egress task sleeps until (`None`: until signalled).
    pub(crate) egress_deadline: Option<SmolInstant>,
    /// The egress task's timer. It lives here, not in the task, so that ingress can move it
    /// earlier (registering egress's waker) without waking egress just to re-arm it. Never
    /// moved: the state sits in `'static` [`StackResources`](crate::StackResources) memory.
    egress_timer: Sleep,
    /// The ingress task's timer, for a driver that defers its receive interrupt
    /// ([`Driver::receive_deferral`](zcnet_buffer::Driver::receive_deferral)): armed only after
    /// a run that drained a bulk stream, never on an idle link. Pinned as `egress_timer` is.
    ingress_timer: Sleep,
    /// Frames one ingress run handles at most before it yields.
    pub(crate) ingress_budget: usize,
    /// The executor's local spawner, given to `Runner::spawn`: with it the stack's signals to
    /// its own tasks (egress, a socket's reader or writer) go through the executor's local run
    /// queue, without a locked instruction ([`wake`]). `None`: every wake takes the
    /// executor's lock-free path.
    pub(crate) local: Option<zcnet_executor::LocalSpawner>,
    /// The pool's owner cache, bound by ingress's first run on its thread
    /// ([`FramePool::bind_owner`](zcnet_buffer::FramePool::bind_owner)): the frames the stack
    /// frees there and the allocations it (and the driver's refill) makes there take no locked
    /// instruction. `None` before, without `std`, when another owner holds the pool, and after
    /// shutdown.
    pub(crate) pool_owner: Option<zcnet_buffer::PoolOwner>,
    /// Ingress tried to bind the owner cache (once: a failed bind is not retried).
    pub(crate) pool_owner_tried: bool,
}

impl Tasks {
    /// No task has run yet; egress's timer is `timer` and ingress's `ingress_timer` (both
    /// disarmed), ingress handles at most `ingress_budget` frames per run.
    pub(crate) fn new(timer: Sleep, ingress_timer: Sleep, ingress_budget: usize) -> Self {
        Self {
            ingress_waker: None,
            egress_waker: None,
            ingress_waiting_tx: None,
            pending_rx: None,
            pending_rx_chain: None,
            egress_deadline: None,
            egress_timer: timer,
            ingress_timer,
            ingress_budget: ingress_budget.max(1),
            local: None,
            pool_owner: None,
            pool_owner_tried: false,
        }
    }

    /// Wakes the egress task: something was queued for it.
    pub(crate) fn signal_egress(&self) {
        if let Some(w) = &self.egress_waker {
            wake(self.local.as_ref(), w);
        }
    }

    /// Arms ingress's timer to wake `waker` (ingress's) at `at`: the driver deferred its
    /// receive interrupt and is to be polled again then. Re-armed at every deferral (one
    /// timer-wheel relink each, a few per millisecond of a bulk stream at most).
    pub(crate) fn arm_ingress_timer(&mut self, at: Instant, waker: &Waker) {
        // SAFETY: as in `arm_egress_timer`: the state never moves once in `StackResources`.
        let mut timer = unsafe { Pin::new_unchecked(&mut self.ingress_timer) };
        timer.as_mut().reset(at);
        if timer.poll(&mut Context::from_waker(waker)).is_ready() {
            // Already due (a zero delay): ingress goes round again.
            wake(self.local.as_ref(), waker);
        }
    }

    /// Takes ingress's timer off the wheel (the stack is shut down: no deferred poll is due).
    pub(crate) fn disarm_ingress_timer(&mut self) {
        // SAFETY: as in `arm_egress_timer`: the state never moves once in `StackResources`.
        let timer = unsafe { Pin::new_unchecked(&mut self.ingress_timer) };
        timer.reset(Instant::MAX);
    }

    /// Arms egress's timer for `at` (`None`: disarms it) with egress's `waker`; `now` tells an
    /// armed deadline from one that has passed.
    #[inline]
    pub(crate) fn arm_egress_timer(
        &mut self,
        now: SmolInstant,
        at: Option<SmolInstant>,
        waker: &Waker,
    ) {
        // Lazy re-arm: a timer still armed for a deadline at or before `at` is kept. It fires
        // early, egress runs once, finds nothing due and re-arms for the deadline then
        // current. A TCP connection moves its deadline on nearly every segment (a
        // retransmission deadline, then a delayed ACK, then a retransmission again), and a
        // timer that fires early at most once per deadline costs far less than unlinking and
        // relinking the wheel entry each time. A deadline already past means the timer fired
        // (or is about to): that one is re-armed for real.
        if let (Some(at), Some(armed)) = (at, self.egress_deadline) {
            if armed <= at && armed > now {
                return;
            }
        }
        self.rearm_egress_timer(at, waker);
    }

    /// [`arm_egress_timer`](Self::arm_egress_timer) when the timer must move: armed for `at`
    /// (`None`: disarmed).
    #[inline(never)]
    fn rearm_egress_timer(&mut self, at: Option<SmolInstant>, waker: &Waker) {
        // SAFETY: the state lives inside `StackInner`, written once into `'static`
        // `StackResources` memory and never moved afterwards, so the timer is pinned.
        let mut timer = unsafe { Pin::new_unchecked(&mut self.egress_timer) };
        match at {
            Some(at) => {
                timer.as_mut().reset(from_smol(at));
                self.egress_deadline = Some(at);
                if timer.poll(&mut Context::from_waker(waker)).is_ready() {
                    // Already due: egress goes round again.
                    self.egress_deadline = None;
                    wake(self.local.as_ref(), waker);
                }
            }
            None => {
                if self.egress_deadline.take().is_some() {
                    // Unlink the timer: with no deadline egress waits for a signal only.
                    timer.reset(Instant::MAX);
                }
            }
        }
    }
}
