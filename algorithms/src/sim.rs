//! Reference plan simulator: executes a plan in one thread on per-rank `Vec<u8>` buffers.
//!
//! It proves plans right; it is not the host-emu executor. Memory model it enforces:
//! * a `Put` copies its source when it executes but the data lands in the peer only at
//!   the sender's next `Signal` on the same `(peer, channel, tag)` (or at the end of the
//!   plan) — so a receiver that reads before waiting sees stale (poisoned) data;
//! * `Get`, `ReadReduce` and `SwitchReduce` read peers' memory as it is at that moment;
//! * `PutPackets` land at once (data and flags travel together) and `ReadReducePackets`
//!   waits for them through the scheduler; `SwitchBroadcast` lands at once;
//! * unwritten output and scratch start as a poison byte pattern (`0xA5`), so a missing
//!   write shows as wrong data;
//! * out of place, writing the input is an error.
//!
//! Run it under several [`Policy`]s: a correct plan gives the same result for each.

use crate::dtype::{DataType, RedOp, finalize, reduce_into};
use crate::error::{AlgoError, Location};
use crate::plan::{BufferKind, ChunkRef, Collective, Op, Plan};
use crate::sched::{Policy, RunError, Scheduler, SemKey};
use std::collections::HashMap;

/// Poison byte for unwritten memory.
pub const POISON: u8 = 0xA5;

const IN: usize = 0;
const OUT: usize = 1;
const SCR: usize = 2;

/// A put in flight: (dst rank, physical buffer, byte offset, data).
type PendingPut = (usize, usize, usize, Vec<u8>);

struct State<'p> {
    plan: &'p Plan,
    count: u64,
    dtype: DataType,
    op: RedOp,
    /// bufs[rank][phys] with phys = IN, OUT, SCR.
    bufs: Vec<[Vec<u8>; 3]>,
    /// Puts in flight: (sem key) -> [(dst rank, phys, byte offset, data)].
    pending: HashMap<SemKey, Vec<PendingPut>>,
}

impl State<'_> {
    fn err(&self, at: &Location, msg: impl Into<String>) -> AlgoError {
        AlgoError::Sim {
            plan: self.plan.name.clone(),
            msg: format!("{at}: {}", msg.into()),
        }
    }

    /// Physical (buffer index, byte range) of a chunk on `rank`, applying in-place aliasing.
    fn resolve(&self, rank: u32, c: &ChunkRef) -> (usize, usize, usize) {
        let s = self.dtype.size() as u64;
        let (a, b) = self.plan.chunk_range(c, 0, self.count);
        let (phys, off) = match (c.buf, self.plan.in_place, self.plan.collective) {
            (BufferKind::Scratch, _, _) => (SCR, 0),
            (BufferKind::Input, false, _) => (IN, 0),
            (BufferKind::Output, false, _) => (OUT, 0),
            (BufferKind::Input, true, Collective::AllGather) => (OUT, rank as u64 * self.count),
            (BufferKind::Output, true, Collective::AllGather) => (OUT, 0),
            (BufferKind::Output, true, Collective::ReduceScatter) => (IN, rank as u64 * self.count),
            (BufferKind::Input, true, Collective::ReduceScatter) => (IN, 0),
            (_, true, _) => (IN, 0),
        };
        (phys, ((a + off) * s) as usize, ((b + off) * s) as usize)
    }

    fn read(&self, rank: u32, c: &ChunkRef) -> Vec<u8> {
        let (p, a, b) = self.resolve(rank, c);
        self.bufs[rank as usize][p][a..b].to_vec()
    }

    fn write(
        &mut self,
        at: &Location,
        rank: u32,
        c: &ChunkRef,
        data: &[u8],
    ) -> Result<(), AlgoError> {
        let (p, a, b) = self.resolve(rank, c);
        if p == IN && !self.plan.in_place {
            return Err(self.err(
                at,
                format!("writes rank {rank}'s input, which is read-only out of place"),
            ));
        }
        if b - a != data.len() {
            return Err(self.err(
                at,
                format!(
                    "size mismatch: {} bytes into a {}-byte chunk {c:?}",
                    data.len(),
                    b - a
                ),
            ));
        }
        self.bufs[rank as usize][p][a..b].copy_from_slice(data);
        Ok(())
    }

    fn fold(&self, at: &Location, parts: Vec<Vec<u8>>) -> Result<Vec<u8>, AlgoError> {
        let mut it = parts.into_iter();
        let Some(mut acc) = it.next() else {
            return Err(self.err(at, "reduction with no operands"));
        };
        for p in it {
            if p.len() != acc.len() {
                return Err(self.err(
                    at,
                    format!("reduction operands of {} and {} bytes", acc.len(), p.len()),
                ));
            }
            reduce_into(&mut acc, &p, self.dtype, self.op)?;
        }
        Ok(acc)
    }

    fn exec(&mut self, at: &Location, op: &Op) -> Result<(), AlgoError> {
        let me = at.rank;
        match op {
            Op::Put {
                peer,
                channel,
                tag,
                src,
                dst,
            } => {
                let data = self.read(me, src);
                let (p, a, b) = self.resolve(*peer, dst);
                if p == IN && !self.plan.in_place {
                    return Err(self.err(at, format!("puts into rank {peer}'s read-only input")));
                }
                if b - a != data.len() {
                    return Err(self.err(
                        at,
                        format!("put of {} bytes into a {}-byte chunk", data.len(), b - a),
                    ));
                }
                self.pending
                    .entry((me, *peer, *channel, *tag))
                    .or_default()
                    .push((*peer as usize, p, a, data));
            }
            Op::Signal { peer, channel, tag } => {
                for (r, p, a, d) in self
                    .pending
                    .remove(&(me, *peer, *channel, *tag))
                    .unwrap_or_default()
                {
                    self.bufs[r][p][a..a + d.len()].copy_from_slice(&d);
                }
            }
            Op::Wait { .. } | Op::Flush { .. } | Op::Barrier | Op::Loop { .. } => {}
            Op::Get { peer, src, dst, .. } => {
                let data = self.read(*peer, src);
                self.write(at, me, dst, &data)?;
            }
            Op::Copy { src, dst } => {
                let data = self.read(me, src);
                self.write(at, me, dst, &data)?;
            }
            Op::Reduce { srcs, dst } => {
                let parts = srcs.iter().map(|c| self.read(me, c)).collect();
                let v = self.fold(at, parts)?;
                self.write(at, me, dst, &v)?;
            }
            Op::ReadReduce {
                peers,
                src,
                local,
                dst,
                ..
            } => {
                let mut parts: Vec<_> = local.iter().map(|c| self.read(me, c)).collect();
                parts.extend(peers.iter().map(|p| self.read(*p, src)));
                let v = self.fold(at, parts)?;
                self.write(at, me, dst, &v)?;
            }
            Op::PutPackets { peer, src, dst, .. } => {
                let data = self.read(me, src);
                self.write(at, *peer, dst, &data)?;
            }
            Op::ReadReducePackets {
                packets,
                local,
                dst,
            } => {
                let mut parts: Vec<_> = local.iter().map(|c| self.read(me, c)).collect();
                parts.extend(packets.iter().map(|(_, c)| self.read(me, c)));
                let v = self.fold(at, parts)?;
                self.write(at, me, dst, &v)?;
            }
            Op::SwitchReduce { src, dst } => {
                let parts = (0..self.plan.nranks).map(|r| self.read(r, src)).collect();
                let v = self.fold(at, parts)?;
                self.write(at, me, dst, &v)?;
            }
            Op::SwitchBroadcast { src, dst } => {
                let data = self.read(me, src);
                for r in 0..self.plan.nranks {
                    self.write(at, r, dst, &data)?;
                }
            }
            Op::Finalize { dst } => {
                let mut v = self.read(me, dst);
                finalize(&mut v, self.dtype, self.op, self.plan.nranks as usize)?;
                self.write(at, me, dst, &v)?;
            }
        }
        Ok(())
    }
}

/// Execute `plan` for `count` elements of `dtype` reduced with `op`, on `inputs[rank]`
/// (each `input.factor * count` elements), interleaving blocks by `policy`. Returns each
/// rank's output buffer (`output.factor * count` elements; for in-place plans, the output
/// view of the shared buffer).
pub fn simulate(
    plan: &Plan,
    count: u64,
    dtype: DataType,
    op: RedOp,
    inputs: &[Vec<u8>],
    policy: Policy,
) -> Result<Vec<Vec<u8>>, AlgoError> {
    let n = plan.nranks as usize;
    let s = dtype.size() as u64;
    let sim_err = |msg: String| AlgoError::Sim {
        plan: plan.name.clone(),
        msg,
    };
    if inputs.len() != n || plan.ranks.len() != n {
        return Err(sim_err(format!(
            "{} inputs and {} rank programs for {n} ranks",
            inputs.len(),
            plan.ranks.len()
        )));
    }
    let in_bytes = (plan.input.elems(count) * s) as usize;
    let out_bytes = (plan.output.elems(count) * s) as usize;
    let scr_bytes = (plan.scratch.elems(count) * s) as usize;
    let mut bufs = Vec::with_capacity(n);
    for (r, input) in inputs.iter().enumerate() {
        if input.len() != in_bytes {
            return Err(sim_err(format!(
                "rank {r}'s input has {} bytes, expected {in_bytes}",
                input.len()
            )));
        }
        let mut b = [
            input.clone(),
            vec![POISON; out_bytes],
            vec![POISON; scr_bytes],
        ];
        if plan.in_place {
            match plan.collective {
                Collective::AllGather => {
                    let off = r * in_bytes;
                    b[OUT][off..off + in_bytes].copy_from_slice(input);
                    b[IN].clear();
                }
                _ => b[OUT].clear(),
            }
        }
        bufs.push(b);
    }
    let mut st = State {
        plan,
        count,
        dtype,
        op,
        bufs,
        pending: HashMap::new(),
    };
    let mut sched = Scheduler::new(plan);
    sched
        .run(policy, |at, o| st.exec(at, o))
        .map_err(|e| match e {
            RunError::Stuck(s) => sim_err(s.to_string()),
            RunError::Exec(e) => e,
        })?;
    // Puts never followed by a signal land at the end.
    let rest: Vec<_> = st.pending.drain().flat_map(|(_, v)| v).collect();
    for (r, p, a, d) in rest {
        st.bufs[r][p][a..a + d.len()].copy_from_slice(&d);
    }
    let whole_out = crate::plan::ChunkRef::span(BufferKind::Output, 0, plan.output.chunks);
    Ok((0..n as u32).map(|r| st.read(r, &whole_out)).collect())
}

/// What each rank's output must be (`None`: unspecified, e.g. a non-root's Reduce output).
pub fn reference(
    plan: &Plan,
    count: u64,
    dtype: DataType,
    op: RedOp,
    inputs: &[Vec<u8>],
) -> Result<Vec<Option<Vec<u8>>>, AlgoError> {
    let n = plan.nranks as usize;
    let cb = count as usize * dtype.size();
    let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    let root = plan.root.unwrap_or(0) as usize;
    Ok(match plan.collective {
        Collective::AllReduce => {
            let v = crate::dtype::reference_reduce(&refs, dtype, op)?;
            vec![Some(v); n]
        }
        Collective::Reduce => {
            let v = crate::dtype::reference_reduce(&refs, dtype, op)?;
            (0..n).map(|r| (r == root).then(|| v.clone())).collect()
        }
        Collective::ReduceScatter => {
            let v = crate::dtype::reference_reduce(&refs, dtype, op)?;
            (0..n)
                .map(|r| Some(v[r * cb..(r + 1) * cb].to_vec()))
                .collect()
        }
        Collective::AllGather => vec![Some(inputs.concat()); n],
        Collective::Broadcast => vec![Some(inputs[root].clone()); n],
        Collective::AllToAll => (0..n)
            .map(|r| {
                Some(
                    (0..n)
                        .flat_map(|p| inputs[p][r * cb..(r + 1) * cb].to_vec())
                        .collect(),
                )
            })
            .collect(),
        Collective::SendRecv => {
            let mut out = vec![None; n];
            for &(s, d) in &plan.pairs {
                out[d as usize] = Some(inputs[s as usize].clone());
            }
            out
        }
    })
}

/// Deterministic test inputs whose reduction with `op` is exact in every type and any
/// order: sum/avg use {-1, 0, 1}, prod {-1, 1, 2}, min/max -3..=5.
pub fn test_inputs(plan: &Plan, count: u64, dtype: DataType, op: RedOp, seed: u64) -> Vec<Vec<u8>> {
    let elems = plan.input.elems(count);
    (0..plan.nranks as u64)
        .map(|r| {
            let mut v = Vec::with_capacity(elems as usize * dtype.size());
            for i in 0..elems {
                let mut x = seed ^ (r << 40) ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                x ^= x >> 31;
                x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
                x ^= x >> 29;
                let val = match op {
                    RedOp::Sum | RedOp::Avg => (x % 3) as f64 - 1.0,
                    RedOp::Prod => [-1.0, 1.0, 2.0][(x % 3) as usize],
                    RedOp::Min | RedOp::Max => (x % 9) as f64 - 3.0,
                };
                dtype.encode(val, &mut v);
            }
            v
        })
        .collect()
}

/// Simulate `plan` under three scheduling policies on [`test_inputs`] and compare with
/// [`reference()`]; an error names the policy, rank and first wrong element.
pub fn verify(
    plan: &Plan,
    count: u64,
    dtype: DataType,
    op: RedOp,
    seed: u64,
) -> Result<(), AlgoError> {
    let inputs = test_inputs(plan, count, dtype, op, seed);
    let want = reference(plan, count, dtype, op, &inputs)?;
    for policy in [Policy::InOrder, Policy::Reverse, Policy::Seeded(seed)] {
        let got = simulate(plan, count, dtype, op, &inputs, policy)?;
        for (r, (g, w)) in got.iter().zip(&want).enumerate() {
            let Some(w) = w else { continue };
            if g != w {
                let s = dtype.size();
                let i = (0..g.len() / s)
                    .find(|&i| g[i * s..(i + 1) * s] != w[i * s..(i + 1) * s])
                    .unwrap_or(0);
                let wrong = (0..g.len() / s)
                    .filter(|&i| g[i * s..(i + 1) * s] != w[i * s..(i + 1) * s])
                    .count();
                return Err(AlgoError::Sim {
                    plan: plan.name.clone(),
                    msg: format!(
                        "{policy:?}, count {count}, {dtype}, {op:?}: rank {r} has {wrong} wrong elements; first at {i}: got {} want {}",
                        dtype.decode(g, i),
                        dtype.decode(w, i)
                    ),
                });
            }
        }
    }
    Ok(())
}
