//! Every `unsafe` line of the executor: byte ranges of registered host memory, the
//! copies and reductions on them, and atomic words in them (the futex syscalls that
//! sleep on those words live in `commhal_channels::futex`).
//!
//! Soundness rests on two promises made by the code that builds a [`Span`]:
//! * the address range is live, host-addressable memory (a host-emu region or mapping
//!   owned by the communicator, or a user slice borrowed for the call) for as long as
//!   the span is used — the executor keeps the owning regions alive across the run;
//! * concurrent access to the *bytes* of a span is excluded by the plan's protocol
//!   (a peer reads or writes a chunk only between the matching signal and wait; the
//!   validator checked every plan before it runs). Words used for synchronisation
//!   (semaphores, LL packets, doorbells) are only ever touched atomically.

use std::sync::atomic::AtomicU64;

/// A byte range of host memory that lives as long as the run using it (module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: a Span is an address range in memory shared between threads by design; every
// access through it is an atomic or a copy the plan protocol orders (module docs).
unsafe impl Send for Span {}
// SAFETY: as for Send.
unsafe impl Sync for Span {}

impl Span {
    pub(crate) const EMPTY: Span = Span {
        ptr: std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8,
        len: 0,
    };

    /// A span over `len` bytes at host address `addr`.
    pub(crate) fn new(addr: u64, len: u64) -> Span {
        if len == 0 {
            return Span::EMPTY;
        }
        Span {
            ptr: addr as usize as *mut u8,
            len: len as usize,
        }
    }

    /// `len` bytes at byte `off`; `None` when out of range.
    #[inline]
    pub(crate) fn sub(&self, off: usize, len: usize) -> Option<Span> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        if len == 0 {
            return Some(Span::EMPTY);
        }
        // SAFETY: off + len <= self.len was checked, so the pointer stays inside the span.
        let ptr = unsafe { self.ptr.add(off) };
        Some(Span { ptr, len })
    }

    /// Whether the two spans share a byte.
    #[inline]
    pub(crate) fn overlaps(&self, o: &Span) -> bool {
        (self.ptr as usize) < (o.ptr as usize + o.len)
            && (o.ptr as usize) < (self.ptr as usize + self.len)
    }
}

/// Copy `src` into `dst` (equal lengths; the ranges may overlap).
#[inline]
pub(crate) fn copy(dst: Span, src: Span) {
    debug_assert_eq!(dst.len, src.len);
    let n = dst.len.min(src.len);
    if n == 0 || dst.ptr == src.ptr {
        return;
    }
    // SAFETY: both ranges are live host memory of at least n bytes (Span contract);
    // `copy` is memmove, so overlap is fine; no other thread touches these bytes now
    // (plan protocol, module docs).
    unsafe { std::ptr::copy(src.ptr, dst.ptr, n) }
}

/// Run `f(dst, src)` on the two spans as slices (equal lengths). `dst` and `src` must not
/// overlap unless they are the very same range, in which case `f` is not called with
/// aliasing slices: the caller skips that case.
#[inline]
pub(crate) fn with_slices<R>(dst: Span, src: Span, f: impl FnOnce(&mut [u8], &[u8]) -> R) -> R {
    let (d, s) = if dst.len == 0 {
        (&mut [][..], &[][..])
    } else {
        // SAFETY: live host memory (Span contract), not accessed by anyone else during
        // the call (plan protocol); the caller guarantees the ranges do not overlap, so
        // the &mut and & slices do not alias.
        unsafe {
            (
                std::slice::from_raw_parts_mut(dst.ptr, dst.len),
                std::slice::from_raw_parts(src.ptr as *const u8, src.len),
            )
        }
    };
    f(d, s)
}

/// Run `f` on `span` as a mutable slice.
#[inline]
pub(crate) fn with_mut<R>(span: Span, f: impl FnOnce(&mut [u8]) -> R) -> R {
    if span.len == 0 {
        return f(&mut []);
    }
    // SAFETY: live host memory (Span contract), exclusively ours during the call (plan
    // protocol).
    f(unsafe { std::slice::from_raw_parts_mut(span.ptr, span.len) })
}

/// Copy a span's bytes into `out` (equal lengths).
#[inline]
pub(crate) fn read_into(span: Span, out: &mut [u8]) {
    let n = span.len.min(out.len());
    if n == 0 {
        return;
    }
    // SAFETY: live host memory of >= n bytes; `out` is a distinct Rust slice.
    unsafe { std::ptr::copy_nonoverlapping(span.ptr as *const u8, out.as_mut_ptr(), n) }
}

/// Copy `data` into the span (equal lengths).
#[inline]
pub(crate) fn write_from(span: Span, data: &[u8]) {
    let n = span.len.min(data.len());
    if n == 0 {
        return;
    }
    // SAFETY: live host memory of >= n bytes; `data` is a distinct Rust slice.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), span.ptr, n) }
}

/// The 8-byte-aligned atomic words of a span (its length must be a multiple of 8).
#[inline]
pub(crate) fn words(span: Span) -> &'static [AtomicU64] {
    if span.len < 8 {
        return &[];
    }
    assert!(
        (span.ptr as usize).is_multiple_of(8),
        "packet/semaphore words must be 8-byte aligned"
    );
    // SAFETY: the range is live (Span contract: the executor keeps the region alive while
    // these references are used — the 'static is never allowed to escape a run), 8-byte
    // aligned (asserted) and only accessed atomically as these words.
    unsafe { std::slice::from_raw_parts(span.ptr as *const AtomicU64, span.len / 8) }
}

/// The span as a shared slice for `'a`.
///
/// # Safety
/// The span's memory must stay live for `'a` and no one may write it while the slice
/// is used (the owner of the region guarantees both, see `comm::Buffer`).
pub(crate) unsafe fn slice<'a>(span: Span) -> &'a [u8] {
    if span.len == 0 {
        return &[];
    }
    // SAFETY: forwarded to the caller's promise.
    unsafe { std::slice::from_raw_parts(span.ptr as *const u8, span.len) }
}

/// The span as a mutable slice for `'a`.
///
/// # Safety
/// As [`slice`], and the caller holds the only access for `'a`.
pub(crate) unsafe fn slice_mut<'a>(span: Span) -> &'a mut [u8] {
    if span.len == 0 {
        return &mut [];
    }
    // SAFETY: forwarded to the caller's promise.
    unsafe { std::slice::from_raw_parts_mut(span.ptr, span.len) }
}
