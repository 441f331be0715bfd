//! Address autoconfiguration: the IPv6 link-local address, the DHCPv4 client and SLAAC, and
//! what the application sees of them ([`Stack::ipv4_config`], [`Stack::dhcp_lease`],
//! [`Stack::ip_addrs`], [`Stack::wait_ipv4`], [`Stack::wait_config_change`]).
//!
//! * **Link-local**: `fe80::/64` plus the modified EUI-64 interface identifier of the MAC, set
//!   once when the stack is built, whenever IPv6 is on and the driver is Ethernet.
//! * **DHCPv4**: a smoltcp `dhcpv4::Socket` in the stack's socket set. smoltcp sends and
//!   receives its packets inside the ordinary ingress and egress steps and keeps its retransmit,
//!   renew and expiry deadlines in `poll_at`, so egress's timer already covers them. The client
//!   only *reports* what it learned; after every ingress batch and every egress run the runner
//!   calls `after_poll`, which takes that report (`Configured` / `Deconfigured`) and applies it
//!   to the interface: the IPv4 address, the default route, and the DNS servers. The DNS servers
//!   are kept here, in [`Autoconf::lease`] (`State::autoconf`); DNS sockets use them when no
//!   servers are configured statically (`State::dns_servers`).
//! * **SLAAC**: smoltcp handles router advertisements and sends router solicitations itself
//!   (`iface::Config::slaac`), and applies prefixes and routes in `poll_maintenance`. Egress
//!   calls that at the start of every run; [`after_ingress`] also calls it after ingress, so an
//!   advertised prefix is applied when it arrives, not at smoltcp's next deadline.
//!
//! Every applied change bumps a generation number and wakes the tasks waiting in
//! [`Stack::wait_ipv4`] or [`Stack::wait_config_change`]. Nothing here runs on its own: it is
//! called from the ingress and egress steps only.

use core::future::poll_fn;
use core::task::{Poll, Waker};

use smoltcp::iface::SocketHandle;
use smoltcp::socket::dhcpv4;
use smoltcp::time::{Duration as SmolDuration, Instant as SmolInstant};
use smoltcp::wire::{HardwareAddress as SmolHardwareAddress, IpCidr};

use crate::config::{Config, Ipv4Address, Ipv4Cidr, Ipv4Config, Ipv6Address, Ipv6Cidr};
use crate::stack::{Stack, State};
use crate::stats::Counters;
use crate::waiters::WaitList;
use crate::StackError;

/// The most DNS servers kept from one DHCP lease (further ones are ignored).
pub const MAX_DHCP_DNS_SERVERS: usize = 3;

/// The most addresses an interface holds (IPv4, IPv6 link-local, static IPv6, SLAAC).
pub const MAX_ADDRS: usize = 4;

/// How many tasks can wait in [`Stack::wait_ipv4`] / [`Stack::wait_config_change`] at once
/// without disturbing each other. More still work, but each newcomer beyond this wakes all the
/// current waiters (they re-check and wait again), so keep it to a few.
pub const MAX_CONFIG_WAITERS: usize = 4;

/// An IPv4 lease obtained by the DHCPv4 client ([`Stack::dhcp_lease`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dhcpv4Lease {
    /// The leased address and the subnet's prefix length.
    pub address: Ipv4Cidr,
    /// The router the server named; the stack's default IPv4 route goes through it. A router
    /// outside `address`'s subnet (a /32 lease with a gateway) is made on-link: the interface
    /// takes the address with the prefix shortened until it holds the router (what
    /// [`Stack::ipv4_config`] reports), since a router off-link could never be reached.
    pub router: Option<Ipv4Address>,
    /// The server that granted the lease (its server identifier).
    pub server: Ipv4Address,
    dns: [Ipv4Address; MAX_DHCP_DNS_SERVERS],
    dns_len: u8,
}

impl Dhcpv4Lease {
    /// The DNS servers the lease named, in the server's order (at most
    /// [`MAX_DHCP_DNS_SERVERS`]).
    pub fn dns_servers(&self) -> &[Ipv4Address] {
        &self.dns[..usize::from(self.dns_len)]
    }
}

/// The IPv4 settings in effect, static or leased ([`Stack::ipv4_config`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Settings {
    /// The interface's IPv4 address and prefix.
    pub address: Ipv4Cidr,
    /// The default route's gateway, if there is a default route.
    pub gateway: Option<Ipv4Address>,
}

/// A copy of the interface's addresses ([`Stack::ip_addrs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpAddrs {
    addrs: [IpCidr; MAX_ADDRS],
    len: usize,
}

impl IpAddrs {
    /// No addresses.
    const EMPTY: IpAddrs = IpAddrs {
        addrs: [IpCidr::Ipv4(Ipv4Cidr::new(Ipv4Address::UNSPECIFIED, 0)); MAX_ADDRS],
        len: 0,
    };

    /// A copy of the first [`MAX_ADDRS`] of `addrs`.
    pub(crate) fn of(addrs: &[IpCidr]) -> Self {
        let mut out = Self::EMPTY;
        for (slot, a) in out.addrs.iter_mut().zip(addrs) {
            *slot = *a;
            out.len += 1;
        }
        out
    }

    /// All addresses, IPv4 and IPv6.
    pub fn as_slice(&self) -> &[IpCidr] {
        &self.addrs[..self.len]
    }

    /// The IPv4 addresses.
    pub fn ipv4(&self) -> impl Iterator<Item = Ipv4Cidr> + '_ {
        self.as_slice().iter().filter_map(|a| match *a {
            IpCidr::Ipv4(c) => Some(c),
            IpCidr::Ipv6(_) => None,
        })
    }

    /// The IPv6 addresses (link-local, static and SLAAC).
    pub fn ipv6(&self) -> impl Iterator<Item = Ipv6Cidr> + '_ {
        self.as_slice().iter().filter_map(|a| match *a {
            IpCidr::Ipv6(c) => Some(c),
            IpCidr::Ipv4(_) => None,
        })
    }
}

/// The modified EUI-64 interface identifier of a MAC (RFC 4291 appendix A): `ff:fe` in the
/// middle, the universal/local bit flipped.
pub fn eui64_interface_id(mac: [u8; 6]) -> [u8; 8] {
    [
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}

/// The IPv6 link-local address of a MAC: `fe80::/64` plus its modified EUI-64 identifier.
pub fn ipv6_link_local(mac: [u8; 6]) -> Ipv6Address {
    let mut o = [0u8; 16];
    o[0] = 0xfe;
    o[1] = 0x80;
    o[8..].copy_from_slice(&eui64_interface_id(mac));
    Ipv6Address::from_octets(o)
}

/// Autoconfiguration state, part of the stack's [`State`].
pub(crate) struct Autoconf {
    /// The DHCPv4 client's socket, with [`Ipv4Config::Dhcp`].
    dhcp: Option<SocketHandle>,
    /// The lease applied to the interface, with its DNS servers (the stack's only store of
    /// DHCP-learned DNS servers).
    pub(crate) lease: Option<Dhcpv4Lease>,
    /// SLAAC on: smoltcp's address sync is watched through `slaac_updated_at`.
    slaac: bool,
    slaac_seen: SmolInstant,
    /// Our copy of smoltcp's router solicitation schedule (see [`deadline`]): solicitations
    /// left, when the next is due, and whether an advertisement ended discovery.
    rs_left: u8,
    rs_at: SmolInstant,
    ra_seen: bool,
    /// Bumped on every applied change.
    generation: u32,
    waiters: WaitList<MAX_CONFIG_WAITERS>,
    /// The addresses SLAAC changes were last logged against (`events::slaac_changed`).
    #[cfg(any(feature = "log", feature = "defmt"))]
    logged_addrs: IpAddrs,
}

impl Autoconf {
    /// Whether the DHCPv4 client runs.
    pub(crate) fn runs_dhcp(&self) -> bool {
        self.dhcp.is_some()
    }

    /// Whether a DHCP client or SLAAC runs (either may change addresses during a poll).
    pub(crate) fn active(&self) -> bool {
        self.dhcp.is_some() || self.slaac
    }

    /// Nothing configured, nobody waiting (replaced by [`setup`]).
    pub(crate) const EMPTY: Autoconf = Autoconf {
        dhcp: None,
        lease: None,
        slaac: false,
        slaac_seen: SmolInstant::ZERO,
        rs_left: 0,
        rs_at: SmolInstant::ZERO,
        ra_seen: false,
        generation: 0,
        waiters: WaitList::new(),
        #[cfg(any(feature = "log", feature = "defmt"))]
        logged_addrs: IpAddrs::EMPTY,
    };

    fn register(&mut self, waker: &Waker) {
        self.waiters.register(waker);
    }

    fn changed(&mut self, counters: &Counters) {
        self.generation = self.generation.wrapping_add(1);
        counters.config_change();
        self.waiters.wake_all();
    }
}

/// The link came back: the DHCPv4 client starts over with a DISCOVER (the network behind the
/// link may have changed). smoltcp's client has no INIT-REBOOT, so a lease held until now is
/// given up at the next egress run and applied again when the server answers (usually the same
/// address). Static addresses and SLAAC are left alone.
pub(crate) fn restart_dhcp(st: &mut State) {
    if let Some(handle) = st.autoconf.dhcp {
        event!(dhcp_restarted());
        st.sockets.get_mut::<dhcpv4::Socket>(handle).reset();
        st.smoltcp_touched();
    }
}

/// Refuses configurations that need a MAC on a driver without one (before anything is built).
pub(crate) fn check(config: &Config, hw: &SmolHardwareAddress) -> Result<(), StackError> {
    let needs_mac = config.ipv4 == Ipv4Config::Dhcp || config.slaac || config.ipv6_link_local;
    if needs_mac && !matches!(hw, SmolHardwareAddress::Ethernet(_)) {
        return Err(StackError::NotEthernet);
    }
    Ok(())
}

/// Sets smoltcp's interface options for `config` (before the interface is built).
pub(crate) fn interface_config(iconfig: &mut smoltcp::iface::Config, config: &Config) {
    iconfig.slaac = config.slaac;
}

/// The initial autoconfiguration state; adds the link-local address and the DHCP client.
/// Static addresses are already on the interface.
pub(crate) fn setup(st: &mut State, config: &Config) -> Result<Autoconf, StackError> {
    let mac = match st.iface.hardware_addr() {
        SmolHardwareAddress::Ethernet(mac) => Some(mac.0),
        #[allow(unreachable_patterns)]
        _ => None,
    };
    st.smoltcp_touched();
    if let (true, Some(mac)) = (config.ipv6_enabled(), mac) {
        let ll = IpCidr::Ipv6(Ipv6Cidr::new(ipv6_link_local(mac), 64));
        st.iface.update_ip_addrs(|addrs| {
            if !addrs.contains(&ll) {
                // Room is guaranteed: at most IPv4 + static IPv6 are there, of MAX_ADDRS.
                let _ = addrs.push(ll);
            }
        });
    }
    let dhcp = match config.ipv4 {
        Ipv4Config::Dhcp => Some(st.add_socket(dhcpv4::Socket::new())?),
        _ => None,
    };
    Ok(Autoconf {
        dhcp,
        lease: None,
        slaac: config.slaac,
        slaac_seen: st.iface.slaac_updated_at(),
        rs_left: SLAAC_SOLICITATIONS,
        rs_at: SmolInstant::ZERO,
        ra_seen: false,
        generation: 0,
        waiters: WaitList::new(),
        #[cfg(any(feature = "log", feature = "defmt"))]
        logged_addrs: IpAddrs::of(st.iface.ip_addrs()),
    })
}

/// smoltcp 0.14's router solicitation schedule (`iface/slaac.rs`): three, four seconds apart.
const SLAAC_SOLICITATIONS: u8 = 3;
const SLAAC_SOLICITATION_INTERVAL: SmolDuration = SmolDuration::from_secs(4);
/// How long egress sleeps on smoltcp's stale SLAAC deadline (see [`deadline`]).
const SLAAC_STALE_BACKOFF: SmolDuration = SmolDuration::from_secs(1);

/// Egress's next deadline: smoltcp's `poll_at`, corrected for two defects of smoltcp 0.14's
/// SLAAC timing, for which we keep our own copy of its solicitation schedule:
///
/// 1. `Interface::poll_at` merges SLAAC's deadline with `Option::min`, so it is lost whenever
///    no socket has a deadline (`None < Some`): smoltcp would send one router solicitation and
///    never retransmit it. We add the next solicitation's time ourselves.
/// 2. After its last unanswered solicitation smoltcp stays in its discovery phase with that
///    solicitation's retry time, now past, as its deadline for good (until an advertisement
///    arrives), which would wake egress every millisecond. When that stale deadline is all
///    there is (`at <= now` and this egress run sent nothing) egress sleeps
///    [`SLAAC_STALE_BACKOFF`] instead; socket work still wakes it at once, socket timers may run
///    up to that late while the link has no IPv6 router.
///
/// `idle_egress`: called after an egress run that sent nothing.
pub(crate) fn deadline(
    st: &State,
    now: SmolInstant,
    at: Option<SmolInstant>,
    idle_egress: bool,
) -> Option<SmolInstant> {
    let a = &st.autoconf;
    if !a.slaac || a.ra_seen {
        return at;
    }
    if a.rs_left > 0 {
        return Some(at.map_or(a.rs_at, |at| at.min(a.rs_at)));
    }
    match at {
        Some(at) if at <= now && idle_egress && a.rs_at <= now => Some(now + SLAAC_STALE_BACKOFF),
        at => at,
    }
}

/// Before an egress run: with SLAAC on, lets smoltcp apply prefixes and routes that changed
/// or expired (`poll_maintenance`, smoltcp's only maintenance in this build, which has no IP
/// fragmentation).
pub(crate) fn before_egress(st: &mut State, now: SmolInstant) {
    if st.autoconf.slaac {
        st.iface.poll_maintenance(now);
        st.smoltcp_touched();
    }
}

/// After an egress run: notes a router solicitation smoltcp sent (its schedule, mirrored), then
/// as [`after_poll`].
pub(crate) fn after_egress(st: &mut State, now: SmolInstant, starved: bool, counters: &Counters) {
    let a = &mut st.autoconf;
    if a.slaac && !a.ra_seen && a.rs_left > 0 && a.rs_at <= now && !starved {
        a.rs_left -= 1;
        a.rs_at = now + SLAAC_SOLICITATION_INTERVAL;
    }
    after_poll(st, now, counters);
}

/// After an ingress batch: with SLAAC on, lets smoltcp apply a router advertisement it just
/// received (`poll_maintenance`; egress does that at the start of every run), then
/// [`after_poll`].
pub(crate) fn after_ingress(st: &mut State, now: SmolInstant, counters: &Counters) {
    if st.autoconf.slaac {
        st.iface.poll_maintenance(now);
        st.smoltcp_touched();
    }
    after_poll(st, now, counters);
}

/// After an ingress batch or an egress run: applies what the DHCP client reported and what
/// SLAAC learned, and wakes the waiters if anything changed. Bounded: one event, one sync.
fn after_poll(st: &mut State, now: SmolInstant, counters: &Counters) {
    if st.autoconf.active() {
        apply_changes(st, now, counters);
    }
}

/// [`after_poll`] with DHCP or SLAAC on.
#[inline(never)]
fn apply_changes(st: &mut State, now: SmolInstant, counters: &Counters) {
    let mut changed = false;
    let mut gateway = None;
    if let Some(handle) = st.autoconf.dhcp {
        let iface = &mut st.iface;
        let auto = &mut st.autoconf;
        match st.sockets.get_mut::<dhcpv4::Socket>(handle).poll() {
            None => {}
            Some(dhcpv4::Event::Configured(c)) => {
                let mut dns = [Ipv4Address::UNSPECIFIED; MAX_DHCP_DNS_SERVERS];
                let mut dns_len = 0u8;
                for (slot, addr) in dns.iter_mut().zip(c.dns_servers.iter()) {
                    *slot = *addr;
                    dns_len += 1;
                }
                let lease = Dhcpv4Lease {
                    address: c.address,
                    router: c.router,
                    server: c.server.identifier,
                    dns,
                    dns_len,
                };
                event!(dhcp_configured(auto.lease.as_ref(), &lease));
                set_ipv4(iface, Some(lease.address), lease.router);
                gateway = lease.router;
                auto.lease = Some(lease);
                changed = true;
            }
            // (Also reported once at start, with nothing configured yet: not a change.)
            Some(dhcpv4::Event::Deconfigured) => {
                if let Some(_lost) = auto.lease.take() {
                    event!(dhcp_lost(&_lost));
                    set_ipv4(iface, None, None);
                    changed = true;
                }
            }
        }
    }
    if st.autoconf.slaac {
        let at = st.iface.slaac_updated_at();
        if at != st.autoconf.slaac_seen {
            st.autoconf.slaac_seen = at;
            // Only an advertisement gives smoltcp something to sync: discovery is over.
            st.autoconf.ra_seen = true;
            event!(slaac_changed(
                &mut st.autoconf.logged_addrs,
                st.iface.ip_addrs()
            ));
            changed = true;
        }
    }
    if let Some(gw) = gateway {
        // Learn the gateway's MAC now, before a peer that learned ours without ARP (from the
        // DHCP answer) sends something smoltcp would answer (see `Neighbors::prime`).
        st.link.neighbors.prime(gw.into(), now, counters);
    }
    if changed {
        st.smoltcp_touched();
        st.autoconf.changed(counters);
    }
}

/// Replaces the interface's IPv4 address and default route (DHCP owns both).
fn set_ipv4(
    iface: &mut smoltcp::iface::Interface,
    address: Option<Ipv4Cidr>,
    router: Option<Ipv4Address>,
) {
    let address = address.map(|a| on_link_with(a, router));
    iface.update_ip_addrs(|addrs| {
        addrs.retain(|a| !matches!(a, IpCidr::Ipv4(_)));
        if let Some(a) = address {
            // Room: the IPv4 slot was just freed.
            let _ = addrs.push(IpCidr::Ipv4(a));
        }
    });
    let routes = iface.routes_mut();
    routes.remove_default_ipv4_route();
    if let Some(r) = router {
        // Room: the default IPv4 route was just removed.
        let _ = routes.add_default_ipv4_route(r);
    }
}

/// `address` with its prefix shortened, if need be, until `router` is inside it.
///
/// A lease may name a router outside its subnet (a /32 lease with a gateway, as some clouds
/// hand out). smoltcp learns a neighbour's MAC only from ARP of an on-link sender, so such a
/// router could never be resolved and nothing off-link (replies to a ping from the router
/// included) would ever be sent. With the prefix widened to the smallest one that holds both,
/// the router is on-link.
fn on_link_with(address: Ipv4Cidr, router: Option<Ipv4Address>) -> Ipv4Cidr {
    let Some(router) = router else {
        return address;
    };
    if address.contains_addr(&router) {
        return address;
    }
    let common = (address.address().to_bits() ^ router.to_bits()).leading_zeros() as u8;
    Ipv4Cidr::new(address.address(), common.min(address.prefix_len()))
}

fn ipv4_settings(st: &mut State) -> Option<Ipv4Settings> {
    let address = st.iface.ip_addrs().iter().find_map(|a| match *a {
        IpCidr::Ipv4(c) => Some(c),
        IpCidr::Ipv6(_) => None,
    })?;
    let gateway = st
        .iface
        .routes()
        .get_default_ipv4_route()
        .and_then(|r| match r.via_router {
            crate::config::IpAddress::Ipv4(a) => Some(a),
            crate::config::IpAddress::Ipv6(_) => None,
        });
    Some(Ipv4Settings { address, gateway })
}

impl Stack {
    /// The IPv4 address and default gateway in effect now, static or leased; `None` while the
    /// stack has no IPv4 address (DHCP not yet answered, or the lease was lost).
    pub fn ipv4_config(&self) -> Option<Ipv4Settings> {
        self.with(ipv4_settings)
    }

    /// The current DHCPv4 lease (address, router, DNS servers, server), or `None` without
    /// [`Ipv4Config::Dhcp`] or while there is no lease.
    pub fn dhcp_lease(&self) -> Option<Dhcpv4Lease> {
        self.with(|st| st.autoconf.lease)
    }

    /// The interface's addresses now: IPv4 (static or leased), the IPv6 link-local address,
    /// static IPv6, and SLAAC's.
    pub fn ip_addrs(&self) -> IpAddrs {
        self.with(|st| IpAddrs::of(st.iface.ip_addrs()))
    }

    /// Waits until the stack has an IPv4 address (at once if it has one) and returns the
    /// settings in effect. With [`Ipv4Config::Dhcp`] this is "wait for the lease".
    pub async fn wait_ipv4(&self) -> Ipv4Settings {
        poll_fn(|cx| {
            self.with(|st| match ipv4_settings(st) {
                Some(s) => Poll::Ready(s),
                None => {
                    st.autoconf.register(cx.waker());
                    Poll::Pending
                }
            })
        })
        .await
    }

    /// A number that changes whenever autoconfiguration (DHCP, SLAAC) changes the interface's
    /// addresses or routes; pass it to [`wait_config_change`](Self::wait_config_change).
    pub fn config_generation(&self) -> u32 {
        self.with(|st| st.autoconf.generation)
    }

    /// Waits until the configuration generation differs from `seen` and returns the new one.
    /// Read the generation, check what you need, then wait with it, so no change slips in
    /// between:
    ///
    /// ```ignore
    /// let mut g = stack.config_generation();
    /// while stack.dhcp_lease().is_some() {
    ///     g = stack.wait_config_change(g).await;
    /// }
    /// ```
    pub async fn wait_config_change(&self, seen: u32) -> u32 {
        poll_fn(|cx| {
            self.with(|st| {
                if st.autoconf.generation != seen {
                    Poll::Ready(st.autoconf.generation)
                } else {
                    st.autoconf.register(cx.waker());
                    Poll::Pending
                }
            })
        })
        .await
    }
}
