//! Which hand-written kernel runs a call, on which grid: the size thresholds of the
//! [`Tuning`](super::Tuning) applied per collective ([`Comm::plan`] names the choice,
//! `kernel_plan` makes it), and the copy-engine routes that take over where they are
//! faster.

use super::{CE_LABEL, Comm, Kernel, Tuning, kernel_name};
use crate::layout;
use crate::types::{Collective, Dtype};

impl Comm {
    /// Grid of an LL kernel over `packets` 8-byte units (one per thread,
    /// [`layout::packet_grid`]).
    pub(super) fn ll_grid(&self, packets: u64) -> (u32, u32) {
        layout::packet_grid(packets, self.tuning.ll_threads, self.tuning.max_blocks)
    }

    pub(super) fn grid_for(&self, units16: u64) -> (u32, u32) {
        let t = u64::from(self.tuning.threads);
        let blocks = units16
            .div_ceil(t)
            .clamp(1, u64::from(self.tuning.max_blocks));
        (blocks as u32, self.tuning.threads)
    }

    /// Whether a per-peer transfer of `bytes` goes through LL packets (all-gather and
    /// reduce-scatter chunks, broadcast / reduce / send-recv buffers, all-to-all
    /// chunks): up to the tuned LL chunk threshold, within the LL slot, whole 8-byte
    /// packets.
    pub(super) fn ll_per_peer(&self, bytes: u64) -> bool {
        ll_per_peer(&self.tuning, bytes)
    }

    /// Whether a broadcast / reduce of `bytes` runs as the pipelined chain: from the
    /// tuned size, whole 16-byte vectors, 3 or more ranks for a broadcast (with 2 the
    /// direct kernel is the same single transfer), the staging area for a reduce.
    pub(super) fn chain(&self, coll: Collective, bytes: u64) -> bool {
        let aligned = bytes.is_multiple_of(16) && self.n > 1;
        match coll {
            Collective::Broadcast => aligned && self.n >= 3 && bytes >= self.tuning.bcast_chain_min,
            Collective::Reduce => {
                aligned && bytes >= self.tuning.reduce_chain_min && self.staging_holds(bytes)
            }
            _ => false,
        }
    }

    /// Whether the staging areas (n slots of `stage_slot_bytes`) hold `bytes`: the
    /// reduce chain and the staged broadcast chain stage a whole buffer.
    pub(super) fn staging_holds(&self, bytes: u64) -> bool {
        self.base.stage_slot_bytes * u64::from(self.n) >= bytes
    }

    /// Whether a broadcast / reduce of `bytes` runs as the LL63 chain: 2 or more ranks,
    /// whole 16-byte vectors, up to the tuned size and within the LL63 region (the
    /// selector asks after the LL16 sizes).
    pub(super) fn ll63(&self, coll: Collective, bytes: u64) -> bool {
        let max = match coll {
            Collective::Broadcast => self.tuning.bcast_ll63_max,
            Collective::Reduce => self.tuning.reduce_ll63_max,
            _ => 0,
        };
        self.n > 1 && bytes.is_multiple_of(16) && bytes <= max && bytes <= self.ll63_cap
    }

    /// How an all-reduce of `bytes` (above the LL16 sizes) runs with LL63 packets, if it
    /// does: `Some(true)` in one shot (up to the tuned `ar_ll63_oneshot_max`),
    /// `Some(false)` over all pairs; in the tuned window, whole 16-byte vectors, and
    /// what a rank receives fits a parity half of the LL63 small region.
    pub(super) fn ar_ll63(&self, bytes: u64) -> Option<bool> {
        if self.n < 2
            || !bytes.is_multiple_of(16)
            || bytes < self.tuning.ar_ll63_min
            || bytes > self.tuning.ar_ll63_max
        {
            return None;
        }
        let half = self.base.ll63_small_half;
        if bytes <= self.tuning.ar_ll63_oneshot_max
            && layout::oneshot_half_bytes(bytes, self.n) <= half
        {
            return Some(true);
        }
        (layout::pairs_half_bytes(bytes, self.n) <= half).then_some(false)
    }

    /// Whether an all-gather of `bytes` (the output) runs with LL63 packets (asked
    /// before the LL16 kernel): the tuned `allgather_ll63_min` / `_max` window
    /// ([`all_peers_ll63`]; a rank receives the n - 1 other inputs).
    pub(super) fn ag_ll63(&self, bytes: u64) -> bool {
        let t = &self.tuning;
        let window = (t.ag_ll63_min, t.ag_ll63_max);
        all_peers_ll63(t, window, self.n, self.base.ll63_small_half, bytes)
    }

    /// Whether a reduce-scatter of `bytes` (the whole input, n x the per-rank chunk)
    /// runs with LL63 packets (asked before the LL16 kernel): the tuned
    /// `reducescatter_ll63_min` / `_max` window ([`all_peers_ll63`]; a rank receives
    /// its chunk of the n - 1 other inputs).
    pub(super) fn rs_ll63(&self, bytes: u64) -> bool {
        let t = &self.tuning;
        let window = (t.rs_ll63_min, t.rs_ll63_max);
        all_peers_ll63(t, window, self.n, self.base.ll63_small_half, bytes)
    }

    /// Grid of an LL63 chain ([`layout::ll63_grid`]).
    pub(super) fn ll63_grid(&self, bytes: u64) -> (u32, u32) {
        layout::ll63_grid(bytes, self.tuning.threads, self.tuning.max_blocks)
    }

    /// Whether an all-reduce (`bytes` = the buffer), all-gather (the output) or
    /// reduce-scatter (the input) runs on the ring kernels: from the tuned size, 2 or
    /// more ranks, whole 16-byte vectors per rank's segment (all-reduce: of the
    /// buffer), and a staging area for the reducing ones: one that holds the input for
    /// the reduce-scatter; the all-reduce runs in portions of the area's size.
    pub(super) fn ring(&self, coll: Collective, bytes: u64) -> bool {
        let n = u64::from(self.n);
        let staged = self.base.stage_slot_bytes * n >= bytes;
        self.n > 1
            && match coll {
                // larger than the staging area: the kernel runs it in portions
                Collective::Allreduce => {
                    bytes >= self.tuning.ar_ring_min
                        && bytes.is_multiple_of(16)
                        && self.base.stage_slot_bytes > 0
                }
                Collective::Allgather => {
                    bytes >= self.tuning.ag_ring_min && (bytes / n).is_multiple_of(16)
                }
                Collective::Reducescatter => {
                    bytes >= self.tuning.rs_ring_min
                        && (bytes / n).is_multiple_of(16)
                        && staged
                        && !self.rs_push(bytes)
                }
                _ => false,
            }
    }

    /// Whether a reduce-scatter of `bytes` (total input) runs on the push kernel: inside
    /// the tuned window (which wins over the ring's threshold: the tuner sets the window
    /// to the sizes where push was the fastest kernel), whole 16-byte vectors per rank,
    /// the staging area.
    pub(super) fn rs_push(&self, bytes: u64) -> bool {
        self.base.stage_slot_bytes > 0
            && self.tuning.rs_push_min > 0
            && (self.tuning.rs_push_min..=self.tuning.rs_push_max).contains(&bytes)
            && self.staging_holds(bytes)
            && (bytes / u64::from(self.n)).is_multiple_of(16)
    }

    /// Whether a broadcast / reduce (2 ranks) / send-recv of `bytes` goes to the copy engines
    /// by the tuned thresholds (outside a graph capture; `launch_rooted` checks that).
    pub(super) fn ce_route(&self, coll: Collective, bytes: u64) -> bool {
        self.dma.is_some()
            && match coll {
                Collective::Sendrecv => bytes >= self.tuning.sendrecv_ce_min,
                Collective::Broadcast => self.n == 2 && bytes >= self.tuning.bcast_ce_min,
                // the non-root copies into the root's whole staging area
                Collective::Reduce => {
                    self.n == 2
                        && bytes >= self.tuning.reduce_ce_min
                        && bytes.is_multiple_of(16)
                        && self.base.stage_slot_bytes * 2 >= bytes
                }
                _ => false,
            }
    }

    /// Whether a collective of `bytes` that the selector put on `kernel` ends on the copy
    /// engines: the all-reduce ring on 3 or more ranks from the tuned `ar_ce_min` (it
    /// then runs as [`Kernel::AllreduceRingHead`]), when the staging area holds the whole
    /// buffer (the copy engines move whole segments). Outside a graph capture only: the
    /// callers check that (last, since it asks the driver).
    pub(super) fn ce_tail(&self, kernel: Kernel, bytes: u64) -> bool {
        kernel == Kernel::AllreduceRing
            && self.dma.is_some()
            && self.staging_holds(bytes)
            && self.n >= 3
            && bytes >= self.tuning.ar_ce_min
    }

    /// Vectors per thread in one chunk of chain or ring kernel `k`: what its grid is
    /// sized with ([`Comm::chain_grid`]) and what it gets as `CollArgs::chain_unroll`.
    pub(super) fn unroll_of(&self, k: Kernel) -> u32 {
        match k {
            Kernel::AllreduceRing
            | Kernel::AllreduceRingHead
            | Kernel::ReducescatterRing
            | Kernel::AllgatherRing => self.tuning.ring_unroll,
            Kernel::ReduceChain => self.tuning.reduce_chain_unroll,
            _ => self.tuning.chain_unroll,
        }
    }

    /// Grid of chain or ring kernel `k`: enough blocks for one chunk each (chunks of
    /// threads x [`Comm::unroll_of`] vectors), at most `max_blocks`.
    pub(super) fn chain_grid(&self, bytes: u64, k: Kernel) -> (u32, u32) {
        let chunk = u64::from(self.tuning.threads) * u64::from(self.unroll_of(k)) * 16;
        let blocks = bytes
            .div_ceil(chunk)
            .clamp(1, u64::from(self.tuning.max_blocks));
        (blocks as u32, self.tuning.threads)
    }

    /// Which kernel and grid a collective uses (for the table's notes and tests).
    pub fn plan(&self, coll: Collective, dtype: Dtype, count: u64) -> (&'static str, u32, u32) {
        self.plan_for(coll, dtype, count, false)
    }

    /// [`Comm::plan`] for a launch inside a CUDA graph capture (`captured`), where the
    /// copy-engine routes give way to the kernels.
    pub fn plan_for(
        &self,
        coll: Collective,
        dtype: Dtype,
        count: u64,
        captured: bool,
    ) -> (&'static str, u32, u32) {
        let es = dtype.size();
        if self.dma_all && self.algorithm(coll).is_none() {
            return if self.routes.kernels {
                ("copy engines (COMMHAL_GPU_PATH=dma)", 0, 0)
            } else {
                ("copy engines (cuda-dma)", 0, 0)
            };
        }
        if !captured && self.algorithm(coll).is_none() && self.ce_route(coll, count * es) {
            return (CE_LABEL, 0, 0);
        }
        if let Some(call) = self.plan_call(coll, dtype, 0, false) {
            // the plan's own grid; an algorithm its builder refuses has none (its launch
            // reports why)
            let (ctas, threads) = self.plans.launch_grid(&call, count).unwrap_or((0, 0));
            return (crate::plan_exec::algorithm_label(call.algo), ctas, threads);
        }
        let (mut k, grid, block) = self.kernel_plan(coll, dtype, count);
        if !captured && self.ce_tail(k, count * es) {
            k = Kernel::AllreduceRingHead;
        }
        (kernel_name(k, dtype), grid, block)
    }

    /// The hand-written kernel and its grid for a collective (no plan algorithm, no
    /// copy-engine path): the selector, from the tuned thresholds.
    pub(super) fn kernel_plan(
        &self,
        coll: Collective,
        dtype: Dtype,
        count: u64,
    ) -> (Kernel, u32, u32) {
        let es = dtype.size();
        match coll {
            Collective::Allreduce => {
                let bytes = count * es;
                if bytes <= self.tuning.ll_max && bytes.is_multiple_of(8) {
                    let (blocks, threads) = self.ll_grid(bytes / 8);
                    (Kernel::AllreduceLl, blocks, threads)
                } else if let Some(oneshot) = self.ar_ll63(bytes) {
                    let items = if oneshot {
                        layout::oneshot_items(bytes)
                    } else {
                        layout::pairs_items(bytes, self.n)
                    };
                    let (b, t) = self.ll63_grid(items * layout::LL63_TILE_VECS * 16);
                    (Kernel::AllreduceLl63, b, t)
                } else {
                    if self.ring(coll, bytes) {
                        let (b, t) = self
                            .chain_grid(bytes.div_ceil(u64::from(self.n)), Kernel::AllreduceRing);
                        return (Kernel::AllreduceRing, b, t);
                    }
                    let (b, t) = self.grid_for((bytes / 16).div_ceil(u64::from(self.n)));
                    let push = self.base.stage_slot_bytes > 0
                        && self.tuning.push_min > 0
                        && bytes >= self.tuning.push_min
                        && self.staging_holds(bytes);
                    let k = if push {
                        Kernel::AllreducePush
                    } else {
                        Kernel::Allreduce2Shot
                    };
                    (k, b, t)
                }
            }
            Collective::Allgather if self.ag_ll63(count * es * u64::from(self.n)) => {
                // a warp per tile received: (n - 1) tiles of every tile sent
                let items = layout::oneshot_items(count * es) * u64::from(self.n - 1);
                let (b, t) = self.ll63_grid(items * layout::LL63_TILE_VECS * 16);
                (Kernel::AllgatherLl63, b, t)
            }
            Collective::Reducescatter if self.rs_ll63(count * es * u64::from(self.n)) => {
                // a warp per tile sent: (n - 1) parts of the own chunk's size (the sum
                // of the own chunk's tiles runs on the first of those warps)
                let items = layout::oneshot_items(count * es) * u64::from(self.n - 1);
                let (b, t) = self.ll63_grid(items * layout::LL63_TILE_VECS * 16);
                (Kernel::ReducescatterLl63, b, t)
            }
            Collective::Allgather if self.ll_per_peer(count * es) => {
                // a thread per packet received: (n - 1) of every packet sent
                let (blocks, threads) = self.ll_grid(count * es / 8 * u64::from(self.n - 1));
                (Kernel::AllgatherLl, blocks, threads)
            }
            Collective::Reducescatter if self.ll_per_peer(count * es) => {
                let (blocks, threads) = self.ll_grid(count * es / 8);
                (Kernel::ReducescatterLl, blocks, threads)
            }
            Collective::Allgather | Collective::Reducescatter
                if self.ring(coll, count * es * u64::from(self.n)) =>
            {
                let k = pair(
                    coll,
                    Collective::Allgather,
                    Kernel::AllgatherRing,
                    Kernel::ReducescatterRing,
                );
                let (b, t) = self.chain_grid(count * es, k);
                (k, b, t)
            }
            Collective::Allgather => {
                let (mut b, t) = self.grid_for((count * es).div_ceil(16));
                if count * es * u64::from(self.n) >= self.tuning.ag_narrow_min {
                    b = b.min(layout::AG_NARROW_BLOCKS);
                }
                (Kernel::Allgather, b, t)
            }
            Collective::Reducescatter => {
                let (b, t) = self.grid_for((count * es).div_ceil(16));
                let k = if self.rs_push(count * es * u64::from(self.n)) {
                    Kernel::ReducescatterPush
                } else {
                    Kernel::Reducescatter
                };
                (k, b, t)
            }
            Collective::Broadcast | Collective::Reduce
                if self.n > 1
                    && self.ll_per_peer(count * es)
                    && count * es <= self.tuning.rooted_ll_max =>
            {
                let (blocks, threads) = self.ll_grid(count * es / 8);
                let k = pair(
                    coll,
                    Collective::Broadcast,
                    Kernel::BroadcastLl,
                    Kernel::ReduceLl,
                );
                (k, blocks, threads)
            }
            Collective::Broadcast | Collective::Reduce if self.ll63(coll, count * es) => {
                let (b, t) = self.ll63_grid(count * es);
                let k = pair(
                    coll,
                    Collective::Broadcast,
                    Kernel::BroadcastLl63,
                    Kernel::ReduceLl63,
                );
                (k, b, t)
            }
            Collective::Broadcast => {
                let bytes = count * es;
                if self.chain(coll, bytes) {
                    let (b, t) = self.chain_grid(bytes, Kernel::BroadcastChain);
                    (Kernel::BroadcastChain, b, t)
                } else if self.n >= 3 && bytes >= self.tuning.bcast_sf_min && bytes >= 16 {
                    let (b, t) = self.grid_for((bytes / 16).div_ceil(u64::from(self.n - 1)));
                    (Kernel::BroadcastSf, b, t)
                } else {
                    let (b, t) = self.grid_for(bytes.div_ceil(16));
                    (Kernel::Broadcast, b, t)
                }
            }
            Collective::Reduce if self.chain(coll, count * es) => {
                let (b, t) = self.chain_grid(count * es, Kernel::ReduceChain);
                (Kernel::ReduceChain, b, t)
            }
            Collective::Reduce => {
                // up to reduce_all_max (3+ ranks) the root works too: n shares, else
                // the workers of layout::reduce_worker
                let (k, workers) = if self.n >= 3 && count * es <= self.tuning.reduce_all_max {
                    (Kernel::ReduceAll, self.n)
                } else {
                    (Kernel::Reduce, crate::layout::reduce_worker(self.n, 0, 0).0)
                };
                let (b, t) = self.grid_for((count * es).div_ceil(16).div_ceil(u64::from(workers)));
                (k, b, t)
            }
            Collective::Alltoall | Collective::Sendrecv
                if self.n > 1 && self.ll_per_peer(count * es) =>
            {
                let (blocks, threads) = self.ll_grid(count * es / 8);
                let k = pair(
                    coll,
                    Collective::Alltoall,
                    Kernel::AlltoallLl,
                    Kernel::SendrecvLl,
                );
                (k, blocks, threads)
            }
            Collective::Alltoall => {
                let (b, t) = self.grid_for((count * es).div_ceil(16));
                (Kernel::Alltoall, b, t)
            }
            Collective::Sendrecv => {
                let (b, t) = self.grid_for((count * es).div_ceil(16));
                (Kernel::Sendrecv, b, t)
            }
        }
    }
}

/// The kernel of a pair of collectives one arm handles: `a` for `first`, else `b`.
fn pair(coll: Collective, first: Collective, a: Kernel, b: Kernel) -> Kernel {
    if coll == first { a } else { b }
}

/// Whether a per-peer transfer of `bytes` is an LL16 one ([`Comm::ll_per_peer`]): up
/// to the tuned LL chunk threshold, whole 8-byte packets.
fn ll_per_peer(t: &Tuning, bytes: u64) -> bool {
    bytes <= t.ll_chunk_max && bytes.is_multiple_of(8)
}

/// Whether a call of `bytes` made of n per-rank chunks (an all-gather's output, a
/// reduce-scatter's input) runs an all-peers LL63 kernel, which sends every peer a
/// chunk and needs no barrier: 2 or more ranks, inside `window` (min..=max; min 0:
/// from right above the LL16 chunk sizes; max 0: never), whole 16-byte vectors per
/// rank (LL63 moves whole vectors only), and the n - 1 chunks a rank receives fit a
/// parity half of the LL63 small region (`small_half` bytes, sized from the windows'
/// maxima when the communicator was created).
fn all_peers_ll63(t: &Tuning, window: (u64, u64), n: u32, small_half: u64, bytes: u64) -> bool {
    let (min, max) = window;
    let per_rank = bytes / u64::from(n.max(1));
    let from_min = match min {
        0 => !ll_per_peer(t, per_rank),
        min => bytes >= min,
    };
    n > 1
        && from_min
        && bytes <= max
        && per_rank.is_multiple_of(16)
        && layout::oneshot_half_bytes(per_rank, n) <= small_half
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const M: u64 = 1 << 20;
    /// A parity half that holds the chunks of any size these tests ask.
    const ROOMY: u64 = 1 << 30;

    /// The committed tuning of `n` ranks on H100, with the environment `env`.
    fn tuning_with(n: u32, env: &dyn Fn(&str) -> Option<String>) -> Tuning {
        crate::tuning::resolve_with(
            "NVIDIA H100 80GB HBM3",
            n,
            132,
            None,
            Duration::from_secs(1),
            env,
        )
        .unwrap()
        .0
    }

    fn tuning(n: u32) -> Tuning {
        tuning_with(n, &|_| None)
    }

    /// [`Comm::rs_ll63`] without a communicator: `t`'s reduce-scatter window on `n`
    /// ranks with a parity half of `half` bytes.
    fn rs_ll63(t: &Tuning, n: u32, half: u64, bytes: u64) -> bool {
        all_peers_ll63(t, (t.rs_ll63_min, t.rs_ll63_max), n, half, bytes)
    }

    /// A tuning file that leaves the window's keys out gives their declared defaults
    /// (tuning.rs tests that): no size takes the LL63 reduce-scatter then.
    #[test]
    fn reduce_scatter_ll63_is_off_by_default() {
        use commhal_hal::settings::gpu::{COLL_RS_LL63_MAX, COLL_RS_LL63_MIN};
        for n in [2, 4, 8] {
            let t = Tuning {
                rs_ll63_min: COLL_RS_LL63_MIN.default_number(),
                rs_ll63_max: COLL_RS_LL63_MAX.default_number(),
                ..tuning(n)
            };
            for shift in 4..=30 {
                let bytes = u64::from(n) << shift;
                assert!(!rs_ll63(&t, n, ROOMY, bytes), "{n} ranks, {bytes} bytes");
            }
        }
    }

    #[test]
    fn reduce_scatter_ll63_runs_inside_its_window() {
        let env = |k: &str| match k {
            "COMMHAL_COLL_RS_LL63_MIN" => Some("1M".to_string()),
            "COMMHAL_COLL_RS_LL63_MAX" => Some("4M".to_string()),
            _ => None,
        };
        let t = tuning_with(4, &env);
        assert_eq!((t.rs_ll63_min, t.rs_ll63_max), (M, 4 * M));
        // the all-gather's window stays the file's
        let file = tuning(4);
        assert_eq!(
            (t.ag_ll63_min, t.ag_ll63_max),
            (file.ag_ll63_min, file.ag_ll63_max)
        );
        assert!(!rs_ll63(&t, 4, ROOMY, M / 2));
        assert!(rs_ll63(&t, 4, ROOMY, M));
        assert!(rs_ll63(&t, 4, ROOMY, 2 * M));
        assert!(rs_ll63(&t, 4, ROOMY, 4 * M));
        assert!(!rs_ll63(&t, 4, ROOMY, 8 * M));
        // one rank: nothing to scatter
        assert!(!rs_ll63(&t, 1, ROOMY, 2 * M));
        // the n - 1 chunks a rank receives (of M / 2 each at 2 MiB) must fit the half
        let need = layout::oneshot_half_bytes(M / 2, 4);
        assert!(rs_ll63(&t, 4, need, 2 * M));
        assert!(!rs_ll63(&t, 4, need - 1, 2 * M));
    }

    #[test]
    fn reduce_scatter_ll63_needs_whole_vectors_per_rank() {
        let t = Tuning {
            rs_ll63_min: 1,
            rs_ll63_max: 64 * M,
            ..tuning(4)
        };
        assert!(rs_ll63(&t, 4, ROOMY, 4 * 16 * 1000));
        // 8-byte multiples per rank (LL16 packets would do) but not 16
        assert!(!rs_ll63(&t, 4, ROOMY, 4 * (16 * 1000 + 8)));
        assert!(!rs_ll63(&t, 4, ROOMY, 4 * 24));
    }

    #[test]
    fn reduce_scatter_ll63_min_zero_starts_above_the_ll16_chunks() {
        let t = Tuning {
            rs_ll63_min: 0,
            rs_ll63_max: 64 * M,
            ..tuning(4)
        };
        let chunk = t.ll_chunk_max;
        assert!(chunk > 0 && chunk.is_multiple_of(16), "{chunk}");
        assert!(!rs_ll63(&t, 4, ROOMY, 4 * chunk));
        assert!(rs_ll63(&t, 4, ROOMY, 4 * (chunk + 16)));
    }
}
