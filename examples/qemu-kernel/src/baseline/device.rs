//! A smoltcp [`Device`] over virtio-drivers' [`VirtIONetRaw`] that copies frames at the device
//! boundary, the way a kernel's first smoltcp port usually does it.
//!
//! ```text
//!  RX  QUEUE_SIZE DMA buffers (2 KiB each) stay posted in the receive queue
//!      receive(): a used buffer ─► RxToken (lends the DMA buffer's frame)
//!      RxToken::consume: COPY 1: DMA buffer ─► the device's RX scratch frame, then
//!                        smoltcp reads the scratch (and copies payload into a socket ring)
//!      the DMA buffer goes back into the queue at the next receive() / transmit()
//!  TX  transmit() / receive(): a TxToken if a TX DMA buffer is free
//!      TxToken::consume: smoltcp writes the frame into the device's TX scratch frame, then
//!                        COPY 2: scratch ─► a free TX DMA buffer behind the 12-byte virtio-net
//!                        header ─► transmit_begin; the buffer is free again on completion
//! ```
//!
//! [`DeviceMode::Lend`] removes both copies (the RX token lends the DMA buffer itself, the TX
//! token hands smoltcp the DMA buffer behind the header): that is how ArceOS's `axnet` drives
//! its virtio-net buffers. The kernel command line picks the mode (`dev=copy`, the default, or
//! `dev=lend`).
//!
//! Every buffer is one descriptor (virtio-drivers without `alloc` uses no indirect
//! descriptors), so a queue token is a descriptor index below `QUEUE_SIZE` and maps back to its
//! buffer through a table. Nothing the device reports is trusted: an unknown token or a length
//! past the buffer is counted as an error and the frame dropped.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::time::Instant;
use virtio_drivers::device::net::VirtIONetRaw;
use virtio_drivers::transport::Transport;
use virtio_drivers::Hal;

/// Bytes of each DMA buffer: the virtio-net header (12 bytes) and a 1514-byte frame fit, and
/// virtio-drivers asks at least 1526 for a receive buffer.
pub const BUF_LEN: usize = 2048;
/// Largest Ethernet frame (without FCS) smoltcp is told it may send.
pub const MTU: usize = 1514;
/// A token with no buffer behind it.
const NO_BUF: u16 = u16::MAX;

/// Where frames are copied at the device boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceMode {
    /// One copy per frame each way between the DMA buffers and the device's scratch frames.
    Copy,
    /// smoltcp reads and writes the DMA buffers themselves.
    Lend,
}

/// The device's counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceStats {
    /// Frames handed to smoltcp.
    pub rx_frames: u64,
    /// Frames given to the device to send.
    pub tx_frames: u64,
    /// Completions the device reported wrongly (unknown token, bad length): frame dropped.
    pub rx_errors: u64,
    /// Frames smoltcp wrote that could not be queued (no free TX buffer, queue error).
    pub tx_dropped: u64,
}

/// A fixed set of DMA buffers with a token → buffer table.
struct Buffers<const QS: usize> {
    bufs: Box<[[u8; BUF_LEN]]>,
    by_token: [u16; QS],
}

impl<const QS: usize> Buffers<QS> {
    fn new(count: usize) -> Self {
        Buffers {
            bufs: vec![[0u8; BUF_LEN]; count].into_boxed_slice(),
            by_token: [NO_BUF; QS],
        }
    }

    /// The buffer behind `token`, forgetting the mapping; `None` for a token we never issued.
    fn take(&mut self, token: u16) -> Option<usize> {
        let slot = self.by_token.get_mut(usize::from(token))?;
        let idx = core::mem::replace(slot, NO_BUF);
        (idx != NO_BUF).then_some(usize::from(idx))
    }

    fn remember(&mut self, token: u16, idx: usize) -> bool {
        match self.by_token.get_mut(usize::from(token)) {
            Some(slot) => {
                // Buffer counts are at most QUEUE_SIZE, far below NO_BUF.
                *slot = idx as u16;
                true
            }
            None => false,
        }
    }
}

struct RxSide<const QS: usize> {
    dma: Buffers<QS>,
    /// Buffers to post again at the next call into the device: the one lent to the last
    /// RxToken (and any the queue refused, which it cannot with `QS` buffers for `QS`
    /// descriptors). At most `QS` entries.
    repost: Vec<usize>,
    scratch: Box<[u8; BUF_LEN]>,
    stats_frames: u64,
    stats_errors: u64,
}

struct TxSide<const QS: usize> {
    dma: Buffers<QS>,
    free: Vec<usize>,
    scratch: Box<[u8; BUF_LEN]>,
    stats_frames: u64,
    stats_dropped: u64,
}

/// The copying virtio-net device.
pub struct CopyingNet<H: Hal, T: Transport, const QS: usize> {
    net: VirtIONetRaw<H, T, QS>,
    rx: RxSide<QS>,
    tx: TxSide<QS>,
    mode: DeviceMode,
}

impl<H: Hal, T: Transport, const QS: usize> CopyingNet<H, T, QS> {
    /// Takes over `net`, posts `QS` receive buffers and keeps `QS` transmit buffers.
    pub fn new(net: VirtIONetRaw<H, T, QS>, mode: DeviceMode) -> Self {
        let mut dev = CopyingNet {
            net,
            rx: RxSide {
                dma: Buffers::new(QS),
                repost: Vec::with_capacity(QS),
                scratch: Box::new([0; BUF_LEN]),
                stats_frames: 0,
                stats_errors: 0,
            },
            tx: TxSide {
                dma: Buffers::new(QS),
                free: (0..QS).collect(),
                scratch: Box::new([0; BUF_LEN]),
                stats_frames: 0,
                stats_dropped: 0,
            },
            mode,
        };
        for idx in 0..QS {
            dev.post_rx(idx);
        }
        dev
    }

    /// The MAC address the device reports.
    pub fn mac_address(&self) -> [u8; 6] {
        self.net.mac_address()
    }

    /// The counters.
    pub fn stats(&self) -> DeviceStats {
        DeviceStats {
            rx_frames: self.rx.stats_frames,
            tx_frames: self.tx.stats_frames,
            rx_errors: self.rx.stats_errors,
            tx_dropped: self.tx.stats_dropped,
        }
    }

    fn post_rx(&mut self, idx: usize) {
        let buf = &mut self.rx.dma.bufs[idx];
        // SAFETY: the buffer belongs to this device (a boxed slice that never moves or shrinks)
        // and is not touched again until the device returns it through `receive_complete`
        // with the token recorded here.
        match unsafe { self.net.receive_begin(buf) } {
            Ok(token) if self.rx.dma.remember(token, idx) => {}
            // The queue refused it: keep it for the next attempt.
            _ => self.rx.repost.push(idx),
        }
    }

    /// Posts the buffer lent to the last RxToken again and frees completed TX buffers.
    fn housekeeping(&mut self) {
        for _ in 0..self.rx.repost.len() {
            if let Some(idx) = self.rx.repost.pop() {
                self.post_rx(idx);
            }
        }
        reclaim_tx(&mut self.net, &mut self.tx);
    }
}

/// Frees every TX buffer the device has finished with.
fn reclaim_tx<H: Hal, T: Transport, const QS: usize>(
    net: &mut VirtIONetRaw<H, T, QS>,
    tx: &mut TxSide<QS>,
) {
    while let Some(token) = net.poll_transmit() {
        let Some(idx) = tx.dma.take(token) else {
            // A token we never issued: the used ring is corrupt; stop rather than loop.
            return;
        };
        let buf = &tx.dma.bufs[idx];
        // SAFETY: `idx` is the buffer `transmit_begin` was given for this token.
        let _ = unsafe { net.transmit_complete(token, buf) };
        tx.free.push(idx);
    }
}

/// A received frame: a view of the DMA buffer it arrived in.
pub struct CopyRxToken<'a> {
    frame: &'a [u8],
    scratch: &'a mut [u8; BUF_LEN],
    mode: DeviceMode,
}

impl RxToken for CopyRxToken<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        match self.mode {
            DeviceMode::Copy => {
                // `frame` is at most BUF_LEN - header long (checked in `receive`).
                let n = self.frame.len();
                self.scratch[..n].copy_from_slice(self.frame);
                f(&self.scratch[..n])
            }
            DeviceMode::Lend => f(self.frame),
        }
    }
}

/// Permission to send one frame.
pub struct CopyTxToken<'a, H: Hal, T: Transport, const QS: usize> {
    net: &'a mut VirtIONetRaw<H, T, QS>,
    tx: &'a mut TxSide<QS>,
    mode: DeviceMode,
}

impl<H: Hal, T: Transport, const QS: usize> TxToken for CopyTxToken<'_, H, T, QS> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let tx = self.tx;
        reclaim_tx(self.net, tx);
        // smoltcp never asks for more than the MTU it was given (1514 < BUF_LEN - 12); the
        // clamp only keeps the slicing below in bounds.
        let len = len.min(MTU);
        let Some(idx) = tx.free.pop() else {
            // Every TX buffer is in flight: the frame is built and dropped (smoltcp
            // retransmits TCP; a lost ARP or ICMP reply is what a full NIC queue does too).
            tx.stats_dropped += 1;
            return f(&mut tx.scratch[..len]);
        };
        let buf = &mut tx.dma.bufs[idx];
        let Ok(hdr) = self.net.fill_buffer_header(buf) else {
            tx.free.push(idx);
            tx.stats_dropped += 1;
            return f(&mut tx.scratch[..len]);
        };
        let r = match self.mode {
            DeviceMode::Copy => {
                let r = f(&mut tx.scratch[..len]);
                buf[hdr..hdr + len].copy_from_slice(&tx.scratch[..len]);
                r
            }
            DeviceMode::Lend => f(&mut buf[hdr..hdr + len]),
        };
        let buf = &tx.dma.bufs[idx];
        // SAFETY: the buffer is ours until the device returns it through `poll_transmit` with
        // this token (`reclaim_tx`); nothing writes it before then (it is off the free list).
        match unsafe { self.net.transmit_begin(&buf[..hdr + len]) } {
            Ok(token) if tx.dma.remember(token, idx) => tx.stats_frames += 1,
            _ => {
                tx.free.push(idx);
                tx.stats_dropped += 1;
            }
        }
        r
    }
}

impl<H: Hal, T: Transport, const QS: usize> Device for CopyingNet<H, T, QS> {
    type RxToken<'a>
        = CopyRxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = CopyTxToken<'a, H, T, QS>
    where
        Self: 'a;

    fn receive(&mut self, _now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        self.housekeeping();
        let (idx, hdr, len) = loop {
            let token = self.net.poll_receive()?;
            let Some(idx) = self.rx.dma.take(token) else {
                // Not a token we issued: the used ring is corrupt; give up on receiving.
                self.rx.stats_errors += 1;
                return None;
            };
            let buf = &mut self.rx.dma.bufs[idx];
            // SAFETY: `idx` is the buffer `receive_begin` was given for this token.
            match unsafe { self.net.receive_complete(token, buf) } {
                Ok((hdr, len)) if hdr.checked_add(len).is_some_and(|end| end <= BUF_LEN) => {
                    break (idx, hdr, len)
                }
                _ => {
                    self.rx.stats_errors += 1;
                    self.post_rx(idx);
                }
            }
        };
        self.rx.stats_frames += 1;
        self.rx.repost.push(idx);
        let rx = CopyRxToken {
            frame: &self.rx.dma.bufs[idx][hdr..hdr + len],
            scratch: &mut self.rx.scratch,
            mode: self.mode,
        };
        let tx = CopyTxToken {
            net: &mut self.net,
            tx: &mut self.tx,
            mode: self.mode,
        };
        Some((rx, tx))
    }

    fn transmit(&mut self, _now: Instant) -> Option<Self::TxToken<'_>> {
        self.housekeeping();
        if self.tx.free.is_empty() {
            return None;
        }
        Some(CopyTxToken {
            net: &mut self.net,
            tx: &mut self.tx,
            mode: self.mode,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = MTU;
        // No checksum offload in virtio-drivers 0.13: smoltcp computes and checks every
        // checksum (the default), as zcnet's driver has it too.
        caps
    }
}
