//! Every driver call of cuda-dma: async copy, stream write-value, stream query.
//! Each `CUresult` is checked and named in the error.

use std::time::{Duration, Instant};

use commhal_backend_cuda_nvlink::driver::{check, to_hal};
use commhal_cuda_rt::Stream;
use commhal_hal::{HalError, Result};
use cudarc::driver::sys;

use crate::BACKEND;

/// The driver entry point used for signals (checked before first use: cudarc panics
/// on a missing symbol).
pub(crate) const WRITE_VALUE_SYMBOL: &str = "cuStreamWriteValue64_v2";

/// Queue a copy of `len` bytes from `src` to `dst` on `stream`.
///
/// Contract: both ranges are device memory addressable by the stream's device and stay
/// alive until the stream has executed the copy (the port's flush).
pub(crate) fn memcpy_async(stream: &Stream, dst: u64, src: u64, len: u64) -> Result<()> {
    stream.context().bind().map_err(|e| to_hal(BACKEND, e))?;
    // SAFETY: the context of the stream is bound; address validity and lifetime are the
    // caller's contract (bounds were checked against registered regions).
    let r = unsafe { sys::cuMemcpyAsync(dst, src, len as usize, stream.raw()) };
    check(BACKEND, r, "cuMemcpyAsync", || {
        format!("queueing a {len}-byte copy {src:#x} -> {dst:#x}")
    })
}

/// Queue a stream-ordered 64-bit write of `value` to `addr` (with the default memory
/// barrier: earlier stream work is visible before the value).
///
/// Contract: `addr` is 8-byte aligned device memory addressable by the stream's device,
/// alive until the stream executed the write.
pub(crate) fn write_value64(stream: &Stream, addr: u64, value: u64) -> Result<()> {
    if !commhal_backend_cuda_nvlink::driver::symbol_present(WRITE_VALUE_SYMBOL) {
        return Err(HalError::unsupported(
            BACKEND,
            format!(
                "signals: the driver lacks {WRITE_VALUE_SYMBOL} (stream memory operations); update the NVIDIA driver"
            ),
        ));
    }
    stream.context().bind().map_err(|e| to_hal(BACKEND, e))?;
    // SAFETY: the symbol exists (checked above); the stream's context is bound; the
    // address contract is the caller's.
    let r = unsafe {
        sys::cuStreamWriteValue64_v2(
            stream.raw(),
            addr,
            value,
            sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
        )
    };
    check(BACKEND, r, "cuStreamWriteValue64", || {
        format!(
            "queueing the semaphore write {value} -> {addr:#x} (are stream memory operations enabled?)"
        )
    })
}

/// Has every operation queued on `stream` completed?
pub(crate) fn query(stream: &Stream) -> Result<bool> {
    stream.context().bind().map_err(|e| to_hal(BACKEND, e))?;
    // SAFETY: the stream is alive and its context bound.
    let r = unsafe { sys::cuStreamQuery(stream.raw()) };
    if r == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check(BACKEND, r, "cuStreamQuery", || {
        "waiting for the port's copies (a fault here means a copy touched bad memory)".into()
    })?;
    Ok(true)
}

/// Wait until `stream` drained, polling with back-off; [`HalError::Timeout`] after
/// `timeout`.
pub(crate) fn wait_drained(stream: &Stream, timeout: Duration, what: &str) -> Result<()> {
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        if query(stream)? {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            return Err(HalError::Timeout {
                what: what.to_string(),
                millis: timeout.as_millis() as u64,
            });
        }
        polls = polls.saturating_add(1);
        if polls < 1000 {
            std::hint::spin_loop();
        } else if polls < 2000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}
