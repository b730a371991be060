#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| libroute_fuzz::snapshot::run(data));
