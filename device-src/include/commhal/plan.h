// plan.h — device runtime of kernels generated from plans (algorithms/src/codegen.rs).
//
// A generated kernel runs one rank's plan: plan block b is carried out by `replicas`
// consecutive CTAs (blockIdx.x / replicas == b), each doing its 1/replicas share of every
// data op. Every CTA of a block sends each signal, so a wait expects `replicas`
// increments per plan-level signal. Host side: backends/cuda-coll/src/plan_exec.rs.
//
// Per-rank plan area (one cuMem VMM allocation, mapped by every peer):
//   [0, PLAN_SEM_BYTES)               inbound semaphores (u64 counters); peers add to them
//   [PLAN_SEM_BYTES, PLAN_DATA_OFF)   PlanState, touched by this rank only
//   [PLAN_DATA_OFF, ...)              scratch copies (the plan's scratch_rotation of them)
//
// Invocation state lives in device memory so CUDA graph replays work: every CTA reads
// the epoch and its semaphore bases at its start; the last CTA to finish advances them
// (stream order makes that safe: the next launch on this rank starts after this one).
// All launches on a rank are collective (every rank runs the same sequence), so the
// epoch agrees across ranks; LL flags are derived from it.
//
// Memory model: a signal is __syncthreads() then one system-scope release add by thread
// 0 (cumulative over the CTA's writes, as MSCCL++'s memory channel); a wait is an
// acquire load loop by thread 0 then __syncthreads(). LL8 packets carry 4 data bytes and
// a 4-byte flag in one 8-byte store.
//
// Semaphores are the channels' counting semaphores and packets their LL8 packets
// (commhal/semaphore.h, commhal/packets.h). Every wait is the one bounded wait of
// commhal/wait.h (spin_ns of globaltimer, or the rank's error word already set): it
// stores ERR_WAIT_TIMEOUT / ERR_PACKET_TIMEOUT once and gives up; the host reads the
// word.
#pragma once
#include "commhal/commhal_port.h"
#include "commhal/copy.h"
#include "commhal/packets.h"
#include "commhal/semaphore.h"

#define PLAN_MAX_RANKS 8
#define PLAN_MAX_SEMS 4096
#define PLAN_MAX_BLOCKS 508
// The last 2 × PLAN_MAX_RANKS inbound semaphores: start and end handshakes, by sender.
#define PLAN_SEM_START (PLAN_MAX_SEMS - 2 * PLAN_MAX_RANKS)
#define PLAN_SEM_END (PLAN_MAX_SEMS - PLAN_MAX_RANKS)
#define PLAN_SEM_BYTES (PLAN_MAX_SEMS * 8)
#define PLAN_STATE_BYTES (4096 + PLAN_MAX_SEMS * 8)
#define PLAN_DATA_OFF (PLAN_SEM_BYTES + PLAN_STATE_BYTES)

namespace commhal {
namespace plan {

// Passed by value. Mirrored by PlanArgs in backends/cuda-coll/src/plan_exec.rs.
struct PlanArgs {
  u64 input[PLAN_MAX_RANKS];   // every rank's input base for this call, mapped here
  u64 output[PLAN_MAX_RANKS];  // every rank's output base for this call, mapped here
  u64 area[PLAN_MAX_RANKS];    // every rank's plan area, mapped here
  u64 count;                   // message elements (the plan's `count`)
  u64 scratch_copy_bytes;      // bytes of one scratch copy
  u64 spin_ns;                 // bound of every wait
  u32 replicas;                // CTAs per plan block
  u32 rotation;                // scratch copies (>= 1)
  u32 rank;                    // this rank
  u32 pad;
};
static_assert(sizeof(PlanArgs) == 232, "PlanArgs layout");

// The local part of the plan area.
struct PlanState {
  u32 error;    // first error code (0: none)
  u32 pad;
  u64 epoch;    // invocations completed on this rank
  u64 barrier;  // intra-rank barrier arrivals in this invocation (reset at the end)
  u64 done;     // CTAs finished in this invocation (reset at the end)
  u64 group[PLAN_MAX_BLOCKS];   // per plan block: replica syncs in this invocation
  u64 consumed[PLAN_MAX_SEMS];  // signals consumed so far, per inbound semaphore
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
  u64 epoch;
  u64 scr;    // offset of this invocation's scratch copy inside a plan area
  u32 part;   // this CTA's index within its plan block
  u32 parts;  // replicas
  u64 nbar;   // barriers passed in this invocation
  u64 ngrp;   // replica syncs passed in this invocation
};


COMMHAL_DEVICE PlanState* state_of(const PlanArgs& a) {
  return reinterpret_cast<PlanState*>(a.area[a.rank] + PLAN_SEM_BYTES);
}

COMMHAL_DEVICE Ctx begin(const PlanArgs& a) {
  __shared__ u64 s_epoch;
  Ctx c;
  c.a = &a;
  c.st = state_of(a);
  if (threadIdx.x == 0) s_epoch = load_relaxed(&c.st->epoch);
  __syncthreads();
  c.epoch = s_epoch;
  c.scr = PLAN_DATA_OFF + (c.epoch % a.rotation) * a.scratch_copy_bytes;
  c.part = blockIdx.x % a.replicas;
  c.parts = a.replicas;
  c.nbar = 0;
  c.ngrp = 0;
  return c;
}

// Signals consumed so far on inbound semaphore idx (read at the start of the kernel).
COMMHAL_DEVICE u64 consumed(const Ctx& c, u32 idx) {
  return load_relaxed(&c.st->consumed[idx]);
}

// Last CTA out: advance the epoch and the semaphore bases, reset the barrier.
// `sems` / `per` list this rank's inbound semaphores and the waits one invocation makes
// on each (times replicas is the signals consumed).
COMMHAL_DEVICE void end(const Ctx& c, const unsigned short* sems, const u32* per, u32 nsems,
                        u32 nranks, bool start_sync, bool end_sync) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const u64 old = fetch_add_relaxed(&c.st->done, 1);
    if (old + 1 == gridDim.x) {
      __threadfence();
      for (u32 i = 0; i < nsems; ++i) {
        const u64 v = load_relaxed(&c.st->consumed[sems[i]]);
        store_relaxed(&c.st->consumed[sems[i]], v + (u64)per[i] * c.parts);
      }
      for (u32 p = 0; p < nranks; ++p) {
        if (p == c.a->rank) continue;
        if (start_sync) {
          u64* s = &c.st->consumed[PLAN_SEM_START + p];
          store_relaxed(s, load_relaxed(s) + 1);
        }
        if (end_sync) {
          u64* s = &c.st->consumed[PLAN_SEM_END + p];
          store_relaxed(s, load_relaxed(s) + 1);
        }
      }
      for (u32 b = 0; b < gridDim.x / c.parts && b < PLAN_MAX_BLOCKS; ++b)
        store_relaxed(&c.st->group[b], 0);
      store_relaxed(&c.st->barrier, 0);
      store_relaxed(&c.st->done, 0);
      store_relaxed(&c.st->epoch, c.epoch + 1);
    }
  }
}

// ---- chunk addressing (the arithmetic of ChunkRef::range) ----
COMMHAL_DEVICE Span chunk(u64 base, u64 esz, u64 total, u32 nchunks, u64 first, u32 cnt) {
  const u64 s = first * total / nchunks;
  const u64 e = (first + cnt) * total / nchunks;
  Span r;
  r.p = reinterpret_cast<u8*>(base + s * esz);
  r.n = e - s;
  return r;
}

// LL8 packet area of a scratch chunk: each chunk's packets start on their own word.
COMMHAL_DEVICE Span packets(u64 base, u64 esz, u64 total, u32 nchunks, u64 first, u32 cnt) {
  const u64 s = first * total / nchunks;
  const u64 e = (first + cnt) * total / nchunks;
  Span r;
  r.p = reinterpret_cast<u8*>(base + 8 * ((s * esz) / 4 + first));
  r.n = e - s;
  return r;
}

// This CTA's share [lo, hi) of n units, cut at multiples of `align` units.
COMMHAL_DEVICE void share(const Ctx& c, u64 n, u64 align, u64& lo, u64& hi) {
  u64 per = (n + c.parts - 1) / c.parts;
  per = (per + align - 1) / align * align;
  lo = per * c.part;
  hi = lo + per;
  if (lo > n) lo = n;
  if (hi > n) hi = n;
}

// ---- synchronisation ----
// The bound of every wait of this CTA: the rank's error word and spin_ns.
COMMHAL_DEVICE WaitBound bound(const Ctx& c) { return WaitBound{&c.st->error, c.a->spin_ns}; }

// Bounded wait (one thread) until the counter at p reaches target (acquire).
COMMHAL_DEVICE void spin_until(const Ctx& c, const u64* p, u64 target) {
  wait_until(bound(c), ERR_WAIT_TIMEOUT, [&] { return counter_reached(load_acquire(p), target); });
}

// The CTA's earlier writes become visible before the peer's matching wait returns.
COMMHAL_DEVICE void signal(const Ctx& c, u32 peer, u32 idx) {
  __syncthreads();
  if (threadIdx.x == 0)
    fetch_add_release(reinterpret_cast<u64*>(c.a->area[peer]) + idx, 1);
}

// Wait until this rank's inbound semaphore idx reaches `target` (acquire).
COMMHAL_DEVICE void wait(const Ctx& c, u32 idx, u64 target) {
  if (threadIdx.x == 0) {
    const u64* s = reinterpret_cast<const u64*>(c.a->area[c.a->rank]) + idx;
    spin_until(c, s, target);
  }
  __syncthreads();
}

// Intra-rank barrier of every CTA of the kernel (all co-resident: the host keeps the
// grid within the SM count).
COMMHAL_DEVICE void barrier(Ctx& c) {
  c.nbar += 1;
  __syncthreads();
  if (threadIdx.x == 0) {
    fetch_add_release(&c.st->barrier, 1);
    const u64 target = c.nbar * gridDim.x;
    spin_until(c, &c.st->barrier, target);
  }
  __syncthreads();
}

// Sync the `replicas` CTAs of this plan block (between data ops whose shares differ).
COMMHAL_DEVICE void group_sync(Ctx& c) {
  c.ngrp += 1;
  __syncthreads();
  if (c.parts > 1 && threadIdx.x == 0) {
    u64* g = &c.st->group[blockIdx.x / c.parts];
    fetch_add_release(g, 1);
    const u64 target = c.ngrp * c.parts;
    spin_until(c, g, target);
  }
  __syncthreads();
}

// Handshake of CTA 0 with every peer's CTA 0 on semaphores [base + sender]: signal
// every peer, wait for every peer (one thread per peer).
COMMHAL_DEVICE void handshake(const Ctx& c, u32 base, u32 nranks) {
  if (blockIdx.x != 0) return;
  __syncthreads();
  const u32 me = c.a->rank;
  const u32 p = threadIdx.x;
  if (p < nranks && p != me) {
    fetch_add_release(reinterpret_cast<u64*>(c.a->area[p]) + base + me, 1);
    const u64 target = load_relaxed(&c.st->consumed[base + p]) + 1;
    const u64* s = reinterpret_cast<const u64*>(c.a->area[me]) + base + p;
    spin_until(c, s, target);
  }
  __syncthreads();
}

// Start: no CTA touches a peer's input or output before that peer's kernel runs (its
// earlier stream work — writing the input, reading the last output — is done).
COMMHAL_DEVICE void start_sync(Ctx& c, u32 nranks) {
  handshake(c, PLAN_SEM_START, nranks);
  barrier(c);
}

// End: the kernel completes only after every peer finished every op (nobody reads
// this rank's input any more).
COMMHAL_DEVICE void end_sync(Ctx& c, u32 nranks) {
  barrier(c);
  handshake(c, PLAN_SEM_END, nranks);
}

// ---- data types: storage S, arithmetic A ----
// Codes (algorithms DataType order): 0 f64, 1 f32, 2 f16, 3 bf16, 4 f8e4m3, 5 f8e5m2,
// 6 i8, 7 u8, 8 i32, 9 u32, 10 i64, 11 u64.
template <int DT> struct Ty;
#define PLAN_PLAIN_TY(code, stype, atype, utype, isfloat)                      \
  template <> struct Ty<code> {                                                \
    typedef stype S;                                                           \
    typedef atype A;                                                           \
    static COMMHAL_DEVICE A ld(S v) { return (A)v; }                           \
    static COMMHAL_DEVICE S st(A v) { return (S)v; }                           \
    static COMMHAL_DEVICE A add(A x, A y) { return (A)((utype)x + (utype)y); } \
    static COMMHAL_DEVICE A mul(A x, A y) { return (A)((utype)x * (utype)y); } \
    static const bool FLOAT = isfloat;                                         \
  };
PLAN_PLAIN_TY(6, signed char, signed char, unsigned char, false)
PLAN_PLAIN_TY(7, unsigned char, unsigned char, unsigned char, false)
PLAN_PLAIN_TY(8, int, int, unsigned int, false)
PLAN_PLAIN_TY(9, unsigned int, unsigned int, unsigned int, false)
PLAN_PLAIN_TY(10, long long, long long, unsigned long long, false)
PLAN_PLAIN_TY(11, unsigned long long, unsigned long long, unsigned long long, false)
#undef PLAN_PLAIN_TY

template <> struct Ty<0> {
  typedef double S;
  typedef double A;
  static COMMHAL_DEVICE A ld(S v) { return v; }
  static COMMHAL_DEVICE S st(A v) { return v; }
  static COMMHAL_DEVICE A add(A x, A y) { return x + y; }
  static COMMHAL_DEVICE A mul(A x, A y) { return x * y; }
  static const bool FLOAT = true;
};
template <> struct Ty<1> {
  typedef float S;
  typedef float A;
  static COMMHAL_DEVICE A ld(S v) { return v; }
  static COMMHAL_DEVICE S st(A v) { return v; }
  static COMMHAL_DEVICE A add(A x, A y) { return x + y; }
  static COMMHAL_DEVICE A mul(A x, A y) { return x * y; }
  static const bool FLOAT = true;
};
template <> struct Ty<2> {
  typedef unsigned short S;
  typedef float A;
  static COMMHAL_DEVICE A ld(S v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
  }
  static COMMHAL_DEVICE S st(A v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
  }
  static COMMHAL_DEVICE A add(A x, A y) { return x + y; }
  static COMMHAL_DEVICE A mul(A x, A y) { return x * y; }
  static const bool FLOAT = true;
};
template <> struct Ty<3> {
  typedef unsigned short S;
  typedef float A;
  static COMMHAL_DEVICE A ld(S v) { return __uint_as_float(((u32)v) << 16); }
  static COMMHAL_DEVICE S st(A v) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
  }
  static COMMHAL_DEVICE A add(A x, A y) { return x + y; }
  static COMMHAL_DEVICE A mul(A x, A y) { return x * y; }
  static const bool FLOAT = true;
};
// fp8 through the sm_89+ conversions (saturating, as the host's f32_to_fp8).
#define PLAN_FP8_TY(code, fmt)                                                 \
  template <> struct Ty<code> {                                                \
    typedef unsigned char S;                                                   \
    typedef float A;                                                           \
    static COMMHAL_DEVICE A ld(S v) {                                          \
      u32 h2;                                                                  \
      unsigned short in = v;                                                   \
      asm("cvt.rn.f16x2." fmt "x2 %0, %1;" : "=r"(h2) : "h"(in));              \
      float f;                                                                 \
      unsigned short lo = (unsigned short)(h2 & 0xffff);                       \
      asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(lo));                          \
      return f;                                                                \
    }                                                                          \
    static COMMHAL_DEVICE S st(A v) {                                          \
      unsigned short r;                                                        \
      asm("cvt.rn.satfinite." fmt "x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(v)); \
      return (S)(r & 0xff);                                                    \
    }                                                                          \
    static COMMHAL_DEVICE A add(A x, A y) { return x + y; }                    \
    static COMMHAL_DEVICE A mul(A x, A y) { return x * y; }                    \
    static const bool FLOAT = true;                                            \
  };
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
PLAN_FP8_TY(4, "e4m3")
PLAN_FP8_TY(5, "e5m2")
#endif
#undef PLAN_FP8_TY

// Ops: 0 sum, 1 prod, 2 min, 3 max, 4 avg (sum, then finalize divides by nranks).
template <int DT, int OP>
COMMHAL_DEVICE typename Ty<DT>::A combine(typename Ty<DT>::A x, typename Ty<DT>::A y) {
  if (OP == 1) return Ty<DT>::mul(x, y);
  if (OP == 2) {
    if (Ty<DT>::FLOAT && x != x) return y;  // as Rust's f32::min: NaN loses
    return y < x ? y : x;
  }
  if (OP == 3) {
    if (Ty<DT>::FLOAT && x != x) return y;
    return y > x ? y : x;
  }
  return Ty<DT>::add(x, y);
}

// ---- data ops ----

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

// dst[i] = srcs[0][i] (op) srcs[1][i] (op) ... for i < n elements (this CTA's share).
// dst may alias a source element for element.
template <int DT, int OP>
COMMHAL_DEVICE void reduce(const Ctx& c, u8* dst, const u8* const* srcs, u32 nsrc, u64 n) {
  typedef typename Ty<DT>::S S;
  typedef typename Ty<DT>::A A;
  const u64 V = 16 / sizeof(S);
  u64 lo, hi;
  share_elems(c, n, sizeof(S), lo, hi);
  if (hi <= lo) return;
  S* d = reinterpret_cast<S*>(dst);
  const u64 mis = reinterpret_cast<u64>(d + lo) & 15;
  bool vec = true;
  for (u32 k = 0; k < nsrc; ++k)
    vec = vec && ((reinterpret_cast<u64>(srcs[k] + lo * sizeof(S)) & 15) == mis);
  u64 head = lo;
  u64 bulk_end = lo;
  if (vec) {
    head = lo + ((16 - mis) & 15) / sizeof(S);
    if (head > hi) head = hi;
    bulk_end = head + (hi - head) / V * V;
  }
  // Scalar head (and everything when not vectorisable), then vector bulk, scalar tail.
  const u64 scalar_end = vec ? head : hi;
  for (u64 i = lo + threadIdx.x; i < scalar_end; i += blockDim.x) {
    A acc = Ty<DT>::ld(reinterpret_cast<const S*>(srcs[0])[i]);
    for (u32 k = 1; k < nsrc; ++k)
      acc = combine<DT, OP>(acc, Ty<DT>::ld(reinterpret_cast<const S*>(srcs[k])[i]));
    d[i] = Ty<DT>::st(acc);
  }
  if (!vec) return;
  for (u64 i = head + threadIdx.x * V; i < bulk_end; i += (u64)blockDim.x * V) {
    union {
      v16 v;
      S s[16 / sizeof(S)];
    } x, y;
    x.v = *reinterpret_cast<const v16*>(srcs[0] + i * sizeof(S));
    A acc[16 / sizeof(S)];
#pragma unroll
    for (u32 j = 0; j < V; ++j) acc[j] = Ty<DT>::ld(x.s[j]);
    for (u32 k = 1; k < nsrc; ++k) {
      y.v = *reinterpret_cast<const v16*>(srcs[k] + i * sizeof(S));
#pragma unroll
      for (u32 j = 0; j < V; ++j) acc[j] = combine<DT, OP>(acc[j], Ty<DT>::ld(y.s[j]));
    }
#pragma unroll
    for (u32 j = 0; j < V; ++j) x.s[j] = Ty<DT>::st(acc[j]);
    *reinterpret_cast<v16*>(dst + i * sizeof(S)) = x.v;
  }
  for (u64 i = bulk_end + threadIdx.x; i < hi; i += blockDim.x) {
    A acc = Ty<DT>::ld(reinterpret_cast<const S*>(srcs[0])[i]);
    for (u32 k = 1; k < nsrc; ++k)
      acc = combine<DT, OP>(acc, Ty<DT>::ld(reinterpret_cast<const S*>(srcs[k])[i]));
    d[i] = Ty<DT>::st(acc);
  }
}

// avg's last step: divide n elements by nranks (this CTA's share).
template <int DT>
COMMHAL_DEVICE void finalize_avg(const Ctx& c, u8* dst, u64 n, u32 nranks) {
  typedef typename Ty<DT>::S S;
  typedef typename Ty<DT>::A A;
  u64 lo, hi;
  share_elems(c, n, sizeof(S), lo, hi);
  S* d = reinterpret_cast<S*>(dst);
  for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x)
    d[i] = Ty<DT>::st(Ty<DT>::ld(d[i]) / (A)nranks);
}

// LL8 flag of a packet write: epoch and occurrence (< 255) in a non-zero u32.
COMMHAL_DEVICE u32 ll_flag(const Ctx& c, u32 occ) {
  return (u32)(((c.epoch % 0xFFFFFFull) << 8) | occ) + 1;
}

// Write n elements of src as LL8 packets at dst (this CTA's share of the words).
COMMHAL_DEVICE void put_packets(const Ctx& c, u8* dst, const u8* src, u64 n, u64 esz,
                                u32 flag) {
  const u64 bytes = n * esz;
  u64 elo, ehi;
  share_elems(c, n, esz, elo, ehi);
  const u64 lo = elo * esz / 4;
  const u64 hi = (ehi * esz + 3) / 4;
  const bool aligned = (reinterpret_cast<u64>(src) & 3) == 0;
  for (u64 w = lo + threadIdx.x; w < hi; w += blockDim.x) {
    u32 data = 0;
    if (aligned && 4 * w + 4 <= bytes) {
      data = reinterpret_cast<const u32*>(src)[w];
    } else {
      for (u32 b = 0; b < 4 && 4 * w + b < bytes; ++b) data |= (u32)src[4 * w + b] << (8 * b);
    }
    ll8_store(dst + 8 * w, data, flag);
  }
}

// Wait for LL8 word w of packet area p to carry `flag`; its data (0 after a timeout).
COMMHAL_DEVICE u32 packet_word(const Ctx& c, const u8* p, u64 w, u32 flag) {
  bool ok = true;
  const u32 data = ll8_wait(p + 8 * w, flag, bound(c), ok);
  return ok ? data : 0;
}

// dst = locals[0] (op) ... (op) unpack(packets[0]) (op) ...: n elements; each packet
// area holds the chunk's bytes from its first word. This CTA's share of the words.
template <int DT, int OP>
COMMHAL_DEVICE void reduce_packets(const Ctx& c, u8* dst, const u8* const* locals, u32 nl,
                                   const u8* const* pk, const u32* flags, u32 np, u64 n) {
  typedef typename Ty<DT>::S S;
  typedef typename Ty<DT>::A A;
  // Groups: one word (elements of <= 4 bytes) or two (8-byte elements).
  const u64 gw = sizeof(S) > 4 ? 2 : 1;
  const u64 per_group = sizeof(S) > 4 ? 1 : 4 / sizeof(S);
  u64 elo, ehi;
  share_elems(c, n, sizeof(S), elo, ehi);
  const u64 lo = elo / per_group;
  const u64 hi = (ehi + per_group - 1) / per_group;
  S* d = reinterpret_cast<S*>(dst);
  for (u64 g = lo + threadIdx.x; g < hi; g += blockDim.x) {
    union {
      u32 w[2];
      S s[8 / sizeof(S)];
    } got[PLAN_MAX_RANKS];
    for (u32 k = 0; k < np && k < PLAN_MAX_RANKS; ++k)
      for (u64 j = 0; j < gw; ++j) got[k].w[j] = packet_word(c, pk[k], g * gw + j, flags[k]);
    for (u64 e = 0; e < per_group; ++e) {
      const u64 i = g * per_group + e;
      if (i >= n) break;
      if (nl == 0 && np == 1) {  // unpack: bits as they are
        d[i] = got[0].s[e];
        continue;
      }
      A acc;
      u32 first = 0;
      if (nl > 0) {
        acc = Ty<DT>::ld(reinterpret_cast<const S*>(locals[0])[i]);
        for (u32 k = 1; k < nl; ++k)
          acc = combine<DT, OP>(acc, Ty<DT>::ld(reinterpret_cast<const S*>(locals[k])[i]));
      } else {
        acc = Ty<DT>::ld(got[0].s[e]);
        first = 1;
      }
      for (u32 k = first; k < np && k < PLAN_MAX_RANKS; ++k)
        acc = combine<DT, OP>(acc, Ty<DT>::ld(got[k].s[e]));
      d[i] = Ty<DT>::st(acc);
    }
  }
}

}  // namespace plan
}  // namespace commhal
