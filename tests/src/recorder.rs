//! A [`Driver`] wrapper that records where every frame it moves lives in memory, so a test can
//! prove zero copy: the bytes an application sees are inside the very slot the driver filled,
//! and the bytes it wrote are the memory the driver handed to the device.
//!
//! [`recorded_pair`] builds two stacks over the in-memory [`wire`](crate::wire), like
//! [`net::pair_with`](crate::net::pair_with), with each end wrapped in a [`Recording`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use zcnet_buffer::{
    Capabilities, Driver, FramePool, HardwareAddress, LinkState, PoolConfig, RxFrame, TxError,
    TxFrame,
};
use zcnet_executor::Executor;
use zcnet_stack::{Config, Stack, StackResources};

use crate::net::{side_config, Pair, SOCKETS};
use crate::wire::{wire_pair, Faults, WireEnd, WireHandle};

/// Records kept per direction; older ones are forgotten.
pub const RECORDS: usize = 4096;

/// Where one frame's bytes were when the driver handed them over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRecord {
    /// The pool slot.
    pub slot: usize,
    /// Address of the frame's first byte.
    pub addr: usize,
    /// Length of the frame.
    pub len: usize,
}

impl FrameRecord {
    /// Whether `[ptr, ptr + len)` lies inside this frame's bytes.
    pub fn contains(&self, ptr: *const u8, len: usize) -> bool {
        let p = ptr as usize;
        p >= self.addr && p + len <= self.addr + self.len
    }
}

#[derive(Debug, Default)]
struct Log {
    rx: VecDeque<FrameRecord>,
    tx: VecDeque<(FrameRecord, Vec<u8>)>,
}

/// Read access to a [`Recording`]'s records (shared with the driver, which a stack owns).
#[derive(Clone, Debug, Default)]
pub struct Recorder(Arc<Mutex<Log>>);

impl Recorder {
    /// The received frame (as the driver returned it) whose bytes contain `[ptr, ptr + len)`.
    pub fn rx_containing(&self, ptr: *const u8, len: usize) -> Option<FrameRecord> {
        let log = self.0.lock().unwrap();
        log.rx.iter().rev().find(|r| r.contains(ptr, len)).copied()
    }

    /// The transmitted frame (as handed to the device) whose bytes contain `[ptr, ptr + len)`,
    /// with a copy of its bytes taken at transmit time.
    pub fn tx_containing(&self, ptr: *const u8, len: usize) -> Option<(FrameRecord, Vec<u8>)> {
        let log = self.0.lock().unwrap();
        log.tx
            .iter()
            .rev()
            .find(|(r, _)| r.contains(ptr, len))
            .cloned()
    }

    /// Copies of the transmitted frames' bytes, oldest first.
    pub fn tx_frames(&self) -> Vec<Vec<u8>> {
        let log = self.0.lock().unwrap();
        log.tx.iter().map(|(_, b)| b.clone()).collect()
    }

    /// Forgets everything recorded so far.
    pub fn clear(&self) {
        let mut log = self.0.lock().unwrap();
        log.rx.clear();
        log.tx.clear();
    }
}

/// A driver that forwards to `inner` and records every frame's slot and address.
#[derive(Debug)]
pub struct Recording<D> {
    inner: D,
    log: Recorder,
}

impl<D> Recording<D> {
    /// Wraps `inner`; read the records through the returned [`Recorder`].
    pub fn new(inner: D) -> (Self, Recorder) {
        let log = Recorder::default();
        (
            Self {
                inner,
                log: log.clone(),
            },
            log,
        )
    }
}

impl<D: Driver> Driver for Recording<D> {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        let r = self.inner.poll_receive(cx);
        if let Poll::Ready(f) = &r {
            let mut log = self.log.0.lock().unwrap();
            if log.rx.len() == RECORDS {
                log.rx.pop_front();
            }
            log.rx.push_back(FrameRecord {
                slot: f.slot_index(),
                addr: f.as_ptr() as usize,
                len: f.len(),
            });
        }
        r
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.inner.poll_transmit_frame(cx)
    }

    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_transmit_ready(cx)
    }

    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        {
            let mut log = self.log.0.lock().unwrap();
            if log.tx.len() == RECORDS {
                log.tx.pop_front();
            }
            let rec = FrameRecord {
                slot: frame.slot_index(),
                addr: frame.as_ptr() as usize,
                len: frame.len(),
            };
            log.tx.push_back((rec, frame.to_vec()));
        }
        self.inner.transmit(frame)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn hardware_address(&self) -> HardwareAddress {
        self.inner.hardware_address()
    }

    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        self.inner.poll_link_state(cx)
    }
}

/// Two stacks over a wire with `faults`, pools of `slots` slots, each end wrapped in a
/// [`Recording`]; `configure(i, &mut config)` adjusts stack `i`'s configuration (static
/// [`ADDR`](crate::net::ADDR)`[i]`/24 to start with). Runners are spawned on `exec`.
pub fn recorded_pair(
    exec: &'static Executor,
    faults: Faults,
    slots: usize,
    mut configure: impl FnMut(usize, &mut Config),
) -> (Pair, [Recorder; 2]) {
    let pools = [
        FramePool::leak(PoolConfig::new(slots)).expect("pool"),
        FramePool::leak(PoolConfig::new(slots)).expect("pool"),
    ];
    let (a, b) = wire_pair(exec, pools, faults);
    let handles: [&'static WireHandle; 2] = [
        Box::leak(Box::new(a.handle())),
        Box::leak(Box::new(b.handle())),
    ];
    let mut stacks = Vec::new();
    let mut recorders = Vec::new();
    for (i, end) in [a, b].into_iter().enumerate() {
        let (driver, rec) = Recording::<WireEnd>::new(end);
        let driver: &'static mut Recording<WireEnd> = Box::leak(Box::new(driver));
        let resources: &'static StackResources<SOCKETS> = StackResources::leak();
        let mut config = side_config(i, 0x5678 + i as u64);
        configure(i, &mut config);
        let (stack, runner) = Stack::new(exec, pools[i], driver, config, resources).expect("stack");
        runner.spawn(exec.spawner());
        stacks.push(stack);
        recorders.push(rec);
    }
    let recorders: [Recorder; 2] = [recorders[0].clone(), recorders[1].clone()];
    (
        Pair {
            exec,
            stacks: [stacks[0], stacks[1]],
            ends: handles,
            pools,
        },
        recorders,
    )
}
