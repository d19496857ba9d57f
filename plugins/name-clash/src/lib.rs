//! Test fixture: a well-formed plugin whose name, `host-emu`, is the name of a
//! built-in backend. The catalog must refuse it with an error naming the file; its
//! functions are never meant to be used and report "unsupported".

use std::ffi::{c_char, c_int, c_void};

use commhal_hal::plugin::abi::{self, CGuarantees, CRegion, PluginTable};

unsafe extern "C" fn probe(reason: *mut c_char, reason_len: usize) -> c_int {
    // SAFETY: commhal passes a `reason_len`-byte buffer (ABI rule).
    unsafe { abi::write_msg(reason, reason_len, "test fixture, never available") };
    0
}

unsafe extern "C" fn create(
    _options: *const c_char,
    _transport: *mut *mut c_void,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    // SAFETY: commhal passes an `err_len`-byte buffer (ABI rule).
    unsafe { abi::write_msg(err, err_len, "test fixture") };
    abi::ERR_UNSUPPORTED
}

unsafe extern "C" fn destroy(_transport: *mut c_void) {}

unsafe extern "C" fn mem_alloc(
    _t: *mut c_void,
    _dk: u32,
    _do: u32,
    _len: u64,
    _out: *mut CRegion,
    _err: *mut c_char,
    _err_len: usize,
) -> c_int {
    abi::ERR_UNSUPPORTED
}

unsafe extern "C" fn mem_export(
    _t: *mut c_void,
    _r: *mut c_void,
    _b: *mut u8,
    _cap: usize,
    _blen: *mut usize,
    _fd: *mut c_int,
    _err: *mut c_char,
    _err_len: usize,
) -> c_int {
    abi::ERR_UNSUPPORTED
}

unsafe extern "C" fn mem_map(
    _t: *mut c_void,
    _b: *const u8,
    _blen: usize,
    _fd: c_int,
    _len: u64,
    _out: *mut CRegion,
    _err: *mut c_char,
    _err_len: usize,
) -> c_int {
    abi::ERR_UNSUPPORTED
}

unsafe extern "C" fn mem_release(_t: *mut c_void, _r: *mut c_void) {}

static TABLE: PluginTable = PluginTable {
    abi_version: abi::ABI_VERSION,
    struct_size: abi::TABLE_SIZE,
    name: c"host-emu".as_ptr(),
    description: c"a plugin that wrongly takes a built-in's name".as_ptr(),
    kinds: abi::KIND_MEMORY,
    memory_kind: abi::MEMORY_HOST_SHARED,
    reach_scope: abi::REACH_ANY,
    reach_cost: 1,
    guarantees: CGuarantees {
        signal_strong: 0,
        put_put_ordered: 0,
        flush_source_reusable: 1,
        flush_remote_visible: 0,
        get: 0,
        ll8: 0,
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

/// Entry point of the fixture.
#[unsafe(no_mangle)]
pub extern "C" fn commhal_plugin_v1() -> *const PluginTable {
    &TABLE
}
