//! `buffer_leases`: see `zcnet_fuzz::leases` (tests/fuzz/src/) for what it runs and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zcnet_fuzz::leases::run(data));
