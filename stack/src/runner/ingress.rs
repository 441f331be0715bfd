//! The ingress task's run: frames from the driver, each to the zero-copy datagram sockets,
//! zcnet's TCP or smoltcp, at most `ingress_budget` per run (a chain counts as its slots).

use core::ops::ControlFlow;
use core::task::{Context, Poll};

use smoltcp::time::Instant;
use zcnet_buffer::{RxChain, RxFrame, RxPacket};

use crate::stack::{Stack, State};
use crate::stats::Counters;
use crate::stats::DropReason;
use crate::transport::tcp::gro::Gro;

/// One ingress run; `Ready` once the stack is shut down. `gro` holds in-order TCP segments of
/// one connection back to be taken in one pass (`transport/tcp/gro.rs`); it is flushed before
/// any frame goes to smoltcp and at the end of the run.
pub(super) fn step(stack: Stack, cx: &mut Context<'_>, gro: &mut Gro) -> Poll<()> {
    let counters = &stack.inner.counters;
    let now = stack.now();
    let mut st = stack.inner.state.borrow_mut();
    if st.shut_down {
        return Poll::Ready(());
    }
    match &st.tasks.ingress_waker {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => st.tasks.ingress_waker = Some(cx.waker().clone()),
    }
    counters.ingress_poll();
    // The pool's owner cache: bound on this thread at the first run, then served (a load
    // while no other context asks for the cached slots).
    match &st.tasks.pool_owner {
        Some(owner) => owner.service(cx),
        None if !st.tasks.pool_owner_tried => {
            st.tasks.pool_owner_tried = true;
            st.tasks.pool_owner = stack.inner.pool.bind_owner(cx.waker());
        }
        None => {}
    }
    // TCP segments the application let go of: their connections' budgets take data again.
    let released = match &st.tasks.egress_waker {
        Some(w) => st.tcp.release_signal.take_pending(w),
        None => false,
    };
    if released && st.tcp.fold_releases() {
        st.signal_egress();
    }
    let budget = st.tasks.ingress_budget;
    let mut processed = 0;
    // The driver answered `Pending`: the run drained its receive queue.
    let mut drained = false;
    while processed < budget {
        let frame = match st.tasks.pending_rx.take() {
            Some(f) => f,
            // A chain kept from an earlier run (it waited for a TX frame). Tested before it is
            // taken: taking an `Option` of a chain moves all of it, even when it is `None`.
            None if st.link.rx_chains && st.tasks.pending_rx_chain.is_some() => {
                if let Some(chain) = st.tasks.pending_rx_chain.take() {
                    let slots = chain_cost(&chain);
                    if chain_step(&mut st, chain, now, cx, counters, gro).is_break() {
                        break;
                    }
                    processed += slots;
                }
                continue;
            }
            // An ordinary packet comes up as its frame (no chain built or moved for it), a
            // packet over several slots as a chain.
            None if st.link.rx_chains => match st.link.driver.poll_receive_packet(cx) {
                Poll::Ready(RxPacket::Frame(frame)) => {
                    counters.frame_in();
                    frame
                }
                Poll::Ready(RxPacket::Chain(mut chain)) => {
                    counters.frame_in();
                    match one_frame(&mut chain) {
                        Some(frame) => frame,
                        None => {
                            let slots = chain_cost(&chain);
                            if chain_step(&mut st, chain, now, cx, counters, gro).is_break() {
                                break;
                            }
                            processed += slots;
                            continue;
                        }
                    }
                }
                Poll::Pending => {
                    drained = true;
                    break;
                }
            },
            None => match st.link.driver.poll_receive(cx) {
                Poll::Ready(f) => {
                    counters.frame_in();
                    f
                }
                Poll::Pending => {
                    drained = true;
                    break;
                }
            },
        };
        // Datagrams for zero-copy sockets stop here (moved into the socket's queue, or dropped
        // and counted); ARP and NDP are snooped for the zero-copy send path.
        let Some(frame) = crate::socket::datagram::ingress(&mut st, frame, now, counters) else {
            processed += 1;
            continue;
        };
        // TCP segments for us go to zcnet's TCP; what smoltcp will drop is counted
        // (`ip/check.rs`); wrong checksums, which smoltcp leaves to ingress, drop here.
        let doomed = match crate::ip::check::check(&st, &frame, frame.checksum_verified()) {
            crate::ip::check::Verdict::Pass => None,
            crate::ip::check::Verdict::Tcp(seg) => {
                match crate::transport::tcp::input::ingress(
                    &mut st,
                    frame,
                    seg,
                    now,
                    cx.waker(),
                    counters,
                    gro,
                ) {
                    None => {
                        processed += 1;
                        continue;
                    }
                    Some(unprocessed) => {
                        // No TX frame for a possible answer: keep the segment until egress
                        // ran, as below.
                        st.tasks.pending_rx = Some(unprocessed);
                        if st.tasks.egress_waker.is_some() {
                            st.tasks.ingress_waiting_tx = Some(cx.waker().clone());
                        }
                        break;
                    }
                }
            }
            crate::ip::check::Verdict::Doomed(reason) => Some(reason),
            crate::ip::check::Verdict::DnsAnswer { src, dst } => {
                if !crate::socket::dns::answer_expected(&st, src, dst) {
                    counters.drop(DropReason::UnexpectedAnswer);
                    processed += 1;
                    continue; // a forged or stray answer: its slot returns to the pool
                }
                None
            }
            crate::ip::check::Verdict::TooBig(msg) => {
                // Path MTU discovery: consumed by zcnet's TCP, counted there (after the held
                // batch, which may be the same connection's).
                gro.flush(&mut st, now, cx.waker(), counters);
                crate::transport::tcp::icmp_error::handle(&mut st, msg, now, counters);
                processed += 1;
                continue;
            }
            crate::ip::check::Verdict::Echo(req) => {
                // The reply may take the TX frame a held batch reserved for its answer.
                gro.flush(&mut st, now, cx.waker(), counters);
                if crate::ip::echo::answer(&mut st, &frame, req, now, cx.waker(), counters).is_err()
                {
                    // No TX frame for the reply: keep the request until egress ran, as below.
                    st.tasks.pending_rx = Some(frame);
                    if st.tasks.egress_waker.is_some() {
                        st.tasks.ingress_waiting_tx = Some(cx.waker().clone());
                    }
                    break;
                }
                processed += 1;
                continue; // the request's slot returns to the pool
            }
            crate::ip::check::Verdict::Drop(reason) => {
                counters.drop(reason);
                processed += 1;
                continue; // the frame drops here: its slot returns to the pool
            }
        };
        // smoltcp may take the TX frame a held batch reserved for its answer.
        gro.flush(&mut st, now, cx.waker(), counters);
        let (mut dev, iface, sockets) = st.step(cx.waker(), Some(frame), counters);
        let _ = iface.poll_ingress_single(now, &mut dev, sockets);
        // Counted once smoltcp has handled the frame (not when it is kept for a retry).
        let dropped = doomed.or(dev.refused.then_some(DropReason::NoSocket));
        if let Some(unprocessed) = dev.rx.take() {
            // No TX frame for a possible reply: keep the frame. The driver's TX waiter is
            // egress's waker (registered by the attempt); egress wakes us when it runs.
            st.tasks.pending_rx = Some(unprocessed);
            // (Before egress first runs, the attempt registered our own waker instead.)
            if st.tasks.egress_waker.is_some() {
                st.tasks.ingress_waiting_tx = Some(cx.waker().clone());
            }
            break;
        }
        if let Some(reason) = dropped {
            counters.drop(reason);
        }
        processed += 1;
    }
    // Asked at once, so that an interrupt request the driver takes back stands as briefly as
    // possible (`Driver::receive_deferral`): after a bulk stretch the driver is polled again
    // from ingress's timer instead of interrupting at the sender's next burst.
    if drained {
        if let Some(delay) = st.link.driver.receive_deferral() {
            let at = stack.inner.exec.now().saturating_add(delay);
            st.tasks.arm_ingress_timer(at, cx.waker());
        }
    }
    gro.end_run(&mut st, now, cx.waker(), counters);
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
        crate::ip::autoconf::after_ingress(&mut st, now, counters);
        st.signal_egress_if_due(now);
    }
    if processed >= budget {
        // More may be waiting: yield to other tasks, then continue. Queued after egress (just
        // signalled if an answer is due), so the answer goes out before the next read.
        crate::stack::wake(st.tasks.local.as_ref(), cx.waker());
    }
    // Refills posted and answers sent in this run: one doorbell per queue (`Driver::flush`).
    st.link.driver.flush();
    Poll::Pending
}

/// What a chain counts against the run's budget: its slots (at least one). A super-segment
/// (a TAP read of a 64 KiB GSO packet: 33 slots of 2 KiB) then ends the run as a budget's
/// worth of single frames would, so the tasks it woke (the reader, and egress with the ACK
/// that carries the window the read reopened) run before the driver is read again: the ACK
/// goes out before a read that would find the queue empty, and a sender that transmits in
/// answer to it (a Linux peer over a TAP, in the writer's context) has the next packet queued
/// by the time ingress reads.
fn chain_cost(chain: &RxChain) -> usize {
    chain.frame_count().max(1)
}

/// The frame of a chain of one frame (the usual packet: it goes the single frame's way), taken
/// out of it; `None` (the chain left as it is) for any other chain.
fn one_frame(chain: &mut RxChain) -> Option<RxFrame> {
    if chain.frame_count() == 1 {
        chain.pop_front()
    } else {
        None
    }
}

/// A packet over several slots (or none): checked once (`ip/chain.rs`) and given to TCP whole
/// (`transport/tcp/chain.rs`), or dropped and counted. `Break` when it waits for a TX frame
/// (kept, as a single frame is, until egress has run).
#[inline(never)]
fn chain_step(
    st: &mut State,
    chain: RxChain,
    now: Instant,
    cx: &mut Context<'_>,
    counters: &Counters,
    gro: &mut Gro,
) -> ControlFlow<()> {
    let seg = match crate::ip::chain::check_chain(st, &chain) {
        Ok(seg) => seg,
        Err(reason) => {
            counters.drop(reason);
            return ControlFlow::Continue(());
        }
    };
    match crate::transport::tcp::chain::ingress(st, chain, seg, now, cx.waker(), counters, gro) {
        None => ControlFlow::Continue(()),
        Some(unprocessed) => {
            st.tasks.pending_rx_chain = Some(unprocessed);
            if st.tasks.egress_waker.is_some() {
                st.tasks.ingress_waiting_tx = Some(cx.waker().clone());
            }
            ControlFlow::Break(())
        }
    }
}
