//! `ncclMemAlloc` / `ncclMemFree`, buffer registration and windows.
//!
//! `ncclMemAlloc` returns `cuMemAlloc` memory of the calling thread's device: the
//! memory commhal's collectives map zero-copy (legacy CUDA IPC). Registration is
//! optional, as in NCCL: any `cudaMalloc` buffer is mapped on first use; registering
//! checks the range and prepares its export. With a fallback NCCL, registrations and
//! windows are made on its communicator too, so calls routed there see them.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use commhal_cuda_rt::{Context, DeviceBuffer};

use crate::abi::{NcclError, NcclResult};
use crate::comm::NcclComm;
use crate::fallback::Check as _;
use crate::settings;

fn allocations() -> &'static Mutex<HashMap<u64, DeviceBuffer>> {
    static A: OnceLock<Mutex<HashMap<u64, DeviceBuffer>>> = OnceLock::new();
    A.get_or_init(Default::default)
}

fn poisoned() -> NcclError {
    NcclError::new(NcclResult::InternalError, "allocation table poisoned")
}

/// `ncclMemAlloc`.
pub fn alloc(size: usize) -> Result<u64, NcclError> {
    if size == 0 {
        return Err(NcclError::invalid("ncclMemAlloc of 0 bytes"));
    }
    let ctx = Context::new(crate::comm::current_device()?)?;
    let b = DeviceBuffer::new(&ctx, size as u64)?;
    let addr = b.addr();
    allocations()
        .lock()
        .map_err(|_| poisoned())?
        .insert(addr, b);
    Ok(addr)
}

/// `ncclMemFree`.
pub fn free(ptr: u64) -> Result<(), NcclError> {
    let b = allocations().lock().map_err(|_| poisoned())?.remove(&ptr);
    match b {
        Some(_) => Ok(()),
        None => Err(NcclError::invalid(format!(
            "ncclMemFree({ptr:#x}): not a pointer ncclMemAlloc returned (or already freed)"
        ))),
    }
}

/// What a registration or window handle points at.
#[derive(Debug)]
pub struct Registered {
    /// The range.
    pub ptr: u64,
    /// Its length.
    pub len: u64,
    /// The fallback communicator's handle of the same range.
    pub fallback: *mut c_void,
    /// A window (`ncclCommWindowRegister`) rather than a registration.
    pub window: bool,
}

/// `ncclCommRegister` (`window == false`, local) or `ncclCommWindowRegister`
/// (collective in NCCL; flags passed to the fallback).
pub fn register(
    comm: &NcclComm,
    ptr: u64,
    len: u64,
    window: bool,
    flags: i32,
) -> Result<Box<Registered>, NcclError> {
    if ptr == 0 || len == 0 {
        return Err(NcclError::invalid(format!(
            "registering {len} bytes at {ptr:#x}: pass a device buffer and its length"
        )));
    }
    let ready = comm.ready()?;
    if let Some(c) = &ready.coll {
        match c.register(ptr, len) {
            Ok(_) => settings::log(|| {
                format!(
                    "rank {}: registered {len} B at {ptr:#x}: zero-copy",
                    comm.rank
                )
            }),
            // still usable: such calls are staged; NCCL registrations fail only on
            // bad arguments
            Err(e) => settings::log(|| format!("rank {}: registration: {e}", comm.rank)),
        }
    }
    let mut fb_handle: *mut c_void = std::ptr::null_mut();
    if let Some(fb) = &ready.fallback {
        let p = ptr as *mut c_void;
        // SAFETY: the caller's range and a valid out-pointer, on a live communicator.
        let r = unsafe {
            if window {
                match fb.lib.CommWindowRegister {
                    Some(f) => f(fb.raw, p, len as usize, &mut fb_handle, flags),
                    None => 0,
                }
            } else {
                (fb.lib.CommRegister)(fb.raw, p, len as usize, &mut fb_handle)
            }
        };
        fb.lib.check(
            r,
            fb.raw,
            if window {
                "ncclCommWindowRegister"
            } else {
                "ncclCommRegister"
            },
        )?;
    }
    Ok(Box::new(Registered {
        ptr,
        len,
        fallback: fb_handle,
        window,
    }))
}

/// `ncclCommDeregister` / `ncclCommWindowDeregister`.
pub fn deregister(comm: &NcclComm, reg: Registered) -> Result<(), NcclError> {
    let ready = comm.ready()?;
    if let Some(fb) = &ready.fallback
        && !reg.fallback.is_null()
    {
        // SAFETY: a handle the fallback returned for this communicator, released once.
        let r = unsafe {
            if reg.window {
                match fb.lib.CommWindowDeregister {
                    Some(f) => f(fb.raw, reg.fallback),
                    None => 0,
                }
            } else {
                (fb.lib.CommDeregister)(fb.raw, reg.fallback)
            }
        };
        fb.lib.check(r, fb.raw, "deregistering")?;
    }
    Ok(())
}
