// conformance.cu — kernels the GPU conformance suite launches. Each is extern "C" so
// the host finds it by name. Launch shapes are given per kernel; `ok` outputs are u32
// in device memory the host zeroes before the launch (1 = success).
#include "commhal/memory_channel.h"
#include "commhal/packets.h"
#include "commhal/port_channel.h"

using namespace commhal;

// Fill `bytes` at buf with the pattern byte(i) = (i * 131 + seed) & 0xff. Any grid.
extern "C" __global__ void commhal_conf_fill(u8* buf, u64 bytes, u32 seed) {
  const u64 n = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += n)
    buf[i] = (u8)((i * 131u + seed) & 0xffu);
}

// Count bytes at buf that differ from the pattern into *mismatches. Any grid.
extern "C" __global__ void commhal_conf_check(const u8* buf, u64 bytes, u32 seed,
                                              u64* mismatches) {
  const u64 n = (u64)gridDim.x * blockDim.x;
  u64 bad = 0;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += n)
    if (buf[i] != (u8)((i * 131u + seed) & 0xffu)) bad++;
  if (bad) atomicAdd(mismatches, bad);
}

// Message passing, sender side. One block: every thread puts, barrier, thread 0
// signals. Offsets may be unaligned (exercises the copy's head/tail).
extern "C" __global__ void commhal_conf_put_signal(MemoryChannelHandle* h, u64 dst_off,
                                                   u64 src_off, u64 bytes) {
  put(*h, dst_off, src_off, bytes, threadIdx.x, blockDim.x);
  __syncthreads();
  if (threadIdx.x == 0) signal(*h);
}

// Message passing, receiver side. One block: thread 0 waits (acquire), then every
// thread may read. *ok = 1 if the signal arrived before wait_ns.
extern "C" __global__ void commhal_conf_wait(MemoryChannelHandle* h, u32* ok) {
  if (threadIdx.x == 0) *ok = wait(*h) ? 1u : 0u;
}

// Get: copy the peer's buffer into ours after the peer signalled readiness.
extern "C" __global__ void commhal_conf_wait_get(MemoryChannelHandle* h, u64 dst_off,
                                                 u64 src_off, u64 bytes, u32* ok) {
  __shared__ u32 arrived;
  if (threadIdx.x == 0) arrived = wait(*h) ? 1u : 0u;
  __syncthreads();
  if (arrived) get(*h, dst_off, src_off, bytes, threadIdx.x, blockDim.x);
  if (threadIdx.x == 0) *ok = arrived;
}

// Ping-pong, `iters` round trips of `bytes` at offset 0 of both buffers. One block per
// side; `initiator` = 1 on one rank, 0 on the other. relaxed = 1 uses
// relaxed_signal/relaxed_wait (pure synchronisation). *ok = 1 when every wait
// succeeded.
extern "C" __global__ void commhal_conf_ping_pong(MemoryChannelHandle* h, u64 iters,
                                                  u32 initiator, u64 bytes, u32 relaxed,
                                                  u32* ok) {
  __shared__ u32 good;
  if (threadIdx.x == 0) good = 1;
  __syncthreads();
  for (u64 it = 0; it < iters && good; ++it) {
    if (!initiator) {
      if (threadIdx.x == 0 && !(relaxed ? relaxed_wait(*h) : wait(*h))) good = 0;
      __syncthreads();
      if (!good) break;
    }
    put(*h, 0, 0, bytes, threadIdx.x, blockDim.x);
    __syncthreads();
    if (threadIdx.x == 0) {
      if (relaxed) relaxed_signal(*h);
      else signal(*h);
    }
    if (initiator) {
      if (threadIdx.x == 0 && !(relaxed ? relaxed_wait(*h) : wait(*h))) good = 0;
      __syncthreads();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) *ok = good;
}

// LL8 / LL16 packets. Writer: local data at src_off -> peer packets at dst_off.
extern "C" __global__ void commhal_conf_ll8_put(MemoryChannelHandle* h, u64 dst_off,
                                                u64 src_off, u64 bytes, u32 flag) {
  put_packets_ll8(*h, dst_off, src_off, bytes, flag, threadIdx.x, blockDim.x);
}
// Reader: local packets at pkt_off -> local data at dst_off. *ok = 1 when every
// packet arrived with `flag`.
extern "C" __global__ void commhal_conf_ll8_read(MemoryChannelHandle* h, u64 pkt_off,
                                                 u64 dst_off, u64 bytes, u32 flag, u32* ok) {
  __shared__ u32 good;
  if (threadIdx.x == 0) good = 1;
  __syncthreads();
  if (!read_packets_ll8(*h, pkt_off, dst_off, bytes, flag, threadIdx.x, blockDim.x))
    atomicAnd(&good, 0u);
  __syncthreads();
  if (threadIdx.x == 0) *ok = good;
}
extern "C" __global__ void commhal_conf_ll16_put(MemoryChannelHandle* h, u64 dst_off,
                                                 u64 src_off, u64 bytes, u32 flag) {
  put_packets_ll16(*h, dst_off, src_off, bytes, flag, threadIdx.x, blockDim.x);
}
extern "C" __global__ void commhal_conf_ll16_read(MemoryChannelHandle* h, u64 pkt_off,
                                                  u64 dst_off, u64 bytes, u32 flag, u32* ok) {
  __shared__ u32 good;
  if (threadIdx.x == 0) good = 1;
  __syncthreads();
  if (!read_packets_ll16(*h, pkt_off, dst_off, bytes, flag, threadIdx.x, blockDim.x))
    atomicAnd(&good, 0u);
  __syncthreads();
  if (threadIdx.x == 0) *ok = good;
}

// FIFO push: every thread of the grid pushes `per_thread` PUT triggers of `len` bytes
// (trigger k of thread t copies at offset (t * per_thread + k) * len on both sides);
// then thread 0 of each block pushes a SIGNAL and a FLUSH and waits for the flush.
// The HOST SETS *ok = 1 before the launch; any failure clears it. Concurrent pushers
// exercise head reservation and the full-ring wait (use a ring smaller than the
// number of triggers).
extern "C" __global__ void commhal_conf_fifo_push(PortChannelHandle* h, u64 per_thread,
                                                  u64 len, u32* ok) {
  __shared__ u32 good;
  if (threadIdx.x == 0) good = 1;
  __syncthreads();
  const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  for (u64 k = 0; k < per_thread; ++k) {
    const u64 off = (t * per_thread + k) * len;
    if (!port_put(*h, off, off, len)) {
      atomicAnd(&good, 0u);
      break;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && good) {
    // Block-local completion: each block signals once and flushes.
    if (!port_signal(*h) || !port_flush(*h)) good = 0;
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicAnd(ok, good);
}

// Port channel wait: thread 0 waits for a signal delivered by the peer's proxy.
extern "C" __global__ void commhal_conf_port_wait(PortChannelHandle* h, u32* ok) {
  if (threadIdx.x == 0) *ok = port_wait(*h) ? 1u : 0u;
}
