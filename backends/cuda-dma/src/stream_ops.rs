//! The proxy port's host-side stream work: waiting for a stream to drain (bounded), with
//! errors as [`HalError`]s under this backend's name. The stream operations themselves
//! (copies, signals) are [`crate::StreamPort`]'s.

use std::time::{Duration, Instant};

use commhal_backend_cuda_nvlink::driver::to_hal;
use commhal_cuda_rt::{Stream, memop};
use commhal_hal::{HalError, Result};

use crate::BACKEND;

/// The driver entry point used for signals (checked before first use: cudarc panics
/// on a missing symbol).
pub(crate) const WRITE_VALUE_SYMBOL: &str = memop::WRITE_VALUE64;

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
