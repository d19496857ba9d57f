//! The crate's error: every variant says what went wrong and what to do.

use commhal_hal::HalError;

/// Result with [`CudaError`].
pub type Result<T, E = CudaError> = std::result::Result<T, E>;

/// Name under which errors are reported to the HAL.
pub const BACKEND: &str = "cuda";

/// Everything that can go wrong in the CUDA plumbing.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// libcuda.so could not be loaded.
    #[error(
        "no CUDA driver (libcuda.so not found): install the NVIDIA driver or run on a machine with one"
    )]
    NoDriver,
    /// The driver loaded but reports no usable device.
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// A driver call returned an error.
    #[error("{call} failed with {name} ({code}) while {what}")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// CUresult value.
        code: u32,
        /// CUresult name (`CUDA_ERROR_OUT_OF_MEMORY`, ...).
        name: String,
        /// What we were doing.
        what: String,
    },
    /// libnvrtc.so.13 could not be loaded.
    #[error(
        "NVRTC not found (libnvrtc.so.13): run scripts/install-nvrtc.sh and export the directory it prints in LD_LIBRARY_PATH, or set COMMHAL_NVRTC_DIR to it"
    )]
    NvrtcMissing,
    /// An NVRTC call other than compilation failed.
    #[error("NVRTC {call} failed: {code}")]
    Nvrtc {
        /// The NVRTC function.
        call: &'static str,
        /// nvrtcResult as text.
        code: String,
    },
    /// NVRTC rejected the source; `log` is the full compiler log.
    #[error("NVRTC failed to compile `{unit}` for {arch} with options {options:?}:\n{log}")]
    Compile {
        /// Translation unit name.
        unit: String,
        /// Target architecture (`sm_90`, `compute_90`).
        arch: String,
        /// Every option passed.
        options: Vec<String>,
        /// The complete NVRTC program log.
        log: String,
    },
    /// Bad input from the caller.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A file-system error (kernel cache).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl CudaError {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        CudaError::Invalid(msg.into())
    }
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        CudaError::Io {
            context: context.into(),
            source,
        }
    }
}

impl CudaError {
    /// This error as a [`HalError`] reported under `backend`: a missing driver, device
    /// or NVRTC is [`HalError::Unavailable`], bad input [`HalError::InvalidArgument`],
    /// file-system errors [`HalError::Io`], everything else [`HalError::Backend`].
    pub fn into_hal(self, backend: &str) -> HalError {
        match self {
            CudaError::NoDriver | CudaError::NoDevice(_) | CudaError::NvrtcMissing => {
                HalError::Unavailable {
                    backend: backend.to_string(),
                    reason: self.to_string(),
                }
            }
            CudaError::Invalid(msg) => HalError::InvalidArgument(msg),
            CudaError::Io { context, source } => HalError::Io { context, source },
            other => HalError::backend(backend, other.to_string()),
        }
    }
}

impl From<CudaError> for HalError {
    fn from(e: CudaError) -> Self {
        e.into_hal(BACKEND)
    }
}
