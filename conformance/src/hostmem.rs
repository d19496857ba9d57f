//! Host access to host-addressable registered memory: the suite's only `unsafe` code.
//!
//! Cases read and write their own buffers (put sources, receive areas) from the host.
//! Every access is bounds-checked against the [`Region`] and refused for memory the
//! host cannot address ([`MemoryKind::Device`]). Bytes are copied with plain
//! `memmove`, as the channels crate does: the channel protocol under test decides when
//! a peer may touch them; a broken backend gives wrong bytes, never a crash.

use std::sync::atomic::AtomicU64;

use commhal_hal::error::{check_aligned, check_range};
use commhal_hal::{HalError, MemoryKind, Region, Result};

fn host_ptr(region: &dyn Region, off: u64, len: u64, what: &str) -> Result<*mut u8> {
    if !matches!(
        region.kind(),
        MemoryKind::HostShared | MemoryKind::HostPinned
    ) {
        return Err(HalError::invalid(format!(
            "{what}: the conformance suite reads and writes buffers from the host, but this one is {:?} memory; run the case with host-addressable memory",
            region.kind()
        )));
    }
    check_range(what, off, len, region.len())?;
    Ok(region.addr().wrapping_add(off) as usize as *mut u8)
}

/// Copy `out.len()` bytes at `off` of `region` into `out`.
pub fn read(region: &dyn Region, off: u64, out: &mut [u8]) -> Result<()> {
    let p = host_ptr(region, off, out.len() as u64, "host read")?;
    if !out.is_empty() {
        // SAFETY: `host_ptr` checked that off..off+len lies inside the region, whose
        // Region contract keeps addr..addr+len valid while `region` is borrowed, and
        // that the memory is host-addressable; `out` is an exclusive slice of len bytes.
        unsafe { std::ptr::copy(p, out.as_mut_ptr(), out.len()) };
    }
    Ok(())
}

/// Copy `data` into `region` at `off`.
pub fn write(region: &dyn Region, off: u64, data: &[u8]) -> Result<()> {
    let p = host_ptr(region, off, data.len() as u64, "host write")?;
    if !data.is_empty() {
        // SAFETY: as in `read`: the destination range is inside the live, host-addressable
        // region; `data` is a Rust slice of exactly the copied length.
        unsafe { std::ptr::copy(data.as_ptr(), p, data.len()) };
    }
    Ok(())
}

/// Set `len` bytes at `off` to `value`.
pub fn fill(region: &dyn Region, off: u64, len: u64, value: u8) -> Result<()> {
    let p = host_ptr(region, off, len, "host fill")?;
    if len > 0 {
        // SAFETY: as in `write`: off..off+len is inside the live, host-addressable region.
        unsafe { std::ptr::write_bytes(p, value, len as usize) };
    }
    Ok(())
}

/// The 64-bit word at `off` (8-byte aligned address) as an atomic, for polling flags.
pub fn atomic_u64(region: &dyn Region, off: u64) -> Result<&AtomicU64> {
    let p = host_ptr(region, off, 8, "host atomic word")?;
    check_aligned("host atomic word address", p as usize as u64, 8)?;
    // SAFETY: 8 bytes at `p` lie inside the region (checked), are 8-byte aligned
    // (checked) and stay valid while `region` is borrowed (the returned lifetime);
    // AtomicU64 has the size and alignment of u64.
    Ok(unsafe { &*(p as *const AtomicU64) })
}
