//! `http_parser`: see `zcnet_fuzz::parsers` (tests/fuzz/src/) for what it runs and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zcnet_fuzz::parsers::http(data));
