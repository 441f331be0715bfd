//! # zcnet-buffer: the memory frames live in
//!
//! This crate is the bottom of zcnet's data path. A [`FramePool`] carves `'static` memory (a
//! `static`, DMA memory, a leaked box) into fixed-size slots that never move. Slots travel as
//! owning leases, each the only way to reach its bytes:
//!
//! ```text
//!  RX  pool ─try_alloc_rx─► PostedSlot ─(device writes)─ complete ─► RxFrame ─► stack
//!        ▲                   (POSTED)                                 (STACK)    │ lend_to_app
//!        │                                                                       ▼
//!        └───────────── drop, any thread or interrupt: lock-free ─────────── RxFrame (LENT, app)
//!
//!  TX  pool ─try_alloc_tx─► TxFrame ─write payload, push_header─► into_device ─► InFlight
//!        ▲                   (TX, headroom)                                       (DEVICE)
//!        └───────────────────────────── drop on completion ──────────────────────────┘
//!
//!  loopback   InFlight ─loop_back─► RxFrame (STACK): a loopback device receives what it sent
//!
//!  TCP  TxFrame ─retain─► RetainedFrame (RETAINED, the socket's until acknowledged)
//!         poll_send ─► TxFrame (SENT, headers in front) ─► driver ─► InFlight ─► completion
//!         └──── back to RETAINED for a retransmission; the ACK drops it ─► FREE ◄──┘
//! ```
//!
//! * [`RxFrame`] derefs to the received bytes; [`advance`](RxFrame::advance) and
//!   [`truncate`](RxFrame::truncate) strip headers and trailers without copying. Dropping it
//!   returns the slot with one compare-exchange and wakes the driver if it waits to refill its
//!   ring.
//! * [`TxFrame`] reserves headroom, so the payload is written once and headers go in front
//!   ([`push_header`](TxFrame::push_header)).
//! * [`RetainedFrame`] is a frame a socket keeps until acknowledged: the device transmits the
//!   very slot, as often as needed, and the socket and the device let go of it independently
//!   (compare-exchange on the slot's state; exactly one of them frees it).
//! * A packet larger than a slot (a 64 KiB super-segment received through merged buffers or
//!   sent with TSO) is a [`FrameChain`]: [`RxChain`] and [`TxChain`] hold up to
//!   [`MAX_CHAIN_SEGMENTS`] frames inline, each still the one lease of its slot and returned on
//!   its own when dropped, so memory stays proportional to the bytes held. They give drivers
//!   the payload as scatter-gather slices ([`iter`](FrameChain::iter)) and the application a
//!   cursor, in-place access and copies counted in the ledger (the [`chain`] module).
//! * Exhaustion is `None` or `Poll::Pending`, counted in [`PoolStats`]: never a panic, never an
//!   allocation. Bad lengths are [`FrameError`]s.
//! * [`FramePool::occupancy`] counts slots per [`SlotState`]; [`FramePool::audit`] proves that no
//!   slot was lost or returned twice.
//! * The [`Driver`] trait is what zcnet's drivers implement and the stack consumes; drivers depend
//!   on this crate only.
//! * The [`ledger`] counts every payload copy zcnet makes, per [`CopySite`].
//! * [`capture::Capture`] wraps any driver and writes every frame it moves to a sink in pcap
//!   format (`tcpdump -r`, Wireshark); a driver that is not wrapped pays nothing.
//!
//! `no_std`, no allocator needed ([`StaticPool`] puts everything in a `static`); the `alloc`
//! feature adds [`FramePool::leak`], the `std` feature (which implies `alloc`) the capture's
//! sink over `std::io::Write` (`capture::IoSink`), and the `sim` feature (which implies `std`)
//! simulated drivers for tests and demos: a hand-driven ring NIC and an in-memory wire with
//! fault injection between two drivers (`sim`). Targets need 64-bit atomic compare-exchange.
//!
//! ```
//! use zcnet_buffer::{FramePool, PoolConfig, SlotState};
//!
//! let pool = FramePool::leak(PoolConfig::new(4)).unwrap();
//!
//! // The driver posts a slot, the device fills it, the driver completes it.
//! let mut posted = pool.try_alloc_rx().unwrap();
//! posted.buffer_mut()[..6].copy_from_slice(b"hdrabc");
//! let mut frame = posted.complete(6).unwrap();
//! frame.advance(3).unwrap(); // strip a 3-byte header, no copy
//! assert_eq!(&frame[..], b"abc");
//! assert_eq!(pool.occupancy().stack, 1);
//!
//! // Dropped anywhere, the slot goes back.
//! std::thread::spawn(move || drop(frame)).join().unwrap();
//! assert_eq!(pool.audit().unwrap().free, 4);
//!
//! // Transmit: payload first, headers in front.
//! let mut tx = pool.try_alloc_tx().unwrap();
//! tx.append(5).unwrap().copy_from_slice(b"hello");
//! tx.push_header(2).unwrap().copy_from_slice(b"H:");
//! assert_eq!(&tx[..], b"H:hello");
//! assert_eq!(pool.slot_state(tx.slot_index()), Some(SlotState::Tx));
//! ```

#![no_std]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod capture;
pub mod chain;
mod driver;
mod error;
// `doc`: the documentation shows the `alloc` part whatever features are on.
#[cfg(any(feature = "alloc", test, doc))]
mod heap;
pub mod ledger;
pub mod offload;
mod pool;
mod region;
mod rx;
#[cfg(feature = "sim")]
pub mod sim;
mod slot;
#[cfg(not(loom))]
mod storage;
mod sync;
mod thread;
mod tx;
mod waker_cell;

#[cfg(all(test, not(loom)))]
mod chain_tests;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod offload_tests;
#[cfg(all(test, not(loom)))]
mod tests;

pub use chain::{
    ChainFrame, ChainReader, Drain, FrameChain, InFlightChain, RxChain, TxChain, MAX_CHAIN_SEGMENTS,
};
pub use driver::{
    Capabilities, ChecksumOffloads, Driver, HardwareAddress, LinkState, Medium, RxPacket, TxError,
    ETHERNET_HEADER_LEN,
};
pub use error::{ChainError, FrameError, PoolError};
pub use ledger::CopySite;
pub use offload::{ChecksumPartial, GsoInfo, GsoKind, GsoKinds, GsoRequest};
pub use pool::{
    AuditError, FramePool, Occupancy, PoolConfig, PoolOwner, PoolStats, DEFAULT_HEADROOM,
    DEFAULT_SLOT_SIZE, MAX_SLOTS, MAX_SLOT_SIZE, OWNER_CACHE, SLOT_ALIGN,
};
pub use region::{AddressMap, FrameRegion};
pub use rx::{PostedSlot, RxFrame};
pub use slot::{SlotMeta, SlotState};
#[cfg(not(loom))]
pub use storage::{PoolCell, StaticPool};
pub use tx::{InFlight, RetainedFrame, TxFrame};
pub use waker_cell::WakerCell;
