// coll/allreduce.cuh — all-reduce: one-shot (LL16), two-shot and push (Simple) on the
// primitives, and all-pairs LL63.
#pragma once
#include "coll/ll63.cuh"
#include "coll/prims.cuh"
#include "coll/reduce_inputs.cuh"

// One-shot all-reduce over the primitives (coll/prims.cuh): every rank's whole input
// lands in every other rank, which sums all of them in rank order (the same result on
// every rank). LL16 only (count * elem % 8 == 0, bytes <= slot / 2, host checks): Simple
// can not reduce after replicate, and would need staging slots of a whole message.
template <typename Op, typename Proto>
COMMHAL_DEVICE void allreduce_oneshot(const CollArgs& a) {
  static_assert(Prims<Proto, AllPeers>::REDUCE_AFTER_REPLICATE, "one-shot: LL16 only");
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
// Push all-reduce over the primitives (large sizes): every remote access is a store.
// Chunk r of every input (a partition of whole 16-byte vectors) lands in rank r's
// staging slot for the sender (slot >= ceil(nvec / n) * 16), which sums it with its own
// chunk in rank order and stores the sum into every rank's output. The tail (bytes % 16)
// is reduced by the last rank reading the peers' inputs directly (as in the two-shot
// kernel), before the END barrier.
template <typename Op>
COMMHAL_DEVICE void allreduce_push(const CollArgs& a) {
  Prims<Simple, AllPeers> prims(a);
  const u64 bytes = a.count * Op::ELEM;
  const u64 nvec = bytes / 16;
  auto begin = [&](u32 r) {
    u64 b, x;
    partition(nvec, a.nranks, r, b, x);
    return b * 16;
  };
  auto part = [&](u32 r) {
    u64 b, x;
    partition(nvec, a.nranks, r, b, x);
    return (x - b) * 16;
  };
  auto src = [&](u32 s, u32 r) { return a.in[s] + begin(r); };
  auto dst = [&](u32 r, u32 s) { return a.stage[r] + (u64)s * a.stage_slot_bytes; };
  auto out = [&](u32 r) { return a.out[r] + begin(a.rank); };
  prims.scatter(part, src, dst, false);
  prims.template reduce_replicate<Op>(part(a.rank), src, dst, out);
  if (a.rank == a.nranks - 1 && nvec * 16 < bytes) {
    reduce_elems<Op>(a, 0, nvec * 16 / Op::ELEM, a.count, 0, true);
  }
  prims.gather(bytes, out);
}
// ---- shared by the two LL63 all-reduces ----

// Start of LL63 all-reduce launch e: every peer has completed launch e - 2, the last one
// that used this parity half of the LL63 small region (usually long true). Returns the
// half's offset in every rank's scratch.
COMMHAL_DEVICE u64 ll63_ar_half(const CollArgs& a, u64 e) {
  if (e > 2) {
    if (threadIdx.x < a.nranks && threadIdx.x != a.rank) wait_peer_done(a, threadIdx.x, e - 2);
    __syncthreads();
  }
  return a.ll63_small_off + (e & 1) * a.ll63_small_half;
}

// This lane's share of tile t of `nvec` input vectors at `in`, pre-multiplied for
// premulsum.
template <typename Op>
COMMHAL_DEVICE void ll63_ar_load(const CollArgs& a, const v16* in, u64 t, u64 nvec,
                                 u64 (&w)[16]) {
  const u32 lane = threadIdx.x % 32;
  ll63_load(in, t * COMMHAL_LL63_TILE_VECS, lane, nvec, w);
  if (Op::PRE) {
#pragma unroll
    for (int s = 0; s < 8; ++s) ll63_set(w, s, pre16<Op>(a, ll63_vec(w, s)));
  }
}

// acc = the n ranks' contributions to one tile summed in rank order (the sum every rank
// stores is the same), finished (avg): own(w) loads this rank's, packets(p) is where rank
// p's packets of the tile land here (received, then cleared). false = a receive gave up.
template <typename Op, typename Own, typename Packets>
COMMHAL_DEVICE bool ll63_ar_sum(const CollArgs& a, u64 (&acc)[16], Own own, Packets packets) {
  const u32 lane = threadIdx.x % 32;
  for (u32 p = 0; p < a.nranks; ++p) {
    u64 w[16];
    if (p == a.rank) {
      own(w);
    } else {
      u8* pk = packets(p);
      if (!ll63_recv<true>(a, pk, a.rank, w)) return false;
      ll63_clear(pk);
      ll63_unpack(w, lane);
    }
#pragma unroll
    for (int s = 0; s < 8; ++s)
      ll63_set(acc, s, p == 0 ? ll63_vec(w, s) : add16<Op>(ll63_vec(acc, s), ll63_vec(w, s)));
  }
  if (Op::FIN) {
#pragma unroll
    for (int s = 0; s < 8; ++s) ll63_set(acc, s, fin16<Op>(a, ll63_vec(acc, s)));
  }
  return true;
}

// All-reduce over all pairs with LL63 packets (mid sizes, above the LL16 one-shot: the
// barrier two-shot's traffic with no barrier and no fence). a.count elements, bytes % 16
// == 0, 16-byte aligned buffers (host). The vectors split into n chunks (partition);
// rank c reduces chunk c:
//   scatter  rank r packs chunk p of its input and sends it to rank p, every p != r;
//   reduce   rank r waits for chunk r from every peer, adds them and its own in rank
//            order, stores the sum into its output and sends it packed to every peer;
//   gather   rank r waits for every peer p's sum of chunk p and stores it.
// Each rank sends 2 (n - 1) / n of the data (x 64/63), the LL16 one-shot (n - 1) x 2.
// Packets land in half e mod 2 of the receiver's LL63 small region, as the small LL63
// chains use it: 2 (n - 1) slots of T tiles (T: the tiles of the largest chunk); sender
// s's scatter slot in receiver q is k = (s - q - 1) mod n, its gather slot n - 1 + k. The
// host checks that they fit a half. Before its first send a block waits until every peer
// completed launch e - 2, the last one that used this half (usually long true); the
// receiver clears every packet it read, so the half is all zeros after each launch.
// Work: (2n - 1) T warp items, the scatter's (n - 1) T, then the reduce's T, then the
// gather's (n - 1) T; warp w takes items w, w + W, ... in that order (W warps in the
// grid; the host gives one warp per item where the grid allows: the phases then run on
// different warps at once, and a warp's latency is one item's). A warp finished its
// scatter items before it waits for anything, a reduce waits only for scatters, a gather
// only for reduces, and every block is resident (host: blocks <= SMs): no wait cycle.
// In place: rank r overwrites chunk p of its buffer in the gather only after p's sum
// arrived, which p sent after it received this rank's scatter of the same tile.
template <typename Op>
COMMHAL_DEVICE void allreduce_pairs_ll63(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 n = a.nranks, r = a.rank;
  const u64 nvec = a.count * Op::ELEM / 16;
  const u64 T = ll63_tile_count((nvec + n - 1) / n);
  const u64 slot = T * COMMHAL_LL63_TILE_PKTS * 16;
  const u64 half_off = ll63_ar_half(a, e);
  const v16* in = reinterpret_cast<const v16*>(a.in[r]);
  v16* out = reinterpret_cast<v16*>(a.out[r]);
  const u32 lane = threadIdx.x % 32;
  // packet of this lane in tile t of slot k of rank q's half
  auto pkt = [&](u32 q, u64 k, u64 t) {
    return reinterpret_cast<u8*>(a.scratch[q] + half_off) + k * slot +
           (t * COMMHAL_LL63_TILE_PKTS + lane) * 16;
  };
  const u64 S = (u64)(n - 1) * T;  // scatter items [0, S), reduce [S, S + T), gather after
  const u64 warps = (u64)gridDim.x * blockDim.x / 32;
  for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32; i < S + T + S; i += warps) {
    if (i < S || i >= S + T) {  // scatter or gather: tile t of chunk p, p != r
      const u64 j = i < S ? i : i - S - T;
      const u32 p = (r + 1 + (u32)(j / T)) % n;
      const u64 t = j % T;
      u64 cb, ce;
      partition(nvec, n, p, cb, ce);
      if (t * COMMHAL_LL63_TILE_VECS >= ce - cb) continue;
      u64 w[16];
      if (i < S) {
        ll63_ar_load<Op>(a, in + cb, t, ce - cb, w);
        ll63_pack(w, lane);
        ll63_send(pkt(p, (r + n - p - 1) % n, t), w);
      } else {
        u8* pk = pkt(r, n - 1 + (p + n - r - 1) % n, t);
        if (!ll63_recv<true>(a, pk, r, w)) return;
        ll63_clear(pk);
        ll63_unpack(w, lane);
        ll63_store(out + cb, t * COMMHAL_LL63_TILE_VECS, lane, ce - cb, w);
      }
      continue;
    }
    const u64 t = i - S;  // reduce: tile t of chunk r
    u64 rb, re;
    partition(nvec, n, r, rb, re);
    if (t * COMMHAL_LL63_TILE_VECS >= re - rb) continue;
    u64 acc[16];
    if (!ll63_ar_sum<Op>(
            a, acc, [&](u64 (&w)[16]) { ll63_ar_load<Op>(a, in + rb, t, re - rb, w); },
            [&](u32 p) { return pkt(r, (p + n - r - 1) % n, t); }))
      return;
    ll63_store(out + rb, t * COMMHAL_LL63_TILE_VECS, lane, re - rb, acc);
    ll63_pack(acc, lane);
    for (u32 q = 0; q < n; ++q) {
      if (q != r) ll63_send(pkt(q, n - 1 + (r + n - q - 1) % n, t), acc);
    }
  }
}

// All-reduce in one shot with LL63 packets (COLL_FLAG_AR_ONESHOT; mid sizes where one
// hop beats the all-pairs kernel's two): every rank packs its whole input once, sends
// it to every peer, and reduces the n inputs itself. a.count elements, bytes % 16 == 0,
// 16-byte aligned buffers (host). Each rank sends (n - 1) x the data (x 64/63: half the
// LL16 one-shot's bytes) and waits for one hop only.
// Packets land in half e mod 2 of the receiver's LL63 small region: n - 1 slots of T
// tiles (T: the tiles of the whole input); sender s's slot in receiver q is
// (s - q - 1) mod n. The host checks that they fit a half (layout::oneshot_half_bytes);
// reuse as in the all-pairs kernel (wait for every peer's launch e - 2 first; the
// receiver clears what it read).
// Work: tile t is warp item t (warp w takes t = w, w + W, ...): first the warp sends
// each of its tiles to every peer, then, tile by tile, reloads its own input, waits for
// every peer's packets of the tile and stores the sum in rank order (the same on every
// rank). In place: a tile's input is loaded for the sends by the warp that later stores
// its sum, so no store overtakes a load. A warp sends everything before it waits, and
// every block is resident (host: blocks <= SMs): no wait cycle.
template <typename Op>
COMMHAL_DEVICE void allreduce_oneshot_ll63(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 n = a.nranks, r = a.rank;
  const u64 nvec = a.count * Op::ELEM / 16;
  const u64 T = ll63_tile_count(nvec);
  const u64 slot = T * COMMHAL_LL63_TILE_PKTS * 16;
  const u64 half_off = ll63_ar_half(a, e);
  const v16* in = reinterpret_cast<const v16*>(a.in[r]);
  v16* out = reinterpret_cast<v16*>(a.out[r]);
  const u32 lane = threadIdx.x % 32;
  // packet of this lane in tile t of sender s's slot in rank q's half
  auto pkt = [&](u32 q, u32 s, u64 t) {
    return reinterpret_cast<u8*>(a.scratch[q] + half_off) + (u64)((s + n - q - 1) % n) * slot +
           (t * COMMHAL_LL63_TILE_PKTS + lane) * 16;
  };
  const u64 warps = (u64)gridDim.x * blockDim.x / 32;
  const u64 first = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  for (u64 t = first; t < T; t += warps) {
    u64 w[16];
    ll63_ar_load<Op>(a, in, t, nvec, w);
    ll63_pack(w, lane);
    for (u32 k = 1; k < n; ++k) ll63_send(pkt((r + k) % n, r, t), w);
  }
  for (u64 t = first; t < T; t += warps) {
    u64 acc[16];
    if (!ll63_ar_sum<Op>(
            a, acc, [&](u64 (&w)[16]) { ll63_ar_load<Op>(a, in, t, nvec, w); },
            [&](u32 p) { return pkt(r, p, t); }))
      return;
    ll63_store(out, t * COMMHAL_LL63_TILE_VECS, lane, nvec, acc);
  }
}

// The LL63 all-reduce entry: one shot or all pairs, as the host chose (flags).
template <typename Op>
COMMHAL_DEVICE void allreduce_ll63(const CollArgs& a) {
  if (a.flags & COLL_FLAG_AR_ONESHOT) {
    allreduce_oneshot_ll63<Op>(a);
  } else {
    allreduce_pairs_ll63<Op>(a);
  }
}
