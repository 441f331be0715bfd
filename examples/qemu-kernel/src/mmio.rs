//! virtio-mmio: finding virtio-net on a machine without PCI (QEMU's `microvm`).
//!
//! **Where the transports are.** With `acpi=off`, QEMU's microvm appends one
//! `virtio_mmio.device=SIZE@ADDRESS:GSI` word per transport that has a device attached to the
//! kernel command line (Linux's syntax; QEMU 7.2 writes `512@0xfeb00e00:12` for a single
//! `-device virtio-net-device`, which it puts in the last of its 8 slots). Those words are what
//! [`find_virtio_net`] probes first. Without them (`-M microvm,auto-kernel-cmdline=off`) and
//! without ACPI, it probes microvm's fixed layout instead, from the last slot down: [`MICROVM_SLOTS`] transports of
//! [`MICROVM_SLOT_SIZE`] bytes from [`MICROVM_BASE`], slot `i` wired to GSI
//! [`MICROVM_GSI_BASE`]` + i` (hw/i386/microvm.c; early versions put the slots at 0xc0000000,
//! which is why the command line comes first). With ACPI the transports and their GSIs are
//! described only in the DSDT, which this kernel does not read: boot microvm with `acpi=off`.
//!
//! **Probing a slot** reads three registers: the magic value `0x74726976` ("virt"), the
//! version (2: the modern interface; QEMU gives 1, legacy, unless started with
//! `-global virtio-mmio.force-legacy=false`) and the device ID (1: network; 0: an empty slot).
//!
//! The interrupt: each transport raises one line, level-triggered, on the IOAPIC input of its
//! GSI; the handler reads `InterruptStatus` and writes the same bits to `InterruptACK`
//! (`nic_irq::setup_mmio`).

use core::ptr::{read_volatile, NonNull};

use virtio_drivers::transport::mmio::{MmioTransport, VirtIOHeader};

use crate::cmdline::{BootInfo, VirtioMmioArg};

/// microvm's first virtio-mmio slot (QEMU 7.2 and since the base last moved), probed when the command line names
/// none.
pub const MICROVM_BASE: u64 = 0xFEB0_0000;
/// Bytes per microvm slot.
pub const MICROVM_SLOT_SIZE: u64 = 512;
/// microvm's slots without ACPI.
pub const MICROVM_SLOTS: u64 = 8;
/// The GSI of microvm's slot 0 without ACPI.
pub const MICROVM_GSI_BASE: u32 = 5;

const MAGIC: u32 = 0x7472_6976;
const MODERN: u32 = 2;
const DEVICE_NET: u32 = 1;
const REG_MAGIC: usize = 0x000;
const REG_VERSION: usize = 0x004;
const REG_DEVICE_ID: usize = 0x008;
/// `InterruptStatus` (read): bit 0 a used buffer, bit 1 a configuration change.
pub const REG_INTERRUPT_STATUS: usize = 0x060;
/// `InterruptACK` (write): the bits handled.
pub const REG_INTERRUPT_ACK: usize = 0x064;
/// The header and the device configuration behind it: the least a slot must span.
const MIN_SIZE: u64 = 0x100 + 8;

/// Where the virtio-net transport is and what interrupts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicMmio {
    /// CPU address of the registers (identity mapped).
    pub base: usize,
    /// Bytes of register space.
    pub size: usize,
    /// The IOAPIC input its interrupt line drives.
    pub gsi: u32,
    /// Found from a `virtio_mmio.device=` word (else by probing microvm's fixed slots).
    pub from_cmdline: bool,
}

/// Why no virtio-mmio network device could be used.
#[derive(Debug)]
pub enum MmioError {
    /// No slot holds a network device.
    NotFound,
    /// The network device speaks only the legacy interface (version 1).
    Legacy {
        /// Its registers.
        base: u64,
    },
    /// A `virtio_mmio.device=` word is outside the kernel's identity map or too small.
    BadSlot(VirtioMmioArg),
    /// The command line names no transport and the machine has ACPI, where the GSIs are not
    /// microvm's fixed ones.
    AcpiOnly,
    /// virtio-drivers' transport refused the device.
    Transport(virtio_drivers::transport::mmio::MmioError),
}

/// The identity map covers the first 4 GiB (`boot.rs`).
const MAPPED: u64 = 1 << 32;

/// What a slot holds: `(magic, version, device ID)`.
fn probe(base: u64) -> (u32, u32, u32) {
    let reg = |offset: usize| {
        // SAFETY: `base` is below 4 GiB (checked by the callers), so identity mapped; the
        // header's first three registers are read-only and reading them has no side effect.
        unsafe { read_volatile((base as usize + offset) as *const u32) }
    };
    (reg(REG_MAGIC), reg(REG_VERSION), reg(REG_DEVICE_ID))
}

/// The slots to probe: the command line's `virtio_mmio.device=` words, else microvm's fixed
/// layout on a machine without ACPI.
fn slots(boot: &BootInfo) -> Result<impl Iterator<Item = (VirtioMmioArg, bool)> + '_, MmioError> {
    let listed = boot.cmdline.virtio_mmio().next().is_some();
    if !listed && boot.rsdp.is_some() {
        return Err(MmioError::AcpiOnly);
    }
    // QEMU fills the slots from the last one down (and lists them on the command line in that
    // order), so probing top-down meets the devices in the order they were given.
    let fixed = (0..MICROVM_SLOTS).rev().map(|i| VirtioMmioArg {
        address: MICROVM_BASE + i * MICROVM_SLOT_SIZE,
        size: MICROVM_SLOT_SIZE,
        gsi: MICROVM_GSI_BASE + i as u32,
    });
    Ok(boot
        .cmdline
        .virtio_mmio()
        .map(|a| (a, true))
        .chain(fixed.filter(move |_| !listed).map(|a| (a, false))))
}

/// Finds the first virtio-net device on virtio-mmio (see the module's documentation for where
/// it looks) and returns virtio-drivers' transport for it and its location.
pub fn find_virtio_net(boot: &BootInfo) -> Result<(MmioTransport<'static>, NicMmio), MmioError> {
    let mut legacy = None;
    for (slot, from_cmdline) in slots(boot)? {
        if slot.size < MIN_SIZE || slot.address.saturating_add(slot.size) > MAPPED {
            return Err(MmioError::BadSlot(slot));
        }
        let (magic, version, device) = probe(slot.address);
        if magic != MAGIC || device != DEVICE_NET {
            continue;
        }
        if version != MODERN {
            legacy.get_or_insert(slot.address);
            continue;
        }
        let nic = NicMmio {
            base: slot.address as usize,
            size: slot.size as usize,
            gsi: slot.gsi,
            from_cmdline,
        };
        let header = NonNull::new(nic.base as *mut VirtIOHeader).ok_or(MmioError::NotFound)?;
        // SAFETY: `header` is a virtio-mmio transport's register block of `size` bytes (just
        // probed: magic, version 2, a network device), identity mapped, and nothing else in
        // the kernel accesses it except the interrupt handler's reads of InterruptStatus and
        // writes of InterruptACK, which select nothing the transport relies on.
        let transport =
            unsafe { MmioTransport::new(header, nic.size) }.map_err(MmioError::Transport)?;
        return Ok((transport, nic));
    }
    Err(legacy.map_or(MmioError::NotFound, |base| MmioError::Legacy { base }))
}
