//! Frame chains: one packet spread over several pool slots.
//!
//! A [`FrameChain`] is a bounded, inline list of frame leases whose bytes, read in order, are
//! one packet: a received super-segment (virtio-net merged receive buffers, a TAP read of a GSO
//! packet, software GRO joining the segments of one connection), or a TCP super-segment to
//! transmit (a head [`TxFrame`] whose headroom takes the headers, then tail frames of payload).
//! [`RxChain`] and [`TxChain`] name the two kinds.
//!
//! * **Ownership stays per slot.** Each frame in a chain is still the one lease of its slot,
//!   in its own state (STACK or LENT, TX, DEVICE, SENT). Dropping a chain drops its frames, each
//!   returning its own slot to the pool, on any thread; [`advance`](FrameChain::advance) and
//!   [`truncate`](FrameChain::truncate) return the slots they empty at once. Memory stays
//!   proportional to the bytes held: a chain holds only the slots its bytes are in.
//! * **Bounded, no allocation.** At most [`MAX_CHAIN_SEGMENTS`] frames, stored inline (about
//!   1.2 KiB of leases for a received chain, 1.5 KiB for one to send). A full chain hands a
//!   pushed frame back in the `Err`, never panics.
//! * **Views.** [`iter`](FrameChain::iter) yields the payload slices in order (a driver's
//!   scatter-gather list: TAP `writev`, virtio descriptors), [`cursor`](FrameChain::cursor)
//!   reads across slot boundaries, [`read_with`](FrameChain::read_with) lends the first bytes in
//!   place, and [`TxChain::write_with`] the free room at the end.
//! * **Copies are counted.** [`copy_to`](FrameChain::copy_to),
//!   [`copy_from`](FrameChain::copy_from), [`ChainReader::read`] and
//!   [`TxChain::append_from`] record one copy at the [`CopySite`] the caller names; a
//!   [`split_off`](FrameChain::split_off) inside a slot copies the bytes past the split into a
//!   fresh slot and records it at [`CopySite::ChainSplit`].
//!
//! ```
//! use zcnet_buffer::{CopySite, FramePool, PoolConfig, RxChain};
//!
//! let pool = FramePool::leak(PoolConfig::new(4)).unwrap();
//! let mut chain = RxChain::new();
//! for part in [&b"hello "[..], b"chained ", b"world"] {
//!     let mut posted = pool.try_alloc_rx().unwrap();
//!     posted.buffer_mut()[..part.len()].copy_from_slice(part);
//!     chain.push(posted.complete(part.len()).unwrap()).unwrap();
//! }
//! assert_eq!(chain.len(), 19);
//! assert_eq!(chain.iter().count(), 3); // three slices for scatter-gather
//!
//! chain.advance(6).unwrap(); // "hello " consumed: its slot is free again
//! assert_eq!(pool.occupancy().stack, 2);
//!
//! let mut out = [0u8; 13];
//! assert_eq!(chain.copy_to(&mut out, CopySite::SocketToApp), 13);
//! assert_eq!(&out, b"chained world");
//!
//! drop(chain); // every slot goes back, each once
//! assert_eq!(pool.audit().unwrap().free, 4);
//! ```

use core::fmt;
use core::ops::Deref;

use crate::error::{ChainError, FrameError};
use crate::ledger::{self, CopySite};
use crate::pool::FramePool;
use crate::rx::RxFrame;
use crate::tx::{InFlight, TxFrame};
use sealed::Seal;

/// The one [`Seal`]: only this module can name its field.
const SEAL: Seal = Seal(());

/// The most frames one chain holds: 48.
///
/// A 64 KiB super-segment (65,535 bytes of IP packet) plus its headers needs 33 receive slots of
/// the default 2 KiB (a 12-byte virtio-net header leaves 2,036 bytes each), or 35 transmit
/// frames when every frame keeps the default 128 bytes of headroom (1,920 payload bytes each),
/// plus one at each end when the super-segment starts and ends part-way through frames of a
/// send queue, plus a separate header frame: 38. 48 also covers the same over 1,536-byte slots
/// (47 frames of 1,408 payload bytes, plus the header frame).
pub const MAX_CHAIN_SEGMENTS: usize = 48;

mod sealed {
    use core::fmt;
    use core::ops::Deref;

    use crate::pool::FramePool;

    /// Passed to the methods that only the chain may call: code outside this module cannot
    /// make one, so a generic `F: ChainFrame` elsewhere cannot reach them either.
    #[derive(Clone, Copy, Debug)]
    pub struct Seal(pub(super) ());

    /// What a chain needs of a frame lease. Sealed: implemented for [`RxFrame`](crate::RxFrame)
    /// and [`TxFrame`](crate::TxFrame) only.
    pub trait Frame: Deref<Target = [u8]> + fmt::Debug + Sized {
        /// The visible bytes, writable.
        fn data_mut(&mut self) -> &mut [u8];
        /// Hides the first `n` bytes; callers keep `n <= len`.
        fn trim_front(&mut self, n: usize, seal: Seal);
        /// Keeps the first `len` bytes; callers keep `len <= self.len()`.
        fn trim_back(&mut self, len: usize);
        /// The pool the slot belongs to.
        fn pool(&self) -> &'static FramePool;
        /// A fresh frame of the same pool and kind holding a copy of `bytes` (the caller records
        /// the copy), or `None` when the pool has no free slot.
        fn spare_with(&self, bytes: &[u8], seal: Seal) -> Option<Self>;
    }
}

/// A frame lease a [`FrameChain`] can hold: [`RxFrame`] or [`TxFrame`]. Sealed: the chain
/// relies on how these two move their bytes.
pub trait ChainFrame: sealed::Frame {}

impl ChainFrame for RxFrame {}
impl ChainFrame for TxFrame {}

impl sealed::Frame for RxFrame {
    fn data_mut(&mut self) -> &mut [u8] {
        self.bytes_mut()
    }

    fn trim_front(&mut self, n: usize, _: Seal) {
        let done = self.advance(n);
        debug_assert!(done.is_ok(), "trim_front past the frame's end");
    }

    fn trim_back(&mut self, len: usize) {
        let done = self.truncate(len);
        debug_assert!(done.is_ok(), "trim_back past the frame's end");
    }

    fn pool(&self) -> &'static FramePool {
        RxFrame::pool(self)
    }

    fn spare_with(&self, bytes: &[u8], _: Seal) -> Option<Self> {
        let mut spare = RxFrame::pool(self).try_alloc_rx()?.complete(0).ok()?;
        spare.append_from(bytes).ok()?;
        if self.is_lent() {
            spare.lend_to_app();
        }
        Some(spare)
    }
}

impl sealed::Frame for TxFrame {
    fn data_mut(&mut self) -> &mut [u8] {
        self
    }

    fn trim_front(&mut self, n: usize, _: Seal) {
        self.advance(n);
    }

    fn trim_back(&mut self, len: usize) {
        let done = self.set_len(len);
        debug_assert!(done.is_ok(), "trim_back past the slot's end");
    }

    fn pool(&self) -> &'static FramePool {
        TxFrame::pool(self)
    }

    fn spare_with(&self, bytes: &[u8], _: Seal) -> Option<Self> {
        let pool = TxFrame::pool(self);
        let mut spare = pool.try_alloc_tx()?;
        // The pool's headroom, or less when the bytes would not fit after it.
        let headroom = pool
            .headroom()
            .min(pool.slot_size().saturating_sub(bytes.len()));
        spare.set_headroom(headroom).ok()?;
        spare.append(bytes.len()).ok()?.copy_from_slice(bytes);
        Some(spare)
    }
}

/// Inline storage for up to [`MAX_CHAIN_SEGMENTS`] items. Invariant: `items[..len]` are all
/// `Some`, `items[len..]` all `None`.
struct Segments<T> {
    items: [Option<T>; MAX_CHAIN_SEGMENTS],
    len: usize,
}

impl<T> Segments<T> {
    const fn new() -> Self {
        Self {
            items: [const { None }; MAX_CHAIN_SEGMENTS],
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_full(&self) -> bool {
        self.len == MAX_CHAIN_SEGMENTS
    }

    fn push_back(&mut self, item: T) -> Result<(), T> {
        if self.is_full() {
            return Err(item);
        }
        self.items[self.len] = Some(item);
        self.len += 1;
        Ok(())
    }

    fn push_front(&mut self, item: T) -> Result<(), T> {
        if self.is_full() {
            return Err(item);
        }
        self.items[..=self.len].rotate_right(1);
        self.items[0] = Some(item);
        self.len += 1;
        Ok(())
    }

    fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let item = self.items[0].take();
        self.items[..self.len].rotate_left(1);
        self.len -= 1;
        item
    }

    fn pop_back(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        self.items[self.len].take()
    }

    fn first(&self) -> Option<&T> {
        self.items[..self.len].first()?.as_ref()
    }

    fn first_mut(&mut self) -> Option<&mut T> {
        self.items[..self.len].first_mut()?.as_mut()
    }

    fn last(&self) -> Option<&T> {
        self.items[..self.len].last()?.as_ref()
    }

    fn last_mut(&mut self) -> Option<&mut T> {
        self.items[..self.len].last_mut()?.as_mut()
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.items[..self.len].get_mut(i)?.as_mut()
    }

    fn iter(&self) -> core::iter::Flatten<core::slice::Iter<'_, Option<T>>> {
        self.items[..self.len].iter().flatten()
    }

    fn iter_mut(&mut self) -> core::iter::Flatten<core::slice::IterMut<'_, Option<T>>> {
        self.items[..self.len].iter_mut().flatten()
    }

    /// Drops the items from index `keep` on.
    fn truncate(&mut self, keep: usize) {
        while self.len > keep {
            self.pop_back();
        }
    }

    /// Moves the items from index `at` on (`at <= len`) into a new list, after `head` if given.
    /// The new list never overflows: with a head, callers keep `at >= 1`.
    fn split_off(&mut self, at: usize, head: Option<T>) -> Self {
        let mut back = Self::new();
        if let Some(head) = head {
            back.items[0] = Some(head);
            back.len = 1;
        }
        for i in at..self.len {
            back.items[back.len] = self.items[i].take();
            back.len += 1;
        }
        self.len = self.len.min(at);
        back
    }

    /// Moves every item of `other` after these, or gives `other` back when they do not fit.
    fn append(&mut self, mut other: Self) -> Result<(), Self> {
        if self.len + other.len > MAX_CHAIN_SEGMENTS {
            return Err(other);
        }
        for i in 0..other.len {
            self.items[self.len] = other.items[i].take();
            self.len += 1;
        }
        other.len = 0;
        Ok(())
    }

    fn map<U>(self, f: impl FnMut(T) -> U) -> Segments<U> {
        let mut f = f;
        Segments {
            items: self.items.map(|item| item.map(&mut f)),
            len: self.len,
        }
    }
}

impl<T: Deref<Target = [u8]>> Segments<T> {
    /// Bytes in all items.
    fn byte_len(&self) -> usize {
        self.iter().map(|f| f.len()).sum()
    }

    /// Whether no item holds a byte.
    fn holds_no_byte(&self) -> bool {
        self.iter().all(|f| f.is_empty())
    }

    /// The non-empty items' bytes, in order.
    fn slices(&self) -> Slices<'_, T> {
        Slices {
            inner: self.items[..self.len].iter(),
        }
    }

    /// A reader over all items' bytes from the first.
    fn reader(&self) -> ChainReader<'_, T> {
        ChainReader {
            slices: self.slices(),
            current: &[],
            position: 0,
            remaining: self.byte_len(),
        }
    }
}

/// One packet over several pool slots: a bounded list of frame leases ([`RxChain`]: received
/// [`RxFrame`]s; [`TxChain`]: [`TxFrame`]s, the head's headroom taking the headers) whose bytes,
/// in order, are the packet. See [the module docs](self) for the rules.
///
/// Dropping the chain drops each frame, returning each slot to its pool (on any thread; `Send`
/// and `Sync` like the frames). Frames may be empty (a TX head that holds only headroom, no header yet);
/// [`iter`](Self::iter) skips empty ones.
pub struct FrameChain<F: ChainFrame> {
    segs: Segments<F>,
}

/// A received packet over several RX slots (merged receive buffers, a large receive, software
/// GRO): a [`FrameChain`] of [`RxFrame`]s.
pub type RxChain = FrameChain<RxFrame>;

/// A packet to transmit over several TX slots (a TCP super-segment): a [`FrameChain`] of
/// [`TxFrame`]s, the head's headroom taking the headers ([`push_header`](FrameChain::push_header)).
pub type TxChain = FrameChain<TxFrame>;

impl<F: ChainFrame> FrameChain<F> {
    /// An empty chain.
    pub const fn new() -> Self {
        Self {
            segs: Segments::new(),
        }
    }

    /// A chain of one frame: `frame` is its head.
    pub fn from_frame(frame: F) -> Self {
        let mut chain = Self::new();
        let _fits = chain.segs.push_back(frame);
        debug_assert!(_fits.is_ok(), "an empty chain takes a frame");
        chain
    }

    /// Appends `frame` after the last one; a full chain hands it back in the `Err`.
    pub fn push(&mut self, frame: F) -> Result<(), F> {
        self.segs.push_back(frame)
    }

    /// Puts `frame` in front of the first one (a header frame in front of payload frames); a
    /// full chain hands it back in the `Err`.
    pub fn push_front(&mut self, frame: F) -> Result<(), F> {
        self.segs.push_front(frame)
    }

    /// Takes the first frame out of the chain (what `recv_segment` hands to the application).
    pub fn pop_front(&mut self) -> Option<F> {
        self.segs.pop_front()
    }

    /// Takes the last frame out of the chain.
    pub fn pop_back(&mut self) -> Option<F> {
        self.segs.pop_back()
    }

    /// Takes every frame out of the chain, in order, and leaves it empty for reuse: a chain
    /// kept in place (a stack's super-segment chain) is emptied without being moved, and
    /// without the shifting of a [`pop_front`](Self::pop_front) per frame. Frames the
    /// iterator has not handed out when it is dropped are dropped with it (back to their
    /// pool).
    pub fn drain(&mut self) -> Drain<'_, F> {
        let len = core::mem::take(&mut self.segs.len);
        Drain {
            items: self.segs.items[..len].iter_mut(),
        }
    }

    /// Moves all of `other`'s frames after this chain's (software GRO joining two runs of
    /// segments). When they do not all fit, changes nothing and hands `other` back.
    pub fn append(&mut self, other: Self) -> Result<(), Self> {
        self.segs.append(other.segs).map_err(|segs| Self { segs })
    }

    /// Bytes in the chain: the sum of its frames' lengths. O(frames).
    pub fn len(&self) -> usize {
        self.segs.byte_len()
    }

    /// Whether the chain holds no byte (it may still hold empty frames).
    pub fn is_empty(&self) -> bool {
        self.segs.holds_no_byte()
    }

    /// Frames in the chain, empty ones included.
    pub fn frame_count(&self) -> usize {
        self.segs.len()
    }

    /// Whether the chain holds [`MAX_CHAIN_SEGMENTS`] frames: [`push`](Self::push) would refuse.
    pub fn is_full(&self) -> bool {
        self.segs.is_full()
    }

    /// The first frame.
    pub fn head(&self) -> Option<&F> {
        self.segs.first()
    }

    /// The first frame, to change (a TX head: headers pushed in front).
    pub fn head_mut(&mut self) -> Option<&mut F> {
        self.segs.first_mut()
    }

    /// The last frame.
    pub fn last(&self) -> Option<&F> {
        self.segs.last()
    }

    /// The last frame, to change.
    pub fn last_mut(&mut self) -> Option<&mut F> {
        self.segs.last_mut()
    }

    /// The frames in order, empty ones included.
    pub fn frames(&self) -> impl DoubleEndedIterator<Item = &F> + '_ {
        self.segs.iter()
    }

    /// The frames in order, to change one by one.
    pub fn frames_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut F> + '_ {
        self.segs.iter_mut()
    }

    /// The chain's bytes as one slice per non-empty frame, in order: what a driver hands the
    /// device as a scatter-gather list (TAP `writev`, virtio descriptors). No copy.
    pub fn iter(&self) -> Slices<'_, F> {
        self.segs.slices()
    }

    /// A reader over the chain's bytes from the first, across slot boundaries.
    pub fn cursor(&self) -> ChainReader<'_, F> {
        self.segs.reader()
    }

    /// Copies the chain's first `min(dst.len(), self.len())` bytes into `dst` and records one
    /// copy of that many bytes at `site` in the [copy ledger](crate::ledger). Returns the count.
    pub fn copy_to(&self, dst: &mut [u8], site: CopySite) -> usize {
        self.cursor().read(dst, site)
    }

    /// Overwrites the chain's first `min(src.len(), self.len())` bytes with `src` (a payload
    /// written into frames already sized with `set_len`) and records one copy of that many bytes
    /// at `site`. Returns the count. Not for a chain of retained TX frames: their bytes are
    /// their socket's payload. The chain's length does not change; to grow a TX chain use
    /// [`append_from`](FrameChain::append_from).
    pub fn copy_from(&mut self, src: &[u8], site: CopySite) -> usize {
        let mut done = 0;
        for frame in self.segs.iter_mut() {
            if done == src.len() {
                break;
            }
            let dst = frame.data_mut();
            let n = dst.len().min(src.len() - done);
            dst[..n].copy_from_slice(&src[done..done + n]);
            done += n;
        }
        ledger::record(site, done);
        done
    }

    /// Gives `f` the first non-empty frame's bytes in place, writable (never empty); `f` returns
    /// how many it consumed (at most the slice's length; more counts as all) and a result. The
    /// consumed bytes leave the chain as with [`advance`](Self::advance): a frame consumed to its
    /// end returns its slot to the pool at once. `None`, without calling `f`, when the chain
    /// holds no byte. No copy.
    pub fn read_with<R>(&mut self, f: impl FnOnce(&mut [u8]) -> (usize, R)) -> Option<R> {
        self.drop_empty_front();
        let head = self.segs.first_mut()?;
        let bytes = head.data_mut();
        let len = bytes.len();
        let (consumed, result) = f(bytes);
        head.trim_front(consumed.min(len), SEAL);
        self.drop_empty_front();
        Some(result)
    }

    /// Drops the first `n` bytes (consumed, or acknowledged). Each frame emptied on the way
    /// leaves the chain and returns its slot to the pool at once; a frame consumed in part keeps
    /// the rest. Errors, changing nothing, when the chain is shorter than `n`.
    pub fn advance(&mut self, n: usize) -> Result<(), FrameError> {
        let available = self.len();
        if n > available {
            return Err(FrameError::Length {
                requested: n,
                available,
            });
        }
        let mut left = n;
        while left > 0 {
            let Some(head) = self.segs.first_mut() else {
                break;
            };
            let len = head.len();
            if len <= left {
                self.segs.pop_front();
                left -= len;
            } else {
                head.trim_front(left, SEAL);
                left = 0;
            }
        }
        if n > 0 {
            self.drop_empty_front();
        }
        Ok(())
    }

    /// Keeps only the first `len` bytes. The frames past them leave the chain and return their
    /// slots to the pool (a retained TX frame's goes back to its socket); `truncate(0)` empties
    /// the chain. Errors, changing nothing, when the chain is shorter than `len`.
    pub fn truncate(&mut self, len: usize) -> Result<(), FrameError> {
        let available = self.len();
        if len > available {
            return Err(FrameError::Length {
                requested: len,
                available,
            });
        }
        let mut keep = len;
        let mut kept_frames = 0;
        for frame in self.segs.iter_mut() {
            if keep == 0 {
                break;
            }
            kept_frames += 1;
            let frame_len = frame.len();
            if frame_len >= keep {
                frame.trim_back(keep);
                keep = 0;
            } else {
                keep -= frame_len;
            }
        }
        self.segs.truncate(kept_frames);
        Ok(())
    }

    /// Splits the chain at byte `at`: this chain keeps bytes `..at`, the returned one holds
    /// bytes `at..`.
    ///
    /// At a frame boundary no byte moves. Inside a frame, the frame's slot cannot have two
    /// owners: its bytes past `at` are copied into a fresh slot of the same pool, which becomes
    /// the returned chain's head, and the copy is recorded at [`CopySite::ChainSplit`] (at most
    /// one slot's bytes). A fresh TX head keeps the pool's headroom when the bytes leave room
    /// for it; after a split at a boundary the returned head is whatever frame was there, so
    /// check [`headroom`](FrameChain::headroom) before pushing headers (or push a header frame
    /// in front).
    ///
    /// Errors, changing nothing: [`ChainError::Length`] when `at` is past the end,
    /// [`ChainError::Exhausted`] when a split inside a frame finds the pool empty.
    pub fn split_off(&mut self, at: usize) -> Result<Self, ChainError> {
        let available = self.len();
        if at > available {
            return Err(ChainError::Length {
                requested: at,
                available,
            });
        }
        // The frame holding byte `at`, and `at`'s offset inside it.
        let mut before = 0;
        let mut inside = None;
        for (i, frame) in self.segs.iter().enumerate() {
            if at < before + frame.len() {
                inside = Some((i, at - before));
                break;
            }
            before += frame.len();
        }
        let segs = match inside {
            None => Segments::new(),
            Some((i, 0)) => self.segs.split_off(i, None),
            Some((i, offset)) => {
                let Some(frame) = self.segs.get_mut(i) else {
                    return Err(ChainError::Exhausted);
                };
                let moved = frame.len() - offset;
                let spare = frame
                    .spare_with(&frame[offset..], SEAL)
                    .ok_or(ChainError::Exhausted)?;
                ledger::record(CopySite::ChainSplit, moved);
                frame.trim_back(offset);
                self.segs.split_off(i + 1, Some(spare))
            }
        };
        Ok(Self { segs })
    }

    /// Takes the first `n` bytes as a chain of their own; this chain keeps the rest (a send
    /// queue handing its first `n` bytes to a transmission). As [`split_off`](Self::split_off),
    /// with the halves swapped: the returned chain keeps this one's head.
    pub fn split_to(&mut self, n: usize) -> Result<Self, ChainError> {
        let back = self.split_off(n)?;
        Ok(core::mem::replace(self, back))
    }

    /// Completes a partial checksum in software, as a device would (see the
    /// [checksum contract](crate::offload)): sums the chain's bytes from byte `start` to the
    /// end (the checksum field holds the pseudo-header sum) and stores the complement in the
    /// 16-bit field at `start + offset`. For a driver whose device left a received packet's
    /// checksum partial, when its stack verifies checksums itself. Returns `false`, changing
    /// nothing, when the field is not inside the chain. Not for retained TX frames' payload
    /// (the field is in the headers, which is fine).
    pub fn complete_checksum(&mut self, start: usize, offset: usize) -> bool {
        let field = start.saturating_add(offset);
        if field.saturating_add(2) > self.len() {
            return false;
        }
        let mut skip = start;
        let parts = self.segs.iter().filter_map(|f| {
            let bytes: &[u8] = f;
            if skip >= bytes.len() {
                skip -= bytes.len();
                None
            } else {
                let part = &bytes[skip..];
                skip = 0;
                Some(part)
            }
        });
        let sum = crate::offload::ones_complement_sum(0, parts);
        let mut c = !sum;
        if c == 0 && offset == 6 {
            c = 0xffff; // UDP sends a computed 0 as all ones (0 means "no checksum")
        }
        // The field's two bytes, wherever they fall (a field split across frames included).
        let mut at = 0;
        let mut value = c.to_be_bytes().into_iter().enumerate();
        let mut next = value.next();
        for frame in self.segs.iter_mut() {
            let bytes = frame.data_mut();
            while let Some((i, b)) = next {
                let pos = field + i;
                if pos >= at + bytes.len() {
                    break;
                }
                bytes[pos - at] = b;
                next = value.next();
            }
            at += bytes.len();
            if next.is_none() {
                break;
            }
        }
        true
    }

    /// Drops empty frames at the front.
    fn drop_empty_front(&mut self) {
        while self.segs.first().is_some_and(|f| f.is_empty()) {
            self.segs.pop_front();
        }
    }
}

impl RxChain {
    /// Marks every frame as owned by the application (STACK → LENT; see
    /// [`RxFrame::lend_to_app`]). Frames pushed later are lent by their own call.
    pub fn lend_to_app(&mut self) {
        for frame in self.segs.iter_mut() {
            frame.lend_to_app();
        }
    }

    /// Whether every frame was lent to the application (true for a chain with no frame).
    pub fn is_lent(&self) -> bool {
        self.segs.iter().all(RxFrame::is_lent)
    }
}

impl TxChain {
    /// The head's headroom: bytes [`push_header`](Self::push_header) can still put in front.
    /// 0 for a chain with no frame.
    pub fn headroom(&self) -> usize {
        self.segs.first().map_or(0, TxFrame::headroom)
    }

    /// Grows the head by `n` bytes at the front and returns them, for a header (see
    /// [`TxFrame::push_header`]). Errors if the head's headroom is smaller, or the chain has no
    /// frame.
    pub fn push_header(&mut self, n: usize) -> Result<&mut [u8], FrameError> {
        match self.segs.first_mut() {
            Some(head) => head.push_header(n),
            None => Err(FrameError::Headroom {
                requested: n,
                available: 0,
            }),
        }
    }

    /// Gives `f` the free room after the last frame's data to write into in place (never
    /// empty); `f` returns how many bytes it wrote (at most the slice's length; more counts as
    /// all) and a result, and those bytes join the chain. No copy.
    ///
    /// When the last frame is full (or retained: its slot past the payload is its socket's), a
    /// new frame with no headroom is taken from that frame's pool and appended first. Errors,
    /// without calling `f`: [`ChainError::Empty`] (no frame, so no pool), [`ChainError::Full`],
    /// [`ChainError::Exhausted`].
    pub fn write_with<R>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, ChainError> {
        let tail = self.tail_with_room()?;
        let len = tail.len();
        let room = &mut tail.buffer_mut()[len..];
        let room_len = room.len();
        let (written, result) = f(room);
        let grown = tail.set_len(len + written.min(room_len));
        debug_assert!(grown.is_ok(), "the room was inside the slot");
        Ok(result)
    }

    /// Copies as much of `src` as fits after the chain's data, taking new frames (no headroom)
    /// from the last frame's pool as each fills, and records one copy of the bytes taken at
    /// `site` ([`CopySite::AppToSocket`] for a `write`). Returns the count: less than
    /// `src.len()` when the chain is full, the pool runs out, or the chain has no frame to take
    /// a pool from.
    pub fn append_from(&mut self, src: &[u8], site: CopySite) -> usize {
        let mut done = 0;
        while done < src.len() {
            let Ok(tail) = self.tail_with_room() else {
                break;
            };
            let n = tail.tailroom().min(src.len() - done);
            match tail.append(n) {
                Ok(room) => room.copy_from_slice(&src[done..done + n]),
                Err(_) => break,
            }
            done += n;
        }
        ledger::record(site, done);
        done
    }

    /// Hands every frame to the device (each TX → DEVICE, a retained one stays SENT): the driver
    /// keeps the returned chain until the device completes the whole packet, then drops it.
    pub fn into_device(self) -> InFlightChain {
        InFlightChain {
            segs: self.segs.map(TxFrame::into_device),
        }
    }

    /// The last frame, with free room after its data: a new frame from the last one's pool when
    /// it has none (or is retained).
    fn tail_with_room(&mut self) -> Result<&mut TxFrame, ChainError> {
        let (room, pool) = match self.segs.last() {
            None => return Err(ChainError::Empty),
            Some(t) if t.is_retained() => (0, t.pool()),
            Some(t) => (t.tailroom(), t.pool()),
        };
        if room == 0 {
            if self.segs.is_full() {
                return Err(ChainError::Full);
            }
            let mut frame = pool.try_alloc_tx().ok_or(ChainError::Exhausted)?;
            let _empty = frame.set_headroom(0);
            debug_assert!(_empty.is_ok(), "a fresh frame is empty");
            if self.segs.push_back(frame).is_err() {
                return Err(ChainError::Full);
            }
        }
        self.segs.last_mut().ok_or(ChainError::Empty)
    }
}

/// The frames of a chain being emptied in place ([`FrameChain::drain`]).
pub struct Drain<'a, F> {
    items: core::slice::IterMut<'a, Option<F>>,
}

impl<F> Iterator for Drain<'_, F> {
    type Item = F;

    fn next(&mut self) -> Option<F> {
        // The chain's places below its length are all filled.
        self.items.next().and_then(Option::take)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.items.size_hint()
    }
}

impl<F> fmt::Debug for Drain<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drain")
            .field("left", &self.items.len())
            .finish()
    }
}

impl<F> Drop for Drain<'_, F> {
    fn drop(&mut self) {
        for item in self.items.by_ref() {
            drop(item.take());
        }
    }
}

impl<F: ChainFrame> Default for FrameChain<F> {
    fn default() -> Self {
        Self::new()
    }
}

impl<F: ChainFrame> From<F> for FrameChain<F> {
    fn from(frame: F) -> Self {
        Self::from_frame(frame)
    }
}

impl<F: ChainFrame> IntoIterator for FrameChain<F> {
    type Item = F;
    type IntoIter = IntoFrames<F>;

    /// The frames in order, each still the lease of its slot (a driver transmitting frame by
    /// frame).
    fn into_iter(self) -> IntoFrames<F> {
        IntoFrames {
            inner: self.segs.items.into_iter().flatten(),
        }
    }
}

impl<F: ChainFrame> fmt::Debug for FrameChain<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.segs.iter()).finish()
    }
}

/// The frames of a [`FrameChain`], taken out of it in order (its `into_iter`). Frames not taken
/// return their slots when this is dropped.
pub struct IntoFrames<F> {
    inner: core::iter::Flatten<core::array::IntoIter<Option<F>, MAX_CHAIN_SEGMENTS>>,
}

impl<F> Iterator for IntoFrames<F> {
    type Item = F;

    fn next(&mut self) -> Option<F> {
        self.inner.next()
    }
}

impl<F> DoubleEndedIterator for IntoFrames<F> {
    fn next_back(&mut self) -> Option<F> {
        self.inner.next_back()
    }
}

impl<F: fmt::Debug> fmt::Debug for IntoFrames<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntoFrames").finish_non_exhaustive()
    }
}

/// The bytes of a chain's non-empty frames, one slice per frame, in order: from
/// [`FrameChain::iter`] and [`InFlightChain::iter`].
pub struct Slices<'a, F> {
    inner: core::slice::Iter<'a, Option<F>>,
}

impl<'a, F: Deref<Target = [u8]>> Iterator for Slices<'a, F> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        self.inner
            .by_ref()
            .flatten()
            .map(|f| &**f)
            .find(|bytes| !bytes.is_empty())
    }
}

impl<'a, F: Deref<Target = [u8]>> DoubleEndedIterator for Slices<'a, F> {
    fn next_back(&mut self) -> Option<&'a [u8]> {
        self.inner
            .by_ref()
            .rev()
            .flatten()
            .map(|f| &**f)
            .find(|bytes| !bytes.is_empty())
    }
}

impl<F> Clone for Slices<'_, F> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<F> fmt::Debug for Slices<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slices")
            .field("frames_left", &self.inner.len())
            .finish()
    }
}

/// Reads a chain's bytes in order across slot boundaries: from [`FrameChain::cursor`] and
/// [`InFlightChain::cursor`]. It borrows the chain; the chain does not change.
pub struct ChainReader<'a, F> {
    slices: Slices<'a, F>,
    /// The rest of the current frame's bytes.
    current: &'a [u8],
    position: usize,
    remaining: usize,
}

impl<'a, F: Deref<Target = [u8]>> ChainReader<'a, F> {
    /// Bytes read or skipped so far.
    pub fn position(&self) -> usize {
        self.position
    }

    /// Bytes left to read.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// The next bytes in place, at most `max` and never past the current frame's end; `None`
    /// at the end of the chain (or when `max` is 0). No copy: a header parser takes the slice
    /// and, if it is shorter than the header, reads the rest with [`read`](Self::read).
    pub fn next_slice(&mut self, max: usize) -> Option<&'a [u8]> {
        if max == 0 {
            return None;
        }
        if self.current.is_empty() {
            self.current = self.slices.next()?;
        }
        let n = max.min(self.current.len());
        let (taken, rest) = self.current.split_at(n);
        self.current = rest;
        self.position += n;
        self.remaining -= n;
        Some(taken)
    }

    /// Moves past the next `n` bytes. Errors, moving nothing, when fewer remain.
    pub fn skip(&mut self, n: usize) -> Result<(), FrameError> {
        if n > self.remaining {
            return Err(FrameError::Length {
                requested: n,
                available: self.remaining,
            });
        }
        let mut left = n;
        while left > 0 {
            let Some(taken) = self.next_slice(left) else {
                break;
            };
            left -= taken.len();
        }
        Ok(())
    }

    /// Copies the next `min(dst.len(), remaining)` bytes into `dst`, across frames, and records
    /// one copy of that many bytes at `site` in the [copy ledger](crate::ledger). Returns the
    /// count.
    pub fn read(&mut self, dst: &mut [u8], site: CopySite) -> usize {
        let mut done = 0;
        while let Some(taken) = self.next_slice(dst.len() - done) {
            dst[done..done + taken.len()].copy_from_slice(taken);
            done += taken.len();
        }
        ledger::record(site, done);
        done
    }
}

impl<F> fmt::Debug for ChainReader<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChainReader")
            .field("position", &self.position)
            .field("remaining", &self.remaining)
            .finish()
    }
}

/// A [`TxChain`] the device is transmitting: each frame an [`InFlight`] (DEVICE, or SENT for a
/// retained one). The driver keeps it until the device completes the packet, then drops it,
/// which returns every slot (a retained one's to its socket).
pub struct InFlightChain {
    segs: Segments<InFlight>,
}

impl InFlightChain {
    /// Bytes in the packet.
    pub fn len(&self) -> usize {
        self.segs.byte_len()
    }

    /// Whether the packet has no byte.
    pub fn is_empty(&self) -> bool {
        self.segs.holds_no_byte()
    }

    /// Frames in the chain, empty ones included.
    pub fn frame_count(&self) -> usize {
        self.segs.len()
    }

    /// The frames in order, empty ones included.
    pub fn frames(&self) -> impl DoubleEndedIterator<Item = &InFlight> + '_ {
        self.segs.iter()
    }

    /// The packet's bytes, one slice per non-empty frame: the scatter-gather list for a driver
    /// that hands the device CPU slices (TAP `writev`, virtio-drivers' `VirtQueue::add`).
    pub fn iter(&self) -> Slices<'_, InFlight> {
        self.segs.slices()
    }

    /// `(device address, length)` of each non-empty frame, in order: the scatter-gather list
    /// for a driver that writes descriptors itself.
    pub fn device_segments(&self) -> impl DoubleEndedIterator<Item = (u64, usize)> + '_ {
        self.segs
            .iter()
            .filter(|f| !f.is_empty())
            .map(|f| (f.device_addr(), f.len()))
    }

    /// A reader over the packet's bytes across slot boundaries (a software checksum, a
    /// loopback device's copy).
    pub fn cursor(&self) -> ChainReader<'_, InFlight> {
        self.segs.reader()
    }

    /// For a loopback device: the transmitted chain becomes a received [`RxChain`] over the very
    /// slots (each DEVICE → STACK, see [`InFlight::loop_back`]). A chain holding a retained
    /// frame cannot be lent and comes back unchanged as the error.
    // The chain comes back by value: no allocator to box it in, and the caller must get its
    // slots back (the same as `FrameChain::append`, which clippy does not flag being generic).
    #[allow(clippy::result_large_err)]
    pub fn loop_back(self) -> Result<RxChain, InFlightChain> {
        if self.segs.iter().any(InFlight::is_retained) {
            return Err(self);
        }
        // No frame is retained, so every `loop_back` succeeds and `items[..len]` stay `Some`.
        Ok(RxChain {
            segs: Segments {
                items: self
                    .segs
                    .items
                    .map(|item| item.and_then(|f| f.loop_back().ok())),
                len: self.segs.len,
            },
        })
    }
}

impl IntoIterator for InFlightChain {
    type Item = InFlight;
    type IntoIter = IntoFrames<InFlight>;

    /// The frames in order (a driver completing them one by one).
    fn into_iter(self) -> IntoFrames<InFlight> {
        IntoFrames {
            inner: self.segs.items.into_iter().flatten(),
        }
    }
}

impl fmt::Debug for InFlightChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.segs.iter()).finish()
    }
}
