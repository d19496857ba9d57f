//! Collective cases (21, 22): every collective through every algorithm the builders
//! offer, forced with [`CommOptions::algo`], on a [`Communicator`] built over the case's
//! bootstrap; and a peer that leaves mid-collective.
//!
//! **Where they run.** host-emu: every rank on one node (memory channels, LL packets,
//! semaphores in mapped memory). host-tcp: the ranks split over two virtual nodes, so
//! every link between the nodes is a host-tcp port channel (host-emu memory inside a
//! node, as the communicator always does). ib-verbs: the same two virtual nodes with
//! ib-verbs port channels between them (the communicator's backend list is
//! `host-emu,ib-verbs`; in CI the verbs provider is the stub, never an RDMA device).
//! Every algorithm runs there as forced: the
//! builders put every channel op between nodes on a port channel
//! (`builders::ports_across_nodes`), so none is replaced by the ring the communicator
//! falls back to for a plan that cannot cross nodes.
//!
//! **Check.** Every count runs out of place and in place (send/recv: out of place only).
//! Inputs are small signed `i32`s (`(7i + 13r) mod 23 − 11`), so sums, minima and maxima
//! are exact in any order; every rank compares its whole output, poisoned before the call, with [`reference_reduce`] over every rank's input (or with the
//! gathered / scattered / broadcast bytes). Zero wrong elements are allowed.
//!
//! **Faults.** The case hands the run's backend options (e.g. host-emu's test-only
//! `faults = "detached-mapping"`) to the communicator, so a broken backend fails the
//! case; every wait of the communicator is bounded by the plan's wait timeout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use commhal_algorithms::builders::Algorithm;
use commhal_algorithms::comm::{CommOptions, Communicator};
use commhal_algorithms::plan::Collective;
use commhal_algorithms::{DataType, RedOp, reference_reduce};
use commhal_channels::WaitPolicy;
use commhal_hal::DeviceKind;

use crate::case::{CaseResult, Failure};
use crate::world::Ctx;
use crate::{ensure, fail};

/// Byte every output is filled with before a call.
const POISON: u8 = 0xA5;
const DTYPE: DataType = DataType::I32;

/// How the ranks are laid out for a collective case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Every rank on one node (host-emu).
    OneNode,
    /// Two virtual nodes of `ranks / 2` ranks, ports of the run's backend between them
    /// (host-tcp, or ib-verbs).
    TwoNodes,
}

impl Layout {
    /// The layout the collective cases of `backend` use (`None`: no collective cases).
    pub fn for_backend(backend: &str) -> Option<Layout> {
        match backend {
            "host-emu" => Some(Layout::OneNode),
            "host-tcp" | "ib-verbs" => Some(Layout::TwoNodes),
            _ => None,
        }
    }

    /// The id parameter.
    pub fn param(self) -> &'static str {
        match self {
            Layout::OneNode => "nodes=1",
            Layout::TwoNodes => "nodes=2",
        }
    }
}

/// Element counts of one case.
pub fn counts(quick: bool) -> Vec<u64> {
    if quick {
        vec![1, 7, 1001]
    } else {
        vec![0, 1, 7, 1001, 65_537]
    }
}

/// Rank `rank`'s input of `len` elements (`i32`, exact in any reduction order).
pub(crate) fn input(rank: u32, len: u64) -> Vec<u8> {
    (0..len)
        .flat_map(|i| {
            let v = ((i * 7 + u64::from(rank) * 13) % 23) as i32 - 11;
            v.to_le_bytes()
        })
        .collect()
}

fn op_for(k: usize) -> RedOp {
    [RedOp::Sum, RedOp::Max, RedOp::Min][k % 3]
}

/// The communicator every rank of the case joins.
fn communicator(
    ctx: &Ctx,
    layout: Layout,
    algo: Option<Algorithm>,
    wait: Duration,
) -> Result<Communicator, Failure> {
    let rpn = match layout {
        Layout::OneNode => ctx.size,
        Layout::TwoNodes => ctx.size / 2,
    };
    let mut backend_options = BTreeMap::new();
    let mut backends = vec!["host-emu".to_string()];
    if matches!(ctx.plan.backend.as_str(), "host-emu" | "ib-verbs") {
        let o = ctx.plan.options().map_err(Failure::Fail)?;
        backend_options.insert(ctx.plan.backend.clone(), o);
    }
    if ctx.plan.backend == "ib-verbs" {
        // The cross-node port backend: the first port backend of the list that reaches
        // the other node (host-emu's does not).
        backends.push(ctx.plan.backend.clone());
    }
    let opts = CommOptions {
        backends: Some(backends),
        node: Some(ctx.rank / rpn.max(1)),
        algo: algo.map(|a| a.full_name()),
        wait: Some(WaitPolicy::with_timeout(wait)),
        backend_options,
        ..Default::default()
    };
    let comm = Communicator::new(ctx.boot.clone(), opts)
        .map_err(|e| Failure::Fail(format!("creating the communicator: {e}")))?;
    if layout == Layout::TwoNodes {
        // Ports between the nodes come from the run's backend (host-tcp: the default).
        let want = ctx.plan.backend.as_str();
        ensure!(
            comm.port_backend() == Some(want),
            "rank {}: the ports between the nodes are {:?}, not `{want}`",
            ctx.rank,
            comm.port_backend()
        );
    }
    Ok(comm)
}

/// Not-supported reasons that hold on every rank alike.
fn gaps(ctx: &Ctx, layout: Layout) -> Result<(), Failure> {
    if ctx.device.kind != DeviceKind::Host {
        return Err(Failure::NotSupported(
            "collective cases run on host ranks; GPU collectives are checked by commhal-gpu-bench"
                .into(),
        ));
    }
    if layout == Layout::TwoNodes && (ctx.size < 2 || !ctx.size.is_multiple_of(2)) {
        return Err(Failure::NotSupported(format!(
            "two virtual nodes need an even number of ranks, not {}",
            ctx.size
        )));
    }
    Ok(())
}

/// What rank `me` must hold after `coll` of `count` elements (NCCL's counts) with `op`
/// and `root`, from every rank's [`input`] (`None`: nothing defined, e.g. a non-root
/// rank of Reduce). The GPU collective cases check against it too.
pub(crate) fn expected(
    coll: Collective,
    n: u32,
    me: u32,
    count: u64,
    op: RedOp,
    root: u32,
) -> Result<Option<Vec<u8>>, Failure> {
    let s = DTYPE.size();
    let cb = count as usize * s;
    let (fi, _) = coll.io_factors(n);
    let ins: Vec<Vec<u8>> = (0..n).map(|r| input(r, count * u64::from(fi))).collect();
    let refs: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
    let reduced = || {
        reference_reduce(&refs, DTYPE, op)
            .map_err(|e| Failure::Fail(format!("the host reference failed: {e}")))
    };
    let me_us = me as usize;
    Ok(match coll {
        Collective::AllReduce => Some(reduced()?),
        Collective::Reduce => (me == root).then(reduced).transpose()?,
        Collective::ReduceScatter => Some(reduced()?[me_us * cb..(me_us + 1) * cb].to_vec()),
        Collective::AllGather => Some(ins.concat()),
        Collective::Broadcast => Some(ins[root as usize].clone()),
        Collective::AllToAll => Some(
            ins.iter()
                .flat_map(|i| i[me_us * cb..(me_us + 1) * cb].to_vec())
                .collect(),
        ),
        Collective::SendRecv => Some(ins[((me + n - 1) % n) as usize].clone()),
    })
}

fn call(
    comm: &mut Communicator,
    coll: Collective,
    send: &[u8],
    out: &mut [u8],
    count: u64,
    op: RedOp,
    root: u32,
) -> Result<(), String> {
    let (me, n) = (comm.rank(), comm.size());
    let r = match coll {
        Collective::AllReduce => comm.all_reduce(send, out, count, DTYPE, op),
        Collective::AllGather => comm.all_gather(send, out, count, DTYPE),
        Collective::ReduceScatter => comm.reduce_scatter(send, out, count, DTYPE, op),
        Collective::Broadcast => comm.broadcast(send, out, count, DTYPE, root),
        Collective::Reduce => comm.reduce(send, out, count, DTYPE, op, root),
        Collective::AllToAll => comm.all_to_all(send, out, count, DTYPE),
        Collective::SendRecv => {
            // A ring: send to the next rank, receive from the previous one, together.
            let mut g = comm.group_start();
            g.send((me + 1) % n, send).and_then(|()| {
                g.recv((me + n - 1) % n, out)?;
                g.group_end()
            })
        }
    };
    r.map_err(|e| e.to_string())
}

fn call_in_place(
    comm: &mut Communicator,
    coll: Collective,
    buf: &mut [u8],
    count: u64,
    op: RedOp,
    root: u32,
) -> Result<(), String> {
    let r = match coll {
        Collective::AllReduce => comm.all_reduce_in_place(buf, count, DTYPE, op),
        Collective::AllGather => comm.all_gather_in_place(buf, count, DTYPE),
        Collective::ReduceScatter => comm.reduce_scatter_in_place(buf, count, DTYPE, op),
        Collective::Broadcast => comm.broadcast_in_place(buf, count, DTYPE, root),
        Collective::Reduce => comm.reduce_in_place(buf, count, DTYPE, op, root),
        Collective::AllToAll => comm.all_to_all_in_place(buf, count, DTYPE),
        Collective::SendRecv => return Err("send/recv has no in-place form".into()),
    };
    r.map_err(|e| e.to_string())
}

/// Tell every other rank whether this step (case tag `k`) succeeded here and hear the
/// same from them, each receive bounded by the wait timeout. A rank whose call
/// succeeded must not go on to the next call while a peer has given up: the
/// communicator's next agreement is a bootstrap exchange bounded only by the (much
/// longer) bootstrap timeout, which would turn a detected fault into a hang.
fn settle<T>(ctx: &Ctx, k: u64, mine: Result<T, Failure>) -> Result<T, Failure> {
    let word: &[u8] = match &mine {
        Ok(_) => b"ok",
        Err(_) => b"failed",
    };
    let peers = (0..ctx.size).filter(|&q| q != ctx.rank);
    for q in peers.clone() {
        if let Err(e) = ctx.send(q, k, word) {
            return mine.and(Err(Failure::Fail(format!(
                "telling rank {q} how step {k} went: {e}"
            ))));
        }
    }
    let mut failed = Vec::new();
    for q in peers {
        match ctx.recv(q, k) {
            Ok(w) if w == b"ok" => {}
            Ok(_) => failed.push(format!("rank {q} failed")),
            Err(e) => failed.push(format!("no word from rank {q}: {e}")),
        }
    }
    let v = mine?;
    if failed.is_empty() {
        Ok(v)
    } else {
        Err(Failure::Fail(format!(
            "step {k} passed on rank {} but not everywhere: {}",
            ctx.rank,
            failed.join("; ")
        )))
    }
}

/// One call of `algo` on `count` elements (in place: one buffer holding the input where
/// the collective's in-place layout puts it), checked exactly on this rank.
fn step(
    ctx: &Ctx,
    comm: &mut Communicator,
    algo: Algorithm,
    count: u64,
    op: RedOp,
    in_place: bool,
) -> Result<(), Failure> {
    let coll = algo.collective();
    let (n, s) = (ctx.size, DTYPE.size());
    let root = n - 1;
    let (fi, fo) = coll.io_factors(n);
    let send = input(ctx.rank, count * u64::from(fi));
    let (me, cb) = (ctx.rank as usize, count as usize * s);
    let ob = cb * fo as usize;
    let what = if in_place { "in place" } else { "out of place" };
    let failed = |e: String| {
        Failure::Fail(format!(
            "{} of {count} {DTYPE} ({op:?}, {what}) on rank {}: {e}",
            algo.full_name(),
            ctx.rank
        ))
    };
    let out = if in_place {
        let mut buf = vec![POISON; send.len().max(ob)];
        let at = if coll == Collective::AllGather {
            me * cb
        } else {
            0
        };
        buf[at..at + send.len()].copy_from_slice(&send);
        call_in_place(comm, coll, &mut buf, count, op, root).map_err(failed)?;
        match coll {
            Collective::ReduceScatter => buf[me * cb..(me + 1) * cb].to_vec(),
            _ => buf[..ob].to_vec(),
        }
    } else {
        let mut out = vec![POISON; ob];
        call(comm, coll, &send, &mut out, count, op, root).map_err(failed)?;
        out
    };
    let Some(want) = expected(coll, n, ctx.rank, count, op, root)? else {
        return Ok(());
    };
    if out != want {
        let wrong: Vec<usize> = (0..want.len() / s)
            .filter(|&i| out[i * s..(i + 1) * s] != want[i * s..(i + 1) * s])
            .collect();
        let first = wrong.first().copied().unwrap_or(0);
        let at = |b: &[u8]| {
            b.get(first * s..(first + 1) * s)
                .and_then(|w| w.try_into().ok())
                .map_or(0, i32::from_le_bytes)
        };
        fail!(
            "{} of {count} {DTYPE} ({op:?}, {what}) on rank {}: {} wrong elements, first at {first}: got {} want {}",
            algo.full_name(),
            ctx.rank,
            wrong.len(),
            at(&out),
            at(&want)
        );
    }
    Ok(())
}

/// 21: `algo` on every count of the plan; every rank checks its output exactly.
pub fn collective(ctx: &Ctx, layout: Layout, algo: Algorithm) -> CaseResult {
    gaps(ctx, layout)?;
    let coll = algo.collective();
    let comm = communicator(ctx, layout, Some(algo), ctx.plan.wait_timeout());
    let mut comm = settle(ctx, 0, comm)?;
    if coll != Collective::SendRecv {
        let picked = comm
            .algorithm_for(coll, 1, DTYPE)
            .map_err(|e| Failure::Fail(format!("selecting: {e}")))?;
        ensure!(
            picked == algo,
            "forcing {} selected {} instead",
            algo.full_name(),
            picked.full_name()
        );
    }
    let cs = counts(ctx.plan.quick);
    // Send/recv has no in-place form.
    let placements: &[bool] = if coll == Collective::SendRecv {
        &[false]
    } else {
        &[false, true]
    };
    let mut k = 0;
    for (i, &count) in cs.iter().enumerate() {
        for &in_place in placements {
            k += 1;
            let r = step(ctx, &mut comm, algo, count, op_for(i), in_place);
            settle(ctx, k, r)?;
        }
    }
    let ports = match comm.port_backend() {
        Some(name) => {
            let st = comm.port_stats();
            format!(
                "; rank {} over {name}: {} writes, {} bytes, {} signals",
                ctx.rank, st.writes, st.bytes, st.signals
            )
        }
        None => String::new(),
    };
    Ok(Some(format!(
        "counts {cs:?}, {}{ports}",
        if placements.len() == 2 {
            "out of place and in place"
        } else {
            "out of place"
        }
    )))
}

/// 22: rank n−1 takes part in one all-reduce, then leaves without joining the next
/// (its case returns, as a crashed or hung rank looks to the others); every other rank's
/// pending call must fail within the bound, never pass and never hang. The case's waits
/// are bounded by `min(wait timeout, 2 s)` so the expected timeout stays short.
pub fn dead_peer(ctx: &Ctx, layout: Layout) -> CaseResult {
    gaps(ctx, layout)?;
    let wait = ctx.plan.wait_timeout().min(Duration::from_secs(2));
    let bound = wait * 3 + Duration::from_secs(5);
    let leaver = ctx.size - 1;
    let mut comm = communicator(ctx, layout, None, wait)?;
    let count = 1001u64;
    let send = input(ctx.rank, count);
    let mut out = vec![POISON; send.len()];
    call(
        &mut comm,
        Collective::AllReduce,
        &send,
        &mut out,
        count,
        RedOp::Sum,
        0,
    )
    .map_err(|e| Failure::Fail(format!("the first all-reduce (every rank present): {e}")))?;
    ctx.boot
        .barrier()
        .map_err(|e| Failure::Fail(format!("barrier after the first all-reduce: {e}")))?;
    if ctx.rank == leaver {
        drop(comm);
        return Ok(Some("left after the first all-reduce".into()));
    }
    let start = Instant::now();
    let r = call(
        &mut comm,
        Collective::AllReduce,
        &send,
        &mut out,
        count,
        RedOp::Sum,
        0,
    );
    let took = start.elapsed();
    match r {
        Ok(()) => fail!(
            "an all-reduce without rank {leaver} returned success after {took:?}: a missing peer must be an error"
        ),
        Err(e) => {
            ensure!(
                took <= bound,
                "the all-reduce without rank {leaver} failed only after {took:?} (bound {bound:?}): {e}"
            );
            Ok(Some(format!(
                "failed after {:.1} s: {e}",
                took.as_secs_f64()
            )))
        }
    }
}
