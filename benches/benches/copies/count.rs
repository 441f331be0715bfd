//! The `memcpy` / `memmove` interposer and the scopes its counts are filed under.
//!
//! The benchmark binary defines `memcpy` and `memmove` itself (`#[no_mangle]`). Every call the
//! compiler did not inline, in our code, in zcnet, smoltcp, embassy-net and the Rust standard
//! library linked into this binary, resolves to these definitions at link time, so each one is
//! seen here. They copy with `rep movsb` (x86_64; a volatile byte loop elsewhere), never by
//! calling `memcpy`, so they cannot recurse.
//!
//! What they do not see: copies the compiler inlined (small copies of a size known at compile
//! time become plain loads and stores), copies made inside the C library with its own internal
//! `memcpy` (e.g. in `realloc`), and `memset`. The first limitation applies to every peer alike.
//!
//! Each counted call is filed under
//!
//! * a **window** ([`Window`]): which leg of the exchange is under way. The applications switch
//!   it: the client sets "client → server" before it produces a request, the server sets
//!   "server → client" once it has the whole request, before it produces the response.
//! * a **scope** ([`Scope`]): which host (client or server) and which layer runs the code:
//!   the application with its socket calls, the stack (zcnet's ingress/egress tasks, smoltcp's
//!   `iface.poll`, embassy-net's runner), or the device (driver / link code). Scopes are set by
//!   guards ([`enter`]) and by the [`Scoped`] future wrapper around tasks; code outside every
//!   scope (the executors' own loops, the harness) is filed as "other".
//!
//! Each counted call is also checked against the **device buffers** of the run
//! ([`set_device_buffers`]: zcnet's two frame pools, or the frame buffers of the benchmark's link
//! for smoltcp and embassy-net). A call whose source or destination range starts or ends inside
//! one of them is counted again as a *device-buffer copy*: a copy that moves bytes into or out of
//! the memory the device reads and writes. Outside the device scope, that is exactly a payload
//! (or header) copy between the device buffer and a socket buffer or the application; struct
//! moves and ring-to-ring copies never touch it. (A copy spanning a whole region without
//! starting or ending inside it would be missed; every region here is larger than any copy the
//! workloads make.)
//!
//! Counting is on only between [`start`] and [`stop`], on the benchmark's single thread (checked:
//! [`single_threaded`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use std::task::{Context, Poll};
use zcnet_buffer::ledger::{LedgerSnapshot, LEDGER};

/// Which leg of a request/response exchange is under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The request travels from client to server.
    C2s = 0,
    /// The response travels from server to client.
    S2c = 1,
}

/// Which host runs the code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    Client = 0,
    Server = 1,
}

/// Which layer runs the code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// The application, including the socket calls it makes.
    App = 0,
    /// The stack's own processing (runner tasks, `iface.poll`).
    Stack = 1,
    /// The device: driver and in-memory link code.
    Device = 2,
}

/// A host and a layer, or "other".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope(u8);

/// Scopes: 2 hosts × 3 layers, plus "other".
pub const SCOPES: usize = 7;
const OTHER: u8 = 6;

impl Scope {
    /// `layer` on `host`.
    pub const fn of(host: Host, layer: Layer) -> Scope {
        Scope(host as u8 * 3 + layer as u8)
    }

    /// Code outside every scope: executor loops, the harness.
    pub const OTHER: Scope = Scope(OTHER);

    fn index(self) -> usize {
        self.0 as usize
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static WINDOW: AtomicU8 = AtomicU8::new(0);
static SCOPE: AtomicU8 = AtomicU8::new(OTHER);

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
static CALLS: [AtomicU64; 2 * SCOPES] = [ZERO; 2 * SCOPES];
static BYTES: [AtomicU64; 2 * SCOPES] = [ZERO; 2 * SCOPES];
/// Calls of at least [`LARGE`] bytes ("payload-sized").
static LARGE_CALLS: [AtomicU64; 2 * SCOPES] = [ZERO; 2 * SCOPES];
static LARGE: AtomicUsize = AtomicUsize::new(usize::MAX);
/// App + stack calls by length (the last bucket: [`SIZE_CAP`] bytes or more).
pub const SIZE_CAP: usize = 2048;
static SIZES: [AtomicU64; SIZE_CAP + 1] = [ZERO; SIZE_CAP + 1];
/// Calls and bytes that read or wrote a device buffer (see [`set_device_buffers`]).
static DEV_CALLS: [AtomicU64; 2 * SCOPES] = [ZERO; 2 * SCOPES];
static DEV_BYTES: [AtomicU64; 2 * SCOPES] = [ZERO; 2 * SCOPES];

/// Device buffer regions of the current run: `[start, end)` address pairs, unused ones empty.
pub const MAX_REGIONS: usize = 4;
#[allow(clippy::declare_interior_mutable_const)]
const NOWHERE: AtomicUsize = AtomicUsize::new(0);
static REGION_START: [AtomicUsize; MAX_REGIONS] = [NOWHERE; MAX_REGIONS];
static REGION_END: [AtomicUsize; MAX_REGIONS] = [NOWHERE; MAX_REGIONS];

/// Declares the memory the run's devices read and write (at most [`MAX_REGIONS`] ranges of
/// `(first byte, length)`; only the addresses are kept, nothing is read through them); copies
/// from or into it are counted apart ([`Counts::device_buffer`]). An empty list clears.
pub fn set_device_buffers(regions: &[(*const u8, usize)]) {
    assert!(
        regions.len() <= MAX_REGIONS,
        "too many device buffer regions"
    );
    for k in 0..MAX_REGIONS {
        let (start, end) = regions
            .get(k)
            .map(|&(p, len)| (p as usize, p as usize + len))
            .unwrap_or((0, 0));
        REGION_START[k].store(start, Relaxed);
        REGION_END[k].store(end, Relaxed);
    }
}

/// Whether `[p, p + n)` starts or ends inside a device buffer region.
#[inline(always)]
fn in_device_buffer(p: usize, n: usize) -> bool {
    let last = p.wrapping_add(n.saturating_sub(1));
    (0..MAX_REGIONS).any(|k| {
        let (s, e) = (REGION_START[k].load(Relaxed), REGION_END[k].load(Relaxed));
        (s <= p && p < e) || (s <= last && last < e)
    })
}

#[inline(always)]
fn count(dst: usize, src: usize, n: usize) {
    if ENABLED.load(Relaxed) {
        let i = WINDOW.load(Relaxed) as usize * SCOPES + SCOPE.load(Relaxed) as usize;
        CALLS[i].fetch_add(1, Relaxed);
        BYTES[i].fetch_add(n as u64, Relaxed);
        if n >= LARGE.load(Relaxed) {
            LARGE_CALLS[i].fetch_add(1, Relaxed);
        }
        if n > 0 && (in_device_buffer(dst, n) || in_device_buffer(src, n)) {
            DEV_CALLS[i].fetch_add(1, Relaxed);
            DEV_BYTES[i].fetch_add(n as u64, Relaxed);
        }
        let scope = SCOPE.load(Relaxed);
        if scope != OTHER && scope % 3 != Layer::Device as u8 {
            SIZES[n.min(SIZE_CAP)].fetch_add(1, Relaxed);
        }
    }
}

/// Copies of at least `n` bytes are also counted as "payload-sized".
pub fn set_large(n: usize) {
    LARGE.store(n.max(1), Relaxed);
}

/// Copies `n` bytes forward, first byte first.
///
/// # Safety
///
/// `src..src+n` readable, `dst..dst+n` writable; if the ranges overlap, `dst <= src`.
#[inline(always)]
unsafe fn copy_forward(dst: *mut u8, src: *const u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees both ranges; `rep movsb` with the direction flag clear (the
    // ABI's state at every call) copies rcx bytes from [rsi] to [rdi] upwards, which is correct
    // for overlapping ranges with dst <= src.
    unsafe {
        core::arch::asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..n {
        // SAFETY: i < n, inside both ranges; volatile so the loop is never turned into a memcpy
        // call (which would recurse).
        unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
    }
}

/// Copies `n > 0` bytes backward, last byte first.
///
/// # Safety
///
/// `src..src+n` readable, `dst..dst+n` writable, `n > 0`.
#[inline(always)]
unsafe fn copy_backward(dst: *mut u8, src: *const u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees both ranges and n > 0, so the last bytes are at +n-1; with
    // the direction flag set `rep movsb` walks downwards from there; the flag is cleared again
    // before the block ends, as the ABI requires.
    unsafe {
        core::arch::asm!(
            "std",
            "rep movsb",
            "cld",
            inout("rcx") n => _,
            inout("rdi") dst.add(n - 1) => _,
            inout("rsi") src.add(n - 1) => _,
            options(nostack)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in (0..n).rev() {
        // SAFETY: as in `copy_forward`.
        unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
    }
}

/// The C library's `memcpy`, counted.
///
/// # Safety
///
/// The C contract: `src` readable and `dst` writable for `n` bytes, the ranges disjoint.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    count(dst as usize, src as usize, n);
    // SAFETY: the caller's contract; disjoint ranges are a special case of dst <= src or of
    // non-overlap, both fine for a forward copy.
    unsafe { copy_forward(dst, src, n) };
    dst
}

/// The C library's `memmove`, counted.
///
/// # Safety
///
/// The C contract: `src` readable and `dst` writable for `n` bytes; the ranges may overlap.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    count(dst as usize, src as usize, n);
    if n > 0 && (dst as usize) > (src as usize) && (dst as usize) < (src as usize) + n {
        // SAFETY: the caller's contract; dst lies inside src's range, so copying from the end
        // reads every source byte before it is overwritten.
        unsafe { copy_backward(dst, src, n) };
    } else {
        // SAFETY: the caller's contract; dst <= src or the ranges do not overlap.
        unsafe { copy_forward(dst, src, n) };
    }
    dst
}

/// Sets the window (the applications call this as the exchange moves on).
pub fn set_window(w: Window) {
    WINDOW.store(w as u8, Relaxed);
}

/// Files the copies of the guard's lifetime under `scope`; the previous scope comes back on drop.
#[must_use]
pub struct ScopeGuard(u8);

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        SCOPE.store(self.0, Relaxed);
    }
}

/// Enters `scope` until the guard drops.
pub fn enter(scope: Scope) -> ScopeGuard {
    ScopeGuard(SCOPE.swap(scope.0, Relaxed))
}

/// A future whose every poll runs in `scope`.
pub struct Scoped<F> {
    scope: Scope,
    inner: Pin<Box<F>>,
}

impl<F: Future> Scoped<F> {
    /// `inner`, polled in `scope`.
    pub fn new(scope: Scope, inner: F) -> Self {
        Self {
            scope,
            inner: Box::pin(inner),
        }
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _g = enter(self.scope);
        self.inner.as_mut().poll(cx)
    }
}

/// Counts read at one moment: calls and bytes per window and scope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    calls: [[u64; SCOPES]; 2],
    bytes: [[u64; SCOPES]; 2],
    large: [[u64; SCOPES]; 2],
    dev_calls: [[u64; SCOPES]; 2],
    dev_bytes: [[u64; SCOPES]; 2],
}

impl Counts {
    /// The counters now.
    pub fn now() -> Counts {
        let mut c = Counts::default();
        for w in 0..2 {
            for s in 0..SCOPES {
                c.calls[w][s] = CALLS[w * SCOPES + s].load(Relaxed);
                c.bytes[w][s] = BYTES[w * SCOPES + s].load(Relaxed);
                c.large[w][s] = LARGE_CALLS[w * SCOPES + s].load(Relaxed);
                c.dev_calls[w][s] = DEV_CALLS[w * SCOPES + s].load(Relaxed);
                c.dev_bytes[w][s] = DEV_BYTES[w * SCOPES + s].load(Relaxed);
            }
        }
        c
    }

    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        let mut d = Counts::default();
        for w in 0..2 {
            for s in 0..SCOPES {
                d.calls[w][s] = self.calls[w][s] - earlier.calls[w][s];
                d.bytes[w][s] = self.bytes[w][s] - earlier.bytes[w][s];
                d.large[w][s] = self.large[w][s] - earlier.large[w][s];
                d.dev_calls[w][s] = self.dev_calls[w][s] - earlier.dev_calls[w][s];
                d.dev_bytes[w][s] = self.dev_bytes[w][s] - earlier.dev_bytes[w][s];
            }
        }
        d
    }

    /// (calls, bytes) in window `w`, scope `s`.
    pub fn get(&self, w: Window, s: Scope) -> (u64, u64) {
        (
            self.calls[w as usize][s.index()],
            self.bytes[w as usize][s.index()],
        )
    }

    /// Payload-sized calls (see [`set_large`]) in window `w`, scope `s`.
    pub fn large(&self, w: Window, s: Scope) -> u64 {
        self.large[w as usize][s.index()]
    }

    /// (calls, bytes) in window `w`, scope `s` that read or wrote a device buffer.
    pub fn device_buffer(&self, w: Window, s: Scope) -> (u64, u64) {
        (
            self.dev_calls[w as usize][s.index()],
            self.dev_bytes[w as usize][s.index()],
        )
    }

    /// (calls, bytes) summed over both windows for scope `s`.
    pub fn both(&self, s: Scope) -> (u64, u64) {
        let (a, b) = (self.get(Window::C2s, s), self.get(Window::S2c, s));
        (a.0 + b.0, a.1 + b.1)
    }
}

/// zcnet's copy ledger when counting last started and stopped.
static LEDGER_MARKS: Mutex<[Option<LedgerSnapshot>; 2]> = Mutex::new([None, None]);

/// App + stack calls counted so far, by length (index `SIZE_CAP`: that many bytes or more).
pub fn sizes_now() -> Vec<u64> {
    SIZES.iter().map(|c| c.load(Relaxed)).collect()
}

/// Turns counting on (and notes zcnet's copy ledger).
pub fn start() {
    LEDGER_MARKS.lock().unwrap()[0] = Some(LEDGER.snapshot());
    ENABLED.store(true, Relaxed);
}

/// Turns counting off (and notes zcnet's copy ledger), if it was on.
pub fn stop() {
    if ENABLED.swap(false, Relaxed) {
        LEDGER_MARKS.lock().unwrap()[1] = Some(LEDGER.snapshot());
    }
}

/// What zcnet's copy ledger recorded while counting was last on.
pub fn ledger_delta() -> LedgerSnapshot {
    let m = LEDGER_MARKS.lock().unwrap();
    match *m {
        [Some(a), Some(b)] => b.since(&a),
        _ => LedgerSnapshot::default(),
    }
}

/// Whether this process has exactly one thread (the counters are process-wide, so a second
/// thread copying while counting is on would be filed under the main thread's scope).
pub fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count() == 1)
        .unwrap_or(false)
}

/// Proves the interposer sees copies: a 4096-byte `copy_from_slice` must count as one call of
/// 4096 bytes, overlapping `copy_within`s as `memmove` calls with the right result. Panics
/// otherwise.
pub fn self_test() {
    use std::hint::black_box;
    assert!(!ENABLED.load(Relaxed), "self-test runs with counting off");
    let src: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 1) as u8).collect();
    let mut dst = vec![0u8; 4096];
    let n = black_box(4096usize);
    let _g = enter(Scope::of(Host::Client, Layer::App));
    set_window(Window::C2s);
    let before = Counts::now();
    start();
    dst[..n].copy_from_slice(&src[..n]);
    stop();
    let d = Counts::now().since(&before);
    let got = d.get(Window::C2s, Scope::of(Host::Client, Layer::App));
    assert_eq!(
        got,
        (1, 4096),
        "interposer self-test: a 4096-byte copy_from_slice must be one counted memcpy of 4096 bytes"
    );
    assert_eq!(dst, src, "interposed memcpy copies correctly");

    // memmove both ways over overlapping ranges.
    let mut v: Vec<u8> = (0..4096u32 + 16).map(|i| (i * 7) as u8).collect();
    let orig = v.clone();
    let before = Counts::now();
    start();
    v.copy_within(black_box(0..4096), 16); // dst above src: backward copy
    stop();
    assert_eq!(&v[16..], &orig[..4096], "memmove upwards");
    let mut w = orig.clone();
    start();
    w.copy_within(black_box(16..4096 + 16), 0); // dst below src: forward copy
    stop();
    assert_eq!(&w[..4096], &orig[16..], "memmove downwards");
    let d = Counts::now().since(&before);
    assert_eq!(
        d.get(Window::C2s, Scope::of(Host::Client, Layer::App)),
        (2, 8192),
        "interposer self-test: two 4096-byte copy_within calls must be counted"
    );

    // Device-buffer copies: into, out of, and beside a declared region.
    let mut device = vec![0u8; 8192];
    let region = device[4096..].as_mut_ptr();
    set_device_buffers(&[(region, 4096)]);
    let mut into = vec![0u8; 4096];
    let before = Counts::now();
    start();
    // SAFETY: `region` points at the last 4096 bytes of `device`, alive and borrowed by
    // nothing else while the copies run; `src` and `into` are other allocations of 4096 bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), region, black_box(100));
        std::ptr::copy_nonoverlapping(region.add(3800), into.as_mut_ptr(), black_box(200));
    }
    into[..n].copy_from_slice(&src[..n]); // beside the region: not a device-buffer copy
    black_box((&mut into, &mut device));
    stop();
    set_device_buffers(&[]);
    let d = Counts::now().since(&before);
    let scope = Scope::of(Host::Client, Layer::App);
    assert_eq!(
        (
            d.get(Window::C2s, scope),
            d.device_buffer(Window::C2s, scope)
        ),
        ((3, 4396), (2, 300)),
        "interposer self-test: copies into and out of a device buffer must be told apart"
    );
}

static FINISHED: AtomicU8 = AtomicU8::new(0);

/// Prepares a run: counting off, no application finished.
pub fn reset_run() {
    stop();
    *LEDGER_MARKS.lock().unwrap() = [None, None];
    set_device_buffers(&[]);
    FINISHED.store(0, Relaxed);
}

/// An application (client or server) is done; the second one to finish stops counting.
pub fn finish() {
    if FINISHED.fetch_add(1, Relaxed) + 1 == 2 {
        stop();
    }
}

/// The client's step before request `seq`: counting starts after `warmup` requests, and the
/// window turns to client → server.
pub fn begin_request(warmup: u64, seq: u64) {
    if seq == warmup {
        start();
    }
    set_window(Window::C2s);
}
