//! `classifier_neighbors`: see `zcnet_fuzz::neighbors` (tests/fuzz/src/) for what it runs and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zcnet_fuzz::neighbors::run(data));
