//! Routing the NIC's interrupts to handlers: MSI-X with separate RX and TX vectors, or the
//! legacy INTx line through the IOAPIC as the fallback.
//!
//! **MSI-X** ([`setup_msix`]). The device raises a vector by writing a message to the LAPIC's
//! address; the kernel must (1) fill the MSI-X table entries (address `0xFEE00000 | apic_id <<
//! 12`, data = vector, unmasked), (2) tell virtio which entry each source uses, in the common
//! configuration: `queue_msix_vector` for queue 0 (RX) and queue 1 (TX), `msix_config` for
//! configuration changes, and read each back (the device answers 0xFFFF, "no vector", if it
//! refuses), (3) enable MSI-X in the capability. This runs *after* the driver is constructed:
//! device initialisation (inside virtio-drivers) resets the vectors to "none", and with MSI-X
//! enabled and no vectors assigned no interrupt arrives at all.
//!
//! **INTx** ([`setup_intx`]). One level-triggered line for everything, routed through the
//! IOAPIC pin the firmware wrote into the Interrupt Line register. The handler must read the
//! virtio ISR status register before the EOI: the read acknowledges the interrupt and lowers
//! the line, which would otherwise fire again at once.
//!
//! **virtio-mmio** ([`setup_mmio`]). One level-triggered line per transport, on the IOAPIC input
//! of the GSI the transport was found with (QEMU's microvm: no PCI, no MSI). The handler reads
//! `InterruptStatus` and writes the same bits to `InterruptACK`, which lowers the line, before
//! the EOI.
//!
//! Handlers are plain `fn()`s, called in interrupt context before the EOI (see
//! [`idt::set_handler`]), so a driver other than zcnet's can reuse this routing.

use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use virtio_drivers::transport::pci::bus::ConfigurationAccess;

use crate::idt::{self, IrqKind};
use crate::mmio::{self, NicMmio};
use crate::pci::{NicPci, PortCam};

/// Vector for RX-queue interrupts (MSI-X table entry 0).
pub const RX_VECTOR: u8 = 0x40;
/// Vector for TX-queue interrupts (entry 1).
pub const TX_VECTOR: u8 = 0x41;
/// Vector for configuration changes (entry 2).
pub const CONFIG_VECTOR: u8 = 0x42;
/// Vector for the INTx line, or a virtio-mmio transport's line.
pub const INTX_VECTOR: u8 = 0x43;

// Offsets in virtio's common configuration structure.
const COMMON_MSIX_CONFIG: usize = 0x10;
const COMMON_QUEUE_SELECT: usize = 0x16;
const COMMON_QUEUE_MSIX_VECTOR: usize = 0x1A;
const NO_VECTOR: u16 = 0xFFFF;

/// How the NIC's interrupts ended up routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// MSI-X: RX, TX and configuration vectors.
    Msix,
    /// INTx through this IOAPIC pin.
    Intx {
        /// The IOAPIC input.
        pin: u8,
    },
    /// A virtio-mmio transport's line through this IOAPIC pin.
    Mmio {
        /// The IOAPIC input.
        pin: u8,
    },
}

/// Why MSI-X could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsixError {
    /// The device has no MSI-X capability (or its table's BAR is unassigned).
    NoCapability,
    /// The table has fewer than the three entries needed.
    TooFewEntries(u16),
    /// The device did not accept a vector (read back as "no vector").
    Refused {
        /// What was written: the queue index, or `None` for `msix_config`.
        queue: Option<u16>,
    },
}

/// Why INTx could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntxError {
    /// The IOAPIC has no such input.
    NoPin(u32),
}

fn common_write(nic: &NicPci, offset: usize, value: u16) {
    // SAFETY: `common_cfg` is the device's common configuration structure (identity-mapped BAR
    // memory); offsets 0x10..0x1C are 16-bit registers that only select queues and vectors.
    unsafe { write_volatile((nic.common_cfg + offset) as *mut u16, value) };
}

fn common_read(nic: &NicPci, offset: usize) -> u16 {
    // SAFETY: as in `common_write`; reading these registers has no side effects.
    unsafe { read_volatile((nic.common_cfg + offset) as *const u16) }
}

/// Routes the NIC's RX queue to `rx`, its TX queue to `tx` and configuration changes to
/// `config` over MSI-X. Call after the driver is constructed. On error MSI-X stays disabled and
/// [`setup_intx`] can be used instead.
pub fn setup_msix(nic: &NicPci, rx: fn(), tx: fn(), config: fn()) -> Result<Routing, MsixError> {
    let msix = nic.msix.ok_or(MsixError::NoCapability)?;
    if msix.table_size < 3 {
        return Err(MsixError::TooFewEntries(msix.table_size));
    }
    idt::set_handler(RX_VECTOR, IrqKind::Device, rx);
    idt::set_handler(TX_VECTOR, IrqKind::Device, tx);
    idt::set_handler(CONFIG_VECTOR, IrqKind::Device, config);
    let address = 0xFEE0_0000 | u32::from(crate::apic::id()) << 12;
    for (entry, vector) in [RX_VECTOR, TX_VECTOR, CONFIG_VECTOR]
        .into_iter()
        .enumerate()
    {
        let e = (msix.table + 16 * entry) as *mut u32;
        // SAFETY: entry < table_size, inside the identity-mapped MSI-X table; the words are the
        // message address (low, high), data and vector control (0: unmasked).
        unsafe {
            write_volatile(e, address);
            write_volatile(e.add(1), 0);
            write_volatile(e.add(2), u32::from(vector));
            write_volatile(e.add(3), 0);
        }
    }
    for queue in [0u16, 1] {
        common_write(nic, COMMON_QUEUE_SELECT, queue);
        common_write(nic, COMMON_QUEUE_MSIX_VECTOR, queue);
        if common_read(nic, COMMON_QUEUE_MSIX_VECTOR) != queue {
            return Err(MsixError::Refused { queue: Some(queue) });
        }
    }
    common_write(nic, COMMON_MSIX_CONFIG, 2);
    if common_read(nic, COMMON_MSIX_CONFIG) == NO_VECTOR {
        return Err(MsixError::Refused { queue: None });
    }
    // Message control is the upper half of the capability's first dword: set Enable (bit 15),
    // clear Function Mask (bit 14).
    let mut cam = PortCam;
    let header = cam.read_word(nic.function, msix.cap_offset);
    cam.write_word(
        nic.function,
        msix.cap_offset,
        (header | 1 << 31) & !(1 << 30),
    );
    Ok(Routing::Msix)
}

/// The handler of the line route (INTx or virtio-mmio): a `fn(u8)` as `usize`.
static LINE_HANDLER: AtomicUsize = AtomicUsize::new(0);
/// The ISR status register of the INTx route.
static INTX_ISR: AtomicUsize = AtomicUsize::new(0);
/// The virtio-mmio transport's registers.
static MMIO_BASE: AtomicUsize = AtomicUsize::new(0);

/// Passes the acknowledged interrupt status to the line's handler; 0 (the line is shared and
/// another device raised it) calls nothing.
fn call_line_handler(status: u8) {
    if status == 0 {
        return;
    }
    let handler = LINE_HANDLER.load(Relaxed);
    // SAFETY: only `route_line` stores it, and it stores a `fn(u8)`, before the line is
    // unmasked.
    let handler: fn(u8) = unsafe { core::mem::transmute::<usize, fn(u8)>(handler) };
    handler(status);
}

/// Routes IOAPIC input `pin`, level-triggered, to `entry` (which acknowledges the device and
/// calls [`call_line_handler`]), with `handler` as the line's handler.
fn route_line(pin: u8, handler: fn(u8), entry: fn()) -> bool {
    LINE_HANDLER.store(handler as usize, Relaxed);
    idt::set_handler(INTX_VECTOR, IrqKind::Device, entry);
    crate::apic::ioapic_route_level(pin, INTX_VECTOR)
}

fn intx_interrupt() {
    let isr = INTX_ISR.load(Relaxed);
    // SAFETY: `isr` is the device's ISR status byte (set in `setup_intx` before the line was
    // unmasked); reading it acknowledges the interrupt, which is what this handler is for.
    call_line_handler(unsafe { read_volatile(isr as *const u8) });
}

/// Routes the NIC's INTx line to `handler`, called with the ISR status just read (bit 0: a
/// queue interrupt, bit 1: a configuration change). MSI-X must be disabled (it is unless
/// [`setup_msix`] succeeded).
pub fn setup_intx(nic: &NicPci, handler: fn(u8)) -> Result<Routing, IntxError> {
    let pin = nic.interrupt_line;
    INTX_ISR.store(nic.isr, Relaxed);
    if !route_line(pin, handler, intx_interrupt) {
        return Err(IntxError::NoPin(pin.into()));
    }
    Ok(Routing::Intx { pin })
}

fn mmio_interrupt() {
    let base = MMIO_BASE.load(Relaxed);
    // SAFETY: `base` is the transport's register block (set in `setup_mmio` before the line
    // was unmasked), identity mapped. InterruptStatus and InterruptACK are outside the
    // queue-selected registers the driver uses, so touching them here cannot disturb a driver
    // access this interrupt cut into; the write acknowledges what was read and lowers the line.
    let status = unsafe {
        let status = read_volatile((base + mmio::REG_INTERRUPT_STATUS) as *const u32);
        if status != 0 {
            write_volatile((base + mmio::REG_INTERRUPT_ACK) as *mut u32, status);
        }
        status
    };
    // Bits 0 and 1 are all virtio 1.x defines.
    call_line_handler(status as u8);
}

/// Routes a virtio-mmio transport's line to `handler`, called with the `InterruptStatus` bits
/// just acknowledged (bit 0: a used buffer in either queue, bit 1: a configuration change).
/// Its GSI is taken as the input of the one IOAPIC (GSI base 0), as on microvm without ACPI.
pub fn setup_mmio(nic: &NicMmio, handler: fn(u8)) -> Result<Routing, IntxError> {
    let pin = u8::try_from(nic.gsi).map_err(|_| IntxError::NoPin(nic.gsi))?;
    MMIO_BASE.store(nic.base, Relaxed);
    if !route_line(pin, handler, mmio_interrupt) {
        return Err(IntxError::NoPin(nic.gsi));
    }
    Ok(Routing::Mmio { pin })
}
