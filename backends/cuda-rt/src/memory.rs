//! Plain device allocations (`cuMemAlloc`) and host-pinned, device-mapped memory
//! (`cuMemHostAlloc`, where the proxy FIFO lives). Copies are synchronous and
//! bounds-checked.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::check;
use crate::error::{CudaError, Result};

pub(crate) fn check_bounds(what: &str, offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(CudaError::invalid(format!(
            "{what}: offset {offset} + length {len} exceeds the buffer's {size} bytes"
        ))),
    }
}

/// Device memory from `cuMemAlloc`, zeroed at creation. Freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    ctx: Arc<Context>,
    ptr: sys::CUdeviceptr,
    len: u64,
}

impl DeviceBuffer {
    /// Allocate `len` (> 0) zeroed bytes on `ctx`'s device.
    pub fn new(ctx: &Arc<Context>, len: u64) -> Result<DeviceBuffer> {
        if len == 0 {
            return Err(CudaError::invalid("device buffer length must be > 0"));
        }
        ctx.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: context bound; out-pointer valid.
        let r = unsafe { sys::cuMemAlloc_v2(&mut ptr, len as usize) };
        check(r, "cuMemAlloc", || format!("allocating {len} bytes"))?;
        let b = DeviceBuffer {
            ctx: ctx.clone(),
            ptr,
            len,
        };
        b.fill(0)?;
        Ok(b)
    }

    /// Device address.
    pub fn addr(&self) -> u64 {
        self.ptr
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Always false (length is > 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Its context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Set every byte to `value` (synchronous).
    pub fn fill(&self, value: u8) -> Result<()> {
        fill_range(&self.ctx, self.ptr, self.len, value)
    }

    /// Copy `src` to `offset` (synchronous).
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        write_range(&self.ctx, self.ptr, self.len, offset, src)
    }

    /// Copy from `offset` into `dst` (synchronous).
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        read_range(&self.ctx, self.ptr, self.len, offset, dst)
    }
}

// The three helpers below are only called with (base, size) of an allocation the
// caller owns, so a bounds check against `size` makes the driver call valid.

pub(crate) fn fill_range(ctx: &Context, base: u64, size: u64, value: u8) -> Result<()> {
    // SAFETY: [base, base+size) is a live allocation of the caller (see above).
    unsafe { crate::copy::fill(ctx, base, size, value) }
}

pub(crate) fn write_range(
    ctx: &Context,
    base: u64,
    size: u64,
    offset: u64,
    src: &[u8],
) -> Result<()> {
    check_bounds("device write", offset, src.len() as u64, size)?;
    // SAFETY: destination range checked against the live allocation.
    unsafe { crate::copy::write(ctx, base + offset, src) }
}

pub(crate) fn read_range(
    ctx: &Context,
    base: u64,
    size: u64,
    offset: u64,
    dst: &mut [u8],
) -> Result<()> {
    check_bounds("device read", offset, dst.len() as u64, size)?;
    // SAFETY: source range checked against the live allocation.
    unsafe { crate::copy::read(ctx, base + offset, dst) }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: allocated in `new`, freed once.
            let r = unsafe { sys::cuMemFree_v2(self.ptr) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuMemFree failed: {r:?}");
            }
        }
    }
}

/// Host memory, page-locked and mapped into the device's address space
/// (`CU_MEMHOSTALLOC_DEVICEMAP | PORTABLE`), zeroed. Device code reaches it at
/// [`PinnedHostBuffer::device_addr`], the host at [`PinnedHostBuffer::host_ptr`].
#[derive(Debug)]
pub struct PinnedHostBuffer {
    ctx: Arc<Context>,
    host: *mut u8,
    dev: sys::CUdeviceptr,
    len: u64,
}

// SAFETY: the allocation is process-wide memory; concurrent access is coordinated by
// the users (atomics in the FIFO protocol), as for any shared memory.
unsafe impl Send for PinnedHostBuffer {}
// SAFETY: as above; this type hands out raw pointers only.
unsafe impl Sync for PinnedHostBuffer {}

impl PinnedHostBuffer {
    /// Allocate `len` (> 0) zeroed bytes.
    pub fn new(ctx: &Arc<Context>, len: u64) -> Result<PinnedHostBuffer> {
        if len == 0 {
            return Err(CudaError::invalid("pinned buffer length must be > 0"));
        }
        ctx.bind()?;
        let mut host: *mut c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: context bound; out-pointer valid.
        let r = unsafe { sys::cuMemHostAlloc(&mut host, len as usize, flags) };
        check(r, "cuMemHostAlloc", || {
            format!("allocating {len} pinned bytes")
        })?;
        let mut b = PinnedHostBuffer {
            ctx: ctx.clone(),
            host: host as *mut u8,
            dev: 0,
            len,
        };
        // SAFETY: `host` points to `len` writable bytes we own.
        unsafe { std::ptr::write_bytes(b.host, 0, len as usize) };
        let mut dev: sys::CUdeviceptr = 0;
        // SAFETY: `host` came from cuMemHostAlloc with DEVICEMAP; flags must be 0.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, host, 0) };
        check(r, "cuMemHostGetDevicePointer", || {
            "mapping pinned memory for the device".into()
        })?;
        b.dev = dev;
        Ok(b)
    }

    /// Host pointer to the first byte (valid for `len()` bytes while `self` lives).
    pub fn host_ptr(&self) -> *mut u8 {
        self.host
    }
    /// Device address of the first byte.
    pub fn device_addr(&self) -> u64 {
        self.dev
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PinnedHostBuffer {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: allocated in `new`, freed once.
            let r = unsafe { sys::cuMemFreeHost(self.host as *mut c_void) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuMemFreeHost failed: {r:?}");
            }
        }
    }
}

/// A [`PinnedHostBuffer`] as a host [`Region`](commhal_hal::Region) of this process,
/// registrable by address ([`Registrable::Host`](commhal_hal::Registrable::Host)): what
/// a host-side port transport (host-tcp) reads device code's bytes from with plain
/// copies, no driver copy. Its address is the host pointer; device code uses
/// [`PinnedHostBuffer::device_addr`].
#[derive(Debug, Clone)]
pub struct PinnedRegion(pub Arc<PinnedHostBuffer>);

impl commhal_hal::Region for PinnedRegion {
    fn addr(&self) -> u64 {
        self.0.host_ptr() as u64
    }
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn device(&self) -> commhal_hal::Device {
        commhal_hal::Device::HOST
    }
    fn kind(&self) -> commhal_hal::MemoryKind {
        commhal_hal::MemoryKind::HostPinned
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn registrable(&self) -> Option<commhal_hal::Registrable> {
        Some(commhal_hal::Registrable::Host {
            owner: self.0.clone(),
        })
    }
}
