//! Timer benchmark: insert+cancel and insert+fire with 1k, 10k, 100k and 1M live timers, zcnet's
//! hierarchical timer wheel beside two timer queues implemented here, measured in the same run.
//!
//! ```text
//! cargo bench -p zcnet-benches --bench timers            # full run (BENCHMARKS.md)
//! cargo bench -p zcnet-benches --bench timers -- --quick # CI smoke run
//! ```
//!
//! For each N, every structure first gets N live "background" timers with seeded random
//! deadlines spread uniformly over the second hour from now (1 h to 2 h), so none of them fires
//! while the benchmark runs: the virtual clocks move by 1 ms per insert+fire operation and the
//! benchmark checks that they stay well below 1 h. Then, each reported as the median ns per
//! operation over several runs (interleaved run by run across the structures):
//!
//! * `insert+cancel`: one more timer with a random deadline 1 ms to 2 h ahead is inserted and
//!   cancelled at once. zcnet: `Executor::sleep_until`, one poll (links the entry into the wheel),
//!   drop (unlinks it).
//! * `insert+fire`: a timer due 1 ms ahead is inserted, the virtual clock is moved 1 ms forward
//!   and the due timers are fired. zcnet: the poll, `VirtualClock::advance`, then
//!   `Executor::run_until_idle()`, which also runs the executor's loop bookkeeping (run-queue
//!   checks, the due-timer check): the peers are bare data structures without it.
//!
//! The peers:
//!
//! * **unsorted list** (embassy-time's design): a `Vec<(deadline, id, waker)>`. Insert pushes;
//!   cancel finds the id by a forward scan and `swap_remove`s it (the timer just inserted is the
//!   last entry, so the scan visits all N; a random timer would take N/2 on average); firing is
//!   one linear scan that wakes and removes the due entries and computes the next deadline. Its
//!   operations are O(N), so at large N it does fewer operations per run (printed with the
//!   table): every operation is still measured, just fewer of them.
//! * **BinaryHeap**: `std::collections::BinaryHeap` of `(deadline, slot, generation)`, with the
//!   wakers in a slab indexed by slot. Insert takes a free slot and pushes (O(log N)); cancel
//!   bumps the slot's generation and frees it (O(1)), leaving a stale heap entry behind (lazy
//!   deletion); firing pops while the top is due, skipping stale entries. When stale entries
//!   outnumber live ones the heap is rebuilt without them (`retain`, O(N), amortised O(1) per
//!   cancel). Such a rebuild lands in one run only, so the median may not show it; the min–max
//!   spread does.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::hint::black_box;
use std::pin::{pin, Pin};
use std::task::{Context, Waker};
use std::time::Duration;

use zcnet_benches::{ns_per_op, time_ops, Mode, Rng, Sample, Table, VirtualClock};
use zcnet_executor::time::Sleep;
use zcnet_executor::{Executor, Instant, Platform};

const MS: u64 = 1_000_000;
const HOUR: u64 = 3_600_000 * MS;
/// Background deadlines lie in `BG_FROM..BG_FROM + HOUR`.
const BG_FROM: u64 = HOUR;
/// The flatness target: zcnet's cost at the largest N at most this times the smallest N's.
const FLATNESS_TARGET: f64 = 1.5;
/// Entries the unsorted list may visit per run and operation kind; it does
/// `min(ops, LIST_VISITS / N)` operations per run (at least `LIST_MIN_OPS`).
const LIST_VISITS: u64 = 200_000_000;
const LIST_MIN_OPS: u64 = 100;

/// A timer queue peer: deadlines in nanoseconds on the queue's own virtual clock.
trait TimerQueue {
    type Handle: Copy;
    fn insert(&mut self, deadline: u64, waker: Waker) -> Self::Handle;
    fn cancel(&mut self, handle: Self::Handle);
    /// Wakes (and removes) every timer due at `now`; returns how many fired.
    fn fire(&mut self, now: u64) -> usize;
    fn len(&self) -> usize;
}

/// embassy-time's design: an unsorted vector, linear scans.
struct UnsortedList {
    entries: Vec<ListEntry>,
    next_id: u64,
    /// The earliest deadline after the last `fire` (what an executor would set its alarm to).
    next_deadline: u64,
}

struct ListEntry {
    deadline: u64,
    id: u64,
    waker: Waker,
}

impl UnsortedList {
    fn new() -> Self {
        Self {
            entries: Vec::new(),
            next_id: 0,
            next_deadline: u64::MAX,
        }
    }
}

impl TimerQueue for UnsortedList {
    type Handle = u64;

    fn insert(&mut self, deadline: u64, waker: Waker) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push(ListEntry {
            deadline,
            id,
            waker,
        });
        self.next_deadline = self.next_deadline.min(deadline);
        id
    }

    fn cancel(&mut self, id: u64) {
        let i = self
            .entries
            .iter()
            .position(|e| e.id == id)
            .expect("cancelled timer is live");
        self.entries.swap_remove(i);
    }

    fn fire(&mut self, now: u64) -> usize {
        let mut fired = 0;
        let mut next = u64::MAX;
        let mut i = 0;
        while i < self.entries.len() {
            if self.entries[i].deadline <= now {
                self.entries.swap_remove(i).waker.wake();
                fired += 1;
            } else {
                next = next.min(self.entries[i].deadline);
                i += 1;
            }
        }
        self.next_deadline = next;
        fired
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// A binary min-heap with lazy cancellation (see the module docs).
struct HeapQueue {
    heap: BinaryHeap<Reverse<HeapEntry>>,
    slots: Vec<HeapSlot>,
    free: Vec<u32>,
    live: usize,
    stale: usize,
    rebuilds: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct HeapEntry {
    deadline: u64,
    slot: u32,
    generation: u32,
}

struct HeapSlot {
    generation: u32,
    waker: Option<Waker>,
}

impl HeapQueue {
    fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            stale: 0,
            rebuilds: 0,
        }
    }

    /// Frees a slot: its generation moves on, so heap entries naming the old one are stale.
    fn release(&mut self, slot: u32) -> Option<Waker> {
        let s = &mut self.slots[slot as usize];
        s.generation = s.generation.wrapping_add(1);
        self.free.push(slot);
        self.live -= 1;
        s.waker.take()
    }
}

impl TimerQueue for HeapQueue {
    type Handle = (u32, u32);

    fn insert(&mut self, deadline: u64, waker: Waker) -> (u32, u32) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(HeapSlot {
                    generation: 0,
                    waker: None,
                });
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 timers")
            }
        };
        let s = &mut self.slots[slot as usize];
        s.waker = Some(waker);
        let generation = s.generation;
        self.heap.push(Reverse(HeapEntry {
            deadline,
            slot,
            generation,
        }));
        self.live += 1;
        (slot, generation)
    }

    fn cancel(&mut self, (slot, generation): (u32, u32)) {
        assert_eq!(
            self.slots[slot as usize].generation, generation,
            "cancelled timer is live"
        );
        drop(self.release(slot));
        self.stale += 1;
        if self.stale > self.live.max(1024) {
            let slots = &self.slots;
            self.heap
                .retain(|Reverse(e)| slots[e.slot as usize].generation == e.generation);
            self.stale = 0;
            self.rebuilds += 1;
        }
    }

    fn fire(&mut self, now: u64) -> usize {
        let mut fired = 0;
        while let Some(Reverse(top)) = self.heap.peek() {
            if top.deadline > now {
                break;
            }
            let Reverse(e) = self.heap.pop().expect("peeked");
            if self.slots[e.slot as usize].generation == e.generation {
                if let Some(w) = self.release(e.slot) {
                    w.wake();
                }
                fired += 1;
            } else {
                self.stale -= 1;
            }
        }
        fired
    }

    fn len(&self) -> usize {
        self.live
    }
}

/// A peer queue with its own virtual clock.
struct Peer<Q> {
    queue: Q,
    now: u64,
    fired: u64,
}

impl<Q: TimerQueue> Peer<Q> {
    fn new(mut queue: Q, background: &[u64]) -> Self {
        for &d in background {
            queue.insert(d, Waker::noop().clone());
        }
        Self {
            queue,
            now: 0,
            fired: 0,
        }
    }

    fn insert_cancel(&mut self, offsets: &[u64]) -> (Duration, u64) {
        let mut i = 0;
        time_ops(offsets.len() as u64, || {
            let h = self
                .queue
                .insert(self.now + offsets[i], Waker::noop().clone());
            self.queue.cancel(black_box(h));
            i += 1;
        })
    }

    fn insert_fire(&mut self, ops: u64) -> (Duration, u64) {
        time_ops(ops, || {
            self.queue.insert(self.now + MS, Waker::noop().clone());
            self.now += MS;
            self.fired += self.queue.fire(self.now) as u64;
        })
    }
}

/// zcnet: an executor on a virtual clock, with N live `Sleep`s polled once.
struct Zcnet {
    clock: &'static VirtualClock,
    exec: &'static Executor,
    background: Vec<Pin<Box<Sleep>>>,
    fire_ops: u64,
}

impl Zcnet {
    fn new(background: &[u64]) -> Self {
        let clock = VirtualClock::leak();
        let exec = Executor::leak(clock);
        let mut cx = Context::from_waker(Waker::noop());
        let background = background
            .iter()
            .map(|&d| {
                let mut s = Box::pin(exec.sleep_until(Instant::from_nanos(d)));
                assert!(s.as_mut().poll(&mut cx).is_pending());
                s
            })
            .collect::<Vec<_>>();
        assert_eq!(exec.armed_timers(), background.len());
        Self {
            clock,
            exec,
            background,
            fire_ops: 0,
        }
    }

    fn insert_cancel(&self, offsets: &[u64]) -> (Duration, u64) {
        let mut cx = Context::from_waker(Waker::noop());
        let mut i = 0;
        time_ops(offsets.len() as u64, || {
            let at = Instant::from_nanos(self.clock.now().as_nanos() + offsets[i]);
            let mut s = pin!(self.exec.sleep_until(at));
            let _ = black_box(s.as_mut().poll(&mut cx));
            i += 1;
        })
    }

    fn insert_fire(&mut self, ops: u64) -> (Duration, u64) {
        let mut cx = Context::from_waker(Waker::noop());
        let (clock, exec) = (self.clock, self.exec);
        self.fire_ops += ops;
        time_ops(ops, || {
            let mut s = pin!(exec.sleep_until(clock.now() + Duration::from_millis(1)));
            let _ = black_box(s.as_mut().poll(&mut cx));
            clock.advance(Duration::from_millis(1));
            exec.run_until_idle();
        })
    }

    /// Every foreground timer fired, no background timer did, and the wheel holds exactly the
    /// background timers.
    fn check(&self) {
        assert!(
            self.clock.now().as_nanos() < BG_FROM,
            "virtual clock stayed below 1 h"
        );
        assert_eq!(self.exec.stats().timers_fired, self.fire_ops);
        assert_eq!(self.exec.armed_timers(), self.background.len());
    }
}

fn cell(s: &Sample) -> String {
    format!("{:.1} ({:.1}–{:.1})", s.median, s.min, s.max)
}

fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// Medians of several runs of three structures: (zcnet, list, heap).
type Trio = (Sample, Sample, Sample);

fn samples(runs: usize, measured: Vec<[(Duration, u64); 3]>) -> Trio {
    let pick = |k: usize| {
        let mut it = measured.iter().map(|m| m[k]);
        ns_per_op(runs, || it.next().expect("one per run"))
    };
    (pick(0), pick(1), pick(2))
}

fn main() {
    let mode = Mode::from_env();
    let sizes: Vec<u64> = mode.pick(vec![1_000, 10_000, 100_000, 1_000_000], vec![1_000, 10_000]);
    let runs = mode.pick(11, 3);
    let ops: u64 = mode.pick(200_000, 3_000);

    let mut table = Table::new(&[
        "live timers N",
        "zcnet insert+cancel",
        "zcnet insert+fire",
        "unsorted list insert+cancel",
        "unsorted list insert+fire",
        "BinaryHeap insert+cancel",
        "BinaryHeap insert+fire",
        "list ops/run",
    ]);
    let mut ratios = Table::new(&[
        "live timers N",
        "list / zcnet insert+cancel",
        "list / zcnet insert+fire",
        "heap / zcnet insert+cancel",
        "heap / zcnet insert+fire",
    ]);
    let mut zc_cancel = Vec::new();
    let mut zc_fire = Vec::new();
    let mut rebuilds = Vec::new();

    for &n in &sizes {
        let mut rng = Rng::new(0x7a63_6e65_7400 ^ n);
        let background: Vec<u64> = (0..n).map(|_| rng.range(BG_FROM, BG_FROM + HOUR)).collect();
        let mut zc = Zcnet::new(&background);
        let mut list = Peer::new(UnsortedList::new(), &background);
        let mut heap = Peer::new(HeapQueue::new(), &background);
        drop(background);
        let list_ops = ops.min((LIST_VISITS / n).max(LIST_MIN_OPS));

        // Warm-up, unmeasured.
        let warm: Vec<u64> = (0..ops / 10).map(|_| rng.range(MS, 2 * HOUR)).collect();
        zc.insert_cancel(&warm);
        heap.insert_cancel(&warm);
        list.insert_cancel(&warm[..warm.len().min(list_ops as usize / 10 + 1)]);

        let (mut cancel_runs, mut fire_runs) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            // The same deadlines for every structure (the list takes a prefix).
            let offsets: Vec<u64> = (0..ops).map(|_| rng.range(MS, 2 * HOUR)).collect();
            cancel_runs.push([
                zc.insert_cancel(&offsets),
                list.insert_cancel(&offsets[..list_ops as usize]),
                heap.insert_cancel(&offsets),
            ]);
            fire_runs.push([
                zc.insert_fire(ops),
                list.insert_fire(list_ops),
                heap.insert_fire(ops),
            ]);
        }
        zc.check();
        for (name, fired, len, fire_ops) in [
            ("list", list.fired, list.queue.len(), list_ops),
            ("heap", heap.fired, heap.queue.len(), ops),
        ] {
            assert_eq!(
                fired,
                fire_ops * runs as u64,
                "{name}: only foreground fired"
            );
            assert_eq!(len, n as usize, "{name}: background timers all live");
            assert!(list.now.max(heap.now) < BG_FROM, "virtual clocks below 1 h");
        }
        rebuilds.push((n, heap.queue.rebuilds));

        let (zcc, lc, hc) = samples(runs, cancel_runs);
        let (zcf, lf, hf) = samples(runs, fire_runs);
        table.row(vec![
            count(n),
            cell(&zcc),
            cell(&zcf),
            cell(&lc),
            cell(&lf),
            cell(&hc),
            cell(&hf),
            count(list_ops),
        ]);
        ratios.row(vec![
            count(n),
            format!("{:.1}x", lc.median / zcc.median),
            format!("{:.1}x", lf.median / zcf.median),
            format!("{:.2}x", hc.median / zcc.median),
            format!("{:.2}x", hf.median / zcf.median),
        ]);
        zc_cancel.push(zcc.median);
        zc_fire.push(zcf.median);

        // Dropping the background sleeps unlinks them all.
        let exec = zc.exec;
        drop(zc);
        assert_eq!(exec.armed_timers(), 0, "every background timer unlinked");
    }

    println!(
        "timers: ns per operation, median (min–max) of {runs} runs x {ops} operations \
         (unsorted list: the ops/run column), {}",
        mode.label()
    );
    println!();
    print!("{}", table.to_markdown());
    println!();
    println!("peer cost as a multiple of zcnet's, same run:");
    println!();
    print!("{}", ratios.to_markdown());
    println!();
    println!(
        "BinaryHeap rebuilds (stale entries dropped) during the runs: {}",
        rebuilds
            .iter()
            .map(|(n, r)| format!("N={}: {r}", count(*n)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let (small, large) = (
        count(sizes[0]),
        count(*sizes.last().expect("at least one size")),
    );
    for (op, v) in [("insert+cancel", &zc_cancel), ("insert+fire", &zc_fire)] {
        let r = v[v.len() - 1] / v[0];
        let verdict = if r <= FLATNESS_TARGET {
            "meets"
        } else {
            "MISSES"
        };
        println!(
            "zcnet {op}: N={large} / N={small} = {r:.2}x ({verdict} the ≤{FLATNESS_TARGET}x flatness target)"
        );
    }
}
