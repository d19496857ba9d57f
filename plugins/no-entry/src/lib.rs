//! Test fixture: a shared library without the `commhal_plugin_v1` entry point. The
//! loader must refuse it with an error naming the file and the missing symbol.

/// Some unrelated exported function (so the library is not empty).
#[unsafe(no_mangle)]
pub extern "C" fn commhal_not_a_plugin() -> i32 {
    42
}
