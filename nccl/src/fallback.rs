//! The real NCCL, opened from `COMMHAL_NCCL_FALLBACK`, for what commhal does not run.
//!
//! Every commhal communicator then owns a parallel NCCL communicator over the same
//! ranks (made at init: rank 0 asks NCCL for an id and sends it over commhal's
//! bootstrap). A call is routed to it by a rule every rank evaluates the same way (see
//! [`crate::comm`]), so both sides of every operation meet in the same library.
//!
//! When this library is preloaded, NCCL's calls between its own exported functions
//! resolve to ours (NCCL 2.28's `ncclRedOpCreatePreMulSum` and `ncclCommSplit` call
//! `ncclCommGetAsyncError` on their communicator): the exported functions hand a
//! communicator they do not know to the fallback's function of the same name
//! ([`crate::api`]). Only the primary entry points are called from here
//! (`ncclBroadcast`, never `ncclBcast`).
//!
//! The library is opened into [`commhal_cuda_coll::nccl_lib::NcclLib`], the table of
//! NCCL's functions that `commhal bench --compare` uses too; this module adds what
//! is the drop-in's own: the variable, the refusal to load itself, the error codes.

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

pub use commhal_cuda_coll::nccl_lib::RootedCall;
use commhal_cuda_coll::nccl_lib::{LoadError, NcclLib};

use crate::abi::{NcclError, NcclResult, UniqueIdBytes};

type Comm = *mut c_void;

/// The fallback library's functions: the table the benchmark's comparison uses too
/// ([`commhal_cuda_coll::nccl_lib`]).
pub type Nccl = NcclLib;

/// Open `path` as the fallback, with what to do about each way it can fail.
fn open(path: &str) -> Result<Nccl, NcclError> {
    if path.contains("commhal_nccl") {
        return Err(NcclError::usage(format!(
            "COMMHAL_NCCL_FALLBACK={path} is this library: point it at the real libnccl.so.2"
        )));
    }
    NcclLib::open(path).map_err(|e| match e {
        LoadError::Open { reason, .. } => NcclError::usage(format!(
            "COMMHAL_NCCL_FALLBACK={path}: cannot load it ({reason}): point it at the real libnccl.so.2 (e.g. the nvidia-nccl wheel's nvidia/nccl/lib/libnccl.so.2)"
        )),
        LoadError::Missing { symbol, reason, .. } => NcclError::usage(format!(
            "COMMHAL_NCCL_FALLBACK={path}: {symbol} missing ({reason}): point it at NCCL 2.28's libnccl.so.2"
        )),
    })
}

/// Results of the fallback's calls as this library's errors.
pub trait Check {
    /// `Ok` for ncclSuccess, else the fallback's code with its last error message.
    /// `comm` is null or a communicator of this library (only passed back to it).
    fn check(&self, r: c_int, comm: Comm, what: &str) -> Result<(), NcclError>;
}

impl Check for Nccl {
    fn check(&self, r: c_int, comm: Comm, what: &str) -> Result<(), NcclError> {
        if r == 0 {
            return Ok(());
        }
        let detail = if comm.is_null() {
            String::new()
        } else {
            let last = self.last_error(comm);
            if last.is_empty() {
                String::new()
            } else {
                format!(": {last}")
            }
        };
        Err(NcclError::new(
            NcclResult::from_raw(r),
            format!(
                "{what} in the fallback NCCL ({}) failed with code {r}{detail}",
                self.path
            ),
        ))
    }
}

/// The fallback's communicators this library holds (see [`is_theirs`]).
fn theirs() -> &'static std::sync::Mutex<std::collections::HashSet<usize>> {
    static T: OnceLock<std::sync::Mutex<std::collections::HashSet<usize>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

thread_local! {
    /// This thread is inside a fallback call that makes communicators (NCCL may call
    /// its exported functions on one before returning it).
    static MAKING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Run `f`, a fallback call that makes communicators, marking the thread meanwhile.
pub fn making<T>(f: impl FnOnce() -> T) -> T {
    MAKING.with(|m| m.set(m.get() + 1));
    let r = f();
    MAKING.with(|m| m.set(m.get() - 1));
    r
}

/// Whether `h` is the fallback NCCL's own communicator: one it returned to this
/// library, or any while this thread is inside a fallback call that makes one. Only
/// those are handed back to NCCL by the exported functions; anything else unknown
/// (a destroyed commhal handle, garbage) gets an error.
pub fn is_theirs(h: Comm) -> bool {
    MAKING.with(|m| m.get() > 0) || theirs().lock().is_ok_and(|t| t.contains(&(h as usize)))
}

/// The fallback library, loaded on first use; `None` when `COMMHAL_NCCL_FALLBACK` is
/// unset. A load failure is an error every time it is asked for.
pub fn library() -> Result<Option<&'static Nccl>, NcclError> {
    static LIB: OnceLock<Result<Option<Nccl>, NcclError>> = OnceLock::new();
    let r = LIB.get_or_init(|| match crate::settings::fallback_path() {
        None => Ok(None),
        Some(p) => open(&p).map(Some),
    });
    match r {
        Ok(l) => Ok(l.as_ref()),
        Err(e) => Err(e.clone()),
    }
}

/// One NCCL communicator of the fallback library, destroyed (or aborted) on drop.
#[derive(Debug)]
pub struct FallbackComm {
    /// The library.
    pub lib: &'static Nccl,
    /// The raw `ncclComm_t`.
    pub raw: Comm,
    /// Abort instead of destroy on drop.
    pub abort_on_drop: std::sync::atomic::AtomicBool,
}

// SAFETY: an NCCL communicator may be used from any thread (one call at a time per
// communicator is the caller's rule, as with NCCL itself).
unsafe impl Send for FallbackComm {}
// SAFETY: as above.
unsafe impl Sync for FallbackComm {}

impl FallbackComm {
    /// Wrap a communicator the library returned.
    pub fn new(lib: &'static Nccl, raw: Comm) -> FallbackComm {
        if let Ok(mut t) = theirs().lock() {
            t.insert(raw as usize);
        }
        FallbackComm {
            lib,
            raw,
            abort_on_drop: false.into(),
        }
    }

    /// Make one over `boot`'s ranks from `id` (every rank passes the same), or, without
    /// one, from an id rank 0 asks NCCL for and broadcasts over `boot`.
    pub fn init(
        lib: &'static Nccl,
        boot: &dyn commhal_hal::bootstrap::Bootstrap,
        id: Option<UniqueIdBytes>,
    ) -> Result<FallbackComm, NcclError> {
        let id = match id {
            Some(id) => id,
            None => Self::exchange_id(lib, boot)?,
        };
        let mut raw: Comm = std::ptr::null_mut();
        // SAFETY: out-pointer valid; id by value; null config = NCCL's defaults.
        let r = making(|| unsafe {
            (lib.CommInitRankConfig)(
                &mut raw,
                boot.size() as c_int,
                id,
                boot.rank() as c_int,
                std::ptr::null_mut(),
            )
        });
        lib.check(r, raw, "ncclCommInitRankConfig")?;
        crate::settings::log(|| {
            format!("rank {}: fallback NCCL communicator {raw:p}", boot.rank())
        });
        Ok(FallbackComm::new(lib, raw))
    }

    /// An NCCL id made by rank 0 and broadcast over `boot`.
    fn exchange_id(
        lib: &'static Nccl,
        boot: &dyn commhal_hal::bootstrap::Bootstrap,
    ) -> Result<UniqueIdBytes, NcclError> {
        let mut id = UniqueIdBytes { internal: [0; 128] };
        if boot.rank() == 0 {
            // SAFETY: `id` is a valid out-pointer of the right size.
            let r = unsafe { (lib.GetUniqueId)(&mut id) };
            lib.check(r, std::ptr::null_mut(), "ncclGetUniqueId")?;
        }
        let bytes: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
        let got = boot.broadcast(0, &bytes)?;
        if got.len() != 128 {
            return Err(NcclError::new(
                NcclResult::InternalError,
                format!(
                    "the fallback NCCL id arrived with {} bytes, not 128",
                    got.len()
                ),
            ));
        }
        for (d, s) in id.internal.iter_mut().zip(&got) {
            *d = *s as c_char;
        }
        Ok(id)
    }

    /// This rank and the rank count, as NCCL numbers them.
    pub fn rank_and_size(&self) -> Result<(u32, u32), NcclError> {
        let (mut r, mut n): (c_int, c_int) = (0, 0);
        // SAFETY: live communicator; valid out-pointers.
        let rc = unsafe { (self.lib.CommUserRank)(self.raw, &mut r) };
        self.lib.check(rc, self.raw, "ncclCommUserRank")?;
        // SAFETY: as above.
        let rc = unsafe { (self.lib.CommCount)(self.raw, &mut n) };
        self.lib.check(rc, self.raw, "ncclCommCount")?;
        Ok((r.max(0) as u32, n.max(0) as u32))
    }
}

impl Drop for FallbackComm {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        let abort = self
            .abort_on_drop
            .load(std::sync::atomic::Ordering::Relaxed);
        // SAFETY: `raw` is a live communicator of `lib`, dropped exactly once.
        let _ = unsafe {
            if abort {
                (self.lib.CommAbort)(self.raw)
            } else {
                (self.lib.CommDestroy)(self.raw)
            }
        };
        // Only now: NCCL 2.28's destroy calls the exported `ncclCommGetAsyncError` on
        // this communicator while it tears down (after it ran operations), and that
        // call reaches this library, which must still hand it back to NCCL.
        if let Ok(mut t) = theirs().lock() {
            t.remove(&(self.raw as usize));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fallback_that_does_not_open_names_the_variable() {
        let e = open("/nonexistent/libnccl.so.2").unwrap_err().to_string();
        assert!(
            e.contains("COMMHAL_NCCL_FALLBACK=/nonexistent/libnccl.so.2: cannot load it"),
            "{e}"
        );
        let e = open("/opt/x/libcommhal_nccl.so").unwrap_err().to_string();
        assert!(e.contains("is this library"), "{e}");
    }

    /// The table's type codes are the ones the exported functions read back.
    #[test]
    fn type_codes_round_trip() {
        use commhal_cuda_coll::nccl_lib::dtype_code;
        for code in 0..12 {
            let d = crate::abi::dtype(code).unwrap();
            assert_eq!(dtype_code(d), code, "{d:?}");
        }
        assert!(crate::abi::dtype(12).is_err(), "12 types in NCCL 2.28");
    }
}
