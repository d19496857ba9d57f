//! Device memory for a host-side transport that cannot address it ([`Staging`], the
//! [`StagedAccess`] that CUDA regions return from
//! [`Region::staged`](commhal_hal::Region::staged)): host-tcp sends GPU memory by
//! copying it out into host memory and from there into the socket, and applies what
//! arrives the other way round.
//!
//! * **Reads** run on the region's own read stream, straight into the caller's bytes up
//!   to [`DIRECT_MAX`] (the driver stages pageable memory itself), through a pinned
//!   chunk above it. They do not wait for queued writes (the caller settles first
//!   where it must see them).
//! * **Writes and flag stores** are queued on the device's one write stream, shared by
//!   every `Staging` of the device, so they land in call order across regions (a signal
//!   into the plan area publishes a put into the output region before it). The driver
//!   copies a write's bytes before returning, so nothing waits for the copy: only
//!   [`StagedAccess::settle`] does (host-tcp: before a FLUSH's ACK).
//! * **Writes from [`LANDING_MIN`] bytes** through [`StagedAccess::write_with`] are
//!   filled straight into one of the device's pinned landing chunks and copied from
//!   there by the copy engine while the caller goes on: a host-tcp receiver reads the
//!   socket into the chunk. From pageable memory the driver copies the bytes into its
//!   own staging before `cuMemcpyHtoDAsync` returns: a 1 MiB write held the receiver
//!   72–97 µs (2 × H200), during which it read nothing from its socket.
//!
//! Copies run on these streams only, never on the legacy default stream: a kernel on
//! the caller's stream may be spinning on the very flag a store is about to set.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use commhal_hal::{Device, DeviceKind, HalError, MemoryKind, MemoryOwner, StagedAccess};

use crate::context::Context;
use crate::copy::{copy_async_uva, read_on, write_queued};
use crate::error::{CudaError, Result};
use crate::memop::{WRITE_VALUE64, write_value64};
use crate::memory::PinnedHostBuffer;
use crate::stream::{Event, Stream};

/// Bytes of the read stream's pinned chunk (host-tcp frames carry at most 1 MiB).
pub const CHUNK: u64 = 1 << 20;
/// Reads up to this size go straight into the caller's bytes; larger ones through the
/// pinned chunk, which the driver copies from faster.
pub const DIRECT_MAX: u64 = 256 << 10;
/// How long one copy may take before the device counts as lost.
const COPY_BOUND: Duration = Duration::from_secs(30);
/// Bytes of one pinned landing chunk (host-tcp frames carry at most 1 MiB).
pub const LANDING: u64 = 1 << 20;
/// `write_with` of at least this many bytes goes through a landing chunk; smaller
/// writes through the driver's pageable copy, one call and no event.
pub const LANDING_MIN: u64 = 64 << 10;
/// Landing chunks a device makes with its write queue; a writer waits for the oldest
/// one's copy before it refills it.
const LANDINGS: usize = 8;

/// Wait until `stream` ran everything queued on it, bounded by [`COPY_BOUND`].
fn wait(stream: &Stream, what: &str) -> Result<()> {
    within_bound(stream.wait_idle(COPY_BOUND, what)?, what)
}

/// Wait until the copy recorded before `event` ran, bounded by [`COPY_BOUND`].
fn wait_event(event: &Event) -> Result<()> {
    within_bound(event.wait_idle(COPY_BOUND)?, "a staged write's copy")
}

/// `finished` (within [`COPY_BOUND`]) as a result naming `what`.
fn within_bound(finished: bool, what: &str) -> Result<()> {
    if finished {
        Ok(())
    } else {
        Err(CudaError::invalid(format!(
            "{what} did not finish within {COPY_BOUND:?}: the GPU is hung or lost"
        )))
    }
}

/// A region's read stream and its pinned chunk.
#[derive(Debug)]
struct ReadLane {
    stream: Stream,
    pinned: PinnedHostBuffer,
}

/// Device memory `addr..addr + len` of `ctx`'s device, reached through copies.
pub struct Staging {
    ctx: Arc<Context>,
    addr: u64,
    len: u64,
    backend: &'static str,
    reads: Mutex<ReadLane>,
    /// The device's write stream and landing chunks ([`write_queue`]).
    writes: Arc<WriteQueue>,
    _owner: MemoryOwner,
}

/// A pinned chunk a write is filled into, and the event after its copy out.
#[derive(Debug)]
struct Landing {
    buf: PinnedHostBuffer,
    copied: Event,
}

impl Landing {
    fn new(ctx: &Arc<Context>) -> Result<Landing> {
        Ok(Landing {
            buf: PinnedHostBuffer::new(ctx, LANDING)?,
            copied: Event::new(ctx)?,
        })
    }
}

/// A device's write stream and its landing chunks.
#[derive(Debug)]
struct WriteQueue {
    ctx: Arc<Context>,
    stream: Mutex<Stream>,
    /// Chunks not being filled, the oldest copy first. Made with the queue, so that no
    /// receiver allocates pinned memory while kernels may wait for what it receives.
    free: Mutex<VecDeque<Landing>>,
}

impl WriteQueue {
    /// A chunk whose last copy finished: the oldest free one once its copy is done
    /// (copies run in queue order, so it is the first to finish), or a new one when
    /// every chunk is being filled.
    fn take(&self) -> Result<Landing> {
        let oldest = lock(&self.free).pop_front();
        match oldest {
            Some(l) => {
                if let Err(e) = wait_event(&l.copied) {
                    self.give(l);
                    return Err(e);
                }
                Ok(l)
            }
            None => Landing::new(&self.ctx),
        }
    }

    fn give(&self, l: Landing) {
        lock(&self.free).push_back(l);
    }
}

/// The device's write queue: one per device and process.
fn write_queue(ctx: &Arc<Context>) -> Result<Arc<WriteQueue>> {
    static QUEUES: Mutex<Vec<(u32, Arc<WriteQueue>)>> = Mutex::new(Vec::new());
    let mut queues = QUEUES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, q)) = queues.iter().find(|(d, _)| *d == ctx.ordinal()) {
        return Ok(q.clone());
    }
    // as many chunks as can be had, up to LANDINGS (`take` makes one where none is free)
    let free = (0..LANDINGS)
        .map_while(|_| Landing::new(ctx).ok())
        .collect();
    let q = Arc::new(WriteQueue {
        ctx: ctx.clone(),
        stream: Mutex::new(Stream::new(ctx)?),
        free: Mutex::new(free),
    });
    queues.push((ctx.ordinal(), q.clone()));
    Ok(q)
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
            reads: Mutex::new(ReadLane {
                stream: Stream::new(ctx)?,
                pinned: PinnedHostBuffer::new(ctx, CHUNK)?,
            }),
            writes: write_queue(ctx)?,
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
        if !crate::driver::symbol_present(WRITE_VALUE64) {
            tracing::warn!(
                "{backend}: no staged copies: this CUDA driver lacks {WRITE_VALUE64}, which staged flag stores need"
            );
            return None;
        }
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

impl Drop for Staging {
    /// Copies into or out of the region may still be queued (a connection that ended
    /// without a flush): wait for them, bounded, before the owner can free the memory.
    fn drop(&mut self) {
        for (stream, what) in [
            (&*lock(&self.writes.stream), "staged writes"),
            (&lock(&self.reads).stream, "a staged read"),
        ] {
            if let Err(e) = wait(stream, what) {
                tracing::warn!("{}: dropping staged memory: {e}", self.backend);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
        let lane = lock(&self.reads);
        if out.len() as u64 <= DIRECT_MAX {
            // SAFETY: `src..src + out.len()` is inside the region (checked), which the
            // owner keeps alive; the copy is complete when read_on returns.
            unsafe { read_on(&lane.stream, src, out) }.map_err(|e| self.hal(e))?;
            return wait(&lane.stream, "a staged read").map_err(|e| self.hal(e));
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
            wait(&lane.stream, "a staged read").map_err(|e| self.hal(e))?;
            // SAFETY: the copy into the pinned chunk finished (stream idle); it holds at
            // least piece.len() bytes and nothing else writes it while the lane is locked.
            let staged = unsafe { std::slice::from_raw_parts(lane.pinned.host_ptr(), piece.len()) };
            piece.copy_from_slice(staged);
        }
        Ok(())
    }

    fn write(&self, off: u64, data: &[u8]) -> commhal_hal::Result<()> {
        let dst = self.check("write", off, data.len() as u64)?;
        let stream = lock(&self.writes.stream);
        // SAFETY: `dst..dst + data.len()` is inside the live region (checked); the
        // driver takes its copy of `data` before returning.
        unsafe { write_queued(&stream, dst, data) }.map_err(|e| self.hal(e))
    }

    fn write_with(
        &self,
        off: u64,
        len: u64,
        buf: &mut Vec<u8>,
        fill: &mut dyn FnMut(&mut [u8]) -> commhal_hal::Result<()>,
    ) -> commhal_hal::Result<()> {
        let dst = self.check("write", off, len)?;
        if len < LANDING_MIN {
            return commhal_hal::memory::write_filled(buf, len, fill, |d| self.write(off, d));
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(LANDING);
            let landing = self.writes.take().map_err(|e| self.hal(e))?;
            // SAFETY: the chunk holds LANDING >= n bytes, and nothing else touches it
            // until it is given back: no other writer has it, and its last copy
            // finished (`take`).
            let buf = unsafe { std::slice::from_raw_parts_mut(landing.buf.host_ptr(), n as usize) };
            if let Err(e) = fill(buf) {
                self.writes.give(landing);
                return Err(e);
            }
            let queued = {
                let stream = lock(&self.writes.stream);
                // SAFETY: `dst + done..+ n` is inside the live region (checked); the
                // chunk stays allocated and untouched until `copied` says the copy ran.
                unsafe { copy_async_uva(&stream, dst + done, landing.buf.device_addr(), n) }
                    .and_then(|()| landing.copied.record(&stream))
            };
            self.writes.give(landing);
            queued.map_err(|e| self.hal(e))?;
            done += n;
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
        // On the write stream, behind every earlier write of the device.
        let stream = lock(&self.writes.stream);
        // SAFETY: `at` is 8-byte aligned, inside the live region; the symbol is present.
        unsafe { write_value64(&stream, at, value) }.map_err(|e| self.hal(e))
    }

    /// Every `Staging` of one device shares its write stream.
    fn queue(&self) -> u64 {
        1 + u64::from(self.ctx.ordinal())
    }

    fn settle(&self) -> commhal_hal::Result<()> {
        wait(&lock(&self.writes.stream), "staged writes").map_err(|e| self.hal(e))
    }
}
