// coll_nvlink.cu — collectives over NVLink peer mappings (one process per GPU, every
// rank maps every peer's input, output and scratch). Host side: backends/cuda-coll.
//
// Kernels (dtype suffix _f16 / _bf16 / _f32, op sum; every other type and op: the
// reducing kernels below built once per (type, op) without the suffix, see "reduction
// operators" and the end of this file):
//   commhal_coll_allreduce_ll_*      one-shot LL16: packets (data+flag) into every
//                                    peer's scratch, then read + reduce. No barrier.
//   commhal_coll_allreduce_2shot_*   barrier; reduce own 1/n chunk reading n inputs;
//                                    store it to every output; barrier.
//   commhal_coll_reducescatter_*     barrier; reduce own chunk reading n inputs into own
//                                    output; barrier.
//   commhal_coll_allgather           barrier; store own input into every output; barrier.
//   commhal_coll_allreduce_push_*    large sizes, remote stores only: barrier; store input
//                                    chunk p into rank p's staging slot; barrier; reduce
//                                    own chunk from local input + staging; store it to
//                                    every output; barrier.
//   commhal_coll_reducescatter_push_* large sizes, remote stores only: barrier; store input
//                                    chunk p into rank p's staging slot; barrier; reduce
//                                    own chunk from local input + staging.
//   *_ll variants of all-gather / reduce-scatter for small chunks.
//   commhal_coll_broadcast           barrier; root stores its input into every output;
//                                    barrier.
//   commhal_coll_broadcast_sf        (>= 3 ranks, large) barrier; non-root k loads chunk k
//                                    from the root's input and stores it into every
//                                    non-root's output; barrier.
//   commhal_coll_broadcast_ll        small sizes: LL16 packets from the root, no barrier.
//   commhal_coll_reduce_ll_*         small sizes: LL16 packets to the root, no barrier.
//   commhal_coll_reduce_*            barrier; worker k (the non-roots; both ranks when
//                                    n = 2) reduces chunk k (reading n inputs) into the
//                                    ROOT's output; barrier.
//   commhal_coll_alltoall            barrier; chunk p of own input -> rank p's output slot
//                                    [rank]; barrier.
//   commhal_coll_sendrecv            barrier; own input -> next rank's output; barrier.
//   commhal_coll_broadcast_chain     (large, bytes % 16 == 0) barrier; pipelined chain
//                                    root -> root+1 -> ... : every rank stores each chunk
//                                    into the next rank's output and raises its flag.
//   commhal_coll_reduce_chain_*      (large, bytes % 16 == 0, staging area) barrier;
//                                    pipelined chain root+1 -> ... -> root: partial sums
//                                    stored into the next rank's staging, chunk by chunk.
//   commhal_coll_broadcast_ll63,     (above the LL16 sizes, bytes % 16 == 0) the chains' ranks with
//   commhal_coll_reduce_ll63_*       LL63 packets (63 data bits + a valid bit per 64-bit
//                                    word) instead of round flags: no barrier, no fence.
//   commhal_coll_allreduce_ring_*, commhal_coll_reducescatter_ring_*,
//   commhal_coll_allgather_ring      (large) barrier; ring r -> r+1 over the chain flags:
//                                    n-1 reduce-scatter steps into the next rank's
//                                    staging and/or n-1 all-gather steps into its output.
//   commhal_coll_allreduce_ring_head_* (3+ ranks, large) the all-reduce ring from its second
//                                    reduce-scatter step to its first all-gather step;
//                                    the copy engines do the first and the rest.
//   commhal_coll_allreduce_ll63_*    mid sizes: all pairs with LL63 packets (scatter,
//                                    reduce, gather), no barrier.
//   commhal_coll_alltoall_ll,
//   commhal_coll_sendrecv_ll         small sizes: LL16 packets, no barrier.
//
// Epochs. Every launch on a rank gets epoch e = 1 + the number of launches before it.
// Launches are matched across ranks (same collective, same size, same order), so e
// agrees on every rank. It lives in one u64 word per block slot (COLL_OFF_BLOCK_EPOCHS), all
// equal between launches: block b of a launch reads word b, and stores e into words b,
// b + grid, b + 2 grid, ... (no other block of the launch reads those), so after the
// launch every word holds e whatever the grid. The next launch reads them after the
// kernel boundary (stream order; with PDL after griddepcontrol.wait). No counter, no
// fence: the end of a kernel publishes nothing (a system-scope release there cost
// 1.3 µs of every launch, bench/micro/ll_latency.cu).
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
// last written in launch e-2 or earlier, and the owner finished reading it before it
// could take part in launch e-1, which this rank waited on.
//
// Every wait is bounded: after spin_ns nanoseconds (globaltimer) or once the rank's error
// word is set, the wait stores ERR_WAIT_TIMEOUT / ERR_PACKET_TIMEOUT (first error wins)
// and gives up; the host reads the error word after the launch and reports it.
#include "commhal/commhal_port.h"
#include "commhal/copy.h"

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
#define COLL_PAIR_CE_KEEP_EIGHTHS 3
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
#define COLL_ERR_WAIT_TIMEOUT 1
#define COLL_ERR_PACKET_TIMEOUT 4

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
  u64 stage[COLL_MAX_RANKS];    // every rank's staging area (push all-reduce), mapped
  u64 stage_slot_bytes;         // bytes of one sender's slot in a staging area
  u32 root;                     // broadcast / reduce: the root rank (host checks < nranks)
  u32 chain_unroll;             // chain / ring kernels: vectors per thread per chunk (1..32)
  u64 ll63_small_off;           // LL63 chains: the small region's offset in every scratch
  u64 ll63_small_half;          // LL63 chains: bytes of one of its parity halves (0: none)
  u32 flags;                    // COLL_FLAG_* bits
  u32 flags_pad;
  u64 scalar;                   // premulsum: the scalar, an element of the type in the
                                // low bytes (the same on every rank)
  u32 red_op;                   // COLL_OP_* of the launch (the kernel's op is compiled
                                // in; kept for debugging and the layout test)
  u32 red_pad;
};
static_assert(sizeof(CollArgs) == 24 * 8 + 3 * 8 + 8 + 8 * 8 + 8 + 8 + 2 * 8 + 8 + 2 * 8,
              "CollArgs layout");

COMMHAL_DEVICE u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

COMMHAL_DEVICE u32* error_word(const CollArgs& a) {
  return reinterpret_cast<u32*>(a.scratch[a.rank] + COLL_OFF_ERROR);
}

COMMHAL_DEVICE u32 load_relaxed_u32(const u32* p) {
  u32 v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Marks rank p's error word with `code` (first error wins there too).
COMMHAL_DEVICE void set_peer_error(const CollArgs& a, u32 p, u32 code) {
  set_error_once(reinterpret_cast<u32*>(a.scratch[p] + COLL_OFF_ERROR), code);
}

// The bound of every wait, checked at spin s (0, 1, ...; the clock is read every 1024th):
// true once spin_ns have passed since spin 0 or this rank's error word is set, and then
// `code` is stored there (first error wins). t0: the caller's, set at spin 0.
COMMHAL_DEVICE bool spin_expired(const CollArgs& a, u32 s, u64& t0, u32 code) {
  if ((s & 1023) != 0) return false;
  const u64 t = now_ns();
  if (s == 0) {
    t0 = t;
    return false;
  }
  if (t - t0 <= a.spin_ns && load_relaxed_u32(error_word(a)) == 0) return false;
  set_error_once(error_word(a), code);
  return true;
}

// Bounded wait for *flag >= e. false = gave up (error stored).
COMMHAL_DEVICE bool wait_flag(const CollArgs& a, const u64* flag, u64 e) {
  u64 t0 = 0;
  for (u32 i = 0;; ++i) {
    if (load_acquire(flag) >= e) return true;
    if (spin_expired(a, i, t0, COLL_ERR_WAIT_TIMEOUT)) return false;
  }
}

// Start of every kernel: this launch's epoch (same in every block; see Epochs above).
// Programmatic dependent launch (sm_90+; the host sets the launch attribute when
// COMMHAL_COLL_PDL allows it): `griddepcontrol.wait` first — nothing of this kernel
// runs before the previous kernel on the stream completed and its memory is flushed,
// exactly as without the attribute — then `launch_dependents`, so the next collective's
// blocks may already be scheduled (and wait in their own griddepcontrol.wait) while this
// one runs: the launch latency overlaps this kernel instead of following it. Both are
// no-ops for a launch without the attribute.
// Store v into this block's per-block words of a [COLL_MAX_BLOCKS] array: b, b + grid,
// b + 2 grid, ... (so after a launch every word holds v whatever its grid, and block b
// of the next launch reads word b). The caller reads word b before, then
// __syncthreads.
COMMHAL_DEVICE void store_block_slots(u64* words, u64 v) {
  for (u64 w = blockIdx.x + (u64)threadIdx.x * gridDim.x; w < COLL_MAX_BLOCKS;
       w += (u64)blockDim.x * gridDim.x) {
    store_relaxed(words + w, v);
  }
}

COMMHAL_DEVICE u64 coll_begin(const CollArgs& a) {
  __shared__ u64 s_epoch;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  u64* words = reinterpret_cast<u64*>(a.scratch[a.rank] + COLL_OFF_BLOCK_EPOCHS);
  if (threadIdx.x == 0) s_epoch = load_relaxed(words + blockIdx.x) + 1;
  __syncthreads();
  const u64 e = s_epoch;
  // word b only after every thread of the block has the value: the __syncthreads above
  store_block_slots(words, e);
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

// Block-level barrier with the same block of every peer (see the header comment).
COMMHAL_DEVICE void block_barrier(const CollArgs& a, u64 flags_off, u64 e) {
  __syncthreads();
  const u32 t = threadIdx.x;
  if (t < a.nranks && t != a.rank) {
    store_release(flag_slot(a, t, flags_off, a.rank), e);
    wait_flag(a, flag_slot(a, a.rank, flags_off, t), e);
  }
  __syncthreads();
}

// ---- reduction operators ----
// Every operator `Op` the kernels take provides, for its element type:
//   ELEM                      bytes per element (1, 2, 4 or 8)
//   W                         the word one element travels in (its bits in the low ELEM
//                             bytes; load_elem / store_elem move exactly ELEM bytes)
//   add_w(W, W)               one element: the op (sum, prod, min, max; avg and
//                             premulsum reduce as sum)
//   add8(uint2, uint2)        8 bytes of packed elements (LL16 packets)
//   add16(v16, v16)           16 bytes (vectors)
//   PRE, pre_w(a, W), pre64(a, u64)   premulsum: an original input element times
//                             a.scalar, applied once, where the kernel loads an input
//                             (never to a partial result); identity for the other ops
//   FIN, fin_w(a, W), fin64(a, u64)   avg: the sum divided by a.nranks, applied once,
//                             where a final element is produced; identity otherwise
// The unit's own instantiations (OpF16 / OpBF16 / OpF32: sum on 32-bit words, the
// `_f16` / `_bf16` / `_f32` kernels) keep the native f16x2 / bf16x2 / f32 adds, and
// their pre / fin are compile-time identities: the same code as a plain sum. Every
// other (type, op) is RedOp<Ty, OP> below, compiled into its own module (host:
// backends/cuda-coll/src/kernels.rs) with -DCOLL_RED_T=Ty_<type> -DCOLL_RED_OP=<op>.
// Semantics: algorithms/src/dtype.rs (reduce_into / finalize), step by step.
#define COLL_OP_SUM 0
#define COLL_OP_PROD 1
#define COLL_OP_MIN 2
#define COLL_OP_MAX 3
#define COLL_OP_AVG 4
#define COLL_OP_PREMULSUM 5

// Sum on 32-bit words (the unit's own kernels): Op supplies add(u32, u32) and ELEM.
template <typename Op>
struct Words32 {
  typedef u32 W;
  static constexpr bool PRE = false;
  static constexpr bool FIN = false;
  static COMMHAL_DEVICE u32 add_w(u32 x, u32 y) { return Op::add(x, y); }
  static COMMHAL_DEVICE uint2 add8(uint2 x, uint2 y) {
    uint2 r;
    r.x = Op::add(x.x, y.x);
    r.y = Op::add(x.y, y.y);
    return r;
  }
  static COMMHAL_DEVICE v16 add16(v16 x, v16 y) {
    v16 r;
    r.x = Op::add(x.x, y.x);
    r.y = Op::add(x.y, y.y);
    r.z = Op::add(x.z, y.z);
    r.w = Op::add(x.w, y.w);
    return r;
  }
  static COMMHAL_DEVICE u32 pre_w(const CollArgs&, u32 x) { return x; }
  static COMMHAL_DEVICE u32 fin_w(const CollArgs&, u32 x) { return x; }
  static COMMHAL_DEVICE u64 pre64(const CollArgs&, u64 x) { return x; }
  static COMMHAL_DEVICE u64 fin64(const CollArgs&, u64 x) { return x; }
};

// ---- sum on 32-bit words holding 2 halves / 2 bfloat16 / 1 float ----
struct OpF16 : Words32<OpF16> {
  static COMMHAL_DEVICE u32 add(u32 x, u32 y) {
    u32 r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    return r;
  }
  static constexpr u32 ELEM = 2;
};
struct OpBF16 : Words32<OpBF16> {
  static COMMHAL_DEVICE u32 add(u32 x, u32 y) {
    u32 r;
    asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    return r;
  }
  static constexpr u32 ELEM = 2;
};
struct OpF32 : Words32<OpF32> {
  static COMMHAL_DEVICE u32 add(u32 x, u32 y) {
    return __float_as_uint(__uint_as_float(x) + __uint_as_float(y));
  }
  static constexpr u32 ELEM = 4;
};

// ---- element types of RedOp: raw bits R, and add / mul / min / max / div by n ----
// Integers: sum and prod wrap (two's complement), min / max compare as S (signed or
// not), avg divides the wrapped sum truncating toward zero (C, as Rust's `/`).
template <typename R_, typename S>
struct TyInt {
  typedef R_ R;
  static constexpr bool X2 = false;
  static COMMHAL_DEVICE R add(R x, R y) { return (R)(x + y); }
  static COMMHAL_DEVICE R mul(R x, R y) { return (R)(x * y); }
  static COMMHAL_DEVICE R min(R x, R y) { return (S)x < (S)y ? x : y; }
  static COMMHAL_DEVICE R max(R x, R y) { return (S)x < (S)y ? y : x; }
  static COMMHAL_DEVICE R div(R x, u32 n) { return (R)((S)x / (S)n); }
};
typedef TyInt<u8, signed char> Ty_i8;
typedef TyInt<u8, u8> Ty_u8;
typedef TyInt<u32, int> Ty_i32;
typedef TyInt<u32, u32> Ty_u32;
typedef TyInt<u64, long long> Ty_i64;
typedef TyInt<u64, u64> Ty_u64;

// IEEE in the type itself, round to nearest even; min / max: min.f32 / max.f32 (fminf,
// fmin): a NaN operand loses, as Rust's f32::min / f64::min.
struct Ty_f32 {
  typedef u32 R;
  static constexpr bool X2 = false;
  static COMMHAL_DEVICE float f(R x) { return __uint_as_float(x); }
  static COMMHAL_DEVICE R add(R x, R y) { return __float_as_uint(__fadd_rn(f(x), f(y))); }
  static COMMHAL_DEVICE R mul(R x, R y) { return __float_as_uint(__fmul_rn(f(x), f(y))); }
  static COMMHAL_DEVICE R min(R x, R y) { return __float_as_uint(fminf(f(x), f(y))); }
  static COMMHAL_DEVICE R max(R x, R y) { return __float_as_uint(fmaxf(f(x), f(y))); }
  static COMMHAL_DEVICE R div(R x, u32 n) { return __float_as_uint(__fdiv_rn(f(x), (float)n)); }
};
struct Ty_f64 {
  typedef u64 R;
  static constexpr bool X2 = false;
  static COMMHAL_DEVICE double f(R x) { return __longlong_as_double((long long)x); }
  static COMMHAL_DEVICE R b(double x) { return (R)__double_as_longlong(x); }
  static COMMHAL_DEVICE R add(R x, R y) { return b(__dadd_rn(f(x), f(y))); }
  static COMMHAL_DEVICE R mul(R x, R y) { return b(__dmul_rn(f(x), f(y))); }
  static COMMHAL_DEVICE R min(R x, R y) { return b(fmin(f(x), f(y))); }
  static COMMHAL_DEVICE R max(R x, R y) { return b(fmax(f(x), f(y))); }
  static COMMHAL_DEVICE R div(R x, u32 n) { return b(__ddiv_rn(f(x), (double)n)); }
};

// f16 / bf16: the native x2 instructions on 32-bit words (op2); one element goes
// through the low half of a word. Each is bitwise the f32 op rounded back (the exact
// results of +, x of two such values need at most 2p + 2 <= 24 bits of f32's
// significand, so the double rounding is innocuous; min / max are exact). avg divides
// in f32 and rounds, as finalize_avg.
template <bool BF>
struct TyHalf {
  typedef unsigned short R;
  static constexpr bool X2 = true;
  static COMMHAL_DEVICE u32 op2(int op, u32 x, u32 y) {
    u32 r;
    if (op == COLL_OP_PROD) {
      if (BF) asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
      else asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    } else if (op == COLL_OP_MIN) {
      if (BF) asm("min.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
      else asm("min.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    } else if (op == COLL_OP_MAX) {
      if (BF) asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
      else asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    } else {
      if (BF) asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
      else asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    }
    return r;
  }
  static COMMHAL_DEVICE R add(R x, R y) { return (R)op2(COLL_OP_SUM, x, y); }
  static COMMHAL_DEVICE R mul(R x, R y) { return (R)op2(COLL_OP_PROD, x, y); }
  static COMMHAL_DEVICE R min(R x, R y) { return (R)op2(COLL_OP_MIN, x, y); }
  static COMMHAL_DEVICE R max(R x, R y) { return (R)op2(COLL_OP_MAX, x, y); }
  static COMMHAL_DEVICE float to_f(R x) {
    if (BF) return __uint_as_float((u32)x << 16);
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(x));
    return r;
  }
  static COMMHAL_DEVICE R from_f(float x) {
    R r;
    if (BF) asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
    else asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
  }
  static COMMHAL_DEVICE R div(R x, u32 n) { return from_f(__fdiv_rn(to_f(x), (float)n)); }
};
typedef TyHalf<false> Ty_f16;
typedef TyHalf<true> Ty_bf16;

// fp8 (OCP E4M3FN: M = 3, BIAS = 7, largest finite code 0x7e, NaN 0x7f, no infinities;
// E5M2: M = 2, BIAS = 15, 0x7b, NaN 0x7e, inf 0x7c): every op decodes to f32 (exact),
// applies the f32 op and encodes back with algorithms/src/fp8.rs's f32_to_fp8 rules,
// in software: round to nearest even on the fp8 grid (subnormals too), a finite
// overflow saturates to the largest finite value, +-inf saturates (E4M3) or stays inf
// (E5M2), NaN becomes the canonical NaN with the input's sign, -0 stays -0. (The
// hardware cvt.rn.satfinite.e*m*x2.f32 saturates E5M2's infinities and drops NaN
// signs, so it would not match the host reference bit for bit.)
COMMHAL_DEVICE float coll_pow2(int e) { return __uint_as_float((u32)(e + 127) << 23); }
template <int M, int BIAS, u32 MAXC, u32 NANC>
struct TyFp8 {
  typedef u8 R;
  static constexpr bool X2 = false;
  // Not inlined: inlined into every lane of every unrolled loop, the conversions made
  // NVRTC take about a minute per fp8 module (a few seconds this way).
  static __device__ __noinline__ float to_f(R c) {
    const u32 mag = c & 0x7fu;
    float v;
    if (M == 3 ? mag == 0x7fu : mag > 0x7cu) {
      v = __uint_as_float(0x7fc00000u);
    } else if (M == 2 && mag == 0x7cu) {
      v = __uint_as_float(0x7f800000u);
    } else {
      const u32 ex = mag >> M, man = mag & ((1u << M) - 1);
      v = ex == 0 ? (float)man * coll_pow2(1 - BIAS - M)
                  : (float)((1u << M) + man) * coll_pow2((int)ex - BIAS - M);
    }
    return (c & 0x80u) ? -v : v;
  }
  static __device__ __noinline__ R from_f(float x) {
    const u32 bits = __float_as_uint(x);
    const u32 sign = (bits >> 24) & 0x80u;
    const u32 ab = bits & 0x7fffffffu;
    if (ab > 0x7f800000u) return (R)(sign | NANC);
    if (ab == 0x7f800000u) return (R)(sign | (M == 3 ? MAXC : 0x7cu));
    if (ab == 0) return (R)sign;
    int e = (int)(ab >> 23) - 127;
    if (e < 1 - BIAS) e = 1 - BIAS;
    if (e > 30) return (R)(sign | MAXC);
    // |x| in quanta of the fp8 grid at exponent e: a power-of-two scaling, exact
    u32 q = (u32)rintf(__fmul_rn(__uint_as_float(ab), coll_pow2(M - e)));
    if (q >= (2u << M)) {  // carried into the next binade: q was exactly 2^(M+1)
      q >>= 1;
      e += 1;
    }
    const u32 mag = q < (1u << M) ? q : ((u32)(e + BIAS) << M) | (q - (1u << M));
    return (R)(sign | (mag > MAXC ? MAXC : mag));
  }
  static COMMHAL_DEVICE R add(R x, R y) { return from_f(__fadd_rn(to_f(x), to_f(y))); }
  static COMMHAL_DEVICE R mul(R x, R y) { return from_f(__fmul_rn(to_f(x), to_f(y))); }
  static COMMHAL_DEVICE R min(R x, R y) { return from_f(fminf(to_f(x), to_f(y))); }
  static COMMHAL_DEVICE R max(R x, R y) { return from_f(fmaxf(to_f(x), to_f(y))); }
  static COMMHAL_DEVICE R div(R x, u32 n) { return from_f(__fdiv_rn(to_f(x), (float)n)); }
};
typedef TyFp8<3, 7, 0x7eu, 0x7fu> Ty_f8e4m3;
typedef TyFp8<2, 15, 0x7bu, 0x7eu> Ty_f8e5m2;

// Every (type, op) but the unit's own sums: elements packed in 64-bit words, each lane
// reduced on its own (f16 / bf16: two x2 instructions per word).
template <typename T, int OP>
struct RedOp {
  typedef typename T::R R;
  typedef u64 W;
  static constexpr u32 ELEM = sizeof(R);
  static constexpr bool PRE = OP == COLL_OP_PREMULSUM;
  static constexpr bool FIN = OP == COLL_OP_AVG;
  static COMMHAL_DEVICE R op1(R x, R y) {
    if (OP == COLL_OP_PROD) return T::mul(x, y);
    if (OP == COLL_OP_MIN) return T::min(x, y);
    if (OP == COLL_OP_MAX) return T::max(x, y);
    return T::add(x, y);
  }
  // f(lane of x, lane of y) for every lane of a 64-bit word
  template <typename F>
  static COMMHAL_DEVICE u64 lanes(u64 x, u64 y, F f) {
    u64 r = 0;
#pragma unroll
    for (u32 l = 0; l < 8 / ELEM; ++l) {
      const u32 sh = 8 * ELEM * l;
      r |= (u64)f((R)(x >> sh), (R)(y >> sh)) << sh;
    }
    return r;
  }
  static COMMHAL_DEVICE u64 add64(u64 x, u64 y) {
    if constexpr (T::X2) {
      return (u64)T::op2(OP, (u32)x, (u32)y) | ((u64)T::op2(OP, (u32)(x >> 32), (u32)(y >> 32)) << 32);
    } else {
      return lanes(x, y, [](R p, R q) { return op1(p, q); });
    }
  }
  static COMMHAL_DEVICE u64 add_w(u64 x, u64 y) { return (u64)op1((R)x, (R)y); }
  static COMMHAL_DEVICE uint2 add8(uint2 x, uint2 y) {
    const u64 r = add64((u64)x.x | ((u64)x.y << 32), (u64)y.x | ((u64)y.y << 32));
    return make_uint2((u32)r, (u32)(r >> 32));
  }
  static COMMHAL_DEVICE v16 add16(v16 x, v16 y) {
    const uint2 lo = add8(make_uint2(x.x, x.y), make_uint2(y.x, y.y));
    const uint2 hi = add8(make_uint2(x.z, x.w), make_uint2(y.z, y.w));
    return make_uint4(lo.x, lo.y, hi.x, hi.y);
  }
  static COMMHAL_DEVICE u64 pre_w(const CollArgs& a, u64 x) {
    if (!PRE) return x;
    return (u64)T::mul((R)x, (R)a.scalar);
  }
  static COMMHAL_DEVICE u64 fin_w(const CollArgs& a, u64 x) {
    if (!FIN) return x;
    return (u64)T::div((R)x, a.nranks);
  }
  static COMMHAL_DEVICE u64 pre64(const CollArgs& a, u64 x) {
    if (!PRE) return x;
    if constexpr (T::X2) {
      const u32 s2 = (u32)(R)a.scalar * 0x10001u;
      return (u64)T::op2(COLL_OP_PROD, (u32)x, s2) |
             ((u64)T::op2(COLL_OP_PROD, (u32)(x >> 32), s2) << 32);
    } else {
      const R s = (R)a.scalar;
      return lanes(x, 0, [s](R p, R) { return T::mul(p, s); });
    }
  }
  static COMMHAL_DEVICE u64 fin64(const CollArgs& a, u64 x) {
    if (!FIN) return x;
    const u32 n = a.nranks;
    return lanes(x, 0, [n](R p, R) { return T::div(p, n); });
  }
};

template <typename Op>
COMMHAL_DEVICE v16 add16(v16 x, v16 y) {
  return Op::add16(x, y);
}
template <typename Op>
COMMHAL_DEVICE uint2 add8(uint2 x, uint2 y) {
  return Op::add8(x, y);
}
// The pre-multiply of original input data (identity unless Op::PRE).
template <typename Op>
COMMHAL_DEVICE uint2 pre8(const CollArgs& a, uint2 x) {
  if (!Op::PRE) return x;
  const u64 r = Op::pre64(a, (u64)x.x | ((u64)x.y << 32));
  return make_uint2((u32)r, (u32)(r >> 32));
}
template <typename Op>
COMMHAL_DEVICE v16 pre16(const CollArgs& a, v16 x) {
  if (!Op::PRE) return x;
  const uint2 lo = pre8<Op>(a, make_uint2(x.x, x.y)), hi = pre8<Op>(a, make_uint2(x.z, x.w));
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}
// The final step of a fully reduced element (identity unless Op::FIN).
template <typename Op>
COMMHAL_DEVICE uint2 fin8(const CollArgs& a, uint2 x) {
  if (!Op::FIN) return x;
  const u64 r = Op::fin64(a, (u64)x.x | ((u64)x.y << 32));
  return make_uint2((u32)r, (u32)(r >> 32));
}
template <typename Op>
COMMHAL_DEVICE v16 fin16(const CollArgs& a, v16 x) {
  if (!Op::FIN) return x;
  const uint2 lo = fin8<Op>(a, make_uint2(x.x, x.y)), hi = fin8<Op>(a, make_uint2(x.z, x.w));
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}

// One element at byte offset `off` of `base`, its ELEM bytes in the low bytes of a W
// (the unit's own 2-byte sums: the high half of the word is zero and ignored).
template <typename Op>
COMMHAL_DEVICE typename Op::W load_elem(u64 base, u64 off) {
  typedef typename Op::W W;
  if (Op::ELEM == 1) return (W) * reinterpret_cast<const volatile u8*>(base + off);
  if (Op::ELEM == 2) return (W) * reinterpret_cast<const volatile unsigned short*>(base + off);
  if (Op::ELEM == 4) return (W) * reinterpret_cast<const volatile u32*>(base + off);
  return (W) * reinterpret_cast<const volatile u64*>(base + off);
}
template <typename Op>
COMMHAL_DEVICE void store_elem(u64 base, u64 off, typename Op::W v) {
  if (Op::ELEM == 1) *reinterpret_cast<u8*>(base + off) = (u8)v;
  else if (Op::ELEM == 2) *reinterpret_cast<unsigned short*>(base + off) = (unsigned short)v;
  else if (Op::ELEM == 4) *reinterpret_cast<u32*>(base + off) = (u32)v;
  else *reinterpret_cast<u64*>(base + off) = (u64)v;
}

// Chunk [begin, end) of `units` split over n parts: the first units % n parts get one
// more. Mirrored by layout::partition.
COMMHAL_DEVICE void partition(u64 units, u32 n, u32 i, u64& begin, u64& end) {
  const u64 base = units / n, rem = units % n;
  begin = i * base + (i < rem ? i : rem);
  end = begin + base + (i < rem ? 1 : 0);
}

// ---------------------------------------------------------------------------------
// LL16 slots: slot(owner, sender) = scratch[owner] + LL + (parity * MAX_RANKS + sender)
// * slot_bytes, where `sender`'s packets for `owner` land.

COMMHAL_DEVICE u8* ll_slot(const CollArgs& a, u32 owner, u32 sender, u64 parity) {
  return reinterpret_cast<u8*>(a.scratch[owner] + COLL_OFF_LL +
                               (parity * COLL_MAX_RANKS + sender) * a.ll_slot_bytes);
}

// Bounded wait for LL16 packet `pk` with `flag`; returns its 8 data bytes.
COMMHAL_DEVICE uint2 ll_wait(const CollArgs& a, const u8* pk, u32 flag, bool& ok) {
  u32 d0 = 0, f0 = 0, d1 = 0, f1 = 0;
  u64 t0 = 0;
  for (u32 s = 0; ok; ++s) {
    load_volatile_v4u32(pk, d0, f0, d1, f1);
    if (f0 == flag && f1 == flag) break;
    if (spin_expired(a, s, t0, COLL_ERR_PACKET_TIMEOUT)) ok = false;
  }
  return make_uint2(d0, d1);
}

// ---------------------------------------------------------------------------------
// One-shot LL16 all-reduce. count * elem % 8 == 0 (host checks), bytes <= slot/2.
template <typename Op>
COMMHAL_DEVICE void allreduce_ll(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u64 npk = a.count * Op::ELEM / 8;
  const uint2* in = reinterpret_cast<const uint2*>(a.in[a.rank]);
  uint2* out = reinterpret_cast<uint2*>(a.out[a.rank]);
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  // slot(owner, sender) = scratch[owner] + LL + (parity * MAX_RANKS + sender) * slot_bytes
  const u64 my_send_off = COLL_OFF_LL + (parity * COLL_MAX_RANKS + a.rank) * a.ll_slot_bytes;
  for (u64 i = tid0; i < npk; i += gthreads) {
    const uint2 v = pre8<Op>(a, in[i]);
    for (u32 p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      store_volatile_v4u32(reinterpret_cast<u8*>(a.scratch[p] + my_send_off) + i * 16, v.x, flag,
                           v.y, flag);
    }
  }
  bool ok = true;
  for (u64 i = tid0; i < npk; i += gthreads) {
    uint2 acc = make_uint2(0, 0);
    bool first = true;
    for (u32 p = 0; p < a.nranks; ++p) {  // rank order: identical result on every rank
      uint2 v;
      if (p == a.rank) {
        v = pre8<Op>(a, in[i]);
      } else {
        v = ll_wait(a, ll_slot(a, a.rank, p, parity) + i * 16, flag, ok);
      }
      if (first) {
        acc = v;
        first = false;
      } else {
        acc = add8<Op>(acc, v);
      }
    }
    out[i] = fin8<Op>(a, acc);
  }
}

// Reduce vector range [vb, ve) (16-byte units at byte offset `base_off` of every input)
// and store the result at byte offset `dst_off` of every output (`to_all`) or of this
// rank's only. N = rank count known at compile time (fewer registers, and two vectors
// per thread per step: 2N loads in flight). Any deterministic index mapping is fine
// for the barriers: block b covers the same indices on every rank.
template <typename Op, int N>
COMMHAL_DEVICE void reduce_vectors_n(const CollArgs& a, u64 base_off, u64 vb, u64 ve,
                                     u64 dst_off, bool to_all) {
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const v16* src[N];
  v16* dst[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    src[k] = reinterpret_cast<const v16*>(a.in[k] + base_off);
    const u32 p = (a.rank + k) % N;  // own output first, then spread over the peers
    dst[k] = reinterpret_cast<v16*>(a.out[p] + dst_off);
  }
  const int nd = to_all ? N : 1;
  u64 v = vb + (u64)blockIdx.x * blockDim.x + threadIdx.x;
  for (; v + gthreads < ve; v += 2 * gthreads) {
    v16 x0[N], x1[N];
#pragma unroll
    for (int p = 0; p < N; ++p) {
      x0[p] = pre16<Op>(a, src[p][v]);
      x1[p] = pre16<Op>(a, src[p][v + gthreads]);
    }
    v16 acc0 = x0[0], acc1 = x1[0];
#pragma unroll
    for (int p = 1; p < N; ++p) {
      acc0 = add16<Op>(acc0, x0[p]);
      acc1 = add16<Op>(acc1, x1[p]);
    }
    acc0 = fin16<Op>(a, acc0);
    acc1 = fin16<Op>(a, acc1);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (k < nd) {
        dst[k][v] = acc0;
        dst[k][v + gthreads] = acc1;
      }
    }
  }
  if (v < ve) {
    v16 x[N];
#pragma unroll
    for (int p = 0; p < N; ++p) x[p] = pre16<Op>(a, src[p][v]);
    v16 acc = x[0];
#pragma unroll
    for (int p = 1; p < N; ++p) acc = add16<Op>(acc, x[p]);
    acc = fin16<Op>(a, acc);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (k < nd) dst[k][v] = acc;
    }
  }
}

// Any rank count up to COLL_MAX_RANKS, one vector per thread per step.
template <typename Op>
COMMHAL_DEVICE void reduce_vectors_any(const CollArgs& a, u64 base_off, u64 vb, u64 ve,
                                       u64 dst_off, bool to_all) {
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u32 n = a.nranks;
  for (u64 v = vb + (u64)blockIdx.x * blockDim.x + threadIdx.x; v < ve; v += gthreads) {
    v16 acc = pre16<Op>(a, reinterpret_cast<const v16*>(a.in[0] + base_off)[v]);
    for (u32 p = 1; p < n; ++p)
      acc = add16<Op>(acc, pre16<Op>(a, reinterpret_cast<const v16*>(a.in[p] + base_off)[v]));
    acc = fin16<Op>(a, acc);
    if (to_all) {
      for (u32 k = 0; k < n; ++k) {
        const u32 p = (a.rank + k) % n;
        reinterpret_cast<v16*>(a.out[p] + dst_off)[v] = acc;
      }
    } else {
      reinterpret_cast<v16*>(a.out[a.rank] + dst_off)[v] = acc;
    }
  }
}

template <typename Op>
COMMHAL_DEVICE void reduce_vectors(const CollArgs& a, u64 base_off, u64 vb, u64 ve, u64 dst_off,
                                   bool to_all) {
  switch (a.nranks) {
    case 2: reduce_vectors_n<Op, 2>(a, base_off, vb, ve, dst_off, to_all); break;
    case 4: reduce_vectors_n<Op, 4>(a, base_off, vb, ve, dst_off, to_all); break;
    default: reduce_vectors_any<Op>(a, base_off, vb, ve, dst_off, to_all); break;
  }
}

// Same, one element at a time over element range [eb, ee) (unaligned data, tails).
template <typename Op>
COMMHAL_DEVICE void reduce_elems(const CollArgs& a, u64 in_off, u64 eb, u64 ee, u64 dst_off,
                                 bool to_all) {
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  for (u64 i = eb + (u64)blockIdx.x * blockDim.x + threadIdx.x; i < ee; i += gthreads) {
    typename Op::W acc = Op::pre_w(a, load_elem<Op>(a.in[0], in_off + i * Op::ELEM));
    for (u32 p = 1; p < a.nranks; ++p)
      acc = Op::add_w(acc, Op::pre_w(a, load_elem<Op>(a.in[p], in_off + i * Op::ELEM)));
    acc = Op::fin_w(a, acc);
    if (to_all) {
      for (u32 p = 0; p < a.nranks; ++p) store_elem<Op>(a.out[p], dst_off + i * Op::ELEM, acc);
    } else {
      store_elem<Op>(a.out[a.rank], dst_off + i * Op::ELEM, acc);
    }
  }
}

// Two-shot all-reduce: chunks of whole 16-byte vectors per rank; the tail that is not a
// whole vector belongs to the last rank. Inputs and outputs 16-byte aligned (host).
template <typename Op>
COMMHAL_DEVICE void allreduce_2shot(const CollArgs& a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u64 bytes = a.count * Op::ELEM;
  const u64 nvec = bytes / 16;
  u64 vb, ve;
  partition(nvec, a.nranks, a.rank, vb, ve);
  reduce_vectors<Op>(a, 0, vb, ve, 0, true);
  if (a.rank == a.nranks - 1 && nvec * 16 < bytes) {
    reduce_elems<Op>(a, 0, nvec * 16 / Op::ELEM, a.count, 0, true);
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}

// Reduce-scatter: every input holds nranks * count elements; rank r reduces elements
// [r*count, (r+1)*count) into its output (a.out[rank], count elements).
template <typename Op>
COMMHAL_DEVICE void reducescatter(const CollArgs& a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u64 chunk_bytes = a.count * Op::ELEM;
  const u64 in_off = a.rank * chunk_bytes;
  bool aligned = (chunk_bytes % 16) == 0 && (a.out[a.rank] % 16) == 0;
  for (u32 p = 0; p < a.nranks; ++p) aligned = aligned && (a.in[p] % 16) == 0;
  if (aligned) {
    reduce_vectors<Op>(a, in_off, 0, chunk_bytes / 16, 0, false);
  } else {
    // element offsets relative to in_off; destination starts at element 0
    const u64 gthreads = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += gthreads) {
      typename Op::W acc = Op::pre_w(a, load_elem<Op>(a.in[0], in_off + i * Op::ELEM));
      for (u32 p = 1; p < a.nranks; ++p)
        acc = Op::add_w(acc, Op::pre_w(a, load_elem<Op>(a.in[p], in_off + i * Op::ELEM)));
      store_elem<Op>(a.out[a.rank], i * Op::ELEM, Op::fin_w(a, acc));
    }
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}

// Vector j of this rank's chunk summed in rank order: `own[j]` for this rank, vector j of
// staging slot p (a.stage[rank] + p * a.stage_slot_bytes, where rank p's contribution
// landed) for every other p. All n loads are issued before the adds. Every staging slot
// holds a peer's original input (pushed or copied as it was), so all n are
// pre-multiplied here (premulsum); the caller applies fin16 to the result. Shared by the push
// all-reduce, the push reduce-scatter and the copy-engine path's local reduction.
template <typename Op>
COMMHAL_DEVICE v16 sum_staged(const CollArgs& a, const v16* own, u64 j) {
  const u8* stage = reinterpret_cast<const u8*>(a.stage[a.rank]);
  v16 x[COLL_MAX_RANKS];
#pragma unroll
  for (u32 p = 0; p < COLL_MAX_RANKS; ++p) {
    if (p < a.nranks) {
      x[p] = (p == a.rank) ? own[j]
                           : reinterpret_cast<const v16*>(stage + (u64)p * a.stage_slot_bytes)[j];
      if (Op::PRE) x[p] = pre16<Op>(a, x[p]);
    }
  }
  v16 acc = x[0];
#pragma unroll
  for (u32 p = 1; p < COLL_MAX_RANKS; ++p) {
    if (p < a.nranks) acc = add16<Op>(acc, x[p]);
  }
  return acc;
}

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
  u64 t0 = 0;
  for (u32 i = 0;; ++i) {
    u32 v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    if ((int)(v - want) >= 0) return true;
    if (spin_expired(a, i, t0, COLL_ERR_WAIT_TIMEOUT)) return false;
  }
}

// Bounded wait of the copy-engine path (dma.rs), in place of cuStreamWaitValue32 (which
// has no bound: a dead peer would leave the stream, and the process's exit, blocked):
// wait until the u32 flag that rank p writes into this rank's scratch reaches e (compared
// cyclically, as cuStreamWaitValue32's GEQ: the launch counter wraps), for
// every rank p whose bit is set. The peers write the flags with cuStreamWriteValue32
// after their copies (its default memory barrier: the copy is visible first), so this
// acquire orders the copied data before everything later on the stream. On a timeout
// (or this rank's error word already set) it stores COLL_ERR_WAIT_TIMEOUT here and
// returns, so the stream drains and Comm::sync reports the error. Arguments ride in
// CollArgs: count = byte offset of the flag row (layout::dma_flag(kind, 0)), root = e,
// chain_unroll = the mask of ranks. One warp; lane p waits for rank p. No epoch, no
// barrier, nothing remote.
#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_dma_wait(CollArgs a) {
  const u32 p = threadIdx.x;
  if (blockIdx.x != 0 || p >= a.nranks || ((a.chain_unroll >> p) & 1u) == 0) return;
  wait_flag_u32(a, reinterpret_cast<const u32*>(a.scratch[a.rank] + a.count + (u64)p * 8), a.root);
}
#endif  // !COLL_RED_OP

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

#ifndef COLL_RED_OP
// Entry points, spelled out (device-src lists and checks every extern "C" kernel).
extern "C" __global__ void commhal_coll_reduce_local_f16(CollArgs a) { reduce_local<OpF16>(a); }
extern "C" __global__ void commhal_coll_reduce_local_bf16(CollArgs a) { reduce_local<OpBF16>(a); }
extern "C" __global__ void commhal_coll_reduce_local_f32(CollArgs a) { reduce_local<OpF32>(a); }
extern "C" __global__ void commhal_coll_reduce_pair_ce_f16(CollArgs a) { reduce_pair_ce<OpF16>(a); }
extern "C" __global__ void commhal_coll_reduce_pair_ce_bf16(CollArgs a) { reduce_pair_ce<OpBF16>(a); }
extern "C" __global__ void commhal_coll_reduce_pair_ce_f32(CollArgs a) { reduce_pair_ce<OpF32>(a); }
extern "C" __global__ void commhal_coll_allreduce_ll_f16(CollArgs a) { allreduce_ll<OpF16>(a); }
extern "C" __global__ void commhal_coll_allreduce_2shot_f16(CollArgs a) { allreduce_2shot<OpF16>(a); }
extern "C" __global__ void commhal_coll_reducescatter_f16(CollArgs a) { reducescatter<OpF16>(a); }
extern "C" __global__ void commhal_coll_allreduce_ll_bf16(CollArgs a) { allreduce_ll<OpBF16>(a); }
extern "C" __global__ void commhal_coll_allreduce_2shot_bf16(CollArgs a) { allreduce_2shot<OpBF16>(a); }
extern "C" __global__ void commhal_coll_reducescatter_bf16(CollArgs a) { reducescatter<OpBF16>(a); }
extern "C" __global__ void commhal_coll_allreduce_ll_f32(CollArgs a) { allreduce_ll<OpF32>(a); }
extern "C" __global__ void commhal_coll_allreduce_2shot_f32(CollArgs a) { allreduce_2shot<OpF32>(a); }
extern "C" __global__ void commhal_coll_reducescatter_f32(CollArgs a) { reducescatter<OpF32>(a); }

// All-gather: a.count = bytes per rank; this rank's input a.in[rank] goes to byte offset
// rank * count of every output (skipped where it already is, i.e. in place).
extern "C" __global__ void commhal_coll_allgather(CollArgs a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u64 bytes = a.count;
  const u64 dst_off = (u64)a.rank * bytes;
  const u64 src = a.in[a.rank];
  bool aligned = (bytes % 16) == 0 && (src % 16) == 0;
  for (u32 p = 0; p < a.nranks; ++p) aligned = aligned && ((a.out[p] + dst_off) % 16) == 0;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (aligned) {
    const u64 nvec = bytes / 16;
    for (u64 v = tid0; v < nvec; v += gthreads) {
      const v16 x = reinterpret_cast<const v16*>(src)[v];
      for (u32 k = 0; k < a.nranks; ++k) {
        const u32 p = (a.rank + k) % a.nranks;
        if (a.out[p] + dst_off == src) continue;
        reinterpret_cast<v16*>(a.out[p] + dst_off)[v] = x;
      }
    }
  } else {
    for (u32 p = 0; p < a.nranks; ++p) {
      if (a.out[p] + dst_off == src) continue;
      copy_cooperative(reinterpret_cast<void*>(a.out[p] + dst_off),
                       reinterpret_cast<const void*>(src), bytes, (u32)tid0, (u32)gthreads);
    }
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}
#endif  // !COLL_RED_OP

// ---------------------------------------------------------------------------------
// LL16 variants of all-gather and reduce-scatter for small sizes: no barrier, packets
// carry the epoch (same slots and parity rule as the LL all-reduce).

// Reduce-scatter, LL: a.count elements per rank, count * elem % 8 == 0 (host checks).
template <typename Op>
COMMHAL_DEVICE void reducescatter_ll(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u64 cb = a.count * Op::ELEM;
  const u64 npk = cb / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u8* in = reinterpret_cast<const u8*>(a.in[a.rank]);
  for (u64 i = tid0; i < npk; i += gthreads) {
    for (u32 p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      const uint2 v = pre8<Op>(a, *reinterpret_cast<const uint2*>(in + p * cb + i * 8));
      store_volatile_v4u32(ll_slot(a, p, a.rank, parity) + i * 16, v.x, flag, v.y, flag);
    }
  }
  bool ok = true;
  uint2* out = reinterpret_cast<uint2*>(a.out[a.rank]);
  for (u64 i = tid0; i < npk; i += gthreads) {
    uint2 acc = make_uint2(0, 0);
    for (u32 p = 0; p < a.nranks; ++p) {  // rank order
      const uint2 v =
          (p == a.rank) ? pre8<Op>(a, *reinterpret_cast<const uint2*>(in + a.rank * cb + i * 8))
                        : ll_wait(a, ll_slot(a, a.rank, p, parity) + i * 16, flag, ok);
      if (p == 0) {
        acc = v;
      } else {
        acc = add8<Op>(acc, v);
      }
    }
    out[i] = fin8<Op>(a, acc);
  }
}

#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_reducescatter_ll_f16(CollArgs a) { reducescatter_ll<OpF16>(a); }
extern "C" __global__ void commhal_coll_reducescatter_ll_bf16(CollArgs a) { reducescatter_ll<OpBF16>(a); }
extern "C" __global__ void commhal_coll_reducescatter_ll_f32(CollArgs a) { reducescatter_ll<OpF32>(a); }

// All-gather, LL: a.count = bytes per rank, a multiple of 8 (host checks).
extern "C" __global__ void commhal_coll_allgather_ll(CollArgs a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u64 bytes = a.count;
  const u64 npk = bytes / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const uint2* src = reinterpret_cast<const uint2*>(a.in[a.rank]);
  u8* out = reinterpret_cast<u8*>(a.out[a.rank]);
  uint2* own = reinterpret_cast<uint2*>(out + (u64)a.rank * bytes);
  for (u64 i = tid0; i < npk; i += gthreads) {
    const uint2 v = src[i];
    for (u32 p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      store_volatile_v4u32(ll_slot(a, p, a.rank, parity) + i * 16, v.x, flag, v.y, flag);
    }
    if (reinterpret_cast<const void*>(own) != reinterpret_cast<const void*>(src)) own[i] = v;
  }
  bool ok = true;
  for (u64 i = tid0; i < npk; i += gthreads) {
    for (u32 p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      reinterpret_cast<uint2*>(out + (u64)p * bytes)[i] =
          ll_wait(a, ll_slot(a, a.rank, p, parity) + i * 16, flag, ok);
    }
  }
}
#endif  // !COLL_RED_OP

// ---------------------------------------------------------------------------------
// Push all-reduce (large sizes): every remote access is a store. Staging area of rank p:
// [sender][stage_slot_bytes], slot >= ceil(nvec / n) * 16. Block b moves the same
// chunk-relative vector indices j in both phases on every rank, so the MID barrier
// between block b of the sender and block b of the owner orders exactly the data block
// b of the owner then reads. The tail (bytes % 16) is reduced by the last rank reading
// the peers' inputs directly (as in the two-shot kernel).
template <typename Op>
COMMHAL_DEVICE void allreduce_push(const CollArgs& a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u32 n = a.nranks;
  const u64 bytes = a.count * Op::ELEM;
  const u64 nvec = bytes / 16;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const v16* in = reinterpret_cast<const v16*>(a.in[a.rank]);
  // phase 1: chunk p of my input -> rank p's staging slot [me]
  const u64 maxlen = (nvec + n - 1) / n;
  u64 pvb[COLL_MAX_RANKS], plen[COLL_MAX_RANKS];
  v16* pdst[COLL_MAX_RANKS];
#pragma unroll
  for (u32 k = 1; k < COLL_MAX_RANKS; ++k) {
    if (k < n) {
      const u32 p = (a.rank + k) % n;
      u64 b, x;
      partition(nvec, n, p, b, x);
      pvb[k] = b;
      plen[k] = x - b;
      pdst[k] = reinterpret_cast<v16*>(a.stage[p] + (u64)a.rank * a.stage_slot_bytes);
    }
  }
  for (u64 j = tid0; j < maxlen; j += gthreads) {
#pragma unroll
    for (u32 k = 1; k < COLL_MAX_RANKS; ++k) {
      if (k < n && j < plen[k]) pdst[k][j] = in[pvb[k] + j];
    }
  }
  block_barrier(a, COLL_OFF_MID_FLAGS, e);
  // phase 2: reduce my chunk (local reads), store to every output
  u64 vb, ve;
  partition(nvec, n, a.rank, vb, ve);
  for (u64 j = tid0; vb + j < ve; j += gthreads) {
    const v16 acc = fin16<Op>(a, sum_staged<Op>(a, in + vb, j));
#pragma unroll
    for (u32 k = 0; k < COLL_MAX_RANKS; ++k) {
      if (k < n) reinterpret_cast<v16*>(a.out[(a.rank + k) % n])[vb + j] = acc;
    }
  }
  if (a.rank == n - 1 && nvec * 16 < bytes) {
    reduce_elems<Op>(a, 0, nvec * 16 / Op::ELEM, a.count, 0, true);
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}

// Push reduce-scatter (large sizes): a.count elements per rank, count * elem % 16 == 0
// and a staging area (host checks). Every remote access is a store, as in the push
// all-reduce's first phase: chunk p of this rank's input -> rank p's staging slot
// [rank]; MID barrier (block b of the sender and block b of the owner handle the same
// chunk-relative vector indices, so it orders exactly what block b then reads); then
// reduce the own chunk from the local input and the local staging, in rank order, into
// the own output. No END barrier: after the MID barrier nothing here is read or written
// remotely — a rank's output is written by itself only, its input read by itself only,
// and a peer writes this rank's staging again only after passing the next launch's
// START barrier, i.e. after this kernel completed on this rank.
//   In place (input = output, output = output + rank * chunk): the own chunk is read
//   and then written by the same thread.
template <typename Op>
COMMHAL_DEVICE void reducescatter_push(const CollArgs& a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u32 n = a.nranks;
  const u64 nvec = a.count * Op::ELEM / 16;  // vectors per chunk
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const v16* in = reinterpret_cast<const v16*>(a.in[a.rank]);
  const v16* psrc[COLL_MAX_RANKS];
  v16* pdst[COLL_MAX_RANKS];
#pragma unroll
  for (u32 k = 1; k < COLL_MAX_RANKS; ++k) {
    if (k < n) {
      const u32 p = (a.rank + k) % n;
      psrc[k] = in + (u64)p * nvec;
      pdst[k] = reinterpret_cast<v16*>(a.stage[p] + (u64)a.rank * a.stage_slot_bytes);
    }
  }
  for (u64 j = tid0; j < nvec; j += gthreads) {
#pragma unroll
    for (u32 k = 1; k < COLL_MAX_RANKS; ++k) {
      if (k < n) pdst[k][j] = psrc[k][j];
    }
  }
  block_barrier(a, COLL_OFF_MID_FLAGS, e);
  const v16* own = in + (u64)a.rank * nvec;
  v16* out = reinterpret_cast<v16*>(a.out[a.rank]);
  for (u64 j = tid0; j < nvec; j += gthreads) {
    const v16 acc = fin16<Op>(a, sum_staged<Op>(a, own, j));
    out[j] = acc;
  }
}

#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_reducescatter_push_f16(CollArgs a) { reducescatter_push<OpF16>(a); }
extern "C" __global__ void commhal_coll_reducescatter_push_bf16(CollArgs a) { reducescatter_push<OpBF16>(a); }
extern "C" __global__ void commhal_coll_reducescatter_push_f32(CollArgs a) { reducescatter_push<OpF32>(a); }

extern "C" __global__ void commhal_coll_allreduce_push_f16(CollArgs a) { allreduce_push<OpF16>(a); }
extern "C" __global__ void commhal_coll_allreduce_push_bf16(CollArgs a) { allreduce_push<OpBF16>(a); }
extern "C" __global__ void commhal_coll_allreduce_push_f32(CollArgs a) { allreduce_push<OpF32>(a); }
#endif  // !COLL_RED_OP

// ---------------------------------------------------------------------------------
// Broadcast, reduce, all-to-all, send/recv. Every kernel below runs between a START and
// an END block barrier (same protocol as above; every rank launches the same grid, which
// the host's plan derives from the collective, the size and the rank count only). LL is
// not used for these: a broadcast's / reduce's / ring's sender never waits on its
// receivers, so it could run two launches ahead and overwrite a parity slot the owner
// has not read yet (the all-gather / all-reduce LL argument needs every rank to wait on
// every other rank in every launch).

// Root of a broadcast / reduce, as the host passed it.
COMMHAL_DEVICE u32 coll_root(const CollArgs& a) { return a.root; }

// Broadcast, direct: a.count = bytes. The root stores its input a.in[root] into every
// output (its own skipped when in place: same address); the other ranks only take part
// in the barriers. The root's egress is (n-1) x bytes, so the host uses this for small
// sizes and for 2 ranks (where it is the only transfer anyway).
//   2 ranks, root 0: rank 0 stores out[0] (unless in place) and out[1].
//   4 ranks, root 2: rank 2 stores, in rotation k = 0..3, p = (2+k)%4 = 2, 3, 0, 1.
// END barrier: block b of every peer waits for block b of the root, which made its
// grid-stride slice of the stores before it signalled; all blocks cover all bytes.
#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_broadcast(CollArgs a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u32 root = coll_root(a);
  if (a.rank == root) {
    const u64 bytes = a.count;
    const u64 src = a.in[root];
    bool aligned = (bytes % 16) == 0 && (src % 16) == 0;
    for (u32 p = 0; p < a.nranks; ++p) aligned = aligned && (a.out[p] % 16) == 0;
    const u64 gthreads = (u64)gridDim.x * blockDim.x;
    const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (aligned) {
      const u64 nvec = bytes / 16;
      for (u64 v = tid0; v < nvec; v += gthreads) {
        const v16 x = reinterpret_cast<const v16*>(src)[v];
        for (u32 k = 0; k < a.nranks; ++k) {
          const u32 p = (root + k) % a.nranks;
          if (a.out[p] == src) continue;
          reinterpret_cast<v16*>(a.out[p])[v] = x;
        }
      }
    } else {
      for (u32 p = 0; p < a.nranks; ++p) {
        if (a.out[p] == src) continue;
        copy_cooperative(reinterpret_cast<void*>(a.out[p]), reinterpret_cast<const void*>(src),
                         bytes, (u32)tid0, (u32)gthreads);
      }
    }
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}

// Broadcast, pull + forward (host: nranks >= 3, every buffer 16-byte aligned — the
// VMM bases are): a.count = bytes, nvec = bytes / 16 whole vectors split over the
// m = n-1 non-roots; the k-th non-root is rank (root + 1 + k) % n, so rank r's chunk
// index is k = (r + n - root - 1) % n (mirrored by layout::bcast_chunk_index).
//   root: copies its input into its own output (local) unless in place, and the tail
//     bytes (bytes % 16) into every output. It sends nothing: the others read.
//   non-root with chunk k: loads chunk k from the ROOT's input (remote loads, two
//     vectors in flight per thread) and stores it into its own output and into every
//     other non-root's output.
// One phase between the START and END barriers (the earlier version pushed chunks from
// the root, then forwarded them after a MID barrier: two serial phases, 0.54 of NCCL at
// 1 GiB on 4 GPUs). Traffic: root egress = bytes (its input read once in total);
// non-root ingress = bytes / m (from the root) + (m-1)/m x bytes (from the others),
// egress (m-1)/m x bytes; every link carries at most `bytes`, all at the same time.
// Ordering: START — the root's input is written and every output is free. END — block
// b of rank q waits for block b of every peer, which made its slice of the stores into
// q's output (and of the loads from the root's input) before it signalled; all blocks
// together cover every byte, so when q's kernel completes its output is final and the
// root's input is no longer read.
//   4 ranks, root 2: m = 3; k = 0 -> rank 3, k = 1 -> rank 0, k = 2 -> rank 1;
//     rank 3: k = (3 + 4 - 2 - 1) % 4 = 0, rank 0: (0 + 1) % 4 = 1, rank 1: 2.
//     Rank 3 stores chunk 0 into out[3], out[0], out[1] (2 = root: skipped).
//   3 ranks, root 0: m = 2; rank 1 gets chunk 0, rank 2 chunk 1; each stores its chunk
//     into both non-root outputs.
extern "C" __global__ void commhal_coll_broadcast_sf(CollArgs a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u32 n = a.nranks;
  const u32 m = n - 1;  // >= 2 (host)
  const u32 root = coll_root(a);
  const u64 bytes = a.count;
  const u64 nvec = bytes / 16;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 src = a.in[root];
  if (a.rank == root) {
    if (a.out[root] != src) {
      const v16* s = reinterpret_cast<const v16*>(src);
      v16* own = reinterpret_cast<v16*>(a.out[root]);
      for (u64 v = tid0; v < nvec; v += gthreads) own[v] = s[v];
    }
    for (u64 i = nvec * 16 + tid0; i < bytes; i += gthreads) {
      const u8 c = reinterpret_cast<const u8*>(src)[i];
      for (u32 p = 0; p < n; ++p) {
        if (a.out[p] != src) reinterpret_cast<u8*>(a.out[p])[i] = c;
      }
    }
  } else {
    const u32 k = (a.rank + n - root - 1) % n;
    u64 b, x;
    partition(nvec, m, k, b, x);
    const v16* s = reinterpret_cast<const v16*>(src) + b;
    // destination q = the non-root with chunk (k + q) % m: q = 0 is this rank's own
    // output, then the other non-roots in rotation (constant indices: registers)
    v16* dst[COLL_MAX_RANKS];
#pragma unroll
    for (u32 q = 0; q < COLL_MAX_RANKS; ++q) {
      if (q < m) dst[q] = reinterpret_cast<v16*>(a.out[(root + 1 + (k + q) % m) % n]) + b;
    }
    const u64 len = x - b;
    u64 j = tid0;
    for (; j + gthreads < len; j += 2 * gthreads) {
      const v16 v0 = s[j];
      const v16 v1 = s[j + gthreads];
#pragma unroll
      for (u32 q = 0; q < COLL_MAX_RANKS; ++q) {
        if (q < m) {
          dst[q][j] = v0;
          dst[q][j + gthreads] = v1;
        }
      }
    }
    if (j < len) {
      const v16 v0 = s[j];
#pragma unroll
      for (u32 q = 0; q < COLL_MAX_RANKS; ++q) {
        if (q < m) dst[q][j] = v0;
      }
    }
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}
#endif  // !COLL_RED_OP

// Reduce (sum) to the root: a.count elements. The workers (layout::reduce_worker)
// split the whole 16-byte vectors: worker k reduces chunk k (reading that range of
// every input, in rank order) and stores it into the ROOT's output only; the tail
// (bytes % 16) belongs to the last worker.
//   >= 3 ranks: the workers are the m = n-1 non-roots (worker k = rank (root+1+k) % n,
//     as for the broadcast) and the root only takes part in the barriers. Every link
//     then carries at most `bytes`: root ingress = the workers' stores (bytes), root
//     egress = its input read once in total (bytes), worker ingress = (n-1) x bytes/m
//     = bytes. (With the root as a worker too, its ingress would be (n-1)/n x bytes of
//     loads plus (n-1)/n x bytes of stores = 1.5 x bytes on 4 ranks: 0.64 of NCCL's
//     speed at 1 GiB.)
//   2 ranks: both ranks are workers (m = 2; worker k = rank k): the root's ingress is
//     then half its input in loads plus half in stores, = bytes either way.
// The reduction helpers store to `out[rank]` when not storing to all, so they get a
// copy of the arguments whose out[rank] is the root's output (inputs unchanged).
// In place (inputs = outputs): a worker reads and writes the root's buffer only inside
// its own chunk, each element read and then written by the same thread.
//   4 ranks, root 1, nvec = 10: workers rank 2 (k 0), 3 (k 1), 0 (k 2);
//   partition(10, 3, k) = [0,4) [4,7) [7,10): rank 2 stores vectors 0..4 into out[1],
//   rank 3 4..7, rank 0 7..10 and, when bytes % 16 != 0, the tail elements.
//   2 ranks, root 0: rank 0 reduces the first half locally, rank 1 the second half
//   into out[0].
// END barrier: the root's block b waits for block b of every rank (their stores into
// its output); every rank's inputs stay unchanged until every rank passed it.
//   ALL (the `_all` kernels, mid sizes): every rank is a worker (m = n, worker k = rank
//     k, as with 2 ranks) — the root's ingress is then ~1.5 x bytes, but the work is
//     split n ways instead of n-1, which wins while latency, not the root's links,
//     bounds the time.
template <typename Op, bool ALL>
COMMHAL_DEVICE void reduce_root(const CollArgs& a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u32 n = a.nranks;
  const u32 root = coll_root(a);
  const bool root_works = ALL || n < 3;
  if (root_works || a.rank != root) {
    const u32 m = root_works ? n : n - 1;
    const u32 k = root_works ? a.rank : (a.rank + n - root - 1) % n;
    const u64 bytes = a.count * Op::ELEM;
    const u64 nvec = bytes / 16;
    CollArgs b = a;
    b.out[b.rank] = a.out[root];
    bool aligned = (a.out[root] % 16) == 0;
    for (u32 p = 0; p < n; ++p) aligned = aligned && (a.in[p] % 16) == 0;
    if (aligned) {
      u64 vb, ve;
      partition(nvec, m, k, vb, ve);
      reduce_vectors<Op>(b, 0, vb, ve, 0, false);
      if (k == m - 1 && nvec * 16 < bytes) {
        reduce_elems<Op>(b, 0, nvec * 16 / Op::ELEM, a.count, 0, false);
      }
    } else {
      u64 eb, ee;
      partition(a.count, m, k, eb, ee);
      reduce_elems<Op>(b, 0, eb, ee, 0, false);
    }
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}

// ---------------------------------------------------------------------------------
// Broadcast and reduce for small sizes, LL16, no barrier. One side only sends (the
// broadcast root; the reduce non-roots), so nothing would stop it running two launches
// ahead of a receiver and overwriting a parity slot not yet read: before sending in
// launch e, a sender waits (thread p of every block, once) until the receiver p has
// completed launch e-2 — the last launch that used this parity's slot — by reading p's
// done-epoch word, which p's launch e-1 sets at its start. Usually long true already.
// (This never waits on a launch the sender's own progress holds back: p's launch e-1
// needs only launches up to e-1 of its peers, and the sender is at e.)

// Bounded wait until rank p has completed launch `e` or a later one: p's word in this
// rank's scratch (p stores it there, relaxed, after a kernel boundary, which orders
// every access of the launches before it; the acquire here orders this rank's later
// writes into p after them). A local load: no round trip to p.
COMMHAL_DEVICE void wait_peer_done(const CollArgs& a, u32 p, u64 e) {
  wait_flag(a, reinterpret_cast<const u64*>(a.scratch[a.rank] + COLL_OFF_DONE_EPOCHS) + p, e);
}

// The whole block waits until rank p has completed launch e - back (thread 0 waits, the
// others at the barrier); nothing when there is no such launch. A sender's check that
// the packets it is about to overwrite in p were read: back = 2 for parity-halved
// slots, 1 for a single region.
COMMHAL_DEVICE void block_wait_peer_done(const CollArgs& a, u32 p, u64 e, u64 back) {
  if (e <= back) return;
  if (threadIdx.x == 0) wait_peer_done(a, p, e - back);
  __syncthreads();
}

// Broadcast, LL: a.count = bytes, a multiple of 8, at most the LL slot (host checks).
// The root stores its input as packets into slot(p, root) of every other rank (and its
// own output unless in place); every other rank waits for them and stores its output.
#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_broadcast_ll(CollArgs a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u32 root = coll_root(a);
  const u64 npk = a.count / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (a.rank == root) {
    if (e > 2) {
      if (threadIdx.x < a.nranks && threadIdx.x != root) wait_peer_done(a, threadIdx.x, e - 2);
      __syncthreads();
    }
    const uint2* src = reinterpret_cast<const uint2*>(a.in[root]);
    uint2* own = reinterpret_cast<uint2*>(a.out[root]);
    for (u64 i = tid0; i < npk; i += gthreads) {
      const uint2 v = src[i];
      for (u32 p = 0; p < a.nranks; ++p) {
        if (p == root) continue;
        store_volatile_v4u32(ll_slot(a, p, root, parity) + i * 16, v.x, flag, v.y, flag);
      }
      if (reinterpret_cast<const void*>(own) != reinterpret_cast<const void*>(src)) own[i] = v;
    }
  } else {
    bool ok = true;
    uint2* out = reinterpret_cast<uint2*>(a.out[a.rank]);
    for (u64 i = tid0; i < npk; i += gthreads)
      out[i] = ll_wait(a, ll_slot(a, a.rank, root, parity) + i * 16, flag, ok);
  }
}
#endif  // !COLL_RED_OP

// Reduce (sum), LL: a.count elements, count * elem a multiple of 8, at most the LL slot.
// Every non-root sends its input as packets into slot(root, rank); the root reduces its
// own input and the packets in rank order into its output.
template <typename Op>
COMMHAL_DEVICE void reduce_ll(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u32 root = coll_root(a);
  const u64 npk = a.count * Op::ELEM / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const uint2* in = reinterpret_cast<const uint2*>(a.in[a.rank]);
  if (a.rank != root) {
    block_wait_peer_done(a, root, e, 2);
    for (u64 i = tid0; i < npk; i += gthreads) {
      const uint2 v = pre8<Op>(a, in[i]);
      store_volatile_v4u32(ll_slot(a, root, a.rank, parity) + i * 16, v.x, flag, v.y, flag);
    }
  } else {
    bool ok = true;
    uint2* out = reinterpret_cast<uint2*>(a.out[root]);
    for (u64 i = tid0; i < npk; i += gthreads) {
      uint2 acc = make_uint2(0, 0);
      for (u32 p = 0; p < a.nranks; ++p) {  // rank order
        const uint2 v = (p == root) ? pre8<Op>(a, in[i])
                                    : ll_wait(a, ll_slot(a, root, p, parity) + i * 16, flag, ok);
        if (p == 0) {
          acc = v;
        } else {
          acc = add8<Op>(acc, v);
        }
      }
      out[i] = fin8<Op>(a, acc);
    }
  }
}

#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_reduce_ll_f16(CollArgs a) { reduce_ll<OpF16>(a); }
extern "C" __global__ void commhal_coll_reduce_ll_bf16(CollArgs a) { reduce_ll<OpBF16>(a); }
extern "C" __global__ void commhal_coll_reduce_ll_f32(CollArgs a) { reduce_ll<OpF32>(a); }

extern "C" __global__ void commhal_coll_reduce_f16(CollArgs a) { reduce_root<OpF16, false>(a); }
extern "C" __global__ void commhal_coll_reduce_bf16(CollArgs a) { reduce_root<OpBF16, false>(a); }
extern "C" __global__ void commhal_coll_reduce_f32(CollArgs a) { reduce_root<OpF32, false>(a); }
extern "C" __global__ void commhal_coll_reduce_all_f16(CollArgs a) { reduce_root<OpF16, true>(a); }
extern "C" __global__ void commhal_coll_reduce_all_bf16(CollArgs a) { reduce_root<OpBF16, true>(a); }
extern "C" __global__ void commhal_coll_reduce_all_f32(CollArgs a) { reduce_root<OpF32, true>(a); }
#endif  // !COLL_RED_OP

// ---------------------------------------------------------------------------------
// Pipelined chains for large broadcasts and reduces (see "Chains" in the header): every
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
  store_block_slots(last, e);
  store_block_slots(last + COLL_MAX_BLOCKS, geometry);
  if (!(a.flags & COLL_FLAG_CHAIN_OVERLAP) || s_last[0] + 1 != e) {
    block_barrier(a, COLL_OFF_START_FLAGS, e);
    return COLL_CHAIN_FULL;
  }
  const bool credits =
      (a.flags & COLL_FLAG_CHAIN_CREDITS) && geometry != 0 && s_last[1] == geometry;
  const u32 n = a.nranks, next = (a.rank + 1) % n, prev = (a.rank + n - 1) % n;
  if (threadIdx.x == 0 && prev != a.rank) {
    store_release(flag_slot(a, prev, COLL_OFF_START_FLAGS, a.rank), e);
  }
  // another warp than the one that posted, where the block has one
  if (!credits && threadIdx.x == (blockDim.x > 32 ? 32u : 0u) && stores && next != a.rank) {
    wait_flag(a, flag_slot(a, a.rank, COLL_OFF_START_FLAGS, next), e);
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
  u64 t0 = 0;
  for (u32 i = 0;; ++i) {
    if (load_acquire(credit) >= want || load_acquire(start) >= e) return true;
    if (spin_expired(a, i, t0, COLL_ERR_WAIT_TIMEOUT)) return false;
  }
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
    if (from_prev) ok = wait_flag(a, chain_flag(a, a.rank, prev, tag), tag);
    if (ok && credit) ok = wait_credit(a, next, tag);
    if (!ok && next != a.rank) set_peer_error(a, next, COLL_ERR_WAIT_TIMEOUT);
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
      store_release(flag, tag);
    } else if (credit) {
      store_release(cred, tag);
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

// Broadcast, chain: a.count = bytes. Position of rank r: (r - root) mod n; the root is
// position 0 and reads its input; every rank but the last stores the chunk into the
// next rank, and every rank but the root gets it from the previous one.
//   Direct (no COLL_FLAG_BCAST_STAGED): the chunk goes into the next rank's output,
//   which that rank then reads to forward it; the root also fills its own output
//   (unless in place).
//   Staged (COLL_FLAG_BCAST_STAGED, host: staging of at least `bytes`): the chunk goes
//   into the next rank's staging, which that rank copies into its own output and
//   forwards. One more local store per byte, but no rank ever stores into a peer's
//   output, so back-to-back broadcasts stream on with credits like the reduce chain.
//   4 ranks, root 2: 2 -> 3 -> 0 -> 1; rank 1 (position 3) only waits.
#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_broadcast_chain(CollArgs a) {
  const u64 e = coll_begin(a);
  const u32 n = a.nranks;
  const u32 root = coll_root(a);
  const u32 pos = (a.rank + n - root) % n;
  const bool staged = a.flags & COLL_FLAG_BCAST_STAGED;
  const u32 next = (a.rank + 1) % n, prev = (a.rank + n - 1) % n;
  const u64 nvec = a.count / 16;
  const u64 cv = (u64)blockDim.x * chain_unroll(a);
  const bool last = pos == n - 1;
  const bool credits =
      chain_start(a, e, !last, staged ? chain_geometry(nvec, cv, true) : 0) == COLL_CHAIN_CREDITS &&
      !last;
  const v16* src = reinterpret_cast<const v16*>(pos == 0   ? a.in[root]
                                                : staged ? a.stage[a.rank]
                                                         : a.out[a.rank]);
  v16* own = reinterpret_cast<v16*>(a.out[a.rank]);
  v16* dst = reinterpret_cast<v16*>(staged ? a.stage[next] : a.out[next]);
  const bool copy_own = pos == 0 ? a.in[root] != a.out[root] : staged;
  bool ok = true;
  u32 k = 0;
  for (u64 c = blockIdx.x; c * cv < nvec; c += gridDim.x, ++k) {
    const u64 tag = chain_tag(e, k);
    if (pos > 0 || credits) chain_wait(a, prev, next, tag, ok, pos > 0, credits);
    if (last && !copy_own) continue;
    chunk_for(
        a, c, nvec, [&](u64 v) { return src[v]; },
        [&](u64 v, v16 x) {
          if (!last) dst[v] = x;
          if (copy_own) own[v] = x;
        });
    // staged: a rank past the root consumed this round's staging, credit the previous
    chain_signal(a, next, tag, ok, !last, staged && pos > 0);
  }
}
#endif  // !COLL_RED_OP

// Reduce (sum), chain: a.count elements, bytes % 16 == 0, staging area of at least
// `bytes` on every rank (host: stage_slot_bytes * nranks >= capacity). Position of rank
// r: (r - root - 1) mod n; the root is last. Position 0 stores its input into the next
// rank's staging; a middle rank adds its input to the partial sum in its own staging and
// stores that into the next rank's staging; the root adds its input to its staging into
// its output. Sum order: position 0 first (exact for the checker's data; a reduce has
// one result, so no cross-rank agreement is needed).
//   4 ranks, root 1: 2 -> 3 -> 0 -> 1. 2 ranks, root 0: 1 -> 0.
// In place (inputs = outputs): the root reads and then writes each of its vectors in the
// same thread; the other ranks only read theirs.
template <typename Op>
COMMHAL_DEVICE void reduce_chain(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 n = a.nranks;
  const u32 root = coll_root(a);
  const u32 pos = (a.rank + n - root - 1) % n;
  const u32 next = (a.rank + 1) % n, prev = (a.rank + n - 1) % n;
  const u64 nvec = a.count * Op::ELEM / 16;
  const u64 cv = (u64)blockDim.x * chain_unroll(a);
  const bool credits =
      chain_start(a, e, pos != n - 1, chain_geometry(nvec, cv, false)) == COLL_CHAIN_CREDITS &&
      pos != n - 1;
  const v16* in = reinterpret_cast<const v16*>(a.in[a.rank]);
  const v16* partial = reinterpret_cast<const v16*>(a.stage[a.rank]);
  v16* dst = reinterpret_cast<v16*>(pos == n - 1 ? a.out[a.rank] : a.stage[next]);
  bool ok = true;
  u32 k = 0;
  for (u64 c = blockIdx.x; c * cv < nvec; c += gridDim.x, ++k) {
    const u64 tag = chain_tag(e, k);
    if (pos > 0 || credits) chain_wait(a, prev, next, tag, ok, pos > 0, credits);
    chunk_for(
        a, c, nvec,
        [&](u64 v) {
          const v16 x = pos > 0 ? add16<Op>(partial[v], pre16<Op>(a, in[v])) : pre16<Op>(a, in[v]);
          return pos == n - 1 ? fin16<Op>(a, x) : x;
        },
        [&](u64 v, v16 x) { dst[v] = x; });
    // a rank past position 0 consumed this round's staging: credit the previous rank
    chain_signal(a, next, tag, ok, pos < n - 1, pos > 0);
  }
}

#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_reduce_chain_f16(CollArgs a) { reduce_chain<OpF16>(a); }
extern "C" __global__ void commhal_coll_reduce_chain_bf16(CollArgs a) { reduce_chain<OpBF16>(a); }
extern "C" __global__ void commhal_coll_reduce_chain_f32(CollArgs a) { reduce_chain<OpF32>(a); }
#endif  // !COLL_RED_OP

// ---------------------------------------------------------------------------------
// LL63 chains for broadcasts and reduces above the LL16 sizes (up to the tuned LL63
// maximum, 1 GiB for reduce on 4 x H200): the chains' ranks (r -> r+1) with
// the data in packets instead of behind round flags, so no rank ever waits on a fence
// and no barrier runs. A packet word is 64 bits, stored and loaded as one 64-bit element
// (st/ld .v2.u64: PTX makes 64-bit scalar accesses single-copy atomic): 63 data bits and
// a valid bit (bit 63) that a receiver's cleared word never has, so a receiver that sees
// the bit in a word sees that word's data. The data words' own top bits travel together
// in the last two words of every second row, so 63/64 of the bytes on the wire are data
// (LL16: 1/2; the former LL56, a flag byte per word: 7/8; NCCL's LL128 gets 15/16 from
// a 128-byte store atomicity that PTX does not promise).
//   Geometry. Data in 16-byte vectors, packets 16 bytes (two words), a row is one warp
//   access: 32 lanes x 16 bytes = 512 consecutive bytes of packets. A row pair carries
//   63 data vectors: row 0 has vectors 0..31 (lane l: vector l), row 1 vectors 32..62
//   (lane l < 31: vector 32 + l), and lane 31 of row 1 holds the top bits: its word 0
//   bit l = top bit of row 0 lane l's word 0, bit 32 + l = row 1 lane l's word 0; its
//   word 1 the same for the lanes' word 1 (ballots). Warp tile t (of 32 lanes) is 4 row
//   pairs: data vectors [252 t, 252 t + 252), packets [256 t, 256 t + 256), 4 KiB. A
//   warp takes a tile whole (the ballots need every lane); vectors past the end are sent
//   as zeros and never stored. Tile t belongs to warp t mod W (W warps in the grid) on
//   every rank.
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
#define COLL_LL63_TILE_VECS 252
#define COLL_LL63_TILE_PKTS 256
#define COLL_LL63_VALID 0x8000000000000000ull
#define COLL_FULL_WARP 0xFFFFFFFFu

// The LL63 region of rank `owner`.
COMMHAL_DEVICE u8* ll63_region(const CollArgs& a, u32 owner) {
  return reinterpret_cast<u8*>(a.scratch[owner] + COLL_OFF_LL +
                               2 * COLL_MAX_RANKS * a.ll_slot_bytes);
}

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
    const u32 b00 = __ballot_sync(COLL_FULL_WARP, (r0[0] >> 63) != 0);
    const u32 b01 = __ballot_sync(COLL_FULL_WARP, (r0[1] >> 63) != 0);
    const u32 b10 = __ballot_sync(COLL_FULL_WARP, lane < 31 && (r1[0] >> 63) != 0);
    const u32 b11 = __ballot_sync(COLL_FULL_WARP, lane < 31 && (r1[1] >> 63) != 0);
    r0[0] |= COLL_LL63_VALID;
    r0[1] |= COLL_LL63_VALID;
    if (lane < 31) {
      r1[0] |= COLL_LL63_VALID;
      r1[1] |= COLL_LL63_VALID;
    } else {  // b10, b11 have no bit 31 (lane 31 of row 1 has no data)
      r1[0] = (u64)b00 | ((u64)b10 << 32) | COLL_LL63_VALID;
      r1[1] = (u64)b01 | ((u64)b11 << 32) | COLL_LL63_VALID;
    }
  }
}

// Packets -> data words, in place (the inverse of ll63_pack; the whole warp, converged).
COMMHAL_DEVICE void ll63_unpack(u64 (&w)[16], u32 lane) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    u64* r0 = &w[4 * q];
    u64* r1 = &w[4 * q + 2];
    const u64 t0 = __shfl_sync(COLL_FULL_WARP, r1[0], 31);
    const u64 t1 = __shfl_sync(COLL_FULL_WARP, r1[1], 31);
    r0[0] = (r0[0] & ~COLL_LL63_VALID) | (((t0 >> lane) & 1) << 63);
    r0[1] = (r0[1] & ~COLL_LL63_VALID) | (((t1 >> lane) & 1) << 63);
    if (lane < 31) {
      r1[0] = (r1[0] & ~COLL_LL63_VALID) | (((t0 >> (32 + lane)) & 1) << 63);
      r1[1] = (r1[1] & ~COLL_LL63_VALID) | (((t1 >> (32 + lane)) & 1) << 63);
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
// The warp's verdict: false = some lane gave up (error stored here, and in the next
// rank's error word when `next` is another rank).
template <bool EAGER = false>
COMMHAL_DEVICE bool ll63_recv(const CollArgs& a, const u8* p, u32 next, u64 (&w)[16]) {
  u32 missing = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) load_volatile_v2u64(p + i * 512, w[2 * i], w[2 * i + 1]);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if ((w[2 * i] & w[2 * i + 1] & COLL_LL63_VALID) == 0) missing |= 1u << i;
  }
  u64 t0 = 0;
  bool ok = true;
  for (u32 s = 0; missing != 0; ++s) {
    if (spin_expired(a, s, t0, COLL_ERR_PACKET_TIMEOUT)) {
      if (next != a.rank) set_peer_error(a, next, COLL_ERR_PACKET_TIMEOUT);
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
        if ((was & (1u << i)) && (w[2 * i] & w[2 * i + 1] & COLL_LL63_VALID) != 0)
          missing &= ~(1u << i);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (missing & (1u << i)) {
          load_volatile_v2u64(p + i * 512, w[2 * i], w[2 * i + 1]);
          if ((w[2 * i] & w[2 * i + 1] & COLL_LL63_VALID) != 0) missing &= ~(1u << i);
        }
      }
    }
  }
  return __all_sync(COLL_FULL_WARP, ok);
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
  return (nvec + COLL_LL63_TILE_VECS - 1) / COLL_LL63_TILE_VECS;
}

// Whether a transfer of `nvec` vectors goes through the small region (one parity half
// holds it), the same answer on every rank.
COMMHAL_DEVICE bool ll63_small(const CollArgs& a, u64 nvec) {
  return ll63_tile_count(nvec) * COLL_LL63_TILE_PKTS * 16 <= a.ll63_small_half;
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

// Every warp tile of `nvec` vectors, whole warps: body(v0, pk, lane) with the tile's
// first data vector v0 and this lane's first packet's byte offset pk in a region; body
// returns false to stop (a failed wait: the warp's verdict, so the warp stays converged).
template <typename Body>
COMMHAL_DEVICE void ll63_tiles(u64 nvec, Body body) {
  const u64 tiles = ll63_tile_count(nvec);
  const u32 lane = threadIdx.x % 32;
  for (u64 t = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32; t < tiles;
       t += (u64)gridDim.x * blockDim.x / 32) {
    if (!body(t * COLL_LL63_TILE_VECS, (t * COLL_LL63_TILE_PKTS + lane) * 16, lane)) return;
  }
}

// Broadcast, LL63 chain: a.count = bytes, bytes % 16 == 0 (host), blockDim a multiple of
// 32. Position (r - root) mod n as in broadcast_chain: the root packs its input and
// sends; a middle rank forwards the packets unchanged, then unpacks them into its
// output; the last rank only unpacks. The root copies its input into its own output
// unless in place.
//   4 ranks, root 2: 2 -> 3 -> 0 -> 1.
#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_broadcast_ll63(CollArgs a) {
  const u64 e = coll_begin(a);
  const u32 n = a.nranks;
  const u32 root = coll_root(a);
  const u32 pos = (a.rank + n - root) % n;
  const u32 next = (a.rank + 1) % n;
  const bool last = pos == n - 1;
  const u64 nvec = a.count / 16;
  const bool small = ll63_small(a, nvec);
  if (!last) ll63_next_free(a, next, e, small);
  const v16* src = reinterpret_cast<const v16*>(a.in[root]);
  v16* out = reinterpret_cast<v16*>(a.out[a.rank]);
  const bool copy_own = pos == 0 && a.in[root] != a.out[root];
  u8* mine = ll63_region_for(a, a.rank, small, e);
  u8* theirs = ll63_region_for(a, next, small, e);
  ll63_tiles(nvec, [&](u64 v0, u64 pk, u32 lane) {
    u64 w[16];
    if (pos == 0) {
      ll63_load(src, v0, lane, nvec, w);
      if (copy_own) ll63_store(out, v0, lane, nvec, w);
      ll63_pack(w, lane);
      ll63_send(theirs + pk, w);
      return true;
    }
    const u32 down = last ? a.rank : next;
    if (!(small ? ll63_recv<true>(a, mine + pk, down, w) : ll63_recv(a, mine + pk, down, w)))
      return false;
    if (!last) ll63_send(theirs + pk, w);
    ll63_clear(mine + pk);
    ll63_unpack(w, lane);
    ll63_store(out, v0, lane, nvec, w);
    return true;
  });
}
#endif  // !COLL_RED_OP

// Reduce (sum), LL63 chain: a.count elements, bytes % 16 == 0 (host). Position
// (r - root - 1) mod n as in reduce_chain (the root is last, the sum starts at position
// 0): position 0 packs its input and sends; a middle rank adds its input to the partial
// sum it unpacked and sends that; the root adds its input and stores its output.
//   4 ranks, root 1: 2 -> 3 -> 0 -> 1. 2 ranks, root 0: 1 -> 0.
// In place (inputs = outputs): the root reads and then writes each of its vectors in the
// same thread; the other ranks only read theirs.
template <typename Op>
COMMHAL_DEVICE void reduce_ll63(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 n = a.nranks;
  const u32 root = coll_root(a);
  const u32 pos = (a.rank + n - root - 1) % n;
  const u32 next = (a.rank + 1) % n;
  const bool last = pos == n - 1;
  const u64 nvec = a.count * Op::ELEM / 16;
  const bool small = ll63_small(a, nvec);
  if (!last) ll63_next_free(a, next, e, small);
  const v16* in = reinterpret_cast<const v16*>(a.in[a.rank]);
  v16* out = reinterpret_cast<v16*>(a.out[a.rank]);
  u8* mine = ll63_region_for(a, a.rank, small, e);
  u8* theirs = ll63_region_for(a, next, small, e);
  ll63_tiles(nvec, [&](u64 v0, u64 pk, u32 lane) {
    u64 d[16];
    ll63_load(in, v0, lane, nvec, d);  // before the wait: its latency overlaps the packets'
    if (Op::PRE) {
#pragma unroll
      for (int s = 0; s < 8; ++s) ll63_set(d, s, pre16<Op>(a, ll63_vec(d, s)));
    }
    if (pos > 0) {
      u64 w[16];
      const u32 down = last ? a.rank : next;
      if (!(small ? ll63_recv<true>(a, mine + pk, down, w) : ll63_recv(a, mine + pk, down, w)))
        return false;
      ll63_clear(mine + pk);
      ll63_unpack(w, lane);
#pragma unroll
      for (int s = 0; s < 8; ++s) ll63_set(d, s, add16<Op>(ll63_vec(w, s), ll63_vec(d, s)));
    }
    if (!last) {
      ll63_pack(d, lane);
      ll63_send(theirs + pk, d);
    } else {
      if (Op::FIN) {
#pragma unroll
        for (int s = 0; s < 8; ++s) ll63_set(d, s, fin16<Op>(a, ll63_vec(d, s)));
      }
      ll63_store(out, v0, lane, nvec, d);
    }
    return true;
  });
}

#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_reduce_ll63_f16(CollArgs a) { reduce_ll63<OpF16>(a); }
extern "C" __global__ void commhal_coll_reduce_ll63_bf16(CollArgs a) { reduce_ll63<OpBF16>(a); }
extern "C" __global__ void commhal_coll_reduce_ll63_f32(CollArgs a) { reduce_ll63<OpF32>(a); }
#endif  // !COLL_RED_OP

// ---------------------------------------------------------------------------------
// All-reduce over all pairs with LL63 packets (mid sizes, above the LL16 one-shot: the
// barrier two-shot's traffic with no barrier and no fence). a.count elements, bytes % 16
// == 0, 16-byte aligned buffers (host). The vectors split into n chunks (partition);
// rank c reduces chunk c:
//   scatter  rank r packs chunk p of its input and sends it to rank p, every p != r;
//   reduce   rank r waits for chunk r from every peer, adds them and its own in rank
//            order, stores the sum into its output and sends it packed to every peer;
//   gather   rank r waits for every peer p's sum of chunk p and stores it.
// Each rank sends 2 (n - 1) / n of the data (x 64/63), the LL16 one-shot (n - 1) x 2.
// Packets land in half e mod 2 of the receiver's LL63 small region, as the small LL63
// chains use it: 2 (n - 1) slots of T tiles (T: the tiles of the largest chunk); sender
// s's scatter slot in receiver q is k = (s - q - 1) mod n, its gather slot n - 1 + k. The
// host checks that they fit a half. Before its first send a block waits until every peer
// completed launch e - 2, the last one that used this half (usually long true); the
// receiver clears every packet it read, so the half is all zeros after each launch.
// Work: (2n - 1) T warp items, the scatter's (n - 1) T, then the reduce's T, then the
// gather's (n - 1) T; warp w takes items w, w + W, ... in that order (W warps in the
// grid; the host gives one warp per item where the grid allows: the phases then run on
// different warps at once, and a warp's latency is one item's). A warp finished its
// scatter items before it waits for anything, a reduce waits only for scatters, a gather
// only for reduces, and every block is resident (host: blocks <= SMs): no wait cycle.
// In place: rank r overwrites chunk p of its buffer in the gather only after p's sum
// arrived, which p sent after it received this rank's scatter of the same tile.
template <typename Op>
COMMHAL_DEVICE void allreduce_pairs_ll63(const CollArgs& a) {
  const u64 e = coll_begin(a);
  const u32 n = a.nranks, r = a.rank;
  const u64 nvec = a.count * Op::ELEM / 16;
  const u64 T = ll63_tile_count((nvec + n - 1) / n);
  const u64 slot = T * COLL_LL63_TILE_PKTS * 16;
  if (e > 2) {
    if (threadIdx.x < n && threadIdx.x != r) wait_peer_done(a, threadIdx.x, e - 2);
    __syncthreads();
  }
  const v16* in = reinterpret_cast<const v16*>(a.in[r]);
  v16* out = reinterpret_cast<v16*>(a.out[r]);
  const u64 half_off = a.ll63_small_off + (e & 1) * a.ll63_small_half;
  const u32 lane = threadIdx.x % 32;
  // packet of this lane in tile t of slot k of rank q's half
  auto pkt = [&](u32 q, u64 k, u64 t) {
    return reinterpret_cast<u8*>(a.scratch[q] + half_off) + k * slot +
           (t * COLL_LL63_TILE_PKTS + lane) * 16;
  };
  const u64 S = (u64)(n - 1) * T;  // scatter items [0, S), reduce [S, S + T), gather after
  const u64 warps = (u64)gridDim.x * blockDim.x / 32;
  for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32; i < S + T + S; i += warps) {
    if (i < S || i >= S + T) {  // scatter or gather: tile t of chunk p, p != r
      const u64 j = i < S ? i : i - S - T;
      const u32 p = (r + 1 + (u32)(j / T)) % n;
      const u64 t = j % T;
      u64 cb, ce;
      partition(nvec, n, p, cb, ce);
      if (t * COLL_LL63_TILE_VECS >= ce - cb) continue;
      u64 w[16];
      if (i < S) {
        ll63_load(in + cb, t * COLL_LL63_TILE_VECS, lane, ce - cb, w);
        if (Op::PRE) {
#pragma unroll
          for (int s = 0; s < 8; ++s) ll63_set(w, s, pre16<Op>(a, ll63_vec(w, s)));
        }
        ll63_pack(w, lane);
        ll63_send(pkt(p, (r + n - p - 1) % n, t), w);
      } else {
        u8* pk = pkt(r, n - 1 + (p + n - r - 1) % n, t);
        if (!ll63_recv<true>(a, pk, r, w)) return;
        ll63_clear(pk);
        ll63_unpack(w, lane);
        ll63_store(out + cb, t * COLL_LL63_TILE_VECS, lane, ce - cb, w);
      }
      continue;
    }
    const u64 t = i - S;  // reduce: tile t of chunk r
    u64 rb, re;
    partition(nvec, n, r, rb, re);
    if (t * COLL_LL63_TILE_VECS >= re - rb) continue;
    u64 acc[16];
    for (u32 p = 0; p < n; ++p) {  // rank order: the sum every rank stores is the same
      u64 w[16];
      if (p == r) {
        ll63_load(in + rb, t * COLL_LL63_TILE_VECS, lane, re - rb, w);
        if (Op::PRE) {
#pragma unroll
          for (int s = 0; s < 8; ++s) ll63_set(w, s, pre16<Op>(a, ll63_vec(w, s)));
        }
      } else {
        u8* pk = pkt(r, (p + n - r - 1) % n, t);
        if (!ll63_recv<true>(a, pk, r, w)) return;
        ll63_clear(pk);
        ll63_unpack(w, lane);
      }
#pragma unroll
      for (int s = 0; s < 8; ++s)
        ll63_set(acc, s, p == 0 ? ll63_vec(w, s) : add16<Op>(ll63_vec(acc, s), ll63_vec(w, s)));
    }
    if (Op::FIN) {
#pragma unroll
      for (int s = 0; s < 8; ++s) ll63_set(acc, s, fin16<Op>(a, ll63_vec(acc, s)));
    }
    ll63_store(out + rb, t * COLL_LL63_TILE_VECS, lane, re - rb, acc);
    ll63_pack(acc, lane);
    for (u32 q = 0; q < n; ++q) {
      if (q != r) ll63_send(pkt(q, n - 1 + (r + n - q - 1) % n, t), acc);
    }
  }
}

#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_allreduce_ll63_f16(CollArgs a) { allreduce_pairs_ll63<OpF16>(a); }
extern "C" __global__ void commhal_coll_allreduce_ll63_bf16(CollArgs a) { allreduce_pairs_ll63<OpBF16>(a); }
extern "C" __global__ void commhal_coll_allreduce_ll63_f32(CollArgs a) { allreduce_pairs_ll63<OpF32>(a); }
#endif  // !COLL_RED_OP

// ---------------------------------------------------------------------------------
// Ring all-reduce / reduce-scatter / all-gather (large sizes): the chains' links and
// flags, with the data split into n segments. Reduce-scatter steps s = 0..n-2: rank r
// sends segment (r - s - 1) mod n — its input for s = 0, else the partial sum that
// arrived in its staging plus its input — into the next rank's staging; after the last
// step, segment r is complete on rank r (input + staging). All-gather steps t =
// 0..n-2: rank r sends segment (r - t) mod n — its own (reduced) segment for t = 0,
// else the one that arrived in its output in step t-1 — into the next rank's output.
// Step-major order: a block runs all its chunks of step s before step s+1, so while
// rank r works on chunk c of step s the previous rank is one chunk ahead in step s and
// the flag r waits for is usually raised already (with chunk-major order every step
// would wait a full hop). Every block has the same number R of rounds per step on
// every rank (chunks of cv vectors over the longest segment), so round k of this rank
// needs round k - R of the previous rank, and the flag value (e << 32) | (k + 1)
// orders it as in the chains. The last R rounds only wait (the last arrival).
//   Segment geometry (16-byte vectors): all-reduce: partition(bytes / 16, n, q) of the
//   buffer, the same offsets in input, staging and output; reduce-scatter: segment q =
//   [q, q+1) x chunk of the input and staging, the result at output offset 0;
//   all-gather: the input is segment r's data, segment q sits at q x chunk of the output.
//   4 ranks, all-reduce: rank 1 sends segments 0, 3, 2 (reduce-scatter), owns 1, then
//   sends 1, 0, 3 (all-gather) and receives 0, 3, 2.
// In place (all-reduce: input = output; reduce-scatter: output = input + r x chunk;
// all-gather: input = output + r x chunk): every input vector is read before the ring
// delivers the finished segment over it (the flags chain the read to the write), and a
// rank reads and then writes its own segment in the same thread.
// Host: n >= 2, whole 16-byte vectors, staging of >= the input bytes (all-reduce and
// reduce-scatter).
// All-reduce head (COLL_RING_AR_HEAD, 3 or more ranks, dma.rs allreduce_ring_first /
// allreduce_ring_tail): the copy engine has moved reduce-scatter step 0 (rank r's input
// segment r-1 into the next rank's staging; the stream waited for the previous rank's
// before this kernel), the head runs reduce-scatter steps 1..n-2 and the first
// all-gather step (rank r sends its finished segment r to the next rank and waits for
// segment r-1), and the copy engines then move the other n-2 all-gather steps. Every
// copy-engine step is one whole segment to one peer: the one pattern where a copy
// engine outruns SM stores, ~392 against ~366 GB/s per GPU on 4 x H200. Round k of
// this rank still pairs with round k - R of the previous rank, k counted from step 0.
#define COLL_RING_AR 0
#define COLL_RING_RS 1
#define COLL_RING_AG 2
#define COLL_RING_AR_HEAD 3
template <typename Op, int MODE>
COMMHAL_DEVICE void ring(const CollArgs& a) {
  constexpr bool AR = MODE == COLL_RING_AR || MODE == COLL_RING_AR_HEAD;
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u32 n = a.nranks, r = a.rank;
  const u32 next = (r + 1) % n, prev = (r + n - 1) % n;
  // AR: count elements; RS: count elements per rank; AG: count bytes per rank
  const u64 units = (MODE == COLL_RING_AG) ? a.count / 16 : a.count * Op::ELEM / 16;
  const u64 maxlen = AR ? (units + n - 1) / n : units;
  const u64 cv = (u64)blockDim.x * chain_unroll(a);
  u32 rounds = 0;  // R
  for (u64 c = blockIdx.x; c * cv < maxlen; c += gridDim.x) ++rounds;
  const v16* in = reinterpret_cast<const v16*>(a.in[r]);
  v16* out = reinterpret_cast<v16*>(a.out[r]);
  v16* out_next = reinterpret_cast<v16*>(a.out[next]);
  const v16* stage = reinterpret_cast<const v16*>(a.stage[r]);
  v16* stage_next = reinterpret_cast<v16*>(a.stage[next]);
  bool ok = true;
  // the head starts at step 1: step 0 came by the copy engine, and the host queued the
  // wait for its arrival here before this kernel (no round flags to wait for in step 1)
  const u32 first = (MODE == COLL_RING_AR_HEAD) ? 1 : 0;
  u32 k = first * rounds;
  const u32 rs_steps = (MODE == COLL_RING_AG) ? 0 : n - 1;
  const u32 ag_steps = (MODE == COLL_RING_RS) ? 0 : (MODE == COLL_RING_AR_HEAD) ? 1 : n - 1;
  for (u32 s = first; s < rs_steps + ag_steps + 1; ++s) {
    const bool rs = MODE != COLL_RING_AG && s < rs_steps;
    const bool last = s == rs_steps + ag_steps;  // wait-only rounds
    const u32 t = s - rs_steps;                  // all-gather step (when !rs)
    // the last rounds: reduce-scatter finishes segment r; the others only wait
    const u32 seg = rs ? (r + 2 * n - s - 1) % n : (last ? r : (r + n - t) % n);
    u64 sb, se;  // segment [sb, se) in vectors
    if (AR) {
      partition(units, n, seg, sb, se);
    } else {
      sb = (u64)seg * units;
      se = sb + units;
    }
    const u64 sl = se - sb;
    // vector v of this segment reduced so far: the partial sum that arrived in the
    // staging plus this rank's input
    // (premulsum: the input is pre-multiplied here; the staging holds pre-multiplied
    // partial sums, except in the head's first step, where it holds the previous rank's
    // input as the copy engine moved it)
    const bool stage_raw = MODE == COLL_RING_AR_HEAD && s == first;
    const auto reduced = [&](u64 v) {
      if (Op::PRE && stage_raw) return add16<Op>(pre16<Op>(a, stage[sb + v]), pre16<Op>(a, in[sb + v]));
      return add16<Op>(stage[sb + v], pre16<Op>(a, in[sb + v]));
    };
    for (u64 c = blockIdx.x; c * cv < maxlen; c += gridDim.x, ++k) {
      if (k >= (first + 1) * rounds) chain_wait(a, prev, next, chain_tag(e, k - rounds), ok);
      if (MODE == COLL_RING_RS && last) {
        // own segment complete: staging + input -> output offset 0
        chunk_for(
            a, c, sl, [&](u64 v) { return fin16<Op>(a, reduced(v)); },
            [&](u64 v, v16 x) { out[v] = x; });
        continue;
      }
      if (last) continue;
      if (rs) {
        chunk_for(
            a, c, sl,
            [&](u64 v) { return s == 0 ? pre16<Op>(a, in[sb + v]) : reduced(v); },
            [&](u64 v, v16 x) { stage_next[sb + v] = x; });
      } else if (t == 0) {
        chunk_for(
            a, c, sl,
            [&](u64 v) {
              return (MODE == COLL_RING_AG) ? in[v] : fin16<Op>(a, reduced(v));
            },
            [&](u64 v, v16 x) {
              out_next[sb + v] = x;
              if (AR || in + v != out + sb + v) out[sb + v] = x;
            });
      } else {
        chunk_for(
            a, c, sl, [&](u64 v) { return out[sb + v]; },
            [&](u64 v, v16 x) { out_next[sb + v] = x; });
      }
      chain_signal(a, next, chain_tag(e, k), ok);
    }
  }
}

#ifndef COLL_RED_OP
extern "C" __global__ void commhal_coll_allreduce_ring_f16(CollArgs a) { ring<OpF16, COLL_RING_AR>(a); }
extern "C" __global__ void commhal_coll_allreduce_ring_bf16(CollArgs a) { ring<OpBF16, COLL_RING_AR>(a); }
extern "C" __global__ void commhal_coll_allreduce_ring_f32(CollArgs a) { ring<OpF32, COLL_RING_AR>(a); }
extern "C" __global__ void commhal_coll_allreduce_ring_head_f16(CollArgs a) { ring<OpF16, COLL_RING_AR_HEAD>(a); }
extern "C" __global__ void commhal_coll_allreduce_ring_head_bf16(CollArgs a) { ring<OpBF16, COLL_RING_AR_HEAD>(a); }
extern "C" __global__ void commhal_coll_allreduce_ring_head_f32(CollArgs a) { ring<OpF32, COLL_RING_AR_HEAD>(a); }
extern "C" __global__ void commhal_coll_reducescatter_ring_f16(CollArgs a) { ring<OpF16, COLL_RING_RS>(a); }
extern "C" __global__ void commhal_coll_reducescatter_ring_bf16(CollArgs a) { ring<OpBF16, COLL_RING_RS>(a); }
extern "C" __global__ void commhal_coll_reducescatter_ring_f32(CollArgs a) { ring<OpF32, COLL_RING_RS>(a); }
// all-gather moves bytes: the Op is never used
extern "C" __global__ void commhal_coll_allgather_ring(CollArgs a) { ring<OpF32, COLL_RING_AG>(a); }

// All-to-all, LL (small chunks): a.count = bytes per chunk, a multiple of 8, at most the
// LL slot (host checks). Chunk p of this rank's input goes as packets into slot(p, rank)
// (own chunk: a local copy); every rank then waits for the packets of every peer and
// stores them as chunk p of its output. Every rank waits on every other in every
// launch, so the parity argument of the LL all-gather holds (no barrier).
extern "C" __global__ void commhal_coll_alltoall_ll(CollArgs a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u64 cb = a.count;
  const u64 npk = cb / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u8* in = reinterpret_cast<const u8*>(a.in[a.rank]);
  u8* out = reinterpret_cast<u8*>(a.out[a.rank]);
  for (u64 i = tid0; i < npk; i += gthreads) {
    for (u32 k = 1; k < a.nranks; ++k) {
      const u32 p = (a.rank + k) % a.nranks;
      const uint2 v = *reinterpret_cast<const uint2*>(in + p * cb + i * 8);
      store_volatile_v4u32(ll_slot(a, p, a.rank, parity) + i * 16, v.x, flag, v.y, flag);
    }
    reinterpret_cast<uint2*>(out + (u64)a.rank * cb)[i] =
        reinterpret_cast<const uint2*>(in + (u64)a.rank * cb)[i];
  }
  bool ok = true;
  for (u64 i = tid0; i < npk; i += gthreads) {
    for (u32 k = 1; k < a.nranks; ++k) {
      const u32 p = (a.rank + k) % a.nranks;
      reinterpret_cast<uint2*>(out + (u64)p * cb)[i] =
          ll_wait(a, ll_slot(a, a.rank, p, parity) + i * 16, flag, ok);
    }
  }
}

// Send/recv, LL (small sizes): a.count = bytes, a multiple of 8, at most the LL slot.
// Rank r sends its input as packets into slot(next, r) and receives the previous rank's
// packets from slot(r, prev). The sender never waits on its receiver otherwise, so before
// reusing a parity slot in launch e it waits until the receiver completed launch e-2
// (as the LL broadcast does).
extern "C" __global__ void commhal_coll_sendrecv_ll(CollArgs a) {
  const u64 e = coll_begin(a);
  const u32 flag = (u32)e;
  const u64 parity = e & 1;
  const u32 n = a.nranks;
  const u32 next = (a.rank + 1) % n, prev = (a.rank + n - 1) % n;
  const u64 npk = a.count / 8;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  block_wait_peer_done(a, next, e, 2);
  const uint2* src = reinterpret_cast<const uint2*>(a.in[a.rank]);
  for (u64 i = tid0; i < npk; i += gthreads) {
    const uint2 v = src[i];
    store_volatile_v4u32(ll_slot(a, next, a.rank, parity) + i * 16, v.x, flag, v.y, flag);
  }
  bool ok = true;
  uint2* out = reinterpret_cast<uint2*>(a.out[a.rank]);
  for (u64 i = tid0; i < npk; i += gthreads)
    out[i] = ll_wait(a, ll_slot(a, a.rank, prev, parity) + i * 16, flag, ok);
}

// All-to-all: a.count = bytes per chunk (cb); every input and output holds n chunks.
// Chunk p of this rank's input goes to chunk `rank` of rank p's output (NCCL's
// send/recv all-to-all). Out of place only (host): in place, rank p's chunk r would be
// overwritten while rank p still sends it.
//   4 ranks, rank 1: in[1][3cb, 4cb) -> out[3][1cb, 2cb); in[1][1cb, 2cb) ->
//   out[1][1cb, 2cb) (local). So out[q] chunk r = in[r] chunk q, the checker's rule.
//   2 ranks, rank 0: in[0] chunk 0 -> out[0] chunk 0, chunk 1 -> out[1] chunk 0.
// END barrier: block b of rank q waits for block b of every rank, which made its slice
// of the stores into q's output.
extern "C" __global__ void commhal_coll_alltoall(CollArgs a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u32 n = a.nranks;
  const u64 cb = a.count;
  const u64 src = a.in[a.rank];
  bool aligned = (cb % 16) == 0 && (src % 16) == 0;
  for (u32 p = 0; p < n; ++p) aligned = aligned && (a.out[p] % 16) == 0;
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (aligned) {
    const u64 cv = cb / 16;  // vectors per chunk
    const v16* s = reinterpret_cast<const v16*>(src);
    for (u64 v = tid0; v < cv; v += gthreads) {
      for (u32 k = 0; k < n; ++k) {
        const u32 p = (a.rank + k) % n;  // own chunk first, then spread over the peers
        reinterpret_cast<v16*>(a.out[p])[(u64)a.rank * cv + v] = s[(u64)p * cv + v];
      }
    }
  } else {
    for (u32 k = 0; k < n; ++k) {
      const u32 p = (a.rank + k) % n;
      copy_cooperative(reinterpret_cast<void*>(a.out[p] + (u64)a.rank * cb),
                       reinterpret_cast<const void*>(src + (u64)p * cb), cb, (u32)tid0,
                       (u32)gthreads);
    }
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}

// Send/recv (nccl-tests sendrecv_perf): a.count = bytes; rank r's input goes to the
// output of rank (r+1) % n, so rank r receives from (r-1+n) % n. Out of place only
// (host). 1 rank: a local copy. 2 ranks: 0 -> 1 and 1 -> 0. 4 ranks: 0->1, 1->2,
// 2->3, 3->0. The START/END barriers are the full per-block barrier (every rank), a
// superset of the neighbour ordering needed: START = the receiver's kernel runs (its
// output is no longer used by earlier work), END = the sender's stores are done.
extern "C" __global__ void commhal_coll_sendrecv(CollArgs a) {
  const u64 e = coll_begin(a);
  block_barrier(a, COLL_OFF_START_FLAGS, e);
  const u64 bytes = a.count;
  const u64 src = a.in[a.rank];
  const u64 dst = a.out[(a.rank + 1) % a.nranks];
  const u64 gthreads = (u64)gridDim.x * blockDim.x;
  const u64 tid0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (dst != src) {
    if ((bytes % 16) == 0 && (src % 16) == 0 && (dst % 16) == 0) {
      const u64 nvec = bytes / 16;
      for (u64 v = tid0; v < nvec; v += gthreads)
        reinterpret_cast<v16*>(dst)[v] = reinterpret_cast<const v16*>(src)[v];
    } else {
      copy_cooperative(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes,
                       (u32)tid0, (u32)gthreads);
    }
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
}

#endif  // !COLL_RED_OP
// ---------------------------------------------------------------------------------
// One (type, op) of every reducing kernel, compiled with -DCOLL_RED_T=Ty_<type>
// -DCOLL_RED_OP=<COLL_OP_*> (and nothing above: the unit's own kernels are left out):
// entry points without a type suffix, one module per (type, op), compiled on first use
// (backends/cuda-coll/src/kernels.rs; device-src lists them as COLL_NVLINK_TYPED).
#ifdef COLL_RED_OP
typedef RedOp<COLL_RED_T, COLL_RED_OP> RedT;
#define COLL_TYPED_KERNEL(name, call) extern "C" __global__ void commhal_coll_##name(CollArgs a) { call; }
COLL_TYPED_KERNEL(reduce_local, reduce_local<RedT>(a))
COLL_TYPED_KERNEL(reduce_pair_ce, reduce_pair_ce<RedT>(a))
COLL_TYPED_KERNEL(allreduce_ll, allreduce_ll<RedT>(a))
COLL_TYPED_KERNEL(allreduce_2shot, allreduce_2shot<RedT>(a))
COLL_TYPED_KERNEL(reducescatter, reducescatter<RedT>(a))
COLL_TYPED_KERNEL(reducescatter_ll, reducescatter_ll<RedT>(a))
COLL_TYPED_KERNEL(reducescatter_push, reducescatter_push<RedT>(a))
COLL_TYPED_KERNEL(allreduce_push, allreduce_push<RedT>(a))
COLL_TYPED_KERNEL(reduce_ll, reduce_ll<RedT>(a))
COLL_TYPED_KERNEL(reduce, (reduce_root<RedT, false>(a)))
COLL_TYPED_KERNEL(reduce_all, (reduce_root<RedT, true>(a)))
COLL_TYPED_KERNEL(reduce_chain, reduce_chain<RedT>(a))
COLL_TYPED_KERNEL(reduce_ll63, reduce_ll63<RedT>(a))
COLL_TYPED_KERNEL(allreduce_ll63, allreduce_pairs_ll63<RedT>(a))
COLL_TYPED_KERNEL(allreduce_ring, (ring<RedT, COLL_RING_AR>(a)))
COLL_TYPED_KERNEL(allreduce_ring_head, (ring<RedT, COLL_RING_AR_HEAD>(a)))
COLL_TYPED_KERNEL(reducescatter_ring, (ring<RedT, COLL_RING_RS>(a)))
#endif  // COLL_RED_OP
