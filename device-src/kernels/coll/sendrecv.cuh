// coll/sendrecv.cuh — send/recv to the next rank over the primitives (coll/prims.cuh):
// Simple (direct stores into the receiver's output) and LL16.
#pragma once
#include "coll/prims.cuh"

// Send/recv (nccl-tests sendrecv_perf): a.count = bytes (LL16: a multiple of 8, at most
// the LL slot, host checks); rank r's input goes to the output of rank (r + 1) % n, so
// rank r receives from (r - 1 + n) % n. Out of place only (host). 1 rank: a local copy.
// Simple's barriers are the full per-block barrier (every rank), a superset of the
// neighbour ordering needed.
template <typename Proto>
COMMHAL_DEVICE void sendrecv(const CollArgs& a) {
  Prims<Proto, NextRank> prims(a);
  const u64 bytes = a.count;
  auto src = [&](u32 s, u32) { return a.in[s]; };
  auto dst = [&](u32 r, u32) { return a.out[r]; };
  prims.replicate(bytes, src, dst, false);
  prims.gather(bytes, dst);
}
