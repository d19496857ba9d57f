//! Device memory for a host-side transport that cannot address it ([`Staging`], the
//! [`StagedAccess`] that CUDA regions return from
//! [`Region::staged`](commhal_hal::Region::staged)): host-tcp sends GPU memory by
//! copying it, a chunk at a time, into pinned host memory and from there into the
//! socket, and applies what arrives the other way round.
//!
//! Each direction has its own lane (a non-blocking stream and a pinned chunk), so the
//! proxy thread reading a source and a receiver thread writing a destination never
//! wait for each other. Writes and flag stores are queued on the device's one write
//! lane and land in call order, across regions too; only [`StagedAccess::settle`] (and a read, which must
//! see them) waits for them, so a small put and its signal cost the receiver no wait. Copies run on those streams only, never on
//! the legacy default stream: a kernel on the caller's stream may be spinning on the
//! very flag [`StagedAccess::store_u64`] is about to store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use commhal_hal::{Device, DeviceKind, HalError, MemoryKind, MemoryOwner, StagedAccess};

use crate::context::Context;
use crate::copy::{copy_async_uva, read_on, write_queued};
use crate::error::{CudaError, Result};
use crate::memop::{WRITE_VALUE64, write_value64};
use crate::memory::PinnedHostBuffer;
use crate::stream::Stream;

/// Bytes of one lane's pinned chunk (host-tcp frames carry at most 1 MiB).
pub const CHUNK: u64 = 1 << 20;
/// Copies up to this size go straight between device memory and the caller's bytes
/// (the driver stages pageable memory itself): no bounce through the chunk, and a
/// write does not wait for its copy. Larger ones use the pinned chunk.
const DIRECT_MAX: u64 = 256 << 10;
/// How long one chunk's copy may take before the device counts as lost.
const COPY_BOUND: Duration = Duration::from_secs(30);

/// A stream and a pinned chunk for one direction.
#[derive(Debug)]
struct Lane {
    stream: Stream,
    pinned: PinnedHostBuffer,
}

impl Lane {
    fn new(ctx: &Arc<Context>) -> Result<Lane> {
        Ok(Lane {
            stream: Stream::new(ctx)?,
            pinned: PinnedHostBuffer::new(ctx, CHUNK)?,
        })
    }

    fn wait(&self, what: &str) -> Result<()> {
        if self.stream.wait_idle(COPY_BOUND, what)? {
            Ok(())
        } else {
            Err(CudaError::invalid(format!(
                "{what} did not finish within {COPY_BOUND:?}: the GPU is hung or lost"
            )))
        }
    }
}

/// Device memory `addr..addr + len` of `ctx`'s device, reached through copies.
pub struct Staging {
    ctx: Arc<Context>,
    addr: u64,
    len: u64,
    backend: &'static str,
    reads: Mutex<Lane>,
    /// Shared by every `Staging` of the device ([`write_lane`]).
    writes: Arc<Mutex<Lane>>,
    _owner: MemoryOwner,
}

/// The device's write lane: one per device and process, so writes and flag stores to
/// different regions land in call order (a signal into the plan area publishes a put
/// into the output region before it).
fn write_lane(ctx: &Arc<Context>) -> Result<Arc<Mutex<Lane>>> {
    static LANES: Mutex<Vec<(u32, Arc<Mutex<Lane>>)>> = Mutex::new(Vec::new());
    let mut lanes = LANES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, l)) = lanes.iter().find(|(d, _)| *d == ctx.ordinal()) {
        return Ok(l.clone());
    }
    let l = Arc::new(Mutex::new(Lane::new(ctx)?));
    lanes.push((ctx.ordinal(), l.clone()));
    Ok(l)
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging")
            .field("device", &self.ctx.ordinal())
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl Staging {
    /// Copies for `addr..addr + len`, kept alive by `owner`; errors name `backend`.
    pub fn new(
        backend: &'static str,
        ctx: &Arc<Context>,
        addr: u64,
        len: u64,
        owner: MemoryOwner,
    ) -> Result<Staging> {
        Ok(Staging {
            ctx: ctx.clone(),
            addr,
            len,
            backend,
            reads: Mutex::new(Lane::new(ctx)?),
            writes: write_lane(ctx)?,
            _owner: owner,
        })
    }

    /// What a region's [`Region::staged`](commhal_hal::Region::staged) returns: `None`
    /// when the lanes cannot be made (the error is logged).
    pub fn offer(
        backend: &'static str,
        ctx: &Arc<Context>,
        addr: u64,
        len: u64,
        owner: MemoryOwner,
    ) -> Option<Arc<dyn StagedAccess>> {
        match Staging::new(backend, ctx, addr, len, owner) {
            Ok(s) => Some(Arc::new(s)),
            Err(e) => {
                tracing::warn!("{backend}: no staged copies for {len} bytes at {addr:#x}: {e}");
                None
            }
        }
    }

    fn check(&self, what: &str, off: u64, len: u64) -> commhal_hal::Result<u64> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.addr + off),
            _ => Err(HalError::invalid(format!(
                "{}: staged {what} of {len} bytes at offset {off} runs past the {}-byte region",
                self.backend, self.len
            ))),
        }
    }

    fn hal(&self, e: CudaError) -> HalError {
        e.into_hal(self.backend)
    }
}

fn lock(m: &Mutex<Lane>) -> std::sync::MutexGuard<'_, Lane> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl StagedAccess for Staging {
    fn len(&self) -> u64 {
        self.len
    }

    fn device(&self) -> (Device, MemoryKind) {
        (
            Device {
                kind: DeviceKind::Cuda,
                ordinal: self.ctx.ordinal(),
            },
            MemoryKind::Device,
        )
    }

    fn read(&self, off: u64, out: &mut [u8]) -> commhal_hal::Result<()> {
        let src = self.check("read", off, out.len() as u64)?;
        self.settle()?;
        let lane = lock(&self.reads);
        if out.len() as u64 <= DIRECT_MAX {
            // SAFETY: `src..src + out.len()` is inside the region (checked), which the
            // owner keeps alive; the copy is complete when read_on returns.
            unsafe { read_on(&lane.stream, src, out) }.map_err(|e| self.hal(e))?;
            return lane.wait("a staged read").map_err(|e| self.hal(e));
        }
        for (i, piece) in out.chunks_mut(CHUNK as usize).enumerate() {
            let at = src + i as u64 * CHUNK;
            // SAFETY: `at..at + piece.len()` is inside the region (checked), which the
            // owner keeps alive; the pinned chunk holds CHUNK >= piece.len() bytes and
            // the stream is synchronised before either is touched again.
            unsafe {
                copy_async_uva(
                    &lane.stream,
                    lane.pinned.device_addr(),
                    at,
                    piece.len() as u64,
                )
            }
            .map_err(|e| self.hal(e))?;
            lane.wait("a staged read").map_err(|e| self.hal(e))?;
            // SAFETY: the copy into the pinned chunk finished (stream idle); it holds at
            // least piece.len() bytes and nothing else writes it while the lane is locked.
            let staged = unsafe { std::slice::from_raw_parts(lane.pinned.host_ptr(), piece.len()) };
            piece.copy_from_slice(staged);
        }
        Ok(())
    }

    fn write(&self, off: u64, data: &[u8]) -> commhal_hal::Result<()> {
        let dst = self.check("write", off, data.len() as u64)?;
        let lane = lock(&self.writes);
        if data.len() as u64 <= DIRECT_MAX {
            // SAFETY: `dst..dst + data.len()` is inside the live region (checked); the
            // driver takes a copy of `data` before returning.
            return unsafe { write_queued(&lane.stream, dst, data) }.map_err(|e| self.hal(e));
        }
        for (i, piece) in data.chunks(CHUNK as usize).enumerate() {
            // The chunk is free: the previous copy from it was waited for below.
            // SAFETY: the lane is locked and its stream idle (every copy from the chunk
            // is waited for), so no copy reads it while it is filled; it holds CHUNK bytes.
            let staged =
                unsafe { std::slice::from_raw_parts_mut(lane.pinned.host_ptr(), piece.len()) };
            staged.copy_from_slice(piece);
            let at = dst + i as u64 * CHUNK;
            // SAFETY: `at..at + piece.len()` is inside the live region (checked); the
            // pinned chunk stays untouched until the wait below.
            unsafe {
                copy_async_uva(
                    &lane.stream,
                    at,
                    lane.pinned.device_addr(),
                    piece.len() as u64,
                )
            }
            .map_err(|e| self.hal(e))?;
            lane.wait("a staged write").map_err(|e| self.hal(e))?;
        }
        Ok(())
    }

    fn store_u64(&self, off: u64, value: u64) -> commhal_hal::Result<()> {
        let at = self.check("flag store", off, 8)?;
        if at % 8 != 0 {
            return Err(HalError::invalid(format!(
                "{}: staged flag store at offset {off}: the word must be 8-byte aligned",
                self.backend
            )));
        }
        if !crate::driver::symbol_present(WRITE_VALUE64) {
            return Err(HalError::invalid(format!(
                "{}: this CUDA driver lacks {WRITE_VALUE64}, which staged flag stores need: update the driver",
                self.backend
            )));
        }
        // On the write lane, behind its earlier copies.
        let lane = lock(&self.writes);
        // SAFETY: `at` is 8-byte aligned, inside the live region; the symbol is present.
        unsafe { write_value64(&lane.stream, at, value) }.map_err(|e| self.hal(e))
    }

    /// Every `Staging` of one device shares its write lane.
    fn queue(&self) -> u64 {
        1 + u64::from(self.ctx.ordinal())
    }

    fn settle(&self) -> commhal_hal::Result<()> {
        lock(&self.writes)
            .wait("staged writes")
            .map_err(|e| self.hal(e))
    }
}
