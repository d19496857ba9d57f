// reduce_pair.cu — where does the 2-rank reduce chain lose ~1.5 % against NCCL? Cited by
// docs/performance.md (Rooted collectives).
//
// NCCL 2.28.9's 2-rank reduce moves 1 GiB in ~2892 µs (370 GB/s); commhal's chain
// (coll_nvlink.cu reduce_chain: GPU 1 stores its input into GPU 0's staging in rounds of
// threads x unroll x 16 bytes per block, __syncthreads + a system-scope release of the
// block's round flag after each; GPU 0 waits for each flag and writes out = stage + in)
// takes ~2942 µs (365). Plain stores in one direction reach 369.6-371.6 GB/s
// (store_pattern.cu "uni" rows). This micro takes the chain apart, GPU 1 -> GPU 0, and
// times the slowest GPU per launch pair (both GPUs' kernels launched together, the host
// waits for both between launches), GB/s of the sent bytes, median of 5:
//
//   copy          sender stores its rounds, no flags; the receiver idle   (the floor)
//   copy+flag     + __syncthreads and thread 0's st.release.sys per round
//   wait          + the receiver waits for every round's flag (no reduce)
//   chain         + the receiver reduces: out = stage + in (commhal's chain)
//   chain uN      the same with N vectors per thread per round (commhal: 4)
//   chain BxT     B blocks of T threads instead of one block of 512 per SM
//   warp ...      every warp is a unit of its own: a round is 32 lanes x U vectors, the
//                 sender's lane 0 releases a per-warp flag after __syncwarp, the
//                 receiver's warp waits for its warp's flag; no block-wide barrier.
//
// Elements are u32 (the reduce adds them; exact, so the receiver's output is checked
// after every variant: out[i] = in0[i] + in1[i]).
//
// What it showed (2 x H200, GB/s at 256M / 1G): plain stores in the chain's shape 364.6-366.4 /
// 369.5-369.7 (the floor); + round flags 361.0 / 366-367; + the receiver's waits 358.5 /
// 365.4-366.2; + its reduce (commhal's chain) 356.4-358.1 / 365.2-365.6. Bigger rounds
// recover most of it at 1G (u8 368.0-368.3, u16 368.9-369.8) but not at 256M, and in
// commhal (COMMHAL_COLL_CHAIN_UNROLL=8/16) the 1G reduce stayed at 0.99-1.00 of NCCL.
// More loads in flight (8: 370.2), a small destination ring that stays in L2 (8M-128M:
// 367.7-368.8), 2 or 4 blocks per SM (360-366) and warp units with per-warp flags
// (363-364) do not raise the floor; 24 blocks (NCCL's channel count) lose (352-355).
// NCCL's 2-rank reduce moves 1 GiB at ~371 GB/s, at or above this floor: SM stores
// cannot beat it, so the 2-rank reduce moved to the copy engine (ce_reduce.cu).
//
// Build: nvcc -O3 -arch=sm_90 -o reduce_pair reduce_pair.cu ; run: ./reduce_pair
#include "micro_common.h"

// Wait until *p >= tag, at most ~2 s (then count a timeout and go on: no hang).
__device__ __forceinline__ void wait_ge(const u64* p, u64 tag, u64* timeouts) {
  const long long t0 = clock64();
  while (ld_acquire_sys(p) < tag) {
    if (clock64() - t0 > 4000000000ll) {
      atomicAdd(timeouts, 1ull);
      return;
    }
  }
}

__device__ __forceinline__ u64 tag_of(u64 e, u32 k) { return (e << 32) | (u64)(k + 1); }

__device__ __forceinline__ uint4 add4(uint4 a, uint4 b) {
  return make_uint4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// Block units (commhal's chain shape): chunk c = vectors [c*cv, (c+1)*cv), cv = T*U,
// block b takes chunks b, b + B, ...; thread t vectors t + j*T, four in flight.
// IF vectors in flight per thread; ring != 0: stores go to vector v & (ring - 1) (a
// destination of `ring` vectors, written over and over: rate only).
template <bool FLAGS, int IF = 4>
__global__ void send_block(const uint4* in, uint4* stage, u64* flags, u64 nvec, u32 un, u64 e, u64 ring) {
  const u64 cv = (u64)blockDim.x * un;
  const u64 mask = ring ? ring - 1 : ~0ull;
  u32 k = 0;
  for (u64 c = blockIdx.x; c * cv < nvec; c += gridDim.x, ++k) {
    const u64 base = c * cv + threadIdx.x;
    for (u32 u0 = 0; u0 < un; u0 += IF) {
      uint4 x[IF];
#pragma unroll
      for (u32 u = 0; u < IF; ++u) {
        const u64 v = base + (u64)(u0 + u) * blockDim.x;
        if (u0 + u < un && v < nvec) x[u] = in[v];
      }
#pragma unroll
      for (u32 u = 0; u < IF; ++u) {
        const u64 v = base + (u64)(u0 + u) * blockDim.x;
        if (u0 + u < un && v < nvec) stage[v & mask] = x[u];
      }
    }
    if (FLAGS) {
      __syncthreads();
      if (threadIdx.x == 0) st_release_sys(flags + blockIdx.x, tag_of(e, k));
    }
  }
}

// MODE 1: wait for every round only; 2: wait and reduce.
template <int MODE>
__global__ void recv_block(const uint4* in, const uint4* stage, uint4* out, const u64* flags, u64 nvec,
                           u32 un, u64 e, u64* timeouts) {
  const u64 cv = (u64)blockDim.x * un;
  u32 k = 0;
  for (u64 c = blockIdx.x; c * cv < nvec; c += gridDim.x, ++k) {
    if (threadIdx.x == 0) wait_ge(flags + blockIdx.x, tag_of(e, k), timeouts);
    __syncthreads();
    if (MODE < 2) continue;
    const u64 base = c * cv + threadIdx.x;
    for (u32 u0 = 0; u0 < un; u0 += 4) {
      uint4 x[4];
#pragma unroll
      for (u32 u = 0; u < 4; ++u) {
        const u64 v = base + (u64)(u0 + u) * blockDim.x;
        if (u0 + u < un && v < nvec) x[u] = add4(stage[v], in[v]);
      }
#pragma unroll
      for (u32 u = 0; u < 4; ++u) {
        const u64 v = base + (u64)(u0 + u) * blockDim.x;
        if (u0 + u < un && v < nvec) out[v] = x[u];
      }
    }
  }
}

// Warp units: chunk c = 32 * un vectors, warp w (of W in the grid) takes chunks w, w + W,
// ...; lane l vectors l + 32 j, four in flight; per-warp flags.
template <bool FLAGS, int IF = 4>
__global__ void send_warp(const uint4* in, uint4* stage, u64* flags, u64 nvec, u32 un, u64 e, u64 ring) {
  const u32 lane = threadIdx.x & 31;
  const u64 W = (u64)gridDim.x * blockDim.x / 32;
  const u64 w = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const u64 cv = 32ull * un;
  const u64 mask = ring ? ring - 1 : ~0ull;
  u32 k = 0;
  for (u64 c = w; c * cv < nvec; c += W, ++k) {
    const u64 base = c * cv + lane;
    for (u32 u0 = 0; u0 < un; u0 += IF) {
      uint4 x[IF];
#pragma unroll
      for (u32 u = 0; u < IF; ++u) {
        const u64 v = base + (u64)(u0 + u) * 32;
        if (u0 + u < un && v < nvec) x[u] = in[v];
      }
#pragma unroll
      for (u32 u = 0; u < IF; ++u) {
        const u64 v = base + (u64)(u0 + u) * 32;
        if (u0 + u < un && v < nvec) stage[v & mask] = x[u];
      }
    }
    if (FLAGS) {
      __syncwarp();
      if (lane == 0) st_release_sys(flags + w, tag_of(e, k));
    }
  }
}

template <int MODE>
__global__ void recv_warp(const uint4* in, const uint4* stage, uint4* out, const u64* flags, u64 nvec,
                          u32 un, u64 e, u64* timeouts) {
  const u32 lane = threadIdx.x & 31;
  const u64 W = (u64)gridDim.x * blockDim.x / 32;
  const u64 w = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const u64 cv = 32ull * un;
  u32 k = 0;
  for (u64 c = w; c * cv < nvec; c += W, ++k) {
    if (lane == 0) wait_ge(flags + w, tag_of(e, k), timeouts);
    __syncwarp();
    if (MODE < 2) continue;
    const u64 base = c * cv + lane;
    for (u32 u0 = 0; u0 < un; u0 += 4) {
      uint4 x[4];
#pragma unroll
      for (u32 u = 0; u < 4; ++u) {
        const u64 v = base + (u64)(u0 + u) * 32;
        if (u0 + u < un && v < nvec) x[u] = add4(stage[v], in[v]);
      }
#pragma unroll
      for (u32 u = 0; u < 4; ++u) {
        const u64 v = base + (u64)(u0 + u) * 32;
        if (u0 + u < un && v < nvec) out[v] = x[u];
      }
    }
  }
}

__global__ void fill(uint4* p, u64 nvec, u32 mul, u32 add) {
  for (u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += (u64)gridDim.x * blockDim.x) {
    const u32 b = (u32)(v * 4);
    p[v] = make_uint4(b * mul + add, (b + 1) * mul + add, (b + 2) * mul + add, (b + 3) * mul + add);
  }
}

__global__ void count_wrong(const uint4* out, u64 nvec, u64* bad) {
  u64 local = 0;
  for (u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += (u64)gridDim.x * blockDim.x) {
    const u32 b = (u32)(v * 4);
    const uint4 x = out[v];
    const u32 want[4] = {b * 10 + 6, (b + 1) * 10 + 6, (b + 2) * 10 + 6, (b + 3) * 10 + 6};
    local += (x.x != want[0]) + (x.y != want[1]) + (x.z != want[2]) + (x.w != want[3]);
  }
  if (local) atomicAdd(bad, local);
}

struct Gpu {
  uint4 *in = nullptr, *stage = nullptr, *out = nullptr;
  u64 *flags = nullptr, *bad = nullptr, *timeouts = nullptr;
  cudaStream_t s;
  cudaEvent_t e0, e1;
};

struct Variant {
  const char* name;
  bool warp;   // warp units
  int recv;    // 0 idle, 1 wait, 2 reduce
  bool flags;  // sender publishes rounds
  u32 un;      // vectors per thread (block) / per lane (warp) per round
  int blocks_per_sm;
  u32 threads;
  int inflight = 4;  // vectors in flight per thread (sender): 4 or 8
  u64 ring = 0;      // sender's destination in vectors (0: the whole buffer)
};

template <bool W, bool F, int IF>
void launch_as(const Variant& v, int blocks, cudaStream_t s, const uint4* in, uint4* stage, u64* flags, u64 nvec, u64 e) {
  if (W)
    send_warp<F, IF><<<blocks, v.threads, 0, s>>>(in, stage, flags, nvec, v.un, e, v.ring);
  else
    send_block<F, IF><<<blocks, v.threads, 0, s>>>(in, stage, flags, nvec, v.un, e, v.ring);
}

// The sender's kernel for variant v on stream s (GPU 1 current).
void launch_sender(const Variant& v, int blocks, cudaStream_t s, const uint4* in, uint4* stage, u64* flags, u64 nvec,
                   u64 e) {
  const int key = (v.warp ? 4 : 0) + (v.flags ? 2 : 0) + (v.inflight == 8 ? 1 : 0);
  switch (key) {
    case 0: launch_as<false, false, 4>(v, blocks, s, in, stage, flags, nvec, e); break;
    case 1: launch_as<false, false, 8>(v, blocks, s, in, stage, flags, nvec, e); break;
    case 2: launch_as<false, true, 4>(v, blocks, s, in, stage, flags, nvec, e); break;
    case 3: launch_as<false, true, 8>(v, blocks, s, in, stage, flags, nvec, e); break;
    case 4: launch_as<true, false, 4>(v, blocks, s, in, stage, flags, nvec, e); break;
    case 5: launch_as<true, false, 8>(v, blocks, s, in, stage, flags, nvec, e); break;
    case 6: launch_as<true, true, 4>(v, blocks, s, in, stage, flags, nvec, e); break;
    default: launch_as<true, true, 8>(v, blocks, s, in, stage, flags, nvec, e); break;
  }
}

int main() {
  require_gpus(2);
  enable_peers(2);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const u64 max_bytes = 1ull << 30;
  std::vector<Gpu> g(2);
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&g[d].in, max_bytes));
    CK(cudaMalloc(&g[d].stage, max_bytes));
    CK(cudaMalloc(&g[d].out, max_bytes));
    CK(cudaMalloc(&g[d].flags, 8 * 8192));
    CK(cudaMemset(g[d].flags, 0, 8 * 8192));
    CK(cudaMalloc(&g[d].bad, 8));
    CK(cudaMalloc(&g[d].timeouts, 8));
    CK(cudaMemset(g[d].timeouts, 0, 8));
    CK(cudaStreamCreateWithFlags(&g[d].s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g[d].e0));
    CK(cudaEventCreate(&g[d].e1));
    // in0[i] = 3 i + 1, in1[i] = 7 i + 5: out[i] = 10 i + 6 (mod 2^32)
    fill<<<sms * 4, 512>>>(g[d].in, max_bytes / 16, d == 0 ? 3 : 7, d == 0 ? 1 : 5);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }
  const u64 MiB = (1ull << 20) / 16;  // vectors
  const Variant vs[] = {
      {"copy", false, 0, false, 4, 1, 512},
      {"copy if8 u8", false, 0, false, 8, 1, 512, 8},
      {"copy ring 8M", false, 0, false, 4, 1, 512, 4, 8 * MiB},
      {"copy ring 32M", false, 0, false, 4, 1, 512, 4, 32 * MiB},
      {"copy ring 128M", false, 0, false, 4, 1, 512, 4, 128 * MiB},
      {"copy 24x512", false, 0, false, 4, 0, 512},
      {"copy 24x512 if8", false, 0, false, 8, 0, 512, 8},
      {"copy 24x512 r32M", false, 0, false, 4, 0, 512, 4, 32 * MiB},
      {"copy+flag", false, 0, true, 4, 1, 512},
      {"wait", false, 1, true, 4, 1, 512},
      {"chain", false, 2, true, 4, 1, 512},
      {"chain u8", false, 2, true, 8, 1, 512},
      {"chain u8 if8", false, 2, true, 8, 1, 512, 8},
      {"chain u16", false, 2, true, 16, 1, 512},
      {"chain u16 if8", false, 2, true, 16, 1, 512, 8},
      {"chain u32 if8", false, 2, true, 32, 1, 512, 8},
      {"warp copy u8", true, 0, false, 8, 1, 512},
      {"warp copy u8 if8", true, 0, false, 8, 1, 512, 8},
      {"warp copy u8 r32M", true, 0, false, 8, 1, 512, 4, 32 * MiB},
      {"warp chain u16 if8", true, 2, true, 16, 1, 512, 8},
  };
  const u64 sizes[] = {256ull << 20, 1ull << 30};
  printf("# reduce_pair: GPU 1 -> GPU 0, %d SMs; GB/s of the sent bytes (slowest GPU per launch pair), median of 5\n", sms);
  printf("%-18s %10s %10s   (u32 elements wrong at 1 GiB; timeouts)\n", "variant", "256M", "1024M");
  u64 epoch = 0;
  for (const Variant& v : vs) {
    printf("%-18s", v.name);
    const int blocks = v.blocks_per_sm ? sms * v.blocks_per_sm : 24;
    for (u64 bytes : sizes) {
      const u64 nvec = bytes / 16;
      std::vector<double> rates;
      for (int rep = 0; rep < 6; ++rep) {
        ++epoch;
        for (int d = 0; d < 2; ++d) {
          CK(cudaSetDevice(d));
          CK(cudaEventRecord(g[d].e0, g[d].s));
        }
        CK(cudaSetDevice(0));
        if (v.recv > 0) {
          if (v.warp) {
            if (v.recv == 1)
              recv_warp<1><<<blocks, v.threads, 0, g[0].s>>>(g[0].in, g[0].stage, g[0].out, g[0].flags, nvec, v.un, epoch, g[0].timeouts);
            else
              recv_warp<2><<<blocks, v.threads, 0, g[0].s>>>(g[0].in, g[0].stage, g[0].out, g[0].flags, nvec, v.un, epoch, g[0].timeouts);
          } else {
            if (v.recv == 1)
              recv_block<1><<<blocks, v.threads, 0, g[0].s>>>(g[0].in, g[0].stage, g[0].out, g[0].flags, nvec, v.un, epoch, g[0].timeouts);
            else
              recv_block<2><<<blocks, v.threads, 0, g[0].s>>>(g[0].in, g[0].stage, g[0].out, g[0].flags, nvec, v.un, epoch, g[0].timeouts);
          }
          CK(cudaGetLastError());
        }
        CK(cudaEventRecord(g[0].e1, g[0].s));
        CK(cudaSetDevice(1));
        launch_sender(v, blocks, g[1].s, g[1].in, g[0].stage, g[0].flags, nvec, epoch);
        CK(cudaGetLastError());
        CK(cudaEventRecord(g[1].e1, g[1].s));
        const double ms = slowest_ms(g);
        if (rep > 0) rates.push_back((double)bytes / (ms * 1e-3) / 1e9);
      }
      std::sort(rates.begin(), rates.end());
      printf(" %10.1f", rates[rates.size() / 2]);
      fflush(stdout);
    }
    if (v.recv == 2) {
      const u64 wrong = count_on(0, g[0].bad, [&] { count_wrong<<<sms * 4, 512>>>(g[0].out, max_bytes / 16, g[0].bad); });
      CK(cudaMemset(g[0].out, 0, max_bytes));
      printf("   %llu wrong", wrong);
    }
    u64 to = 0;
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(&to, g[0].timeouts, 8, cudaMemcpyDeviceToHost));
    printf("; %llu timeouts\n", to);
    fflush(stdout);
  }
  return 0;
}
