//! The plan IR: what every rank's thread blocks do, as data.
//!
//! A [`Plan`] is built for one collective, one rank count and one placement (in-place or
//! not). It is **parametric in the message**: the element count `count`, the data type and
//! the reduction op are given when it runs. Every buffer is a multiple of `count` elements
//! ([`BufferSpec::factor`]) cut into [`BufferSpec::chunks`] balanced chunks:
//! chunk `i` of `n` over `T = factor * count` elements is `[i*T/n, (i+1)*T/n)`, so counts
//! that do not divide evenly work, and zero-length chunks are valid no-ops.
//!
//! ## Buffers and counts (as NCCL)
//! | collective | input | output |
//! |---|---|---|
//! | AllReduce, Broadcast, Reduce, SendRecv | count | count |
//! | AllGather | count | nranks × count |
//! | ReduceScatter | nranks × count | count |
//! | AllToAll | nranks × count | nranks × count |
//!
//! In-place plans alias input and output as NCCL does: AllGather's input is output chunk
//! `rank` (of `nranks`), ReduceScatter's output is input chunk `rank`, others share one
//! buffer. Out of place, the input is read-only.
//!
//! ## Execution contract (what an executor must provide)
//! * Ops of one block run in program order. Blocks of a rank run concurrently.
//! * `Put`/`PutPackets` write into the **peer's** buffer; `Get`/`ReadReduce` read the peer's.
//! * A `Signal{peer, channel, tag}` makes every earlier `Put` of this block on the same
//!   `(peer, channel, tag)` visible to the peer before the peer's matching `Wait` returns
//!   (MSCCL++ semantics; on a weak-signal backend the executor flushes first).
//! * Semaphores are per `(src rank, dst rank, channel kind, tag)`; a `Wait` consumes one
//!   signal. Builders use `tag` to give each block its own semaphores.
//! * `Flush` makes the source of earlier port puts reusable.
//! * Packet ops (LL protocol): data and flags travel together; `ReadReducePackets` waits
//!   for the flags of each expected packet chunk. Packets occupy twice the data bytes in
//!   scratch: a scratch chunk with elements `[a, b)` lives at bytes `[2*a*s, 2*b*s)` where
//!   `s` is the element size ([`Plan::scratch_bytes`] accounts for this).
//! * `scratch_rotation`: the executor keeps that many copies of scratch and uses the
//!   next one on each invocation (LL flag values change per invocation too). A rank
//!   that writes packets into a peer it never hears from in the plan (a one-way
//!   sender, [`Plan::one_way_packet_pairs`]) is held back by the executor until that
//!   peer has finished reading the copy it is about to overwrite. On the GPUs copies
//!   alternate by launch parity over every plan instead ([`Plan::scratch_writer_pairs`]
//!   says what orders their reuse there).
//! * `Barrier` is **intra-rank**: every block of the rank reaches its k-th barrier before
//!   any passes it. Cross-rank synchronisation is always signal/wait or packets.
//! * `Finalize` applies the op's last step (avg: divide by nranks) to a local chunk.
//! * Switch ops address the same chunk on every rank of the plan (one multicast group).

mod chunk;
mod op;

pub use chunk::{BufferKind, BufferSpec, ChunkRef};
pub use op::{ChannelKind, Op, local_position};

use crate::dtype::DataType;
use crate::error::{AlgoError, Location};
use serde::{Deserialize, Serialize};

/// Version of the JSON schema this build reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

/// How a GPU kernel generated from the plan encodes its LL packets (codegen). The host
/// executor moves every packet plan as flagged 8-byte words (LL8) whatever this says:
/// the encoding changes the bytes on the links, not what the plan computes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PacketFormat {
    /// LL16: 8 data bytes and an epoch flag per 16-byte store, in the scratch copy.
    /// Any bytes may be left in scratch between launches: a flag names its launch.
    #[default]
    Ll16,
    /// LL63: 63 data bits and a valid bit per 64-bit word, whole warps moving tiles of
    /// 252 16-byte vectors as 4 KiB of packets (`commhal/ll63.h`), so 63/64 of the bytes
    /// on the links are data (LL16: 1/2). A valid bit names no launch, so these packets
    /// live in an area of their own that only LL63 packets touch, cleared by every
    /// reader as it reads (`commhal/plan_ll63.h`).
    Ll63,
}

/// Which collective a plan implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Collective {
    /// Every rank gets the reduction of all inputs.
    AllReduce,
    /// Every rank gets every rank's input, concatenated in rank order.
    AllGather,
    /// Rank r gets chunk r of the reduction of all inputs.
    ReduceScatter,
    /// Every rank gets the root's input ([`Plan::root`]).
    Broadcast,
    /// The root gets the reduction of all inputs ([`Plan::root`]).
    Reduce,
    /// Rank r's output chunk p is rank p's input chunk r.
    AllToAll,
    /// For each `(src, dst)` in [`Plan::pairs`], dst's output is src's input.
    SendRecv,
}

impl Collective {
    /// Every collective.
    pub const ALL: [Collective; 7] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllToAll,
        Collective::SendRecv,
    ];

    /// Name as used in tuning files and overrides (`allreduce`, `allgather`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "allreduce",
            Collective::AllGather => "allgather",
            Collective::ReduceScatter => "reducescatter",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AllToAll => "alltoall",
            Collective::SendRecv => "sendrecv",
        }
    }

    /// Parse a [`Collective::name`].
    pub fn from_name(s: &str) -> Result<Collective, AlgoError> {
        Collective::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| AlgoError::Invalid(format!("unknown collective `{s}`")))
    }

    /// (input factor, output factor): buffer sizes in multiples of `count`.
    pub const fn io_factors(self, nranks: u32) -> (u32, u32) {
        match self {
            Collective::AllGather => (1, nranks),
            Collective::ReduceScatter => (nranks, 1),
            Collective::AllToAll => (nranks, nranks),
            _ => (1, 1),
        }
    }

    /// Whether the collective reduces (and so uses the op).
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce
        )
    }
}

/// One block's ops (a "thread block" on GPUs, a host thread on host-emu).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Block {
    /// Ops in program order.
    pub ops: Vec<Op>,
}

/// One rank's blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RankPlan {
    /// Blocks, run concurrently.
    pub blocks: Vec<Block>,
}

/// A complete plan. See the module docs for the execution contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Must equal [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The collective it implements.
    pub collective: Collective,
    /// Algorithm name (`allreduce-2pa-hb`, ...).
    pub name: String,
    /// Number of ranks.
    pub nranks: u32,
    /// Whether input and output alias (module docs).
    pub in_place: bool,
    /// Root rank of Broadcast and Reduce.
    #[serde(default)]
    pub root: Option<u32>,
    /// `(src, dst)` transfers of SendRecv.
    #[serde(default)]
    pub pairs: Vec<(u32, u32)>,
    /// Input buffer layout.
    pub input: BufferSpec,
    /// Output buffer layout.
    pub output: BufferSpec,
    /// Scratch buffer layout (factor 0: no scratch).
    pub scratch: BufferSpec,
    /// Copies of scratch the executor rotates through per invocation (≥ 1).
    pub scratch_rotation: u32,
    /// Encoding of the LL packets in generated GPU kernels.
    #[serde(default)]
    pub packets: PacketFormat,
    /// Per-rank programs; `ranks.len() == nranks`.
    pub ranks: Vec<RankPlan>,
}

/// A rank that writes into another rank's scratch in a plan
/// ([`Plan::scratch_writer_pairs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScratchWriter {
    /// The rank that puts data or packets.
    pub writer: u32,
    /// The rank whose scratch it writes.
    pub reader: u32,
    /// Through a port channel (a rank of another node) rather than mapped memory.
    pub far: bool,
}

impl Plan {
    /// An empty plan (no ops) with the collective's input/output factors and one chunk each.
    pub fn new(
        collective: Collective,
        name: impl Into<String>,
        nranks: u32,
        in_place: bool,
    ) -> Plan {
        let (fi, fo) = collective.io_factors(nranks);
        Plan {
            schema_version: SCHEMA_VERSION,
            collective,
            name: name.into(),
            nranks,
            in_place,
            root: None,
            pairs: Vec::new(),
            input: BufferSpec {
                factor: fi,
                chunks: 1,
            },
            output: BufferSpec {
                factor: fo,
                chunks: 1,
            },
            scratch: BufferSpec {
                factor: 0,
                chunks: 1,
            },
            scratch_rotation: 1,
            packets: PacketFormat::Ll16,
            ranks: vec![RankPlan::default(); nranks as usize],
        }
    }

    /// The layout of one buffer kind.
    pub fn spec(&self, buf: BufferKind) -> BufferSpec {
        match buf {
            BufferKind::Input => self.input,
            BufferKind::Output => self.output,
            BufferKind::Scratch => self.scratch,
        }
    }

    /// Element range `[start, end)` of a chunk reference (with a loop iteration applied).
    pub fn chunk_range(&self, c: &ChunkRef, iteration: u32, count: u64) -> (u64, u64) {
        c.range(self.spec(c.buf), iteration, count)
    }

    /// Whether any op uses LL packets (scratch then holds packets: twice the bytes).
    pub fn uses_packets(&self) -> bool {
        self.ranks
            .iter()
            .flat_map(|r| &r.blocks)
            .flat_map(|b| &b.ops)
            .any(|o| match o {
                Op::Loop { body, .. } => body.iter().any(Op::is_packet),
                o => o.is_packet(),
            })
    }

    /// `(sender, receiver)` pairs where the sender writes LL packets into the receiver's
    /// scratch but never hears from it in an invocation (no wait on its signals, no read
    /// of its packets, in any block): a one-way sender, such as a broadcast root.
    ///
    /// A sender that hears from its receiver in every invocation cannot start
    /// invocation `i` before the receiver started `i − 1` (and so finished `i − 2`),
    /// which is what rotating scratch over 2 copies needs. A one-way sender has no such
    /// bound; executors make it wait, before its first packet write of invocation `i`,
    /// until the receiver finished invocation `i − scratch_rotation` (the last to read
    /// the copy `i` writes), and make the receiver publish its progress.
    pub fn one_way_packet_pairs(&self) -> Vec<(u32, u32)> {
        let n = self.nranks as usize;
        let mut sends = vec![std::collections::BTreeSet::new(); n];
        let mut hears = vec![std::collections::BTreeSet::new(); n];
        for (r, rp) in self.ranks.iter().enumerate() {
            for b in &rp.blocks {
                for op in &b.ops {
                    let ops = match op {
                        Op::Loop { body, .. } => body.as_slice(),
                        o => std::slice::from_ref(o),
                    };
                    for o in ops {
                        match o {
                            Op::PutPackets { peer, .. } if *peer as usize != r => {
                                sends[r].insert(*peer);
                            }
                            Op::Wait { peer, .. } => {
                                hears[r].insert(*peer);
                            }
                            Op::ReadReducePackets { packets, .. } => {
                                hears[r].extend(packets.iter().map(|(p, _)| *p));
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        let mut out = Vec::new();
        for r in 0..n {
            for &p in &sends[r] {
                if !hears[r].contains(&p) {
                    out.push((r as u32, p));
                }
            }
        }
        out
    }

    /// Every pair of distinct ranks where the writer puts data or LL packets into the
    /// reader's scratch, with whether through a port (a rank of another node).
    ///
    /// Where scratch copies rotate over every plan (the GPUs: two copies by launch
    /// parity, whatever `scratch_rotation` says), the plan's own signals do not order
    /// their reuse. The writer writes copy `k mod 2` in launch `k + 2`, which the reader
    /// read in launch `k`. A start handshake of the pair in launch `k + 2` orders it (the
    /// reader runs `k + 2`, so it finished `k`). Hearing from the reader in launch
    /// `k + 1` does too, but launch `k + 1` may be another plan in which the writer does
    /// not hear from the reader (a broadcast root, a reduce non-root, a send), and a
    /// [one-way sender](Self::one_way_packet_pairs) never does. So for each pair without
    /// a start handshake the reader publishes its completed launches to the writer at
    /// the start of each launch (a done word: one store, no wait), and the writer waits,
    /// before its first write into the reader in the launch, until the reader completed
    /// launch `k`: `done >= k + 1`. Both run launch `k + 2`, where the reader publishes
    /// without waiting for anything, so the writer cannot wait forever.
    ///
    /// Back to back, the wait is a local load that finds the value: a writer that hears
    /// from its reader in every launch of the plan (every builder's, one-way senders
    /// aside: `tests/builders.rs`) heard in launch `k + 1` from writes the reader made
    /// after it published `k + 1`, first thing in that launch, a whole launch boundary
    /// before the writer's check. (The relaxed store is not ordered with those writes,
    /// so this is timing, not a guarantee: the check stays a wait.) A one-way sender
    /// waits only when it runs two launches ahead of its receiver. Where the GPU host
    /// knows launch `k + 1` ran the same plan, the writer heard from the reader in it:
    /// the host launches the kernel's ordered entry (plan.h `wait_done`), in which only
    /// one-way senders wait.
    ///
    /// The host executor keeps scratch copies per plan and counts each plan's
    /// invocations, so what runs in between does not matter there: the plan's own
    /// signals order the reuse, and one-way senders wait for a progress signal.
    pub fn scratch_writer_pairs(&self) -> Vec<ScratchWriter> {
        let mut far = std::collections::BTreeMap::new();
        for (w, rp) in self.ranks.iter().enumerate() {
            for op in rp.blocks.iter().flat_map(|b| &b.ops) {
                let ops = match op {
                    Op::Loop { body, .. } => body.as_slice(),
                    o => std::slice::from_ref(o),
                };
                for (r, ch) in ops.iter().filter_map(Op::scratch_reader) {
                    if r as usize != w {
                        *far.entry((w as u32, r)).or_insert(false) |= ch == ChannelKind::Port;
                    }
                }
            }
        }
        far.into_iter()
            .map(|((writer, reader), far)| ScratchWriter {
                writer,
                reader,
                far,
            })
            .collect()
    }

    /// The `(writer, reader)` [scratch writer pairs](Self::scratch_writer_pairs) through
    /// a port, less the one-way packet pairs (packets do not cross nodes on the GPUs).
    pub fn far_scratch_writer_pairs(&self) -> Vec<(u32, u32)> {
        let one_way = self.one_way_packet_pairs();
        self.scratch_writer_pairs()
            .into_iter()
            .filter(|p| p.far)
            .map(|p| (p.writer, p.reader))
            .filter(|p| !one_way.contains(p))
            .collect()
    }

    /// Bytes of one scratch copy for `count` elements of `dtype` (packets double it).
    pub fn scratch_bytes(&self, count: u64, dtype: DataType) -> u64 {
        let data = self.scratch.factor as u64 * count * dtype.size() as u64;
        if self.uses_packets() { 2 * data } else { data }
    }

    /// Serialise to JSON.
    pub fn to_json(&self) -> Result<String, AlgoError> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// Parse JSON, rejecting other schema versions before reading the rest.
    pub fn from_json(s: &str) -> Result<Plan, AlgoError> {
        #[derive(Deserialize)]
        struct Version {
            schema_version: u32,
        }
        let v: Version = serde_json::from_str(s)?;
        if v.schema_version != SCHEMA_VERSION {
            return Err(AlgoError::Schema {
                found: v.schema_version,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(serde_json::from_str(s)?)
    }

    /// Each block's ops with loops unrolled and chunk steps applied, with the location of
    /// each op in the original plan: `flat[rank][block] = [(location, op)]`.
    pub fn flatten(&self) -> Vec<Vec<Vec<(Location, Op)>>> {
        self.ranks
            .iter()
            .enumerate()
            .map(|(r, rp)| {
                rp.blocks
                    .iter()
                    .enumerate()
                    .map(|(b, blk)| {
                        let mut out = Vec::new();
                        for (i, op) in blk.ops.iter().enumerate() {
                            let loc = Location {
                                rank: r as u32,
                                block: b,
                                op: i,
                                in_loop: None,
                            };
                            match op {
                                Op::Loop { iterations, body } => {
                                    for it in 0..*iterations {
                                        for (j, o) in body.iter().enumerate() {
                                            let l = Location {
                                                in_loop: Some((j, it)),
                                                ..loc.clone()
                                            };
                                            out.push((l, o.at_iteration(it)));
                                        }
                                    }
                                }
                                o => out.push((loc, o.clone())),
                            }
                        }
                        out
                    })
                    .collect()
            })
            .collect()
    }

    /// Total op count (loops unrolled), for logs.
    pub fn op_count(&self) -> usize {
        self.flatten().iter().flatten().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_and_version_check() {
        let mut p = Plan::new(Collective::AllReduce, "t", 2, false);
        p.ranks[0].blocks.push(Block {
            ops: vec![
                Op::Put {
                    peer: 1,
                    channel: ChannelKind::Memory,
                    tag: 0,
                    src: ChunkRef::new(BufferKind::Input, 0),
                    dst: ChunkRef::new(BufferKind::Scratch, 0),
                },
                Op::Loop {
                    iterations: 2,
                    body: vec![Op::Barrier],
                },
            ],
        });
        let s = p.to_json().unwrap();
        assert_eq!(Plan::from_json(&s).unwrap(), p);
        let bad = s.replace("\"schema_version\": 1", "\"schema_version\": 99");
        match Plan::from_json(&bad) {
            Err(AlgoError::Schema { found: 99, .. }) => {}
            other => panic!("expected schema error, got {other:?}"),
        }
    }

    #[test]
    fn balanced_chunks_cover_the_buffer() {
        let spec = BufferSpec {
            factor: 1,
            chunks: 3,
        };
        let r: Vec<_> = (0..3)
            .map(|i| ChunkRef::new(BufferKind::Input, i).range(spec, 0, 7))
            .collect();
        assert_eq!(r, vec![(0, 2), (2, 4), (4, 7)]);
        let spec = BufferSpec {
            factor: 1,
            chunks: 4,
        };
        assert_eq!(
            ChunkRef::new(BufferKind::Input, 1).range(spec, 0, 1),
            (0, 0)
        );
    }
}
