//! The only `unsafe` of host-emu: creating, mapping and touching shared memory.
//!
//! * [`create_sealed_memfd`] makes an anonymous file whose size can never change again
//!   (so a peer can never shrink it under a mapping and make accesses fault).
//! * [`Mmap`] is one `MAP_SHARED` read/write mapping of such a file; dropping it unmaps.
//!   Every accessor checks its range against the mapped length, so the safe API can
//!   never reach outside the mapping.
//!
//! What the bytes *mean* and who may touch them when is the caller's business: shared
//! memory is written by other threads and processes, so plain copies here are the
//! equivalent of device loads/stores — ordering comes from the atomics
//! ([`Mmap::atomic_u64`]) with release/acquire, as on a GPU.

use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};

/// The system page size (4096 when it cannot be read).
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf only reads a configuration value; no pointers are involved.
    let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if ps > 0 { ps as u64 } else { 4096 }
}

/// Seals that make a memfd's size immutable; [`is_size_sealed`] requires them.
const SIZE_SEALS: SealFlag = SealFlag::F_SEAL_SHRINK.union(SealFlag::F_SEAL_GROW);

/// Create a close-on-exec memfd of exactly `size` bytes (zero-filled) and seal its size.
pub(crate) fn create_sealed_memfd(name: &str, size: u64) -> io::Result<OwnedFd> {
    let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)?;
    let size = i64::try_from(size).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    nix::unistd::ftruncate(&fd, size)?;
    fcntl(
        &fd,
        FcntlArg::F_ADD_SEALS(SIZE_SEALS | SealFlag::F_SEAL_SEAL),
    )?;
    Ok(fd)
}

/// True when `fd` is sealed against shrinking and growing.
pub(crate) fn is_size_sealed(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let seals = fcntl(fd, FcntlArg::F_GET_SEALS)?;
    Ok(SealFlag::from_bits_truncate(seals).contains(SIZE_SEALS))
}

/// Size in bytes and identity (device, inode) of the file behind `fd`.
pub(crate) fn fd_stat(fd: BorrowedFd<'_>) -> io::Result<(u64, (u64, u64))> {
    let st = nix::sys::stat::fstat(fd)?;
    Ok((st.st_size as u64, (st.st_dev, st.st_ino)))
}

/// One shared read/write mapping of a whole file. Unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; it may be accessed
// and unmapped from any thread. Concurrent access goes through raw copies and atomics.
unsafe impl Send for Mmap {}
// SAFETY: see `Send`; `&Mmap` only gives out bounds-checked raw copies and atomics.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Map the first `len` bytes of `fd` shared and read/write. `len` must be non-zero
    /// and no larger than the file (the caller checks with [`fd_stat`]).
    pub(crate) fn map_shared(fd: BorrowedFd<'_>, len: u64) -> io::Result<Mmap> {
        let len_usize =
            usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let nz = NonZeroUsize::new(len_usize)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: we ask the kernel for a fresh mapping (no fixed address), so no
        // existing Rust object is aliased; the fd stays borrowed for the call only and
        // the mapping stays valid after it is closed.
        let ptr = unsafe {
            mmap(
                None,
                nz,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd.as_fd(),
                0,
            )?
        };
        Ok(Mmap {
            ptr: ptr.cast(),
            len: len_usize,
        })
    }

    /// A private (copy-on-write) mapping of the first `len` bytes of `fd` with every page
    /// already copied: a snapshot of the file as of now, detached from it (writes here
    /// never reach the file, later writes to the file never show here). Only for the
    /// test-only `detached-mapping` fault.
    pub(crate) fn map_private_snapshot(fd: BorrowedFd<'_>, len: u64) -> io::Result<Mmap> {
        let len_usize =
            usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let nz = NonZeroUsize::new(len_usize)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a fresh mapping at an address the kernel picks aliases no Rust object;
        // the fd is borrowed for the call only.
        let ptr = unsafe {
            mmap(
                None,
                nz,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
                fd.as_fd(),
                0,
            )?
        };
        let map = Mmap {
            ptr: ptr.cast(),
            len: len_usize,
        };
        let page = page_size() as usize;
        for off in (0..len_usize).step_by(page.max(1)) {
            let p = map.ptr.as_ptr().wrapping_add(off);
            // SAFETY: `off < len`, so `p` lies inside the mapping just created, which
            // nothing else references yet; writing a byte back copies the page.
            unsafe { std::ptr::write_volatile(p, std::ptr::read_volatile(p)) };
        }
        Ok(map)
    }

    /// Replace the last page of this mapping of `fd` by a private snapshot of it (the
    /// rest stays shared): writes into that page never reach the file and later writes
    /// to the file never show there. Does nothing for a mapping of one page or less.
    /// Only for the test-only `detached-tail-page` fault.
    pub(crate) fn detach_last_page(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let page = page_size() as usize;
        if self.len <= page || !self.len.is_multiple_of(page) {
            return Ok(());
        }
        let at = self.len - page;
        let offset = i64::try_from(at).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let addr = NonZeroUsize::new(self.ptr.as_ptr() as usize + at)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let nz =
            NonZeroUsize::new(page).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: MAP_FIXED replaces exactly the last page of the mapping this value owns
        // (page-aligned: mappings start on a page and `len` is a multiple of the page
        // size); no Rust reference into it exists (accessors copy or return atomics
        // borrowed from `&self`, and the caller holds the only handle while mapping).
        let p = unsafe {
            mmap(
                Some(addr),
                nz,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED,
                fd.as_fd(),
                offset,
            )?
        };
        let p = p.as_ptr().cast::<u8>();
        // SAFETY: `p` is the first byte of the page just mapped; writing a byte back
        // copies the page, detaching it from the file.
        unsafe { std::ptr::write_volatile(p, std::ptr::read_volatile(p)) };
        Ok(())
    }

    /// Base address.
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    fn in_bounds(&self, off: u64, len: usize) -> bool {
        usize::try_from(off)
            .ok()
            .and_then(|o| o.checked_add(len))
            .is_some_and(|end| end <= self.len)
    }

    /// Copy `out.len()` bytes starting at `off` out of the mapping. False if out of bounds.
    pub(crate) fn read(&self, off: u64, out: &mut [u8]) -> bool {
        if !self.in_bounds(off, out.len()) {
            return false;
        }
        // SAFETY: `off..off+out.len()` lies inside the live mapping (checked above);
        // `out` is a distinct Rust buffer, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(off as usize),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        true
    }

    /// Copy `data` into the mapping at `off`. False if out of bounds.
    pub(crate) fn write(&self, off: u64, data: &[u8]) -> bool {
        if !self.in_bounds(off, data.len()) {
            return false;
        }
        // SAFETY: the destination range lies inside the live, writable mapping (checked
        // above); `data` is a Rust buffer that cannot be this shared mapping's memory
        // borrowed as a slice (we never hand out slices of it).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.ptr.as_ptr().add(off as usize),
                data.len(),
            )
        };
        true
    }

    /// Copy `len` bytes from `src` at `src_off` into `self` at `dst_off` (memmove
    /// semantics, so the two may be the same mapping). False if either is out of bounds.
    pub(crate) fn copy_from(&self, dst_off: u64, src: &Mmap, src_off: u64, len: u64) -> bool {
        let Ok(n) = usize::try_from(len) else {
            return false;
        };
        if !self.in_bounds(dst_off, n) || !src.in_bounds(src_off, n) {
            return false;
        }
        // SAFETY: both ranges lie inside live mappings (checked above); `ptr::copy`
        // tolerates overlap.
        unsafe {
            std::ptr::copy(
                src.ptr.as_ptr().add(src_off as usize),
                self.ptr.as_ptr().add(dst_off as usize),
                n,
            )
        };
        true
    }

    /// The 64-bit atomic at `off`, or `None` when `off` is not 8-byte aligned or the
    /// word does not fit.
    pub(crate) fn atomic_u64(&self, off: u64) -> Option<&AtomicU64> {
        if !off.is_multiple_of(8) || !self.in_bounds(off, 8) {
            return None;
        }
        let p = self.ptr.as_ptr().wrapping_add(off as usize);
        if !(p as usize).is_multiple_of(std::mem::align_of::<AtomicU64>()) {
            return None;
        }
        // SAFETY: `p` is in bounds, 8-byte aligned and valid for the lifetime of
        // `&self` (the mapping is only unmapped on drop). Every access to semaphore words
        // goes through atomics, in this process and in peers.
        Some(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping created by `map_shared` and owned only by
        // this value; nothing borrowed from it can outlive `&self`.
        if let Err(e) = unsafe { munmap(self.ptr.cast(), self.len) } {
            tracing::warn!("host-emu: munmap of {:#x} failed: {e}", self.addr());
        }
    }
}
