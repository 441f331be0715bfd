//! The crate's logging macros: `trace!`, `debug!`, `info!`, `warn!`, `error!` and `event!`.
//!
//! * Feature `log`: the level macros are the `log` crate's, with the calling module as target
//!   unless the call names one (`debug!(target: "zcnet_stack::tcp", ...)`).
//! * Feature `defmt`: they are `defmt`'s (for embedded targets; the format strings here use only
//!   `{}`, which both crates accept, and arguments that implement both `Display` and
//!   `defmt::Format`; a `target:` is left out, `defmt` has none).
//! * Neither: they expand to an `if false` block around `format_args!`, so the arguments are
//!   still type-checked and count as used, and no code is generated for them.
//!
//! `event!(function(args))` calls `crate::events::function(args)` (the stack's events, where the
//! wording and the level of each message is decided) when a logging feature is on, and expands
//! to nothing, arguments not even evaluated, when none is. It is a statement.
//!
//! The two features are exclusive: a program logs through one of them.

// Not every level is used in every configuration.
#![allow(unused_macros)]

#[cfg(all(feature = "log", feature = "defmt"))]
compile_error!("zcnet-stack: the features `log` and `defmt` are exclusive; enable at most one");

#[cfg(feature = "log")]
macro_rules! log_at {
    ($level:ident, target: $target:expr, $($arg:tt)+) => {
        ::log::$level!(target: $target, $($arg)+)
    };
    ($level:ident, $($arg:tt)+) => {
        ::log::$level!($($arg)+)
    };
}

#[cfg(feature = "defmt")]
macro_rules! log_at {
    ($level:ident, target: $target:expr, $($arg:tt)+) => {{
        // `defmt` has no targets.
        let _ = $target;
        ::defmt::$level!($($arg)+)
    }};
    ($level:ident, $($arg:tt)+) => {
        ::defmt::$level!($($arg)+)
    };
}

#[cfg(not(any(feature = "log", feature = "defmt")))]
macro_rules! log_at {
    ($level:ident, target: $target:expr, $($arg:tt)+) => {
        log_at!($level, $($arg)+)
    };
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

macro_rules! event {
    ($function:ident($($arg:tt)*)) => {
        #[cfg(any(feature = "log", feature = "defmt"))]
        crate::events::$function($($arg)*);
    };
}
