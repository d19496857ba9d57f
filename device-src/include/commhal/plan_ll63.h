// plan_ll63.h — LL63 packets in kernels generated from plans (Plan::packets = Ll63;
// algorithms/src/codegen.rs): the packets of commhal/ll63.h (63 data bits and a valid
// bit per 64-bit word, whole warps moving tiles of 252 16-byte vectors as 4 KiB of
// packets), the ops of plan.h that carry packets, and the finalize of those plans.
//
// Where packets land. A valid bit names no launch, so a region must read as all zeros
// before a sender fills it: LL63 packets live in an area of their own, after the two
// scratch copies of every plan area, in two copies by launch parity as the scratch
// copies (a.ll63_copy_bytes apart). Only LL63 packet ops touch it, and a reader clears
// every packet it read (ll63_clear), so a copy is all zeros again once its launch's
// readers are done. The writer of launch L fills the copy that launch L - 2 used, and
// plan.h's done words (wait_done) order that after the reader finished L - 2, as for
// scratch; every packet sent in a launch is read in it (a plan reads what it sends),
// so no packet of an earlier launch, of any LL63 plan or layout, is left. A failed wait
// may leave packets behind, but the error word is sticky: every later wait gives up.
//
// Layout. A chunk's packets start on a tile of their own: the chunk at scratch element
// s with index `first` starts at tile floor(s × esz / 4032) + first (the host sizes a
// copy the same way: codegen gpu_ll63_copy_bytes), and tile t of the chunk carries its
// bytes [4032 t, 4032 t + 4032). Senders send whole tiles (zeros past the chunk's end),
// receivers wait for and clear whole tiles, and only the chunk's own bytes are loaded
// or stored, at any alignment (whole 16-byte vectors where aligned, else bytes).
//
// Work. An op of B bytes has ceil(B / 4032) tiles; a CTA takes its share of them
// (plan.h share, as share_elems cuts elements) and its warps take tiles lo + w,
// lo + w + W, ... So every tile op on the same chunk maps each byte to the same lane of
// the same warp (a put and the reduce after it in place: codegen orders them with a
// CTA barrier, as for LL16), while an op that splits elements (copy, reduce) maps them
// otherwise (codegen: a replica sync between the two kinds on one range). Codegen
// fuses a run of puts of several chunks, or of unpacks of several senders, into one op
// over all their tiles (ll63_items), which maps them like no other op but a run over the
// same chunks in the same order (codegen Split::Items). The host runs a
// warp per tile, spread over as many CTAs as there are SMs before a CTA takes a second
// warp (plan_grid.rs Grid::plan, as the hand kernels' layout::ll63_grid): an SM's share
// of the link traffic limits these kernels. Waits are eager (commhal/ll63.h): a warp
// holds few tiles, as in the hand kernels' all-pairs LL63 steps.
#pragma once
#include "commhal/ll63.h"

namespace commhal {
namespace plan {

#define PLAN_LL63_TILE_BYTES (COMMHAL_LL63_TILE_VECS * 16)  // data bytes of a tile
#define PLAN_LL63_PKT_BYTES (COMMHAL_LL63_TILE_PKTS * 16)   // packet bytes of a tile

// Offset of this launch's LL63 copy in a plan area.
COMMHAL_DEVICE u64 ll63_off(const Ctx& c) {
  return PLAN_DATA_OFF + 2 * c.a->scratch_copy_bytes + (c.epoch & 1) * (u64)c.a->ll63_copy_bytes;
}

// Byte offset of the LL63 packets of a scratch chunk starting at element s (index
// `first`) in the LL63 copy (see Layout).
COMMHAL_DEVICE u64 ll63_offset(u64 s, u64 esz, u64 first) {
  return (u64)PLAN_LL63_PKT_BYTES * ((s * esz) / PLAN_LL63_TILE_BYTES + first);
}

// LL63 packets of a scratch chunk, from its element bounds [s, e) (as packets_of).
COMMHAL_DEVICE Span packets63_of(u64 base, u64 esz, u64 first, u64 s, u64 e) {
  return span_at(base + ll63_offset(s, esz, first), e - s);
}

// The same from the chunk's rational position (as packets).
COMMHAL_DEVICE Span packets63(u64 base, u64 esz, u64 total, u32 nchunks, u64 first, u32 cnt) {
  return packets63_of(base, esz, first, first * total / nchunks, (first + cnt) * total / nchunks);
}

// This CTA's tiles of an op of `bytes` bytes, warp by warp: body(t, lane) for tile t,
// the whole warp converged; body returns false to stop (a failed wait, the warp's
// verdict).
template <typename Body>
COMMHAL_DEVICE void ll63_share(const Ctx& c, u64 bytes, Body body) {
  u64 lo, hi;
  share(c, (bytes + PLAN_LL63_TILE_BYTES - 1) / PLAN_LL63_TILE_BYTES, 1, lo, hi);
  const u32 lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (u64 t = lo + threadIdx.x / 32; t < hi; t += warps) {
    if (!body(t, lane)) return;
  }
}

// Vector v of n bytes at p, byte by byte (zeros past the end), and back (none past the
// end): the last vector of a chunk and unaligned memory. Not inlined, as plan.h's
// packet_data_bytes: they stay out of the tile loops' registers.
__device__ __noinline__ v16 ll63_vec_bytes(const u8* p, u64 bytes, u64 v) {
  u32 w[4] = {0, 0, 0, 0};
  for (u32 b = 0; b < 16 && 16 * v + b < bytes; ++b) w[b / 4] |= (u32)p[16 * v + b] << (8 * (b % 4));
  return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __noinline__ void ll63_store_vec_bytes(u8* p, u64 bytes, u64 v, v16 x) {
  const u32 w[4] = {x.x, x.y, x.z, x.w};
  for (u32 b = 0; b < 16 && 16 * v + b < bytes; ++b) p[16 * v + b] = (u8)(w[b / 4] >> (8 * (b % 4)));
}

// The slot and lane that carry vector v of tile t (commhal/ll63.h geometry), or
// slot -1 where v lies in another tile.
COMMHAL_DEVICE int ll63_slot_of(u64 v, u64 t, u32& lane) {
  if (v < t * COMMHAL_LL63_TILE_VECS || v >= (t + 1) * COMMHAL_LL63_TILE_VECS) return -1;
  const u32 r = (u32)(v - t * COMMHAL_LL63_TILE_VECS);
  lane = r % 63 < 32 ? r % 63 : r % 63 - 32;
  return (int)(2 * (r / 63) + (r % 63 < 32 ? 0 : 1));
}

// This lane's data vectors of tile t of `bytes` bytes at p as words (zeros past the end
// and in the top-bit slot); and stored back where they lie inside. 16-byte aligned
// memory takes the hand kernels' loads and stores (commhal/ll63.h ll63_load /
// ll63_store: the 8 loads independent, so they are in flight together), and a partial
// last vector moves byte by byte on the one lane that holds it; unaligned memory moves
// every vector byte by byte.
COMMHAL_DEVICE void ll63_load_tile(const u8* p, u64 bytes, u64 t, u32 lane, u64 (&w)[16]) {
  if ((reinterpret_cast<u64>(p) & 15) == 0) {
    ll63_load(reinterpret_cast<const v16*>(p), t * COMMHAL_LL63_TILE_VECS, lane, bytes / 16, w);
    u32 l = 0;
    const int s = bytes % 16 != 0 ? ll63_slot_of(bytes / 16, t, l) : -1;
    if (s >= 0 && lane == l) {
      const v16 x = ll63_vec_bytes(p, bytes, bytes / 16);
#pragma unroll
      for (int k = 0; k < 8; ++k) {  // constant indices: w stays in registers
        if (k == s) ll63_set(w, k, x);
      }
    }
    return;
  }
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    const u64 v = t * COMMHAL_LL63_TILE_VECS + ll63_slot_vec(s, lane);
    const bool in = ll63_slot_has_vec(s, lane) && 16 * v < bytes;
    ll63_set(w, s, in ? ll63_vec_bytes(p, bytes, v) : make_uint4(0, 0, 0, 0));
  }
}
COMMHAL_DEVICE void ll63_store_tile(u8* p, u64 bytes, u64 t, u32 lane, const u64 (&w)[16]) {
  if ((reinterpret_cast<u64>(p) & 15) == 0) {
    ll63_store(reinterpret_cast<v16*>(p), t * COMMHAL_LL63_TILE_VECS, lane, bytes / 16, w);
    u32 l = 0;
    const int s = bytes % 16 != 0 ? ll63_slot_of(bytes / 16, t, l) : -1;
    if (s >= 0 && lane == l) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (k == s) ll63_store_vec_bytes(p, bytes, bytes / 16, ll63_vec(w, k));
      }
    }
    return;
  }
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    const u64 v = t * COMMHAL_LL63_TILE_VECS + ll63_slot_vec(s, lane);
    if (ll63_slot_has_vec(s, lane) && 16 * v < bytes) ll63_store_vec_bytes(p, bytes, v, ll63_vec(w, s));
  }
}

// This lane's first packet of tile t in a packet area.
COMMHAL_DEVICE u64 ll63_packet(u64 t, u32 lane) {
  return (t * COMMHAL_LL63_TILE_PKTS + lane) * 16;
}

// The LL63 put of one source to NP peers (packet areas dst[q]) and, unless own is null,
// the copy of the same n elements into own (plan.h put_packets_multi's LL63 form): each
// tile loaded and packed once, stored into own, then sent to every peer.
template <u32 NP>
COMMHAL_DEVICE void put_packets63_multi(const Ctx& c, u8* const (&dst)[NP], const u8* src, u64 n,
                                        u64 esz, u8* own) {
  const u64 bytes = n * esz;
  ll63_share(c, bytes, [&](u64 t, u32 lane) {
    u64 w[16];
    ll63_load_tile(src, bytes, t, lane, w);
    if (own != nullptr) ll63_store_tile(own, bytes, t, lane, w);
    ll63_pack(w, lane);
#pragma unroll
    for (u32 q = 0; q < NP; ++q) ll63_send(dst[q] + ll63_packet(t, lane), w);
    return true;
  });
}

// Write n elements of src as LL63 packets at dst (this CTA's share of the tiles).
COMMHAL_DEVICE void put_packets63(const Ctx& c, u8* dst, const u8* src, u64 n, u64 esz) {
  u8* const d[1] = {dst};
  put_packets63_multi<1>(c, d, src, n, esz, nullptr);
}

// This lane's data words of the tile whose packets start at p (this lane's first),
// waited for eagerly, then cleared so the area reads as zeros for its next use. false:
// the wait gave up (the warp's verdict, commhal/ll63.h ll63_wait).
COMMHAL_DEVICE bool ll63_take(u8* p, u64 (&w)[16], const WaitBound& b, u32 lane) {
  if (!ll63_wait<true>(p, w, b, nullptr)) return false;
  ll63_clear(p);
  ll63_unpack(w, lane);
  return true;
}

// dst = packets[0] (op) ... (op) (locals[0] (op) ...) (op) ... packets[NP - 1]: n
// elements, tile by tile (plan.h reduce_packets' LL63 form), the locals entering before
// packet LPOS (plan::local_position: rank order); each of the NP packet areas in order
// is waited for, cleared and unpacked. The locals are loaded where they enter, as the
// hand kernels' sum: first (LPOS 0) their latency hides behind the waits; loaded ahead
// of a later position they would take 16 more registers a thread, and the kernels
// spilled (96-160 bytes at 128 registers). A single packet area and no locals (unpack)
// moves the bits as they are. NL, NP and LPOS are constants (codegen), so the arrays
// stay in registers.
// With NQ > 0 the result, once stored, is also sent as LL63 packets to the NQ packet
// areas send[q] (the put of dst that follows the reduce in the two-shot all-reduce,
// fused as the hand kernels' reduce_replicate: no second load, no CTA barrier), and
// avg's finalize (fin = nranks; 0: none) divides it in registers first.
template <int DT, int OP, u32 NL, u32 NP, u32 NQ, u32 LPOS = 0>
COMMHAL_DEVICE void reduce_put_packets63(const Ctx& c, u8* dst,
                                         const u8* const (&locals)[NL > 0 ? NL : 1],
                                         u8* const (&pk)[NP], u8* const (&send)[NQ > 0 ? NQ : 1],
                                         u64 n, u32 fin) {
  typedef typename Elem<DT>::T T;
  typedef typename T::R R;
  const u64 bytes = n * sizeof(R);
  const WaitBound b = bound(c);
  // A lone packet area sent on unchanged (a chain's forwarding rank): the packets go
  // out as they came, before they are cleared, unpacked and stored, as the hand
  // kernels' recv_copy_send; unpacking and packing again first put those steps into
  // every hop's latency (4-rank broadcast chain at 128-256 KiB in graphs: 1.09-1.23
  // of the hand kernel's time).
  const bool forward = NL == 0 && NP == 1 && NQ > 0 && (OP != 4 || fin == 0);
  ll63_share(c, bytes, [&](u64 t, u32 lane) {
    u64 acc[16];
    if (forward) {
      u8* const p = pk[0] + ll63_packet(t, lane);
      if (!ll63_wait<true>(p, acc, b, nullptr)) return false;
#pragma unroll
      for (u32 q = 0; q < NQ; ++q) ll63_send(send[q] + ll63_packet(t, lane), acc);
      ll63_clear(p);
      ll63_unpack(acc, lane);
      ll63_store_tile(dst, bytes, t, lane, acc);
      return true;
    }
    auto add_locals = [&](bool first) {
#pragma unroll
      for (int q = 0; q < (int)NL; ++q) {  // (int: no "unsigned < 0" warning for NL = 0)
        u64 w[16];
        ll63_load_tile(locals[q], bytes, t, lane, w);
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[i] = first && q == 0 ? w[i] : elem_op64<T, OP>(acc[i], w[i]);
      }
    };
    if (LPOS == 0) add_locals(true);
#pragma unroll
    for (u32 k = 0; k < NP; ++k) {
      if (LPOS > 0 && k == LPOS) add_locals(false);
      u64 w[16];
      if (!ll63_take(pk[k] + ll63_packet(t, lane), w, b, lane)) return false;
      const bool first = k == 0 && (NL == 0 || LPOS > 0);
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[i] = first ? w[i] : elem_op64<T, OP>(acc[i], w[i]);
    }
    if (LPOS > 0 && LPOS == NP) add_locals(false);
    if (OP == 4 && fin != 0) {  // finalize_avg63 on the registers (zeros stay zeros)
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[i] = elem_lanes<T>(acc[i], 0, [&](R x, R) { return T::div(x, fin); });
    }
    ll63_store_tile(dst, bytes, t, lane, acc);
    if (NQ > 0) {
      ll63_pack(acc, lane);
#pragma unroll
      for (u32 q = 0; q < NQ; ++q) ll63_send(send[q] + ll63_packet(t, lane), acc);
    }
    return true;
  });
}

// reduce_put_packets63 without sends.
template <int DT, int OP, u32 NL, u32 NP, u32 LPOS = 0>
COMMHAL_DEVICE void reduce_packets63(const Ctx& c, u8* dst, const u8* const (&locals)[NL > 0 ? NL : 1],
                                     u8* const (&pk)[NP], u64 n) {
  u8* const none[1] = {nullptr};
  reduce_put_packets63<DT, OP, NL, NP, 0, LPOS>(c, dst, locals, pk, none, n, 0);
}

// The items of NP chunks of n[q] elements of esz bytes: every chunk's tiles, chunk after
// chunk, a warp per tile (plan.h chunk_items: a CTA takes its share of the items and its
// warps take items lo + w, lo + w + W, ...): body(q, t, lane) for tile t of chunk q, the
// whole warp converged; body returns false to stop (a failed wait).
template <u32 NP, typename Body>
COMMHAL_DEVICE void ll63_items(const Ctx& c, const u64 (&n)[NP], u64 esz, Body body) {
  const u32 lane = threadIdx.x % 32;
  chunk_items(c, n, esz, PLAN_LL63_TILE_BYTES, threadIdx.x / 32, blockDim.x / 32,
              [&](u32 q, u64 t) { return body(q, t, lane); });
}

// The LL63 puts of NP chunks src[q] (n[q] elements of esz bytes) into packet areas
// dst[q], one op: codegen fuses a run of puts of different chunks (the reduce-scatter's,
// the first half of the two-shot all-reduce) into this, as the hand kernels' scatter,
// so every chunk's tiles go out from different warps at once (op by op, the warps of
// one chunk's few tiles sent every chunk in turn while the others idled).
template <u32 NP>
COMMHAL_DEVICE void put_packets63_scatter(const Ctx& c, u8* const (&dst)[NP],
                                          const u8* const (&src)[NP], const u64 (&n)[NP],
                                          u64 esz) {
  ll63_items(c, n, esz, [&](u32 q, u64 t, u32 lane) {
    const u64 bytes = pick(n, q) * esz;
    u64 w[16];
    ll63_load_tile(pick(src, q), bytes, t, lane, w);
    ll63_pack(w, lane);
    ll63_send(pick(dst, q) + ll63_packet(t, lane), w);
    return true;
  });
}

// The unpacks of NP packet areas pk[q] (chunks of n[q] elements of esz bytes) into
// dst[q], one op: codegen fuses a run of single-source, no-local read-reduces (the
// all-gather's, the second half of the two-shot all-reduce) into this, as the hand
// kernels' gather, so the waits for every sender run on different warps at once (op
// by op, a chunk's few tiles kept most warps idle).
template <u32 NP>
COMMHAL_DEVICE void unpack_packets63_multi(const Ctx& c, u8* const (&dst)[NP], u8* const (&pk)[NP],
                                           const u64 (&n)[NP], u64 esz) {
  const WaitBound b = bound(c);
  ll63_items(c, n, esz, [&](u32 q, u64 t, u32 lane) {
    u64 w[16];
    if (!ll63_take(pick(pk, q) + ll63_packet(t, lane), w, b, lane)) return false;
    ll63_store_tile(pick(dst, q), pick(n, q) * esz, t, lane, w);
    return true;
  });
}

// avg's last step over this CTA's tiles of n elements (finalize_avg's LL63 form: the
// share of the tile ops before it, so only a CTA barrier orders the two).
template <int DT>
COMMHAL_DEVICE void finalize_avg63(const Ctx& c, u8* dst, u64 n, u32 nranks) {
  typedef typename Elem<DT>::T T;
  typedef typename T::R R;
  if (nranks == 1) return;
  const u64 per = PLAN_LL63_TILE_BYTES / sizeof(R);  // elements per tile
  u64 lo, hi;
  share(c, (n + per - 1) / per, 1, lo, hi);
  const u64 end = hi * per < n ? hi * per : n;
  R* d = reinterpret_cast<R*>(dst);
  for (u64 i = lo * per + threadIdx.x; i < end; i += blockDim.x) d[i] = T::div(d[i], nranks);
}

}  // namespace plan
}  // namespace commhal
