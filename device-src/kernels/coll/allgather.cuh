// coll/allgather.cuh — all-gather over the primitives (coll/prims.cuh): Simple (direct
// stores into every output), LL16 and LL63.
#pragma once
#include "coll/prims.cuh"
#include "coll/prims_ll63.cuh"

// All-gather: a.count = bytes per rank (LL16: a multiple of 8; LL63: of 16, buffers
// 16-byte aligned; host checks); rank s's input goes to byte offset s * count of every
// output (skipped where it already is, i.e. in place).
template <typename Proto>
COMMHAL_DEVICE void allgather(const CollArgs& a) {
  Prims<Proto, AllPeers> prims(a);
  const u64 bytes = a.count;
  auto src = [&](u32 s, u32) { return a.in[s]; };
  auto dst = [&](u32 r, u32 s) { return a.out[r] + (u64)s * bytes; };
  prims.replicate(bytes, src, dst, true);
  prims.gather(bytes, dst);
}
