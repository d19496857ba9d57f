#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| commhal_backend_cuda_nvlink::fuzzing::nvlink_export_header(data));
