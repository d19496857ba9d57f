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
//! Entry point shared by `commhal-gpu-bench` and `commhal bench --backend cuda-nvlink`:
//! [`run_rank`] (bootstrap → [`Comm`] → [`run`] → JSON; a fault check,
//! [`crate::fault`], when one is asked for). `commhal tune` runs [`crate::sweep`].

use std::time::Duration;

use commhal_cuda_coll::setup::local_device;
use commhal_cuda_rt::pieces::PieceMapping;
use commhal_cuda_rt::{DeviceBuffer, Event, Gate, Graph, Stream, copy};
use commhal_hal::bootstrap::Bootstrap;
use serde::Serialize;

use crate::check;
use crate::cli::{self, Args, Buffers, Collective};
use crate::fault::fault_check;
use crate::nccl::{LibInfo, Nccl};
use commhal_cuda_coll::comm::{BufferPath, CallBufs, Comm, P2pOp, Tuning};
use commhal_cuda_coll::error::{CollError, Result};
use commhal_cuda_coll::tuning;

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
pub(crate) enum Impl {
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

pub(crate) struct Bench<'a> {
    gate: std::cell::RefCell<Gate>,
    args: &'a Args,
    boot: &'a dyn Bootstrap,
    pub(crate) comm: &'a Comm,
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
    pub(crate) fn new(
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

    /// `--mix-sendrecv`: up to 1 KiB (whole 8-byte packets, at most `per` elements) of
    /// the input to the next rank's output as the one-way LL16 send/recv kernel, then
    /// those output bytes poisoned again, so the collective after it must write them
    /// (the send/recv's bytes would otherwise pass for an all-gather's or a broadcast's).
    fn mix_sendrecv(&self, per: u64) -> Result<()> {
        let a = self.args;
        let es = a.dtype.size();
        let bytes = (1024.min(per * es)) / 8 * 8;
        if bytes == 0 {
            return Ok(());
        }
        let small = bytes / es;
        let (kernel, _, _) = self.comm.plan(Collective::Sendrecv, a.dtype, small);
        if kernel != "commhal_coll_sendrecv_ll" {
            return Err(CollError::invalid(format!(
                "--mix-sendrecv: a {bytes}-byte send/recv runs as {kernel} here, not the \
                 one-way LL16 kernel it is meant to put between launches"
            )));
        }
        let op = a.reduce_op();
        if a.buffers == Buffers::Registered {
            self.comm
                .launch_rooted(Collective::Sendrecv, a.dtype, op, small, 0, false)?;
        } else {
            let bufs = self.call_bufs(small, false);
            let s = &self.stream;
            self.comm
                .launch_on(Collective::Sendrecv, a.dtype, op, small, 0, bufs, s)?;
        }
        // SAFETY: [out, out + bytes) is inside the benchmark's output (bytes <= per
        // elements, which every checked collective's output holds), alive until
        // synchronised.
        unsafe { copy::memset_async(self.comm.stream(), self.out, 0xff, bytes)? };
        Ok(())
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
        // (a reduce leaves the other ranks' outputs as they were: it would see the bytes)
        let mix = a.mix_sendrecv && a.collective != Collective::Reduce;
        if mix && !in_place && matches!(which, Impl::Commhal) {
            self.mix_sendrecv(per)?;
        }
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

    pub(crate) fn cell(
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
            "# commhal-gpu-bench: {} ranks, ll_max {} B, {} threads (LL16: {}), <= {} blocks, device wait bound {:?}",
            n, t.ll_max, t.threads, t.ll_threads, t.max_blocks, t.device_timeout
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
            "# thresholds: push_min {} B, rs_push {}..={} B, ll_chunk_max {} B (bcast / reduce {} B), bcast_sf_min {} B, bcast_chain_min {} B, reduce_chain_min {} B, all-gather narrow grid from {} B, ring_min AR {} / AG {} / RS {} B (u64::MAX: never), unroll chain {} / ring {} / reduce chain {}, LL63 max bcast {} / reduce {} B, all-reduce {}..={} B (one shot to {} B), all-gather {}..={} B, reduce-scatter {}..={} B, copy engines from bcast (2 ranks) {} / reduce (2 ranks) {} / sendrecv {} / all-reduce tail (3+ ranks) {} B; from {}",
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
            t.ag_ll63_min,
            t.ag_ll63_max,
            t.rs_ll63_min,
            t.rs_ll63_max,
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
    pub(crate) fn of(comm: &Comm, rows: Rows) -> Outcome {
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
}
