// launch.h — how every commhal kernel (hand-written or generated) starts.
//
// Programmatic dependent launch (sm_90+; the host sets the launch attribute where it
// allows it): `griddepcontrol.wait` first — nothing of the kernel runs before the
// previous kernel on the stream completed and its memory is flushed, exactly as without
// the attribute — then `launch_dependents`, so the next kernel's blocks may already be
// scheduled (and wait in their own griddepcontrol.wait) while this one runs: the launch
// latency overlaps this kernel instead of following it. Both are no-ops for a launch
// without the attribute.
//
// Launch counts without a counter. A kernel's launches on a rank are numbered by one
// u64 word per block slot, all equal between launches: block b reads word b, and stores
// the new value into words b, b + grid, b + 2 grid, ... below `slots` (no other block of
// the launch reads those), so after the launch every word holds it whatever the grid.
// `slots` is the most CTAs any launch of the family may have on the rank (the host
// passes it and refuses larger grids), not the array's size: the stores are the
// launch's first work after its read, and with 1024 slots they took 3-6 % of a 1 KiB
// collective's time (4 x H100: all-reduce in graphs 2.95 against 2.83 µs with 160). The
// next launch reads them after the kernel boundary (stream order; with PDL after
// griddepcontrol.wait). No atomic and no fence: the end of a kernel publishes nothing
// (a system-scope release there cost 1.3 µs of every launch, bench/micro/ll_latency.cu).
#pragma once
#include "commhal/commhal_port.h"

namespace commhal {

// The first thing every kernel does (see above).
COMMHAL_DEVICE void launch_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Store v into this block's words of a [slots] per-block array: b, b + grid, b + 2 grid,
// ... The caller read word b before, and the block passed a __syncthreads since.
COMMHAL_DEVICE void store_block_slots(u64* words, u32 slots, u64 v) {
  for (u64 w = blockIdx.x + (u64)threadIdx.x * gridDim.x; w < slots;
       w += (u64)blockDim.x * gridDim.x) {
    store_relaxed(words + w, v);
  }
}

// The slots to store: the host's `asked` (the most CTAs any launch may have), within
// the array's `most`; 0 (arguments that never set it) stores them all.
COMMHAL_DEVICE u32 launch_slots(u32 asked, u32 most) {
  return asked == 0 || asked > most ? most : asked;
}

// This launch's number on the rank: word b of `words` (the launches before it, the same
// in every block) + 1, stored back into the block's slots for the next launch. The
// whole block calls it.
COMMHAL_DEVICE u64 block_launch_number(u64* words, u32 slots) {
  __shared__ u64 s_number;
  if (threadIdx.x == 0) s_number = load_relaxed(words + blockIdx.x) + 1;
  __syncthreads();
  const u64 number = s_number;
  // word b only after every thread of the block has the value: the __syncthreads above
  store_block_slots(words, slots, number);
  return number;
}

}  // namespace commhal
