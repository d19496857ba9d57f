//! `#[repr(C)]` mirrors of the device handles in `include/commhal/handles.h`.
//!
//! The C++ header is the spec; these structs must match it field for field
//! (`tests/layout.rs` compiles the header with g++ and compares every offset and
//! size). `commhal-channels` builds these handles and re-exports them. Pointer fields
//! are device addresses as `u64` (host addresses on host-emu).

use std::mem::{offset_of, size_of};

/// Error codes device code stores into a handle's `error_flag` (first error wins).
pub mod error_code {
    /// No error.
    pub const NONE: u32 = 0;
    /// A semaphore wait exceeded `wait_ns`.
    pub const WAIT_TIMEOUT: u32 = 1;
    /// A FIFO push found the ring full for `wait_ns` nanoseconds (proxy not draining).
    pub const FIFO_FULL_TIMEOUT: u32 = 2;
    /// A port flush was not acknowledged within `wait_ns` nanoseconds.
    pub const FLUSH_TIMEOUT: u32 = 3;
    /// An LL packet did not arrive within `wait_ns` nanoseconds.
    pub const PACKET_TIMEOUT: u32 = 4;
    /// A port operation's offset or length does not fit the trigger's 32 bits.
    pub const TRIGGER_RANGE: u32 = 5;

    /// Every code with its C++ name (`ERR_` + name), for the layout test and messages.
    pub const ALL: &[(&str, u32)] = &[
        ("ERR_NONE", NONE),
        ("ERR_WAIT_TIMEOUT", WAIT_TIMEOUT),
        ("ERR_FIFO_FULL_TIMEOUT", FIFO_FULL_TIMEOUT),
        ("ERR_FLUSH_TIMEOUT", FLUSH_TIMEOUT),
        ("ERR_PACKET_TIMEOUT", PACKET_TIMEOUT),
        ("ERR_TRIGGER_RANGE", TRIGGER_RANGE),
    ];

    /// What a code means, for error messages.
    pub fn describe(code: u32) -> &'static str {
        match code {
            NONE => "no error",
            WAIT_TIMEOUT => "a device wait on a semaphore timed out (peer never signalled)",
            FIFO_FULL_TIMEOUT => "the proxy FIFO stayed full (is the proxy thread running?)",
            FLUSH_TIMEOUT => "a port flush was never acknowledged by the proxy",
            PACKET_TIMEOUT => "an LL packet never arrived (peer never wrote it, or wrong flag)",
            TRIGGER_RANGE => "a port put offset or length exceeds 32 bits",
            _ => "unknown device error code",
        }
    }
}

/// Device view of one memory channel. See `handles.h` for each field's contract.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryChannelHandle {
    /// Local registered buffer (source of put, destination of get).
    pub local_buf: u64,
    /// The peer's buffer mapped locally (destination of put, source of get).
    pub remote_buf: u64,
    /// This rank's inbound `u64` semaphore.
    pub local_semaphore: u64,
    /// The peer's inbound semaphore, mapped.
    pub remote_semaphore: u64,
    /// Signals consumed so far (0 for a fresh semaphore).
    pub expected: u64,
    /// Address of the `u32` error flag.
    pub error_flag: u64,
    /// Bound of every wait in nanoseconds of the GPU's global timer.
    pub wait_ns: u64,
}

/// One 16-byte proxy request; bit layout in `handles.h` (and [`Trigger::encode`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trigger {
    /// `len` (bits 0..32) | `src_offset` (32..64).
    pub w0: u64,
    /// `dst_offset` (0..32) | src mem id (32..41) | dst mem id (41..50) | type (50..53)
    /// | semaphore id (53..63) | valid (63).
    pub w1: u64,
}

/// Trigger type bits.
pub mod trigger_type {
    /// Copy `len` bytes.
    pub const PUT: u64 = 1;
    /// Increment the peer's semaphore.
    pub const SIGNAL: u64 = 2;
    /// Complete everything earlier, then advance the tail.
    pub const FLUSH: u64 = 4;
}

/// Largest memory id a trigger can carry (9 bits).
pub const TRIGGER_MAX_MEMORY_ID: u32 = 511;
/// Largest semaphore id a trigger can carry (10 bits).
pub const TRIGGER_MAX_SEMAPHORE_ID: u32 = 1023;

/// A decoded [`Trigger`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TriggerFields {
    /// [`trigger_type`] bits.
    pub kind: u64,
    /// Destination offset in the peer's memory.
    pub dst_offset: u32,
    /// Source offset in local memory.
    pub src_offset: u32,
    /// Bytes to copy.
    pub len: u32,
    /// Proxy id of the destination memory.
    pub dst_memory_id: u32,
    /// Proxy id of the source memory.
    pub src_memory_id: u32,
    /// Proxy id of the peer semaphore.
    pub semaphore_id: u32,
}

impl Trigger {
    /// The valid bit of `w1`.
    pub const VALID: u64 = 1 << 63;

    /// Encode exactly as the device's `make_trigger` does; `None` when an id or the
    /// type does not fit its bits.
    pub fn encode(f: &TriggerFields) -> Option<Trigger> {
        if f.dst_memory_id > TRIGGER_MAX_MEMORY_ID
            || f.src_memory_id > TRIGGER_MAX_MEMORY_ID
            || f.semaphore_id > TRIGGER_MAX_SEMAPHORE_ID
            || f.kind > 7
        {
            return None;
        }
        Some(Trigger {
            w0: u64::from(f.len) | (u64::from(f.src_offset) << 32),
            w1: u64::from(f.dst_offset)
                | (u64::from(f.src_memory_id) << 32)
                | (u64::from(f.dst_memory_id) << 41)
                | (f.kind << 50)
                | (u64::from(f.semaphore_id) << 53)
                | Self::VALID,
        })
    }

    /// Decode; `None` when the valid bit is clear (empty slot).
    pub fn decode(&self) -> Option<TriggerFields> {
        if self.w1 & Self::VALID == 0 {
            return None;
        }
        Some(TriggerFields {
            len: self.w0 as u32,
            src_offset: (self.w0 >> 32) as u32,
            dst_offset: self.w1 as u32,
            src_memory_id: ((self.w1 >> 32) & 0x1ff) as u32,
            dst_memory_id: ((self.w1 >> 41) & 0x1ff) as u32,
            kind: (self.w1 >> 50) & 0x7,
            semaphore_id: ((self.w1 >> 53) & 0x3ff) as u32,
        })
    }
}

/// Device view of one port channel. See `handles.h` for each field's contract.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortChannelHandle {
    /// Ring of `fifo_depth` [`Trigger`]s (host-pinned, device-mapped), 16-byte aligned.
    pub fifo: u64,
    /// Slots in the ring (> 0).
    pub fifo_depth: u64,
    /// `u64` count of reserved slots (device atomics).
    pub head: u64,
    /// `u64` count of slots the proxy finished (proxy writes, device reads).
    pub tail: u64,
    /// Proxy id of the peer semaphore SIGNAL increments (< 1024).
    pub semaphore_id: u32,
    /// Proxy id of the local source memory (< 512).
    pub local_memory_id: u32,
    /// Proxy id of the peer destination memory (< 512).
    pub remote_memory_id: u32,
    /// Must be 0.
    pub reserved: u32,
    /// This rank's inbound semaphore (the peer's proxy increments it).
    pub local_semaphore: u64,
    /// Signals consumed so far.
    pub expected: u64,
    /// Address of the `u32` error flag.
    pub error_flag: u64,
    /// Bound of every wait in nanoseconds of the GPU's global timer.
    pub wait_ns: u64,
}

/// Device view of a switch (multicast) channel.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwitchChannelHandle {
    /// Multicast address.
    pub multicast: u64,
    /// This member's unicast buffer.
    pub unicast: u64,
    /// Bytes bound.
    pub size: u64,
}

/// LL8 packet: 4 data bytes and their flag, one 8-byte store.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ll8Packet {
    /// Payload.
    pub data: u32,
    /// Epoch flag.
    pub flag: u32,
}

/// LL16 packet: 8 data bytes and two flags, one 16-byte store.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ll16Packet {
    /// Payload word 0.
    pub data0: u32,
    /// Flag for word 0.
    pub flag0: u32,
    /// Payload word 1.
    pub data1: u32,
    /// Flag for word 1.
    pub flag1: u32,
}

/// One field's place, as the layout test compares it with C++.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLayout {
    /// C++ struct name.
    pub strukt: &'static str,
    /// Field name (same in C++ and Rust).
    pub field: &'static str,
    /// Byte offset.
    pub offset: usize,
    /// Byte size.
    pub size: usize,
}

macro_rules! fields {
    ($cname:literal, $ty:ty, [$($f:ident : $fty:ty),* $(,)?]) => {
        [$(FieldLayout {
            strukt: $cname,
            field: stringify!($f),
            offset: offset_of!($ty, $f),
            size: size_of::<$fty>(),
        }),*]
    };
}

/// Every field of every handle, in declaration order, with the C++ struct names
/// (the order of `COMMHAL_HANDLE_LAYOUT` in `handles.h`).
pub fn field_table() -> Vec<FieldLayout> {
    let mut v = Vec::new();
    v.extend(fields!("MemoryChannelHandle", MemoryChannelHandle, [
        local_buf: u64, remote_buf: u64, local_semaphore: u64, remote_semaphore: u64,
        expected: u64, error_flag: u64, wait_ns: u64,
    ]));
    v.extend(fields!("Trigger", Trigger, [w0: u64, w1: u64]));
    v.extend(fields!("PortChannelHandle", PortChannelHandle, [
        fifo: u64, fifo_depth: u64, head: u64, tail: u64, semaphore_id: u32,
        local_memory_id: u32, remote_memory_id: u32, reserved: u32, local_semaphore: u64,
        expected: u64, error_flag: u64, wait_ns: u64,
    ]));
    v.extend(fields!("SwitchChannelHandle", SwitchChannelHandle, [
        multicast: u64, unicast: u64, size: u64,
    ]));
    v.extend(fields!("LL8Packet", Ll8Packet, [data: u32, flag: u32]));
    v.extend(fields!("LL16Packet", Ll16Packet, [
        data0: u32, flag0: u32, data1: u32, flag1: u32,
    ]));
    v
}

/// `(C++ struct name, size, align)` of every handle.
pub fn size_table() -> Vec<(&'static str, usize, usize)> {
    use std::mem::align_of;
    vec![
        (
            "MemoryChannelHandle",
            size_of::<MemoryChannelHandle>(),
            align_of::<MemoryChannelHandle>(),
        ),
        ("Trigger", size_of::<Trigger>(), align_of::<Trigger>()),
        (
            "PortChannelHandle",
            size_of::<PortChannelHandle>(),
            align_of::<PortChannelHandle>(),
        ),
        (
            "SwitchChannelHandle",
            size_of::<SwitchChannelHandle>(),
            align_of::<SwitchChannelHandle>(),
        ),
        ("LL8Packet", size_of::<Ll8Packet>(), align_of::<Ll8Packet>()),
        (
            "LL16Packet",
            size_of::<Ll16Packet>(),
            align_of::<Ll16Packet>(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_round_trips() {
        let f = TriggerFields {
            kind: trigger_type::PUT | trigger_type::SIGNAL,
            dst_offset: 0xdead_beef,
            src_offset: 0x1234_5678,
            len: 0xffff_ffff,
            dst_memory_id: 511,
            src_memory_id: 3,
            semaphore_id: 1023,
        };
        let t = Trigger::encode(&f).expect("fits");
        assert_eq!(t.decode(), Some(f));
        assert_eq!(Trigger::default().decode(), None, "zero slot is empty");
    }

    #[test]
    fn trigger_rejects_wide_ids() {
        let f = TriggerFields {
            dst_memory_id: 512,
            ..Default::default()
        };
        assert_eq!(Trigger::encode(&f), None);
        let f = TriggerFields {
            semaphore_id: 1024,
            ..Default::default()
        };
        assert_eq!(Trigger::encode(&f), None);
    }
}
