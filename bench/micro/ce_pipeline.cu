// ce_pipeline.cu — can the copy engines carry commhal's large transfers faster than SM
// stores? Cited by docs/performance.md (Copy engines).
//
// One copy-engine (CE) copy per peer runs at 388 GB/s (send/recv, 1 GiB,
// 4 GPUs) against 361 for the store kernels, but the CE path then ran every collective
// all-pairs (three peers at once: 204 GB/s) and unpipelined. The chains (broadcast,
// reduce) and the ring all-reduce only ever send to one peer at a time, so they could
// ride the CE rate if a pipeline of chunk copies, ordered across GPUs by 32-bit stream
// memory operations (cuStreamWaitValue32 / cuStreamWriteValue32), costs little. Parts:
//
//   1. ring permutation (GPU d -> d+1), every GPU at once, GB/s per GPU (slowest GPU):
//      sm_st (16-byte SM stores, as the ring/chain kernels), ce push (one cudaMemcpyAsync
//      on the sender's stream), ce K (chunks of K back to back), ce K+write (each chunk
//      followed by a write of the peer's flag), ce K+ops (and preceded by a satisfied
//      wait), "x S": chunk i on copy stream i % S.
//   2. broadcast chain 0 -> 1 -> ... -> N-1 by CE chunks (each hop forwards chunk k once
//      it arrived), µs per call.
//   3. reduce chain 0 -> ... -> N-1 (root N-1), f32: every middle GPU adds its input to
//      the arrived chunk with a small kernel on a compute stream, its copy streams send
//      the sum on; µs per call.
//   4. ring all-reduce (reduce-scatter then all-gather, N-1 steps each) by CE chunks and
//      per-chunk reduce kernels, f32; µs per call and busbw.
// Parts 2-4 put chunk k on copy stream k % S (S = 2, 4), each stream with its own
// arrival counters (a counter is written by one stream, in order), and run one host
// thread per GPU (as commhal's one process per GPU), each call with a start handshake
// (the receiver tells its sender its buffers are free), R calls back to back after one
// warm-up; time = wall clock / R, so the host's enqueue cost is included. Results are
// checked (0 wrong expected).
//
// One copy stream (the source of commit 461474c): the CE
// push copy runs at 392 GB/s per GPU on 4 GPUs (1 GiB) against 365.5 for SM stores and
// 367.6 for TMA bulk stores (shared memory -> peer, 32 KiB stages), but every chunk
// fenced by stream memory operations cost ~7-8 µs of idle engine (2 MiB chunks: 166
// GB/s), so the one-stream chains and ring lost to the SM kernels.
// Chunking alone costs ~3 µs per copy (8 MiB chunks back to
// back, no memory operations: 341 GB/s), a flag write after each ~4 more (307), the wait
// before it ~1.5 more (288); spreading the chunks over 2 copy streams recovers little
// (303). So the copy engines pay only as one large copy per peer: commhal routes 2-rank
// broadcast and send/recv to them from a tuned size (128 MiB on these machines).
// Bigger chunks (CE_PARTS / CE_CHUNKS pick parts and chunk sizes): part 4 with bigger chunks, 4 GPUs, 1 GiB: 16M x 2 4899 µs
// (329 GB/s busbw), 32M x 2 4548 (354), 64M x 2 4405 (366), 128M x 2 4574 (352: with two
// chunks per segment a step waits for the reduce of the whole previous chunk); x 4
// streams no better. ~12 µs per chunk stays, so the all-copy-engine ring does not beat
// the library's ring kernel + copy-engine tail (4360 µs = 369.4 GB/s in the same run).
//
// Build: nvcc -O3 -std=c++20 -arch=sm_90 -o ce_pipeline ce_pipeline.cu -lcuda ; run: ./ce_pipeline [N]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "micro_common.h"

static void wait32(cudaStream_t s, const u32* flag, u32 v) {
  CU(cuStreamWaitValue32((CUstream)s, (CUdeviceptr)flag, v, CU_STREAM_WAIT_VALUE_GEQ));
}
static void write32(cudaStream_t s, u32* flag, u32 v) {
  CU(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)flag, v, CU_STREAM_WRITE_VALUE_DEFAULT));
}

// ---------------- kernels ----------------
__global__ void add_f32(const float4* a, const float4* b, float4* out, u64 nvec) {
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < nvec; i += (u64)gridDim.x * blockDim.x) {
    const float4 x = a[i], y = b[i];
    out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}

// ---------------- per-GPU state ----------------
constexpr int MAXS = 4;  // copy streams per GPU
static int NS = 1;       // copy streams in use: chunk k goes on stream k % NS
struct Gpu {
  cudaStream_t cp[MAXS], cmp;  // copy streams, compute (and join) stream
  cudaEvent_t e0, e1, fork, cp_done[MAXS];
  float* in;      // input (f32)
  float* out;     // output / broadcast buffer
  float* land;    // landing area written by the upstream GPU
  float* send;    // partial sums to send on
  u32* flags;     // see F_*: one arrival counter per copy stream (each written in order)
  int sms;
  unsigned long long* wrong;
};
enum { F_ARR = 0, F_ARR_AG = 4, F_RED = 8, F_READY = 9, F_SCRATCH = 12, F_N = 20 };

static u64 CAP = 1ull << 30;

static void add_launch(cudaStream_t s, const float* a, const float* b, float* o, u64 bytes) {
  const u64 nvec = bytes / 16;
  const u64 blocks = std::min<u64>(std::max<u64>(nvec / 512, 1), 528);
  add_f32<<<(u32)blocks, 512, 0, s>>>((const float4*)a, (const float4*)b, (float4*)o, nvec);
  CK(cudaGetLastError());
}

struct Shape {
  int n;
  u64 bytes;
  u64 chunk;
};

// The compute stream waits for the copy streams' previous call (its buffers are free).
static void join_prev(Gpu& me) {
  for (int s = 0; s < NS; ++s) CK(cudaStreamWaitEvent(me.cmp, me.cp_done[s], 0));
}
static void mark_end(Gpu& me) {
  for (int s = 0; s < NS; ++s) {
    CK(cudaEventRecord(me.cp_done[s], me.cp[s]));
    CK(cudaStreamWaitEvent(me.cmp, me.cp_done[s], 0));
  }
}
// value of the arrival counter of stream k % NS after chunk k (of m per call) of call it
static u32 arr(u32 it, u32 m, u32 k) { return it * (m / NS) + k / NS + 1; }

// One call of the broadcast chain (root 0) on GPU d, iteration it (flags grow forever).
static void bcast_call(std::vector<Gpu>& g, const Shape& sh, int d, u32 it) {
  const int n = sh.n;
  const u32 m = (u32)(sh.bytes / sh.chunk);
  Gpu& me = g[d];
  join_prev(me);
  // my buffer is free: tell the upstream GPU (after my previous forwards finished)
  if (d > 0) write32(me.cmp, &g[d - 1].flags[F_READY], it + 1);
  if (d < n - 1) {
    for (int s = 0; s < NS; ++s) wait32(me.cp[s], &me.flags[F_READY], it + 1);
    for (u32 k = 0; k < m; ++k) {
      cudaStream_t st = me.cp[k % NS];
      if (d > 0) wait32(st, &me.flags[F_ARR + k % NS], arr(it, m, k));
      const u64 off = (u64)k * sh.chunk;
      CK(cudaMemcpyAsync((char*)g[d + 1].out + off, (char*)me.out + off, sh.chunk, cudaMemcpyDeviceToDevice, st));
      write32(st, &g[d + 1].flags[F_ARR + k % NS], arr(it, m, k));
    }
  } else {
    for (int s = 0; s < NS; ++s) wait32(me.cmp, &me.flags[F_ARR + s], arr(it, m, m - NS + s));
  }
  mark_end(me);
}

// Reduce chain 0 -> 1 -> ... -> n-1 (root n-1), f32.
static void reduce_call(std::vector<Gpu>& g, const Shape& sh, int d, u32 it) {
  const int n = sh.n;
  const u32 m = (u32)(sh.bytes / sh.chunk);
  Gpu& me = g[d];
  join_prev(me);
  if (d > 0) write32(me.cmp, &g[d - 1].flags[F_READY], it + 1);
  if (d < n - 1)
    for (int s = 0; s < NS; ++s) wait32(me.cp[s], &me.flags[F_READY], it + 1);
  for (u32 k = 0; k < m; ++k) {
    const u64 off = (u64)k * sh.chunk;
    cudaStream_t st = me.cp[k % NS];
    const char* src = (const char*)me.in + off;
    if (d > 0) {
      wait32(me.cmp, &me.flags[F_ARR + k % NS], arr(it, m, k));
      float* o = (float*)((char*)(d == n - 1 ? me.out : me.send) + off);
      add_launch(me.cmp, (const float*)((char*)me.land + off), (const float*)src, o, sh.chunk);
      write32(me.cmp, &me.flags[F_RED], it * m + k + 1);
      src = (const char*)o;
    }
    if (d < n - 1) {
      if (d > 0) wait32(st, &me.flags[F_RED], it * m + k + 1);
      CK(cudaMemcpyAsync((char*)g[d + 1].land + off, src, sh.chunk, cudaMemcpyDeviceToDevice, st));
      write32(st, &g[d + 1].flags[F_ARR + k % NS], arr(it, m, k));
    }
  }
  mark_end(me);
}

// Ring all-reduce: reduce-scatter then all-gather, segments of bytes/n, chunks within.
static void allreduce_call(std::vector<Gpu>& g, const Shape& sh, int d, u32 it) {
  const int n = sh.n;
  const u64 seg = sh.bytes / n;
  const u32 m = (u32)(seg / sh.chunk);
  const u32 per = (u32)(n - 1) * m;  // chunks per phase per call
  Gpu& me = g[d];
  Gpu& nx = g[(d + 1) % n];
  Gpu& pv = g[(d + n - 1) % n];
  auto segof = [&](int s) { return (u64)(((s % n) + n) % n) * seg; };
  join_prev(me);
  write32(me.cmp, &pv.flags[F_READY], it + 1);
  for (int s = 0; s < NS; ++s) wait32(me.cp[s], &me.flags[F_READY], it + 1);
  // compute stream: reduce-scatter steps 1..n-1 (n-1: the final sum into the output);
  // copy streams: rs steps 0..n-2, then all-gather steps 0..n-2. Chunk (j, k) of a phase
  // is number q = j*m + k; it goes on stream k % NS (m is a multiple of NS).
  for (int j = 0; j < n - 1; ++j) {
    const u64 sseg = segof(d - j);  // segment sent at step j
    for (u32 k = 0; k < m; ++k) {
      const u64 off = (u64)k * sh.chunk;
      const u32 q = (u32)j * m + k;
      cudaStream_t st = me.cp[k % NS];
      const char* src;
      if (j == 0) {
        src = (const char*)me.in + sseg + off;
      } else {
        wait32(st, &me.flags[F_RED], it * per + q - m + 1);
        src = (const char*)me.send + (u64)(j - 1) * seg + off;
      }
      CK(cudaMemcpyAsync((char*)nx.land + (u64)j * seg + off, src, sh.chunk, cudaMemcpyDeviceToDevice, st));
      write32(st, &nx.flags[F_ARR + k % NS], arr(it, per, q));
      // the chunk that arrives from the upstream GPU at this step: segment d-j-1
      wait32(me.cmp, &me.flags[F_ARR + k % NS], arr(it, per, q));
      const u64 rseg = segof(d - j - 1);
      float* o = j == n - 2 ? (float*)((char*)me.out + rseg + off) : (float*)((char*)me.send + (u64)j * seg + off);
      add_launch(me.cmp, (const float*)((char*)me.land + (u64)j * seg + off), (const float*)((char*)me.in + rseg + off),
                 o, sh.chunk);
      write32(me.cmp, &me.flags[F_RED], it * per + q + 1);
    }
  }
  for (int j = 0; j < n - 1; ++j) {
    const u64 sseg = segof(d + 1 - j);
    for (u32 k = 0; k < m; ++k) {
      const u64 off = (u64)k * sh.chunk;
      const u32 q = (u32)j * m + k;
      cudaStream_t st = me.cp[k % NS];
      if (j == 0)
        wait32(st, &me.flags[F_RED], it * per + (u32)(n - 2) * m + k + 1);
      else
        wait32(st, &me.flags[F_ARR_AG + k % NS], arr(it, per, q - m));
      CK(cudaMemcpyAsync((char*)nx.out + sseg + off, (char*)me.out + sseg + off, sh.chunk, cudaMemcpyDeviceToDevice,
                         st));
      write32(st, &nx.flags[F_ARR_AG + k % NS], arr(it, per, q));
    }
  }
  for (int s = 0; s < NS; ++s) wait32(me.cmp, &me.flags[F_ARR_AG + s], arr(it, per, per - NS + s));
  mark_end(me);
}

typedef void (*CallFn)(std::vector<Gpu>&, const Shape&, int, u32);

// R calls after one warm-up, one host thread per GPU; µs per call (median of 3 runs).
static double time_calls(std::vector<Gpu>& g, const Shape& sh, CallFn f, int R, u32& it) {
  const int n = sh.n;
  std::vector<double> runs;
  for (int rep = 0; rep < 3; ++rep) {
    std::barrier<> bar(n + 1);
    const u32 base = it;
    std::vector<std::thread> ts;
    for (int d = 0; d < n; ++d) {
      ts.emplace_back([&, d] {
        CK(cudaSetDevice(d));
        f(g, sh, d, base);  // warm-up
        CK(cudaStreamSynchronize(g[d].cmp));
        bar.arrive_and_wait();
        for (int r = 1; r <= R; ++r) f(g, sh, d, base + r);
        CK(cudaStreamSynchronize(g[d].cmp));
        bar.arrive_and_wait();
      });
    }
    bar.arrive_and_wait();
    const auto t0 = std::chrono::steady_clock::now();
    bar.arrive_and_wait();
    const auto t1 = std::chrono::steady_clock::now();
    for (auto& t : ts) t.join();
    it = base + R + 1;
    runs.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / R);
  }
  std::sort(runs.begin(), runs.end());
  return runs[1];
}

static u64 check(std::vector<Gpu>& g, int n, int only, u64 bytes, float v) {
  u64 total = 0;
  for (int d = 0; d < n; ++d) {
    if (only >= 0 && d != only) continue;
    total += count_on(d, g[d].wrong, [&] { count_wrong_f32<<<264, 512>>>(g[d].out, bytes / 4, v, g[d].wrong); });
  }
  return total;
}

static void reset_out(std::vector<Gpu>& g, int n) {
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMemset(g[d].out, 0xff, CAP));
    CK(cudaDeviceSynchronize());
  }
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 4;
  require_gpus(n);
  enable_peers(n);
  CU(cuInit(0));
  std::vector<Gpu> g(n);
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    Gpu& x = g[d];
    for (int s = 0; s < MAXS; ++s) {
      CK(cudaStreamCreateWithFlags(&x.cp[s], cudaStreamNonBlocking));
      CK(cudaEventCreateWithFlags(&x.cp_done[s], cudaEventDisableTiming));
    }
    CK(cudaStreamCreateWithFlags(&x.cmp, cudaStreamNonBlocking));
    CK(cudaEventCreate(&x.e0));
    CK(cudaEventCreate(&x.e1));
    CK(cudaEventCreateWithFlags(&x.fork, cudaEventDisableTiming));
    CK(cudaMalloc(&x.in, CAP));
    CK(cudaMalloc(&x.out, CAP));
    CK(cudaMalloc(&x.land, CAP));
    CK(cudaMalloc(&x.send, CAP));
    CK(cudaMalloc(&x.flags, F_N * 4));
    CK(cudaMemset(x.flags, 0, F_N * 4));
    CK(cudaMalloc(&x.wrong, 8));
    CK(cudaDeviceGetAttribute(&x.sms, cudaDevAttrMultiProcessorCount, d));
    fill_f32<<<264, 512>>>(x.in, CAP / 4, (float)(d + 1));
    CK(cudaDeviceSynchronize());
  }

  // CE_PARTS (digits, default "1234") picks the parts; CE_CHUNKS (MiB, comma separated,
  // default "2,4,8,16") the chunk sizes of parts 2-4 (32..128 MiB also work).
  const char* parts_env = getenv("CE_PARTS");
  const std::string run_parts = parts_env ? parts_env : "1234";
  std::vector<u64> chunks;
  {
    const char* c = getenv("CE_CHUNKS");
    std::string list = c ? c : "2,4,8,16";
    size_t pos = 0;
    while (pos < list.size()) {
      size_t end = list.find(',', pos);
      if (end == std::string::npos) end = list.size();
      chunks.push_back(std::stoull(list.substr(pos, end - pos)) << 20);
      pos = end + 1;
    }
  }

  // ---- part 1: ring permutation ----
  if (run_parts.find('1') != std::string::npos) {
  printf("# ce_pipeline: %d GPUs\n# part 1: ring permutation d -> d+1, every GPU at once; GB/s per GPU (slowest), median of 5\n", n);
  const u64 sizes1[] = {64ull << 20, 256ull << 20, 1ull << 30};
  printf("%-16s", "variant");
  for (u64 b : sizes1) printf(" %9lluM", b >> 20);
  printf("\n");
  struct V1 {
    const char* name;
    int kind;  // 0 sm, 2 ce push, 4 ce push chunked + ops, 5 chunked plain, 6 chunked + write only
    u64 k;
    int ns;    // copy streams (chunk i on stream i % ns)
  };
  const V1 v1[] = {{"sm_st", 0, 0, 1},          {"ce push", 2, 0, 1},         {"ce 8M", 5, 8 << 20, 1},
                   {"ce 8M+write", 6, 8 << 20, 1}, {"ce 8M+ops", 4, 8 << 20, 1}, {"ce 2M+ops x2", 4, 2 << 20, 2},
                   {"ce 8M+ops x2", 4, 8 << 20, 2}, {"ce 2M+ops x4", 4, 2 << 20, 4}, {"ce 8M+ops x4", 4, 8 << 20, 4}};
  u32 seq = 0;
  for (const V1& v : v1) {
    for (int d = 0; d < n; ++d) {  // so a variant that skips a region shows up
      CK(cudaSetDevice(d));
      CK(cudaMemset(g[d].land, 0, CAP));
      CK(cudaDeviceSynchronize());
    }
    printf("%-16s", v.name);
    for (u64 B : sizes1) {
      std::vector<double> runs;
      const int reps = B <= (64ull << 20) ? 20 : 5;
      for (int rep = 0; rep < 5; ++rep) {
        for (int d = 0; d < n; ++d) {
          CK(cudaSetDevice(d));
          Gpu& me = g[d];
          const int nxd = (d + 1) % n;
          CK(cudaEventRecord(me.e0, me.cp[0]));
          CK(cudaEventRecord(me.fork, me.cp[0]));
          for (int q = 1; q < v.ns; ++q) CK(cudaStreamWaitEvent(me.cp[q], me.fork, 0));
          for (int r = 0; r < reps; ++r) {
            switch (v.kind) {
              case 0:
                grid_copy<0><<<me.sms, 512, 0, me.cp[0]>>>((const uint4*)me.in, (uint4*)g[nxd].land, B / 16);
                break;
              case 2:
                CK(cudaMemcpyAsync(g[nxd].land, me.in, B, cudaMemcpyDeviceToDevice, me.cp[0]));
                break;
              default: {
                u64 i = 0;
                for (u64 off = 0; off < B; off += v.k, ++i) {
                  cudaStream_t st = me.cp[i % v.ns];
                  if (v.kind == 4) wait32(st, &me.flags[F_SCRATCH], 0);
                  CK(cudaMemcpyAsync((char*)g[nxd].land + off, (char*)me.in + off, v.k, cudaMemcpyDeviceToDevice, st));
                  if (v.kind != 5) write32(st, &g[nxd].flags[F_SCRATCH + 1 + i % v.ns], ++seq);
                }
                break;
              }
            }
            CK(cudaGetLastError());
          }
          for (int q = 1; q < v.ns; ++q) {
            CK(cudaEventRecord(me.cp_done[q], me.cp[q]));
            CK(cudaStreamWaitEvent(me.cp[0], me.cp_done[q], 0));
          }
          CK(cudaEventRecord(me.e1, me.cp[0]));
        }
        const double worst = slowest_ms(g) / reps;
        runs.push_back(B / (worst * 1e-3) / 1e9);
      }
      std::sort(runs.begin(), runs.end());
      printf(" %10.1f", runs[2]);
      fflush(stdout);
    }
    // the permutation check (the largest size covers the buffer): GPU d+1's landing
    // holds GPU d's input (d+1 as f32)
    unsigned long long bad = 0;
    for (int d = 0; d < n; ++d) {
      const float want = (float)(((d + n - 1) % n) + 1);
      bad += count_on(d, g[d].wrong, [&] { count_wrong_f32<<<264, 512>>>(g[d].land, CAP / 4, want, g[d].wrong); });
    }
    printf("   %llu wrong\n", bad);
  }
  }

  // ---- parts 2-4 ----
  u32 it = 1;
  const u64 sizes[] = {64ull << 20, 256ull << 20, 1ull << 30};
  const int streams[] = {2, 4};
  struct P {
    const char* name;
    CallFn f;
    int part;
  };
  const P parts[] = {{"bcast chain", bcast_call, 2}, {"reduce chain", reduce_call, 3}, {"ring allreduce", allreduce_call, 4}};
  for (const P& p : parts) {
    if (run_parts.find((char)('0' + p.part)) == std::string::npos) continue;
    printf("# part %d: %s by CE chunks, %d GPUs; µs per call (wall clock / R, median of 3)%s\n", p.part, p.name, n,
           p.part == 4 ? "; busbw GB/s in ()" : "");
    printf("%-14s", "chunk x streams");
    for (u64 b : sizes) printf(" %14lluM", b >> 20);
    printf("\n");
    for (int ns : streams)
    for (u64 C : chunks) {
      NS = ns;
      printf("%5lluM x %d      ", C >> 20, ns);
      for (u64 B : sizes) {
        Shape sh{n, B, C};
        const u64 whole = p.part == 4 ? B / n : B;  // what is cut into chunks
        if (whole % C || (whole / C) % NS) {
          printf(" %15s", "-");
          continue;
        }
        // flags restart from 0 per shape (counters are per call index)
        for (int d = 0; d < n; ++d) {
          CK(cudaSetDevice(d));
          CK(cudaMemset(g[d].flags, 0, F_N * 4));
          CK(cudaDeviceSynchronize());
        }
        if (p.part == 2) {
          CK(cudaSetDevice(0));
          CK(cudaMemcpy(g[0].out, g[0].in, B, cudaMemcpyDeviceToDevice));
        }
        it = 0;
        const int R = B >= (1ull << 30) ? 5 : B >= (256ull << 20) ? 10 : 30;
        const double us = time_calls(g, sh, p.f, R, it);
        if (p.part == 4)
          printf(" %7.1f (%5.1f)", us, 2.0 * (n - 1) / n * B / (us * 1e-6) / 1e9);
        else
          printf(" %15.1f", us);
        fflush(stdout);
      }
      printf("\n");
    }
    // correctness at 256M, 8M chunks, 4 streams
    NS = 4;
    Shape sh{n, 256ull << 20, 8ull << 20};
    reset_out(g, n);
    if (p.part == 2) {
      CK(cudaSetDevice(0));
      CK(cudaMemcpy(g[0].out, g[0].in, sh.bytes, cudaMemcpyDeviceToDevice));
    }
    for (int d = 0; d < n; ++d) {
      CK(cudaSetDevice(d));
      CK(cudaMemset(g[d].flags, 0, F_N * 4));
      CK(cudaDeviceSynchronize());
    }
    {
      std::vector<std::thread> ts;
      for (int d = 0; d < n; ++d)
        ts.emplace_back([&, d] {
          CK(cudaSetDevice(d));
          p.f(g, sh, d, 0);
          CK(cudaStreamSynchronize(g[d].cmp));
        });
      for (auto& t : ts) t.join();
    }
    const float want = p.part == 2 ? 1.0f : (float)(n * (n + 1) / 2);
    const u64 bad = check(g, n, p.part == 3 ? n - 1 : -1, sh.bytes, want);
    printf("# part %d check (256M, 8M chunks, 4 streams): %llu wrong\n", p.part, (unsigned long long)bad);
  }
  return 0;
}
