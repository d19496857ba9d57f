// coll/reduce.cuh — reduce to a root: direct, LL16, chain and LL63 chain.
#pragma once
#include "coll/ll16.cuh"
#include "coll/chain.cuh"
#include "coll/prims_ll63.cuh"
#include "coll/reduce_inputs.cuh"

// Reduce (sum) to the root: a.count elements. The workers (layout::reduce_worker)
// split the whole 16-byte vectors: worker k reduces chunk k (reading that range of
// every input, in rank order) and stores it into the ROOT's output only; the tail
// (bytes % 16) belongs to the last worker.
//   >= 3 ranks: the workers are the m = n-1 non-roots (worker k = rank (root+1+k) % n,
//     as for the broadcast) and the root only takes part in the barriers. Every link
//     then carries at most `bytes`: root ingress = the workers' stores (bytes), root
//     egress = its input read once in total (bytes), worker ingress = (n-1) x bytes/m
//     = bytes. (With the root as a worker too, its ingress would be (n-1)/n x bytes of
//     loads plus (n-1)/n x bytes of stores = 1.5 x bytes on 4 ranks: 0.64 of NCCL's
//     speed at 1 GiB.)
//   2 ranks: both ranks are workers (m = 2; worker k = rank k): the root's ingress is
//     then half its input in loads plus half in stores, = bytes either way.
// The reduction helpers store to `out[rank]` when not storing to all, so they get a
// copy of the arguments whose out[rank] is the root's output (inputs unchanged).
// In place (inputs = outputs): a worker reads and writes the root's buffer only inside
// its own chunk, each element read and then written by the same thread.
//   4 ranks, root 1, nvec = 10: workers rank 2 (k 0), 3 (k 1), 0 (k 2);
//   partition(10, 3, k) = [0,4) [4,7) [7,10): rank 2 stores vectors 0..4 into out[1],
//   rank 3 4..7, rank 0 7..10 and, when bytes % 16 != 0, the tail elements.
//   2 ranks, root 0: rank 0 reduces the first half locally, rank 1 the second half
//   into out[0].
// END barrier: the root's block b waits for block b of every rank (their stores into
// its output); every rank's inputs stay unchanged until every rank passed it.
//   ALL (the `_all` kernels, mid sizes): every rank is a worker (m = n, worker k = rank
//     k, as with 2 ranks) — the root's ingress is then ~1.5 x bytes, but the work is
//     split n ways instead of n-1, which wins while latency, not the root's links,
//     bounds the time.
template <typename Op, bool ALL>
COMMHAL_DEVICE void reduce_root(const CollArgs& a) {
  Prims<Simple, AllPeers> prims(a);
  const u32 n = a.nranks;
  const u32 root = coll_root(a);
  const bool root_works = ALL || n < 3;
  if (root_works || a.rank != root) {
    const u32 m = root_works ? n : n - 1;
    const u32 k = root_works ? a.rank : (a.rank + n - root - 1) % n;
    const u64 bytes = a.count * Op::ELEM;
    const u64 nvec = bytes / 16;
    CollArgs b = a;
    b.out[b.rank] = a.out[root];
    bool aligned = (a.out[root] % 16) == 0;
    for (u32 p = 0; p < n; ++p) aligned = aligned && (a.in[p] % 16) == 0;
    if (aligned) {
      u64 vb, ve;
      partition(nvec, m, k, vb, ve);
      prims.template reduce_pull<Op>(b, 0, vb, ve, false);
      if (k == m - 1 && nvec * 16 < bytes) {
        reduce_elems<Op>(b, 0, nvec * 16 / Op::ELEM, a.count, 0, false);
      }
    } else {
      u64 eb, ee;
      partition(a.count, m, k, eb, ee);
      reduce_elems<Op>(b, 0, eb, ee, 0, false);
    }
  }
  prims.end();
}

// Reduce (sum), LL: a.count elements, count * elem a multiple of 8, at most the LL slot.
// Every non-root sends its input as packets into slot(root, rank); the root reduces its
// own input and the packets in rank order into its output.
template <typename Op>
COMMHAL_DEVICE void reduce_ll(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u32 root = coll_root(a);
  const u64 npk = a.count * Op::ELEM / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const uint2* in = reinterpret_cast<const uint2*>(a.in[a.rank]);
  if (a.rank != root) {
    block_wait_peer_done(a, root, e, 2);
    for (u64 i = tid0; i < npk; i += gthreads) {
      const uint2 v = pre8<Op>(a, in[i]);
      ll16_store(ll_slot(a, root, a.rank, parity) + i * 16, v, flag);
    }
  } else {
    bool ok = true;
    uint2* out = reinterpret_cast<uint2*>(a.out[root]);
    for (u64 i = tid0; i < npk; i += gthreads) {
      uint2 acc = make_uint2(0, 0);
      for (u32 p = 0; p < a.nranks; ++p) {  // rank order
        const uint2 v = (p == root) ? pre8<Op>(a, in[i])
                                    : ll16_wait(ll_slot(a, root, p, parity) + i * 16, flag, bound(a), ok);
        if (p == 0) {
          acc = v;
        } else {
          acc = add8<Op>(acc, v);
        }
      }
      out[i] = fin8<Op>(a, acc);
    }
  }
}

// Reduce (sum), chain: a.count elements, bytes % 16 == 0, staging area of at least
// `bytes` on every rank (host: stage_slot_bytes * nranks >= bytes, Comm::staging_holds). Position of rank
// r: (r - root - 1) mod n; the root is last. Position 0 stores its input into the next
// rank's staging; a middle rank adds its input to the partial sum in its own staging and
// stores that into the next rank's staging; the root adds its input to its staging into
// its output. Sum order: position 0 first (exact for the checker's data; a reduce has
// one result, so no cross-rank agreement is needed).
//   4 ranks, root 1: 2 -> 3 -> 0 -> 1. 2 ranks, root 0: 1 -> 0.
// In place (inputs = outputs): the root reads and then writes each of its vectors in the
// same thread; the other ranks only read theirs.
// Over the primitives (Prims<Simple, ChainToRoot>, coll/prims.cuh), one step per
// position: send (position 0), recv_reduce_send (middle), recv_reduce_copy (the root).
template <typename Op>
COMMHAL_DEVICE void reduce_chain(const CollArgs& a) {
  const u64 nvec = a.count * Op::ELEM / 16;
  const u64 cv = (u64)blockDim.x * chain_unroll(a);
  Prims<Simple, ChainToRoot> p(a, nvec, chain_geometry(nvec, cv, false));
  const v16* in = reinterpret_cast<const v16*>(a.in[a.rank]);
  const v16* stage = reinterpret_cast<const v16*>(a.stage[a.rank]);
  v16* to = reinterpret_cast<v16*>(a.stage[p.next]);
  if (p.first()) {
    p.template send<Op>(in, to);
  } else if (p.last()) {
    p.template recv_reduce_copy<Op>(stage, in, reinterpret_cast<v16*>(a.out[a.rank]));
  } else {
    p.template recv_reduce_send<Op>(stage, in, to);
  }
}

// Reduce (sum), LL63 chain, over the primitives (Prims<LL63, ChainToRoot>,
// coll/prims_ll63.cuh): a.count elements, bytes % 16 == 0 (host). Position
// (r - root - 1) mod n as in reduce_chain (the root is last, the sum starts at position
// 0): position 0 packs its input and sends; a middle rank adds its input to the partial
// sum it unpacked and sends that; the root adds its input and stores its output.
//   4 ranks, root 1: 2 -> 3 -> 0 -> 1. 2 ranks, root 0: 1 -> 0.
// In place (inputs = outputs): the root reads and then writes each of its vectors in the
// same thread; the other ranks only read theirs.
template <typename Op>
COMMHAL_DEVICE void reduce_ll63(const CollArgs& a) {
  Prims<LL63, ChainToRoot> prims(a, a.count * Op::ELEM);
  const v16* in = reinterpret_cast<const v16*>(a.in[a.rank]);
  if (prims.first()) {
    prims.template send<Op>(in);
  } else if (prims.last()) {
    prims.template recv_reduce_copy<Op>(in, reinterpret_cast<v16*>(a.out[a.rank]));
  } else {
    prims.template recv_reduce_send<Op>(in);
  }
}
