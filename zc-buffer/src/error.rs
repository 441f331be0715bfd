//! Small `Copy` error types. Nothing in this crate panics on a bad length or an exhausted pool;
//! it returns one of these (or `None` / `Poll::Pending` for exhaustion).

use core::fmt;

/// A frame operation asked for bytes the frame does not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// `advance`, `truncate`, `set_len` or a completion asked for more bytes than exist.
    Length {
        /// Bytes asked for.
        requested: usize,
        /// Bytes available for that request.
        available: usize,
    },
    /// `push_header` asked for more headroom than is left in front of the data.
    Headroom {
        /// Bytes asked for.
        requested: usize,
        /// Headroom left.
        available: usize,
    },
    /// `set_headroom` was called on a frame that already holds data.
    NotEmpty,
    /// `append_from` was called on a frame lent to the application.
    Lent,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FrameError::Length {
                requested,
                available,
            } => write!(f, "{requested} bytes requested, {available} available"),
            FrameError::Headroom {
                requested,
                available,
            } => write!(
                f,
                "{requested} bytes of headroom requested, {available} available"
            ),
            FrameError::NotEmpty => f.write_str("the frame already holds data"),
            FrameError::Lent => f.write_str("the frame is lent to the application"),
        }
    }
}

impl core::error::Error for FrameError {}

/// Why a [`FrameChain`](crate::FrameChain) operation could not be done. The chain is left as it
/// was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainError {
    /// A split point past the chain's end.
    Length {
        /// Byte offset asked for.
        requested: usize,
        /// Bytes in the chain.
        available: usize,
    },
    /// The pool had no free slot for the operation: the copy a split inside a slot needs, or a
    /// new tail frame for [`write_with`](crate::FrameChain::write_with). Retry once frames
    /// were dropped (a TX waiter: [`FramePool::poll_alloc_tx`](crate::FramePool::poll_alloc_tx)).
    Exhausted,
    /// The chain already holds [`MAX_CHAIN_SEGMENTS`](crate::MAX_CHAIN_SEGMENTS) frames and
    /// the operation needs one more.
    Full,
    /// The chain holds no frame, so there is no pool to take a new frame from: push one first.
    Empty,
}

impl fmt::Display for ChainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ChainError::Length {
                requested,
                available,
            } => write!(f, "offset {requested} past a chain of {available} bytes"),
            ChainError::Exhausted => f.write_str("the frame pool has no free slot"),
            ChainError::Full => write!(
                f,
                "the chain already holds {} frames",
                crate::MAX_CHAIN_SEGMENTS
            ),
            ChainError::Empty => f.write_str("the chain holds no frame"),
        }
    }
}

impl core::error::Error for ChainError {}

/// Why a [`FramePool`](crate::FramePool) could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// A pool needs at least one slot.
    NoSlots,
    /// More slots than [`MAX_SLOTS`](crate::MAX_SLOTS).
    TooManySlots {
        /// Slots asked for.
        requested: usize,
    },
    /// The slot size is not a multiple of [`SLOT_ALIGN`](crate::SLOT_ALIGN), is 0, or exceeds
    /// [`MAX_SLOT_SIZE`](crate::MAX_SLOT_SIZE).
    BadSlotSize {
        /// Slot size asked for.
        slot_size: usize,
    },
    /// The TX headroom leaves no room for a payload in a slot.
    HeadroomTooLarge {
        /// Headroom asked for.
        headroom: usize,
        /// Slot size.
        slot_size: usize,
    },
    /// The memory region is smaller than `slots * slot_size`.
    RegionTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        given: usize,
    },
    /// The memory region does not start on a [`SLOT_ALIGN`](crate::SLOT_ALIGN) boundary.
    Misaligned,
    /// Fewer [`SlotMeta`](crate::SlotMeta) entries than slots.
    MetaTooSmall {
        /// Entries needed.
        needed: usize,
        /// Entries given.
        given: usize,
    },
    /// A [`PoolCell`](crate::PoolCell) or [`StaticPool`](crate::StaticPool) was already
    /// initialised (or is being initialised on another core).
    AlreadyInitialized,
    /// The allocator refused the memory (only [`FramePool::leak`](crate::FramePool::leak)).
    OutOfMemory,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PoolError::NoSlots => f.write_str("a frame pool needs at least one slot"),
            PoolError::TooManySlots { requested } => write!(
                f,
                "{requested} slots requested, at most {} supported",
                crate::MAX_SLOTS
            ),
            PoolError::BadSlotSize { slot_size } => write!(
                f,
                "slot size {slot_size} must be a non-zero multiple of {} up to {}",
                crate::SLOT_ALIGN,
                crate::MAX_SLOT_SIZE
            ),
            PoolError::HeadroomTooLarge {
                headroom,
                slot_size,
            } => write!(
                f,
                "headroom {headroom} leaves no payload room in {slot_size}-byte slots"
            ),
            PoolError::RegionTooSmall { needed, given } => {
                write!(f, "memory region of {given} bytes, {needed} needed")
            }
            PoolError::Misaligned => write!(
                f,
                "memory region must start on a {}-byte boundary",
                crate::SLOT_ALIGN
            ),
            PoolError::MetaTooSmall { needed, given } => {
                write!(f, "{given} slot metadata entries, {needed} needed")
            }
            PoolError::AlreadyInitialized => f.write_str("the pool was already initialised"),
            PoolError::OutOfMemory => f.write_str("out of memory for the frame pool"),
        }
    }
}

impl core::error::Error for PoolError {}
