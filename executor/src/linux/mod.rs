//! The Linux platform (feature `std`): a monotonic clock, an eventfd for signals, and an epoll
//! reactor, all served by the executor's idle wait — one `epoll_wait` whose timeout is the next
//! timer deadline. No helper threads.
//!
//! ```no_run
//! use zcnet_executor::linux::LinuxPlatform;
//! use zcnet_executor::Executor;
//!
//! let platform = LinuxPlatform::leak()?;
//! let executor = Executor::leak(platform);
//! # let fd = 0;
//! let io = platform.register(fd)?; // a non-blocking fd, e.g. a TAP device
//! executor.block_on(async {
//!     let n = io.read_with(|| {
//!         let mut buf = [0u8; 2048];
//!         // SAFETY-free example: `read` through libc, returning io::Result
//!         let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
//!         if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(r as usize) }
//!     }).await?;
//!     Ok::<_, std::io::Error>(n)
//! })?;
//! # Ok::<(), std::io::Error>(())
//! ```

extern crate std;

use std::boxed::Box;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::vec::Vec;

use crate::platform::{Instant, Platform};

/// epoll data of the eventfd; registrations use `index + 1` in the low 32 bits.
const SIGNAL_TOKEN: u64 = 0;
const READABLE: u64 = 0b01;
const WRITABLE: u64 = 0b10;
const TICK_ONE: u64 = 0b100;
const MAX_EVENTS: usize = 64;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Readiness of one registered fd, shared between the reactor and the futures awaiting it.
#[derive(Debug, Default)]
struct IoState {
    /// `tick << 2 | WRITABLE | READABLE`; the tick counts readiness events, so a `clear` based
    /// on an old event cannot erase a newer one.
    readiness: AtomicU64,
    read_waker: Mutex<Option<Waker>>,
    write_waker: Mutex<Option<Waker>>,
}

/// A readiness observation, to be passed back to `clear_*` when the operation hit `WouldBlock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyEvent {
    tick: u64,
}

#[derive(Debug, Default)]
struct Registry {
    /// Slot `i` is registered with epoll data `(generation << 32) | (i + 1)`.
    slots: Vec<Option<(u32, Arc<IoState>)>>,
    generation: u32,
}

/// The Linux [`Platform`] (see the module docs).
#[derive(Debug)]
pub struct LinuxPlatform {
    epfd: RawFd,
    eventfd: RawFd,
    registry: Mutex<Registry>,
}

impl LinuxPlatform {
    /// Creates the epoll instance and the eventfd.
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscalls with valid flags; the fds are owned by the returned value.
        let epfd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: as above.
        let eventfd = match cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })
        {
            Ok(fd) => fd,
            Err(e) => {
                // SAFETY: `epfd` is ours and not used afterwards.
                unsafe { libc::close(epfd) };
                return Err(e);
            }
        };
        let p = Self {
            epfd,
            eventfd,
            registry: Mutex::new(Registry::default()),
        };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: SIGNAL_TOKEN,
        };
        // SAFETY: both fds are valid; `ev` outlives the call.
        cvt(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, eventfd, &mut ev) })?;
        Ok(p)
    }

    /// A platform on the heap, leaked so an executor can use it for `'static`.
    pub fn leak() -> io::Result<&'static LinuxPlatform> {
        Ok(Box::leak(Box::new(Self::new()?)))
    }

    /// Registers a non-blocking `fd` for edge-triggered readiness. The registration ends when
    /// the returned value is dropped (the fd itself stays open; the caller owns it and must keep
    /// it open while registered).
    pub fn register(&'static self, fd: RawFd) -> io::Result<Registration> {
        let state = Arc::new(IoState::default());
        let token = {
            let mut reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
            reg.generation = reg.generation.wrapping_add(1);
            let generation = reg.generation;
            let index = match reg.slots.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    reg.slots.push(None);
                    reg.slots.len() - 1
                }
            };
            reg.slots[index] = Some((generation, state.clone()));
            (u64::from(generation) << 32) | (index as u64 + 1)
        };
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: token,
        };
        // SAFETY: `epfd` is ours; `fd` is the caller's open descriptor; `ev` outlives the call.
        if let Err(e) = cvt(unsafe { libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) })
        {
            self.forget(token);
            return Err(e);
        }
        Ok(Registration {
            platform: self,
            fd,
            token,
            state,
        })
    }

    fn forget(&self, token: u64) {
        let index = (token & 0xffff_ffff) as usize - 1;
        let mut reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        reg.slots[index] = None;
    }

    fn dispatch(&self, token: u64, events: u32) {
        let index = (token & 0xffff_ffff) as usize - 1;
        let generation = (token >> 32) as u32;
        let state = {
            let reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
            match reg.slots.get(index) {
                Some(Some((g, s))) if *g == generation => s.clone(),
                _ => return, // deregistered since epoll reported it
            }
        };
        let mut bits = 0;
        let hup = (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32;
        if events & (libc::EPOLLIN as u32 | hup) != 0 {
            bits |= READABLE;
        }
        if events & (libc::EPOLLOUT as u32 | hup) != 0 {
            bits |= WRITABLE;
        }
        state.readiness.fetch_add(TICK_ONE, SeqCst);
        state.readiness.fetch_or(bits, SeqCst);
        if bits & READABLE != 0 {
            if let Some(w) = state
                .read_waker
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                w.wake();
            }
        }
        if bits & WRITABLE != 0 {
            if let Some(w) = state
                .write_waker
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                w.wake();
            }
        }
    }
}

impl Drop for LinuxPlatform {
    fn drop(&mut self) {
        // SAFETY: both fds are ours and not used after this.
        unsafe {
            libc::close(self.eventfd);
            libc::close(self.epfd);
        }
    }
}

impl Platform for LinuxPlatform {
    fn now(&self) -> Instant {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: CLOCK_MONOTONIC always exists; `ts` is a valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        Instant::from_nanos(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    fn wait(&self, deadline: Option<Instant>) {
        let timeout_ms: libc::c_int = match deadline {
            None => -1,
            Some(d) => {
                let nanos = d.saturating_duration_since(self.now()).as_nanos();
                // Round up: waking before the deadline would only make the executor wait again.
                nanos.div_ceil(1_000_000).min(libc::c_int::MAX as u128) as libc::c_int
            }
        };
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS];
        // SAFETY: `events` has room for MAX_EVENTS entries; `epfd` is ours.
        let n = unsafe {
            libc::epoll_wait(
                self.epfd,
                events.as_mut_ptr(),
                MAX_EVENTS as libc::c_int,
                timeout_ms,
            )
        };
        if n <= 0 {
            return; // timeout, or EINTR: the executor re-checks its work either way
        }
        for ev in &events[..n as usize] {
            let (token, bits) = (ev.u64, ev.events);
            if token == SIGNAL_TOKEN {
                let mut buf = 0u64;
                // SAFETY: reading 8 bytes into a u64 from our non-blocking eventfd (resets it).
                unsafe { libc::read(self.eventfd, (&mut buf as *mut u64).cast(), 8) };
            } else {
                self.dispatch(token, bits);
            }
        }
    }

    fn signal(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes from a u64 to our eventfd. A full counter (EAGAIN) still leaves
        // it readable, which is all a signal needs.
        unsafe { libc::write(self.eventfd, (&one as *const u64).cast(), 8) };
    }
}

/// An fd registered with a [`LinuxPlatform`]'s epoll, with async readiness.
#[derive(Debug)]
pub struct Registration {
    platform: &'static LinuxPlatform,
    fd: RawFd,
    token: u64,
    state: Arc<IoState>,
}

impl Registration {
    /// The registered fd.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    fn poll_ready(&self, cx: &mut Context<'_>, bit: u64) -> Poll<ReadyEvent> {
        let cur = self.state.readiness.load(SeqCst);
        if cur & bit != 0 {
            return Poll::Ready(ReadyEvent { tick: cur >> 2 });
        }
        let slot = if bit == READABLE {
            &self.state.read_waker
        } else {
            &self.state.write_waker
        };
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
        // Re-check after registering: an event between the first check and the registration
        // set the bit before looking for our waker.
        let cur = self.state.readiness.load(SeqCst);
        if cur & bit != 0 {
            return Poll::Ready(ReadyEvent { tick: cur >> 2 });
        }
        Poll::Pending
    }

    /// Ready when epoll last reported the fd readable (and no `clear_readable` since).
    pub fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<ReadyEvent> {
        self.poll_ready(cx, READABLE)
    }

    /// Ready when epoll last reported the fd writable (and no `clear_writable` since).
    pub fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<ReadyEvent> {
        self.poll_ready(cx, WRITABLE)
    }

    fn clear(&self, ev: ReadyEvent, bit: u64) {
        let _ = self.state.readiness.fetch_update(SeqCst, SeqCst, |cur| {
            (cur >> 2 == ev.tick).then_some(cur & !bit)
        });
    }

    /// The read that followed `ev` returned `WouldBlock`: forget readability, unless a newer
    /// event arrived meanwhile (then the next `readable` is ready at once).
    pub fn clear_readable(&self, ev: ReadyEvent) {
        self.clear(ev, READABLE);
    }

    /// Like [`clear_readable`](Self::clear_readable), for writability.
    pub fn clear_writable(&self, ev: ReadyEvent) {
        self.clear(ev, WRITABLE);
    }

    /// Waits until the fd is readable.
    pub async fn readable(&self) -> ReadyEvent {
        core::future::poll_fn(|cx| self.poll_readable(cx)).await
    }

    /// Waits until the fd is writable.
    pub async fn writable(&self) -> ReadyEvent {
        core::future::poll_fn(|cx| self.poll_writable(cx)).await
    }

    /// Runs `op` when the fd is readable, again after every `WouldBlock`, until it returns
    /// anything else.
    pub async fn read_with<R>(&self, mut op: impl FnMut() -> io::Result<R>) -> io::Result<R> {
        loop {
            let ev = self.readable().await;
            match op() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.clear_readable(ev),
                r => return r,
            }
        }
    }

    /// Runs `op` when the fd is writable, again after every `WouldBlock`, until it returns
    /// anything else.
    pub async fn write_with<R>(&self, mut op: impl FnMut() -> io::Result<R>) -> io::Result<R> {
        loop {
            let ev = self.writable().await;
            match op() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.clear_writable(ev),
                r => return r,
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: `epfd` is the platform's; the fd is still open (the caller's contract).
        unsafe {
            libc::epoll_ctl(
                self.platform.epfd,
                libc::EPOLL_CTL_DEL,
                self.fd,
                core::ptr::null_mut(),
            )
        };
        self.platform.forget(self.token);
    }
}

std::thread_local! {
    static LOCAL: &'static crate::Executor = crate::Executor::leak(
        LinuxPlatform::leak().expect("zcnet-executor: cannot create epoll/eventfd"),
    );
}

/// Runs `future` on this thread's executor (created on first use, with a [`LinuxPlatform`]).
/// Panics if called from inside that executor.
pub fn block_on<F: core::future::Future>(future: F) -> F::Output {
    LOCAL.with(|exec| exec.block_on(future))
}

/// This thread's executor (the one [`block_on`] uses).
pub fn local_executor() -> &'static crate::Executor {
    LOCAL.with(|exec| *exec)
}
