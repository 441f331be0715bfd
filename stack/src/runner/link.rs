//! The link task: waits for the driver to report a carrier change (see
//! [`link::carrier`](crate::link::carrier)) and applies it to the stack.

use core::future::poll_fn;
use core::task::{Context, Poll};

use zcnet_buffer::LinkState;

use crate::link::carrier::LINK_DOWN_RECHECK;
use crate::stack::{Stack, State};
use crate::stats::Counters;

/// The link task: until the stack shuts down, waits for the driver to report a change and
/// applies it.
pub(crate) async fn watch(stack: Stack) {
    loop {
        if stack.is_shut_down() {
            return;
        }
        // After a recheck period the driver is asked even if it woke nobody.
        let mut ask = stack.link_state() == LinkState::Down;
        let change = poll_fn(|cx| step(stack, cx, core::mem::take(&mut ask)));
        if stack.link_state() == LinkState::Down {
            // Ends early on a change; otherwise the loop asks again after the recheck period.
            let _ = stack.executor().timeout(LINK_DOWN_RECHECK, change).await;
        } else {
            change.await;
        }
    }
}

/// Asks the driver for its link state if it signalled a change (or `ask`); applies a change and
/// returns ready, or returns pending when nothing changed.
fn step(stack: Stack, cx: &mut Context<'_>, ask: bool) -> Poll<()> {
    let inner: &'static crate::StackInner = stack.inner;
    let signal = &inner.link_signal;
    if !signal.take_change(cx.waker()) && !ask {
        return Poll::Pending;
    }
    let waker = signal.waker();
    let counters = &inner.counters;
    stack.with(|st| {
        if st.shut_down {
            // The driver was handed back: `watch` ends.
            return Poll::Ready(());
        }
        let seen = st
            .link
            .driver
            .poll_link_state(&mut Context::from_waker(&waker));
        if seen == st.link.carrier.state {
            return Poll::Pending;
        }
        apply(st, seen, counters);
        Poll::Ready(())
    })
}

fn apply(st: &mut State, state: LinkState, counters: &Counters) {
    event!(link_changed(state));
    st.link.carrier.state = state;
    match state {
        LinkState::Down => counters.link_down(),
        LinkState::Up => crate::ip::autoconf::restart_dhcp(st),
    }
    // Either way egress has something to decide: stop, or send what waited.
    st.signal_egress();
    st.link.carrier.wake_waiters();
}
