//! The crate's only raw-pointer code: a bounds-checked view of host-addressable memory.
//!
//! Everything else reaches registered memory through [`HostView`], which checks every
//! offset and length against the view's size (without overflow) *before* any pointer
//! arithmetic, and checks alignment before handing out an atomic.
//!
//! Soundness rests on two promises:
//! * [`HostView::of`]: the [`Region`] contract — `addr()..addr()+len()` is valid and
//!   fixed for the region's lifetime — and its [`MemoryKind`] saying the bytes are
//!   host-addressable (`HostShared`, `HostPinned`). Device memory is refused.
//! * [`HostView::from_raw`] (unsafe): the caller's promise that the range is valid for
//!   the view's lifetime (a device handle whose owner outlives the view).
//!
//! Memory here is shared with other threads and processes. Words used for
//! synchronisation (semaphores, packets, FIFO slots) are only touched atomically.
//! Bulk bytes (put/get payloads) are copied with plain `memmove`: the channel protocol
//! (a peer reads a destination only after the matching signal) keeps those copies
//! from racing, exactly as on a GPU.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicU64};

use commhal_hal::error::check_range;
use commhal_hal::{HalError, MemoryKind, Region, Result};

/// Is this region's memory addressable by host code in this process?
pub(crate) fn host_accessible(region: &dyn Region) -> bool {
    matches!(
        region.kind(),
        MemoryKind::HostShared | MemoryKind::HostPinned
    )
}

/// A bounds-checked window on host-addressable memory that lives at least as long as `'a`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostView<'a> {
    base: *mut u8,
    len: u64,
    what: &'static str,
    _life: PhantomData<&'a ()>,
}

// SAFETY: a HostView is an address range into memory shared by design between threads;
// every access through it is either atomic or a copy the channel protocol orders.
unsafe impl Send for HostView<'_> {}
// SAFETY: as for Send: shared access goes through atomics or protocol-ordered copies.
unsafe impl Sync for HostView<'_> {}

impl<'a> HostView<'a> {
    /// View a registered region from the host. Fails for device memory.
    pub(crate) fn of(region: &'a dyn Region, what: &'static str) -> Result<Self> {
        if !host_accessible(region) {
            return Err(HalError::invalid(format!(
                "{what} is {:?} memory, which host code cannot address: run this operation in device code (use the device handle) or use host-shared/host-pinned memory",
                region.kind()
            )));
        }
        // SAFETY: the Region contract says addr..addr+len is valid and fixed while the
        // region lives, and `'a` borrows the region; the kind says it is host memory.
        unsafe { Self::from_raw(region.addr(), region.len(), what) }
    }

    /// View `len` bytes at host address `addr`.
    ///
    /// # Safety
    /// `addr..addr+len` must be readable and writable host memory for all of `'a`
    /// (it may be shared with other threads and processes).
    pub(crate) unsafe fn from_raw(addr: u64, len: u64, what: &'static str) -> Result<Self> {
        if len > 0 && addr == 0 {
            return Err(HalError::invalid(format!(
                "{what} has a null address but {len} bytes: build the handle from a live channel"
            )));
        }
        if addr.checked_add(len).is_none() || len > isize::MAX as u64 {
            return Err(HalError::invalid(format!(
                "{what}: address {addr:#x} + {len} bytes overflows the address space"
            )));
        }
        Ok(HostView {
            base: addr as usize as *mut u8,
            len,
            what,
            _life: PhantomData,
        })
    }

    /// Size in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Host address of byte `off` (no access made).
    pub(crate) fn addr(&self) -> u64 {
        self.base as usize as u64
    }

    fn check_aligned(&self, what: &str, off: u64, align: u64) -> Result<()> {
        let at = self.addr().wrapping_add(off);
        commhal_hal::error::check_aligned(
            format_args!("{what} address ({} + offset {off})", self.what),
            at,
            align,
        )
    }

    /// `n` consecutive 8-byte atomic words starting at byte `off` (8-byte aligned).
    pub(crate) fn words(&self, off: u64, n: u64) -> Result<&'a [AtomicU64]> {
        let bytes = n.checked_mul(8).ok_or_else(|| {
            HalError::invalid(format!("{}: {n} words overflow a byte count", self.what))
        })?;
        check_range(self.what, off, bytes, self.len)?;
        self.check_aligned("8-byte word", off, 8)?;
        if n == 0 {
            return Ok(&[]);
        }
        // SAFETY: off+8n <= len was checked above (so the add stays inside the view),
        // the address is 8-aligned (checked), the memory is valid for 'a (constructor
        // contract) and only ever accessed atomically as words at these offsets.
        unsafe {
            let p = self.base.add(off as usize) as *const AtomicU64;
            Ok(std::slice::from_raw_parts(p, n as usize))
        }
    }

    /// The 4-byte atomic word at byte `off` (4-byte aligned).
    pub(crate) fn word32(&self, off: u64) -> Result<&'a AtomicU32> {
        check_range(self.what, off, 4, self.len)?;
        self.check_aligned("4-byte word", off, 4)?;
        // SAFETY: off+4 <= len and 4-byte alignment were checked; the memory is valid
        // for 'a (constructor contract) and only accessed atomically at this offset.
        unsafe { Ok(&*(self.base.add(off as usize) as *const AtomicU32)) }
    }

    /// `n` FIFO slots (two 8-byte atomic words each) at byte `off` (16-byte aligned).
    pub(crate) fn slots(&self, off: u64, n: u64) -> Result<&'a [crate::fifo::Slot<AtomicU64>]> {
        let bytes = n.checked_mul(16).ok_or_else(|| {
            HalError::invalid(format!("{}: {n} slots overflow a byte count", self.what))
        })?;
        check_range(self.what, off, bytes, self.len)?;
        self.check_aligned("FIFO ring", off, 16)?;
        if n == 0 {
            return Ok(&[]);
        }
        // SAFETY: the range is inside the view and 16-byte aligned (checked); `Slot` is
        // `repr(C, align(16))` over two AtomicU64, so the bytes form `n` slots; the
        // memory is valid for 'a and only accessed atomically.
        unsafe {
            let p = self.base.add(off as usize) as *const crate::fifo::Slot<AtomicU64>;
            Ok(std::slice::from_raw_parts(p, n as usize))
        }
    }

    /// The 8-byte atomic word at byte `off` (8-byte aligned).
    pub(crate) fn word(&self, off: u64) -> Result<&'a AtomicU64> {
        Ok(&self.words(off, 1)?[0])
    }

    /// Copy `len` bytes from `src+src_off` to `dst+dst_off` (ranges may overlap).
    pub(crate) fn copy(
        dst: &HostView<'_>,
        dst_off: u64,
        src: &HostView<'_>,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        check_range(dst.what, dst_off, len, dst.len)?;
        check_range(src.what, src_off, len, src.len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges were checked to lie inside their views, which are valid
        // for their lifetimes; `copy` (memmove) tolerates overlap. Concurrent access
        // to these bytes is excluded by the channel protocol (see module docs).
        unsafe {
            std::ptr::copy(
                src.base.add(src_off as usize),
                dst.base.add(dst_off as usize),
                len as usize,
            );
        }
        Ok(())
    }

    /// Copy bytes out of the view into `out`.
    pub(crate) fn read(&self, off: u64, out: &mut [u8]) -> Result<()> {
        check_range(self.what, off, out.len() as u64, self.len)?;
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: the source range was checked to lie inside the view; `out` is an
        // exclusive Rust slice of exactly the copied length; memmove tolerates overlap.
        unsafe {
            std::ptr::copy(self.base.add(off as usize), out.as_mut_ptr(), out.len());
        }
        Ok(())
    }

    /// Copy `data` into the view at `off`.
    pub(crate) fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        check_range(self.what, off, data.len() as u64, self.len)?;
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the destination range was checked to lie inside the view; `data` is a
        // Rust slice of exactly the copied length; memmove tolerates overlap.
        unsafe {
            std::ptr::copy(data.as_ptr(), self.base.add(off as usize), data.len());
        }
        Ok(())
    }
}

/// View a `u64` we hold exclusively as an atomic (for the `expected` field of a handle
/// borrowed mutably by an executor view, shared by its cooperating threads).
pub(crate) fn atomic_of(v: &mut u64) -> &AtomicU64 {
    // SAFETY: `v` is a valid, exclusively borrowed u64; AtomicU64 has the same size and
    // (on every 64-bit target we build for) alignment as u64 — checked below before
    // the cast is made; the exclusive borrow means no non-atomic access can overlap.
    const _: () = assert!(std::mem::align_of::<AtomicU64>() == std::mem::align_of::<u64>());
    // SAFETY: see above: valid, aligned (const-checked), exclusively borrowed.
    unsafe { AtomicU64::from_ptr(v as *mut u64) }
}
