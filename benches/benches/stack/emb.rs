//! The embassy-net side of the stack benchmark: embassy-net 0.9.1 (on smoltcp 0.13) as its users
//! run it: two stacks, each with its `Runner` task, plus a client and a server task, on
//! embassy-executor 0.10's raw executor, on virtual time (the crate's embassy-time driver,
//! [`zcnet_benches::embassy_clock`]).
//!
//! * **The link** lends frame buffers like zcnet's wire: per direction a fixed set of
//!   1514-byte buffers allocated once per run; a TX token writes the frame into a free buffer,
//!   the receiver's RX token lends that same buffer to its stack, and the buffer is free again.
//!   No copy, no allocation per frame; checksums computed and verified in software (embassy's
//!   default capabilities), as on the other two sides.
//! * **The executor** is driven the way its own thread executor drives it, minus the condition
//!   variable: poll; if no task was woken meanwhile (the pender did not run), move virtual time
//!   to the earliest embassy-time alarm and poll again.
//! * **Per run**, everything embassy needs for `'static` (the executor, its task storages, the
//!   stack resources and socket buffers) is allocated and leaked: a `Runner` never returns, so
//!   its task and what it borrows stay alive; a full benchmark leaks a few MiB.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use embassy_executor::raw;
use embassy_net::tcp::TcpSocket;
use embassy_net::{IpEndpoint, Ipv4Address, Ipv4Cidr, Stack, StackResources, StaticConfigV4};
use zcnet_benches::embassy_clock::fire_next_alarm;

use super::{
    app_source, up_to, Api, Marks, Run, Workload, APP_CHUNK, FRAME_MTU, PORT, RX_RING, TX_RING,
};

/// Frame buffers per direction: more than the frames in flight with 16 KiB windows.
const BUFFERS: usize = 64;

const ADDR: [Ipv4Address; 2] = [Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2)];

// ---- the executor's pender -------------------------------------------------------------------

/// Set by embassy's raw executor when its run queue goes from empty to non-empty.
static PENDED: AtomicBool = AtomicBool::new(false);

/// The pender embassy's raw executor calls (`executor-thread` is off, so no other is linked): a
/// flag that the run loop reads after each poll, like a bare-metal "work pending" bit.
#[unsafe(export_name = "__pender")]
fn embassy_pender(_context: *mut ()) {
    PENDED.store(true, Ordering::Relaxed);
}

// ---- the link --------------------------------------------------------------------------------

struct Dir {
    frames: Vec<[u8; FRAME_MTU]>,
    free: Vec<usize>,
    queue: VecDeque<(usize, usize)>,
    rx_waker: Option<Waker>,
    tx_waker: Option<Waker>,
}

/// Both directions (`dirs[i]` carries what end `i` sends) and the frame count (each frame
/// counted when sent and when received, as the other sides count).
struct Link {
    dirs: [RefCell<Dir>; 2],
    frames: Cell<u64>,
}

/// One end of the link, as an embassy-net driver.
struct End {
    link: Rc<Link>,
    side: usize,
}

impl End {
    fn pair() -> (End, End) {
        let dir = || {
            RefCell::new(Dir {
                frames: vec![[0u8; FRAME_MTU]; BUFFERS],
                free: (0..BUFFERS).collect(),
                queue: VecDeque::new(),
                rx_waker: None,
                tx_waker: None,
            })
        };
        let link = Rc::new(Link {
            dirs: [dir(), dir()],
            frames: Cell::new(0),
        });
        let end = |side| End {
            link: link.clone(),
            side,
        };
        (end(0), end(1))
    }

    fn incoming(&self) -> &RefCell<Dir> {
        &self.link.dirs[1 - self.side]
    }

    fn outgoing(&self) -> &RefCell<Dir> {
        &self.link.dirs[self.side]
    }

    /// Whether a TX buffer is free, registering `cx`'s waker when none is.
    fn tx_ready(&self, cx: &Context<'_>) -> bool {
        let mut d = self.outgoing().borrow_mut();
        if d.free.is_empty() {
            d.tx_waker = Some(cx.waker().clone());
            return false;
        }
        true
    }
}

/// A received frame, lent in place; its buffer is free again when the token goes.
struct Rx<'a> {
    end: &'a End,
    idx: usize,
    len: usize,
}

impl embassy_net_driver::RxToken for Rx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, f: F) -> R {
        self.end.link.frames.set(self.end.link.frames.get() + 1);
        let mut d = self.end.incoming().borrow_mut();
        f(&mut d.frames[self.idx][..self.len])
    }
}

impl Drop for Rx<'_> {
    fn drop(&mut self) {
        let mut d = self.end.incoming().borrow_mut();
        d.free.push(self.idx);
        if let Some(w) = d.tx_waker.take() {
            w.wake();
        }
    }
}

/// The right to send one frame (a free buffer was there when it was made, and only this
/// stack takes buffers from this direction).
struct Tx<'a>(&'a End);

impl embassy_net_driver::TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut d = self.0.outgoing().borrow_mut();
        let idx = d
            .free
            .pop()
            .expect("a TX token is made only when a buffer is free");
        let r = f(&mut d.frames[idx][..len]);
        d.queue.push_back((idx, len));
        if let Some(w) = d.rx_waker.take() {
            w.wake();
        }
        drop(d);
        self.0.link.frames.set(self.0.link.frames.get() + 1);
        r
    }
}

impl embassy_net_driver::Driver for End {
    type RxToken<'a> = Rx<'a>;
    type TxToken<'a> = Tx<'a>;

    fn receive(&mut self, cx: &mut Context<'_>) -> Option<(Rx<'_>, Tx<'_>)> {
        if !self.tx_ready(cx) {
            return None;
        }
        let mut d = self.incoming().borrow_mut();
        let Some((idx, len)) = d.queue.pop_front() else {
            d.rx_waker = Some(cx.waker().clone());
            return None;
        };
        drop(d);
        Some((
            Rx {
                end: self,
                idx,
                len,
            },
            Tx(self),
        ))
    }

    fn transmit(&mut self, cx: &mut Context<'_>) -> Option<Tx<'_>> {
        self.tx_ready(cx).then_some(Tx(self))
    }

    fn link_state(&mut self, _cx: &mut Context<'_>) -> embassy_net_driver::LinkState {
        embassy_net_driver::LinkState::Up
    }

    fn capabilities(&self) -> embassy_net_driver::Capabilities {
        let mut c = embassy_net_driver::Capabilities::default();
        c.max_transmission_unit = FRAME_MTU;
        c // checksums: computed and verified in software (the default)
    }

    fn hardware_address(&self) -> embassy_net_driver::HardwareAddress {
        embassy_net_driver::HardwareAddress::Ethernet([0x02, 0, 0, 0, 0, self.side as u8 + 1])
    }
}

// ---- tasks -------------------------------------------------------------------------------------

/// Counts the polls of the future it wraps (the runners' polls: the stacks' work units).
struct CountPolls<F> {
    inner: Pin<Box<F>>,
    polls: Rc<Cell<u64>>,
}

impl<F: Future> Future for CountPolls<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.polls.set(self.polls.get() + 1);
        self.inner.as_mut().poll(cx)
    }
}

/// Spawns `f` on `exec` in a task storage of its own (leaked: see the module docs).
fn spawn<F: Future + 'static>(exec: &'static raw::Executor, f: F) {
    let storage: &'static raw::TaskStorage<F> = Box::leak(Box::new(raw::TaskStorage::new()));
    let token = storage.spawn(move || f).expect("fresh storage");
    exec.spawner().spawn(token);
}

/// What one run shares between its tasks and the loop driving them.
struct Shared {
    polls: Rc<Cell<u64>>,
    link: Rc<Link>,
    /// The marks at the start and the end of the timed part, once taken.
    start: Cell<Option<Marks>>,
    end: Cell<Option<Marks>>,
}

impl Shared {
    fn marks(&self) -> Marks {
        Marks::take(self.polls.get(), self.link.frames.get())
    }
}

/// One embassy-net run: fresh stacks and executor, connection set up untimed, then the timed
/// work. Never inlined (see `zc_run`).
#[inline(never)]
pub(super) fn emb_run(work: Workload, api: Api) -> Run {
    let exec: &'static raw::Executor =
        Box::leak(Box::new(raw::Executor::new(std::ptr::null_mut())));
    let (a, b) = End::pair();
    let shared = Rc::new(Shared {
        polls: Rc::new(Cell::new(0)),
        link: a.link.clone(),
        start: Cell::new(None),
        end: Cell::new(None),
    });
    let mut stacks = Vec::new();
    for (i, end) in [a, b].into_iter().enumerate() {
        let config = embassy_net::Config::ipv4_static(StaticConfigV4 {
            address: Ipv4Cidr::new(ADDR[i], 24),
            gateway: None,
            dns_servers: Default::default(),
        });
        let resources: &'static mut StackResources<1> = Box::leak(Box::new(StackResources::new()));
        let (stack, mut runner) = embassy_net::new(end, config, resources, 0x5eed + i as u64);
        stacks.push(stack);
        let polls = shared.polls.clone();
        spawn(
            exec,
            CountPolls {
                inner: Box::pin(async move { runner.run().await }),
                polls,
            },
        );
    }
    spawn(exec, server(stacks[1], work, api, shared.clone()));
    spawn(exec, client(stacks[0], work, api, shared.clone()));
    loop {
        PENDED.store(false, Ordering::Relaxed);
        // SAFETY: only this thread polls this executor, never re-entrantly (the pender only
        // sets a flag).
        unsafe { exec.poll() };
        if let (Some(start), Some(end)) = (shared.start.get(), shared.end.get()) {
            return end.run_since(&start);
        }
        if !PENDED.load(Ordering::Relaxed) {
            assert!(
                fire_next_alarm(),
                "embassy-net run stalled: no task ready, no alarm"
            );
        }
    }
}

/// A socket with the benchmark's rings (leaked with the run).
fn socket(stack: Stack<'static>, work: Workload) -> TcpSocket<'static> {
    let rx = Box::leak(vec![0u8; RX_RING].into_boxed_slice());
    let tx = Box::leak(vec![0u8; TX_RING].into_boxed_slice());
    let mut s = TcpSocket::new(stack, rx, tx);
    s.set_nagle_enabled(!matches!(work, Workload::ReqResp(..)));
    s
}

async fn server(stack: Stack<'static>, work: Workload, api: Api, shared: Rc<Shared>) {
    let mut s = socket(stack, work);
    s.accept(PORT).await.expect("accept");
    let mut buf = vec![0u8; APP_CHUNK];
    match work {
        Workload::Bulk(total) => {
            drain(&mut s, total, &mut buf, api).await;
            shared.end.set(Some(shared.marks()));
        }
        Workload::ReqResp(n, msg) => {
            let resp = app_source();
            for _ in 0..n {
                read_exact(&mut s, &mut buf[..msg], api).await;
                write_all(&mut s, &resp[..msg], api).await;
            }
            s.flush().await.expect("flush");
        }
    }
}

async fn client(stack: Stack<'static>, work: Workload, api: Api, shared: Rc<Shared>) {
    let mut c = socket(stack, work);
    // Let the server task run (and listen) before the SYN goes out.
    embassy_time::Timer::after_millis(1).await;
    c.connect(IpEndpoint::new(ADDR[1].into(), PORT))
        .await
        .expect("connect");
    let src = app_source();
    match work {
        Workload::Bulk(total) => {
            shared.start.set(Some(shared.marks()));
            let mut left = total;
            while left > 0 {
                let k = left.min(APP_CHUNK as u64) as usize;
                write_all(&mut c, &src[..k], api).await;
                left -= k as u64;
            }
            c.flush().await.expect("flush");
        }
        Workload::ReqResp(n, msg) => {
            let mut buf = vec![0u8; msg];
            shared.start.set(Some(shared.marks()));
            for _ in 0..n {
                write_all(&mut c, &src[..msg], api).await;
                read_exact(&mut c, &mut buf, api).await;
            }
            shared.end.set(Some(shared.marks()));
        }
    }
}

/// Reads what is there (waiting for at least one byte) with `api`; the number of bytes.
async fn read_some(s: &mut TcpSocket<'_>, buf: &mut [u8], api: Api) -> usize {
    match api {
        Api::Copy => s.read(buf).await.expect("read"),
        Api::InPlace => {
            let want = buf.len();
            s.read_with(|d| up_to(want, d.len()))
                .await
                .expect("read_with")
        }
    }
}

/// Reads and counts `total` bytes (the bulk server).
async fn drain(s: &mut TcpSocket<'_>, total: u64, buf: &mut [u8], api: Api) {
    let mut got = 0u64;
    while got < total {
        let n = read_some(s, buf, api).await;
        assert!(n > 0, "end of stream after {got} of {total} bytes");
        got += n as u64;
    }
}

async fn read_exact(s: &mut TcpSocket<'_>, buf: &mut [u8], api: Api) {
    let mut got = 0;
    while got < buf.len() {
        let n = read_some(s, &mut buf[got..], api).await;
        assert!(n > 0, "end of stream");
        got += n;
    }
}

async fn write_all(s: &mut TcpSocket<'_>, src: &[u8], api: Api) {
    let mut off = 0;
    while off < src.len() {
        off += match api {
            Api::Copy => s.write(&src[off..]).await.expect("write"),
            Api::InPlace => {
                let left = src.len() - off;
                s.write_with(|space| up_to(left, space.len()))
                    .await
                    .expect("write_with")
            }
        };
    }
}
