//! Port channels between ranks on different (virtual) nodes, over one port backend.
//!
//! Ranks on one node map each other's shared memory and the executor copies straight
//! into it. Ranks on different nodes never map each other's memory: every buffer is
//! registered with one port transport per rank (any [`DynPortMapped`]: `host-tcp` by
//! default, or the first port backend of an explicit backend list that reaches every
//! far peer, e.g. `ib-verbs`), its export is sent to far peers, and the executor turns
//! the plan's port-channel ops into port operations on one [`DynPort`] per far peer:
//!
//! | plan op (port channel, far peer) | here |
//! |---|---|
//! | `Put` | `write` from the local registered buffer into the peer's |
//! | `Signal` | `signal` (+1) on the peer's semaphore word in its sync region |
//! | `Put` then `Signal` to the same peer | one `write_signal` (host-tcp: one socket send) |
//! | `Flush` | nothing: every `write` here already returned with its source reusable |
//! | `PutPackets` | LL8 words encoded locally into registered staging, then one `write_signal`: the words into the peer's packet area, +1 on the peer's packet counter for (this rank, this block) |
//!
//! Both backends used here promise strong signals on one connection (host-tcp: one
//! TCP stream and one receiver thread; ib-verbs: one RC queue pair, the atomic posted
//! fenced), so a signal is applied after every earlier write of this rank to that
//! peer, from any block; a backend without strong signals is not chosen.
//!
//! **Source reuse.** Plans moved onto port channels by `builders::ports_across_nodes`
//! were written for memory channels, whose puts complete before the next op. host-tcp
//! sends a write's bytes before `write` returns; any other backend is flushed after
//! each write (ib-verbs: the CQ is polled until the NIC has read the source).
//!
//! **The plan's `Flush`** promises only that ("`Flush` makes the source of earlier port
//! puts reusable", the plan's execution contract; the simulator lands a put at its
//! signal, never at a flush, so no proven plan takes visibility from a flush), which
//! every write here already gave: it sends nothing. A port flush would cost a round
//! trip on host-tcp, whose flush waits for the peer to acknowledge applying every
//! earlier frame.
//!
//! **Waking waiters.** host-tcp's receiver thread wakes futex sleepers on the word it
//! added to (the signal hook set in `Ports::host_tcp`), so waits behave as with shared
//! memory. Other backends add to the word without any code of this process running
//! (ib-verbs: an RDMA atomic), so nobody wakes a futex sleeper: `Ports::wakes` is
//! false and the communicator's waits block in short sleeps instead of futex waits
//! (`WaitPolicy::futex` off), re-checking the word after each.
//!
//! `Area` is a buffer as one rank reaches it: a mapped span (this rank, ranks of its
//! node), a port range (this rank's registered buffer, far peers' exports), or both.
//! A far peer's area has **no span**: touching its memory directly is an error.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use commhal_backend_host_emu::tcp::SignalHook;
use commhal_backend_host_emu::{HostRegion, HostTcp};
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::dynamic::{DynPort, DynPortMapped};
use commhal_hal::transport::PeerContext;
use commhal_hal::{Endpoint, HalError, Rank, Region};

use super::raw::Span;
use crate::comm::CommError;

/// Name of the default cross-node port backend.
pub(crate) const HOST_TCP: &str = commhal_backend_host_emu::tcp::BACKEND;

/// A registered buffer for port I/O: this rank's own, or a far peer's.
#[derive(Debug, Clone)]
pub(crate) enum PortBuf {
    /// Registered here (a write source), as the port backend's local handle.
    Local(Arc<dyn Region>),
    /// A far peer's export imported by the port backend (a write destination).
    Remote(Arc<dyn Any + Send + Sync>),
}

/// `len` bytes at `off` of a registered buffer.
#[derive(Debug, Clone)]
pub(crate) struct PortRange {
    pub(crate) buf: PortBuf,
    pub(crate) off: u64,
    pub(crate) len: u64,
}

/// A buffer as this rank reaches it (module docs).
#[derive(Debug, Clone)]
pub(crate) struct Area {
    pub(crate) len: usize,
    /// Mapped here (this rank, or a rank of its node).
    pub(crate) span: Option<Span>,
    /// Reachable by port (this rank's registered buffer, or a far peer's).
    pub(crate) port: Option<PortRange>,
}

impl Area {
    pub(crate) const EMPTY: Area = Area {
        len: 0,
        span: Some(Span::EMPTY),
        port: None,
    };

    /// `len` bytes at `off`; `None` when out of range.
    pub(crate) fn sub(&self, off: usize, len: usize) -> Option<Area> {
        if off.checked_add(len)? > self.len {
            return None;
        }
        Some(Area {
            len,
            span: match self.span {
                Some(s) => Some(s.sub(off, len)?),
                None => None,
            },
            port: self.port.as_ref().map(|p| PortRange {
                buf: p.buf.clone(),
                off: p.off + off as u64,
                len: len as u64,
            }),
        })
    }
}

/// What one rank sent over its cross-node port backend (its far peers' ports), for
/// tests and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Port writes (puts and packet puts).
    pub writes: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Signals sent.
    pub signals: u64,
    /// Port flushes completed: those after writes on a backend whose `write` may
    /// return before its source was read (not host-tcp). The plans' `Flush` ops send
    /// none (module docs).
    pub flushes: u64,
}

/// Staging for encoded LL packets: host memory and its registration (dropped first:
/// fields drop in order, and a registration should not outlive its memory).
#[derive(Debug)]
struct Staging {
    local: Arc<dyn Region>,
    mem: HostRegion,
}

/// One rank's ports to its far peers, over one port backend.
#[derive(Debug)]
pub(crate) struct Ports {
    /// Call through [`Ports::transport`]: `Arc<dyn DynPortMapped>` is itself a
    /// `DynPortMapped` (via the reverse `PortMapped` impl) whose handles would be
    /// boxed twice and refused by the backend's ports.
    transport: Arc<dyn DynPortMapped>,
    /// Per rank: true when it is on another node (never mapped here).
    pub(crate) far: Vec<bool>,
    ports: Vec<Option<Mutex<Box<dyn DynPort>>>>,
    /// host-tcp: signals wake futex sleepers.
    tcp: bool,
    /// Every write is flushed before it returns: the backend's `write` may return
    /// before its source was read (it does not claim `write_copies_source`).
    flush_writes: bool,
    /// Registered staging for encoded LL packets (grown on demand).
    staging: Mutex<Option<Staging>>,
    writes: AtomicU64,
    bytes: AtomicU64,
    signals: AtomicU64,
    flushes: AtomicU64,
}

fn port_err(peer: Rank, what: &str, e: HalError) -> CommError {
    tracing::debug!("port {what} to rank {peer} failed: {e}");
    CommError::from(e)
}

impl Ports {
    /// A `host-tcp` transport whose receiver threads wake futex sleepers on the
    /// semaphore words they signal.
    pub(crate) fn host_tcp(
        timeout: std::time::Duration,
    ) -> Result<Arc<dyn DynPortMapped>, CommError> {
        let hook: SignalHook = Arc::new(|w: &AtomicU64| commhal_channels::futex::wake(w));
        Ok(Arc::new(
            HostTcp::new()?.with_timeout(timeout).with_signal_hook(hook),
        ))
    }

    /// Connect to every far peer over `transport` (collective over the bootstrap).
    /// Pairs are connected in one global order (lower rank first), so no two ranks wait
    /// on each other. `transport` must be [`Ports::host_tcp`]'s when it is host-tcp
    /// (the signal hook).
    pub(crate) fn connect(
        transport: Arc<dyn DynPortMapped>,
        boot: &dyn Bootstrap,
        endpoints: &[Endpoint],
        me: Rank,
        tag: u64,
    ) -> Result<Ports, CommError> {
        let n = endpoints.len();
        let here = &endpoints[me as usize];
        let far: Vec<bool> = endpoints.iter().map(|e| !here.same_node(e)).collect();
        let mut ports: Vec<Option<Mutex<Box<dyn DynPort>>>> = (0..n).map(|_| None).collect();
        for a in 0..n as u32 {
            for b in a + 1..n as u32 {
                let peer = if a == me {
                    b
                } else if b == me {
                    a
                } else {
                    continue;
                };
                if !far[peer as usize] {
                    continue;
                }
                let ctx = PeerContext {
                    bootstrap: boot,
                    local: here,
                    remote: &endpoints[peer as usize],
                    tag,
                };
                let port = transport.as_ref().connect(&ctx).inspect_err(|e| {
                    tracing::debug!(
                        "rank {me}: connecting to rank {peer} over `{}` failed: {e}",
                        transport.name()
                    )
                })?;
                ports[peer as usize] = Some(Mutex::new(port));
            }
        }
        let tcp = transport.name() == HOST_TCP;
        let flush_writes = !transport.guarantees().write_copies_source;
        Ok(Ports {
            transport,
            far,
            ports,
            tcp,
            flush_writes,
            staging: Mutex::new(None),
            writes: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            signals: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        })
    }

    /// The port backend's name (`host-tcp`, `ib-verbs`, ...).
    pub(crate) fn name(&self) -> &str {
        self.transport.as_ref().name()
    }

    /// The port backend, as the trait object itself (see the field).
    pub(crate) fn transport(&self) -> &dyn DynPortMapped {
        self.transport.as_ref()
    }

    /// True when this backend's signals wake futex sleepers on the word they add to
    /// (host-tcp); otherwise waits on semaphore words must not rely on a wake.
    pub(crate) fn wakes(&self) -> bool {
        self.tcp
    }

    /// True when `rank` is on another node.
    #[inline]
    pub(crate) fn is_far(&self, rank: Rank) -> bool {
        self.far.get(rank as usize).copied().unwrap_or(false)
    }

    /// Counts so far.
    pub(crate) fn stats(&self) -> PortStats {
        PortStats {
            writes: self.writes.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            signals: self.signals.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
        }
    }

    fn with_port<R>(
        &self,
        peer: Rank,
        f: impl FnOnce(&mut dyn DynPort) -> commhal_hal::Result<R>,
    ) -> Result<R, CommError> {
        let slot = self
            .ports
            .get(peer as usize)
            .and_then(|p| p.as_ref())
            .ok_or_else(|| {
                CommError::Invalid(format!(
                    "no port to rank {peer}: it is on this rank's node (executor bug: port op routed wrongly)"
                ))
            })?;
        let mut port = slot.lock().unwrap_or_else(|p| p.into_inner());
        f(port.as_mut()).map_err(|e| port_err(peer, "operation", e))
    }

    /// Write `src` (this rank's registered range) into `dst` (the peer's), equal
    /// lengths. Returns once `src` may be reused (module docs: source reuse).
    pub(crate) fn write(
        &self,
        peer: Rank,
        dst: &PortRange,
        src: &PortRange,
    ) -> Result<(), CommError> {
        self.write_then(peer, dst, src, None)
    }

    /// [`Ports::write`], then add 1 to the 64-bit word at `sem.1` of the peer's
    /// registered `sem.0` buffer, as one port call (`write_signal`: host-tcp sends the
    /// write and the signal in one socket send).
    pub(crate) fn write_signal(
        &self,
        peer: Rank,
        dst: &PortRange,
        src: &PortRange,
        sem: (&Arc<dyn Any + Send + Sync>, u64),
    ) -> Result<(), CommError> {
        self.write_then(peer, dst, src, Some(sem))
    }

    fn write_then(
        &self,
        peer: Rank,
        dst: &PortRange,
        src: &PortRange,
        sem: Option<(&Arc<dyn Any + Send + Sync>, u64)>,
    ) -> Result<(), CommError> {
        let (PortBuf::Remote(d), PortBuf::Local(s)) = (&dst.buf, &src.buf) else {
            return Err(CommError::Invalid(format!(
                "port write to rank {peer}: the destination must be the peer's buffer and the source this rank's (executor bug)"
            )));
        };
        let len = dst.len.min(src.len);
        if len == 0 {
            return match sem {
                Some((sem, off)) => self.signal(peer, sem, off),
                None => Ok(()),
            };
        }
        let flush = self.flush_writes;
        self.with_port(peer, |p| {
            match sem {
                Some((sem, off)) => p.write_signal(
                    d.as_ref(),
                    dst.off,
                    s.as_ref(),
                    src.off,
                    len,
                    (sem.as_ref(), off, 1),
                )?,
                None => p.write(d.as_ref(), dst.off, s.as_ref(), src.off, len)?,
            }
            if flush {
                p.flush()?;
            }
            Ok(())
        })?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len, Ordering::Relaxed);
        if sem.is_some() {
            self.signals.fetch_add(1, Ordering::Relaxed);
        }
        if flush {
            self.flushes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Add 1 to the 64-bit word at `off` of the peer's registered `sem` buffer.
    pub(crate) fn signal(
        &self,
        peer: Rank,
        sem: &Arc<dyn Any + Send + Sync>,
        off: u64,
    ) -> Result<(), CommError> {
        self.with_port(peer, |p| p.signal(sem.as_ref(), off, 1))?;
        self.signals.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Write `bytes` (already encoded) into `dst` through the registered staging buffer,
    /// then, with `sem`, signal as [`Ports::write_signal`] does.
    pub(crate) fn write_bytes(
        &self,
        peer: Rank,
        dst: &PortRange,
        bytes: &[u8],
        sem: Option<(&Arc<dyn Any + Send + Sync>, u64)>,
    ) -> Result<(), CommError> {
        // Held until the write returns, when the staging may be reused (`write`).
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        if staging
            .as_ref()
            .is_none_or(|s| s.mem.len() < bytes.len() as u64)
        {
            let cap = (bytes.len() as u64).max(4096).next_power_of_two();
            let mem = HostRegion::alloc(cap)?;
            let local = Arc::<dyn Region>::from(self.transport().register(&mem)?);
            *staging = Some(Staging { local, mem });
        }
        let s = staging.as_ref().ok_or_else(|| {
            CommError::Invalid("packet staging buffer missing (internal error)".into())
        })?;
        s.mem.write(0, bytes)?;
        let src = PortRange {
            buf: PortBuf::Local(s.local.clone()),
            off: 0,
            len: bytes.len() as u64,
        };
        self.write_then(peer, dst, &src, sem)
    }
}
