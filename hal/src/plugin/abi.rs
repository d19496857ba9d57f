//! The plugin C ABI, version 1: the only thing that crosses between commhal and an
//! out-of-tree backend library. No Rust type crosses it: only fixed-width integers,
//! C strings, byte buffers, file descriptors and opaque `void *` handles.
//!
//! # Entry point
//!
//! A plugin is a shared library (`cdylib`) that exports one C symbol whose name carries
//! the ABI version:
//!
//! ```c
//! const struct commhal_plugin_table *commhal_plugin_v1(void);
//! ```
//!
//! It returns a pointer to a table that stays valid and unchanged for as long as the
//! library is loaded (commhal never unloads a plugin), or NULL if the plugin cannot
//! initialise at all. A later, incompatible ABI gets a new symbol (`commhal_plugin_v2`);
//! a library may export several to support several commhal versions.
//!
//! # The table (C view; the Rust mirror is [`PluginTable`])
//!
//! ```c
//! #include <stdint.h>
//! #include <stddef.h>
//!
//! #define COMMHAL_PLUGIN_ABI_VERSION 1
//! #define COMMHAL_KIND_MEMORY 1u      /* memory-mapped transport (the only kind in v1) */
//! #define COMMHAL_OK               0
//! #define COMMHAL_ERR_INVALID     -1  /* bad argument from the caller */
//! #define COMMHAL_ERR_UNSUPPORTED -2  /* not implemented by this plugin */
//! #define COMMHAL_ERR_BACKEND     -3  /* the driver/library below failed */
//! #define COMMHAL_ERR_PANIC       -4  /* internal bug caught inside the plugin */
//!
//! struct commhal_guarantees {         /* every flag is 0 or 1 */
//!     uint8_t  signal_strong, put_put_ordered, flush_source_reusable,
//!              flush_remote_visible, get, ll8, ll16, graph_capture;
//!     uint64_t max_transfer;          /* bytes */
//!     uint32_t fifo_depth;
//!     /* 1: when a port write returns, its source has been read (it may be overwritten
//!        at once; flush only for the peer's view). Port transports only: 0 for a
//!        memory-only plugin. Byte 20 was the first byte of a reserved, zero uint32_t,
//!        so a table built without this field reads as 0, the safe default. */
//!     uint8_t  write_copies_source;
//!     uint8_t  reserved[3];           /* 0 */
//! };                                   /* 24 bytes */
//!
//! struct commhal_region {             /* filled by alloc and map */
//!     void    *handle;                /* plugin's own; given back to export/release */
//!     uint64_t addr;                  /* address device code uses */
//!     uint64_t len;                   /* >= the length asked for */
//!     uint32_t device_kind;           /* 0 host, 1 CUDA, 2 HIP */
//!     uint32_t device_ordinal;
//! };                                   /* 32 bytes */
//!
//! struct commhal_plugin_table {
//!     uint32_t abi_version;           /* COMMHAL_PLUGIN_ABI_VERSION */
//!     uint32_t struct_size;           /* sizeof(struct commhal_plugin_table) */
//!     const char *name;               /* unique backend name, [a-z0-9-]+ */
//!     const char *description;        /* one line for `commhal info` */
//!     uint32_t kinds;                 /* COMMHAL_KIND_* bits */
//!     uint32_t memory_kind;           /* 0 host-shared, 1 host-pinned, 2 device */
//!     uint32_t reach_scope;           /* 1 same process, 2 same node, 3 any two ranks */
//!     uint32_t reach_cost;            /* relative cost, lower is better (see Reach) */
//!     struct commhal_guarantees guarantees;
//!     /* 1 = available, 0 = unavailable (why in reason), < 0 = error (why in reason) */
//!     int  (*probe)(char *reason, size_t reason_len);
//!     /* options_json: the [backend.NAME] table of COMMHAL_CONFIG as a JSON object */
//!     int  (*create)(const char *options_json, void **transport, char *err, size_t err_len);
//!     void (*destroy)(void *transport);
//!     int  (*mem_alloc)(void *transport, uint32_t device_kind, uint32_t device_ordinal,
//!                       uint64_t len, struct commhal_region *out, char *err, size_t err_len);
//!     /* writes <= bytes_cap bytes and their count; *fd = a NEW descriptor the caller
//!        owns, or -1 when the export has none */
//!     int  (*mem_export)(void *transport, void *region, uint8_t *bytes, size_t bytes_cap,
//!                        size_t *bytes_len, int *fd, char *err, size_t err_len);
//!     /* fd is borrowed (-1 if none): dup it if you keep it past the call */
//!     int  (*mem_map)(void *transport, const uint8_t *bytes, size_t bytes_len, int fd,
//!                     uint64_t len, struct commhal_region *out, char *err, size_t err_len);
//!     void (*mem_release)(void *transport, void *region);
//! };                                   /* 120 bytes on LP64 */
//! ```
//!
//! # Rules
//!
//! * **Version and size.** The loader refuses a table whose `abi_version` is not 1 or
//!   whose `struct_size` is smaller than the table it knows. Fields may be appended in
//!   later v1 revisions (the loader then reads only the prefix it knows).
//! * **Reserved bytes.** A v1 revision may give meaning to reserved bytes, where 0 is
//!   the old behaviour and the safe default: `write_copies_source` is such a byte. The
//!   table's size and version stay, so tables built before and after load alike.
//! * **Strings.** `name` and `description` are NUL-terminated UTF-8 and static. Error and
//!   reason buffers are caller-owned (`err_len` = [`MSG_BUF_LEN`] bytes); the plugin
//!   writes a NUL-terminated message, truncated to fit.
//! * **Export bytes.** The caller's buffer holds [`EXPORT_BYTES_MAX`] bytes.
//! * **Ownership.** A transport lives from `create` to `destroy`; every region from
//!   `mem_alloc`/`mem_map` lives until `mem_release`, and commhal releases every region
//!   before destroying its transport. Regions are released exactly once.
//! * **Threads.** Every function may be called from any thread, concurrently, on the
//!   same transport (never concurrently on the same region with `mem_release`).
//! * **No unwinding.** Nothing may unwind out of a function (no C++ exceptions, no Rust
//!   panics): catch them and return [`ERR_PANIC`]. Rust plugins wrap each body in
//!   [`guard`], which does exactly that.
//! * **No NULL in the table.** All function pointers are required in v1; a NULL one is
//!   a load error.
//!
//! This is the same shape as NCCL's `ncclNet_v8_t` or a libfabric provider table: one
//! versioned struct of function pointers over opaque handles.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The ABI version this commhal speaks; also the suffix of [`ENTRY_SYMBOL`].
pub const ABI_VERSION: u32 = 1;

/// The entry-point symbol, NUL-terminated (for `dlsym`).
pub const ENTRY_SYMBOL: &[u8] = b"commhal_plugin_v1\0";

/// Bit of [`PluginTable::kinds`]: the plugin provides a memory-mapped transport.
pub const KIND_MEMORY: u32 = 1;
/// Reserved for a later ABI version (port-mapped); rejected by a v1 loader.
pub const KIND_PORT: u32 = 2;
/// Reserved for a later ABI version (switch-mapped); rejected by a v1 loader.
pub const KIND_SWITCH: u32 = 4;

/// [`PluginTable::reach_scope`]: only ranks in the same OS process.
pub const REACH_SAME_PROCESS: u32 = 1;
/// [`PluginTable::reach_scope`]: ranks on the same host and virtual node.
pub const REACH_SAME_NODE: u32 = 2;
/// [`PluginTable::reach_scope`]: any two ranks.
pub const REACH_ANY: u32 = 3;

/// [`PluginTable::memory_kind`] / region memory: host memory shared between processes.
pub const MEMORY_HOST_SHARED: u32 = 0;
/// Host memory pinned for a device.
pub const MEMORY_HOST_PINNED: u32 = 1;
/// Device memory.
pub const MEMORY_DEVICE: u32 = 2;

/// [`CRegion::device_kind`] codes.
pub const DEVICE_HOST: u32 = 0;
/// A CUDA device.
pub const DEVICE_CUDA: u32 = 1;
/// A HIP device.
pub const DEVICE_HIP: u32 = 2;

/// Success.
pub const OK: c_int = 0;
/// The caller passed a bad argument (maps to `HalError::InvalidArgument`).
pub const ERR_INVALID: c_int = -1;
/// The plugin does not implement this (maps to `HalError::Unsupported`).
pub const ERR_UNSUPPORTED: c_int = -2;
/// The library or driver below failed (maps to `HalError::Backend`).
pub const ERR_BACKEND: c_int = -3;
/// A bug inside the plugin was caught before it could unwind (maps to `HalError::Backend`).
pub const ERR_PANIC: c_int = -4;

/// Size of every error/reason buffer commhal passes.
pub const MSG_BUF_LEN: usize = 512;
/// Capacity of the export byte buffer commhal passes.
pub const EXPORT_BYTES_MAX: usize = 256;

/// `probe(reason, reason_len)`: 1 available, 0 unavailable, < 0 error.
pub type ProbeFn = unsafe extern "C" fn(reason: *mut c_char, reason_len: usize) -> c_int;
/// `create(options_json, &transport, err, err_len)`.
pub type CreateFn = unsafe extern "C" fn(
    options_json: *const c_char,
    transport: *mut *mut c_void,
    err: *mut c_char,
    err_len: usize,
) -> c_int;
/// `destroy(transport)`.
pub type DestroyFn = unsafe extern "C" fn(transport: *mut c_void);
/// `mem_alloc(transport, device_kind, device_ordinal, len, &region, err, err_len)`.
pub type MemAllocFn = unsafe extern "C" fn(
    transport: *mut c_void,
    device_kind: u32,
    device_ordinal: u32,
    len: u64,
    out: *mut CRegion,
    err: *mut c_char,
    err_len: usize,
) -> c_int;
/// `mem_export(transport, region, bytes, bytes_cap, &bytes_len, &fd, err, err_len)`.
pub type MemExportFn = unsafe extern "C" fn(
    transport: *mut c_void,
    region: *mut c_void,
    bytes: *mut u8,
    bytes_cap: usize,
    bytes_len: *mut usize,
    fd: *mut c_int,
    err: *mut c_char,
    err_len: usize,
) -> c_int;
/// `mem_map(transport, bytes, bytes_len, fd, len, &region, err, err_len)`.
pub type MemMapFn = unsafe extern "C" fn(
    transport: *mut c_void,
    bytes: *const u8,
    bytes_len: usize,
    fd: c_int,
    len: u64,
    out: *mut CRegion,
    err: *mut c_char,
    err_len: usize,
) -> c_int;
/// `mem_release(transport, region)`.
pub type MemReleaseFn = unsafe extern "C" fn(transport: *mut c_void, region: *mut c_void);

/// C mirror of [`crate::Guarantees`]. Each `u8` is 0 or 1 (anything else is a load error).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CGuarantees {
    /// A signal orders every earlier put on the channel ([`crate::SignalStrength::Strong`]).
    pub signal_strong: u8,
    /// [`crate::Guarantees::put_put_ordered`].
    pub put_put_ordered: u8,
    /// [`crate::FlushMeaning::source_reusable`].
    pub flush_source_reusable: u8,
    /// [`crate::FlushMeaning::remote_visible`].
    pub flush_remote_visible: u8,
    /// [`crate::Guarantees::get`].
    pub get: u8,
    /// [`crate::Guarantees::ll8`].
    pub ll8: u8,
    /// [`crate::Guarantees::ll16`].
    pub ll16: u8,
    /// [`crate::Guarantees::graph_capture`].
    pub graph_capture: u8,
    /// [`crate::Guarantees::max_transfer`].
    pub max_transfer: u64,
    /// [`crate::Guarantees::fifo_depth`].
    pub fifo_depth: u32,
    /// [`crate::Guarantees::write_copies_source`]; 0 for a memory-only plugin. It is
    /// the first byte of what was a reserved zero `u32`, so older tables read 0 (false).
    pub write_copies_source: u8,
    /// Must be 0.
    pub reserved: [u8; 3],
}

/// A region as reported by `mem_alloc` / `mem_map`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CRegion {
    /// The plugin's handle, handed back to `mem_export` / `mem_release`. Never NULL.
    pub handle: *mut c_void,
    /// Address device code uses (a host pointer for host memory).
    pub addr: u64,
    /// Length in bytes (at least what was asked).
    pub len: u64,
    /// `DEVICE_*` code of the device that can address it.
    pub device_kind: u32,
    /// Ordinal of that device.
    pub device_ordinal: u32,
}

impl CRegion {
    /// An all-zero region for out-parameters.
    pub const fn empty() -> Self {
        CRegion {
            handle: std::ptr::null_mut(),
            addr: 0,
            len: 0,
            device_kind: 0,
            device_ordinal: 0,
        }
    }
}

/// The table a plugin's `commhal_plugin_v1` returns. See the module docs for the C view
/// and every rule. All function pointers are required (an `Option` only so that a NULL
/// from C is representable and can be refused).
#[repr(C)]
#[derive(Debug)]
pub struct PluginTable {
    /// Must be [`ABI_VERSION`].
    pub abi_version: u32,
    /// `size_of::<PluginTable>()` as the plugin was built.
    pub struct_size: u32,
    /// Unique backend name (`[a-z0-9-]+`), static NUL-terminated UTF-8.
    pub name: *const c_char,
    /// One line for `commhal info`, static NUL-terminated UTF-8.
    pub description: *const c_char,
    /// `KIND_*` bits; v1 allows only [`KIND_MEMORY`].
    pub kinds: u32,
    /// `MEMORY_*` code of the memory `mem_alloc` returns.
    pub memory_kind: u32,
    /// `REACH_*` code: which pairs of ranks the transport joins.
    pub reach_scope: u32,
    /// Relative cost when it joins them (lower is better).
    pub reach_cost: u32,
    /// What the backend promises; the conformance suite checks every claim.
    pub guarantees: CGuarantees,
    /// See [`ProbeFn`].
    pub probe: Option<ProbeFn>,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// See [`DestroyFn`].
    pub destroy: Option<DestroyFn>,
    /// See [`MemAllocFn`].
    pub mem_alloc: Option<MemAllocFn>,
    /// See [`MemExportFn`].
    pub mem_export: Option<MemExportFn>,
    /// See [`MemMapFn`].
    pub mem_map: Option<MemMapFn>,
    /// See [`MemReleaseFn`].
    pub mem_release: Option<MemReleaseFn>,
}

// SAFETY: a table is immutable once returned (an ABI rule) and its pointers are to
// static strings and functions, so sharing a reference between threads is sound. This
// also lets a Rust plugin keep its table in a `static`.
unsafe impl Sync for PluginTable {}

/// The size a plugin must put in [`PluginTable::struct_size`].
pub const TABLE_SIZE: u32 = std::mem::size_of::<PluginTable>() as u32;

/// Signature of the entry point [`ENTRY_SYMBOL`].
pub type EntryFn = unsafe extern "C" fn() -> *const PluginTable;

// ---------------------------------------------------------------------------------------
// Helpers for plugins written in Rust (the example plugin uses them). The loader side
// does not need them.
// ---------------------------------------------------------------------------------------

/// Write `msg` NUL-terminated into the caller's buffer, truncated to `cap - 1` bytes
/// (at a UTF-8 character boundary). Does nothing if `buf` is NULL or `cap` is 0.
///
/// # Safety
/// `buf` must be NULL or valid for writes of `cap` bytes.
pub unsafe fn write_msg(buf: *mut c_char, cap: usize, msg: &str) {
    if buf.is_null() || cap == 0 {
        return;
    }
    let mut n = msg.len().min(cap - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the caller guarantees `buf` is valid for `cap` bytes and `n + 1 <= cap`;
    // `msg` is a separate Rust string, so the ranges do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// Run one plugin function body so that nothing unwinds across the C boundary:
/// `Ok(code)` is returned as is, `Err((code, msg))` writes `msg` into `err` and returns
/// `code`, a panic writes its message and returns [`ERR_PANIC`].
///
/// # Safety
/// `err` must be NULL or valid for writes of `err_len` bytes.
pub unsafe fn guard(
    err: *mut c_char,
    err_len: usize,
    body: impl FnOnce() -> Result<c_int, (c_int, String)>,
) -> c_int {
    let (code, msg) = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(code)) => return code,
        Ok(Err((code, msg))) => (code, msg),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            (ERR_PANIC, format!("plugin panicked: {what}"))
        }
    };
    // SAFETY: forwarded from this function's contract.
    unsafe { write_msg(err, err_len, &msg) };
    code
}

/// Read a C string the other side handed over; `None` for NULL or non-UTF-8.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string valid for the call.
pub unsafe fn read_c_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The C layout documented above; a change here is an ABI break (new version).
    #[test]
    fn layout_matches_the_documented_c_struct() {
        assert_eq!(size_of::<CGuarantees>(), 24);
        assert_eq!(offset_of!(CGuarantees, max_transfer), 8);
        assert_eq!(offset_of!(CGuarantees, fifo_depth), 16);
        assert_eq!(offset_of!(CGuarantees, write_copies_source), 20);
        assert_eq!(size_of::<CRegion>(), 32);
        assert_eq!(offset_of!(CRegion, len), 16);
        assert_eq!(offset_of!(CRegion, device_ordinal), 28);
        if size_of::<usize>() == 8 {
            assert_eq!(offset_of!(PluginTable, name), 8);
            assert_eq!(offset_of!(PluginTable, kinds), 24);
            assert_eq!(offset_of!(PluginTable, guarantees), 40);
            assert_eq!(offset_of!(PluginTable, probe), 64);
            assert_eq!(offset_of!(PluginTable, mem_release), 112);
            assert_eq!(TABLE_SIZE, 120);
        }
        assert_eq!(
            ENTRY_SYMBOL,
            format!("commhal_plugin_v{ABI_VERSION}\0").as_bytes()
        );
    }

    /// A table built when byte 20 of `struct commhal_guarantees` was the first byte of
    /// a reserved zero `uint32_t` reads `write_copies_source = 0`.
    #[test]
    fn a_zero_reserved_word_reads_as_no_write_copies_source() {
        #[repr(C)]
        struct WithReservedWord {
            flags: [u8; 8],
            max_transfer: u64,
            fifo_depth: u32,
            reserved: u32,
        }
        let old = WithReservedWord {
            flags: [1; 8],
            max_transfer: 7,
            fifo_depth: 4,
            reserved: 0,
        };
        assert_eq!(size_of::<WithReservedWord>(), size_of::<CGuarantees>());
        // SAFETY: both are repr(C), 24 bytes, every field an integer: any bytes are a
        // valid CGuarantees.
        let g: CGuarantees = unsafe { std::mem::transmute(old) };
        assert_eq!((g.write_copies_source, g.reserved), (0, [0; 3]));
        assert_eq!((g.graph_capture, g.max_transfer, g.fifo_depth), (1, 7, 4));
    }

    #[test]
    fn write_msg_truncates_at_a_char_boundary_and_terminates() {
        let mut buf = [0x55 as c_char; 5];
        // SAFETY: buf is 5 writable bytes.
        unsafe { write_msg(buf.as_mut_ptr(), buf.len(), "ab€cd") };
        // "ab€" is 5 bytes and leaves no room for the NUL; '€' is not split: "ab".
        // SAFETY: write_msg NUL-terminated the buffer.
        let s = unsafe { read_c_str(buf.as_ptr()) }.unwrap();
        assert_eq!(s, "ab");
    }

    #[test]
    fn guard_turns_panics_and_errors_into_codes() {
        let mut buf = [0 as c_char; MSG_BUF_LEN];
        // SAFETY: buf is MSG_BUF_LEN writable bytes.
        let code = unsafe { guard(buf.as_mut_ptr(), buf.len(), || panic!("boom")) };
        assert_eq!(code, ERR_PANIC);
        // SAFETY: guard wrote a NUL-terminated message.
        let msg = unsafe { read_c_str(buf.as_ptr()) }.unwrap();
        assert!(msg.contains("boom"), "{msg}");
        // SAFETY: as above.
        let code = unsafe {
            guard(buf.as_mut_ptr(), buf.len(), || {
                Err((ERR_INVALID, "len is 0".into()))
            })
        };
        assert_eq!(code, ERR_INVALID);
        // SAFETY: as above.
        assert_eq!(unsafe { read_c_str(buf.as_ptr()) }, Some("len is 0"));
        // SAFETY: as above.
        assert_eq!(unsafe { guard(buf.as_mut_ptr(), buf.len(), || Ok(7)) }, 7);
    }
}
