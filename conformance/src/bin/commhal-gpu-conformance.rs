//! `commhal-gpu-conformance`: the GPU conformance suite and benchmarks, run in every
//! rank process:
//!
//! ```text
//! commhal launch -n 2 -- commhal-gpu-conformance conformance --backend cuda-nvlink [--quick] [--json]
//! commhal launch -n 2 -- commhal-gpu-conformance bench [--quick] [--json]
//! ```
//!
//! Exit code: 0 when nothing failed.

use clap::{Parser, Subcommand};

/// GPU conformance and benchmarks (one process per GPU, under `commhal launch`).
#[derive(Debug, Parser)]
#[command(name = "commhal-gpu-conformance")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Run the conformance cases of a GPU backend.
    Conformance {
        /// `cuda-nvlink`, `cuda-dma` or `all`.
        #[arg(long, default_value = "all")]
        backend: String,
        /// Small counts (CI tier; first pairing round only).
        #[arg(long)]
        quick: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Run only the cases whose id contains this text (e.g.
        /// `coll=reduce,algo=allpairs`); every rank skips the same cases.
        #[arg(long)]
        only: Option<String>,
    },
    /// Latency and bandwidth between ranks 0 and 1, plus cuMemcpyPeer.
    Bench {
        /// Fewer repetitions, sizes up to 256 MiB.
        #[arg(long)]
        quick: bool,
        /// Print rows as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() {
    commhal_backends::link_all();
    let code = match Cli::parse().mode {
        Mode::Conformance {
            backend,
            quick,
            json,
            only,
        } => commhal_conformance::gpu::run(&backend, quick, json, only),
        Mode::Bench { quick, json } => commhal_conformance::gpu::bench::run(quick, json),
    };
    std::process::exit(code);
}
