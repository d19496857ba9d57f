//! `example-loopback`: a tiny, real out-of-tree commhal backend, built as a `cdylib`
//! (`libcommhal_example_plugin.so`) that speaks the plugin C ABI v1
//! (`commhal_hal::plugin::abi`). docs/backends.md walks through it step by step.
//!
//! It provides a memory-mapped transport over Linux shared memory:
//! * `mem_alloc` = `memfd_create` + `ftruncate` + `mmap(MAP_SHARED)` (zeroed);
//! * `mem_export` = a 16-byte description (magic, version, length) + a `dup` of the memfd;
//! * `mem_map` = check the description and the fd's size, then `mmap(MAP_SHARED)` the fd;
//! * `mem_release` = `munmap` + close.
//!
//! Stores through a mapping are visible in the owner's allocation (same pages), so two
//! processes on one host — or two ranks of one process — can share memory through it.
//!
//! Options (the `[backend.example-loopback]` table of `COMMHAL_CONFIG`, passed as JSON):
//! `max_alloc` (bytes, default unlimited) refuses larger allocations.
//! Setting `COMMHAL_EXAMPLE_LOOPBACK_DISABLE=1` makes `probe` report it unavailable.
//!
//! Every exported function body runs inside [`abi::guard`], so no panic unwinds into
//! the caller.

use std::ffi::{c_char, c_int, c_void};
use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd};

use commhal_hal::plugin::abi::{
    self, CGuarantees, CRegion, ERR_BACKEND, ERR_INVALID, ERR_UNSUPPORTED, OK, PluginTable,
};
use commhal_hal::settings::tests::EXAMPLE_LOOPBACK_DISABLE;

/// Name of this backend.
pub const NAME: &str = "example-loopback";
/// `mem_export` bytes start with this.
const MAGIC: &[u8; 4] = b"CHXL";
/// Length of the export description: magic, version (u32 LE), length (u64 LE).
const EXPORT_LEN: usize = 16;

type Fallible = Result<c_int, (c_int, String)>;

/// The transport handle: options given to `create`.
struct Transport {
    max_alloc: u64,
}

/// A region handle: the memfd and the mapping of it.
struct RegionState {
    file: File,
    ptr: *mut c_void,
    len: u64,
}

/// The v1 table. `const` so another crate (or a test) may derive a variant of it.
pub const TABLE_V1: PluginTable = PluginTable {
    abi_version: abi::ABI_VERSION,
    struct_size: abi::TABLE_SIZE,
    name: c"example-loopback".as_ptr(),
    description: c"example plugin: memfd shared memory between ranks of one host".as_ptr(),
    kinds: abi::KIND_MEMORY,
    memory_kind: abi::MEMORY_HOST_SHARED,
    reach_scope: abi::REACH_SAME_NODE,
    reach_cost: 30,
    guarantees: CGuarantees {
        signal_strong: 1,
        put_put_ordered: 0,
        flush_source_reusable: 1,
        flush_remote_visible: 0,
        get: 1,
        ll8: 1,
        ll16: 0,
        graph_capture: 0,
        max_transfer: u64::MAX,
        fifo_depth: 0,
        write_copies_source: 0,
        reserved: [0; 3],
    },
    probe: Some(probe),
    create: Some(create),
    destroy: Some(destroy),
    mem_alloc: Some(mem_alloc),
    mem_export: Some(mem_export),
    mem_map: Some(mem_map),
    mem_release: Some(mem_release),
};

static TABLE: PluginTable = TABLE_V1;

/// The entry point commhal looks up (`commhal_plugin_v1`).
#[unsafe(no_mangle)]
pub extern "C" fn commhal_plugin_v1() -> *const PluginTable {
    &TABLE
}

fn os_err(what: &str) -> (c_int, String) {
    (
        ERR_BACKEND,
        format!("{what}: {}", std::io::Error::last_os_error()),
    )
}

unsafe extern "C" fn probe(reason: *mut c_char, reason_len: usize) -> c_int {
    let body = || -> Fallible {
        let disabled = EXAMPLE_LOOPBACK_DISABLE
            .flag()
            .map_err(|e| (ERR_INVALID, e.to_string()))?;
        if disabled {
            return Err((0, "disabled by COMMHAL_EXAMPLE_LOOPBACK_DISABLE=1".into()));
        }
        let f = new_memfd().map_err(|(_, m)| (0, format!("no memfd support: {m}")))?;
        drop(f);
        Ok(1)
    };
    // SAFETY: commhal passes a `reason_len`-byte buffer (ABI rule).
    unsafe { abi::guard(reason, reason_len, body) }
}

unsafe extern "C" fn create(
    options_json: *const c_char,
    transport: *mut *mut c_void,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    let body = || -> Fallible {
        if transport.is_null() {
            return Err((ERR_INVALID, "transport out-pointer is NULL".into()));
        }
        // SAFETY: NUL-terminated JSON or NULL (ABI rule).
        let json = unsafe { abi::read_c_str(options_json) }.unwrap_or("{}");
        let opts: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| (ERR_INVALID, format!("options are not JSON: {e}")))?;
        let max_alloc = match opts.get("max_alloc") {
            None => u64::MAX,
            Some(v) => v.as_u64().ok_or((
                ERR_INVALID,
                format!("option max_alloc = {v} must be a non-negative integer (bytes)"),
            ))?,
        };
        let obj = opts
            .as_object()
            .ok_or((ERR_INVALID, format!("options must be a table, got {opts}")))?;
        if let Some(k) = obj.keys().find(|k| k.as_str() != "max_alloc") {
            return Err((
                ERR_INVALID,
                format!("unknown option `{k}` (known: max_alloc)"),
            ));
        }
        let t = Box::new(Transport { max_alloc });
        // SAFETY: checked non-NULL above.
        unsafe { *transport = Box::into_raw(t).cast() };
        Ok(OK)
    };
    // SAFETY: commhal passes an `err_len`-byte buffer (ABI rule).
    unsafe { abi::guard(err, err_len, body) }
}

unsafe extern "C" fn destroy(transport: *mut c_void) {
    if !transport.is_null() {
        // SAFETY: `transport` came from `create`'s Box::into_raw and is destroyed once.
        drop(unsafe { Box::from_raw(transport.cast::<Transport>()) });
    }
}

fn new_memfd() -> Result<File, (c_int, String)> {
    // SAFETY: memfd_create with a static NUL-terminated name; returns a new fd or -1.
    let fd = unsafe { libc::memfd_create(c"commhal-example-loopback".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(os_err("memfd_create"));
    }
    // SAFETY: `fd` is a freshly created descriptor we own.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `mmap(MAP_SHARED)` the first `len` bytes of `fd`.
fn map_fd(fd: BorrowedFd<'_>, len: u64) -> Result<*mut c_void, (c_int, String)> {
    let n = usize::try_from(len).map_err(|_| (ERR_INVALID, format!("len {len} too large")))?;
    // SAFETY: a new mapping chosen by the kernel (addr NULL) of an open fd; it aliases no
    // Rust object. Failure is reported as MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            n,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(os_err("mmap"));
    }
    Ok(p)
}

fn fill(out: *mut CRegion, state: RegionState) -> Fallible {
    let region = CRegion {
        addr: state.ptr as u64,
        len: state.len,
        device_kind: abi::DEVICE_HOST,
        device_ordinal: 0,
        handle: Box::into_raw(Box::new(state)).cast(),
    };
    // SAFETY: callers checked `out` is non-NULL; commhal passes a valid CRegion.
    unsafe { out.write(region) };
    Ok(OK)
}

unsafe extern "C" fn mem_alloc(
    transport: *mut c_void,
    device_kind: u32,
    _device_ordinal: u32,
    len: u64,
    out: *mut CRegion,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    let body = || -> Fallible {
        if transport.is_null() || out.is_null() {
            return Err((ERR_INVALID, "NULL transport or out-pointer".into()));
        }
        // SAFETY: a live handle from `create` (ABI rule); only read.
        let t = unsafe { &*transport.cast::<Transport>() };
        if device_kind != abi::DEVICE_HOST {
            return Err((
                ERR_UNSUPPORTED,
                format!("device kind {device_kind}: example-loopback allocates host memory only"),
            ));
        }
        if len == 0 {
            return Err((ERR_INVALID, "len is 0: allocate at least one byte".into()));
        }
        if len > t.max_alloc {
            return Err((
                ERR_INVALID,
                format!("len {len} exceeds option max_alloc = {}", t.max_alloc),
            ));
        }
        let file = new_memfd()?;
        file.set_len(len)
            .map_err(|e| (ERR_BACKEND, format!("ftruncate: {e}")))?;
        let ptr = map_fd(std::os::fd::AsFd::as_fd(&file), len)?;
        fill(out, RegionState { file, ptr, len })
    };
    // SAFETY: commhal passes an `err_len`-byte buffer (ABI rule).
    unsafe { abi::guard(err, err_len, body) }
}

unsafe extern "C" fn mem_export(
    transport: *mut c_void,
    region: *mut c_void,
    bytes: *mut u8,
    bytes_cap: usize,
    bytes_len: *mut usize,
    fd: *mut c_int,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    let body = || -> Fallible {
        if transport.is_null()
            || region.is_null()
            || bytes.is_null()
            || bytes_len.is_null()
            || fd.is_null()
        {
            return Err((ERR_INVALID, "NULL argument to mem_export".into()));
        }
        if bytes_cap < EXPORT_LEN {
            return Err((
                ERR_INVALID,
                format!("export buffer of {bytes_cap} bytes; need {EXPORT_LEN}"),
            ));
        }
        // SAFETY: a live region handle from mem_alloc/mem_map (ABI rule); only read.
        let r = unsafe { &*region.cast::<RegionState>() };
        let dup = r
            .file
            .try_clone()
            .map_err(|e| (ERR_BACKEND, format!("dup: {e}")))?;
        let mut desc = [0u8; EXPORT_LEN];
        desc[..4].copy_from_slice(MAGIC);
        desc[4..8].copy_from_slice(&1u32.to_le_bytes());
        desc[8..].copy_from_slice(&r.len.to_le_bytes());
        // SAFETY: `bytes` holds `bytes_cap >= EXPORT_LEN` bytes; out-pointers valid.
        unsafe {
            std::ptr::copy_nonoverlapping(desc.as_ptr(), bytes, EXPORT_LEN);
            *bytes_len = EXPORT_LEN;
            *fd = dup.into_raw_fd();
        }
        Ok(OK)
    };
    // SAFETY: commhal passes an `err_len`-byte buffer (ABI rule).
    unsafe { abi::guard(err, err_len, body) }
}

unsafe extern "C" fn mem_map(
    transport: *mut c_void,
    bytes: *const u8,
    bytes_len: usize,
    fd: c_int,
    len: u64,
    out: *mut CRegion,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    let body = || -> Fallible {
        if transport.is_null() || out.is_null() || (bytes.is_null() && bytes_len > 0) {
            return Err((ERR_INVALID, "NULL argument to mem_map".into()));
        }
        let desc: &[u8] = if bytes_len == 0 {
            &[]
        } else {
            // SAFETY: `bytes` holds `bytes_len` bytes for the call (ABI rule).
            unsafe { std::slice::from_raw_parts(bytes, bytes_len) }
        };
        if desc.len() != EXPORT_LEN || &desc[..4] != MAGIC || desc[4..8] != 1u32.to_le_bytes() {
            return Err((
                ERR_INVALID,
                "export is not an example-loopback v1 description".into(),
            ));
        }
        let described = u64::from_le_bytes(desc[8..].try_into().unwrap_or_default());
        if described != len {
            return Err((
                ERR_INVALID,
                format!("export says {described} bytes but {len} were asked"),
            ));
        }
        if fd < 0 {
            return Err((
                ERR_INVALID,
                "export carries no memfd: pass its descriptor along".into(),
            ));
        }
        // SAFETY: the fd is open for the call (borrowed, ABI rule).
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let file = File::from(
            borrowed
                .try_clone_to_owned()
                .map_err(|e| (ERR_BACKEND, format!("dup: {e}")))?,
        );
        let size = file
            .metadata()
            .map_err(|e| (ERR_BACKEND, format!("fstat: {e}")))?
            .len();
        if size < len {
            return Err((
                ERR_INVALID,
                format!("the descriptor holds {size} bytes, fewer than the {len} exported"),
            ));
        }
        let ptr = map_fd(std::os::fd::AsFd::as_fd(&file), len)?;
        fill(out, RegionState { file, ptr, len })
    };
    // SAFETY: commhal passes an `err_len`-byte buffer (ABI rule).
    unsafe { abi::guard(err, err_len, body) }
}

unsafe extern "C" fn mem_release(_transport: *mut c_void, region: *mut c_void) {
    if region.is_null() {
        return;
    }
    // SAFETY: `region` came from `fill`'s Box::into_raw and is released once (ABI rule).
    let r = unsafe { Box::from_raw(region.cast::<RegionState>()) };
    // SAFETY: unmapping exactly the mapping made for this region; nothing uses it after
    // release (the caller's contract).
    unsafe { libc::munmap(r.ptr, r.len as usize) };
    drop(r.file);
}
