//! Plain smoltcp 0.14: two interfaces over the in-memory [`link`](crate::link), each with its
//! own socket set, driven as smoltcp's examples drive one: poll each interface, let the
//! applications use their sockets, and when nothing moved, "wait" the smaller `poll_delay`
//! (virtual time, as on the zcnet side). The applications are state machines stepped after
//! every round of polls; with [`Api::Copy`] they use `send_slice` / `recv_slice`, with
//! [`Api::InPlace`] the closure forms (`send(|buf| ..)` / `recv(|buf| ..)` for TCP,
//! `send_with` / `recv` for UDP).

use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet, SocketStorage};
use smoltcp::socket::{tcp, udp};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, IpEndpoint};
use zcnet_tests::net::ADDR;

use crate::app::{Api, Kind, Msg, Workload, APP_CHUNK, PORT, TCP_RING, UDP_BYTES, UDP_PACKETS};
use crate::count::{self, enter, Host, Layer, Scope, Window};
use crate::link::{Link, SmolDev};

const CLIENT_PORT: u16 = 49152;

/// One step of an application's script.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Client: the hook before request `seq` (starts counting after the warm-up, window c→s).
    Begin(u64),
    /// Server: the window turns to s→c.
    Respond,
    /// Client, bulk, before counting starts: wait until everything sent is acknowledged, so
    /// no warm-up byte is counted.
    Settle,
    Send(Msg, u64),
    Recv(Msg, u64),
}

fn script(w: &Workload, host: Host) -> Vec<Op> {
    let mut v = Vec::new();
    for seq in 0..w.warmup + w.requests {
        match host {
            Host::Client => {
                if w.kind == Kind::Bulk && seq == w.warmup {
                    v.push(Op::Settle);
                }
                v.push(Op::Begin(seq));
                v.push(Op::Send(w.req, seq));
                if w.resp.len() > 0 {
                    v.push(Op::Recv(w.resp, seq));
                }
            }
            Host::Server => {
                v.push(Op::Recv(w.req, seq));
                if w.resp.len() > 0 {
                    v.push(Op::Respond);
                    v.push(Op::Send(w.resp, seq));
                }
            }
        }
    }
    v
}

/// One host: interface, device, sockets, and its application's state.
struct Side {
    host: Host,
    iface: Interface,
    dev: SmolDev,
    sockets: SocketSet<'static>,
    sock: SocketHandle,
    script: Vec<Op>,
    pc: usize,
    /// Progress in the current message.
    off: usize,
    /// Copy API, sending: the part of the message produced in `buf` (`chunk_at..+chunk_len`).
    chunk_at: usize,
    chunk_len: usize,
    buf: Vec<u8>,
    /// UDP: where the reply goes (the server learns it from the request).
    peer: Option<IpEndpoint>,
    /// Requests before counting starts.
    warmup: u64,
    done: bool,
}

impl Side {
    fn new(host: Host, end: crate::link::LinkEnd, w: &Workload, api_kind: Kind) -> Side {
        let i = host as usize;
        let mut dev = SmolDev(end);
        let mut config = Config::new(EthernetAddress(dev.0.mac()).into());
        config.random_seed = 0x1234 + i as u64;
        let mut iface = Interface::new(config, &mut dev, Instant::ZERO);
        iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(ADDR[i].into(), 24)).expect("address");
        });
        let mut sockets = SocketSet::new(vec![SocketStorage::EMPTY]);
        let sock = match api_kind {
            Kind::Udp => {
                let buf = || {
                    udp::PacketBuffer::new(
                        vec![udp::PacketMetadata::EMPTY; UDP_PACKETS],
                        vec![0u8; UDP_BYTES],
                    )
                };
                let mut s = udp::Socket::new(buf(), buf());
                s.bind(if host == Host::Client {
                    CLIENT_PORT
                } else {
                    PORT
                })
                .expect("bind");
                sockets.add(s)
            }
            Kind::Tcp | Kind::Bulk => {
                let mut s = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0u8; TCP_RING]),
                    tcp::SocketBuffer::new(vec![0u8; TCP_RING]),
                );
                s.set_nagle_enabled(api_kind != Kind::Tcp);
                match host {
                    Host::Server => s.listen(PORT).expect("listen"),
                    Host::Client => s
                        .connect(
                            iface.context(),
                            IpEndpoint::new(IpAddress::Ipv4(ADDR[1]), PORT),
                            CLIENT_PORT,
                        )
                        .expect("connect"),
                }
                sockets.add(s)
            }
        };
        Side {
            host,
            iface,
            dev,
            sockets,
            sock,
            script: script(w, host),
            pc: 0,
            off: 0,
            chunk_at: 0,
            chunk_len: 0,
            buf: vec![0u8; APP_CHUNK],
            peer: (host == Host::Client).then(|| IpEndpoint::new(IpAddress::Ipv4(ADDR[1]), PORT)),
            warmup: w.warmup,
            done: false,
        }
    }

    /// One `iface.poll()` in the host's stack scope; whether anything happened.
    fn poll(&mut self, now: Instant) -> bool {
        let _g = enter(Scope::of(self.host, Layer::Stack));
        self.iface.poll(now, &mut self.dev, &mut self.sockets) != PollResult::None
    }

    /// Runs the application until it would block; whether it made progress.
    fn step(&mut self, kind: Kind, api: Api) -> bool {
        let _g = enter(Scope::of(self.host, Layer::App));
        let mut progressed = false;
        while let Some(&op) = self.script.get(self.pc) {
            let complete = match op {
                Op::Begin(seq) => {
                    count::begin_request(self.warmup, seq);
                    true
                }
                Op::Respond => {
                    count::set_window(Window::S2c);
                    true
                }
                Op::Settle => self.tcp().send_queue() == 0,
                Op::Send(m, seq) => {
                    let n = match kind {
                        Kind::Udp => self.udp_send(api, &m, seq),
                        _ => self.tcp_send(api, &m, seq),
                    };
                    if n == 0 {
                        false
                    } else {
                        self.off += n;
                        self.off == m.len()
                    }
                }
                Op::Recv(m, seq) => {
                    let n = match kind {
                        Kind::Udp => self.udp_recv(api, &m, seq),
                        _ => self.tcp_recv(api, &m, seq),
                    };
                    if n == 0 {
                        false
                    } else {
                        self.off += n;
                        self.off == m.len()
                    }
                }
            };
            if !complete {
                break;
            }
            progressed = true;
            self.pc += 1;
            self.off = 0;
            self.chunk_at = 0;
            self.chunk_len = 0;
        }
        if self.pc == self.script.len() && !self.done {
            self.done = true;
            progressed = true;
            count::finish();
        }
        progressed
    }

    fn tcp(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.sock)
    }

    fn tcp_send(&mut self, api: Api, m: &Msg, seq: u64) -> usize {
        let off = self.off;
        let left = m.len() - off;
        match api {
            Api::Copy => {
                if off == self.chunk_at + self.chunk_len {
                    let k = left.min(APP_CHUNK);
                    m.produce(&mut self.buf[..k], off, seq);
                    (self.chunk_at, self.chunk_len) = (off, k);
                }
                let (from, to) = (off - self.chunk_at, self.chunk_len);
                let s = self.sockets.get_mut::<tcp::Socket>(self.sock);
                if !s.can_send() {
                    return 0;
                }
                s.send_slice(&self.buf[from..to]).expect("send_slice")
            }
            Api::InPlace => {
                let s = self.tcp();
                if !s.can_send() {
                    return 0;
                }
                s.send(|space| {
                    let k = space.len().min(left);
                    m.produce(&mut space[..k], off, seq);
                    (k, k)
                })
                .expect("send")
            }
        }
    }

    fn tcp_recv(&mut self, api: Api, m: &Msg, seq: u64) -> usize {
        let off = self.off;
        let left = m.len() - off;
        let s = self.sockets.get_mut::<tcp::Socket>(self.sock);
        if !s.can_recv() {
            return 0;
        }
        match api {
            Api::Copy => {
                let k = left.min(APP_CHUNK);
                let n = s.recv_slice(&mut self.buf[..k]).expect("recv_slice");
                m.consume(&self.buf[..n], off, seq);
                n
            }
            Api::InPlace => s
                .recv(|data| {
                    let k = data.len().min(left);
                    m.consume(&data[..k], off, seq);
                    (k, k)
                })
                .expect("recv"),
        }
    }

    fn udp_send(&mut self, api: Api, m: &Msg, seq: u64) -> usize {
        let to = self
            .peer
            .expect("the server replies to the request's sender");
        let s = self.sockets.get_mut::<udp::Socket>(self.sock);
        if !s.can_send() {
            return 0;
        }
        match api {
            Api::Copy => {
                m.produce(&mut self.buf[..m.len()], 0, seq);
                s.send_slice(&self.buf[..m.len()], to).expect("send_slice");
            }
            Api::InPlace => {
                s.send_with(m.len(), to, |b| {
                    m.produce(b, 0, seq);
                    b.len()
                })
                .expect("send_with");
            }
        }
        m.len()
    }

    fn udp_recv(&mut self, api: Api, m: &Msg, seq: u64) -> usize {
        let s = self.sockets.get_mut::<udp::Socket>(self.sock);
        if !s.can_recv() {
            return 0;
        }
        let from = match api {
            Api::Copy => {
                let (n, meta) = s.recv_slice(&mut self.buf).expect("recv_slice");
                assert_eq!(n, m.len(), "datagram length");
                m.consume(&self.buf[..n], 0, seq);
                meta.endpoint
            }
            Api::InPlace => {
                let (data, meta) = s.recv().expect("recv");
                assert_eq!(data.len(), m.len(), "datagram length");
                m.consume(data, 0, seq);
                meta.endpoint
            }
        };
        self.peer = Some(from);
        m.len()
    }
}

/// Runs `w` with `api`; counting is switched on and off by the applications.
pub fn run(w: Workload, api: Api) {
    let (a, b) = Link::pair();
    let link = a.link();
    let mut c = Side::new(Host::Client, a, &w, w.kind);
    let mut s = Side::new(Host::Server, b, &w, w.kind);
    let mut now = Instant::ZERO;
    // Connection set-up (TCP) before the script starts.
    if w.kind != Kind::Udp {
        loop {
            let moved = c.poll(now) | s.poll(now);
            let up = c.tcp().may_send() && s.tcp().may_recv();
            if up {
                break;
            }
            if !moved {
                now += Duration::from_millis(1);
            }
        }
    }
    while !(c.done && s.done) {
        let mut moved = c.poll(now) | s.poll(now);
        moved |= c.step(w.kind, api);
        moved |= s.step(w.kind, api);
        if !moved {
            let d = [&mut c, &mut s]
                .into_iter()
                .filter_map(|x| x.iface.poll_delay(now, &x.sockets))
                .min()
                .unwrap_or(Duration::from_millis(1))
                .max(Duration::from_millis(1));
            now += d;
            assert!(
                now < Instant::from_secs(3600),
                "smoltcp run stalled ({}, {:?})",
                w.name,
                api
            );
        }
    }
    assert_eq!(link.dropped(), 0, "the link dropped frames");
}
