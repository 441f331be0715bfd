//! `tcp_fast_path`: see `zcnet_fuzz::fast_path` (tests/fuzz/src/) for what it runs and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zcnet_fuzz::fast_path::run(data));
