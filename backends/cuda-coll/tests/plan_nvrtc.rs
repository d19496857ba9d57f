//! NVRTC compiles the CUDA generated from plans (no GPU needed): every builder's plan,
//! every data type and every op. With `COMMHAL_REQUIRE_NVRTC=1` (CI) a missing NVRTC
//! fails; otherwise the test prints SKIPPED and checks nothing.

use commhal_algorithms::builders::{Algorithm, BuildParams, build};
use commhal_algorithms::codegen::generate_cuda;
use commhal_algorithms::{DataType, RedOp};
use commhal_cuda_coll::plan_exec::compile;
use commhal_cuda_rt::nvrtc::loader::nvrtc_or_skip;

fn params(algo: Algorithm, n: u32, in_place: bool) -> BuildParams {
    let mut p = BuildParams::new(n);
    p.in_place = in_place;
    p.blocks = 2;
    p.pipeline = 2;
    if algo == Algorithm::SendRecv {
        p.pairs = (0..n).map(|r| (r, (r + 1) % n)).collect();
    }
    p
}

#[test]
fn every_builder_compiles_for_sm_90() {
    if !nvrtc_or_skip("every_builder_compiles_for_sm_90") {
        return;
    }
    let mut compiled = 0;
    for algo in Algorithm::ALL {
        for (n, in_place) in [(4u32, false), (3, true)] {
            let p = params(algo, n, in_place);
            if !algo.supports(&p) {
                continue;
            }
            let plan = build(algo, &p).unwrap_or_else(|e| panic!("{algo:?}: {e}"));
            let k = generate_cuda(&plan, n - 1, DataType::F16, RedOp::Sum)
                .unwrap_or_else(|e| panic!("{}: {e}", plan.name));
            compile(&k, "sm_90", None)
                .unwrap_or_else(|e| panic!("{} (n={n}):\n{e}\n{}", plan.name, k.source));
            compiled += 1;
        }
    }
    assert!(compiled >= 2 * Algorithm::ALL.len() - 4, "{compiled}");
}

#[test]
fn ll_plans_compile_on_every_rank() {
    // The broadcast root (wait_done) and its receivers (publish_done) differ; the
    // all-pairs plans do both (done words between near scratch writers and readers).
    if !nvrtc_or_skip("ll_plans_compile_on_every_rank") {
        return;
    }
    for algo in [
        Algorithm::AllGatherLl,
        Algorithm::ReduceScatterLl,
        Algorithm::BroadcastLl,
        Algorithm::AllReduce1pa,
    ] {
        let mut p = params(algo, 3, false);
        p.root = 1;
        let plan = build(algo, &p).unwrap_or_else(|e| panic!("{algo:?}: {e}"));
        for r in 0..3 {
            let k = generate_cuda(&plan, r, DataType::Bf16, RedOp::Sum)
                .unwrap_or_else(|e| panic!("{}: {e}", plan.name));
            let done = k.source.contains("publish_done(") || k.source.contains("wait_done<");
            assert!(done, "{}: no done word on rank {r}", plan.name);
            compile(&k, "sm_90", None)
                .unwrap_or_else(|e| panic!("{} r={r}:\n{e}\n{}", plan.name, k.source));
        }
    }
}

#[test]
fn every_dtype_and_op_compiles_for_sm_90() {
    // Every (type, op) of the element layer (commhal/elem.h) through reduce_packets and
    // finalize_avg (2pa-ll), and every type through reduce (2pa-hb), the op rotating.
    if !nvrtc_or_skip("every_dtype_and_op_compiles_for_sm_90") {
        return;
    }
    let compile_all = |algo: Algorithm, ops: &dyn Fn(usize) -> Vec<RedOp>| {
        let plan = build(algo, &params(algo, 2, false)).unwrap();
        for (i, dt) in DataType::ALL.into_iter().enumerate() {
            for op in ops(i) {
                let k = generate_cuda(&plan, 0, dt, op).unwrap();
                compile(&k, "sm_90", None)
                    .unwrap_or_else(|e| panic!("{} {dt} {op:?}:\n{e}\n{}", plan.name, k.source));
            }
        }
    };
    compile_all(Algorithm::AllReduce2paLl, &|_| RedOp::ALL.to_vec());
    compile_all(Algorithm::AllReduce2paHb, &|i| {
        vec![RedOp::ALL[i % RedOp::ALL.len()]]
    });
}

#[test]
fn plans_across_two_nodes_compile_on_every_rank() {
    // 2 × 2 virtual nodes: every plan that runs across them (puts, signals, waits,
    // handshakes and done words through the port proxy) compiles on every rank.
    if !nvrtc_or_skip("plans_across_two_nodes_compile_on_every_rank") {
        return;
    }
    let (mut far, mut done) = (0, 0);
    for algo in Algorithm::ALL {
        let mut p = params(algo, 4, false);
        p.ranks_per_node = 2;
        if !algo.supports(&p) {
            continue;
        }
        let Ok(plan) = build(algo, &p) else { continue };
        for r in 0..4 {
            let Ok(k) = generate_cuda(&plan, r, DataType::F32, RedOp::Sum) else {
                continue; // packets or reads across nodes: refused (codegen tests)
            };
            far += usize::from(k.far != 0);
            done += usize::from(k.source.contains("far_publish_done("));
            compile(&k, "sm_90", None)
                .unwrap_or_else(|e| panic!("{} r={r}:\n{e}\n{}", plan.name, k.source));
        }
    }
    assert!(far >= 20, "{far} kernels with port channels");
    // the hierarchical plans' far scratch readers publish their progress
    assert!(done >= 12, "{done} kernels publish to far scratch writers");
}
