// plan.h — device runtime of kernels generated from plans (algorithms/src/codegen.rs).
//
// A generated kernel runs one rank's plan: plan block b is carried out by `replicas`
// consecutive CTAs (blockIdx.x / replicas == b), each doing its 1/replicas share of every
// data op (its "part"). Host side: backends/cuda-coll/src/plan_exec.rs.
//
// Per-rank plan area (one cuMem VMM allocation, mapped by every peer):
//   [0, PLAN_SEM_BYTES)                 inbound semaphore flags u64 [sem][part]; peers
//                                       store into them
//   [PLAN_HS_OFF, PLAN_STATE_OFF)       inbound start / end handshake flags
//                                       u64 [2][sender][CTA]
//   [PLAN_STATE_OFF, PLAN_DATA_OFF)     PlanState, touched by this rank only
//   [PLAN_DATA_OFF, ...)                two scratch copies (by launch parity), then
//                                       two LL63 packet copies (plan_ll63.h)
//
// The protocol of the hand-written collectives (coll/protocol.cuh), so that nothing
// is counted, reset or fenced at the end of a kernel:
// * Epochs: launch L (1 + the plan launches before it on this rank; launches are
//   collective, so L agrees on every rank) lives in one u64 word per CTA slot, all
//   equal between launches: CTA b reads word b at its start and stores L into words
//   b, b + grid, b + 2 grid, ... (no other CTA of the launch reads those). The next
//   launch reads them after the kernel boundary (stream order; with programmatic
//   dependent launch after griddepcontrol.wait).
// * Signals are epoch flags (commhal/semaphore.h), not counters: the k-th signal of a
//   CTA (part q of its plan block) on semaphore s of peer p stores (L << 32) | k into
//   p's flag [s][q] (release, after __syncthreads: it publishes the whole CTA's
//   writes); the k-th wait on s waits until flag [s][q] >= (L << 32) | k for every
//   part q (thread q, acquire, then __syncthreads). Values only grow across launches,
//   so no base is kept and nothing is reset. One plan block signals a semaphore (the
//   generator checks), so the parts of the sender and the waiter pair up.
// * Handshakes (when peers' user buffers are written / read) are per CTA, as the hand
//   kernels' block barriers: CTA b stores L into flag [start|end][me][b] of every peer
//   and waits for its own [start|end][p][b]; every rank has the same grid, so after the
//   start flags CTA b knows every peer's kernel runs, and after the end flags of every
//   CTA every peer finished. No intra-rank barrier.
// * The intra-rank barrier and the replica sync are arrival flags, one word per CTA:
//   (L << 32) | n after the n-th barrier; a CTA waits for every word of the grid (of
//   its plan block).
// LL16 packets carry 8 data bytes, each 4-byte word beside a copy of the 4-byte flag
// (epoch and occurrence), in one 16-byte store; scratch copies rotate with the epoch.
// Word for word this is the host executor's LL8 layout (word i = {data i, flag}), so
// both size and address the packet area alike (exec::packet_range).
// * Scratch writers (a rank that writes data or packets into a peer's scratch,
//   Plan::scratch_writer_pairs): copies alternate by launch parity over every plan, so
//   the copy a writer fills in launch L was last read in launch L − 2, and the plan's
//   own signals need not show that the reader finished it: launch L − 1 may be a plan
//   in which the writer does not hear from the reader, and a one-way sender (the
//   broadcast:ll root) never does. Unless the pair's start handshake orders it, the
//   reader publishes its done epoch to the writer at the start of every launch of the
//   plan, as the hand kernels' done epochs (CTA 0, one store into the writer's PlanState,
//   no wait: publish_done, or far_publish_done through the proxy for a rank of another
//   node, in the unordered entry only, below: no far writer waits in the ordered one,
//   and each costs the proxy a send), and the writer waits, before its first write into
//   the reader, until the reader completed launch L − 2 (wait_done, far_wait_done: a
//   load of its own state; one wait per plan block for all its near readers).
//   Back to back, a writer that hears from its reader in every launch heard, in launch
//   L − 1, from writes the reader made after publishing, so the wait finds the value at
//   once; a one-way sender waits only when it runs two launches ahead. When the host
//   knows launch L − 1 ran the same plan, it launches the kernel's ordered entry
//   (wait_done<true>), in which only one-way senders wait.
//
// Semaphores and packets are the channels' epoch flags and LL16 packets
// (commhal/semaphore.h, commhal/packets.h). Every wait is the one bounded wait of
// commhal/wait.h (spin_ns of globaltimer, or the rank's error word already set): it
// stores ERR_WAIT_TIMEOUT / ERR_PACKET_TIMEOUT once and gives up; the host reads the
// word.
#pragma once
#include "commhal/commhal_port.h"
#include "commhal/copy.h"
#include "commhal/dataops.h"
#include "commhal/elem.h"
#include "commhal/launch.h"
#include "commhal/packets.h"
#include "commhal/port_channel.h"
#include "commhal/semaphore.h"

#define PLAN_MAX_RANKS 8
#define PLAN_MAX_SEMS 4096
#define PLAN_MAX_BLOCKS 508
// CTAs per plan block (replicas) and CTAs per kernel.
#define PLAN_MAX_PARTS 256
#define PLAN_MAX_CTAS 1024
#define PLAN_SEM_BYTES (PLAN_MAX_SEMS * PLAN_MAX_PARTS * 8)
#define PLAN_HS_OFF PLAN_SEM_BYTES
#define PLAN_HS_BYTES (2 * PLAN_MAX_RANKS * PLAN_MAX_CTAS * 8)
#define PLAN_STATE_OFF (PLAN_HS_OFF + PLAN_HS_BYTES)
#define PLAN_STATE_BYTES (4 * PLAN_MAX_CTAS * 8)
#define PLAN_DATA_OFF (PLAN_STATE_OFF + PLAN_STATE_BYTES)

namespace commhal {
namespace plan {

// Passed by value. Mirrored by PlanArgs in backends/cuda-coll/src/plan_exec.rs.
struct PlanArgs {
  u64 input[PLAN_MAX_RANKS];   // every rank's input base for this call, mapped here
  u64 output[PLAN_MAX_RANKS];  // every rank's output base for this call, mapped here
  u64 area[PLAN_MAX_RANKS];    // every rank's plan area, mapped here
  u64 count;                   // message elements (the plan's `count`)
  u64 scratch_copy_bytes;      // distance between scratch copies (fixed per Comm)
  u64 spin_ns;                 // bound of every wait
  u32 replicas;                // CTAs per plan block
  u32 ll63_copy_bytes;         // distance between the LL63 copies (plan_ll63.h), after
                               // the two scratch copies (copies alternate by launch
                               // parity whatever the plan's scratch_rotation says)
  u32 rank;                    // this rank
  u32 flags;                   // PLAN_FLAG_* (the host's knowledge of the launch before)
  u32 launch_slots;            // the most CTAs a plan launch of this rank has (launch.h;
                               // the host refuses larger grids; 0: PLAN_MAX_CTAS)
  u32 inbox_copy;              // PLAN_FLAG_INBOX: bytes / 256 of one inbox copy (far_scr)
  u64 ports;                   // PlanPorts* (device memory) when the plan has port ops, else 0
  u64 replicas_inv;            // ceil(2^64 / replicas) (0 for one replica): div_parts
};
static_assert(sizeof(PlanArgs) == 256, "PlanArgs layout");
// (Bit 0 is free. Whether the launch before ran the same plan is not a flag but the
// kernel's entry: a generated kernel is plan_body<ORDERED>, see wait_done.)
// The LL16 packet reduces of this launch wait for their terms in a loop (dataops.h
// ll16_reduce ROLLED), not unrolled: the host sets it from 32 KiB of output.
#define PLAN_FLAG_WAIT_LOOP 2u
// The far data and semaphores of this launch go through the ranks' inboxes (far_scr,
// far_sem): the plan allows it (codegen inbox_chunks) and this launch's far scratch fits
// one of the inbox's two copies (PlanArgs::inbox_copy, fixed per communicator).
#define PLAN_FLAG_INBOX 4u

// Port channels of a plan (ops between ranks of different virtual nodes): one FIFO per
// rank, drained by the host proxy (backends/cuda-coll/src/plan_ports.rs), which carries
// each trigger with the port backend (cuda-dma, host-tcp). A trigger's semaphore id is
// the peer rank (the proxy's port to it). A SIGNAL trigger carries its 64-bit value in
// w0 (len | src_offset << 32) and names the word by its remote memory and dst_offset:
// the proxy makes that word equal to the value, so port signals are the same epoch
// flags as the SM stores of memory channels.
//
// Memory ids name windows, not whole regions, so that the 32-bit offsets of a trigger
// reach regions past 4 GiB (the plan area at 1 GiB messages): a rank's input, output
// and plan area are seen through windows of at most 4 GiB. Windows 0, 1, 2 start the
// input, output and plan area (a region of up to 4 GiB is its one window); windows
// 3.. continue the regions past 4 GiB, PLAN_PORT_WINDOW_STEP apart, so neighbours
// overlap by 2 GiB and any range of up to 2 GiB inside a region lies whole in one
// window. This rank's windows are local ids 0..PLAN_PORT_REGIONS - 1; rank p's window k
// is remote id PLAN_PORT_REGIONS * p + k (at most 255 of the trigger's 511).
#define PLAN_PORT_REGIONS 32
#define PLAN_PORT_AREA 2                       // the window at the plan area's start
#define PLAN_PORT_WINDOW_STEP (1ull << 31)     // also the largest put one trigger carries
struct PlanPorts {
  Trigger* fifo;   // the ring (host-pinned, device-mapped)
  u64 depth;       // its slots
  u64* head;       // triggers reserved (device memory)
  u64* tail;       // triggers the proxy finished (host-pinned)
  u8* outbox;      // this rank's outbox (host-pinned, device-mapped; far_send), or null
  u64 outbox_len;  // its bytes; also one of this rank's windows
  u8* inbox;       // this rank's inbox (host-pinned, device-mapped; far_scr), or null
  u64 inbox_len;   // its bytes (the same on every rank)
  u64 inbox_window;               // the window of every rank's inbox
  u64 inbox_base[PLAN_MAX_RANKS];  // every rank's inbox as named here (0: none)
  u64 base[PLAN_MAX_RANKS][PLAN_PORT_REGIONS];  // every rank's windows as addressed here
  u64 len[PLAN_MAX_RANKS][PLAN_PORT_REGIONS];   // their lengths (0: none), <= 4 GiB
};
static_assert(sizeof(PlanPorts) == 72 + 8 * PLAN_MAX_RANKS + 2 * 8 * PLAN_MAX_RANKS * PLAN_PORT_REGIONS,
              "PlanPorts layout");
static_assert(PLAN_PORT_REGIONS * PLAN_MAX_RANKS <= TRIGGER_MAX_MEMORY_ID + 1,
              "remote window ids fit the trigger's 9-bit memory ids");

// The local part of the plan area. Peers store into `done` only.
struct PlanState {
  u32 error;                    // first error code (0: none)
  u32 pad0;
  u64 done[PLAN_MAX_RANKS];     // [p]: plan launches p completed (scratch readers)
  u64 tail_seen;                // the highest FIFO tail read (fifo_wait_tail)
  u64 box_free[2];              // [parity]: one past the last slot that read that outbox
                                // half (far_box_ready)
  u32 pad[2 * PLAN_MAX_CTAS - 2 - 2 * PLAN_MAX_RANKS - 6];
  u64 epoch[PLAN_MAX_CTAS];     // per CTA slot: plan launches completed on this rank
  u64 bar[PLAN_MAX_CTAS];       // per CTA: (L << 32) | intra-rank barriers passed
  u64 grp[PLAN_MAX_CTAS];       // per CTA: (L << 32) | replica syncs passed
};
static_assert(sizeof(PlanState) == PLAN_STATE_BYTES, "PlanState layout");

struct Span {
  u8* p;
  u64 n;  // elements
};

// Per-CTA context.
struct Ctx {
  const PlanArgs* a;
  PlanState* st;
  u64 epoch;  // plan launches before this one on this rank
  u64 hi;     // (epoch + 1) << 32: the high half of this launch's flag values
  u64 scr;    // offset of this invocation's scratch copy inside a plan area
  u32 flag;   // ll_flag(c, 0): this launch's packet flag base, computed once
  u64 inv;    // a.replicas_inv
  u32 block;  // this CTA's plan block
  u32 part;   // this CTA's index within its plan block
  u32 parts;  // replicas
  u32 nbar;   // barriers passed in this invocation
  u32 ngrp;   // replica syncs passed in this invocation
  u64 obox;   // bytes of this block's outbox share in use (far_send)
  u64 box_free;     // PlanState::box_free of this launch's half, read at the start
  u64 pushed;       // the pushing thread: one past its last FIFO slot (far_push)
  bool box_ready;   // far_box_ready passed
};

COMMHAL_DEVICE PlanState* state_of(const PlanArgs& a) {
  return reinterpret_cast<PlanState*>(a.area[a.rank] + PLAN_STATE_OFF);
}

// floor(u / replicas), for u < 2^56: the high half of u * ceil(2^64 / replicas) (the
// host's replicas_inverse, which checks that it is exact). A runtime division took some
// 15 dependent instructions before a CTA's first store, in every data op.
COMMHAL_DEVICE u64 div_parts_floor(const Ctx& c, u64 u) {
  return c.parts == 1 ? u : __umul64hi(u, c.inv);
}

// Start of every generated kernel (commhal/launch.h, as the hand kernels start):
// programmatic dependent launch, then the plan launches before this one on this rank.
COMMHAL_DEVICE Ctx begin(const PlanArgs& a) {
  launch_begin();
  Ctx c;
  c.a = &a;
  c.st = state_of(a);
  c.epoch = block_launch_number(c.st->epoch, launch_slots(a.launch_slots, PLAN_MAX_CTAS)) - 1;
  c.hi = (c.epoch + 1) << 32;
  // copy (launch parity): consecutive plan launches, of any plan, use different copies
  c.scr = PLAN_DATA_OFF + (c.epoch & 1) * a.scratch_copy_bytes;
  c.flag = (u32)((c.epoch % 0xFFFFFFull) << 8) + 1;
  c.parts = a.replicas;
  c.inv = a.replicas_inv;
  c.block = (u32)div_parts_floor(c, blockIdx.x);
  c.part = blockIdx.x - c.block * c.parts;
  c.nbar = 0;
  c.ngrp = 0;
  c.obox = 0;
  c.box_free = a.ports != 0 ? c.st->box_free[c.epoch & 1] : 0;
  c.pushed = 0;
  c.box_ready = false;
  return c;
}

// ---- chunk addressing (the arithmetic of ChunkRef::range) ----
// n elements at addr.
COMMHAL_DEVICE Span span_at(u64 addr, u64 n) {
  Span r;
  r.p = reinterpret_cast<u8*>(addr);
  r.n = n;
  return r;
}

// A span from its element bounds [s, e): codegen emits them as constant expressions of
// a.count (rational chunk positions known when the kernel is generated), so no op
// divides at run time.
COMMHAL_DEVICE Span span_of(u64 base, u64 esz, u64 s, u64 e) { return span_at(base + s * esz, e - s); }

// Chunks first .. first + cnt of `nchunks` of `total` elements, for a position known only
// at run time (a chunk index of a generated loop).
COMMHAL_DEVICE Span chunk(u64 base, u64 esz, u64 total, u32 nchunks, u64 first, u32 cnt) {
  return span_of(base, esz, first * total / nchunks, (first + cnt) * total / nchunks);
}

// Byte offset of the LL16 packets of a scratch chunk starting at element s (index
// `first`) in the packet area: packet k carries bytes [8k, 8k + 8) of the chunk. Each
// chunk's packets start on a 128-byte line of their own (the area's base is 256-byte
// aligned), so a warp's 512 bytes of packets touch 16 sectors, not 17; the spare line
// per chunk keeps chunks apart. exec::packet_range places them alike on the host.
COMMHAL_DEVICE u64 packet_offset(u64 s, u64 esz, u64 first) {
  return 128 * ((s * esz + 63) / 64 + first);
}

// LL16 packet area of a scratch chunk (see packet_offset).
COMMHAL_DEVICE Span packets_of(u64 base, u64 esz, u64 first, u64 s, u64 e) {
  return span_at(base + packet_offset(s, esz, first), e - s);
}

// The same from the chunk's rational position (as chunk).
COMMHAL_DEVICE Span packets(u64 base, u64 esz, u64 total, u32 nchunks, u64 first, u32 cnt) {
  return packets_of(base, esz, first, first * total / nchunks, (first + cnt) * total / nchunks);
}

// ceil(u / parts), for u < 2^56 (div_parts_floor).
COMMHAL_DEVICE u64 div_parts(const Ctx& c, u64 u) { return div_parts_floor(c, u + c.parts - 1); }

// This CTA's share [lo, hi) of n units, cut at multiples of `align` units (a power of
// two): ceil(ceil(n / align) / parts) aligns, which equals ceil(ceil(n / parts) / align).
COMMHAL_DEVICE void share(const Ctx& c, u64 n, u64 align, u64& lo, u64& hi) {
  const u64 per = div_parts(c, (n + align - 1) / align) * align;
  lo = per * c.part;
  hi = lo + per;
  if (lo > n) lo = n;
  if (hi > n) hi = n;
}

// ---- synchronisation ----
// The bound of every wait of this CTA: the rank's error word and spin_ns.
COMMHAL_DEVICE WaitBound bound(const Ctx& c) { return WaitBound{&c.st->error, c.a->spin_ns}; }

// Semaphore flag [idx][part] in `rank`'s plan area.
COMMHAL_DEVICE u64* sem_flag(const Ctx& c, u32 rank, u32 idx, u32 part) {
  return reinterpret_cast<u64*>(c.a->area[rank]) + (u64)idx * PLAN_MAX_PARTS + part;
}

// The k-th signal (k = 1, 2, ... in this invocation) of this CTA on semaphore idx of
// `peer`: the CTA's earlier writes become visible before the peer's matching wait
// returns. One store, no read of the peer's memory.
COMMHAL_DEVICE void signal(const Ctx& c, u32 peer, u32 idx, u32 k) {
  __syncthreads();
  if (threadIdx.x == 0) flag_signal(sem_flag(c, peer, idx, c.part), c.hi | k);
}

// The k-th wait on this rank's inbound semaphore idx: every part of the signalling
// block has signalled it k times in this invocation (acquire).
COMMHAL_DEVICE void wait(const Ctx& c, u32 idx, u32 k) {
  for (u32 q = threadIdx.x; q < c.parts; q += blockDim.x)
    flag_wait(sem_flag(c, c.a->rank, idx, q), c.hi | k, bound(c));
  __syncthreads();
}

// Raise this CTA's arrival word to (L << 32) | n (release, after the CTA's writes) and
// wait for words [from, to) to reach it.
COMMHAL_DEVICE void arrive_and_wait(const Ctx& c, u64* words, u32 from, u32 to, u32 n) {
  __syncthreads();
  const u64 v = c.hi | n;
  if (threadIdx.x == 0) flag_signal(&words[blockIdx.x], v);
  for (u32 t = from + threadIdx.x; t < to; t += blockDim.x)
    if (t != blockIdx.x) flag_wait(&words[t], v, bound(c));
  __syncthreads();
}

// Intra-rank barrier of every CTA of the kernel (all co-resident: the host keeps the
// grid within the SM count).
COMMHAL_DEVICE void barrier(Ctx& c) {
  c.nbar += 1;
  arrive_and_wait(c, c.st->bar, 0, gridDim.x, c.nbar);
}

// Sync the `replicas` CTAs of this plan block (between data ops whose shares differ).
COMMHAL_DEVICE void group_sync(Ctx& c) {
  c.ngrp += 1;
  if (c.parts == 1) {
    __syncthreads();
    return;
  }
  const u32 first = blockIdx.x - c.part;
  arrive_and_wait(c, c.st->grp, first, first + c.parts, c.ngrp);
}

// Handshake of this CTA with the same CTA of every peer on flag row `which` (0 start,
// 1 end): store L into the peer's [which][me][CTA], wait for ours [which][p][CTA].
// Ranks of other nodes (bit p of `far`) are skipped: far_handshake reaches them.
COMMHAL_DEVICE void handshake(const Ctx& c, u32 which, u32 nranks, u32 far) {
  const u64 row = ((u64)which * PLAN_MAX_RANKS) * PLAN_MAX_CTAS + blockIdx.x;
  block_handshake(c.a->rank, nranks, far, c.hi, bound(c), [&](u32 owner, u32 from) {
    return reinterpret_cast<u64*>(c.a->area[owner] + PLAN_HS_OFF) + row +
           (u64)from * PLAN_MAX_CTAS;
  });
}

COMMHAL_DEVICE void far_handshake(Ctx& c, u32 which, u32 far);

// Start: no CTA touches a peer's input or output before that peer's kernel runs (its
// earlier stream work — writing the input, reading the last output — is done).
COMMHAL_DEVICE void start_sync(Ctx& c, u32 nranks, u32 far) {
  handshake(c, 0, nranks, far);
  if (far) far_handshake(c, 0, far);
}

// End: the kernel completes only after every peer finished every op (nobody reads
// this rank's input or writes its output any more): CTA b waits for every peer's CTA b,
// and every rank runs the same grid.
COMMHAL_DEVICE void end_sync(Ctx& c, u32 nranks, u32 far) {
  handshake(c, 1, nranks, far);
  if (far) far_handshake(c, 1, far);
}

// Scratch reader: publish this rank's completed plan launches to `writer` (a rank of
// this node that writes into this rank's scratch; CTA 0 of the grid). Relaxed, as the
// hand kernels' done epochs (coll/protocol.cuh): every access of launch L − 1 and
// earlier is over at the kernel boundary (griddepcontrol.wait under PDL), so nothing is
// left to release, and a system-scope release here is a full fence on every launch,
// the writer's wait included.
COMMHAL_DEVICE void publish_done(const Ctx& c, u32 writer) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    store_relaxed(&reinterpret_cast<PlanState*>(c.a->area[writer] + PLAN_STATE_OFF)->done[c.a->rank],
                  c.epoch);
}

// Scratch writer, before its first write into any of `readers` (bit p: rank p) in this
// launch: wait until each completed the last launch that read the copy this one writes.
// Copies alternate by launch parity whatever the plan's rotation, so that is launch
// epoch − 2 (0-based): done[p] >= epoch − 1. Thread p loads done[p] (the loads run
// side by side), then the CTA syncs once. Waiting early is safe: in the entry that waits
// (not ORDERED, and the reader runs the same entry) each reader publishes first thing
// in this launch, waiting for nothing.
// ORDERED: the launch before on this rank ran this same plan (same kernel, in the same
// stream context: not the first launch of a graph capture, nor an eager launch on a
// communicator whose plans were ever captured). In it every scratch writer that is not
// a one-way sender heard from its reader (Plan::scratch_writer_pairs: each hears from
// its reader in every launch), so each reader had finished the launch before that, the
// last one that used the copy this launch writes: only the `one_way` readers (one-way
// packet receivers, which the writer never hears from) are waited for.
// Codegen writes every kernel as plan_body<ORDERED> with two entries (codegen ENTRY and
// ORDERED_ENTRY) where a block waits for a reader that is not one-way, and the host
// picks the entry per launch, so that a launch after the same plan has no code for the
// wait at all. Skipped by a runtime flag, the wait's code alone costs the 2-rank LL16
// plans 2-6 % (2 x H200: all-reduce 1-16 KiB 0.96-0.98 of the hand kernel's time
// without it, 0.96-1.03 with it; docs/performance.md).
template <bool ORDERED>
COMMHAL_DEVICE void wait_done(const Ctx& c, u32 readers, u32 one_way) {
  if (ORDERED) readers &= one_way;
  if (readers == 0) return;
  if (c.epoch >= 2)
    for (u32 p = threadIdx.x; p < PLAN_MAX_RANKS; p += blockDim.x)
      if ((readers >> p) & 1) flag_wait(&c.st->done[p], c.epoch - 1, bound(c));
  __syncthreads();
}

// ---- port channels (see PlanPorts) ----
// The channel handle of one push towards `peer` (memory ids filled per trigger).
COMMHAL_DEVICE PortChannelHandle far_handle(const Ctx& c, u32 peer) {
  const PlanPorts* t = reinterpret_cast<const PlanPorts*>(c.a->ports);
  PortChannelHandle h;
  h.fifo = t->fifo;
  h.fifo_depth = t->depth;
  h.head = t->head;
  h.tail = t->tail;
  h.semaphore_id = peer;
  h.local_memory_id = 0;
  h.remote_memory_id = 0;
  h.reserved = 0;
  h.local_semaphore = nullptr;
  h.expected = 0;
  h.error_flag = &c.st->error;
  h.wait_ns = c.a->spin_ns;
  return h;
}

// The window k of `rank` holding [p, p + n), and the offset of p in it (below 4 GiB);
// false (ERR_TRIGGER_RANGE stored) when none does.
COMMHAL_DEVICE bool far_locate(const Ctx& c, u32 rank, const u8* p, u64 n, u32& k, u64& off) {
  const PlanPorts* t = reinterpret_cast<const PlanPorts*>(c.a->ports);
  const u64 a = reinterpret_cast<u64>(p);
  for (k = 0; k < PLAN_PORT_REGIONS; ++k) {
    const u64 b = t->base[rank][k];
    if (b != 0 && a >= b && a + n <= b + t->len[rank][k]) {
      off = a - b;
      return true;
    }
  }
  set_error_once(&c.st->error, ERR_TRIGGER_RANGE);
  return false;
}

// The inbox (PLAN_FLAG_INBOX): pinned host memory per rank that the port backend writes
// with plain copies (host-tcp's receiver: no driver call) and the kernel reads over the
// bus. It holds the far semaphores (a word per semaphore and sender), then two copies,
// by launch parity, of the scratch that ports from other nodes write into (codegen
// inbox_chunks: only the owner's own ops and those puts touch it). The copies are
// PlanArgs::inbox_copy bytes apart whatever the launch's size, so a launch's copy
// never overlaps the one the launch before (of any size) may still be reading.
#define PLAN_INBOX_DATA (PLAN_MAX_SEMS * PLAN_MAX_RANKS * 8)
COMMHAL_DEVICE bool inbox_on(const Ctx& c) { return (c.a->flags & PLAN_FLAG_INBOX) != 0; }

// The scratch copy of rank r that far puts land in: in its inbox where the launch uses
// them, else the plan area's.
COMMHAL_DEVICE u64 far_scr(const Ctx& c, u32 r) {
  if (!inbox_on(c)) return c.a->area[r] + c.scr;
  const PlanPorts* t = reinterpret_cast<const PlanPorts*>(c.a->ports);
  return t->inbox_base[r] + PLAN_INBOX_DATA + (c.epoch & 1) * ((u64)c.a->inbox_copy << 8);
}

// Where far semaphore idx signalled by `sender` lives in every rank: a window and the
// word's offset in it. A word per sender: semaphore numbers are unique per receiver
// within one plan only, so two plans may have two far ranks signal the same number, and
// the proxy makes a word equal a value by adding the difference to what it last wrote
// there itself (plan_ports.rs), which is exact only while it is the word's one writer.
// In the plan area that is slot [idx][sender] of the semaphore (far signals stand for
// every part of a block), in the inbox word idx * PLAN_MAX_RANKS + sender.
struct FarWord {
  u32 window;
  u64 word;
};
COMMHAL_DEVICE FarWord far_sem(const Ctx& c, u32 idx, u32 sender) {
  if (inbox_on(c))
    return FarWord{(u32) reinterpret_cast<const PlanPorts*>(c.a->ports)->inbox_window,
                   ((u64)idx * PLAN_MAX_RANKS + sender) * 8};
  return FarWord{PLAN_PORT_AREA, ((u64)idx * PLAN_MAX_PARTS + sender) * 8};
}

// The trigger of a put of n bytes (at most PLAN_PORT_WINDOW_STEP) from this rank's `src`
// into `peer`'s `dst`, each end named by the window holding it; false (ERR_TRIGGER_RANGE
// stored) where no window does.
COMMHAL_DEVICE bool far_put_trigger(const Ctx& c, u32 peer, const u8* dst, const u8* src, u64 n,
                                    Trigger& t) {
  u32 sk, dk;
  u64 so, dof;
  if (!far_locate(c, c.a->rank, src, n, sk, so) || !far_locate(c, peer, dst, n, dk, dof))
    return false;
  t = make_trigger(TRIGGER_PUT, (u32)dof, (u32)so, (u32)n, PLAN_PORT_REGIONS * peer + dk, sk,
                   peer);
  return true;
}

// The trigger that makes `peer`'s word `at` equal `value` (the value rides in w0; the
// proxy adds the difference to what it last wrote there, plan_ports.rs).
COMMHAL_DEVICE Trigger far_signal_trigger(u32 peer, FarWord at, u64 value) {
  return make_trigger(TRIGGER_SIGNAL, (u32)at.word, (u32)(value >> 32), (u32)value,
                      PLAN_PORT_REGIONS * peer + at.window, 0, peer);
}

// Push the put of n bytes from this rank's `src` into `peer`'s `dst` in pieces of at
// most PLAN_PORT_WINDOW_STEP bytes (a piece that large lies whole in one window of each
// end), the last one together with the signal making the peer's word `at` `value` where
// `sig` (fifo_push2: the proxy performs both as one). c.pushed: one past the last slot.
// One thread.
COMMHAL_DEVICE void far_push(Ctx& c, u32 peer, u8* dst, const u8* src, u64 n, bool sig,
                             FarWord at, u64 value) {
  PortChannelHandle h = far_handle(c, peer);
  u64* seen = &c.st->tail_seen;
  u64 slot = 0, done = 0;
  Trigger t;
  while (n - done > PLAN_PORT_WINDOW_STEP || (!sig && done < n)) {
    const u64 m = n - done < PLAN_PORT_WINDOW_STEP ? n - done : PLAN_PORT_WINDOW_STEP;
    if (!far_put_trigger(c, peer, dst + done, src + done, m, t) ||
        !fifo_push(h, t, &slot, seen))
      return;
    c.pushed = slot + 1;
    done += m;
  }
  if (!sig) return;
  const Trigger s = far_signal_trigger(peer, at, value);
  if (done == n) {
    if (fifo_push(h, s, &slot, seen)) c.pushed = slot + 1;
    return;
  }
  if (far_put_trigger(c, peer, dst + done, src + done, n - done, t) &&
      fifo_push2(h, t, s, &slot, seen))
    c.pushed = slot + 1;
}

// The outbox (PlanPorts::outbox: the port backend sends from the host, host-tcp): part 0
// of a block copies a put's source into its share of the outbox and the proxy's port
// reads it with the CPU; a driver copy of device memory took 12-15 us per 512-byte put
// (H200), reading the outbox 0.2-1.2 us. The outbox has two halves, by launch parity as
// the scratch copies, and a block's share of the half this launch uses is
// far_box_share bytes (0: no outbox, the port reads the source where it is). Each put
// from a half raises PlanState::box_free[parity] past its slot; a launch writes its
// half only after the proxy finished those slots (two launches back: far_box_ready),
// so no launch waits for its own sends to finish, and a put's source needs no
// registration with the port. Where a block's puts outgrow its share, it waits for the
// proxy to finish them and starts the share over (far_box_drain).
COMMHAL_DEVICE u64 far_box_half(const Ctx& c) {
  const PlanPorts* t = reinterpret_cast<const PlanPorts*>(c.a->ports);
  return t->outbox == nullptr ? 0 : t->outbox_len / 2 / 256 * 256;
}
COMMHAL_DEVICE u64 far_box_share(const Ctx& c) {
  const u64 share = far_box_half(c) / (gridDim.x / c.parts) / 256 * 256;
  return share < 1024 ? 0 : share;
}

// Part 0, the whole CTA, before its first outbox write of this launch: the proxy
// finished every put that read this half before.
COMMHAL_DEVICE void far_box_ready(Ctx& c) {
  if (c.box_ready) return;
  c.box_ready = true;
  if (threadIdx.x == 0 && c.box_free != 0) {
    PortChannelHandle h = far_handle(c, 0);
    fifo_wait_done(h, c.box_free - 1, &c.st->tail_seen);
  }
  __syncthreads();
}

// Part 0, the whole CTA: wait until the proxy finished this block's puts, and start
// its share over.
COMMHAL_DEVICE void far_box_drain(Ctx& c) {
  if (threadIdx.x == 0 && c.pushed != 0) {
    PortChannelHandle h = far_handle(c, 0);
    fifo_wait_done(h, c.pushed - 1, &c.st->tail_seen);
  }
  __syncthreads();
  c.obox = 0;
}

// Put n bytes of this rank's `src` into `peer`'s `dst` through the proxy, then, where
// `sig`, make this rank's word of semaphore idx in the peer (far_sem) (L << 32) | k.
// The whole plan block: a replica sync first (its CTAs finished writing the source; and
// one signal stands for every part, none still reading what it hands back); then part
// 0 alone. With an outbox part 0 copies the source into its share and pushes each
// piece that fits, making it visible to the host first (pushed whole: 64 KiB pieces,
// each pushed as soon as copied, took 1.1-1.4 x the time from 256 KiB, 2 x H200 across
// two virtual nodes). Without one a thread pushes from `src`, which stays in use until
// far_flush (the generator flushes before anything may write this rank's memory again,
// and at the end of the block).
COMMHAL_DEVICE void far_send(Ctx& c, u32 peer, u8* dst, const u8* src, u64 n, bool sig, u32 idx,
                             u32 k) {
  const FarWord at = far_sem(c, idx, c.a->rank);
  const u64 value = c.hi | k;
  group_sync(c);
  if (c.part != 0) return;
  const u64 share = far_box_share(c);
  if (share == 0) {
    if (threadIdx.x == 0) far_push(c, peer, dst, src, n, sig, at, value);
    return;
  }
  u8* const base = reinterpret_cast<const PlanPorts*>(c.a->ports)->outbox +
                   (c.epoch & 1) * far_box_half(c) + c.block * share;
  for (u64 done = 0;;) {
    // at the source's offset mod 16, so the copy moves 16-byte vectors
    const u64 mis = reinterpret_cast<u64>(src + done) & 15;
    if (done < n && c.obox + mis + 256 > share) {
      far_box_drain(c);
      continue;
    }
    far_box_ready(c);
    const u64 room = share - c.obox - mis;
    const u64 m = n - done < room ? n - done : room;
    u8* box = base + c.obox + mis;
    copy_cooperative(box, src + done, m, threadIdx.x, blockDim.x);
    __threadfence_system();
    __syncthreads();
    c.obox += (mis + m + 255) / 256 * 256;
    done += m;
    if (threadIdx.x == 0) {
      far_push(c, peer, dst + done - m, box, m, sig && done == n, at, value);
      fetch_max_release(&c.st->box_free[c.epoch & 1], c.pushed);
    }
    if (done == n) return;
  }
}

// A put alone (far_send without a signal).
COMMHAL_DEVICE void far_put(Ctx& c, u32 peer, u8* dst, const u8* src, u64 n) {
  far_send(c, peer, dst, src, n, false, 0, 0);
}

// Wait until the puts this block pushed to the far ranks in `mask` (bit p: rank p) no
// longer need their sources (the port's flush), then the replica sync; the whole block.
// Puts from the outbox need nothing: their sources were copied before the push, and the
// proxy finishing them is far_box_ready's business.
COMMHAL_DEVICE void far_flush(Ctx& c, u32 mask) {
  if (far_box_share(c) == 0 && c.part == 0 && threadIdx.x == 0) {
    u64 last = 0;
    bool any = false, ok = true;
    for (u32 p = 0; p < PLAN_MAX_RANKS && ok; ++p) {
      if (!((mask >> p) & 1)) continue;
      PortChannelHandle h = far_handle(c, p);
      ok = commhal::port_push(h, TRIGGER_FLUSH, 0, 0, 0, &last, &c.st->tail_seen);
      any = true;
    }
    // the proxy performs triggers in order: the last flush done means all are
    if (any && ok) {
      PortChannelHandle h = far_handle(c, 0);
      commhal::fifo_wait_done(h, last, &c.st->tail_seen);
    }
  }
  group_sync(c);
}

// Make the u64 word at `word` of `peer`'s plan area equal `value` through the proxy,
// after every earlier port put of this rank to `peer` (one thread). The words are
// flags of the area's head (below PLAN_DATA_OFF): the area's first window holds them.
COMMHAL_DEVICE void far_store(const Ctx& c, u32 peer, FarWord at, u64 value) {
  PortChannelHandle h = far_handle(c, peer);
  commhal::fifo_push(h, far_signal_trigger(peer, at, value), nullptr, &c.st->tail_seen);
}
COMMHAL_DEVICE void far_store(const Ctx& c, u32 peer, u64 word, u64 value) {
  far_store(c, peer, FarWord{PLAN_PORT_AREA, word}, value);
}

// Far scratch reader: publish_done towards `writer`, a rank of another node, through
// the proxy: CTA 0, one thread, no wait; the proxy stores the value into done[me] of the
// writer's PlanState (the area's head, in its first window). Launch L − 1 is over at
// the kernel boundary. Codegen places it at the start of the unordered entry (a writer
// may be waiting for it), and the ordered entry has none: far readers are never
// one-way, so there the writer heard from its reader in the launch before (codegen
// publish_lines). The first launch has nothing to publish.
COMMHAL_DEVICE void far_publish_done(const Ctx& c, u32 writer) {
  if (blockIdx.x != 0 || threadIdx.x != 0 || c.epoch == 0) return;
  const u32 me = c.a->rank;
  const u64 word = reinterpret_cast<u64>(&c.st->done[me]) - c.a->area[me];
  far_store(c, writer, word, c.epoch);
}

// Far scratch writer, before its first put into `reader`: wait_done for a reader that
// publishes through the proxy (the same load of this rank's own state).
template <bool ORDERED>
COMMHAL_DEVICE void far_wait_done(const Ctx& c, u32 reader) {
  wait_done<ORDERED>(c, 1u << reader, 0);
}

// The k-th signal of this plan block on semaphore idx of `peer`, over the port: this
// rank's word of it in the peer (far_sem; its every part waits on that word) becomes
// (L << 32) | k. One signal stands for every part of the block (a memory channel
// signals per part), so the parts sync first: none is still reading what the signal
// hands back.
COMMHAL_DEVICE void far_signal(Ctx& c, u32 peer, u32 idx, u32 k) {
  group_sync(c);
  if (c.part == 0 && threadIdx.x == 0)
    far_store(c, peer, far_sem(c, idx, c.a->rank), c.hi | k);
}

// far_put of n bytes, then far_signal (idx, k) of the same peer, as codegen fuses them
// where one follows the other: one replica sync, and the put's last piece and the
// signal pushed into two slots at once (fifo_push2), which the proxy performs as one
// (host-tcp: one send and one wake-up of the receiver instead of two).
COMMHAL_DEVICE void far_put_signal(Ctx& c, u32 peer, u8* dst, const u8* src, u64 n, u32 idx,
                                   u32 k) {
  far_send(c, peer, dst, src, n, true, idx, k);
}

// The k-th wait on inbound semaphore idx that `peer` signals over a port (its word,
// far_sem). In the inbox (PLAN_FLAG_INBOX) the word is host memory, read over the bus:
// part 0 alone polls it and the block's other parts learn from the replica sync. With
// every part polling, the 2-rank all-gather across two nodes took 1053 µs at 1 MiB
// against 362 µs with one CTA per block (2 x H200).
COMMHAL_DEVICE void far_wait(Ctx& c, u32 peer, u32 idx, u32 k) {
  if (!inbox_on(c)) {
    if (threadIdx.x == 0) flag_wait(sem_flag(c, c.a->rank, idx, peer), c.hi | k, bound(c));
    __syncthreads();
    return;
  }
  const u64* w =
      reinterpret_cast<const u64*>(reinterpret_cast<const PlanPorts*>(c.a->ports)->inbox) +
      (u64)idx * PLAN_MAX_RANKS + peer;
  if (c.part == 0 && threadIdx.x == 0) flag_wait(w, c.hi | k, bound(c));
  group_sync(c);
}

// Handshake with the ranks of other nodes (`far`: bit p set for rank p), CTA 0 for the
// whole rank: the intra-rank barrier, then CTA 0 stores L into row `which` of each far
// peer through the proxy and waits for theirs, then the barrier again.
COMMHAL_DEVICE void far_handshake(Ctx& c, u32 which, u32 far) {
  barrier(c);
  if (blockIdx.x == 0) {
    const u32 me = c.a->rank;
    for (u32 p = threadIdx.x; p < PLAN_MAX_RANKS; p += blockDim.x) {
      if (!((far >> p) & 1)) continue;
      const u64 row = ((u64)which * PLAN_MAX_RANKS) * PLAN_MAX_CTAS;
      far_store(c, p, PLAN_HS_OFF + 8 * (row + (u64)me * PLAN_MAX_CTAS), c.hi);
      const u64* mine =
          reinterpret_cast<const u64*>(c.a->area[me] + PLAN_HS_OFF) + row + (u64)p * PLAN_MAX_CTAS;
      flag_wait(mine, c.hi, bound(c));
    }
  }
  barrier(c);
}

// ---- element types and operators: commhal/elem.h's, as the hand kernels ----
// DT is codegen's dtype_code (algorithms DataType order), OP its op_code: the COLL_OP_*
// codes 0 sum, 1 prod, 2 min, 3 max, 4 avg (reduced as sum; finalize_avg divides).
template <int DT> struct Elem;
template <> struct Elem<0> { typedef Ty_f64 T; };
template <> struct Elem<1> { typedef Ty_f32 T; };
template <> struct Elem<2> { typedef Ty_f16 T; };
template <> struct Elem<3> { typedef Ty_bf16 T; };
template <> struct Elem<4> { typedef Ty_f8e4m3 T; };
template <> struct Elem<5> { typedef Ty_f8e5m2 T; };
template <> struct Elem<6> { typedef Ty_i8 T; };
template <> struct Elem<7> { typedef Ty_u8 T; };
template <> struct Elem<8> { typedef Ty_i32 T; };
template <> struct Elem<9> { typedef Ty_u32 T; };
template <> struct Elem<10> { typedef Ty_i64 T; };
template <> struct Elem<11> { typedef Ty_u64 T; };

// ---- data ops ----
// The copy, the reduction and the packet puts and reads cut their op into this CTA's
// share and run the loop the hand kernels' primitives run over it (commhal/dataops.h:
// ll16_put, ll16_reduce, reduce_sources; commhal/copy.h: copy_cooperative).
// finalize_avg is the plans' own: the hand kernels divide in the loop that reduces.

// Every data op splits its n elements the same way (multiples of 16 bytes), so two ops
// on the same chunk give each CTA the same elements.
COMMHAL_DEVICE void share_elems(const Ctx& c, u64 n, u64 esz, u64& lo, u64& hi) {
  share(c, n, 16 / esz, lo, hi);
}

// Copy n elements of esz bytes (this CTA's share).
COMMHAL_DEVICE void copy(const Ctx& c, u8* dst, const u8* src, u64 n, u64 esz) {
  u64 lo, hi;
  share_elems(c, n, esz, lo, hi);
  if (hi > lo)
    copy_cooperative(dst + lo * esz, src + lo * esz, (hi - lo) * esz, threadIdx.x, blockDim.x);
}

// The 16-byte vectors [head, end) inside elements [lo, hi) of esz bytes, when dst and
// every source are equally aligned mod 16; else head = end = hi (no vectors).
COMMHAL_DEVICE void vector_range(const u8* dst, const u8* const* srcs, u32 nsrc, u64 esz,
                                 u64 lo, u64 hi, u64& head, u64& end) {
  head = end = hi;
  const u64 mis = reinterpret_cast<u64>(dst + lo * esz) & 15;
  for (u32 k = 0; k < nsrc; ++k)
    if ((reinterpret_cast<u64>(srcs[k] + lo * esz) & 15) != mis) return;
  const u64 v = 16 / esz;
  head = lo + ((16 - mis) & 15) / esz;
  if (head > hi) head = hi;
  end = head + (hi - head) / v * v;
}

// dst[i] = srcs[0][i] (op) srcs[1][i] (op) ... for i < n elements (this CTA's share):
// scalar head, 16-byte vector bulk, scalar tail. dst may alias a source element for
// element.
template <int DT, int OP>
COMMHAL_DEVICE void reduce(const Ctx& c, u8* dst, const u8* const* srcs, u32 nsrc, u64 n) {
  typedef typename Elem<DT>::T T;
  typedef typename T::R R;
  const u64 V = 16 / sizeof(R);
  u64 lo, hi, head, end;
  share_elems(c, n, sizeof(R), lo, hi);
  if (hi <= lo) return;
  vector_range(dst, srcs, nsrc, sizeof(R), lo, hi, head, end);
  // One loop (dataops.h reduce_sources, as the hand kernels' pull reductions) per part:
  // elements, 16-byte vectors (two 8-byte words of lanes each), elements.
  R* d = reinterpret_cast<R*>(dst);
  auto elem = [&](u32 k, u64 i) { return reinterpret_cast<const R*>(srcs[k])[i]; };
  auto op = [](R x, R y) { return elem_op<T, OP>(x, y); };
  auto store = [&](u64 i, R v) { d[i] = v; };
  reduce_sources<R>(lo + threadIdx.x, head, blockDim.x, nsrc, elem, op, store);
  // Unaligned buffers (or a short share): the head was everything. Leaving here keeps the
  // scalar-only path apart from the vector loop, which ptxas otherwise spills around.
  if (head == hi) return;
  reduce_sources<ulonglong2>(
      head + threadIdx.x * V, end, (u64)blockDim.x * V, nsrc,
      [&](u32 k, u64 i) { return *reinterpret_cast<const ulonglong2*>(srcs[k] + i * sizeof(R)); },
      [](ulonglong2 x, ulonglong2 y) {
        x.x = elem_op64<T, OP>(x.x, y.x);
        x.y = elem_op64<T, OP>(x.y, y.y);
        return x;
      },
      [&](u64 i, ulonglong2 v) { *reinterpret_cast<ulonglong2*>(dst + i * sizeof(R)) = v; });
  reduce_sources<R>(end + threadIdx.x, hi, blockDim.x, nsrc, elem, op, store);
}

// avg's last step: divide n elements by nranks in the type (this CTA's share), as the
// host's finalize_avg (which leaves a single rank's sum untouched).
template <int DT>
COMMHAL_DEVICE void finalize_avg(const Ctx& c, u8* dst, u64 n, u32 nranks) {
  typedef typename Elem<DT>::T T;
  typedef typename T::R R;
  if (nranks == 1) return;
  u64 lo, hi;
  share_elems(c, n, sizeof(R), lo, hi);
  R* d = reinterpret_cast<R*>(dst);
  for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) d[i] = T::div(d[i], nranks);
}

// Flag of a packet write: epoch and occurrence (< 255) in a non-zero u32.
// c.flag is the occurrence-0 value, computed once in begin.
COMMHAL_DEVICE u32 ll_flag(const Ctx& c, u32 occ) { return c.flag + occ; }

// The byte loops of packet_data and store_packet_data, for the last packet of a chunk
// and unaligned memory. Not inlined: inside every packet loop they cost the loop
// registers (at ptxas's 32-register target for these kernels, spills in more plans).
__device__ __noinline__ uint2 packet_data_bytes(const u8* src, u64 bytes, u64 k) {
  u64 w = 0;
  for (u32 b = 0; b < 8 && 8 * k + b < bytes; ++b) w |= (u64)src[8 * k + b] << (8 * b);
  return make_uint2((u32)w, (u32)(w >> 32));
}
__device__ __noinline__ void store_packet_bytes(u8* dst, u64 bytes, u64 k, uint2 v) {
  const u64 w = (u64)v.x | ((u64)v.y << 32);
  for (u32 b = 0; b < 8 && 8 * k + b < bytes; ++b) dst[8 * k + b] = (u8)(w >> (8 * b));
}

// The 8 bytes [8k, 8k + 8) of src (n bytes), zero past the end: one 8-byte load where
// src is 8-byte aligned and they lie inside, else byte by byte.
COMMHAL_DEVICE uint2 packet_data(const u8* src, u64 bytes, u64 k) {
  if ((reinterpret_cast<u64>(src) & 7) == 0 && 8 * k + 8 <= bytes)
    return reinterpret_cast<const uint2*>(src)[k];
  return packet_data_bytes(src, bytes, k);
}

// Store v as the bytes [8k, 8k + 8) of dst (n bytes), none past the end: the inverse
// of packet_data.
COMMHAL_DEVICE void store_packet_data(u8* dst, u64 bytes, u64 k, uint2 v) {
  if ((reinterpret_cast<u64>(dst) & 7) == 0 && 8 * k + 8 <= bytes) {
    reinterpret_cast<uint2*>(dst)[k] = v;
    return;
  }
  store_packet_bytes(dst, bytes, k, v);
}

// The put_packets of one source to NP peers (packet areas dst[q], flags flags[q]) and,
// unless own is null, the copy of the same n elements into own, in one loop (dataops.h
// ll16_put, the hand kernels' LL16 put): each packet's 8 bytes are loaded once and
// stored to every peer, then into own (as the hand broadcast_ll stores its own output).
// Codegen fuses a run of a block's puts of one source chunk and a copy of it (disjoint
// from it) into this: the same share per CTA (share_elems), so every peer gets the
// packets, and own the bytes, the separate ops give; what each op waited for
// (wait_done, a flush, a replica sync) comes before.
template <u32 NP>
COMMHAL_DEVICE void put_packets_multi(const Ctx& c, u8* const (&dst)[NP], const u32 (&flags)[NP],
                                      const u8* src, u64 n, u64 esz, u8* own) {
  const u64 bytes = n * esz;
  u64 elo, ehi;
  share_elems(c, n, esz, elo, ehi);  // 16-byte units: whole packets
  const u64 lo = elo * esz / 8;
  const u64 hi = (ehi * esz + 7) / 8;
  ll16_put<NP, true>(
      lo + threadIdx.x, hi, blockDim.x, NP, dst,
      [&](u32, u64 k) { return packet_data(src, bytes, k); }, [&](u32 q) { return flags[q]; },
      [&](u64 k, const uint2(&v)[NP]) {
        if (own != nullptr) store_packet_data(own, bytes, k, v[0]);
      });
}

// Write n elements of src as LL16 packets at dst (this CTA's share of the packets).
COMMHAL_DEVICE void put_packets(const Ctx& c, u8* dst, const u8* src, u64 n, u64 esz,
                                u32 flag) {
  u8* const d[1] = {dst};
  const u32 f[1] = {flag};
  put_packets_multi<1>(c, d, f, src, n, esz, nullptr);
}

// The LL16 puts of NP chunks src[q] of n elements each into packet areas dst[q] (flag
// f[q]), one op: codegen fuses a run of puts of different, equally long chunks (the
// reduce-scatter's) into this, as the hand kernels' scatter: each thread loads its
// packet of every chunk, then stores them, one loop instead of one per chunk. Each
// CTA's share is the one each put gives it alone.
template <u32 NP>
COMMHAL_DEVICE void put_packets_scatter(const Ctx& c, u8* const (&dst)[NP], const u32 (&f)[NP],
                                        const u8* const (&src)[NP], u64 n, u64 esz) {
  const u64 bytes = n * esz;
  u64 elo, ehi;
  share_elems(c, n, esz, elo, ehi);
  ll16_put<NP, false>(
      elo * esz / 8 + threadIdx.x, (ehi * esz + 7) / 8, blockDim.x, NP, dst,
      [&](u32 q, u64 k) { return packet_data(src[q], bytes, k); }, [&](u32 q) { return f[q]; },
      [](u64, const uint2(&)[NP]) {});
}

// Wait for LL16 packet k of packet area p to carry `flag`; its data (0 after a timeout).
COMMHAL_DEVICE uint2 packet_at(const Ctx& c, const u8* p, u64 k, u32 flag) {
  bool ok = true;
  const uint2 data = ll16_wait(p + 16 * k, flag, bound(c), ok);
  return ok ? data : make_uint2(0, 0);
}

// The items of NP chunks of n[q] elements of esz bytes, `unit` bytes an item: every
// chunk's items, chunk after chunk; a CTA takes its share of them (share) and its
// workers (threads or warps: `worker` of `workers`) take items lo + worker,
// lo + worker + workers, ...: body(q, k) for item k of chunk q; body returns false to
// stop (a failed wait). The fused multi-chunk packet ops walk their items so.
template <u32 NP, typename Body>
COMMHAL_DEVICE void chunk_items(const Ctx& c, const u64 (&n)[NP], u64 esz, u64 unit, u32 worker,
                                u32 workers, Body body) {
  u64 first[NP + 1];
  first[0] = 0;
#pragma unroll
  for (u32 q = 0; q < NP; ++q) first[q + 1] = first[q] + (n[q] * esz + unit - 1) / unit;
  u64 lo, hi;
  share(c, first[NP], 1, lo, hi);
  for (u64 i = lo + worker; i < hi; i += workers) {
    u32 q = 0;
    u64 k = i;
#pragma unroll
    for (u32 j = 1; j < NP; ++j) {
      if (i >= first[j]) {
        q = j;
        k = i - first[j];
      }
    }
    if (!body(q, k)) return;
  }
}

// The unpacks of NP senders' LL16 packets pk[q] (flag f[q]) into dst[q], chunks of n[q]
// elements of esz bytes, one op: codegen fuses a run of single-source, no-local packet
// reads (the all-gather's) into this, as the hand all-gather's gather, so every sender's
// packets are waited for on different threads at once (op by op, each thread waited
// for its packet of every sender in turn, and most threads of a CTA had none). A
// thread per packet (chunk_items).
template <u32 NP>
COMMHAL_DEVICE void unpack_packets_multi(const Ctx& c, u8* const (&dst)[NP], const u8* const (&pk)[NP],
                                         const u32 (&f)[NP], const u64 (&n)[NP], u64 esz) {
  chunk_items(c, n, esz, 8, threadIdx.x, blockDim.x, [&](u32 q, u64 k) {
    const uint2 v = packet_at(c, pick(pk, q), k, pick(f, q));
    store_packet_data(pick(dst, q), pick(n, q) * esz, k, v);
    return true;
  });
}

// dst = unpack(packets[0]) (op) ... (op) (locals[0] (op) ...) (op) ...: n elements, the
// locals' reduction entering before packet lpos (plan::local_position: rank order);
// each packet area holds the chunk's bytes from its first packet. This CTA's share of the packets,
// one 8-byte word of lanes at a time (dataops.h ll16_reduce, as the hand LL16 reduce):
// the locals loaded and reduced before the packet waits so that their latency hides
// behind them (as the hand kernels load their own input before waiting), then the terms
// in order. Words past the chunk's end are zero in the packets and read as
// zero from the locals, and only the chunk's bytes are stored; unaligned memory moves
// byte by byte (packet_data, store_packet_data). A single packet source and no locals
// (unpack) moves the bits as they are.
template <int DT, int OP, u32 NP>
COMMHAL_DEVICE void reduce_packets(const Ctx& c, u8* dst, const u8* const* locals, u32 nl,
                                   const u8* const (&pk)[NP], const u32 (&flags)[NP], u64 n,
                                   u32 lpos = 0) {
  typedef typename Elem<DT>::T T;
  typedef typename T::R R;
  const u64 bytes = n * sizeof(R);
  u64 elo, ehi;
  share_elems(c, n, sizeof(R), elo, ehi);
  const u64 lo = elo * sizeof(R) / 8;
  const u64 hi = (ehi * sizeof(R) + 7) / 8;
  auto word = [](uint2 v) { return (u64)v.x | ((u64)v.y << 32); };
  auto op = [](u64 x, u64 y) { return elem_op64<T, OP>(x, y); };
  const u32 first = nl > 0 ? 1 : 0;  // terms: the locals' sum, if any, then the packets
  const u32 nt = first + NP;
  auto pre = [&](u64 k) {
    u64 acc = 0;
    for (u32 q = 0; q < nl; ++q) {
      const u64 w = word(packet_data(locals[q], bytes, k));
      acc = q == 0 ? w : op(acc, w);
    }
    return acc;
  };
  auto term = [&](u32 t, u64 k, u64 mine) {
    if (first == 1 && t == lpos) return mine;
    const u32 q = first == 1 && t > lpos ? t - 1 : t;
    return word(packet_at(c, pick(pk, q), k, pick(flags, q)));
  };
  auto store = [&](u64 k, u64 w) {
    store_packet_data(dst, bytes, k, make_uint2((u32)w, (u32)(w >> 32)));
  };
  if (c.a->flags & PLAN_FLAG_WAIT_LOOP)
    ll16_reduce<u64, true>(lo + threadIdx.x, hi, blockDim.x, nt, pre, term, op, store);
  else
    ll16_reduce<u64, false>(lo + threadIdx.x, hi, blockDim.x, nt, pre, term, op, store);
}

}  // namespace plan
}  // namespace commhal

// The LL63 form of the packet ops (Plan::packets = Ll63).
#include "commhal/plan_ll63.h"
