//! cuMem virtual-memory allocations that can be shared with other processes as a
//! POSIX file descriptor (what cuda-nvlink exports and peers map).
//!
//! Steps (each checked, undone in reverse on failure or drop):
//! `cuMemGetAllocationGranularity` (recommended) → round the size up →
//! `cuMemCreate` (pinned, on this device, handle type POSIX fd) →
//! `cuMemAddressReserve` → `cuMemMap` → `cuMemSetAccess` (read/write for this device).
//! Export: `cuMemExportToShareableHandle` → an fd the caller owns and passes with
//! SCM_RIGHTS. Import: `cuMemImportFromShareableHandle` on the fd, then reserve, map
//! and set access the same way.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::check;
use crate::error::{CudaError, Result};

pub(crate) fn prop(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes:
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: device,
        },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// Allocation granularity (recommended) for exportable memory on `ctx`'s device.
pub fn granularity(ctx: &Context) -> Result<u64> {
    ctx.bind()?;
    let p = prop(ctx.device());
    let mut g: usize = 0;
    // SAFETY: `p` is a fully initialised property struct; out-pointer valid.
    let r = unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            &p,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
    };
    check(r, "cuMemGetAllocationGranularity", || {
        "querying the VMM granularity (does the device support cuMem VMM?)".into()
    })?;
    if g == 0 {
        return Err(CudaError::invalid("driver reported a VMM granularity of 0"));
    }
    Ok(g as u64)
}

/// Import the allocation a peer exported as the POSIX fd `fd` (the context of the
/// importing device bound); the fd stays the caller's.
pub(crate) fn import_handle(fd: BorrowedFd<'_>) -> Result<sys::CUmemGenericAllocationHandle> {
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: for POSIX fds the OS handle argument is the fd value itself cast to a
    // pointer (CUDA driver API contract); the fd is open for the duration of the call
    // (borrowed); out-pointer valid.
    let r = unsafe {
        sys::cuMemImportFromShareableHandle(
            &mut handle,
            fd.as_raw_fd() as isize as *mut c_void,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        )
    };
    check(r, "cuMemImportFromShareableHandle", || {
        "importing a peer allocation from its fd (same host? fd passed with SCM_RIGHTS?)".into()
    })?;
    Ok(handle)
}

/// Let `ctx`'s device read and write `[va, va + size)`.
///
/// # Safety
/// The range must be mapped (every byte, by one or more `cuMemMap` calls) in the
/// bound context.
pub(crate) unsafe fn grant_rw(ctx: &Context, va: u64, size: u64) -> Result<()> {
    let desc = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ctx.device(),
        },
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: the caller guarantees the range is mapped; one valid descriptor.
    let r = unsafe { sys::cuMemSetAccess(va, size as usize, &desc, 1) };
    check(r, "cuMemSetAccess", || {
        format!("granting device {} read/write access", ctx.ordinal())
    })
}

/// A mapped cuMem allocation (created here or imported from a peer's fd).
#[derive(Debug)]
pub struct VmmAllocation {
    ctx: Arc<Context>,
    handle: sys::CUmemGenericAllocationHandle,
    va: sys::CUdeviceptr,
    size: u64,
    mapped: bool,
    imported: bool,
}

impl VmmAllocation {
    /// Create at least `len` (> 0) bytes, rounded up to the granularity, mapped
    /// read/write for `ctx`'s device. Contents are not zeroed.
    pub fn new(ctx: &Arc<Context>, len: u64) -> Result<VmmAllocation> {
        if len == 0 {
            return Err(CudaError::invalid("VMM allocation length must be > 0"));
        }
        let g = granularity(ctx)?;
        let size = len
            .checked_next_multiple_of(g)
            .ok_or_else(|| CudaError::invalid(format!("length {len} too large")))?;
        let p = prop(ctx.device());
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: context bound by granularity(); `p` initialised; out-pointer valid;
        // size is a multiple of the granularity.
        let r = unsafe { sys::cuMemCreate(&mut handle, size as usize, &p, 0) };
        check(r, "cuMemCreate", || {
            format!("creating {size} bytes of exportable device memory")
        })?;
        let mut a = VmmAllocation {
            ctx: ctx.clone(),
            handle,
            va: 0,
            size,
            mapped: false,
            imported: false,
        };
        a.reserve_and_map(g)?;
        Ok(a)
    }

    /// Import a peer's allocation from its exported fd and map it for `ctx`'s device.
    /// `size` is the exporter's [`VmmAllocation::size`] (a granularity multiple). The
    /// fd stays owned by the caller (close it whenever; the import holds its own
    /// reference).
    pub fn import(ctx: &Arc<Context>, fd: BorrowedFd<'_>, size: u64) -> Result<VmmAllocation> {
        let g = granularity(ctx)?;
        if size == 0 || !size.is_multiple_of(g) {
            return Err(CudaError::invalid(format!(
                "imported size {size} must be a nonzero multiple of the granularity {g}: pass the exporter's VmmAllocation::size()"
            )));
        }
        let handle = import_handle(fd)?;
        let mut a = VmmAllocation {
            ctx: ctx.clone(),
            handle,
            va: 0,
            size,
            mapped: false,
            imported: true,
        };
        a.reserve_and_map(g)?;
        Ok(a)
    }

    fn reserve_and_map(&mut self, align: u64) -> Result<()> {
        let mut va: sys::CUdeviceptr = 0;
        // SAFETY: context bound; out-pointer valid; size/alignment are granularity
        // multiples.
        let r =
            unsafe { sys::cuMemAddressReserve(&mut va, self.size as usize, align as usize, 0, 0) };
        check(r, "cuMemAddressReserve", || {
            format!("reserving {} bytes of address space", self.size)
        })?;
        self.va = va;
        // SAFETY: [va, va+size) reserved above; handle covers `size` bytes at offset 0.
        let r = unsafe { sys::cuMemMap(va, self.size as usize, 0, self.handle, 0) };
        check(r, "cuMemMap", || format!("mapping {} bytes", self.size))?;
        self.mapped = true;
        self.grant_access(&self.ctx.clone())
    }

    /// Allow `ctx`'s device (this one, or a peer with P2P access) to read and write
    /// the mapping.
    pub fn grant_access(&self, ctx: &Context) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the range is mapped (reserve_and_map).
        unsafe { grant_rw(ctx, self.va, self.size) }
    }

    /// Export as a POSIX fd for a peer process on this host (the caller owns it).
    pub fn export_fd(&self) -> Result<OwnedFd> {
        self.ctx.bind()?;
        let mut fd: c_int = -1;
        // SAFETY: handle alive; for POSIX fds the output is an int.
        let r = unsafe {
            sys::cuMemExportToShareableHandle(
                &mut fd as *mut c_int as *mut c_void,
                self.handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        };
        check(r, "cuMemExportToShareableHandle", || {
            "exporting the allocation as a POSIX fd".into()
        })?;
        if fd < 0 {
            return Err(CudaError::invalid("driver exported a negative fd"));
        }
        // SAFETY: the driver just created this fd for us; nobody else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Set every byte to `value` (synchronous).
    pub fn fill(&self, value: u8) -> Result<()> {
        crate::memory::fill_range(&self.ctx, self.va, self.size, value)
    }
    /// Copy `src` to `offset` (synchronous).
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        crate::memory::write_range(&self.ctx, self.va, self.size, offset, src)
    }
    /// Copy from `offset` into `dst` (synchronous).
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        crate::memory::read_range(&self.ctx, self.va, self.size, offset, dst)
    }

    /// Device address of the mapping.
    pub fn addr(&self) -> u64 {
        self.va
    }
    /// Mapped size in bytes (a granularity multiple, >= the requested length).
    pub fn size(&self) -> u64 {
        self.size
    }
    /// True when this mapping came from [`VmmAllocation::import`].
    pub fn is_imported(&self) -> bool {
        self.imported
    }
    /// Its context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

impl Drop for VmmAllocation {
    fn drop(&mut self) {
        if self.ctx.bind().is_err() {
            return;
        }
        if self.mapped {
            // SAFETY: mapped in reserve_and_map, unmapped once.
            let r = unsafe { sys::cuMemUnmap(self.va, self.size as usize) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuMemUnmap failed: {r:?}");
            }
        }
        if self.va != 0 {
            // SAFETY: reserved in reserve_and_map, freed once, after unmapping.
            let r = unsafe { sys::cuMemAddressFree(self.va, self.size as usize) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuMemAddressFree failed: {r:?}");
            }
        }
        // SAFETY: created or imported once; released once.
        let r = unsafe { sys::cuMemRelease(self.handle) };
        if r != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!("cuMemRelease failed: {r:?}");
        }
    }
}
