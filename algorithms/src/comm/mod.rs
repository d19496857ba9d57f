//! The user API: a [`Communicator`] per rank runs collectives and send/recv on host-emu
//! (or any backend whose memory the host can address).
//!
//! ```no_run
//! use std::sync::Arc;
//! use commhal_algorithms::comm::{CommOptions, Communicator};
//! use commhal_algorithms::{DataType, RedOp};
//! use commhal_hal::bootstrap::TcpBootstrap;
//!
//! let boot = Arc::new(TcpBootstrap::from_env()?);
//! let mut comm = Communicator::new(boot, CommOptions::default())?;
//! let send = vec![0u8; 4096];
//! let mut recv = vec![0u8; 4096];
//! comm.all_reduce(&send[..], &mut recv[..], 1024, DataType::F32, RedOp::Sum)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Every call is collective** (except [`Communicator::send`]/[`Communicator::recv`]):
//! every rank calls the same methods in the same order with the same count, dtype, op
//! and root. The first call with a new combination exchanges a small signature through
//! the bootstrap and fails on every rank, naming the differing rank, if they disagree;
//! later calls with a seen combination run without any bootstrap traffic.
//!
//! **Buffers.** Plain slices are copied into and out of registered staging memory.
//! A [`Buffer`] from [`Communicator::alloc`] (collective: every rank allocates the
//! same size, and every rank maps every other's) is used in place — zero-copy — when
//! every rank passes its buffer from the same `alloc` call in the same role.
//!
//! **Algorithms** come from the selector (thresholds as TOML data,
//! [`crate::selector`]); `COMMHAL_ALGO=allreduce:ring,...` or
//! [`CommOptions::algo`] overrides by name. Plans are built, validated and prepared once
//! per (algorithm, placement, root) and reused; scratch and staging grow (collectively,
//! deterministically) when a larger message arrives and are reused after that.

mod collectives;
mod dynamic;
mod error;
mod p2p;
mod shared;

pub use collectives::Collectives;
pub use dynamic::{
    DynCollectives, DynError, DynQueue, DynRecv, DynSend, FromDynQueue, FromDynRecv, FromDynSend,
    Memory,
};
pub use error::CommError;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::dynamic::DynMemoryMapped;
use commhal_hal::registry::{Catalog, Selection};
use commhal_hal::settings::launch::NODE;
use commhal_hal::{AbortFlag, Device, Endpoint, HalError, Rank, Region};

use crate::builders::{Algorithm, build};
use crate::dtype::{DataType, RedOp, check_op};
use crate::exec::port::{Area, Ports};
use crate::exec::raw::{self, Span};
use crate::exec::run::{Invocation, RankBufs};
use crate::exec::sync::{Stop, SyncTable, region_bytes};
use crate::exec::{PortStats, Prepared, packet_area_bytes};
use crate::plan::Collective;
use crate::selector::{Selector, Topology};
use commhal_channels::WaitPolicy;
use shared::{SETUP_TAG_BASE, Shared};

/// Options for [`Communicator::new`]. `Default` reads nothing but sensible defaults;
/// fields left `None` fall back to the environment as documented per field.
#[derive(Debug, Clone, Default)]
pub struct CommOptions {
    /// Backends to try, in order (`None`: `COMMHAL_BACKENDS` / `COMMHAL_CONFIG`, else
    /// every available backend ranked by reach; on a CPU machine that is host-emu).
    pub backends: Option<Vec<String>>,
    /// This rank's virtual node (`None`: `COMMHAL_NODE`, else 0). Ranks on different
    /// virtual nodes (or hosts) never map each other's memory: they talk over port
    /// channels (every algorithm crosses nodes that way; the table picks 2PH, rings and
    /// the chain there), carried by the first backend of an explicit backend list
    /// (`backends`, `COMMHAL_BACKENDS`, `COMMHAL_CONFIG`) whose port transport reaches
    /// every rank on another node with strong signals, e.g. `host-emu,ib-verbs`; by
    /// `host-tcp` otherwise, and always without an explicit list.
    pub node: Option<u32>,
    /// Algorithm overrides `collective:algorithm,...` (`None`: `COMMHAL_ALGO`).
    pub algo: Option<String>,
    /// Tuning table TOML (`None`: the embedded host-emu table).
    pub tuning: Option<String>,
    /// How waits spin, block and time out (`None`: [`WaitPolicy::for_host`]).
    pub wait: Option<WaitPolicy>,
    /// `[backend.NAME]` options by backend name, on top of (and replacing per backend)
    /// those of `COMMHAL_CONFIG`; empty: none. The conformance suite passes its
    /// backend options here (e.g. host-emu's test-only `faults`).
    pub backend_options: std::collections::BTreeMap<String, commhal_hal::registry::BackendOptions>,
}

/// Registered memory from [`Communicator::alloc`]: zero-copy in collectives.
#[derive(Debug)]
pub struct Buffer {
    id: u64,
    comm: u64,
    span: Span,
    _region: Arc<dyn Region>,
}

impl Buffer {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.span.len
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.span.len == 0
    }
    /// The bytes (peers write them only during a collective call, which borrows the
    /// buffer mutably).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the region lives as long as `self`; peers write into it only inside
        // collective calls, which take `&mut Buffer` (or `&Buffer` as a read-only send
        // buffer, never written), so no write overlaps this shared borrow.
        unsafe { raw::slice(self.span) }
    }
    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for as_slice, and `&mut self` makes this the only local access.
        unsafe { raw::slice_mut(self.span) }
    }
}

/// A send (input) buffer: a plain slice (staged) or a registered [`Buffer`].
#[derive(Debug, Clone, Copy)]
pub enum SendBuf<'a> {
    /// Copied into registered staging memory before the call.
    Slice(&'a [u8]),
    /// Used in place.
    Buffer(&'a Buffer),
}

/// A receive (output) buffer: a plain slice (staged) or a registered [`Buffer`].
#[derive(Debug)]
pub enum RecvBuf<'a> {
    /// Filled from registered staging memory after the call.
    Slice(&'a mut [u8]),
    /// Written in place.
    Buffer(&'a mut Buffer),
}

impl<'a> From<&'a [u8]> for SendBuf<'a> {
    fn from(s: &'a [u8]) -> Self {
        SendBuf::Slice(s)
    }
}
impl<'a> From<&'a Vec<u8>> for SendBuf<'a> {
    fn from(s: &'a Vec<u8>) -> Self {
        SendBuf::Slice(s)
    }
}
impl<'a> From<&'a Buffer> for SendBuf<'a> {
    fn from(b: &'a Buffer) -> Self {
        SendBuf::Buffer(b)
    }
}
impl<'a> From<&'a mut [u8]> for RecvBuf<'a> {
    fn from(s: &'a mut [u8]) -> Self {
        RecvBuf::Slice(s)
    }
}
impl<'a> From<&'a mut Vec<u8>> for RecvBuf<'a> {
    fn from(s: &'a mut Vec<u8>) -> Self {
        RecvBuf::Slice(s)
    }
}
impl<'a> From<&'a mut Buffer> for RecvBuf<'a> {
    fn from(b: &'a mut Buffer) -> Self {
        RecvBuf::Buffer(b)
    }
}

impl SendBuf<'_> {
    fn len(&self) -> usize {
        match self {
            SendBuf::Slice(s) => s.len(),
            SendBuf::Buffer(b) => b.len(),
        }
    }
    fn id(&self) -> u64 {
        match self {
            SendBuf::Slice(_) => 0,
            SendBuf::Buffer(b) => b.id,
        }
    }
}

impl RecvBuf<'_> {
    fn len(&self) -> usize {
        match self {
            RecvBuf::Slice(s) => s.len(),
            RecvBuf::Buffer(b) => b.len(),
        }
    }
    fn id(&self) -> u64 {
        match self {
            RecvBuf::Slice(_) => 0,
            RecvBuf::Buffer(b) => b.id,
        }
    }
}

/// The per-call signature every rank must agree on (plus buffer ids: zero-copy needs
/// every rank to pass its buffer of the same `alloc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Signature {
    pub(crate) collective: u64,
    pub(crate) count: u64,
    pub(crate) dtype: u64,
    pub(crate) op: u64,
    pub(crate) root: u64,
    pub(crate) in_place: u64,
    pub(crate) send: u64,
    pub(crate) recv: u64,
}

impl Signature {
    pub(crate) fn to_bytes(self) -> Vec<u8> {
        [
            self.collective,
            self.count,
            self.dtype,
            self.op,
            self.root,
            self.in_place,
            self.send,
            self.recv,
        ]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
    }
    pub(crate) fn from_bytes(b: &[u8]) -> Option<Signature> {
        let w = |i: usize| {
            b.get(i * 8..i * 8 + 8)
                .map(|s| u64::from_le_bytes(s.try_into().unwrap_or_default()))
        };
        Some(Signature {
            collective: w(0)?,
            count: w(1)?,
            dtype: w(2)?,
            op: w(3)?,
            root: w(4)?,
            in_place: w(5)?,
            send: w(6)?,
            recv: w(7)?,
        })
    }
    pub(crate) fn describe(&self) -> String {
        let c = Collective::ALL
            .get(self.collective as usize)
            .map(|c| c.name())
            .unwrap_or("?");
        let d = DataType::ALL
            .get(self.dtype as usize)
            .map(|d| d.name())
            .unwrap_or("?");
        let o = RedOp::ALL
            .get(self.op as usize)
            .map(|o| o.name())
            .unwrap_or("?");
        let buf = |id: u64| {
            if id == 0 {
                "slice".to_string()
            } else {
                format!("buffer #{id}")
            }
        };
        format!(
            "{c}(count {}, {d}, {o}, root {}, {}, send {}, recv {})",
            self.count,
            self.root,
            if self.in_place == 1 {
                "in place"
            } else {
                "out of place"
            },
            buf(self.send),
            buf(self.recv)
        )
    }
}

/// Every rank's endpoint from the all-gathered blobs (JSON, blob `r` from rank `r`,
/// which must name rank `r`: the node layout indexes the endpoints by rank).
pub(crate) fn decode_endpoints(blobs: &[Vec<u8>]) -> Result<Vec<Endpoint>, CommError> {
    blobs
        .iter()
        .enumerate()
        .map(|(r, b)| {
            let e = serde_json::from_slice::<Endpoint>(b).map_err(|e| {
                HalError::Bootstrap(format!("rank {r} sent a malformed endpoint: {e}"))
            })?;
            if e.rank as usize != r {
                return Err(HalError::Bootstrap(format!(
                    "rank {r} sent the endpoint of rank {}: every rank must run the same commhal build",
                    e.rank
                ))
                .into());
            }
            Ok(e)
        })
        .collect()
}

/// Ranks per node of `n` ranks with these endpoints: nodes must be equal-sized runs of
/// consecutive ranks for 2PH; `n` (one node) otherwise.
pub(crate) fn ranks_per_node(endpoints: &[Endpoint], n: u32) -> u32 {
    let mut nodes: Vec<u32> = endpoints.iter().map(|e| e.node).collect();
    nodes.dedup();
    if nodes.len() > 1 && n.is_multiple_of(nodes.len() as u32) {
        let rpn = n / nodes.len() as u32;
        let consecutive = endpoints
            .iter()
            .all(|e| endpoints[(e.rank / rpn * rpn) as usize].node == e.node);
        if consecutive { rpn } else { n }
    } else {
        n
    }
}

/// Which plan a call runs (plans are cached per key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PlanKey {
    algorithm: Algorithm,
    /// (in_place, root, ranks_per_node, blocks, pipeline)
    params: (bool, u32, u32, u32, u32),
}

/// A prepared plan with its scratch and invocation count.
#[derive(Debug)]
struct PlanSlot {
    prep: Prepared,
    scratch: Option<Shared>,
    invocations: u64,
    bufs: Vec<RankBufs>,
}

/// Sends and receives batched between [`Communicator::group_start`] and
/// [`Group::group_end`].
#[derive(Debug)]
pub struct Group<'c, 'a> {
    comm: &'c mut Communicator,
    ops: Vec<p2p::P2pOp<'a>>,
}

impl<'a> Group<'_, 'a> {
    /// Queue a send of `data` to `peer`.
    pub fn send(&mut self, peer: Rank, data: &'a [u8]) -> Result<(), CommError> {
        self.comm.check_peer(peer)?;
        self.ops.push(p2p::P2pOp::Send { peer, data });
        Ok(())
    }
    /// Queue a receive of `out.len()` bytes from `peer`.
    pub fn recv(&mut self, peer: Rank, out: &'a mut [u8]) -> Result<(), CommError> {
        self.comm.check_peer(peer)?;
        self.ops.push(p2p::P2pOp::Recv { peer, out });
        Ok(())
    }
    /// Run every queued operation to completion.
    pub fn group_end(self) -> Result<(), CommError> {
        let c = self.comm;
        c.check_usable()?;
        let r = c.p2p.run(c.rank, &c.sync, c.ports.as_deref(), self.ops);
        if let Err(e) = &r {
            c.fail(e);
        }
        r
    }
}

static NEXT_COMM: AtomicU64 = AtomicU64::new(1);

/// Aborts a [`Communicator`] from any thread ([`Communicator::abort_handle`]).
#[derive(Debug, Clone)]
pub struct AbortHandle {
    flag: Arc<AbortFlag>,
    boot: Arc<dyn Bootstrap>,
}

impl AbortHandle {
    /// Make the communicator's outstanding call (on whichever thread runs it) and
    /// every later call fail promptly with [`HalError::Aborted`] carrying `why`, and
    /// tell the peers through the bootstrap, best effort, so that their calls fail
    /// too, naming this rank. The bootstrap connections then count as gone on the
    /// peers: every communicator sharing that bootstrap stops. Returns without waiting
    /// for anything; only the first call has an effect.
    pub fn abort(&self, why: &str) {
        if self.flag.abort(why) {
            self.boot.abort_job(None, why);
        }
    }
}

/// One rank's handle on a group of ranks. Not `Sync`: calls on one communicator are
/// made by one thread at a time, in the same order on every rank.
#[derive(Debug)]
pub struct Communicator {
    boot: Arc<dyn Bootstrap>,
    rank: Rank,
    n: u32,
    id: u64,
    endpoints: Vec<Endpoint>,
    backend: String,
    mem: Arc<dyn DynMemoryMapped>,
    _sync_mem: Shared,
    sync: SyncTable,
    tag_seq: u64,
    selector: Selector,
    topo: Topology,
    signatures: HashSet<Signature>,
    plans: HashMap<PlanKey, PlanSlot>,
    stage_in: Option<Shared>,
    stage_out: Option<Shared>,
    buffers: HashMap<u64, Vec<Area>>,
    /// Ports to ranks on other nodes (`None` when every rank is on this node).
    ports: Option<Arc<Ports>>,
    buffer_maps: Vec<Shared>,
    next_buffer: u64,
    p2p: p2p::P2p,
    broken: Option<String>,
    /// Most blocks (threads) per rank that leave every rank of this host a core.
    spare_blocks: u32,
    /// The last call's signature and plan: a repeated call skips agreement and selection.
    last: Option<(Signature, PlanKey)>,
}

/// P2P-kind semaphore tag of the goodbye exchange with far peers (see `Drop`).
const BYE_TAG: u32 = 3;

impl Drop for Communicator {
    /// With ranks on other nodes: tell each far peer this rank is done (a port signal
    /// after every earlier op to it) and wait, bounded by the wait timeout, for the
    /// peer to say the same before the port connections close — a peer may still be
    /// flushing to this rank, and its flush needs this rank's receiver to answer.
    /// Skipped on a broken communicator (a peer may be dead).
    fn drop(&mut self) {
        let Some(ports) = self.ports.clone() else {
            return;
        };
        if self.broken.is_some() || self.sync.stop.is_set() {
            return;
        }
        let far: Vec<Rank> = (0..self.n).filter(|&q| ports.is_far(q)).collect();
        let told: Vec<Rank> = far
            .into_iter()
            .filter(|&q| {
                self.sync
                    .signal(q, crate::exec::sync::KIND_P2P, BYE_TAG)
                    .is_ok()
            })
            .collect();
        for q in told {
            if let Err(e) = self.sync.wait(q, crate::exec::sync::KIND_P2P, BYE_TAG) {
                tracing::debug!("rank {}: no goodbye from rank {q}: {e}", self.rank);
            }
        }
    }
}

/// The cross-node port backend an explicit backend list asks for: the first selected
/// backend whose port transport reaches every peer on another node and promises strong
/// signals (the executor relies on a signal landing after the port's earlier writes).
/// `None` means host-tcp: without an explicit list, when the list names no such
/// backend, or when the first one is host-tcp itself (the communicator builds its own,
/// whose receiver wakes futex sleepers).
fn cross_node_port(
    backends: &[commhal_hal::registry::Backend],
    explicit: bool,
    me: &Endpoint,
    peers: &[Endpoint],
) -> Option<Arc<dyn commhal_hal::dynamic::DynPortMapped>> {
    if !explicit {
        return None;
    }
    backends
        .iter()
        .filter_map(|b| b.port.as_ref())
        .find(|p| {
            p.guarantees().signal == commhal_hal::SignalStrength::Strong
                && peers
                    .iter()
                    .filter(|e| !me.same_node(e))
                    .all(|e| p.reach(me, e).is_yes())
        })
        .filter(|p| p.name() != crate::exec::port::HOST_TCP)
        .cloned()
}

impl Communicator {
    /// Join the communicator of every rank of `bootstrap` (collective). Picks the backend
    /// through the registry, exchanges endpoints, allocates and maps the sync regions.
    pub fn new(
        bootstrap: Arc<dyn Bootstrap>,
        options: CommOptions,
    ) -> Result<Communicator, CommError> {
        commhal_backend_host_emu::link();
        let (rank, n) = (bootstrap.rank(), bootstrap.size());
        if options.wait.is_none() {
            // Reject a bad COMMHAL_WAIT_TIMEOUT_MS before any exchange with the peers.
            commhal_channels::wait::timeout_from_env()?;
        }
        let node = match options.node {
            Some(v) => v,
            // in range: the declaration's maximum is u32::MAX
            None => NODE.number_or_default().map_err(HalError::from)? as u32,
        };
        let mut me = Endpoint::this_process(rank, Device::HOST);
        me.node = node;
        let blobs = bootstrap.all_gather(
            &serde_json::to_vec(&me)
                .map_err(|e| CommError::Invalid(format!("encoding the endpoint: {e}")))?,
        )?;
        let endpoints = decode_endpoints(&blobs)?;
        let peers: Vec<Endpoint> = endpoints
            .iter()
            .filter(|e| e.rank != rank)
            .cloned()
            .collect();

        let catalog = Catalog::discover()?;
        if !catalog.errors().is_empty() {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                for e in catalog.errors() {
                    tracing::warn!(
                        "rank {rank}: {e} (ignored: the other backends are used; `commhal info` lists every plugin)"
                    );
                }
            });
        }
        let mut selection = match &options.backends {
            Some(list) => Selection::named(list),
            None => Selection::from_env(None)?,
        };
        selection.options.extend(options.backend_options.clone());
        let backends = catalog.instantiate(&selection, &me, &peers)?;
        let cross_port = cross_node_port(&backends, selection.backends.is_some(), &me, &peers);
        let backend = backends
            .into_iter()
            .find(|b| b.memory.is_some())
            .ok_or_else(|| {
                CommError::Invalid(
                    "no selected backend provides a memory-mapped transport; select host-emu (COMMHAL_BACKENDS=host-emu)".into(),
                )
            })?;
        let mem = backend
            .memory
            .clone()
            .ok_or_else(|| CommError::Invalid("selected backend has no memory transport".into()))?;

        let topo = Topology {
            nranks: n,
            ranks_per_node: ranks_per_node(&endpoints, n),
        };
        let mut selector = match &options.tuning {
            Some(t) => Selector::from_toml(t)?,
            None => Selector::host_emu(),
        };
        selector = match &options.algo {
            Some(a) => selector.with_overrides(a)?,
            None => selector.with_env_overrides()?,
        };
        let local_ranks = endpoints.iter().filter(|e| e.host == me.host).count() as u32;
        let mut tuning = options
            .wait
            .unwrap_or_else(|| WaitPolicy::for_host(local_ranks));

        let mut tag_seq = SETUP_TAG_BASE;
        // Ranks on other nodes: ports, and their memory is never mapped.
        let ports = if endpoints.iter().any(|e| !me.same_node(e)) {
            let transport = match cross_port {
                Some(t) => t,
                None => Ports::host_tcp(tuning.timeout)?,
            };
            let p = Ports::connect(transport, bootstrap.as_ref(), &endpoints, rank, tag_seq)?;
            if !p.wakes() {
                // Far peers' signals land without waking anyone here (an RDMA atomic):
                // block in short sleeps that re-check the word, not on the futex.
                tuning.futex = false;
            }
            tracing::debug!(rank, port = p.name(), "cross-node port backend");
            Some(Arc::new(p))
        } else {
            None
        };
        tag_seq += 1;
        let sync_mem = Shared::alloc(
            &mem,
            bootstrap.as_ref(),
            region_bytes(n),
            tag_seq,
            ports.as_deref(),
        )?;
        tag_seq += 1;
        let stop = Stop {
            local: Arc::new(AbortFlag::new()),
            peers: bootstrap.peer_failure(),
        };
        let sync = SyncTable::new(rank, &sync_mem.areas(), tuning, ports.clone(), stop);
        let p2p = p2p::P2p::new(&mem, bootstrap.as_ref(), &mut tag_seq, ports.as_deref())?;
        // Every rank has mapped every sync region before anyone signals.
        bootstrap.barrier()?;
        tracing::debug!(rank, n, backend = %backend.name, "communicator ready");
        Ok(Communicator {
            boot: bootstrap,
            rank,
            n,
            id: NEXT_COMM.fetch_add(1, Ordering::Relaxed),
            endpoints,
            backend: backend.name.clone(),
            mem,
            _sync_mem: sync_mem,
            sync,
            tag_seq,
            selector,
            topo,
            signatures: HashSet::new(),
            plans: HashMap::new(),
            stage_in: None,
            stage_out: None,
            buffers: HashMap::new(),
            ports,
            buffer_maps: Vec::new(),
            next_buffer: 1,
            p2p,
            broken: None,
            last: None,
            spare_blocks: {
                let cores = std::thread::available_parallelism()
                    .map(|c| c.get() as u32)
                    .unwrap_or(1);
                (cores / local_ranks.max(1)).max(1)
            },
        })
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }
    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.n
    }
    /// The backend in use.
    pub fn backend(&self) -> &str {
        &self.backend
    }
    /// Every rank's endpoint.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }
    /// The topology the selector sees.
    pub fn topology(&self) -> Topology {
        self.topo
    }
    /// What this rank sent over ports to ranks on other nodes so far (all zero when
    /// every rank is on this node: then nothing crosses a node).
    pub fn port_stats(&self) -> PortStats {
        self.ports.as_ref().map(|p| p.stats()).unwrap_or_default()
    }
    /// The port backend carrying traffic to ranks on other nodes (`host-tcp`,
    /// `ib-verbs`, ...); `None` when every rank is on this node.
    pub fn port_backend(&self) -> Option<&str> {
        self.ports.as_ref().map(|p| p.name())
    }
    /// Ranks whose memory this rank maps (itself and the ranks of its node; ranks on
    /// other nodes are reached over ports only and never mapped).
    pub fn mapped_ranks(&self) -> Vec<Rank> {
        (0..self.n)
            .filter(|&q| !self.ports.as_ref().is_some_and(|p| p.is_far(q)))
            .collect()
    }
    /// The bootstrap (for out-of-band exchanges such as benchmark timings).
    pub fn bootstrap(&self) -> &Arc<dyn Bootstrap> {
        &self.boot
    }

    fn next_tag(&mut self) -> u64 {
        self.tag_seq += 1;
        self.tag_seq
    }

    /// Allocate `len` bytes of registered memory on every rank (collective: every rank
    /// calls it in the same order with the same `len`). Zeroed.
    pub fn alloc(&mut self, len: usize) -> Result<Buffer, CommError> {
        self.check_usable()?;
        let tag = self.next_tag();
        let lens = self.boot.all_gather(&(len as u64).to_le_bytes())?;
        if let Some(r) = lens
            .iter()
            .position(|l| l.as_slice() != (len as u64).to_le_bytes())
        {
            return Err(CommError::Mismatch {
                rank: r as u32,
                detail: format!(
                    "alloc of {len} bytes here but rank {r} asked for a different size; every rank must alloc the same size"
                ),
            });
        }
        let shared = Shared::alloc(
            &self.mem,
            self.boot.as_ref(),
            len as u64,
            tag,
            self.ports.as_deref(),
        )?;
        let id = self.next_buffer;
        self.next_buffer += 1;
        let span = shared.spans[self.rank as usize]
            .sub(0, len)
            .unwrap_or(Span::EMPTY);
        let region = shared.local.clone();
        self.buffers.insert(id, shared.areas());
        self.buffer_maps.push(shared);
        Ok(Buffer {
            id,
            comm: self.id,
            span,
            _region: region,
        })
    }

    /// A handle that aborts this communicator from any thread, like `ncclCommAbort`:
    /// see [`AbortHandle::abort`].
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            flag: self.sync.stop.local.clone(),
            boot: self.boot.clone(),
        }
    }

    /// Abort this communicator: see [`AbortHandle::abort`].
    pub fn abort(&self, why: &str) {
        self.abort_handle().abort(why);
    }

    fn check_usable(&self) -> Result<(), CommError> {
        self.sync.stop.check()?;
        match &self.broken {
            Some(why) => Err(CommError::Broken(why.clone())),
            None => Ok(()),
        }
    }

    fn check_buffer(&self, id: u64, comm: u64, what: &str) -> Result<(), CommError> {
        if id != 0 && (comm != self.id || !self.buffers.contains_key(&id)) {
            return Err(CommError::Unregistered(format!(
                "the {what} buffer (#{id}) was allocated by another communicator"
            )));
        }
        Ok(())
    }

    /// Sum (or `op`) of every rank's `count` elements of `send`, on every rank, in `recv`.
    pub fn all_reduce<'a, 'b>(
        &mut self,
        send: impl Into<SendBuf<'a>>,
        recv: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        let send = send.into();
        self.collective(
            Collective::AllReduce,
            Some(send),
            recv.into(),
            count,
            dtype,
            op,
            0,
        )
    }

    /// [`Communicator::all_reduce`] in place (`buf` is send and receive buffer).
    pub fn all_reduce_in_place<'b>(
        &mut self,
        buf: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        self.collective(Collective::AllReduce, None, buf.into(), count, dtype, op, 0)
    }

    /// Every rank's `count` elements, concatenated in rank order (`recv`: n × count).
    pub fn all_gather<'a, 'b>(
        &mut self,
        send: impl Into<SendBuf<'a>>,
        recv: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
    ) -> Result<(), CommError> {
        let send = send.into();
        self.collective(
            Collective::AllGather,
            Some(send),
            recv.into(),
            count,
            dtype,
            RedOp::Sum,
            0,
        )
    }

    /// [`Communicator::all_gather`] in place: this rank's input is chunk `rank` of `buf`.
    pub fn all_gather_in_place<'b>(
        &mut self,
        buf: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
    ) -> Result<(), CommError> {
        self.collective(
            Collective::AllGather,
            None,
            buf.into(),
            count,
            dtype,
            RedOp::Sum,
            0,
        )
    }

    /// Rank r gets chunk r (`count` elements) of the reduction of every rank's
    /// `n × count`-element `send`.
    pub fn reduce_scatter<'a, 'b>(
        &mut self,
        send: impl Into<SendBuf<'a>>,
        recv: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        let send = send.into();
        self.collective(
            Collective::ReduceScatter,
            Some(send),
            recv.into(),
            count,
            dtype,
            op,
            0,
        )
    }

    /// [`Communicator::reduce_scatter`] in place: the result is chunk `rank` of `buf`.
    pub fn reduce_scatter_in_place<'b>(
        &mut self,
        buf: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        self.collective(
            Collective::ReduceScatter,
            None,
            buf.into(),
            count,
            dtype,
            op,
            0,
        )
    }

    /// `root`'s `count` elements on every rank (`send` is read on the root only).
    pub fn broadcast<'a, 'b>(
        &mut self,
        send: impl Into<SendBuf<'a>>,
        recv: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
        root: Rank,
    ) -> Result<(), CommError> {
        let send = send.into();
        self.collective(
            Collective::Broadcast,
            Some(send),
            recv.into(),
            count,
            dtype,
            RedOp::Sum,
            root,
        )
    }

    /// [`Communicator::broadcast`] in place.
    pub fn broadcast_in_place<'b>(
        &mut self,
        buf: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
        root: Rank,
    ) -> Result<(), CommError> {
        self.collective(
            Collective::Broadcast,
            None,
            buf.into(),
            count,
            dtype,
            RedOp::Sum,
            root,
        )
    }

    /// The reduction of every rank's `send`, on `root` only (`recv` is left alone on
    /// other ranks).
    #[allow(clippy::too_many_arguments)]
    pub fn reduce<'a, 'b>(
        &mut self,
        send: impl Into<SendBuf<'a>>,
        recv: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        root: Rank,
    ) -> Result<(), CommError> {
        let send = send.into();
        self.collective(
            Collective::Reduce,
            Some(send),
            recv.into(),
            count,
            dtype,
            op,
            root,
        )
    }

    /// [`Communicator::reduce`] in place.
    pub fn reduce_in_place<'b>(
        &mut self,
        buf: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        root: Rank,
    ) -> Result<(), CommError> {
        self.collective(Collective::Reduce, None, buf.into(), count, dtype, op, root)
    }

    /// Rank r's output chunk p (`count` elements) is rank p's input chunk r (`send`,
    /// `recv`: n × count).
    pub fn all_to_all<'a, 'b>(
        &mut self,
        send: impl Into<SendBuf<'a>>,
        recv: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
    ) -> Result<(), CommError> {
        let send = send.into();
        self.collective(
            Collective::AllToAll,
            Some(send),
            recv.into(),
            count,
            dtype,
            RedOp::Sum,
            0,
        )
    }

    /// [`Communicator::all_to_all`] in place.
    pub fn all_to_all_in_place<'b>(
        &mut self,
        buf: impl Into<RecvBuf<'b>>,
        count: u64,
        dtype: DataType,
    ) -> Result<(), CommError> {
        self.collective(
            Collective::AllToAll,
            None,
            buf.into(),
            count,
            dtype,
            RedOp::Sum,
            0,
        )
    }

    /// Send `data` to `peer` (point to point: only `peer` must call
    /// [`Communicator::recv`] with the same byte count). Returns once `data` was copied
    /// into the peer's memory.
    pub fn send(&mut self, peer: Rank, data: &[u8]) -> Result<(), CommError> {
        let mut g = self.group_start();
        g.send(peer, data)?;
        g.group_end()
    }

    /// Receive `out.len()` bytes from `peer` (which calls [`Communicator::send`]).
    pub fn recv(&mut self, peer: Rank, out: &mut [u8]) -> Result<(), CommError> {
        let mut g = self.group_start();
        g.recv(peer, out)?;
        g.group_end()
    }

    /// Start a group of sends and receives that progress together (so exchanges in both
    /// directions cannot deadlock); run them with [`Group::group_end`].
    pub fn group_start(&mut self) -> Group<'_, '_> {
        Group {
            comm: self,
            ops: Vec::new(),
        }
    }

    fn check_peer(&self, peer: Rank) -> Result<(), CommError> {
        if peer >= self.n || peer == self.rank {
            return Err(CommError::Invalid(format!(
                "peer {peer} is not another rank of this {}-rank communicator (this is rank {})",
                self.n, self.rank
            )));
        }
        Ok(())
    }

    /// The algorithm the selector picks for a call (for logs and benchmarks).
    pub fn algorithm_for(
        &self,
        collective: Collective,
        count: u64,
        dtype: DataType,
    ) -> Result<Algorithm, CommError> {
        let bytes = count.saturating_mul(dtype.size() as u64);
        Ok(self
            .selector
            .select(collective, bytes, self.topo)?
            .algorithm)
    }

    #[allow(clippy::too_many_arguments)]
    fn collective(
        &mut self,
        coll: Collective,
        send: Option<SendBuf<'_>>,
        mut recv: RecvBuf<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        root: Rank,
    ) -> Result<(), CommError> {
        self.check_usable()?;
        let n = self.n;
        let in_place = send.is_none();
        let op = if coll.reduces() { op } else { RedOp::Sum };
        check_op(dtype, op)?;
        let root = if matches!(coll, Collective::Broadcast | Collective::Reduce) {
            if root >= n {
                return Err(CommError::Invalid(format!(
                    "root {root} is not a rank of this {n}-rank communicator (0..{n})"
                )));
            }
            root
        } else {
            0
        };
        let s = dtype.size() as u64;
        let (fi, fo) = coll.io_factors(n);
        let overflow = || {
            CommError::Invalid(format!(
                "count {count} × {} bytes per {dtype} element × {} ranks overflows 64 bits; pass a smaller count",
                s,
                fi.max(fo)
            ))
        };
        let cb = count.checked_mul(s).ok_or_else(overflow)?;
        let in_bytes = cb.checked_mul(fi as u64).ok_or_else(overflow)?;
        let out_bytes = cb.checked_mul(fo as u64).ok_or_else(overflow)?;
        let phys_bytes = in_bytes.max(out_bytes);
        if usize::try_from(phys_bytes).is_err() {
            return Err(overflow());
        }
        let (send_id, recv_id) = (send.map(|b| b.id()).unwrap_or(0), recv.id());
        if let Some(SendBuf::Buffer(b)) = send {
            self.check_buffer(b.id, b.comm, "send")?;
        }
        if let RecvBuf::Buffer(b) = &recv {
            self.check_buffer(b.id, b.comm, "receive")?;
        }
        let need = |what: &str, have: usize, want: u64| {
            if (have as u64) < want {
                Err(CommError::Invalid(format!(
                    "the {what} buffer has {have} bytes but {} of count {count} {dtype} on {n} ranks needs {want}; pass a larger buffer or a smaller count",
                    coll.name()
                )))
            } else {
                Ok(())
            }
        };
        match &send {
            Some(sb) => {
                let is_root = self.rank == root;
                if coll != Collective::Broadcast || is_root {
                    need("send", sb.len(), in_bytes)?;
                }
                if coll != Collective::Reduce || is_root {
                    need("receive", recv.len(), out_bytes)?;
                }
            }
            None => need("in-place", recv.len(), phys_bytes)?,
        }

        let sig = Signature {
            collective: Collective::ALL.iter().position(|c| *c == coll).unwrap_or(0) as u64,
            count,
            dtype: DataType::ALL.iter().position(|d| *d == dtype).unwrap_or(0) as u64,
            op: RedOp::ALL.iter().position(|o| *o == op).unwrap_or(0) as u64,
            root: root as u64,
            in_place: in_place as u64,
            send: send_id,
            recv: recv_id,
        };
        let repeat = self.last.filter(|(l, _)| *l == sig).map(|(_, k)| k);
        if repeat.is_none() {
            self.agree(sig)?;
        }
        if count == 0 {
            return Ok(());
        }
        let r = self.run(
            coll, send, &mut recv, sig, repeat, dtype, op, root, cb, in_bytes, out_bytes,
        );
        if let Err(e) = &r
            && !matches!(e, CommError::Invalid(_) | CommError::Unregistered(_))
        {
            self.fail(e);
        }
        r
    }

    /// A call failed mid-way: the communicator is broken. When the cause is a dead
    /// peer, tell the other ranks which one (once), so that a rank that sees this
    /// rank's connection close first still blames the rank that died.
    fn fail(&mut self, e: &CommError) {
        if self.broken.is_none()
            && let CommError::Hal(HalError::PeerDead { rank, .. }) = e
        {
            self.boot.abort_job(Some(*rank), &e.to_string());
        }
        self.broken = Some(e.to_string());
    }

    /// Exchange `sig` the first time it is seen; fail on every rank if ranks disagree.
    fn agree(&mut self, sig: Signature) -> Result<(), CommError> {
        if self.signatures.contains(&sig) {
            return Ok(());
        }
        let all = self.boot.all_gather(&sig.to_bytes())?;
        let sigs: Vec<Option<Signature>> = all.iter().map(|b| Signature::from_bytes(b)).collect();
        let reference = sigs[0];
        let mut diffs = Vec::new();
        let mut first = None;
        for (r, s) in sigs.iter().enumerate() {
            if *s != reference {
                first.get_or_insert(r as u32);
                diffs.push(format!(
                    "rank {r} called {}",
                    s.map(|s| s.describe())
                        .unwrap_or_else(|| "with a malformed signature".into())
                ));
            }
        }
        if let Some(rank) = first {
            return Err(CommError::Mismatch {
                rank,
                detail: format!(
                    "rank 0 called {} but {}; every rank must pass the same collective, count, dtype, op, root and placement (and, for zero-copy, buffers from the same alloc — or plain slices)",
                    reference.map(|s| s.describe()).unwrap_or_default(),
                    diffs.join("; ")
                ),
            });
        }
        self.signatures.insert(sig);
        Ok(())
    }

    /// Make sure `slot` holds a `Shared` of at least `len` bytes (collective, but every
    /// rank decides the same way because the call signature is the same everywhere).
    fn ensure(
        mem: &Arc<dyn DynMemoryMapped>,
        boot: &dyn Bootstrap,
        (tag_seq, ports): (&mut u64, Option<&Ports>),
        slot: &mut Option<Shared>,
        len: u64,
    ) -> Result<(), CommError> {
        if slot.as_ref().is_some_and(|s| s.len() as u64 >= len) {
            return Ok(());
        }
        let cap = len.max(4096).next_power_of_two();
        *tag_seq += 1;
        *slot = None;
        *slot = Some(Shared::alloc(mem, boot, cap, *tag_seq, ports)?);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        coll: Collective,
        send: Option<SendBuf<'_>>,
        recv: &mut RecvBuf<'_>,
        sig: Signature,
        repeat: Option<PlanKey>,
        dtype: DataType,
        op: RedOp,
        root: Rank,
        cb: u64,
        in_bytes: u64,
        out_bytes: u64,
    ) -> Result<(), CommError> {
        let (me, n) = (self.rank, self.n);
        let in_place = send.is_none();
        let count = sig.count;
        // Plan.
        let key = match repeat {
            Some(k) => k,
            None => {
                let choice = self.selector.select(coll, cb, self.topo)?;
                let mut params = choice.params;
                // Extra blocks are extra host threads: only worth it when cores are spare.
                params.blocks = params.blocks.min(self.spare_blocks).max(1);
                params.in_place = in_place;
                params.root = root;
                PlanKey {
                    algorithm: choice.algorithm,
                    params: (
                        params.in_place,
                        params.root,
                        params.ranks_per_node,
                        params.blocks,
                        params.pipeline,
                    ),
                }
            }
        };
        if !self.plans.contains_key(&key) {
            let (in_place, root, ranks_per_node, blocks, pipeline) = key.params;
            let params = crate::builders::BuildParams {
                nranks: n,
                in_place,
                root,
                ranks_per_node,
                blocks,
                pipeline,
                pairs: vec![],
            };
            let plan = build(key.algorithm, &params)?;
            // every builder crosses nodes by port channels (builders::ports_across_nodes);
            // this refuses a plan that would not, should one appear
            self.check_reach(&plan)?;
            let prep = Prepared::new(plan, me)?;
            self.plans.insert(
                key,
                PlanSlot {
                    prep,
                    scratch: None,
                    invocations: 0,
                    bufs: vec![RankBufs::default(); n as usize],
                },
            );
        }
        // Memory: staging and scratch (grown collectively when too small).
        let phys = in_bytes.max(out_bytes);
        let staged_in = sig.send == 0 || in_place && sig.recv == 0;
        let staged_out = sig.recv == 0;
        if in_place {
            if staged_out {
                Self::ensure(
                    &self.mem,
                    self.boot.as_ref(),
                    (&mut self.tag_seq, self.ports.as_deref()),
                    &mut self.stage_in,
                    phys,
                )?;
            }
        } else {
            if staged_in {
                Self::ensure(
                    &self.mem,
                    self.boot.as_ref(),
                    (&mut self.tag_seq, self.ports.as_deref()),
                    &mut self.stage_in,
                    in_bytes,
                )?;
            }
            if staged_out {
                Self::ensure(
                    &self.mem,
                    self.boot.as_ref(),
                    (&mut self.tag_seq, self.ports.as_deref()),
                    &mut self.stage_out,
                    out_bytes,
                )?;
            }
        }
        let slot = self.plans.get_mut(&key).ok_or_else(|| {
            CommError::Invalid("plan cache lost an entry (internal error)".into())
        })?;
        let plan = &slot.prep.plan;
        let data = plan.scratch.elems(count) * dtype.size() as u64;
        let pk = packet_area_bytes(plan, count, dtype);
        // packet chunks start on 128-byte lines of the area, as on the GPU
        let data_area = data.next_multiple_of(128);
        let copy = (data_area + pk).next_multiple_of(128);
        let rotation = plan.scratch_rotation.max(1) as u64;
        if copy > 0 {
            Self::ensure(
                &self.mem,
                self.boot.as_ref(),
                (&mut self.tag_seq, self.ports.as_deref()),
                &mut slot.scratch,
                copy * rotation,
            )?;
        }
        let rot = slot.invocations % rotation;
        // Copies sit at fixed places in the slot's scratch (it only grows, and a new one
        // is made collectively): with a stride of this call's own size, a call whose
        // size differs from the previous one could write into the copy a peer is still
        // reading from that call.
        let stride = slot
            .scratch
            .as_ref()
            .map_or(0, |s| s.len() as u64 / rotation / 64 * 64);

        // Views for every rank.
        let staged = |s: &Option<Shared>, q: usize| -> Area {
            s.as_ref().map(|s| s.area(q)).unwrap_or(Area::EMPTY)
        };
        let user = |id: u64, q: usize| -> Area {
            self.buffers
                .get(&id)
                .and_then(|v| v.get(q).cloned())
                .unwrap_or(Area::EMPTY)
        };
        let phys_in = |q: usize| -> Area {
            if in_place {
                if staged_out {
                    staged(&self.stage_in, q)
                } else {
                    user(sig.recv, q)
                }
            } else if staged_in {
                staged(&self.stage_in, q)
            } else {
                user(sig.send, q)
            }
        };
        let phys_out = |q: usize| -> Area {
            if in_place {
                phys_in(q)
            } else if staged_out {
                staged(&self.stage_out, q)
            } else {
                user(sig.recv, q)
            }
        };
        let cbu = cb as usize;
        for q in 0..n as usize {
            let (pi, po) = (phys_in(q), phys_out(q));
            let (input, output) = if in_place {
                match coll {
                    Collective::AllGather => (pi.sub(q * cbu, cbu), pi.sub(0, out_bytes as usize)),
                    Collective::ReduceScatter => {
                        (pi.sub(0, in_bytes as usize), pi.sub(q * cbu, cbu))
                    }
                    _ => (pi.sub(0, in_bytes as usize), pi.sub(0, out_bytes as usize)),
                }
            } else {
                (pi.sub(0, in_bytes as usize), po.sub(0, out_bytes as usize))
            };
            let sc = staged(&slot.scratch, q);
            let base = (rot * stride) as usize;
            slot.bufs[q] = RankBufs {
                input: input.unwrap_or(Area::EMPTY),
                output: output.unwrap_or(Area::EMPTY),
                scratch: sc.sub(base, data as usize).unwrap_or(Area::EMPTY),
                packets: sc
                    .sub(base + data_area as usize, pk as usize)
                    .unwrap_or(Area::EMPTY),
            };
        }

        // Copy in.
        let mine = me as usize;
        if in_place {
            if staged_out && let RecvBuf::Slice(s) = recv {
                raw::write_from(
                    phys_in(mine).span.unwrap_or(Span::EMPTY),
                    &s[..phys as usize],
                );
            }
        } else if staged_in && let Some(SendBuf::Slice(s)) = send {
            let take = (in_bytes as usize).min(s.len());
            raw::write_from(phys_in(mine).span.unwrap_or(Span::EMPTY), &s[..take]);
        }

        let inv = Invocation {
            prep: &slot.prep,
            bufs: &slot.bufs,
            count,
            dtype,
            op,
            flag_base: slot.invocations.wrapping_mul(slot.prep.flag_stride),
            sync: &self.sync,
        };
        let result = inv.run();
        slot.invocations += 1;
        result?;
        self.last = Some((sig, key));

        // Copy out.
        let skip = coll == Collective::Reduce && me != root;
        if staged_out
            && !skip
            && let RecvBuf::Slice(s) = recv
        {
            let out = slot.bufs[mine].output.span.unwrap_or(Span::EMPTY);
            if in_place {
                let at = match coll {
                    Collective::ReduceScatter => mine * cbu,
                    _ => 0,
                };
                raw::read_into(out, &mut s[at..at + out.len]);
            } else {
                raw::read_into(out, &mut s[..out.len]);
            }
        }
        Ok(())
    }

    /// Refuse plans that reach across nodes other than by port-channel put, signal,
    /// wait, flush and LL packets (the only ops the cross-node ports carry); switch ops need
    /// every rank on one node.
    fn check_reach(&self, plan: &crate::plan::Plan) -> Result<(), CommError> {
        use crate::plan::{ChannelKind, Op};
        let multi = self.topo.nodes() > 1;
        for (r, rp) in plan.ranks.iter().enumerate() {
            for blk in &rp.blocks {
                let mut ops: Vec<&Op> = Vec::new();
                for o in &blk.ops {
                    match o {
                        Op::Loop { body, .. } => ops.extend(body.iter()),
                        o => ops.push(o),
                    }
                }
                for o in ops {
                    let (ok_far, what) = match o {
                        Op::Put { channel, .. }
                        | Op::Signal { channel, .. }
                        | Op::Wait { channel, .. }
                        | Op::Flush { channel, .. }
                        | Op::PutPackets { channel, .. } => {
                            (*channel == ChannelKind::Port, "a memory channel")
                        }
                        Op::Get { .. } => (false, "a get (cross-node ports only write)"),
                        Op::ReadReduce { .. } => (false, "a read-reduce of mapped peer memory"),
                        Op::ReadReducePackets { .. } => (true, ""),
                        Op::SwitchReduce { .. } | Op::SwitchBroadcast { .. } if multi => {
                            return Err(CommError::Invalid(format!(
                                "plan `{}` uses switch ops, which need every rank on one node; pick a ring or 2PH algorithm",
                                plan.name
                            )));
                        }
                        _ => (true, ""),
                    };
                    if ok_far {
                        continue;
                    }
                    for p in o.peers() {
                        let (a, b) = (&self.endpoints[r], &self.endpoints[p as usize]);
                        if !a.same_node(b) {
                            return Err(CommError::Invalid(format!(
                                "plan `{}` uses {what} between rank {r} (node {}) and rank {p} (node {}); across nodes only port-channel put/signal/flush/packets work: pick a multi-node algorithm (allreduce:2ph-ll, 2ph-hb or ring; allgather/reducescatter:ring; broadcast:chain) or put the ranks on one node",
                                plan.name, a.node, b.node
                            )));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(rank: Rank, node: u32) -> Vec<u8> {
        let mut e = Endpoint::this_process(rank, Device::HOST);
        e.node = node;
        serde_json::to_vec(&e).unwrap()
    }

    #[test]
    fn endpoints_must_name_the_rank_that_sent_them() {
        let good = [blob(0, 0), blob(1, 0), blob(2, 1), blob(3, 1)];
        let e = decode_endpoints(&good).unwrap();
        assert_eq!(ranks_per_node(&e, 4), 2);
        let bad = [blob(0, 0), blob(1, 1), blob(5, 2)];
        let err = decode_endpoints(&bad).unwrap_err().to_string();
        assert!(err.contains("rank 2 sent the endpoint of rank 5"), "{err}");
        let err = decode_endpoints(&[b"{".to_vec()]).unwrap_err().to_string();
        assert!(err.contains("rank 0 sent a malformed endpoint"), "{err}");
    }
}
