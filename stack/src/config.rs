//! How a stack is set up: addresses, routes, autoconfiguration, and tuning.

pub use smoltcp::wire::{
    IpAddress, IpCidr, IpEndpoint, IpListenEndpoint, Ipv4Address, Ipv4Cidr, Ipv6Address, Ipv6Cidr,
};

/// A static IPv4 configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticV4 {
    /// Address and prefix, e.g. `10.0.0.2/24`.
    pub address: Ipv4Cidr,
    /// Default gateway, if any.
    pub gateway: Option<Ipv4Address>,
}

/// A static IPv6 configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticV6 {
    /// Address and prefix, e.g. `fd00::2/64`.
    pub address: Ipv6Cidr,
    /// Default gateway, if any.
    pub gateway: Option<Ipv6Address>,
}

/// How many DNS servers [`Config::dns_servers`] holds (as many as a resolv.conf may name).
/// Matches smoltcp's `dns-max-server-count-3` feature, which zcnet-stack enables.
pub const MAX_DNS_SERVERS: usize = 3;
/// Where the stack's IPv4 address comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ipv4Config {
    /// No IPv4 address.
    #[default]
    None,
    /// A fixed address and, optionally, a default gateway.
    Static(StaticV4),
    /// A DHCPv4 client: the stack asks the network for an address, default route and DNS
    /// servers, applies them when a server answers, renews the lease in the background and
    /// removes them when the lease is lost. Until then the stack has no IPv4 address; await
    /// [`Stack::wait_ipv4`](crate::Stack::wait_ipv4) before opening IPv4 connections.
    ///
    /// Needs an Ethernet driver ([`StackError::NotEthernet`](crate::StackError::NotEthernet)
    /// otherwise) and takes one of the stack's socket slots for the client.
    Dhcp,
}

impl From<StaticV4> for Ipv4Config {
    fn from(v4: StaticV4) -> Self {
        Ipv4Config::Static(v4)
    }
}

/// The stack's secret: 128 bits the integrator draws from a random source it trusts, anew at
/// every boot (the OS's random source, RDRAND, a hardware RNG, virtio-rng). The stack keys
/// SipHash-2-4 with it to derive everything an attacker who is not on the path must not
/// predict: TCP initial sequence numbers (RFC 6528), TCP timestamp offsets, ephemeral ports
/// (RFC 6056), IPv4 identification values, and the seed of smoltcp's own generator (DHCP
/// transaction ids, DNS query ids and ports). There is no default and no constant: a
/// [`Config`] can only be made from one ([`Config::new`]).
///
/// A secret that an attacker can learn or guess (a constant, a boot counter, a timestamp, a
/// process id) makes all of the above predictable again. `Debug` does not print it.
///
/// ```
/// # use zcnet_stack::{Config, Secret};
/// # fn platform_random_bytes(b: &mut [u8]) { b.fill(0x5a) } // stands in for the real source
/// let mut key = [0u8; Secret::LEN];
/// platform_random_bytes(&mut key);
/// let config = Config::new(Secret::new(key));
/// ```
#[derive(Clone, Copy)]
pub struct Secret([u8; Secret::LEN]);

impl Secret {
    /// The secret's length in bytes (128 bits: SipHash's key).
    pub const LEN: usize = 16;

    /// The secret made of `bytes`, which must come from a random source the integrator trusts.
    pub const fn new(bytes: [u8; Secret::LEN]) -> Self {
        Self(bytes)
    }

    /// The key bytes (for the stack's keyed hash).
    pub(crate) fn bytes(&self) -> &[u8; Secret::LEN] {
        &self.0
    }
}

impl From<[u8; Secret::LEN]> for Secret {
    fn from(bytes: [u8; Secret::LEN]) -> Self {
        Self::new(bytes)
    }
}

impl core::fmt::Debug for Secret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Stack configuration. Start from [`Config::new`], which takes the stack's [`Secret`] (there
/// is no `Default`: a stack cannot be configured without one), and set what you need.
///
/// # IPv6 and the link-local address
///
/// IPv6 is on when any of [`ipv6`](Self::ipv6), [`slaac`](Self::slaac) or
/// [`ipv6_link_local`](Self::ipv6_link_local) is set. On an Ethernet driver the stack then
/// always configures the link-local address `fe80::/64` with the modified EUI-64 interface
/// identifier derived from the MAC (RFC 4291 §2.5.1, appendix A): for MAC
/// `02:00:00:00:00:01` that is `fe80::ff:fe00:1`. Neighbour discovery and SLAAC speak from it,
/// and peers on the same link can reach the stack at it with no other configuration. An IP-only
/// driver (no MAC) gets no link-local address.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// IPv4: none (the default), static, or DHCPv4.
    pub ipv4: Ipv4Config,
    /// A static IPv6 address and route, if any (the link-local address comes in addition).
    pub ipv6: Option<StaticV6>,
    /// IPv6 stateless address autoconfiguration (RFC 4862): the stack solicits routers and, from
    /// their advertisements, configures an address in each advertised /64 prefix (prefix plus the
    /// EUI-64 interface identifier; smoltcp keeps one prefix) and a default route via the router,
    /// dropping them when their lifetimes end. Needs an Ethernet driver
    /// ([`StackError::NotEthernet`](crate::StackError::NotEthernet) otherwise).
    pub slaac: bool,
    /// Turns IPv6 on with only the link-local address when neither [`ipv6`](Self::ipv6) nor
    /// [`slaac`](Self::slaac) is set (they imply the link-local address anyway). Needs an
    /// Ethernet driver ([`StackError::NotEthernet`](crate::StackError::NotEthernet) otherwise).
    pub ipv6_link_local: bool,
    /// The stack's secret (see [`Secret`]): drawn by the integrator from a random source at
    /// every boot.
    pub secret: Secret,
    /// Frames the ingress task handles per wakeup before it yields to other tasks. A packet
    /// the driver delivers over several slots (a chain: a super-segment) counts as its slots.
    pub ingress_budget: usize,
    /// DNS servers a [`DnsSocket`](crate::dns::DnsSocket) asks, in order: the first `Some`
    /// entries up to the first `None`, at most [`MAX_DNS_SERVERS`]. Each is tried until it
    /// answers or about ten seconds pass, then the next. Default: none (name resolution fails
    /// with [`DnsError::NoServers`](crate::dns::DnsError::NoServers)).
    pub dns_servers: [Option<IpAddress>; MAX_DNS_SERVERS],
    /// Pool slots the TCP connections may hold together: each TCP socket reserves its
    /// [`TcpBuffers`](crate::tcp::TcpBuffers) budget (receive and send frames) out of this
    /// share when it opens, and opening one that does not fit fails with
    /// [`StackError::PoolBudget`](crate::StackError::PoolBudget) instead of stalling later.
    /// The rest of the pool is left to the driver's receive ring and transmit queue, the
    /// stack's own frames and the datagram sockets. Default (`None`): three quarters of the
    /// pool's slots. A share larger than the pool overcommits it: sockets then open whatever
    /// their budgets, and a pool that runs dry is met by dropping segments (counted) and
    /// giving up out-of-order data, never by an error.
    pub tcp_pool_slots: Option<usize>,
    /// SYN cookies (RFC 4987), on by default. When every listening socket of a
    /// [`TcpListener`](crate::tcp::TcpListener) is busy (its backlog of handshakes is full,
    /// for instance with SYNs from forged addresses that never complete), a SYN is answered
    /// with a SYN-ACK whose sequence number is a cookie, a keyed MAC of the four-tuple, a
    /// minute counter and the peer's MSS (one of four values), and nothing is kept. A peer's
    /// final ACK that brings a valid cookie back within one to two minutes makes an
    /// established connection, which the listener's `accept` hands out like any other (at most
    /// its backlog of them wait). A peer that offered timestamps keeps its window scale and
    /// SACK (carried in our timestamp, as Linux does); one that did not gets neither. Counted
    /// in [`StackStats`](crate::StackStats)' `syn_cookies_*` fields.
    ///
    /// Off (`false`), such a SYN is dropped
    /// ([`DropReason::BacklogFull`](crate::DropReason::BacklogFull)) and the client retries
    /// later: a flood of forged SYNs, about the backlog's size a minute, then keeps a listener
    /// unreachable.
    pub syn_cookies: bool,
}

impl Config {
    /// No addresses, no autoconfiguration (IPv6 off), 32 frames per ingress run, three
    /// quarters of the pool for TCP budgets, SYN cookies on, and `secret` (see [`Secret`]).
    pub fn new(secret: Secret) -> Self {
        Self {
            ipv4: Ipv4Config::None,
            ipv6: None,
            slaac: false,
            ipv6_link_local: false,
            secret,
            ingress_budget: 32,
            dns_servers: [None; MAX_DNS_SERVERS],
            tcp_pool_slots: None,
            syn_cookies: true,
        }
    }

    /// Whether IPv6 is on (see [the type's docs](Config#ipv6-and-the-link-local-address)).
    pub fn ipv6_enabled(&self) -> bool {
        self.ipv6.is_some() || self.slaac || self.ipv6_link_local
    }
}
