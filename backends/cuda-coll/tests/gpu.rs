//! GPU tests: one rank (the degenerate copy path of every kernel: all-reduce,
//! all-gather, reduce-scatter, broadcast, reduce, all-to-all, send/recv) through the
//! real driver. Without a GPU each test prints SKIPPED and checks nothing; with
//! `COMMHAL_REQUIRE_GPU=1` a missing GPU (or NVRTC) fails instead. Multi-GPU runs are
//! covered by `scripts/gpu-bench.sh` (checks every size on every rank).

use std::time::Duration;

use commhal_cuda_coll::check;
use commhal_cuda_coll::cli::{Collective, Dtype};
use commhal_cuda_coll::kernels::ReduceOp;
use commhal_cuda_coll::{Comm, driver};
use commhal_hal::bootstrap::InProcBootstrap;

fn gpu_or_skip(test: &str) -> bool {
    let require = std::env::var("COMMHAL_REQUIRE_GPU").as_deref() == Ok("1");
    let ok = commhal_cuda_rt::probe().is_available() && commhal_cuda_rt::nvrtc_available();
    if !ok {
        assert!(!require, "{test}: COMMHAL_REQUIRE_GPU=1 but no GPU/NVRTC");
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: no GPU or NVRTC");
    }
    ok
}

#[test]
fn one_rank_collectives_copy_exactly() {
    if !gpu_or_skip("one_rank_collectives_copy_exactly") {
        return;
    }
    let boot = InProcBootstrap::create(1).pop().expect("bootstrap");
    let comm = Comm::new(&boot, 0, 4 << 20, None, Duration::from_secs(5)).expect("comm");
    for dtype in [Dtype::Half, Dtype::Bfloat16, Dtype::Float] {
        let cap = comm.capacity() / dtype.size();
        comm.input()
            .write(0, &check::input_bytes(dtype, ReduceOp::Sum, 0, cap))
            .expect("input");
        for coll in [
            Collective::Allreduce,
            Collective::Allgather,
            Collective::Reducescatter,
            Collective::Broadcast,
            Collective::Reduce,
            Collective::Alltoall,
            Collective::Sendrecv,
        ] {
            // LL (small), two-shot (large), an uneven count
            for bytes in [1024u64, 1 << 20, 1000 * dtype.size() + 2] {
                let (count, per) = commhal_cuda_coll::cli::counts(coll, bytes, dtype, 1);
                let len = count * dtype.size();
                // SAFETY: within the output allocation (capacity 4 MiB).
                unsafe { driver::memset_async(comm.stream(), comm.output_addr(), 0xff, len) }
                    .expect("poison");
                let c = if coll.count_is_per_rank() { per } else { count };
                comm.launch_rooted(coll, dtype, ReduceOp::Sum, c, 0, false)
                    .expect("launch");
                comm.sync("test").expect("sync");
                let mut out = vec![0u8; len as usize];
                // SAFETY: within the output allocation.
                unsafe { driver::read(comm.context(), comm.output_addr(), &mut out) }
                    .expect("read");
                assert_eq!(
                    check::count_wrong(coll, dtype, ReduceOp::Sum, 0, 1, 0, count, per, &out),
                    0,
                    "{coll:?} {dtype:?} {bytes} B"
                );
            }
        }
    }
}

/// Argument errors of the new collectives come back as errors, not launches.
#[test]
fn rooted_and_out_of_place_only_collectives_reject_bad_arguments() {
    if !gpu_or_skip("rooted_and_out_of_place_only_collectives_reject_bad_arguments") {
        return;
    }
    let boot = InProcBootstrap::create(1).pop().expect("bootstrap");
    let comm = Comm::new(&boot, 0, 1 << 20, None, Duration::from_secs(5)).expect("comm");
    for coll in [Collective::Broadcast, Collective::Reduce] {
        let e = comm.launch_rooted(coll, Dtype::Half, ReduceOp::Sum, 512, 1, false);
        assert!(e.is_err(), "{coll:?} root 1 of 1 rank must fail");
    }
    for coll in [Collective::Alltoall, Collective::Sendrecv] {
        let e = comm.launch_rooted(coll, Dtype::Half, ReduceOp::Sum, 512, 0, true);
        assert!(e.is_err(), "{coll:?} in place must fail");
    }
    let too_big = comm.capacity() / 2 + 1;
    assert!(
        comm.launch_rooted(
            Collective::Broadcast,
            Dtype::Half,
            ReduceOp::Sum,
            too_big,
            0,
            false
        )
        .is_err()
    );
    comm.sync("nothing queued").expect("sync");
}
