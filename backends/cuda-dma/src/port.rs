//! [`DmaPort`]: one connection's stream. Called only by the proxy thread. Its copies and
//! signals are [`StreamPort`] operations on that stream (the same code the GPU
//! communicator's copy-engine path queues on its own streams).
//!
//! **Ordering.** Every operation is queued on the port's one stream in call order, so
//! a copy starts after the previous one finished (put→put ordered), and a signal's
//! value is written after every earlier copy, with the default stream memory barrier
//! (strong signal). `write` and `signal` return when *queued*.
//!
//! **Signals** are writes, not atomic adds: the port keeps a shadow of each remote
//! counter it signals (keyed by its address) and writes `shadow + add`. This is exact
//! because the proxy is the only writer of that counter (the peer only reads it). A
//! counter that does not start at 0 must be announced with
//! [`DmaPort::set_semaphore_value`] before the first signal.
//!
//! **Flush** waits (bounded) until the stream drained: every earlier copy read its
//! source (source reusable) and wrote the peer (remote visible).

use std::collections::HashMap;
use std::time::Duration;

use commhal_backend_cuda_nvlink::driver::to_hal;
use commhal_cuda_rt::Stream;
use commhal_hal::error::{Transfer, check_semaphore_offset, check_transfer};
use commhal_hal::{HalError, Port, Rank, Region, Result};

use crate::BACKEND;
use crate::region::{DmaLocal, DmaRemote};
use crate::stream_ops::{self, WRITE_VALUE_SYMBOL};
use crate::stream_port::StreamPort;

/// A port to one peer: a non-blocking stream on the local device.
#[derive(Debug)]
pub struct DmaPort {
    stream: Stream,
    /// The copy-engine operations, queued on `stream`.
    ops: StreamPort,
    peer: Rank,
    shadow: HashMap<u64, u64>,
    flush_timeout: Duration,
}

impl DmaPort {
    pub(crate) fn new(
        stream: Stream,
        ops: StreamPort,
        peer: Rank,
        flush_timeout: Duration,
    ) -> DmaPort {
        DmaPort {
            stream,
            ops,
            peer,
            shadow: HashMap::new(),
            flush_timeout,
        }
    }

    /// The peer rank.
    pub fn peer(&self) -> Rank {
        self.peer
    }

    /// The port's stream (e.g. to time it with events).
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Announce the current value of the remote counter at `sem + off` (default 0).
    pub fn set_semaphore_value(&mut self, sem: &DmaRemote, off: u64, value: u64) -> Result<()> {
        let addr = semaphore_addr(sem, off)?;
        self.shadow.insert(addr, value);
        Ok(())
    }

    /// The value the next signal of `add` would write (for tests and diagnostics).
    pub fn semaphore_value(&self, sem: &DmaRemote, off: u64) -> Result<u64> {
        let addr = semaphore_addr(sem, off)?;
        Ok(self.shadow.get(&addr).copied().unwrap_or(0))
    }

    fn check_device(&self, remote: &DmaRemote, what: &str) -> Result<()> {
        let mine = self.stream.context().ordinal();
        if remote.device() != mine {
            return Err(HalError::invalid(format!(
                "{what} is mapped for device {} but this port's stream runs on device {mine}: import it with the cuda-dma transport of device {mine}",
                remote.device()
            )));
        }
        Ok(())
    }
}

/// The checked address of a semaphore word.
fn semaphore_addr(sem: &DmaRemote, off: u64) -> Result<u64> {
    check_semaphore_offset("remote semaphore", off, sem.len())?;
    Ok(sem.addr() + off)
}

impl Port for DmaPort {
    type Local = DmaLocal;
    type Remote = DmaRemote;

    fn write(
        &mut self,
        dst: &DmaRemote,
        dst_off: u64,
        src: &DmaLocal,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        check_transfer(
            "port",
            Transfer::Write,
            len,
            (
                &format_args!("rank {}'s buffer", self.peer),
                dst_off,
                dst.len(),
            ),
            (src_off, src.len()),
        )?;
        self.check_device(dst, "the destination")?;
        // SAFETY: both ranges are inside registered / imported device buffers
        // (checked above) that the caller keeps alive until a flush (the trait's
        // contract); the destination is mapped for this stream's device (checked).
        unsafe {
            self.ops.put(
                &self.stream,
                dst.addr() + dst_off,
                src.addr() + src_off,
                len,
            )
        }
        .map_err(|e| to_hal(BACKEND, e))
    }

    /// Unsupported ([`GUARANTEES`](crate::GUARANTEES)`.get` is false): the copy engine
    /// could copy out of the peer mapping just as it copies into it, but that path was
    /// never written nor run on a GPU.
    fn read(
        &mut self,
        _dst: &DmaLocal,
        _dst_off: u64,
        _src: &DmaRemote,
        _src_off: u64,
        len: u64,
    ) -> Result<()> {
        Err(HalError::unsupported(
            BACKEND,
            format!(
                "one-sided reads (a {len}-byte Port::read from rank {}; Guarantees::get is false): have rank {} write the data to this rank (put + signal) instead, or read through a memory channel's get (cuda-nvlink)",
                self.peer, self.peer
            ),
        ))
    }

    fn signal(&mut self, sem: &DmaRemote, off: u64, add: u64) -> Result<()> {
        let addr = semaphore_addr(sem, off)?;
        self.check_device(sem, "the semaphore")?;
        let next = self
            .shadow
            .get(&addr)
            .copied()
            .unwrap_or(0)
            .wrapping_add(add);
        if !self.ops.has_signal64() {
            return Err(HalError::unsupported(
                BACKEND,
                format!(
                    "signals: the driver lacks {WRITE_VALUE_SYMBOL} (stream memory operations); update the NVIDIA driver"
                ),
            ));
        }
        // SAFETY: the semaphore word is 8-byte aligned inside an imported peer buffer
        // mapped for this stream's device (checked above), alive until a flush.
        unsafe { self.ops.signal64(&self.stream, addr, next) }.map_err(|e| to_hal(BACKEND, e))?;
        self.shadow.insert(addr, next);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let what = format!(
            "the cuda-dma port to rank {} to finish its copies and signals",
            self.peer
        );
        stream_ops::wait_drained(&self.stream, self.flush_timeout, &what)
    }
}
