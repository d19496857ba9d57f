// l2_window.cu — do SM stores into a peer run faster when they land in a small window of
// the peer's memory (which its L2 can hold) than when they sweep a whole 1 GiB buffer?
//
// NCCL's chains write into a small FIFO per channel on the receiving GPU, reused round
// after round; commhal's reduce chain and rings write into a staging area as large as
// the buffer, and its broadcast chain straight into the output. NCCL's 4-GPU reduce at
// 1 GiB (2958 µs) is faster than its own broadcast (2982) and than commhal's chains
// (~2977–3004), at the same bytes per link. If stores that hit lines already resident in
// the receiver's L2 are acknowledged sooner, both the raw store rate and the per-round
// system-scope release (which waits for those acknowledgements) would gain, and a
// circular staging area with credits would be worth building.
//
// Ring permutation d -> d+1, every GPU at once, 1 GiB moved per launch, GB/s per GPU
// (slowest GPU), median of 5; the destination index wraps at the window (1G = linear):
//   grid W   grid-strided 16-byte vectors, 4 in flight per thread (grid_copy<3>)
//   round W  the chains' shape: block b copies rounds of 512 threads x 8 vectors
//            (64 KiB), then __syncthreads and a st.release.sys of the round number into a
//            flag in the peer (what chain_signal does; nobody waits for it here)
//
// Measured on 4 and 2 H200s
// alike: no window helps. grid 365.1 (1G) / 364.7 / 364.6 / 364.3 / 364.3 / 363.9 (8M);
// round 366.0 (1G) / 365.5 / 365.9 / 365.1 / 365.4 / 366.2 (8M) GB/s. So a circular
// staging area would not raise the store rate, and a round's release costs nothing by
// itself when nobody waits for it (round >= grid): what the chains lose to smaller rounds
// is in the waiting, not in the release.
//
// Build: nvcc -O3 -arch=sm_90 -o l2_window l2_window.cu ; run: ./l2_window [N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "micro_common.h"

// rounds of blockDim.x x 8 vectors per block (block b: rounds b, b + B, ...), each ended
// by __syncthreads and a system-scope release of the round number into flag[b]
__global__ void round_window(const uint4* src, uint4* dst, u64 nvec, u64 mask, u64* flag) {
  const u64 cv = (u64)blockDim.x * 8;
  u64 k = 0;
  for (u64 c = blockIdx.x; c * cv < nvec; c += gridDim.x, ++k) {
    const u64 base = c * cv + threadIdx.x;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint4 x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) x[u] = src[base + (u64)(4 * h + u) * blockDim.x];
#pragma unroll
      for (int u = 0; u < 4; ++u) dst[(base + (u64)(4 * h + u) * blockDim.x) & mask] = x[u];
    }
    __syncthreads();
    if (threadIdx.x == 0) st_release_sys(flag + blockIdx.x, k + 1);
  }
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 4;
  require_gpus(n);
  enable_peers(n);
  const u64 cap = 1ull << 30;
  std::vector<StoreGpu> g = store_gpus(n, cap);
  std::vector<u64*> flag(n);  // the round kernel's per-round flags, in the receiver
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&flag[d], 8 * 1024));
  }
  const u64 windows[] = {1ull << 30, 256ull << 20, 64ull << 20, 32ull << 20, 16ull << 20, 8ull << 20};
  printf("# l2_window: %d GPUs, ring permutation d -> d+1, 1 GiB per launch, 512 threads x 1 block per SM; GB/s per GPU (slowest), median of 5\n", n);
  for (int kind = 0; kind < 2; ++kind) {
    for (u64 w : windows) {
      for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaMemset(g[d].dst, 0, cap));
        CK(cudaMemset(flag[d], 0, 8 * 1024));
        CK(cudaDeviceSynchronize());
      }
      const u64 nvec = cap / 16, mask = w / 16 - 1;
      const int reps = 3;
      std::vector<double> runs;
      for (int rep = 0; rep < 5; ++rep) {
        for (int d = 0; d < n; ++d) {
          CK(cudaSetDevice(d));
          StoreGpu& me = g[d];
          const int up = (d + 1) % n;
          CK(cudaEventRecord(me.e0, me.s));
          for (int r = 0; r < reps; ++r) {
            if (kind == 0)
              grid_copy<3><<<me.sms, 512, 0, me.s>>>(me.src, g[up].dst, nvec, mask);
            else
              round_window<<<me.sms, 512, 0, me.s>>>(me.src, g[up].dst, nvec, mask, flag[up]);
            CK(cudaGetLastError());
          }
          CK(cudaEventRecord(me.e1, me.s));
        }
        const double worst = slowest_ms(g) / reps;
        runs.push_back(cap / (worst * 1e-3) / 1e9);
      }
      std::sort(runs.begin(), runs.end());
      unsigned long long bad = 0;
      for (int d = 0; d < n; ++d) {
        const int from = (d + n - 1) % n;
        const u32 want = 0x01010101u * (u32)(from + 1);
        bad += count_on(d, g[d].bad, [&] { count_wrong_word<<<264, 512>>>(g[d].dst, w / 16, want, g[d].bad); });
      }
      printf("%-6s %5lluM %8.1f GB/s  (min %.1f max %.1f)  %llu wrong\n", kind == 0 ? "grid" : "round", w >> 20,
             runs[2], runs[0], runs[4], bad);
      fflush(stdout);
    }
  }
  return 0;
}
