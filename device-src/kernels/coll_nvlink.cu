// coll_nvlink.cu — collectives over NVLink peer mappings (one process per GPU, every
// rank maps every peer's input, output and scratch). Host side: backends/cuda-coll.
//
// Kernels (dtype suffix _f16 / _bf16 / _f32, op sum):
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
//   *_ll variants of all-gather / reduce-scatter for small chunks.
//
// Epochs. Every launch on a rank gets epoch e = scratch.epoch + 1 (read by every block at
// its start; the last block to finish stores e back, see coll_end). Launches are matched
// across ranks (same collective, same size, same order), so e agrees on every rank.
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
#define COLL_OFF_EPOCH 0
#define COLL_OFF_DONE 8
#define COLL_OFF_ERROR 12
#define COLL_OFF_START_FLAGS 4096
#define COLL_OFF_END_FLAGS (COLL_OFF_START_FLAGS + COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)
#define COLL_OFF_MID_FLAGS (COLL_OFF_END_FLAGS + COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)
#define COLL_OFF_LL (COLL_OFF_MID_FLAGS + COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)
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
};
static_assert(sizeof(CollArgs) == 24 * 8 + 3 * 8 + 8 + 8 * 8 + 8, "CollArgs layout");

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

// Bounded wait for *flag >= e. false = gave up (error stored).
COMMHAL_DEVICE bool wait_flag(const CollArgs& a, const u64* flag, u64 e) {
  u64 t0 = 0;
  for (u32 i = 0;; ++i) {
    if (load_acquire(flag) >= e) return true;
    if ((i & 1023) == 0) {
      const u64 t = now_ns();
      if (i == 0) t0 = t;
      else if (t - t0 > a.spin_ns || load_relaxed_u32(error_word(a)) != 0) {
        set_error_once(error_word(a), COLL_ERR_WAIT_TIMEOUT);
        return false;
      }
    }
  }
}

// Start of every kernel: this launch's epoch (same in every block).
COMMHAL_DEVICE u64 coll_begin(const CollArgs& a) {
  __shared__ u64 s_epoch;
  if (threadIdx.x == 0) {
    s_epoch = load_relaxed(reinterpret_cast<const u64*>(a.scratch[a.rank] + COLL_OFF_EPOCH)) + 1;
  }
  __syncthreads();
  return s_epoch;
}

// End of every kernel: the last block to finish publishes the epoch for the next launch.
// Every block read the epoch before its add (program order + acq_rel RMW chain).
COMMHAL_DEVICE void coll_end(const CollArgs& a, u64 e) {
  __syncthreads();
  if (threadIdx.x == 0) {
    u32* done = reinterpret_cast<u32*>(a.scratch[a.rank] + COLL_OFF_DONE);
    u32 prev;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(prev) : "l"(done) : "memory");
    if (prev == gridDim.x - 1) {
      *reinterpret_cast<volatile u32*>(done) = 0;
      store_relaxed(reinterpret_cast<u64*>(a.scratch[a.rank] + COLL_OFF_EPOCH), e);
    }
  }
}

// Block-level barrier with the same block of every peer (see the header comment).
COMMHAL_DEVICE void block_barrier(const CollArgs& a, u64 flags_off, u64 e) {
  __syncthreads();
  const u32 t = threadIdx.x;
  if (t < a.nranks && t != a.rank) {
    u64* remote = reinterpret_cast<u64*>(a.scratch[t] + flags_off) +
                  (u64)a.rank * COLL_MAX_BLOCKS + blockIdx.x;
    store_release(remote, e);
    const u64* mine = reinterpret_cast<const u64*>(a.scratch[a.rank] + flags_off) +
                      (u64)t * COLL_MAX_BLOCKS + blockIdx.x;
    wait_flag(a, mine, e);
  }
  __syncthreads();
}

// ---- reduction on 32-bit words holding 2 halves / 2 bfloat16 / 1 float ----
struct OpF16 {
  static COMMHAL_DEVICE u32 add(u32 x, u32 y) {
    u32 r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    return r;
  }
  static const u32 ELEM = 2;
};
struct OpBF16 {
  static COMMHAL_DEVICE u32 add(u32 x, u32 y) {
    u32 r;
    asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    return r;
  }
  static const u32 ELEM = 2;
};
struct OpF32 {
  static COMMHAL_DEVICE u32 add(u32 x, u32 y) {
    return __float_as_uint(__uint_as_float(x) + __uint_as_float(y));
  }
  static const u32 ELEM = 4;
};

template <typename Op>
COMMHAL_DEVICE v16 add16(v16 x, v16 y) {
  v16 r;
  r.x = Op::add(x.x, y.x);
  r.y = Op::add(x.y, y.y);
  r.z = Op::add(x.z, y.z);
  r.w = Op::add(x.w, y.w);
  return r;
}

// One element at byte offset `off` of src into acc (2- or 4-byte elements; the high
// half of a 2-byte element's word is zero and ignored).
template <typename Op>
COMMHAL_DEVICE u32 load_elem(u64 base, u64 off) {
  if (Op::ELEM == 2) return (u32) * reinterpret_cast<const volatile unsigned short*>(base + off);
  return *reinterpret_cast<const volatile u32*>(base + off);
}
template <typename Op>
COMMHAL_DEVICE void store_elem(u64 base, u64 off, u32 v) {
  if (Op::ELEM == 2) *reinterpret_cast<unsigned short*>(base + off) = (unsigned short)v;
  else *reinterpret_cast<u32*>(base + off) = v;
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
    if ((s & 1023) == 0) {
      const u64 t = now_ns();
      if (s == 0) t0 = t;
      else if (t - t0 > a.spin_ns || load_relaxed_u32(error_word(a)) != 0) {
        set_error_once(error_word(a), COLL_ERR_PACKET_TIMEOUT);
        ok = false;
      }
    }
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
    const uint2 v = in[i];
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
        v = in[i];
      } else {
        v = ll_wait(a, ll_slot(a, a.rank, p, parity) + i * 16, flag, ok);
      }
      if (first) {
        acc = v;
        first = false;
      } else {
        acc.x = Op::add(acc.x, v.x);
        acc.y = Op::add(acc.y, v.y);
      }
    }
    out[i] = acc;
  }
  coll_end(a, e);
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
      x0[p] = src[p][v];
      x1[p] = src[p][v + gthreads];
    }
    v16 acc0 = x0[0], acc1 = x1[0];
#pragma unroll
    for (int p = 1; p < N; ++p) {
      acc0 = add16<Op>(acc0, x0[p]);
      acc1 = add16<Op>(acc1, x1[p]);
    }
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
    for (int p = 0; p < N; ++p) x[p] = src[p][v];
    v16 acc = x[0];
#pragma unroll
    for (int p = 1; p < N; ++p) acc = add16<Op>(acc, x[p]);
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
    v16 acc = reinterpret_cast<const v16*>(a.in[0] + base_off)[v];
    for (u32 p = 1; p < n; ++p)
      acc = add16<Op>(acc, reinterpret_cast<const v16*>(a.in[p] + base_off)[v]);
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
    u32 acc = load_elem<Op>(a.in[0], in_off + i * Op::ELEM);
    for (u32 p = 1; p < a.nranks; ++p)
      acc = Op::add(acc, load_elem<Op>(a.in[p], in_off + i * Op::ELEM));
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
  coll_end(a, e);
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
      u32 acc = load_elem<Op>(a.in[0], in_off + i * Op::ELEM);
      for (u32 p = 1; p < a.nranks; ++p)
        acc = Op::add(acc, load_elem<Op>(a.in[p], in_off + i * Op::ELEM));
      store_elem<Op>(a.out[a.rank], i * Op::ELEM, acc);
    }
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
  coll_end(a, e);
}

// Entry points, spelled out (device-src lists and checks every extern "C" kernel).
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
  coll_end(a, e);
}

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
      const uint2 v = *reinterpret_cast<const uint2*>(in + p * cb + i * 8);
      store_volatile_v4u32(ll_slot(a, p, a.rank, parity) + i * 16, v.x, flag, v.y, flag);
    }
  }
  bool ok = true;
  uint2* out = reinterpret_cast<uint2*>(a.out[a.rank]);
  for (u64 i = tid0; i < npk; i += gthreads) {
    uint2 acc = make_uint2(0, 0);
    for (u32 p = 0; p < a.nranks; ++p) {  // rank order
      const uint2 v = (p == a.rank)
                          ? *reinterpret_cast<const uint2*>(in + a.rank * cb + i * 8)
                          : ll_wait(a, ll_slot(a, a.rank, p, parity) + i * 16, flag, ok);
      if (p == 0) {
        acc = v;
      } else {
        acc.x = Op::add(acc.x, v.x);
        acc.y = Op::add(acc.y, v.y);
      }
    }
    out[i] = acc;
  }
  coll_end(a, e);
}

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
  coll_end(a, e);
}

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
  const u8* stage = reinterpret_cast<const u8*>(a.stage[a.rank]);
  for (u64 j = tid0; vb + j < ve; j += gthreads) {
    v16 x[COLL_MAX_RANKS];
#pragma unroll
    for (u32 p = 0; p < COLL_MAX_RANKS; ++p) {
      if (p < n) {
        x[p] = (p == a.rank) ? in[vb + j]
                             : reinterpret_cast<const v16*>(stage + (u64)p * a.stage_slot_bytes)[j];
      }
    }
    v16 acc = x[0];
#pragma unroll
    for (u32 p = 1; p < COLL_MAX_RANKS; ++p) {
      if (p < n) acc = add16<Op>(acc, x[p]);
    }
#pragma unroll
    for (u32 k = 0; k < COLL_MAX_RANKS; ++k) {
      if (k < n) reinterpret_cast<v16*>(a.out[(a.rank + k) % n])[vb + j] = acc;
    }
  }
  if (a.rank == n - 1 && nvec * 16 < bytes) {
    reduce_elems<Op>(a, 0, nvec * 16 / Op::ELEM, a.count, 0, true);
  }
  block_barrier(a, COLL_OFF_END_FLAGS, e);
  coll_end(a, e);
}

extern "C" __global__ void commhal_coll_allreduce_push_f16(CollArgs a) { allreduce_push<OpF16>(a); }
extern "C" __global__ void commhal_coll_allreduce_push_bf16(CollArgs a) { allreduce_push<OpBF16>(a); }
extern "C" __global__ void commhal_coll_allreduce_push_f32(CollArgs a) { allreduce_push<OpF32>(a); }
