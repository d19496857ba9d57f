// coll/reduce_inputs.cuh — reducing the inputs of every rank (read from the peers' buffers)
// or of the staging slots.
#pragma once
#include "coll/ops.cuh"
#include "commhal/dataops.h"

// Reduce vector range [vb, ve) (16-byte units at byte offset `base_off` of every input)
// and store the result at byte offset `dst_off` of every output (`to_all`) or of this
// rank's only. N = rank count known at compile time (fewer registers, and two vectors
// per thread per step: 2N loads in flight). Any deterministic index mapping is fine
// for the barriers: block b covers the same indices on every rank.
template <typename Op, int N>
COMMHAL_DEVICE void reduce_vectors_n(const CollArgs& a, u64 base_off, u64 vb, u64 ve,
                                     u64 dst_off, bool to_all) {
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const v16* src[N];
  v16* dst[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    src[k] = reinterpret_cast<const v16*>(a.in[k] + base_off);
    const u32 p = (a.rank + k) % N;  // own output first, then spread over the peers
    dst[k] = reinterpret_cast<v16*>(a.out[p] + dst_off);
  }
  const int nd = to_all ? N : 1;
  u64 v = vb + (u64)blockIdx.x * blockDim.x + threadIdx.x;
  for (; v + gthreads < ve; v += 2 * gthreads) {
    v16 x0[N], x1[N];
#pragma unroll
    for (int p = 0; p < N; ++p) {
      x0[p] = pre16<Op>(a, src[p][v]);
      x1[p] = pre16<Op>(a, src[p][v + gthreads]);
    }
    v16 acc0 = x0[0], acc1 = x1[0];
#pragma unroll
    for (int p = 1; p < N; ++p) {
      acc0 = add16<Op>(acc0, x0[p]);
      acc1 = add16<Op>(acc1, x1[p]);
    }
    acc0 = fin16<Op>(a, acc0);
    acc1 = fin16<Op>(a, acc1);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (k < nd) {
        dst[k][v] = acc0;
        dst[k][v + gthreads] = acc1;
      }
    }
  }
  if (v < ve) {
    v16 x[N];
#pragma unroll
    for (int p = 0; p < N; ++p) x[p] = pre16<Op>(a, src[p][v]);
    v16 acc = x[0];
#pragma unroll
    for (int p = 1; p < N; ++p) acc = add16<Op>(acc, x[p]);
    acc = fin16<Op>(a, acc);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (k < nd) dst[k][v] = acc;
    }
  }
}

// Any rank count up to COLL_MAX_RANKS, one vector per thread per step.
template <typename Op>
COMMHAL_DEVICE void reduce_vectors_any(const CollArgs& a, u64 base_off, u64 vb, u64 ve,
                                       u64 dst_off, bool to_all) {
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u32 n = a.nranks;
  reduce_sources<v16>(
      vb + (u64)blockIdx.x * blockDim.x + threadIdx.x, ve, gthreads, n,
      [&](u32 p, u64 v) { return pre16<Op>(a, reinterpret_cast<const v16*>(a.in[p] + base_off)[v]); },
      [](v16 x, v16 y) { return add16<Op>(x, y); },
      [&](u64 v, v16 acc) {
        acc = fin16<Op>(a, acc);
        if (to_all) {
          for (u32 k = 0; k < n; ++k) {
            const u32 p = (a.rank + k) % n;
            reinterpret_cast<v16*>(a.out[p] + dst_off)[v] = acc;
          }
        } else {
          reinterpret_cast<v16*>(a.out[a.rank] + dst_off)[v] = acc;
        }
      });
}

template <typename Op>
COMMHAL_DEVICE void reduce_vectors(const CollArgs& a, u64 base_off, u64 vb, u64 ve, u64 dst_off,
                                   bool to_all) {
  switch (a.nranks) {
    case 2: reduce_vectors_n<Op, 2>(a, base_off, vb, ve, dst_off, to_all); break;
    case 4: reduce_vectors_n<Op, 4>(a, base_off, vb, ve, dst_off, to_all); break;
    default: reduce_vectors_any<Op>(a, base_off, vb, ve, dst_off, to_all); break;
  }
}

// Same, one element at a time over element range [eb, ee) (unaligned data, tails).
template <typename Op>
COMMHAL_DEVICE void reduce_elems(const CollArgs& a, u64 in_off, u64 eb, u64 ee, u64 dst_off,
                                 bool to_all) {
  typedef typename Op::W W;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  reduce_sources<W>(
      eb + (u64)blockIdx.x * blockDim.x + threadIdx.x, ee, gthreads, a.nranks,
      [&](u32 p, u64 i) { return Op::pre_w(a, load_elem<Op>(a.in[p], in_off + i * Op::ELEM)); },
      [](W x, W y) { return Op::add_w(x, y); },
      [&](u64 i, W acc) {
        acc = Op::fin_w(a, acc);
        if (to_all) {
          for (u32 p = 0; p < a.nranks; ++p) store_elem<Op>(a.out[p], dst_off + i * Op::ELEM, acc);
        } else {
          store_elem<Op>(a.out[a.rank], dst_off + i * Op::ELEM, acc);
        }
      });
}

// Vector j summed over the ranks in rank order, x[p] holding rank p's vectors; every
// term pre-multiplied (premulsum: each is an original input, pushed or copied as it
// was), all n loads issued before the adds. The caller applies fin16.
template <typename Op>
COMMHAL_DEVICE v16 sum_ranks(const CollArgs& a, const v16* const (&x)[COLL_MAX_RANKS], u64 j) {
  v16 y[COLL_MAX_RANKS];
#pragma unroll
  for (u32 p = 0; p < COLL_MAX_RANKS; ++p) {
    if (p < a.nranks) {
      y[p] = x[p][j];
      if (Op::PRE) y[p] = pre16<Op>(a, y[p]);
    }
  }
  v16 acc = y[0];
#pragma unroll
  for (u32 p = 1; p < COLL_MAX_RANKS; ++p) {
    if (p < a.nranks) acc = add16<Op>(acc, y[p]);
  }
  return acc;
}

// Vector j of this rank's chunk summed in rank order (sum_ranks): `own[j]` for this
// rank, vector j of staging slot p (a.stage[rank] + p * a.stage_slot_bytes, where rank
// p's contribution landed) for every other p. Used by the copy-engine path's
// reduce_local; the push all-reduce sums through Prims<Simple>::reduce_replicate
// (sum_ranks).
template <typename Op>
COMMHAL_DEVICE v16 sum_staged(const CollArgs& a, const v16* own, u64 j) {
  const u8* stage = reinterpret_cast<const u8*>(a.stage[a.rank]);
  const v16* x[COLL_MAX_RANKS];
#pragma unroll
  for (u32 p = 0; p < COLL_MAX_RANKS; ++p) {
    x[p] = (p == a.rank) ? own : reinterpret_cast<const v16*>(stage + (u64)p * a.stage_slot_bytes);
  }
  return sum_ranks<Op>(a, x, j);
}
