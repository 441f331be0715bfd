//! How a stack is set up: addresses, routes, and tuning.

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

/// Stack configuration. Start from [`Config::default`] and set what you need.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// IPv4 address and route, if any.
    pub ipv4: Option<StaticV4>,
    /// IPv6 address and route, if any (the link-local address derived from the MAC is always
    /// configured on Ethernet).
    pub ipv6: Option<StaticV6>,
    /// Seed for smoltcp's TCP sequence numbers and ephemeral ports; vary it per boot.
    pub random_seed: u64,
    /// Frames the ingress task handles per wakeup before it yields to other tasks.
    pub ingress_budget: usize,
    /// DNS servers a [`DnsSocket`](crate::dns::DnsSocket) asks, in order: the first `Some`
    /// entries up to the first `None`, at most [`MAX_DNS_SERVERS`]. Each is tried until it
    /// answers or about ten seconds pass, then the next. Default: none (name resolution fails
    /// with [`DnsError::NoServers`](crate::dns::DnsError::NoServers)).
    pub dns_servers: [Option<IpAddress>; MAX_DNS_SERVERS],
}

impl Default for Config {
    fn default() -> Self {
        Self {
            ipv4: None,
            ipv6: None,
            random_seed: 0x7a63_6e65_7400_0001,
            ingress_budget: 32,
            dns_servers: [None; MAX_DNS_SERVERS],
        }
    }
}
