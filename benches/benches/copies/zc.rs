//! zcnet: two stacks over the in-memory wire of `zcnet-tests` (`wire_pair`), on one executor
//! with a virtual clock, as in the stack benchmark, with every layer in its scope:
//!
//! * device: each wire end is wrapped in [`ScopedDriver`], so the wire's own work (its one copy
//!   per frame, from the sender's slot into a slot of the receiver's pool: the receiving NIC's
//!   "DMA") is filed under the device;
//! * stack: the ingress and egress tasks of each stack;
//! * app: the client and server tasks.
//!
//! The UDP workloads run on either datagram API ([`UdpImpl`]): the zero-copy
//! [`DatagramSocket`] (the `zcnet` rows) or smoltcp's socket behind [`UdpSocket`] (the
//! `zcnet udp::UdpSocket` rows). The frame pools of both stacks are the run's device buffers
//! ([`count::set_device_buffers`]).

use std::task::{Context, Poll};
use std::time::Duration;

use zcnet_buffer::{
    Capabilities, Driver, FramePool, HardwareAddress, LinkState, PoolConfig, RxFrame, TxError,
    TxFrame,
};
use zcnet_executor::time::sleep;
use zcnet_executor::Executor;
use zcnet_stack::datagram::{DatagramQueue, DatagramSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::{
    Config, IpEndpoint, Ipv4Cidr, Ipv4Config, Runner, Stack, StackResources, StaticV4,
};
use zcnet_tests::net::ADDR;
use zcnet_tests::wire::{wire_pair, Faults, WireEnd};

use crate::app::{Api, Kind, Msg, Workload, APP_CHUNK, PORT, TCP_RING, UDP_BYTES, UDP_PACKETS};
use crate::count::{self, enter, Host, Layer, Scope, Scoped, Window};

/// Frame pool slots per stack (as in the stack benchmark).
const SLOTS: usize = 256;

/// A wire end whose every call runs in its host's device scope.
struct ScopedDriver {
    inner: &'static mut WireEnd,
    scope: Scope,
}

impl Driver for ScopedDriver {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        let _g = enter(self.scope);
        self.inner.poll_receive(cx)
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        let _g = enter(self.scope);
        self.inner.poll_transmit_frame(cx)
    }

    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        let _g = enter(self.scope);
        self.inner.transmit(frame)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn hardware_address(&self) -> HardwareAddress {
        self.inner.hardware_address()
    }

    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        let _g = enter(self.scope);
        self.inner.poll_link_state(cx)
    }
}

const HOSTS: [Host; 2] = [Host::Client, Host::Server];

/// Two stacks (client 10.0.0.1, server 10.0.0.2) over a perfect wire, their runner tasks
/// spawned in their scopes.
fn pair(exec: &'static Executor) -> [Stack; 2] {
    let pools = [
        FramePool::leak(PoolConfig::new(SLOTS)).expect("pool"),
        FramePool::leak(PoolConfig::new(SLOTS)).expect("pool"),
    ];
    count::set_device_buffers(&pools.map(pool_memory));
    let (a, b) = wire_pair(exec, pools, Faults::default());
    let ends = [a, b];
    let mut stacks = Vec::new();
    for (i, end) in ends.into_iter().enumerate() {
        let driver: &'static mut ScopedDriver = Box::leak(Box::new(ScopedDriver {
            inner: Box::leak(Box::new(end)),
            scope: Scope::of(HOSTS[i], Layer::Device),
        }));
        // One socket slot: the one socket each side uses (smoltcp walks every slot).
        let resources: &'static StackResources<1> = StackResources::leak();
        let config = Config {
            ipv4: Ipv4Config::Static(StaticV4 {
                address: Ipv4Cidr::new(ADDR[i], 24),
                gateway: None,
            }),
            ..Config::new(zcnet_tests::secret::seeded(0x1234 + i as u64))
        };
        // The runner's two tasks are spawned below, each in the host's stack scope.
        let (stack, _runner) =
            Stack::new(exec, pools[i], driver, config, resources).expect("stack");
        let scope = Scope::of(HOSTS[i], Layer::Stack);
        let spawner = exec.local_spawner();
        drop(spawner.spawn(Scoped::new(scope, async move {
            let _ = Runner::ingress(stack).await;
        })));
        drop(spawner.spawn(Scoped::new(scope, async move {
            let _ = Runner::egress(stack).await;
        })));
        stacks.push(stack);
    }
    [stacks[0], stacks[1]]
}

/// Where a pool's slots live: (first byte, length). Found from a TX frame's position (before
/// the stack runs, so every slot is free); checked against [`FramePool::slot_of`].
fn pool_memory(pool: &'static FramePool) -> (*const u8, usize) {
    let mut f = pool.try_alloc_tx().expect("a free slot");
    let slot = pool.slot_size();
    let data = f.buffer_mut().as_ptr() as usize;
    let base = data - f.offset_in_slot() - f.slot_index() * slot;
    let len = pool.slot_count() * slot;
    assert_eq!(pool.slot_of(base as *const u8), Some(0), "pool base");
    assert_eq!(pool.slot_of((base - 1) as *const u8), None, "pool base");
    assert_eq!(
        pool.slot_of((base + len - 1) as *const u8),
        Some(pool.slot_count() - 1),
        "pool end"
    );
    (base as *const u8, len)
}

/// Which zcnet datagram API the UDP workloads use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpImpl {
    /// The zero-copy [`DatagramSocket`]: datagrams received in the driver's slots, payloads
    /// written into TX frames.
    Datagram,
    /// [`UdpSocket`]: smoltcp's UDP socket (payload through its `PacketBuffer`).
    SmoltcpSocket,
}

/// Runs `w` with `api` (UDP workloads: on `udp`) on a fresh pair; counting is switched on and
/// off by the applications.
pub fn run(w: Workload, api: Api, udp: UdpImpl) {
    let exec = Executor::leak(zcnet_benches::VirtualClock::leak());
    let [a, b] = pair(exec);
    let server = exec.local_spawner().spawn(Scoped::new(
        Scope::of(Host::Server, Layer::App),
        server(b, w, api, udp),
    ));
    exec.block_on(Scoped::new(
        Scope::of(Host::Client, Layer::App),
        async move {
            client(a, w, api, udp).await;
            server.await;
        },
    ));
}

async fn client(stack: Stack, w: Workload, api: Api, udp: UdpImpl) {
    // Let the server task bind or listen before the first packet goes out.
    sleep(Duration::from_millis(1)).await;
    let server = IpEndpoint::new(ADDR[1].into(), PORT);
    let mut buf = vec![0u8; APP_CHUNK];
    let total = w.warmup + w.requests;
    match w.kind {
        Kind::Udp => {
            let s = ZcUdp::bind(stack, 0, udp);
            for seq in 0..total {
                count::begin_request(w.warmup, seq);
                s.send(api, &w.req, seq, server, &mut buf).await;
                s.recv(api, &w.resp, seq, &mut buf).await;
            }
        }
        Kind::Tcp | Kind::Bulk => {
            let mut s = TcpSocket::new(stack, TcpBuffers::with_capacity(TCP_RING, TCP_RING))
                .expect("socket");
            s.set_nodelay(w.kind == Kind::Tcp);
            s.connect(server).await.expect("connect");
            for seq in 0..total {
                if w.kind == Kind::Bulk && seq == w.warmup {
                    // No warm-up byte is counted: all of it acknowledged first.
                    s.flush().await.expect("flush");
                }
                count::begin_request(w.warmup, seq);
                tcp_send(&mut s, api, &w.req, seq, &mut buf).await;
                if w.resp.len() > 0 {
                    tcp_recv(&mut s, api, &w.resp, seq, &mut buf).await;
                }
            }
            // Bulk: everything written is acknowledged before the socket goes.
            s.flush().await.expect("flush");
        }
    }
    count::finish();
}

async fn server(stack: Stack, w: Workload, api: Api, udp: UdpImpl) {
    let mut buf = vec![0u8; APP_CHUNK];
    let total = w.warmup + w.requests;
    match w.kind {
        Kind::Udp => {
            let s = ZcUdp::bind(stack, PORT, udp);
            for seq in 0..total {
                let from = s.recv(api, &w.req, seq, &mut buf).await;
                count::set_window(Window::S2c);
                s.send(api, &w.resp, seq, from, &mut buf).await;
            }
        }
        Kind::Tcp | Kind::Bulk => {
            let mut s = TcpSocket::new(stack, TcpBuffers::with_capacity(TCP_RING, TCP_RING))
                .expect("socket");
            s.set_nodelay(w.kind == Kind::Tcp);
            s.accept(PORT).await.expect("accept");
            for seq in 0..total {
                tcp_recv(&mut s, api, &w.req, seq, &mut buf).await;
                if w.resp.len() > 0 {
                    count::set_window(Window::S2c);
                    tcp_send(&mut s, api, &w.resp, seq, &mut buf).await;
                }
            }
            s.flush().await.expect("flush");
        }
    }
    count::finish();
}

async fn tcp_send(s: &mut TcpSocket, api: Api, m: &Msg, seq: u64, buf: &mut [u8]) {
    let mut off = 0;
    while off < m.len() {
        match api {
            Api::Copy => {
                let k = (m.len() - off).min(buf.len());
                m.produce(&mut buf[..k], off, seq);
                s.write_all(&buf[..k]).await.expect("write");
                off += k;
            }
            Api::InPlace => {
                let left = m.len() - off;
                off += s
                    .write_with(|space| {
                        let k = space.len().min(left);
                        m.produce(&mut space[..k], off, seq);
                        (k, k)
                    })
                    .await
                    .expect("write_with");
            }
        }
    }
}

async fn tcp_recv(s: &mut TcpSocket, api: Api, m: &Msg, seq: u64, buf: &mut [u8]) {
    let mut off = 0;
    while off < m.len() {
        let left = m.len() - off;
        let n = match api {
            Api::Copy => {
                let k = left.min(buf.len());
                let n = s.read(&mut buf[..k]).await.expect("read");
                m.consume(&buf[..n], off, seq);
                n
            }
            Api::InPlace => s
                .read_with(|data| {
                    let k = data.len().min(left);
                    m.consume(&data[..k], off, seq);
                    (k, k)
                })
                .await
                .expect("read_with")
                .unwrap_or(0),
        };
        assert!(n > 0, "end of stream");
        off += n;
    }
}

/// The zcnet UDP workload's socket, either API.
enum ZcUdp {
    Datagram(DatagramSocket),
    Socket(UdpSocket),
}

impl ZcUdp {
    fn bind(stack: Stack, port: u16, udp: UdpImpl) -> Self {
        match udp {
            UdpImpl::Datagram => {
                let queue = DatagramQueue::with_capacity(UDP_PACKETS);
                Self::Datagram(DatagramSocket::bind(stack, port, queue).expect("bind"))
            }
            UdpImpl::SmoltcpSocket => {
                let buffers = UdpBuffers::with_capacity(UDP_PACKETS, UDP_BYTES);
                Self::Socket(UdpSocket::bind(stack, port, buffers).expect("bind"))
            }
        }
    }

    /// Sends message `seq` of `m` to `to`. `Copy`: produced in the application's buffer, then
    /// copied into the socket (`send_to`) or, zero-copy socket, by the application into the
    /// TX frame (one copy: the least an application with its own buffer makes). `InPlace`:
    /// produced in the socket's buffer (`send_to_with`) or in the TX frame itself.
    async fn send(&self, api: Api, m: &Msg, seq: u64, to: IpEndpoint, buf: &mut [u8]) {
        let n = m.len();
        match (self, api) {
            (Self::Datagram(s), Api::Copy) => {
                m.produce(&mut buf[..n], 0, seq);
                let mut f = s.tx_frame().await;
                f.append(n)
                    .expect("payload fits")
                    .copy_from_slice(&buf[..n]);
                s.send_to(f, to).await.expect("send_to");
            }
            (Self::Datagram(s), Api::InPlace) => {
                let mut f = s.tx_frame().await;
                m.produce(f.append(n).expect("payload fits"), 0, seq);
                s.send_to(f, to).await.expect("send_to");
            }
            (Self::Socket(s), Api::Copy) => {
                m.produce(&mut buf[..n], 0, seq);
                s.send_to(&buf[..n], to).await.expect("send_to");
            }
            (Self::Socket(s), Api::InPlace) => s
                .send_to_with(n, to, |b| m.produce(b, 0, seq))
                .await
                .expect("send_to_with"),
        }
    }

    /// Receives message `seq` of `m`; returns its sender. `Copy`: into the application's
    /// buffer (`recv_from`, or the application copying out of `Datagram::payload`), then
    /// verified there; `InPlace`: verified in the socket's buffer or the receive slot.
    async fn recv(&self, api: Api, m: &Msg, seq: u64, buf: &mut [u8]) -> IpEndpoint {
        match (self, api) {
            (Self::Datagram(s), Api::Copy) => {
                let d = s.recv().await;
                let n = d.payload().len();
                assert_eq!(n, m.len(), "datagram length");
                buf[..n].copy_from_slice(d.payload());
                let from = d.src();
                drop(d);
                m.consume(&buf[..n], 0, seq);
                from
            }
            (Self::Datagram(s), Api::InPlace) => {
                let d = s.recv().await;
                assert_eq!(d.payload().len(), m.len(), "datagram length");
                m.consume(d.payload(), 0, seq);
                d.src()
            }
            (Self::Socket(s), Api::Copy) => {
                let (n, from) = s.recv_from(buf).await.expect("recv_from");
                assert_eq!(n, m.len(), "datagram length");
                m.consume(&buf[..n], 0, seq);
                from
            }
            (Self::Socket(s), Api::InPlace) => {
                s.recv_from_with(|data, from| {
                    assert_eq!(data.len(), m.len(), "datagram length");
                    m.consume(data, 0, seq);
                    from
                })
                .await
            }
        }
    }
}
