//! Registered memory and its exportable form.
//!
//! A backend owns the memory it registers. A local registered buffer is a [`Region`];
//! its shareable description is an [`Export`] (bytes plus, for same-host transports,
//! file descriptors that travel over a Unix socket); a peer's region made addressable
//! locally is again a [`Region`] (a *mapping*).

use std::any::Any;
use std::fmt;
use std::os::fd::OwnedFd;
use std::sync::Arc;

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
    /// How a third party — an RDMA NIC backend, say — can register this region's
    /// memory without knowing its concrete type; `None` (the default) when it cannot
    /// (such a region is refused with [`crate::HalError::Unregistered`]).
    ///
    /// Contract:
    /// * the `owner` of either variant keeps the bytes `addr()..addr()+len()` mapped
    ///   and at the same address for as long as any clone of it lives, even after the
    ///   region itself is dropped; a registration holds it for its whole life;
    /// * [`Registrable::Host`]: `addr()..addr()+len()` are host virtual addresses of
    ///   this process;
    /// * [`Registrable::DeviceDmaBuf`]: `export(addr, len)` exports the page-aligned
    ///   range enclosing `addr..addr+len` (a range inside this region) as a dma-buf,
    ///   or fails with an error that says why (driver too old, device or kernel
    ///   without dma-buf support, memory the driver will not export) and what to do
    ///   instead. The returned [`DmaBufRange::fd`] belongs to the caller, who may close
    ///   it as soon as the registration that used it returned (an importer such as
    ///   `ibv_reg_dmabuf_mr` takes its own reference to the dma-buf).
    fn registrable(&self) -> Option<Registrable> {
        None
    }
    /// How a host-side transport (host-tcp) moves this region's bytes when it cannot
    /// address them: through the driver's copies, staged in pinned host memory. `None`
    /// (the default) for memory the host addresses directly or cannot reach. The
    /// accessor keeps the memory alive for as long as it lives.
    fn staged(&self) -> Option<Arc<dyn StagedAccess>> {
        None
    }
}

/// Copies in and out of device memory for a host-side transport, from
/// [`Region::staged`]. Offsets are bytes from the region's start; every method checks
/// `off + len <= len()` and fails with an error naming the range otherwise.
///
/// Contract:
/// * `read` returns the bytes as they are when it runs: the caller makes sure device
///   code finished writing them (a trigger or flag that follows the writes), and calls
///   `settle` first where it must see its own earlier writes;
/// * `write` and `store_u64` may return before their bytes land: they land in call
///   order, and all have landed when `settle` returns. `data` may change as soon as
///   `write` returned;
/// * `store_u64` makes the 8-byte word at `off` (8-byte aligned) equal to `value` in one
///   8-byte store, after every earlier `write` of this accessor (and of the accessors
///   sharing its [`StagedAccess::queue`]) landed, so a kernel that sees the value with
///   an acquire load also sees those bytes;
/// * the methods never wait for work the device queued elsewhere (kernels on the
///   caller's streams): a kernel may be spinning on the flag this accessor stores.
pub trait StagedAccess: Send + Sync + fmt::Debug {
    /// Length in bytes.
    fn len(&self) -> u64;
    /// True when `len() == 0`.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The device and kind of the memory (what [`Region::device`] / `kind` say).
    fn device(&self) -> (Device, MemoryKind);
    /// Copy `out.len()` bytes at `off` out of the memory.
    fn read(&self, off: u64, out: &mut [u8]) -> crate::Result<()>;
    /// Copy `data` into the memory at `off`.
    fn write(&self, off: u64, data: &[u8]) -> crate::Result<()>;
    /// Copy `len` bytes into the memory at `off` that `fill` produces, as `write` would:
    /// `fill` is called with consecutive pieces of a buffer the copy reads from (pinned
    /// host memory where the accessor has it, so a receiver reads a socket straight into
    /// it and skips a copy) and fills each whole. An error from `fill` is returned as is
    /// and what it filled so far may or may not land. `buf` is a heap buffer the caller
    /// keeps from call to call; the default fills it and calls `write`
    /// ([`write_filled`]).
    fn write_with(
        &self,
        off: u64,
        len: u64,
        buf: &mut Vec<u8>,
        fill: &mut dyn FnMut(&mut [u8]) -> crate::Result<()>,
    ) -> crate::Result<()> {
        write_filled(buf, len, fill, |data| self.write(off, data))
    }
    /// Store the word at `off` (see the contract above).
    fn store_u64(&self, off: u64, value: u64) -> crate::Result<()>;
    /// Wait until every earlier `write` and `store_u64` landed.
    fn settle(&self) -> crate::Result<()>;
    /// Accessors that return the same nonzero value land their writes and stores in
    /// one call order across all of them (one queue on the device), so a store through
    /// one publishes the writes through the others. 0 (the default): only this
    /// accessor's own calls are ordered; a caller settles it before a store elsewhere.
    fn queue(&self) -> u64 {
        0
    }
}

/// [`StagedAccess::write_with`] through the caller's heap buffer: `fill` fills `len`
/// bytes of `buf` whole, then `write` copies them in.
pub fn write_filled(
    buf: &mut Vec<u8>,
    len: u64,
    fill: &mut dyn FnMut(&mut [u8]) -> crate::Result<()>,
    write: impl FnOnce(&[u8]) -> crate::Result<()>,
) -> crate::Result<()> {
    buf.resize(len as usize, 0);
    fill(buf)?;
    write(buf)
}

/// What keeps registered memory alive: any shared handle of the memory's owner.
pub type MemoryOwner = Arc<dyn Any + Send + Sync>;

/// Exports `addr..addr+len` (inside the region) as a dma-buf; see
/// [`Region::registrable`].
pub type DmaBufExport = Arc<dyn Fn(u64, u64) -> crate::Result<DmaBufRange> + Send + Sync>;

/// How a region's memory can be registered by a third party, from
/// [`Region::registrable`].
#[derive(Clone)]
pub enum Registrable {
    /// Host memory of this process at `addr()..addr()+len()`, kept alive by `owner`:
    /// register it by address (`ibv_reg_mr`).
    Host {
        /// Keeps the bytes mapped while a registration holds it.
        owner: MemoryOwner,
    },
    /// Device memory that its driver exports as a dma-buf (`ibv_reg_dmabuf_mr`).
    DeviceDmaBuf {
        /// Keeps the memory allocated while a registration holds it.
        owner: MemoryOwner,
        /// Exports the page-aligned range enclosing `addr..addr+len`.
        export: DmaBufExport,
    },
}

impl fmt::Debug for Registrable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Registrable::Host { .. } => f.write_str("Registrable::Host"),
            Registrable::DeviceDmaBuf { .. } => f.write_str("Registrable::DeviceDmaBuf"),
        }
    }
}

/// A dma-buf covering (at least) the range it was exported for: `len` bytes starting
/// at byte `offset` of the dma-buf `fd`, addressed by the memory's device (and by work
/// requests of a NIC that registers it) as `iova..iova+len`.
#[derive(Debug)]
pub struct DmaBufRange {
    /// The dma-buf; owned by the caller, who may close it once it is registered.
    pub fd: OwnedFd,
    /// Byte offset of the range inside the dma-buf.
    pub offset: u64,
    /// Bytes in the range (a multiple of the page size for driver exports).
    pub len: u64,
    /// Device address of the range's first byte.
    pub iova: u64,
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
