//! The link state: what the driver says of its carrier, and what the stack does about it.
//!
//! * **Watching**: the [`Runner`](crate::Runner)'s link task asks the driver
//!   ([`Driver::poll_link_state`](zcnet_buffer::Driver::poll_link_state)) when the driver wakes
//!   it (a virtio configuration interrupt, a TAP write that found the link down), never
//!   periodically while the link is up. While the link is down it asks again every
//!   [`LINK_DOWN_RECHECK`], because some drivers (TAP) notice a link coming back only when
//!   asked.
//! * **Down**: egress stops transmitting. What the sockets want to send stays queued in them
//!   (TCP data, DHCP, ICMP and UDP sends up to their buffers' size) and goes out when the link
//!   returns; a zero-copy datagram sent meanwhile is refused at once with
//!   [`TxError::LinkDown`](zcnet_buffer::TxError::LinkDown), and a frame the driver refuses for
//!   that reason is counted as [`DropReason::LinkDown`](crate::DropReason::LinkDown). Frames
//!   still arrive and are processed.
//! * **Up again**: the DHCPv4 client starts over (`ip/autoconf.rs`), egress runs at once.
//! * **Seen by the application**: [`Stack::link_state`], [`Stack::wait_link`],
//!   [`StackStats::link_downs`](crate::StackStats::link_downs).
//!
//! Until the link task first runs, and with a driver that always reports up, the link is up.

use core::future::poll_fn;
use core::sync::atomic::{AtomicBool, Ordering};
use core::task::{Poll, RawWaker, RawWakerVTable, Waker};

use core::time::Duration;
use zcnet_buffer::{LinkState, WakerCell};

use crate::stack::Stack;
use crate::waiters::WaitList;

/// How often the link task asks the driver again while the link is down.
pub const LINK_DOWN_RECHECK: Duration = Duration::from_secs(1);

/// How many tasks can wait in [`Stack::wait_link`] at once without waking each other early.
const MAX_LINK_WAITERS: usize = 4;

/// The link state the stack acts on, part of the stack's state.
pub(crate) struct Link {
    pub(crate) state: LinkState,
    waiters: WaitList<MAX_LINK_WAITERS>,
}

impl Link {
    /// Up, nobody waiting.
    pub(crate) const fn new() -> Self {
        Self {
            state: LinkState::Up,
            waiters: WaitList::new(),
        }
    }

    /// Whether egress may transmit.
    pub(crate) fn is_up(&self) -> bool {
        self.state == LinkState::Up
    }

    /// Wakes the tasks in [`Stack::wait_link`] to re-check the state.
    pub(crate) fn wake_waiters(&mut self) {
        self.waiters.wake_all();
    }
}

/// What the driver wakes when its link changes: it marks the change pending and wakes the link
/// task. The link task asks the driver only when a change is pending, so polling the task for
/// another reason ([`Runner::run`](crate::Runner::run) polls all tasks on every wake) costs one
/// atomic swap, not a driver query (a TAP's is four system calls).
///
/// Lives in [`StackInner`](crate::StackInner) (`'static`), which is what its waker points to.
pub(crate) struct LinkSignal {
    /// A change may be waiting in the driver. Starts set: the first run asks.
    pending: AtomicBool,
    /// The link task's own waker.
    task: WakerCell,
}

impl LinkSignal {
    pub(crate) const fn new() -> Self {
        Self {
            pending: AtomicBool::new(true),
            task: WakerCell::new(),
        }
    }

    /// Registers `waker` as the link task's, then takes the pending mark: `true` when the
    /// driver signalled a change since the last call. Registering first means a wake that
    /// lands after the mark is read still reaches the task.
    pub(crate) fn take_change(&self, waker: &Waker) -> bool {
        self.task.register(waker);
        self.pending.swap(false, Ordering::Acquire)
    }

    /// Wakes the link task so that it sees the stack shut down and ends.
    pub(crate) fn wake_for_shutdown(&self) {
        self.pending.store(true, Ordering::Release);
        self.task.wake();
    }

    /// The waker the driver is given: waking it sets `pending` and wakes the link task.
    pub(crate) fn waker(&'static self) -> Waker {
        let data = (self as *const LinkSignal).cast::<()>();
        // SAFETY: `data` points to a `'static` `LinkSignal`, which is all `SIGNAL_VTABLE`'s
        // functions assume; they never free it, so clones and drops need no bookkeeping.
        unsafe { Waker::from_raw(RawWaker::new(data, &SIGNAL_VTABLE)) }
    }
}

static SIGNAL_VTABLE: RawWakerVTable =
    RawWakerVTable::new(signal_clone, signal_wake, signal_wake, signal_drop);

/// # Safety
/// `data` points to a `'static` [`LinkSignal`] (only [`LinkSignal::waker`] makes these wakers).
unsafe fn signal_clone(data: *const ()) -> RawWaker {
    RawWaker::new(data, &SIGNAL_VTABLE)
}

/// # Safety
/// As [`signal_clone`].
unsafe fn signal_wake(data: *const ()) {
    // SAFETY: by this function's precondition `data` is a `&'static LinkSignal`.
    let signal = unsafe { &*data.cast::<LinkSignal>() };
    signal.pending.store(true, Ordering::Release);
    signal.task.wake();
}

/// # Safety
/// As [`signal_clone`] (nothing to free: the signal is `'static`).
unsafe fn signal_drop(_data: *const ()) {}

impl Stack {
    /// The link state the stack last saw from its driver. While it is
    /// [`Down`](LinkState::Down) the stack transmits nothing: sockets keep what they would send
    /// until the link is back.
    pub fn link_state(&self) -> LinkState {
        self.with(|st| st.link.carrier.state)
    }

    /// Waits until the link is in `state` (at once if it is).
    ///
    /// ```ignore
    /// stack.wait_link(LinkState::Down).await;
    /// log("link lost");
    /// stack.wait_link(LinkState::Up).await;
    /// ```
    pub async fn wait_link(&self, state: LinkState) {
        poll_fn(|cx| {
            self.with(|st| {
                if st.link.carrier.state == state {
                    Poll::Ready(())
                } else {
                    st.link.carrier.waiters.register(cx.waker());
                    Poll::Pending
                }
            })
        })
        .await
    }
}
