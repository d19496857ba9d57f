//! # commhal-backend-cuda-dma — `PortMapped` over the CUDA copy engines
//!
//! Device code pushes triggers into the proxy FIFO; the host proxy turns each into
//! stream operations on a [`DmaPort`]:
//!
//! | trigger | stream operation (one stream per port, in call order) |
//! |---|---|
//! | put | `cuMemcpyDtoDAsync` local → the peer buffer mapped here (copy engine over NVLink/P2P) |
//! | signal | `cuStreamWriteValue64` of the semaphore's next value (a per-semaphore shadow counter: the proxy is the only writer of that remote counter) |
//! | flush | wait until the stream drained (polls `cuStreamQuery`, bounded → [`HalError::Timeout`](commhal_hal::HalError)) |
//!
//! | module | holds |
//! |---|---|
//! | [`transport`] | [`CudaDma`]: `Transport` (name, [`GUARANTEES`], reach) and `PortMapped` |
//! | [`region`] | [`DmaLocal`] (a registered buffer), [`DmaRemote`] (a peer buffer mapped here), [`CudaRtRegion`] (cuda-rt buffers as regions) |
//! | [`port`] | [`DmaPort`]: write / signal / flush |
//! | [`stream_port`] | [`StreamPort`]: put / signal on a caller's stream, the one copy-engine code path (the proxy's ports and the GPU communicator's copy-engine path queue through it) |
//! | `stream_ops` | the port's bounded wait for its stream to drain |
//! | `register` | the `inventory` registration (`cuda-dma`: port) and `probe` |
//!
//! Exports reuse cuda-nvlink's format and mapping (VMM fd, legacy IPC, same-process
//! pointer), under the backend name `cuda-dma`.
#![warn(missing_docs)]

pub mod port;
pub mod region;
mod register;
mod stream_ops;
pub mod stream_port;
pub mod transport;

pub use port::DmaPort;
pub use region::{CudaRtRegion, DmaLocal, DmaRemote};
pub use register::probe;
pub use stream_port::StreamPort;
pub use transport::{CudaDma, FIFO_DEPTH, GUARANTEES};

/// The backend's name, as in [`commhal_hal::Export::backend`] and the registry.
pub const BACKEND: &str = "cuda-dma";

/// Called by `commhal-backends` so the linker keeps this crate (and its registration).
pub fn link() {}
