// coll/chain.cuh — pipelined chains r -> r + 1: chain flags, credits, start
// handshakes and chunking.
#pragma once
#include "coll/protocol.cuh"

// Pipelined chains for large broadcasts and reduces (see "Chains" in coll/protocol.cuh): every
// rank sends to the next rank only and receives from the previous one only, all remote
// accesses are stores, and chunk c moves down the chain while chunk c + gridDim.x is
// still leaving the first rank. Host: bytes % 16 == 0 (every base is 16-byte aligned),
// grid <= COLL_MAX_BLOCKS.

// Chain flag that `from` raises in rank `owner`'s scratch for this block, for the round
// tagged `tag` (chain_tag): one row per launch parity, so a previous rank already in
// launch e + 1 (credits, see chain_start) never overwrites a flag this rank still waits
// on in launch e.
COMMHAL_DEVICE u64* chain_flag(const CollArgs& a, u32 owner, u32 from, u64 tag) {
  return reinterpret_cast<u64*>(a.scratch[owner] + COLL_OFF_CHAIN_FLAGS) +
         (((tag >> 32) & 1) * COLL_MAX_RANKS + from) * COLL_MAX_BLOCKS + blockIdx.x;
}

// Credit that `from` (the next rank) raises in rank `owner`'s scratch for this block:
// the tag of the last round whose staging it has consumed (staged chains).
COMMHAL_DEVICE u64* chain_credit(const CollArgs& a, u32 owner, u32 from) {
  return flag_slot(a, owner, COLL_OFF_CHAIN_CREDITS, from);
}

// Round k's flag value in launch e.
COMMHAL_DEVICE u64 chain_tag(u64 e, u32 k) { return (e << 32) | (u64)(k + 1); }

// Vectors per thread in one chunk: the host's value, kept in 1..COLL_CHAIN_UNROLL_MAX here
// too (0 would never advance a round loop).
COMMHAL_DEVICE u32 chain_unroll(const CollArgs& a) {
  return min(max(a.chain_unroll, 1u), (u32)COLL_CHAIN_UNROLL_MAX);
}

// Start of a chain launch; returns how its stores into the next rank are gated:
#define COLL_CHAIN_FULL 0       // START barrier with every rank
#define COLL_CHAIN_NEIGHBOUR 1  // the next rank has started this launch
#define COLL_CHAIN_CREDITS 2    // per round: the next rank consumed that round's staging
// A chain rank stores only into the next rank (its output or staging) and reads only
// its own memory, so what it must know before storing is that nothing there still
// reads or writes those bytes. The START barrier with every rank gives that and more:
// it makes the first rank of launch e + 1 wait for the LAST rank of launch e, so chains
// queued back to back pay their whole fill (one round of lag per hop) every launch.
// Neighbour (COLL_FLAG_CHAIN_OVERLAP, set by the host only when the previous operation
// it issued on this communicator was a chain kernel, outside graph capture and with no
// plan algorithm ever set): a block waits only until the same block of the next rank
// has started this launch (its previous launch is over, and so is the stream work
// before this one: a user's read of its output, say) and tells the previous rank the
// same, in the START flag slots (value e: they only grow). Safe because the previous
// launch was a chain too (checked here on the device as well, so a graph replayed in
// between falls back): in it the only rank storing into the next rank was this one,
// and the first chain of a run of chains took the full barrier, so every rank had
// finished every non-chain launch before it.
// Credits (COLL_FLAG_CHAIN_CREDITS; the reduce chain and the staged broadcast chain,
// the previous launch one of them with the same geometry: vectors, grid, chunk): a rank
// that stores into the next rank's staging (never a user buffer) stores round k of
// launch e once the next rank has consumed round k of launch e - 1 (its credit) or has
// started launch e, so a launch streams on behind the previous one instead of waiting
// one round per hop (the next rank's chain flags are per launch parity: it may still
// wait on e - 1's).
// The last-chain words (COLL_OFF_CHAIN_LAST: [epoch][geometry] x COLL_MAX_BLOCKS, this
// rank's own) are written like the epoch words (block b reads word b, then stores into
// words b, b + grid, ...), so every block of every rank decides the same way.
COMMHAL_DEVICE u32 chain_start(const CollArgs& a, u64 e, bool stores, u64 geometry) {
  __shared__ u64 s_last[2];
  u64* last = reinterpret_cast<u64*>(a.scratch[a.rank] + COLL_OFF_CHAIN_LAST);
  if (threadIdx.x == 0) {
    s_last[0] = load_relaxed(last + blockIdx.x);
    s_last[1] = load_relaxed(last + COLL_MAX_BLOCKS + blockIdx.x);
  }
  __syncthreads();
  store_block_slots(last, COLL_MAX_BLOCKS, e);
  store_block_slots(last + COLL_MAX_BLOCKS, COLL_MAX_BLOCKS, geometry);
  if (!(a.flags & COLL_FLAG_CHAIN_OVERLAP) || s_last[0] + 1 != e) {
    block_barrier(a, COLL_OFF_START_FLAGS, e);
    return COLL_CHAIN_FULL;
  }
  const bool credits =
      (a.flags & COLL_FLAG_CHAIN_CREDITS) && geometry != 0 && s_last[1] == geometry;
  const u32 n = a.nranks, next = (a.rank + 1) % n, prev = (a.rank + n - 1) % n;
  if (threadIdx.x == 0 && prev != a.rank) {
    flag_signal(flag_slot(a, prev, COLL_OFF_START_FLAGS, a.rank), e);
  }
  // another warp than the one that posted, where the block has one
  if (!credits && threadIdx.x == (blockDim.x > 32 ? 32u : 0u) && stores && next != a.rank) {
    flag_wait(flag_slot(a, a.rank, COLL_OFF_START_FLAGS, next), e, bound(a));
  }
  __syncthreads();
  return credits ? COLL_CHAIN_CREDITS : COLL_CHAIN_NEIGHBOUR;
}

// Credits: before storing the round tagged `tag` into the next rank's staging, wait
// (bounded) until the next rank consumed the same round of the previous launch or
// started this one. false = gave up (error stored).
COMMHAL_DEVICE bool wait_credit(const CollArgs& a, u32 next, u64 tag) {
  const u64 e = tag >> 32;
  const u64 want = tag - (1ull << 32);  // chain_tag(e - 1, k)
  const u64* credit = chain_credit(a, a.rank, next);
  const u64* start = flag_slot(a, a.rank, COLL_OFF_START_FLAGS, next);
  return wait_until(bound(a), ERR_WAIT_TIMEOUT,
                    [&] { return load_acquire(credit) >= want || load_acquire(start) >= e; });
}

// Before round k: wait (thread 0, bounded) for the previous rank's flag, then let the
// whole block read. On a timeout `ok` turns false (thread 0's copy) and the error goes to
// this rank's error word AND the next rank's: in a chain or ring only the next rank
// waits on this one, so marking it makes its waits give up too (and it marks its own
// next), and every rank downstream reports the failure instead of finishing on data
// that never arrived. A block whose wait failed stops waiting and stops signalling.
// `credit`: also wait for the next rank's credit (wait_credit) before the block stores.
COMMHAL_DEVICE void chain_wait(const CollArgs& a, u32 prev, u32 next, u64 tag, bool& ok,
                               bool from_prev = true, bool credit = false) {
  if (threadIdx.x == 0 && ok) {
    if (from_prev) ok = flag_wait(chain_flag(a, a.rank, prev, tag), tag, bound(a));
    if (ok && credit) ok = wait_credit(a, next, tag);
    if (!ok && next != a.rank) set_peer_error(a, next, ERR_WAIT_TIMEOUT);
  }
  __syncthreads();
}

// After round k: publish the block's stores into the next rank, then raise its flag
// (`signal`), and / or tell the previous rank this round's staging is consumed
// (`credit`: the reduce and the staged broadcast chain) (neither after a failed wait:
// see chain_wait).
COMMHAL_DEVICE void chain_signal(const CollArgs& a, u32 next, u64 tag, bool ok,
                                 bool signal = true, bool credit = false) {
  __syncthreads();
  if (threadIdx.x == 0 && ok) {
    u64* flag = chain_flag(a, next, a.rank, tag);
    u64* cred = chain_credit(a, (a.rank + a.nranks - 1) % a.nranks, a.rank);
    if (signal && credit) {
      // one release fence for both (a second st.release would first wait for the
      // flag's store into the next rank to complete: a round trip every round)
      fence_acq_rel();
      store_relaxed(flag, tag);
      store_relaxed(cred, tag);
    } else if (signal) {
      flag_signal(flag, tag);
    } else if (credit) {
      flag_signal(cred, tag);
    }
  }
}

// One round's data: the vectors v < len of chunk c (a.chain_unroll vectors per thread,
// thread t takes c * cv + t + u * blockDim.x), four loads in flight per thread: x =
// load(v) for up to four vectors, then store(v, x) for them.
template <typename Load, typename Store>
COMMHAL_DEVICE void chunk_for(const CollArgs& a, u64 c, u64 len, Load load, Store store) {
  const u32 un = chain_unroll(a);
  const u64 base = c * blockDim.x * un + threadIdx.x;
  for (u32 u0 = 0; u0 < un; u0 += 4) {
    v16 x[4];
#pragma unroll
    for (u32 u = 0; u < 4; ++u) {
      const u64 v = base + (u64)(u0 + u) * blockDim.x;
      if (u0 + u < un && v < len) x[u] = load(v);
    }
#pragma unroll
    for (u32 u = 0; u < 4; ++u) {
      const u64 v = base + (u64)(u0 + u) * blockDim.x;
      if (u0 + u < un && v < len) store(v, x[u]);
    }
  }
}

// The geometry word of a staged chain (chain_start's credits): chunk c covers the same
// staging bytes in two launches when nvec, grid and cv agree; `bcast` keeps a reduce's
// credits from gating a broadcast and back (sound, but no test runs that sequence).
// Exact: nvec < 2^36 (1 TiB), grid <= COLL_MAX_BLOCKS < 2^11, cv <= 32 x 1024 < 2^16;
// never 0.
COMMHAL_DEVICE u64 chain_geometry(u64 nvec, u64 cv, bool bcast) {
  return ((u64)bcast << 63) | (nvec << 27) | ((u64)gridDim.x << 16) | cv;
}
