// ce_lanes.cu — where the 2-rank copy-engine reduce's fixed cost goes, and whether two
// copy "lanes" (two streams, or a push from the sender plus a pull by the root) beat one.
// Cited by docs/performance.md (Copy engines).
//
// ce_reduce.cu's halving schedule (one stream on the sender: a cudaMemcpyAsync per chunk
// into the root's staging, a stream write of the chunk's flag after each; one root kernel
// reducing each chunk once its flag lands) takes 727 µs at 256M where NCCL takes
// 734-746, and 2767 at 1G (NCCL 2891): ~388 GB/s at 1G, but ~35-45 µs of fixed cost at
// 256M. Here each variant has 1 or 2 lanes; a lane is a stream that copies one region of
// the message chunk by chunk, writing its own flag (on the root) after each chunk:
//   push: on the sender (GPU 1), copying its input into the root's staging;
//   pull: on the root (GPU 0), copying the sender's input into its own staging.
// The root kernel walks all lanes' chunks in the order they should land (cumulative bytes
// per lane), waiting for the lane's flag before reducing the chunk. "copy only" variants
// skip the reduce (the kernel waits for every lane's last flag only): the copy rate.
// In a pull lane the sender's "input ready" handshake is not modelled (inputs are
// constant here); the push lanes wait for the root's "staging free" as in commhal.
//
// Times: µs per call, R calls back to back, events on both GPUs, the slower GPU; median
// of 3. 0 wrong expected (out = 1 + 2 everywhere).
//
// What it showed (2 x H200, µs at 64M / 128M / 256M / 1G):
// - one copy, no chunks, copy only: 186-188 / 355-358 / 693-695 / 2721-2726 (~395 GB/s
//   at 1G; ~13 µs fixed: the START handshake and the first copy's start);
// - halving (the first chunk schedule), copy only: 214 / 389 / 733 / 2773; with one flag
//   write at the end instead of one per chunk: 201 / 373 / 714 / 2752. So each chunk
//   boundary costs ~5.8 µs, about half in the copy boundary and half in the stream
//   write; the root's reduce is fully hidden (with it: 214 / 388 / 732 / 2774);
// - two lanes do not add bandwidth: two push streams 191 / 360 / 697 / 2728, a push plus
//   a pull 195 / 365 / 703 / 2731 (one direction of the link is the limit), and chunked
//   they are slower (both lanes' boundaries: 218 / 396 / 742 / 2785; staggered 784 at
//   256M);
// - fewer, larger chunks (the variant list below): keep 3/8 of what is left
//   after each chunk, floor 2M: 206 / 381 / 721 / 2767 (halving 211 / 385 / 731 / 2776);
//   keep 1/3: 721 at 256M but 2817 at 1G (the root's reduce of the larger chunks falls
//   behind the copies: copy only 2758); keep 1/4 or 1/5: 772-804 at 256M. commhal's
//   route takes keep 3/8 (layout.rs PAIR_CE_KEEP_EIGHTHS).
//
// Build: nvcc -O3 -arch=sm_90 -o ce_lanes ce_lanes.cu -lcuda ; run: ./ce_lanes
#include "micro_common.h"

constexpr int MAXS = 128;  // steps per call
struct Step {
  u32 lane;  // flag index on the root
  u32 k;     // chunk number within the lane (the flag's value is seq[lane] + k + 1)
  u64 off, end;
};
struct Plan {
  int m;
  Step st[MAXS];
};

__global__ void root_reduce(const float4* in, const float4* stage, float4* out, const u32* flags, uint4 seq0, Plan p,
                            int copy_only, u32* timeouts) {
  const u32 seqs[4] = {seq0.x, seq0.y, seq0.z, seq0.w};
  for (int j = 0; j < p.m; ++j) {
    const Step s = p.st[j];
    if (copy_only) {
      bool last = true;  // the lane's last step?
      for (int q = j + 1; q < p.m; ++q) last &= p.st[q].lane != s.lane;
      if (!last) continue;
    }
    if (threadIdx.x == 0) wait_u32_bounded(flags + s.lane, seqs[s.lane] + s.k + 1, timeouts);
    __syncthreads();
    if (copy_only) continue;
    const u64 v0 = s.off / 16, v1 = s.end / 16;
    for (u64 v = v0 + (u64)blockIdx.x * blockDim.x + threadIdx.x; v < v1; v += (u64)gridDim.x * blockDim.x) {
      const float4 x = stage[v], y = in[v];
      out[v] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
  }
}


struct Gpu {
  float *in, *stage, *out;
  u32* flags;  // root: [0..3] lane arrivals; sender: [4] staging free
  u32* timeouts;
  unsigned long long* wrong;
  cudaStream_t s, lane[2];
  cudaEvent_t e0, e1, done;
};

// Geometric chunks of [a, b): after each chunk, `keep` of what was left is still left
// (1 MiB multiples) while that is at least `floor`; then the rest is the last chunk.
// keep = 0.5 is halving (commhal keeps 3/8 now). `first`: lane 1's first chunk takes this
// share of its region instead (staggering two lanes; 0 = the same rule).
static std::vector<std::pair<u64, u64>> halving(u64 a, u64 b, double first, u64 floor, double keep = 0.5) {
  std::vector<std::pair<u64, u64>> out;
  const u64 M = 1ull << 20;
  u64 o = a;
  bool f = first != 0.5;
  while (o < b) {
    const u64 left = b - o;
    u64 next = (u64)((f ? 1.0 - first : keep) * (double)left) / M * M;
    f = false;
    if (next < floor || left <= 2 * floor) next = 0;
    out.push_back({o, b - next});
    o = b - next;
  }
  return out;
}

struct Lane {
  int pull;  // 0: push (sender's stream), 1: pull (root's stream)
  std::vector<std::pair<u64, u64>> chunks;
};

// Merge the lanes' chunks in landing order (each lane's cumulative bytes; ties: lane 0).
static Plan merge(const std::vector<Lane>& lanes) {
  Plan p{};
  std::vector<size_t> next(lanes.size(), 0);
  std::vector<u64> done(lanes.size(), 0);
  for (;;) {
    int best = -1;
    u64 best_t = ~0ull;
    for (size_t l = 0; l < lanes.size(); ++l) {
      if (next[l] == lanes[l].chunks.size()) continue;
      const auto c = lanes[l].chunks[next[l]];
      const u64 t = done[l] + (c.second - c.first);
      if (t < best_t) best_t = t, best = (int)l;
    }
    if (best < 0) break;
    const auto c = lanes[best].chunks[next[best]];
    if (p.m == MAXS) {
      fprintf(stderr, "too many steps\n");
      exit(1);
    }
    p.st[p.m++] = Step{(u32)best, (u32)next[best], c.first, c.second};
    done[best] += c.second - c.first;
    ++next[best];
  }
  return p;
}

int main() {
  require_gpus(2);
  enable_peers(2);
  int sms = 0, engines = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaDeviceGetAttribute(&engines, cudaDevAttrAsyncEngineCount, 0));
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
    for (auto& l : g[d].lane) CK(cudaStreamCreateWithFlags(&l, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g[d].e0));
    CK(cudaEventCreate(&g[d].e1));
    CK(cudaEventCreateWithFlags(&g[d].done, cudaEventDisableTiming));
    fill_f32<<<sms * 4, 512>>>(g[d].in, cap / 4, d == 0 ? 1.0f : 2.0f);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }
  u32 seq[4] = {0, 0, 0, 0}, free_seq = 0;
  // One call of `lanes` (lane l uses flag l on the root and stream lane[l] on its GPU).
  auto call = [&](const std::vector<Lane>& lanes, const Plan& p, int copy_only, int one_write) {
    CK(cudaSetDevice(0));
    ++free_seq;
    // the root's previous kernel is done (stream order) -> staging free for push lanes
    CU(cuStreamWriteValue32((CUstream)g[0].s, (CUdeviceptr)(g[1].flags + 4), free_seq, CU_STREAM_WRITE_VALUE_DEFAULT));
    CK(cudaEventRecord(g[0].done, g[0].s));
    root_reduce<<<sms, 512, 0, g[0].s>>>((const float4*)g[0].in, (const float4*)g[0].stage, (float4*)g[0].out,
                                         g[0].flags, make_uint4(seq[0], seq[1], seq[2], seq[3]), p, copy_only,
                                         g[0].timeouts);
    CK(cudaGetLastError());
    for (size_t l = 0; l < lanes.size(); ++l) {
      const int dev = lanes[l].pull ? 0 : 1;
      CK(cudaSetDevice(dev));
      cudaStream_t s = g[dev].lane[l];
      if (lanes[l].pull) {
        CK(cudaStreamWaitEvent(s, g[0].done, 0));
      } else {
        CU(cuStreamWaitValue32((CUstream)s, (CUdeviceptr)(g[1].flags + 4), free_seq, CU_STREAM_WAIT_VALUE_GEQ));
      }
      const auto& cs = lanes[l].chunks;
      for (size_t k = 0; k < cs.size(); ++k) {
        const u64 o = cs[k].first, c = cs[k].second - cs[k].first;
        CK(cudaMemcpyAsync((char*)g[0].stage + o, (const char*)g[1].in + o, c, cudaMemcpyDeviceToDevice, s));
        if (!one_write || k + 1 == cs.size())
          CU(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)(g[0].flags + l), seq[l] + (u32)k + 1,
                                  CU_STREAM_WRITE_VALUE_DEFAULT));
      }
    }
    for (size_t l = 0; l < lanes.size(); ++l) seq[l] += (u32)lanes[l].chunks.size();
  };
  const u64 M = 1ull << 20;
  struct V {
    const char* name;
    int nlanes;     // 1 or 2
    int pull1;      // lane 1 pulls
    double split;   // lane 0's share of the bytes
    double first1;  // lane 1's first chunk (share of its region)
    u64 floor;
    int copy_only, one_write, one_copy;
    double keep = 0.5;  // lane 0's geometric rule (see halving)
  };
  const V vs[] = {
      {"keep 1/2 fl 2M", 1, 0, 1.0, 0.5, 2 * M, 0, 0, 0, 0.5},
      {"keep 1/2 copy", 1, 0, 1.0, 0.5, 2 * M, 1, 0, 0, 0.5},
      {"1 copy only", 1, 0, 1.0, 0.5, 2 * M, 1, 0, 1},
      {"keep 3/8 fl 2M", 1, 0, 1.0, 0.5, 2 * M, 0, 0, 0, 0.375},
      {"keep 1/3 fl 2M", 1, 0, 1.0, 0.5, 2 * M, 0, 0, 0, 1.0 / 3},
      {"keep 1/4 fl 2M", 1, 0, 1.0, 0.5, 2 * M, 0, 0, 0, 0.25},
      {"keep 1/5 fl 2M", 1, 0, 1.0, 0.5, 2 * M, 0, 0, 0, 0.2},
      {"keep 3/8 fl 1M", 1, 0, 1.0, 0.5, 1 * M, 0, 0, 0, 0.375},
      {"keep 1/3 fl 1M", 1, 0, 1.0, 0.5, 1 * M, 0, 0, 0, 1.0 / 3},
      {"keep 1/4 fl 1M", 1, 0, 1.0, 0.5, 1 * M, 0, 0, 0, 0.25},
      {"keep 1/3 fl 4M", 1, 0, 1.0, 0.5, 4 * M, 0, 0, 0, 1.0 / 3},
      {"keep 1/4 fl 4M", 1, 0, 1.0, 0.5, 4 * M, 0, 0, 0, 0.25},
      {"keep 1/3 copy", 1, 0, 1.0, 0.5, 2 * M, 1, 0, 0, 1.0 / 3},
  };
  const u64 sizes[] = {64 * M, 128 * M, 256 * M, 512 * M, 1024 * M};
  printf("# ce_lanes: 2 GPUs (%d SMs, %d async engines), GPU 1's input -> GPU 0's staging by copy lanes, GPU 0 reduces (f32); us per call, median of 3\n",
         sms, engines);
  printf("%-18s", "variant");
  for (u64 b : sizes) printf(" %9lluM", b >> 20);
  printf("   (steps at 256M; wrong; timeouts)\n");
  for (const V& v : vs) {
    printf("%-18s", v.name);
    int steps = 0;
    for (u64 bytes : sizes) {
      std::vector<Lane> lanes;
      const u64 cut = v.nlanes == 1 ? bytes : (u64)(v.split * (double)bytes) / M * M;
      Lane l0{0, v.one_copy ? std::vector<std::pair<u64, u64>>{{0, cut}} : halving(0, cut, 0.5, v.floor, v.keep)};
      // lane 0 is a pull only when it is the sole lane of a pull variant
      if (v.nlanes == 1 && v.pull1) l0.pull = 1;
      lanes.push_back(l0);
      if (v.nlanes == 2)
        lanes.push_back(Lane{v.pull1, v.one_copy ? std::vector<std::pair<u64, u64>>{{cut, bytes}}
                                                 : halving(cut, bytes, v.first1, v.floor)});
      const Plan p = merge(lanes);
      if (bytes == 256 * M) steps = p.m;
      const int R = bytes >= 512 * M ? 5 : 10;
      std::vector<double> us;
      for (int rep = 0; rep < 4; ++rep) {
        for (int d = 0; d < 2; ++d) {
          CK(cudaSetDevice(d));
          CK(cudaEventRecord(g[d].e0, g[d].s));
        }
        for (int i = 0; i < R; ++i) call(lanes, p, v.copy_only, v.one_write);
        for (int d = 0; d < 2; ++d) {
          CK(cudaSetDevice(d));
          for (auto& l : g[d].lane) {
            CK(cudaEventRecord(g[d].done, l));
            CK(cudaStreamWaitEvent(g[d].s, g[d].done, 0));
          }
          CK(cudaEventRecord(g[d].e1, g[d].s));
        }
        const double ms = slowest_ms(g);
        if (rep > 0) us.push_back(ms * 1e3 / R);
      }
      std::sort(us.begin(), us.end());
      printf(" %10.1f", us[us.size() / 2]);
      fflush(stdout);
    }
    unsigned long long bad = 0;
    if (!v.copy_only) {
      bad = count_on(0, g[0].wrong, [&] { count_wrong_f32<<<sms * 4, 512>>>(g[0].out, cap / 4, 3.0f, g[0].wrong); });
    }
    CK(cudaSetDevice(0));
    CK(cudaMemset(g[0].out, 0, cap));
    u32 to = 0;
    CK(cudaMemcpy(&to, g[0].timeouts, 4, cudaMemcpyDeviceToHost));
    printf("   (%d; %llu wrong; %u timeouts)\n", steps, bad, to);
    fflush(stdout);
  }
  return 0;
}
