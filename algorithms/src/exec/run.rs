//! The interpreter: runs one rank's part of a [`Prepared`] plan over host memory.
//!
//! One host thread per block (block 0 on the calling thread), ops in program order.
//! Data ops are memmoves and the dtype module's reduce kernel over `Span`s of this
//! rank's and its peers' buffers; reductions and packet reads walk big chunks in
//! [`PIECE`]-byte pieces so the destination piece stays in cache while every operand is
//! folded into it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use commhal_channels::packet::{ll_split, ll_word};

use super::port::{Area, PortRange};
use super::raw::{self, Span};
use super::sync::{CREDIT_TAG, KIND_P2P, KIND_PACKETS, MAX_TAGS, SyncTable, kind_index};

/// P2P-kind semaphore tag of the entry handshake (tags 0 and 1 are send/recv's).
const ENTRY_TAG: u32 = 2;
use super::kernels::reduce as reduce_into;
use crate::comm::CommError;
use crate::dtype::{DataType, RedOp, finalize};
use crate::plan::{BufferKind, ChannelKind, ChunkRef, Op, Plan, local_position};

/// Bytes processed per step of a reduction (fits L1/L2 with a few operands).
pub const PIECE: usize = 32 * 1024;

/// A plan checked and flattened for one rank, with its LL flag bookkeeping.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The plan.
    pub plan: Plan,
    /// This rank.
    pub me: u32,
    /// Per block: ops with loops unrolled, and for packet ops the occurrence index of
    /// each packet slot used (flag offset within the invocation).
    blocks: Vec<Vec<(Op, Vec<u32>)>>,
    /// Per block, per op: for each packet source of a `ReadReducePackets`, the sender's
    /// block `b` and how many packet writes from (that rank, block `b`) to this rank it
    /// takes to include this one (used when the source is on another node).
    packet_src: Vec<Vec<Vec<(u32, u64)>>>,
    /// Packet writes to this rank per invocation, per (sender, sender block).
    packet_totals: Vec<(u32, u32, u64)>,
    /// Flag values one invocation uses (max occurrences of one packet slot), ≥ 1.
    pub flag_stride: u64,
    /// Peers this rank handshakes with before running: some block of one of the pair
    /// writes or reads the other's input/output before waiting for it in this
    /// invocation, so it must know the other has entered the call (its user buffers
    /// staged and no longer read from the previous call).
    pub entry_peers: Vec<u32>,
    /// Peers this rank writes packets into one way: it waits for their progress first
    /// (`SyncTable::await_credit`).
    pub credit_to: Vec<u32>,
    /// Peers that write packets into this rank one way: it reports its progress to
    /// them at the end of each invocation.
    pub credit_from: Vec<u32>,
}

type PacketKey = (u32, u32, u32, u32);

impl Prepared {
    /// Flatten `plan` for rank `me`. The plan must have passed the validator; tags must
    /// be below [`MAX_TAGS`].
    pub fn new(plan: Plan, me: u32) -> Result<Prepared, CommError> {
        let flat = plan.flatten();
        // Occurrences of every packet slot across the whole plan (all ranks see the
        // same plan, so every rank computes the same stride).
        let mut sent: HashMap<PacketKey, u32> = HashMap::new();
        let mut read: HashMap<PacketKey, u32> = HashMap::new();
        let mut mine = Vec::new();
        // (sender, receiver, chunk index, chunk count, occurrence) -> (sender block,
        // packet writes from that block to that receiver up to this one).
        let mut sent_at: HashMap<(PacketKey, u32), (u32, u64)> = HashMap::new();
        let mut per_block: HashMap<(u32, u32, u32), u64> = HashMap::new();
        for (r, blocks) in flat.iter().enumerate() {
            let r = r as u32;
            for (b, ops) in blocks.iter().enumerate() {
                let b = b as u32;
                let mut out = Vec::with_capacity(ops.len());
                for (_, op) in ops {
                    let mut occ = Vec::new();
                    match op {
                        Op::Put { tag, .. }
                        | Op::Get { tag, .. }
                        | Op::Signal { tag, .. }
                        | Op::Wait { tag, .. }
                        | Op::Flush { tag, .. }
                        | Op::PutPackets { tag, .. }
                            if *tag as usize >= MAX_TAGS =>
                        {
                            return Err(CommError::Invalid(format!(
                                "plan `{}` uses tag {tag}; the host executor supports tags below {MAX_TAGS}: use fewer blocks",
                                plan.name
                            )));
                        }
                        _ => {}
                    }
                    match op {
                        Op::PutPackets { peer, dst, .. } => {
                            if b as usize >= MAX_TAGS {
                                return Err(CommError::Invalid(format!(
                                    "plan `{}` writes packets from block {b}; the host executor supports fewer than {MAX_TAGS} blocks",
                                    plan.name
                                )));
                            }
                            let e = sent.entry((r, *peer, dst.index, dst.count)).or_default();
                            let nth = per_block.entry((r, b, *peer)).or_default();
                            *nth += 1;
                            sent_at.insert(((r, *peer, dst.index, dst.count), *e), (b, *nth));
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
                        _ => {}
                    }
                    out.push((op.clone(), occ));
                }
                if r == me {
                    mine.push(out);
                }
            }
        }
        let flag_stride = sent.values().copied().max().unwrap_or(1).max(1) as u64;
        let mut packet_src = Vec::with_capacity(mine.len());
        for ops in &mine {
            let mut per_op = Vec::with_capacity(ops.len());
            for (op, occ) in ops {
                let mut srcs = Vec::new();
                if let Op::ReadReducePackets { packets, .. } = op {
                    for ((p, c), k) in packets.iter().zip(occ) {
                        let at = sent_at.get(&((*p, me, c.index, c.count), *k)).ok_or_else(|| {
                            CommError::Invalid(format!(
                                "plan `{}`: rank {me} reads packets of chunk {c:?} from rank {p} that rank {p} never writes",
                                plan.name
                            ))
                        })?;
                        srcs.push(*at);
                    }
                }
                per_op.push(srcs);
            }
            packet_src.push(per_op);
        }
        let mut packet_totals: Vec<(u32, u32, u64)> = per_block
            .iter()
            .filter(|((_, _, to), _)| *to == me)
            .map(|((from, b, _), n)| (*from, *b, *n))
            .collect();
        packet_totals.sort_unstable();
        let mut pairs = std::collections::BTreeSet::new();
        for (r, blocks) in flat.iter().enumerate() {
            let r = r as u32;
            for ops in blocks {
                let mut heard = std::collections::HashSet::new();
                for (_, op) in ops {
                    let touches_io = |c: &ChunkRef| c.buf != BufferKind::Scratch;
                    let remote: Vec<(u32, ChunkRef)> = match op {
                        Op::Put { peer, dst, .. } | Op::PutPackets { peer, dst, .. } => {
                            vec![(*peer, *dst)]
                        }
                        Op::Get { peer, src, .. } => vec![(*peer, *src)],
                        Op::ReadReduce { peers, src, .. } => {
                            peers.iter().map(|p| (*p, *src)).collect()
                        }
                        Op::SwitchReduce { src, .. } => {
                            (0..plan.nranks).map(|p| (p, *src)).collect()
                        }
                        Op::SwitchBroadcast { dst, .. } => {
                            (0..plan.nranks).map(|p| (p, *dst)).collect()
                        }
                        _ => vec![],
                    };
                    for (p, c) in remote {
                        if p != r && touches_io(&c) && !heard.contains(&p) {
                            pairs.insert((r.min(p), r.max(p)));
                        }
                    }
                    match op {
                        Op::Wait { peer, .. } => {
                            heard.insert(*peer);
                        }
                        Op::ReadReducePackets { packets, .. } => {
                            heard.extend(packets.iter().map(|(p, _)| *p));
                        }
                        _ => {}
                    }
                }
            }
        }
        let entry_peers = pairs
            .into_iter()
            .filter_map(|(a, b)| {
                if a == me {
                    Some(b)
                } else if b == me {
                    Some(a)
                } else {
                    None
                }
            })
            .collect();
        let one_way = plan.one_way_packet_pairs();
        let credit_to = one_way
            .iter()
            .filter(|(s, _)| *s == me)
            .map(|(_, r)| *r)
            .collect();
        let credit_from = one_way
            .iter()
            .filter(|(_, r)| *r == me)
            .map(|(s, _)| *s)
            .collect();
        Ok(Prepared {
            plan,
            me,
            blocks: mine,
            packet_src,
            packet_totals,
            flag_stride,
            entry_peers,
            credit_to,
            credit_from,
        })
    }

    /// Blocks this rank runs.
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }
}

/// One rank's buffers for one invocation (logical views, aliasing already applied), as
/// reached from this rank: far peers' areas have no span (port ranges only).
#[derive(Debug, Clone)]
pub(crate) struct RankBufs {
    pub(crate) input: Area,
    pub(crate) output: Area,
    /// Scratch data area (non-packet scratch chunks), this invocation's rotation copy.
    pub(crate) scratch: Area,
    /// Scratch packet area, this invocation's rotation copy.
    pub(crate) packets: Area,
}

impl Default for RankBufs {
    fn default() -> Self {
        RankBufs {
            input: Area::EMPTY,
            output: Area::EMPTY,
            scratch: Area::EMPTY,
            packets: Area::EMPTY,
        }
    }
}

/// Bytes of the packet area for `count` elements: 16 per 8 data bytes, each chunk from
/// a 128-byte line of its own (see `packet_range`). A chunk starting at data byte x
/// (index i) starts at line ceil(x / 64) + i and ends by line ceil(y / 64) + i + 1,
/// where y is its end: no later than the next chunk's start, and the last by line
/// ceil(data / 64) + chunks.
pub fn packet_area_bytes(plan: &Plan, count: u64, dtype: DataType) -> u64 {
    if !plan.uses_packets() {
        return 0;
    }
    let data = plan.scratch.elems(count) * dtype.size() as u64;
    PACKET_LINE * (data.div_ceil(PACKET_LINE / 2) + plan.scratch.chunks.max(1) as u64)
}

/// Alignment of each chunk's packets in the packet area, in bytes: a cache line, so
/// that a warp's 16-byte packet stores touch whole 32-byte sectors (plan.h
/// `packet_offset`).
const PACKET_LINE: u64 = 128;

/// Everything one invocation needs.
pub(crate) struct Invocation<'a> {
    pub(crate) prep: &'a Prepared,
    pub(crate) bufs: &'a [RankBufs],
    pub(crate) count: u64,
    pub(crate) dtype: DataType,
    pub(crate) op: RedOp,
    /// First flag number of this invocation (invocation index × stride).
    pub(crate) flag_base: u64,
    pub(crate) sync: &'a SyncTable,
}

thread_local! {
    static TMP: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn flag_of(base: u64, k: u32) -> u32 {
    ((base.wrapping_add(k as u64)) % (u32::MAX as u64)) as u32 + 1
}

/// Word range `[first, first + n)` of a packet chunk in the packet area. Word i of a
/// chunk is `{data word i, flag}`. A chunk starts on a 128-byte line (16 words) and
/// owns whole lines up to the next chunk's first, so that the GPU writes two words as
/// one LL16 packet and a warp's packets fill whole sectors (plan.h `packet_offset`,
/// the same arithmetic); the range covers the data words only.
fn packet_range(plan: &Plan, c: &ChunkRef, count: u64, s: u64) -> (usize, usize) {
    let (a, b) = plan.chunk_range(c, 0, count);
    let line = (a * s).div_ceil(PACKET_LINE / 2) + c.index as u64;
    let first = line * PACKET_LINE / 8;
    let n = ((b - a) * s).div_ceil(4);
    (first as usize, n as usize)
}

/// What a block released from [`BlockBarrier`] by another block's failure returns.
const RELEASED: &str = "another block of this rank failed";

/// The barrier of one rank's blocks. Unlike `std::sync::Barrier` it lets the waiting
/// blocks go, with an error, once a block failed (it will never arrive) or the
/// communicator must stop (dead peer, abort).
#[derive(Debug)]
pub(crate) struct BlockBarrier {
    n: usize,
    /// Blocks arrived in this round, and the round.
    state: Mutex<(usize, u64)>,
    cv: Condvar,
    failed: AtomicBool,
}

impl BlockBarrier {
    fn new(n: usize) -> Self {
        BlockBarrier {
            n,
            state: Mutex::new((0, 0)),
            cv: Condvar::new(),
            failed: AtomicBool::new(false),
        }
    }

    /// A block failed: release every waiter, now and later.
    fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
        let _g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.cv.notify_all();
    }

    fn wait(&self, stop: &super::sync::Stop) -> Result<(), CommError> {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let round = g.1;
        g.0 += 1;
        if g.0 == self.n {
            *g = (0, round.wrapping_add(1));
            self.cv.notify_all();
            return Ok(());
        }
        loop {
            if g.1 != round {
                return Ok(());
            }
            stop.check()?;
            if self.failed.load(Ordering::SeqCst) {
                return Err(CommError::Broken(RELEASED.into()));
            }
            g = self
                .cv
                .wait_timeout(g, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Invocation<'_> {
    /// Run every block of this rank; returns the first error.
    pub(crate) fn run(&self) -> Result<(), CommError> {
        for &p in &self.prep.entry_peers {
            self.sync.signal(p, KIND_P2P, ENTRY_TAG)?;
        }
        for &p in &self.prep.entry_peers {
            self.sync.wait(p, KIND_P2P, ENTRY_TAG)?;
        }
        let rotation = u64::from(self.prep.plan.scratch_rotation);
        for &p in &self.prep.credit_to {
            self.sync.await_credit(p, rotation)?;
        }
        self.run_blocks()?;
        // Every packet this rank reads in this invocation has been read.
        for &s in &self.prep.credit_from {
            self.sync.signal(s, KIND_P2P, CREDIT_TAG)?;
        }
        // Packet writes from far peers were waited for without being consumed.
        for &(from, b, n) in &self.prep.packet_totals {
            if self.sync.is_far(from) {
                self.sync.consume(from, KIND_PACKETS, b, n);
            }
        }
        Ok(())
    }

    fn run_blocks(&self) -> Result<(), CommError> {
        let nb = self.prep.blocks.len();
        match nb {
            0 => Ok(()),
            1 => self.run_block(0, None),
            _ => {
                let barrier = BlockBarrier::new(nb);
                let run = |b: usize| {
                    let r = self.run_block(b, Some(&barrier));
                    if r.is_err() {
                        barrier.fail();
                    }
                    r
                };
                let run = &run;
                std::thread::scope(|s| {
                    let handles: Vec<_> = (1..nb).map(|b| s.spawn(move || run(b))).collect();
                    let mut results = vec![run(0)];
                    for h in handles {
                        results.push(h.join().unwrap_or_else(|_| {
                            Err(CommError::Invalid(
                                "an executor block thread panicked".into(),
                            ))
                        }));
                    }
                    // The cause, not a block released from the barrier because of it.
                    let mut errors = results.into_iter().filter_map(Result::err);
                    let first = errors.next();
                    match first {
                        Some(CommError::Broken(ref m)) if m == RELEASED => Err(errors
                            .next()
                            .or(first)
                            .unwrap_or_else(|| CommError::Broken(RELEASED.into()))),
                        Some(e) => Err(e),
                        None => Ok(()),
                    }
                })
            }
        }
    }

    fn area(&self, rank: u32, c: &ChunkRef) -> Result<Area, CommError> {
        let s = self.dtype.size() as u64;
        let (a, b) = self.prep.plan.chunk_range(c, 0, self.count);
        let bufs = &self.bufs[rank as usize];
        let base = match c.buf {
            BufferKind::Input => &bufs.input,
            BufferKind::Output => &bufs.output,
            BufferKind::Scratch => &bufs.scratch,
        };
        base.sub((a * s) as usize, ((b - a) * s) as usize)
            .ok_or_else(|| self.oob(rank, c, base.len))
    }

    /// A chunk of a rank's buffer as mapped here; an error for far peers, whose memory
    /// is never mapped (only port ops reach it).
    fn span(&self, rank: u32, c: &ChunkRef) -> Result<Span, CommError> {
        let a = self.area(rank, c)?;
        a.span.ok_or_else(|| self.far_error(rank))
    }

    /// A chunk as a port range (this rank's registered buffer, or a far peer's).
    fn port(&self, rank: u32, c: &ChunkRef) -> Result<PortRange, CommError> {
        let a = self.area(rank, c)?;
        a.port.ok_or_else(|| self.unregistered(rank))
    }

    fn far_error(&self, rank: u32) -> CommError {
        CommError::Invalid(format!(
            "plan `{}`: rank {} tried to access the memory of rank {rank}, which is on another node; only port-channel put/signal/flush/packet ops cross nodes (use a multi-node algorithm)",
            self.prep.plan.name, self.prep.me
        ))
    }

    fn unregistered(&self, rank: u32) -> CommError {
        CommError::Invalid(format!(
            "plan `{}`: rank {rank}'s buffer is not registered for port I/O (executor bug)",
            self.prep.plan.name
        ))
    }

    fn packet_area(&self, rank: u32, c: &ChunkRef) -> Result<(Area, usize), CommError> {
        let s = self.dtype.size() as u64;
        let (first, n) = packet_range(&self.prep.plan, c, self.count, s);
        let area = &self.bufs[rank as usize].packets;
        let (a, b) = self.prep.plan.chunk_range(c, 0, self.count);
        let sub = area
            .sub(first * 8, n * 8)
            .ok_or_else(|| self.oob(rank, c, area.len))?;
        Ok((sub, ((b - a) * s) as usize))
    }

    fn packet_span(&self, rank: u32, c: &ChunkRef) -> Result<(Span, usize), CommError> {
        let (a, n) = self.packet_area(rank, c)?;
        Ok((a.span.ok_or_else(|| self.far_error(rank))?, n))
    }

    /// True when a port-channel op to `peer` must go over the port (another node).
    #[inline]
    fn far(&self, peer: u32, channel: ChannelKind) -> bool {
        channel == ChannelKind::Port && self.sync.is_far(peer)
    }

    fn ports(&self) -> Result<&super::port::Ports, CommError> {
        self.sync
            .ports
            .as_deref()
            .ok_or_else(|| CommError::Invalid("a far peer without ports (executor bug)".into()))
    }

    fn oob(&self, rank: u32, c: &ChunkRef, len: usize) -> CommError {
        CommError::Invalid(format!(
            "plan `{}`: chunk {c:?} of rank {rank} lies outside its {len}-byte buffer at count {} (executor bug: buffers sized wrongly)",
            self.prep.plan.name, self.count
        ))
    }

    fn run_block(&self, b: usize, barrier: Option<&BlockBarrier>) -> Result<(), CommError> {
        let me = self.prep.me;
        let ops = &self.prep.blocks[b];
        // The op at this index was done with the one before it.
        let mut fused = None;
        for (i, (op, occ)) in ops.iter().enumerate() {
            if fused == Some(i) {
                continue;
            }
            match op {
                Op::Put {
                    peer,
                    src,
                    dst,
                    channel,
                    ..
                } if self.far(*peer, *channel) => {
                    let ports = self.ports()?;
                    let (dst, src) = (self.port(*peer, dst)?, self.port(me, src)?);
                    // A signal to the same peer right behind the put goes with it: one
                    // port call, the same order (see `Ports::write_signal`).
                    let sem = match ops.get(i + 1) {
                        Some((
                            Op::Signal {
                                peer: p,
                                channel: ChannelKind::Port,
                                tag,
                            },
                            _,
                        )) if p == peer => {
                            self.sync.far_sem(*p, kind_index(ChannelKind::Port), *tag)
                        }
                        _ => None,
                    };
                    match sem {
                        Some(sem) => {
                            ports.write_signal(*peer, &dst, &src, sem)?;
                            fused = Some(i + 1);
                        }
                        None => ports.write(*peer, &dst, &src)?,
                    }
                }
                Op::Put { peer, src, dst, .. } => {
                    raw::copy(self.span(*peer, dst)?, self.span(me, src)?);
                }
                Op::Get { peer, src, dst, .. } => {
                    raw::copy(self.span(me, dst)?, self.span(*peer, src)?);
                }
                Op::Signal { peer, channel, tag } => {
                    self.sync.signal(*peer, kind_index(*channel), *tag)?
                }
                Op::Wait { peer, channel, tag } => {
                    self.sync.wait(*peer, kind_index(*channel), *tag)?
                }
                // A flush makes the sources of earlier puts reusable, which every put
                // here already left so: host copies are complete on return, and port
                // writes return with their source reusable (`port` module docs).
                Op::Flush { .. } => {}
                Op::Copy { src, dst } => raw::copy(self.span(me, dst)?, self.span(me, src)?),
                Op::Reduce { srcs, dst } => {
                    let ops = srcs
                        .iter()
                        .map(|c| self.span(me, c))
                        .collect::<Result<Vec<_>, _>>()?;
                    self.reduce(self.span(me, dst)?, &ops)?;
                }
                Op::ReadReduce {
                    peers,
                    src,
                    local,
                    dst,
                    ..
                } => {
                    let mut ops = local
                        .iter()
                        .map(|c| self.span(me, c))
                        .collect::<Result<Vec<_>, _>>()?;
                    for p in peers {
                        ops.push(self.span(*p, src)?);
                    }
                    self.reduce(self.span(me, dst)?, &ops)?;
                }
                Op::PutPackets {
                    peer,
                    src,
                    dst,
                    channel,
                    ..
                } if self.far(*peer, *channel) => {
                    // Encode here, write the words into the peer's packet area, then
                    // count the write on (this rank, this block) at the peer: the
                    // reader waits for that count, so it never sees a word half-written.
                    let flag = flag_of(self.flag_base, occ[0]);
                    let (words, _) = self.packet_area(*peer, dst)?;
                    let encoded = encode_packets(self.span(me, src)?, words.len, flag);
                    let ports = self.ports()?;
                    let dst = words.port.ok_or_else(|| self.unregistered(*peer))?;
                    match self.sync.far_sem(*peer, KIND_PACKETS, b as u32) {
                        // the words and their count in one port call
                        Some(sem) => ports.write_bytes(*peer, &dst, &encoded, Some(sem))?,
                        None => {
                            ports.write_bytes(*peer, &dst, &encoded, None)?;
                            self.sync.signal(*peer, KIND_PACKETS, b as u32)?;
                        }
                    }
                }
                Op::PutPackets { peer, src, dst, .. } => {
                    let flag = flag_of(self.flag_base, occ[0]);
                    let (words, _) = self.packet_span(*peer, dst)?;
                    put_packets(words, self.span(me, src)?, flag);
                    self.sync.ring(*peer);
                }
                Op::ReadReducePackets {
                    packets,
                    local,
                    dst,
                } => {
                    let locals = local
                        .iter()
                        .map(|c| self.span(me, c))
                        .collect::<Result<Vec<_>, _>>()?;
                    // Far sources: wait until their writes of these packets were applied.
                    for ((p, _), (sb, nth)) in packets.iter().zip(&self.prep.packet_src[b][i]) {
                        if self.sync.is_far(*p) {
                            self.sync.wait_ahead(*p, KIND_PACKETS, *sb, *nth)?;
                        }
                    }
                    let mut pk = Vec::with_capacity(packets.len());
                    for ((p, c), k) in packets.iter().zip(occ) {
                        let (words, _) = self.packet_span(me, c)?;
                        pk.push((*p, words, flag_of(self.flag_base, *k)));
                    }
                    let at = local_position(packets, me);
                    self.read_reduce_packets(self.span(me, dst)?, &locals, at, &pk)?;
                }
                Op::SwitchReduce { src, dst } => {
                    let ops = (0..self.prep.plan.nranks)
                        .map(|r| self.span(r, src))
                        .collect::<Result<Vec<_>, _>>()?;
                    self.reduce(self.span(me, dst)?, &ops)?;
                }
                Op::SwitchBroadcast { src, dst } => {
                    let from = self.span(me, src)?;
                    for r in 0..self.prep.plan.nranks {
                        raw::copy(self.span(r, dst)?, from);
                    }
                }
                Op::Barrier => {
                    if let Some(b) = barrier {
                        b.wait(&self.sync.stop)?;
                    }
                }
                Op::Finalize { dst } => {
                    let (dtype, op, n) = (self.dtype, self.op, self.prep.plan.nranks as usize);
                    raw::with_mut(self.span(me, dst)?, |d| finalize(d, dtype, op, n))?;
                }
                Op::Loop { .. } => {
                    return Err(CommError::Invalid(
                        "nested loop reached the executor (plans are flattened first)".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `dst = ops[0] ⊕ ops[1] ⊕ …`, piece by piece. `dst` may be one of the operands.
    /// Left to right, as the plan IR says and the generated CUDA does, so ranks that
    /// reduce the same operands in the same order get the same bits. Where `dst`
    /// overlaps an operand after the first, each piece is summed aside and then stored,
    /// so that operand is read before `dst` is written.
    fn reduce(&self, dst: Span, ops: &[Span]) -> Result<(), CommError> {
        if ops.is_empty() {
            return Ok(());
        }
        let (dtype, op) = (self.dtype, self.op);
        let aside = ops[1..].iter().any(|o| o.overlaps(&dst));
        let len = dst.len;
        let (mut acc, mut next) = if aside {
            (vec![0u8; PIECE.min(len)], vec![0u8; PIECE.min(len)])
        } else {
            (Vec::new(), Vec::new())
        };
        let mut off = 0;
        while off < len {
            let n = PIECE.min(len - off);
            let d = dst.sub(off, n).unwrap_or(Span::EMPTY);
            let piece = |o: &Span| o.sub(off, n).unwrap_or(Span::EMPTY);
            if aside {
                let pieces: Vec<Span> = ops.iter().map(piece).collect();
                sum_aside(&mut acc[..n], &mut next[..n], &pieces, dtype, op)?;
                raw::write_from(d, &acc[..n]);
            } else {
                raw::copy(d, piece(&ops[0]));
                for o in &ops[1..] {
                    // no later operand overlaps dst here (else `aside`)
                    raw::with_slices(d, piece(o), |d, s| reduce_into(d, s, dtype, op))?;
                }
            }
            off += n;
        }
        Ok(())
    }

    /// `dst` = the packet sources' data reduced left to right, the locals' reduction
    /// entering before packet `at` ([`local_position`]), piece by piece, waiting for
    /// each word's flag.
    fn read_reduce_packets(
        &self,
        dst: Span,
        locals: &[Span],
        at: usize,
        packets: &[(u32, Span, u32)],
    ) -> Result<(), CommError> {
        let len = dst.len;
        let (dtype, op) = (self.dtype, self.op);
        // Wait for every source's last packet first (the sender stores its words in
        // order with release, so the last one carries all the others): one wait, and
        // at most one wake-up, for the whole op.
        let last = |words: &Span| {
            let w = raw::words(*words);
            w.last()
        };
        let missing = || {
            packets
                .iter()
                .filter(|(_, words, flag)| {
                    last(words).is_some_and(|w| ll_split(w.load(Ordering::Acquire)).1 != *flag)
                })
                .count()
        };
        self.sync.wait_packets(missing, || {
            let who: Vec<u32> = packets.iter().map(|p| p.0).collect();
            format!(
                "LL packets from ranks {who:?}: is every one of them alive and running the same collective?"
            )
        })?;
        let late = !locals.is_empty() && at > 0;
        TMP.with(|t| -> Result<(), CommError> {
            let mut tmp = t.borrow_mut();
            tmp.resize(3 * PIECE, 0);
            let (buf, rest) = tmp.split_at_mut(PIECE);
            let (mine, next) = rest.split_at_mut(PIECE);
            let mut off = 0;
            while off < len {
                let n = PIECE.min(len - off);
                let d = dst.sub(off, n).unwrap_or(Span::EMPTY);
                let ls = sub_all(locals, off, n);
                let mut have = false;
                if late {
                    // read before dst is written: in place a local is dst
                    sum_aside(&mut mine[..n], &mut next[..n], &ls, dtype, op)?;
                } else if !locals.is_empty() {
                    self.reduce(d, &ls)?;
                    have = true;
                }
                for (i, (p, words, flag)) in packets.iter().enumerate() {
                    if late && i == at {
                        raw::with_mut(d, |d| reduce_into(d, &mine[..n], dtype, op))?;
                    }
                    let w = words
                        .sub(off / 4 * 8, n.div_ceil(4) * 8)
                        .unwrap_or(Span::EMPTY);
                    let buf = &mut buf[..n];
                    self.read_packets(*p, w, *flag, buf)?;
                    if have {
                        raw::with_mut(d, |d| reduce_into(d, buf, dtype, op))?;
                    } else {
                        raw::write_from(d, buf);
                        have = true;
                    }
                }
                if late && at == packets.len() {
                    raw::with_mut(d, |d| reduce_into(d, &mine[..n], dtype, op))?;
                }
                off += n;
            }
            Ok(())
        })
    }

    /// Decode `out.len()` bytes from packet words carrying `flag`, waiting for each.
    fn read_packets(
        &self,
        from: u32,
        words: Span,
        flag: u32,
        out: &mut [u8],
    ) -> Result<(), CommError> {
        let w = raw::words(words);
        for (i, chunk) in out.chunks_mut(4).enumerate() {
            let word = &w[i];
            let mut v = word.load(Ordering::Acquire);
            if ll_split(v).1 != flag {
                self.sync.wait_packets(
                    || {
                        v = word.load(Ordering::Acquire);
                        usize::from(ll_split(v).1 != flag)
                    },
                    || {
                        format!(
                            "LL packets from rank {from} with flag {flag} (packet {i} still carries flag {}): is rank {from} alive and running the same collective?",
                            ll_split(word.load(Ordering::Relaxed)).1
                        )
                    },
                )?;
            }
            let data = ll_split(v).0.to_le_bytes();
            chunk.copy_from_slice(&data[..chunk.len()]);
        }
        Ok(())
    }
}

/// `src` as LL8 words with `flag`, `words` bytes (zero-padded), little-endian.
fn encode_packets(src: Span, words: usize, flag: u32) -> Vec<u8> {
    let mut data = vec![0u8; src.len.div_ceil(4) * 4];
    raw::read_into(src, &mut data[..src.len]);
    let mut out = Vec::with_capacity(words);
    for c in data.chunks_exact(4) {
        let d = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        out.extend_from_slice(&ll_word(d, flag).to_le_bytes());
    }
    out.resize(words, 0);
    out
}

/// `out` = spans[0] ⊕ spans[1] ⊕ … (equal lengths), left to right, read into `out` and
/// `next` (as long as `out`) so that spans overlapping the destination are read first.
fn sum_aside(
    out: &mut [u8],
    next: &mut [u8],
    spans: &[Span],
    dtype: DataType,
    op: RedOp,
) -> Result<(), CommError> {
    raw::read_into(spans[0], out);
    for s in &spans[1..] {
        raw::read_into(*s, next);
        reduce_into(out, next, dtype, op)?;
    }
    Ok(())
}

fn sub_all(spans: &[Span], off: usize, n: usize) -> Vec<Span> {
    spans
        .iter()
        .map(|s| s.sub(off, n).unwrap_or(Span::EMPTY))
        .collect()
}

/// Encode `src` as LL8 words with `flag` into `words` (release stores, in order).
fn put_packets(words: Span, src: Span, flag: u32) {
    let w = raw::words(words);
    let mut buf = [0u8; 1024];
    let mut off = 0;
    while off < src.len {
        let n = buf.len().min(src.len - off);
        let piece = &mut buf[..n.div_ceil(4) * 4];
        piece.fill(0);
        raw::read_into(src.sub(off, n).unwrap_or(Span::EMPTY), &mut piece[..n]);
        for (j, c) in piece.chunks_exact(4).enumerate() {
            let data = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            w[off / 4 + j].store(ll_word(data, flag), Ordering::Release);
        }
        off += n;
    }
}
