//! # zcnet-stack: its own TCP, smoltcp for the rest, split and woken only by work
//!
//! The stack sits between a [`zcnet_buffer::Driver`] and the application's sockets:
//!
//! ```text
//!  Driver ─RxFrame─► ingress task ─┬─ UDP for a bound DatagramSocket ─► that socket's queue
//!                                  │     (the RxFrame itself: zero copies, app owns the slot)
//!                                  ├─ TCP for us ─► zcnet's TCP: the connection's Tcb::process
//!                                  └─ everything else ─► smoltcp poll_ingress_single
//!                         └─ wakes egress only if smoltcp or a connection now wants to send earlier
//!  sockets ─signal (only when they created work)─► egress task ─┬─ Tcb::dispatch ─► TxFrame
//!                                                               └─ smoltcp poll_egress ─► TxFrame
//!                              └─ sleeps on the timer wheel until the earliest deadline, or until signalled
//!  DatagramSocket::send_to ─► UDP/IP/Ethernet headers in front of the app's payload ─► Driver
//! ```
//!
//! * [`Stack`]: a `Copy` handle for opening sockets and reading [`StackStats`].
//! * [`Runner`]: the ingress and egress tasks, and the link task (the driver's link state:
//!   [`Stack::link_state`], [`Stack::wait_link`]); spawn them or run them.
//! * TCP is zcnet's own (`tcb/`, a port of smoltcp 0.14's state machine with SACK-based loss
//!   recovery, D-SACK, RACK-TLP and timestamps; `transport/tcp/`, `transport/tcp/header.rs`, `transport/tcp/table.rs`):
//!   ingress hands each segment for the stack to the connection that accepts it (or answers it
//!   with a RST), and the connection keeps the received frame itself; egress
//!   sends the frames the application filled, kept until acknowledged (RETAINED), headers
//!   written in front with `smoltcp::wire`, through the zero-copy path's neighbour table. Each
//!   connection's frames come out of a budget reserved in the pool when its socket opens
//!   ([`tcp::TcpBuffers`]). smoltcp keeps ARP / NDP, ICMP, DHCP, DNS, raw IP and UDP.
//! * The smoltcp adapter (`device.rs`) lends RX frames' bytes to smoltcp and lets it write
//!   TX frames in place in pool slots: no copy at the device boundary.
//! * Zero-copy datagrams: [`datagram::DatagramSocket`] receives [`datagram::Datagram`]s that
//!   own the driver's receive slot (`payload()` is a view into it) and sends payloads written in
//!   place into a [`TxFrame`](zcnet_buffer::TxFrame), headers put in front with
//!   `smoltcp::wire`. Ingress classifies each frame before smoltcp (Ethernet, IPv4/IPv6, UDP,
//!   checksum, address and port) and moves matches into the socket's bounded queue; everything
//!   else goes on to smoltcp. The send path (and TCP's) resolves next hops with its own
//!   bounded neighbour table (smoltcp's is private), fed by snooping ARP and NDP, holding
//!   frames while ARP / NDP requests go out and failing them with an error on timeout
//!   (`socket/datagram.rs`, `link/neighbor.rs`; the module docs of [`datagram`] say who owns a frame
//!   when, the bounds, and what goes to smoltcp).
//! * TCP sockets: [`tcp::TcpSocket`], [`tcp::TcpListener`] (a real backlog). Sockets over
//!   smoltcp: [`udp::UdpSocket`], [`icmp::IcmpSocket`] (echo and `ping`; the stack itself answers
//!   pings), [`dns::DnsSocket`] (A and AAAA lookups against [`Config::dns_servers`]) and
//!   [`raw::RawSocket`] (whole IP packets of one protocol). Datagram sockets over smoltcp share
//!   one buffer type, [`PacketBuffers`].
//! * Addresses: static IPv4/IPv6, a DHCPv4 client ([`Ipv4Config::Dhcp`]), SLAAC
//!   ([`Config::slaac`]) and the IPv6 link-local address; the application reads them with
//!   [`Stack::ipv4_config`], [`Stack::dhcp_lease`] and [`Stack::ip_addrs`] and waits for them
//!   with [`Stack::wait_ipv4`] and [`Stack::wait_config_change`] (`ip/autoconf.rs`).
//! * Drops: every frame the stack drops is counted by reason ([`DropReason`],
//!   [`Stack::stats`]), those smoltcp drops included: ingress looks at each frame before
//!   smoltcp does (header reads; it verifies the IPv4, TCP, UDP and ICMP checksums in
//!   smoltcp's place, so each is still verified once; TCP segments for the stack go to zcnet's
//!   TCP from there) and at the answers smoltcp gives (`ip/check.rs`).
//! * Ports: one allocator hands out every ephemeral port (TCP connect, UDP and zero-copy bind
//!   to port 0) and keeps DNS queries off ports other sockets use (`transport/ports.rs`).
//! * Shutdown: [`Stack::shutdown`] stops the stack for good and gives its driver back
//!   ([`StackDriver`]: a `&'static mut` driver, or a boxed one with `alloc`, which the caller
//!   drops to close the device); the tasks end, every frame the stack held returns to the pool,
//!   TCP operations fail with [`tcp::TcpError::ShutDown`] and no socket opens. A new stack over
//!   the same driver and pool takes new [`StackResources`] (`stack/shutdown.rs` says what happens to
//!   each kind of socket).
//!
//! # Copies per payload byte
//!
//! | path | copies per payload byte, each direction | where |
//! |---|---|---|
//! | [`datagram::DatagramSocket`] | 0 | the payload stays in the driver's slot |
//! | TCP `recv_segment` / `tx_frame` + `send_frame` | 0 | the payload stays in the slot the driver received it in, or is written where the driver transmits it |
//! | TCP `read_with` / `write_with` | 0 | the same frames, lent to a closure |
//! | TCP `read` / `write` | 1 | frame ↔ the caller's buffer |
//! | UDP `recv_from_with` / `send_to_with` | 1 | smoltcp's, frame ↔ packet buffer |
//! | UDP `recv_from` / `send_to` | 2 | smoltcp's, plus buffer ↔ the caller's slice |
//!
//! TCP copies beyond these, where the stack makes them: an in-order segment under 256 bytes
//! merged into the tail of the frame before it (`CopyBreak`), and a part of a queued frame sent
//! alone because the peer's window was smaller than the frame (`Emit`, or `Retransmit` when
//! sent again). All copies are recorded in the copy ledger ([`zcnet_buffer::ledger`]): the
//! sockets' as `SocketToApp` / `AppToSocket`, smoltcp's UDP copies as `StackRx` / `Emit`,
//! attributed when the application consumes or queues the bytes.
//!
//! # Features
//!
//! * `alloc`: resources, buffers and the [`Runner`]'s tasks on the heap
//!   (`StackResources::leak`, the `with_capacity` constructors, `Runner::spawn`).
//! * `std`: for a program with an operating system under it (user space): the stack may use
//!   CPU features it finds at run time whose registers the OS saves across context switches
//!   (AVX2 for the TCP checksums on x86_64). A kernel leaves it off; the stack then uses only
//!   what the target enables at build time. Implies `alloc`.
//! * `log`: the stack logs its events through the [`log`](https://docs.rs/log) crate:
//!   TCP connections (opened, established, accepted, closed, reset, refused, timed out,
//!   aborted), dropped frames with their [`DropReason`], DHCPv4 and SLAAC changes, link
//!   changes; nothing for frames that go through. The README's "Logging" section has the levels
//!   and targets. Install any `log` logger; it runs with the stack's state borrowed, so it must not
//!   call into the stack.
//! * `defmt`: the same events through [`defmt`](https://docs.rs/defmt), for embedded targets.
//!   `log` and `defmt` are exclusive; without either no logging code is compiled.
//!
//! Tests: `tests/tests/stack_*.rs` over an in-memory wire with fault injection (zero copy is
//! proven there by payload addresses checked against the driver's slots), `tap_*.rs` against
//! Linux, `qemu_kernel.rs` in the example kernel; speed against plain smoltcp in BENCHMARKS.md
//! ("Stack"). Not covered by the zero-copy path: raw IP, multicast groups, IP fragments (they go
//! to smoltcp).

#![no_std]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "alloc")]
extern crate alloc;

#[cfg(feature = "std")]
extern crate std;

// First: the logging macros are used by the modules below.
#[macro_use]
mod logging;

mod config;
#[cfg(any(feature = "log", feature = "defmt"))]
mod events;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod ip;
mod keys;
mod link;
mod runner;
mod socket;
mod stack;
mod stats;
mod transport;
mod waiters;

pub use config::{
    Config, IpAddress, IpCidr, IpEndpoint, IpListenEndpoint, Ipv4Address, Ipv4Cidr, Ipv4Config,
    Ipv6Address, Ipv6Cidr, Secret, StaticV4, StaticV6, MAX_DNS_SERVERS,
};
pub use ip::autoconf::{
    eui64_interface_id, ipv6_link_local, Dhcpv4Lease, IpAddrs, Ipv4Settings, MAX_ADDRS,
    MAX_CONFIG_WAITERS, MAX_DHCP_DNS_SERVERS,
};
pub use link::carrier::LINK_DOWN_RECHECK;
pub use link::driver::StackDriver;
pub use link::neighbor::{
    MAX_HELD_FRAMES, MAX_NEIGHBORS, MAX_UNSOLICITED_HELD, MAX_UNSOLICITED_NEIGHBORS, NEIGHBOR_IDLE,
    NEIGHBOR_LIFETIME, NEIGHBOR_RETRY, NEIGHBOR_TIMEOUT,
};
pub use runner::{Never, Runner};
pub use socket::{datagram, dns, icmp, raw, tcp, udp, PacketBuffers, PacketMetadata};
pub use stack::shutdown::MAX_SHUTDOWN_WAITERS;
pub use stack::{Stack, StackInner, StackResources};
pub use stats::{DropReason, StackStats, StatsReader};
pub use transport::tcp::backlog::MAX_LISTENERS;
pub use zcnet_buffer as buffer;
pub use zcnet_executor as executor;

/// Why the stack or a socket could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackError {
    /// The [`StackResources`] were already used by another stack.
    ResourcesInUse,
    /// Every socket slot in the [`StackResources`] is taken.
    NoSocketSlot,
    /// The pool had no slot for the stack's scratch frame.
    PoolExhausted,
    /// The pool's slots are too small for the driver's headroom plus a minimal frame.
    PoolTooSmall {
        /// Slot size of the pool.
        slot_size: usize,
        /// Bytes needed at least.
        needed: usize,
    },
    /// A TCP socket's budget ([`TcpBuffers`](tcp::TcpBuffers)) does not fit in what is left of
    /// the pool's TCP share ([`Config::tcp_pool_slots`]): give the pool more slots, the
    /// socket smaller buffers, or close other connections.
    PoolBudget {
        /// Pool slots the socket's budget reserves.
        needed: usize,
        /// Pool slots the TCP share has left.
        available: usize,
    },
    /// smoltcp's route table is full.
    TooManyRoutes,
    /// The endpoint cannot be used (port 0, unspecified address where one is needed).
    Unaddressable,
    /// A listener's buffer source had no buffers for a new socket.
    NoBuffers,
    /// The stack already tracks [`MAX_LISTENERS`] listeners.
    TooManyListeners,
    /// The configuration asks for something that needs a MAC address (DHCPv4, SLAAC, the
    /// IPv6 link-local address) but the driver is not Ethernet.
    NotEthernet,
    /// Another socket already receives on this UDP endpoint: a zero-copy
    /// [`DatagramSocket`](datagram::DatagramSocket) and a [`UdpSocket`](udp::UdpSocket) (or the
    /// DHCPv4 client, or two zero-copy sockets) cannot share a port, and neither can take the
    /// port of a [`DnsSocket`](dns::DnsSocket) query in flight.
    AddressInUse,
    /// The stack was shut down ([`Stack::shutdown`]): it opens no socket any more, and is
    /// shut down once only.
    ShutDown,
}

impl core::fmt::Display for StackError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            StackError::ResourcesInUse => f.write_str("stack resources already in use"),
            StackError::ShutDown => f.write_str("stack shut down"),
            StackError::NoSocketSlot => f.write_str("no free socket slot"),
            StackError::PoolExhausted => f.write_str("frame pool exhausted"),
            StackError::PoolTooSmall { slot_size, needed } => {
                write!(
                    f,
                    "pool slots of {slot_size} bytes, at least {needed} needed"
                )
            }
            StackError::PoolBudget { needed, available } => write!(
                f,
                "TCP buffers need {needed} pool slots, {available} left in the TCP share"
            ),
            StackError::TooManyRoutes => f.write_str("route table full"),
            StackError::Unaddressable => f.write_str("unaddressable endpoint"),
            StackError::NoBuffers => f.write_str("no buffers for a new socket"),
            StackError::TooManyListeners => f.write_str("too many listeners"),
            StackError::AddressInUse => f.write_str("UDP endpoint already in use"),
            StackError::NotEthernet => {
                f.write_str("DHCPv4, SLAAC and IPv6 link-local need an Ethernet driver")
            }
        }
    }
}

impl core::error::Error for StackError {}
