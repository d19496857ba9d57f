// coll/prims.cuh — the primitives the collectives are written over, one class per
// protocol, as NCCL's device code is: an algorithm says which bytes of which rank go
// where; Prims<Proto, Pattern> says how they travel. Algorithms on it: all-gather,
// all-to-all, send/recv, the push reduce-scatter, the one-shot and push all-reduces (on
// LL63 too: coll/prims_ll63.cuh), the direct broadcast, the LL63 chains of the
// broadcast and the reduce (Prims<LL63, RootChain>: NCCL's copy_send / recv_copy_send /
// recv and send / recv_reduce_send / recv_reduce_copy steps, coll/prims_ll63.cuh), the
// rings (Prims<Simple, Ring>: NCCL's ring steps over the chain round flags, below; the
// all-reduce in portions of the staging area, coll/ring.cuh) and the Simple chains of
// the broadcast and the reduce (Prims<Simple, RootChain>: copy_send / recv_copy_send /
// recv_copy / recv and send / recv_reduce_send / recv_reduce_copy over the same flags,
// with credits, below); the pull kernels (two-shot all-reduce, reduce-scatter, reduce
// to a root) take Simple's barriers and its reduce_pull. Not on it: broadcast_ll and
// reduce_ll (coll/broadcast.cuh says why).
//
// The algorithm names, for a sender s and a receiver r of its pattern (global ranks):
//   src(s, r)   the address (mapped here) of the bytes s sends to r;
//   dst(r, s)   where they belong in r: r's output where that is their place (all-gather,
//               all-to-all, send/recv), or r's staging slot for s where r sums them (push
//               reduce-scatter, one-shot and push all-reduces; LL16 keeps them in its
//               slots instead);
// then calls replicate (this rank sends the same bytes to every receiver of the pattern)
// or scatter (a part of its own to each), and then either gather (every received byte
// is in its place) or reduce (this rank sums what it received with its own part, in
// rank order, into its output; Simple's reduce_replicate stores the sum into every
// rank's output, and gather follows). Simple's reduce must follow scatter, whose vectors
// it walks the same way (Prims::REDUCE_AFTER_REPLICATE says whether replicate will do).
//
// Protocols (the Proto parameter):
//   Simple  zero copy. The START barrier (coll/protocol.cuh: every peer's kernel runs,
//           so the places written are no longer used by earlier work), then 16-byte
//           stores straight into dst(r, s) in the receiver: replicate in warp units,
//           scatter one vector per thread (below). gather = the END barrier (block b of
//           every sender finished its stores); reduce = the MID barrier, then local loads
//           of the landed data (16-byte aligned, the host checks).
//   LL16    packets (commhal/packets.h). Unit i (8 bytes) of s's bytes for r travels as
//           packet i of r's LL slot for s (coll/ll16.cuh), flagged with the launch epoch,
//           so there is no barrier: gather and reduce wait for each packet and move it to
//           dst(r, s) or into the sum. Slots alternate by epoch parity, so a sender in
//           launch e must know the receiver finished e - 2, the last reader of this
//           parity. With AllPeers that follows when launch e - 1 heard from the receiver
//           too (a packet or a barrier of its launch e - 1: it finished e - 2); where
//           the launch before may not have (a one-way kernel, or the first launch of a
//           graph capture) the host queues the peers_done fence first
//           (coll/protocol.cuh). A one-way pattern (NextRank) waits for it on the
//           receiver's done epoch. Prims<LL63, AllPeers> reuses its packets the same
//           way (coll/prims_ll63.cuh).
// Simple writes only dst(r, s) in the receiver, LL16 only the receiver's slot for s;
// both read only src(s, r) of the sender.
#pragma once
#include "coll/chain.cuh"
#include "coll/ll16.cuh"
#include "coll/reduce_inputs.cuh"
#include "commhal/dataops.h"

// ---- protocols ----
struct Simple {};
struct LL16 {};

// ---- patterns: who sends to whom ----
// A rank sends to send_to(k), k < sends(a), and receives from recv_from(k), k < recvs(a):
// step k's sender sends to this rank in its step k, so a receiver waits first for what
// was sent first. ONE_WAY: a receiver never sends back to its senders in the launch.
// MAX_SENDS / MAX_RECVS bound sends(a) / recvs(a) at compile time (the LL16 loops keep a
// register per peer up to them).
// Every rank to every other, starting at the next rank (spreads the peers' traffic).
struct AllPeers {
  static constexpr bool ONE_WAY = false;
  static constexpr u32 MAX_SENDS = COLL_MAX_RANKS - 1, MAX_RECVS = COLL_MAX_RANKS - 1;
  static COMMHAL_DEVICE u32 sends(const CollArgs& a) { return a.nranks - 1; }
  static COMMHAL_DEVICE u32 recvs(const CollArgs& a) { return a.nranks - 1; }
  static COMMHAL_DEVICE u32 send_to(const CollArgs& a, u32 k) {
    const u32 p = a.rank + 1 + k;
    return p >= a.nranks ? p - a.nranks : p;
  }
  static COMMHAL_DEVICE u32 recv_from(const CollArgs& a, u32 k) {
    return a.rank >= k + 1 ? a.rank - k - 1 : a.rank + a.nranks - k - 1;
  }
};
// Rank r to r + 1, receiving from r - 1 (one rank: itself).
struct NextRank {
  static constexpr bool ONE_WAY = true;
  static constexpr u32 MAX_SENDS = 1, MAX_RECVS = 1;
  static COMMHAL_DEVICE u32 sends(const CollArgs&) { return 1; }
  static COMMHAL_DEVICE u32 recvs(const CollArgs&) { return 1; }
  static COMMHAL_DEVICE u32 send_to(const CollArgs& a, u32) { return (a.rank + 1) % a.nranks; }
  static COMMHAL_DEVICE u32 recv_from(const CollArgs& a, u32) {
    return (a.rank + a.nranks - 1) % a.nranks;
  }
};
// The root (a.root) to every other rank, starting at the next one (broadcast).
struct FromRoot {
  static constexpr bool ONE_WAY = true;
  static constexpr u32 MAX_SENDS = COLL_MAX_RANKS - 1, MAX_RECVS = 1;
  static COMMHAL_DEVICE u32 sends(const CollArgs& a) {
    return a.rank == a.root ? a.nranks - 1 : 0;
  }
  static COMMHAL_DEVICE u32 recvs(const CollArgs& a) { return a.rank == a.root ? 0 : 1; }
  static COMMHAL_DEVICE u32 send_to(const CollArgs& a, u32 k) {
    const u32 p = a.root + 1 + k;
    return p >= a.nranks ? p - a.nranks : p;
  }
  static COMMHAL_DEVICE u32 recv_from(const CollArgs& a, u32) { return a.root; }
};
// The chain of a rooted collective, r -> r + 1 along the ring, starting OFFSET ranks
// after the root: rank r is at position (r - root - OFFSET) mod n, position 0 only sends,
// position n - 1 only receives. ChainFromRoot (broadcast): the root first. ChainToRoot
// (reduce): root + 1 first, the root last.
template <u32 OFFSET>
struct RootChain {
  static constexpr bool ONE_WAY = true;
  static constexpr u32 MAX_SENDS = 1, MAX_RECVS = 1;
  static COMMHAL_DEVICE u32 pos(const CollArgs& a) {
    return (a.rank + a.nranks - a.root - OFFSET) % a.nranks;
  }
  static COMMHAL_DEVICE u32 sends(const CollArgs& a) { return pos(a) < a.nranks - 1 ? 1 : 0; }
  static COMMHAL_DEVICE u32 recvs(const CollArgs& a) { return pos(a) > 0 ? 1 : 0; }
  static COMMHAL_DEVICE u32 send_to(const CollArgs& a, u32) { return (a.rank + 1) % a.nranks; }
  static COMMHAL_DEVICE u32 recv_from(const CollArgs& a, u32) {
    return (a.rank + a.nranks - 1) % a.nranks;
  }
};
typedef RootChain<0> ChainFromRoot;
typedef RootChain<1> ChainToRoot;
// The ring of the ring collectives: NextRank's peers, with Simple's round-flag steps
// (Prims<Simple, Ring> below).
struct Ring : NextRank {};

template <typename Proto, typename Pattern>
struct Prims;

// A part size given as a number (every part the same) rather than a callable.
template <typename T>
struct IsBytes {
  static constexpr bool value = false;
};
template <>
struct IsBytes<u64> {
  static constexpr bool value = true;
};

// Simple's replicate moves data in warp units (as MSCCL++'s full-mesh all-gather): a
// unit is SIMPLE_UNIT_VECS 16-byte vectors per lane of one warp (2 KiB), all loaded
// before any is stored, so each lane has that many loads in flight. On 4 x H100 at
// 1 MiB per rank this beat one vector per thread stored to every receiver
// (docs/performance.md, all-gather).
#define SIMPLE_UNIT_VECS 4
#define SIMPLE_UNIT (32 * SIMPLE_UNIT_VECS)

// Vectors base, base + 32, ... (SIMPLE_UNIT_VECS of them, those below nvec) of s to d.
COMMHAL_DEVICE void copy_unit(const v16* s, v16* d, u64 base, u64 nvec) {
  v16 x[SIMPLE_UNIT_VECS];
#pragma unroll
  for (u32 j = 0; j < SIMPLE_UNIT_VECS; ++j) {
    if (base + j * 32 < nvec) x[j] = s[base + j * 32];
  }
#pragma unroll
  for (u32 j = 0; j < SIMPLE_UNIT_VECS; ++j) {
    if (base + j * 32 < nvec) d[base + j * 32] = x[j];
  }
}

template <typename Pattern>
struct Prims<Simple, Pattern> {
  // replicate walks warp units, reduce one vector per thread: block b of a receiver
  // would read vectors other blocks of the senders wrote, past the MID barrier.
  enum { REDUCE_AFTER_REPLICATE = false };
  // Any byte count: the caller reduces an element tail past the whole vectors itself.
  enum { ELEMENT_TAIL = true };
  const CollArgs& a;
  u64 e;

  COMMHAL_DEVICE explicit Prims(const CollArgs& args) : a(args), e(coll_begin(args)) {
    block_barrier(a, COLL_OFF_START_FLAGS, e);
  }

  // The same `bytes` of this rank, src(rank, *), to dst(p, rank) for every receiver p of
  // the pattern, and with `own` to dst(rank, rank) where that is not the source. Work
  // item i is unit i / t for target i % t (t targets), so a warp stores into one
  // receiver, contiguously, and neighbouring warps into different ones.
  template <typename Src, typename Dst>
  COMMHAL_DEVICE void replicate(u64 bytes, Src src, Dst dst, bool own) {
    const u32 targets = targets_of(src, dst, own);
    if (!aligned(bytes, src, dst, targets)) return copy_bytes(bytes, src, dst, targets);
    const u64 nvec = bytes / 16;
    const u32 wpb = blockDim.x / 32;
    if (threadIdx.x >= wpb * 32) return;
    const u64 nwarps = (u64)gridDim.x * wpb;
    const u64 items = (nvec + SIMPLE_UNIT - 1) / SIMPLE_UNIT * targets;
    for (u64 i = (u64)blockIdx.x * wpb + threadIdx.x / 32; i < items; i += nwarps) {
      const u32 p = target((u32)(i % targets));
      copy_unit(reinterpret_cast<const v16*>(src(a.rank, p)), reinterpret_cast<v16*>(dst(p, a.rank)),
                (i / targets) * SIMPLE_UNIT + threadIdx.x % 32, nvec);
    }
  }

  // As replicate, but receiver p gets its own part src(rank, p). One vector per thread
  // per step, grid-stride, every target's vector loaded before any is stored; reduce
  // walks the vectors the same way, so after its MID barrier block b of a receiver reads
  // exactly what block b of every sender wrote. `bytes`: every part's size, or a
  // callable giving part r's size (whole 16-byte vectors then: parts of a partition).
  template <typename Bytes, typename Src, typename Dst>
  COMMHAL_DEVICE void scatter(Bytes bytes, Src src, Dst dst, bool own) {
    constexpr bool SAME = IsBytes<Bytes>::value;  // every part the same size
    const u32 targets = targets_of(src, dst, own);
    if (!aligned(bytes, src, dst, targets)) return copy_bytes(bytes, src, dst, targets);
    const v16* s[COLL_MAX_RANKS];
    v16* d[COLL_MAX_RANKS];
    u64 nv[COLL_MAX_RANKS];  // vectors per target (!SAME)
    u64 nvec = SAME ? part_bytes(bytes, 0) / 16 : 0;
#pragma unroll
    for (u32 t = 0; t < COLL_MAX_RANKS; ++t) {
      if (t < targets) {
        const u32 p = target(t);
        s[t] = reinterpret_cast<const v16*>(src(a.rank, p));
        d[t] = reinterpret_cast<v16*>(dst(p, a.rank));
        if (!SAME) {
          nv[t] = part_bytes(bytes, p) / 16;
          nvec = nv[t] > nvec ? nv[t] : nvec;
        }
      }
    }
    const u64 gthreads = (u64)gridDim.x * blockDim.x;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < nvec; j += gthreads) {
      v16 x[COLL_MAX_RANKS];
#pragma unroll
      for (u32 t = 0; t < COLL_MAX_RANKS; ++t) {
        if (t < targets && (SAME || j < nv[t])) x[t] = s[t][j];
      }
#pragma unroll
      for (u32 t = 0; t < COLL_MAX_RANKS; ++t) {
        if (t < targets && (SAME || j < nv[t])) d[t][j] = x[t];
      }
    }
  }

  // The senders' bytes are in place once block b of every rank passed its stores
  // (`bytes` as scatter's).
  template <typename Bytes, typename Dst>
  COMMHAL_DEVICE void gather(Bytes, Dst) {
    end();
  }

  // Pull: the sum, in rank order, of every rank's input vectors [vb, ve) at byte offset
  // in_off (read through the peers' mappings), stored at the same vector index of every
  // rank's output (to_all; this rank's first, then the next ones) or of this rank's
  // only. Whole 16-byte vectors (reduce_vectors: two per thread per step for 2 and 4
  // ranks); the caller does an element tail and unaligned buffers (reduce_elems). `args`
  // is `a`, or a copy whose out[rank] is another rank's output (reduce to a root).
  // end() must follow.
  template <typename Op>
  COMMHAL_DEVICE void reduce_pull(const CollArgs& args, u64 in_off, u64 vb, u64 ve,
                                  bool to_all) const {
    reduce_vectors<Op>(args, in_off, vb, ve, 0, to_all);
  }

  // The END barrier: block b of every rank finished its accesses to the others'
  // buffers (the stores into this rank's output, the reads of its input).
  COMMHAL_DEVICE void end() { block_barrier(a, COLL_OFF_END_FLAGS, e); }

  // After scatter: out = the sum, in rank order, of src(rank, rank) and every
  // dst(rank, p) (16-byte vectors). No END barrier: after this nothing is accessed
  // remotely, and a peer writes the landing again only after the next launch's START.
  template <typename Op, typename Src, typename Dst>
  COMMHAL_DEVICE void reduce(u64 bytes, Src src, Dst dst, u64 out) {
    reduce_to<Op>(bytes, src, dst, [&](u32) { return out; }, 1);
  }

  // As reduce, and the sum goes to out(r, rank) of every rank r (this rank's first,
  // then the next ones): an all-reduce's second half. gather (the END barrier) must
  // follow.
  template <typename Op, typename Src, typename Dst, typename Out>
  COMMHAL_DEVICE void reduce_replicate(u64 bytes, Src src, Dst dst, Out out) {
    reduce_to<Op>(bytes, src, dst, [&](u32 r) { return out(r, a.rank); }, a.nranks);
  }

 private:
  template <typename Op, typename Src, typename Dst, typename Out>
  COMMHAL_DEVICE void reduce_to(u64 bytes, Src src, Dst dst, Out out, u32 nout) {
    block_barrier(a, COLL_OFF_MID_FLAGS, e);
    const v16* x[COLL_MAX_RANKS];
    v16* o[COLL_MAX_RANKS];
#pragma unroll
    for (u32 p = 0; p < COLL_MAX_RANKS; ++p) {
      if (p < a.nranks)
        x[p] = reinterpret_cast<const v16*>(p == a.rank ? src(p, p) : dst(a.rank, p));
      if (p < nout) {
        const u32 r = a.rank + p < a.nranks ? a.rank + p : a.rank + p - a.nranks;
        o[p] = reinterpret_cast<v16*>(out(r));
      }
    }
    const u64 nvec = bytes / 16;
    const u64 gthreads = (u64)gridDim.x * blockDim.x;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < nvec; j += gthreads) {
      const v16 y = fin16<Op>(a, sum_ranks<Op>(a, x, j));
#pragma unroll
      for (u32 p = 0; p < COLL_MAX_RANKS; ++p) {
        if (p < nout) o[p][j] = y;
      }
    }
  }

  static COMMHAL_DEVICE u64 part_bytes(u64 bytes, u32) { return bytes; }
  template <typename F>
  static COMMHAL_DEVICE u64 part_bytes(F bytes, u32 r) {
    return bytes(r);
  }

  // Target t: the pattern's receivers, then this rank (own copy).
  COMMHAL_DEVICE u32 target(u32 t) const {
    return t < Pattern::sends(a) ? Pattern::send_to(a, t) : a.rank;
  }
  template <typename Src, typename Dst>
  COMMHAL_DEVICE u32 targets_of(Src src, Dst dst, bool own) const {
    return Pattern::sends(a) + ((own && dst(a.rank, a.rank) != src(a.rank, a.rank)) ? 1 : 0);
  }
  // bytes: every part's size, or a callable giving receiver p's (as scatter).
  template <typename Bytes, typename Src, typename Dst>
  COMMHAL_DEVICE bool aligned(Bytes bytes, Src src, Dst dst, u32 targets) const {
    bool ok = (part_bytes(bytes, a.rank) % 16) == 0;
    for (u32 t = 0; t < targets; ++t) {
      const u32 p = target(t);
      ok = ok && (IsBytes<Bytes>::value || (part_bytes(bytes, p) % 16) == 0) &&
           (src(a.rank, p) % 16) == 0 && (dst(p, a.rank) % 16) == 0;
    }
    return ok;
  }
  // Any alignment, byte-exact (commhal/copy.h); never before reduce (the host checks).
  template <typename Bytes, typename Src, typename Dst>
  COMMHAL_DEVICE void copy_bytes(Bytes bytes, Src src, Dst dst, u32 targets) const {
    const u64 gthreads = (u64)gridDim.x * blockDim.x;
    const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (u32 t = 0; t < targets; ++t) {
      const u32 p = target(t);
      copy_cooperative(reinterpret_cast<void*>(dst(p, a.rank)),
                       reinterpret_cast<const void*>(src(a.rank, p)), part_bytes(bytes, p),
                       (u32)tid0, (u32)gthreads);
    }
  }
};

// Prims<Simple, Ring>: the ring collectives' steps (coll/ring.cuh), NCCL's ring
// primitives over the chain flags of coll/chain.cuh. The START barrier, then every step
// runs R rounds, one chunk c = blockIdx.x + i x gridDim.x (chunk_for: cv vectors) of its
// segment each, where R covers the longest segment (`seglen`), so round k of this rank
// pairs with round k - R of the previous rank: before round k a block waits for the
// previous rank's flag of round k - R, after it a sending step raises round k's flag
// (e << 32) | (k + 1) in the next rank. The first step this launch runs waits for
// nothing: it is step 0, or (`first` = 1, the all-reduce head) the copy engine moved
// step 0 and the stream waited for it. Rounds count from step 0 either way.
// Steps, over one segment of `len` vectors, the pointers at its first vector:
//   send                   in (pre-multiplied) to the next rank, and to `own` too
//                          unless that is null;
//   recv_reduce_send       staging + in to the next rank (the partial sum goes on);
//   recv_reduce_copy_send  staging + in, finished, to `own` and the next rank;
//   recv_reduce_copy       staging + in, finished, to `own` (no flag: nobody waits);
//   recv_copy_send         own (what arrived there) to the next rank;
//   recv                   wait only (the last arrival).
// Each step is its own round loop, so no loop branches on the step kind. Every vector
// is read and then written by the same thread (in place).
template <>
struct Prims<Simple, Ring> {
  const CollArgs& a;
  u64 e;
  u64 seglen;   // vectors of the longest segment
  u64 cv;       // vectors per chunk
  u32 rounds;   // R: rounds per step
  u32 k;        // the next round
  u32 prev, next;
  bool waits = false;  // rounds wait for the previous rank's flag of round k - R (not in
                       // the first step of the launch and of each portion)
  bool ok = true;      // thread 0: no wait gave up

  COMMHAL_DEVICE Prims(const CollArgs& args, u64 longest, u32 first)
      : a(args), e(coll_begin(args)), seglen(longest) {
    block_barrier(a, COLL_OFF_START_FLAGS, e);
    cv = (u64)blockDim.x * chain_unroll(a);
    rounds = 0;
    for (u64 c = blockIdx.x; c * cv < seglen; c += gridDim.x) ++rounds;
    k = first * rounds;
    prev = Ring::recv_from(a, 0);
    next = Ring::send_to(a, 0);
  }

  template <typename Op>
  COMMHAL_DEVICE void send(const v16* in, v16* to, v16* own, u64 len) {
    steps<true>([&](u64 c) {
      chunk_for(
          a, c, len, [&](u64 v) { return pre16<Op>(a, in[v]); },
          [&](u64 v, v16 x) {
            to[v] = x;
            if (own != nullptr) own[v] = x;
          });
    });
  }

  // `raw`: the staging holds the previous rank's input as the copy engine moved it, not
  // yet pre-multiplied (premulsum; the head's first step).
  template <typename Op>
  COMMHAL_DEVICE void recv_reduce_send(const v16* stage, const v16* in, v16* to, u64 len,
                                       bool raw) {
    steps<true>([&](u64 c) {
      chunk_for(
          a, c, len, [&](u64 v) { return reduced<Op>(stage, in, v, raw); },
          [&](u64 v, v16 x) { to[v] = x; });
    });
  }

  template <typename Op>
  COMMHAL_DEVICE void recv_reduce_copy_send(const v16* stage, const v16* in, v16* own, v16* to,
                                            u64 len) {
    steps<true>([&](u64 c) {
      chunk_for(
          a, c, len, [&](u64 v) { return fin16<Op>(a, reduced<Op>(stage, in, v, false)); },
          [&](u64 v, v16 x) {
            to[v] = x;
            own[v] = x;
          });
    });
  }

  template <typename Op>
  COMMHAL_DEVICE void recv_reduce_copy(const v16* stage, const v16* in, v16* own, u64 len) {
    steps<false>([&](u64 c) {
      chunk_for(
          a, c, len, [&](u64 v) { return fin16<Op>(a, reduced<Op>(stage, in, v, false)); },
          [&](u64 v, v16 x) { own[v] = x; });
    });
  }

  COMMHAL_DEVICE void recv_copy_send(const v16* own, v16* to, u64 len) {
    steps<true>([&](u64 c) {
      chunk_for(
          a, c, len, [&](u64 v) { return own[v]; }, [&](u64 v, v16 x) { to[v] = x; });
    });
  }

  COMMHAL_DEVICE void recv() {
    steps<false>([](u64) {});
  }

  // The next portion of a ring run in portions (coll/ring.cuh): its first step waits for
  // nothing, like the first step of the launch (`recv` raises no flag to wait for; it
  // waited for the arrival that orders this rank's next stores into the staging).
  COMMHAL_DEVICE void next_portion() { waits = false; }

 private:
  // One step: R rounds of `round(c)`, each after the previous rank's round k - R, each
  // flagged to the next rank where SEND.
  template <bool SEND, typename Round>
  COMMHAL_DEVICE void steps(Round round) {
    for (u64 c = blockIdx.x; c * cv < seglen; c += gridDim.x, ++k) {
      if (waits) chain_wait(a, prev, next, chain_tag(e, k - rounds), ok);
      round(c);
      if (SEND) chain_signal(a, next, chain_tag(e, k), ok);
    }
    waits = true;
  }

  // Vector v reduced so far: the partial sum in the staging plus this rank's input
  // (pre-multiplied; the staging too where `raw`).
  template <typename Op>
  COMMHAL_DEVICE v16 reduced(const v16* stage, const v16* in, u64 v, bool raw) const {
    if (Op::PRE && raw) return add16<Op>(pre16<Op>(a, stage[v]), pre16<Op>(a, in[v]));
    return add16<Op>(stage[v], pre16<Op>(a, in[v]));
  }
};

// Prims<Simple, RootChain<OFFSET>>: the Simple chains of the rooted collectives
// (ChainFromRoot: broadcast_chain; ChainToRoot: reduce_chain) over the chain flags of
// coll/chain.cuh. chain_start instead of the START barrier (its neighbour start and
// credits, `geometry` as chain_geometry's, 0 for none); then one step per position, as
// NCCL's, of one round per chunk c = blockIdx.x + k x gridDim.x (chunk_for over the
// transfer's nvec vectors): round k waits for the previous rank's flag of round k where
// the step receives, and for the next rank's credit where this launch stores under
// credits (not the last position); it raises round k's flag in the next rank where the
// step sends, and credits the previous rank where it consumed its own staging
// (`credit`). Steps (the pointers at the transfer's first vector):
//   broadcast: copy_send (first: in to the next rank, and to `own` unless null),
//              recv_copy_send (middle: what arrived, to the next rank and `own`),
//              recv_copy (last, staged: the staging to `own`), recv (last: wait only);
//   reduce:    send (first: in, pre-multiplied), recv_reduce_send (middle: staging +
//              in), recv_reduce_copy (last: staging + in, finished, to `own`).
// Each step is its own round loop, so no round branches on the position. Host: n >= 2.
template <u32 OFFSET>
struct Prims<Simple, RootChain<OFFSET>> {
  typedef RootChain<OFFSET> Pattern;
  const CollArgs& a;
  u64 e;
  u64 nvec;  // vectors of the transfer
  u32 pos, prev, next;
  bool credits;    // stores into the next rank wait for its credit, round by round
  bool ok = true;  // thread 0: no wait gave up

  COMMHAL_DEVICE Prims(const CollArgs& args, u64 vectors, u64 geometry)
      : a(args), e(coll_begin(args)), nvec(vectors) {
    pos = Pattern::pos(a);
    prev = Pattern::recv_from(a, 0);
    next = Pattern::send_to(a, 0);
    credits = chain_start(a, e, !last(), geometry) == COLL_CHAIN_CREDITS && !last();
  }

  COMMHAL_DEVICE bool first() const { return pos == 0; }
  COMMHAL_DEVICE bool last() const { return pos == a.nranks - 1; }

  COMMHAL_DEVICE void copy_send(const v16* in, v16* to, v16* own) {
    copy<false, true>(in, to, own, false);
  }
  COMMHAL_DEVICE void recv_copy_send(const v16* src, v16* to, v16* own, bool credit) {
    copy<true, true>(src, to, own, credit);
  }
  COMMHAL_DEVICE void recv_copy(const v16* src, v16* own, bool credit) {
    copy<true, false>(src, nullptr, own, credit);
  }
  COMMHAL_DEVICE void recv() {
    rounds<true, false>(false, [](u64) {});
  }

  template <typename Op>
  COMMHAL_DEVICE void send(const v16* in, v16* to) {
    rounds<false, true>(false, [&](u64 c) {
      chunk_for(
          a, c, nvec, [&](u64 v) { return pre16<Op>(a, in[v]); },
          [&](u64 v, v16 x) { to[v] = x; });
    });
  }
  template <typename Op>
  COMMHAL_DEVICE void recv_reduce_send(const v16* stage, const v16* in, v16* to) {
    rounds<true, true>(true, [&](u64 c) {
      chunk_for(
          a, c, nvec, [&](u64 v) { return add16<Op>(stage[v], pre16<Op>(a, in[v])); },
          [&](u64 v, v16 x) { to[v] = x; });
    });
  }
  template <typename Op>
  COMMHAL_DEVICE void recv_reduce_copy(const v16* stage, const v16* in, v16* own) {
    rounds<true, false>(true, [&](u64 c) {
      chunk_for(
          a, c, nvec,
          [&](u64 v) { return fin16<Op>(a, add16<Op>(stage[v], pre16<Op>(a, in[v]))); },
          [&](u64 v, v16 x) { own[v] = x; });
    });
  }

 private:
  // src to the next rank (SEND) and to `own` unless null.
  template <bool RECV, bool SEND>
  COMMHAL_DEVICE void copy(const v16* src, v16* to, v16* own, bool credit) {
    rounds<RECV, SEND>(credit, [&](u64 c) {
      chunk_for(
          a, c, nvec, [&](u64 v) { return src[v]; },
          [&](u64 v, v16 x) {
            if (SEND) to[v] = x;
            if (own != nullptr) own[v] = x;
          });
    });
  }

  // One round per chunk: wait (RECV: the previous rank's flag; credits: the next
  // rank's credit), `round(c)`, then flag the next rank (SEND) and / or credit the
  // previous one (`credit`).
  template <bool RECV, bool SEND, typename Round>
  COMMHAL_DEVICE void rounds(bool credit, Round round) {
    const u64 cv = (u64)blockDim.x * chain_unroll(a);
    u32 k = 0;
    for (u64 c = blockIdx.x; c * cv < nvec; c += gridDim.x, ++k) {
      const u64 tag = chain_tag(e, k);
      if (RECV || credits) chain_wait(a, prev, next, tag, ok, RECV, credits);
      round(c);
      if (SEND || credit) chain_signal(a, next, tag, ok, SEND, credit);
    }
  }
};

// LL16's sends and waits loop over the pattern's MAX_SENDS / MAX_RECVS fixed peer
// slots, unrolled, with every peer's pointers computed before the data loop: indexed by
// constants they stay in registers. (The packet stores and waits are asm with a memory
// clobber, after which anything read through `a` is read again.) Waits stay runtime
// loops over the peers, taking the pointers from those registers (dataops.h pick): seven unrolled
// bounded waits made the LL16 kernels 12-18 % slower at 256 KiB on 4 x H100.

template <typename Pattern>
struct Prims<LL16, Pattern> {
  enum { REDUCE_AFTER_REPLICATE = true };  // every packet carries its flag
  const CollArgs& a;
  u64 e;
  u32 flag;
  u64 parity;

  COMMHAL_DEVICE explicit Prims(const CollArgs& args)
      : a(args), e(coll_begin(args)), flag((u32)e), parity(e & 1) {}

  // As Prims<Simple>: the same bytes to every receiver (loaded once per packet).
  template <typename Src, typename Dst>
  COMMHAL_DEVICE void replicate(u64 bytes, Src src, Dst dst, bool own) {
    put_all<true>(bytes, src, dst, own);
  }

  // As Prims<Simple>: a part per receiver (every part's packet loaded before any store).
  template <typename Src, typename Dst>
  COMMHAL_DEVICE void scatter(u64 bytes, Src src, Dst dst, bool own) {
    put_all<false>(bytes, src, dst, own);
  }

  // Every sender's packets, unpacked to dst(rank, p): items (sender k, packet i), sender
  // after sender, so that on a grid of a thread per item (the all-gather's) every
  // sender's packets are waited for at once. With a thread per packet, each thread
  // waiting for its packet of every sender in turn, the all-gather took 1.13-1.38x as
  // long at 1-64 KiB on 4 x H100 (the generated all-gather plan, whose unpacks already
  // ran an item per thread, showed it).
  template <typename Dst>
  COMMHAL_DEVICE void gather(u64 bytes, Dst dst) {
    const u32 np = Pattern::recvs(a);
    const LlInbox in = inbox();
    const u8* slot[Pattern::MAX_RECVS];
    uint2* d[Pattern::MAX_RECVS];
#pragma unroll
    for (u32 k = 0; k < Pattern::MAX_RECVS; ++k) {
      if (k < np) {
        const u32 p = Pattern::recv_from(a, k);
        slot[k] = in.from(p);
        d[k] = reinterpret_cast<uint2*>(dst(in.me, p));
      }
    }
    const WaitBound b = bound(a);
    const u64 npk = bytes / 8;
    const u64 gthreads = (u64)gridDim.x * blockDim.x;
    bool ok = true;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < np * npk; j += gthreads) {
      const u32 k = (u32)(j / npk);
      const u64 i = j - k * npk;
      pick(d, k)[i] = ll16_wait(pick(slot, k) + i * 16, flag, b, ok);
    }
  }

  // out = the sum, in rank order, of src(rank, rank) and every sender's packets.
  template <typename Op, typename Src, typename Dst>
  COMMHAL_DEVICE void reduce(u64 bytes, Src src, Dst, u64 out) {
    const LlInbox in = inbox();
    const u32 n = a.nranks;
    const uint2* own = reinterpret_cast<const uint2*>(src(in.me, in.me));
    uint2* o = reinterpret_cast<uint2*>(out);
    const WaitBound b = bound(a);
    const u64 npk = bytes / 8;
    const u64 gthreads = (u64)gridDim.x * blockDim.x;
    bool ok = true;
    ll16_reduce<uint2>(
        (u64)blockIdx.x * blockDim.x + threadIdx.x, npk, gthreads, n,
        [&](u64 i) { return own[i]; },  // before the waits: its latency hides behind them
        [&](u32 p, u64 i, uint2 mine) {
          return pre8<Op>(a, p == in.me ? mine : ll16_wait(in.from(p) + i * 16, flag, b, ok));
        },
        [](uint2 x, uint2 y) { return add8<Op>(x, y); },
        [&](u64 i, uint2 acc) { o[i] = fin8<Op>(a, acc); });
  }

 private:
  COMMHAL_DEVICE LlInbox inbox() const { return ll_inbox(a, parity); }

  template <bool SAME, typename Src, typename Dst>
  COMMHAL_DEVICE void put_all(u64 bytes, Src src, Dst dst, bool own) {
    const u32 me = a.rank;
    const u32 np = Pattern::sends(a);
    if (Pattern::ONE_WAY) {
      for (u32 k = 0; k < np; ++k) block_wait_peer_done(a, Pattern::send_to(a, k), e, 2);
    }
    u8* slot[Pattern::MAX_SENDS];
    const uint2* s[Pattern::MAX_SENDS];
#pragma unroll
    for (u32 k = 0; k < Pattern::MAX_SENDS; ++k) {
      if (k < np) {
        const u32 p = Pattern::send_to(a, k);
        slot[k] = ll_slot(a, p, me, parity);
        s[k] = reinterpret_cast<const uint2*>(src(me, p));
      }
    }
    const uint2* s_own = reinterpret_cast<const uint2*>(src(me, me));
    uint2* d_own = own && dst(me, me) != src(me, me) ? reinterpret_cast<uint2*>(dst(me, me))
                                                      : nullptr;
    const u32 f = flag;
    const u64 npk = bytes / 8;
    const u64 gthreads = (u64)gridDim.x * blockDim.x;
    ll16_put<Pattern::MAX_SENDS, SAME>(
        (u64)blockIdx.x * blockDim.x + threadIdx.x, npk, gthreads, np, slot,
        [&](u32 k, u64 i) {
          if constexpr (SAME) return s_own[i];
          else return s[k][i];
        },
        [&](u32) { return f; },
        [&](u64 i, const uint2(&v)[Pattern::MAX_SENDS]) {
          if (d_own != nullptr) d_own[i] = SAME && np > 0 ? v[0] : s_own[i];
        });
  }
};
