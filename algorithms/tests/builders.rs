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
