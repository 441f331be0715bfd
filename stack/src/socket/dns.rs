//! DNS: [`DnsSocket`] resolves names to IPv4 (A) or IPv6 (AAAA) addresses through the
//! servers in [`Config::dns_servers`](crate::Config::dns_servers), using smoltcp's DNS socket.
//!
//! ```ignore
//! let dns = DnsSocket::with_capacity(stack, 4)?;
//! let addrs = dns.resolve("example.org", DnsKind::A).await?;
//! ```
//!
//! # Limits (smoltcp features chosen by zcnet-stack)
//!
//! * Up to [`MAX_DNS_SERVERS`] (3) servers (`dns-max-server-count-3`).
//!   smoltcp asks them in order, moving on when one has been silent for about ten seconds.
//! * Up to [`MAX_DNS_RESULTS`] (4) addresses per answer (`dns-max-result-count-4`); further
//!   records in the same answer are ignored.
//! * Names up to 255 bytes in wire format (smoltcp's default); labels up to 63 bytes.
//! * CNAME chains in the answer are followed; there is no search path and no cache.
//!
//! # Errors: why a name did not resolve
//!
//! smoltcp reports one kind of failure, for "no such name" (NXDOMAIN), "no record of that kind"
//! and error answers alike, and also once every server has been silent for ~10 s each. zcnet
//! keeps its own time limit below that silence (see [`DnsSocket::resolve_timeout`]), so a
//! failure reported *within* the limit always means a server answered without an address:
//! [`DnsError::NotFound`]. No answer in time is [`DnsError::TimedOut`]. Servers that cannot be
//! reached at all are found before anything is sent: [`DnsError::NoServers`],
//! [`DnsError::Failed`].
//!
//! # Answers
//!
//! A query's answer is taken only from port 53 of the server the query was sent to (ingress
//! reads the server off the query as it leaves, `ip/asked.rs`), to the query's port, with the
//! query's transaction ID. smoltcp alone would also take it from any of the servers, and from
//! anyone's port 5353 (multicast DNS, which zcnet never asks); ingress drops those before
//! smoltcp sees them, counted as [`DropReason::UnexpectedAnswer`](crate::DropReason), and so
//! are answers to a port no query uses.

use core::future::poll_fn;
use core::ops::Deref;
use core::sync::atomic::{AtomicUsize, Ordering};
use core::task::Poll;
use core::time::Duration;

use smoltcp::iface::SocketHandle;
use smoltcp::socket::{dns, Socket};
use smoltcp::wire::DnsQueryType;

pub use smoltcp::socket::dns::DnsQuery;

use crate::config::{IpAddress, IpEndpoint, Ipv4Address, MAX_DNS_SERVERS};
use crate::socket::{routable, SocketCx};
use crate::stack::{Stack, State};
use crate::transport::ports::DnsStartError;
use crate::StackError;

/// How many addresses one answer yields at most (smoltcp's `dns-max-result-count-4`).
pub const MAX_DNS_RESULTS: usize = 4;

/// How long [`DnsSocket::resolve`] waits for an answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long smoltcp waits for one silent server before it moves to the next (its
/// `RETRANSMIT_TIMEOUT`); with every server silent it reports failure no earlier than this
/// times the number of servers.
const SMOLTCP_SERVER_TIMEOUT: Duration = Duration::from_secs(10);

/// Which records to ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsKind {
    /// IPv4 addresses (A records).
    A,
    /// IPv6 addresses (AAAA records).
    Aaaa,
}

impl From<DnsKind> for DnsQueryType {
    fn from(k: DnsKind) -> Self {
        match k {
            DnsKind::A => DnsQueryType::A,
            DnsKind::Aaaa => DnsQueryType::Aaaa,
        }
    }
}

/// Why a name did not resolve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsError {
    /// A server answered, but without an address of the kind asked for: the name does not
    /// exist (NXDOMAIN), has no such record, or the server answered with an error (smoltcp
    /// does not report which).
    NotFound,
    /// No server answered within the time limit.
    TimedOut,
    /// Every query slot of the socket is in use: wait for a `resolve` to finish, or give the
    /// socket more slots.
    TooManyQueries,
    /// The name is empty, has an empty label or a label over 63 bytes, or is over 255 bytes.
    InvalidName,
    /// [`Config::dns_servers`](crate::Config::dns_servers) names no server.
    NoServers,
    /// The query could not be sent: the stack has no route to the first server (not on one of
    /// its subnets and no route covers it) or no address to send from, or no local port was
    /// free for it.
    Failed,
}

impl core::fmt::Display for DnsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            DnsError::NotFound => "name not found",
            DnsError::TimedOut => "no answer from the DNS servers in time",
            DnsError::TooManyQueries => "too many DNS queries in flight",
            DnsError::InvalidName => "invalid DNS name",
            DnsError::NoServers => "no DNS servers configured",
            DnsError::Failed => "DNS server unreachable",
        })
    }
}

impl core::error::Error for DnsError {}

/// The addresses a name resolved to: at least one, at most [`MAX_DNS_RESULTS`], in the
/// server's order. Use it as a slice (`&addrs[..]`, `addrs.iter()`, `addrs[0]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DnsAddresses {
    addrs: [IpAddress; MAX_DNS_RESULTS],
    len: usize,
}

impl Deref for DnsAddresses {
    type Target = [IpAddress];
    fn deref(&self) -> &[IpAddress] {
        &self.addrs[..self.len]
    }
}

impl DnsAddresses {
    fn collect(it: impl IntoIterator<Item = IpAddress>) -> Self {
        let mut out = Self {
            addrs: [IpAddress::Ipv4(Ipv4Address::UNSPECIFIED); MAX_DNS_RESULTS],
            len: 0,
        };
        for (slot, a) in out.addrs.iter_mut().zip(it) {
            *slot = a;
            out.len += 1;
        }
        out
    }
}

/// A DNS resolver: one smoltcp DNS socket with a fixed number of query slots, each `resolve`
/// in flight using one. Share it (`&DnsSocket`) between tasks to resolve several names at once.
/// Each query goes out from a random local port that no other socket or query of the stack
/// uses, and while it is in flight no socket can bind that port (`transport/ports.rs`).
///
/// The servers are [`Config::dns_servers`](crate::Config::dns_servers) or, when none are
/// configured, those of the current DHCP lease ([`Stack::dhcp_lease`](crate::Stack::dhcp_lease)).
/// They are read again at each `resolve` started while no other query is in flight, so a lease
/// obtained (or renewed with other servers) after the socket was created is used. Dropping the socket frees its slot and cancels nothing else: every
/// `resolve` borrows it, so none can be in flight.
#[derive(Debug)]
pub struct DnsSocket {
    stack: Stack,
    handle: SocketHandle,
    /// The servers smoltcp's socket was last given.
    servers: spin::Mutex<[Option<IpAddress>; MAX_DNS_SERVERS]>,
    /// Query slots in use and how many there are: bounds a heap-backed slot list, which smoltcp
    /// would otherwise grow without limit.
    in_flight: AtomicUsize,
    slots: usize,
}

impl DnsSocket {
    /// A resolver whose queries live in caller-provided memory: one slot per `resolve` that may
    /// be in flight at once (start the array with `None`s).
    ///
    /// Errors: [`StackError::NoSocketSlot`] when the stack's socket storage is full.
    pub fn from_static(
        stack: Stack,
        queries: &'static mut [Option<DnsQuery>],
    ) -> Result<Self, StackError> {
        let slots = queries.len();
        let servers = stack.with(|st| st.dns_servers());
        let socket = dns::Socket::new(&server_list(&servers), queries);
        Self::add(stack, servers, socket, slots)
    }

    /// A resolver with `queries` query slots on the heap.
    ///
    /// Errors: [`StackError::NoSocketSlot`] when the stack's socket storage is full.
    #[cfg(feature = "alloc")]
    pub fn with_capacity(stack: Stack, queries: usize) -> Result<Self, StackError> {
        extern crate alloc;
        let v: alloc::vec::Vec<Option<DnsQuery>> = (0..queries).map(|_| None).collect();
        let servers = stack.with(|st| st.dns_servers());
        let socket = dns::Socket::new(&server_list(&servers), v);
        Self::add(stack, servers, socket, queries)
    }

    fn add(
        stack: Stack,
        servers: [Option<IpAddress>; MAX_DNS_SERVERS],
        socket: dns::Socket<'static>,
        slots: usize,
    ) -> Result<Self, StackError> {
        let handle = stack.with(|st| {
            let handle = st.add_socket(socket)?;
            st.asked.resolvers += 1;
            Ok::<_, StackError>(handle)
        })?;
        Ok(Self {
            stack,
            handle,
            servers: spin::Mutex::new(servers),
            in_flight: AtomicUsize::new(0),
            slots,
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut dns::Socket<'static>, &mut SocketCx<'_>) -> R) -> R {
        self.stack.with(|st| st.with_socket(self.handle, f))
    }

    /// The servers this socket asks, in order (as of the last `resolve` started, or creation).
    pub fn servers(&self) -> impl Iterator<Item = IpAddress> {
        let servers = *self.servers.lock();
        servers.into_iter().map_while(|s| s)
    }

    /// Resolves `name` (e.g. `"example.org"`, with or without the final dot) to addresses of
    /// `kind`, waiting up to [`DEFAULT_TIMEOUT`]. See [`resolve_timeout`](Self::resolve_timeout).
    pub async fn resolve(&self, name: &str, kind: DnsKind) -> Result<DnsAddresses, DnsError> {
        self.resolve_timeout(name, kind, DEFAULT_TIMEOUT).await
    }

    /// Resolves `name` to addresses of `kind`, waiting up to `timeout` for an answer.
    ///
    /// The time limit is capped just below the time smoltcp gives all servers together (about
    /// ten seconds each), so that every error stays distinct (see the [module
    /// docs](self)): with one server, at most 9.5 s.
    ///
    /// Cancel-safe: dropping the future cancels the query and frees its slot.
    ///
    /// Errors: [`DnsError::NotFound`], [`DnsError::TimedOut`], [`DnsError::TooManyQueries`],
    /// [`DnsError::InvalidName`], [`DnsError::NoServers`], [`DnsError::Failed`].
    pub async fn resolve_timeout(
        &self,
        name: &str,
        kind: DnsKind,
        timeout: Duration,
    ) -> Result<DnsAddresses, DnsError> {
        let current = self.stack.with(|st| st.dns_servers());
        if self.in_flight.load(Ordering::Relaxed) == 0 {
            let mut applied = self.servers.lock();
            if *applied != current {
                self.with(|s, _| s.update_servers(&server_list(&current)));
                *applied = current;
            }
        }
        let servers = self.servers().count();
        let first = self.servers().next().ok_or(DnsError::NoServers)?;
        let cap = SMOLTCP_SERVER_TIMEOUT * servers as u32 - Duration::from_millis(500);
        let query = self.stack.with(|st| {
            if !routable(&mut st.iface, &first) {
                // smoltcp would fail the query at once (no source address), like an NXDOMAIN
                // answer, or send it nowhere.
                return Err(DnsError::Failed);
            }
            if self.in_flight.load(Ordering::Relaxed) >= self.slots {
                return Err(DnsError::TooManyQueries);
            }
            // From a local port no other socket or query uses (`transport/ports.rs`).
            let q = st
                .start_dns_query(self.handle, name, kind.into())
                .map_err(|e| match e {
                    DnsStartError::Query(dns::StartQueryError::NoFreeSlot) => {
                        DnsError::TooManyQueries
                    }
                    DnsStartError::Query(
                        dns::StartQueryError::InvalidName | dns::StartQueryError::NameTooLong,
                    ) => DnsError::InvalidName,
                    DnsStartError::NoFreePort => DnsError::Failed,
                })?;
            // With the state borrowed, so the check above and this count never race.
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            st.signal_egress();
            Ok(q)
        })?;
        let mut guard = QueryGuard {
            socket: self,
            query: Some(query),
        };
        let wait = poll_fn(|cx| {
            let Some(q) = guard.query else {
                unreachable!("polled after completion")
            };
            self.with(|s, _| match s.get_query_result(q) {
                Err(dns::GetQueryResultError::Pending) => {
                    s.register_query_waker(q, cx.waker());
                    Poll::Pending
                }
                done => {
                    // smoltcp freed the slot.
                    guard.query = None;
                    self.in_flight.fetch_sub(1, Ordering::Relaxed);
                    Poll::Ready(match done {
                        Ok(addrs) => Ok(DnsAddresses::collect(addrs)),
                        Err(_) => Err(DnsError::NotFound),
                    })
                }
            })
        });
        // The stack's own executor serves the timer, whatever waker polls this future.
        let exec = self.stack.executor();
        match exec.timeout(timeout.min(cap), wait).await {
            Ok(r) => r,
            // The guard cancels the query.
            Err(_) => Err(DnsError::TimedOut),
        }
    }
}

/// The `Some` servers up to the first `None`, for smoltcp.
fn server_list(servers: &[Option<IpAddress>; MAX_DNS_SERVERS]) -> impl Deref<Target = [IpAddress]> {
    let mut list = DnsServerList {
        addrs: [IpAddress::Ipv4(Ipv4Address::UNSPECIFIED); MAX_DNS_SERVERS],
        len: 0,
    };
    for (slot, a) in list.addrs.iter_mut().zip(servers.iter().map_while(|s| *s)) {
        *slot = a;
        list.len += 1;
    }
    list
}

struct DnsServerList {
    addrs: [IpAddress; MAX_DNS_SERVERS],
    len: usize,
}

impl Deref for DnsServerList {
    type Target = [IpAddress];
    fn deref(&self) -> &[IpAddress] {
        &self.addrs[..self.len]
    }
}

/// The port DNS servers answer from.
const DNS_PORT: u16 = 53;
/// The port multicast DNS answers come from (smoltcp's DNS socket takes them from anyone).
const MDNS_PORT: u16 = 5353;

/// Ingress (`ip/check.rs`, [`Verdict::DnsAnswer`](crate::ip::check::Verdict::DnsAnswer)):
/// whether the UDP datagram from `src` (port 53 or 5353) to `dst` may go on to smoltcp. A
/// smoltcp UDP socket bound to `dst` takes it before any DNS socket: yes. For a query in flight
/// from `dst`'s port, only from port 53 of the server that query was sent to (`ip/asked.rs`; of
/// one of the stack's DNS servers when that record is gone). Without a query there, what a DNS
/// socket would take (anything from port 5353, or from port 53 of one of the stack's servers)
/// it would only ignore: no. Anything else goes on (smoltcp answers it with a port
/// unreachable).
pub(crate) fn answer_expected(st: &State, src: IpEndpoint, dst: IpEndpoint) -> bool {
    let udp_takes = st.sockets.iter().any(|(_, s)| match s {
        Socket::Udp(u) => {
            let at = u.endpoint();
            at.port == dst.port && at.addr.is_none_or(|a| a == dst.addr)
        }
        _ => false,
    });
    if udp_takes {
        return true;
    }
    let ours = |a: IpAddress| st.dns_servers().contains(&Some(a));
    if st.dns_query_uses(dst.port) {
        return src.port == DNS_PORT
            && st
                .asked
                .dns_server(dst.port)
                .map_or_else(|| ours(src.addr), |asked| asked == src.addr);
    }
    let resolver = st.sockets.iter().any(|(_, s)| matches!(s, Socket::Dns(_)));
    !(resolver && (src.port == MDNS_PORT || ours(src.addr)))
}

/// Cancels a query still in flight when its `resolve` future is dropped.
struct QueryGuard<'a> {
    socket: &'a DnsSocket,
    query: Option<dns::QueryHandle>,
}

impl Drop for QueryGuard<'_> {
    fn drop(&mut self) {
        if let Some(q) = self.query.take() {
            self.socket.with(|s, _| s.cancel_query(q));
            self.socket.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for DnsSocket {
    fn drop(&mut self) {
        let handle = self.handle;
        self.stack.with(|st| {
            st.remove_socket(handle);
            st.asked.resolvers -= 1;
        });
    }
}
