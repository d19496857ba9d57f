//! Loading and initialising the driver, and turning `CUresult` into [`CudaError`].
//!
//! cudarc loads libcuda lazily and *panics* when a driver function is called without
//! it, so every entry point of this crate goes through [`ensure_init`] first, which
//! checks that the library exists (without panicking) and calls `cuInit` once.

use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::error::{CudaError, Result};

/// True when libcuda.so can be loaded. Cached.
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: is_culib_present only tries to dlopen the candidate library names
        // and drops the handles; it calls no driver function.
        unsafe { sys::is_culib_present() }
    })
}

/// Does the loaded driver export `name`? cudarc panics when asked for a missing
/// symbol, so optional entry points are checked here first. False without a driver.
pub fn symbol_present(name: &str) -> bool {
    static LIB: OnceLock<Option<libloading::Library>> = OnceLock::new();
    let lib = LIB.get_or_init(|| {
        ["libcuda.so.1", "libcuda.so"].iter().find_map(|n| {
            // SAFETY: loading the NVIDIA driver library runs its initialisers, which
            // are designed to be loaded by any process (cudarc loads the same file).
            unsafe { libloading::Library::new(*n) }.ok()
        })
    });
    let Some(lib) = lib else {
        return false;
    };
    let Ok(cname) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: we only test for presence; the symbol is never called through this
    // pointer type.
    unsafe { lib.get::<*const std::ffi::c_void>(cname.as_c_str()) }.is_ok()
}

/// Load the driver and run `cuInit(0)` once; the outcome is cached.
pub fn ensure_init() -> Result<()> {
    static INIT: OnceLock<std::result::Result<(), (u32, String)>> = OnceLock::new();
    if !driver_present() {
        return Err(CudaError::NoDriver);
    }
    let r = INIT.get_or_init(|| {
        // SAFETY: the library is present (checked above); cuInit has no pointer
        // arguments and may be called from any thread.
        let r = unsafe { sys::cuInit(0) };
        match r {
            sys::CUresult::CUDA_SUCCESS => Ok(()),
            other => Err((other as u32, error_name(other))),
        }
    });
    match r {
        Ok(()) => Ok(()),
        Err((code, name)) if name == "CUDA_ERROR_NO_DEVICE" => Err(CudaError::NoDevice(format!(
            "cuInit returned {name} ({code}): no GPU visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)"
        ))),
        Err((code, name)) => Err(CudaError::Driver {
            call: "cuInit",
            code: *code,
            name: name.clone(),
            what: "initialising the driver (is the kernel module loaded? does nvidia-smi work?)"
                .to_string(),
        }),
    }
}

/// Number of CUDA devices (after [`ensure_init`]).
pub fn device_count() -> Result<u32> {
    ensure_init()?;
    let mut n: std::ffi::c_int = 0;
    // SAFETY: driver loaded and initialised; `n` is a valid out-pointer.
    let r = unsafe { sys::cuDeviceGetCount(&mut n) };
    check(r, "cuDeviceGetCount", || "counting devices".into())?;
    Ok(n.max(0) as u32)
}

/// The device of the calling thread's current context (the CUDA runtime's
/// `cudaGetDevice` after `cudaSetDevice`), `None` when no context is current.
pub fn current_device() -> Result<Option<u32>> {
    ensure_init()?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: driver initialised; out-pointer valid.
    let r = unsafe { sys::cuCtxGetCurrent(&mut ctx) };
    check(r, "cuCtxGetCurrent", || {
        "asking for the current context".into()
    })?;
    if ctx.is_null() {
        return Ok(None);
    }
    let mut dev: sys::CUdevice = 0;
    // SAFETY: a context is current (checked above); out-pointer valid.
    let r = unsafe { sys::cuCtxGetDevice(&mut dev) };
    check(r, "cuCtxGetDevice", || {
        "asking for the current device".into()
    })?;
    Ok(Some(dev.max(0) as u32))
}

/// The CUresult's name, e.g. `CUDA_ERROR_INVALID_VALUE`.
pub(crate) fn error_name(r: sys::CUresult) -> String {
    // The enum's Debug is the variant name; it needs no driver call.
    format!("{r:?}")
}

/// `Ok` on `CUDA_SUCCESS`, else a [`CudaError::Driver`] naming the call.
pub fn check(r: sys::CUresult, call: &'static str, what: impl FnOnce() -> String) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Driver {
            call,
            code: r as u32,
            name: error_name(r),
            what: what(),
        })
    }
}
