//! The `buffer_leases` target: any sequence of frame-pool operations a safe caller can
//! express, over a small pool, with the pool audited after each one and every slot back at
//! the end.
//!
//! Leases are held in vectors (posted RX slots, received frames, TX frames, frames in flight)
//! and picked by index; each operation is one of: post an RX slot, complete it (whole or a
//! range, possibly too long), lend a received frame to the application, advance / truncate
//! it, drop it; allocate a TX frame, set its headroom, append, push a header, set its length,
//! write into it, hand it to the device, loop it back as a received frame, drop it. After
//! every operation [`FramePool::audit`] passes and the occupancy matches what the vectors
//! hold, state by state; at the end everything is dropped and every slot is free.

use std::sync::OnceLock;

use zcnet_buffer::{FramePool, InFlight, PoolConfig, PostedSlot, RxFrame, TxFrame};

use crate::input::Reader;

/// Slots in the pool.
pub const SLOTS: usize = 8;
/// Operations per input at most.
pub const MAX_OPS: usize = 256;

fn pool() -> &'static FramePool {
    static POOL: OnceLock<&'static FramePool> = OnceLock::new();
    POOL.get_or_init(|| FramePool::leak(PoolConfig::new(SLOTS)).expect("pool"))
}

#[derive(Default)]
struct Leases {
    posted: Vec<PostedSlot>,
    rx: Vec<RxFrame>,
    tx: Vec<TxFrame>,
    device: Vec<InFlight>,
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
    fn check(&self, pool: &FramePool) {
        let occ = pool.audit().expect("pool audit");
        let lent = self.rx.iter().filter(|f| f.is_lent()).count();
        assert_eq!(occ.posted, self.posted.len(), "{occ:?}");
        assert_eq!(occ.lent, lent, "{occ:?}");
        assert_eq!(occ.stack, self.rx.len() - lent, "{occ:?}");
        assert_eq!(occ.tx, self.tx.len(), "{occ:?}");
        assert_eq!(occ.device, self.device.len(), "{occ:?}");
        assert_eq!(occ.total(), SLOTS, "{occ:?}");
        for f in &self.rx {
            assert!(f.offset_in_slot() + f.len() <= pool.slot_size());
        }
        for f in &self.tx {
            assert_eq!(f.len() + f.tailroom(), f.capacity());
            assert_eq!(f.headroom() + f.capacity(), pool.slot_size());
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
        match r.u8() % 16 {
            0 => l.posted.extend(pool.try_alloc_rx()),
            1 => {
                if let Some(s) = pick(&mut l.posted, &mut r) {
                    let n = usize::from(r.u16());
                    if let Ok(f) = s.complete(n) {
                        l.rx.push(f);
                    }
                }
            }
            2 => {
                if let Some(s) = pick(&mut l.posted, &mut r) {
                    let (off, n) = (usize::from(r.u16()), usize::from(r.u16()));
                    if let Some(mut s) = Some(s) {
                        let fill = r.u8();
                        s.buffer_mut().iter_mut().take(64).for_each(|b| *b = fill);
                        if let Ok(f) = s.complete_range(off, n) {
                            l.rx.push(f);
                        }
                    }
                }
            }
            3 => {
                if let Some(f) = pick_mut(&mut l.rx, &mut r) {
                    f.lend_to_app();
                }
            }
            4 => {
                if let Some(f) = pick_mut(&mut l.rx, &mut r) {
                    let n = usize::from(r.u16());
                    let _ = if n & 1 == 0 {
                        f.advance(n >> 1)
                    } else {
                        f.truncate(n >> 1)
                    };
                }
            }
            5 => drop(pick(&mut l.rx, &mut r)),
            6 => drop(pick(&mut l.posted, &mut r)),
            7 => l.tx.extend(pool.try_alloc_tx()),
            8 => {
                if let Some(f) = pick_mut(&mut l.tx, &mut r) {
                    let n = usize::from(r.u16());
                    let fill = r.u8();
                    if let Ok(b) = f.append(n) {
                        b.fill(fill);
                    }
                }
            }
            9 => {
                if let Some(f) = pick_mut(&mut l.tx, &mut r) {
                    let n = usize::from(r.u16());
                    if let Ok(b) = f.push_header(n) {
                        b.fill(0xee);
                    }
                }
            }
            10 => {
                if let Some(f) = pick_mut(&mut l.tx, &mut r) {
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
                if let Some(f) = pick(&mut l.tx, &mut r) {
                    let len = f.len();
                    let d = f.into_device();
                    assert_eq!(d.len(), len);
                    l.device.push(d);
                }
            }
            12 => {
                if let Some(d) = pick(&mut l.device, &mut r) {
                    let bytes = d.to_vec();
                    let f = d.loop_back();
                    assert_eq!(&f[..], &bytes[..], "loop_back shows the same bytes");
                    l.rx.push(f);
                }
            }
            13 => drop(pick(&mut l.device, &mut r)),
            14 => drop(pick(&mut l.tx, &mut r)),
            _ => {
                // Everything of one kind at once.
                match r.u8() % 4 {
                    0 => l.posted.clear(),
                    1 => l.rx.clear(),
                    2 => l.tx.clear(),
                    _ => l.device.clear(),
                }
            }
        }
        l.check(pool);
    }
    drop(l);
    let occ = pool.audit().expect("pool audit at the end");
    assert_eq!(occ.free, SLOTS, "every slot back at the end: {occ:?}");
}
