// coll/copy_engine.cuh — the kernels of the copy-engine path (host: backends/cuda-coll/
// src/dma.rs): the bounded flag wait and the local reductions.
#pragma once
#include "coll/reduce_inputs.cuh"

// Local reduction for the copy-engine path (dma.rs): no barrier, no epoch, nothing
// remote. a.count elements; out[rank] = in[rank] + stage slot p for every p != rank, in
// rank order (identical result on every rank), where the copy engines put each peer's
// contribution into slot p of this rank's staging area (a.stage[rank] + p * slot).
// The host offsets a.in[rank] / a.out[rank] to the chunk; vectors when every base and
// the length are 16-byte multiples, elements otherwise.
template <typename Op>
COMMHAL_DEVICE void reduce_local(const CollArgs& a) {
  const u32 n = a.nranks, r = a.rank;
  const u64 bytes = a.count * Op::ELEM;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stage = a.stage[r];
  bool aligned = bytes % 16 == 0 && a.in[r] % 16 == 0 && a.out[r] % 16 == 0 &&
                 stage % 16 == 0 && a.stage_slot_bytes % 16 == 0;
  if (aligned) {
    const v16* own = reinterpret_cast<const v16*>(a.in[r]);
    for (u64 v = tid0; v < bytes / 16; v += gthreads)
      reinterpret_cast<v16*>(a.out[r])[v] = fin16<Op>(a, sum_staged<Op>(a, own, v));
  } else {
    for (u64 i = tid0; i < a.count; i += gthreads) {
      typename Op::W acc = 0;
      for (u32 p = 0; p < n; ++p) {
        const typename Op::W x = Op::pre_w(
            a, (p == r) ? load_elem<Op>(a.in[r], i * Op::ELEM)
                        : load_elem<Op>(stage + p * a.stage_slot_bytes, i * Op::ELEM));
        acc = (p == 0) ? x : Op::add_w(acc, x);
      }
      store_elem<Op>(a.out[r], i * Op::ELEM, Op::fin_w(a, acc));
    }
  }
}

// Bounded wait for a copy-engine flag: until the u32 *flag reaches `want`, compared
// cyclically (the host's u32 counters wrap, as cuStreamWaitValue32's GEQ), acquiring what
// the writer's stream made visible before it. false = gave up (error stored).
COMMHAL_DEVICE bool wait_flag_u32(const CollArgs& a, const u32* flag, u32 want) {
  return wait_until(bound(a), ERR_WAIT_TIMEOUT, [&] {
    u32 v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    return (int)(v - want) >= 0;
  });
}

// Bounded wait of the copy-engine path (dma.rs), in place of cuStreamWaitValue32 (which
// has no bound: a dead peer would leave the stream, and the process's exit, blocked):
// wait until the u32 flag that rank p writes into this rank's scratch reaches e (compared
// cyclically, as cuStreamWaitValue32's GEQ: the launch counter wraps), for
// every rank p whose bit is set. The peers write the flags with cuStreamWriteValue32
// after their copies (its default memory barrier: the copy is visible first), so this
// acquire orders the copied data before everything later on the stream. On a timeout
// (or this rank's error word already set) it stores ERR_WAIT_TIMEOUT here and
// returns, so the stream drains and Comm::sync reports the error. Arguments ride in
// CollArgs: count = byte offset of the flag row (layout::dma_flag(kind, 0)), root = e,
// chain_unroll = the mask of ranks. One warp; lane p waits for rank p. No epoch, no
// barrier, nothing remote.
COMMHAL_DEVICE void dma_wait(const CollArgs& a) {
  const u32 p = threadIdx.x;
  if (blockIdx.x != 0 || p >= a.nranks || ((a.chain_unroll >> p) & 1u) == 0) return;
  wait_flag_u32(a, reinterpret_cast<const u32*>(a.scratch[a.rank] + a.count + (u64)p * 8), a.root);
}

// The root's half of a 2-rank reduce by the copy engine (dma.rs reduce_pair): the other
// rank copies its input into this rank's staging area (a.stage[rank], from offset 0) in
// chunks — each leaves COLL_PAIR_CE_KEEP_EIGHTHS / 8 of what was left while that is at
// least COLL_PAIR_CE_FLOOR, then the rest (layout.rs pair_ce_chunks: the same
// boundaries) — and after chunk k writes
// (e << 5) | (k + 1) into this rank's COLL_DMA_CHUNK flag from it (cuStreamWriteValue32,
// whose default memory barrier makes the copy visible first). Every block waits for
// chunk k's flag (thread 0, ld.acquire.sys, bounded, compared cyclically), then the grid
// adds the chunk: out = staging + in, while the copy engine moves the next chunks.
// Arguments: count = elements (bytes % 16 == 0, host-checked), root = e (this rank is
// the root; the other rank is 1 - rank). A block whose wait failed (the error word is
// set, Comm::sync reports it) stops waiting; its sums are then garbage, as documented.
template <typename Op>
COMMHAL_DEVICE void reduce_pair_ce(const CollArgs& a) {
  const u32 from = 1 - a.rank;
  const u32 e = a.root;
  const u32* flag = reinterpret_cast<const u32*>(
      a.scratch[a.rank] + COLL_OFF_DMA_FLAGS + ((u64)COLL_DMA_CHUNK * COLL_MAX_RANKS + from) * 8);
  const v16* in = reinterpret_cast<const v16*>(a.in[a.rank]);
  const v16* staged = reinterpret_cast<const v16*>(a.stage[a.rank]);
  v16* out = reinterpret_cast<v16*>(a.out[a.rank]);
  const u64 total = a.count * Op::ELEM / 16, floor = COLL_PAIR_CE_FLOOR / 16;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  bool ok = true;  // thread 0's: its waits so far succeeded
  u64 left = total;
  for (u32 k = 0; left > 0; ++k) {
    u64 next = left * COLL_PAIR_CE_KEEP_EIGHTHS / 8;
    if (next < floor) next = 0;
    if (threadIdx.x == 0 && ok) ok = wait_flag_u32(a, flag, (e << 5) | (k + 1));
    __syncthreads();
    for (u64 v = total - left + (u64)blockIdx.x * blockDim.x + threadIdx.x; v < total - next; v += gthreads)
      out[v] = fin16<Op>(a, add16<Op>(pre16<Op>(a, staged[v]), pre16<Op>(a, in[v])));
    left = next;
  }
}
