//! Registered memory every rank maps: a local region plus every peer's, as spans.

use std::sync::Arc;

use commhal_hal::bootstrap::{Bootstrap, recv_export, send_export};
use commhal_hal::dynamic::DynMemoryMapped;
use commhal_hal::{Device, MemoryKind, Region};

use super::CommError;
use crate::exec::raw::Span;

/// One buffer per rank, each mapped by every rank: `spans[r]` is rank r's buffer as
/// addressed in this process. Keeps the local region and the mappings alive.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) local: Arc<dyn Region>,
    _maps: Vec<Box<dyn Region>>,
    pub(crate) spans: Vec<Span>,
}

/// Tags for setup exchanges; every rank draws them in the same order.
pub(crate) const SETUP_TAG_BASE: u64 = 0x00C0_4A11_0000_0000;

impl Shared {
    /// Allocate `len` bytes on every rank and map every peer's (collective: every rank
    /// calls this in the same order with the same `len` and `tag`).
    pub(crate) fn alloc(
        mem: &Arc<dyn DynMemoryMapped>,
        boot: &dyn Bootstrap,
        len: u64,
        tag: u64,
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
        for p in (0..n).filter(|&p| p != me) {
            send_export(boot, p, tag, &mem.export(local.as_ref())?)?;
        }
        let mut maps = Vec::new();
        let mut spans = Vec::with_capacity(n as usize);
        for p in 0..n {
            if p == me {
                spans.push(Span::new(local.addr(), local.len()));
                continue;
            }
            let m = mem.map(recv_export(boot, p, tag)?)?;
            if m.len() < len {
                return Err(CommError::Invalid(format!(
                    "rank {p} shared a {}-byte buffer where {len} bytes were expected: ranks called with different sizes",
                    m.len()
                )));
            }
            spans.push(Span::new(m.addr(), len));
            maps.push(m);
        }
        Ok(Shared {
            local,
            _maps: maps,
            spans,
        })
    }

    /// Capacity in bytes (the same on every rank).
    pub(crate) fn len(&self) -> usize {
        self.spans.first().map(|s| s.len).unwrap_or(0)
    }
}
