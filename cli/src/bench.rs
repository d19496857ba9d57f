//! `commhal bench <collective>`: the nccl-tests benchmark on commhal's Communicator.
//!
//! Runs inside every rank (`commhal launch -n N -- commhal bench allreduce ...`), or
//! starts the ranks itself with `--ranks N`. Per size: warm up, time `-n` iterations
//! (wall clock around the call on every rank; the max over ranks per iteration, then
//! the median over iterations), then a checked run (inputs whose reduction is exact in
//! any order, outputs poisoned first) giving `#wrong`; out of place, then in place.
//! Rank 0 prints the table as nccl-tests does — its `# nThread ...` line, `# Using
//! devices` (a line per rank), its columns and type names, a row as each size
//! completes (flushed), then `# Out of bounds values` and `# Avg bus bandwidth` (the
//! mean busbw over the out-of-place and in-place cells) — or `--json` / `--csv`; `-J
//! FILE` writes JSON (CSV for `.csv`) to a file, the way to get them from under
//! `commhal launch`, whose `[rank K]` prefixes would break them on stdout (refused
//! there). `--plot` draws an SVG with plotters. nccl-tests' `-a -z -t -g -N -T -C -G`
//! are accepted where they mean something here and refused with what to do otherwise
//! ([`check_nccl_tests_flags`]).
//! busbw factors (docs/performance.md): allreduce 2(n−1)/n; allgather, reducescatter,
//! alltoall (n−1)/n; broadcast, reduce, sendrecv 1.
//!
//! `--backend cuda-nvlink` runs the GPU collectives' benchmark instead (one process
//! per GPU, `--compare nccl`, `-G`): see [`crate::gpu`].

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commhal_algorithms::comm::{Buffer, CommOptions, Communicator};
use commhal_algorithms::dtype::finalize;
use commhal_algorithms::plan::Collective;
use commhal_algorithms::{DataType, RedOp};
use commhal_channels::WaitPolicy;
use commhal_hal::bootstrap::{Bootstrap, InProcBootstrap, LaunchEnv, TcpBootstrap};
use commhal_hal::settings::launch::LAUNCH_PREFIX;

/// Poison byte for outputs before each checked run.
const POISON: u8 = 0xA5;

/// Options of `commhal bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// allreduce, allgather, reducescatter, broadcast, reduce, alltoall or sendrecv.
    pub collective: String,
    /// The flags `commhal-gpu-bench` takes too (sizes, iterations, checks, graph
    /// replays, the compared library, the fault checks).
    #[command(flatten)]
    pub common: commhal_gpu_bench::cli::CommonArgs,
    /// Data type (f32, f16, bf16, f64, i32, ...) [default: f32; half with --backend
    /// cuda-nvlink].
    #[arg(short = 'd', long = "datatype")]
    pub dtype: Option<String>,
    /// Reduction op (sum, prod, min, max, avg).
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Algorithm override (short name, e.g. `ring`, or `collective:name`).
    #[arg(long)]
    pub algo: Option<String>,
    /// Print JSON records instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print CSV instead of the table.
    #[arg(long)]
    pub csv: bool,
    /// Write an SVG plot of busbw and time against size.
    #[arg(long)]
    pub plot: Option<String>,
    /// Split the ranks into K virtual nodes (cross-node traffic on port channels).
    #[arg(long, default_value_t = 1)]
    pub nodes: u32,
    /// Start N ranks (as `commhal launch -n N`) when not already under a launcher
    /// (with --backend cuda-nvlink or cuda-dma: one per GPU, default every visible GPU).
    #[arg(long)]
    pub ranks: Option<u32>,
    /// `cuda-nvlink`: benchmark the GPU collectives (one process per GPU: NVLink
    /// kernels, the copy engines where the tuning routes to them) instead of the host
    /// Communicator; `cuda-dma`: the same with every collective on the copy engines;
    /// another name is the same as `--backends NAME`.
    #[arg(long)]
    pub backend: Option<String>,
    /// How the time of a size combines the ranks' (nccl-tests' `-a`): 0 = rank 0's,
    /// 1 = mean, 2 = min, 3 = max of the ranks' medians [default: host: the max over
    /// ranks of each iteration, then the median; cuda-nvlink: 1].
    #[arg(short = 'a', long = "average", value_parser = clap::value_parser!(u8).range(0..=3))]
    pub average: Option<u8>,
    /// Write the results to FILE from rank 0 (nccl-tests' `-J`): JSON, or CSV when the
    /// name ends in `.csv`; never prefixed by `commhal launch`, unlike stdout.
    #[arg(short = 'J', long = "output_file", value_name = "FILE")]
    pub output_file: Option<String>,
    /// (cuda-nvlink) Launches per timing group: CUDA events around every K
    /// back-to-back launches, time = elapsed / launches, median over the groups
    /// (nccl-tests style; 1 = an event between every launch; not used with -G)
    /// [default: 10].
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: Option<u32>,
    /// (cuda-nvlink) Queue timed launches behind a host-released stream wait (1) or
    /// launch as the host goes (0) [default: 1].
    #[arg(long)]
    pub gate: Option<u32>,
    /// (cuda-nvlink) Device wait bound in milliseconds [default: 10000].
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// (cuda-nvlink) Cap on bytes moved per size (iterations shrink) [default: 16G].
    #[arg(long)]
    pub max_bytes_per_size: Option<String>,
}

impl BenchArgs {
    /// GPU-only flags given (named), for the error on host backends.
    pub(crate) fn gpu_flags(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.common.compare.is_some() {
            v.push("--compare");
        }
        if self.common.compare_lib.is_some() {
            v.push("--compare-lib");
        }
        if self.common.graph > 0 {
            v.push("-G");
        }
        if self.batch.is_some() {
            v.push("--batch");
        }
        if self.gate.is_some() {
            v.push("--gate");
        }
        if self.common.ll_max.is_some() {
            v.push("--ll-max");
        }
        if self.timeout_ms.is_some() {
            v.push("--timeout-ms");
        }
        if self.max_bytes_per_size.is_some() {
            v.push("--max-bytes-per-size");
        }
        if self.common.dead_rank.is_some() {
            v.push("--dead-rank");
        }
        if self.common.stop_rank.is_some() {
            v.push("--stop-rank");
        }
        if self.common.abort_after_ms.is_some() {
            v.push("--abort-after-ms");
        }
        v
    }
}

/// nccl-tests' flags that only take one value here (`-t`, `-g`, `-N 0`), and JSON or
/// CSV on a stdout that `commhal launch` prefixes: refused before any rank starts
/// waiting for the others, with what to do instead.
pub fn check_nccl_tests_flags(args: &BenchArgs) -> Result<(), String> {
    if args.common.nthreads != 1 {
        return Err(format!(
            "bench: -t {}: one thread per process here; start more ranks with `commhal launch -n N` (or --ranks N)",
            args.common.nthreads
        ));
    }
    if args.common.ngpus != 1 {
        return Err(format!(
            "bench: -g {}: one GPU per process here; start more ranks with `commhal launch -n N` (or --ranks N)",
            args.common.ngpus
        ));
    }
    if args.common.cycles == 0 {
        return Err(
            "bench: -N 0 (run forever) is not offered: give a number of cycles, e.g. -N 1000"
                .into(),
        );
    }
    if args.common.timeout_s == Some(0) {
        return Err("bench: -T 0: give the timeout in seconds, at least 1".into());
    }
    if args.json && args.csv {
        return Err("bench: --json and --csv both given: pick one".into());
    }
    if (args.json || args.csv) && LAUNCH_PREFIX.flag().map_err(|e| e.to_string())? {
        return Err(format!(
            "bench: {}: `commhal launch` prefixes every stdout line with [rank K], which breaks the format; write it to a file with -J FILE (.json or .csv), run `commhal launch --no-prefix`, or let the benchmark start its ranks with --ranks N",
            if args.json { "--json" } else { "--csv" }
        ));
    }
    Ok(())
}

/// Where the results go as JSON or CSV: `-J FILE` (CSV when it ends in `.csv`).
fn output_file_is_csv(path: &str) -> bool {
    path.to_ascii_lowercase().ends_with(".csv")
}

/// nccl-tests' name of a type (`float`, `half`, `bfloat16`, `f8e4m3`, `int32`, ...).
pub fn nccl_type_name(d: DataType) -> &'static str {
    match d {
        DataType::F64 => "double",
        DataType::F32 => "float",
        DataType::F16 => "half",
        DataType::Bf16 => "bfloat16",
        DataType::F8E4M3 => "f8e4m3",
        DataType::F8E5M2 => "f8e5m2",
        DataType::I8 => "int8",
        DataType::U8 => "uint8",
        DataType::I32 => "int32",
        DataType::U32 => "uint32",
        DataType::I64 => "int64",
        DataType::U64 => "uint64",
    }
}

/// nccl-tests' first header line.
pub fn nccl_header_line(
    min_bytes: u64,
    max_bytes: u64,
    factor: u64,
    warmup: u32,
    iters: u32,
    check: u32,
    graph: u32,
) -> String {
    format!(
        "# nThread 1 nGpus 1 minBytes {min_bytes} maxBytes {max_bytes} step: {factor}(factor) warmup iters: {warmup} iters: {iters} agg iters: 1 validation: {check} graph: {graph}"
    )
}

/// nccl-tests' line for one rank under `# Using devices`.
pub fn nccl_device_line(rank: u32, pid: u32, host: &str, device: u32, name: &str) -> String {
    format!("#  Rank {rank:2} Group  0 Pid {pid:6} on {host:>10} device {device:2} {name}")
}

/// nccl-tests' column headers (the table's first three lines).
pub const NCCL_COLUMNS: [&str; 3] = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
];

/// nccl-tests' footer: wrong elements over the run and the mean bus bandwidth over
/// every timed cell (out-of-place and in-place of every size; cells that did not run
/// are left out).
pub fn nccl_footer(wrong: i64, busbw: &[f64]) -> [String; 3] {
    let ok: Vec<f64> = busbw.iter().copied().filter(|b| b.is_finite()).collect();
    let avg = if ok.is_empty() {
        0.0
    } else {
        ok.iter().sum::<f64>() / ok.len() as f64
    };
    [
        format!(
            "# Out of bounds values : {} {}",
            wrong.max(0),
            if wrong > 0 { "FAILED" } else { "OK" }
        ),
        format!("# Avg bus bandwidth    : {avg:.4} "),
        "#".to_string(),
    ]
}

/// This machine's host name (for `# Using devices`).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// One measured row.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    size: u64,
    count: u64,
    dtype: String,
    redop: String,
    root: i64,
    algorithm: String,
    oop_us: f64,
    oop_algbw: f64,
    oop_busbw: f64,
    oop_wrong: i64,
    ip_us: f64,
    ip_algbw: f64,
    ip_busbw: f64,
    ip_wrong: i64,
}

/// `-b`/`-e` as bytes, after checking that the size sweep ends: `-b` at least 1 (a
/// zero start never grows) and `-b <= -e` (`-f >= 2` and `-n >= 1` are checked when
/// the flags are parsed).
pub fn check_sizes(args: &BenchArgs) -> Result<(u64, u64), String> {
    let (lo, hi) = (args.common.min_bytes, args.common.max_bytes);
    if lo == 0 {
        return Err(format!(
            "bench: -b {lo}: the smallest size must be at least 1 byte (sizes grow by multiplying by -f, so 0 never grows)"
        ));
    }
    if lo > hi {
        return Err(format!("bench: -b {lo} is above -e {hi}: pass -b <= -e"));
    }
    Ok((lo, hi))
}

/// Entry point.
pub fn run(args: &BenchArgs, cli_backends: Option<&[String]>) -> Result<i32, String> {
    let named;
    let cli_backends = match args.backend.as_deref() {
        Some(b) if crate::gpu::is_gpu_backend(b) => return crate::gpu::bench(args, cli_backends),
        Some(b) => {
            crate::gpu::refuse_other_cuda(b)?;
            if cli_backends.is_some() {
                return Err(format!(
                    "bench: --backend {b} and --backends both given: use one of them"
                ));
            }
            named = [b.to_string()];
            Some(&named[..])
        }
        None => cli_backends,
    };
    let gpu_only = args.gpu_flags();
    if !gpu_only.is_empty() {
        return Err(format!(
            "bench: {}: for the GPU collectives only; add --backend cuda-nvlink",
            gpu_only.join(", ")
        ));
    }
    check_nccl_tests_flags(args)?;
    let coll = Collective::from_name(&args.collective).map_err(|e| e.to_string())?;
    let dtype =
        DataType::from_name(args.dtype.as_deref().unwrap_or("f32")).map_err(|e| e.to_string())?;
    let op = RedOp::from_name(&args.op).map_err(|e| e.to_string())?;
    let (lo, hi) = check_sizes(args)?;
    let env = LaunchEnv::detect().map_err(|e| e.to_string())?;
    if env.is_none()
        && let Some(n) = args.ranks
        && n > 1
    {
        return self_launch(n);
    }
    let boot: Arc<dyn Bootstrap> = match env {
        Some(_) => Arc::new(TcpBootstrap::from_env().map_err(|e| e.to_string())?),
        None => Arc::new(InProcBootstrap::create(1).remove(0)),
    };
    let (rank, n) = (boot.rank(), boot.size());
    if args.nodes == 0 || !n.is_multiple_of(args.nodes) {
        return Err(format!(
            "--nodes {} must divide the {n} ranks into equal virtual nodes",
            args.nodes
        ));
    }
    let algo = args.algo.as_ref().map(|a| {
        if a.contains(':') {
            a.clone()
        } else {
            format!("{}:{a}", coll.name())
        }
    });
    let opts = CommOptions {
        backends: cli_backends.map(<[String]>::to_vec),
        node: Some(rank / (n / args.nodes)),
        algo,
        wait: args.common.timeout_s.map(|s| WaitPolicy {
            timeout: Duration::from_secs(s),
            ..WaitPolicy::for_host(n / args.nodes)
        }),
        ..Default::default()
    };
    let mut comm = Communicator::new(boot, opts).map_err(|e| e.to_string())?;
    let root = args.common.root;
    if root >= n {
        return Err(format!("-r {root}: root must be below the {n} ranks"));
    }
    let s = dtype.size() as u64;
    // Sizes as nccl-tests: bytes of the larger of the send/recv buffers per rank.
    let mut sizes = Vec::new();
    let mut size = lo;
    while size <= hi {
        sizes.push(size);
        match size.checked_mul(args.common.step_factor) {
            Some(v) => size = v,
            None => break,
        }
    }
    let (fi, fo) = if coll == Collective::SendRecv {
        (1, 1)
    } else {
        coll.io_factors(n)
    };
    let per_elem = s * fi.max(fo) as u64;
    let max_count = hi / per_elem;
    let mut send = comm
        .alloc((max_count * s * fi as u64) as usize)
        .map_err(|e| e.to_string())?;
    let mut recv = comm
        .alloc((max_count * s * fo as u64) as usize)
        .map_err(|e| e.to_string())?;
    let mut inplace = comm
        .alloc((max_count * per_elem) as usize)
        .map_err(|e| e.to_string())?;

    let devices = gather_devices(comm.bootstrap().as_ref())?;
    let steps = sizes.len() as u64 * u64::from(args.common.cycles);
    let progress = (rank == 0 && steps > 1).then(|| {
        let pb = indicatif::ProgressBar::new(steps);
        pb.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} sizes {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb
    });
    // Rank 0's stdout, one line at a time as each size completes (flushed, so that a
    // pipe or `commhal launch` shows it at once), around the progress bar on stderr.
    let emit = |line: &str| {
        let print = || {
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "{line}");
            let _ = o.flush();
        };
        match &progress {
            Some(pb) => pb.suspend(print),
            None => print(),
        }
    };
    let table = !args.json && !args.csv;
    if rank == 0 && table {
        for line in table_header(&comm, coll, args, lo, hi, &devices) {
            emit(&line);
        }
    }
    if rank == 0 && args.csv {
        emit(CSV_HEADER);
    }
    let factor = match coll {
        Collective::AllReduce => 2.0 * (n as f64 - 1.0) / n as f64,
        Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
            (n as f64 - 1.0) / n as f64
        }
        _ => 1.0,
    };
    let mut rows = Vec::new();
    for _cycle in 0..args.common.cycles {
        for &size in &sizes {
            let count = size / per_elem;
            if let Some(pb) = &progress {
                pb.set_message(format!("{size} B"));
            }
            let ctx = Ctx {
                coll,
                count,
                dtype,
                op,
                root,
            };
            let algorithm = if coll == Collective::SendRecv {
                "p2p".to_string()
            } else {
                comm.algorithm_for(coll, count, dtype)
                    .map(|a| a.full_name())
                    .unwrap_or_default()
            };
            let mut times = [0.0f64; 2];
            let mut wrong = [0i64; 2];
            for (k, in_place) in [false, true].into_iter().enumerate() {
                if coll == Collective::SendRecv && in_place {
                    times[k] = f64::NAN;
                    wrong[k] = -1;
                    continue;
                }
                fill(
                    &ctx,
                    &mut comm,
                    &mut send,
                    &mut recv,
                    &mut inplace,
                    in_place,
                );
                for _ in 0..args.common.warmup {
                    ctx.call(&mut comm, &send, &mut recv, &mut inplace, in_place)?;
                }
                let mut local = Vec::with_capacity(args.common.iters as usize);
                for _ in 0..args.common.iters {
                    let t0 = Instant::now();
                    ctx.call(&mut comm, &send, &mut recv, &mut inplace, in_place)?;
                    local.push(t0.elapsed().as_secs_f64() * 1e6);
                }
                times[k] = match args.average {
                    None => max_then_median(comm.bootstrap().as_ref(), &local)?,
                    Some(a) => combine_medians(comm.bootstrap().as_ref(), &mut local, a)?,
                };
                wrong[k] = if args.common.check != 0 {
                    fill(
                        &ctx,
                        &mut comm,
                        &mut send,
                        &mut recv,
                        &mut inplace,
                        in_place,
                    );
                    ctx.call(&mut comm, &send, &mut recv, &mut inplace, in_place)?;
                    let w = ctx.count_wrong(&comm, &recv, &inplace, in_place);
                    sum_over_ranks(comm.bootstrap().as_ref(), w)?
                } else {
                    -1
                };
            }
            let gbs = |us: f64| size as f64 / (us * 1e-6) / 1e9;
            let row = Row {
                size,
                count,
                dtype: nccl_type_name(dtype).into(),
                redop: if coll.reduces() {
                    op.name().into()
                } else {
                    "none".into()
                },
                root: if matches!(coll, Collective::Broadcast | Collective::Reduce) {
                    root as i64
                } else {
                    -1
                },
                algorithm,
                oop_us: times[0],
                oop_algbw: gbs(times[0]),
                oop_busbw: gbs(times[0]) * factor,
                oop_wrong: wrong[0],
                ip_us: times[1],
                ip_algbw: gbs(times[1]),
                ip_busbw: gbs(times[1]) * factor,
                ip_wrong: wrong[1],
            };
            if rank == 0 && table {
                emit(&table_row(&row));
            } else if rank == 0 && args.csv {
                emit(&csv_row(&row));
            }
            rows.push(row);
            if let Some(pb) = &progress {
                pb.inc(1);
            }
        }
    }
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    if rank != 0 {
        return Ok(0);
    }
    let wrong: i64 = rows
        .iter()
        .flat_map(|r| [r.oop_wrong, r.ip_wrong])
        .filter(|&w| w > 0)
        .sum();
    if table {
        let busbw: Vec<f64> = rows
            .iter()
            .flat_map(|r| [r.oop_busbw, r.ip_busbw])
            .collect();
        println!("{}", nccl_footer(wrong, &busbw).join("\n"));
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?
        );
    }
    if let Some(path) = &args.output_file {
        let text = if output_file_is_csv(path) {
            let mut t = format!("{CSV_HEADER}\n");
            for r in &rows {
                t += &csv_row(r);
                t.push('\n');
            }
            t
        } else {
            serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())? + "\n"
        };
        std::fs::write(path, text).map_err(|e| format!("-J {path}: {e}"))?;
    }
    if let Some(path) = &args.plot {
        svg(coll, n, &rows, std::path::Path::new(path))?;
        eprintln!("wrote {path}");
    }
    Ok(if wrong > 0 { 1 } else { 0 })
}

/// The CSV columns (`--csv`, `-J FILE.csv`).
const CSV_HEADER: &str = "size,count,type,redop,root,algorithm,oop_us,oop_algbw,oop_busbw,oop_wrong,ip_us,ip_algbw,ip_busbw,ip_wrong";

fn csv_row(r: &Row) -> String {
    format!(
        "{},{},{},{},{},{},{:.2},{:.3},{:.3},{},{:.2},{:.3},{:.3},{}",
        r.size,
        r.count,
        r.dtype,
        r.redop,
        r.root,
        r.algorithm,
        r.oop_us,
        r.oop_algbw,
        r.oop_busbw,
        r.oop_wrong,
        r.ip_us,
        r.ip_algbw,
        r.ip_busbw,
        r.ip_wrong
    )
}

/// Every rank's pid and host (rank order), for `# Using devices`.
fn gather_devices(boot: &dyn Bootstrap) -> Result<Vec<(u32, String)>, String> {
    const HOST: usize = 60;
    let mut rec = std::process::id().to_le_bytes().to_vec();
    let mut host = host_name().into_bytes();
    host.resize(HOST, 0);
    rec.extend_from_slice(&host);
    let all = boot.all_gather(&rec).map_err(|e| e.to_string())?;
    Ok(all
        .iter()
        .map(|b| {
            let pid = b
                .get(..4)
                .and_then(|p| p.try_into().ok())
                .map(u32::from_le_bytes)
                .unwrap_or(0);
            let host = b.get(4..).unwrap_or_default();
            let end = host.iter().position(|&c| c == 0).unwrap_or(host.len());
            (pid, String::from_utf8_lossy(&host[..end]).into_owned())
        })
        .collect())
}

/// A rank's median, combined over the ranks as nccl-tests' `-a`: 0 rank 0's, 1 the
/// mean, 2 the min, 3 the max.
fn combine_medians(boot: &dyn Bootstrap, local: &mut [f64], how: u8) -> Result<f64, String> {
    local.sort_by(|a, b| a.total_cmp(b));
    let mine = local.get(local.len() / 2).copied().unwrap_or(f64::NAN);
    let all = boot
        .all_gather(&mine.to_le_bytes())
        .map_err(|e| e.to_string())?;
    let v: Vec<f64> = all
        .iter()
        .map(|b| f64::from_le_bytes(b.get(..8).and_then(|w| w.try_into().ok()).unwrap_or([0; 8])))
        .collect();
    Ok(match how {
        0 => v.first().copied().unwrap_or(mine),
        2 => v.iter().copied().fold(f64::INFINITY, f64::min),
        3 => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        _ => v.iter().sum::<f64>() / v.len().max(1) as f64,
    })
}

/// Start `n` ranks of this very command (without `--ranks`) under `commhal launch`.
fn self_launch(n: u32) -> Result<i32, String> {
    crate::launch::self_launch(n, crate::launch::without_ranks(std::env::args().skip(1)))
}

/// Per-iteration max over ranks, then the median over iterations.
fn max_then_median(boot: &dyn Bootstrap, local: &[f64]) -> Result<f64, String> {
    let bytes: Vec<u8> = local.iter().flat_map(|t| t.to_le_bytes()).collect();
    let all = boot.all_gather(&bytes).map_err(|e| e.to_string())?;
    let mut per_iter: Vec<f64> = (0..local.len())
        .map(|i| {
            all.iter()
                .filter_map(|b| b.get(i * 8..i * 8 + 8))
                .map(|w| f64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
                .fold(0.0, f64::max)
        })
        .collect();
    per_iter.sort_by(|a, b| a.total_cmp(b));
    Ok(per_iter[per_iter.len() / 2])
}

fn sum_over_ranks(boot: &dyn Bootstrap, w: i64) -> Result<i64, String> {
    let all = boot
        .all_gather(&w.to_le_bytes())
        .map_err(|e| e.to_string())?;
    Ok(all
        .iter()
        .map(|b| i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])))
        .sum())
}

struct Ctx {
    coll: Collective,
    count: u64,
    dtype: DataType,
    op: RedOp,
    root: u32,
}

/// Input value of rank `r` at element `i`: exact under any reduction order. Sums and
/// products may use negative inputs even for unsigned types (they wrap the same way
/// in the library and in the checker's signed arithmetic); min and max compare, so
/// unsigned types get non-negative inputs there.
fn value(dtype: DataType, op: RedOp, r: u64, i: u64) -> f64 {
    let x = (r.wrapping_mul(7) + i.wrapping_mul(13) + (i >> 7)) % 9;
    let unsigned = matches!(dtype, DataType::U8 | DataType::U32 | DataType::U64);
    match op {
        RedOp::Sum | RedOp::Avg => (x % 3) as f64 - 1.0,
        RedOp::Prod => [-1.0, 1.0, 2.0][(x % 3) as usize],
        RedOp::Min | RedOp::Max if unsigned => x as f64,
        RedOp::Min | RedOp::Max => x as f64 - 3.0,
    }
}

fn encode_into(dtype: DataType, v: f64, out: &mut [u8]) {
    let mut tmp = Vec::with_capacity(8);
    dtype.encode(v, &mut tmp);
    out.copy_from_slice(&tmp);
}

fn fill(
    ctx: &Ctx,
    comm: &mut Communicator,
    send: &mut Buffer,
    recv: &mut Buffer,
    inplace: &mut Buffer,
    in_place: bool,
) {
    let (me, n) = (comm.rank() as u64, comm.size() as u64);
    let s = ctx.dtype.size();
    let (fi, _) = ctx.input_factors(n as u32);
    let elems = ctx.count * fi as u64;
    let (buf, at) = if in_place {
        inplace.as_mut_slice().fill(POISON);
        let at = if ctx.coll == Collective::AllGather {
            (me * ctx.count) as usize * s
        } else {
            0
        };
        (inplace.as_mut_slice(), at)
    } else {
        recv.as_mut_slice().fill(POISON);
        (send.as_mut_slice(), 0)
    };
    for i in 0..elems {
        let o = at + i as usize * s;
        encode_into(
            ctx.dtype,
            value(ctx.dtype, ctx.op, me, i),
            &mut buf[o..o + s],
        );
    }
}

impl Ctx {
    fn input_factors(&self, n: u32) -> (u32, u32) {
        if self.coll == Collective::SendRecv {
            (1, 1)
        } else {
            self.coll.io_factors(n)
        }
    }

    fn call(
        &self,
        comm: &mut Communicator,
        send: &Buffer,
        recv: &mut Buffer,
        inplace: &mut Buffer,
        in_place: bool,
    ) -> Result<(), String> {
        let (c, d, o, root) = (self.count, self.dtype, self.op, self.root);
        let r = match (self.coll, in_place) {
            (Collective::AllReduce, false) => comm.all_reduce(send, recv, c, d, o),
            (Collective::AllReduce, true) => comm.all_reduce_in_place(inplace, c, d, o),
            (Collective::AllGather, false) => comm.all_gather(send, recv, c, d),
            (Collective::AllGather, true) => comm.all_gather_in_place(inplace, c, d),
            (Collective::ReduceScatter, false) => comm.reduce_scatter(send, recv, c, d, o),
            (Collective::ReduceScatter, true) => comm.reduce_scatter_in_place(inplace, c, d, o),
            (Collective::Broadcast, false) => comm.broadcast(send, recv, c, d, root),
            (Collective::Broadcast, true) => comm.broadcast_in_place(inplace, c, d, root),
            (Collective::Reduce, false) => comm.reduce(send, recv, c, d, o, root),
            (Collective::Reduce, true) => comm.reduce_in_place(inplace, c, d, o, root),
            (Collective::AllToAll, false) => comm.all_to_all(send, recv, c, d),
            (Collective::AllToAll, true) => comm.all_to_all_in_place(inplace, c, d),
            (Collective::SendRecv, _) => {
                let (me, n) = (comm.rank(), comm.size());
                let bytes = (c * d.size() as u64) as usize;
                if n == 1 {
                    recv.as_mut_slice()[..bytes].copy_from_slice(&send.as_slice()[..bytes]);
                    return Ok(());
                }
                let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
                let data = send.as_slice()[..bytes].to_vec();
                let out = &mut recv.as_mut_slice()[..bytes];
                let mut g = comm.group_start();
                g.send(next, &data).map_err(|e| e.to_string())?;
                g.recv(prev, out).map_err(|e| e.to_string())?;
                g.group_end()
            }
        };
        r.map_err(|e| e.to_string())
    }

    /// Wrong elements in this rank's output.
    fn count_wrong(
        &self,
        comm: &Communicator,
        recv: &Buffer,
        inplace: &Buffer,
        in_place: bool,
    ) -> i64 {
        let (me, n) = (comm.rank() as u64, comm.size() as u64);
        let (count, s) = (self.count, self.dtype.size());
        let cb = count as usize * s;
        let red = |i: u64, at: u64| -> Vec<u8> {
            // Reduce every rank's element `at`.
            let mut acc = value(self.dtype, self.op, 0, at);
            for r in 1..n {
                let v = value(self.dtype, self.op, r, at);
                acc = match self.op {
                    RedOp::Sum | RedOp::Avg => acc + v,
                    RedOp::Prod => acc * v,
                    RedOp::Min => acc.min(v),
                    RedOp::Max => acc.max(v),
                };
            }
            let _ = i;
            let mut b = vec![0u8; s];
            encode_into(self.dtype, acc, &mut b);
            let _ = finalize(&mut b, self.dtype, self.op, n as usize);
            b
        };
        let single = |r: u64, at: u64| -> Vec<u8> {
            let mut b = vec![0u8; s];
            encode_into(self.dtype, value(self.dtype, self.op, r, at), &mut b);
            b
        };
        let (out, range): (&[u8], std::ops::Range<usize>) = match (self.coll, in_place) {
            (Collective::ReduceScatter, true) => {
                (inplace.as_slice(), me as usize * cb..(me as usize + 1) * cb)
            }
            (Collective::AllGather | Collective::AllToAll, true) => {
                (inplace.as_slice(), 0..cb * n as usize)
            }
            (Collective::AllGather | Collective::AllToAll, false) => {
                (recv.as_slice(), 0..cb * n as usize)
            }
            (_, true) => (inplace.as_slice(), 0..cb),
            (_, false) => (recv.as_slice(), 0..cb),
        };
        if self.coll == Collective::Reduce && me != self.root as u64 {
            return 0;
        }
        let out = &out[range];
        let mut wrong = 0i64;
        let elems = out.len() / s.max(1);
        for i in 0..elems as u64 {
            let want = match self.coll {
                Collective::AllReduce | Collective::Reduce => red(i, i),
                Collective::ReduceScatter => red(i, me * count + i),
                Collective::AllGather => single(i / count, i % count),
                Collective::Broadcast => single(self.root as u64, i),
                Collective::AllToAll => single(i / count, me * count + i % count),
                Collective::SendRecv => single((me + n - 1) % n, i),
            };
            let got = &out[i as usize * s..(i as usize + 1) * s];
            if got != want.as_slice() {
                wrong += 1;
            }
        }
        wrong
    }
}

/// Rank 0's header: what runs where, nccl-tests' parameter line, `# Using devices`
/// (one line per rank) and the column headers.
fn table_header(
    comm: &Communicator,
    coll: Collective,
    args: &BenchArgs,
    lo: u64,
    hi: u64,
    devices: &[(u32, String)],
) -> Vec<String> {
    let t = comm.topology();
    let mut v = vec![
        format!(
            "# commhal bench {}: {} ranks ({} per node), backend {}, time: {}",
            coll.name(),
            t.nranks,
            t.ranks_per_node,
            comm.backend(),
            match args.average {
                None => "max over ranks per iteration, median over iterations",
                Some(0) => "rank 0's median",
                Some(2) => "min over ranks of the medians",
                Some(3) => "max over ranks of the medians",
                Some(_) => "mean over ranks of the medians",
            }
        ),
        nccl_header_line(
            lo,
            hi,
            args.common.step_factor,
            args.common.warmup,
            args.common.iters,
            u32::from(args.common.check),
            0,
        ),
        "#".into(),
        "# Using devices".into(),
    ];
    for (rank, (pid, host)) in devices.iter().enumerate() {
        v.push(nccl_device_line(
            rank as u32,
            *pid,
            host,
            0,
            &format!("[host] {}", comm.backend()),
        ));
    }
    v.push("#".into());
    v.extend(NCCL_COLUMNS.iter().map(|s| s.to_string()));
    v
}

/// A time or bandwidth as nccl-tests prints it (`N/A` for a cell that did not run).
fn num(v: f64, width: usize) -> String {
    if !v.is_finite() {
        return format!("{:>width$}", "N/A");
    }
    let decimals = if v < 100.0 {
        2
    } else if v < 10_000.0 {
        1
    } else {
        0
    };
    format!("{v:>width$.decimals$}")
}

/// One table row in nccl-tests' columns, then the algorithm.
fn table_row(r: &Row) -> String {
    let w = |v: i64| {
        if v < 0 {
            "N/A".to_string()
        } else {
            v.to_string()
        }
    };
    let cell = |us: f64, alg: f64, bus: f64, wrong: i64| {
        format!(
            "  {}  {}  {}  {:>5}",
            num(us, 7),
            num(alg, 6),
            num(bus, 6),
            w(wrong)
        )
    };
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{}  {}",
        r.size,
        r.count,
        r.dtype,
        r.redop,
        r.root,
        cell(r.oop_us, r.oop_algbw, r.oop_busbw, r.oop_wrong),
        cell(r.ip_us, r.ip_algbw, r.ip_busbw, r.ip_wrong),
        r.algorithm
    )
}

/// The plot of a host run: busbw and time of out-of-place and in-place against size.
fn svg(coll: Collective, n: u32, rows: &[Row], path: &std::path::Path) -> Result<(), String> {
    let pts = |f: fn(&Row) -> (f64, f64)| -> Vec<Point> {
        rows.iter()
            .map(|r| {
                let (busbw, us) = f(r);
                Point {
                    size: r.size,
                    busbw,
                    us,
                }
            })
            .collect()
    };
    let series = [
        Series {
            name: "commhal out-of-place".into(),
            color: (0x1f, 0x77, 0xb4),
            points: pts(|r| (r.oop_busbw, r.oop_us)),
        },
        Series {
            name: "commhal in-place".into(),
            color: (0xd6, 0x27, 0x28),
            points: pts(|r| (r.ip_busbw, r.ip_us)),
        },
    ];
    let text = svg_series(&format!("{} {} ranks", coll.name(), n), &series)?;
    std::fs::write(path, text).map_err(|e| format!("--plot {}: {e}", path.display()))
}

/// One point of a plotted line (non-finite values are left out).
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// Bytes.
    pub size: u64,
    /// GB/s.
    pub busbw: f64,
    /// µs.
    pub us: f64,
}

/// One line of a plot.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend.
    pub name: String,
    /// Red, green, blue.
    pub color: (u8, u8, u8),
    /// Points, by size.
    pub points: Vec<Point>,
}

/// Panel heading of the bus bandwidth chart (and its y axis).
pub const BUSBW_AXIS: &str = "busbw (GB/s)";
/// Panel heading of the time chart (and its y axis).
pub const TIME_AXIS: &str = "time (µs, log scale)";
/// The x axis of both charts.
pub const SIZE_AXIS: &str = "message size (bytes, log2 scale)";

/// A two-panel SVG drawn with plotters: bus bandwidth (linear) and time (log) against
/// size (log2, ticks at powers of two labelled 1K, 4M, 1G ...), gridlines, a legend
/// with every series (e.g. commhal and NCCL, out-of-place and in-place).
pub fn svg_series(title: &str, series: &[Series]) -> Result<String, String> {
    use plotters::prelude::*;

    let err = |e: &dyn std::fmt::Display| format!("drawing the plot: {e}");
    let finite = |v: f64| v.is_finite() && v > 0.0;
    let mut exps: Vec<f64> = series
        .iter()
        .flat_map(|s| &s.points)
        .map(|p| (p.size.max(1) as f64).log2())
        .collect();
    exps.sort_by(|a, b| a.total_cmp(b));
    let (x0, x1) = match (exps.first(), exps.last()) {
        (Some(&a), Some(&b)) if b > a => (a, b),
        (Some(&a), _) => (a - 1.0, a + 1.0),
        _ => (0.0, 1.0),
    };
    // x is log2(bytes): asking for one label per unit of the span (at most 16) puts
    // the ticks on whole powers of two (every one, or every second, ...)
    let x_labels = ((x1 - x0).floor() as usize + 1).clamp(2, 16);
    let size_label = |x: &f64| human(2f64.powf(*x).round() as u64);

    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (960, 820)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root
            .titled(title, ("sans-serif", 20))
            .map_err(|e| err(&e))?;
        let panels = root.split_evenly((2, 1));
        // bus bandwidth: linear from 0
        let bw_max = series
            .iter()
            .flat_map(|s| &s.points)
            .map(|p| p.busbw)
            .filter(|&v| finite(v))
            .fold(0.0, f64::max);
        let bw_top = if bw_max > 0.0 { bw_max * 1.1 } else { 1.0 };
        let mut chart = ChartBuilder::on(&panels[0])
            .caption(BUSBW_AXIS, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, 0.0..bw_top)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(SIZE_AXIS)
            .y_desc(BUSBW_AXIS)
            .x_labels(x_labels)
            .x_label_formatter(&size_label)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| err(&e))?;
        for s in series {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| finite(p.busbw))
                .map(|p| ((p.size.max(1) as f64).log2(), p.busbw))
                .collect();
            draw_line(&mut chart, s, pts).map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        // time: log from below the fastest to above the slowest
        let times: Vec<f64> = series
            .iter()
            .flat_map(|s| &s.points)
            .map(|p| p.us)
            .filter(|&v| finite(v))
            .collect();
        let t_lo = times.iter().copied().fold(f64::INFINITY, f64::min);
        let t_hi = times.iter().copied().fold(0.0, f64::max);
        // whole decades, so that the log axis has labelled ticks however narrow the data
        let (t_lo, t_hi) = if t_hi > 0.0 {
            (
                10f64.powf(t_lo.log10().floor()),
                10f64.powf((t_hi.log10() + 1e-9).ceil()),
            )
        } else {
            (1.0, 10.0)
        };
        let mut chart = ChartBuilder::on(&panels[1])
            .caption(TIME_AXIS, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, (t_lo..t_hi).log_scale())
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(SIZE_AXIS)
            .y_desc(TIME_AXIS)
            .x_labels(x_labels)
            .x_label_formatter(&size_label)
            .y_label_formatter(&|v| format!("{}", (*v * 1000.0).round() / 1000.0))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| err(&e))?;
        for s in series {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| finite(p.us))
                .map(|p| ((p.size.max(1) as f64).log2(), p.us))
                .collect();
            draw_line(&mut chart, s, pts).map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(out)
}

/// The text of every `<text>` element of an SVG, trimmed (for checking plots).
#[cfg(test)]
pub fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = t.split_once('>')?.1;
            Some(body.split("</text>").next()?.trim().to_string())
        })
        .collect()
}

/// One series on a chart: a line, a dot per size, and its legend entry.
fn draw_line<'a, X, Y>(
    chart: &mut plotters::chart::ChartContext<
        'a,
        plotters::backend::SVGBackend<'a>,
        plotters::coord::cartesian::Cartesian2d<X, Y>,
    >,
    s: &Series,
    pts: Vec<(f64, f64)>,
) -> Result<(), plotters::drawing::DrawingAreaErrorKind<std::io::Error>>
where
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    use plotters::prelude::*;
    let (r, g, b) = s.color;
    let color = RGBColor(r, g, b);
    chart
        .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
        .label(s.name.as_str())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    chart.draw_series(PointSeries::of_element(
        pts,
        3,
        color.filled(),
        &|c, size, style| EmptyElement::at(c) + Circle::new((0, 0), size, style),
    ))?;
    Ok(())
}

pub fn human(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b.is_multiple_of(1 << 30) => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b.is_multiple_of(1 << 20) => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b.is_multiple_of(1 << 10) => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct B {
        #[command(flatten)]
        a: BenchArgs,
    }

    fn args(v: &[&str]) -> BenchArgs {
        B::try_parse_from(["x", "allreduce"].into_iter().chain(v.iter().copied()))
            .map(|b| b.a)
            .unwrap_or_else(|e| panic!("{v:?}: {e}"))
    }

    fn row(size: u64, us: f64, busbw: f64, ip_us: f64) -> Row {
        Row {
            size,
            count: size / 4,
            dtype: nccl_type_name(DataType::F32).into(),
            redop: "sum".into(),
            root: -1,
            algorithm: "allreduce:ring".into(),
            oop_us: us,
            oop_algbw: busbw / 2.0,
            oop_busbw: busbw,
            oop_wrong: 0,
            ip_us,
            ip_algbw: busbw / 2.0,
            ip_busbw: if ip_us.is_finite() { busbw } else { f64::NAN },
            ip_wrong: if ip_us.is_finite() { 0 } else { -1 },
        }
    }

    #[test]
    fn nccl_tests_type_names() {
        let names: Vec<&str> = [
            DataType::I8,
            DataType::U8,
            DataType::I32,
            DataType::U32,
            DataType::I64,
            DataType::U64,
            DataType::F16,
            DataType::F32,
            DataType::F64,
            DataType::Bf16,
            DataType::F8E4M3,
            DataType::F8E5M2,
        ]
        .into_iter()
        .map(nccl_type_name)
        .collect();
        assert_eq!(
            names,
            [
                "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
                "bfloat16", "f8e4m3", "f8e5m2"
            ]
        );
        // and every one of them is accepted back by -d
        for n in names {
            assert!(DataType::from_name(n).is_ok() || n.starts_with("f8"), "{n}");
        }
    }

    #[test]
    fn rows_line_up_under_nccl_tests_columns() {
        let line = table_row(&row(1024, 12.345, 0.5, 11.0));
        // every value ends where its column heading ends
        let heads = NCCL_COLUMNS[1];
        let ends = |s: &str| -> Vec<usize> {
            let b = s.as_bytes();
            (0..b.len())
                .filter(|&i| b[i] != b' ' && (i + 1 == b.len() || b[i + 1] == b' '))
                .collect()
        };
        let (h, r) = (ends(heads), ends(&line));
        // (the heading line's first end is its `#`)
        assert_eq!(&r[..h.len() - 1], &h[1..], "\n{heads}\n{line}");
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            f,
            [
                "1024",
                "256",
                "float",
                "sum",
                "-1",
                "12.35",
                "0.25",
                "0.50",
                "0",
                "11.00",
                "0.25",
                "0.50",
                "0",
                "allreduce:ring"
            ]
        );
        // a cell that did not run (send/recv in place): N/A, never NaN
        let sr = table_row(&row(1024, 5.0, 1.0, f64::NAN));
        assert!(sr.contains("N/A") && !sr.contains("NaN"), "{sr}");
    }

    #[test]
    fn header_and_footer_as_nccl_tests() {
        assert_eq!(
            nccl_header_line(1024, 65536, 4, 5, 20, 1, 0),
            "# nThread 1 nGpus 1 minBytes 1024 maxBytes 65536 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"
        );
        assert_eq!(
            nccl_device_line(1, 4242, "node7", 0, "[host] host-emu"),
            "#  Rank  1 Group  0 Pid   4242 on      node7 device  0 [host] host-emu"
        );
        // mean over out-of-place and in-place cells; cells that did not run left out
        let f = nccl_footer(0, &[1.0, 3.0, f64::NAN, 2.0]);
        assert_eq!(f[0], "# Out of bounds values : 0 OK");
        assert_eq!(f[1], "# Avg bus bandwidth    : 2.0000 ");
        assert_eq!(f[2], "#");
        assert_eq!(
            nccl_footer(3, &[]),
            [
                "# Out of bounds values : 3 FAILED".to_string(),
                "# Avg bus bandwidth    : 0.0000 ".to_string(),
                "#".to_string()
            ]
        );
    }

    #[test]
    fn nccl_tests_flags() {
        let a = args(&[
            "-a", "3", "-z", "1", "-t", "1", "-g", "1", "-N", "2", "-T", "7", "-C", "1", "-J",
            "out.csv",
        ]);
        assert_eq!(
            (
                a.average,
                a.common.blocking,
                a.common.cycles,
                a.common.timeout_s,
                a.common.cputime
            ),
            (Some(3), 1, 2, Some(7), 1)
        );
        assert!(output_file_is_csv(a.output_file.as_deref().unwrap_or("")));
        assert!(check_nccl_tests_flags(&a).is_ok());
        // -G alone, -G N, -G 0
        assert_eq!(args(&["-G"]).common.graph, 5);
        assert_eq!(args(&["-G", "3"]).common.graph, 3);
        assert_eq!(args(&["-G", "0"]).common.graph, 0);
        assert_eq!(args(&["-G", "-b", "2K"]).common.graph, 5);
        assert!(args(&["-G", "2"]).gpu_flags().contains(&"-G"));
        assert!(args(&["-G", "0"]).gpu_flags().is_empty());
        // refused with what to do instead
        let e = check_nccl_tests_flags(&args(&["-g", "2"])).unwrap_err();
        assert!(e.contains("-g 2") && e.contains("commhal launch -n"), "{e}");
        let e = check_nccl_tests_flags(&args(&["-t", "4"])).unwrap_err();
        assert!(e.contains("-t 4") && e.contains("commhal launch -n"), "{e}");
        let e = check_nccl_tests_flags(&args(&["-N", "0"])).unwrap_err();
        assert!(e.contains("-N 0") && e.contains("number of cycles"), "{e}");
        assert!(check_nccl_tests_flags(&args(&["--json", "--csv"])).is_err());
        for bad in [&["-a", "4"][..], &["-z", "2"], &["-C", "2"]] {
            assert!(
                B::try_parse_from(["x", "allreduce"].into_iter().chain(bad.iter().copied()))
                    .is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn plot_is_an_svg_with_both_series_and_labelled_axes() {
        let dir = std::env::temp_dir().join(format!("commhal-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("allreduce.svg");
        let rows = [
            row(1024, 10.0, 0.1, 10.5),
            row(1 << 20, 100.0, 10.0, 101.0),
            row(64 << 20, 5000.0, 13.0, 5100.0),
        ];
        svg(Collective::AllReduce, 4, &rows, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
        assert!(text.contains("xmlns=\"http://www.w3.org/2000/svg\""));
        // well formed: every element opened is closed
        let opens = text.matches("<text").count();
        assert_eq!(opens, text.matches("</text>").count());
        assert!(opens > 20, "axis labels, ticks and legends: {opens}");
        let texts = svg_texts(&text);
        for want in [
            "allreduce 4 ranks",
            BUSBW_AXIS,
            TIME_AXIS,
            SIZE_AXIS,
            "1K",
            "1M",
            "64M",
        ] {
            assert!(texts.iter().any(|t| t == want), "{want} in {texts:?}");
        }
        for series in ["commhal out-of-place", "commhal in-place"] {
            assert_eq!(
                texts.iter().filter(|t| *t == series).count(),
                2,
                "{series}: one legend entry per panel"
            );
        }
        // per panel: a line per series, three sizes each, then the 2-point legend keys
        let lines: Vec<usize> = text
            .split("<polyline")
            .skip(1)
            .filter(|l| l.contains("stroke=\"#1F77B4\"") || l.contains("stroke=\"#D62728\""))
            .map(|l| {
                l.split("points=\"")
                    .nth(1)
                    .and_then(|p| p.split('"').next())
                    .unwrap_or("")
                    .split_whitespace()
                    .count()
            })
            .collect();
        assert_eq!(lines, [3, 3, 2, 2, 3, 3, 2, 2]);
        assert!(!text.contains("NaN") && !text.contains("inf"));
    }
}
