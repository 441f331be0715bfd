//! The stack's secret from the CPU's random number generator: 128 bits from RDRAND, drawn at
//! every boot.
//!
//! zcnet keys its sequence numbers, ports and IPv4 identifications with a secret the kernel
//! must supply (`zcnet_stack::Secret`); a guessable one (the TSC, a build constant) would make
//! them predictable to anyone on the network. This kernel takes it from RDRAND, which CPUID
//! leaf 1 announces in ECX bit 30 (Intel SDM vol. 2, "RDRAND"); QEMU's TCG emulates it with
//! `-cpu max` (the command line `run.sh` and the tests use), whose values come from the
//! host's random source. A machine without RDRAND stops the boot with a message: a kernel on
//! other hardware would use its platform's source instead (virtio-rng, a TPM, an SoC's RNG).

use core::arch::x86_64::{__cpuid, _rdrand64_step, CpuidResult};
use core::fmt;

use zcnet_stack::Secret;

/// Times RDRAND is asked for one value before giving up: Intel's DRNG software implementation
/// guide counts ten failures in a row as a broken generator, not a busy one.
const RETRIES: usize = 10;

/// Why there is no secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntropyError {
    /// The CPU does not have RDRAND (CPUID.01H:ECX bit 30 clear).
    NoRdrand,
    /// RDRAND failed [`RETRIES`] times in a row.
    RdrandFailed,
}

impl fmt::Display for EntropyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntropyError::NoRdrand => f.write_str(
                "the CPU has no RDRAND (CPUID.01H:ECX bit 30), the kernel's only random source \
                 for the stack's secret; under QEMU, run with `-cpu max`",
            ),
            EntropyError::RdrandFailed => {
                write!(f, "RDRAND gave no value in {RETRIES} tries in a row")
            }
        }
    }
}

/// Whether the CPU has RDRAND.
pub fn has_rdrand() -> bool {
    let CpuidResult { ecx, .. } = __cpuid(1);
    ecx & (1 << 30) != 0
}

/// 64 random bits from RDRAND, retried up to [`RETRIES`] times.
///
/// # Safety
///
/// The CPU must have RDRAND ([`has_rdrand`]).
#[target_feature(enable = "rdrand")]
unsafe fn rdrand64() -> Option<u64> {
    for _ in 0..RETRIES {
        let mut v = 0u64;
        // `_rdrand64_step` only needs the instruction, which this function's precondition
        // guarantees (and the target feature lets it be called here without `unsafe`).
        if _rdrand64_step(&mut v) == 1 {
            return Some(v);
        }
    }
    None
}

/// 64 bits from RDRAND, or why not.
pub fn random_u64() -> Result<u64, EntropyError> {
    if !has_rdrand() {
        return Err(EntropyError::NoRdrand);
    }
    // SAFETY: CPUID just said the CPU has RDRAND.
    unsafe { rdrand64() }.ok_or(EntropyError::RdrandFailed)
}

/// The stack's secret: two 64-bit values from RDRAND.
pub fn secret() -> Result<Secret, EntropyError> {
    let mut bytes = [0u8; Secret::LEN];
    for chunk in bytes.chunks_exact_mut(8) {
        chunk.copy_from_slice(&random_u64()?.to_le_bytes());
    }
    Ok(Secret::new(bytes))
}
