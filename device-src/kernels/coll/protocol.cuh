// coll/protocol.cuh — the protocol every collective kernel follows: CollArgs (the layout
// shared with backends/cuda-coll/src/layout.rs), launch epochs, the bounded wait, the
// per-block barrier and the peers' done-epoch words.
//
// Epochs. Every launch on a rank gets epoch e = 1 + the number of launches before it,
// counted in one u64 word per block slot (COLL_OFF_BLOCK_EPOCHS) with no atomic and no
// fence (commhal/launch.h). Launches are matched across ranks (same collective, same
// size, same order), so e agrees on every rank.
// Peers learn a rank's progress from its done-epoch words: block 0 of launch e stores
// e - 1 at its start (every access of launch e - 1 is over: the kernel boundary is the
// fence) into word [rank] of COLL_OFF_DONE_EPOCHS in every rank's scratch, its own too,
// so a rank that needs a peer's progress reads its own memory (see wait_peer_done): a
// store into a peer costs the storing kernel nothing, a load from one a round trip.
//
// Barriers (per block). Block b of rank r stores e into flag[r][b] of every peer
// (st.release.sys, after __syncthreads, so it publishes the whole block's earlier
// writes) and waits until its own flag[p][b] >= e for every peer p (ld.acquire.sys, then
// __syncthreads). Block b of every rank handles the same grid-stride slice, so after the
// END barrier block b knows every peer's block b finished writing into this rank's
// output and reading this rank's input; all blocks together cover everything. START
// barrier: the peer's kernel is running, so the stream work before it (the input being
// written, the output no longer read) is complete.
//
// Chains (broadcast_chain, reduce_chain): ranks in the ring r -> r+1; chunk c (cv =
// blockDim.x * a.chain_unroll vectors, 1..COLL_CHAIN_UNROLL_MAX) belongs to block
// c % gridDim.x on every rank.
// After its round k a block raises chain flag [rank][block] of the next rank to
// (e << 32) | (k + 1) (st.release.sys after __syncthreads); the next rank's same block
// waits for it (ld.acquire.sys, then __syncthreads) before it reads the chunk. Values
// grow across launches (e grows), so a flag never has to be reset; a row per launch
// parity. Only a start handshake: the chain's own flags order everything a rank reads
// in this launch, and a rank writes into a peer (output or staging) again only after
// the next launch's START barrier, i.e. after that peer completed this launch — or,
// between chains queued back to back, after the next rank alone started it, or (reduce
// staging) consumed that round (chain_start: neighbour, credits).
//
// LL slots are double-buffered by epoch parity: the slot a rank writes in launch e was
// last written in launch e-2, so the writer must know the owner finished e-2. An
// all-peers kernel knows it when its launch e-1 heard from the owner (a barrier or a
// packet); a one-way sender waits on the owner's done word (block_wait_peer_done,
// below); otherwise the host queues the peers_done fence first (below).
//
// Every wait is bounded: after spin_ns nanoseconds (globaltimer) or once the rank's error
// word is set, the wait stores ERR_WAIT_TIMEOUT / ERR_PACKET_TIMEOUT (first error wins)
// and gives up; the host reads the error word after the launch and reports it.
#pragma once
#include "commhal/commhal_port.h"
#include "commhal/copy.h"
#include "commhal/launch.h"
#include "commhal/semaphore.h"

using namespace commhal;

// ---- layout shared with backends/cuda-coll/src/layout.rs (checked by a test) ----
#define COLL_MAX_RANKS 8
#define COLL_MAX_BLOCKS 1024
#define COLL_OFF_ERROR 12
// Host copy-engine path (backends/cuda-coll/src/dma.rs): u32 flags [kind][sender], 8 bytes
// apart, written by peers' cuStreamWriteValue32 and waited on by commhal_coll_dma_wait
// (no other kernel touches them).
#define COLL_OFF_DMA_FLAGS 1024
// The 2-rank copy-engine reduce (dma.rs reduce_pair): the kind of its chunk flag, its
// smallest chunk in bytes, and the eighths of what is left that stay left after each
// chunk (layout.rs DMA_CHUNK, PAIR_CE_FLOOR, PAIR_CE_KEEP_EIGHTHS, pair_ce_chunks).
#define COLL_DMA_CHUNK 3
#define COLL_PAIR_CE_FLOOR 2097152
#define COLL_PAIR_CE_KEEP_EIGHTHS 4
#define COLL_OFF_DONE_EPOCHS 2048
#define COLL_OFF_START_FLAGS 4096
#define COLL_OFF_END_FLAGS (COLL_OFF_START_FLAGS + COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)
#define COLL_OFF_MID_FLAGS (COLL_OFF_END_FLAGS + COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)
#define COLL_OFF_CHAIN_FLAGS (COLL_OFF_MID_FLAGS + COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)
#define COLL_OFF_CHAIN_CREDITS (COLL_OFF_CHAIN_FLAGS + 2 * COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)
#define COLL_OFF_CHAIN_LAST (COLL_OFF_CHAIN_CREDITS + COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)
#define COLL_OFF_BLOCK_EPOCHS (COLL_OFF_CHAIN_LAST + 2 * COLL_MAX_BLOCKS * 8)
#define COLL_OFF_LL (COLL_OFF_BLOCK_EPOCHS + COLL_MAX_BLOCKS * 8)
#define COLL_CHAIN_UNROLL_MAX 32
#define COLL_FLAG_CHAIN_OVERLAP 1
#define COLL_FLAG_CHAIN_CREDITS 2
#define COLL_FLAG_BCAST_STAGED 4
#define COLL_FLAG_AR_ONESHOT 8

// Passed by value (kernel parameter space). Mirrored by CollArgs in layout.rs.
struct CollArgs {
  u64 in[COLL_MAX_RANKS];       // every rank's input, mapped in this process
  u64 out[COLL_MAX_RANKS];      // every rank's output, mapped in this process
  u64 scratch[COLL_MAX_RANKS];  // every rank's scratch (flags, LL slots), mapped
  u64 count;                    // elements (allreduce: all; reducescatter: per rank)
                                // allgather: bytes per rank
  u64 spin_ns;                  // bound of every wait, nanoseconds
  u64 ll_slot_bytes;            // bytes of one LL slot (per parity, per sender)
  u32 rank;
  u32 nranks;
  u64 stage[COLL_MAX_RANKS];    // every rank's staging area (push all-reduce and
                                // reduce-scatter, rings, reduce chain, staged broadcast
                                // chain, copy-engine path), mapped
  u64 stage_slot_bytes;         // bytes of one sender's slot in a staging area
  u32 root;                     // broadcast / reduce: the root rank (host checks < nranks)
  u32 chain_unroll;             // chain / ring kernels: vectors per thread per chunk (1..32)
  u64 ll63_small_off;           // LL63 chains: the small region's offset in every scratch
  u64 ll63_small_half;          // LL63 chains: bytes of one of its parity halves (0: none)
  u32 flags;                    // COLL_FLAG_* bits
  u32 launch_slots;             // the most CTAs a launch of this rank has (launch.h;
                                // the host refuses larger grids; 0: COLL_MAX_BLOCKS)
  u64 scalar;                   // premulsum: the scalar, an element of the type in the
                                // low bytes (the same on every rank)
  u32 red_op;                   // COLL_OP_* of the launch (the kernel's op is compiled
                                // in; kept for debugging and the layout test)
  u32 red_pad;
};
static_assert(sizeof(CollArgs) == 24 * 8 + 3 * 8 + 8 + 8 * 8 + 8 + 8 + 2 * 8 + 8 + 2 * 8,
              "CollArgs layout");

COMMHAL_DEVICE u32* error_word(const CollArgs& a) {
  return reinterpret_cast<u32*>(a.scratch[a.rank] + COLL_OFF_ERROR);
}

// Marks rank p's error word with `code` (first error wins there too).
COMMHAL_DEVICE void set_peer_error(const CollArgs& a, u32 p, u32 code) {
  set_error_once(reinterpret_cast<u32*>(a.scratch[p] + COLL_OFF_ERROR), code);
}

// The bound of every wait of a launch (commhal/wait.h): this rank's error word, which
// peers and the host may set too, and a.spin_ns.
COMMHAL_DEVICE WaitBound bound(const CollArgs& a) { return WaitBound{error_word(a), a.spin_ns}; }

// Start of every kernel (commhal/launch.h): programmatic dependent launch, then this
// launch's epoch (the same in every block; see Epochs above), and block 0 publishes
// e - 1 as this rank's done epoch to every rank.
COMMHAL_DEVICE u64 coll_begin(const CollArgs& a) {
  launch_begin();
  const u64 e = block_launch_number(
      reinterpret_cast<u64*>(a.scratch[a.rank] + COLL_OFF_BLOCK_EPOCHS),
      launch_slots(a.launch_slots, COLL_MAX_BLOCKS));
  if (blockIdx.x == 0 && threadIdx.x < a.nranks) {
    store_relaxed(reinterpret_cast<u64*>(a.scratch[threadIdx.x] + COLL_OFF_DONE_EPOCHS) + a.rank,
                  e - 1);
  }
  return e;
}

// This block's slot for sender `from` in a `u64 [sender][COLL_MAX_BLOCKS]` flag row at
// `off` of rank `owner`'s scratch (START / END / MID flags, chain credits).
COMMHAL_DEVICE u64* flag_slot(const CollArgs& a, u32 owner, u64 off, u32 from) {
  return reinterpret_cast<u64*>(a.scratch[owner] + off) + (u64)from * COLL_MAX_BLOCKS +
         blockIdx.x;
}

// Block-level barrier with the same block of every peer (see "Barriers" at the top of this file).
COMMHAL_DEVICE void block_barrier(const CollArgs& a, u64 flags_off, u64 e) {
  block_handshake(a.rank, a.nranks, 0, e, bound(a),
                  [&](u32 owner, u32 from) { return flag_slot(a, owner, flags_off, from); });
}
// Bounded wait until rank p has completed launch `e` or a later one: p's word in this
// rank's scratch (p stores it there, relaxed, after a kernel boundary, which orders
// every access of the launches before it; the acquire here orders this rank's later
// writes into p after them). A local load: no round trip to p.
COMMHAL_DEVICE void wait_peer_done(const CollArgs& a, u32 p, u64 e) {
  flag_wait(reinterpret_cast<const u64*>(a.scratch[a.rank] + COLL_OFF_DONE_EPOCHS) + p, e, bound(a));
}

// The host's fence before an all-peers LL16 launch whose predecessor on the stream may
// not have heard from every peer (which launches: Kernel::hears_every_peer and
// backends/cuda-coll/src/comm/slot_order.rs). That launch, e, reuses the
// parity slots of e - 2 in every peer, so every peer must have completed e - 2, which
// a launch that heard from every peer would have shown (coll/prims.cuh, LL16). One
// warp: lane p waits until rank p's done word reached e - 2 (p began e - 1). No epoch
// of its own (e is the count in the epoch words + 1), nothing remote.
COMMHAL_DEVICE void peers_done(const CollArgs& a) {
  launch_begin();
  const u32 p = threadIdx.x;
  if (blockIdx.x != 0 || p >= a.nranks || p == a.rank) return;
  const u64* epochs = reinterpret_cast<const u64*>(a.scratch[a.rank] + COLL_OFF_BLOCK_EPOCHS);
  const u64 e = load_relaxed(epochs) + 1;
  if (e > 2) wait_peer_done(a, p, e - 2);
}

// The whole block waits until rank p has completed launch e - back (thread 0 waits, the
// others at the barrier); nothing when there is no such launch. A sender's check that
// the packets it is about to overwrite in p were read: back = 2 for parity-halved
// slots, 1 for a single region. One-way LL16 kernels (the broadcast root, the reduce
// non-roots, every send/recv rank towards the next) need it: nothing else would stop a
// sender running two launches ahead of a receiver. broadcast_ll waits with thread p for
// rank p instead. p sets its done word at the start of its launch e - 1, so this is
// usually long true; it never waits on a launch the sender's own progress holds back
// (p's launch e - 1 needs only launches up to e - 1 of its peers, and the sender is at
// e).
COMMHAL_DEVICE void block_wait_peer_done(const CollArgs& a, u32 p, u64 e, u64 back) {
  if (e <= back) return;
  if (threadIdx.x == 0) wait_peer_done(a, p, e - back);
  __syncthreads();
}
// Root of a broadcast / reduce, as the host passed it.
COMMHAL_DEVICE u32 coll_root(const CollArgs& a) { return a.root; }
