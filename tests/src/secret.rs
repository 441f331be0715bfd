//! Stack secrets for tests: [`seeded`] for the in-memory tests, which want runs that repeat,
//! and [`from_os`] for stacks that talk to a real network (a namespace's Linux stack, QEMU).

use zcnet_stack::Secret;

/// A secret made from `seed`, the same for the same seed: for tests over the in-memory wire,
/// whose runs must repeat. Never for a stack on a real network.
pub fn seeded(seed: u64) -> Secret {
    let mut b = [0u8; Secret::LEN];
    b[..8].copy_from_slice(&seed.to_le_bytes());
    b[8..].copy_from_slice(&(!seed).rotate_left(29).to_le_bytes());
    Secret::new(b)
}

/// A secret from the operating system's random source (the `getrandom` system call).
///
/// # Panics
///
/// If the OS has no random bytes to give (the test cannot run then).
pub fn from_os() -> Secret {
    let mut b = [0u8; Secret::LEN];
    getrandom::fill(&mut b).expect("the OS random source");
    Secret::new(b)
}
