//! The embassy-net 0.9.1 peer (smoltcp 0.13 inside) on embassy-net-tuntap 0.1.1, run by
//! embassy-executor 0.10's raw executor on this thread (the benchmark's loop: poll, then park
//! until the pender fires). embassy-net-tuntap waits for the TAP fd through async-io's reactor
//! thread; the benchmark crate's embassy-time driver (`zcnet_benches::embassy_clock`, real-time
//! mode) keeps its own alarm thread, as embassy-time's std driver would. Both are part of this
//! process's CPU and context-switch figures, as they are part of what embassy-net costs here.
//! One task per socket, as embassy-net's examples do (it has no listener backlog).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::thread::Thread;

use embassy_executor::{raw, Spawner};
use embassy_net::tcp::TcpSocket;
use embassy_net::{Config, Ipv4Address, Ipv4Cidr, Stack, StackResources, StaticConfigV4};
use embassy_net_tuntap::TunTapDevice;

use crate::common::{self, sock_buf, Class, Conn, APP_BUF, CONN_SOCKETS, STACK_MAC};

/// Set by the pender; the loop clears it before each executor poll.
static PENDED: AtomicBool = AtomicBool::new(false);
/// The thread running the executor, unparked by the pender.
static MAIN: OnceLock<Thread> = OnceLock::new();

/// embassy's raw executor calls this when its run queue gains a task (from any thread).
/// `executor-thread` is off in this package (see Cargo.toml), so this is the only pender.
#[unsafe(export_name = "__pender")]
fn pender(_context: *mut ()) {
    PENDED.store(true, Ordering::Release);
    if let Some(t) = MAIN.get() {
        t.unpark();
    }
}

/// Counts the polls of the net runner (embassy-net's one task that drives smoltcp).
struct Counted<F>(Pin<Box<F>>);

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        common::POLLS.fetch_add(1, Ordering::Relaxed);
        self.0.as_mut().poll(cx)
    }
}

fn spawn<F: Future<Output = ()> + 'static>(spawner: Spawner, fut: F) {
    let storage: &'static raw::TaskStorage<F> = Box::leak(Box::new(raw::TaskStorage::new()));
    spawner.spawn(storage.spawn(move || fut).expect("task storage is fresh"));
}

struct EmbConn<'a, 'b>(&'a mut TcpSocket<'b>);

impl Conn for EmbConn<'_, '_> {
    async fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.0.read(buf).await.ok()
    }
    async fn discard(&mut self) -> Option<usize> {
        self.0.read_with(|b| (b.len(), b.len())).await.ok()
    }
    async fn send(&mut self, buf: &[u8]) -> Option<usize> {
        self.0.write(buf).await.ok()
    }
    async fn finish(&mut self) {
        // embassy-net's examples: close, flush, then drop the socket (which removes it).
        self.0.close();
        let _ = self.0.flush().await;
    }
}

/// Opens the TAP `tap`, serves `class`'s ports forever.
pub fn serve(tap: &str, class: Class) -> ! {
    match class {
        Class::Bulk | Class::Echo => run::<4>(tap, class),
        Class::Http | Class::Idle => run::<{ CONN_SOCKETS }>(tap, class),
    }
}

fn run<const N: usize>(tap: &str, class: Class) -> ! {
    let _ = MAIN.set(std::thread::current());
    let mut device =
        TunTapDevice::new(tap).unwrap_or_else(|e| panic!("cannot open TAP {tap}: {e}"));
    device.set_hardware_address(STACK_MAC);
    let config = Config::ipv4_static(StaticConfigV4 {
        address: Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 2), 24),
        gateway: None,
        dns_servers: Default::default(),
    });
    let resources: &'static mut StackResources<N> = Box::leak(Box::new(StackResources::new()));
    let (stack, mut runner) =
        embassy_net::new(device, config, resources, u64::from(std::process::id()));
    let exec: &'static raw::Executor =
        Box::leak(Box::new(raw::Executor::new(std::ptr::null_mut())));
    let spawner = exec.spawner();
    spawn(spawner, async move {
        Counted(Box::pin(async move { runner.run().await })).await;
    });
    for &(port, n) in class.ports() {
        for _ in 0..n {
            spawn(spawner, socket_task(stack, port));
        }
    }
    common::start_stats_thread();
    common::ready();
    loop {
        // SAFETY: only this thread polls the executor, and never re-entrantly (the pender only
        // sets a flag and unparks).
        unsafe { exec.poll() };
        // Clearing the flag before the next poll keeps any pend that lands during it.
        while !PENDED.swap(false, Ordering::Acquire) {
            std::thread::park();
        }
        common::WAKEUPS.fetch_add(1, Ordering::Relaxed);
    }
}

async fn socket_task(stack: Stack<'static>, port: u16) {
    let mut rx = vec![0u8; sock_buf()];
    let mut tx = vec![0u8; sock_buf()];
    let mut buf = vec![0u8; APP_BUF];
    loop {
        let mut s = TcpSocket::new(stack, &mut rx, &mut tx);
        if s.accept(port).await.is_err() {
            continue;
        }
        common::serve_conn(&mut EmbConn(&mut s), port, &mut buf).await;
    }
}
