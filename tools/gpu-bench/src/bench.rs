//! The benchmark loop: per size, per implementation (commhal, then the compared
//! library — NCCL, MSCCL++, or another with NCCL's API, [`crate::nccl`] — when
//! comparing), out-of-place then in-place: one checked run on poisoned outputs,
//! warm-up, then timed iterations, median per rank, combined over ranks as `-a` says
//! (default: the mean). Rank 0 prints nccl-tests' layout (`# nThread ...`, `# Using
//! devices`, a row per size as it completes, `# Out of bounds values` and `# Avg bus
//! bandwidth` under each table) and writes JSON.
//!
//! Timing, nccl-tests style: CUDA events around groups of `--batch K` back-to-back
//! launches (default 10; the last group may be shorter, `iters <= K` is one group);
//! a group's time per launch = its elapsed time / its launches; a rank's time is the
//! median over its groups. `--batch 1` records an event between every launch. With
//! `-G [N]` the iterations are captured into one graph and each of the N replays
//! (default 5) is a group.
//!
//! Entry points shared by `commhal-gpu-bench` and `commhal bench --backend
//! cuda-nvlink`: [`run_rank`] (bootstrap → [`Comm`] → [`run`] → JSON) and [`tune()`]
//! (`commhal tune`: every candidate kernel per size, thresholds derived by
//! [`commhal_cuda_coll::tuning`]).

use std::time::Duration;

use commhal_cuda_coll::setup::local_device;
use commhal_cuda_rt::pieces::PieceMapping;
use commhal_cuda_rt::{DeviceBuffer, Event, Gate, Graph, Stream, copy};
use commhal_hal::bootstrap::Bootstrap;
use serde::Serialize;

use crate::check;
use crate::cli::{self, Args, Buffers, Collective, Fault};
use crate::nccl::{LibInfo, Nccl};
use crate::tune::{self, Derived};
use commhal_cuda_coll::comm::{BufferPath, CallBufs, Comm, Kernel, P2pOp, Tuning, kernel_name};
use commhal_cuda_coll::error::{CollError, Result};
use commhal_cuda_coll::tuning::{self, Forced};

/// One direction (out-of-place or in-place) of one row.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Cell {
    /// Mean over ranks of each rank's median, µs.
    pub time_us: f64,
    /// GB/s.
    pub algbw: f64,
    /// GB/s.
    pub busbw: f64,
    /// Wrong elements over all ranks (-1: not checked).
    pub wrong: i64,
}

/// One table row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `commhal`, or the compared library's label (e.g. `NCCL 2.28.9`).
    pub implementation: String,
    /// Bytes (size column).
    pub bytes: u64,
    /// Elements (count column).
    pub count: u64,
    /// Timed iterations.
    pub iters: u32,
    /// Out-of-place.
    pub oop: Cell,
    /// In-place.
    pub ip: Cell,
    /// Kernel used (commhal; the library's label on its rows).
    pub kernel: String,
}

/// What [`run`] measured on this rank.
#[derive(Debug, Clone)]
pub struct Rows {
    /// commhal's rows.
    pub ours: Vec<Row>,
    /// The compared library's rows (empty without a comparison).
    pub theirs: Vec<Row>,
    /// The compared library (`None` without a comparison).
    pub compared: Option<LibInfo>,
    /// Whether any result was wrong.
    pub wrong: bool,
}

impl Rows {
    /// Nothing measured.
    pub fn empty() -> Rows {
        Rows {
            ours: Vec::new(),
            theirs: Vec::new(),
            compared: None,
            wrong: false,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Impl {
    Commhal,
    Nccl,
}

/// Most launches queued behind the timing gate (far below the driver's queue depth).
const MAX_GATED_ITERS: u32 = 200;

/// The benchmark's own input and output allocations (`--buffers caller` / `vmm`).
/// (The outputs are only held: the pointers into them are in `Bench::out`.)
enum CallerMem {
    Plain {
        input: DeviceBuffer,
        _output: DeviceBuffer,
    },
    Vmm {
        input: PieceMapping,
        _output: PieceMapping,
    },
}

/// Bytes of one VMM piece of `--buffers vmm` (PyTorch's small-pool segment size).
const VMM_PIECE: u64 = 2 << 20;

impl CallerMem {
    fn new(
        ctx: &std::sync::Arc<commhal_cuda_rt::Context>,
        kind: Buffers,
        len: u64,
    ) -> Result<(u64, u64, CallerMem)> {
        Ok(match kind {
            Buffers::Vmm => {
                let i = PieceMapping::create(ctx, len, VMM_PIECE)?;
                let o = PieceMapping::create(ctx, len, VMM_PIECE)?;
                (
                    i.addr(),
                    o.addr(),
                    CallerMem::Vmm {
                        input: i,
                        _output: o,
                    },
                )
            }
            _ => {
                let i = DeviceBuffer::new(ctx, len)?;
                let o = DeviceBuffer::new(ctx, len)?;
                (
                    i.addr(),
                    o.addr(),
                    CallerMem::Plain {
                        input: i,
                        _output: o,
                    },
                )
            }
        })
    }

    fn write_input(&self, off: u64, bytes: &[u8]) -> Result<()> {
        match self {
            CallerMem::Plain { input, .. } => input.write(off, bytes)?,
            CallerMem::Vmm { input, .. } => input.write(off, bytes)?,
        }
        Ok(())
    }
}

struct Bench<'a> {
    gate: std::cell::RefCell<Gate>,
    args: &'a Args,
    boot: &'a dyn Bootstrap,
    comm: &'a Comm,
    nccl: Option<&'a Nccl>,
    /// Input and output: the caller buffers' pointers (`--buffers caller`, after
    /// `--buffer-offset`) or the Comm's registered regions.
    inp: u64,
    out: u64,
    /// The caller's allocations (`--buffers caller` or `vmm`), freed last.
    caller: Option<CallerMem>,
    /// The Comm's stream, as a caller's stream handle.
    stream: Stream,
    /// How the last commhal launch reached its buffers.
    path: std::cell::Cell<Option<BufferPath>>,
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

impl<'a> Bench<'a> {
    fn new(
        args: &'a Args,
        boot: &'a dyn Bootstrap,
        comm: &'a Comm,
        nccl: Option<&'a Nccl>,
    ) -> Result<Bench<'a>> {
        let ctx = comm.context();
        let (inp, out, caller) = match args.buffers {
            Buffers::Registered => (comm.input_addr(), comm.output_addr(), None),
            Buffers::Caller | Buffers::Vmm => {
                let len = comm.capacity() + args.buffer_offset;
                let (i, o, mem) = CallerMem::new(ctx, args.buffers, len)?;
                (i + args.buffer_offset, o + args.buffer_offset, Some(mem))
            }
        };
        // SAFETY: the Comm's stream outlives the Bench, which borrows the Comm.
        let stream = unsafe { Stream::borrowed(ctx, comm.stream().raw())? };
        let b = Bench {
            gate: std::cell::RefCell::new(Gate::new(ctx)?),
            args,
            boot,
            comm,
            nccl,
            inp,
            out,
            caller,
            stream,
            path: std::cell::Cell::new(None),
        };
        b.write_inputs()?;
        Ok(b)
    }

    /// Write the input pattern once, for the largest size (every size uses a prefix).
    fn write_inputs(&self) -> Result<()> {
        let cap_elems = self.comm.capacity() / self.args.dtype.size();
        let op = self.args.reduce_op();
        let input = check::input_bytes(self.args.dtype, op, self.comm.rank(), cap_elems);
        // every rank compiles the (type, op) module before the first launch, outside any
        // collective (see commhal_cuda_coll::kernels)
        self.comm.kernels().prepare(self.args.dtype, op)?;
        match &self.caller {
            Some(mem) => mem.write_input(self.args.buffer_offset, &input)?,
            None => self.comm.write_input(0, &input)?,
        }
        drop(input);
        self.boot.barrier()?;
        Ok(())
    }

    /// The caller-style buffers of a launch (NCCL's in-place layouts).
    fn call_bufs(&self, count: u64, in_place: bool) -> CallBufs {
        let es = self.args.dtype.size();
        let shift = u64::from(self.comm.rank()) * count * es;
        match (in_place, self.args.collective) {
            (false, _) => CallBufs {
                send: self.inp,
                recv: self.out,
            },
            (true, Collective::Allgather) => CallBufs {
                send: self.out + shift,
                recv: self.out,
            },
            (true, Collective::Reducescatter) => CallBufs {
                send: self.out,
                recv: self.out + shift,
            },
            (true, _) => CallBufs {
                send: self.out,
                recv: self.out,
            },
        }
    }

    /// `--p2p`: the all-to-all (`count` per peer) or the ring send/recv (`count`) as a
    /// group of sends and receives on the caller buffers.
    fn p2p_ops(&self, count: u64) -> Vec<P2pOp> {
        let (r, n, dtype) = (self.comm.rank(), self.comm.size(), self.args.dtype);
        let chunk = count * dtype.size();
        if self.args.collective == Collective::Sendrecv {
            return vec![
                P2pOp::Send {
                    buf: self.inp,
                    count,
                    dtype,
                    peer: (r + 1) % n,
                },
                P2pOp::Recv {
                    buf: self.out,
                    count,
                    dtype,
                    peer: (r + n - 1) % n,
                },
            ];
        }
        (0..n)
            .flat_map(|p| {
                let off = u64::from(p) * chunk;
                [
                    P2pOp::Send {
                        buf: self.inp + off,
                        count,
                        dtype,
                        peer: p,
                    },
                    P2pOp::Recv {
                        buf: self.out + off,
                        count,
                        dtype,
                        peer: p,
                    },
                ]
            })
            .collect()
    }

    fn launch(&self, which: Impl, count: u64, per: u64, in_place: bool) -> Result<()> {
        self.launch_root(which, count, per, in_place, self.args.common.root)
    }

    fn launch_root(
        &self,
        which: Impl,
        count: u64,
        per: u64,
        in_place: bool,
        root: u32,
    ) -> Result<()> {
        let a = self.args;
        let c = cli::launch_count(a.collective, count, per);
        match which {
            Impl::Commhal
                if a.p2p && matches!(a.collective, Collective::Alltoall | Collective::Sendrecv) =>
            {
                self.comm.p2p(&self.p2p_ops(c), &self.stream)
            }
            Impl::Commhal if a.buffers != Buffers::Registered => {
                let bufs = self.call_bufs(c, in_place);
                let path = self.comm.launch_on(
                    a.collective,
                    a.dtype,
                    a.reduce_op(),
                    c,
                    root,
                    bufs,
                    &self.stream,
                )?;
                self.path.set(Some(path));
                Ok(())
            }
            Impl::Commhal => {
                self.comm
                    .launch_rooted(a.collective, a.dtype, a.reduce_op(), c, root, in_place)
            }
            Impl::Nccl => {
                let n = self
                    .nccl
                    .ok_or_else(|| CollError::Nccl("comparison not initialised".into()))?;
                // SAFETY: the benchmark's input/output (the caller buffers or the
                // Comm's registered regions), sized for the largest size, alive while
                // the Bench lives; synchronised before they are freed.
                unsafe {
                    n.launch(
                        self.comm.stream(),
                        a.collective,
                        a.dtype,
                        a.reduce_op(),
                        c,
                        self.comm.rank(),
                        self.comm.size(),
                        root,
                        self.inp,
                        self.out,
                        in_place,
                    )
                }
            }
        }
    }

    /// Bytes of the output this rank checks (as after a launch with `root`), and its
    /// device address.
    fn output_region(&self, count: u64, per: u64, in_place: bool, root: u32) -> (u64, u64) {
        let a = self.args;
        let es = a.dtype.size();
        let len = check::checked_len(a.collective, a.dtype, self.comm.rank(), root, count, per);
        let off = if in_place && a.collective == Collective::Reducescatter {
            u64::from(self.comm.rank()) * per * es
        } else {
            0
        };
        (self.out + off, len)
    }

    /// Queue what makes the buffers ready for one checked run: restore in-place data,
    /// poison what the collective must overwrite.
    fn prepare(&self, count: u64, per: u64, in_place: bool) -> Result<()> {
        let es = self.args.dtype.size();
        let s = self.comm.stream();
        let (inp, out) = (self.inp, self.out);
        let full = count * es; // the whole output (all-gather) / input (reduce-scatter)
        // SAFETY: every range is inside the benchmark's input/output (count was
        // checked against capacity by the caller), alive until synchronised.
        unsafe {
            copy::memset_async(s, out, 0xff, full)?;
            if in_place {
                match self.args.collective {
                    Collective::Allreduce | Collective::Reducescatter | Collective::Reduce => {
                        copy::copy_async(s, out, inp, full)?
                    }
                    Collective::Allgather => {
                        let off = u64::from(self.comm.rank()) * per * es;
                        copy::copy_async(s, out + off, inp, per * es)?
                    }
                    // only the root's output holds data; the others stay poisoned
                    Collective::Broadcast => {
                        if self.comm.rank() == self.args.common.root {
                            copy::copy_async(s, out, inp, full)?
                        }
                    }
                    // no in-place variant (never asked for: `cell` skips it)
                    Collective::Alltoall | Collective::Sendrecv => {}
                }
            }
        }
        Ok(())
    }

    fn checked_run(&self, which: Impl, count: u64, per: u64, in_place: bool) -> Result<u64> {
        self.prepare(count, per, in_place)?;
        let a = self.args;
        let n = self.comm.size();
        // --cycle-roots: n launches, roots root+1, ..., root; a reduce's result stays in
        // the output of each rank that was root, so every rank checks as the root
        let check_root = if a.cycle_roots && a.collective.has_root() && !in_place {
            for k in 1..=n {
                self.launch_root(which, count, per, false, (a.common.root + k) % n)?;
            }
            if a.collective == Collective::Reduce {
                self.comm.rank()
            } else {
                a.common.root
            }
        } else {
            self.launch(which, count, per, in_place)?;
            a.common.root
        };
        self.comm.sync("the checked run")?;
        let (addr, len) = self.output_region(count, per, in_place, check_root);
        let mut host = vec![0u8; len as usize];
        if len > 0 {
            // SAFETY: [addr, addr+len) lies in this rank's output buffer.
            unsafe { copy::read(self.comm.context(), addr, &mut host)? };
        }
        let wrong = check::count_wrong(
            a.collective,
            a.dtype,
            a.reduce_op(),
            self.comm.rank(),
            self.comm.size(),
            check_root,
            count,
            per,
            &host,
        );
        // the ranks check different amounts (a reduce's root 1 GiB, the others nothing):
        // without this, the timed calls of a rank that checked nothing would wait for
        // the checking root in the call table, whose bound is the device wait bound
        // (10 s by default), and fail there
        self.boot.barrier()?;
        Ok(wrong)
    }

    /// µs per launch on this rank: the median over groups of [`cli::groups`]
    /// (`--batch`) of each group's elapsed time / its launches (graph: over replays).
    fn timed(&self, which: Impl, count: u64, per: u64, in_place: bool, iters: u32) -> Result<f64> {
        let ctx = self.comm.context();
        let s = self.comm.stream();
        let warm = self.args.common.warmup.min(iters.max(1));
        for _ in 0..warm {
            self.launch(which, count, per, in_place)?;
        }
        self.comm.sync("warm-up")?;
        self.boot.barrier()?;
        let mut times = Vec::new();
        if self.args.common.graphed() {
            let g = Graph::capture::<CollError>(s, || {
                for _ in 0..iters {
                    self.launch(which, count, per, in_place)?;
                }
                Ok(())
            })?;
            g.launch(s)?; // warm replay
            self.comm.sync("graph warm replay")?;
            self.boot.barrier()?;
            let reps = self.args.common.graph;
            let ev: Vec<Event> = (0..=reps)
                .map(|_| Event::new(ctx))
                .collect::<std::result::Result<_, _>>()?;
            ev[0].record(s)?;
            for e in &ev[1..] {
                g.launch(s)?;
                e.record(s)?;
            }
            self.comm.sync("graph replays")?;
            for w in ev.windows(2) {
                times.push(f64::from(w[1].elapsed_ms_since(&w[0])?) * 1000.0 / f64::from(iters));
            }
        } else {
            // one event before the first group and one after each group
            let groups = cli::groups(iters, self.args.batch);
            let ev: Vec<Event> = (0..=groups.len())
                .map(|_| Event::new(ctx))
                .collect::<std::result::Result<_, _>>()?;
            let mut gate = self.gate.borrow_mut();
            let gated = self.args.gate != 0 && iters <= MAX_GATED_ITERS;
            if gated {
                gate.close(s)?;
            }
            let queued = (|| -> Result<()> {
                ev[0].record(s)?;
                for (e, &k) in ev[1..].iter().zip(&groups) {
                    for _ in 0..k {
                        self.launch(which, count, per, in_place)?;
                    }
                    e.record(s)?;
                }
                Ok(())
            })();
            if gated {
                gate.open(); // always, so an error never leaves the stream blocked
            }
            queued?;
            self.comm.sync("timed iterations")?;
            for (w, &k) in ev.windows(2).zip(&groups) {
                times.push(f64::from(w[1].elapsed_ms_since(&w[0])?) * 1000.0 / f64::from(k));
            }
        }
        Ok(median(&mut times))
    }

    fn cell(
        &self,
        which: Impl,
        bytes: u64,
        count: u64,
        per: u64,
        in_place: bool,
        iters: u32,
    ) -> Result<Cell> {
        if in_place && !self.args.collective.in_place_supported() {
            // same decision on every rank (it depends on the arguments only)
            return Ok(Cell {
                wrong: -1,
                ..Cell::default()
            });
        }
        let wrong = if self.args.common.check != 0 {
            self.checked_run(which, count, per, in_place)? as i64
        } else {
            -1
        };
        let t = self.timed(which, count, per, in_place, iters)?;
        // the ranks' medians combined as `-a` says (default: mean); sum of wrong
        let mine: Vec<u8> = t
            .to_le_bytes()
            .into_iter()
            .chain(wrong.to_le_bytes())
            .collect();
        let all = self.boot.all_gather(&mine)?;
        let mut ts = Vec::with_capacity(all.len());
        let mut sum_w = 0i64;
        for b in &all {
            if b.len() != 16 {
                return Err(CollError::invalid("a rank sent a malformed timing"));
            }
            ts.push(f64::from_le_bytes(b[..8].try_into().unwrap_or_default()));
            let w = i64::from_le_bytes(b[8..].try_into().unwrap_or_default());
            sum_w = if w < 0 || sum_w < 0 { -1 } else { sum_w + w };
        }
        let time_us = combine_ranks(&ts, self.args.average);
        let (algbw, busbw) =
            cli::bandwidths(self.args.collective, bytes, time_us, self.comm.size());
        Ok(Cell {
            time_us,
            algbw,
            busbw,
            wrong: sum_w,
        })
    }
}

/// The ranks' times of one cell combined as nccl-tests' `-a`: 0 rank 0's, 1 the mean,
/// 2 the min, 3 the max.
pub(crate) fn combine_ranks(ts: &[f64], how: u8) -> f64 {
    match how {
        0 => ts.first().copied().unwrap_or(0.0),
        2 => ts.iter().copied().fold(f64::INFINITY, f64::min),
        3 => ts.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        _ => ts.iter().sum::<f64>() / ts.len().max(1) as f64,
    }
}

fn header(args: &Args, n: u32, what: &str) {
    println!("#");
    println!(
        "# {what}: {} {} ranks={n} graph={} batch={}",
        args.collective.name(),
        args.dtype.table_name(),
        args.common.graphed(),
        args.batch
    );
    println!(
        "#                                                              out-of-place                       in-place"
    );
    println!(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
    );
    println!(
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
    );
}

/// nccl-tests' parameter line and `# Using devices` block (one line per rank: pid,
/// host, CUDA device ordinal and name). Gathered from every rank: call it on all.
fn nccl_preamble(args: &Args, boot: &dyn Bootstrap, comm: &Comm) -> Result<Vec<String>> {
    const HOST: usize = 64;
    const NAME: usize = 96;
    let fixed = |s: String, len: usize| {
        let mut b = s.into_bytes();
        b.truncate(len);
        b.resize(len, 0);
        b
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let mut rec = std::process::id().to_le_bytes().to_vec();
    rec.extend(comm.context().ordinal().to_le_bytes());
    rec.extend(fixed(host, HOST));
    rec.extend(fixed(comm.context().name().unwrap_or_default(), NAME));
    let all = boot.all_gather(&rec)?;
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    let mut v = vec![
        format!(
            "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} agg iters: 1 validation: {} graph: {}",
            args.common.min_bytes,
            args.common.max_bytes,
            args.common.step_factor,
            args.common.warmup,
            args.common.iters,
            u32::from(args.common.check != 0),
            args.common.graph
        ),
        "#".into(),
        "# Using devices".into(),
    ];
    for (rank, b) in all.iter().enumerate() {
        if b.len() != 8 + HOST + NAME {
            return Err(CollError::invalid("a rank sent a malformed device record"));
        }
        let word = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default());
        v.push(format!(
            "#  Rank {rank:2} Group  0 Pid {:6} on {:>10} device {:2} {}",
            word(0),
            text(&b[8..8 + HOST]),
            word(4),
            text(&b[8 + HOST..])
        ));
    }
    v.push("#".into());
    Ok(v)
}

/// nccl-tests' footer of a table: wrong elements, and the mean bus bandwidth over the
/// cells that ran (out-of-place and in-place of every size).
fn nccl_footer(rows: &[Row]) -> [String; 3] {
    let cells = || rows.iter().flat_map(|r| [&r.oop, &r.ip]);
    let wrong: i64 = cells().map(|c| c.wrong.max(0)).sum();
    let ran: Vec<f64> = cells()
        .filter(|c| c.time_us > 0.0)
        .map(|c| c.busbw)
        .collect();
    let avg = if ran.is_empty() {
        0.0
    } else {
        ran.iter().sum::<f64>() / ran.len() as f64
    };
    [
        format!(
            "# Out of bounds values : {wrong} {}",
            if wrong > 0 { "FAILED" } else { "OK" }
        ),
        format!("# Avg bus bandwidth    : {avg:.4} "),
        "#".into(),
    ]
}

fn fmt_row(args: &Args, r: &Row) -> String {
    let c = |x: &Cell| {
        format!(
            "{:8.2} {:7.2} {:7.2} {:6}",
            x.time_us, x.algbw, x.busbw, x.wrong
        )
    };
    format!(
        "{:12} {:13} {:>9} {:>7} {:>7} {} {}",
        r.bytes,
        r.count,
        args.dtype.table_name(),
        match args.collective.redop() {
            "sum" => args.reduce_op().name(),
            none => none,
        },
        if args.collective.has_root() {
            i64::from(args.common.root)
        } else {
            -1
        },
        c(&r.oop),
        c(&r.ip)
    )
}

/// Run the whole benchmark on this rank. Returns the rows (every rank) and whether any
/// result was wrong. A comparison library that does not open or join on some rank is
/// the same error on every rank ([`Nccl::init`]).
pub fn run(args: &Args, boot: &dyn Bootstrap, comm: &Comm) -> Result<Rows> {
    let n = comm.size();
    let rank0 = comm.rank() == 0;
    if args.collective.has_root() && args.common.root >= n {
        return Err(CollError::invalid(format!(
            "--root {} is not a rank ({n} ranks)",
            args.common.root
        )));
    }
    let nccl = match args.common.comparison() {
        Some(which) => {
            comm.context().bind()?;
            Some(Nccl::init(boot, &which)?)
        }
        None => None,
    };
    let compared = nccl.as_ref().map(|x| x.info().clone());
    let their_name = compared
        .as_ref()
        .map_or_else(String::new, |c| c.library.clone());
    let print = rank0 && args.print_tables;
    let preamble = nccl_preamble(args, boot, comm)?;
    let b = Bench::new(args, boot, comm, nccl.as_ref())?;
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut any_wrong = false;
    if print {
        let t = comm.tuning();
        println!(
            "# commhal-gpu-bench: {} ranks, ll_max {} B, {} threads, <= {} blocks, device wait bound {:?}",
            n, t.ll_max, t.threads, t.max_blocks, t.device_timeout
        );
        println!(
            "# links: {} (regions from {}; COMMHAL_BACKENDS / COMMHAL_GPU_PATH)",
            comm.links(),
            comm.memory_backend()
        );
        println!("# buffers: {}", buffers_line(args));
        if let Some(c) = &compared {
            println!(
                "# compared with: {} ({}, ncclGetVersion {})",
                c.library,
                c.file,
                c.version_code
                    .map_or_else(|| "failed".to_string(), |v| v.to_string())
            );
        }
        println!(
            "# thresholds: push_min {} B, rs_push {}..={} B, ll_chunk_max {} B (bcast / reduce {} B), bcast_sf_min {} B, bcast_chain_min {} B, reduce_chain_min {} B, all-gather narrow grid from {} B, ring_min AR {} / AG {} / RS {} B (u64::MAX: never), unroll chain {} / ring {} / reduce chain {}, LL63 max bcast {} / reduce {} B, all-reduce {}..={} B (one shot to {} B), copy engines from bcast (2 ranks) {} / reduce (2 ranks) {} / sendrecv {} / all-reduce tail (3+ ranks) {} B; from {}",
            t.push_min,
            t.rs_push_min,
            t.rs_push_max,
            t.ll_chunk_max,
            t.rooted_ll_max,
            t.bcast_sf_min,
            t.bcast_chain_min,
            t.reduce_chain_min,
            t.ag_narrow_min,
            t.ar_ring_min,
            t.ag_ring_min,
            t.rs_ring_min,
            t.chain_unroll,
            t.ring_unroll,
            t.reduce_chain_unroll,
            t.bcast_ll63_max,
            t.reduce_ll63_max,
            t.ar_ll63_min,
            t.ar_ll63_max,
            t.ar_ll63_oneshot_max,
            t.bcast_ce_min,
            t.reduce_ce_min,
            t.sendrecv_ce_min,
            t.ar_ce_min,
            provenance(comm, args)
        );
        for line in &preamble {
            println!("{line}");
        }
        header(args, n, "commhal");
    }
    for bytes in cli::sizes(
        args.common.min_bytes,
        args.common.max_bytes,
        args.common.step_factor,
    ) {
        let (count, per) = cli::counts(args.collective, bytes, args.dtype, n);
        if count == 0 {
            continue;
        }
        let size_bytes = count * args.dtype.size();
        let iters = cli::iters_for(size_bytes, args.common.iters, args.max_bytes_per_size);
        let mut impls = vec![Impl::Commhal];
        if nccl.is_some() {
            impls.push(Impl::Nccl);
        }
        for which in impls {
            let oop = b.cell(which, size_bytes, count, per, false, iters)?;
            let ip = b.cell(which, size_bytes, count, per, true, iters)?;
            // -1 = not checked (-c 0, or no in-place variant)
            any_wrong |= oop.wrong > 0 || ip.wrong > 0;
            let kernel = if which == Impl::Commhal {
                let c = cli::launch_count(args.collective, count, per);
                let (k, g, t) =
                    comm.plan_for(args.collective, args.dtype, c, args.common.graphed());
                match b.path.get() {
                    Some(p) => format!("{k} {g}x{t} {}", p.name()),
                    None => format!("{k} {g}x{t}"),
                }
            } else {
                their_name.clone()
            };
            let row = Row {
                implementation: if which == Impl::Commhal {
                    "commhal".into()
                } else {
                    their_name.clone()
                },
                bytes: size_bytes,
                count,
                iters,
                oop,
                ip,
                kernel,
            };
            if print {
                let tag = if which == Impl::Commhal {
                    String::new()
                } else {
                    format!("   [{their_name}]")
                };
                println!("{}{tag}", fmt_row(args, &row));
            }
            if which == Impl::Commhal {
                ours.push(row)
            } else {
                theirs.push(row)
            }
        }
    }
    comm.sync("the end of the benchmark")?;
    if print {
        // the compared library's interleaved rows are not in commhal's footer: theirs
        // has its own
        for line in nccl_footer(&ours) {
            println!("{line}");
        }
    }
    if print && !theirs.is_empty() {
        header(args, n, &their_name);
        for r in &theirs {
            println!("{}", fmt_row(args, r));
        }
        for line in nccl_footer(&theirs) {
            println!("{line}");
        }
        println!("#");
        println!("# ratio {their_name} time / commhal time (> 1: commhal faster)");
        println!("#       size   out-of-place   in-place");
        let ratio = |t: &Cell, o: &Cell| {
            if t.time_us > 0.0 && o.time_us > 0.0 {
                format!("{:.2}", t.time_us / o.time_us)
            } else {
                "-".to_string() // not run (no in-place variant)
            }
        };
        for (o, t) in ours.iter().zip(&theirs) {
            println!(
                "{:12} {:>14} {:>10}",
                o.bytes,
                ratio(&t.oop, &o.oop),
                ratio(&t.ip, &o.ip)
            );
        }
    }
    drop(nccl);
    Ok(Rows {
        ours,
        theirs,
        compared,
        wrong: any_wrong,
    })
}

/// What the header says about the buffers (`--buffers`).
fn buffers_line(args: &Args) -> String {
    match args.buffers {
        Buffers::Caller => format!(
            "the caller's: input and output from cuMemAlloc by the benchmark{}, passed as pointers with a stream (commhal maps them per call through CUDA IPC, or stages them; a compared library gets the same pointers)",
            if args.buffer_offset > 0 {
                format!(", both {} bytes into their allocations", args.buffer_offset)
            } else {
                String::new()
            }
        ),
        Buffers::Vmm => format!(
            "the caller's: input and output from cuMem VMM memory in {} MiB pieces mapped back to back (as PyTorch's expandable segments){}, passed as pointers with a stream (commhal maps the pieces per call through their POSIX fds, or stages them; a compared library gets the same pointers)",
            VMM_PIECE >> 20,
            if args.buffer_offset > 0 {
                format!(", both {} bytes into their allocations", args.buffer_offset)
            } else {
                String::new()
            }
        ),
        Buffers::Registered => {
            "the communicator's registered regions (a compared library gets the same pointers)"
                .to_string()
        }
    }
}

/// Where `comm`'s thresholds come from (the same resolution `Comm::new` made).
fn provenance(comm: &Comm, args: &Args) -> String {
    let gpu = comm.context().name().unwrap_or_default();
    let timeout = Duration::from_millis(args.wait_ms());
    match tuning::resolve(&gpu, comm.size(), 1, args.common.ll_max, timeout) {
        Ok((_, p)) => p.to_string(),
        Err(e) => format!("? ({e})"),
    }
}

/// What one rank's benchmark produced.
#[derive(Debug)]
pub struct Outcome {
    /// commhal's rows.
    pub ours: Vec<Row>,
    /// The compared library's rows (empty without `--compare` / `--compare-lib`).
    pub theirs: Vec<Row>,
    /// The compared library.
    pub compared: Option<LibInfo>,
    /// Whether any result was wrong.
    pub wrong: bool,
    /// This rank.
    pub rank: u32,
    /// Ranks.
    pub nranks: u32,
    /// The driver's device name.
    pub device: String,
    /// Tuning in effect.
    pub tuning: Tuning,
    /// The links the collectives ran over (the `# links:` header line).
    pub links: String,
}

impl Outcome {
    /// This rank's outcome on `comm` with these rows.
    fn of(comm: &Comm, rows: Rows) -> Outcome {
        Outcome {
            ours: rows.ours,
            theirs: rows.theirs,
            compared: rows.compared,
            wrong: rows.wrong,
            rank: comm.rank(),
            nranks: comm.size(),
            device: comm.context().name().unwrap_or_default(),
            tuning: comm.tuning(),
            links: comm.links(),
        }
    }
}

/// Bytes of input and of output the benchmark registers: the largest size's buffers
/// (`count` is the whole buffer for every collective: all-gather's output,
/// reduce-scatter's and all-to-all's input).
pub fn capacity_for(args: &Args, n: u32) -> u64 {
    let (count, _) = cli::counts(args.collective, args.common.max_bytes, args.dtype, n);
    count * args.dtype.size()
}

/// The whole benchmark on this rank: pick the GPU, set up the [`Comm`], [`run`],
/// write `--json` (rank 0), then a barrier so no rank leaves early.
pub fn run_rank(args: &Args, boot: &dyn Bootstrap) -> Result<Outcome> {
    let device = local_device(boot)?;
    let n = boot.size();
    let comm = Comm::with_links(
        boot,
        device,
        capacity_for(args, n),
        args.common.ll_max,
        Duration::from_millis(args.wait_ms()),
        None,
        args.backends.as_deref(),
    )?;
    if let Some(fault) = args.common.fault() {
        return fault_check(args, &comm, n, fault);
    }
    let mut out = Outcome::of(&comm, Rows::empty());
    // `-N`: the whole run again, each cycle printed; the outcome keeps the last rows
    for _cycle in 0..args.common.cycles.max(1) {
        for a in matrix(args) {
            let mut rows = run(&a, boot, &comm)?;
            rows.wrong |= out.wrong;
            out = Outcome::of(&comm, rows);
        }
    }
    if out.rank == 0
        && let Some(path) = &args.json
    {
        let text = serde_json::to_string_pretty(&json_doc(args, &out))
            .map_err(|e| CollError::invalid(format!("JSON: {e}")))?;
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("commhal-gpu-bench: writing {}: {e}", path.display());
        }
    }
    boot.barrier()?;
    Ok(out)
}

/// The runs of `--matrix`: every datatype, with every operator where the collective
/// reduces; else `args` alone.
fn matrix(args: &Args) -> Vec<Args> {
    use clap::ValueEnum;
    if !args.matrix {
        return vec![args.clone()];
    }
    let ops: &[cli::OpName] = if args.collective.redop() == "sum" {
        &cli::OpName::ALL
    } else {
        &[cli::OpName::Sum]
    };
    let dtypes = if args.dtypes.is_empty() {
        cli::Dtype::value_variants()
    } else {
        &args.dtypes[..]
    };
    dtypes
        .iter()
        .flat_map(|&dtype| {
            ops.iter().map(move |&op| Args {
                dtype,
                op,
                ..args.clone()
            })
        })
        .collect()
}

/// How long after its abort an aborted rank's error may come: the watchdog polls the
/// flag every 2 ms, its stream write lands while the kernels spin, and they read the
/// error word every 1024 spins — milliseconds; a second is the bound.
pub const ABORT_BOUND: Duration = Duration::from_secs(1);

/// The bound on a survivor's error in the dead- and stopped-peer checks: about the
/// device wait bound (twice it, and 5 s for launch and sync).
pub fn fault_wait_bound(device_timeout: Duration) -> Duration {
    device_timeout * 2 + Duration::from_secs(5)
}

/// How long `--stop-rank`'s rank stays stopped: past [`fault_wait_bound`], so every
/// other rank has reported (or is wrong) before it runs again.
pub fn stop_duration(device_timeout: Duration) -> Duration {
    fault_wait_bound(device_timeout) + Duration::from_secs(2)
}

/// Whether a fault check's error is the expected one: a device error code the fault
/// may end the waits with, `took` at most `bound` — the time from the launch (for
/// `--abort-after-ms`, from the abort; `None` when the error came before it).
fn expected_error(fault: Fault, res: &Result<()>, took: Option<Duration>, bound: Duration) -> bool {
    use commhal_cuda_coll::layout::{ERR_PACKET_TIMEOUT, ERR_PEER_GONE, ERR_WAIT_TIMEOUT};
    let codes: &[u32] = match fault {
        // the watchdog when the bootstrap sees the rank go, else the waits' own bound
        Fault::DeadRank(_) => &[ERR_WAIT_TIMEOUT, ERR_PACKET_TIMEOUT, ERR_PEER_GONE],
        // the process lives on, silent: only the waits' own bound ends them
        Fault::StopRank(_) => &[ERR_WAIT_TIMEOUT, ERR_PACKET_TIMEOUT],
        // the watchdog, on this communicator's abort flag
        Fault::AbortAfter(_) => &[ERR_PEER_GONE],
    };
    matches!(res, Err(CollError::Device { code, .. }) if codes.contains(code))
        && took.is_some_and(|t| t <= bound)
}

/// The robustness checks (`--dead-rank`, `--stop-rank`, `--abort-after-ms`): one
/// collective of `args.min_bytes` (whatever path the thresholds pick: kernels or copy
/// engines) that cannot complete, and what each rank's `sync` returns.
///
/// * `--dead-rank R`: rank R exits the process after the setup (no teardown, as a
///   crash); every other rank queues the collective and syncs. Expected: a device
///   error (the watchdog's peer-gone, or a wait timeout) within
///   [`fault_wait_bound`] of the launch.
/// * `--stop-rank R`: rank R stops itself ([`crate::hang::stop_for`], SIGSTOP) for
///   [`stop_duration`], then exits; the others as for a dead rank. Expected: a
///   device wait timeout (nothing tells them the rank hangs) within the same bound.
/// * `--abort-after-ms T`: every rank but 0 queues the collective, which rank 0
///   never joins, and a second thread calls [`Comm::abort`] T ms later; rank 0 aborts
///   at T ms too and polls `sync` on its empty stream. Expected on every rank: the
///   abort's error (the watchdog's code) within [`ABORT_BOUND`] of the abort.
///
/// A host-side sync timeout, which leaves the stream blocked, is never the expected
/// error; `wrong` is set on a rank whose error was not the expected one. No barrier at
/// the end (a dead or stopped rank never reaches one).
fn fault_check(args: &Args, comm: &Comm, n: u32, fault: Fault) -> Result<Outcome> {
    let flag = fault.flag();
    if n < 2 {
        return Err(CollError::invalid(format!(
            "{flag}: a fault check needs at least 2 ranks (start them with `commhal launch -n N`)"
        )));
    }
    if let Fault::DeadRank(r) | Fault::StopRank(r) = fault
        && r >= n
    {
        return Err(CollError::invalid(format!(
            "{flag}: {r} is not a rank of this {n}-rank run"
        )));
    }
    let device_timeout = comm.tuning().device_timeout;
    if let Fault::AbortAfter(t) = fault
        && t >= device_timeout
    {
        return Err(CollError::invalid(format!(
            "{flag}: the abort must come before the device wait bound ({} ms) ends the waits by itself",
            device_timeout.as_millis()
        )));
    }
    let me = comm.rank();
    let mut out = Outcome::of(comm, Rows::empty());
    let (count, per) = cli::counts(args.collective, args.common.min_bytes, args.dtype, n);
    let launch_count = cli::launch_count(args.collective, count, per);
    let (path, _, _) = comm.plan(args.collective, args.dtype, launch_count);
    let call = format!(
        "{} of {} B ({path})",
        args.collective.name(),
        count * args.dtype.size()
    );
    let say = |line: String| {
        use std::io::Write;
        println!("{line}");
        let _ = std::io::stdout().flush();
    };
    let launch_and_sync = || {
        comm.launch_rooted(
            args.collective,
            args.dtype,
            args.reduce_op(),
            launch_count,
            args.common.root,
            false,
        )
        .and_then(|()| comm.sync(&format!("the {flag} check")))
    };
    let wait_bound = fault_wait_bound(device_timeout);
    let (what, res, took, bound) = match fault {
        Fault::DeadRank(r) if r == me => {
            say(format!(
                "# rank {me}: exiting without calling the collective ({flag})"
            ));
            // as a crash would: no teardown, so the peers see a failure, not a departure
            std::process::exit(0);
        }
        Fault::StopRank(r) if r == me => {
            let stop = stop_duration(device_timeout);
            say(format!(
                "# rank {me}: stopping (SIGSTOP) for {:.1} s without calling the collective ({flag})",
                stop.as_secs_f64()
            ));
            let gone = crate::hang::stop_for(stop)
                .map_err(|e| CollError::invalid(format!("{flag}: stopping this process: {e}")))?;
            say(format!(
                "# rank {me}: continued after {:.1} s; exiting",
                gone.as_secs_f64()
            ));
            // as the dead rank: the peers have reported; no teardown
            std::process::exit(0);
        }
        Fault::DeadRank(r) | Fault::StopRank(r) => {
            let gone = if matches!(fault, Fault::DeadRank(_)) {
                "gone"
            } else {
                "stopped"
            };
            let t0 = std::time::Instant::now();
            let res = launch_and_sync();
            let took = t0.elapsed();
            let what = format!("rank {me}: {call} with rank {r} {gone}");
            (what, res, Some(took), wait_bound)
        }
        Fault::AbortAfter(t) if me == 0 => {
            std::thread::sleep(t);
            let at = std::time::Instant::now();
            comm.abort(&flag);
            // nothing queued: the abort shows in the error word the watchdog writes
            let res = loop {
                let r = comm.sync(&format!("the {flag} check"));
                if r.is_err() || at.elapsed() > ABORT_BOUND * 2 {
                    break r;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            let what = format!(
                "rank {me}: never calls the {call}; aborted after {} ms, then syncs",
                t.as_millis()
            );
            (what, res, Some(at.elapsed()), ABORT_BOUND)
        }
        Fault::AbortAfter(t) => {
            let (res, done, at) = std::thread::scope(|s| {
                let aborter = s.spawn(|| {
                    std::thread::sleep(t);
                    let at = std::time::Instant::now();
                    comm.abort(&flag);
                    at
                });
                let res = launch_and_sync();
                let done = std::time::Instant::now();
                (res, done, aborter.join())
            });
            let at = at
                .map_err(|_| CollError::invalid(format!("{flag}: the aborting thread panicked")))?;
            let what = format!(
                "rank {me}: {call}, which rank 0 never joins, aborted after {} ms",
                t.as_millis()
            );
            (what, res, done.checked_duration_since(at), ABORT_BOUND)
        }
    };
    let when = match (took, fault) {
        (None, _) => "BEFORE the abort".to_string(),
        (Some(d), Fault::AbortAfter(_)) => format!("{:.3} s after the abort", d.as_secs_f64()),
        (Some(d), _) => format!("after {:.3} s", d.as_secs_f64()),
    };
    let ok = expected_error(fault, &res, took, bound);
    match res {
        Err(e) if ok => say(format!("# {what}: error {when}, as expected: {e}")),
        Err(e) => {
            out.wrong = true;
            say(format!(
                "# {what}: error {when}, NOT the expected one within {:.1} s: {e}",
                bound.as_secs_f64()
            ));
        }
        Ok(()) => {
            out.wrong = true;
            say(format!("# {what}: NO ERROR {when}"));
        }
    }
    Ok(out)
}

/// The JSON document of a run (what `--json` writes): the links the collectives ran
/// over and whose buffers they ran on, commhal's rows under `commhal`, the compared
/// library (label, file, version code; null without one) under
/// `compared_with` and its rows under `compared`.
pub fn json_doc(args: &Args, out: &Outcome) -> serde_json::Value {
    serde_json::json!({
        "collective": args.collective,
        "dtype": args.dtype,
        "nranks": out.nranks,
        "graph": args.common.graphed(),
        "graph_launches": args.common.graph,
        "average": args.average,
        "batch": args.batch,
        "device": out.device,
        "links": out.links,
        "buffers": args.buffers,
        "tuning": format!("{:?}", out.tuning),
        "commhal": out.ours,
        "compared_with": out.compared,
        "compared": out.theirs,
    })
}

/// Largest all-reduce the tuner times with the LL kernel.
pub const TUNE_LL_MAX: u64 = 4 << 20;
/// Largest per-rank chunk the tuner times with the LL all-gather / reduce-scatter.
pub const TUNE_LL_CHUNK_MAX: u64 = 1 << 20;
/// Smallest all-reduce the tuner times with the push kernel.
pub const TUNE_PUSH_MIN: u64 = 1 << 20;
/// Smallest size the tuner times with the ring and chain kernels (below, their
/// per-round flags cost more than they can win).
pub const TUNE_RING_MIN: u64 = 1 << 20;

/// One kernel choice the tuner times.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    name: &'static str,
    /// The kernel it must plan (`None`: the selector's own choice — the copy engines
    /// for the candidate named "ce", a kernel for any other).
    kernel: Option<Kernel>,
    forced: Forced,
    /// Whether it runs at (total bytes, per-rank chunk bytes).
    applies: fn(u64, u64) -> bool,
}

/// The collectives `commhal tune` sweeps by default (the ones with a choice).
pub const TUNED: [Collective; 6] = [
    Collective::Allreduce,
    Collective::Allgather,
    Collective::Reducescatter,
    Collective::Broadcast,
    Collective::Reduce,
    Collective::Sendrecv,
];

/// The candidates of `coll` on `n` ranks, from the small-message kernel to the large
/// one (empty: nothing to choose).
fn candidates(coll: Collective, n: u32) -> Vec<Candidate> {
    // rings and chains off unless the candidate is one, so every candidate runs the
    // kernel it names whatever the file says
    let f = Forced {
        bcast_chain_min: Some(0),
        reduce_chain_min: Some(0),
        ar_ring_min: Some(0),
        ag_ring_min: Some(0),
        rs_ring_min: Some(0),
        rs_push_min: Some(0),
        reduce_all_max: Some(0),
        bcast_ll63_max: Some(0),
        reduce_ll63_max: Some(0),
        bcast_ce_min: Some(0),
        sendrecv_ce_min: Some(0),
        reduce_ce_min: Some(0),
        ar_ce_min: Some(0),
        ..Forced::default()
    };
    // the copy engines against whatever kernel the file picks (the last candidate)
    let ce_or_not = || {
        let ce = |min| Forced {
            bcast_ce_min: Some(min),
            sendrecv_ce_min: Some(min),
            ..Forced::default()
        };
        vec![
            Candidate {
                name: "kernels",
                kernel: None,
                forced: ce(0),
                applies: |_, _| true,
            },
            Candidate {
                name: "ce",
                kernel: None,
                forced: ce(1),
                applies: |_, _| true,
            },
        ]
    };
    // broadcast / reduce: the LL16 kernel first, up to the largest chunk the tuner times
    let ll16 = |kernel| Candidate {
        name: "ll16",
        kernel: Some(kernel),
        forced: Forced {
            ll_max: Some(TUNE_LL_CHUNK_MAX),
            ll_chunk_max: Some(TUNE_LL_CHUNK_MAX),
            rooted_ll_max: Some(TUNE_LL_CHUNK_MAX),
            ..f
        },
        applies: |b, _| b > 0 && b <= TUNE_LL_CHUNK_MAX && b.is_multiple_of(8),
    };
    let bcast_ll63 = Candidate {
        name: "ll63",
        kernel: Some(Kernel::BroadcastLl63),
        forced: Forced {
            bcast_ll63_max: Some(u64::MAX),
            ll_chunk_max: Some(0),
            ..f
        },
        applies: |b, _| b >= 16 && b.is_multiple_of(16),
    };
    // the 2-rank broadcast / reduce: the copy engines last, from the chains' sizes
    let ce_last = |forced| Candidate {
        name: "ce",
        kernel: None,
        forced,
        applies: |b, _| b >= TUNE_RING_MIN && b.is_multiple_of(16),
    };
    let direct = Candidate {
        name: "direct",
        kernel: Some(Kernel::Broadcast),
        // ll_chunk_max 0: small broadcasts would otherwise take the LL kernel.
        forced: Forced {
            bcast_sf_min: Some(u64::MAX),
            ll_chunk_max: Some(0),
            ..f
        },
        applies: |_, _| true,
    };
    match coll {
        // 2 ranks: one bulk kernel, LL63's window above LL16, the copy engines last
        Collective::Broadcast if n == 2 => vec![
            ll16(Kernel::BroadcastLl),
            direct,
            bcast_ll63,
            ce_last(Forced {
                bcast_ce_min: Some(1),
                ..f
            }),
        ],
        Collective::Sendrecv => ce_or_not(),
        Collective::Allreduce => {
            let ring = Candidate {
                name: "ring",
                kernel: Some(Kernel::AllreduceRing),
                forced: Forced {
                    ll_max: Some(0),
                    push_min: Some(0),
                    ar_ring_min: Some(1),
                    ..f
                },
                applies: |b, _| b >= TUNE_RING_MIN && b.is_multiple_of(16),
            };
            let mut cands = vec![
                Candidate {
                    name: "ll",
                    kernel: Some(Kernel::AllreduceLl),
                    forced: Forced {
                        ll_max: Some(TUNE_LL_MAX),
                        push_min: Some(0),
                        ..f
                    },
                    applies: |b, _| b <= TUNE_LL_MAX && b.is_multiple_of(8),
                },
                Candidate {
                    name: "two-shot",
                    kernel: Some(Kernel::Allreduce2Shot),
                    forced: Forced {
                        ll_max: Some(0),
                        push_min: Some(0),
                        ..f
                    },
                    applies: |_, _| true,
                },
                Candidate {
                    name: "push",
                    kernel: Some(Kernel::AllreducePush),
                    forced: Forced {
                        ll_max: Some(0),
                        push_min: Some(1),
                        ..f
                    },
                    applies: |b, _| b >= TUNE_PUSH_MIN,
                },
                ring,
            ];
            if n >= 3 {
                // last: the ring with the copy engines' all-gather tail
                cands.push(Candidate {
                    name: "ce",
                    kernel: Some(Kernel::AllreduceRingHead),
                    forced: Forced {
                        ar_ce_min: Some(1),
                        ..ring.forced
                    },
                    ..ring
                });
            }
            cands
        }
        Collective::Allgather | Collective::Reducescatter => {
            let gather = coll == Collective::Allgather;
            let (ll, direct, ring) = if gather {
                (
                    Kernel::AllgatherLl,
                    Kernel::Allgather,
                    Kernel::AllgatherRing,
                )
            } else {
                (
                    Kernel::ReducescatterLl,
                    Kernel::Reducescatter,
                    Kernel::ReducescatterRing,
                )
            };
            let mut cands = vec![
                Candidate {
                    name: "ll",
                    kernel: Some(ll),
                    forced: Forced {
                        ll_max: Some(TUNE_LL_CHUNK_MAX),
                        ll_chunk_max: Some(TUNE_LL_CHUNK_MAX),
                        ..f
                    },
                    applies: |_, c| c > 0 && c <= TUNE_LL_CHUNK_MAX && c.is_multiple_of(8),
                },
                Candidate {
                    name: "direct",
                    kernel: Some(direct),
                    forced: Forced {
                        ll_chunk_max: Some(0),
                        ..f
                    },
                    applies: |_, c| c > 0,
                },
                Candidate {
                    name: "ring",
                    kernel: Some(ring),
                    forced: Forced {
                        ll_chunk_max: Some(0),
                        ag_ring_min: if gather { Some(1) } else { Some(0) },
                        rs_ring_min: if gather { Some(0) } else { Some(1) },
                        ..f
                    },
                    applies: |b, c| b >= TUNE_RING_MIN && c.is_multiple_of(16),
                },
            ];
            if !gather {
                cands.push(Candidate {
                    name: "push",
                    kernel: Some(Kernel::ReducescatterPush),
                    forced: Forced {
                        ll_chunk_max: Some(0),
                        rs_push_min: Some(1),
                        rs_push_max: Some(u64::MAX),
                        ..f
                    },
                    applies: |b, c| b >= TUNE_PUSH_MIN && c.is_multiple_of(16),
                });
            }
            cands
        }
        Collective::Broadcast if n >= 3 => vec![
            ll16(Kernel::BroadcastLl),
            direct,
            Candidate {
                name: "scatter-forward",
                kernel: Some(Kernel::BroadcastSf),
                forced: Forced {
                    bcast_sf_min: Some(0),
                    ll_chunk_max: Some(0),
                    ..f
                },
                applies: |b, _| b >= 16,
            },
            Candidate {
                name: "chain",
                kernel: Some(Kernel::BroadcastChain),
                forced: Forced {
                    bcast_chain_min: Some(1),
                    ll_chunk_max: Some(0),
                    ..f
                },
                applies: |b, _| b >= TUNE_RING_MIN && b.is_multiple_of(16),
            },
            // last: a window above the LL16 sizes, derived apart (tune::rooted_windows)
            bcast_ll63,
        ],
        Collective::Reduce => {
            let mut cands = vec![ll16(Kernel::ReduceLl)];
            if n >= 3 {
                cands.push(Candidate {
                    name: "all",
                    kernel: Some(Kernel::ReduceAll),
                    forced: Forced {
                        ll_chunk_max: Some(0),
                        reduce_all_max: Some(u64::MAX),
                        ..f
                    },
                    applies: |_, _| true,
                });
            }
            cands.push(Candidate {
                name: "worker",
                kernel: Some(Kernel::Reduce),
                // ll_chunk_max 0: small reduces would otherwise take the LL kernel.
                forced: Forced {
                    ll_chunk_max: Some(0),
                    ..f
                },
                applies: |_, _| true,
            });
            cands.push(Candidate {
                name: "chain",
                kernel: Some(Kernel::ReduceChain),
                forced: Forced {
                    reduce_chain_min: Some(1),
                    ll_chunk_max: Some(0),
                    ..f
                },
                applies: |b, _| b >= TUNE_RING_MIN && b.is_multiple_of(16),
            });
            cands.push(Candidate {
                name: "ll63",
                kernel: Some(Kernel::ReduceLl63),
                forced: Forced {
                    reduce_ll63_max: Some(u64::MAX),
                    ll_chunk_max: Some(0),
                    ..f
                },
                applies: |b, _| b >= 16 && b.is_multiple_of(16),
            });
            if n == 2 {
                // after the kernels (and LL63's window): the copy engine from some size
                cands.push(ce_last(Forced {
                    reduce_ce_min: Some(1),
                    ..f
                }));
            }
            cands
        }
        _ => Vec::new(),
    }
}

/// One collective's tuner sweep (µs: mean over ranks of each rank's median,
/// out-of-place; `None`: the candidate does not run at that size, or its result was
/// wrong).
#[derive(Debug, Clone, Serialize)]
pub struct Sweep {
    /// The collective.
    pub collective: Collective,
    /// Candidate names, small-message kernel first.
    pub candidates: Vec<&'static str>,
    /// Total bytes per size.
    pub sizes: Vec<u64>,
    /// Per-rank chunk bytes per size (= `sizes` for whole-buffer collectives).
    pub chunks: Vec<u64>,
    /// `times[size][candidate]`.
    pub times: Vec<Vec<Option<f64>>>,
    /// The kernel chosen per size ([`tune::assign`]; all-gather and reduce-scatter
    /// alone — their shared threshold weighs both).
    pub choice: Vec<Option<usize>>,
    /// The LL16 chunk cap in effect (the file's): the rooted collectives' LL16 cap is
    /// never above it. Without an `ll16` column, their LL63 windows start above it.
    pub ll_chunk_max: u64,
}

/// What the tuner produced (the same on every rank).
#[derive(Debug)]
pub struct TuneOutcome {
    /// One sweep per collective that has a choice at this rank count.
    pub sweeps: Vec<Sweep>,
    /// Thresholds derived from them.
    pub derived: Derived,
    /// Whether any candidate's result was wrong (do not write the file then).
    pub wrong: bool,
    /// This rank.
    pub rank: u32,
    /// Ranks.
    pub nranks: u32,
    /// The driver's device name.
    pub device: String,
}

/// The tuner on this rank: for each of `colls` (every rank passes the same), one
/// [`Comm`] per candidate kernel (forced through [`tuning::with_forced`]), then per
/// size every candidate that applies, alternating, with the benchmark's checked run
/// and timing (`args`' sizes, iterations, `--batch`, `-G`, `-c`; out-of-place). Rank 0
/// prints a table per collective. Needs ≥ 2 ranks.
pub fn tune(args: &Args, colls: &[Collective], boot: &dyn Bootstrap) -> Result<TuneOutcome> {
    let n = boot.size();
    if n < 2 {
        return Err(CollError::invalid(
            "the tuner needs at least 2 ranks (one process per GPU): pass --ranks 2 or more, or run under `commhal launch -n N`",
        ));
    }
    let device = local_device(boot)?;
    // keeps the primary context alive between one collective's communicators and
    // the next's
    let context = commhal_cuda_rt::Context::new(device)?;
    let gpu = context.name().unwrap_or_default();
    let rank0 = boot.rank() == 0;
    let timeout = Duration::from_millis(args.wait_ms());
    let es = args.dtype.size();
    // the most the rooted LL16 cap may be (the file's chunk cap)
    let ll_chunk_max = commhal_cuda_coll::tuning::resolve(&gpu, n, 1, None, timeout)
        .map(|(t, _)| t.ll_chunk_max)
        .unwrap_or(0);
    let mut sweeps = Vec::new();
    let mut wrong = false;
    for &coll in colls {
        // the copy engines only run outside graph captures, on a driver with stream
        // writes: elsewhere their candidate would time the kernels under its name
        let ce_usable = !args.common.graphed() && commhal_cuda_coll::dma::available();
        let cands: Vec<Candidate> = candidates(coll, n)
            .into_iter()
            .filter(|c| ce_usable || c.name != "ce")
            .collect();
        if cands.len() < 2 {
            if rank0 {
                println!(
                    "# tune {}: one kernel at {n} ranks, nothing to choose",
                    coll.name()
                );
            }
            continue;
        }
        let mut a = Args {
            collective: coll,
            ..args.clone()
        };
        a.common.root = 0;
        let cap = capacity_for(&a, n);
        let mut comms = Vec::new();
        for c in &cands {
            comms.push(tuning::with_forced(c.forced, || {
                Comm::new(boot, device, cap, None, timeout)
            })?);
        }
        let mut benches = Vec::new();
        for comm in &comms {
            benches.push(Bench::new(&a, boot, comm, None)?);
        }
        if rank0 {
            println!("#");
            println!(
                "# tune {}: {} {n} ranks, {gpu}, graph={} batch={}: µs per launch (out-of-place, mean of the ranks' medians)",
                coll.name(),
                a.dtype.table_name(),
                a.common.graphed(),
                a.batch
            );
            let names: Vec<String> = cands.iter().map(|c| format!("{:>16}", c.name)).collect();
            println!("# {:>10} {:>10} {}", "size", "chunk", names.join(" "));
        }
        let mut sweep = Sweep {
            collective: coll,
            candidates: cands.iter().map(|c| c.name).collect(),
            sizes: Vec::new(),
            chunks: Vec::new(),
            times: Vec::new(),
            choice: Vec::new(),
            ll_chunk_max,
        };
        for bytes in cli::sizes(a.common.min_bytes, a.common.max_bytes, a.common.step_factor) {
            let (count, per) = cli::counts(coll, bytes, a.dtype, n);
            if count == 0 {
                continue;
            }
            let (size_bytes, chunk) = (count * es, per * es);
            let iters = cli::iters_for(size_bytes, a.common.iters, a.max_bytes_per_size);
            let launch_count = cli::launch_count(coll, count, per);
            let mut row = Vec::new();
            for (c, b) in cands.iter().zip(&benches) {
                if !(c.applies)(size_bytes, chunk) {
                    row.push(None);
                    continue;
                }
                let (k, _, _) = b.comm.plan(coll, a.dtype, launch_count);
                let want = match c.kernel {
                    Some(kernel) => k == kernel_name(kernel, a.dtype),
                    None => (k == commhal_cuda_coll::comm::CE_LABEL) == (c.name == "ce"),
                };
                if !want {
                    return Err(CollError::invalid(format!(
                        "tuner: candidate {} of {} planned {k} at {size_bytes} B (a tuner bug: the forced thresholds do not select it)",
                        c.name,
                        coll.name(),
                    )));
                }
                let cell = b.cell(Impl::Commhal, size_bytes, count, per, false, iters)?;
                if cell.wrong > 0 {
                    wrong = true;
                    if rank0 {
                        println!(
                            "# WRONG: {} {} at {size_bytes} B: {} wrong elements",
                            coll.name(),
                            c.name,
                            cell.wrong
                        );
                    }
                    row.push(None);
                } else {
                    row.push(Some(cell.time_us));
                }
            }
            if rank0 {
                let cells: Vec<String> = row
                    .iter()
                    .map(|t| match t {
                        Some(t) => format!("{t:>16.2}"),
                        None => format!("{:>16}", "-"),
                    })
                    .collect();
                println!("{size_bytes:12} {chunk:10} {}", cells.join(" "));
            }
            sweep.sizes.push(size_bytes);
            sweep.chunks.push(chunk);
            sweep.times.push(row);
        }
        for comm in &comms {
            comm.sync("the end of the tuner sweep")?;
        }
        sweep.choice = tune::assign(&sweep.times);
        if rank0 {
            println!("# {}: {}", coll.name(), describe_choice(&sweep));
        }
        sweeps.push(sweep);
        // every rank's kernels are done before any rank unmaps its buffers (peers
        // store into them)
        boot.barrier()?;
        drop(benches);
        drop(comms);
    }
    drop(context);
    let derived = derive(&sweeps);
    if rank0 {
        println!("#");
        println!("# derived (bytes; None: not measured, the old value stays): {derived:?}");
    }
    Ok(TuneOutcome {
        sweeps,
        derived,
        wrong,
        rank: boot.rank(),
        nranks: n,
        device: gpu,
    })
}

/// Thresholds from the sweeps (all-gather and reduce-scatter share one).
pub fn derive(sweeps: &[Sweep]) -> Derived {
    let mut d = Derived::default();
    let find = |c: Collective| sweeps.iter().find(|s| s.collective == c);
    // the copy engines: a last column "ce" (2-rank broadcast and reduce, send-recv,
    // the all-reduce ring's tail on 3+ ranks)
    let ce_col = |s: &Sweep| s.candidates.iter().position(|c| *c == "ce");
    if let Some(s) = find(Collective::Allreduce) {
        match ce_col(s) {
            Some(k) => {
                d.allreduce(&s.sizes, &tune::first_columns(&s.times, k));
                d.allreduce_ce_min = tune::ce_suffix(&s.sizes, &s.times, k);
            }
            None => d.allreduce(&s.sizes, &s.times),
        }
    }
    for (c, gather) in [
        (Collective::Allgather, true),
        (Collective::Reducescatter, false),
    ] {
        if let Some(s) = find(c) {
            d.gather_scatter_ring(gather, &s.sizes, &s.times);
        }
    }
    let (ag, rs) = (find(Collective::Allgather), find(Collective::Reducescatter));
    match (ag, rs) {
        (Some(a), Some(r)) if a.chunks == r.chunks => {
            d.gather_scatter(&a.chunks, Some(&a.times), Some(&r.times))
        }
        // different sweeps (not with one tuner run): all-gather alone decides
        (Some(a), _) => d.gather_scatter(&a.chunks, Some(&a.times), None),
        (None, Some(r)) => d.gather_scatter(&r.chunks, None, Some(&r.times)),
        (None, None) => {}
    }
    let ll63_col = |s: &Sweep| {
        s.candidates
            .iter()
            .position(|c| *c == "ll63")
            .filter(|&c| s.times.iter().any(|r| r.len() > c))
    };
    if let Some(s) = find(Collective::Sendrecv)
        && let Some(k) = ce_col(s)
    {
        d.sendrecv_ce_min = tune::ce_suffix(&s.sizes, &s.times, k);
    }
    // broadcast / reduce: [ll16, the kernels..., ll63, ce] (ll16 / ll63 / ce where the
    // sweep has them): the copy engines' suffix, the kernels' own thresholds, then the
    // rooted LL16 cap and both LL63 windows (tune::rooted_windows), the cap chosen
    // for the two collectives together (either alone when only one was swept)
    let mut rooted = Vec::new();
    for c in [Collective::Broadcast, Collective::Reduce] {
        let Some(s) = find(c) else { continue };
        let col = |name: &str| s.candidates.iter().position(|c| *c == name);
        let ce = ce_col(s);
        let mut ce_min = 0;
        let times = match ce {
            Some(k) => {
                let min = tune::ce_suffix(&s.sizes, &s.times, k);
                ce_min = min.unwrap_or(0);
                match c {
                    Collective::Broadcast => d.broadcast_ce_min = min,
                    _ => d.reduce_ce_min = min,
                }
                tune::first_columns(&s.times, k)
            }
            None => s.times.clone(),
        };
        let width = ce.unwrap_or(s.candidates.len());
        let (ll16, ll63) = (col("ll16"), ll63_col(s));
        let kernels = ll16.map_or(0, |c| c + 1)..ll63.unwrap_or(width);
        // an LL16 column that never ran (a sweep from above its sizes) says nothing
        let ll16 = ll16.filter(|&c| times.iter().any(|r| r.get(c).copied().flatten().is_some()));
        let kernel_times = tune::columns(&times, kernels.clone());
        match c {
            Collective::Broadcast => d.broadcast(&s.sizes, &kernel_times),
            _ => d.reduce(&s.sizes, &kernel_times),
        }
        // the rooted cap never exceeds the chunk cap, this run's if it derived one
        let cap = s.ll_chunk_max.min(d.ll_chunk_max.unwrap_or(u64::MAX));
        let options = tune::rooted_windows(&s.sizes, &times, ll16, ll63, kernels, cap, ce_min);
        rooted.push((c, ll16.is_some(), options));
    }
    // the cap: least summed cost over the swept collectives with an LL16 column
    // (ties: the smaller cap); without one, the file's LL16 sizes stay as they are
    let mut caps: Vec<u64> = rooted
        .iter()
        .filter(|r| r.1)
        .flat_map(|r| r.2.iter().map(|o| o.0))
        .collect();
    caps.sort_unstable();
    caps.dedup();
    let cost = |a: u64| -> f64 {
        rooted
            .iter()
            .filter(|r| r.1)
            .map(|r| r.2.iter().find(|o| o.0 == a).map_or(f64::INFINITY, |o| o.1))
            .sum()
    };
    let (mut cap, mut least) = (None, f64::INFINITY);
    for a in caps {
        let c = cost(a);
        if c < least - 1e-9 {
            (cap, least) = (Some(a), c);
        }
    }
    if rooted.iter().any(|r| r.1) {
        d.broadcast_reduce_ll_max = cap;
    }
    for (c, has_ll16, options) in &rooted {
        let pick = if *has_ll16 {
            options.iter().find(|o| Some(o.0) == cap)
        } else {
            options.first()
        };
        let window = pick.and_then(|o| o.2);
        match c {
            Collective::Broadcast => d.broadcast_ll63_max = window,
            _ => d.reduce_ll63_max = window,
        }
    }
    d
}

/// `ll up to 131072 B, two-shot up to 16777216 B, push from 33554432 B`.
pub fn describe_choice(s: &Sweep) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut runs: Vec<(usize, u64, u64)> = Vec::new();
    for (size, ch) in s.sizes.iter().zip(&s.choice) {
        let Some(c) = ch else { continue };
        match runs.last_mut() {
            Some((k, _, hi)) if k == c => *hi = *size,
            _ => runs.push((*c, *size, *size)),
        }
    }
    for (c, lo, hi) in runs {
        let name = s.candidates.get(c).copied().unwrap_or("?");
        parts.push(format!("{name} {lo}..{hi} B"));
    }
    if parts.is_empty() {
        "nothing measured".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_names_the_links_and_the_buffers() {
        use clap::Parser;
        let args =
            Args::try_parse_from(["commhal-gpu-bench", "allreduce", "--buffers", "vmm"]).unwrap();
        let (tuning, _) = commhal_cuda_coll::tuning::resolve_with(
            "NVIDIA H100 80GB HBM3",
            2,
            132,
            None,
            Duration::from_secs(10),
            &|_: &str| None,
        )
        .unwrap();
        let out = Outcome {
            ours: Vec::new(),
            theirs: Vec::new(),
            compared: None,
            wrong: false,
            rank: 0,
            nranks: 2,
            device: "NVIDIA H100 80GB HBM3".into(),
            tuning,
            links: "cuda-dma (copy engines: every collective)".into(),
        };
        let doc = json_doc(&args, &out);
        assert_eq!(doc["links"], "cuda-dma (copy engines: every collective)");
        assert_eq!(doc["buffers"], "vmm");
        assert_eq!(doc["nranks"], 2);
    }

    #[test]
    fn fault_checks_expect_their_own_errors_in_bound() {
        use commhal_cuda_coll::layout::{ERR_PACKET_TIMEOUT, ERR_PEER_GONE, ERR_WAIT_TIMEOUT};
        let dev = |code| -> Result<()> {
            Err(CollError::Device {
                rank: 1,
                code,
                desc: "",
                what: String::new(),
            })
        };
        let host = || -> Result<()> { Err(CollError::invalid("host sync timed out")) };
        let b = fault_wait_bound(Duration::from_secs(10));
        assert_eq!(b, Duration::from_secs(25));
        assert!(stop_duration(Duration::from_secs(10)) > b);
        let (soon, late) = (Some(Duration::from_millis(100)), Some(b * 2));
        let dead = Fault::DeadRank(3);
        let stop = Fault::StopRank(3);
        let abort = Fault::AbortAfter(Duration::from_millis(200));
        for code in [ERR_WAIT_TIMEOUT, ERR_PACKET_TIMEOUT, ERR_PEER_GONE] {
            assert!(expected_error(dead, &dev(code), soon, b), "{code}");
            assert!(!expected_error(dead, &dev(code), late, b), "{code}");
        }
        // a stopped peer is not gone: only the waits' own bound may end them
        assert!(expected_error(stop, &dev(ERR_WAIT_TIMEOUT), soon, b));
        assert!(expected_error(stop, &dev(ERR_PACKET_TIMEOUT), soon, b));
        assert!(!expected_error(stop, &dev(ERR_PEER_GONE), soon, b));
        // an abort: the watchdog's code, soon after the abort, never before it
        assert!(expected_error(
            abort,
            &dev(ERR_PEER_GONE),
            soon,
            ABORT_BOUND
        ));
        assert!(!expected_error(
            abort,
            &dev(ERR_WAIT_TIMEOUT),
            soon,
            ABORT_BOUND
        ));
        assert!(!expected_error(
            abort,
            &dev(ERR_PEER_GONE),
            None,
            ABORT_BOUND
        ));
        assert!(!expected_error(
            abort,
            &dev(ERR_PEER_GONE),
            Some(ABORT_BOUND * 2),
            ABORT_BOUND
        ));
        for f in [dead, stop, abort] {
            assert!(!expected_error(f, &Ok(()), soon, b), "no error");
            assert!(!expected_error(f, &host(), soon, b), "a host-side error");
        }
    }

    #[test]
    fn footer_as_nccl_tests() {
        let cell = |time_us: f64, busbw: f64, wrong: i64| Cell {
            time_us,
            algbw: busbw,
            busbw,
            wrong,
        };
        let row = |oop: Cell, ip: Cell| Row {
            implementation: "commhal".into(),
            bytes: 1024,
            count: 512,
            iters: 20,
            oop,
            ip,
            kernel: String::new(),
        };
        // mean over the cells that ran (a zero time: no in-place variant)
        let rows = [
            row(cell(5.0, 1.0, 0), cell(5.0, 3.0, 0)),
            row(cell(6.0, 2.0, 0), cell(0.0, 0.0, -1)),
        ];
        assert_eq!(
            nccl_footer(&rows),
            [
                "# Out of bounds values : 0 OK".to_string(),
                "# Avg bus bandwidth    : 2.0000 ".to_string(),
                "#".to_string()
            ]
        );
        let bad = [row(cell(5.0, 1.0, 7), cell(5.0, 1.0, -1))];
        assert_eq!(nccl_footer(&bad)[0], "# Out of bounds values : 7 FAILED");
    }

    #[test]
    fn candidates_run_from_small_to_large_kernels() {
        let names = |c, n| candidates(c, n).iter().map(|c| c.name).collect::<Vec<_>>();
        assert_eq!(
            names(Collective::Allreduce, 2),
            ["ll", "two-shot", "push", "ring"]
        );
        // 3+ ranks: the ring with the copy-engine tail last, its threshold its own
        assert_eq!(
            names(Collective::Allreduce, 4),
            ["ll", "two-shot", "push", "ring", "ce"]
        );
        let ce = candidates(Collective::Allreduce, 3)[4];
        assert_eq!(ce.kernel, Some(Kernel::AllreduceRingHead));
        assert_eq!(
            (ce.forced.ar_ring_min, ce.forced.ar_ce_min),
            (Some(1), Some(1))
        );
        for cand in &candidates(Collective::Allreduce, 4)[..4] {
            assert_eq!(cand.forced.ar_ce_min, Some(0), "{}", cand.name);
        }
        assert_eq!(names(Collective::Allgather, 2), ["ll", "direct", "ring"]);
        assert_eq!(
            names(Collective::Reducescatter, 8),
            ["ll", "direct", "ring", "push"]
        );
        // rooted: LL16 first, LL63 last (a window above the LL16 sizes), derived apart
        assert_eq!(
            names(Collective::Broadcast, 3),
            ["ll16", "direct", "scatter-forward", "chain", "ll63"]
        );
        // 2 ranks: the copy engines after the kernels
        assert_eq!(
            names(Collective::Broadcast, 2),
            ["ll16", "direct", "ll63", "ce"]
        );
        assert_eq!(
            names(Collective::Reduce, 2),
            ["ll16", "worker", "chain", "ll63", "ce"]
        );
        assert_eq!(
            names(Collective::Reduce, 4),
            ["ll16", "all", "worker", "chain", "ll63"]
        );
        assert_eq!(names(Collective::Sendrecv, 4), ["kernels", "ce"]);
        assert!(names(Collective::Alltoall, 4).is_empty());
        // every candidate turns every ring, chain and LL63 window off but its own
        for c in TUNED {
            for cand in candidates(c, 4) {
                let f = cand.forced;
                let on = [
                    f.ar_ring_min,
                    f.ag_ring_min,
                    f.rs_ring_min,
                    f.bcast_chain_min,
                    f.reduce_chain_min,
                    f.bcast_ll63_max,
                    f.reduce_ll63_max,
                ]
                .iter()
                .filter(|v| **v != Some(0))
                .count();
                if cand.kernel.is_none() {
                    // the copy engines or not: only the CE thresholds are forced
                    let ce = (f.bcast_ce_min, f.sendrecv_ce_min);
                    let want = if cand.name == "ce" { 1 } else { 0 };
                    assert_eq!(ce, (Some(want), Some(want)), "{}", cand.name);
                    assert_eq!(on, 7, "the file's kernels: nothing else forced");
                    continue;
                }
                let own = matches!(
                    cand.kernel,
                    Some(
                        Kernel::AllreduceRing
                            | Kernel::AllreduceRingHead
                            | Kernel::AllgatherRing
                            | Kernel::ReducescatterRing
                            | Kernel::BroadcastChain
                            | Kernel::ReduceChain
                            | Kernel::BroadcastLl63
                            | Kernel::ReduceLl63
                    )
                );
                assert_eq!(on, usize::from(own), "{} {}", c.name(), cand.name);
            }
        }
        // LL16 on up to the tuner's chunk cap, the rooted cap with it
        let ll16 = candidates(Collective::Reduce, 4)[0];
        assert_eq!(ll16.kernel, Some(Kernel::ReduceLl));
        assert_eq!(
            (ll16.forced.ll_chunk_max, ll16.forced.rooted_ll_max),
            (Some(TUNE_LL_CHUNK_MAX), Some(TUNE_LL_CHUNK_MAX))
        );
        assert!((ll16.applies)(TUNE_LL_CHUNK_MAX, 0) && !(ll16.applies)(2 * TUNE_LL_CHUNK_MAX, 0));
        // the other rooted candidates: LL16 off
        for c in [Collective::Broadcast, Collective::Reduce] {
            for cand in &candidates(c, 2)[1..] {
                let off = cand.forced.ll_chunk_max == Some(0) || cand.name == "ce";
                assert!(off && cand.forced.rooted_ll_max.is_none(), "{}", cand.name);
            }
        }
        // the 2-rank broadcast's copy engine: its own threshold on, LL63 off
        let ce = candidates(Collective::Broadcast, 2)[3];
        assert!(ce.kernel.is_none() && ce.name == "ce");
        assert_eq!(
            (ce.forced.bcast_ce_min, ce.forced.bcast_ll63_max),
            (Some(1), Some(0))
        );
        // the 2-rank reduce's copy engine: its own threshold on, every kernel window off
        let ce = candidates(Collective::Reduce, 2)[4];
        assert!(ce.kernel.is_none() && ce.name == "ce");
        assert_eq!(ce.forced.reduce_ce_min, Some(1));
        assert_eq!(
            (
                ce.forced.reduce_chain_min,
                ce.forced.reduce_ll63_max,
                ce.forced.bcast_ce_min
            ),
            (Some(0), Some(0), Some(0))
        );
        assert!(!(ce.applies)(TUNE_RING_MIN - 16, 0) && (ce.applies)(TUNE_RING_MIN, 0));
        let ring = &candidates(Collective::Reducescatter, 4)[2];
        assert!(!(ring.applies)(TUNE_RING_MIN / 2, TUNE_RING_MIN / 8));
        assert!((ring.applies)(TUNE_RING_MIN, TUNE_RING_MIN / 4));
        assert_eq!(
            (ring.forced.rs_ring_min, ring.forced.ag_ring_min),
            (Some(1), Some(0))
        );
        let ar = candidates(Collective::Allreduce, 4);
        assert!((ar[0].applies)(TUNE_LL_MAX, 0) && !(ar[0].applies)(TUNE_LL_MAX + 8, 0));
        assert!(!(ar[0].applies)(1028, 0), "LL needs 8-byte multiples");
        assert!(!(ar[2].applies)(TUNE_PUSH_MIN - 1, 0) && (ar[2].applies)(TUNE_PUSH_MIN, 0));
        assert_eq!(ar[1].forced.ll_max, Some(0), "two-shot: never LL");
        assert_eq!(ar[1].forced.push_min, Some(0), "two-shot: never push");
        let ag = candidates(Collective::Allgather, 4);
        assert!(
            (ag[0].applies)(0, TUNE_LL_CHUNK_MAX) && !(ag[0].applies)(0, 2 * TUNE_LL_CHUNK_MAX)
        );
        assert!(
            ag[0].forced.ll_max >= ag[0].forced.ll_chunk_max,
            "the LL chunk is capped at ll_max"
        );
    }

    fn sweep(c: Collective, sizes: &[u64], chunks: &[u64], times: &[&[f64]]) -> Sweep {
        let times: Vec<Vec<Option<f64>>> = times
            .iter()
            .map(|r| r.iter().map(|&t| (t > 0.0).then_some(t)).collect())
            .collect();
        // the tables here have no LL16 column (rooted_ll16_from_synthetic_sweeps has)
        Sweep {
            collective: c,
            candidates: candidates(c, 4)
                .iter()
                .map(|c| c.name)
                .filter(|n| *n != "ll16")
                .collect(),
            sizes: sizes.to_vec(),
            chunks: chunks.to_vec(),
            choice: tune::assign(&times),
            times,
            ll_chunk_max: 0,
        }
    }

    #[test]
    fn ring_and_chain_thresholds_from_synthetic_sweeps() {
        let m = 1u64 << 20;
        let sizes = [m, 16 * m, 256 * m];
        // all-reduce [ll, two-shot, push, ring]: ring wins from 256M
        let ar = sweep(
            Collective::Allreduce,
            &sizes,
            &sizes,
            &[
                &[30.0, 14.0, 15.0, 40.0],
                &[0.0, 90.0, 86.0, 91.0],
                &[0.0, 1200.0, 1170.0, 1110.0],
            ],
        );
        // all-gather [ll, direct, ring]: ring from 16M; reduce-scatter [ll, direct,
        // ring, push]: ring never, push at 16M only
        let chunks = [m / 4, 4 * m, 64 * m];
        let ag = sweep(
            Collective::Allgather,
            &sizes,
            &chunks,
            &[
                &[12.0, 11.0, 20.0],
                &[0.0, 45.0, 44.0],
                &[0.0, 600.0, 560.0],
            ],
        );
        let rs = sweep(
            Collective::Reducescatter,
            &sizes,
            &chunks,
            &[
                &[12.0, 11.0, 20.0, 13.0],
                &[0.0, 48.0, 52.0, 40.0],
                &[0.0, 620.0, 700.0, 640.0],
            ],
        );
        // broadcast [direct, scatter-forward, chain]: sf at 16M, chain at 256M
        let bc = sweep(
            Collective::Broadcast,
            &sizes,
            &sizes,
            &[
                &[12.0, 13.0, 30.0],
                &[80.0, 66.0, 84.0],
                &[900.0, 820.0, 785.0],
            ],
        );
        // reduce [worker, chain]: chain from 16M
        let rd = sweep(
            Collective::Reduce,
            &sizes,
            &sizes,
            &[&[14.0, 30.0], &[82.0, 76.0], &[960.0, 790.0]],
        );
        let d = derive(&[ar, ag, rs, bc, rd]);
        assert_eq!(d.allreduce_ring_min, Some(256 * m));
        assert_eq!(d.allreduce_push_min, Some(16 * m));
        assert_eq!(d.allgather_ring_min, Some(16 * m));
        assert_eq!(d.reducescatter_ring_min, Some(0), "never won: 0 = never");
        assert_eq!(
            (d.reducescatter_push_min, d.reducescatter_push_max),
            (Some(16 * m), Some(16 * m))
        );
        assert_eq!(
            d.ll_chunk_max,
            Some(0),
            "direct beat LL at the smallest chunk"
        );
        assert_eq!(
            (d.broadcast_sf_min, d.broadcast_chain_min),
            (Some(16 * m), Some(256 * m))
        );
        assert_eq!(d.reduce_chain_min, Some(16 * m));
        assert_eq!(
            d.reduce_all_max, None,
            "two columns: 2 ranks, nothing to derive"
        );
        // reduce on 4 ranks [all, worker, chain]: all to 1M, worker at 16M, chain at 256M
        let rd4 = sweep(
            Collective::Reduce,
            &sizes,
            &sizes,
            &[
                &[11.0, 14.0, 30.0],
                &[90.0, 82.0, 86.0],
                &[1100.0, 960.0, 790.0],
            ],
        );
        let d = derive(&[rd4]);
        assert_eq!(d.reduce_all_max, Some(m));
        assert_eq!(d.reduce_chain_min, Some(256 * m));
    }

    #[test]
    fn ce_thresholds_from_synthetic_sweeps() {
        let m = 1u64 << 20;
        let sizes = [m, 16 * m, 64 * m, 256 * m, 1024 * m];
        // [kernels, ce]: the copy engines lose small, win from 64M on
        let times: &[&[f64]] = &[
            &[10.0, 30.0],
            &[60.0, 70.0],
            &[200.0, 190.0],
            &[760.0, 716.0],
            &[2930.0, 2740.0],
        ];
        let sr = sweep(Collective::Sendrecv, &sizes, &sizes, times);
        let bc = Sweep {
            candidates: vec!["kernels", "ce"],
            ..sweep(Collective::Broadcast, &sizes, &sizes, times)
        };
        let d = derive(&[sr.clone(), bc]);
        assert_eq!(d.sendrecv_ce_min, Some(64 * m));
        assert_eq!(d.broadcast_ce_min, Some(64 * m));
        // a broadcast sweep with a "ce" column derives nothing else
        assert_eq!(d.broadcast_sf_min, None);
        assert_eq!(d.broadcast_chain_min, None);
        // a loss at the largest size: never
        let mut lose = times.iter().map(|r| r.to_vec()).collect::<Vec<_>>();
        lose[4][1] = 2950.0;
        let rows: Vec<&[f64]> = lose.iter().map(|r| r.as_slice()).collect();
        let sr = sweep(Collective::Sendrecv, &sizes, &sizes, &rows);
        assert_eq!(derive(&[sr]).sendrecv_ce_min, Some(0));
        // no sweep: not measured (the file's value stays)
        assert_eq!(derive(&[]).sendrecv_ce_min, None);
        // all-reduce on 3+ ranks [ll, two-shot, push, ring, ce]: the ring from 64M, its
        // copy-engine tail from 1G (a tie at 256M is not a win at every larger size:
        // it is, ties count); the kernels' thresholds from the first four columns
        let ar = sweep(
            Collective::Allreduce,
            &sizes,
            &sizes,
            &[
                &[9.0, 12.0, 0.0, 30.0, 45.0],
                &[70.0, 65.0, 64.0, 82.0, 110.0],
                &[300.0, 290.0, 286.0, 285.0, 314.0],
                &[1150.0, 1130.0, 1120.0, 1111.0, 1128.0],
                &[4800.0, 4500.0, 4450.0, 4400.0, 4353.0],
            ],
        );
        let d = derive(std::slice::from_ref(&ar));
        assert_eq!(d.allreduce_ring_min, Some(64 * m));
        assert_eq!(d.allreduce_push_min, Some(16 * m));
        assert_eq!(d.allreduce_ce_min, Some(1024 * m));
        // a sweep without the column (2 ranks): not measured
        let ar2 = Sweep {
            candidates: vec!["ll", "two-shot", "push", "ring"],
            times: tune::first_columns(&ar.times, 4),
            ..ar
        };
        assert_eq!(derive(&[ar2]).allreduce_ce_min, None);
        // 2-rank reduce [worker, chain, ll63, ce]: ce from 256M; the kernels' thresholds
        // and LL63's window from the first three columns
        let rd = Sweep {
            candidates: vec!["worker", "chain", "ll63", "ce"],
            ll_chunk_max: m,
            ..sweep(
                Collective::Reduce,
                &sizes,
                &sizes,
                &[
                    &[9.0, 30.0, 8.0, 40.0],
                    &[60.0, 58.0, 50.0, 70.0],
                    &[200.0, 192.0, 190.0, 195.0],
                    &[760.0, 745.0, 750.0, 727.0],
                    &[2930.0, 2940.0, 2950.0, 2767.0],
                ],
            )
        };
        let d = derive(&[rd]);
        assert_eq!(d.reduce_ce_min, Some(256 * m));
        assert_eq!(d.reduce_ll63_max, Some(64 * m));
        assert_eq!(d.reduce_chain_min, Some(16 * m));
        assert_eq!(
            d.broadcast_ce_min, None,
            "a reduce sweep sets the reduce's key only"
        );
    }

    #[test]
    fn rooted_ll16_from_synthetic_sweeps() {
        let k = 1u64 << 10;
        let m = 1u64 << 20;
        let sizes = [
            64 * k,
            128 * k,
            256 * k,
            512 * k,
            m,
            16 * m,
            256 * m,
            1024 * m,
        ];
        let rooted = |c, names: &[&'static str], times: &[&[f64]]| Sweep {
            candidates: names.to_vec(),
            ll_chunk_max: m,
            ..sweep(c, &sizes, &sizes, times)
        };
        // 2-rank reduce [ll16, worker, chain, ll63, ce]: LL16 to 128K, LL63 to 16M, the
        // copy engine from 256M
        let rd = rooted(
            Collective::Reduce,
            &["ll16", "worker", "chain", "ll63", "ce"],
            &[
                &[3.0, 6.0, 0.0, 3.5, 0.0],
                &[3.4, 6.5, 0.0, 3.6, 0.0],
                &[4.1, 7.0, 0.0, 3.8, 0.0],
                &[5.6, 8.0, 0.0, 4.6, 0.0],
                &[8.4, 10.0, 30.0, 6.0, 40.0],
                &[0.0, 60.0, 58.0, 50.0, 70.0],
                &[0.0, 760.0, 745.0, 750.0, 727.0],
                &[0.0, 2930.0, 2940.0, 2950.0, 2767.0],
            ],
        );
        // 2-rank broadcast [ll16, direct, ll63, ce]: alone, LL16 would go to 256K; LL63
        // beats the direct kernel up to 1G, but the copy engine takes 256M on
        let bc = rooted(
            Collective::Broadcast,
            &["ll16", "direct", "ll63", "ce"],
            &[
                &[3.2, 5.0, 3.6, 0.0],
                &[3.6, 5.5, 3.7, 0.0],
                &[4.0, 6.0, 4.1, 0.0],
                &[5.7, 7.0, 4.8, 0.0],
                &[8.5, 9.0, 6.2, 30.0],
                &[0.0, 55.0, 45.0, 60.0],
                &[0.0, 720.0, 710.0, 700.0],
                &[0.0, 2800.0, 2790.0, 2750.0],
            ],
        );
        let d = derive(&[bc.clone(), rd.clone()]);
        assert_eq!(d.broadcast_reduce_ll_max, Some(128 * k), "one cap for both");
        assert_eq!(d.reduce_ll63_max, Some(16 * m));
        assert_eq!(
            d.broadcast_ll63_max,
            Some(16 * m),
            "the window ends below the copy engine's sizes"
        );
        assert_eq!(
            (d.reduce_ce_min, d.broadcast_ce_min),
            (Some(256 * m), Some(256 * m))
        );
        assert_eq!(d.reduce_chain_min, Some(16 * m));
        assert_eq!((d.broadcast_sf_min, d.broadcast_chain_min), (None, None));
        // broadcast alone: its own best cap
        let d = derive(std::slice::from_ref(&bc));
        assert_eq!(d.broadcast_reduce_ll_max, Some(256 * k));
        // LL16 slower than LL63 everywhere: cap 0 (never LL16)
        let mut fast = rd.clone();
        for r in &mut fast.times[..5] {
            r[3] = r[0].map(|t| t * 0.9);
        }
        let d = derive(&[fast]);
        assert_eq!(
            (d.broadcast_reduce_ll_max, d.reduce_ll63_max),
            (Some(0), Some(16 * m))
        );
        // a sweep from above the LL16 sizes: the cap is not measured, LL63 starts above
        // the chunk cap
        let big = Sweep {
            sizes: sizes[4..].to_vec(),
            chunks: sizes[4..].to_vec(),
            times: rd.times[4..]
                .iter()
                .map(|r| [vec![None], r[1..].to_vec()].concat())
                .collect(),
            ..rd.clone()
        };
        let d = derive(&[big]);
        assert_eq!(
            (d.broadcast_reduce_ll_max, d.reduce_ll63_max),
            (None, Some(16 * m))
        );
    }

    #[test]
    fn ll63_window_from_synthetic_sweeps() {
        let k = 1u64 << 10;
        let m = 1u64 << 20;
        let sizes = [256 * k, m, 16 * m, 256 * m];
        // reduce on 4 ranks [all, worker, chain, ll63]: LL63 fastest at 1M and 16M, slower
        // at 256M; at 256K too, but that size is the LL16 kernel's (floor)
        let times: &[&[f64]] = &[
            &[7.0, 9.0, 30.0, 6.0],
            &[12.0, 13.0, 30.0, 11.0],
            &[90.0, 82.0, 86.0, 65.0],
            &[1100.0, 960.0, 790.0, 850.0],
        ];
        let rd = Sweep {
            ll_chunk_max: 256 * k,
            ..sweep(Collective::Reduce, &sizes, &sizes, times)
        };
        let d = derive(std::slice::from_ref(&rd));
        assert_eq!(d.reduce_ll63_max, Some(16 * m));
        // the other thresholds come from the first three columns only
        assert_eq!(d.reduce_all_max, Some(m));
        assert_eq!(d.reduce_chain_min, Some(256 * m));
        // every size at or under the floor: never
        let high = Sweep {
            ll_chunk_max: 256 * m,
            ..rd.clone()
        };
        assert_eq!(derive(&[high]).reduce_ll63_max, Some(0));
        // LL63 slower everywhere above the floor: never; and a lone win between two
        // losses does not open a window worth its neighbours' cost
        let slow: &[&[f64]] = &[
            &[7.0, 9.0, 30.0, 6.0],
            &[12.0, 13.0, 30.0, 14.0],
            &[90.0, 82.0, 86.0, 81.0],
            &[1100.0, 960.0, 790.0, 900.0],
        ];
        let rd = Sweep {
            ll_chunk_max: 256 * k,
            ..sweep(Collective::Reduce, &sizes, &sizes, slow)
        };
        assert_eq!(derive(&[rd]).reduce_ll63_max, Some(0));
        // broadcast [direct, scatter-forward, chain, ll63]
        let bc: &[&[f64]] = &[
            &[8.0, 9.0, 30.0, 7.0],
            &[13.0, 11.0, 30.0, 10.0],
            &[80.0, 66.0, 84.0, 70.0],
            &[900.0, 820.0, 785.0, 850.0],
        ];
        let bc = sweep(Collective::Broadcast, &sizes, &sizes, bc);
        let d = derive(&[bc]);
        assert_eq!(
            d.broadcast_ll63_max,
            Some(m),
            "floor 0: from the smallest size"
        );
        assert_eq!(d.broadcast_sf_min, Some(m));
    }

    #[test]
    fn thresholds_from_synthetic_sweeps() {
        let k = 1024u64;
        let ar = sweep(
            Collective::Allreduce,
            &[64 * k, 256 * k, 1024 * k, 32 * k * k],
            &[64 * k, 256 * k, 1024 * k, 32 * k * k],
            &[
                &[8.0, 10.0, 0.0],
                &[12.0, 12.5, 0.0],
                &[30.0, 16.0, 18.0],
                &[0.0, 100.0, 92.0],
            ],
        );
        assert_eq!(
            describe_choice(&ar),
            "ll 65536..262144 B, two-shot 1048576..1048576 B, push 33554432..33554432 B"
        );
        // chunks are a quarter of the size on 4 ranks
        let ag = sweep(
            Collective::Allgather,
            &[4 * k, 64 * k, 1024 * k],
            &[k, 16 * k, 256 * k],
            &[&[5.0, 8.0], &[6.0, 8.0], &[30.0, 14.0]],
        );
        let rs = sweep(
            Collective::Reducescatter,
            &[4 * k, 64 * k, 1024 * k],
            &[k, 16 * k, 256 * k],
            &[&[5.0, 8.0], &[9.0, 8.0], &[30.0, 14.0]],
        );
        let bc = sweep(
            Collective::Broadcast,
            &[64 * k, 1024 * k],
            &[64 * k, 1024 * k],
            &[&[10.0, 12.0], &[40.0, 30.0]],
        );
        let d = derive(&[ar.clone(), ag.clone(), rs.clone(), bc]);
        assert_eq!(d.allreduce_ll_max, Some(256 * k));
        assert_eq!(d.allreduce_push_min, Some(32 * k * k));
        // all-gather alone: LL to 16K; with reduce-scatter (loses at 16K by 12.5%,
        // all-gather wins by 25%): the sum still keeps LL to 16K
        assert_eq!(d.ll_chunk_max, Some(16 * k));
        assert_eq!(d.broadcast_sf_min, Some(1024 * k));
        // no ring / chain columns: those thresholds stay unmeasured (None) or, where the
        // column exists but never won, 0 = never
        assert_eq!(
            (
                d.allreduce_ring_min,
                d.allgather_ring_min,
                d.reduce_chain_min
            ),
            (None, None, None)
        );
        let d = derive(&[rs]);
        assert_eq!(d.ll_chunk_max, Some(k), "reduce-scatter alone: LL to 1K");
        let d = derive(&[ar]);
        assert_eq!((d.ll_chunk_max, d.broadcast_sf_min), (None, None));
        assert_eq!(derive(&[]), Derived::default());
    }
}
