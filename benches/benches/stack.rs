//! Stack benchmark: TCP bulk throughput and 1 KiB / 1 KiB request-response rate, zcnet beside
//! plain smoltcp 0.14 and beside embassy-net 0.9.1, measured in the same run and reported as
//! ratios.
//!
//! ```text
//! cargo bench -p zcnet-benches --bench stack            # full run (BENCHMARKS.md)
//! cargo bench -p zcnet-benches --bench stack -- --quick # CI smoke run
//! ```
//!
//! # Workloads
//!
//! * **bulk**: once the connection is established, the client sends `N` MiB and the server reads
//!   and counts them; the clock stops when the server has counted the last byte (connection
//!   setup and teardown are not timed). Reported as MB/s (10^6 bytes per second).
//! * **req/resp**: the client writes a 1 KiB request, the server reads all of it and writes a
//!   1 KiB response, the client reads all of it; repeated, reported as round trips per second.
//!   Nagle is off on both sockets (as a request/response protocol would set it).
//!
//! Each workload runs with two APIs:
//!
//! * **copy**: the application moves bytes through its own buffers (`read` / `write_all`
//!   for zcnet; for smoltcp the closure forms `recv(|buf| ..)` / `send(|buf| ..)` with the same
//!   one copy inside, i.e. what `recv_slice` / `send_slice` do). Both sides copy through
//!   `zcnet_buffer::ledger::copy`, so the copy ledger counts them the same way.
//! * **in place**: the application works in the socket ring itself (zcnet `read_with` /
//!   `write_with`, smoltcp `recv(|buf| ..)` / `send(|buf| ..)`): the reader consumes and counts
//!   the bytes, the writer claims free ring space as if it had produced the payload there (it
//!   writes nothing: producing the payload is the application's cost, the same on both sides).
//!
//! # The two sides, and why the comparison is fair
//!
//! * **zcnet**: two stacks over the in-memory wire ([`zcnet_tests::net::pair_one_thread_with`],
//!   no faults, 1514-byte frames, [`Delivery::Lend`]), each with its ingress and egress tasks,
//!   and a client task and a server task, all on one executor driven by `block_on` on this
//!   thread. Both ends of the wire run on this thread, so it is the one-thread wire: its
//!   directions sit in plain cells, not behind a spin lock, as smoltcp's `Loopback` (a
//!   `VecDeque`) and the embassy-net pair's link (`RefCell`s) keep theirs.
//!   The wire lends the sender's TX slot to the receiver as its RX frame (`InFlight::loop_back`,
//!   no copy) when the sender lets go of it: ACKs and other frames the stack does not keep.
//!   A TCP data segment stays with its sender until acknowledged (a retained frame), so the wire
//!   copies it into a slot of the receiver's pool, as a NIC's DMA would; the ledger does not
//!   count that copy (the device's carriage, the same on every stack). smoltcp's `Loopback`
//!   has its sender write every frame into a freshly allocated `Vec` and hands that `Vec` to
//!   the receiving side.
//! * **smoltcp**: one `Interface` on smoltcp's own `phy::Loopback` (`Medium::Ethernet`), both
//!   sockets in one `SocketSet`, driven the way smoltcp's examples drive it: call
//!   `iface.poll()`, service the sockets, and when nothing moved, "wait" `poll_delay`. One
//!   interface, not two: `Loopback` delivers a frame back to the interface that sent it, so two
//!   interfaces would need a device of our own; and each segment still goes through one
//!   egress pass (the sender's) and one ingress pass (the receiver's), the same protocol work
//!   as zcnet's two stacks. The loopback device is wrapped only to give it zcnet's wire
//!   capabilities: a 1514-byte MTU (`Loopback` says 65535, which would let smoltcp send 64 KiB
//!   segments) and software checksums on both ways (`Loopback` says "ignored", while zcnet's
//!   wire offers no offload, so zcnet's smoltcp computes and verifies every checksum).
//! * **embassy-net** (module `emb`): the async peer users pick today, as they run it: two
//!   embassy-net stacks, each with its `Runner` task, and a client and a server task on
//!   embassy-executor 0.10's raw executor, over an in-memory link that lends its frame buffers
//!   (the TX token's buffer is the receiver's RX buffer: no copy, no allocation per frame),
//!   virtual time through the crate's embassy-time driver. embassy-net runs its own smoltcp
//!   0.13 (the only one it supports), so this pair is not the same protocol code; its sockets
//!   have the same 16 KiB rings, Nagle off for req/resp, and the same two APIs (`read` /
//!   `write`, `read_with` / `write_with`). Its copies happen inside its socket calls, where
//!   the copy ledger cannot see them: its copy counts are not reported.
//! * Same smoltcp build for zcnet and plain smoltcp: cargo builds one smoltcp for both sides (features unify; the
//!   package's smoltcp dependency adds only `alloc` and, for the TAP benchmark, `std` with
//!   `phy-tuntap_interface`, none of which changes the protocol code either side runs).
//! * Same socket buffers: 16 KiB receive and 16 KiB send rings on every socket (the size the
//!   stack's TCP tests use; zcnet has no default, the caller chooses).
//! * Same clock: **virtual time** on both sides. zcnet runs on
//!   [`VirtualClock`](zcnet_benches::VirtualClock) (the executor jumps the clock to the next
//!   timer deadline only when no task is ready); the smoltcp loop keeps its own `Instant` and
//!   jumps it by `poll_delay` only when a pass moved nothing. With a perfect wire, timers matter
//!   only for delayed ACKs; a real clock would add a `clock_gettime` per run on one side and a
//!   syscall-free `Instant` on the other, and on this shared 2-core machine a descheduled run
//!   could even fire a retransmission timer. Virtual time removes both effects; the throughput
//!   figures are still wall-clock time (`std::time::Instant`) around the timed part.
//! * Same socket table: smoltcp walks every slot of a socket set, empty or not, on every
//!   egress pass and every `poll_at`. The plain smoltcp side uses a set that grows to its two
//!   sockets (what smoltcp's examples do); each zcnet stack gets a table of exactly the one
//!   socket it uses ([`ZC_SOCKETS`], via [`zcnet_tests::net::pair_one_thread_with`]), so both sides walk
//!   two sockets per round of egress work.
//! * Interleaved: zcnet, smoltcp and embassy-net alternate run by run (A B C A B C ..); every
//!   figure is a median.
//!   Each run builds fresh stacks (zcnet) or a fresh interface (smoltcp), untimed. The ratio is
//!   the median of the run-by-run ratios (zcnet's run `i` over smoltcp's run `i`, which ran
//!   right after it), shown with their range: the shared machine has slow and fast phases of
//!   a few seconds, and a pair of back-to-back runs shares its phase where the two sides'
//!   medians need not.
//!
//! `ZCNET_STACK_ONLY=bulk` or `ZCNET_STACK_ONLY=rr` runs one workload alone (for profilers:
//! `zc_run` and `smol_run` are never inlined, so `valgrind --tool=callgrind
//! --toggle-collect='*block_on*'` collects zcnet's connection alone, setup excluded), and
//! `ZCNET_STACK_SIDE=zcnet`, `ZCNET_STACK_SIDE=smoltcp` or `ZCNET_STACK_SIDE=embassy` runs one
//! side alone and prints its
//! median rate without ratios (for a sampling profiler such as `perf record -e cpu-clock`).
//! `ZCNET_STACK_TIMESTAMPS=0` runs zcnet without TCP timestamps (plain smoltcp and embassy-net
//! run without them). `ZCNET_STACK_MSG=<bytes>` (1 to 65536) changes the request and response size of req/resp
//! from 1 KiB: a gap that stays the same in nanoseconds per round trip from 16 bytes to 1 KiB
//! is per-packet cost (scheduling, the device, smoltcp's bookkeeping), not per-byte cost
//! (copies, checksums, caches).
//!
//! # Per-operation costs (per request, or per MiB for bulk)
//!
//! * **polls**: zcnet: ingress + egress task polls of both stacks (`Stack::stats()`); smoltcp:
//!   calls of `iface.poll()` (each does ingress and egress).
//! * **frames**: frames sent plus frames received (each frame counts twice, once each way), from
//!   `Stack::stats()` and from the loopback wrapper.
//! * **copies**: calls and bytes recorded in the copy ledger (zcnet's socket<->app copies; for
//!   smoltcp the same copies made by the benchmark's application code). smoltcp's own copies
//!   (segment into the receive ring, send ring into the frame) are the same on both sides and
//!   not in the ledger; neither is the in-memory wire's carriage of frames (see BENCHMARKS.md).
//!   Counted in one extra run per side and column, made before the timed runs (it doubles as a
//!   warm-up); the timed runs pause the ledger ([`CopyLedger::set_counting`]) on both sides,
//!   because its two locked additions per recorded copy are instrumentation, not data path,
//!   and zcnet records more sites (it also records smoltcp's ring copies) than the smoltcp
//!   side's application does.
//!
//! [`CopyLedger::set_counting`]: zcnet_buffer::ledger::CopyLedger::set_counting
//! * **allocs**: heap allocations (a counting global allocator around `System`): zcnet's wire
//!   carries frames in pool slots (none per frame), smoltcp's `Loopback` allocates one `Vec` per
//!   frame.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use smoltcp::iface::{
    Config as SmolConfig, Interface, PollResult, SocketHandle, SocketSet, SocketStorage,
};
use smoltcp::phy::{ChecksumCapabilities, Device, DeviceCapabilities, Loopback, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration as SmolDuration, Instant as SmolInstant};
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, IpEndpoint as SmolEndpoint};
use zcnet_benches::{median, Mode, Table, VirtualClock};
use zcnet_buffer::ledger::{self, CopySite, LedgerSnapshot, LEDGER};
use zcnet_executor::time::sleep;
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::{IpEndpoint, Stack, StackStats};
use zcnet_tests::net::{pair_one_thread_with, ADDR};

/// Socket slots per zcnet stack: the one socket each side uses (see "Same socket table").
const ZC_SOCKETS: usize = 1;
use zcnet_tests::wire::{Delivery, Faults};

#[path = "stack/emb.rs"]
mod emb;

// ---- counting allocator -------------------------------------------------------------------

/// `System`, counting allocations (and reallocations) for the allocs-per-operation column.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees are ours; the counter is a relaxed atomic with no effect on the allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: as in `dealloc`; the caller upholds `realloc`'s size contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

// ---- shared parameters ----------------------------------------------------------------------

/// Socket ring sizes, the same on every socket of both sides.
const RX_RING: usize = 16 * 1024;
const TX_RING: usize = 16 * 1024;
/// Request and response size unless `ZCNET_STACK_MSG` says otherwise.
const MSG: usize = 1024;
/// The application buffer the copying API reads into / writes from.
const APP_CHUNK: usize = 64 * 1024;
/// Frame pool slots per zcnet stack.
const SLOTS: usize = 256;
/// The wire's largest frame (zcnet's `Faults::default().mtu`), given to smoltcp's loopback too.
const FRAME_MTU: usize = 1514;
const PORT: u16 = 7300;
const MIB: u64 = 1024 * 1024;

/// Which socket API the application uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    Copy,
    InPlace,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::Copy => "copy",
            Api::InPlace => "in place",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    /// Client sends this many bytes.
    Bulk(u64),
    /// This many round trips of a request and a response of this many bytes each.
    ReqResp(u64, usize),
}

/// What one run measured: wall time of the timed part and what happened during it.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    elapsed: Duration,
    polls: u64,
    frames: u64,
    copy_calls: u64,
    copy_bytes: u64,
    allocs: u64,
}

/// Counters read at the start and at the end of the timed part.
#[derive(Clone, Copy)]
struct Marks {
    at: Instant,
    polls: u64,
    frames: u64,
    ledger: LedgerSnapshot,
    allocs: u64,
}

impl Marks {
    fn take(polls: u64, frames: u64) -> Self {
        Self {
            at: Instant::now(),
            polls,
            frames,
            ledger: LEDGER.snapshot(),
            allocs: ALLOCS.load(Relaxed),
        }
    }

    fn run_since(&self, start: &Marks) -> Run {
        let d = self.ledger.since(&start.ledger);
        let sites = [CopySite::SocketToApp, CopySite::AppToSocket];
        Run {
            elapsed: self.at - start.at,
            polls: self.polls - start.polls,
            frames: self.frames - start.frames,
            copy_calls: sites.iter().map(|&s| d.calls(s)).sum(),
            copy_bytes: sites.iter().map(|&s| d.bytes(s)).sum(),
            allocs: self.allocs - start.allocs,
        }
    }
}

/// What an in-place reader or writer takes of a `len`-byte slice when it wants `want` bytes:
/// `(consumed, returned)`, as `read_with` / `write_with` closures answer on every side.
fn up_to(want: usize, len: usize) -> (usize, usize) {
    let k = len.min(want);
    (k, k)
}

/// The application's source data for the copying writers.
fn app_source() -> Vec<u8> {
    (0..APP_CHUNK).map(|i| (i * 7 + 3) as u8).collect()
}

// ---- zcnet ----------------------------------------------------------------------------------

fn zc_counts(stacks: [Stack; 2]) -> (u64, u64) {
    let s: [StackStats; 2] = [stacks[0].stats(), stacks[1].stats()];
    let polls = s[0].polls() + s[1].polls();
    let frames = s[0].frames_in + s[0].frames_out + s[1].frames_in + s[1].frames_out;
    (polls, frames)
}

fn zc_marks(stacks: [Stack; 2]) -> Marks {
    let (polls, frames) = zc_counts(stacks);
    Marks::take(polls, frames)
}

fn zc_buffers() -> TcpBuffers {
    TcpBuffers::with_capacity(RX_RING, TX_RING)
}

/// A zcnet socket with the benchmark's rings; TCP timestamps as zcnet's default (on) unless
/// `ZCNET_STACK_TIMESTAMPS=0` (to measure what they cost; plain smoltcp and embassy-net run
/// without them).
fn zc_socket(stack: Stack) -> TcpSocket {
    let mut s = TcpSocket::new(stack, zc_buffers()).expect("socket");
    if std::env::var_os("ZCNET_STACK_TIMESTAMPS").is_some_and(|v| v == "0") {
        s.set_timestamps(false);
    }
    s
}

/// The zcnet server: accepts, then for bulk reads until `total` bytes are in, for req/resp
/// answers `n` requests. Returns the marks taken when its part of the timed work ended.
async fn zc_server(b: Stack, stacks: [Stack; 2], work: Workload, api: Api) -> Marks {
    let mut s = zc_socket(b);
    s.accept(PORT).await.expect("accept");
    let mut buf = vec![0u8; APP_CHUNK];
    match work {
        Workload::Bulk(total) => {
            let mut got = 0u64;
            while got < total {
                let n = match api {
                    Api::Copy => s.read(&mut buf).await.expect("read"),
                    Api::InPlace => s
                        .read_with(|d| (d.len(), d.len()))
                        .await
                        .expect("read_with")
                        .unwrap_or(0),
                };
                assert!(n > 0, "end of stream after {got} of {total} bytes");
                got += n as u64;
            }
            zc_marks(stacks)
        }
        Workload::ReqResp(n, msg) => {
            s.set_nodelay(true);
            let resp = app_source();
            for _ in 0..n {
                zc_read_exact(&mut s, &mut buf[..msg], api).await;
                zc_write_all(&mut s, &resp[..msg], api).await;
            }
            s.flush().await.expect("flush");
            zc_marks(stacks)
        }
    }
}

async fn zc_read_exact(s: &mut TcpSocket, buf: &mut [u8], api: Api) {
    let mut got = 0;
    while got < buf.len() {
        let n = match api {
            Api::Copy => s.read(&mut buf[got..]).await.expect("read"),
            Api::InPlace => {
                let want = buf.len() - got;
                s.read_with(|d| up_to(want, d.len()))
                    .await
                    .expect("read_with")
                    .unwrap_or(0)
            }
        };
        assert!(n > 0, "end of stream");
        got += n;
    }
}

async fn zc_write_all(s: &mut TcpSocket, src: &[u8], api: Api) {
    match api {
        Api::Copy => s.write_all(src).await.expect("write"),
        Api::InPlace => {
            let mut left = src.len();
            while left > 0 {
                let n = s
                    .write_with(|space| up_to(left, space.len()))
                    .await
                    .expect("write_with");
                left -= n;
            }
        }
    }
}

/// One zcnet run: fresh stacks, connection set up untimed, then the timed work. Never inlined,
/// so a profiler can attribute (or collect) one side alone.
#[inline(never)]
fn zc_run(work: Workload, api: Api) -> Run {
    let exec = Executor::leak(VirtualClock::leak());
    let p = pair_one_thread_with::<ZC_SOCKETS>(
        exec,
        Faults::default(),
        Delivery::Lend,
        SLOTS,
        |_, _| {},
    );
    let stacks = p.stacks;
    let [a, b] = stacks;
    let server = exec.local_spawner().spawn(zc_server(b, stacks, work, api));
    exec.block_on(async move {
        let mut c = zc_socket(a);
        // Let the server task run (and listen) before the SYN goes out.
        sleep(Duration::from_millis(1)).await;
        c.connect(IpEndpoint::new(ADDR[1].into(), PORT))
            .await
            .expect("connect");
        let src = app_source();
        let start;
        match work {
            Workload::Bulk(total) => {
                start = zc_marks(stacks);
                let mut left = total;
                while left > 0 {
                    let k = left.min(APP_CHUNK as u64) as usize;
                    zc_write_all(&mut c, &src[..k], api).await;
                    left -= k as u64;
                }
            }
            Workload::ReqResp(n, msg) => {
                c.set_nodelay(true);
                let mut buf = vec![0u8; msg];
                start = zc_marks(stacks);
                for _ in 0..n {
                    zc_write_all(&mut c, &src[..msg], api).await;
                    zc_read_exact(&mut c, &mut buf, api).await;
                }
            }
        }
        let end = match work {
            Workload::Bulk(_) => server.await,
            // The client's last read is the end of the timed part; the server's own end
            // (its last response acknowledged) comes after.
            Workload::ReqResp(..) => {
                let end = zc_marks(stacks);
                let _ = server.await;
                end
            }
        };
        end.run_since(&start)
    })
}

// ---- plain smoltcp ------------------------------------------------------------------------

/// smoltcp's `Loopback` with the wire's capabilities (1514-byte frames, software checksums),
/// counting frames each way.
struct WireLoopback {
    inner: Loopback,
    frames: Cell<u64>,
}

/// A loopback TX token that counts the frame when smoltcp fills it.
struct CountedTx<'a> {
    inner: <Loopback as Device>::TxToken<'a>,
    frames: &'a Cell<u64>,
}

impl smoltcp::phy::TxToken for CountedTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        self.frames.set(self.frames.get() + 1);
        self.inner.consume(len, f)
    }
}

impl Device for WireLoopback {
    type RxToken<'a>
        = <Loopback as Device>::RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = CountedTx<'a>
    where
        Self: 'a;

    fn receive(&mut self, now: SmolInstant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let (rx, tx) = self.inner.receive(now)?;
        self.frames.set(self.frames.get() + 1);
        Some((
            rx,
            CountedTx {
                inner: tx,
                frames: &self.frames,
            },
        ))
    }

    fn transmit(&mut self, now: SmolInstant) -> Option<Self::TxToken<'_>> {
        Some(CountedTx {
            inner: self.inner.transmit(now)?,
            frames: &self.frames,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = self.inner.capabilities();
        c.max_transmission_unit = FRAME_MTU;
        c.checksum = ChecksumCapabilities::default(); // compute and verify everything
        c
    }
}

/// One interface, its loopback device, both sockets, and the loop's virtual clock.
struct Smol {
    iface: Interface,
    dev: WireLoopback,
    sockets: SocketSet<'static>,
    client: SocketHandle,
    server: SocketHandle,
    now: SmolInstant,
    polls: u64,
}

impl Smol {
    /// A fresh interface with both addresses, a listening server and a connected client, in a
    /// socket set of `slots` pre-allocated slots (0: a set that grows to the two sockets).
    fn connected(nodelay: bool, slots: usize) -> Smol {
        let mut dev = WireLoopback {
            inner: Loopback::new(Medium::Ethernet),
            frames: Cell::new(0),
        };
        let mut config = SmolConfig::new(EthernetAddress([0x02, 0, 0, 0, 0, 1]).into());
        config.random_seed = 0x1234;
        let now = SmolInstant::ZERO;
        let mut iface = Interface::new(config, &mut dev, now);
        iface.update_ip_addrs(|addrs| {
            for a in ADDR {
                addrs.push(IpCidr::new(a.into(), 24)).expect("address slot");
            }
        });
        let socket = || {
            let mut s = tcp::Socket::new(
                tcp::SocketBuffer::new(vec![0u8; RX_RING]),
                tcp::SocketBuffer::new(vec![0u8; TX_RING]),
            );
            s.set_nagle_enabled(!nodelay);
            s
        };
        let mut sockets =
            SocketSet::new((0..slots).map(|_| SocketStorage::EMPTY).collect::<Vec<_>>());
        let mut server = socket();
        server.listen(PORT).expect("listen");
        let server = sockets.add(server);
        let mut client = socket();
        client
            .connect(
                iface.context(),
                SmolEndpoint::new(IpAddress::Ipv4(ADDR[1]), PORT),
                SmolEndpoint::new(IpAddress::Ipv4(ADDR[0]), 49152),
            )
            .expect("connect");
        let client = sockets.add(client);
        let mut s = Smol {
            iface,
            dev,
            sockets,
            client,
            server,
            now,
            polls: 0,
        };
        while !(s.sock(client).may_send() && s.sock(server).may_recv()) {
            if !s.poll() {
                s.wait();
            }
        }
        s
    }

    fn sock(&mut self, h: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(h)
    }

    /// One `iface.poll()`; whether any frame moved.
    fn poll(&mut self) -> bool {
        let before = self.dev.frames.get();
        self.polls += 1;
        let r = self.iface.poll(self.now, &mut self.dev, &mut self.sockets);
        r != PollResult::None || self.dev.frames.get() != before
    }

    /// Nothing moved: "wait" until smoltcp's next deadline (at least 1 ms when it says "now",
    /// as zcnet's egress does), moving the virtual clock.
    fn wait(&mut self) {
        let d = self
            .iface
            .poll_delay(self.now, &self.sockets)
            .unwrap_or(SmolDuration::from_millis(1))
            .max(SmolDuration::from_millis(1));
        self.now += d;
    }

    fn marks(&self) -> Marks {
        Marks::take(self.polls, self.dev.frames.get())
    }
}

/// Reads up to `want` bytes from `s` with `api`; the number read (0 when nothing is there).
fn smol_read(s: &mut tcp::Socket<'static>, buf: &mut [u8], want: usize, api: Api) -> usize {
    if !s.can_recv() {
        return 0;
    }
    let r = match api {
        Api::Copy => s.recv(|d| {
            let n = ledger::copy(CopySite::SocketToApp, &mut buf[..want], d);
            (n, n)
        }),
        Api::InPlace => s.recv(|d| {
            let n = d.len().min(want);
            (n, n)
        }),
    };
    r.expect("recv")
}

/// Writes up to `src.len()` bytes to `s` with `api`; the number written.
fn smol_write(s: &mut tcp::Socket<'static>, src: &[u8], api: Api) -> usize {
    if !s.can_send() {
        return 0;
    }
    let r = match api {
        Api::Copy => s.send(|space| {
            let n = ledger::copy(CopySite::AppToSocket, space, src);
            (n, n)
        }),
        Api::InPlace => s.send(|space| {
            let n = space.len().min(src.len());
            (n, n)
        }),
    };
    r.expect("send")
}

/// One smoltcp run: fresh interface, connection set up untimed, then the timed work in the
/// poll loop. Never inlined (see `zc_run`).
#[inline(never)]
fn smol_run(work: Workload, api: Api, slots: usize) -> Run {
    let mut sm = Smol::connected(matches!(work, Workload::ReqResp(..)), slots);
    let (client, server) = (sm.client, sm.server);
    let src = app_source();
    let mut buf = vec![0u8; APP_CHUNK];
    let start = sm.marks();
    match work {
        Workload::Bulk(total) => {
            let (mut sent, mut got) = (0u64, 0u64);
            while got < total {
                let mut moved = sm.poll();
                if sent < total {
                    let off = (sent % APP_CHUNK as u64) as usize;
                    let k = (total - sent).min((APP_CHUNK - off) as u64) as usize;
                    let n = smol_write(sm.sock(client), &src[off..off + k], api);
                    sent += n as u64;
                    moved |= n > 0;
                }
                let n = smol_read(sm.sock(server), &mut buf, APP_CHUNK, api);
                got += n as u64;
                moved |= n > 0;
                if !moved {
                    sm.wait();
                }
            }
            sm.marks().run_since(&start)
        }
        Workload::ReqResp(n, msg) => {
            // Client: send the request, then read the response; server: read the request,
            // then send the response.
            let (mut c_sent, mut c_got, mut s_got, mut s_sent) = (0, 0, 0, 0);
            let mut rbuf = vec![0u8; msg];
            let mut done = 0;
            while done < n {
                let mut moved = sm.poll();
                if c_sent < msg {
                    let k = smol_write(sm.sock(client), &src[c_sent..msg], api);
                    c_sent += k;
                    moved |= k > 0;
                }
                if s_got < msg {
                    let k = smol_read(sm.sock(server), &mut buf[s_got..], msg - s_got, api);
                    s_got += k;
                    moved |= k > 0;
                }
                if s_got == msg && s_sent < msg {
                    let k = smol_write(sm.sock(server), &src[s_sent..msg], api);
                    s_sent += k;
                    moved |= k > 0;
                }
                if c_sent == msg && c_got < msg {
                    let k = smol_read(sm.sock(client), &mut rbuf[c_got..], msg - c_got, api);
                    c_got += k;
                    moved |= k > 0;
                }
                if c_got == msg {
                    assert_eq!(s_sent, msg, "the response was sent whole");
                    done += 1;
                    (c_sent, c_got, s_got, s_sent) = (0, 0, 0, 0);
                }
                if !moved {
                    sm.wait();
                }
            }
            sm.marks().run_since(&start)
        }
    }
}

// ---- measurement ----------------------------------------------------------------------------

/// Medians over the runs of one side.
struct Summary {
    /// MB/s (bulk) or round trips per second (req/resp): median, min, max.
    rate: (f64, f64, f64),
    polls: f64,
    frames: f64,
    copy_calls: f64,
    copy_bytes: f64,
    allocs: f64,
}

/// Operations the per-op columns divide by: requests, or MiB for bulk.
fn ops(work: Workload) -> f64 {
    match work {
        Workload::Bulk(bytes) => bytes as f64 / MIB as f64,
        Workload::ReqResp(n, _) => n as f64,
    }
}

/// One run's rate: MB/s (10^6 bytes per second) for bulk, round trips per second for req/resp.
fn run_rate(work: Workload, r: &Run) -> f64 {
    match work {
        Workload::Bulk(bytes) => bytes as f64 / r.elapsed.as_secs_f64() / 1e6,
        Workload::ReqResp(n, _) => n as f64 / r.elapsed.as_secs_f64(),
    }
}

/// zcnet / a peer as the median of the run-by-run ratios, with their (min, max): run `i` of
/// each side ran back to back, so a slow phase of the shared machine that spans the pair
/// cancels out, where the medians of the two sides could come from different phases.
fn paired_ratio(work: Workload, zc: &[Run], sm: &[Run]) -> (f64, f64, f64) {
    let mut r: Vec<f64> = zc
        .iter()
        .zip(sm)
        .map(|(z, s)| run_rate(work, z) / run_rate(work, s))
        .collect();
    let (lo, hi) = (
        r.iter().copied().fold(f64::INFINITY, f64::min),
        r.iter().copied().fold(0.0, f64::max),
    );
    (median(&mut r), lo, hi)
}

fn summarize(work: Workload, runs: &[Run]) -> Summary {
    let per = ops(work);
    let col = |f: &dyn Fn(&Run) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        median(&mut v)
    };
    let rate = |r: &Run| run_rate(work, r);
    let rates: Vec<f64> = runs.iter().map(rate).collect();
    Summary {
        rate: (
            col(&rate),
            rates.iter().copied().fold(f64::INFINITY, f64::min),
            rates.iter().copied().fold(0.0, f64::max),
        ),
        polls: col(&|r| r.polls as f64 / per),
        frames: col(&|r| r.frames as f64 / per),
        copy_calls: col(&|r| r.copy_calls as f64 / per),
        copy_bytes: col(&|r| r.copy_bytes as f64 / per),
        allocs: col(&|r| r.allocs as f64 / per),
    }
}

/// The request and response size: `ZCNET_STACK_MSG` bytes (1 to `APP_CHUNK`), else [`MSG`].
/// Panics on anything else, so a typo never measures the default by mistake.
fn msg_size() -> usize {
    match std::env::var("ZCNET_STACK_MSG") {
        Err(_) => MSG,
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if (1..=APP_CHUNK).contains(&n) => n,
            _ => panic!("ZCNET_STACK_MSG must be a byte count from 1 to {APP_CHUNK}, not {v:?}"),
        },
    }
}

fn main() {
    // The embassy-net side runs on virtual time (before any embassy code runs).
    zcnet_benches::embassy_clock::use_virtual_time();
    let mode = Mode::from_env();
    let runs = mode.pick(9, 3);
    let bulk = Workload::Bulk(mode.pick(64, 2) * MIB);
    let rr = Workload::ReqResp(mode.pick(20_000, 500), msg_size());

    let mut rates = Table::new(&[
        "workload",
        "API",
        "unit",
        "zcnet (min–max)",
        "smoltcp (min–max)",
        "embassy-net (min–max)",
        "zcnet / smoltcp (min–max)",
        "zcnet / embassy-net (min–max)",
    ]);
    let mut costs = Table::new(&[
        "workload",
        "API",
        "per",
        "zcnet polls",
        "smoltcp polls",
        "embassy-net polls",
        "zcnet frames",
        "smoltcp frames",
        "embassy-net frames",
        "zcnet copies (bytes)",
        "smoltcp copies (bytes)",
        "zcnet allocs",
        "smoltcp allocs",
        "embassy-net allocs",
    ]);
    let mut verdicts = Vec::new();
    // For profiling one workload alone: ZCNET_STACK_ONLY=bulk or ZCNET_STACK_ONLY=rr.
    let only = std::env::var("ZCNET_STACK_ONLY").unwrap_or_default();
    // And one side alone: ZCNET_STACK_SIDE=zcnet, smoltcp or embassy (no ratios then).
    let side = std::env::var("ZCNET_STACK_SIDE").unwrap_or_default();
    let runs_side = |name: &str| side.is_empty() || side == name;
    let works: Vec<Workload> = [bulk, rr]
        .into_iter()
        .filter(|w| match only.as_str() {
            "bulk" => matches!(w, Workload::Bulk(_)),
            "rr" => matches!(w, Workload::ReqResp(..)),
            _ => true,
        })
        .collect();
    for work in works {
        for api in [Api::Copy, Api::InPlace] {
            // One counting run per side first (also a warm-up): the copy ledger counts in it.
            // The timed runs then run with the ledger paused, on all sides alike (see
            // "Per-operation costs"). embassy-net copies inside its own socket calls, which
            // the ledger cannot see: its copy counts are not reported.
            let counted_zc = runs_side("zcnet").then(|| zc_run(work, api));
            let counted_sm = runs_side("smoltcp").then(|| smol_run(work, api, 0));
            if runs_side("embassy") {
                emb::emb_run(work, api);
            }
            LEDGER.set_counting(false);
            let (mut zc, mut sm, mut em) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..runs {
                if runs_side("zcnet") {
                    zc.push(zc_run(work, api));
                }
                if runs_side("smoltcp") {
                    sm.push(smol_run(work, api, 0));
                }
                if runs_side("embassy") {
                    em.push(emb::emb_run(work, api));
                }
            }
            LEDGER.set_counting(true);
            if !side.is_empty() {
                // One side alone (profiling): print it and go on.
                let r = [(&zc, "zcnet"), (&sm, "smoltcp"), (&em, "embassy-net")]
                    .into_iter()
                    .find(|(r, _)| !r.is_empty());
                let Some((r, who)) = r else {
                    panic!("ZCNET_STACK_SIDE must be zcnet, smoltcp or embassy, not {side:?}")
                };
                let s = summarize(work, r);
                println!("{who}: {:.0} ({:.0}–{:.0})", s.rate.0, s.rate.1, s.rate.2);
                continue;
            }
            let (mut z, mut s, e) = (
                summarize(work, &zc),
                summarize(work, &sm),
                summarize(work, &em),
            );
            for (sum, counted) in [(&mut z, counted_zc), (&mut s, counted_sm)] {
                let counted = counted.expect("both sides ran");
                sum.copy_calls = counted.copy_calls as f64 / ops(work);
                sum.copy_bytes = counted.copy_bytes as f64 / ops(work);
            }
            let (name, unit, per) = match work {
                Workload::Bulk(b) => (format!("bulk {} MiB", b / MIB), "MB/s", "MiB"),
                Workload::ReqResp(n, msg) => {
                    let size = if msg % 1024 == 0 {
                        format!("{} KiB", msg / 1024)
                    } else {
                        format!("{msg} B")
                    };
                    (format!("req/resp {size}, {n}"), "round trips/s", "request")
                }
            };
            let vs_smoltcp = paired_ratio(work, &zc, &sm);
            let vs_embassy = paired_ratio(work, &zc, &em);
            let fmt_rate = |r: (f64, f64, f64)| format!("{:.0} ({:.0}–{:.0})", r.0, r.1, r.2);
            let fmt_ratio = |r: (f64, f64, f64)| format!("{:.2}x ({:.2}–{:.2})", r.0, r.1, r.2);
            rates.row(vec![
                name.clone(),
                api.name().into(),
                unit.into(),
                fmt_rate(z.rate),
                fmt_rate(s.rate),
                fmt_rate(e.rate),
                fmt_ratio(vs_smoltcp),
                fmt_ratio(vs_embassy),
            ]);
            let copies = |s: &Summary| format!("{:.1} ({:.0})", s.copy_calls, s.copy_bytes);
            costs.row(vec![
                name.clone(),
                api.name().into(),
                per.into(),
                format!("{:.1}", z.polls),
                format!("{:.1}", s.polls),
                format!("{:.1}", e.polls),
                format!("{:.1}", z.frames),
                format!("{:.1}", s.frames),
                format!("{:.1}", e.frames),
                copies(&z),
                copies(&s),
                format!("{:.1}", z.allocs),
                format!("{:.1}", s.allocs),
                format!("{:.1}", e.allocs),
            ]);
            verdicts.push((name, api, vs_smoltcp.0, vs_embassy.0));
        }
    }

    if !side.is_empty() {
        return;
    }
    println!(
        "zcnet vs plain smoltcp 0.14 and embassy-net 0.9.1 over in-memory links ({}): {runs} \
         runs each, interleaved; medians; {} KiB socket rings; virtual time on all sides",
        mode.label(),
        RX_RING / 1024
    );
    println!();
    print!("{}", rates.to_markdown());
    println!();
    print!("{}", costs.to_markdown());
    println!();
    for (name, api, vs_smoltcp, vs_embassy) in verdicts {
        let verdict = if vs_smoltcp >= 1.2 {
            "meets 1.0 and 1.2"
        } else if vs_smoltcp >= 1.0 {
            "meets 1.0, MISSES 1.2"
        } else {
            "MISSES 1.0 and 1.2"
        };
        let verdict_emb = if vs_embassy >= 1.3 {
            "meets 1.3"
        } else {
            "MISSES 1.3"
        };
        println!(
            "{name}, {}: zcnet / smoltcp = {vs_smoltcp:.2}x ({verdict}); \
             zcnet / embassy-net = {vs_embassy:.2}x ({verdict_emb})",
            api.name()
        );
    }
}
