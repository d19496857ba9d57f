//! One rank's NVLink collective communicator.
//!
//! Setup (once): the links that carry the collectives, from the backends the HAL
//! selects (`COMMHAL_BACKENDS` / `COMMHAL_CONFIG`, else the default: cuda-nvlink and
//! cuda-dma on CUDA devices; [`crate::regions`]), then four regions per rank — input,
//! output, scratch (flags, epochs, LL slots, the error word) and staging — from the
//! memory backend, or registered with cuda-dma when it is the only link. Each is allocated zeroed by the backend, exported
//! to every peer over the bootstrap and mapped there, so every rank addresses every
//! peer's buffers directly; the kernels see them as device addresses in
//! [`CollArgs`]. A backend whose memory is not device memory of this GPU (host-emu) is
//! refused by [`Comm::new`]. The benchmark's buffers *are* these registered regions
//! (zero-copy).
//!
//! Contract of every collective call: it queues one kernel (with `COMMHAL_GPU_PATH=dma`
//! or cuda-dma the only link, and for send/recv, 2-rank broadcasts and 2-rank reduces from the tuned
//! `sendrecv_ce_min` / `bcast_ce_min` / `reduce_ce_min`: copies, stream writes, a bounded
//! wait kernel and a local (reduce) kernel, see [`crate::dma`]; for all-reduces on 3+
//! ranks from the tuned `ar_ce_min`: the ring kernel's first half, then copies, stream
//! writes and bounded wait kernels) on [`Comm::stream`] and returns; every rank must make the same calls
//! (collective, dtype, count, in-place) in the same order, and, since those routes run
//! the kernels inside a CUDA graph capture, capture them all or none. Completion:
//! synchronise the stream ([`Comm::sync`], which also reports a device-side timeout).
//! Buffers: the input region is [`Comm::input_addr`], the output region
//! [`Comm::output_addr`]; in-place variants
//! follow NCCL (all-reduce: the output is the input; all-gather: this rank's input is
//! `output + rank × bytes`; reduce-scatter: input is the output buffer, this rank's
//! result lands at `output + rank × chunk`; broadcast: the root's data is in its output;
//! reduce: inputs are the outputs). All-to-all and send/recv are out of place only.
//! Broadcast and reduce take a root ([`Comm::launch_rooted`]); reduce leaves the
//! non-roots' outputs untouched.
//!
//! | module | holds |
//! |---|---|
//! | this one | [`Comm`]: setup, the settings every rank must share, launch and sync |
//! | `choice` | which kernel runs a call, on which grid (the tuned size thresholds) |
//! | `caller` | the caller's buffers and stream: zero-copy, mapped or staged |
//! | `collectives` | [`Comm`] as `commhal_algorithms::comm::Collectives` |
//! | `p2p` | grouped send / receive on the copy engines |

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use commhal_cuda_rt::{Context, Stream};
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::settings::gpu::{COLL_CHAIN_OVERLAP, COLL_PDL, GPU_ALGO, PLAN_LL63, PLAN_SCRATCH};
use commhal_hal::settings::{Env, process_env};

use crate::driver;
use crate::error::{CollError, Result};
use crate::kernels::{Kernels, ReduceOp};
use crate::layout::{self, CollArgs, MAX_RANKS};
use crate::plan_exec::{FarRanks, PlanCall, PlanExec};
use crate::regions::{Links, Regions, Routes, needs_copy_engines, parse_gpu_path};
use crate::types::{Collective, Dtype, typed_kernel};
use commhal_algorithms::builders::Algorithm;
use std::sync::Mutex;

mod caller;
mod choice;
mod collectives;
pub(crate) mod p2p;
mod slot_order;
pub use caller::{BufferPath, CallBufs, Registration};
pub use p2p::P2pOp;

/// Tag base of the region exports (one tag per region).
const TAG_REGIONS: u64 = 0x434f_4c4c_0000;

/// Index of the input region in the [`Regions`].
const REGION_INPUT: usize = 0;
/// Index of the output region.
const REGION_OUTPUT: usize = 1;
/// Index of the scratch region (flags, epochs, LL slots, the error word).
const REGION_SCRATCH: usize = 2;
/// Index of the staging region.
const REGION_STAGE: usize = 3;

/// Tuning knobs (from [`crate::tuning`]: data per GPU model and rank count, with
/// environment overrides).
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Largest all-reduce (bytes) done with the one-shot LL kernel (0: no LL kernel
    /// at all).
    pub ll_max: u64,
    /// Largest per-peer chunk (bytes) done with LL: all-gather / reduce-scatter chunks,
    /// broadcast / reduce / send-recv buffers, all-to-all chunks. The LL slots hold
    /// max(ll_max, ll_chunk_max).
    pub ll_chunk_max: u64,
    /// Largest broadcast / reduce (bytes) done with LL16 (at most `ll_chunk_max`).
    pub rooted_ll_max: u64,
    /// Smallest all-reduce (bytes) done with the push kernel (0: never; needs a
    /// staging area as large as the capacity, allocated only when it can be used).
    pub push_min: u64,
    /// Smallest reduce-scatter (total input bytes) done with the push kernel (0:
    /// never; same staging area).
    pub rs_push_min: u64,
    /// Largest reduce-scatter (total input bytes) done with the push kernel.
    pub rs_push_max: u64,
    /// Smallest broadcast (bytes) done with scatter + forward instead of the root
    /// storing into every output (only with 3 or more ranks).
    pub bcast_sf_min: u64,
    /// Smallest broadcast (bytes) done with the pipelined chain (`u64::MAX`: never).
    pub bcast_chain_min: u64,
    /// Smallest reduce (bytes) done with the pipelined chain (`u64::MAX`: never; needs
    /// the staging area, allocated when the capacity reaches it).
    pub reduce_chain_min: u64,
    /// Smallest all-gather (the whole output, bytes) of the direct kernel run on at
    /// most [`layout::AG_NARROW_BLOCKS`] blocks (`u64::MAX`: never).
    pub ag_narrow_min: u64,
    /// Largest reduce (bytes) on 3 or more ranks where the root reduces a share too
    /// (0: never).
    pub reduce_all_max: u64,
    /// Largest broadcast (bytes) done with the LL63 chain, above the LL16 sizes (0:
    /// never; sizes the LL63 region with `reduce_ll63_max`).
    pub bcast_ll63_max: u64,
    /// Largest reduce (bytes) done with the LL63 chain, above the LL16 sizes (0: never).
    pub reduce_ll63_max: u64,
    /// Smallest all-reduce (bytes) done over all pairs with LL63 packets.
    pub ar_ll63_min: u64,
    /// Largest all-reduce (bytes) done over all pairs with LL63 packets, above `ll_max`
    /// (0: never; sizes the LL63 small region's halves).
    pub ar_ll63_max: u64,
    /// Largest all-reduce (bytes) of the LL63 window done in one shot instead of over
    /// all pairs (0: never; with `ar_ll63_max` sizes the LL63 small region's halves).
    pub ar_ll63_oneshot_max: u64,
    /// Smallest all-gather (bytes, the output) done with LL63 packets, asked before the
    /// LL16 sizes (0: right above them).
    pub ag_ll63_min: u64,
    /// Largest all-gather (bytes, the output) done with LL63 packets (0: never; sizes
    /// the LL63 small region's halves too).
    pub ag_ll63_max: u64,
    /// Smallest reduce-scatter (bytes, the whole input: n x the per-rank chunk) done
    /// with LL63 packets, asked before the LL16 sizes (0: right above them).
    pub rs_ll63_min: u64,
    /// Largest reduce-scatter (bytes, the whole input) done with LL63 packets (0:
    /// never; sizes the LL63 small region's halves too).
    pub rs_ll63_max: u64,
    /// Smallest broadcast (bytes) on 2 ranks done by the copy engines (`u64::MAX`:
    /// never; also never inside a CUDA graph capture).
    pub bcast_ce_min: u64,
    /// Smallest send-recv (bytes) done by the copy engines (`u64::MAX`: never; also
    /// never inside a CUDA graph capture).
    pub sendrecv_ce_min: u64,
    /// Smallest reduce (bytes) on 2 ranks done by the copy engine with the root
    /// reducing chunk by chunk ([`crate::dma::DmaPath::reduce_pair`]; `u64::MAX`: never;
    /// also never inside a CUDA graph capture).
    pub reduce_ce_min: u64,
    /// Smallest all-reduce (bytes) on 3 or more ranks whose ring runs its first
    /// reduce-scatter step and its last n-2 all-gather steps on the copy engines, the
    /// head kernel the steps between ([`crate::dma`]; ring sizes only; `u64::MAX`:
    /// never; also never inside a CUDA graph capture).
    pub ar_ce_min: u64,
    /// Smallest all-reduce (bytes) done with the ring kernel (`u64::MAX`: never).
    pub ar_ring_min: u64,
    /// Smallest all-gather (output bytes) done with the ring kernel (`u64::MAX`: never).
    pub ag_ring_min: u64,
    /// Smallest reduce-scatter (input bytes) done with the ring kernel (`u64::MAX`:
    /// never).
    pub rs_ring_min: u64,
    /// Vectors per thread in one chunk of the chain kernels (1..=32).
    pub chain_unroll: u32,
    /// Vectors per thread in one chunk of the ring kernels (1..=32).
    pub ring_unroll: u32,
    /// Vectors per thread in one chunk of the reduce chain (1..=32).
    pub reduce_chain_unroll: u32,
    /// Threads per block of the bulk kernels.
    pub threads: u32,
    /// Threads per block of the LL16 kernels and the LL16 packet plans (a thread per
    /// packet: fewer threads spread the packets over more blocks).
    pub ll_threads: u32,
    /// Most blocks of the bulk kernels (default: the SM count).
    pub max_blocks: u32,
    /// Bound of every device wait.
    pub device_timeout: Duration,
}

/// The kernels of `coll_nvlink.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// One-shot LL16 all-reduce.
    AllreduceLl,
    /// Two-shot all-reduce.
    Allreduce2Shot,
    /// All-gather (any dtype).
    Allgather,
    /// Reduce-scatter.
    Reducescatter,
    /// One-shot LL16 all-gather (any dtype).
    AllgatherLl,
    /// One-shot LL16 reduce-scatter.
    ReducescatterLl,
    /// Push all-reduce (remote stores only, staging area).
    AllreducePush,
    /// Push reduce-scatter (remote stores only, staging area).
    ReducescatterPush,
    /// Broadcast: the root stores into every output (any dtype).
    Broadcast,
    /// Broadcast: every non-root pulls its chunk from the root and forwards it to the
    /// other non-roots (any dtype, ≥ 3 ranks).
    BroadcastSf,
    /// Reduce to the root: the non-roots reduce (≥ 3 ranks; both ranks with 2).
    Reduce,
    /// Reduce to the root: every rank reduces a share (mid sizes, ≥ 3 ranks).
    ReduceAll,
    /// All-to-all (any dtype).
    Alltoall,
    /// Broadcast, LL16 packets from the root (small sizes, any dtype).
    BroadcastLl,
    /// Reduce, LL16 packets to the root (small sizes).
    ReduceLl,
    /// Send to the next rank, receive from the previous (any dtype).
    Sendrecv,
    /// All-to-all, LL16 packets (small chunks, any dtype).
    AlltoallLl,
    /// Send/recv, LL16 packets (small sizes, any dtype).
    SendrecvLl,
    /// Broadcast, pipelined chain root -> root+1 -> ... (large, 16-byte multiples).
    BroadcastChain,
    /// Reduce, pipelined chain root+1 -> ... -> root through the staging areas.
    ReduceChain,
    /// Broadcast, LL63 chain root -> root+1 -> ... (above the LL16 sizes, 16-byte multiples).
    BroadcastLl63,
    /// Reduce, LL63 chain root+1 -> ... -> root (above the LL16 sizes, 16-byte multiples).
    ReduceLl63,
    /// All-reduce over all pairs with LL63 packets (mid sizes).
    AllreduceLl63,
    /// All-gather, LL63 packets to every peer (mid sizes, any dtype).
    AllgatherLl63,
    /// Push reduce-scatter, LL63 packets: chunk p to rank p (mid sizes, 16-byte
    /// multiples per rank).
    ReducescatterLl63,
    /// Ring all-reduce (reduce-scatter then all-gather steps to the next rank).
    AllreduceRing,
    /// The ring all-reduce up to its first all-gather step (the copy engines do the
    /// rest: `ar_ce_min`).
    AllreduceRingHead,
    /// Ring reduce-scatter.
    ReducescatterRing,
    /// Ring all-gather (any dtype).
    AllgatherRing,
}

impl Kernel {
    /// The pipelined broadcast / reduce chains (`chain_start` in the unit).
    pub fn is_chain(self) -> bool {
        matches!(self, Kernel::BroadcastChain | Kernel::ReduceChain)
    }

    /// The all-peers packet kernels (`Prims<LL16, AllPeers>` and `Prims<LL63,
    /// AllPeers>` in the unit): their reuse of the packets of launch e − 2 needs the
    /// launch before to have heard from every receiver, or the `peers_done` fence.
    /// (A wait for every peer's done word in every launch made the LL63 ones 3-9 %
    /// slower at 512 KiB-4 MiB on 2 × H200: docs/performance.md.)
    pub fn is_all_peers_ll(self) -> bool {
        use Kernel::*;
        matches!(
            self,
            AllreduceLl
                | AllgatherLl
                | ReducescatterLl
                | AlltoallLl
                | AllreduceLl63
                | AllgatherLl63
                | ReducescatterLl63
        )
    }

    /// Every rank hears from every peer's launch of this kernel with these arguments
    /// (`bytes`, `ranks`, `flags` as in `CollArgs`): a START or END block barrier, or
    /// packets from every peer, so a rank that completed it knows every peer completed
    /// the launch before. `false` for the one-way kernels (LL16 broadcast / reduce /
    /// send/recv, the LL63 chains), the chains (after a chain, the next one may start on
    /// its neighbour's word alone), and the all-pairs LL63 all-reduce with fewer 16-byte
    /// vectors than ranks (the empty chunks' owners hear nothing from each other).
    pub fn hears_every_peer(self, bytes: u64, ranks: u32, flags: u32) -> bool {
        use Kernel::*;
        match self {
            BroadcastLl | ReduceLl | SendrecvLl | BroadcastLl63 | ReduceLl63 | BroadcastChain
            | ReduceChain => false,
            AllreduceLl63 => flags & layout::FLAG_AR_ONESHOT != 0 || bytes / 16 >= u64::from(ranks),
            _ => true,
        }
    }
}

/// The unit's entry point for `k` on `dtype` (no allocation: launches are hot).
pub fn kernel_name(k: Kernel, dtype: Dtype) -> &'static str {
    use Kernel::*;
    match k {
        AllreduceLl => typed_kernel!(dtype, "commhal_coll_allreduce_ll"),
        Allreduce2Shot => typed_kernel!(dtype, "commhal_coll_allreduce_2shot"),
        Reducescatter => typed_kernel!(dtype, "commhal_coll_reducescatter"),
        Allgather => "commhal_coll_allgather",
        AllgatherLl => "commhal_coll_allgather_ll",
        ReducescatterLl => typed_kernel!(dtype, "commhal_coll_reducescatter_ll"),
        AllreducePush => typed_kernel!(dtype, "commhal_coll_allreduce_push"),
        ReducescatterPush => typed_kernel!(dtype, "commhal_coll_reducescatter_push"),
        Broadcast => "commhal_coll_broadcast",
        BroadcastSf => "commhal_coll_broadcast_sf",
        Reduce => typed_kernel!(dtype, "commhal_coll_reduce"),
        ReduceAll => typed_kernel!(dtype, "commhal_coll_reduce_all"),
        Alltoall => "commhal_coll_alltoall",
        BroadcastLl => "commhal_coll_broadcast_ll",
        ReduceLl => typed_kernel!(dtype, "commhal_coll_reduce_ll"),
        Sendrecv => "commhal_coll_sendrecv",
        AlltoallLl => "commhal_coll_alltoall_ll",
        SendrecvLl => "commhal_coll_sendrecv_ll",
        BroadcastChain => "commhal_coll_broadcast_chain",
        BroadcastLl63 => "commhal_coll_broadcast_ll63",
        ReduceLl63 => typed_kernel!(dtype, "commhal_coll_reduce_ll63"),
        AllreduceLl63 => typed_kernel!(dtype, "commhal_coll_allreduce_ll63"),
        AllgatherLl63 => "commhal_coll_allgather_ll63",
        ReducescatterLl63 => typed_kernel!(dtype, "commhal_coll_reducescatter_ll63"),
        ReduceChain => typed_kernel!(dtype, "commhal_coll_reduce_chain"),
        AllreduceRing => typed_kernel!(dtype, "commhal_coll_allreduce_ring"),
        AllreduceRingHead => typed_kernel!(dtype, "commhal_coll_allreduce_ring_head"),
        ReducescatterRing => typed_kernel!(dtype, "commhal_coll_reducescatter_ring"),
        AllgatherRing => "commhal_coll_allgather_ring",
    }
}

/// One rank's communicator (see the module docs).
#[derive(Debug)]
pub struct Comm {
    /// Stops this Comm's device waits when a peer dies; declared first so it is joined
    /// before anything it writes into is freed.
    _watchdog: Option<crate::watchdog::Watchdog>,
    rank: u32,
    n: u32,
    ctx: Arc<Context>,
    stream: Stream,
    module: Kernels,
    /// Input, output, scratch and staging of every rank ([`REGION_INPUT`], ...), from
    /// the HAL's memory backend; their device addresses are in `base`.
    regions: Regions,
    /// Largest broadcast / reduce (bytes) the LL63 region holds (0: none).
    ll63_cap: u64,
    base: CollArgs,
    tuning: Tuning,
    capacity: u64,
    plans: PlanExec,
    /// Launch the hand-written kernels with programmatic dependent launch (see
    /// [`pdl_wanted`]).
    pdl: bool,
    /// The copy-engine path: for every collective when `COMMHAL_GPU_PATH=dma` chose
    /// it (`dma_all`), else for the sizes `bcast_ce_min` / `reduce_ce_min` /
    /// `sendrecv_ce_min` / `ar_ce_min` route to it (`None` when none applies).
    dma: Option<crate::dma::DmaPath>,
    /// Every collective on the copy engines: `COMMHAL_GPU_PATH=dma`, or cuda-dma the
    /// only link selected (2 or more ranks).
    dma_all: bool,
    /// The backends the collectives travel over ([`crate::regions`]).
    links: Links,
    /// What they allow: kernels into peers, copy engines, everything on copy engines.
    routes: Routes,
    /// Per collective (`Collective::ALL` order of the algorithms crate): a plan that
    /// replaces the hand-written kernels, with its block count.
    algos: Mutex<[Option<(Algorithm, u32)>; 7]>,
    /// How chains queued back to back may overlap (`FLAG_CHAIN_*` bits, `chain_start`
    /// in the unit): the setting ([`chain_overlap_wanted`]) while no plan algorithm was
    /// ever set on this Comm (a plan's kernels touch the peers' buffers without the
    /// launch epochs the device check reads). Cleared for good by
    /// [`Comm::set_algorithm`].
    chain_overlap: AtomicU32,
    /// The last operation this Comm queued (outside a graph capture) was a chain kernel.
    prev_chain: AtomicBool,
    /// When an all-peers LL16 or LL63 kernel needs the `peers_done` fence first.
    slot_order: slot_order::SlotOrder,
    /// Where the ranks publish the caller's buffers of calls that reach into peers.
    table: crate::agree::CallTable,
    /// This communicator's own abort flag ([`Comm::abort`]), watched with the
    /// bootstrap's peer-failure flag by the call table and the watchdog.
    abort: Arc<commhal_hal::AbortFlag>,
    /// Peer allocations a CUDA graph captured: open while this Comm lives.
    pins: Mutex<Vec<Arc<crate::peers::PeerMapping>>>,
    /// A socket per peer for the pieces of cuMem VMM buffers.
    piece_links: crate::piece_link::PieceLinks,
    /// (peer, piece-list key) this rank has sent: the peer has that list mapped.
    pieces_sent: Mutex<std::collections::HashSet<(u32, u64)>>,
    /// Matched sends and receives per peer ([`Comm::p2p`]).
    p2p_counts: Mutex<p2p::PairCounts>,
}

/// What [`Comm::plan`] names for a broadcast / send-recv the tuned thresholds route to
/// the copy engines.
pub const CE_LABEL: &str = "copy engines";

/// How a broadcast / reduce chain that directly follows another chain on the same Comm
/// gates its stores (`chain_start` in the unit), as [`CollArgs::flags`] bits:
/// `COMMHAL_COLL_CHAIN_OVERLAP` `0`: the START barrier with every rank, as any other
/// launch; `1`: the next rank has started this launch (neighbour handshake), so
/// back-to-back chains overlap their fill with the previous launch; `2` / unset: that,
/// and the broadcast chain goes through the staging areas where they hold the buffer,
/// so a reduce or broadcast chain after one of the same geometry streams on behind it,
/// gated per round by the next rank's credits. Every rank must agree (a setup word).
fn chain_overlap_wanted(env: Env<'_>) -> Result<u32> {
    match COLL_CHAIN_OVERLAP.choice_in(env).map_err(setting_error)? {
        Some("0") => Ok(0),
        Some("1") => Ok(layout::FLAG_CHAIN_OVERLAP),
        _ => Ok(layout::FLAG_CHAIN_OVERLAP | layout::FLAG_CHAIN_CREDITS),
    }
}

/// A setting's refusal as the error `Comm::new` returns.
fn setting_error(e: commhal_hal::settings::SettingError) -> CollError {
    CollError::invalid(e.to_string())
}

/// [`CollArgs::flags`] of one launch of `kernel`: `overlap` (the Comm's
/// [`chain_overlap_wanted`] bits) for a chain that directly follows a chain this Comm
/// queued outside a graph capture (`after_chain`; the device checks that again), and
/// the staged broadcast chain where credits are on and the staging areas hold the
/// buffer (`staging_holds`) — staged or not, every rank decides the same.
fn chain_flags(kernel: Kernel, overlap: u32, after_chain: bool, staging_holds: bool) -> u32 {
    let mut f = 0;
    if kernel.is_chain() && after_chain {
        f |= overlap;
    }
    if kernel == Kernel::BroadcastChain
        && overlap & layout::FLAG_CHAIN_CREDITS != 0
        && staging_holds
    {
        f |= layout::FLAG_BCAST_STAGED;
    }
    f
}

/// The plan algorithms a communicator would run (from `source`): at most one, since
/// plans of different collectives number their semaphore words and scratch copies
/// independently, so one could read another's signals. `fix` says what to do instead.
fn one_plan(plans: impl Iterator<Item = Algorithm>, source: &str, fix: &str) -> Result<()> {
    let names: Vec<String> = plans.map(|a| a.full_name()).collect();
    if names.len() > 1 {
        return Err(CollError::invalid(format!(
            "{source} names {} plan algorithms ({}); one communicator runs at most one (plans of different collectives number their semaphore words and scratch copies independently, so one could read another's signals): {fix}",
            names.len(),
            names.join(", ")
        )));
    }
    Ok(())
}

/// Whether to launch the hand-written kernels with programmatic dependent launch
/// (the next collective is scheduled while the previous one runs and waits in
/// `griddepcontrol.wait`, hiding the launch latency between back-to-back
/// collectives). `COMMHAL_COLL_PDL`: `1` on, `0` off, unset: on where the GPU can
/// (compute capability 9.0 or newer, driver with `cuLaunchKernelEx`).
fn pdl_wanted(env: Env<'_>, cc_major: u32, launch_ex: bool) -> Result<bool> {
    let can = cc_major >= 9 && launch_ex;
    if COLL_PDL.raw_in(env).is_none() {
        return Ok(can);
    }
    match COLL_PDL.flag_in(env).map_err(setting_error)? {
        false => Ok(false),
        true if can => Ok(true),
        true => Err(CollError::invalid(format!(
            "{}=1, but programmatic dependent launch needs compute capability 9.0+ and cuLaunchKernelEx (this GPU: {cc_major}.x, cuLaunchKernelEx {}): unset it",
            COLL_PDL.env,
            if launch_ex { "present" } else { "missing" }
        ))),
    }
}

/// The settings every rank must share, by name: the chain and ring kernels pair rounds
/// across ranks by number (same grid, block size and chunk on every rank), the kernel
/// choice must agree for matched calls, and the staging areas peers write into are
/// sized from the capacity.
fn setup_words(
    t: &Tuning,
    capacity: u64,
    chain_overlap: u32,
    dma_all: bool,
) -> [(&'static str, u64); 36] {
    [
        ("capacity", capacity),
        (
            "every collective on the copy engines (COMMHAL_BACKENDS, COMMHAL_GPU_PATH)",
            u64::from(dma_all),
        ),
        (
            "chain_overlap (COMMHAL_COLL_CHAIN_OVERLAP)",
            u64::from(chain_overlap),
        ),
        ("threads (COMMHAL_COLL_THREADS)", u64::from(t.threads)),
        (
            "ll_threads (COMMHAL_COLL_LL_THREADS)",
            u64::from(t.ll_threads),
        ),
        (
            "max_blocks (COMMHAL_COLL_MAX_BLOCKS)",
            u64::from(t.max_blocks),
        ),
        (
            "chain_unroll (COMMHAL_COLL_CHAIN_UNROLL)",
            u64::from(t.chain_unroll),
        ),
        (
            "ring_unroll (COMMHAL_COLL_RING_UNROLL)",
            u64::from(t.ring_unroll),
        ),
        (
            "reduce_chain_unroll (COMMHAL_COLL_REDUCE_CHAIN_UNROLL)",
            u64::from(t.reduce_chain_unroll),
        ),
        ("ll_max (COMMHAL_COLL_LL_MAX)", t.ll_max),
        ("ll_chunk_max (COMMHAL_COLL_LL_CHUNK_MAX)", t.ll_chunk_max),
        (
            "rooted_ll_max (COMMHAL_COLL_BCAST_REDUCE_LL_MAX)",
            t.rooted_ll_max,
        ),
        ("push_min (COMMHAL_COLL_PUSH_MIN)", t.push_min),
        ("rs_push_min (COMMHAL_COLL_RS_PUSH_MIN)", t.rs_push_min),
        ("rs_push_max (COMMHAL_COLL_RS_PUSH_MAX)", t.rs_push_max),
        ("bcast_sf_min (COMMHAL_COLL_BCAST_SF_MIN)", t.bcast_sf_min),
        (
            "bcast_chain_min (COMMHAL_COLL_BCAST_CHAIN_MIN)",
            t.bcast_chain_min,
        ),
        (
            "reduce_chain_min (COMMHAL_COLL_REDUCE_CHAIN_MIN)",
            t.reduce_chain_min,
        ),
        (
            "ag_narrow_min (COMMHAL_COLL_AG_NARROW_MIN)",
            t.ag_narrow_min,
        ),
        ("ar_ring_min (COMMHAL_COLL_AR_RING_MIN)", t.ar_ring_min),
        ("ag_ring_min (COMMHAL_COLL_AG_RING_MIN)", t.ag_ring_min),
        ("rs_ring_min (COMMHAL_COLL_RS_RING_MIN)", t.rs_ring_min),
        (
            "reduce_all_max (COMMHAL_COLL_REDUCE_ALL_MAX)",
            t.reduce_all_max,
        ),
        (
            "bcast_ll63_max (COMMHAL_COLL_BCAST_LL63_MAX)",
            t.bcast_ll63_max,
        ),
        (
            "reduce_ll63_max (COMMHAL_COLL_REDUCE_LL63_MAX)",
            t.reduce_ll63_max,
        ),
        ("ar_ll63_min (COMMHAL_COLL_AR_LL63_MIN)", t.ar_ll63_min),
        ("ar_ll63_max (COMMHAL_COLL_AR_LL63_MAX)", t.ar_ll63_max),
        (
            "ar_ll63_oneshot_max (COMMHAL_COLL_AR_LL63_ONESHOT_MAX)",
            t.ar_ll63_oneshot_max,
        ),
        ("ag_ll63_min (COMMHAL_COLL_AG_LL63_MIN)", t.ag_ll63_min),
        ("ag_ll63_max (COMMHAL_COLL_AG_LL63_MAX)", t.ag_ll63_max),
        ("rs_ll63_min (COMMHAL_COLL_RS_LL63_MIN)", t.rs_ll63_min),
        ("rs_ll63_max (COMMHAL_COLL_RS_LL63_MAX)", t.rs_ll63_max),
        ("bcast_ce_min (COMMHAL_COLL_BCAST_CE_MIN)", t.bcast_ce_min),
        (
            "sendrecv_ce_min (COMMHAL_COLL_SENDRECV_CE_MIN)",
            t.sendrecv_ce_min,
        ),
        (
            "reduce_ce_min (COMMHAL_COLL_REDUCE_CE_MIN)",
            t.reduce_ce_min,
        ),
        ("ar_ce_min (COMMHAL_COLL_AR_CE_MIN)", t.ar_ce_min),
    ]
}

/// `Ok` when rank `p`'s settings (`theirs`: the little-endian words after its four
/// sizes) equal this rank's; else an error naming the first that differs.
fn check_setup(p: u32, mine: &[(&'static str, u64)], theirs: &[u8]) -> Result<()> {
    for (k, (name, v)) in mine.iter().enumerate() {
        let w = theirs
            .get(8 * k..8 * k + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
        if w != Some(*v) {
            return Err(CollError::invalid(format!(
                "rank {p} has {name} = {}, this rank {v}: every rank must create its Comm with the same capacity and resolve the same tuning (same COMMHAL_GPU_TUNING file, same COMMHAL_COLL_* variables, same GPU model)",
                w.map_or("?".to_string(), |w| w.to_string())
            )));
        }
    }
    Ok(())
}

/// The sizes of a communicator's regions and of their parts, from the tuning, the
/// capacity (>= 4096) and the rank count: what every rank must agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RegionSizes {
    /// LL16 slots: the largest LL all-reduce or per-peer LL chunk.
    ll_cap: u64,
    /// LL63 region: the largest LL63 broadcast / reduce the capacity allows.
    ll63_bytes: u64,
    /// Half of the LL63 small region: the small chains', the LL63 all-reduce's (all
    /// pairs up to `allreduce_ll63_max`, one shot up to `allreduce_ll63_oneshot_max`),
    /// the LL63 all-gather's (up to `allgather_ll63_max`) or the LL63 reduce-scatter's
    /// (up to `reducescatter_ll63_max`).
    small_half: u64,
    /// One sender's slot in a staging area (0: no staging area in use).
    stage_slot: u64,
    /// The staging region: a slot per rank (4096 bytes at least).
    stage_bytes: u64,
    /// Every collective runs on the copy engines (`COMMHAL_GPU_PATH=dma` or cuda-dma
    /// alone, and peers to reach).
    use_dma: bool,
}

impl RegionSizes {
    fn new(tuning: &Tuning, capacity: u64, n: u32, dma_all: bool) -> RegionSizes {
        let ll_cap = tuning.ll_max.max(tuning.ll_chunk_max).max(4096);
        let ll63_bytes = if n > 1 {
            tuning
                .bcast_ll63_max
                .max(tuning.reduce_ll63_max)
                .min(capacity)
        } else {
            0
        };
        let small_half = if n > 1 {
            let ar_max = tuning.ar_ll63_max.min(capacity);
            layout::ll63_small_half_bytes(ll63_bytes)
                .max(layout::pairs_half_bytes(ar_max, n))
                .max(layout::oneshot_half_bytes(
                    tuning.ar_ll63_oneshot_max.min(ar_max),
                    n,
                ))
                // the all-gather's output and the reduce-scatter's input are n
                // per-rank chunks, of which a rank receives n - 1
                .max(layout::oneshot_half_bytes(
                    tuning.ag_ll63_max.min(capacity) / u64::from(n),
                    n,
                ))
                .max(layout::oneshot_half_bytes(
                    tuning.rs_ll63_max.min(capacity) / u64::from(n),
                    n,
                ))
        } else {
            0
        };
        // The kernels that go through the staging areas, from the smallest size any does.
        let staged_min = [
            tuning.reduce_chain_min,
            tuning.ar_ring_min,
            tuning.rs_ring_min,
            if n == 2 {
                tuning.reduce_ce_min
            } else {
                u64::MAX
            },
        ]
        .into_iter()
        .min()
        .unwrap_or(u64::MAX);
        let stage_used = |min: u64| min > 0 && capacity >= min;
        // (one rank has no peers: its kernels touch only its own memory)
        let use_dma = dma_all && n > 1;
        let staging = n > 1
            && (use_dma
                || stage_used(tuning.push_min)
                || stage_used(tuning.rs_push_min)
                || (staged_min != u64::MAX && stage_used(staged_min)));
        let stage_slot = if staging {
            layout::stage_slot_bytes(capacity, n)
        } else {
            0
        };
        RegionSizes {
            ll_cap,
            ll63_bytes,
            small_half,
            stage_slot,
            stage_bytes: (stage_slot * u64::from(n)).max(4096),
            use_dma,
        }
    }

    /// The four regions, by name and length, in `REGION_*` order.
    fn lens(&self, capacity: u64) -> [(&'static str, u64); 4] {
        [
            ("input region", capacity),
            ("output region", capacity),
            (
                "scratch region",
                layout::scratch_bytes(self.ll_cap, self.ll63_bytes, self.small_half),
            ),
            ("staging region", self.stage_bytes),
        ]
    }
}

/// All-gather every rank's region lengths and shared settings (collective over `boot`)
/// and check them against this rank's: an error names the first that differs.
fn agree_setup(
    boot: &dyn Bootstrap,
    lens: &[(&'static str, u64)],
    setup: &[(&'static str, u64)],
) -> Result<()> {
    let mine = lens
        .iter()
        .map(|(_, len)| len)
        .chain(setup.iter().map(|(_, v)| v))
        .flat_map(|s| s.to_le_bytes())
        .collect::<Vec<u8>>();
    let all = boot.all_gather(&mine)?;
    for p in (0..boot.size()).filter(|&p| p != boot.rank()) {
        let theirs = all
            .get(p as usize)
            .filter(|b| b.len() == mine.len())
            .ok_or_else(|| {
                CollError::invalid(format!(
                    "rank {p} sent a malformed size table (a different commhal build?)"
                ))
            })?;
        check_setup(p, setup, &theirs[8 * lens.len()..])?;
    }
    Ok(())
}

/// The plan algorithm `COMMHAL_GPU_ALGO` names, in its collective's slot of the
/// algorithm table (at most one; unset: every slot empty, the hand-written kernels).
fn algorithms_from_env() -> Result<[Option<(Algorithm, u32)>; 7]> {
    let mut algos = [None; 7];
    if let Some(v) = GPU_ALGO.text() {
        let var = GPU_ALGO.env;
        let overrides = crate::plan_exec::parse_overrides(&v)
            .map_err(|e| CollError::invalid(format!("{var}={v}: {e}")))?;
        one_plan(
            overrides.iter().map(|&(a, _)| a),
            &format!("{var}={v}"),
            "name one, and leave the other collectives to the hand-written kernels",
        )?;
        for (algo, blocks) in overrides {
            algos[algo_slot(algo.collective())] = Some((algo, blocks));
        }
    }
    Ok(algos)
}

/// Index of a collective in the algorithm table (`Collective::ALL` order).
fn algo_slot(c: commhal_algorithms::Collective) -> usize {
    commhal_algorithms::Collective::ALL
        .iter()
        .position(|&x| x == c)
        .unwrap_or(0)
}

fn coll_slot(coll: Collective) -> usize {
    algo_slot(crate::plan_exec::collective_of(coll))
}

impl Comm {
    /// Set up on `device` with room for `capacity` bytes of input and of output, the
    /// regions from the memory backend `COMMHAL_BACKENDS` / `COMMHAL_CONFIG` select
    /// (default: cuda-nvlink). Collective over `boot` (every rank calls it).
    pub fn new(
        boot: &dyn Bootstrap,
        device: u32,
        capacity: u64,
        ll_max: Option<u64>,
        device_timeout: Duration,
    ) -> Result<Comm> {
        Self::with_plan_scratch(boot, device, capacity, ll_max, device_timeout, None)
    }

    /// [`Comm::new`] with the plan algorithms' scratch area sized by the caller
    /// (`None`: room for plans on buffers of `capacity`, 4 × capacity + 1 MiB, unless
    /// `COMMHAL_PLAN_SCRATCH` says otherwise). A communicator that never runs plans
    /// (`COMMHAL_GPU_ALGO`, [`Comm::set_algorithm`]) needs only a small one.
    pub fn with_plan_scratch(
        boot: &dyn Bootstrap,
        device: u32,
        capacity: u64,
        ll_max: Option<u64>,
        device_timeout: Duration,
        plan_scratch: Option<u64>,
    ) -> Result<Comm> {
        Self::with_links(
            boot,
            device,
            capacity,
            ll_max,
            device_timeout,
            plan_scratch,
            None,
        )
    }

    /// [`Comm::with_plan_scratch`] with the links named by the caller (`backends`: a
    /// backend list as `COMMHAL_BACKENDS` takes it, which it overrides; `None`: the
    /// environment's or the default selection), as `commhal bench --backend cuda-dma`
    /// names cuda-dma alone.
    pub fn with_links(
        boot: &dyn Bootstrap,
        device: u32,
        capacity: u64,
        ll_max: Option<u64>,
        device_timeout: Duration,
        plan_scratch: Option<u64>,
        backends: Option<&[String]>,
    ) -> Result<Comm> {
        let rank = boot.rank();
        let n = boot.size();
        if n as usize > MAX_RANKS {
            return Err(CollError::invalid(format!(
                "{n} ranks: the NVLink collectives support at most {MAX_RANKS} (one per GPU of a host)"
            )));
        }
        let ctx = Context::new(device)?;
        let stream = Stream::new(&ctx)?;
        let module = Kernels::new(&ctx)?;
        let sms = ctx.sm_count()?;
        // Which links carry the collectives: the backends the HAL selects
        // (COMMHAL_BACKENDS / COMMHAL_CONFIG, default cuda-nvlink + cuda-dma) and
        // COMMHAL_GPU_PATH (crate::regions). Collective over `boot`.
        let path = parse_gpu_path(&process_env)?;
        let links = Links::select(boot, device, backends)?;
        let routes = links.routes(path)?;
        // Thresholds: algorithms/tuning/gpu-cuda-*.toml for this GPU and rank count,
        // then COMMHAL_GPU_TUNING, COMMHAL_COLL_* and `ll_max` (see crate::tuning).
        let gpu = ctx.name().unwrap_or_default();
        let (mut tuning, provenance) =
            crate::tuning::resolve(&gpu, n, sms, ll_max, device_timeout)?;
        if !routes.copy_engines || !crate::dma::available() {
            // no copy engines selected (cuda-dma not in COMMHAL_BACKENDS), or no stream
            // memory operations in this driver: the kernels do everything (and every
            // rank says so in the setup check below)
            tuning.bcast_ce_min = u64::MAX;
            tuning.sendrecv_ce_min = u64::MAX;
            tuning.reduce_ce_min = u64::MAX;
            tuning.ar_ce_min = u64::MAX;
        }
        tracing::debug!("rank {rank}: tuning {provenance}: {tuning:?}");
        let capacity = capacity.max(4096);
        let sizes = RegionSizes::new(&tuning, capacity, n, routes.dma_all);
        let lens = sizes.lens(capacity);

        // Every rank must have resolved the same sizes and kernel-geometry settings
        // before anything is allocated.
        let chain_overlap = chain_overlap_wanted(&process_env)?;
        let setup = setup_words(&tuning, capacity, chain_overlap, sizes.use_dma);
        agree_setup(boot, &lens, &setup)?;
        // The regions: allocated, exported and mapped by the HAL's memory backend, else
        // registered, exported and imported by cuda-dma.
        let regions = links.share(boot, &lens, TAG_REGIONS)?;
        let base = CollArgs {
            rank,
            nranks: n,
            spin_ns: device_timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
            ll_slot_bytes: layout::ll_slot_bytes(sizes.ll_cap),
            stage_slot_bytes: sizes.stage_slot,
            ll63_small_off: layout::off_ll63_small(sizes.ll_cap, sizes.ll63_bytes),
            ll63_small_half: sizes.small_half,
            input: regions.addrs(REGION_INPUT),
            output: regions.addrs(REGION_OUTPUT),
            scratch: regions.addrs(REGION_SCRATCH),
            stage: regions.addrs(REGION_STAGE),
            launch_slots: tuning.max_blocks,
            ..CollArgs::default()
        };
        let ll63_cap = layout::ll63_capacity(layout::ll63_region_bytes(sizes.ll63_bytes));
        boot.barrier()?;
        // Plans (generated kernels): scratch for 4 × capacity (HB plans: 2PA-HB on 4 ranks
        // keeps 2 × count, two copies), and 8n × up to
        // 4 MiB (LL plans: packets double the data, two scratch copies, 2PA-LL's scratch
        // holds 2n × count) unless told otherwise.
        let plan_scratch = PLAN_SCRATCH
            .number()
            .map_err(setting_error)?
            .or(plan_scratch)
            .unwrap_or((4 * capacity).max(8 * u64::from(n) * capacity.min(4 << 20)) + (1 << 20));
        // LL63 plans' packets, beside the scratch (plan_ll63.h): LL63 pays off to a few
        // MiB, so a fixed area (48 MiB: two copies of a 4-rank `allreduce:1pa-ll63` at
        // 4 MiB, 17.1 MB each, or of `allreduce:2pa-ll63` at 2 MiB)
        let plan_ll63 = PLAN_LL63
            .number()
            .map_err(setting_error)?
            .unwrap_or(plan_scratch.min(48 << 20));
        // Without a memory backend (cuda-dma alone) no SM reaches a peer: plans then
        // reach every peer over port channels, as ranks of other nodes. Their setup (a
        // port per peer, a proxy thread) is made only when COMMHAL_GPU_ALGO asks for
        // a plan at creation.
        let far = if routes.kernels {
            FarRanks::Nodes
        } else if GPU_ALGO.text().is_some() {
            FarRanks::Every
        } else {
            FarRanks::EveryWithoutPorts
        };
        let plans = PlanExec::new(
            boot,
            &links,
            &regions,
            &ctx,
            (plan_scratch, plan_ll63, far),
            (device_timeout, tuning.ll_threads),
        )?;
        let algos = algorithms_from_env()?;
        // plan launches take no part in the chains' back-to-back protocol: with a plan
        // in use, every chain starts behind the full barrier
        let chain_overlap = if algos.iter().any(Option::is_some) {
            0
        } else {
            chain_overlap
        };
        let pdl = pdl_wanted(
            &process_env,
            ctx.compute_capability()?.0,
            commhal_cuda_rt::driver::symbol_present("cuLaunchKernelEx"),
        )?;
        let ce_routes = tuning.sendrecv_ce_min != u64::MAX
            || (n == 2 && (tuning.bcast_ce_min != u64::MAX || tuning.reduce_ce_min != u64::MAX))
            || (n >= 3 && tuning.ar_ce_min != u64::MAX);
        let abort = Arc::new(commhal_hal::AbortFlag::new());
        let table = crate::agree::CallTable::new(boot, device_timeout, abort.clone())?;
        let piece_links = crate::piece_link::PieceLinks::new(boot, device_timeout)?;
        let watchdog = Self::watchdog(
            boot,
            &abort,
            &ctx,
            base.scratch[rank as usize] + layout::OFF_ERROR,
        )?;
        let dma = if sizes.use_dma || (n > 1 && ce_routes) {
            Some(crate::dma::DmaPath::new(&ctx, n)?)
        } else {
            None
        };
        Ok(Comm {
            _watchdog: watchdog,
            dma,
            dma_all: sizes.use_dma,
            links,
            routes,
            pdl,
            rank,
            n,
            ctx,
            stream,
            module,
            regions,
            ll63_cap,
            base,
            tuning,
            capacity,
            plans,
            algos: Mutex::new(algos),
            chain_overlap: AtomicU32::new(chain_overlap),
            prev_chain: AtomicBool::new(false),
            slot_order: Default::default(),
            table,
            abort,
            pins: Mutex::new(Vec::new()),
            piece_links,
            pieces_sent: Mutex::new(Default::default()),
            p2p_counts: Mutex::new(p2p::PairCounts::new(n)),
        })
    }

    /// The watchdog writing [`layout::ERR_PEER_GONE`] into the error word at
    /// `error_word` when `boot` sees a peer die or `abort` is raised (none without the
    /// driver's stream memory writes).
    fn watchdog(
        boot: &dyn Bootstrap,
        abort: &Arc<commhal_hal::AbortFlag>,
        ctx: &Arc<Context>,
        error_word: u64,
    ) -> Result<Option<crate::watchdog::Watchdog>> {
        let flags: Vec<_> = boot
            .peer_failure()
            .into_iter()
            .chain([abort.clone()])
            .collect();
        if !crate::dma::available() {
            return Ok(None); // no stream memory writes in this driver: the wait bound
        }
        let stream = Stream::new(ctx)?;
        let ops = commhal_backend_cuda_dma::StreamPort::new()?;
        let w = crate::watchdog::Watchdog::spawn(flags, crate::watchdog::PERIOD, move |_| {
            // SAFETY: the error word is in this Comm's scratch, which outlives the
            // watchdog (joined first when the Comm drops); 4-byte aligned; `ops` proves
            // the driver has stream memory writes.
            let r = unsafe { ops.signal32(&stream, error_word, layout::ERR_PEER_GONE) };
            if let Err(e) = r {
                tracing::warn!("watchdog: stopping the device waits failed: {e}");
            }
        })
        .map_err(|e| CollError::invalid(format!("starting the dead-peer watchdog thread: {e}")))?;
        Ok(Some(w))
    }

    /// Run `coll` through a plan compiled to CUDA (`Some((algorithm, blocks))`) instead
    /// of the hand-written kernels, or go back to them (`None`). Every rank must make
    /// the same choice before its next call of `coll`. `COMMHAL_GPU_ALGO`
    /// (`allreduce:2pa-hb@4,allgather:ring`) sets it at creation.
    pub fn set_algorithm(&self, coll: Collective, algo: Option<(Algorithm, u32)>) -> Result<()> {
        if let Some((a, _)) = algo
            && !self.routes.kernels
            && !self.plans.has_ports()
        {
            return Err(CollError::invalid(format!(
                "the plan algorithm {}: with {} alone no kernel reaches a peer, so plans run over port channels, which are set up at creation only when COMMHAL_GPU_ALGO names a plan: set it when creating the communicator, or add cuda-nvlink to COMMHAL_BACKENDS",
                a.full_name(),
                crate::regions::COPY_ENGINES
            )));
        }
        if let Some((a, _)) = algo
            && a.collective() != crate::plan_exec::collective_of(coll)
        {
            return Err(CollError::invalid(format!(
                "{} is not a {} algorithm",
                a.full_name(),
                coll.name()
            )));
        }
        let mut m = self
            .algos
            .lock()
            .map_err(|_| CollError::invalid("algorithm table lock poisoned"))?;
        let slot = coll_slot(coll);
        let others = m.iter().enumerate().filter(|&(i, _)| i != slot);
        one_plan(
            others.filter_map(|(_, x)| *x).chain(algo).map(|(a, _)| a),
            "set_algorithm",
            "clear the other first",
        )?;
        m[slot] = algo;
        if algo.is_some() {
            self.chain_overlap.store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The plan (algorithm, blocks) `coll` runs through, if any (see
    /// [`Comm::set_algorithm`]).
    pub fn algorithm(&self, coll: Collective) -> Option<(Algorithm, u32)> {
        self.algos.lock().ok().and_then(|m| m[coll_slot(coll)])
    }

    /// The plan call of a collective when a plan algorithm is set for it.
    fn plan_call(
        &self,
        coll: Collective,
        dtype: Dtype,
        root: u32,
        in_place: bool,
    ) -> Option<PlanCall> {
        let (algo, blocks) = self.algorithm(coll)?;
        Some(PlanCall {
            algo,
            blocks,
            coll,
            dtype,
            root,
            in_place,
        })
    }

    /// Stop this communicator's outstanding and later work on this rank (NCCL's
    /// `ncclCommAbort`), from any thread: its host waits return an error and the
    /// watchdog stops its kernels' device waits. The rank's other communicators, and
    /// the peers, are not touched (the peers' waits for this rank end at their bound or
    /// when this process's bootstrap goes).
    pub fn abort(&self, why: &str) {
        self.abort.abort(why);
    }

    /// What the bootstrap saw when a peer died or the job aborted, or why this
    /// communicator was aborted (`None` while all is well): a host-side check, no
    /// device access.
    pub fn peer_failure(&self) -> Option<String> {
        self.table.peer_failure()
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }
    /// Ranks.
    pub fn size(&self) -> u32 {
        self.n
    }
    /// The stream every collective is queued on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }
    /// The context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
    /// Device address of this rank's input region.
    pub fn input_addr(&self) -> u64 {
        self.base.input[self.rank as usize]
    }
    /// Device address of this rank's output region.
    pub fn output_addr(&self) -> u64 {
        self.base.output[self.rank as usize]
    }
    /// Bytes usable in each region.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    /// Copy `src` into this rank's input region at `offset` (synchronous,
    /// bounds-checked against the region).
    pub fn write_input(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.regions.write(&self.ctx, REGION_INPUT, offset, src)
    }
    /// The backend the regions come from: the memory backend (`cuda-nvlink` by
    /// default), or `cuda-dma` when it is the only link selected.
    pub fn memory_backend(&self) -> &str {
        self.regions.backend()
    }

    /// Which backends carry the collectives, in words (the benchmark's header):
    /// `cuda-nvlink (kernels) + cuda-dma (copy engines: ...)`, `cuda-nvlink (kernels)`,
    /// `cuda-dma (copy engines)`, followed by the port backend of plans across nodes.
    pub fn links(&self) -> String {
        let mut r = self.routes;
        // a driver without stream memory operations turned the tuned routes off
        r.copy_engines &= crate::dma::available();
        let links = r.describe(self.links.memory_name(), self.links.copy_engines_name());
        match self.plans.ports_backend() {
            Some(p) => format!("{links}; plans across nodes through {p} port channels"),
            None => links,
        }
    }

    /// What the selected backends allow ([`crate::regions::routes`]).
    pub fn routes(&self) -> Routes {
        self.routes
    }

    /// `Ok` when send/recv groups can run: they need the copy engines (cuda-dma).
    pub(crate) fn check_copy_engines(&self, what: &str) -> Result<()> {
        if self.routes.copy_engines {
            return Ok(());
        }
        Err(needs_copy_engines(
            what,
            self.links.memory_name().unwrap_or("none"),
        ))
    }
    /// Tuning in effect.
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// What the copy-engine routes of [`crate::dma`] get for a launch with `args`.
    fn dma_ctx<'a>(&'a self, args: &'a CollArgs, stream: &'a Stream) -> crate::dma::Ctx<'a> {
        crate::dma::Ctx {
            main: stream,
            module: &self.module,
            args,
            threads: self.tuning.threads,
            max_blocks: self.tuning.max_blocks,
        }
    }

    /// Queue one collective with root 0 (see [`Comm::launch_rooted`]).
    pub fn launch(
        &self,
        coll: Collective,
        dtype: Dtype,
        op: ReduceOp,
        count: u64,
        in_place: bool,
    ) -> Result<()> {
        self.launch_rooted(coll, dtype, op, count, 0, in_place)
    }

    /// The kernel modules: [`Kernels::prepare`] compiles a (type, op) outside any
    /// collective (call it on every rank before its first launch).
    pub fn kernels(&self) -> &Kernels {
        &self.module
    }

    /// Queue one collective. `count`: all-reduce, broadcast, reduce, send/recv: the
    /// buffer's elements; all-gather, reduce-scatter, all-to-all: elements per rank
    /// (the output / input hold `n × count`). `root`: broadcast / reduce (must be
    /// `< size()`; ignored by the others). All-to-all and send/recv have no in-place
    /// variant. `op`: the reduction of all-reduce, reduce-scatter and reduce (ignored by
    /// the others).
    pub fn launch_rooted(
        &self,
        coll: Collective,
        dtype: Dtype,
        op: ReduceOp,
        count: u64,
        root: u32,
        in_place: bool,
    ) -> Result<()> {
        if coll.has_root() && root >= self.n {
            return Err(CollError::invalid(format!(
                "{} root {root} is not a rank of this {}-rank communicator",
                coll.name(),
                self.n
            )));
        }
        if in_place && !coll.in_place_supported() {
            return Err(CollError::invalid(format!(
                "{} has no in-place variant here: pass distinct input and output (in_place = false)",
                coll.name()
            )));
        }
        if count == 0 {
            return Ok(());
        }
        let es = dtype.size();
        let total = if coll.count_is_per_rank() {
            count * es * u64::from(self.n)
        } else {
            count * es
        };
        if total > self.capacity {
            return Err(CollError::invalid(format!(
                "{} of {total} bytes exceeds the registered {} bytes: create the Comm with a larger capacity",
                coll.name(),
                self.capacity
            )));
        }
        let a = self.own_args(coll, dtype, op, count, root, in_place);
        self.enqueue(
            coll,
            dtype,
            op,
            count,
            root,
            in_place,
            a,
            &self.stream,
            (&self.base.input, &self.base.output, self.capacity),
        )
    }

    /// The kernel arguments of a call on the registered regions (NCCL's in-place
    /// layouts, see the module docs), `count` as each kernel reads it.
    fn own_args(
        &self,
        coll: Collective,
        dtype: Dtype,
        op: ReduceOp,
        count: u64,
        root: u32,
        in_place: bool,
    ) -> CollArgs {
        let es = dtype.size();
        let mut a = self.base;
        // the op travels in the arguments: the kernels' and the copy-engine route's
        // local reductions pick their module by it (crate::kernels)
        a.red_op = op.code();
        a.scalar = op.scalar_bits(dtype.data_type());
        let r = self.rank as usize;
        match coll {
            Collective::Allreduce => {
                a.count = count;
                if in_place {
                    a.input = a.output;
                }
            }
            Collective::Allgather => {
                a.count = count * es;
                if in_place {
                    a.input[r] = a.output[r] + u64::from(self.rank) * count * es;
                }
            }
            Collective::Reducescatter => {
                a.count = count;
                if in_place {
                    a.input = a.output;
                    a.output[r] += u64::from(self.rank) * count * es;
                }
            }
            Collective::Broadcast => {
                a.count = count * es;
                a.root = root;
                if in_place {
                    a.input = a.output; // the root's data is in its output
                }
            }
            Collective::Reduce => {
                a.count = count;
                a.root = root;
                if in_place {
                    a.input = a.output;
                }
            }
            Collective::Alltoall | Collective::Sendrecv => {
                a.count = count * es; // bytes per chunk / of the buffer
            }
        }
        a
    }

    /// Queue a call whose kernel arguments `a` are ready (every rank's addresses as
    /// the kernel sees them) on `stream`. `plan_bufs`: every rank's input and output
    /// base a plan algorithm runs on (the registered regions, or the caller's buffers
    /// as the call table resolved them; plans adjust them for in place themselves) and
    /// the bytes each holds.
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &self,
        coll: Collective,
        dtype: Dtype,
        op: ReduceOp,
        count: u64,
        root: u32,
        in_place: bool,
        mut a: CollArgs,
        stream: &Stream,
        plan_bufs: (&[u64; MAX_RANKS], &[u64; MAX_RANKS], u64),
    ) -> Result<()> {
        let es = dtype.size();
        // the operation queued now is not a chain unless the kernel path below says so
        let prev_chain = self.prev_chain.swap(false, Ordering::Relaxed);
        if let Some(call) = self.plan_call(coll, dtype, root, in_place) {
            if op != ReduceOp::Sum && coll.redop() == "sum" {
                return Err(CollError::invalid(format!(
                    "{} with op {}: the plan algorithms reduce with sum only; clear the algorithm to use the NVLink kernels",
                    coll.name(),
                    op.name()
                )));
            }
            self.plans
                .launch(stream, &call, count, plan_bufs.0, plan_bufs.1, plan_bufs.2)?;
            return Ok(());
        }
        let bytes = count * es;
        let capture = stream.capture_id()?;
        if let Some(dma) = &self.dma
            && (self.dma_all || (self.ce_route(coll, bytes) && capture == 0))
        {
            let c = self.dma_ctx(&a, stream);
            if !self.dma_all && coll == Collective::Reduce {
                return dma.reduce_pair(&c, dtype, count);
            }
            return dma.launch(&c, coll, dtype, count);
        }
        let (mut kernel, grid, block) = self.kernel_plan(coll, dtype, count);
        let ce_tail = self.ce_tail(kernel, bytes) && capture == 0;
        if ce_tail {
            kernel = Kernel::AllreduceRingHead;
        }
        let name = kernel_name(kernel, dtype);
        // the chunk size the grid was computed with (kernel_plan)
        a.chain_unroll = self.unroll_of(kernel);
        // a chain queued outside a capture (a captured launch does not run now)
        let eager_chain = kernel.is_chain() && capture == 0;
        a.flags = chain_flags(
            kernel,
            self.chain_overlap.load(Ordering::Relaxed),
            prev_chain && eager_chain,
            self.staging_holds(bytes),
        );
        if kernel == Kernel::AllreduceLl63 && self.ar_ll63(bytes) == Some(true) {
            a.flags |= layout::FLAG_AR_ONESHOT;
        }
        let hears = kernel.hears_every_peer(bytes, self.size(), a.flags);
        if self.slot_order.after_one_way(capture) && kernel.is_all_peers_ll() {
            // SAFETY: the fence reads this rank's own scratch (epoch and done words,
            // alive for the Comm's lifetime) and writes only its error word.
            unsafe {
                self.module
                    .launch("commhal_coll_peers_done", stream, 1, 32, &a, false)?;
            }
        }
        // the copy-engine route: reduce-scatter step 0 by the copy engine first (the
        // head kernel starts at step 1), its launch number for the tail after the kernel
        let ce_launch = match &self.dma {
            Some(dma) if ce_tail => {
                Some(dma.allreduce_ring_first(&self.dma_ctx(&a, stream), bytes)?)
            }
            _ => None,
        };
        // SAFETY: every address in `a` is a live allocation of this Comm (own or an
        // imported peer mapping, kept in `_peers`) of at least `capacity` bytes
        // (checked above against what the kernel touches) or the scratch sized for
        // `ll_slot_bytes`; LL is only chosen for all-reduces <= ll_max and per-peer
        // chunks <= ll_chunk_max (the slots hold the larger); push only when the
        // staging area was sized for the capacity (stage_slot_bytes > 0); the
        // scatter + forward broadcast only with >= 3 ranks and 16-aligned bases (VMM
        // allocations); the chains only for whole 16-byte vectors, the reduce chain
        // only when the staging area (n x stage_slot_bytes) holds the whole buffer;
        // roots checked < n above; LL63 only for whole 16-byte vectors within the LL63
        // region (ll63_cap, what the scratch was sized for, the same on every rank) and
        // with blocks of whole warps (ll63_grid).
        unsafe {
            self.module
                .launch_op(dtype, op, name, stream, grid, block, &a, self.pdl)?;
        }
        // recorded once queued: a launch that failed leaves the last kernel as it was
        self.slot_order.record(hears, capture);
        // after anything else (a captured chain included) the next chain takes the barrier
        self.prev_chain.store(eager_chain, Ordering::Relaxed);
        match (&self.dma, ce_launch) {
            (Some(dma), Some(e)) => dma.allreduce_ring_tail(&self.dma_ctx(&a, stream), bytes, e),
            _ => Ok(()),
        }
    }

    /// Wait (bounded) for the stream, then read the device error word.
    pub fn sync(&self, what: &str) -> Result<()> {
        self.sync_on(&self.stream, what)
    }

    /// A signature mismatch the call table's log shows wins over the device error it
    /// causes (the clearer message), before and after the wait.
    fn sync_on(&self, stream: &Stream, what: &str) -> Result<()> {
        self.table.check_signatures()?;
        let r = self.wait_and_read_error(stream, what);
        if r.is_err() {
            self.table.check_signatures()?;
        }
        r
    }

    /// Wait (bounded) for `stream`, then read the device error words.
    fn wait_and_read_error(&self, stream: &Stream, what: &str) -> Result<()> {
        let bound = self.tuning.device_timeout * 3 + Duration::from_secs(30);
        driver::sync(stream, bound, what)?;
        let mut w = [0u8; 4];
        self.regions
            .read(&self.ctx, REGION_SCRATCH, layout::OFF_ERROR, &mut w)?;
        let mut code = u32::from_le_bytes(w);
        if code == 0 {
            code = self.plans.error_word()?;
        }
        if code != 0 {
            // the watchdog's code: name the rank the bootstrap saw go; the plans' port
            // proxy's own error when it stopped
            let why = (code == layout::ERR_PEER_GONE)
                .then(|| self.table.peer_failure())
                .flatten()
                .or_else(|| self.plans.port_error());
            return Err(CollError::Device {
                rank: self.rank,
                code,
                desc: layout::describe_error(code),
                what: match why {
                    Some(why) => format!("{what}: {why}"),
                    None => what.to_string(),
                },
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commhal_device_src::COLL_NVLINK;

    /// Which kernels let the next all-peers packet launch skip the `peers_done` fence.
    #[test]
    fn one_way_kernels_do_not_hear_every_peer() {
        let (kib, oneshot) = (1024, layout::FLAG_AR_ONESHOT);
        for k in [Kernel::SendrecvLl, Kernel::BroadcastLl, Kernel::ReduceChain] {
            assert!(!k.hears_every_peer(kib, 4, 0), "{k:?}");
        }
        assert!(Kernel::AllgatherLl.hears_every_peer(kib, 4, 0));
        assert!(Kernel::Allreduce2Shot.hears_every_peer(16, 4, 0));
        // all-pairs LL63: every chunk holds a vector only from `ranks` vectors on
        assert!(Kernel::AllreduceLl63.hears_every_peer(64, 4, 0));
        assert!(!Kernel::AllreduceLl63.hears_every_peer(48, 4, 0));
        assert!(Kernel::AllreduceLl63.hears_every_peer(48, 4, oneshot));
    }

    /// The all-peers LL63 kernels take the fence as the LL16 ones do (their packets
    /// carry no launch number either); the LL63 chains wait on their next rank instead.
    #[test]
    fn all_peers_ll63_kernels_take_the_fence() {
        for k in [
            Kernel::AllreduceLl63,
            Kernel::AllgatherLl63,
            Kernel::ReducescatterLl63,
            Kernel::AllgatherLl,
        ] {
            assert!(k.is_all_peers_ll(), "{k:?}");
        }
        for k in [
            Kernel::BroadcastLl63,
            Kernel::ReduceLl63,
            Kernel::BroadcastLl,
        ] {
            assert!(!k.is_all_peers_ll(), "{k:?}");
        }
    }

    #[test]
    fn region_sizes_follow_the_tuning_and_the_rank_count() {
        let tuned = |n| {
            crate::tuning::resolve(
                "NVIDIA H100 80GB HBM3",
                n,
                132,
                None,
                Duration::from_secs(1),
            )
            .unwrap()
            .0
        };
        let (t4, t1) = (tuned(4), tuned(1));
        let big = RegionSizes::new(&t4, 64 << 20, 4, false);
        assert!(big.ll_cap >= t4.ll_max.max(t4.ll_chunk_max).max(4096));
        assert!(big.ll63_bytes > 0 && big.small_half > 0);
        // the push all-reduce (from push_min) goes through the staging areas
        assert!(t4.push_min <= 64 << 20 && big.stage_slot > 0);
        assert_eq!(big.stage_bytes, 4 * big.stage_slot);
        assert!(!big.use_dma);
        let lens = big.lens(64 << 20);
        assert_eq!(
            (lens[0].1, lens[1].1, lens[3].1),
            (64 << 20, 64 << 20, big.stage_bytes)
        );
        // A small capacity needs no staging area, but keeps a 4 KiB one.
        let small = RegionSizes::new(&t4, 4096, 4, false);
        assert_eq!((small.stage_slot, small.stage_bytes), (0, 4096));
        assert!(small.ll63_bytes <= 4096);
        // On the copy engines everything is staged; one rank has no peers to reach.
        assert!(RegionSizes::new(&t4, 4096, 4, true).use_dma);
        let alone = RegionSizes::new(&t1, 64 << 20, 1, true);
        assert!(!alone.use_dma);
        assert_eq!(
            (alone.ll63_bytes, alone.small_half, alone.stage_slot),
            (0, 0, 0)
        );
    }

    /// The LL63 reduce-scatter's window sizes the small region's halves as the
    /// all-gather's does: at its maximum (bounded by the capacity) a half holds the
    /// n - 1 chunks a rank receives.
    #[test]
    fn ll63_small_half_holds_the_reduce_scatter_window() {
        let (t, _) = crate::tuning::resolve_with(
            "NVIDIA H100 80GB HBM3",
            4,
            132,
            None,
            Duration::from_secs(1),
            &|_| None,
        )
        .unwrap();
        // every other LL63 window off: the half is the reduce-scatter's alone
        let off = Tuning {
            bcast_ll63_max: 0,
            reduce_ll63_max: 0,
            ar_ll63_max: 0,
            ar_ll63_oneshot_max: 0,
            ag_ll63_max: 0,
            rs_ll63_max: 0,
            ..t
        };
        assert_eq!(RegionSizes::new(&off, 64 << 20, 4, false).small_half, 0);
        let on = Tuning {
            rs_ll63_max: 32 << 20,
            ..off
        };
        let half = |cap| RegionSizes::new(&on, cap, 4, false).small_half;
        assert_eq!(half(64 << 20), layout::oneshot_half_bytes(8 << 20, 4));
        assert_eq!(half(4 << 20), layout::oneshot_half_bytes(1 << 20, 4));
        // one rank has no peers: no half
        assert_eq!(RegionSizes::new(&on, 64 << 20, 1, false).small_half, 0);
    }

    #[test]
    fn ranks_must_agree_on_the_setup() {
        let t = Tuning {
            ll_max: 1,
            ll_chunk_max: 2,
            rooted_ll_max: 2,
            push_min: 3,
            rs_push_min: 4,
            rs_push_max: 5,
            bcast_sf_min: 6,
            bcast_chain_min: 7,
            reduce_chain_min: 8,
            ag_narrow_min: 22,
            reduce_all_max: 12,
            bcast_ll63_max: 13,
            reduce_ll63_max: 14,
            ar_ll63_min: 20,
            ar_ll63_max: 19,
            ar_ll63_oneshot_max: 21,
            ag_ll63_min: 24,
            ag_ll63_max: 23,
            rs_ll63_min: 26,
            rs_ll63_max: 25,
            bcast_ce_min: 15,
            sendrecv_ce_min: 16,
            reduce_ce_min: 17,
            ar_ce_min: 18,
            ar_ring_min: 9,
            ag_ring_min: 10,
            rs_ring_min: 11,
            chain_unroll: 8,
            ring_unroll: 16,
            reduce_chain_unroll: 32,
            threads: 512,
            ll_threads: 128,
            max_blocks: 132,
            device_timeout: Duration::from_secs(1),
        };
        let words = |t: &Tuning, cap: u64| {
            setup_words(t, cap, 3, false)
                .iter()
                .flat_map(|(_, v)| v.to_le_bytes())
                .collect::<Vec<u8>>()
        };
        let mine = setup_words(&t, 1 << 20, 3, false);
        assert!(check_setup(1, &mine, &words(&t, 1 << 20)).is_ok());
        // rank `r`'s refusal of a peer with tuning `other` and capacity `cap`
        let refusal = |r: u32, other: &Tuning, cap: u64| {
            check_setup(r, &mine, &words(other, cap))
                .unwrap_err()
                .to_string()
        };
        let e = refusal(
            1,
            &Tuning {
                ring_unroll: 4,
                ..t
            },
            1 << 20,
        );
        assert!(
            e.contains("rank 1 has ring_unroll") && e.contains("= 4, this rank 16"),
            "{e}"
        );
        // the LL16 grid too: a block per 128 packets here, per 512 there
        let e = refusal(
            1,
            &Tuning {
                ll_threads: 512,
                ..t
            },
            1 << 20,
        );
        assert!(e.contains("rank 1 has ll_threads"), "{e}");
        let e = refusal(2, &t, 2 << 20);
        assert!(e.contains("capacity"), "{e}");
        assert!(check_setup(3, &mine, &[0u8; 5]).is_err(), "short table");
    }

    #[test]
    fn a_second_plan_algorithm_is_refused() {
        let v = "allreduce:2pa-hb@4,allgather:ring";
        let plans = crate::plan_exec::parse_overrides(v).unwrap();
        let e = one_plan(plans.iter().map(|&(a, _)| a), v, "name one")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("names 2 plan algorithms") && e.contains("name one"),
            "{e}"
        );
        let one = crate::plan_exec::parse_overrides("allreduce:1pa").unwrap();
        assert!(one_plan(one.iter().map(|&(a, _)| a), "allreduce:1pa", "").is_ok());
        assert!(one_plan(std::iter::empty(), "", "").is_ok());
    }

    #[test]
    fn chain_flags_only_for_chains_after_chains() {
        use layout::{FLAG_BCAST_STAGED as S, FLAG_CHAIN_CREDITS as C, FLAG_CHAIN_OVERLAP as O};
        let on = chain_overlap_wanted(&|_| None).unwrap();
        // the first chain of a run (or one after a capture / another op): full barrier
        assert_eq!(chain_flags(Kernel::ReduceChain, on, false, true), 0);
        assert_eq!(chain_flags(Kernel::ReduceChain, on, true, true), O | C);
        // the broadcast chain is staged whenever credits are on and the staging holds it
        assert_eq!(chain_flags(Kernel::BroadcastChain, on, false, true), S);
        assert_eq!(
            chain_flags(Kernel::BroadcastChain, on, true, true),
            O | C | S
        );
        assert_eq!(chain_flags(Kernel::BroadcastChain, on, true, false), O | C);
        // neighbour start only: never staged; off: nothing
        assert_eq!(chain_flags(Kernel::BroadcastChain, O, true, true), O);
        assert_eq!(chain_flags(Kernel::BroadcastChain, 0, true, true), 0);
        // other kernels never carry chain flags
        for k in [Kernel::AllreduceRing, Kernel::ReduceLl63, Kernel::Broadcast] {
            assert_eq!(chain_flags(k, on, true, true), 0, "{k:?}");
        }
    }

    #[test]
    fn chain_overlap_parses() {
        let both = layout::FLAG_CHAIN_OVERLAP | layout::FLAG_CHAIN_CREDITS;
        assert_eq!(chain_overlap_wanted(&|_| None).unwrap(), both);
        assert_eq!(chain_overlap_wanted(&value(" 2 ")).unwrap(), both);
        assert_eq!(
            chain_overlap_wanted(&value("1")).unwrap(),
            layout::FLAG_CHAIN_OVERLAP
        );
        assert_eq!(chain_overlap_wanted(&value("0")).unwrap(), 0);
        let e = chain_overlap_wanted(&value("yes")).unwrap_err().to_string();
        assert!(
            e.contains("COMMHAL_COLL_CHAIN_OVERLAP=\"yes\"") && e.contains("one of 0, 1, 2"),
            "{e}"
        );
    }

    /// Every variable reads `v` (a one-setting environment).
    fn value(v: &'static str) -> impl Fn(&str) -> Option<String> {
        move |_| Some(v.to_string())
    }

    #[test]
    fn pdl_follows_the_gpu_and_the_environment() {
        assert!(pdl_wanted(&|_| None, 9, true).unwrap());
        assert!(!pdl_wanted(&|_| None, 8, true).unwrap());
        assert!(!pdl_wanted(&|_| None, 9, false).unwrap());
        assert!(!pdl_wanted(&value("0"), 9, true).unwrap());
        assert!(pdl_wanted(&value("1"), 10, true).unwrap());
        let e = pdl_wanted(&value("1"), 8, true).unwrap_err().to_string();
        assert!(e.contains("COMMHAL_COLL_PDL=1") && e.contains("8.x"), "{e}");
        let e = pdl_wanted(&value("maybe"), 9, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("COMMHAL_COLL_PDL=\"maybe\""), "{e}");
    }

    #[test]
    fn every_kernel_name_is_in_the_unit() {
        for k in [
            Kernel::AllreduceLl,
            Kernel::Allreduce2Shot,
            Kernel::Allgather,
            Kernel::Reducescatter,
            Kernel::AllgatherLl,
            Kernel::ReducescatterLl,
            Kernel::AllreducePush,
            Kernel::ReducescatterPush,
            Kernel::Broadcast,
            Kernel::BroadcastSf,
            Kernel::Reduce,
            Kernel::ReduceAll,
            Kernel::Alltoall,
            Kernel::Sendrecv,
            Kernel::BroadcastLl,
            Kernel::ReduceLl,
            Kernel::AlltoallLl,
            Kernel::SendrecvLl,
            Kernel::BroadcastChain,
            Kernel::ReduceChain,
            Kernel::BroadcastLl63,
            Kernel::ReduceLl63,
            Kernel::AllreduceLl63,
            Kernel::AllgatherLl63,
            Kernel::ReducescatterLl63,
            Kernel::AllreduceRing,
            Kernel::AllreduceRingHead,
            Kernel::ReducescatterRing,
            Kernel::AllgatherRing,
        ] {
            for d in [Dtype::Half, Dtype::Bfloat16, Dtype::Float] {
                let name = kernel_name(k, d);
                assert!(COLL_NVLINK.kernels.contains(&name), "{name}");
                if !matches!(
                    k,
                    Kernel::Allgather
                        | Kernel::AllgatherLl
                        | Kernel::AllgatherLl63
                        | Kernel::Broadcast
                        | Kernel::BroadcastSf
                        | Kernel::Alltoall
                        | Kernel::Sendrecv
                        | Kernel::BroadcastLl
                        | Kernel::BroadcastChain
                        | Kernel::BroadcastLl63
                        | Kernel::AllgatherRing
                        | Kernel::AlltoallLl
                        | Kernel::SendrecvLl
                ) {
                    assert!(name.ends_with(d.suffix()), "{name}");
                }
            }
        }
        // The copy-engine path's own kernels.
        for d in [Dtype::Half, Dtype::Bfloat16, Dtype::Float] {
            for name in [
                crate::dma::reduce_pair_ce_kernel(d),
                crate::dma::reduce_local_kernel(d),
            ] {
                assert!(COLL_NVLINK.kernels.contains(&name), "{name}");
                assert!(name.ends_with(d.suffix()), "{name}");
            }
        }
    }
}
