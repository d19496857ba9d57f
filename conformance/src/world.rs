//! What a rank knows while it runs cases: the [`Plan`] (same on every rank), its
//! bootstrap, the constructed backend, every rank's endpoint; and the per-case [`Ctx`]
//! (the world plus the case's private tag range).

use std::sync::Arc;
use std::time::Duration;

use commhal_channels::WaitPolicy;
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::dynamic::{self, DynMemoryMapped};
use commhal_hal::registry::{Backend, BackendOptions, Catalog};
use commhal_hal::{Device, DeviceKind, Endpoint, Guarantees, HalError, MemoryKind, Rank};
use serde::{Deserialize, Serialize};

use crate::case::Failure;

/// Everything every rank must agree on; serialised to child processes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    /// Registry name of the backend.
    pub backend: String,
    /// Number of ranks.
    pub ranks: u32,
    /// Small counts (CI tier).
    pub quick: bool,
    /// `[backend.NAME]` options as TOML text (e.g. `faults = "early-flush"`).
    pub backend_options: String,
    /// Run only cases whose id contains one of these (empty: all).
    pub filter: Vec<String>,
    /// Bound of every channel wait, in ms.
    pub wait_timeout_ms: u64,
    /// Bound of one case on one rank, in ms (a case still running then is a hang).
    pub case_timeout_ms: u64,
}

impl Plan {
    /// Bound of every channel wait.
    pub fn wait_timeout(&self) -> Duration {
        Duration::from_millis(self.wait_timeout_ms)
    }

    /// Bound of one case.
    pub fn case_timeout(&self) -> Duration {
        Duration::from_millis(self.case_timeout_ms)
    }

    /// Bound of every bootstrap step (the barrier before a case waits for the slowest
    /// rank's previous case).
    pub fn bootstrap_timeout(&self) -> Duration {
        self.case_timeout() + Duration::from_secs(30)
    }

    /// Parsed backend options.
    pub fn options(&self) -> Result<BackendOptions, String> {
        toml::from_str(&self.backend_options)
            .map_err(|e| format!("backend options are not a TOML table: {e}"))
    }

    /// Does `id` pass the filter?
    pub fn selects(&self, id: &str) -> bool {
        self.filter.is_empty() || self.filter.iter().any(|f| id.contains(f.as_str()))
    }

    /// `quick` or `full` count.
    pub fn count(&self, quick: u64, full: u64) -> u64 {
        if self.quick { quick } else { full }
    }
}

/// One rank's view of the run.
#[derive(Debug)]
pub struct World {
    /// This rank.
    pub rank: Rank,
    /// Number of ranks.
    pub size: u32,
    /// Out-of-band exchange.
    pub boot: Arc<dyn Bootstrap>,
    /// The backend under test.
    pub backend: Backend,
    /// Every rank's endpoint, by rank.
    pub endpoints: Vec<Endpoint>,
    /// The device this rank drives.
    pub device: Device,
    /// Where port and switch cases get their buffers: the backend's own memory
    /// transport, or — for port-only backends such as host-tcp, cuda-dma, ib-verbs —
    /// the companion memory backend of the device kind ([`companion_memory`]).
    pub allocator: Option<Arc<dyn DynMemoryMapped>>,
    /// Kind of memory `allocator` hands out (`None`: no allocator).
    pub mem_kind: Option<MemoryKind>,
    /// The plan.
    pub plan: Plan,
}

/// The device a backend's ranks drive: the host for host backends, else the GPU of the
/// rank's index on this node.
pub fn device_for(backend: &str, local_rank: u32) -> Device {
    let kind = if backend.starts_with("cuda") {
        DeviceKind::Cuda
    } else if backend.starts_with("hip") {
        DeviceKind::Hip
    } else {
        return Device::HOST;
    };
    Device {
        kind,
        ordinal: local_rank,
    }
}

/// Kebab-case name of a memory kind (id parameter).
pub fn mem_kind_name(k: MemoryKind) -> &'static str {
    match k {
        MemoryKind::HostShared => "host-shared",
        MemoryKind::HostPinned => "host-pinned",
        MemoryKind::Device => "device",
    }
}

/// The memory backend that supplies buffers to a port-only backend on `device`:
/// host-emu's shared memory for host ranks, cuda-nvlink's VMM memory for CUDA ranks.
pub fn companion_memory(device: Device) -> Option<&'static str> {
    match device.kind {
        DeviceKind::Host => Some("host-emu"),
        DeviceKind::Cuda => Some("cuda-nvlink"),
        DeviceKind::Hip => Some("hip-xgmi"),
    }
}

/// Build the backend named by the plan.
pub fn create_backend(plan: &Plan) -> Result<Backend, String> {
    commhal_backends::link_all();
    let catalog = Catalog::discover().map_err(|e| e.to_string())?;
    let entry = catalog.get(&plan.backend).map_err(|e| e.to_string())?;
    entry.create(&plan.options()?).map_err(|e| e.to_string())
}

impl World {
    /// Set up a rank: build the backend, exchange endpoints.
    pub fn new(plan: Plan, boot: Arc<dyn Bootstrap>) -> Result<World, String> {
        let rank = boot.rank();
        let size = boot.size();
        let backend = create_backend(&plan)?;
        let device = device_for(&plan.backend, rank);
        let me = Endpoint::this_process(rank, device);
        let mine = serde_json::to_vec(&me).map_err(|e| e.to_string())?;
        let all = boot
            .all_gather(&mine)
            .map_err(|e| format!("exchanging endpoints: {e}"))?;
        let endpoints = all
            .iter()
            .map(|b| serde_json::from_slice::<Endpoint>(b).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        let allocator = match &backend.memory {
            Some(m) => Some(Arc::clone(m)),
            None if backend.port.is_some() => match companion_memory(device) {
                Some(name) => {
                    let catalog = Catalog::discover().map_err(|e| e.to_string())?;
                    let entry = catalog.get(name).map_err(|e| {
                        format!("backend `{}` has no memory of its own and its companion `{name}` is missing: {e}", plan.backend)
                    })?;
                    let companion = entry.create(&Default::default()).map_err(|e| {
                        format!("backend `{}` has no memory of its own and its companion `{name}` failed: {e}", plan.backend)
                    })?;
                    companion.memory
                }
                None => None,
            },
            None => None,
        };
        let mem_kind = match &allocator {
            Some(m) => Some(
                m.alloc(device, 64)
                    .map_err(|e| format!("allocating a probe buffer: {e}"))?
                    .kind(),
            ),
            None => None,
        };
        Ok(World {
            rank,
            size,
            boot,
            backend,
            endpoints,
            device,
            allocator,
            mem_kind,
            plan,
        })
    }
}

/// What a case body gets: the world plus its own tag range `tag..tag + 2^20`.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The rank's world.
    pub world: Arc<World>,
    /// First tag of this case's private range.
    pub tag: u64,
}

impl std::ops::Deref for Ctx {
    type Target = World;
    fn deref(&self) -> &World {
        &self.world
    }
}

/// Tags per case.
pub const TAGS_PER_CASE: u64 = 1 << 20;

impl Ctx {
    /// The policy for every channel wait of the case.
    pub fn policy(&self) -> WaitPolicy {
        WaitPolicy::with_timeout(self.plan.wait_timeout())
    }

    /// This rank's partner in pairwise cases and whether it is the pair's first rank
    /// (`None` for an odd last rank, which idles). Pairs are (0,1), (2,3), ...
    pub fn pair(&self) -> Option<(Rank, bool)> {
        let peer = self.rank ^ 1;
        (peer < self.size).then_some((peer, self.rank & 1 == 0))
    }

    /// Tag `k` of this case's range.
    pub fn t(&self, k: u64) -> u64 {
        self.tag + k
    }

    /// The memory transport, or not-supported.
    pub fn memory(&self) -> Result<Arc<dyn DynMemoryMapped>, Failure> {
        self.backend.memory.clone().ok_or_else(|| {
            Failure::NotSupported(format!(
                "backend `{}` has no memory-mapped transport",
                self.backend.name
            ))
        })
    }

    /// The allocator for buffers of port and switch cases (see [`World::allocator`]).
    pub fn allocator(&self) -> Result<Arc<dyn DynMemoryMapped>, Failure> {
        self.allocator.clone().ok_or_else(|| {
            Failure::NotSupported(format!(
                "backend `{}` has no memory-mapped transport and no companion memory backend",
                self.backend.name
            ))
        })
    }

    /// The port transport, or not-supported.
    pub fn port(&self) -> Result<Arc<dyn dynamic::DynPortMapped>, Failure> {
        self.backend.port.clone().ok_or_else(|| {
            Failure::NotSupported(format!(
                "backend `{}` has no port-mapped transport",
                self.backend.name
            ))
        })
    }

    /// The switch transport, or not-supported.
    pub fn switch(&self) -> Result<Arc<dyn dynamic::DynSwitchMapped>, Failure> {
        self.backend.switch.clone().ok_or_else(|| {
            Failure::NotSupported(format!(
                "backend `{}` has no switch-mapped transport",
                self.backend.name
            ))
        })
    }

    /// The guarantees of the transport behind a channel kind.
    pub fn guarantees(&self, kind: crate::case::ChannelKind) -> Option<Guarantees> {
        guarantees_of(&self.backend, kind)
    }

    /// Send a small message to `peer` under case tag `k`.
    pub fn send(&self, peer: Rank, k: u64, data: &[u8]) -> Result<(), HalError> {
        self.boot.send(peer, self.t(k), data)
    }

    /// Receive a small message from `peer` under case tag `k`, bounded by the plan's
    /// wait timeout (not the longer bootstrap timeout), so a peer whose case already
    /// failed makes this rank fail soon too. On timeout the receive is abandoned on a
    /// helper thread; it can only consume this case's own (private) tag.
    pub fn recv(&self, peer: Rank, k: u64) -> Result<Vec<u8>, HalError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (boot, tag) = (self.boot.clone(), self.t(k));
        std::thread::Builder::new()
            .name("case-recv".into())
            .spawn(move || {
                let _ = tx.send(boot.recv(peer, tag));
            })
            .map_err(|e| HalError::io("spawning a bootstrap receive", e))?;
        rx.recv_timeout(self.plan.wait_timeout())
            .unwrap_or_else(|_| {
                Err(HalError::Timeout {
                    what: format!(
                        "a message from rank {peer} (case tag {k}); did its side of the case fail?"
                    ),
                    millis: self.plan.wait_timeout_ms,
                })
            })
    }

    /// Pairwise handshake with `peer` under case tag `k` (bounded like [`Ctx::recv`]).
    pub fn handshake(&self, peer: Rank, k: u64) -> Result<(), HalError> {
        self.send(peer, k, b"sync")?;
        self.recv(peer, k).map(drop)
    }
}

/// The guarantees of the backend's transport for `kind` (`All`: the memory
/// transport's, else the port's, else the switch's).
pub fn guarantees_of(b: &Backend, kind: crate::case::ChannelKind) -> Option<Guarantees> {
    use crate::case::ChannelKind as K;
    match kind {
        K::Memory => b.memory.as_ref().map(|t| t.guarantees()),
        K::Port => b.port.as_ref().map(|t| t.guarantees()),
        K::Switch => b.switch.as_ref().map(|t| t.guarantees()),
        K::All => guarantees_of(b, K::Memory)
            .or_else(|| guarantees_of(b, K::Port))
            .or_else(|| guarantees_of(b, K::Switch)),
    }
}
