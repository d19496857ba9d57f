//! The crate's error: what went wrong and what to do.

use commhal_cuda_rt::CudaError;
use commhal_hal::HalError;

/// Result with [`CollError`].
pub type Result<T, E = CollError> = std::result::Result<T, E>;

/// Everything the collectives and the benchmark can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CollError {
    /// CUDA plumbing (driver missing, allocation, NVRTC, ...).
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// Bootstrap / HAL.
    #[error(transparent)]
    Hal(#[from] HalError),
    /// A kernel stored an error code (a peer never arrived).
    #[error(
        "device error {code} on rank {rank} after {what}: {desc}; check that every rank runs the same collectives in the same order and that no rank died"
    )]
    Device {
        /// Rank that saw it.
        rank: u32,
        /// Device error code.
        code: u32,
        /// Its meaning.
        desc: &'static str,
        /// The operation.
        what: String,
    },
    /// The host gave up waiting for the GPU.
    #[error(
        "timed out after {millis} ms waiting for {what} (a peer may have died or never launched the collective)"
    )]
    Timeout {
        /// What.
        what: String,
        /// Bound.
        millis: u64,
    },
    /// Bad input.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The caller's buffer cannot be mapped by the peers and is larger than the
    /// registered regions it would be staged through (a caller with another library at
    /// hand, such as the NCCL drop-in's fallback, can run the call there).
    #[error("invalid argument: {0}")]
    CannotStage(String),
    /// NCCL could not be loaded or a call failed.
    #[error("NCCL: {0}")]
    Nccl(String),
    /// A host-side wait for the peers ended without them: a peer died or left, hangs
    /// past the wait bound, or this communicator was aborted. The message names which.
    #[error("{0}")]
    Peers(String),
}

impl CollError {
    /// An [`CollError::Invalid`] with `msg`.
    pub fn invalid(msg: impl Into<String>) -> Self {
        CollError::Invalid(msg.into())
    }
}
