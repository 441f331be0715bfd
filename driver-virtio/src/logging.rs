//! The crate's logging macros: `trace!`, `debug!`, `info!`, `warn!`, `error!`.
//!
//! * Feature `log`: the `log` crate's macros, with the calling module as target.
//! * Feature `defmt`: `defmt`'s (format strings use only `{}`, which both accept).
//! * Neither: an `if false` block around `format_args!`: the arguments are type-checked and
//!   count as used, and no code is generated.
//!
//! The features are exclusive. Nothing here may be called from an interrupt handler (a logger
//! may take locks): `VirtioIrq`'s handlers log nothing.

// Not every level is used in every configuration.
#![allow(unused_macros)]

#[cfg(all(feature = "log", feature = "defmt"))]
compile_error!("zcnet-virtio: the features `log` and `defmt` are exclusive; enable at most one");

#[cfg(feature = "log")]
macro_rules! log_at {
    ($level:ident, $($arg:tt)+) => {
        ::log::$level!($($arg)+)
    };
}

#[cfg(feature = "defmt")]
macro_rules! log_at {
    ($level:ident, $($arg:tt)+) => {
        ::defmt::$level!($($arg)+)
    };
}

#[cfg(not(any(feature = "log", feature = "defmt")))]
macro_rules! log_at {
    ($level:ident, $($arg:tt)+) => {{
        if false {
            let _ = ::core::format_args!($($arg)+);
        }
    }};
}

macro_rules! trace {
    ($($arg:tt)+) => { log_at!(trace, $($arg)+) };
}

macro_rules! debug {
    ($($arg:tt)+) => { log_at!(debug, $($arg)+) };
}

macro_rules! info {
    ($($arg:tt)+) => { log_at!(info, $($arg)+) };
}

macro_rules! warn {
    ($($arg:tt)+) => { log_at!(warn, $($arg)+) };
}

macro_rules! error {
    ($($arg:tt)+) => { log_at!(error, $($arg)+) };
}
