// coll/alltoall.cuh — all-to-all over the primitives (coll/prims.cuh): Simple (direct
// stores into every output) and LL16.
#pragma once
#include "coll/prims.cuh"

// All-to-all: a.count = bytes per chunk (cb; LL16: a multiple of 8, at most the LL slot,
// host checks); every input and output holds n chunks. Chunk r of rank s's input goes
// to chunk s of rank r's output (NCCL's send/recv all-to-all). Out of place only
// (host): in place, rank r's chunk s would be overwritten while rank r still sends it.
//   4 ranks, rank 1: in[1][3cb, 4cb) -> out[3][1cb, 2cb); in[1][1cb, 2cb) ->
//   out[1][1cb, 2cb) (local). So out[q] chunk r = in[r] chunk q, the checker's rule.
template <typename Proto>
COMMHAL_DEVICE void alltoall(const CollArgs& a) {
  Prims<Proto, AllPeers> prims(a);
  const u64 cb = a.count;
  auto src = [&](u32 s, u32 r) { return a.in[s] + (u64)r * cb; };
  auto dst = [&](u32 r, u32 s) { return a.out[r] + (u64)s * cb; };
  prims.scatter(cb, src, dst, true);
  prims.gather(cb, dst);
}
