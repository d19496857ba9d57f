//! The `commhal conformance` entry point: [`ConformanceArgs`] and [`cli_main`].

use std::path::PathBuf;
use std::time::Duration;

use crate::runner::{Mode, RunOptions, run};

/// `commhal conformance --backend NAME [--ranks N] [--quick] [--json] ...`
#[derive(Debug, Clone, clap::Args)]
pub struct ConformanceArgs {
    /// Backend to check (a name from `commhal info`). `cuda-nvlink` and `cuda-dma`
    /// (or `all-gpu` for both) run the GPU suite: device code, one process per GPU.
    #[arg(long)]
    pub backend: String,
    /// Number of ranks (processes, or threads with --threads).
    #[arg(long, default_value_t = 2)]
    pub ranks: u32,
    /// Quick tier: small counts (CI).
    #[arg(long)]
    pub quick: bool,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Run ranks as threads of this process instead of separate processes.
    #[arg(long)]
    pub threads: bool,
    /// Run only cases whose id contains this text (repeatable).
    #[arg(long)]
    pub filter: Vec<String>,
    /// `[backend.NAME]` options as TOML, e.g. `faults = "early-flush"`.
    #[arg(long, default_value = "")]
    pub backend_options: String,
    /// Expectations file (default `conformance/expectations/<backend>.toml`).
    #[arg(long)]
    pub expectations: Option<PathBuf>,
    /// Bound of every channel wait, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub wait_timeout_ms: u64,
    /// Bound of one case on one rank, in seconds.
    #[arg(long, default_value_t = 120)]
    pub case_timeout_s: u64,
    /// Overall watchdog, in seconds (default: derived).
    #[arg(long)]
    pub timeout_s: Option<u64>,
}

impl ConformanceArgs {
    /// The run options these arguments describe.
    pub fn options(&self) -> RunOptions {
        let mut o = RunOptions::new(&self.backend, self.ranks);
        o.quick = self.quick;
        o.mode = if self.threads {
            Mode::Threads
        } else {
            Mode::Processes
        };
        o.filter = self.filter.clone();
        o.backend_options = self.backend_options.clone();
        o.expectations = self.expectations.clone();
        o.wait_timeout = Duration::from_millis(self.wait_timeout_ms);
        o.case_timeout = Duration::from_secs(self.case_timeout_s);
        o.overall_timeout = self.timeout_s.map(Duration::from_secs);
        o
    }
}

/// Run the suite, print the table (or JSON) and return the exit code: 0 when nothing
/// failed, 1 otherwise. The binary must also call
/// [`crate::child_main_if_requested`] at the start of `main` (child ranks re-execute it).
pub fn cli_main(args: ConformanceArgs) -> i32 {
    use std::io::Write;
    // GPU backends run their own suite: device code launched by each rank process.
    #[cfg(feature = "gpu")]
    if crate::gpu::BACKENDS.contains(&args.backend.as_str()) || args.backend == "all-gpu" {
        if args.threads {
            eprintln!("conformance: GPU backends run one process per GPU; drop --threads");
            return 2;
        }
        let backend = if args.backend == "all-gpu" {
            "all"
        } else {
            args.backend.as_str()
        };
        return crate::gpu::launch::run_processes(backend, args.ranks, args.quick, args.json);
    }
    let report = run(&args.options());
    let text = if args.json {
        format!("{}\n", report.to_json())
    } else {
        report.table()
    };
    // A closed stdout (`| head`) is not worth a panic; the exit code still tells.
    let _ = std::io::stdout().write_all(text.as_bytes());
    report.exit_code()
}
