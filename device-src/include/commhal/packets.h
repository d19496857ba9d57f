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
#include "commhal/wait.h"

namespace commhal {

// ---- one packet -----------------------------------------------------------------

// Store one LL8 packet: 4 data bytes and the flag in one 8-byte store.
COMMHAL_DEVICE void ll8_store(void* pkt, u32 data, u32 flag) {
  store_volatile_v2u32(pkt, data, flag);
}

// Wait (bounded) for the LL8 packet at `pkt` to carry `flag`; its data. ok = false
// once this or an earlier wait of the caller gave up (ERR_PACKET_TIMEOUT stored; the
// data is then garbage).
COMMHAL_DEVICE u32 ll8_wait(const void* pkt, u32 flag, const WaitBound& b, bool& ok) {
  u32 data = 0, f = 0;
  u64 t0 = 0;
  for (u32 s = 0; ok; ++s) {
    load_volatile_v2u32(pkt, data, f);
    if (f == flag) break;
    if (wait_expired(b, s, t0, ERR_PACKET_TIMEOUT)) ok = false;
  }
  return data;
}

// Store one LL16 packet: 8 data bytes, each word with the flag, in one 16-byte store.
COMMHAL_DEVICE void ll16_store(void* pkt, uint2 data, u32 flag) {
  store_volatile_v4u32(pkt, data.x, flag, data.y, flag);
}

// Wait (bounded) for the LL16 packet at `pkt`: both flags must match (a 16-byte load is
// not promised to be single-copy atomic); its 8 data bytes. ok as for ll8_wait.
COMMHAL_DEVICE uint2 ll16_wait(const void* pkt, u32 flag, const WaitBound& b, bool& ok) {
  u32 d0 = 0, f0 = 0, d1 = 0, f1 = 0;
  u64 t0 = 0;
  for (u32 s = 0; ok; ++s) {
    load_volatile_v4u32(pkt, d0, f0, d1, f1);
    if (f0 == flag && f1 == flag) break;
    if (wait_expired(b, s, t0, ERR_PACKET_TIMEOUT)) ok = false;
  }
  return make_uint2(d0, d1);
}

// ---- buffers of packets, spread over threads tid = 0..nthreads-1 ------------------

// Write `bytes` of src as LL8 packets to dst_packets (packet i carries word i).
COMMHAL_DEVICE void ll8_write(void* dst_packets, const void* src, u64 bytes, u32 flag,
                              u32 tid, u32 nthreads) {
  const u32* s = reinterpret_cast<const u32*>(src);
  LL8Packet* d = reinterpret_cast<LL8Packet*>(dst_packets);
  const u64 n = bytes / 4;
  for (u64 i = tid; i < n; i += nthreads) ll8_store(&d[i], s[i], flag);
}

// Wait for every LL8 packet and unpack the data to dst. false = some packet of this
// thread never got `flag` (ERR_PACKET_TIMEOUT stored).
COMMHAL_DEVICE bool ll8_read(const void* packets, void* dst, u64 bytes, u32 flag,
                             const WaitBound& b, u32 tid, u32 nthreads) {
  const LL8Packet* p = reinterpret_cast<const LL8Packet*>(packets);
  u32* d = reinterpret_cast<u32*>(dst);
  const u64 n = bytes / 4;
  bool ok = true;
  for (u64 i = tid; i < n && ok; i += nthreads) {
    const u32 data = ll8_wait(&p[i], flag, b, ok);
    if (ok) d[i] = data;
  }
  return ok;
}

// Write `bytes` of src as LL16 packets (packet i carries words 2i and 2i+1).
COMMHAL_DEVICE void ll16_write(void* dst_packets, const void* src, u64 bytes, u32 flag,
                               u32 tid, u32 nthreads) {
  const uint2* s = reinterpret_cast<const uint2*>(src);
  LL16Packet* d = reinterpret_cast<LL16Packet*>(dst_packets);
  const u64 n = bytes / 8;
  for (u64 i = tid; i < n; i += nthreads) ll16_store(&d[i], s[i], flag);
}

// Wait for every LL16 packet and unpack to dst.
COMMHAL_DEVICE bool ll16_read(const void* packets, void* dst, u64 bytes, u32 flag,
                              const WaitBound& b, u32 tid, u32 nthreads) {
  const LL16Packet* p = reinterpret_cast<const LL16Packet*>(packets);
  uint2* d = reinterpret_cast<uint2*>(dst);
  const u64 n = bytes / 8;
  bool ok = true;
  for (u64 i = tid; i < n && ok; i += nthreads) {
    const uint2 data = ll16_wait(&p[i], flag, b, ok);
    if (ok) d[i] = data;
  }
  return ok;
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
  return ll8_read(base + pkt_off, base + dst_off, bytes, flag, channel_bound(h), tid,
                  nthreads);
}
COMMHAL_DEVICE void put_packets_ll16(const MemoryChannelHandle& h, u64 dst_off, u64 src_off,
                                     u64 bytes, u32 flag, u32 tid, u32 nthreads) {
  ll16_write(reinterpret_cast<u8*>(h.remote_buf) + dst_off,
             reinterpret_cast<const u8*>(h.local_buf) + src_off, bytes, flag, tid, nthreads);
}
COMMHAL_DEVICE bool read_packets_ll16(const MemoryChannelHandle& h, u64 pkt_off, u64 dst_off,
                                      u64 bytes, u32 flag, u32 tid, u32 nthreads) {
  u8* base = reinterpret_cast<u8*>(h.local_buf);
  return ll16_read(base + pkt_off, base + dst_off, bytes, flag, channel_bound(h), tid,
                   nthreads);
}

}  // namespace commhal
