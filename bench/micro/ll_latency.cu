// ll_latency.cu — where the time of a 1 KiB one-shot LL all-reduce goes. Cited by
// docs/architecture.md (Epochs) and docs/performance.md (Small sizes).
//
// One process, N GPUs (peer access), one stream per GPU. Every variant is a 1 KiB
// (128 LL16 packets, 1 block x 128 threads) one-shot all-reduce like
// commhal_coll_allreduce_ll, or a piece of it; launches are queued behind a gate
// kernel (spinning on mapped host memory) and timed with events, µs per launch =
// elapsed / iterations, the median of 7 repetitions, the slowest GPU.
//
//   cur      epoch ld.relaxed.sys at the start; end: atom.acq_rel.gpu done counter, the
//            last block st.release.sys's the epoch (commhal before fence-free epochs)
//   relaxed  as cur, the last block's epoch store st.relaxed.gpu
//   arg      epoch passed as an argument, block 0 stores it (relaxed), no counter
//   blockep  per-block epoch word (MSCCL++ style): block b loads its own word, bumps it
//   local    as cur without the peers (no NVLink): load epoch, copy in -> out, end
//   empty    griddepcontrol only
//
// Modes: pdl (cudaLaunchKernelEx with programmatic stream serialisation) / plain, and
// graph replays (variants whose epoch lives on the device only).
//
// Build: nvcc -O3 -arch=sm_90 -o ll_latency ll_latency.cu ; run: ./ll_latency [N]
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "micro_common.h"

constexpr u64 BYTES = 1024;
constexpr u64 NPK = BYTES / 8;
constexpr u64 SLOT = NPK * 16;
// scratch: [0] epoch, [8] done, [64 + b*8] per-block epochs, [4096..] slots
constexpr u64 OFF_EP = 0, OFF_DONE = 8, OFF_BEP = 64, OFF_LL = 4096;

struct Args {
  u64 scratch[MAXR];
  u64 in, out;
  u32 rank, n;
  u64 e_arg;
};

__device__ __forceinline__ void pdl_begin() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ u64 ld_relaxed_sys(const u64* p) {
  u64 v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed_gpu(u64* p, u64 v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_v4(void* p, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b),
               "r"(c), "r"(d)
               : "memory");
}
__device__ __forceinline__ void ld_v4(const void* p, u32& a, u32& b, u32& c, u32& d) {
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
               : "l"(p)
               : "memory");
}
__device__ __forceinline__ u32 hadd2(u32 x, u32 y) {
  u32 r;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
  return r;
}

enum { CUR, RELAXED, ARG, BLOCKEP, LOCAL, EMPTY, NV };
static const char* NAMES[NV] = {"cur", "relaxed", "arg", "blockep", "local", "empty"};

template <int V>
__global__ void k_ar(Args a) {
  pdl_begin();
  if (V == EMPTY) return;
  __shared__ u64 s_e;
  u64* ep = reinterpret_cast<u64*>(a.scratch[a.rank] + OFF_EP);
  u64* bep = reinterpret_cast<u64*>(a.scratch[a.rank] + OFF_BEP) + blockIdx.x;
  if (threadIdx.x == 0) {
    if (V == ARG) s_e = a.e_arg;
    else if (V == BLOCKEP) s_e = ld_relaxed_sys(bep) + 1;
    else s_e = ld_relaxed_sys(ep) + 1;
  }
  __syncthreads();
  const u64 e = s_e;
  const u32 flag = (u32)e;
  const u64 par = e & 1;
  const uint2* in = reinterpret_cast<const uint2*>(a.in);
  uint2* out = reinterpret_cast<uint2*>(a.out);
  const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < NPK) {
    const uint2 v = in[i];
    if (V == LOCAL) {
      out[i] = v;
    } else {
      for (u32 p = 0; p < a.n; ++p) {
        if (p == a.rank) continue;
        char* dst = reinterpret_cast<char*>(a.scratch[p] + OFF_LL + (par * MAXR + a.rank) * SLOT);
        st_v4(dst + i * 16, v.x, flag, v.y, flag);
      }
      uint2 acc = make_uint2(0, 0);
      for (u32 p = 0; p < a.n; ++p) {
        uint2 w;
        if (p == a.rank) {
          w = v;
        } else {
          const char* src = reinterpret_cast<const char*>(a.scratch[a.rank] + OFF_LL + (par * MAXR + p) * SLOT);
          u32 d0, f0, d1, f1;
          u64 spins = 0;
          do {
            ld_v4(src + i * 16, d0, f0, d1, f1);
            if (++spins > (1ull << 30)) { asm volatile("trap;"); }
          } while (f0 != flag || f1 != flag);
          w = make_uint2(d0, d1);
        }
        acc.x = p == 0 ? w.x : hadd2(acc.x, w.x);
        acc.y = p == 0 ? w.y : hadd2(acc.y, w.y);
      }
      out[i] = acc;
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (V == ARG) {
    if (blockIdx.x == 0) st_relaxed_gpu(ep, e);
  } else if (V == BLOCKEP) {
    st_relaxed_gpu(bep, e);
  } else {
    u32* done = reinterpret_cast<u32*>(a.scratch[a.rank] + OFF_DONE);
    u32 prev;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(prev) : "l"(done) : "memory");
    if (prev == gridDim.x - 1) {
      *reinterpret_cast<volatile u32*>(done) = 0;
      if (V == RELAXED) st_relaxed_gpu(ep, e);
      else st_release_sys(ep, e);
    }
  }
}

__global__ void k_gate(volatile u32* flag) {
  while (*flag == 0) {
  }
}

typedef void (*KFn)(Args);
static KFn fns[NV] = {k_ar<CUR>, k_ar<RELAXED>, k_ar<ARG>, k_ar<BLOCKEP>, k_ar<LOCAL>, k_ar<EMPTY>};

struct Gpu {
  cudaStream_t s;
  char* scratch;
  char* in;
  char* out;
  cudaEvent_t e0, e1;
};

static void launch(KFn f, const Args& a, cudaStream_t s, bool pdl) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(128);
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  Args b = a;
  CK(cudaLaunchKernelEx(&cfg, f, b));
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  int have = 0;
  CK(cudaGetDeviceCount(&have));
  if (have < n) n = have;
  enable_peers(n);
  const int iters = 40, reps = 7;
  std::vector<Gpu> g(n);
  u32* hflag;
  CK(cudaHostAlloc(&hflag, 4, cudaHostAllocMapped | cudaHostAllocPortable));
  for (int r = 0; r < n; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaStreamCreateWithFlags(&g[r].s, cudaStreamNonBlocking));
    CK(cudaMalloc(&g[r].scratch, 1 << 20));
    CK(cudaMemset(g[r].scratch, 0, 1 << 20));
    CK(cudaMalloc(&g[r].in, BYTES));
    CK(cudaMalloc(&g[r].out, BYTES));
    std::vector<unsigned short> h(BYTES / 2, (unsigned short)(0x3c00 + (r << 10)));  // 1, 2, 4, 8 in f16
    CK(cudaMemcpy(g[r].in, h.data(), BYTES, cudaMemcpyHostToDevice));
    CK(cudaEventCreate(&g[r].e0));
    CK(cudaEventCreate(&g[r].e1));
  }
  u64 e_host = 0;
  auto args = [&](int r) {
    Args a = {};
    for (int p = 0; p < n; ++p) a.scratch[p] = (u64)g[p].scratch;
    a.in = (u64)g[r].in;
    a.out = (u64)g[r].out;
    a.rank = r;
    a.n = n;
    a.e_arg = e_host;
    return a;
  };
  auto sync_all = [&]() {
    for (int r = 0; r < n; ++r) {
      CK(cudaSetDevice(r));
      CK(cudaStreamSynchronize(g[r].s));
    }
  };
  // every repetition starts from a fresh epoch range on every GPU (global and per-block
  // words alike), so no variant ever meets a stale packet with the flag it waits for
  u64 base = 0;
  auto set_epoch = [&]() {
    sync_all();
    base += 100000;
    std::vector<u64> w(OFF_LL / 8, base);
    w[OFF_DONE / 8] = 0;
    for (int r = 0; r < n; ++r) {
      CK(cudaSetDevice(r));
      CK(cudaMemcpy(g[r].scratch, w.data(), OFF_LL, cudaMemcpyHostToDevice));
    }
    e_host = base;
  };
  printf("# ll_latency: %d GPUs, 1 KiB one-shot LL16 all-reduce pieces, us per launch (median of %d x %d)\n",
         n, reps, iters);
  for (int mode = 0; mode < 3; ++mode) {  // 0 plain, 1 pdl, 2 graph (pdl)
    for (int v = 0; v < NV; ++v) {
      if (mode == 2 && v == ARG) continue;
      const bool pdl = mode != 0;
      std::vector<double> t;
      std::vector<cudaGraphExec_t> ge(n, nullptr);
      if (mode == 2) {
        for (int r = 0; r < n; ++r) {
          CK(cudaSetDevice(r));
          cudaGraph_t gr;
          CK(cudaStreamBeginCapture(g[r].s, cudaStreamCaptureModeThreadLocal));
          for (int i = 0; i < iters; ++i) launch(fns[v], args(r), g[r].s, pdl);
          CK(cudaStreamEndCapture(g[r].s, &gr));
          CK(cudaGraphInstantiate(&ge[r], gr, 0));
          CK(cudaGraphDestroy(gr));
        }
      }
      for (int rep = 0; rep < reps + 1; ++rep) {
        set_epoch();
        *(volatile u32*)hflag = 0;
        for (int r = 0; r < n; ++r) {
          CK(cudaSetDevice(r));
          u32* dflag;
          CK(cudaHostGetDevicePointer(&dflag, hflag, 0));
          k_gate<<<1, 1, 0, g[r].s>>>(dflag);
          CK(cudaGetLastError());
          CK(cudaEventRecord(g[r].e0, g[r].s));
        }
        if (mode == 2) {
          for (int r = 0; r < n; ++r) {
            CK(cudaSetDevice(r));
            CK(cudaGraphLaunch(ge[r], g[r].s));
          }
        } else {
          for (int i = 0; i < iters; ++i) {
            ++e_host;
            for (int r = 0; r < n; ++r) {
              CK(cudaSetDevice(r));
              launch(fns[v], args(r), g[r].s, pdl);
            }
          }
        }
        for (int r = 0; r < n; ++r) {
          CK(cudaSetDevice(r));
          CK(cudaEventRecord(g[r].e1, g[r].s));
        }
        *(volatile u32*)hflag = 1;
        sync_all();
        double worst = 0;
        for (int r = 0; r < n; ++r) {
          float ms;
          CK(cudaEventElapsedTime(&ms, g[r].e0, g[r].e1));
          worst = std::max(worst, (double)ms * 1000.0 / iters);
        }
        if (rep > 0) t.push_back(worst);  // the first is a warm-up
      }
      if (v != LOCAL && v != EMPTY) {  // check: every output element = n
        CK(cudaSetDevice(n - 1));
        std::vector<unsigned short> h(BYTES / 2);
        CK(cudaMemcpy(h.data(), g[n - 1].out, BYTES, cudaMemcpyDeviceToHost));
        const unsigned short want = n == 2 ? 0x4200 : n == 4 ? 0x4b80 : 0;  // 3, 15
        int wrong = 0;
        for (auto x : h) wrong += (want && x != want);
        if (wrong) printf("  !! %s: %d wrong\n", NAMES[v], wrong);
      }
      if (mode == 2)
        for (int r = 0; r < n; ++r) CK(cudaGraphExecDestroy(ge[r]));
      std::sort(t.begin(), t.end());
      printf("%-6s %-8s %7.2f us  (min %.2f max %.2f)\n", mode == 0 ? "plain" : mode == 1 ? "pdl" : "graph",
             NAMES[v], t[t.size() / 2], t.front(), t.back());
      fflush(stdout);
    }
  }
  return 0;
}
