//! Shared test harness: ranks as threads over InProcBootstrap, a case runner that
//! checks results against `sim::reference`.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use commhal_algorithms::builders::{Algorithm, BuildParams, build};
use commhal_algorithms::comm::{CommError, CommOptions, Communicator};
use commhal_algorithms::plan::Collective;
use commhal_algorithms::sim::{POISON, reference, test_inputs};
use commhal_algorithms::{DataType, RedOp};
use commhal_channels::WaitPolicy;
use commhal_hal::bootstrap::{Bootstrap, InProcBootstrap};
use commhal_hal::settings::launch::{BOOTSTRAP_TIMEOUT_MS, RANK, UNIQUE_ID, WORLD_SIZE};

/// Run `f` on `n` ranks (threads), `rpn` ranks per virtual node, with an optional
/// algorithm override.
pub fn with_ranks(n: u32, rpn: u32, algo: Option<&str>, f: impl Fn(&mut Communicator) + Sync) {
    let boots = InProcBootstrap::create_with_timeout(n, Duration::from_secs(20));
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = boots
            .into_iter()
            .map(|b| {
                let algo = algo.map(str::to_string);
                s.spawn(move || {
                    let mut comm = communicator(b, rpn, algo);
                    f(&mut comm);
                })
            })
            .collect();
        for h in hs {
            if let Err(p) = h.join() {
                std::panic::resume_unwind(p);
            }
        }
    });
}

/// The host-emu communicator of the rank of `b` (`rpn` ranks per virtual node, an
/// optional algorithm override), with the harness's wait policy (20 s bound).
pub fn communicator(b: InProcBootstrap, rpn: u32, algo: Option<String>) -> Communicator {
    let rank = b.rank();
    let opts = CommOptions {
        backends: Some(vec!["host-emu".into()]),
        node: Some(rank / rpn),
        algo,
        wait: Some(WaitPolicy {
            spin_for: Duration::from_micros(2),
            yield_for: Duration::from_micros(50),
            timeout: Duration::from_secs(20),
            ..WaitPolicy::for_host(1)
        }),
        ..Default::default()
    };
    let boot: Arc<dyn Bootstrap> = Arc::new(b);
    Communicator::new(boot, opts).expect("communicator")
}

/// One collective call to check.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub coll: Collective,
    pub count: u64,
    pub dtype: DataType,
    pub op: RedOp,
    pub root: u32,
    pub in_place: bool,
    /// Use registered buffers (zero-copy) instead of slices.
    pub registered: bool,
    pub seed: u64,
}

/// Inputs and expected outputs for every rank, via a reference plan.
pub fn expected(n: u32, c: &Case) -> (Vec<Vec<u8>>, Vec<Option<Vec<u8>>>) {
    let algo = match c.coll {
        Collective::AllReduce => Algorithm::AllReduce1pa,
        Collective::AllGather => Algorithm::AllGatherAllPairs,
        Collective::ReduceScatter => Algorithm::ReduceScatterAllPairs,
        Collective::Broadcast => Algorithm::BroadcastDirect,
        Collective::Reduce => Algorithm::ReduceAllPairs,
        Collective::AllToAll => Algorithm::AllToAllAllPairs,
        Collective::SendRecv => Algorithm::SendRecv,
    };
    let mut p = BuildParams::new(n);
    p.root = c.root.min(n - 1);
    let plan = build(algo, &p).expect("reference plan");
    let inputs = test_inputs(&plan, c.count, c.dtype, c.op, c.seed);
    let want = reference(&plan, c.count, c.dtype, c.op, &inputs).expect("reference");
    (inputs, want)
}

/// Run `c` on this rank and compare with the reference; errors describe the mismatch.
pub fn check_case(comm: &mut Communicator, c: &Case) -> Result<(), String> {
    let (n, me) = (comm.size(), comm.rank() as usize);
    let root = c.root.min(n - 1);
    let (inputs, want) = expected(n, c);
    let input = &inputs[me];
    let s = c.dtype.size();
    let cb = c.count as usize * s;
    let (fi, fo) = c.coll.io_factors(n);
    let (ib, ob) = (cb * fi as usize, cb * fo as usize);
    let got: Vec<u8> = if c.in_place {
        let phys = ib.max(ob);
        let mut buf = vec![POISON; phys];
        let at = match c.coll {
            Collective::AllGather => me * cb,
            _ => 0,
        };
        buf[at..at + ib].copy_from_slice(input);
        let res = if c.registered {
            let mut b = comm.alloc(phys).map_err(|e| e.to_string())?;
            b.as_mut_slice().copy_from_slice(&buf);
            let r = call_in_place(comm, c, root, &mut b);
            buf.copy_from_slice(b.as_slice());
            r
        } else {
            call_in_place(comm, c, root, &mut buf[..])
        };
        res.map_err(|e| e.to_string())?;
        match c.coll {
            Collective::ReduceScatter => buf[me * cb..(me + 1) * cb].to_vec(),
            _ => buf[..ob].to_vec(),
        }
    } else if c.registered {
        let mut sb = comm.alloc(ib).map_err(|e| e.to_string())?;
        sb.as_mut_slice().copy_from_slice(input);
        let mut rb = comm.alloc(ob).map_err(|e| e.to_string())?;
        rb.as_mut_slice().fill(POISON);
        call(comm, c, root, (&sb).into(), (&mut rb).into()).map_err(|e| e.to_string())?;
        rb.as_slice().to_vec()
    } else {
        let mut out = vec![POISON; ob];
        call(comm, c, root, input[..].into(), (&mut out[..]).into()).map_err(|e| e.to_string())?;
        out
    };
    if let Some(w) = &want[me]
        && &got != w
    {
        {
            let wrong = (0..w.len() / s.max(1))
                .filter(|&i| got[i * s..(i + 1) * s] != w[i * s..(i + 1) * s])
                .count();
            let first = (0..w.len() / s.max(1))
                .find(|&i| got[i * s..(i + 1) * s] != w[i * s..(i + 1) * s])
                .unwrap_or(0);
            return Err(format!(
                "rank {me}: {wrong} wrong elements, first at {first}: got {} want {}",
                c.dtype.decode(&got, first),
                c.dtype.decode(w, first)
            ));
        }
    }
    Ok(())
}

fn call(
    comm: &mut Communicator,
    c: &Case,
    root: u32,
    send: commhal_algorithms::comm::SendBuf<'_>,
    recv: commhal_algorithms::comm::RecvBuf<'_>,
) -> Result<(), CommError> {
    match c.coll {
        Collective::AllReduce => comm.all_reduce(send, recv, c.count, c.dtype, c.op),
        Collective::AllGather => comm.all_gather(send, recv, c.count, c.dtype),
        Collective::ReduceScatter => comm.reduce_scatter(send, recv, c.count, c.dtype, c.op),
        Collective::Broadcast => comm.broadcast(send, recv, c.count, c.dtype, root),
        Collective::Reduce => comm.reduce(send, recv, c.count, c.dtype, c.op, root),
        Collective::AllToAll => comm.all_to_all(send, recv, c.count, c.dtype),
        Collective::SendRecv => unreachable!(),
    }
}

fn call_in_place<'b>(
    comm: &mut Communicator,
    c: &Case,
    root: u32,
    buf: impl Into<commhal_algorithms::comm::RecvBuf<'b>>,
) -> Result<(), CommError> {
    match c.coll {
        Collective::AllReduce => comm.all_reduce_in_place(buf, c.count, c.dtype, c.op),
        Collective::AllGather => comm.all_gather_in_place(buf, c.count, c.dtype),
        Collective::ReduceScatter => comm.reduce_scatter_in_place(buf, c.count, c.dtype, c.op),
        Collective::Broadcast => comm.broadcast_in_place(buf, c.count, c.dtype, root),
        Collective::Reduce => comm.reduce_in_place(buf, c.count, c.dtype, c.op, root),
        Collective::AllToAll => comm.all_to_all_in_place(buf, c.count, c.dtype),
        Collective::SendRecv => unreachable!(),
    }
}

/// This test binary re-run as rank `r` of `n`: only the test `child`, with `marker`
/// set (the child test checks it), rendezvous at unique id `id`, every bootstrap step
/// bounded by `bootstrap_ms`.
pub fn rank_command(
    child: &str,
    marker: &str,
    r: u32,
    n: u32,
    id: &str,
    bootstrap_ms: u64,
) -> std::process::Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut c = std::process::Command::new(exe);
    c.args(["--exact", child, "--nocapture", "--test-threads", "1"])
        .env(marker, "1")
        .env(RANK.env, r.to_string())
        .env(WORLD_SIZE.env, n.to_string())
        .env(UNIQUE_ID.env, id)
        .env(BOOTSTRAP_TIMEOUT_MS.env, bootstrap_ms.to_string());
    c
}
