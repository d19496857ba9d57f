//! Building channels for cases, and [`P2p`]: one interface over a memory channel and a
//! port channel (with its proxy), so point-to-point cases are written once.

use std::sync::Arc;
use std::time::Duration;

use commhal_channels::proxy::ProxyBuilder;
use commhal_channels::semaphore::{MemorySemaphore, SemaphoreSlot};
use commhal_channels::{MemoryChannel, PortChannel, ProxyService, WaitPolicy};
use commhal_hal::bootstrap::{recv_export, send_export};
use commhal_hal::dynamic::{self, DynMemoryMapped};
use commhal_hal::transport::{PeerContext, PortMapped};
use commhal_hal::{MemoryMapped, Rank, Region, Result};

use crate::case::{ChannelKind, Failure};
use crate::hostmem;
use crate::world::Ctx;

/// The memory transport type the suite drives.
pub type Mem = Arc<dyn DynMemoryMapped>;

/// Point-to-point operations of one channel to one peer, as a case sees them.
/// `local()` is this rank's buffer: put source and where the peer's puts land.
pub trait P2p: Send + Sync {
    /// Copy `n` bytes from our `src` to the peer's `dst`.
    fn put(&self, dst: u64, src: u64, n: u64) -> Result<()>;
    /// Signal the peer.
    fn signal(&self) -> Result<()>;
    /// Relaxed signal (port channels have none: a plain signal, which is stronger).
    fn relaxed_signal(&self) -> Result<()>;
    /// Fused put + signal.
    fn put_with_signal(&self, dst: u64, src: u64, n: u64) -> Result<()>;
    /// Fused put + signal + flush (memory: put_with_signal then flush).
    fn put_with_signal_and_flush(&self, dst: u64, src: u64, n: u64) -> Result<()>;
    /// Flush.
    fn flush(&self) -> Result<()>;
    /// Wait for one signal (acquire).
    fn wait(&self) -> Result<()>;
    /// Wait for one signal (relaxed).
    fn relaxed_wait(&self) -> Result<()>;
    /// Consume a signal if one arrived.
    fn poll(&self) -> Result<bool>;
    /// One-sided get (memory channels only; port reads are case 23, on the raw port).
    fn get(&self, dst: u64, src: u64, n: u64) -> Result<()>;
    /// Our buffer.
    fn local(&self) -> &dyn Region;
    /// Change the wait bound.
    fn set_wait_timeout(&mut self, d: Duration);
}

/// A memory channel as [`P2p`].
#[derive(Debug)]
pub struct MemP2p(pub MemoryChannel<Mem>);

impl P2p for MemP2p {
    fn put(&self, dst: u64, src: u64, n: u64) -> Result<()> {
        self.0.put(dst, src, n)
    }
    fn signal(&self) -> Result<()> {
        self.0.signal()
    }
    fn relaxed_signal(&self) -> Result<()> {
        self.0.relaxed_signal()
    }
    fn put_with_signal(&self, dst: u64, src: u64, n: u64) -> Result<()> {
        self.0.put_with_signal(dst, src, n)
    }
    fn put_with_signal_and_flush(&self, dst: u64, src: u64, n: u64) -> Result<()> {
        self.0.put_with_signal(dst, src, n)?;
        self.0.flush()
    }
    fn flush(&self) -> Result<()> {
        self.0.flush()
    }
    fn wait(&self) -> Result<()> {
        self.0.wait()
    }
    fn relaxed_wait(&self) -> Result<()> {
        self.0.relaxed_wait()
    }
    fn poll(&self) -> Result<bool> {
        self.0.poll()
    }
    fn get(&self, dst: u64, src: u64, n: u64) -> Result<()> {
        self.0.get(dst, src, n)
    }
    fn local(&self) -> &dyn Region {
        &**self.0.local()
    }
    fn set_wait_timeout(&mut self, d: Duration) {
        self.0.set_policy(WaitPolicy::with_timeout(d));
    }
}

/// A port channel (and the proxy it runs on) as [`P2p`].
#[derive(Debug)]
pub struct PortP2p {
    /// The channel (declared first: dropped before the proxy).
    pub ch: PortChannel<Arc<dyn dynamic::DynPortMapped>>,
    /// Our buffer (put source, landing area of the peer's puts).
    pub local: Box<dyn Region>,
    /// The proxy (shared by channels on one connection).
    pub proxy: Arc<ProxyService<Arc<dyn dynamic::DynPortMapped>>>,
}

impl P2p for PortP2p {
    fn put(&self, dst: u64, src: u64, n: u64) -> Result<()> {
        self.ch.put(dst, src, n)
    }
    fn signal(&self) -> Result<()> {
        self.ch.signal()
    }
    fn relaxed_signal(&self) -> Result<()> {
        self.ch.signal()
    }
    fn put_with_signal(&self, dst: u64, src: u64, n: u64) -> Result<()> {
        self.ch.put_with_signal(dst, src, n)
    }
    fn put_with_signal_and_flush(&self, dst: u64, src: u64, n: u64) -> Result<()> {
        self.ch.put_with_signal_and_flush(dst, src, n)
    }
    fn flush(&self) -> Result<()> {
        self.ch.flush()
    }
    fn wait(&self) -> Result<()> {
        self.ch.wait()
    }
    fn relaxed_wait(&self) -> Result<()> {
        self.ch.relaxed_wait()
    }
    fn poll(&self) -> Result<bool> {
        self.ch.poll()
    }
    fn get(&self, _dst: u64, _src: u64, _n: u64) -> Result<()> {
        Err(commhal_hal::HalError::invalid(
            "port channels have no get trigger: read through the raw port (Port::read, case 23)",
        ))
    }
    fn local(&self) -> &dyn Region {
        &*self.local
    }
    fn set_wait_timeout(&mut self, d: Duration) {
        self.ch.set_policy(WaitPolicy::with_timeout(d));
    }
}

/// How to open a channel.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// Bytes of each side's buffer.
    pub len: u64,
    /// Starting value of our inbound semaphore counter (wrap tests).
    pub start: u64,
    /// Proxy FIFO depth (port channels).
    pub depth: u64,
}

impl Opts {
    /// `len` bytes, counter at 0, FIFO depth 512.
    pub fn len(len: u64) -> Opts {
        Opts {
            len,
            start: 0,
            depth: 512,
        }
    }
}

/// Allocate `len` bytes on this rank's device for a port or switch case (the backend's
/// memory transport, or its companion for port-only backends).
pub fn alloc(ctx: &Ctx, len: u64) -> std::result::Result<Box<dyn Region>, Failure> {
    Ok(MemoryMapped::alloc(&ctx.allocator()?, ctx.device, len)?)
}

/// Open a channel of `kind` with `peer` under case tag `k` (uses `k..k+8`).
pub fn open(
    ctx: &Ctx,
    kind: ChannelKind,
    peer: Rank,
    k: u64,
    o: Opts,
) -> std::result::Result<Box<dyn P2p>, Failure> {
    match kind {
        ChannelKind::Memory => Ok(Box::new(open_memory(ctx, peer, k, o)?)),
        ChannelKind::Port => Ok(open_port(ctx, peer, k, o, 1)?
            .into_iter()
            .next()
            .map(|p| Box::new(p) as Box<dyn P2p>)
            .ok_or_else(|| Failure::Fail("no channel".into()))?),
        _ => Err(Failure::NotSupported(
            "point-to-point case on a switch channel".into(),
        )),
    }
}

/// A memory channel with `peer` (case tags `k..k+3`): `MemoryChannel::connect` when the
/// counter starts at 0, else a semaphore whose counter was preset (exchanged under `k+1`).
pub fn open_memory(ctx: &Ctx, peer: Rank, k: u64, o: Opts) -> std::result::Result<MemP2p, Failure> {
    let t = ctx.memory()?;
    let local = MemoryMapped::alloc(&t, ctx.device, o.len)?;
    let mut ch = if o.start == 0 {
        MemoryChannel::connect(&t, ctx.boot.as_ref(), peer, ctx.t(k), local)?
    } else {
        let b = ctx.boot.as_ref();
        send_export(b, peer, ctx.t(k), &MemoryMapped::export(&t, &local)?)?;
        let remote = MemoryMapped::map(&t, recv_export(b, peer, ctx.t(k))?)?;
        let counter = MemoryMapped::alloc(&t, ctx.device, 8)?;
        hostmem::write(&*counter, 0, &o.start.to_le_bytes())?;
        send_export(b, peer, ctx.t(k + 1), &MemoryMapped::export(&t, &counter)?)?;
        let peer_counter = MemoryMapped::map(&t, recv_export(b, peer, ctx.t(k + 1))?)?;
        // The counter starts at `o.start`, so nothing has been consumed below it.
        let slot = SemaphoreSlot::with_expected(Arc::from(counter), 0, o.start)?;
        let sem = MemorySemaphore::from_slot(slot, Arc::from(peer_counter), 0)?;
        MemoryChannel::new(local, remote, sem)?
    };
    ch.set_policy(ctx.policy());
    // Both sides finish setup before either uses the channel, so a case's first timed
    // operation never includes the peer's setup.
    ctx.send(peer, k + 2, b"ready")?;
    ctx.recv(peer, k + 2)?;
    Ok(MemP2p(ch))
}

/// `count` port channels with `peer` sharing one connection (one port) and one proxy,
/// each with its own buffer and semaphore. Uses case tags `k..k+4+4*count`.
pub fn open_port(
    ctx: &Ctx,
    peer: Rank,
    k: u64,
    o: Opts,
    count: usize,
) -> std::result::Result<Vec<PortP2p>, Failure> {
    let t = ctx.port()?;
    let b = ctx.boot.as_ref();
    let mut builder =
        ProxyBuilder::<Arc<dyn dynamic::DynPortMapped>>::new(&ctx.backend.name, o.depth)?;
    let local_ep = &ctx.endpoints[ctx.rank as usize];
    let remote_ep = &ctx.endpoints[peer as usize];
    let pctx = PeerContext {
        bootstrap: b,
        local: local_ep,
        remote: remote_ep,
        tag: ctx.t(k),
    };
    let mut parts = Vec::new();
    let mut port_id = None;
    for i in 0..count as u64 {
        let local = alloc(ctx, o.len)?;
        let sem_region: Arc<dyn Region> = Arc::from(alloc(ctx, 64)?);
        hostmem::write(&*sem_region, 0, &o.start.to_le_bytes())?;
        let inbound = SemaphoreSlot::with_expected(sem_region.clone(), 0, o.start)?;
        let tk = k + 4 + 4 * i;
        if port_id.is_none() {
            // The first channel sets up the connection the others share.
            let ch = PortChannel::connect(
                &mut builder,
                &t,
                &PeerContext {
                    tag: ctx.t(tk),
                    ..pctx
                },
                &*local,
                inbound,
            )?;
            port_id = Some(0);
            parts.push((ch, local));
            continue;
        }
        let reg = t.register(&*local)?;
        let data_export = PortMapped::export(&t, &reg)?;
        let src = builder.add_local(reg)?;
        let sem_reg = t.register(&*sem_region)?;
        let sem_export = PortMapped::export(&t, &sem_reg)?;
        builder.add_local(sem_reg)?;
        send_export(b, peer, ctx.t(tk), &data_export)?;
        send_export(b, peer, ctx.t(tk + 1), &sem_export)?;
        let peer_data = recv_export(b, peer, ctx.t(tk))?;
        let dlen = peer_data.len;
        let dst = builder.add_remote(t.import(peer_data)?, dlen)?;
        let peer_sem = recv_export(b, peer, ctx.t(tk + 1))?;
        let slen = peer_sem.len;
        let sem_mem = builder.add_remote(t.import(peer_sem)?, slen)?;
        let sem = builder.add_semaphore(port_id.unwrap_or(0), sem_mem, 0)?;
        let ch = PortChannel::new(builder.shared(), sem, dst, src, inbound)?;
        parts.push((ch, local));
    }
    let proxy = Arc::new(builder.start()?);
    Ok(parts
        .into_iter()
        .map(|(mut ch, local)| {
            ch.set_policy(ctx.policy());
            PortP2p {
                ch,
                local,
                proxy: proxy.clone(),
            }
        })
        .collect())
}

/// Check `got` is all `v`, scanning from the end (the last byte is the likeliest to be
/// late); the message names the first bad byte found.
pub fn check_fill(got: &[u8], v: u8, what: &str) -> std::result::Result<(), Failure> {
    if let Some(i) = got.iter().rposition(|&b| b != v) {
        return Err(Failure::Fail(format!(
            "{what}: byte {i} of {} is {:#04x}, expected {v:#04x}",
            got.len(),
            got[i]
        )));
    }
    Ok(())
}

/// Read `n` bytes of `region` at `off`.
pub fn read_vec(region: &dyn Region, off: u64, n: u64) -> std::result::Result<Vec<u8>, Failure> {
    let mut v = vec![0u8; n as usize];
    hostmem::read(region, off, &mut v)?;
    Ok(v)
}

/// Round `x` up to a multiple of 64.
pub fn up64(x: u64) -> u64 {
    x.div_ceil(64) * 64
}
