//! [`HostRegion`]: plain process-private host memory (a heap allocation), for ranks
//! that talk only through `host-tcp` — e.g. on different machines, where shared memory
//! buys nothing; and `HostBytes`, how the transport reaches any host memory of the
//! process registered by address (a `HostRegion`, CUDA's pinned memory). The only
//! `unsafe` of the `tcp` module lives here.
//!
//! The bytes are written by this transport's receiver thread while local code may read
//! them, exactly like host-emu's shared memory: plain copies are the emulated device's
//! loads and stores, ordering comes only from the 64-bit semaphore atomics
//! ([`HostRegion::atomic_u64`], release by the receiver, acquire by the waiter). So we
//! never hand out Rust slices of the buffer, only bounds-checked copies, atomics, and
//! sends to a socket straight from it (`sendmsg`, which reads it in the kernel).
//!
//! The allocation is made of `u64` words, so the base address is 8-byte aligned and
//! every 8-byte-aligned offset is a valid semaphore word.

use std::any::Any;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use commhal_hal::{Device, HalError, MemoryKind, Region, Result};

/// The owned allocation behind a [`HostRegion`]. Freed on drop.
#[derive(Debug)]
struct HostMem {
    /// Start of `words` zero-initialised `u64`s from a leaked `Box<[u64]>`.
    ptr: NonNull<u64>,
    words: usize,
    /// Bytes usable through the API (`<= words * 8`).
    len: usize,
}

// SAFETY: `HostMem` owns its allocation exclusively; it is only reached through
// bounds-checked raw copies and atomics, which are valid from any thread.
unsafe impl Send for HostMem {}
// SAFETY: see `Send`; `&HostMem` hands out no references into the buffer other than
// `&AtomicU64`, which is `Sync`.
unsafe impl Sync for HostMem {}

impl HostMem {
    fn alloc(len: usize) -> Option<HostMem> {
        // At least one word, so even a 0-byte region has a valid, unique address.
        let words = len.div_ceil(8).max(1);
        // Fallible: a huge request is an error, not an abort.
        let mut v: Vec<u64> = Vec::new();
        v.try_reserve_exact(words).ok()?;
        v.resize(words, 0);
        let boxed: Box<[u64]> = v.into_boxed_slice();
        let ptr = NonNull::new(Box::into_raw(boxed).cast::<u64>())?;
        Some(HostMem { ptr, words, len })
    }

    fn base(&self) -> *mut u8 {
        self.ptr.as_ptr().cast::<u8>()
    }
}

impl Drop for HostMem {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.words);
        // SAFETY: `ptr`/`words` come from `Box::into_raw` of a `Box<[u64]>` of exactly
        // `words` elements in `alloc`, owned only by this value and freed only here.
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// Plain host memory registrable with `host-tcp` (cheap to clone: clones share the
/// bytes). Zero-initialised; `len()` is exactly what was asked for.
#[derive(Debug, Clone)]
pub struct HostRegion(Arc<HostMem>);

impl HostRegion {
    /// Allocate `len` zeroed bytes.
    pub fn alloc(len: u64) -> Result<HostRegion> {
        let n = usize::try_from(len)
            .ok()
            .filter(|n| n.checked_add(8).is_some())
            .ok_or_else(|| {
                HalError::invalid(format!(
                    "host-tcp cannot allocate {len} bytes of host memory on this platform"
                ))
            })?;
        HostMem::alloc(n)
            .map(|m| HostRegion(Arc::new(m)))
            .ok_or_else(|| {
                HalError::invalid(format!(
                    "host-tcp: cannot allocate {len} bytes of host memory (out of memory?)"
                ))
            })
    }

    /// A region holding a copy of `bytes` (the `Vec` you had, now registrable).
    pub fn from_bytes(bytes: &[u8]) -> Result<HostRegion> {
        let r = HostRegion::alloc(bytes.len() as u64)?;
        r.write(0, bytes)?;
        Ok(r)
    }

    /// Copy `out.len()` bytes at `off` out of the region. Not synchronised: read after
    /// an acquire on a semaphore the writer released (or after the writer's flush).
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<()> {
        // SAFETY: the allocation is live while `self` holds it.
        unsafe { copy_out(self.addr(), self.len(), off, out) }
    }

    /// Copy `data` into the region at `off`. Not synchronised: publish with a release
    /// on a semaphore.
    pub fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        // SAFETY: the allocation is live while `self` holds it.
        unsafe { copy_in(self.addr(), self.len(), off, data) }
    }

    /// The 64-bit semaphore word at `off` (8-byte aligned, inside the region).
    pub fn atomic_u64(&self, off: u64) -> Result<&AtomicU64> {
        // SAFETY: the allocation is live while `&self` borrows it, which bounds the
        // word's lifetime.
        unsafe { word(self.addr(), self.len(), off) }
    }
}

// Bounds-checked access to `len` bytes of host memory of this process at `addr`, for
// [`HostRegion`] and [`HostBytes`]. We never hand out Rust slices of such memory (the
// receiver thread writes it while local code reads it), only copies and atomics.

/// Copy `out.len()` bytes at `off` out of `addr..addr + len`.
///
/// # Safety
/// `addr..addr + len` is mapped host memory for the whole call.
unsafe fn copy_out(addr: u64, len: u64, off: u64, out: &mut [u8]) -> Result<()> {
    commhal_hal::error::check_range("host-tcp host region read", off, out.len() as u64, len)?;
    // SAFETY: `off..off + out.len()` lies inside the mapped range (checked above, the
    // caller's contract); `out` is a distinct Rust buffer, never a view of it.
    unsafe {
        std::ptr::copy_nonoverlapping((addr + off) as *const u8, out.as_mut_ptr(), out.len())
    };
    Ok(())
}

/// Copy `data` into `addr..addr + len` at `off`.
///
/// # Safety
/// As [`copy_out`].
unsafe fn copy_in(addr: u64, len: u64, off: u64, data: &[u8]) -> Result<()> {
    commhal_hal::error::check_range("host-tcp host region write", off, data.len() as u64, len)?;
    // SAFETY: the destination lies inside the mapped range (checked above, the caller's
    // contract); `data` is a Rust buffer, never a view of this memory.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (addr + off) as *mut u8, data.len()) };
    Ok(())
}

/// Write every byte of `parts` (address, length) to the socket `fd` in order, with as
/// few `sendmsg` calls as the kernel takes them in; `MSG_NOSIGNAL`, so a closed peer is
/// an error, not a signal. A send timeout on the socket comes back as `WouldBlock`.
///
/// # Safety
/// Every part is readable memory of its length for the whole call.
unsafe fn send_parts(fd: RawFd, parts: &mut [(u64, usize)]) -> std::io::Result<()> {
    let mut first = 0;
    while first < parts.len() {
        if parts[first].1 == 0 {
            first += 1;
            continue;
        }
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 4];
        let n = (parts.len() - first).min(iov.len());
        for (v, &(at, len)) in iov.iter_mut().zip(&parts[first..first + n]) {
            v.iov_base = at as *mut libc::c_void;
            v.iov_len = len;
        }
        // SAFETY: an all-zero msghdr is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n as _;
        // SAFETY: the iovecs name readable memory (the caller's contract) and live
        // across the call; the kernel only reads them.
        let sent = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
        if sent < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let mut left = sent as usize;
        while left > 0 {
            let p = &mut parts[first];
            let k = left.min(p.1);
            p.0 += k as u64;
            p.1 -= k;
            left -= k;
            if p.1 == 0 {
                first += 1;
            }
        }
    }
    Ok(())
}

/// Write the slices to the socket `fd` in order ([`send_parts`]).
pub(crate) fn send_slices(fd: RawFd, slices: &[&[u8]]) -> std::io::Result<()> {
    let mut parts: Vec<(u64, usize)> = slices
        .iter()
        .map(|s| (s.as_ptr() as u64, s.len()))
        .collect();
    // SAFETY: each part is a live Rust slice borrowed for the call.
    unsafe { send_parts(fd, &mut parts) }
}

/// The 64-bit semaphore word at `off` of `addr..addr + len` (the offset and the address
/// 8-byte aligned, inside the range).
///
/// # Safety
/// `addr..addr + len` stays mapped for `'a`.
unsafe fn word<'a>(addr: u64, len: u64, off: u64) -> Result<&'a AtomicU64> {
    commhal_hal::error::check_aligned("semaphore offset", off, 8)?;
    commhal_hal::error::check_range("host-tcp semaphore", off, 8, len)?;
    commhal_hal::error::check_aligned("semaphore address", addr + off, 8)?;
    // SAFETY: in range and 8-byte aligned (checked above), mapped for 'a (the caller's
    // contract); semaphore words are accessed through atomics only, by this crate's
    // receiver and by waiters.
    Ok(unsafe { AtomicU64::from_ptr((addr + off) as *mut u64) })
}

/// Host memory of this process registered by address
/// ([`commhal_hal::Registrable::Host`]: a [`HostRegion`], or memory another owner
/// allocated, e.g. CUDA's pinned, device-mapped memory that GPU kernels copy a put's
/// source into), reached through bounds-checked copies and atomics; the owner it holds
/// keeps the bytes mapped.
#[derive(Clone)]
pub(crate) struct HostBytes {
    addr: u64,
    len: u64,
    /// Keeps the bytes mapped.
    _owner: commhal_hal::MemoryOwner,
}

impl std::fmt::Debug for HostBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostBytes({:#x}, {} bytes)", self.addr, self.len)
    }
}

impl HostBytes {
    /// `addr..addr + len`, host addresses of this process that `owner` keeps valid
    /// (the contract of [`commhal_hal::Registrable::Host`]).
    pub(crate) fn new(addr: u64, len: u64, owner: commhal_hal::MemoryOwner) -> Result<HostBytes> {
        if addr == 0 || addr.checked_add(len).is_none() {
            return Err(HalError::invalid(format!(
                "host-tcp: host memory at {addr:#x} of {len} bytes is not a valid range"
            )));
        }
        Ok(HostBytes {
            addr,
            len,
            _owner: owner,
        })
    }

    /// `len` zeroed bytes of a new [`HostRegion`] (tests and fuzz targets).
    pub(crate) fn alloc(len: u64) -> HostBytes {
        let r = HostRegion::alloc(len).expect("host region");
        HostBytes {
            addr: r.addr(),
            len,
            _owner: r.0,
        }
    }

    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Copy `out.len()` bytes at `off` out (after whatever published them).
    pub(crate) fn read(&self, off: u64, out: &mut [u8]) -> Result<()> {
        // SAFETY: the registrant promised the range stays mapped while the owner, held
        // by `self`, lives.
        unsafe { copy_out(self.addr, self.len, off, out) }
    }

    /// Copy `data` in at `off` (published by a later release).
    pub(crate) fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        // SAFETY: as in `read`.
        unsafe { copy_in(self.addr, self.len, off, data) }
    }

    /// Send `head`, the `len` bytes at `off`, then `tail` to the socket `fd`, the bytes
    /// straight from this memory (no copy out first): a 1 MiB put's copy out of the
    /// outbox cost the proxy 44–51 µs before its send (2 × H200).
    pub(crate) fn send(
        &self,
        fd: RawFd,
        head: &[u8],
        off: u64,
        len: u64,
        tail: &[u8],
    ) -> std::io::Result<()> {
        commhal_hal::error::check_range("host-tcp host region send", off, len, self.len)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let mut parts = [
            (head.as_ptr() as u64, head.len()),
            (self.addr + off, len as usize),
            (tail.as_ptr() as u64, tail.len()),
        ];
        // SAFETY: the head and tail are live slices; `off..off + len` is inside the
        // range (checked above) that the owner, held by `self`, keeps mapped.
        unsafe { send_parts(fd, &mut parts) }
    }

    /// The 64-bit semaphore word at `off` (8-byte aligned, in range).
    pub(crate) fn atomic_u64(&self, off: u64) -> Result<&AtomicU64> {
        // SAFETY: as in `read`; `&self` bounds the word's lifetime.
        unsafe { word(self.addr, self.len, off) }
    }
}

impl Region for HostRegion {
    fn addr(&self) -> u64 {
        self.0.base() as u64
    }
    fn len(&self) -> u64 {
        self.0.len as u64
    }
    fn device(&self) -> Device {
        Device::HOST
    }
    /// Reported as host memory ([`MemoryKind::HostShared`] is the closest kind: host
    /// bytes written by another agent — here the receiver thread — not a memfd).
    fn kind(&self) -> MemoryKind {
        MemoryKind::HostShared
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    /// Host memory, kept alive by the shared allocation.
    fn registrable(&self) -> Option<commhal_hal::Registrable> {
        Some(commhal_hal::Registrable::Host {
            owner: self.0.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn bounded_bytes_and_aligned_words() {
        let r = HostRegion::from_bytes(b"hello world").unwrap();
        assert_eq!(r.len(), 11);
        assert_eq!(r.addr() % 8, 0);
        let mut out = [0u8; 5];
        r.read(6, &mut out).unwrap();
        assert_eq!(&out, b"world");
        assert!(r.read(7, &mut out).is_err());
        assert!(r.write(u64::MAX, &[1]).is_err());
        assert!(matches!(r.atomic_u64(4), Err(HalError::Unaligned { .. })));
        assert!(matches!(r.atomic_u64(8), Err(HalError::OutOfRange { .. })));
        r.atomic_u64(0).unwrap().fetch_add(3, Ordering::Release);
        let zero = HostRegion::alloc(0).unwrap();
        assert!(zero.is_empty() && zero.addr() != 0);
        zero.read(0, &mut []).unwrap();
        assert!(HostRegion::alloc(u64::MAX).is_err());
        assert!(
            HostRegion::alloc(1 << 62).is_err(),
            "a huge request is an error"
        );
        let big = HostRegion::alloc(24).unwrap();
        big.atomic_u64(16).unwrap().store(7, Ordering::Relaxed);
        let mut w = [0u8; 8];
        big.read(16, &mut w).unwrap();
        assert_eq!(u64::from_le_bytes(w), 7);
    }
}
