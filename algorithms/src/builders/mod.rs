//! Plan builders: one function per algorithm, plus [`Algorithm`] and [`build`] to pick
//! one by name. Every builder works for any `nranks ≥ 1` (one rank: a copy, or nothing
//! in place) and for in-place and out-of-place buffers; every plan it returns passes
//! [`crate::validate::validate`] (checked by [`build`] and by the tests).

mod allreduce;
mod ll;
mod others;

pub use allreduce::{allreduce_1pa, allreduce_2pa, allreduce_2ph, allreduce_rd, allreduce_ring};
pub use ll::{allgather_ll, broadcast_chain_ll, broadcast_ll, reducescatter_ll};
pub use others::{
    allgather_2ph, allgather_allpairs, allgather_ring, alltoall_allpairs, broadcast_chain,
    broadcast_direct, reduce_allpairs, reducescatter_2ph, reducescatter_allpairs,
    reducescatter_ring, sendrecv,
};

use crate::error::AlgoError;
use crate::plan::{BufferKind, ChannelKind, ChunkRef, Collective, Op, PacketFormat, Plan};
use serde::{Deserialize, Serialize};

/// Transfer protocol of the two-phase algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Protocol {
    /// Low latency: LL packets (data + flags) into scratch; no separate signals.
    LL,
    /// High bandwidth: plain puts, then signal/wait.
    HB,
}

/// Every algorithm with a builder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// AllReduce one-phase all-pairs, LL packets ([`allreduce_1pa`]).
    AllReduce1pa,
    /// AllReduce two-phase all-pairs, LL ([`allreduce_2pa`]).
    AllReduce2paLl,
    /// AllReduce two-phase all-pairs, HB ([`allreduce_2pa`]).
    AllReduce2paHb,
    /// AllReduce two-phase hierarchical, LL ([`allreduce_2ph`]).
    AllReduce2phLl,
    /// AllReduce two-phase hierarchical, HB ([`allreduce_2ph`]).
    AllReduce2phHb,
    /// AllReduce ring ([`allreduce_ring`]).
    AllReduceRing,
    /// AllReduce recursive doubling ([`allreduce_rd`]).
    AllReduceRd,
    /// AllGather all-pairs.
    AllGatherAllPairs,
    /// AllGather ring.
    AllGatherRing,
    /// AllGather hierarchical, multi-node ([`allgather_2ph`]).
    AllGather2ph,
    /// ReduceScatter all-pairs.
    ReduceScatterAllPairs,
    /// ReduceScatter ring.
    ReduceScatterRing,
    /// ReduceScatter hierarchical, multi-node ([`reducescatter_2ph`]).
    ReduceScatter2ph,
    /// Broadcast: root puts to every rank.
    BroadcastDirect,
    /// Broadcast: pipelined chain from the root.
    BroadcastChain,
    /// Reduce: every rank puts to the root.
    ReduceAllPairs,
    /// AllToAll all-pairs.
    AllToAllAllPairs,
    /// AllGather with LL packets into the peers' scratch ([`allgather_ll`]).
    AllGatherLl,
    /// ReduceScatter with LL packets into the peers' scratch ([`reducescatter_ll`]).
    ReduceScatterLl,
    /// Broadcast with LL packets into the receivers' scratch ([`broadcast_ll`]).
    BroadcastLl,
    /// [`Algorithm::AllReduce1pa`] with LL63 packets on the GPUs ([`PacketFormat::Ll63`]).
    AllReduce1paLl63,
    /// [`Algorithm::AllReduce2paLl`] with LL63 packets on the GPUs.
    AllReduce2paLl63,
    /// [`Algorithm::AllGatherLl`] with LL63 packets on the GPUs.
    AllGatherLl63,
    /// [`Algorithm::ReduceScatterLl`] with LL63 packets on the GPUs.
    ReduceScatterLl63,
    /// [`Algorithm::BroadcastLl`] with LL63 packets on the GPUs.
    BroadcastLl63,
    /// Broadcast along the chain from the root with LL63 packets, each rank forwarding
    /// what it receives ([`broadcast_chain_ll`]).
    BroadcastChainLl63,
    /// Point-to-point transfers ([`BuildParams::pairs`]).
    SendRecv,
}

impl Algorithm {
    /// Every algorithm (`SendRecv` last: tests that skip it take every one before it).
    pub const ALL: [Algorithm; 27] = [
        Algorithm::AllReduce1pa,
        Algorithm::AllReduce2paLl,
        Algorithm::AllReduce2paHb,
        Algorithm::AllReduce2phLl,
        Algorithm::AllReduce2phHb,
        Algorithm::AllReduceRing,
        Algorithm::AllReduceRd,
        Algorithm::AllGatherAllPairs,
        Algorithm::AllGatherRing,
        Algorithm::AllGather2ph,
        Algorithm::ReduceScatterAllPairs,
        Algorithm::ReduceScatterRing,
        Algorithm::ReduceScatter2ph,
        Algorithm::BroadcastDirect,
        Algorithm::BroadcastChain,
        Algorithm::ReduceAllPairs,
        Algorithm::AllToAllAllPairs,
        Algorithm::AllGatherLl,
        Algorithm::ReduceScatterLl,
        Algorithm::BroadcastLl,
        Algorithm::AllReduce1paLl63,
        Algorithm::AllReduce2paLl63,
        Algorithm::AllGatherLl63,
        Algorithm::ReduceScatterLl63,
        Algorithm::BroadcastLl63,
        Algorithm::BroadcastChainLl63,
        Algorithm::SendRecv,
    ];

    /// The collective it implements.
    pub const fn collective(self) -> Collective {
        use Algorithm::*;
        match self {
            AllReduce1pa | AllReduce2paLl | AllReduce2paHb | AllReduce2phLl | AllReduce2phHb
            | AllReduceRing | AllReduceRd | AllReduce1paLl63 | AllReduce2paLl63 => {
                Collective::AllReduce
            }
            AllGatherAllPairs | AllGatherRing | AllGather2ph | AllGatherLl | AllGatherLl63 => {
                Collective::AllGather
            }
            ReduceScatterAllPairs
            | ReduceScatterRing
            | ReduceScatter2ph
            | ReduceScatterLl
            | ReduceScatterLl63 => Collective::ReduceScatter,
            BroadcastDirect | BroadcastChain | BroadcastLl | BroadcastLl63 | BroadcastChainLl63 => {
                Collective::Broadcast
            }
            ReduceAllPairs => Collective::Reduce,
            AllToAllAllPairs => Collective::AllToAll,
            SendRecv => Collective::SendRecv,
        }
    }

    /// Short name within its collective (`1pa`, `2pa-ll`, `ring`, `allpairs`, ...).
    pub const fn short_name(self) -> &'static str {
        use Algorithm::*;
        match self {
            AllReduce1pa => "1pa",
            AllReduce2paLl => "2pa-ll",
            AllReduce2paHb => "2pa-hb",
            AllReduce2phLl => "2ph-ll",
            AllReduce2phHb => "2ph-hb",
            AllGather2ph | ReduceScatter2ph => "2ph",
            AllReduceRd => "rd",
            AllReduceRing | AllGatherRing | ReduceScatterRing => "ring",
            AllGatherAllPairs | ReduceScatterAllPairs | ReduceAllPairs | AllToAllAllPairs => {
                "allpairs"
            }
            BroadcastDirect | SendRecv => "direct",
            BroadcastChain => "chain",
            AllGatherLl | ReduceScatterLl | BroadcastLl => "ll",
            AllReduce1paLl63 => "1pa-ll63",
            AllReduce2paLl63 => "2pa-ll63",
            AllGatherLl63 | ReduceScatterLl63 | BroadcastLl63 => "ll63",
            BroadcastChainLl63 => "chain-ll63",
        }
    }

    /// `collective:short` (`allreduce:2pa-ll`), the form used by overrides and tuning files.
    pub fn full_name(self) -> String {
        format!("{}:{}", self.collective().name(), self.short_name())
    }

    /// Find by collective and short name.
    pub fn find(collective: Collective, short: &str) -> Result<Algorithm, AlgoError> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.collective() == collective && a.short_name() == short)
            .ok_or_else(|| {
                let known: Vec<_> = Algorithm::ALL
                    .into_iter()
                    .filter(|a| a.collective() == collective)
                    .map(|a| a.short_name())
                    .collect();
                AlgoError::Invalid(format!(
                    "no {} algorithm `{short}`; known: {}",
                    collective.name(),
                    known.join(", ")
                ))
            })
    }

    /// Whether it can run with these parameters (e.g. 2PH needs whole nodes).
    pub fn supports(self, p: &BuildParams) -> bool {
        match self {
            Algorithm::AllReduce2phLl
            | Algorithm::AllReduce2phHb
            | Algorithm::AllGather2ph
            | Algorithm::ReduceScatter2ph => {
                p.ranks_per_node >= 1 && p.nranks.is_multiple_of(p.ranks_per_node)
            }
            _ => true,
        }
    }
}

/// Everything a builder may need. `new(nranks)` gives defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildParams {
    /// Number of ranks (≥ 1).
    pub nranks: u32,
    /// In-place buffers.
    pub in_place: bool,
    /// Root of Broadcast/Reduce.
    pub root: u32,
    /// Ranks per node (2PH); must divide `nranks`.
    pub ranks_per_node: u32,
    /// Blocks per rank for algorithms that split work across blocks (2PA, ring).
    pub blocks: u32,
    /// Pipeline depth: sub-chunks each block loops over (ring, chain).
    pub pipeline: u32,
    /// `(src, dst)` pairs for SendRecv.
    pub pairs: Vec<(u32, u32)>,
}

impl BuildParams {
    /// Defaults: out of place, root 0, one node, 1 block, pipeline 1, no pairs.
    pub fn new(nranks: u32) -> BuildParams {
        BuildParams {
            nranks,
            in_place: false,
            root: 0,
            ranks_per_node: nranks.max(1),
            blocks: 1,
            pipeline: 1,
            pairs: vec![],
        }
    }
}

/// Build `algo` for `p`, and validate the result.
pub fn build(algo: Algorithm, p: &BuildParams) -> Result<Plan, AlgoError> {
    use Algorithm::*;
    let n = p.nranks;
    let plan = match algo {
        AllReduce1pa => allreduce_1pa(n, p.in_place)?,
        AllReduce2paLl => allreduce_2pa(n, p.in_place, Protocol::LL, p.blocks)?,
        AllReduce2paHb => allreduce_2pa(n, p.in_place, Protocol::HB, p.blocks)?,
        AllReduce2phLl => allreduce_2ph(n, p.ranks_per_node, p.in_place, Protocol::LL)?,
        AllReduce2phHb => allreduce_2ph(n, p.ranks_per_node, p.in_place, Protocol::HB)?,
        AllReduceRing => allreduce_ring(n, p.in_place, p.blocks, p.pipeline)?,
        AllReduceRd => allreduce_rd(n, p.in_place)?,
        AllGatherAllPairs => allgather_allpairs(n, p.in_place)?,
        AllGatherRing => allgather_ring(n, p.in_place, p.pipeline)?,
        AllGather2ph => allgather_2ph(n, p.ranks_per_node, p.in_place)?,
        ReduceScatterAllPairs => reducescatter_allpairs(n, p.in_place)?,
        ReduceScatterRing => reducescatter_ring(n, p.in_place, p.pipeline)?,
        ReduceScatter2ph => reducescatter_2ph(n, p.ranks_per_node, p.in_place)?,
        BroadcastDirect => broadcast_direct(n, p.root, p.in_place, p.pipeline)?,
        BroadcastChain => broadcast_chain(n, p.root, p.in_place, p.pipeline)?,
        ReduceAllPairs => reduce_allpairs(n, p.root, p.in_place)?,
        AllToAllAllPairs => alltoall_allpairs(n, p.in_place)?,
        AllGatherLl => allgather_ll(n, p.in_place)?,
        ReduceScatterLl => reducescatter_ll(n, p.in_place)?,
        BroadcastLl => broadcast_ll(n, p.root, p.in_place)?,
        AllReduce1paLl63 => ll63(allreduce_1pa(n, p.in_place)?),
        AllReduce2paLl63 => ll63(allreduce_2pa(n, p.in_place, Protocol::LL, p.blocks)?),
        AllGatherLl63 => ll63(allgather_ll(n, p.in_place)?),
        ReduceScatterLl63 => ll63(reducescatter_ll(n, p.in_place)?),
        BroadcastLl63 => ll63(broadcast_ll(n, p.root, p.in_place)?),
        BroadcastChainLl63 => ll63(broadcast_chain_ll(n, p.root, p.in_place)?),
        SendRecv => sendrecv(n, &p.pairs, p.in_place)?,
    };
    let mut plan = plan;
    ports_across_nodes(&mut plan, p.ranks_per_node);
    crate::validate::validate(&plan, plan.collective, n)?;
    Ok(plan)
}

/// Put every channel op between ranks of different nodes (`ranks_per_node` consecutive
/// ranks each) on a port channel. Every builder reaches its peers by put, signal, wait,
/// flush and LL packets only (none reads a peer's memory: no `Get`, no `ReadReduce`),
/// so with this every algorithm runs across nodes; `build` applies it to all. Both ends
/// of a signal/wait pair change together, so semaphores still match. Does nothing on
/// one node.
pub fn ports_across_nodes(plan: &mut Plan, ranks_per_node: u32) {
    let rpn = ranks_per_node.max(1);
    if rpn >= plan.nranks {
        return;
    }
    fn fix(op: &mut Op, r: u32, rpn: u32) {
        if let Op::Loop { body, .. } = op {
            body.iter_mut().for_each(|o| fix(o, r, rpn));
        } else if let Some((peer, channel)) = op.peer_channel_mut()
            && peer / rpn != r / rpn
            && *channel == ChannelKind::Memory
        {
            *channel = ChannelKind::Port;
        }
    }
    for (r, rp) in plan.ranks.iter_mut().enumerate() {
        for b in &mut rp.blocks {
            b.ops.iter_mut().for_each(|o| fix(o, r as u32, rpn));
        }
    }
}

// ---- helpers shared by the builder modules ----

/// The LL63 form of a packet plan: the same ops, LL63 packets in the generated GPU
/// kernels (`-ll63` after the name).
fn ll63(mut plan: Plan) -> Plan {
    plan.packets = PacketFormat::Ll63;
    plan.name = match plan.name.strip_suffix("-ll") {
        Some(stem) => format!("{stem}-ll63"),
        None => format!("{}-ll63", plan.name),
    };
    plan
}

pub(crate) fn check_n(nranks: u32, what: &str) -> Result<(), AlgoError> {
    if nranks == 0 {
        return Err(AlgoError::Invalid(format!(
            "{what}: nranks must be at least 1"
        )));
    }
    Ok(())
}

/// A hierarchical builder's nodes: `ranks_per_node` (> 0) divides `nranks`; else an
/// error naming `instead`, the algorithms to use.
pub(crate) fn check_nodes(
    nranks: u32,
    ranks_per_node: u32,
    what: &str,
    instead: &str,
) -> Result<(), AlgoError> {
    check_pos(ranks_per_node, "ranks_per_node", what)?;
    if !nranks.is_multiple_of(ranks_per_node) {
        return Err(AlgoError::Invalid(format!(
            "{what}: {nranks} ranks is not a whole number of nodes of {ranks_per_node}; use {instead}"
        )));
    }
    Ok(())
}

pub(crate) fn check_pos(v: u32, name: &str, what: &str) -> Result<(), AlgoError> {
    if v == 0 {
        return Err(AlgoError::Invalid(format!(
            "{what}: {name} must be at least 1"
        )));
    }
    Ok(())
}

pub(crate) fn inp(i: u32) -> ChunkRef {
    ChunkRef::new(BufferKind::Input, i)
}
pub(crate) fn out(i: u32) -> ChunkRef {
    ChunkRef::new(BufferKind::Output, i)
}
pub(crate) fn scr(i: u32) -> ChunkRef {
    ChunkRef::new(BufferKind::Scratch, i)
}

/// Appends ops to `plan.ranks[r].blocks[b]`, creating blocks as needed.
pub(crate) fn push(plan: &mut Plan, r: u32, b: u32, op: Op) {
    let blocks = &mut plan.ranks[r as usize].blocks;
    while blocks.len() <= b as usize {
        blocks.push(Default::default());
    }
    blocks[b as usize].ops.push(op);
}

pub(crate) const MEM: ChannelKind = ChannelKind::Memory;

/// Every rank of `0..n` but `r`, in order.
pub(crate) fn others(n: u32, r: u32) -> impl Iterator<Item = u32> {
    (0..n).filter(move |&p| p != r)
}
pub(crate) const PORT: ChannelKind = ChannelKind::Port;

pub(crate) fn put(peer: u32, channel: ChannelKind, tag: u32, src: ChunkRef, dst: ChunkRef) -> Op {
    Op::Put {
        peer,
        channel,
        tag,
        src,
        dst,
    }
}
pub(crate) fn signal(peer: u32, channel: ChannelKind, tag: u32) -> Op {
    Op::Signal { peer, channel, tag }
}
pub(crate) fn wait(peer: u32, channel: ChannelKind, tag: u32) -> Op {
    Op::Wait { peer, channel, tag }
}
pub(crate) fn put_packets(
    peer: u32,
    channel: ChannelKind,
    tag: u32,
    src: ChunkRef,
    dst: ChunkRef,
) -> Op {
    Op::PutPackets {
        peer,
        channel,
        tag,
        src,
        dst,
    }
}

/// A one-rank plan: copy input to output out of place, nothing in place.
pub(crate) fn single_rank(mut plan: Plan) -> Plan {
    if !plan.in_place {
        let (c, o) = (plan.input.chunks, plan.output.chunks);
        push(
            &mut plan,
            0,
            0,
            Op::Copy {
                src: ChunkRef::span(BufferKind::Input, 0, c),
                dst: ChunkRef::span(BufferKind::Output, 0, o),
            },
        );
    }
    plan
}
