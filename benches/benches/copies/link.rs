//! The in-memory link between the two smoltcp interfaces and between the two embassy-net
//! stacks: per direction, a fixed set of frame buffers allocated once, a free list and a queue
//! of filled buffers. A sender's TX token lends a free buffer for the stack to build its frame
//! in; the buffer (by index) is queued; the receiver's RX token lends that same buffer to the
//! receiving stack, then it is free again. So a frame crosses this link with **no copy** and no
//! allocation (zcnet's wire copies each frame once, into the receiver's pool: its "DMA").
//!
//! The link's own code runs in its host's device scope; the closures the stacks pass to the
//! tokens (building or parsing the frame) run in the host's stack scope.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Context, Waker};

use crate::app::FRAME;
use crate::count::{self, enter, Host, Layer, Scope};

/// Frame buffers per direction: more than the frames that can be in flight (16 KiB windows).
const BUFFERS: usize = 64;

struct Dir {
    frames: Vec<[u8; FRAME]>,
    free: Vec<usize>,
    queue: VecDeque<(usize, usize)>,
    rx_waker: Option<Waker>,
    tx_waker: Option<Waker>,
    dropped: u64,
}

/// Both directions; `dirs[i]` carries frames sent by end `i`.
pub struct Link {
    dirs: [RefCell<Dir>; 2],
}

impl Link {
    /// A link and its two ends (end 0: the client, end 1: the server). Its frame buffers are
    /// declared as the run's device buffers ([`count::set_device_buffers`]).
    pub fn pair() -> (LinkEnd, LinkEnd) {
        let dir = || {
            RefCell::new(Dir {
                frames: vec![[0u8; FRAME]; BUFFERS],
                free: (0..BUFFERS).collect(),
                queue: VecDeque::new(),
                rx_waker: None,
                tx_waker: None,
                dropped: 0,
            })
        };
        let link = Rc::new(Link {
            dirs: [dir(), dir()],
        });
        // The buffers never move: each `Vec` is allocated once and never grows.
        let regions = link
            .dirs
            .each_ref()
            .map(|d| (d.borrow().frames.as_ptr().cast::<u8>(), BUFFERS * FRAME));
        count::set_device_buffers(&regions);
        let end = |side: usize, host: Host| LinkEnd {
            link: link.clone(),
            side,
            device: Scope::of(host, Layer::Device),
            stack: Scope::of(host, Layer::Stack),
        };
        (end(0, Host::Client), end(1, Host::Server))
    }

    /// Frames dropped for want of a buffer, both directions (the benchmark requires 0).
    pub fn dropped(&self) -> u64 {
        self.dirs[0].borrow().dropped + self.dirs[1].borrow().dropped
    }
}

/// One end of the link.
pub struct LinkEnd {
    link: Rc<Link>,
    side: usize,
    device: Scope,
    stack: Scope,
}

impl LinkEnd {
    /// The shared link (for its drop counter).
    pub fn link(&self) -> Rc<Link> {
        self.link.clone()
    }

    pub fn mac(&self) -> [u8; 6] {
        [0x02, 0, 0, 0, 0, self.side as u8 + 1]
    }

    fn incoming(&self) -> &RefCell<Dir> {
        &self.link.dirs[1 - self.side]
    }

    fn outgoing(&self) -> &RefCell<Dir> {
        &self.link.dirs[self.side]
    }

    /// Takes the next incoming frame, registering `cx`'s waker when there is none.
    fn take_rx(&self, cx: Option<&Context<'_>>) -> Option<Rx<'_>> {
        let mut d = self.incoming().borrow_mut();
        match d.queue.pop_front() {
            Some((idx, len)) => Some(Rx {
                end: self,
                idx,
                len,
            }),
            None => {
                if let Some(cx) = cx {
                    d.rx_waker = Some(cx.waker().clone());
                }
                None
            }
        }
    }

    /// Whether a TX buffer is free, registering `cx`'s waker when none is.
    fn tx_ready(&self, cx: Option<&Context<'_>>) -> bool {
        let mut d = self.outgoing().borrow_mut();
        if d.free.is_empty() {
            if let Some(cx) = cx {
                d.tx_waker = Some(cx.waker().clone());
            }
            false
        } else {
            true
        }
    }

    fn tx(&self) -> Tx<'_> {
        Tx { end: self }
    }
}

/// A received frame, lent in place.
pub struct Rx<'a> {
    end: &'a LinkEnd,
    idx: usize,
    len: usize,
}

impl Rx<'_> {
    fn consume<R>(self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let _dev = enter(self.end.device);
        let r = {
            let mut d = self.end.incoming().borrow_mut();
            let (idx, len) = (self.idx, self.len);
            let _stack = enter(self.end.stack);
            f(&mut d.frames[idx][..len])
        };
        r
        // `Drop` returns the buffer.
    }
}

impl Drop for Rx<'_> {
    fn drop(&mut self) {
        let _dev = enter(self.end.device);
        let mut d = self.end.incoming().borrow_mut();
        d.free.push(self.idx);
        if let Some(w) = d.tx_waker.take() {
            w.wake();
        }
    }
}

/// The right to send one frame.
pub struct Tx<'a> {
    end: &'a LinkEnd,
}

impl Tx<'_> {
    fn consume<R>(self, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let _dev = enter(self.end.device);
        let mut d = self.end.outgoing().borrow_mut();
        let Some(idx) = d.free.pop() else {
            // No buffer: the frame is built into a scratch buffer and dropped, counted.
            d.dropped += 1;
            drop(d);
            let mut scratch = vec![0u8; len];
            let _stack = enter(self.end.stack);
            return f(&mut scratch);
        };
        let len = len.min(FRAME);
        let r = {
            let _stack = enter(self.end.stack);
            f(&mut d.frames[idx][..len])
        };
        d.queue.push_back((idx, len));
        if let Some(w) = d.rx_waker.take() {
            w.wake();
        }
        r
    }
}

// ---- smoltcp 0.14 ----------------------------------------------------------------------------

/// A link end as a smoltcp 0.14 device (Ethernet, 1514-byte frames, software checksums).
pub struct SmolDev(pub LinkEnd);

pub struct SmolRx<'a>(Rx<'a>);
pub struct SmolTx<'a>(Tx<'a>);

impl smoltcp::phy::RxToken for SmolRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        self.0.consume(|b| f(b))
    }
}

impl smoltcp::phy::TxToken for SmolTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        self.0.consume(len, f)
    }
}

impl smoltcp::phy::Device for SmolDev {
    type RxToken<'a> = SmolRx<'a>;
    type TxToken<'a> = SmolTx<'a>;

    fn receive(&mut self, _now: smoltcp::time::Instant) -> Option<(SmolRx<'_>, SmolTx<'_>)> {
        let _dev = enter(self.0.device);
        let rx = self.0.take_rx(None)?;
        Some((SmolRx(rx), SmolTx(self.0.tx())))
    }

    fn transmit(&mut self, _now: smoltcp::time::Instant) -> Option<SmolTx<'_>> {
        let _dev = enter(self.0.device);
        self.0.tx_ready(None).then(|| SmolTx(self.0.tx()))
    }

    fn capabilities(&self) -> smoltcp::phy::DeviceCapabilities {
        let mut c = smoltcp::phy::DeviceCapabilities::default();
        c.medium = smoltcp::phy::Medium::Ethernet;
        c.max_transmission_unit = FRAME;
        c.checksum = smoltcp::phy::ChecksumCapabilities::default(); // compute and verify all
        c
    }
}

// ---- embassy-net-driver 0.2 ------------------------------------------------------------------

/// A link end as an embassy-net driver (Ethernet, 1514-byte frames, software checksums).
pub struct EmbDev(pub LinkEnd);

pub struct EmbRx<'a>(Rx<'a>);
pub struct EmbTx<'a>(Tx<'a>);

impl embassy_net_driver::RxToken for EmbRx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, f: F) -> R {
        self.0.consume(f)
    }
}

impl embassy_net_driver::TxToken for EmbTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        self.0.consume(len, f)
    }
}

impl embassy_net_driver::Driver for EmbDev {
    type RxToken<'a> = EmbRx<'a>;
    type TxToken<'a> = EmbTx<'a>;

    fn receive(&mut self, cx: &mut Context<'_>) -> Option<(EmbRx<'_>, EmbTx<'_>)> {
        let _dev = enter(self.0.device);
        if !self.0.tx_ready(Some(cx)) {
            return None;
        }
        let rx = self.0.take_rx(Some(cx))?;
        Some((EmbRx(rx), EmbTx(self.0.tx())))
    }

    fn transmit(&mut self, cx: &mut Context<'_>) -> Option<EmbTx<'_>> {
        let _dev = enter(self.0.device);
        self.0.tx_ready(Some(cx)).then(|| EmbTx(self.0.tx()))
    }

    fn link_state(&mut self, _cx: &mut Context<'_>) -> embassy_net_driver::LinkState {
        embassy_net_driver::LinkState::Up
    }

    fn capabilities(&self) -> embassy_net_driver::Capabilities {
        let mut c = embassy_net_driver::Capabilities::default();
        c.max_transmission_unit = FRAME;
        c // checksums: Checksum::Both by default (compute and verify all)
    }

    fn hardware_address(&self) -> embassy_net_driver::HardwareAddress {
        embassy_net_driver::HardwareAddress::Ethernet(self.0.mac())
    }
}
