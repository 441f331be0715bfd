//! From QEMU's PVH entry to Rust: the ELF note, 32-bit protected mode to 64-bit long mode.
//!
//! QEMU loads the ELF at 1 MiB and, because of the `XEN_ELFNOTE_PHYS32_ENTRY` note, jumps to
//! `pvh_start` (a symbol of the assembly below) in 32-bit protected mode with paging off and
//! `%ebx` pointing at the `hvm_start_info` structure. The assembly below:
//!
//! 1. clears `.bss` (the page tables and boot stack live there, and so do every zero-initialised
//!    `static`: the heap arena, the frame pool, the DMA arena);
//! 2. identity-maps the first 4 GiB with 2 MiB pages, which covers RAM and the devices the
//!    kernel touches (virtio BARs near 0xfe000000, HPET 0xfed00000, IOAPIC 0xfec00000, LAPIC
//!    0xfee00000). Identity mapping is what lets the frame pool's memory be DMA memory as is;
//! 3. turns on PAE and SSE support (CR4: PAE, OSFXSR, OSXMMEXCPT; the precompiled `core` uses
//!    SSE), loads CR3, sets EFER.LME, then CR0.PG | PE | MP with EM and TS clear;
//! 4. far-returns into a 64-bit code segment, loads the data segments and the boot stack, and
//!    calls [`boot_entry`] with the zero-extended start-info pointer (upper register halves are
//!    undefined after the mode switch).
//!
//! The 2 MiB pages are mapped write-back everywhere. QEMU does not model caches, so device
//! memory behaves; a kernel for real hardware would mark the MMIO range uncacheable (PCD).

use core::arch::global_asm;

/// Size of the stack the kernel runs on (interrupts run on their own IST stacks, see `gdt.rs`).
pub const BOOT_STACK_SIZE: usize = 256 * 1024;

global_asm!(
    // The PVH note: namesz 4, descsz 8, type 18 (XEN_ELFNOTE_PHYS32_ENTRY), "Xen\0", entry.
    ".pushsection .note.Xen, \"a\", @note",
    ".p2align 2",
    ".long 4",
    ".long 8",
    ".long 18",
    ".asciz \"Xen\"",
    ".quad pvh_start",
    ".popsection",
    // Page tables and the boot stack, in .bss (cleared before use).
    ".pushsection .bss.boot, \"aw\", @nobits",
    ".p2align 12",
    "boot_pml4: .skip 4096",
    "boot_pdpt: .skip 4096",
    "boot_pd: .skip 4096 * 4",
    ".p2align 4",
    "boot_stack_bottom: .skip {stack_size}",
    "boot_stack_top:",
    ".popsection",
    // A GDT just for the switch to long mode: null, 64-bit code (0x08), data (0x10).
    ".pushsection .rodata.boot, \"a\"",
    ".p2align 3",
    "boot_gdt:",
    ".quad 0",
    ".quad 0x00AF9A000000FFFF",
    ".quad 0x00CF92000000FFFF",
    "boot_gdt_end:",
    "boot_gdt_ptr:",
    ".word boot_gdt_end - boot_gdt - 1",
    ".long boot_gdt",
    ".popsection",
    ".pushsection .text.boot, \"ax\"",
    ".code32",
    ".global pvh_start",
    "pvh_start:",
    "cli",
    "cld",
    // 1. Clear .bss (keeps %ebx, the start-info pointer).
    "mov edi, offset __bss_start",
    "mov ecx, offset __bss_end",
    "sub ecx, edi",
    "shr ecx, 2",
    "xor eax, eax",
    "rep stosd",
    // 2. PML4[0] -> PDPT; PDPT[0..4] -> the four page directories; 2048 PDEs of 2 MiB each.
    "mov eax, offset boot_pdpt",
    "or eax, 3",
    "mov [boot_pml4], eax",
    "xor ecx, ecx",
    "2:",
    "mov eax, ecx",
    "shl eax, 12",
    "add eax, offset boot_pd",
    "or eax, 3",
    "mov [boot_pdpt + ecx * 8], eax",
    "inc ecx",
    "cmp ecx, 4",
    "jne 2b",
    "xor ecx, ecx",
    "3:",
    "mov eax, ecx",
    "shl eax, 21",
    "or eax, 0x83", // present, writable, 2 MiB page
    "mov [boot_pd + ecx * 8], eax",
    "inc ecx",
    "cmp ecx, 2048",
    "jne 3b",
    // 3. CR4.PAE | OSFXSR | OSXMMEXCPT, CR3, EFER.LME, CR0.PG | PE | MP, EM and TS clear.
    "mov eax, cr4",
    "or eax, (1 << 5) | (1 << 9) | (1 << 10)",
    "mov cr4, eax",
    "mov eax, offset boot_pml4",
    "mov cr3, eax",
    "mov ecx, 0xC0000080",
    "rdmsr",
    "or eax, 1 << 8",
    "wrmsr",
    "mov eax, cr0",
    "and eax, ~((1 << 2) | (1 << 3))",
    "or eax, (1 << 31) | (1 << 1) | 1",
    "mov cr0, eax",
    // 4. Into 64-bit code.
    "lgdt [boot_gdt_ptr]",
    "mov eax, offset boot_long_mode",
    "push 0x08",
    "push eax",
    "retf",
    ".code64",
    "boot_long_mode:",
    "mov ax, 0x10",
    "mov ds, ax",
    "mov es, ax",
    "mov ss, ax",
    "xor eax, eax",
    "mov fs, ax",
    "mov gs, ax",
    "lea rsp, [rip + boot_stack_top]",
    "fninit",
    "mov edi, ebx",
    "call {entry}",
    "5:",
    "hlt",
    "jmp 5b",
    ".popsection",
    stack_size = const BOOT_STACK_SIZE,
    entry = sym boot_entry,
);

/// The first Rust code: runs on the boot stack with interrupts off.
extern "C" fn boot_entry(start_info: u64) -> ! {
    crate::kernel_main(start_info as usize)
}
