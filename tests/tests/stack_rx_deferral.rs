//! Receive interrupt moderation through the stack (`Driver::receive_deferral`): over the
//! in-memory wire, with stack B's driver a wire end behind a model of a device interrupt that
//! defers as zcnet-virtio does. A bulk stream into B is polled from ingress's timer after each
//! large drained stretch, the deferred poll comes no sooner than asked unless something else
//! woke ingress, the stream takes fewer interrupts than without deferral, request/response
//! traffic is never deferred, an idle link ends with the interrupt armed and no polls, and a
//! shutdown takes a standing deferral's timer off the executor's wheel.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use zcnet_buffer::{Capabilities, Driver, HardwareAddress, LinkState, RxFrame, TxError, TxFrame};
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::{IpEndpoint, Stack};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_wrapped, Pair, PairDriver, ADDR};
use zcnet_tests::wire::{Faults, WireEnd};

/// The deferral the model asks for.
const DELAY: Duration = Duration::from_micros(300);
/// Frames a stretch must bring for its drained pass to be deferred.
const BULK: usize = 8;
/// Bytes of the bulk stream.
const LEN: usize = 2 * 1024 * 1024;

/// What the model of B's device interrupt records.
#[derive(Debug, Default)]
struct Line {
    /// The caller's waker while the interrupt is armed; a frame arriving then wakes it (an
    /// interrupt). `None` while a batch is handled or a deferral stands: frames then arrive
    /// silently.
    armed: Option<Waker>,
    /// Whether deferral is on.
    defer: bool,
    /// Frames taken since the interrupt was last armed, or the last deferral.
    stretch: usize,
    /// The last `Pending` ended a large stretch: `receive_deferral` may defer it.
    offer: bool,
    /// Deferrals granted.
    deferrals: u64,
    /// When the standing deferral was granted (until the next poll).
    deferred_at: Option<Duration>,
    /// For each deferral, the time from it to the next poll.
    deferred_polls: Vec<Duration>,
    /// Times the driver was polled for frames.
    polls: u64,
    /// Interrupts: wakes of an armed caller by an arriving frame.
    interrupts: u64,
}

/// The wake the wire end delivers when a frame arrives: an interrupt only while armed.
struct Irq(Arc<Mutex<Line>>);

impl Wake for Irq {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let armed = {
            let mut line = self.0.lock().unwrap();
            let armed = line.armed.take();
            line.interrupts += u64::from(armed.is_some());
            armed
        };
        if let Some(w) = armed {
            w.wake();
        }
    }
}

/// A wire end whose receive interrupt is moderated: its `Pending` arms the interrupt, and
/// after a stretch of at least [`BULK`] frames `receive_deferral` takes it back and asks to be
/// polled [`DELAY`] later.
struct Moderated {
    end: WireEnd,
    line: Arc<Mutex<Line>>,
    irq: Waker,
    exec: &'static Executor,
}

impl Moderated {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.exec.now().as_nanos())
    }
}

impl Driver for Moderated {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        let now = self.now();
        {
            let mut line = self.line.lock().unwrap();
            line.polls += 1;
            line.offer = false;
            if let Some(at) = line.deferred_at.take() {
                line.deferred_polls.push(now - at);
            }
        }
        let polled = self.end.poll_receive(&mut Context::from_waker(&self.irq));
        let mut line = self.line.lock().unwrap();
        match polled {
            Poll::Ready(frame) => {
                line.armed = None;
                line.stretch += 1;
                Poll::Ready(frame)
            }
            Poll::Pending => {
                line.armed = Some(cx.waker().clone());
                line.offer = line.defer && line.stretch >= BULK;
                line.stretch = 0;
                Poll::Pending
            }
        }
    }
    fn receive_deferral(&mut self) -> Option<Duration> {
        let now = self.now();
        let mut line = self.line.lock().unwrap();
        if !std::mem::take(&mut line.offer) {
            return None;
        }
        line.armed = None;
        line.deferrals += 1;
        line.deferred_at = Some(now);
        Some(DELAY)
    }
    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.end.poll_transmit_frame(cx)
    }
    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.end.poll_transmit_ready(cx)
    }
    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        self.end.transmit(frame)
    }
    fn flush(&mut self) {
        self.end.flush()
    }
    fn capabilities(&self) -> Capabilities {
        // Frames, not chains: the stack polls `poll_receive`.
        self.end.capabilities().with_rx_chains(false)
    }
    fn hardware_address(&self) -> HardwareAddress {
        self.end.hardware_address()
    }
    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        self.end.poll_link_state(cx)
    }
}

/// A pair on simulated time whose B side is [`Moderated`], deferring if `defer`.
fn moderated_pair(defer: bool) -> (Pair, Arc<Mutex<Line>>) {
    let exec = Executor::leak(VirtualClock::leak());
    let line = Arc::new(Mutex::new(Line {
        defer,
        ..Line::default()
    }));
    let shared = line.clone();
    let p = pair_wrapped(
        exec,
        Faults::default(),
        512,
        |a, b| -> [PairDriver; 2] {
            let irq = Waker::from(Arc::new(Irq(shared.clone())));
            let b = Moderated {
                end: b,
                line: shared,
                irq,
                exec,
            };
            [Box::new(a), Box::new(b)]
        },
        |_, _| {},
    );
    (p, line)
}

/// Byte `i` of the stream.
fn byte(i: usize) -> u8 {
    (i.wrapping_mul(131) >> 3) as u8
}

/// Sends [`LEN`] bytes from A to B over port 9000; returns B's socket after checking them.
fn bulk(p: &Pair) -> (TcpSocket, TcpSocket) {
    let [a, b] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(65536, 65536)).unwrap();
        s.accept(9000).await.unwrap();
        let mut got = 0;
        let mut buf = vec![0u8; 8192];
        while got < LEN {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "data until the end");
            for (k, &x) in buf[..n].iter().enumerate() {
                assert_eq!(x, byte(got + k), "byte {}", got + k);
            }
            got += n;
        }
        s
    });
    let data: Vec<u8> = (0..LEN).map(byte).collect();
    let client = p.exec.block_on(async move {
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(65536, 65536)).unwrap();
        c.connect_timeout(
            IpEndpoint::new(ADDR[1].into(), 9000),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        c.write_all(&data).await.unwrap();
        c.flush().await.unwrap();
        c
    });
    (client, p.exec.block_on(server))
}

/// `rounds` exchanges of 64 bytes, A asking and B echoing, one at a time, over port 9001.
fn ping_pong(p: &Pair, rounds: usize) {
    let [a, b]: [Stack; 2] = p.stacks;
    let server = p.exec.local_spawner().spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(4096, 4096)).unwrap();
        s.accept(9001).await.unwrap();
        let mut buf = [0u8; 64];
        for _ in 0..rounds {
            let mut got = 0;
            while got < buf.len() {
                got += s.read(&mut buf[got..]).await.unwrap();
            }
            s.write_all(&buf).await.unwrap();
            s.flush().await.unwrap();
        }
        s
    });
    let client = p.exec.block_on(async move {
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 4096)).unwrap();
        c.connect_timeout(
            IpEndpoint::new(ADDR[1].into(), 9001),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        for r in 0..rounds {
            let ask = [r as u8; 64];
            c.write_all(&ask).await.unwrap();
            c.flush().await.unwrap();
            let mut back = [0u8; 64];
            let mut got = 0;
            while got < back.len() {
                got += c.read(&mut back[got..]).await.unwrap();
            }
            assert_eq!(back, ask);
        }
        c
    });
    drop((client, p.exec.block_on(server)));
}

#[test]
fn a_bulk_stream_is_polled_from_the_timer_and_an_idle_link_keeps_its_interrupt_armed() {
    let (p, line) = moderated_pair(true);
    let sockets = bulk(&p);
    let (deferrals, interrupts) = {
        let l = line.lock().unwrap();
        eprintln!(
            "deferring: {} deferrals, {} interrupts, {} polls",
            l.deferrals, l.interrupts, l.polls
        );
        (l.deferrals, l.interrupts)
    };
    assert!(deferrals > 10, "the stream was deferred: {deferrals}");
    // Every deferral was followed by a poll, most of them the timer's, none of those early.
    p.exec.block_on(p.exec.sleep(Duration::from_millis(10)));
    {
        let l = line.lock().unwrap();
        assert_eq!(l.deferred_at, None, "the last deferral's poll came");
        assert_eq!(l.deferred_polls.len() as u64, l.deferrals);
        let timed = l.deferred_polls.iter().filter(|d| **d >= DELAY).count();
        assert!(
            timed * 2 >= l.deferred_polls.len(),
            "deferred polls from the timer: {timed} of {}",
            l.deferred_polls.len()
        );
    }

    // The same stream without deferral takes an interrupt per burst.
    let (p_off, line_off) = moderated_pair(false);
    drop(bulk(&p_off));
    let off = line_off.lock().unwrap().interrupts;
    eprintln!("without deferral: {off} interrupts");
    assert_eq!(line_off.lock().unwrap().deferrals, 0);
    assert!(
        interrupts * 2 < off,
        "deferral halves the interrupts at least: {interrupts} against {off}"
    );

    // Request/response: never deferred, each request interrupts.
    let before = line.lock().unwrap().deferrals;
    let irq_before = line.lock().unwrap().interrupts;
    ping_pong(&p, 50);
    let l = line.lock().unwrap();
    assert_eq!(l.deferrals, before, "small exchanges are not deferred");
    assert!(
        l.interrupts >= irq_before + 50,
        "{} {irq_before}",
        l.interrupts
    );
    drop(l);

    // Idle: the interrupt is armed and nothing polls the driver.
    drop(sockets);
    p.exec.block_on(p.exec.sleep(Duration::from_secs(60)));
    let polls = line.lock().unwrap().polls;
    p.exec.block_on(p.exec.sleep(Duration::from_secs(30)));
    let l = line.lock().unwrap();
    assert_eq!(l.polls, polls, "an idle link is not polled");
    assert!(l.armed.is_some(), "the interrupt is armed");
    assert_eq!(l.deferred_at, None);
    drop(l);
    p.assert_slots_back();
}

/// Shutting both stacks down while a deferral stands (B's ingress timer armed, its poll not
/// yet due) leaves nothing on the executor's timer wheel.
#[test]
fn shutdown_takes_a_standing_deferral_off_the_wheel() {
    let (p, line) = moderated_pair(true);
    let [a, b] = p.stacks;
    let spawner = p.exec.local_spawner();
    let server = spawner.spawn(async move {
        let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(65536, 65536)).unwrap();
        s.accept(9000).await.unwrap();
        let mut buf = vec![0u8; 8192];
        // Until the stack shuts down under it.
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    });
    let client = spawner.spawn(async move {
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(65536, 65536)).unwrap();
        if c.connect(IpEndpoint::new(ADDR[1].into(), 9000))
            .await
            .is_err()
        {
            return;
        }
        let data = vec![0x5au8; LEN];
        let _ = c.write_all(&data).await;
    });
    // Run on simulated time, a step at a time, until a deferral stands.
    let mut steps = 0;
    while line.lock().unwrap().deferred_at.is_none() {
        steps += 1;
        assert!(steps < 100_000, "no deferral granted");
        if p.exec.run_until_idle() == 0 {
            p.exec.block_on(p.exec.sleep(Duration::from_micros(10)));
        }
    }
    assert!(p.exec.armed_timers() > 0);
    let _ = a.shutdown().unwrap();
    let _ = b.shutdown().unwrap();
    p.exec.run_until_idle();
    p.exec.block_on(async {
        server.await;
        client.await;
    });
    let l = line.lock().unwrap();
    assert_eq!(
        l.deferred_polls.len() as u64 + 1,
        l.deferrals,
        "the standing deferral's poll never came"
    );
    drop(l);
    assert_eq!(p.exec.armed_timers(), 0, "nothing left on the wheel");
}
