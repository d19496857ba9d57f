//! [`MemoryChannel`]: one-sided put/get/signal/wait between this rank and one peer over
//! a memory-mapped transport. Device threads (host threads on host-emu) copy directly
//! into the peer's buffer mapped here.
//!
//! Contract (MSCCL++): a peer whose `wait` returned sees every byte this side `put`
//! before its `signal` (strong signal, release/acquire at system scope). The copies of
//! several cooperating threads are covered only if they synchronise with the signalling
//! thread first. `get` reads the peer's buffer; pair it with a signal from the peer.

use std::sync::atomic::{AtomicU32, Ordering};

use commhal_hal::bootstrap::{Bootstrap, recv_export, send_export};
use commhal_hal::{MemoryMapped, Rank, Region, Result};

use crate::device::MemoryDevice;
use crate::handles::{DEFAULT_WAIT_NS, MemoryChannelHandle, error_code};
use crate::packet::LlFormat;
use crate::raw::HostView;
use crate::semaphore::MemorySemaphore;
use crate::wait::WaitPolicy;

/// A memory channel to one peer: our buffer, the peer's buffer mapped here, and a
/// device-to-device semaphore.
#[derive(Debug)]
pub struct MemoryChannel<M: MemoryMapped> {
    local: M::Memory,
    remote: M::Mapping,
    semaphore: MemorySemaphore,
    /// Device error flag (boxed: its address is in handles and must not move).
    error_flag: Box<AtomicU32>,
    wait_ns: u64,
}

impl<M: MemoryMapped> MemoryChannel<M> {
    /// From parts: `local` (ours, which the peer maps), `remote` (the peer's buffer
    /// mapped here) and the semaphore.
    pub fn new(local: M::Memory, remote: M::Mapping, semaphore: MemorySemaphore) -> Result<Self> {
        Ok(MemoryChannel {
            local,
            remote,
            semaphore,
            error_flag: Box::new(AtomicU32::new(0)),
            wait_ns: DEFAULT_WAIT_NS,
        })
    }

    /// Set up a channel with `peer`: export `local` and exchange exports through the
    /// bootstrap under `tag`, map the peer's buffer, and set up a semaphore under
    /// `tag + 1`. Both ranks call this with the same `tag` (keep `tag + 1` free).
    pub fn connect(
        transport: &M,
        bootstrap: &dyn Bootstrap,
        peer: Rank,
        tag: u64,
        local: M::Memory,
    ) -> Result<Self> {
        send_export(bootstrap, peer, tag, &transport.export(&local)?)?;
        let remote = transport.map(recv_export(bootstrap, peer, tag)?)?;
        let semaphore = MemorySemaphore::connect(
            transport,
            bootstrap,
            peer,
            tag.wrapping_add(1),
            local.device(),
        )?;
        MemoryChannel::new(local, remote, semaphore)
    }

    /// Set how waits spin, back off and time out.
    pub fn set_policy(&mut self, policy: WaitPolicy) {
        self.semaphore.set_policy(policy);
    }

    /// Spin bound written into device handles (GPU device code; must be > 0).
    pub fn set_wait_ns(&mut self, wait_ns: u64) {
        self.wait_ns = wait_ns.max(1);
    }

    /// The first error device code reported through the handle's error flag, if any
    /// (the code and what it means).
    pub fn device_error(&self) -> Option<(u32, &'static str)> {
        match self.error_flag.load(Ordering::Acquire) {
            0 => None,
            c => Some((c, error_code::describe(c))),
        }
    }

    /// Our buffer.
    pub fn local(&self) -> &M::Memory {
        &self.local
    }

    /// The peer's buffer as mapped here.
    pub fn remote(&self) -> &M::Mapping {
        &self.remote
    }

    /// The semaphore.
    pub fn semaphore(&self) -> &MemorySemaphore {
        &self.semaphore
    }

    /// The `#[repr(C)]` handle for device code. Valid while `self` lives. `expected`
    /// is a snapshot of the signals consumed so far: after handing a handle to device
    /// code, wait either there or on the host, not both.
    pub fn device_handle(&self) -> MemoryChannelHandle {
        MemoryChannelHandle {
            local_buf: self.local.addr(),
            remote_buf: self.remote.addr(),
            local_semaphore: self.semaphore.slot().counter_addr(),
            remote_semaphore: self.semaphore.remote_counter_addr(),
            expected: self.semaphore.slot().expected(),
            error_flag: &*self.error_flag as *const AtomicU32 as usize as u64,
            wait_ns: self.wait_ns,
        }
    }

    /// The host executor of the device functions (host-emu), sharing this channel's
    /// semaphore state and error flag. Fails for device memory.
    pub fn device(&self) -> Result<MemoryDevice<'_>> {
        let local = HostView::of(&self.local, "local buffer")?;
        let remote = HostView::of(&self.remote, "peer buffer")?;
        Ok(MemoryDevice::from_parts(
            local,
            remote,
            self.semaphore.device()?,
            Some(&self.error_flag),
            self.semaphore.policy(),
        ))
    }

    /// Copy `bytes` from our buffer at `src_off` to the peer's at `dst_off` (one host
    /// thread). Offsets need no alignment; 0 bytes is a no-op.
    pub fn put(&self, dst_off: u64, src_off: u64, bytes: u64) -> Result<()> {
        self.device()?.put(dst_off, src_off, bytes, 0, 1)
    }

    /// Copy `bytes` from the peer's buffer at `src_off` to ours at `dst_off`.
    pub fn get(&self, dst_off: u64, src_off: u64, bytes: u64) -> Result<()> {
        self.device()?.get(dst_off, src_off, bytes, 0, 1)
    }

    /// `put` then `signal`.
    pub fn put_with_signal(&self, dst_off: u64, src_off: u64, bytes: u64) -> Result<()> {
        self.device()?.put_with_signal(dst_off, src_off, bytes)
    }

    /// Signal the peer (release).
    pub fn signal(&self) -> Result<()> {
        self.device()?.signal()
    }

    /// Signal the peer (relaxed).
    pub fn relaxed_signal(&self) -> Result<()> {
        self.device()?.relaxed_signal()
    }

    /// Wait (bounded) for one signal (acquire).
    pub fn wait(&self) -> Result<()> {
        self.device()?.wait()
    }

    /// Wait (bounded) for one signal (relaxed).
    pub fn relaxed_wait(&self) -> Result<()> {
        self.device()?.relaxed_wait()
    }

    /// Consume one signal if one arrived; never blocks.
    pub fn poll(&self) -> Result<bool> {
        Ok(self.device()?.poll())
    }

    /// Nothing to wait for: puts are complete on return (see [`MemoryDevice::flush`]).
    pub fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// See [`MemoryDevice::put_packets`] (one host thread).
    pub fn put_packets(
        &self,
        fmt: LlFormat,
        dst_off: u64,
        src_off: u64,
        bytes: u64,
        flag: u32,
    ) -> Result<()> {
        self.device()?
            .put_packets(fmt, dst_off, src_off, bytes, flag, 0, 1)
    }

    /// See [`MemoryDevice::read_packets`].
    pub fn read_packets(
        &self,
        fmt: LlFormat,
        pkt_off: u64,
        out: &mut [u8],
        flag: u32,
    ) -> Result<()> {
        self.device()?.read_packets(fmt, pkt_off, out, flag)
    }

    /// See [`MemoryDevice::unpack_packets`] (one host thread).
    pub fn unpack_packets(
        &self,
        fmt: LlFormat,
        dst_off: u64,
        pkt_off: u64,
        bytes: u64,
        flag: u32,
    ) -> Result<()> {
        self.device()?
            .unpack_packets(fmt, dst_off, pkt_off, bytes, flag, 0, 1)
    }

    /// Write bytes into our buffer (host memory only).
    pub fn write_local(&self, off: u64, data: &[u8]) -> Result<()> {
        HostView::of(&self.local, "local buffer")?.write(off, data)
    }

    /// Read bytes of our buffer (host memory only).
    pub fn read_local(&self, off: u64, out: &mut [u8]) -> Result<()> {
        HostView::of(&self.local, "local buffer")?.read(off, out)
    }
}
