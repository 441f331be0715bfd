//! [`FrameRing`]: a connection's queue of frames with a fixed number of places, one per frame
//! of the buffer's budget. Both directions keep their frames in one: the receive buffer its
//! received segments, the send buffer the frames queued to send.
//!
//! The places live inside the connection for budgets up to [`INLINE_FRAMES`] (`heapless`'
//! ring: nothing allocated, and the only form without the `alloc` feature), and are allocated
//! once, when the socket opens, for larger budgets (with `alloc`, up to [`MAX_FRAMES`]), so a
//! connection's memory grows with the buffers it asked for. A ring never grows: pushes past
//! its places give the item back. Each operation picks its form with one branch.

use heapless::Deque;

/// Places inside the connection: a budget up to this many frames allocates nothing.
pub(crate) const INLINE_FRAMES: usize = 64;

/// The largest budget: 4,096 frames with the `alloc` feature (4 MiB at one frame per KiB;
/// the places are allocated when the socket opens), [`INLINE_FRAMES`] without.
#[cfg(feature = "alloc")]
pub(crate) const MAX_FRAMES: usize = 4096;
/// The largest budget: [`INLINE_FRAMES`] without the `alloc` feature.
#[cfg(not(feature = "alloc"))]
pub(crate) const MAX_FRAMES: usize = INLINE_FRAMES;

/// A ring of `T` with a fixed number of places, oldest first (see the module docs).
// The inline places are the point: a connection with a small budget allocates nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum FrameRing<T> {
    /// In the connection: budgets up to [`INLINE_FRAMES`].
    Inline(Deque<T, INLINE_FRAMES>),
    /// Allocated when the socket opened, `cap` places: larger budgets.
    #[cfg(feature = "alloc")]
    Heap {
        /// The places, allocated once with room for `cap`.
        ring: alloc::collections::VecDeque<T>,
        /// Places: pushes stop here.
        cap: usize,
    },
}

/// `$body` with `$q` bound to the ring's queue, whichever form it has: one branch, then
/// `$body` compiled for each form. A loop over the queue goes inside `$body`, so that it
/// branches on the form once, not once per step.
macro_rules! on_ring {
    ($self:expr, $q:ident => $body:expr) => {
        match $self {
            $crate::transport::tcp::tcb::ring::FrameRing::Inline($q) => $body,
            #[cfg(feature = "alloc")]
            $crate::transport::tcp::tcb::ring::FrameRing::Heap { ring: $q, .. } => $body,
        }
    };
}
pub(crate) use on_ring;

impl<T> FrameRing<T> {
    /// A ring of `n` places (clamped to `1..=`[`MAX_FRAMES`]): inline up to
    /// [`INLINE_FRAMES`], else allocated now.
    pub(crate) fn new(n: usize) -> Self {
        #[cfg(feature = "alloc")]
        if n > INLINE_FRAMES {
            let cap = n.min(MAX_FRAMES);
            return FrameRing::Heap {
                ring: alloc::collections::VecDeque::with_capacity(cap),
                cap,
            };
        }
        let _ = n;
        FrameRing::Inline(Deque::new())
    }

    /// The number of places.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        match self {
            FrameRing::Inline(_) => INLINE_FRAMES,
            #[cfg(feature = "alloc")]
            FrameRing::Heap { cap, .. } => *cap,
        }
    }

    /// Items queued.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        on_ring!(self, q => q.len())
    }

    /// Whether every place holds an item.
    #[inline(always)]
    pub(crate) fn is_full(&self) -> bool {
        match self {
            FrameRing::Inline(q) => q.is_full(),
            #[cfg(feature = "alloc")]
            FrameRing::Heap { ring, cap } => ring.len() >= *cap,
        }
    }

    /// The `i`-th item, oldest first.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        on_ring!(self, q => q.get(i))
    }

    /// The `i`-th item, oldest first.
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        on_ring!(self, q => q.get_mut(i))
    }

    /// The oldest item.
    #[cfg(test)]
    pub(crate) fn front(&self) -> Option<&T> {
        on_ring!(self, q => q.front())
    }

    /// The oldest item.
    #[inline(always)]
    pub(crate) fn front_mut(&mut self) -> Option<&mut T> {
        on_ring!(self, q => q.front_mut())
    }

    /// The newest item.
    #[inline(always)]
    pub(crate) fn back(&self) -> Option<&T> {
        on_ring!(self, q => q.back())
    }

    /// The newest item.
    #[inline(always)]
    pub(crate) fn back_mut(&mut self) -> Option<&mut T> {
        on_ring!(self, q => q.back_mut())
    }

    /// The items in order, as the two contiguous runs the ring stores them in.
    #[inline(always)]
    pub(crate) fn as_slices(&self) -> (&[T], &[T]) {
        on_ring!(self, q => q.as_slices())
    }

    /// Adds `item` as the newest; gives it back when every place is taken.
    #[inline(always)]
    pub(crate) fn push_back(&mut self, item: T) -> Result<(), T> {
        match self {
            FrameRing::Inline(q) => q.push_back(item),
            #[cfg(feature = "alloc")]
            FrameRing::Heap { ring, cap } => {
                if ring.len() >= *cap {
                    return Err(item);
                }
                ring.push_back(item);
                Ok(())
            }
        }
    }

    /// Removes the oldest item.
    #[inline(always)]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        on_ring!(self, q => q.pop_front())
    }

    /// Removes the newest item.
    #[inline(always)]
    pub(crate) fn pop_back(&mut self) -> Option<T> {
        on_ring!(self, q => q.pop_back())
    }

    /// Swaps the `i`-th and `j`-th items (nothing happens unless both are `< len`).
    pub(crate) fn swap(&mut self, i: usize, j: usize) {
        if i < self.len() && j < self.len() {
            on_ring!(self, q => q.swap(i, j))
        }
    }

    /// The items, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        let (a, b) = self.as_slices();
        a.iter().chain(b)
    }

    /// Drops every item (the places stay).
    pub(crate) fn clear(&mut self) {
        on_ring!(self, q => q.clear())
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
            assert!(matches!(r, FrameRing::Inline(_)));
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
