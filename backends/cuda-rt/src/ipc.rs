//! What the driver knows about a caller's device pointer, and legacy CUDA IPC
//! (`cuIpcGetMemHandle` / `cuIpcOpenMemHandle`) for `cuMemAlloc` memory — the memory
//! `cudaMalloc` and PyTorch's caching allocator hand out.
//!
//! [`pointer_info`] answers in one driver call (`cuPointerGetAttributes`, which does not
//! fail on foreign pointers) which allocation holds a pointer: its base and size, its
//! buffer id (unique among the allocations a process ever makes, so an address that is
//! freed and handed out again gets a new id), the device, and how it can be shared.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::check;
use crate::error::{CudaError, Result};

/// Bytes of a legacy IPC handle.
pub const IPC_HANDLE_LEN: usize = 64;

/// The kind of memory a pointer refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Device memory (`cuMemAlloc`, `cuMemCreate` + `cuMemMap`, pools).
    Device,
    /// Page-locked host memory known to CUDA.
    Host,
    /// Unified (managed) memory.
    Managed,
    /// Not a pointer CUDA knows (plain host memory, or garbage).
    Unknown,
}

/// The allocation holding a pointer, as the driver reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerInfo {
    /// Memory kind.
    pub kind: MemoryKind,
    /// Start of the allocation (the mapped range for VMM memory).
    pub base: u64,
    /// Bytes of the allocation from `base`.
    pub size: u64,
    /// Unique among the allocations of this process (never reused).
    pub buffer_id: u64,
    /// Device ordinal of the memory (-1 when unknown).
    pub device: i32,
    /// `cuIpcGetMemHandle` works on it (plain `cuMemAlloc` memory).
    pub legacy_ipc: bool,
    /// The driver's mapping that holds the pointer: the whole allocation for
    /// `cuMemAlloc` memory, one `cuMemMap`ped piece for cuMem VMM memory (PyTorch's
    /// expandable segments map 2 MiB or 20 MiB pieces into one reservation).
    pub mapping_base: u64,
    /// Bytes of that mapping.
    pub mapping_size: u64,
    /// Unique among the physical allocations of this process (never reused): a VMM
    /// piece unmapped and replaced at the same address gets a new id.
    pub block_id: u64,
    /// The mapping's physical allocation can be exported as a POSIX file descriptor
    /// (cuMem VMM memory created with that handle type).
    pub posix_fd: bool,
}

impl PointerInfo {
    /// Bytes from `ptr` to the end of the allocation (0 when `ptr` is outside it).
    pub fn bytes_after(&self, ptr: u64) -> u64 {
        if ptr < self.base {
            return 0;
        }
        self.size.saturating_sub(ptr - self.base)
    }
}

/// Ask the driver about `ptr` (with `ctx` bound). Never fails for a pointer CUDA does
/// not know: that gives [`MemoryKind::Unknown`].
pub fn pointer_info(ctx: &Context, ptr: u64) -> Result<PointerInfo> {
    use sys::CUpointer_attribute as A;
    ctx.bind()?;
    let mut attrs = [
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_BUFFER_ID,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        A::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        A::CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
        A::CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
        A::CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID,
        A::CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
    ];
    // One zeroed 8-byte word per attribute: the driver writes each value's own width
    // (4-byte enums and ints, 1-byte bools, 8-byte ids and sizes) at its start, so on a
    // little-endian host the word reads as the value; the device ordinal starts at -1.
    let mut words = [0u64; 11];
    words[3] = u64::from(u32::MAX);
    let mut data: [*mut c_void; 11] = std::array::from_fn(|_| std::ptr::null_mut());
    for (d, w) in data.iter_mut().zip(words.iter_mut()) {
        *d = (w as *mut u64).cast();
    }
    // SAFETY: context bound; `attrs` and `data` have 11 entries each and every data
    // pointer addresses a live 8-byte word, wide enough for every requested attribute;
    // the call writes only through those pointers and does not fail on foreign pointers.
    let r = unsafe {
        sys::cuPointerGetAttributes(
            attrs.len() as u32,
            attrs.as_mut_ptr(),
            data.as_mut_ptr(),
            ptr,
        )
    };
    check(r, "cuPointerGetAttributes", || {
        format!("asking which allocation holds {ptr:#x}")
    })?;
    let low32 = |w: u64| w as u32;
    let kind = if low32(words[1]) & 0xff != 0 {
        MemoryKind::Managed
    } else {
        match low32(words[0]) {
            x if x == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 => MemoryKind::Device,
            x if x == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32 => MemoryKind::Host,
            x if x == sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED as u32 => MemoryKind::Managed,
            _ => MemoryKind::Unknown,
        }
    };
    Ok(PointerInfo {
        kind,
        base: words[5],
        size: words[6],
        buffer_id: words[2],
        device: low32(words[3]) as i32,
        legacy_ipc: words[4] & 0xff != 0,
        mapping_base: words[7],
        mapping_size: words[8],
        block_id: words[9],
        // a bit mask of CUmemAllocationHandleType values; POSIX fd is 1
        posix_fd: low32(words[10]) & 1 != 0,
    })
}

/// The legacy IPC handle of the `cuMemAlloc` allocation starting at `base`.
pub fn ipc_handle(ctx: &Context, base: u64) -> Result<[u8; IPC_HANDLE_LEN]> {
    ctx.bind()?;
    let mut h = sys::CUipcMemHandle_st {
        reserved: [0; IPC_HANDLE_LEN],
    };
    // SAFETY: context bound; out-pointer valid. A pointer that is not the base of a
    // cuMemAlloc allocation is an error return, not undefined behaviour.
    let r = unsafe { sys::cuIpcGetMemHandle(&mut h, base) };
    check(r, "cuIpcGetMemHandle", || {
        format!("making a legacy IPC handle for the allocation at {base:#x}")
    })?;
    let mut out = [0u8; IPC_HANDLE_LEN];
    for (o, b) in out.iter_mut().zip(h.reserved.iter()) {
        *o = *b as u8;
    }
    Ok(out)
}

/// A peer's allocation opened through its legacy IPC handle; closed on drop.
#[derive(Debug)]
pub struct IpcMapping {
    ctx: Arc<Context>,
    addr: u64,
}

/// Open `handle` (another process's, same host) in `ctx` with lazy peer access; returns
/// the allocation's base here. Balance with [`ipc_close`] (or use [`IpcMapping`]).
pub fn ipc_open(ctx: &Context, handle: &[u8; IPC_HANDLE_LEN]) -> Result<u64> {
    ctx.bind()?;
    let mut h = sys::CUipcMemHandle_st {
        reserved: [0; IPC_HANDLE_LEN],
    };
    for (o, b) in h.reserved.iter_mut().zip(handle.iter()) {
        *o = *b as std::ffi::c_char;
    }
    let mut addr: sys::CUdeviceptr = 0;
    // SAFETY: context bound; the handle is passed by value; out-pointer valid. A bogus
    // or stale handle is an error return.
    let r = unsafe {
        sys::cuIpcOpenMemHandle_v2(
            &mut addr,
            h,
            sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
        )
    };
    check(r, "cuIpcOpenMemHandle", || {
        format!(
            "opening a peer's legacy IPC handle on device {} (same host? exporter still alive? a process cannot open its own handles)",
            ctx.ordinal()
        )
    })?;
    Ok(addr)
}

/// Close an address from [`ipc_open`] in `ctx`, once; failures are logged (called from
/// `Drop`).
pub fn ipc_close(ctx: &Context, addr: u64) {
    if ctx.bind().is_err() {
        return;
    }
    // SAFETY: `addr` came from cuIpcOpenMemHandle in this context (the caller's
    // contract) and is closed once.
    let r = unsafe { sys::cuIpcCloseMemHandle(addr) };
    if r != sys::CUresult::CUDA_SUCCESS {
        tracing::warn!("cuIpcCloseMemHandle failed: {r:?}");
    }
}

impl IpcMapping {
    /// Open `handle` (another process's, same host) in `ctx` ([`ipc_open`]).
    pub fn open(ctx: &Arc<Context>, handle: &[u8; IPC_HANDLE_LEN]) -> Result<IpcMapping> {
        Ok(IpcMapping {
            ctx: ctx.clone(),
            addr: ipc_open(ctx, handle)?,
        })
    }

    /// The allocation's base address in this process.
    pub fn addr(&self) -> u64 {
        self.addr
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        ipc_close(&self.ctx, self.addr);
    }
}

/// Error for a pointer that is not device memory of `ctx`'s device.
pub fn not_device_memory(what: &str, ptr: u64, info: &PointerInfo, ctx: &Context) -> CudaError {
    CudaError::invalid(format!(
        "{what} {ptr:#x} is not device memory of device {} (driver says: {:?} memory on device {}): pass a pointer from cudaMalloc / cuMemAlloc / a CUDA tensor on this communicator's device",
        ctx.ordinal(),
        info.kind,
        info.device
    ))
}
