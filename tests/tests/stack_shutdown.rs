//! [`Stack::shutdown`]: the driver comes back, every frame the stack held returns to the pool,
//! the stack's tasks end, sockets fail with a clear error, and the peer's stack is untouched.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;

use zcnet_buffer::{FramePool, LinkState, PoolConfig};
use zcnet_executor::time::{sleep, timeout};
use zcnet_executor::{Executor, JoinHandle};
use zcnet_stack::datagram::{DatagramError, DatagramQueue, DatagramSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpError, TcpListener, TcpSocket};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::{Config, IpEndpoint, Runner, Stack, StackError, StackResources};
use zcnet_tests::audit::{assert_all_free, assert_slots_back};
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::net::{pair_on_with, ADDR};
use zcnet_tests::sim_nic::SimNic;
use zcnet_tests::wire::Faults;

const PORT: u16 = 7000;
const UDP_PORT: u16 = 7001;

fn buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(16 * 1024, 16 * 1024))
}

/// Stack B holds a connection whose data it has not read (received frames queued), whose own
/// sent data is unacknowledged (A stopped reading and its window closed: retransmission
/// frames kept), a listener, and a zero-copy socket with datagrams queued. Shutting B down
/// gives its wire end back and, once that is dropped, every one of B's slots is free; B's
/// sockets fail with `ShutDown`; A, which was told nothing, still works.
#[test]
fn shutdown_gives_the_driver_and_every_slot_back() {
    let p = pair_on_with(
        Executor::leak(VirtualClock::leak()),
        Faults::default(),
        256,
        |_, _| {},
    );
    let [a, b] = p.stacks;
    let armed_before = p.exec.armed_timers();
    let (mut client, mut server, mut listener, zc) = p.exec.block_on(async move {
        let mut listener = TcpListener::bind(b, PORT, 2, buffers).unwrap();
        let mut client = TcpSocket::new(a, TcpBuffers::with_capacity(4096, 64 * 1024)).unwrap();
        client
            .connect(IpEndpoint::new(ADDR[1].into(), PORT))
            .await
            .unwrap();
        let mut server = listener.accept().await.unwrap();
        // A → B, unread by B: B's receive queue holds frames.
        client.write_all(&[1u8; 8 * 1024]).await.unwrap();
        // B → A beyond A's 4 KiB window, unread by A: B keeps frames for retransmission.
        let w = server.write_all(&[2u8; 12 * 1024]);
        let _ = timeout(Duration::from_millis(200), w).await;
        let zc = DatagramSocket::bind(b, UDP_PORT, DatagramQueue::with_capacity(4)).unwrap();
        let u = UdpSocket::bind(a, 0, UdpBuffers::with_capacity(4, 2048)).unwrap();
        for _ in 0..3 {
            u.send_to(b"queued", IpEndpoint::new(ADDR[1].into(), UDP_PORT))
                .await
                .unwrap();
        }
        sleep(Duration::from_millis(50)).await;
        assert_eq!(zc.queued(), 3);
        (client, server, listener, zc)
    });
    let held = p.pools[1].occupancy();
    assert!(
        held.stack > 0 && held.retained + held.sent > 0 && held.lent == 3,
        "B holds received, retained and lent frames before shutdown: {held:?}"
    );

    let driver = b.shutdown().expect("first shutdown");
    assert!(b.is_shut_down());
    assert_eq!(b.shutdown().unwrap_err(), StackError::ShutDown);
    let occ = p.pools[1].occupancy();
    assert_eq!(
        (occ.stack, occ.retained, occ.lent),
        (0, 0, 0),
        "the stack's frames are back: {occ:?}"
    );

    let pool_b = p.pools[1];
    p.exec.block_on(async {
        // Everything waiting on B completes.
        timeout(Duration::from_secs(1), b.wait_shut_down())
            .await
            .unwrap();
        timeout(Duration::from_secs(1), b.wait_link(LinkState::Down))
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(server.read(&mut buf).await, Err(TcpError::ShutDown));
        assert_eq!(server.write(b"x").await, Err(TcpError::ShutDown));
        assert_eq!(listener.accept().await.err(), Some(TcpError::ShutDown));
        assert!(
            zc.poll_tx_frame(&mut Context::from_waker(Waker::noop()))
                .is_pending(),
            "a shut-down stack has no TX frame"
        );
        let mut f = pool_b.try_alloc_tx().unwrap();
        f.set_headroom(64).unwrap();
        f.append(4).unwrap().copy_from_slice(b"late");
        assert_eq!(
            zc.send_to(f, IpEndpoint::new(ADDR[0].into(), 9)).await,
            Err(DatagramError::ShutDown)
        );
        assert_eq!(zc.queued(), 0, "queued datagrams were dropped");
        // Nothing opens.
        assert_eq!(
            TcpSocket::new(b, TcpBuffers::with_capacity(256, 256)).err(),
            Some(StackError::ShutDown)
        );
        assert_eq!(
            UdpSocket::bind(b, 9, UdpBuffers::with_capacity(1, 64)).err(),
            Some(StackError::ShutDown)
        );
        assert_eq!(
            DatagramSocket::bind(b, 10, DatagramQueue::with_capacity(1)).err(),
            Some(StackError::ShutDown)
        );
        let mut t = TcpSocket::new(a, TcpBuffers::with_capacity(256, 256)).unwrap();
        t.set_timeout(Some(Duration::from_secs(2)));
        // A's stack is untouched: its SYN to B's dead stack times out, as to a pulled cable.
        assert_eq!(
            t.connect(IpEndpoint::new(ADDR[1].into(), PORT)).await,
            Err(TcpError::TimedOut)
        );
    });
    // The egress timer of B left the wheel (A's connection still runs its own).
    assert!(p.exec.armed_timers() <= armed_before + 1);

    drop((server, listener, zc));
    let end = driver
        .into_boxed()
        .expect("a boxed driver comes back boxed");
    drop(end);
    assert_all_free(p.pools[1]);

    // A cleans up after its peer vanished.
    client.abort();
    drop(client);
    p.exec.block_on(sleep(Duration::from_secs(1)));
    assert_slots_back(p.pools[0], 0);
}

/// `Runner::run` and the spawned tasks end at shutdown, and a `&'static mut` driver comes back
/// as one, ready for the next stack on new resources.
#[test]
fn tasks_end_and_a_static_driver_serves_a_second_stack() {
    let exec = Executor::leak(VirtualClock::leak());
    let pool = FramePool::leak(PoolConfig::new(32)).unwrap();
    let nic: &'static mut SimNic = Box::leak(Box::new(SimNic::new(pool, 4, 4)));
    let resources: &'static StackResources<4> = StackResources::leak();
    let config = Config::new(zcnet_tests::secret::seeded(1));
    let (stack, runner) = Stack::new(exec, pool, nic, config, resources).unwrap();
    let mut run = Box::pin(exec.local_spawner().spawn(runner.run()));
    exec.run_until_idle();
    assert!(pending(&mut run));
    let driver = stack.shutdown().unwrap();
    exec.run_until_idle();
    assert!(!pending(&mut run), "Runner::run returned");
    assert_eq!(exec.armed_timers(), 0, "nothing left on the wheel");
    let nic = driver
        .into_static()
        .expect("a static driver comes back static");

    // The same driver and pool under a new stack; the old resources stay claimed.
    let second: &'static StackResources<4> = StackResources::leak();
    // Its tasks spawned one by one (the `Runner` is then not needed).
    let (stack2, _runner) = Stack::new(exec, pool, nic, config, second).unwrap();
    let mut tasks = [
        Box::pin(exec.local_spawner().spawn(Runner::ingress(stack2))),
        Box::pin(exec.local_spawner().spawn(Runner::egress(stack2))),
        Box::pin(exec.local_spawner().spawn(Runner::link(stack2))),
    ];
    exec.run_until_idle();
    assert!(tasks.iter_mut().all(pending));
    assert!(!stack2.is_shut_down());
    assert_eq!(
        Stack::new(
            exec,
            pool,
            Box::new(SimNic::new(pool, 4, 4)),
            config,
            resources
        )
        .err(),
        Some(StackError::ResourcesInUse)
    );
    let _nic = stack2.shutdown().unwrap().into_static().unwrap();
    exec.run_until_idle();
    assert!(!tasks.iter_mut().any(pending), "each task ended");
    // The driver is the caller's again: its RX ring is all it holds.
    let occ = assert_slots_back(pool, 4);
    assert_eq!((occ.tx, occ.free), (0, 28), "{occ:?}");
}

/// Whether a spawned task has not finished yet (polls its handle once).
fn pending<T>(handle: &mut Pin<Box<JoinHandle<T>>>) -> bool {
    handle
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_pending()
}
