//! Packet capture: [`Capture`] wraps any [`Driver`] and writes every frame it receives and
//! transmits to a [`PcapSink`] in the classic libpcap file format, which `tcpdump -r`,
//! Wireshark and every other pcap reader open.
//!
//! ```text
//!  stack ─transmit─► Capture ─record, then transmit─► inner driver ─► device
//!  stack ◄─RxFrame── Capture ◄─poll_receive: record── inner driver ◄─ device
//!                       └─ header + frame bytes ─► PcapSink (a file, a serial port, a buffer)
//! ```
//!
//! * **What is recorded.** A received frame when the inner driver returns it from
//!   [`poll_receive`](Driver::poll_receive); a transmitted frame when
//!   [`transmit`](Driver::transmit) is called, before the inner driver gets it. A frame the inner
//!   driver then refuses (`Err(TxError)`) is in the capture all the same, and is counted in
//!   [`CaptureStats::tx_refused`]. The bytes are the link-layer frame the stack sees: a header a
//!   driver keeps for itself (virtio-net's) is not part of it.
//! * **Zero copy stays.** The frame's bytes are handed to the sink by reference, and the frame
//!   goes on at once: the wrapper holds no frame and copies nothing. The only copy is the one the
//!   sink makes into its own storage. It is not in the [`ledger`](crate::ledger), which counts
//!   the data path's copies.
//! * **A failing sink never breaks the data path.** A record the sink refuses is lost and
//!   counted in [`CaptureStats::lost`]; the frame itself travels on as if nothing were wrapped.
//! * **Nothing to pay unless used.** A driver that is not wrapped is untouched; the wrapper is an
//!   ordinary generic type.
//! * **Timestamps** are the reading of a clock the caller supplies ([`Clock`]: nanoseconds since
//!   any epoch; this crate has no clock of its own) at the moment the frame is recorded, as
//!   above. Readers show them as time of day when the epoch is the Unix epoch
//!   (`system_time_ns` with the `std` feature).
//!
//! # The file format
//!
//! A 24-byte file header ([`GLOBAL_HEADER_LEN`]), written when the [`Capture`] is made, then
//! per frame a 16-byte record header ([`RECORD_HEADER_LEN`]) and the frame's first
//! `min(len, snaplen)` bytes. All fields are little-endian (readers detect the byte order from
//! the magic number):
//!
//! | file header | bytes | value |
//! |---|---|---|
//! | magic | 4 | [`MAGIC_NANOS`] (`0xa1b23c4d`), or [`MAGIC_MICROS`] (`0xa1b2c3d4`) |
//! | version | 2 + 2 | 2.4 |
//! | time zone, accuracy | 4 + 4 | 0, 0 |
//! | snaplen | 4 | [`PcapOptions::snaplen`] |
//! | link type | 4 | [`LINKTYPE_ETHERNET`] (1) for [`Medium::Ethernet`], [`LINKTYPE_RAW`] (101) for [`Medium::Ip`] |
//!
//! | record header | bytes | value |
//! |---|---|---|
//! | seconds | 4 | clock / 10⁹ (wraps in 2106) |
//! | fraction | 4 | nanoseconds, or microseconds with [`Resolution::Micros`] |
//! | captured length | 4 | bytes of the frame that follow |
//! | original length | 4 | the frame's length |
//!
//! Classic pcap does not say which way a frame went; the link-layer addresses do.
//!
//! # Sinks
//!
//! A [`PcapSink`] takes a record as a few byte slices, all or nothing. Provided: [`SliceSink`]
//! (a caller's fixed buffer, no allocation: a kernel's memory log), `&mut S` for any sink, and
//! `Vec<u8>` (`alloc` feature, grows as needed). The `std` feature adds `IoSink` over any
//! `std::io::Write` (buffered, flushed periodically and on drop; `IoSink::create` for a file),
//! sinks shared behind a `Mutex` (so the program can flush a sink that a stack's driver writes
//! to), and `system_time_ns`, a wall clock.
//!
//! # Example
//!
//! A capture into a `Vec<u8>`, of a frame sent and received over a loopback driver (which hands
//! every transmitted slot back as received):
//!
//! ```
//! # use core::task::{Context, Poll, Waker};
//! # use zcnet_buffer::*;
//! use zcnet_buffer::capture::{Capture, CaptureCounters, MAGIC_NANOS, LINKTYPE_ETHERNET};
//! #
//! # struct Loopback { pool: &'static FramePool, back: Option<RxFrame> }
//! # impl Driver for Loopback {
//! #     fn poll_receive(&mut self, _cx: &mut Context<'_>) -> Poll<RxFrame> {
//! #         self.back.take().map_or(Poll::Pending, Poll::Ready)
//! #     }
//! #     fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
//! #         self.pool.poll_alloc_tx(cx)
//! #     }
//! #     fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
//! #         self.back = Some(frame.into_device().loop_back().map_err(|_| TxError::Device)?);
//! #         Ok(())
//! #     }
//! #     fn capabilities(&self) -> Capabilities {
//! #         Capabilities::new(Medium::Ethernet, 1500)
//! #     }
//! #     fn hardware_address(&self) -> HardwareAddress {
//! #         HardwareAddress::Ethernet([2, 0, 0, 0, 0, 1])
//! #     }
//! #     fn poll_link_state(&mut self, _cx: &mut Context<'_>) -> LinkState { LinkState::Up }
//! # }
//!
//! let pool = FramePool::leak(PoolConfig::new(4)).unwrap();
//! let lo = Loopback { pool, back: None };
//!
//! // Timestamps: any `fn() -> u64` of nanoseconds; here a fixed 1.5 s.
//! static COUNTERS: CaptureCounters = CaptureCounters::new();
//! let mut dev = Capture::new(lo, Vec::new(), || 1_500_000_000, &COUNTERS);
//!
//! // The file header is there from the start: nanosecond magic, version 2.4, Ethernet.
//! assert_eq!(dev.sink()[..4], MAGIC_NANOS.to_le_bytes());
//! assert_eq!(dev.sink()[4..8], [2, 0, 4, 0]);
//! assert_eq!(dev.sink()[20..24], LINKTYPE_ETHERNET.to_le_bytes());
//!
//! // The wrapped driver is used like any other.
//! let mut cx = Context::from_waker(Waker::noop());
//! let Poll::Ready(mut tx) = dev.poll_transmit_frame(&mut cx) else { unreachable!() };
//! tx.append(60).unwrap().fill(0xab);
//! dev.transmit(tx).unwrap(); // recorded
//! let Poll::Ready(rx) = dev.poll_receive(&mut cx) else { unreachable!() };
//! assert_eq!(rx.len(), 60); // recorded
//!
//! let s = dev.stats();
//! assert_eq!((s.tx_frames, s.rx_frames, s.bytes, s.lost), (1, 1, 120, 0));
//!
//! // Two records of 16 + 60 bytes after the 24-byte file header.
//! let file = dev.sink();
//! assert_eq!(file.len(), 24 + 2 * (16 + 60));
//! let record = &file[24..40];
//! assert_eq!(record[..4], 1u32.to_le_bytes()); // seconds
//! assert_eq!(record[4..8], 500_000_000u32.to_le_bytes()); // nanoseconds
//! assert_eq!(record[8..12], 60u32.to_le_bytes()); // captured length
//! assert_eq!(record[12..16], 60u32.to_le_bytes()); // original length
//! assert!(file[40..100].iter().all(|&b| b == 0xab));
//! ```

#[cfg(any(feature = "alloc", test, doc))]
extern crate alloc;

use core::fmt;
use core::task::{Context, Poll};

use crate::chain::{RxChain, TxChain};
use crate::driver::{Capabilities, Driver, HardwareAddress, LinkState, Medium, RxPacket, TxError};
use crate::rx::RxFrame;
use crate::sync::StatCounter;
use crate::tx::TxFrame;

/// Magic number of a pcap file whose record timestamps have microsecond fractions.
pub const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
/// Magic number of a pcap file whose record timestamps have nanosecond fractions.
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// pcap link type of Ethernet II frames ([`Medium::Ethernet`]).
pub const LINKTYPE_ETHERNET: u32 = 1;
/// pcap link type of bare IPv4 / IPv6 packets ([`Medium::Ip`]).
pub const LINKTYPE_RAW: u32 = 101;
/// The snapshot length a capture uses unless told otherwise: tcpdump's default, more than any
/// frame a driver moves, so frames are recorded whole.
pub const DEFAULT_SNAPLEN: u32 = 262_144;
/// Length of the pcap file header.
pub const GLOBAL_HEADER_LEN: usize = 24;
/// Length of a pcap record header.
pub const RECORD_HEADER_LEN: usize = 16;

/// The clock a [`Capture`] stamps records with: nanoseconds since any fixed epoch (the Unix
/// epoch makes readers show the time of day). Called once per recorded frame, from the task
/// that drives the driver.
pub type Clock = fn() -> u64;

/// The fraction of a second in record timestamps, and the magic number that says so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// Microseconds ([`MAGIC_MICROS`]): what every pcap reader, however old, understands.
    Micros,
    /// Nanoseconds ([`MAGIC_NANOS`]): read by libpcap 1.5 and later (tcpdump, Wireshark).
    #[default]
    Nanos,
}

impl Resolution {
    /// The file header's magic number for this resolution.
    pub const fn magic(self) -> u32 {
        match self {
            Resolution::Micros => MAGIC_MICROS,
            Resolution::Nanos => MAGIC_NANOS,
        }
    }
}

/// How a [`Capture`] writes its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PcapOptions {
    /// At most this many bytes of each frame are recorded (the record keeps the frame's whole
    /// length, so readers show what was cut). 0 is taken as 1. Default: [`DEFAULT_SNAPLEN`].
    pub snaplen: u32,
    /// Timestamp fractions. Default: nanoseconds.
    pub resolution: Resolution,
}

impl Default for PcapOptions {
    fn default() -> Self {
        PcapOptions {
            snaplen: DEFAULT_SNAPLEN,
            resolution: Resolution::Nanos,
        }
    }
}

/// The pcap link type for frames of `medium`: [`LINKTYPE_ETHERNET`] or [`LINKTYPE_RAW`].
pub const fn link_type(medium: Medium) -> u32 {
    match medium {
        Medium::Ethernet => LINKTYPE_ETHERNET,
        Medium::Ip => LINKTYPE_RAW,
    }
}

/// The 24-byte pcap file header for frames of `medium` written with `options`.
pub fn global_header(medium: Medium, options: &PcapOptions) -> [u8; GLOBAL_HEADER_LEN] {
    let mut h = [0u8; GLOBAL_HEADER_LEN];
    h[0..4].copy_from_slice(&options.resolution.magic().to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes()); // version 2.4
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    // 8..16: time zone offset and timestamp accuracy, both 0.
    h[16..20].copy_from_slice(&options.snaplen.max(1).to_le_bytes());
    h[20..24].copy_from_slice(&link_type(medium).to_le_bytes());
    h
}

/// The 16-byte record header of a frame of `frame_len` bytes seen at `time_ns`, and how many of
/// its bytes follow it (`min(frame_len, snaplen)`).
pub fn record_header(
    time_ns: u64,
    frame_len: usize,
    options: &PcapOptions,
) -> ([u8; RECORD_HEADER_LEN], usize) {
    let orig_len = u32::try_from(frame_len).unwrap_or(u32::MAX);
    let incl_len = orig_len.min(options.snaplen.max(1));
    // Seconds wrap after 2106, as the field is 32 bits.
    let secs = (time_ns / 1_000_000_000) as u32;
    let nanos = (time_ns % 1_000_000_000) as u32;
    let frac = match options.resolution {
        Resolution::Micros => nanos / 1000,
        Resolution::Nanos => nanos,
    };
    let mut h = [0u8; RECORD_HEADER_LEN];
    h[0..4].copy_from_slice(&secs.to_le_bytes());
    h[4..8].copy_from_slice(&frac.to_le_bytes());
    h[8..12].copy_from_slice(&incl_len.to_le_bytes());
    h[12..16].copy_from_slice(&orig_len.to_le_bytes());
    // incl_len <= orig_len <= frame_len, so this is at most frame_len.
    (h, incl_len as usize)
}

/// A sink refused a write: nothing of it was written, and what the sink holds is still a valid
/// pcap stream up to its last accepted write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SinkError;

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the capture sink refused the write")
    }
}

impl core::error::Error for SinkError {}

/// Where a [`Capture`] writes its pcap stream: a file, a serial port, a memory buffer.
///
/// A write is one unit of the stream (the file header, or a record header with the frame's
/// bytes) given as consecutive slices. The sink writes all of them, in order, and returns
/// `Ok`, or returns `Err(SinkError)` having written none of them: a sink that cannot promise
/// "none" after a failure (a file after an I/O error) must refuse every later write, so that
/// its stream stays readable up to the failure. A sink must not block for long: it is called
/// on the data path, from the task that drives the driver.
pub trait PcapSink {
    /// Appends `parts`, in order, all or nothing.
    fn write(&mut self, parts: &[&[u8]]) -> Result<(), SinkError>;

    /// Pushes buffered bytes on to their destination. The default does nothing (a sink without a
    /// buffer of its own).
    fn flush(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

impl<S: PcapSink + ?Sized> PcapSink for &mut S {
    fn write(&mut self, parts: &[&[u8]]) -> Result<(), SinkError> {
        (**self).write(parts)
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        (**self).flush()
    }
}

/// A sink over a fixed buffer of the caller's: no allocation, bounded memory. A write that does
/// not fit in what is left is refused whole; the stream written so far stays valid.
#[derive(Debug)]
pub struct SliceSink<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> SliceSink<'a> {
    /// An empty sink writing into `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        SliceSink { buf, len: 0 }
    }

    /// The pcap stream written so far.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes still free.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.len
    }
}

impl PcapSink for SliceSink<'_> {
    fn write(&mut self, parts: &[&[u8]]) -> Result<(), SinkError> {
        let total = parts.iter().map(|p| p.len()).sum::<usize>();
        if total > self.remaining() {
            return Err(SinkError);
        }
        for p in parts {
            self.buf[self.len..self.len + p.len()].copy_from_slice(p);
            self.len += p.len();
        }
        Ok(())
    }
}

/// Grows as needed (for tests and short captures; [`SliceSink`] bounds the memory). A write the
/// allocator cannot make room for is refused. Needs the `alloc` feature.
#[cfg(any(feature = "alloc", test, doc))]
impl PcapSink for alloc::vec::Vec<u8> {
    fn write(&mut self, parts: &[&[u8]]) -> Result<(), SinkError> {
        let total = parts.iter().map(|p| p.len()).sum::<usize>();
        self.try_reserve(total).map_err(|_| SinkError)?;
        for p in parts {
            self.extend_from_slice(p);
        }
        Ok(())
    }
}

/// A [`Capture`]'s counters: statistics only (`Relaxed`, one writer). Put them in a `static` or
/// leak them, so they can be read while a stack owns the driver.
#[derive(Debug)]
pub struct CaptureCounters {
    rx_frames: StatCounter,
    tx_frames: StatCounter,
    bytes: StatCounter,
    truncated: StatCounter,
    lost: StatCounter,
    tx_refused: StatCounter,
}

impl CaptureCounters {
    /// All counters zero.
    pub const fn new() -> Self {
        CaptureCounters {
            rx_frames: StatCounter::new(),
            tx_frames: StatCounter::new(),
            bytes: StatCounter::new(),
            truncated: StatCounter::new(),
            lost: StatCounter::new(),
            tx_refused: StatCounter::new(),
        }
    }

    /// The counters now.
    pub fn stats(&self) -> CaptureStats {
        CaptureStats {
            rx_frames: self.rx_frames.get(),
            tx_frames: self.tx_frames.get(),
            bytes: self.bytes.get(),
            truncated: self.truncated.get(),
            lost: self.lost.get(),
            tx_refused: self.tx_refused.get(),
        }
    }
}

impl Default for CaptureCounters {
    fn default() -> Self {
        Self::new()
    }
}

/// What a [`Capture`] recorded ([`CaptureCounters::stats`], [`Capture::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CaptureStats {
    /// Received frames written to the sink.
    pub rx_frames: u64,
    /// Transmitted frames written to the sink (refused ones included).
    pub tx_frames: u64,
    /// Frame bytes written to the sink (record headers and the file header not counted).
    pub bytes: u64,
    /// Frames written shorter than they were, cut at the snapshot length.
    pub truncated: u64,
    /// Frames not in the capture because the sink refused their record (or the file header that
    /// must come first).
    pub lost: u64,
    /// Transmitted frames the inner driver refused after they were recorded (the capture holds
    /// them; the wire never saw them).
    pub tx_refused: u64,
}

/// A [`Driver`] that forwards everything to `inner` and writes each frame it receives or
/// transmits to a [`PcapSink`]. See the [module docs](self) for what is recorded when.
///
/// It is a `Driver` itself, so it goes wherever the inner driver would (to
/// `zcnet_stack::Stack::new`, say); it is `Send` when the driver and the sink are.
pub struct Capture<'c, D, S> {
    inner: D,
    sink: S,
    clock: Clock,
    options: PcapOptions,
    medium: Medium,
    counters: &'c CaptureCounters,
    /// The file header is in the sink; until it is, every record first tries to write it.
    header_written: bool,
}

impl<D: fmt::Debug, S> fmt::Debug for Capture<'_, D, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capture")
            .field("inner", &self.inner)
            .field("options", &self.options)
            .field("medium", &self.medium)
            .field("stats", &self.counters.stats())
            .finish_non_exhaustive()
    }
}

impl<'c, D: Driver, S: PcapSink> Capture<'c, D, S> {
    /// Wraps `inner`, writing to `sink` with the [default options](PcapOptions::default) and
    /// timestamps from `clock`, counting in `counters`. The file header (its link type from
    /// `inner`'s [`Medium`]) is written to `sink` now; if the sink refuses it, the next frame
    /// tries again.
    pub fn new(inner: D, sink: S, clock: Clock, counters: &'c CaptureCounters) -> Self {
        Self::with_options(inner, sink, clock, counters, PcapOptions::default())
    }

    /// [`new`](Self::new) with `options` (snapshot length, timestamp resolution).
    pub fn with_options(
        inner: D,
        sink: S,
        clock: Clock,
        counters: &'c CaptureCounters,
        options: PcapOptions,
    ) -> Self {
        let medium = inner.capabilities().medium;
        let mut capture = Capture {
            inner,
            sink,
            clock,
            options,
            medium,
            counters,
            header_written: false,
        };
        // A refusal here loses no frame; the first record retries.
        let _ = capture.write_header();
        capture
    }
}

impl<D, S: PcapSink> Capture<'_, D, S> {
    fn write_header(&mut self) -> Result<(), SinkError> {
        if !self.header_written {
            let h = global_header(self.medium, &self.options);
            self.sink.write(&[&h])?;
            self.header_written = true;
        }
        Ok(())
    }

    /// Writes one frame's record; counts it (`tx`: a transmitted frame) or its loss.
    fn record(&mut self, frame: &[u8], tx: bool) {
        self.record_parts(frame.len(), core::iter::once(frame), tx);
    }

    /// Records one packet of `len` bytes given as `parts` in order (a chain's slices; at most
    /// [`MAX_CHAIN_SEGMENTS`](crate::MAX_CHAIN_SEGMENTS) of them).
    fn record_parts<'p>(&mut self, len: usize, parts: impl Iterator<Item = &'p [u8]>, tx: bool) {
        if self.write_header().is_err() {
            self.counters.lost.add(1);
            return;
        }
        let (header, n) = record_header((self.clock)(), len, &self.options);
        let mut pieces: [&[u8]; crate::MAX_CHAIN_SEGMENTS + 1] =
            [&[]; crate::MAX_CHAIN_SEGMENTS + 1];
        pieces[0] = &header;
        let mut count = 1;
        let mut left = n;
        for part in parts {
            if left == 0 || count == pieces.len() {
                break;
            }
            let take = part.get(..left).unwrap_or(part);
            pieces[count] = take;
            count += 1;
            left -= take.len();
        }
        let data = n - left;
        match self.sink.write(&pieces[..count]) {
            Ok(()) => {
                let c = self.counters;
                let frames = if tx { &c.tx_frames } else { &c.rx_frames };
                frames.add(1);
                c.bytes.add(data as u64);
                if data < len {
                    c.truncated.add(1);
                }
            }
            Err(SinkError) => self.counters.lost.add(1),
        }
    }

    /// Flushes the sink ([`PcapSink::flush`]); writes the file header first if it is still
    /// missing.
    pub fn flush(&mut self) -> Result<(), SinkError> {
        self.write_header()?;
        self.sink.flush()
    }

    /// The counters now.
    pub fn stats(&self) -> CaptureStats {
        self.counters.stats()
    }

    /// The options the file was written with.
    pub fn options(&self) -> &PcapOptions {
        &self.options
    }

    /// The wrapped driver.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped driver, mutably (frames moved through it directly are not recorded).
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// The sink.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// The sink, mutably.
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Unwraps the driver and the sink (not flushed: see [`flush`](Self::flush)).
    pub fn into_parts(self) -> (D, S) {
        (self.inner, self.sink)
    }
}

impl<D: Driver, S: PcapSink> Driver for Capture<'_, D, S> {
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<RxFrame> {
        let polled = self.inner.poll_receive(cx);
        if let Poll::Ready(frame) = &polled {
            self.record(frame, false);
        }
        polled
    }

    /// A chain is recorded as one packet (its bytes in order), as a capture on Linux records a
    /// GSO packet.
    fn poll_receive_chain(&mut self, cx: &mut Context<'_>) -> Poll<RxChain> {
        let polled = self.inner.poll_receive_chain(cx);
        if let Poll::Ready(chain) = &polled {
            self.record_parts(chain.len(), chain.iter(), false);
        }
        polled
    }

    fn poll_receive_packet(&mut self, cx: &mut Context<'_>) -> Poll<RxPacket> {
        let polled = self.inner.poll_receive_packet(cx);
        match &polled {
            Poll::Ready(RxPacket::Frame(frame)) => self.record(frame, false),
            Poll::Ready(RxPacket::Chain(chain)) => {
                self.record_parts(chain.len(), chain.iter(), false)
            }
            Poll::Pending => {}
        }
        polled
    }

    fn transmit_chain(&mut self, chain: TxChain) -> Result<(), TxError> {
        self.record_parts(chain.len(), chain.iter(), true);
        let sent = self.inner.transmit_chain(chain);
        if sent.is_err() {
            self.counters.tx_refused.add(1);
        }
        sent
    }

    fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
        self.inner.poll_transmit_frame(cx)
    }

    fn poll_transmit_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_transmit_ready(cx)
    }

    fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
        self.record(&frame, true);
        let sent = self.inner.transmit(frame);
        if sent.is_err() {
            self.counters.tx_refused.add(1);
        }
        sent
    }

    fn flush(&mut self) {
        // The wrapped driver's doorbells (not this type's own `flush`, which flushes the sink).
        Driver::flush(&mut self.inner)
    }

    fn receive_deferral(&mut self) -> Option<core::time::Duration> {
        self.inner.receive_deferral()
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

#[cfg(feature = "std")]
pub use self::std_io::{system_time_ns, IoSink};

/// The `std` side: a sink over [`std::io::Write`], shared sinks and a wall clock.
#[cfg(feature = "std")]
mod std_io {
    use std::fs::File;
    use std::io::{self, BufWriter, Write};
    use std::path::Path;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use super::{PcapSink, SinkError};

    /// Nanoseconds since the Unix epoch from the system's wall clock (0 if it is set before
    /// 1970): a [`Clock`](super::Clock) whose timestamps readers show as the time of day. Needs
    /// the `std` feature.
    pub fn system_time_ns() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// A [`PcapSink`] over any [`Write`] (a [`File`], a pipe, a socket), with a 64 KiB buffer.
    /// Needs the `std` feature.
    ///
    /// Buffered bytes are flushed when a write comes at least the flush interval (1 s unless
    /// [`with_flush_interval`](Self::with_flush_interval) says otherwise) after the last flush,
    /// on [`PcapSink::flush`], and on drop. After the first I/O error the sink refuses every
    /// write, so the output is a valid pcap stream up to that error (its last record may be
    /// cut short); [`error`](Self::error) tells what happened.
    ///
    /// A driver handed to a stack is never given back, so a program that wants the last records
    /// flushed at exit shares the sink: a `Mutex` of a sink is a sink too (as `&Mutex<S>` or
    /// `Arc<Mutex<S>>`), and the program calls `flush` on its own reference.
    #[derive(Debug)]
    pub struct IoSink<W: Write> {
        out: BufWriter<W>,
        error: Option<io::Error>,
        flush_interval: Duration,
        last_flush: Instant,
    }

    /// Size of an [`IoSink`]'s buffer.
    const BUFFER: usize = 64 * 1024;

    impl IoSink<File> {
        /// Creates (or truncates) the file at `path` and writes to it.
        pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
            Ok(Self::new(File::create(path)?))
        }
    }

    impl<W: Write> IoSink<W> {
        /// A sink writing to `out`, flushing at least every second while records come.
        pub fn new(out: W) -> Self {
            IoSink {
                out: BufWriter::with_capacity(BUFFER, out),
                error: None,
                flush_interval: Duration::from_secs(1),
                last_flush: Instant::now(),
            }
        }

        /// Flushes when a write comes `interval` or more after the last flush
        /// ([`Duration::ZERO`]: after every write).
        pub fn with_flush_interval(mut self, interval: Duration) -> Self {
            self.flush_interval = interval;
            self
        }

        /// The I/O error that stopped the sink, if one did.
        pub fn error(&self) -> Option<&io::Error> {
            self.error.as_ref()
        }

        /// The underlying writer (bytes still in the buffer have not reached it).
        pub fn get_ref(&self) -> &W {
            self.out.get_ref()
        }

        /// Flushes and returns the underlying writer.
        pub fn into_inner(self) -> io::Result<W> {
            if let Some(e) = self.error {
                return Err(e);
            }
            self.out.into_inner().map_err(|e| e.into_error())
        }

        fn fail(&mut self, e: io::Error) -> SinkError {
            self.error = Some(e);
            SinkError
        }
    }

    impl<W: Write> PcapSink for IoSink<W> {
        fn write(&mut self, parts: &[&[u8]]) -> Result<(), SinkError> {
            if self.error.is_some() {
                return Err(SinkError);
            }
            for p in parts {
                if let Err(e) = self.out.write_all(p) {
                    return Err(self.fail(e));
                }
            }
            if self.last_flush.elapsed() >= self.flush_interval {
                self.flush()?;
            }
            Ok(())
        }

        fn flush(&mut self) -> Result<(), SinkError> {
            if self.error.is_some() {
                return Err(SinkError);
            }
            self.last_flush = Instant::now();
            self.out.flush().map_err(|e| self.fail(e))
        }
    }

    /// A shared sink: the capture writes through the lock, the program keeps its own reference
    /// (to flush at exit, say). A poisoned lock refuses writes. Needs the `std` feature.
    impl<S: PcapSink + ?Sized> PcapSink for &Mutex<S> {
        fn write(&mut self, parts: &[&[u8]]) -> Result<(), SinkError> {
            self.lock().map_err(|_| SinkError)?.write(parts)
        }

        fn flush(&mut self) -> Result<(), SinkError> {
            self.lock().map_err(|_| SinkError)?.flush()
        }
    }

    /// A shared sink, as `&Mutex<S>`. Needs the `std` feature.
    impl<S: PcapSink + ?Sized> PcapSink for Arc<Mutex<S>> {
        fn write(&mut self, parts: &[&[u8]]) -> Result<(), SinkError> {
            self.lock().map_err(|_| SinkError)?.write(parts)
        }

        fn flush(&mut self) -> Result<(), SinkError> {
            self.lock().map_err(|_| SinkError)?.flush()
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use core::task::Waker;
    use std::vec;
    use std::vec::Vec;

    use super::*;
    use crate::{FramePool, PoolConfig};

    /// A loopback: every transmitted slot comes back as received; `refuse` makes it refuse
    /// transmits (the frame is dropped, its slot freed).
    struct Loopback {
        pool: &'static FramePool,
        back: Option<RxFrame>,
        medium: Medium,
        refuse: bool,
        /// `Driver::flush` calls.
        flushes: usize,
        /// What `Driver::receive_deferral` answers.
        deferral: Option<core::time::Duration>,
    }

    impl Driver for Loopback {
        fn poll_receive(&mut self, _cx: &mut Context<'_>) -> Poll<RxFrame> {
            self.back.take().map_or(Poll::Pending, Poll::Ready)
        }
        fn poll_transmit_frame(&mut self, cx: &mut Context<'_>) -> Poll<TxFrame> {
            self.pool.poll_alloc_tx(cx)
        }
        fn transmit(&mut self, frame: TxFrame) -> Result<(), TxError> {
            if self.refuse {
                return Err(TxError::LinkDown);
            }
            self.back = Some(
                frame
                    .into_device()
                    .loop_back()
                    .map_err(|_| TxError::Device)?,
            );
            Ok(())
        }
        fn flush(&mut self) {
            self.flushes += 1;
        }
        fn receive_deferral(&mut self) -> Option<core::time::Duration> {
            self.deferral.take()
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::new(self.medium, 1500)
        }
        fn hardware_address(&self) -> HardwareAddress {
            HardwareAddress::Ethernet([2, 0, 0, 0, 0, 1])
        }
        fn poll_link_state(&mut self, _cx: &mut Context<'_>) -> LinkState {
            LinkState::Up
        }
    }

    fn loopback(medium: Medium) -> Loopback {
        Loopback {
            pool: FramePool::leak(PoolConfig::new(4)).unwrap(),
            back: None,
            medium,
            refuse: false,
            flushes: 0,
            deferral: None,
        }
    }

    /// Sends a frame of `len` bytes (byte i = i as u8) and takes it back.
    fn round_trip<S: PcapSink>(dev: &mut Capture<'_, Loopback, S>, len: usize) {
        let mut cx = Context::from_waker(Waker::noop());
        let Poll::Ready(mut tx) = dev.poll_transmit_frame(&mut cx) else {
            panic!("a TX frame is free");
        };
        for (i, b) in tx.append(len).unwrap().iter_mut().enumerate() {
            *b = i as u8;
        }
        let _ = dev.transmit(tx);
        if let Poll::Ready(rx) = dev.poll_receive(&mut cx) {
            assert_eq!(rx.len(), len);
        }
    }

    fn le32(b: &[u8]) -> u32 {
        u32::from_le_bytes(b[..4].try_into().unwrap())
    }

    #[test]
    fn file_header_is_byte_exact() {
        let eth = global_header(Medium::Ethernet, &PcapOptions::default());
        assert_eq!(
            eth,
            [
                0x4d, 0x3c, 0xb2, 0xa1, // magic, nanoseconds
                2, 0, 4, 0, // version 2.4
                0, 0, 0, 0, // time zone
                0, 0, 0, 0, // accuracy
                0x00, 0x00, 0x04, 0x00, // snaplen 262144
                1, 0, 0, 0, // Ethernet
            ]
        );
        let ip = global_header(
            Medium::Ip,
            &PcapOptions {
                snaplen: 96,
                resolution: Resolution::Micros,
            },
        );
        assert_eq!(ip[..4], [0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(ip[16..], [96, 0, 0, 0, 101, 0, 0, 0]);
        let zero = PcapOptions {
            snaplen: 0,
            ..PcapOptions::default()
        };
        assert_eq!(le32(&global_header(Medium::Ip, &zero)[16..]), 1);
    }

    #[test]
    fn record_header_splits_the_timestamp_and_cuts_at_snaplen() {
        let t = 1_700_000_123_987_654_321u64;
        let nanos = PcapOptions::default();
        let (h, n) = record_header(t, 1514, &nanos);
        assert_eq!(n, 1514);
        assert_eq!(
            h,
            [
                0x7b, 0xf1, 0x53, 0x65, // 1_700_000_123 s
                0xb1, 0x68, 0xde, 0x3a, // 987_654_321 ns
                0xea, 0x05, 0, 0, // 1514 captured
                0xea, 0x05, 0, 0, // 1514 long
            ]
        );
        let micros = PcapOptions {
            snaplen: 100,
            resolution: Resolution::Micros,
        };
        let (h, n) = record_header(t, 1514, &micros);
        assert_eq!(n, 100);
        assert_eq!(le32(&h[0..]), 1_700_000_123);
        assert_eq!(le32(&h[4..]), 987_654);
        assert_eq!(le32(&h[8..]), 100);
        assert_eq!(le32(&h[12..]), 1514);
        // Shorter than the snapshot length: whole.
        let (h, n) = record_header(0, 42, &micros);
        assert_eq!((n, le32(&h[8..]), le32(&h[12..])), (42, 42, 42));
        // Seconds past 2106 wrap rather than panic.
        let (h, _) = record_header(u64::MAX, 0, &nanos);
        assert_eq!(le32(&h[0..]), (u64::MAX / 1_000_000_000) as u32);
    }

    /// A chain goes through the capture (the loopback's default chain entry points: one
    /// frame) and is recorded as one packet, cut at the snap length across its frames.
    #[test]
    fn a_chain_is_recorded_as_one_packet_across_its_frames() {
        static COUNTERS: CaptureCounters = CaptureCounters::new();
        let options = PcapOptions {
            snaplen: 50,
            resolution: Resolution::Micros,
        };
        let mut dev = Capture::with_options(
            loopback(Medium::Ip),
            Vec::new(),
            || 1_000_000,
            &COUNTERS,
            options,
        );
        let pool = dev.inner().pool;
        let mut chain = TxChain::new();
        for part in [&b"0123456789"[..], &[b'a'; 30], &[b'b'; 30]] {
            let mut f = pool.try_alloc_tx().unwrap();
            f.append(part.len()).unwrap().copy_from_slice(part);
            chain.push(f).unwrap();
        }
        // The loopback takes one-frame chains only: refused (and still recorded, as sent).
        assert_eq!(
            dev.transmit_chain(chain),
            Err(TxError::ChainUnsupported { frames: 3 })
        );
        let mut one = pool.try_alloc_tx().unwrap();
        one.append(7).unwrap().copy_from_slice(b"single!");
        dev.transmit_chain(TxChain::from_frame(one)).unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        let Poll::Ready(back) = dev.poll_receive_chain(&mut cx) else {
            panic!("the frame came back");
        };
        assert_eq!(back.len(), 7);
        drop(back);
        // Through `poll_receive_packet` the frame is recorded as well.
        let mut again = pool.try_alloc_tx().unwrap();
        again.append(5).unwrap().copy_from_slice(b"again");
        dev.transmit(again).unwrap();
        match dev.poll_receive_packet(&mut cx) {
            Poll::Ready(RxPacket::Frame(f)) => assert_eq!(&f[..], b"again"),
            other => panic!("the frame came back as a frame, got {other:?}"),
        }
        let s = dev.stats();
        assert_eq!(
            (s.tx_frames, s.rx_frames, s.truncated, s.tx_refused),
            (3, 2, 1, 1)
        );
        assert_eq!(s.bytes, 50 + 7 + 7 + 5 + 5);
        let file = dev.sink().as_slice();
        let h = &file[24..40];
        assert_eq!((le32(&h[8..]), le32(&h[12..])), (50, 70));
        let mut want = b"0123456789".to_vec();
        want.extend_from_slice(&[b'a'; 30]);
        want.extend_from_slice(&[b'b'; 10]);
        assert_eq!(&file[40..90], &want[..]);
        assert_eq!(&file[90 + 16..90 + 16 + 7], b"single!");
        assert_eq!(pool.audit().unwrap().free, 4);
    }

    #[test]
    fn records_follow_the_header_with_lengths_and_bytes() {
        static COUNTERS: CaptureCounters = CaptureCounters::new();
        let options = PcapOptions {
            snaplen: 64,
            resolution: Resolution::Micros,
        };
        let mut dev = Capture::with_options(
            loopback(Medium::Ip),
            Vec::new(),
            || 2_000_003_000,
            &COUNTERS,
            options,
        );
        round_trip(&mut dev, 40);
        round_trip(&mut dev, 100); // cut to 64
        let s = dev.stats();
        assert_eq!(
            s,
            CaptureStats {
                rx_frames: 2,
                tx_frames: 2,
                bytes: 2 * 40 + 2 * 64,
                truncated: 2,
                lost: 0,
                tx_refused: 0,
            }
        );
        let file = dev.sink().as_slice();
        assert_eq!(file[..24], global_header(Medium::Ip, &options));
        let mut at = 24;
        for (caught, len) in [(40, 40), (40, 40), (64, 100), (64, 100)] {
            let h = &file[at..at + 16];
            assert_eq!(le32(&h[0..]), 2);
            assert_eq!(le32(&h[4..]), 3);
            assert_eq!(le32(&h[8..]), caught);
            assert_eq!(le32(&h[12..]), len);
            let data = &file[at + 16..at + 16 + caught as usize];
            assert!(data.iter().enumerate().all(|(i, &b)| b == i as u8));
            at += 16 + caught as usize;
        }
        assert_eq!(at, file.len());
        let (lo, _) = dev.into_parts();
        assert_eq!(lo.pool.audit().unwrap().free, 4, "no frame held");
    }

    /// A sink that refuses everything while `broken`.
    struct Flaky<'a> {
        out: &'a mut Vec<u8>,
        broken: bool,
    }

    impl PcapSink for Flaky<'_> {
        fn write(&mut self, parts: &[&[u8]]) -> Result<(), SinkError> {
            if self.broken {
                return Err(SinkError);
            }
            PcapSink::write(&mut *self.out, parts)
        }
    }

    #[test]
    fn a_failing_sink_loses_records_not_frames() {
        static COUNTERS: CaptureCounters = CaptureCounters::new();
        let mut out = Vec::new();
        let sink = Flaky {
            out: &mut out,
            broken: true,
        };
        let mut dev = Capture::new(loopback(Medium::Ethernet), sink, || 0, &COUNTERS);
        // No header yet; frames still go through.
        round_trip(&mut dev, 60);
        assert_eq!(dev.stats().lost, 2);
        assert_eq!(dev.stats().rx_frames + dev.stats().tx_frames, 0);
        // The sink recovers: the header comes first, then the record.
        dev.sink_mut().broken = false;
        round_trip(&mut dev, 60);
        let s = dev.stats();
        assert_eq!((s.tx_frames, s.rx_frames, s.lost), (1, 1, 2));
        // A refused transmit is recorded and counted.
        dev.inner_mut().refuse = true;
        round_trip(&mut dev, 60);
        let s = dev.stats();
        assert_eq!((s.tx_frames, s.rx_frames, s.tx_refused), (2, 1, 1));
        let (lo, _) = dev.into_parts();
        assert_eq!(lo.pool.audit().unwrap().free, 4);
        assert_eq!(out.len(), 24 + 3 * (16 + 60));
        assert_eq!(le32(&out), MAGIC_NANOS);
    }

    #[test]
    fn the_drivers_flush_and_deferral_reach_the_wrapped_driver_and_the_sink_keeps_its_flush() {
        static COUNTERS: CaptureCounters = CaptureCounters::new();
        let mut dev = Capture::new(loopback(Medium::Ethernet), Vec::new(), || 0, &COUNTERS);
        round_trip(&mut dev, 60);
        Driver::flush(&mut dev);
        assert_eq!(dev.inner_mut().flushes, 1, "Driver::flush is forwarded");
        dev.flush().unwrap();
        assert_eq!(
            dev.inner_mut().flushes,
            1,
            "the inherent flush is the sink's"
        );
        // A receive deferral is the wrapped driver's answer.
        assert_eq!(dev.receive_deferral(), None);
        let delay = core::time::Duration::from_micros(50);
        dev.inner_mut().deferral = Some(delay);
        assert_eq!(dev.receive_deferral(), Some(delay));
        assert_eq!(dev.inner_mut().deferral, None, "asked once");
    }

    #[test]
    fn slice_sink_refuses_what_does_not_fit_and_stays_valid() {
        static COUNTERS: CaptureCounters = CaptureCounters::new();
        let mut buf = [0u8; 24 + 16 + 60 + 10];
        let mut dev = Capture::new(
            loopback(Medium::Ethernet),
            SliceSink::new(&mut buf),
            || 0,
            &COUNTERS,
        );
        round_trip(&mut dev, 60);
        let s = dev.stats();
        assert_eq!((s.tx_frames, s.rx_frames, s.lost), (1, 0, 1));
        assert_eq!(dev.sink().len(), 24 + 16 + 60);
        assert_eq!(dev.sink().remaining(), 10);
        // Too small for even the file header: every frame is lost, nothing is written.
        static NONE: CaptureCounters = CaptureCounters::new();
        let mut tiny = [0u8; 10];
        let mut dev = Capture::new(
            loopback(Medium::Ethernet),
            SliceSink::new(&mut tiny),
            || 0,
            &NONE,
        );
        round_trip(&mut dev, 60);
        assert_eq!(dev.stats().lost, 2);
        assert!(dev.sink().is_empty());
        assert_eq!(dev.flush(), Err(SinkError));
    }

    #[cfg(feature = "std")]
    #[test]
    fn io_sink_flushes_and_stops_at_the_first_error() {
        use std::io::{self, Write};
        use std::sync::Mutex;
        use std::time::Duration;

        /// Accepts `room` bytes, then fails.
        struct Limited {
            got: Vec<u8>,
            room: usize,
        }
        impl Write for Limited {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                if self.got.len() + b.len() > self.room {
                    return Err(io::Error::other("full"));
                }
                self.got.extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }

        // Buffered until flushed.
        let sink = Mutex::new(
            IoSink::new(Limited {
                got: vec![],
                room: 1000,
            })
            .with_flush_interval(Duration::from_secs(3600)),
        );
        static COUNTERS: CaptureCounters = CaptureCounters::new();
        let mut dev = Capture::new(loopback(Medium::Ethernet), &sink, || 0, &COUNTERS);
        round_trip(&mut dev, 60);
        assert!(sink.lock().unwrap().get_ref().got.is_empty());
        let mut shared = &sink;
        PcapSink::flush(&mut shared).unwrap();
        assert_eq!(sink.lock().unwrap().get_ref().got.len(), 24 + 2 * 76);

        // Flushing after every write: the writer's error stops the sink for good.
        static FAILING: CaptureCounters = CaptureCounters::new();
        let sink = IoSink::new(Limited {
            got: vec![],
            room: 24 + 76 + 20,
        })
        .with_flush_interval(Duration::ZERO);
        let mut dev = Capture::new(loopback(Medium::Ethernet), sink, || 0, &FAILING);
        round_trip(&mut dev, 60);
        round_trip(&mut dev, 60);
        let s = dev.stats();
        assert_eq!((s.tx_frames, s.lost), (1, 3));
        assert!(dev.sink().error().is_some());
        assert_eq!(dev.sink().get_ref().got.len(), 24 + 76);
        assert!(dev.flush().is_err());
        assert!(system_time_ns() > 1_600_000_000_000_000_000);
    }
}
