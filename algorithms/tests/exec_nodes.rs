//! Collectives across virtual nodes: ranks as threads (InProcBootstrap) on 2 and 3
//! nodes; cross-node traffic goes over `host-tcp` ports, never through shared memory.
//!
//! Checked: AllReduce 2PH LL/HB and ring for several dtypes, ops, sizes (0, 1, uneven)
//! and placements against `sim::reference`; AllGather/ReduceScatter/Broadcast, Reduce,
//! AllToAll and send/recv across nodes; that far peers are never mapped and that bytes,
//! signals and flushes went over TCP (and nothing does on one node).

mod common;

use commhal_algorithms::builders::Algorithm;
use commhal_algorithms::plan::Collective;
use commhal_algorithms::{DataType, RedOp};
use common::{Case, check_case, with_ranks};

/// (ranks, ranks per node): 2 and 3 nodes.
const LAYOUTS: [(u32, u32); 2] = [(4, 2), (6, 2)];
const COUNTS: [u64; 4] = [0, 1, 37, 1531];

fn allreduce_cases(spec: &str, dtypes: &[(DataType, RedOp)]) {
    for (n, rpn) in LAYOUTS {
        with_ranks(n, rpn, Some(spec), |comm| {
            assert_eq!(comm.topology().ranks_per_node, rpn);
            let mut k = 0u64;
            for &(dtype, op) in dtypes {
                for count in COUNTS {
                    k += 1;
                    let case = Case {
                        coll: Collective::AllReduce,
                        count,
                        dtype,
                        op,
                        root: 0,
                        in_place: k.is_multiple_of(3),
                        registered: k.is_multiple_of(4),
                        seed: count ^ (n as u64) << 8 ^ k,
                    };
                    check_case(comm, &case)
                        .unwrap_or_else(|e| panic!("{spec} n={n} rpn={rpn} {case:?}: {e}"));
                }
            }
            // Every rank signals across nodes; together the ranks wrote bytes over TCP
            // (in a ring, only ranks whose next rank is on another node write).
            let st = comm.port_stats();
            assert!(st.signals > 0, "{spec}: no signal went over TCP: {st:?}");
            // host-tcp writes return with their source reusable, which is all a plan's
            // `Flush` asks: no flush (a TCP round trip) goes over the port.
            assert_eq!(st.flushes, 0, "{spec}: a flush went over TCP: {st:?}");
            let all = comm
                .bootstrap()
                .all_gather(&st.bytes.to_le_bytes())
                .unwrap();
            let total: u64 = all
                .iter()
                .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap()))
                .sum();
            assert!(total > 0, "{spec}: no bytes went over TCP");
            let me = comm.rank();
            let mapped = comm.mapped_ranks();
            let node: Vec<u32> = (0..n).filter(|q| q / rpn == me / rpn).collect();
            assert_eq!(mapped, node, "rank {me} maps exactly its node's ranks");
        });
    }
}

const TYPES: [(DataType, RedOp); 5] = [
    (DataType::F32, RedOp::Sum),
    (DataType::F64, RedOp::Max),
    (DataType::I32, RedOp::Prod),
    (DataType::Bf16, RedOp::Avg),
    (DataType::U8, RedOp::Min),
];

#[test]
fn allreduce_2ph_ll_across_nodes() {
    allreduce_cases("allreduce:2ph-ll", &TYPES);
}

#[test]
fn allreduce_2ph_hb_across_nodes() {
    allreduce_cases("allreduce:2ph-hb", &TYPES);
}

#[test]
fn allreduce_ring_across_nodes() {
    allreduce_cases("allreduce:ring", &TYPES[..3]);
}

#[test]
fn selector_default_runs_across_nodes() {
    with_ranks(4, 2, None, |comm| {
        for (i, count) in [1u64, 999, 70_000].into_iter().enumerate() {
            let case = Case {
                coll: Collective::AllReduce,
                count,
                dtype: DataType::F32,
                op: RedOp::Sum,
                root: 0,
                in_place: i == 1,
                registered: false,
                seed: count,
            };
            check_case(comm, &case).unwrap_or_else(|e| panic!("{case:?}: {e}"));
        }
        assert!(comm.port_stats().bytes > 0);
    });
}

/// Hierarchical all-gather and reduce-scatter on 2 and 3 nodes: one copy of each chunk
/// (partial) crosses each node boundary.
#[test]
fn hierarchical_allgather_and_reducescatter() {
    for (n, rpn) in LAYOUTS {
        for (spec, coll) in [
            ("allgather:2ph", Collective::AllGather),
            ("reducescatter:2ph", Collective::ReduceScatter),
        ] {
            with_ranks(n, rpn, Some(spec), |comm| {
                for (i, count) in COUNTS.into_iter().enumerate() {
                    for (dtype, op) in [(DataType::I32, RedOp::Sum), (DataType::F32, RedOp::Max)] {
                        let case = Case {
                            coll,
                            count,
                            dtype,
                            op,
                            root: 0,
                            in_place: i % 2 == 1,
                            registered: i == 2,
                            seed: count + 5 * n as u64 + i as u64,
                        };
                        check_case(comm, &case)
                            .unwrap_or_else(|e| panic!("{spec} n={n} rpn={rpn} {case:?}: {e}"));
                    }
                }
                assert!(comm.port_stats().bytes > 0);
            });
        }
    }
}

/// AllGather, ReduceScatter and Broadcast with the table's choice, across nodes (port
/// channels between the nodes).
#[test]
fn other_collectives_cross_nodes() {
    for (n, rpn) in LAYOUTS {
        with_ranks(n, rpn, None, |comm| {
            for coll in [
                Collective::AllGather,
                Collective::ReduceScatter,
                Collective::Broadcast,
            ] {
                for (i, count) in [0u64, 1, 301].into_iter().enumerate() {
                    let case = Case {
                        coll,
                        count,
                        dtype: DataType::I32,
                        op: RedOp::Sum,
                        root: (n - 1).min(i as u32 * 3),
                        in_place: i == 2,
                        registered: i == 1,
                        seed: count + n as u64,
                    };
                    check_case(comm, &case)
                        .unwrap_or_else(|e| panic!("n={n} rpn={rpn} {case:?}: {e}"));
                }
            }
        });
    }
}

#[test]
fn nothing_goes_over_tcp_on_one_node() {
    with_ranks(4, 4, Some("allreduce:ring"), |comm| {
        let case = Case {
            coll: Collective::AllReduce,
            count: 1000,
            dtype: DataType::F32,
            op: RedOp::Sum,
            root: 0,
            in_place: false,
            registered: false,
            seed: 7,
        };
        check_case(comm, &case).unwrap();
        assert_eq!(comm.port_stats(), Default::default());
        assert_eq!(comm.mapped_ranks(), vec![0, 1, 2, 3]);
    });
}

/// Reduce and all-to-all (all-pairs plans whose cross-node puts, signals and waits go
/// on port channels) and send/recv across nodes: pieces larger than a slot half, both
/// directions at once, through `host-tcp`.
#[test]
fn reduce_alltoall_and_send_recv_cross_nodes() {
    for (n, rpn) in LAYOUTS {
        with_ranks(n, rpn, None, |comm| {
            for coll in [Collective::Reduce, Collective::AllToAll] {
                for (i, count) in [0u64, 1, 301].into_iter().enumerate() {
                    let case = Case {
                        coll,
                        count,
                        dtype: DataType::I32,
                        op: RedOp::Max,
                        root: (n - 1).min(i as u32 * 3),
                        in_place: i == 2,
                        registered: i == 1,
                        seed: count + 11 * n as u64,
                    };
                    check_case(comm, &case)
                        .unwrap_or_else(|e| panic!("n={n} rpn={rpn} {case:?}: {e}"));
                }
            }
            // A ring of sends and receives; rank r's next rank r + rpn is on the next
            // node. 600 KiB: more than one slot half (256 KiB), so credits turn over.
            let me = comm.rank();
            let (next, prev) = ((me + rpn) % n, (me + n - rpn) % n);
            let len = 600 * 1024 + 3;
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + me as usize * 13) as u8).collect();
            let mut got = vec![0u8; len];
            let mut g = comm.group_start();
            g.send(next, &data).unwrap();
            g.recv(prev, &mut got).unwrap();
            g.group_end().unwrap();
            let want: Vec<u8> = (0..len)
                .map(|i| (i * 7 + prev as usize * 13) as u8)
                .collect();
            assert!(got == want, "rank {me}: wrong bytes from rank {prev}");
            assert!(comm.port_stats().bytes > 0);
        });
    }
}

/// The hierarchical plans interleaved with plans in which a writer across nodes does
/// not hear from its reader (a broadcast:ll root, a reduce non-root, a send) on 2 nodes
/// of 2: the host executor keeps scratch copies per plan, so each plan's own signals
/// order their reuse whatever runs in between (the GPUs, whose copies rotate over
/// every plan, order it with done words: `Plan::scratch_writer_pairs`).
#[test]
fn hierarchical_plans_interleaved_with_one_way_plans() {
    let algos = "allreduce:2ph-hb,allgather:2ph,reducescatter:2ph,broadcast:ll";
    with_ranks(4, 2, Some(algos), |comm| {
        let (me, n) = (comm.rank(), comm.size());
        let bcast = comm.algorithm_for(Collective::Broadcast, 1, DataType::I32);
        assert_eq!(bcast.unwrap(), Algorithm::BroadcastLl);
        for round in 0..6u64 {
            for (i, coll) in [
                Collective::ReduceScatter,
                Collective::Broadcast,
                Collective::AllReduce,
                Collective::Reduce,
                Collective::AllGather,
            ]
            .into_iter()
            .enumerate()
            {
                let count = 1 + 97 * ((round + i as u64) % 3);
                let case = Case {
                    coll,
                    count,
                    dtype: DataType::I32,
                    op: RedOp::Sum,
                    root: (round as u32 + i as u32) % n,
                    in_place: round % 2 == 1,
                    registered: false,
                    seed: 31 * round + i as u64,
                };
                check_case(comm, &case).unwrap_or_else(|e| panic!("round {round} {case:?}: {e}"));
            }
            // An exchange with the other node's rank (send/recv plans).
            let peer = (me + 2) % n;
            let data = vec![round as u8 ^ me as u8; 513];
            let mut got = vec![0u8; 513];
            let mut g = comm.group_start();
            g.send(peer, &data).unwrap();
            g.recv(peer, &mut got).unwrap();
            g.group_end().unwrap();
            assert!(
                got.iter().all(|&b| b == round as u8 ^ peer as u8),
                "rank {me}"
            );
        }
        assert!(comm.port_stats().bytes > 0);
    });
}
