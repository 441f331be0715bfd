//! The executor's [`Platform`]: the TSC clock, idle in `hlt` until the next deadline or an
//! interrupt, and a sticky signal flag.
//!
//! ```text
//!  wait(deadline):  cli ─ signal flag set? ─yes─► clear it, sti, return
//!                        │ deadline past? ─yes─► sti, return
//!                        │ deadline ahead: arm the LAPIC one-shot timer for it
//!                        └► sti; hlt   (atomic: an interrupt pending since the cli wakes it)
//!                           cli, disarm, count the wakeup by cause, clear the flag, sti
//!  signal():        set the flag (interrupt handlers call it through the executor's wakers)
//! ```
//!
//! There is no periodic tick: with no task ready and no timer armed the executor passes `None`
//! and the CPU stays halted until a device interrupts. Interrupts are enabled whenever the
//! kernel is not inside `wait`, so a device interrupt wakes its task at once even while the
//! executor is busy.
//!
//! Every return from `hlt` is counted by what caused it ([`wakeups`]): the timer, a device, or
//! anything else (a spurious interrupt). The `idle=N` measurement and `/stats` report them.
//! The time spent halted is summed too, so [`busy_ns`] is the CPU time the kernel used
//! (interrupt handlers that run while the CPU is halted count as halted time: a few hundred
//! instructions each).

use core::arch::asm;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};

use zcnet_executor::{Instant, Platform};

use crate::idt::IrqKind;
use crate::{apic, clock, idt};

/// The kernel's platform: one CPU, the TSC clock, the LAPIC one-shot timer, `hlt`.
#[derive(Debug)]
pub struct KernelPlatform {
    signaled: AtomicBool,
    timer_wakeups: AtomicU64,
    device_wakeups: AtomicU64,
    other_wakeups: AtomicU64,
    halted_ns: AtomicU64,
}

/// The platform the executor runs on.
pub static PLATFORM: KernelPlatform = KernelPlatform {
    signaled: AtomicBool::new(false),
    timer_wakeups: AtomicU64::new(0),
    device_wakeups: AtomicU64::new(0),
    other_wakeups: AtomicU64::new(0),
    halted_ns: AtomicU64::new(0),
};

/// Returns from `hlt` so far, by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wakeups {
    /// Woken by the deadline timer.
    pub timer: u64,
    /// Woken by a device interrupt (and no timer).
    pub device: u64,
    /// Woken by anything else.
    pub other: u64,
}

impl Wakeups {
    /// All wakeups.
    pub fn total(&self) -> u64 {
        self.timer + self.device + self.other
    }

    /// The wakeups since `earlier`.
    pub fn since(&self, earlier: &Wakeups) -> Wakeups {
        Wakeups {
            timer: self.timer - earlier.timer,
            device: self.device - earlier.device,
            other: self.other - earlier.other,
        }
    }
}

/// Returns from `hlt` so far, by cause.
pub fn wakeups() -> Wakeups {
    PLATFORM.wakeups()
}

/// Nanoseconds since boot the CPU spent running (not halted in [`Platform::wait`]).
pub fn busy_ns() -> u64 {
    clock::now_ns().saturating_sub(PLATFORM.halted_ns.load(Relaxed))
}

impl KernelPlatform {
    /// Returns from `hlt` so far, by cause.
    pub fn wakeups(&self) -> Wakeups {
        Wakeups {
            timer: self.timer_wakeups.load(Relaxed),
            device: self.device_wakeups.load(Relaxed),
            other: self.other_wakeups.load(Relaxed),
        }
    }

    /// Counts one return from `hlt` by the kinds of interrupt handled meanwhile: a device
    /// interrupt counts as the cause even if the timer fired too.
    fn count_wakeup(&self, kinds: u8) {
        let counter = if kinds & IrqKind::Device as u8 != 0 {
            &self.device_wakeups
        } else if kinds & IrqKind::Timer as u8 != 0 {
            &self.timer_wakeups
        } else {
            &self.other_wakeups
        };
        counter.fetch_add(1, Relaxed);
    }
}

/// LAPIC timer ticks for `ns` nanoseconds, rounded late by 0.1% plus 10 µs so that calibration
/// error wakes the executor just after its deadline rather than just before (which would cost
/// a second wakeup), clamped to the counter's range.
fn timer_ticks(ns: u64) -> u32 {
    let ns = ns.saturating_add(ns / 1024).saturating_add(10_000);
    let ticks = u128::from(ns) * u128::from(clock::lapic_hz()) / 1_000_000_000;
    u32::try_from(ticks).unwrap_or(u32::MAX)
}

impl Platform for KernelPlatform {
    fn now(&self) -> Instant {
        Instant::from_nanos(clock::now_ns())
    }

    fn wait(&self, deadline: Option<Instant>) {
        idt::disable();
        if self.signaled.swap(false, Acquire) {
            idt::enable();
            return;
        }
        let armed = match deadline {
            None => false,
            Some(deadline) => {
                let now = clock::now_ns();
                if deadline.as_nanos() <= now {
                    idt::enable();
                    return;
                }
                apic::arm(timer_ticks(deadline.as_nanos() - now));
                true
            }
        };
        // Interrupts handled before this point did not wake this halt.
        idt::take_kinds_seen();
        let halted_at = clock::now_ns();
        // SAFETY: `sti; hlt` enables interrupts and halts until one arrives; `sti` takes effect
        // after the next instruction, so an interrupt pending since the `cli` above wakes the
        // `hlt` instead of being handled before it (no lost wakeup). Handlers run on their own
        // IST stack.
        unsafe { asm!("sti", "hlt", options(nostack)) };
        idt::disable();
        self.halted_ns
            .fetch_add(clock::now_ns() - halted_at, Relaxed);
        if armed {
            apic::disarm();
        }
        self.count_wakeup(idt::take_kinds_seen());
        // This return ends the wait, so a signal sent while halted has done its job.
        self.signaled.store(false, Relaxed);
        idt::enable();
    }

    fn signal(&self) {
        self.signaled.store(true, Release);
    }
}
