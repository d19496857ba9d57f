// coll/ll63.cuh — the collectives' LL63 regions (the packets: commhal/ll63.h).
#pragma once
#include "coll/ops.cuh"
#include "commhal/ll63.h"

// LL63 chains for broadcasts and reduces above the LL16 sizes (up to the tuned LL63
// maximum, 1 GiB for reduce on 4 x H200): the chains' ranks (r -> r+1) with
// the data in LL63 packets (commhal/ll63.h) instead of behind round flags, so no rank ever
// waits on a fence and no barrier runs. Their steps: Prims<LL63, RootChain>
// (coll/prims_ll63.cuh).
//   Region: one per rank after the LL slots (layout::off_ll63), written by the previous
//   rank of the chain only, ceil(vectors / 252) x 4 KiB for the largest LL63 transfer.
//   Reuse. The receiver clears every packet it read (local stores of zeros), so at the
//   end of a launch its region is all zeros again, and a sender writes into the next
//   rank's region in launch e only after that rank completed launch e - 1 (its
//   done-epoch word, read once per block; usually long true): a sender never overwrites a
//   packet not yet read, and no packet of an earlier launch is ever left to be mistaken
//   for this one's. After a failed wait the region may keep packets, but the error word
//   is sticky: every later wait of the communicator gives up at once, so they are never
//   read as data.
//   Small transfers (up to a.ll63_small_half of packets, layout::LL63_SMALL_MAX) use a
//   second, small region instead (a.ll63_small_off), in two parity halves: launch e
//   writes half e mod 2 and waits only for the next rank's launch e - 2, the last one
//   that used that half. Waiting for e - 1 made every small launch pay a round trip
//   behind the next rank's previous launch (the root's, the last to end): 1 KiB took
//   5.6 us on 2 ranks against LL16's 2.7, 4 ranks were flat at ~9 us up to 256 KiB
//   (4 x H200).
//   Inputs and outputs are only touched by their own rank (the chain moves packets),
//   so nothing else needs ordering; stream order covers the local buffers.
//   A failed wait (timeout, or this rank's error word set) marks the next rank's error
//   word too, so every rank downstream gives up instead of waiting out its own bound.

// The LL63 region of rank `owner`.
COMMHAL_DEVICE u8* ll63_region(const CollArgs& a, u32 owner) {
  return reinterpret_cast<u8*>(a.scratch[owner] + COLL_OFF_LL +
                               2 * COLL_MAX_RANKS * a.ll_slot_bytes);
}

// Bounded wait for this lane's 8 packets at `p` (commhal/ll63.h's ll63_wait), marking
// rank `next`'s error word too on a give-up when it is another rank (in a chain only the
// next rank waits on this one).
template <bool EAGER = false>
COMMHAL_DEVICE bool ll63_recv(const CollArgs& a, const u8* p, u32 next, u64 (&w)[16]) {
  u32* downstream =
      next != a.rank ? reinterpret_cast<u32*>(a.scratch[next] + COLL_OFF_ERROR) : nullptr;
  return ll63_wait<EAGER>(p, w, bound(a), downstream);
}

// Whether a transfer of `nvec` vectors goes through the small region (one parity half
// holds it), the same answer on every rank.
COMMHAL_DEVICE bool ll63_small(const CollArgs& a, u64 nvec) {
  return ll63_tile_count(nvec) * COMMHAL_LL63_TILE_PKTS * 16 <= a.ll63_small_half;
}

// Where launch e's packets for rank `owner` go: half (e mod 2) of its small region for a
// small transfer, else its large region.
COMMHAL_DEVICE u8* ll63_region_for(const CollArgs& a, u32 owner, bool small, u64 e) {
  if (small) return reinterpret_cast<u8*>(a.scratch[owner] + a.ll63_small_off + (e & 1) * a.ll63_small_half);
  return ll63_region(a, owner);
}

// Before the first send of launch e: the next rank completed the last launch that could
// have used the same packets (it read and cleared everything this rank sent it then):
// e - 1 for the large region, e - 2 for a small half (e - 1 used the other one). Once per
// block.
COMMHAL_DEVICE void ll63_next_free(const CollArgs& a, u32 next, u64 e, bool small) {
  block_wait_peer_done(a, next, e, small ? 2 : 1);
}
