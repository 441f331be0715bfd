//! The `classifier_neighbors` target: the zero-copy path's frame classifier and the neighbour
//! table (ARP / NDP snooping, lookups, held frames, requests and give-ups), called directly
//! through `zcnet_stack::fuzzing` on a stack whose tasks never run.
//!
//! The stack (static `10.0.0.2/24` via `10.0.0.1`, static `fd00::2/64`, link-local on) has
//! zero-copy sockets bound to port 7 (any address) and `10.0.0.2:9`. Each operation is one of:
//! classify a frame (raw, or built: ARP, NDP, UDP), look a next hop up for the stack's own
//! traffic or for an unsolicited answer and hold a frame for it when it is unknown (as a send
//! does), prime a next hop, run egress's neighbour step, poll or
//! detach a held send, or move the clock. After each, the table's invariants hold
//! ([`Probe::check`], the bounds on unsolicited entries and frames included), a lookup for
//! the stack's own traffic always found a place, and a datagram the classifier delivers lies
//! inside its frame. At the end
//! every waiting send is detached and the clock moved past the give-up time: nothing stays
//! held, and the pool holds only the stack's scratch slot.

use std::cell::{RefCell, RefMut};
use std::task::{Context, Poll};

use zcnet_buffer::{
    Capabilities, Driver, FramePool, HardwareAddress, LinkState, Medium, PoolConfig, RxFrame,
    TxError, TxFrame,
};
use zcnet_executor::Executor;
use zcnet_stack::datagram::{DatagramQueue, DatagramSocket};
use zcnet_stack::fuzzing::{Probe, Resolution, Verdict};
use zcnet_stack::{
    Config, IpAddress, Ipv4Address, Ipv4Cidr, Ipv4Config, Ipv6Address, Ipv6Cidr, Stack,
    StackResources, StaticV4, StaticV6,
};
use zcnet_tests::clock::VirtualClock;

use crate::frames::*;
use crate::input::Reader;

/// Slots in the pool.
pub const SLOTS: usize = 48;
/// Operations per input at most.
pub const MAX_OPS: usize = 128;

/// A driver that never receives and completes every transmission at once, after checking
/// that the frame has an Ethernet header from the stack. (The destination is not checked: the
/// table learns any MAC smoltcp calls unicast, the all-zero one included, as smoltcp's own
/// cache does.)
struct NullDriver(&'static FramePool);

impl Driver for NullDriver {
    fn poll_receive(&mut self, _cx: &mut Context<'_>) -> Poll<RxFrame> {
        Poll::Pending
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.0.poll_alloc_tx(cx)
    }

    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        assert!(frame.len() >= 14, "frame without an Ethernet header");
        assert_eq!(frame[6..12], OUR_MAC, "source MAC");
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Medium::Ethernet, 1500)
    }

    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet(OUR_MAC)
    }

    fn poll_link_state(&mut self, _cx: &mut Context<'_>) -> LinkState {
        LinkState::Up
    }
}

struct Target {
    probe: Probe,
    pool: &'static FramePool,
    /// The probe's clock, milliseconds; only moves forward, across inputs too.
    now: u64,
}

std::thread_local! {
    /// The probe's stack belongs to the thread it was built on (libFuzzer runs every input on
    /// one thread), so the target lives in a thread-local, leaked for `'static`.
    static T: &'static RefCell<Target> = Box::leak(Box::new(RefCell::new(new_target())));
}

fn target() -> RefMut<'static, Target> {
    T.with(|t| *t).borrow_mut()
}

/// The probe's stack, its pool and two bound datagram sockets.
fn new_target() -> Target {
    let exec = Executor::leak(VirtualClock::leak());
    let pool = FramePool::leak(PoolConfig::new(SLOTS)).expect("pool");
    let driver: &'static mut NullDriver = Box::leak(Box::new(NullDriver(pool)));
    let config = Config {
        ipv4: Ipv4Config::Static(StaticV4 {
            address: Ipv4Cidr::new(Ipv4Address::new(10, 0, 0, 2), 24),
            gateway: Some(Ipv4Address::new(10, 0, 0, 1)),
        }),
        ipv6: Some(StaticV6 {
            address: Ipv6Cidr::new(Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 2), 64),
            gateway: None,
        }),
        ipv6_link_local: true,
        ..Config::new(zcnet_tests::secret::seeded(0xf022))
    };
    let resources: &'static StackResources<4> = Box::leak(Box::new(StackResources::new()));
    // The runner is never run: the probe stands in for its tasks.
    let (stack, _runner) = Stack::new(exec, pool, driver, config, resources).expect("stack");
    let any = DatagramSocket::bind(stack, 7u16, DatagramQueue::with_capacity(4)).unwrap();
    let one = DatagramSocket::bind(
        stack,
        (IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 2)), 9u16),
        DatagramQueue::with_capacity(4),
    )
    .unwrap();
    std::mem::forget((any, one));
    Target {
        probe: Probe::new(stack),
        pool,
        now: 0,
    }
}

/// A next hop: one of a few on-link addresses (so inputs meet the same ones again), or any.
fn next_hop(r: &mut Reader<'_>) -> IpAddress {
    match r.u8() % 8 {
        0 => IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1)),
        1 => IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 3)),
        2 => IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, r.u8())),
        3 => IpAddress::Ipv6(Ipv6Address::from_octets(PEER_V6)),
        4 => IpAddress::Ipv6(Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 5)),
        5 => IpAddress::Ipv4(Ipv4Address::from_octets(r.u32().to_be_bytes())),
        _ => {
            let mut a = [0u8; 16];
            a[..2].copy_from_slice(&[0xfe, 0x80]);
            a[14..].copy_from_slice(&r.u16().to_be_bytes());
            IpAddress::Ipv6(Ipv6Address::from_octets(a))
        }
    }
}

fn v4_of(ip: IpAddress) -> [u8; 4] {
    match ip {
        IpAddress::Ipv4(a) => a.octets(),
        IpAddress::Ipv6(a) => {
            let o = a.octets();
            [o[12], o[13], o[14], o[15]]
        }
    }
}

fn v6_of(ip: IpAddress) -> [u8; 16] {
    match ip {
        IpAddress::Ipv6(a) => a.octets(),
        IpAddress::Ipv4(a) => {
            let mut o = [0u8; 16];
            o[..2].copy_from_slice(&[0xfe, 0x80]);
            o[12..].copy_from_slice(&a.octets());
            o
        }
    }
}

/// A frame to classify, built from the input.
fn frame(r: &mut Reader<'_>) -> Vec<u8> {
    let op = r.u8();
    let mut mac = PEER_MAC;
    if op & 0x80 != 0 {
        mac.copy_from_slice(r.bytes(6).get(..6).unwrap_or(&PEER_MAC));
    }
    let our4 = [10, 0, 0, 2];
    let our6 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    match op % 8 {
        0 => {
            let mut f = r.long(1514).to_vec();
            if op & 0x40 != 0 {
                fix_checksums(&mut f);
            }
            f
        }
        1 => {
            let who = next_hop(r);
            let target = if r.u8() & 1 == 0 {
                our4
            } else {
                r.u32().to_be_bytes()
            };
            arp(1 + u16::from(r.u8() & 1), mac, v4_of(who), OUR_MAC, target)
        }
        2 => {
            let who = next_hop(r);
            let mut f = ndp_na(mac, v6_of(who), OUR_MAC, our6);
            // The Router, Solicited and Override flags as the fuzzer chooses.
            f[14 + 40 + 4] = r.u8() & 0xe0;
            fix_checksums(&mut f);
            f
        }
        3 => {
            let who = next_hop(r);
            let target = if r.u8() & 1 == 0 { our6 } else { OUR_V6 };
            ndp_ns(mac, v6_of(who), target)
        }
        4 | 5 => {
            let port = match r.u8() % 3 {
                0 => 7,
                1 => 9,
                _ => r.u16(),
            };
            let payload = r.long(1400);
            let d = udp(r.u16(), port, payload);
            let mut f = if op % 8 == 4 {
                let dst = if r.u8() & 1 == 0 {
                    our4
                } else {
                    [10, 0, 0, 255]
                };
                eth(
                    OUR_MAC,
                    mac,
                    ETH_IPV4,
                    &ipv4(v4_of(next_hop(r)), dst, P_UDP, &d),
                )
            } else {
                eth(OUR_MAC, mac, ETH_IPV6, &ipv6(PEER_V6, our6, P_UDP, 64, &d))
            };
            fix_checksums(&mut f);
            if op & 0x40 != 0 {
                // A length or checksum the fuzzer chooses.
                let at = usize::from(r.u8()) % f.len();
                f[at] = r.u8();
            }
            f
        }
        _ => {
            // NDP of any type with a fuzzed body (options included).
            let ty = 133 + r.u8() % 5;
            let mut icmp = vec![ty, 0, 0, 0];
            icmp.extend_from_slice(r.long(256));
            let mut f = eth(
                OUR_MAC,
                mac,
                ETH_IPV6,
                &ipv6(v6_of(next_hop(r)), our6, P_ICMPV6, 255, &icmp),
            );
            fix_checksums(&mut f);
            f
        }
    }
}

/// Runs one input (the target's whole body).
pub fn run(data: &[u8]) {
    let mut t = target();
    let t = &mut *t;
    let mut tickets: Vec<u32> = Vec::new();
    let mut r = Reader::new(data);
    for _ in 0..MAX_OPS {
        if r.is_empty() {
            break;
        }
        match r.u8() % 8 {
            0 | 1 => {
                let f = frame(&mut r);
                if let Verdict::Deliver {
                    socket,
                    offset,
                    len,
                } = t.probe.classify(&f, t.now)
                {
                    assert!(socket < 2, "socket {socket}");
                    assert!(offset >= 14 + 20 + 8, "payload at {offset}");
                    assert!(offset + len <= f.len(), "{offset} + {len} > {}", f.len());
                }
            }
            2 | 3 => {
                let ip = next_hop(&mut r);
                // Answers to possibly forged addresses, or the stack's own traffic (which
                // always finds a place: the least recently used entry makes room).
                let unsolicited = r.u8() & 1 == 0;
                let found = t.probe.lookup(ip, t.now, unsolicited);
                assert!(
                    unsolicited || found != Resolution::Full,
                    "own traffic found no room"
                );
                if found == Resolution::Unknown {
                    if let Some(mut f) = t.pool.try_alloc_tx() {
                        let _ = f.set_headroom(64);
                        let _ = f.append(usize::from(r.u8()));
                        let kind = if ip.version() == zcnet_stack::datagram::IpVersion::Ipv4 {
                            0x45
                        } else {
                            0x60
                        };
                        if let Ok(b) = f.append(1) {
                            b[0] = kind;
                        }
                        if let Some(ticket) = t.probe.hold(f, ip, r.u8() & 1 == 0) {
                            tickets.push(ticket);
                        }
                    }
                }
            }
            4 => t.probe.prime(next_hop(&mut r), t.now),
            5 => {
                t.probe.egress(t.now);
            }
            6 => {
                if !tickets.is_empty() {
                    let i = usize::from(r.u8()) % tickets.len();
                    if r.u8() & 1 == 0 {
                        if t.probe.poll_held(tickets[i]).is_some() {
                            tickets.swap_remove(i);
                        }
                    } else {
                        t.probe.detach(tickets.swap_remove(i));
                    }
                }
            }
            _ => t.now += u64::from(r.u16()),
        }
        if let Err(e) = t.probe.check() {
            panic!("neighbour table: {e}");
        }
        if let Some(d) = t.probe.deadline_ms() {
            assert!(
                d <= t.now + 3_000 + 1_000,
                "deadline {d} too far from {}",
                t.now
            );
        }
    }
    // Nobody waits any more; past the give-up time everything held is sent or failed.
    for ticket in tickets {
        t.probe.detach(ticket);
    }
    t.now += 3_001;
    t.probe.egress(t.now);
    if let Err(e) = t.probe.check() {
        panic!("neighbour table after the give-up: {e}");
    }
    assert_eq!(
        t.probe.held_frames(),
        0,
        "frames held past the give-up time"
    );
    let occ = t.pool.audit().expect("pool audit");
    assert_eq!(occ.tx, 1, "only the stack's scratch slot is out: {occ:?}");
    assert_eq!(occ.free, SLOTS - 1, "{occ:?}");
}
