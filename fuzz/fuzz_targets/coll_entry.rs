#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| commhal_cuda_coll::fuzzing::coll_entry(data));
