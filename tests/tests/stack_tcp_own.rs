//! zcnet's own TCP against the wire and against smoltcp's:
//!
//! * a segment to a closed port is answered with a RST that zcnet's TCP built (numbered by
//!   its own IPv4 identification counter for the peer), counted as `NoSocket`;
//! * on a clean exchange (handshake, three data segments from the peer, a reply, FIN both
//!   ways) zcnet's TCP emits exactly the segments smoltcp's own `tcp::Socket` emits, driven
//!   through a smoltcp `Interface` by the same scripted peer: flags, sequence and
//!   acknowledgement numbers (relative to each side's initial sequence number), windows,
//!   payload lengths and SYN options;
//! * a bulk transfer over a lossy wire arrives byte-exact, retransmissions show in the copy
//!   ledger as such, and both pools audit clean afterwards.

use std::collections::VecDeque;
use std::time::Duration;

use smoltcp::iface::{Config as SmolConfig, Interface, SocketSet};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp as smol_tcp;
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{HardwareAddress, IpCidr, TcpControl};
use zcnet_buffer::ledger::{CopySite, LEDGER};
use zcnet_buffer::FramePool;
use zcnet_executor::time::timeout;
use zcnet_executor::Executor;
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::{DropReason, Stack};
use zcnet_tests::audit::assert_slots_back;
use zcnet_tests::clock::VirtualClock;
use zcnet_tests::craft::{self, WireTarget, PEER, STACK};
use zcnet_tests::net::{pair_on, ADDR};
use zcnet_tests::wire::Faults;

const PEER_ISN: u32 = 1000;
const PEER_PORT: u16 = 40000;
const BUF: usize = 4096;

/// The implementation under test, as the scripted peer sees it.
trait Target {
    /// Delivers `frame` to it.
    fn send(&mut self, frame: &[u8]);
    /// The next frame it emits within `within` of its (virtual) time, if any.
    fn recv(&mut self, within: Duration) -> Option<Vec<u8>>;
}

/// An ARP request from the peer for 10.0.0.2 (so both implementations learn the peer's MAC).
fn arp_request() -> Vec<u8> {
    craft::arp_request(PEER, STACK.ip)
}

/// A segment from the peer to `port` on 10.0.0.2, checksums computed.
fn segment(port: u16, control: TcpControl, seq: u32, ack: Option<u32>, payload: &[u8]) -> Vec<u8> {
    craft::peer_segment(PEER, (PEER_PORT, port), control, seq, ack, payload)
}

/// One emitted TCP segment, as compared: numbers relative to the initial sequence numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seg {
    syn: bool,
    ack: bool,
    fin: bool,
    rst: bool,
    psh: bool,
    seq: u32,
    ack_no: u32,
    window: u16,
    payload: usize,
    mss: Option<u16>,
    wscale: Option<u8>,
    sack_permitted: bool,
}

/// The TCP segment in `frame` (an Ethernet frame from the implementation), with the IPv4
/// identification, or `None` for anything else. Checksums are verified.
fn parse(frame: &[u8], isn: u32) -> Option<(Seg, u16)> {
    let s = craft::tcp_in(frame)?;
    let r = &s.tcp;
    let seg = Seg {
        syn: r.control == TcpControl::Syn,
        ack: r.ack_number.is_some(),
        fin: r.control == TcpControl::Fin,
        rst: r.control == TcpControl::Rst,
        psh: r.control == TcpControl::Psh,
        seq: r.seq_number.0.wrapping_sub(isn as i32) as u32,
        ack_no: r
            .ack_number
            .map_or(0, |a| a.0.wrapping_sub(PEER_ISN as i32) as u32),
        window: r.window_len,
        payload: r.payload.len(),
        mss: r.max_seg_size,
        wscale: r.window_scale,
        sack_permitted: r.sack_permitted,
    };
    Some((seg, s.ident))
}

/// The next TCP segment the target emits within `within` (frames of other kinds, ARP
/// replies, are skipped), raw.
fn next_tcp(t: &mut dyn Target, within: Duration) -> Option<Vec<u8>> {
    while let Some(f) = t.recv(within) {
        if parse(&f, 0).is_some() {
            return Some(f);
        }
    }
    None
}

/// The scripted peer: connects to port 80, sends three 100-byte segments (each after the
/// previous one was acknowledged), receives the server's 50-byte reply with its FIN, answers
/// with its own FIN and waits for the final ACK. Returns every segment the server emitted.
fn exchange(t: &mut dyn Target) -> Vec<Seg> {
    let step = Duration::from_secs(1);
    t.send(&arp_request());
    t.send(&segment(80, TcpControl::Syn, PEER_ISN, None, &[]));
    let synack = next_tcp(t, step).expect("SYN-ACK");
    let isn = craft::tcp_in(&synack).unwrap().tcp.seq_number.0 as u32;
    let mut out = vec![parse(&synack, isn).unwrap().0];
    let ack = |n: u32| Some(isn.wrapping_add(n));
    t.send(&segment(80, TcpControl::None, PEER_ISN + 1, ack(1), &[]));
    for k in 0..3u32 {
        let data = [b'a' + k as u8; 100];
        t.send(&segment(
            80,
            TcpControl::Psh,
            PEER_ISN + 1 + 100 * k,
            ack(1),
            &data,
        ));
        let f = next_tcp(t, step).expect("the data's ACK (the third: the reply)");
        out.push(parse(&f, isn).unwrap().0);
    }
    // The third data segment's answer is the reply; its FIN may come with it or after it.
    if !out.last().unwrap().fin {
        let f = next_tcp(t, step).expect("FIN");
        out.push(parse(&f, isn).unwrap().0);
    }
    t.send(&segment(
        80,
        TcpControl::Fin,
        PEER_ISN + 301,
        ack(1 + 50 + 1),
        &[],
    ));
    let f = next_tcp(t, step).expect("the ACK of the peer's FIN");
    out.push(parse(&f, isn).unwrap().0);
    assert!(next_tcp(t, step).is_none(), "nothing more");
    out
}

/// zcnet's stack on one end of a wire; the test plays the other end's device.
impl Target for WireTarget {
    fn send(&mut self, frame: &[u8]) {
        WireTarget::send(self, frame)
    }

    fn recv(&mut self, within: Duration) -> Option<Vec<u8>> {
        WireTarget::recv(self, within)
    }
}

/// A zcnet stack at 10.0.0.2 on a wire whose other end the test keeps.
fn zcnet_target(seed: u64) -> (WireTarget, Stack, [&'static FramePool; 2]) {
    let t = WireTarget::new::<8>(seed, 32);
    let (stack, pools) = (t.stack, t.pools);
    (t, stack, pools)
}

/// The server application both implementations run: accept on 80, read 300 bytes, answer
/// with 50, close.
const REPLY: [u8; 50] = [b'r'; 50];

/// smoltcp's device for the reference: frames in, frames out, in memory.
#[derive(Default)]
struct Queues {
    rx: VecDeque<Vec<u8>>,
    tx: VecDeque<Vec<u8>>,
}

struct Rx(Vec<u8>);
struct Tx<'a>(&'a mut VecDeque<Vec<u8>>);

impl phy::RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = vec![0u8; len];
        let r = f(&mut buf);
        self.0.push_back(buf);
        r
    }
}

impl Device for Queues {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx<'a>;

    fn receive(&mut self, _: SmolInstant) -> Option<(Rx, Tx<'_>)> {
        let f = self.rx.pop_front()?;
        Some((Rx(f), Tx(&mut self.tx)))
    }

    fn transmit(&mut self, _: SmolInstant) -> Option<Tx<'_>> {
        Some(Tx(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = 1514;
        c
    }
}

/// smoltcp's own TCP socket through its interface, running the same server application.
struct Smol {
    dev: Queues,
    iface: Interface,
    sockets: SocketSet<'static>,
    handle: smoltcp::iface::SocketHandle,
    now: SmolInstant,
    received: usize,
    replied: bool,
}

impl Smol {
    fn new() -> Self {
        let mut dev = Queues::default();
        let now = SmolInstant::from_millis(0);
        let mut iface = Interface::new(
            SmolConfig::new(HardwareAddress::Ethernet(STACK.mac)),
            &mut dev,
            now,
        );
        iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(ADDR[1].into(), 24)).unwrap();
        });
        let mut sockets = SocketSet::new(Vec::new());
        let mut s = smol_tcp::Socket::new(
            smol_tcp::SocketBuffer::new(vec![0; BUF]),
            smol_tcp::SocketBuffer::new(vec![0; BUF]),
        );
        s.listen(80).unwrap();
        let handle = sockets.add(s);
        Self {
            dev,
            iface,
            sockets,
            handle,
            now,
            received: 0,
            replied: false,
        }
    }

    /// One poll, then the application.
    fn poll(&mut self) {
        self.iface.poll(self.now, &mut self.dev, &mut self.sockets);
        let s = self.sockets.get_mut::<smol_tcp::Socket>(self.handle);
        while s.can_recv() {
            self.received += s.recv(|b| (b.len(), b.len())).unwrap();
        }
        if self.received >= 300 && !self.replied {
            s.send_slice(&REPLY).unwrap();
            s.close();
            self.replied = true;
        }
    }
}

impl Target for Smol {
    fn send(&mut self, frame: &[u8]) {
        self.dev.rx.push_back(frame.to_vec());
    }

    fn recv(&mut self, within: Duration) -> Option<Vec<u8>> {
        let deadline = self.now + smoltcp::time::Duration::from_micros(within.as_micros() as u64);
        loop {
            if let Some(f) = self.dev.tx.pop_front() {
                return Some(f);
            }
            self.poll();
            if let Some(f) = self.dev.tx.pop_front() {
                return Some(f);
            }
            match self.iface.poll_at(self.now, &self.sockets) {
                Some(t) if t <= deadline && t > self.now => self.now = t,
                Some(t) if t <= self.now => {
                    self.now += smoltcp::time::Duration::from_millis(1);
                }
                _ => {
                    self.now = deadline;
                    self.poll();
                    return self.dev.tx.pop_front();
                }
            }
        }
    }
}

/// A segment to a port nobody listens on gets a RST|ACK built by zcnet's TCP: sequence 0,
/// acknowledging the SYN, counted as `NoSocket`, and numbered by zcnet's IPv4 identification
/// counter for this peer (smoltcp's packets carry 0): a second RST is the first plus one.
#[test]
fn a_segment_to_a_closed_port_gets_a_reset_from_zcnet() {
    let (mut z, stack, pools) = zcnet_target(7);
    z.send(&arp_request());
    z.send(&segment(81, TcpControl::Syn, PEER_ISN, None, &[]));
    let f = next_tcp(&mut z, Duration::from_secs(1)).expect("a RST");
    let (seg, ident) = parse(&f, 0).unwrap();
    assert!(seg.rst && seg.ack && !seg.syn, "{seg:?}");
    assert_eq!((seg.seq, seg.ack_no, seg.window), (0, 1, 0), "{seg:?}");
    assert_ne!(ident, 0, "not smoltcp's identification");
    assert_eq!(stack.stats().dropped(DropReason::NoSocket), 1);
    // A RST to the closed port is not answered.
    z.send(&segment(81, TcpControl::Rst, PEER_ISN + 1, None, &[]));
    assert!(next_tcp(&mut z, Duration::from_secs(1)).is_none());
    assert_eq!(stack.stats().dropped(DropReason::NoSocket), 1);
    z.send(&segment(82, TcpControl::Syn, PEER_ISN, None, &[]));
    let f = next_tcp(&mut z, Duration::from_secs(1)).expect("a second RST");
    let (seg, second) = parse(&f, 0).unwrap();
    assert!(seg.rst, "{seg:?}");
    assert_eq!(
        second,
        ident.wrapping_add(1),
        "zcnet's counter for this peer"
    );
    assert_eq!(stack.stats().dropped(DropReason::NoSocket), 2);
    for p in pools {
        assert_slots_back(p, 0);
    }
}

/// The same clean exchange against zcnet's TCP and smoltcp's: the segments match one for one.
#[test]
fn zcnet_emits_what_smoltcp_emits_on_a_clean_exchange() {
    let (mut z, stack, pools) = zcnet_target(11);
    let server = stack.executor().local_spawner().spawn(async move {
        let mut s = TcpSocket::new(stack, TcpBuffers::with_capacity(BUF, BUF)).unwrap();
        s.accept(80).await.unwrap();
        let mut got = 0;
        let mut buf = [0u8; 512];
        while got < 300 {
            got += s.read(&mut buf).await.unwrap();
        }
        s.write_all(&REPLY).await.unwrap();
        s.close();
        s.closed().await;
        got
    });
    // The server listens before the first segment arrives.
    stack.executor().run_until_idle();
    let ours = exchange(&mut z);
    let exec = stack.executor();
    let done = exec.block_on(timeout(Duration::from_secs(1), server));
    assert_eq!(done.ok(), Some(300), "{ours:#?}");
    let reference = exchange(&mut Smol::new());
    // Sanity of the script: SYN-ACK, three ACKs (the last one carrying the reply and FIN, or
    // followed by it), the final ACK.
    assert!(
        ours[0].syn && ours[0].ack && ours[0].mss == Some(1460),
        "{ours:#?}"
    );
    assert!(ours.iter().any(|s| s.payload == REPLY.len()), "{ours:#?}");
    assert!(ours.iter().any(|s| s.fin), "{ours:#?}");
    assert!(ours.len() >= 5, "{ours:#?}");
    assert_eq!(ours, reference, "zcnet (left) and smoltcp (right) differ");
    for p in pools {
        assert_slots_back(p, 0);
    }
}

/// 256 KiB over a wire that loses 3% of frames: byte-exact, the lost segments sent again
/// (recorded in the ledger as retransmissions, not first emissions), and both pools audit
/// clean once the connection is gone.
#[test]
fn a_lossy_bulk_transfer_is_exact_and_the_pools_audit_clean() {
    const LEN: usize = 256 * 1024;
    let faults = Faults {
        seed: 42,
        loss: 0.03,
        ..Faults::default()
    };
    let p = pair_on(Executor::leak(VirtualClock::leak()), faults, 64);
    let [a, b] = p.stacks;
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 251) as u8).collect();
    let before = LEDGER.snapshot();
    let sent = data.clone();
    let got = p.exec.block_on(async move {
        let server = b.executor().local_spawner().spawn(async move {
            let mut s = TcpSocket::new(b, TcpBuffers::with_capacity(16384, 16384)).unwrap();
            s.accept(5001).await.unwrap();
            let mut got = Vec::new();
            while let Some(chunk) = s.read_with(|d| (d.len(), d.to_vec())).await.unwrap() {
                got.extend_from_slice(&chunk);
            }
            s.close();
            s.closed().await;
            got
        });
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(16384, 16384)).unwrap();
        c.connect((ADDR[1], 5001)).await.unwrap();
        let mut off = 0;
        while off < sent.len() {
            off += c
                .write_with(|space| {
                    let n = space.len().min(sent.len() - off);
                    space[..n].copy_from_slice(&sent[off..off + n]);
                    (n, n)
                })
                .await
                .unwrap();
        }
        c.close();
        c.closed().await;
        let got = server.await;
        drop(c);
        // TIME-WAIT and the last retransmissions run out.
        a.executor().sleep(Duration::from_secs(30)).await;
        got
    });
    assert!(got == data, "the stream arrived byte-exact");
    let copies = LEDGER.snapshot().since(&before);
    // Segments go out of the send queue's frames themselves, first transmissions and
    // retransmissions alike: what the stack copies into fresh frames (a segment that is only a
    // prefix of a frame; other tests in this binary add their own) stays far below the stream.
    let copied = copies.bytes(CopySite::Emit) + copies.bytes(CopySite::Retransmit);
    assert!(copied < LEN as u64 / 4, "{copies:?}");
    assert!(p.ends[0].tx_stats().lost > 0);
    p.assert_slots_back();
}
