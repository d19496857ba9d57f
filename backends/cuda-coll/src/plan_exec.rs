//! Plans on GPUs: kernels generated from plans ([`commhal_algorithms::codegen`]),
//! JIT-compiled by NVRTC (disk-cached by source hash, like every device-src unit) and
//! launched on the [`crate::Comm`]'s stream over the same peer-mapped input and output.
//!
//! Setup (collective, once per `Comm`): one more region per rank from the `Comm`'s
//! memory backend ([`crate::regions`]), the *plan area* (inbound semaphores, local
//! invocation state, scratch copies — layout in `device-src/include/commhal/plan.h`),
//! exported and mapped by every peer.
//!
//! A launch builds (once) the plan for the collective, compiles (once) this rank's
//! kernel for the dtype and op, and queues it with `blocks × replicas` CTAs; `replicas`
//! grows with the message (every rank derives the same value from the same count and
//! SM count) up to the SM count, so every CTA is co-resident (waits spin). Launches use
//! programmatic dependent launch where the hand-written kernels do (`COMMHAL_COLL_PDL`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use commhal_algorithms::builders::{Algorithm, BuildParams, build};
use commhal_algorithms::codegen::{self, CudaKernel, PacketWalk};
use commhal_algorithms::{DataType, Plan, RedOp};
use commhal_cuda_rt::nvrtc::cache::compile_cached;
use commhal_cuda_rt::{CompileRequest, Context, KernelCache, Stream, jit};
use commhal_device_src::HEADERS;
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::settings::SettingError;
use commhal_hal::settings::gpu::{COLL_PDL, PLAN_REPLICAS, PLAN_THREADS};
use commhal_hal::settings::launch::NODE;

use crate::driver::CollModule;
use crate::error::{CollError, Result};
use crate::layout::MAX_RANKS;
use crate::plan_grid::Grid;
use crate::plan_ports::{Nodes, PlanPorts};
use crate::regions::{Links, Regions};
use crate::types::{Collective, Dtype};

/// CTAs per plan block at most (`PLAN_MAX_PARTS`).
pub const MAX_PARTS: u32 = 256;
/// CTAs per plan kernel at most (`PLAN_MAX_CTAS`).
pub const MAX_CTAS: u32 = 1024;
/// Bytes of the semaphore flags, `u64 [sem][part]` (`PLAN_SEM_BYTES`).
pub const SEM_BYTES: u64 = 4096 * MAX_PARTS as u64 * 8;
/// Bytes of the handshake flags, `u64 [2][sender][CTA]` (`PLAN_HS_BYTES`).
pub const HS_BYTES: u64 = 2 * MAX_RANKS as u64 * MAX_CTAS as u64 * 8;
/// Offset of the local state; its first word is the error word (`PLAN_STATE_OFF`).
pub const STATE_OFF: u64 = SEM_BYTES + HS_BYTES;
/// Bytes of the local state (`PLAN_STATE_BYTES`).
pub const STATE_BYTES: u64 = 4 * MAX_CTAS as u64 * 8;
/// Offset of the scratch copies (`PLAN_DATA_OFF`).
pub const DATA_OFF: u64 = STATE_OFF + STATE_BYTES;
/// Device error codes of plan kernels.
pub const ERR_WAIT: u32 = 1;
/// An LL packet never arrived.
pub const ERR_PACKET: u32 = 4;

const TAG_PLAN_AREA: u64 = 0x504c_414e_0000;

/// Kernel argument block, passed by value. Mirrors `struct PlanArgs` in plan.h.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanArgs {
    /// Every rank's input base for this call.
    pub input: [u64; MAX_RANKS],
    /// Every rank's output base for this call.
    pub output: [u64; MAX_RANKS],
    /// Every rank's plan area.
    pub area: [u64; MAX_RANKS],
    /// Message elements.
    pub count: u64,
    /// Distance between the two scratch copies (half the plan scratch).
    pub scratch_copy_bytes: u64,
    /// Bound of every device wait (ns).
    pub spin_ns: u64,
    /// CTAs per plan block.
    pub replicas: u32,
    /// Distance between the two LL63 packet copies, which follow the two scratch
    /// copies (the kernels alternate both by launch parity, whatever the plan's scratch
    /// rotation says).
    pub ll63_copy_bytes: u32,
    /// This rank.
    pub rank: u32,
    /// `PLAN_FLAG_*`: what the host knows of the launch before (the private `LaunchOrder`).
    pub flags: u32,
    /// The most CTAs a plan launch of this rank may have (the SM count): the block
    /// slots of the launch numbers every launch stores (launch.h); a larger grid is
    /// refused. 0 stores them all.
    pub launch_slots: u32,
    /// [`PLAN_FLAG_INBOX`]: bytes of one inbox copy / 256 (plan.h `far_scr`); else 0.
    pub inbox_copy: u32,
    /// Device address of the port table ([`PlanPorts`]) for plans with port channels.
    pub ports: u64,
    /// [`replicas_inverse`] of `replicas`: plan.h divides by the replicas with a
    /// multiply.
    pub replicas_inv: u64,
}

const _: () = assert!(std::mem::size_of::<PlanArgs>() == 256);

/// ceil(2^64 / r) for r >= 2 (0 for r < 2): plan.h's `div_parts` takes floor(x / r)
/// as the high 64 bits of x * this, exact for x < 2^56 and r <= 256 (the error term
/// x * (this * r - 2^64) / 2^64 stays below 1 / r). A runtime 32-bit division costs
/// some 15 dependent instructions before a CTA's first packet, in every data op.
pub fn replicas_inverse(r: u32) -> u64 {
    if r < 2 {
        0
    } else {
        u64::MAX / u64::from(r) + 1
    }
}

/// Which ranks a communicator's plans reach over port channels instead of the SMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FarRanks {
    /// The ranks of other virtual nodes (`COMMHAL_NODE`); none on one node.
    Nodes,
    /// Every peer (no memory backend: no SM reaches a peer).
    Every,
    /// Every peer, but without port channels set up (no plan was asked for at
    /// creation): every plan is refused.
    EveryWithoutPorts,
}

/// What identifies one compiled plan kernel on this rank.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    algo: Algorithm,
    in_place: bool,
    root: u32,
    dtype: DataType,
    blocks: u32,
}

/// What the host knows of the plan launch before the next one, for the kernel's ordered
/// entry ([`codegen::ORDERED_ENTRY`], plan.h `wait_done`): launched when the launch
/// before on this rank ran the same kernel in the same stream context (the same
/// capture, or both eager while no plan launch was ever captured: a captured graph's
/// replays may run between two eager launches unseen). The first launch of a capture
/// follows whatever ran before the replay.
#[derive(Debug, Default)]
struct LaunchOrder {
    /// The last kernel queued and the capture it went into (0: none).
    last: Option<(Key, u64)>,
    /// A plan launch was captured on this communicator.
    captured: bool,
}

impl LaunchOrder {
    fn ordered(&self, key: &Key, capture: u64) -> bool {
        (capture != 0 || !self.captured)
            && self
                .last
                .as_ref()
                .is_some_and(|(k, c)| k == key && *c == capture)
    }

    /// Record a kernel queued (only once it is: a failed launch changes nothing).
    fn record(&mut self, key: Key, capture: u64) {
        self.captured |= capture != 0;
        self.last = Some((key, capture));
    }
}

/// The compiled kernel a call runs.
fn key_of(c: &PlanCall) -> Result<Key> {
    if c.algo.collective() != collective_of(c.coll) {
        return Err(CollError::invalid(format!(
            "algorithm {} does not implement {}",
            c.algo.full_name(),
            c.coll.name()
        )));
    }
    Ok(Key {
        algo: c.algo,
        in_place: c.in_place,
        root: if c.coll.has_root() { c.root } else { 0 },
        dtype: dtype_of(c.dtype),
        blocks: c.blocks.max(1),
    })
}

/// `PlanArgs::flags`: the LL16 packet reduces wait for their terms in a loop (plan.h).
pub const PLAN_FLAG_WAIT_LOOP: u32 = 2;
/// `PlanArgs::flags`: the far data and semaphores of this launch go through the ranks'
/// inboxes (plan.h `far_scr`, [`crate::plan_ports`]).
pub const PLAN_FLAG_INBOX: u32 = 4;
/// Output bytes from which an LL16 plan launch sets [`PLAN_FLAG_WAIT_LOOP`]: on 4 x H100
/// the one-shot all-reduce and reduce-scatter plans (three packet terms) took 3-5 % less
/// time with their waits unrolled up to 16 KiB of output, and 3-6 % more from 32 KiB
/// (docs/performance.md).
const WAIT_LOOP_MIN_OUTPUT: u64 = 32 << 10;

#[derive(Debug)]
struct Loaded {
    plan: Plan,
    module: CollModule,
    kernel: CudaKernel,
    /// [`codegen::touches_peer_user_buffers`] of the plan.
    peer_user: bool,
    /// [`PlanReach::registered`] of the plan on this rank.
    registered: bool,
    /// [`Plan::uses_packets`] (a walk over every op: once, not per launch).
    packets: bool,
    /// [`codegen::packet_walk`]: the largest packet op of any rank, which sizes the
    /// grid of an LL16 plan.
    walk: PacketWalk,
}

/// What one call runs: `algo` with `blocks` plan blocks, for `coll` of `dtype` with
/// `root`, in place or not. It picks the compiled kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanCall {
    /// The algorithm.
    pub algo: Algorithm,
    /// Plan blocks per rank (at least 1).
    pub blocks: u32,
    /// The collective it runs.
    pub coll: Collective,
    /// Element type.
    pub dtype: Dtype,
    /// Root of a broadcast / reduce (ignored otherwise).
    pub root: u32,
    /// NCCL's in-place layout.
    pub in_place: bool,
}

/// The algorithms collective of a cuda-coll collective.
pub fn collective_of(c: Collective) -> commhal_algorithms::Collective {
    use commhal_algorithms::Collective as A;
    match c {
        Collective::Allreduce => A::AllReduce,
        Collective::Allgather => A::AllGather,
        Collective::Reducescatter => A::ReduceScatter,
        Collective::Broadcast => A::Broadcast,
        Collective::Reduce => A::Reduce,
        Collective::Alltoall => A::AllToAll,
        Collective::Sendrecv => A::SendRecv,
    }
}

/// The algorithms data type of a cuda-coll dtype.
pub fn dtype_of(d: Dtype) -> DataType {
    d.data_type()
}

/// `plan:<collective>:<algorithm>` as a static label (benchmark tables), from
/// [`Algorithm::full_name`], built once.
pub fn algorithm_label(a: Algorithm) -> &'static str {
    static LABELS: std::sync::OnceLock<Vec<(Algorithm, String)>> = std::sync::OnceLock::new();
    LABELS
        .get_or_init(|| {
            Algorithm::ALL
                .iter()
                .map(|&x| (x, format!("plan:{}", x.full_name())))
                .collect()
        })
        .iter()
        .find(|(x, _)| *x == a)
        .map_or("plan", |(_, label)| label.as_str())
}

/// Per-rank plan runtime (see the module docs).
#[derive(Debug)]
pub struct PlanExec {
    rank: u32,
    n: u32,
    ctx: Arc<Context>,
    /// This rank's plan area and every peer's, mapped (region 0).
    area: Regions,
    /// Bytes of each rank's plan area.
    len: u64,
    /// Of those, the LL63 packet copies' (at its end, after the scratch copies).
    ll63_len: u64,
    areas: [u64; MAX_RANKS],
    arch: String,
    cache: Option<KernelCache>,
    grid: Grid,
    spin_ns: u64,
    /// Launch with programmatic dependent launch, as the hand-written kernels.
    pdl: bool,
    loaded: Mutex<HashMap<Key, Arc<Loaded>>>,
    /// The plan launch before the next one.
    order: Mutex<LaunchOrder>,
    /// Ranks per virtual node plans are built for (`COMMHAL_NODE`), or why the nodes
    /// cannot be (not equal runs of consecutive ranks).
    ranks_per_node: std::result::Result<u32, String>,
    /// The port channels to the other nodes' ranks, or why there are none.
    ports: std::result::Result<PlanPorts, String>,
}

impl PlanExec {
    /// Collective setup over `boot`: a plan area with `scratch_bytes` of scratch and
    /// `ll63_bytes` for LL63 packets on every rank from `memory` (the communicator's
    /// memory backend, or cuda-dma alone), mapped
    /// by every peer; and the port channels to the `far` ranks ([`PlanPorts`], over the
    /// copy engines of `memory`'s selection) on the communicator's input and output
    /// (`io`: regions 0 and 1) and the plan areas.
    pub fn new(
        boot: &dyn Bootstrap,
        memory: &Links,
        io: &Regions,
        ctx: &Arc<Context>,
        (scratch_bytes, ll63_bytes, far): (u64, u64, FarRanks),
        (device_timeout, packet_threads): (Duration, u32),
    ) -> Result<PlanExec> {
        let (rank, n) = (boot.rank(), boot.size());
        // two LL63 copies a u32 apart at most (PlanArgs::ll63_copy_bytes)
        let ll63_len = ll63_bytes.min(2 * (u64::from(u32::MAX) / 256 * 256));
        let len = DATA_OFF + scratch_bytes.max(4096) + ll63_len;
        let area = memory.share(boot, &[("plan area", len)], TAG_PLAN_AREA)?;
        let areas = area.addrs(0);
        boot.barrier()?;
        let nodes = match far {
            FarRanks::Nodes => nodes(boot)?,
            FarRanks::Every | FarRanks::EveryWithoutPorts => Nodes {
                node: (0..n).collect(),
            },
        };
        let ranks_per_node = nodes.ranks_per_node().ok_or_else(|| {
            format!(
                "COMMHAL_NODE puts the ranks on nodes {:?}; plans across nodes need equal runs of consecutive ranks per node",
                nodes.node
            )
        });
        let ports = match (
            &ranks_per_node,
            memory.far_port(),
            io.local(0),
            io.local(1),
            area.local(0),
        ) {
            (Ok(rpn), _, _, _, _) if *rpn >= n => Err("every rank is on one node".to_string()),
            _ if far == FarRanks::EveryWithoutPorts => Err(format!(
                "with {} alone they are set up at creation only when COMMHAL_GPU_ALGO names a plan",
                crate::regions::COPY_ENGINES
            )),
            (Err(e), ..) => Err(e.clone()),
            (Ok(_), Some(port), Some(input), Some(output), Some(plan_area)) => {
                if memory.endpoints().len() != n as usize {
                    Err("the communicator was built without the ranks' endpoints".to_string())
                } else {
                    Ok(PlanPorts::new(
                        boot,
                        ctx,
                        port,
                        [input, output, plan_area],
                        [io.addrs(0), io.addrs(1), areas],
                        memory.endpoints(),
                        &nodes,
                    )?)
                }
            }
            (Ok(_), None, ..) => Err(format!(
                "the selection ({}) has no port backend for them: select cuda-dma (one host) or host-tcp / ib-verbs too (COMMHAL_BACKENDS=cuda-nvlink,cuda-dma or cuda-nvlink,host-tcp)",
                memory.name()
            )),
            (Ok(_), ..) => Err("the communicator has no registered input and output".to_string()),
        };
        // As cuda-coll's hand-written kernels (`COMMHAL_COLL_PDL`; unset: on from
        // compute capability 9.0 with cuLaunchKernelEx). The generated kernels begin
        // with griddepcontrol.wait (plan.h `begin`).
        let can = ctx.compute_capability()?.0 >= 9
            && commhal_cuda_rt::driver::symbol_present("cuLaunchKernelEx");
        let invalid = |e: SettingError| CollError::invalid(e.to_string());
        let pdl = can && (!COLL_PDL.is_set() || COLL_PDL.flag().map_err(invalid)?);
        // 32..=1024, rounded up to whole warps
        let threads = PLAN_THREADS.number_or_default().map_err(invalid)? as u32;
        Ok(PlanExec {
            pdl,
            rank,
            n,
            ctx: ctx.clone(),
            area,
            len,
            ll63_len,
            areas,
            arch: ctx.arch()?,
            cache: KernelCache::from_env(),
            grid: Grid {
                sms: ctx.sm_count()?,
                threads: threads.next_multiple_of(32),
                packet_threads,
                replicas_env: PLAN_REPLICAS.number().map_err(invalid)?.map(|r| r as u32),
            },
            spin_ns: device_timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
            loaded: Mutex::new(HashMap::new()),
            order: Mutex::new(LaunchOrder::default()),
            ranks_per_node,
            ports,
        })
    }

    /// Bytes of scratch available to plans.
    pub fn scratch_capacity(&self) -> u64 {
        self.len - DATA_OFF - self.ll63_len
    }

    /// The first device error of a plan kernel on this rank (0: none).
    pub fn error_word(&self) -> Result<u32> {
        let mut w = [0u8; 4];
        self.area.read(&self.ctx, 0, STATE_OFF, &mut w)?;
        Ok(u32::from_le_bytes(w))
    }

    fn load(&self, key: &Key, coll: Collective) -> Result<Arc<Loaded>> {
        let mut map = self
            .loaded
            .lock()
            .map_err(|_| CollError::invalid("plan cache lock poisoned"))?;
        if let Some(l) = map.get(key) {
            return Ok(l.clone());
        }
        let plan = self.build(key, coll)?;
        let kernel =
            codegen::generate_cuda(&plan, self.rank, key.dtype, RedOp::Sum).map_err(algo_error)?;
        if kernel.far != 0
            && let Err(why) = &self.ports
        {
            return Err(CollError::invalid(format!(
                "plan {} reaches ranks of other virtual nodes over port channels, but there are none: {why}",
                plan.name
            )));
        }
        let image = compile(&kernel, &self.arch, self.cache.as_ref())?;
        let module = CollModule::load(&self.ctx, &image, kernel.entries())?;
        let l = Arc::new(Loaded {
            peer_user: codegen::touches_peer_user_buffers(&plan),
            registered: kernel.far != 0
                && (codegen::far_user_buffers(&plan)
                    || self
                        .ports
                        .as_ref()
                        .map_or(true, |p| p.outbox_share(kernel.blocks) == 0)),
            packets: plan.uses_packets(),
            walk: codegen::packet_walk(&plan, key.dtype).map_err(algo_error)?,
            plan,
            module,
            kernel,
        });
        map.insert(key.clone(), l.clone());
        Ok(l)
    }

    /// The plan of `key` for this communicator's ranks and nodes (built, not compiled).
    fn build(&self, key: &Key, coll: Collective) -> Result<Plan> {
        let mut p = BuildParams::new(self.n);
        // nodes that are not equal runs of consecutive ranks: refused, not ignored
        p.ranks_per_node = self
            .ranks_per_node
            .clone()
            .map_err(|why| CollError::invalid(format!("plan {}: {why}", key.algo.full_name())))?;
        p.in_place = key.in_place;
        p.root = key.root;
        p.blocks = key.blocks;
        if coll == Collective::Sendrecv {
            // As the hand-written kernel: send to the next rank, receive from the previous.
            p.pairs = (0..self.n).map(|r| (r, (r + 1) % self.n)).collect();
        }
        build(key.algo, &p).map_err(algo_error)
    }

    /// CTAs and threads a launch of `c` on `count` elements takes, as
    /// [`PlanExec::launch`] computes them (the benchmark's notes): from the compiled
    /// plan once it ran, else from the plan built for the purpose.
    pub fn launch_grid(&self, c: &PlanCall, count: u64) -> Result<(u32, u32)> {
        let key = key_of(c)?;
        let loaded = self
            .loaded
            .lock()
            .map_err(|_| CollError::invalid("plan cache lock poisoned"))?
            .get(&key)
            .cloned();
        let built;
        let (plan, packets, walk) = match &loaded {
            Some(l) => (&l.plan, l.packets, l.walk),
            None => {
                built = self.build(&key, c.coll)?;
                let walk = codegen::packet_walk(&built, key.dtype).map_err(algo_error)?;
                (&built, built.uses_packets(), walk)
            }
        };
        let blocks = plan
            .ranks
            .get(self.rank as usize)
            .map_or(1, |r| r.blocks.len() as u32);
        let (replicas, threads, _) =
            self.shape(plan, (packets, walk), blocks, count, c.dtype.size());
        Ok((blocks * replicas, threads))
    }

    /// CTAs per plan block and threads per CTA of a launch of `plan` (`packets`: it
    /// moves LL packets; `walk`: its largest LL16 packet op) on `blocks` plan blocks
    /// for `count` elements of `es` bytes ([`Grid::plan`]), and its output bytes.
    /// [`PlanExec::launch`] and [`PlanExec::launch_grid`] alike.
    fn shape(
        &self,
        plan: &Plan,
        (packets, walk): (bool, PacketWalk),
        blocks: u32,
        count: u64,
        es: u64,
    ) -> (u32, u32, u64) {
        let out = plan.output.elems(count) * es;
        let bytes = (plan.input.elems(count) * es).max(out);
        let walked = walk.elems(count) * es;
        let (replicas, threads) =
            self.grid
                .plan(packets.then_some(plan.packets), blocks, bytes, walked);
        (replicas, threads, out)
    }

    /// The compiled plan of a call (built and compiled on first use, then cached).
    fn loaded(&self, c: &PlanCall) -> Result<Arc<Loaded>> {
        self.load(&key_of(c)?, c.coll)
    }

    /// How the plan a call runs reaches its peers ([`PlanReach`]), from the compiled
    /// plan (one lookup per call).
    pub fn reach_of(&self, c: &PlanCall) -> Result<PlanReach> {
        let k = self.loaded(c)?;
        Ok(PlanReach {
            peer_buffers: k.peer_user,
            far: k.kernel.far,
            registered: k.registered,
        })
    }

    /// Whether the plans have port channels (to ranks of other nodes, or to every peer
    /// with cuda-dma alone).
    pub fn has_ports(&self) -> bool {
        self.ports.is_ok()
    }

    /// The port backend that carries plans across nodes, when there are ports.
    pub fn ports_backend(&self) -> Option<&str> {
        self.ports.as_ref().ok().map(PlanPorts::backend)
    }

    /// The port proxy's first error, if the plans have port channels and it stopped.
    pub fn port_error(&self) -> Option<String> {
        self.ports.as_ref().ok().and_then(PlanPorts::error)
    }

    /// Queue a call on `stream`. `input` / `output`: every rank's registered regions
    /// (each `capacity` bytes); `count` as [`crate::Comm::launch_rooted`].
    pub fn launch(
        &self,
        stream: &Stream,
        c: &PlanCall,
        count: u64,
        input: &[u64; MAX_RANKS],
        output: &[u64; MAX_RANKS],
        capacity: u64,
    ) -> Result<()> {
        let PlanCall {
            coll,
            dtype,
            in_place,
            ..
        } = *c;
        let key = key_of(c)?;
        let l = self.load(&key, c.coll)?;
        let plan = &l.plan;
        let es = dtype.size();
        let dt = dtype_of(dtype);
        for (what, spec) in [("input", plan.input), ("output", plan.output)] {
            let need = spec.elems(count) * es;
            if need > capacity {
                return Err(CollError::invalid(format!(
                    "plan {}: {what} needs {need} bytes, the registered region has {capacity}",
                    plan.name
                )));
            }
        }
        let copy = codegen::gpu_scratch_copy_bytes(plan, count, dt);
        // Two copies at fixed places, chosen by launch parity for every plan (plan.h
        // `begin`), whatever the plan's rotation and size: a launch's copy never overlaps
        // the one the previous launch (of any plan or size) may still be reading on a
        // peer. (Two launches back is the plan's own business: its handshakes, packet
        // flags or done-word waits.)
        let stride = self.scratch_capacity() / 2 / 256 * 256;
        if copy > stride {
            return Err(CollError::invalid(format!(
                "plan {} needs {copy} bytes of scratch per copy; the plan area holds two copies of {stride}: create the Comm with a larger capacity or set COMMHAL_PLAN_SCRATCH",
                plan.name,
            )));
        }
        let ll63 = codegen::gpu_ll63_copy_bytes(plan, count, dt);
        let ll63_stride = self.ll63_len / 2 / 256 * 256;
        if ll63 > ll63_stride {
            return Err(CollError::invalid(format!(
                "plan {} needs {ll63} bytes of LL63 packets per copy; the plan area holds two copies of {ll63_stride}: set COMMHAL_PLAN_LL63 to at least {}, or use the plan's LL16 form",
                plan.name,
                2 * ll63,
            )));
        }
        let (mut inp, mut out) = (*input, *output);
        for p in 0..self.n as usize {
            let shift = p as u64 * count * es;
            match (in_place, coll) {
                (false, _) => {}
                (true, Collective::Allgather) => inp[p] = out[p] + shift,
                (true, Collective::Reducescatter) => {
                    inp[p] = out[p];
                    out[p] += shift;
                }
                (true, _) => inp[p] = out[p],
            }
        }
        let (replicas, threads, out_bytes) =
            self.shape(plan, (l.packets, l.walk), l.kernel.blocks, count, es);
        // the far data through the inboxes where the plan allows it and they hold it
        // (every rank decides alike: the same plan, count and inbox size)
        let inbox = match (&self.ports, l.kernel.inbox) {
            (Ok(p), true) => p.inbox_copy_units(copy),
            _ => None,
        };
        let args = PlanArgs {
            input: inp,
            output: out,
            area: self.areas,
            count,
            scratch_copy_bytes: stride,
            spin_ns: self.spin_ns,
            replicas,
            replicas_inv: replicas_inverse(replicas),
            ll63_copy_bytes: ll63_stride as u32,
            rank: self.rank,
            launch_slots: self.grid.sms.min(MAX_CTAS),
            inbox_copy: inbox.unwrap_or(0),
            flags: if out_bytes >= WAIT_LOOP_MIN_OUTPUT {
                PLAN_FLAG_WAIT_LOOP
            } else {
                0
            } | if inbox.is_some() { PLAN_FLAG_INBOX } else { 0 },
            ports: match (&self.ports, l.kernel.far) {
                (_, 0) => 0,
                (Ok(p), _) => p.table_addr(),
                (Err(why), _) => {
                    return Err(CollError::invalid(format!(
                        "plan {}: no port channels to the other nodes: {why}",
                        plan.name
                    )));
                }
            },
        };
        let grid = l.kernel.blocks * replicas;
        if grid == 0 {
            return Ok(()); // this rank has nothing to do
        }
        if grid > args.launch_slots {
            return Err(CollError::invalid(format!(
                "plan {} on {} blocks: {grid} CTAs, more than the {} SMs that hold them all at once (a plan's CTAs wait for each other); use fewer blocks (`@blocks` in COMMHAL_GPU_ALGO)",
                plan.name, l.kernel.blocks, args.launch_slots
            )));
        }
        let capture = stream.capture_id()?;
        let mut order = self
            .order
            .lock()
            .map_err(|_| CollError::invalid("plan order lock poisoned"))?;
        let entry = if l.kernel.ordered_entry && order.ordered(&key, capture) {
            codegen::ORDERED_ENTRY
        } else {
            codegen::ENTRY
        };
        // SAFETY: input/output are the Comm's registered regions (own and mapped
        // peers, alive as long as the Comm), or the caller's buffers, inspected to hold
        // the call's bytes and mapped through the call table (`capacity` u64::MAX);
        // every chunk the plan touches lies
        // within `spec.elems(count) * es <= capacity` bytes (checked above; in-place
        // shifts stay inside the output region for the per-rank collectives since the
        // output holds n × count); scratch copies fit the plan area (checked above);
        // areas are the live plan-area mappings; the grid is at most the SM count, so
        // every CTA is resident while others spin.
        unsafe {
            l.module
                .launch(entry, stream, grid, threads, &args, self.pdl)?;
        }
        order.record(key, capture);
        Ok(())
    }
}

/// Compile a generated kernel with every device-src header.
pub fn compile(
    k: &CudaKernel,
    arch: &str,
    cache: Option<&KernelCache>,
) -> Result<commhal_cuda_rt::CompiledImage> {
    let options = jit::default_options();
    let req = CompileRequest {
        unit: &k.unit,
        source: &k.source,
        headers: HEADERS,
        arch,
        options: &options,
    };
    Ok(compile_cached(cache, &req)?.0)
}

/// Parse `COMMHAL_GPU_ALGO`-style overrides: `allreduce:2pa-hb,allgather:ring` (an
/// optional `@B` sets the plan blocks: `allreduce:2pa-hb@4`). Unknown names are errors.
pub fn parse_overrides(s: &str) -> Result<Vec<(Algorithm, u32)>> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, blocks) = match item.split_once('@') {
            Some((n, b)) => (
                n,
                b.parse::<u32>().ok().filter(|&b| b > 0).ok_or_else(|| {
                    CollError::invalid(format!(
                        "`{item}`: blocks after @ must be a positive integer"
                    ))
                })?,
            ),
            None => (item, 1),
        };
        let (c, short) = name.split_once(':').ok_or_else(|| {
            CollError::invalid(format!(
                "`{item}`: write collective:algorithm, e.g. allreduce:2pa-hb"
            ))
        })?;
        let coll = commhal_algorithms::Collective::from_name(c)
            .map_err(|e| CollError::invalid(e.to_string()))?;
        let algo = Algorithm::find(coll, short).map_err(|e| CollError::invalid(e.to_string()))?;
        out.push((algo, blocks));
    }
    Ok(out)
}

/// A plan builder's or generator's error as the communicator's (one "invalid
/// argument", not two).
fn algo_error(e: commhal_algorithms::AlgoError) -> CollError {
    match e {
        commhal_algorithms::AlgoError::Invalid(m) => CollError::invalid(m),
        e => CollError::invalid(e.to_string()),
    }
}

/// How a call's plan reaches its peers, which decides the path of the caller's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanReach {
    /// It reads or writes the peers' user buffers. When it does not (the packet plans
    /// such as `allreduce:1pa`, the `:ll` builders), it reaches the peers only through
    /// their plan areas, and the call needs no exchange of buffers: the caller's path is
    /// direct, as for the hand packet kernels.
    pub peer_buffers: bool,
    /// The ranks of other nodes it reaches over port channels (bit p: rank p); they
    /// never map this rank's buffers.
    pub far: u32,
    /// It runs on the registered regions, staged like a call on unshareable buffers,
    /// because the port backend moves registered memory only: a port op reaches a user
    /// buffer at its far end ([`codegen::far_user_buffers`]), or this rank's puts go
    /// from their sources (no outbox: cuda-dma; plan.h `far_send`). Through the
    /// outbox into the far ranks' scratch, the plan runs on the caller's buffers.
    pub registered: bool,
}

/// Every rank's virtual node (`COMMHAL_NODE`), gathered over `boot`.
fn nodes(boot: &dyn Bootstrap) -> Result<Nodes> {
    let mine = NODE
        .number_or_default()
        .map_err(|e| CollError::invalid(e.to_string()))? as u32;
    let all = boot.all_gather(&mine.to_le_bytes())?;
    let mut node = Vec::with_capacity(all.len());
    for (r, b) in all.iter().enumerate() {
        let b: [u8; 4] = b.as_slice().try_into().map_err(|_| {
            CollError::invalid(format!(
                "rank {r} sent a malformed node number: run the same commhal build on every rank"
            ))
        })?;
        node.push(u32::from_le_bytes(b));
    }
    Ok(Nodes { node })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(algo: Algorithm) -> Key {
        Key {
            algo,
            in_place: false,
            root: 0,
            dtype: DataType::F16,
            blocks: 1,
        }
    }

    /// plan.h's division by the replicas: the high half of x * replicas_inverse(r) is
    /// x / r for every replica count and x below 2^56 (the edges of each quotient).
    #[test]
    fn replicas_inverse_divides_exactly() {
        let div = |x: u64, r: u32| ((u128::from(x) * u128::from(replicas_inverse(r))) >> 64) as u64;
        for r in 2..=MAX_PARTS {
            let r64 = u64::from(r);
            let top = (1u64 << 56) - 1;
            let mut xs: Vec<u64> = (0..4096).collect();
            for q in [1u64, 7, 1 << 20, 1 << 32, (1 << 50) + 3, top / r64] {
                xs.extend([q * r64 - 1, q * r64, q * r64 + 1, q * r64 + r64 - 1]);
            }
            xs.extend([top - 1, top]);
            for x in xs.into_iter().filter(|&x| x <= top) {
                assert_eq!(div(x, r), x / r64, "x {x}, r {r}");
            }
        }
        assert_eq!(replicas_inverse(1), 0);
    }

    #[test]
    fn ordered_only_after_the_same_kernel_in_the_same_context() {
        let (a, b) = (
            key(Algorithm::AllReduce1pa),
            key(Algorithm::ReduceScatterLl),
        );
        let mut o = LaunchOrder::default();
        assert!(!o.ordered(&a, 0), "the first launch follows nothing known");
        o.record(a.clone(), 0);
        assert!(o.ordered(&a, 0));
        assert!(!o.ordered(&b, 0), "another plan ran before");
        o.record(b.clone(), 0);
        assert!(!o.ordered(&a, 0));
        // a capture's first launch follows whatever ran before the replay
        assert!(!o.ordered(&b, 7));
        o.record(b.clone(), 7);
        assert!(o.ordered(&b, 7));
        // once a plan was captured, its replays may come between eager launches
        o.record(b.clone(), 0);
        assert!(!o.ordered(&b, 0));
    }

    #[test]
    fn overrides_parse_and_reject() {
        let v = parse_overrides("allreduce:2pa-hb@4, allgather:ring").unwrap();
        assert_eq!(
            v,
            vec![
                (Algorithm::AllReduce2paHb, 4),
                (Algorithm::AllGatherRing, 1)
            ]
        );
        assert!(parse_overrides("allreduce").is_err());
        assert!(parse_overrides("allreduce:nope").is_err());
        assert!(parse_overrides("allreduce:1pa@0").is_err());
        assert!(parse_overrides("").unwrap().is_empty());
    }

    #[test]
    fn labels_name_every_algorithm() {
        for a in Algorithm::ALL {
            assert_eq!(algorithm_label(a), format!("plan:{}", a.full_name()));
        }
    }

    #[test]
    fn layout_matches_plan_h() {
        let h = commhal_device_src::header("commhal/plan.h")
            .unwrap()
            .contents;
        assert!(h.contains("#define PLAN_MAX_SEMS 4096"));
        assert!(h.contains("#define PLAN_MAX_PARTS 256"));
        assert!(h.contains("#define PLAN_MAX_CTAS 1024"));
        assert!(h.contains("#define PLAN_SEM_BYTES (PLAN_MAX_SEMS * PLAN_MAX_PARTS * 8)"));
        assert!(h.contains("#define PLAN_HS_BYTES (2 * PLAN_MAX_RANKS * PLAN_MAX_CTAS * 8)"));
        assert!(h.contains("#define PLAN_STATE_OFF (PLAN_HS_OFF + PLAN_HS_BYTES)"));
        assert!(h.contains("#define PLAN_STATE_BYTES (4 * PLAN_MAX_CTAS * 8)"));
        assert!(h.contains("#define PLAN_DATA_OFF (PLAN_STATE_OFF + PLAN_STATE_BYTES)"));
        assert!(h.contains("#define PLAN_HS_OFF PLAN_SEM_BYTES"));
        assert!(h.contains(&format!(
            "#define PLAN_FLAG_WAIT_LOOP {PLAN_FLAG_WAIT_LOOP}u"
        )));
        assert!(h.contains(&format!("#define PLAN_FLAG_INBOX {PLAN_FLAG_INBOX}u")));
        assert_eq!(
            ERR_WAIT,
            commhal_device_src::layout::error_code::WAIT_TIMEOUT
        );
        assert_eq!(
            ERR_PACKET,
            commhal_device_src::layout::error_code::PACKET_TIMEOUT
        );
        assert!(h.contains("static_assert(sizeof(PlanArgs) == 256"));
        // the u32 run ends with the launch slots; ports at 240, replicas_inv last at 248
        assert_eq!(std::mem::offset_of!(PlanArgs, launch_slots), 232);
        assert_eq!(std::mem::offset_of!(PlanArgs, ports), 240);
        assert_eq!(std::mem::offset_of!(PlanArgs, replicas_inv), 248);
        assert!(h.find("  u32 flags;  ") < h.find("  u32 launch_slots;  "));
        assert!(h.find("  u32 launch_slots;  ") < h.find("  u32 inbox_copy;  "));
        assert!(h.find("  u32 inbox_copy;  ") < h.find("  u64 ports;  "));
        assert!(h.contains("  u64 ports;  ") && h.contains("  u64 replicas_inv;  "));
        assert!(h.find("  u64 ports;  ") < h.find("  u64 replicas_inv;  "));
        assert_eq!(codegen::MAX_SEMS, 4096);
        assert_eq!(codegen::MAX_RANKS as usize, MAX_RANKS);
    }
}
