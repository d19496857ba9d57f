#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| commhal_backend_host_emu::fuzzing::shm_export_header(data));
