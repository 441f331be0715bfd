//! The crate's logging macros: `debug!`, `info!`, `warn!`, `error!`.
//!
//! With the feature `log` they are the `log` crate's macros, with the calling module as target.
//! Without it they expand to an `if false` block around `format_args!`: the arguments are
//! type-checked and count as used, and no code is generated. (No `defmt`: the driver runs on
//! Linux, where `log` is what programs collect.)

// Not every level is used.
#![allow(unused_macros)]

#[cfg(feature = "log")]
macro_rules! log_at {
    ($level:ident, $($arg:tt)+) => {
        ::log::$level!($($arg)+)
    };
}

#[cfg(not(feature = "log"))]
macro_rules! log_at {
    ($level:ident, $($arg:tt)+) => {{
        if false {
            let _ = ::std::format_args!($($arg)+);
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
