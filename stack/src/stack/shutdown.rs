//! [`Stack::shutdown`]: stops a stack for good and gives its driver and its pool slots back.
//!
//! What shutdown does, in one step with the stack's state borrowed:
//!
//! * **Driver**: taken out of the state and returned; a detached placeholder takes its place
//!   (`link/driver.rs`). The RX slots the driver had posted and the frames it is still
//!   transmitting are the driver's: they go back to the pool when the caller drops the driver.
//! * **Frames the stack holds** go back to the pool: its scratch and spare TX frames, a received
//!   frame waiting for a TX frame, frames held for neighbour resolution, datagrams queued on
//!   zero-copy sockets, and every TCP connection's received and retransmission queues.
//! * **TCP**: every connection is closed without a segment sent (the peer finds out by its own
//!   timeouts, as after a cable pull); its operations then fail with [`TcpError::ShutDown`]. A
//!   dropped connection still closing is removed.
//! * **Tasks**: ingress, egress and the link task are woken and end; `Runner::run` returns. The
//!   egress timer leaves the timer wheel.
//! * **Waiters**: [`Stack::wait_shut_down`] completes; TCP operations fail; opening any socket
//!   fails with [`StackError::ShutDown`]; zero-copy sends fail with
//!   [`DatagramError::ShutDown`], held ones included. Receives on datagram sockets (UDP, ICMP,
//!   raw IP, zero-copy), a zero-copy socket's wait for a TX frame, and DNS queries are not
//!   failed: nothing arrives any more, as on a silent link (DNS queries and pings end by their
//!   timeouts); race them against `wait_shut_down`.
//!
//! The [`StackResources`](crate::StackResources) stay claimed: `Stack` handles are `Copy` and
//! may still be used (they find a stack that does nothing), so the memory cannot be handed to
//! another stack. A new stack over the same pool and driver takes new resources.
//!
//! [`TcpError::ShutDown`]: crate::tcp::TcpError::ShutDown
//! [`DatagramError::ShutDown`]: crate::datagram::DatagramError::ShutDown

use core::future::poll_fn;
use core::task::Poll;

use crate::link::driver::StackDriver;
use crate::stack::{Stack, State};
use crate::StackError;

/// How many tasks can wait in [`Stack::wait_shut_down`] at once without waking each other early
/// (more may wait; see the wait list's rules in `waiters.rs`).
pub const MAX_SHUTDOWN_WAITERS: usize = 4;

impl Stack {
    /// Shuts the stack down for good and returns its driver (see the module docs of what
    /// happens to sockets and frames). Drop the returned driver to close the device and
    /// return the slots it holds to the pool (a boxed driver; a `&'static mut` one stays the
    /// caller's to reuse).
    ///
    /// Errors with [`StackError::ShutDown`] when the stack was shut down already. Call it from
    /// the stack's own context (a `Stack` never leaves it), never from an interrupt handler.
    pub fn shutdown(&self) -> Result<StackDriver, StackError> {
        let driver = self.with(teardown)?;
        // The link task sleeps on the driver's link signal, which the driver no longer has.
        self.inner.link_signal.wake_for_shutdown();
        Ok(driver)
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        self.with(|st| st.shut_down)
    }

    /// Waits until the stack is shut down (at once if it is). For tasks that must end with the
    /// stack, e.g. one waiting for a datagram: race the receive against this.
    pub async fn wait_shut_down(&self) {
        poll_fn(|cx| {
            self.with(|st| {
                if st.shut_down {
                    Poll::Ready(())
                } else {
                    st.shutdown_waiters.register(cx.waker());
                    Poll::Pending
                }
            })
        })
        .await
    }
}

/// Shutdown's step with the state borrowed (see the module docs).
fn teardown(st: &mut State) -> Result<StackDriver, StackError> {
    if st.shut_down {
        return Err(StackError::ShutDown);
    }
    st.shut_down = true;
    let placeholder = StackDriver::detached(
        st.link.driver.capabilities(),
        st.link.driver.hardware_address(),
    );
    let driver = core::mem::replace(&mut st.link.driver, placeholder);
    // Frames the stack itself holds.
    st.link.scratch = None;
    st.link.spare_tx = None;
    st.link.gso_held.clear();
    st.tasks.pending_rx = None;
    st.tasks.pending_rx_chain = None;
    st.link.neighbors.shut_down();
    st.zc.shut_down();
    // TCP: orphans go, the rest close with the cause their operations report.
    let removed = st.tcp.shut_down();
    st.socket_count -= removed;
    // Tasks: the timers leave the wheel, then ingress and egress run once more and end.
    st.tasks.arm_egress_timer(
        smoltcp::time::Instant::ZERO,
        None,
        core::task::Waker::noop(),
    );
    st.tasks.disarm_ingress_timer();
    if let Some(w) = st.tasks.egress_waker.take() {
        w.wake();
    }
    if let Some(w) = st.tasks.ingress_waker.take() {
        w.wake();
    }
    if let Some(w) = st.tasks.ingress_waiting_tx.take() {
        w.wake();
    }
    // Everyone waiting on the stack's state re-checks it.
    // The link is down for good: `wait_link(Down)` completes, `wait_link(Up)` never does.
    st.link.carrier.state = zcnet_buffer::LinkState::Down;
    st.link.carrier.wake_waiters();
    st.listener_ports.wake_slot_waiters();
    st.shutdown_waiters.wake_all();
    // The frames the stack held are back: the owner cache goes to the shared free list (the
    // stack's thread frees nothing into it any more).
    st.tasks.pool_owner = None;
    Ok(driver)
}
