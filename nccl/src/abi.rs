//! NCCL 2.28's C types and constants (`include/commhal_nccl.h` declares the same), and
//! the error every internal function returns ([`NcclError`]: a result code and the
//! message `ncclGetLastError` shows).

use std::ffi::{c_int, c_uint, c_void};

use commhal_cuda_coll::CollError;
use commhal_cuda_coll::types::Dtype;

/// `ncclResult_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NcclResult {
    /// `ncclSuccess`.
    Success = 0,
    /// `ncclUnhandledCudaError`: a CUDA call failed.
    UnhandledCudaError = 1,
    /// `ncclSystemError`: a system call (socket, memory) failed.
    SystemError = 2,
    /// `ncclInternalError`: a bug in this library.
    InternalError = 3,
    /// `ncclInvalidArgument`.
    InvalidArgument = 4,
    /// `ncclInvalidUsage`: a call this library does not do (see `ncclGetLastError`).
    InvalidUsage = 5,
    /// `ncclRemoteError`: a peer died or aborted.
    RemoteError = 6,
    /// `ncclInProgress`: a non-blocking communicator is still initialising.
    InProgress = 7,
}

impl NcclResult {
    /// The value NCCL's result code `r` stands for (from the fallback library).
    pub fn from_raw(r: c_int) -> NcclResult {
        match r {
            0 => NcclResult::Success,
            1 => NcclResult::UnhandledCudaError,
            2 => NcclResult::SystemError,
            4 => NcclResult::InvalidArgument,
            5 => NcclResult::InvalidUsage,
            6 => NcclResult::RemoteError,
            7 => NcclResult::InProgress,
            _ => NcclResult::InternalError,
        }
    }

    /// `ncclGetErrorString`'s text.
    pub fn describe(self) -> &'static std::ffi::CStr {
        match self {
            NcclResult::Success => c"no error",
            NcclResult::UnhandledCudaError => {
                c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
            }
            NcclResult::SystemError => {
                c"unhandled system error (run with NCCL_DEBUG=INFO for details)"
            }
            NcclResult::InternalError => {
                c"internal error - please report this issue to the commhal developers"
            }
            NcclResult::InvalidArgument => {
                c"invalid argument (run with NCCL_DEBUG=WARN for details)"
            }
            NcclResult::InvalidUsage => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
            NcclResult::RemoteError => c"remote process exited or there was a network error",
            NcclResult::InProgress => c"NCCL operation in progress",
        }
    }
}

/// `ncclComm_t` points at one of these (see [`crate::comm::NcclComm`]).
pub type CommHandle = *mut c_void;

/// `ncclUniqueId`: 128 opaque bytes, passed by value (the type the fallback's table
/// passes too).
pub use commhal_cuda_coll::nccl_lib::UniqueId as UniqueIdBytes;

/// `NCCL_API_MAGIC`, the first check on a config struct.
pub const API_MAGIC: c_uint = 0xcafe_beef;
/// `NCCL_CONFIG_UNDEF_INT`.
pub const CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// `NCCL_SPLIT_NOCOLOR`.
pub const SPLIT_NOCOLOR: c_int = -1;
/// The version this library reports (2.28.9, what PyTorch 2.11's wheels ship).
pub const VERSION_CODE: c_int = 22809;

/// The leading fields of `ncclConfig_t`, the same in every NCCL version since 2.14 (the
/// struct only grows at its end); nothing past `blocking` is read.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ConfigHead {
    /// `sizeof(ncclConfig_t)` in the caller's header.
    pub size: usize,
    /// [`API_MAGIC`].
    pub magic: c_uint,
    /// The caller's `NCCL_VERSION_CODE`.
    pub version: c_uint,
    /// 0: non-blocking; 1 or [`CONFIG_UNDEF_INT`]: blocking.
    pub blocking: c_int,
}

/// `ncclSimInfo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SimInfo {
    /// `sizeof(ncclSimInfo_t)`.
    pub size: usize,
    /// `0x74685283`.
    pub magic: c_uint,
    /// The caller's version.
    pub version: c_uint,
    /// Out: the group's estimated time in microseconds.
    pub estimated_time: f32,
}

/// `ncclSimInfo_t`'s magic.
pub const SIM_INFO_MAGIC: c_uint = 0x7468_5283;

/// `ncclScalarDevice`: the scalar is read by the kernels.
pub const SCALAR_DEVICE: c_int = 0;
/// `ncclScalarHostImmediate`: the scalar is read when the op is created.
pub const SCALAR_HOST_IMMEDIATE: c_int = 1;

/// `ncclNumOps`: the first value of an op made by `ncclRedOpCreatePreMulSum`.
pub const NUM_BUILTIN_OPS: c_int = 5;

/// `ncclDataType_t` → commhal's datatype.
pub fn dtype(t: c_int) -> Result<Dtype, NcclError> {
    Ok(match t {
        0 => Dtype::Int8,
        1 => Dtype::Uint8,
        2 => Dtype::Int32,
        3 => Dtype::Uint32,
        4 => Dtype::Int64,
        5 => Dtype::Uint64,
        6 => Dtype::Half,
        7 => Dtype::Float,
        8 => Dtype::Double,
        9 => Dtype::Bfloat16,
        10 => Dtype::Fp8E4m3,
        11 => Dtype::Fp8E5m2,
        _ => {
            return Err(NcclError::invalid(format!(
                "datatype {t} is not an ncclDataType_t (0..=11: int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16, float8e4m3, float8e5m2)"
            )));
        }
    })
}

/// A failed call: the code returned to the caller and the message kept for
/// `ncclGetLastError`.
#[derive(Debug, Clone)]
pub struct NcclError {
    /// What the C function returns.
    pub code: NcclResult,
    /// What went wrong and what to do.
    pub msg: String,
}

impl NcclError {
    /// `ncclInvalidArgument` with `msg`.
    pub fn invalid(msg: impl Into<String>) -> NcclError {
        NcclError {
            code: NcclResult::InvalidArgument,
            msg: msg.into(),
        }
    }

    /// `ncclInvalidUsage` with `msg`.
    pub fn usage(msg: impl Into<String>) -> NcclError {
        NcclError {
            code: NcclResult::InvalidUsage,
            msg: msg.into(),
        }
    }

    /// `code` with `msg`.
    pub fn new(code: NcclResult, msg: impl Into<String>) -> NcclError {
        NcclError {
            code,
            msg: msg.into(),
        }
    }
}

impl std::fmt::Display for NcclError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl From<CollError> for NcclError {
    fn from(e: CollError) -> NcclError {
        let code = match &e {
            CollError::Invalid(_) | CollError::CannotStage(_) => NcclResult::InvalidArgument,
            CollError::Cuda(_) => NcclResult::UnhandledCudaError,
            CollError::Device { code, .. } if *code == commhal_cuda_coll::layout::ERR_PEER_GONE => {
                NcclResult::RemoteError
            }
            CollError::Device { .. } | CollError::Timeout { .. } | CollError::Peers(_) => {
                NcclResult::RemoteError
            }
            CollError::Hal(_) => NcclResult::SystemError,
            CollError::Nccl(_) => NcclResult::InternalError,
        };
        NcclError {
            code,
            msg: e.to_string(),
        }
    }
}

impl From<commhal_hal::HalError> for NcclError {
    fn from(e: commhal_hal::HalError) -> NcclError {
        NcclError::new(NcclResult::SystemError, e.to_string())
    }
}

impl From<commhal_cuda_rt::CudaError> for NcclError {
    fn from(e: commhal_cuda_rt::CudaError) -> NcclError {
        NcclError::new(NcclResult::UnhandledCudaError, e.to_string())
    }
}

/// The value of one host element of `dt` (little-endian `bytes`, `dt.size()` long): an
/// `ncclScalarHostImmediate` pre-multiply scalar.
pub fn scalar_value(dt: Dtype, b: &[u8]) -> f64 {
    use commhal_algorithms::fp8::{Fp8Format, fp8_to_f32};
    let le = |n: usize| {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&b[..n]);
        u64::from_le_bytes(a)
    };
    match dt {
        Dtype::Int8 => f64::from(b[0] as i8),
        Dtype::Uint8 => f64::from(b[0]),
        Dtype::Int32 => f64::from(le(4) as u32 as i32),
        Dtype::Uint32 => f64::from(le(4) as u32),
        Dtype::Int64 => le(8) as i64 as f64,
        Dtype::Uint64 => le(8) as f64,
        Dtype::Half => f16_to_f64(le(2) as u16),
        Dtype::Bfloat16 => f64::from(f32::from_bits((le(2) as u32) << 16)),
        Dtype::Float => f64::from(f32::from_bits(le(4) as u32)),
        Dtype::Double => f64::from_bits(le(8)),
        Dtype::Fp8E4m3 => f64::from(fp8_to_f32(b[0], Fp8Format::E4M3)),
        Dtype::Fp8E5m2 => f64::from(fp8_to_f32(b[0], Fp8Format::E5M2)),
    }
}

/// IEEE half → f64 (exact).
fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let man = f64::from(h & 0x3ff);
    sign * match exp {
        0 => man * 2f64.powi(-24),
        31 if man == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + man / 1024.0) * 2f64.powi(e - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_scalars_decode_every_datatype() {
        assert_eq!(scalar_value(Dtype::Half, &0x3c00u16.to_le_bytes()), 1.0);
        assert_eq!(scalar_value(Dtype::Half, &0xb800u16.to_le_bytes()), -0.5);
        assert_eq!(
            scalar_value(Dtype::Half, &0x0001u16.to_le_bytes()),
            2f64.powi(-24)
        );
        assert_eq!(
            scalar_value(Dtype::Bfloat16, &0x3f40u16.to_le_bytes()),
            0.75
        );
        assert_eq!(scalar_value(Dtype::Float, &0.25f32.to_le_bytes()), 0.25);
        assert_eq!(scalar_value(Dtype::Double, &(-3.5f64).to_le_bytes()), -3.5);
        assert_eq!(scalar_value(Dtype::Int32, &(-7i32).to_le_bytes()), -7.0);
        assert_eq!(scalar_value(Dtype::Uint8, &[200]), 200.0);
        assert_eq!(scalar_value(Dtype::Int8, &[0xff]), -1.0);
        assert_eq!(scalar_value(Dtype::Fp8E4m3, &[0x38]), 1.0);
    }

    #[test]
    fn every_nccl_datatype_maps_and_others_are_refused() {
        for t in 0..12 {
            assert!(dtype(t).is_ok(), "{t}");
        }
        assert!(dtype(12).is_err());
        assert!(dtype(-1).is_err());
    }
}
