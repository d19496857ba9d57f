//! AllGather, ReduceScatter, Broadcast, Reduce, AllToAll and SendRecv builders.

use super::*;
use crate::plan::{BufferSpec, Collective, Op, Plan};

/// AllGather all-pairs: every rank puts its input into chunk `rank` of every peer's
/// output and signals; then waits for every peer. One block, no scratch.
pub fn allgather_allpairs(nranks: u32, in_place: bool) -> Result<Plan, AlgoError> {
    check_n(nranks, "allgather_allpairs")?;
    let mut plan = Plan::new(
        Collective::AllGather,
        "allgather-allpairs",
        nranks,
        in_place,
    );
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    plan.output.chunks = nranks;
    for r in 0..nranks {
        if !in_place {
            push(
                &mut plan,
                r,
                0,
                Op::Copy {
                    src: inp(0),
                    dst: out(r),
                },
            );
        }
        for p in others(nranks, r) {
            push(&mut plan, r, 0, put(p, MEM, 0, inp(0), out(r)));
            push(&mut plan, r, 0, signal(p, MEM, 0));
        }
        for p in others(nranks, r) {
            push(&mut plan, r, 0, wait(p, MEM, 0));
        }
    }
    Ok(plan)
}

/// AllGather ring: n-1 steps, each rank forwards to the next rank the chunk it received
/// last; each chunk is cut into `pipeline` parts looped over. No scratch.
pub fn allgather_ring(nranks: u32, in_place: bool, pipeline: u32) -> Result<Plan, AlgoError> {
    check_n(nranks, "allgather_ring")?;
    check_pos(pipeline, "pipeline", "allgather_ring")?;
    let mut plan = Plan::new(Collective::AllGather, "allgather-ring", nranks, in_place);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let (n, pp) = (nranks, pipeline);
    plan.input.chunks = pp;
    plan.output.chunks = n * pp;
    for r in 0..n {
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let c = |sg: u32| out(sg * pp).stepping(1);
        let mut body = Vec::new();
        if !in_place {
            body.push(Op::Copy {
                src: inp(0).stepping(1),
                dst: c(r),
            });
        }
        for s in 0..n - 1 {
            let ks = (r + n - s) % n;
            body.push(put(next, MEM, 0, c(ks), c(ks)));
            body.push(signal(next, MEM, 0));
            body.push(wait(prev, MEM, 0));
        }
        push(
            &mut plan,
            r,
            0,
            Op::Loop {
                iterations: pp,
                body,
            },
        );
    }
    Ok(plan)
}

/// ReduceScatter all-pairs: every rank puts input chunk p into slot `rank` of peer p's
/// scratch and signals, waits for every peer, then reduces its own chunk with the slots.
/// Scratch `n × count`, rotated over 2 copies.
pub fn reducescatter_allpairs(nranks: u32, in_place: bool) -> Result<Plan, AlgoError> {
    check_n(nranks, "reducescatter_allpairs")?;
    let mut plan = Plan::new(
        Collective::ReduceScatter,
        "reducescatter-allpairs",
        nranks,
        in_place,
    );
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let n = nranks;
    plan.input.chunks = n;
    plan.scratch = BufferSpec {
        factor: n,
        chunks: n,
    };
    plan.scratch_rotation = 2;
    for r in 0..n {
        for p in others(n, r) {
            push(&mut plan, r, 0, put(p, MEM, 0, inp(p), scr(r)));
            push(&mut plan, r, 0, signal(p, MEM, 0));
        }
        for p in others(n, r) {
            push(&mut plan, r, 0, wait(p, MEM, 0));
        }
        let mut srcs = vec![inp(r)];
        srcs.extend(others(n, r).map(scr));
        push(&mut plan, r, 0, Op::Reduce { srcs, dst: out(0) });
        push(&mut plan, r, 0, Op::Finalize { dst: out(0) });
    }
    Ok(plan)
}

/// ReduceScatter ring: n-1 steps; partial sums travel around the ring in scratch (a
/// receive region and an accumulate region, each `n × count`), the last step reduces into
/// the output. Ends with an acknowledgement from the next rank so the next invocation
/// cannot overwrite scratch still being read. `pipeline` parts per chunk, looped over.
pub fn reducescatter_ring(nranks: u32, in_place: bool, pipeline: u32) -> Result<Plan, AlgoError> {
    check_n(nranks, "reducescatter_ring")?;
    check_pos(pipeline, "pipeline", "reducescatter_ring")?;
    let mut plan = Plan::new(
        Collective::ReduceScatter,
        "reducescatter-ring",
        nranks,
        in_place,
    );
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let (n, pp) = (nranks, pipeline);
    plan.input.chunks = n * pp;
    plan.output.chunks = pp;
    plan.scratch = BufferSpec {
        factor: 2 * n,
        chunks: 2 * n * pp,
    };
    let m = |x: i64| x.rem_euclid(n as i64) as u32;
    for r in 0..n {
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let i = |sg: u32| inp(sg * pp).stepping(1);
        let recv = |sg: u32| scr(sg * pp).stepping(1);
        let acc = |sg: u32| scr(n * pp + sg * pp).stepping(1);
        let mut body = Vec::new();
        for s in 0..n - 1 {
            let ks = m(r as i64 - s as i64 - 1);
            let src = if s == 0 { i(ks) } else { acc(ks) };
            body.push(put(next, MEM, 0, src, recv(ks)));
            body.push(signal(next, MEM, 0));
            body.push(wait(prev, MEM, 0));
            let kr = m(r as i64 - s as i64 - 2);
            let dst = if s == n - 2 {
                out(0).stepping(1)
            } else {
                acc(kr)
            };
            body.push(Op::Reduce {
                srcs: vec![i(kr), recv(kr)],
                dst,
            });
        }
        body.push(Op::Finalize {
            dst: out(0).stepping(1),
        });
        body.push(signal(prev, MEM, 1));
        body.push(wait(next, MEM, 1));
        push(
            &mut plan,
            r,
            0,
            Op::Loop {
                iterations: pp,
                body,
            },
        );
    }
    Ok(plan)
}

fn check_root(nranks: u32, root: u32, what: &str) -> Result<(), AlgoError> {
    if root >= nranks {
        return Err(AlgoError::Invalid(format!(
            "{what}: root {root} is not a rank of {nranks}"
        )));
    }
    Ok(())
}

/// Broadcast: the root puts each of `pipeline` parts into every rank's output and signals.
pub fn broadcast_direct(
    nranks: u32,
    root: u32,
    in_place: bool,
    pipeline: u32,
) -> Result<Plan, AlgoError> {
    check_n(nranks, "broadcast_direct")?;
    check_root(nranks, root, "broadcast_direct")?;
    check_pos(pipeline, "pipeline", "broadcast_direct")?;
    let mut plan = Plan::new(Collective::Broadcast, "broadcast-direct", nranks, in_place);
    plan.root = Some(root);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    plan.input.chunks = pipeline;
    plan.output.chunks = pipeline;
    let (i, o) = (inp(0).stepping(1), out(0).stepping(1));
    for r in 0..nranks {
        let mut body = Vec::new();
        if r == root {
            if !in_place {
                body.push(Op::Copy { src: i, dst: o });
            }
            for p in others(nranks, r) {
                body.push(put(p, MEM, 0, i, o));
                body.push(signal(p, MEM, 0));
            }
        } else {
            body.push(wait(root, MEM, 0));
        }
        push(
            &mut plan,
            r,
            0,
            Op::Loop {
                iterations: pipeline,
                body,
            },
        );
    }
    Ok(plan)
}

/// Broadcast along a chain root → root+1 → …: each rank forwards part j as soon as it has
/// it, so `pipeline` parts overlap along the chain.
pub fn broadcast_chain(
    nranks: u32,
    root: u32,
    in_place: bool,
    pipeline: u32,
) -> Result<Plan, AlgoError> {
    check_n(nranks, "broadcast_chain")?;
    check_root(nranks, root, "broadcast_chain")?;
    check_pos(pipeline, "pipeline", "broadcast_chain")?;
    let mut plan = Plan::new(Collective::Broadcast, "broadcast-chain", nranks, in_place);
    plan.root = Some(root);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let n = nranks;
    plan.input.chunks = pipeline;
    plan.output.chunks = pipeline;
    let (i, o) = (inp(0).stepping(1), out(0).stepping(1));
    for r in 0..n {
        let pos = (r + n - root) % n;
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let mut body = Vec::new();
        if pos == 0 && !in_place {
            body.push(Op::Copy { src: i, dst: o });
        }
        if pos > 0 {
            body.push(wait(prev, MEM, 0));
        }
        if pos < n - 1 {
            body.push(put(next, MEM, 0, if pos == 0 { i } else { o }, o));
            body.push(signal(next, MEM, 0));
        }
        push(
            &mut plan,
            r,
            0,
            Op::Loop {
                iterations: pipeline,
                body,
            },
        );
    }
    Ok(plan)
}

/// Reduce all-pairs: every non-root puts its input into slot `rank` of the root's scratch
/// and signals; the root waits, reduces into its output, then releases every rank (so the
/// next invocation cannot overwrite scratch the root still reads). Scratch `n × count`.
pub fn reduce_allpairs(nranks: u32, root: u32, in_place: bool) -> Result<Plan, AlgoError> {
    check_n(nranks, "reduce_allpairs")?;
    check_root(nranks, root, "reduce_allpairs")?;
    let mut plan = Plan::new(Collective::Reduce, "reduce-allpairs", nranks, in_place);
    plan.root = Some(root);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    plan.scratch = BufferSpec {
        factor: nranks,
        chunks: nranks,
    };
    for p in others(nranks, root) {
        push(&mut plan, p, 0, put(root, MEM, 0, inp(0), scr(p)));
        push(&mut plan, p, 0, signal(root, MEM, 0));
        push(&mut plan, p, 0, wait(root, MEM, 1));
        push(&mut plan, root, 0, wait(p, MEM, 0));
    }
    let mut srcs = vec![inp(0)];
    srcs.extend(others(nranks, root).map(scr));
    push(&mut plan, root, 0, Op::Reduce { srcs, dst: out(0) });
    push(&mut plan, root, 0, Op::Finalize { dst: out(0) });
    for p in others(nranks, root) {
        push(&mut plan, root, 0, signal(p, MEM, 1));
    }
    Ok(plan)
}

/// AllToAll all-pairs: out of place, input chunk p goes straight into chunk `rank` of
/// peer p's output. In place, it goes to peer p's scratch slot `rank` first (the
/// destination is still a source there), and each rank copies the slots into its output
/// after every peer has signalled. Scratch `n × count` in place.
pub fn alltoall_allpairs(nranks: u32, in_place: bool) -> Result<Plan, AlgoError> {
    check_n(nranks, "alltoall_allpairs")?;
    let mut plan = Plan::new(Collective::AllToAll, "alltoall-allpairs", nranks, in_place);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let n = nranks;
    plan.input.chunks = n;
    plan.output.chunks = n;
    if in_place {
        plan.scratch = BufferSpec {
            factor: n,
            chunks: n,
        };
        plan.scratch_rotation = 2;
    }
    for r in 0..n {
        if !in_place {
            push(
                &mut plan,
                r,
                0,
                Op::Copy {
                    src: inp(r),
                    dst: out(r),
                },
            );
        }
        for p in others(n, r) {
            let dst = if in_place { scr(r) } else { out(r) };
            push(&mut plan, r, 0, put(p, MEM, 0, inp(p), dst));
            push(&mut plan, r, 0, signal(p, MEM, 0));
        }
        for p in others(n, r) {
            push(&mut plan, r, 0, wait(p, MEM, 0));
        }
        if in_place {
            for p in others(n, r) {
                push(
                    &mut plan,
                    r,
                    0,
                    Op::Copy {
                        src: scr(p),
                        dst: out(p),
                    },
                );
            }
        }
    }
    Ok(plan)
}

/// Point-to-point: for each `(src, dst)` pair, dst's output becomes src's input. Each rank
/// sends at most once and receives at most once; `src == dst` is a local copy. In place,
/// a sender first copies its input to scratch and waits for the receiver's "clear"
/// signal (sent after the receiver has copied its own outgoing data), so no data is
/// overwritten before it is sent. Scratch `1 × count` in place.
pub fn sendrecv(nranks: u32, pairs: &[(u32, u32)], in_place: bool) -> Result<Plan, AlgoError> {
    check_n(nranks, "sendrecv")?;
    let mut plan = Plan::new(Collective::SendRecv, "sendrecv-direct", nranks, in_place);
    plan.pairs = pairs.to_vec();
    let n = nranks as usize;
    let (mut sends, mut recvs) = (vec![None; n], vec![None; n]);
    for &(s, d) in pairs {
        if s >= nranks || d >= nranks {
            return Err(AlgoError::Invalid(format!(
                "sendrecv: pair ({s}, {d}) names a rank outside 0..{nranks}"
            )));
        }
        if sends[s as usize].replace(d).is_some() || recvs[d as usize].replace(s).is_some() {
            return Err(AlgoError::Invalid(format!(
                "sendrecv: rank {s} sends twice or rank {d} receives twice; split into several plans"
            )));
        }
    }
    if in_place {
        plan.scratch = BufferSpec {
            factor: 1,
            chunks: 1,
        };
    }
    for r in 0..nranks {
        let (send, recv) = (
            sends[r as usize].filter(|&d| d != r),
            recvs[r as usize].filter(|&s| s != r),
        );
        if sends[r as usize] == Some(r) && !in_place {
            push(
                &mut plan,
                r,
                0,
                Op::Copy {
                    src: inp(0),
                    dst: out(0),
                },
            );
        }
        if in_place {
            if send.is_some() {
                push(
                    &mut plan,
                    r,
                    0,
                    Op::Copy {
                        src: inp(0),
                        dst: scr(0),
                    },
                );
            }
            if let Some(s) = recv {
                push(&mut plan, r, 0, signal(s, MEM, 1));
            }
        }
        if let Some(d) = send {
            if in_place {
                push(&mut plan, r, 0, wait(d, MEM, 1));
            }
            let src = if in_place { scr(0) } else { inp(0) };
            push(&mut plan, r, 0, put(d, MEM, 0, src, out(0)));
            push(&mut plan, r, 0, signal(d, MEM, 0));
        }
        if let Some(s) = recv {
            push(&mut plan, r, 0, wait(s, MEM, 0));
        }
    }
    Ok(plan)
}

/// The node of rank `r` and its index in it, for `l` ranks per node.
fn node_of(r: u32, l: u32) -> (u32, u32) {
    (r / l, r % l)
}

/// AllGather hierarchical (multi-node): `L = ranks_per_node` consecutive ranks form a
/// node, `M` nodes. Rank (a, l) first puts its input into scratch slot `a` of the rank
/// with its local index on every other node (the only traffic between nodes: one copy
/// of each chunk per node) and signals; once those `M − 1` ranks signalled, it copies
/// their slots into its output, then puts the `M` chunks of local index `l` (its own
/// and the received ones) into the same chunks of every other rank of its node,
/// signals, and waits for them. Scratch `M × count`, rotated over 2 copies.
///
/// The far copy lands in scratch, not in the peer's output, so no rank writes a far
/// peer's user buffer: the executor needs no entry handshake across nodes (a round trip
/// over the network per call) and codegen no handshake with far peers (the near start
/// handshake stays: near outputs are written before hearing from them). Reuse of a
/// scratch copy is safe as in [`reducescatter_2ph`]: a rank writes copy `k mod 2` again
/// in invocation `k + 2` only after the reader's signal of invocation `k + 1`, sent
/// once it had copied out of it in invocation `k`.
pub fn allgather_2ph(nranks: u32, ranks_per_node: u32, in_place: bool) -> Result<Plan, AlgoError> {
    check_n(nranks, "allgather_2ph")?;
    check_nodes(nranks, ranks_per_node, "allgather_2ph", "allpairs or ring")?;
    let mut plan = Plan::new(Collective::AllGather, "allgather-2ph", nranks, in_place);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let (l, m) = (ranks_per_node, nranks / ranks_per_node);
    plan.output.chunks = nranks;
    plan.scratch = BufferSpec {
        factor: m,
        chunks: m,
    };
    plan.scratch_rotation = 2;
    for r in 0..nranks {
        let (a, li) = node_of(r, l);
        if !in_place {
            push(
                &mut plan,
                r,
                0,
                Op::Copy {
                    src: inp(0),
                    dst: out(r),
                },
            );
        }
        let far: Vec<u32> = (0..m).filter(|&b| b != a).map(|b| b * l + li).collect();
        let near: Vec<u32> = (0..l).filter(|&k| k != li).map(|k| a * l + k).collect();
        for &q in &far {
            push(&mut plan, r, 0, put(q, MEM, 0, inp(0), scr(a)));
            push(&mut plan, r, 0, signal(q, MEM, 0));
        }
        for &q in &far {
            push(&mut plan, r, 0, wait(q, MEM, 0));
        }
        for &q in &far {
            push(
                &mut plan,
                r,
                0,
                Op::Copy {
                    src: scr(q / l),
                    dst: out(q),
                },
            );
        }
        for &p in &near {
            for c in 0..m {
                let k = c * l + li;
                push(&mut plan, r, 0, put(p, MEM, 1, out(k), out(k)));
            }
            push(&mut plan, r, 0, signal(p, MEM, 1));
        }
        for &p in &near {
            push(&mut plan, r, 0, wait(p, MEM, 1));
        }
    }
    Ok(plan)
}

/// ReduceScatter hierarchical (multi-node): `L = ranks_per_node` consecutive ranks form
/// a node, `M` nodes; rank (a, l) owns output chunk `a·L + l`. Inside the node, rank
/// (a, l) receives from every other rank (a, l') its input chunks `c·L + l` for every
/// node c (scratch slot `l'·M + c`) and reduces them with its own into the node's
/// partial sums (slots `n + c`); between nodes, it puts partial `c` into slot
/// `n + M + a` of rank (c, l) (one copy of each partial per node) and reduces its own
/// partial with the `M − 1` it received into its output. Scratch `(n + 2M) × count`,
/// rotated over 2 copies.
///
/// Only scratch is written across ranks, so no rank handshakes with another (the
/// executor's entry handshake, the GPUs' start and end handshakes, across nodes a
/// network round trip each). Reuse of a scratch copy is ordered by the plan's own
/// signals: rank r is written by its near peers (tag 0) and its counterparts on the
/// other nodes (tag 1), and signals each of them in every invocation once it finished
/// the one before. A writer in invocation `k + 2` (copy `k mod 2`) has waited for r's
/// signal of invocation `k + 1`, so r is done reading that copy in invocation `k`. On
/// the GPUs copies rotate by launch parity over every plan, and launch `k + 1` may be
/// another plan in which the writer does not hear from r: there its writers, near and
/// far, check r's published progress before writing ([`Plan::scratch_writer_pairs`]).
pub fn reducescatter_2ph(
    nranks: u32,
    ranks_per_node: u32,
    in_place: bool,
) -> Result<Plan, AlgoError> {
    check_n(nranks, "reducescatter_2ph")?;
    check_nodes(
        nranks,
        ranks_per_node,
        "reducescatter_2ph",
        "allpairs or ring",
    )?;
    let mut plan = Plan::new(
        Collective::ReduceScatter,
        "reducescatter-2ph",
        nranks,
        in_place,
    );
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let (n, l, m) = (nranks, ranks_per_node, nranks / ranks_per_node);
    let slots = n + 2 * m;
    plan.input.chunks = n;
    plan.scratch = BufferSpec {
        factor: slots,
        chunks: slots,
    };
    plan.scratch_rotation = 2;
    let partial = |c: u32| scr(n + c);
    let received = |from_node: u32| scr(n + m + from_node);
    for r in 0..n {
        let (a, li) = node_of(r, l);
        let near: Vec<u32> = (0..l).filter(|&k| k != li).map(|k| a * l + k).collect();
        let far: Vec<u32> = (0..m).filter(|&c| c != a).map(|c| c * l + li).collect();
        // Inside the node: rank p = (a, k) gets the chunks of its local index k.
        for &p in &near {
            let k = p % l;
            for c in 0..m {
                push(
                    &mut plan,
                    r,
                    0,
                    put(p, MEM, 0, inp(c * l + k), scr(li * m + c)),
                );
            }
            push(&mut plan, r, 0, signal(p, MEM, 0));
        }
        for &p in &near {
            push(&mut plan, r, 0, wait(p, MEM, 0));
        }
        for c in 0..m {
            let mut srcs = vec![inp(c * l + li)];
            srcs.extend(near.iter().map(|&p| scr((p % l) * m + c)));
            push(
                &mut plan,
                r,
                0,
                Op::Reduce {
                    srcs,
                    dst: partial(c),
                },
            );
        }
        // Between nodes: partial c goes to the rank (c, l) that owns chunk c·L + l.
        for &q in &far {
            push(&mut plan, r, 0, put(q, MEM, 1, partial(q / l), received(a)));
            push(&mut plan, r, 0, signal(q, MEM, 1));
        }
        for &q in &far {
            push(&mut plan, r, 0, wait(q, MEM, 1));
        }
        let mut srcs = vec![partial(a)];
        srcs.extend(far.iter().map(|&q| received(q / l)));
        push(&mut plan, r, 0, Op::Reduce { srcs, dst: out(0) });
        push(&mut plan, r, 0, Op::Finalize { dst: out(0) });
    }
    Ok(plan)
}
