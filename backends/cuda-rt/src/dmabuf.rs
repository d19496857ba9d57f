//! Device memory as a Linux dma-buf, for registration with an RDMA NIC
//! (`ibv_reg_dmabuf_mr`): `cuMemGetHandleForAddressRange` with
//! `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`.
//!
//! Layers: [`page_span`] (pure arithmetic: the host-page-aligned range enclosing a
//! buffer) → `export_range` (the one driver call, `unsafe`) → [`export`] (safe: checks
//! the driver entry point and the device attribute, aligns, exports, and returns an
//! [`OwnedFd`] with the offset of the caller's buffer inside it).
//!
//! The driver exports only ranges aligned to the host page size, of memory from
//! `cuMemAlloc` or of cuMem VMM memory created with `gpuDirectRDMACapable`; it refuses
//! memory from stream-ordered pools (`cuMemAllocAsync`) and devices or kernels without
//! dma-buf support (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` is 0: open kernel module
//! and Linux 5.12 or newer needed).

use std::ffi::{c_int, c_void};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::{check, symbol_present};
use crate::error::{CudaError, Result};

/// The page-aligned range enclosing a buffer: what is exported and registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSpan {
    /// First byte of the range (a multiple of the page size).
    pub base: u64,
    /// Length (a nonzero multiple of the page size).
    pub len: u64,
    /// Where the buffer starts inside the range (`addr - base`).
    pub offset: u64,
}

/// The range of whole `page`-sized pages enclosing `addr..addr+len`. `page` must be a
/// power of two and `len` nonzero; the end must not pass the address space.
pub fn page_span(addr: u64, len: u64, page: u64) -> Result<PageSpan> {
    if page == 0 || !page.is_power_of_two() {
        return Err(CudaError::invalid(format!(
            "page size {page} is not a power of two"
        )));
    }
    if len == 0 {
        return Err(CudaError::invalid(
            "cannot export an empty range as a dma-buf: pass at least 1 byte",
        ));
    }
    let end = addr
        .checked_add(len)
        .and_then(|e| e.checked_next_multiple_of(page))
        .ok_or_else(|| {
            CudaError::invalid(format!(
                "range {addr:#x} + {len} passes the end of the address space"
            ))
        })?;
    let base = addr & !(page - 1);
    Ok(PageSpan {
        base,
        len: end - base,
        offset: addr - base,
    })
}

/// The host page size (`sysconf(_SC_PAGESIZE)`), 4096 when the query fails.
pub fn host_page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
}

/// A dma-buf of device memory, from [`export`].
#[derive(Debug)]
pub struct DmaBuf {
    /// The dma-buf's file descriptor (covers `span.base .. span.base + span.len`).
    pub fd: OwnedFd,
    /// The exported range and the buffer's offset inside it.
    pub span: PageSpan,
}

/// The one driver call: a dma-buf fd for `base..base+len` (both page-aligned).
fn export_range(ctx: &Context, base: u64, len: u64) -> Result<OwnedFd> {
    ctx.bind()?;
    let mut fd: c_int = -1;
    // SAFETY: the driver is loaded and `ctx` is current (bind); the handle argument is
    // a writable int, as the driver writes an fd for CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD;
    // base and len are page-aligned (page_span); flags 0 is the documented default.
    let r = unsafe {
        sys::cuMemGetHandleForAddressRange(
            (&mut fd as *mut c_int).cast::<c_void>(),
            base,
            len as usize,
            sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    };
    check(r, "cuMemGetHandleForAddressRange", || {
        format!(
            "exporting {len} bytes of device memory at {base:#x} as a dma-buf (the driver refuses memory from stream-ordered pools (cuMemAllocAsync) and cuMem VMM memory created without gpuDirectRDMACapable: register cuMemAlloc memory, or stage through host memory)"
        )
    })?;
    if fd < 0 {
        return Err(CudaError::invalid(format!(
            "cuMemGetHandleForAddressRange returned success but fd {fd}"
        )));
    }
    // SAFETY: the driver just created this fd and hands its ownership to the caller.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Export the device memory `addr..addr+len` of `ctx`'s device as a dma-buf: the
/// enclosing host-page-aligned range, and the offset of `addr` inside it.
///
/// Errors say what to do: a driver without the entry point (CUDA 11.7 or newer
/// needed), a device or kernel without dma-buf support, or memory the driver will
/// not export; in each case GPU memory has to be staged through host memory.
pub fn export(ctx: &Context, addr: u64, len: u64) -> Result<DmaBuf> {
    if !symbol_present("cuMemGetHandleForAddressRange") {
        return Err(CudaError::invalid(
            "this CUDA driver has no cuMemGetHandleForAddressRange (driver for CUDA 11.7 or newer needed) — device memory cannot be exported as a dma-buf; stage it through host memory",
        ));
    }
    let supported =
        ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)?;
    if supported == 0 {
        return Err(CudaError::invalid(format!(
            "CUDA device {} does not support dma-buf export (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0: needs the NVIDIA open kernel module and Linux 5.12 or newer) — stage GPU memory through host memory",
            ctx.ordinal()
        )));
    }
    let span = page_span(addr, len, host_page_size())?;
    let fd = export_range(ctx, span.base, span.len)?;
    Ok(DmaBuf { fd, span })
}

/// How a NIC registers device memory of `ctx`'s device held by `owner`: as a dma-buf
/// from [`export`], errors reported under `backend`. What a memory backend's
/// [`Region::registrable`](commhal_hal::Region::registrable) returns for its device
/// allocations. Compiled and type-checked only where no GPU is present: the export
/// itself needs a CUDA driver with dma-buf support.
pub fn registrable(
    backend: &'static str,
    ctx: &Arc<Context>,
    owner: commhal_hal::MemoryOwner,
) -> commhal_hal::Registrable {
    let ctx = ctx.clone();
    commhal_hal::Registrable::DeviceDmaBuf {
        owner,
        export: Arc::new(move |addr, len| {
            let buf = export(&ctx, addr, len).map_err(|e| e.into_hal(backend))?;
            Ok(commhal_hal::DmaBufRange {
                fd: buf.fd,
                offset: 0,
                len: buf.span.len,
                iova: buf.span.base,
            })
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_span_encloses_the_buffer() {
        let p = 4096;
        assert_eq!(
            page_span(0x1000, 4096, p).unwrap(),
            PageSpan {
                base: 0x1000,
                len: 4096,
                offset: 0
            }
        );
        assert_eq!(
            page_span(0x1010, 100, p).unwrap(),
            PageSpan {
                base: 0x1000,
                len: 4096,
                offset: 0x10
            }
        );
        // Crosses one page boundary: two pages.
        assert_eq!(
            page_span(0x1ff8, 16, p).unwrap(),
            PageSpan {
                base: 0x1000,
                len: 8192,
                offset: 0xff8
            }
        );
        // Ends exactly on a boundary.
        assert_eq!(
            page_span(0x1800, 0x800, p).unwrap(),
            PageSpan {
                base: 0x1000,
                len: 4096,
                offset: 0x800
            }
        );
        // 64 KiB pages.
        let s = page_span(0x7f00_0001_2345, 0x2_0000, 1 << 16).unwrap();
        assert_eq!(
            (s.base, s.len, s.offset),
            (0x7f00_0001_0000, 0x3_0000, 0x2345)
        );
        assert!(page_span(0x1000, 0, p).is_err());
        assert!(page_span(0x1000, 1, 3000).is_err());
        assert!(page_span(u64::MAX - 10, 5, p).is_err());
    }

    #[test]
    fn the_host_page_size_is_a_power_of_two() {
        assert!(host_page_size().is_power_of_two());
    }
}
