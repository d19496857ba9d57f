//! LL-packet builders of all-gather, reduce-scatter and broadcast: the plan equivalents
//! of the hand kernels `allgather_ll`, `reducescatter_ll` and `broadcast_ll`. Every
//! transfer is LL packets into a peer's scratch (rotated over 2 copies); nobody touches
//! a peer's input or output, so no executor needs a start or end handshake, and the
//! packets' flags are the only synchronisation.
//!
//! Reusing a scratch copy is safe because a rank writes copy `i mod 2` in invocation `i`
//! and its reader last read that copy in invocation `i − 2`:
//! * all-gather and reduce-scatter are all-pairs: in invocation `i − 1` every rank read
//!   packets every peer wrote in `i − 1`, so when it starts `i` every peer has started
//!   `i − 1`, i.e. finished `i − 2` (as `allreduce:1pa`);
//! * broadcast is one way (the root never hears from a receiver), so nothing in the
//!   plan bounds how far the root runs ahead. The executors close that gap for every
//!   plan with such a pair ([`crate::plan::Plan::one_way_packet_pairs`]): the receiver
//!   publishes how many invocations it completed, and the sender waits, before its
//!   first packet write, until the receiver completed the one that last read the copy
//!   (`i − rotation` on the host; `i − 2` on the GPUs, whose copies alternate by
//!   launch parity). In steady state that is long done (the receiver is one
//!   invocation behind at most), so the wait costs a local load, as the hand
//!   `broadcast_ll`'s wait on the receiver's done epoch `e − 2`.
//!
//! On the GPUs copies alternate over every plan, so launch `i − 1` may be another plan
//! in which a writer does not hear from its reader: there every scratch writer of these
//! plans waits the same way ([`crate::plan::Plan::scratch_writer_pairs`]).

use super::*;
use crate::plan::{BufferSpec, Collective, Op, Plan};

/// AllGather with LL packets: every rank puts its input as packets into slot `rank` of
/// every peer's scratch, copies it into its own output chunk, and unpacks every peer's
/// slot into that peer's output chunk. One block; scratch `n × count`, rotated over 2.
pub fn allgather_ll(nranks: u32, in_place: bool) -> Result<Plan, AlgoError> {
    check_n(nranks, "allgather_ll")?;
    let mut plan = Plan::new(Collective::AllGather, "allgather-ll", nranks, in_place);
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    let n = nranks;
    plan.output.chunks = n;
    plan.scratch = BufferSpec {
        factor: n,
        chunks: n,
    };
    plan.scratch_rotation = 2;
    for r in 0..n {
        for p in others(n, r) {
            push(&mut plan, r, 0, put_packets(p, MEM, 0, inp(0), scr(r)));
        }
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
        for p in others(n, r) {
            push(
                &mut plan,
                r,
                0,
                Op::ReadReducePackets {
                    packets: vec![(p, scr(p))],
                    local: vec![],
                    dst: out(p),
                },
            );
        }
    }
    Ok(plan)
}

/// ReduceScatter with LL packets: every rank puts input chunk p as packets into slot
/// `rank` of peer p's scratch, then reduces its own input chunk with the `n − 1` slots
/// into its output. One block; scratch `n × count`, rotated over 2.
pub fn reducescatter_ll(nranks: u32, in_place: bool) -> Result<Plan, AlgoError> {
    check_n(nranks, "reducescatter_ll")?;
    let mut plan = Plan::new(
        Collective::ReduceScatter,
        "reducescatter-ll",
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
            push(&mut plan, r, 0, put_packets(p, MEM, 0, inp(p), scr(r)));
        }
        let packets = others(n, r).map(|p| (p, scr(p))).collect();
        push(
            &mut plan,
            r,
            0,
            Op::ReadReducePackets {
                packets,
                local: vec![inp(r)],
                dst: out(0),
            },
        );
        push(&mut plan, r, 0, Op::Finalize { dst: out(0) });
    }
    Ok(plan)
}

/// Broadcast with LL packets: the root puts its input as packets into every other
/// rank's scratch (and copies it into its own output out of place); every other rank
/// unpacks them into its output. One block; scratch `1 × count`, rotated over 2. The
/// root is a one-way sender: see the module docs for why it cannot overrun a receiver.
pub fn broadcast_ll(nranks: u32, root: u32, in_place: bool) -> Result<Plan, AlgoError> {
    let mut plan = packet_broadcast("broadcast-ll", nranks, root, in_place)?;
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    for p in others(nranks, root) {
        push(&mut plan, root, 0, put_packets(p, MEM, 0, inp(0), scr(0)));
        push(
            &mut plan,
            p,
            0,
            Op::ReadReducePackets {
                packets: vec![(root, scr(0))],
                local: vec![],
                dst: out(0),
            },
        );
    }
    if !in_place {
        push(
            &mut plan,
            root,
            0,
            Op::Copy {
                src: inp(0),
                dst: out(0),
            },
        );
    }
    Ok(plan)
}

/// Broadcast along the chain root, root + 1, ...: the root puts its input as LL packets
/// into the next rank's scratch; every other rank unpacks what arrives into its output
/// and, but for the last, puts that output on to the next rank. On the GPUs (LL63) the
/// unpack and the forward of each tile fuse into one step (codegen
/// `reduce_put_packets63`), so a tile moves on as soon as it lands: the hand kernels'
/// LL63 chain (recv_copy_send), one hop per rank instead of the root's n − 1 puts.
pub fn broadcast_chain_ll(nranks: u32, root: u32, in_place: bool) -> Result<Plan, AlgoError> {
    let mut plan = packet_broadcast("broadcast-chain-ll", nranks, root, in_place)?;
    if nranks == 1 {
        return Ok(single_rank(plan));
    }
    for pos in 0..nranks {
        let r = (root + pos) % nranks;
        let (prev, next) = ((r + nranks - 1) % nranks, (r + 1) % nranks);
        if pos == 0 {
            push(&mut plan, r, 0, put_packets(next, MEM, 0, inp(0), scr(0)));
            if !in_place {
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
            continue;
        }
        push(
            &mut plan,
            r,
            0,
            Op::ReadReducePackets {
                packets: vec![(prev, scr(0))],
                local: vec![],
                dst: out(0),
            },
        );
        if pos + 1 < nranks {
            push(&mut plan, r, 0, put_packets(next, MEM, 0, out(0), scr(0)));
        }
    }
    Ok(plan)
}

/// The start of a packet broadcast plan (`name` also names the builder in errors): the
/// root checked, and, from two ranks, one scratch chunk of the buffer's size in two
/// copies (the receivers' packet areas).
fn packet_broadcast(
    name: &'static str,
    nranks: u32,
    root: u32,
    in_place: bool,
) -> Result<Plan, AlgoError> {
    check_n(nranks, name)?;
    if root >= nranks {
        return Err(AlgoError::Invalid(format!(
            "{name}: root {root} is not a rank of {nranks}"
        )));
    }
    let mut plan = Plan::new(Collective::Broadcast, name, nranks, in_place);
    plan.root = Some(root);
    if nranks > 1 {
        plan.scratch = BufferSpec {
            factor: 1,
            chunks: 1,
        };
        plan.scratch_rotation = 2;
    }
    Ok(plan)
}
