//! Finding the built plugin libraries from a test binary.
//!
//! Cargo builds this package's cdylib and its dev-dependencies' cdylibs (the broken
//! fixtures under plugins/) into `target/<profile>/deps/` before it runs the tests,
//! and the test binary itself lives in that same directory.

#![allow(dead_code)]

use std::path::PathBuf;

/// `target/<profile>/deps`, where cargo put the libraries.
pub fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .expect("test binary has a parent dir")
        .to_path_buf()
}

/// Path of `lib<crate_name>.so`, built by cargo before the tests.
pub fn cdylib(crate_name: &str) -> PathBuf {
    let file = format!("lib{crate_name}.so");
    for dir in [deps_dir(), deps_dir().join("..")] {
        let p = dir.join(&file);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{file} not found next to {}: run the tests through cargo (`cargo test -p commhal-example-plugin`), which builds it",
        deps_dir().display()
    );
}

/// The example plugin library.
pub fn example_plugin() -> PathBuf {
    cdylib("commhal_example_plugin")
}

/// A fresh empty directory for one test.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "commhal-example-plugin-{}-{tag}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create temp dir");
    d
}

/// Fill `n` bytes at `addr` with a pattern derived from `seed`.
///
/// # Safety
/// `addr..addr+n` must be writable memory nobody else uses for the call.
pub unsafe fn fill(addr: u64, n: usize, seed: u8) {
    // SAFETY: forwarded from the caller.
    let s = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, n) };
    for (i, b) in s.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

/// Read `n` bytes at `addr`.
///
/// # Safety
/// `addr..addr+n` must be readable memory not written concurrently.
pub unsafe fn read(addr: u64, n: usize) -> Vec<u8> {
    // SAFETY: forwarded from the caller.
    unsafe { std::slice::from_raw_parts(addr as *const u8, n) }.to_vec()
}

/// The pattern `fill` writes.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
