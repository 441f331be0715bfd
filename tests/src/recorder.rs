//! A [`Driver`] wrapper that records where every frame it moves lives in memory, when, and a
//! copy of its bytes, so a test can prove zero copy (the bytes an application sees are inside
//! the very slot the driver filled, and the bytes it wrote are the memory the driver handed to
//! the device) and read the frames that crossed, in order ([`tcp_header`] reads a TCP
//! segment's header fields).
//!
//! [`recorded_pair`] builds two stacks over the in-memory [`wire`](crate::wire), like
//! [`net::pair_with`](crate::net::pair_with), with each end wrapped in a [`Recording`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use zcnet_buffer::{
    Capabilities, Driver, HardwareAddress, LinkState, RxChain, RxFrame, RxPacket, TxChain, TxError,
    TxFrame,
};
use zcnet_executor::Executor;
use zcnet_stack::Config;

use crate::net::{pair_wrapped, Pair, PairDriver};
use crate::wire::Faults;

/// Records kept per direction; older ones are forgotten.
pub const RECORDS: usize = 4096;

/// Orders the records: each takes the next number. Process-wide, so it orders the records of
/// both ends of a pair, whose stacks run on one executor thread.
static ORDER: AtomicU64 = AtomicU64::new(0);

/// The order number the next record will get, taken: a test calls it to place an event of its
/// own (the application letting go of its data, say) among the records, by
/// [`FrameRecord::order`].
pub fn mark() -> u64 {
    ORDER.fetch_add(1, Ordering::Relaxed)
}

/// Where one frame's bytes were when the driver handed them over, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRecord {
    /// The pool slot.
    pub slot: usize,
    /// Address of the frame's first byte.
    pub addr: usize,
    /// Length of the frame.
    pub len: usize,
    /// The executor's time then (a simulated one under a
    /// [`VirtualClock`](crate::clock::VirtualClock)).
    pub at: Duration,
    /// The record's place among all records: a record made after another has a larger one,
    /// whichever end made them.
    pub order: u64,
}

impl FrameRecord {
    /// Whether `[ptr, ptr + len)` lies inside this frame's bytes.
    pub fn contains(&self, ptr: *const u8, len: usize) -> bool {
        let p = ptr as usize;
        p >= self.addr && p + len <= self.addr + self.len
    }
}

#[derive(Debug, Default)]
struct Log {
    rx: VecDeque<(FrameRecord, Vec<u8>)>,
    tx: VecDeque<(FrameRecord, Vec<u8>)>,
}

impl Log {
    /// Records a frame in `side` (`rx` or `tx`), forgetting the oldest beyond [`RECORDS`].
    fn push(side: &mut VecDeque<(FrameRecord, Vec<u8>)>, record: FrameRecord, bytes: &[u8]) {
        if side.len() == RECORDS {
            side.pop_front();
        }
        side.push_back((record, bytes.to_vec()));
    }
}

/// Read access to a [`Recording`]'s records (shared with the driver, which a stack owns).
#[derive(Clone, Debug, Default)]
pub struct Recorder(Arc<Mutex<Log>>);

impl Recorder {
    /// The received frame (as the driver returned it) whose bytes contain `[ptr, ptr + len)`.
    pub fn rx_containing(&self, ptr: *const u8, len: usize) -> Option<FrameRecord> {
        let log = self.0.lock().unwrap();
        log.rx
            .iter()
            .rev()
            .find(|(r, _)| r.contains(ptr, len))
            .map(|(r, _)| *r)
    }

    /// The transmitted frame (as handed to the device) whose bytes contain `[ptr, ptr + len)`,
    /// with a copy of its bytes taken at transmit time.
    pub fn tx_containing(&self, ptr: *const u8, len: usize) -> Option<(FrameRecord, Vec<u8>)> {
        let log = self.0.lock().unwrap();
        log.tx
            .iter()
            .rev()
            .find(|(r, _)| r.contains(ptr, len))
            .cloned()
    }

    /// Copies of the transmitted frames' bytes, oldest first.
    pub fn tx_frames(&self) -> Vec<Vec<u8>> {
        let log = self.0.lock().unwrap();
        log.tx.iter().map(|(_, b)| b.clone()).collect()
    }

    /// The received frames' records with copies of their bytes (taken when the driver returned
    /// them), oldest first.
    pub fn rx_records(&self) -> Vec<(FrameRecord, Vec<u8>)> {
        self.0.lock().unwrap().rx.iter().cloned().collect()
    }

    /// The transmitted frames' records with copies of their bytes (taken at transmit time),
    /// oldest first.
    pub fn tx_records(&self) -> Vec<(FrameRecord, Vec<u8>)> {
        self.0.lock().unwrap().tx.iter().cloned().collect()
    }

    /// Forgets everything recorded so far.
    pub fn clear(&self) {
        let mut log = self.0.lock().unwrap();
        log.rx.clear();
        log.tx.clear();
    }
}

/// A driver that forwards to `inner` and records every frame's slot, address, time (on `exec`'s
/// clock) and bytes.
#[derive(Debug)]
pub struct Recording<D> {
    inner: D,
    log: Recorder,
    exec: &'static Executor,
}

impl<D> Recording<D> {
    /// Wraps `inner`, stamping records with `exec`'s time; read the records through the returned
    /// [`Recorder`].
    pub fn new(inner: D, exec: &'static Executor) -> (Self, Recorder) {
        let log = Recorder::default();
        (
            Self {
                inner,
                log: log.clone(),
                exec,
            },
            log,
        )
    }

    /// The record of a frame at `ptr`, `len` bytes long, in `slot`, made now.
    fn record(&self, slot: usize, ptr: *const u8, len: usize) -> FrameRecord {
        FrameRecord {
            slot,
            addr: ptr as usize,
            len,
            at: Duration::from_nanos(self.exec.now().as_nanos()),
            order: mark(),
        }
    }
}

impl<D> Recording<D> {
    /// Records a received frame.
    fn received(&self, f: &RxFrame) {
        let rec = self.record(f.slot_index(), f.as_ptr(), f.len());
        Log::push(&mut self.log.0.lock().unwrap().rx, rec, f);
    }

    /// Records a frame handed to the driver to send.
    fn sent(&self, f: &TxFrame) {
        let rec = self.record(f.slot_index(), f.as_ptr(), f.len());
        Log::push(&mut self.log.0.lock().unwrap().tx, rec, f);
    }
}

/// Every call goes to the wrapped driver, chains too (each of their frames is recorded, in
/// order), so a recorded driver delivers and takes what the driver itself does.
impl<D: Driver> Driver for Recording<D> {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        let r = self.inner.poll_receive(cx);
        if let Poll::Ready(f) = &r {
            self.received(f);
        }
        r
    }

    fn poll_receive_chain(&mut self, cx: &mut Context<'_>) -> Poll<RxChain> {
        let r = self.inner.poll_receive_chain(cx);
        if let Poll::Ready(c) = &r {
            c.frames().for_each(|f| self.received(f));
        }
        r
    }

    fn poll_receive_packet(&mut self, cx: &mut Context<'_>) -> Poll<RxPacket> {
        let r = self.inner.poll_receive_packet(cx);
        match &r {
            Poll::Ready(RxPacket::Frame(f)) => self.received(f),
            Poll::Ready(RxPacket::Chain(c)) => c.frames().for_each(|f| self.received(f)),
            Poll::Pending => {}
        }
        r
    }

    fn transmit_chain(&mut self, chain: TxChain) -> Result<(), TxError> {
        chain.frames().for_each(|f| self.sent(f));
        self.inner.transmit_chain(chain)
    }

    fn flush(&mut self) {
        self.inner.flush()
    }

    fn receive_deferral(&mut self) -> Option<Duration> {
        self.inner.receive_deferral()
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.inner.poll_transmit_frame(cx)
    }

    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_transmit_ready(cx)
    }

    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        self.sent(&frame);
        self.inner.transmit(frame)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn hardware_address(&self) -> HardwareAddress {
        self.inner.hardware_address()
    }

    fn poll_link_state(&mut self, cx: &mut Context<'_>) -> LinkState {
        self.inner.poll_link_state(cx)
    }
}

/// A TCP segment's header fields, as [`tcp_header`] reads them from an Ethernet frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpHeader {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number (meaningful with [`ACK`](Self::ACK)).
    pub ack: u32,
    /// The flag bits ([`FIN`](Self::FIN), [`SYN`](Self::SYN), [`RST`](Self::RST),
    /// [`ACK`](Self::ACK), ...).
    pub flags: u8,
    /// The window field as sent (not scaled).
    pub window: u16,
    /// Payload bytes.
    pub payload: usize,
}

impl TcpHeader {
    /// FIN flag.
    pub const FIN: u8 = 0x01;
    /// SYN flag.
    pub const SYN: u8 = 0x02;
    /// RST flag.
    pub const RST: u8 = 0x04;
    /// ACK flag.
    pub const ACK: u8 = 0x10;

    /// Whether every flag in `flags` is set.
    pub fn has(&self, flags: u8) -> bool {
        self.flags & flags == flags
    }
}

/// The TCP header of `frame` if it is an Ethernet frame carrying IPv4 and TCP; checksums are
/// not checked.
pub fn tcp_header(frame: &[u8]) -> Option<TcpHeader> {
    let be16 = |b: &[u8], i: usize| Some(u16::from_be_bytes(b.get(i..i + 2)?.try_into().ok()?));
    let be32 = |b: &[u8], i: usize| Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?));
    if be16(frame, 12)? != 0x0800 {
        return None;
    }
    let ip = frame.get(14..)?;
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    if ip.first()? >> 4 != 4 || *ip.get(9)? != 6 {
        return None;
    }
    let total = usize::from(be16(ip, 2)?);
    let tcp = ip.get(ihl..total)?;
    let data_offset = usize::from(tcp.get(12)? >> 4) * 4;
    Some(TcpHeader {
        src_port: be16(tcp, 0)?,
        dst_port: be16(tcp, 2)?,
        seq: be32(tcp, 4)?,
        ack: be32(tcp, 8)?,
        flags: *tcp.get(13)?,
        window: be16(tcp, 14)?,
        payload: tcp.len().checked_sub(data_offset)?,
    })
}

/// Two stacks over a wire with `faults`, pools of `slots` slots, each end wrapped in a
/// [`Recording`]; `configure(i, &mut config)` adjusts stack `i`'s configuration (static
/// [`ADDR`](crate::net::ADDR)`[i]`/24 to start with). Runners are spawned on `exec`.
pub fn recorded_pair(
    exec: &'static Executor,
    faults: Faults,
    slots: usize,
    mut configure: impl FnMut(usize, &mut Config),
) -> (Pair, [Recorder; 2]) {
    let mut recorders = None;
    let wrap = |a, b| {
        let (a, rec_a) = Recording::new(a, exec);
        let (b, rec_b) = Recording::new(b, exec);
        recorders = Some([rec_a, rec_b]);
        [Box::new(a) as PairDriver, Box::new(b)]
    };
    let pair = pair_wrapped(exec, faults, slots, wrap, |i, config| {
        config.secret = crate::secret::seeded(0x5678 + i as u64);
        configure(i, config);
    });
    (pair, recorders.expect("the pair made its drivers"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpProtocol, Ipv4Address,
        Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
    };

    /// An Ethernet + IPv4 frame carrying `tcp`, with 4 bytes of IP options (IHL 6) so the
    /// parser cannot assume a 20-byte IP header.
    fn frame(tcp: &TcpRepr<'_>) -> Vec<u8> {
        let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
        let ip = Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let mut f = vec![0u8; 14 + 24 + tcp.buffer_len()];
        let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
        EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EthernetProtocol::Ipv4,
        }
        .emit(&mut eth);
        let caps = ChecksumCapabilities::default();
        let payload = eth.payload_mut();
        // The fixed header, then the options (NOPs) and the TCP segment after them.
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut payload[..20]), &caps);
        payload[0] = 0x46;
        payload[2..4].copy_from_slice(&((24 + tcp.buffer_len()) as u16).to_be_bytes());
        payload[20..24].fill(1);
        tcp.emit(
            &mut TcpPacket::new_unchecked(&mut payload[24..]),
            &src.into(),
            &dst.into(),
            &caps,
        );
        f
    }

    /// A chain goes through a recorded end as a chain (not refused as the trait's default
    /// would, nor cut to its first frame), every frame of it recorded on both ends; flushes
    /// and single frames still cross.
    #[test]
    fn chains_cross_recorded_ends_whole_and_every_frame_is_recorded() {
        use std::task::Waker;
        use zcnet_buffer::sim::wire::wire_pair_with;
        use zcnet_buffer::{FramePool, PoolConfig, TxChain};
        let exec = zcnet_executor::Executor::leak(crate::clock::VirtualClock::leak());
        let pools = [
            FramePool::leak(PoolConfig::new(16)).expect("pool"),
            FramePool::leak(PoolConfig::new(16)).expect("pool"),
        ];
        let (a, b) = wire_pair_with(pools, Faults::default(), crate::wire::Delivery::Lend, None);
        let b = b.with_offloads(zcnet_buffer::sim::wire::WireOffloads {
            rx_chains: true,
            ..Default::default()
        });
        let (mut a, tx_log) = Recording::new(a, exec);
        let (mut b, rx_log) = Recording::new(b, exec);
        let mut cx = Context::from_waker(Waker::noop());
        let mut chain = TxChain::new();
        for byte in 1..=3u8 {
            let Poll::Ready(mut f) = a.poll_transmit_frame(&mut cx) else {
                panic!("a TX frame");
            };
            f.set_len(100).unwrap();
            f.fill(byte);
            chain.push(f).unwrap();
        }
        a.transmit_chain(chain).expect("the wire takes the chain");
        a.flush();
        let Poll::Ready(RxPacket::Chain(got)) = b.poll_receive_packet(&mut cx) else {
            panic!("the packet arrives as a chain");
        };
        let bytes: Vec<u8> = got.frames().flat_map(|f| f[..].to_vec()).collect();
        let expected: Vec<u8> = (1..=3u8).flat_map(|b| [b; 100]).collect();
        assert_eq!(bytes, expected);
        let each: Vec<Vec<u8>> = (1..=3u8).map(|b| vec![b; 100]).collect();
        assert_eq!(tx_log.tx_frames(), each);
        let received: Vec<Vec<u8>> = rx_log.rx_records().into_iter().map(|(_, b)| b).collect();
        assert_eq!(received, each);
        drop(got);
        // A single frame: through `transmit`, up through `poll_receive_chain`, recorded.
        let Poll::Ready(mut f) = a.poll_transmit_frame(&mut cx) else {
            panic!("a TX frame");
        };
        f.set_len(60).unwrap();
        f.fill(9);
        a.transmit(f).unwrap();
        let Poll::Ready(one) = b.poll_receive_chain(&mut cx) else {
            panic!("the frame arrives");
        };
        assert_eq!(one.frame_count(), 1);
        assert_eq!(rx_log.rx_records().len(), 4);
        assert_eq!(tx_log.tx_frames().len(), 4);
    }

    #[test]
    fn tcp_header_reads_the_fields_of_a_segment() {
        let tcp = TcpRepr {
            src_port: 40000,
            dst_port: 80,
            control: TcpControl::Fin,
            seq_number: TcpSeqNumber(0x1234_5678),
            ack_number: Some(TcpSeqNumber(0x0abc_def0)),
            window_len: 777,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: b"hello",
        };
        let f = frame(&tcp);
        let h = tcp_header(&f).expect("a TCP segment");
        assert_eq!(
            h,
            TcpHeader {
                src_port: 40000,
                dst_port: 80,
                seq: 0x1234_5678,
                ack: 0x0abc_def0,
                flags: TcpHeader::FIN | TcpHeader::ACK,
                window: 777,
                payload: 5,
            }
        );
        assert!(h.has(TcpHeader::FIN | TcpHeader::ACK) && !h.has(TcpHeader::SYN));
        // Padding after the IP packet is not payload.
        let mut padded = f.clone();
        padded.extend_from_slice(&[0; 10]);
        assert_eq!(tcp_header(&padded), Some(h));
        // Not TCP: another IP protocol, another ethertype, a truncated frame.
        let mut udp = f.clone();
        udp[14 + 9] = 17;
        assert_eq!(tcp_header(&udp), None);
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(tcp_header(&arp), None);
        assert_eq!(tcp_header(&f[..40]), None);
    }
}
