//! [`IbLocal`] (a registered host buffer), [`IbRemote`] (a peer's buffer: address,
//! length, rkey) and the export format.
//!
//! **Export bytes** (`Export::bytes`, no descriptors, so it crosses hosts):
//! `b"IBV1"`, address (u64 LE), rkey (u32 LE); the length is `Export::len`.

use std::any::Any;
use std::sync::Arc;

use commhal_hal::{Device, Export, HalError, MemoryKind, Region, Registrable, Result};

use crate::BACKEND;
use crate::sys::Mr;

const MAGIC: &[u8; 4] = b"IBV1";
const EXPORT_LEN: usize = 16;

/// A buffer registered with the NIC: host memory with `ibv_reg_mr`, device memory (or
/// any dma-buf) with `ibv_reg_dmabuf_mr`. Holds the memory's owner, so the
/// registration never outlives the memory.
///
/// `addr()` is the address work requests use: the host address for host memory, the
/// MR's IOVA (the device address for GPU memory) for a dma-buf registration.
#[derive(Debug, Clone)]
pub struct IbLocal {
    pub(crate) mr: Arc<Mr>,
    addr: u64,
    len: u64,
    kind: MemoryKind,
    device: Device,
    /// Registered from a dma-buf: `addr` is an IOVA, not a host address.
    dmabuf: bool,
    _owner: Arc<dyn Any + Send + Sync>,
}

/// The host memory a region stands for and its owner, kept alive with the
/// registration: an [`IbLocal`] of host memory again, or a region whose
/// [`Region::registrable`] (`offer`) says it is host memory; `None` for memory this
/// backend cannot address by host address (refused: conformance case 17).
pub(crate) fn host_owner(
    region: &dyn Region,
    offer: Option<Registrable>,
) -> Option<(Arc<dyn Any + Send + Sync>, MemoryKind)> {
    if let Some(l) = region.as_any().downcast_ref::<IbLocal>() {
        return (!l.dmabuf).then(|| (l._owner.clone(), l.kind));
    }
    match offer? {
        Registrable::Host { owner } => Some((owner, region.kind())),
        Registrable::DeviceDmaBuf { .. } => None,
    }
}

impl IbLocal {
    pub(crate) fn new(
        mr: Mr,
        region: &dyn Region,
        owner: Arc<dyn Any + Send + Sync>,
        kind: MemoryKind,
    ) -> IbLocal {
        IbLocal {
            mr: Arc::new(mr),
            addr: region.addr(),
            len: region.len(),
            kind,
            device: Device::HOST,
            dmabuf: false,
            _owner: owner,
        }
    }

    /// A dma-buf registration: `addr..addr+len` (IOVAs inside `mr`'s range) of memory
    /// of `kind` on `device`, owned by `owner`.
    pub(crate) fn with_range(
        mr: Mr,
        addr: u64,
        len: u64,
        kind: MemoryKind,
        device: Device,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> IbLocal {
        IbLocal {
            mr: Arc::new(mr),
            addr,
            len,
            kind,
            device,
            dmabuf: true,
            _owner: owner,
        }
    }

    /// Whether this is a dma-buf registration (`ibv_reg_dmabuf_mr`): its address is
    /// the MR's IOVA (for GPU memory, the device address), not a host address.
    pub fn is_dmabuf(&self) -> bool {
        self.dmabuf
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey
    }

    /// The remote key peers use.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey
    }

    /// The export a peer imports.
    pub fn export(&self) -> Export {
        let mut bytes = Vec::with_capacity(EXPORT_LEN);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&self.addr.to_le_bytes());
        bytes.extend_from_slice(&self.mr.rkey.to_le_bytes());
        Export {
            backend: BACKEND.into(),
            len: self.len,
            bytes,
            fds: Vec::new(),
        }
    }
}

impl Region for IbLocal {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn device(&self) -> Device {
        self.device
    }
    fn kind(&self) -> MemoryKind {
        self.kind
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A peer's registered buffer: where RDMA writes and atomics go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbRemote {
    /// Address in the peer's process.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// The peer's remote key.
    pub rkey: u32,
}

impl IbRemote {
    /// Parse an export made by [`IbLocal::export`].
    pub fn import(export: Export) -> Result<IbRemote> {
        export.check_backend(BACKEND)?;
        let b = &export.bytes;
        if b.len() != EXPORT_LEN || &b[..4] != MAGIC || !export.fds.is_empty() {
            return Err(HalError::invalid(format!(
                "not an ib-verbs export ({} bytes, {} descriptors): pass the export exactly as the peer's ib-verbs `export` made it",
                b.len(),
                export.fds.len()
            )));
        }
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[4..12]);
        let mut k = [0u8; 4];
        k.copy_from_slice(&b[12..16]);
        let addr = u64::from_le_bytes(a);
        if addr.checked_add(export.len).is_none() {
            return Err(HalError::invalid(
                "ib-verbs export describes a range past the end of the address space: it was corrupted",
            ));
        }
        Ok(IbRemote {
            addr,
            len: export.len,
            rkey: u32::from_le_bytes(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_reject_foreign_and_damaged_exports() {
        let e = Export {
            backend: "host-tcp".into(),
            len: 8,
            bytes: vec![0; 16],
            fds: vec![],
        };
        assert!(
            IbRemote::import(e)
                .unwrap_err()
                .to_string()
                .contains("host-tcp")
        );
        let e = Export {
            backend: BACKEND.into(),
            len: 8,
            bytes: vec![0; 3],
            fds: vec![],
        };
        assert!(
            IbRemote::import(e)
                .unwrap_err()
                .to_string()
                .contains("not an ib-verbs export")
        );
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&0x1000u64.to_le_bytes());
        bytes.extend_from_slice(&7u32.to_le_bytes());
        let r = IbRemote::import(Export {
            backend: BACKEND.into(),
            len: 64,
            bytes,
            fds: vec![],
        })
        .unwrap();
        assert_eq!(
            r,
            IbRemote {
                addr: 0x1000,
                len: 64,
                rkey: 7
            }
        );
    }
}
