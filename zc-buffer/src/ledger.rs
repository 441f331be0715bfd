//! The copy ledger: every payload copy zcnet's own code makes goes through [`copy`] (or is
//! [`record`]ed when the bytes are moved by something we call, such as the kernel's `read` on a
//! TAP fd), so copies per request are counted, not assumed.
//!
//! Counting costs two relaxed atomic additions per copy (locked instructions on x86), cheap
//! enough to stay on in release builds; a benchmark that times a data path can pause it
//! ([`CopyLedger::set_counting`]) and count in a separate run. The process-wide ledger is [`LEDGER`]; a [`CopyLedger`] of one's own is useful in tests
//! that run beside others.
//!
//! ```
//! use zcnet_buffer::ledger::{self, CopySite, LEDGER};
//!
//! let before = LEDGER.snapshot();
//! let mut dst = [0u8; 4];
//! assert_eq!(ledger::copy(CopySite::SocketToApp, &mut dst, b"ping"), 4);
//! let delta = LEDGER.snapshot().since(&before);
//! assert_eq!(delta.bytes(CopySite::SocketToApp), 4);
//! assert_eq!(delta.calls(CopySite::SocketToApp), 1);
//! ```

use core::fmt;

use crate::sync::StatCounter;

/// Where a payload copy happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CopySite {
    /// A driver copying between a device buffer and a pool slot (a loopback or bounce buffer).
    Driver,
    /// The stack copying a received payload into a socket buffer.
    StackRx,
    /// Socket buffer to application memory (`read`, `recv_from`).
    SocketToApp,
    /// Application memory to socket buffer (`write`, `send_to`).
    AppToSocket,
    /// Socket buffer into an outgoing frame, first transmission.
    Emit,
    /// Socket buffer into an outgoing frame again, for a retransmission.
    Retransmit,
    /// The host kernel copying across a file descriptor (TAP `read`/`write`): the "DMA" of a TAP
    /// device, counted apart from zcnet's own copies.
    KernelFd,
    /// The stack copying a small received payload into the unused tail of a frame it already
    /// holds (TCP copy-break), so that the small segment does not pin a slot of its own.
    CopyBreak,
    /// A [`FrameChain`](crate::FrameChain) split inside a slot: the bytes past the split point
    /// are copied into a fresh slot, so that each slot keeps exactly one owner.
    ChainSplit,
}

impl CopySite {
    /// Number of sites.
    pub const COUNT: usize = 9;

    /// Every site, in table order.
    pub const ALL: [CopySite; Self::COUNT] = [
        CopySite::Driver,
        CopySite::StackRx,
        CopySite::SocketToApp,
        CopySite::AppToSocket,
        CopySite::Emit,
        CopySite::Retransmit,
        CopySite::KernelFd,
        CopySite::CopyBreak,
        CopySite::ChainSplit,
    ];

    /// A short name for tables and logs.
    pub const fn name(self) -> &'static str {
        match self {
            CopySite::Driver => "driver",
            CopySite::StackRx => "stack-rx",
            CopySite::SocketToApp => "socket->app",
            CopySite::AppToSocket => "app->socket",
            CopySite::Emit => "emit",
            CopySite::Retransmit => "retransmit",
            CopySite::KernelFd => "kernel-fd",
            CopySite::CopyBreak => "copy-break",
            CopySite::ChainSplit => "chain-split",
        }
    }

    /// Whether the copy is made by zcnet's code in this process (everything but
    /// [`KernelFd`](CopySite::KernelFd)).
    pub const fn is_user_space(self) -> bool {
        !matches!(self, CopySite::KernelFd)
    }
}

/// Calls and bytes per [`CopySite`].
///
/// Counting can be paused ([`set_counting`](CopyLedger::set_counting)): a benchmark that
/// times a data path pauses it for the timed runs (on every side it compares, since their
/// application copies go through the same helper) and counts copies in separate runs. Paused,
/// [`copy`](CopyLedger::copy) still copies; it only skips the two atomic additions, which
/// cost a locked instruction each and, right after a large copy, wait for its stores to drain.
#[derive(Debug)]
pub struct CopyLedger {
    calls: [StatCounter; CopySite::COUNT],
    bytes: [StatCounter; CopySite::COUNT],
    /// Cleared while counting is paused. Read with a relaxed load on every record: a pause
    /// or resume takes effect on other threads at their next record, soon but not at once.
    counting: core::sync::atomic::AtomicBool,
}

impl CopyLedger {
    /// An empty ledger.
    pub const fn new() -> Self {
        Self {
            calls: [const { StatCounter::new() }; CopySite::COUNT],
            bytes: [const { StatCounter::new() }; CopySite::COUNT],
            counting: core::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Pauses (`false`) or resumes (`true`, the initial state) counting. Copies made while
    /// paused are not recorded anywhere.
    pub fn set_counting(&self, on: bool) {
        self.counting
            .store(on, core::sync::atomic::Ordering::Relaxed);
    }

    /// Whether copies are being counted (see [`set_counting`](Self::set_counting)).
    pub fn is_counting(&self) -> bool {
        self.counting.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// Copies `min(dst.len(), src.len())` bytes from the front of `src` to the front of `dst`,
    /// records the copy at `site`, and returns the count. Never panics on a length mismatch.
    #[inline]
    pub fn copy(&self, site: CopySite, dst: &mut [u8], src: &[u8]) -> usize {
        let n = dst.len().min(src.len());
        dst[..n].copy_from_slice(&src[..n]);
        self.record(site, n);
        n
    }

    /// Records a copy of `bytes` bytes made elsewhere (by the kernel, by smoltcp).
    #[inline]
    pub fn record(&self, site: CopySite, bytes: usize) {
        if !self.is_counting() {
            return;
        }
        self.calls[site as usize].add(1);
        self.bytes[site as usize].add(bytes as u64);
    }

    /// The counts now.
    pub fn snapshot(&self) -> LedgerSnapshot {
        let mut s = LedgerSnapshot::default();
        for site in CopySite::ALL {
            s.calls[site as usize] = self.calls[site as usize].get();
            s.bytes[site as usize] = self.bytes[site as usize].get();
        }
        s
    }

    /// Returns the counts and sets them to zero. Each count recorded concurrently lands in either
    /// the returned snapshot or the next one, never in neither (a copy's call and its bytes may
    /// land on different sides).
    pub fn reset(&self) -> LedgerSnapshot {
        let mut s = LedgerSnapshot::default();
        for site in CopySite::ALL {
            s.calls[site as usize] = self.calls[site as usize].take();
            s.bytes[site as usize] = self.bytes[site as usize].take();
        }
        s
    }
}

impl Default for CopyLedger {
    fn default() -> Self {
        Self::new()
    }
}

/// The process-wide ledger that [`copy`] and [`record`] write to.
pub static LEDGER: CopyLedger = CopyLedger::new();

/// [`CopyLedger::copy`] on [`LEDGER`].
#[inline]
pub fn copy(site: CopySite, dst: &mut [u8], src: &[u8]) -> usize {
    LEDGER.copy(site, dst, src)
}

/// [`CopyLedger::record`] on [`LEDGER`].
#[inline]
pub fn record(site: CopySite, bytes: usize) {
    LEDGER.record(site, bytes)
}

/// Counts read from a [`CopyLedger`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LedgerSnapshot {
    calls: [u64; CopySite::COUNT],
    bytes: [u64; CopySite::COUNT],
}

impl LedgerSnapshot {
    /// Copies made at `site`.
    pub fn calls(&self, site: CopySite) -> u64 {
        self.calls[site as usize]
    }

    /// Bytes copied at `site`.
    pub fn bytes(&self, site: CopySite) -> u64 {
        self.bytes[site as usize]
    }

    /// Copies made in user space (all sites but [`CopySite::KernelFd`]).
    pub fn user_calls(&self) -> u64 {
        CopySite::ALL
            .iter()
            .filter(|s| s.is_user_space())
            .map(|&s| self.calls(s))
            .sum()
    }

    /// Bytes copied in user space (all sites but [`CopySite::KernelFd`]).
    pub fn user_bytes(&self) -> u64 {
        CopySite::ALL
            .iter()
            .filter(|s| s.is_user_space())
            .map(|&s| self.bytes(s))
            .sum()
    }

    /// The counts accumulated between `earlier` and this snapshot (saturating at zero if the
    /// ledger was reset in between).
    pub fn since(&self, earlier: &LedgerSnapshot) -> LedgerSnapshot {
        let mut d = LedgerSnapshot::default();
        for i in 0..CopySite::COUNT {
            d.calls[i] = self.calls[i].saturating_sub(earlier.calls[i]);
            d.bytes[i] = self.bytes[i].saturating_sub(earlier.bytes[i]);
        }
        d
    }
}

impl fmt::Display for LedgerSnapshot {
    /// A markdown table: one row per site, then the user-space total.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "| site | copies | bytes |")?;
        writeln!(f, "|---|---:|---:|")?;
        for site in CopySite::ALL {
            writeln!(
                f,
                "| {} | {} | {} |",
                site.name(),
                self.calls(site),
                self.bytes(site)
            )?;
        }
        write!(
            f,
            "| user space total | {} | {} |",
            self.user_calls(),
            self.user_bytes()
        )
    }
}
