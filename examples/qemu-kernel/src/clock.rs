//! Time: the TSC, calibrated against the HPET at boot, gives [`now_ns`]; the same measurement
//! gives the LAPIC timer's rate for deadlines.
//!
//! The HPET sits at the fixed address 0xFED00000 on QEMU's q35 (ACPI's HPET table agrees, so
//! no ACPI parsing is needed) and states its period in femtoseconds. The TSC is the cheap clock
//! (one instruction, no device access) but its rate is unknown, so [`calibrate`] counts TSC and
//! LAPIC timer ticks across about 60 ms of HPET time. Under TCG the TSC runs at the host's rate
//! and tracks wall-clock time.

use core::arch::x86_64::_rdtsc;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

const HPET_BASE: usize = 0xFED0_0000;
const HPET_CAPABILITIES: usize = 0x00;
const HPET_CONFIG: usize = 0x10;
const HPET_COUNTER: usize = 0xF0;

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

fn hpet_read(reg: usize) -> u64 {
    // SAFETY: the HPET's registers are identity mapped at HPET_BASE; `reg` is one of the
    // offsets above, all 64-bit registers.
    unsafe { read_volatile((HPET_BASE + reg) as *const u64) }
}

fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` is available on every x86_64 CPU and only reads the counter.
    unsafe { _rdtsc() }
}

/// Measures the TSC's and the LAPIC timer's rates against the HPET (about 60 ms). Call once,
/// after `apic::init`, before [`now_ns`] is used.
pub fn calibrate() {
    let period_fs = hpet_read(HPET_CAPABILITIES) >> 32;
    assert!(
        period_fs > 0 && period_fs <= 100_000_000,
        "no HPET at {HPET_BASE:#x}"
    );
    // SAFETY: setting the HPET's enable bit starts its main counter; nothing else uses it.
    unsafe {
        write_volatile(
            (HPET_BASE + HPET_CONFIG) as *mut u64,
            hpet_read(HPET_CONFIG) | 1,
        )
    };
    let hpet_ticks = CALIBRATION_NS * 1_000_000 / period_fs;
    let h0 = hpet_read(HPET_COUNTER);
    let t0 = rdtsc();
    crate::apic::start_masked_count(u32::MAX);
    let (h1, t1) = loop {
        let h = hpet_read(HPET_COUNTER);
        if h.wrapping_sub(h0) >= hpet_ticks {
            break (h, rdtsc());
        }
        core::hint::spin_loop();
    };
    let lapic_ticks = u64::from(u32::MAX - crate::apic::current_count());
    crate::apic::disarm();
    let elapsed_fs = u128::from(h1.wrapping_sub(h0)) * u128::from(period_fs);
    let per_second = |ticks: u64| (u128::from(ticks) * 1_000_000_000_000_000 / elapsed_fs) as u64;
    let tsc_hz = per_second(t1.wrapping_sub(t0));
    TSC_HZ.store(tsc_hz, Relaxed);
    LAPIC_HZ.store(per_second(lapic_ticks), Relaxed);
    NS_PER_TSC_FIXED.store(
        ((1_000_000_000u128 << 32) / u128::from(tsc_hz)) as u64,
        Relaxed,
    );
    TSC_ORIGIN.store(t0, Relaxed);
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
