//! Simulator checks: it catches broken plans, runs the ops no builder uses yet, and
//! property tests over random algorithms, sizes and rank counts.

use commhal_algorithms::builders::{Algorithm, BuildParams, Protocol, allreduce_2pa, build};
use commhal_algorithms::plan::{BufferKind, ChannelKind, ChunkRef, Collective, Op, Plan};
use commhal_algorithms::sim::verify;
use commhal_algorithms::validate::validate;
use commhal_algorithms::{DataType, RedOp};
use proptest::prelude::*;

const M: ChannelKind = ChannelKind::Memory;

#[test]
fn a_plan_that_reads_before_waiting_is_caught() {
    let mut p = allreduce_2pa(4, false, Protocol::HB, 1).unwrap();
    // Move every wait to the end of its block: reductions then read unsynchronised scratch.
    for rp in &mut p.ranks {
        let ops = &mut rp.blocks[0].ops;
        let (waits, rest): (Vec<Op>, Vec<Op>) =
            ops.drain(..).partition(|o| matches!(o, Op::Wait { .. }));
        *ops = rest;
        ops.extend(waits);
    }
    validate(&p, Collective::AllReduce, 4).unwrap(); // counts balance, no deadlock
    let e = verify(&p, 9, DataType::I32, RedOp::Sum, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("wrong elements"), "{e}");
}

#[test]
fn a_signal_issued_before_its_put_is_caught() {
    let mut p = allreduce_2pa(3, false, Protocol::HB, 1).unwrap();
    // Swap each phase-1 Put with the Signal after it: the signal no longer covers the data.
    for rp in &mut p.ranks {
        let ops = &mut rp.blocks[0].ops;
        for i in 0..ops.len() - 1 {
            if matches!(ops[i], Op::Put { tag: 0, .. })
                && matches!(ops[i + 1], Op::Signal { tag: 0, .. })
            {
                ops.swap(i, i + 1);
            }
        }
    }
    validate(&p, Collective::AllReduce, 3).unwrap();
    let e = verify(&p, 5, DataType::F16, RedOp::Max, 3)
        .unwrap_err()
        .to_string();
    assert!(e.contains("wrong elements"), "{e}");
}

fn all_pairs_sync(p: &mut Plan, r: u32, b: usize, tag: u32) {
    let n = p.nranks;
    let ops = &mut p.ranks[r as usize].blocks[b].ops;
    for q in (0..n).filter(|&q| q != r) {
        ops.push(Op::Signal {
            peer: q,
            channel: M,
            tag,
        });
    }
    for q in (0..n).filter(|&q| q != r) {
        ops.push(Op::Wait {
            peer: q,
            channel: M,
            tag,
        });
    }
}

/// AllReduce by read-reduce from peers' inputs, then get of every other segment; block 1
/// only joins the barrier.
fn read_reduce_get_plan(n: u32) -> Plan {
    let mut p = Plan::new(Collective::AllReduce, "test-readreduce-get", n, false);
    p.input.chunks = n;
    p.output.chunks = n;
    let c = |b: BufferKind, i: u32| ChunkRef::new(b, i);
    for r in 0..n {
        p.ranks[r as usize].blocks = vec![Default::default(), Default::default()];
        let peers: Vec<u32> = (0..n).filter(|&q| q != r).collect();
        p.ranks[r as usize].blocks[0].ops.push(Op::ReadReduce {
            peers: peers.clone(),
            channel: M,
            src: c(BufferKind::Input, r),
            local: vec![c(BufferKind::Input, r)],
            dst: c(BufferKind::Output, r),
        });
        p.ranks[r as usize].blocks[0].ops.push(Op::Finalize {
            dst: c(BufferKind::Output, r),
        });
        p.ranks[r as usize].blocks[0].ops.push(Op::Barrier);
        p.ranks[r as usize].blocks[1].ops.push(Op::Barrier);
        all_pairs_sync(&mut p, r, 0, 0);
        for &q in &peers {
            p.ranks[r as usize].blocks[0].ops.push(Op::Get {
                peer: q,
                channel: M,
                tag: 0,
                src: c(BufferKind::Output, q),
                dst: c(BufferKind::Output, q),
            });
        }
        all_pairs_sync(&mut p, r, 0, 1);
    }
    p
}

/// AllReduce through the switch: SwitchReduce of segment r, then SwitchBroadcast of it.
fn switch_plan(n: u32) -> Plan {
    let mut p = Plan::new(Collective::AllReduce, "test-switch", n, false);
    p.input.chunks = n;
    p.output.chunks = n;
    for r in 0..n {
        p.ranks[r as usize].blocks = vec![Default::default()];
        let o = ChunkRef::new(BufferKind::Output, r);
        p.ranks[r as usize].blocks[0].ops.push(Op::SwitchReduce {
            src: ChunkRef::new(BufferKind::Input, r),
            dst: o,
        });
        p.ranks[r as usize].blocks[0]
            .ops
            .push(Op::Finalize { dst: o });
        p.ranks[r as usize].blocks[0]
            .ops
            .push(Op::SwitchBroadcast { src: o, dst: o });
        all_pairs_sync(&mut p, r, 0, 0);
    }
    p
}

#[test]
fn read_reduce_get_barrier_and_switch_ops_simulate() {
    for n in 1..=5 {
        for plan in [read_reduce_get_plan(n), switch_plan(n)] {
            if n > 1 {
                validate(&plan, Collective::AllReduce, n).unwrap();
            }
            for op in RedOp::ALL {
                verify(&plan, 2 * n as u64 + 1, DataType::Bf16, op, 5).unwrap();
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_plans_match_the_reference(
        ai in 0..Algorithm::ALL.len(),
        n in 1u32..=8,
        count in 0u64..40,
        in_place: bool,
        blocks in 1u32..=3,
        pipeline in 1u32..=3,
        rpn_pick in 0u32..3,
        di in 0..DataType::ALL.len(),
        oi in 0..RedOp::ALL.len(),
        root_pick in 0u32..8,
        seed: u64,
    ) {
        let algo = Algorithm::ALL[ai];
        let mut p = BuildParams::new(n);
        p.in_place = in_place;
        p.blocks = blocks;
        p.pipeline = pipeline;
        p.root = root_pick % n;
        p.ranks_per_node = [1, n, 2][rpn_pick as usize];
        p.pairs = (0..n).map(|r| (r, (r + 1 + root_pick) % n)).collect();
        prop_assume!(algo.supports(&p));
        let plan = build(algo, &p).map_err(|e| TestCaseError::fail(e.to_string()))?;
        verify(&plan, count, DataType::ALL[di], RedOp::ALL[oi], seed)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}
