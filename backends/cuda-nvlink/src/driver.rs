//! Every driver call this crate (and cuda-dma) makes beyond `commhal-cuda-rt`: device
//! handles, peer access, legacy IPC handles, synchronous copies, and a check that a
//! driver symbol exists before cudarc is asked to load it (cudarc panics on a missing
//! symbol). Each `CUresult` is checked and turned into a [`HalError`] naming the call.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};

use commhal_cuda_rt::{Context, CudaError};
use commhal_hal::{HalError, Result};
use cudarc::driver::sys;

use crate::header::IPC_HANDLE_LEN;

/// Turn a cuda-rt error into a [`HalError`] reported under `backend`.
pub fn to_hal(backend: &str, e: CudaError) -> HalError {
    e.into_hal(backend)
}

/// `Ok` on `CUDA_SUCCESS`, else [`HalError::Backend`] naming the call, the CUresult and
/// what we were doing.
pub fn check(
    backend: &str,
    r: sys::CUresult,
    call: &'static str,
    what: impl FnOnce() -> String,
) -> Result<()> {
    commhal_cuda_rt::driver::check(r, call, what).map_err(|e| to_hal(backend, e))
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

fn cu_device(backend: &str, ordinal: u32) -> Result<sys::CUdevice> {
    ensure_driver(backend)?;
    let mut d: sys::CUdevice = 0;
    // SAFETY: driver initialised; out-pointer valid. An out-of-range ordinal is an
    // error return, not undefined behaviour.
    let r = unsafe { sys::cuDeviceGet(&mut d, ordinal as c_int) };
    check(backend, r, "cuDeviceGet", || {
        format!("getting device {ordinal}")
    })?;
    Ok(d)
}

/// `cuDeviceCanAccessPeer(a, b)`: can device `a` address device `b`'s memory?
/// True for `a == b`.
pub fn can_access_peer(backend: &str, a: u32, b: u32) -> Result<bool> {
    if a == b {
        return Ok(true);
    }
    let (da, db) = (cu_device(backend, a)?, cu_device(backend, b)?);
    let mut v: c_int = 0;
    // SAFETY: both device handles valid; out-pointer valid.
    let r = unsafe { sys::cuDeviceCanAccessPeer(&mut v, da, db) };
    check(backend, r, "cuDeviceCanAccessPeer", || {
        format!("asking whether device {a} can access device {b}")
    })?;
    Ok(v != 0)
}

/// The raw `CUcontext` of `ctx` (binds it to the calling thread).
pub fn raw_context(backend: &str, ctx: &Context) -> Result<sys::CUcontext> {
    ctx.bind().map_err(|e| to_hal(backend, e))?;
    let mut c: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a context is bound; out-pointer valid.
    let r = unsafe { sys::cuCtxGetCurrent(&mut c) };
    check(backend, r, "cuCtxGetCurrent", || {
        "reading the bound context".into()
    })?;
    if c.is_null() {
        return Err(HalError::backend(
            backend,
            "cuCtxGetCurrent returned no context after binding one",
        ));
    }
    Ok(c)
}

/// Let `local`'s device address `owner`'s `cuMemAlloc` memory
/// (`cuCtxEnablePeerAccess`); already enabled is fine.
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
    let peer = raw_context(backend, owner)?;
    local.bind().map_err(|e| to_hal(backend, e))?;
    // SAFETY: `local` is bound; `peer` is a live primary context (owner holds it).
    let r = unsafe { sys::cuCtxEnablePeerAccess(peer, 0) };
    if r == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        return Ok(());
    }
    check(backend, r, "cuCtxEnablePeerAccess", || {
        format!(
            "enabling access from device {} to device {}",
            local.ordinal(),
            owner.ordinal()
        )
    })
}

/// `cuIpcGetMemHandle` for a `cuMemAlloc` pointer of `ctx` (cuda-rt's, errors as the
/// backend's).
pub fn ipc_get_handle(backend: &str, ctx: &Context, addr: u64) -> Result<[u8; IPC_HANDLE_LEN]> {
    commhal_cuda_rt::ipc::ipc_handle(ctx, addr).map_err(|e| to_hal(backend, e))
}

/// `cuIpcOpenMemHandle` (lazy peer access) in `ctx`; returns the local address.
/// Must be balanced by [`ipc_close`].
pub fn ipc_open(backend: &str, ctx: &Context, handle: &[u8; IPC_HANDLE_LEN]) -> Result<u64> {
    commhal_cuda_rt::ipc::ipc_open(ctx, handle).map_err(|e| to_hal(backend, e))
}

/// Close a pointer from [`ipc_open`]; failures are logged (called from `Drop`).
pub fn ipc_close(ctx: &Context, ptr: u64) {
    commhal_cuda_rt::ipc::ipc_close(ctx, ptr)
}

fn bounds(what: &str, offset: u64, len: u64, size: u64) -> Result<()> {
    commhal_hal::error::check_range(what, offset, len, size)
}

/// Synchronous host → device copy into `[base, base+size)` at `offset`.
///
/// Contract: `[base, base+size)` is device memory addressable in `ctx` for the whole
/// call (a live allocation or mapping the caller holds).
pub fn write_bytes(
    backend: &str,
    ctx: &Context,
    base: u64,
    size: u64,
    offset: u64,
    src: &[u8],
) -> Result<()> {
    bounds("device write", offset, src.len() as u64, size)?;
    if src.is_empty() {
        return Ok(());
    }
    ctx.bind().map_err(|e| to_hal(backend, e))?;
    // SAFETY: destination range checked against the caller's live region (contract
    // above); `src` is a valid host slice.
    let r =
        unsafe { sys::cuMemcpyHtoD_v2(base + offset, src.as_ptr() as *const c_void, src.len()) };
    check(backend, r, "cuMemcpyHtoD", || {
        format!("writing {} bytes at offset {offset}", src.len())
    })
}

/// Synchronous device → host copy from `[base, base+size)` at `offset`. Same
/// contract as [`write_bytes`].
pub fn read_bytes(
    backend: &str,
    ctx: &Context,
    base: u64,
    size: u64,
    offset: u64,
    dst: &mut [u8],
) -> Result<()> {
    bounds("device read", offset, dst.len() as u64, size)?;
    if dst.is_empty() {
        return Ok(());
    }
    ctx.bind().map_err(|e| to_hal(backend, e))?;
    // SAFETY: source range checked against the caller's live region; `dst` is a valid,
    // writable host slice.
    let r =
        unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, base + offset, dst.len()) };
    check(backend, r, "cuMemcpyDtoH", || {
        format!("reading {} bytes at offset {offset}", dst.len())
    })
}

/// Synchronous memset of the whole region. Same contract as [`write_bytes`].
pub fn fill_bytes(backend: &str, ctx: &Context, base: u64, size: u64, value: u8) -> Result<()> {
    ctx.bind().map_err(|e| to_hal(backend, e))?;
    // SAFETY: [base, base+size) is the caller's live region (contract above).
    let r = unsafe { sys::cuMemsetD8_v2(base, value, size as usize) };
    check(backend, r, "cuMemsetD8", || format!("filling {size} bytes"))?;
    // SAFETY: context bound; waits for the memset (cuMemsetD8 may return early for
    // device memory).
    let r = unsafe { sys::cuCtxSynchronize() };
    check(backend, r, "cuCtxSynchronize", || {
        "waiting for a memset".into()
    })
}

/// Does the loaded driver export `name`? (cuda-rt's check, re-exported.)
pub use commhal_cuda_rt::driver::symbol_present;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_the_call_and_result() {
        let e = check(
            "cuda-nvlink",
            sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            "cuFoo",
            || "doing bar".into(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cuFoo"), "{e}");
        assert!(e.contains("CUDA_ERROR_INVALID_VALUE"), "{e}");
        assert!(e.contains("doing bar"), "{e}");
        assert!(check("x", sys::CUresult::CUDA_SUCCESS, "cuFoo", String::new).is_ok());
    }

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
    fn missing_symbols_are_reported_absent() {
        assert!(!symbol_present("cuThisFunctionDoesNotExist_v99"));
    }
}
