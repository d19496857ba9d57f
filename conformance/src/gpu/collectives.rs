//! Case 21 on GPUs: every collective through the GPU communicator
//! ([`commhal_cuda_coll::Comm`], on the caller's buffers and stream), once with the
//! hand-written kernels the sizes select and once through every plan algorithm that
//! implements it, on the links the process selected (`COMMHAL_BACKENDS`: kernels over
//! cuda-nvlink, copy engines over cuda-dma, or both).
//!
//! **Check** (the host cases' inputs and reference, `cases::collectives`): `i32` inputs
//! `(7i + 13r) mod 23 − 11`, exact in any order; outputs poisoned first; every rank
//! compares its whole output with the reference over every rank's input (Reduce: the
//! root). Counts 1, 7, 1001 and
//! 300 001 (LL packets, the mid-size kernels, the bandwidth kernels), out of place and
//! (all but all-to-all and send/recv) in place; sum and max with the kernels, sum with
//! the plans (they reduce with sum only). The quick tier (what runs under
//! compute-sanitizer) runs the kernels only, at 1, 7 and 1001 elements. Every call is
//! bounded by the device wait bound, so a broken link fails the case instead of
//! hanging it.

use std::cell::Cell;
use std::time::Duration;

use commhal_algorithms::RedOp;
use commhal_algorithms::builders::Algorithm;
use commhal_cuda_coll::kernels::ReduceOp;
use commhal_cuda_coll::plan_exec::collective_of;
use commhal_cuda_coll::types::{Collective, Dtype};
use commhal_cuda_coll::{CallBufs, Comm};
use commhal_cuda_rt::DeviceBuffer;
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::settings::host::BACKENDS;
use commhal_hal::{HalError, Result};

use super::world::{Recorder, Verdict, World};
use crate::cases::collectives::{expected, input};

const NUMBER: u32 = 21;
const POISON: u8 = 0xA5;
const ES: u64 = 4; // i32
const COUNTS: [u64; 4] = [1, 7, 1001, 300_001];
const QUICK_COUNTS: [u64; 3] = [1, 7, 1001];

fn err(e: impl std::fmt::Display) -> HalError {
    HalError::invalid(e.to_string())
}

/// Run the collective cases on this rank (every rank, in the same order).
pub fn run_cases(w: &World, rec: &mut Recorder) {
    let links = BACKENDS.text().unwrap_or_else(|| "default".into());
    let counts: &[u64] = if w.quick { &QUICK_COUNTS } else { &COUNTS };
    let n = w.size() as u64;
    let capacity = (n * COUNTS[3] * ES).next_multiple_of(1 << 20);
    let new_comm = || Comm::new(&w.boot, w.device, capacity, None, Duration::from_secs(10));
    let mut comm = match new_comm() {
        Ok(c) => c,
        Err(e) => {
            rec.case(
                format!("collective/links={links}"),
                NUMBER,
                "a GPU communicator",
                || Ok(Verdict::Fail(format!("Comm::new: {e}"))),
            );
            return;
        }
    };
    let mut cases: Vec<(Collective, Option<Algorithm>)> =
        Collective::ALL.into_iter().map(|c| (c, None)).collect();
    if !w.quick {
        // every plan too, except in the quick tier (what runs under compute-sanitizer)
        for algo in Algorithm::ALL {
            if let Some(coll) = Collective::ALL
                .into_iter()
                .find(|&c| collective_of(c) == algo.collective())
            {
                cases.push((coll, Some(algo)));
            }
        }
    }
    for (coll, algo) in cases {
        let name = algo.map_or("kernels", |a| a.short_name());
        let id = format!("collective/coll={},algo={name},links={links}", coll.name());
        // set when a call failed on some rank: the communicator is made anew, so one
        // failed case does not shift the calls of the cases after it
        let broken = Cell::new(false);
        rec.case(
            id,
            NUMBER,
            "every rank's output equals the reference",
            || {
                let Some(algo) = algo else {
                    let ops = [ReduceOp::Sum, ReduceOp::Max];
                    return check_all(&comm, w, coll, counts, &ops, &broken);
                };
                if let Err(e) = comm.set_algorithm(coll, Some((algo, 1))) {
                    return Ok(Verdict::NotSupported(e.to_string()));
                }
                let v = check_all(&comm, w, coll, counts, &[ReduceOp::Sum], &broken);
                comm.set_algorithm(coll, None).map_err(err)?;
                v
            },
        );
        if broken.get() {
            drop(comm);
            comm = match new_comm() {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("collective cases: a new communicator after a failed call: {e}");
                    return;
                }
            };
        }
    }
}

/// Every count and op, out of place and (where NCCL defines it) in place. A wrong
/// result is recorded and the calls go on; after each call the ranks tell each other
/// whether it failed, and a failure anywhere ends the case on every rank (`broken`).
fn check_all(
    comm: &Comm,
    w: &World,
    coll: Collective,
    counts: &[u64],
    ops: &[ReduceOp],
    broken: &Cell<bool>,
) -> Result<Verdict> {
    let places: &[bool] = match coll {
        Collective::Alltoall | Collective::Sendrecv => &[false],
        _ => &[false, true],
    };
    let reduces = matches!(
        coll,
        Collective::Allreduce | Collective::Reducescatter | Collective::Reduce
    );
    let ops = if reduces { ops } else { &ops[..1] };
    let (mut runs, mut first_wrong) = (0, None);
    for &count in counts {
        for &in_place in places {
            for (k, &op) in ops.iter().enumerate() {
                let root = (count as u32 + k as u32) % w.size();
                let got = one(comm, w, coll, count, op, root, in_place);
                if let Err(e) = agree(&w.boot, &got) {
                    broken.set(true);
                    return Err(e);
                }
                if let Ok(Some(m)) = got {
                    first_wrong.get_or_insert_with(|| {
                        format!(
                            "{} of {count} elements, {}, {}, root {root}: {m}",
                            coll.name(),
                            op.name(),
                            if in_place { "in place" } else { "out of place" }
                        )
                    });
                }
                runs += 1;
            }
        }
    }
    Ok(match first_wrong {
        Some(m) => Verdict::Fail(m),
        None => Verdict::Pass(Some(format!("{runs} calls, 0 wrong"))),
    })
}

/// This rank's call outcome against every rank's: `Err` (this rank's error, or which
/// rank failed) when a call failed anywhere.
fn agree(boot: &dyn Bootstrap, mine: &Result<Option<String>>) -> Result<()> {
    let all = boot.all_gather(&[u8::from(mine.is_err())])?;
    if let Err(e) = mine {
        return Err(err(e));
    }
    match all.iter().position(|b| b.first() != Some(&0)) {
        Some(r) => Err(err(format!("the call failed on rank {r}"))),
        None => Ok(()),
    }
}

/// Input and output elements of one rank's call (`count` as `Comm::launch_on`).
fn shape(coll: Collective, n: u32, count: u64) -> (u64, u64) {
    let (fi, fo) = collective_of(coll).io_factors(n);
    (count * u64::from(fi), count * u64::from(fo))
}

fn red_op(op: ReduceOp) -> RedOp {
    match op {
        ReduceOp::Max => RedOp::Max,
        _ => RedOp::Sum,
    }
}

/// One call; `Some(what is wrong)` when this rank's output differs.
fn one(
    comm: &Comm,
    w: &World,
    coll: Collective,
    count: u64,
    op: ReduceOp,
    root: u32,
    in_place: bool,
) -> Result<Option<String>> {
    let (n, me) = (w.size(), w.rank());
    let (ie, oe) = shape(coll, n, count);
    let mine = input(me, ie);
    // In place, one buffer: all-gather's input at chunk `me` of the output,
    // reduce-scatter's output at chunk `me` of the input (NCCL's layout).
    let len = ie.max(oe) * ES;
    let buf = DeviceBuffer::new(comm.context(), len).map_err(err)?;
    let out_buf = DeviceBuffer::new(comm.context(), oe * ES).map_err(err)?;
    buf.fill(POISON).map_err(err)?;
    out_buf.fill(POISON).map_err(err)?;
    let chunk = count * ES;
    let bufs = if !in_place {
        buf.write(0, &mine).map_err(err)?;
        CallBufs {
            send: buf.addr(),
            recv: out_buf.addr(),
        }
    } else {
        match coll {
            Collective::Allgather => {
                buf.write(u64::from(me) * chunk, &mine).map_err(err)?;
                CallBufs {
                    send: buf.addr() + u64::from(me) * chunk,
                    recv: buf.addr(),
                }
            }
            Collective::Reducescatter => {
                buf.write(0, &mine).map_err(err)?;
                CallBufs {
                    send: buf.addr(),
                    recv: buf.addr() + u64::from(me) * chunk,
                }
            }
            _ => {
                buf.write(0, &mine).map_err(err)?;
                CallBufs {
                    send: buf.addr(),
                    recv: buf.addr(),
                }
            }
        }
    };
    comm.launch_on(coll, Dtype::Int32, op, count, root, bufs, comm.stream())
        .map_err(err)?;
    comm.sync("a conformance collective").map_err(err)?;
    let want = expected(collective_of(coll), n, me, count, red_op(op), root)
        .map_err(|f| err(format!("{f:?}")))?;
    let Some(want) = want else {
        return Ok(None);
    };
    let mut got = vec![0u8; want.len()];
    let (src, at) = match (in_place, coll) {
        (false, _) => (&out_buf, 0),
        (true, Collective::Reducescatter) => (&buf, u64::from(me) * chunk),
        (true, _) => (&buf, 0),
    };
    src.read(at, &mut got).map_err(err)?;
    let wrong = got
        .chunks_exact(4)
        .zip(want.chunks_exact(4))
        .filter(|(a, b)| a != b)
        .count();
    Ok((wrong > 0).then(|| {
        let first = got
            .chunks_exact(4)
            .zip(want.chunks_exact(4))
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        format!("{wrong} wrong elements on rank {me}, the first at {first}")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use commhal_hal::bootstrap::InProcBootstrap;

    /// One rank's failed call ends the case on every rank; a wrong result does not.
    #[test]
    fn a_failed_call_anywhere_fails_every_rank() {
        let out = InProcBootstrap::run(3, |b| {
            let mine = match b.rank() {
                1 => Err(err("rank 1's call failed")),
                2 => Ok(Some("3 wrong elements".to_string())),
                _ => Ok(None),
            };
            agree(&b, &mine).map_err(|e| e.to_string())
        });
        assert!(
            out[0].as_ref().unwrap_err().contains("failed on rank 1"),
            "{out:?}"
        );
        assert!(
            out[1]
                .as_ref()
                .unwrap_err()
                .contains("rank 1's call failed"),
            "{out:?}"
        );
        assert!(
            out[2].as_ref().unwrap_err().contains("failed on rank 1"),
            "{out:?}"
        );
        let out = InProcBootstrap::run(2, |b| {
            let mine = Ok(Some("wrong".to_string()));
            agree(&b, &mine).is_ok()
        });
        assert_eq!(out, vec![true, true]);
    }
}
