// commhal_port.h — the portability layer every commhal device source includes.
//
// Three compilation modes:
//   * COMMHAL_HOST_LAYOUT defined: a host C++ compiler (g++) includes the handle
//     declarations only, to print sizeof/offsetof for the layout test. No device code.
//   * HIP (hipRTC / hipcc): __HIP_DEVICE_COMPILE__ or __HIPCC_RTC__ or __HIPCC__.
//   * otherwise CUDA (NVRTC). NVRTC has no libc/libstdc++/libcu++ headers here, so this
//     file includes nothing and spells its own integer types and atomics (inline PTX).
//
// Memory-order vocabulary (all at SYSTEM scope, i.e. visible to peer GPUs over NVLink
// and to the host proxy over PCIe):
//   store_release / load_acquire / fetch_add_release: a release makes every write the
//   thread performed (or observed, e.g. through __syncthreads) before it visible to a
//   thread that acquires the same location and reads the released value.
//   store_relaxed / load_relaxed: atomic, no ordering of other accesses.
//   fetch_max_release: a release that raises a word to at least the value.
//   fence_acq_rel: a full system-scope fence.
#pragma once

#if defined(COMMHAL_HOST_LAYOUT)
#include <stddef.h>
#define COMMHAL_DEVICE inline
#define COMMHAL_HOST_DEVICE inline
#elif defined(__HIP_DEVICE_COMPILE__) || defined(__HIPCC_RTC__) || defined(__HIPCC__)
#define COMMHAL_HIP 1
#define COMMHAL_DEVICE __device__ __forceinline__
#define COMMHAL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define COMMHAL_CUDA 1
#define COMMHAL_DEVICE __device__ __forceinline__
#define COMMHAL_HOST_DEVICE __host__ __device__ __forceinline__
#endif

// offsetof as a constant expression without <stddef.h>. NVRTC's EDG front end has no
// __builtin_offsetof but folds __INTADDR__ (what NVIDIA's own stddef uses);
// g++ and clang (hipRTC) have __builtin_offsetof.
#if defined(COMMHAL_CUDA)
#define COMMHAL_OFFSETOF(type, field) \
  ((unsigned long long)__INTADDR__(&(((type*)0)->field)))
#else
#define COMMHAL_OFFSETOF(type, field) __builtin_offsetof(type, field)
#endif

namespace commhal {

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

static_assert(sizeof(u32) == 4, "u32 must be 4 bytes");
static_assert(sizeof(u64) == 8, "u64 must be 8 bytes");
static_assert(sizeof(void*) == 8, "commhal needs 64-bit pointers on host and device");

#if !defined(COMMHAL_HOST_LAYOUT)

// A 16-byte vector for bulk copies (ld/st .v4.u32).
typedef uint4 v16;

#if defined(COMMHAL_CUDA)

COMMHAL_DEVICE void store_release(u64* p, u64 v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
COMMHAL_DEVICE u64 load_acquire(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
COMMHAL_DEVICE void store_relaxed(u64* p, u64 v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
COMMHAL_DEVICE u64 load_relaxed(const u64* p) {
  u64 v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// Returns the value before the add.
COMMHAL_DEVICE u64 fetch_add_release(u64* p, u64 v) {
  u64 old;
  asm volatile("atom.release.sys.global.add.u64 %0, [%1], %2;"
               : "=l"(old)
               : "l"(p), "l"(v)
               : "memory");
  return old;
}
COMMHAL_DEVICE u64 fetch_add_relaxed(u64* p, u64 v) {
  u64 old;
  asm volatile("atom.relaxed.sys.global.add.u64 %0, [%1], %2;"
               : "=l"(old)
               : "l"(p), "l"(v)
               : "memory");
  return old;
}
// *p = max(*p, v); returns the value before.
COMMHAL_DEVICE u64 fetch_max_release(u64* p, u64 v) {
  u64 old;
  asm volatile("atom.release.sys.global.max.u64 %0, [%1], %2;"
               : "=l"(old)
               : "l"(p), "l"(v)
               : "memory");
  return old;
}
// Stores `v` only if `*p == 0` (the first error wins); relaxed, system scope.
// Returns the previous value.
COMMHAL_DEVICE u32 set_error_once(u32* p, u32 v) {
  u32 old;
  asm volatile("atom.relaxed.sys.global.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old)
               : "l"(p), "r"(0u), "r"(v)
               : "memory");
  return old;
}
COMMHAL_DEVICE void fence_acq_rel() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
COMMHAL_DEVICE u32 load_relaxed_u32(const u32* p) {
  u32 v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Nanoseconds of the GPU's global timer (the bound of every wait, commhal/wait.h).
COMMHAL_DEVICE u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Packets (data and flag in one word). PTX's memory model makes only scalar accesses
// of up to 64 bits single-copy atomic; a vector access is a set of accesses to its
// elements in no set order. So every packet word that holds data AND its flag is one
// 64-bit element: `.u64` / `.v2.u64`, never `.v2.u32` / `.v4.u32` (whose 32-bit halves
// could become visible apart). The byte layout is the same (little-endian: a | b << 32).
//
// One 8-byte store of two 32-bit words (LL8 packets: data word a, flag word b).
COMMHAL_DEVICE void store_volatile_v2u32(void* p, u32 a, u32 b) {
  const u64 v = (u64)a | ((u64)b << 32);
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
COMMHAL_DEVICE void load_volatile_v2u32(const void* p, u32& a, u32& b) {
  u64 v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  a = (u32)v;
  b = (u32)(v >> 32);
}
// One 16-byte store of two 64-bit words (LL63 packets; each word atomic on its own).
COMMHAL_DEVICE void store_volatile_v2u64(void* p, u64 a, u64 b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
COMMHAL_DEVICE void load_volatile_v2u64(const void* p, u64& a, u64& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
// One 16-byte store of four 32-bit words (LL16 packets: a, c data; b, d their flags):
// the words (a, b) and (c, d), each one 64-bit element (see above).
COMMHAL_DEVICE void store_volatile_v4u32(void* p, u32 a, u32 b, u32 c, u32 d) {
  store_volatile_v2u64(p, (u64)a | ((u64)b << 32), (u64)c | ((u64)d << 32));
}
COMMHAL_DEVICE void load_volatile_v4u32(const void* p, u32& a, u32& b, u32& c, u32& d) {
  u64 lo, hi;
  load_volatile_v2u64(p, lo, hi);
  a = (u32)lo;
  b = (u32)(lo >> 32);
  c = (u32)hi;
  d = (u32)(hi >> 32);
}

#elif defined(COMMHAL_HIP)

// HIP: clang builtins with system scope. NOT compiled in CI (no hipRTC there).
COMMHAL_DEVICE void store_release(u64* p, u64 v) {
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
COMMHAL_DEVICE u64 load_acquire(const u64* p) {
  return __hip_atomic_load(const_cast<u64*>(p), __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
}
COMMHAL_DEVICE void store_relaxed(u64* p, u64 v) {
  __hip_atomic_store(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
COMMHAL_DEVICE u64 load_relaxed(const u64* p) {
  return __hip_atomic_load(const_cast<u64*>(p), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
COMMHAL_DEVICE u64 fetch_add_release(u64* p, u64 v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
COMMHAL_DEVICE u64 fetch_add_relaxed(u64* p, u64 v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
COMMHAL_DEVICE u64 fetch_max_release(u64* p, u64 v) {
  return __hip_atomic_fetch_max(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
COMMHAL_DEVICE u32 set_error_once(u32* p, u32 v) {
  u32 expected = 0;
  __hip_atomic_compare_exchange_strong(p, &expected, v, __ATOMIC_RELAXED, __ATOMIC_RELAXED,
                                       __HIP_MEMORY_SCOPE_SYSTEM);
  return expected;
}
COMMHAL_DEVICE void fence_acq_rel() { __atomic_thread_fence(__ATOMIC_ACQ_REL); }
COMMHAL_DEVICE u32 load_relaxed_u32(const u32* p) {
  return __hip_atomic_load(const_cast<u32*>(p), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
// Nanoseconds: wall_clock64() counts at the constant wall-clock rate, 100 MHz on
// MI200 / MI300 (not run on AMD hardware).
COMMHAL_DEVICE u64 now_ns() { return wall_clock64() * 10; }
COMMHAL_DEVICE void store_volatile_v2u32(void* p, u32 a, u32 b) {
  *reinterpret_cast<volatile u64*>(p) = (u64)a | ((u64)b << 32);
}
COMMHAL_DEVICE void load_volatile_v2u32(const void* p, u32& a, u32& b) {
  u64 v = *reinterpret_cast<const volatile u64*>(p);
  a = (u32)v;
  b = (u32)(v >> 32);
}
COMMHAL_DEVICE void store_volatile_v2u64(void* p, u64 a, u64 b) {
  typedef u64 v2 __attribute__((ext_vector_type(2)));
  v2 x = {a, b};
  __builtin_nontemporal_store(x, reinterpret_cast<v2*>(p));
}
COMMHAL_DEVICE void load_volatile_v2u64(const void* p, u64& a, u64& b) {
  typedef u64 v2 __attribute__((ext_vector_type(2)));
  v2 x = __builtin_nontemporal_load(reinterpret_cast<const v2*>(p));
  a = x.x;
  b = x.y;
}
COMMHAL_DEVICE void store_volatile_v4u32(void* p, u32 a, u32 b, u32 c, u32 d) {
  typedef u32 v4 __attribute__((ext_vector_type(4)));
  v4 x = {a, b, c, d};
  __builtin_nontemporal_store(x, reinterpret_cast<v4*>(p));
}
COMMHAL_DEVICE void load_volatile_v4u32(const void* p, u32& a, u32& b, u32& c, u32& d) {
  typedef u32 v4 __attribute__((ext_vector_type(4)));
  v4 x = __builtin_nontemporal_load(reinterpret_cast<const v4*>(p));
  a = x.x; b = x.y; c = x.z; d = x.w;
}

#endif  // COMMHAL_CUDA / COMMHAL_HIP

#endif  // !COMMHAL_HOST_LAYOUT

}  // namespace commhal
