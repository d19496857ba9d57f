//! The `#[repr(C)]` device handles: what device code (CUDA/HIP kernels, or the host-emu
//! executor in [`crate::device`]) needs to run channel operations.
//!
//! **One definition.** The layouts are specified by `device-src/include/commhal/handles.h`
//! and mirrored in [`commhal_device_src::layout`] (checked field by field against the
//! C++ header there); this module only re-exports them. Field by field:
//!
//! [`MemoryChannelHandle`] (56 bytes):
//! `local_buf` our buffer (put source, get destination, where packets are read) ·
//! `remote_buf` the peer's buffer mapped here (put/packet destination, get source) ·
//! `local_semaphore` our inbound u64 counter (the peer's signal adds 1) ·
//! `remote_semaphore` the peer's inbound counter mapped here (our signal adds 1) ·
//! `expected` signals consumed so far (a value; one waiter at a time) ·
//! `error_flag` address of a u32 where device code reports the first error
//! ([`error_code`]) · `wait_ns` bound of every device wait in nanoseconds (`commhal/wait.h`).
//!
//! [`PortChannelHandle`] (80 bytes):
//! `fifo` ring of `fifo_depth` 16-byte [`RawTrigger`]s (16-byte aligned) · `head` u64
//! claim counter · `tail` u64 count of triggers the proxy finished · `semaphore_id`,
//! `local_memory_id` (source), `remote_memory_id` (destination): proxy ids the triggers
//! carry · `reserved` 0 · `local_semaphore` our inbound counter (the peer's proxy adds
//! 1) · `expected`, `error_flag`, `wait_ns` as above.
//!
//! [`SwitchChannelHandle`] (24 bytes): `multicast` the group's multicast address (on
//! host-emu: the member descriptor `[magic, n, len, base_0..]`) · `unicast` our bound
//! buffer · `size` data bytes usable by reduce/broadcast.
//!
//! Handles are plain data; they do not keep memory alive — the channel that produced a
//! handle must outlive every use of it. The handles carry no buffer sizes, so the host
//! executor's `from_handle` constructors take the sizes as arguments.

pub use commhal_device_src::layout::{
    Ll8Packet, Ll16Packet, MemoryChannelHandle, PortChannelHandle, SwitchChannelHandle,
    Trigger as RawTrigger, TriggerFields, error_code, trigger_type,
};

/// Default bound of every device-side wait written into handles (`wait_ns`, 10 s of
/// the GPU's global timer; see `commhal/wait.h`). The host executor bounds its waits
/// with [`crate::WaitPolicy`].
pub const DEFAULT_WAIT_NS: u64 = 10_000_000_000;
