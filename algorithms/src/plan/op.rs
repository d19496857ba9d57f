//! Plan operations. Peers are ranks; chunk references name buffers of the rank that
//! holds them (a `Put`'s `dst` is in the peer's buffer, a `Get`'s `src` too).

use super::chunk::{BufferKind, ChunkRef};
use serde::{Deserialize, Serialize};

/// Which channel kind carries an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    /// Thread-copy over mapped peer memory (`MemoryMapped`).
    Memory,
    /// Proxy-driven copies (`PortMapped`: copy engines, RDMA).
    Port,
    /// Multicast switch memory (`SwitchMapped`).
    Switch,
}

/// One operation of a block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    /// Write local `src` into the peer's `dst`.
    Put {
        /// Peer rank.
        peer: u32,
        /// Channel kind.
        channel: ChannelKind,
        /// Semaphore/channel index shared with the matching `Signal`.
        tag: u32,
        /// Local source.
        src: ChunkRef,
        /// Destination in the peer's buffers.
        dst: ChunkRef,
    },
    /// Read the peer's `src` into local `dst`.
    Get {
        /// Peer rank.
        peer: u32,
        /// Channel kind.
        channel: ChannelKind,
        /// Channel index.
        tag: u32,
        /// Source in the peer's buffers.
        src: ChunkRef,
        /// Local destination.
        dst: ChunkRef,
    },
    /// Increment the peer's semaphore for `(me → peer, channel, tag)`; orders earlier puts.
    Signal {
        /// Peer rank.
        peer: u32,
        /// Channel kind.
        channel: ChannelKind,
        /// Channel index.
        tag: u32,
    },
    /// Wait for (and consume) one signal from the peer on `(peer → me, channel, tag)`.
    Wait {
        /// Peer rank.
        peer: u32,
        /// Channel kind.
        channel: ChannelKind,
        /// Channel index.
        tag: u32,
    },
    /// Wait until earlier puts to the peer on this channel have left their sources.
    Flush {
        /// Peer rank.
        peer: u32,
        /// Channel kind.
        channel: ChannelKind,
        /// Channel index.
        tag: u32,
    },
    /// Local copy.
    Copy {
        /// Source.
        src: ChunkRef,
        /// Destination.
        dst: ChunkRef,
    },
    /// Local reduction: `dst = srcs[0] ⊕ srcs[1] ⊕ …` (left to right; `dst` may be a source).
    Reduce {
        /// Sources (≥ 1).
        srcs: Vec<ChunkRef>,
        /// Destination.
        dst: ChunkRef,
    },
    /// `dst = local[0] ⊕ … ⊕ peers[0].src ⊕ …`: reads the same chunk from several peers'
    /// mapped memory (memory channels) after the caller has synchronised with them.
    ReadReduce {
        /// Peers read from.
        peers: Vec<u32>,
        /// Channel kind (memory).
        channel: ChannelKind,
        /// Chunk read on each peer.
        src: ChunkRef,
        /// Local operands, reduced first.
        local: Vec<ChunkRef>,
        /// Local destination.
        dst: ChunkRef,
    },
    /// Write local `src` as LL packets into the peer's scratch chunk `dst`.
    PutPackets {
        /// Peer rank.
        peer: u32,
        /// Channel kind.
        channel: ChannelKind,
        /// Channel index.
        tag: u32,
        /// Local source.
        src: ChunkRef,
        /// Scratch chunk on the peer.
        dst: ChunkRef,
    },
    /// `dst = packets… ⊕ (local[0] ⊕ …) ⊕ packets…`: waits for each `(peer, local
    /// scratch chunk)`'s packets to arrive (flags) and reduces their data, left to
    /// right, the local operands' reduction entering at [`local_position`] (after the
    /// packets of the senders below this rank). With no `local` and one packet source it
    /// unpacks (copies).
    ReadReducePackets {
        /// `(sender, local scratch chunk)` pairs, by ascending sender for a reduction in
        /// rank order.
        packets: Vec<(u32, ChunkRef)>,
        /// Local operands, this rank's contribution.
        local: Vec<ChunkRef>,
        /// Local destination.
        dst: ChunkRef,
    },
    /// `dst = ⊕ over every rank r of r's src` through the switch (`multimem.ld_reduce`).
    SwitchReduce {
        /// Chunk read on every rank.
        src: ChunkRef,
        /// Local destination.
        dst: ChunkRef,
    },
    /// Write local `src` into `dst` on every rank (`multimem.st`).
    SwitchBroadcast {
        /// Local source.
        src: ChunkRef,
        /// Destination chunk on every rank.
        dst: ChunkRef,
    },
    /// Intra-rank barrier among all blocks of this rank.
    Barrier,
    /// Apply the reduction's last step (avg: ÷ nranks) to a local chunk.
    Finalize {
        /// Chunk.
        dst: ChunkRef,
    },
    /// Repeat `body` `iterations` times; chunk refs advance by their `step` (no nesting).
    Loop {
        /// Iterations (≥ 1).
        iterations: u32,
        /// Body ops.
        body: Vec<Op>,
    },
}

/// Where the local operands of rank `me`'s `ReadReducePackets` enter its reduction:
/// after the packets of the senders below `me`, so that packets listed by ascending
/// sender are reduced in rank order and a reduction every rank computes (the one-shot
/// all-reduce) gives every rank the same bits, as the hand-written kernels. With one
/// packet source the locals come first: two terms give the same bits in either order.
pub fn local_position(packets: &[(u32, ChunkRef)], me: u32) -> usize {
    if packets.len() < 2 {
        0
    } else {
        packets.iter().filter(|(p, _)| *p < me).count()
    }
}

impl Op {
    /// Whether it is a packet op.
    pub fn is_packet(&self) -> bool {
        matches!(self, Op::PutPackets { .. } | Op::ReadReducePackets { .. })
    }

    /// The peer whose scratch a put (data or packets) writes, and the channel it
    /// goes through (a port: a rank of another node).
    pub fn scratch_reader(&self) -> Option<(u32, ChannelKind)> {
        match self {
            Op::Put {
                peer, channel, dst, ..
            }
            | Op::PutPackets {
                peer, channel, dst, ..
            } if dst.buf == BufferKind::Scratch => Some((*peer, *channel)),
            _ => None,
        }
    }

    /// Every chunk reference with whether it is written and whether it is on a peer:
    /// `(chunk, written, remote)`.
    pub fn chunks(&self) -> Vec<(ChunkRef, bool, bool)> {
        match self {
            Op::Put { src, dst, .. } | Op::PutPackets { src, dst, .. } => {
                vec![(*src, false, false), (*dst, true, true)]
            }
            Op::Get { src, dst, .. } => vec![(*src, false, true), (*dst, true, false)],
            Op::Copy { src, dst } => vec![(*src, false, false), (*dst, true, false)],
            Op::Reduce { srcs, dst } => {
                let mut v: Vec<_> = srcs.iter().map(|c| (*c, false, false)).collect();
                v.push((*dst, true, false));
                v
            }
            Op::ReadReduce {
                src, local, dst, ..
            } => {
                let mut v: Vec<_> = local.iter().map(|c| (*c, false, false)).collect();
                v.push((*src, false, true));
                v.push((*dst, true, false));
                v
            }
            Op::ReadReducePackets {
                packets,
                local,
                dst,
            } => {
                let mut v: Vec<_> = local.iter().map(|c| (*c, false, false)).collect();
                v.extend(packets.iter().map(|(_, c)| (*c, false, false)));
                v.push((*dst, true, false));
                v
            }
            Op::SwitchReduce { src, dst } => vec![(*src, false, true), (*dst, true, false)],
            Op::SwitchBroadcast { src, dst } => vec![(*src, false, false), (*dst, true, true)],
            Op::Finalize { dst } => vec![(*dst, true, false)],
            Op::Signal { .. }
            | Op::Wait { .. }
            | Op::Flush { .. }
            | Op::Barrier
            | Op::Loop { .. } => {
                vec![]
            }
        }
    }

    /// The peer and channel kind of an op that can run on either channel kind (put,
    /// signal, wait, flush, packet put: what `builders::ports_across_nodes` moves onto
    /// port channels); `None` for every other op.
    pub fn peer_channel(&self) -> Option<(u32, ChannelKind)> {
        match self {
            Op::Put { peer, channel, .. }
            | Op::Signal { peer, channel, .. }
            | Op::Wait { peer, channel, .. }
            | Op::Flush { peer, channel, .. }
            | Op::PutPackets { peer, channel, .. } => Some((*peer, *channel)),
            _ => None,
        }
    }

    /// As [`Op::peer_channel`], the channel kind to change.
    pub fn peer_channel_mut(&mut self) -> Option<(u32, &mut ChannelKind)> {
        match self {
            Op::Put { peer, channel, .. }
            | Op::Signal { peer, channel, .. }
            | Op::Wait { peer, channel, .. }
            | Op::Flush { peer, channel, .. }
            | Op::PutPackets { peer, channel, .. } => Some((*peer, channel)),
            _ => None,
        }
    }

    /// Peers the op talks to.
    pub fn peers(&self) -> Vec<u32> {
        match self {
            Op::Put { peer, .. }
            | Op::Get { peer, .. }
            | Op::Signal { peer, .. }
            | Op::Wait { peer, .. }
            | Op::Flush { peer, .. }
            | Op::PutPackets { peer, .. } => vec![*peer],
            Op::ReadReduce { peers, .. } => peers.clone(),
            Op::ReadReducePackets { packets, .. } => packets.iter().map(|p| p.0).collect(),
            _ => vec![],
        }
    }

    /// A copy with every chunk reference moved to loop iteration `it` (step cleared).
    pub fn at_iteration(&self, it: u32) -> Op {
        let m = |c: &ChunkRef| ChunkRef {
            index: c.first_at(it) as u32,
            step: 0,
            ..*c
        };
        let mut o = self.clone();
        match &mut o {
            Op::Put { src, dst, .. }
            | Op::PutPackets { src, dst, .. }
            | Op::Get { src, dst, .. }
            | Op::Copy { src, dst }
            | Op::SwitchReduce { src, dst }
            | Op::SwitchBroadcast { src, dst } => {
                *src = m(src);
                *dst = m(dst);
            }
            Op::Reduce { srcs, dst } => {
                srcs.iter_mut().for_each(|c| *c = m(c));
                *dst = m(dst);
            }
            Op::ReadReduce {
                src, local, dst, ..
            } => {
                *src = m(src);
                local.iter_mut().for_each(|c| *c = m(c));
                *dst = m(dst);
            }
            Op::ReadReducePackets {
                packets,
                local,
                dst,
            } => {
                packets.iter_mut().for_each(|(_, c)| *c = m(c));
                local.iter_mut().for_each(|c| *c = m(c));
                *dst = m(dst);
            }
            Op::Finalize { dst } => *dst = m(dst),
            Op::Signal { .. }
            | Op::Wait { .. }
            | Op::Flush { .. }
            | Op::Barrier
            | Op::Loop { .. } => {}
        }
        o
    }
}
