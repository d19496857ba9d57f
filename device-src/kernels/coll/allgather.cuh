// coll/allgather.cuh — all-gather: direct and LL16.
#pragma once
#include "coll/ll16.cuh"

// All-gather: a.count = bytes per rank; this rank's input a.in[rank] goes to byte offset
// rank * count of every output (skipped where it already is, i.e. in place).
COMMHAL_DEVICE void allgather(const CollArgs& a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u64 bytes = a.count;
  const u64 dst_off = (u64)a.rank * bytes;
  const u64 src = a.in[a.rank];
  bool aligned = (bytes % 16) == 0 && (src % 16) == 0;
  for (u32 p = 0; p < a.nranks; ++p) aligned = aligned && ((a.out[p] + dst_off) % 16) == 0;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (aligned) {
    const u64 nvec = bytes / 16;
    for (u64 v = tid0; v < nvec; v += gthreads) {
      const v16 x = reinterpret_cast<const v16*>(src)[v];
      for (u32 k = 0; k < a.nranks; ++k) {
        const u32 p = (a.rank + k) % a.nranks;
        if (a.out[p] + dst_off == src) continue;
        reinterpret_cast<v16*>(a.out[p] + dst_off)[v] = x;
      }
    }
  } else {
    for (u32 p = 0; p < a.nranks; ++p) {
      if (a.out[p] + dst_off == src) continue;
      copy_cooperative(reinterpret_cast<void*>(a.out[p] + dst_off),
                       reinterpret_cast<const void*>(src), bytes, (u32)tid0, (u32)gthreads);
    }
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}

// All-gather, LL: a.count = bytes per rank, a multiple of 8 (host checks).
COMMHAL_DEVICE void allgather_ll(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u64 bytes = a.count;
  const u64 npk = bytes / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const uint2* src = reinterpret_cast<const uint2*>(a.in[a.rank]);
  u8* out = reinterpret_cast<u8*>(a.out[a.rank]);
  uint2* own = reinterpret_cast<uint2*>(out + (u64)a.rank * bytes);
  for (u64 i = tid0; i < npk; i += gthreads) {
    const uint2 v = src[i];
    for (u32 p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      ll16_store(ll_slot(a, p, a.rank, parity) + i * 16, v, flag);
    }
    if (reinterpret_cast<const void*>(own) != reinterpret_cast<const void*>(src)) own[i] = v;
  }
  bool ok = true;
  for (u64 i = tid0; i < npk; i += gthreads) {
    for (u32 p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      reinterpret_cast<uint2*>(out + (u64)p * bytes)[i] =
          ll16_wait(ll_slot(a, a.rank, p, parity) + i * 16, flag, bound(a), ok);
    }
  }
}
