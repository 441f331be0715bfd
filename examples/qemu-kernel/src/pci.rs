//! PCI: configuration space through ports 0xCF8/0xCFC, finding the virtio-net device, and the
//! addresses its interrupt setup needs.
//!
//! virtio-drivers' [`PciTransport`] does the virtio part (it finds the common, notify, ISR and
//! device configuration structures through the vendor capabilities). It needs the device's
//! BARs already assigned (the firmware did that) and leaves two things to the kernel: the
//! command register (memory decoding and bus mastering, without which the device can neither
//! be reached nor do DMA), and interrupts: virtio-drivers 0.13 never programs MSI-X vectors,
//! and the INTx fallback must read the ISR status register, which the transport owns. So
//! [`find_virtio_net`] also returns a [`NicPci`] with the addresses `nic_irq.rs` uses.

use virtio_drivers::transport::pci::bus::{Command, ConfigurationAccess, DeviceFunction, PciRoot};
use virtio_drivers::transport::pci::{PciTransport, VirtioPciError};

use zcnet_virtio::PciNotify;

use crate::hal::KernelHal;
use crate::port::{inl, outl};

const VIRTIO_VENDOR: u16 = 0x1af4;
/// Modern virtio-net (virtio-drivers' PCI transport is modern-only).
const VIRTIO_NET_MODERN: u16 = 0x1041;

const CAP_MSIX: u8 = 0x11;
const CAP_VENDOR: u8 = 0x09;
const VIRTIO_CFG_COMMON: u8 = 1;
const VIRTIO_CFG_NOTIFY: u8 = 2;
const VIRTIO_CFG_ISR: u8 = 3;

/// Configuration access through the legacy I/O ports (mechanism #1): bus 0..255, no ECAM
/// needed.
#[derive(Debug)]
pub struct PortCam;

fn config_address(df: DeviceFunction, offset: u8) -> u32 {
    1 << 31
        | u32::from(df.bus) << 16
        | u32::from(df.device) << 11
        | u32::from(df.function) << 8
        | u32::from(offset & 0xFC)
}

impl ConfigurationAccess for PortCam {
    fn read_word(&self, df: DeviceFunction, offset: u8) -> u32 {
        // SAFETY: selecting a register and reading it through the configuration ports has no
        // side effects on memory (configuration reads of these devices have none either).
        unsafe {
            outl(0xCF8, config_address(df, offset));
            inl(0xCFC)
        }
    }

    fn write_word(&mut self, df: DeviceFunction, offset: u8, data: u32) {
        // SAFETY: configuration writes change how a device decodes and interrupts; every caller
        // in this kernel writes a register it means to (command, MSI-X control).
        unsafe {
            outl(0xCF8, config_address(df, offset));
            outl(0xCFC, data);
        }
    }

    unsafe fn unsafe_clone(&self) -> Self {
        PortCam
    }
}

/// MSI-X as the device offers it.
#[derive(Clone, Copy, Debug)]
pub struct MsixCapability {
    /// Offset of the capability in configuration space.
    pub cap_offset: u8,
    /// CPU address of the vector table (identity-mapped BAR memory).
    pub table: usize,
    /// Entries in the table.
    pub table_size: u16,
}

/// What interrupt setup needs to know about the virtio-net function.
#[derive(Clone, Copy, Debug)]
pub struct NicPci {
    /// Bus, device, function.
    pub function: DeviceFunction,
    /// CPU address of the virtio common configuration structure (cfg_type 1).
    pub common_cfg: usize,
    /// CPU address of the ISR status byte (cfg_type 3); reading it acknowledges INTx.
    pub isr: usize,
    /// Where the queues' doorbells are (cfg_type 2, with the common configuration), for
    /// zcnet-virtio's [`Doorbells`](zcnet_virtio::Doorbells).
    pub notify: PciNotify,
    /// MSI-X, if the device has it.
    pub msix: Option<MsixCapability>,
    /// The Interrupt Line register (the firmware's IOAPIC pin for INTx).
    pub interrupt_line: u8,
}

/// Why no virtio-net device could be used.
#[derive(Debug)]
pub enum PciError {
    /// No modern virtio-net function on bus 0.
    NotFound,
    /// A capability points at a BAR that is not assigned memory.
    BadBar(u8),
    /// The device lacks a virtio structure the kernel needs (common config, notify or ISR).
    MissingCapability(u8),
    /// virtio-drivers' transport refused the device.
    Transport(VirtioPciError),
}

/// Scans bus 0 for virtio-net (1af4:1041), enables memory decoding and bus mastering, and
/// returns virtio-drivers' transport plus the addresses interrupt setup needs.
pub fn find_virtio_net() -> Result<(PciTransport, NicPci), PciError> {
    let mut root = PciRoot::new(PortCam);
    let (function, _) = root
        .enumerate_bus(0)
        .find(|(_, info)| info.vendor_id == VIRTIO_VENDOR && info.device_id == VIRTIO_NET_MODERN)
        .ok_or(PciError::NotFound)?;
    root.set_command(
        function,
        Command::IO_SPACE | Command::MEMORY_SPACE | Command::BUS_MASTER,
    );
    let nic = describe(&root, function)?;
    let transport =
        PciTransport::new::<KernelHal, _>(&mut root, function).map_err(PciError::Transport)?;
    Ok((transport, nic))
}

/// The CPU address of memory BAR `bar` (32- or 64-bit), if assigned.
fn bar_address(cam: &PortCam, df: DeviceFunction, bar: u8) -> Option<usize> {
    if bar > 5 {
        return None;
    }
    let offset = 0x10 + 4 * bar;
    let low = cam.read_word(df, offset);
    if low & 1 != 0 {
        return None; // an I/O BAR
    }
    let high = if low & 0b110 == 0b100 {
        cam.read_word(df, offset + 4)
    } else {
        0
    };
    let address = (u64::from(high) << 32 | u64::from(low & !0xF)) as usize;
    (address != 0).then_some(address)
}

fn describe(root: &PciRoot<PortCam>, df: DeviceFunction) -> Result<NicPci, PciError> {
    let cam = PortCam;
    let mut common_cfg = None;
    let mut isr = None;
    let mut notify = None;
    let mut msix = None;
    for cap in root.capabilities(df) {
        match cap.id {
            CAP_VENDOR => {
                // virtio_pci_cap: cfg_type at +3, bar at +4, offset at +8.
                let cfg_type = (cap.private_header >> 8) as u8;
                let bar = cam.read_word(df, cap.offset + 4) as u8;
                let offset = cam.read_word(df, cap.offset + 8) as usize;
                let slot = match cfg_type {
                    VIRTIO_CFG_COMMON => &mut common_cfg,
                    VIRTIO_CFG_ISR => &mut isr,
                    VIRTIO_CFG_NOTIFY => {
                        // virtio_pci_notify_cap: length at +12, notify_off_multiplier at +16.
                        if notify.is_none() {
                            let base = bar_address(&cam, df, bar).ok_or(PciError::BadBar(bar))?;
                            notify = Some((
                                base + offset,
                                cam.read_word(df, cap.offset + 12) as usize,
                                cam.read_word(df, cap.offset + 16),
                            ));
                        }
                        continue;
                    }
                    _ => continue,
                };
                if slot.is_none() {
                    *slot = Some(bar_address(&cam, df, bar).ok_or(PciError::BadBar(bar))? + offset);
                }
            }
            CAP_MSIX => {
                // Message control (table size − 1 in bits 0..11) above the header; the table's
                // BAR and offset in the next dword.
                let table = cam.read_word(df, cap.offset + 4);
                let bar = (table & 0x7) as u8;
                msix = bar_address(&cam, df, bar).map(|base| MsixCapability {
                    cap_offset: cap.offset,
                    table: base + (table & !0x7) as usize,
                    table_size: (cap.private_header & 0x7FF) + 1,
                });
            }
            _ => {}
        }
    }
    let common_cfg = common_cfg.ok_or(PciError::MissingCapability(VIRTIO_CFG_COMMON))?;
    let (notify, notify_len, notify_off_multiplier) =
        notify.ok_or(PciError::MissingCapability(VIRTIO_CFG_NOTIFY))?;
    Ok(NicPci {
        function: df,
        common_cfg,
        isr: isr.ok_or(PciError::MissingCapability(VIRTIO_CFG_ISR))?,
        notify: PciNotify {
            common_cfg,
            notify,
            notify_len,
            notify_off_multiplier,
        },
        msix,
        interrupt_line: cam.read_word(df, 0x3C) as u8,
    })
}
