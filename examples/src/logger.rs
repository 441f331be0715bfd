//! A small [`log::Log`] for the example programs: one line per record on stderr, with the
//! seconds since the logger was installed, the level and the target. Needs the `std` feature.
//!
//! ```text
//!     0.002 INFO  zcnet_tap: TAP zcdemo0: opened, MTU 1500, hardware address 02:7a:63:00:00:01
//!     0.035 INFO  zcnet_stack: stack created: hardware address 02-7a-63-00-00-01, IP MTU 1500
//!     2.104 DEBUG zcnet_stack::tcp: TCP 10.77.0.2:7 -> 10.77.0.1:46298: accepted by the application
//! ```
//!
//! The programs install it with [`init`] from their `-v` count ([`level_for`]): warnings and
//! errors without `-v`, `-v` info (link, addresses, DHCP, SLAAC), `-vv` debug (TCP connections,
//! dropped frames), `-vvv` trace (every TCP state change).

use std::io::Write;
use std::sync::OnceLock;
use std::time::Instant;

use log::{LevelFilter, Log, Metadata, Record};

/// The logger: writes each record enabled by [`log::max_level`] to stderr.
#[derive(Debug)]
pub struct StderrLogger {
    start: Instant,
}

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let t = self.start.elapsed();
        // One `write` of the whole line under the lock: lines from threads do not interleave.
        // A failed write to stderr is ignored: there is nowhere to report it.
        let _ = writeln!(
            std::io::stderr().lock(),
            "{:5}.{:03} {:<5} {}: {}",
            t.as_secs(),
            t.subsec_millis(),
            record.level(),
            record.target(),
            record.args()
        );
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// The level filter for `verbosity` (the number of `-v`): 0 warn, 1 info, 2 debug, 3 or more
/// trace.
pub fn level_for(verbosity: u8) -> LevelFilter {
    match verbosity {
        0 => LevelFilter::Warn,
        1 => LevelFilter::Info,
        2 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    }
}

/// Installs the logger (once per process; later calls only change the level) with the level
/// for `verbosity` ([`level_for`]).
pub fn init(verbosity: u8) {
    static LOGGER: OnceLock<StderrLogger> = OnceLock::new();
    let logger = LOGGER.get_or_init(|| StderrLogger {
        start: Instant::now(),
    });
    // Fails only if another logger is installed already; the level then applies to that one.
    let _ = log::set_logger(logger);
    log::set_max_level(level_for(verbosity));
}

/// Takes every `-v`, `-vv`, `-vvv` ... and `--verbose` out of `args` and returns how many `v`s
/// there were.
pub fn take_verbosity(args: &mut Vec<String>) -> u8 {
    let mut verbosity = 0u8;
    args.retain(|a| {
        let n = match a.as_str() {
            "--verbose" => 1,
            s if s.len() > 1 && s.starts_with('-') && s[1..].bytes().all(|b| b == b'v') => {
                s.len() - 1
            }
            _ => return true,
        };
        verbosity = verbosity.saturating_add(u8::try_from(n).unwrap_or(u8::MAX));
        false
    });
    verbosity
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn verbosity_is_counted_and_taken_out() {
        let mut a = args(&["--tap", "t0", "-v", "--mtu", "9000", "-vv"]);
        assert_eq!(take_verbosity(&mut a), 3);
        assert_eq!(a, args(&["--tap", "t0", "--mtu", "9000"]));
        let mut a = args(&["--verbose", "-x", "-"]);
        assert_eq!(take_verbosity(&mut a), 1);
        assert_eq!(a, args(&["-x", "-"]));
        let mut a = args(&[]);
        assert_eq!(take_verbosity(&mut a), 0);
    }

    #[test]
    fn levels() {
        assert_eq!(level_for(0), LevelFilter::Warn);
        assert_eq!(level_for(1), LevelFilter::Info);
        assert_eq!(level_for(2), LevelFilter::Debug);
        assert_eq!(level_for(3), LevelFilter::Trace);
        assert_eq!(level_for(9), LevelFilter::Trace);
    }
}
