//! [`Runner`]: the stack's tasks — ingress and egress, which move every frame, and the link
//! watcher.
//!
//! * **ingress** runs when the driver has frames (its waker is registered by
//!   `Driver::poll_receive`), handles at most `ingress_budget` frames (TCP segments for the
//!   stack to zcnet's TCP, `tcp_io.rs`; the rest to smoltcp's `poll_ingress_single`), then
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
//!   [`LINK_DOWN_RECHECK`](crate::LINK_DOWN_RECHECK) while the link is down (`link.rs`). While
//!   down, egress transmits nothing.
//!
//! Neither ingress nor egress ever polls smoltcp's whole `poll()`.

use core::future::poll_fn;
use core::pin::pin;
use core::task::{Context, Poll};

use smoltcp::iface::PollResult;
use smoltcp::time::Duration as SmolDuration;

use crate::stack::Stack;
use crate::stats::DropReason;

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
        poll_fn(|cx| ingress_step(stack, cx)).await
    }

    /// The egress task. Ends when the stack is shut down.
    pub async fn egress(stack: Stack) {
        poll_fn(|cx| egress_step(stack, cx)).await
    }

    /// The link task: applies the driver's link changes (see [`Stack::link_state`]). It sleeps
    /// until the driver reports a change, so it costs nothing while the link is up and steady.
    /// Ends when the stack is shut down.
    pub async fn link(stack: Stack) {
        crate::link::watch(stack).await
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
        s.with(|st| st.local = Some(spawner));
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

use core::future::Future;

/// One ingress run; `Ready` once the stack is shut down.
fn ingress_step(stack: Stack, cx: &mut Context<'_>) -> Poll<()> {
    let counters = &stack.inner.counters;
    let now = stack.now();
    let mut st = stack.inner.state.borrow_mut();
    if st.shut_down {
        return Poll::Ready(());
    }
    match &st.ingress_waker {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => st.ingress_waker = Some(cx.waker().clone()),
    }
    counters.ingress_poll();
    // TCP segments the application let go of: their connections' budgets take data again.
    let released = match &st.egress_waker {
        Some(w) => st.tcp.release_signal.take_pending(w),
        None => false,
    };
    if released && st.tcp.fold_releases() {
        st.signal_egress();
    }
    let budget = st.ingress_budget;
    let mut processed = 0;
    while processed < budget {
        let frame = match st.pending_rx.take() {
            Some(f) => f,
            None => match st.driver.poll_receive(cx) {
                Poll::Ready(f) => {
                    counters.frame_in();
                    f
                }
                Poll::Pending => break,
            },
        };
        // Datagrams for zero-copy sockets stop here (moved into the socket's queue, or dropped
        // and counted); ARP and NDP are snooped for the zero-copy send path.
        let Some(frame) = crate::socket::datagram::ingress(&mut st, frame, now, counters) else {
            processed += 1;
            continue;
        };
        // TCP segments for us go to zcnet's TCP; what smoltcp will drop is counted
        // (`rx_check.rs`); wrong checksums, which smoltcp leaves to ingress, drop here.
        let doomed = match crate::rx_check::check(&st, &frame) {
            crate::rx_check::Verdict::Pass => None,
            crate::rx_check::Verdict::Tcp(seg) => {
                match crate::tcp_io::ingress(&mut st, frame, seg, now, cx.waker(), counters) {
                    None => {
                        processed += 1;
                        continue;
                    }
                    Some(unprocessed) => {
                        // No TX frame for a possible answer: keep the segment until egress
                        // ran, as below.
                        st.pending_rx = Some(unprocessed);
                        if st.egress_waker.is_some() {
                            st.ingress_waiting_tx = Some(cx.waker().clone());
                        }
                        break;
                    }
                }
            }
            crate::rx_check::Verdict::Doomed(reason) => Some(reason),
            crate::rx_check::Verdict::Drop(reason) => {
                counters.drop(reason);
                processed += 1;
                continue; // the frame drops here: its slot returns to the pool
            }
        };
        let (mut dev, iface, sockets) = st.step(cx.waker(), Some(frame), counters);
        let _ = iface.poll_ingress_single(now, &mut dev, sockets);
        // Counted once smoltcp has handled the frame (not when it is kept for a retry).
        let dropped = doomed.or(dev.refused.then_some(DropReason::NoSocket));
        if let Some(unprocessed) = dev.rx.take() {
            // No TX frame for a possible reply: keep the frame. The driver's TX waiter is
            // egress's waker (registered by the attempt); egress wakes us when it runs.
            st.pending_rx = Some(unprocessed);
            // (Before egress first runs, the attempt registered our own waker instead.)
            if st.egress_waker.is_some() {
                st.ingress_waiting_tx = Some(cx.waker().clone());
            }
            break;
        }
        if let Some(reason) = dropped {
            counters.drop(reason);
        }
        processed += 1;
    }
    if processed == budget {
        // More may be waiting: yield to other tasks, then continue.
        crate::stack::wake(st.local.as_ref(), cx.waker());
    }
    if processed == 0 {
        counters.idle_poll();
    } else {
        // A dropped connection may have just finished its close (the final ACK after our FIN,
        // or a reset). Egress reaps such orphans, but it runs only when something is due, and
        // nothing is after a connection closed: a listener waiting for a slot would wait for
        // unrelated traffic. So reap here while one waits (a new socket takes a finished
        // orphan's slot by itself, see `State::add_socket`; without waiters this costs nothing).
        if st.listener_ports.has_slot_waiters() {
            st.reap_orphans(now);
        }
        // A DHCP answer or a router advertisement may have arrived: apply it.
        crate::autoconf::after_ingress(&mut st, now, counters);
        st.signal_egress_if_due(now);
    }
    Poll::Pending
}

/// One egress run (`Ready` once the stack is shut down); ends by arming egress's timer for the next deadline (or disarming it).
fn egress_step(stack: Stack, cx: &mut Context<'_>) -> Poll<()> {
    let counters = &stack.inner.counters;
    let now = stack.now();
    let mut guard = stack.inner.state.borrow_mut();
    if guard.shut_down {
        return Poll::Ready(());
    }
    counters.egress_poll();
    let st: &mut crate::stack::State = &mut guard;
    match &st.egress_waker {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => {
            st.egress_waker = Some(cx.waker().clone());
            // The timer must be registered with the new waker, even for the same deadline.
            st.egress_deadline = None;
            // And so must the wake of a TCP segment dropped elsewhere.
            st.tcp.release_signal.register(cx.waker());
        }
    }
    // TCP segments the application let go of (on any thread): back to their connections'
    // budgets; a window update that is now due goes out in this run.
    if st.tcp.release_signal.take_pending(cx.waker()) {
        st.tcp.fold_releases();
    }
    if let Some(w) = st.ingress_waiting_tx.take() {
        // Ingress holds a frame it could not answer for want of a TX frame, and egress owns the
        // driver's TX waiter: a TX completion (or other work) woke us, so let ingress retry.
        w.wake();
    }
    if !st.link.is_up() {
        // Nothing goes out while the link is down: sockets keep their data, and the link task
        // wakes egress when the link is back (`link.rs`). No timer meanwhile.
        counters.idle_poll();
        st.arm_egress_timer(now, None, cx.waker());
        return Poll::Pending;
    }
    st.iface.poll_maintenance(now);
    let before = counters.frames_out();
    // Zero-copy sockets waiting for a TX frame (the driver's TX waiter is ours), then what
    // the TCP connections have due, then due ARP requests / neighbour solicitations (those
    // TCP segments just asked for included) and neighbour timeouts.
    st.zc.wake_tx_waiters();
    let tcp = crate::tcp_io::egress(st, now, cx.waker(), counters);
    let mut starved = tcp.starved;
    if !starved {
        starved = crate::neighbor::egress(st, now, cx.waker(), counters);
    }
    // smoltcp emits at most one packet per socket per pass. After the first pass that
    // emitted, ask `poll_at` (needed below anyway) whether anything is due now rather than
    // making a final pass over every socket only to find nothing: a request/response exchange
    // sends one segment per run. When more is due (a bulk sender with window to fill), pass
    // again until a pass finds nothing, without asking `poll_at` after each segment.
    let mut known_at = None;
    let mut asked = false;
    while !starved {
        let (mut dev, iface, sockets) = st.step(cx.waker(), None, counters);
        let r = iface.poll_egress(now, &mut dev, sockets);
        starved |= dev.starved;
        if starved || r == PollResult::None {
            break;
        }
        if !asked {
            asked = true;
            let at = iface.poll_at(now, sockets);
            if at.is_none_or(|at| at > now) {
                known_at = Some(at);
                break;
            }
        }
    }
    // A DHCP lease may have expired, a SLAAC prefix or route timed out: apply it.
    crate::autoconf::after_egress(st, now, starved, counters);
    let idle = counters.frames_out() == before;
    if idle {
        counters.idle_poll();
    }
    let next = if starved {
        // Woken by the driver's TX completion; no timer needed meanwhile.
        None
    } else {
        // Reuse the loop's `poll_at` unless autoconfiguration may just have changed addresses.
        let at = match known_at {
            Some(at) if !st.autoconf.active() => at,
            _ => st.iface.poll_at(now, &st.sockets),
        };
        let at = crate::autoconf::deadline(st, now, at, idle);
        let at = crate::stack::earliest(at, tcp.deadline);
        crate::stack::earliest(at, st.neighbors.deadline()).map(|at| {
            // A deadline already past (smoltcp waiting on something other than us, e.g. a
            // neighbour) would make egress spin: wait at least one millisecond.
            if at <= now {
                now + SmolDuration::from_millis(1)
            } else {
                at
            }
        })
    };
    st.reap_orphans(now);
    st.arm_egress_timer(now, next, cx.waker());
    Poll::Pending
}
