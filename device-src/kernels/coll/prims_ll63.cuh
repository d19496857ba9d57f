// coll/prims_ll63.cuh — the LL63 protocol of the primitives (coll/prims.cuh): packets of
// 63 data bits and a valid bit per 64-bit word (commhal/ll63.h), moved by whole warps in
// tiles of 252 16-byte vectors (4 KiB of packets). For mid sizes, where LL16's doubled
// bytes cost more than its missing barrier saves. Two patterns:
//   Prims<LL63, AllPeers>: the one-shot all-reduce (replicate, reduce), the all-pairs
//     one (scatter, reduce_replicate, gather; the push all-reduce's steps), the push
//     reduce-scatter (scatter, reduce) and the all-gather (replicate, gather). Described
//     first, below.
//   Prims<LL63, RootChain<OFFSET>>: the chains of the rooted collectives, NCCL's steps
//     (broadcast_ll63: copy_send, recv_copy_send, recv; reduce_ll63: send,
//     recv_reduce_send, recv_reduce_copy). Described at its class, at the end.
//
// AllPeers.
// Where packets land. Every launch uses half e mod 2 of every rank's LL63 small region
// (a.ll63_small_off, a.ll63_small_half; the one the small LL63 chains use), so a sender
// in launch e must know every peer completed launch e - 2, the last one that used this
// half. As for the all-peers LL16 kernels (coll/prims.cuh), that follows when launch
// e - 1 heard from every peer; where it may not have, the host queues the peers_done
// fence first (coll/protocol.cuh). A receiver clears every packet it read, so the half
// is all zeros again after each launch. The half holds slot sets, one per sending
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
// so); but reduce takes the items of the replicate or scatter before it (item0):
//   after replicate, the warp that loaded a tile of the input for sending is the one
//     that stores its sum (in place: no store overtakes a load);
//   after scatter (the reduce-scatter), the warp of scatter item t (a tile of the part
//     for the next rank) sums tile t of this rank's own part. scatter never reads the
//     own part, and the sum reads and stores each vector of it in the same lane, so in
//     place (out = src(rank, rank)) no store overtakes a load either.
// A warp sends all its tiles of a step before it waits in a later one, a reduce waits
// only for sends, a gather only for reduces, and every block is resident (host: blocks
// <= SMs): no wait cycle.
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
  u32 item0;  // first warp item of the last replicate or scatter (a reduce takes the same)
  bool ok;    // no wait of this warp gave up

  COMMHAL_DEVICE explicit Prims(const CollArgs& args)
      : a(args), e(coll_begin(args)), half(0), set(0), slot(0), item(0), item0(0), ok(true) {
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
  // part p's (part 0 the largest). A reduce after it starts at its first item.
  template <typename Bytes, typename Src, typename Dst>
  COMMHAL_DEVICE void scatter(Bytes bytes, Src src, Dst, bool) {
    const u32 T = first_set(part_bytes(bytes, 0) / 16);
    item0 = item;
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

  // After replicate or scatter: out = the sum, in rank order, of src(rank, rank)
  // (`bytes`) and every peer's packets of the same bytes, in the slot set that step
  // filled (after replicate: the peer's input; after scatter: its part for this rank).
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
  // On two ranks this rank's own tile comes first, so its load is in flight before the
  // wait instead of behind it on rank 1 (a two-term sum is commutative: both ranks still
  // get the same bits); from three ranks rank order, the same association everywhere.
  COMMHAL_DEVICE bool sum(u64 (&acc)[16], const v16* in, u64 nvec, u32 t, u32 lane, u64 from) {
    for (u32 k = 0; k < a.nranks; ++k) {
      const u32 p = a.nranks != 2 ? k : (k == 0 ? a.rank : 1 - a.rank);
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
      if (k == 0) {  // one branch per contribution, not one per vector
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

// Prims<LL63, RootChain<OFFSET>>: the LL63 chains of the rooted collectives
// (ChainFromRoot: broadcast_ll63; ChainToRoot: reduce_ll63; coll/ll63.cuh says why they
// need no barrier and no fence). A rank receives packets only from the previous rank of
// the chain and sends only to the next, in the regions of coll/ll63.cuh: half e mod 2
// of the small region when the transfer fits one (ll63_small), else the large region;
// before its first send a block waits until the next rank completed the last launch
// that used them (ll63_next_free). A receiver clears every packet it read; a failed
// wait marks the next rank's error word too (ll63_recv), so every rank downstream gives
// up. The small transfers are latency-bound: their waits are EAGER (commhal/ll63.h).
// Every step walks the transfer's tiles as ll63_tiles does (tile t on warp t mod W of
// every rank), so a tile travels warp to warp down the chain. One step per position, as
// NCCL's (n >= 2, host: the first and the last rank differ):
//   broadcast: copy_send (first), recv_copy_send (middle), recv (last);
//   reduce:    send (first), recv_reduce_send (middle), recv_reduce_copy (last).
// Whole 16-byte vectors, 16-byte aligned (host).
// Code. Each step has its own tile loop, and a receiving step one per kind of wait
// (EAGER or not), so a rank's loop branches neither on its position nor on its region.
// One loop for every position, with those branches inside, took 15-49 more SASS
// instructions per tile on every position's path (sm_90: 288 on a middle rank of the
// broadcast against 255, 384 against 366 on the f16 reduce's); the price is code (the
// f16 reduce is 2.2 k instructions instead of 0.9 k, the typed ones ~3.5 x) and NVRTC
// time. Registers must stay <= 128 (512-thread blocks): the f16 reduce takes 123, its
// peak in the retry pass of a lazy wait.
template <u32 OFFSET>
struct Prims<LL63, RootChain<OFFSET>> {
  typedef RootChain<OFFSET> Pattern;
  const CollArgs& a;
  u64 nvec;    // vectors of the transfer
  u32 pos;     // this rank's position in the chain
  u32 next;    // the next rank
  bool small;  // the small region's half, not the large region
  u8* mine;    // this launch's packets for this rank (from the previous one)
  u8* theirs;  // this launch's packets for the next rank

  COMMHAL_DEVICE Prims(const CollArgs& args, u64 bytes) : a(args), nvec(bytes / 16) {
    const u64 e = coll_begin(a);
    next = Pattern::send_to(a, 0);
    pos = Pattern::pos(a);
    small = ll63_small(a, nvec);
    if (!last()) ll63_next_free(a, next, e, small);
    mine = ll63_region_for(a, a.rank, small, e);
    theirs = ll63_region_for(a, next, small, e);
  }

  COMMHAL_DEVICE bool first() const { return pos == 0; }
  COMMHAL_DEVICE bool last() const { return pos == a.nranks - 1; }

  // The first rank of a broadcast: `in` packed and sent, and copied to `own` unless
  // that is null (in place).
  COMMHAL_DEVICE void copy_send(const v16* in, v16* own) const {
    ll63_tiles(nvec, [&](u64 v0, u64 pk, u32 lane) {
      u64 w[16];
      ll63_load(in, v0, lane, nvec, w);
      if (own != nullptr) ll63_store(own, v0, lane, nvec, w);
      ll63_pack(w, lane);
      ll63_send(theirs + pk, w);
      return true;
    });
  }

  // A middle rank of a broadcast: the packets forwarded as they came, then unpacked
  // into `out`; the last rank: unpacked only.
  COMMHAL_DEVICE void recv_copy_send(v16* out) const { recv_copy<true>(out); }
  COMMHAL_DEVICE void recv(v16* out) const { recv_copy<false>(out); }

  // The first rank of a reduce: `in`, pre-multiplied (premulsum), packed and sent.
  template <typename Op>
  COMMHAL_DEVICE void send(const v16* in) const {
    ll63_tiles(nvec, [&](u64 v0, u64 pk, u32 lane) {
      u64 d[16];
      load_pre<Op>(in, v0, lane, d);
      ll63_pack(d, lane);
      ll63_send(theirs + pk, d);
      return true;
    });
  }

  // A middle rank of a reduce: the partial sum received plus `in` (pre-multiplied),
  // sent on; the last rank (the root): that sum finished (avg) into `out`, which may
  // be `in` (each vector read, then written, by the same lane).
  template <typename Op>
  COMMHAL_DEVICE void recv_reduce_send(const v16* in) const {
    recv_reduce<Op, true>(in, nullptr);
  }
  template <typename Op>
  COMMHAL_DEVICE void recv_reduce_copy(const v16* in, v16* out) const {
    recv_reduce<Op, false>(in, out);
  }

 private:
  // This lane's packets at byte offset pk of this rank's region (the warp's verdict);
  // a give-up marks the next rank's error word too where this rank SENDs on.
  template <bool SEND, bool EAGER>
  COMMHAL_DEVICE bool recv_tile(u64 pk, u64 (&w)[16]) const {
    return ll63_recv<EAGER>(a, mine + pk, SEND ? next : a.rank, w);
  }

  template <bool SEND>
  COMMHAL_DEVICE void recv_copy(v16* out) const {
    if (small) {
      recv_copy<SEND, true>(out);
    } else {
      recv_copy<SEND, false>(out);
    }
  }
  template <bool SEND, bool EAGER>
  COMMHAL_DEVICE void recv_copy(v16* out) const {
    ll63_tiles(nvec, [&](u64 v0, u64 pk, u32 lane) {
      u64 w[16];
      if (!recv_tile<SEND, EAGER>(pk, w)) return false;
      if (SEND) ll63_send(theirs + pk, w);
      ll63_clear(mine + pk);
      ll63_unpack(w, lane);
      ll63_store(out, v0, lane, nvec, w);
      return true;
    });
  }

  template <typename Op, bool SEND>
  COMMHAL_DEVICE void recv_reduce(const v16* in, v16* out) const {
    if (small) {
      recv_reduce<Op, SEND, true>(in, out);
    } else {
      recv_reduce<Op, SEND, false>(in, out);
    }
  }
  template <typename Op, bool SEND, bool EAGER>
  COMMHAL_DEVICE void recv_reduce(const v16* in, v16* out) const {
    ll63_tiles(nvec, [&](u64 v0, u64 pk, u32 lane) {
      u64 d[16];
      load_pre<Op>(in, v0, lane, d);  // before the wait: its latency overlaps the packets'
      u64 w[16];
      if (!recv_tile<SEND, EAGER>(pk, w)) return false;
      ll63_clear(mine + pk);
      ll63_unpack(w, lane);
      if (SEND) {
        send_sum<Op>(d, w, pk, lane);
      } else {
        store_sum<Op>(d, w, v0, lane, out);
      }
      return true;
    });
  }

  // d + w (the partial sum received), packed and sent on.
  template <typename Op>
  COMMHAL_DEVICE void send_sum(u64 (&d)[16], const u64 (&w)[16], u64 pk, u32 lane) const {
#pragma unroll
    for (int s = 0; s < 8; ++s) ll63_set(d, s, add16<Op>(ll63_vec(w, s), ll63_vec(d, s)));
    ll63_pack(d, lane);
    ll63_send(theirs + pk, d);
  }

  // w + d finished (avg) into `out`, slot by slot. Under the typed modules' 128-register
  // cap, every slot summed first and then finished spilled (296 bytes for the f8e4m3
  // average, 28 for the int8 minimum, sm_90); a sum computed only for the slots in
  // range cost 25 instructions per tile on the f16 one.
  template <typename Op>
  COMMHAL_DEVICE void store_sum(const u64 (&d)[16], const u64 (&w)[16], u64 v0, u32 lane,
                                v16* out) const {
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const v16 x = fin16<Op>(a, add16<Op>(ll63_vec(w, s), ll63_vec(d, s)));
      const u64 v = v0 + ll63_slot_vec(s, lane);
      if (ll63_slot_has_vec(s, lane) && v < nvec) out[v] = x;
    }
  }

  // This lane's vectors of the tile at v0 of `in` as words, pre-multiplied (premulsum).
  template <typename Op>
  COMMHAL_DEVICE void load_pre(const v16* in, u64 v0, u32 lane, u64 (&d)[16]) const {
    ll63_load(in, v0, lane, nvec, d);
    if (Op::PRE) {
#pragma unroll
      for (int s = 0; s < 8; ++s) ll63_set(d, s, pre16<Op>(a, ll63_vec(d, s)));
    }
  }
};
