// coll/broadcast.cuh — broadcast: direct, scatter-forward, LL16, chain and LL63 chain.
#pragma once
#include "coll/chain.cuh"
#include "coll/prims.cuh"
#include "coll/prims_ll63.cuh"

// Broadcast and reduce (as all-to-all and send/recv): the direct kernels run between a
// START and an END block barrier (coll/protocol.cuh; every rank launches the same grid,
// which the host derives from the collective, the size and the rank count only). Their
// LL16 variants cannot rely on the parity rule alone: a broadcast's sender never waits
// on its receivers, so it could run two launches ahead and overwrite a parity slot the
// owner has not read yet; it first waits on the receiver's done word (wait_peer_done,
// thread p for rank p).

// Broadcast, direct, over the primitives (coll/prims.cuh): a.count = bytes. The root's
// input goes to every output (its own skipped when in place): the root stores into every
// output between the barriers. Its egress is (n-1) x bytes, so the host uses it for
// small sizes and for 2 ranks, where it is the only transfer anyway. (Written over
// Prims<LL16, FromRoot> the LL16 broadcast took 1.08-1.15 x broadcast_ll's time at
// 1-64 KiB on 4 and 2 x H100 in graphs: docs/performance.md, "Dropped"; so that one
// stays.)
template <typename Proto>
COMMHAL_DEVICE void broadcast(const CollArgs& a) {
  Prims<Proto, FromRoot> prims(a);
  const u64 bytes = a.count;
  auto src = [&](u32 s, u32) { return a.in[s]; };
  auto dst = [&](u32 r, u32) { return a.out[r]; };
  prims.replicate(bytes, src, dst, a.rank == a.root);
  prims.gather(bytes, dst);
}

// Broadcast, pull + forward (host: nranks >= 3, every buffer 16-byte aligned — the
// VMM bases are): a.count = bytes, nvec = bytes / 16 whole vectors split over the
// m = n-1 non-roots; the k-th non-root is rank (root + 1 + k) % n, so rank r's chunk
// index is k = (r + n - root - 1) % n (mirrored by layout::bcast_chunk_index).
//   root: copies its input into its own output (local) unless in place, and the tail
//     bytes (bytes % 16) into every output. It sends nothing: the others read.
//   non-root with chunk k: loads chunk k from the ROOT's input (remote loads, two
//     vectors in flight per thread) and stores it into its own output and into every
//     other non-root's output.
// One phase between the START and END barriers: a root push, then a forward after a MID
// barrier is two serial phases (0.54 of NCCL at 1 GiB on 4 GPUs). Traffic: root egress = bytes (its input read once in total);
// non-root ingress = bytes / m (from the root) + (m-1)/m x bytes (from the others),
// egress (m-1)/m x bytes; every link carries at most `bytes`, all at the same time.
// Ordering: START — the root's input is written and every output is free. END — block
// b of rank q waits for block b of every peer, which made its slice of the stores into
// q's output (and of the loads from the root's input) before it signalled; all blocks
// together cover every byte, so when q's kernel completes its output is final and the
// root's input is no longer read.
//   4 ranks, root 2: m = 3; k = 0 -> rank 3, k = 1 -> rank 0, k = 2 -> rank 1;
//     rank 3: k = (3 + 4 - 2 - 1) % 4 = 0, rank 0: (0 + 1) % 4 = 1, rank 1: 2.
//     Rank 3 stores chunk 0 into out[3], out[0], out[1] (2 = root: skipped).
//   3 ranks, root 0: m = 2; rank 1 gets chunk 0, rank 2 chunk 1; each stores its chunk
//     into both non-root outputs.
COMMHAL_DEVICE void broadcast_sf(const CollArgs& a) {
  Prims<Simple, AllPeers> prims(a);
  const u32 n = a.nranks;
  const u32 m = n - 1;  // >= 2 (host)
  const u32 root = coll_root(a);
  const u64 bytes = a.count;
  const u64 nvec = bytes / 16;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 src = a.in[root];
  if (a.rank == root) {
    if (a.out[root] != src) {
      const v16* s = reinterpret_cast<const v16*>(src);
      v16* own = reinterpret_cast<v16*>(a.out[root]);
      for (u64 v = tid0; v < nvec; v += gthreads) own[v] = s[v];
    }
    for (u64 i = nvec * 16 + tid0; i < bytes; i += gthreads) {
      const u8 c = reinterpret_cast<const u8*>(src)[i];
      for (u32 p = 0; p < n; ++p) {
        if (a.out[p] != src) reinterpret_cast<u8*>(a.out[p])[i] = c;
      }
    }
  } else {
    const u32 k = (a.rank + n - root - 1) % n;
    u64 b, x;
    partition(nvec, m, k, b, x);
    const v16* s = reinterpret_cast<const v16*>(src) + b;
    // destination q = the non-root with chunk (k + q) % m: q = 0 is this rank's own
    // output, then the other non-roots in rotation (constant indices: registers)
    v16* dst[COLL_MAX_RANKS];
#pragma unroll
    for (u32 q = 0; q < COLL_MAX_RANKS; ++q) {
      if (q < m) dst[q] = reinterpret_cast<v16*>(a.out[(root + 1 + (k + q) % m) % n]) + b;
    }
    const u64 len = x - b;
    u64 j = tid0;
    for (; j + gthreads < len; j += 2 * gthreads) {
      const v16 v0 = s[j];
      const v16 v1 = s[j + gthreads];
#pragma unroll
      for (u32 q = 0; q < COLL_MAX_RANKS; ++q) {
        if (q < m) {
          dst[q][j] = v0;
          dst[q][j + gthreads] = v1;
        }
      }
    }
    if (j < len) {
      const v16 v0 = s[j];
#pragma unroll
      for (u32 q = 0; q < COLL_MAX_RANKS; ++q) {
        if (q < m) dst[q][j] = v0;
      }
    }
  }
  prims.end();
}

// Broadcast, LL: a.count = bytes, a multiple of 8, at most the LL slot (host checks).
// The root stores its input as packets into slot(p, root) of every other rank (and its
// own output unless in place); every other rank waits for them and stores its output.
COMMHAL_DEVICE void broadcast_ll(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u32 root = coll_root(a);
  const u64 npk = a.count / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (a.rank == root) {
    if (e > 2) {
      if (threadIdx.x < a.nranks && threadIdx.x != root) wait_peer_done(a, threadIdx.x, e - 2);
      __syncthreads();
    }
    const uint2* src = reinterpret_cast<const uint2*>(a.in[root]);
    uint2* own = reinterpret_cast<uint2*>(a.out[root]);
    for (u64 i = tid0; i < npk; i += gthreads) {
      const uint2 v = src[i];
      for (u32 p = 0; p < a.nranks; ++p) {
        if (p == root) continue;
        ll16_store(ll_slot(a, p, root, parity) + i * 16, v, flag);
      }
      if (reinterpret_cast<const void*>(own) != reinterpret_cast<const void*>(src)) own[i] = v;
    }
  } else {
    bool ok = true;
    uint2* out = reinterpret_cast<uint2*>(a.out[a.rank]);
    for (u64 i = tid0; i < npk; i += gthreads)
      out[i] = ll16_wait(ll_slot(a, a.rank, root, parity) + i * 16, flag, bound(a), ok);
  }
}

// Broadcast, chain: a.count = bytes. Position of rank r: (r - root) mod n; the root is
// position 0 and reads its input; every rank but the last stores the chunk into the
// next rank, and every rank but the root gets it from the previous one.
//   Direct (no COLL_FLAG_BCAST_STAGED): the chunk goes into the next rank's output,
//   which that rank then reads to forward it; the root also fills its own output
//   (unless in place).
//   Staged (COLL_FLAG_BCAST_STAGED, host: staging of at least `bytes`): the chunk goes
//   into the next rank's staging, which that rank copies into its own output and
//   forwards. One more local store per byte, but no rank ever stores into a peer's
//   output, so back-to-back broadcasts stream on with credits like the reduce chain.
//   4 ranks, root 2: 2 -> 3 -> 0 -> 1; rank 1 (position 3) only waits.
// Over the primitives (Prims<Simple, ChainFromRoot>, coll/prims.cuh), one step per
// position: copy_send (root), recv_copy_send (middle), recv_copy (last, staged) or recv
// (last, direct).
COMMHAL_DEVICE void broadcast_chain(const CollArgs& a) {
  const bool staged = a.flags & COLL_FLAG_BCAST_STAGED;
  const u64 nvec = a.count / 16;
  const u64 cv = (u64)blockDim.x * chain_unroll(a);
  Prims<Simple, ChainFromRoot> p(a, nvec, staged ? chain_geometry(nvec, cv, true) : 0);
  const u32 r = a.rank;
  v16* own = reinterpret_cast<v16*>(a.out[r]);
  v16* to = reinterpret_cast<v16*>(staged ? a.stage[p.next] : a.out[p.next]);
  // staged: a rank past the root copies its staging out and credits the previous rank
  const v16* got = reinterpret_cast<const v16*>(staged ? a.stage[r] : a.out[r]);
  if (p.first()) {
    p.copy_send(reinterpret_cast<const v16*>(a.in[r]), to, a.in[r] != a.out[r] ? own : nullptr);
  } else if (p.last()) {
    if (staged) {
      p.recv_copy(got, own, true);
    } else {
      p.recv();
    }
  } else {
    p.recv_copy_send(got, to, staged ? own : nullptr, staged);
  }
}

// Broadcast, LL63 chain, over the primitives (Prims<LL63, ChainFromRoot>,
// coll/prims_ll63.cuh): a.count = bytes, bytes % 16 == 0 (host), blockDim a multiple of
// 32. Position (r - root) mod n as in broadcast_chain: the root packs its input and
// sends it (and copies it into its own output unless in place); a middle rank forwards
// the packets unchanged, then unpacks them into its output; the last rank only unpacks.
//   4 ranks, root 2: 2 -> 3 -> 0 -> 1.
COMMHAL_DEVICE void broadcast_ll63(const CollArgs& a) {
  Prims<LL63, ChainFromRoot> prims(a, a.count);
  const v16* in = reinterpret_cast<const v16*>(a.in[a.root]);
  v16* out = reinterpret_cast<v16*>(a.out[a.rank]);
  if (prims.first()) {
    prims.copy_send(in, a.in[a.root] != a.out[a.rank] ? out : nullptr);
  } else if (prims.last()) {
    prims.recv(out);
  } else {
    prims.recv_copy_send(out);
  }
}
