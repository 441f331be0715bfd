//! The pool audit a test ends with: once its sockets are closed and dropped and the stack has
//! run, every slot is back.

use zcnet_buffer::{FramePool, Occupancy, SlotState};

/// TX slots a stack may keep when idle: its scratch frame and the spare for its next reply.
pub const IDLE_TX: usize = 2;

/// Audits `pool` at the end of a test and returns its occupancy. Panics unless the free list is
/// consistent ([`FramePool::audit`]: no slot lost or listed twice) and every slot is back:
/// exactly `posted` POSTED in the driver's RX ring (0 for the in-memory wire, 1 for the TAP),
/// none held by the stack (STACK), the application (LENT) or the device (DEVICE), none kept by
/// a TCP socket (SENT, RETAINED), at most [`IDLE_TX`] TX, the rest FREE. The panic message
/// names the slots in each state that should be empty.
pub fn assert_slots_back(pool: &FramePool, posted: usize) -> Occupancy {
    let occ = pool
        .audit()
        .unwrap_or_else(|e| panic!("pool audit: {e:?} ({})", pool.occupancy()));
    let held = (occ.stack, occ.lent, occ.device, occ.sent, occ.retained);
    if held != (0, 0, 0, 0, 0) || occ.posted != posted || occ.tx > IDLE_TX {
        panic!(
            "slots not back: {occ} (expected posted={posted}, tx<={IDLE_TX}, no stack, lent, \
             device, sent or retained); held slots: {}",
            held_slots(pool)
        );
    }
    occ
}

/// Audits `pool` and panics unless every slot is free: nothing posted, nothing with a stack, a
/// device or the application (for a pool whose stack was shut down and whose driver was
/// dropped).
pub fn assert_all_free(pool: &FramePool) {
    let occ = assert_slots_back(pool, 0);
    assert_eq!(occ.free, pool.slot_count(), "{occ}");
}

/// The slots in the states [`assert_slots_back`] expects empty, by state: `state: [slot, ..]`.
fn held_slots(pool: &FramePool) -> String {
    let held = [
        SlotState::Stack,
        SlotState::Lent,
        SlotState::Device,
        SlotState::Sent,
        SlotState::Retained,
    ];
    let mut out = Vec::new();
    for state in held {
        let slots: Vec<usize> = (0..pool.slot_count())
            .filter(|&i| pool.slot_state(i) == Some(state))
            .collect();
        if !slots.is_empty() {
            out.push(format!("{}: {slots:?}", state.name()));
        }
    }
    out.join(", ")
}
