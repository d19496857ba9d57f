//! The copy-engine path (`COMMHAL_GPU_PATH=dma`, or a selection whose only link is
//! cuda-dma): every collective as copies made by the GPU's copy engines — cuda-dma's
//! [`StreamPort`] puts between this rank's buffers and the peers' mapped ones — one side
//! stream per peer so the engines run in parallel, ordered across ranks by flags in
//! every rank's scratch ([`layout::dma_flag`]: peers write them with the port's 32-bit
//! signals, a one-warp bounded wait kernel reads them), plus one local reduction kernel
//! (`commhal_coll_reduce_local_*`, no remote access) for the reducing collectives. No
//! SM touches a peer's memory: the kernels of this path read and write only this rank's
//! own memory, which is why the path runs on regions and links that cuda-dma alone
//! provides. Every copy and flag write goes through [`StreamPort`] (the same operations
//! the cuda-dma proxy port queues); nothing here calls the driver's copy or write-value
//! entry points itself.
//!
//! **Protocol of launch `e`** (a host counter; launches are matched across ranks, so it
//! agrees everywhere):
//! - START: every rank writes `e` into `flag[START][me]` of every peer and waits until
//!   its own `flag[START][p] >= e` for every peer: every peer's stream reached this
//!   collective, so its inputs are written and its outputs / staging no longer in use.
//! - Copies on side stream `k` (peer `p = (me + k) % n`), each followed *on the same
//!   stream* by the write of `e` into `p`'s `flag[MID or END][me]` (default stream
//!   memory barrier: the copy is visible before the flag — the cuda-dma port's
//!   signal, checked by its conformance cases).
//! - The main stream waits for the flags the peers write here, then joins the side
//!   streams (an event each), so later work on the main stream sees every copy of this
//!   rank done and its inputs no longer read.
//!
//! Per collective (S bytes, n ranks, `chunk p` = elements `partition(count, n, p)`):
//! - all-reduce: START; chunk p of the input → p's staging slot `[me]`, MID; reduce the
//!   own chunk locally (input + staging) into the output; own result chunk → every
//!   peer's output, END.
//! - reduce-scatter: START; input chunk p → p's staging slot `[me]`, MID; local reduce
//!   into the output. (No END: nothing remote is touched after MID.)
//! - reduce: the all-reduce's first half; a non-root reduces its chunk into its own
//!   staging slot `[me]` (never written by a peer) and copies it to the root's output,
//!   END to the root.
//! - all-gather / all-to-all / send-recv / broadcast: START; the copies, END.
//!
//! **The 2-rank reduce route** ([`DmaPath::reduce_pair`], the tuned `reduce_ce_min`, not
//! `COMMHAL_GPU_PATH=dma`): START, one way (the root's "staging free" to the non-root,
//! which waits for it; the root goes on); the non-root copies its input into the root's
//! staging area in chunks ([`layout::pair_ce_chunks`]: each half of what is left, the
//! last 2..4 MiB), each followed on its stream by the write of [`layout::pair_ce_tag`] into
//! the root's [`DMA_CHUNK`] flag; the root runs one kernel
//! (`commhal_coll_reduce_pair_ce_*`) that reduces chunk k as soon as its flag is there,
//! while the copy engine moves the next ones. No END: the root's kernel has waited for
//! every chunk, and the non-root writes the staging again only after the next START.
//!
//! **The all-reduce ring with copy-engine ends** ([`DmaPath::allreduce_ring_first`],
//! the head kernel, [`DmaPath::allreduce_ring_tail`]; the tuned `ar_ce_min`, 3 or more
//! ranks). Every step the copy engines take is one whole segment to one peer: a copy
//! engine pushing to one peer while another pushes into this GPU moves ~392 GB/s per GPU
//! against ~366 for the SM stores of the ring kernel (bench/micro/ce_pipeline.cu).
//! - First: reduce-scatter step 0 is a pure copy. Rank r writes `e`
//!   into the previous rank's [`DMA_START`] flag (its own staging is free: its stream
//!   reached this launch) and waits for the next rank's; copies its input segment r-1
//!   into the next rank's staging; writes `e` into the next rank's [`DMA_MID`] flag; and
//!   waits for the previous rank's (segment r-2 is in its own staging).
//! - `commhal_coll_allreduce_ring_head_*` runs reduce-scatter steps 1..n-2 and the first
//!   all-gather step (rank r then holds its reduced segment r and segment r-1).
//! - Tail: the other n-2 all-gather steps, one `cuMemcpyAsync` each on the main stream —
//!   step t copies segment r-t from this rank's output into the next rank's, then writes
//!   [`layout::pair_ce_tag`]`(e, t)` into the next rank's [`DMA_RING`] flag, and the
//!   stream waits for the previous rank's step-t flag (segment r-t-1 here) before step
//!   t+1.
//!
//! In place, two copies overwrite what a peer still reads. (1) The tail's step-t copy
//! overwrites segment r-t of the next rank's input, which that rank's kernel reads in its
//! reduce-scatter step t >= 1; no handshake is needed: the copy starts after the flags of
//! rank r-t+1's kernel end (this rank's own for t = 1, the previous ranks' step flags
//! after it), and through the ring's round flags that end comes after rank r-t's
//! all-gather step, rank r-t-1's last reduce-scatter step, ..., and rank r+1's
//! reduce-scatter step t. (2) The previous rank's all-gather step writes segment r-1 over
//! this rank's input, which this rank's first-step copy reads: that kernel step depends,
//! through n-1 hops of round flags and one first-step wait, on this rank's first-step copy
//! having landed (rank q's step s waits for rank q-1's step s-1; step 1 waits, before the
//! kernel, for the copy of step 0). Out of place the copies touch only staging areas and
//! output segments that no kernel of this launch reads or writes before they land.
//!
//! Not capturable into CUDA graphs (the flag values are baked in at capture): a capture
//! gets a clear error. The waits are a one-warp kernel bounded by the device wait bound
//! (`commhal_coll_dma_wait`), not `cuStreamWaitValue32`: a dead peer gives every rank
//! that waits for it the wait-timeout device error from [`crate::Comm::sync`], and the
//! stream drains. As with the kernels, the copies queued after a failed wait still run
//! (into a peer that is gone, or one that missed the bound: the error says so), and the
//! error word is sticky: every later wait of this communicator gives up at once, so
//! after a device error the communicator must not be used again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use commhal_cuda_rt::{Context, Event, Stream};

use crate::error::{CollError, Result};
use crate::kernels::Kernels;
use crate::layout::{self, CollArgs, DMA_CHUNK, DMA_END, DMA_MID, DMA_RING, DMA_START, partition};
use crate::types::{Collective, Dtype, typed_kernel};
use commhal_backend_cuda_dma::StreamPort;

/// Stream memory operations this path needs from the driver (the waits are a kernel):
/// those of cuda-dma's [`StreamPort`].
pub const SYMBOLS: [&str; 1] = commhal_backend_cuda_dma::stream_port::SYMBOLS;

/// Whether this driver has the stream memory operations the path needs.
pub fn available() -> bool {
    StreamPort::available()
}

/// Where this rank's contribution lands in peer `p`'s staging: slot `[me]`.
fn stage_slot(a: &CollArgs, p: u32) -> u64 {
    a.stage[p as usize] + u64::from(a.rank) * a.stage_slot_bytes
}

/// On `stream`: copy (dst, src, bytes) (nothing for 0 bytes), then write `e` into peer
/// `p`'s flag `kind` from this rank (the default stream memory barrier makes the copy
/// visible first).
fn copy_then_signal(
    stream: &Stream,
    a: &CollArgs,
    p: u32,
    kind: u64,
    e: u32,
    (dst, src, len): (u64, u64, u64),
) -> Result<()> {
    let flag = a.scratch[p as usize] + layout::dma_flag(kind, a.rank);
    // SAFETY: callers pass ranges inside this Comm's own or mapped peer allocations
    // (sizes checked against the capacity / staging slot); the peer's scratch is mapped
    // for the Comm's lifetime and the flag is 4-aligned.
    unsafe { StreamPort::new()?.put_signal32(stream, (dst, src, len), flag, e)? };
    Ok(())
}

/// On `stream`: copy `len` bytes from `src` to `dst` (nothing for 0 bytes), with no
/// signal (a copy between this rank's own buffers).
fn put(stream: &Stream, dst: u64, src: u64, len: u64) -> Result<()> {
    // SAFETY: callers pass this rank's own input and output, within capacity (checked
    // by the Comm).
    unsafe { StreamPort::new()?.put(stream, dst, src, len)? };
    Ok(())
}

/// On `stream`: write `e` into peer `p`'s flag `kind` from this rank.
pub(crate) fn signal(stream: &Stream, a: &CollArgs, p: u32, kind: u64, e: u32) -> Result<()> {
    let flag = a.scratch[p as usize] + layout::dma_flag(kind, a.rank);
    // SAFETY: the peer's scratch is mapped for the Comm's lifetime; the flag is
    // 4-aligned; `StreamPort::new` checked the driver has the symbol.
    unsafe { StreamPort::new()?.signal32(stream, flag, e)? };
    Ok(())
}

/// The main stream waits until every `from` rank wrote `e` into its flag here:
/// `commhal_coll_dma_wait`, a one-warp kernel bounded by the device wait bound (a
/// dead peer gives this rank the wait-timeout device error and the stream drains;
/// `cuStreamWaitValue32` would block it, and the process's exit, for good).
pub(crate) fn wait_flags(
    c: &Ctx<'_>,
    kind: u64,
    e: u32,
    from: impl Iterator<Item = u32>,
) -> Result<()> {
    let mut args = *c.args;
    args.count = layout::dma_flag(kind, 0);
    args.root = e;
    args.chain_unroll = from.fold(0u32, |m, p| m | (1 << p));
    if args.chain_unroll == 0 {
        return Ok(());
    }
    // SAFETY: the kernel reads u32 flags of this rank's own scratch (alive for the
    // Comm's lifetime, the flag rows inside it: layout's tests) and writes only its
    // error word; `args` is the Comm's own argument block with three fields reused
    // as the kernel documents.
    unsafe {
        c.module
            .launch("commhal_coll_dma_wait", c.main, 1, 32, &args, false)
    }
}

/// The 2-rank reduce route's root kernel for `dtype` (see the module docs): the main
/// module's `_f16` / `_bf16` / `_f32` name, the per-(type, op) module's otherwise
/// ([`Kernels::launch_args`] picks the module by `CollArgs::red_op`).
pub(crate) fn reduce_pair_ce_kernel(dtype: Dtype) -> &'static str {
    typed_kernel!(dtype, "commhal_coll_reduce_pair_ce")
}

/// The local reduction (input + staging slots, no remote access) for `dtype` (named
/// as [`reduce_pair_ce_kernel`]).
pub(crate) fn reduce_local_kernel(dtype: Dtype) -> &'static str {
    typed_kernel!(dtype, "commhal_coll_reduce_local")
}

/// This rank's (next, previous) rank in the ring r -> r+1.
fn ring_neighbours(a: &CollArgs) -> (u32, u32) {
    let (me, n) = (a.rank, a.nranks);
    ((me + 1) % n, (me + n - 1) % n)
}

/// (byte offset, bytes) of the ring all-reduce's segment `rank - t` of a `bytes` buffer:
/// what this rank sends in reduce-scatter step t - 1 (t = 1: the first step) and in
/// all-gather step t ([`partition`] of the 16-byte vectors, as the ring kernel cuts them).
fn ring_segment(a: &CollArgs, bytes: u64, t: u32) -> (u64, u64) {
    let n = a.nranks;
    let (b, x) = partition(bytes / 16, n, (a.rank + n - t) % n);
    (b * 16, (x - b) * 16)
}

/// Blocks of a local kernel over `bytes` (one 16-byte vector per thread, grid-strided
/// beyond `c.max_blocks`).
fn local_blocks(c: &Ctx<'_>, bytes: u64) -> u32 {
    bytes
        .div_ceil(16)
        .div_ceil(u64::from(c.threads))
        .clamp(1, u64::from(c.max_blocks)) as u32
}

/// Side streams, fork/join events and the launch counter of one communicator.
#[derive(Debug)]
pub struct DmaPath {
    side: Vec<Stream>,
    fork: Event,
    joins: Vec<Event>,
    seq: AtomicU32,
}

/// What a launch needs from its communicator.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The communicator's stream (the caller's order).
    pub main: &'a Stream,
    /// The collectives' modules (the local reductions pick theirs by dtype and
    /// `args.red_op`).
    pub module: &'a Kernels,
    /// Every address of this launch (in place already applied).
    pub args: &'a CollArgs,
    /// Threads per block and most blocks of the local reduction.
    pub threads: u32,
    /// See `threads`.
    pub max_blocks: u32,
}

impl DmaPath {
    /// Side streams for `n - 1` peers on `ctx`. Fails when the driver lacks stream
    /// memory operations.
    pub fn new(ctx: &Arc<Context>, n: u32) -> Result<DmaPath> {
        if !available() {
            return Err(CollError::invalid(format!(
                "the copy-engine path needs stream memory operations ({}), which this driver lacks: update the driver, or unset COMMHAL_GPU_PATH and select a memory backend (COMMHAL_BACKENDS=cuda-nvlink)",
                SYMBOLS.join(", ")
            )));
        }
        let peers = n.saturating_sub(1) as usize;
        Ok(DmaPath {
            side: (0..peers)
                .map(|_| Stream::new(ctx))
                .collect::<std::result::Result<_, _>>()?,
            fork: Event::new(ctx)?,
            joins: (0..peers)
                .map(|_| Event::new(ctx))
                .collect::<std::result::Result<_, _>>()?,
            seq: AtomicU32::new(0),
        })
    }

    /// Queue one collective (`count` and the addresses as [`crate::Comm::launch_rooted`]
    /// prepared them in `c.args`).
    pub fn launch(&self, c: &Ctx<'_>, coll: Collective, dtype: Dtype, count: u64) -> Result<()> {
        if c.main.is_capturing()? {
            return Err(CollError::invalid(
                "the copy-engine path (COMMHAL_GPU_PATH=dma, or cuda-dma the only backend in COMMHAL_BACKENDS) cannot be captured into a CUDA graph: its flags are numbered by the host; capture with the kernels (COMMHAL_BACKENDS with cuda-nvlink, COMMHAL_GPU_PATH unset)",
            ));
        }
        let a = c.args;
        let n = a.nranks;
        let me = a.rank;
        let es = dtype.size();
        // the largest chunk a rank puts into a peer's staging slot
        let biggest = match coll {
            Collective::Allreduce | Collective::Reduce => count.div_ceil(u64::from(n)) * es,
            Collective::Reducescatter => count * es,
            _ => 0,
        };
        if biggest > a.stage_slot_bytes {
            return Err(CollError::invalid(format!(
                "copy-engine path: a {biggest}-byte chunk does not fit the {}-byte staging slot; create the Comm with a larger capacity",
                a.stage_slot_bytes
            )));
        }
        let e = self.next_launch();
        let peer = |k: u32| (me + k) % n;
        self.handshake(c, DMA_START, e)?;
        match coll {
            Collective::Allreduce | Collective::Reduce => {
                let root = if coll == Collective::Reduce {
                    Some(a.root)
                } else {
                    None
                };
                let (b, x) = partition(count, n, me);
                self.send(c.main, a, 1..n, DMA_MID, e, |p| {
                    let (pb, px) = partition(count, n, p);
                    (
                        stage_slot(a, p),
                        a.input[me as usize] + pb * es,
                        (px - pb) * es,
                    )
                })?;
                self.wait_all(c, DMA_MID, e, (1..n).map(peer))?;
                let mine_in = a.input[me as usize] + b * es;
                let len = (x - b) * es;
                match root {
                    None => {
                        let out = a.output[me as usize] + b * es;
                        self.reduce_local(c, dtype, x - b, mine_in, out)?;
                        self.send(c.main, a, 1..n, DMA_END, e, |p| {
                            (a.output[p as usize] + b * es, out, len)
                        })?;
                        self.wait_all(c, DMA_END, e, (1..n).map(peer))?;
                    }
                    Some(r) if r == me => {
                        let out = a.output[me as usize] + b * es;
                        self.reduce_local(c, dtype, x - b, mine_in, out)?;
                        self.wait_all(c, DMA_END, e, (1..n).map(peer))?;
                    }
                    Some(r) => {
                        // the own slot of the own staging: never written by a peer
                        let tmp = stage_slot(a, me);
                        self.reduce_local(c, dtype, x - b, mine_in, tmp)?;
                        let to_root = (a.output[r as usize] + b * es, tmp, len);
                        copy_then_signal(c.main, a, r, DMA_END, e, to_root)?;
                    }
                }
                self.join(c.main)
            }
            Collective::Reducescatter => {
                let cb = count * es;
                self.send(c.main, a, 1..n, DMA_MID, e, |p| {
                    (
                        stage_slot(a, p),
                        a.input[me as usize] + u64::from(p) * cb,
                        cb,
                    )
                })?;
                self.wait_all(c, DMA_MID, e, (1..n).map(peer))?;
                let own = a.input[me as usize] + u64::from(me) * cb;
                self.reduce_local(c, dtype, count, own, a.output[me as usize])?;
                self.join(c.main)
            }
            Collective::Allgather | Collective::Alltoall => {
                // a.count is bytes per rank / per chunk here (launch_rooted)
                let cb = a.count;
                let src = |p: u32| {
                    if coll == Collective::Allgather {
                        a.input[me as usize]
                    } else {
                        a.input[me as usize] + u64::from(p) * cb
                    }
                };
                self.send(c.main, a, 1..n, DMA_END, e, |p| {
                    (a.output[p as usize] + u64::from(me) * cb, src(p), cb)
                })?;
                let own_dst = a.output[me as usize] + u64::from(me) * cb;
                if own_dst != src(me) {
                    put(c.main, own_dst, src(me), cb)?;
                }
                self.wait_all(c, DMA_END, e, (1..n).map(peer))?;
                self.join(c.main)
            }
            Collective::Broadcast => {
                let bytes = a.count;
                let root = a.root;
                let src = a.input[root as usize];
                if me == root {
                    self.send(c.main, a, 1..n, DMA_END, e, |p| {
                        (a.output[p as usize], src, bytes)
                    })?;
                    if a.output[me as usize] != src {
                        put(c.main, a.output[me as usize], src, bytes)?;
                    }
                    self.join(c.main)
                } else {
                    self.wait_all(c, DMA_END, e, std::iter::once(root))
                }
            }
            Collective::Sendrecv => {
                let bytes = a.count;
                let (_, prev) = ring_neighbours(a);
                self.send(c.main, a, 1..2, DMA_END, e, |next| {
                    (a.output[next as usize], a.input[me as usize], bytes)
                })?;
                self.wait_all(c, DMA_END, e, std::iter::once(prev))?;
                self.join(c.main)
            }
        }
    }

    /// A reduce of `count` elements on 2 ranks by the copy engine, the root reducing
    /// each chunk while the next is copied (see the module docs). The caller checked:
    /// 2 ranks, `count * dtype.size()` a multiple of 16 within the staging area.
    pub fn reduce_pair(&self, c: &Ctx<'_>, dtype: Dtype, count: u64) -> Result<()> {
        if c.main.is_capturing()? {
            return Err(CollError::invalid(
                "the copy-engine reduce cannot be captured into a CUDA graph (its flags are numbered by the host): the capture runs the kernels",
            ));
        }
        let a = c.args;
        let bytes = count * dtype.size();
        if a.nranks != 2 || !bytes.is_multiple_of(16) || bytes > a.stage_slot_bytes * 2 {
            return Err(CollError::invalid(format!(
                "copy-engine reduce: needs 2 ranks (have {}), a multiple of 16 bytes (have {bytes}) within the {}-byte staging area",
                a.nranks,
                a.stage_slot_bytes * 2
            )));
        }
        let chunks = layout::pair_ce_chunks(bytes);
        if chunks.len() > layout::PAIR_CE_MAX_CHUNKS {
            return Err(CollError::invalid(format!(
                "copy-engine reduce of {bytes} bytes: {} chunks, at most {} fit the flag",
                chunks.len(),
                layout::PAIR_CE_MAX_CHUNKS
            )));
        }
        let e = self.next_launch();
        let (me, root) = (a.rank, a.root);
        // START one way: the root's staging is free once its stream reaches this call
        // (its earlier kernels read it), so it tells the non-root and goes on; the
        // non-root waits for that. The root waits only for the chunk flags (bounded, in
        // its kernel): nothing it touches depends on the non-root otherwise.
        if me != root {
            self.wait_all(c, DMA_START, e, std::iter::once(root))?;
            // the root's staging area holds `bytes` (checked above), the input too
            // (launch_rooted checked the capacity)
            for (k, &(off, len)) in chunks.iter().enumerate() {
                let chunk = (
                    a.stage[root as usize] + off,
                    a.input[me as usize] + off,
                    len,
                );
                copy_then_signal(c.main, a, root, DMA_CHUNK, layout::pair_ce_tag(e, k), chunk)?;
            }
            return Ok(());
        }
        signal(c.main, a, 1 - me, DMA_START, e)?;
        let mut args = *a;
        args.root = e;
        let blocks = local_blocks(c, bytes);
        let name = reduce_pair_ce_kernel(dtype);
        // SAFETY: the kernel reads this rank's input and staging area and writes its
        // output, `bytes` each (checked above and by launch_rooted), and reads one flag
        // of its own scratch; `args` is the Comm's own block with `root` carrying `e`
        // as the kernel documents.
        unsafe {
            c.module
                .launch_args(dtype, name, c.main, blocks, c.threads, &args, false)
        }
    }

    /// Before `commhal_coll_allreduce_ring_head_*` for an all-reduce of `bytes` (see the
    /// module docs): the ring's reduce-scatter step 0 by the copy engine — one-way START
    /// (the next rank's staging is free once its stream reached this launch), this rank's
    /// input segment me-1 into the next rank's staging, a stream write of `e` into its
    /// [`DMA_MID`] flag, and the wait for the previous rank's (its segment here). Returns
    /// the launch number for [`Self::allreduce_ring_tail`]. The caller checked the
    /// capacity and that `c.args` are the head kernel's.
    pub fn allreduce_ring_first(&self, c: &Ctx<'_>, bytes: u64) -> Result<u32> {
        if c.main.is_capturing()? {
            return Err(CollError::invalid(
                "the copy-engine all-reduce route cannot be captured into a CUDA graph (its flags are numbered by the host): the capture runs the ring kernel",
            ));
        }
        let a = c.args;
        let n = a.nranks;
        if n < 3 || !bytes.is_multiple_of(16) {
            return Err(CollError::invalid(format!(
                "copy-engine all-reduce route: needs 3 or more ranks (have {n}) and a multiple of 16 bytes (have {bytes})"
            )));
        }
        let (next, prev) = ring_neighbours(a);
        let e = self.next_launch();
        signal(c.main, a, prev, DMA_START, e)?;
        self.wait_all(c, DMA_START, e, std::iter::once(next))?;
        let (off, len) = ring_segment(a, bytes, 1);
        let into = a.stage[next as usize] + off;
        let from = a.input[a.rank as usize] + off;
        copy_then_signal(c.main, a, next, DMA_MID, e, (into, from, len))?;
        self.wait_all(c, DMA_MID, e, std::iter::once(prev))?;
        Ok(e)
    }

    /// After the head kernel: the other n-2 all-gather steps of the all-reduce whose
    /// [`Self::allreduce_ring_first`] returned `e` (same `c`, `bytes`).
    pub fn allreduce_ring_tail(&self, c: &Ctx<'_>, bytes: u64, e: u32) -> Result<()> {
        let a = c.args;
        let (next, prev) = ring_neighbours(a);
        let out = |r: u32| a.output[r as usize];
        for t in 1..a.nranks - 1 {
            // segment me - t: the kernel's all-gather step brought it here for t = 1,
            // the wait of step t - 1 for the others
            let (off, len) = ring_segment(a, bytes, t);
            let tag = layout::pair_ce_tag(e, t as usize);
            copy_then_signal(
                c.main,
                a,
                next,
                DMA_RING,
                tag,
                (out(next) + off, out(a.rank) + off, len),
            )?;
            self.wait_all(c, DMA_RING, tag, std::iter::once(prev))?;
        }
        Ok(())
    }

    /// The number `e` of the next launch on any copy-engine route. One counter for all
    /// of them, so the flag values a route writes ([`layout::pair_ce_tag`] included)
    /// grow from one launch to the next whichever routes the launches took.
    fn next_launch(&self) -> u32 {
        self.seq.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
    }

    /// START: tell every peer this rank reached launch `e`, wait until all did.
    fn handshake(&self, c: &Ctx<'_>, kind: u64, e: u32) -> Result<()> {
        let a = c.args;
        for p in (0..a.nranks).filter(|&p| p != a.rank) {
            signal(c.main, a, p, kind, e)?;
        }
        self.wait_all(c, kind, e, (0..a.nranks).filter(|&p| p != a.rank))
    }

    /// See [`wait_flags`].
    fn wait_all(
        &self,
        c: &Ctx<'_>,
        kind: u64,
        e: u32,
        from: impl Iterator<Item = u32>,
    ) -> Result<()> {
        wait_flags(c, kind, e, from)
    }

    /// The side streams wait for everything queued so far on `main`.
    fn fork(&self, main: &Stream) -> Result<()> {
        self.fork.record(main)?;
        for s in &self.side {
            self.fork.wait_on(s)?;
        }
        Ok(())
    }

    /// `main` waits for everything queued so far on the side streams.
    fn join(&self, main: &Stream) -> Result<()> {
        for (s, ev) in self.side.iter().zip(&self.joins) {
            ev.record(s)?;
            ev.wait_on(main)?;
        }
        Ok(())
    }

    fn side(&self, k: u32) -> Result<&Stream> {
        self.side
            .get(k as usize - 1)
            .ok_or_else(|| CollError::invalid(format!("no side stream for peer offset {k}")))
    }

    /// Fork the side streams off `main`; then on side stream `k` for every `k` in
    /// `ks` (peer `p = (me + k) % n`): copy `what(p)` = (dst, src, bytes) (nothing for 0
    /// bytes) and write `e` into `p`'s flag `kind` from this rank.
    fn send(
        &self,
        main: &Stream,
        a: &CollArgs,
        ks: std::ops::Range<u32>,
        kind: u64,
        e: u32,
        what: impl Fn(u32) -> (u64, u64, u64),
    ) -> Result<()> {
        self.fork(main)?;
        for k in ks {
            let p = (a.rank + k) % a.nranks;
            copy_then_signal(self.side(k)?, a, p, kind, e, what(p))?;
        }
        Ok(())
    }

    /// Queue `commhal_coll_reduce_local_*` on the main stream: `count` elements at
    /// `input` plus every peer's staging slot here, into `output`.
    fn reduce_local(
        &self,
        c: &Ctx<'_>,
        dtype: Dtype,
        count: u64,
        input: u64,
        output: u64,
    ) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let mut args = *c.args;
        let me = args.rank as usize;
        args.input[me] = input;
        args.output[me] = output;
        args.count = count;
        let blocks = local_blocks(c, count * dtype.size());
        let name = reduce_local_kernel(dtype);
        // SAFETY: `input` / `output` are chunks of this rank's own allocations (or its
        // own staging slot) of `count` elements; the staging slots of the peers here
        // hold `count` elements each (checked at the top of `launch`); the kernel touches
        // nothing else.
        unsafe {
            c.module
                .launch_args(dtype, name, c.main, blocks, c.threads, &args, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first step and the tail cut segments as the ring kernel does: segment
    /// rank - t, whole 16-byte vectors, and over t = 0..n the segments tile the buffer.
    #[test]
    fn ring_segments_tile_the_buffer() {
        for n in 3..=8u32 {
            for bytes in [16u64, 1040, 252_720, 1 << 30] {
                for rank in 0..n {
                    let a = CollArgs {
                        rank,
                        nranks: n,
                        ..CollArgs::default()
                    };
                    let (next, prev) = ring_neighbours(&a);
                    assert_eq!(((rank + 1) % n, (rank + n - 1) % n), (next, prev));
                    let mut cut: Vec<(u64, u64)> =
                        (0..n).map(|t| ring_segment(&a, bytes, t)).collect();
                    let (b, x) = partition(bytes / 16, n, prev);
                    assert_eq!(
                        cut[1],
                        (b * 16, (x - b) * 16),
                        "t = 1 is the previous rank's"
                    );
                    cut.sort();
                    let mut end = 0;
                    for (off, len) in cut {
                        assert_eq!(off, end);
                        assert_eq!(len % 16, 0);
                        end = off + len;
                    }
                    assert_eq!(end, bytes);
                }
            }
        }
    }
}
