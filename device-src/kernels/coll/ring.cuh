// coll/ring.cuh — ring all-reduce, reduce-scatter and all-gather over the chain
// flags.
#pragma once
#include "coll/chain.cuh"
#include "coll/prims.cuh"
#include "coll/reduce_inputs.cuh"

// Ring all-reduce / reduce-scatter / all-gather (large sizes): the chains' links and
// flags, with the data split into n segments. Reduce-scatter steps s = 0..n-2: rank r
// sends segment (r - s - 1) mod n — its input for s = 0, else the partial sum that
// arrived in its staging plus its input — into the next rank's staging; after the last
// step, segment r is complete on rank r (input + staging). All-gather steps t =
// 0..n-2: rank r sends segment (r - t) mod n — its own (reduced) segment for t = 0,
// else the one that arrived in its output in step t-1 — into the next rank's output.
// Step-major order: a block runs all its chunks of step s before step s+1, so while
// rank r works on chunk c of step s the previous rank is one chunk ahead in step s and
// the flag r waits for is usually raised already (with chunk-major order every step
// would wait a full hop). Every block has the same number R of rounds per step on
// every rank (chunks of cv vectors over the longest segment), so round k of this rank
// needs round k - R of the previous rank, and the flag value (e << 32) | (k + 1)
// orders it as in the chains. The last R rounds only wait (the last arrival).
//   Segment geometry (16-byte vectors): all-reduce: partition(bytes / 16, n, q) of the
//   buffer, the same offsets in input, staging and output; reduce-scatter: segment q =
//   [q, q+1) x chunk of the input and staging, the result at output offset 0;
//   all-gather: the input is segment r's data, segment q sits at q x chunk of the output.
//   4 ranks, all-reduce: rank 1 sends segments 0, 3, 2 (reduce-scatter), owns 1, then
//   sends 1, 0, 3 (all-gather) and receives 0, 3, 2.
// In place (all-reduce: input = output; reduce-scatter: output = input + r x chunk;
// all-gather: input = output + r x chunk): every input vector is read before the ring
// delivers the finished segment over it (the flags chain the read to the write), and a
// rank reads and then writes its own segment in the same thread.
// Host: n >= 2, whole 16-byte vectors, staging of >= the input bytes (all-reduce and
// reduce-scatter).
// All-reduce head (COLL_RING_AR_HEAD, 3 or more ranks, dma.rs allreduce_ring_first /
// allreduce_ring_tail): the copy engine has moved reduce-scatter step 0 (rank r's input
// segment r-1 into the next rank's staging; the stream waited for the previous rank's
// before this kernel), the head runs reduce-scatter steps 1..n-2 and the first
// all-gather step (rank r sends its finished segment r to the next rank and waits for
// segment r-1), and the copy engines then move the other n-2 all-gather steps. Every
// copy-engine step is one whole segment to one peer: the one pattern where a copy
// engine outruns SM stores, ~392 against ~366 GB/s per GPU on 4 x H200. Round k of
// this rank still pairs with round k - R of the previous rank, k counted from step 0.
#define COLL_RING_AR 0
#define COLL_RING_RS 1
#define COLL_RING_AG 2
#define COLL_RING_AR_HEAD 3
template <typename Op, int MODE>
COMMHAL_DEVICE void ring(const CollArgs& a) {
  constexpr bool AR = MODE == COLL_RING_AR || MODE == COLL_RING_AR_HEAD;
  // the START barrier from the primitives; then the ring's own round flags
  const Prims<Simple, NextRank> prims(a);
  const u64 e = prims.e;
  const u32 n = a.nranks, r = a.rank;
  const u32 next = (r + 1) % n, prev = (r + n - 1) % n;
  // AR: count elements; RS: count elements per rank; AG: count bytes per rank
  const u64 units = (MODE == COLL_RING_AG) ? a.count / 16 : a.count * Op::ELEM / 16;
  const u64 maxlen = AR ? (units + n - 1) / n : units;
  const u64 cv = (u64)blockDim.x * chain_unroll(a);
  u32 rounds = 0;  // R
  for (u64 c = blockIdx.x; c * cv < maxlen; c += gridDim.x) ++rounds;
  const v16* in = reinterpret_cast<const v16*>(a.in[r]);
  v16* out = reinterpret_cast<v16*>(a.out[r]);
  v16* out_next = reinterpret_cast<v16*>(a.out[next]);
  const v16* stage = reinterpret_cast<const v16*>(a.stage[r]);
  v16* stage_next = reinterpret_cast<v16*>(a.stage[next]);
  bool ok = true;
  // the head starts at step 1: step 0 came by the copy engine, and the host queued the
  // wait for its arrival here before this kernel (no round flags to wait for in step 1)
  const u32 first = (MODE == COLL_RING_AR_HEAD) ? 1 : 0;
  u32 k = first * rounds;
  const u32 rs_steps = (MODE == COLL_RING_AG) ? 0 : n - 1;
  const u32 ag_steps = (MODE == COLL_RING_RS) ? 0 : (MODE == COLL_RING_AR_HEAD) ? 1 : n - 1;
  for (u32 s = first; s < rs_steps + ag_steps + 1; ++s) {
    const bool rs = MODE != COLL_RING_AG && s < rs_steps;
    const bool last = s == rs_steps + ag_steps;  // wait-only rounds
    const u32 t = s - rs_steps;                  // all-gather step (when !rs)
    // the last rounds: reduce-scatter finishes segment r; the others only wait
    const u32 seg = rs ? (r + 2 * n - s - 1) % n : (last ? r : (r + n - t) % n);
    u64 sb, se;  // segment [sb, se) in vectors
    if (AR) {
      partition(units, n, seg, sb, se);
    } else {
      sb = (u64)seg * units;
      se = sb + units;
    }
    const u64 sl = se - sb;
    // vector v of this segment reduced so far: the partial sum that arrived in the
    // staging plus this rank's input
    // (premulsum: the input is pre-multiplied here; the staging holds pre-multiplied
    // partial sums, except in the head's first step, where it holds the previous rank's
    // input as the copy engine moved it)
    const bool stage_raw = MODE == COLL_RING_AR_HEAD && s == first;
    const auto reduced = [&](u64 v) {
      if (Op::PRE && stage_raw) return add16<Op>(pre16<Op>(a, stage[sb + v]), pre16<Op>(a, in[sb + v]));
      return add16<Op>(stage[sb + v], pre16<Op>(a, in[sb + v]));
    };
    for (u64 c = blockIdx.x; c * cv < maxlen; c += gridDim.x, ++k) {
      if (k >= (first + 1) * rounds) chain_wait(a, prev, next, chain_tag(e, k - rounds), ok);
      if (MODE == COLL_RING_RS && last) {
        // own segment complete: staging + input -> output offset 0
        chunk_for(
            a, c, sl, [&](u64 v) { return fin16<Op>(a, reduced(v)); },
            [&](u64 v, v16 x) { out[v] = x; });
        continue;
      }
      if (last) continue;
      if (rs) {
        chunk_for(
            a, c, sl,
            [&](u64 v) { return s == 0 ? pre16<Op>(a, in[sb + v]) : reduced(v); },
            [&](u64 v, v16 x) { stage_next[sb + v] = x; });
      } else if (t == 0) {
        chunk_for(
            a, c, sl,
            [&](u64 v) {
              return (MODE == COLL_RING_AG) ? in[v] : fin16<Op>(a, reduced(v));
            },
            [&](u64 v, v16 x) {
              out_next[sb + v] = x;
              if (AR || in + v != out + sb + v) out[sb + v] = x;
            });
      } else {
        chunk_for(
            a, c, sl, [&](u64 v) { return out[sb + v]; },
            [&](u64 v, v16 x) { out_next[sb + v] = x; });
      }
      chain_signal(a, next, chain_tag(e, k), ok);
    }
  }
}
