//! `stack_ingress`: see `zcnet_fuzz::ingress` (tests/fuzz/src/) for what it runs and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zcnet_fuzz::ingress::run(data));
