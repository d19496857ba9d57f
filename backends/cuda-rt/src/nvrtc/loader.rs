//! Finding libnvrtc.
//!
//! cudarc opens NVRTC by *name* (`libnvrtc.so`, ..., `libnvrtc.so.13` for CUDA 13),
//! so the usual way is `LD_LIBRARY_PATH=<dir>` (scripts/install-nvrtc.sh prints the
//! dir). Alternatively, set `COMMHAL_NVRTC_DIR=<dir>` or call [`preload_nvrtc_from`]:
//! we then `dlopen` `<dir>/libnvrtc-builtins.so.13.*` and `<dir>/libnvrtc.so.13` by
//! full path and keep them loaded; the dynamic loader matches later by-name opens
//! (cudarc's, and libnvrtc's own open of its builtins) against the loaded sonames.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use commhal_hal::settings::gpu::NVRTC_DIR;
use commhal_hal::settings::tests::REQUIRE_NVRTC;

use crate::error::{CudaError, Result};

fn find(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && !n.contains(".alt."))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

/// Load NVRTC (and its builtins library) from `dir` by full path and keep it loaded
/// for the life of the process.
pub fn preload_nvrtc_from(dir: &Path) -> Result<()> {
    static KEPT: Mutex<Vec<libloading::Library>> = Mutex::new(Vec::new());
    let nvrtc = find(dir, "libnvrtc.so.13").ok_or_else(|| {
        CudaError::invalid(format!(
            "{} has no libnvrtc.so.13: run scripts/install-nvrtc.sh and pass the directory it prints",
            dir.display()
        ))
    })?;
    let mut libs = Vec::new();
    if let Some(builtins) = find(dir, "libnvrtc-builtins.so.13") {
        libs.push(builtins);
    }
    libs.push(nvrtc);
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    for path in libs {
        // SAFETY: loading NVIDIA's NVRTC libraries runs only their ELF initialisers,
        // which have no preconditions; the handle is kept (never unloaded), so code
        // and data stay mapped for every later caller.
        let lib = unsafe { libloading::Library::new(&path) }
            .map_err(|e| CudaError::invalid(format!("cannot load {}: {e}", path.display())))?;
        kept.push(lib);
    }
    Ok(())
}

/// Make NVRTC usable: honour `COMMHAL_NVRTC_DIR`, then check that cudarc can open
/// libnvrtc by name. Result cached after the first success.
pub fn ensure_loaded() -> Result<()> {
    static OK: OnceLock<()> = OnceLock::new();
    if OK.get().is_some() {
        return Ok(());
    }
    if let Some(dir) = NVRTC_DIR.text() {
        preload_nvrtc_from(Path::new(&dir))?;
    }
    // SAFETY: only tries to dlopen the candidate names and drops the handles; calls
    // no NVRTC function.
    let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    if present {
        let _ = OK.set(());
        Ok(())
    } else {
        Err(CudaError::NvrtcMissing)
    }
}

/// For tests that compile device code: make NVRTC loadable from the repository's
/// `scripts/install-nvrtc.sh` directory (`<repo>/.cache/nvrtc/nvidia/cu13/lib`) when it
/// is not found otherwise, and say whether it is available. Without NVRTC it prints
/// `SKIPPED <test>: NVRTC not found` to the real stderr and returns false, or panics
/// when `COMMHAL_REQUIRE_NVRTC=1` (CI).
pub fn nvrtc_or_skip(test: &str) -> bool {
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/nvrtc/nvidia/cu13/lib");
    if !crate::nvrtc_available() && local.join("libnvrtc.so.13").exists() {
        preload_nvrtc_from(&local).expect("preload NVRTC from .cache/nvrtc");
    }
    if crate::nvrtc_available() {
        return true;
    }
    if REQUIRE_NVRTC
        .flag()
        .unwrap_or_else(|e| panic!("{test}: {e}"))
    {
        panic!(
            "{test}: COMMHAL_REQUIRE_NVRTC=1 but NVRTC was not found: run scripts/install-nvrtc.sh"
        );
    }
    // Written to the real stderr (not eprintln!, which the test harness captures) so
    // the skip is visible in every run's output.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED {test}: NVRTC not found (run scripts/install-nvrtc.sh)"
    );
    false
}
