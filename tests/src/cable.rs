//! Two stacks over the in-memory wire with a "cable" a test can pull: while it is out the
//! drivers refuse to transmit (`TxError::LinkDown`), deliver nothing and report the link down,
//! as a NIC without carrier does, and wake the stacks' link tasks on every change.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use zcnet_buffer::{
    Capabilities, Driver, FramePool, HardwareAddress, LinkState, PoolConfig, RxFrame, TxError,
    TxFrame, WakerCell,
};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::Executor;
use zcnet_stack::{Stack, StackResources};

use crate::net::side_config;
use crate::wire::{wire_pair, Faults, WireEnd};

/// The cable between the two ends: plugged in or not, and each end's link waker.
#[derive(Debug)]
pub struct Cable {
    /// Plugged in. Storing to it directly changes the link without waking anybody (a driver
    /// that notices changes only when asked, as a TAP does).
    pub plugged: AtomicBool,
    /// Each end's link waker (registered by `poll_link_state`).
    pub wakers: [WakerCell; 2],
    /// `poll_link_state` calls per end: the stack must ask only when told to.
    pub link_polls: [AtomicUsize; 2],
}

impl Cable {
    /// Plugs the cable in (`true`) or pulls it (`false`), and wakes both ends' link tasks.
    pub fn set(&self, plugged: bool) {
        self.plugged.store(plugged, Ordering::SeqCst);
        for w in &self.wakers {
            w.wake();
        }
    }

    /// Whether the cable is plugged in.
    pub fn up(&self) -> bool {
        self.plugged.load(Ordering::SeqCst)
    }
}

/// A wire end behind the cable.
#[derive(Debug)]
pub struct Plugged {
    end: WireEnd,
    cable: &'static Cable,
    side: usize,
}

impl Driver for Plugged {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        loop {
            match self.end.poll_receive(cx) {
                // No carrier: what was on the wire is lost (its slot returns to the pool).
                Poll::Ready(frame) if !self.cable.up() => drop(frame),
                other => return other,
            }
        }
    }
    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.end.poll_transmit_frame(cx)
    }
    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        if !self.cable.up() {
            return Err(TxError::LinkDown);
        }
        self.end.transmit(frame)
    }
    fn capabilities(&self) -> Capabilities {
        self.end.capabilities()
    }
    fn hardware_address(&self) -> HardwareAddress {
        self.end.hardware_address()
    }
    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        self.cable.link_polls[self.side].fetch_add(1, Ordering::SeqCst);
        self.cable.wakers[self.side].register(cx.waker());
        if self.cable.up() {
            LinkState::Up
        } else {
            LinkState::Down
        }
    }
}

/// Two stacks (static 10.0.0.1/24 and 10.0.0.2/24, 16 socket slots each, pools of 256 slots)
/// over the wire behind one [`Cable`], plugged in, on a new executor with the Linux platform;
/// their runners are spawned.
#[derive(Debug)]
pub struct CablePair {
    /// The executor both stacks (and the test's tasks) run on.
    pub exec: &'static Executor,
    /// Stack A (10.0.0.1) and stack B (10.0.0.2).
    pub stacks: [Stack; 2],
    /// The cable.
    pub cable: &'static Cable,
    /// The pools.
    pub pools: [&'static FramePool; 2],
}

/// Builds a [`CablePair`].
pub fn cable_pair() -> CablePair {
    let exec = Executor::leak(LinuxPlatform::leak().expect("epoll"));
    let pools = [
        FramePool::leak(PoolConfig::new(256)).expect("pool"),
        FramePool::leak(PoolConfig::new(256)).expect("pool"),
    ];
    let cable: &'static Cable = Box::leak(Box::new(Cable {
        plugged: AtomicBool::new(true),
        wakers: [WakerCell::new(), WakerCell::new()],
        link_polls: [AtomicUsize::new(0), AtomicUsize::new(0)],
    }));
    let (a, b) = wire_pair(exec, pools, Faults::default());
    let mut stacks = Vec::new();
    for (side, end) in [a, b].into_iter().enumerate() {
        let driver: &'static mut Plugged = Box::leak(Box::new(Plugged { end, cable, side }));
        let resources: &'static StackResources<16> = StackResources::leak();
        let config = side_config(side, 0x4c1 + side as u64);
        let (stack, runner) =
            Stack::new(exec, pools[side], driver, config, resources).expect("stack");
        runner.spawn(exec.local_spawner());
        stacks.push(stack);
    }
    CablePair {
        exec,
        stacks: [stacks[0], stacks[1]],
        cable,
        pools,
    }
}
