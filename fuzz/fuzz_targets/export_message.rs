#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| commhal_hal::fuzzing::export_message(data));
