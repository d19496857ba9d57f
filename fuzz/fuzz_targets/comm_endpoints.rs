#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| commhal_algorithms::fuzzing::comm_endpoints(data));
