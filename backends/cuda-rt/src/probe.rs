//! Cheap availability checks for backends' `probe()`; they never panic.

use commhal_hal::registry::Availability;

use crate::driver;
use crate::error::CudaError;

/// Can CUDA run here? Checks, in order: libcuda.so loads, `cuInit` succeeds, at least
/// one device exists. Reasons read "no CUDA driver (libcuda.so not found)" or
/// "no CUDA device: ...".
pub fn probe() -> Availability {
    match driver::device_count() {
        Ok(0) => Availability::Unavailable(
            "no CUDA device: the driver reports 0 devices (check CUDA_VISIBLE_DEVICES)".into(),
        ),
        Ok(_) => Availability::Available,
        Err(e @ CudaError::NoDriver) => Availability::Unavailable(e.to_string()),
        Err(e) => Availability::Unavailable(e.to_string()),
    }
}

/// Can NVRTC be loaded (after honouring `COMMHAL_NVRTC_DIR`)?
pub fn nvrtc_available() -> bool {
    crate::nvrtc::loader::ensure_loaded().is_ok()
}
