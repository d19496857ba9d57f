//! AllReduce builders: 1PA, 2PA (LL/HB), 2PH (LL/HB), ring, recursive doubling.

use super::*;
use crate::plan::{BufferSpec, Collective, Op, Plan};

/// One-phase all-pairs with LL packets (small messages): every rank sends its whole input
/// as packets into slot `rank` of every peer's scratch, then reduces its input with the
/// `n-1` packet slots into its output. One block, one round trip. Scratch: `n × count`,
/// rotated over 2 copies.
///
/// Every rank reads every peer's packets in every invocation, which the peer wrote
/// after it finished the invocation before; so a writer of copy `k mod 2` in invocation
/// `k + 2` heard from its reader in `k + 1`, and the reader is done with the copy. On
/// the GPUs copies alternate over every plan and launch `k + 1` may be another, so
/// each rank also publishes its done launches to every peer (a store each, CTA 0) and
/// waits for the peers' before its first packet ([`Plan::scratch_writer_pairs`]); back
/// to back that wait is a local load, the publications of launch `k + 1` having come
/// before the packets each rank read from every peer in that launch.
pub fn allreduce_1pa(nranks: u32, in_place: bool) -> Result<Plan, AlgoError> {
    check_n(nranks, "allreduce_1pa")?;
    let mut plan = Plan::new(Collective::AllReduce, "allreduce-1pa", nranks, in_place);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    plan.scratch = BufferSpec {
        factor: nranks,
        chunks: nranks,
    };
    plan.scratch_rotation = 2;
    for r in 0..nranks {
        for p in others(nranks, r) {
            push(&mut plan, r, 0, put_packets(p, MEM, 0, inp(0), scr(r)));
        }
        let packets = others(nranks, r).map(|p| (p, scr(p))).collect();
        push(
            &mut plan,
            r,
            0,
            Op::ReadReducePackets {
                packets,
                local: vec![inp(0)],
                dst: out(0),
            },
        );
        push(&mut plan, r, 0, Op::Finalize { dst: out(0) });
    }
    Ok(plan)
}

/// Two-phase all-pairs: reduce-scatter (rank r reduces segment r from every peer's
/// contribution, sent into its scratch), then all-gather (rank r sends its reduced segment
/// into every peer's output). `blocks` blocks per rank each own a slice of every segment
/// (their own semaphores, `tag = block`). LL: packets, no signals; HB: put + signal/wait.
/// Scratch: `n × count` (HB) or `2n × count` (LL) laid out as `[sender][segment]` slots;
/// rotated over 2 copies.
pub fn allreduce_2pa(
    nranks: u32,
    in_place: bool,
    proto: Protocol,
    blocks: u32,
) -> Result<Plan, AlgoError> {
    check_n(nranks, "allreduce_2pa")?;
    check_pos(blocks, "blocks", "allreduce_2pa")?;
    let name = match proto {
        Protocol::LL => "allreduce-2pa-ll",
        Protocol::HB => "allreduce-2pa-hb",
    };
    let mut plan = Plan::new(Collective::AllReduce, name, nranks, in_place);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let (n, nb) = (nranks, blocks);
    plan.input.chunks = n * nb;
    plan.output.chunks = n * nb;
    // Slot (sender p, segment k, block b); LL adds a second region for the all-gather.
    let slot = |p: u32, k: u32, b: u32| (p * n + k) * nb + b;
    let region2 = n * n * nb;
    plan.scratch = match proto {
        Protocol::HB => BufferSpec {
            factor: n,
            chunks: n * n * nb,
        },
        Protocol::LL => BufferSpec {
            factor: 2 * n,
            chunks: 2 * n * n * nb,
        },
    };
    plan.scratch_rotation = 2;
    for r in 0..n {
        for b in 0..nb {
            let seg = |k: u32| k * nb + b;
            let mut ops = Vec::new();
            match proto {
                Protocol::HB => {
                    for p in others(n, r) {
                        ops.push(put(p, MEM, b, inp(seg(p)), scr(slot(r, p, b))));
                        ops.push(signal(p, MEM, b));
                    }
                    for p in others(n, r) {
                        ops.push(wait(p, MEM, b));
                    }
                    let mut srcs = vec![inp(seg(r))];
                    srcs.extend(others(n, r).map(|p| scr(slot(p, r, b))));
                    ops.push(Op::Reduce {
                        srcs,
                        dst: out(seg(r)),
                    });
                    ops.push(Op::Finalize { dst: out(seg(r)) });
                    for p in others(n, r) {
                        ops.push(put(p, MEM, nb + b, out(seg(r)), out(seg(r))));
                        ops.push(signal(p, MEM, nb + b));
                    }
                    for p in others(n, r) {
                        ops.push(wait(p, MEM, nb + b));
                    }
                }
                Protocol::LL => {
                    for p in others(n, r) {
                        ops.push(put_packets(p, MEM, b, inp(seg(p)), scr(slot(r, p, b))));
                    }
                    let packets = others(n, r).map(|p| (p, scr(slot(p, r, b)))).collect();
                    ops.push(Op::ReadReducePackets {
                        packets,
                        local: vec![inp(seg(r))],
                        dst: out(seg(r)),
                    });
                    ops.push(Op::Finalize { dst: out(seg(r)) });
                    for p in others(n, r) {
                        ops.push(put_packets(
                            p,
                            MEM,
                            b,
                            out(seg(r)),
                            scr(region2 + slot(r, r, b)),
                        ));
                    }
                    for p in others(n, r) {
                        let packets = vec![(p, scr(region2 + slot(p, p, b)))];
                        ops.push(Op::ReadReducePackets {
                            packets,
                            local: vec![],
                            dst: out(seg(p)),
                        });
                    }
                }
            }
            for op in ops {
                push(&mut plan, r, b, op);
            }
        }
    }
    Ok(plan)
}

/// Two-phase hierarchical (multi-node): `ranks_per_node` (L) consecutive ranks form a node.
/// 1. intra-node reduce-scatter over memory channels: local rank l reduces segment l
///    (of L) across its node;
/// 2. cross-node: rank l of each node exchanges its segment with rank l of every other
///    node over **port** channels and reduces (flushing before the source is overwritten);
/// 3. intra-node all-gather of the segments.
///
/// `nranks` must be a multiple of L. Scratch: `(L+M) × count` (HB) or `(2L+M) × count`
/// (LL) for M nodes, rotated over 2 copies. One block per rank.
///
/// Between nodes only scratch is written (slot region `L + node` of the far peer), so
/// no rank needs a handshake with a rank of another node (on the host the executor's
/// entry handshake, on the GPUs `far_handshake`: a network round trip each). Reuse of a
/// scratch copy is ordered by the plan's own signals: every rank that writes into
/// rank r's scratch (its near peers in phases 1 and 3, its counterparts in phase 2)
/// also hears from r in every invocation (HB: r's signal; LL: r's packets), sent by r
/// only after r finished the invocation before. So a writer in invocation `k + 2`,
/// which writes copy `k mod 2`, has heard from r in invocation `k + 1`: r is done
/// reading that copy in invocation `k`. On the GPUs copies rotate by launch parity over
/// every plan, and launch `k + 1` may be another plan in which the writer does not hear
/// from r: there the writers without a start handshake with r (the counterparts, and
/// the near peers of 2ph-ll) check r's published progress before writing
/// ([`Plan::scratch_writer_pairs`]).
pub fn allreduce_2ph(
    nranks: u32,
    ranks_per_node: u32,
    in_place: bool,
    proto: Protocol,
) -> Result<Plan, AlgoError> {
    check_n(nranks, "allreduce_2ph")?;
    check_nodes(nranks, ranks_per_node, "allreduce_2ph", "2PA or ring")?;
    let name = match proto {
        Protocol::LL => "allreduce-2ph-ll",
        Protocol::HB => "allreduce-2ph-hb",
    };
    let mut plan = Plan::new(Collective::AllReduce, name, nranks, in_place);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let (ll, m) = (ranks_per_node, nranks / ranks_per_node);
    plan.input.chunks = ll;
    plan.output.chunks = ll;
    let regions = match proto {
        Protocol::HB => ll + m,
        Protocol::LL => 2 * ll + m,
    };
    plan.scratch = BufferSpec {
        factor: regions,
        chunks: regions * ll,
    };
    plan.scratch_rotation = 2;
    // Scratch chunk for region q, segment s.
    let slot = |q: u32, s: u32| q * ll + s;
    for r in 0..nranks {
        let (node, l) = (r / ll, r % ll);
        let locals: Vec<u32> = (0..ll).filter(|&x| x != l).map(|x| node * ll + x).collect();
        let remotes: Vec<u32> = (0..m).filter(|&x| x != node).map(|x| x * ll + l).collect();
        let mut ops = Vec::new();
        // Phase 1: intra-node reduce-scatter into out(l).
        match proto {
            Protocol::HB => {
                for &p in &locals {
                    ops.push(put(p, MEM, 0, inp(p % ll), scr(slot(l, p % ll))));
                    ops.push(signal(p, MEM, 0));
                }
                for &p in &locals {
                    ops.push(wait(p, MEM, 0));
                }
                let mut srcs = vec![inp(l)];
                srcs.extend(locals.iter().map(|&p| scr(slot(p % ll, l))));
                ops.push(Op::Reduce { srcs, dst: out(l) });
            }
            Protocol::LL => {
                for &p in &locals {
                    ops.push(put_packets(p, MEM, 0, inp(p % ll), scr(slot(l, p % ll))));
                }
                let packets = locals.iter().map(|&p| (p, scr(slot(p % ll, l)))).collect();
                ops.push(Op::ReadReducePackets {
                    packets,
                    local: vec![inp(l)],
                    dst: out(l),
                });
            }
        }
        // Phase 2: cross-node exchange of segment l over port channels.
        if !remotes.is_empty() {
            for &q in &remotes {
                match proto {
                    Protocol::HB => {
                        ops.push(put(q, PORT, 1, out(l), scr(slot(ll + node, l))));
                        ops.push(signal(q, PORT, 1));
                    }
                    Protocol::LL => {
                        ops.push(put_packets(q, PORT, 1, out(l), scr(slot(ll + node, l))))
                    }
                }
            }
            if proto == Protocol::HB {
                for &q in &remotes {
                    ops.push(wait(q, PORT, 1));
                }
            }
            for &q in &remotes {
                ops.push(Op::Flush {
                    peer: q,
                    channel: PORT,
                    tag: 1,
                });
            }
            let from_remotes = remotes.iter().map(|&q| (q, scr(slot(ll + q / ll, l))));
            match proto {
                Protocol::HB => {
                    // the nodes' partial sums in rank order (the packet form's order,
                    // plan::local_position), so that the rank l of every node adds them
                    // alike and all get the same bits
                    let mut terms: Vec<_> = from_remotes.collect();
                    terms.push((r, out(l)));
                    terms.sort_by_key(|t| t.0);
                    let srcs = terms.into_iter().map(|t| t.1).collect();
                    ops.push(Op::Reduce { srcs, dst: out(l) });
                }
                Protocol::LL => ops.push(Op::ReadReducePackets {
                    packets: from_remotes.collect(),
                    local: vec![out(l)],
                    dst: out(l),
                }),
            }
        }
        ops.push(Op::Finalize { dst: out(l) });
        // Phase 3: intra-node all-gather.
        match proto {
            Protocol::HB => {
                for &p in &locals {
                    ops.push(put(p, MEM, 2, out(l), out(l)));
                    ops.push(signal(p, MEM, 2));
                }
                for &p in &locals {
                    ops.push(wait(p, MEM, 2));
                }
            }
            Protocol::LL => {
                for &p in &locals {
                    ops.push(put_packets(p, MEM, 2, out(l), scr(slot(ll + m + l, l))));
                }
                for &p in &locals {
                    let lp = p % ll;
                    let packets = vec![(p, scr(slot(ll + m + lp, lp)))];
                    ops.push(Op::ReadReducePackets {
                        packets,
                        local: vec![],
                        dst: out(lp),
                    });
                }
            }
        }
        for op in ops {
            push(&mut plan, r, 0, op);
        }
    }
    Ok(plan)
}

/// Ring: reduce-scatter around the ring (n-1 steps, partial sums in the output, received
/// parts in scratch), an acknowledgement to the previous rank, then all-gather around the
/// ring (n-1 steps). The acknowledgement is conservative: it guarantees the previous
/// rank's all-gather writes land only after this rank's reduce-scatter is done with its
/// output (the ring's data dependencies already imply this within one invocation; the
/// ack keeps it true if steps are reordered or fused by an executor).
/// Each segment is cut into `blocks × pipeline` parts; block b loops over its `pipeline`
/// parts. Scratch: `1 × count`.
pub fn allreduce_ring(
    nranks: u32,
    in_place: bool,
    blocks: u32,
    pipeline: u32,
) -> Result<Plan, AlgoError> {
    check_n(nranks, "allreduce_ring")?;
    check_pos(blocks, "blocks", "allreduce_ring")?;
    check_pos(pipeline, "pipeline", "allreduce_ring")?;
    let mut plan = Plan::new(Collective::AllReduce, "allreduce-ring", nranks, in_place);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let (n, nb, pp) = (nranks, blocks, pipeline);
    let k = nb * pp;
    plan.input.chunks = n * k;
    plan.output.chunks = n * k;
    plan.scratch = BufferSpec {
        factor: 1,
        chunks: n * k,
    };
    for r in 0..n {
        let next = (r + 1) % n;
        let prev = (r + n - 1) % n;
        let m = |x: i64| x.rem_euclid(n as i64) as u32;
        for b in 0..nb {
            let c = |sg: u32| sg * k + b * pp;
            let st = |cr: ChunkRef| cr.stepping(1);
            let mut body = Vec::new();
            for s in 0..n - 1 {
                let ks = m(r as i64 - s as i64 - 1);
                let src = if s == 0 { inp(c(ks)) } else { out(c(ks)) };
                body.push(put(next, MEM, b, st(src), st(scr(c(ks)))));
                body.push(signal(next, MEM, b));
                body.push(wait(prev, MEM, b));
                let kr = m(r as i64 - s as i64 - 2);
                body.push(Op::Reduce {
                    srcs: vec![st(inp(c(kr))), st(scr(c(kr)))],
                    dst: st(out(c(kr))),
                });
            }
            body.push(Op::Finalize { dst: st(out(c(r))) });
            body.push(signal(prev, MEM, nb + b));
            body.push(wait(next, MEM, nb + b));
            for s in 0..n - 1 {
                let ks = m(r as i64 - s as i64);
                body.push(put(next, MEM, 2 * nb + b, st(out(c(ks))), st(out(c(ks)))));
                body.push(signal(next, MEM, 2 * nb + b));
                body.push(wait(prev, MEM, 2 * nb + b));
            }
            push(
                &mut plan,
                r,
                b,
                Op::Loop {
                    iterations: pp,
                    body,
                },
            );
        }
    }
    Ok(plan)
}

/// Recursive doubling: `log2 m` steps (m = the largest power of two ≤ n); at step k rank
/// r swaps its running sum with rank `r ^ 2^k` (put into the peer's scratch slot k,
/// signal, wait, reduce). Each step waits on one peer only, so it suits small messages
/// on hosts where ranks outnumber cores (fewest hand-offs between processes).
/// Ranks `m..n` first hand their input to rank `r - m` (pre-step, slot `log2 m`) and get
/// the finished result put straight into their output (post-step).
pub fn allreduce_rd(nranks: u32, in_place: bool) -> Result<Plan, AlgoError> {
    check_n(nranks, "allreduce_rd")?;
    let mut plan = Plan::new(Collective::AllReduce, "allreduce-rd", nranks, in_place);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let m = 1u32 << (31 - nranks.leading_zeros()); // largest power of two <= n
    let steps = m.trailing_zeros(); // log2 m
    let (pre, post) = (steps, steps + 1); // tags of the extra ranks' hand-offs
    plan.scratch = BufferSpec {
        factor: steps + 1,
        chunks: steps + 1,
    };
    plan.scratch_rotation = 2;
    for r in 0..nranks {
        let mut ops = Vec::new();
        if r >= m {
            // An extra rank: hand the input to r - m, then receive the result.
            let p = r - m;
            ops.push(put(p, MEM, pre, inp(0), scr(steps)));
            ops.push(signal(p, MEM, pre));
            ops.push(wait(p, MEM, post));
        } else {
            let extra = (r + m < nranks).then_some(r + m);
            // The running sum starts as the input, or input + the extra rank's input.
            let mut acc = inp(0);
            if let Some(e) = extra {
                ops.push(wait(e, MEM, pre));
                ops.push(Op::Reduce {
                    srcs: vec![inp(0), scr(steps)],
                    dst: out(0),
                });
                acc = out(0);
            }
            for k in 0..steps {
                let p = r ^ (1 << k);
                ops.push(put(p, MEM, k, acc, scr(k)));
                ops.push(signal(p, MEM, k));
                ops.push(wait(p, MEM, k));
                ops.push(Op::Reduce {
                    srcs: vec![acc, scr(k)],
                    dst: out(0),
                });
                acc = out(0);
            }
            ops.push(Op::Finalize { dst: out(0) });
            if let Some(e) = extra {
                ops.push(put(e, MEM, post, out(0), out(0)));
                ops.push(signal(e, MEM, post));
            }
        }
        for op in ops {
            push(&mut plan, r, 0, op);
        }
    }
    Ok(plan)
}
