//! # commhal-backend-cuda-nvlink — `MemoryMapped` over CUDA peer memory
//!
//! Device threads of one GPU load/store straight into a peer GPU's memory (NVLink or
//! PCIe P2P). This crate makes that memory shareable:
//!
//! | module | holds |
//! |---|---|
//! | [`transport`] | [`CudaNvlink`]: `Transport` (name, [`GUARANTEES`], reach) and `MemoryMapped` |
//! | [`memory`] | [`NvlinkMemory`] (a local allocation), [`NvlinkMapping`] (a peer's, mapped here), [`ExportSource`] |
//! | [`header`] | [`ExportHeader`]: the bytes of an [`Export`](commhal_hal::Export) (pure parse/encode) |
//! | [`reach`] | [`cuda_reach`]: same host, CUDA devices, `cuDeviceCanAccessPeer` (shared with cuda-dma) |
//! | [`driver`] | cuda-rt's device count, contexts, peer access and symbol checks, with errors as [`HalError`](commhal_hal::HalError)s (shared with cuda-dma) |
//! | `register` | the `inventory` registration (`cuda-nvlink`: memory) and `probe` |
//!
//! **How memory is shared.**
//! * `alloc` uses cuMem VMM (`cuMemCreate` with a POSIX-fd handle type, rounded up to
//!   the allocation granularity; the region's length is the rounded size). `export`
//!   puts the fd in [`Export::fds`](commhal_hal::Export) and a 40-byte
//!   [`ExportHeader`] in `bytes`; `map` imports the fd, reserves address space, maps it
//!   and grants the local device read/write access.
//! * **Fallback**: on a device without VMM fd handles (or with the `legacy_ipc`
//!   option), `alloc` uses `cuMemAlloc` and `export` appends the 64-byte
//!   `cuIpcGetMemHandle` handle to the header; `map` is `cuIpcOpenMemHandle`.
//! * **Same process**: `map` of an export made in this process reuses the pointer:
//!   it grants (VMM) or enables (`cuCtxEnablePeerAccess`, legacy) access for the local
//!   device and keeps the allocation alive while mapped.
//!
//! **What is promised** ([`GUARANTEES`]): strong signals (device-side system-scope
//! release add / acquire wait), gets, LL8 and LL16 packets, graph capture;
//! *not* put→put ordering (many threads' weak stores are unordered without a fence)
//! and *not* "flush ⇒ remote visible" (the device `flush()` of a memory channel is a
//! no-op without a system fence; visibility comes from signal/wait).
#![warn(missing_docs)]

pub mod driver;
#[doc(hidden)]
pub mod fuzzing;
pub mod header;
pub mod memory;
pub mod reach;
mod register;
/// The probe pieces cuda-dma reuses.
pub mod register_probe {
    pub use crate::register::peer_probe;
}
pub mod transport;

pub use header::ExportHeader;
pub use memory::{ExportSource, NvlinkMapping, NvlinkMemory};
pub use reach::cuda_reach;
pub use register::probe;
pub use transport::{CudaNvlink, GUARANTEES};

/// The backend's name, as in [`commhal_hal::Export::backend`] and the registry.
pub const BACKEND: &str = "cuda-nvlink";

/// Called by `commhal-backends` so the linker keeps this crate (and its registration).
pub fn link() {}
