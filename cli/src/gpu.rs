//! The GPU collectives (commhal-cuda-coll) behind `commhal bench --backend
//! cuda-nvlink` and `commhal tune`.
//!
//! Both run one process per GPU: under `commhal launch -n N -- commhal ...`, or started
//! by the command itself with `--ranks N` (default: every visible GPU) through the
//! same launcher (`crate::launch`), which is also how `commhal conformance --backend
//! cuda-nvlink --ranks N` gets its GPU ranks. Every rank runs
//! [`commhal_gpu_bench::bench::run_rank`] / [`commhal_gpu_bench::sweep::tune`], the
//! loops `commhal-gpu-bench` runs too; rank 0 prints, plots and writes files.
//!
//! Without a usable CUDA driver or GPU the commands stop before starting any rank,
//! with the driver probe's reason (exit status 2).

use std::path::PathBuf;

use clap::ValueEnum;
use commhal_gpu_bench::bench::{self, Row};
use commhal_gpu_bench::cli::{self as ccli, Args, Collective, Dtype};
use commhal_gpu_bench::{sweep, tune};
use commhal_hal::bootstrap::LaunchEnv;
use commhal_hal::registry::Availability;

use crate::bench::{BenchArgs, Point, Series, human, svg_series};

/// Backend names that select the GPU collectives: cuda-nvlink (its kernels, with
/// cuda-dma's copy engines where the tuning routes to them: the default selection) or
/// cuda-dma alone (every collective on the copy engines).
pub const GPU_BACKENDS: [&str; 2] = ["cuda-nvlink", "cuda-dma"];

/// The links `--backend name` asks for: cuda-dma alone for cuda-dma, else the
/// environment's or the default selection.
fn links_of(backend: &Option<String>) -> Option<Vec<String>> {
    (backend.as_deref() == Some("cuda-dma")).then(|| vec!["cuda-dma".to_string()])
}

/// Does `--backend name` select the GPU collectives?
pub fn is_gpu_backend(name: &str) -> bool {
    GPU_BACKENDS.contains(&name)
}

/// `--backend` names the CUDA family but not one with collective kernels.
pub fn refuse_other_cuda(name: &str) -> Result<(), String> {
    if name.starts_with("cuda") || name.starts_with("hip") {
        return Err(format!(
            "bench: --backend {name}: the GPU collectives benchmark runs on cuda-nvlink (peer-mapped NVLink kernels) or cuda-dma (copy engines); {name} has no collectives of its own. Use --backend cuda-nvlink, or `commhal conformance --backend {name}` to check the transport"
        ));
    }
    Ok(())
}

/// The benchmark's arguments from `commhal bench`'s (checked here, before any GPU
/// work, so mistakes are reported on any machine).
pub fn coll_args(a: &BenchArgs, cli_backends: Option<&[String]>) -> Result<Args, String> {
    let who = format!(
        "bench --backend {}",
        a.backend.as_deref().unwrap_or("cuda-nvlink")
    );
    let bad = |msg: String| Err(format!("{who}: {msg}"));
    crate::bench::check_nccl_tests_flags(a)?;
    if cli_backends.is_some() {
        return bad("--backends chooses the host Communicator's transports; the GPU collectives use their own kernels: drop --backends".into());
    }
    let op = match a.op.as_str() {
        "sum" => ccli::OpName::Sum,
        "prod" => ccli::OpName::Prod,
        "min" => ccli::OpName::Min,
        "max" => ccli::OpName::Max,
        "avg" => ccli::OpName::Avg,
        other => {
            return bad(format!(
                "-o {other}: expected sum, prod, min, max or avg (the pre-multiplied sum: commhal-gpu-bench -o premulsum --scalar X)"
            ));
        }
    };
    if a.algo.is_some() {
        return bad("--algo picks host Communicator algorithms; the GPU kernel choice comes from the tuning file (see `commhal tune`)".into());
    }
    if a.nodes != 1 {
        return bad("--nodes applies to the host Communicator only".into());
    }
    if a.csv {
        return bad("--csv is not available here: use the table or --json".into());
    }
    if let Some(f) = &a.output_file
        && f.to_ascii_lowercase().ends_with(".csv")
    {
        return bad(format!(
            "-J {f}: the GPU benchmark writes JSON only: name a .json file"
        ));
    }
    let collective = Collective::from_str(&a.collective, true).map_err(|_| {
        format!(
            "{who}: `{}` is not a GPU collective ({})",
            a.collective,
            names::<Collective>()
        )
    })?;
    let dtype =
        parse_dtype(a.dtype.as_deref().unwrap_or("half")).map_err(|e| format!("{who}: {e}"))?;
    let (min_bytes, max_bytes) = (a.common.min_bytes, a.common.max_bytes);
    if min_bytes == 0 || min_bytes > max_bytes {
        return bad(format!(
            "need 1 <= -b <= -e (-b {min_bytes}, -e {max_bytes}), -f >= 2 (-f {}) and -n >= 1 (-n {})",
            a.common.step_factor, a.common.iters
        ));
    }
    let max_bytes_per_size = match &a.max_bytes_per_size {
        Some(s) => ccli::parse_size(s).map_err(|e| format!("--max-bytes-per-size: {e}"))?,
        None => 16 << 30,
    };
    Ok(Args {
        collective,
        // the shared flags as parsed: one declaration, the same defaults and parsers
        common: a.common.clone(),
        dtype,
        op,
        scalar: 1.0,
        average: a.average.unwrap_or(1),
        batch: a.batch.unwrap_or(ccli::DEFAULT_BATCH),
        gate: a.gate.unwrap_or(1),
        // rank 0 writes it (never through `commhal launch`'s prefixed stdout)
        json: a.output_file.as_ref().map(PathBuf::from),
        max_bytes_per_size,
        timeout_ms: a.timeout_ms.unwrap_or(10_000),
        cycle_roots: false,
        mix_sendrecv: false,
        matrix: false,
        p2p: false,
        split: None,
        dtypes: Vec::new(),
        print_tables: !a.json,
        buffers: ccli::Buffers::Caller,
        buffer_offset: 0,
        backends: links_of(&a.backend),
    })
    .and_then(|args: Args| {
        args.check_nccl_tests_flags()
            .and_then(|()| args.check_fault_flags())
            .map_err(|e| format!("{who}: {e}"))?;
        if args.common.fault().is_some() && (a.plot.is_some() || a.output_file.is_some() || a.json) {
            return Err(format!(
                "{who}: a fault check prints one line per rank and no table: drop --plot, -J and --json"
            ));
        }
        Ok(args)
    })
}

fn parse_dtype(s: &str) -> Result<Dtype, String> {
    Dtype::from_str(s, true)
        .map_err(|_| format!("-d {s}: not a GPU datatype ({})", names::<Dtype>()))
}

/// The tuner times the kernels compiled with the main unit (f16, bf16, f32 sum); the
/// other types and operators run the same kernels with the same thresholds.
fn tune_dtype(s: &str) -> Result<Dtype, String> {
    let d = parse_dtype(s).map_err(|e| format!("tune: {e}"))?;
    match d {
        Dtype::Half | Dtype::Bfloat16 | Dtype::Float => Ok(d),
        _ => Err(format!(
            "tune: -d {s}: the tuner times half, bfloat16 and float; the thresholds serve every datatype"
        )),
    }
}

fn names<T: ValueEnum>() -> String {
    T::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_string()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Visible CUDA devices, or why CUDA cannot run here.
pub fn probe_gpus(what: &str) -> Result<u32, String> {
    let why = match commhal_cuda_rt::probe() {
        Availability::Available => match commhal_cuda_rt::driver::device_count() {
            Ok(n) if n > 0 => return Ok(n),
            Ok(_) => "the driver reports 0 devices (check CUDA_VISIBLE_DEVICES)".to_string(),
            Err(e) => e.to_string(),
        },
        Availability::Unavailable(why) => why,
    };
    Err(format!(
        "{what}: CUDA is not usable on this machine: {why}. Run it on a host with NVIDIA GPUs (nvidia-smi must list them){}",
        if what.starts_with("bench") {
            "; without --backend, `commhal bench` measures the host Communicator"
        } else {
            ""
        }
    ))
}

/// Where this process stands: `Some(n)` = start `n` rank processes of this command;
/// `None` = run as a rank (under a launcher, or the only rank).
fn plan_ranks(what: &str, ranks: Option<u32>, min: u32) -> Result<Option<u32>, String> {
    let env = LaunchEnv::detect().map_err(|e| e.to_string())?;
    if let Some(env) = env {
        if let Some(n) = ranks
            && n != env.world_size
        {
            return Err(format!(
                "{what}: --ranks {n} but the launcher started {} ranks",
                env.world_size
            ));
        }
        // every rank fails here alike, before any of them waits for the others
        probe_gpus(what)?;
        return Ok(None);
    }
    let ndev = probe_gpus(what)?;
    let n = ranks.unwrap_or(ndev);
    if n == 0 || n > ndev {
        return Err(format!(
            "{what}: --ranks {n}, but {ndev} GPU(s) are visible here (one rank per GPU)"
        ));
    }
    if n < min {
        return Err(format!(
            "{what}: needs at least {min} GPUs (one rank each), {ndev} visible"
        ));
    }
    Ok((n > 1).then_some(n))
}

/// Start `n` ranks of this very command (with `--ranks n`, which the ranks check
/// against the launcher's world size) under `commhal launch`.
fn self_launch(n: u32) -> Result<i32, String> {
    crate::launch::self_launch(n, with_ranks(std::env::args().skip(1).collect(), n))
}

/// `args` with `--ranks n` (replacing any `--ranks`).
fn with_ranks(args: Vec<String>, n: u32) -> Vec<String> {
    let mut out = crate::launch::without_ranks(args);
    out.push("--ranks".into());
    out.push(n.to_string());
    out
}

/// `commhal bench <collective> --backend cuda-nvlink ...`.
pub fn bench(a: &BenchArgs, cli_backends: Option<&[String]>) -> Result<i32, String> {
    let args = coll_args(a, cli_backends)?;
    let who = format!(
        "bench --backend {}",
        a.backend.as_deref().unwrap_or("cuda-nvlink")
    );
    if let Some(n) = plan_ranks(&who, a.ranks, 1)? {
        return self_launch(n);
    }
    let boot = commhal_cuda_coll::setup::bootstrap_from_env().map_err(|e| e.to_string())?;
    let out = bench::run_rank(&args, boot.as_ref()).map_err(|e| e.to_string())?;
    if out.rank != 0 || args.common.fault().is_some() {
        // a fault check: every rank printed its own outcome; the exit status says the rest
        return Ok(i32::from(out.wrong));
    }
    if a.json {
        let doc = bench::json_doc(&args, &out);
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "# {}",
            if out.wrong {
                "WRONG RESULTS"
            } else {
                "all results correct"
            }
        );
    }
    if let Some(path) = &a.plot {
        let text = plot(args.collective, out.nranks, &out.ours, &out.theirs)?;
        std::fs::write(path, text).map_err(|e| format!("--plot {path}: {e}"))?;
        eprintln!("wrote {path}");
    }
    Ok(i32::from(out.wrong))
}

/// The SVG of a GPU run: busbw and time of commhal (and of the compared library,
/// named by its rows' label) out of place and in place against size.
pub fn plot(coll: Collective, n: u32, ours: &[Row], theirs: &[Row]) -> Result<String, String> {
    // a zero time is a cell that did not run (no in-place variant)
    let pos = |v: f64, t: f64| if t > 0.0 { v } else { f64::NAN };
    let line = |rows: &[Row], name: &str, color: (u8, u8, u8), ip: bool| Series {
        name: name.into(),
        color,
        points: rows
            .iter()
            .map(|r| {
                let c = if ip { &r.ip } else { &r.oop };
                Point {
                    size: r.bytes,
                    busbw: pos(c.busbw, c.time_us),
                    us: pos(c.time_us, c.time_us),
                }
            })
            .collect(),
    };
    let mut series = vec![
        line(ours, "commhal out-of-place", (0x1f, 0x77, 0xb4), false),
        line(ours, "commhal in-place", (0xd6, 0x27, 0x28), true),
    ];
    if let Some(first) = theirs.first() {
        let name = &first.implementation;
        series.push(line(
            theirs,
            &format!("{name} out-of-place"),
            (0x2c, 0xa0, 0x2c),
            false,
        ));
        series.push(line(
            theirs,
            &format!("{name} in-place"),
            (0xff, 0x7f, 0x0e),
            true,
        ));
    }
    if !coll.in_place_supported() {
        series.retain(|s| !s.name.ends_with(" in-place"));
    }
    svg_series(&format!("{} {n} GPUs", coll.name()), &series)
}

/// Options of `commhal tune`.
#[derive(Debug, clap::Args)]
pub struct TuneArgs {
    /// The backend whose kernel-choice thresholds to tune (only cuda-nvlink has any).
    #[arg(long, default_value = "cuda-nvlink")]
    pub backend: String,
    /// Ranks, one process per GPU [default: every visible GPU]; the file gets (or
    /// replaces) its `[ranks.N]` section.
    #[arg(long)]
    pub ranks: Option<u32>,
    /// Tuning file to write: read first when it exists (other sections kept), else
    /// started from the built-in file for this GPU, e.g.
    /// algorithms/tuning/gpu-cuda-h200.toml.
    #[arg(long)]
    pub out: PathBuf,
    /// The path to record in the section's `command` instead of --out's, and --json by
    /// its file name only: for a run on a scratch copy (a device's output folder) whose
    /// section is committed at this path.
    #[arg(long, value_name = "PATH")]
    pub record_as: Option<String>,
    /// Collectives to tune [default: allreduce,allgather,reducescatter,broadcast,reduce,sendrecv].
    #[arg(long, value_delimiter = ',')]
    pub collectives: Vec<String>,
    /// Smallest size (bytes; K, M, G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "1K")]
    pub min_bytes: String,
    /// Largest size.
    #[arg(short = 'e', long = "maxbytes", default_value = "256M")]
    pub max_bytes: String,
    /// Factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub factor: u64,
    /// Timed iterations per size and kernel (the median is over groups of --batch
    /// launches: 100 gives 10 groups; with 20, two groups, one slow group moved the
    /// rooted LL windows from 128K / 128M to 256K / 64M).
    #[arg(short = 'n', long = "iters", default_value_t = 100)]
    pub iters: u32,
    /// Warm-up iterations per size and kernel.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: u32,
    /// Element type (thresholds are in bytes; half, bfloat16 or float).
    #[arg(short = 'd', long = "datatype", default_value = "half")]
    pub dtype: String,
    /// Check every candidate's results (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u8,
    /// Time CUDA graph replays instead of stream launches.
    #[arg(short = 'G', long = "graph")]
    pub graph: bool,
    /// Launches per timing group, as `commhal bench --batch`: CUDA events around
    /// every K back-to-back launches, median over the groups of elapsed / launches
    /// (1 = an event between every launch; not used with -G).
    #[arg(long, value_name = "K", default_value_t = ccli::DEFAULT_BATCH, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Device wait bound in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Write every sweep (sizes, candidates, µs) and the derived thresholds as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The benchmark arguments and collectives of a `commhal tune` (checked before any
/// GPU work).
pub fn tune_args(t: &TuneArgs) -> Result<(Args, Vec<Collective>), String> {
    if t.backend != "cuda-nvlink" {
        return Err(format!(
            "tune --backend {}: only cuda-nvlink has kernel-choice thresholds to tune (host backends: algorithms/tuning/host-emu.toml)",
            t.backend
        ));
    }
    let mut colls = Vec::new();
    for name in &t.collectives {
        let c = Collective::from_str(name.trim(), true)
            .ok()
            .filter(|c| sweep::TUNED.contains(c))
            .ok_or_else(|| {
                format!(
                    "tune --collectives: `{name}` has no kernel choice to tune (choose from {})",
                    sweep::TUNED.map(Collective::name).join(", ")
                )
            })?;
        if !colls.contains(&c) {
            colls.push(c);
        }
    }
    if colls.is_empty() {
        colls = sweep::TUNED.to_vec();
    }
    let min_bytes = ccli::parse_size(&t.min_bytes).map_err(|e| format!("-b: {e}"))?;
    let max_bytes = ccli::parse_size(&t.max_bytes).map_err(|e| format!("-e: {e}"))?;
    if min_bytes == 0 || min_bytes > max_bytes || t.factor < 2 || t.iters == 0 {
        return Err(format!(
            "tune: need 1 <= -b <= -e (-b {min_bytes}, -e {max_bytes}), -f >= 2 (-f {}) and -n >= 1 (-n {})",
            t.factor, t.iters
        ));
    }
    let args = Args {
        collective: colls[0],
        common: ccli::CommonArgs {
            min_bytes,
            max_bytes,
            step_factor: t.factor,
            iters: t.iters,
            warmup: t.warmup,
            root: 0,
            check: t.check,
            graph: if t.graph { 5 } else { 0 },
            blocking: 0,
            nthreads: 1,
            ngpus: 1,
            cycles: 1,
            timeout_s: None,
            cputime: 0,
            compare: None,
            compare_lib: None,
            ll_max: None,
            dead_rank: None,
            stop_rank: None,
            abort_after_ms: None,
        },
        dtype: tune_dtype(&t.dtype)?,
        op: ccli::OpName::Sum,
        scalar: 1.0,
        average: 1,
        batch: t.batch,
        gate: 1,
        json: None,
        max_bytes_per_size: 16 << 30,
        timeout_ms: t.timeout_ms,
        cycle_roots: false,
        mix_sendrecv: false,
        matrix: false,
        p2p: false,
        split: None,
        dtypes: Vec::new(),
        print_tables: true,
        // thresholds are tuned on the registered regions: no per-call mapping noise
        buffers: ccli::Buffers::Registered,
        buffer_offset: 0,
        backends: None,
    };
    Ok((args, colls))
}

/// `commhal tune --backend cuda-nvlink [--ranks N] --out FILE ...`.
pub fn tune(t: &TuneArgs) -> Result<i32, String> {
    let (args, colls) = tune_args(t)?;
    if let Some(n) = plan_ranks("tune", t.ranks, 2)? {
        return self_launch(n);
    }
    let boot = commhal_cuda_coll::setup::bootstrap_from_env().map_err(|e| e.to_string())?;
    let out = sweep::tune(&args, &colls, boot.as_ref()).map_err(|e| e.to_string())?;
    let code = if out.rank == 0 {
        write_tuning(t, &args, &out)?
    } else {
        0
    };
    boot.barrier().map_err(|e| e.to_string())?;
    Ok(code)
}

/// Rank 0 of `commhal tune`: the JSON, then the merged tuning file.
fn write_tuning(t: &TuneArgs, args: &Args, out: &sweep::TuneOutcome) -> Result<i32, String> {
    if let Some(path) = &t.json {
        let doc = serde_json::json!({
            "gpu": out.device,
            "nranks": out.nranks,
            "dtype": args.dtype,
            "graph": args.common.graphed(),
            "batch": args.batch,
            "sweeps": out.sweeps,
            "derived": format!("{:?}", out.derived),
        });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("--json {}: {e}", path.display()))?;
    }
    if out.wrong {
        eprintln!(
            "commhal tune: some kernel gave wrong results (the WRONG lines above): {} not written",
            t.out.display()
        );
        return Ok(1);
    }
    let origin = t.out.display().to_string();
    let existing = match std::fs::read_to_string(&t.out) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("tune: reading {origin}: {e}")),
    };
    let meta = tune::Meta {
        gpu_name: out.device.clone(),
        date: tune::today_utc(),
        command: command_line(
            std::env::args().skip(1).collect(),
            out.nranks,
            t.record_as.as_deref(),
        ),
        sweep: format!(
            "{}..{} x{}, {}, {} iters, {} warm-up, {}",
            human(args.common.min_bytes),
            human(args.common.max_bytes),
            args.common.step_factor,
            args.dtype.name(),
            args.common.iters,
            args.common.warmup,
            if args.common.graphed() {
                "graph replays".to_string()
            } else {
                format!("events every {} launches", args.batch)
            }
        ),
    };
    let file = tune::merged(
        existing.as_deref().map(|text| (text, origin.as_str())),
        &out.device,
        out.nranks,
        &out.derived,
        &meta,
    )
    .map_err(|e| e.to_string())?;
    let text = file.render().map_err(|e| e.to_string())?;
    std::fs::write(&t.out, &text).map_err(|e| format!("tune: writing {origin}: {e}"))?;
    println!("# wrote {origin} [ranks.{}]:", out.nranks);
    if let Some(s) = file.ranks.get(&out.nranks) {
        println!(
            "#   allreduce_ll_max = {}, allreduce_push_min = {}, allgather_reducescatter_ll_chunk_max = {}, broadcast_sf_min = {}",
            s.allreduce_ll_max,
            s.allreduce_push_min,
            s.allgather_reducescatter_ll_chunk_max,
            s.broadcast_sf_min
        );
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |x| x.to_string());
        println!(
            "#   allreduce_ring_min = {}, allgather_ring_min = {}, reducescatter_ring_min = {}, broadcast_chain_min = {}, reduce_chain_min = {} (-: absent = never)",
            opt(s.allreduce_ring_min),
            opt(s.allgather_ring_min),
            opt(s.reducescatter_ring_min),
            opt(s.broadcast_chain_min),
            opt(s.reduce_chain_min)
        );
        println!("#   {}", s.note);
    }
    Ok(0)
}

/// This command as a shell line: `commhal` and `args` quoted where needed, with
/// `--ranks n` added when the ranks came from a launcher (so the line reproduces the
/// run by itself).
fn command_line(args: Vec<String>, n: u32, record_as: Option<&str>) -> String {
    let has_ranks = args
        .iter()
        .any(|a| a == "--ranks" || a.starts_with("--ranks="));
    let mut parts = vec!["commhal".to_string()];
    match record_as {
        None => parts.extend(args.iter().map(|a| shell_quote(a))),
        Some(rec) => parts.extend(recorded_args(&args, rec)),
    }
    if !has_ranks {
        parts.push(format!("--ranks {n}"));
    }
    parts.join(" ")
}

/// `args` quoted as [`command_line`] records them under `--record-as rec`: `rec` for
/// --out's path, --json's file name only, --record-as itself left out.
fn recorded_args(args: &[String], rec: &str) -> Vec<String> {
    let file_name = |p: &str| {
        std::path::Path::new(p)
            .file_name()
            .map_or(p.to_string(), |f| f.to_string_lossy().into_owned())
    };
    let mut parts = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        if !matches!(flag, "--out" | "--json" | "--record-as") {
            parts.push(shell_quote(a));
            continue;
        }
        let value = inline.or_else(|| it.next().cloned()).unwrap_or_default();
        match flag {
            "--out" => parts.push(format!("--out {}", shell_quote(rec))),
            "--json" => parts.push(format!("--json {}", shell_quote(&file_name(&value)))),
            _ => {}
        }
    }
    parts
}

/// `a` quoted for a POSIX shell when it needs it.
pub fn shell_quote(a: &str) -> String {
    let plain = !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use commhal_cuda_coll::tuning;
    use commhal_gpu_bench::bench::Cell;
    use commhal_gpu_bench::cli::Compare;

    #[derive(Debug, Parser)]
    struct B {
        #[command(flatten)]
        a: BenchArgs,
    }

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: TuneArgs,
    }

    fn bench_args(v: &[&str]) -> Result<Args, String> {
        let b = B::try_parse_from(std::iter::once("x").chain(v.iter().copied()))
            .map_err(|e| e.to_string())?;
        coll_args(&b.a, None)
    }

    #[test]
    fn bench_flags_become_the_gpu_benchmarks() {
        let a = bench_args(&[
            "allreduce",
            "--backend",
            "cuda-nvlink",
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
            "-G",
            "--compare",
            "nccl",
            "--ll-max",
            "64K",
            "--gate",
            "0",
            "--batch",
            "1",
        ])
        .unwrap();
        assert_eq!(a.collective, Collective::Allreduce);
        assert_eq!(
            (a.common.min_bytes, a.common.max_bytes, a.common.step_factor),
            (1024, 1 << 30, 4)
        );
        assert_eq!((a.common.iters, a.common.warmup), (50, 10));
        assert_eq!(a.dtype, Dtype::Half, "GPU default: half");
        assert!(a.common.graphed() && a.print_tables);
        assert_eq!(a.common.compare, Some(Compare::Nccl));
        assert_eq!((a.common.ll_max, a.gate, a.batch), (Some(64 << 10), 0, 1));
        assert_eq!((a.timeout_ms, a.max_bytes_per_size), (10_000, 16 << 30));
        assert_eq!((a.common.graph, a.average, a.wait_ms()), (5, 1, 10_000));
        // nccl-tests' flags: -G N replays, -a, -T seconds, -N cycles, -J FILE.json
        let a = bench_args(&[
            "allreduce",
            "--backend",
            "cuda-nvlink",
            "-G",
            "20",
            "-a",
            "3",
            "-T",
            "30",
            "-N",
            "2",
            "-J",
            "out.json",
            "-t",
            "1",
            "-g",
            "1",
        ])
        .unwrap();
        assert_eq!(
            (a.common.graph, a.average, a.wait_ms(), a.common.cycles),
            (20, 3, 30_000, 2)
        );
        assert_eq!(a.json.as_deref(), Some(std::path::Path::new("out.json")));
        let a = bench_args(&[
            "broadcast",
            "--backend",
            "cuda-nvlink",
            "-d",
            "bf16",
            "-r",
            "2",
            "--json",
        ])
        .unwrap();
        assert_eq!(
            (a.collective, a.dtype, a.common.root),
            (Collective::Broadcast, Dtype::Bfloat16, 2)
        );
        assert!(!a.print_tables, "--json prints JSON instead of the tables");
        assert_eq!(a.common.compare, None);
        assert_eq!(a.common.compare_lib, None);
        assert_eq!(a.batch, 10, "default: events every 10 launches");
        let a = bench_args(&["allreduce", "--backend", "cuda-nvlink", "--batch=64"]).unwrap();
        assert_eq!(a.batch, 64);
        assert!(bench_args(&["allreduce", "--backend", "cuda-nvlink", "--batch", "0"]).is_err());
    }

    /// The flags both commands share come from one declaration
    /// ([`ccli::CommonArgs`]): `commhal bench` and `commhal-gpu-bench` give the same
    /// values for the same words, the same defaults, and refuse the same values.
    #[test]
    fn shared_flags_parse_alike_in_both_commands() {
        let bench =
            |v: &[&str]| B::try_parse_from(["x", "allreduce"].iter().chain(v)).map(|b| b.a.common);
        let gpu_bench = |v: &[&str]| Args::try_parse_from(["x", "allreduce"].iter().chain(v));
        let cases: [&[&str]; 7] = [
            &[],
            &[
                "-b", "2K", "-e", "1GiB", "-f", "4", "-n", "50", "-w", "10", "-r", "3", "-c", "0",
                "-z", "1", "-t", "1", "-g", "1", "-N", "2", "-T", "30", "-C", "1",
            ],
            &[
                "--minbytes=1M",
                "--maxbytes",
                "2M",
                "--stepfactor",
                "8",
                "--iters",
                "7",
                "--warmup_iters",
                "0",
                "--root",
                "1",
                "--check",
                "2",
                "--graph",
                "3",
                "--blocking",
                "0",
                "--nthreads",
                "1",
                "--ngpus",
                "2",
                "--run_cycles",
                "5",
                "--timeout",
                "9",
                "--report_cputime",
                "0",
            ],
            &["-G", "-b", "4K", "--compare", "mscclpp", "--ll-max", "64K"],
            &["--compare-lib", "/x.so", "--dead-rank", "2"],
            &["--stop-rank", "1"],
            &["--abort-after-ms", "250"],
        ];
        for v in cases {
            let (b, g) = (bench(v), gpu_bench(v));
            let (b, g) = (
                b.unwrap_or_else(|e| panic!("bench {v:?}: {e}")),
                g.unwrap_or_else(|e| panic!("gpu-bench {v:?}: {e}")),
            );
            assert_eq!(b, g.common, "{v:?}");
            // and `commhal bench --backend cuda-nvlink` hands them on as parsed
            let mut words = vec!["allreduce", "--backend", "cuda-nvlink"];
            words.extend(v);
            if let Ok(a) = bench_args(&words) {
                assert_eq!(a.common, g.common, "{v:?}");
            }
        }
        let d = bench(&[]).unwrap();
        assert_eq!(
            (d.min_bytes, d.max_bytes, d.step_factor, d.iters, d.warmup),
            (1024, 64 << 20, 2, 20, 5),
            "nccl-tests' defaults"
        );
        assert_eq!(
            (d.root, d.check, d.graph, d.cycles, d.timeout_s),
            (0, 1, 0, 1, None)
        );
        for bad in [
            &["-b", "x"][..],
            &["-e", "1Q"],
            &["-f", "1"],
            &["-n", "0"],
            &["-z", "2"],
            &["-C", "2"],
            &["-c", "256"],
            &["--ll-max", "lots"],
            &["--abort-after-ms", "0"],
            &["--stop-rank", "-1"],
            &["--compare", "rccl"],
            &["--compare", "nccl", "--compare-lib", "/x.so"],
            &["--dead-rank", "1", "--stop-rank", "2"],
            &["--stop-rank", "1", "--abort-after-ms", "5"],
        ] {
            let (b, g) = (bench(bad).unwrap_err(), gpu_bench(bad).unwrap_err());
            assert_eq!(b.kind(), g.kind(), "{bad:?}: {b} / {g}");
        }
    }

    #[test]
    fn fault_flags_are_forwarded() {
        use commhal_gpu_bench::cli::Fault;
        use std::time::Duration;
        let gpu = |v: &[&str]| {
            let mut args = v.to_vec();
            args.extend(["--backend", "cuda-nvlink"]);
            bench_args(&args)
        };
        assert_eq!(gpu(&["allreduce"]).unwrap().common.fault(), None);
        let a = gpu(&["allreduce", "-b", "4K", "--dead-rank", "3"]).unwrap();
        assert_eq!(
            (a.common.fault(), a.common.min_bytes),
            (Some(Fault::DeadRank(3)), 4096)
        );
        let a = gpu(&[
            "allreduce",
            "-b",
            "1M",
            "--stop-rank",
            "1",
            "--timeout-ms",
            "2000",
        ])
        .unwrap();
        assert_eq!(a.common.fault(), Some(Fault::StopRank(1)));
        assert_eq!(a.wait_ms(), 2000, "the stopped peer's bound");
        let a = gpu(&["allreduce", "--abort-after-ms", "300"]).unwrap();
        assert_eq!(
            a.common.fault(),
            Some(Fault::AbortAfter(Duration::from_millis(300)))
        );
        // one check at a time (clap), an abort before the wait bound, no table outputs
        for (v, want) in [
            (
                &["--dead-rank", "1", "--stop-rank", "2"][..],
                "cannot be used with",
            ),
            (
                &["--dead-rank", "1", "--abort-after-ms", "5"][..],
                "cannot be used with",
            ),
            (
                &["--stop-rank", "1", "--abort-after-ms", "5"][..],
                "cannot be used with",
            ),
            (&["--abort-after-ms", "0"][..], "--abort-after-ms"),
            (
                &["--abort-after-ms", "3000", "--timeout-ms", "2000"][..],
                "device wait bound (2000 ms)",
            ),
            (&["--abort-after-ms", "3000", "-T", "3"][..], "3000 ms"),
            (&["--stop-rank", "1", "--plot", "x.svg"][..], "drop --plot"),
            (&["--dead-rank", "1", "-J", "x.json"][..], "drop --plot, -J"),
            (&["--dead-rank", "1", "--json"][..], "--json"),
        ] {
            let mut args = vec!["allreduce"];
            args.extend(v);
            let e = gpu(&args).unwrap_err();
            assert!(e.contains(want), "{v:?}: {want:?} not in {e}");
        }
        // GPU-only: named on a host run
        let b = B::try_parse_from(["x", "allreduce", "--stop-rank", "1"]).unwrap();
        assert_eq!(b.a.gpu_flags(), ["--stop-rank"]);
        let b = B::try_parse_from(["x", "allreduce", "--dead-rank", "0"]).unwrap();
        assert_eq!(b.a.gpu_flags(), ["--dead-rank"]);
        let b = B::try_parse_from(["x", "allreduce", "--abort-after-ms", "9"]).unwrap();
        assert_eq!(b.a.gpu_flags(), ["--abort-after-ms"]);
    }

    #[test]
    fn compare_flags_reach_the_gpu_benchmark() {
        use commhal_gpu_bench::nccl::Comparison;
        let a = bench_args(&[
            "allreduce",
            "--backend",
            "cuda-nvlink",
            "--compare",
            "mscclpp",
        ])
        .unwrap();
        assert_eq!(
            (a.common.compare, a.common.compare_lib.clone()),
            (Some(Compare::Mscclpp), None)
        );
        assert_eq!(a.common.comparison(), Some(Comparison::Mscclpp));
        let a = bench_args(&[
            "allgather",
            "--backend",
            "cuda-nvlink",
            "--compare-lib",
            "/x.so",
        ])
        .unwrap();
        assert_eq!(a.common.compare, None);
        assert_eq!(
            a.common.compare_lib.as_deref(),
            Some(std::path::Path::new("/x.so"))
        );
        assert_eq!(
            a.common.comparison(),
            Some(Comparison::Path("/x.so".into()))
        );
        let e = bench_args(&[
            "allreduce",
            "--backend",
            "cuda-nvlink",
            "--compare",
            "nccl",
            "--compare-lib",
            "/x.so",
        ])
        .unwrap_err();
        assert!(
            e.contains("--compare-lib") && e.contains("cannot be used with"),
            "{e}"
        );
        assert!(bench_args(&["allreduce", "--compare", "msccl"]).is_err());
    }

    #[test]
    fn bench_mistakes_are_reported_before_any_gpu_work() {
        for (v, want) in [
            (&["allreduce", "-d", "int4"][..], "-d int4"),
            (&["allreduce", "-g", "2"][..], "one GPU per process"),
            (&["allreduce", "-t", "2"][..], "one thread per process"),
            (&["allreduce", "-z", "1"][..], "--batch 1"),
            (&["allreduce", "-C", "1"][..], "CUDA event times"),
            (&["allreduce", "-N", "0"][..], "number of cycles"),
            (&["allreduce", "-J", "x.csv"][..], "JSON only"),
            (&["alltoallv"][..], "not a GPU collective"),
            (&["allreduce", "-o", "premulsum"][..], "-o premulsum"),
            (&["allreduce", "--algo", "ring"][..], "--algo"),
            (&["allreduce", "--nodes", "2"][..], "--nodes"),
            (&["allreduce", "--csv"][..], "--csv"),
            (&["allreduce", "-b", "2M", "-e", "1M"][..], "-b <= -e"),
            (&["allreduce", "--ll-max", "lots"][..], "--ll-max"),
        ] {
            let mut args = v.to_vec();
            args.extend(["--backend", "cuda-nvlink"]);
            let e = bench_args(&args).unwrap_err();
            assert!(e.contains(want), "{v:?}: {want:?} not in {e}");
        }
        let b = B::try_parse_from(["x", "allreduce", "--backend", "cuda-nvlink"]).unwrap();
        let e = coll_args(&b.a, Some(&["host-emu".to_string()])).unwrap_err();
        assert!(e.contains("drop --backends"), "{e}");
        assert!(B::try_parse_from(["x", "allreduce", "--compare", "mpi"]).is_err());
        assert!(
            refuse_other_cuda("hip-xgmi")
                .unwrap_err()
                .contains("cuda-nvlink")
        );
        assert!(refuse_other_cuda("host-emu").is_ok());
        assert!(is_gpu_backend("cuda-nvlink") && !is_gpu_backend("host-emu"));
        // cuda-dma runs every collective on the copy engines: the links say so
        let dma = B::try_parse_from(["x", "allreduce", "--backend", "cuda-dma"]).unwrap();
        assert_eq!(
            coll_args(&dma.a, None).unwrap().backends,
            Some(vec!["cuda-dma".to_string()])
        );
        let nv = B::try_parse_from(["x", "allreduce", "--backend", "cuda-nvlink"]).unwrap();
        assert_eq!(coll_args(&nv.a, None).unwrap().backends, None);
    }

    #[test]
    fn host_runs_name_the_gpu_only_flags() {
        let b = B::try_parse_from([
            "x",
            "allreduce",
            "-G",
            "--compare",
            "nccl",
            "--timeout-ms",
            "5",
            "--batch",
            "4",
        ])
        .unwrap();
        assert_eq!(
            b.a.gpu_flags(),
            ["--compare", "-G", "--batch", "--timeout-ms"]
        );
        let b = B::try_parse_from(["x", "allreduce", "--compare-lib", "/x.so"]).unwrap();
        assert_eq!(b.a.gpu_flags(), ["--compare-lib"]);
        let b = B::try_parse_from(["x", "allreduce"]).unwrap();
        assert!(b.a.gpu_flags().is_empty());
        assert_eq!(b.a.dtype, None, "host default (f32) applied later");
    }

    #[test]
    fn ranks_are_forced_onto_self_launched_children() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            with_ranks(v(&["bench", "allreduce", "--ranks", "8", "-G"]), 4),
            v(&["bench", "allreduce", "-G", "--ranks", "4"])
        );
        assert_eq!(
            with_ranks(v(&["tune", "--ranks=2", "--out", "f"]), 2),
            v(&["tune", "--out", "f", "--ranks", "2"])
        );
        assert_eq!(with_ranks(v(&["tune"]), 3), v(&["tune", "--ranks", "3"]));
    }

    #[test]
    fn tune_flags() {
        let t = T::try_parse_from(["x", "--out", "f.toml"]).unwrap();
        let (a, colls) = tune_args(&t.a).unwrap();
        assert_eq!(colls, sweep::TUNED.to_vec());
        assert_eq!(
            (a.common.min_bytes, a.common.max_bytes, a.common.step_factor),
            (1024, 256 << 20, 2)
        );
        assert_eq!(
            (a.dtype, a.common.check, a.common.graph),
            (Dtype::Half, 1, 0)
        );
        assert_eq!(a.batch, 10, "the benchmark's default batch");
        assert!(T::try_parse_from(["x", "--out", "f", "--batch", "0"]).is_err());
        let t = T::try_parse_from([
            "x",
            "--out",
            "f.toml",
            "--collectives",
            "allgather,reducescatter,allgather",
            "-G",
            "-d",
            "float",
            "--batch",
            "1",
        ])
        .unwrap();
        let (a, colls) = tune_args(&t.a).unwrap();
        assert_eq!(colls, [Collective::Allgather, Collective::Reducescatter]);
        assert!(a.common.graphed() && a.dtype == Dtype::Float && a.batch == 1);
        for (v, want) in [
            (&["--collectives", "alltoall"][..], "no kernel choice"),
            (&["--backend", "host-emu"][..], "only cuda-nvlink"),
            (&["--backend", "cuda-dma"][..], "only cuda-nvlink"),
            (&["-d", "int4"][..], "-d int4"),
            (&["-f", "1"][..], "-f >= 2"),
        ] {
            let t = T::try_parse_from(["x", "--out", "f"].into_iter().chain(v.iter().copied()))
                .unwrap();
            let e = tune_args(&t.a).unwrap_err();
            assert!(e.contains(want), "{v:?}: {want:?} not in {e}");
        }
        assert!(T::try_parse_from(["x"]).is_err(), "--out is required");
    }

    fn outcome(n: u32, wrong: bool) -> sweep::TuneOutcome {
        let k = 1024u64;
        let sizes = vec![64 * k, 256 * k, 1024 * k];
        let times = vec![
            vec![Some(8.0), Some(10.0), None],
            vec![Some(12.0), Some(12.5), None],
            vec![Some(30.0), Some(16.0), Some(18.0)],
        ];
        let one = sweep::Sweep {
            collective: Collective::Allreduce,
            candidates: vec!["ll", "two-shot", "push"],
            sizes: sizes.clone(),
            chunks: sizes,
            choice: tune::assign(&times),
            times,
            ll_chunk_max: 0,
        };
        let derived = sweep::derive(std::slice::from_ref(&one));
        sweep::TuneOutcome {
            sweeps: vec![one],
            derived,
            wrong,
            rank: 0,
            nranks: n,
            device: "NVIDIA H200".into(),
        }
    }

    /// Rank 0's part of `commhal tune` from synthetic sweeps: the file is created from
    /// the built-in one, a second rank count is merged in, wrong results write nothing.
    #[test]
    fn tune_writes_and_merges_the_file() {
        let dir = std::env::temp_dir().join(format!("commhal-tune-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("gpu.toml");
        let json = dir.join("sweeps.json");
        let _ = std::fs::remove_file(&out);
        let mut t = T::try_parse_from(["x", "--out", "f", "-e", "1M"])
            .unwrap()
            .a;
        t.out = out.clone();
        t.json = Some(json.clone());
        let (args, _) = tune_args(&t).unwrap();
        assert_eq!(write_tuning(&t, &args, &outcome(2, true)).unwrap(), 1);
        assert!(!out.exists(), "wrong results: nothing written");
        assert_eq!(write_tuning(&t, &args, &outcome(2, false)).unwrap(), 0);
        let f = tuning::TuningFile::parse(&std::fs::read_to_string(&out).unwrap(), "o").unwrap();
        let s2 = &f.ranks[&2];
        assert!(s2.tuned && s2.gpu_name == "NVIDIA H200" && s2.date.len() == 10);
        assert_eq!(s2.allreduce_ll_max, 256 * 1024);
        assert_eq!(s2.allreduce_push_min, 0, "push ran and never won");
        assert!(s2.command.starts_with("commhal ") && s2.command.ends_with("--ranks 2"));
        assert!(s2.note.contains("1K..1M x2, half"), "{}", s2.note);
        assert!(s2.note.contains("events every 10 launches"), "{}", s2.note);
        let (_, builtin, _) = tuning::embedded_for("NVIDIA H200").unwrap();
        assert_eq!(
            f.ranks[&8], builtin.ranks[&8],
            "the built-in 8-rank section is kept"
        );
        assert_eq!(write_tuning(&t, &args, &outcome(4, false)).unwrap(), 0);
        let text = std::fs::read_to_string(&out).unwrap();
        let g = tuning::TuningFile::parse(&text, "o").unwrap();
        assert_eq!(&g.ranks[&2], s2, "the 2-rank section is kept");
        assert!(g.ranks[&4].tuned);
        assert_eq!(g.ranks[&8], builtin.ranks[&8]);
        assert!(
            text.contains("#   [ranks.4] tuned on NVIDIA H200 (4 ranks)"),
            "{text}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["sweeps"][0]["candidates"][1], "two-shot");
        assert_eq!((&v["nranks"], &v["batch"]), (&4.into(), &10.into()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn recorded_command_reproduces_the_run() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            command_line(
                v(&["tune", "--out", "my file.toml", "--ranks", "2"]),
                2,
                None
            ),
            "commhal tune --out 'my file.toml' --ranks 2"
        );
        assert_eq!(
            command_line(v(&["tune", "--out", "f.toml"]), 4, None),
            "commhal tune --out f.toml --ranks 4",
            "under `commhal launch -n 4`"
        );
        // a run on a device's scratch copy records the committed path
        let dev = v(&[
            "tune",
            "--out",
            "/root/out/t.toml",
            "--record-as=algorithms/tuning/gpu-cuda-h200.toml",
            "--json=/root/out/tune.json",
            "-n",
            "60",
        ]);
        assert_eq!(
            command_line(dev, 4, Some("algorithms/tuning/gpu-cuda-h200.toml")),
            "commhal tune --out algorithms/tuning/gpu-cuda-h200.toml --json tune.json -n 60 --ranks 4"
        );
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("--out"), "--out");
        assert_eq!(shell_quote("a/b-c.toml"), "a/b-c.toml");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    fn row(bytes: u64, oop: f64, ip: f64) -> Row {
        let cell = |t: f64| Cell {
            time_us: t,
            algbw: if t > 0.0 { bytes as f64 / t / 1e3 } else { 0.0 },
            busbw: if t > 0.0 {
                1.5 * bytes as f64 / t / 1e3
            } else {
                0.0
            },
            wrong: 0,
        };
        Row {
            implementation: "commhal".into(),
            bytes,
            count: bytes / 2,
            iters: 20,
            oop: cell(oop),
            ip: cell(ip),
            kernel: String::new(),
        }
    }

    /// Points of every line drawn in `color` (`#RRGGBB`): data lines and legend keys.
    fn lines_in(svg: &str, color: &str) -> Vec<usize> {
        svg.split("<polyline")
            .skip(1)
            .filter(|l| l.contains(&format!("stroke=\"{color}\"")))
            .map(|l| {
                l.split("points=\"")
                    .nth(1)
                    .and_then(|p| p.split('"').next())
                    .unwrap_or("")
                    .split_whitespace()
                    .count()
            })
            .collect()
    }

    #[test]
    fn plot_draws_both_libraries() {
        let ours = vec![
            row(1024, 7.0, 7.2),
            row(1 << 20, 16.0, 16.5),
            row(1 << 30, 4600.0, 4650.0),
        ];
        let theirs: Vec<Row> = [
            row(1024, 11.0, 11.2),
            row(1 << 20, 21.0, 21.5),
            row(1 << 30, 4500.0, 4550.0),
        ]
        .into_iter()
        .map(|r| Row {
            implementation: "MSCCL++ 0.9.0".into(),
            ..r
        })
        .collect();
        let svg = plot(Collective::Allreduce, 4, &ours, &theirs).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let texts = crate::bench::svg_texts(&svg);
        for name in [
            "commhal out-of-place",
            "commhal in-place",
            "MSCCL++ 0.9.0 out-of-place",
            "MSCCL++ 0.9.0 in-place",
        ] {
            assert_eq!(
                texts.iter().filter(|t| *t == name).count(),
                2,
                "{name} in both panels' legends"
            );
        }
        for label in [
            "allreduce 4 GPUs",
            crate::bench::BUSBW_AXIS,
            crate::bench::TIME_AXIS,
            crate::bench::SIZE_AXIS,
            "1K",
            "1M",
            "1G",
        ] {
            assert!(texts.iter().any(|t| t == label), "{label} in {texts:?}");
        }
        // per panel: the line (3 sizes) and its legend key (2 points)
        for color in ["#1F77B4", "#D62728", "#2CA02C", "#FF7F0E"] {
            assert_eq!(lines_in(&svg, color), vec![3, 2, 3, 2], "{color}");
        }
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        // commhal alone: no second library's line, no legend for one
        let svg = plot(Collective::Allreduce, 2, &ours, &[]).unwrap();
        assert_eq!(lines_in(&svg, "#1F77B4"), vec![3, 2, 3, 2]);
        assert!(lines_in(&svg, "#2CA02C").is_empty() && !svg.contains("MSCCL"));
        // no in-place variant: those lines are left out, not drawn at zero
        let a2a: Vec<Row> = [1024u64, 4096].iter().map(|&b| row(b, 9.0, 0.0)).collect();
        let svg = plot(Collective::Alltoall, 4, &a2a, &a2a).unwrap();
        assert_eq!(lines_in(&svg, "#2CA02C"), vec![2, 2, 2, 2]);
        assert!(lines_in(&svg, "#D62728").is_empty() && !svg.contains("NaN"));
        assert!(
            !crate::bench::svg_texts(&svg)
                .iter()
                .any(|t| t == "commhal in-place")
        );
    }
}
