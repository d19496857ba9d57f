//! NVRTC compiles the per-(type, op) modules of `coll_nvlink.cu` (no GPU needed):
//! every reducing kernel for every type at least once and every op at least once, as
//! sm_90 CUBINs, plus one PTX build whose entry points must be exactly
//! `COLL_NVLINK_TYPED`. Without NVRTC the test prints SKIPPED (with
//! `COMMHAL_REQUIRE_NVRTC=1` it fails instead; see scripts/test.sh).

use std::time::Instant;

use commhal_algorithms::dtype::DataType;
use commhal_cuda_coll::kernels::{ReduceOp, all_ops, typed_options};
use commhal_cuda_rt::nvrtc::loader::nvrtc_or_skip;
use commhal_cuda_rt::{ImageKind, jit};
use commhal_device_src::{COLL_NVLINK, COLL_NVLINK_TYPED};

/// (type, op): every type once, the ops in turn (each op twice over the 12 types).
fn matrix() -> Vec<(DataType, ReduceOp)> {
    let ops = all_ops(0.5);
    DataType::ALL
        .iter()
        .enumerate()
        .map(|(i, d)| (*d, ops[i % ops.len()]))
        .collect()
}

#[test]
fn every_type_and_op_compiles_for_sm_90() {
    if !nvrtc_or_skip("every_type_and_op_compiles_for_sm_90") {
        return;
    }
    let m = matrix();
    for op in all_ops(0.5) {
        assert!(m.iter().any(|(_, o)| o.code() == op.code()), "{op:?}");
    }
    let t0 = Instant::now();
    // two compiles at a time (CI has 2 cores)
    let results: Vec<(String, f64, Result<(), String>)> = m
        .chunks(m.len().div_ceil(2))
        .map(|part| part.to_vec())
        .map(|part| {
            std::thread::spawn(move || {
                part.into_iter()
                    .map(|(d, op)| {
                        let t = Instant::now();
                        let r = jit::compile_unit_with(
                            &COLL_NVLINK,
                            "sm_90",
                            &typed_options(d, op),
                            None,
                        )
                        .map_err(|e| e.to_string())
                        .and_then(|(img, _)| {
                            if img.kind != ImageKind::Cubin || !img.bytes.starts_with(b"\x7fELF") {
                                return Err("not a CUBIN".to_string());
                            }
                            if img.log.contains("warning") {
                                return Err(format!("NVRTC warnings:\n{}", img.log));
                            }
                            Ok(())
                        });
                        (
                            format!("({d}, {})", op.name()),
                            t.elapsed().as_secs_f64(),
                            r,
                        )
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flat_map(|h| h.join().unwrap_or_default())
        .collect();
    for (what, secs, r) in &results {
        eprintln!("{what}: {secs:.1} s");
        if let Err(e) = r {
            panic!("{what}: {e}");
        }
    }
    assert_eq!(results.len(), m.len());
    eprintln!("{} modules in {:.1} s", m.len(), t0.elapsed().as_secs_f64());
}

#[test]
fn typed_module_entry_points_are_the_listed_kernels() {
    if !nvrtc_or_skip("typed_module_entry_points_are_the_listed_kernels") {
        return;
    }
    let (img, _) = jit::compile_unit_with(
        &COLL_NVLINK,
        "compute_90",
        &typed_options(DataType::I32, ReduceOp::Avg),
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let ptx = String::from_utf8_lossy(&img.bytes);
    let mut entries: Vec<String> = ptx
        .lines()
        .filter_map(|l| l.trim().strip_prefix(".visible .entry "))
        .map(|l| l.split('(').next().unwrap_or_default().trim().to_string())
        .collect();
    entries.sort();
    let mut listed: Vec<String> = COLL_NVLINK_TYPED.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(entries, listed);
}
