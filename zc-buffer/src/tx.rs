//! The transmit leases: [`TxFrame`] (being filled) and [`InFlight`] (handed to the device).

use core::fmt;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};

use crate::error::FrameError;
use crate::pool::FramePool;
use crate::rx::RxFrame;
use crate::slot::SlotState;

/// A slot being filled for transmission (state TX), with headroom in front of its data.
///
/// The usual order: write the payload in place ([`buffer_mut`](Self::buffer_mut) then
/// [`set_len`](Self::set_len), or [`append`](Self::append)), then put each header in front with
/// [`push_header`](Self::push_header), innermost first, so the payload is written once and never
/// moved. The frame derefs to its current bytes (headers + payload).
///
/// A fresh frame's bytes are whatever the slot held before: the pool does not zero slots. Dropped
/// unsent, the slot returns to the pool.
///
/// ```text
///  slot: | headroom ........ | data (len bytes) | tailroom ............ |
///        0                 start              end                 slot_size
/// ```
pub struct TxFrame {
    pool: &'static FramePool,
    slot: u32,
    /// Offset of the first data byte. Invariant: `start <= end <= slot_size`.
    start: u32,
    /// Offset one past the last data byte.
    end: u32,
}

impl TxFrame {
    pub(crate) fn new(pool: &'static FramePool, slot: u32, headroom: u32) -> Self {
        Self {
            pool,
            slot,
            start: headroom,
            end: headroom,
        }
    }

    fn slot_size(&self) -> usize {
        self.pool.slot_size()
    }

    /// Bytes free in front of the data for [`push_header`](Self::push_header).
    pub fn headroom(&self) -> usize {
        self.start as usize
    }

    /// Bytes free after the data.
    pub fn tailroom(&self) -> usize {
        self.slot_size() - self.end as usize
    }

    /// The largest length [`set_len`](Self::set_len) accepts: from the data start to the slot end.
    pub fn capacity(&self) -> usize {
        self.slot_size() - self.start as usize
    }

    /// Moves the data start to `headroom` bytes into the slot. Only on an empty frame (a driver or
    /// protocol that needs more, or less, room in front than the pool's default).
    pub fn set_headroom(&mut self, headroom: usize) -> Result<(), FrameError> {
        if self.start != self.end {
            return Err(FrameError::NotEmpty);
        }
        if headroom > self.slot_size() {
            return Err(FrameError::Headroom {
                requested: headroom,
                available: self.slot_size(),
            });
        }
        self.start = headroom as u32;
        self.end = headroom as u32;
        Ok(())
    }

    /// Everything from the data start to the end of the slot, to write a payload into; then call
    /// [`set_len`](Self::set_len).
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        let len = self.capacity();
        self.range_mut(self.start as usize, len)
    }

    /// Sets the data length to `len` bytes from the data start. Errors if `len` exceeds
    /// [`capacity`](Self::capacity).
    pub fn set_len(&mut self, len: usize) -> Result<(), FrameError> {
        if len > self.capacity() {
            return Err(FrameError::Length {
                requested: len,
                available: self.capacity(),
            });
        }
        self.end = self.start + len as u32;
        Ok(())
    }

    /// Grows the data by `n` bytes at the end and returns them to be written. Errors if the
    /// tailroom is smaller.
    pub fn append(&mut self, n: usize) -> Result<&mut [u8], FrameError> {
        if n > self.tailroom() {
            return Err(FrameError::Length {
                requested: n,
                available: self.tailroom(),
            });
        }
        let at = self.end as usize;
        self.end += n as u32;
        Ok(self.range_mut(at, n))
    }

    /// Grows the data by `n` bytes at the front and returns them, for a header. Errors if the
    /// headroom is smaller.
    pub fn push_header(&mut self, n: usize) -> Result<&mut [u8], FrameError> {
        if n > self.headroom() {
            return Err(FrameError::Headroom {
                requested: n,
                available: self.headroom(),
            });
        }
        self.start -= n as u32;
        Ok(self.range_mut(self.start as usize, n))
    }

    /// The slot's index in its pool.
    pub fn slot_index(&self) -> usize {
        self.slot as usize
    }

    /// The pool the frame belongs to.
    pub fn pool(&self) -> &'static FramePool {
        self.pool
    }

    /// Offset of the first data byte inside the slot.
    pub fn offset_in_slot(&self) -> usize {
        self.start as usize
    }

    /// Hands the frame to the device (TX → DEVICE). The driver keeps the returned lease until the
    /// device reports completion, then drops it.
    pub fn into_device(self) -> InFlight {
        let this = ManuallyDrop::new(self);
        this.pool
            .transition(this.slot, SlotState::Tx, SlotState::Device);
        InFlight {
            pool: this.pool,
            slot: this.slot,
            start: this.start,
            end: this.end,
        }
    }

    /// `len` bytes of the slot from `offset`; the callers keep `offset + len <= slot_size`.
    fn range_mut(&mut self, offset: usize, len: usize) -> &mut [u8] {
        // SAFETY: this lease owns the slot exclusively, `&mut self` makes the borrow unique, and
        // every caller keeps `offset + len <= slot_size`.
        unsafe {
            self.pool
                .bytes_mut(self.slot, offset as u32, (offset + len) as u32)
        }
    }
}

impl Deref for TxFrame {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: this lease owns the slot exclusively, `&self` rules out a `&mut` for the
        // borrow, and `start <= end <= slot_size` (kept by every method that moves them).
        unsafe { self.pool.bytes(self.slot, self.start, self.end) }
    }
}

impl DerefMut for TxFrame {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = (self.end - self.start) as usize;
        self.range_mut(self.start as usize, len)
    }
}

impl Drop for TxFrame {
    fn drop(&mut self) {
        self.pool.release(self.slot, SlotState::Tx);
    }
}

impl fmt::Debug for TxFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxFrame")
            .field("slot", &self.slot)
            .field("headroom", &self.start)
            .field("len", &(self.end - self.start))
            .finish()
    }
}

/// A frame the device is transmitting (state DEVICE). It derefs to the frame's bytes so the
/// driver can hand them to the device; dropping it on completion returns the slot to the pool.
pub struct InFlight {
    pool: &'static FramePool,
    slot: u32,
    start: u32,
    end: u32,
}

impl InFlight {
    /// The device (physical) address of the frame's first byte.
    pub fn device_addr(&self) -> u64 {
        self.pool.device_addr(self.slot, self.start as usize)
    }

    /// The slot's index in its pool.
    pub fn slot_index(&self) -> usize {
        self.slot as usize
    }

    /// For a loopback device: the frame it was given to transmit is what it receives. The slot
    /// becomes an [`RxFrame`] showing the same bytes (DEVICE → STACK), without a copy; dropping
    /// that frame returns the slot to this pool, as completion would have.
    ///
    /// A device that links two stacks in one address space (the in-memory wire of zcnet's
    /// tests and benchmarks) hands the sender's slot to the receiver this way, as smoltcp's
    /// `Loopback` hands over its buffer. The receiver then holds a slot of the *sender's* pool
    /// until it drops the frame, which is the sender's TX backpressure.
    pub fn loop_back(self) -> RxFrame {
        let this = ManuallyDrop::new(self);
        this.pool
            .transition(this.slot, SlotState::Device, SlotState::Stack);
        RxFrame::new(this.pool, this.slot, this.start, this.end)
    }
}

impl Deref for InFlight {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: this lease owns the slot exclusively, `&self` rules out a `&mut`, and
        // `start <= end <= slot_size` (inherited from the TxFrame it came from).
        unsafe { self.pool.bytes(self.slot, self.start, self.end) }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.pool.release(self.slot, SlotState::Device);
    }
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("slot", &self.slot)
            .field("len", &(self.end - self.start))
            .finish()
    }
}
