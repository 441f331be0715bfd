//! A [`log::Log`] that records what the stack logs on the test's own thread, so a test can assert
//! which events were logged, at which level, while other tests of the same binary run on theirs.
//!
//! ```ignore
//! let log = LogCapture::start();
//! // ... run two stacks on an executor driven by this thread ...
//! log.expect(Level::Debug, "zcnet_stack::tcp", "refused (RST)");
//! ```
//!
//! The stacks of a [`net::pair`](crate::net::pair) and their tasks run on the thread that drives
//! the executor (`block_on`), so what they log lands in that thread's capture.

use std::cell::RefCell;
use std::sync::Once;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// One log record: level, target and the formatted message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    /// The record's level.
    pub level: Level,
    /// Its target (`zcnet_stack::tcp`, `zcnet_stack::link`, ...).
    pub target: String,
    /// The message.
    pub message: String,
}

thread_local! {
    /// The records of this thread while it captures (`None`: not capturing).
    static RECORDS: RefCell<Option<Vec<Captured>>> = const { RefCell::new(None) };
}

/// The process's logger: keeps records on threads that capture, drops the rest.
struct ThreadCapture;

impl Log for ThreadCapture {
    fn enabled(&self, _metadata: &Metadata<'_>) -> bool {
        RECORDS.with(|r| r.borrow().is_some())
    }

    fn log(&self, record: &Record<'_>) {
        RECORDS.with(|r| {
            if let Some(v) = r.borrow_mut().as_mut() {
                v.push(Captured {
                    level: record.level(),
                    target: record.target().to_string(),
                    message: record.args().to_string(),
                });
            }
        });
    }

    fn flush(&self) {}
}

static LOGGER: ThreadCapture = ThreadCapture;

/// Records what is logged on this thread from [`start`](Self::start) until it is dropped.
#[derive(Debug)]
pub struct LogCapture {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl LogCapture {
    /// Installs the capturing logger (once per process, every level) and starts recording this
    /// thread's records, forgetting earlier ones.
    pub fn start() -> LogCapture {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            log::set_logger(&LOGGER).expect("no other logger in a test binary");
            log::set_max_level(LevelFilter::Trace);
        });
        RECORDS.with(|r| *r.borrow_mut() = Some(Vec::new()));
        LogCapture {
            _not_send: std::marker::PhantomData,
        }
    }

    /// The records so far, oldest first.
    pub fn records(&self) -> Vec<Captured> {
        RECORDS.with(|r| r.borrow().clone().unwrap_or_default())
    }

    /// The records of `target` whose message contains `text`, at any level.
    pub fn matching(&self, target: &str, text: &str) -> Vec<Captured> {
        self.records()
            .into_iter()
            .filter(|c| c.target == target && c.message.contains(text))
            .collect()
    }

    /// Asserts that a record of `target` at `level` contains `text`; returns the first one.
    pub fn expect(&self, level: Level, target: &str, text: &str) -> Captured {
        let found = self.matching(target, text);
        match found.iter().find(|c| c.level == level) {
            Some(c) => c.clone(),
            None => panic!(
                "no {level} record of {target} containing {text:?}; matching at other levels: \
                 {found:?}; all records:\n{}",
                self.dump()
            ),
        }
    }

    /// Every record, one per line, for failure messages.
    pub fn dump(&self) -> String {
        self.records()
            .iter()
            .map(|c| format!("{:<5} {}: {}\n", c.level, c.target, c.message))
            .collect()
    }
}

impl Drop for LogCapture {
    fn drop(&mut self) {
        RECORDS.with(|r| *r.borrow_mut() = None);
    }
}
