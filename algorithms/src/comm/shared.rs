//! Registered memory every rank reaches: a local region plus every peer's, as areas.
//!
//! Peers on this rank's node are **mapped** (host-emu export/map through the bootstrap).
//! Peers on other nodes are **not mapped**: when the communicator has ports
//! ([`Ports`]), the local region is also registered with the cross-node port backend
//! (host-tcp: a region id; ib-verbs: a memory region, address + rkey) and far peers
//! exchange that backend's exports instead, so they can only be written by port.

use std::any::Any;
use std::sync::Arc;

use commhal_hal::bootstrap::{Bootstrap, recv_export, send_export};
use commhal_hal::dynamic::DynMemoryMapped;
use commhal_hal::{Device, MemoryKind, Region};

use super::CommError;
use crate::exec::port::{Area, PortBuf, PortRange, Ports};
use crate::exec::raw::Span;

/// One buffer per rank: `spans[r]` is rank r's buffer as mapped in this process
/// ([`Span::EMPTY`] for ranks on other nodes, which are reached through `remotes`).
/// Keeps the local region, its registration and the mappings alive.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) local: Arc<dyn Region>,
    _maps: Vec<Box<dyn Region>>,
    pub(crate) spans: Vec<Span>,
    len: usize,
    me: usize,
    /// The local region registered with the port backend (when there are far peers).
    port_local: Option<Arc<dyn Region>>,
    /// Far peers' regions as port targets.
    remotes: Vec<Option<Arc<dyn Any + Send + Sync>>>,
}

/// Tags for setup exchanges; every rank draws them in the same order.
pub(crate) const SETUP_TAG_BASE: u64 = 0x00C0_4A11_0000_0000;

impl Shared {
    /// Allocate `len` bytes on every rank, map every near peer's and import every far
    /// peer's port export (collective: every rank calls this in the same order
    /// with the same `len` and `tag`).
    pub(crate) fn alloc(
        mem: &Arc<dyn DynMemoryMapped>,
        boot: &dyn Bootstrap,
        len: u64,
        tag: u64,
        ports: Option<&Ports>,
    ) -> Result<Shared, CommError> {
        // Call through the trait object itself: `Arc<dyn DynMemoryMapped>` is also a
        // `DynMemoryMapped` (via the reverse impl) whose handles would be double-boxed.
        let mem: &dyn DynMemoryMapped = mem.as_ref();
        let local: Arc<dyn Region> = Arc::from(mem.alloc(Device::HOST, len)?);
        if !matches!(
            local.kind(),
            MemoryKind::HostShared | MemoryKind::HostPinned
        ) {
            return Err(CommError::Invalid(format!(
                "backend `{}` gives {:?} memory, which the host executor cannot address; use host-emu (COMMHAL_BACKENDS=host-emu) or a GPU executor",
                mem.name(),
                local.kind()
            )));
        }
        let (me, n) = (boot.rank(), boot.size());
        let far = |p: u32| ports.is_some_and(|x| x.is_far(p));
        let port_local: Option<Arc<dyn Region>> = match ports {
            Some(x) if (0..n).any(far) => Some(Arc::<dyn Region>::from(
                x.transport().register(local.as_ref())?,
            )),
            _ => None,
        };
        for p in (0..n).filter(|&p| p != me) {
            let export = match (&port_local, ports) {
                (Some(l), Some(x)) if far(p) => x.transport().export(l.as_ref())?,
                _ => mem.export(local.as_ref())?,
            };
            send_export(boot, p, tag, &export)?;
        }
        let mut maps = Vec::new();
        let mut spans = Vec::with_capacity(n as usize);
        let mut remotes = vec![None; n as usize];
        for p in 0..n {
            if p == me {
                spans.push(Span::new(local.addr(), local.len()));
                continue;
            }
            let export = recv_export(boot, p, tag)?;
            let short = |got: u64| {
                CommError::Invalid(format!(
                    "rank {p} shared a {got}-byte buffer where {len} bytes were expected: ranks called with different sizes"
                ))
            };
            if let (true, Some(x)) = (far(p), ports) {
                // Never mapped: a far peer is reached by port only.
                if export.len < len {
                    return Err(short(export.len));
                }
                let r = x.transport().import(export)?;
                remotes[p as usize] = Some(Arc::<dyn Any + Send + Sync>::from(r));
                spans.push(Span::EMPTY);
                continue;
            }
            let m = mem.map(export)?;
            if m.len() < len {
                return Err(short(m.len()));
            }
            spans.push(Span::new(m.addr(), len));
            maps.push(m);
        }
        Ok(Shared {
            local,
            _maps: maps,
            spans,
            len: len as usize,
            me: me as usize,
            port_local,
            remotes,
        })
    }

    /// Capacity in bytes (the same on every rank).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Rank `q`'s buffer as reached from here: mapped (this rank, near peers), by port
    /// (far peers), or both (this rank, when it has far peers).
    pub(crate) fn area(&self, q: usize) -> Area {
        let port = |buf: PortBuf| PortRange {
            buf,
            off: 0,
            len: self.len as u64,
        };
        if let Some(Some(r)) = self.remotes.get(q) {
            return Area {
                len: self.len,
                span: None,
                port: Some(port(PortBuf::Remote(r.clone()))),
            };
        }
        let span = self.spans.get(q).copied().unwrap_or(Span::EMPTY);
        let span = span.sub(0, self.len.min(span.len)).unwrap_or(Span::EMPTY);
        Area {
            len: span.len,
            span: Some(span),
            port: if q == self.me {
                self.port_local.clone().map(|l| port(PortBuf::Local(l)))
            } else {
                None
            },
        }
    }

    /// Every rank's area.
    pub(crate) fn areas(&self) -> Vec<Area> {
        (0..self.spans.len()).map(|q| self.area(q)).collect()
    }
}
