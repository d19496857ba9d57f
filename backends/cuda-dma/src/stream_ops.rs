//! cuda-dma's stream work, over `commhal-cuda-rt` (which makes every driver call):
//! async copy, stream write-value, waiting for a stream to drain, with errors as
//! [`HalError`]s under this backend's name.

use std::time::{Duration, Instant};

use commhal_backend_cuda_nvlink::driver::to_hal;
use commhal_cuda_rt::{Stream, copy, memop};
use commhal_hal::{HalError, Result};

use crate::BACKEND;

/// The driver entry point used for signals (checked before first use: cudarc panics
/// on a missing symbol).
pub(crate) const WRITE_VALUE_SYMBOL: &str = memop::WRITE_VALUE64;

/// Queue a copy of `len` bytes from `src` to `dst` on `stream`.
///
/// Contract: both ranges are device memory addressable by the stream's device and stay
/// alive until the stream has executed the copy (the port's flush).
pub(crate) fn memcpy_async(stream: &Stream, dst: u64, src: u64, len: u64) -> Result<()> {
    // SAFETY: address validity and lifetime are the caller's contract (bounds were
    // checked against registered regions, which the port keeps alive until a flush).
    unsafe { copy::copy_async_uva(stream, dst, src, len) }.map_err(|e| to_hal(BACKEND, e))
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
    // SAFETY: the symbol exists (checked above); the address contract is the caller's.
    unsafe { memop::write_value64(stream, addr, value) }.map_err(|e| to_hal(BACKEND, e))
}

/// Wait until `stream` drained, polling with back-off; [`HalError::Timeout`] after
/// `timeout`.
pub(crate) fn wait_drained(stream: &Stream, timeout: Duration, what: &str) -> Result<()> {
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        if stream.query().map_err(|e| to_hal(BACKEND, e))? {
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
