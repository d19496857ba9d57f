// coll/ring.cuh — ring all-reduce, reduce-scatter and all-gather, written over the
// ring steps of the primitives (Prims<Simple, Ring>, coll/prims.cuh).
#pragma once
#include "coll/prims.cuh"

// Ring all-reduce / reduce-scatter / all-gather (large sizes): the chains' links and
// flags, with the data split into n segments. ring() below says which segment moves in
// which step, by which step of the primitives; those run the rounds, waits and flags.
// Reduce-scatter steps s = 0..n-2: rank r sends segment (r - s - 1) mod n — its input
// for s = 0 (send), else the partial sum that arrived in its staging plus its input
// (recv_reduce_send) — into the next rank's staging; after the last step, segment r is
// complete on rank r (input + staging: recv_reduce_copy into the reduce-scatter's
// output, or recv_reduce_copy_send, the all-reduce's all-gather step 0). All-gather
// steps t = 0..n-2: rank r sends segment (r - t) mod n — its own (reduced) segment for
// t = 0 (the all-gather's: send, with the copy into its own output unless in place),
// else the one that arrived in its output in step t-1 (recv_copy_send) — into the next
// rank's output; then it waits for the last arrival (recv).
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
// Host: n >= 2, whole 16-byte vectors, a staging area: of >= the input bytes for the
// reduce-scatter and the all-reduce head, any size for the all-reduce (portions below).
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

// Segment q of a ring, in 16-byte vectors: [b, b + len).
struct RingSeg {
  u64 b, len;
};

// The segments (see the geometry above): a partition of `units` for the all-reduce,
// `units` each at q x units otherwise.
template <bool AR>
COMMHAL_DEVICE RingSeg ring_seg(u64 units, u32 n, u32 q) {
  if (!AR) return {(u64)q * units, units};
  u64 sb, se;
  partition(units, n, q, sb, se);
  return {sb, se - sb};
}

// Portions (all-reduce, not the head): a staging area smaller than the buffer (the
// NCCL drop-in's regions are 64 MiB by default) runs the whole ring once per portion of
// at most stage_slot_bytes x n bytes, all portions the same size but the last, in one
// launch: round k keeps counting and every portion has the rounds of a full one (the
// last one's missing vectors are skipped), so round k still pairs with round k - R of
// the previous rank. A portion's first step waits for nothing (`next_portion`: the
// final `recv` of the one before raises no flag). Reuse of the staging: the previous
// rank writes portion p + 1 into this rank's staging, chunk c, only after its own final
// wait (`recv`) of portion p for chunk c, which follows, flag by flag around the ring in
// the same block, this rank's step n - 1 of chunk c: its last read of that staging in
// portion p.
template <typename Op, int MODE>
COMMHAL_DEVICE void ring(const CollArgs& a) {
  constexpr bool HEAD = MODE == COLL_RING_AR_HEAD;
  constexpr bool AR = MODE == COLL_RING_AR || HEAD;
  const u32 n = a.nranks, r = a.rank;
  // AR: count elements; RS: count elements per rank; AG: count bytes per rank
  const u64 units = (MODE == COLL_RING_AG) ? a.count / 16 : a.count * Op::ELEM / 16;
  const u64 room = a.stage_slot_bytes * n / 16;
  const u64 parts = (MODE == COLL_RING_AR && room > 0 && units > room) ? (units + room - 1) / room : 1;
  const u64 pu = (units + parts - 1) / parts;  // units of a portion
  // the head starts at step 1 (step 0 came by the copy engine)
  Prims<Simple, Ring> p(a, AR ? (pu + n - 1) / n : pu, HEAD ? 1 : 0);
  const v16* in = reinterpret_cast<const v16*>(a.in[r]);
  v16* out = reinterpret_cast<v16*>(a.out[r]);
  v16* out_next = reinterpret_cast<v16*>(a.out[p.next]);
  const v16* stage = reinterpret_cast<const v16*>(a.stage[r]);
  v16* stage_next = reinterpret_cast<v16*>(a.stage[p.next]);
  for (u64 base = 0; base < units; base += pu) {
    if (base > 0) p.next_portion();
    const u64 len = units - base < pu ? units - base : pu;
    // segment q of the portion: at g.b in the staging, at io(q, g) in input and output
    auto io = [&](u32 q, const RingSeg& g) { return AR ? base + g.b : (u64)q * units + base; };
    // reduce-scatter step s: segment r - s - 1 into the next rank's staging (the head's
    // first step sums the staging as the copy engine moved it: `raw`)
    if (MODE != COLL_RING_AG) {
      const u32 q = HEAD ? (r + n - 2) % n : (r + n - 1) % n;
      const RingSeg f = ring_seg<AR>(len, n, q);
      if (HEAD) {
        p.recv_reduce_send<Op>(stage + f.b, in + io(q, f), stage_next + f.b, f.len, true);
      } else {
        p.send<Op>(in + io(q, f), stage_next + f.b, nullptr, f.len);
      }
      for (u32 s = HEAD ? 2 : 1; s + 1 < n; ++s) {
        const u32 qs = (r + 2 * n - s - 1) % n;
        const RingSeg g = ring_seg<AR>(len, n, qs);
        p.recv_reduce_send<Op>(stage + g.b, in + io(qs, g), stage_next + g.b, g.len, false);
      }
    }
    // segment r: complete here (reduce-scatter), or the all-gather's first
    const RingSeg g = ring_seg<AR>(len, n, r);
    if (MODE == COLL_RING_RS) return p.recv_reduce_copy<Op>(stage + g.b, in + io(r, g), out, g.len);
    if (AR) {
      const u64 o = io(r, g);
      p.recv_reduce_copy_send<Op>(stage + g.b, in + o, out + o, out_next + o, g.len);
    } else {
      p.send<Op>(in, out_next + g.b, in == out + g.b ? nullptr : out + g.b, g.len);
    }
    // all-gather step t: segment r - t, arrived in step t - 1, on to the next rank
    for (u32 t = 1; !HEAD && t + 1 < n; ++t) {
      const u32 qt = (r + n - t) % n;
      const RingSeg h = ring_seg<AR>(len, n, qt);
      p.recv_copy_send(out + io(qt, h), out_next + io(qt, h), h.len);
    }
    p.recv();
  }
}
