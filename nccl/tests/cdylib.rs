//! The built `libcommhal_nccl.so` as a C program sees it: every NCCL symbol PyTorch
//! 2.11 imports is exported (and declared in the header), the library loads with
//! `dlopen`, and without a GPU it answers with NCCL's error codes and a message, never a
//! crash. With a GPU (`COMMHAL_REQUIRE_GPU=1` makes one mandatory) a one-rank
//! communicator is made, runs an all-reduce and is destroyed.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::PathBuf;

use libloading::{Library, Symbol};

/// NCCL's functions `libtorch_cuda.so` 2.11 imports (`nm -D --undefined-only`), plus
/// ncclCommCuDevice.
const TORCH_IMPORTS: &[&str] = &[
    "ncclAllGather",
    "ncclAllReduce",
    "ncclAlltoAll",
    "ncclBcast",
    "ncclBroadcast",
    "ncclCommAbort",
    "ncclCommCount",
    "ncclCommDeregister",
    "ncclCommDestroy",
    "ncclCommFinalize",
    "ncclCommGetAsyncError",
    "ncclCommInitAll",
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommInitRankScalable",
    "ncclCommRegister",
    "ncclCommShrink",
    "ncclCommSplit",
    "ncclCommUserRank",
    "ncclCommWindowDeregister",
    "ncclCommWindowRegister",
    "ncclDevCommCreate",
    "ncclDevCommDestroy",
    "ncclGetErrorString",
    "ncclGetLastError",
    "ncclGetUniqueId",
    "ncclGetVersion",
    "ncclGroupEnd",
    "ncclGroupSimulateEnd",
    "ncclGroupStart",
    "ncclMemAlloc",
    "ncclMemFree",
    "ncclRecv",
    "ncclRedOpCreatePreMulSum",
    "ncclRedOpDestroy",
    "ncclReduce",
    "ncclReduceScatter",
    "ncclSend",
    "ncclCommCuDevice",
];

/// NCCL 2.28 functions exported beyond PyTorch's imports (they run on the fallback).
const ALSO_EXPORTED: &[&str] = &["ncclGather", "ncclScatter", "ncclCommRevoke"];

fn library_path() -> PathBuf {
    // `cargo test` builds the cdylib next to this executable (target/<profile>/deps/);
    // `cargo build` copies it up to target/<profile>/. Prefer the one cargo test built.
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    let here = deps.join("libcommhal_nccl.so");
    if here.exists() {
        return here;
    }
    deps.parent()
        .expect("target dir")
        .join("libcommhal_nccl.so")
}

fn load() -> Library {
    let p = library_path();
    // SAFETY: loading our own library runs no initialisers with preconditions.
    unsafe { Library::new(&p) }.unwrap_or_else(|e| panic!("dlopen {}: {e}", p.display()))
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Id([c_char; 128]);

type GetErr = unsafe extern "C" fn(*mut c_void) -> *const c_char;

fn last_error(lib: &Library, comm: *mut c_void) -> String {
    // SAFETY: the prototype of ncclGetLastError.
    let f: Symbol<GetErr> = unsafe { lib.get(b"ncclGetLastError\0") }.expect("symbol");
    // SAFETY: any handle is accepted; the string is NUL-terminated and lives until this
    // thread's next call.
    unsafe { CStr::from_ptr(f(comm)) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn every_symbol_torch_imports_is_exported_and_declared() {
    let lib = load();
    let header = include_str!("../include/commhal_nccl.h");
    for name in TORCH_IMPORTS.iter().chain(ALSO_EXPORTED) {
        let c = format!("{name}\0");
        // SAFETY: only the address is looked up.
        let s: Result<Symbol<*const c_void>, _> = unsafe { lib.get(c.as_bytes()) };
        assert!(s.is_ok(), "{name} is not exported by libcommhal_nccl.so");
        assert!(
            header.contains(&format!(" {name}(")),
            "{name} is not declared in commhal_nccl.h"
        );
    }
}

/// The table the benchmark's `--compare-lib` and the fallback open finds every
/// function it requires in this library, and names it by its file.
#[test]
fn the_shared_table_opens_this_library() {
    use commhal_cuda_coll::nccl_lib::NcclLib;
    let p = library_path();
    let lib = NcclLib::open(&p.to_string_lossy()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(lib.version_code(), Ok(22809));
    assert_eq!(lib.label(), "commhal-nccl (NCCL API 2.28.9)");
    assert!(lib.AlltoAll.is_some() && lib.Gather.is_some() && lib.CommShrink.is_some());
}

#[test]
fn version_ids_and_error_strings() {
    let lib = load();
    // SAFETY: NCCL's prototypes.
    unsafe {
        let ver: Symbol<unsafe extern "C" fn(*mut c_int) -> c_int> =
            lib.get(b"ncclGetVersion\0").unwrap();
        let mut v = 0;
        assert_eq!(ver(&mut v), 0);
        assert_eq!(v, 22809);
        assert_eq!(
            ver(std::ptr::null_mut()),
            4,
            "null out-pointer: ncclInvalidArgument"
        );

        let es: Symbol<unsafe extern "C" fn(c_int) -> *const c_char> =
            lib.get(b"ncclGetErrorString\0").unwrap();
        for code in 0..8 {
            assert!(!CStr::from_ptr(es(code)).to_bytes().is_empty());
        }

        let gid: Symbol<unsafe extern "C" fn(*mut Id) -> c_int> =
            lib.get(b"ncclGetUniqueId\0").unwrap();
        let mut id = Id([0; 128]);
        assert_eq!(
            gid(&mut id),
            0,
            "{}",
            last_error(&lib, std::ptr::null_mut())
        );
        // commhal's part at offset 64; the front holds the fallback NCCL's id (none here)
        assert_eq!(
            &id.0[64..68].iter().map(|&c| c as u8).collect::<Vec<_>>(),
            b"CHN1"
        );
        assert!(id.0[..64].iter().all(|&c| c == 0));
    }
}

#[test]
fn bad_input_gets_codes_and_messages() {
    let lib = load();
    type AllReduce = unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        *mut c_void,
        *mut c_void,
    ) -> c_int;
    type Init = unsafe extern "C" fn(*mut *mut c_void, c_int, Id, c_int) -> c_int;
    // SAFETY: NCCL's prototypes; every pointer passed is null, bogus on purpose (the
    // library must check it before use), or valid.
    unsafe {
        let ar: Symbol<AllReduce> = lib.get(b"ncclAllReduce\0").unwrap();
        let null = std::ptr::null_mut();
        assert_eq!(ar(null, null, 4, 7, 0, null, null), 4);
        assert!(
            last_error(&lib, null).contains("NULL"),
            "{}",
            last_error(&lib, null)
        );
        let bogus = 0x1234usize as *mut c_void;
        assert_eq!(ar(null, null, 4, 7, 0, bogus, null), 4);
        assert!(last_error(&lib, null).contains("not a live communicator"));

        let end: Symbol<unsafe extern "C" fn() -> c_int> = lib.get(b"ncclGroupEnd\0").unwrap();
        assert_eq!(
            end(),
            5,
            "ncclGroupEnd without ncclGroupStart: ncclInvalidUsage"
        );

        let free: Symbol<unsafe extern "C" fn(*mut c_void) -> c_int> =
            lib.get(b"ncclMemFree\0").unwrap();
        assert_eq!(free(bogus), 4);

        let init: Symbol<Init> = lib.get(b"ncclCommInitRank\0").unwrap();
        let mut comm = null;
        assert_eq!(
            init(&mut comm, 1, Id([0; 128]), 0),
            4,
            "an id this library did not make"
        );
        assert!(last_error(&lib, null).contains("ncclUniqueId"));
        assert!(comm.is_null());
        assert_eq!(init(&mut comm, 0, Id([0; 128]), 0), 4, "0 ranks");
    }
}

#[test]
fn one_rank_communicator_or_a_clear_error_without_gpu() {
    let lib = load();
    let gpu = commhal_cuda_rt::probe().is_available() && commhal_cuda_rt::nvrtc_available();
    let require = commhal_hal::settings::tests::REQUIRE_GPU
        .flag()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(gpu || !require, "COMMHAL_REQUIRE_GPU=1 but no GPU/NVRTC");
    type Init = unsafe extern "C" fn(*mut *mut c_void, c_int, Id, c_int) -> c_int;
    // SAFETY: NCCL's prototypes with valid out-pointers.
    unsafe {
        let gid: Symbol<unsafe extern "C" fn(*mut Id) -> c_int> =
            lib.get(b"ncclGetUniqueId\0").unwrap();
        let init: Symbol<Init> = lib.get(b"ncclCommInitRank\0").unwrap();
        let destroy: Symbol<unsafe extern "C" fn(*mut c_void) -> c_int> =
            lib.get(b"ncclCommDestroy\0").unwrap();
        let mut id = Id([0; 128]);
        assert_eq!(gid(&mut id), 0);
        let mut comm = std::ptr::null_mut();
        let r = init(&mut comm, 1, id, 0);
        let msg = last_error(&lib, std::ptr::null_mut());
        if !gpu {
            assert!(
                r == 1 || r == 5,
                "no GPU: ncclUnhandledCudaError or ncclInvalidUsage, got {r} ({msg})"
            );
            assert!(comm.is_null());
            assert!(msg.starts_with("ncclCommInitRank: "), "{msg}");
            eprintln!("SKIPPED the GPU half: no GPU; init said: {msg}");
            return;
        }
        assert_eq!(r, 0, "{msg}");
        let count: Symbol<unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int> =
            lib.get(b"ncclCommCount\0").unwrap();
        let mut n = 0;
        assert_eq!(count(comm, &mut n), 0);
        assert_eq!(n, 1);
        assert_eq!(destroy(comm), 0);
        // destroyed: the handle is refused, not used
        assert_eq!(count(comm, &mut n), 4);
    }
}

/// Child half of [`profile_counts_calls_and_reports_at_exit`]: calls through the
/// library with the census on; the table is written at exit.
#[test]
fn profile_child() {
    if std::env::var_os("CDYLIB_TEST_PROFILE_CHILD").is_none() {
        return;
    }
    let lib = load();
    // SAFETY: NCCL's prototypes; null out-pointers are refused with a code.
    unsafe {
        let start: Symbol<unsafe extern "C" fn() -> c_int> = lib.get(b"ncclGroupStart\0").unwrap();
        let end: Symbol<unsafe extern "C" fn() -> c_int> = lib.get(b"ncclGroupEnd\0").unwrap();
        for _ in 0..3 {
            assert_eq!(start(), 0);
            assert_eq!(end(), 0);
        }
        let gid: Symbol<unsafe extern "C" fn(*mut Id) -> c_int> =
            lib.get(b"ncclGetUniqueId\0").unwrap();
        assert_ne!(gid(std::ptr::null_mut()), 0);
    }
}

#[test]
fn profile_counts_calls_and_reports_at_exit() {
    let exe = std::env::current_exe().expect("test executable path");
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "profile_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CDYLIB_TEST_PROFILE_CHILD", "1")
        .env("COMMHAL_NCCL_PROFILE", "1")
        .output()
        .expect("run the child test");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {err}");
    let row = |name: &str| {
        err.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .map(|l| l.split_whitespace().nth(2).unwrap_or("").to_string())
    };
    assert!(err.contains("commhal-nccl: profile"), "{err}");
    assert_eq!(row("ncclGroupStart").as_deref(), Some("3"), "{err}");
    assert_eq!(row("ncclGroupEnd").as_deref(), Some("3"), "{err}");
    assert_eq!(row("ncclGetUniqueId").as_deref(), Some("1"), "{err}");
}
