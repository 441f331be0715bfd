//! The wheel against a reference model (a `BTreeMap`) on 10,000 seeded random sequences of
//! insert / cancel / reset / advance, with ties, cascades, past and far deadlines.

use core::ptr;
use core::task::{RawWaker, RawWakerVTable, Waker};
use std::boxed::Box;
use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::vec::Vec;

use crate::time::wheel::{Entry, Place, Wheel, MAX_AHEAD};

/// xorshift64*: small, seeded, good enough to drive a model test.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn place(e: &Entry) -> Place {
    // SAFETY: single-threaded test; the wheel is not being modified concurrently.
    unsafe { (*e.state().as_ptr()).place }
}

static ID_VTABLE: RawWakerVTable = RawWakerVTable::new(
    |data| RawWaker::new(data, &ID_VTABLE),
    |_| {},
    |_| {},
    |_| {},
);

/// A waker that does nothing but carry an entry's id in its data pointer.
fn id_waker(id: usize) -> Waker {
    // SAFETY: the vtable never dereferences the data pointer.
    unsafe { Waker::from_raw(RawWaker::new(ptr::without_provenance(id), &ID_VTABLE)) }
}

/// Fires everything due at `now` and returns the ids in firing order.
fn advance(wheel: &mut Wheel, now: u64) -> Vec<usize> {
    wheel.advance(now);
    let mut fired = Vec::new();
    while let Some(w) = wheel.take_pending() {
        fired.push(w.expect("every entry has a waker").data() as usize);
    }
    fired
}

fn deadline_for(rng: &mut Rng, now: u64) -> u64 {
    match rng.next() % 10 {
        0 => now.saturating_sub(rng.next() % 100), // past (or now)
        1 => now + 1 + rng.next() % 4,             // imminent: ties likely
        2 | 3 => now + rng.next() % 64,            // level 0
        4 | 5 => now + rng.next() % 4096,          // level 1
        6 => now + rng.next() % (1 << 18),         // levels 2-3
        7 => now + rng.next() % (1 << 30),         // levels 4-5
        8 => now + MAX_AHEAD + rng.next() % (1 << 40), // beyond the wheel: parked
        _ => now + (rng.next() % 8) * 64,          // slot boundaries
    }
}

fn run_sequence(seed: u64, ops: usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut wheel = Wheel::new();
    let n_entries = 1 + (rng.next() % 24) as usize;
    let entries: Vec<Pin<Box<Entry>>> = (0..n_entries).map(|_| Box::pin(Entry::new())).collect();
    // Model: id -> deadline for armed entries.
    let mut model: BTreeMap<usize, u64> = BTreeMap::new();
    let mut now: u64 = rng.next() % 10_000;
    wheel.advance(now);

    for step in 0..ops {
        let id = (rng.next() % n_entries as u64) as usize;
        let e = entries[id].state();
        match rng.next() % 8 {
            0..=2 => {
                // insert (or reset: cancel then insert)
                // SAFETY: the entry is pinned and outlives the wheel use; single-threaded.
                unsafe { wheel.remove(e) };
                model.remove(&id);
                let d = deadline_for(&mut rng, now);
                // SAFETY: as above.
                unsafe {
                    (*e.as_ptr()).waker = Some(id_waker(id));
                    wheel.insert(e, d);
                }
                model.insert(id, d);
            }
            3 => {
                // cancel
                // SAFETY: as above.
                unsafe { wheel.remove(e) };
                model.remove(&id);
            }
            _ => {
                // advance by a random amount, sometimes exactly to the next expiration
                let target = if rng.next().is_multiple_of(3) {
                    wheel.next_expiration().unwrap_or(now + 1).max(now)
                } else {
                    now + match rng.next() % 4 {
                        0 => rng.next() % 3,
                        1 => rng.next() % 70,
                        2 => rng.next() % 5000,
                        _ => rng.next() % (1 << 22),
                    }
                };
                let before = now;
                now = target;
                let fired = advance(&mut wheel, now);
                let expect: BTreeSet<usize> = model
                    .iter()
                    .filter(|(_, &d)| d <= now)
                    .map(|(&i, _)| i)
                    .collect();
                let got: BTreeSet<usize> = fired.iter().copied().collect();
                assert_eq!(
                    got, expect,
                    "seed {seed} step {step}: fired set at tick {now}"
                );
                assert_eq!(got.len(), fired.len(), "seed {seed}: fired once");
                // Entries that came due during this advance fire in deadline order (those already
                // due at insertion fire at once, in insertion order).
                let ds: Vec<u64> = fired
                    .iter()
                    .map(|i| model[i])
                    .filter(|&d| d > before)
                    .collect();
                assert!(
                    ds.windows(2).all(|w| w[0] <= w[1]),
                    "seed {seed} step {step}: fired out of order {ds:?}"
                );
                for i in &fired {
                    model.remove(i);
                }
            }
        }
        assert_eq!(
            wheel.len(),
            model.len(),
            "seed {seed} step {step}: entry count"
        );
        // next_expiration never overshoots the earliest deadline, and is None only when empty.
        match (wheel.next_expiration(), model.values().min()) {
            (None, None) => {}
            (Some(t), Some(&d)) => {
                if t > d.max(wheel.elapsed()) {
                    for (i, dd) in &model {
                        std::eprintln!("id {i} deadline {dd} place {:?}", place(&entries[*i]));
                    }
                    panic!(
                        "seed {seed} step {step}: next {t} after earliest deadline {d}, elapsed {}",
                        wheel.elapsed()
                    );
                }
            }
            (a, b) => panic!("seed {seed} step {step}: next {a:?} vs model {b:?}"),
        }
    }
    // Drain: everything left fires by the time the last deadline passes.
    while let Some(&last) = model.values().max() {
        now = now.max(last);
        let fired = advance(&mut wheel, now);
        for i in &fired {
            model.remove(i);
        }
        assert!(model.values().all(|&d| d > now), "seed {seed}: drained");
    }
    assert_eq!(wheel.len(), 0);
}

#[test]
fn wheel_matches_the_model_on_10k_sequences() {
    for seed in 0..10_000 {
        run_sequence(seed, 200);
    }
}

#[test]
fn level_selection_and_next_expiration_basics() {
    let mut wheel = Wheel::new();
    let e = Box::pin(Entry::new());
    // SAFETY: pinned entry, single-threaded.
    unsafe {
        (*e.state().as_ptr()).waker = Some(id_waker(0));
        wheel.insert(e.state(), 100);
    }
    assert_eq!(place(&e), Place::Wheel { level: 1, slot: 1 });
    // Level 1 slot 1 starts at tick 64, but the next expiration is the deadline itself: a
    // sleeping core is not woken at 64 just to cascade the entry.
    assert_eq!(wheel.next_expiration(), Some(100));
    wheel.advance(64);
    assert_eq!(place(&e), Place::Wheel { level: 0, slot: 36 });
    assert_eq!(wheel.next_expiration(), Some(100));
    wheel.advance(99);
    assert_eq!(place(&e), Place::Wheel { level: 0, slot: 36 });
    wheel.advance(100);
    assert_eq!(place(&e), Place::Pending);
    assert!(wheel.take_pending().is_some());
    assert_eq!(place(&e), Place::Fired);
    assert_eq!(wheel.next_expiration(), None);
}
