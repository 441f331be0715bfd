//! What the stack logs, in which words and at which level (features `log` and `defmt`). The
//! crate's other modules reach these functions through `event!` (`logging.rs`), so without a
//! logging feature neither this module nor its calls are compiled.
//!
//! | level | events | `log` target |
//! |---|---|---|
//! | warn | link down | `zcnet_stack::link` |
//! | warn | DHCPv4 lease lost | `zcnet_stack::dhcp` |
//! | warn, on the 1st, 2nd, 4th, 8th, ... time (else debug) | frames dropped for exhaustion or a driver's refusal (`backlog_full`, `datagram_queue_full`, `tx_too_long`, `tx_headroom`, `tx_driver`); a listener that could not re-arm; SYN cookies sent; valid cookies that found no room | `zcnet_stack::drop`, `zcnet_stack::tcp` |
//! | info | stack created: hardware address, IP MTU, addresses | `zcnet_stack` |
//! | info | link up | `zcnet_stack::link` |
//! | info | DHCPv4 lease acquired or changed, discovery restarted when the link returns | `zcnet_stack::dhcp` |
//! | info | SLAAC address added or removed | `zcnet_stack::slaac` |
//! | debug | TCP connecting, established, accepted by the application, peer closed its side, closed, reset by the peer, refused, timed out, connect timed out, aborted, dropped because its local address went away; a TIME-WAIT connection evicted | `zcnet_stack::tcp` |
//! | debug | every other dropped frame with its reason and count ([`DropReason::name`]) | `zcnet_stack::drop` |
//! | debug | DHCPv4's DNS servers; a router advertisement applied | `zcnet_stack::dhcp`, `zcnet_stack::slaac` |
//! | trace | TCP state changes not listed above | `zcnet_stack::tcp` |
//! | trace | frames dropped as `not_for_us` or `unsupported` (ordinary on a shared LAN) | `zcnet_stack::drop` |
//!
//! Nothing is logged for frames that go through: ingress's and egress's happy path has no log
//! call at any level (a `--pcap` capture shows every frame instead). A TCP line names the
//! connection from this stack's side: `TCP 10.0.0.1:49262 -> 10.0.0.2:7: established (our
//! connect)`.
//!
//! Messages are logged where the event happens, most with the stack's state borrowed: a logger
//! must not call into the stack.

use smoltcp::wire::IpCidr;
use zcnet_buffer::LinkState;

use crate::ip::autoconf::{Dhcpv4Lease, IpAddrs};
use crate::stack::State as StackState;
use crate::stats::DropReason;
use crate::transport::tcp::tcb::socket::Tcb;
use crate::transport::tcp::tcb::state::State;

/// The `log` targets, which a logger can filter on (`defmt` has no targets).
mod target {
    pub(super) const STACK: &str = "zcnet_stack";
    pub(super) const TCP: &str = "zcnet_stack::tcp";
    pub(super) const DROP: &str = "zcnet_stack::drop";
    pub(super) const LINK: &str = "zcnet_stack::link";
    pub(super) const DHCP: &str = "zcnet_stack::dhcp";
    pub(super) const SLAAC: &str = "zcnet_stack::slaac";
}
use target::*;

/// Logs a line about a connection: `TCP <local> -> <remote>: <what>`, or `TCP port <port>` while
/// it has no remote end (listening).
macro_rules! tcp {
    ($level:ident, $tcb:expr, $what:expr) => {
        match ($tcb.local_endpoint(), $tcb.remote_endpoint()) {
            (Some(local), Some(remote)) => $level!(target: TCP, "TCP {} -> {}: {}", local, remote, $what),
            _ => $level!(target: TCP, "TCP port {}: {}", $tcb.listen_endpoint().port, $what),
        }
    };
    ($level:ident, $tcb:expr, $what:expr, $state:expr) => {
        match ($tcb.local_endpoint(), $tcb.remote_endpoint()) {
            (Some(local), Some(remote)) => {
                $level!(target: TCP, "TCP {} -> {}: {} in {}", local, remote, $what, $state)
            }
            _ => $level!(
                target: TCP,
                "TCP port {}: {} in {}",
                $tcb.listen_endpoint().port,
                $what,
                $state
            ),
        }
    };
}

/// RFC 793's name of a state (what `State`'s `Display` writes; a `&str` also for `defmt`).
fn name(state: State) -> &'static str {
    match state {
        State::Closed => "CLOSED",
        State::Listen => "LISTEN",
        State::SynSent => "SYN-SENT",
        State::SynReceived => "SYN-RECEIVED",
        State::Established => "ESTABLISHED",
        State::FinWait1 => "FIN-WAIT-1",
        State::FinWait2 => "FIN-WAIT-2",
        State::CloseWait => "CLOSE-WAIT",
        State::Closing => "CLOSING",
        State::LastAck => "LAST-ACK",
        State::TimeWait => "TIME-WAIT",
    }
}

/// The connection `tcb` moves to `to` (called before the move). Closes other than the orderly
/// ones are logged with their cause where it is known ([`tcp_reset`], [`tcp_timed_out`], ...),
/// so here they are only traced.
pub(crate) fn tcp_state(tcb: &Tcb<'_>, to: State) {
    let from = tcb.state();
    match (from, to) {
        (State::Closed, State::SynSent) => tcp!(debug, tcb, "connecting"),
        (State::SynSent, State::Established) => tcp!(debug, tcb, "established (our connect)"),
        (State::SynReceived, State::Established) => {
            tcp!(debug, tcb, "established (the peer's connect)")
        }
        (State::Established | State::FinWait1 | State::FinWait2, State::CloseWait) => {
            tcp!(debug, tcb, "the peer closed its side")
        }
        (State::LastAck, State::Closed) => tcp!(debug, tcb, "closed"),
        (from, State::TimeWait) if from != State::TimeWait => {
            tcp!(debug, tcb, "closed (TIME-WAIT)")
        }
        (from, to) if from != to => match (tcb.local_endpoint(), tcb.remote_endpoint()) {
            (Some(local), Some(remote)) => {
                trace!(target: TCP, "TCP {} -> {}: {} -> {}", local, remote, name(from), name(to))
            }
            _ => trace!(
                target: TCP,
                "TCP port {}: {} -> {}",
                tcb.listen_endpoint().port,
                name(from),
                name(to)
            ),
        },
        _ => {}
    }
}

/// A RST closed the connection: in SYN-SENT the connect was refused, else the peer reset it.
pub(crate) fn tcp_reset(tcb: &Tcb<'_>) {
    match tcb.state() {
        State::SynSent => tcp!(debug, tcb, "refused (RST)"),
        State::Closed | State::Listen | State::TimeWait => {}
        s => tcp!(debug, tcb, "reset by the peer", name(s)),
    }
}

/// The connection's timeout (or keep-alive) passed without an answer from the peer.
pub(crate) fn tcp_timed_out(tcb: &Tcb<'_>) {
    tcp!(debug, tcb, "timed out", name(tcb.state()));
}

/// The connection gave up: data or FIN unacknowledged past its retransmission bound, or its
/// zero-window probes unanswered past the limit.
pub(crate) fn tcp_gave_up(tcb: &Tcb<'_>) {
    tcp!(
        debug,
        tcb,
        "gave up: the peer stopped answering",
        name(tcb.state())
    );
}

/// The connection's local address left the interface (a DHCP lease lost, say).
pub(crate) fn tcp_address_gone(tcb: &Tcb<'_>) {
    tcp!(debug, tcb, "dropped: the local address is gone");
}

/// The application aborted the connection (RST sent).
pub(crate) fn tcp_aborted(tcb: &Tcb<'_>) {
    if !matches!(tcb.state(), State::Closed | State::Listen) {
        tcp!(debug, tcb, "aborted", name(tcb.state()));
    }
}

/// A `connect_timeout` gave up on the handshake.
pub(crate) fn tcp_connect_timed_out(tcb: &Tcb<'_>) {
    tcp!(debug, tcb, "connect timed out", name(tcb.state()));
}

/// A listener handed out its established connection.
pub(crate) fn tcp_accepted(tcb: &Tcb<'_>) {
    tcp!(debug, tcb, "accepted by the application");
}

/// Whether counting from `before` up to `after` passed 1, 2, 4, 8, ...: how repeated warnings
/// are thinned out.
fn crosses_power_of_two(before: u64, after: u64) -> bool {
    // `checked_ilog2` of 0 is `None`, below every `Some`.
    after.checked_ilog2() > before.checked_ilog2()
}

/// A [`TcpListener`](crate::tcp::TcpListener) on `port` could not replace a listening socket;
/// `total` such failures so far.
pub(crate) fn listener_rearm_failed(port: u16, total: u64) {
    if crosses_power_of_two(total.wrapping_sub(1), total) {
        warn!(
            target: TCP,
            "TCP listener on port {}: no socket slot or buffers for a listening socket ({} times so far); it retries",
            port, total
        );
    } else {
        debug!(
            target: TCP,
            "TCP listener on port {}: no socket slot or buffers for a listening socket ({} times so far)",
            port, total
        );
    }
}

/// A listener on `port` answered a SYN with a SYN cookie (its backlog was full); `total`
/// cookies so far.
pub(crate) fn syn_cookie_sent(port: u16, total: u64) {
    if crosses_power_of_two(total.wrapping_sub(1), total) {
        warn!(
            target: TCP,
            "TCP listener on port {}: backlog full, SYNs answered with cookies ({} so far)",
            port, total
        );
    } else {
        debug!(
            target: TCP,
            "TCP listener on port {}: SYN answered with a cookie ({} so far)", port, total
        );
    }
}

/// A valid SYN cookie for a listener on `port` found no room for its connection; `total` so
/// far.
pub(crate) fn syn_cookie_accept_dropped(port: u16, total: u64) {
    if crosses_power_of_two(total.wrapping_sub(1), total) {
        warn!(
            target: TCP,
            "TCP listener on port {}: a valid SYN cookie found no room (accept queue full, or no socket slot or buffers; {} so far)",
            port, total
        );
    } else {
        debug!(
            target: TCP,
            "TCP listener on port {}: a valid SYN cookie found no room ({} so far)", port, total
        );
    }
}

/// A new socket took the slot of a dropped connection in TIME-WAIT; `total` so far.
pub(crate) fn time_wait_evicted(total: u64) {
    debug!(
        target: TCP,
        "TCP: a connection in TIME-WAIT gave its slot to a new socket ({} so far)",
        total
    );
}

/// `n` frames dropped for `reason`, `total` for that reason so far (counted before the call).
pub(crate) fn frames_dropped(reason: DropReason, n: u64, total: u64) {
    match reason {
        DropReason::BacklogFull
        | DropReason::DatagramQueueFull
        | DropReason::TxTooLong
        | DropReason::TxHeadroom
        | DropReason::TxDriver
            if crosses_power_of_two(total.wrapping_sub(n), total) =>
        {
            warn!(
                target: DROP,
                "dropped {} frame(s): {} ({} so far)",
                n,
                reason.name(),
                total
            )
        }
        DropReason::NotForUs | DropReason::Unsupported => trace!(
            target: DROP,
            "dropped {} frame(s): {} ({} so far)",
            n,
            reason.name(),
            total
        ),
        _ => debug!(
            target: DROP,
            "dropped {} frame(s): {} ({} so far)",
            n,
            reason.name(),
            total
        ),
    }
}

/// The link task applied a change of the driver's link state.
pub(crate) fn link_changed(state: LinkState) {
    match state {
        LinkState::Up => info!(target: LINK, "link up"),
        LinkState::Down => warn!(target: LINK, "link down: nothing is sent until it is back"),
    }
}

/// The stack was built: its hardware address, IP MTU and addresses.
pub(crate) fn stack_created(st: &StackState) {
    info!(
        target: STACK,
        "stack created: hardware address {}, IP MTU {}",
        st.iface.hardware_addr(),
        st.link.caps.ip_mtu()
    );
    for a in st.iface.ip_addrs() {
        info!(target: STACK, "address {}", a);
    }
}

/// The DHCPv4 client reported `lease`; `old` is the lease it replaces, if any.
pub(crate) fn dhcp_configured(old: Option<&Dhcpv4Lease>, lease: &Dhcpv4Lease) {
    let what = if old.is_some() {
        "lease changed to"
    } else {
        "leased"
    };
    match lease.router {
        Some(router) => info!(
            target: DHCP,
            "DHCPv4: {} {} from server {}, router {}",
            what, lease.address, lease.server, router
        ),
        None => info!(
            target: DHCP,
            "DHCPv4: {} {} from server {}, no router",
            what, lease.address, lease.server
        ),
    }
    for dns in lease.dns_servers() {
        debug!(target: DHCP, "DHCPv4: DNS server {}", dns);
    }
}

/// The DHCPv4 lease was given up (expired, refused on renewal, or the client restarted).
pub(crate) fn dhcp_lost(lease: &Dhcpv4Lease) {
    warn!(
        target: DHCP,
        "DHCPv4: lease of {} lost: no IPv4 address until a new lease",
        lease.address
    );
}

/// The link came back: the DHCPv4 client discovers again.
pub(crate) fn dhcp_restarted() {
    info!(target: DHCP, "DHCPv4: link back, discovering again");
}

/// SLAAC changed the interface (an address or a route came or went): logs the IPv6 addresses
/// added and removed since `seen`, which becomes `now`.
pub(crate) fn slaac_changed(seen: &mut IpAddrs, now: &[IpCidr]) {
    debug!(target: SLAAC, "SLAAC: router advertisement applied");
    for old in seen.ipv6() {
        if !now.contains(&IpCidr::Ipv6(old)) {
            info!(target: SLAAC, "SLAAC: address {} removed", old);
        }
    }
    for new in now.iter() {
        if let IpCidr::Ipv6(a) = new {
            if !seen.ipv6().any(|old| old == *a) {
                info!(target: SLAAC, "SLAAC: address {} added", a);
            }
        }
    }
    *seen = IpAddrs::of(now);
}

#[cfg(test)]
mod tests {
    use super::crosses_power_of_two;

    #[test]
    fn warnings_thin_out_at_powers_of_two() {
        let mut warned = (1..=100u64).filter(|&n| crosses_power_of_two(n - 1, n));
        for expected in [1, 2, 4, 8, 16, 32, 64] {
            assert_eq!(warned.next(), Some(expected));
        }
        assert_eq!(warned.next(), None);
        // Several at once: one warning when the batch passes a power of two.
        assert!(crosses_power_of_two(0, 3));
        assert!(crosses_power_of_two(5, 9));
        assert!(!crosses_power_of_two(9, 15));
    }
}
