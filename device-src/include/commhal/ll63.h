// ll63.h — LL63 packets: 63 data bits and a valid bit per 64-bit word, so 63/64 of the
// bytes on the wire are data. Warp-cooperative: a warp moves a tile of 252 16-byte data
// vectors as 256 16-byte packets (4 KiB); every function here is called by the whole
// warp, converged.
//
// A packet word is 64 bits, stored and loaded as one 64-bit element (st/ld .v2.u64:
// PTX makes 64-bit scalar accesses single-copy atomic): 63 data bits and a valid bit
// (bit 63) that a receiver's cleared word never has, so a receiver that sees the bit in
// a word sees that word's data. The data words' own top bits travel together in the
// last two words of every second row (LL16: 1/2 of the bytes are data; a flag byte per
// word: 7/8; NCCL's LL128 gets 15/16 from a 128-byte store atomicity that PTX does not
// promise).
// Geometry. Data in 16-byte vectors, packets 16 bytes (two words), a row is one warp
//   access: 32 lanes x 16 bytes = 512 consecutive bytes of packets. A row pair carries
//   63 data vectors: row 0 has vectors 0..31 (lane l: vector l), row 1 vectors 32..62
//   (lane l < 31: vector 32 + l), and lane 31 of row 1 holds the top bits: its word 0
//   bit l = top bit of row 0 lane l's word 0, bit 32 + l = row 1 lane l's word 0; its
//   word 1 the same for the lanes' word 1 (ballots). Warp tile t (of 32 lanes) is 4 row
//   pairs: data vectors [252 t, 252 t + 252), packets [256 t, 256 t + 256), 4 KiB. A
//   warp takes a tile whole (the ballots need every lane); vectors past the end are sent
//   as zeros and never stored. Tile t belongs to warp t mod W (W warps in the grid) on
//   every rank.
//
// Reuse is the caller's protocol: a receiver clears every packet it read (ll63_clear),
// so a region is all zeros again once read, and a sender must know the receiver read
// the previous use before it sends again (the collectives: coll/ll63.cuh).
#pragma once
#include "commhal/commhal_port.h"
#include "commhal/handles.h"
#include "commhal/wait.h"

#define COMMHAL_LL63_TILE_VECS 252
#define COMMHAL_LL63_TILE_PKTS 256
#define COMMHAL_LL63_VALID 0x8000000000000000ull
#define COMMHAL_FULL_WARP 0xFFFFFFFFu

namespace commhal {

// A lane's share of a tile: slot s (0..7) is row s of the tile, words w[2 s], w[2 s + 1];
// its data vector (if any) is tile vector ll63_slot_vec(s, lane).
COMMHAL_DEVICE u32 ll63_slot_vec(int s, u32 lane) { return 63 * (s / 2) + 32 * (s % 2) + lane; }
COMMHAL_DEVICE bool ll63_slot_has_vec(int s, u32 lane) { return s % 2 == 0 || lane < 31; }

// 8 rows of data words -> packets, in place (the whole warp, converged).
COMMHAL_DEVICE void ll63_pack(u64 (&w)[16], u32 lane) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    u64* r0 = &w[4 * q];
    u64* r1 = &w[4 * q + 2];
    const u32 b00 = __ballot_sync(COMMHAL_FULL_WARP, (r0[0] >> 63) != 0);
    const u32 b01 = __ballot_sync(COMMHAL_FULL_WARP, (r0[1] >> 63) != 0);
    const u32 b10 = __ballot_sync(COMMHAL_FULL_WARP, lane < 31 && (r1[0] >> 63) != 0);
    const u32 b11 = __ballot_sync(COMMHAL_FULL_WARP, lane < 31 && (r1[1] >> 63) != 0);
    r0[0] |= COMMHAL_LL63_VALID;
    r0[1] |= COMMHAL_LL63_VALID;
    if (lane < 31) {
      r1[0] |= COMMHAL_LL63_VALID;
      r1[1] |= COMMHAL_LL63_VALID;
    } else {  // b10, b11 have no bit 31 (lane 31 of row 1 has no data)
      r1[0] = (u64)b00 | ((u64)b10 << 32) | COMMHAL_LL63_VALID;
      r1[1] = (u64)b01 | ((u64)b11 << 32) | COMMHAL_LL63_VALID;
    }
  }
}

// Packets -> data words, in place (the inverse of ll63_pack; the whole warp, converged).
COMMHAL_DEVICE void ll63_unpack(u64 (&w)[16], u32 lane) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    u64* r0 = &w[4 * q];
    u64* r1 = &w[4 * q + 2];
    const u64 t0 = __shfl_sync(COMMHAL_FULL_WARP, r1[0], 31);
    const u64 t1 = __shfl_sync(COMMHAL_FULL_WARP, r1[1], 31);
    r0[0] = (r0[0] & ~COMMHAL_LL63_VALID) | (((t0 >> lane) & 1) << 63);
    r0[1] = (r0[1] & ~COMMHAL_LL63_VALID) | (((t1 >> lane) & 1) << 63);
    if (lane < 31) {
      r1[0] = (r1[0] & ~COMMHAL_LL63_VALID) | (((t0 >> (32 + lane)) & 1) << 63);
      r1[1] = (r1[1] & ~COMMHAL_LL63_VALID) | (((t1 >> (32 + lane)) & 1) << 63);
    } else {
      r1[0] = r1[1] = 0;
    }
  }
}

// Bounded wait for this lane's 8 packets at `p` (512 bytes apart). The first pass loads
// all 8 at once: when they have arrived (the small sizes, where the sender runs ahead)
// that is one trip to L2. Then each missing packet is loaded again until it arrives, in
// turn: each load waits for the one before (its result decides whether the next runs),
// which keeps a waiting warp's L2 traffic low while the link fills the region (polling
// all 8 every pass halved the bandwidth from 16 MiB up, 4 x H200). With only
// the second loop every launch paid 8 trips, ~2 us (found in the SASS by review).
// EAGER (latency-bound transfers, a few tiles per warp: the all-pairs all-reduce and the
// chains' small transfers): every pass loads all missing
// packets at once instead, so a packet that lands is seen within one L2 trip rather
// than after the ones polled before it.
// The warp's verdict: false = some lane gave up (ERR_PACKET_TIMEOUT stored in b.error,
// and in `downstream` when not null: the error word of whoever waits on this lane's
// sends, so it gives up too instead of waiting out its own bound).
template <bool EAGER = false>
COMMHAL_DEVICE bool ll63_wait(const u8* p, u64 (&w)[16], const WaitBound& b, u32* downstream) {
  u32 missing = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) load_volatile_v2u64(p + i * 512, w[2 * i], w[2 * i + 1]);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if ((w[2 * i] & w[2 * i + 1] & COMMHAL_LL63_VALID) == 0) missing |= 1u << i;
  }
  u64 t0 = 0;
  bool ok = true;
  for (u32 s = 0; missing != 0; ++s) {
    if (wait_expired(b, s, t0, ERR_PACKET_TIMEOUT)) {
      if (downstream) set_error_once(downstream, ERR_PACKET_TIMEOUT);
      ok = false;
      break;
    }
    if (EAGER) {
      const u32 was = missing;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (was & (1u << i)) load_volatile_v2u64(p + i * 512, w[2 * i], w[2 * i + 1]);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if ((was & (1u << i)) && (w[2 * i] & w[2 * i + 1] & COMMHAL_LL63_VALID) != 0)
          missing &= ~(1u << i);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (missing & (1u << i)) {
          load_volatile_v2u64(p + i * 512, w[2 * i], w[2 * i + 1]);
          if ((w[2 * i] & w[2 * i + 1] & COMMHAL_LL63_VALID) != 0) missing &= ~(1u << i);
        }
      }
    }
  }
  return __all_sync(COMMHAL_FULL_WARP, ok);
}

COMMHAL_DEVICE void ll63_send(u8* p, const u64 (&w)[16]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) store_volatile_v2u64(p + i * 512, w[2 * i], w[2 * i + 1]);
}

COMMHAL_DEVICE void ll63_clear(u8* p) {
#pragma unroll
  for (int i = 0; i < 8; ++i) *reinterpret_cast<v16*>(p + i * 512) = make_uint4(0, 0, 0, 0);
}

// Slot s of a lane's words as a data vector, and back.
COMMHAL_DEVICE v16 ll63_vec(const u64 (&w)[16], int s) {
  return make_uint4((u32)w[2 * s], (u32)(w[2 * s] >> 32), (u32)w[2 * s + 1],
                    (u32)(w[2 * s + 1] >> 32));
}
COMMHAL_DEVICE void ll63_set(u64 (&w)[16], int s, v16 x) {
  w[2 * s] = (u64)x.x | ((u64)x.y << 32);
  w[2 * s + 1] = (u64)x.z | ((u64)x.w << 32);
}

// A lane's data vectors of the tile starting at vector v0 (zeros past `nvec` and in the
// top-bit slot) as words; stored back where in range.
COMMHAL_DEVICE void ll63_load(const v16* src, u64 v0, u32 lane, u64 nvec, u64 (&w)[16]) {
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    const u64 v = v0 + ll63_slot_vec(s, lane);
    ll63_set(w, s, ll63_slot_has_vec(s, lane) && v < nvec ? src[v] : make_uint4(0, 0, 0, 0));
  }
}
COMMHAL_DEVICE void ll63_store(v16* dst, u64 v0, u32 lane, u64 nvec, const u64 (&w)[16]) {
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    const u64 v = v0 + ll63_slot_vec(s, lane);
    if (ll63_slot_has_vec(s, lane) && v < nvec) dst[v] = ll63_vec(w, s);
  }
}

// Warp tiles of a transfer of `nvec` vectors.
COMMHAL_DEVICE u64 ll63_tile_count(u64 nvec) {
  return (nvec + COMMHAL_LL63_TILE_VECS - 1) / COMMHAL_LL63_TILE_VECS;
}

// Every warp tile of `nvec` vectors, whole warps: body(v0, pk, lane) with the tile's
// first data vector v0 and this lane's first packet's byte offset pk in a region; body
// returns false to stop (a failed wait: the warp's verdict, so the warp stays converged).
template <typename Body>
COMMHAL_DEVICE void ll63_tiles(u64 nvec, Body body) {
  const u64 tiles = ll63_tile_count(nvec);
  const u32 lane = threadIdx.x % 32;
  for (u64 t = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32; t < tiles;
       t += (u64)gridDim.x * blockDim.x / 32) {
    if (!body(t * COMMHAL_LL63_TILE_VECS, (t * COMMHAL_LL63_TILE_PKTS + lane) * 16, lane)) return;
  }
}

}  // namespace commhal
