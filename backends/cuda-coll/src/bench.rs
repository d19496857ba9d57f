//! The benchmark loop: per size, per implementation (commhal, then NCCL when
//! comparing), out-of-place then in-place: one checked run on poisoned outputs,
//! warm-up, then timed iterations (CUDA events between launches, or graph replays),
//! median per rank, mean over ranks. Rank 0 prints and writes JSON.

use commhal_cuda_rt::Event;
use commhal_hal::bootstrap::Bootstrap;
use serde::Serialize;

use crate::check;
use crate::cli::{self, Args, Collective};
use crate::comm::Comm;
use crate::driver::{self, Gate, Graph};
use crate::error::{CollError, Result};
use crate::nccl::Nccl;

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
    /// `commhal` or `nccl`.
    pub implementation: &'static str,
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
    /// Kernel used (commhal).
    pub kernel: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Impl {
    Commhal,
    Nccl,
}

/// Most launches queued behind the timing gate (far below the driver's queue depth).
const MAX_GATED_ITERS: u32 = 200;

struct Bench<'a> {
    gate: std::cell::RefCell<Gate>,
    args: &'a Args,
    boot: &'a dyn Bootstrap,
    comm: &'a Comm,
    nccl: Option<&'a Nccl>,
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

impl Bench<'_> {
    fn launch(&self, which: Impl, count: u64, per: u64, in_place: bool) -> Result<()> {
        let a = self.args;
        let c = if a.collective.count_is_per_rank() {
            per
        } else {
            count
        };
        match which {
            Impl::Commhal => self
                .comm
                .launch_rooted(a.collective, a.dtype, c, a.root, in_place),
            Impl::Nccl => {
                let n = self
                    .nccl
                    .ok_or_else(|| CollError::Nccl("not initialised".into()))?;
                // SAFETY: the Comm's registered input/output regions, sized for the
                // largest size (checked by the caller against capacity), alive while
                // the Comm lives; synchronised before the Comm drops.
                unsafe {
                    n.launch(
                        self.comm.stream(),
                        a.collective,
                        a.dtype,
                        c,
                        self.comm.rank(),
                        self.comm.size(),
                        a.root,
                        self.comm.input_addr(),
                        self.comm.output_addr(),
                        in_place,
                    )
                }
            }
        }
    }

    /// Bytes of the output this rank checks, and its device address.
    fn output_region(&self, count: u64, per: u64, in_place: bool) -> (u64, u64) {
        let a = self.args;
        let es = a.dtype.size();
        let len = check::checked_len(a.collective, a.dtype, self.comm.rank(), a.root, count, per);
        let off = if in_place && a.collective == Collective::Reducescatter {
            u64::from(self.comm.rank()) * per * es
        } else {
            0
        };
        (self.comm.output_addr() + off, len)
    }

    /// Queue what makes the buffers ready for one checked run: restore in-place data,
    /// poison what the collective must overwrite.
    fn prepare(&self, count: u64, per: u64, in_place: bool) -> Result<()> {
        let es = self.args.dtype.size();
        let s = self.comm.stream();
        let (inp, out) = (self.comm.input_addr(), self.comm.output_addr());
        let full = count * es; // the whole output (all-gather) / input (reduce-scatter)
        // SAFETY: every range is inside the Comm's input/output regions (count was
        // checked against capacity by the caller), alive until synchronised.
        unsafe {
            driver::memset_async(s, out, 0xff, full)?;
            if in_place {
                match self.args.collective {
                    Collective::Allreduce | Collective::Reducescatter | Collective::Reduce => {
                        driver::copy_async(s, out, inp, full)?
                    }
                    Collective::Allgather => {
                        let off = u64::from(self.comm.rank()) * per * es;
                        driver::copy_async(s, out + off, inp, per * es)?
                    }
                    // only the root's output holds data; the others stay poisoned
                    Collective::Broadcast => {
                        if self.comm.rank() == self.args.root {
                            driver::copy_async(s, out, inp, full)?
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
        self.launch(which, count, per, in_place)?;
        self.comm.sync("the checked run")?;
        let (addr, len) = self.output_region(count, per, in_place);
        let mut host = vec![0u8; len as usize];
        if len > 0 {
            // SAFETY: [addr, addr+len) lies in this rank's output allocation.
            unsafe { driver::read(self.comm.context(), addr, &mut host)? };
        }
        let a = self.args;
        Ok(check::count_wrong(
            a.collective,
            a.dtype,
            self.comm.rank(),
            self.comm.size(),
            a.root,
            count,
            per,
            &host,
        ))
    }

    /// Median µs of one launch on this rank.
    fn timed(&self, which: Impl, count: u64, per: u64, in_place: bool, iters: u32) -> Result<f64> {
        let ctx = self.comm.context();
        let s = self.comm.stream();
        let warm = self.args.warmup.min(iters.max(1));
        for _ in 0..warm {
            self.launch(which, count, per, in_place)?;
        }
        self.comm.sync("warm-up")?;
        self.boot.barrier()?;
        let mut times = Vec::new();
        if self.args.graph {
            let g = Graph::capture::<CollError>(s, || {
                for _ in 0..iters {
                    self.launch(which, count, per, in_place)?;
                }
                Ok(())
            })?;
            g.launch(s)?; // warm replay
            self.comm.sync("graph warm replay")?;
            self.boot.barrier()?;
            let reps = 5;
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
            let ev: Vec<Event> = (0..=iters)
                .map(|_| Event::new(ctx))
                .collect::<std::result::Result<_, _>>()?;
            let mut gate = self.gate.borrow_mut();
            let gated = self.args.gate != 0 && iters <= MAX_GATED_ITERS;
            if gated {
                gate.close(s)?;
            }
            let queued = (|| -> Result<()> {
                ev[0].record(s)?;
                for e in &ev[1..] {
                    self.launch(which, count, per, in_place)?;
                    e.record(s)?;
                }
                Ok(())
            })();
            if gated {
                gate.open(); // always, so an error never leaves the stream blocked
            }
            queued?;
            self.comm.sync("timed iterations")?;
            for w in ev.windows(2) {
                times.push(f64::from(w[1].elapsed_ms_since(&w[0])?) * 1000.0);
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
        let wrong = if self.args.check != 0 {
            self.checked_run(which, count, per, in_place)? as i64
        } else {
            -1
        };
        let t = self.timed(which, count, per, in_place, iters)?;
        // mean of the ranks' medians; sum of wrong
        let mine: Vec<u8> = t
            .to_le_bytes()
            .into_iter()
            .chain(wrong.to_le_bytes())
            .collect();
        let all = self.boot.all_gather(&mine)?;
        let mut sum_t = 0.0;
        let mut sum_w = 0i64;
        for b in &all {
            if b.len() != 16 {
                return Err(CollError::invalid("a rank sent a malformed timing"));
            }
            sum_t += f64::from_le_bytes(b[..8].try_into().unwrap_or_default());
            let w = i64::from_le_bytes(b[8..].try_into().unwrap_or_default());
            sum_w = if w < 0 || sum_w < 0 { -1 } else { sum_w + w };
        }
        let time_us = sum_t / all.len() as f64;
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

fn header(args: &Args, n: u32, what: &str) {
    println!("#");
    println!(
        "# {what}: {} {} ranks={n} graph={}",
        args.collective.name(),
        args.dtype.name(),
        args.graph
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
        args.dtype.name(),
        args.collective.redop(),
        if args.collective.has_root() {
            i64::from(args.root)
        } else {
            -1
        },
        c(&r.oop),
        c(&r.ip)
    )
}

/// Run the whole benchmark on this rank. Returns the rows (every rank) and whether any
/// result was wrong.
pub fn run(args: &Args, boot: &dyn Bootstrap, comm: &Comm) -> Result<(Vec<Row>, Vec<Row>, bool)> {
    let n = comm.size();
    let rank0 = comm.rank() == 0;
    if args.collective.has_root() && args.root >= n {
        return Err(CollError::invalid(format!(
            "--root {} is not a rank ({n} ranks)",
            args.root
        )));
    }
    let nccl = if args.compare.is_some() {
        comm.context().bind()?;
        match Nccl::init(boot) {
            Ok(x) => Some(x),
            Err(e) => {
                if rank0 {
                    println!("# NCCL comparison skipped: {e}");
                }
                None
            }
        }
    } else {
        None
    };
    // Input pattern once, for the largest size (every size uses a prefix).
    let cap_elems = comm.capacity() / args.dtype.size();
    let input = check::input_bytes(args.dtype, comm.rank(), cap_elems);
    comm.input().write(0, &input)?;
    drop(input);
    boot.barrier()?;
    let b = Bench {
        gate: std::cell::RefCell::new(Gate::new(comm.context())?),
        args,
        boot,
        comm,
        nccl: nccl.as_ref(),
    };
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut any_wrong = false;
    if rank0 {
        let t = comm.tuning();
        println!(
            "# commhal-gpu-bench: {} ranks, ll_max {} B, {} threads, <= {} blocks, device wait bound {:?}",
            n, t.ll_max, t.threads, t.max_blocks, t.device_timeout
        );
        header(args, n, "commhal");
    }
    for bytes in cli::sizes(args.min_bytes, args.max_bytes, args.step_factor) {
        let (count, per) = cli::counts(args.collective, bytes, args.dtype, n);
        if count == 0 {
            continue;
        }
        let size_bytes = count * args.dtype.size();
        let iters = cli::iters_for(size_bytes, args.iters, args.max_bytes_per_size);
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
                let c = if args.collective.count_is_per_rank() {
                    per
                } else {
                    count
                };
                let (k, g, t) = comm.plan(args.collective, args.dtype, c);
                format!("{k} {g}x{t}")
            } else {
                "nccl".into()
            };
            let row = Row {
                implementation: if which == Impl::Commhal {
                    "commhal"
                } else {
                    "nccl"
                },
                bytes: size_bytes,
                count,
                iters,
                oop,
                ip,
                kernel,
            };
            if rank0 {
                let tag = if which == Impl::Commhal {
                    ""
                } else {
                    "   [nccl]"
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
    if rank0 && !theirs.is_empty() {
        header(args, n, "NCCL");
        for r in &theirs {
            println!("{}", fmt_row(args, r));
        }
        println!("#");
        println!("# ratio nccl_time / commhal_time (> 1: commhal faster)");
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
    Ok((ours, theirs, any_wrong))
}
