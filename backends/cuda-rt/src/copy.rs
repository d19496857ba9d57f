//! Copies and fills on raw device addresses: queued on a stream ([`memset_async`],
//! [`copy_async`], [`copy_async_uva`], [`copy_peer_async`], [`write_queued`],
//! [`read_on`]), or synchronous ([`read`], [`write()`], [`fill`]).
//!
//! The owning types ([`DeviceBuffer`](crate::DeviceBuffer),
//! [`VmmAllocation`](crate::VmmAllocation)) have safe, bounds-checked methods; these
//! functions are for addresses whose owner lives elsewhere (a peer mapping, a caller's
//! pointer, a region of another crate), so the caller promises the range is live.

use std::ffi::c_void;

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::check;
use crate::error::Result;
use crate::stream::Stream;

/// Queue `memset(addr, value, len)` on `stream`.
///
/// # Safety
/// `[addr, addr+len)` is device memory usable by the stream's device, alive until the
/// stream is synchronised.
pub unsafe fn memset_async(stream: &Stream, addr: u64, value: u8, len: u64) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: the stream's context is bound; the range is the caller's contract.
    let r = unsafe { sys::cuMemsetD8Async(addr, value, len as usize, stream.raw()) };
    check(r, "cuMemsetD8Async", || {
        format!("filling {len} bytes at {addr:#x} with {value:#x}")
    })
}

/// Queue a copy of `len` bytes from `src` to `dst` (device addresses of the stream's
/// device: its own memory or peer memory mapped for it) on `stream`.
///
/// # Safety
/// Both ranges are device memory usable by the stream's device, alive until the stream
/// is synchronised.
pub unsafe fn copy_async(stream: &Stream, dst: u64, src: u64, len: u64) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: the stream's context is bound; both ranges are the caller's contract.
    let r = unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len as usize, stream.raw()) };
    check(r, "cuMemcpyDtoDAsync", || {
        format!("queueing a {len}-byte copy {src:#x} -> {dst:#x}")
    })
}

/// Queue a copy of `len` bytes from `src` to `dst` on `stream` with unified
/// addressing (`cuMemcpyAsync`: the driver infers each side's memory from its address,
/// so either may be any device's memory or pinned host memory).
///
/// # Safety
/// Both ranges are memory the stream's device can reach, alive until the stream is
/// synchronised.
pub unsafe fn copy_async_uva(stream: &Stream, dst: u64, src: u64, len: u64) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: the stream's context is bound; both ranges are the caller's contract.
    let r = unsafe { sys::cuMemcpyAsync(dst, src, len as usize, stream.raw()) };
    check(r, "cuMemcpyAsync", || {
        format!("queueing a {len}-byte copy {src:#x} -> {dst:#x}")
    })
}

/// Queue a copy of `len` bytes from `src` (memory of `src_ctx`'s device) to `dst`
/// (memory of `dst_ctx`'s device) on `stream` (`cuMemcpyPeerAsync`: no peer mapping
/// needed).
///
/// # Safety
/// Both ranges are live device allocations of their contexts, alive until the stream
/// is synchronised.
pub unsafe fn copy_peer_async(
    stream: &Stream,
    dst: u64,
    dst_ctx: &Context,
    src: u64,
    src_ctx: &Context,
    len: u64,
) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: the stream's context is bound; both contexts are retained primary
    // contexts (the `Context`s are alive); the ranges are the caller's contract.
    let r = unsafe {
        sys::cuMemcpyPeerAsync(
            dst,
            dst_ctx.raw(),
            src,
            src_ctx.raw(),
            len as usize,
            stream.raw(),
        )
    };
    check(r, "cuMemcpyPeerAsync", || {
        format!(
            "copying {len} bytes from device {} to device {}",
            src_ctx.ordinal(),
            dst_ctx.ordinal()
        )
    })
}

/// Queue a device → host copy of `dst.len()` bytes from `src` on `stream`, into
/// pageable memory (`cuMemcpyDtoHAsync`; for a pageable destination the driver usually
/// returns once the copy completed, but only a wait on `stream` promises it): the
/// caller waits on the stream before reading `dst`, which stays borrowed until then.
///
/// # Safety
/// `[src, src + dst.len())` is device memory the stream's device addresses, live for
/// the call.
pub unsafe fn read_on(stream: &Stream, src: u64, dst: &mut [u8]) -> Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    stream.context().bind()?;
    // SAFETY: context bound; `dst` is a writable host slice of the length passed; the
    // source range is the caller's contract.
    let r = unsafe {
        sys::cuMemcpyDtoHAsync_v2(
            dst.as_mut_ptr() as *mut c_void,
            src,
            dst.len(),
            stream.raw(),
        )
    };
    check(r, "cuMemcpyDtoHAsync", || {
        format!("reading {} bytes at {src:#x}", dst.len())
    })
}

/// Queue a host → device copy of `src` to `dst` on `stream`, from pageable memory:
/// `cuMemcpyHtoDAsync` copies such a source into the driver's staging memory before it
/// returns (CUDA's API synchronization rules), so `src` may change right after; the
/// bytes land in stream order, not yet when this returns.
///
/// # Safety
/// `[dst, dst + src.len())` is device memory the stream's device addresses, live until
/// the stream executed the copy.
pub unsafe fn write_queued(stream: &Stream, dst: u64, src: &[u8]) -> Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    stream.context().bind()?;
    // SAFETY: context bound; `src` is a valid host slice of the length passed, read
    // before the call returns; the destination range is the caller's contract.
    let r = unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr() as *const c_void, src.len(), stream.raw())
    };
    check(r, "cuMemcpyHtoDAsync", || {
        format!("queueing a {}-byte write at {dst:#x}", src.len())
    })
}

/// Synchronous device → host copy of `dst.len()` bytes from `src`.
///
/// # Safety
/// `[src, src + dst.len())` is device memory addressable in `ctx` (its own or mapped
/// for it) for the whole call.
pub unsafe fn read(ctx: &Context, src: u64, dst: &mut [u8]) -> Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    ctx.bind()?;
    // SAFETY: context bound; `dst` is a writable host slice of the length passed; the
    // source range is the caller's contract.
    let r = unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, src, dst.len()) };
    check(r, "cuMemcpyDtoH", || {
        format!("reading {} bytes at {src:#x}", dst.len())
    })
}

/// Synchronous host → device copy of `src` to `dst`: returns when the bytes are in
/// device memory (`cuMemcpyHtoD`, then `cuCtxSynchronize`). From pageable host memory
/// `cuMemcpyHtoD` returns once the bytes are staged for DMA, before they land: a kernel
/// queued next on a non-blocking stream read the old contents past the first MiB of a
/// 1.2 MB write (the GPU conformance collective case, every rank wrong from byte 1 MiB).
///
/// # Safety
/// `[dst, dst + src.len())` is device memory addressable in `ctx` (its own or mapped
/// for it) for the whole call.
pub unsafe fn write(ctx: &Context, dst: u64, src: &[u8]) -> Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    ctx.bind()?;
    // SAFETY: context bound; `src` is a valid host slice of the length passed; the
    // destination range is the caller's contract.
    let r = unsafe { sys::cuMemcpyHtoD_v2(dst, src.as_ptr() as *const c_void, src.len()) };
    check(r, "cuMemcpyHtoD", || {
        format!("writing {} bytes at {dst:#x}", src.len())
    })?;
    ctx.synchronize()
}

/// Set `len` bytes at `addr` to `value` and wait until they are set
/// (`cuMemsetD8`, then `cuCtxSynchronize`: a memset of device memory may return before
/// it ran).
///
/// # Safety
/// `[addr, addr+len)` is device memory addressable in `ctx` for the whole call.
pub unsafe fn fill(ctx: &Context, addr: u64, len: u64, value: u8) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { memset(ctx, addr, len, value) }?;
    ctx.synchronize()
}

/// `cuMemsetD8` without the wait.
///
/// # Safety
/// As [`fill`].
unsafe fn memset(ctx: &Context, addr: u64, len: u64, value: u8) -> Result<()> {
    ctx.bind()?;
    // SAFETY: context bound; the range is the caller's contract.
    let r = unsafe { sys::cuMemsetD8_v2(addr, value, len as usize) };
    check(r, "cuMemsetD8", || {
        format!("filling {len} device bytes at {addr:#x}")
    })
}
