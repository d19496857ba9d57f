// packets.h — LL ("low latency") packets: data and a flag travel in one store, so a
// reader that sees the expected flag also sees the data; no separate signal needed.
//
//   LL8  = {u32 data; u32 flag}                  one 8-byte store,  4 data bytes
//   LL16 = {u32 data0, flag0, data1, flag1}      one 16-byte store, 8 data bytes
//
// Flag epochs: a packet buffer starts zeroed; every use of it writes a new nonzero
// flag (e.g. 1, 2, 3, ... per iteration) so a reader can never mistake stale packets
// for fresh ones. Caller's job: pick a flag that differs from every value the buffer
// may still hold, and size the packet area (LL8: bytes*2, LL16: bytes*2).
// Alignment: LL8 data 4-byte aligned, bytes % 4 == 0, packets 8-byte aligned;
// LL16 data 8-byte aligned, bytes % 8 == 0, packets 16-byte aligned.
#pragma once
#include "commhal/handles.h"

namespace commhal {

// Write `bytes` of src as LL8 packets to dst_packets (packet i carries word i).
COMMHAL_DEVICE void ll8_write(void* dst_packets, const void* src, u64 bytes, u32 flag,
                              u32 tid, u32 nthreads) {
  const u32* s = reinterpret_cast<const u32*>(src);
  LL8Packet* d = reinterpret_cast<LL8Packet*>(dst_packets);
  const u64 n = bytes / 4;
  for (u64 i = tid; i < n; i += nthreads) store_volatile_v2u32(&d[i], s[i], flag);
}

// Wait for every LL8 packet (bounded by spin_limit per packet) and unpack the data to
// dst. false = some packet of this thread never got `flag` (ERR_PACKET_TIMEOUT set).
COMMHAL_DEVICE bool ll8_read(const void* packets, void* dst, u64 bytes, u32 flag,
                             u64 spin_limit, u32* error_flag, u32 tid, u32 nthreads) {
  const LL8Packet* p = reinterpret_cast<const LL8Packet*>(packets);
  u32* d = reinterpret_cast<u32*>(dst);
  const u64 n = bytes / 4;
  for (u64 i = tid; i < n; i += nthreads) {
    u32 data, f;
    u64 spins = 0;
    for (;;) {
      load_volatile_v2u32(&p[i], data, f);
      if (f == flag) break;
      if (++spins >= spin_limit) {
        set_error_once(error_flag, ERR_PACKET_TIMEOUT);
        return false;
      }
    }
    d[i] = data;
  }
  return true;
}

// Write `bytes` of src as LL16 packets (packet i carries words 2i and 2i+1).
COMMHAL_DEVICE void ll16_write(void* dst_packets, const void* src, u64 bytes, u32 flag,
                               u32 tid, u32 nthreads) {
  const u32* s = reinterpret_cast<const u32*>(src);
  LL16Packet* d = reinterpret_cast<LL16Packet*>(dst_packets);
  const u64 n = bytes / 8;
  for (u64 i = tid; i < n; i += nthreads)
    store_volatile_v4u32(&d[i], s[2 * i], flag, s[2 * i + 1], flag);
}

// Wait for every LL16 packet (both flags must match: a 16-byte load is not promised
// to be single-copy atomic) and unpack to dst.
COMMHAL_DEVICE bool ll16_read(const void* packets, void* dst, u64 bytes, u32 flag,
                              u64 spin_limit, u32* error_flag, u32 tid, u32 nthreads) {
  const LL16Packet* p = reinterpret_cast<const LL16Packet*>(packets);
  u32* d = reinterpret_cast<u32*>(dst);
  const u64 n = bytes / 8;
  for (u64 i = tid; i < n; i += nthreads) {
    u32 d0, f0, d1, f1;
    u64 spins = 0;
    for (;;) {
      load_volatile_v4u32(&p[i], d0, f0, d1, f1);
      if (f0 == flag && f1 == flag) break;
      if (++spins >= spin_limit) {
        set_error_once(error_flag, ERR_PACKET_TIMEOUT);
        return false;
      }
    }
    d[2 * i] = d0;
    d[2 * i + 1] = d1;
  }
  return true;
}

// ---- channel forms: packets go to the peer's buffer, are read from the local one ----

// local_buf + src_off (data) -> remote_buf + dst_off (LL8 packets).
COMMHAL_DEVICE void put_packets_ll8(const MemoryChannelHandle& h, u64 dst_off, u64 src_off,
                                    u64 bytes, u32 flag, u32 tid, u32 nthreads) {
  ll8_write(reinterpret_cast<u8*>(h.remote_buf) + dst_off,
            reinterpret_cast<const u8*>(h.local_buf) + src_off, bytes, flag, tid, nthreads);
}
// local_buf + pkt_off (LL8 packets) -> local_buf + dst_off (data).
COMMHAL_DEVICE bool read_packets_ll8(const MemoryChannelHandle& h, u64 pkt_off, u64 dst_off,
                                     u64 bytes, u32 flag, u32 tid, u32 nthreads) {
  u8* base = reinterpret_cast<u8*>(h.local_buf);
  return ll8_read(base + pkt_off, base + dst_off, bytes, flag, h.spin_limit, h.error_flag,
                  tid, nthreads);
}
COMMHAL_DEVICE void put_packets_ll16(const MemoryChannelHandle& h, u64 dst_off, u64 src_off,
                                     u64 bytes, u32 flag, u32 tid, u32 nthreads) {
  ll16_write(reinterpret_cast<u8*>(h.remote_buf) + dst_off,
             reinterpret_cast<const u8*>(h.local_buf) + src_off, bytes, flag, tid, nthreads);
}
COMMHAL_DEVICE bool read_packets_ll16(const MemoryChannelHandle& h, u64 pkt_off, u64 dst_off,
                                      u64 bytes, u32 flag, u32 tid, u32 nthreads) {
  u8* base = reinterpret_cast<u8*>(h.local_buf);
  return ll16_read(base + pkt_off, base + dst_off, bytes, flag, h.spin_limit, h.error_flag,
                   tid, nthreads);
}

}  // namespace commhal
