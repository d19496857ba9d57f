// ce_reduce.cu — can a 2-rank reduce beat NCCL's one-direction store rate (~370 GB/s)
// with the copy engine (~396 GB/s one direction, mixed_push.cu) carrying the data?
// Cited by docs/performance.md (Copy engines).
//
// A CE reduce chain (ce_pipeline.cu part 3: fixed chunks, a stream wait and a
// separate add kernel per chunk on the root) lost: ~3 µs of stream operations per copy,
// and the last chunk's reduce after the last copy. Here the sender (GPU 1) queues, per
// call: a stream wait for the root's "staging free" flag, then one cudaMemcpyAsync per
// chunk into the root's staging, each followed by a stream write of the chunk's sequence
// number into a flag in the root's memory (CU_STREAM_WRITE_VALUE_DEFAULT: a fence before
// the write). The root (GPU 0) writes "staging free" into the sender's flag, then runs
// ONE kernel whose blocks wait (thread 0, ld.acquire.sys) for each chunk's flag and
// reduce that chunk (out = stage + in, f32) while the next chunks are still copying.
// Chunk schedules: fixed C, or geometric (halving: B/2, B/4, ... down to a floor, then
// the floor) so the reduce after the last copy is short.
//
// Times: µs per call, R calls back to back on both GPUs, events around them, the slower
// GPU; median of 3. NCCL's 2-rank reduce on these GPUs: 256M 737-746, 512M 1448-1467,
// 1G 2889-2894 µs.
//
// What it showed (2 x H200, µs at 128M / 256M / 512M / 1G):
// one copy then the reduce 470 / 923 / 1827 / 3633; fixed 64M chunks 422 / 769 / 1467 /
// 2867; fixed 16M 413 / 802 / 1580 / 3136; halving down to a 4M floor 383 / 727 / 1410 /
// 2767 (2M: 388 / 732 / 1415 / 2772; 8M: 389 / 732 / 1416 / 2776); a third or a quarter
// of what is left instead of half: worse (2817 / 2852 at 1G); half or a quarter of the
// SMs for the root's reduce: 2786 / 3776. 0 wrong. Against NCCL's 2891 at 1G: 1.04.
// commhal's route (dma.rs reduce_pair) uses the halving schedule with a 2 MiB floor
// (the last chunk 2-4 MiB, the same boundaries as the 4M row here).
//
// Build: nvcc -O3 -arch=sm_90 -o ce_reduce ce_reduce.cu -lcuda ; run: ./ce_reduce
#include "micro_common.h"


constexpr int MAXC = 64;  // chunks per call
struct Sched {
  int m;
  u64 off[MAXC + 1];  // chunk k = [off[k], off[k+1]) bytes
};

// Root: for chunk k, wait until *flag >= seq0 + k + 1 (cyclic compare, ~2 s bound), then
// out = stage + in over the chunk, grid-strided.
__global__ void root_reduce(const float4* in, const float4* stage, float4* out, const u32* flag, u32 seq0, Sched s,
                            u32* timeouts) {
  for (int k = 0; k < s.m; ++k) {
    if (threadIdx.x == 0) wait_u32_bounded(flag, seq0 + k + 1, timeouts);
    __syncthreads();
    const u64 v0 = s.off[k] / 16, v1 = s.off[k + 1] / 16;
    for (u64 v = v0 + (u64)blockIdx.x * blockDim.x + threadIdx.x; v < v1; v += (u64)gridDim.x * blockDim.x) {
      const float4 x = stage[v], y = in[v];
      out[v] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
  }
}


struct Gpu {
  float *in, *stage, *out;
  u32* flags;  // [0]: chunk arrivals (root), [1]: staging free (sender)
  u32* timeouts;
  unsigned long long* wrong;
  cudaStream_t s;
  cudaEvent_t e0, e1;
};

// fixed chunks of c bytes (c = 0: one copy)
static Sched fixed(u64 bytes, u64 c) {
  Sched s{};
  if (c == 0 || c >= bytes) c = bytes;
  s.m = 0;
  for (u64 o = 0; o < bytes && s.m < MAXC; o += c) s.off[s.m++] = o;
  s.off[s.m] = bytes;
  return s;
}
// geometric: each chunk 1/r of what is left (rounded to 1 MiB), at least `floor`
static Sched geometric(u64 bytes, u64 r, u64 floor) {
  Sched s{};
  u64 o = 0;
  s.m = 0;
  while (o < bytes && s.m < MAXC - 1) {
    u64 left = bytes - o, c = left / r / (1 << 20) * (1 << 20);
    if (c < floor) c = floor;
    if (c > left) c = left;
    s.off[s.m++] = o;
    o += c;
  }
  if (o < bytes) s.off[s.m++] = o;
  s.off[s.m] = bytes;
  return s;
}

int main() {
  require_gpus(2);
  enable_peers(2);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const u64 cap = 1ull << 30;
  std::vector<Gpu> g(2);
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&g[d].in, cap));
    CK(cudaMalloc(&g[d].stage, cap));
    CK(cudaMalloc(&g[d].out, cap));
    CK(cudaMalloc(&g[d].flags, 64));
    CK(cudaMemset(g[d].flags, 0, 64));
    CK(cudaMalloc(&g[d].timeouts, 4));
    CK(cudaMemset(g[d].timeouts, 0, 4));
    CK(cudaMalloc(&g[d].wrong, 8));
    CK(cudaStreamCreateWithFlags(&g[d].s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g[d].e0));
    CK(cudaEventCreate(&g[d].e1));
    fill_f32<<<sms * 4, 512>>>(g[d].in, cap / 4, d == 0 ? 1.0f : 2.0f);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }
  u32 seq = 0, free_seq = 0;  // the root's arrival counter, the sender's staging-free counter
  // One call: bytes, schedule, root grid.
  auto call = [&](u64 bytes, const Sched& s, int blocks) {
    (void)bytes;
    // root: staging free (its previous kernel is done, stream order), then the reduce
    CK(cudaSetDevice(0));
    ++free_seq;
    CU(cuStreamWriteValue32((CUstream)g[0].s, (CUdeviceptr)(g[1].flags + 1), free_seq, CU_STREAM_WRITE_VALUE_DEFAULT));
    root_reduce<<<blocks, 512, 0, g[0].s>>>((const float4*)g[0].in, (const float4*)g[0].stage, (float4*)g[0].out,
                                            g[0].flags, seq, s, g[0].timeouts);
    CK(cudaGetLastError());
    // sender: wait for staging free, then the chunks
    CK(cudaSetDevice(1));
    CU(cuStreamWaitValue32((CUstream)g[1].s, (CUdeviceptr)(g[1].flags + 1), free_seq, CU_STREAM_WAIT_VALUE_GEQ));
    for (int k = 0; k < s.m; ++k) {
      const u64 o = s.off[k], c = s.off[k + 1] - s.off[k];
      CK(cudaMemcpyAsync((char*)g[0].stage + o, (const char*)g[1].in + o, c, cudaMemcpyDeviceToDevice, g[1].s));
      CU(cuStreamWriteValue32((CUstream)g[1].s, (CUdeviceptr)g[0].flags, seq + k + 1, CU_STREAM_WRITE_VALUE_DEFAULT));
    }
    seq += s.m;
  };
  struct V {
    const char* name;
    int kind;  // 0 fixed, 1 geometric
    u64 a, b;  // fixed: chunk; geometric: ratio, floor
    int blocks_div;
  };
  const u64 M = 1ull << 20;
  const V vs[] = {
      {"one copy", 0, 0, 0, 1},      {"fixed 64M", 0, 64 * M, 0, 1},  {"fixed 16M", 0, 16 * M, 0, 1},
      {"geo 2 / 1M", 1, 2, M, 1},    {"geo 2 / 2M", 1, 2, 2 * M, 1},  {"geo 2 / 4M", 1, 2, 4 * M, 1},
      {"geo 2 / 8M", 1, 2, 8 * M, 1}, {"geo 3 / 2M", 1, 3, 2 * M, 1}, {"geo 4 / 2M", 1, 4, 2 * M, 1},
      {"geo 2 / 2M g/2", 1, 2, 2 * M, 2}, {"geo 2 / 2M g/4", 1, 2, 2 * M, 4},
  };
  const u64 sizes[] = {128 * M, 256 * M, 512 * M, 1024 * M};
  printf("# ce_reduce: 2 GPUs, GPU 1 -> GPU 0 by cudaMemcpyAsync chunks + stream-written flags, GPU 0 reduces (f32) in one kernel; us per call, median of 3\n");
  printf("%-16s", "schedule");
  for (u64 b : sizes) printf(" %10lluM", b >> 20);
  printf("   (chunks at 1G; wrong; timeouts)\n");
  for (const V& v : vs) {
    printf("%-16s", v.name);
    int m1g = 0;
    for (u64 bytes : sizes) {
      const Sched s = v.kind == 0 ? fixed(bytes, v.a) : geometric(bytes, v.a, v.b);
      if (bytes == cap) m1g = s.m;
      const int blocks = sms / v.blocks_div;
      const int R = bytes >= 512 * M ? 5 : 10;
      std::vector<double> us;
      for (int rep = 0; rep < 4; ++rep) {
        for (int d = 0; d < 2; ++d) {
          CK(cudaSetDevice(d));
          CK(cudaEventRecord(g[d].e0, g[d].s));
        }
        for (int i = 0; i < R; ++i) call(bytes, s, blocks);
        for (int d = 0; d < 2; ++d) {
          CK(cudaSetDevice(d));
          CK(cudaEventRecord(g[d].e1, g[d].s));
        }
        const double ms = slowest_ms(g);
        if (rep > 0) us.push_back(ms * 1e3 / R);
      }
      std::sort(us.begin(), us.end());
      printf(" %11.1f", us[us.size() / 2]);
      fflush(stdout);
    }
    const unsigned long long bad = count_on(0, g[0].wrong, [&] {
      count_wrong_f32<<<sms * 4, 512>>>(g[0].out, cap / 4, 3.0f, g[0].wrong);
    });
    CK(cudaSetDevice(0));
    CK(cudaMemset(g[0].out, 0, cap));
    u32 to = 0;
    CK(cudaMemcpy(&to, g[0].timeouts, 4, cudaMemcpyDeviceToHost));
    printf("   (%d; %llu wrong; %u timeouts)\n", m1g, bad, to);
    fflush(stdout);
  }
  return 0;
}
