//! Plan → CUDA C++: one kernel per (plan, rank, dtype, op), straight-line code per block
//! and C++ loops for the plan's `Loop`s, on the device runtime in
//! `device-src/include/commhal/plan.h` (which documents the memory layout, the
//! invocation state and the memory model). `backends/cuda-coll` JIT-compiles the text
//! with NVRTC (disk-cached by source hash) and launches it.
//!
//! What the generator decides statically, from the whole plan (every rank sees the same
//! plan, so every rank derives the same numbers):
//! * the index of every semaphore `(src, dst, channel, tag)` in the receiver's inbound
//!   array (one signalling and one waiting block each, so the k-th signal of part q
//!   pairs with the k-th wait: plan.h's epoch flags), and that signals and waits match;
//! * the occurrence number of every LL packet write/read (part of the flag);
//! * where a block's replicas (several CTAs sharing a plan block's work) must sync
//!   because an op touches local data that an earlier op split differently;
//! * which consecutive ops fuse into one loop: puts of LL packets of one source chunk
//!   to several peers, with a copy of that chunk into disjoint local memory (plan.h
//!   `put_packets_multi`: each packet's bytes loaded once, as the hand `broadcast_ll`
//!   does; `Gen::packet_run` says when the fused op equals the separate ones). The
//!   host executor runs the ops one by one.
//!
//! Channels. Between ranks of one node every peer buffer is mapped: memory-channel ops
//! are the CTAs' own loads and stores. Port-channel ops (between virtual nodes:
//! `builders::ports_across_nodes`) are triggers into this rank's proxy FIFO, carried
//! by the port backend (plan.h `far_put`, `far_signal`, `far_wait`, `far_flush`): a
//! put's source stays in use until a flush, which the generator emits before anything
//! may write this rank's memory again (a local write, a memory signal, the barrier, a
//! signal to another far rank, the next loop iteration) and at the block's end (plans
//! written for memory channels take a put as done when the next op starts); a
//! signal makes the peer's flag word the same epoch value an SM store would, and the
//! start / end handshakes with those ranks go through the proxy from CTA 0 behind the
//! intra-rank barrier, only with the far ranks where one of the pair touches the
//! other's input or output (`far_handshake_peers`). No SM touches a far peer's memory,
//! so packets (`PutPackets`) and reads (`Get`, `ReadReduce`) across nodes are refused:
//! use an HB plan there. Switch ops need multicast (cuda-nvls) and are refused here.
//!
//! Scratch. Copies alternate by launch parity over every plan (plan.h `begin`), so a
//! rank that writes a peer's scratch (near or far) and does not handshake with it at
//! the start first checks that the peer is done with the copy (`done_pairs`: a done
//! word the reader publishes to it at the start of each launch, a store into its
//! memory or through the proxy; [`Plan::scratch_writer_pairs`] argues the order).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use crate::dtype::{DataType, RedOp};
use crate::error::{AlgoError, Location};
use crate::plan::{
    BufferKind, ChannelKind, ChunkRef, Collective, Op, PacketFormat, Plan, ScratchWriter,
    local_position,
};

/// Name of the generated kernel.
pub const ENTRY: &str = "commhal_plan";
/// Name of its entry for a launch after a launch of the same plan on the same stream
/// context (plan.h `wait_done`), where [`CudaKernel::ordered_entry`] says it has one.
pub const ORDERED_ENTRY: &str = "commhal_plan_ordered";

/// The entry points of a generated kernel: [`ENTRY`], and [`ORDERED_ENTRY`] where it
/// has one ([`CudaKernel::ordered_entry`]).
fn entries(ordered_entry: bool) -> &'static [&'static str] {
    if ordered_entry {
        &[ENTRY, ORDERED_ENTRY]
    } else {
        &[ENTRY]
    }
}
/// Inbound semaphores per rank for plan signals (`PLAN_MAX_SEMS` in plan.h).
pub const MAX_SEMS: usize = 4096;
/// Plan blocks per rank (`PLAN_MAX_BLOCKS` in plan.h).
pub const MAX_BLOCKS: usize = 508;
/// Ranks (`PLAN_MAX_RANKS` in plan.h).
pub const MAX_RANKS: u32 = 8;
/// Distinct LL flag occurrences per packet slot and invocation.
pub const MAX_PACKET_OCCURRENCES: u32 = 255;

/// Whether some rank touches a peer's user buffers: (writes or reads them at all — a
/// start handshake is needed, as the peer's stream may still be preparing them; reads
/// them — an end handshake is needed, as the peer may not reuse its input before).
fn peer_user_access(plan: &Plan) -> (bool, bool) {
    let user = |c: ChunkRef| c.buf != BufferKind::Scratch;
    let (mut any, mut reads) = (false, false);
    for blocks in plan.flatten() {
        for ops in blocks {
            for (_, op) in ops {
                match op {
                    Op::Put { dst, .. } | Op::PutPackets { dst, .. } if user(dst) => any = true,
                    Op::Get { src, .. } | Op::ReadReduce { src, .. } if user(src) => {
                        any = true;
                        reads = true;
                    }
                    _ => {}
                }
            }
        }
    }
    (any, reads)
}

/// The peers whose user buffers `op` writes or reads (the peer side of the op).
fn user_buffer_peers(op: &Op) -> Vec<u32> {
    let user = |c: &ChunkRef| c.buf != BufferKind::Scratch;
    match op {
        Op::Put { peer, dst, .. } | Op::PutPackets { peer, dst, .. } if user(dst) => vec![*peer],
        Op::Get { peer, src, .. } if user(src) => vec![*peer],
        Op::ReadReduce { peers, src, .. } if user(src) => peers.clone(),
        _ => vec![],
    }
}

/// Whether some rank's port op (an op between ranks of different nodes, carried by the
/// proxy) writes or reads a user buffer (input or output) at its far end. When none
/// does, the port ends are scratch, semaphores and the outbox only, so a call whose
/// puts go through the outbox (plan.h `far_send`) needs no user buffer registered with
/// the port backend.
pub fn far_user_buffers(plan: &Plan) -> bool {
    plan.flatten().iter().flatten().flatten().any(|(_, op)| {
        matches!(op.peer_channel(), Some((_, ChannelKind::Port)))
            && !user_buffer_peers(op).is_empty()
    })
}

/// The ranks of other nodes (bits of `far`) that `rank` handshakes with when the plan
/// needs start / end handshakes (bit p: rank p): those where one of the pair writes or
/// reads the other's input or output. A far peer reached through scratch only needs
/// none: the plan's own signals order the reuse of a scratch copy (each builder's doc
/// comment argues it), and each far handshake is a round trip through the proxy and the
/// network. Every rank derives the same pairs from the whole plan, so both sides of a
/// pair agree.
fn far_handshake_peers(plan: &Plan, rank: u32, far: u32) -> u32 {
    let mut mask = 0u32;
    for (r, blocks) in plan.flatten().iter().enumerate() {
        let r = r as u32;
        for (_, op) in blocks.iter().flatten() {
            for p in user_buffer_peers(op) {
                if r == rank {
                    mask |= 1 << p;
                } else if p == rank {
                    mask |= 1 << r;
                }
            }
        }
    }
    mask & far
}

/// The line of a start (`which` = "start") or end handshake: every near peer, and the
/// far peers of `far_hs` through the proxy (plan.h `start_sync`, `end_sync`).
fn sync_line(which: &str, nranks: u32, far: u32, far_hs: u32) -> String {
    if far_hs == far {
        return format!("  {which}_sync(c, {nranks}u, {far}u);\n");
    }
    let row = u32::from(which == "end");
    let mut s = format!("  handshake(c, {row}u, {nranks}u, {far}u);\n");
    if far_hs != 0 {
        let _ = writeln!(s, "  far_handshake(c, {row}u, {far_hs}u);");
    }
    s
}

/// The [scratch writer pairs](Plan::scratch_writer_pairs) whose reuse of a copy the
/// kernels order with done words (plan.h `publish_done` / `far_publish_done`,
/// `wait_done` / `far_wait_done`): all but those whose writer's start handshake
/// (`start_sync`) reaches the reader, which tells the writer that the reader runs this
/// launch, so it finished the launches before. One-way packet senders are among them.
fn done_pairs(plan: &Plan, start_sync: bool) -> Vec<ScratchWriter> {
    let mut pairs = plan.scratch_writer_pairs();
    if start_sync {
        pairs.retain(|p| handshake_peers(plan, p.writer) & (1 << p.reader) == 0);
    }
    pairs
}

/// The ranks `rank`'s start handshake reaches (bit p: rank p): every near rank, and the
/// far ranks of [`far_handshake_peers`].
fn handshake_peers(plan: &Plan, rank: u32) -> u32 {
    let far = far_peers(plan, rank);
    !far | far_handshake_peers(plan, rank, far)
}

/// The lines that publish `rank`'s progress to the writers into its scratch of `done`,
/// at the start of the kernel (plan.h `publish_done`, a store into their memory;
/// `far_publish_done`, a signal through the proxy). A far one goes out in the unordered
/// entry only: a far writer waits for its reader's progress there alone
/// (`far_wait_done<true>` has no wait: far readers are never one-way packet
/// receivers, packets do not cross nodes, so the writer heard from its reader in the
/// launch before), and each signal costs the one proxy thread a send (host-tcp, 2 ×
/// H200 as two virtual nodes, 1 KiB: 6–8 µs) and the peer's receiver a write. Its
/// writer's `far_wait_done` may need this very launch's value (the launch before on
/// the reader may have been another plan), while the reader's body waits for that
/// writer's puts, so it goes before the body. Writer and reader run the same entry: the
/// host picks it from the launches before, the same on every rank.
fn publish_lines(rank: u32, done: &[ScratchWriter]) -> String {
    let mut s = String::new();
    for p in done.iter().filter(|p| p.reader == rank) {
        let _ = if p.far {
            writeln!(s, "  if (!ORDERED) far_publish_done(c, {}u);", p.writer)
        } else {
            writeln!(s, "  publish_done(c, {}u);", p.writer)
        };
    }
    s
}

/// The readers of `done` that `rank` writes into, each with whether through a port.
fn readers_of(done: &[ScratchWriter], rank: u32) -> BTreeMap<u32, bool> {
    done.iter()
        .filter(|p| p.writer == rank)
        .map(|p| (p.reader, p.far))
        .collect()
}

/// Whether some rank's kernel reads or writes a peer's user buffers (input or output).
/// A plan that does not touches the peers only through their scratch, so its caller
/// need not tell the peers where its buffers are.
pub fn touches_peer_user_buffers(plan: &Plan) -> bool {
    peer_user_access(plan).0
}

/// A generated kernel for one rank.
#[derive(Debug, Clone)]
pub struct CudaKernel {
    /// Unit name for NVRTC (`plan-<name>-r<rank>-<dtype>-<op>.cu`).
    pub unit: String,
    /// CUDA C++ source (includes `commhal/plan.h`).
    pub source: String,
    /// Plan blocks of this rank (the grid is `blocks × replicas` CTAs).
    pub blocks: u32,
    /// Whether the rank's blocks use the intra-rank barrier (all CTAs co-resident; the
    /// start / end handshakes are per CTA and need none, but for far peers).
    pub uses_barrier: bool,
    /// Ranks this rank reaches over port channels (bit p: rank p), whose ops go through
    /// the proxy (`PlanArgs::ports` must be set); 0: none.
    pub far: u32,
    /// LL16 plans: the most elements one packet op of a plan block of this rank walks,
    /// as a fraction of the message count ([`PacketWalk`]; the launch takes the largest
    /// of every rank's, [`packet_walk`]); [`PacketWalk::NONE`] for other plans.
    pub packet_walk: PacketWalk,
    /// Whether the source has [`ORDERED_ENTRY`] beside [`ENTRY`]: some block waits for
    /// a reader that is not one-way, a wait that a launch after the same plan skips.
    pub ordered_entry: bool,
    /// Whether this rank's far data and signals may go through the ranks' inboxes
    /// ([`inbox_chunks`]; the launch decides, plan.h `PLAN_FLAG_INBOX`).
    pub inbox: bool,
}

impl CudaKernel {
    /// The entry points its source defines (the module loads each).
    pub fn entries(&self) -> &'static [&'static str] {
        entries(self.ordered_entry)
    }
}

/// The elements one LL16 packet op walks (its CTAs share them, a thread per 8 bytes),
/// as a fraction `num / den` of the message count: a put, its source chunk (once,
/// whatever the peers it stores to); a scatter of several chunks, one of them; a read
/// or reduce of packets, its destination; the unpack of several senders, all their
/// chunks. The launch takes a thread per packet of a block's largest op, which is the
/// hand-written kernels' grid: the output for the all-reduce, the reduce-scatter and
/// the broadcast, the packets received for the all-gather ((n − 1) / n of its
/// output). (Sized by the output, the 2-rank all-gather launched twice the hand
/// kernel's CTAs, each half busy: 1.05-1.12 of its time at 16-256 KiB in plain
/// launches on 2 × H100.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketWalk {
    /// Numerator.
    pub num: u64,
    /// Denominator (≥ 1).
    pub den: u64,
}

impl PacketWalk {
    /// Nothing walked.
    pub const NONE: PacketWalk = PacketWalk { num: 0, den: 1 };

    /// `num / den` in lowest terms.
    fn reduced(num: u64, den: u64) -> PacketWalk {
        let g = gcd(num, den.max(1)).max(1);
        PacketWalk {
            num: num / g,
            den: den.max(1) / g,
        }
    }

    /// Elements walked for a message of `count` elements (rounded up).
    pub fn elems(self, count: u64) -> u64 {
        (u128::from(count) * u128::from(self.num)).div_ceil(u128::from(self.den.max(1))) as u64
    }

    /// The larger of the two.
    fn max(self, o: PacketWalk) -> PacketWalk {
        if u128::from(o.num) * u128::from(self.den) > u128::from(self.num) * u128::from(o.den) {
            o
        } else {
            self
        }
    }
}

/// The scratch that ports from other nodes write into, per rank: the chunk index
/// ranges `[index, index + count)` of the plan's scratch that some rank's port put
/// lands in, where the runtime may place them in the rank's inbox (plan.h `far_scr`:
/// pinned host memory the port backend writes with plain copies, and the kernel reads
/// over the bus) instead of its plan area. `None` where the plan has no such put, or
/// where anything but the owner's own straight-line ops and those puts touches such a
/// chunk (a peer of the node, an op in a C++ loop, whose chunk index is known at run
/// time only), or an access straddles a landing's edge: the inbox is a host-side buffer
/// the owner alone addresses, and an access lies wholly in it or wholly outside.
pub fn inbox_chunks(plan: &Plan) -> Option<Vec<Vec<(u32, u32)>>> {
    if plan.uses_packets() {
        return None;
    }
    // every op as it runs (loops unrolled; `in_loop`: it sits in a C++ loop)
    let ops: Vec<Vec<(Location, Op)>> = plan
        .flatten()
        .into_iter()
        .map(|blocks| blocks.into_iter().flatten().collect())
        .collect();
    let mut landed = vec![Vec::new(); plan.nranks as usize];
    for (q, rank_ops) in ops.iter().enumerate() {
        for (_, op) in rank_ops {
            if let Op::Put {
                peer,
                channel: ChannelKind::Port,
                dst,
                ..
            } = op
                && dst.buf == BufferKind::Scratch
                && *peer as usize != q
            {
                landed[*peer as usize].push((dst.index, dst.index + dst.count));
            }
        }
    }
    if landed.iter().all(Vec::is_empty) {
        return None;
    }
    // disjoint ranges, so that an access inside several adjacent landings counts as in
    for l in &mut landed {
        l.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(l.len());
        for &(s, e) in l.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *l = merged;
    }
    // Every access to a rank's scratch lies wholly inside its landed ranges or wholly
    // outside; one inside is the owner's own, or a far put landing, never in a loop.
    for (q, rank_ops) in ops.iter().enumerate() {
        for (at, o) in rank_ops {
            let looped = at.in_loop.is_some();
            let port_put = matches!(
                o,
                Op::Put {
                    channel: ChannelKind::Port,
                    ..
                }
            );
            for (c, write, remote) in o.chunks() {
                if c.buf != BufferKind::Scratch {
                    continue;
                }
                let owners = if remote { o.peers() } else { vec![q as u32] };
                for owner in owners {
                    let l = &landed[owner as usize];
                    if !overlaps_landing(l, &c) {
                        continue;
                    }
                    let (s, e) = (c.index, c.index + c.count);
                    let inside = l.iter().any(|&(ls, le)| ls <= s && e <= le);
                    let allowed = !looped && (!remote || (port_put && write));
                    if !inside || !allowed {
                        return None;
                    }
                }
            }
        }
    }
    Some(landed)
}

/// Whether scratch chunk `c` overlaps one of the landed ranges `l` ([`inbox_chunks`]).
fn overlaps_landing(l: &[(u32, u32)], c: &ChunkRef) -> bool {
    l.iter().any(|&(s, e)| c.index < e && s < c.index + c.count)
}

/// The ranks `rank` reaches over port channels in `plan` (bit p: rank p), either way.
pub fn far_peers(plan: &Plan, rank: u32) -> u32 {
    fn scan(op: &Op, me: u32, mask: &mut u32, to: Option<u32>) {
        if let Op::Loop { body, .. } = op {
            body.iter().for_each(|o| scan(o, me, mask, to));
        } else if let Some((peer, ChannelKind::Port)) = op.peer_channel() {
            match to {
                None => *mask |= 1 << peer,
                Some(r) if peer == me => *mask |= 1 << r,
                Some(_) => {}
            }
        }
    }
    let mut mask = 0u32;
    for (r, rp) in plan.ranks.iter().enumerate() {
        let to = if r as u32 == rank {
            None
        } else {
            Some(r as u32)
        };
        for b in &rp.blocks {
            b.ops.iter().for_each(|o| scan(o, rank, &mut mask, to));
        }
    }
    mask & !(1 << rank)
}

fn dtype_code(d: DataType) -> u32 {
    match d {
        DataType::F64 => 0,
        DataType::F32 => 1,
        DataType::F16 => 2,
        DataType::Bf16 => 3,
        DataType::F8E4M3 => 4,
        DataType::F8E5M2 => 5,
        DataType::I8 => 6,
        DataType::U8 => 7,
        DataType::I32 => 8,
        DataType::U32 => 9,
        DataType::I64 => 10,
        DataType::U64 => 11,
    }
}

fn op_code(o: RedOp) -> u32 {
    match o {
        RedOp::Sum => 0,
        RedOp::Prod => 1,
        RedOp::Min => 2,
        RedOp::Max => 3,
        RedOp::Avg => 4,
    }
}

type SemKey = (u32, u32, ChannelKind, u32); // (src, dst, channel, tag)
type PacketKey = (u32, u32, u32, u32); // (sender, receiver, chunk index, chunk count)
/// Per (rank, block, flat op index): packet occurrences of the op.
type Occurrences = HashMap<(u32, usize, usize), Vec<u32>>;

/// Semaphore numbering, from the whole plan.
struct Sems {
    index: HashMap<SemKey, u32>,
}

fn sems(plan: &Plan) -> Result<Sems, AlgoError> {
    let flat = plan.flatten();
    let mut keys = BTreeSet::new();
    let mut signals: HashMap<SemKey, (u32, usize)> = HashMap::new(); // (count, block)
    let mut waits: HashMap<SemKey, (u32, usize)> = HashMap::new(); // (count, block)
    for (r, blocks) in flat.iter().enumerate() {
        let r = r as u32;
        for (b, ops) in blocks.iter().enumerate() {
            for (_, op) in ops {
                match op {
                    Op::Signal { peer, channel, tag } => {
                        let k = (r, *peer, *channel, *tag);
                        keys.insert(k);
                        let e = signals.entry(k).or_insert((0, b));
                        if e.1 != b {
                            return Err(AlgoError::Invalid(format!(
                                "plan `{}`: rank {r} signals semaphore (to {peer}, {channel:?}, tag {tag}) in blocks {} and {b}; the GPU code generator needs one signalling block per semaphore (give each block its own tag)",
                                plan.name, e.1
                            )));
                        }
                        e.0 += 1;
                    }
                    Op::Wait { peer, channel, tag } => {
                        let k = (*peer, r, *channel, *tag);
                        keys.insert(k);
                        let e = waits.entry(k).or_insert((0, b));
                        if e.1 != b {
                            return Err(AlgoError::Invalid(format!(
                                "plan `{}`: rank {r} waits on semaphore (from {peer}, {channel:?}, tag {tag}) in blocks {} and {b}; the GPU code generator needs one waiting block per semaphore (give each block its own tag)",
                                plan.name, e.1
                            )));
                        }
                        e.0 += 1;
                    }
                    _ => {}
                }
            }
        }
    }
    let mut index = HashMap::new();
    let mut next = vec![0u32; plan.nranks as usize];
    for k in keys {
        let dst = k.1 as usize;
        let i = next[dst];
        if i as usize >= MAX_SEMS {
            return Err(AlgoError::Invalid(format!(
                "plan `{}` needs more than {MAX_SEMS} semaphores into rank {dst}",
                plan.name
            )));
        }
        next[dst] += 1;
        index.insert(k, i);
        let s = signals.get(&k).map(|s| s.0).unwrap_or(0);
        let w = waits.get(&k).map(|w| w.0).unwrap_or(0);
        if s != w {
            return Err(AlgoError::Invalid(format!(
                "plan `{}`: rank {} signals rank {} ({:?}, tag {}) {s} times per invocation but it waits {w} times",
                plan.name, k.0, k.1, k.2, k.3
            )));
        }
    }
    Ok(Sems { index })
}

/// Packet occurrences: per (rank, block, flat op index) the occurrence of each packet
/// write (one) or read (one per source).
fn packet_occurrences(plan: &Plan) -> Result<Occurrences, AlgoError> {
    let flat = plan.flatten();
    let mut sent: HashMap<PacketKey, u32> = HashMap::new();
    let mut read: HashMap<PacketKey, u32> = HashMap::new();
    let mut out = HashMap::new();
    for (r, blocks) in flat.iter().enumerate() {
        let r = r as u32;
        for (b, ops) in blocks.iter().enumerate() {
            for (i, (_, op)) in ops.iter().enumerate() {
                let mut occ = Vec::new();
                match op {
                    Op::PutPackets { peer, dst, .. } => {
                        let e = sent.entry((r, *peer, dst.index, dst.count)).or_default();
                        occ.push(*e);
                        *e += 1;
                    }
                    Op::ReadReducePackets { packets, .. } => {
                        for (p, c) in packets {
                            let e = read.entry((*p, r, c.index, c.count)).or_default();
                            occ.push(*e);
                            *e += 1;
                        }
                    }
                    _ => continue,
                }
                if occ.iter().any(|&o| o >= MAX_PACKET_OCCURRENCES) {
                    return Err(AlgoError::Invalid(format!(
                        "plan `{}` reuses one packet slot {MAX_PACKET_OCCURRENCES}+ times per invocation; the GPU generator supports fewer",
                        plan.name
                    )));
                }
                out.insert((r, b, i), occ);
            }
        }
    }
    Ok(out)
}

/// A local chunk access as a rational interval of the rank's user memory or scratch, in
/// units of `count` (`num / den`), for the replica-sync analysis.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Extent {
    mem: u8, // 0: input/output memory, 1: scratch
    lo: (u64, u64),
    hi: (u64, u64),
    exact: (BufferKind, u32, u32, u32), // the reference itself (buf, index, count, step)
    looped: bool,                       // a chunk per iteration (step != 0, iterations > 1)
    split: Split,                       // how the op that touched it cut its range among the CTAs
}

/// How a data op cuts a chunk among the CTAs of its plan block.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Split {
    /// In 16-byte units (plan.h `share_elems`): copies, reductions, LL16 packet ops.
    Units,
    /// In LL63 tiles (plan_ll63.h `ll63_share`): LL63 packet ops, and an LL63 plan's
    /// finalize and the copy fused into its puts.
    Tiles,
    /// Items of several chunks at once (plan.h `chunk_items`: the fused
    /// `put_packets63_scatter` and `unpack_packets63_multi` a warp per LL63 tile, the
    /// LL16 `unpack_packets_multi` a thread per packet; a plan has one format), in the
    /// item space with this id ([`Gen::item_space`]): the list of chunks, in order, that
    /// the op walks on this side. Two ops of one space map every element of a chunk to
    /// the same warp and lane (the mapping depends only on the chunks' sizes); ops of
    /// different spaces map them unlike each other and unlike any other op.
    Items(u32),
}

/// What orders two data ops of a block that touch local memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Hazard {
    /// Nothing: disjoint.
    None,
    /// `__syncthreads()`: the same share per CTA, possibly other threads.
    ThisCta,
    /// `group_sync`: the replicas (CTAs) of the block split it differently.
    Replicas,
}

fn eq(a: (u64, u64), b: (u64, u64)) -> bool {
    (a.0 as u128) * (b.1 as u128) == (b.0 as u128) * (a.1 as u128)
}

fn le(a: (u64, u64), b: (u64, u64)) -> bool {
    (a.0 as u128) * (b.1 as u128) <= (b.0 as u128) * (a.1 as u128)
}
fn lt(a: (u64, u64), b: (u64, u64)) -> bool {
    (a.0 as u128) * (b.1 as u128) < (b.0 as u128) * (a.1 as u128)
}

struct Gen<'a> {
    plan: &'a Plan,
    me: u32,
    es: u64,
    sems: &'a Sems,
    occ: &'a Occurrences,
    out: String,
    /// Local extents read / written since the last replica sync.
    reads: Vec<Extent>,
    writes: Vec<Extent>,
    /// Semaphores this block waits on.
    waited: BTreeSet<u32>,
    /// (peer, semaphore index in the peer) this block signals.
    signalled: BTreeSet<(u32, u32)>,
    /// Ranks whose scratch this rank writes with a done-word check first, each with
    /// whether through a port (plan.h `wait_done`, `far_wait_done`; [`done_pairs`]).
    done_to: &'a BTreeMap<u32, bool>,
    /// Of those, the ones this block already waited for.
    done_waited: BTreeSet<u32>,
    /// The near ones this block writes into anywhere (bit p: rank p), waited for
    /// together before the first of those writes.
    near_done: u32,
    /// Of the readers, those this rank sends one-way packets to (bit p: rank p): waited
    /// for even in a launch after the same plan (plan.h `wait_done<true>`), since the
    /// writer never hears from them.
    one_way: u32,
    /// Whether this block waits for a reader that is not one-way, a wait that the
    /// kernel's ordered entry ([`ORDERED_ENTRY`]) leaves out.
    ordered_differs: bool,
    /// Ranks reached over port channels ([`far_peers`]).
    far: u32,
    /// Far ranks this block pushed puts to that were not flushed yet (bit p).
    unflushed: u32,
    /// The item spaces of the fused runs so far ([`Split::Items`]): each one's
    /// chunks, in order (`None`: a list that matches no other).
    spaces: Vec<Option<Vec<Extent>>>,
    /// This CTA stored packets since its last barrier ([`Gen::after_sends`]).
    sent: bool,
    /// The largest LL16 packet op so far ([`PacketWalk`]).
    walk: PacketWalk,
    /// [`inbox_chunks`] of the plan.
    inbox: Option<&'a [Vec<(u32, u32)>]>,
}

impl Gen<'_> {
    fn extent(&self, c: &ChunkRef, iterations: u32) -> Extent {
        let spec = self.plan.spec(c.buf);
        let n = spec.chunks.max(1) as u64;
        let f = spec.factor as u64;
        let last = c.index as u64 + c.step as u64 * (iterations.max(1) as u64 - 1);
        let lo = c.index as u64 * f;
        let hi = (last + c.count as u64) * f;
        // In place, input and output alias (plan module docs): shift to one memory.
        let shift = match (self.plan.in_place, self.plan.collective, c.buf) {
            (true, Collective::AllGather, BufferKind::Input) => self.me as u64,
            (true, Collective::ReduceScatter, BufferKind::Output) => self.me as u64,
            _ => 0,
        };
        let (mem, den) = match c.buf {
            BufferKind::Scratch => (1, n),
            BufferKind::Output if !self.plan.in_place => (2, n),
            _ => (0, n),
        };
        Extent {
            mem,
            lo: (lo + shift * den, den),
            hi: (hi + shift * den, den),
            exact: (c.buf, c.index, c.count, c.step),
            looped: c.step != 0 && iterations > 1,
            split: Split::Units,
        }
    }

    /// Whether the plan's packet ops move LL63 packets (plan_ll63.h): they, and the
    /// copy and finalize that run in their loops, split a chunk among the CTAs by tiles.
    fn ll63(&self) -> bool {
        self.plan.packets == PacketFormat::Ll63
    }

    /// Count an LL16 packet op that walks `chunks` (together) towards [`Gen::walk`].
    fn walks(&mut self, chunks: &[ChunkRef]) {
        if self.ll63() {
            return;
        }
        let w = chunks.iter().fold(PacketWalk::NONE, |acc, c| {
            let spec = self.plan.spec(c.buf);
            let (num, den) = (
                u64::from(spec.factor) * u64::from(c.count),
                u64::from(spec.chunks.max(1)),
            );
            PacketWalk::reduced(acc.num * den + num * acc.den, acc.den * den)
        });
        self.walk = self.walk.max(w);
    }

    /// How this plan's packet ops cut a chunk among the CTAs.
    fn packet_split(&self) -> Split {
        if self.ll63() {
            Split::Tiles
        } else {
            Split::Units
        }
    }

    /// How an op touching `a` must be ordered after one that touched `b`.
    fn conflicts(a: &Extent, b: &Extent) -> Hazard {
        if a.mem != b.mem {
            return Hazard::None;
        }
        if a.exact == b.exact || (!a.looped && !b.looped && eq(a.lo, b.lo) && eq(a.hi, b.hi)) {
            // The same elements of one memory (the same reference, or in place an input
            // chunk and the output chunk that aliases it): every data op splits a range
            // among the CTAs the same way (plan.h `share_elems`), so each CTA touches
            // only its own share; but its threads may map the share differently (16-byte
            // vectors, 8-byte packets, bytes at an unaligned tail). LL63 tile ops split
            // it among the CTAs by tiles, other ops by 16-byte units, fused runs by the
            // items of their whole list of chunks: then other CTAs, unless both are runs
            // over the same list (the two-shot all-reduce in place: its scatter reads
            // the input chunks its gather later overwrites).
            return if a.split == b.split {
                Hazard::ThisCta
            } else {
                Hazard::Replicas
            };
        }
        let overlap = if a.exact.0 == b.exact.0 || a.mem == 0 {
            // Elements at floor(x × count) for the rational position x: plan.h `chunk`
            // cuts at first × total / nchunks with total = count × factor, and the
            // in-place shifts are whole counts, so two ranges of user memory that only
            // touch share no element, however each buffer is chunked. Strict overlap.
            lt(a.lo, b.hi) && lt(b.lo, a.hi)
        } else {
            // Scratch may hold LL packets, laid out unlike these extents: touching may
            // share a packet.
            le(a.lo, b.hi) && le(b.lo, a.hi)
        };
        if overlap {
            Hazard::Replicas
        } else {
            Hazard::None
        }
    }

    /// Record a data op's local reads and writes; emit a replica sync first if it
    /// depends on (or overwrites) data an earlier op split differently, or a CTA
    /// barrier if only this CTA's threads may have split it differently.
    fn data_op(&mut self, reads: &[ChunkRef], writes: &[ChunkRef], iterations: u32) {
        self.data_op_split(reads, writes, iterations, Split::Units);
    }

    /// [`Gen::data_op`] for an op that cuts its ranges among the CTAs as `split` says.
    fn data_op_split(
        &mut self,
        reads: &[ChunkRef],
        writes: &[ChunkRef],
        iterations: u32,
        split: Split,
    ) {
        let (worst, r, w) = self.hazard(reads, writes, iterations, split);
        self.sync_for(worst, r, w);
    }

    /// The worst conflict of an op's reads and writes with the ops before it since the
    /// last sync, and its extents.
    fn hazard(
        &self,
        reads: &[ChunkRef],
        writes: &[ChunkRef],
        iterations: u32,
        split: Split,
    ) -> (Hazard, Vec<Extent>, Vec<Extent>) {
        self.hazard_sides((reads, split), (writes, split), iterations)
    }

    /// [`Gen::hazard`] for an op whose reads and writes are split unlike each other.
    fn hazard_sides(
        &self,
        (reads, rsplit): (&[ChunkRef], Split),
        (writes, wsplit): (&[ChunkRef], Split),
        iterations: u32,
    ) -> (Hazard, Vec<Extent>, Vec<Extent>) {
        let ext = |split: Split| {
            move |c: &ChunkRef| Extent {
                split,
                ..self.extent(c, iterations)
            }
        };
        let r: Vec<Extent> = reads.iter().map(ext(rsplit)).collect();
        let w: Vec<Extent> = writes.iter().map(ext(wsplit)).collect();
        let worst = r
            .iter()
            .flat_map(|x| self.writes.iter().map(move |y| Self::conflicts(x, y)))
            .chain(w.iter().flat_map(|x| {
                self.writes
                    .iter()
                    .chain(self.reads.iter())
                    .map(move |y| Self::conflicts(x, y))
            }))
            .max()
            .unwrap_or(Hazard::None);
        (worst, r, w)
    }

    /// The item space ([`Split::Items`]) of a fused run that walks `chunks` in this
    /// order: the id of an earlier run over the same list, else a new one. A list that
    /// names one range twice gets an id of its own (equal ranges would not tell which
    /// item they are).
    fn item_space(&mut self, chunks: &[ChunkRef]) -> Split {
        let list: Vec<Extent> = chunks.iter().map(|c| self.extent(c, 1)).collect();
        let same = |a: &Extent, b: &Extent| a.mem == b.mem && eq(a.lo, b.lo) && eq(a.hi, b.hi);
        let twice = list
            .iter()
            .enumerate()
            .any(|(i, a)| list[..i].iter().any(|b| same(a, b)));
        let found = self.spaces.iter().position(|s| {
            s.as_ref().is_some_and(|s| {
                !twice && s.len() == list.len() && s.iter().zip(&list).all(|(a, b)| same(a, b))
            })
        });
        let id = found.unwrap_or_else(|| {
            self.spaces.push((!twice).then_some(list));
            self.spaces.len() - 1
        });
        Split::Items(id as u32)
    }

    /// The sync an LL63 packet reduce needs, given the one its data needs: at least a
    /// CTA barrier after this CTA stored packets, so that no warp of the CTA spins on a
    /// packet while others still load and send theirs. Measured (4 × H100, f16, one
    /// run each): the one-shot all-reduce at 128-512 KiB, where only the in-place form
    /// had the barrier (for its data), took 0.93-1.00 of the hand kernel's time with it
    /// and 1.05-1.14 without; the reduce-scatter at 1-8 MiB 0.92-0.95 with it against
    /// 0.97-1.06. Unpacks (one term: `terms` counts locals and packet sources) go
    /// without: the all-gather's took 1.04-1.06 with it at 8 MiB, 1.00 without.
    fn after_sends(&self, worst: Hazard, terms: usize) -> Hazard {
        if self.ll63() && self.sent && terms >= 2 {
            worst.max(Hazard::ThisCta)
        } else {
            worst
        }
    }

    /// [`Gen::data_op`] for a fused run: its reads and writes, each side in its item
    /// space.
    fn data_op_items(&mut self, reads: &[ChunkRef], writes: &[ChunkRef]) {
        let rs = self.item_space(reads);
        let ws = self.item_space(writes);
        let (worst, r, w) = self.hazard_sides((reads, rs), (writes, ws), 1);
        self.sync_for(worst, r, w);
    }

    /// Emit the sync `worst` needs and record the op's extents.
    fn sync_for(&mut self, worst: Hazard, r: Vec<Extent>, w: Vec<Extent>) {
        match worst {
            Hazard::Replicas => {
                self.line("group_sync(c);");
                self.reads.clear();
                self.writes.clear();
            }
            Hazard::ThisCta => self.line("__syncthreads();"),
            Hazard::None => {}
        }
        if worst != Hazard::None {
            self.sent = false;
        }
        self.reads.extend(r);
        self.writes.extend(w);
    }

    fn line(&mut self, s: &str) {
        self.out.push_str("    ");
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn first(c: &ChunkRef, looped: bool) -> String {
        if looped && c.step != 0 {
            format!("({}ull + (u64)it * {}ull)", c.index, c.step)
        } else {
            format!("{}ull", c.index)
        }
    }

    fn base(&self, buf: BufferKind, rank: u32) -> String {
        match buf {
            BufferKind::Input => format!("a.input[{rank}]"),
            BufferKind::Output => format!("a.output[{rank}]"),
            BufferKind::Scratch => format!("(a.area[{rank}] + c.scr)"),
        }
    }

    /// Whether `c` of `rank` is scratch that a port from another node writes into
    /// ([`inbox_chunks`]): addressed through plan.h `far_scr`, which is the inbox
    /// where the launch uses it. Such chunks are never in a C++ loop.
    fn lands_far(&self, c: &ChunkRef, rank: u32) -> bool {
        c.buf == BufferKind::Scratch
            && self
                .inbox
                .is_some_and(|l| overlaps_landing(&l[rank as usize], c))
    }

    /// The packet-area form of [`Gen::span`]'s functions and the base of the packets:
    /// LL16 packets in the scratch copy, LL63 packets in the LL63 copy (plan_ll63.h).
    fn packet_fn(&self, rank: u32, generic: bool) -> (&'static str, String) {
        match (self.ll63(), generic) {
            (false, false) => ("packets_of", self.base(BufferKind::Scratch, rank)),
            (false, true) => ("packets", self.base(BufferKind::Scratch, rank)),
            (true, false) => ("packets63_of", format!("(a.area[{rank}] + ll63_off(c))")),
            (true, true) => ("packets63", format!("(a.area[{rank}] + ll63_off(c))")),
        }
    }

    /// `chunk(...)` / `packets(...)` expression for `c` in `rank`'s buffers: in a C++
    /// loop the generic form; otherwise the bounds as constant expressions of `a.count`
    /// (`span_of` / `packets_of`), so that the op divides nothing at run time.
    fn span(&self, c: &ChunkRef, rank: u32, looped: bool, packets: bool) -> String {
        let spec = self.plan.spec(c.buf);
        if !(looped && c.step != 0) {
            let n = spec.chunks.max(1) as u64;
            let f = spec.factor as u64;
            let s = position(c.index as u64 * f, n);
            let e = position((c.index as u64 + c.count as u64) * f, n);
            let es = self.es;
            return if packets {
                let (f, base) = self.packet_fn(rank, false);
                format!("{f}({base}, {es}ull, {}ull, {s}, {e})", c.index)
            } else if self.lands_far(c, rank) {
                format!("span_of(far_scr(c, {rank}u), {es}ull, {s}, {e})")
            } else {
                let base = self.base(c.buf, rank);
                format!("span_of({base}, {es}ull, {s}, {e})")
            };
        }
        let (f, base) = if packets {
            self.packet_fn(rank, true)
        } else {
            ("chunk", self.base(c.buf, rank))
        };
        format!(
            "{f}({base}, {}ull, a.count * {}ull, {}u, {}, {}u)",
            self.es,
            spec.factor,
            spec.chunks.max(1),
            Self::first(c, looped),
            c.count
        )
    }

    /// Wait for the block's puts to the far ranks in `mask` that were not flushed yet
    /// (their sources become writable again; plan.h `far_flush`).
    fn flush_far(&mut self, mask: u32) {
        let m = self.unflushed & mask;
        if m != 0 {
            self.line(&format!("far_flush(c, {m}u);"));
            self.unflushed &= !m;
            // far_flush ends with a replica sync
            self.reads.clear();
            self.writes.clear();
        }
    }

    /// Before the first of `ops` that writes into the scratch of a reader of `done_to`
    /// in this block: wait until the reader is done with the copy. A near reader's
    /// first write waits for every near reader of the block at once (plan.h
    /// `wait_done`: one load per reader side by side, one CTA sync); a far reader is
    /// waited for before its first put (`far_wait_done`).
    fn wait_readers(&mut self, ops: &[Op]) {
        for (r, _) in ops.iter().filter_map(Op::scratch_reader) {
            match self.done_to.get(&r) {
                Some(true) if self.done_waited.insert(r) => {
                    self.line(&format!("far_wait_done<ORDERED>(c, {r}u);"));
                    self.ordered_differs = true;
                }
                Some(false) if !self.done_waited.contains(&r) => {
                    let m = self.near_done;
                    let o = m & self.one_way;
                    self.line(&format!("wait_done<ORDERED>(c, {m}u, {o}u);"));
                    self.ordered_differs |= m != o;
                    self.done_waited
                        .extend((0..32).filter(|p| m & (1 << p) != 0));
                }
                _ => {}
            }
        }
    }

    /// The near readers of `done_to` that `ops` write into (bit p: rank p).
    fn near_readers(done_to: &BTreeMap<u32, bool>, ops: &[Op]) -> u32 {
        let one = |o: &Op| match o.scratch_reader() {
            Some((r, _)) if done_to.get(&r) == Some(&false) => 1 << r,
            _ => 0,
        };
        ops.iter()
            .map(|o| match o {
                Op::Loop { body, .. } => body.iter().map(one).fold(0, |a, b| a | b),
                o => one(o),
            })
            .fold(0, |a, b| a | b)
    }

    /// An error for `what` between this rank and far `peer` (no SM reaches it).
    fn no_far(&self, peer: u32, what: &str) -> Result<(), AlgoError> {
        if self.far & (1 << peer) != 0 {
            return Err(AlgoError::Invalid(format!(
                "plan `{}`: rank {} {what} rank {peer} of another node; on GPUs only puts, signals, waits and flushes cross nodes (port channels carry no LL packets and no reads): use an HB plan, e.g. allreduce:2ph-hb",
                self.plan.name, self.me
            )));
        }
        Ok(())
    }

    fn sem(&self, k: SemKey) -> Result<u32, AlgoError> {
        self.sems.index.get(&k).copied().ok_or_else(|| {
            AlgoError::Invalid(format!(
                "plan `{}`: semaphore {k:?} has no index (internal error)",
                self.plan.name
            ))
        })
    }

    /// One op. `flat` = its index among the block's flattened ops (packet occurrences);
    /// `looped`: inside an emitted C++ loop over `it` with `iterations`.
    fn op(
        &mut self,
        op: &Op,
        block: usize,
        flat: usize,
        looped: bool,
        iterations: u32,
    ) -> Result<(), AlgoError> {
        let me = self.me;
        let es = self.es;
        // A put to a far rank reads its source until flushed: flush before anything that
        // may write this rank's memory or let a peer write it (a local write, a memory
        // signal, the intra-rank barrier, a signal to another far rank). The proxy keeps
        // a put before a later signal to the same rank (one port, in order).
        match op {
            Op::Put {
                channel: ChannelKind::Port,
                ..
            }
            | Op::Wait { .. }
            | Op::PutPackets { .. } => {}
            Op::Signal {
                peer,
                channel: ChannelKind::Port,
                ..
            } => self.flush_far(!(1 << peer)),
            Op::Flush { peer, .. } => self.flush_far(1 << peer),
            _ => self.flush_far(u32::MAX),
        }
        self.wait_readers(std::slice::from_ref(op));
        match op {
            Op::Put {
                peer,
                src,
                dst,
                channel: ChannelKind::Port,
                ..
            } => self.far_put_line("far_put", *peer, (src, dst), (looped, iterations), ""),
            Op::Put { peer, src, dst, .. } => {
                self.data_op(&[*src], &[], iterations);
                let s = self.span(src, me, looped, false);
                let d = self.span(dst, *peer, looped, false);
                self.line(&format!(
                    "{{ Span s = {s}; Span d = {d}; copy(c, d.p, s.p, s.n, {es}ull); }}"
                ));
            }
            Op::Get { peer, src, dst, .. } => {
                self.no_far(*peer, "reads (get) from")?;
                self.data_op(&[], &[*dst], iterations);
                let s = self.span(src, *peer, looped, false);
                let d = self.span(dst, me, looped, false);
                self.line(&format!(
                    "{{ Span s = {s}; Span d = {d}; copy(c, d.p, s.p, d.n, {es}ull); }}"
                ));
            }
            Op::Copy { src, dst } => {
                self.data_op(&[*src], &[*dst], iterations);
                let s = self.span(src, me, looped, false);
                let d = self.span(dst, me, looped, false);
                self.line(&format!(
                    "{{ Span s = {s}; Span d = {d}; copy(c, d.p, s.p, d.n, {es}ull); }}"
                ));
            }
            Op::Signal { peer, channel, tag } => {
                let i = self.sem((me, *peer, *channel, *tag))?;
                self.signalled.insert((*peer, i));
                let f = if *channel == ChannelKind::Port {
                    "far_signal"
                } else {
                    "signal"
                };
                self.line(&format!("{f}(c, {peer}u, {i}u, ++s{peer}_{i});"));
            }
            Op::Wait { peer, channel, tag } => {
                let i = self.sem((*peer, me, *channel, *tag))?;
                self.waited.insert(i);
                if *channel == ChannelKind::Port {
                    // the far peer's own word of the semaphore (plan.h far_sem)
                    self.line(&format!("far_wait(c, {peer}u, {i}u, ++w{i});"));
                } else {
                    self.line(&format!("wait(c, {i}u, ++w{i});"));
                }
            }
            Op::Flush { .. } => self.line("__syncthreads();"),
            Op::Reduce { srcs, dst } => {
                self.data_op(srcs, &[*dst], iterations);
                let d = self.span(dst, me, looped, false);
                let list: Vec<String> = srcs
                    .iter()
                    .map(|c| format!("{}.p", self.span(c, me, looped, false)))
                    .collect();
                self.line(&format!(
                    "{{ Span d = {d}; const u8* s[{}] = {{{}}}; reduce<DT, OP>(c, d.p, s, {}u, d.n); }}",
                    list.len(),
                    list.join(", "),
                    list.len()
                ));
            }
            Op::ReadReduce {
                peers,
                src,
                local,
                dst,
                ..
            } => {
                for p in peers {
                    self.no_far(*p, "reads (read-reduce) from")?;
                }
                self.data_op(local, &[*dst], iterations);
                let d = self.span(dst, me, looped, false);
                let mut list: Vec<String> = local
                    .iter()
                    .map(|c| format!("{}.p", self.span(c, me, looped, false)))
                    .collect();
                list.extend(
                    peers
                        .iter()
                        .map(|p| format!("{}.p", self.span(src, *p, looped, false))),
                );
                self.line(&format!(
                    "{{ Span d = {d}; const u8* s[{}] = {{{}}}; reduce<DT, OP>(c, d.p, s, {}u, d.n); }}",
                    list.len(),
                    list.join(", "),
                    list.len()
                ));
            }
            Op::PutPackets { peer, src, dst, .. } => {
                self.no_far(*peer, "writes LL packets into")?;
                self.data_op_split(&[*src], &[], iterations, self.packet_split());
                self.walks(&[*src]);
                let s = self.span(src, me, looped, false);
                let d = self.span(dst, *peer, looped, true);
                if self.ll63() {
                    self.line(&format!(
                        "{{ Span s = {s}; Span d = {d}; put_packets63(c, d.p, s.p, s.n, {es}ull); }}"
                    ));
                } else {
                    let occ = self.occurrence(block, flat, 0)?;
                    self.line(&format!(
                        "{{ Span s = {s}; Span d = {d}; put_packets(c, d.p, s.p, s.n, {es}ull, ll_flag(c, {occ}u)); }}"
                    ));
                }
                self.sent = true;
            }
            Op::ReadReducePackets {
                packets,
                local,
                dst,
            } => {
                if packets.is_empty() || packets.len() > MAX_RANKS as usize {
                    return Err(AlgoError::Invalid(format!(
                        "plan `{}`: a packet read needs 1..={MAX_RANKS} sources, got {}",
                        self.plan.name,
                        packets.len()
                    )));
                }
                let (d, l, p, at) =
                    self.read_reduce_operands(local, packets, dst, iterations, looped);
                self.walks(&[*dst]);
                let nl = local.len();
                if self.ll63() {
                    // no flags: the valid bits; the reader clears the packets (u8*)
                    self.line(&format!(
                        "{{ Span d = {d}; const u8* const l[{}] = {{{l}}}; u8* const p[{}] = {{{}}}; reduce_packets63<DT, OP, {nl}u, {}u{}>(c, d.p, l, p, d.n); }}",
                        nl.max(1),
                        p.len(),
                        p.join(", "),
                        p.len(),
                        at
                    ));
                    return Ok(());
                }
                let mut f = Vec::new();
                for k in 0..packets.len() {
                    f.push(format!("ll_flag(c, {}u)", self.occurrence(block, flat, k)?));
                }
                self.line(&format!(
                    "{{ Span d = {d}; const u8* l[{}] = {{{l}}}; const u8* p[{}] = {{{}}}; const u32 f[{}] = {{{}}}; reduce_packets<DT, OP, {}u>(c, d.p, l, {nl}u, p, f, d.n{}); }}",
                    nl.max(1),
                    p.len(),
                    p.join(", "),
                    f.len(),
                    f.join(", "),
                    p.len(),
                    at
                ));
            }
            Op::Barrier => {
                self.line("barrier(c);");
                self.reads.clear();
                self.writes.clear();
            }
            Op::Finalize { dst } => {
                // Only avg (OP 4, a compile-time constant) touches the data here, so a
                // CTA barrier that only this op needs goes inside its branch: the
                // other operators end without it. A replica sync stays outside (it
                // clears the hazard record for the ops after it).
                // In an LL63 plan it splits the chunk by tiles, as the packet read
                // before it (plan_ll63.h finalize_avg63).
                let ll63 = self.ll63();
                let (worst, r, w) = self.hazard(&[*dst], &[*dst], iterations, self.packet_split());
                let cta = worst == Hazard::ThisCta;
                self.sync_for(if cta { Hazard::None } else { worst }, r, w);
                let d = self.span(dst, me, looped, false);
                self.line(&format!(
                    "if (OP == 4) {{ {}Span d = {d}; finalize_avg{}<DT>(c, d.p, d.n, {}u); }}",
                    if cta { "__syncthreads(); " } else { "" },
                    if ll63 { "63" } else { "" },
                    self.plan.nranks
                ));
            }
            Op::SwitchReduce { .. } | Op::SwitchBroadcast { .. } => {
                return Err(AlgoError::Invalid(format!(
                    "plan `{}` uses switch (multicast) ops: they need the cuda-nvls backend, not the NVLink code generator",
                    self.plan.name
                )));
            }
            Op::Loop { .. } => {
                return Err(AlgoError::Invalid(format!(
                    "plan `{}`: nested loop (the validator rejects these)",
                    self.plan.name
                )));
            }
        }
        Ok(())
    }

    /// Straight-line ops of a block (outside C++ loops; `flat` = each one's index among
    /// the block's flattened ops): runs that [`Gen::reduce_put_run`],
    /// [`Gen::packet_run`], [`Gen::scatter_run`] or [`Gen::unpack_run`] find (asked in
    /// that order) go out as one fused op each, every other op as itself.
    fn straight(&mut self, ops: &[(Op, usize)], block: usize) -> Result<(), AlgoError> {
        let mut i = 0;
        while i < ops.len() {
            let rest = &ops[i..];
            i += if let n @ 1.. = self.reduce_put_run(rest) {
                self.reduce_put_packets63(&rest[..n])?;
                n
            } else if let n @ 1.. = self.packet_run(rest) {
                self.put_packets_multi(&rest[..n], block)?;
                n
            } else if let n @ 1.. = self.scatter_run(rest) {
                self.put_packets_scatter(&rest[..n], block)?;
                n
            } else if let n @ 1.. = self.unpack_run(rest) {
                self.unpack_packets_multi(&rest[..n], block)?;
                n
            } else if let Some((put, signal)) = Self::far_put_signal_pair(rest) {
                self.far_put_signal(put, signal)?;
                2
            } else {
                self.op(&rest[0].0, block, rest[0].1, false, 1)?;
                1
            };
        }
        Ok(())
    }

    /// A port put followed by a port signal to the same far rank, at the start of `ops`:
    /// they go out as one `far_put_signal` (plan.h), which the proxy performs as one
    /// write with its signal.
    fn far_put_signal_pair(ops: &[(Op, usize)]) -> Option<(&Op, &Op)> {
        match ops {
            [
                (
                    put @ Op::Put {
                        peer: a,
                        channel: ChannelKind::Port,
                        ..
                    },
                    _,
                ),
                (
                    signal @ Op::Signal {
                        peer: b,
                        channel: ChannelKind::Port,
                        ..
                    },
                    _,
                ),
                ..,
            ] if a == b => Some((put, signal)),
            _ => None,
        }
    }

    /// `put` then `signal` (a [`Gen::far_put_signal_pair`]) as `op` emits them, in one
    /// call: the flush of the other far ranks' puts that the signal needs comes first
    /// (it does not touch this put), then the put's wait for its reader.
    fn far_put_signal(&mut self, put: &Op, signal: &Op) -> Result<(), AlgoError> {
        let (Op::Put { peer, src, dst, .. }, Op::Signal { channel, tag, .. }) = (put, signal)
        else {
            unreachable!("far_put_signal_pair gives a put and a signal");
        };
        self.flush_far(!(1 << peer));
        self.wait_readers(std::slice::from_ref(put));
        let i = self.sem((self.me, *peer, *channel, *tag))?;
        self.signalled.insert((*peer, i));
        let extra = format!(", {i}u, ++s{peer}_{i}");
        self.far_put_line("far_put_signal", *peer, (src, dst), (false, 1), &extra);
        Ok(())
    }

    /// A port put to far `peer` as plan.h `f` (`far_put`, or `far_put_signal` with its
    /// `extra` arguments), `at` = (looped, iterations): the source read, the put left
    /// unflushed, and the hazard record cleared (both start with a replica sync).
    fn far_put_line(
        &mut self,
        f: &str,
        peer: u32,
        (src, dst): (&ChunkRef, &ChunkRef),
        (looped, iterations): (bool, u32),
        extra: &str,
    ) {
        self.data_op(&[*src], &[], iterations);
        let s = self.span(src, self.me, looped, false);
        let d = self.span(dst, peer, looped, false);
        let es = self.es;
        self.line(&format!(
            "{{ Span s = {s}; Span d = {d}; {f}(c, {peer}u, d.p, s.p, s.n * {es}ull{extra}); }}"
        ));
        self.unflushed |= 1 << peer;
        self.reads.clear();
        self.writes.clear();
    }

    /// The length of the run at the start of `ops` that fuses into one
    /// `put_packets_multi` (plan.h), or 0: consecutive `PutPackets` of one source chunk
    /// to near peers (each packet area once) and at most one `Copy` of that chunk,
    /// at least two ops of which one puts packets. Every op of the run splits the
    /// chunk among the CTAs alike (plan.h `share_elems`), so the fused op moves, CTA
    /// by CTA, what the separate ops move, loading each packet's bytes once. The copy
    /// fuses only where it reads none of what it writes (its destination is disjoint
    /// from the source, so the order of its stores and the packets' loads is free) and
    /// where it moves as many elements as the puts for every count.
    fn packet_run(&self, ops: &[(Op, usize)]) -> usize {
        let src = match ops.first() {
            Some((Op::PutPackets { src, .. } | Op::Copy { src, .. }, _)) => *src,
            _ => return 0,
        };
        let (mut puts, mut copy, mut len) = (0, false, 0);
        let mut areas = BTreeSet::new();
        for (op, _) in ops {
            match op {
                Op::PutPackets {
                    peer, src: s, dst, ..
                } if *s == src
                    && self.far & (1 << peer) == 0
                    && areas.insert((*peer, dst.buf, dst.index, dst.count)) =>
                {
                    puts += 1
                }
                Op::Copy { src: s, dst } if *s == src && !copy && self.copy_fuses(s, dst) => {
                    copy = true
                }
                _ => break,
            }
            len += 1;
        }
        if puts > 0 && len >= 2 { len } else { 0 }
    }

    /// The order of `peer` among this rank's peers, counted from the next rank: fused
    /// puts store each tile to the peers in that order, as the hand kernels, so that
    /// the ranks start on different peers and no rank's links take every sender's first
    /// stores (the 4-rank LL63 all-gather: 1.06-1.26 of the hand kernel's time at
    /// 1-8 MiB with every rank starting on the same peer, 0.98-1.01 so).
    fn peer_order(&self, peer: u32) -> u32 {
        let n = self.plan.nranks;
        (peer + n - self.me - 1) % n
    }

    /// A packet read-reduce's sync (what its data needs, and [`Gen::after_sends`]) and
    /// its operands: the destination's span, the locals' pointers as an array
    /// initializer (`nullptr` for none: the array has at least one entry), the packet
    /// areas' pointers, and where the locals enter the sum ([`local_position`]) as the
    /// last argument of the runtime's call: `, Ku`, or nothing where they come first
    /// (its default).
    fn read_reduce_operands(
        &mut self,
        local: &[ChunkRef],
        packets: &[(u32, ChunkRef)],
        dst: &ChunkRef,
        iterations: u32,
        looped: bool,
    ) -> (String, String, Vec<String>, String) {
        let me = self.me;
        let mut reads: Vec<ChunkRef> = local.to_vec();
        reads.extend(packets.iter().map(|p| p.1));
        let (worst, r, w) = self.hazard(&reads, &[*dst], iterations, self.packet_split());
        self.sync_for(self.after_sends(worst, reads.len()), r, w);
        let d = self.span(dst, me, looped, false);
        let l: Vec<String> = local
            .iter()
            .map(|c| format!("{}.p", self.span(c, me, looped, false)))
            .collect();
        let l = if l.is_empty() {
            "nullptr".to_string()
        } else {
            l.join(", ")
        };
        let p = packets
            .iter()
            .map(|(_, c)| format!("{}.p", self.span(c, me, looped, true)))
            .collect();
        let at = match local_position(packets, me) {
            k @ 1.. if !local.is_empty() => format!(", {k}u"),
            _ => String::new(),
        };
        (d, l, p, at)
    }

    /// The length of the run at the start of `ops` that fuses into one
    /// `reduce_put_packets63` (plan_ll63.h), or 0: in an LL63 plan, a
    /// `ReadReducePackets` into a chunk, at most avg's `Finalize` of it, then puts of that
    /// chunk to near peers (each packet area once). The reduce and the puts split the
    /// chunk by tiles alike, so the fused op sends each tile from the registers that
    /// stored it (the hand kernels' reduce_replicate) instead of loading it again behind
    /// a CTA barrier.
    fn reduce_put_run(&self, ops: &[(Op, usize)]) -> usize {
        if !self.ll63() {
            return 0;
        }
        let Some((Op::ReadReducePackets { dst, packets, .. }, _)) = ops.first() else {
            return 0;
        };
        if packets.is_empty() || packets.len() > MAX_RANKS as usize {
            return 0; // op() says why
        }
        let fin = usize::from(matches!(ops.get(1), Some((Op::Finalize { dst: f }, _)) if f == dst));
        let mut areas = BTreeSet::new();
        let puts = ops[1 + fin..]
            .iter()
            .take_while(|(op, _)| match op {
                Op::PutPackets {
                    peer,
                    src,
                    dst: area,
                    ..
                } => {
                    src == dst
                        && self.far & (1 << peer) == 0
                        && areas.insert((*peer, area.buf, area.index, area.count))
                }
                _ => false,
            })
            .count();
        if puts > 0 { 1 + fin + puts } else { 0 }
    }

    /// A run of [`Gen::reduce_put_run`] as one `reduce_put_packets63`: first the puts'
    /// done-word wait, then the sync the reduce needs.
    fn reduce_put_packets63(&mut self, run: &[(Op, usize)]) -> Result<(), AlgoError> {
        let (
            Op::ReadReducePackets {
                packets,
                local,
                dst,
            },
            _,
        ) = &run[0]
        else {
            unreachable!("reduce_put_run starts with a packet read");
        };
        let fin = matches!(run[1].0, Op::Finalize { .. });
        let mut puts: Vec<(u32, ChunkRef)> = run
            .iter()
            .filter_map(|(o, _)| match o {
                Op::PutPackets { peer, dst, .. } => Some((*peer, *dst)),
                _ => None,
            })
            .collect();
        puts.sort_by_key(|p| self.peer_order(p.0));
        let ops: Vec<Op> = run.iter().map(|(o, _)| o.clone()).collect();
        self.wait_readers(&ops);
        let (d, l, p, at) = self.read_reduce_operands(local, packets, dst, 1, false);
        let mut text = format!("{{ Span d = {d};");
        let q: Vec<String> = puts
            .iter()
            .map(|(peer, area)| format!("{}.p", self.span(area, *peer, false, true)))
            .collect();
        let (nl, np, nq) = (local.len(), p.len(), q.len());
        let _ = write!(
            text,
            " const u8* const l[{}] = {{{l}}}; u8* const p[{np}] = {{{}}}; u8* const q[{nq}] = {{{}}}; reduce_put_packets63<DT, OP, {nl}u, {np}u, {nq}u{}>(c, d.p, l, p, q, d.n, {}u); }}",
            nl.max(1),
            p.join(", "),
            q.join(", "),
            at,
            if fin { self.plan.nranks } else { 0 }
        );
        self.line(&text);
        self.sent = true;
        Ok(())
    }

    /// The length of the run at the start of `ops` that fuses into one
    /// `unpack_packets63_multi` (plan_ll63.h) or `unpack_packets_multi` (plan.h), or 0:
    /// at least two consecutive `ReadReducePackets` that each unpack one sender's
    /// packets (no local operand) into disjoint destinations.
    fn unpack_run(&self, ops: &[(Op, usize)]) -> usize {
        let mut dsts: Vec<Extent> = Vec::new();
        for (op, _) in ops {
            match op {
                Op::ReadReducePackets {
                    packets,
                    local,
                    dst,
                } if local.is_empty() && packets.len() == 1 && dsts.len() < MAX_RANKS as usize => {
                    let e = self.extent(dst, 1);
                    if dsts.iter().any(|d| Self::conflicts(&e, d) != Hazard::None) {
                        break;
                    }
                    // An LL16 unpack into memory an op since the last sync touched stays
                    // on its own: that op split it by units as the unpack does (a CTA
                    // barrier orders them), the fused run by items (a replica sync
                    // would). LL63 runs have item spaces of their own (Split::Items).
                    let touched = || {
                        self.reads
                            .iter()
                            .chain(&self.writes)
                            .any(|x| Self::conflicts(&e, x) != Hazard::None)
                    };
                    if !self.ll63() && touched() {
                        break;
                    }
                    dsts.push(e);
                }
                _ => break,
            }
        }
        if dsts.len() >= 2 { dsts.len() } else { 0 }
    }

    /// The length of the run at the start of `ops` that fuses into one
    /// `put_packets63_scatter` (plan_ll63.h) or `put_packets_scatter` (plan.h), or 0: at
    /// least two consecutive `PutPackets` to near peers, of pairwise different source
    /// chunks (puts of one source fuse into `put_packets_multi` instead) into different
    /// packet areas; in an LL16 plan chunks of equal length for every count (its loop
    /// takes a packet of every chunk per thread; LL63's walks each chunk's tiles).
    fn scatter_run(&self, ops: &[(Op, usize)]) -> usize {
        let (mut srcs, mut areas) = (BTreeSet::new(), BTreeSet::new());
        let mut first = None;
        for (op, _) in ops {
            match op {
                Op::PutPackets { peer, src, dst, .. }
                    if self.far & (1 << peer) == 0
                        && srcs.len() < MAX_RANKS as usize
                        && !srcs.contains(&(src.buf, src.index, src.count))
                        && !areas.contains(&(*peer, dst.buf, dst.index, dst.count))
                        && (self.ll63() || self.same_length(first.get_or_insert(*src), src)) =>
                {
                    srcs.insert((src.buf, src.index, src.count));
                    areas.insert((*peer, dst.buf, dst.index, dst.count));
                }
                _ => break,
            }
        }
        if srcs.len() >= 2 { srcs.len() } else { 0 }
    }

    /// A run of [`Gen::scatter_run`] as one `put_packets63_scatter` (LL63, a chunk per
    /// warp tile) or `put_packets_scatter` (LL16, each thread storing to the peers from
    /// the next rank on, with each put's packet flag): first the puts' done-word wait
    /// and the sync their local reads need.
    fn put_packets_scatter(&mut self, run: &[(Op, usize)], block: usize) -> Result<(), AlgoError> {
        let me = self.me;
        let es = self.es;
        let mut puts = self.run_puts(run, block)?;
        if !self.ll63() {
            puts.sort_by_key(|p| self.peer_order(p.0));
        }
        let ops: Vec<Op> = run.iter().map(|(o, _)| o.clone()).collect();
        self.wait_readers(&ops);
        let reads: Vec<ChunkRef> = puts.iter().map(|p| p.1).collect();
        if self.ll63() {
            self.data_op_items(&reads, &[]);
        } else {
            self.data_op_split(&reads, &[], 1, Split::Units);
            self.walks(&reads[..1]);
        }
        let mut text = String::from("{");
        for (k, (peer, src, dst, _)) in puts.iter().enumerate() {
            let _ = write!(
                text,
                " Span s{k} = {}; Span d{k} = {};",
                self.span(src, me, false, false),
                self.span(dst, *peer, false, true)
            );
        }
        let n = puts.len();
        let list = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>().join(", ");
        let (d, s) = (list(&|k| format!("d{k}.p")), list(&|k| format!("s{k}.p")));
        if self.ll63() {
            let _ = write!(
                text,
                " u8* const d[{n}] = {{{d}}}; const u8* const s[{n}] = {{{s}}}; const u64 m[{n}] = {{{}}}; put_packets63_scatter<{n}>(c, d, s, m, {es}ull); }}",
                list(&|k| format!("s{k}.n")),
            );
        } else {
            let _ = write!(
                text,
                " u8* const d[{n}] = {{{d}}}; const u32 f[{n}] = {{{}}}; const u8* const s[{n}] = {{{s}}}; put_packets_scatter<{n}>(c, d, f, s, s0.n, {es}ull); }}",
                list(&|k| format!("ll_flag(c, {}u)", puts[k].3)),
            );
        }
        self.line(&text);
        self.sent = true;
        Ok(())
    }

    /// A run of [`Gen::unpack_run`] as one `unpack_packets63_multi` (LL63) or
    /// `unpack_packets_multi` (LL16, with each sender's packet flag).
    fn unpack_packets_multi(&mut self, run: &[(Op, usize)], block: usize) -> Result<(), AlgoError> {
        let me = self.me;
        let es = self.es;
        let (mut reads, mut writes, mut text) = (Vec::new(), Vec::new(), String::from("{"));
        let mut flags = Vec::new();
        for (k, (op, flat)) in run.iter().enumerate() {
            if let Op::ReadReducePackets { packets, dst, .. } = op {
                reads.push(packets[0].1);
                writes.push(*dst);
                if !self.ll63() {
                    flags.push(format!(
                        "ll_flag(c, {}u)",
                        self.occurrence(block, *flat, 0)?
                    ));
                }
                let _ = write!(
                    text,
                    " Span d{k} = {}; Span p{k} = {};",
                    self.span(dst, me, false, false),
                    self.span(&packets[0].1, me, false, true)
                );
            }
        }
        self.data_op_items(&reads, &writes);
        self.walks(&writes);
        let n = run.len();
        let list = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>().join(", ");
        let (d, p, m) = (
            list(&|k| format!("d{k}.p")),
            list(&|k| format!("p{k}.p")),
            list(&|k| format!("d{k}.n")),
        );
        if self.ll63() {
            let _ = write!(
                text,
                " u8* const d[{n}] = {{{d}}}; u8* const p[{n}] = {{{p}}}; const u64 m[{n}] = {{{m}}}; unpack_packets63_multi<{n}>(c, d, p, m, {es}ull); }}",
            );
        } else {
            let _ = write!(
                text,
                " u8* const d[{n}] = {{{d}}}; const u8* const p[{n}] = {{{p}}}; const u32 f[{n}] = {{{}}}; const u64 m[{n}] = {{{m}}}; unpack_packets_multi<{n}>(c, d, p, f, m, {es}ull); }}",
                flags.join(", ")
            );
        }
        self.line(&text);
        Ok(())
    }

    /// Whether a `Copy` of `src` into `dst` (straight-line, no loop index) can run in
    /// the loop of puts of `src`: disjoint memory, and the same number of elements for
    /// every count ([`Gen::same_length`]).
    fn copy_fuses(&self, src: &ChunkRef, dst: &ChunkRef) -> bool {
        let (s, d) = (self.extent(src, 1), self.extent(dst, 1));
        Self::conflicts(&s, &d) == Hazard::None && self.same_length(src, dst)
    }

    /// Whether two straight-line chunks hold the same number of elements for every
    /// count: equal lengths in units of count, and bounds that differ by whole counts,
    /// so that both round down alike.
    fn same_length(&self, a: &ChunkRef, b: &ChunkRef) -> bool {
        let bounds = |c: &ChunkRef| {
            let spec = self.plan.spec(c.buf);
            let (n, f) = (spec.chunks.max(1) as i128, spec.factor as i128);
            (
                c.index as i128 * f,
                (c.index as i128 + c.count as i128) * f,
                n,
            )
        };
        let ((s0, s1, sn), (d0, d1, dn)) = (bounds(a), bounds(b));
        // (s1 - s0) / sn == (d1 - d0) / dn, and (d0 / dn - s0 / sn) is an integer
        (s1 - s0) * dn == (d1 - d0) * sn && (d0 * sn - s0 * dn) % (sn * dn) == 0
    }

    /// A run of [`Gen::packet_run`] as one `put_packets_multi`: first what each op
    /// would have done before it (a copy's flush of far puts, the puts' done-word
    /// wait, the replica sync or CTA barrier its local reads and writes need).
    fn put_packets_multi(&mut self, run: &[(Op, usize)], block: usize) -> Result<(), AlgoError> {
        let me = self.me;
        let es = self.es;
        let copy = run.iter().find_map(|(o, _)| match o {
            Op::Copy { dst, .. } => Some(*dst),
            _ => None,
        });
        let mut puts = self.run_puts(run, block)?;
        puts.sort_by_key(|p| self.peer_order(p.0));
        let src = puts[0].1;
        if copy.is_some() {
            self.flush_far(u32::MAX);
        }
        let ops: Vec<Op> = run.iter().map(|(o, _)| o.clone()).collect();
        self.wait_readers(&ops);
        self.data_op_split(&[src], copy.as_slice(), 1, self.packet_split());
        self.walks(&[src]);
        let mut text = format!("{{ Span s = {};", self.span(&src, me, false, false));
        for (k, (peer, _, dst, _)) in puts.iter().enumerate() {
            let _ = write!(text, " Span d{k} = {};", self.span(dst, *peer, false, true));
        }
        let own = match &copy {
            Some(d) => {
                let _ = write!(text, " Span o = {};", self.span(d, me, false, false));
                "o.p"
            }
            None => "nullptr",
        };
        let n = puts.len();
        let d: Vec<String> = (0..n).map(|k| format!("d{k}.p")).collect();
        if self.ll63() {
            let _ = write!(
                text,
                " u8* const d[{n}] = {{{}}}; put_packets63_multi<{n}>(c, d, s.p, s.n, {es}ull, {own}); }}",
                d.join(", ")
            );
            self.line(&text);
            self.sent = true;
            return Ok(());
        }
        let f: Vec<String> = puts
            .iter()
            .map(|p| format!("ll_flag(c, {}u)", p.3))
            .collect();
        let _ = write!(
            text,
            " u8* const d[{n}] = {{{}}}; const u32 f[{n}] = {{{}}}; put_packets_multi<{n}>(c, d, f, s.p, s.n, {es}ull, {own}); }}",
            d.join(", "),
            f.join(", ")
        );
        self.line(&text);
        self.sent = true;
        Ok(())
    }

    /// The `PutPackets` of a fused run, in run order: (peer, source, packet area, the
    /// LL16 packet occurrence; 0 in an LL63 plan, whose packets carry no flag). Each
    /// peer must be near: packets do not cross nodes.
    fn run_puts(
        &self,
        run: &[(Op, usize)],
        block: usize,
    ) -> Result<Vec<(u32, ChunkRef, ChunkRef, u32)>, AlgoError> {
        let mut puts = Vec::new();
        for (op, flat) in run {
            if let Op::PutPackets { peer, src, dst, .. } = op {
                self.no_far(*peer, "writes LL packets into")?;
                let occ = if self.ll63() {
                    0
                } else {
                    self.occurrence(block, *flat, 0)?
                };
                puts.push((*peer, *src, *dst, occ));
            }
        }
        Ok(puts)
    }

    fn occurrence(&self, block: usize, flat: usize, k: usize) -> Result<u32, AlgoError> {
        self.occ
            .get(&(self.me, block, flat))
            .and_then(|v| v.get(k))
            .copied()
            .ok_or_else(|| {
                AlgoError::Invalid(format!(
                    "plan `{}`: no packet occurrence for rank {} block {block} op {flat} (internal error)",
                    self.plan.name, self.me
                ))
            })
    }
}

/// `floor(a.count * num / den)` as a C++ expression with constants (the arithmetic of
/// `ChunkRef::range`, the fraction reduced so that whole positions need no division).
fn position(num: u64, den: u64) -> String {
    let g = gcd(num, den);
    let (num, den) = (num / g.max(1), den / g.max(1));
    match (num, den) {
        (0, _) => "0ull".to_string(),
        (1, 1) => "a.count".to_string(),
        (n, 1) => format!("(a.count * {n}ull)"),
        (n, d) => format!("(a.count * {n}ull / {d}ull)"),
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The largest [`PacketWalk`] of any rank of `plan` with `dtype`: every rank launches
/// the grid it gives, so that a CTA index names the same CTA on every rank wherever a
/// plan pairs them (handshakes, signal parts).
pub fn packet_walk(plan: &Plan, dtype: DataType) -> Result<PacketWalk, AlgoError> {
    if plan.packets != PacketFormat::Ll16 || !plan.uses_packets() {
        return Ok(PacketWalk::NONE);
    }
    (0..plan.nranks).try_fold(PacketWalk::NONE, |w, r| {
        Ok(w.max(generate_cuda(plan, r, dtype, RedOp::Sum)?.packet_walk))
    })
}

/// Generate the CUDA kernel of `rank` for `plan` with `dtype` and `op`. The plan must
/// have passed the validator.
pub fn generate_cuda(
    plan: &Plan,
    rank: u32,
    dtype: DataType,
    op: RedOp,
) -> Result<CudaKernel, AlgoError> {
    if rank >= plan.nranks {
        return Err(AlgoError::Invalid(format!(
            "rank {rank} is not in the {}-rank plan `{}`",
            plan.nranks, plan.name
        )));
    }
    if plan.nranks > MAX_RANKS {
        return Err(AlgoError::Invalid(format!(
            "plan `{}` has {} ranks; the NVLink code generator supports {MAX_RANKS} (one node)",
            plan.name, plan.nranks
        )));
    }
    let blocks = &plan.ranks[rank as usize].blocks;
    if blocks.len() > MAX_BLOCKS {
        return Err(AlgoError::Invalid(format!(
            "plan `{}` gives rank {rank} {} blocks; at most {MAX_BLOCKS}",
            plan.name,
            blocks.len()
        )));
    }
    // The runtime pairs CTA b of every rank (handshakes, signal parts): every rank must
    // launch the same grid, so every rank has the same number of blocks.
    if let Some((r, other)) = plan
        .ranks
        .iter()
        .enumerate()
        .find(|(_, x)| x.blocks.len() != blocks.len())
    {
        return Err(AlgoError::Invalid(format!(
            "plan `{}` gives rank {rank} {} blocks and rank {r} {}; the GPU runtime pairs block b of every rank, so every rank needs the same number",
            plan.name,
            blocks.len(),
            other.blocks.len()
        )));
    }
    let sems = sems(plan)?;
    let occ = packet_occurrences(plan)?;
    let (start_sync, end_sync) = if plan.nranks > 1 {
        peer_user_access(plan)
    } else {
        (false, false)
    };
    let far = far_peers(plan, rank);
    let inbox = inbox_chunks(plan);
    let done = done_pairs(plan, start_sync);
    let done_to = readers_of(&done, rank);
    let one_way = plan
        .one_way_packet_pairs()
        .iter()
        .filter(|(w, _)| *w == rank)
        .fold(0u32, |m, (_, r)| m | (1 << r));
    let mut body = String::new();
    let mut uses_barrier = false;
    let mut packet_walk = PacketWalk::NONE;
    let mut ordered_entry = false;
    for (b, blk) in blocks.iter().enumerate() {
        let mut g = Gen {
            plan,
            me: rank,
            es: dtype.size() as u64,
            sems: &sems,
            occ: &occ,
            out: String::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            waited: BTreeSet::new(),
            signalled: BTreeSet::new(),
            done_to: &done_to,
            done_waited: BTreeSet::new(),
            near_done: Gen::near_readers(&done_to, &blk.ops),
            one_way,
            ordered_differs: false,
            far,
            unflushed: 0,
            spaces: Vec::new(),
            sent: false,
            walk: PacketWalk::NONE,
            inbox: inbox.as_deref(),
        };
        let mut flat = 0usize;
        // Straight-line ops (outside C++ loops), each with its flat index, emitted
        // together so that runs of them can fuse (Gen::straight).
        let mut straight: Vec<(Op, usize)> = Vec::new();
        for op in &blk.ops {
            match op {
                Op::Loop { iterations, body } if !body.iter().any(Op::is_packet) => {
                    g.straight(&straight, b)?;
                    straight.clear();
                    // A C++ loop; its extents count for every iteration.
                    g.wait_readers(body);
                    g.line(&format!("for (u32 it = 0; it < {iterations}u; ++it) {{"));
                    for o in body {
                        g.op(o, b, flat, true, *iterations)?;
                    }
                    // the next iteration may write what this one's puts read
                    g.flush_far(u32::MAX);
                    g.line("}");
                    flat += *iterations as usize * body.len();
                }
                Op::Loop { iterations, body } => {
                    // Packet flags are per iteration: unroll.
                    for it in 0..*iterations {
                        for o in body {
                            straight.push((o.at_iteration(it), flat));
                            flat += 1;
                        }
                    }
                }
                o => {
                    straight.push((o.clone(), flat));
                    flat += 1;
                }
            }
        }
        g.straight(&straight, b)?;
        // the launch ends with every put done (the stream's next work may reuse sources)
        g.flush_far(u32::MAX);
        packet_walk = packet_walk.max(g.walk);
        ordered_entry |= g.ordered_differs;
        uses_barrier |= blk.ops.iter().any(|o| {
            matches!(o, Op::Barrier)
                || matches!(o, Op::Loop { body, .. } if body.contains(&Op::Barrier))
        });
        let _ = writeln!(
            body,
            "  {}if (b == {b}u) {{",
            if b == 0 { "" } else { "else " }
        );
        // Signal and wait numbers of this invocation (plan.h: flags are (L << 32) | k).
        for i in &g.waited {
            let _ = writeln!(body, "    u32 w{i} = 0;");
        }
        for (p, i) in &g.signalled {
            let _ = writeln!(body, "    u32 s{p}_{i} = 0;");
        }
        body.push_str(&g.out);
        body.push_str("  }\n");
    }
    let mut src = String::new();
    let _ = writeln!(
        src,
        "// Generated by commhal-algorithms codegen from plan `{}` ({} ranks, {}), rank {rank}, {dtype}, {}.\n// Runtime: commhal/plan.h.",
        plan.name,
        plan.nranks,
        if plan.in_place {
            "in place"
        } else {
            "out of place"
        },
        op.name()
    );
    src.push_str(
        "#include \"commhal/plan.h\"\nusing namespace commhal;\nusing namespace commhal::plan;\n",
    );
    let _ = writeln!(
        src,
        "#define DT {}\n#define OP {}",
        dtype_code(dtype),
        op_code(op)
    );
    // One CTA of up to 1024 threads per SM: ptxas may then use 64 registers a thread.
    // Under the default bound (32), 9 of 90 packet-plan kernels (2-4 ranks, f16 / f32)
    // spilled 4-16 bytes; under this one none does (42 registers on most). An LL63 lane
    // holds two tiles' words (32 u64: 64 registers) in its read-reduce, so LL63 plans
    // run at most MAX_LL63_THREADS threads a CTA, with up to 128 registers.
    let threads = match plan.packets {
        PacketFormat::Ll16 => 1024,
        PacketFormat::Ll63 => MAX_LL63_THREADS,
    };
    // The body once, as plan_body<ORDERED>, and an entry per ORDERED that differs
    // (plan.h wait_done).
    src.push_str(
        "template <bool ORDERED>\n__device__ __forceinline__ void plan_body(const PlanArgs& a) {\n  Ctx c = begin(a);\n  const u32 b = c.block;\n",
    );
    src.push_str(&publish_lines(rank, &done));
    let far_hs = far_handshake_peers(plan, rank, far);
    if start_sync {
        src.push_str(&sync_line("start", plan.nranks, far, far_hs));
    }
    src.push_str(&body);
    if end_sync {
        src.push_str(&sync_line("end", plan.nranks, far, far_hs));
    }
    // the handshakes with far peers run behind the intra-rank barrier
    uses_barrier |= far_hs != 0 && (start_sync || end_sync);
    src.push_str("}\n");
    for name in entries(ordered_entry) {
        let ordered = *name == ORDERED_ENTRY;
        let _ = writeln!(
            src,
            "extern \"C\" __global__ void __launch_bounds__({threads}, 1) {name}(const PlanArgs a) {{ plan_body<{ordered}>(a); }}"
        );
    }
    Ok(CudaKernel {
        unit: format!(
            "plan-{}-r{rank}-{dtype}-{}.cu",
            plan.name.replace([':', '/', ' '], "-"),
            op.name()
        ),
        source: src,
        blocks: blocks.len() as u32,
        far,
        uses_barrier,
        packet_walk,
        ordered_entry,
        inbox: far != 0 && inbox.is_some(),
    })
}

/// Threads per CTA at most of a kernel generated from an LL63 plan (its launch bound).
pub const MAX_LL63_THREADS: u32 = 512;

/// Data bytes of an LL63 tile (252 16-byte vectors) and its packet bytes (plan_ll63.h).
pub const LL63_TILE_DATA: u64 = 252 * 16;
/// Packet bytes of an LL63 tile.
pub const LL63_TILE_PACKETS: u64 = 256 * 16;

/// Bytes of one LL63 copy on the GPU for `count` elements of `dtype` (0: the plan moves
/// no LL63 packets): each scratch chunk's packets from a tile of their own, the chunk at
/// scratch byte x with index i at tile ⌊x / 4032⌋ + i (plan_ll63.h `ll63_offset`), so
/// ⌊scratch bytes / 4032⌋ + chunks tiles hold them all.
pub fn gpu_ll63_copy_bytes(plan: &Plan, count: u64, dtype: DataType) -> u64 {
    if plan.packets != PacketFormat::Ll63 || !plan.uses_packets() {
        return 0;
    }
    let data = plan.scratch.elems(count) * dtype.size() as u64;
    let tiles = data / LL63_TILE_DATA + u64::from(plan.scratch.chunks.max(1));
    (tiles * LL63_TILE_PACKETS).next_multiple_of(256)
}

/// Bytes of one scratch copy on the GPU for `count` elements of `dtype`: the data, or
/// for LL16 packet plans the packet area (each chunk on its own LL16 packets; as the
/// host executor places them). LL63 packets have copies of their own
/// ([`gpu_ll63_copy_bytes`]): an LL63 plan keeps the data's room here.
pub fn gpu_scratch_copy_bytes(plan: &Plan, count: u64, dtype: DataType) -> u64 {
    let bytes = if plan.uses_packets() && plan.packets == PacketFormat::Ll16 {
        crate::exec::packet_area_bytes(plan, count, dtype)
    } else {
        plan.scratch.elems(count) * dtype.size() as u64
    };
    bytes.next_multiple_of(256)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::{Algorithm, BuildParams, build};

    #[test]
    fn every_builder_generates_for_every_rank() {
        for algo in Algorithm::ALL {
            for n in [1u32, 2, 3, 4, 8] {
                for in_place in [false, true] {
                    let mut p = BuildParams::new(n);
                    p.in_place = in_place;
                    p.blocks = 2;
                    p.pipeline = 2;
                    if algo == Algorithm::SendRecv {
                        p.pairs = (0..n).map(|r| (r, (r + 1) % n)).collect();
                    }
                    if !algo.supports(&p) {
                        continue;
                    }
                    let Ok(plan) = build(algo, &p) else { continue };
                    for r in 0..n {
                        let k = generate_cuda(&plan, r, DataType::F16, RedOp::Sum)
                            .unwrap_or_else(|e| panic!("{} n={n} r={r}: {e}", plan.name));
                        assert!(k.source.contains(ENTRY));
                        assert_eq!(k.blocks as usize, plan.ranks[r as usize].blocks.len());
                    }
                }
            }
        }
    }

    /// A one-shot all-reduce's ranks reduce in rank order: rank r's own input enters
    /// after the packets of ranks 0..r (plan::local_position), in both packet formats.
    #[test]
    fn one_shot_reduces_in_rank_order() {
        for algo in [Algorithm::AllReduce1pa, Algorithm::AllReduce1paLl63] {
            let plan = build(algo, &BuildParams::new(4)).unwrap();
            for r in 0..4u32 {
                let s = generate_cuda(&plan, r, DataType::F32, RedOp::Sum)
                    .unwrap()
                    .source;
                let at = if r == 0 {
                    String::new()
                } else {
                    format!(", {r}u")
                };
                let call = if algo == Algorithm::AllReduce1pa {
                    format!("reduce_packets<DT, OP, 3u>(c, d.p, l, 1u, p, f, d.n{at});")
                } else {
                    format!("reduce_packets63<DT, OP, 1u, 3u{at}>(c, d.p, l, p, d.n);")
                };
                assert!(s.contains(&call), "{} r{r}: {call}\n{s}", plan.name);
            }
        }
    }

    /// The LL63 forms emit the tile ops of plan_ll63.h with no LL16 flag, at the LL63
    /// launch bound; the ops on one chunk are ordered by CTA barriers (every tile op and
    /// the finalize split it by tiles), a copy that runs beside them is fused, and so are
    /// the unpacks of several senders.
    #[test]
    fn ll63_plans_emit_tile_ops() {
        for algo in [
            Algorithm::AllReduce1paLl63,
            Algorithm::AllReduce2paLl63,
            Algorithm::AllGatherLl63,
            Algorithm::ReduceScatterLl63,
            Algorithm::BroadcastLl63,
        ] {
            for in_place in [false, true] {
                let mut p = BuildParams::new(3);
                p.in_place = in_place;
                let plan = build(algo, &p).unwrap();
                assert!(plan.name.ends_with("-ll63"), "{}", plan.name);
                for r in 0..3 {
                    let k = generate_cuda(&plan, r, DataType::F16, RedOp::Sum).unwrap();
                    let s = &k.source;
                    let what = format!("{} r{r} in_place={in_place}:\n{s}", plan.name);
                    assert!(s.contains("__launch_bounds__(512, 1)"), "{what}");
                    assert!(
                        !s.contains("ll_flag") && !s.contains("put_packets("),
                        "{what}"
                    );
                    assert!(
                        !s.contains("reduce_packets<") && !s.contains("packets_of("),
                        "{what}"
                    );
                    // in place, the two-shot's unpacks overwrite the input chunks its
                    // first puts read; both runs walk the same chunks in the same order
                    // (one item space), so each element is stored by the warp and lane
                    // that loaded it: a CTA barrier, no replica sync
                    assert_eq!(s.matches("group_sync").count(), 0, "{what}");
                    if algo == Algorithm::AllReduce2paLl63 {
                        // the sum sent from the registers that stored it, avg's
                        // finalize in them; the own part entering in rank order
                        let at = if r == 0 {
                            String::new()
                        } else {
                            format!(", {r}u")
                        };
                        let call = format!(
                            "reduce_put_packets63<DT, OP, 1u, 2u, 2u{at}>(c, d.p, l, p, q, d.n, 3u);"
                        );
                        assert!(s.contains(&call), "{what}");
                        assert!(!s.contains("put_packets63_multi"), "{what}");
                    }
                    // a CTA barrier between this CTA's packet stores and its first
                    // packet reduce after them
                    let body = &s[s.find("if (b == 0u)").unwrap()..];
                    let ops: Vec<&str> = body.split("; }").collect();
                    let mut sent = false;
                    for op in ops {
                        let waits = op.contains("reduce_packets63<DT, OP, 1u")
                            || op.contains("reduce_put_packets63<DT, OP, 1u");
                        if waits && sent {
                            assert!(op.contains("__syncthreads();"), "{what}");
                        }
                        if op.contains("__syncthreads();") || op.contains("group_sync") {
                            sent = false;
                        }
                        sent |=
                            op.contains("put_packets63") || op.contains("reduce_put_packets63<");
                    }
                    assert!(s.contains("ll63_off(c)"), "{what}");
                    let sends = s.contains("put_packets63");
                    let reads = s.contains("reduce_packets63<DT, OP, ")
                        || s.contains("unpack_packets63_multi<");
                    assert!(sends || reads, "{what}");
                    if algo == Algorithm::AllGatherLl63 && !in_place {
                        // the own copy rides in the packets' loop
                        assert!(
                            s.contains("put_packets63_multi<2>(c, d, s.p, s.n, 2ull, o.p)"),
                            "{what}"
                        );
                    }
                    if algo == Algorithm::ReduceScatterLl63 || algo == Algorithm::AllReduce2paLl63 {
                        // the puts of the two peers' chunks in one op
                        assert!(
                            s.contains("put_packets63_scatter<2>(c, d, s, m, 2ull)"),
                            "{what}"
                        );
                    }
                    if algo == Algorithm::AllGatherLl63 || algo == Algorithm::AllReduce2paLl63 {
                        // the unpacks of both peers in one op, their tiles on every warp
                        assert!(
                            s.contains("unpack_packets63_multi<2>(c, d, p, m, 2ull)"),
                            "{what}"
                        );
                    }
                    if algo == Algorithm::AllReduce1paLl63 {
                        assert!(s.contains("finalize_avg63<DT>"), "{what}");
                    }
                }
            }
        }
        // the LL16 forms are unchanged by the LL63 path
        let plan = build(Algorithm::AllReduce1pa, &BuildParams::new(3)).unwrap();
        let s = generate_cuda(&plan, 0, DataType::F16, RedOp::Sum)
            .unwrap()
            .source;
        assert!(
            s.contains("__launch_bounds__(1024, 1)") && !s.contains("63"),
            "{s}"
        );
    }

    /// An LL63 copy holds every scratch chunk's tiles: chunk i at byte x starts at tile
    /// ⌊x / 4032⌋ + i and ends before the next chunk's first tile and the copy's end.
    #[test]
    fn ll63_copy_holds_every_chunk() {
        for algo in [
            Algorithm::AllReduce1paLl63,
            Algorithm::AllReduce2paLl63,
            Algorithm::AllGatherLl63,
        ] {
            for n in [2u32, 3, 4, 8] {
                let plan = build(algo, &BuildParams::new(n)).unwrap();
                for count in [1u64, 7, 2015, 2016, 2017, 100_000, 1 << 20] {
                    let es = 2u64;
                    let copy = gpu_ll63_copy_bytes(&plan, count, DataType::F16);
                    let spec = plan.scratch;
                    let total = spec.elems(count);
                    let chunks = spec.chunks as u64;
                    let start = |i: u64| i * total / chunks;
                    for i in 0..chunks {
                        let (s, e) = (start(i), start(i + 1));
                        let first = (s * es) / LL63_TILE_DATA + i;
                        let tiles = ((e - s) * es).div_ceil(LL63_TILE_DATA);
                        let next = if i + 1 < chunks {
                            (e * es) / LL63_TILE_DATA + i + 1
                        } else {
                            copy / LL63_TILE_PACKETS
                        };
                        assert!(
                            first + tiles <= next,
                            "{} n={n} count={count} chunk {i}",
                            plan.name
                        );
                    }
                }
            }
        }
        let ll16 = build(Algorithm::AllReduce1pa, &BuildParams::new(4)).unwrap();
        assert_eq!(gpu_ll63_copy_bytes(&ll16, 1 << 20, DataType::F16), 0);
    }

    #[test]
    fn ranks_with_different_block_counts_are_refused() {
        let mut plan = build(Algorithm::AllReduce2paHb, &BuildParams::new(2)).unwrap();
        plan.ranks[1]
            .blocks
            .push(crate::plan::Block { ops: vec![] });
        let e = generate_cuda(&plan, 0, DataType::F32, RedOp::Sum)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the same number"), "{e}");
    }

    #[test]
    fn semaphores_pair_up_and_waits_are_counted() {
        let plan = build(Algorithm::AllReduce2paHb, &BuildParams::new(4)).unwrap();
        let s = sems(&plan).unwrap();
        // Indices are dense per receiver.
        for r in 0..4u32 {
            let mut idx: Vec<u32> = s
                .index
                .iter()
                .filter(|(k, _)| k.1 == r)
                .map(|(_, i)| *i)
                .collect();
            idx.sort();
            assert_eq!(idx, (0..idx.len() as u32).collect::<Vec<_>>());
        }
    }

    #[test]
    fn handshakes_only_where_peer_user_buffers_are_touched() {
        let source = |a: Algorithm| {
            let plan = build(a, &BuildParams::new(4)).unwrap();
            generate_cuda(&plan, 1, DataType::F32, RedOp::Sum)
                .unwrap()
                .source
        };
        // All-gather puts into peers' outputs: start handshake.
        let ag = source(Algorithm::AllGatherAllPairs);
        assert!(ag.contains("start_sync(c, 4u, 0u);"), "{ag}");
        // 2PA-LL only writes packets into peers' scratch: no handshake at all.
        let ll = source(Algorithm::AllReduce2paLl);
        assert!(
            !ll.contains("start_sync(") && !ll.contains("end_sync("),
            "{ll}"
        );
        // One rank: nothing to sync with.
        let plan = build(Algorithm::AllGatherAllPairs, &BuildParams::new(1)).unwrap();
        let one = generate_cuda(&plan, 0, DataType::F32, RedOp::Sum)
            .unwrap()
            .source;
        assert!(!one.contains("start_sync("), "{one}");
    }

    #[test]
    fn which_plans_touch_peer_user_buffers() {
        for (a, touches) in [
            (Algorithm::AllReduce1pa, false),
            (Algorithm::AllReduce2paLl, false),
            (Algorithm::AllGatherLl, false),
            (Algorithm::ReduceScatterLl, false),
            (Algorithm::BroadcastLl, false),
            (Algorithm::AllGatherAllPairs, true),
            (Algorithm::ReduceScatterAllPairs, false),
            (Algorithm::AllReduce2paHb, true),
        ] {
            for in_place in [false, true] {
                let mut p = BuildParams::new(4);
                p.in_place = in_place;
                let plan = build(a, &p).unwrap();
                assert_eq!(
                    touches_peer_user_buffers(&plan),
                    touches,
                    "{} in place {in_place}",
                    a.full_name()
                );
            }
        }
    }

    #[test]
    fn ll_plans_need_no_handshake_and_one_way_senders_wait_for_progress() {
        let source = |a: Algorithm, r: u32| {
            let mut p = BuildParams::new(4);
            p.root = 1;
            let plan = build(a, &p).unwrap();
            generate_cuda(&plan, r, DataType::F16, RedOp::Sum)
                .unwrap()
                .source
        };
        for a in [
            Algorithm::AllGatherLl,
            Algorithm::ReduceScatterLl,
            Algorithm::BroadcastLl,
        ] {
            for r in 0..4 {
                let s = source(a, r);
                assert!(
                    !s.contains("start_sync(") && !s.contains("end_sync("),
                    "{s}"
                );
            }
        }
        // All-pairs: every rank publishes to every peer and waits for all of them at
        // once, before its first packet write (launch k + 1 may be another plan).
        for a in [Algorithm::AllGatherLl, Algorithm::ReduceScatterLl] {
            let s = source(a, 2);
            assert_eq!(calls(&s, "publish_done"), [0, 1, 3], "{s}");
            assert_eq!(calls(&s, "wait_done"), [0b1011], "{s}");
            assert!(s.find("wait_done<ORDERED>(") < s.find("put_packets"), "{s}");
            // they hear from every reader: the wait is left out of the entry for a
            // launch after the same plan
            assert!(s.contains("wait_done<ORDERED>(c, 11u, 0u);"), "{s}");
            let k = generate_cuda(
                &build(a, &BuildParams::new(4)).unwrap(),
                2,
                DataType::F16,
                RedOp::Sum,
            )
            .unwrap();
            assert!(k.ordered_entry, "{s}");
            assert!(
                s.contains("commhal_plan(const PlanArgs a) { plan_body<false>(a); }"),
                "{s}"
            );
            assert!(
                s.contains("commhal_plan_ordered(const PlanArgs a) { plan_body<true>(a); }"),
                "{s}"
            );
        }
        // Broadcast: the root waits once for its receivers, each publishes to it; it
        // never hears from them, so it waits even after the same plan.
        let root = source(Algorithm::BroadcastLl, 1);
        assert_eq!(calls(&root, "wait_done"), [0b1101], "{root}");
        assert!(root.contains("wait_done<ORDERED>(c, 13u, 13u);"), "{root}");
        assert!(!root.contains("publish_done("), "{root}");
        let recv = source(Algorithm::BroadcastLl, 3);
        assert_eq!(calls(&recv, "publish_done"), [1], "{recv}");
        assert!(!recv.contains("wait_done"), "{recv}");
        // the root's wait is the same in both, so neither has an ordered entry
        for s in [&root, &recv] {
            assert!(!s.contains(ORDERED_ENTRY), "{s}");
        }
    }

    /// The broadcast root loads its input once: its puts to every receiver and the
    /// copy into its own output are one put_packets_multi (one loop storing a packet to
    /// each peer and the bytes to the output), after the wait for the receivers.
    #[test]
    fn broadcast_root_puts_and_copies_in_one_pass() {
        let source = |n: u32, r: u32, in_place: bool| {
            let mut p = BuildParams::new(n);
            p.root = 1;
            p.in_place = in_place;
            let plan = build(Algorithm::BroadcastLl, &p).unwrap();
            generate_cuda(&plan, r, DataType::F16, RedOp::Sum)
                .unwrap()
                .source
        };
        let root = source(4, 1, false);
        let call = "u8* const d[3] = {d0.p, d1.p, d2.p}; \
                    const u32 f[3] = {ll_flag(c, 0u), ll_flag(c, 0u), ll_flag(c, 0u)}; \
                    put_packets_multi<3>(c, d, f, s.p, s.n, 2ull, o.p); }";
        assert_eq!(root.matches("put_packets_multi<").count(), 1, "{root}");
        assert!(root.contains(call), "{root}");
        assert!(
            !root.contains("put_packets(c,") && !root.contains("copy(c,"),
            "{root}"
        );
        assert!(root.contains("Span s = span_of(a.input[1], 2ull, 0ull, a.count);"));
        assert!(root.contains("Span o = span_of(a.output[1], 2ull, 0ull, a.count);"));
        // the peers from the next rank on (rank 1: 2, 3, 0)
        for (k, p) in [2, 3, 0].iter().enumerate() {
            let d = format!("Span d{k} = packets_of((a.area[{p}] + c.scr), 2ull, 0ull, 0ull");
            assert!(root.contains(&d), "{d}: {root}");
        }
        assert!(root.find("wait_done<ORDERED>(c, 13u, 13u);") < root.find("put_packets_multi<"));
        // The receivers only unpack.
        let recv = source(4, 2, false);
        assert!(!recv.contains("put_packets") && recv.contains("reduce_packets<"));
        // In place: the puts alone, still one load for every peer.
        let root = source(4, 1, true);
        assert!(root.contains("put_packets_multi<3>(c, d, f, s.p, s.n, 2ull, nullptr);"));
        assert!(
            !root.contains("put_packets(c,") && !root.contains("copy(c,"),
            "{root}"
        );
        // Two ranks: one peer and the own output.
        let root = source(2, 1, false);
        assert!(root.contains("put_packets_multi<1>(c, d, f, s.p, s.n, 2ull, o.p);"));
        assert!(!root.contains("copy(c,"), "{root}");
        // Two ranks in place: a single put has nothing to fuse with.
        let root = source(2, 1, true);
        assert!(!root.contains("put_packets_multi<") && root.contains("put_packets(c,"));
    }

    /// Every packet plan whose blocks put one chunk to several peers (and copy it)
    /// fuses them; where each peer gets its own chunk, equally long chunks fuse into
    /// one scatter.
    #[test]
    fn packet_puts_of_one_source_fuse_in_every_plan() {
        let body = |a: Algorithm, n: u32, in_place: bool| {
            let mut p = BuildParams::new(n);
            p.in_place = in_place;
            let plan = build(a, &p).unwrap();
            let s = generate_cuda(&plan, 1, DataType::F32, RedOp::Sum)
                .unwrap()
                .source;
            s[s.find("if (b == 0u)").unwrap()..].to_string()
        };
        // All-gather: the input to every peer and into the own output chunk.
        let ag = body(Algorithm::AllGatherLl, 4, false);
        assert!(ag.contains("put_packets_multi<3>(c, d, f, s.p, s.n, 4ull, o.p);"));
        assert!(ag.contains("Span o = span_of(a.output[1], 4ull, a.count, (a.count * 2ull));"));
        assert!(
            !ag.contains("copy(c,") && !ag.contains("put_packets(c,"),
            "{ag}"
        );
        let ag = body(Algorithm::AllGatherLl, 4, true);
        assert!(ag.contains("put_packets_multi<3>(c, d, f, s.p, s.n, 4ull, nullptr);"));
        // One-shot all-reduce: the input to every peer.
        let one = body(Algorithm::AllReduce1pa, 4, false);
        assert!(one.contains("put_packets_multi<3>(c, d, f, s.p, s.n, 4ull, nullptr);"));
        // Two-shot: the first puts send each peer its own chunk, a quarter of the
        // count, whose lengths differ for some counts (no scatter fusion); the second
        // send the reduced chunk to all, after one CTA barrier for the lot (the separate
        // puts each had one: the reduce wrote what they read).
        let two = body(Algorithm::AllReduce2paLl, 4, false);
        assert_eq!(two.matches("put_packets(c,").count(), 3, "{two}");
        assert_eq!(two.matches("put_packets_multi<3>(").count(), 1, "{two}");
        let after = &two[two.find("finalize_avg").unwrap()..two.find("put_packets_multi").unwrap()];
        assert_eq!(after.matches("__syncthreads();").count(), 1, "{two}");
        // Reduce-scatter: a chunk of count elements per peer, one scatter loop storing
        // to the peers from the next rank on.
        let rs = body(Algorithm::ReduceScatterLl, 4, false);
        assert!(
            !rs.contains("put_packets(c,")
                && rs.contains("put_packets_scatter<3>(c, d, f, s, s0.n, 4ull);"),
            "{rs}"
        );
        let first = rs.find("Span d0 = ").unwrap();
        assert!(
            rs[first..].starts_with("Span d0 = packets_of((a.area[2] +"),
            "{rs}"
        );
    }

    /// Rank 0 of a 3-rank plan runs `ops` in one block (ranks 1 and 2: empty blocks);
    /// its block's code.
    fn rank0_block(ops: Vec<Op>, in_place: bool, input_chunks: u32, output: (u32, u32)) -> String {
        let mut plan = Plan::new(Collective::AllGather, "t", 3, in_place);
        plan.input.chunks = input_chunks;
        plan.output.factor = output.0;
        plan.output.chunks = output.1;
        plan.scratch = crate::plan::BufferSpec {
            factor: 1,
            chunks: 2,
        };
        plan.scratch_rotation = 2;
        plan.ranks[0].blocks.push(crate::plan::Block { ops });
        for r in 1..3 {
            plan.ranks[r]
                .blocks
                .push(crate::plan::Block { ops: vec![] });
        }
        let s = generate_cuda(&plan, 0, DataType::F32, RedOp::Sum)
            .unwrap()
            .source;
        s[s.find("if (b == 0u)").unwrap()..].to_string()
    }

    #[test]
    fn packet_runs_fuse_only_what_the_separate_ops_would_do_alike() {
        let c = |buf, i| ChunkRef::new(buf, i);
        let (inp, out, scr) = (BufferKind::Input, BufferKind::Output, BufferKind::Scratch);
        let pp = |peer, src, dst| Op::PutPackets {
            peer,
            channel: ChannelKind::Memory,
            tag: 0,
            src,
            dst,
        };
        let copy = |src, dst| Op::Copy { src, dst };
        // Another op between the puts ends the run: nothing fuses.
        let b = rank0_block(
            vec![
                pp(1, c(inp, 0), c(scr, 0)),
                copy(c(inp, 1), c(out, 1)),
                pp(2, c(inp, 0), c(scr, 0)),
            ],
            false,
            2,
            (1, 2),
        );
        assert!(!b.contains("put_packets_multi"), "{b}");
        assert_eq!(b.matches("put_packets(c,").count(), 2, "{b}");
        // Puts of another source, or into a packet area already written, end it too.
        let b = rank0_block(
            vec![
                pp(1, c(inp, 0), c(scr, 0)),
                pp(2, c(inp, 0), c(scr, 0)),
                pp(2, c(inp, 0), c(scr, 0)),
                pp(1, c(inp, 1), c(scr, 1)),
            ],
            false,
            2,
            (1, 2),
        );
        assert_eq!(b.matches("put_packets_multi<2>(").count(), 1, "{b}");
        assert_eq!(b.matches("put_packets(c,").count(), 2, "{b}");
        // A copy stays apart: in place (its destination aliases its source), of another
        // length (half the count), or with bounds that round down unlike the source's
        // (count / 2 elements against count - count / 2 for an odd count).
        for (ops, in_place, chunks, frac) in [
            (
                vec![pp(1, c(inp, 0), c(scr, 0)), copy(c(inp, 0), c(out, 0))],
                true,
                1,
                (1, 1),
            ),
            (
                vec![pp(1, c(inp, 0), c(scr, 0)), copy(c(inp, 0), c(out, 0))],
                false,
                1,
                (1, 2),
            ),
            (
                vec![pp(1, c(inp, 1), c(scr, 0)), copy(c(inp, 1), c(out, 0))],
                false,
                2,
                (1, 2),
            ),
        ] {
            let b = rank0_block(ops, in_place, chunks, frac);
            assert!(
                !b.contains("put_packets_multi") && b.contains("copy(c,"),
                "{b}"
            );
        }
        // Bounds a whole count apart round alike: input chunk 0 of 2 into output chunk 2
        // of 4 (factor 2), [0, count / 2) into [count, 3 count / 2). A copy first fuses
        // as well.
        let b = rank0_block(
            vec![
                copy(c(inp, 0), c(out, 2)),
                pp(1, c(inp, 0), c(scr, 0)),
                pp(2, c(inp, 0), c(scr, 0)),
            ],
            false,
            2,
            (2, 4),
        );
        assert!(
            b.contains("put_packets_multi<2>(c, d, f, s.p, s.n, 4ull, o.p);"),
            "{b}"
        );
        assert!(
            !b.contains("copy(c,") && !b.contains("put_packets(c,"),
            "{b}"
        );
        // The done-word wait comes before it, as before the first put.
        assert!(
            b.find("wait_done<ORDERED>(") < b.find("put_packets_multi"),
            "{b}"
        );
    }

    #[test]
    fn unmatched_signal_is_refused() {
        let mut plan = build(Algorithm::AllReduce2paHb, &BuildParams::new(2)).unwrap();
        plan.ranks[0].blocks[0].ops.push(Op::Signal {
            peer: 1,
            channel: ChannelKind::Memory,
            tag: 77,
        });
        let e = generate_cuda(&plan, 0, DataType::F32, RedOp::Sum).unwrap_err();
        assert!(e.to_string().contains("signals"), "{e}");
    }

    #[test]
    fn switch_ops_are_refused_with_a_pointer_to_nvls() {
        let mut plan = Plan::new(Collective::AllReduce, "sw", 2, false);
        for r in 0..2 {
            plan.ranks[r].blocks.push(crate::plan::Block {
                ops: vec![Op::SwitchReduce {
                    src: ChunkRef::new(BufferKind::Input, 0),
                    dst: ChunkRef::new(BufferKind::Output, 0),
                }],
            });
        }
        let e = generate_cuda(&plan, 0, DataType::F32, RedOp::Sum).unwrap_err();
        assert!(e.to_string().contains("cuda-nvls"), "{e}");
    }

    #[test]
    fn in_place_aliases_split_alike_need_only_a_cta_barrier() {
        // 1PA in place: the packets read the input chunk that the reduction then
        // writes as output; both split it alike, so no replica sync.
        let mut p = BuildParams::new(2);
        p.in_place = true;
        let plan = build(Algorithm::AllReduce1pa, &p).unwrap();
        let k = generate_cuda(&plan, 0, DataType::F16, RedOp::Sum).unwrap();
        let body = &k.source[k.source.find("if (b == 0u)").unwrap()..];
        assert!(!body.contains("group_sync"), "{body}");
        let put = body.find("put_packets(").unwrap();
        let bar = body.find("__syncthreads();").expect("a CTA barrier");
        let red = body.find("reduce_packets<").unwrap();
        assert!(put < bar && bar < red, "{body}");
        // Out of place they touch different memory: nothing between them. (The
        // average's finalize, which rereads the output per element, gets a CTA barrier
        // after the reduction that wrote it per packet.)
        let plan = build(Algorithm::AllReduce1pa, &BuildParams::new(2)).unwrap();
        let k = generate_cuda(&plan, 0, DataType::F16, RedOp::Sum).unwrap();
        let body = &k.source[k.source.find("if (b == 0u)").unwrap()..];
        let (put, red) = (
            body.find("put_packets(").unwrap(),
            body.find("reduce_packets<").unwrap(),
        );
        assert!(!body[put..red].contains("__syncthreads"), "{body}");
        assert!(!body.contains("group_sync(c)"), "{body}");
        let bar = body
            .find("__syncthreads();")
            .expect("a CTA barrier before the finalize");
        assert!(
            red < bar && bar < body.find("finalize_avg").unwrap(),
            "{body}"
        );
    }

    /// The LL16 all-gather (and the two-shot all-reduce's second half) unpacks every
    /// sender in one op, each sender's packets with its own flag.
    #[test]
    fn ll16_unpacks_of_several_senders_fuse() {
        for (algo, n) in [
            (Algorithm::AllGatherLl, 3u32),
            (Algorithm::AllReduce2paLl, 4),
        ] {
            let plan = build(algo, &BuildParams::new(n)).unwrap();
            for r in 0..n {
                let s = generate_cuda(&plan, r, DataType::F16, RedOp::Sum)
                    .unwrap()
                    .source;
                let call = format!("unpack_packets_multi<{}>(c, d, p, f, m, 2ull);", n - 1);
                assert_eq!(s.matches(&call).count(), 1, "{s}");
                assert!(s.contains("const u32 f["), "{s}");
            }
        }
    }

    #[test]
    fn touching_ranges_of_aliased_user_memory_need_no_replica_sync() {
        // Reduce-scatter in place: the packets read input chunk p != me, the reduction
        // writes the output, which is input chunk me. Neighbouring chunks share no
        // element (both cut at whole multiples of count), so no replica sync.
        for n in [2, 4, 8] {
            let mut p = BuildParams::new(n);
            p.in_place = true;
            for algo in [Algorithm::ReduceScatterLl, Algorithm::AllGatherLl] {
                let plan = build(algo, &p).unwrap();
                for r in 0..n {
                    let k = generate_cuda(&plan, r, DataType::F16, RedOp::Sum).unwrap();
                    assert!(!k.source.contains("group_sync(c)"), "{}", k.source);
                }
            }
        }
        // Two ops on the same range of user memory still get a CTA barrier, and a
        // partial overlap a replica sync (the next test).
    }

    /// Two fused LL63 runs over the same list of chunks map each element alike: a CTA
    /// barrier between them; runs over other lists (another order included) and any
    /// other split: a replica sync.
    #[test]
    fn fused_runs_of_one_item_space_need_only_a_cta_barrier() {
        let e = |split| Extent {
            mem: 0,
            lo: (1, 4),
            hi: (2, 4),
            exact: (BufferKind::Input, 1, 1, 0),
            looped: false,
            split,
        };
        let c = |a, b| Gen::conflicts(&e(a), &e(b));
        assert_eq!(c(Split::Items(0), Split::Items(0)), Hazard::ThisCta);
        assert_eq!(c(Split::Items(0), Split::Items(1)), Hazard::Replicas);
        assert_eq!(c(Split::Items(0), Split::Tiles), Hazard::Replicas);
        assert_eq!(c(Split::Tiles, Split::Tiles), Hazard::ThisCta);
    }

    #[test]
    fn replica_sync_between_differently_split_ops() {
        // Reduce into output chunk 1 of 4, then put the span 0..4: the put's share
        // differs, so a group_sync must separate them.
        let mut plan = Plan::new(Collective::AllReduce, "t", 2, false);
        plan.output.chunks = 4;
        plan.input.chunks = 4;
        for r in 0..2u32 {
            plan.ranks[r as usize].blocks.push(crate::plan::Block {
                ops: vec![
                    Op::Reduce {
                        srcs: vec![ChunkRef::new(BufferKind::Input, 1)],
                        dst: ChunkRef::new(BufferKind::Output, 1),
                    },
                    Op::Put {
                        peer: 1 - r,
                        channel: ChannelKind::Memory,
                        tag: 0,
                        src: ChunkRef::span(BufferKind::Output, 0, 4),
                        dst: ChunkRef::span(BufferKind::Output, 0, 4),
                    },
                    Op::Reduce {
                        srcs: vec![ChunkRef::new(BufferKind::Input, 2)],
                        dst: ChunkRef::new(BufferKind::Output, 2),
                    },
                ],
            });
        }
        let k = generate_cuda(&plan, 0, DataType::F32, RedOp::Sum).unwrap();
        let body = &k.source[k.source.find("if (b == 0u)").unwrap()..];
        let red = body.find("reduce<").unwrap();
        let sync = body.find("group_sync").expect("a replica sync");
        let put = body.find("copy(").unwrap();
        assert!(red < sync && sync < put, "{body}");
        // The second reduce writes chunk 2 that the put read: another sync.
        assert_eq!(body.matches("group_sync").count(), 2, "{body}");
    }

    #[test]
    fn far_user_buffers_names_the_plans_whose_ports_reach_user_buffers() {
        let mut p = BuildParams::new(4);
        p.ranks_per_node = 2;
        let plan = |a| build(a, &p).unwrap();
        // the hierarchical plans cross the nodes into scratch only
        for a in [
            Algorithm::AllReduce2phHb,
            Algorithm::AllGather2ph,
            Algorithm::ReduceScatter2ph,
        ] {
            assert!(!far_user_buffers(&plan(a)), "{a:?}");
        }
        // all pairs puts into the far ranks' outputs
        assert!(far_user_buffers(&plan(Algorithm::AllGatherAllPairs)));
        // one node: no port op at all
        let one = build(Algorithm::AllGatherAllPairs, &BuildParams::new(4)).unwrap();
        assert!(!far_user_buffers(&one));
    }

    #[test]
    fn far_peers_go_through_the_proxy() {
        // 4 ranks on two virtual nodes of 2: rank 1 reaches its counterpart 3 over a
        // port, rank 2 its counterpart 0.
        let mut p = BuildParams::new(4);
        p.ranks_per_node = 2;
        let plan = build(Algorithm::AllReduce2phHb, &p).unwrap();
        assert_eq!(far_peers(&plan, 1), 0b1000);
        assert_eq!(far_peers(&plan, 2), 0b0001);
        let k = generate_cuda(&plan, 1, DataType::F16, RedOp::Sum).unwrap();
        assert_eq!(k.far, 0b1000);
        let src = &k.source;
        // each put to rank 3 is followed by its signal: one call, one proxy write
        assert!(src.contains("far_put_signal(c, 3u"), "{src}");
        assert!(
            !src.contains("far_put(c, ") && !src.contains("far_signal(c, "),
            "{src}"
        );
        assert!(src.contains("far_wait(c, "), "{src}");
        // no SM store or load names the far rank's buffers but through the proxy
        for line in src.lines().filter(|l| l.contains("[3]")) {
            assert!(line.contains("far_put_signal(c, 3u"), "{line}");
        }
        // rank 3 is reached through its scratch only: no handshake with it
        assert!(!src.contains("far_handshake(") && !src.contains("_sync(c, 4u, 8u)"));
        assert!(!k.uses_barrier);
        // One node: no port op, no far mask.
        let one = build(Algorithm::AllReduce2phHb, &BuildParams::new(4)).unwrap();
        assert_eq!(
            generate_cuda(&one, 1, DataType::F16, RedOp::Sum)
                .unwrap()
                .far,
            0
        );
    }

    /// The hierarchical plans reach far peers through their scratch only: no kernel
    /// handshakes through the proxy (2, 3 and 4 nodes). A plan that writes far peers'
    /// outputs still handshakes with them.
    #[test]
    fn far_handshakes_only_where_far_user_buffers_are_touched() {
        let plan = |a: Algorithm, n: u32, l: u32, in_place: bool| {
            let mut p = BuildParams::new(n);
            p.ranks_per_node = l;
            p.in_place = in_place;
            build(a, &p).unwrap()
        };
        for a in [
            Algorithm::AllReduce2phHb,
            Algorithm::AllGather2ph,
            Algorithm::ReduceScatter2ph,
        ] {
            for (n, l) in [(4, 2), (6, 2), (8, 2), (8, 4), (4, 1)] {
                for in_place in [false, true] {
                    let plan = plan(a, n, l, in_place);
                    for r in 0..n {
                        let k = generate_cuda(&plan, r, DataType::F16, RedOp::Sum).unwrap();
                        let far_sync = format!("_sync(c, {n}u, {}u)", k.far);
                        let s = &k.source;
                        assert!(k.far != 0, "{a:?} n={n} l={l}: rank {r}");
                        assert!(
                            !s.contains("far_handshake(") && !s.contains(&far_sync),
                            "{s}"
                        );
                        assert!(!k.uses_barrier, "{a:?} n={n} l={l}: rank {r}");
                    }
                }
            }
        }
        let k = generate_cuda(
            &plan(Algorithm::AllGatherAllPairs, 4, 2, false),
            0,
            DataType::F16,
            RedOp::Sum,
        )
        .unwrap();
        assert!(k.source.contains("start_sync(c, 4u, 12u);"), "{}", k.source);
        assert!(k.uses_barrier);
    }

    /// The ranks p of the lines `f(c, pu...` of `source`, sorted.
    fn calls(source: &str, f: &str) -> Vec<u32> {
        let mut v: Vec<u32> = source
            .lines()
            .filter_map(|l| {
                let l = l.trim().strip_prefix(f)?;
                l.strip_prefix("<ORDERED>")
                    .unwrap_or(l)
                    .strip_prefix("(c, ")
            })
            .filter_map(|l| l.split('u').next()?.parse().ok())
            .collect();
        v.sort_unstable();
        v
    }

    /// Hierarchical plans on 2 nodes of 2: each rank publishes its progress to its
    /// counterpart (the rank that puts into its scratch) once, from the top of the
    /// kernel through the proxy (its kernel has the ports table), and waits for the
    /// counterpart's before its first far put in each block. Near peers: nothing where
    /// the near start handshake orders them (2ph-hb, allgather 2ph); reducescatter 2ph
    /// has none, so its near counterpart publishes to it directly.
    #[test]
    fn far_scratch_writers_wait_for_their_readers_progress() {
        let mut p = BuildParams::new(4);
        p.ranks_per_node = 2;
        for a in [
            Algorithm::AllReduce2phHb,
            Algorithm::AllGather2ph,
            Algorithm::ReduceScatter2ph,
        ] {
            let plan = build(a, &p).unwrap();
            assert_eq!(
                plan.far_scratch_writer_pairs(),
                [(0, 2), (1, 3), (2, 0), (3, 1)]
            );
            for r in 0..4 {
                let k = generate_cuda(&plan, r, DataType::F16, RedOp::Sum).unwrap();
                let s = &k.source;
                let far = (r + 2) % 4;
                // The unordered entry publishes before any block waits (its writer may
                // wait for this launch's value before the put this rank waits for); the
                // ordered one not at all (no far writer waits there).
                let first = s.find("if (b == ").unwrap();
                let start = calls(&s[..first], "if (!ORDERED) far_publish_done");
                assert_eq!(start, vec![far], "{a:?}: {s}");
                assert_eq!(s.matches("far_publish_done(").count(), 1, "{a:?}: {s}");
                assert!(!s[..first].contains("far_wait"), "{s}");
                assert_ne!(k.far & (1 << far), 0, "{a:?}: no ports table");
                let blocks = s.split("if (b == ").skip(1);
                let mut waits = 0;
                for blk in blocks.filter(|b| b.contains("far_put")) {
                    assert_eq!(calls(blk, "far_wait_done"), [far], "{a:?}: {blk}");
                    assert!(
                        blk.find("far_wait_done<ORDERED>(") < blk.find("far_put"),
                        "{blk}"
                    );
                    waits += 1;
                }
                assert!(waits > 0, "{a:?}: {s}");
                if a == Algorithm::ReduceScatter2ph {
                    assert_eq!(calls(s, "publish_done"), [r ^ 1], "{s}");
                    assert_eq!(calls(s, "wait_done"), [1 << (r ^ 1)], "{s}");
                } else {
                    assert!(
                        calls(s, "publish_done").is_empty() && calls(s, "wait_done").is_empty()
                    );
                }
            }
        }
        // One node: no far pair.
        let one = build(Algorithm::AllReduce2phHb, &BuildParams::new(4)).unwrap();
        assert!(one.far_scratch_writer_pairs().is_empty());
        // A ring's far pairs handshake at the start already: no done word.
        let ring = build(Algorithm::AllReduceRing, &p).unwrap();
        assert!(!ring.far_scratch_writer_pairs().is_empty());
        for r in 0..4 {
            let s = generate_cuda(&ring, r, DataType::F16, RedOp::Sum)
                .unwrap()
                .source;
            assert!(!s.contains("far_publish_done(") && !s.contains("far_wait_done<"));
        }
    }

    /// The peers p of `Span d = chunk((a.area[p] ...` / `packets(...` (or their `_of`
    /// forms), and of `Span d0 = ...`, `Span d1 = ...` (put_packets_multi): writes into
    /// p's scratch (bit p).
    fn scratch_write_peers(line: &str) -> u32 {
        let mut mask = 0;
        for part in line.split("Span d").skip(1) {
            let rest = part.trim_start_matches(|c: char| c.is_ascii_digit());
            let peer = ["chunk", "packets", "span_of", "packets_of"]
                .iter()
                .find_map(|f| rest.strip_prefix(&format!(" = {f}((a.area[")))
                .and_then(|t| t.split(']').next()?.parse::<u32>().ok());
            if let Some(p) = peer {
                mask |= 1 << p;
            }
        }
        mask
    }

    /// The ranks `source`'s start handshake reaches (bit p): all with `start_sync`,
    /// else the near ones of `handshake(c, 0u, ..)` and those of `far_handshake(c, 0u, ..)`.
    fn start_handshake_mask(source: &str, far: u32) -> u32 {
        if source.contains("start_sync(") {
            return u32::MAX;
        }
        let near = if source.contains("handshake(c, 0u") {
            !far
        } else {
            0
        };
        let far_hs = source
            .split("far_handshake(c, 0u, ")
            .nth(1)
            .and_then(|t| t.split('u').next()?.parse::<u32>().ok())
            .unwrap_or(0);
        near | far_hs
    }

    /// Every generated kernel of every plan, on one node and across nodes: each write
    /// into a peer's scratch comes after the start handshake with that peer or a wait
    /// for its done word in the block; each such wait has the reader publishing to the
    /// writer with the right transport (a store for a near writer, the proxy for a far
    /// one), and each publication a writer that waits for it.
    #[test]
    fn scratch_writes_wait_for_the_readers_published_progress() {
        let mut checked = 0;
        for algo in Algorithm::ALL {
            for (n, l) in [(4u32, 4u32), (8, 8), (4, 2), (8, 4)] {
                let mut p = BuildParams::new(n);
                p.ranks_per_node = l;
                p.root = 1;
                if algo == Algorithm::SendRecv {
                    p.pairs = (0..n).map(|r| (r, (r + 1) % n)).collect();
                }
                let Ok(plan) = build(algo, &p) else { continue };
                let kernels: Vec<_> = (0..n)
                    .map(|r| generate_cuda(&plan, r, DataType::F16, RedOp::Sum))
                    .collect();
                if kernels.iter().any(Result::is_err) {
                    continue; // packets or reads across nodes
                }
                let mut waits = BTreeSet::new(); // (writer, reader, far)
                let mut publishes = BTreeSet::new();
                for (r, k) in kernels.iter().map(|k| k.as_ref().unwrap()).enumerate() {
                    let r = r as u32;
                    let s = &k.source;
                    let hs = start_handshake_mask(s, k.far);
                    for w in calls(s, "publish_done") {
                        publishes.insert((w, r, false));
                    }
                    // each far publish at the start of the unordered entry only
                    let start = calls(s, "if (!ORDERED) far_publish_done");
                    assert_eq!(start.len(), s.matches("far_publish_done(").count(), "{s}");
                    for w in start {
                        publishes.insert((w, r, true));
                    }
                    for blk in s.split("if (b == ").skip(1) {
                        let (mut near, mut far) = (0u32, 0u32);
                        for line in blk.lines().map(str::trim) {
                            near |= calls(line, "wait_done").first().copied().unwrap_or(0);
                            far |= calls(line, "far_wait_done")
                                .iter()
                                .map(|p| 1 << p)
                                .sum::<u32>();
                            let q = scratch_write_peers(line) & !(1 << r);
                            let what = format!("{} {n}/{l} r{r} -> {q:#b}", plan.name);
                            assert!((near | far | hs) & q == q, "{what}: {blk}");
                        }
                        let name = |m: u32, f| {
                            (0..n)
                                .filter(move |q| m & (1 << q) != 0)
                                .map(move |q| (r, q, f))
                        };
                        waits.extend(name(near, false).chain(name(far, true)));
                    }
                    checked += 1;
                }
                assert_eq!(waits, publishes, "{} {n}/{l}", plan.name);
            }
        }
        assert!(checked > 300, "{checked} kernels");
    }

    /// The small packet plans on one node pay a store per peer at the start (CTA 0) and
    /// one wait per block (a local load per reader, side by side) before the first
    /// packet write; plans whose start handshake reaches every peer pay nothing.
    #[test]
    fn near_done_words_cost_a_store_per_peer_and_one_wait_per_block() {
        for a in [
            Algorithm::AllReduce1pa,
            Algorithm::AllReduce2paLl,
            Algorithm::ReduceScatter2ph,
        ] {
            let plan = build(a, &BuildParams::new(8)).unwrap();
            for r in 0..8u32 {
                let s = generate_cuda(&plan, r, DataType::F16, RedOp::Sum)
                    .unwrap()
                    .source;
                let peers: Vec<u32> = (0..8).filter(|&q| q != r).collect();
                assert_eq!(calls(&s, "publish_done"), peers, "{a:?}: {s}");
                assert!(!s.contains("far_publish_done(") && !s.contains("far_wait_done<"));
                for blk in s.split("if (b == ").skip(1) {
                    let writes: u32 =
                        blk.lines().map(scratch_write_peers).fold(0, |x, y| x | y) & !(1 << r);
                    let w = calls(blk, "wait_done");
                    assert_eq!(
                        w,
                        if writes == 0 { vec![] } else { vec![writes] },
                        "{a:?}: {blk}"
                    );
                }
            }
        }
        for a in [
            Algorithm::AllReduce2paHb,
            Algorithm::AllReduce2phHb,
            Algorithm::AllReduceRing,
        ] {
            let plan = build(a, &BuildParams::new(8)).unwrap();
            for r in 0..8 {
                let s = generate_cuda(&plan, r, DataType::F16, RedOp::Sum)
                    .unwrap()
                    .source;
                assert!(
                    s.contains("start_sync(") && !s.contains("_done("),
                    "{a:?}: {s}"
                );
            }
        }
    }

    #[test]
    fn packets_and_reads_across_nodes_are_refused() {
        let mut p = BuildParams::new(4);
        p.ranks_per_node = 2;
        let plan = build(Algorithm::AllGatherLl, &p).unwrap();
        let e = generate_cuda(&plan, 0, DataType::F16, RedOp::Sum)
            .unwrap_err()
            .to_string();
        assert!(e.contains("another node") && e.contains("HB plan"), "{e}");
    }

    /// Every algorithm's plan that builds for 4 ranks on two virtual nodes of 2.
    fn two_node_plans() -> Vec<Plan> {
        Algorithm::ALL
            .into_iter()
            .filter_map(|algo| {
                let mut p = BuildParams::new(4);
                p.ranks_per_node = 2;
                if algo == Algorithm::SendRecv {
                    p.pairs = (0..4).map(|r| (r, (r + 1) % 4)).collect();
                }
                algo.supports(&p).then(|| build(algo, &p).ok()).flatten()
            })
            .collect()
    }

    #[test]
    fn which_plans_run_across_two_nodes() {
        // Every algorithm that builds for 2 x 2 either generates (HB: puts and signals
        // only) or is refused with the packets / reads message.
        let mut ok = Vec::new();
        for plan in two_node_plans() {
            match (0..4)
                .map(|r| generate_cuda(&plan, r, DataType::F32, RedOp::Sum))
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(_) => ok.push(plan.name.clone()),
                Err(e) => assert!(e.to_string().contains("another node"), "{}: {e}", plan.name),
            }
        }
        assert!(ok.iter().any(|n| n.contains("2ph")), "{ok:?}");
    }

    /// The hierarchical plans' far puts land in scratch that only the owner reads: both
    /// ends address it through `far_scr` (the inbox where the launch uses it); the
    /// scratch of the node's peers stays in the plan area.
    #[test]
    fn far_landed_scratch_goes_through_far_scr() {
        for (n, rpn) in [(2, 1), (4, 2)] {
            let mut p = BuildParams::new(n);
            p.ranks_per_node = rpn;
            for a in [
                Algorithm::AllReduce2phHb,
                Algorithm::AllGather2ph,
                Algorithm::ReduceScatter2ph,
            ] {
                let plan = build(a, &p).unwrap();
                let landed = inbox_chunks(&plan).unwrap_or_else(|| panic!("{a:?} {n}/{rpn}"));
                for r in 0..n {
                    let k = generate_cuda(&plan, r, DataType::F16, RedOp::Sum).unwrap();
                    let far = (r + rpn) % n;
                    assert!(k.inbox && !landed[r as usize].is_empty(), "{a:?}");
                    let src = &k.source;
                    let put = src.lines().find(|l| l.contains("far_put")).unwrap();
                    assert!(put.contains(&format!("far_scr(c, {far}u)")), "{put}");
                    assert!(src.contains(&format!("far_scr(c, {r}u)")), "{src}");
                    // nothing else names a far rank's scratch, nor the inbox of a near one
                    for l in src.lines().filter(|l| l.contains("far_scr(")) {
                        assert!(!l.contains(&format!("a.area[{far}]")), "{l}");
                        for q in (0..n).filter(|&q| q != r && q != far) {
                            assert!(!l.contains(&format!("far_scr(c, {q}u)")), "{l}");
                        }
                    }
                }
            }
        }
        // An access that straddles a landing's edge, or a peer of the node reading a
        // landed chunk, keeps the plan out of the inboxes.
        let mut p = BuildParams::new(2);
        p.ranks_per_node = 1;
        let plan = build(Algorithm::AllGather2ph, &p).unwrap();
        let landed = inbox_chunks(&plan).unwrap();
        let (s, e) = landed[0][0];
        let scratch = |index, count| ChunkRef {
            buf: BufferKind::Scratch,
            index,
            count,
            step: 0,
        };
        let out = ChunkRef::new(BufferKind::Output, 0);
        let mut straddle = plan.clone();
        straddle.ranks[0].blocks[0].ops.push(Op::Copy {
            src: scratch(s, e - s + 1),
            dst: out,
        });
        assert!(inbox_chunks(&straddle).is_none());
        let mut got = plan.clone();
        got.ranks[1].blocks[0].ops.push(Op::Get {
            peer: 0,
            channel: ChannelKind::Memory,
            tag: 0,
            src: scratch(s, 1),
            dst: out,
        });
        assert!(inbox_chunks(&got).is_none());
        // one node: no far puts; packet plans: never
        let one = build(Algorithm::AllReduce2phHb, &BuildParams::new(4)).unwrap();
        assert!(inbox_chunks(&one).is_none());
        let ll = build(Algorithm::AllReduce1pa, &BuildParams::new(4)).unwrap();
        assert!(inbox_chunks(&ll).is_none());
    }

    #[test]
    fn far_puts_are_flushed_before_their_sources_change() {
        let mut p = BuildParams::new(4);
        p.ranks_per_node = 2;
        // 2PH-HB, rank 1: put its reduced chunk to rank 3, signal, wait for rank 3's,
        // then reduce into that same chunk: the flush comes after the wait (the put
        // overlaps it) and before the reduce.
        let plan = build(Algorithm::AllReduce2phHb, &p).unwrap();
        let src = generate_cuda(&plan, 1, DataType::F16, RedOp::Sum)
            .unwrap()
            .source;
        let at = |s: &str| src.find(s).unwrap_or_else(|| panic!("no {s} in\n{src}"));
        let put = at("far_put_signal(c, 3u");
        let wait = at("far_wait(c, ");
        let flush = at("far_flush(c, 8u);");
        let reduce = src[put..].find("reduce<").map(|i| i + put).unwrap();
        assert!(put < wait && wait < flush && flush < reduce, "{src}");
        // Every plan across two nodes: no block ends with a put unflushed, and no
        // local write follows a put before a flush.
        for plan in two_node_plans() {
            for r in 0..4 {
                let Ok(k) = generate_cuda(&plan, r, DataType::F32, RedOp::Sum) else {
                    continue;
                };
                let mut pending = false;
                for line in k.source.lines().map(str::trim) {
                    if line.contains("far_put") {
                        pending = true;
                    } else if line.starts_with("far_flush(") {
                        pending = false;
                    } else if pending
                        && (line.contains("reduce<")
                            || line.contains("copy(c, d.p")
                            || line.starts_with("signal(")
                            || line.starts_with("barrier(")
                            || line == "}")
                    {
                        panic!(
                            "{} r={r}: `{line}` while a far put is unflushed:\n{}",
                            plan.name, k.source
                        );
                    }
                }
            }
        }
    }
}
