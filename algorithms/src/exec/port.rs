//! Port channels between ranks on different (virtual) nodes, over `host-tcp`.
//!
//! Ranks on one node map each other's shared memory and the executor copies straight
//! into it. Ranks on different nodes never map each other's memory: every buffer is
//! registered with one [`HostTcp`] per rank, its export (region id, no descriptors) is
//! sent to far peers, and the executor turns the plan's port-channel ops into port
//! operations on one [`TcpPort`] per far peer:
//!
//! | plan op (port channel, far peer) | here |
//! |---|---|
//! | `Put` | `write` from the local registered buffer into the peer's |
//! | `Signal` | `signal` (+1) on the peer's semaphore word in its sync region |
//! | `Flush` | `flush`: returns when the peer applied every earlier frame |
//! | `PutPackets` | LL8 words encoded locally, `write` into the peer's packet area, then a `signal` on the peer's packet counter for (this rank, this block) |
//!
//! The port is strongly ordered (one TCP stream, one receiver thread), so a signal is
//! applied after every earlier write of this rank to that peer, from any block. The
//! receiver thread wakes futex sleepers on the word it added to (the signal hook set in
//! `Ports::transport`), so waits behave as with shared memory.
//!
//! `Area` is a buffer as one rank reaches it: a mapped span (this rank, ranks of its
//! node), a port range (this rank's registered buffer, far peers' exports), or both.
//! A far peer's area has **no span**: touching its memory directly is an error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use commhal_backend_host_emu::tcp::SignalHook;
use commhal_backend_host_emu::{HostRegion, HostTcp, TcpLocal, TcpPort, TcpRemote};
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::transport::{PeerContext, Port, PortMapped};
use commhal_hal::{Endpoint, HalError, Rank};

use super::raw::Span;
use crate::comm::CommError;

/// A registered buffer for port I/O: this rank's own, or a far peer's.
#[derive(Debug, Clone)]
pub(crate) enum PortBuf {
    /// Registered here (a write source).
    Local(TcpLocal),
    /// A far peer's export (a write destination).
    Remote(TcpRemote),
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

/// What one rank sent over TCP (its far peers' ports), for tests and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Port writes (puts and packet puts).
    pub writes: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Signals sent.
    pub signals: u64,
    /// Flushes completed.
    pub flushes: u64,
}

/// One rank's TCP ports to its far peers.
#[derive(Debug)]
pub(crate) struct Ports {
    pub(crate) tcp: HostTcp,
    /// Per rank: true when it is on another node (never mapped here).
    pub(crate) far: Vec<bool>,
    ports: Vec<Option<Mutex<TcpPort>>>,
    /// Registered staging for encoded LL packets (grown on demand).
    staging: Mutex<Option<TcpLocal>>,
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
    pub(crate) fn transport(timeout: std::time::Duration) -> Result<HostTcp, CommError> {
        let hook: SignalHook = Arc::new(|w: &AtomicU64| commhal_channels::futex::wake(w));
        Ok(HostTcp::new()?.with_timeout(timeout).with_signal_hook(hook))
    }

    /// Connect to every far peer (collective over the bootstrap). Pairs are connected
    /// in one global order (lower rank first), so no two ranks wait on each other.
    pub(crate) fn connect(
        tcp: HostTcp,
        boot: &dyn Bootstrap,
        endpoints: &[Endpoint],
        me: Rank,
        tag: u64,
    ) -> Result<Ports, CommError> {
        let n = endpoints.len();
        let here = &endpoints[me as usize];
        let far: Vec<bool> = endpoints.iter().map(|e| !here.same_node(e)).collect();
        let mut ports: Vec<Option<Mutex<TcpPort>>> = (0..n).map(|_| None).collect();
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
                let port = PortMapped::connect(&tcp, &ctx)?;
                ports[peer as usize] = Some(Mutex::new(port));
            }
        }
        Ok(Ports {
            tcp,
            far,
            ports,
            staging: Mutex::new(None),
            writes: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            signals: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        })
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
        f: impl FnOnce(&mut TcpPort) -> commhal_hal::Result<R>,
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
        f(&mut port).map_err(|e| port_err(peer, "operation", e))
    }

    /// Write `src` (this rank's registered range) into `dst` (the peer's), equal lengths.
    pub(crate) fn write(
        &self,
        peer: Rank,
        dst: &PortRange,
        src: &PortRange,
    ) -> Result<(), CommError> {
        let (PortBuf::Remote(d), PortBuf::Local(s)) = (&dst.buf, &src.buf) else {
            return Err(CommError::Invalid(format!(
                "port write to rank {peer}: the destination must be the peer's buffer and the source this rank's (executor bug)"
            )));
        };
        let len = dst.len.min(src.len);
        if len == 0 {
            return Ok(());
        }
        self.with_port(peer, |p| p.write(d, dst.off, s, src.off, len))?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Add 1 to the 64-bit word at `off` of the peer's registered `sem` buffer.
    pub(crate) fn signal(&self, peer: Rank, sem: &TcpRemote, off: u64) -> Result<(), CommError> {
        self.with_port(peer, |p| p.signal(sem, off, 1))?;
        self.signals.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Wait until the peer applied everything sent to it before.
    pub(crate) fn flush(&self, peer: Rank) -> Result<(), CommError> {
        self.with_port(peer, |p| p.flush())?;
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Write `bytes` (already encoded) into `dst` through the registered staging buffer.
    pub(crate) fn write_bytes(
        &self,
        peer: Rank,
        dst: &PortRange,
        bytes: &[u8],
    ) -> Result<(), CommError> {
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        if staging
            .as_ref()
            .is_none_or(|s| commhal_hal::Region::len(s) < bytes.len() as u64)
        {
            let cap = (bytes.len() as u64).max(4096).next_power_of_two();
            let region = HostRegion::alloc(cap)?;
            *staging = Some(PortMapped::register(&self.tcp, &region)?);
        }
        let local = staging.as_ref().ok_or_else(|| {
            CommError::Invalid("packet staging buffer missing (internal error)".into())
        })?;
        local.write(0, bytes)?;
        let src = PortRange {
            buf: PortBuf::Local(local.clone()),
            off: 0,
            len: bytes.len() as u64,
        };
        self.write(peer, dst, &src)
    }
}
