//! Leaving QEMU with a status: the `isa-debug-exit` device at port 0xf4.
//!
//! Writing `v` there makes QEMU exit with status `(v << 1) | 1`, so QEMU can never exit 0 this
//! way: `run.sh` maps [`ExitCode::Success`]'s 33 to 0.

use crate::port::outl;

/// What the kernel tells QEMU when it stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ExitCode {
    /// The test run passed: QEMU exits 33.
    Success = 0x10,
    /// An invariant did not hold at the end of a test run: QEMU exits 35.
    Failure = 0x11,
    /// A panic or a CPU exception: QEMU exits 37.
    Panic = 0x12,
}

/// Stops the machine with `code`. Without the exit device (QEMU started without
/// `-device isa-debug-exit,iobase=0xf4,iosize=0x04`), halts forever with interrupts off.
pub fn exit(code: ExitCode) -> ! {
    // SAFETY: port 0xf4 is QEMU's isa-debug-exit device (or nothing); writing it touches no
    // memory.
    unsafe { outl(0xf4, code as u32) };
    loop {
        // SAFETY: stopping the CPU for good; `cli; hlt` touches no memory.
        unsafe { core::arch::asm!("cli", "hlt", options(nomem, nostack)) };
    }
}
