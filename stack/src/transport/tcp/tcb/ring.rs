//! [`FrameRing`]: a connection's queue of frames with a fixed number of places, one per frame
//! of the buffer's budget. Both directions keep their frames in one: the receive buffer its
//! received segments, the send buffer the frames queued to send.
//!
//! The places live inside the connection for budgets up to [`INLINE_FRAMES`] (nothing
//! allocated, and the only form without the `alloc` feature), and are allocated once, when
//! the socket opens, for larger budgets (with `alloc`, up to [`MAX_FRAMES`]), so a
//! connection's memory grows with the buffers it asked for. A ring never grows: pushes past
//! its places give the item back.
//!
//! Both forms share every operation: the places are found with one select, then the same code
//! runs on them. An item goes into its place as a `T` (`ptr::write`, field by field from where
//! the compiler keeps them); a queue that stored `MaybeUninit<T>` (as `heapless::Deque` does),
//! or that took a different code path per form, had the compiler copy a pushed frame lease out
//! of a stack copy just written field by field, and the wide loads of that copy wait for the
//! narrow stores (a store-forwarding stall), once per frame queued in either direction.

use core::mem::MaybeUninit;
use core::ptr;

/// Places inside the connection: a budget up to this many frames allocates nothing.
pub(crate) const INLINE_FRAMES: usize = 64;

/// The largest budget: 4,096 frames with the `alloc` feature (4 MiB at one frame per KiB;
/// the places are allocated when the socket opens), [`INLINE_FRAMES`] without.
#[cfg(feature = "alloc")]
pub(crate) const MAX_FRAMES: usize = 4096;
/// The largest budget: [`INLINE_FRAMES`] without the `alloc` feature.
#[cfg(not(feature = "alloc"))]
pub(crate) const MAX_FRAMES: usize = INLINE_FRAMES;

/// Where a ring's places are.
// The inline places are the point: a connection with a small budget allocates nothing.
#[allow(clippy::large_enum_variant)]
enum Places<T> {
    /// In the connection: budgets up to [`INLINE_FRAMES`].
    Inline([MaybeUninit<T>; INLINE_FRAMES]),
    /// Allocated when the socket opened, exactly the ring's `cap` places: larger budgets.
    #[cfg(feature = "alloc")]
    Heap(alloc::boxed::Box<[MaybeUninit<T>]>),
}

/// A ring of `T` with a fixed number of places, oldest first (see the module docs).
pub(crate) struct FrameRing<T> {
    /// The places: `cap` of them.
    places: Places<T>,
    /// The oldest item's place (`< cap`).
    head: usize,
    /// Items held (`<= cap`). Invariant: exactly the `len` places from `head` on, wrapping at
    /// `cap`, hold an initialised item; the others none.
    len: usize,
    /// The number of places: [`INLINE_FRAMES`] inline, the budget when allocated (`>= 1`).
    cap: usize,
}

impl<T> FrameRing<T> {
    /// A ring of `n` places (clamped to `1..=`[`MAX_FRAMES`]): inline up to
    /// [`INLINE_FRAMES`], else allocated now.
    pub(crate) fn new(n: usize) -> Self {
        #[cfg(feature = "alloc")]
        if n > INLINE_FRAMES {
            let cap = n.min(MAX_FRAMES);
            let places: alloc::vec::Vec<MaybeUninit<T>> =
                (0..cap).map(|_| MaybeUninit::uninit()).collect();
            return FrameRing {
                places: Places::Heap(places.into_boxed_slice()),
                head: 0,
                len: 0,
                cap,
            };
        }
        let _ = n;
        FrameRing {
            places: Places::Inline([const { MaybeUninit::uninit() }; INLINE_FRAMES]),
            head: 0,
            len: 0,
            cap: INLINE_FRAMES,
        }
    }

    /// The first place; `cap` places follow it.
    #[inline(always)]
    fn base(&self) -> *const MaybeUninit<T> {
        match &self.places {
            Places::Inline(p) => p.as_ptr(),
            #[cfg(feature = "alloc")]
            Places::Heap(p) => p.as_ptr(),
        }
    }

    /// The first place, for writing; `cap` places follow it.
    #[inline(always)]
    fn base_mut(&mut self) -> *mut MaybeUninit<T> {
        match &mut self.places {
            Places::Inline(p) => p.as_mut_ptr(),
            #[cfg(feature = "alloc")]
            Places::Heap(p) => p.as_mut_ptr(),
        }
    }

    /// The place of the `i`-th item, for any `i <= cap` (`head + i`, wrapped at `cap`).
    #[inline(always)]
    fn place(&self, i: usize) -> usize {
        let p = self.head + i;
        if p >= self.cap {
            p - self.cap
        } else {
            p
        }
    }

    /// The number of places.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Items queued.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether every place holds an item.
    #[inline(always)]
    pub(crate) fn is_full(&self) -> bool {
        self.len >= self.cap
    }

    /// The `i`-th item, oldest first.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        // SAFETY: `i < len`: the place (`< cap`, inside the places) holds an initialised item.
        Some(unsafe { (*self.base().add(self.place(i))).assume_init_ref() })
    }

    /// The `i`-th item, oldest first.
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        let p = self.place(i);
        // SAFETY: as in `get`; `&mut self` makes the borrow unique.
        Some(unsafe { (*self.base_mut().add(p)).assume_init_mut() })
    }

    /// The oldest item.
    #[cfg(test)]
    pub(crate) fn front(&self) -> Option<&T> {
        self.get(0)
    }

    /// The oldest item.
    #[inline(always)]
    pub(crate) fn front_mut(&mut self) -> Option<&mut T> {
        self.get_mut(0)
    }

    /// The newest item.
    #[inline(always)]
    pub(crate) fn back(&self) -> Option<&T> {
        self.get(self.len.wrapping_sub(1))
    }

    /// The newest item.
    #[inline(always)]
    pub(crate) fn back_mut(&mut self) -> Option<&mut T> {
        self.get_mut(self.len.wrapping_sub(1))
    }

    /// The items in order, as the two contiguous runs the ring stores them in.
    #[inline(always)]
    pub(crate) fn as_slices(&self) -> (&[T], &[T]) {
        let first = self.len.min(self.cap - self.head);
        let base = self.base().cast::<T>();
        // SAFETY: the first run is the places `head..head + first`, the second `0..len -
        // first`: together the `len` places from `head` on, wrapped, all inside the `cap`
        // places and holding initialised items; `MaybeUninit<T>` has `T`'s layout.
        unsafe {
            (
                core::slice::from_raw_parts(base.add(self.head), first),
                core::slice::from_raw_parts(base, self.len - first),
            )
        }
    }

    /// Adds `item` as the newest; gives it back when every place is taken.
    #[inline(always)]
    pub(crate) fn push_back(&mut self, item: T) -> Result<(), T> {
        if self.len >= self.cap {
            return Err(item);
        }
        let p = self.place(self.len);
        // SAFETY: `len < cap`, so place `p` (inside the places) holds no item: the write
        // overwrites nothing that needs dropping; `len` then counts it.
        unsafe { self.base_mut().add(p).cast::<T>().write(item) };
        self.len += 1;
        Ok(())
    }

    /// Removes the oldest item.
    #[inline(always)]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let p = self.head;
        self.head = self.place(1);
        self.len -= 1;
        // SAFETY: place `p` held the oldest item; `head` and `len` no longer count it, so it
        // is read out exactly once.
        Some(unsafe { self.base().add(p).cast::<T>().read() })
    }

    /// Removes the newest item.
    #[inline(always)]
    pub(crate) fn pop_back(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        let p = self.place(self.len);
        // SAFETY: place `p` held the newest item; `len` no longer counts it, so it is read out
        // exactly once.
        Some(unsafe { self.base().add(p).cast::<T>().read() })
    }

    /// Swaps the `i`-th and `j`-th items (nothing happens unless both are `< len`).
    pub(crate) fn swap(&mut self, i: usize, j: usize) {
        if i < self.len && j < self.len {
            let (a, b) = (self.place(i), self.place(j));
            let base = self.base_mut();
            // SAFETY: both places are inside the places and hold items; `ptr::swap` allows
            // `a == b`.
            unsafe { ptr::swap(base.add(a), base.add(b)) };
        }
    }

    /// The items, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        let (a, b) = self.as_slices();
        a.iter().chain(b)
    }

    /// Drops every item (the places stay).
    pub(crate) fn clear(&mut self) {
        while self.pop_front().is_some() {}
    }
}

impl<T> Drop for FrameRing<T> {
    fn drop(&mut self) {
        self.clear();
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for FrameRing<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::{FrameRing, INLINE_FRAMES};

    /// Fills a ring of `n` places, checks it refuses one more, and that its items come out
    /// in order across the wrap.
    fn fill_and_wrap(n: usize) {
        let mut r = FrameRing::new(n);
        let places = r.capacity();
        for i in 0..places {
            assert_eq!(r.push_back(i), Ok(()));
        }
        assert!(r.is_full());
        assert_eq!(r.push_back(places), Err(places));
        for i in 0..places / 2 {
            assert_eq!(r.pop_front(), Some(i));
        }
        for i in places..places + places / 2 {
            assert_eq!(r.push_back(i), Ok(()));
        }
        let expect: std::vec::Vec<usize> = (places / 2..places + places / 2).collect();
        assert_eq!(r.iter().copied().collect::<std::vec::Vec<_>>(), expect);
        let (a, b) = r.as_slices();
        assert_eq!(a.len() + b.len(), places);
        assert_eq!(r.front(), Some(&(places / 2)));
        assert_eq!(r.back(), Some(&(places + places / 2 - 1)));
        r.swap(0, 1);
        assert_eq!(r.get(0), Some(&(places / 2 + 1)));
        r.swap(0, places);
        assert_eq!(
            r.get(0),
            Some(&(places / 2 + 1)),
            "out of range: nothing swapped"
        );
        assert_eq!(r.pop_back(), Some(places + places / 2 - 1));
        r.clear();
        assert_eq!(r.len(), 0);
        assert_eq!(r.capacity(), places);
    }

    extern crate std;

    #[test]
    fn small_budgets_stay_inline() {
        for n in [0, 1, 4, INLINE_FRAMES] {
            let r = FrameRing::<u8>::new(n);
            assert!(matches!(r.places, super::Places::Inline(_)));
            assert_eq!(r.capacity(), INLINE_FRAMES);
        }
        fill_and_wrap(4);
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn larger_budgets_get_exactly_their_places() {
        for (n, places) in [(INLINE_FRAMES + 1, INLINE_FRAMES + 1), (256, 256)] {
            assert_eq!(FrameRing::<u8>::new(n).capacity(), places);
            fill_and_wrap(n);
        }
        assert_eq!(
            FrameRing::<u8>::new(super::MAX_FRAMES * 2).capacity(),
            super::MAX_FRAMES
        );
    }
}
