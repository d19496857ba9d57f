//! Registered memory and its exportable form.
//!
//! A backend owns the memory it registers. A local registered buffer is a [`Region`];
//! its shareable description is an [`Export`] (bytes plus, for same-host transports,
//! file descriptors that travel over a Unix socket); a peer's region made addressable
//! locally is again a [`Region`] (a *mapping*).

use std::any::Any;
use std::os::fd::OwnedFd;

use serde::{Deserialize, Serialize};

use crate::topology::Device;

/// Where the bytes of a region live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKind {
    /// Host memory shared between processes (memfd/shm); host-emu's "device memory".
    HostShared,
    /// Host memory pinned and mapped for a device (the proxy FIFO lives here).
    HostPinned,
    /// Device memory (cudaMalloc / cuMem / hipMalloc).
    Device,
}

/// A contiguous registered buffer, local or mapped from a peer.
///
/// Contract: `addr()..addr()+len()` stays valid and fixed for the region's lifetime;
/// on host-emu the address is a host pointer, on GPUs a device pointer usable by
/// kernels on `device()`.
pub trait Region: Send + Sync + std::fmt::Debug + 'static {
    /// Base address as seen by code on `device()`.
    fn addr(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> u64;
    /// True when `len() == 0`.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The device that can address it.
    fn device(&self) -> Device;
    /// Where its bytes live.
    fn kind(&self) -> MemoryKind;
    /// For downcasting in the object-safe mirrors.
    fn as_any(&self) -> &dyn Any;
}

/// The shareable description of a registered region: opaque bytes the owning backend
/// understands, plus file descriptors (cuMem POSIX handles, memfds) for peers on the
/// same host. Produced by `export`, consumed by `map`/`connect` on a peer.
///
/// Moving an `Export` between processes is the bootstrap's job
/// ([`crate::bootstrap::fdpass`] carries the descriptors); a backend never sends it
/// itself.
#[derive(Debug, Default)]
pub struct Export {
    /// Name of the backend that produced it; `map` rejects exports of other backends.
    pub backend: String,
    /// Region length in bytes.
    pub len: u64,
    /// Backend-defined description (IPC handle, rkey + address, shm name, ...).
    pub bytes: Vec<u8>,
    /// Descriptors to pass with `SCM_RIGHTS`; empty for cross-host transports.
    pub fds: Vec<OwnedFd>,
}

impl Export {
    /// Reject an export made by another backend.
    pub fn check_backend(&self, expected: &str) -> crate::Result<()> {
        if self.backend == expected {
            Ok(())
        } else {
            Err(crate::HalError::invalid(format!(
                "export was made by backend `{}` but handed to `{expected}`: map it with the backend that exported it",
                self.backend
            )))
        }
    }
}
