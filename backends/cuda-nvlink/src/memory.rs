//! Local allocations ([`NvlinkMemory`]), peer mappings ([`NvlinkMapping`]) and the
//! export/map steps shared with cuda-dma ([`ExportSource`], [`map_export`]).
//!
//! Lifetimes: both handles are cheap `Arc` clones; the device memory is freed (or the
//! mapping unmapped) when the last clone drops. A same-process mapping holds a clone
//! of the exporter's allocation, so it can never dangle. A cross-process mapping holds
//! its own reference (cuMem import / IPC open): the exporter may free its handle, the
//! physical memory stays until the mapping drops.

use std::any::Any;
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use commhal_cuda_rt::{Context, DeviceBuffer, VmmAllocation, ipc};
use commhal_hal::error::check_range;
use commhal_hal::{Device, DeviceKind, Export, HalError, MemoryKind, Region, Result};

use crate::driver::{self, to_hal};
use crate::header::{ExportHeader, IPC_HANDLE_LEN, this_host_hash};

/// The device memory behind a local allocation.
#[derive(Debug)]
enum Backing {
    /// cuMem VMM, exportable as a POSIX fd.
    Vmm(VmmAllocation),
    /// `cuMemAlloc`, exportable as a legacy IPC handle.
    Legacy(DeviceBuffer),
}

#[derive(Debug)]
struct LocalAlloc {
    backing: Backing,
    ordinal: u32,
}

impl LocalAlloc {
    fn addr(&self) -> u64 {
        match &self.backing {
            Backing::Vmm(v) => v.addr(),
            Backing::Legacy(b) => b.addr(),
        }
    }
    fn len(&self) -> u64 {
        match &self.backing {
            Backing::Vmm(v) => v.size(),
            Backing::Legacy(b) => b.len(),
        }
    }
    fn context(&self) -> &Arc<Context> {
        match &self.backing {
            Backing::Vmm(v) => v.context(),
            Backing::Legacy(b) => b.context(),
        }
    }
}

impl Drop for LocalAlloc {
    fn drop(&mut self) {
        let addr = self.addr();
        let mut live = live().lock().unwrap_or_else(|p| p.into_inner());
        if live.get(&addr).is_some_and(|w| w.strong_count() == 0) {
            live.remove(&addr);
        }
    }
}

/// Allocations of this process by base address, so a same-process `map` can reuse the
/// pointer (and keep the allocation alive).
fn live() -> &'static Mutex<HashMap<u64, Weak<LocalAlloc>>> {
    static LIVE: OnceLock<Mutex<HashMap<u64, Weak<LocalAlloc>>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

/// A local, exportable device allocation (zeroed at creation). Clones share it.
#[derive(Debug, Clone)]
pub struct NvlinkMemory {
    inner: Arc<LocalAlloc>,
}

impl NvlinkMemory {
    /// Allocate at least `len` bytes on `ctx`'s device: cuMem VMM (length rounded up to
    /// the granularity) unless `legacy_ipc`, then `cuMemAlloc`. Zeroed.
    pub fn alloc(backend: &str, ctx: &Arc<Context>, len: u64, legacy_ipc: bool) -> Result<Self> {
        if len == 0 {
            return Err(HalError::invalid(
                "cannot allocate 0 bytes: ask for at least 1",
            ));
        }
        let backing = if legacy_ipc {
            Backing::Legacy(DeviceBuffer::new(ctx, len).map_err(|e| to_hal(backend, e))?)
        } else {
            let v = VmmAllocation::new(ctx, len).map_err(|e| to_hal(backend, e))?;
            v.fill(0).map_err(|e| to_hal(backend, e))?;
            Backing::Vmm(v)
        };
        let inner = Arc::new(LocalAlloc {
            backing,
            ordinal: ctx.ordinal(),
        });
        live()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(inner.addr(), Arc::downgrade(&inner));
        Ok(NvlinkMemory { inner })
    }

    /// Device address.
    pub fn addr(&self) -> u64 {
        self.inner.addr()
    }
    /// Length in bytes (for VMM: the rounded size).
    pub fn len(&self) -> u64 {
        self.inner.len()
    }
    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The owning device's context.
    pub fn context(&self) -> &Arc<Context> {
        self.inner.context()
    }
    /// True when backed by `cuMemAlloc` (exported with legacy IPC).
    pub fn is_legacy_ipc(&self) -> bool {
        matches!(self.inner.backing, Backing::Legacy(_))
    }
    /// Copy `src` to `offset` (synchronous, bounds-checked).
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        write_region(self.context(), self.addr(), self.len(), offset, src)
    }
    /// Copy from `offset` into `dst` (synchronous, bounds-checked).
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        read_region(self.context(), self.addr(), self.len(), offset, dst)
    }
    /// Set every byte to `value`; returns when they are set.
    pub fn fill(&self, value: u8) -> Result<()> {
        // SAFETY: [addr, addr+len) is this allocation, alive while `self` is.
        unsafe { commhal_cuda_rt::copy::fill(self.context(), self.addr(), self.len(), value) }
            .map_err(|e| to_hal(crate::BACKEND, e))
    }
    /// What to export.
    pub fn source(&self) -> ExportSource<'_> {
        match &self.inner.backing {
            Backing::Vmm(v) => ExportSource::Vmm(v),
            Backing::Legacy(b) => ExportSource::Legacy {
                ctx: b.context(),
                addr: b.addr(),
                len: b.len(),
            },
        }
    }
}

/// Synchronous host → device copy into the region `[base, base+size)` at `offset`.
/// Only called with an allocation or mapping the caller holds, usable in `ctx`.
fn write_region(ctx: &Context, base: u64, size: u64, offset: u64, src: &[u8]) -> Result<()> {
    check_range("device write", offset, src.len() as u64, size)?;
    // SAFETY: the range is inside the caller's live region (checked above), which is
    // addressable in `ctx`.
    unsafe { commhal_cuda_rt::copy::write(ctx, base + offset, src) }
        .map_err(|e| to_hal(crate::BACKEND, e))
}

/// Synchronous device → host copy from the region `[base, base+size)` at `offset`.
/// Same contract as [`write_region`].
fn read_region(ctx: &Context, base: u64, size: u64, offset: u64, dst: &mut [u8]) -> Result<()> {
    check_range("device read", offset, dst.len() as u64, size)?;
    // SAFETY: the range is inside the caller's live region (checked above), which is
    // addressable in `ctx`.
    unsafe { commhal_cuda_rt::copy::read(ctx, base + offset, dst) }
        .map_err(|e| to_hal(crate::BACKEND, e))
}

impl Region for NvlinkMemory {
    fn addr(&self) -> u64 {
        NvlinkMemory::addr(self)
    }
    fn len(&self) -> u64 {
        NvlinkMemory::len(self)
    }
    fn device(&self) -> Device {
        Device {
            kind: DeviceKind::Cuda,
            ordinal: self.inner.ordinal,
        }
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    /// A dma-buf exported by the CUDA driver; the allocation is the owner.
    fn registrable(&self) -> Option<commhal_hal::Registrable> {
        Some(commhal_cuda_rt::dmabuf::registrable(
            crate::BACKEND,
            self.context(),
            std::sync::Arc::new(self.clone()),
        ))
    }
    /// Copies through pinned host memory (host-tcp); the allocation is the owner.
    fn staged(&self) -> Option<std::sync::Arc<dyn commhal_hal::StagedAccess>> {
        commhal_cuda_rt::staging::Staging::offer(
            crate::BACKEND,
            self.context(),
            Region::addr(self),
            Region::len(self),
            std::sync::Arc::new(self.clone()),
        )
    }
}

/// Something [`export`] can describe: a VMM allocation (fd) or a `cuMemAlloc` buffer
/// (legacy IPC handle). cuda-dma builds these for cuda-rt buffers too.
#[derive(Debug, Clone, Copy)]
pub enum ExportSource<'a> {
    /// cuMem VMM allocation.
    Vmm(&'a VmmAllocation),
    /// `cuMemAlloc` memory: base address (must be the allocation's base) and length.
    Legacy {
        /// Owning context.
        ctx: &'a Arc<Context>,
        /// Base address of the allocation.
        addr: u64,
        /// Length in bytes.
        len: u64,
    },
}

/// Describe `src` for a peer, under backend name `backend` (`cuda-nvlink` or
/// `cuda-dma`): header bytes plus the fd (VMM) or the IPC handle (legacy).
pub fn export(backend: &str, src: ExportSource<'_>) -> Result<Export> {
    let (ctx, addr, size, legacy) = match src {
        ExportSource::Vmm(v) => (v.context(), v.addr(), v.size(), false),
        ExportSource::Legacy { ctx, addr, len } => (ctx, addr, len, true),
    };
    let mut h = ExportHeader {
        legacy_ipc: legacy,
        size,
        addr,
        device: ctx.ordinal(),
        pid: std::process::id(),
        host_hash: this_host_hash(),
        ipc_handle: [0; IPC_HANDLE_LEN],
    };
    let mut fds = Vec::new();
    match src {
        ExportSource::Vmm(v) => {
            if v.is_imported() {
                return Err(HalError::invalid(
                    "cannot re-export a peer's mapping: export memory from the process that allocated it",
                ));
            }
            fds.push(v.export_fd().map_err(|e| to_hal(backend, e))?);
        }
        ExportSource::Legacy { ctx, addr, .. } => {
            h.ipc_handle = ipc::ipc_handle(ctx, addr).map_err(|e| to_hal(backend, e))?;
        }
    }
    Ok(Export {
        backend: backend.to_string(),
        len: size,
        bytes: h.encode(),
        fds,
    })
}

#[derive(Debug)]
enum MappingKind {
    /// Imported cuMem allocation, mapped at its own address.
    Imported(VmmAllocation),
    /// Legacy IPC, opened at `addr` in `ctx`; closed on drop.
    Ipc { ctx: Arc<Context>, addr: u64 },
    /// An allocation of this very process (pointer reused).
    SameProcess(NvlinkMemory),
}

#[derive(Debug)]
struct MappingInner {
    kind: MappingKind,
    ctx: Arc<Context>,
    len: u64,
    header: ExportHeader,
}

impl Drop for MappingInner {
    fn drop(&mut self) {
        if let MappingKind::Ipc { ctx, addr } = &self.kind {
            ipc::ipc_close(ctx, *addr);
        }
    }
}

/// A peer's allocation mapped for the local device. Clones share the mapping.
#[derive(Debug, Clone)]
pub struct NvlinkMapping {
    inner: Arc<MappingInner>,
}

impl NvlinkMapping {
    /// Address usable by the local device's kernels and copies.
    pub fn addr(&self) -> u64 {
        match &self.inner.kind {
            MappingKind::Imported(v) => v.addr(),
            MappingKind::Ipc { addr, .. } => *addr,
            MappingKind::SameProcess(m) => m.addr(),
        }
    }
    /// Mapped length in bytes.
    pub fn len(&self) -> u64 {
        self.inner.len
    }
    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }
    /// The local device's context (the one the mapping is usable from).
    pub fn context(&self) -> &Arc<Context> {
        &self.inner.ctx
    }
    /// The exporter's header.
    pub fn header(&self) -> &ExportHeader {
        &self.inner.header
    }
    /// How it was mapped: `"vmm-fd"`, `"legacy-ipc"` or `"same-process"`.
    pub fn method(&self) -> &'static str {
        match &self.inner.kind {
            MappingKind::Imported(_) => "vmm-fd",
            MappingKind::Ipc { .. } => "legacy-ipc",
            MappingKind::SameProcess(_) => "same-process",
        }
    }
    /// Copy `src` to `offset` through the mapping (synchronous, bounds-checked).
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        write_region(&self.inner.ctx, self.addr(), self.len(), offset, src)
    }
    /// Copy from `offset` through the mapping (synchronous, bounds-checked).
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        read_region(&self.inner.ctx, self.addr(), self.len(), offset, dst)
    }
}

impl Region for NvlinkMapping {
    fn addr(&self) -> u64 {
        NvlinkMapping::addr(self)
    }
    fn len(&self) -> u64 {
        NvlinkMapping::len(self)
    }
    fn device(&self) -> Device {
        Device {
            kind: DeviceKind::Cuda,
            ordinal: self.inner.ctx.ordinal(),
        }
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The checks `map` makes before touching the driver: the export was made by
/// `backend` and its header is well formed for its length and descriptors.
pub fn validate_export(backend: &str, export: &Export) -> Result<ExportHeader> {
    export.check_backend(backend)?;
    ExportHeader::parse(&export.bytes, export.len, export.fds.len())
}

/// Map `export` (made by backend `backend`) for `ctx`'s device: same process → reuse
/// the pointer; legacy → `cuIpcOpenMemHandle`; else import the fd.
pub fn map_export(backend: &str, ctx: &Arc<Context>, export: Export) -> Result<NvlinkMapping> {
    let h = validate_export(backend, &export)?;
    let kind = if h.is_this_process() {
        let owner = live()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&h.addr)
            .and_then(Weak::upgrade)
            .ok_or_else(|| {
                HalError::invalid(format!(
                    "the exported memory at {:#x} was freed before it was mapped: keep the allocation alive until every peer mapped it",
                    h.addr
                ))
            })?;
        let mem = NvlinkMemory { inner: owner };
        if mem.len() != h.size {
            return Err(HalError::invalid(format!(
                "export of {:#x} says {} bytes but the live allocation there has {}: the export is stale",
                h.addr,
                h.size,
                mem.len()
            )));
        }
        if ctx.ordinal() != mem.inner.ordinal {
            match &mem.inner.backing {
                Backing::Vmm(v) => {
                    if !driver::can_access_peer(backend, ctx.ordinal(), mem.inner.ordinal)? {
                        return Err(HalError::unsupported(
                            backend,
                            format!(
                                "mapping device {}'s memory on device {}: no peer access between them",
                                mem.inner.ordinal,
                                ctx.ordinal()
                            ),
                        ));
                    }
                    v.grant_access(ctx).map_err(|e| to_hal(backend, e))?;
                }
                Backing::Legacy(_) => driver::enable_peer_access(backend, ctx, mem.context())?,
            }
        }
        MappingKind::SameProcess(mem)
    } else if h.legacy_ipc {
        if h.host_hash != this_host_hash() {
            return Err(HalError::invalid(
                "a legacy CUDA IPC export from another host cannot be mapped: CUDA IPC works only between processes of one machine",
            ));
        }
        let addr = ipc::ipc_open(ctx, &h.ipc_handle).map_err(|e| to_hal(backend, e))?;
        MappingKind::Ipc {
            ctx: ctx.clone(),
            addr,
        }
    } else {
        let fd = export.fds.first().ok_or_else(|| {
            HalError::invalid("a VMM export without its descriptor (parse should have caught this)")
        })?;
        let v = VmmAllocation::import(ctx, fd.as_fd(), h.size).map_err(|e| to_hal(backend, e))?;
        MappingKind::Imported(v)
    };
    Ok(NvlinkMapping {
        inner: Arc::new(MappingInner {
            kind,
            ctx: ctx.clone(),
            len: h.size,
            header: h,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_and_malformed_exports_are_rejected_before_the_driver() {
        let foreign = Export {
            backend: "host-emu".into(),
            len: 4096,
            bytes: vec![0; 40],
            fds: Vec::new(),
        };
        let e = validate_export("cuda-nvlink", &foreign)
            .unwrap_err()
            .to_string();
        assert!(e.contains("host-emu"), "{e}");
        let garbage = Export {
            backend: "cuda-nvlink".into(),
            len: 4096,
            bytes: b"not a header".to_vec(),
            fds: Vec::new(),
        };
        let e = validate_export("cuda-nvlink", &garbage)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a valid cuda-nvlink export"), "{e}");
    }
}
