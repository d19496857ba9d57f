#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| commhal_backend_ib_verbs::fuzzing::ib_connect(data));
