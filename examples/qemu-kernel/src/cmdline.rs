//! The kernel command line (QEMU's `-append`): space-separated `key=value` words.
//!
//! | key | values | default | meaning |
//! |---|---|---|---|
//! | `ip` | `dhcp`, `A.B.C.D/N` | `dhcp` | IPv4 address: a DHCP lease, or static |
//! | `gw` | `A.B.C.D` | none | default gateway for a static address |
//! | `test` | `0`, `1` | `0` | serve `GET /exit`: check invariants and stop QEMU with the verdict |
//! | `idle` | seconds | off | once addressed, measure wakeups and polls over that many idle seconds |
//! | `irq` | `msix`, `intx` | `msix` | how a PCI NIC interrupts (`intx`: force the IOAPIC fallback) |
//! | `virtio_mmio.device` | `SIZE@ADDRESS:GSI` | none | a virtio-mmio transport (Linux's syntax; QEMU's microvm adds one per device) |
//!
//! PVH passes the line's physical address at offset 24 of the `hvm_start_info` structure whose
//! address arrives in `%ebx` (`boot.rs`), and the ACPI RSDP's at offset 32 ([`BootInfo`]).
//! Unknown keys and bad values are reported on the console and ignored: a typo must not stop
//! the kernel.

use core::net::Ipv4Addr;

use zcnet_stack::Secret;

/// `hvm_start_info.magic`.
const START_INFO_MAGIC: u32 = 0x336e_c578;
/// The longest command line read.
const MAX_LEN: usize = 1024;

/// Where the IPv4 address comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpSetting {
    /// A DHCP lease (slirp's DHCP server gives 10.0.2.15/24, gateway 10.0.2.2).
    Dhcp,
    /// A fixed address and prefix length.
    Static {
        /// The address.
        address: Ipv4Addr,
        /// The prefix length, 0..=32.
        prefix: u8,
    },
}

/// How the NIC's interrupts are routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqMode {
    /// MSI-X (separate RX and TX vectors), falling back to INTx if it cannot be set up.
    Msix,
    /// The legacy INTx line through the IOAPIC.
    Intx,
}

/// `rx_defer`'s default, in microseconds: on, because it costs request/response traffic and
/// an idle guest nothing (only stretches of `rx_defer_bytes` are deferred) and saves a bulk
/// receiver nearly all its RX interrupts and about an eighth of its CPU per MB, for about a
/// tenth of its rate under TCG (BENCHMARKS.md, the kernel section; `rx_defer=0` for the
/// rate). 50 µs, five of the executor's ticks, waits out most of the pauses between the host's
/// bursts while the RX queue (256 buffers) lasts far longer.
pub const DEFAULT_RX_DEFER_US: u32 = 50;

/// The most `virtio_mmio.device=` words kept (QEMU's microvm has 8 transports without ACPI).
pub const MAX_VIRTIO_MMIO: usize = 8;

/// One `virtio_mmio.device=SIZE@ADDRESS:GSI` word: where a virtio-mmio transport's registers
/// are and which interrupt line it raises. `SIZE` may end in `K` or `M`; numbers are decimal
/// or `0x` hexadecimal (QEMU writes `512@0xfeb00e00:12`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtioMmioArg {
    /// Physical address of the registers.
    pub address: u64,
    /// Bytes of register space (header and device configuration).
    pub size: u64,
    /// The global system interrupt (IOAPIC input) it raises.
    pub gsi: u32,
}

impl VirtioMmioArg {
    fn parse(value: &str) -> Option<VirtioMmioArg> {
        let (size, rest) = value.split_once('@')?;
        // Linux accepts a fourth `:ID` field (the platform device's id); it names nothing here.
        let mut fields = rest.split(':');
        let address = parse_number(fields.next()?)?;
        let gsi = u32::try_from(parse_number(fields.next()?)?).ok()?;
        let (size, unit) = match size.as_bytes().last()? {
            b'K' | b'k' => (&size[..size.len() - 1], 1 << 10),
            b'M' | b'm' => (&size[..size.len() - 1], 1 << 20),
            _ => (size, 1),
        };
        Some(VirtioMmioArg {
            address,
            size: parse_number(size)?.checked_mul(unit)?,
            gsi,
        })
    }
}

/// A decimal or `0x` hexadecimal number.
fn parse_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The parsed command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cmdline {
    /// `ip=`.
    pub ip: IpSetting,
    /// `gw=`.
    pub gateway: Option<Ipv4Addr>,
    /// `test=1`.
    pub test: bool,
    /// `idle=N`.
    pub idle_secs: Option<u32>,
    /// `irq=`.
    pub irq: IrqMode,
    /// `virtio_mmio.device=` words, in order.
    pub virtio_mmio: [Option<VirtioMmioArg>; MAX_VIRTIO_MMIO],
    /// `csum=0` turns the NIC's checksum offload off (zcnet-virtio's
    /// `VirtioConfig::checksum_offload`); on by default.
    pub csum: bool,
    /// `rx_recheck=N`: how many more times the NIC driver looks at a drained RX queue before
    /// arming its interrupt (zcnet-virtio's `VirtioConfig::rx_recheck`; 0: at every drained
    /// pass); 1 by default.
    pub rx_recheck: u8,
    /// `lro=0` turns large receive off (zcnet-virtio's `VirtioConfig::large_receive`: merged
    /// RX buffers, the host's TCP segments of up to 64 KiB as frame chains); on by default.
    pub lro: bool,
    /// `rx_defer=µs`: receive interrupt moderation (zcnet-virtio's `VirtioConfig::rx_defer`):
    /// after a drained stretch of at least `rx_defer_bytes`, the stack polls the RX queue
    /// again from a timer this many microseconds later (rounded up to the executor's tick,
    /// `TICK`) instead of taking an interrupt; 0: off.
    pub rx_defer_us: u32,
    /// `rx_defer_bytes=N`: the stretch that qualifies for deferral
    /// (`VirtioConfig::rx_defer_bytes`).
    pub rx_defer_bytes: u32,
}

impl Default for Cmdline {
    fn default() -> Self {
        Cmdline {
            ip: IpSetting::Dhcp,
            gateway: None,
            test: false,
            idle_secs: None,
            irq: IrqMode::Msix,
            virtio_mmio: [None; MAX_VIRTIO_MMIO],
            csum: true,
            rx_recheck: 1,
            lro: true,
            rx_defer_us: DEFAULT_RX_DEFER_US,
            rx_defer_bytes: zcnet_virtio::VirtioConfig::new().rx_defer_bytes,
        }
    }
}

impl Cmdline {
    /// Parses `line`, printing a warning for each word it ignores.
    pub fn parse(line: &str) -> Cmdline {
        let mut c = Cmdline::default();
        for word in line.split_ascii_whitespace() {
            if c.apply(word).is_none() {
                println!("cmdline: ignoring {word:?}");
            }
        }
        c
    }

    fn apply(&mut self, word: &str) -> Option<()> {
        let (key, value) = word.split_once('=')?;
        match key {
            "ip" if value == "dhcp" => self.ip = IpSetting::Dhcp,
            "ip" => {
                let (address, prefix) = value.split_once('/')?;
                let prefix: u8 = prefix.parse().ok().filter(|p| *p <= 32)?;
                self.ip = IpSetting::Static {
                    address: address.parse().ok()?,
                    prefix,
                };
            }
            "gw" => self.gateway = Some(value.parse().ok()?),
            "test" => self.test = parse_bool(value)?,
            "csum" => self.csum = parse_bool(value)?,
            "rx_recheck" => self.rx_recheck = value.parse().ok()?,
            "lro" => self.lro = parse_bool(value)?,
            "rx_defer" => self.rx_defer_us = value.parse().ok()?,
            "rx_defer_bytes" => self.rx_defer_bytes = value.parse().ok()?,
            "idle" => self.idle_secs = Some(value.parse().ok()?),
            "irq" => {
                self.irq = match value {
                    "msix" => IrqMode::Msix,
                    "intx" => IrqMode::Intx,
                    _ => return None,
                }
            }
            "virtio_mmio.device" => {
                let arg = VirtioMmioArg::parse(value)?;
                *self.virtio_mmio.iter_mut().find(|a| a.is_none())? = Some(arg);
            }
            _ => return None,
        }
        Some(())
    }

    /// The `virtio_mmio.device=` words, in order.
    pub fn virtio_mmio(&self) -> impl Iterator<Item = VirtioMmioArg> + '_ {
        self.virtio_mmio.iter().flatten().copied()
    }

    /// Reads and parses the command line PVH handed over.
    ///
    /// # Safety
    ///
    /// `start_info` is the physical address QEMU passed in `%ebx` (or 0), identity mapped, and
    /// the memory it and the command line occupy has not been reused yet.
    pub unsafe fn from_start_info(start_info: usize) -> Cmdline {
        let mut buf = [0u8; MAX_LEN];
        // SAFETY: passed on from the caller.
        let len = unsafe { read_cmdline(start_info, &mut buf) };
        match core::str::from_utf8(&buf[..len]) {
            Ok(line) => {
                println!("cmdline: {line:?}");
                Cmdline::parse(line)
            }
            Err(_) => {
                println!("cmdline: not UTF-8, ignored");
                Cmdline::default()
            }
        }
    }
}

/// What the kernel takes from PVH's start info (the command line, and whether the machine has
/// ACPI tables: QEMU's microvm with `acpi=off` has none) and the stack's secret drawn at boot
/// (`entropy.rs`).
#[derive(Clone, Copy, Debug)]
pub struct BootInfo {
    /// The parsed command line.
    pub cmdline: Cmdline,
    /// `hvm_start_info.rsdp_paddr`: the ACPI RSDP's physical address, if there is one.
    pub rsdp: Option<u64>,
    /// The stack's secret, from the CPU's random source.
    pub secret: Secret,
}

impl BootInfo {
    /// Reads PVH's start info; `secret` is kept for the stack.
    ///
    /// # Safety
    ///
    /// As for [`Cmdline::from_start_info`].
    pub unsafe fn from_start_info(start_info: usize, secret: Secret) -> BootInfo {
        // SAFETY: passed on from the caller.
        let cmdline = unsafe { Cmdline::from_start_info(start_info) };
        let rsdp = if start_info == 0 {
            None
        } else {
            let info = start_info as *const u8;
            // SAFETY: the start-info structure is at least 56 bytes, identity mapped (caller);
            // `rsdp_paddr` is the u64 at offset 32.
            let (magic, rsdp) = unsafe {
                (
                    info.cast::<u32>().read_unaligned(),
                    info.add(32).cast::<u64>().read_unaligned(),
                )
            };
            (magic == START_INFO_MAGIC && rsdp != 0).then_some(rsdp)
        };
        BootInfo {
            cmdline,
            rsdp,
            secret,
        }
    }
}

fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "yes" | "on" | "true" => Some(true),
        "0" | "no" | "off" | "false" => Some(false),
        _ => None,
    }
}

/// Copies the command line into `buf` (at most its length; longer lines are cut) and returns
/// the length.
///
/// # Safety
///
/// As for [`Cmdline::from_start_info`].
unsafe fn read_cmdline(start_info: usize, buf: &mut [u8]) -> usize {
    if start_info == 0 {
        return 0;
    }
    let info = start_info as *const u8;
    // SAFETY: the start-info structure is at least 56 bytes, identity mapped (caller).
    let (magic, cmdline) = unsafe {
        (
            info.cast::<u32>().read_unaligned(),
            info.add(24).cast::<u64>().read_unaligned(),
        )
    };
    if magic != START_INFO_MAGIC || cmdline == 0 {
        return 0;
    }
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: the command line is a NUL-terminated string at `cmdline` (PVH's contract),
        // identity mapped; reading stops at its NUL.
        let b = unsafe { (cmdline as *const u8).add(len).read_volatile() };
        if b == 0 {
            break;
        }
        buf[len] = b;
        len += 1;
    }
    len
}
