//! The local APIC (EOI, the one-shot deadline timer) and the IOAPIC (the NIC's INTx line, the
//! fallback when MSI-X cannot be set up).
//!
//! The LAPIC timer in one-shot mode is the kernel's only timer interrupt: `platform.rs` arms it
//! for the executor's next deadline right before halting and disarms it after. There is no
//! periodic tick. (QEMU's TCG offers no TSC-deadline mode, so the timer counts down at the
//! APIC bus rate divided by 16; `clock.rs` measures that rate against the HPET.)

use core::ptr::{read_volatile, write_volatile};

const LAPIC_BASE: usize = 0xFEE0_0000;
const IOAPIC_BASE: usize = 0xFEC0_0000;

const TPR: usize = 0x80;
const EOI: usize = 0xB0;
const SVR: usize = 0xF0;
const LVT_TIMER: usize = 0x320;
const TIMER_INITIAL: usize = 0x380;
const TIMER_CURRENT: usize = 0x390;
const TIMER_DIVIDE: usize = 0x3E0;
const LVT_MASKED: u32 = 1 << 16;

/// The LAPIC timer's vector.
pub const TIMER_VECTOR: u8 = 0x30;

fn lapic_read(reg: usize) -> u32 {
    // SAFETY: the LAPIC's registers are identity mapped at LAPIC_BASE (boot.rs maps the first
    // 4 GiB); `reg` is one of the register offsets above.
    unsafe { read_volatile((LAPIC_BASE + reg) as *const u32) }
}

fn lapic_write(reg: usize, value: u32) {
    // SAFETY: as in `lapic_read`; the registers written here control this CPU's interrupts and
    // timer only.
    unsafe { write_volatile((LAPIC_BASE + reg) as *mut u32, value) }
}

/// Enables the LAPIC (spurious vector 0xFF, all priorities accepted) and sets the timer up as a
/// masked one-shot counting at bus / 16.
pub fn init() {
    lapic_write(TPR, 0);
    lapic_write(SVR, 0x100 | u32::from(crate::idt::SPURIOUS_VECTOR));
    lapic_write(TIMER_DIVIDE, 0x3);
    lapic_write(LVT_TIMER, LVT_MASKED | u32::from(TIMER_VECTOR));
    lapic_write(TIMER_INITIAL, 0);
}

/// Signals the end of the interrupt being handled.
pub fn eoi() {
    lapic_write(EOI, 0);
}

/// The local APIC's id (for MSI and IOAPIC destinations).
pub fn id() -> u8 {
    (lapic_read(0x20) >> 24) as u8
}

/// Starts the timer counting down from `count` with its interrupt masked (for calibration).
pub fn start_masked_count(count: u32) {
    lapic_write(LVT_TIMER, LVT_MASKED | u32::from(TIMER_VECTOR));
    lapic_write(TIMER_INITIAL, count);
}

/// The timer's current count.
pub fn current_count() -> u32 {
    lapic_read(TIMER_CURRENT)
}

/// Arms the one-shot timer to interrupt after `count` ticks (0 is raised to 1).
pub fn arm(count: u32) {
    lapic_write(LVT_TIMER, u32::from(TIMER_VECTOR));
    lapic_write(TIMER_INITIAL, count.max(1));
}

/// Stops the timer (a pending expiry that already fired stays a pending interrupt).
pub fn disarm() {
    lapic_write(TIMER_INITIAL, 0);
}

/// Routes IOAPIC input `pin` to `vector` on this CPU, level-triggered (PCI INTx), unmasked.
/// Returns `false` if the IOAPIC has no such pin.
pub fn ioapic_route_level(pin: u8, vector: u8) -> bool {
    let ioapic = |reg: u32, value: Option<u32>| -> u32 {
        // SAFETY: the IOAPIC's index and data registers are identity mapped at IOAPIC_BASE;
        // `reg` is its version register or one of its redirection entries.
        unsafe {
            write_volatile(IOAPIC_BASE as *mut u32, reg);
            let data = (IOAPIC_BASE + 0x10) as *mut u32;
            match value {
                Some(v) => {
                    write_volatile(data, v);
                    v
                }
                None => read_volatile(data),
            }
        }
    };
    let pins = ((ioapic(1, None) >> 16) & 0xFF) + 1;
    if u32::from(pin) >= pins {
        return false;
    }
    let entry = 0x10 + 2 * u32::from(pin);
    ioapic(entry + 1, Some(u32::from(id()) << 24));
    // Level-triggered (bit 15), physical destination, fixed delivery, unmasked.
    ioapic(entry, Some(u32::from(vector) | 1 << 15));
    true
}
