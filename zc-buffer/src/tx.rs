//! The transmit leases: [`TxFrame`] (being filled) and [`InFlight`] (handed to the device), and
//! [`RetainedFrame`], a frame a socket keeps until the peer acknowledges it.

use core::fmt;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::task::{Context, Poll};

use crate::error::FrameError;
use crate::offload::{ChecksumPartial, GsoRequest, TxMarks};
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
/// A *retained* frame ([`is_retained`](Self::is_retained), made by [`RetainedFrame::poll_send`])
/// is a slot a socket keeps until acknowledged (state SENT): its data past the headers the stack
/// wrote is the socket's payload, which whoever holds the lease must not change. Dropped (refused
/// or never sent), or dropped as an [`InFlight`] on completion, its slot goes back to the socket
/// (RETAINED) instead of the pool, unless the socket let go meanwhile.
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
    /// The slot is SENT, kept by a socket (see the type docs).
    retained: bool,
    /// Work the stack asks the device to finish (none for a fresh lease).
    marks: TxMarks,
}

impl TxFrame {
    pub(crate) fn new(pool: &'static FramePool, slot: u32, headroom: u32) -> Self {
        Self {
            pool,
            slot,
            start: headroom,
            end: headroom,
            retained: false,
            marks: TxMarks::default(),
        }
    }

    /// The partial checksum the device is to complete, if the frame is so marked (see the
    /// [checksum contract](crate::offload)): `start` counted from the first data byte as the
    /// frame is now. Headers pushed in front later move `start` with them (the mark stays on
    /// the same bytes); a mark whose bytes were trimmed from the front reads as `None`.
    pub fn checksum_partial(&self) -> Option<ChecksumPartial> {
        self.marks.checksum()
    }

    /// Marks the frame's L4 checksum as partial (`Some`), for a driver that advertises
    /// [`TCP_TX`](crate::ChecksumOffloads::TCP_TX) / [`UDP_TX`](crate::ChecksumOffloads::UDP_TX):
    /// the caller has written the pseudo-header sum (not complemented) at
    /// `start + offset`, `start` counted from the first data byte now. `None` clears the mark.
    ///
    /// Errors, changing nothing, when the 2-byte field at `start + offset` is not inside the
    /// frame's data ([`FrameError::Length`]). For a chain, mark the head, which holds the
    /// headers.
    pub fn set_checksum_partial(
        &mut self,
        mark: Option<ChecksumPartial>,
    ) -> Result<(), FrameError> {
        let Some(m) = mark else {
            self.marks.set_checksum(None);
            return Ok(());
        };
        let field_end = usize::from(m.start) + usize::from(m.offset) + 2;
        if field_end > self.len() {
            return Err(FrameError::Length {
                requested: field_end,
                available: self.len(),
            });
        }
        self.marks.set_checksum(Some(m));
        Ok(())
    }

    /// The segmentation the device is to do, if the frame (a chain's head) is so marked (see
    /// [GSO](crate::offload)): `header_len` counted from the first data byte as the frame is
    /// now, so it grows with each header pushed in front.
    pub fn gso_request(&self) -> Option<GsoRequest> {
        self.marks.gso()
    }

    /// Asks the device to segment the packet this frame heads (`Some`), for a driver whose
    /// [`gso_max_size`](crate::Capabilities::gso_max_size) is not 0; `None` clears the mark.
    /// `header_len` counts the headers from the first data byte now (headers pushed later are
    /// added to it). The packet must also carry a [`ChecksumPartial`] mark.
    ///
    /// Errors, changing nothing: [`FrameError::Length`] when `header_len` is longer than the
    /// frame's data or `segment_size` is 0.
    pub fn set_gso_request(&mut self, request: Option<GsoRequest>) -> Result<(), FrameError> {
        let Some(r) = request else {
            self.marks.set_gso(None);
            return Ok(());
        };
        if usize::from(r.header_len) > self.len() || r.segment_size == 0 {
            return Err(FrameError::Length {
                requested: usize::from(r.header_len),
                available: self.len(),
            });
        }
        self.marks.set_gso(Some(r));
        Ok(())
    }

    /// Whether the frame carries any mark (a partial checksum, a GSO request).
    pub fn has_marks(&self) -> bool {
        !self.marks.is_empty()
    }

    /// Whether a socket keeps this frame's slot until acknowledged (see the type docs).
    pub fn is_retained(&self) -> bool {
        self.retained
    }

    /// Hands the frame to a socket that keeps it until acknowledged (TX → RETAINED), with its
    /// data as the payload. A frame that is already retained is given back as the error.
    #[inline(always)]
    pub fn retain(self) -> Result<RetainedFrame, TxFrame> {
        if self.retained {
            return Err(self);
        }
        let this = ManuallyDrop::new(self);
        this.pool
            .transition(this.slot, SlotState::Tx, SlotState::Retained);
        Ok(RetainedFrame {
            pool: this.pool,
            slot: this.slot,
            start: this.start,
            end: this.end,
        })
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
        self.marks = TxMarks::default();
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
        self.marks.grow(n);
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

    /// Hands the frame to the device (TX → DEVICE; a retained frame stays SENT). The driver
    /// keeps the returned lease until the device reports completion, then drops it.
    #[inline(always)]
    pub fn into_device(self) -> InFlight {
        let this = ManuallyDrop::new(self);
        if !this.retained {
            this.pool
                .transition(this.slot, SlotState::Tx, SlotState::Device);
        }
        InFlight {
            pool: this.pool,
            slot: this.slot,
            start: this.start,
            end: this.end,
            retained: this.retained,
            marks: this.marks,
        }
    }

    /// Hides the first `n` data bytes (at most the data length), which become headroom: a
    /// [`FrameChain`](crate::FrameChain) dropping bytes from its front. A retained frame's
    /// payload in its [`RetainedFrame`] is not touched; only this lease's view moves.
    pub(crate) fn advance(&mut self, n: usize) {
        let n = n.min(self.len());
        self.start += n as u32;
        self.marks.shrink(n);
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
        if self.retained {
            self.pool.device_done(self.slot);
        } else {
            self.pool.release(self.slot, SlotState::Tx);
        }
    }
}

impl fmt::Debug for TxFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxFrame")
            .field("slot", &self.slot)
            .field("headroom", &self.start)
            .field("len", &(self.end - self.start))
            .field("retained", &self.retained)
            .field("marks", &self.marks)
            .finish()
    }
}

/// A frame the device is transmitting (state DEVICE, or SENT for a retained frame). It derefs to
/// the frame's bytes so the driver can hand them to the device; dropping it on completion returns
/// the slot to the pool (a retained frame's to the socket that keeps it).
pub struct InFlight {
    pool: &'static FramePool,
    slot: u32,
    start: u32,
    end: u32,
    retained: bool,
    marks: TxMarks,
}

impl InFlight {
    /// The [`TxFrame`]'s partial-checksum mark (see [`TxFrame::checksum_partial`]).
    pub fn checksum_partial(&self) -> Option<ChecksumPartial> {
        self.marks.checksum()
    }

    /// The [`TxFrame`]'s GSO request (see [`TxFrame::gso_request`]).
    pub fn gso_request(&self) -> Option<GsoRequest> {
        self.marks.gso()
    }

    /// The device (physical) address of the frame's first byte.
    pub fn device_addr(&self) -> u64 {
        self.pool.device_addr(self.slot, self.start as usize)
    }

    /// The slot's index in its pool.
    pub fn slot_index(&self) -> usize {
        self.slot as usize
    }

    /// Whether a socket keeps this frame's slot until acknowledged (state SENT).
    pub fn is_retained(&self) -> bool {
        self.retained
    }

    /// Whether a task waits for this retained frame to come back from the device, to send it
    /// again (it polled the socket's [`RetainedFrame::poll_idle`], which marked the slot
    /// watched). Dropping the `InFlight` wakes that task. A driver that reclaims completed
    /// frames only when it is called, with TX interrupts off, asks for a TX interrupt while a
    /// frame it holds is watched: otherwise nothing would call it to return the frame and the
    /// retransmission would wait for unrelated traffic. Always `false` for a frame that is not
    /// retained.
    pub fn is_watched(&self) -> bool {
        self.retained && self.pool.is_watched(self.slot)
    }

    /// For a loopback device: the frame it was given to transmit is what it receives. The slot
    /// becomes an [`RxFrame`] showing the same bytes (DEVICE → STACK), without a copy; dropping
    /// that frame returns the slot to this pool, as completion would have.
    ///
    /// A device that links two stacks in one address space (the in-memory wire of zcnet's
    /// tests and benchmarks) hands the sender's slot to the receiver this way, as smoltcp's
    /// `Loopback` hands over its buffer. The receiver then holds a slot of the *sender's* pool
    /// until it drops the frame, which is the sender's TX backpressure.
    ///
    /// A retained frame cannot be lent (its socket keeps the slot): it comes back as the error,
    /// and the device copies it into a receive buffer of its own instead.
    pub fn loop_back(self) -> Result<RxFrame, InFlight> {
        if self.retained {
            return Err(self);
        }
        let this = ManuallyDrop::new(self);
        this.pool
            .transition(this.slot, SlotState::Device, SlotState::Stack);
        Ok(RxFrame::new(this.pool, this.slot, this.start, this.end))
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
        if self.retained {
            self.pool.device_done(self.slot);
        } else {
            self.pool.release(self.slot, SlotState::Device);
        }
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

/// A frame a socket keeps until the peer acknowledges it (state RETAINED, or SENT while the
/// device also has it). Its data is payload; the headroom in front of it is where the stack
/// writes headers each time it sends the frame.
///
/// * [`poll_send`](Self::poll_send) lends the slot to the device as a retained [`TxFrame`]
///   (RETAINED → SENT) showing the data; only when the device is done with the previous send.
/// * [`data`](Self::data), [`append`](Self::append) and [`tailroom`](Self::tailroom) reach the
///   bytes only while the device does not have the slot (RETAINED).
/// * [`advance`](Self::advance) drops acknowledged bytes from the front.
/// * Dropped, the slot is freed now (RETAINED) or by the device's completion (SENT): exactly
///   one of the two frees it, whatever the interleaving (`pool.rs`'s ground rules).
pub struct RetainedFrame {
    pool: &'static FramePool,
    slot: u32,
    /// Offset of the first payload byte. Invariant: `start <= end <= slot_size`.
    start: u32,
    /// Offset one past the last payload byte.
    end: u32,
}

impl RetainedFrame {
    /// Payload bytes.
    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    /// Whether no payload is left.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Bytes free in front of the payload, for headers.
    pub fn headroom(&self) -> usize {
        self.start as usize
    }

    /// The slot's index in its pool.
    pub fn slot_index(&self) -> usize {
        self.slot as usize
    }

    /// The pool the frame belongs to.
    pub fn pool(&self) -> &'static FramePool {
        self.pool
    }

    /// Whether the device is done with the slot (RETAINED), so that it can be sent again or its
    /// bytes read.
    pub fn is_idle(&self) -> bool {
        self.pool.is_idle(self.slot)
    }

    /// `Ready` when the device is done with the slot; else registers `cx`'s waker in the pool's
    /// retained waker (one registrant: the task that resends) and marks the slot watched, so
    /// that the device's completion of this slot wakes it.
    pub fn poll_idle(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_idle() {
            return Poll::Ready(());
        }
        if self.pool.watch_retained(self.slot, cx.waker()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// The payload, or `None` while the device has the slot.
    pub fn data(&self) -> Option<&[u8]> {
        if !self.is_idle() {
            return None;
        }
        // SAFETY: the slot is RETAINED and only `poll_send`, which takes `&mut self`, moves it
        // back to SENT, so no other lease exists for the borrow; `&self` rules out a `&mut`, and
        // `start <= end <= slot_size`.
        Some(unsafe { self.pool.bytes(self.slot, self.start, self.end) })
    }

    /// Bytes free after the payload: 0 while the device has the slot.
    pub fn tailroom(&self) -> usize {
        if self.is_idle() {
            self.pool.slot_size() - self.end as usize
        } else {
            0
        }
    }

    /// Grows the payload by `n` bytes at the end and returns them to be written. Errors if the
    /// tailroom is smaller (0 while the device has the slot).
    pub fn append(&mut self, n: usize) -> Result<&mut [u8], FrameError> {
        let room = self.tailroom();
        if n > room {
            return Err(FrameError::Length {
                requested: n,
                available: room,
            });
        }
        let at = self.end;
        self.end += n as u32;
        // SAFETY: the slot is RETAINED (`tailroom` is 0 otherwise) and `&mut self` keeps it so
        // and makes the borrow unique; `at + n <= slot_size` was checked.
        Ok(unsafe { self.pool.bytes_mut(self.slot, at, self.end) })
    }

    /// The free bytes after the payload, to write into before [`commit`](Self::commit); empty
    /// while the device has the slot.
    pub fn spare_mut(&mut self) -> &mut [u8] {
        let room = self.tailroom() as u32;
        // SAFETY: as in `append`: RETAINED (or an empty range), unique through `&mut self`,
        // inside the slot.
        unsafe { self.pool.bytes_mut(self.slot, self.end, self.end + room) }
    }

    /// Adds `n` bytes written through [`spare_mut`](Self::spare_mut) to the payload. Errors if
    /// `n` exceeds the tailroom.
    pub fn commit(&mut self, n: usize) -> Result<(), FrameError> {
        self.append(n).map(|_| ())
    }

    /// Drops the first `n` payload bytes (acknowledged); at most [`len`](Self::len).
    pub fn advance(&mut self, n: usize) {
        self.start += n.min(self.len()) as u32;
    }

    /// Lends the slot to the device (RETAINED → SENT) as a retained [`TxFrame`] whose data is
    /// the payload, with the headroom in front for headers; or, while the device still has it
    /// from the previous send, registers `cx`'s waker like [`poll_idle`](Self::poll_idle).
    #[inline(always)]
    pub fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        loop {
            if self.pool.try_resend(self.slot) {
                return Poll::Ready(TxFrame {
                    pool: self.pool,
                    slot: self.slot,
                    start: self.start,
                    end: self.end,
                    retained: true,
                    marks: TxMarks::default(),
                });
            }
            if self.poll_idle(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl Drop for RetainedFrame {
    fn drop(&mut self) {
        self.pool.socket_done(self.slot);
    }
}

impl fmt::Debug for RetainedFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetainedFrame")
            .field("slot", &self.slot)
            .field("len", &(self.end - self.start))
            .field("idle", &self.is_idle())
            .finish()
    }
}
