// dataops.h — the data-op loops that the hand-written collectives' primitives
// (coll/prims.cuh) and the kernels generated from plans (commhal/plan.h) share: one loop
// each, the index range and the addressing given by the caller.
//
// Index ranges: a loop visits i = first, first + step, ... below end. The hand kernels
// pass their grid-stride range (first = the thread's global index, step = every thread
// of the grid); plan.h passes one CTA's share of an op (first = share start + threadIdx.x,
// step = blockDim.x).
//
// Peers' addresses and flags come in arrays of MAX entries indexed by unrolled constant
// loops (so they stay in registers; only the first n are used), or through callables,
// which the loops call with constant indices where they can.
//
// Shared: the LL16 put (Prims<LL16> replicate / scatter; plan.h put_packets and
// put_packets_multi), the LL16 read-reduce (Prims<LL16>::reduce; plan.h reduce_packets,
// which unpacks too), the reduction of k sources (the pull kernels' reduce_vectors_any
// and reduce_elems; plan.h reduce), and copy.h's copy_cooperative (plan.h copy; Simple's
// copy of unaligned bytes). The shared loops compile, per hand kernel, to the PTX a
// private loop gives, but for the order of two commutative compare operands in the
// LL16 reduce's wait and the sendrecv_ll prologue (its receiver computed once). Not
// shared (besides the pull reduce-scatter's unaligned element loop, whose PTX through
// reduce_elems differs by one kernel-parameter load, so it stays as measured):
// * Simple's replicate (warp units of 4 vectors per lane) and scatter (one vector per
//   thread for every target): plans copy one op at a time with copy_cooperative over a
//   CTA's share; moving them to warp units changes the plans, not the sharing.
// * sum_ranks (Simple's reduce, the copy-engine reduction): every rank's vector loaded
//   before the first add, unrolled over COLL_MAX_RANKS. reduce_sources loads as it
//   folds, over a count known at run time, as plans take it: loads first would need
//   the count at compile time in the plans and their 1024-thread register budget.
// * reduce_vectors_n (two vectors per thread per step for 2 and 4 ranks): no plan op
//   has that shape.
// * Prims<LL16>::gather: each sender's packet goes to its own destination, no fold
//   (plans unpack one sender per op, a one-term ll16_reduce).
// * broadcast_ll and reduce_ll (not on Prims): they walk the ranks in a run-time loop
//   per packet; ll16_put keeps a register per target, unrolled: on the primitives the
//   broadcast took 1.08-1.15 x the hand kernel's time at 1-64 KiB and the reduce up to
//   1.07 x on 2 ranks (docs/performance.md, "Dropped").
#pragma once
#include "commhal/packets.h"

namespace commhal {

// x[k] for a k only known at run time, by selects over registers (an indexed load would
// put x in local memory): small arrays of pointers or sizes stay in registers. The
// hand-written primitives' and the generated plans' fused loops pick their peer's or
// chunk's entry so.
template <typename T, u32 N>
COMMHAL_DEVICE T pick(T const (&x)[N], u32 k) {
  T r = x[0];
#pragma unroll
  for (u32 j = 1; j < N; ++j) r = j == k ? x[j] : r;
  return r;
}

// LL16 puts of one range of packets to up to MAX targets: for each packet i, the 8
// bytes load(t, i) of every target t < nt are loaded before any is stored (SAME: every
// target's bytes are load(0, i), loaded once), then stored as packet i of slot[t] with
// flag(t), target by target; then own(i, v) (v: the loaded bytes, v[0] for SAME; not
// set when nt == 0) may store them locally too, after the packets left.
template <u32 MAX, bool SAME, typename Load, typename Flag, typename Own>
COMMHAL_DEVICE void ll16_put(u64 first, u64 end, u64 step, u32 nt, u8* const (&slot)[MAX],
                             Load load, Flag flag, Own own) {
  for (u64 i = first; i < end; i += step) {
    uint2 v[MAX];
#pragma unroll
    for (u32 t = 0; t < MAX; ++t) {
      if (t < nt) v[t] = SAME ? (t == 0 ? load(0u, i) : v[0]) : load(t, i);
    }
#pragma unroll
    for (u32 t = 0; t < MAX; ++t) {
      if (t < nt) ll16_store(slot[t] + i * 16, v[t], flag(t));
    }
    own(i, v);
  }
}

// Reduce n sources into one, index by index: for each i, load(0, i) (op) load(1, i) (op)
// ... (op) load(n - 1, i), left to right (the host's reduce_into, one source after
// another; each step rounds to the type), then store(i, acc). V is whatever one index
// covers (an element, an 8-byte word, a 16-byte vector); load and store say where it
// lives and what happens on the way (a pre-multiply, avg's division, several outputs).
// n is read where the loop tests it, as the callers' own loops read it (the hand
// kernels' element loop tests a.nranks), which keeps their loop shape.
template <typename V, typename Load, typename Op, typename Store>
COMMHAL_DEVICE void reduce_sources(u64 first, u64 end, u64 step, const u32& n, Load load, Op op,
                                   Store store) {
  for (u64 i = first; i < end; i += step) {
    V acc = load(0u, i);
    for (u32 p = 1; p < n; ++p) acc = op(acc, load(p, i));
    store(i, acc);
  }
}

// Reduce LL16 packets (and local operands) into one, packet by packet: for each packet i,
// own = pre(i) first (the loads of local operands, so that their latency hides behind
// the packet waits), then term(0, i, own) (op) term(1, i, own) ... (op) term(n - 1, i,
// own), left to right (each term a local word or a waited packet's 8 bytes), then
// store(i, acc). W: the 8 bytes a packet carries (uint2 or u64). n is read where the
// loop tests it (as reduce_sources). ROLLED keeps the terms a loop, one bounded wait
// in the code; else a constant n may unroll it, a wait per term. On 4 x H100 the
// generated one-shot all-reduce and reduce-scatter (three packet terms) took 3-5 % less
// time unrolled up to 16 KiB of output, and 3-6 % more from 32 KiB (plan.h
// PLAN_FLAG_WAIT_LOOP); the hand kernels' n is the rank count, read at run time.
template <typename W, bool ROLLED = true, typename Pre, typename Term, typename Op, typename Store>
COMMHAL_DEVICE void ll16_reduce(u64 first, u64 end, u64 step, const u32& n, Pre pre, Term term,
                                Op op, Store store) {
  for (u64 i = first; i < end; i += step) {
    const auto own = pre(i);
    W acc = W{};
    auto fold = [&](u32 t) {
      const W v = term(t, i, own);
      acc = t == 0 ? v : op(acc, v);
    };
    if constexpr (ROLLED) {
#pragma unroll 1
      for (u32 t = 0; t < n; ++t) fold(t);
    } else {
      for (u32 t = 0; t < n; ++t) fold(t);
    }
    store(i, acc);
  }
}

}  // namespace commhal
