//! The CUDA driver as this crate (and cuda-dma) reports it: `commhal-cuda-rt`'s calls
//! (device count, contexts, peer access, symbol checks) with their errors turned into
//! [`HalError`]s under the calling backend's name. No driver call is made here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use commhal_cuda_rt::{Context, CudaError};
use commhal_hal::{HalError, Result};

/// Turn a cuda-rt error into a [`HalError`] reported under `backend`.
pub fn to_hal(backend: &str, e: CudaError) -> HalError {
    e.into_hal(backend)
}

/// Load and initialise the driver (cached), as a [`HalError`].
pub fn ensure_driver(backend: &str) -> Result<()> {
    commhal_cuda_rt::driver::ensure_init().map_err(|e| to_hal(backend, e))
}

/// Number of devices this process sees.
pub fn device_count(backend: &str) -> Result<u32> {
    commhal_cuda_rt::driver::device_count().map_err(|e| to_hal(backend, e))
}

/// The primary context of device `ordinal`, shared by every user in this process.
pub fn context(backend: &str, ordinal: u32) -> Result<Arc<Context>> {
    static CACHE: OnceLock<Mutex<HashMap<u32, Arc<Context>>>> = OnceLock::new();
    let mut m = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(c) = m.get(&ordinal) {
        return Ok(c.clone());
    }
    let c = Context::new(ordinal).map_err(|e| to_hal(backend, e))?;
    m.insert(ordinal, c.clone());
    Ok(c)
}

/// `cuDeviceCanAccessPeer(a, b)`: can device `a` address device `b`'s memory?
/// True for `a == b`.
pub fn can_access_peer(backend: &str, a: u32, b: u32) -> Result<bool> {
    commhal_cuda_rt::peer::can_access_peer(a, b).map_err(|e| to_hal(backend, e))
}

/// Let `local`'s device address `owner`'s `cuMemAlloc` memory
/// (`cuCtxEnablePeerAccess`); already enabled is fine. Devices without a peer path
/// are [`HalError::Unsupported`].
pub fn enable_peer_access(backend: &str, local: &Context, owner: &Context) -> Result<()> {
    if local.ordinal() == owner.ordinal() {
        return Ok(());
    }
    if !can_access_peer(backend, local.ordinal(), owner.ordinal())? {
        return Err(HalError::unsupported(
            backend,
            format!(
                "peer access from device {} to device {}: cuDeviceCanAccessPeer says no (no NVLink/P2P path; check `nvidia-smi topo -m`)",
                local.ordinal(),
                owner.ordinal()
            ),
        ));
    }
    commhal_cuda_rt::peer::enable_peer_access(local, owner).map_err(|e| to_hal(backend, e))
}

/// Does the loaded driver export `name`? (cuda-rt's check, re-exported.)
pub use commhal_cuda_rt::driver::symbol_present;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_errors_map_to_unavailable() {
        match to_hal("cuda-nvlink", CudaError::NoDriver) {
            HalError::Unavailable { backend, reason } => {
                assert_eq!(backend, "cuda-nvlink");
                assert!(reason.contains("libcuda.so not found"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            to_hal("x", CudaError::Invalid("bad".into())),
            HalError::InvalidArgument(_)
        ));
    }

    #[test]
    fn call_errors_name_the_call_and_backend() {
        let e = commhal_cuda_rt::driver::check(
            cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            "cuFoo",
            || "doing bar".into(),
        )
        .map_err(|e| to_hal("cuda-nvlink", e))
        .unwrap_err()
        .to_string();
        assert!(e.contains("cuFoo"), "{e}");
        assert!(e.contains("CUDA_ERROR_INVALID_VALUE"), "{e}");
        assert!(e.contains("doing bar"), "{e}");
        assert!(e.contains("cuda-nvlink"), "{e}");
    }

    #[test]
    fn missing_symbols_are_reported_absent() {
        assert!(!symbol_present("cuThisFunctionDoesNotExist_v99"));
    }
}
