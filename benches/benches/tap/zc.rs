//! The zcnet peer: zcnet-stack over zcnet-tap, on zcnet's executor (one thread, its epoll
//! reactor holding the TAP fd). One listener per port; each accepted connection is a task.

use std::cell::RefCell;
use std::rc::Rc;

use zcnet_buffer::{FramePool, PoolConfig};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpListener, TcpSocket};
use zcnet_stack::{Config, Ipv4Cidr, Ipv4Config, Stack, StackResources, StaticV4};
use zcnet_tap::{Tap, TapConfig};
use zcnet_tests::netns::{slot_size_for, ZCNET_ADDR};

use crate::common::{
    self, sock_buf, Class, Conn, APP_BUF, STACK_MAC, ZC_BACKLOG_BULK, ZC_BACKLOG_CONN,
    ZC_CONN_SOCKETS,
};

/// Pool slots: room for a full 64 KiB window of 1514-byte frames each way, and then some.
/// 8 MiB of 2 KiB slots. Every socket gets the peers' 64 KiB buffers (a budget of 128 frames),
/// more than a hundred RPS connections can reserve together, so the TCP share is overcommitted
/// (`tcp_pool_slots` past the pool): they hold a frame or two each in practice.
const SLOTS: usize = 4096;

static EXEC: std::sync::OnceLock<&'static Executor> = std::sync::OnceLock::new();

fn counters() -> (u64, u64) {
    let s = EXEC.get().expect("executor").stats();
    (s.waits, s.polls)
}

struct ZcConn(TcpSocket);

impl Conn for ZcConn {
    async fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.0.read(buf).await.ok()
    }
    async fn discard(&mut self) -> Option<usize> {
        match self.0.read_with(|b| (b.len(), b.len())).await {
            Ok(n) => Some(n.unwrap_or(0)),
            Err(_) => None,
        }
    }
    async fn send(&mut self, buf: &[u8]) -> Option<usize> {
        self.0.write(buf).await.ok()
    }
    async fn finish(&mut self) {
        // Dropping a closed socket lets the stack finish the close in the background.
        self.0.close();
    }
}

fn buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(sock_buf(), sock_buf()))
}

/// Whether the TAP takes the kernel's TCP super-segments on receive (`TapConfig::rx_gso`,
/// read into chains the stack takes whole): on, unless `ZCNET_TAP_RX_GSO=0` in the
/// environment (the server process inherits it), to compare both.
fn rx_gso() -> bool {
    std::env::var("ZCNET_TAP_RX_GSO").map_or(true, |v| v != "0")
}

/// Opens the TAP `tap`, serves `class`'s ports forever; with `offloads`, the TAP's default
/// offloads and receive super-segments (never for the echo class, see below).
pub fn serve(tap: &str, class: Class, offloads: bool) -> ! {
    match class {
        // Listening sockets plus the active connection and one closing, per port.
        Class::Bulk | Class::Echo => run::<8>(tap, class, offloads),
        Class::Http | Class::Idle => run::<{ ZC_CONN_SOCKETS }>(tap, class, offloads),
    }
}

fn run<const N: usize>(tap_name: &str, class: Class, offloads: bool) -> ! {
    let platform = LinuxPlatform::leak().expect("epoll");
    let exec = Executor::leak(platform);
    let _ = EXEC.set(exec);
    let _ = common::COUNTERS.set(counters);
    let pool =
        FramePool::leak(PoolConfig::new(SLOTS).with_slot_size(slot_size_for(1500))).expect("pool");
    let tap = Tap::open(
        platform,
        pool,
        // The loss benchmark (the echo class) keeps its rules: MTU 1500 and no offloads, every
        // segment a 1514-byte frame with its full checksum through its nftables hooks, as the
        // peers' are; the TAP benchmark's classes run with the default offloads (TSO), or
        // without any for its `zcnet-plain` bulk rows.
        &TapConfig::new(tap_name)
            .with_mac(STACK_MAC)
            .with_offloads(offloads && !matches!(class, Class::Echo))
            .with_rx_gso(offloads && !matches!(class, Class::Echo) && rx_gso()),
    )
    .unwrap_or_else(|e| panic!("cannot open TAP {tap_name}: {e}"));
    let resources: &'static StackResources<N> = StackResources::leak();
    let config = Config {
        ipv4: Ipv4Config::Static(StaticV4 {
            address: Ipv4Cidr::new(ZCNET_ADDR, 24),
            gateway: None,
        }),
        tcp_pool_slots: Some(usize::MAX),
        ..Config::new(zcnet_tests::secret::from_os())
    };
    let driver: &'static mut Tap = Box::leak(Box::new(tap));
    let (stack, runner) = Stack::new(exec, pool, driver, config, resources).expect("stack");
    runner.spawn(exec.local_spawner());
    for &(port, _) in class.ports() {
        let backlog = if matches!(class, Class::Bulk | Class::Echo) {
            ZC_BACKLOG_BULK
        } else {
            ZC_BACKLOG_CONN
        };
        let listener = TcpListener::bind(stack, port, backlog, buffers).expect("listen");
        exec.local_spawner()
            .spawn(accept_loop(stack, listener, port));
    }
    common::start_stats_thread();
    common::ready();
    exec.block_on(core::future::pending::<()>());
    unreachable!("the server never stops")
}

async fn accept_loop(_stack: Stack, mut listener: TcpListener, port: u16) {
    let spawner = EXEC.get().expect("executor").local_spawner();
    // Application buffers of ended connections, for the next ones: each connection has its
    // APP_BUF as the peers' fixed socket slots do, allocated and zeroed once, not per connection.
    let spare: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    loop {
        // Fails only once the stack is shut down.
        let Ok(s) = listener.accept().await else {
            return;
        };
        let spare = spare.clone();
        spawner.spawn(async move {
            let taken = spare.borrow_mut().pop();
            let mut buf = taken.unwrap_or_else(|| vec![0u8; APP_BUF]);
            common::serve_conn(&mut ZcConn(s), port, &mut buf).await;
            spare.borrow_mut().push(buf);
        });
    }
}
