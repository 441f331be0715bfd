//! The C symbols the compiler expects: `memcpy`, `memmove`, `memset`, `memcmp`, `bcmp`,
//! `strlen`, and the unwinder's `rust_eh_personality` and `_Unwind_Resume`.
//!
//! The precompiled `compiler_builtins` of the `x86_64-unknown-linux-gnu` target leaves the
//! memory functions to the C library, and this kernel has none. `memcpy` and `memmove` also
//! count every call and byte in two atomics ([`copy_counts`]): that is how `/stats` reports the
//! bytes copied per HTTP request inside the guest, including smoltcp's own copies, the same way
//! the host benchmarks interpose `memcpy`.
//!
//! The copies are `rep movsq` / `rep movsb` in inline assembly, so the compiler cannot turn
//! them back into calls to themselves (LLVM recognises copy loops as `memcpy`). The comparison
//! and `strlen` loops are plain Rust; `objdump -d` of the release kernel shows none of these
//! functions calling another (README: "Checking the C symbols").

use core::arch::asm;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

static COPY_CALLS: AtomicU64 = AtomicU64::new(0);
static COPY_BYTES: AtomicU64 = AtomicU64::new(0);

/// Calls of `memcpy` plus `memmove` so far, and the bytes they copied.
pub fn copy_counts() -> (u64, u64) {
    (COPY_CALLS.load(Relaxed), COPY_BYTES.load(Relaxed))
}

fn count(n: usize) {
    COPY_CALLS.fetch_add(1, Relaxed);
    COPY_BYTES.fetch_add(n as u64, Relaxed);
}

/// Copies `n` bytes forwards: 8 at a time, then the rest.
///
/// # Safety
///
/// `src..src + n` readable, `dst..dst + n` writable; if they overlap, `dst` must not be above
/// `src`.
#[inline(always)]
unsafe fn copy_forward(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: the caller guarantees the ranges; the direction flag is clear (the ABI's rule).
    unsafe {
        asm!(
            "rep movsq",
            "mov rcx, {rest}",
            "rep movsb",
            rest = in(reg) n & 7,
            inout("rcx") n >> 3 => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags)
        );
    }
}

/// Copies `n` bytes backwards (for an overlapping `memmove` with `dst` above `src`): the tail
/// bytes first, then 8 at a time, with the direction flag set and cleared again.
///
/// # Safety
///
/// `src..src + n` readable, `dst..dst + n` writable, `n > 0`.
#[inline(always)]
unsafe fn copy_backward(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: the caller guarantees the ranges; both pointers start at their range's last byte
    // and move down; the direction flag is cleared again before returning.
    unsafe {
        asm!(
            "std",
            "rep movsb",
            "sub rsi, 7",
            "sub rdi, 7",
            "mov rcx, {words}",
            "rep movsq",
            "cld",
            words = in(reg) n >> 3,
            inout("rcx") n & 7 => _,
            inout("rdi") dst.add(n - 1) => _,
            inout("rsi") src.add(n - 1) => _,
            options(nostack)
        );
    }
}

/// C `memcpy`, counted.
///
/// # Safety
///
/// `src..src + n` readable, `dst..dst + n` writable, not overlapping.
#[no_mangle]
#[inline(never)]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    count(n);
    // SAFETY: the caller's contract is memcpy's; non-overlapping ranges copy forwards.
    unsafe { copy_forward(dst, src, n) };
    dst
}

/// C `memmove`, counted.
///
/// # Safety
///
/// `src..src + n` readable, `dst..dst + n` writable; they may overlap.
#[no_mangle]
#[inline(never)]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    count(n);
    if n == 0 {
        return dst;
    }
    if (dst as usize).wrapping_sub(src as usize) >= n {
        // `dst` below `src`, or no overlap: forwards never reads a byte already overwritten.
        // SAFETY: the caller's ranges; see above for the direction.
        unsafe { copy_forward(dst, src, n) };
    } else {
        // `dst` inside `src..src + n`: copy from the end.
        // SAFETY: the caller's ranges, `n > 0`.
        unsafe { copy_backward(dst, src, n) };
    }
    dst
}

/// C `memset`.
///
/// # Safety
///
/// `dst..dst + n` writable.
#[no_mangle]
#[inline(never)]
pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller guarantees the range; the direction flag is clear.
    unsafe {
        asm!(
            "rep stosb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            in("al") c as u8,
            options(nostack, preserves_flags)
        );
    }
    dst
}

/// C `memcmp`.
///
/// # Safety
///
/// `a..a + n` and `b..b + n` readable.
#[no_mangle]
#[inline(never)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: `i < n`, inside both readable ranges.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// C `bcmp`: zero when equal.
///
/// # Safety
///
/// `a..a + n` and `b..b + n` readable.
#[no_mangle]
#[inline(never)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the caller's contract is memcmp's.
    unsafe { memcmp(a, b, n) }
}

/// C `strlen`.
///
/// # Safety
///
/// `s` points to a NUL-terminated string.
#[no_mangle]
#[inline(never)]
pub unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // SAFETY: every byte up to and including the NUL is readable (the caller's contract); a
    // volatile read keeps LLVM from recognising the loop as a call to `strlen`.
    while unsafe { s.add(n).read_volatile() } != 0 {
        n += 1;
    }
    n
}

/// Referenced by the precompiled `core` even with `panic = "abort"`; never called.
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}

/// Referenced by the precompiled `alloc`'s unwinding landing pads (it was built with
/// `panic = "unwind"`); with `panic = "abort"` nothing unwinds, so it is never reached.
#[no_mangle]
pub extern "C" fn _Unwind_Resume() -> ! {
    crate::exit::exit(crate::exit::ExitCode::Panic)
}
