//! COM1 (16550 UART at port 0x3F8): the kernel's console, and the `print!` / `println!` macros.
//!
//! QEMU connects it to its standard output (`-serial stdio`); the integration tests read the
//! `READY` and `IDLE` lines from there. Output is serialised by a spin lock. Interrupt handlers
//! never print, except the fatal paths (panic, CPU exception), which use
//! [`emergency_writer`] so a lock held by the interrupted code cannot stop the last words.

use core::fmt::{self, Write};

use crate::port::{inb, outb};

const COM1: u16 = 0x3F8;

/// A writer to COM1 (no state: every byte goes straight to the UART).
#[derive(Debug)]
pub struct Serial(());

static LOCK: spin::Mutex<Serial> = spin::Mutex::new(Serial(()));

/// Programs COM1 for 115200 baud, 8 data bits, no parity, one stop bit, FIFOs on, no
/// interrupts.
pub fn init() {
    const SETUP: [(u16, u8); 7] = [
        (1, 0x00), // no UART interrupts
        (3, 0x80), // DLAB on: the next two registers are the divisor
        (0, 0x01), // divisor 1: 115200 baud
        (1, 0x00),
        (3, 0x03), // DLAB off, 8N1
        (2, 0xC7), // FIFOs on and cleared, 14-byte threshold
        (4, 0x03), // DTR, RTS
    ];
    for (reg, value) in SETUP {
        // SAFETY: COM1's registers; setting up the UART affects nothing but the UART.
        unsafe { outb(COM1 + reg, value) };
    }
}

impl Write for Serial {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            // SAFETY: reading the line status register and writing the data register of COM1
            // only moves a byte out of the UART.
            unsafe {
                while inb(COM1 + 5) & 0x20 == 0 {
                    core::hint::spin_loop();
                }
                outb(COM1, b);
            }
        }
        Ok(())
    }
}

/// A writer that ignores the lock, for the panic handler and CPU exceptions: the kernel stops
/// right after, so interleaving with an interrupted writer is the lesser evil.
pub fn emergency_writer() -> Serial {
    Serial(())
}

#[doc(hidden)]
pub fn _print(args: fmt::Arguments<'_>) {
    let _ = LOCK.lock().write_fmt(args);
}

/// Prints to COM1.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => ($crate::serial::_print(format_args!($($arg)*)));
}

/// Prints a line to COM1.
#[macro_export]
macro_rules! println {
    () => ($crate::print!("\n"));
    ($($arg:tt)*) => ($crate::serial::_print(format_args!("{}\n", format_args!($($arg)*))));
}
