// switch.cu — SwitchChannel kernels (sm_90+, NVLink multicast). On older archs the
// kernel compiles to a no-op that reports *ok = 0.
#include "commhal/switch_channel.h"

using namespace commhal;

// In-place sum all-reduce of `count` floats at `off` of the bound region. Each member
// runs it on a disjoint slice (slice_index of slice_count) after a group barrier.
extern "C" __global__ void commhal_conf_switch_all_reduce_f32(SwitchChannelHandle* h, u64 off,
                                                              u64 count, u32 slice_index,
                                                              u32 slice_count, u32* ok) {
#if defined(COMMHAL_HAS_MULTIMEM)
  const u64 per = (count / 4 + slice_count - 1) / slice_count * 4;
  const u64 begin = per * slice_index;
  u64 n = 0;
  if (begin < count) n = (count - begin < per) ? count - begin : per;
  const u32 nthreads = gridDim.x * blockDim.x;
  const u32 tid = blockIdx.x * blockDim.x + threadIdx.x;
  switch_all_reduce_f32(*h, off + begin * 4, n, tid, nthreads);
  if (tid == 0) *ok = 1;
#else
  if (blockIdx.x == 0 && threadIdx.x == 0) *ok = 0;
#endif
}
