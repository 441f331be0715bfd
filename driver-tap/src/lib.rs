//! # zcnet-tap: a Linux TAP device as a zcnet driver
//!
//! ```text
//!  /dev/net/tun (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR, non-blocking, in the epoll reactor)
//!    read(fd, PostedSlot)            ─► RxFrame  (the kernel's copy is this device's "DMA",
//!    readv(fd, head + tail slots)    ─► RxChain   counted as CopySite::KernelFd)
//!    write(fd, TxFrame) / writev(fd, TxChain) ◄─ egress
//! ```
//!
//! [`Tap::open`] creates (or attaches to) a TAP interface and registers its fd with a
//! [`LinuxPlatform`]'s epoll reactor, so the executor's one `epoll_wait` also waits for frames.
//! [`Tap`] implements [`zcnet_buffer::Driver`]:
//!
//! * **Receive**: `read` lands straight in a POSTED pool slot, which becomes the [`RxFrame`]; a
//!   fresh slot is posted at once. `EAGAIN` clears the fd's readiness and registers the caller's
//!   waker with the reactor; an empty pool registers it with the pool. While no slot is posted,
//!   frames wait in the kernel's queue (which drops on overflow, as a full ring would).
//! * **Transmit**: `write` goes straight from the [`TxFrame`]'s bytes. A write that hits `EAGAIN`
//!   keeps its frame (as an [`InFlight`], in a queue of at most [`TX_QUEUE`] frames) and
//!   [`poll_transmit_frame`](Driver::poll_transmit_frame) returns `Pending` until the fd is
//!   writable again and the queue has gone out. Write errors are counted ([`TapStats`]).
//! * **Offloads** ([`TapConfig::offloads`], on by default): every frame carries a 12-byte
//!   little-endian `virtio_net_hdr_v1` in front of it, in the slot on both directions (the
//!   posted slot's first bytes on receive, the frame's headroom on transmit:
//!   [`Capabilities::tx_headroom`] is [`VNET_HDR_LEN`]), and `TUNSETOFFLOAD` asks for
//!   `TUN_F_CSUM`. The header's flags become the frames' marks and back
//!   ([`zcnet_buffer::offload`]): `NEEDS_CSUM` / `DATA_VALID` from the kernel mark a received
//!   packet [verified](RxFrame::checksum_verified) (and its partial checksum is completed in
//!   software while [`TapConfig::complete_rx_checksums`] is on), a GSO type its
//!   [`GsoInfo`]; a transmitted frame's [`ChecksumPartial`] and [`GsoRequest`] become
//!   `NEEDS_CSUM`, `csum_start`/`csum_offset` and `gso_type`/`gso_size`/`hdr_len`, and an
//!   unmarked frame goes out with a zero header. With [`TapConfig::rx_gso`] the kernel's TCP
//!   packets of up to 64 KiB are read with `readv` into a chain ([`Driver::poll_receive_chain`]);
//!   [`Driver::transmit_chain`] writes a chain with `writev`. [`TapConfig::tx_offloads`]
//!   advertises checksum and segmentation offload to the stack.
//! * **Copies**: the kernel's copy across the fd is recorded as
//!   [`CopySite::KernelFd`] (payload bytes, the virtio-net header not counted); the driver
//!   itself copies nothing.
//!
//! [`Tap::from_fd`] drives a tun fd opened elsewhere (or any fd that keeps frame boundaries,
//! such as a `SOCK_SEQPACKET` socketpair end, which is how `tests/eagain.rs` makes writes hit
//! `EAGAIN`).
//!
//! Feature `log`: the driver logs through the [`log`](https://docs.rs/log) crate (target
//! `zcnet_tap`): the interface opened (info), a failed read (error), a failed write and a
//! frame larger than a pool slot (warn), refused and dropped frames and the link changes it
//! observes (debug), a write that would block (trace). Nothing per frame that goes through;
//! without the feature no logging code is compiled.
//!
//! The interface's kernel side can be moved into another network namespace after opening
//! (`ip link set <name> netns <ns>`); the fd keeps working, and [`Tap::link_state`] follows the
//! interface into its namespace.
//!
//! ```no_run
//! use zcnet_buffer::{FramePool, PoolConfig};
//! use zcnet_executor::linux::LinuxPlatform;
//! use zcnet_tap::{Tap, TapConfig};
//!
//! let platform = LinuxPlatform::leak()?;
//! let pool = FramePool::leak(PoolConfig::new(256)).unwrap();
//! let tap = Tap::open(platform, pool, &TapConfig::new("zc0"))?;
//! assert_eq!(tap.name(), "zc0");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

// First: the logging macros are used below.
#[macro_use]
mod logging;

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use zcnet_buffer::ledger::{self, CopySite};
use zcnet_buffer::{
    Capabilities, ChecksumOffloads, ChecksumPartial, Driver, FramePool, GsoInfo, GsoKind, GsoKinds,
    GsoRequest, HardwareAddress, InFlight, InFlightChain, LinkState, Medium, PostedSlot, RxChain,
    RxFrame, RxPacket, TxChain, TxError, TxFrame, DEFAULT_SLOT_SIZE, ETHERNET_HEADER_LEN,
    MAX_CHAIN_SEGMENTS, SLOT_ALIGN,
};
use zcnet_executor::linux::{LinuxPlatform, Registration};

/// The MTU when none is configured.
pub const DEFAULT_MTU: usize = 1500;
/// The smallest MTU accepted (IPv4's minimum).
pub const MIN_MTU: usize = 68;
/// The largest MTU accepted (the largest IPv4 packet).
pub const MAX_MTU: usize = 65535;
/// The largest MTU Linux lets a TAP interface have (65535 minus the Ethernet header). A larger
/// zcnet MTU is applied to the kernel side as this.
pub const KERNEL_MAX_MTU: usize = 65521;
/// The hardware address when none is configured: locally administered (bit 1 of the first
/// byte), unicast.
pub const DEFAULT_MAC: [u8; 6] = [0x02, 0x7a, 0x63, 0x00, 0x00, 0x01];
/// Frames a [`Tap`] keeps when writes hit `EAGAIN` before it refuses more (as
/// [`TxError::Device`], counted in [`TapStats::tx_queue_full`]).
pub const TX_QUEUE: usize = 32;
/// Longest interface name Linux accepts (`IFNAMSIZ - 1`).
pub const MAX_NAME_LEN: usize = libc::IFNAMSIZ - 1;
/// Bytes of the virtio-net header (`struct virtio_net_hdr_v1`, little-endian) in front of every
/// frame read or written while [`TapConfig::offloads`] is on: in the slot's first bytes on
/// receive, in the frame's headroom on transmit.
pub const VNET_HDR_LEN: usize = 12;
/// The largest TCP super-segment the driver hands the kernel (IP packet bytes), advertised as
/// [`Capabilities::gso_max_size`] with [`TapConfig::tx_offloads`].
pub const GSO_MAX_SIZE: usize = 65535;
/// The largest frame a TAP read returns once TSO is negotiated ([`TapConfig::rx_gso`]): a
/// 64 KiB IP packet and its Ethernet header (and a VLAN tag).
pub const MAX_GSO_FRAME: usize = 65535 + ETHERNET_HEADER_LEN + 4;

// The virtio-net header's fields (linux/virtio_net.h).
const VNET_F_NEEDS_CSUM: u8 = 1;
const VNET_F_DATA_VALID: u8 = 2;
const VNET_GSO_TCPV4: u8 = 1;
const VNET_GSO_TCPV6: u8 = 4;
const VNET_GSO_ECN: u8 = 0x80;

/// How to open a TAP interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TapConfig {
    /// Interface name (at most [`MAX_NAME_LEN`] bytes); empty lets the kernel pick `tapN`. An
    /// existing persistent TAP of that name is attached to.
    pub name: String,
    /// The largest IP packet ([`MIN_MTU`] ..= [`MAX_MTU`], default [`DEFAULT_MTU`]). The pool's
    /// slots must hold `mtu + 14` bytes.
    pub mtu: usize,
    /// zcnet's hardware address on this link (default [`DEFAULT_MAC`]). The kernel side of the
    /// interface keeps its own address.
    pub mac: [u8; 6],
    /// Whether [`Tap::open`] sets the kernel interface's MTU to `mtu` (capped at
    /// [`KERNEL_MAX_MTU`]) with `SIOCSIFMTU` (default `true`; needs `CAP_NET_ADMIN`).
    pub set_interface_mtu: bool,
    /// The virtio-net offloads (default `true`): the interface is opened with `IFF_VNET_HDR`
    /// (a [`VNET_HDR_LEN`]-byte header in front of each frame, so the pool's slots need that
    /// much more room: [`slot_size`](Self::slot_size)) and `TUNSETOFFLOAD` with `TUN_F_CSUM`.
    /// The kernel then hands over its own packets with their checksum partial, and the driver
    /// marks received packets [verified](RxFrame::checksum_verified) (the kernel checked them,
    /// or they never left the host); transmitted frames carry the stack's marks
    /// ([`TxFrame::checksum_partial`], [`TxFrame::gso_request`]) to the kernel, and unmarked
    /// frames go out with a zero header (nothing asked). Off, the driver reads and writes bare
    /// frames, as a TAP without offloads: for comparing both, or for a kernel that refuses
    /// `IFF_VNET_HDR`.
    pub offloads: bool,
    /// With [`offloads`](Self::offloads): completes partial checksums of received packets in
    /// software (default `false`: zcnet's stack trusts the verified mark and skips its own
    /// check, so the packets' checksum fields may hold only the pseudo-header sum). Turn it on
    /// for a stack that verifies every checksum itself.
    pub complete_rx_checksums: bool,
    /// With [`offloads`](Self::offloads): advertises transmit checksum offload
    /// ([`ChecksumOffloads::TCP_TX`], `UDP_TX`) and TCP segmentation ([`GSO_MAX_SIZE`], IPv4 and
    /// IPv6) in the driver's [`Capabilities`] (default `true`: zcnet's TCP writes partial
    /// checksums and marks its frames, see [`zcnet_buffer::offload`]; smoltcp's frames go out
    /// with full checksums and no mark). Off for a stack that reads the checksum bit as "the
    /// device fills in the whole checksum": it would send frames the kernel drops.
    ///
    /// A TCP super-segment (a chain whose head carries a [`GsoRequest`]) is written with one
    /// `writev`, its virtio-net header saying `NEEDS_CSUM` and `GSO_TCPV4` / `GSO_TCPV6` with
    /// the segment size; the kernel takes such writes whatever `TUNSETOFFLOAD` said (those
    /// flags decide only what it hands to the reader, see [`rx_gso`](Self::rx_gso)), and
    /// segments the packet itself only if it leaves the host.
    pub tx_offloads: bool,
    /// With [`tx_offloads`](Self::tx_offloads): advertises TCP segmentation (default `true`).
    /// Off, only the checksum offloads are advertised and the stack cuts its super-segments
    /// into MTU-sized frames itself: for a measurement whose rules want every segment to cross
    /// the fd as its own frame (a firewall rule dropping single frames, a capture counting
    /// them), or to compare both in one run.
    pub tso: bool,
    /// With [`offloads`](Self::offloads): negotiates TSO (`TUN_F_TSO4 | TUN_F_TSO6`) so the
    /// kernel hands over TCP packets of up to 64 KiB, read with `readv` into a chain (a head
    /// slot and tail slots; [`Capabilities::rx_chains`]) and marked with their
    /// [`GsoInfo`] (default `false`). Only for a stack that takes chains
    /// ([`Driver::poll_receive_chain`]), as zcnet's stack does (it polls chains whenever the
    /// driver's capabilities say [`rx_chains`](Capabilities::rx_chains), checks each once and
    /// hands it to TCP whole): [`Driver::poll_receive`] drops such packets, counted in
    /// [`TapStats::rx_errors`], which is why it is off by default (a stack that polls single
    /// frames would lose every large packet). The driver keeps enough tail slots posted for
    /// [`MAX_GSO_FRAME`] bytes (32 of 2 KiB). TSO with ECN (`TUN_F_TSO_ECN`) is not asked:
    /// the kernel marks a super-segment for it only on a connection that negotiated ECN,
    /// which zcnet's TCP never does, and without it the kernel cuts such a packet into
    /// frames before the TAP (the ECN flag of a header that has it is ignored).
    pub rx_gso: bool,
}

impl TapConfig {
    /// Defaults with the interface name `name`.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            mtu: DEFAULT_MTU,
            mac: DEFAULT_MAC,
            set_interface_mtu: true,
            offloads: true,
            complete_rx_checksums: false,
            tx_offloads: true,
            tso: true,
            rx_gso: false,
        }
    }

    /// The same configuration with the offloads on or off ([`offloads`](Self::offloads)).
    pub fn with_offloads(mut self, on: bool) -> Self {
        self.offloads = on;
        self
    }

    /// The same configuration with [`tx_offloads`](Self::tx_offloads) on or off.
    pub fn with_tx_offloads(mut self, on: bool) -> Self {
        self.tx_offloads = on;
        self
    }

    /// The same configuration with [`tso`](Self::tso) on or off.
    pub fn with_tso(mut self, on: bool) -> Self {
        self.tso = on;
        self
    }

    /// The same configuration with [`rx_gso`](Self::rx_gso) on or off.
    pub fn with_rx_gso(mut self, on: bool) -> Self {
        self.rx_gso = on;
        self
    }

    /// The same configuration with [`complete_rx_checksums`](Self::complete_rx_checksums) on
    /// or off.
    pub fn with_complete_rx_checksums(mut self, on: bool) -> Self {
        self.complete_rx_checksums = on;
        self
    }

    /// Bytes in front of each frame in a slot: [`VNET_HDR_LEN`] with the offloads, else 0.
    pub fn header_len(&self) -> usize {
        if self.offloads {
            VNET_HDR_LEN
        } else {
            0
        }
    }

    /// The smallest slot size for this configuration: a whole frame at `mtu` plus the
    /// virtio-net header, rounded up to [`SLOT_ALIGN`], and at least [`DEFAULT_SLOT_SIZE`].
    pub fn slot_size(&self) -> usize {
        (self.mtu + ETHERNET_HEADER_LEN + self.header_len())
            .next_multiple_of(SLOT_ALIGN)
            .max(DEFAULT_SLOT_SIZE)
    }

    /// Receive slots a [`Tap`] opened with this configuration keeps posted over `slot_size`-byte
    /// slots while it waits for a packet: the head slot, and with [`rx_gso`](Self::rx_gso) the
    /// tail slots a GSO packet of [`MAX_GSO_FRAME`] bytes continues into (33 of 2 KiB). What a
    /// pool audit of an idle TAP finds POSTED.
    pub fn posted_rx_slots(&self, slot_size: usize) -> usize {
        1 + self.rx_tails(slot_size)
    }

    /// Tail slots a read of a GSO packet needs besides the head slot, with `slot_size`-byte
    /// slots (0 without [`rx_gso`](Self::rx_gso)).
    fn rx_tails(&self, slot_size: usize) -> usize {
        if self.offloads && self.rx_gso {
            (MAX_GSO_FRAME + VNET_HDR_LEN)
                .div_ceil(slot_size.max(1))
                .saturating_sub(1)
        } else {
            0
        }
    }

    /// The same configuration with another MTU.
    pub fn with_mtu(mut self, mtu: usize) -> Self {
        self.mtu = mtu;
        self
    }

    /// The same configuration with another hardware address.
    pub fn with_mac(mut self, mac: [u8; 6]) -> Self {
        self.mac = mac;
        self
    }

    /// The same configuration, setting (or not) the kernel interface's MTU.
    pub fn with_interface_mtu(mut self, set: bool) -> Self {
        self.set_interface_mtu = set;
        self
    }

    /// Checks the configuration against `pool` without touching the system.
    pub fn validate(&self, pool: &FramePool) -> Result<(), TapError> {
        if self.name.len() > MAX_NAME_LEN || self.name.as_bytes().contains(&0) {
            return Err(TapError::BadName {
                name: self.name.clone(),
            });
        }
        if !(MIN_MTU..=MAX_MTU).contains(&self.mtu) {
            return Err(TapError::BadMtu { mtu: self.mtu });
        }
        let needed = self.mtu + ETHERNET_HEADER_LEN + self.header_len();
        if pool.slot_size() < needed || self.rx_tails(pool.slot_size()) >= MAX_CHAIN_SEGMENTS {
            return Err(TapError::SlotTooSmall {
                slot_size: pool.slot_size(),
                mtu: self.mtu,
                needed,
            });
        }
        Ok(())
    }
}

impl Default for TapConfig {
    /// A kernel-named interface with the default MTU and hardware address.
    fn default() -> Self {
        Self::new("")
    }
}

/// Why a TAP could not be opened or queried.
#[derive(Debug)]
#[non_exhaustive]
pub enum TapError {
    /// The interface name is longer than [`MAX_NAME_LEN`] bytes or contains a NUL byte.
    BadName {
        /// The name given.
        name: String,
    },
    /// The MTU is outside [`MIN_MTU`] ..= [`MAX_MTU`].
    BadMtu {
        /// The MTU given.
        mtu: usize,
    },
    /// The pool's slots cannot hold a whole frame at this MTU.
    SlotTooSmall {
        /// The pool's slot size.
        slot_size: usize,
        /// The MTU asked for.
        mtu: usize,
        /// Bytes a slot needs: `mtu` plus the Ethernet header (and the virtio-net header with
        /// the offloads on; with [`TapConfig::rx_gso`], slots so small that a 64 KiB packet
        /// would need more than a chain's frames are refused too).
        needed: usize,
    },
    /// A system call failed.
    Io {
        /// What was being done.
        op: &'static str,
        /// The system's error.
        source: io::Error,
    },
}

impl TapError {
    fn io(op: &'static str, source: io::Error) -> Self {
        TapError::Io { op, source }
    }
}

impl fmt::Display for TapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TapError::BadName { name } => write!(
                f,
                "bad TAP interface name {name:?} (at most {MAX_NAME_LEN} bytes, no NUL)"
            ),
            TapError::BadMtu { mtu } => {
                write!(f, "MTU {mtu} is outside {MIN_MTU}..={MAX_MTU}")
            }
            TapError::SlotTooSmall {
                slot_size,
                mtu,
                needed,
            } => write!(
                f,
                "pool slots of {slot_size} bytes cannot hold a frame at MTU {mtu} \
                 ({needed} bytes needed: build the pool with a larger slot_size)"
            ),
            TapError::Io { op, source } => write!(f, "TAP: {op}: {source}"),
        }
    }
}

impl std::error::Error for TapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TapError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<TapError> for io::Error {
    fn from(e: TapError) -> io::Error {
        match e {
            TapError::Io { ref source, .. } => io::Error::new(source.kind(), e),
            other => io::Error::new(io::ErrorKind::InvalidInput, other),
        }
    }
}

/// What a [`Tap`] did, from [`TapStatsHandle::get`] or [`Tap::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TapStats {
    /// Frames read from the fd.
    pub rx_frames: u64,
    /// Bytes read from the fd.
    pub rx_bytes: u64,
    /// Reads that failed with something other than `EAGAIN`/`EINTR` (a frame larger than a
    /// slot, a detached device).
    pub rx_errors: u64,
    /// Frames written to the fd.
    pub tx_frames: u64,
    /// Bytes written to the fd.
    pub tx_bytes: u64,
    /// Writes that failed (link down, device gone, frame too long); each such frame is lost.
    pub tx_errors: u64,
    /// Writes that hit `EAGAIN` (the frame was kept and sent later).
    pub tx_would_block: u64,
    /// Frames refused because [`TX_QUEUE`] frames already waited.
    pub tx_queue_full: u64,
    /// Packets read as chains (larger than a slot: GSO packets with [`TapConfig::rx_gso`]).
    pub rx_chains: u64,
    /// Received packets whose partial checksum the driver completed
    /// ([`TapConfig::complete_rx_checksums`]).
    pub rx_checksums_completed: u64,
    /// Packets written from chains (`writev`).
    pub tx_chains: u64,
    /// Packets written with a segmentation request for the kernel (TSO).
    pub tx_gso: u64,
    /// Received packets the kernel marked checksummed (`DATA_VALID`) or partial
    /// (`NEEDS_CSUM`): the stack does not verify their checksum.
    pub rx_verified: u64,
    /// Packets written with a partial checksum for the kernel to complete (`NEEDS_CSUM`).
    pub tx_checksum_partial: u64,
}

#[derive(Debug, Default)]
struct Counters {
    rx_frames: AtomicU64,
    rx_bytes: AtomicU64,
    rx_errors: AtomicU64,
    tx_frames: AtomicU64,
    tx_bytes: AtomicU64,
    tx_errors: AtomicU64,
    tx_would_block: AtomicU64,
    tx_queue_full: AtomicU64,
    rx_chains: AtomicU64,
    rx_checksums_completed: AtomicU64,
    tx_chains: AtomicU64,
    tx_gso: AtomicU64,
    rx_verified: AtomicU64,
    tx_checksum_partial: AtomicU64,
}

/// Adds `n` to a counter. Only the driver writes its counters, always through `&mut self`
/// (one writer at a time; handing the driver to another thread orders the writes), so a load
/// and a store do, without a locked add per frame; a reader on another thread sees each value
/// whole.
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// A handle to a [`Tap`]'s counters that stays readable after the driver was handed to a stack.
#[derive(Clone, Debug)]
pub struct TapStatsHandle(Arc<Counters>);

impl TapStatsHandle {
    /// The counts now.
    pub fn get(&self) -> TapStats {
        let c = &self.0;
        TapStats {
            rx_frames: c.rx_frames.load(Relaxed),
            rx_bytes: c.rx_bytes.load(Relaxed),
            rx_errors: c.rx_errors.load(Relaxed),
            tx_frames: c.tx_frames.load(Relaxed),
            tx_bytes: c.tx_bytes.load(Relaxed),
            tx_errors: c.tx_errors.load(Relaxed),
            tx_would_block: c.tx_would_block.load(Relaxed),
            tx_queue_full: c.tx_queue_full.load(Relaxed),
            rx_chains: c.rx_chains.load(Relaxed),
            rx_checksums_completed: c.rx_checksums_completed.load(Relaxed),
            tx_chains: c.tx_chains.load(Relaxed),
            tx_gso: c.tx_gso.load(Relaxed),
            rx_verified: c.rx_verified.load(Relaxed),
            tx_checksum_partial: c.tx_checksum_partial.load(Relaxed),
        }
    }
}

/// A Linux TAP interface driven through its fd (see the [crate docs](crate)).
pub struct Tap {
    // Declared before `fd`: the registration leaves epoll while the fd is still open.
    reg: Registration,
    fd: OwnedFd,
    pool: &'static FramePool,
    name: String,
    mtu: usize,
    mac: [u8; 6],
    kernel_mtu: Option<usize>,
    /// The "RX ring": one posted slot the next `read` lands in.
    rx_slot: Option<PostedSlot>,
    /// With [`TapConfig::rx_gso`]: the tail slots a read of a GSO packet continues into, kept
    /// posted (`rx_tails` of them; capacity reserved at open).
    rx_tail: Vec<PostedSlot>,
    rx_tails: usize,
    /// The packet [`poll_rx`](Self::poll_rx) read over several slots, until the caller takes
    /// it (empty otherwise).
    rx_chain: RxChain,
    /// Bytes of virtio-net header in front of each frame (0 or [`VNET_HDR_LEN`]).
    vnet: usize,
    complete_rx_checksums: bool,
    tx_offloads: bool,
    tso: bool,
    rx_gso: bool,
    /// Packets whose write hit `EAGAIN`, oldest first (capacity reserved at open: no allocation).
    tx_queue: VecDeque<Outgoing>,
    counters: Arc<Counters>,
    /// The link state last observed, and who waits for it to change.
    link: LinkState,
    link_waker: Option<Waker>,
    /// A datagram socket in the interface's network namespace for `SIOCGIFFLAGS`, keyed by the
    /// namespace's (device, inode).
    ctl: Option<((u64, u64), OwnedFd)>,
}

impl fmt::Debug for Tap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tap")
            .field("name", &self.name)
            .field("fd", &self.fd.as_raw_fd())
            .field("mtu", &self.mtu)
            .field("mac", &HardwareAddress::Ethernet(self.mac))
            .field("tx_queued", &self.tx_queue.len())
            .finish_non_exhaustive()
    }
}

/// An `ifreq` naming `name` (which the caller checked: at most `IFNAMSIZ - 1` bytes, no NUL).
fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: `ifreq` is plain old data (a byte array and a union of integers, sockaddrs and a
    // pointer); all-zero is a valid value of each.
    let mut ifr: libc::ifreq = unsafe { mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    ifr
}

/// The name the kernel wrote into `ifr`.
fn ifreq_name(ifr: &libc::ifreq) -> String {
    let bytes: Vec<u8> = ifr
        .ifr_name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A close-on-exec `AF_INET` datagram socket in the calling thread's network namespace, for
/// interface ioctls.
fn ctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall with valid constant arguments.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by `socket`, is open, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A control socket created inside the network namespace `ns`. `setns` changes only the calling
/// thread's namespace, so a short-lived helper thread enters `ns` and makes the socket (a socket
/// keeps the namespace it was created in); the caller's thread never changes namespace.
fn ctl_socket_in(ns: &OwnedFd) -> io::Result<OwnedFd> {
    let ns = ns.as_raw_fd();
    std::thread::scope(|s| {
        let helper = std::thread::Builder::new()
            .name("zcnet-tap-netns".into())
            .spawn_scoped(s, move || {
                // SAFETY: `ns` is an open namespace fd (the caller holds it for the whole
                // scope); CLONE_NEWNET only changes this helper thread, which ends right after.
                cvt(unsafe { libc::setns(ns, libc::CLONE_NEWNET) })?;
                ctl_socket()
            })?;
        helper
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("netns helper thread panicked")))
    })
}

/// `(st_dev, st_ino)` of an fd: identifies a namespace.
fn fd_identity(fd: &OwnedFd) -> io::Result<(u64, u64)> {
    // SAFETY: `stat` is plain old data; all-zero is valid and `fstat` overwrites it.
    let mut st: libc::stat = unsafe { mem::zeroed() };
    // SAFETY: `fd` is open; `st` is a valid out-pointer for the call's duration.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok((st.st_dev, st.st_ino))
}

/// Sets a `IFF_VNET_HDR` tun fd's header to the 12-byte little-endian `virtio_net_hdr_v1`
/// and asks for the offloads `config` wants (`TUN_F_CSUM`, and TSO with
/// [`TapConfig::rx_gso`]).
fn set_offloads(fd: &OwnedFd, config: &TapConfig) -> Result<(), TapError> {
    let size: libc::c_int = VNET_HDR_LEN as libc::c_int;
    // SAFETY: `fd` is an open tun fd; TUNSETVNETHDRSZ reads one int through the pointer,
    // valid for the call's duration.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &size) })
        .map_err(|e| TapError::io("TUNSETVNETHDRSZ", e))?;
    let little: libc::c_int = 1;
    // SAFETY: as above, TUNSETVNETLE reads one int.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETLE, &little) })
        .map_err(|e| TapError::io("TUNSETVNETLE", e))?;
    let mut offload = libc::TUN_F_CSUM;
    if config.rx_gso {
        offload |= libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
    }
    // SAFETY: `fd` is an open tun fd; TUNSETOFFLOAD takes the flags by value.
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETOFFLOAD,
            libc::c_ulong::from(offload),
        )
    })
    .map_err(|e| TapError::io("TUNSETOFFLOAD", e))?;
    Ok(())
}

/// The virtio-net header for a frame with `csum` and `gso` marks (offsets from the link
/// header, as the kernel reads them). All zero without marks: nothing asked.
fn vnet_header(csum: Option<ChecksumPartial>, gso: Option<GsoRequest>) -> [u8; VNET_HDR_LEN] {
    let mut h = [0u8; VNET_HDR_LEN];
    if let Some(c) = csum {
        h[0] = VNET_F_NEEDS_CSUM;
        h[6..8].copy_from_slice(&c.start.to_le_bytes());
        h[8..10].copy_from_slice(&c.offset.to_le_bytes());
    }
    if let Some(g) = gso {
        h[1] = match g.kind {
            GsoKind::TcpV4 => VNET_GSO_TCPV4,
            GsoKind::TcpV6 => VNET_GSO_TCPV6,
        };
        h[2..4].copy_from_slice(&g.header_len.to_le_bytes());
        h[4..6].copy_from_slice(&g.segment_size.to_le_bytes());
    }
    h
}

/// What a received virtio-net header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RxHeader {
    /// `(csum_start, csum_offset)` of a partial checksum (`NEEDS_CSUM`).
    partial: Option<(usize, usize)>,
    /// `DATA_VALID`: the kernel verified the checksum.
    valid: bool,
    gso: Option<GsoInfo>,
}

fn parse_vnet(h: &[u8]) -> RxHeader {
    let le = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
    let flags = h[0];
    let gso = match h[1] & !VNET_GSO_ECN {
        VNET_GSO_TCPV4 => Some(GsoKind::TcpV4),
        VNET_GSO_TCPV6 => Some(GsoKind::TcpV6),
        _ => None,
    };
    RxHeader {
        partial: (flags & VNET_F_NEEDS_CSUM != 0).then(|| (usize::from(le(6)), usize::from(le(8)))),
        valid: flags & VNET_F_DATA_VALID != 0,
        gso: gso.map(|kind| GsoInfo {
            kind,
            segment_size: le(4),
        }),
    }
}

/// A packet read from the fd: one frame when it fit the posted slot (the usual packet: no
/// chain built, nothing large moved), else a chain over the head and tail slots, left in
/// [`Tap::rx_chain`].
enum Received {
    Frame(RxFrame),
    Chain,
}

/// A packet handed to the kernel, kept while its write waits for the fd.
///
/// A chain is held inline, not boxed: the queue's room is reserved when the driver opens
/// ([`TX_QUEUE`] entries of about 1.5 KiB), so no packet allocates.
#[allow(clippy::large_enum_variant)]
enum Outgoing {
    One(InFlight),
    Chain(InFlightChain),
}

fn is_would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl Tap {
    /// Opens `/dev/net/tun` non-blocking, creates (or attaches to) the TAP interface
    /// `config.name` with `IFF_TAP | IFF_NO_PI`, sets the interface's MTU (unless
    /// [`TapConfig::set_interface_mtu`] is off), and registers the fd with `platform`'s
    /// reactor. Frames are received into and transmitted from `pool`'s slots.
    ///
    /// The interface is left as it was (a new one is down); bringing it up and addressing it is
    /// the host's business (`ip link set <name> up`). It disappears when the `Tap` is dropped,
    /// unless it was made persistent.
    ///
    /// Errors: [`TapError::BadName`], [`TapError::BadMtu`], [`TapError::SlotTooSmall`] (checked
    /// before anything is opened), [`TapError::Io`] for a failed system call (no
    /// `/dev/net/tun`, no `CAP_NET_ADMIN`, a name taken by another kind of interface).
    pub fn open(
        platform: &'static LinuxPlatform,
        pool: &'static FramePool,
        config: &TapConfig,
    ) -> Result<Tap, TapError> {
        config.validate(pool)?;
        // SAFETY: the path is a valid NUL-terminated string; the flags are valid for open(2).
        let raw = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(TapError::io(
                "open /dev/net/tun",
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: `raw` was just returned by `open`, is open, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut ifr = ifreq(&config.name);
        let vnet = if config.offloads {
            libc::IFF_VNET_HDR
        } else {
            0
        };
        ifr.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI | vnet) as libc::c_short;
        // SAFETY: `fd` is an open tun fd; TUNSETIFF reads and writes one `ifreq`, which `ifr`
        // is, valid for the call's duration.
        cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut ifr) })
            .map_err(|e| TapError::io("TUNSETIFF (IFF_TAP | IFF_NO_PI)", e))?;
        let name = ifreq_name(&ifr);
        if config.offloads {
            set_offloads(&fd, config)?;
        }
        let kernel_mtu = if config.set_interface_mtu {
            let mtu = config.mtu.min(KERNEL_MAX_MTU);
            let sock = ctl_socket().map_err(|e| TapError::io("socket for SIOCSIFMTU", e))?;
            let mut ifr = ifreq(&name);
            ifr.ifr_ifru.ifru_mtu = mtu as libc::c_int;
            // SAFETY: `sock` is an open socket; SIOCSIFMTU reads one `ifreq`, valid for the
            // call's duration.
            cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFMTU, &mut ifr) })
                .map_err(|e| TapError::io("SIOCSIFMTU", e))?;
            Some(mtu)
        } else {
            None
        };
        Self::assemble(platform, pool, fd, name, config, kernel_mtu)
    }

    /// Drives an fd that is already open: a tun fd attached to a TAP interface elsewhere (by a
    /// privileged parent that passed it down, say), or any fd that keeps frame boundaries, such
    /// as one end of a `SOCK_SEQPACKET` or `SOCK_DGRAM` `socketpair` (how the driver's
    /// `EAGAIN` handling is tested, since a TAP will not fill up on demand).
    ///
    /// The fd is made non-blocking and registered with `platform`'s reactor; no `TUNSETIFF`,
    /// no MTU change. A tun fd opened with `IFF_VNET_HDR` gets the virtio-net header set up as
    /// [`open`](Self::open) does (its size, and the offloads `config` asks for, whatever
    /// [`TapConfig::offloads`] says); any other fd carries bare frames. Otherwise ([`TapConfig::set_interface_mtu`] is ignored,
    /// [`kernel_mtu`](Self::kernel_mtu) is `None`). [`name`](Self::name) is the interface's
    /// name if the fd is an attached tun fd (`TUNGETIFF`), otherwise `config.name`. For an fd
    /// that is not a tun fd, [`link_state`](Self::link_state) fails (and
    /// [`Driver::poll_link_state`] reads down); frames flow regardless.
    ///
    /// Errors: [`TapError::BadName`], [`TapError::BadMtu`], [`TapError::SlotTooSmall`] as for
    /// [`open`](Self::open); [`TapError::Io`] if the fd cannot be made non-blocking or
    /// registered.
    pub fn from_fd(
        platform: &'static LinuxPlatform,
        pool: &'static FramePool,
        fd: OwnedFd,
        config: &TapConfig,
    ) -> Result<Tap, TapError> {
        config.validate(pool)?;
        // SAFETY: `fd` is open (we own it); F_GETFL takes no argument.
        let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })
            .map_err(|e| TapError::io("fcntl(F_GETFL)", e))?;
        // SAFETY: `fd` is open; F_SETFL takes the new flags as an int.
        cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) })
            .map_err(|e| TapError::io("fcntl(F_SETFL, O_NONBLOCK)", e))?;
        let mut ifr = ifreq("");
        // SAFETY: `fd` is open; TUNGETIFF writes one `ifreq`, valid for the call's duration
        // (on an fd that is not a tun fd it fails with ENOTTY/EBADFD and writes nothing).
        let got = cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNGETIFF, &mut ifr) });
        let (name, vnet) = match got {
            Ok(_) => {
                // SAFETY: TUNGETIFF succeeded and wrote the `ifru_flags` member.
                let flags = unsafe { ifr.ifr_ifru.ifru_flags };
                let flags = libc::c_int::from(flags);
                (ifreq_name(&ifr), flags & libc::IFF_VNET_HDR != 0)
            }
            Err(_) => (config.name.clone(), false),
        };
        // The fd decides whether frames carry a virtio-net header; the configuration only
        // which offloads it asks for.
        let mut config = config.clone();
        config.offloads = vnet;
        if vnet {
            config.validate(pool)?;
            set_offloads(&fd, &config)?;
        }
        Self::assemble(platform, pool, fd, name, &config, None)
    }

    /// The common end of [`open`](Self::open) and [`from_fd`](Self::from_fd): registers the
    /// (non-blocking) fd with the reactor and builds the driver around it.
    fn assemble(
        platform: &'static LinuxPlatform,
        pool: &'static FramePool,
        fd: OwnedFd,
        name: String,
        config: &TapConfig,
        kernel_mtu: Option<usize>,
    ) -> Result<Tap, TapError> {
        let rx_tails = config.rx_tails(pool.slot_size());
        let reg = platform
            .register(fd.as_raw_fd())
            .map_err(|e| TapError::io("epoll registration", e))?;
        info!(
            "TAP {}: opened, MTU {}, hardware address {}",
            name,
            config.mtu,
            HardwareAddress::Ethernet(config.mac)
        );
        Ok(Tap {
            reg,
            fd,
            pool,
            name,
            mtu: config.mtu,
            mac: config.mac,
            kernel_mtu,
            rx_slot: None,
            rx_tail: Vec::with_capacity(rx_tails),
            rx_tails,
            rx_chain: RxChain::new(),
            vnet: config.header_len(),
            complete_rx_checksums: config.complete_rx_checksums,
            tx_offloads: config.tx_offloads,
            tso: config.tso,
            rx_gso: config.offloads && config.rx_gso,
            tx_queue: VecDeque::with_capacity(TX_QUEUE),
            counters: Arc::default(),
            link: LinkState::Down,
            link_waker: None,
            ctl: None,
        })
    }

    /// The interface's name as the kernel knows it (as opened; see [`current_name`] after a
    /// rename).
    ///
    /// [`current_name`]: Self::current_name
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface's name now (`TUNGETIFF`), which follows renames.
    pub fn current_name(&self) -> io::Result<String> {
        let mut ifr = ifreq("");
        // SAFETY: `fd` is an attached tun fd; TUNGETIFF writes one `ifreq`, valid for the
        // call's duration.
        cvt(unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::TUNGETIFF, &mut ifr) })?;
        Ok(ifreq_name(&ifr))
    }

    /// The tun fd (owned by the `Tap`).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// zcnet's MTU on this link.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The MTU [`open`](Self::open) gave the kernel interface, if it set one.
    pub fn kernel_mtu(&self) -> Option<usize> {
        self.kernel_mtu
    }

    /// The pool frames come from.
    pub fn pool(&self) -> &'static FramePool {
        self.pool
    }

    /// The counters now.
    pub fn stats(&self) -> TapStats {
        self.stats_handle().get()
    }

    /// A handle that reads the counters after the `Tap` has been handed to a stack.
    pub fn stats_handle(&self) -> TapStatsHandle {
        TapStatsHandle(self.counters.clone())
    }

    /// The link state now: [`LinkState::Up`] when the kernel interface is administratively up
    /// and running (`IFF_UP` and `IFF_RUNNING` from `SIOCGIFFLAGS`), wherever the interface
    /// lives: its current name comes from `TUNGETIFF`, its namespace from `TUNGETDEVNETNS`
    /// (the control socket for a namespace other than ours is made once by a helper thread).
    pub fn link_state(&mut self) -> io::Result<LinkState> {
        let flags = self.interface_flags()?;
        let up = libc::IFF_UP | libc::IFF_RUNNING;
        let state = if flags & up == up {
            LinkState::Up
        } else {
            LinkState::Down
        };
        self.observe_link(state);
        Ok(state)
    }

    fn interface_flags(&mut self) -> io::Result<libc::c_int> {
        let name = self.current_name()?;
        // SAFETY: `fd` is an attached tun fd; TUNGETDEVNETNS takes no argument and returns a
        // new fd for the device's network namespace.
        let ns = cvt(unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::TUNGETDEVNETNS) })?;
        // SAFETY: `ns` was just returned by the kernel, is open, and nothing else owns it.
        let ns = unsafe { OwnedFd::from_raw_fd(ns) };
        let id = fd_identity(&ns)?;
        let ctl = match &self.ctl {
            Some((cached, sock)) if *cached == id => sock,
            _ => {
                let sock = ctl_socket_in(&ns)?;
                &self.ctl.insert((id, sock)).1
            }
        };
        let mut ifr = ifreq(&name);
        // SAFETY: `ctl` is an open socket; SIOCGIFFLAGS reads and writes one `ifreq`, valid for
        // the call's duration.
        cvt(unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCGIFFLAGS, &mut ifr) })?;
        // SAFETY: SIOCGIFFLAGS succeeded, so the kernel wrote the `ifru_flags` member.
        let flags = unsafe { ifr.ifr_ifru.ifru_flags };
        Ok(libc::c_int::from(flags as u16))
    }

    /// Records the link state just seen and wakes a `poll_link_state` waiter on a change.
    fn observe_link(&mut self, state: LinkState) {
        if state != self.link {
            debug!(
                "TAP {}: link {}",
                self.name,
                if state == LinkState::Up { "up" } else { "down" }
            );
            self.link = state;
            if let Some(w) = self.link_waker.take() {
                w.wake();
            }
        }
    }

    /// Writes one whole packet (retrying `EINTR`): `write` from a frame, `writev` from a
    /// chain's slices; records the kernel's copy.
    fn write_packet(&self, packet: &Outgoing) -> io::Result<()> {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_CHAIN_SEGMENTS];
        let (count, len) = match packet {
            Outgoing::One(f) => {
                iov[0] = libc::iovec {
                    iov_base: f.as_ptr() as *mut libc::c_void,
                    iov_len: f.len(),
                };
                (1, f.len())
            }
            Outgoing::Chain(c) => {
                let mut n = 0;
                for (slot, part) in iov.iter_mut().zip(c.iter()) {
                    *slot = libc::iovec {
                        iov_base: part.as_ptr() as *mut libc::c_void,
                        iov_len: part.len(),
                    };
                    n += 1;
                }
                (n, c.len())
            }
        };
        loop {
            let r = if count == 1 {
                // SAFETY: `fd` is open; `iov[0]` points at the frame's `len` bytes, which the
                // frame in `packet` keeps alive and unchanged for the call's duration (the
                // kernel only reads them).
                unsafe { libc::write(self.fd.as_raw_fd(), iov[0].iov_base, iov[0].iov_len) }
            } else {
                // SAFETY: `fd` is open; the first `count` iovecs point at the packet's bytes,
                // which the frames in `packet` keep alive and unchanged for the call's duration
                // (the kernel only reads them).
                unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), count as libc::c_int) }
            };
            if r >= 0 {
                let n = r as usize;
                if n != len {
                    // A TAP write takes the whole frame or fails; anything else is a broken fd.
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("short TAP write: {n} of {len} bytes"),
                    ));
                }
                let payload = n - self.vnet;
                ledger::record(CopySite::KernelFd, payload);
                bump(&self.counters.tx_frames, 1);
                bump(&self.counters.tx_bytes, payload as u64);
                if matches!(packet, Outgoing::Chain(_)) {
                    bump(&self.counters.tx_chains, 1);
                }
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Writes the packets that waited for the fd, in order; `Pending` (the waker registered
    /// for writability) while some still wait.
    fn flush_tx_queue(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while let Some(front) = self.tx_queue.front() {
            let ev = match self.reg.poll_writable(cx) {
                Poll::Ready(ev) => ev,
                Poll::Pending => return Poll::Pending,
            };
            match self.write_packet(front) {
                Ok(()) => drop(self.tx_queue.pop_front()),
                Err(e) if is_would_block(&e) => self.reg.clear_writable(ev),
                Err(e) => {
                    // Counted as a TX error; the packet is lost like one on a broken cable.
                    let _ = self.tx_failed(&e);
                    drop(self.tx_queue.pop_front());
                }
            }
        }
        Poll::Ready(())
    }

    /// Writes `packet` now, or queues it behind packets waiting for the fd (or when the write
    /// would block).
    fn send(&mut self, packet: Outgoing) -> Result<(), TxError> {
        if !self.tx_queue.is_empty() {
            // Keep the order: behind the packets already waiting for the fd.
            if self.tx_queue.len() >= TX_QUEUE {
                debug!("TAP {}: frame refused: the write queue is full", self.name);
                bump(&self.counters.tx_queue_full, 1);
                return Err(TxError::Device);
            }
            self.tx_queue.push_back(packet);
            return Ok(());
        }
        match self.write_packet(&packet) {
            // Written: the kernel has the bytes; `packet` drops and its slots are free again.
            Ok(()) => Ok(()),
            Err(e) if is_would_block(&e) => {
                trace!("TAP {}: write would block: frame queued", self.name);
                bump(&self.counters.tx_would_block, 1);
                self.tx_queue.push_back(packet);
                Ok(())
            }
            Err(e) => Err(self.tx_failed(&e)),
        }
    }

    /// Checks a packet of `len` bytes (link header first) with a `gso` request against the
    /// MTU or the GSO size, and the head's headroom against the virtio-net header.
    fn check_tx(&self, len: usize, headroom: usize, gso: bool) -> Result<(), TxError> {
        let max = if gso {
            GSO_MAX_SIZE + ETHERNET_HEADER_LEN
        } else {
            self.mtu + ETHERNET_HEADER_LEN
        };
        if len > max {
            debug!(
                "TAP {}: frame of {} bytes refused: over {}",
                self.name, len, max
            );
            bump(&self.counters.tx_errors, 1);
            return Err(TxError::TooLong { len, max });
        }
        if headroom < self.vnet {
            bump(&self.counters.tx_errors, 1);
            return Err(TxError::NoHeadroom);
        }
        Ok(())
    }

    /// Reads the next packet: into the posted slot (and, with [`TapConfig::rx_gso`], on into
    /// the tail slots), as a chain.
    fn poll_rx(&mut self, cx: &mut Context<'_>) -> Poll<Received> {
        loop {
            if self.rx_slot.is_none() {
                match self.pool.poll_alloc_rx(cx) {
                    Poll::Ready(slot) => self.rx_slot = Some(slot),
                    // Frames wait in the kernel's queue; a returned slot wakes us.
                    Poll::Pending => return Poll::Pending,
                }
            }
            while self.rx_tail.len() < self.rx_tails {
                match self.pool.poll_alloc_rx(cx) {
                    Poll::Ready(slot) => self.rx_tail.push(slot),
                    // A GSO packet would not fit yet: it waits in the kernel's queue.
                    Poll::Pending => return Poll::Pending,
                }
            }
            // Readiness is observed *before* the read, so a `clear_readable` after `EAGAIN`
            // cannot erase an event that arrived after the read.
            let ev = match self.reg.poll_readable(cx) {
                Poll::Ready(ev) => ev,
                Poll::Pending => return Poll::Pending,
            };
            let Some(slot) = self.rx_slot.as_mut() else {
                continue;
            };
            let head_cap = slot.capacity();
            let r = if self.rx_tail.is_empty() {
                let buf = slot.buffer_mut();
                // SAFETY: `fd` is open; `buf` is the posted slot's whole buffer, writable for
                // `buf.len()` bytes and borrowed uniquely for the call's duration.
                unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) }
            } else {
                let mut iov = [libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                }; MAX_CHAIN_SEGMENTS];
                let buf = slot.buffer_mut();
                iov[0] = libc::iovec {
                    iov_base: buf.as_mut_ptr().cast(),
                    iov_len: buf.len(),
                };
                let mut count = 1;
                for (v, tail) in iov[1..].iter_mut().zip(self.rx_tail.iter_mut()) {
                    let buf = tail.buffer_mut();
                    *v = libc::iovec {
                        iov_base: buf.as_mut_ptr().cast(),
                        iov_len: buf.len(),
                    };
                    count += 1;
                }
                // SAFETY: `fd` is open; each of the first `count` iovecs is a posted slot's
                // whole buffer, which this driver owns (POSTED) and nothing else reaches for
                // the call's duration; the slots are distinct, so the buffers do not overlap.
                unsafe { libc::readv(self.fd.as_raw_fd(), iov.as_ptr(), count as libc::c_int) }
            };
            if r > 0 {
                let n = r as usize;
                let Some(head) = self.rx_slot.take() else {
                    continue;
                };
                // Post a fresh slot in its place at once (the Driver contract); tails are
                // topped up on the next poll.
                self.rx_slot = self.pool.try_alloc_rx();
                if n < self.vnet {
                    bump(&self.counters.rx_errors, 1);
                    continue;
                }
                let payload = n - self.vnet;
                ledger::record(CopySite::KernelFd, payload);
                bump(&self.counters.rx_frames, 1);
                bump(&self.counters.rx_bytes, payload as u64);
                match self.complete_rx(head, head_cap, n) {
                    Some(packet) => {
                        // Frames only arrive while the interface is up and running.
                        self.observe_link(LinkState::Up);
                        return Poll::Ready(packet);
                    }
                    None => {
                        bump(&self.counters.rx_errors, 1);
                        continue;
                    }
                }
            }
            let e = if r == 0 {
                io::Error::new(io::ErrorKind::UnexpectedEof, "TAP read returned 0")
            } else {
                io::Error::last_os_error()
            };
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                // Nothing queued: forget readability (unless a newer event came) and loop,
                // which registers the waker and re-checks.
                Some(libc::EAGAIN) => self.reg.clear_readable(ev),
                // One frame lost (larger than a slot: the kernel drops it); read on.
                Some(libc::EFAULT) | Some(libc::EINVAL) | Some(libc::EMSGSIZE) => {
                    warn!(
                        "TAP {}: a frame larger than a pool slot was lost: {}",
                        self.name, e
                    );
                    bump(&self.counters.rx_errors, 1);
                }
                // The device is gone or broken (EBADFD after its namespace was deleted): count
                // it and wait for the next readiness event rather than spin.
                _ => {
                    error!(
                        "TAP {}: read failed: {}; waiting for the next readiness event",
                        self.name, e
                    );
                    bump(&self.counters.rx_errors, 1);
                    self.reg.clear_readable(ev);
                }
            }
        }
    }

    /// The read of `n` bytes (virtio-net header included) landed in `head` (`head_cap` bytes)
    /// and on in the tail slots: the packet with its marks (one frame when it fits the head
    /// slot, else a chain), or `None` (counted by the caller) when it is malformed.
    fn complete_rx(&mut self, mut head: PostedSlot, head_cap: usize, n: usize) -> Option<Received> {
        // The header sits in the slot in front of the frame: the posted slot's first bytes.
        let header = (self.vnet > 0).then(|| parse_vnet(&head.buffer_mut()[..VNET_HDR_LEN]));
        let in_head = n.min(head_cap);
        let mut head = match head.complete_range(self.vnet, in_head - self.vnet) {
            Ok(frame) => frame,
            Err(_e) => {
                debug!("TAP {}: frame of {} bytes dropped: {}", self.name, n, _e);
                return None;
            }
        };
        if let Some(h) = header {
            let verified = h.valid || h.partial.is_some();
            if verified {
                bump(&self.counters.rx_verified, 1);
            }
            head.set_checksum_verified(verified);
            head.set_gso_info(h.gso);
        }
        let mut rest = n - in_head;
        let partial = match header {
            Some(RxHeader {
                partial: Some(at),
                gso: None,
                ..
            }) if self.complete_rx_checksums => Some(at),
            _ => None,
        };
        if rest == 0 && partial.is_none() {
            // The usual packet: one slot, nothing to complete, no chain built.
            return Some(Received::Frame(head));
        }
        if rest > 0 {
            bump(&self.counters.rx_chains, 1);
        }
        let mut chain = RxChain::from_frame(head);
        // The tails in use, in order; the unused ones stay posted.
        let used = rest.div_ceil(self.pool.slot_size());
        for tail in self.rx_tail.drain(..used.min(self.rx_tail.len())) {
            let k = rest.min(tail.capacity());
            rest -= k;
            let frame = tail.complete(k).ok()?;
            chain.push(frame).ok()?;
        }
        if rest > 0 {
            return None;
        }
        if let Some((start, offset)) = partial {
            if !chain.complete_checksum(start, offset) {
                return None;
            }
            bump(&self.counters.rx_checksums_completed, 1);
        }
        self.rx_chain = chain;
        Some(Received::Chain)
    }

    /// The chain [`poll_rx`](Self::poll_rx) just read ([`Received::Chain`]).
    fn take_rx_chain(&mut self) -> RxChain {
        core::mem::replace(&mut self.rx_chain, RxChain::new())
    }

    /// Counts a failed write and says why it failed.
    fn tx_failed(&mut self, e: &io::Error) -> TxError {
        bump(&self.counters.tx_errors, 1);
        if e.raw_os_error() == Some(libc::EIO) {
            // The kernel refuses frames while the interface is down.
            debug!("TAP {}: write refused: the interface is down", self.name);
            self.observe_link(LinkState::Down);
            TxError::LinkDown
        } else {
            warn!("TAP {}: write failed: {}", self.name, e);
            TxError::Device
        }
    }
}

impl Driver for Tap {
    /// With [`TapConfig::rx_gso`], a packet read as a chain is dropped here (counted in
    /// [`TapStats::rx_errors`]): take [`poll_receive_chain`](Driver::poll_receive_chain).
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        loop {
            let mut chain = match self.poll_rx(cx) {
                Poll::Ready(Received::Frame(frame)) => return Poll::Ready(frame),
                Poll::Ready(Received::Chain) => self.take_rx_chain(),
                Poll::Pending => return Poll::Pending,
            };
            if chain.frame_count() == 1 {
                if let Some(frame) = chain.pop_front() {
                    return Poll::Ready(frame);
                }
            }
            debug!(
                "TAP {}: a packet of {} bytes over {} slots dropped: the caller takes single frames",
                self.name,
                chain.len(),
                chain.frame_count()
            );
            bump(&self.counters.rx_errors, 1);
        }
    }

    fn poll_receive_chain(&mut self, cx: &mut Context<'_>) -> Poll<RxChain> {
        self.poll_rx(cx).map(|packet| match packet {
            Received::Frame(frame) => RxChain::from_frame(frame),
            Received::Chain => self.take_rx_chain(),
        })
    }

    fn poll_receive_packet(&mut self, cx: &mut Context<'_>) -> Poll<RxPacket> {
        self.poll_rx(cx).map(|packet| match packet {
            Received::Frame(frame) => RxPacket::Frame(frame),
            // A one-slot packet whose checksum was completed here is a one-frame chain.
            Received::Chain => RxPacket::from(self.take_rx_chain()),
        })
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        // Packets kept after `EAGAIN` go first, in order.
        if self.flush_tx_queue(cx).is_pending() {
            return Poll::Pending;
        }
        self.pool.poll_alloc_tx(cx)
    }

    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // Room is what `transmit` checks: the queue of packets waiting for the fd. Flushing it
        // (and registering for writability) is what `poll_transmit_frame` does first.
        self.flush_tx_queue(cx)
    }

    fn transmit(&mut self, mut frame: TxFrame) -> Result<(), TxError> {
        let gso = frame.gso_request();
        self.check_tx(
            frame.len(),
            frame.headroom(),
            gso.is_some() && self.vnet > 0,
        )?;
        if self.vnet > 0 {
            let header = vnet_header(frame.checksum_partial(), gso);
            if gso.is_some() {
                bump(&self.counters.tx_gso, 1);
            }
            if frame.checksum_partial().is_some() {
                bump(&self.counters.tx_checksum_partial, 1);
            }
            match frame.push_header(VNET_HDR_LEN) {
                Ok(room) => room.copy_from_slice(&header),
                Err(_) => return Err(TxError::NoHeadroom),
            }
        }
        self.send(Outgoing::One(frame.into_device()))
    }

    /// Writes the chain with one `writev`. Without [`TapConfig::offloads`] only a chain that
    /// fits the MTU is taken (a GSO request is refused with [`TxError::ChainUnsupported`]);
    /// with them, the head's marks go into the virtio-net header pushed into its headroom.
    fn transmit_chain(&mut self, mut chain: TxChain) -> Result<(), TxError> {
        let frames = chain.frame_count();
        let Some(head) = chain.head() else {
            return Err(TxError::ChainUnsupported { frames });
        };
        let gso = head.gso_request();
        if gso.is_some() && self.vnet == 0 {
            bump(&self.counters.tx_errors, 1);
            return Err(TxError::ChainUnsupported { frames });
        }
        self.check_tx(chain.len(), chain.headroom(), gso.is_some())?;
        if self.vnet > 0 {
            let header = vnet_header(head.checksum_partial(), gso);
            if gso.is_some() {
                bump(&self.counters.tx_gso, 1);
            }
            if head.checksum_partial().is_some() {
                bump(&self.counters.tx_checksum_partial, 1);
            }
            match chain.push_header(VNET_HDR_LEN) {
                Ok(room) => room.copy_from_slice(&header),
                Err(_) => return Err(TxError::NoHeadroom),
            }
        }
        if frames == 1 {
            if let Some(frame) = chain.pop_front() {
                return self.send(Outgoing::One(frame.into_device()));
            }
        }
        self.send(Outgoing::Chain(chain.into_device()))
    }

    fn capabilities(&self) -> Capabilities {
        let tx = self.vnet > 0 && self.tx_offloads;
        let (checksum, gso) = if tx {
            (
                ChecksumOffloads::TCP_TX.union(ChecksumOffloads::UDP_TX),
                if self.tso { GSO_MAX_SIZE } else { 0 },
            )
        } else {
            // Without the stack's partial checksums the kernel expects complete ones.
            (ChecksumOffloads::empty(), 0)
        };
        Capabilities::new(Medium::Ethernet, self.mtu)
            .with_tx_headroom(self.vnet)
            .with_checksum(checksum)
            .with_gso(gso, GsoKinds::TCPV4.union(GsoKinds::TCPV6))
            .with_rx_chains(self.rx_gso)
    }

    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet(self.mac)
    }

    /// Queries the interface ([`Tap::link_state`]; a failed query reads as down). Linux sends
    /// no event for a flag change through the tun fd, so the waker is woken when the driver
    /// next *observes* a change: a query, a write refused with `EIO` (down), or a frame read
    /// (up).
    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        match &self.link_waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => self.link_waker = Some(cx.waker().clone()),
        }
        self.link_state().unwrap_or(LinkState::Down)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use zcnet_buffer::PoolConfig;

    /// These tests need root and /dev/net/tun: they fail (never skip) without them.
    fn require_tun() {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(euid, 0, "zcnet-tap tests need root (CAP_NET_ADMIN)");
        assert!(
            std::path::Path::new("/dev/net/tun").exists(),
            "zcnet-tap tests need /dev/net/tun"
        );
    }

    fn unique_name() -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        format!(
            "zcu{}n{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn pool(slot_size: usize) -> &'static FramePool {
        FramePool::leak(PoolConfig::new(8).with_slot_size(slot_size)).unwrap()
    }

    #[test]
    fn config_is_checked_before_anything_is_opened() {
        let p = pool(2048);
        let long = TapConfig::new("a-name-of-16-byt");
        assert!(matches!(long.validate(p), Err(TapError::BadName { .. })));
        assert!(matches!(
            TapConfig::new("x\0y").validate(p),
            Err(TapError::BadName { .. })
        ));
        for mtu in [0, 67, 65536] {
            assert!(matches!(
                TapConfig::new("zc").with_mtu(mtu).validate(p),
                Err(TapError::BadMtu { .. })
            ));
        }
        assert!(TapConfig::new("zc").validate(p).is_ok());
        let e = TapConfig::new("zc").with_mtu(9000).validate(p).unwrap_err();
        assert!(matches!(
            e,
            TapError::SlotTooSmall {
                slot_size: 2048,
                mtu: 9000,
                needed: 9026
            }
        ));
        assert!(e.to_string().contains("9026 bytes needed"), "{e}");
        // Without the offloads, no virtio-net header to make room for.
        let bare = TapConfig::new("zc").with_mtu(9000).with_offloads(false);
        assert!(matches!(
            bare.validate(p),
            Err(TapError::SlotTooSmall { needed: 9014, .. })
        ));
        assert_eq!(bare.slot_size(), 9024);
        assert_eq!(TapConfig::new("zc").with_mtu(9000).slot_size(), 9088);
        assert!(TapConfig::new("zc").with_mtu(2022).validate(p).is_ok());
        assert!(TapConfig::new("zc").with_mtu(2023).validate(p).is_err());
        // A 64 KiB GSO packet must fit a chain: tiny slots are refused with rx_gso.
        let tiny = pool(1024);
        assert!(TapConfig::new("zc").with_mtu(900).validate(tiny).is_ok());
        assert!(TapConfig::new("zc")
            .with_mtu(900)
            .with_rx_gso(true)
            .validate(tiny)
            .is_err());
        // And Tap::open reports it the same way, without opening anything.
        let platform = LinuxPlatform::leak().unwrap();
        let cfg = TapConfig::new("zc").with_mtu(9000);
        assert!(matches!(
            Tap::open(platform, p, &cfg),
            Err(TapError::SlotTooSmall { .. })
        ));
        assert_eq!(
            io::Error::from(TapError::BadMtu { mtu: 1 }).kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn opens_with_default_jumbo_and_max_mtu() {
        require_tun();
        let platform = LinuxPlatform::leak().unwrap();
        for (mtu, kernel, offloads) in [
            (1500, 1500, true),
            (1500, 1500, false),
            (9000, 9000, true),
            (65535, KERNEL_MAX_MTU, true),
        ] {
            let name = unique_name();
            let cfg = TapConfig::new(&name).with_mtu(mtu).with_offloads(offloads);
            let tap = Tap::open(platform, pool(cfg.slot_size()), &cfg).unwrap();
            assert_eq!(tap.name(), name);
            assert_eq!(tap.current_name().unwrap(), name);
            assert_eq!(tap.mtu(), mtu);
            assert_eq!(tap.kernel_mtu(), Some(kernel));
            let caps = tap.capabilities();
            assert_eq!(caps.mtu, mtu);
            assert_eq!(caps.max_frame_len(), mtu + 14);
            assert_eq!(caps.tx_headroom, if offloads { VNET_HDR_LEN } else { 0 });
            // Transmit offloads (checksums and segmentation) with the offloads, by default;
            // chains only when asked for.
            if offloads {
                assert_eq!(
                    caps.checksum,
                    ChecksumOffloads::TCP_TX | ChecksumOffloads::UDP_TX
                );
                assert_eq!(caps.gso_max_size, GSO_MAX_SIZE);
            } else {
                assert_eq!(caps.checksum, ChecksumOffloads::empty());
                assert_eq!(caps.gso_max_size, 0);
            }
            assert!(!caps.rx_chains);
            assert_eq!(
                tap.hardware_address(),
                HardwareAddress::Ethernet(DEFAULT_MAC)
            );
            // The kernel interface has that MTU.
            let sock = ctl_socket().unwrap();
            let mut ifr = ifreq(&name);
            // SAFETY: open socket, one valid `ifreq`.
            cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut ifr) }).unwrap();
            // SAFETY: SIOCGIFMTU succeeded and wrote `ifru_mtu`.
            assert_eq!(unsafe { ifr.ifr_ifru.ifru_mtu } as usize, kernel);
            drop(tap);
            assert!(
                !std::path::Path::new(&format!("/sys/class/net/{name}")).exists(),
                "the interface goes with the fd"
            );
        }
    }

    #[test]
    fn a_down_interface_refuses_frames_as_link_down_and_nothing_is_lost() {
        require_tun();
        let platform = LinuxPlatform::leak().unwrap();
        let p = pool(2048);
        let mac = [0x02, 1, 2, 3, 4, 5];
        let mut tap =
            Tap::open(platform, p, &TapConfig::new(&unique_name()).with_mac(mac)).unwrap();
        assert_eq!(tap.hardware_address(), HardwareAddress::Ethernet(mac));
        // A new TAP is down.
        assert_eq!(tap.link_state().unwrap(), LinkState::Down);
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(tap.poll_link_state(&mut cx), LinkState::Down);
        // Nothing to read: Pending, with one slot posted.
        assert!(tap.poll_receive(&mut cx).is_pending());
        let Poll::Ready(mut frame) = tap.poll_transmit_frame(&mut cx) else {
            panic!("a TX frame is free");
        };
        frame.append(60).unwrap().fill(0xff);
        assert_eq!(tap.transmit(frame), Err(TxError::LinkDown));
        assert_eq!(tap.stats().tx_errors, 1);
        // Too long for the MTU: refused before any write.
        let Poll::Ready(mut frame) = tap.poll_transmit_frame(&mut cx) else {
            panic!("a TX frame is free");
        };
        frame.set_len(1515).unwrap();
        assert_eq!(
            tap.transmit(frame),
            Err(TxError::TooLong {
                len: 1515,
                max: 1514
            })
        );
        drop(tap);
        assert_eq!(p.audit().unwrap().free, 8, "every slot came back");
    }
}
