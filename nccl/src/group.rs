//! NCCL's group semantics: between `ncclGroupStart` and the outermost `ncclGroupEnd`
//! calls are queued (per thread, as NCCL's groups are); the end runs them. Outside a
//! group a call is a group of one.
//!
//! At the end, the collectives run in the order they were queued, then each
//! communicator's sends and receives of one stream run as one group
//! ([`NcclComm::run_p2p`]: the k-th send from a to b meets b's k-th receive from a).
//! Every rank queues its calls in the same order, so every rank runs them in the same
//! order.

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::Arc;

use crate::abi::{NcclError, NcclResult, SimInfo};
use crate::comm::{Call, NcclComm};
use crate::fallback::Check as _;

/// One queued call.
#[derive(Debug)]
struct Queued {
    comm: Arc<NcclComm>,
    call: Call,
    stream: usize,
}

/// Work to do after the outermost group ran (a fallback op's destruction).
struct Deferred(Box<dyn FnOnce()>);

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deferred")
    }
}

#[derive(Debug, Default)]
struct Group {
    depth: u32,
    queued: Vec<Queued>,
    after: Vec<Deferred>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::default();
}

/// `ncclGroupStart`.
pub fn start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// Leave one level of group; the queue and the deferred work when that was the
/// outermost.
fn close(what: &str) -> Result<(Vec<Queued>, Vec<Deferred>), NcclError> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(NcclError::usage(format!(
                "{what} without a matching ncclGroupStart"
            )));
        }
        g.depth -= 1;
        Ok(if g.depth == 0 {
            (std::mem::take(&mut g.queued), std::mem::take(&mut g.after))
        } else {
            (Vec::new(), Vec::new())
        })
    })
}

/// Run `f` after the outermost group of this thread has run (now, outside a group).
pub fn after_group(f: impl FnOnce() + 'static) {
    let f = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 {
            g.after.push(Deferred(Box::new(f)));
            None
        } else {
            Some(f)
        }
    });
    if let Some(f) = f {
        f();
    }
}

/// `ncclGroupEnd`: run the queue when this ends the outermost group.
pub fn end() -> Result<(), NcclError> {
    let (queued, after) = close("ncclGroupEnd")?;
    let r = run(queued);
    after.into_iter().for_each(|d| (d.0)());
    r
}

/// `ncclGroupSimulateEnd`: end the group without running it; `info.estimated_time` is
/// a rough estimate in microseconds (5 µs per call plus its bytes at 300 GB/s, the
/// NVLink bandwidth commhal's collectives reach on H100).
pub fn simulate_end(info: &mut SimInfo) -> Result<(), NcclError> {
    let (queued, after) = close("ncclGroupSimulateEnd")?;
    after.into_iter().for_each(|d| (d.0)());
    let mut us = 0f64;
    for q in &queued {
        let (count, dtype) = match q.call {
            Call::Coll { count, dtype, .. } | Call::P2p { count, dtype, .. } => (count, dtype),
        };
        let bytes = count as f64 * crate::abi::dtype(dtype).map_or(1.0, |d| d.size() as f64);
        us += 5.0 + bytes / 300e3;
    }
    info.estimated_time = us as f32;
    Ok(())
}

/// Queue `call` (inside a group) or run it now.
pub fn submit(comm: Arc<NcclComm>, call: Call, stream: *mut c_void) -> Result<(), NcclError> {
    let q = Queued {
        comm,
        call,
        stream: stream as usize,
    };
    let q = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 {
            g.queued.push(q);
            None
        } else {
            Some(q)
        }
    });
    match q {
        None => Ok(()),
        Some(q) => run(vec![q]),
    }
}

/// Run a group: collectives in order, then sends and receives per communicator and
/// stream. Every call runs even after one fails; the first error is returned (and kept
/// on its communicator).
fn run(queued: Vec<Queued>) -> Result<(), NcclError> {
    // calls that go to the fallback NCCL meet their peers inside one NCCL group, as the
    // caller grouped them (several devices driven by one thread need that)
    let nccl = if queued.len() > 1 {
        crate::fallback::library().ok().flatten()
    } else {
        None
    };
    if let Some(l) = nccl {
        // SAFETY: NCCL's group start, no arguments.
        unsafe { (l.GroupStart)() };
    }
    let r = run_calls(queued);
    match nccl {
        // SAFETY: closes the group opened above.
        Some(l) => r.and(l.check(
            unsafe { (l.GroupEnd)() },
            std::ptr::null_mut(),
            "ncclGroupEnd",
        )),
        None => r,
    }
}

/// [`run`]'s calls, in order.
fn run_calls(queued: Vec<Queued>) -> Result<(), NcclError> {
    let mut first: Result<(), NcclError> = Ok(());
    let mut keep = |comm: &NcclComm, r: Result<(), NcclError>| {
        if let Err(e) = r {
            comm.note_error(&e);
            if first.is_ok() {
                first = Err(e);
            }
        }
    };
    let mut p2p: Vec<(Arc<NcclComm>, usize, Vec<Call>)> = Vec::new();
    for q in queued {
        match q.call {
            Call::Coll { .. } => {
                let r = q.comm.run_coll(&q.call, q.stream);
                keep(&q.comm, r);
            }
            Call::P2p { .. } => {
                match p2p
                    .iter_mut()
                    .find(|(c, s, _)| Arc::ptr_eq(c, &q.comm) && *s == q.stream)
                {
                    Some((_, _, calls)) => calls.push(q.call),
                    None => p2p.push((q.comm, q.stream, vec![q.call])),
                }
            }
        }
    }
    for (comm, stream, calls) in p2p {
        let r = comm.run_p2p(&calls, stream);
        keep(&comm, r);
    }
    first
}

/// Whether this thread is inside a group (for calls NCCL forbids there).
pub fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// An error for a call the group rules refuse.
pub fn refuse_in_group(what: &str) -> NcclError {
    NcclError::new(
        NcclResult::InvalidUsage,
        format!("{what} cannot be called inside ncclGroupStart/ncclGroupEnd"),
    )
}
