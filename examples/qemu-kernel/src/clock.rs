//! Time: the TSC, calibrated at boot against a timer of known rate, gives [`now_ns`]; the same
//! measurement gives the LAPIC timer's rate for deadlines.
//!
//! The TSC is the cheap clock (one instruction, no device access) but its rate is unknown
//! (under TCG it runs at the host's rate and tracks wall-clock time; TCG's CPUID stops at leaf
//! 0xD, with the default CPU and `-cpu max` alike, so no leaf 0x15/0x16 states it), so [`calibrate`] counts TSC and LAPIC timer ticks across
//! about 60 ms of a reference timer's time. The reference is the first of these that answers:
//!
//! * **the HPET** at its fixed address 0xFED00000 (q35; ACPI's HPET table agrees, so no ACPI
//!   parsing is needed), which states its period in femtoseconds in its capabilities register
//!   (a machine without one reads 0 or all ones there);
//! * **the 8254 PIT**, channel 0, at 1,193,182 Hz (microvm, which has no HPET but keeps the PIT
//!   unless started with `pit=off`): programmed as a free-running rate generator and read back
//!   with latch commands, its 16-bit count wraps every 55 ms, so the loop reads it far more
//!   often than that and sums the differences. Its interrupt stays masked (the 8259s and the
//!   IOAPIC pin alike); afterwards the channel is left in one-shot mode, so QEMU stops timing
//!   it. Channel 0 needs no gate: channel 2's gate (port 0x61) is QEMU's PC-speaker device,
//!   which microvm does not have (the port reads 0xFF there).

use core::arch::x86_64::_rdtsc;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

use crate::port::{inb, outb};

const HPET_BASE: usize = 0xFED0_0000;
const HPET_CAPABILITIES: usize = 0x00;
const HPET_CONFIG: usize = 0x10;
const HPET_COUNTER: usize = 0xF0;

/// The PIT's input clock.
const PIT_HZ: u64 = 1_193_182;
const PIT_CHANNEL0: u16 = 0x40;
const PIT_COMMAND: u16 = 0x43;
/// Channel 0, low then high byte, mode 2 (rate generator), binary.
const PIT_CH0_RATE_GENERATOR: u8 = 0x34;
/// Channel 0, low then high byte, mode 0 (interrupt on terminal count: counts once).
const PIT_CH0_ONE_SHOT: u8 = 0x30;
/// Channel 0, counter latch.
const PIT_CH0_LATCH: u8 = 0x00;
/// Read-backs in a row without the count changing after which the PIT is taken as absent: the
/// count changes every 0.84 µs, a read-back takes about 0.15 µs under TCG, so this is over a
/// millisecond of reads.
const PIT_STUCK_READS: u32 = 10_000;
const NO_TIMER: &str =
    "no timer to calibrate the TSC against (no HPET, and the PIT does not count)";

/// How long the calibration counts.
const CALIBRATION_NS: u64 = 60_000_000;

/// TSC value at calibration: the clock's origin.
static TSC_ORIGIN: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds per TSC tick × 2^32.
static NS_PER_TSC_FIXED: AtomicU64 = AtomicU64::new(0);
/// TSC ticks per second.
static TSC_HZ: AtomicU64 = AtomicU64::new(0);
/// LAPIC timer ticks per second (at divide-by-16).
static LAPIC_HZ: AtomicU64 = AtomicU64::new(0);
/// The [`Reference`] used, as its discriminant (0: not calibrated yet).
static REFERENCE: AtomicU8 = AtomicU8::new(0);

/// The timer the TSC and the LAPIC timer were measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// The HPET's main counter.
    Hpet = 1,
    /// The 8254 PIT's channel 0.
    Pit = 2,
}

impl Reference {
    /// Its name, for the console and `/stats`.
    pub fn name(self) -> &'static str {
        match self {
            Reference::Hpet => "hpet",
            Reference::Pit => "pit",
        }
    }
}

fn hpet_read(reg: usize) -> u64 {
    // SAFETY: the HPET's registers are identity mapped at HPET_BASE; `reg` is one of the
    // offsets above, all 64-bit registers. On a machine without an HPET the address is
    // unassigned, and QEMU answers such reads with a constant.
    unsafe { read_volatile((HPET_BASE + reg) as *const u64) }
}

fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` is available on every x86_64 CPU and only reads the counter.
    unsafe { _rdtsc() }
}

fn pit_read() -> u16 {
    // SAFETY: the latch command freezes channel 0's count for the two reads that follow (low
    // byte, high byte); it changes nothing else.
    unsafe {
        outb(PIT_COMMAND, PIT_CH0_LATCH);
        u16::from_le_bytes([inb(PIT_CHANNEL0), inb(PIT_CHANNEL0)])
    }
}

/// Programs PIT channel 0 with `mode` and the 16-bit `count` (0: 65536).
fn pit_program(mode: u8, count: u16) {
    let [low, high] = count.to_le_bytes();
    // SAFETY: reprograms channel 0 only; its interrupt (IRQ 0) is masked at the 8259s
    // (`pic::disable`) and at the IOAPIC (its reset state, never unmasked here).
    unsafe {
        outb(PIT_COMMAND, mode);
        outb(PIT_CHANNEL0, low);
        outb(PIT_CHANNEL0, high);
    }
}

/// The reference timer, with the state its tick count needs.
enum Timer {
    /// The HPET's 64-bit main counter.
    Hpet { period_fs: u64 },
    /// PIT channel 0 counting down from 65536 over and over: the last count read, the ticks
    /// summed so far, and reads in a row that saw no change.
    Pit {
        last: u16,
        total: u64,
        unchanged: u32,
    },
}

impl Timer {
    /// The HPET if its capabilities state a plausible period (at most 100 ns), started; else
    /// the PIT, started as a rate generator.
    fn start() -> Timer {
        let period_fs = hpet_read(HPET_CAPABILITIES) >> 32;
        if period_fs == 0 || period_fs > 100_000_000 {
            pit_program(PIT_CH0_RATE_GENERATOR, 0);
            return Timer::Pit {
                last: pit_read(),
                total: 0,
                unchanged: 0,
            };
        }
        // SAFETY: setting the HPET's enable bit starts its main counter; nothing else uses it.
        unsafe {
            write_volatile(
                (HPET_BASE + HPET_CONFIG) as *mut u64,
                hpet_read(HPET_CONFIG) | 1,
            )
        };
        Timer::Hpet { period_fs }
    }

    fn hz(&self) -> u64 {
        match self {
            Timer::Hpet { period_fs } => 1_000_000_000_000_000 / period_fs,
            Timer::Pit { .. } => PIT_HZ,
        }
    }

    /// A running tick count. Panics if the PIT's count stops changing (no PIT).
    fn ticks(&mut self) -> u64 {
        match self {
            Timer::Hpet { .. } => hpet_read(HPET_COUNTER),
            Timer::Pit {
                last,
                total,
                unchanged,
            } => {
                let now = pit_read();
                // A down-counter: the ticks since the last read, across one wrap at most.
                let ticks = last.wrapping_sub(now);
                *last = now;
                *unchanged = if ticks == 0 { *unchanged + 1 } else { 0 };
                assert!(*unchanged < PIT_STUCK_READS, "{NO_TIMER}");
                *total += u64::from(ticks);
                *total
            }
        }
    }
}

/// Measures the TSC's and the LAPIC timer's rates (about 60 ms) against the HPET, or the PIT
/// where there is no HPET, and returns which. Call once, after `apic::init` and
/// `pic::disable`, before [`now_ns`] is used. Panics if neither timer counts.
pub fn calibrate() -> Reference {
    let mut timer = Timer::start();
    let hz = timer.hz();
    let wanted = CALIBRATION_NS * hz / 1_000_000_000;
    let base = timer.ticks();
    let t0 = rdtsc();
    crate::apic::start_masked_count(u32::MAX);
    let (ticks, t1) = loop {
        let ticks = timer.ticks().wrapping_sub(base);
        if ticks >= wanted {
            break (ticks, rdtsc());
        }
        core::hint::spin_loop();
    };
    let lapic_ticks = u64::from(u32::MAX - crate::apic::current_count());
    crate::apic::disarm();
    let per_second = |n: u64| (u128::from(n) * u128::from(hz) / u128::from(ticks)) as u64;
    let tsc_hz = per_second(t1.wrapping_sub(t0));
    TSC_HZ.store(tsc_hz, Relaxed);
    LAPIC_HZ.store(per_second(lapic_ticks), Relaxed);
    NS_PER_TSC_FIXED.store(
        ((1_000_000_000u128 << 32) / u128::from(tsc_hz)) as u64,
        Relaxed,
    );
    TSC_ORIGIN.store(t0, Relaxed);
    let reference = match timer {
        Timer::Hpet { .. } => Reference::Hpet,
        Timer::Pit { .. } => {
            // Counting once from 1 and then staying quiet: QEMU has no more transitions to time.
            pit_program(PIT_CH0_ONE_SHOT, 1);
            Reference::Pit
        }
    };
    REFERENCE.store(reference as u8, Relaxed);
    reference
}

/// The timer [`calibrate`] measured against (`None` before it ran).
pub fn reference() -> Option<Reference> {
    match REFERENCE.load(Relaxed) {
        1 => Some(Reference::Hpet),
        2 => Some(Reference::Pit),
        _ => None,
    }
}

/// Nanoseconds since calibration.
pub fn now_ns() -> u64 {
    let ticks = rdtsc().wrapping_sub(TSC_ORIGIN.load(Relaxed));
    ((u128::from(ticks) * u128::from(NS_PER_TSC_FIXED.load(Relaxed))) >> 32) as u64
}

/// The TSC's measured rate, in Hz.
pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Relaxed)
}

/// The LAPIC timer's measured rate, in Hz.
pub fn lapic_hz() -> u64 {
    LAPIC_HZ.load(Relaxed)
}
