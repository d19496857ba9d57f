//! A caller's cuMem VMM memory shared with peer processes: the pieces a buffer spans,
//! each piece exported as a POSIX fd, and a peer's pieces mapped back to back.
//!
//! VMM memory is what PyTorch's expandable segments hand out: one large address
//! reservation into which the allocator maps physical pieces (`cuMemCreate` of 2 MiB or
//! 20 MiB, POSIX-fd exportable) as it grows, and unmaps them on `empty_cache`. Legacy
//! CUDA IPC cannot open such memory; its pieces can be exported one by one
//! (`cuMemRetainAllocationHandle` → `cuMemExportToShareableHandle`) and a peer maps
//! them into one reservation of its own in the same order, so the buffer is contiguous
//! there too.
//!
//! [`pieces_of`] finds the pieces from the driver's pointer attributes
//! ([`crate::ipc::PointerInfo`]: mapping base, size and block id per piece).

use std::ffi::{c_int, c_void};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::check;
use crate::error::{CudaError, Result};
use crate::ipc::{self, MemoryKind};

/// One mapped physical piece of VMM memory, as its owner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Piece {
    /// Its address in the owner's process.
    pub base: u64,
    /// Its bytes.
    pub size: u64,
    /// The driver's id of the physical allocation (never reused in the process).
    pub block_id: u64,
}

/// The pieces that hold `[ptr, ptr + len)` (len > 0), in address order, when every
/// one is device memory of `ctx`'s device exportable as a POSIX fd and they follow
/// each other without a gap; `None` when the range is not such memory (then legacy
/// IPC or staging applies). An error when part of the range is not mapped at all.
pub fn pieces_of(ctx: &Context, ptr: u64, len: u64) -> Result<Option<Vec<Piece>>> {
    pieces_from(ctx, &ipc::pointer_info(ctx, ptr)?, ptr, len)
}

/// [`pieces_of`] with `first`, what [`ipc::pointer_info`] said about `ptr`, already in
/// hand: a buffer inside one piece costs no driver call.
pub fn pieces_from(
    ctx: &Context,
    first: &ipc::PointerInfo,
    ptr: u64,
    len: u64,
) -> Result<Option<Vec<Piece>>> {
    let end = ptr
        .checked_add(len)
        .ok_or_else(|| CudaError::invalid(format!("{len} bytes from {ptr:#x} overflow")))?;
    let mut out: Vec<Piece> = Vec::new();
    let mut at = ptr;
    while at < end {
        let info = if at == ptr {
            *first
        } else {
            ipc::pointer_info(ctx, at)?
        };
        if info.kind != MemoryKind::Device || info.device != ctx.ordinal() as i32 {
            return Err(CudaError::invalid(format!(
                "{:#x}, {} bytes into the buffer at {ptr:#x}, is not mapped device memory of device {}: the buffer is shorter than the call needs (freed, or a smaller allocation)",
                at,
                at - ptr,
                ctx.ordinal()
            )));
        }
        let piece = Piece {
            base: info.mapping_base,
            size: info.mapping_size,
            block_id: info.block_id,
        };
        let follows = match out.last() {
            None => piece.base <= at,
            Some(prev) => prev.base + prev.size == piece.base,
        };
        if !info.posix_fd || info.legacy_ipc || !follows || piece.size == 0 {
            return Ok(None);
        }
        at = piece.base + piece.size;
        out.push(piece);
    }
    Ok(Some(out))
}

/// A 64-bit name of a list of pieces (FNV-1a over base, size and block id): equal
/// lists give equal keys, and a piece replaced at the same address (a new block id)
/// gives a new one.
pub fn pieces_key(pieces: &[Piece]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in pieces {
        for w in [p.base, p.size, p.block_id] {
            for b in w.to_le_bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    h
}

/// Export the physical piece mapped at `addr` (this process's VMM memory) as a POSIX
/// fd the caller owns.
pub fn export_piece(ctx: &Context, addr: u64) -> Result<OwnedFd> {
    ctx.bind()?;
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: context bound; out-pointer valid. An address that is not mapped VMM
    // memory is an error return.
    let r = unsafe { sys::cuMemRetainAllocationHandle(&mut handle, addr as *mut c_void) };
    check(r, "cuMemRetainAllocationHandle", || {
        format!("finding the VMM allocation mapped at {addr:#x}")
    })?;
    let mut fd: c_int = -1;
    // SAFETY: `handle` was just retained; for POSIX fds the output is an int.
    let r = unsafe {
        sys::cuMemExportToShareableHandle(
            &mut fd as *mut c_int as *mut c_void,
            handle,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        )
    };
    // SAFETY: the retain above took one reference; this drops it (the mapping keeps
    // its own).
    let released = unsafe { sys::cuMemRelease(handle) };
    check(r, "cuMemExportToShareableHandle", || {
        format!("exporting the VMM allocation at {addr:#x} as a POSIX fd")
    })?;
    check(released, "cuMemRelease", || {
        "dropping the retained VMM handle".into()
    })?;
    if fd < 0 {
        return Err(CudaError::invalid("driver exported a negative fd"));
    }
    // SAFETY: the driver just created this fd for us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// VMM pieces mapped back to back in one reservation of this process: a peer's,
/// imported from their fds ([`PieceMapping::import`]), or created here the way
/// PyTorch's expandable segments allocate ([`PieceMapping::create`]). Unmapped and
/// released on drop.
#[derive(Debug)]
pub struct PieceMapping {
    ctx: Arc<Context>,
    va: u64,
    /// Each piece's handle and size, in mapping order; `mapped` of them are mapped.
    handles: Vec<(sys::CUmemGenericAllocationHandle, u64)>,
    mapped: usize,
    total: u64,
}

impl PieceMapping {
    /// Import `pieces` (each its size and the fd its owner exported) and map them in
    /// order, read/write for `ctx`'s device. The fds stay the caller's.
    pub fn import(ctx: &Arc<Context>, pieces: &[(u64, OwnedFd)]) -> Result<PieceMapping> {
        let g = crate::vmm::granularity(ctx)?;
        let mut total: u64 = 0;
        for (size, _) in pieces {
            if *size == 0 || !size.is_multiple_of(g) {
                return Err(CudaError::invalid(format!(
                    "a peer's VMM piece of {size} bytes is not a multiple of the granularity {g}"
                )));
            }
            total = total
                .checked_add(*size)
                .ok_or_else(|| CudaError::invalid("a peer's VMM pieces overflow"))?;
        }
        if total == 0 {
            return Err(CudaError::invalid("no VMM pieces to map"));
        }
        let mut m = PieceMapping {
            ctx: ctx.clone(),
            va: 0,
            handles: Vec::with_capacity(pieces.len()),
            mapped: 0,
            total,
        };
        for (size, fd) in pieces {
            // context bound by granularity()
            m.handles
                .push((crate::vmm::import_handle(fd.as_fd())?, *size));
        }
        m.map_all(g)?;
        Ok(m)
    }

    /// `len` bytes (> 0) of new POSIX-fd exportable device memory in pieces of
    /// `piece` bytes (a granularity multiple), each its own `cuMemCreate`, mapped
    /// back to back: memory as PyTorch's expandable segments hand it out.
    pub fn create(ctx: &Arc<Context>, len: u64, piece: u64) -> Result<PieceMapping> {
        let g = crate::vmm::granularity(ctx)?;
        if len == 0 || piece == 0 || !piece.is_multiple_of(g) {
            return Err(CudaError::invalid(format!(
                "VMM pieces of {piece} bytes for {len} bytes: both must be > 0, the piece a multiple of the granularity {g}"
            )));
        }
        let count = len.div_ceil(piece);
        let mut m = PieceMapping {
            ctx: ctx.clone(),
            va: 0,
            handles: Vec::with_capacity(count as usize),
            mapped: 0,
            total: count * piece,
        };
        let p = crate::vmm::prop(ctx.device());
        for _ in 0..count {
            let mut handle: sys::CUmemGenericAllocationHandle = 0;
            // SAFETY: context bound by granularity(); `p` initialised; out-pointer
            // valid; the size is a granularity multiple.
            let r = unsafe { sys::cuMemCreate(&mut handle, piece as usize, &p, 0) };
            check(r, "cuMemCreate", || {
                format!("creating a VMM piece of {piece} bytes")
            })?;
            m.handles.push((handle, piece));
        }
        m.map_all(g)?;
        Ok(m)
    }

    /// Reserve the address range, map every handle in order, grant this device
    /// read/write access.
    fn map_all(&mut self, g: u64) -> Result<()> {
        let total = self.total;
        let mut va: sys::CUdeviceptr = 0;
        // SAFETY: context bound; out-pointer valid; size and alignment are
        // granularity multiples.
        let r = unsafe { sys::cuMemAddressReserve(&mut va, total as usize, g as usize, 0, 0) };
        check(r, "cuMemAddressReserve", || {
            format!("reserving {total} bytes for VMM pieces")
        })?;
        self.va = va;
        let mut off = 0;
        for i in 0..self.handles.len() {
            let (handle, size) = self.handles[i];
            // SAFETY: [va + off, va + off + size) lies in the reservation and is not
            // mapped yet; the handle covers `size` bytes from offset 0.
            let r = unsafe { sys::cuMemMap(va + off, size as usize, 0, handle, 0) };
            check(r, "cuMemMap", || {
                format!("mapping a VMM piece of {size} bytes")
            })?;
            self.mapped += 1;
            off += size;
        }
        // SAFETY: the whole range is mapped (above).
        unsafe { crate::vmm::grant_rw(&self.ctx, va, total) }
    }

    /// Copy `src` to `offset` (synchronous).
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        crate::memory::write_range(&self.ctx, self.va, self.total, offset, src)
    }

    /// Where the first piece starts in this process.
    pub fn addr(&self) -> u64 {
        self.va
    }

    /// Bytes mapped.
    pub fn size(&self) -> u64 {
        self.total
    }
}

impl Drop for PieceMapping {
    fn drop(&mut self) {
        if self.ctx.bind().is_err() {
            return;
        }
        let mut off = 0;
        for &(_, size) in &self.handles[..self.mapped] {
            // SAFETY: mapped in import at this offset, unmapped once.
            let r = unsafe { sys::cuMemUnmap(self.va + off, size as usize) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuMemUnmap failed: {r:?}");
            }
            off += size;
        }
        if self.va != 0 {
            // SAFETY: reserved in import, freed once, after unmapping.
            let r = unsafe { sys::cuMemAddressFree(self.va, self.total as usize) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuMemAddressFree failed: {r:?}");
            }
        }
        for &(handle, _) in &self.handles {
            // SAFETY: imported once in import; released once.
            let r = unsafe { sys::cuMemRelease(handle) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuMemRelease failed: {r:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_every_field() {
        let a = Piece {
            base: 0x1000_0000,
            size: 2 << 20,
            block_id: 7,
        };
        let b = Piece {
            base: a.base + a.size,
            ..a
        };
        let k = pieces_key(&[a, b]);
        assert_eq!(k, pieces_key(&[a, b]));
        assert_ne!(k, pieces_key(&[a]));
        assert_ne!(k, pieces_key(&[b, a]));
        assert_ne!(k, pieces_key(&[a, Piece { block_id: 8, ..b }]));
        assert_ne!(k, pieces_key(&[a, Piece { size: 4 << 20, ..b }]));
    }
}
