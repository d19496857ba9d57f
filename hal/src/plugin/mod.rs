//! Out-of-tree backends: a `cdylib` exporting one versioned `extern "C"` entry point
//! (`commhal_plugin_v1`) that returns a `#[repr(C)]` table of function pointers on
//! opaque handles.
//!
//! * [`abi`] — the C ABI itself (the table, codes, rules) and small helpers for plugins
//!   written in Rust. Read its docs before writing a plugin.
//! * [`loader`] — the `COMMHAL_PLUGIN_PATH` search rule, opening and checking a library.
//! * [`adapter`] — [`PluginMemory`], the `MemoryMapped` transport over a plugin's table.
//!
//! A loaded plugin becomes a [`crate::registry::BackendEntry::Plugin`] in the
//! [`crate::registry::Catalog`], next to the built-ins, and is selected, created and
//! tested exactly like them. docs/backends.md walks a vendor through writing one.

pub mod abi;
pub mod adapter;
pub mod loader;

pub use adapter::{PluginMemory, PluginRegion};
pub use loader::{PluginBackend, is_plugin_file_name, load_path, plugin_files};
