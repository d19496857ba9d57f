//! Registered memory of `host-tcp`: local handles ([`TcpLocal`]), peer handles
//! ([`TcpRemote`]), the export format, and the per-transport table the receiver thread
//! looks regions up in.
//!
//! * Registering gives a region a process-unique **id** and files a *weak* reference
//!   under it in the transport's `RegionTable`. The registration lives as long as
//!   any clone of the returned [`TcpLocal`]; once they are all dropped, incoming frames
//!   for that id are refused (the sender is told with an error frame).
//! * A [`TcpRemote`] is just (owner transport instance, region id, length): nothing of
//!   the peer's memory is mapped here, which is why this works across hosts.
//!
//! **Export format** ([`Export::bytes`], 32 bytes little-endian, no descriptors):
//! magic `HTCP`, version `u32` (= 1), owner instance `u64`, region id `u64`,
//! length `u64` (equal to [`Export::len`]).

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use commhal_hal::{Device, Export, HalError, MemoryKind, Region, Result, StagedAccess};

use crate::memory::ShmBuf;
use crate::tcp::BACKEND;
use crate::tcp::hostmem::HostBytes;

const MAGIC: &[u8; 4] = b"HTCP";
const VERSION: u32 = 1;
/// Length of [`Export::bytes`] produced by `host-tcp`.
pub const EXPORT_LEN: usize = 32;

/// The memory behind a registration.
#[derive(Debug, Clone)]
pub(crate) enum Mem {
    /// host-emu shared memory (a local [`crate::ShmRegion`] or a [`crate::ShmMapping`]).
    Shm(Arc<ShmBuf>),
    /// Process-private host memory registered by address
    /// ([`commhal_hal::Registrable::Host`]: a [`HostRegion`], CUDA's pinned memory).
    Host(HostBytes),
    /// Device memory reached through copies ([`Region::staged`]).
    Staged(Arc<Staged>),
}

/// Device memory behind a [`StagedAccess`], and what signals made of its words.
#[derive(Debug)]
pub(crate) struct Staged {
    addr: u64,
    access: Arc<dyn StagedAccess>,
    /// The value of every semaphore word a `SIGNAL` touched, read from the device at
    /// the first one: after that only this registration's signals may change such a
    /// word (device code waits on it, never writes it; a second registration of the
    /// same memory keeps its own shadow), so the shadow is exact and a signal stores the
    /// sum instead of an atomic add the host cannot do there.
    words: Mutex<HashMap<u64, u64>>,
}

impl Staged {
    pub(crate) fn new(addr: u64, access: Arc<dyn StagedAccess>) -> Staged {
        Staged {
            addr,
            access,
            words: Mutex::new(HashMap::new()),
        }
    }

    /// Wait until every write and signal applied here landed (before a FLUSH's ACK).
    pub(crate) fn settle(&self) -> Result<()> {
        self.access.settle()
    }

    /// The accessor's write queue ([`StagedAccess::queue`]; 0: its own).
    pub(crate) fn queue(&self) -> u64 {
        self.access.queue()
    }
}

impl Mem {
    fn addr(&self) -> u64 {
        match self {
            Mem::Shm(b) => b.addr(),
            Mem::Host(h) => h.addr(),
            Mem::Staged(d) => d.addr,
        }
    }
    pub(crate) fn len(&self) -> u64 {
        match self {
            Mem::Shm(b) => b.len(),
            Mem::Host(h) => h.len(),
            Mem::Staged(d) => d.access.len(),
        }
    }
    pub(crate) fn read(&self, off: u64, out: &mut [u8]) -> Result<()> {
        match self {
            Mem::Shm(b) => b.read(off, out),
            Mem::Host(h) => h.read(off, out),
            Mem::Staged(d) => d.access.read(off, out),
        }
    }
    pub(crate) fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        match self {
            Mem::Shm(b) => b.write(off, data),
            Mem::Host(h) => h.write(off, data),
            Mem::Staged(d) => d.access.write(off, data),
        }
    }
    /// Write `len` bytes at `off` that `fill` produces in consecutive pieces
    /// ([`StagedAccess::write_with`]; host memory through `buf`).
    pub(crate) fn write_with(
        &self,
        off: u64,
        len: u64,
        buf: &mut Vec<u8>,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        match self {
            Mem::Staged(d) => d.access.write_with(off, len, buf, fill),
            _ => commhal_hal::memory::write_filled(buf, len, fill, |d| self.write(off, d)),
        }
    }
    pub(crate) fn atomic_u64(&self, off: u64) -> Result<&AtomicU64> {
        match self {
            Mem::Shm(b) => b.atomic_u64(off),
            Mem::Host(h) => h.atomic_u64(off),
            Mem::Staged(_) => Err(HalError::invalid(
                "this host-tcp region is device memory reached through copies: its semaphore words are waited on by device code, not through the host",
            )),
        }
    }
    /// Apply a peer's `SIGNAL`: add `add` to the word at `off` (release), then call
    /// `hook` with it where the host can address it.
    pub(crate) fn signal(&self, off: u64, add: u64, hook: Option<&SignalHook>) -> Result<()> {
        if let Mem::Staged(d) = self {
            commhal_hal::error::check_aligned("semaphore offset", off, 8)?;
            let mut words = d.words.lock().unwrap_or_else(|p| p.into_inner());
            let now = match words.get(&off) {
                Some(&v) => v,
                None => {
                    // (settled first: a write queued there would otherwise be missed)
                    d.access.settle()?;
                    let mut b = [0u8; 8];
                    d.access.read(off, &mut b)?;
                    u64::from_le_bytes(b)
                }
            };
            let value = now.wrapping_add(add);
            d.access.store_u64(off, value)?;
            words.insert(off, value);
            return Ok(());
        }
        let w = self.atomic_u64(off)?;
        w.fetch_add(add, Ordering::Release);
        if let Some(hook) = hook {
            hook(w);
        }
        Ok(())
    }
    /// The device and memory kind the bytes live on.
    fn device(&self) -> (Device, MemoryKind) {
        match self {
            Mem::Staged(d) => d.access.device(),
            _ => (Device::HOST, MemoryKind::HostShared),
        }
    }
}

/// One registration: its id, the table that owns it, and the memory.
#[derive(Debug)]
pub(crate) struct Registered {
    id: u64,
    owner: u64,
    mem: Mem,
}

/// A local buffer registered with a `host-tcp` transport (cheap to clone; clones share
/// the registration). Keep one alive while peers may still write to it.
#[derive(Debug, Clone)]
pub struct TcpLocal(Arc<Registered>);

impl TcpLocal {
    /// The region id peers address this buffer by.
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// Copy bytes out (e.g. to check what peers wrote, after a semaphore acquire).
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<()> {
        self.0.mem.read(off, out)
    }

    /// Copy bytes in (e.g. to fill a source buffer before a port write).
    pub fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        self.0.mem.write(off, data)
    }

    /// The 64-bit semaphore word at `off` (8-byte aligned, in bounds); peers' signals
    /// add to it with release, so wait on it with acquire.
    pub fn atomic_u64(&self, off: u64) -> Result<&AtomicU64> {
        self.0.mem.atomic_u64(off)
    }

    pub(crate) fn owner(&self) -> u64 {
        self.0.owner
    }

    pub(crate) fn mem(&self) -> &Mem {
        &self.0.mem
    }
}

impl Region for TcpLocal {
    fn addr(&self) -> u64 {
        self.0.mem.addr()
    }
    fn len(&self) -> u64 {
        self.0.mem.len()
    }
    fn device(&self) -> Device {
        self.0.mem.device().0
    }
    fn kind(&self) -> MemoryKind {
        self.0.mem.device().1
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A peer's registered buffer as a write target: which transport instance owns it,
/// its region id there, and its length (bounds are checked here before sending and
/// again by the owner before applying).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRemote {
    owner: u64,
    id: u64,
    len: u64,
}

impl TcpRemote {
    /// The owner transport instance (see [`crate::tcp::HostTcp::instance`]).
    pub fn owner(&self) -> u64 {
        self.owner
    }
    /// The region id on the owner.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True when the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The regions one transport instance registered, by id (weak: the table never keeps
/// memory alive).
pub(crate) struct RegionTable {
    instance: u64,
    map: Mutex<HashMap<u64, Weak<Registered>>>,
    /// Called by receiver threads right after applying a `SIGNAL` (see
    /// [`crate::tcp::HostTcp::with_signal_hook`]).
    pub(crate) on_signal: std::sync::OnceLock<SignalHook>,
}

/// A function the receiver calls with the semaphore word it just added to.
pub type SignalHook = Arc<dyn Fn(&AtomicU64) + Send + Sync>;

impl RegionTable {
    pub(crate) fn new(instance: u64) -> RegionTable {
        RegionTable {
            instance,
            map: Mutex::new(HashMap::new()),
            on_signal: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn instance(&self) -> u64 {
        self.instance
    }

    /// Register `mem` under a fresh process-unique id.
    pub(crate) fn register(&self, mem: Mem) -> TcpLocal {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let reg = Arc::new(Registered {
            id,
            owner: self.instance,
            mem,
        });
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, w| w.strong_count() > 0);
        map.insert(id, Arc::downgrade(&reg));
        TcpLocal(reg)
    }

    /// The live registration `id`, or why there is none (text for an error frame).
    pub(crate) fn get(&self, id: u64) -> std::result::Result<TcpLocal, String> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(&id).map(Weak::upgrade) {
            Some(Some(r)) => Ok(TcpLocal(r)),
            Some(None) => Err(format!(
                "region id {id} was dropped (every TcpLocal handle of it is gone): keep registered buffers alive until a flush after their last use"
            )),
            None => Err(format!(
                "region id {id} was never registered with this host-tcp transport"
            )),
        }
    }
}

/// [`Export`] of a registration.
pub(crate) fn export(local: &TcpLocal) -> Export {
    let mut bytes = Vec::with_capacity(EXPORT_LEN);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&local.owner().to_le_bytes());
    bytes.extend_from_slice(&local.id().to_le_bytes());
    bytes.extend_from_slice(&local.len().to_le_bytes());
    Export {
        backend: BACKEND.to_string(),
        len: local.len(),
        bytes,
        fds: Vec::new(),
    }
}

impl std::fmt::Debug for RegionTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionTable")
            .field("instance", &self.instance)
            .field("hooked", &self.on_signal.get().is_some())
            .finish_non_exhaustive()
    }
}

/// Parse a peer's [`Export`] into a [`TcpRemote`], checking everything.
pub(crate) fn import(export: Export) -> Result<TcpRemote> {
    export.check_backend(BACKEND)?;
    let bad = |what: String| {
        HalError::invalid(format!(
            "host-tcp export rejected: {what}; pass the Export produced by host-tcp's export() unchanged"
        ))
    };
    if !export.fds.is_empty() {
        return Err(bad(format!(
            "it carries {} descriptors but host-tcp exports carry none",
            export.fds.len()
        )));
    }
    let b = &export.bytes;
    if b.len() != EXPORT_LEN || &b[0..4] != MAGIC {
        return Err(bad(format!(
            "{} bytes or a wrong magic (expected {EXPORT_LEN} bytes starting with HTCP)",
            b.len()
        )));
    }
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let version = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    if version != VERSION {
        return Err(bad(format!("version {version}, expected {VERSION}")));
    }
    let (owner, id, len) = (word(8), word(16), word(24));
    if len != export.len {
        return Err(bad(format!(
            "header says {len} bytes but Export.len says {}",
            export.len
        )));
    }
    Ok(TcpRemote { owner, id, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_import_round_trip_and_lies() {
        let table = RegionTable::new(42);
        let local = table.register(Mem::Host(HostBytes::alloc(100)));
        let r = import(export(&local)).unwrap();
        assert_eq!((r.owner(), r.id(), r.len()), (42, local.id(), 100));

        let mut e = export(&local);
        e.len = 200;
        assert!(import(e).is_err());
        let mut e = export(&local);
        e.backend = "host-emu".into();
        assert!(import(e).is_err());
        let mut e = export(&local);
        e.bytes[0] = b'X';
        assert!(import(e).is_err());
        let mut e = export(&local);
        e.bytes.truncate(31);
        assert!(import(e).is_err());
        let mut e = export(&local);
        e.bytes[4] = 9;
        assert!(import(e).is_err());
    }

    #[test]
    fn table_forgets_dropped_registrations() {
        let table = RegionTable::new(1);
        let local = table.register(Mem::Host(HostBytes::alloc(8)));
        let id = local.id();
        assert!(table.get(id).is_ok());
        drop(local);
        assert!(table.get(id).unwrap_err().contains("dropped"));
        assert!(
            table
                .get(u64::MAX)
                .unwrap_err()
                .contains("never registered")
        );
    }
}
