//! One test per class of bad plan: the validator rejects it and names where.

use commhal_algorithms::AlgoError;
use commhal_algorithms::builders::{Protocol, allgather_allpairs, allreduce_2pa, allreduce_ring};
use commhal_algorithms::plan::{BufferKind, ChannelKind, ChunkRef, Collective, Op, Plan};
use commhal_algorithms::validate::validate;

fn base() -> Plan {
    allreduce_2pa(3, false, Protocol::HB, 1).unwrap()
}

fn check(plan: &Plan) -> String {
    validate(plan, Collective::AllReduce, 3)
        .expect_err("must be rejected")
        .to_string()
}

fn ops(plan: &mut Plan, r: usize) -> &mut Vec<Op> {
    &mut plan.ranks[r].blocks[0].ops
}

#[test]
fn the_base_plan_is_valid() {
    validate(&base(), Collective::AllReduce, 3).unwrap();
}

#[test]
fn out_of_bounds_chunk() {
    let mut p = base();
    if let Op::Put { src, .. } = &mut ops(&mut p, 1)[0] {
        src.index = 3; // input has 3 chunks
    }
    let m = check(&p);
    assert!(
        m.contains("rank 1, block 0, op 0") && m.contains("out of bounds"),
        "{m}"
    );
}

#[test]
fn out_of_bounds_in_loop_iterations() {
    let mut p = allreduce_ring(3, false, 1, 2).unwrap();
    if let Op::Loop { iterations, .. } = &mut p.ranks[2].blocks[0].ops[0] {
        *iterations = 3;
    }
    let m = validate(&p, Collective::AllReduce, 3)
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("rank 2, block 0, op 0") && m.contains("out of bounds"),
        "{m}"
    );
}

#[test]
fn wait_without_signal() {
    let mut p = base();
    ops(&mut p, 2).push(Op::Wait {
        peer: 0,
        channel: ChannelKind::Memory,
        tag: 7,
    });
    let n = ops(&mut p, 2).len() - 1;
    let m = check(&p);
    assert!(
        m.contains(&format!("rank 2, block 0, op {n}")) && m.contains("never be satisfied"),
        "{m}"
    );
}

#[test]
fn signal_without_wait() {
    let mut p = base();
    ops(&mut p, 0).push(Op::Signal {
        peer: 1,
        channel: ChannelKind::Port,
        tag: 0,
    });
    let m = check(&p);
    assert!(
        m.contains("rank 0, block 0") && m.contains("never waited for"),
        "{m}"
    );
}

#[test]
fn deadlock_is_found_and_stuck_ops_listed() {
    // Rank 0 waits for rank 1 before signalling it, and rank 1 does the same: balanced
    // counts, but a cycle.
    let mut p = Plan::new(Collective::AllReduce, "cycle", 2, false);
    for (me, peer) in [(0, 1), (1, 0)] {
        p.ranks[me].blocks.push(Default::default());
        p.ranks[me].blocks[0].ops = vec![
            Op::Wait {
                peer,
                channel: ChannelKind::Memory,
                tag: 0,
            },
            Op::Signal {
                peer,
                channel: ChannelKind::Memory,
                tag: 0,
            },
        ];
    }
    let m = validate(&p, Collective::AllReduce, 2)
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("deadlock")
            && m.contains("rank 0, block 0, op 0")
            && m.contains("rank 1, block 0, op 0"),
        "{m}"
    );
}

#[test]
fn rank_count_mismatch() {
    let m = validate(&base(), Collective::AllReduce, 4)
        .unwrap_err()
        .to_string();
    assert!(m.contains("rank count mismatch"), "{m}");
}

#[test]
fn reduce_into_read_only_input() {
    let mut p = base();
    if let Op::Reduce { dst, .. } = ops(&mut p, 1)
        .iter_mut()
        .find(|o| matches!(o, Op::Reduce { .. }))
        .unwrap()
    {
        dst.buf = BufferKind::Input;
    }
    let at = ops(&mut p, 1)
        .iter()
        .position(|o| matches!(o, Op::Reduce { .. }))
        .unwrap();
    let m = check(&p);
    assert!(
        m.contains(&format!("rank 1, block 0, op {at}")) && m.contains("read-only"),
        "{m}"
    );
    // The same plan in place is fine as far as writes go.
    p.in_place = true;
    validate(&p, Collective::AllReduce, 3).unwrap();
}

#[test]
fn put_into_peer_read_only_input() {
    let mut p = base();
    if let Op::Put { dst, .. } = &mut ops(&mut p, 0)[0] {
        *dst = ChunkRef::new(BufferKind::Input, 1);
    }
    let m = check(&p);
    assert!(
        m.contains("rank 0, block 0, op 0") && m.contains("a peer's input"),
        "{m}"
    );
}

#[test]
fn wrong_collective() {
    let p = allgather_allpairs(3, false).unwrap();
    let m = validate(&p, Collective::AllReduce, 3)
        .unwrap_err()
        .to_string();
    assert!(m.contains("implements allgather"), "{m}");
}

#[test]
fn peer_is_self() {
    let mut p = base();
    if let Op::Put { peer, .. } = &mut ops(&mut p, 2)[0] {
        *peer = 2;
    }
    let m = check(&p);
    assert!(
        m.contains("rank 2, block 0, op 0") && m.contains("this rank"),
        "{m}"
    );
}

#[test]
fn peer_out_of_range() {
    let mut p = base();
    if let Op::Signal { peer, .. } = &mut ops(&mut p, 1)[1] {
        *peer = 9;
    }
    let m = check(&p);
    assert!(
        m.contains("rank 1, block 0, op 1") && m.contains("out of range"),
        "{m}"
    );
}

#[test]
fn chunks_of_different_sizes() {
    let mut p = base();
    if let Op::Put { src, .. } = &mut ops(&mut p, 0)[0] {
        src.count = 2;
    }
    let m = check(&p);
    assert!(
        m.contains("rank 0, block 0, op 0") && m.contains("different sizes"),
        "{m}"
    );
}

#[test]
fn switch_channel_on_put() {
    let mut p = base();
    if let Op::Put { channel, .. } = &mut ops(&mut p, 0)[0] {
        *channel = ChannelKind::Switch;
    }
    let m = check(&p);
    assert!(
        m.contains("rank 0, block 0, op 0") && m.contains("switch"),
        "{m}"
    );
}

#[test]
fn unknown_schema_version() {
    let mut p = base();
    p.schema_version = 2;
    assert!(matches!(
        validate(&p, Collective::AllReduce, 3),
        Err(AlgoError::Schema { found: 2, .. })
    ));
}

#[test]
fn unbalanced_barriers() {
    let mut p = base();
    p.ranks[0].blocks.push(Default::default());
    p.ranks[0].blocks[1].ops.push(Op::Barrier);
    let m = check(&p);
    assert!(m.contains("rank 0") && m.contains("barrier"), "{m}");
}

#[test]
fn packets_never_read() {
    let mut p = commhal_algorithms::builders::allreduce_1pa(3, false).unwrap();
    p.ranks[1].blocks[0]
        .ops
        .retain(|o| !matches!(o, Op::ReadReducePackets { .. }));
    let m = validate(&p, Collective::AllReduce, 3)
        .unwrap_err()
        .to_string();
    assert!(m.contains("never read"), "{m}");
}
