//! `commhal-gpu-bench <allreduce|allgather|reducescatter|broadcast|reduce|alltoall|sendrecv>
//! -b 1K -e 1G -f 4 [-r root] ...`: run in
//! every rank with `commhal launch -n N -- commhal-gpu-bench ...` (rank r uses GPU
//! `COMMHAL_LOCAL_RANK`, else r, modulo the device count). Without a launcher it runs
//! one rank (a copy). Exit status: 0 ok, 1 wrong results, 2 error. Fault checks
//! instead of a benchmark: `--dead-rank R` (rank R exits, as a crash, after the setup),
//! `--stop-rank R` (rank R stops itself with SIGSTOP: a hung peer) and
//! `--abort-after-ms T` (every rank aborts its communicator T ms after queuing a
//! collective that rank 0 never joins); each rank reports its error and how long it
//! took, and exits 1 when it was not the expected one
//! ([`commhal_gpu_bench::bench::run_rank`]).
//! `commhal bench <collective> --backend cuda-nvlink` runs the same benchmark
//! ([`commhal_gpu_bench::bench::run_rank`]).

use std::process::ExitCode;

use clap::Parser;
use commhal_cuda_coll::Result;
use commhal_gpu_bench::bench;
use commhal_gpu_bench::cli::Args;

/// `--split K`: a communicator on this rank's group (rank mod K) and one on the world,
/// in the same process; the benchmark on the group's, then on the world's.
fn run_split(args: &Args, k: u32) -> Result<bool> {
    use std::sync::Arc;
    use std::time::Duration;

    use commhal_cuda_coll::{CollError, Comm};
    use commhal_hal::bootstrap::{Bootstrap, split};

    let world: Arc<dyn Bootstrap> = Arc::from(commhal_cuda_coll::setup::bootstrap_from_env()?);
    let r = world.rank();
    if k == 0 || !world.size().is_multiple_of(k) {
        return Err(CollError::invalid(format!(
            "--split {k}: the {} ranks must split into equal groups",
            world.size()
        )));
    }
    let group = split(world.clone(), Some(r % k), r)?
        .ok_or_else(|| CollError::invalid("--split: this rank joined no group"))?;
    let device = commhal_cuda_coll::setup::local_device(world.as_ref())?;
    let timeout = Duration::from_millis(args.timeout_ms.max(1));
    let mk = |b: &dyn Bootstrap| {
        Comm::new(
            b,
            device,
            bench::capacity_for(args, b.size()),
            args.common.ll_max,
            timeout,
        )
    };
    let (mine, all) = (mk(&group)?, mk(world.as_ref())?);
    let group_rows = bench::run(args, &group, &mine)?;
    let world_rows = bench::run(args, world.as_ref(), &all)?;
    Ok(group_rows.wrong || world_rows.wrong)
}

fn run(args: &Args) -> Result<bool> {
    if let Some(k) = args.split {
        let wrong = run_split(args, k)?;
        println!(
            "# {}",
            if wrong {
                "WRONG RESULTS"
            } else {
                "all results correct"
            }
        );
        return Ok(wrong);
    }
    let boot = commhal_cuda_coll::setup::bootstrap_from_env()?;
    let out = bench::run_rank(args, boot.as_ref())?;
    if args.common.fault().is_some() {
        // every surviving rank printed its own outcome; the exit status says the rest
    } else if out.rank == 0 {
        println!(
            "# {}",
            if out.wrong {
                "WRONG RESULTS"
            } else {
                "all results correct"
            }
        );
    }
    Ok(out.wrong)
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = args
        .check_nccl_tests_flags()
        .and_then(|()| args.check_fault_flags())
    {
        eprintln!("commhal-gpu-bench: {e}");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::from(1),
        Err(e) => {
            eprintln!("commhal-gpu-bench: error: {e}");
            ExitCode::from(2)
        }
    }
}
