//! The links that carry the communicator's collectives, and its shared regions, from the
//! backends the HAL selects.
//!
//! [`Links::select`] reads the selection as the host communicator does: the names in
//! `COMMHAL_BACKENDS` (or the `COMMHAL_CONFIG` file) in their order, else every
//! available backend ranked by reach over the ranks' endpoints (CUDA devices of one
//! host: `cuda-nvlink` and `cuda-dma`). It keeps two of them:
//!
//! * the first backend with a memory transport (cuda-nvlink): its mappings let the
//!   kernels' SMs load and store into the peers' memory;
//! * `cuda-dma`, if selected: the copy engines, driven through its
//!   [`StreamPort`](commhal_backend_cuda_dma::StreamPort).
//!
//! By default only one that reaches every peer. Their `device` option is set to the
//! communicator's device. Which collective takes which path follows from the pair
//! ([`routes`]):
//!
//! | selection | kernels (SM loads / stores into peers) | copy engines |
//! |---|---|---|
//! | memory backend + cuda-dma (the default on a CUDA host) | every collective | the tuned routes (`*_ce_min`), send/recv groups; every collective with `COMMHAL_GPU_PATH=dma` |
//! | memory backend alone | every collective | none: every `*_ce_min` is off, `COMMHAL_GPU_PATH=dma` and send/recv groups are refused |
//! | cuda-dma alone | none (`COMMHAL_GPU_PATH=kernels` is refused) | every collective (the `COMMHAL_GPU_PATH=dma` path), send/recv groups; plan algorithms with every peer over port channels through the plans' proxy ([`crate::plan_ports`]) |
//!
//! [`Links::share`] allocates the regions and maps every peer's: with a memory backend
//! through its `alloc` (zeroed), `export` and `map`; with cuda-dma alone through
//! [`CudaRtRegion::alloc`] (zeroed device memory) and the HAL's port calls `register`,
//! `export`, `import`, the imports' device addresses from
//! [`PortMapped::remote_region`](commhal_hal::PortMapped::remote_region). Exports travel
//! with the HAL's [`send_export`] (bytes and descriptors over the bootstrap). Every
//! region and mapping stays alive in [`Regions`], which the kernels and the copy
//! engines see only as device addresses (one per rank and region: [`Regions::addrs`]).
//! A backend whose memory is not device memory of the communicator's CUDA device
//! (host-emu) is refused with an error naming it and what to set.

use std::any::Any;
use std::sync::Arc;

use commhal_backend_cuda_dma::CudaRtRegion;
use commhal_hal::bootstrap::{Bootstrap, recv_export, send_export};
use commhal_hal::dynamic::{DynMemoryMapped, DynPortMapped};
use commhal_hal::registry::{Catalog, Selection, SelectionSource};
use commhal_hal::settings::Env;
use commhal_hal::settings::gpu::GPU_PATH;
use commhal_hal::{Device, DeviceKind, Endpoint, MemoryKind, Region};

use crate::error::{CollError, Result};
use crate::layout::MAX_RANKS;

/// What to tell a user whose selection gives no usable backend.
const SELECT_HINT: &str = "select a CUDA memory backend and the copy engines: COMMHAL_BACKENDS=cuda-nvlink,cuda-dma (cuda-nvlink alone: kernels only; cuda-dma alone: copy engines only; or unset COMMHAL_BACKENDS and COMMHAL_CONFIG's `backends` for the default)";

/// The port backend whose ports are the copy engines.
pub const COPY_ENGINES: &str = commhal_backend_cuda_dma::BACKEND;

/// `COMMHAL_GPU_PATH`: which path the collectives take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuPath {
    /// `kernels`: the NVLink kernels (SM loads and stores), with the tuned copy-engine
    /// routes where cuda-dma is selected.
    Kernels,
    /// `dma`: every collective on the copy engines ([`crate::dma`]).
    Dma,
}

/// `COMMHAL_GPU_PATH` from `env`: `None` when unset or empty (the selection decides).
pub fn parse_gpu_path(env: Env<'_>) -> Result<Option<GpuPath>> {
    match GPU_PATH
        .choice_in(env)
        .map_err(|e| CollError::invalid(e.to_string()))?
    {
        Some("kernels") => Ok(Some(GpuPath::Kernels)),
        Some(_) => Ok(Some(GpuPath::Dma)),
        None => Ok(None),
    }
}

/// Which paths the collectives may take (see the module docs' table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routes {
    /// Kernels may address the peers' memory (a memory backend is selected): the
    /// hand-written kernels, plan algorithms.
    pub kernels: bool,
    /// The copy engines are selected (cuda-dma): the tuned copy-engine routes
    /// (`*_ce_min`) and send/recv groups may run.
    pub copy_engines: bool,
    /// Every collective runs on the copy-engine path.
    pub dma_all: bool,
}

/// The routes of a selection: `memory` the memory backend's name, `copy_engines`
/// cuda-dma's (if selected), `path` `COMMHAL_GPU_PATH`. An error for a path the
/// selection cannot carry, naming the backend to add.
pub fn routes(
    memory: Option<&str>,
    copy_engines: Option<&str>,
    path: Option<GpuPath>,
) -> Result<Routes> {
    match (memory, copy_engines, path) {
        (None, None, _) => Err(CollError::invalid(format!(
            "the GPU communicator needs a memory backend (cuda-nvlink: kernels) or cuda-dma (copy engines), and the selection has neither: {SELECT_HINT}"
        ))),
        (Some(_), Some(_), p) => Ok(Routes {
            kernels: true,
            copy_engines: true,
            dma_all: p == Some(GpuPath::Dma),
        }),
        (Some(m), None, Some(GpuPath::Dma)) => Err(CollError::invalid(format!(
            "COMMHAL_GPU_PATH=dma runs every collective on the copy engines, which cuda-dma drives, but the backends selected give only `{m}`: add cuda-dma to COMMHAL_BACKENDS (COMMHAL_BACKENDS={m},cuda-dma), or unset COMMHAL_GPU_PATH for the kernels"
        ))),
        (Some(_), None, _) => Ok(Routes {
            kernels: true,
            copy_engines: false,
            dma_all: false,
        }),
        (None, Some(d), Some(GpuPath::Kernels)) => Err(CollError::invalid(format!(
            "COMMHAL_GPU_PATH=kernels needs a memory backend through which the kernels address the peers' memory, but the backends selected give only `{d}` (copy engines): add cuda-nvlink to COMMHAL_BACKENDS (COMMHAL_BACKENDS=cuda-nvlink,{d}), or unset COMMHAL_GPU_PATH for the copy engines"
        ))),
        (None, Some(_), _) => Ok(Routes {
            kernels: false,
            copy_engines: true,
            dma_all: true,
        }),
    }
}

/// The error for what needs the copy engines (send/recv groups) when cuda-dma is not
/// selected.
pub fn needs_copy_engines(what: &str, memory: &str) -> CollError {
    CollError::invalid(format!(
        "{what} runs on the copy engines, which {COPY_ENGINES} drives, and the backends selected give only `{memory}` (kernels): add {COPY_ENGINES} to COMMHAL_BACKENDS (COMMHAL_BACKENDS={memory},{COPY_ENGINES})"
    ))
}

impl Routes {
    /// Which backends carry the collectives, for the benchmark's header: e.g.
    /// `cuda-nvlink (kernels) + cuda-dma (copy engines)`.
    pub fn describe(&self, memory: Option<&str>, copy_engines: Option<&str>) -> String {
        let ce = copy_engines.unwrap_or(COPY_ENGINES);
        match (memory, self.dma_all, self.copy_engines) {
            (Some(m), false, true) => {
                format!("{m} (kernels) + {ce} (copy engines: tuned routes, send/recv)")
            }
            (Some(m), false, false) => format!("{m} (kernels)"),
            (Some(m), true, _) => {
                format!("{ce} (copy engines, COMMHAL_GPU_PATH=dma; regions from {m})")
            }
            (None, _, _) => format!("{ce} (copy engines)"),
        }
    }
}

fn source_words(s: &SelectionSource) -> String {
    match s {
        SelectionSource::Cli => "named by the caller".into(),
        SelectionSource::BackendsEnv => "named by COMMHAL_BACKENDS".into(),
        SelectionSource::ConfigFile(p) => {
            format!("named by the COMMHAL_CONFIG file {}", p.display())
        }
        SelectionSource::Default => "the default selection".into(),
    }
}

/// The backends the communicator's collectives travel over: a memory backend, the
/// copy engines (cuda-dma), or both (see the module docs).
#[derive(Debug, Clone)]
pub struct Links {
    /// The memory backend, by its registry name.
    memory: Option<(String, Arc<dyn DynMemoryMapped>)>,
    /// cuda-dma, by its registry name.
    copy_engines: Option<(String, Arc<dyn DynPortMapped>)>,
    /// A port backend named in the selection for the ranks of other nodes (host-tcp,
    /// ib-verbs): it carries plans across nodes instead of the copy engines.
    network: Option<(String, Arc<dyn DynPortMapped>)>,
    device: Device,
    /// Where the choice came from, for errors.
    source: String,
    /// Every rank's endpoint, by rank (empty when built without a bootstrap).
    endpoints: Vec<Endpoint>,
}

impl Links {
    /// Select the backends for CUDA device `device`: `named` (a list as a command
    /// line gives it), else `COMMHAL_BACKENDS` / `COMMHAL_CONFIG`, else the default
    /// (collective over `boot`: the ranks exchange their endpoints for the reach
    /// ranking).
    pub fn select(boot: &dyn Bootstrap, device: u32, named: Option<&[String]>) -> Result<Links> {
        commhal_backend_cuda_nvlink::link();
        commhal_backend_cuda_dma::link();
        let catalog = Catalog::discover()?;
        Self::select_from(&catalog, Selection::from_env(named)?, boot, device)
    }

    /// [`Links::select`] from `catalog` and `selection` (no environment read).
    pub fn select_from(
        catalog: &Catalog,
        mut selection: Selection,
        boot: &dyn Bootstrap,
        device: u32,
    ) -> Result<Links> {
        let dev = Device {
            kind: DeviceKind::Cuda,
            ordinal: device,
        };
        let me = Endpoint::this_process(boot.rank(), dev);
        let blobs = boot.all_gather(
            &serde_json::to_vec(&me)
                .map_err(|e| CollError::invalid(format!("encoding the endpoint: {e}")))?,
        )?;
        let mut peers = Vec::new();
        let mut endpoints = Vec::new();
        for (r, b) in blobs.iter().enumerate() {
            let e: Endpoint = serde_json::from_slice(b).map_err(|e| {
                CollError::invalid(format!(
                    "rank {r} sent a malformed endpoint ({e}): run the same commhal build on every rank"
                ))
            })?;
            if e.rank != me.rank {
                peers.push(e.clone());
            }
            endpoints.push(e);
        }
        let source = source_words(&selection.source);
        // The GPU backends (memory and port) work on the communicator's device.
        for entry in catalog.resolve(&selection)? {
            let kinds = entry.kinds();
            if !kinds.memory && !kinds.port {
                continue;
            }
            let opts = selection
                .options
                .entry(entry.name().to_string())
                .or_default();
            match opts.get("device").map(|v| v.as_integer()) {
                None => {
                    opts.insert("device".into(), i64::from(device).into());
                }
                Some(Some(d)) if d == i64::from(device) => {}
                Some(_) => {
                    return Err(CollError::invalid(format!(
                        "[backend.{}] device = {} in COMMHAL_CONFIG, but this communicator runs on CUDA device {device}: remove the option (the communicator sets it) or make it {device}",
                        entry.name(),
                        opts["device"]
                    )));
                }
            }
        }
        let explicit = selection.backends.is_some();
        let built = catalog.instantiate(&selection, &me, &peers)?;
        let names: Vec<String> = built.iter().map(|b| b.name.clone()).collect();
        // Alone, a backend must still reach this rank's own device.
        let targets: Vec<&Endpoint> = if peers.is_empty() {
            vec![&me]
        } else {
            peers.iter().collect()
        };
        let reaches = |m: &dyn Fn(&Endpoint) -> bool| explicit || targets.iter().all(|p| m(p));
        let mut memory = None;
        let mut copy_engines = None;
        let mut network = None;
        for b in built {
            // The first named that reaches every peer (ib-verbs refuses GPU ranks, so
            // `ib-verbs,host-tcp` falls back to host-tcp).
            if explicit
                && network.is_none()
                && b.memory.is_none()
                && b.name != COPY_ENGINES
                && let Some(p) = &b.port
                && peers.iter().all(|q| p.reach(&me, q).is_yes())
            {
                network = Some((b.name.clone(), p.clone()));
            }
            if memory.is_none()
                && let Some(m) = &b.memory
                && reaches(&|p| m.reach(&me, p).is_yes())
            {
                memory = Some((b.name.clone(), m.clone()));
            }
            if copy_engines.is_none()
                && b.name == COPY_ENGINES
                && let Some(p) = &b.port
                && reaches(&|q| p.reach(&me, q).is_yes())
            {
                copy_engines = Some((b.name.clone(), p.clone()));
            }
        }
        if memory.is_none() && copy_engines.is_none() {
            return Err(CollError::invalid(format!(
                "the GPU communicator needs a memory-mapped backend whose memory the peers' kernels address, or {COPY_ENGINES} (copy engines), and none of the backends {source} provides one for CUDA device {device} (built: {}): {SELECT_HINT}",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )));
        }
        Ok(Links {
            memory,
            copy_engines,
            network,
            device: dev,
            source,
            endpoints,
        })
    }

    /// A given memory backend, without the copy engines, for CUDA device `device`
    /// (tests, callers that built one).
    pub fn memory_only(mem: Arc<dyn DynMemoryMapped>, device: u32) -> Links {
        Links {
            memory: Some((mem.name().to_string(), mem)),
            copy_engines: None,
            network: None,
            device: Device {
                kind: DeviceKind::Cuda,
                ordinal: device,
            },
            source: "given by the caller".into(),
            endpoints: Vec::new(),
        }
    }

    /// The memory backend's name (`None`: the copy engines carry everything).
    pub fn memory_name(&self) -> Option<&str> {
        self.memory.as_ref().map(|(n, _)| n.as_str())
    }

    /// The copy engines' backend name (`None`: not selected).
    pub fn copy_engines_name(&self) -> Option<&str> {
        self.copy_engines.as_ref().map(|(n, _)| n.as_str())
    }

    /// The copy engines' port backend, by name (`None`: not selected).
    pub fn copy_engines(&self) -> Option<(&str, &Arc<dyn DynPortMapped>)> {
        self.copy_engines.as_ref().map(|(n, p)| (n.as_str(), p))
    }

    /// The port backend for ranks of other nodes (plans across nodes): the one named
    /// beside the GPU backends (host-tcp, ib-verbs), else the copy engines (one host).
    pub fn far_port(&self) -> Option<(&str, &Arc<dyn DynPortMapped>)> {
        self.network
            .as_ref()
            .map(|(n, p)| (n.as_str(), p))
            .or_else(|| self.copy_engines())
    }

    /// Every rank's endpoint, by rank (empty for [`Links::memory_only`]).
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The routes of this selection under `path` (`COMMHAL_GPU_PATH`), see [`routes`].
    pub fn routes(&self, path: Option<GpuPath>) -> Result<Routes> {
        routes(self.memory_name(), self.copy_engines_name(), path)
    }

    /// The name of the backend the regions come from: the memory backend, else
    /// cuda-dma.
    pub fn name(&self) -> &str {
        self.memory_name()
            .or(self.copy_engines_name())
            .unwrap_or("none")
    }

    /// `Ok` when `r` is device memory of this communicator's device.
    fn check_device_memory(&self, r: &dyn Region, what: &str) -> Result<()> {
        if r.kind() == MemoryKind::Device && r.device() == self.device {
            return Ok(());
        }
        let d = r.device();
        Err(CollError::invalid(format!(
            "the GPU communicator needs device memory of CUDA device {} for its {what}, but backend `{}` ({}) gives {:?} memory on {:?} device {}: {SELECT_HINT}",
            self.device.ordinal,
            self.name(),
            self.source,
            r.kind(),
            d.kind,
            d.ordinal
        )))
    }

    /// Allocate one region per entry of `lens` (`(what, bytes)`, zeroed) on every rank
    /// and map every peer's (collective over `boot`: every rank calls it with the same
    /// `lens` and `tag`; tags `tag..tag + lens.len()` are used). From the memory
    /// backend when one is selected, else through cuda-dma's register / export /
    /// import.
    pub fn share(&self, boot: &dyn Bootstrap, lens: &[(&str, u64)], tag: u64) -> Result<Regions> {
        let (me, n) = (boot.rank(), boot.size());
        if n as usize > MAX_RANKS {
            return Err(CollError::invalid(format!(
                "{n} ranks: the GPU communicator maps at most {MAX_RANKS}"
            )));
        }
        let side = match (&self.memory, &self.copy_engines) {
            (Some((_, m)), _) => Side::Memory(m.clone()),
            (None, Some((_, p))) => Side::Port(p.clone()),
            (None, None) => return Err(routes(None, None, None).unwrap_err()),
        };
        let mut local = Vec::with_capacity(lens.len());
        for &(what, len) in lens {
            let r = side.alloc(self.device, len).map_err(|e| {
                CollError::invalid(format!(
                    "backend `{}` ({}) cannot allocate the GPU communicator's {what} ({len} bytes on CUDA device {}): {e}; {SELECT_HINT}",
                    self.name(),
                    self.source,
                    self.device.ordinal
                ))
            })?;
            self.check_device_memory(r.as_ref(), what)?;
            local.push(r);
        }
        for p in (0..n).filter(|&p| p != me) {
            for (k, r) in local.iter().enumerate() {
                send_export(boot, p, tag + k as u64, &side.export(r.as_ref())?)?;
            }
        }
        let mut addrs = vec![[0u64; MAX_RANKS]; lens.len()];
        let mut maps = Vec::new();
        for p in 0..n {
            for (k, &(what, len)) in lens.iter().enumerate() {
                if p == me {
                    addrs[k][p as usize] = local[k].addr();
                    continue;
                }
                let m = side.map(recv_export(boot, p, tag + k as u64)?)?;
                let r = m.region(&side, self.name())?;
                if r.len() < len {
                    return Err(CollError::invalid(format!(
                        "rank {p} shared a {}-byte {what} where {len} bytes were expected: every rank must create its Comm with the same capacity and tuning",
                        r.len()
                    )));
                }
                self.check_device_memory(r, what)?;
                addrs[k][p as usize] = r.addr();
                maps.push(m);
            }
        }
        Ok(Regions {
            local,
            _maps: maps,
            addrs,
            backend: side,
        })
    }
}

/// Where a [`Links::share`] takes its regions from (kept alive with them).
#[derive(Debug, Clone)]
enum Side {
    /// A memory backend's `alloc` / `export` / `map`.
    Memory(Arc<dyn DynMemoryMapped>),
    /// cuda-dma: [`CudaRtRegion::alloc`], then the port's `register` / `export` /
    /// `import`.
    Port(Arc<dyn DynPortMapped>),
}

/// A peer's region mapped here: a memory backend's mapping, or a port backend's import.
#[derive(Debug)]
enum Mapped {
    Memory(Box<dyn Region>),
    Port(Box<dyn Any + Send + Sync>),
}

impl Mapped {
    /// The mapping as a region of this device (a port import through
    /// `remote_region`; an error when the backend gives no address).
    fn region(&self, side: &Side, backend: &str) -> Result<&dyn Region> {
        match (self, side) {
            (Mapped::Memory(r), _) => Ok(r.as_ref()),
            (Mapped::Port(r), Side::Port(p)) => {
                let p: &dyn DynPortMapped = p.as_ref();
                p.remote_region(r.as_ref())?.ok_or_else(|| {
                    CollError::invalid(format!(
                        "backend `{backend}` imports peers' buffers as keys, not device addresses, so the copy engines cannot reach them: {SELECT_HINT}"
                    ))
                })
            }
            (Mapped::Port(_), Side::Memory(_)) => Err(CollError::invalid(
                "a port import mixed with a memory backend's regions",
            )),
        }
    }
}

impl Side {
    fn name(&self) -> &str {
        match self {
            Side::Memory(m) => m.name(),
            Side::Port(p) => p.name(),
        }
    }

    fn alloc(&self, device: Device, len: u64) -> commhal_hal::Result<Box<dyn Region>> {
        // Call through the trait objects: `Arc<dyn Dyn*>` is itself a `Dyn*` whose
        // handles would be boxed twice.
        match self {
            Side::Memory(m) => {
                let m: &dyn DynMemoryMapped = m.as_ref();
                m.alloc(device, len)
            }
            Side::Port(p) => {
                let p: &dyn DynPortMapped = p.as_ref();
                if device.kind != DeviceKind::Cuda {
                    return Err(commhal_hal::HalError::invalid(format!(
                        "cuda-dma registers CUDA device memory only, not {:?} device {}",
                        device.kind, device.ordinal
                    )));
                }
                let mem = CudaRtRegion::alloc(device.ordinal, len)?;
                // the registered handle holds the allocation
                p.register(&mem)
            }
        }
    }

    fn export(&self, r: &dyn Region) -> commhal_hal::Result<commhal_hal::Export> {
        match self {
            Side::Memory(m) => {
                let m: &dyn DynMemoryMapped = m.as_ref();
                m.export(r)
            }
            Side::Port(p) => {
                let p: &dyn DynPortMapped = p.as_ref();
                p.export(r)
            }
        }
    }

    fn map(&self, e: commhal_hal::Export) -> commhal_hal::Result<Mapped> {
        match self {
            Side::Memory(m) => {
                let m: &dyn DynMemoryMapped = m.as_ref();
                Ok(Mapped::Memory(m.map(e)?))
            }
            Side::Port(p) => {
                let p: &dyn DynPortMapped = p.as_ref();
                Ok(Mapped::Port(p.import(e)?))
            }
        }
    }
}

/// Regions shared by every rank: this rank's, and every peer's mapped here.
#[derive(Debug)]
pub struct Regions {
    local: Vec<Box<dyn Region>>,
    /// Peers' regions mapped here (kept alive).
    _maps: Vec<Mapped>,
    /// `addrs[k][r]`: region `k` of rank `r` as this rank's device addresses it.
    addrs: Vec<[u64; MAX_RANKS]>,
    /// The backend, alive as long as its regions.
    backend: Side,
}

impl Regions {
    /// Region `k` of every rank, as addressed by this rank's device (0 past the
    /// communicator's ranks, and for a `k` out of range).
    pub fn addrs(&self, k: usize) -> [u64; MAX_RANKS] {
        self.addrs.get(k).copied().unwrap_or([0; MAX_RANKS])
    }

    /// This rank's region `k`; `None` for a `k` out of range.
    pub fn local(&self, k: usize) -> Option<&dyn Region> {
        self.local.get(k).map(|r| r.as_ref())
    }

    /// The backend they come from.
    pub fn backend(&self) -> &str {
        self.backend.name()
    }

    /// Copy from this rank's region `k` at `offset` into `dst` (synchronous,
    /// bounds-checked), through `ctx` (the communicator's context).
    pub fn read(
        &self,
        ctx: &commhal_cuda_rt::Context,
        k: usize,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<()> {
        let r = self.checked(k, offset, dst.len() as u64, "read")?;
        // SAFETY: the range is inside this rank's live region `k` (checked), device
        // memory of `ctx`'s device (checked when it was allocated).
        unsafe { commhal_cuda_rt::copy::read(ctx, r + offset, dst) }?;
        Ok(())
    }

    /// Copy `src` into this rank's region `k` at `offset` (synchronous,
    /// bounds-checked), through `ctx` (the communicator's context).
    pub fn write(
        &self,
        ctx: &commhal_cuda_rt::Context,
        k: usize,
        offset: u64,
        src: &[u8],
    ) -> Result<()> {
        let r = self.checked(k, offset, src.len() as u64, "write")?;
        // SAFETY: the range is inside this rank's live region `k` (checked), device
        // memory of `ctx`'s device (checked when it was allocated).
        unsafe { commhal_cuda_rt::copy::write(ctx, r + offset, src) }?;
        Ok(())
    }

    /// The base of region `k` when `[offset, offset + len)` lies inside it.
    fn checked(&self, k: usize, offset: u64, len: u64, what: &str) -> Result<u64> {
        let r = self.local.get(k).ok_or_else(|| {
            CollError::invalid(format!(
                "region {k} does not exist ({} regions)",
                self.local.len()
            ))
        })?;
        commhal_hal::error::check_range(what, offset, len, r.len())?;
        Ok(r.addr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commhal_hal::bootstrap::InProcBootstrap;
    use commhal_hal::registry::Catalog;

    #[test]
    fn host_memory_is_refused_naming_the_backend_and_the_fix() {
        let boot = InProcBootstrap::create(1).pop().unwrap();
        let host: Arc<dyn DynMemoryMapped> = Arc::new(commhal_backend_host_emu::HostEmu::new());
        let e = Links::memory_only(host, 0)
            .share(&boot, &[("scratch", 4096)], 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`host-emu`"), "{e}");
        assert!(e.contains("COMMHAL_BACKENDS=cuda-nvlink"), "{e}");
        assert!(e.contains("scratch"), "{e}");
    }

    #[test]
    fn a_named_host_backend_is_taken_then_refused() {
        commhal_backend_host_emu::link();
        let boot = InProcBootstrap::create(1).pop().unwrap();
        let catalog = Catalog::with_builtins(commhal_hal::registry::builtin(), None);
        let sel = Selection::resolve(None, Some("host-emu"), None).unwrap();
        let m = Links::select_from(&catalog, sel, &boot, 0).unwrap();
        assert_eq!(m.name(), "host-emu");
        let e = m
            .share(&boot, &[("input", 4096)], 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("named by COMMHAL_BACKENDS"), "{e}");
        assert!(e.contains("COMMHAL_BACKENDS=cuda-nvlink"), "{e}");
    }

    #[test]
    fn a_selection_without_memory_says_what_to_set() {
        commhal_backend_host_emu::link();
        let boot = InProcBootstrap::create(1).pop().unwrap();
        let catalog = Catalog::with_builtins(commhal_hal::registry::builtin(), None);
        let sel = Selection::resolve(None, Some("host-tcp"), None).unwrap();
        let e = Links::select_from(&catalog, sel, &boot, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("host-tcp"), "{e}");
        assert!(e.contains("COMMHAL_BACKENDS=cuda-nvlink"), "{e}");
    }

    #[test]
    fn cuda_nvlink_is_registered_and_says_why_it_is_unavailable() {
        commhal_backend_cuda_nvlink::link();
        let catalog = Catalog::with_builtins(commhal_hal::registry::builtin(), None);
        assert!(
            catalog.names().contains(&"cuda-nvlink"),
            "{:?}",
            catalog.names()
        );
        if commhal_cuda_rt::probe().is_available() {
            return;
        }
        let boot = InProcBootstrap::create(1).pop().unwrap();
        let sel = Selection::resolve(None, Some("cuda-nvlink"), None).unwrap();
        let e = Links::select_from(&catalog, sel, &boot, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cuda-nvlink") && e.contains("CUDA"), "{e}");
    }

    #[test]
    fn a_config_device_other_than_the_comm_s_is_an_error() {
        commhal_backend_host_emu::link();
        let boot = InProcBootstrap::create(1).pop().unwrap();
        let catalog = Catalog::with_builtins(commhal_hal::registry::builtin(), None);
        let mut sel = Selection::resolve(None, Some("host-emu"), None).unwrap();
        let mut o = commhal_hal::registry::BackendOptions::new();
        o.insert("device".into(), 3.into());
        sel.options.insert("host-emu".into(), o);
        let e = Links::select_from(&catalog, sel, &boot, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[backend.host-emu] device = 3"), "{e}");
    }

    #[test]
    fn gpu_path_parses() {
        let value = |v: &'static str| move |_: &str| Some(v.to_string());
        assert_eq!(parse_gpu_path(&|_| None).unwrap(), None);
        assert_eq!(parse_gpu_path(&value(" ")).unwrap(), None);
        assert_eq!(
            parse_gpu_path(&value("kernels")).unwrap(),
            Some(GpuPath::Kernels)
        );
        assert_eq!(parse_gpu_path(&value(" dma ")).unwrap(), Some(GpuPath::Dma));
        let e = parse_gpu_path(&value("ce")).unwrap_err().to_string();
        assert!(
            e.contains("COMMHAL_GPU_PATH=\"ce\"") && e.contains("one of kernels, dma"),
            "{e}"
        );
    }

    /// The selection → routes table of the module docs, and its errors.
    #[test]
    fn selections_give_their_routes() {
        let nv = Some("cuda-nvlink");
        let dma = Some("cuda-dma");
        let both = Routes {
            kernels: true,
            copy_engines: true,
            dma_all: false,
        };
        let kernels_only = Routes {
            kernels: true,
            copy_engines: false,
            dma_all: false,
        };
        let ce_only = Routes {
            kernels: false,
            copy_engines: true,
            dma_all: true,
        };
        // memory + cuda-dma: kernels and the tuned routes; everything on the copy
        // engines with COMMHAL_GPU_PATH=dma
        assert_eq!(routes(nv, dma, None).unwrap(), both);
        assert_eq!(routes(nv, dma, Some(GpuPath::Kernels)).unwrap(), both);
        assert_eq!(
            routes(nv, dma, Some(GpuPath::Dma)).unwrap(),
            Routes {
                dma_all: true,
                ..both
            }
        );
        // memory alone: kernels only; the copy-engine path is refused
        assert_eq!(routes(nv, None, None).unwrap(), kernels_only);
        assert_eq!(
            routes(nv, None, Some(GpuPath::Kernels)).unwrap(),
            kernels_only
        );
        let e = routes(nv, None, Some(GpuPath::Dma))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("add cuda-dma to COMMHAL_BACKENDS")
                && e.contains("COMMHAL_BACKENDS=cuda-nvlink,cuda-dma"),
            "{e}"
        );
        // cuda-dma alone: every collective on the copy engines; kernels refused
        assert_eq!(routes(None, dma, None).unwrap(), ce_only);
        assert_eq!(routes(None, dma, Some(GpuPath::Dma)).unwrap(), ce_only);
        let e = routes(None, dma, Some(GpuPath::Kernels))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("add cuda-nvlink to COMMHAL_BACKENDS")
                && e.contains("COMMHAL_BACKENDS=cuda-nvlink,cuda-dma"),
            "{e}"
        );
        // neither
        for p in [None, Some(GpuPath::Kernels), Some(GpuPath::Dma)] {
            let e = routes(None, None, p).unwrap_err().to_string();
            assert!(e.contains("COMMHAL_BACKENDS=cuda-nvlink,cuda-dma"), "{e}");
        }
    }

    #[test]
    fn the_links_are_named_for_the_benchmark() {
        let nv = Some("cuda-nvlink");
        let dma = Some("cuda-dma");
        let d = |m, c, p| routes(m, c, p).unwrap().describe(m, c);
        assert_eq!(
            d(nv, dma, None),
            "cuda-nvlink (kernels) + cuda-dma (copy engines: tuned routes, send/recv)"
        );
        assert_eq!(d(nv, None, None), "cuda-nvlink (kernels)");
        assert_eq!(d(None, dma, None), "cuda-dma (copy engines)");
        assert_eq!(
            d(nv, dma, Some(GpuPath::Dma)),
            "cuda-dma (copy engines, COMMHAL_GPU_PATH=dma; regions from cuda-nvlink)"
        );
    }

    #[test]
    fn what_needs_a_missing_backend_names_it() {
        let e = needs_copy_engines("send/recv groups", "cuda-nvlink").to_string();
        assert!(
            e.contains("send/recv groups")
                && e.contains("add cuda-dma to COMMHAL_BACKENDS")
                && e.contains("COMMHAL_BACKENDS=cuda-nvlink,cuda-dma"),
            "{e}"
        );
    }

    /// A stand-in registered as `cuda-dma` (host-emu's port transport, always
    /// available), so selections naming it run without a GPU.
    static FAKE_DMA: commhal_hal::registry::BackendDescriptor =
        commhal_hal::registry::BackendDescriptor {
            name: "cuda-dma",
            description: "test stand-in",
            kinds: commhal_hal::TransportKinds {
                memory: false,
                port: true,
                switch: false,
            },
            guarantees: commhal_hal::Guarantees::minimal,
            probe: || commhal_hal::registry::Availability::Available,
            create: |_| Ok(host_emu_port("cuda-dma")),
        };

    /// host-emu's port transport under another name.
    fn host_emu_port(name: &str) -> commhal_hal::registry::Backend {
        commhal_hal::registry::Backend {
            name: name.into(),
            memory: None,
            port: Some(Arc::new(commhal_backend_host_emu::HostEmu::new())),
            switch: None,
        }
    }

    /// A port backend that refuses GPU ranks, as ib-verbs does (host-emu's port
    /// transport joins host devices only).
    static FAKE_NIC: commhal_hal::registry::BackendDescriptor =
        commhal_hal::registry::BackendDescriptor {
            name: "fake-nic",
            create: |_| Ok(host_emu_port("fake-nic")),
            ..FAKE_DMA
        };

    fn catalog_with_fake_dma() -> Catalog {
        commhal_backend_host_emu::link();
        let mut b: Vec<_> = commhal_hal::registry::builtin()
            .into_iter()
            .filter(|d| d.name != "cuda-dma")
            .collect();
        b.push(&FAKE_DMA);
        b.push(&FAKE_NIC);
        Catalog::with_builtins(b, None)
    }

    #[test]
    fn the_port_between_nodes_is_the_first_named_that_reaches_gpu_ranks() {
        let catalog = catalog_with_fake_dma();
        let far = |list: &str| -> Vec<Option<String>> {
            let boots = InProcBootstrap::create(2);
            std::thread::scope(|s| {
                let hs: Vec<_> = boots
                    .iter()
                    .map(|b| {
                        let (catalog, list) = (&catalog, list);
                        s.spawn(move || {
                            let sel = Selection::resolve(None, Some(list), None).unwrap();
                            let l = Links::select_from(catalog, sel, b, b.rank()).unwrap();
                            l.far_port().map(|(n, _)| n.to_string())
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            })
        };
        let some = |n: &str| vec![Some(n.to_string()); 2];
        assert_eq!(far("host-emu,cuda-dma,fake-nic,host-tcp"), some("host-tcp"));
        assert_eq!(far("host-emu,cuda-dma,fake-nic"), some("cuda-dma"));
        assert_eq!(far("host-emu,fake-nic"), vec![None, None]);
    }

    #[test]
    fn cuda_dma_alone_carries_everything_and_provides_the_regions() {
        let boot = InProcBootstrap::create(1).pop().unwrap();
        let catalog = catalog_with_fake_dma();
        let sel = Selection::resolve(None, Some("cuda-dma"), None).unwrap();
        let l = Links::select_from(&catalog, sel, &boot, 0).unwrap();
        assert_eq!(
            (l.memory_name(), l.copy_engines_name(), l.name()),
            (None, Some("cuda-dma"), "cuda-dma")
        );
        assert_eq!(
            l.routes(None).unwrap(),
            Routes {
                kernels: false,
                copy_engines: true,
                dma_all: true
            }
        );
        assert!(l.routes(Some(GpuPath::Kernels)).is_err());
        // the regions come from cuda-dma (its allocation needs a GPU here)
        if !commhal_cuda_rt::probe().is_available() {
            let e = l
                .share(&boot, &[("scratch region", 4096)], 1)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("`cuda-dma`") && e.contains("scratch region"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_memory_backend_with_and_without_cuda_dma() {
        let boot = InProcBootstrap::create(1).pop().unwrap();
        let catalog = catalog_with_fake_dma();
        let sel = Selection::resolve(None, Some("host-emu,cuda-dma"), None).unwrap();
        let l = Links::select_from(&catalog, sel, &boot, 0).unwrap();
        assert_eq!(
            (l.memory_name(), l.copy_engines_name(), l.name()),
            (Some("host-emu"), Some("cuda-dma"), "host-emu")
        );
        assert!(l.routes(None).unwrap().copy_engines);
        // a port backend that is not cuda-dma is no copy engine
        let sel = Selection::resolve(None, Some("host-emu,host-tcp"), None).unwrap();
        let l = Links::select_from(&catalog, sel, &boot, 0).unwrap();
        assert_eq!(
            (l.memory_name(), l.copy_engines_name()),
            (Some("host-emu"), None)
        );
        let e = l.routes(Some(GpuPath::Dma)).unwrap_err().to_string();
        assert!(e.contains("COMMHAL_BACKENDS=host-emu,cuda-dma"), "{e}");
        // ... but the port between nodes, named or not beside cuda-dma
        assert_eq!(l.far_port().map(|(n, _)| n), Some("host-tcp"));
        let sel = Selection::resolve(None, Some("host-emu,cuda-dma,host-tcp"), None).unwrap();
        let l = Links::select_from(&catalog, sel, &boot, 0).unwrap();
        assert_eq!(l.far_port().map(|(n, _)| n), Some("host-tcp"));
        assert_eq!(l.copy_engines_name(), Some("cuda-dma"));
        // without a network backend named, the copy engines carry plans between nodes
        let sel = Selection::resolve(None, Some("host-emu,cuda-dma"), None).unwrap();
        let l = Links::select_from(&catalog, sel, &boot, 0).unwrap();
        assert_eq!(l.far_port().map(|(n, _)| n), Some("cuda-dma"));
    }
}
