// copy.h — cooperative copies over many threads.
#pragma once
#include "commhal/commhal_port.h"

namespace commhal {

// Copy `bytes` from src to dst using threads tid = 0..nthreads-1 (every one of them
// must call this with the same arguments). Plain (weak) loads and stores: the copy
// becomes visible to others only through a later release (a signal).
// When src and dst share their address modulo 16 the bulk moves in 16-byte vectors
// and only the unaligned head and tail go byte by byte; when they share it modulo 4,
// in 4-byte words; otherwise byte by byte. Any length and alignment is correct.
COMMHAL_DEVICE void copy_cooperative(void* dst, const void* src, u64 bytes, u32 tid,
                                     u32 nthreads) {
  u8* d = reinterpret_cast<u8*>(dst);
  const u8* s = reinterpret_cast<const u8*>(src);
  const u64 da = reinterpret_cast<u64>(d);
  const u64 sa = reinterpret_cast<u64>(s);
  u64 unit = 1;
  if (((da ^ sa) & 15) == 0) {
    unit = 16;
  } else if (((da ^ sa) & 3) == 0) {
    unit = 4;
  }
  u64 head = (unit - (da & (unit - 1))) & (unit - 1);
  if (head > bytes) head = bytes;
  // unit == 1: everything goes through the byte loop below (no bulk phase).
  const u64 nbulk = unit == 1 ? 0 : (bytes - head) / unit;
  const u64 tail_start = head + nbulk * unit;
  for (u64 i = tid; i < head; i += nthreads) d[i] = s[i];
  if (unit == 16) {
    v16* d16 = reinterpret_cast<v16*>(d + head);
    const v16* s16 = reinterpret_cast<const v16*>(s + head);
    for (u64 i = tid; i < nbulk; i += nthreads) d16[i] = s16[i];
  } else if (unit == 4) {
    u32* d4 = reinterpret_cast<u32*>(d + head);
    const u32* s4 = reinterpret_cast<const u32*>(s + head);
    for (u64 i = tid; i < nbulk; i += nthreads) d4[i] = s4[i];
  }
  for (u64 i = tail_start + tid; i < bytes; i += nthreads) d[i] = s[i];
}

}  // namespace commhal
