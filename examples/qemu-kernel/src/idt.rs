//! The IDT: 256 gates, one assembly stub each, one Rust dispatcher, handlers registered by
//! vector.
//!
//! ```text
//!  gate v (IST stack) ─► stub v: push error code (0 where the CPU pushes none), push v
//!    ─► common: save 15 registers, cld, fxsave64 (512 bytes, 16-aligned) ─► dispatch(frame)
//!    ◄─ fxrstor64, restore registers, drop the two words, iretq
//!  dispatch: vector < 32 ─► CPU exception: print vector, error code, RIP (and CR2), exit
//!            spurious (0xFF) ─► nothing (no EOI, as the APIC wants)
//!            else ─► the registered handler, then the LAPIC EOI
//! ```
//!
//! Why the stub saves the SSE state: Rust code in a handler uses SSE registers freely (a 64-byte
//! copy becomes `movups`), and the interrupted code's `xmm0` would be corrupted otherwise. Why
//! `cld`: the interrupted code may be in the middle of a backwards `memmove` (direction flag
//! set), and the handler's code assumes the ABI's clear flag; `iretq` restores the old flags.
//!
//! Each handled interrupt is also recorded by kind ([`IrqKind`]) for the idle loop's wakeup
//! accounting ([`take_kinds_seen`]), and device interrupts are counted
//! ([`device_interrupts`]).

use core::arch::{asm, global_asm};
use core::cell::UnsafeCell;
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};

use crate::gdt::{IST_EXCEPTIONS, IST_INTERRUPTS, KERNEL_CS};

/// The APIC's spurious-interrupt vector (`apic.rs` programs it).
pub const SPURIOUS_VECTOR: u8 = 0xFF;

/// What kind of interrupt a vector carries, for counting what woke the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum IrqKind {
    /// The LAPIC's one-shot deadline timer.
    Timer = 1,
    /// A device (the NIC).
    Device = 2,
    /// Anything else: spurious or unregistered vectors.
    Other = 4,
}

/// Kinds of interrupt handled since the last [`take_kinds_seen`]: a bit set of [`IrqKind`].
static KINDS_SEEN: AtomicU8 = AtomicU8::new(0);

/// Interrupts handled on vectors of kind [`IrqKind::Device`] (the NIC's: this kernel has no
/// other device that interrupts), whatever handler they have: the same count for the zcnet
/// kernel and the smoltcp baseline.
static DEVICE_INTERRUPTS: AtomicU64 = AtomicU64::new(0);

/// Device interrupts handled since boot (every NIC vector: MSI-X RX, TX and configuration, the
/// INTx or virtio-mmio line).
pub fn device_interrupts() -> u64 {
    DEVICE_INTERRUPTS.load(Relaxed)
}

/// Registered handlers: a `fn()` as `usize`, 0 for none.
static HANDLERS: [AtomicUsize; 256] = [const { AtomicUsize::new(0) }; 256];
static KINDS: [AtomicU8; 256] = [const { AtomicU8::new(IrqKind::Other as u8) }; 256];

/// Routes `vector` to `handler`, called in interrupt context (interrupts off, on the IST
/// stack) before the EOI. A handler must not block, allocate or take a lock the interrupted
/// code may hold.
pub fn set_handler(vector: u8, kind: IrqKind, handler: fn()) {
    assert!(vector >= 32, "vectors below 32 are CPU exceptions");
    KINDS[usize::from(vector)].store(kind as u8, Relaxed);
    HANDLERS[usize::from(vector)].store(handler as usize, Relaxed);
}

/// The kinds of interrupt handled since the previous call (a bit set of [`IrqKind`] values),
/// clearing the record.
pub fn take_kinds_seen() -> u8 {
    KINDS_SEEN.swap(0, Relaxed)
}

/// The registers as the stub left them: general registers, then what the stub and the CPU
/// pushed.
#[repr(C)]
#[derive(Debug)]
struct Frame {
    regs: [u64; 15],
    vector: u64,
    error_code: u64,
    rip: u64,
    cs: u64,
    rflags: u64,
    rsp: u64,
    ss: u64,
}

// One 16-byte-aligned stub per vector (`isr_stubs + 16 * v`), then the common path.
global_asm!(
    ".pushsection .text.isr, \"ax\"",
    ".p2align 4",
    ".global isr_stubs",
    "isr_stubs:",
    ".set vec, 0",
    ".rept 256",
    ".p2align 4",
    // Vectors where the CPU pushes an error code: #DF, #TS, #NP, #SS, #GP, #PF, #AC, #CP,
    // #VC, #SX.
    ".if vec == 8 || (vec >= 10 && vec <= 14) || vec == 17 || vec == 21 || vec == 29 || vec == 30",
    ".else",
    "push 0",
    ".endif",
    "push vec",
    "jmp isr_common",
    ".set vec, vec + 1",
    ".endr",
    "isr_common:",
    "push rax",
    "push rbx",
    "push rcx",
    "push rdx",
    "push rsi",
    "push rdi",
    "push rbp",
    "push r8",
    "push r9",
    "push r10",
    "push r11",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "cld",
    "mov rbp, rsp",
    "and rsp, -16",
    "sub rsp, 512",
    "fxsave64 [rsp]",
    "mov rdi, rbp",
    "call {dispatch}",
    "fxrstor64 [rsp]",
    "mov rsp, rbp",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop r11",
    "pop r10",
    "pop r9",
    "pop r8",
    "pop rbp",
    "pop rdi",
    "pop rsi",
    "pop rdx",
    "pop rcx",
    "pop rbx",
    "pop rax",
    "add rsp, 16",
    "iretq",
    ".popsection",
    dispatch = sym dispatch,
);

extern "C" {
    static isr_stubs: u8;
}

/// One gate: a 64-bit interrupt gate to a stub, on an IST stack.
#[derive(Clone, Copy)]
#[repr(C)]
struct Gate {
    offset_low: u16,
    selector: u16,
    ist: u8,
    type_attr: u8,
    offset_mid: u16,
    offset_high: u32,
    reserved: u32,
}

struct IdtCell(UnsafeCell<[Gate; 256]>);

// SAFETY: written only by `init`, once, before interrupts are enabled; afterwards only the CPU
// reads it.
unsafe impl Sync for IdtCell {}

static IDT: IdtCell = IdtCell(UnsafeCell::new(
    [Gate {
        offset_low: 0,
        selector: 0,
        ist: 0,
        type_attr: 0,
        offset_mid: 0,
        offset_high: 0,
        reserved: 0,
    }; 256],
));

/// Fills the 256 gates and loads the IDT.
///
/// # Safety
///
/// Call once, after `gdt::init` (the gates name its code segment and IST stacks), with
/// interrupts disabled.
pub unsafe fn init() {
    // SAFETY: the caller guarantees this is the only access (see `IdtCell`).
    let idt = unsafe { &mut *IDT.0.get() };
    let base = &raw const isr_stubs as u64;
    for (v, gate) in idt.iter_mut().enumerate() {
        let stub = base + 16 * v as u64;
        *gate = Gate {
            offset_low: stub as u16,
            selector: KERNEL_CS,
            ist: if v < 32 {
                IST_EXCEPTIONS
            } else {
                IST_INTERRUPTS
            },
            type_attr: 0x8E, // present, ring 0, 64-bit interrupt gate
            offset_mid: (stub >> 16) as u16,
            offset_high: (stub >> 32) as u32,
            reserved: 0,
        };
    }
    let ptr = (4095u16, idt.as_ptr() as u64);
    let mut desc = [0u8; 10];
    desc[..2].copy_from_slice(&ptr.0.to_le_bytes());
    desc[2..].copy_from_slice(&ptr.1.to_le_bytes());
    // SAFETY: `desc` holds limit and base of a valid, 'static IDT whose gates point at the stubs.
    unsafe {
        asm!("lidt [{}]", in(reg) desc.as_ptr(), options(readonly, nostack, preserves_flags))
    };
}

extern "C" fn dispatch(frame: &Frame) {
    let vector = frame.vector as u8;
    if vector < 32 {
        exception(frame);
    }
    if vector == SPURIOUS_VECTOR {
        KINDS_SEEN.fetch_or(IrqKind::Other as u8, Relaxed);
        return;
    }
    let handler = HANDLERS[usize::from(vector)].load(Relaxed);
    let kind = KINDS[usize::from(vector)].load(Relaxed);
    KINDS_SEEN.fetch_or(kind, Relaxed);
    if kind == IrqKind::Device as u8 {
        DEVICE_INTERRUPTS.fetch_add(1, Relaxed);
    }
    if handler != 0 {
        // SAFETY: only `set_handler` stores non-zero values, and it stores `fn()` pointers.
        let handler: fn() = unsafe { core::mem::transmute::<usize, fn()>(handler) };
        handler();
    }
    crate::apic::eoi();
}

const EXCEPTION_NAMES: [&str; 32] = [
    "divide error",
    "debug",
    "NMI",
    "breakpoint",
    "overflow",
    "bound range",
    "invalid opcode",
    "device not available",
    "double fault",
    "coprocessor segment overrun",
    "invalid TSS",
    "segment not present",
    "stack fault",
    "general protection",
    "page fault",
    "reserved",
    "x87 floating point",
    "alignment check",
    "machine check",
    "SIMD floating point",
    "virtualization",
    "control protection",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "hypervisor injection",
    "VMM communication",
    "security",
    "reserved",
];

/// A CPU exception is a kernel bug: say what and where, then stop QEMU with the failure code.
fn exception(frame: &Frame) -> ! {
    let mut out = crate::serial::emergency_writer();
    let v = frame.vector as usize;
    let _ = write!(
        out,
        "EXCEPTION {v} ({}): error code {:#x}, RIP {:#x}, RSP {:#x}, RFLAGS {:#x}",
        EXCEPTION_NAMES[v % 32],
        frame.error_code,
        frame.rip,
        frame.rsp,
        frame.rflags
    );
    if v == 14 {
        let cr2: u64;
        // SAFETY: reading CR2 has no side effects.
        unsafe { asm!("mov {}, cr2", out(reg) cr2, options(nomem, nostack, preserves_flags)) };
        let _ = write!(out, ", CR2 {cr2:#x}");
    }
    let _ = writeln!(out, " (cs {:#x}, ss {:#x})", frame.cs, frame.ss);
    crate::exit::exit(crate::exit::ExitCode::Panic)
}

/// Enables interrupts.
pub fn enable() {
    // SAFETY: the IDT, the APIC and the handlers are set up before the kernel calls this.
    unsafe { asm!("sti", options(nostack)) };
}

/// Disables interrupts.
pub fn disable() {
    // SAFETY: masking interrupts has no memory effects.
    unsafe { asm!("cli", options(nostack)) };
}
