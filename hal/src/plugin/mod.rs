//! Out-of-tree backends: a `cdylib` exporting one versioned `extern "C"` entry point
//! that returns a `#[repr(C)]` table. Filled in by the plugin loader.
