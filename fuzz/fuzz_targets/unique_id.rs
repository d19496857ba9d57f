#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| commhal_hal::fuzzing::unique_id(data));
