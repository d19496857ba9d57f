//! `commhal bench <collective>`: the nccl-tests benchmark on commhal's Communicator.
//!
//! Runs inside every rank (`commhal launch -n N -- commhal bench allreduce ...`), or
//! starts the ranks itself with `--ranks N`. Per size: warm up, time `-n` iterations
//! (wall clock around the call on every rank; the max over ranks per iteration, then
//! the median over iterations), then a checked run (inputs whose reduction is exact in
//! any order, outputs poisoned first) giving `#wrong`; out of place, then in place.
//! Rank 0 prints the nccl-tests table (or `--json` / `--csv`) and can draw `--plot`.
//! busbw factors (docs/performance.md): allreduce 2(n−1)/n; allgather, reducescatter,
//! alltoall (n−1)/n; broadcast, reduce, sendrecv 1.
//!
//! `--backend cuda-nvlink` runs the GPU collectives' benchmark instead (one process
//! per GPU, `--compare nccl`, `-G`): see [`crate::gpu`].

use std::sync::Arc;
use std::time::Instant;

use commhal_algorithms::comm::{Buffer, CommOptions, Communicator};
use commhal_algorithms::dtype::finalize;
use commhal_algorithms::plan::Collective;
use commhal_algorithms::{DataType, RedOp};
use commhal_hal::bootstrap::{Bootstrap, InProcBootstrap, LaunchEnv, TcpBootstrap};

/// Poison byte for outputs before each checked run.
const POISON: u8 = 0xA5;

/// Options of `commhal bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// allreduce, allgather, reducescatter, broadcast, reduce, alltoall or sendrecv.
    pub collective: String,
    /// Smallest size in bytes (K, M, G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "1K")]
    pub min_bytes: String,
    /// Largest size in bytes (K, M, G suffixes).
    #[arg(short = 'e', long = "maxbytes", default_value = "64M")]
    pub max_bytes: String,
    /// Multiplication factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub factor: u64,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: u32,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: u32,
    /// Data type (f32, f16, bf16, f64, i32, ...) [default: f32; half with --backend
    /// cuda-nvlink].
    #[arg(short = 'd', long = "datatype")]
    pub dtype: Option<String>,
    /// Reduction op (sum, prod, min, max, avg).
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Check results (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u8,
    /// Root of broadcast/reduce.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: u32,
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
    /// (with --backend cuda-nvlink: one per GPU, default every visible GPU).
    #[arg(long)]
    pub ranks: Option<u32>,
    /// `cuda-nvlink`: benchmark the GPU collectives (one process per GPU) instead of
    /// the host Communicator; another name is the same as `--backends NAME`.
    #[arg(long)]
    pub backend: Option<String>,
    /// (cuda-nvlink) Also run NCCL on the same buffers in the same processes,
    /// alternating with commhal per size; prints both tables and the time ratio.
    #[arg(long, value_enum)]
    pub compare: Option<commhal_cuda_coll::cli::Compare>,
    /// (cuda-nvlink) Time CUDA graph replays (the `-n` launches captured in one graph).
    #[arg(short = 'G', long = "graph")]
    pub graph: bool,
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
    /// (cuda-nvlink) Largest all-reduce done with the one-shot LL kernel (overrides
    /// the tuning file).
    #[arg(long)]
    pub ll_max: Option<String>,
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
        if self.compare.is_some() {
            v.push("--compare");
        }
        if self.graph {
            v.push("-G");
        }
        if self.batch.is_some() {
            v.push("--batch");
        }
        if self.gate.is_some() {
            v.push("--gate");
        }
        if self.ll_max.is_some() {
            v.push("--ll-max");
        }
        if self.timeout_ms.is_some() {
            v.push("--timeout-ms");
        }
        if self.max_bytes_per_size.is_some() {
            v.push("--max-bytes-per-size");
        }
        v
    }
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

/// Parse `1K`, `64M`, `1G`, `4096`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(mul))
        .ok_or_else(|| format!("`{s}` is not a size (use e.g. 4096, 1K, 64M, 1G)"))
}

/// `-b`/`-e` as bytes, after checking that the size sweep ends: `-b` at least 1 (a
/// zero start never grows), `-b <= -e`, `-f >= 2`, `-n >= 1`.
pub fn check_sizes(args: &BenchArgs) -> Result<(u64, u64), String> {
    let (lo, hi) = (parse_size(&args.min_bytes)?, parse_size(&args.max_bytes)?);
    if lo == 0 {
        return Err(format!(
            "bench: -b {}: the smallest size must be at least 1 byte (sizes grow by multiplying by -f, so 0 never grows)",
            args.min_bytes
        ));
    }
    if lo > hi {
        return Err(format!("bench: -b {lo} is above -e {hi}: pass -b <= -e"));
    }
    if args.factor < 2 {
        return Err(format!(
            "bench: -f {}: the step factor must be at least 2 so that sizes grow",
            args.factor
        ));
    }
    if args.iters == 0 {
        return Err("bench: -n 0: run at least 1 iteration".into());
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
        ..Default::default()
    };
    let mut comm = Communicator::new(boot, opts).map_err(|e| e.to_string())?;
    let root = args.root;
    if root >= n {
        return Err(format!("-r {root}: root must be below the {n} ranks"));
    }
    let s = dtype.size() as u64;
    // Sizes as nccl-tests: bytes of the larger of the send/recv buffers per rank.
    let mut sizes = Vec::new();
    let mut size = lo;
    while size <= hi {
        sizes.push(size);
        match size.checked_mul(args.factor) {
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

    let progress = (rank == 0 && sizes.len() > 1).then(|| {
        let pb = indicatif::ProgressBar::new(sizes.len() as u64);
        pb.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} sizes {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb
    });
    let factor = match coll {
        Collective::AllReduce => 2.0 * (n as f64 - 1.0) / n as f64,
        Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
            (n as f64 - 1.0) / n as f64
        }
        _ => 1.0,
    };
    let mut rows = Vec::new();
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
            for _ in 0..args.warmup {
                ctx.call(&mut comm, &send, &mut recv, &mut inplace, in_place)?;
            }
            let mut local = Vec::with_capacity(args.iters as usize);
            for _ in 0..args.iters {
                let t0 = Instant::now();
                ctx.call(&mut comm, &send, &mut recv, &mut inplace, in_place)?;
                local.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            times[k] = max_then_median(comm.bootstrap().as_ref(), &local)?;
            wrong[k] = if args.check != 0 {
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
        rows.push(Row {
            size,
            count,
            dtype: dtype.name().into(),
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
        });
        if let Some(pb) = &progress {
            pb.inc(1);
        }
    }
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    if rank != 0 {
        return Ok(0);
    }
    let any_wrong = rows.iter().any(|r| r.oop_wrong > 0 || r.ip_wrong > 0);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?
        );
    } else if args.csv {
        println!(
            "size,count,type,redop,root,algorithm,oop_us,oop_algbw,oop_busbw,oop_wrong,ip_us,ip_algbw,ip_busbw,ip_wrong"
        );
        for r in &rows {
            println!(
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
            );
        }
    } else {
        print_table(&comm, coll, args, &rows);
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, svg(coll, n, &rows)).map_err(|e| format!("--plot {path}: {e}"))?;
        eprintln!("wrote {path}");
    }
    Ok(if any_wrong { 1 } else { 0 })
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

fn print_table(comm: &Communicator, coll: Collective, args: &BenchArgs, rows: &[Row]) {
    let t = comm.topology();
    println!(
        "# commhal bench {}: {} ranks ({} per node), backend {}, {} iters, {} warmup, check {}",
        coll.name(),
        t.nranks,
        t.ranks_per_node,
        comm.backend(),
        args.iters,
        args.warmup,
        args.check
    );
    println!(
        "#{:>11} {:>12} {:>6} {:>6} {:>5} {:>10} {:>7} {:>7} {:>6} {:>10} {:>7} {:>7} {:>6}  algorithm",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    );
    println!(
        "#{:>11} {:>12} {:>6} {:>6} {:>5} {:>10} {:>7} {:>7} {:>6} {:>10} {:>7} {:>7} {:>6}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    );
    let w = |v: i64| {
        if v < 0 {
            "N/A".to_string()
        } else {
            v.to_string()
        }
    };
    for r in rows {
        println!(
            " {:>11} {:>12} {:>6} {:>6} {:>5} {:>10.2} {:>7.3} {:>7.3} {:>6} {:>10.2} {:>7.3} {:>7.3} {:>6}  {}",
            r.size,
            r.count,
            r.dtype,
            r.redop,
            r.root,
            r.oop_us,
            r.oop_algbw,
            r.oop_busbw,
            w(r.oop_wrong),
            r.ip_us,
            r.ip_algbw,
            r.ip_busbw,
            w(r.ip_wrong),
            r.algorithm
        );
    }
}

/// A two-panel SVG: busbw and time against size (log x), one line per placement.
fn svg(coll: Collective, n: u32, rows: &[Row]) -> String {
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
            name: "out-of-place".into(),
            color: "#1f77b4",
            points: pts(|r| (r.oop_busbw, r.oop_us)),
        },
        Series {
            name: "in-place".into(),
            color: "#d62728",
            points: pts(|r| (r.ip_busbw, r.ip_us)),
        },
    ];
    let sizes: Vec<u64> = rows.iter().map(|r| r.size).collect();
    svg_series(&format!("{} {} ranks", coll.name(), n), &sizes, &series)
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
    /// SVG colour.
    pub color: &'static str,
    /// Points, by size.
    pub points: Vec<Point>,
}

/// A two-panel SVG: busbw and time against size (log x), one line per series; the x
/// labels are `sizes`.
pub fn svg_series(title: &str, sizes: &[u64], series: &[Series]) -> String {
    let (w, h, pad) = (900.0, 360.0, 60.0);
    let lx = |s: u64| (s.max(1) as f64).log2();
    let xs: Vec<f64> = sizes.iter().map(|&s| lx(s)).collect();
    let (x0, x1) = (
        xs.iter().copied().fold(f64::INFINITY, f64::min),
        xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    let span = if x1 > x0 { x1 - x0 } else { 1.0 };
    let legend_w = series
        .iter()
        .map(|s| 7.0 * s.name.len() as f64)
        .fold(100.0, f64::max);
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n",
        2.0 * h
    );
    type Pick = fn(&Point) -> f64;
    let panels: [(&str, Pick, bool); 2] = [
        ("busbw (GB/s)", |p| p.busbw, false),
        ("time (us, log)", |p| p.us, true),
    ];
    for (p, (label, pick, logy)) in panels.iter().enumerate() {
        let top = p as f64 * h;
        let tf = |v: f64| if *logy { v.max(1e-3).log10() } else { v };
        let vals: Vec<f64> = series
            .iter()
            .flat_map(|s| s.points.iter().map(pick))
            .filter(|v| v.is_finite())
            .map(tf)
            .collect();
        let y0 = if *logy {
            vals.iter().copied().fold(f64::INFINITY, f64::min)
        } else {
            0.0
        };
        let y1 = vals
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max)
            .max(y0 + 1e-9);
        let px = |x: f64| pad + (x - x0) / span * (w - 2.0 * pad);
        let py = |y: f64| top + h - pad - (tf(y) - y0) / (y1 - y0) * (h - 2.0 * pad);
        out += &format!(
            "<text x='{}' y='{}'>{title}: {label}</text>\n<line x1='{pad}' y1='{}' x2='{}' y2='{}' stroke='black'/>\n<line x1='{pad}' y1='{}' x2='{pad}' y2='{}' stroke='black'/>\n",
            pad,
            top + 20.0,
            top + h - pad,
            w - pad,
            top + h - pad,
            top + pad,
            top + h - pad
        );
        for (&s, x) in sizes.iter().zip(&xs) {
            out += &format!(
                "<text x='{}' y='{}' text-anchor='middle' font-size='9'>{}</text>\n",
                px(*x),
                top + h - pad + 14.0,
                human(s)
            );
        }
        for (k, s) in series.iter().enumerate() {
            let pts: Vec<String> = s
                .points
                .iter()
                .filter(|q| pick(q).is_finite())
                .map(|q| format!("{:.1},{:.1}", px(lx(q.size)), py(pick(q))))
                .collect();
            out += &format!(
                "<polyline fill='none' stroke='{}' stroke-width='2' points='{}'/>\n<text x='{}' y='{}' fill='{}'>{}</text>\n",
                s.color,
                pts.join(" "),
                w - pad - legend_w,
                top + 20.0 + 14.0 * k as f64,
                s.color,
                s.name
            );
        }
        let ylab = if *logy {
            format!("{:.1}..{:.1} us", 10f64.powf(y0), 10f64.powf(y1))
        } else {
            format!("0..{y1:.2}")
        };
        out += &format!(
            "<text x='4' y='{}' font-size='10'>{ylab}</text>\n",
            top + pad - 6.0
        );
    }
    out += "</svg>\n";
    out
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

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("x").is_err());
    }
}
