//! The legacy 8259 PICs: moved out of the way and silenced.
//!
//! The kernel takes all its interrupts through the local APIC (the timer) and MSI-X or the
//! IOAPIC (the NIC). But the firmware leaves the PICs at vector base 0x08 with the PIT's IRQ0
//! unmasked and LINT0 in ExtINT mode: the first `sti` would receive the PIT tick as vector 8,
//! which looks exactly like a double fault. So: remap them to 0x20..0x2F (harmless vectors)
//! and mask every line.

use crate::port::outb;

/// Remaps the PICs to vectors 0x20..0x2F and masks all their lines.
pub fn disable() {
    const STEPS: [(u16, u8); 10] = [
        (0x20, 0x11), // ICW1: initialise, ICW4 follows (master)
        (0xA0, 0x11), // (slave)
        (0x21, 0x20), // ICW2: master vector base 0x20
        (0xA1, 0x28), // slave vector base 0x28
        (0x21, 0x04), // ICW3: slave on the master's IRQ2
        (0xA1, 0x02), // slave identity 2
        (0x21, 0x01), // ICW4: 8086 mode
        (0xA1, 0x01),
        (0x21, 0xFF), // mask everything
        (0xA1, 0xFF),
    ];
    for (port, value) in STEPS {
        // SAFETY: the PICs' command and data ports; reprogramming them affects interrupt
        // delivery only, and interrupts are still disabled.
        unsafe { outb(port, value) };
    }
}
