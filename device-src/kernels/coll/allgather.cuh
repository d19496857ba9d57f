// coll/allgather.cuh — all-gather: direct and LL16.
#pragma once
#include "coll/ll16.cuh"

// The all-gather's copies in warp units (as MSCCL++'s full-mesh all-gather): a unit is
// AG_UNIT_VECS 16-byte vectors per lane of one warp (2 KiB), all loaded before any is
// stored, so each lane has that many loads in flight; work item i is unit i / t for
// target i % t (t targets: the n - 1 peers, and this rank's own output unless in place),
// so a warp stores into one peer, contiguously, and neighbouring warps into different
// peers. On 4 x H100 at 1 MiB per rank this beat one vector per thread stored to every
// peer (docs/performance.md).
#define AG_UNIT_VECS 4
COMMHAL_DEVICE void allgather_units(const CollArgs& a, const v16* src, u64 dst_off, u64 nvec) {
  const u32 wpb = blockDim.x / 32;
  if (threadIdx.x >= wpb * 32) return;
  const u32 lane = threadIdx.x % 32;
  const u64 nwarps = (u64)gridDim.x * wpb;
  const bool own = a.out[a.rank] + dst_off != reinterpret_cast<u64>(src);
  const u32 targets = a.nranks - 1 + (own ? 1 : 0);
  const u64 unit = 32 * AG_UNIT_VECS;
  const u64 items = (nvec + unit - 1) / unit * targets;
  for (u64 i = (u64)blockIdx.x * wpb + threadIdx.x / 32; i < items; i += nwarps) {
    const u32 p = (a.rank + 1 + (u32)(i % targets)) % a.nranks;  // the last target is own
    v16* dst = reinterpret_cast<v16*>(a.out[p] + dst_off);
    const u64 base = (i / targets) * unit + lane;
    v16 x[AG_UNIT_VECS];
#pragma unroll
    for (u32 j = 0; j < AG_UNIT_VECS; ++j) {
      if (base + j * 32 < nvec) x[j] = src[base + j * 32];
    }
#pragma unroll
    for (u32 j = 0; j < AG_UNIT_VECS; ++j) {
      if (base + j * 32 < nvec) dst[base + j * 32] = x[j];
    }
  }
}

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
    allgather_units(a, reinterpret_cast<const v16*>(src), dst_off, bytes / 16);
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
