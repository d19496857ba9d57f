//! The communicator's shared regions, from a `MemoryMapped` backend the HAL selects.
//!
//! [`MemoryBackend::select`] picks the backend as the host communicator does: the names
//! in `COMMHAL_BACKENDS` (or the `COMMHAL_CONFIG` file) in their order, else every
//! available backend ranked by reach over the ranks' endpoints (CUDA devices of one
//! host: `cuda-nvlink`). The first one with a memory transport is used; by default only
//! one that reaches every peer. Its `device` option is set to the communicator's device,
//! so its mappings are usable by that device's kernels.
//!
//! [`MemoryBackend::share`] allocates regions with the backend's `alloc` (zeroed),
//! sends each peer their exports with the HAL's [`send_export`] (bytes and descriptors
//! over the bootstrap), maps the peers' exports with `map`, and keeps every region and
//! mapping alive in [`Regions`], which the kernels see only as device addresses (one
//! per rank and region: [`Regions::addr`]). A backend whose memory is not device memory
//! of the communicator's CUDA device (host-emu) is refused with an error naming it and
//! what to set.

use std::sync::Arc;

use commhal_hal::bootstrap::{Bootstrap, recv_export, send_export};
use commhal_hal::dynamic::DynMemoryMapped;
use commhal_hal::registry::{Catalog, Selection, SelectionSource};
use commhal_hal::{Device, DeviceKind, Endpoint, MemoryKind, Region};

use crate::error::{CollError, Result};
use crate::layout::MAX_RANKS;

/// What to tell a user whose selection gives no usable memory backend.
const SELECT_HINT: &str = "select a CUDA memory backend: COMMHAL_BACKENDS=cuda-nvlink (or unset COMMHAL_BACKENDS and COMMHAL_CONFIG's `backends` for the default)";

/// The memory transport the communicator's regions come from.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    mem: Arc<dyn DynMemoryMapped>,
    device: Device,
    /// Where the choice came from, for errors.
    source: String,
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

impl MemoryBackend {
    /// Select the backend for CUDA device `device` from `COMMHAL_BACKENDS` /
    /// `COMMHAL_CONFIG` or the default (collective over `boot`: the ranks exchange
    /// their endpoints for the reach ranking).
    pub fn select(boot: &dyn Bootstrap, device: u32) -> Result<MemoryBackend> {
        commhal_backend_cuda_nvlink::link();
        commhal_backend_cuda_dma::link();
        let catalog = Catalog::discover()?;
        Self::select_from(&catalog, Selection::from_env(None)?, boot, device)
    }

    /// [`MemoryBackend::select`] from `catalog` and `selection` (no environment read).
    pub fn select_from(
        catalog: &Catalog,
        mut selection: Selection,
        boot: &dyn Bootstrap,
        device: u32,
    ) -> Result<MemoryBackend> {
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
        for (r, b) in blobs.iter().enumerate() {
            let e: Endpoint = serde_json::from_slice(b).map_err(|e| {
                CollError::invalid(format!(
                    "rank {r} sent a malformed endpoint ({e}): run the same commhal build on every rank"
                ))
            })?;
            if e.rank != me.rank {
                peers.push(e);
            }
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
        let mem = built
            .into_iter()
            .filter_map(|b| b.memory)
            .find(|m| explicit || targets.iter().all(|p| m.reach(&me, p).is_yes()))
            .ok_or_else(|| {
                CollError::invalid(format!(
                    "the GPU communicator needs a memory-mapped backend whose memory the peers' kernels address, and none of the backends {source} provides one for CUDA device {device} (built: {}): {SELECT_HINT}",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ))
            })?;
        Ok(MemoryBackend {
            mem,
            device: dev,
            source,
        })
    }

    /// A given backend for CUDA device `device` (tests, callers that built one).
    pub fn new(mem: Arc<dyn DynMemoryMapped>, device: u32) -> MemoryBackend {
        MemoryBackend {
            mem,
            device: Device {
                kind: DeviceKind::Cuda,
                ordinal: device,
            },
            source: "given by the caller".into(),
        }
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        self.mem.name()
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
    /// `lens` and `tag`; tags `tag..tag + lens.len()` are used).
    pub fn share(&self, boot: &dyn Bootstrap, lens: &[(&str, u64)], tag: u64) -> Result<Regions> {
        let (me, n) = (boot.rank(), boot.size());
        if n as usize > MAX_RANKS {
            return Err(CollError::invalid(format!(
                "{n} ranks: the GPU communicator maps at most {MAX_RANKS}"
            )));
        }
        // Call through the trait object: `Arc<dyn DynMemoryMapped>` is itself a
        // `DynMemoryMapped` whose handles would be boxed twice.
        let mem: &dyn DynMemoryMapped = self.mem.as_ref();
        let mut local = Vec::with_capacity(lens.len());
        for &(what, len) in lens {
            let r = mem.alloc(self.device, len).map_err(|e| {
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
                send_export(boot, p, tag + k as u64, &mem.export(r.as_ref())?)?;
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
                let m = mem.map(recv_export(boot, p, tag + k as u64)?)?;
                if m.len() < len {
                    return Err(CollError::invalid(format!(
                        "rank {p} shared a {}-byte {what} where {len} bytes were expected: every rank must create its Comm with the same capacity and tuning",
                        m.len()
                    )));
                }
                self.check_device_memory(m.as_ref(), what)?;
                addrs[k][p as usize] = m.addr();
                maps.push(m);
            }
        }
        Ok(Regions {
            local,
            _maps: maps,
            addrs,
            backend: self.mem.clone(),
        })
    }
}

/// Regions shared by every rank: this rank's, and every peer's mapped here.
#[derive(Debug)]
pub struct Regions {
    local: Vec<Box<dyn Region>>,
    /// Peers' regions mapped here (kept alive; dropped before the local ones).
    _maps: Vec<Box<dyn Region>>,
    /// `addrs[k][r]`: region `k` of rank `r` as this rank's device addresses it.
    addrs: Vec<[u64; MAX_RANKS]>,
    /// The backend, alive as long as its regions.
    backend: Arc<dyn DynMemoryMapped>,
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
        let e = MemoryBackend::new(host, 0)
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
        let m = MemoryBackend::select_from(&catalog, sel, &boot, 0).unwrap();
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
        let e = MemoryBackend::select_from(&catalog, sel, &boot, 0)
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
        let e = MemoryBackend::select_from(&catalog, sel, &boot, 0)
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
        let e = MemoryBackend::select_from(&catalog, sel, &boot, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[backend.host-emu] device = 3"), "{e}");
    }
}
