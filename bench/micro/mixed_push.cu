// mixed_push.cu — do SM stores and a copy engine add up on one NVLink direction
// Cited by docs/performance.md (Copy engines).
//
// SM 16-byte stores into a peer reach ~370 GB/s with the other direction idle and ~365
// with both busy; one cudaMemcpyAsync reaches ~392 either way (store_pattern.cu,
// ce_pipeline.cu). If the link carries more than either alone, a 2-rank reduce (or a
// ring step) could push part of its bytes through the copy engine while the SMs push the
// rest. This moves B bytes GPU 0 -> GPU 1 (and, in the "both" rows, GPU 1 -> GPU 0 at
// the same time), a fraction f through one copy-engine copy on its own stream and the
// rest through a store kernel (132 blocks x 512 threads, grid-strided 16-byte
// vectors) on another, both queued behind one event; time = from that event to both
// streams done, the slowest GPU; GB/s = B / time, median of 5. Every destination byte is
// checked after each variant (cleared before it).
//
// Build: nvcc -O3 -std=c++20 -arch=sm_90 -o mixed_push mixed_push.cu ; run: ./mixed_push
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "micro_common.h"

__global__ void fill(uint4* p, u64 nvec, u32 salt) {
  for (u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += (u64)gridDim.x * blockDim.x)
    p[v] = make_uint4((u32)v ^ salt, (u32)(v >> 32) + salt, salt, (u32)v * 3u + salt);
}

__global__ void count_wrong(const uint4* p, u64 nvec, u32 salt, unsigned long long* bad) {
  unsigned long long n = 0;
  for (u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += (u64)gridDim.x * blockDim.x) {
    const uint4 x = p[v];
    if (x.x != ((u32)v ^ salt) || x.y != (u32)(v >> 32) + salt || x.z != salt || x.w != (u32)v * 3u + salt) ++n;
  }
  if (n) atomicAdd(bad, n);
}

struct Gpu {
  uint4* src = nullptr;
  uint4* dst = nullptr;  // written by the other GPU
  cudaStream_t sm = nullptr, ce = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr, ce_done = nullptr;
  unsigned long long* bad = nullptr;
};

int main() {
  const int n = 2;
  require_gpus(n);
  enable_peers(n);
  const u64 bytes = 1ull << 30, nvec = bytes / 16;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<Gpu> g(n);
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&g[d].src, bytes));
    CK(cudaMalloc(&g[d].dst, bytes));
    CK(cudaMalloc(&g[d].bad, 8));
    CK(cudaStreamCreateWithFlags(&g[d].sm, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&g[d].ce, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g[d].e0));
    CK(cudaEventCreate(&g[d].e1));
    CK(cudaEventCreateWithFlags(&g[d].ce_done, cudaEventDisableTiming));
    fill<<<sms * 4, 512>>>(g[d].src, nvec, 0x1000u * (d + 1));
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }
  printf("# mixed_push: 2 GPUs, 1 GiB per sending GPU, a fraction f by one cudaMemcpyAsync, the rest by SM stores (%d x 512); GB/s per sending GPU (slowest), median of 5\n", sms);
  printf("%-8s %6s %10s %10s\n", "senders", "f", "GB/s", "wrong");
  const double fs[] = {0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0};
  for (int both = 0; both < 2; ++both) {
    const int senders = both ? 2 : 1;
    for (double f : fs) {
      // the copy engine takes the first ce_vec vectors, the SMs the rest
      const u64 ce_vec = (u64)(f * (double)nvec) / 4096 * 4096;
      for (int d = 0; d < senders; ++d) {
        CK(cudaSetDevice((d + 1) % n));
        CK(cudaMemset(g[(d + 1) % n].dst, 0, bytes));
        CK(cudaDeviceSynchronize());
      }
      std::vector<double> rates;
      for (int rep = 0; rep < 6; ++rep) {
        for (int d = 0; d < senders; ++d) {
          const int q = (d + 1) % n;
          CK(cudaSetDevice(d));
          CK(cudaEventRecord(g[d].e0, g[d].sm));
          CK(cudaStreamWaitEvent(g[d].ce, g[d].e0, 0));
          if (ce_vec > 0)
            CK(cudaMemcpyAsync(g[q].dst, g[d].src, ce_vec * 16, cudaMemcpyDeviceToDevice, g[d].ce));
          if (ce_vec < nvec) grid_copy<0><<<sms, 512, 0, g[d].sm>>>(g[d].src + ce_vec, g[q].dst + ce_vec, nvec - ce_vec);
          CK(cudaGetLastError());
          CK(cudaEventRecord(g[d].ce_done, g[d].ce));
          CK(cudaStreamWaitEvent(g[d].sm, g[d].ce_done, 0));
          CK(cudaEventRecord(g[d].e1, g[d].sm));
        }
        const double ms = slowest_ms(g, [&](int d) { return d < senders; });
        if (rep > 0) rates.push_back((double)bytes / (ms * 1e-3) / 1e9);  // rep 0: warm-up
      }
      std::sort(rates.begin(), rates.end());
      unsigned long long wrong = 0;
      for (int d = 0; d < senders; ++d) {
        const int q = (d + 1) % n;
        wrong += count_on(q, g[q].bad, [&] { count_wrong<<<sms * 4, 512>>>(g[q].dst, nvec, 0x1000u * (d + 1), g[q].bad); });
      }
      printf("%-8s %6.2f %10.1f %10llu\n", both ? "both" : "0->1", f, rates[rates.size() / 2], wrong);
      fflush(stdout);
    }
  }
  return 0;
}
