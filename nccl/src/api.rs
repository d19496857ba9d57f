//! The exported C functions: NCCL 2.28's API. Each one checks its pointers, resolves
//! the communicator handle, calls into [`crate::comm`] / [`crate::group`] /
//! [`crate::memory`], and turns the outcome into an `ncclResult_t`, keeping the message
//! for `ncclGetLastError`. No panic crosses this boundary (every body runs under
//! `catch_unwind`).
//!
//! # Safety (every function)
//! The caller passes what NCCL's header documents: valid out-pointers, device buffers
//! of the stated size, a live CUDA stream of the communicator's device (or null), and a
//! communicator this library returned and has not destroyed. Handles are checked
//! against the live set, so a destroyed or foreign `ncclComm_t` gets an error rather
//! than a crash.
#![allow(clippy::missing_safety_doc)]

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::{CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock};

use commhal_cuda_coll::CallBufs;
use commhal_cuda_coll::types::Collective;

use crate::abi::{
    self, CONFIG_UNDEF_INT, CommHandle, ConfigHead, NcclError, NcclResult, SimInfo, UniqueIdBytes,
};
use crate::comm::{Call, NcclComm, OpUse};
use crate::fallback::{Check as _, FallbackComm};
use crate::{group, memory, settings};

type Stream = *mut c_void;

// ---------------------------------------------------------------- handles and errors

fn live() -> &'static Mutex<HashSet<usize>> {
    static LIVE: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

fn last_global() -> &'static Mutex<String> {
    static LAST: OnceLock<Mutex<String>> = OnceLock::new();
    LAST.get_or_init(Default::default)
}

thread_local! {
    /// The last error on this thread (what `ncclGetLastError(NULL)` shows first).
    static LAST_HERE: RefCell<Option<String>> = const { RefCell::new(None) };
    /// The string `ncclGetLastError` last returned on this thread (valid until the
    /// thread's next call).
    static RETURNED: RefCell<CString> = RefCell::new(CString::default());
}

/// Hand a new communicator to C.
fn publish(c: Arc<NcclComm>) -> CommHandle {
    let p = Arc::into_raw(c) as CommHandle;
    if let Ok(mut l) = live().lock() {
        l.insert(p as usize);
    }
    p
}

/// The communicator behind `h`, if it is live.
fn resolve(h: CommHandle) -> Result<Arc<NcclComm>, NcclError> {
    if h.is_null() {
        return Err(NcclError::invalid("the communicator is NULL"));
    }
    let l = live()
        .lock()
        .map_err(|_| NcclError::new(NcclResult::InternalError, "handle table poisoned"))?;
    if !l.contains(&(h as usize)) {
        return Err(NcclError::invalid(format!(
            "communicator {h:p} is not a live communicator of this library (destroyed, or made by another NCCL library)"
        )));
    }
    let p = h as *const NcclComm;
    // SAFETY: `p` came from `Arc::into_raw` in `publish` and is still in the live set
    // (checked under its lock), so the Arc it stands for holds a strong count; we add
    // one for the Arc made here.
    unsafe {
        Arc::increment_strong_count(p);
        Ok(Arc::from_raw(p))
    }
}

/// The fallback library when `h` is not one of ours but a communicator of the fallback
/// NCCL: NCCL calling its own exported functions, which the preload routes here.
fn foreign(h: CommHandle) -> Option<&'static crate::fallback::Nccl> {
    if h.is_null()
        || live().lock().map_or(true, |l| l.contains(&(h as usize)))
        || !crate::fallback::is_theirs(h)
    {
        return None;
    }
    let lib = crate::fallback::library().ok().flatten()?;
    settings::log(|| format!("passing {h:p} (the fallback NCCL's own communicator) back to it"));
    Some(lib)
}

/// Take `h` out of the live set and return the Arc `publish` leaked (once: a second
/// destroy of the same handle finds it gone).
fn retire(h: CommHandle) -> Result<Arc<NcclComm>, NcclError> {
    if h.is_null() {
        return Err(NcclError::invalid("the communicator is NULL"));
    }
    let mut l = live()
        .lock()
        .map_err(|_| NcclError::new(NcclResult::InternalError, "handle table poisoned"))?;
    if !l.remove(&(h as usize)) {
        return Err(NcclError::invalid(format!(
            "communicator {h:p} is not a live communicator of this library (destroyed, or made by another NCCL library)"
        )));
    }
    // SAFETY: `h` came from `Arc::into_raw` in `publish` and was in the live set, which
    // this call alone removed it from (under the lock): the leaked reference is taken
    // back exactly once.
    Ok(unsafe { Arc::from_raw(h as *const NcclComm) })
}

/// Run `f` as the body of the C function `name`: errors become codes and are kept for
/// `ncclGetLastError`; a panic becomes `ncclInternalError`.
fn entry(
    name: &'static str,
    comm: CommHandle,
    f: impl FnOnce() -> Result<(), NcclError>,
) -> NcclResult {
    let r = match crate::profile::timed(name, || catch_unwind(AssertUnwindSafe(f))) {
        Ok(r) => r,
        Err(_) => Err(NcclError::new(
            NcclResult::InternalError,
            "a bug in libcommhal_nccl (it panicked); please report it with COMMHAL_DEBUG=1 output",
        )),
    };
    match r {
        Ok(()) => NcclResult::Success,
        Err(mut e) => {
            e.msg = format!("{name}: {}", e.msg);
            if let Ok(c) = resolve(comm) {
                c.note_error(&e);
            } else {
                settings::log(|| format!("error: {}", e.msg));
            }
            LAST_HERE.with(|l| *l.borrow_mut() = Some(e.msg.clone()));
            if let Ok(mut g) = last_global().lock() {
                g.clone_from(&e.msg);
            }
            e.code
        }
    }
}

fn out<T>(p: *mut T, what: &str) -> Result<&'static mut T, NcclError> {
    // SAFETY: non-null checked here; validity and lifetime for the call are the
    // caller's contract (see the module docs).
    unsafe { p.as_mut() }.ok_or_else(|| NcclError::invalid(format!("{what} is NULL")))
}

fn blocking_of(config: *const ConfigHead) -> Result<bool, NcclError> {
    // SAFETY: null or a caller's ncclConfig_t (the module docs); only its leading
    // fields, present in every version, are read.
    let Some(c) = (unsafe { config.as_ref() }) else {
        return Ok(true);
    };
    if c.magic != abi::API_MAGIC || c.size < std::mem::size_of::<ConfigHead>() {
        return Err(NcclError::invalid(
            "config is not initialised: start from NCCL_CONFIG_INITIALIZER",
        ));
    }
    Ok(c.blocking == CONFIG_UNDEF_INT || c.blocking != 0)
}

fn init_result(c: &Arc<NcclComm>, blocking: bool) -> NcclResult {
    if blocking {
        NcclResult::Success
    } else {
        c.async_error()
    }
}

// ---------------------------------------------------------------- setup and teardown

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> NcclResult {
    entry("ncclGetVersion", std::ptr::null_mut(), || {
        *out(version, "version")? = abi::VERSION_CODE;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut UniqueIdBytes) -> NcclResult {
    entry("ncclGetUniqueId", std::ptr::null_mut(), || {
        let id = out(id, "uniqueId")?;
        *id = crate::comm::new_id()?;
        Ok(())
    })
}

fn init_rank_config(
    comm: *mut CommHandle,
    nranks: c_int,
    id: &UniqueIdBytes,
    rank: c_int,
    config: *const ConfigHead,
) -> NcclResult {
    let mut code = NcclResult::Success;
    let r = entry("ncclCommInitRank", std::ptr::null_mut(), || {
        let slot = out(comm, "comm")?;
        *slot = std::ptr::null_mut();
        let blocking = blocking_of(config)?;
        let c = NcclComm::init(nranks, id, rank, blocking)?;
        code = init_result(&c, blocking);
        *slot = publish(c);
        Ok(())
    });
    if r == NcclResult::Success { code } else { r }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut CommHandle,
    nranks: c_int,
    id: UniqueIdBytes,
    rank: c_int,
) -> NcclResult {
    init_rank_config(comm, nranks, &id, rank, std::ptr::null())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut CommHandle,
    nranks: c_int,
    id: UniqueIdBytes,
    rank: c_int,
    config: *mut ConfigHead,
) -> NcclResult {
    init_rank_config(comm, nranks, &id, rank, config)
}

/// Several ids speed up NCCL's own bootstrap at scale; commhal's needs one, the first.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankScalable(
    comm: *mut CommHandle,
    nranks: c_int,
    rank: c_int,
    n_id: c_int,
    ids: *mut UniqueIdBytes,
    config: *mut ConfigHead,
) -> NcclResult {
    if n_id < 1 || ids.is_null() {
        return entry("ncclCommInitRankScalable", std::ptr::null_mut(), || {
            Err(NcclError::invalid(format!(
                "nId {n_id} with commIds {ids:p}: pass at least one id"
            )))
        });
    }
    // SAFETY: non-null, and the caller passes nId >= 1 ids (NCCL's contract).
    let first = unsafe { *ids };
    init_rank_config(comm, nranks, &first, rank, config)
}

/// One process driving several GPUs: NCCL's own (fallback) communicators; commhal runs
/// one process per GPU.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut CommHandle,
    ndev: c_int,
    devlist: *const c_int,
) -> NcclResult {
    entry("ncclCommInitAll", std::ptr::null_mut(), || {
        if comms.is_null() || ndev < 1 {
            return Err(NcclError::invalid(format!(
                "comms {comms:p} for {ndev} devices: pass an array of ndev >= 1 handles"
            )));
        }
        let Some(lib) = crate::fallback::library()? else {
            return Err(NcclError::usage(
                "commhal runs one process per GPU; ncclCommInitAll (one process, several GPUs) runs only on the fallback NCCL: set COMMHAL_NCCL_FALLBACK",
            ));
        };
        let mut raws = vec![std::ptr::null_mut(); ndev as usize];
        // SAFETY: `raws` holds ndev handles; devlist is null or ndev ints (the caller's).
        let r = crate::fallback::making(|| unsafe {
            (lib.CommInitAll)(raws.as_mut_ptr(), ndev, devlist)
        });
        lib.check(r, std::ptr::null_mut(), "ncclCommInitAll")?;
        for (i, raw) in raws.into_iter().enumerate() {
            let dev = if devlist.is_null() {
                i as u32
            } else {
                // SAFETY: i < ndev entries of the caller's list.
                unsafe { *devlist.add(i) }.max(0) as u32
            };
            let fb = FallbackComm::new(lib, raw);
            let c = NcclComm::fallback_only(fb, i as u32, ndev as u32, dev, "ncclCommInitAll")?;
            // SAFETY: i < ndev entries of the caller's array.
            unsafe { *comms.add(i) = publish(c) };
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommSplit(
    comm: CommHandle,
    color: c_int,
    key: c_int,
    newcomm: *mut CommHandle,
    config: *mut ConfigHead,
) -> NcclResult {
    let mut code = NcclResult::Success;
    let r = entry("ncclCommSplit", comm, || {
        let slot = out(newcomm, "newcomm")?;
        *slot = std::ptr::null_mut();
        if group::in_group() {
            return Err(group::refuse_in_group("ncclCommSplit"));
        }
        if color < abi::SPLIT_NOCOLOR {
            return Err(NcclError::invalid(format!(
                "color {color}: pass a colour >= 0 or NCCL_SPLIT_NOCOLOR (-1)"
            )));
        }
        let c = resolve(comm)?;
        let blocking = blocking_of(config)?;
        let color = (color >= 0).then_some(color as u32);
        if let Some(sub) = c.split(color, key, blocking)? {
            code = init_result(&sub, blocking);
            *slot = publish(sub);
        }
        Ok(())
    });
    if r == NcclResult::Success { code } else { r }
}

/// NCCL's fault-tolerance path (drop failed ranks): the fallback's communicator alone.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommShrink(
    comm: CommHandle,
    exclude: *mut c_int,
    n_exclude: c_int,
    newcomm: *mut CommHandle,
    config: *mut ConfigHead,
    flags: c_int,
) -> NcclResult {
    entry("ncclCommShrink", comm, || {
        let slot = out(newcomm, "newcomm")?;
        *slot = std::ptr::null_mut();
        let c = resolve(comm)?;
        let ready = c.ready()?;
        let Some(fb) = &ready.fallback else {
            return Err(NcclError::usage(
                "ncclCommShrink runs only on the fallback NCCL: set COMMHAL_NCCL_FALLBACK",
            ));
        };
        let Some(f) = fb.lib.CommShrink else {
            return Err(NcclError::usage(
                "the fallback NCCL has no ncclCommShrink (NCCL >= 2.27 has)",
            ));
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: the caller's arguments, unchanged, on a live communicator.
        let r = crate::fallback::making(|| unsafe {
            f(fb.raw, exclude, n_exclude, &mut raw, config.cast(), flags)
        });
        // a non-blocking config makes NCCL answer "in progress": the new communicator
        // exists, and its async error says when it is ready
        if r != NcclResult::InProgress as c_int {
            fb.lib.check(r, fb.raw, "ncclCommShrink")?;
        }
        if !raw.is_null() {
            let fb = FallbackComm::new(fb.lib, raw);
            let (rank, size) = fb.rank_and_size()?;
            *slot = publish(NcclComm::fallback_only(
                fb,
                rank,
                size,
                c.device,
                "ncclCommShrink",
            )?);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommFinalize(comm: CommHandle) -> NcclResult {
    if let Some(l) = foreign(comm) {
        // SAFETY: the fallback's own communicator, passed back unchanged.
        return NcclResult::from_raw(unsafe { (l.CommFinalize)(comm) });
    }
    entry("ncclCommFinalize", comm, || resolve(comm)?.teardown(false))
}

type CommCall = unsafe extern "C" fn(*mut c_void) -> c_int;

/// `ncclCommDestroy` (`abort == false`) / `ncclCommAbort`: retire the handle, wait for
/// (or, aborting, stop) the device's work, free. NULL is a no-op, as in NCCL.
fn end_comm(
    name: &'static str,
    comm: CommHandle,
    theirs: impl FnOnce(&crate::fallback::Nccl) -> CommCall,
    abort: bool,
) -> NcclResult {
    if let Some(l) = foreign(comm) {
        // SAFETY: the fallback's own communicator, passed back unchanged to the
        // fallback's function of the same name.
        return NcclResult::from_raw(unsafe { theirs(l)(comm) });
    }
    if comm.is_null() {
        return NcclResult::Success;
    }
    let r = entry(name, comm, || retire(comm)?.teardown(abort));
    crate::profile::report();
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommDestroy(comm: CommHandle) -> NcclResult {
    end_comm("ncclCommDestroy", comm, |l| l.CommDestroy, false)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommAbort(comm: CommHandle) -> NcclResult {
    end_comm("ncclCommAbort", comm, |l| l.CommAbort, true)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: CommHandle,
    err: *mut NcclResult,
) -> NcclResult {
    if let Some(l) = foreign(comm) {
        // SAFETY: the fallback's own communicator and the caller's out-pointer, passed back unchanged.
        return NcclResult::from_raw(unsafe { (l.CommGetAsyncError)(comm, err.cast()) });
    }
    entry("ncclCommGetAsyncError", comm, || {
        let slot = out(err, "asyncError")?;
        *slot = resolve(comm)?.async_error();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetErrorString(result: c_int) -> *const c_char {
    if result == NcclResult::Success as c_int {
        return NcclResult::Success.describe().as_ptr();
    }
    NcclResult::from_raw(result).describe().as_ptr()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetLastError(comm: CommHandle) -> *const c_char {
    if let Some(l) = foreign(comm) {
        // SAFETY: the fallback's own communicator, passed back unchanged.
        return unsafe { (l.GetLastError)(comm) };
    }
    let msg = resolve(comm)
        .ok()
        .and_then(|c| c.last_error.lock().ok().and_then(|l| l.clone()))
        .or_else(|| LAST_HERE.with(|l| l.borrow().clone()))
        .or_else(|| last_global().lock().ok().map(|g| g.clone()))
        .unwrap_or_default();
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    RETURNED.with(|r| {
        *r.borrow_mut() = c;
        r.borrow().as_ptr()
    })
}

type IntQuery = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;

/// `ncclCommCount` / `ncclCommUserRank` / `ncclCommCuDevice`: one integer about `comm`
/// (the fallback's function `theirs` answers for the fallback's own communicators).
fn query_int(
    name: &'static str,
    comm: CommHandle,
    slot: *mut c_int,
    theirs: impl FnOnce(&crate::fallback::Nccl) -> IntQuery,
    ours: impl FnOnce(&NcclComm) -> u32,
) -> NcclResult {
    if let Some(l) = foreign(comm) {
        // SAFETY: the fallback's own communicator and the caller's out-pointer, passed
        // back unchanged to the fallback's function of the same name.
        return NcclResult::from_raw(unsafe { theirs(l)(comm, slot) });
    }
    entry(name, comm, || {
        *out(slot, name)? = ours(resolve(comm)?.as_ref()) as c_int;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCount(comm: CommHandle, count: *mut c_int) -> NcclResult {
    query_int("ncclCommCount", comm, count, |l| l.CommCount, |c| c.size)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommUserRank(comm: CommHandle, rank: *mut c_int) -> NcclResult {
    query_int(
        "ncclCommUserRank",
        comm,
        rank,
        |l| l.CommUserRank,
        |c| c.rank,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCuDevice(comm: CommHandle, device: *mut c_int) -> NcclResult {
    query_int(
        "ncclCommCuDevice",
        comm,
        device,
        |l| l.CommCuDevice,
        |c| c.device,
    )
}

// ---------------------------------------------------------------- groups

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupStart() -> NcclResult {
    entry("ncclGroupStart", std::ptr::null_mut(), || {
        group::start();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    entry("ncclGroupEnd", std::ptr::null_mut(), group::end)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupSimulateEnd(info: *mut SimInfo) -> NcclResult {
    entry("ncclGroupSimulateEnd", std::ptr::null_mut(), || {
        let info = out(info, "simInfo")?;
        if info.magic != abi::SIM_INFO_MAGIC {
            return Err(NcclError::invalid(
                "simInfo is not initialised: start from NCCL_SIM_INFO_INITIALIZER",
            ));
        }
        group::simulate_end(info)
    })
}

// ---------------------------------------------------------------- collectives

#[allow(clippy::too_many_arguments)]
fn coll(
    name: &'static str,
    coll: Collective,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    op: c_int,
    root: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    entry(name, comm, || {
        let c = resolve(comm)?;
        abi::dtype(dtype)?;
        if coll.has_root() && (root < 0 || root as u32 >= c.size) {
            return Err(NcclError::invalid(format!(
                "root {root} is not a rank of this {}-rank communicator",
                c.size
            )));
        }
        let op = if coll.redop() == "sum" {
            c.resolve_op(op, dtype)?
        } else {
            OpUse::NONE
        };
        let call = Call::Coll {
            coll,
            dtype,
            op,
            count: count as u64,
            root: root.max(0) as u32,
            bufs: CallBufs {
                send: send as u64,
                recv: recv as u64,
            },
        };
        group::submit(c, call, stream)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    op: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    coll(
        "ncclAllReduce",
        Collective::Allreduce,
        send,
        recv,
        count,
        dtype,
        op,
        0,
        comm,
        stream,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAllGather(
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    dtype: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    coll(
        "ncclAllGather",
        Collective::Allgather,
        send,
        recv,
        sendcount,
        dtype,
        0,
        0,
        comm,
        stream,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclReduceScatter(
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    dtype: c_int,
    op: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    coll(
        "ncclReduceScatter",
        Collective::Reducescatter,
        send,
        recv,
        recvcount,
        dtype,
        op,
        0,
        comm,
        stream,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclBroadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    root: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    coll(
        "ncclBroadcast",
        Collective::Broadcast,
        send,
        recv,
        count,
        dtype,
        0,
        root,
        comm,
        stream,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclBcast(
    buf: *mut c_void,
    count: usize,
    dtype: c_int,
    root: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    coll(
        "ncclBcast",
        Collective::Broadcast,
        buf,
        buf,
        count,
        dtype,
        0,
        root,
        comm,
        stream,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    op: c_int,
    root: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    coll(
        "ncclReduce",
        Collective::Reduce,
        send,
        recv,
        count,
        dtype,
        op,
        root,
        comm,
        stream,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAlltoAll(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    coll(
        "ncclAlltoAll",
        Collective::Alltoall,
        send,
        recv,
        count,
        dtype,
        0,
        0,
        comm,
        stream,
    )
}

#[allow(clippy::too_many_arguments)]
fn p2p(
    name: &'static str,
    recv: bool,
    buf: *const c_void,
    count: usize,
    dtype: c_int,
    peer: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    entry(name, comm, || {
        let c = resolve(comm)?;
        abi::dtype(dtype)?;
        if peer < 0 || peer as u32 >= c.size {
            return Err(NcclError::invalid(format!(
                "peer {peer} is not a rank of this {}-rank communicator",
                c.size
            )));
        }
        let call = Call::P2p {
            recv,
            buf: buf as u64,
            count: count as u64,
            dtype,
            peer: peer as u32,
        };
        group::submit(c, call, stream)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclSend(
    send: *const c_void,
    count: usize,
    dtype: c_int,
    peer: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    p2p("ncclSend", false, send, count, dtype, peer, comm, stream)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRecv(
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    peer: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    p2p("ncclRecv", true, recv, count, dtype, peer, comm, stream)
}

// ---------------------------------------------------------------- reduction ops

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut c_int,
    scalar: *mut c_void,
    dtype: c_int,
    residence: c_int,
    comm: CommHandle,
) -> NcclResult {
    entry("ncclRedOpCreatePreMulSum", comm, || {
        let slot = out(op, "op")?;
        let c = resolve(comm)?;
        if scalar.is_null() {
            return Err(NcclError::invalid("scalar is NULL"));
        }
        let value = match residence {
            abi::SCALAR_HOST_IMMEDIATE => {
                let dt = abi::dtype(dtype)?;
                let mut bytes = [0u8; 8];
                let n = dt.size() as usize;
                // SAFETY: a host scalar of the datatype's size (NCCL's contract for
                // ncclScalarHostImmediate), read now.
                unsafe {
                    std::ptr::copy_nonoverlapping(scalar.cast::<u8>(), bytes.as_mut_ptr(), n)
                };
                Some(abi::scalar_value(dt, &bytes[..n]))
            }
            abi::SCALAR_DEVICE => None,
            r => {
                return Err(NcclError::invalid(format!(
                    "residence {r}: expected ncclScalarDevice (0) or ncclScalarHostImmediate (1)"
                )));
            }
        };
        *slot = c.create_premul(dtype, value, scalar as usize, residence)?;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRedOpDestroy(op: c_int, comm: CommHandle) -> NcclResult {
    if let Some(l) = foreign(comm) {
        // SAFETY: the fallback's own communicator, passed back unchanged.
        return NcclResult::from_raw(unsafe { (l.RedOpDestroy)(op, comm) });
    }
    entry("ncclRedOpDestroy", comm, || resolve(comm)?.destroy_op(op))
}

// ---------------------------------------------------------------- memory

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> NcclResult {
    entry("ncclMemAlloc", std::ptr::null_mut(), || {
        let slot = out(ptr, "ptr")?;
        *slot = memory::alloc(size)? as *mut c_void;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclMemFree(ptr: *mut c_void) -> NcclResult {
    if ptr.is_null() {
        return NcclResult::Success;
    }
    entry("ncclMemFree", std::ptr::null_mut(), || {
        memory::free(ptr as u64)
    })
}

fn register(
    name: &'static str,
    comm: CommHandle,
    buf: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
    window: bool,
    flags: c_int,
) -> NcclResult {
    entry(name, comm, || {
        let slot = out(handle, "handle")?;
        let c = resolve(comm)?;
        let reg = memory::register(&c, buf as u64, size as u64, window, flags)?;
        *slot = Box::into_raw(reg).cast();
        Ok(())
    })
}

fn deregister(name: &'static str, comm: CommHandle, handle: *mut c_void) -> NcclResult {
    entry(name, comm, || {
        let c = resolve(comm)?;
        if handle.is_null() {
            return Err(NcclError::invalid("handle is NULL"));
        }
        // SAFETY: a handle `register` made with Box::into_raw, released once (the
        // caller's contract, as with NCCL's handles).
        let reg = *unsafe { Box::from_raw(handle.cast::<memory::Registered>()) };
        memory::deregister(&c, reg)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommRegister(
    comm: CommHandle,
    buf: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> NcclResult {
    register("ncclCommRegister", comm, buf, size, handle, false, 0)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommDeregister(comm: CommHandle, handle: *mut c_void) -> NcclResult {
    deregister("ncclCommDeregister", comm, handle)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommWindowRegister(
    comm: CommHandle,
    buf: *mut c_void,
    size: usize,
    win: *mut *mut c_void,
    flags: c_int,
) -> NcclResult {
    register("ncclCommWindowRegister", comm, buf, size, win, true, flags)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommWindowDeregister(
    comm: CommHandle,
    win: *mut c_void,
) -> NcclResult {
    deregister("ncclCommWindowDeregister", comm, win)
}

// ---------------------------------------------------------------- fallback-only calls

/// NCCL's device-side API (`ncclDevComm`) is NCCL's own: the fallback's communicator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclDevCommCreate(
    comm: CommHandle,
    reqs: *const c_void,
    dev_comm: *mut c_void,
) -> NcclResult {
    on_fallback(
        "ncclDevCommCreate",
        comm,
        |l| l.DevCommCreate,
        |f, raw| {
            // SAFETY: the caller's arguments, unchanged, on a live fallback communicator.
            unsafe { f(raw, reqs, dev_comm) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclDevCommDestroy(
    comm: CommHandle,
    dev_comm: *const c_void,
) -> NcclResult {
    on_fallback(
        "ncclDevCommDestroy",
        comm,
        |l| l.DevCommDestroy,
        |f, raw| {
            // SAFETY: the caller's arguments, unchanged, on a live fallback communicator.
            unsafe { f(raw, dev_comm) }
        },
    )
}

/// Run `call` on the fallback's communicator of `comm` (NCCL calls commhal does not
/// implement); `ncclInvalidUsage` without a fallback that has the function.
fn on_fallback<F: Copy>(
    name: &'static str,
    comm: CommHandle,
    f: impl FnOnce(&crate::fallback::Nccl) -> Option<F>,
    call: impl FnOnce(F, *mut c_void) -> c_int,
) -> NcclResult {
    entry(name, comm, || {
        let ready = resolve(comm)?.ready()?;
        let Some((fb, f)) = ready
            .fallback
            .as_ref()
            .and_then(|fb| f(fb.lib).map(|f| (fb, f)))
        else {
            return Err(NcclError::usage(format!(
                "{name} runs only on the fallback NCCL: set COMMHAL_NCCL_FALLBACK to an NCCL that has it"
            )));
        };
        settings::log(|| format!("{name} -> fallback NCCL (commhal does not implement it)"));
        fb.lib.check(call(f, fb.raw), fb.raw, name)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGather(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    root: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    on_fallback(
        "ncclGather",
        comm,
        |l| l.Gather,
        |f, raw| {
            // SAFETY: the caller's arguments, unchanged, on a live fallback communicator.
            unsafe { f(send, recv, count, dtype, root, raw, stream) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclScatter(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    root: c_int,
    comm: CommHandle,
    stream: Stream,
) -> NcclResult {
    on_fallback(
        "ncclScatter",
        comm,
        |l| l.Scatter,
        |f, raw| {
            // SAFETY: the caller's arguments, unchanged, on a live fallback communicator.
            unsafe { f(send, recv, count, dtype, root, raw, stream) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommRevoke(comm: CommHandle, flags: c_int) -> NcclResult {
    on_fallback(
        "ncclCommRevoke",
        comm,
        |l| l.CommRevoke,
        |f, raw| {
            // SAFETY: the caller's arguments, unchanged, on a live fallback communicator.
            unsafe { f(raw, flags) }
        },
    )
}
