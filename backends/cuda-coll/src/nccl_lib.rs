//! NCCL 2.28's C API as a table of functions opened from a library: the real
//! `libnccl.so.2`, MSCCL++'s `libmscclpp_nccl.so`, or any other library that exports
//! NCCL's functions. One table serves both users of a foreign NCCL: the benchmark's
//! comparison (`commhal_gpu_bench::nccl`: `--compare nccl | mscclpp`, `--compare-lib PATH`) and
//! the drop-in's fallback (commhal-nccl, `COMMHAL_NCCL_FALLBACK`).
//!
//! The unsafe code of loading is here: opening the library, reading each symbol with
//! the prototype nccl.h gives that name, and the calls that need no communicator
//! (version, error string, last error). Callers call the other function pointers
//! themselves, each with its own safety argument.
//!
//! Which functions must be there: those of NCCL 2.19 that the benchmark or the
//! drop-in's fallback call (every NCCL from 2.19 and MSCCL++ 0.9 export them); newer
//! ones are `Option`s. A library without a required one does not open, naming it.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

use libloading::Library;

use crate::types::Dtype;

/// `ncclComm_t`.
pub type Comm = *mut c_void;
/// `cudaStream_t`.
pub type Stream = *mut c_void;

/// `ncclUniqueId`: 128 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    /// `internal`.
    pub internal: [c_char; 128],
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ncclUniqueId { .. }")
    }
}

/// `ncclSuccess`.
pub const SUCCESS: c_int = 0;
/// `ncclSum`, `ncclProd`, `ncclMax`, `ncclMin`, `ncclAvg` (`ncclRedOp_t`).
pub const OP_SUM: c_int = 0;
/// `ncclProd`.
pub const OP_PROD: c_int = 1;
/// `ncclMax`.
pub const OP_MAX: c_int = 2;
/// `ncclMin`.
pub const OP_MIN: c_int = 3;
/// `ncclAvg`.
pub const OP_AVG: c_int = 4;
/// `ncclScalarHostImmediate` (`ncclScalarResidence_t`): the scalar is read during the
/// call from host memory.
pub const SCALAR_HOST_IMMEDIATE: c_int = 1;

/// NCCL's `ncclDataType_t` for `d` (every type has one since NCCL 2.24).
pub fn dtype_code(d: Dtype) -> c_int {
    match d {
        Dtype::Int8 => 0,
        Dtype::Uint8 => 1,
        Dtype::Int32 => 2,
        Dtype::Uint32 => 3,
        Dtype::Int64 => 4,
        Dtype::Uint64 => 5,
        Dtype::Half => 6,
        Dtype::Float => 7,
        Dtype::Double => 8,
        Dtype::Bfloat16 => 9,
        Dtype::Fp8E4m3 => 10,
        Dtype::Fp8E5m2 => 11,
    }
}

/// `ncclGather` / `ncclScatter`: send, recv, count, datatype, root, comm, stream.
pub type RootedCall =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int;
/// `ncclAllReduce` / `ncclReduceScatter`: send, recv, count, datatype, op, comm, stream.
pub type ReducingCall =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int;
/// `ncclAllGather` / `ncclAlltoAll`: send, recv, count, datatype, comm, stream.
pub type GatherCall =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> c_int;

/// Why a library did not open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// The dynamic loader could not load it (`name`: what was asked for).
    Open {
        /// The path or file name given to the loader (several: " or "-joined).
        name: String,
        /// The loader's message.
        reason: String,
    },
    /// It loaded, but a required function is not there.
    Missing {
        /// The path or file name given to the loader.
        name: String,
        /// The function's name.
        symbol: &'static str,
        /// The loader's message.
        reason: String,
    },
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Open { name, reason } => write!(f, "cannot load {name} ({reason})"),
            LoadError::Missing {
                name,
                symbol,
                reason,
            } => write!(f, "{name} has no {symbol} ({reason})"),
        }
    }
}

impl std::error::Error for LoadError {}

/// The functions of one library with NCCL's C API (optional ones are `None` where the
/// library lacks them). Field names are NCCL's without the `nccl` prefix.
#[allow(non_snake_case, missing_docs)]
#[derive(Debug)]
pub struct NcclLib {
    _lib: Library,
    /// The path or file name it was opened by.
    pub path: String,
    /// The file the loader loaded (the opened name resolved by the loader's search; the
    /// opened name where the loader cannot tell).
    pub file: String,
    pub GetVersion: unsafe extern "C" fn(*mut c_int) -> c_int,
    pub GetErrorString: unsafe extern "C" fn(c_int) -> *const c_char,
    pub GetLastError: unsafe extern "C" fn(Comm) -> *const c_char,
    pub GetUniqueId: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    pub CommInitRank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> c_int,
    pub CommInitRankConfig:
        unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int, *mut c_void) -> c_int,
    pub CommInitAll: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> c_int,
    pub CommSplit: unsafe extern "C" fn(Comm, c_int, c_int, *mut Comm, *mut c_void) -> c_int,
    pub CommShrink: Option<
        unsafe extern "C" fn(Comm, *mut c_int, c_int, *mut Comm, *mut c_void, c_int) -> c_int,
    >,
    pub CommFinalize: unsafe extern "C" fn(Comm) -> c_int,
    pub CommDestroy: unsafe extern "C" fn(Comm) -> c_int,
    pub CommAbort: unsafe extern "C" fn(Comm) -> c_int,
    pub CommGetAsyncError: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
    pub CommCount: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
    pub CommUserRank: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
    pub CommCuDevice: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
    pub GroupStart: unsafe extern "C" fn() -> c_int,
    pub GroupEnd: unsafe extern "C" fn() -> c_int,
    pub AllReduce: ReducingCall,
    pub AllGather: GatherCall,
    pub ReduceScatter: ReducingCall,
    pub Broadcast: RootedCall,
    pub Reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> c_int,
    pub AlltoAll: Option<GatherCall>,
    pub Send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
    pub Recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
    pub RedOpCreatePreMulSum:
        unsafe extern "C" fn(*mut c_int, *mut c_void, c_int, c_int, Comm) -> c_int,
    pub RedOpDestroy: unsafe extern "C" fn(c_int, Comm) -> c_int,
    pub CommRegister: unsafe extern "C" fn(Comm, *mut c_void, usize, *mut *mut c_void) -> c_int,
    pub CommDeregister: unsafe extern "C" fn(Comm, *mut c_void) -> c_int,
    pub CommWindowRegister:
        Option<unsafe extern "C" fn(Comm, *mut c_void, usize, *mut *mut c_void, c_int) -> c_int>,
    pub CommWindowDeregister: Option<unsafe extern "C" fn(Comm, *mut c_void) -> c_int>,
    pub DevCommCreate: Option<unsafe extern "C" fn(Comm, *const c_void, *mut c_void) -> c_int>,
    pub DevCommDestroy: Option<unsafe extern "C" fn(Comm, *const c_void) -> c_int>,
    pub Gather: Option<RootedCall>,
    pub Scatter: Option<RootedCall>,
    pub CommRevoke: Option<unsafe extern "C" fn(Comm, c_int) -> c_int>,
}

macro_rules! sym {
    ($lib:expr, $path:expr, $name:literal) => {{
        // SAFETY: the symbol is read with the type of NCCL 2.28's prototype of that name
        // (nccl.h); the pointer is used only while `_lib` keeps the library loaded.
        let s = unsafe { $lib.get(concat!($name, "\0").as_bytes()) };
        *s.map_err(|e| LoadError::Missing {
            name: $path.to_string(),
            symbol: $name,
            reason: e.to_string(),
        })?
    }};
}

macro_rules! opt_sym {
    ($lib:expr, $name:literal) => {{
        // SAFETY: as in `sym!`.
        let s = unsafe { $lib.get(concat!($name, "\0").as_bytes()) };
        s.ok().map(|s| *s)
    }};
}

/// Load the system C++ runtime (`libstdc++.so.6`) into the global symbol scope once,
/// before any NCCL-API library. Those libraries are C++; commhal's binaries are Rust and
/// load no C++ runtime of their own. MSCCL++ 0.9's `libmscclpp.so` carries copies of
/// libstdc++'s iostream code: loaded into a process without the runtime, its first
/// `operator>>` (`Socket::bind`, from `ncclGetUniqueId`) crashed in
/// `codecvt::do_unshift` in every run on 4 x H100; with the runtime loaded first, its
/// references bind to the runtime's and it runs (as it does under PyTorch, which loads
/// libstdc++ itself). Nothing happens where the runtime is missing.
fn load_cxx_runtime() {
    static LOADED: OnceLock<()> = OnceLock::new();
    LOADED.get_or_init(|| {
        use libloading::os::unix::{Library as UnixLibrary, RTLD_GLOBAL, RTLD_NOW};
        let flags = RTLD_NOW | RTLD_GLOBAL;
        // SAFETY: libstdc++'s initialisers set up its own state (locales, the standard
        // streams); the handle is kept for the life of the process (never unloaded).
        let lib = unsafe { UnixLibrary::open(Some("libstdc++.so.6"), flags) };
        if let Ok(lib) = lib {
            std::mem::forget(lib);
        }
    });
}

impl NcclLib {
    /// Open `name`: a path (it has a `/`), or a file name the dynamic loader searches
    /// for (`LD_LIBRARY_PATH`, the cache, the system folders), as `dlopen` does.
    pub fn open(name: &str) -> Result<NcclLib, LoadError> {
        load_cxx_runtime();
        // SAFETY: loading runs the library's initialisers; a library with NCCL's API
        // only sets up its own state in them.
        let lib = unsafe { Library::new(name) }.map_err(|e| LoadError::Open {
            name: name.to_string(),
            reason: e.to_string(),
        })?;
        let get_version: unsafe extern "C" fn(*mut c_int) -> c_int =
            sym!(lib, name, "ncclGetVersion");
        Ok(NcclLib {
            path: name.to_string(),
            file: loaded_file(get_version as *const c_void).unwrap_or_else(|| name.to_string()),
            GetVersion: get_version,
            GetErrorString: sym!(lib, name, "ncclGetErrorString"),
            GetLastError: sym!(lib, name, "ncclGetLastError"),
            GetUniqueId: sym!(lib, name, "ncclGetUniqueId"),
            CommInitRank: sym!(lib, name, "ncclCommInitRank"),
            CommInitRankConfig: sym!(lib, name, "ncclCommInitRankConfig"),
            CommInitAll: sym!(lib, name, "ncclCommInitAll"),
            CommSplit: sym!(lib, name, "ncclCommSplit"),
            CommShrink: opt_sym!(lib, "ncclCommShrink"),
            CommFinalize: sym!(lib, name, "ncclCommFinalize"),
            CommDestroy: sym!(lib, name, "ncclCommDestroy"),
            CommAbort: sym!(lib, name, "ncclCommAbort"),
            CommGetAsyncError: sym!(lib, name, "ncclCommGetAsyncError"),
            CommCount: sym!(lib, name, "ncclCommCount"),
            CommUserRank: sym!(lib, name, "ncclCommUserRank"),
            CommCuDevice: sym!(lib, name, "ncclCommCuDevice"),
            GroupStart: sym!(lib, name, "ncclGroupStart"),
            GroupEnd: sym!(lib, name, "ncclGroupEnd"),
            AllReduce: sym!(lib, name, "ncclAllReduce"),
            AllGather: sym!(lib, name, "ncclAllGather"),
            ReduceScatter: sym!(lib, name, "ncclReduceScatter"),
            Broadcast: sym!(lib, name, "ncclBroadcast"),
            Reduce: sym!(lib, name, "ncclReduce"),
            AlltoAll: opt_sym!(lib, "ncclAlltoAll"),
            Send: sym!(lib, name, "ncclSend"),
            Recv: sym!(lib, name, "ncclRecv"),
            RedOpCreatePreMulSum: sym!(lib, name, "ncclRedOpCreatePreMulSum"),
            RedOpDestroy: sym!(lib, name, "ncclRedOpDestroy"),
            CommRegister: sym!(lib, name, "ncclCommRegister"),
            CommDeregister: sym!(lib, name, "ncclCommDeregister"),
            CommWindowRegister: opt_sym!(lib, "ncclCommWindowRegister"),
            CommWindowDeregister: opt_sym!(lib, "ncclCommWindowDeregister"),
            DevCommCreate: opt_sym!(lib, "ncclDevCommCreate"),
            DevCommDestroy: opt_sym!(lib, "ncclDevCommDestroy"),
            Gather: opt_sym!(lib, "ncclGather"),
            Scatter: opt_sym!(lib, "ncclScatter"),
            CommRevoke: opt_sym!(lib, "ncclCommRevoke"),
            _lib: lib,
        })
    }

    /// The first of `names` that the loader finds, opened and kept loaded for the rest
    /// of the process (never unloaded: a library with threads or exit handlers of its
    /// own must not be). Asking again for the same names returns the same table. A
    /// library that loads but lacks a function is an error at once (the search does
    /// not go on past a wrong library); when none loads, the error names them all.
    pub fn open_kept(names: &[String]) -> Result<&'static NcclLib, LoadError> {
        type Kept = Vec<(Vec<String>, &'static NcclLib)>;
        static KEPT: OnceLock<Mutex<Kept>> = OnceLock::new();
        let kept = KEPT.get_or_init(Default::default);
        if let Ok(k) = kept.lock()
            && let Some((_, lib)) = k.iter().find(|(n, _)| n == names)
        {
            return Ok(lib);
        }
        let mut reasons = Vec::new();
        for name in names {
            match NcclLib::open(name) {
                Ok(lib) => {
                    let lib: &'static NcclLib = Box::leak(Box::new(lib));
                    if let Ok(mut k) = kept.lock() {
                        k.push((names.to_vec(), lib));
                    }
                    return Ok(lib);
                }
                Err(LoadError::Open { reason, .. }) => reasons.push(reason),
                Err(e) => return Err(e),
            }
        }
        Err(LoadError::Open {
            name: names.join(" or "),
            reason: if reasons.is_empty() {
                "no name to look for".into()
            } else {
                reasons.join("; ")
            },
        })
    }

    /// `ncclGetVersion`'s code (NCCL: major × 10000 + minor × 100 + patch from 2.9;
    /// MSCCL++ reports its own version the same way), or the error code.
    pub fn version_code(&self) -> Result<c_int, c_int> {
        let mut v: c_int = 0;
        // SAFETY: a valid out-pointer for the one int ncclGetVersion writes.
        let r = unsafe { (self.GetVersion)(&mut v) };
        if r == SUCCESS { Ok(v) } else { Err(r) }
    }

    /// `ncclGetErrorString(r)`.
    pub fn error_string(&self, r: c_int) -> String {
        // SAFETY: takes any code; returns null or a NUL-terminated string the library
        // owns for its lifetime (static text in NCCL and MSCCL++), copied at once.
        unsafe { text((self.GetErrorString)(r)) }
    }

    /// `ncclGetLastError(comm)` ("" when it has nothing). `comm` must be null or a
    /// communicator of this library (it is only passed back to it; NCCL 2.28 and
    /// MSCCL++ 0.9 do not read it).
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn last_error(&self, comm: Comm) -> String {
        // SAFETY: `comm` is null or this library's communicator (the caller's part);
        // returns null or a NUL-terminated string the library owns until its next call
        // on this thread, copied at once.
        unsafe { text((self.GetLastError)(comm)) }
    }

    /// What to call this library in tables and files: see [`label`].
    pub fn label(&self) -> String {
        let real = std::fs::canonicalize(&self.file)
            .ok()
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()));
        let name = real.unwrap_or_else(|| file_name(&self.file).to_string());
        label(&name, self.version_code().ok())
    }
}

/// A copy of the C string at `p` ("" for null).
///
/// # Safety
/// `p` is null or points at a NUL-terminated string that stays valid during the call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated (the caller's part).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The file name part of a path.
fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The file the loader loaded that holds `addr` (`dladdr`).
fn loaded_file(addr: *const c_void) -> Option<String> {
    // SAFETY: all-zero is a valid `Dl_info` (null pointers, zero words).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `addr` is a function of a loaded library; `info` is a valid out-location.
    let found = unsafe { libc::dladdr(addr, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: non-null, NUL-terminated, owned by the loader while the library stays
    // loaded (it does: the caller holds it); copied at once.
    let s = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(s.to_string_lossy().into_owned()).filter(|s| !s.is_empty())
}

/// `code` (an `ncclGetVersion` result) as `major.minor.patch`: major × 10000 + minor ×
/// 100 + patch from NCCL 2.9 on, major × 1000 + minor × 100 + patch before.
pub fn version_string(code: c_int) -> String {
    let (major, rest) = if code >= 10_000 {
        (code / 10_000, code % 10_000)
    } else {
        (code / 1000, code % 1000)
    };
    format!("{major}.{}.{}", rest / 100, rest % 100)
}

/// The name of a library with NCCL's API, from the name of its file (symbolic links
/// resolved) and its `ncclGetVersion` code: the version alone cannot tell the
/// libraries apart (MSCCL++ answers with its own version, commhal's drop-in with the
/// NCCL version whose API it has).
///
/// * `libmscclpp_nccl.so*` → `MSCCL++ 0.9.0`;
/// * `libcommhal_nccl.so` → `commhal-nccl (NCCL API 2.28.9)`;
/// * `libnccl.so*` → `NCCL 2.28.9`;
/// * any other file → `FILE (NCCL API 2.28.9)`.
pub fn label(file: &str, code: Option<c_int>) -> String {
    let v = code.map_or_else(|| "?".to_string(), version_string);
    if file.contains("mscclpp") {
        format!("MSCCL++ {v}")
    } else if file.contains("commhal_nccl") {
        format!("commhal-nccl (NCCL API {v})")
    } else if file.starts_with("libnccl.") {
        format!("NCCL {v}")
    } else {
        format!("{file} (NCCL API {v})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl_stub::build_stub;

    #[test]
    fn versions_and_labels() {
        assert_eq!(version_string(22809), "2.28.9");
        assert_eq!(version_string(21903), "2.19.3");
        assert_eq!(version_string(2804), "2.8.4", "before 2.9: major × 1000");
        assert_eq!(
            version_string(900),
            "0.9.0",
            "MSCCL++ 0.9.0's MSCCLPP_VERSION"
        );
        assert_eq!(label("libnccl.so.2", Some(22809)), "NCCL 2.28.9");
        assert_eq!(label("libnccl.so.2.28.9", Some(22809)), "NCCL 2.28.9");
        assert_eq!(
            label("libmscclpp_nccl.so.0.9.0", Some(900)),
            "MSCCL++ 0.9.0"
        );
        assert_eq!(
            label("libcommhal_nccl.so", Some(22809)),
            "commhal-nccl (NCCL API 2.28.9)"
        );
        assert_eq!(
            label("librccl_like.so", None),
            "librccl_like.so (NCCL API ?)"
        );
        assert_eq!(file_name("/a/b/libnccl.so.2"), "libnccl.so.2");
        assert_eq!(file_name("libnccl.so.2"), "libnccl.so.2");
    }

    /// The codes are NCCL 2.28's: the same numbers as cudarc's bindings of nccl.h.
    #[test]
    fn codes_are_nccl_2_28s() {
        use cudarc::nccl::sys::{ncclDataType_t as T, ncclRedOp_t as O, ncclScalarResidence_t};
        let want = |d: Dtype| match d {
            Dtype::Int8 => T::ncclInt8,
            Dtype::Uint8 => T::ncclUint8,
            Dtype::Int32 => T::ncclInt32,
            Dtype::Uint32 => T::ncclUint32,
            Dtype::Int64 => T::ncclInt64,
            Dtype::Uint64 => T::ncclUint64,
            Dtype::Half => T::ncclFloat16,
            Dtype::Bfloat16 => T::ncclBfloat16,
            Dtype::Float => T::ncclFloat32,
            Dtype::Double => T::ncclFloat64,
            Dtype::Fp8E4m3 => T::ncclFloat8e4m3,
            Dtype::Fp8E5m2 => T::ncclFloat8e5m2,
        };
        for d in Dtype::ALL {
            assert_eq!(dtype_code(d), want(d) as c_int, "{d:?}");
        }
        assert_eq!(OP_SUM, O::ncclSum as c_int);
        assert_eq!(OP_PROD, O::ncclProd as c_int);
        assert_eq!(OP_MAX, O::ncclMax as c_int);
        assert_eq!(OP_MIN, O::ncclMin as c_int);
        assert_eq!(OP_AVG, O::ncclAvg as c_int);
        assert_eq!(
            SCALAR_HOST_IMMEDIATE,
            ncclScalarResidence_t::ncclScalarHostImmediate as c_int
        );
        assert_eq!(
            std::mem::size_of::<UniqueId>(),
            std::mem::size_of::<cudarc::nccl::sys::ncclUniqueId>()
        );
    }

    #[test]
    fn a_missing_library_is_named() {
        let e = NcclLib::open("/nonexistent/libnccl.so.2").unwrap_err();
        assert!(
            matches!(&e, LoadError::Open { name, .. } if name == "/nonexistent/libnccl.so.2"),
            "{e:?}"
        );
        assert!(e.to_string().contains("/nonexistent/libnccl.so.2"), "{e}");
        let names = vec![
            "/nonexistent/a.so".to_string(),
            "/nonexistent/b.so".to_string(),
        ];
        let e = NcclLib::open_kept(&names).unwrap_err().to_string();
        assert!(
            e.contains("/nonexistent/a.so or /nonexistent/b.so"),
            "both names: {e}"
        );
    }

    #[test]
    fn the_table_calls_a_stub_with_nccls_prototypes() {
        let Some(stub) = build_stub("libnccl.so.2", 22809, &[]) else {
            return;
        };
        let path = &stub.path;
        let lib = NcclLib::open(path).unwrap();
        assert_eq!(&lib.file, path, "dladdr names the file");
        assert_eq!(lib.version_code(), Ok(22809));
        assert_eq!(lib.label(), "NCCL 2.28.9");
        assert_eq!(lib.error_string(5), "invalid usage (stub)");
        assert_eq!(lib.last_error(std::ptr::null_mut()), "last error (stub)");
        assert!(lib.AlltoAll.is_none() && lib.CommShrink.is_none());
        let mut id = UniqueId { internal: [0; 128] };
        let mut comm: Comm = std::ptr::null_mut();
        let (s, r, st) = (
            0x1000 as *const c_void,
            0x2000 as *mut c_void,
            0x3000 as Stream,
        );
        let half = dtype_code(Dtype::Half);
        // SAFETY: the stub only compares its arguments and writes its out-pointers,
        // which are valid here.
        unsafe {
            assert_eq!((lib.GetUniqueId)(&mut id), 0);
            assert_eq!((lib.CommInitRank)(&mut comm, 2, id, 1), 0);
            assert!(!comm.is_null());
            assert_eq!((lib.AllReduce)(s, r, 33, half, OP_AVG, comm, st), 0);
            assert_eq!((lib.AllReduce)(s, r, 33, half, OP_SUM, comm, st), 4);
            assert_eq!(
                (lib.AllGather)(s, r, 33, dtype_code(Dtype::Bfloat16), comm, st),
                0
            );
            assert_eq!((lib.ReduceScatter)(s, r, 33, half, OP_AVG, comm, st), 0);
            assert_eq!((lib.Broadcast)(s, r, 33, half, 1, comm, st), 0);
            assert_eq!((lib.Reduce)(s, r, 33, half, OP_AVG, 1, comm, st), 0);
            assert_eq!((lib.Send)(s, 33, half, 1, comm, st), 0);
            assert_eq!((lib.Recv)(r, 33, half, 1, comm, st), 0);
            let mut n = 0;
            assert_eq!((lib.CommCount)(comm, &mut n), 0);
            assert_eq!(n, 2);
            assert_eq!((lib.CommDestroy)(comm), 0);
        }
        // a copy under MSCCL++'s name, reached through a link: the label follows the
        // real file
        let Some(m) = build_stub("libmscclpp_nccl.so.0.9.0", 900, &[]) else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("commhal-nccl-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("libnccl.so.2");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&m.path, &link).unwrap();
        let lib = NcclLib::open(&link.to_string_lossy()).unwrap();
        assert!(lib.file.ends_with("/libnccl.so.2"), "{}", lib.file);
        assert_eq!(lib.label(), "MSCCL++ 0.9.0");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_library_without_a_function_is_refused_naming_it() {
        // rename the stub's ncclAllReduce: the library loads, the symbol is missing
        let Some(stub) = build_stub("libnccl.so.2", 22809, &["ncclAllReduce=notAllReduce"]) else {
            return;
        };
        let path = stub.path.clone();
        let e = NcclLib::open(&path).unwrap_err();
        assert!(
            matches!(&e, LoadError::Missing { name, symbol: "ncclAllReduce", .. } if *name == path),
            "{e:?}"
        );
        let e = NcclLib::open_kept(&[path.clone(), "libnccl.so.2".into()]).unwrap_err();
        assert!(
            matches!(e, LoadError::Missing { .. }),
            "a wrong library stops the search: {e:?}"
        );
    }
}
