//! Every builder × nranks 1..=8 × in-place/out-of-place × sizes × dtypes × ops through the
//! validator and the simulator (three schedules), compared with the reference.

use commhal_algorithms::builders::{Algorithm, BuildParams, build};
use commhal_algorithms::sim::verify;
use commhal_algorithms::{Collective, DataType, RedOp};

fn params(algo: Algorithm, n: u32, in_place: bool, variant: u32) -> BuildParams {
    let mut p = BuildParams::new(n);
    p.in_place = in_place;
    p.root = (variant + n / 2) % n;
    p.blocks = 1 + variant % 2;
    p.pipeline = 1 + variant % 3;
    // 2PH: nodes of 2 when possible, else 1 rank per node (n nodes) or one node.
    p.ranks_per_node = match variant % 3 {
        0 if n.is_multiple_of(2) => 2,
        1 => 1,
        _ => n,
    };
    if algo == Algorithm::SendRecv {
        // A shifted permutation plus, for variant 1, a self-copy.
        let shift = 1 + variant % n.max(1);
        p.pairs = (0..n).map(|r| (r, (r + shift) % n)).collect();
        if variant % 2 == 1 && n > 1 {
            p.pairs = vec![(0, 0)];
            p.pairs.extend((1..n).map(|r| (r, (r % (n - 1)) + 1)));
        }
    }
    p
}

fn counts(n: u32) -> Vec<u64> {
    vec![0, 1, 2, n as u64 - 1, n as u64 + 1, 2 * n as u64 + 3, 17]
}

#[test]
fn every_builder_every_rank_count_zero_wrong_elements() {
    for algo in Algorithm::ALL {
        for n in 1..=8u32 {
            for in_place in [false, true] {
                for variant in 0..2 {
                    let p = params(algo, n, in_place, variant);
                    if !algo.supports(&p) {
                        continue;
                    }
                    let plan = build(algo, &p).unwrap_or_else(|e| panic!("{algo:?} n={n}: {e}"));
                    let reduces = algo.collective().reduces();
                    for count in counts(n) {
                        // Full dtype × op matrix on one size; a representative subset elsewhere.
                        let full = count == n as u64 + 1 && variant == 0;
                        let dtypes: Vec<DataType> = if full {
                            DataType::ALL.to_vec()
                        } else {
                            vec![DataType::F32, DataType::F8E5M2]
                        };
                        let ops: Vec<RedOp> = if !reduces {
                            vec![RedOp::Sum]
                        } else if full {
                            RedOp::ALL.to_vec()
                        } else {
                            vec![RedOp::Sum, RedOp::Avg]
                        };
                        for &dt in &dtypes {
                            for &op in &ops {
                                verify(&plan, count, dt, op, count * 31 + n as u64).unwrap_or_else(
                                    |e| panic!("{algo:?} n={n} in_place={in_place} {p:?}: {e}"),
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn plans_survive_json() {
    for algo in Algorithm::ALL {
        let plan = build(algo, &params(algo, 4, false, 0)).unwrap();
        let back = commhal_algorithms::Plan::from_json(&plan.to_json().unwrap()).unwrap();
        assert_eq!(back, plan);
        assert_eq!(plan.collective, algo.collective());
        let _ = Collective::ALL;
    }
}

/// The hierarchical plans cross nodes into the far peer's scratch only, so no rank
/// handshakes with a rank of another node before a call (the executor's entry
/// handshake, a network round trip per call): 2, 3 and 4 nodes of 2 ranks, 2 nodes of
/// 4.
#[test]
fn hierarchical_plans_need_no_entry_handshake_across_nodes() {
    use commhal_algorithms::exec::Prepared;
    for algo in [
        Algorithm::AllReduce2phLl,
        Algorithm::AllReduce2phHb,
        Algorithm::AllGather2ph,
        Algorithm::ReduceScatter2ph,
    ] {
        for (n, l) in [(4u32, 2u32), (6, 2), (8, 2), (8, 4)] {
            for in_place in [false, true] {
                let mut p = BuildParams::new(n);
                p.ranks_per_node = l;
                p.in_place = in_place;
                let plan = build(algo, &p).unwrap();
                for r in 0..n {
                    let prep = Prepared::new(plan.clone(), r).unwrap();
                    let far: Vec<u32> = prep
                        .entry_peers
                        .iter()
                        .copied()
                        .filter(|q| q / l != r / l)
                        .collect();
                    assert!(
                        far.is_empty(),
                        "{algo:?} n={n} in_place={in_place}: rank {r} handshakes with far ranks {far:?}"
                    );
                }
            }
        }
    }
}

/// The ranks `r` hears from in `plan`: `(r, p)` for every wait on p's signal and every
/// read of p's packets.
fn hears(plan: &commhal_algorithms::Plan) -> std::collections::BTreeSet<(u32, u32)> {
    use commhal_algorithms::plan::Op;
    let mut out = std::collections::BTreeSet::new();
    for (r, blocks) in plan.flatten().iter().enumerate() {
        for (_, op) in blocks.iter().flatten() {
            match op {
                Op::Wait { peer, .. } => {
                    out.insert((r as u32, *peer));
                }
                Op::ReadReducePackets { packets, .. } => {
                    out.extend(packets.iter().map(|(p, _)| (r as u32, *p)));
                }
                _ => {}
            }
        }
    }
    out
}

/// Every builder's far scratch writer hears from its reader in every invocation: on the
/// host executor (scratch copies per plan) the plan's own signals order the reuse of a
/// copy, and on the GPUs the done-word check is a local load back to back. One-way
/// packet senders keep their own mechanism: broadcast:ll's far pairs are not far
/// scratch pairs.
#[test]
fn far_scratch_writers_hear_from_their_readers() {
    for algo in Algorithm::ALL {
        for (n, l) in [(4u32, 2u32), (4, 1), (6, 2), (8, 4)] {
            let mut p = BuildParams::new(n);
            p.ranks_per_node = l;
            p.root = 1;
            if algo == Algorithm::SendRecv {
                p.pairs = (0..n).map(|r| (r, (r + l) % n)).collect();
            }
            if !algo.supports(&p) {
                continue;
            }
            let plan = build(algo, &p).unwrap();
            let heard = hears(&plan);
            for pair in plan.far_scratch_writer_pairs() {
                assert!(pair.0 / l != pair.1 / l, "{algo:?} n={n} l={l}: {pair:?}");
                assert!(heard.contains(&pair), "{algo:?} n={n} l={l}: {pair:?}");
            }
        }
    }
    let mut p = BuildParams::new(4);
    p.ranks_per_node = 2;
    p.root = 1;
    let plan = build(Algorithm::BroadcastLl, &p).unwrap();
    assert!(plan.one_way_packet_pairs().contains(&(1, 3)));
    assert!(plan.far_scratch_writer_pairs().is_empty());
}

/// Every builder's scratch writer, near or far, hears from its reader in every
/// invocation, but one-way packet senders: back to back on the GPUs, the reader's done
/// word of launch k + 1 was published before anything the writer heard from it in that
/// launch, so the writer's check in launch k + 2 is a local load (`allreduce:1pa`: every
/// rank reads every peer's packets in every launch).
#[test]
fn scratch_writers_hear_from_their_readers_or_are_one_way() {
    for algo in Algorithm::ALL {
        for (n, l) in [(2u32, 2u32), (4, 4), (8, 8), (4, 2), (8, 4)] {
            let mut p = BuildParams::new(n);
            p.ranks_per_node = l;
            p.root = 1;
            if algo == Algorithm::SendRecv {
                p.pairs = (0..n).map(|r| (r, (r + 1) % n)).collect();
            }
            if !algo.supports(&p) {
                continue;
            }
            let plan = build(algo, &p).unwrap();
            let heard = hears(&plan);
            let one_way = plan.one_way_packet_pairs();
            for w in plan.scratch_writer_pairs() {
                let pair = (w.writer, w.reader);
                assert_eq!(
                    w.far,
                    pair.0 / l != pair.1 / l,
                    "{algo:?} n={n} l={l}: {w:?}"
                );
                assert!(
                    heard.contains(&pair) || one_way.contains(&pair),
                    "{algo:?} n={n} l={l}: {pair:?}"
                );
            }
        }
    }
    let plan = build(Algorithm::AllReduce1pa, &BuildParams::new(8)).unwrap();
    assert_eq!(plan.scratch_writer_pairs().len(), 8 * 7);
    assert!(plan.one_way_packet_pairs().is_empty());
}
