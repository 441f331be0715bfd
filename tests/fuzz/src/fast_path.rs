//! The `tcp_fast_path` target: the differential check of zcnet's TCP fast path
//! (`zcnet_stack::fuzzing::FastPathCheck`), fed any operations.

use std::sync::OnceLock;

use zcnet_stack::fuzzing::FastPathCheck;

/// The check's pools, made once per process and reused by every input.
static CHECK: OnceLock<FastPathCheck> = OnceLock::new();

/// `tcp_fast_path`: runs `data` as operations on two pairs of connections, one taking segments
/// on the fast path, one always through the full processing; panics (inside the stack) at the
/// first difference between them.
pub fn run(data: &[u8]) {
    CHECK.get_or_init(FastPathCheck::new).run(data);
}

/// The operations of a seed, as `(operation, argument)` pairs after the first byte (the buffer
/// sizes: 0 for 64 KiB each way, 1 for 4 KiB / 2 KiB, 2 for 1 KiB / 600 bytes). Operations
/// (`twin.rs` in the stack): even numbers act on the client, odd ones on the server; 0–3 write
/// (`argument` × 23 bytes), 4–5 read, 6–7 take a segment, 8–15 send, 16–23 deliver, 24–25
/// lose, 26–27 reorder, 28–29 duplicate, 30–31 forge from the last delivered segment, 32–33
/// close (argument < 2), 34–35 move the clock.
pub fn encode(sizes: u8, ops: &[(u8, u8)]) -> Vec<u8> {
    let mut v = vec![sizes];
    for &(op, arg) in ops {
        v.extend([op, arg]);
    }
    v
}
