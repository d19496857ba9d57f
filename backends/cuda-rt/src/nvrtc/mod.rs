//! NVRTC: run-time compilation of CUDA C++ with in-memory headers, and an on-disk
//! cache of the results.
//!
//! NVRTC needs no GPU and no driver, so CI compiles every device source with it.

pub mod cache;
pub mod loader;
mod program;

use commhal_device_src::Source;

use crate::error::{CudaError, Result};

/// What a compilation produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// Machine code for one real architecture (`sm_XX`).
    Cubin,
    /// PTX text (virtual architecture `compute_XX`), JIT-compiled by the driver.
    Ptx,
}

impl ImageKind {
    /// Which kind an `--gpu-architecture` value yields.
    pub fn for_arch(arch: &str) -> ImageKind {
        if arch.starts_with("sm_") {
            ImageKind::Cubin
        } else {
            ImageKind::Ptx
        }
    }
    /// File extension in the cache.
    pub fn extension(self) -> &'static str {
        match self {
            ImageKind::Cubin => "cubin",
            ImageKind::Ptx => "ptx",
        }
    }
}

/// One compilation.
#[derive(Debug, Clone, Copy)]
pub struct CompileRequest<'a> {
    /// Unit name (shown in errors, e.g. `conformance.cu`).
    pub unit: &'a str,
    /// The unit's source text.
    pub source: &'a str,
    /// Headers it may include, by include name (NVRTC header arrays; no file system).
    pub headers: &'a [Source],
    /// `sm_90` (CUBIN) or `compute_90` (PTX).
    pub arch: &'a str,
    /// Options besides `--gpu-architecture` (e.g. `-std=c++17`).
    pub options: &'a [String],
}

impl CompileRequest<'_> {
    /// Every option passed to NVRTC, architecture first.
    pub fn all_options(&self) -> Vec<String> {
        let mut v = vec![format!("--gpu-architecture={}", self.arch)];
        v.extend(self.options.iter().cloned());
        v
    }
}

/// A compiled translation unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledImage {
    /// Unit name.
    pub unit: String,
    /// Architecture it was compiled for.
    pub arch: String,
    /// CUBIN or PTX.
    pub kind: ImageKind,
    /// The image (PTX is NUL-terminated).
    pub bytes: Vec<u8>,
    /// NVRTC's log (warnings); empty when served from the cache.
    pub log: String,
}

/// NVRTC's version `(major, minor)`; loads NVRTC if needed.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    loader::ensure_loaded()?;
    program::version()
}

/// Compile without the cache. A compile error returns [`CudaError::Compile`] with
/// NVRTC's complete log.
pub fn compile(req: &CompileRequest<'_>) -> Result<CompiledImage> {
    loader::ensure_loaded()?;
    if !(req.arch.starts_with("sm_") || req.arch.starts_with("compute_")) {
        return Err(CudaError::invalid(format!(
            "architecture `{}` must look like sm_90 (CUBIN) or compute_90 (PTX)",
            req.arch
        )));
    }
    let headers: Vec<(&str, &str)> = req.headers.iter().map(|h| (h.name, h.contents)).collect();
    let prog = program::Program::new(req.unit, req.source, &headers)?;
    let options = req.all_options();
    let out = prog.compile(&options)?;
    if !out.ok {
        return Err(CudaError::Compile {
            unit: req.unit.to_string(),
            arch: req.arch.to_string(),
            options,
            log: out.log,
        });
    }
    let kind = ImageKind::for_arch(req.arch);
    let bytes = match kind {
        ImageKind::Cubin => prog.cubin()?,
        ImageKind::Ptx => prog.ptx()?,
    };
    if bytes.is_empty() {
        return Err(CudaError::Nvrtc {
            call: "nvrtcGetCUBIN/nvrtcGetPTX",
            code: format!("empty image for `{}`", req.unit),
        });
    }
    Ok(CompiledImage {
        unit: req.unit.to_string(),
        arch: req.arch.to_string(),
        kind,
        bytes,
        log: out.log,
    })
}
