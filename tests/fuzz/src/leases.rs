//! The `buffer_leases` target: any sequence of frame-pool operations a safe caller can
//! express, over a small pool, with the pool audited after each one and every slot back at
//! the end.
//!
//! Leases are held in vectors (posted RX slots, received frames, TX frames, frames in flight,
//! retained frames) and picked by index; each operation is one of: post an RX slot, complete
//! it (whole or a range, possibly too long), lend a received frame to the application,
//! advance / truncate it, append to it, write it, drop it; allocate a TX frame, set its
//! headroom, append, push a header, set its length, write into it, hand it to the device,
//! loop it back as a received frame, drop it; retain a TX frame (what a TCP send queue does),
//! send a retained frame again, append to it, advance it, drop it from the socket's side.
//!
//! After every operation [`FramePool::audit`] passes and the occupancy matches what the
//! vectors hold, state by state: a retained frame is SENT while the device side (a retained
//! TX frame or in-flight lease of the same slot) has it and RETAINED otherwise, and a device
//! lease of a slot whose retained frame was dropped is DEVICE. A retained frame is idle
//! exactly when no device lease has its slot, shows its bytes only then, and each send shows
//! the bytes it holds. When the device lets go of a slot its retained frame waited for, the
//! pool's retained waker is woken. At the end everything is dropped and every slot is free.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

use zcnet_buffer::{
    FrameError, FramePool, InFlight, PoolConfig, PostedSlot, RetainedFrame, RxFrame, TxFrame,
};

use crate::input::Reader;

/// Slots in the pool.
pub const SLOTS: usize = 8;
/// Operations per input at most.
pub const MAX_OPS: usize = 256;

fn pool() -> &'static FramePool {
    static POOL: OnceLock<&'static FramePool> = OnceLock::new();
    POOL.get_or_init(|| FramePool::leak(PoolConfig::new(SLOTS)).expect("pool"))
}

/// A waker that records that it was woken.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Leases {
    posted: Vec<PostedSlot>,
    rx: Vec<RxFrame>,
    /// TX frames: fresh ones and retained ones the device side holds (sent, not yet handed
    /// to the device).
    tx: Vec<TxFrame>,
    device: Vec<InFlight>,
    /// The socket side of retained slots.
    retained: Vec<RetainedFrame>,
    /// The slot a retained frame waited for (its send was `Pending`) and the waker it
    /// registered in the pool's retained cell.
    waiting: Option<(usize, Arc<Flag>)>,
}

fn pick<T>(v: &mut Vec<T>, r: &mut Reader<'_>) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    let i = usize::from(r.u8()) % v.len();
    Some(v.swap_remove(i))
}

fn pick_mut<'v, T>(v: &'v mut [T], r: &mut Reader<'_>) -> Option<&'v mut T> {
    if v.is_empty() {
        return None;
    }
    let i = usize::from(r.u8()) % v.len();
    v.get_mut(i)
}

impl Leases {
    /// Slots a device-side lease of a retained frame holds (retained TX frames and in-flight
    /// leases); at most one lease per slot.
    fn device_side(&self) -> HashSet<usize> {
        let mut slots = HashSet::new();
        let tx = self.tx.iter().filter(|f| f.is_retained());
        for s in tx.map(TxFrame::slot_index).chain(
            self.device
                .iter()
                .filter(|d| d.is_retained())
                .map(InFlight::slot_index),
        ) {
            assert!(slots.insert(s), "two device leases of retained slot {s}");
        }
        slots
    }

    /// The device side let go of a lease of `slot` (`retained`: of a retained frame): the
    /// frame waiting for that slot, if any, must have been woken when its retained frame still
    /// holds the slot.
    fn device_released(&mut self, (slot, retained): (usize, bool)) {
        if !retained {
            return;
        }
        let held = self.retained.iter().any(|f| f.slot_index() == slot);
        if let Some((s, flag)) = &self.waiting {
            if held && *s == slot {
                assert!(flag.0.load(Ordering::SeqCst), "retained waker woken");
                self.waiting = None;
            }
        }
    }

    fn check(&self, pool: &FramePool) {
        let occ = pool.audit().expect("pool audit");
        let device_side = self.device_side();
        let socket_side: HashSet<usize> = self
            .retained
            .iter()
            .map(RetainedFrame::slot_index)
            .collect();
        assert_eq!(
            socket_side.len(),
            self.retained.len(),
            "one retained frame per slot"
        );
        let sent = socket_side.intersection(&device_side).count();
        let orphaned = device_side.difference(&socket_side).count();
        let lent = self.rx.iter().filter(|f| f.is_lent()).count();
        let fresh_tx = self.tx.iter().filter(|f| !f.is_retained()).count();
        let fresh_device = self.device.iter().filter(|d| !d.is_retained()).count();
        assert_eq!(occ.posted, self.posted.len(), "{occ:?}");
        assert_eq!(occ.lent, lent, "{occ:?}");
        assert_eq!(occ.stack, self.rx.len() - lent, "{occ:?}");
        assert_eq!(occ.tx, fresh_tx, "{occ:?}");
        assert_eq!(occ.device, fresh_device + orphaned, "{occ:?}");
        assert_eq!(occ.sent, sent, "{occ:?}");
        assert_eq!(occ.retained, self.retained.len() - sent, "{occ:?}");
        assert_eq!(occ.total(), SLOTS, "{occ:?}");
        for f in &self.rx {
            assert!(f.offset_in_slot() + f.len() <= pool.slot_size());
        }
        for f in &self.tx {
            assert_eq!(f.len() + f.tailroom(), f.capacity());
            assert_eq!(f.headroom() + f.capacity(), pool.slot_size());
        }
        for f in &self.retained {
            let idle = !device_side.contains(&f.slot_index());
            assert_eq!(f.is_idle(), idle, "slot {}", f.slot_index());
            assert_eq!(f.data().map(<[u8]>::len), idle.then_some(f.len()));
            if idle {
                assert_eq!(f.headroom() + f.len() + f.tailroom(), pool.slot_size());
            } else {
                assert_eq!(f.tailroom(), 0);
            }
        }
    }

    /// One operation.
    fn op(&mut self, pool: &'static FramePool, r: &mut Reader<'_>) {
        match r.u8() % 24 {
            0 => self.posted.extend(pool.try_alloc_rx()),
            1 => {
                if let Some(s) = pick(&mut self.posted, r) {
                    let n = usize::from(r.u16());
                    if let Ok(f) = s.complete(n) {
                        self.rx.push(f);
                    }
                }
            }
            2 => {
                if let Some(mut s) = pick(&mut self.posted, r) {
                    let (off, n) = (usize::from(r.u16()), usize::from(r.u16()));
                    let fill = r.u8();
                    s.buffer_mut().iter_mut().take(64).for_each(|b| *b = fill);
                    if let Ok(f) = s.complete_range(off, n) {
                        self.rx.push(f);
                    }
                }
            }
            3 => {
                if let Some(f) = pick_mut(&mut self.rx, r) {
                    f.lend_to_app();
                }
            }
            4 => {
                if let Some(f) = pick_mut(&mut self.rx, r) {
                    let n = usize::from(r.u16());
                    let _ = if n & 1 == 0 {
                        f.advance(n >> 1)
                    } else {
                        f.truncate(n >> 1)
                    };
                }
            }
            5 => drop(pick(&mut self.rx, r)),
            6 => drop(pick(&mut self.posted, r)),
            7 => self.tx.extend(pool.try_alloc_tx()),
            8 => {
                if let Some(f) = pick_mut(&mut self.tx, r) {
                    let n = usize::from(r.u16());
                    let fill = r.u8();
                    if let Ok(b) = f.append(n) {
                        b.fill(fill);
                    }
                }
            }
            9 => {
                if let Some(f) = pick_mut(&mut self.tx, r) {
                    let n = usize::from(r.u16());
                    if let Ok(b) = f.push_header(n) {
                        b.fill(0xee);
                    }
                }
            }
            10 => {
                if let Some(f) = pick_mut(&mut self.tx, r) {
                    let n = usize::from(r.u16());
                    let _ = if n & 1 == 0 {
                        f.set_headroom(n >> 1)
                    } else {
                        f.set_len(n >> 1)
                    };
                    let cap = f.buffer_mut().len();
                    assert_eq!(cap, f.capacity());
                }
            }
            11 => {
                if let Some(f) = pick(&mut self.tx, r) {
                    let (len, retained) = (f.len(), f.is_retained());
                    let d = f.into_device();
                    assert_eq!((d.len(), d.is_retained()), (len, retained));
                    self.device.push(d);
                }
            }
            12 => {
                if let Some(d) = pick(&mut self.device, r) {
                    let bytes = d.to_vec();
                    match d.loop_back() {
                        Ok(f) => {
                            assert_eq!(&f[..], &bytes[..], "loop_back shows the same bytes");
                            self.rx.push(f);
                        }
                        Err(d) => {
                            assert!(d.is_retained(), "only a retained frame is refused");
                            self.device.push(d);
                        }
                    }
                }
            }
            13 => {
                if let Some(d) = pick(&mut self.device, r) {
                    let lease = (d.slot_index(), d.is_retained());
                    drop(d);
                    self.device_released(lease);
                }
            }
            14 => {
                if let Some(f) = pick(&mut self.tx, r) {
                    let lease = (f.slot_index(), f.is_retained());
                    drop(f);
                    self.device_released(lease);
                }
            }
            15 => {
                // Everything of one kind at once.
                match r.u8() % 5 {
                    0 => self.posted.clear(),
                    1 => self.rx.clear(),
                    2 => {
                        let leases: Vec<_> = self
                            .tx
                            .drain(..)
                            .map(|f| (f.slot_index(), f.is_retained()))
                            .collect();
                        leases.into_iter().for_each(|l| self.device_released(l));
                    }
                    3 => {
                        let leases: Vec<_> = self
                            .device
                            .drain(..)
                            .map(|d| (d.slot_index(), d.is_retained()))
                            .collect();
                        leases.into_iter().for_each(|l| self.device_released(l));
                    }
                    _ => {
                        self.retained.clear();
                        self.waiting = None;
                    }
                }
            }
            16 => {
                // A socket keeps a TX frame until acknowledged.
                if let Some(f) = pick(&mut self.tx, r) {
                    let (len, was_retained) = (f.len(), f.is_retained());
                    match f.retain() {
                        Ok(k) => {
                            assert!(!was_retained);
                            assert_eq!(k.len(), len);
                            self.retained.push(k);
                        }
                        Err(f) => {
                            assert!(was_retained, "a fresh frame can be retained");
                            self.tx.push(f);
                        }
                    }
                }
            }
            17 => {
                // Send a retained frame (again).
                let Some(i) =
                    (!self.retained.is_empty()).then(|| usize::from(r.u8()) % self.retained.len())
                else {
                    return;
                };
                let flag = Arc::new(Flag(AtomicBool::new(false)));
                let waker = Waker::from(flag.clone());
                let k = &mut self.retained[i];
                let before = k.data().map(<[u8]>::to_vec);
                match k.poll_send(&mut Context::from_waker(&waker)) {
                    Poll::Ready(f) => {
                        let before = before.expect("sent only when idle");
                        assert!(f.is_retained());
                        assert_eq!(&f[..], &before[..], "a send shows the frame's bytes");
                        assert_eq!(f.headroom(), k.headroom());
                        self.tx.push(f);
                    }
                    Poll::Pending => {
                        assert!(before.is_none(), "an idle frame is sent at once");
                        self.waiting = Some((k.slot_index(), flag));
                    }
                }
            }
            18 => {
                if let Some(k) = pick_mut(&mut self.retained, r) {
                    let n = usize::from(r.u16());
                    let fill = r.u8();
                    let (len, room) = (k.len(), k.tailroom());
                    match k.append(n) {
                        Ok(b) => {
                            assert!(n <= room);
                            b.fill(fill);
                            // Nothing appended (n == 0) while the device has the slot.
                            if let Some(data) = k.data() {
                                assert_eq!(data.len(), len + n);
                                assert!(data[len..].iter().all(|b| *b == fill));
                            } else {
                                assert_eq!(n, 0, "appended while the device has the slot");
                            }
                        }
                        Err(_) => assert!(n > room, "{n} bytes fit in {room}"),
                    }
                }
            }
            19 => {
                if let Some(k) = pick_mut(&mut self.retained, r) {
                    let n = usize::from(r.u16());
                    let len = k.len();
                    k.advance(n);
                    assert_eq!(k.len(), len - n.min(len));
                }
            }
            20 => {
                // The socket side lets go (the peer acknowledged the frame, or the
                // connection ended).
                if let Some(k) = pick(&mut self.retained, r) {
                    if self
                        .waiting
                        .as_ref()
                        .is_some_and(|(s, _)| *s == k.slot_index())
                    {
                        self.waiting = None;
                    }
                }
            }
            21 => {
                if let Some(f) = pick_mut(&mut self.rx, r) {
                    let data = r.short(255);
                    let (len, room, lent) = (f.len(), f.tail_room(), f.is_lent());
                    match f.append_from(data) {
                        Ok(()) => {
                            assert!(!lent && data.len() <= room);
                            assert_eq!(&f[len..], data);
                        }
                        Err(FrameError::Lent) => assert!(lent),
                        Err(_) => assert!(!lent && data.len() > room),
                    }
                }
            }
            22 => {
                if let Some(f) = pick_mut(&mut self.rx, r) {
                    let fill = r.u8();
                    f.bytes_mut().fill(fill);
                    assert!(f.iter().all(|b| *b == fill));
                }
            }
            _ => {
                // A retained frame's bytes through its spare room, committed.
                if let Some(k) = pick_mut(&mut self.retained, r) {
                    let n = usize::from(r.u16());
                    let room = k.spare_mut().len();
                    assert_eq!(room, k.tailroom());
                    let w = n.min(room);
                    k.spare_mut()[..w].fill(0x5a);
                    assert_eq!(k.commit(n).is_ok(), n <= room);
                }
            }
        }
    }
}

/// Runs one input (the target's whole body).
pub fn run(data: &[u8]) {
    let pool = pool();
    let mut l = Leases::default();
    let mut r = Reader::new(data);
    for _ in 0..MAX_OPS {
        if r.is_empty() {
            break;
        }
        l.op(pool, &mut r);
        l.check(pool);
    }
    drop(l);
    let occ = pool.audit().expect("pool audit at the end");
    assert_eq!(occ.free, SLOTS, "every slot back at the end: {occ:?}");
}
