//! The GDT with a TSS, for its interrupt stack table (IST).
//!
//! Why a TSS at all in a kernel with one privilege level: the precompiled `core` of the host
//! target may keep data below the stack pointer (the red zone), and an interrupt frame pushed
//! onto the interrupted stack would overwrite it. An IST entry makes the CPU switch to a
//! separate stack for every gate that names it (`idt.rs` names one on all 256), so nothing is
//! ever pushed below the interrupted code's stack pointer.
//!
//! Two stacks: [`IST_INTERRUPTS`] for device and timer interrupts (which never nest: interrupt
//! gates clear IF) and [`IST_EXCEPTIONS`] for CPU exceptions, so a fault inside an interrupt
//! handler does not re-enter the stack that handler is running on.

use core::arch::asm;
use core::cell::UnsafeCell;
use core::mem::size_of;

/// IST index (1-based, as the IDT gate wants it) for interrupts.
pub const IST_INTERRUPTS: u8 = 1;
/// IST index for CPU exceptions.
pub const IST_EXCEPTIONS: u8 = 2;
/// Kernel code segment selector.
pub const KERNEL_CS: u16 = 0x08;
const KERNEL_DS: u16 = 0x10;
const TSS_SELECTOR: u16 = 0x18;

const IST_STACK_SIZE: usize = 64 * 1024;

/// The 64-bit task state segment: only the IST entries matter here.
#[repr(C, packed(4))]
struct Tss {
    reserved0: u32,
    rsp: [u64; 3],
    reserved1: u64,
    ist: [u64; 7],
    reserved2: u64,
    reserved3: u16,
    iomap_base: u16,
}

#[repr(C, align(16))]
struct Stack([u8; IST_STACK_SIZE]);

struct Tables {
    /// null, code (0x08), data (0x10), TSS (0x18, 16 bytes).
    gdt: [u64; 5],
    tss: Tss,
    stacks: [Stack; 2],
}

struct TablesCell(UnsafeCell<Tables>);

// SAFETY: written only by `init`, once, on the boot CPU before interrupts are enabled; the CPU
// reads the tables afterwards and no Rust code touches them again. (All zero until then, so the
// static, stacks included, lives in .bss.)
unsafe impl Sync for TablesCell {}

static TABLES: TablesCell = TablesCell(UnsafeCell::new(Tables {
    gdt: [0; 5],
    tss: Tss {
        reserved0: 0,
        rsp: [0; 3],
        reserved1: 0,
        ist: [0; 7],
        reserved2: 0,
        reserved3: 0,
        iomap_base: 0,
    },
    stacks: [const { Stack([0; IST_STACK_SIZE]) }; 2],
}));

#[repr(C, packed)]
struct DescriptorPointer {
    limit: u16,
    base: u64,
}

/// Builds and loads the GDT and the TSS (IST stacks), reloads the segment registers.
///
/// # Safety
///
/// Call once, on the boot CPU, with interrupts disabled.
pub unsafe fn init() {
    // SAFETY: the caller guarantees this is the only access (see `TablesCell`).
    let t = unsafe { &mut *TABLES.0.get() };
    // No I/O permission bitmap: its offset is the TSS's end.
    t.tss.iomap_base = size_of::<Tss>() as u16;
    for (i, stack) in t.stacks.iter().enumerate() {
        t.tss.ist[i] = stack.0.as_ptr_range().end as u64;
    }
    let tss = &raw const t.tss as u64;
    let limit = (size_of::<Tss>() - 1) as u64;
    t.gdt = [
        0,
        0x00AF_9A00_0000_FFFF, // 64-bit code, present, ring 0
        0x00CF_9200_0000_FFFF, // data, present, writable
        // Available 64-bit TSS (type 9, present): base and limit split across the fields.
        limit | (tss & 0xFF_FFFF) << 16 | 0x89 << 40 | ((tss >> 24) & 0xFF) << 56,
        tss >> 32,
    ];
    let ptr = DescriptorPointer {
        limit: (size_of::<[u64; 5]>() - 1) as u16,
        base: t.gdt.as_ptr() as u64,
    };
    // SAFETY: the GDT is valid and 'static; the new CS and data selectors describe the same flat
    // segments as the boot GDT, so execution continues unchanged; the TSS descriptor points at a
    // valid, 'static TSS.
    unsafe {
        asm!(
            "lgdt [{ptr}]",
            "push {cs}",
            "lea {tmp}, [rip + 2f]",
            "push {tmp}",
            "retfq",
            "2:",
            "mov ds, {ds:x}",
            "mov es, {ds:x}",
            "mov ss, {ds:x}",
            "ltr {tss:x}",
            ptr = in(reg) &ptr,
            cs = const KERNEL_CS as u64,
            ds = in(reg) KERNEL_DS,
            tss = in(reg) TSS_SELECTOR,
            tmp = out(reg) _,
        );
    }
}
