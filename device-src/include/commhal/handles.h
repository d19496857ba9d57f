// handles.h — the device handles: the #[repr(C)] structs the host builds, copies to
// device memory (or, on host-emu, keeps in host memory) and passes to kernels.
//
// THIS FILE IS THE LAYOUT SPEC. The Rust mirrors live in
// commhal-device-src/src/layout.rs (re-exported by commhal-channels). Every field is
// listed once in a COMMHAL_*_FIELDS table below as X(struct, field, offset, size);
//   * device compiles (NVRTC) static_assert every offset/size against the table;
//   * the Rust test device-src/tests/layout.rs compiles this header with g++ under
//     COMMHAL_HOST_LAYOUT, prints offsetof/sizeof of every table row, and compares
//     them with std::mem::offset_of!/size_of of the Rust mirrors.
// Change a struct here, in its table, and in layout.rs together.
//
// Pointers are device addresses (u64 on the Rust side). All pointer fields must be
// non-null and 8-byte aligned unless the field says otherwise; the host validates
// this when it builds a handle, device code does not check.
#pragma once
#include "commhal/commhal_port.h"

namespace commhal {

// ---- error codes written to *error_flag (first error wins; 0 = no error) ----------
#define COMMHAL_ERRORS(X)          \
  X(ERR_NONE, 0)                   \
  X(ERR_WAIT_TIMEOUT, 1)           \
  X(ERR_FIFO_FULL_TIMEOUT, 2)      \
  X(ERR_FLUSH_TIMEOUT, 3)          \
  X(ERR_PACKET_TIMEOUT, 4)         \
  X(ERR_TRIGGER_RANGE, 5)
#define COMMHAL_DECLARE_ERROR(name, value) static const u32 name = value;
COMMHAL_ERRORS(COMMHAL_DECLARE_ERROR)
#undef COMMHAL_DECLARE_ERROR

// ---- MemoryChannelHandle (56 bytes) ---------------------------------------------
// One direction-pair of a memory channel as seen by this rank's device code.
struct MemoryChannelHandle {
  // Local registered buffer: source of put, destination of get / read_packets.
  void* local_buf;
  // The peer's registered buffer, mapped into this device's address space
  // (cuMem import + map, or peer access): destination of put, source of get.
  void* remote_buf;
  // This rank's inbound semaphore (8-byte counter in local device memory); the peer's
  // signal increments it, wait() reads it.
  u64* local_semaphore;
  // The peer's inbound semaphore, mapped; signal() increments it.
  u64* remote_semaphore;
  // Number of signals this side has consumed so far. wait()/poll() increment it and
  // compare the semaphore against it. Host initialises it to 0 (or to the semaphore's
  // current value when reusing a semaphore). Only ONE thread may wait at a time.
  u64 expected;
  // Where a timeout is reported (u32 in device or host-mapped memory, host zeroes it).
  u32* error_flag;
  // Upper bound on spin iterations of every wait; must be > 0.
  u64 wait_ns;
};

#define COMMHAL_MEMORY_CHANNEL_FIELDS(X)                 \
  X(MemoryChannelHandle, local_buf, 0, 8)                \
  X(MemoryChannelHandle, remote_buf, 8, 8)               \
  X(MemoryChannelHandle, local_semaphore, 16, 8)         \
  X(MemoryChannelHandle, remote_semaphore, 24, 8)        \
  X(MemoryChannelHandle, expected, 32, 8)                \
  X(MemoryChannelHandle, error_flag, 40, 8)              \
  X(MemoryChannelHandle, wait_ns, 48, 8)
#define COMMHAL_MEMORY_CHANNEL_SIZE 56

// ---- Trigger (16 bytes): one request from device code to the host proxy ----------
// w0: bits  0..31 len (bytes)          bits 32..63 src_offset (bytes, in src memory)
// w1: bits  0..31 dst_offset (bytes)   bits 32..40 src_memory_id (9 bits)
//     bits 41..49 dst_memory_id (9)    bits 50..52 type (TRIGGER_PUT|SIGNAL|FLUSH)
//     bits 53..62 semaphore_id (10)    bit  63     valid (1 = slot holds a trigger)
// Device writes w0 first, then w1 with a system-scope release (valid bit set last).
// The proxy polls w1 with acquire, reads w0, performs the request, stores w1 = 0 and
// then advances *tail (release). For FLUSH the proxy advances *tail only after the
// port's flush() returned; for PUT/SIGNAL once the request is issued.
struct Trigger {
  u64 w0;
  u64 w1;
};
#define COMMHAL_TRIGGER_FIELDS(X) \
  X(Trigger, w0, 0, 8)            \
  X(Trigger, w1, 8, 8)
#define COMMHAL_TRIGGER_SIZE 16

static const u64 TRIGGER_PUT = 1;
static const u64 TRIGGER_SIGNAL = 2;
static const u64 TRIGGER_FLUSH = 4;
static const u32 TRIGGER_MAX_MEMORY_ID = 511;   // 9 bits
static const u32 TRIGGER_MAX_SEMAPHORE_ID = 1023;  // 10 bits

COMMHAL_HOST_DEVICE Trigger make_trigger(u64 type, u32 dst_offset, u32 src_offset, u32 len,
                                        u32 dst_memory_id, u32 src_memory_id,
                                        u32 semaphore_id) {
  Trigger t;
  t.w0 = (u64)len | ((u64)src_offset << 32);
  t.w1 = (u64)dst_offset | ((u64)(src_memory_id & 0x1ffu) << 32) |
         ((u64)(dst_memory_id & 0x1ffu) << 41) | ((type & 0x7ull) << 50) |
         ((u64)(semaphore_id & 0x3ffu) << 53) | (1ull << 63);
  return t;
}

// ---- PortChannelHandle (80 bytes) ----------------------------------------------
struct PortChannelHandle {
  // Ring of fifo_depth triggers in host-pinned memory mapped for the device.
  Trigger* fifo;
  // Number of slots in the ring (> 0).
  u64 fifo_depth;
  // Count of triggers ever reserved; device threads atomically add 1 to reserve slot
  // (old value) % fifo_depth. Device memory (or host-mapped), host zeroes it.
  u64* head;
  // Count of triggers the proxy finished with (see Trigger); written by the proxy,
  // read by device code to detect a full ring and to wait for a flush. Host-mapped.
  u64* tail;
  // Proxy id of the peer's semaphore that SIGNAL triggers increment (< 1024).
  u32 semaphore_id;
  // Proxy id of the local (source) registered memory (< 512).
  u32 local_memory_id;
  // Proxy id of the peer's (destination) registered memory (< 512).
  u32 remote_memory_id;
  // Must be 0.
  u32 reserved;
  // This rank's inbound semaphore, incremented by the peer's proxy; wait() reads it.
  u64* local_semaphore;
  // Signals consumed so far (as MemoryChannelHandle::expected).
  u64 expected;
  // Where a timeout is reported.
  u32* error_flag;
  // Upper bound on spin iterations of every wait (full ring, flush, semaphore); > 0.
  u64 wait_ns;
};

#define COMMHAL_PORT_CHANNEL_FIELDS(X)               \
  X(PortChannelHandle, fifo, 0, 8)                   \
  X(PortChannelHandle, fifo_depth, 8, 8)             \
  X(PortChannelHandle, head, 16, 8)                  \
  X(PortChannelHandle, tail, 24, 8)                  \
  X(PortChannelHandle, semaphore_id, 32, 4)          \
  X(PortChannelHandle, local_memory_id, 36, 4)       \
  X(PortChannelHandle, remote_memory_id, 40, 4)      \
  X(PortChannelHandle, reserved, 44, 4)              \
  X(PortChannelHandle, local_semaphore, 48, 8)       \
  X(PortChannelHandle, expected, 56, 8)              \
  X(PortChannelHandle, error_flag, 64, 8)            \
  X(PortChannelHandle, wait_ns, 72, 8)
#define COMMHAL_PORT_CHANNEL_SIZE 80

// ---- SwitchChannelHandle (24 bytes) --------------------------------------------
struct SwitchChannelHandle {
  // Multicast address of the group (reduce reads / broadcast stores go here).
  void* multicast;
  // This member's own buffer bound into the group.
  void* unicast;
  // Bytes bound (same for every member).
  u64 size;
};
#define COMMHAL_SWITCH_CHANNEL_FIELDS(X) \
  X(SwitchChannelHandle, multicast, 0, 8) \
  X(SwitchChannelHandle, unicast, 8, 8)   \
  X(SwitchChannelHandle, size, 16, 8)
#define COMMHAL_SWITCH_CHANNEL_SIZE 24

// ---- LL packets ------------------------------------------------------------------
// LL8: 4 data bytes + 4 flag bytes, written with one 8-byte store.
struct LL8Packet {
  u32 data;
  u32 flag;
};
#define COMMHAL_LL8_FIELDS(X) \
  X(LL8Packet, data, 0, 4)    \
  X(LL8Packet, flag, 4, 4)
#define COMMHAL_LL8_SIZE 8

// LL16: 8 data bytes + two flags, written with one 16-byte store.
struct LL16Packet {
  u32 data0;
  u32 flag0;
  u32 data1;
  u32 flag1;
};
#define COMMHAL_LL16_FIELDS(X)  \
  X(LL16Packet, data0, 0, 4)    \
  X(LL16Packet, flag0, 4, 4)    \
  X(LL16Packet, data1, 8, 4)    \
  X(LL16Packet, flag1, 12, 4)
#define COMMHAL_LL16_SIZE 16

// Every table, for the layout checks.
#define COMMHAL_HANDLE_LAYOUT(X)     \
  COMMHAL_MEMORY_CHANNEL_FIELDS(X)   \
  COMMHAL_TRIGGER_FIELDS(X)          \
  COMMHAL_PORT_CHANNEL_FIELDS(X)     \
  COMMHAL_SWITCH_CHANNEL_FIELDS(X)   \
  COMMHAL_LL8_FIELDS(X)              \
  COMMHAL_LL16_FIELDS(X)

#define COMMHAL_HANDLE_SIZES(X)                          \
  X(MemoryChannelHandle, COMMHAL_MEMORY_CHANNEL_SIZE)    \
  X(Trigger, COMMHAL_TRIGGER_SIZE)                       \
  X(PortChannelHandle, COMMHAL_PORT_CHANNEL_SIZE)        \
  X(SwitchChannelHandle, COMMHAL_SWITCH_CHANNEL_SIZE)    \
  X(LL8Packet, COMMHAL_LL8_SIZE)                         \
  X(LL16Packet, COMMHAL_LL16_SIZE)

}  // namespace commhal

// Buffers of Trigger / LL8Packet / LL16Packet are accessed with 8- and 16-byte
// vector instructions: the host must place them at 16-byte aligned addresses (the
// structs' own alignment is the natural one, 8 / 4 / 4, identical in Rust).

#define COMMHAL_CHECK_FIELD(s, f, off, size)                                           \
  static_assert(COMMHAL_OFFSETOF(commhal::s, f) == (off), #s "::" #f " offset mismatch"); \
  static_assert(sizeof(((commhal::s*)0)->f) == (size), #s "::" #f " size mismatch");
#define COMMHAL_CHECK_SIZE(s, size) \
  static_assert(sizeof(commhal::s) == (size), #s " size mismatch");
COMMHAL_HANDLE_LAYOUT(COMMHAL_CHECK_FIELD)
COMMHAL_HANDLE_SIZES(COMMHAL_CHECK_SIZE)
#undef COMMHAL_CHECK_FIELD
#undef COMMHAL_CHECK_SIZE
