//! One device and its primary context.
//!
//! Contract: every object of this crate that touches a device holds an
//! `Arc<Context>` and calls [`Context::bind`] before its driver calls, so callers
//! never have to manage the thread's current context themselves.

use std::ffi::{CStr, c_char, c_int};
use std::sync::Arc;

use cudarc::driver::sys;

use crate::driver::{check, device_count, ensure_init};
use crate::error::{CudaError, Result};

/// A device's primary context (shared with the CUDA runtime and other libraries in
/// this process). Released on drop.
#[derive(Debug)]
pub struct Context {
    ordinal: u32,
    device: sys::CUdevice,
    ctx: sys::CUcontext,
}

// SAFETY: a CUcontext is a process-wide driver object; the driver API is thread-safe
// and any thread may make it current (bind) and use it.
unsafe impl Send for Context {}
// SAFETY: as above; `Context` has no interior mutability of its own.
unsafe impl Sync for Context {}

impl Context {
    /// Retain the primary context of device `ordinal`.
    pub fn new(ordinal: u32) -> Result<Arc<Context>> {
        ensure_init()?;
        let n = device_count()?;
        if ordinal >= n {
            return Err(CudaError::invalid(format!(
                "device ordinal {ordinal} does not exist: this machine has {n} CUDA device(s)"
            )));
        }
        let mut device: sys::CUdevice = 0;
        // SAFETY: driver initialised; out-pointer valid; ordinal < device count.
        let r = unsafe { sys::cuDeviceGet(&mut device, ordinal as c_int) };
        check(r, "cuDeviceGet", || format!("getting device {ordinal}"))?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `device` is valid; out-pointer valid. Balanced by the release in Drop.
        let r = unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, device) };
        check(r, "cuDevicePrimaryCtxRetain", || {
            format!("retaining the primary context of device {ordinal}")
        })?;
        let c = Context {
            ordinal,
            device,
            ctx,
        };
        c.bind()?;
        Ok(Arc::new(c))
    }

    /// Make this context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        // SAFETY: `ctx` was retained in `new` and stays valid until Drop.
        let r = unsafe { sys::cuCtxSetCurrent(self.ctx) };
        check(r, "cuCtxSetCurrent", || {
            format!("binding device {}'s context", self.ordinal)
        })
    }

    /// Device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// The raw context handle (to compare with the context of a caller's stream).
    pub fn raw(&self) -> sys::CUcontext {
        self.ctx
    }

    /// The raw device (for driver calls made by sibling modules).
    pub(crate) fn device(&self) -> sys::CUdevice {
        self.device
    }

    /// One device attribute.
    pub fn attribute(&self, attr: sys::CUdevice_attribute) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: device valid; out-pointer valid.
        let r = unsafe { sys::cuDeviceGetAttribute(&mut v, attr, self.device) };
        check(r, "cuDeviceGetAttribute", || format!("reading {attr:?}"))?;
        Ok(v)
    }

    /// Number of streaming multiprocessors of the device.
    pub fn sm_count(&self) -> Result<u32> {
        let n =
            self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok(n.max(0) as u32)
    }

    /// Compute capability `(major, minor)`, e.g. `(9, 0)` on H100/H200.
    pub fn compute_capability(&self) -> Result<(u32, u32)> {
        use sys::CUdevice_attribute::*;
        let major = self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        Ok((major as u32, minor as u32))
    }

    /// NVRTC architecture for this device, e.g. `sm_90`.
    pub fn arch(&self) -> Result<String> {
        let (major, minor) = self.compute_capability()?;
        Ok(format!("sm_{major}{minor}"))
    }

    /// Device name as the driver reports it.
    pub fn name(&self) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: buffer of the length passed; device valid.
        let r = unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, self.device) };
        check(r, "cuDeviceGetName", || "reading the device name".into())?;
        // SAFETY: the driver NUL-terminates within the given length (buffer zeroed too).
        let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
        Ok(s.to_string_lossy().into_owned())
    }

    /// Does the device support cuMem VMM with POSIX fd export?
    pub fn supports_vmm_fd(&self) -> Result<bool> {
        use sys::CUdevice_attribute::*;
        Ok(
            self.attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED)? != 0
                && self
                    .attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)?
                    != 0,
        )
    }

    /// Wait for all work on this context.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: context bound to this thread.
        let r = unsafe { sys::cuCtxSynchronize() };
        check(r, "cuCtxSynchronize", || "synchronising the context".into())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `new`; the device handle is valid.
        let r = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
        if r != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!("cuDevicePrimaryCtxRelease failed: {r:?}");
        }
    }
}
