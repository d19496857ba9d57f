//! `commhal-gpu-bench <allreduce|allgather|reducescatter|broadcast|reduce|alltoall|sendrecv>
//! -b 1K -e 1G -f 4 [-r root] ...`: run in
//! every rank with `commhal launch -n N -- commhal-gpu-bench ...` (rank r uses GPU
//! `COMMHAL_LOCAL_RANK`, else r, modulo the device count). Without a launcher it runs
//! one rank (a copy). Exit status: 0 ok, 1 wrong results, 2 error. `--dead-rank R`:
//! rank R leaves after the setup and the others check that their collective fails
//! cleanly (exit 1 on a rank whose sync did not fail).
//! `commhal bench <collective> --backend cuda-nvlink` runs the same benchmark
//! ([`commhal_cuda_coll::bench::run_rank`]).

use std::process::ExitCode;

use clap::Parser;
use commhal_cuda_coll::Result;
use commhal_cuda_coll::bench;
use commhal_cuda_coll::cli::Args;

fn run(args: &Args) -> Result<bool> {
    let boot = bench::bootstrap_from_env()?;
    let out = bench::run_rank(args, boot.as_ref())?;
    if args.dead_rank.is_some() {
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
    if let Err(e) = args.check_nccl_tests_flags() {
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
