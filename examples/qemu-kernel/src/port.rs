//! x86 port I/O (`in` / `out`): the serial port, the PICs, PCI configuration and QEMU's exit
//! device are all reached this way.

use core::arch::asm;

/// Writes a byte to an I/O port.
///
/// # Safety
///
/// Writing a port has whatever effect the device behind it gives it: the caller must know what
/// `port` is and that the write cannot break memory safety (e.g. by reprogramming DMA).
pub unsafe fn outb(port: u16, value: u8) {
    // SAFETY: the caller vouches for the device's reaction; `out` touches no memory.
    unsafe {
        asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack, preserves_flags))
    };
}

/// Reads a byte from an I/O port.
///
/// # Safety
///
/// As for [`outb`]: some devices change state when read.
pub unsafe fn inb(port: u16) -> u8 {
    let value: u8;
    // SAFETY: the caller vouches for the device's reaction; `in` touches no memory.
    unsafe {
        asm!("in al, dx", out("al") value, in("dx") port, options(nomem, nostack, preserves_flags))
    };
    value
}

/// Writes a 32-bit value to an I/O port.
///
/// # Safety
///
/// As for [`outb`].
pub unsafe fn outl(port: u16, value: u32) {
    // SAFETY: the caller vouches for the device's reaction; `out` touches no memory.
    unsafe {
        asm!("out dx, eax", in("dx") port, in("eax") value, options(nomem, nostack, preserves_flags))
    };
}

/// Reads a 32-bit value from an I/O port.
///
/// # Safety
///
/// As for [`outb`].
pub unsafe fn inl(port: u16) -> u32 {
    let value: u32;
    // SAFETY: the caller vouches for the device's reaction; `in` touches no memory.
    unsafe {
        asm!("in eax, dx", out("eax") value, in("dx") port, options(nomem, nostack, preserves_flags))
    };
    value
}
