//! Slot states and the per-slot metadata the pool keeps beside the frame memory.
//!
//! ```text
//!        alloc_rx          complete         lend_to_app        drop
//!  FREE ─────────► POSTED ─────────► STACK ───────────► LENT ───────► FREE
//!   │  ▲  drop (ring reset)  │          └──────────── drop ──────────────┘
//!   │  └─────────────────────┘
//!   │    alloc_tx         into_device        drop (completion)
//!   └──────────► TX ───────────► DEVICE ──────────────────────► FREE
//!                 │                 └──── loop_back ────► STACK (a loopback device)
//!                 └──────── drop (never sent) ──────────────────► FREE
//!
//!  Retained frames (a TCP send queue keeps each frame until the peer acknowledges it):
//!
//!         retain              send (RETAINED → SENT, a TxFrame for the device)
//!   TX ───────────► RETAINED ◄─────────────────────────────────────► SENT
//!                     │      device done: completion, refusal, drop     │
//!                     │                                                 │ socket lets go
//!                     │ socket lets go                                  ▼
//!                     └────────────────────► FREE ◄──── completion ── DEVICE
//! ```
//!
//! The state byte is bookkeeping: ownership itself is carried by the lease types
//! ([`PostedSlot`](crate::PostedSlot), [`RxFrame`](crate::RxFrame), [`TxFrame`](crate::TxFrame),
//! [`InFlight`](crate::InFlight), [`RetainedFrame`](crate::RetainedFrame)), which are neither
//! `Clone` nor `Copy`. Debug builds check the single-owner transitions against the table above
//! with a compare-exchange; release builds store the new state with one relaxed write.
//!
//! A SENT slot has two owners, the socket (its [`RetainedFrame`](crate::RetainedFrame)) and the
//! device (a retained [`TxFrame`](crate::TxFrame) or [`InFlight`](crate::InFlight)), which let
//! go independently, possibly on different threads or in an interrupt handler. Those edges are
//! compare-exchanges in every build, and exactly one party frees the slot:
//!
//! * device done: SENT → RETAINED (then the pool's retained waker is woken if a task marked
//!   the slot as waited for, see `WATCHED`), or, if the socket let go first (the state is
//!   DEVICE), DEVICE → FREE;
//! * socket lets go: RETAINED → FREE, or SENT → DEVICE (the device's completion frees it).

use crate::sync::{AtomicU32, AtomicU8, Ordering::Relaxed};

/// Where a slot is in its life (see the module diagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SlotState {
    /// On the pool's free list; nobody holds it.
    Free = 0,
    /// Lent to the device as a receive buffer (in the driver's RX ring).
    Posted = 1,
    /// Holds a received frame that the stack is processing.
    Stack = 2,
    /// Holds a received frame that the application owns (a zero-copy datagram).
    Lent = 3,
    /// Being filled for transmission.
    Tx = 4,
    /// Handed to the device for transmission, not yet completed (nobody else holds it).
    Device = 5,
    /// With the device for transmission, and kept by a socket until acknowledged.
    Sent = 6,
    /// Kept by a socket; the device is done with it.
    Retained = 7,
}

impl SlotState {
    /// All states, in the order [`Occupancy`](crate::Occupancy) reports them.
    pub const ALL: [SlotState; 8] = [
        SlotState::Free,
        SlotState::Posted,
        SlotState::Stack,
        SlotState::Lent,
        SlotState::Tx,
        SlotState::Device,
        SlotState::Sent,
        SlotState::Retained,
    ];

    /// The state's name in upper case, as ARCHITECTURE.md writes it.
    pub const fn name(self) -> &'static str {
        match self {
            SlotState::Free => "FREE",
            SlotState::Posted => "POSTED",
            SlotState::Stack => "STACK",
            SlotState::Lent => "LENT",
            SlotState::Tx => "TX",
            SlotState::Device => "DEVICE",
            SlotState::Sent => "SENT",
            SlotState::Retained => "RETAINED",
        }
    }

    /// Whether `self -> to` is an edge of the slot life cycle.
    pub const fn can_become(self, to: SlotState) -> bool {
        use SlotState::*;
        matches!(
            (self, to),
            (Free, Posted)
                | (Free, Tx)
                | (Posted, Stack)
                | (Posted, Free)
                | (Stack, Lent)
                | (Stack, Free)
                | (Lent, Free)
                | (Tx, Device)
                | (Tx, Free)
                | (Device, Free)
                | (Device, Stack)
                | (Tx, Retained)
                | (Retained, Sent)
                | (Retained, Free)
                | (Sent, Retained)
                | (Sent, Device)
        )
    }

    pub(crate) const fn from_u8(v: u8) -> Option<SlotState> {
        match v {
            0 => Some(SlotState::Free),
            1 => Some(SlotState::Posted),
            2 => Some(SlotState::Stack),
            3 => Some(SlotState::Lent),
            4 => Some(SlotState::Tx),
            5 => Some(SlotState::Device),
            6 => Some(SlotState::Sent),
            7 => Some(SlotState::Retained),
            _ => None,
        }
    }
}

/// Set in a SENT slot's state byte by a task that waits for the device to be done with it
/// (`FramePool::watch_retained`): the device's SENT → RETAINED then wakes the pool's retained
/// waker. The byte reads as SENT either way ([`SlotMeta::state`] strips the bit).
pub(crate) const WATCHED: u8 = 0x80;

/// Per-slot bookkeeping: the slot's state and its free-list link.
///
/// The integrator provides one per slot as `&'static mut [SlotMeta]` (see
/// [`FramePool::new`](crate::FramePool::new)); the pool initialises them, so their previous
/// contents do not matter. A `static` array is written
/// `[const { SlotMeta::new() }; N]`.
pub struct SlotMeta {
    /// A [`SlotState`] as `u8`. Written by the slot's current owner only.
    pub(crate) state: AtomicU8,
    /// Index of the next free slot while this one is on the free list. Written by the thread
    /// pushing the slot, before the releasing compare-exchange on the list head; read by poppers
    /// after an acquiring load of the head (a stale read is harmless: the head's tag then makes
    /// the popper's compare-exchange fail).
    pub(crate) next: AtomicU32,
}

impl SlotMeta {
    /// Metadata for one slot, ready to be handed to a pool.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            state: AtomicU8::new(SlotState::Free as u8),
            next: AtomicU32::new(0),
        }
    }

    /// Metadata for one slot, ready to be handed to a pool.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            state: AtomicU8::new(SlotState::Free as u8),
            next: AtomicU32::new(0),
        }
    }

    pub(crate) fn state(&self) -> SlotState {
        // Only values written by the pool are ever stored.
        SlotState::from_u8(self.state.load(Relaxed) & !WATCHED).unwrap_or(SlotState::Free)
    }
}

impl Default for SlotMeta {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for SlotMeta {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SlotMeta")
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}
