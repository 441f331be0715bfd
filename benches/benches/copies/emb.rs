//! embassy-net 0.9.1 (on smoltcp 0.13): two stacks over the in-memory [`link`](crate::link),
//! each with its runner, plus a client and a server task, on a small single-threaded executor
//! of this file that polls a task only when its waker fired, and an embassy-time driver on
//! virtual time (when no task is ready, the clock jumps to the earliest alarm), so embassy runs
//! on virtual time like the other two sides and no timer thread exists while counting.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use embassy_net::tcp::TcpSocket;
use embassy_net::udp::{PacketMetadata, UdpSocket};
use embassy_net::{IpEndpoint, Ipv4Address, Ipv4Cidr, Stack, StackResources, StaticConfigV4};

use crate::app::{Api, Kind, Msg, Workload, APP_CHUNK, PORT, TCP_RING, UDP_BYTES, UDP_PACKETS};
use crate::count::{self, Host, Layer, Scope, Scoped, Window};
use crate::link::{EmbDev, Link};

// ---- virtual time ----------------------------------------------------------------------------
// The crate's embassy-time driver in virtual mode (`zcnet_benches::embassy_clock`).

use zcnet_benches::embassy_clock::fire_next_alarm;

// ---- a minimal executor ----------------------------------------------------------------------

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

struct Task<'a> {
    fut: Pin<Box<dyn Future<Output = ()> + 'a>>,
    flag: Arc<Flag>,
    waker: Waker,
    done: bool,
}

/// Polls woken tasks until the tasks in `must_finish` are done; when nothing is woken, moves
/// virtual time to the next alarm.
fn run_tasks(tasks: Vec<Pin<Box<dyn Future<Output = ()> + '_>>>, must_finish: &[usize]) {
    let mut tasks: Vec<Task<'_>> = tasks
        .into_iter()
        .map(|fut| {
            let flag = Arc::new(Flag(AtomicBool::new(true)));
            Task {
                fut,
                waker: Waker::from(flag.clone()),
                flag,
                done: false,
            }
        })
        .collect();
    while !must_finish.iter().all(|&i| tasks[i].done) {
        let mut polled = false;
        for t in tasks.iter_mut().filter(|t| !t.done) {
            if t.flag.0.swap(false, Ordering::Relaxed) {
                polled = true;
                let mut cx = Context::from_waker(&t.waker);
                t.done = t.fut.as_mut().poll(&mut cx).is_ready();
            }
        }
        if !polled {
            assert!(
                fire_next_alarm(),
                "embassy-net run stalled: no task ready, no alarm set (tasks done: {:?})",
                tasks.iter().map(|t| t.done).collect::<Vec<_>>()
            );
            assert!(
                zcnet_benches::embassy_clock::virtual_now() < 3600 * embassy_time_driver::TICK_HZ,
                "embassy-net run stalled for an hour of virtual time"
            );
        }
    }
}

// ---- the run ----------------------------------------------------------------------------------

const CLIENT_PORT: u16 = 49152;
const ADDR: [Ipv4Address; 2] = [Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2)];
const HOSTS: [Host; 2] = [Host::Client, Host::Server];

/// Runs `w` with `api`; counting is switched on and off by the applications.
pub fn run(w: Workload, api: Api) {
    let (a, b) = Link::pair();
    let link = a.link();
    let mut res = [StackResources::<1>::new(), StackResources::<1>::new()];
    let [ra, rb] = &mut res;
    let mut stacks = Vec::new();
    let mut tasks: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
    for (i, (end, resources)) in [(a, ra), (b, rb)].into_iter().enumerate() {
        let config = embassy_net::Config::ipv4_static(StaticConfigV4 {
            address: Ipv4Cidr::new(ADDR[i], 24),
            gateway: None,
            dns_servers: Default::default(),
        });
        let (stack, mut runner) =
            embassy_net::new(EmbDev(end), config, resources, 0x1234 + i as u64);
        stacks.push(stack);
        tasks.push(Box::pin(Scoped::new(
            Scope::of(HOSTS[i], Layer::Stack),
            async move {
                runner.run().await;
            },
        )));
    }
    let (sa, sb) = (stacks[0], stacks[1]);
    tasks.push(Box::pin(Scoped::new(
        Scope::of(Host::Client, Layer::App),
        client(sa, w, api),
    )));
    tasks.push(Box::pin(Scoped::new(
        Scope::of(Host::Server, Layer::App),
        server(sb, w, api),
    )));
    run_tasks(tasks, &[2, 3]);
    assert_eq!(link.dropped(), 0, "the link dropped frames");
}

async fn client(stack: Stack<'_>, w: Workload, api: Api) {
    stack.wait_config_up().await;
    let server = IpEndpoint::new(ADDR[1].into(), PORT);
    let mut buf = vec![0u8; APP_CHUNK];
    let total = w.warmup + w.requests;
    match w.kind {
        Kind::Udp => {
            let mut mem = UdpMem::new();
            let mut s = mem.socket(stack, CLIENT_PORT);
            for seq in 0..total {
                count::begin_request(w.warmup, seq);
                udp_send(&mut s, api, &w.req, seq, server, &mut buf).await;
                udp_recv(&mut s, api, &w.resp, seq, &mut buf).await;
            }
        }
        Kind::Tcp | Kind::Bulk => {
            let (mut rx, mut tx) = (vec![0u8; TCP_RING], vec![0u8; TCP_RING]);
            let mut s = TcpSocket::new(stack, &mut rx, &mut tx);
            s.set_nagle_enabled(w.kind != Kind::Tcp);
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

async fn server(stack: Stack<'_>, w: Workload, api: Api) {
    stack.wait_config_up().await;
    let mut buf = vec![0u8; APP_CHUNK];
    let total = w.warmup + w.requests;
    match w.kind {
        Kind::Udp => {
            let mut mem = UdpMem::new();
            let mut s = mem.socket(stack, PORT);
            for seq in 0..total {
                let from = udp_recv(&mut s, api, &w.req, seq, &mut buf).await;
                count::set_window(Window::S2c);
                udp_send(&mut s, api, &w.resp, seq, from, &mut buf).await;
            }
            // Dropping the socket discards what it has not sent yet.
            s.flush().await;
        }
        Kind::Tcp | Kind::Bulk => {
            let (mut rx, mut tx) = (vec![0u8; TCP_RING], vec![0u8; TCP_RING]);
            let mut s = TcpSocket::new(stack, &mut rx, &mut tx);
            s.set_nagle_enabled(w.kind != Kind::Tcp);
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

/// A UDP socket's buffers.
struct UdpMem {
    rx_meta: Vec<PacketMetadata>,
    rx: Vec<u8>,
    tx_meta: Vec<PacketMetadata>,
    tx: Vec<u8>,
}

impl UdpMem {
    fn new() -> Self {
        Self {
            rx_meta: vec![PacketMetadata::EMPTY; UDP_PACKETS],
            rx: vec![0u8; UDP_BYTES],
            tx_meta: vec![PacketMetadata::EMPTY; UDP_PACKETS],
            tx: vec![0u8; UDP_BYTES],
        }
    }

    fn socket<'a>(&'a mut self, stack: Stack<'a>, port: u16) -> UdpSocket<'a> {
        let mut s = UdpSocket::new(
            stack,
            &mut self.rx_meta,
            &mut self.rx,
            &mut self.tx_meta,
            &mut self.tx,
        );
        s.bind(port).expect("bind");
        s
    }
}

async fn udp_send(
    s: &mut UdpSocket<'_>,
    api: Api,
    m: &Msg,
    seq: u64,
    to: IpEndpoint,
    buf: &mut [u8],
) {
    match api {
        Api::Copy => {
            m.produce(&mut buf[..m.len()], 0, seq);
            s.send_to(&buf[..m.len()], to).await.expect("send_to");
        }
        Api::InPlace => s
            .send_to_with(m.len(), to, |b| {
                m.produce(&mut b[..m.len()], 0, seq);
                (m.len(), ())
            })
            .await
            .expect("send_to_with"),
    }
}

async fn udp_recv(
    s: &mut UdpSocket<'_>,
    api: Api,
    m: &Msg,
    seq: u64,
    buf: &mut [u8],
) -> IpEndpoint {
    match api {
        Api::Copy => {
            let (n, meta) = s.recv_from(buf).await.expect("recv_from");
            assert_eq!(n, m.len(), "datagram length");
            m.consume(&buf[..n], 0, seq);
            meta.endpoint
        }
        Api::InPlace => {
            s.recv_from_with(|data, meta| {
                assert_eq!(data.len(), m.len(), "datagram length");
                m.consume(data, 0, seq);
                meta.endpoint
            })
            .await
        }
    }
}

async fn tcp_send(s: &mut TcpSocket<'_>, api: Api, m: &Msg, seq: u64, buf: &mut [u8]) {
    let mut off = 0;
    while off < m.len() {
        match api {
            Api::Copy => {
                let k = (m.len() - off).min(buf.len());
                m.produce(&mut buf[..k], off, seq);
                let mut sent = 0;
                while sent < k {
                    sent += s.write(&buf[sent..k]).await.expect("write");
                }
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

async fn tcp_recv(s: &mut TcpSocket<'_>, api: Api, m: &Msg, seq: u64, buf: &mut [u8]) {
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
                .expect("read_with"),
        };
        assert!(n > 0, "end of stream");
        off += n;
    }
}
