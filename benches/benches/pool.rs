//! Frame pool benchmark: lease + drop round trips, zcnet's lock-free pool beside a
//! `Mutex<Vec<usize>>` free list, measured in the same run.
//!
//! ```text
//! cargo bench -p zcnet-benches --bench pool            # full run (BENCHMARKS.md)
//! cargo bench -p zcnet-benches --bench pool -- --quick # CI smoke run
//! ```
//!
//! Workloads, each reported as the median ns per round trip over several runs:
//! * `tx lease+drop`: `try_alloc_tx` then drop (FREE → TX → FREE).
//! * `rx post+complete+drop`: a driver's full RX round trip (FREE → POSTED → STACK → FREE).
//! * the same with 2 threads doing it concurrently on one pool (ns = wall time / all round trips).
//!
//! The peer does the same work on a `std::sync::Mutex<Vec<usize>>` of slot indices: pop under
//! the lock to lease, push under the lock to return.

use std::hint::black_box;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use zcnet_benches::{ns_per_op, time_ops, Mode, Sample, Table};
use zcnet_buffer::{FramePool, PoolConfig};

const SLOTS: usize = 256;

/// The peer: a mutex-protected free list of slot indices.
struct MutexPool {
    free: Mutex<Vec<usize>>,
}

impl MutexPool {
    fn new(slots: usize) -> Self {
        Self {
            free: Mutex::new((0..slots).collect()),
        }
    }

    fn lease(&self) -> Option<usize> {
        self.free.lock().unwrap().pop()
    }

    fn give_back(&self, slot: usize) {
        self.free.lock().unwrap().push(slot);
    }
}

fn zcnet_tx(pool: &'static FramePool) {
    let f = pool.try_alloc_tx().expect("pool not exhausted");
    black_box(&f);
}

fn zcnet_rx(pool: &'static FramePool) {
    let mut posted = pool.try_alloc_rx().expect("pool not exhausted");
    black_box(posted.buffer_mut().as_mut_ptr());
    let frame = posted.complete(64).expect("in range");
    black_box(&frame[..]);
}

fn mutex_round_trip(pool: &MutexPool) {
    let slot = pool.lease().expect("pool not exhausted");
    black_box(slot);
    pool.give_back(slot);
}

/// Runs `work` on `threads` threads at once, `ops` times each; returns wall time and total ops.
fn concurrent(threads: usize, ops: u64, work: Arc<dyn Fn() + Send + Sync>) -> (Duration, u64) {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let barrier = barrier.clone();
            let work = work.clone();
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..ops {
                    work();
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().unwrap();
    }
    (start.elapsed(), ops * threads as u64)
}

fn cell(s: &Sample) -> String {
    format!("{:.1} ({:.1}–{:.1})", s.median, s.min, s.max)
}

fn main() {
    let mode = Mode::from_env();
    let runs = mode.pick(11, 3);
    let ops = mode.pick(2_000_000, 20_000);
    let threads = 2;

    let pool = FramePool::leak(PoolConfig::new(SLOTS)).unwrap();
    let peer = Arc::new(MutexPool::new(SLOTS));

    let mut table = Table::new(&[
        "workload",
        "threads",
        "zcnet ns/op (min–max)",
        "Mutex<Vec> ns/op (min–max)",
        "ratio (Mutex / zcnet)",
    ]);
    let mut ratios = Vec::new();

    // Interleave zcnet and the peer run by run, so that noise hits both alike.
    let mut measure = |name: &str,
                       threads: usize,
                       zc: Arc<dyn Fn() + Send + Sync>,
                       mx: Arc<dyn Fn() + Send + Sync>| {
        let (mut zs, mut ms) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            zs.push(if threads == 1 {
                time_ops(ops, || zc())
            } else {
                concurrent(threads, ops / threads as u64, zc.clone())
            });
            ms.push(if threads == 1 {
                time_ops(ops, || mx())
            } else {
                concurrent(threads, ops / threads as u64, mx.clone())
            });
        }
        let mut zi = zs.into_iter();
        let mut mi = ms.into_iter();
        let z = ns_per_op(runs, || zi.next().unwrap());
        let m = ns_per_op(runs, || mi.next().unwrap());
        let ratio = m.median / z.median;
        ratios.push((name.to_string(), threads, ratio));
        table.row(vec![
            name.to_string(),
            threads.to_string(),
            cell(&z),
            cell(&m),
            format!("{ratio:.2}x"),
        ]);
    };

    for t in [1, threads] {
        let p = peer.clone();
        measure(
            "tx lease+drop",
            t,
            Arc::new(move || zcnet_tx(pool)),
            Arc::new(move || mutex_round_trip(&p)),
        );
        let p = peer.clone();
        measure(
            "rx post+complete+drop",
            t,
            Arc::new(move || zcnet_rx(pool)),
            Arc::new(move || mutex_round_trip(&p)),
        );
    }

    println!(
        "frame pool: {runs} runs x {ops} round trips, {} slots, {} cores available",
        SLOTS,
        thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    print!("{}", table.to_markdown());
    let occ = pool.audit().expect("pool consistent after the benchmark");
    assert_eq!(occ.free, SLOTS, "every slot returned");
    let contended: Vec<_> = ratios.iter().filter(|r| r.1 > 1).collect();
    for (name, t, r) in &contended {
        let verdict = if *r >= 2.0 { "meets" } else { "MISSES" };
        println!("\n{name} with {t} threads: zcnet {r:.2}x faster than Mutex<Vec> ({verdict} the 2x target)");
    }
}
