// script.cu — kernels of the GPU conformance suite (conformance/src/gpu) besides the
// device-src conformance kernels: a small "script" interpreter so each case is a list
// of channel operations per rank, and a multi-block put for bandwidth.
//
// GpuOp (32 bytes, mirrored by gpu::kernels::GpuOp in Rust):
//   { u32 kind; u32 arg; u64 dst; u64 src; u64 len; }
// status[0] is set to 1 by the HOST before a launch; a failing op clears it and the
// first failure stores (op index + 1) into status[1]. Kernels never set it back to 1,
// so graph replays accumulate failures. Mismatched bytes are added to *mismatches.
#include "commhal/memory_channel.h"
#include "commhal/port_channel.h"

using namespace commhal;

struct GpuOp {
  u32 kind;
  u32 arg;
  u64 dst;
  u64 src;
  u64 len;
};
static_assert(sizeof(GpuOp) == 32, "GpuOp must be 32 bytes");

// Operation kinds (keep in sync with gpu::kernels::op in Rust).
static const u32 OP_PUT = 1;          // memory: put(dst, src, len) by the block
static const u32 OP_SIGNAL = 2;       // release signal (port: push SIGNAL)
static const u32 OP_RELAXED_SIGNAL = 3;
static const u32 OP_WAIT = 4;         // arg = 1: the wait must time out
static const u32 OP_RELAXED_WAIT = 5;
static const u32 OP_POLL = 6;         // arg = expected result (0/1)
static const u32 OP_GET = 7;          // memory: get(dst, src, len)
static const u32 OP_FILL = 8;         // local[dst..dst+len] = pattern(seed = arg)
static const u32 OP_CHECK = 9;        // count local[dst..] != pattern(arg), scanning from the end
static const u32 OP_FLUSH = 10;       // channel flush (port: push FLUSH and wait)
static const u32 OP_SLEEP = 11;       // thread 0 sleeps len nanoseconds
static const u32 OP_SET_WAIT = 12;    // h->wait_ns = len
static const u32 OP_WAIT_BYTE = 13;   // spin until local[dst] == (u8)arg, then acquire fence
static const u32 OP_PUT_SIGNAL = 14;  // port: put_with_signal
static const u32 OP_PUT_SIGNAL_FLUSH = 15;  // port: put_with_signal_and_flush
static const u32 OP_ZERO = 16;        // local[dst..dst+len] = 0

COMMHAL_DEVICE u8 pattern_byte(u64 i, u32 seed) { return (u8)((i * 131u + seed) & 0xffu); }

COMMHAL_DEVICE void fill_range(u8* p, u64 len, u32 seed, u32 tid, u32 n) {
  for (u64 i = tid; i < len; i += n) p[i] = pattern_byte(i, seed);
}
COMMHAL_DEVICE void zero_range(u8* p, u64 len, u32 tid, u32 n) {
  for (u64 i = tid; i < len; i += n) p[i] = 0;
}
// Scan from the end: a reader that sees the last bytes must see the first ones too.
COMMHAL_DEVICE u64 check_range(const u8* p, u64 len, u32 seed, u32 tid, u32 n) {
  u64 bad = 0;
  for (u64 k = tid; k < len; k += n) {
    const u64 i = len - 1 - k;
    if (((const volatile u8*)p)[i] != pattern_byte(i, seed)) bad++;
  }
  return bad;
}
COMMHAL_DEVICE bool wait_byte(const u8* p, u8 value, const WaitBound& b) {
  if (!wait_until(b, ERR_WAIT_TIMEOUT, [&] { return ((const volatile u8*)p)[0] == value; }))
    return false;
  fence_acq_rel();
  return true;
}
COMMHAL_DEVICE void sleep_ns(u64 ns) {
  for (u64 done = 0; done < ns; done += 1000) __nanosleep(1000);
}
COMMHAL_DEVICE void fail(u32* status, u32 op_index) {
  atomicExch(&status[0], 0u);
  atomicCAS(&status[1], 0u, op_index + 1);
}

// Memory channel script: ONE block; every thread runs every op.
extern "C" __global__ void commhal_gpu_memory_script(MemoryChannelHandle* h, const GpuOp* ops,
                                                     u32 nops, u32* status, u64* mismatches) {
  __shared__ u32 good;
  const u32 tid = threadIdx.x, n = blockDim.x;
  if (tid == 0) good = 1;
  __syncthreads();
  u8* local = reinterpret_cast<u8*>(h->local_buf);
  for (u32 k = 0; k < nops && good; ++k) {
    const GpuOp op = ops[k];
    bool ok = true;
    switch (op.kind) {
      case OP_PUT: put(*h, op.dst, op.src, op.len, tid, n); break;
      case OP_GET: get(*h, op.dst, op.src, op.len, tid, n); break;
      case OP_FILL: fill_range(local + op.dst, op.len, op.arg, tid, n); break;
      case OP_ZERO: zero_range(local + op.dst, op.len, tid, n); break;
      case OP_CHECK: {
        const u64 bad = check_range(local + op.dst, op.len, op.arg, tid, n);
        if (bad) { atomicAdd(mismatches, bad); ok = false; }
        break;
      }
      default: break;
    }
    __syncthreads();  // the block's copies/fills happen before thread 0's next step
    if (tid == 0) {
      switch (op.kind) {
        case OP_SIGNAL: signal(*h); break;
        case OP_RELAXED_SIGNAL: relaxed_signal(*h); break;
        case OP_WAIT: ok = (wait(*h) == (op.arg == 0)); break;
        case OP_RELAXED_WAIT: ok = (relaxed_wait(*h) == (op.arg == 0)); break;
        case OP_POLL: ok = (poll(*h) == (op.arg != 0)); break;
        case OP_FLUSH: ok = flush(*h); break;
        case OP_SLEEP: sleep_ns(op.len); break;
        case OP_SET_WAIT: h->wait_ns = op.len; break;
        case OP_WAIT_BYTE: ok = wait_byte(local + op.dst, (u8)op.arg, channel_bound(*h)); break;
        default: break;
      }
    }
    if (!ok) fail(status, k);
    __syncthreads();
    if (!ok) good = 0;  // any thread may stop the script (benign race: all store 0)
    __syncthreads();
  }
}

// Port channel script: ANY number of blocks; thread 0 of every block pushes the
// triggers (so a multi-block launch pushes concurrently), the block fills/checks
// `local` (the registered source/destination buffer of this rank).
extern "C" __global__ void commhal_gpu_port_script(PortChannelHandle* h, u8* local,
                                                   const GpuOp* ops, u32 nops, u32* status,
                                                   u64* mismatches) {
  __shared__ u32 good;
  const u32 tid = threadIdx.x, n = blockDim.x;
  if (tid == 0) good = 1;
  __syncthreads();
  for (u32 k = 0; k < nops && good; ++k) {
    const GpuOp op = ops[k];
    bool ok = true;
    switch (op.kind) {
      case OP_FILL: fill_range(local + op.dst, op.len, op.arg, tid, n); break;
      case OP_ZERO: zero_range(local + op.dst, op.len, tid, n); break;
      case OP_CHECK: {
        const u64 bad = check_range(local + op.dst, op.len, op.arg, tid, n);
        if (bad) { atomicAdd(mismatches, bad); ok = false; }
        break;
      }
      default: break;
    }
    __syncthreads();  // fills are ordered before the trigger's release store
    if (tid == 0) {
      switch (op.kind) {
        case OP_PUT: ok = port_put(*h, op.dst, op.src, op.len); break;
        case OP_SIGNAL: ok = port_signal(*h); break;
        case OP_PUT_SIGNAL: ok = port_put_with_signal(*h, op.dst, op.src, op.len); break;
        case OP_PUT_SIGNAL_FLUSH:
          ok = port_put_with_signal_and_flush(*h, op.dst, op.src, op.len);
          break;
        case OP_FLUSH: ok = port_flush(*h); break;
        case OP_WAIT: ok = (port_wait(*h) == (op.arg == 0)); break;
        case OP_POLL: ok = (port_poll(*h) == (op.arg != 0)); break;
        case OP_SLEEP: sleep_ns(op.len); break;
        case OP_SET_WAIT: h->wait_ns = op.len; break;
        case OP_WAIT_BYTE: ok = wait_byte(local + op.dst, (u8)op.arg, channel_bound(*h)); break;
        default: break;
      }
    }
    if (!ok) fail(status, k);
    __syncthreads();
    if (!ok) good = 0;  // any thread may stop the script (benign race: all store 0)
    __syncthreads();
  }
}

// Bandwidth: the whole grid copies local[src..] -> remote[dst..] (no signal; time the
// kernel). Any grid.
extern "C" __global__ void commhal_gpu_put_bw(MemoryChannelHandle* h, u64 dst, u64 src,
                                              u64 bytes) {
  put(*h, dst, src, bytes, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}
