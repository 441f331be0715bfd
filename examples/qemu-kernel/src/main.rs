//! zcnet's example kernel: a freestanding x86_64 kernel, booted by QEMU through PVH, that runs
//! zcnet over virtio-net and serves HTTP, echo and iperf3.
//!
//! What a kernel supplies to use zcnet, and where this one does it:
//!
//! * **a clock, a wait and a signal** for the executor: [`platform`] (TSC calibrated against
//!   the HPET, or the PIT where there is none, in [`clock`], LAPIC one-shot deadlines in
//!   [`apic`], `hlt`), no periodic tick;
//! * **DMA memory and address translation** for the driver: [`hal`] (virtio-drivers' `Hal`,
//!   identity mapped, no bounce buffers) and the frame pool in [`net`] (a `StaticPool` in
//!   `.bss`, which identity mapping makes DMA memory as is);
//! * **the NIC on either machine**: [`nic`] finds virtio-net on PCI ([`pci`], QEMU's q35) or
//!   on virtio-mmio ([`mmio`], QEMU's microvm) at boot;
//! * **interrupt wiring**: [`idt`] and [`gdt`] (gates on IST stacks, SSE state saved),
//!   [`pic`] silenced, [`nic_irq`] (MSI-X vectors per queue, INTx, or the virtio-mmio line
//!   through the IOAPIC), each calling the driver's `VirtioIrq`;
//! * **a heap** for the services' tasks and buffers: [`heap`];
//! * **a secret** for the stack (`zcnet_stack::Secret`, 128 bits, new at every boot): [`entropy`]
//!   (RDRAND; the boot stops with a message on a CPU without it).
//!
//! The rest is what any freestanding Rust program needs ([`boot`], [`serial`], [`libc`],
//! [`exit`](mod@exit), [`port`]) and this kernel's own choices ([`cmdline`], [`services`]).
#![no_std]
#![no_main]
// The `baseline` build runs `baseline::run` instead of zcnet: the zcnet path is left unused.
#![cfg_attr(feature = "baseline", allow(dead_code))]

extern crate alloc;

#[macro_use]
pub mod serial;
pub mod apic;
pub mod boot;
pub mod clock;
pub mod cmdline;
pub mod entropy;
pub mod exit;
pub mod gdt;
pub mod hal;
pub mod heap;
pub mod idt;
pub mod libc;
pub mod mmio;
pub mod net;
pub mod nic;
pub mod nic_irq;
pub mod pci;
pub mod pic;
pub mod platform;
pub mod port;
pub mod services;

#[cfg(feature = "baseline")]
mod baseline;

use core::panic::PanicInfo;

use zcnet_executor::Executor;

use crate::cmdline::BootInfo;
use crate::exit::{exit, ExitCode};

/// The executor's timer tick: deadlines round up to it. Fine enough for the NIC driver's
/// receive deferral (`rx_defer`, tens of microseconds) to wait what it asks rather than up to a
/// millisecond; the timers fire from one-shot LAPIC deadlines, so a fine tick costs no wakeups.
pub const TICK: core::time::Duration = core::time::Duration::from_micros(10);

/// The executor, on the kernel's platform.
pub static EXECUTOR: Executor = Executor::with_tick(&platform::PLATFORM, TICK);

/// The kernel, entered from `boot.rs` with the physical address of PVH's start info.
pub fn kernel_main(start_info: usize) -> ! {
    // SAFETY: called once, first thing, with QEMU's start-info address.
    let boot = unsafe { init(start_info) };
    #[cfg(feature = "baseline")]
    baseline::run(boot);
    #[cfg(not(feature = "baseline"))]
    run(boot)
}

/// Brings the machine up: console, the stack's secret, command line, descriptor tables,
/// interrupt controllers, clock, heap; returns with interrupts enabled, what PVH's start info
/// said and the secret. Stops the machine ([`ExitCode::Failure`]) when there is no random
/// source for the secret.
///
/// # Safety
///
/// Call once, at boot, with interrupts disabled and `start_info` as QEMU passed it.
pub unsafe fn init(start_info: usize) -> BootInfo {
    serial::init();
    let secret = match entropy::secret() {
        Ok(s) => s,
        Err(e) => {
            println!("zcnet kernel: no secret for the stack: {e}");
            exit(ExitCode::Failure)
        }
    };
    // SAFETY: nothing has reused the memory of the start info and the command line yet.
    let boot = unsafe { BootInfo::from_start_info(start_info, secret) };
    // SAFETY: once, at boot, interrupts off; the GDT (with the IST stacks) before the IDT.
    unsafe {
        gdt::init();
        idt::init();
    }
    pic::disable();
    apic::init();
    let reference = clock::calibrate();
    heap::init();
    idt::set_handler(apic::TIMER_VECTOR, idt::IrqKind::Timer, || {});
    idt::enable();
    println!(
        "zcnet kernel: TSC {} MHz, LAPIC timer {} kHz (measured against the {}), ACPI {}",
        clock::tsc_hz() / 1_000_000,
        clock::lapic_hz() / 1000,
        reference.name(),
        if boot.rsdp.is_some() { "yes" } else { "no" }
    );
    boot
}

/// zcnet over virtio-net, the services, and the executor's loop.
fn run(boot: BootInfo) -> ! {
    // SAFETY: this kernel runs on one core, and the loop below (`EXECUTOR.run()`, on this
    // thread of control) is the only one that ever runs the executor; interrupt handlers only
    // wake tasks, they never run the loop.
    let spawner = unsafe { EXECUTOR.local_spawner_unchecked() };
    let net = match net::start(spawner, &boot) {
        Ok(net) => net,
        Err(e) => {
            println!("net: {e}");
            exit(ExitCode::Failure)
        }
    };
    println!(
        "net: virtio-net up, interrupts {:?}, pool {} x {} bytes",
        net.routing,
        net.pool.slot_count(),
        net.pool.slot_size()
    );
    services::spawn(net, boot.cmdline, spawner);
    EXECUTOR.run()
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    use core::fmt::Write;
    let _ = writeln!(serial::emergency_writer(), "PANIC: {info}");
    exit(ExitCode::Panic)
}
