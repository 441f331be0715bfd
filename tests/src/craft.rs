//! Crafted frames over the in-memory wire: the test plays the hosts on one end of a
//! [`wire`](crate::wire), a stack runs on the other ([`WireTarget`]), and the test writes ARP
//! requests, TCP segments, ICMP echo requests and errors byte by byte ([`arp_request`],
//! [`tcp_frame`], [`icmp_echo_request`], [`icmp_frag_needed`]) and reads what the stack sends back ([`WireTarget::recv`],
//! [`tcp_in`]).

use std::future::poll_fn;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Icmpv4Packet, Icmpv4Repr, IpAddress, IpProtocol, Ipv4Address, Ipv4Packet,
    Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};
use zcnet_buffer::{Driver, FramePool, PoolConfig};
use zcnet_executor::time::timeout;
use zcnet_executor::Executor;
use zcnet_stack::{Config, Stack, StackResources};

use crate::clock::VirtualClock;
use crate::net::{side_config, ADDR};
use crate::wire::{wire_pair, Faults, WireEnd};

/// A host on the wire: its MAC and IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Host {
    /// Its MAC.
    pub mac: EthernetAddress,
    /// Its address.
    pub ip: Ipv4Address,
}

/// The stack a [`WireTarget`] runs: [`ADDR`]`[1]` (10.0.0.2), MAC 02:00:00:00:00:02 (the
/// wire's second end).
pub const STACK: Host = Host {
    mac: EthernetAddress([0x02, 0, 0, 0, 0, 2]),
    ip: ADDR[1],
};

/// The usual peer: [`ADDR`]`[0]` (10.0.0.1), MAC 02:00:00:00:00:01.
pub const PEER: Host = Host {
    mac: EthernetAddress([0x02, 0, 0, 0, 0, 1]),
    ip: ADDR[0],
};

/// An ARP request from `from` for `target`'s address (so the stack learns `from`'s MAC).
pub fn arp_request(from: Host, target: Ipv4Address) -> Vec<u8> {
    let arp = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: from.mac,
        source_protocol_addr: from.ip,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: target,
    };
    let mut f = vec![0u8; 14 + arp.buffer_len()];
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr {
        src_addr: from.mac,
        dst_addr: EthernetAddress::BROADCAST,
        ethertype: EthernetProtocol::Arp,
    }
    .emit(&mut eth);
    arp.emit(&mut ArpPacket::new_unchecked(eth.payload_mut()));
    f
}

/// `from`'s answer to an ARP request: if `frame` is an ARP request for `from`'s address, the
/// reply to its sender; `None` otherwise.
pub fn arp_answer(from: Host, frame: &[u8]) -> Option<Vec<u8>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Arp {
        return None;
    }
    let ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr,
        source_protocol_addr,
        target_protocol_addr,
        ..
    } = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?
    else {
        return None;
    };
    if target_protocol_addr != from.ip {
        return None;
    }
    let arp = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Reply,
        source_hardware_addr: from.mac,
        source_protocol_addr: from.ip,
        target_hardware_addr: source_hardware_addr,
        target_protocol_addr: source_protocol_addr,
    };
    let mut f = vec![0u8; 14 + arp.buffer_len()];
    let mut out = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr {
        src_addr: from.mac,
        dst_addr: source_hardware_addr,
        ethertype: EthernetProtocol::Arp,
    }
    .emit(&mut out);
    arp.emit(&mut ArpPacket::new_unchecked(out.payload_mut()));
    Some(f)
}

/// The Ethernet frame carrying `payload` (an IP protocol's message, checksum included) from
/// `from` to `to` in IPv4, hop limit 64, header checksum computed.
fn ipv4_frame(from: Host, to: Host, next_header: IpProtocol, payload: &[u8]) -> Vec<u8> {
    let ip = Ipv4Repr {
        src_addr: from.ip,
        dst_addr: to.ip,
        next_header,
        payload_len: payload.len(),
        hop_limit: 64,
    };
    let mut f = vec![0u8; 14 + ip.buffer_len() + payload.len()];
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr {
        src_addr: from.mac,
        dst_addr: to.mac,
        ethertype: EthernetProtocol::Ipv4,
    }
    .emit(&mut eth);
    let mut p = Ipv4Packet::new_unchecked(eth.payload_mut());
    ip.emit(&mut p, &ChecksumCapabilities::default());
    p.payload_mut().copy_from_slice(payload);
    f
}

/// An ICMPv4 echo request (a ping) from `from` to `to` with identifier `ident`, sequence
/// number `seq` and `data`, checksums computed.
pub fn icmp_echo_request(from: Host, to: Host, ident: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let icmp = Icmpv4Repr::EchoRequest {
        ident,
        seq_no: seq,
        data,
    };
    let mut m = vec![0u8; icmp.buffer_len()];
    icmp.emit(
        &mut Icmpv4Packet::new_unchecked(&mut m[..]),
        &ChecksumCapabilities::default(),
    );
    ipv4_frame(from, to, IpProtocol::Icmp, &m)
}

/// The Ethernet frame carrying `tcp` from `from` to `to` in IPv4 (hop limit 64), checksums
/// computed.
pub fn tcp_frame(from: Host, to: Host, tcp: &TcpRepr<'_>) -> Vec<u8> {
    let segment = tcp_bytes(from.ip.into(), to.ip.into(), tcp);
    ipv4_frame(from, to, IpProtocol::Tcp, &segment)
}

/// The bytes of `tcp` from `src` to `dst` (header, options and payload), checksum computed.
pub fn tcp_bytes(src: IpAddress, dst: IpAddress, tcp: &TcpRepr<'_>) -> Vec<u8> {
    let mut segment = vec![0u8; tcp.buffer_len()];
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut segment[..]),
        &src,
        &dst,
        &ChecksumCapabilities::default(),
    );
    segment
}

/// An ICMPv4 "fragmentation needed and DF set" (type 3, code 4) from `router` to `to`, naming
/// the next-hop MTU `mtu` and quoting `quoted`, the start of the IP datagram the router could
/// not forward (its IP header and at least 8 bytes of what follows); checksums computed.
pub fn icmp_frag_needed(router: Host, to: Host, mtu: u16, quoted: &[u8]) -> Vec<u8> {
    let mut icmp = vec![3, 4, 0, 0, 0, 0];
    icmp.extend_from_slice(&mtu.to_be_bytes());
    icmp.extend_from_slice(quoted);
    let ck = !smoltcp::wire::checksum::data(&icmp);
    icmp[2..4].copy_from_slice(&ck.to_be_bytes());
    ipv4_frame(router, to, IpProtocol::Icmp, &icmp)
}

/// A segment from `from`:`ports.0` to the stack's `ports.1` without options (but MSS 1460 on a
/// SYN), window 8192, sequence and acknowledgement numbers as given: its frame,
/// [`tcp_frame`] to [`STACK`].
pub fn peer_segment(
    from: Host,
    ports: (u16, u16),
    control: TcpControl,
    seq: u32,
    ack: Option<u32>,
    payload: &[u8],
) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: ports.0,
        dst_port: ports.1,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: 8192,
        window_scale: None,
        max_seg_size: (control == TcpControl::Syn).then_some(1460),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    tcp_frame(from, STACK, &tcp)
}

/// A TCP segment read from a frame: the IPv4 header fields tests look at, and the segment.
#[derive(Debug)]
pub struct TcpIn<'a> {
    /// The source.
    pub src: Ipv4Address,
    /// The destination.
    pub dst: Ipv4Address,
    /// The IPv4 identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
    /// The segment.
    pub tcp: TcpRepr<'a>,
}

/// The TCP segment in `frame` (an Ethernet frame), with both checksums verified (a bad one
/// panics: the stack never sends one); `None` for anything else.
pub fn tcp_in(frame: &[u8]) -> Option<TcpIn<'_>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    assert!(ip.verify_checksum(), "IPv4 header checksum");
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let (ident, dont_frag) = (ip.ident(), ip.dont_frag());
    let t = TcpPacket::new_checked(ip.payload()).ok()?;
    assert!(t.verify_checksum(&src.into(), &dst.into()), "TCP checksum");
    let tcp = TcpRepr::parse(
        &t,
        &src.into(),
        &dst.into(),
        &ChecksumCapabilities::default(),
    )
    .ok()?;
    Some(TcpIn {
        src,
        dst,
        ident,
        dont_frag,
        tcp,
    })
}

/// A stack on one end of a wire, on a virtual clock; the test plays the other end's device.
#[derive(Debug)]
pub struct WireTarget {
    /// The executor the stack runs on (over a [`VirtualClock`]).
    pub exec: &'static Executor,
    /// The test's end of the wire.
    pub end: WireEnd,
    /// The stack, at [`STACK`].
    pub stack: Stack,
    /// The test's pool and the stack's.
    pub pools: [&'static FramePool; 2],
}

impl WireTarget {
    /// A stack at [`STACK`] with `S` socket slots, the secret made from `seed`, and pools of
    /// `slots` slots on both ends; its tasks spawned.
    pub fn new<const S: usize>(seed: u64, slots: usize) -> WireTarget {
        Self::with_config::<S>(seed, slots, |_| {})
    }

    /// [`new`](Self::new), with `configure` adjusting the stack's configuration (static
    /// [`STACK`] address, the secret from `seed`) before the stack is built.
    pub fn with_config<const S: usize>(
        seed: u64,
        slots: usize,
        configure: impl FnOnce(&mut Config),
    ) -> WireTarget {
        let mut config = side_config(1, seed);
        configure(&mut config);
        let exec = Executor::leak(VirtualClock::leak());
        let pools = [
            FramePool::leak(PoolConfig::new(slots)).expect("pool"),
            FramePool::leak(PoolConfig::new(slots)).expect("pool"),
        ];
        let (a, b) = wire_pair(exec, pools, Faults::default());
        let b: &'static mut WireEnd = Box::leak(Box::new(b));
        let resources: &'static StackResources<S> = StackResources::leak();
        let (stack, runner) = Stack::new(exec, pools[1], b, config, resources).expect("stack");
        runner.spawn(exec.local_spawner());
        WireTarget {
            exec,
            end: a,
            stack,
            pools,
        }
    }

    /// Delivers `frame` to the stack.
    pub fn send(&mut self, frame: &[u8]) {
        let mut cx = Context::from_waker(Waker::noop());
        let Poll::Ready(mut f) = self.end.poll_transmit_frame(&mut cx) else {
            panic!("the test's pool has a free slot");
        };
        f.append(frame.len()).unwrap().copy_from_slice(frame);
        self.end.transmit(f).unwrap();
    }

    /// The next frame the stack sends within `within` of its (virtual) time, if any.
    pub fn recv(&mut self, within: Duration) -> Option<Vec<u8>> {
        let end = &mut self.end;
        let got = self.exec.block_on(timeout(
            within,
            poll_fn(|cx| end.poll_receive(cx).map(|f| f.to_vec())),
        ));
        got.ok()
    }
}
