//! Echo servers on zcnet (RFC 862, port 7): TCP (one task per connection, a listener with a
//! backlog) and UDP (one task, one socket).
//!
//! TCP data is echoed with `read` and `write_all` through a 16 KiB buffer: two copies per byte
//! in our code (socket→app, app→socket), both counted in the copy ledger.
//!
//! Each TCP connection has keep-alive on ([`EchoConfig::keep_alive`]), is closed when silent
//! for [`EchoConfig::idle_timeout`], and is reset when an echo cannot be written within
//! [`EchoConfig::write_timeout`] (a client that sends but never reads). With all
//! [`EchoConfig::max_connections`] taken, a new connection sheds the one that has waited
//! longest for data, once that is [`EchoConfig::shed_after`] ([`ConnLimit`]).
//!
//! UDP runs on either of the stack's datagram APIs, chosen by [`EchoConfig::udp`]:
//!
//! * [`UdpEcho::Copying`]: smoltcp's [`UdpSocket`]. A datagram is copied from the socket's
//!   buffer into a 64 KiB buffer of ours and from there into the socket again (`recv_from`,
//!   `send_to`); both copies are counted in the copy ledger.
//! * [`UdpEcho::ZeroCopy`]: zcnet's [`DatagramSocket`]. A datagram is lent to the echo in the
//!   driver's receive slot; the echo writes the reply straight into a transmit slot
//!   (`tx_frame`), the stack puts the headers in front of it, and that slot goes to the driver
//!   (`send_to`). The one copy, receive slot to transmit slot, is the echo's own (any reply
//!   must be written somewhere); zcnet copies nothing, so the copy ledger shows no UDP copies.
//!
//! ```
//! use zcnet_examples::echo::{EchoConfig, UdpEcho};
//!
//! // What a kernel over a zero-copy driver would pick.
//! let config = EchoConfig {
//!     udp: UdpEcho::ZeroCopy { queue: 32 },
//!     ..EchoConfig::default()
//! };
//! assert_eq!(config.port, 7);
//! ```

use alloc::sync::Arc;
use alloc::vec;
use core::future::Future;
use core::pin::pin;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use core::time::Duration;

use futures_util::future::select;

use zcnet_executor::time::{now, timeout};
use zcnet_executor::LocalSpawner;
use zcnet_stack::datagram::{DatagramQueue, DatagramSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpListener, TcpSocket};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::{Never, Stack, StackError};

use crate::limit::{keep_alive, ConnLimit, Permit};

/// The echo port.
pub const PORT: u16 = 7;

/// Which socket the UDP echo answers on (see the [module docs](self) for what each copies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpEcho {
    /// smoltcp's [`UdpSocket`] with a 64-datagram, 64 KiB receive buffer: two copies per
    /// datagram (socket→app, app→socket), both in the copy ledger. The default; what the TAP
    /// examples use.
    Copying,
    /// zcnet's zero-copy [`DatagramSocket`]: received datagrams stay in the driver's receive
    /// slots, replies are written once into transmit slots.
    ZeroCopy {
        /// Datagrams the socket may hold (each one a frame-pool slot) before further ones are
        /// dropped; at least 1. The echo frees each slot as soon as its reply is written, so a
        /// few places absorb a burst.
        queue: usize,
    },
}

/// How to run the echo servers.
#[derive(Clone, Debug)]
pub struct EchoConfig {
    /// Port for both TCP and UDP.
    pub port: u16,
    /// Listening TCP sockets, 1..=64.
    pub backlog: usize,
    /// TCP connections served at once; when all are taken, a new one sheds the connection
    /// waiting longest for data.
    pub max_connections: usize,
    /// A TCP connection silent this long is closed.
    pub idle_timeout: Duration,
    /// Each echo must be written within this long, else the connection is reset.
    pub write_timeout: Duration,
    /// TCP keep-alive interval of each connection (see [`keep_alive`]).
    pub keep_alive: Duration,
    /// With every place taken, a connection silent this long may be shed for a new one.
    pub shed_after: Duration,
    /// The socket the UDP echo uses.
    pub udp: UdpEcho,
}

impl Default for EchoConfig {
    fn default() -> Self {
        EchoConfig {
            port: PORT,
            backlog: 8,
            max_connections: 32,
            idle_timeout: Duration::from_secs(300),
            write_timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(60),
            shed_after: Duration::from_secs(1),
            udp: UdpEcho::Copying,
        }
    }
}

fn echo_buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(16384, 16384))
}

#[derive(Debug, Default)]
struct Counters {
    tcp_connections: AtomicU64,
    tcp_bytes: AtomicU64,
    udp_datagrams: AtomicU64,
    udp_bytes: AtomicU64,
}

/// What the echo servers did; clone it to read it while they run.
#[derive(Clone, Debug, Default)]
pub struct EchoStats(Arc<Counters>);

/// A reading of [`EchoStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EchoStatsSnapshot {
    /// TCP connections accepted.
    pub tcp_connections: u64,
    /// Bytes echoed over TCP.
    pub tcp_bytes: u64,
    /// UDP datagrams echoed.
    pub udp_datagrams: u64,
    /// UDP payload bytes echoed.
    pub udp_bytes: u64,
}

impl EchoStats {
    /// The counts now.
    pub fn get(&self) -> EchoStatsSnapshot {
        let c = &self.0;
        EchoStatsSnapshot {
            tcp_connections: c.tcp_connections.load(Relaxed),
            tcp_bytes: c.tcp_bytes.load(Relaxed),
            udp_datagrams: c.udp_datagrams.load(Relaxed),
            udp_bytes: c.udp_bytes.load(Relaxed),
        }
    }
}

/// The bound UDP socket, of the kind [`EchoConfig::udp`] asked for.
#[derive(Debug)]
enum UdpSock {
    Copying(UdpSocket),
    ZeroCopy(DatagramSocket),
}

/// Bound TCP and UDP echo sockets; [`run`](Self::run) serves forever.
#[derive(Debug)]
pub struct EchoServer {
    stack: Stack,
    listener: TcpListener,
    udp: UdpSock,
    config: EchoConfig,
    stats: EchoStats,
}

impl EchoServer {
    /// Binds TCP and UDP `config.port` (UDP on the socket `config.udp` names). Errors when the
    /// stack has too few free socket slots (for a zero-copy socket: when
    /// [`MAX_DATAGRAM_SOCKETS`](zcnet_stack::datagram::MAX_DATAGRAM_SOCKETS) are bound), the
    /// port is taken, or a zero-copy queue of 0 places was asked for
    /// ([`StackError::NoBuffers`]).
    pub fn bind(stack: Stack, config: EchoConfig) -> Result<EchoServer, StackError> {
        let listener = TcpListener::bind(stack, config.port, config.backlog, echo_buffers)?;
        let udp = match config.udp {
            UdpEcho::Copying => UdpSock::Copying(UdpSocket::bind(
                stack,
                config.port,
                UdpBuffers::with_capacity(64, 65536),
            )?),
            UdpEcho::ZeroCopy { queue } => UdpSock::ZeroCopy(DatagramSocket::bind(
                stack,
                config.port,
                DatagramQueue::with_capacity(queue),
            )?),
        };
        Ok(EchoServer {
            stack,
            listener,
            udp,
            config,
            stats: EchoStats::default(),
        })
    }

    /// A handle on the counters.
    pub fn stats(&self) -> EchoStats {
        self.stats.clone()
    }

    /// Serves until the stack shuts down: the UDP echo in its own task (which ends then too),
    /// TCP connections one task each (which end as their connections fail).
    pub async fn run(self, spawner: LocalSpawner) {
        let EchoServer {
            stack,
            mut listener,
            udp,
            config,
            stats,
        } = self;
        let udp_stats = stats.clone();
        match udp {
            UdpSock::Copying(udp) => {
                spawner.spawn(until_shut_down(stack, udp_echo(udp, udp_stats)))
            }
            UdpSock::ZeroCopy(udp) => {
                spawner.spawn(until_shut_down(stack, udp_echo_zero_copy(udp, udp_stats)))
            }
        };
        let limit = ConnLimit::new(config.max_connections);
        loop {
            // Fails only once the stack is shut down.
            let Ok(sock) = listener.accept().await else {
                return;
            };
            let permit = limit.acquire_shedding(config.shed_after).await;
            stats.0.tcp_connections.fetch_add(1, Relaxed);
            let stats = stats.clone();
            let config = config.clone();
            spawner.spawn(async move {
                tcp_echo(sock, &config, &permit, &stats).await;
                drop(permit);
            });
        }
    }
}

/// Runs `task` until it ends or `stack` shuts down (a datagram receive waits through a
/// shutdown: nothing fails it).
async fn until_shut_down(stack: Stack, task: impl Future<Output = Never>) {
    let task = pin!(task);
    let stop = pin!(stack.wait_shut_down());
    let _ = select(task, stop).await;
}

async fn tcp_echo(mut sock: TcpSocket, config: &EchoConfig, permit: &Permit, stats: &EchoStats) {
    keep_alive(&mut sock, config.keep_alive);
    let mut buf = vec![0u8; 16384];
    loop {
        permit.waiting(now().await);
        let read = permit
            .unless_shed(timeout(config.idle_timeout, sock.read(&mut buf)))
            .await;
        let n = match read {
            Ok(Ok(Ok(n))) if n > 0 => n,
            // Shed for a new connection.
            Err(_) => {
                sock.abort();
                return;
            }
            // End of stream, an error, or idle too long.
            _ => break,
        };
        permit.working();
        match timeout(config.write_timeout, sock.write_all(&buf[..n])).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return,
            Err(_) => {
                // The client does not read: reset rather than hold its data.
                sock.abort();
                return;
            }
        }
        stats.0.tcp_bytes.fetch_add(n as u64, Relaxed);
    }
    // The peer is done sending (or went quiet): finish our side; drop closes gracefully.
    sock.close();
}

/// The UDP echo on smoltcp's socket: two copies per datagram, through `buf`.
async fn udp_echo(udp: UdpSocket, stats: EchoStats) -> Never {
    let mut buf = vec![0u8; 65536];
    loop {
        let Ok((n, from)) = udp.recv_from(&mut buf).await else {
            continue;
        };
        // A datagram that cannot be sent (no route, buffer full) is dropped, as UDP may.
        if udp.send_to(&buf[..n], from).await.is_ok() {
            stats.0.udp_datagrams.fetch_add(1, Relaxed);
            stats.0.udp_bytes.fetch_add(n as u64, Relaxed);
        }
    }
}

/// The UDP echo on the zero-copy socket: the datagram is read in its receive slot and copied
/// once, into the transmit slot the reply is sent from.
async fn udp_echo_zero_copy(sock: DatagramSocket, stats: EchoStats) -> Never {
    loop {
        let d = sock.recv().await;
        let n = d.payload().len();
        let mut reply = sock.tx_frame().await;
        // A payload larger than a transmit slot's room (a jumbo datagram on a pool with smaller
        // slots) cannot be echoed: dropped, as UDP may; both slots return to the pool.
        let Ok(out) = reply.append(n) else {
            continue;
        };
        out.copy_from_slice(d.payload());
        let to = d.src();
        // The receive slot goes back to the pool before the send may wait for ARP / NDP.
        drop(d);
        // A reply that cannot be sent (no route, neighbour silent, driver refused) is dropped,
        // as UDP may; the stack counts the drop.
        if sock.send_to(reply, to).await.is_ok() {
            stats.0.udp_datagrams.fetch_add(1, Relaxed);
            stats.0.udp_bytes.fetch_add(n as u64, Relaxed);
        }
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use crate::stack_demo::{pair, ADDR};
    use alloc::vec::Vec;
    use zcnet_stack::tcp::TcpBuffers;
    use zcnet_stack::IpEndpoint;

    /// A client that sends and never reads: the echo's write waits for the client's window,
    /// then passes its deadline (1 s here), and the server resets the connection; the
    /// client's blocked write fails. Over the in-memory wire on a virtual clock.
    #[test]
    fn an_echo_the_client_never_reads_is_reset_at_the_write_deadline() {
        use zcnet_stack::tcp::TcpError;

        let p = pair(512, |_, _| {});
        let [a, b] = p.stacks;
        let config = EchoConfig {
            write_timeout: Duration::from_secs(1),
            ..EchoConfig::default()
        };
        let server = EchoServer::bind(a, config).expect("bind port 7");
        p.exec
            .local_spawner()
            .spawn(server.run(p.exec.local_spawner()));
        let r = p.exec.block_on(async move {
            let mut c = TcpSocket::new(b, TcpBuffers::with_capacity(4096, 16384)).unwrap();
            c.connect((ADDR[0], PORT)).await.unwrap();
            let data = vec![1u8; 1 << 20];
            timeout(Duration::from_secs(60), c.write_all(&data)).await
        });
        assert_eq!(r, Ok(Err(TcpError::ConnectionReset)));
    }

    /// The UDP echo on the zero-copy socket, against smoltcp's socket on a second stack over
    /// the in-memory wire: every datagram comes back byte-exact, and every receive slot lent to
    /// the echo returns to the pool.
    #[test]
    fn zero_copy_udp_echo_answers_byte_exact() {
        let p = pair(512, |_, _| {});
        let [a, b] = p.stacks;
        let config = EchoConfig {
            udp: UdpEcho::ZeroCopy { queue: 8 },
            ..EchoConfig::default()
        };
        let server = EchoServer::bind(a, config).expect("bind port 7");
        let stats = server.stats();
        p.exec
            .local_spawner()
            .spawn(server.run(p.exec.local_spawner()));
        let sizes: Vec<usize> = (0..20).map(|i| 1 + i * 73).collect();
        let sent = sizes.clone();
        p.exec.block_on(async move {
            let client = UdpSocket::bind(b, 4000, UdpBuffers::with_capacity(8, 4096)).unwrap();
            let mut buf = vec![0u8; 2048];
            for (i, &size) in sent.iter().enumerate() {
                let msg: Vec<u8> = (0..size).map(|j| (i * 31 + j) as u8).collect();
                client.send_to(&msg, (ADDR[0], PORT)).await.unwrap();
                let (n, from) = timeout(Duration::from_secs(5), client.recv_from(&mut buf))
                    .await
                    .expect("echo within 5 s")
                    .unwrap();
                assert_eq!(&buf[..n], &msg[..], "datagram {i}");
                assert_eq!(from, IpEndpoint::new(ADDR[0].into(), PORT));
            }
        });
        let s = stats.get();
        assert_eq!(s.udp_datagrams, 20, "{s:?}");
        assert_eq!(s.udp_bytes, sizes.iter().sum::<usize>() as u64, "{s:?}");
        // Both ways through the zero-copy path, not smoltcp's UDP.
        let zc = a.stats();
        assert_eq!((zc.datagrams_in, zc.datagrams_out), (20, 20), "{zc:?}");
        assert_eq!(p.pools[0].occupancy().lent, 0);
    }
}
