//! Where tasks live: [`TaskStorage`] slots in `static`s (no allocator), or boxes (`alloc`).

use core::cell::UnsafeCell;
use core::fmt;
use core::future::Future;
use core::mem::{align_of, size_of, MaybeUninit};
use core::ptr::NonNull;
use core::task::Poll;

use super::raw::{self, Header, Stage, TaskRef, TaskVTable};
use crate::executor::Core;
use crate::sync::{AtomicBool, Ordering::*};

/// Alignment of a [`TaskStorage`]'s future area; futures needing more cannot use it.
pub const STORAGE_ALIGN: usize = 16;

/// Why a task could not be spawned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpawnError {
    /// The storage slot still holds a task (running, or referenced by a waker or join handle).
    Busy,
    /// The future (with room for its output) does not fit the slot.
    TooLarge {
        /// Bytes the future and its output need.
        needed: usize,
        /// Bytes the slot has.
        available: usize,
    },
    /// The future needs more than [`STORAGE_ALIGN`] alignment.
    Misaligned {
        /// Alignment the future needs.
        needed: usize,
    },
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SpawnError::Busy => f.write_str("task storage is still in use"),
            SpawnError::TooLarge { needed, available } => write!(
                f,
                "future needs {needed} bytes, task storage has {available}"
            ),
            SpawnError::Misaligned { needed } => write!(
                f,
                "future needs {needed}-byte alignment, task storage offers {STORAGE_ALIGN}"
            ),
        }
    }
}

impl core::error::Error for SpawnError {}

#[repr(C, align(16))]
struct Aligned<const SIZE: usize>([MaybeUninit<u8>; SIZE]);

/// A `static` slot for one task whose future (and output) fits in `SIZE` bytes. Claimed by
/// [`Spawner::spawn_in`](crate::Spawner::spawn_in); free again once the task has completed and
/// the last waker and join handle referring to it are gone.
///
/// ```
/// use zcnet_executor::{Executor, TaskStorage};
/// # use zcnet_executor::linux::LinuxPlatform;
/// # let executor: &'static Executor = Executor::leak(LinuxPlatform::leak().unwrap());
/// static SLOT: TaskStorage<256> = TaskStorage::new();
///
/// let handle = executor.spawner().spawn_in(&SLOT, async { 6 * 7 }).unwrap();
/// assert_eq!(executor.block_on(handle), 42);
/// ```
pub struct TaskStorage<const SIZE: usize> {
    /// Set by the spawner that claims the slot; cleared by the task's deallocation.
    claimed: AtomicBool,
    header: UnsafeCell<MaybeUninit<Header>>,
    stage: UnsafeCell<Aligned<SIZE>>,
}

// SAFETY: the slot is written only by the spawner that won `claimed`, before the task is
// published; afterwards its contents follow the task protocol, which is thread-safe.
unsafe impl<const SIZE: usize> Sync for TaskStorage<SIZE> {}

impl<const SIZE: usize> fmt::Debug for TaskStorage<SIZE> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskStorage")
            .field("size", &SIZE)
            .field("claimed", &self.claimed.load(Relaxed))
            .finish()
    }
}

impl<const SIZE: usize> TaskStorage<SIZE> {
    /// An empty slot, for a `static`.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            claimed: AtomicBool::new(false),
            header: UnsafeCell::new(MaybeUninit::uninit()),
            stage: UnsafeCell::new(Aligned([MaybeUninit::uninit(); SIZE])),
        }
    }

    /// An empty slot.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            claimed: AtomicBool::new(false),
            header: UnsafeCell::new(MaybeUninit::uninit()),
            stage: UnsafeCell::new(Aligned([MaybeUninit::uninit(); SIZE])),
        }
    }

    /// Whether a task occupies the slot.
    pub fn is_claimed(&self) -> bool {
        self.claimed.load(Acquire)
    }

    /// Claims the slot for `future` (a [`LOCAL`](super::raw::LOCAL) task if `local`; with a
    /// join handle's reference if `join`).
    pub(crate) fn spawn<F: Future + 'static>(
        &'static self,
        core: &'static Core,
        future: F,
        local: bool,
        join: bool,
    ) -> Result<TaskRef, SpawnError> {
        let needed = size_of::<Stage<F>>();
        if needed > SIZE {
            return Err(SpawnError::TooLarge {
                needed,
                available: SIZE,
            });
        }
        if align_of::<Stage<F>>() > STORAGE_ALIGN {
            return Err(SpawnError::Misaligned {
                needed: align_of::<Stage<F>>(),
            });
        }
        if self
            .claimed
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_err()
        {
            return Err(SpawnError::Busy);
        }
        // Both pointers derive from the whole storage, so that the executor may step from the
        // header to the storage around it (`storage_of`).
        let base = core::ptr::from_ref(self);
        // SAFETY: field places of a live `TaskStorage`, not read here.
        let (stage, header) = unsafe {
            (
                UnsafeCell::raw_get(&raw const (*base).stage).cast::<Stage<F>>(),
                UnsafeCell::raw_get(&raw const (*base).header).cast::<Header>(),
            )
        };
        // SAFETY: winning `claimed` gives us the slot alone; the previous task (if any) was
        // fully dropped before `claimed` was released. Size and alignment were checked above.
        unsafe {
            stage.write(Stage::Running(future));
            header.write(Header::new(
                static_vtable::<F, SIZE>(),
                core,
                stage.cast::<()>(),
                local,
                join,
                header,
            ));
            Ok(TaskRef(NonNull::new_unchecked(header)))
        }
    }
}

#[cfg(not(loom))]
impl<const SIZE: usize> Default for TaskStorage<SIZE> {
    fn default() -> Self {
        Self::new()
    }
}

struct StaticVTable<F, const SIZE: usize>(core::marker::PhantomData<F>);

impl<F: Future, const SIZE: usize> StaticVTable<F, SIZE> {
    const VTABLE: TaskVTable = TaskVTable {
        poll: poll_static::<F, SIZE>,
        read_output: raw::read_output::<F>,
        drop_output: raw::drop_output_of::<F>(),
        dealloc: dealloc_static::<F, SIZE>,
    };
}

fn static_vtable<F: Future, const SIZE: usize>() -> &'static TaskVTable {
    &StaticVTable::<F, SIZE>::VTABLE
}

/// The `TaskStorage<SIZE>` whose header `header` is.
///
/// # Safety
///
/// `header` was made by [`TaskStorage::spawn`] of a `TaskStorage<SIZE>`.
unsafe fn storage_of<const SIZE: usize>(header: NonNull<Header>) -> *const TaskStorage<SIZE> {
    let storage_header_offset = core::mem::offset_of!(TaskStorage<SIZE>, header);
    // SAFETY: the header lives at that offset inside a `TaskStorage<SIZE>` (spawn put it there,
    // with a pointer derived from the whole storage).
    unsafe {
        header
            .as_ptr()
            .cast::<u8>()
            .sub(storage_header_offset)
            .cast::<TaskStorage<SIZE>>()
    }
}

/// Polls a task in a `TaskStorage<SIZE>` with future `F` (the vtable's `poll`).
///
/// # Safety
///
/// As for [`raw::poll_stage`], for a task spawned into a `TaskStorage<SIZE>` with future `F`.
unsafe fn poll_static<F: Future, const SIZE: usize>(header: NonNull<Header>) -> Poll<()> {
    // SAFETY: per the preconditions; the stage sits at the start of the storage's stage area
    // (spawn wrote it there), and the executor polling the task has exclusive use of it.
    unsafe {
        let storage = storage_of::<SIZE>(header);
        raw::poll_stage::<F>(header, (*storage).stage.get().cast::<Stage<F>>())
    }
}

/// Drops the task in its static slot and releases the slot.
///
/// # Safety
///
/// The last reference to a task spawned into a `TaskStorage<SIZE>` with future `F`.
unsafe fn dealloc_static<F: Future, const SIZE: usize>(header: NonNull<Header>) {
    // SAFETY: the header was made by spawn into a `TaskStorage<SIZE>`; nobody else references
    // the task any more, so dropping its contents is exclusive.
    unsafe {
        let storage = &*storage_of::<SIZE>(header);
        core::ptr::drop_in_place(header.as_ref().stage.cast::<Stage<F>>());
        core::ptr::drop_in_place(header.as_ptr());
        storage.claimed.store(false, Release);
    }
}

#[cfg(feature = "alloc")]
mod boxed {
    extern crate alloc;

    use alloc::boxed::Box;
    use core::cell::UnsafeCell;
    use core::future::Future;
    use core::ptr::NonNull;
    use core::task::Poll;

    use super::super::raw::{self, Header, Stage, TaskRef, TaskVTable};
    use crate::executor::Core;

    /// A heap task: header and stage in one allocation.
    #[repr(C)]
    struct TaskCell<F: Future> {
        header: Header,
        stage: UnsafeCell<Stage<F>>,
    }

    struct BoxVTable<F>(core::marker::PhantomData<F>);

    impl<F: Future> BoxVTable<F> {
        const VTABLE: TaskVTable = TaskVTable {
            poll: poll_boxed::<F>,
            read_output: raw::read_output::<F>,
            drop_output: raw::drop_output_of::<F>(),
            dealloc: dealloc_boxed::<F>,
        };
    }

    /// Polls a boxed task with future `F` (the vtable's `poll`).
    ///
    /// # Safety
    ///
    /// As for [`raw::poll_stage`], for a task made by `spawn_boxed::<F>`.
    unsafe fn poll_boxed<F: Future>(header: NonNull<Header>) -> Poll<()> {
        // SAFETY: the header is the first field of a `#[repr(C)] TaskCell<F>` made by
        // `Box::into_raw` in `spawn_boxed`; the executor polling it has exclusive use of the
        // stage.
        unsafe {
            let cell = header.as_ptr().cast::<TaskCell<F>>();
            raw::poll_stage::<F>(header, (*cell).stage.get())
        }
    }

    /// Frees a boxed task.
    ///
    /// # Safety
    ///
    /// The last reference to a task made by `spawn_boxed::<F>`.
    unsafe fn dealloc_boxed<F: Future>(header: NonNull<Header>) {
        // SAFETY: the header is the first field of a `#[repr(C)] TaskCell<F>` made by
        // `Box::into_raw` in `spawn_boxed`, and nobody references the task any more.
        drop(unsafe { Box::from_raw(header.as_ptr().cast::<TaskCell<F>>()) });
    }

    /// Boxes `future` as a task (a [`LOCAL`](super::raw::LOCAL) one if `local`; with a join
    /// handle's reference if `join`).
    pub(crate) fn spawn_boxed<F: Future + 'static>(
        core: &'static Core,
        future: F,
        local: bool,
        join: bool,
    ) -> TaskRef {
        // The allocation first, so that the header is built knowing its address (its waker and
        // stage pointers); all pointers derive from the raw one.
        let cell = Box::into_raw(Box::<TaskCell<F>>::new_uninit()).cast::<TaskCell<F>>();
        // SAFETY: `cell` is a fresh, unique allocation for a `TaskCell<F>`, written whole here;
        // the header and stage pointers stay valid as long as the cell, which is freed only by
        // `dealloc_boxed`.
        unsafe {
            let stage = UnsafeCell::raw_get(&raw const (*cell).stage).cast::<()>();
            cell.write(TaskCell {
                header: Header::new(
                    &BoxVTable::<F>::VTABLE,
                    core,
                    stage,
                    local,
                    join,
                    cell.cast::<Header>(),
                ),
                stage: UnsafeCell::new(Stage::Running(future)),
            });
            TaskRef(NonNull::new_unchecked(cell.cast::<Header>()))
        }
    }
}

#[cfg(feature = "alloc")]
pub(crate) use boxed::spawn_boxed;
