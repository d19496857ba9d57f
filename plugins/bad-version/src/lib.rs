//! Test fixture: a plugin whose table says ABI version 99. The loader must refuse it
//! with an error naming the file and both versions.

use commhal_hal::plugin::abi::{self, CGuarantees, PluginTable};

static TABLE: PluginTable = PluginTable {
    abi_version: 99,
    struct_size: abi::TABLE_SIZE,
    name: c"bad-version".as_ptr(),
    description: c"built for a future ABI".as_ptr(),
    kinds: abi::KIND_MEMORY,
    memory_kind: abi::MEMORY_HOST_SHARED,
    reach_scope: abi::REACH_ANY,
    reach_cost: 1,
    guarantees: CGuarantees {
        signal_strong: 0,
        put_put_ordered: 0,
        flush_source_reusable: 0,
        flush_remote_visible: 0,
        get: 0,
        ll8: 0,
        ll16: 0,
        graph_capture: 0,
        max_transfer: 0,
        fifo_depth: 0,
        write_copies_source: 0,
        reserved: [0; 3],
    },
    probe: None,
    create: None,
    destroy: None,
    mem_alloc: None,
    mem_export: None,
    mem_map: None,
    mem_release: None,
};

/// The right symbol, the wrong version inside.
#[unsafe(no_mangle)]
pub extern "C" fn commhal_plugin_v1() -> *const PluginTable {
    &TABLE
}
