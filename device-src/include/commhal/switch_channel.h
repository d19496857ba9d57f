// switch_channel.h — SwitchChannel device functions over NVLink SHARP multicast
// (sm_90+: multimem.ld_reduce / multimem.st). `off` is a byte offset into the bound
// region, 16-byte aligned. Ordering: the group barrier (caller's job) must separate
// the members' writes from a reduce, and a broadcast from the members' reads.
#pragma once
#include "commhal/handles.h"

namespace commhal {

#if defined(COMMHAL_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define COMMHAL_HAS_MULTIMEM 1

// Element-wise sum over every member of 4 floats at `off`.
COMMHAL_DEVICE void switch_reduce_add_f32x4(const SwitchChannelHandle& h, u64 off, float& a,
                                            float& b, float& c, float& d) {
  const u8* p = reinterpret_cast<const u8*>(h.multicast) + off;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(a), "=f"(b), "=f"(c), "=f"(d)
               : "l"(p)
               : "memory");
}

// Store 4 floats at `off` in every member's buffer.
COMMHAL_DEVICE void switch_broadcast_f32x4(const SwitchChannelHandle& h, u64 off, float a,
                                           float b, float c, float d) {
  u8* p = reinterpret_cast<u8*>(h.multicast) + off;
  asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a),
               "f"(b), "f"(c), "f"(d)
               : "memory");
}

// All-reduce (sum) of `count` floats (count % 4 == 0) at `off`, cooperatively: each
// thread reduces a 16-byte vector through the switch and broadcasts the result.
COMMHAL_DEVICE void switch_all_reduce_f32(const SwitchChannelHandle& h, u64 off, u64 count,
                                          u32 tid, u32 nthreads) {
  const u64 nvec = count / 4;
  for (u64 i = tid; i < nvec; i += nthreads) {
    float a, b, c, d;
    switch_reduce_add_f32x4(h, off + 16 * i, a, b, c, d);
    switch_broadcast_f32x4(h, off + 16 * i, a, b, c, d);
  }
}

#endif

}  // namespace commhal
