//! Task wakers: a `Waker` is a counted pointer to the task's header.

use core::ptr::NonNull;
use core::task::{RawWaker, RawWakerVTable, Waker};

use super::raw::{Header, TaskRef};

static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop_waker);

fn task(data: *const ()) -> TaskRef {
    // SAFETY: every RawWaker with this vtable was made from a non-null header pointer.
    TaskRef(unsafe { NonNull::new_unchecked(data as *mut Header) })
}

unsafe fn clone(data: *const ()) -> RawWaker {
    task(data).ref_inc();
    RawWaker::new(data, &VTABLE)
}

unsafe fn wake(data: *const ()) {
    let task = task(data);
    // The caller's reference becomes the executor's spare.
    if task.wake_if_idle(true) {
        return;
    }
    if task.core().wake_on_owner_thread(task) {
        // SAFETY: `wake` consumes the waker, and with it one reference; the task is not used
        // afterwards (the local queue holds it through the executor's local reference).
        unsafe { task.ref_dec() };
        return;
    }
    // SAFETY: `wake` consumes the waker, and with it one reference.
    unsafe { task.wake_and_release() };
}

unsafe fn wake_by_ref(data: *const ()) {
    let task = task(data);
    if task.wake_if_idle(false) {
        return;
    }
    if !task.core().wake_on_owner_thread(task) {
        task.wake_by_ref();
    }
}

unsafe fn drop_waker(data: *const ()) {
    // SAFETY: dropping the waker gives back its reference.
    unsafe { task(data).ref_dec() };
}

/// A waker pointing to the header at `header`, owning no reference (for `Header::waker`,
/// which is never dropped).
///
/// # Safety
///
/// A task header lives at `header` for as long as the waker or a clone of it is used.
pub(crate) unsafe fn waker_of(header: *const Header) -> Waker {
    // SAFETY: the vtable's functions uphold the RawWaker contract for a header pointer: clone
    // adds a reference, wake/drop release one, all thread-safe through the state word; the
    // header outlives the waker (the caller's promise).
    unsafe { Waker::from_raw(RawWaker::new(header.cast::<()>(), &VTABLE)) }
}

/// The task behind `waker`, if it is one of this crate's task wakers.
pub(crate) fn header_from_waker(waker: &Waker) -> Option<TaskRef> {
    if core::ptr::eq(waker.vtable(), &VTABLE) {
        Some(task(waker.data()))
    } else {
        None
    }
}
