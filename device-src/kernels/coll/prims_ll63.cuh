// coll/prims_ll63.cuh — the LL63 protocol of the primitives (coll/prims.cuh):
// Prims<LL63, AllPeers>, packets of 63 data bits and a valid bit per 64-bit word
// (commhal/ll63.h), moved by whole warps in tiles of 252 16-byte vectors (4 KiB of
// packets). For mid sizes, where LL16's doubled bytes cost more than its missing
// barrier saves: the one-shot all-reduce (replicate, reduce), the all-pairs one
// (scatter, reduce_replicate, gather; the push all-reduce's steps) and the all-gather
// (replicate, gather) run on it.
//
// Where packets land. Every launch uses half e mod 2 of every rank's LL63 small region
// (a.ll63_small_off, a.ll63_small_half; the one the small LL63 chains use). Before its
// first send a block waits until every peer completed launch e - 2, the last one that
// used this half (usually long true); a receiver clears every packet it read, so the
// half is all zeros again after each launch. The half holds slot sets, one per sending
// step in call order: replicate or scatter fills set 0, reduce_replicate set 1. A set
// has n - 1 slots of T tiles (T: the tiles of the largest part of the first sending
// step; part 0 of a callable, which a partition's is); sender s's slot in receiver q is
// (s - q - 1) mod n. The host checks that the launch's sets fit a half
// (layout::oneshot_half_bytes, layout::pairs_half_bytes).
//
// Work. Each call walks warp items (a tile to send, to receive, or to sum) in one index
// space per launch: warp w (of W in the grid) takes items w, w + W, ... Each call takes
// the items after the previous call's, so on a grid of one warp per item the steps run
// on different warps at once and a warp's latency is one item's (the host sizes the grid
// so); but reduce after replicate takes replicate's items, so the warp that loaded a
// tile of the input for sending is the one that stores its sum (in place: no store
// overtakes a load). A warp sends all its tiles of a step before
// it waits in a later one, a reduce waits only for sends, a gather only for reduces, and
// every block is resident (host: blocks <= SMs): no wait cycle.
// Inputs, outputs and the landing parts of dst are whole 16-byte vectors, 16-byte
// aligned (host); premulsum pre-multiplies where the sum is taken, as LL16.
#pragma once
#include "coll/ll63.cuh"
#include "coll/prims.cuh"

struct LL63 {};

template <>
struct Prims<LL63, AllPeers> {
  enum { REDUCE_AFTER_REPLICATE = true };
  enum { ELEMENT_TAIL = false };  // whole vectors only: no element tail for the caller
  const CollArgs& a;
  u64 e;
  u64 half;   // this launch's half of every rank's LL63 small region (scratch offset)
  u64 set;    // offset in the half of the slot set the last sending step filled
  u64 slot;   // bytes of one slot (0 before the first sending step)
  u32 item;   // first warp item of the next call
  u32 item0;  // first warp item of the last replicate (its reduce takes the same)
  bool ok;    // no wait of this warp gave up

  COMMHAL_DEVICE explicit Prims(const CollArgs& args)
      : a(args), e(coll_begin(args)), half(0), set(0), slot(0), item(0), item0(0), ok(true) {
    if (e > 2) {
      if (threadIdx.x < a.nranks && threadIdx.x != a.rank) wait_peer_done(a, threadIdx.x, e - 2);
      __syncthreads();
    }
    half = a.ll63_small_off + (e & 1) * a.ll63_small_half;
  }

  // The same bytes src(rank, *) to every peer (each tile loaded and packed once), and
  // with `own` to dst(rank, rank) where that is not the source.
  template <typename Src, typename Dst>
  COMMHAL_DEVICE void replicate(u64 bytes, Src src, Dst dst, bool own) {
    const u64 nvec = bytes / 16, T = first_set(nvec);
    const v16* in = reinterpret_cast<const v16*>(src(a.rank, a.rank));
    v16* d_own = own && dst(a.rank, a.rank) != src(a.rank, a.rank)
                     ? reinterpret_cast<v16*>(dst(a.rank, a.rank))
                     : nullptr;
    item0 = item;
    tiles(T, [&](u32 t, u32 lane) {
      u64 w[16];
      ll63_load(in, (u64)t * COMMHAL_LL63_TILE_VECS, lane, nvec, w);
      if (d_own != nullptr) ll63_store(d_own, (u64)t * COMMHAL_LL63_TILE_VECS, lane, nvec, w);
      ll63_pack(w, lane);
      for (u32 k = 1; k < a.nranks; ++k) {
        const u32 q = a.rank + k < a.nranks ? a.rank + k : a.rank + k - a.nranks;
        ll63_send(pkt(q, a.rank, t, lane), w);
      }
      return true;
    });
  }

  // Part src(rank, p) to every peer p; `bytes`: every part's size, or a callable giving
  // part p's (part 0 the largest).
  template <typename Bytes, typename Src, typename Dst>
  COMMHAL_DEVICE void scatter(Bytes bytes, Src src, Dst, bool) {
    const u32 T = first_set(part_bytes(bytes, 0) / 16);
    peers_tiles(T, [&](u32 p, u32 t, u32 lane) {
      const u64 nvec = part_bytes(bytes, p) / 16;
      if ((u64)t * COMMHAL_LL63_TILE_VECS >= nvec) return true;
      u64 w[16];
      ll63_load(reinterpret_cast<const v16*>(src(a.rank, p)), (u64)t * COMMHAL_LL63_TILE_VECS,
                lane, nvec, w);
      ll63_pack(w, lane);
      ll63_send(pkt(p, a.rank, t, lane), w);
      return true;
    });
  }

  // After replicate: out = the sum, in rank order, of src(rank, rank) and every peer's
  // packets (the same bytes).
  template <typename Op, typename Src, typename Dst>
  COMMHAL_DEVICE void reduce(u64 bytes, Src src, Dst, u64 out) {
    const u64 nvec = bytes / 16;
    const v16* in = reinterpret_cast<const v16*>(src(a.rank, a.rank));
    item = item0;
    tiles(tiles_of(nvec), [&](u32 t, u32 lane) {
      u64 acc[16];
      if (!sum<Op>(acc, in, nvec, t, lane)) return false;
      ll63_store(reinterpret_cast<v16*>(out), (u64)t * COMMHAL_LL63_TILE_VECS, lane, nvec, acc);
      return true;
    });
  }

  // After scatter: this rank's part (`bytes`) summed in rank order with every peer's,
  // stored at out(r, rank) of this rank r and sent to every peer, which stores it there
  // in gather.
  template <typename Op, typename Src, typename Dst, typename Out>
  COMMHAL_DEVICE void reduce_replicate(u64 bytes, Src src, Dst, Out out) {
    const u64 nvec = bytes / 16;
    const v16* in = reinterpret_cast<const v16*>(src(a.rank, a.rank));
    v16* o = reinterpret_cast<v16*>(out(a.rank, a.rank));
    const u64 from = set;
    const u32 T = (u32)(slot / (COMMHAL_LL63_TILE_PKTS * 16));
    set += (u64)(a.nranks - 1) * slot;
    tiles(T, [&](u32 t, u32 lane) {
      if ((u64)t * COMMHAL_LL63_TILE_VECS >= nvec) return true;
      u64 acc[16];
      if (!sum<Op>(acc, in, nvec, t, lane, from)) return false;
      ll63_store(o, (u64)t * COMMHAL_LL63_TILE_VECS, lane, nvec, acc);
      ll63_pack(acc, lane);
      for (u32 q = 0; q < a.nranks; ++q) {
        if (q != a.rank) ll63_send(pkt(q, a.rank, t, lane), acc);
      }
      return true;
    });
  }

  // Every peer p's packets of the last sending step, unpacked to dst(rank, p): `bytes`
  // as scatter's.
  template <typename Bytes, typename Dst>
  COMMHAL_DEVICE void gather(Bytes bytes, Dst dst) {
    const u32 T = (u32)(slot / (COMMHAL_LL63_TILE_PKTS * 16));
    peers_tiles(T, [&](u32 p, u32 t, u32 lane) {
      const u64 nvec = part_bytes(bytes, p) / 16;
      if ((u64)t * COMMHAL_LL63_TILE_VECS >= nvec) return true;
      u64 w[16];
      u8* pk = pkt(a.rank, p, t, lane);
      if (!ll63_recv<true>(a, pk, a.rank, w)) return false;
      ll63_clear(pk);
      ll63_unpack(w, lane);
      ll63_store(reinterpret_cast<v16*>(dst(a.rank, p)), (u64)t * COMMHAL_LL63_TILE_VECS, lane,
                 nvec, w);
      return true;
    });
  }

 private:
  static COMMHAL_DEVICE u64 tiles_of(u64 nvec) { return ll63_tile_count(nvec); }
  static COMMHAL_DEVICE u64 part_bytes(u64 bytes, u32) { return bytes; }
  template <typename F>
  static COMMHAL_DEVICE u64 part_bytes(F bytes, u32 p) {
    return bytes(p);
  }

  // The first sending step: slots of the tiles of `nvec` vectors, in set 0.
  COMMHAL_DEVICE u32 first_set(u64 nvec) {
    const u64 T = tiles_of(nvec);
    slot = T * COMMHAL_LL63_TILE_PKTS * 16;
    set = 0;
    return (u32)T;
  }

  // This lane's packet of tile t of sender s's slot in rank q, in set `in_set`.
  COMMHAL_DEVICE u8* pkt(u32 q, u32 s, u32 t, u32 lane, u64 in_set) const {
    const u32 k = s >= q + 1 ? s - q - 1 : s + a.nranks - q - 1;
    return reinterpret_cast<u8*>(a.scratch[q] + half) + in_set + (u64)k * slot +
           ((u64)t * COMMHAL_LL63_TILE_PKTS + lane) * 16;
  }
  COMMHAL_DEVICE u8* pkt(u32 q, u32 s, u32 t, u32 lane) const { return pkt(q, s, t, lane, set); }

  // Items [item, item + count), this warp's: body(i - item, lane) for each; body
  // returns false to stop (a failed wait; the warp's verdict, so the warp stays
  // converged), and no later step of the warp runs then.
  template <typename Body>
  COMMHAL_DEVICE void tiles(u64 count, Body body) {
    const u32 W = gridDim.x * blockDim.x / 32, w = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const u32 start = item, lane = threadIdx.x % 32;
    item += (u32)count;
    if (!ok) return;
    for (u32 i = start + (w + W - start % W) % W; i < item; i += W) {
      if (!body(i - start, lane)) {
        ok = false;
        return;
      }
    }
  }

  // (n - 1) T items, tile t of peer p = rank + 1 + j / T for item j (a peer's tiles in a
  // run, the peers from the next rank on).
  template <typename Body>
  COMMHAL_DEVICE void peers_tiles(u32 T, Body body) {
    tiles((u64)(a.nranks - 1) * T, [&](u32 j, u32 lane) {
      const u32 k = 1 + j / T;
      const u32 p = a.rank + k < a.nranks ? a.rank + k : a.rank + k - a.nranks;
      return body(p, j % T, lane);
    });
  }

  // acc = tile t of the n ranks' parts summed in rank order, finished: this rank's from
  // `in` (nvec vectors), every peer's from its packets in set `from` (received, then
  // cleared). false = a receive gave up.
  template <typename Op>
  COMMHAL_DEVICE bool sum(u64 (&acc)[16], const v16* in, u64 nvec, u32 t, u32 lane) {
    return sum<Op>(acc, in, nvec, t, lane, set);
  }
  template <typename Op>
  COMMHAL_DEVICE bool sum(u64 (&acc)[16], const v16* in, u64 nvec, u32 t, u32 lane, u64 from) {
    for (u32 p = 0; p < a.nranks; ++p) {
      u64 w[16];
      if (p == a.rank) {
        ll63_load(in, (u64)t * COMMHAL_LL63_TILE_VECS, lane, nvec, w);
      } else {
        u8* pk = pkt(a.rank, p, t, lane, from);
        if (!ll63_recv<true>(a, pk, a.rank, w)) return false;
        ll63_clear(pk);
        ll63_unpack(w, lane);
      }
      if (Op::PRE) {
#pragma unroll
        for (int s = 0; s < 8; ++s) ll63_set(w, s, pre16<Op>(a, ll63_vec(w, s)));
      }
      if (p == 0) {  // one branch per contribution, not one per vector
#pragma unroll
        for (int s = 0; s < 16; ++s) acc[s] = w[s];
      } else {
#pragma unroll
        for (int s = 0; s < 8; ++s) ll63_set(acc, s, add16<Op>(ll63_vec(acc, s), ll63_vec(w, s)));
      }
    }
    if (Op::FIN) {
#pragma unroll
      for (int s = 0; s < 8; ++s) ll63_set(acc, s, fin16<Op>(a, ll63_vec(acc, s)));
    }
    return true;
  }
};
