//! Peer access between devices: may one device address another's memory
//! ([`can_access_peer`]), and let it address another context's `cuMemAlloc` memory
//! ([`enable_peer_access`]).

use std::ffi::c_int;

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::{check, ensure_init};
use crate::error::Result;

fn cu_device(ordinal: u32) -> Result<sys::CUdevice> {
    ensure_init()?;
    let mut d: sys::CUdevice = 0;
    // SAFETY: driver initialised; out-pointer valid. An out-of-range ordinal is an
    // error return, not undefined behaviour.
    let r = unsafe { sys::cuDeviceGet(&mut d, ordinal as c_int) };
    check(r, "cuDeviceGet", || format!("getting device {ordinal}"))?;
    Ok(d)
}

/// `cuDeviceCanAccessPeer(a, b)`: can device `a` address device `b`'s memory? True
/// for `a == b`.
pub fn can_access_peer(a: u32, b: u32) -> Result<bool> {
    if a == b {
        return Ok(true);
    }
    let (da, db) = (cu_device(a)?, cu_device(b)?);
    let mut v: c_int = 0;
    // SAFETY: both device handles valid; out-pointer valid.
    let r = unsafe { sys::cuDeviceCanAccessPeer(&mut v, da, db) };
    check(r, "cuDeviceCanAccessPeer", || {
        format!("asking whether device {a} can access device {b}")
    })?;
    Ok(v != 0)
}

/// Let `local`'s device address `owner`'s `cuMemAlloc` memory
/// (`cuCtxEnablePeerAccess`); already enabled, or one device, is fine. Check
/// [`can_access_peer`] first for a clearer error.
pub fn enable_peer_access(local: &Context, owner: &Context) -> Result<()> {
    if local.ordinal() == owner.ordinal() {
        return Ok(());
    }
    local.bind()?;
    // SAFETY: `local` is bound; `owner.raw()` is a live primary context (retained by
    // `owner`, which the caller holds).
    let r = unsafe { sys::cuCtxEnablePeerAccess(owner.raw(), 0) };
    if r == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        return Ok(());
    }
    check(r, "cuCtxEnablePeerAccess", || {
        format!(
            "enabling access from device {} to device {}",
            local.ordinal(),
            owner.ordinal()
        )
    })
}
