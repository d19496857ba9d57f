// coll/reducescatter.cuh — reduce-scatter: direct (every rank reads its chunk from every
// input) and push (Simple, LL16 or LL63).
#pragma once
#include "coll/prims.cuh"
#include "coll/prims_ll63.cuh"
#include "coll/reduce_inputs.cuh"

// Reduce-scatter, pull, over the primitives: every input holds nranks * count elements;
// rank r reduces elements [r*count, (r+1)*count) into its output (a.out[rank], count
// elements).
template <typename Op>
COMMHAL_DEVICE void reducescatter(const CollArgs& a) {
  Prims<Simple, AllPeers> prims(a);
  const u64 chunk_bytes = a.count * Op::ELEM;
  const u64 in_off = a.rank * chunk_bytes;
  bool aligned = (chunk_bytes % 16) == 0 && (a.out[a.rank] % 16) == 0;
  for (u32 p = 0; p < a.nranks; ++p) aligned = aligned && (a.in[p] % 16) == 0;
  if (aligned) {
    prims.template reduce_pull<Op>(a, in_off, 0, chunk_bytes / 16, false);
  } else {
    // element offsets relative to in_off; destination starts at element 0
    const u64 gthreads = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += gthreads) {
      typename Op::W acc = Op::pre_w(a, load_elem<Op>(a.in[0], in_off + i * Op::ELEM));
      for (u32 p = 1; p < a.nranks; ++p)
        acc = Op::add_w(acc, Op::pre_w(a, load_elem<Op>(a.in[p], in_off + i * Op::ELEM)));
      store_elem<Op>(a.out[a.rank], i * Op::ELEM, Op::fin_w(a, acc));
    }
  }
  prims.end();
}
// Push reduce-scatter over the primitives (coll/prims.cuh): a.count elements per rank.
// Chunk r of rank s's input lands in rank r (Simple: its staging slot for s, for large
// sizes, count * elem % 16 == 0 and a staging area; LL16: its LL slot, for small ones,
// count * elem % 8 == 0; LL63: its slot in a parity half of r's LL63 small region, for
// mid sizes, count * elem % 16 == 0, 16-byte aligned buffers, the n - 1 chunks r
// receives fitting the half; the host checks), which sums its own chunk and what
// landed, in rank order, into its output. Every remote access is a store.
//   In place (input = output, output = output + rank * chunk): the own chunk is read and
//   then written by the same thread.
template <typename Op, typename Proto>
COMMHAL_DEVICE void reducescatter_push(const CollArgs& a) {
  Prims<Proto, AllPeers> prims(a);
  const u64 cb = a.count * Op::ELEM;
  auto src = [&](u32 s, u32 r) { return a.in[s] + (u64)r * cb; };
  auto dst = [&](u32 r, u32 s) { return a.stage[r] + (u64)s * a.stage_slot_bytes; };
  prims.scatter(cb, src, dst, false);
  prims.template reduce<Op>(cb, src, dst, a.out[a.rank]);
}
