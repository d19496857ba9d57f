//! What cuda-dma registers and targets.
//!
//! `register` accepts device memory it can both export and address with the copy
//! engine: cuda-nvlink allocations ([`NvlinkMemory`]) and mappings ([`NvlinkMapping`],
//! usable as a *source* only), and cuda-rt buffers wrapped as [`CudaRtRegion`]. Any
//! other region is [`HalError::Unregistered`]. The registered handle holds a clone of
//! the memory, so it never dangles.

use std::any::Any;
use std::sync::Arc;

use commhal_backend_cuda_nvlink::driver::{self, to_hal};
use commhal_backend_cuda_nvlink::transport::legacy_ipc_from_env;
use commhal_backend_cuda_nvlink::{ExportSource, NvlinkMapping, NvlinkMemory};
use commhal_cuda_rt::{DeviceBuffer, VmmAllocation};
use commhal_hal::{Device, DeviceKind, HalError, MemoryKind, Region, Result};

use crate::BACKEND;

/// A cuda-rt allocation as a [`Region`], so it can be registered with cuda-dma.
#[derive(Debug, Clone)]
pub enum CudaRtRegion {
    /// `cuMemAlloc` memory (exported with legacy IPC).
    Buffer(Arc<DeviceBuffer>),
    /// cuMem VMM memory (exported as a POSIX fd unless it is itself an import).
    Vmm(Arc<VmmAllocation>),
}

impl CudaRtRegion {
    /// Allocate `len` (> 0) bytes of zeroed device memory on CUDA device `device` that
    /// cuda-dma registers, exports and its peers import: cuMem VMM memory (exported as a
    /// POSIX fd, length rounded up to the granularity) where the device has VMM with
    /// POSIX-fd handles, `cuMemAlloc` memory (legacy CUDA IPC) otherwise or with
    /// `COMMHAL_CUDA_LEGACY_IPC=1` — the choice cuda-nvlink makes. For users of
    /// cuda-dma without a memory backend (the GPU communicator's regions when
    /// cuda-dma is the only link selected). Synchronous (the zeroing waits).
    pub fn alloc(device: u32, len: u64) -> Result<CudaRtRegion> {
        if len == 0 {
            return Err(HalError::invalid(
                "cannot allocate 0 bytes: ask for at least 1",
            ));
        }
        let ctx = driver::context(BACKEND, device)?;
        let forced = legacy_ipc_from_env()?;
        let vmm = !forced && ctx.supports_vmm_fd().map_err(|e| to_hal(BACKEND, e))?;
        if vmm {
            let v = VmmAllocation::new(&ctx, len).map_err(|e| to_hal(BACKEND, e))?;
            v.fill(0).map_err(|e| to_hal(BACKEND, e))?;
            Ok(CudaRtRegion::Vmm(Arc::new(v)))
        } else {
            let b = DeviceBuffer::new(&ctx, len).map_err(|e| to_hal(BACKEND, e))?;
            b.fill(0).map_err(|e| to_hal(BACKEND, e))?;
            Ok(CudaRtRegion::Buffer(Arc::new(b)))
        }
    }

    fn ordinal(&self) -> u32 {
        match self {
            CudaRtRegion::Buffer(b) => b.context().ordinal(),
            CudaRtRegion::Vmm(v) => v.context().ordinal(),
        }
    }
}

impl Region for CudaRtRegion {
    fn addr(&self) -> u64 {
        match self {
            CudaRtRegion::Buffer(b) => b.addr(),
            CudaRtRegion::Vmm(v) => v.addr(),
        }
    }
    fn len(&self) -> u64 {
        match self {
            CudaRtRegion::Buffer(b) => b.len(),
            CudaRtRegion::Vmm(v) => v.size(),
        }
    }
    fn device(&self) -> Device {
        Device {
            kind: DeviceKind::Cuda,
            ordinal: self.ordinal(),
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
        let ctx = match self {
            CudaRtRegion::Buffer(b) => b.context(),
            CudaRtRegion::Vmm(v) => v.context(),
        };
        Some(commhal_cuda_rt::dmabuf::registrable(
            BACKEND,
            ctx,
            Arc::new(self.clone()),
        ))
    }
    /// Copies through pinned host memory (host-tcp); the allocation is the owner.
    fn staged(&self) -> Option<Arc<dyn commhal_hal::StagedAccess>> {
        let ctx = match self {
            CudaRtRegion::Buffer(b) => b.context(),
            CudaRtRegion::Vmm(v) => v.context(),
        };
        commhal_cuda_rt::staging::Staging::offer(
            BACKEND,
            ctx,
            self.addr(),
            self.len(),
            Arc::new(self.clone()),
        )
    }
}

#[derive(Debug, Clone)]
enum Held {
    Nvlink(NvlinkMemory),
    Mapping(NvlinkMapping),
    Rt(CudaRtRegion),
}

/// A buffer registered with cuda-dma (a put source, or exported as a put target).
#[derive(Debug, Clone)]
pub struct DmaLocal {
    held: Held,
}

impl DmaLocal {
    /// Register `region` (see the module docs for what is accepted).
    pub fn register(region: &dyn Region) -> Result<DmaLocal> {
        let any = region.as_any();
        let held = if let Some(m) = any.downcast_ref::<NvlinkMemory>() {
            Held::Nvlink(m.clone())
        } else if let Some(m) = any.downcast_ref::<NvlinkMapping>() {
            Held::Mapping(m.clone())
        } else if let Some(r) = any.downcast_ref::<CudaRtRegion>() {
            Held::Rt(r.clone())
        } else if let Some(l) = any.downcast_ref::<DmaLocal>() {
            l.held.clone()
        } else {
            return Err(HalError::Unregistered {
                backend: BACKEND.into(),
                addr: region.addr(),
                len: region.len(),
            });
        };
        Ok(DmaLocal { held })
    }

    /// What to export, or an error for a peer's mapping.
    pub(crate) fn export_source(&self) -> Result<ExportSource<'_>> {
        match &self.held {
            Held::Nvlink(m) => Ok(m.source()),
            Held::Rt(CudaRtRegion::Vmm(v)) => Ok(ExportSource::Vmm(v)),
            Held::Rt(CudaRtRegion::Buffer(b)) => Ok(ExportSource::Legacy {
                ctx: b.context(),
                addr: b.addr(),
                len: b.len(),
            }),
            Held::Mapping(_) => Err(HalError::invalid(
                "cannot export a peer's mapping: export the buffer from the process that allocated it",
            )),
        }
    }
}

impl Region for DmaLocal {
    fn addr(&self) -> u64 {
        match &self.held {
            Held::Nvlink(m) => m.addr(),
            Held::Mapping(m) => m.addr(),
            Held::Rt(r) => r.addr(),
        }
    }
    fn len(&self) -> u64 {
        match &self.held {
            Held::Nvlink(m) => m.len(),
            Held::Mapping(m) => m.len(),
            Held::Rt(r) => r.len(),
        }
    }
    fn device(&self) -> Device {
        match &self.held {
            Held::Nvlink(m) => Region::device(m),
            Held::Mapping(m) => Region::device(m),
            Held::Rt(r) => r.device(),
        }
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A peer's registered buffer, mapped for this port's device: a put destination or
/// the home of a peer semaphore. As a [`Region`] (what
/// [`PortMapped::remote_region`](commhal_hal::PortMapped::remote_region) gives), its
/// address is a device address of the importing device, usable by the copy engines
/// ([`crate::StreamPort`]) and by nothing that would need a memory backend's promises.
#[derive(Debug, Clone)]
pub struct DmaRemote {
    pub(crate) mapping: NvlinkMapping,
}

impl DmaRemote {
    /// Address on the local device.
    pub fn addr(&self) -> u64 {
        self.mapping.addr()
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.mapping.len()
    }
    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.mapping.is_empty()
    }
    /// The local device it is mapped for.
    pub fn device(&self) -> u32 {
        self.mapping.context().ordinal()
    }
    /// The underlying mapping.
    pub fn mapping(&self) -> &NvlinkMapping {
        &self.mapping
    }
}

impl Region for DmaRemote {
    fn addr(&self) -> u64 {
        self.mapping.addr()
    }
    fn len(&self) -> u64 {
        self.mapping.len()
    }
    fn device(&self) -> Device {
        Device {
            kind: DeviceKind::Cuda,
            ordinal: DmaRemote::device(self),
        }
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Foreign;
    impl Region for Foreign {
        fn addr(&self) -> u64 {
            0x1000
        }
        fn len(&self) -> u64 {
            64
        }
        fn device(&self) -> Device {
            Device::HOST
        }
        fn kind(&self) -> MemoryKind {
            MemoryKind::HostShared
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[test]
    fn foreign_regions_are_unregistered() {
        match DmaLocal::register(&Foreign) {
            Err(HalError::Unregistered { backend, addr, len }) => {
                assert_eq!((backend.as_str(), addr, len), ("cuda-dma", 0x1000, 64));
            }
            other => panic!("expected Unregistered, got {other:?}"),
        }
        let boxed: Box<dyn Region> = Box::new(Foreign);
        assert!(matches!(
            DmaLocal::register(&boxed),
            Err(HalError::Unregistered { .. })
        ));
    }
}
