//! The differential check of `process`'s fast path: two identical worlds, each a pair of
//! connections talking over an in-memory wire, driven by the same operations; in one world the
//! connections take segments on the fast path, in the other every segment goes through the full
//! processing. After every operation both worlds must agree on everything: each connection's
//! state (sequence numbers, windows, timers, RTT estimator, loss recovery, RACK, congestion
//! control, counters, queue lengths), every segment sent, every answer and every byte the
//! application reads.
//!
//! The operations come from bytes ([`run`]): the applications write, read, take segments,
//! close; either side sends; the wire delivers, loses, duplicates or reorders; the clock moves;
//! forged segments (a delivered one with its sequence number, acknowledgement, flags, window,
//! timestamp or SACK blocks changed) arrive. The unit tests below run it on random bytes and on
//! scripted request/response and bulk traffic; the fuzz target `tcp_fast_path`
//! (`tests/fuzz/`) runs it on libFuzzer's.

extern crate alloc;

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt::Write;

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint, IpRepr, TcpControl, TcpRepr, TcpSeqNumber};
use zcnet_buffer::{FramePool, PoolConfig, RxFrame, TxChain, DEFAULT_HEADROOM};

use super::super::context::{ChallengeAcks, LocalAddrs, TcpContext, TcpKeys};
use super::super::recv::RecvBuffer;
use super::super::send::SendBuffer;
use super::Tcb;
use crate::config::Secret;
use crate::keys::Prf;

/// The client's address and port.
const A: IpEndpoint = IpEndpoint {
    addr: IpAddress::Ipv4(smoltcp::wire::Ipv4Address::new(10, 9, 0, 1)),
    port: 49152,
};
/// The server's address and port.
const B: IpEndpoint = IpEndpoint {
    addr: IpAddress::Ipv4(smoltcp::wire::Ipv4Address::new(10, 9, 0, 2)),
    port: 80,
};
/// The IP MTU both sides have.
const IP_MTU: usize = 1500;
/// The most payload of a super-segment, when a send offers them (a few frames).
const GSO_PAYLOAD: usize = 6000;
/// Segments a wire direction holds; more are lost.
const WIRE_LEN: usize = 64;
/// Receive frames of each world's pool.
const RX_SLOTS: usize = 192;
/// Send frames of each world's pool (both connections' send queues).
const TX_SLOTS: usize = 96;

/// One host's address, as the connection's context sees it.
struct OneAddr(IpAddress);

impl LocalAddrs for OneAddr {
    fn source_address(&self, _dst: &IpAddress) -> Option<IpAddress> {
        Some(self.0)
    }

    fn has_ip_addr(&self, addr: IpAddress) -> bool {
        addr == self.0
    }
}

/// The pools of one world: frames for received payload and for the send queues.
struct Pools {
    rx: &'static FramePool,
    tx: &'static FramePool,
}

/// What the worlds share and keep between runs (pools are leaked, so a fuzzer running
/// millions of inputs makes them once): the keys and each world's pools. Every run returns
/// every frame it took.
pub(crate) struct TwinEnv {
    keys: TcpKeys,
    prf: Prf,
    pools: [Pools; 2],
    addr_a: OneAddr,
    addr_b: OneAddr,
}

impl TwinEnv {
    /// Makes the environment (leaks its pools).
    pub(crate) fn leak() -> &'static TwinEnv {
        let pools = || Pools {
            rx: FramePool::leak(PoolConfig::new(RX_SLOTS)).expect("twin rx pool"),
            tx: FramePool::leak(PoolConfig::new(TX_SLOTS)).expect("twin tx pool"),
        };
        let prf = Prf::new(&Secret::new([7; Secret::LEN]));
        alloc::boxed::Box::leak(alloc::boxed::Box::new(TwinEnv {
            keys: TcpKeys::new(prf.clone()),
            prf,
            pools: [pools(), pools()],
            addr_a: OneAddr(A.addr),
            addr_b: OneAddr(B.addr),
        }))
    }
}

/// A segment on the wire: its headers and its payload.
#[derive(Clone, Debug)]
struct Seg {
    ip: IpRepr,
    tcp: TcpRepr<'static>,
    payload: Vec<u8>,
}

/// Which connection.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    A,
    B,
}

/// A pair of connections and the wire between them.
struct World {
    env: &'static TwinEnv,
    pools: &'static Pools,
    a: Tcb<'static>,
    b: Tcb<'static>,
    /// Segments from A to B, then from B to A.
    wire: [VecDeque<Seg>; 2],
    /// The last segment delivered in each direction (the template of forged ones).
    last: [Option<Seg>; 2],
    challenge_acks: ChallengeAcks,
    /// Segments the fast path took.
    fast: u64,
    /// Segments the full processing took.
    slow: u64,
    /// Sends that carried data (a super-segment counts once).
    data_sends: u64,
}

/// How many segments each path took in a run's fast world.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Taken {
    /// Segments the fast path took.
    pub(crate) fast: u64,
    /// Segments the full processing took.
    pub(crate) slow: u64,
    /// Segments (or super-segments) the send fast path sent.
    pub(crate) fast_sends: u64,
    /// Sends that carried data.
    pub(crate) data_sends: u64,
}

/// What one world did, as text and raw bytes: the two worlds' traces must be equal after
/// every operation. One buffer per world, reused for every operation (a fuzzer runs millions).
struct Trace(Vec<u8>);

impl Trace {
    fn bytes(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

impl Write for Trace {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.bytes(s.as_bytes());
        Ok(())
    }
}

impl World {
    fn new(env: &'static TwinEnv, index: usize, fast_path: bool, sizes: (usize, usize)) -> Self {
        let pools = &env.pools[index];
        let tcb = |tx: usize, rx: usize| {
            let mut t = Tcb::new(
                RecvBuffer::new(rx),
                SendBuffer::new(pools.tx, tx, 32, DEFAULT_HEADROOM),
            );
            t.fast_path = fast_path;
            t.set_timestamps(true);
            t
        };
        let mut world = World {
            env,
            pools,
            a: tcb(sizes.0, sizes.1),
            b: tcb(sizes.1, sizes.0),
            wire: [VecDeque::new(), VecDeque::new()],
            last: [None, None],
            challenge_acks: ChallengeAcks::new(&env.prf),
            fast: 0,
            slow: 0,
            data_sends: 0,
        };
        let _ = world.b.listen(B.port);
        let mut cx = TcpContext::new(Instant::ZERO, IP_MTU, &env.addr_a, &env.keys);
        let _ = world.a.connect(&mut cx, B, A.port);
        world
    }

    fn tcb(&mut self, side: Side) -> &mut Tcb<'static> {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    fn addrs(&self, side: Side) -> &'static OneAddr {
        match side {
            Side::A => &self.env.addr_a,
            Side::B => &self.env.addr_b,
        }
    }

    /// `side` sends one segment if it has one (with `gso`, possibly a super-segment, which
    /// goes on the wire as one segment per frame, as the link's software GSO cuts it); what
    /// it sent goes into `t`.
    fn dispatch(&mut self, side: Side, now: Instant, gso: bool, t: &mut Trace) {
        let env = self.env;
        let addrs = self.addrs(side);
        let mut tail = TxChain::new();
        let mut cx = TcpContext::new(now, IP_MTU, addrs, &env.keys);
        if gso {
            cx = cx.with_gso(GSO_PAYLOAD, &mut tail);
        }
        let mut sent = Vec::new();
        let _ = self
            .tcb(side)
            .dispatch(&mut cx, |cx, (ip, tcp), zc| -> Result<(), ()> {
                let mut pieces = match &zc {
                    Some(frame) => alloc::vec![frame[..].to_vec()],
                    None => alloc::vec![tcp.payload.to_vec()],
                };
                if let Some(g) = cx.gso.as_mut() {
                    pieces.extend(g.tail.drain().map(|f| f[..].to_vec()));
                }
                let count = pieces.len();
                let mut seq = tcp.seq_number;
                for (k, payload) in pieces.into_iter().enumerate() {
                    let piece = TcpRepr {
                        seq_number: seq,
                        control: if k + 1 == count {
                            tcp.control
                        } else {
                            TcpControl::None
                        },
                        payload: &[],
                        ..*tcp
                    };
                    seq += payload.len();
                    let ip = IpRepr::new(
                        ip.src_addr(),
                        ip.dst_addr(),
                        ip.next_header(),
                        piece.buffer_len() + payload.len(),
                        ip.hop_limit(),
                    );
                    sent.push(Seg {
                        ip,
                        tcp: piece,
                        payload,
                    });
                }
                Ok(())
            });
        if sent.iter().any(|seg| !seg.payload.is_empty()) {
            self.data_sends += 1;
        }
        for seg in sent {
            let _ = write!(t, "{:?} {:?}", seg.ip, seg.tcp);
            t.bytes(&seg.payload);
            let wire = &mut self.wire[side as usize];
            if wire.len() < WIRE_LEN {
                wire.push_back(seg);
            }
        }
    }

    /// Delivers `seg` to the connection at the far end of direction `dir`; what it answered
    /// goes into `t`.
    fn deliver(&mut self, dir: usize, seg: Seg, now: Instant, t: &mut Trace) {
        let to = if dir == 0 { Side::B } else { Side::A };
        self.last[dir] = Some(seg.clone());
        let frame = if seg.payload.is_empty() {
            None
        } else {
            match rx_frame(self.pools.rx, &seg.payload) {
                Some(f) => Some(f),
                None => return t.bytes(b"no rx frame"),
            }
        };
        let env = self.env;
        let addrs = self.addrs(to);
        let mut cx = TcpContext::new(now, IP_MTU, addrs, &env.keys)
            .with_challenge_acks(&mut self.challenge_acks);
        let tcb = match to {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        };
        if !tcb.accepts(&seg.ip, &seg.tcp) {
            return t.bytes(b"not accepted");
        }
        if tcb.fast_path && tcb.fast_path_takes(&seg.tcp, seg.payload.len()).is_some() {
            self.fast += 1;
        } else {
            self.slow += 1;
        }
        let reply = tcb.process(&mut cx, &seg.ip, &seg.tcp, frame);
        let _ = write!(t, "{reply:?}");
        if let Some((ip, tcp)) = reply {
            let back = &mut self.wire[1 - dir];
            if back.len() < WIRE_LEN {
                back.push_back(Seg {
                    ip,
                    tcp,
                    payload: Vec::new(),
                });
            }
        }
    }

    /// One operation `op` (with argument `arg`) at `now`; what it returned goes into `t`.
    fn apply(&mut self, op: u8, arg: u8, now: Instant, t: &mut Trace) {
        let side = if op & 1 == 0 { Side::A } else { Side::B };
        let dir = side as usize;
        match op >> 1 {
            // The applications write.
            0 | 1 => {
                let data: Vec<u8> = (0..usize::from(arg) * 23).map(|i| i as u8 ^ arg).collect();
                let _ = write!(t, "{:?}", self.tcb(side).send_slice(&data));
            }
            // Read.
            2 => {
                let mut buf = alloc::vec![0; usize::from(arg) * 31 + 1];
                let r = self.tcb(side).recv_slice(&mut buf);
                let n = *r.as_ref().unwrap_or(&0);
                let _ = write!(t, "{r:?}");
                t.bytes(&buf[..n]);
            }
            // Take a received segment.
            3 => match self.tcb(side).recv_segment() {
                Ok(Some(frame)) => t.bytes(&frame[..]),
                other => {
                    let _ = write!(t, "{:?}", other.map(|f| f.map(|f| f.len())));
                }
            },
            // Send.
            4..=6 => self.dispatch(side, now, false, t),
            7 => self.dispatch(side, now, true, t),
            // Deliver.
            8..=11 => match self.wire[dir].pop_front() {
                Some(seg) => self.deliver(dir, seg, now, t),
                None => t.bytes(b"empty"),
            },
            // Lose.
            12 => {
                let _ = write!(t, "{:?}", self.wire[dir].pop_front().map(|s| s.tcp));
            }
            // Reorder: the second goes first.
            13 if self.wire[dir].len() >= 2 => self.wire[dir].swap(0, 1),
            // Duplicate.
            14 => {
                if let Some(seg) = self.wire[dir].front().cloned() {
                    if self.wire[dir].len() < WIRE_LEN {
                        self.wire[dir].push_front(seg);
                    }
                }
            }
            // A forged segment, from the last one delivered.
            15 => {
                if let Some(seg) = self.last[dir].clone() {
                    self.deliver(dir, forge(seg, arg), now, t);
                }
            }
            // Close, rarely (17, the clock, is `run`'s).
            16 if arg < 2 => self.tcb(side).close(),
            _ => {}
        }
    }

    /// Everything of both connections that the two paths must agree on, into `t`.
    fn digest(&self, t: &mut Trace) {
        let _ = write!(t, "{}", Digest(&self.a));
        let _ = write!(t, "{}", Digest(&self.b));
    }
}

/// A frame of `pool` holding `data`, as a driver would deliver it (after 54 bytes standing for
/// the headers); `None` if the pool is empty.
fn rx_frame(pool: &'static FramePool, data: &[u8]) -> Option<RxFrame> {
    let mut slot = pool.try_alloc_rx()?;
    slot.buffer_mut()
        .get_mut(54..54 + data.len())?
        .copy_from_slice(data);
    slot.complete_range(54, data.len()).ok()
}

/// `seg` with one header field changed, chosen by `arg`.
fn forge(mut seg: Seg, arg: u8) -> Seg {
    let small = i32::from(arg >> 3) - 16;
    match arg & 7 {
        0 => seg.tcp.seq_number = TcpSeqNumber(seg.tcp.seq_number.0.wrapping_add(small * 100)),
        1 => seg.tcp.seq_number = TcpSeqNumber(seg.tcp.seq_number.0.wrapping_add(small)),
        2 => {
            seg.tcp.ack_number = seg
                .tcp
                .ack_number
                .map(|a| TcpSeqNumber(a.0.wrapping_add(small * 50)))
        }
        3 => {
            seg.tcp.control = match arg >> 3 & 3 {
                0 => TcpControl::Syn,
                1 => TcpControl::Fin,
                2 => TcpControl::Rst,
                _ => TcpControl::Psh,
            }
        }
        4 => seg.tcp.window_len = u16::from(arg >> 3) * 97,
        5 => {
            if let Some(ts) = seg.tcp.timestamp.as_mut() {
                ts.tsval = ts.tsval.wrapping_add_signed(small * 1000);
            }
        }
        6 => {
            let ack = seg.tcp.ack_number.unwrap_or_default().0 as u32;
            let start = ack.wrapping_add(u32::from(arg >> 3) * 100);
            seg.tcp.sack_ranges[0] = Some((start, start.wrapping_add(500)));
        }
        _ => {
            let keep = seg.payload.len().min(usize::from(arg >> 3) * 40);
            seg.payload.truncate(keep);
        }
    }
    seg.ip
        .set_payload_len(seg.tcp.buffer_len() + seg.payload.len());
    seg
}

/// The plain fields of a connection's state, compared after every operation without
/// formatting anything ([`Digest`] adds the structured parts every eighth operation).
#[allow(clippy::type_complexity)]
fn scalars(t: &Tcb<'_>) -> impl PartialEq + use<> {
    (
        (
            t.state,
            t.timer,
            t.rx_mss,
            t.rx_fin_received,
            t.tuple,
            t.index_epoch,
        ),
        (
            t.local_seq_no,
            t.remote_seq_no,
            t.remote_last_seq,
            t.remote_last_ack,
        ),
        (
            t.remote_last_win,
            t.rx_edge_max,
            t.remote_win_shift,
            t.remote_win_len,
        ),
        (
            t.max_remote_win,
            t.remote_win_scale,
            t.remote_has_sack,
            t.remote_mss,
        ),
        (
            t.remote_last_ts,
            t.local_rx_last_seq,
            t.local_rx_last_ack,
            t.local_rx_dup_acks,
        ),
        (
            t.ack_delay_timer,
            t.challenge_ack_timer,
            t.last_remote_tsval,
            t.handshake_rtos,
        ),
        (
            t.gave_up,
            t.sent_max,
            t.local_mss,
            t.counters,
            t.assembler.is_empty(),
        ),
        (
            t.rx_buffer.len(),
            t.rx_buffer.has_out_of_order(),
            t.tx_buffer.len(),
        ),
    )
}

/// A connection's state as the differential check compares it: everything but the frames
/// (whose slots differ between the worlds' pools) and the wakers; the queues by their lengths
/// (the bytes read are compared as the application reads them).
struct Digest<'t, 'a>(&'t Tcb<'a>);

impl core::fmt::Display for Digest<'_, '_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let t = self.0;
        write!(
            f,
            "{:?}",
            (
                (
                    t.state,
                    t.timer,
                    &t.rtte,
                    &t.assembler,
                    t.rx_mss,
                    t.rx_fin_received
                ),
                (
                    t.tuple,
                    t.index_epoch,
                    t.local_seq_no,
                    t.remote_seq_no,
                    t.remote_last_seq
                ),
                (
                    t.remote_last_ack,
                    t.remote_last_win,
                    t.rx_edge_max,
                    t.remote_win_shift
                ),
                (
                    t.remote_win_len,
                    t.max_remote_win,
                    t.remote_win_scale,
                    t.remote_has_sack
                ),
                (
                    t.remote_mss,
                    t.remote_last_ts,
                    t.local_rx_last_seq,
                    t.local_rx_last_ack
                ),
                (t.local_rx_dup_acks, &t.recovery, &t.rack, t.ack_delay_timer),
                (
                    t.challenge_ack_timer,
                    &t.congestion_controller,
                    t.last_remote_tsval
                ),
                (
                    t.handshake_rtos,
                    t.gave_up,
                    t.sent_max,
                    t.local_mss,
                    t.counters
                ),
                (
                    t.rx_buffer.len(),
                    t.rx_buffer.has_out_of_order(),
                    t.tx_buffer.len()
                ),
            )
        )
    }
}

/// Runs the operations of `ops` (after a first byte that picks the buffer sizes, two bytes
/// each: the operation and its argument) in a world with the fast path and one without, and
/// panics at the first difference. Returns how many segments each path took in the first
/// world. The worlds' frames go back to their pools when they drop.
pub(crate) fn run(env: &'static TwinEnv, ops: &[u8]) -> Taken {
    // The first byte picks the buffer sizes: small ones reach the window and budget limits.
    let sizes = match ops.first().map_or(0, |b| b % 3) {
        0 => (64 * 1024, 64 * 1024),
        1 => (4096, 2048),
        _ => (1024, 600),
    };
    let mut worlds = [
        World::new(env, 0, true, sizes),
        World::new(env, 1, false, sizes),
    ];
    let mut now = Instant::ZERO;
    let mut seen = [Trace(Vec::new()), Trace(Vec::new())];
    let mut states = [Trace(Vec::new()), Trace(Vec::new())];
    let pairs = ops.get(1..).unwrap_or(&[]);
    let last = pairs.len().div_ceil(2);
    for (i, pair) in pairs.chunks(2).enumerate() {
        let (op, arg) = (pair[0] % 36, pair.get(1).copied().unwrap_or(0));
        if op >> 1 == 17 {
            // The clock: mostly milliseconds, now and then long enough for timers to fire.
            let ms = if arg > 240 {
                u64::from(arg - 240) * 1000
            } else {
                u64::from(arg % 50)
            };
            now += Duration::from_millis(ms);
        } else {
            for (world, t) in worlds.iter_mut().zip(&mut seen) {
                t.0.clear();
                world.apply(op, arg, now, t);
            }
            assert!(
                seen[0].0 == seen[1].0,
                "operation {i} ({op}, {arg}) returned or sent differently"
            );
        }
        let plain_equal = scalars(&worlds[0].a) == scalars(&worlds[1].a)
            && scalars(&worlds[0].b) == scalars(&worlds[1].b);
        if plain_equal && (i % 8 == 7 || i + 1 == last) {
            for (world, t) in worlds.iter().zip(&mut states) {
                t.0.clear();
                world.digest(t);
            }
        }
        if !plain_equal || states[0].0 != states[1].0 {
            panic!(
                "operation {i} ({op}, {arg}) left the connections differently\n\
                 fast path:       {}\n                 {}\n\
                 full processing: {}\n                 {}",
                Digest(&worlds[0].a),
                Digest(&worlds[0].b),
                Digest(&worlds[1].a),
                Digest(&worlds[1].b),
            );
        }
    }
    Taken {
        fast: worlds[0].fast,
        slow: worlds[0].slow,
        fast_sends: worlds[0].a.fast_sends + worlds[0].b.fast_sends,
        data_sends: worlds[0].data_sends,
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    /// A xorshift generator for the random runs.
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// The operations of a request/response exchange: A writes, sends; B reads, writes,
    /// sends; A reads; the clock moves by a millisecond per round.
    fn request_response(rounds: usize) -> Vec<u8> {
        let mut ops = alloc::vec![0];
        let round: [(u8, u8); 8] = [
            (0, 40),  // A writes 920 bytes
            (8, 0),   // A sends
            (16, 0),  // delivered to B
            (5, 200), // B reads
            (1, 90),  // B writes 2070 bytes
            (9, 0),   // B sends
            (17, 0),  // delivered to A
            (4, 255), // A reads
        ];
        for _ in 0..rounds {
            for (op, arg) in round {
                ops.extend([op, arg]);
            }
            // B sends the rest, A takes it and acknowledges it.
            ops.extend([9, 0, 17, 0, 9, 0, 17, 0, 4, 255, 8, 0, 16, 0, 8, 0, 16, 0]);
            // A millisecond passes.
            ops.extend([34, 1]);
        }
        ops
    }

    #[test]
    fn request_response_takes_the_fast_path_and_agrees() {
        let env = TwinEnv::leak();
        let taken = run(env, &request_response(200));
        std::println!("{taken:?}");
        // Every data segment after the handshake is on the fast path.
        assert!(taken.fast >= 500, "{taken:?}");
        assert!(taken.slow >= 1, "{taken:?}");
        // And every data segment is sent on the send fast path.
        assert_eq!(taken.fast_sends, taken.data_sends, "{taken:?}");
        assert!(taken.fast_sends >= 400, "{taken:?}");
    }

    #[test]
    fn random_traffic_agrees_on_both_paths() {
        let env = TwinEnv::leak();
        let mut total = Taken::default();
        for seed in 0..120 {
            // Sends and deliveries dominate (a connection that makes progress), so that runs
            // go past the handshake into the states the fast path has to leave.
            let raw = bytes(seed, 3000);
            let mut ops = alloc::vec![raw[0]];
            for p in raw[1..].chunks_exact(2) {
                let side = p[0] & 1;
                let op = match p[0] % 40 {
                    0..=7 => side,        // write
                    8..=13 => 4 + side,   // read
                    14..=21 => 8 + side,  // send
                    22..=30 => 16 + side, // deliver
                    31..=34 => 34,        // the clock
                    35..=37 => 6 + side,  // take a segment
                    _ => p[1] % 36,       // anything: loss, reordering, forgery...
                };
                ops.extend([op, p[1]]);
            }
            let taken = run(env, &ops);
            total.fast += taken.fast;
            total.slow += taken.slow;
            total.fast_sends += taken.fast_sends;
            total.data_sends += taken.data_sends;
        }
        std::println!("{total:?}");
        assert!(total.fast > 1000 && total.slow > 1000, "{total:?}");
        assert!(total.fast_sends > 1000, "{total:?}");
    }
}
