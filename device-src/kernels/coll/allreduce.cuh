// coll/allreduce.cuh — all-reduce on the primitives: one-shot (LL16, LL63), two-shot
// (Simple) and push (Simple; LL63 as the all-pairs all-reduce).
#pragma once
#include "coll/prims.cuh"
#include "coll/prims_ll63.cuh"
#include "coll/reduce_inputs.cuh"

// One-shot all-reduce over the primitives (coll/prims.cuh): every rank's whole input
// lands in every other rank, which sums all of them in rank order (the same result on
// every rank). LL16 (count * elem % 8 == 0, bytes <= slot / 2, host checks) and LL63:
// Simple can not reduce after replicate, and would need staging slots of a whole
// message.
template <typename Op, typename Proto>
COMMHAL_DEVICE void allreduce_oneshot(const CollArgs& a) {
  static_assert(Prims<Proto, AllPeers>::REDUCE_AFTER_REPLICATE, "one-shot: a protocol whose reduce may follow replicate (LL16, LL63)");
  Prims<Proto, AllPeers> prims(a);
  const u64 bytes = a.count * Op::ELEM;
  auto src = [&](u32 s, u32) { return a.in[s]; };
  auto dst = [&](u32 r, u32 s) { return a.stage[r] + (u64)s * a.stage_slot_bytes; };
  prims.replicate(bytes, src, dst, false);
  prims.template reduce<Op>(bytes, src, dst, a.out[a.rank]);
}

// Two-shot all-reduce over the primitives: each rank pulls its chunk of every input
// (whole 16-byte vectors), sums it and stores it into every output; the tail that is
// not a whole vector belongs to the last rank. Inputs and outputs 16-byte aligned (host).
template <typename Op>
COMMHAL_DEVICE void allreduce_2shot(const CollArgs& a) {
  Prims<Simple, AllPeers> prims(a);
  const u64 bytes = a.count * Op::ELEM;
  const u64 nvec = bytes / 16;
  u64 vb, ve;
  partition(nvec, a.nranks, a.rank, vb, ve);
  prims.template reduce_pull<Op>(a, 0, vb, ve, true);
  if (a.rank == a.nranks - 1 && nvec * 16 < bytes) {
    reduce_elems<Op>(a, 0, nvec * 16 / Op::ELEM, a.count, 0, true);
  }
  prims.end();
}
// Push all-reduce over the primitives: every remote access is a store. Chunk r of every
// input (a partition of whole 16-byte vectors) goes to rank r, which sums it with its
// own chunk in rank order and sends the sum to every rank's output. Simple (large
// sizes): the chunks land in rank r's staging slot for the sender (slot >=
// ceil(nvec / n) * 16), and the tail (bytes % 16) is reduced by the last rank reading the
// peers' inputs directly (as in the two-shot kernel), before the END barrier. LL63 (mid
// sizes): packets, whole vectors only.
template <typename Op, typename Proto>
COMMHAL_DEVICE void allreduce_push(const CollArgs& a) {
  Prims<Proto, AllPeers> prims(a);
  const u64 bytes = a.count * Op::ELEM;
  const u64 nvec = bytes / 16;
  const Partition chunks(nvec, a.nranks);  // one division, not one per call
  auto begin = [&](u32 r) { return chunks.begin(r) * 16; };
  auto part = [&](u32 r) { return chunks.size(r) * 16; };
  auto src = [&](u32 s, u32 r) { return a.in[s] + begin(r); };
  auto dst = [&](u32 r, u32 s) { return a.stage[r] + (u64)s * a.stage_slot_bytes; };
  auto out = [&](u32 r, u32 s) { return a.out[r] + begin(s); };
  prims.scatter(part, src, dst, false);
  prims.template reduce_replicate<Op>(part(a.rank), src, dst, out);
  if (Prims<Proto, AllPeers>::ELEMENT_TAIL && a.rank == a.nranks - 1 && nvec * 16 < bytes) {
    reduce_elems<Op>(a, 0, nvec * 16 / Op::ELEM, a.count, 0, true);
  }
  prims.gather(part, out);
}
// The LL63 all-reduce (mid sizes, 16-byte multiples, 16-byte aligned buffers: host): one
// shot (COLL_FLAG_AR_ONESHOT; where one hop beats two: each rank sends (n - 1) x the data,
// x 64/63, half the LL16 one-shot's bytes) or over all pairs (the push all-reduce's
// steps: the barrier two-shot's traffic, 2 (n - 1) / n of the data, with no barrier and
// no fence), as the host chose.
template <typename Op>
COMMHAL_DEVICE void allreduce_ll63(const CollArgs& a) {
  if (a.flags & COLL_FLAG_AR_ONESHOT) {
    allreduce_oneshot<Op, LL63>(a);
  } else {
    allreduce_push<Op, LL63>(a);
  }
}
