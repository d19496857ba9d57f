//! `commhal`: inspect backends, launch ranks, run the conformance suite and benchmarks.

mod bench;
mod child;
mod gpu;
mod info;
mod launch;

use clap::{Parser, Subcommand};
use commhal_hal::settings::host::LOG;
use tracing_subscriber::EnvFilter;

/// commhal — GPU communication with pluggable backends.
#[derive(Debug, Parser)]
#[command(name = "commhal", version, about)]
struct Cli {
    /// Backends to use, in order (overrides COMMHAL_BACKENDS and COMMHAL_CONFIG),
    /// e.g. `--backends host-emu,host-tcp`.
    #[arg(long, global = true, value_delimiter = ',')]
    backends: Vec<String>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// List every backend, whether it is available here (and why not), and its guarantees.
    Info(info::InfoArgs),
    /// Start N local ranks of a command, with rank variables set.
    Launch(launch::LaunchArgs),
    /// Benchmark a collective (nccl-tests table); run under `launch` or with --ranks.
    /// `--backend cuda-nvlink`: the GPU collectives, one process per GPU, optionally
    /// against NCCL or another library with NCCL's API (`--compare nccl | mscclpp`,
    /// `--compare-lib PATH`).
    Bench(bench::BenchArgs),
    /// Time every candidate GPU kernel per size and write the kernel-choice
    /// thresholds (algorithms/tuning/gpu-cuda-*.toml) for this rank count.
    Tune(gpu::TuneArgs),
    /// Run the conformance suite against one backend (ranks as processes).
    Conformance(commhal_conformance::ConformanceArgs),
}

fn main() {
    // Conformance ranks are this binary re-executed by the runner: dispatch them first.
    if let Some(code) = commhal_conformance::child_main_if_requested() {
        std::process::exit(code);
    }
    // an invalid COMMHAL_LOG is warned about (once the default filter is in place) and
    // the default used: a log filter should not stop a job
    let log = LOG.text();
    let (filter, bad_log) = match log.as_deref().map(EnvFilter::try_new) {
        Some(Ok(f)) => (f, None),
        Some(Err(e)) => (EnvFilter::new(LOG.default), Some(e)),
        None => (EnvFilter::new(LOG.default), None),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if let Some(e) = bad_log {
        tracing::warn!(
            "{}={:?} is not a log filter ({e}): expected {}; using {}",
            LOG.env,
            log.unwrap_or_default(),
            LOG.expected(),
            LOG.default
        );
    }
    commhal_backends::link_all();
    let cli = Cli::parse();
    let result = match &cli.command {
        Cmd::Info(a) => info::run(a, cli_backends(&cli)),
        Cmd::Launch(a) => launch::run(a),
        Cmd::Bench(a) => bench::run(a, cli_backends(&cli)),
        Cmd::Tune(a) => gpu::tune(a),
        Cmd::Conformance(a) => Ok(commhal_conformance::cli_main(a.clone())),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(msg) => {
            eprintln!("commhal: {msg}");
            std::process::exit(2);
        }
    }
}

/// The `--backends` list, if given.
fn cli_backends(cli: &Cli) -> Option<&[String]> {
    (!cli.backends.is_empty()).then_some(cli.backends.as_slice())
}
