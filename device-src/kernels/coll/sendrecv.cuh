// coll/sendrecv.cuh — send/recv to the next rank: LL16 and direct.
#pragma once
#include "coll/ll16.cuh"

// Send/recv, LL (small sizes): a.count = bytes, a multiple of 8, at most the LL slot.
// Rank r sends its input as packets into slot(next, r) and receives the previous rank's
// packets from slot(r, prev). The sender never waits on its receiver otherwise, so before
// reusing a parity slot in launch e it waits until the receiver completed launch e-2
// (as the LL broadcast does).
COMMHAL_DEVICE void sendrecv_ll(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u32 n = a.nranks;
  const u32 next = (a.rank + 1) % n, prev = (a.rank + n - 1) % n;
  const u64 npk = a.count / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  block_wait_peer_done(a, next, e, 2);
  const uint2* src = reinterpret_cast<const uint2*>(a.in[a.rank]);
  for (u64 i = tid0; i < npk; i += gthreads) {
    const uint2 v = src[i];
    ll16_store(ll_slot(a, next, a.rank, parity) + i * 16, v, flag);
  }
  bool ok = true;
  uint2* out = reinterpret_cast<uint2*>(a.out[a.rank]);
  for (u64 i = tid0; i < npk; i += gthreads)
    out[i] = ll16_wait(ll_slot(a, a.rank, prev, parity) + i * 16, flag, bound(a), ok);
}

// Send/recv (nccl-tests sendrecv_perf): a.count = bytes; rank r's input goes to the
// output of rank (r+1) % n, so rank r receives from (r-1+n) % n. Out of place only
// (host). 1 rank: a local copy. 2 ranks: 0 -> 1 and 1 -> 0. 4 ranks: 0->1, 1->2,
// 2->3, 3->0. The START/END barriers are the full per-block barrier (every rank), a
// superset of the neighbour ordering needed: START = the receiver's kernel runs (its
// output is no longer used by earlier work), END = the sender's stores are done.
COMMHAL_DEVICE void sendrecv(const CollArgs& a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u64 bytes = a.count;
  const u64 src = a.in[a.rank];
  const u64 dst = a.out[(a.rank + 1) % a.nranks];
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (dst != src) {
    if ((bytes % 16) == 0 && (src % 16) == 0 && (dst % 16) == 0) {
      const u64 nvec = bytes / 16;
      for (u64 v = tid0; v < nvec; v += gthreads)
        reinterpret_cast<v16*>(dst)[v] = reinterpret_cast<const v16*>(src)[v];
    } else {
      copy_cooperative(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes,
                       (u32)tid0, (u32)gthreads);
    }
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}
