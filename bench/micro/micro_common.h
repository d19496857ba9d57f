// micro_common.h — what the single-file micro-benchmarks here share: short integer
// names, CK / CU (abort with file, line, call and the CUDA runtime / driver error on any
// failure), the most GPUs a run drives, the GPU checks and peer access every run starts
// with, the system-scope release store and acquire loads, the slowest GPU's time between two events (slowest_ms),
// a device-side count (count_on), the peer-store micros' per-GPU setup (store_gpus), the grid-strided 16-byte copy every store
// measurement starts from (grid_copy), the 16-byte-word check (count_wrong_word), the f32 fill / check kernels and the bounded
// cyclic u32 flag wait of the copy-engine micros (fill_f32, count_wrong_f32,
// wait_u32_bounded). Each .cu still builds alone: nvcc finds this header beside it.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

typedef unsigned long long u64;
typedef unsigned int u32;

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

// CU: the same for a driver-API call (link with -lcuda where it is used).
#define CU(x)                                                                    \
  do {                                                                           \
    CUresult r_ = (x);                                                           \
    if (r_ != CUDA_SUCCESS) {                                                    \
      const char* s_ = nullptr;                                                  \
      cuGetErrorString(r_, &s_);                                                 \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?"); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

constexpr int MAXR = 8;

// Exit with a message unless 2..MAXR GPUs are asked for and present.
inline void require_gpus(int n) {
  int have = 0;
  CK(cudaGetDeviceCount(&have));
  if (n < 2 || n > have || n > MAXR) {
    fprintf(stderr, "need 2..%d GPUs, have %d\n", MAXR, have);
    exit(1);
  }
}

// Let each of GPUs 0..n-1 access every other one's memory (already enabled is fine).
inline void enable_peers(int n) {
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    for (int q = 0; q < n; ++q) {
      if (q == d) continue;
      cudaError_t e = cudaDeviceEnablePeerAccess(q, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();  // not sticky: clear it so a later check does not see it
      } else {
        CK(e);
      }
    }
  }
}

// st.release.sys: this thread's earlier writes are visible, system-wide, to whoever
// acquires the value.
__device__ __forceinline__ void st_release_sys(u64* p, u64 v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// ld.acquire.sys: the load after which this thread sees what the writer released
// (st.release.sys, or a stream write's memory barrier) before the value.
__device__ __forceinline__ u64 ld_acquire_sys(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ u32 ld_acquire_sys(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The slowest GPU's milliseconds between its events e0 and e1 (waiting for e1), over the
// GPUs d of `g` with use(d): every micro records g[d].e0 / g[d].e1 around its launches.
template <typename G, typename Use>
inline double slowest_ms(const std::vector<G>& g, Use use) {
  double worst = 0;
  for (int d = 0; d < (int)g.size(); ++d) {
    if (!use(d)) continue;
    CK(cudaSetDevice(d));
    CK(cudaEventSynchronize(g[d].e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, g[d].e0, g[d].e1));
    worst = std::max(worst, (double)ms);
  }
  return worst;
}
template <typename G>
inline double slowest_ms(const std::vector<G>& g) {
  return slowest_ms(g, [](int) { return true; });
}

// On GPU d: zero the device counter, run `launch` (a kernel on the default stream that
// atomically adds to the counter), return the count.
template <typename Launch>
inline unsigned long long count_on(int d, unsigned long long* counter, Launch launch) {
  CK(cudaSetDevice(d));
  CK(cudaMemset(counter, 0, 8));
  launch();
  CK(cudaGetLastError());
  unsigned long long c = 0;
  CK(cudaMemcpy(&c, counter, 8, cudaMemcpyDeviceToHost));
  return c;
}

// One GPU of the peer-store micros (store_pattern, l2_window): a non-blocking stream, a
// source of `cap` bytes filled with byte d + 1, a destination of `cap` bytes, a device
// counter for count_on, the events slowest_ms reads, the SM count.
struct StoreGpu {
  cudaStream_t s;
  uint4* src;
  uint4* dst;
  unsigned long long* bad;
  cudaEvent_t e0, e1;
  int sms;
};
inline std::vector<StoreGpu> store_gpus(int n, u64 cap) {
  std::vector<StoreGpu> g(n);
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaStreamCreateWithFlags(&g[d].s, cudaStreamNonBlocking));
    CK(cudaMalloc(&g[d].src, cap));
    CK(cudaMalloc(&g[d].dst, cap));
    CK(cudaMemset(g[d].src, d + 1, cap));
    CK(cudaMalloc(&g[d].bad, 8));
    CK(cudaEventCreate(&g[d].e0));
    CK(cudaEventCreate(&g[d].e1));
    CK(cudaDeviceGetAttribute(&g[d].sms, cudaDevAttrMultiProcessorCount, d));
    CK(cudaDeviceSynchronize());
  }
  return g;
}

__device__ __forceinline__ void st_cs(uint4* p, uint4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint4 ld_na(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// nvec 16-byte vectors src -> dst, grid-strided (v = tid + k * G), 4 vectors in flight per
// thread: the store kernels' pattern (store_pattern's "grid" rows, ce_pipeline's sm_st,
// mixed_push). MODE 0 plain, 1 .cs stores, 2 no_allocate loads, 3 plain with the
// destination index wrapped at `mask` (dst[v & mask]: l2_window's windows).
template <int MODE>
__global__ void grid_copy(const uint4* src, uint4* dst, u64 nvec, u64 mask = ~0ull) {
  const u64 g = (u64)gridDim.x * blockDim.x;
  const auto at = [&](u64 v) { return MODE == 3 ? v & mask : v; };
  u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  for (; v + 3 * g < nvec; v += 4 * g) {
    uint4 x[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = MODE == 2 ? ld_na(src + v + k * g) : src[v + k * g];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (MODE == 1)
        st_cs(dst + v + k * g, x[k]);
      else
        dst[at(v + k * g)] = x[k];
    }
  }
  for (; v < nvec; v += g) dst[at(v)] = src[v];
}

// *bad += the number of 16-byte vectors of p[0, nvec) that are not `word` in every lane.
__global__ void count_wrong_word(const uint4* p, u64 nvec, u32 word, unsigned long long* bad) {
  u64 n = 0;
  for (u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += (u64)gridDim.x * blockDim.x) {
    const uint4 x = p[v];
    n += x.x != word || x.y != word || x.z != word || x.w != word;
  }
  if (n) atomicAdd(bad, n);
}

// p[0..n) = v, grid-strided.
__global__ void fill_f32(float* p, u64 n, float v) {
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) p[i] = v;
}
// *wrong += the number of p[0..n) that are not v.
__global__ void count_wrong_f32(const float* p, u64 n, float v, unsigned long long* wrong) {
  u64 bad = 0;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) bad += p[i] != v;
  if (bad) atomicAdd(wrong, bad);
}

// Wait (the calling thread) until *flag has reached `want`, compared cyclically (u32
// sequence numbers that wrap), at most ~2 s: then count a timeout and go on (no hang).
__device__ __forceinline__ void wait_u32_bounded(const u32* flag, u32 want, u32* timeouts) {
  const long long t0 = clock64();
  while ((int)(ld_acquire_sys(flag) - want) < 0) {
    if (clock64() - t0 > 4000000000ll) {
      atomicAdd(timeouts, 1u);
      return;
    }
  }
}
