// peer_read.cu — how fast can a GPU read its peers' memory over NVLink? Cited by
// docs/performance.md (Hardware floors, Dropped).
//
// The pull kernels (reduce "worker", scatter-forward broadcast, the two-shot all-reduce's
// first half, the pull reduce-scatter) load from peers with 16-byte LSU loads; at mid
// sizes they reach ~190 GB/s per GPU where the store kernels reach ~300. This measures
// the read side alone, every GPU at once (each reads B bytes, B / (N-1) from every peer,
// so each GPU also serves B), against the same pattern with stores:
//
//   lsu      16-byte loads (ld.global.v4), 2 vectors x every peer in flight per thread
//            (as reduce_vectors_n), XOR-accumulated in registers
//   lsu_nc   the same through the non-coherent path (ld.global.nc.v4)
//   tma<K>   Hopper bulk copies (cp.async.bulk, the TMA engine) of K-KiB chunks from the
//            peer into shared memory, 4 stages per block, mbarrier completion; the
//            block XORs each chunk out of shared memory
//   store    16-byte stores into the peers (the push kernels' direction)
//   lsu+st, tma 4K+st   as lsu / tma 4K, and every byte read is also stored into the
//            next peer (reads and stores on the links at once, as in the pull kernels;
//            GB/s counts the bytes read)
//
// Grid: one block per SM (x2 where named), 512 threads (tma: 256). Timed with events
// around R back-to-back launches per GPU (all GPUs queued together); GB/s per GPU =
// B / (time per launch), the slowest GPU, median of 5 repetitions.
//
// Build: nvcc -O3 -arch=sm_90 -o peer_read peer_read.cu ; run: ./peer_read [N]
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "micro_common.h"

struct Peers {
  const uint4* src[MAXR];  // the peers' buffers (this GPU's own excluded)
  uint4* dst[MAXR];        // store variant: where this GPU writes in each peer
  int np;
};

__device__ __forceinline__ uint4 ld_nc(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <bool NC, bool WRITE>
__global__ void lsu_read(Peers p, u64 nvec, uint4* sink) {
  const u64 g = (u64)gridDim.x * blockDim.x;
  uint4 acc = make_uint4(0, 0, 0, 0);
  u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  for (; v + g < nvec; v += 2 * g) {
    uint4 x0[MAXR], x1[MAXR];
#pragma unroll
    for (int k = 0; k < MAXR; ++k) {
      if (k < p.np) {
        x0[k] = NC ? ld_nc(p.src[k] + v) : p.src[k][v];
        x1[k] = NC ? ld_nc(p.src[k] + v + g) : p.src[k][v + g];
      }
    }
    if (WRITE) {
#pragma unroll
      for (int k = 0; k < MAXR; ++k) {
        if (k < p.np) {
          p.dst[(k + 1) % p.np][v] = x0[k];
          p.dst[(k + 1) % p.np][v + g] = x1[k];
        }
      }
    }
#pragma unroll
    for (int k = 0; k < MAXR; ++k) {
      if (k < p.np) {
        acc.x ^= x0[k].x ^ x1[k].x;
        acc.y ^= x0[k].y ^ x1[k].y;
        acc.z ^= x0[k].z ^ x1[k].z;
        acc.w ^= x0[k].w ^ x1[k].w;
      }
    }
  }
  for (; v < nvec; v += g)
    for (int k = 0; k < p.np; ++k) acc.x ^= p.src[k][v].x;
  sink[(u64)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void lsu_store(Peers p, u64 nvec) {
  const u64 g = (u64)gridDim.x * blockDim.x;
  for (u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += g) {
    const uint4 x = make_uint4((u32)v, 1, 2, 3);
    for (int k = 0; k < p.np; ++k) p.dst[k][v] = x;
  }
}

// ---- TMA bulk reads ----
constexpr int STAGES = 4;

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return (u32)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra W;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, u32 bytes, u64* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Chunk c (of `chunk` bytes) of the whole read: peer c % np, offset (c / np) * chunk.
template <bool WRITE>
__global__ void tma_read(Peers p, u64 bytes_per_peer, u32 chunk, uint4* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ u64 bars[STAGES];
  const u64 per_peer = bytes_per_peer / chunk;
  const u64 nchunks = per_peer * p.np;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbar_init(&bars[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](u64 c, int s) {
    const u64 k = c % p.np, off = (c / p.np) * chunk;
    mbar_expect_tx(&bars[s], chunk);
    bulk_load(smem + (u64)s * chunk, reinterpret_cast<const unsigned char*>(p.src[k]) + off, chunk,
              &bars[s]);
  };
  // chunks of this block: blockIdx.x + i * gridDim.x, i = 0, 1, ...
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      const u64 c = blockIdx.x + (u64)s * gridDim.x;
      if (c < nchunks) issue(c, s);
    }
  }
  uint4 acc = make_uint4(0, 0, 0, 0);
  u32 i = 0;
  for (u64 c = blockIdx.x; c < nchunks; c += gridDim.x, ++i) {
    const int s = i % STAGES;
    mbar_wait(&bars[s], (i / STAGES) & 1);
    const uint4* b = reinterpret_cast<const uint4*>(smem + (u64)s * chunk);
    const u64 k = c % p.np, off = (c / p.np) * chunk / 16;
    for (u32 j = threadIdx.x; j < chunk / 16; j += blockDim.x) {
      const uint4 x = b[j];
      if (WRITE) p.dst[(k + 1) % p.np][off + j] = x;
      acc.x ^= x.x;
      acc.y ^= x.y;
      acc.z ^= x.z;
      acc.w ^= x.w;
    }
    __syncthreads();  // every thread is done with stage s
    if (threadIdx.x == 0) {
      const u64 nc = c + (u64)STAGES * gridDim.x;
      if (nc < nchunks) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        issue(nc, s);
      }
    }
  }
  sink[(u64)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

struct Gpu {
  cudaStream_t s;
  uint4* buf;   // B bytes: read by the peers (B / (N-1) by each), written by them (store)
  uint4* sink;  // per-thread results
  cudaEvent_t e0, e1;
  int sms;
};

enum Kind { LSU, LSU_NC, TMA, STORE, LSU_RW, TMA_RW };
struct Variant {
  const char* name;
  Kind kind;
  int blocks_per_sm;
  u32 chunk;  // tma
};

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  require_gpus(n);
  enable_peers(n);
  const u64 cap = 256ull << 20;
  std::vector<Gpu> g(n);
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaStreamCreateWithFlags(&g[d].s, cudaStreamNonBlocking));
    CK(cudaMalloc(&g[d].buf, cap + (1 << 20)));
    CK(cudaMemset(g[d].buf, d + 1, cap + (1 << 20)));
    CK(cudaMalloc(&g[d].sink, 4 * 132 * 1024 * 16));
    CK(cudaEventCreate(&g[d].e0));
    CK(cudaEventCreate(&g[d].e1));
    CK(cudaDeviceGetAttribute(&g[d].sms, cudaDevAttrMultiProcessorCount, d));
    CK(cudaFuncSetAttribute(tma_read<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            STAGES * 32 * 1024));
    CK(cudaFuncSetAttribute(tma_read<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            STAGES * 32 * 1024));
  }
  const Variant vars[] = {
      {"lsu", LSU, 1, 0},          {"lsu x2", LSU, 2, 0},        {"lsu_nc", LSU_NC, 1, 0},
      {"tma 4K", TMA, 1, 4096},    {"tma 16K", TMA, 1, 16384},   {"tma 32K", TMA, 1, 32768},
      {"tma 16K x2", TMA, 2, 16384}, {"store", STORE, 1, 0},
      // read and store the same bytes into another peer (the pull kernels' mix)
      {"lsu+st", LSU_RW, 1, 0},    {"tma 4K+st", TMA_RW, 1, 4096},
  };
  const u64 sizes[] = {4ull << 20, 16ull << 20, 64ull << 20, 256ull << 20};
  printf("# peer_read: %d GPUs, every GPU reads B bytes (B/%d from each peer) at once; "
         "GB/s per GPU (slowest GPU), median of 5\n",
         n, n - 1);
  printf("%-12s", "variant");
  for (u64 b : sizes) printf(" %10lluM", b >> 20);
  printf("\n");
  for (const Variant& v : vars) {
    printf("%-12s", v.name);
    for (u64 B : sizes) {
      const u64 per_peer = (B / (n - 1)) / 32768 * 32768;  // whole chunks
      const u64 total = per_peer * (n - 1);
      const int reps = B <= (16ull << 20) ? 40 : 10;
      std::vector<double> runs;
      for (int rep = 0; rep < 5; ++rep) {
        for (int d = 0; d < n; ++d) {
          CK(cudaSetDevice(d));
          Peers p{};
          p.np = 0;
          for (int q = 0; q < n; ++q) {
            if (q == d) continue;
            // peer q's buffer; the store variant writes slot d of it
            p.src[p.np] = g[q].buf;
            p.dst[p.np] = g[q].buf + (u64)d * (per_peer / 16) % (cap / 16 - per_peer / 16 + 1);
            ++p.np;
          }
          const int blocks = g[d].sms * v.blocks_per_sm;
          CK(cudaEventRecord(g[d].e0, g[d].s));
          for (int r = 0; r < reps; ++r) {
            switch (v.kind) {
              case LSU: lsu_read<false, false><<<blocks, 512, 0, g[d].s>>>(p, per_peer / 16, g[d].sink); break;
              case LSU_NC: lsu_read<true, false><<<blocks, 512, 0, g[d].s>>>(p, per_peer / 16, g[d].sink); break;
              case LSU_RW: lsu_read<false, true><<<blocks, 512, 0, g[d].s>>>(p, per_peer / 16, g[d].sink); break;
              case TMA:
                tma_read<false><<<blocks, 256, STAGES * v.chunk, g[d].s>>>(p, per_peer, v.chunk, g[d].sink);
                break;
              case TMA_RW:
                tma_read<true><<<blocks, 256, STAGES * v.chunk, g[d].s>>>(p, per_peer, v.chunk, g[d].sink);
                break;
              case STORE: lsu_store<<<blocks, 512, 0, g[d].s>>>(p, per_peer / 16); break;
            }
            CK(cudaGetLastError());
          }
          CK(cudaEventRecord(g[d].e1, g[d].s));
        }
        const double worst = slowest_ms(g) / reps;
        runs.push_back(total / (worst * 1e-3) / 1e9);
      }
      std::sort(runs.begin(), runs.end());
      printf(" %11.1f", runs[2]);
      fflush(stdout);
    }
    printf("\n");
  }
  return 0;
}
