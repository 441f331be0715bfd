//! The receive leases: [`PostedSlot`] (a buffer the device may write) and [`RxFrame`] (a received
//! frame the stack or the application holds).

use core::fmt;
use core::mem::ManuallyDrop;
use core::ops::Deref;

use crate::error::FrameError;
use crate::offload::{GsoInfo, RxMarks};
use crate::pool::FramePool;
use crate::slot::SlotState;

/// A slot lent to the device as a receive buffer (state POSTED).
///
/// The driver keeps it (for virtio, in its token → slot map) while the device owns the memory,
/// then turns it into an [`RxFrame`] with [`complete`](Self::complete). Dropping it returns the
/// slot to the pool (a ring reset, a driver shutting down).
pub struct PostedSlot {
    pool: &'static FramePool,
    slot: u32,
}

impl PostedSlot {
    pub(crate) fn new(pool: &'static FramePool, slot: u32) -> Self {
        Self { pool, slot }
    }

    /// The slot's index in its pool.
    pub fn slot_index(&self) -> usize {
        self.slot as usize
    }

    /// The pool the slot belongs to.
    pub fn pool(&self) -> &'static FramePool {
        self.pool
    }

    /// Bytes the device may write: the whole slot.
    pub fn capacity(&self) -> usize {
        self.pool.slot_size()
    }

    /// The device (physical) address of the slot's first byte.
    pub fn device_addr(&self) -> u64 {
        self.pool.device_addr(self.slot, 0)
    }

    /// The whole slot, for a driver that receives by CPU write (a TAP `read`) or that must hand
    /// the device a slice (virtio-drivers' `receive_begin`).
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        let end = self.capacity() as u32;
        // SAFETY: this lease owns the slot exclusively (pool ground rules) and `&mut self` makes
        // the returned borrow unique; `0 <= slot_size`.
        unsafe { self.pool.bytes_mut(self.slot, 0, end) }
    }

    /// The device wrote `len` bytes from the slot's start: the slot becomes an [`RxFrame`]
    /// (POSTED → STACK).
    ///
    /// A `len` larger than the slot is an error (a misbehaving device); the slot then returns to
    /// the pool and the driver should count a drop.
    #[inline(always)]
    pub fn complete(self, len: usize) -> Result<RxFrame, FrameError> {
        self.complete_range(0, len)
    }

    /// The device wrote a frame of `len` bytes starting `offset` bytes into the slot (after a
    /// virtio-net header, say). Errors like [`complete`](Self::complete).
    #[inline(always)]
    pub fn complete_range(self, offset: usize, len: usize) -> Result<RxFrame, FrameError> {
        let capacity = self.capacity();
        let end = offset.checked_add(len).filter(|&end| end <= capacity);
        let Some(end) = end else {
            return Err(FrameError::Length {
                requested: offset.saturating_add(len),
                available: capacity,
            });
        };
        let this = ManuallyDrop::new(self);
        this.pool
            .transition(this.slot, SlotState::Posted, SlotState::Stack);
        Ok(RxFrame::new(
            this.pool,
            this.slot,
            offset as u32,
            end as u32,
        ))
    }
}

impl Drop for PostedSlot {
    fn drop(&mut self) {
        self.pool.release(self.slot, SlotState::Posted);
    }
}

impl fmt::Debug for PostedSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostedSlot")
            .field("slot", &self.slot)
            .finish()
    }
}

/// A received frame: an owning lease on one pool slot (state STACK, or LENT once handed to the
/// application).
///
/// It derefs to the received bytes. [`advance`](Self::advance) and
/// [`truncate`](Self::truncate) strip headers and trailers without copying. Dropping it —
/// on any thread, or in an interrupt handler — returns the slot to the pool without a lock or an
/// allocation and wakes the driver if it waits to refill its ring. It is `Send` but not `Clone`:
/// exactly one owner per slot.
///
/// ```compile_fail
/// # use zcnet_buffer::{FramePool, PoolConfig};
/// let pool = FramePool::leak(PoolConfig::new(1)).unwrap();
/// let frame = pool.try_alloc_rx().unwrap().complete(0).unwrap();
/// let twin = frame.clone(); // no: two owners of one slot
/// ```
pub struct RxFrame {
    pool: &'static FramePool,
    slot: u32,
    /// Offset of the first visible byte inside the slot. Invariant: `start <= end <= slot_size`.
    start: u32,
    /// Offset one past the last visible byte inside the slot.
    end: u32,
    /// Whether the frame was lent to the application (state LENT rather than STACK).
    lent: bool,
    /// What the driver said about the packet (none for a fresh lease): [`RxMarks`]' two
    /// fields, kept apart so that the lease stays 24 bytes.
    mark_flags: u8,
    mark_gso_size: u16,
}

impl RxFrame {
    /// A received-frame lease on `slot`, whose state the caller has just made STACK, showing
    /// bytes `start..end` (`start <= end <= slot_size`).
    pub(crate) fn new(pool: &'static FramePool, slot: u32, start: u32, end: u32) -> Self {
        Self {
            pool,
            slot,
            start,
            end,
            lent: false,
            mark_flags: 0,
            mark_gso_size: 0,
        }
    }

    fn marks(&self) -> RxMarks {
        RxMarks {
            flags: self.mark_flags,
            gso_size: self.mark_gso_size,
        }
    }

    fn store_marks(&mut self, marks: RxMarks) {
        self.mark_flags = marks.flags;
        self.mark_gso_size = marks.gso_size;
    }

    /// Whether the driver marked the packet's checksums as verified: the device checked the
    /// L4 checksum (and an IPv4 header checksum), or the packet came from the host with a
    /// partial checksum that never crossed a wire (its checksum field then holds only the
    /// pseudo-header sum). A stack that trusts the mark skips its own check; see the
    /// [checksum contract](crate::offload). For a chain, the head frame's mark counts.
    /// `advance` and `truncate` keep it.
    pub fn checksum_verified(&self) -> bool {
        self.marks().verified()
    }

    /// Sets (or clears) the [`checksum_verified`](Self::checksum_verified) mark. Drivers only.
    pub fn set_checksum_verified(&mut self, verified: bool) {
        let mut m = self.marks();
        m.set_verified(verified);
        self.store_marks(m);
    }

    /// How the device merged this packet from smaller TCP segments (a large receive, a TAP
    /// read of a GSO packet), when it says so; `None` for an ordinary packet. For a chain, the
    /// head frame's mark counts. `advance` and `truncate` keep it.
    pub fn gso_info(&self) -> Option<GsoInfo> {
        self.marks().gso()
    }

    /// Sets (or clears) the [`gso_info`](Self::gso_info) mark. Drivers only.
    pub fn set_gso_info(&mut self, info: Option<GsoInfo>) {
        let mut m = self.marks();
        m.set_gso(info);
        self.store_marks(m);
    }

    /// Hides the first `n` bytes (a header already parsed). Errors if the frame is shorter.
    pub fn advance(&mut self, n: usize) -> Result<(), FrameError> {
        if n > self.len() {
            return Err(FrameError::Length {
                requested: n,
                available: self.len(),
            });
        }
        self.start += n as u32;
        Ok(())
    }

    /// Keeps only the first `len` bytes (drops a trailer or padding). Errors if the frame is
    /// shorter than `len`.
    pub fn truncate(&mut self, len: usize) -> Result<(), FrameError> {
        if len > self.len() {
            return Err(FrameError::Length {
                requested: len,
                available: self.len(),
            });
        }
        self.end = self.start + len as u32;
        Ok(())
    }

    /// Marks the frame as owned by the application (STACK → LENT): the stack calls this when it
    /// moves the frame into a zero-copy socket's queue. Calling it again does nothing.
    pub fn lend_to_app(&mut self) {
        if !self.lent {
            self.pool
                .transition(self.slot, SlotState::Stack, SlotState::Lent);
            self.lent = true;
        }
    }

    /// Whether [`lend_to_app`](Self::lend_to_app) was called.
    pub fn is_lent(&self) -> bool {
        self.lent
    }

    /// The slot's index in its pool.
    pub fn slot_index(&self) -> usize {
        self.slot as usize
    }

    /// The pool the frame belongs to.
    pub fn pool(&self) -> &'static FramePool {
        self.pool
    }

    /// Offset of the first visible byte inside the slot (grows with [`advance`](Self::advance)).
    pub fn offset_in_slot(&self) -> usize {
        self.start as usize
    }

    /// Bytes of the slot past the visible ones: what [`append_from`](Self::append_from) can
    /// still take.
    pub fn tail_room(&self) -> usize {
        self.pool.slot_size() - self.end as usize
    }

    /// The visible bytes, writable (the lease owns the slot: nobody else sees them).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: this lease owns the slot exclusively and `&mut self` makes the borrow unique;
        // `start <= end <= slot_size` (the invariant of the fields).
        unsafe { self.pool.bytes_mut(self.slot, self.start, self.end) }
    }

    /// Copies `data` into the slot right after the visible bytes and makes it visible: lets the
    /// stack merge a small payload into a frame it already holds instead of keeping a second
    /// slot. The copy is the caller's to record in the copy ledger.
    ///
    /// Errors, changing nothing, when `data` does not fit in the [`tail_room`](Self::tail_room)
    /// ([`FrameError::Length`]) or the frame was [lent to the application](Self::lend_to_app)
    /// ([`FrameError::Lent`]).
    pub fn append_from(&mut self, data: &[u8]) -> Result<(), FrameError> {
        if self.lent {
            return Err(FrameError::Lent);
        }
        let room = self.tail_room();
        if data.len() > room {
            return Err(FrameError::Length {
                requested: data.len(),
                available: room,
            });
        }
        let new_end = self.end + data.len() as u32;
        // SAFETY: this lease owns the slot exclusively and `&mut self` makes the borrow unique;
        // `end <= new_end <= slot_size` (checked against the tail room above).
        let tail = unsafe { self.pool.bytes_mut(self.slot, self.end, new_end) };
        tail.copy_from_slice(data);
        self.end = new_end;
        Ok(())
    }
}

impl Deref for RxFrame {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: this lease owns the slot exclusively, `&self` rules out a `&mut` for the
        // borrow, and `start <= end <= slot_size` (set by `complete_range`, kept by `advance` and
        // `truncate`).
        unsafe { self.pool.bytes(self.slot, self.start, self.end) }
    }
}

impl AsRef<[u8]> for RxFrame {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for RxFrame {
    fn drop(&mut self) {
        let from = if self.lent {
            SlotState::Lent
        } else {
            SlotState::Stack
        };
        self.pool.release(self.slot, from);
    }
}

impl fmt::Debug for RxFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RxFrame")
            .field("slot", &self.slot)
            .field("offset", &self.start)
            .field("len", &self.len())
            .field("lent", &self.lent)
            .field("marks", &self.marks())
            .finish()
    }
}
