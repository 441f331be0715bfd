//! # zcnet-virtio: virtio-net without copies
//!
//! ```text
//!  FramePool ─PostedSlot─► RX virtqueue (kept full, published) ─► used ─► RxFrame
//!  TxFrame (virtio-net header written into its headroom) ─► TX virtqueue (published) ─► InFlight ─► drop
//!  Driver::flush ─► one doorbell per queue, only if the device asked (event index)
//!  device interrupt ─► VirtioIrq::handle_rx_interrupt / handle_tx_interrupt ─► task woken
//! ```
//!
//! [`VirtioNet`] implements [`zcnet_buffer::Driver`] for a virtio-net device over any
//! virtio-drivers `Transport` (PCI or MMIO) and `Hal`: it initialises the device itself and
//! drives its own split virtqueues (the reason is in the `ring` module: virtio-drivers 0.13's
//! `VirtQueue` cannot suppress notifications and interrupts as the specification allows). The
//! pool's slots are the device's buffers in both directions:
//!
//! * **RX**: the receive virtqueue is kept full of pool slots, each posted so that the virtio-net
//!   header lands at the end of the slot's headroom and the Ethernet frame where an
//!   [`RxFrame`](zcnet_buffer::RxFrame) starts. A completion becomes an `RxFrame` in place and a
//!   fresh slot is posted at once, so frames the application holds drain the pool's spare
//!   slots, never the ring.
//! * **TX**: the virtio-net header is written into the [`TxFrame`](zcnet_buffer::TxFrame)'s
//!   headroom (with `NEEDS_CSUM` for a frame the stack left checksum-partial, when the device
//!   offers checksum offload), header and frame go to the device as one buffer, and the slot
//!   stays an [`InFlight`](zcnet_buffer::InFlight) until the device returns it. A full TX
//!   queue is back-pressure: the stack's egress waits for the TX interrupt. The driver asks
//!   for one then, and while a retained frame the stack waits to resend is still with the
//!   device.
//! * **Doorbells**: posting only publishes; [`Driver::flush`](zcnet_buffer::Driver::flush) (which
//!   the stack calls after every run of transmits and refills) notifies each queue once, and
//!   only when the device's event index asks for it.
//! * **Interrupts**: [`VirtioIrq`], in a `static`, is what the kernel's interrupt handler calls:
//!   it counts and wakes the waiting task, without a lock, so it is safe in interrupt context.
//! * **Link state**: read from the device's configuration space (`VIRTIO_NET_F_STATUS`); a
//!   configuration-change interrupt wakes the stack's link watcher.
//! * **One write per doorbell**: [`Doorbells`] wraps a transport so that a notification is one
//!   write at the queue's doorbell, its address read once when the queue is set up
//!   (virtio-drivers' PCI transport re-reads it, with a queue select, on every notification),
//!   and counts notifications for any driver over it.
//! * **Checksum offload** ([`VirtioConfig`]): `VIRTIO_NET_F_CSUM` and `VIRTIO_NET_F_GUEST_CSUM`
//!   are negotiated when offered; the stack then leaves TCP and UDP transmit checksums to the
//!   device, and received frames the device vouches for are marked verified.
//! * **Segmentation and large receive** ([`VirtioConfig`]): with `HOST_TSO4` / `HOST_TSO6` a
//!   TCP super-segment goes out as one chain of descriptors for the device to cut; with
//!   `MRG_RXBUF` and `GUEST_TSO4` / `GUEST_TSO6` (asked for only by
//!   [`VirtioConfig::large_receive`]) merged packets of up to 64 KiB come up as frame chains.
//! * **Counters**: [`VirtioIrq::stats`] gives frames, bytes, drops by reason, doorbells and
//!   interrupts.
//!
//! The driver copies nothing and allocates nothing after [`VirtioNet::new`]. It depends on
//! `zcnet-buffer` only (not on the stack), so it works with anything that consumes the
//! [`Driver`](zcnet_buffer::Driver) trait.
//!
//! ## What the kernel supplies
//!
//! 1. **DMA memory for the pool**: build the [`FramePool`](zcnet_buffer::FramePool) over memory
//!    the device can address, with an [`AddressMap`](zcnet_buffer::AddressMap) that gives each
//!    slot's device address (identity for an identity-mapped kernel, as a `StaticPool` is).
//! 2. **A `Hal`** (virtio-drivers' trait): `dma_alloc` for the virtqueues, and a `share` that
//!    returns the buffer's own device address. A `Hal` that copies into a bounce buffer would
//!    add a copy per frame; [`VirtioNet::new`] detects it and refuses
//!    ([`VirtioError::DmaAddressMismatch`]).
//! 3. **Interrupt wiring**: route the device's interrupts to the [`VirtioIrq`] — with MSI-X, the
//!    RX queue's vector to [`VirtioIrq::handle_rx_interrupt`] and the TX queue's to
//!    [`VirtioIrq::handle_tx_interrupt`]; with a shared INTx line, read the ISR status to
//!    acknowledge it, then call [`VirtioIrq::handle_interrupt`] (and
//!    [`VirtioIrq::handle_config_interrupt`] when its bit 1 is set). The configuration-change
//!    interrupt (MSI-X `msix_config` vector) goes to [`VirtioIrq::handle_config_interrupt`].
//!
//! `examples/qemu-kernel/` in the repository is a complete x86_64 kernel doing all three.
//!
//! ## QEMU before 8.1 under TCG with one CPU
//!
//! Asking for an interrupt is a store (`used_event`), a full fence, then a load (`used.idx`);
//! the device does the mirror image, and the fences make sure one side sees the other. QEMU's
//! TCG before 8.1 drops the guest's fences when the machine can only ever have one CPU
//! (`-smp 1`), although its device emulation runs on another host thread: the guest's store
//! can then still sit in the host's store buffer while both sides read the other's old value,
//! and the interrupt is never raised. The driver then sleeps with used buffers on its RX ring
//! until something else polls it; with [`VirtioConfig::with_rx_defer`] off nothing does, and a
//! TCP stream into the guest stalls for good (in the example kernel, about one 8-second iperf3
//! stream in several, at gigabits per second). The same race
//! can lose a TX interrupt request or a notification the device asked for. Give such a QEMU
//! `-smp 1,maxcpus=2` (still one CPU; TCG then keeps the fences), or use KVM, QEMU 8.1 or
//! later, or real hardware, where the fences hold.
//!
//! ## Features
//!
//! * `log`: the driver logs through the [`log`](https://docs.rs/log) crate (target
//!   `zcnet_virtio::net`): its set-up (info), a device that broke the queue protocol (error),
//!   an RX queue left empty by a dry pool and an unreadable link status (warn), refused and
//!   dropped frames and link status reads (debug). Nothing per frame that goes through, and
//!   nothing in the interrupt handlers ([`VirtioIrq`]'s methods stay lock-free).
//! * `defmt`: the same through [`defmt`](https://docs.rs/defmt). Exclusive with `log`; without
//!   either no logging code is compiled.

#![no_std]
#![deny(missing_docs)]

// First: the logging macros are used by the modules below.
#[macro_use]
mod logging;

mod irq;
mod net;
mod notify;
mod ring;
mod shared;

// The inert test transport, shared by the unit tests of `ring` and `notify`.
#[cfg(test)]
#[path = "../tests/support/inert_transport.rs"]
mod inert_transport;

pub use irq::{VirtioIrq, VirtioStats};
pub use net::{VirtioConfig, VirtioError, VirtioNet, MIN_RX_BUFFER, MTU};
pub use notify::{Doorbells, PciNotify, QueueAreas, DIRECT_QUEUES};
pub use shared::SharedTransport;
