//! A small benchmark harness shared by zcnet's benchmark binaries: repeated runs, medians, and
//! markdown tables of zcnet beside its peers measured in the same run.
//!
//! The machines these run on are shared and noisy, so every figure is the median of several
//! runs, and comparisons are ratios between rows measured in the same process, one after the
//! other, never against numbers from another run.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

pub mod embassy_clock;
pub mod retx;
pub mod svg;

/// How much work a benchmark binary does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Full measurement (the figures in BENCHMARKS.md).
    Full,
    /// A fast smoke run for CI: the same code paths, fewer iterations; its numbers are not
    /// quoted anywhere.
    Quick,
}

impl Mode {
    /// `Quick` when `--quick` is among the arguments or `ZCNET_BENCH_QUICK` is set; arguments that
    /// cargo passes (`--bench`) are ignored.
    pub fn from_env() -> Mode {
        let quick_arg = std::env::args().any(|a| a == "--quick");
        let quick_env = std::env::var_os("ZCNET_BENCH_QUICK").is_some_and(|v| v != "0");
        if quick_arg || quick_env {
            Mode::Quick
        } else {
            Mode::Full
        }
    }

    /// How a table's heading describes the run: quick figures must not be quoted.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Full => "full run",
            Mode::Quick => "QUICK smoke run: figures not for quoting",
        }
    }

    /// `full` or `quick` scaled by the mode.
    pub fn pick<T>(self, full: T, quick: T) -> T {
        match self {
            Mode::Full => full,
            Mode::Quick => quick,
        }
    }
}

/// Reads each of `pipes` (a child process's stdout, stderr) line by line on a thread of its
/// own, into one channel; a pipe's thread ends at its end of stream or once the receiver is
/// gone.
pub fn line_channel(pipes: Vec<Box<dyn Read + Send>>) -> Receiver<String> {
    let (tx, lines) = channel();
    for pipe in pipes {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    lines
}

/// Runs `cmd` (stdin closed, stdout and stderr read as it runs) to completion: its stdout, or
/// why not: it failed, or ran past `limit` or until `give_up` returned true (then it is killed).
/// The error carries its exit status, stdout and stderr.
pub fn run_within(
    cmd: &mut Command,
    limit: Duration,
    give_up: impl Fn() -> bool,
) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start: {e}"))?;
    let read_all = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            s
        })
    };
    let out = read_all(Box::new(child.stdout.take().unwrap()));
    let err = read_all(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(e) => panic!("waiting for {cmd:?}: {e}"),
        }
        if Instant::now() >= deadline || give_up() {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        Some(st) if st.success() => Ok(stdout),
        Some(st) => Err(format!("failed ({st})\nstdout: {stdout}\nstderr: {stderr}")),
        None => Err(format!(
            "still running after {limit:?}; killed\nstdout: {stdout}\nstderr: {stderr}"
        )),
    }
}

/// The median of `samples` (the mean of the middle two for an even count). Panics on an empty
/// slice, which no benchmark produces.
pub fn median(samples: &mut [f64]) -> f64 {
    assert!(!samples.is_empty(), "median of no samples");
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    }
}

/// Runs `run` `runs` times; each call returns (elapsed, operations). Returns the median
/// nanoseconds per operation and the spread (min, max) across runs.
pub fn ns_per_op(runs: usize, mut run: impl FnMut() -> (Duration, u64)) -> Sample {
    let mut v: Vec<f64> = (0..runs)
        .map(|_| {
            let (t, ops) = run();
            t.as_nanos() as f64 / ops.max(1) as f64
        })
        .collect();
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(0.0, f64::max);
    Sample {
        median: median(&mut v),
        min,
        max,
        runs,
    }
}

/// Times `ops` calls of `f`.
pub fn time_ops(ops: u64, mut f: impl FnMut()) -> (Duration, u64) {
    let start = Instant::now();
    for _ in 0..ops {
        f();
    }
    (start.elapsed(), ops)
}

/// One measured figure: nanoseconds per operation over several runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Median over the runs.
    pub median: f64,
    /// Fastest run.
    pub min: f64,
    /// Slowest run.
    pub max: f64,
    /// Number of runs.
    pub runs: usize,
}

/// A markdown table under construction.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (as many cells as columns).
    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.header.len(), "row width");
        self.rows.push(cells);
    }

    /// The table as GitHub-flavoured markdown.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!("| {} |\n", self.header.join(" | ")));
        s.push_str(&format!(
            "|{}\n",
            self.header.iter().map(|_| "---|").collect::<String>()
        ));
        for r in &self.rows {
            s.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        s
    }
}

/// A small seeded pseudo-random generator (SplitMix64): the same seed gives the same sequence on
/// every machine, so every structure in a benchmark sees the same deadlines.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..hi` (`lo < hi`); the bias of the multiply-shift is below 2^-32 for the
    /// ranges the benchmarks use.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo < hi, "empty range");
        let span = hi - lo;
        lo + ((u128::from(self.next_u64()) * u128::from(span)) >> 64) as u64
    }
}

pub use zcnet_tests::clock::VirtualClock;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn ns_per_op_reports_median_and_spread() {
        let mut durations = [30u64, 10, 20].into_iter();
        let s = ns_per_op(3, || {
            (Duration::from_nanos(durations.next().unwrap() * 10), 10)
        });
        assert_eq!((s.median, s.min, s.max, s.runs), (20.0, 10.0, 30.0, 3));
    }

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut r = Rng::new(1);
        let mut seen_low = false;
        let mut seen_high = false;
        for _ in 0..10_000 {
            let v = r.range(10, 20);
            assert!((10..20).contains(&v));
            seen_low |= v == 10;
            seen_high |= v == 19;
        }
        assert!(seen_low && seen_high, "both ends of the range occur");
    }

    #[test]
    fn markdown_table() {
        let mut t = Table::new(&["a", "b"]);
        t.row(vec!["1".into(), "2".into()]);
        assert_eq!(t.to_markdown(), "| a | b |\n|---|---|\n| 1 | 2 |\n");
    }
}
