//! The stack's [`Secret`] for a program on an operating system: 128 bits from the OS's random
//! source (the `getrandom` crate: the `getrandom` system call on Linux), drawn anew at every
//! start, as [`Config`](zcnet_stack::Config) requires.

use zcnet_stack::Secret;

/// A fresh secret from the OS's random source; `Err` (with the OS's reason) only when the OS
/// cannot give random bytes, in which case the stack must not be started.
pub fn from_os() -> Result<Secret, String> {
    let mut bytes = [0u8; Secret::LEN];
    getrandom::fill(&mut bytes).map_err(|e| format!("the OS random source failed: {e}"))?;
    Ok(Secret::new(bytes))
}
