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
#pragma once
#include "commhal/packets.h"

namespace commhal {

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
// kernels' element loop tests a.nranks), so that their code stays what it was.
template <typename V, typename Load, typename Op, typename Store>
COMMHAL_DEVICE void reduce_sources(u64 first, u64 end, u64 step, const u32& n, Load load, Op op,
                                   Store store) {
  for (u64 i = first; i < end; i += step) {
    V acc = load(0u, i);
    for (u32 p = 1; p < n; ++p) acc = op(acc, load(p, i));
    store(i, acc);
  }
}

}  // namespace commhal
