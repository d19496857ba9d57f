//! The real executor (threads as ranks, InProcBootstrap) against `sim::reference`:
//! every algorithm × placement × rank counts 1–8 × awkward sizes, plus the full
//! dtype × op matrix at one size.

mod common;

use commhal_algorithms::builders::Algorithm;
use commhal_algorithms::comm::{RecvBuf, SendBuf};
use commhal_algorithms::plan::Collective;
use commhal_algorithms::{DataType, RedOp, reduce_into};
use common::{Case, check_case, with_ranks};

const COUNTS: [u64; 5] = [0, 1, 7, 61, 1000];

fn algo_cases(algo: Algorithm, n: u32, rpn: u32) {
    let coll = algo.collective();
    let spec = format!("{}:{}", coll.name(), algo.short_name());
    let spec2 = spec.clone();
    with_ranks(n, rpn, Some(&spec2), move |comm| {
        for in_place in [false, true] {
            for count in COUNTS {
                let case = Case {
                    coll,
                    count,
                    dtype: DataType::F32,
                    op: if coll.reduces() && count == 7 {
                        RedOp::Max
                    } else {
                        RedOp::Sum
                    },
                    root: n - 1,
                    in_place,
                    registered: count == 61,
                    seed: count ^ n as u64,
                };
                check_case(comm, &case).unwrap_or_else(|e| panic!("{spec} n={n} {case:?}: {e}"));
            }
        }
    });
}

#[test]
fn every_algorithm_every_rank_count() {
    for n in 1..=8u32 {
        for algo in Algorithm::ALL {
            match algo {
                Algorithm::SendRecv => continue,
                Algorithm::AllReduce2phLl | Algorithm::AllReduce2phHb => continue,
                _ => {}
            }
            // Keep it quick: rings and the slow pairs at 8 ranks only for AllReduce.
            algo_cases(algo, n, n);
        }
    }
}

#[test]
fn hierarchical_allreduce_on_virtual_nodes() {
    for (n, rpn) in [(2, 1), (4, 2), (6, 3), (6, 2), (8, 4)] {
        for algo in [Algorithm::AllReduce2phLl, Algorithm::AllReduce2phHb] {
            algo_cases(algo, n, rpn);
        }
    }
}

#[test]
fn every_dtype_and_op_at_one_size() {
    for (algo, n) in [
        ("allreduce:1pa", 3),
        ("reducescatter:ll", 3),
        ("allreduce:2pa-hb", 4),
        ("allreduce:2pa-ll", 3),
        ("allreduce:ring", 5),
        ("reducescatter:allpairs", 3),
        ("reduce:allpairs", 3),
    ] {
        with_ranks(n, n, Some(algo), move |comm| {
            let coll = Collective::from_name(algo.split(':').next().unwrap()).unwrap();
            for dtype in DataType::ALL {
                for op in RedOp::ALL {
                    for in_place in [false, true] {
                        let case = Case {
                            coll,
                            count: 37,
                            dtype,
                            op,
                            root: 1,
                            in_place,
                            registered: false,
                            seed: 7,
                        };
                        check_case(comm, &case)
                            .unwrap_or_else(|e| panic!("{algo} n={n} {case:?}: {e}"));
                    }
                }
            }
        });
    }
}

#[test]
fn repeated_calls_rotate_scratch_and_flags() {
    // Many invocations of LL and HB plans back to back, alternating sizes and
    // collectives, so stale packets/scratch from earlier calls would show.
    with_ranks(4, 4, None, |comm| {
        for i in 0..60u64 {
            let count = [5, 300, 4096, 40_000][(i % 4) as usize];
            let coll = [Collective::AllReduce, Collective::AllGather][(i % 3 == 0) as usize];
            let case = Case {
                coll,
                count,
                dtype: DataType::F32,
                op: RedOp::Sum,
                root: 0,
                in_place: i % 2 == 0,
                registered: i % 5 == 0,
                seed: i,
            };
            check_case(comm, &case).unwrap_or_else(|e| panic!("call {i} {case:?}: {e}"));
        }
    });
}

#[test]
fn one_way_packet_senders_never_overrun_a_slow_receiver() {
    // broadcast:ll's root never hears from the receivers: without the executor's
    // progress credits it would run several invocations ahead and overwrite a scratch
    // copy a late receiver has not read yet (its wait for the old flag then times out).
    with_ranks(3, 3, Some("broadcast:ll"), |comm| {
        let me = comm.rank();
        for i in 0..8u64 {
            if me == 2 && i % 4 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let case = Case {
                coll: Collective::Broadcast,
                count: 1000 + i % 2,
                dtype: DataType::F32,
                op: RedOp::Sum,
                root: 0,
                in_place: false,
                registered: false,
                seed: i,
            };
            check_case(comm, &case).unwrap_or_else(|e| panic!("call {i} {case:?}: {e}"));
        }
    });
}

/// Every rank of an all-reduce gets the same bits, with data whose sums round: the
/// one-shot plan (every rank reduces every input) sums in rank order (the packets of the
/// lower ranks, its own input, then the higher ranks'), as the hand-written GPU kernels,
/// and gets the rank-order sum; the hierarchical plans add the nodes' partial sums in
/// rank order on every node (3 virtual nodes: two far partials).
#[test]
fn allreduce_same_bits_on_every_rank() {
    for (algo, n, rpn, rank_order) in [
        ("allreduce:1pa", 3, 3, true),
        ("allreduce:1pa", 4, 4, true),
        ("allreduce:1pa", 5, 5, true),
        ("allreduce:2ph-hb", 6, 2, false),
        ("allreduce:2ph-ll", 6, 2, false),
    ] {
        for dtype in [DataType::F32, DataType::F16, DataType::Bf16] {
            same_bits_case(algo, n, rpn, rank_order, dtype);
        }
    }
}

fn same_bits_case(algo: &str, n: u32, rpn: u32, rank_order: bool, dtype: DataType) {
    use std::sync::Mutex;
    let count = 999u64;
    let input = |r: u32| {
        let mut v = Vec::new();
        for i in 0..count {
            // magnitudes far apart, so that the order of the terms shows
            let x = (1.0 + (i as f64) * 0.001) * 10f64.powi((r as i32 * 3 + i as i32) % 7 - 3);
            dtype.encode(
                if (i + r as u64).is_multiple_of(3) {
                    -x
                } else {
                    x
                },
                &mut v,
            );
        }
        v
    };
    let got = Mutex::new(vec![Vec::new(); n as usize]);
    with_ranks(n, rpn, Some(algo), |comm| {
        let me = comm.rank();
        let (mine, mut out) = (input(me), vec![0u8; count as usize * dtype.size()]);
        let (send, recv) = (SendBuf::from(&mine[..]), RecvBuf::from(&mut out[..]));
        comm.all_reduce(send, recv, count, dtype, RedOp::Sum)
            .unwrap();
        got.lock().unwrap()[me as usize] = out;
    });
    let got = got.into_inner().unwrap();
    for (r, g) in got.iter().enumerate() {
        assert!(
            g == &got[0],
            "{algo} {dtype:?} n={n}: rank {r} differs from rank 0"
        );
    }
    if rank_order {
        let mut want = input(0);
        for r in 1..n {
            reduce_into(&mut want, &input(r), dtype, RedOp::Sum).unwrap();
        }
        assert!(
            got[0] == want,
            "{algo} {dtype:?} n={n}: not the rank-order sum"
        );
    }
}
