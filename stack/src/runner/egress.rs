//! The egress task's run: what the TCP connections, the neighbour table and smoltcp have due
//! goes out, then egress's timer is armed for the next deadline.

use core::task::{Context, Poll};

use smoltcp::iface::PollResult;
use smoltcp::time::Duration as SmolDuration;

use crate::stack::Stack;

/// One egress run (`Ready` once the stack is shut down); ends by arming egress's timer for the next deadline (or disarming it).
pub(super) fn step(stack: Stack, cx: &mut Context<'_>) -> Poll<()> {
    let counters = &stack.inner.counters;
    let now = stack.now();
    let mut guard = stack.inner.state.borrow_mut();
    if guard.shut_down {
        return Poll::Ready(());
    }
    counters.egress_poll();
    let st: &mut crate::stack::State = &mut guard;
    match &st.tasks.egress_waker {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => {
            st.tasks.egress_waker = Some(cx.waker().clone());
            // The timer must be registered with the new waker, even for the same deadline.
            st.tasks.egress_deadline = None;
            // And so must the wake of a TCP segment dropped elsewhere.
            st.tcp.release_signal.register(cx.waker());
        }
    }
    // TCP segments the application let go of (on any thread): back to their connections'
    // budgets; a window update that is now due goes out in this run.
    if st.tcp.release_signal.take_pending(cx.waker()) {
        st.tcp.fold_releases();
    }
    if let Some(w) = st.tasks.ingress_waiting_tx.take() {
        // Ingress holds a frame it could not answer for want of a TX frame, and egress owns the
        // driver's TX waiter: a TX completion (or other work) woke us, so let ingress retry.
        w.wake();
    }
    if !st.link.carrier.is_up() {
        // Nothing goes out while the link is down: sockets keep their data, and the link task
        // wakes egress when the link is back (`runner/link.rs`). No timer meanwhile.
        counters.idle_poll();
        st.tasks.arm_egress_timer(now, None, cx.waker());
        return Poll::Pending;
    }
    crate::ip::autoconf::before_egress(st, now);
    let before = counters.frames_out();
    // Zero-copy sockets waiting for a TX frame (the driver's TX waiter is ours), then what
    // the TCP connections have due, then due ARP requests / neighbour solicitations (those
    // TCP segments just asked for included) and neighbour timeouts.
    st.zc.wake_tx_waiters();
    let tcp = crate::transport::tcp::output::egress(st, now, cx.waker(), counters);
    let mut starved = tcp.starved;
    if !starved {
        starved = crate::link::neighbor::egress(st, now, cx.waker(), counters);
    }
    // smoltcp emits at most one packet per socket per pass. After the first pass that
    // emitted, ask `poll_at` (needed below anyway) whether anything is due now rather than
    // making a final pass over every socket only to find nothing: a request/response exchange
    // sends one segment per run. When more is due (a bulk sender with window to fill), pass
    // again until a pass finds nothing, without asking `poll_at` after each segment.
    // Nothing due in smoltcp (its kept `poll_at`, see `State::smoltcp_poll_at`, and SLAAC's
    // router solicitations, whose schedule smoltcp's `poll_at` does not always tell): no pass.
    let mut known_at = None;
    let mut asked = false;
    let smol_at = st.smoltcp_poll_at(now);
    let smol_due =
        crate::ip::autoconf::deadline(st, now, smol_at, false).is_some_and(|at| at <= now);
    while !starved && smol_due {
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
    crate::ip::autoconf::after_egress(st, now, starved, counters);
    let idle = counters.frames_out() == before;
    if idle {
        counters.idle_poll();
    }
    let next = if starved {
        // Woken by the driver's TX completion; no timer needed meanwhile.
        None
    } else {
        // Reuse the loop's `poll_at` unless autoconfiguration may just have changed addresses
        // (then it forgot the kept answer).
        let at = match known_at {
            Some(at) if !st.autoconf.active() => st.smoltcp_keep(at),
            _ => st.smoltcp_poll_at(now),
        };
        let at = crate::ip::autoconf::deadline(st, now, at, idle);
        let at = crate::stack::earliest(at, tcp.deadline);
        crate::stack::earliest(at, st.link.neighbors.deadline()).map(|at| {
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
    // Everything this run transmitted: one doorbell per queue (`Driver::flush`).
    st.link.driver.flush();
    st.tasks.arm_egress_timer(now, next, cx.waker());
    Poll::Pending
}
