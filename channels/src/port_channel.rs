//! [`PortChannel`]: put/signal/flush performed by the host proxy through a port;
//! device code (or the host) only pushes 16-byte triggers into the proxy FIFO.
//!
//! Contract: triggers of one producer are performed in push order on the semaphore's
//! port; what a signal orders and what a flush means are the port's
//! [`commhal_hal::Guarantees`]. `flush` returns once the proxy has flushed the port (it
//! pushes a flush trigger and waits for its ticket to complete). Waits consume signals
//! the peer's proxy adds to our [`SemaphoreSlot`].

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use commhal_hal::bootstrap::{recv_export, send_export};
use commhal_hal::transport::PeerContext;
use commhal_hal::{HalError, PortMapped, Region, Result};

use crate::device::{PortDevice, PortIds};
use crate::fifo::Trigger;
use crate::handles::{DEFAULT_WAIT_NS, PortChannelHandle, error_code};
use crate::proxy::{MemoryId, ProxyBuilder, ProxyShared, SemaphoreId};
use crate::semaphore::SemaphoreSlot;
use crate::wait::WaitPolicy;

/// A port channel to one peer.
#[derive(Debug)]
pub struct PortChannel<P: PortMapped> {
    proxy: Arc<ProxyShared>,
    semaphore_id: SemaphoreId,
    dst: MemoryId,
    src: MemoryId,
    dst_len: u64,
    src_len: u64,
    slot: SemaphoreSlot,
    policy: WaitPolicy,
    /// Device error flag (boxed: its address is in handles and must not move).
    error_flag: Box<AtomicU32>,
    wait_ns: u64,
    _p: PhantomData<fn() -> P>,
}

impl<P: PortMapped> PortChannel<P> {
    /// A channel on `proxy` (from [`ProxyBuilder::shared`] or
    /// [`crate::ProxyService::shared`]): triggers carry `semaphore_id` (port + peer
    /// semaphore), destination remote memory `dst` and source local memory `src`;
    /// waits use our `inbound` slot, which the peer signals.
    pub fn new(
        proxy: &Arc<ProxyShared>,
        semaphore_id: SemaphoreId,
        dst: MemoryId,
        src: MemoryId,
        inbound: SemaphoreSlot,
    ) -> Result<Self> {
        proxy.check_semaphore(semaphore_id)?;
        let dst_len = proxy.remote_len(dst)?;
        let src_len = proxy.local_len(src)?;
        Ok(PortChannel {
            proxy: Arc::clone(proxy),
            semaphore_id,
            dst,
            src,
            dst_len,
            src_len,
            policy: WaitPolicy::default(),
            slot: inbound,
            error_flag: Box::new(AtomicU32::new(0)),
            wait_ns: DEFAULT_WAIT_NS,
            _p: PhantomData,
        })
    }

    /// Set up a channel with one peer on `builder` in one call (both ranks call it with
    /// mirrored contexts): connect a port, register `local` (put source) and the region
    /// of `inbound`, exchange exports under `ctx.tag + 1` (data) and `ctx.tag + 2`
    /// (semaphore; the message also carries the slot offset), import the peer's.
    /// Keep `ctx.tag .. ctx.tag + 3` for this channel.
    pub fn connect(
        builder: &mut ProxyBuilder<P>,
        transport: &P,
        ctx: &PeerContext<'_>,
        local: &dyn Region,
        inbound: SemaphoreSlot,
    ) -> Result<Self> {
        let b = ctx.bootstrap;
        let peer = ctx.remote.rank;
        let port = transport.connect(ctx)?;
        let port_id = builder.add_port(port);
        let local_reg = transport.register(local)?;
        let data_export = transport.export(&local_reg)?;
        let src = builder.add_local(local_reg)?;
        let sem_reg = transport.register(inbound.region().as_ref())?;
        let sem_export = transport.export(&sem_reg)?;
        // Keep the semaphore registration alive with the proxy.
        builder.add_local(sem_reg)?;

        let (t_data, t_sem, t_off) = (
            ctx.tag.wrapping_add(1),
            ctx.tag.wrapping_add(2),
            ctx.tag.wrapping_add(3),
        );
        send_export(b, peer, t_data, &data_export)?;
        send_export(b, peer, t_sem, &sem_export)?;
        b.send(peer, t_off, &inbound.offset().to_le_bytes())?;
        let peer_data = recv_export(b, peer, t_data)?;
        let peer_data_len = peer_data.len;
        let peer_sem = recv_export(b, peer, t_sem)?;
        let peer_sem_len = peer_sem.len;
        let off = b.recv(peer, t_off)?;
        let off = u64::from_le_bytes(off.as_slice().try_into().map_err(|_| {
            HalError::Bootstrap(format!("rank {peer} sent a malformed semaphore offset"))
        })?);
        let dst = builder.add_remote(transport.import(peer_data)?, peer_data_len)?;
        let sem_mem = builder.add_remote(transport.import(peer_sem)?, peer_sem_len)?;
        let sem = builder.add_semaphore(port_id, sem_mem, off)?;
        PortChannel::new(builder.shared(), sem, dst, src, inbound)
    }

    /// Set how waits, full-FIFO back-pressure and flushes spin and time out.
    pub fn set_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
        self.slot.set_policy(policy);
    }

    /// Spin bound written into device handles (GPU device code; must be > 0).
    pub fn set_wait_ns(&mut self, wait_ns: u64) {
        self.wait_ns = wait_ns.max(1);
    }

    /// The first error device code reported through the handle's error flag, if any.
    pub fn device_error(&self) -> Option<(u32, &'static str)> {
        match self.error_flag.load(Ordering::Acquire) {
            0 => None,
            c => Some((c, error_code::describe(c))),
        }
    }

    /// The `#[repr(C)]` handle for device code. Valid while `self` and the proxy live.
    /// `expected` is a snapshot of the signals consumed so far (wait on one side only).
    pub fn device_handle(&self) -> PortChannelHandle {
        let fifo = self.proxy.fifo();
        PortChannelHandle {
            fifo: fifo.ring_addr(),
            fifo_depth: fifo.depth(),
            head: fifo.head_addr(),
            tail: fifo.tail_addr(),
            semaphore_id: self.semaphore_id,
            local_memory_id: self.src,
            remote_memory_id: self.dst,
            reserved: 0,
            local_semaphore: self.slot.counter_addr(),
            expected: self.slot.expected(),
            error_flag: &*self.error_flag as *const AtomicU32 as usize as u64,
            wait_ns: self.wait_ns,
        }
    }

    /// The host executor of the device functions, sharing this channel's semaphore
    /// state and error flag. Fails if the semaphore counter is device memory.
    pub fn device(&self) -> Result<PortDevice<'_>> {
        Ok(PortDevice::from_parts(
            self.proxy.fifo().ring(),
            self.slot.device()?,
            PortIds {
                semaphore: self.semaphore_id,
                dst: self.dst,
                src: self.src,
                dst_len: self.dst_len,
                src_len: self.src_len,
            },
            Some(&self.error_flag),
            self.policy,
        ))
    }

    fn run<T>(&self, f: impl FnOnce(&PortDevice<'_>) -> Result<T>) -> Result<T> {
        let d = self.device()?;
        f(&d).map_err(|e| self.proxy.explain(e))
    }

    /// Push a put (`bytes` from local `src_off` to the peer's `dst_off`).
    pub fn put(&self, dst_off: u64, src_off: u64, bytes: u64) -> Result<()> {
        self.run(|d| d.put(dst_off, src_off, bytes))
    }

    /// Push a signal.
    pub fn signal(&self) -> Result<()> {
        self.run(|d| d.signal())
    }

    /// Push a put fused with a signal.
    pub fn put_with_signal(&self, dst_off: u64, src_off: u64, bytes: u64) -> Result<()> {
        self.run(|d| d.put_with_signal(dst_off, src_off, bytes))
    }

    /// Push a put fused with a signal and a flush, and wait for the flush.
    pub fn put_with_signal_and_flush(&self, dst_off: u64, src_off: u64, bytes: u64) -> Result<()> {
        self.run(|d| d.put_with_signal_and_flush(dst_off, src_off, bytes))
    }

    /// Push a flush and wait (bounded) until the proxy has flushed the port.
    pub fn flush(&self) -> Result<()> {
        self.run(|d| d.flush())
    }

    /// Push a raw trigger (custom handlers); returns its ticket.
    pub fn push(&self, t: &Trigger) -> Result<u64> {
        self.run(|d| d.push(t))
    }

    /// Wait (bounded) for one signal from the peer.
    pub fn wait(&self) -> Result<()> {
        self.run(|d| d.wait())
    }

    /// Wait (bounded, relaxed) for one signal from the peer.
    pub fn relaxed_wait(&self) -> Result<()> {
        self.run(|d| d.relaxed_wait())
    }

    /// Consume one signal if one arrived; never blocks.
    pub fn poll(&self) -> Result<bool> {
        self.run(|d| Ok(d.poll()))
    }

    /// The first error of the proxy, if any.
    pub fn proxy_error(&self) -> Option<HalError> {
        self.proxy.error()
    }
}
