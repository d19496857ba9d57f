//! On-disk cache of compiled images.
//!
//! Directory: `$COMMHAL_CACHE_DIR`, else `$XDG_CACHE_HOME/commhal`, else
//! `~/.cache/commhal`. Key: SHA-256 over the unit name and source, every header's
//! name and text, the architecture, every option and the NVRTC version, so any change
//! recompiles. Files are written to a temporary name and renamed, so concurrent
//! processes never see a partial image. A file that fails a sanity check (empty, or a
//! CUBIN without the ELF magic) counts as a miss and is overwritten.

use std::path::{Path, PathBuf};

use commhal_hal::settings::gpu::CACHE_DIR;
use sha2::{Digest, Sha256};

use super::{CompileRequest, CompiledImage, ImageKind};
use crate::error::{CudaError, Result};

/// Whether [`compile_cached`] compiled or reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Served from the cache.
    Hit,
    /// Compiled and stored.
    Miss,
    /// Compiled; no cache in use.
    Disabled,
}

/// A cache directory.
#[derive(Debug, Clone)]
pub struct KernelCache {
    dir: PathBuf,
}

impl KernelCache {
    /// Use `dir` (created on first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        KernelCache { dir: dir.into() }
    }

    /// The default directory from the environment; `None` when no variable gives one.
    pub fn from_env() -> Option<Self> {
        if let Some(d) = CACHE_DIR.text() {
            return Some(Self::new(d));
        }
        let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        if let Some(d) = nonempty("XDG_CACHE_HOME") {
            return Some(Self::new(PathBuf::from(d).join("commhal")));
        }
        nonempty("HOME").map(|h| Self::new(PathBuf::from(h).join(".cache").join("commhal")))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Hex SHA-256 key of a request under NVRTC `version`.
    pub fn key(req: &CompileRequest<'_>, version: (i32, i32)) -> String {
        let mut h = Sha256::new();
        let mut field = |b: &[u8]| {
            h.update((b.len() as u64).to_le_bytes());
            h.update(b);
        };
        field(b"commhal-kernel-cache-v1");
        field(req.unit.as_bytes());
        field(req.source.as_bytes());
        for hd in req.headers {
            field(hd.name.as_bytes());
            field(hd.contents.as_bytes());
        }
        field(req.arch.as_bytes());
        for o in req.all_options() {
            field(o.as_bytes());
        }
        field(format!("nvrtc {}.{}", version.0, version.1).as_bytes());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn path(&self, req: &CompileRequest<'_>, key: &str) -> PathBuf {
        let stem: String = req
            .unit
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let kind = ImageKind::for_arch(req.arch);
        self.dir
            .join(format!("{stem}-{}-{key}.{}", req.arch, kind.extension()))
    }

    /// The cached image for `req`, if a sane one exists.
    pub fn lookup(&self, req: &CompileRequest<'_>, key: &str) -> Option<CompiledImage> {
        let bytes = std::fs::read(self.path(req, key)).ok()?;
        let kind = ImageKind::for_arch(req.arch);
        let sane = match kind {
            ImageKind::Cubin => bytes.starts_with(b"\x7fELF"),
            ImageKind::Ptx => !bytes.is_empty() && bytes.last() == Some(&0),
        };
        sane.then(|| CompiledImage {
            unit: req.unit.to_string(),
            arch: req.arch.to_string(),
            kind,
            bytes,
            log: String::new(),
        })
    }

    /// Store an image (atomic rename).
    pub fn store(&self, req: &CompileRequest<'_>, key: &str, image: &CompiledImage) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            CudaError::io(
                format!(
                    "creating kernel cache dir {} (set COMMHAL_CACHE_DIR to a writable dir)",
                    self.dir.display()
                ),
                e,
            )
        })?;
        let dst = self.path(req, key);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let tmp = dst.with_extension(format!("tmp{}.{nanos}", std::process::id()));
        std::fs::write(&tmp, &image.bytes)
            .map_err(|e| CudaError::io(format!("writing {}", tmp.display()), e))?;
        std::fs::rename(&tmp, &dst).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            CudaError::io(format!("renaming into {}", dst.display()), e)
        })
    }
}

/// Compile through `cache` (or directly when `None`). Cache I/O failures are logged
/// and fall back to compiling; they never fail the call.
pub fn compile_cached(
    cache: Option<&KernelCache>,
    req: &CompileRequest<'_>,
) -> Result<(CompiledImage, CacheOutcome)> {
    let Some(cache) = cache else {
        return Ok((super::compile(req)?, CacheOutcome::Disabled));
    };
    let key = KernelCache::key(req, super::nvrtc_version()?);
    if let Some(img) = cache.lookup(req, &key) {
        return Ok((img, CacheOutcome::Hit));
    }
    let img = super::compile(req)?;
    if let Err(e) = cache.store(req, &key, &img) {
        tracing::warn!("kernel cache: {e}");
    }
    Ok((img, CacheOutcome::Miss))
}
