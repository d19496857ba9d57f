//! Plan validation: static checks, then a deadlock check by symbolic execution.
//!
//! Rejected, with the rank, block and op index where one exists:
//! * unknown schema version, wrong collective, rank-count mismatch, bad buffer layout;
//! * peers out of range, `peer == self` on a channel op, a channel kind the op cannot use;
//! * chunk references out of bounds (loops included), chunks of different sizes in one op;
//! * writes into the input out of place (it is the user's read-only send buffer);
//! * packets outside scratch, scratch used but not declared;
//! * a `Wait` no `Signal` can satisfy, a `Signal` nobody waits for (it would leak into the
//!   next invocation), the same for packets; unequal barrier counts between blocks;
//! * deadlock: the [`crate::sched`] scheduler cannot finish; the stuck ops are listed.

use crate::error::{AlgoError, Location};
use crate::plan::{BufferKind, ChannelKind, ChunkRef, Collective, Op, Plan, SCHEMA_VERSION};
use crate::sched::{Policy, RunError, Scheduler};
use std::collections::HashMap;

/// Counts at which chunk sizes within one op are compared.
const SAMPLE_COUNTS: [u64; 10] = [1, 2, 3, 5, 7, 8, 13, 64, 1000, 1001];

/// Check `plan` implements `collective` over `nranks` ranks and can run to completion.
pub fn validate(plan: &Plan, collective: Collective, nranks: u32) -> Result<(), AlgoError> {
    let whole = |msg: String| AlgoError::Plan {
        plan: plan.name.clone(),
        msg,
    };
    if plan.schema_version != SCHEMA_VERSION {
        return Err(AlgoError::Schema {
            found: plan.schema_version,
            supported: SCHEMA_VERSION,
        });
    }
    if plan.collective != collective {
        return Err(whole(format!(
            "it implements {} but was asked to run {}; build a {} plan",
            plan.collective.name(),
            collective.name(),
            collective.name()
        )));
    }
    if plan.nranks != nranks || plan.ranks.len() != nranks as usize {
        return Err(whole(format!(
            "rank count mismatch: the communicator has {nranks} ranks, the plan declares {} and has {} rank programs; rebuild it for {nranks} ranks",
            plan.nranks,
            plan.ranks.len()
        )));
    }
    let (fi, fo) = collective.io_factors(nranks);
    if plan.input.factor != fi || plan.output.factor != fo {
        return Err(whole(format!(
            "buffer sizes (input {}×count, output {}×count) differ from {}'s (input {fi}×, output {fo}×)",
            plan.input.factor,
            plan.output.factor,
            collective.name()
        )));
    }
    for (name, spec) in [
        ("input", plan.input),
        ("output", plan.output),
        ("scratch", plan.scratch),
    ] {
        if spec.chunks == 0 {
            return Err(whole(format!("{name} has 0 chunks; use at least 1")));
        }
    }
    if plan.scratch_rotation == 0 {
        return Err(whole(
            "scratch_rotation is 0; use 1 (no rotation) or more".into(),
        ));
    }
    match collective {
        Collective::Broadcast | Collective::Reduce => match plan.root {
            Some(r) if r < nranks => {}
            other => {
                return Err(whole(format!(
                    "root {other:?} is missing or not a rank of {nranks}"
                )));
            }
        },
        Collective::SendRecv => {
            if let Some(p) = plan
                .pairs
                .iter()
                .find(|(s, d)| *s >= nranks || *d >= nranks)
            {
                return Err(whole(format!(
                    "send/recv pair {p:?} names a rank outside 0..{nranks}"
                )));
            }
        }
        _ => {}
    }

    // Static per-op checks on the plan as written (loops checked over all iterations).
    for (r, rp) in plan.ranks.iter().enumerate() {
        for (b, blk) in rp.blocks.iter().enumerate() {
            for (i, op) in blk.ops.iter().enumerate() {
                let loc = Location {
                    rank: r as u32,
                    block: b,
                    op: i,
                    in_loop: None,
                };
                match op {
                    Op::Loop { iterations, body } => {
                        if *iterations == 0 {
                            return Err(at(
                                plan,
                                &loc,
                                "loop with 0 iterations; remove it or use ≥ 1",
                            ));
                        }
                        for (j, o) in body.iter().enumerate() {
                            let l = Location {
                                in_loop: Some((j, 0)),
                                ..loc.clone()
                            };
                            if matches!(o, Op::Loop { .. }) {
                                return Err(at(
                                    plan,
                                    &l,
                                    "nested loops are not supported; unroll the inner loop",
                                ));
                            }
                            check_op(plan, &l, o, *iterations)?;
                        }
                    }
                    o => check_op(plan, &loc, o, 1)?,
                }
            }
        }
    }

    // Per-op chunk size agreement, signal/wait and packet balance, barrier counts.
    let flat = plan.flatten();
    let mut sems: HashMap<_, (Vec<Location>, Vec<Location>)> = HashMap::new();
    let mut pkts: HashMap<_, (Vec<Location>, Vec<Location>)> = HashMap::new();
    for (r, blocks) in flat.iter().enumerate() {
        let me = r as u32;
        let mut barrier_counts = Vec::new();
        for ops in blocks {
            barrier_counts.push(ops.iter().filter(|(_, o)| matches!(o, Op::Barrier)).count());
            for (loc, op) in ops {
                check_sizes(plan, loc, op)?;
                match op {
                    Op::Signal { peer, channel, tag } => sems
                        .entry((me, *peer, *channel, *tag))
                        .or_default()
                        .0
                        .push(loc.clone()),
                    Op::Wait { peer, channel, tag } => sems
                        .entry((*peer, me, *channel, *tag))
                        .or_default()
                        .1
                        .push(loc.clone()),
                    Op::PutPackets { peer, dst, .. } => pkts
                        .entry((me, *peer, dst.index, dst.count))
                        .or_default()
                        .0
                        .push(loc.clone()),
                    Op::ReadReducePackets { packets, .. } => {
                        for (p, c) in packets {
                            pkts.entry((*p, me, c.index, c.count))
                                .or_default()
                                .1
                                .push(loc.clone());
                        }
                    }
                    _ => {}
                }
            }
        }
        if let Some(b) = barrier_counts.iter().position(|&c| c != barrier_counts[0]) {
            return Err(whole(format!(
                "rank {r}: block {b} has {} barriers but block 0 has {}; every block of a rank must reach the same barriers",
                barrier_counts[b], barrier_counts[0]
            )));
        }
    }
    let mut keys: Vec<_> = sems.keys().copied().collect();
    keys.sort();
    for k in keys {
        let (sig, wai) = &sems[&k];
        if wai.len() > sig.len() {
            let l = &wai[sig.len()];
            return Err(at(
                plan,
                l,
                &format!(
                    "wait on rank {} → {} ({:?}, tag {}) can never be satisfied: {} signal(s) are sent for {} wait(s); add the matching Signal on rank {}",
                    k.0,
                    k.1,
                    k.2,
                    k.3,
                    sig.len(),
                    wai.len(),
                    k.0
                ),
            ));
        }
        if sig.len() > wai.len() {
            let l = &sig[wai.len()];
            return Err(at(
                plan,
                l,
                &format!(
                    "signal rank {} → {} ({:?}, tag {}) is never waited for ({} signals, {} waits); it would leak into the next invocation",
                    k.0,
                    k.1,
                    k.2,
                    k.3,
                    sig.len(),
                    wai.len()
                ),
            ));
        }
    }
    let mut keys: Vec<_> = pkts.keys().copied().collect();
    keys.sort();
    for k in keys {
        let (sent, read) = &pkts[&k];
        if read.len() > sent.len() {
            return Err(at(
                plan,
                &read[sent.len()],
                &format!(
                    "reads packets from rank {} in scratch chunk {} that rank {} never sends; add the PutPackets",
                    k.0, k.2, k.0
                ),
            ));
        }
        if sent.len() > read.len() {
            return Err(at(
                plan,
                &sent[read.len()],
                &format!(
                    "packets sent to rank {} scratch chunk {} are never read there",
                    k.1, k.2
                ),
            ));
        }
    }

    // Deadlock: run the scheduler without data.
    let mut sched = Scheduler::new(plan);
    match sched.run(Policy::InOrder, |_, _| Ok::<(), ()>(())) {
        Ok(()) => Ok(()),
        Err(RunError::Stuck(s)) => {
            let first = s
                .blocked
                .first()
                .map(|(l, _)| l.to_string())
                .unwrap_or_default();
            Err(whole(format!("deadlock starting at {first}: {s}")))
        }
        Err(RunError::Exec(())) => Ok(()),
    }
}

fn at(plan: &Plan, loc: &Location, msg: &str) -> AlgoError {
    AlgoError::PlanAt {
        plan: plan.name.clone(),
        at: loc.clone(),
        msg: msg.to_string(),
    }
}

fn check_op(plan: &Plan, loc: &Location, op: &Op, iterations: u32) -> Result<(), AlgoError> {
    let me = loc.rank;
    let n = plan.nranks;
    // Peers.
    for p in op.peers() {
        if p >= n {
            return Err(at(
                plan,
                loc,
                &format!("peer {p} is out of range (ranks are 0..{n})"),
            ));
        }
        if p == me {
            return Err(at(
                plan,
                loc,
                &format!(
                    "{} names this rank ({me}) as its peer; use a local Copy/Reduce instead",
                    kind(op)
                ),
            ));
        }
    }
    // Channel kinds.
    let ch = match op {
        Op::Put { channel, .. }
        | Op::Get { channel, .. }
        | Op::Signal { channel, .. }
        | Op::Wait { channel, .. }
        | Op::Flush { channel, .. }
        | Op::PutPackets { channel, .. } => Some(*channel),
        Op::ReadReduce { channel, .. } => {
            if *channel != ChannelKind::Memory {
                return Err(at(
                    plan,
                    loc,
                    "read-reduce needs mapped peer memory: use a memory channel",
                ));
            }
            None
        }
        _ => None,
    };
    if ch == Some(ChannelKind::Switch) {
        return Err(at(
            plan,
            loc,
            &format!(
                "{} cannot use a switch channel; use SwitchReduce/SwitchBroadcast",
                kind(op)
            ),
        ));
    }
    if let Op::ReadReduce { peers, .. } = op
        && peers.is_empty()
    {
        return Err(at(plan, loc, "read-reduce with no peers"));
    }
    if let Op::Reduce { srcs, .. } = op
        && srcs.is_empty()
    {
        return Err(at(plan, loc, "reduce with no sources"));
    }
    if let Op::ReadReducePackets { packets, local, .. } = op {
        if packets.is_empty() && local.is_empty() {
            return Err(at(plan, loc, "read-reduce-packets with no operands"));
        }
        if let Some((_, c)) = packets.iter().find(|(_, c)| c.buf != BufferKind::Scratch) {
            return Err(at(
                plan,
                loc,
                &format!("packets are read from {:?}; packets live in scratch", c.buf),
            ));
        }
    }
    if let Op::PutPackets { dst, .. } = op
        && dst.buf != BufferKind::Scratch
    {
        return Err(at(
            plan,
            loc,
            &format!(
                "packets are put into {:?}; packets must go to scratch",
                dst.buf
            ),
        ));
    }
    // Chunks.
    for (c, written, remote) in op.chunks() {
        let spec = plan.spec(c.buf);
        if c.count == 0 {
            return Err(at(
                plan,
                loc,
                &format!("chunk reference {c:?} covers 0 chunks; use count ≥ 1"),
            ));
        }
        let last = c.index as u64 + (iterations as u64 - 1) * c.step as u64 + c.count as u64;
        if last > spec.chunks as u64 {
            return Err(at(
                plan,
                loc,
                &format!(
                    "chunk {:?}[{}..{}] is out of bounds: the buffer has {} chunks",
                    c.buf,
                    last - c.count as u64,
                    last,
                    spec.chunks
                ),
            ));
        }
        if c.buf == BufferKind::Scratch && spec.factor == 0 {
            return Err(at(
                plan,
                loc,
                "uses scratch but the plan declares no scratch (factor 0)",
            ));
        }
        if written && c.buf == BufferKind::Input && !plan.in_place {
            let whose = if remote { "a peer's" } else { "this rank's" };
            return Err(at(
                plan,
                loc,
                &format!(
                    "{} writes into {whose} input, which is read-only out of place; write to output or scratch",
                    kind(op)
                ),
            ));
        }
    }
    Ok(())
}

fn check_sizes(plan: &Plan, loc: &Location, op: &Op) -> Result<(), AlgoError> {
    let chunks: Vec<ChunkRef> = op.chunks().into_iter().map(|(c, _, _)| c).collect();
    if chunks.len() < 2 {
        return Ok(());
    }
    for count in SAMPLE_COUNTS {
        let lens: Vec<u64> = chunks
            .iter()
            .map(|c| {
                let (a, b) = plan.chunk_range(c, 0, count);
                b - a
            })
            .collect();
        if lens.iter().any(|&l| l != lens[0]) {
            return Err(at(
                plan,
                loc,
                &format!(
                    "{} mixes chunks of different sizes at count {count}: {lens:?} elements; use chunks of equal size",
                    kind(op)
                ),
            ));
        }
    }
    Ok(())
}

fn kind(op: &Op) -> &'static str {
    match op {
        Op::Put { .. } => "put",
        Op::Get { .. } => "get",
        Op::Signal { .. } => "signal",
        Op::Wait { .. } => "wait",
        Op::Flush { .. } => "flush",
        Op::Copy { .. } => "copy",
        Op::Reduce { .. } => "reduce",
        Op::ReadReduce { .. } => "read-reduce",
        Op::PutPackets { .. } => "put-packets",
        Op::ReadReducePackets { .. } => "read-reduce-packets",
        Op::SwitchReduce { .. } => "switch-reduce",
        Op::SwitchBroadcast { .. } => "switch-broadcast",
        Op::Barrier => "barrier",
        Op::Finalize { .. } => "finalize",
        Op::Loop { .. } => "loop",
    }
}
