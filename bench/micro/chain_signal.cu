// chain_signal.cu — does the per-round flag of a store pipeline have to stall the block
// that moves the data? Cited by docs/performance.md (Dropped).
//
// commhal's chains and rings (coll_nvlink.cu) end every round of a block with
// __syncthreads + a system-scope release of the round's flag by thread 0: the whole block
// waits until its stores of the round are acknowledged by the peer (~1-2 µs over NVLink)
// before it starts the next round. The bytes in flight per block are then one round, so
// small rounds lose bandwidth and big rounds lose pipeline fill; with a flag costing
// the round trip L (~2 µs) one derives T >= S/BW + 2 sqrt(S L / BW) from that. If only one warp waited for the
// acknowledgement while the others went on copying, the bound would be S/BW plus a fill
// of one small round per hop. Whether that works depends on how the hardware implements
// the release: if the fence waits for every store of the SM still in flight (including
// the ones the other warps keep issuing), the signalling warp lags and the pipeline
// fills late instead.
//
// The pattern: a broadcast chain 0 -> 1 -> ... -> N-1 of S bytes (as
// commhal_coll_broadcast_chain), one block per SM, chunk c of C bytes owned by block
// c mod G, a start barrier per iteration (as the kernels' START barrier), ITERS
// iterations per launch (per-iteration time = launch time / ITERS), or with `launch` as the
// second argument one launch per iteration, back to back (the launch cost included, as in
// commhal's bench).
//
//   sync     as commhal's chains: thread 0 waits for the incoming flag, __syncthreads, all
//            512 threads copy the chunk into the next GPU, __syncthreads, thread 0
//            st.release.sys the outgoing flag.
//   async    warp 0 lane 0 waits for the incoming flags and publishes "round k arrived"
//            in shared memory (st.release.cta); warps 2..15 copy round k as soon as it
//            arrived, meet in a named barrier of their own (bar.sync 1, 448: no
//            fence) and one of them publishes "round k copied" (st.release.cta);
//            warp 1 lane 0 waits for that (ld.acquire.cta), then st.release.sys the
//            outgoing flag. The copiers never wait for a flag to be published.
//            Ordering (PTX memory model): copier store -> bar.sync -> release.cta ->
//            signaler's acquire.cta -> release.sys flag -> the next GPU's acquire.sys
//            -> its loads: causality order, as __syncthreads + thread 0's release.
//   plain    every GPU but the last stores S bytes into the next GPU, no flags: the
//            permutation's bandwidth with the same barrier (the floor).
//
// What it showed (4 x H200):
//   - async is no faster than sync at any size or chunk, and slower from 16 MiB (16 MiB,
//     32 KiB chunks: 63.9 vs 55.4 µs; 64 KiB: 143 vs 62.6), so handing the release to one warp does not take
//     it off the critical path: the signalling warp's fence seems to wait for the
//     stores the copiers keep issuing. commhal keeps __syncthreads + thread 0.
//   - Careful with the in-launch numbers: the per-iteration barrier pairs block b with
//     block b only, so blocks drift into the next iteration while slow blocks finish
//     and the pipeline fill of one iteration overlaps the drain of the previous one.
//     The sync chain reads 55 µs at 16 MiB that way; commhal's broadcast chain, where a
//     launch ends only when every block has finished, takes 76-85 µs (bench, -n 60).
//     `launch` mode queues one launch per iteration, GPU after GPU for every iteration.
//
// Build: nvcc -O3 -arch=sm_90 -o chain_signal chain_signal.cu ; run: ./chain_signal [N [launch]]
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "micro_common.h"

constexpr int THREADS = 512;
constexpr int COPIERS = THREADS - 64;  // async: warps 2..15
constexpr u64 SPIN_NS = 2000000000ull;

struct Args {
  uint4* buf[MAXR];   // per GPU: pos 0's is the source, the others receive
  u64* flags[MAXR];   // per GPU: [G] incoming chain flags (raised by the previous GPU)
  u64* bar[MAXR];     // per GPU: [MAXR][G] start-barrier words
  u32* err;           // this GPU's error word (host-mapped)
  int rank, n, iters, mode;
  u64 nvec, cv;       // vectors in S, vectors per chunk
  u64 epoch0;
};

__device__ __forceinline__ u32 ld_acq_cta(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.cta.shared.u32 %0, [%1];"
               : "=r"(v)
               : "r"((u32)__cvta_generic_to_shared(p))
               : "memory");
  return v;
}
__device__ __forceinline__ void st_rel_cta(u32* p, u32 v) {
  asm volatile("st.release.cta.shared.u32 [%0], %1;" ::"r"((u32)__cvta_generic_to_shared(p)),
               "r"(v)
               : "memory");
}
__device__ __forceinline__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Spin until ready(); false (and this GPU's error word set) after SPIN_NS, or at once
// when another thread gave up first.
template <typename Ready>
__device__ bool spin_until(const Args& a, Ready ready) {
  u64 t0 = 0;
  for (u32 i = 0;; ++i) {
    if (ready()) return true;
    if ((i & 1023) == 0) {
      const u64 t = now_ns();
      if (i == 0) t0 = t;
      else if (t - t0 > SPIN_NS || *(volatile u32*)a.err) {
        atomicExch(a.err, 1u);
        return false;
      }
    }
  }
}
// a flag in global memory (another GPU's release)
__device__ bool wait_ge(const Args& a, const u64* p, u64 v) {
  return spin_until(a, [&] { return ld_acquire_sys(p) >= v; });
}
// a counter in shared memory (another warp of this block)
__device__ bool wait_smem_ge(const Args& a, const u32* p, u32 v) {
  return spin_until(a, [&] { return ld_acq_cta(p) >= v; });
}

__device__ void start_barrier(const Args& a, u64 e) {
  __syncthreads();
  const int t = threadIdx.x;
  if (t < a.n && t != a.rank) {
    st_release_sys(a.bar[t] + (u64)a.rank * gridDim.x + blockIdx.x, e);
    wait_ge(a, a.bar[a.rank] + (u64)t * gridDim.x + blockIdx.x, e);
  }
  __syncthreads();
}

// vectors [c*cv, (c+1)*cv) of src into dst, thread `t` of `nt`, four loads in flight
__device__ __forceinline__ void copy_chunk(const uint4* src, uint4* dst, u64 c, u64 cv, u64 nvec,
                                           u32 t, u32 nt) {
  const u64 b = c * cv, e = min(b + cv, nvec);
  for (u64 v = b + t; v < e; v += 4 * (u64)nt) {
    uint4 x[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (v + u * nt < e) x[u] = src[v + u * nt];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (v + u * nt < e) dst[v + u * nt] = x[u];
    }
  }
}

__global__ void __launch_bounds__(THREADS) chain(Args a) {
  __shared__ u32 s_arrived, s_copied;
  const int pos = a.rank, n = a.n;
  const bool last = pos == n - 1;
  const uint4* src = a.buf[pos];
  uint4* dst = last ? nullptr : a.buf[pos + 1];
  const u64* in_flag = a.flags[pos] + blockIdx.x;
  u64* out_flag = last ? nullptr : a.flags[pos + 1] + blockIdx.x;
  for (int it = 0; it < a.iters; ++it) {
    const u64 e = a.epoch0 + it;
    if (threadIdx.x == 0) {
      s_arrived = 0;
      s_copied = 0;
    }
    start_barrier(a, e);
    if (a.mode == 2) {  // plain
      if (!last) {
        for (u64 c = blockIdx.x; c * a.cv < a.nvec; c += gridDim.x)
          copy_chunk(src, dst, c, a.cv, a.nvec, threadIdx.x, THREADS);
      }
      continue;
    }
    u32 k = 0;
    if (a.mode == 0) {  // sync
      for (u64 c = blockIdx.x; c * a.cv < a.nvec; c += gridDim.x, ++k) {
        const u64 tag = (e << 32) | (k + 1);
        if (pos > 0) {
          if (threadIdx.x == 0) wait_ge(a, in_flag, tag);
          __syncthreads();
        }
        if (last) continue;
        copy_chunk(src, dst, c, a.cv, a.nvec, threadIdx.x, THREADS);
        __syncthreads();
        if (threadIdx.x == 0) st_release_sys(out_flag, tag);
      }
      continue;
    }
    // async
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    u32 rounds = 0;
    for (u64 c = blockIdx.x; c * a.cv < a.nvec; c += gridDim.x) ++rounds;
    if (warp == 0) {
      if (lane == 0 && pos > 0) {
        for (k = 0; k < rounds; ++k) {
          if (!wait_ge(a, in_flag, (e << 32) | (k + 1))) break;
          st_rel_cta(&s_arrived, k + 1);
        }
      }
    } else if (warp == 1) {
      if (lane == 0 && !last) {
        for (k = 0; k < rounds; ++k) {
          if (!wait_smem_ge(a, &s_copied, k + 1)) break;
          st_release_sys(out_flag, (e << 32) | (k + 1));
        }
      }
    } else if (!last) {
      // copiers: a named barrier among themselves per round (no fence), then one of
      // them publishes "round k copied" (a plain counter would let a fast thread's
      // round k+1 stand in for a slow thread's round k)
      const u32 t = threadIdx.x - 64;
      for (u64 c = blockIdx.x; c * a.cv < a.nvec; c += gridDim.x, ++k) {
        if (pos > 0 && !wait_smem_ge(a, &s_arrived, k + 1)) break;
        copy_chunk(src, dst, c, a.cv, a.nvec, t, COPIERS);
        asm volatile("bar.sync 1, %0;" ::"n"(COPIERS) : "memory");
        if (t == 0) st_rel_cta(&s_copied, k + 1);
      }
    }
    __syncthreads();
  }
}

// bytes of buf[0, bytes) that are not `pat`, counted into *bad
__global__ void count_bad(const unsigned char* buf, u64 bytes, unsigned char pat, u64* bad) {
  u64 local = 0;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += (u64)gridDim.x * blockDim.x)
    local += buf[i] != pat;
  if (local) atomicAdd(bad, local);
}

struct Gpu {
  cudaStream_t s;
  cudaEvent_t e0, e1;
  uint4* buf;
  u64* flags;
  u64* bar;
  u32* err;  // host-mapped
};

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 4;
  const bool per_launch = argc > 2 && strcmp(argv[2], "launch") == 0;
  require_gpus(n);
  enable_peers(n);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int G = sms;
  const u64 MAXB = 256ull << 20;
  std::vector<Gpu> g(n);
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaStreamCreateWithFlags(&g[d].s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g[d].e0));
    CK(cudaEventCreate(&g[d].e1));
    CK(cudaMalloc(&g[d].buf, MAXB));
    CK(cudaMemset(g[d].buf, d == 0 ? 0x5a : 0, MAXB));
    CK(cudaMalloc(&g[d].flags, G * sizeof(u64)));
    CK(cudaMemset(g[d].flags, 0, G * sizeof(u64)));
    CK(cudaMalloc(&g[d].bar, (u64)MAXR * G * sizeof(u64)));
    CK(cudaMemset(g[d].bar, 0, (u64)MAXR * G * sizeof(u64)));
    CK(cudaHostAlloc(&g[d].err, sizeof(u32), cudaHostAllocMapped));
    *g[d].err = 0;
    CK(cudaDeviceSynchronize());
  }
  printf("chain_signal: %d GPUs, chain 0 -> %d, %d blocks x %d threads; us per iteration "
         "(slowest GPU, median of 5 repetitions), GB/s = S / time; %s\n",
         n, n - 1, G, THREADS,
         per_launch ? "one launch per iteration (back to back)" : "every iteration in one launch");
  const char* names[3] = {"sync", "async", "plain"};
  const u64 sizes[] = {1ull << 20, 4ull << 20, 16ull << 20, 64ull << 20, 256ull << 20};
  // chunk bytes per block round: sync / plain use 512 threads x u vectors, async 448 x u
  const int unrolls[] = {1, 2, 4, 8};
  u64 epoch = 1;
  // Queue `iters` iterations of `mode` on every GPU: one launch, or (`one_per_iter`)
  // one launch per iteration, GPU after GPU for every launch so no GPU's queue runs
  // far ahead. Every iteration gets the next epoch.
  auto queue = [&](int mode, u64 nvec, u64 cv, int iters, bool one_per_iter) {
    Args a{};
    for (int d = 0; d < n; ++d) {
      a.buf[d] = g[d].buf;
      a.flags[d] = g[d].flags;
      a.bar[d] = g[d].bar;
    }
    a.n = n;
    a.mode = mode;
    a.nvec = nvec;
    a.cv = cv;
    const int launches = one_per_iter ? iters : 1;
    for (int l = 0; l < launches; ++l) {
      for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        a.rank = d;
        CK(cudaHostGetDevicePointer((void**)&a.err, g[d].err, 0));
        a.iters = iters / launches;
        a.epoch0 = epoch + (u64)l * a.iters;
        chain<<<G, THREADS, 0, g[d].s>>>(a);
        CK(cudaGetLastError());
      }
    }
    epoch += iters;
  };
  printf("%-6s %6s %5s %10s %8s\n", "mode", "size", "unrl", "us", "GB/s");
  for (u64 S : sizes) {
    const int iters = S <= (16ull << 20) ? 20 : (S <= (64ull << 20) ? 8 : 3);
    for (int mode = 0; mode < 3; ++mode) {
      for (int u : unrolls) {
        if (mode == 2 && u != 8) continue;
        const u64 cv = (u64)(mode == 1 ? COPIERS : THREADS) * u;
        std::vector<double> t;
        for (int rep = 0; rep < 6; ++rep) {
          for (int d = 0; d < n; ++d) {
            CK(cudaSetDevice(d));
            CK(cudaEventRecord(g[d].e0, g[d].s));
          }
          queue(mode, S / 16, cv, iters, per_launch);
          for (int d = 0; d < n; ++d) {
            CK(cudaSetDevice(d));
            CK(cudaEventRecord(g[d].e1, g[d].s));
          }
          double worst = 0;
          for (int d = 0; d < n; ++d) {
            CK(cudaSetDevice(d));
            CK(cudaEventSynchronize(g[d].e1));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, g[d].e0, g[d].e1));
            worst = std::max(worst, (double)ms * 1e3 / iters);
            if (*g[d].err) {
              fprintf(stderr, "GPU %d: wait timed out (%s S=%llu u=%d)\n", d, names[mode], S, u);
              return 2;
            }
          }
          if (rep > 0) t.push_back(worst);  // rep 0: warm-up
        }
        // check: clear every receiving buffer, one more launch (1 iteration), then the
        // last GPU must hold S bytes of the source pattern (plain: GPU 1, one hop)
        {
          for (int d = 1; d < n; ++d) {
            CK(cudaSetDevice(d));
            CK(cudaMemset(g[d].buf, 0, S));
            CK(cudaDeviceSynchronize());
          }
          queue(mode, S / 16, cv, 1, false);
          for (int d = 0; d < n; ++d) {
            CK(cudaSetDevice(d));
            CK(cudaStreamSynchronize(g[d].s));
          }
          const int chk = mode == 2 ? 1 : n - 1;
          CK(cudaSetDevice(chk));
          u64* bad = nullptr;
          CK(cudaMalloc(&bad, sizeof(u64)));
          CK(cudaMemset(bad, 0, sizeof(u64)));
          count_bad<<<G, 256>>>((const unsigned char*)g[chk].buf, S, 0x5a, bad);
          CK(cudaGetLastError());
          u64 h = 0;
          CK(cudaMemcpy(&h, bad, sizeof(u64), cudaMemcpyDeviceToHost));
          CK(cudaFree(bad));
          if (h) {
            fprintf(stderr, "WRONG: %llu bytes on GPU %d (%s S=%llu u=%d)\n", h, chk, names[mode],
                    S, u);
            return 3;
          }
        }
        std::sort(t.begin(), t.end());
        const double med = t[t.size() / 2];
        printf("%-6s %5lluM %5d %10.2f %8.1f\n", names[mode], S >> 20, u, med, S / med / 1e3);
        fflush(stdout);
      }
    }
  }
  printf("data check: every run above delivered the source pattern (0 wrong bytes)\n");
  return 0;
}
