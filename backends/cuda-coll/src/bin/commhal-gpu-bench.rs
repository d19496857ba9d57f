//! `commhal-gpu-bench <allreduce|allgather|reducescatter|broadcast|reduce|alltoall|sendrecv>
//! -b 1K -e 1G -f 4 [-r root] ...`: run in
//! every rank with `commhal launch -n N -- commhal-gpu-bench ...` (rank r uses GPU
//! `COMMHAL_LOCAL_RANK`, else r, modulo the device count). Without a launcher it runs
//! one rank (a copy). Exit status: 0 ok, 1 wrong results, 2 error.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use commhal_cuda_coll::bench;
use commhal_cuda_coll::cli::{self, Args};
use commhal_cuda_coll::{Comm, Result};
use commhal_hal::bootstrap::{Bootstrap, InProcBootstrap, LaunchEnv, TcpBootstrap};

fn run(args: &Args) -> Result<bool> {
    let boot: Box<dyn Bootstrap> = match LaunchEnv::detect()? {
        Some(_) => Box::new(TcpBootstrap::from_env()?),
        None => Box::new(
            InProcBootstrap::create(1)
                .pop()
                .ok_or_else(|| commhal_cuda_coll::CollError::invalid("no in-process bootstrap"))?,
        ),
    };
    let ndev = commhal_cuda_rt::driver::device_count()?;
    if ndev == 0 {
        return Err(commhal_cuda_rt::CudaError::NoDevice("no CUDA device".into()).into());
    }
    let local = std::env::var("COMMHAL_LOCAL_RANK")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(boot.rank());
    let n = boot.size();
    // Capacity: the largest size's buffers (`count` is the whole buffer for every
    // collective: all-gather's output, reduce-scatter's and all-to-all's input).
    let (count, _) = cli::counts(args.collective, args.max_bytes, args.dtype, n);
    let cap = count * args.dtype.size();
    let comm = Comm::new(
        boot.as_ref(),
        local % ndev,
        cap,
        args.ll_max,
        Duration::from_millis(args.timeout_ms.max(1)),
    )?;
    let (ours, theirs, wrong) = bench::run(args, boot.as_ref(), &comm)?;
    if comm.rank() == 0 {
        if let Some(path) = &args.json {
            let doc = serde_json::json!({
                "collective": args.collective,
                "dtype": args.dtype,
                "nranks": n,
                "graph": args.graph,
                "device": comm.context().name().unwrap_or_default(),
                "tuning": format!("{:?}", comm.tuning()),
                "commhal": ours,
                "nccl": theirs,
            });
            let text = serde_json::to_string_pretty(&doc)
                .map_err(|e| commhal_cuda_coll::CollError::invalid(format!("JSON: {e}")))?;
            if let Err(e) = std::fs::write(path, text) {
                eprintln!("commhal-gpu-bench: writing {}: {e}", path.display());
            }
        }
        println!(
            "# {}",
            if wrong {
                "WRONG RESULTS"
            } else {
                "all results correct"
            }
        );
    }
    boot.barrier()?;
    Ok(wrong)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::from(1),
        Err(e) => {
            eprintln!("commhal-gpu-bench: error: {e}");
            ExitCode::from(2)
        }
    }
}
