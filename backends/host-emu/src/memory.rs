//! host-emu "device memory": sealed memfds mapped `MAP_SHARED`.
//!
//! * [`ShmBuf`] — one mapped memfd: the bytes, the fd, the requested length. Never
//!   cloned; shared through `Arc`.
//! * [`ShmRegion`] — a local allocation (refcounted handle on a [`ShmBuf`]).
//! * [`ShmMapping`] — a peer's allocation mapped here (from its exported fd, or the very
//!   same [`ShmBuf`] when the peer lives in this process).
//!
//! Both implement [`Region`] with kind [`MemoryKind::HostShared`] on [`Device::HOST`],
//! and both deref to [`ShmBuf`] for bounds-checked byte access and semaphore atomics.
//!
//! **Lifetime:** the memory lives while any handle does. Dropping a region while a peer
//! still maps it is fine: the peer's mapping (an `mmap` of the same pages, or an `Arc`
//! of the same `ShmBuf`) keeps the pages.
//!
//! **Sizes:** the memfd is page-rounded (at least one page, so a 0-byte region still has
//! a valid address); `len()` reports exactly what was asked for and every accessor is
//! bounded by it.
//!
//! **Export format** ([`Export::bytes`], 32 bytes little-endian): magic `HEMU`, version
//! `u32`, length `u64`, owner pid `u32`, padding `u32`, buffer id `u64`; one fd (the
//! memfd, duplicated). `map` checks backend name, header, `len`, seals and the fd's size.

use std::any::Any;
use std::collections::HashMap;
use std::ops::Deref;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use commhal_hal::{Device, Export, HalError, MemoryKind, Region, Result};

use crate::BACKEND;
use crate::sys::{self, Mmap};

const MAGIC: &[u8; 4] = b"HEMU";
const VERSION: u32 = 1;
/// Length of [`Export::bytes`] produced by host-emu.
pub const EXPORT_HEADER_LEN: usize = 32;

/// One mapped memfd. Byte access is bounded by [`ShmBuf::len`] (the requested length).
#[derive(Debug)]
pub struct ShmBuf {
    map: Mmap,
    fd: OwnedFd,
    len: u64,
    /// Process-unique id, for recognising our own exports in this process.
    id: u64,
    /// (st_dev, st_ino) of the memfd.
    ident: (u64, u64),
}

/// Bytes actually allocated for a region of `len` bytes: page-rounded, at least a page.
pub(crate) fn alloc_size(len: u64) -> Option<u64> {
    let ps = sys::page_size();
    len.max(1).checked_next_multiple_of(ps)
}

fn registry() -> &'static Mutex<HashMap<u64, Weak<ShmBuf>>> {
    static LIVE: OnceLock<Mutex<HashMap<u64, Weak<ShmBuf>>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

impl ShmBuf {
    /// Base address (a host pointer valid in this process).
    pub fn addr(&self) -> u64 {
        self.map.addr()
    }

    /// Length in bytes as requested at allocation.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the length is 0.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copy `out.len()` bytes at `off` out of the buffer.
    ///
    /// Not synchronised: read after an acquire on a semaphore the writer released.
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<()> {
        commhal_hal::error::check_range("host-emu read", off, out.len() as u64, self.len)?;
        self.map.read(off, out);
        Ok(())
    }

    /// Copy `data` into the buffer at `off`.
    ///
    /// Not synchronised: publish with a release on a semaphore (e.g.
    /// [`ShmBuf::atomic_u64`]`.fetch_add(1, Release)`).
    pub fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        commhal_hal::error::check_range("host-emu write", off, data.len() as u64, self.len)?;
        self.map.write(off, data);
        Ok(())
    }

    /// Copy `len` bytes from `src` at `src_off` to this buffer at `dst_off`.
    pub fn copy_from(&self, dst_off: u64, src: &ShmBuf, src_off: u64, len: u64) -> Result<()> {
        commhal_hal::error::check_range("host-emu copy destination", dst_off, len, self.len)?;
        commhal_hal::error::check_range("host-emu copy source", src_off, len, src.len)?;
        self.map.copy_from(dst_off, &src.map, src_off, len);
        Ok(())
    }

    /// The 64-bit semaphore word at `off` (must be 8-byte aligned and inside the buffer).
    pub fn atomic_u64(&self, off: u64) -> Result<&AtomicU64> {
        commhal_hal::error::check_semaphore_offset("host-emu semaphore", off, self.len)?;
        self.map.atomic_u64(off).ok_or_else(|| HalError::Unaligned {
            what: "semaphore address".into(),
            value: self.addr() + off,
            align: 8,
        })
    }

    /// Allocate a zeroed buffer of `len` bytes.
    fn alloc(len: u64) -> Result<Arc<ShmBuf>> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let size = alloc_size(len).ok_or_else(|| {
            HalError::invalid(format!(
                "host-emu cannot allocate {len} bytes: size overflows"
            ))
        })?;
        let fd = sys::create_sealed_memfd("commhal-host-emu", size).map_err(|e| {
            HalError::io(
                format!(
                    "host-emu: creating a {size}-byte memfd (check RLIMIT_FSIZE and free memory)"
                ),
                e,
            )
        })?;
        let (_, ident) = sys::fd_stat(fd.as_fd())
            .map_err(|e| HalError::io("host-emu: fstat of new memfd", e))?;
        let map = Mmap::map_shared(fd.as_fd(), size)
            .map_err(|e| HalError::io(format!("host-emu: mapping {size} bytes"), e))?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let buf = Arc::new(ShmBuf {
            map,
            fd,
            len,
            id,
            ident,
        });
        let mut live = registry().lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|_, w| w.strong_count() > 0);
        live.insert(id, Arc::downgrade(&buf));
        Ok(buf)
    }

    fn export(&self) -> Result<Export> {
        let fd = self.fd.try_clone().map_err(|e| {
            HalError::io(
                "host-emu: duplicating the memfd for export (too many open files?)",
                e,
            )
        })?;
        let mut bytes = Vec::with_capacity(EXPORT_HEADER_LEN);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&self.len.to_le_bytes());
        bytes.extend_from_slice(&std::process::id().to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&self.id.to_le_bytes());
        Ok(Export {
            backend: BACKEND.to_string(),
            len: self.len,
            bytes,
            fds: vec![fd],
        })
    }

    /// Map a peer's export: checks everything, then shares the buffer itself when it
    /// lives in this process or mmaps the received fd. `detached` (the test-only
    /// `detached-mapping` fault) maps a private snapshot instead, never the shared pages.
    fn map_export(mut export: Export, how: MapHow) -> Result<Arc<ShmBuf>> {
        export.check_backend(BACKEND)?;
        let bad = |what: String| {
            HalError::invalid(format!(
                "host-emu export rejected: {what}; pass the Export produced by host-emu's export() unchanged"
            ))
        };
        let (len, pid, id) = parse_export_header(&export.bytes, export.len).map_err(bad)?;
        if export.fds.len() != 1 {
            return Err(bad(format!(
                "expected exactly 1 fd, got {}",
                export.fds.len()
            )));
        }
        let fd = export.fds.pop().ok_or_else(|| bad("no fd".into()))?;
        let (size, ident) = sys::fd_stat(fd.as_fd())
            .map_err(|e| HalError::io("host-emu: fstat of an exported fd", e))?;
        let expect = alloc_size(len).ok_or_else(|| bad(format!("length {len} overflows")))?;
        if size != expect {
            return Err(bad(format!(
                "the fd holds {size} bytes but a {len}-byte host-emu region holds {expect} (truncated or not a host-emu memfd)"
            )));
        }
        if !sys::is_size_sealed(fd.as_fd()).unwrap_or(false) {
            return Err(bad(
                "the fd is not size-sealed (not a host-emu memfd)".into()
            ));
        }
        if how == MapHow::Detached {
            let map = Mmap::map_private_snapshot(fd.as_fd(), size).map_err(|e| {
                HalError::io(
                    format!(
                        "host-emu: snapshotting a peer's {size}-byte memfd (detached-mapping fault)"
                    ),
                    e,
                )
            })?;
            return Ok(Arc::new(ShmBuf {
                map,
                fd,
                len,
                id: 0,
                ident,
            }));
        }
        if pid == std::process::id() && how == MapHow::Shared {
            let live = registry().lock().unwrap_or_else(|p| p.into_inner());
            if let Some(buf) = live.get(&id).and_then(Weak::upgrade)
                && buf.ident == ident
            {
                return Ok(buf);
            }
        }
        let map = Mmap::map_shared(fd.as_fd(), size).map_err(|e| {
            HalError::io(format!("host-emu: mapping a peer's {size}-byte memfd"), e)
        })?;
        if how == MapHow::DetachedTail {
            map.detach_last_page(fd.as_fd()).map_err(|e| {
                HalError::io(
                    "host-emu: detaching the last page of a mapping (detached-tail-page fault)",
                    e,
                )
            })?;
        }
        Ok(Arc::new(ShmBuf {
            map,
            fd,
            len,
            id: 0,
            ident,
        }))
    }
}

/// How [`ShmBuf::map_export`] maps: shared (correct), or broken by a test-only fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MapHow {
    Shared,
    Detached,
    DetachedTail,
}

macro_rules! shm_handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name(pub(crate) Arc<ShmBuf>);

        impl $name {
            /// The shared buffer behind this handle.
            pub fn buf(&self) -> &Arc<ShmBuf> {
                &self.0
            }
        }

        impl Deref for $name {
            type Target = ShmBuf;
            fn deref(&self) -> &ShmBuf {
                &self.0
            }
        }

        impl Region for $name {
            fn addr(&self) -> u64 {
                self.0.addr()
            }
            fn len(&self) -> u64 {
                self.0.len()
            }
            fn device(&self) -> Device {
                Device::HOST
            }
            fn kind(&self) -> MemoryKind {
                MemoryKind::HostShared
            }
            fn as_any(&self) -> &dyn Any {
                self
            }
            /// Host memory, kept mapped by the shared buffer.
            fn registrable(&self) -> Option<commhal_hal::Registrable> {
                Some(commhal_hal::Registrable::Host {
                    owner: self.0.clone(),
                })
            }
        }
    };
}

shm_handle!(
    /// A local host-emu allocation. Cloning shares the same memory (refcounted).
    ShmRegion
);
shm_handle!(
    /// A peer's host-emu allocation mapped into this process. Keeps the pages alive
    /// even after the owner dropped its [`ShmRegion`].
    ShmMapping
);

impl ShmRegion {
    /// Allocate `len` zeroed bytes of shared memory (0 is allowed).
    pub fn alloc(len: u64) -> Result<ShmRegion> {
        ShmBuf::alloc(len).map(ShmRegion)
    }

    /// Describe this region for a peer: header bytes plus a duplicated memfd.
    pub fn export(&self) -> Result<Export> {
        self.0.export()
    }
}

impl ShmMapping {
    /// Map a peer's [`Export`] (see the module docs for what is checked).
    pub fn map(export: Export) -> Result<ShmMapping> {
        ShmBuf::map_export(export, MapHow::Shared).map(ShmMapping)
    }

    /// Map a peer's [`Export`] as a private snapshot (the test-only `detached-mapping`
    /// fault, see [`crate::faults`]): the same checks as [`ShmMapping::map`], but writes
    /// into the result never reach the peer and the peer's later writes never show.
    pub fn map_detached(export: Export) -> Result<ShmMapping> {
        ShmBuf::map_export(export, MapHow::Detached).map(ShmMapping)
    }

    /// Map a peer's [`Export`] shared except its last page, which is a private snapshot
    /// (the test-only `detached-tail-page` fault, see [`crate::faults`]): writes into
    /// the last page are lost, so a put ending there arrives short. Regions of one page
    /// or less are mapped whole.
    pub fn map_detached_tail(export: Export) -> Result<ShmMapping> {
        ShmBuf::map_export(export, MapHow::DetachedTail).map(ShmMapping)
    }

    /// True when this mapping shares the owner's `ShmBuf` (same process) rather than a
    /// fresh `mmap` of the fd; then `addr()` equals the owner's address.
    pub fn is_same_process(&self) -> bool {
        self.0.id != 0
    }
}

/// Check a host-emu export header against the export's `len`: (length, owner pid,
/// buffer id), or what is wrong with it.
pub(crate) fn parse_export_header(
    b: &[u8],
    export_len: u64,
) -> std::result::Result<(u64, u32, u64), String> {
    if b.len() != EXPORT_HEADER_LEN || b.get(0..4) != Some(&MAGIC[..]) {
        return Err(format!("header is {} bytes or has a wrong magic", b.len()));
    }
    let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let half = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default());
    let (version, len, pid, id) = (half(4), word(8), half(16), word(24));
    if version != VERSION {
        return Err(format!("header version {version}, expected {VERSION}"));
    }
    if len != export_len {
        return Err(format!(
            "header says {len} bytes but Export.len says {export_len}"
        ));
    }
    Ok((len, pid, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_is_zeroed_and_reports_requested_len() {
        let r = ShmRegion::alloc(100).unwrap();
        assert_eq!(r.len(), 100);
        assert_eq!(r.addr() % sys::page_size(), 0);
        let mut out = [1u8; 100];
        r.read(0, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0));
        assert!(r.read(1, &mut out).is_err(), "read past len must fail");
        assert!(r.write(99, &[1, 2]).is_err());
    }

    #[test]
    fn zero_byte_region_is_valid() {
        let r = ShmRegion::alloc(0).unwrap();
        assert!(r.is_empty());
        assert_ne!(r.addr(), 0);
        r.read(0, &mut []).unwrap();
        assert!(r.read(0, &mut [0u8; 1]).is_err());
        let m = ShmMapping::map(r.export().unwrap()).unwrap();
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn same_process_map_shares_memory() {
        let r = ShmRegion::alloc(64).unwrap();
        let m = ShmMapping::map(r.export().unwrap()).unwrap();
        assert!(m.is_same_process());
        assert_eq!(m.addr(), r.addr());
        r.write(8, b"abc").unwrap();
        let mut out = [0u8; 3];
        m.read(8, &mut out).unwrap();
        assert_eq!(&out, b"abc");
    }

    /// The test-only fault mappings: a detached mapping is a snapshot cut off both ways;
    /// a detached tail shares every page but the last.
    #[test]
    fn detached_mappings_lose_writes_as_the_faults_say() {
        let ps = sys::page_size();
        let r = ShmRegion::alloc(2 * ps).unwrap();
        r.write(0, b"old").unwrap();
        let d = ShmMapping::map_detached(r.export().unwrap()).unwrap();
        assert!(!d.is_same_process());
        let mut out = [0u8; 3];
        d.read(0, &mut out).unwrap();
        assert_eq!(&out, b"old", "the snapshot holds the bytes as of map time");
        r.write(0, b"new").unwrap();
        d.read(0, &mut out).unwrap();
        assert_eq!(&out, b"old", "later writes of the owner do not show");
        d.write(8, b"put").unwrap();
        r.read(8, &mut out).unwrap();
        assert_eq!(
            out, [0; 3],
            "writes into the snapshot never reach the owner"
        );

        let t = ShmMapping::map_detached_tail(r.export().unwrap()).unwrap();
        t.write(16, b"abc").unwrap();
        r.read(16, &mut out).unwrap();
        assert_eq!(&out, b"abc", "the first page is shared");
        t.write(ps + 5, b"xyz").unwrap();
        r.read(ps + 5, &mut out).unwrap();
        assert_eq!(out, [0; 3], "the last page is detached");
        // One page or less: mapped whole, shared.
        let small = ShmRegion::alloc(64).unwrap();
        let s = ShmMapping::map_detached_tail(small.export().unwrap()).unwrap();
        s.write(0, b"one").unwrap();
        small.read(0, &mut out).unwrap();
        assert_eq!(&out, b"one");
    }

    /// Rewrite the pid in the header so `map` takes the fd path (as a peer process would).
    fn foreign(mut e: Export) -> Export {
        e.bytes[16..20].copy_from_slice(&0u32.to_le_bytes());
        e
    }

    #[test]
    fn fd_mapping_aliases_pages_and_outlives_the_region() {
        let r = ShmRegion::alloc(5000).unwrap();
        let m = ShmMapping::map(foreign(r.export().unwrap())).unwrap();
        assert!(!m.is_same_process());
        assert_ne!(m.addr(), r.addr());
        r.write(4990, b"0123456789").unwrap();
        r.atomic_u64(8).unwrap().fetch_add(7, Ordering::Release);
        drop(r);
        let mut out = [0u8; 10];
        m.read(4990, &mut out).unwrap();
        assert_eq!(&out, b"0123456789");
        assert_eq!(m.atomic_u64(8).unwrap().load(Ordering::Acquire), 7);
    }

    #[test]
    fn same_process_mapping_outlives_the_region() {
        let r = ShmRegion::alloc(16).unwrap();
        r.write(0, b"kept").unwrap();
        let m = ShmMapping::map(r.export().unwrap()).unwrap();
        drop(r);
        let mut out = [0u8; 4];
        m.read(0, &mut out).unwrap();
        assert_eq!(&out, b"kept");
    }

    #[test]
    fn lying_exports_are_rejected() {
        let r = ShmRegion::alloc(10_000).unwrap();
        // Export.len disagrees with the header.
        let mut e = r.export().unwrap();
        e.len = 20_000;
        assert!(ShmMapping::map(e).is_err());
        // Header and Export.len agree but claim more than the fd holds.
        let mut e = foreign(r.export().unwrap());
        e.len = 1 << 20;
        e.bytes[8..16].copy_from_slice(&(1u64 << 20).to_le_bytes());
        let err = ShmMapping::map(e).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        // Another backend's export.
        let mut e = r.export().unwrap();
        e.backend = "cuda-nvlink".into();
        assert!(ShmMapping::map(e).is_err());
        // No fd.
        let mut e = r.export().unwrap();
        e.fds.clear();
        assert!(ShmMapping::map(e).is_err());
        // Garbage header.
        let mut e = r.export().unwrap();
        e.bytes.truncate(5);
        assert!(ShmMapping::map(e).is_err());
    }

    #[test]
    fn semaphore_words_must_be_aligned_and_in_bounds() {
        let r = ShmRegion::alloc(24).unwrap();
        assert!(matches!(r.atomic_u64(4), Err(HalError::Unaligned { .. })));
        assert!(matches!(r.atomic_u64(24), Err(HalError::OutOfRange { .. })));
        r.atomic_u64(16).unwrap().store(3, Ordering::Relaxed);
    }
}
