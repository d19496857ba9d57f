//! Stream memory operations: a stream stores a word ([`write_value32`],
//! [`write_value64`]) or waits for one ([`wait_value32`]) in stream order, without a
//! kernel. Drivers without them lack the symbols: check
//! [`symbol_present`](crate::driver::symbol_present) with [`WRITE_VALUE32`],
//! [`WAIT_VALUE32`] or [`WRITE_VALUE64`] first (cudarc panics on a missing symbol).

use cudarc::driver::sys;

use crate::driver::check;
use crate::error::Result;
use crate::stream::Stream;

/// The driver symbol behind [`write_value32`].
pub const WRITE_VALUE32: &str = "cuStreamWriteValue32_v2";
/// The driver symbol behind [`wait_value32`].
pub const WAIT_VALUE32: &str = "cuStreamWaitValue32_v2";
/// The driver symbol behind [`write_value64`].
pub const WRITE_VALUE64: &str = "cuStreamWriteValue64_v2";

/// Queue "store `value` at `addr`" on `stream` (32 bits, with the default memory
/// barrier: the stream's earlier work, e.g. a copy, is visible before the value).
///
/// # Safety
/// `addr` is 4-byte aligned device memory (own or a mapped peer's) alive until the
/// stream executed the write; the driver has [`WRITE_VALUE32`].
pub unsafe fn write_value32(stream: &Stream, addr: u64, value: u32) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: forwarded contract; stream alive and its context bound.
    let r = unsafe {
        sys::cuStreamWriteValue32_v2(
            stream.raw(),
            addr,
            value,
            sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
        )
    };
    check(r, "cuStreamWriteValue32", || {
        format!("queueing the flag write {value} -> {addr:#x} (stream memory operations)")
    })
}

/// Queue "store `value` at `addr`" on `stream` (64 bits, default memory barrier as
/// [`write_value32`]).
///
/// # Safety
/// `addr` is 8-byte aligned device memory (own or a mapped peer's) alive until the
/// stream executed the write; the driver has [`WRITE_VALUE64`].
pub unsafe fn write_value64(stream: &Stream, addr: u64, value: u64) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: forwarded contract; stream alive and its context bound.
    let r = unsafe {
        sys::cuStreamWriteValue64_v2(
            stream.raw(),
            addr,
            value,
            sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
        )
    };
    check(r, "cuStreamWriteValue64", || {
        format!("queueing the write {value} -> {addr:#x} (are stream memory operations enabled?)")
    })
}

/// Queue "wait until the u32 at `addr` is >= `value`" on `stream` (the host does not
/// block; nothing bounds the wait).
///
/// # Safety
/// `addr` is 4-byte aligned device memory of the stream's context (or pinned host
/// memory mapped for it) alive until the wait passed; the driver has
/// [`WAIT_VALUE32`].
pub unsafe fn wait_value32(stream: &Stream, addr: u64, value: u32) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: forwarded contract; stream alive and its context bound.
    let r = unsafe {
        sys::cuStreamWaitValue32_v2(
            stream.raw(),
            addr,
            value,
            sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
        )
    };
    check(r, "cuStreamWaitValue32", || {
        format!("queueing the wait for {value} at {addr:#x} (stream memory operations)")
    })
}
