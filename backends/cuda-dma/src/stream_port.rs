//! [`StreamPort`]: cuda-dma's copy-engine operations on a caller's stream — the one
//! code path for every copy-engine transfer in commhal.
//!
//! Two users queue through it: the proxy's [`DmaPort`](crate::DmaPort) (on the port's
//! own stream, for device code's triggers) and the GPU communicator's copy-engine path
//! (`commhal-cuda-coll`'s `dma` module, on its per-peer side streams and the caller's
//! stream, graph-capturable because nothing here synchronises).
//!
//! | operation | driver call | ordering on the stream |
//! |---|---|---|
//! | [`StreamPort::put`] | `cuMemcpyDtoDAsync` (a copy engine; local → a peer mapping over NVLink / P2P, or local → local) | starts after the stream's earlier work |
//! | [`StreamPort::signal32`], [`StreamPort::signal64`] | `cuStreamWriteValue32` / `64` with the default memory barrier | the value is written after every earlier operation of the stream, and a reader that sees it sees their writes (a *strong* signal) |
//! | [`StreamPort::put_signal32`] | both, in that order | the put, then its signal |
//!
//! Every operation returns once *queued*; none blocks the host, none synchronises the
//! stream, so a stream in CUDA graph capture records them. Waiting is the caller's:
//! the proxy drains its port's stream on `flush`, the communicator waits for flags with
//! a bounded kernel.
//!
//! A [`StreamPort`] is a proof that the driver has the stream memory operations the
//! signals need (cudarc panics on a missing symbol): [`StreamPort::new`] checks once
//! per process.

use std::sync::OnceLock;

use commhal_cuda_rt::{CudaError, Stream, copy, memop};

/// The driver entry points a [`StreamPort`] needs: the 32-bit signal. The 64-bit one
/// ([`memop::WRITE_VALUE64`]) is checked by [`StreamPort::signal64`].
pub const SYMBOLS: [&str; 1] = [memop::WRITE_VALUE32];

/// Which stream write-value entry points the driver has: (32-bit, 64-bit), looked up
/// once per process.
fn symbols() -> (bool, bool) {
    static S: OnceLock<(bool, bool)> = OnceLock::new();
    *S.get_or_init(|| {
        let has = commhal_cuda_rt::driver::symbol_present;
        (SYMBOLS.iter().all(|s| has(s)), has(memop::WRITE_VALUE64))
    })
}

/// The copy-engine operations on any stream of the caller (see the module docs).
/// `Copy`: hold one, or make one per use (the driver check is cached).
#[derive(Debug, Clone, Copy)]
pub struct StreamPort {
    value64: bool,
}

impl StreamPort {
    /// Whether the driver has what [`StreamPort::new`] needs ([`SYMBOLS`]).
    pub fn available() -> bool {
        symbols().0
    }

    /// A stream port, or an error saying the driver lacks the stream memory operations.
    pub fn new() -> Result<StreamPort, CudaError> {
        let (value32, value64) = symbols();
        if !value32 {
            return Err(CudaError::Invalid(format!(
                "the CUDA driver lacks {} (stream memory operations), which the copy-engine signals need: update the NVIDIA driver",
                SYMBOLS.join(", ")
            )));
        }
        Ok(StreamPort { value64 })
    }

    /// Whether [`StreamPort::signal64`] can run (the driver has [`memop::WRITE_VALUE64`]).
    pub fn has_signal64(&self) -> bool {
        self.value64
    }

    /// Queue a copy of `len` bytes from `src` to `dst` on `stream` (a copy engine;
    /// nothing for 0 bytes).
    ///
    /// # Safety
    /// Both ranges are device memory the stream's device addresses (its own memory or a
    /// peer's mapped for it), alive until the stream has executed the copy.
    pub unsafe fn put(
        &self,
        stream: &Stream,
        dst: u64,
        src: u64,
        len: u64,
    ) -> Result<(), CudaError> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: forwarded contract.
        unsafe { copy::copy_async(stream, dst, src, len) }
    }

    /// Queue the write of the 32-bit `value` at `addr` on `stream`, after everything
    /// queued on it before, with the default memory barrier (a strong signal).
    ///
    /// # Safety
    /// `addr` is 4-byte aligned device memory the stream's device addresses (own or a
    /// peer's mapped for it), alive until the stream has executed the write.
    pub unsafe fn signal32(&self, stream: &Stream, addr: u64, value: u32) -> Result<(), CudaError> {
        // SAFETY: forwarded contract; `self` proves the symbol exists.
        unsafe { memop::write_value32(stream, addr, value) }
    }

    /// [`StreamPort::signal32`] of a 64-bit `value` (8-byte aligned `addr`); an error
    /// where the driver lacks [`memop::WRITE_VALUE64`].
    ///
    /// # Safety
    /// As [`StreamPort::signal32`], with `addr` 8-byte aligned.
    pub unsafe fn signal64(&self, stream: &Stream, addr: u64, value: u64) -> Result<(), CudaError> {
        if !self.value64 {
            return Err(CudaError::Invalid(format!(
                "the CUDA driver lacks {} (64-bit stream memory writes): update the NVIDIA driver",
                memop::WRITE_VALUE64
            )));
        }
        // SAFETY: forwarded contract; the symbol exists (checked above).
        unsafe { memop::write_value64(stream, addr, value) }
    }

    /// [`StreamPort::put`] of `(dst, src, len)`, then [`StreamPort::signal32`] of
    /// `value` at `flag`, on `stream`: a reader that sees the value sees the copy.
    ///
    /// # Safety
    /// The contracts of both.
    pub unsafe fn put_signal32(
        &self,
        stream: &Stream,
        (dst, src, len): (u64, u64, u64),
        flag: u64,
        value: u32,
    ) -> Result<(), CudaError> {
        // SAFETY: forwarded contracts.
        unsafe {
            self.put(stream, dst, src, len)?;
            self.signal32(stream, flag, value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_driver_there_is_no_port_and_the_error_says_why() {
        if commhal_cuda_rt::driver::driver_present() {
            return;
        }
        assert!(!StreamPort::available());
        let e = StreamPort::new().unwrap_err().to_string();
        assert!(
            e.contains(memop::WRITE_VALUE32) && e.contains("update the NVIDIA driver"),
            "{e}"
        );
    }
}
