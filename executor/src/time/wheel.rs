//! The hierarchical timer wheel: 6 levels × 64 slots, one occupancy bitmap per level.
//!
//! # Ground rules
//!
//! * The wheel is a plain data structure; the executor keeps it behind its timer lock, and every
//!   method here runs with that lock held. Entries' fields are touched only under the lock too.
//! * Time is counted in ticks (1 ms by default). `elapsed` is the tick up to which the wheel has
//!   been processed. An entry with deadline `d > elapsed` sits at the level of the highest 6-bit
//!   group in which `d` and `elapsed` differ, in slot `(d >> 6·level) & 63`: level 0 holds the
//!   current 64-tick window exactly, level 1 the current 4096-tick window in 64-tick slots, and so
//!   on up to level 5 (64⁶ ticks ≈ 2.2 years at 1 ms). Deadlines further out are parked in the
//!   top level and re-inserted when their slot comes round.
//! * Every slot at level `l > 0` that holds entries lies strictly after the slot containing
//!   `elapsed` at that level (an entry in the same slot would have gone to a lower level), so the
//!   next work is in the first occupied slot at the lowest non-empty level: found with one
//!   rotate + trailing-zeros per level, O(levels).
//! * Each slot below the top level also keeps the earliest deadline placed in it since it was
//!   last empty (a lower bound: a cancelled entry may have set it). The next expiration is that
//!   deadline, not the slot's start, so an idle core sleeps until a timer is actually due instead
//!   of waking at the slot's start only to cascade it. Cascading then happens in the same
//!   `advance` that fires the entry.
//! * Processing a slot at level 0 fires its entries; at a higher level it cascades them to lower
//!   levels (or fires those already due). Fired entries go to the `pending` list; the executor
//!   takes their wakers in batches and wakes them after releasing the lock.
//! * Entries are intrusive doubly-linked nodes embedded in `Sleep` futures, pinned while
//!   linked. The wheel and the `Sleep` reach an entry's state only through the raw pointer
//!   `Entry::state` gives (`addr_of_mut!`); no reference to a whole `EntryState`, nor to its
//!   links, is formed while it is linked. The only references into a linked entry are
//!   short-lived ones to its `waker` field (to compare, take or replace the waker), under the
//!   lock, so nothing else touches that field while they live.
//! * `&mut` references that *enclose* a linked entry cannot be avoided: every `Pin<&mut Sleep>`
//!   a poll receives is one, and so are `get_unchecked_mut` in `Sleep::poll`, `Sleep::reset`
//!   and `Timeout::poll`, and `&mut self` in `Sleep::drop`; meanwhile the executor's thread
//!   may write the entry through the wheel's pointers (under the lock). This is sound only
//!   because a `&mut T` with `T: !Unpin` asserts no uniqueness: rustc emits no `noalias` for
//!   it, and Miri's Stacked and Tree Borrows exempt it from their uniqueness checks (tokio's
//!   intrusive lists rely on the same rule and put a `PhantomPinned` in their nodes for it). So
//!   the `PhantomPinned` in `Entry` is load-bearing: it makes `Entry`, `Sleep`, `Timeout` and
//!   every future holding a `Sleep` `!Unpin` (`sleep.rs` checks `Sleep` at compile time); an
//!   `Unpin` type must never embed an entry. (`core::pin::UnsafePinned`, unstable for now,
//!   states this exemption explicitly; once stable it is the better marker.)

use core::cell::UnsafeCell;
use core::marker::PhantomPinned;
use core::ptr::{self, addr_of_mut, NonNull};
use core::task::Waker;

pub(crate) const LEVELS: usize = 6;
const SLOTS: usize = 64;
const SLOT_BITS: u32 = 6;
/// The furthest ahead (in ticks) an entry can be placed; later deadlines are parked at this
/// distance and re-inserted when reached.
pub(crate) const MAX_AHEAD: u64 = (1 << (SLOT_BITS * LEVELS as u32)) - 1;

/// Where an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Not linked anywhere (new, or cancelled).
    Idle,
    /// In the wheel at this level and slot.
    Wheel { level: u8, slot: u8 },
    /// Expired, on the pending list, waker not yet taken.
    Pending,
    /// Expired and its waker taken (or woken).
    Fired,
}

/// The mutable part of a timer entry, touched only under the timer lock.
pub(crate) struct EntryState {
    prev: *mut EntryState,
    next: *mut EntryState,
    /// Deadline in ticks.
    pub(crate) deadline: u64,
    pub(crate) place: Place,
    pub(crate) waker: Option<Waker>,
}

/// A timer entry, embedded in a `Sleep`. `!Unpin`: its address is in the wheel's lists while
/// linked, and `&mut` references to the `Sleep` enclosing it must claim no uniqueness (module
/// ground rules).
pub(crate) struct Entry {
    state: UnsafeCell<EntryState>,
    /// Load-bearing (module ground rules): makes every type that embeds an entry `!Unpin`.
    _pin: PhantomPinned,
}

impl Entry {
    pub(crate) const fn new() -> Self {
        Self {
            state: UnsafeCell::new(EntryState {
                prev: ptr::null_mut(),
                next: ptr::null_mut(),
                deadline: 0,
                place: Place::Idle,
                waker: None,
            }),
            _pin: PhantomPinned,
        }
    }

    /// A raw pointer to the entry's state, for use under the timer lock.
    pub(crate) fn state(&self) -> NonNull<EntryState> {
        // SAFETY: `UnsafeCell::get` never returns null.
        unsafe { NonNull::new_unchecked(self.state.get()) }
    }
}

// SAFETY: the entry's state is only touched under the timer lock (module ground rules); the
// waker inside is Send + Sync.
unsafe impl Send for Entry {}
// SAFETY: as above.
unsafe impl Sync for Entry {}

/// An intrusive doubly-linked list of entries.
#[derive(Clone, Copy)]
struct List {
    head: *mut EntryState,
    tail: *mut EntryState,
}

impl List {
    const EMPTY: List = List {
        head: ptr::null_mut(),
        tail: ptr::null_mut(),
    };

    fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// # Safety
    ///
    /// `e` is a live entry, not in any list, and the timer lock is held.
    unsafe fn push_back(&mut self, e: NonNull<EntryState>) {
        let e = e.as_ptr();
        // SAFETY: per the preconditions; `tail`, if non-null, is a live linked entry.
        unsafe {
            *addr_of_mut!((*e).prev) = self.tail;
            *addr_of_mut!((*e).next) = ptr::null_mut();
            if self.tail.is_null() {
                self.head = e;
            } else {
                *addr_of_mut!((*self.tail).next) = e;
            }
        }
        self.tail = e;
    }

    /// # Safety
    ///
    /// `e` is a live entry in this list, and the timer lock is held.
    unsafe fn remove(&mut self, e: NonNull<EntryState>) {
        let e = e.as_ptr();
        // SAFETY: per the preconditions, `e` and its neighbours are live linked entries.
        unsafe {
            let prev = *addr_of_mut!((*e).prev);
            let next = *addr_of_mut!((*e).next);
            if prev.is_null() {
                self.head = next;
            } else {
                *addr_of_mut!((*prev).next) = next;
            }
            if next.is_null() {
                self.tail = prev;
            } else {
                *addr_of_mut!((*next).prev) = prev;
            }
            *addr_of_mut!((*e).prev) = ptr::null_mut();
            *addr_of_mut!((*e).next) = ptr::null_mut();
        }
    }

    /// # Safety
    ///
    /// The timer lock is held; every entry in the list is live.
    unsafe fn pop_front(&mut self) -> Option<NonNull<EntryState>> {
        let head = NonNull::new(self.head)?;
        // SAFETY: `head` is in this list.
        unsafe { self.remove(head) };
        Some(head)
    }
}

struct Level {
    occupied: u64,
    slots: [List; SLOTS],
    /// Per slot: the earliest deadline placed in it since it was last empty (`u64::MAX` while
    /// empty). A lower bound on its entries' deadlines, never above any of them: removing an
    /// entry leaves it as it is (an early wake at worst, never a late one).
    earliest: [u64; SLOTS],
}

impl Level {
    const EMPTY: Level = Level {
        occupied: 0,
        slots: [List::EMPTY; SLOTS],
        earliest: [u64::MAX; SLOTS],
    };
}

/// The wheel (see the module docs).
pub(crate) struct Wheel {
    elapsed: u64,
    levels: [Level; LEVELS],
    pending: List,
    /// Entries in the wheel or on the pending list.
    len: usize,
}

// SAFETY: the raw pointers inside point to entries that are only touched under the timer lock,
// which is what gives access to the wheel.
unsafe impl Send for Wheel {}

/// The level for a deadline `when > elapsed` (clamped to the top level).
fn level_for(elapsed: u64, when: u64) -> usize {
    let masked = (elapsed ^ when) | (SLOTS as u64 - 1);
    let masked = masked.min(MAX_AHEAD);
    let significant = 63 - masked.leading_zeros() as usize;
    significant / SLOT_BITS as usize
}

fn slot_for(when: u64, level: usize) -> usize {
    ((when >> (level as u32 * SLOT_BITS)) & (SLOTS as u64 - 1)) as usize
}

fn slot_range(level: usize) -> u64 {
    1 << (level as u32 * SLOT_BITS)
}

impl Wheel {
    pub(crate) const fn new() -> Self {
        Self {
            elapsed: 0,
            levels: [Level::EMPTY; LEVELS],
            pending: List::EMPTY,
            len: 0,
        }
    }

    /// The tick up to which the wheel has been processed.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Entries in the wheel or pending.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Links `e` with `deadline` (ticks). An entry already due goes straight to the pending
    /// list. Returns whether it was placed in the wheel (not due yet).
    ///
    /// # Safety
    ///
    /// `e` is a live, pinned entry with place `Idle` or `Fired`; the timer lock is held; the
    /// entry stays alive until it is removed (`remove`) or taken (`take_pending`).
    pub(crate) unsafe fn insert(&mut self, e: NonNull<EntryState>, deadline: u64) -> bool {
        // SAFETY: per the preconditions.
        unsafe {
            let p = e.as_ptr();
            debug_assert!(matches!((*p).place, Place::Idle | Place::Fired));
            *addr_of_mut!((*p).deadline) = deadline;
            self.len += 1;
            self.place(e)
        }
    }

    /// Places a linked-to-nothing entry by its deadline relative to `elapsed`.
    ///
    /// # Safety
    ///
    /// As for `insert`, and `len` already counts the entry.
    unsafe fn place(&mut self, e: NonNull<EntryState>) -> bool {
        let p = e.as_ptr();
        // SAFETY: per the preconditions.
        unsafe {
            let deadline = *addr_of_mut!((*p).deadline);
            if deadline <= self.elapsed {
                *addr_of_mut!((*p).place) = Place::Pending;
                self.pending.push_back(e);
                return false;
            }
            let key = deadline.min(self.elapsed + MAX_AHEAD);
            let level = level_for(self.elapsed, key);
            let slot = slot_for(key, level);
            *addr_of_mut!((*p).place) = Place::Wheel {
                level: level as u8,
                slot: slot as u8,
            };
            let lvl = &mut self.levels[level];
            lvl.slots[slot].push_back(e);
            lvl.occupied |= 1 << slot;
            lvl.earliest[slot] = lvl.earliest[slot].min(key);
            true
        }
    }

    /// Unlinks `e` from wherever it is (O(1)); its place becomes `Idle`.
    ///
    /// # Safety
    ///
    /// `e` is live and the timer lock is held.
    pub(crate) unsafe fn remove(&mut self, e: NonNull<EntryState>) {
        let p = e.as_ptr();
        // SAFETY: per the preconditions; the place says which list holds the entry.
        unsafe {
            match *addr_of_mut!((*p).place) {
                Place::Wheel { level, slot } => {
                    let lvl = &mut self.levels[level as usize];
                    lvl.slots[slot as usize].remove(e);
                    if lvl.slots[slot as usize].is_empty() {
                        lvl.occupied &= !(1 << slot);
                        lvl.earliest[slot as usize] = u64::MAX;
                    }
                    self.len -= 1;
                }
                Place::Pending => {
                    self.pending.remove(e);
                    self.len -= 1;
                }
                Place::Idle | Place::Fired => {}
            }
            *addr_of_mut!((*p).place) = Place::Idle;
        }
    }

    /// The earliest tick at which an entry may be due, or `None` if the wheel is empty: the
    /// earliest deadline recorded for the first occupied slot (its start at the top level, where
    /// far deadlines are parked and must be re-placed on time). Never after any entry's deadline;
    /// after a cancellation possibly before all of them. Due entries already pending count as
    /// "now" (`elapsed`). O(levels).
    pub(crate) fn next_expiration(&self) -> Option<u64> {
        if !self.pending.is_empty() {
            return Some(self.elapsed);
        }
        self.next_slot().map(|(level, slot, tick)| {
            if level + 1 < LEVELS {
                tick.max(self.levels[level].earliest[slot])
            } else {
                tick
            }
        })
    }

    /// (level, slot, tick) of the first occupied slot.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        for (level, lvl) in self.levels.iter().enumerate() {
            if lvl.occupied == 0 {
                continue;
            }
            let range = slot_range(level);
            let level_range = range * SLOTS as u64;
            let now_slot = ((self.elapsed / range) % SLOTS as u64) as u32;
            // Search from the slot after the current one, ending with the current one: at the
            // top level the current slot can hold parked far deadlines, a full rotation away.
            // (Below the top the current slot is never occupied.)
            let from = (now_slot + 1) % SLOTS as u32;
            let rotated = lvl.occupied.rotate_right(from);
            let slot = u64::from((rotated.trailing_zeros() + from) % SLOTS as u32);
            let level_start = self.elapsed & !(level_range - 1);
            let mut tick = level_start + slot * range;
            if tick <= self.elapsed {
                // A slot behind the current position is in the next rotation.
                tick += level_range;
            }
            return Some((level, slot as usize, tick));
        }
        None
    }

    /// Processes every expiry and cascade up to `now` (ticks): due entries move to the pending
    /// list, the rest to their new places. `elapsed` becomes `now` (it never goes back).
    pub(crate) fn advance(&mut self, now: u64) {
        while let Some((level, slot, tick)) = self.next_slot() {
            if tick > now {
                break;
            }
            self.elapsed = self.elapsed.max(tick);
            let lvl = &mut self.levels[level];
            let mut list = core::mem::replace(&mut lvl.slots[slot], List::EMPTY);
            lvl.occupied &= !(1 << slot);
            lvl.earliest[slot] = u64::MAX;
            // SAFETY: the lock is held (module rules) and every entry in the list is live (an
            // entry is unlinked before its Sleep is dropped).
            while let Some(e) = unsafe { list.pop_front() } {
                // SAFETY: as above; `place` re-links it (pending if due now).
                unsafe { self.place(e) };
            }
        }
        self.elapsed = self.elapsed.max(now);
    }

    /// Takes the next pending entry's waker and marks the entry `Fired`. `None` when no entry
    /// is pending. (An entry without a waker is still marked fired and yields `Some(None)`.)
    pub(crate) fn take_pending(&mut self) -> Option<Option<Waker>> {
        // SAFETY: the lock is held; pending entries are live.
        unsafe {
            let e = self.pending.pop_front()?;
            let p = e.as_ptr();
            *addr_of_mut!((*p).place) = Place::Fired;
            self.len -= 1;
            Some((*addr_of_mut!((*p).waker)).take())
        }
    }
}
