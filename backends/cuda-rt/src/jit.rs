//! Compiling and loading the units of `commhal-device-src`.

use std::sync::Arc;

use commhal_device_src::{HEADERS, KernelUnit};

use crate::context::Context;
use crate::error::Result;
use crate::module::Module;
use crate::nvrtc::cache::{CacheOutcome, KernelCache, compile_cached};
use crate::nvrtc::{CompileRequest, CompiledImage};

/// Options every device-src unit is compiled with (besides the architecture).
pub fn default_options() -> Vec<String> {
    vec!["-std=c++17".to_string()]
}

/// Compile `unit` for `arch` (`sm_90`, `compute_90`, ...) with every device-src header.
pub fn compile_unit(
    unit: &KernelUnit,
    arch: &str,
    cache: Option<&KernelCache>,
) -> Result<(CompiledImage, CacheOutcome)> {
    let options = default_options();
    let req = CompileRequest {
        unit: unit.source.name,
        source: unit.source.contents,
        headers: HEADERS,
        arch,
        options: &options,
    };
    compile_cached(cache, &req)
}

/// [`compile_unit`] with extra options after the defaults (e.g. `-DCOLL_RED_OP=1`):
/// another module from the same source. The cache key covers every option, so each
/// set of defines is cached on its own.
pub fn compile_unit_with(
    unit: &KernelUnit,
    arch: &str,
    extra_options: &[String],
    cache: Option<&KernelCache>,
) -> Result<(CompiledImage, CacheOutcome)> {
    let mut options = default_options();
    options.extend(extra_options.iter().cloned());
    let req = CompileRequest {
        unit: unit.source.name,
        source: unit.source.contents,
        headers: HEADERS,
        arch,
        options: &options,
    };
    compile_cached(cache, &req)
}

/// Compile `unit` for `ctx`'s device (through the default cache, see
/// [`KernelCache::from_env`]) and load it.
pub fn load_unit(ctx: &Arc<Context>, unit: &KernelUnit) -> Result<Arc<Module>> {
    let arch = ctx.arch()?;
    let cache = KernelCache::from_env();
    let (image, outcome) = compile_unit(unit, &arch, cache.as_ref())?;
    tracing::debug!("{} for {arch}: {outcome:?}", unit.source.name);
    Module::load(ctx, &image)
}
