//! The host executor of the channel device functions (what CUDA kernels do on GPUs,
//! done here by host threads on host-emu).
//!
//! A `*Device` view resolves a `#[repr(C)]` handle to bounds-checked host memory. Get
//! one safely from a live channel (`MemoryChannel::device()`, ...) — the borrow keeps
//! the channel's memory alive — or, for a bare handle, with the `unsafe from_handle`.
//!
//! **Cooperative calls.** Data movers take `tid, nthreads` like a CUDA block: each of
//! `nthreads` threads calls with its own `tid` and does its contiguous share; together
//! they move everything. Semaphore and FIFO operations (`signal`, `wait`, `flush`, ...)
//! are done by one thread. Making the other threads' copies visible before a signal
//! needs the threads to synchronise first (a block barrier): the caller's job.
//!
//! **Bounds.** Every offset and length is checked against the handle's sizes before any
//! address is formed; errors are [`HalError::OutOfRange`] / [`HalError::Unaligned`].

use commhal_hal::{HalError, Result};

use crate::fifo::{PushRefused, Ring, Trigger, status_error};
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::handles::{MemoryChannelHandle, PortChannelHandle, error_code};
use crate::packet::{LlFormat, ll_split, ll_word};
use crate::raw::HostView;
use crate::semaphore::{SemaphoreDevice, set_error_once};
use crate::sync::Ordering;
use crate::wait::{Backoff, WaitPolicy};

/// Copies are split into shares that are multiples of this many bytes.
const COPY_GRANULE: u64 = 64;

/// The share `(start, len)` of `total` items for thread `tid` of `nthreads`, in
/// multiples of `granule` items (the last share takes the remainder).
pub fn share(total: u64, granule: u64, tid: u32, nthreads: u32) -> Result<(u64, u64)> {
    if nthreads == 0 || tid >= nthreads {
        return Err(HalError::invalid(format!(
            "thread index {tid} is not below thread count {nthreads}: call with 0 <= tid < nthreads"
        )));
    }
    let per = total.div_ceil(nthreads as u64).div_ceil(granule) * granule;
    let start = per.saturating_mul(tid as u64).min(total);
    let end = start.saturating_add(per).min(total);
    Ok((start, end - start))
}

/// A side of a copy: what to call it in a range error, the view, the byte offset.
type CopySide<'s, 'a> = (&'s str, &'s HostView<'a>, u64);

/// Memory-channel put/get: check both ranges (destination first), then copy this
/// thread's share (granule [`COPY_GRANULE`]) of `bytes` from `src` to `dst`.
fn copy_share(
    (dst_what, dst, dst_off): CopySide<'_, '_>,
    (src_what, src, src_off): CopySide<'_, '_>,
    bytes: u64,
    tid: u32,
    nthreads: u32,
) -> Result<()> {
    commhal_hal::error::check_range(dst_what, dst_off, bytes, dst.len())?;
    commhal_hal::error::check_range(src_what, src_off, bytes, src.len())?;
    let (s, n) = share(bytes, COPY_GRANULE, tid, nthreads)?;
    HostView::copy(dst, dst_off + s, src, src_off + s, n)
}

/// Write `bytes` of `src + src_off` as packets at `dst + dst_off` (this thread's share).
#[allow(clippy::too_many_arguments)]
pub(crate) fn put_packets(
    fmt: LlFormat,
    dst: &HostView<'_>,
    dst_off: u64,
    src: &HostView<'_>,
    src_off: u64,
    bytes: u64,
    flag: u32,
    tid: u32,
    nthreads: u32,
) -> Result<()> {
    check_flag(flag)?;
    commhal_hal::error::check_range("packet source", src_off, bytes, src.len())?;
    let words = dst.words(dst_off, fmt.packets_for(bytes) * fmt.words())?;
    check_packet_align(fmt, dst, dst_off)?;
    let (first, count) = share(fmt.packets_for(bytes), 1, tid, nthreads)?;
    let db = fmt.data_bytes();
    // Stage the source through a small stack buffer, 64 packets at a time.
    let mut buf = [0u8; 512];
    let mut p = first;
    while p < first + count {
        let n = (first + count - p).min(64);
        let from = p * db;
        let len = (n * db).min(bytes - from);
        buf[..(n * db) as usize].fill(0);
        src.read(src_off + from, &mut buf[..len as usize])?;
        for k in 0..n {
            let d = &buf[(k * db) as usize..((k + 1) * db) as usize];
            let w = ((p + k) * fmt.words()) as usize;
            for (j, chunk) in d.chunks_exact(4).enumerate() {
                let data = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                words[w + j].store(ll_word(data, flag), Ordering::Release);
            }
        }
        p += n;
    }
    Ok(())
}

/// Read packets at `src + pkt_off` carrying `out.len()` payload bytes, waiting (bounded)
/// until every word of every packet carries `flag`.
pub(crate) fn read_packets(
    fmt: LlFormat,
    src: &HostView<'_>,
    pkt_off: u64,
    out: &mut [u8],
    flag: u32,
    policy: &WaitPolicy,
    error_flag: Option<&AtomicU32>,
) -> Result<()> {
    check_flag(flag)?;
    let bytes = out.len() as u64;
    let words = src.words(pkt_off, fmt.packets_for(bytes) * fmt.words())?;
    check_packet_align(fmt, src, pkt_off)?;
    let db = fmt.data_bytes() as usize;
    for (i, chunk) in out.chunks_mut(db).enumerate() {
        let mut data = [0u8; 8];
        for j in 0..fmt.words() as usize {
            let word = &words[i * fmt.words() as usize + j];
            let mut backoff = Backoff::new(policy);
            let d = loop {
                let (d, f) = ll_split(word.load(Ordering::Acquire));
                if f == flag {
                    break d;
                }
                if backoff.snooze().is_err() {
                    set_error_once(error_flag, error_code::PACKET_TIMEOUT);
                    return Err(HalError::Timeout {
                        what: format!(
                            "LL packet {i} at offset {pkt_off} with flag {flag} (it still carries flag {f}); is the peer sending this round?"
                        ),
                        millis: policy.timeout.as_millis() as u64,
                    });
                }
            };
            data[j * 4..j * 4 + 4].copy_from_slice(&d.to_le_bytes());
        }
        chunk.copy_from_slice(&data[..chunk.len()]);
    }
    Ok(())
}

/// Read this thread's share of `bytes` of packets at `pkt_off` into `dst + dst_off`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn unpack_packets(
    fmt: LlFormat,
    dst: &HostView<'_>,
    dst_off: u64,
    src: &HostView<'_>,
    pkt_off: u64,
    bytes: u64,
    flag: u32,
    tid: u32,
    nthreads: u32,
    policy: &WaitPolicy,
    error_flag: Option<&AtomicU32>,
) -> Result<()> {
    commhal_hal::error::check_range("unpack destination", dst_off, bytes, dst.len())?;
    src.words(pkt_off, fmt.packets_for(bytes) * fmt.words())?;
    let (first, count) = share(fmt.packets_for(bytes), 1, tid, nthreads)?;
    let db = fmt.data_bytes();
    let mut buf = [0u8; 512];
    let mut p = first;
    while p < first + count {
        let n = (first + count - p).min(64);
        let from = p * db;
        let len = (n * db).min(bytes - from);
        let at = pkt_off + p * fmt.packet_bytes();
        read_packets(
            fmt,
            src,
            at,
            &mut buf[..len as usize],
            flag,
            policy,
            error_flag,
        )?;
        dst.write(dst_off + from, &buf[..len as usize])?;
        p += n;
    }
    Ok(())
}

fn check_flag(flag: u32) -> Result<()> {
    if flag == 0 {
        return Err(HalError::invalid(
            "LL flag 0 marks empty scratch and cannot carry data: use PacketEpoch::flag()",
        ));
    }
    Ok(())
}

fn check_packet_align(fmt: LlFormat, view: &HostView<'_>, off: u64) -> Result<()> {
    let at = view.addr().wrapping_add(off);
    commhal_hal::error::check_aligned(
        format_args!("{fmt:?} packet address (offset {off})"),
        at,
        fmt.packet_bytes(),
    )
}

/// Executor of the memory-channel device functions on one [`MemoryChannelHandle`].
#[derive(Debug, Clone, Copy)]
pub struct MemoryDevice<'a> {
    local: HostView<'a>,
    remote: HostView<'a>,
    sem: SemaphoreDevice<'a>,
    error_flag: Option<&'a AtomicU32>,
    policy: WaitPolicy,
}

impl<'a> MemoryDevice<'a> {
    pub(crate) fn from_parts(
        local: HostView<'a>,
        remote: HostView<'a>,
        sem: SemaphoreDevice<'a>,
        error_flag: Option<&'a AtomicU32>,
        policy: WaitPolicy,
    ) -> Self {
        MemoryDevice {
            local,
            remote,
            sem: sem.with_error_flag(error_flag),
            error_flag,
            policy,
        }
    }

    /// Resolve a bare handle holding host addresses. The handle carries no sizes, so
    /// pass the lengths of its local and remote buffers. `h.expected` is the consumed
    /// count this view advances (borrowed mutably for `'a`); `h.wait_ns` is ignored
    /// (the host bounds waits by `policy`).
    ///
    /// # Safety
    /// `h.local_buf..+local_len`, `h.remote_buf..+remote_len`, the two semaphore
    /// counters (u64) and, if non-zero, `h.error_flag` (u32) must be live host memory
    /// for all of `'a` — the channel that made the handle must outlive the view.
    pub unsafe fn from_handle(
        h: &'a mut MemoryChannelHandle,
        local_len: u64,
        remote_len: u64,
        policy: WaitPolicy,
    ) -> Result<Self> {
        let c = *h;
        // SAFETY: forwarded to the caller's promise about `h`.
        let local = unsafe { HostView::from_raw(c.local_buf, local_len, "local buffer") }?;
        // SAFETY: as above.
        let remote = unsafe { HostView::from_raw(c.remote_buf, remote_len, "peer buffer") }?;
        // SAFETY: as above.
        let inbound = unsafe { HostView::from_raw(c.local_semaphore, 8, "semaphore counter") }?;
        // SAFETY: as above.
        let peer = unsafe { HostView::from_raw(c.remote_semaphore, 8, "peer semaphore counter") }?;
        let error_flag = if c.error_flag == 0 {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { HostView::from_raw(c.error_flag, 4, "error flag") }?.word32(0)?)
        };
        let expected: &'a AtomicU64 = crate::raw::atomic_of(&mut h.expected);
        let sem = SemaphoreDevice::new(
            inbound.word(0)?,
            expected,
            Some(peer.word(0)?),
            None,
            policy,
        );
        Ok(Self::from_parts(local, remote, sem, error_flag, policy))
    }

    /// Copy this thread's share of `bytes` from `local + src_off` to `remote + dst_off`.
    pub fn put(
        &self,
        dst_off: u64,
        src_off: u64,
        bytes: u64,
        tid: u32,
        nthreads: u32,
    ) -> Result<()> {
        copy_share(
            ("put destination (peer buffer)", &self.remote, dst_off),
            ("put source (local buffer)", &self.local, src_off),
            bytes,
            tid,
            nthreads,
        )
    }

    /// Copy this thread's share of `bytes` from `remote + src_off` to `local + dst_off`.
    pub fn get(
        &self,
        dst_off: u64,
        src_off: u64,
        bytes: u64,
        tid: u32,
        nthreads: u32,
    ) -> Result<()> {
        copy_share(
            ("get destination (local buffer)", &self.local, dst_off),
            ("get source (peer buffer)", &self.remote, src_off),
            bytes,
            tid,
            nthreads,
        )
    }

    /// `put` by one thread, then `signal`.
    pub fn put_with_signal(&self, dst_off: u64, src_off: u64, bytes: u64) -> Result<()> {
        self.put(dst_off, src_off, bytes, 0, 1)?;
        self.signal()
    }

    /// Signal the peer (`Release`): this thread's earlier writes are visible to the peer
    /// once its `wait` returns.
    pub fn signal(&self) -> Result<()> {
        self.sem.signal()
    }

    /// Signal the peer (`Relaxed`): orders nothing else.
    pub fn relaxed_signal(&self) -> Result<()> {
        self.sem.relaxed_signal()
    }

    /// Wait (bounded) for one signal from the peer (`Acquire`).
    pub fn wait(&self) -> Result<()> {
        self.sem.wait()
    }

    /// Wait (bounded) for one signal (`Relaxed`): orders execution only.
    pub fn relaxed_wait(&self) -> Result<()> {
        self.sem.relaxed_wait()
    }

    /// Consume one signal if available; never blocks.
    pub fn poll(&self) -> bool {
        self.sem.poll()
    }

    /// Memory-channel copies are complete when `put` returns (the source is reusable
    /// at once); visibility to the peer comes with the next signal. So flush has
    /// nothing to wait for.
    pub fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Write this thread's share of `bytes` from `local + src_off` as `fmt` packets
    /// with `flag` into `remote + dst_off` (needs `fmt.scratch_bytes(bytes)` there).
    #[allow(clippy::too_many_arguments)]
    pub fn put_packets(
        &self,
        fmt: LlFormat,
        dst_off: u64,
        src_off: u64,
        bytes: u64,
        flag: u32,
        tid: u32,
        nthreads: u32,
    ) -> Result<()> {
        put_packets(
            fmt,
            &self.remote,
            dst_off,
            &self.local,
            src_off,
            bytes,
            flag,
            tid,
            nthreads,
        )
    }

    /// Read `out.len()` payload bytes from the packets at `local + pkt_off`, waiting
    /// (bounded) for `flag` on every word.
    pub fn read_packets(
        &self,
        fmt: LlFormat,
        pkt_off: u64,
        out: &mut [u8],
        flag: u32,
    ) -> Result<()> {
        read_packets(
            fmt,
            &self.local,
            pkt_off,
            out,
            flag,
            &self.policy,
            self.error_flag,
        )
    }

    /// Unpack this thread's share of `bytes` from the packets at `local + pkt_off` into
    /// `local + dst_off`.
    #[allow(clippy::too_many_arguments)]
    pub fn unpack_packets(
        &self,
        fmt: LlFormat,
        dst_off: u64,
        pkt_off: u64,
        bytes: u64,
        flag: u32,
        tid: u32,
        nthreads: u32,
    ) -> Result<()> {
        unpack_packets(
            fmt,
            &self.local,
            dst_off,
            &self.local,
            pkt_off,
            bytes,
            flag,
            tid,
            nthreads,
            &self.policy,
            self.error_flag,
        )
    }

    /// Read bytes of the local buffer (test and algorithm helper).
    pub fn read_local(&self, off: u64, out: &mut [u8]) -> Result<()> {
        self.local.read(off, out)
    }

    /// Write bytes into the local buffer (test and algorithm helper).
    pub fn write_local(&self, off: u64, data: &[u8]) -> Result<()> {
        self.local.write(off, data)
    }

    /// The semaphore executor.
    pub fn semaphore(&self) -> &SemaphoreDevice<'a> {
        &self.sem
    }
}

/// The ids and sizes a port channel's triggers carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PortIds {
    pub(crate) semaphore: u32,
    pub(crate) dst: u32,
    pub(crate) src: u32,
    pub(crate) dst_len: u64,
    pub(crate) src_len: u64,
}

/// Executor of the port-channel device functions on one [`PortChannelHandle`]: one
/// thread pushes triggers into the proxy FIFO.
#[derive(Debug, Clone, Copy)]
pub struct PortDevice<'a> {
    ring: Ring<'a, AtomicU64>,
    sem: SemaphoreDevice<'a>,
    ids: PortIds,
    error_flag: Option<&'a AtomicU32>,
    policy: WaitPolicy,
}

impl<'a> PortDevice<'a> {
    pub(crate) fn from_parts(
        ring: Ring<'a, AtomicU64>,
        sem: SemaphoreDevice<'a>,
        ids: PortIds,
        error_flag: Option<&'a AtomicU32>,
        policy: WaitPolicy,
    ) -> Self {
        PortDevice {
            ring,
            sem: sem.with_error_flag(error_flag),
            ids,
            error_flag,
            policy,
        }
    }

    /// Resolve a bare handle holding host addresses; `dst_len` / `src_len` are the sizes
    /// of the proxy memories it names (for bounds checks). A view made this way cannot
    /// see the proxy's status word, so a stopped proxy shows up as a timeout.
    ///
    /// # Safety
    /// The ring, head, tail, local semaphore and (if non-zero) error flag addresses in
    /// `h` must be live host memory for all of `'a` (the proxy and the channel must
    /// outlive the view).
    pub unsafe fn from_handle(
        h: &'a mut PortChannelHandle,
        dst_len: u64,
        src_len: u64,
        policy: WaitPolicy,
    ) -> Result<Self> {
        let c = *h;
        crate::fifo::check_depth(c.fifo_depth)?;
        let ring_bytes = c.fifo_depth.checked_mul(16).ok_or_else(|| {
            HalError::invalid(format!("FIFO depth {} is too large", c.fifo_depth))
        })?;
        // SAFETY: forwarded to the caller's promise about `h`.
        let slots = unsafe { HostView::from_raw(c.fifo, ring_bytes, "FIFO ring") }?;
        // SAFETY: as above.
        let head = unsafe { HostView::from_raw(c.head, 8, "FIFO head") }?;
        // SAFETY: as above.
        let tail = unsafe { HostView::from_raw(c.tail, 8, "FIFO tail") }?;
        // SAFETY: as above.
        let inbound = unsafe { HostView::from_raw(c.local_semaphore, 8, "semaphore counter") }?;
        let error_flag = if c.error_flag == 0 {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { HostView::from_raw(c.error_flag, 4, "error flag") }?.word32(0)?)
        };
        let ring = Ring {
            slots: slots.slots(0, c.fifo_depth)?,
            head: head.word(0)?,
            tail: tail.word(0)?,
            status: None,
            depth: c.fifo_depth,
        };
        let expected: &'a AtomicU64 = crate::raw::atomic_of(&mut h.expected);
        let sem = SemaphoreDevice::new(inbound.word(0)?, expected, None, None, policy);
        let ids = PortIds {
            semaphore: c.semaphore_id,
            dst: c.remote_memory_id,
            src: c.local_memory_id,
            dst_len,
            src_len,
        };
        Ok(Self::from_parts(ring, sem, ids, error_flag, policy))
    }

    /// Push a trigger, waiting (bounded) while the FIFO is full. Returns its ticket.
    pub fn push(&self, t: &Trigger) -> Result<u64> {
        let w = t.encode()?;
        let mut backoff = Backoff::new(&self.policy);
        loop {
            match self.ring.try_push(w) {
                Ok(ticket) => return Ok(ticket),
                Err(PushRefused::Status(s)) => return Err(status_error(s)),
                Err(PushRefused::Full) => {
                    if backoff.snooze().is_err() {
                        set_error_once(self.error_flag, error_code::FIFO_FULL_TIMEOUT);
                        return Err(HalError::Timeout {
                            what: format!(
                                "room in the proxy FIFO (depth {}): is the ProxyService running and its ports alive?",
                                self.ring.depth
                            ),
                            millis: self.policy.timeout.as_millis() as u64,
                        });
                    }
                }
            }
        }
    }

    /// Wait (bounded) until the proxy has handled `ticket`.
    pub fn wait_done(&self, ticket: u64) -> Result<()> {
        let r = self.policy.wait_until(
            || format!("the proxy to handle trigger #{ticket}: is the ProxyService running?"),
            || {
                let done = self.ring.is_done(ticket);
                let s = self.ring.status();
                if s & crate::fifo::STATUS_ERROR != 0 || (!done && s != 0) {
                    return Err(status_error(s));
                }
                Ok(done)
            },
        );
        if matches!(r, Err(HalError::Timeout { .. })) {
            set_error_once(self.error_flag, error_code::FLUSH_TIMEOUT);
        }
        r
    }

    fn data(&self, flags: u8, dst_off: u64, src_off: u64, bytes: u64) -> Result<u64> {
        commhal_hal::error::check_range("port put destination", dst_off, bytes, self.ids.dst_len)?;
        commhal_hal::error::check_range("port put source", src_off, bytes, self.ids.src_len)?;
        let mut t = Trigger::put(
            self.ids.semaphore,
            self.ids.dst,
            dst_off,
            self.ids.src,
            src_off,
            bytes,
        );
        t.flags = flags;
        if t.encode().is_err() {
            set_error_once(self.error_flag, error_code::TRIGGER_RANGE);
        }
        self.push(&t)
    }

    /// Ask the proxy to copy `bytes` from the source memory to the destination memory.
    /// A 0-byte put travels through the FIFO and copies nothing.
    pub fn put(&self, dst_off: u64, src_off: u64, bytes: u64) -> Result<()> {
        self.data(crate::fifo::FLAG_DATA, dst_off, src_off, bytes)
            .map(drop)
    }

    /// Ask the proxy to signal the peer's semaphore.
    pub fn signal(&self) -> Result<()> {
        self.push(&Trigger::signal(self.ids.semaphore)).map(drop)
    }

    /// Put then signal in one trigger.
    pub fn put_with_signal(&self, dst_off: u64, src_off: u64, bytes: u64) -> Result<()> {
        use crate::fifo::{FLAG_DATA, FLAG_SIGNAL};
        self.data(FLAG_DATA | FLAG_SIGNAL, dst_off, src_off, bytes)
            .map(drop)
    }

    /// Put, signal and flush in one trigger; returns once the proxy has flushed.
    pub fn put_with_signal_and_flush(&self, dst_off: u64, src_off: u64, bytes: u64) -> Result<()> {
        use crate::fifo::{FLAG_DATA, FLAG_FLUSH, FLAG_SIGNAL};
        let ticket = self.data(
            FLAG_DATA | FLAG_SIGNAL | FLAG_FLUSH,
            dst_off,
            src_off,
            bytes,
        )?;
        self.wait_done(ticket)
    }

    /// Push a flush trigger and wait (bounded) until the proxy has flushed the port.
    pub fn flush(&self) -> Result<()> {
        let ticket = self.push(&Trigger::flush(self.ids.semaphore))?;
        self.wait_done(ticket)
    }

    /// Wait (bounded) for one signal from the peer (`Acquire`).
    pub fn wait(&self) -> Result<()> {
        self.sem.wait()
    }

    /// Wait (bounded) for one signal (`Relaxed`).
    pub fn relaxed_wait(&self) -> Result<()> {
        self.sem.relaxed_wait()
    }

    /// Consume one signal if available; never blocks.
    pub fn poll(&self) -> bool {
        self.sem.poll()
    }
}
