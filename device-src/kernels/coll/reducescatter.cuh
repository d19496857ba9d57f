// coll/reducescatter.cuh — reduce-scatter: direct, LL16 and push.
#pragma once
#include "coll/ll16.cuh"
#include "coll/reduce_inputs.cuh"

// Reduce-scatter: every input holds nranks * count elements; rank r reduces elements
// [r*count, (r+1)*count) into its output (a.out[rank], count elements).
template <typename Op>
COMMHAL_DEVICE void reducescatter(const CollArgs& a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u64 chunk_bytes = a.count * Op::ELEM;
  const u64 in_off = a.rank * chunk_bytes;
  bool aligned = (chunk_bytes % 16) == 0 && (a.out[a.rank] % 16) == 0;
  for (u32 p = 0; p < a.nranks; ++p) aligned = aligned && (a.in[p] % 16) == 0;
  if (aligned) {
    reduce_vectors<Op>(a, in_off, 0, chunk_bytes / 16, 0, false);
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
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}
// LL16 variants of all-gather and reduce-scatter for small sizes: no barrier, packets
// carry the epoch (same slots and parity rule as the LL all-reduce).

// Reduce-scatter, LL: a.count elements per rank, count * elem % 8 == 0 (host checks).
template <typename Op>
COMMHAL_DEVICE void reducescatter_ll(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u64 cb = a.count * Op::ELEM;
  const u64 npk = cb / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u8* in = reinterpret_cast<const u8*>(a.in[a.rank]);
  for (u64 i = tid0; i < npk; i += gthreads) {
    for (u32 p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      const uint2 v = pre8<Op>(a, *reinterpret_cast<const uint2*>(in + p * cb + i * 8));
      ll16_store(ll_slot(a, p, a.rank, parity) + i * 16, v, flag);
    }
  }
  bool ok = true;
  uint2* out = reinterpret_cast<uint2*>(a.out[a.rank]);
  for (u64 i = tid0; i < npk; i += gthreads) {
    uint2 acc = make_uint2(0, 0);
    for (u32 p = 0; p < a.nranks; ++p) {  // rank order
      const uint2 v =
          (p == a.rank) ? pre8<Op>(a, *reinterpret_cast<const uint2*>(in + a.rank * cb + i * 8))
                        : ll16_wait(ll_slot(a, a.rank, p, parity) + i * 16, flag, bound(a), ok);
      if (p == 0) {
        acc = v;
      } else {
        acc = add8<Op>(acc, v);
      }
    }
    out[i] = fin8<Op>(a, acc);
  }
}

// Push reduce-scatter (large sizes): a.count elements per rank, count * elem % 16 == 0
// and a staging area (host checks). Every remote access is a store, as in the push
// all-reduce's first phase: chunk p of this rank's input -> rank p's staging slot
// [rank]; MID barrier (block b of the sender and block b of the owner handle the same
// chunk-relative vector indices, so it orders exactly what block b then reads); then
// reduce the own chunk from the local input and the local staging, in rank order, into
// the own output. No END barrier: after the MID barrier nothing here is read or written
// remotely — a rank's output is written by itself only, its input read by itself only,
// and a peer writes this rank's staging again only after passing the next launch's
// START barrier, i.e. after this kernel completed on this rank.
//   In place (input = output, output = output + rank * chunk): the own chunk is read
//   and then written by the same thread.
template <typename Op>
COMMHAL_DEVICE void reducescatter_push(const CollArgs& a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u32 n = a.nranks;
  const u64 nvec = a.count * Op::ELEM / 16;  // vectors per chunk
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const v16* in = reinterpret_cast<const v16*>(a.in[a.rank]);
  const v16* psrc[COLL_MAX_RANKS];
  v16* pdst[COLL_MAX_RANKS];
#pragma unroll
  for (u32 k = 1; k < COLL_MAX_RANKS; ++k) {
    if (k < n) {
      const u32 p = (a.rank + k) % n;
      psrc[k] = in + (u64)p * nvec;
      pdst[k] = reinterpret_cast<v16*>(a.stage[p] + (u64)a.rank * a.stage_slot_bytes);
    }
  }
  for (u64 j = tid0; j < nvec; j += gthreads) {
#pragma unroll
    for (u32 k = 1; k < COLL_MAX_RANKS; ++k) {
      if (k < n) pdst[k][j] = psrc[k][j];
    }
  }
  block_barrier(a, COLL_OFF_MID_FLAGS, e);
  const v16* own = in + (u64)a.rank * nvec;
  v16* out = reinterpret_cast<v16*>(a.out[a.rank]);
  for (u64 j = tid0; j < nvec; j += gthreads) {
    const v16 acc = fin16<Op>(a, sum_staged<Op>(a, own, j));
    out[j] = acc;
  }
}
