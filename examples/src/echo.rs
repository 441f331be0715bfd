//! Echo servers on zcnet (RFC 862, port 7): TCP (one task per connection, a listener with a
//! backlog) and UDP (one task, one socket).
//!
//! TCP data is echoed with `read` and `write_all` through a 16 KiB buffer: two copies per byte
//! in our code (socket→app, app→socket), both counted in the copy ledger.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use zcnet_executor::time::timeout;
use zcnet_executor::Spawner;
use zcnet_stack::tcp::{TcpBuffers, TcpListener, TcpSocket};
use zcnet_stack::udp::{UdpBuffers, UdpSocket};
use zcnet_stack::{Never, Stack, StackError};

use crate::limit::ConnLimit;

/// The echo port.
pub const PORT: u16 = 7;

/// How to run the echo servers.
#[derive(Clone, Debug)]
pub struct EchoConfig {
    /// Port for both TCP and UDP.
    pub port: u16,
    /// Listening TCP sockets, 1..=64.
    pub backlog: usize,
    /// TCP connections served at once.
    pub max_connections: usize,
    /// A TCP connection silent this long is closed.
    pub idle_timeout: Duration,
}

impl Default for EchoConfig {
    fn default() -> Self {
        EchoConfig {
            port: PORT,
            backlog: 8,
            max_connections: 32,
            idle_timeout: Duration::from_secs(300),
        }
    }
}

fn echo_buffers() -> Option<TcpBuffers> {
    Some(TcpBuffers::with_capacity(65536, 65536))
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

/// Bound TCP and UDP echo sockets; [`run`](Self::run) serves forever.
#[derive(Debug)]
pub struct EchoServer {
    listener: TcpListener,
    udp: UdpSocket,
    config: EchoConfig,
    stats: EchoStats,
}

impl EchoServer {
    /// Binds TCP and UDP `config.port`. Errors when the stack has too few free socket slots or
    /// the port is taken.
    pub fn bind(stack: Stack, config: EchoConfig) -> Result<EchoServer, StackError> {
        let listener = TcpListener::bind(stack, config.port, config.backlog, echo_buffers)?;
        let udp = UdpSocket::bind(stack, config.port, UdpBuffers::with_capacity(64, 65536))?;
        Ok(EchoServer {
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

    /// Serves forever: the UDP echo in its own task, TCP connections one task each.
    pub async fn run(self, spawner: Spawner) -> Never {
        let EchoServer {
            mut listener,
            udp,
            config,
            stats,
        } = self;
        let udp_stats = stats.clone();
        spawner.spawn(udp_echo(udp, udp_stats));
        let limit = ConnLimit::new(config.max_connections);
        loop {
            let sock = listener.accept().await;
            let permit = limit.acquire().await;
            stats.0.tcp_connections.fetch_add(1, Relaxed);
            let stats = stats.clone();
            let idle = config.idle_timeout;
            spawner.spawn(async move {
                tcp_echo(sock, idle, &stats).await;
                drop(permit);
            });
        }
    }
}

async fn tcp_echo(mut sock: TcpSocket, idle: Duration, stats: &EchoStats) {
    let mut buf = vec![0u8; 16384];
    loop {
        let n = match timeout(idle, sock.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            // End of stream, an error, or idle too long.
            _ => break,
        };
        if sock.write_all(&buf[..n]).await.is_err() {
            return;
        }
        stats.0.tcp_bytes.fetch_add(n as u64, Relaxed);
    }
    // The peer is done sending (or went quiet): finish our side; drop closes gracefully.
    sock.close();
}

async fn udp_echo(udp: UdpSocket, stats: EchoStats) {
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
