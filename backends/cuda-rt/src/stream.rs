//! Streams and events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::check;
use crate::error::Result;

/// A non-blocking stream (does not synchronise with the legacy default stream).
#[derive(Debug)]
pub struct Stream {
    ctx: Arc<Context>,
    raw: sys::CUstream,
    /// Created here (destroyed on drop) or the caller's ([`Stream::borrowed`]).
    owned: bool,
}

// SAFETY: CUstream handles may be used from any thread (driver API is thread-safe).
unsafe impl Send for Stream {}
// SAFETY: as above; no interior mutability here.
unsafe impl Sync for Stream {}

impl Stream {
    /// Create a stream on `ctx`.
    pub fn new(ctx: &Arc<Context>) -> Result<Stream> {
        ctx.bind()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: context bound; out-pointer valid.
        let r = unsafe {
            sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        };
        check(r, "cuStreamCreate", || "creating a stream".into())?;
        Ok(Stream {
            ctx: ctx.clone(),
            raw,
            owned: true,
        })
    }

    /// The caller's stream `raw` (never destroyed here). Checks that it belongs to
    /// `ctx` (the legacy default stream, null, always does).
    ///
    /// # Safety
    /// `raw` must be a live stream handle (or null) for as long as the returned value
    /// is used.
    pub unsafe fn borrowed(ctx: &Arc<Context>, raw: sys::CUstream) -> Result<Stream> {
        ctx.bind()?;
        if !raw.is_null() {
            let mut owner: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: `raw` is live (the caller's contract); out-pointer valid.
            let r = unsafe { sys::cuStreamGetCtx(raw, &mut owner) };
            check(r, "cuStreamGetCtx", || {
                "asking which context the caller's stream belongs to".into()
            })?;
            if owner != ctx.raw() {
                return Err(crate::error::CudaError::invalid(format!(
                    "the stream passed belongs to another CUDA context than device {}'s primary context: create it on this communicator's device (the CUDA runtime's streams on that device qualify)",
                    ctx.ordinal()
                )));
            }
        }
        Ok(Stream {
            ctx: ctx.clone(),
            raw,
            owned: false,
        })
    }

    /// The raw handle, for launches and async copies.
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// Its context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Is a graph capture under way on this stream?
    pub fn is_capturing(&self) -> Result<bool> {
        self.ctx.bind()?;
        let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: stream alive; out-pointer valid.
        let r = unsafe { sys::cuStreamIsCapturing(self.raw, &mut st) };
        check(r, "cuStreamIsCapturing", || {
            "asking for the capture status".into()
        })?;
        Ok(st != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// The id of the graph capture the stream is in, active or invalidated (unique per
    /// capture in the process), 0 outside a capture.
    pub fn capture_id(&self) -> Result<u64> {
        self.ctx.bind()?;
        let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id: sys::cuuint64_t = 0;
        // SAFETY: stream alive; the status and id out-pointers are valid, and the driver
        // takes null for the outputs not asked for (graph, dependencies, edges, count).
        let r = unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                self.raw,
                &mut st,
                &mut id,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        check(r, "cuStreamGetCaptureInfo_v3", || {
            "asking for the capture id".into()
        })?;
        // an invalidated capture is still one (its next call fails, as is_capturing says)
        Ok(
            if st == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
                0
            } else {
                id
            },
        )
    }

    /// Block until all work queued on the stream finished; reports kernel faults.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the stream is alive.
        let r = unsafe { sys::cuStreamSynchronize(self.raw) };
        check(r, "cuStreamSynchronize", || "waiting for the stream".into())
    }

    /// Has every operation queued on the stream completed? A kernel fault is an error.
    pub fn query(&self) -> Result<bool> {
        self.ctx.bind()?;
        // SAFETY: the stream is alive and its context bound.
        let r = unsafe { sys::cuStreamQuery(self.raw) };
        done_or_not_ready(r, "cuStreamQuery", "the stream drained")
    }

    /// Poll until all work queued on the stream finished, for at most `timeout`:
    /// `Ok(true)` once drained, `Ok(false)` when `timeout` passed first (the caller
    /// reports the timeout in its own terms), an error naming `what` on a kernel fault.
    /// Spins for the first polls, then sleeps 50 us between polls.
    pub fn wait_idle(&self, timeout: Duration, what: &str) -> Result<bool> {
        self.ctx.bind()?;
        poll_until(timeout, || {
            // SAFETY: the stream is alive and its context bound.
            let r = unsafe { sys::cuStreamQuery(self.raw) };
            if r == sys::CUresult::CUDA_ERROR_NOT_READY {
                return Ok(false);
            }
            check(r, "cuStreamQuery", || format!("waiting for {what}")).map(|()| true)
        })
    }
}

/// Poll `done` until it says true, for at most `timeout`: `Ok(true)` then, `Ok(false)`
/// when `timeout` passed first, its error as is. Spins for the first polls, then sleeps
/// 50 us between polls.
fn poll_until(timeout: Duration, mut done: impl FnMut() -> Result<bool>) -> Result<bool> {
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        if done()? {
            return Ok(true);
        }
        if start.elapsed() > timeout {
            return Ok(false);
        }
        polls = polls.saturating_add(1);
        if polls > 1000 {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            std::hint::spin_loop();
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.owned && self.ctx.bind().is_ok() {
            // SAFETY: created in `new`, destroyed once.
            let r = unsafe { sys::cuStreamDestroy_v2(self.raw) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuStreamDestroy failed: {r:?}");
            }
        }
    }
}

/// A query's answer: `Ok(true)` done, `Ok(false)` not yet, an error naming `call` on a
/// fault.
fn done_or_not_ready(r: sys::CUresult, call: &'static str, what: &str) -> Result<bool> {
    if r == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check(r, call, || {
        format!("asking whether {what} (a fault here means queued work touched bad memory)")
    })?;
    Ok(true)
}

/// An event with timing enabled.
#[derive(Debug)]
pub struct Event {
    ctx: Arc<Context>,
    raw: sys::CUevent,
}

// SAFETY: CUevent handles may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// Create a timing event.
    pub fn new(ctx: &Arc<Context>) -> Result<Event> {
        ctx.bind()?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: context bound; out-pointer valid.
        let r =
            unsafe { sys::cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_DEFAULT as u32) };
        check(r, "cuEventCreate", || "creating an event".into())?;
        Ok(Event {
            ctx: ctx.clone(),
            raw,
        })
    }

    /// Record the event on `stream` (same context).
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: both handles alive.
        let r = unsafe { sys::cuEventRecord(self.raw, stream.raw()) };
        check(r, "cuEventRecord", || "recording an event".into())
    }

    /// Make `stream` wait (on the device) until the work recorded before this event's
    /// last [`Event::record`] has completed; the host does not block.
    pub fn wait_on(&self, stream: &Stream) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: both handles alive and of the same context.
        let r = unsafe { sys::cuStreamWaitEvent(stream.raw(), self.raw, 0) };
        check(r, "cuStreamWaitEvent", || {
            "making a stream wait on an event".into()
        })
    }

    /// Whether the work recorded before the event's last [`Event::record`] completed
    /// (true for an event never recorded); an error on a kernel fault.
    pub fn query(&self) -> Result<bool> {
        self.ctx.bind()?;
        // SAFETY: event alive.
        let r = unsafe { sys::cuEventQuery(self.raw) };
        done_or_not_ready(r, "cuEventQuery", "an event completed")
    }

    /// Poll until the work recorded before the event completed, for at most `timeout`,
    /// as [`Stream::wait_idle`]: `Ok(false)` when `timeout` passed first.
    pub fn wait_idle(&self, timeout: Duration) -> Result<bool> {
        poll_until(timeout, || self.query())
    }

    /// Wait for the event.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: event alive.
        let r = unsafe { sys::cuEventSynchronize(self.raw) };
        check(r, "cuEventSynchronize", || "waiting for an event".into())
    }

    /// Milliseconds between `start` and `self`; both must have completed
    /// (call [`Event::synchronize`] on `self` first).
    pub fn elapsed_ms_since(&self, start: &Event) -> Result<f32> {
        self.ctx.bind()?;
        let mut ms = 0f32;
        // SAFETY: both events alive; out-pointer valid.
        let r = unsafe { sys::cuEventElapsedTime_v2(&mut ms, start.raw, self.raw) };
        check(r, "cuEventElapsedTime", || {
            "timing between two events".into()
        })?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created in `new`, destroyed once.
            let r = unsafe { sys::cuEventDestroy_v2(self.raw) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuEventDestroy failed: {r:?}");
            }
        }
    }
}
