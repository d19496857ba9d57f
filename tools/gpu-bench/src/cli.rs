//! Command line of `commhal-gpu-bench` (nccl-tests flags) and the pure helpers behind
//! the table: sizes, counts, busbw factors.

use std::time::Duration;

use clap::{Parser, ValueEnum};

use commhal_cuda_coll::kernels::ReduceOp;
pub use commhal_cuda_coll::types::{Collective, Dtype};

/// What to compare with: a library with NCCL's C API, loaded with `dlopen` into the
/// benchmark's processes and run on the same buffers and stream (see
/// [`crate::nccl::Comparison`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Compare {
    /// NCCL: `libnccl.so.2` (else `libnccl.so`) from the dynamic loader's search path.
    Nccl,
    /// MSCCL++'s NCCL-API library: `$COMMHAL_MSCCLPP_LIB`, else `libmscclpp_nccl.so`
    /// from the loader's search path.
    Mscclpp,
}

/// The flags `commhal-gpu-bench` and `commhal bench` share — nccl-tests' sweep,
/// check, graph and rank flags, the library to compare with, the fault checks —
/// declared once and flattened into both commands' arguments ([`Args::common`],
/// `commhal bench`'s `BenchArgs`), so that both take them with the same names,
/// defaults and value parsers.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct CommonArgs {
    /// Smallest size (bytes; K/M/G suffixes are powers of 1024).
    #[arg(short = 'b', long = "minbytes", default_value = "1K", value_parser = parse_size)]
    pub min_bytes: u64,
    /// Largest size (bytes; K/M/G suffixes).
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = parse_size)]
    pub max_bytes: u64,
    /// Multiplication factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2, value_parser = parse_step_factor)]
    pub step_factor: u64,
    /// Timed iterations per size (on the GPUs fewer are used at large sizes, see
    /// --max-bytes-per-size).
    #[arg(short = 'n', long = "iters", default_value_t = 20, value_parser = parse_iters)]
    pub iters: u32,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: u32,
    /// Root of broadcast / reduce.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: u32,
    /// Check results (0 = off).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u8,
    /// Time through CUDA graph replay (iters launches captured into one graph): `-G`
    /// alone replays it 5 times, `-G N` N times (nccl-tests' graph launch count), `-G
    /// 0` (the default) launches on the stream. Each replay is one timing group.
    #[arg(short = 'G', long = "graph", value_name = "N", num_args = 0..=1, default_value_t = 0, default_missing_value = "5")]
    pub graph: u32,
    /// nccl-tests' `-z` (blocking collectives): GPU launches are asynchronous on the
    /// stream, 0 only (`--batch 1` puts an event between every launch); `commhal
    /// bench`'s host collectives always return done, so 0 and 1 time the same.
    #[arg(short = 'z', long = "blocking", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub blocking: u8,
    /// nccl-tests' `-t` (threads per process): 1 only, one rank per process.
    #[arg(short = 't', long = "nthreads", default_value_t = 1)]
    pub nthreads: u32,
    /// nccl-tests' `-g` (GPUs per thread): 1 only, one GPU per process.
    #[arg(short = 'g', long = "ngpus", default_value_t = 1)]
    pub ngpus: u32,
    /// Run the whole size sweep this many times, printing every cycle (nccl-tests'
    /// `-N`; 0, forever, is not offered: give a count).
    #[arg(short = 'N', long = "run_cycles", default_value_t = 1)]
    pub cycles: u32,
    /// Seconds a rank waits for its peers before the run fails (nccl-tests' `-T`): on
    /// the GPUs the device wait bound, overriding --timeout-ms [default: GPUs:
    /// --timeout-ms; `commhal bench` on host backends: COMMHAL_WAIT_TIMEOUT_MS, else 30 s].
    #[arg(short = 'T', long = "timeout", value_name = "SECONDS")]
    pub timeout_s: Option<u64>,
    /// nccl-tests' `-C` (report CPU time): GPU times are CUDA event times (0 only);
    /// `commhal bench`'s host times are already host wall clock (0 and 1 print the same).
    #[arg(short = 'C', long = "report_cputime", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub cputime: u8,
    /// Also run a library with NCCL's C API on the same buffers and stream, alternating
    /// with commhal per size, and print its table and the time ratio, labelled with its
    /// name and version: `nccl` = libnccl.so.2 from the loader's search path; `mscclpp`
    /// = MSCCL++'s libmscclpp_nccl.so ($COMMHAL_MSCCLPP_LIB, else the search path).
    #[arg(long, value_enum)]
    pub compare: Option<Compare>,
    /// Compare with the library at PATH instead (anything that exports NCCL's C API; a
    /// name without `/` is looked up on the loader's search path, as dlopen does).
    #[arg(long, value_name = "PATH", conflicts_with = "compare")]
    pub compare_lib: Option<std::path::PathBuf>,
    /// Largest all-reduce that uses the one-shot LL kernel (0: never; overrides the
    /// tuning file).
    #[arg(long, value_parser = parse_size)]
    pub ll_max: Option<u64>,
    /// Robustness check instead of a benchmark: this rank leaves right after the setup
    /// (a dead peer); every other rank queues one collective of `-b` bytes and reports
    /// what its `sync` returns (expected: an error within the bound, on every rank).
    /// Exit status 0 when every surviving rank got its error, 1 when one did not.
    #[arg(long, value_name = "RANK", conflicts_with_all = ["stop_rank", "abort_after_ms"])]
    pub dead_rank: Option<u32>,
    /// Robustness check instead of a benchmark: this rank stops itself (SIGSTOP) right
    /// after the setup — a hung peer, alive but silent — and is continued by a kernel
    /// timer once the others are done, then exits; every other rank queues one
    /// collective of `-b` bytes and reports when its `sync` fails (expected: a device
    /// wait timeout, after about the device wait bound). Exit status as --dead-rank.
    #[arg(long, value_name = "RANK", conflicts_with = "abort_after_ms")]
    pub stop_rank: Option<u32>,
    /// Robustness check instead of a benchmark: every rank but 0 queues one collective
    /// of `-b` bytes, which rank 0 never joins, and aborts its communicator
    /// (`Comm::abort`) from a second thread this many milliseconds later; rank 0 aborts
    /// at the same time. Each rank reports how long after its abort its `sync` failed
    /// (expected: the abort's error within 1 s). Less than the device wait bound.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub abort_after_ms: Option<u64>,
}

impl CommonArgs {
    /// The library to compare with (`--compare`, `--compare-lib`), if any.
    pub fn comparison(&self) -> Option<crate::nccl::Comparison> {
        crate::nccl::Comparison::from_flags(self.compare, self.compare_lib.as_deref())
    }

    /// Whether the timed launches are captured into a CUDA graph (`-G`).
    pub fn graphed(&self) -> bool {
        self.graph > 0
    }

    /// The fault `--dead-rank`, `--stop-rank` or `--abort-after-ms` asks for (at most
    /// one: the flags conflict).
    pub fn fault(&self) -> Option<Fault> {
        match (self.dead_rank, self.stop_rank, self.abort_after_ms) {
            (Some(r), _, _) => Some(Fault::DeadRank(r)),
            (_, Some(r), _) => Some(Fault::StopRank(r)),
            (_, _, Some(ms)) => Some(Fault::AbortAfter(Duration::from_millis(ms))),
            _ => None,
        }
    }
}

/// `commhal-gpu-bench`: NVLink collectives, nccl-tests style, one process per GPU
/// (run under `commhal launch -n N --`).
#[derive(Debug, Clone, Parser)]
#[command(name = "commhal-gpu-bench", version)]
pub struct Args {
    /// Collective.
    pub collective: Collective,
    /// The flags `commhal bench` takes too.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Element type.
    #[arg(short = 'd', long = "datatype", default_value = "half")]
    pub dtype: Dtype,
    /// Reduction operator of all-reduce, reduce-scatter and reduce (nccl-tests' `-o`):
    /// sum, prod, min, max, avg, premulsum (with `--scalar`).
    #[arg(short = 'o', long = "op", default_value = "sum", value_parser = parse_op)]
    pub op: OpName,
    /// The premulsum scalar (rounded to the element type; the same on every rank).
    #[arg(long, default_value_t = 1.0)]
    pub scalar: f64,
    /// How a size's time combines the ranks' medians (nccl-tests' `-a`): 0 = rank 0's,
    /// 1 = mean, 2 = min, 3 = max.
    #[arg(short = 'a', long = "average", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub average: u8,
    /// Launches per timed group: CUDA events are recorded around every group of this
    /// many back-to-back launches (nccl-tests style: elapsed / launches); the time is
    /// the median over the groups (the last may be shorter). 1 = an event between
    /// every launch; >= the iterations = one group. Not used with -G (each graph
    /// replay of the iterations is one group).
    #[arg(long, value_name = "K", default_value_t = DEFAULT_BATCH, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Queue the timed launches behind a host-released stream wait (1) so events time
    /// the GPU, not the host's submission rate; 0 = launch as the host goes.
    #[arg(long, default_value_t = 1)]
    pub gate: u32,
    /// Write every row (and the compared library's) as JSON here (rank 0; nccl-tests' `-J`). A file,
    /// so `commhal launch`'s `[rank K]` prefixes never reach it.
    #[arg(long, short = 'J', visible_alias = "output_file")]
    pub json: Option<std::path::PathBuf>,
    /// Cap on bytes moved per size: iterations shrink so that iters × size stays under
    /// it (at least 3 timed iterations).
    #[arg(long, default_value = "16G", value_parser = parse_size)]
    pub max_bytes_per_size: u64,
    /// Device wait bound in milliseconds (a peer that never arrives → error, not a hang).
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Broadcast / reduce, out of place: the checked run is n launches back to back
    /// with roots `--root` + 1, + 2, ..., ending at `--root`, and every reduce root
    /// checks its own result (a launch that overwrote a peer's staging or output
    /// before that peer was done with the previous one gives wrong elements here,
    /// where repeating one root would hide it: same data every launch).
    #[arg(long)]
    pub cycle_roots: bool,
    /// Out of place: before every launch of the collective (checked, timed, captured),
    /// a 1 KiB send/recv on the same buffers, which runs as a one-way LL16 kernel: the
    /// collective's own LL16 kernels must then reuse their slots safely (the
    /// `peers_done` fence) and still give every element right. In-place runs and
    /// reduce (whose non-roots keep their outputs) skip it.
    #[arg(long)]
    pub mix_sendrecv: bool,
    /// Print the tables on rank 0 (`commhal bench --json` turns it off to print JSON).
    #[arg(skip = true)]
    pub print_tables: bool,
    /// Whose buffers the collectives run on: `caller` — input and output allocated by
    /// the benchmark with cuMemAlloc, as an application's, passed with the stream to
    /// `Comm::launch_on`; `vmm` — the same from cuMem VMM memory in 2 MiB pieces (as
    /// PyTorch's expandable segments); `registered` — the communicator's own regions.
    #[arg(long, value_enum, default_value_t = Buffers::Caller)]
    pub buffers: Buffers,
    /// Run every datatype (and, for all-reduce, reduce-scatter and reduce, every
    /// operator) on one communicator, one table each; `-d` and `-o` are ignored.
    #[arg(long)]
    pub matrix: bool,
    /// All-to-all and send/recv through `Comm::p2p` (grouped sends and receives on the
    /// copy engines) instead of their collective kernels; caller buffers only.
    #[arg(long)]
    pub p2p: bool,
    /// Two communicators in every process: split the ranks into K groups (rank mod K),
    /// run the benchmark on each group's communicator (the groups at the same time),
    /// then on the whole world's, both communicators alive throughout.
    #[arg(long, value_name = "K", conflicts_with_all = ["dead_rank", "stop_rank", "abort_after_ms"])]
    pub split: Option<u32>,
    /// With `--matrix`: only these datatypes (comma-separated; default: all).
    #[arg(long, value_delimiter = ',', requires = "matrix")]
    pub dtypes: Vec<Dtype>,
    /// Caller buffers: start both pointers this many bytes into their allocations
    /// (pointers that are not 16-byte aligned take the staged path).
    #[arg(long, default_value_t = 0)]
    pub buffer_offset: u64,
    /// The links, named as `COMMHAL_BACKENDS` takes them, which they override (`None`:
    /// the environment's or the default selection). `commhal bench --backend cuda-dma`
    /// sets it; this binary reads `COMMHAL_BACKENDS`.
    #[arg(skip)]
    pub backends: Option<Vec<String>>,
}

impl Args {
    /// The device wait bound in milliseconds: `-T` seconds, else `--timeout-ms`.
    pub fn wait_ms(&self) -> u64 {
        self.common
            .timeout_s
            .map_or(self.timeout_ms, |s| s.saturating_mul(1000))
            .max(1)
    }

    /// The fault flags' values that no rank count can make right (the rank itself is
    /// checked against the run's size when the ranks start).
    pub fn check_fault_flags(&self) -> Result<(), String> {
        let n = [
            self.common.dead_rank.is_some(),
            self.common.stop_rank.is_some(),
            self.common.abort_after_ms.is_some(),
        ]
        .iter()
        .filter(|f| **f)
        .count();
        if n > 1 {
            return Err(
                "--dead-rank, --stop-rank and --abort-after-ms are separate checks: give one"
                    .into(),
            );
        }
        if self.split.is_some() && n > 0 {
            return Err("--split runs benchmarks only: drop it for a fault check".into());
        }
        if let Some(ms) = self.common.abort_after_ms
            && ms >= self.wait_ms()
        {
            return Err(format!(
                "--abort-after-ms {ms}: the abort must come before the device wait bound ({} ms) ends the waits by itself; lower it or raise --timeout-ms",
                self.wait_ms()
            ));
        }
        Ok(())
    }

    /// nccl-tests' flags with one meaning here: what to do instead of the others.
    pub fn check_nccl_tests_flags(&self) -> Result<(), String> {
        let more_ranks = "start more ranks with `commhal launch -n N` (or `commhal bench --backend cuda-nvlink --ranks N`)";
        if self.common.nthreads != 1 {
            return Err(format!(
                "-t {}: one thread per process here; {more_ranks}",
                self.common.nthreads
            ));
        }
        if self.common.ngpus != 1 {
            return Err(format!(
                "-g {}: one GPU per process here; {more_ranks}",
                self.common.ngpus
            ));
        }
        if self.common.blocking != 0 {
            return Err(format!(
                "-z {}: launches are asynchronous on the stream here; for an event between every launch use --batch 1",
                self.common.blocking
            ));
        }
        if self.common.cputime != 0 {
            return Err(format!(
                "-C {}: times here are CUDA event times, not CPU times; drop -C",
                self.common.cputime
            ));
        }
        if self.common.cycles == 0 {
            return Err(
                "-N 0 (run forever) is not offered: give a number of cycles, e.g. -N 1000".into(),
            );
        }
        if self.common.timeout_s == Some(0) {
            return Err("-T 0: give the device wait bound in seconds, at least 1".into());
        }
        Ok(())
    }
}

/// A fault the benchmark injects instead of timing (`--dead-rank`, `--stop-rank`,
/// `--abort-after-ms`; `crate::bench` runs the check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// This rank exits right after the setup, as a crash.
    DeadRank(u32),
    /// This rank stops itself (SIGSTOP) right after the setup: a hung peer.
    StopRank(u32),
    /// Every rank aborts its communicator this long after the others queued a
    /// collective that rank 0 never joins.
    AbortAfter(Duration),
}

impl Fault {
    /// The flag that asked for it, as typed.
    pub fn flag(&self) -> String {
        match self {
            Fault::DeadRank(r) => format!("--dead-rank {r}"),
            Fault::StopRank(r) => format!("--stop-rank {r}"),
            Fault::AbortAfter(d) => format!("--abort-after-ms {}", d.as_millis()),
        }
    }
}

/// Whose buffers the benchmark runs on (`--buffers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Buffers {
    /// Allocated by the benchmark (cuMemAlloc), as an application's.
    Caller,
    /// Allocated by the benchmark as cuMem VMM memory in 2 MiB pieces mapped back to
    /// back, as PyTorch's expandable segments allocate.
    Vmm,
    /// The communicator's registered regions.
    Registered,
}

/// The `-o` operator as named (the premulsum scalar comes from `--scalar`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpName {
    /// sum
    Sum,
    /// prod
    Prod,
    /// min
    Min,
    /// max
    Max,
    /// avg
    Avg,
    /// premulsum
    PreMulSum,
}

impl OpName {
    /// Every operator.
    pub const ALL: [OpName; 6] = [
        OpName::Sum,
        OpName::Prod,
        OpName::Min,
        OpName::Max,
        OpName::Avg,
        OpName::PreMulSum,
    ];
}

fn parse_op(s: &str) -> Result<OpName, String> {
    Ok(match s {
        "sum" => OpName::Sum,
        "prod" => OpName::Prod,
        "min" => OpName::Min,
        "max" => OpName::Max,
        "avg" => OpName::Avg,
        "premulsum" | "pre_mul_sum" => OpName::PreMulSum,
        _ => {
            return Err(format!(
                "unknown op `{s}`: use sum, prod, min, max, avg or premulsum (with --scalar)"
            ));
        }
    })
}

impl Args {
    /// The reduction operator the flags ask for.
    pub fn reduce_op(&self) -> ReduceOp {
        match self.op {
            OpName::Sum => ReduceOp::Sum,
            OpName::Prod => ReduceOp::Prod,
            OpName::Min => ReduceOp::Min,
            OpName::Max => ReduceOp::Max,
            OpName::Avg => ReduceOp::Avg,
            OpName::PreMulSum => ReduceOp::PreMulSum(self.scalar),
        }
    }
}

/// Default `--batch`: launches between two timing events.
pub const DEFAULT_BATCH: u32 = 10;

/// Launches per timed group for `iters` timed launches with events every `batch`
/// launches: full groups of `batch`, the last one shorter when `batch` does not divide
/// `iters`; one group when `iters <= batch`; none for 0 iterations. `batch` 0 counts
/// as 1.
pub fn groups(iters: u32, batch: u32) -> Vec<u32> {
    let batch = batch.max(1);
    let mut v = vec![batch; (iters / batch) as usize];
    if !iters.is_multiple_of(batch) {
        v.push(iters % batch);
    }
    v
}

/// `"1K"` → 1024, `"64M"`, `"1G"`, plain bytes; case-insensitive, optional `B`/`iB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (num, mult) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 1u64 << 10),
        Some('m') => (&body[..body.len() - 1], 1 << 20),
        Some('g') => (&body[..body.len() - 1], 1 << 30),
        Some('t') => (&body[..body.len() - 1], 1 << 40),
        _ => (body, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 1024, 1K, 64M, 1G)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// `-f`: a factor of at least 2, so that the sizes grow.
fn parse_step_factor(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(f) if f >= 2 => Ok(f),
        Ok(f) => Err(format!(
            "-f {f}: the step factor must be at least 2 so that sizes grow"
        )),
        Err(e) => Err(format!("-f {s}: {e}")),
    }
}

/// `-n`: at least 1 timed iteration.
fn parse_iters(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err("-n 0: run at least 1 iteration".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("-n {s}: {e}")),
    }
}

/// The sizes nccl-tests would run: min, min×f, ... ≤ max.
pub fn sizes(min: u64, max: u64, factor: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        match s.checked_mul(factor.max(2)) {
            Some(n) => s = n,
            None => break,
        }
    }
    v
}

/// Element count of the size column for `n` ranks (nccl-tests: all-gather,
/// reduce-scatter and all-to-all round down to a multiple of n):
/// `(count, per_rank_count)`; `per_rank_count == count` for the others.
pub fn counts(coll: Collective, bytes: u64, dtype: Dtype, n: u32) -> (u64, u64) {
    let c = bytes / dtype.size();
    if coll.count_is_per_rank() {
        let per = c / u64::from(n.max(1));
        (per * u64::from(n.max(1)), per)
    } else {
        (c, c)
    }
}

/// The `count` argument of a launch for a size [`counts`] gave: the per-rank count for
/// the collectives that take one (all-gather, reduce-scatter, all-to-all), else the
/// buffer's.
pub fn launch_count(coll: Collective, count: u64, per_rank: u64) -> u64 {
    if coll.count_is_per_rank() {
        per_rank
    } else {
        count
    }
}

/// Timed iterations for `bytes`, capped so iters × bytes ≤ cap (at least 3).
pub fn iters_for(bytes: u64, iters: u32, cap: u64) -> u32 {
    let by_cap = (cap / bytes.max(1)).min(u64::from(u32::MAX)) as u32;
    iters.min(by_cap.max(3))
}

/// algbw and busbw in GB/s (10^9 bytes/s) for `bytes` in `micros`.
pub fn bandwidths(coll: Collective, bytes: u64, micros: f64, n: u32) -> (f64, f64) {
    if micros <= 0.0 {
        return (0.0, 0.0);
    }
    let alg = bytes as f64 / (micros * 1e-6) / 1e9;
    (alg, alg * coll.busbw_factor(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("64m").unwrap(), 64 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn size_steps() {
        assert_eq!(sizes(1024, 16 << 10, 4), vec![1024, 4096, 16384]);
        assert_eq!(sizes(1 << 10, 1 << 30, 4).len(), 11);
        assert_eq!(sizes(8, 7, 2), Vec::<u64>::new());
    }

    #[test]
    fn busbw_factors() {
        assert_eq!(Collective::Allreduce.busbw_factor(4), 1.5);
        assert_eq!(Collective::Allreduce.busbw_factor(2), 1.0);
        assert_eq!(Collective::Allgather.busbw_factor(4), 0.75);
        assert_eq!(Collective::Reducescatter.busbw_factor(8), 0.875);
        assert_eq!(Collective::Allreduce.busbw_factor(1), 0.0);
        let (alg, bus) = bandwidths(Collective::Allreduce, 1 << 30, 4553.0, 4);
        assert!((alg - 235.8).abs() < 0.1, "{alg}");
        assert!((bus - 353.7).abs() < 0.1, "{bus}");
        assert_eq!(Collective::Alltoall.busbw_factor(4), 0.75);
        assert_eq!(Collective::Alltoall.busbw_factor(2), 0.5);
        for c in [
            Collective::Broadcast,
            Collective::Reduce,
            Collective::Sendrecv,
        ] {
            assert_eq!(c.busbw_factor(4), 1.0);
            assert_eq!(c.busbw_factor(2), 1.0);
            let (alg, bus) = bandwidths(c, 1 << 30, 1000.0, 4);
            assert_eq!(alg, bus);
            assert!((alg - 1073.74).abs() < 0.01, "{alg}");
        }
        assert_eq!(Collective::Reduce.redop(), "sum");
        assert_eq!(Collective::Broadcast.redop(), "none");
        assert_eq!(Collective::Alltoall.redop(), "none");
        assert_eq!(Collective::Sendrecv.redop(), "none");
    }

    #[test]
    fn counts_round_to_ranks() {
        assert_eq!(
            counts(Collective::Allreduce, 1024, Dtype::Half, 3),
            (512, 512)
        );
        assert_eq!(
            counts(Collective::Allgather, 1024, Dtype::Half, 3),
            (510, 170)
        );
        assert_eq!(
            counts(Collective::Reducescatter, 1024, Dtype::Float, 4),
            (256, 64)
        );
        assert_eq!(
            counts(Collective::Alltoall, 1024, Dtype::Half, 3),
            (510, 170)
        );
        assert_eq!(
            counts(Collective::Alltoall, 1024, Dtype::Half, 4),
            (512, 128)
        );
        for c in [
            Collective::Broadcast,
            Collective::Reduce,
            Collective::Sendrecv,
        ] {
            assert_eq!(counts(c, 1024, Dtype::Half, 3), (512, 512));
            assert!(!c.count_is_per_rank());
        }
        assert!(Collective::Alltoall.count_is_per_rank());
        assert!(!Collective::Alltoall.in_place_supported());
        assert!(!Collective::Sendrecv.in_place_supported());
        assert!(Collective::Broadcast.in_place_supported() && Collective::Reduce.has_root());
    }

    #[test]
    fn iteration_cap() {
        assert_eq!(iters_for(1 << 30, 20, 16 << 30), 16);
        assert_eq!(iters_for(1 << 30, 20, 1 << 30), 3);
        assert_eq!(iters_for(1024, 20, 16 << 30), 20);
    }

    #[test]
    fn timing_groups() {
        assert_eq!(groups(20, 10), [10, 10]);
        assert_eq!(groups(16, 10), [10, 6], "the last group is shorter");
        assert_eq!(groups(3, 10), [3], "iters <= batch: one group");
        assert_eq!(groups(10, 10), [10]);
        assert_eq!(groups(5, 1), [1; 5], "batch 1: one launch per group");
        assert_eq!(groups(7, 3), [3, 3, 1]);
        assert_eq!(groups(4, 0), [1; 4], "batch 0 counts as 1");
        assert!(groups(0, 10).is_empty());
        for (iters, batch) in [(1, 1), (20, 10), (17, 4), (200, 7), (3, 100)] {
            let g = groups(iters, batch);
            assert_eq!(g.iter().sum::<u32>(), iters, "{iters} / {batch}");
            assert!(g.iter().all(|&k| k >= 1 && k <= batch));
            assert_eq!(g.len() as u32, iters.div_ceil(batch));
        }
    }

    #[test]
    fn int_encodings_are_exact() {
        assert_eq!(Dtype::Half.encode_int(1), 0x3c00);
        assert_eq!(Dtype::Half.encode_int(2), 0x4000);
        assert_eq!(Dtype::Half.encode_int(3), 0x4200);
        assert_eq!(Dtype::Half.encode_int(120), 0x5780);
        assert_eq!(Dtype::Half.encode_int(0), 0);
        assert_eq!(Dtype::Bfloat16.encode_int(1), 0x3f80);
        assert_eq!(Dtype::Bfloat16.encode_int(3), 0x4040);
        assert_eq!(Dtype::Float.encode_int(5), u64::from(5.0f32.to_bits()));
        assert_eq!(Dtype::Half.encode_int(-3), 0xc200);
        assert_eq!(Dtype::Bfloat16.encode_int(-3), 0xc040);
        assert_eq!(
            Dtype::Float.encode_int(-56),
            u64::from((-56.0f32).to_bits())
        );
    }

    #[test]
    fn compare_flags() {
        use crate::nccl::Comparison;
        let m = Args::try_parse_from(["x", "allreduce", "--compare", "mscclpp"]).unwrap();
        assert_eq!(m.common.compare, Some(Compare::Mscclpp));
        assert_eq!(m.common.comparison(), Some(Comparison::Mscclpp));
        let l = Args::try_parse_from(["x", "allreduce", "--compare-lib", "/x.so"]).unwrap();
        assert_eq!(
            l.common.compare_lib.as_deref(),
            Some(std::path::Path::new("/x.so"))
        );
        assert_eq!(
            l.common.comparison(),
            Some(Comparison::Path("/x.so".into()))
        );
        let e = Args::try_parse_from([
            "x",
            "allreduce",
            "--compare",
            "nccl",
            "--compare-lib",
            "/x.so",
        ])
        .unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{e}");
        assert!(Args::try_parse_from(["x", "allreduce", "--compare", "rccl"]).is_err());
        assert!(Args::try_parse_from(["x", "allreduce", "--compare-lib"]).is_err());
    }

    #[test]
    fn args_parse_like_nccl_tests() {
        let a = Args::try_parse_from([
            "x",
            "allreduce",
            "-b",
            "1K",
            "-e",
            "1G",
            "-f",
            "4",
            "-n",
            "50",
            "-w",
            "10",
            "-d",
            "half",
            "-G",
            "--compare",
            "nccl",
            "--json",
            "/tmp/x.json",
        ])
        .unwrap();
        assert_eq!(a.collective, Collective::Allreduce);
        assert_eq!(
            (a.common.min_bytes, a.common.max_bytes, a.common.step_factor),
            (1024, 1 << 30, 4)
        );
        assert_eq!((a.common.iters, a.common.warmup), (50, 10));
        assert_eq!(a.dtype, Dtype::Half);
        assert!(a.common.graphed());
        assert_eq!(a.common.compare, Some(Compare::Nccl));
        assert_eq!(a.common.comparison(), Some(crate::nccl::Comparison::Nccl));
        let b = Args::try_parse_from(["x", "allgather", "-d", "bfloat16"]).unwrap();
        assert_eq!(b.dtype, Dtype::Bfloat16);
        assert!(
            !b.common.graphed() && b.common.compare.is_none() && b.common.comparison().is_none()
        );
        assert_eq!(b.batch, DEFAULT_BATCH);
        assert_eq!(DEFAULT_BATCH, 10);
        let one = Args::try_parse_from(["x", "allreduce", "--batch", "1"]).unwrap();
        assert_eq!(one.batch, 1, "an event between every launch");
        let big = Args::try_parse_from(["x", "allreduce", "-n", "40", "--batch=64"]).unwrap();
        assert_eq!((big.common.iters, big.batch), (40, 64));
        assert!(Args::try_parse_from(["x", "allreduce", "--batch", "0"]).is_err());
        assert!(Args::try_parse_from(["x", "allreduce", "--batch", "-1"]).is_err());
        assert!(Args::try_parse_from(["x", "alltoallv"]).is_err());
        let c = Args::try_parse_from(["x", "broadcast", "-r", "3"]).unwrap();
        assert_eq!((c.collective, c.common.root), (Collective::Broadcast, 3));
        for (name, coll) in [
            ("reduce", Collective::Reduce),
            ("alltoall", Collective::Alltoall),
            ("sendrecv", Collective::Sendrecv),
        ] {
            let a = Args::try_parse_from(["x", name]).unwrap();
            assert_eq!((a.collective, a.common.root), (coll, 0));
            assert_eq!(coll.name(), name);
        }
        assert!(Args::try_parse_from(["x", "allreduce", "-f", "1"]).is_err());
        assert!(Args::try_parse_from(["x", "allreduce", "-d", "int4"]).is_err());
        for (name, d) in [
            ("int8", Dtype::Int8),
            ("uint8", Dtype::Uint8),
            ("int32", Dtype::Int32),
            ("uint32", Dtype::Uint32),
            ("int64", Dtype::Int64),
            ("uint64", Dtype::Uint64),
            ("half", Dtype::Half),
            ("bfloat16", Dtype::Bfloat16),
            ("float", Dtype::Float),
            ("double", Dtype::Double),
            ("fp8_e4m3", Dtype::Fp8E4m3),
            ("f8e4m3", Dtype::Fp8E4m3),
            ("fp8_e5m2", Dtype::Fp8E5m2),
            ("f8e5m2", Dtype::Fp8E5m2),
        ] {
            let a = Args::try_parse_from(["x", "allreduce", "-d", name]).unwrap();
            assert_eq!(a.dtype, d, "{name}");
            assert_eq!(a.reduce_op(), ReduceOp::Sum);
        }
        let tables: Vec<&str> = Dtype::ALL.iter().map(|d| d.table_name()).collect();
        assert_eq!(
            tables,
            [
                "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "bfloat16", "float",
                "double", "f8e4m3", "f8e5m2"
            ],
            "nccl-tests' names"
        );
        let a =
            Args::try_parse_from(["x", "reduce", "-o", "premulsum", "--scalar", "0.5"]).unwrap();
        assert_eq!(a.reduce_op(), ReduceOp::PreMulSum(0.5));
        let a = Args::try_parse_from(["x", "reduce", "--op", "max"]).unwrap();
        assert_eq!(a.reduce_op(), ReduceOp::Max);
        assert!(Args::try_parse_from(["x", "reduce", "-o", "xor"]).is_err());
    }

    #[test]
    fn fault_flags_parse_and_conflict() {
        let p = |v: &[&str]| Args::try_parse_from(["x", "allreduce"].iter().chain(v));
        assert_eq!(p(&[]).unwrap().common.fault(), None);
        let a = p(&["--dead-rank", "2"]).unwrap();
        assert_eq!(a.common.fault(), Some(Fault::DeadRank(2)));
        let a = p(&["--stop-rank", "1", "-b", "1M"]).unwrap();
        assert_eq!(
            (a.common.fault(), a.common.min_bytes),
            (Some(Fault::StopRank(1)), 1 << 20)
        );
        assert!(a.check_fault_flags().is_ok());
        let a = p(&["--abort-after-ms", "250"]).unwrap();
        assert_eq!(
            a.common.fault(),
            Some(Fault::AbortAfter(Duration::from_millis(250)))
        );
        assert!(a.check_fault_flags().is_ok());
        for f in [
            Fault::DeadRank(3),
            Fault::StopRank(0),
            Fault::AbortAfter(Duration::from_millis(40)),
        ] {
            let words: Vec<String> = f.flag().split(' ').map(str::to_string).collect();
            let w: Vec<&str> = words.iter().map(String::as_str).collect();
            assert_eq!(p(&w).unwrap().common.fault(), Some(f), "{}", f.flag());
        }
        // one check at a time, and none with --split (which only benchmarks)
        for v in [
            &["--dead-rank", "1", "--stop-rank", "2"][..],
            &["--dead-rank", "1", "--abort-after-ms", "100"][..],
            &["--stop-rank", "1", "--abort-after-ms", "100"][..],
            &["--dead-rank", "1", "--split", "2"][..],
            &["--stop-rank", "1", "--split", "2"][..],
            &["--abort-after-ms", "100", "--split", "2"][..],
        ] {
            let e = p(v).unwrap_err().to_string();
            assert!(e.contains("cannot be used with"), "{v:?}: {e}");
        }
        assert!(p(&["--abort-after-ms", "0"]).is_err());
        assert!(p(&["--stop-rank", "-1"]).is_err());
        // the abort must come before the device wait bound ends the waits
        let e = p(&["--abort-after-ms", "10000"])
            .unwrap()
            .check_fault_flags()
            .unwrap_err();
        assert!(e.contains("device wait bound (10000 ms)"), "{e}");
        assert!(
            p(&["--abort-after-ms", "10000", "--timeout-ms", "20000"])
                .unwrap()
                .check_fault_flags()
                .is_ok()
        );
        let e = p(&["--abort-after-ms", "2500", "-T", "2"])
            .unwrap()
            .check_fault_flags()
            .unwrap_err();
        assert!(e.contains("2000 ms"), "{e}");
        // built by hand (as `commhal bench` does): the same checks
        let mut a = p(&[]).unwrap();
        a.common.dead_rank = Some(1);
        a.common.stop_rank = Some(2);
        assert!(a.check_fault_flags().unwrap_err().contains("give one"));
        a.common.stop_rank = None;
        a.split = Some(2);
        assert!(a.check_fault_flags().unwrap_err().contains("--split"));
    }

    #[test]
    fn nccl_tests_flags() {
        let p = |v: &[&str]| {
            Args::try_parse_from(["x", "allreduce"].into_iter().chain(v.iter().copied()))
                .unwrap_or_else(|e| panic!("{v:?}: {e}"))
        };
        // -G alone as before (5 replays), -G N replays, -G 0 none
        assert_eq!(
            (p(&["-G"]).common.graph, p(&["-G"]).common.graphed()),
            (5, true)
        );
        assert_eq!(p(&["-G", "12", "-b", "2K"]).common.graph, 12);
        assert_eq!(p(&["-G", "-b", "2K"]).common.graph, 5);
        assert!(!p(&["-G", "0"]).common.graphed() && !p(&[]).common.graphed());
        let a = p(&[
            "-a", "2", "-T", "3", "-N", "4", "-t", "1", "-g", "1", "-z", "0",
        ]);
        assert_eq!((a.average, a.wait_ms(), a.common.cycles), (2, 3000, 4));
        let j = p(&["-J", "/tmp/r.json"]);
        assert_eq!(j.json.as_deref(), Some(std::path::Path::new("/tmp/r.json")));
        assert!(a.check_nccl_tests_flags().is_ok());
        assert_eq!((p(&[]).average, p(&[]).wait_ms()), (1, 10_000));
        for (v, want) in [
            (&["-g", "2"][..], "commhal launch -n"),
            (&["-t", "8"][..], "one thread per process"),
            (&["-z", "1"][..], "--batch 1"),
            (&["-C", "1"][..], "CUDA event times"),
            (&["-N", "0"][..], "number of cycles"),
            (&["-T", "0"][..], "at least 1"),
        ] {
            let e = p(v).check_nccl_tests_flags().unwrap_err();
            assert!(e.contains(want), "{v:?}: {want:?} not in {e}");
        }
        assert!(Args::try_parse_from(["x", "allreduce", "-a", "4"]).is_err());
    }

    #[test]
    fn ranks_combine_as_nccl_tests_average() {
        use crate::bench::combine_ranks;
        let t = [4.0, 1.0, 7.0];
        assert_eq!(combine_ranks(&t, 0), 4.0);
        assert_eq!(combine_ranks(&t, 1), 4.0);
        assert_eq!(combine_ranks(&t, 2), 1.0);
        assert_eq!(combine_ranks(&t, 3), 7.0);
    }
}
