// coll/alltoall.cuh — all-to-all: LL16 and direct.
#pragma once
#include "coll/ll16.cuh"

// All-to-all, LL (small chunks): a.count = bytes per chunk, a multiple of 8, at most the
// LL slot (host checks). Chunk p of this rank's input goes as packets into slot(p, rank)
// (own chunk: a local copy); every rank then waits for the packets of every peer and
// stores them as chunk p of its output. Every rank waits on every other in every
// launch, so the parity argument of the LL all-gather holds (no barrier).
COMMHAL_DEVICE void alltoall_ll(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u64 cb = a.count;
  const u64 npk = cb / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u8* in = reinterpret_cast<const u8*>(a.in[a.rank]);
  u8* out = reinterpret_cast<u8*>(a.out[a.rank]);
  for (u64 i = tid0; i < npk; i += gthreads) {
    for (u32 k = 1; k < a.nranks; ++k) {
      const u32 p = (a.rank + k) % a.nranks;
      const uint2 v = *reinterpret_cast<const uint2*>(in + p * cb + i * 8);
      ll16_store(ll_slot(a, p, a.rank, parity) + i * 16, v, flag);
    }
    reinterpret_cast<uint2*>(out + (u64)a.rank * cb)[i] =
        reinterpret_cast<const uint2*>(in + (u64)a.rank * cb)[i];
  }
  bool ok = true;
  for (u64 i = tid0; i < npk; i += gthreads) {
    for (u32 k = 1; k < a.nranks; ++k) {
      const u32 p = (a.rank + k) % a.nranks;
      reinterpret_cast<uint2*>(out + (u64)p * cb)[i] =
          ll16_wait(ll_slot(a, a.rank, p, parity) + i * 16, flag, bound(a), ok);
    }
  }
}

// All-to-all: a.count = bytes per chunk (cb); every input and output holds n chunks.
// Chunk p of this rank's input goes to chunk `rank` of rank p's output (NCCL's
// send/recv all-to-all). Out of place only (host): in place, rank p's chunk r would be
// overwritten while rank p still sends it.
//   4 ranks, rank 1: in[1][3cb, 4cb) -> out[3][1cb, 2cb); in[1][1cb, 2cb) ->
//   out[1][1cb, 2cb) (local). So out[q] chunk r = in[r] chunk q, the checker's rule.
//   2 ranks, rank 0: in[0] chunk 0 -> out[0] chunk 0, chunk 1 -> out[1] chunk 0.
// END barrier: block b of rank q waits for block b of every rank, which made its slice
// of the stores into q's output.
COMMHAL_DEVICE void alltoall(const CollArgs& a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u32 n = a.nranks;
  const u64 cb = a.count;
  const u64 src = a.in[a.rank];
  bool aligned = (cb % 16) == 0 && (src % 16) == 0;
  for (u32 p = 0; p < n; ++p) aligned = aligned && (a.out[p] % 16) == 0;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (aligned) {
    const u64 cv = cb / 16;  // vectors per chunk
    const v16* s = reinterpret_cast<const v16*>(src);
    for (u64 v = tid0; v < cv; v += gthreads) {
      for (u32 k = 0; k < n; ++k) {
        const u32 p = (a.rank + k) % n;  // own chunk first, then spread over the peers
        reinterpret_cast<v16*>(a.out[p])[(u64)a.rank * cv + v] = s[(u64)p * cv + v];
      }
    }
  } else {
    for (u32 k = 0; k < n; ++k) {
      const u32 p = (a.rank + k) % n;
      copy_cooperative(reinterpret_cast<void*>(a.out[p] + (u64)a.rank * cb),
                       reinterpret_cast<const void*>(src + (u64)p * cb), cb, (u32)tid0,
                       (u32)gthreads);
    }
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}
