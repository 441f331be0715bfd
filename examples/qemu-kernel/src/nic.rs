//! The NIC on either machine: virtio-net behind PCI (QEMU's `q35`) or behind virtio-mmio
//! (QEMU's `microvm`), found at boot, and its interrupts routed to plain `fn` handlers.
//!
//! ```text
//!  find_virtio_net:  PCI bus 0 has 1af4:1041? ─yes─► PciTransport        (q35)
//!                        │ no (microvm has no PCI: configuration reads return all ones)
//!                        └► virtio-mmio slots ─► MmioTransport           (microvm)
//!  route_interrupts: PCI  ─► MSI-X (RX, TX, config vectors), INTx as the fallback
//!                    MMIO ─► its line through the IOAPIC
//! ```
//!
//! Both transports become one virtio-drivers [`SomeTransport`], so the rest of the kernel (the
//! zcnet driver, the smoltcp baseline) is the same on both machines. What was found is kept for
//! `/stats` and the console ([`location`]).

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use virtio_drivers::transport::SomeTransport;
use zcnet_virtio::{Doorbells, QueueAreas};

use crate::cmdline::{BootInfo, IrqMode};
use crate::mmio::{self, MmioError, NicMmio};
use crate::nic_irq::{self, Routing};
use crate::pci::{self, NicPci, PciError};

/// Where the NIC was found.
#[derive(Clone, Copy, Debug)]
pub enum Location {
    /// A virtio-net PCI function (q35).
    Pci(NicPci),
    /// A virtio-mmio transport (microvm).
    Mmio(NicMmio),
}

impl Location {
    /// The transport's name, for `/stats`: `"pci"` or `"mmio"`.
    pub fn transport(&self) -> &'static str {
        match self {
            Location::Pci(_) => "pci",
            Location::Mmio(_) => "mmio",
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Pci(nic) => write!(
                f,
                "virtio-net-pci at {:02x}:{:02x}.{}",
                nic.function.bus, nic.function.device, nic.function.function
            ),
            Location::Mmio(nic) => write!(
                f,
                "virtio-mmio at {:#x} ({} bytes, GSI {}, {})",
                nic.base,
                nic.size,
                nic.gsi,
                if nic.from_cmdline {
                    "from the command line"
                } else {
                    "probed"
                }
            ),
        }
    }
}

/// Why the NIC could not be found or its interrupts routed.
#[derive(Debug)]
pub enum NicError {
    /// A PCI virtio-net function exists but cannot be used.
    Pci(PciError),
    /// No PCI virtio-net, and none on virtio-mmio either.
    Mmio(MmioError),
    /// No interrupt route could be set up (the reason was printed).
    Interrupts,
}

impl fmt::Display for NicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NicError::Pci(e) => write!(f, "PCI: {e:?}"),
            NicError::Mmio(MmioError::NotFound) => {
                f.write_str("no virtio-net device, neither on PCI nor on virtio-mmio")
            }
            NicError::Mmio(MmioError::Legacy { base }) => write!(
                f,
                "the virtio-mmio network device at {base:#x} is legacy (version 1): start \
                 QEMU with -global virtio-mmio.force-legacy=false"
            ),
            NicError::Mmio(MmioError::AcpiOnly) => f.write_str(
                "no virtio_mmio.device= on the command line and the machine has ACPI: boot \
                 microvm with acpi=off",
            ),
            NicError::Mmio(e) => write!(f, "virtio-mmio: {e:?}"),
            NicError::Interrupts => f.write_str("no interrupt route for the NIC"),
        }
    }
}

/// The NIC's transport as the drivers get it: notifications counted ([`kicks`]), and on PCI
/// with `direct` one write per doorbell (zcnet-virtio's [`Doorbells`]).
pub type NicTransport = Doorbells<SomeTransport<'static>>;

/// Queue notifications (kicks) the NIC's driver made, whichever kernel: both go through
/// [`doorbells`].
static KICKS: AtomicU64 = AtomicU64::new(0);

/// Queue notifications (kicks) since boot.
pub fn kicks() -> u64 {
    KICKS.load(Relaxed)
}

/// Set when the zcnet driver's RX and TX queues both got a doorbell of their own (one write
/// per notification), see [`note_doorbells`].
static DIRECT_DOORBELLS: AtomicBool = AtomicBool::new(false);

/// Records whether `transport`, after the driver set its queues up, rings queues 0 (RX) and 1
/// (TX) with one write each.
pub fn note_doorbells(transport: &NicTransport) {
    let direct = transport.doorbell(0).is_some() && transport.doorbell(1).is_some();
    DIRECT_DOORBELLS.store(direct, Relaxed);
    QUEUES.call_once(|| [transport.queue_areas(0), transport.queue_areas(1)]);
}

/// Where the zcnet driver's RX (0) and TX (1) virtqueues live, noted by [`note_doorbells`].
static QUEUES: spin::Once<[Option<QueueAreas>; 2]> = spin::Once::new();

/// The RX and TX virtqueues' indices as they are in memory now, for the console when the
/// network seems stuck ([`Display`](fmt::Display): one `rx{..} tx{..}` line; empty before the
/// driver set its queues up).
///
/// Per queue: `avail` (the driver's `avail.idx`: buffers ever posted), `used` (the device's
/// `used.idx`: buffers ever returned), `used_event` (the driver asks for an interrupt once
/// `used` passes it; one behind the driver's last popped index means "no interrupt"),
/// `avail_event` (the device asks for a notification once `avail` passes it) and the two
/// `flags` words. With the driver's `rx_posted` / `tx_in_flight` counters (`avail` minus the
/// driver's last popped index) this tells whether the device holds buffers, has returned ones
/// the driver never took, and whether an interrupt was asked for.
#[derive(Clone, Copy, Debug)]
pub struct Rings;

impl fmt::Display for Rings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(queues) = QUEUES.get() else {
            return Ok(());
        };
        for (name, areas) in ["rx", "tx"].iter().zip(queues) {
            let Some(q) = areas else { continue };
            let size = q.size as u64;
            let read = |addr: u64| -> u16 {
                // SAFETY: `addr` lies in a virtqueue area the driver gave the device (the
                // layout in `QueueAreas`' docs, `size` entries); the kernel identity-maps its
                // RAM and never frees virtqueues (the driver lives for the kernel's whole life).
                // The device may write the field meanwhile: a volatile read of an aligned `u16`
                // is a snapshot.
                u16::from_le(unsafe { (addr as *const u16).read_volatile() })
            };
            write!(
                f,
                "{name}{{avail={} used={} used_event={} avail_event={} avail_flags={:#x} \
                 used_flags={:#x}}} ",
                read(q.driver_area + 2),
                read(q.device_area + 2),
                read(q.driver_area + 4 + 2 * size),
                read(q.device_area + 4 + 8 * size),
                read(q.driver_area),
                read(q.device_area),
            )?;
        }
        Ok(())
    }
}

/// The virtio feature bits the driver accepted, once it has initialised the device; 0 for a
/// driver that does not say (the smoltcp baseline's `VirtIONetRaw`).
static FEATURES: AtomicU64 = AtomicU64::new(0);

/// Notes the features the driver accepted, for `/stats`.
pub fn note_features(features: u64) {
    FEATURES.store(features, Relaxed);
}

/// The features noted by [`note_features`] (virtio numbering: bit 0 `CSUM`, 1 `GUEST_CSUM`,
/// 5 `MAC`, 29 `EVENT_IDX`, 32 `VERSION_1`, ...), 0 if none were.
pub fn features() -> u64 {
    FEATURES.load(Relaxed)
}

/// How the driver's notifications reach the device, for `/stats`: `"direct"` (one write at the
/// queue's doorbell, read once at set-up) or `"transport"` (the transport's own `notify`).
pub fn doorbell_kind() -> &'static str {
    if DIRECT_DOORBELLS.load(Relaxed) {
        "direct"
    } else {
        "transport"
    }
}

/// Wraps the transport [`find_virtio_net`] found so that its notifications are counted
/// ([`kicks`]). With `direct` (the zcnet kernel), on PCI a notification is one write at the
/// queue's doorbell, its address read once when the queue is set up; without it (the smoltcp
/// baseline, which keeps virtio-drivers as such kernels do) virtio-drivers' PCI transport
/// selects the queue and reads the doorbell offset back before each write. virtio-mmio's
/// doorbell is one write either way.
pub fn doorbells(
    transport: SomeTransport<'static>,
    location: &Location,
    direct: bool,
) -> NicTransport {
    let wrapped = match location {
        // SAFETY: `nic.notify` was read from this device's capabilities (`pci::describe`), and
        // its BAR memory is identity mapped for the kernel's whole life.
        Location::Pci(nic) if direct => unsafe { Doorbells::pci(transport, nic.notify) },
        _ => Doorbells::new(transport),
    };
    wrapped.counted(&KICKS)
}

/// What was found, once [`find_virtio_net`] succeeded.
static LOCATION: spin::Once<Location> = spin::Once::new();

/// Where the NIC is, once found.
pub fn location() -> Option<Location> {
    LOCATION.get().copied()
}

/// Finds virtio-net: on PCI bus 0 if there is one there, else on virtio-mmio (see
/// [`mmio::find_virtio_net`]). Prints what it found and keeps it for [`location`].
pub fn find_virtio_net(boot: &BootInfo) -> Result<(SomeTransport<'static>, Location), NicError> {
    let (transport, location) = match pci::find_virtio_net() {
        Ok((transport, nic)) => (SomeTransport::from(transport), Location::Pci(nic)),
        Err(PciError::NotFound) => {
            let (transport, nic) = mmio::find_virtio_net(boot).map_err(NicError::Mmio)?;
            (SomeTransport::from(transport), Location::Mmio(nic))
        }
        Err(e) => return Err(NicError::Pci(e)),
    };
    println!("nic: {location}");
    LOCATION.call_once(|| location);
    Ok((transport, location))
}

/// The NIC's interrupt handlers. MSI-X calls `rx`, `tx` and `config` from their own vectors;
/// INTx and virtio-mmio call `shared` with the interrupt status bits just acknowledged (bit 0:
/// a queue, bit 1: a configuration change).
#[derive(Clone, Copy, Debug)]
pub struct Handlers {
    /// RX queue (MSI-X).
    pub rx: fn(),
    /// TX queue (MSI-X).
    pub tx: fn(),
    /// Configuration change (MSI-X).
    pub config: fn(),
    /// The one line of INTx or virtio-mmio.
    pub shared: fn(u8),
}

/// Routes the NIC's interrupts. PCI: MSI-X unless `mode` asks for INTx or MSI-X setup fails,
/// then INTx. virtio-mmio: its line (`mode` does not apply). Call after the driver is
/// constructed (device initialisation resets PCI's MSI-X vectors).
pub fn route_interrupts(
    location: &Location,
    mode: IrqMode,
    handlers: Handlers,
) -> Result<Routing, NicError> {
    let result = match location {
        Location::Pci(nic) => {
            if mode == IrqMode::Msix {
                match nic_irq::setup_msix(nic, handlers.rx, handlers.tx, handlers.config) {
                    Ok(routing) => return Ok(routing),
                    Err(e) => println!("nic: MSI-X unavailable ({e:?}), using INTx"),
                }
            }
            nic_irq::setup_intx(nic, handlers.shared)
        }
        Location::Mmio(nic) => nic_irq::setup_mmio(nic, handlers.shared),
    };
    result.map_err(|e| {
        println!("nic: no interrupt line ({e:?})");
        NicError::Interrupts
    })
}
