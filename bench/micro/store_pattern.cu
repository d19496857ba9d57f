// store_pattern.cu — does the address pattern of SM stores into a peer limit them to
// ~365 GB/s per GPU, where one copy-engine copy reaches ~392? Cited by
// docs/performance.md (Hardware floors).
//
// NCCL's 2-rank reduce moves 1 GiB in 2899 µs (370 GB/s), faster than any SM store
// stream commhal has measured (365.5 GB/s at 1 GiB, ce_pipeline.cu part 1), and the
// copy engines reach 392. Every commhal store kernel writes either grid-strided 16-byte
// vectors (warp w writes 512 contiguous bytes, the next 512 belong to warp w+1) or
// block-contiguous chunks (the chains and rings: a block's round is threads x unroll x
// 16 bytes, thread t writing vectors t, t + threads, ...). If the remote side (the
// NVLink packets, the peer's memory) prefers longer runs from one warp, a warp-contiguous
// layout would raise every store kernel. Ring permutation d -> d+1, every GPU at once,
// GB/s per GPU (slowest GPU), median of 5:
//
//   grid      v = tid + k * G (as ce_pipeline's sm_st), 4 vectors in flight per thread
//   block K   block b copies chunks b, b + B, ... of K bytes; thread t vectors t + j*T
//             (the chains' and rings' shape)
//   warp K    warp w copies chunks w, w + W, ... of K bytes; lane l vectors l + 32 j,
//             8 vectors in flight per lane
//   grid.cs   as grid with st.global.cs (evict-first / streaming store hint)
//   grid.na   as grid with loads ld.global.nc.L1::no_allocate (the source side)
//   ... N blk  the same with N blocks in all instead of one per SM
//   ... uni    only the even GPUs send (d -> d+1): every link carries one direction
//
// Measured: every pattern within
// 0.6 % at 1 GiB (grid 365.5, block 128K 366.1, warp 4K 367.6 GB/s, 4 and 2 GPUs alike);
// NCCL's 2-rank reduce is Ring / Simple on 24 channels over P2P/CUMEM (stores, not reads).
// Fewer blocks are slower (24: 342.6, 66: 361.3, 96: 365.3),
// so NCCL's 24 channels are not the reason.
//
// Build: nvcc -O3 -arch=sm_90 -o store_pattern store_pattern.cu ; run: ./store_pattern [N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "micro_common.h"

// chunks of `cv` vectors; block b takes chunks b, b + B, ...; thread t vectors t + j*T
__global__ void block_copy(const uint4* src, uint4* dst, u64 nvec, u64 cv) {
  for (u64 c = blockIdx.x; c * cv < nvec; c += gridDim.x) {
    const u64 base = c * cv;
    u64 j = threadIdx.x;
    for (; j + 3 * blockDim.x < cv; j += 4 * blockDim.x) {
      uint4 x[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) x[k] = src[base + j + k * blockDim.x];
#pragma unroll
      for (int k = 0; k < 4; ++k) dst[base + j + k * blockDim.x] = x[k];
    }
    for (; j < cv; j += blockDim.x) dst[base + j] = src[base + j];
  }
}

// chunks of `cv` vectors (a multiple of 256); warp w takes chunks w, w + W, ...; lane l
// vectors l + 32 j, 8 in flight
__global__ void warp_copy(const uint4* src, uint4* dst, u64 nvec, u64 cv) {
  const u64 warps = (u64)gridDim.x * blockDim.x / 32;
  const u64 w = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const u32 lane = threadIdx.x % 32;
  for (u64 c = w; c * cv < nvec; c += warps) {
    const u64 base = c * cv + lane;
    for (u64 j = 0; j < cv; j += 256) {
      uint4 x[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) x[k] = src[base + j + 32 * k];
#pragma unroll
      for (int k = 0; k < 8; ++k) dst[base + j + 32 * k] = x[k];
    }
  }
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 4;
  require_gpus(n);
  enable_peers(n);
  const u64 cap = 1ull << 30;
  std::vector<StoreGpu> g = store_gpus(n, cap);
  struct V {
    const char* name;
    int kind;  // 0 grid, 1 grid.cs, 2 grid.na, 3 block, 4 warp
    u64 k;     // chunk bytes
    int bps;   // blocks per SM
    bool uni;  // only even GPUs send (to d + 1): one direction per link
  };
  // bps > 0: blocks per SM; bps < 0: -bps blocks in all (NCCL's 2-rank reduce runs on 24)
  const V vs[] = {{"grid", 0, 0, 1},          {"grid x2", 0, 0, 2},          {"grid.cs", 1, 0, 1},
                  {"grid.na", 2, 0, 1},       {"block 32K", 3, 32 << 10, 1}, {"block 128K", 3, 128 << 10, 1},
                  {"block 512K", 3, 512 << 10, 1}, {"warp 4K", 4, 4 << 10, 1},   {"warp 16K", 4, 16 << 10, 1},
                  {"warp 64K", 4, 64 << 10, 1}, {"warp 256K", 4, 256 << 10, 1}, {"warp 16K x2", 4, 16 << 10, 2},
                  {"grid 16 blk", 0, 0, -16}, {"grid 24 blk", 0, 0, -24}, {"grid 32 blk", 0, 0, -32},
                  {"grid 48 blk", 0, 0, -48}, {"grid 66 blk", 0, 0, -66}, {"grid 96 blk", 0, 0, -96},
                  {"warp4K 24 blk", 4, 4 << 10, -24}, {"warp4K 32 blk", 4, 4 << 10, -32},
                  {"warp4K 48 blk", 4, 4 << 10, -48}, {"warp4K 66 blk", 4, 4 << 10, -66},
                  {"grid uni", 0, 0, 1, true}, {"block 128K uni", 3, 128 << 10, 1, true},
                  {"warp 4K uni", 4, 4 << 10, 1, true}, {"grid 66 blk uni", 0, 0, -66, true}};
  const u64 sizes[] = {64ull << 20, 256ull << 20, 1ull << 30};
  printf("# store_pattern: %d GPUs, ring permutation d -> d+1, 512 threads per block; GB/s per GPU (slowest), median of 5\n", n);
  printf("%-15s", "variant");
  for (u64 b : sizes) printf(" %9lluM", b >> 20);
  printf("   (16-byte vectors wrong after the variant)\n");
  for (const V& v : vs) {
    for (int d = 0; d < n; ++d) {  // so a variant that skips a region shows up
      CK(cudaSetDevice(d));
      CK(cudaMemset(g[d].dst, 0, cap));
      CK(cudaDeviceSynchronize());
    }
    printf("%-15s", v.name);
    for (u64 B : sizes) {
      const int reps = B <= (64ull << 20) ? 20 : 5;
      std::vector<double> runs;
      for (int rep = 0; rep < 5; ++rep) {
        for (int d = 0; d < n; ++d) {
          if (v.uni && d % 2) continue;
          CK(cudaSetDevice(d));
          StoreGpu& me = g[d];
          uint4* dst = g[(d + 1) % n].dst;
          const int blocks = v.bps > 0 ? me.sms * v.bps : -v.bps;
          const u64 nvec = B / 16;
          CK(cudaEventRecord(me.e0, me.s));
          for (int r = 0; r < reps; ++r) {
            switch (v.kind) {
              case 0: grid_copy<0><<<blocks, 512, 0, me.s>>>(me.src, dst, nvec); break;
              case 1: grid_copy<1><<<blocks, 512, 0, me.s>>>(me.src, dst, nvec); break;
              case 2: grid_copy<2><<<blocks, 512, 0, me.s>>>(me.src, dst, nvec); break;
              case 3: block_copy<<<blocks, 512, 0, me.s>>>(me.src, dst, nvec, v.k / 16); break;
              case 4: warp_copy<<<blocks, 512, 0, me.s>>>(me.src, dst, nvec, v.k / 16); break;
            }
            CK(cudaGetLastError());
          }
          CK(cudaEventRecord(me.e1, me.s));
        }
        const double worst = slowest_ms(g, [&](int d) { return !(v.uni && d % 2); }) / reps;
        runs.push_back(B / (worst * 1e-3) / 1e9);
      }
      std::sort(runs.begin(), runs.end());
      printf(" %10.1f", runs[2]);
      fflush(stdout);
    }
    // check (the largest size covers the whole buffer): every receiving GPU's dst holds
    // its upstream's bytes (upstream + 1 in every byte)
    unsigned long long bad = 0;
    for (int d = 0; d < n; ++d) {
      const int up = (d + n - 1) % n;
      if (v.uni && up % 2) continue;  // not written in this variant
      const u32 want = 0x01010101u * (u32)(up + 1);
      bad += count_on(d, g[d].bad, [&] { count_wrong_word<<<264, 512>>>(g[d].dst, cap / 16, want, g[d].bad); });
    }
    printf("   %llu wrong\n", bad);
  }
  return 0;
}
