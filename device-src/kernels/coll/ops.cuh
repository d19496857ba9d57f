// coll/ops.cuh — reduction operators: RedOp<type, op> over the element types of
// commhal/elem.h, the native f16 / bf16 / f32 sums, and vector / element loads and stores.
#pragma once
#include "coll/protocol.cuh"
#include "commhal/elem.h"

// ---- reduction operators ----
// Every operator `Op` the kernels take provides, for its element type:
//   ELEM                      bytes per element (1, 2, 4 or 8)
//   W                         the word one element travels in (its bits in the low ELEM
//                             bytes; load_elem / store_elem move exactly ELEM bytes)
//   add_w(W, W)               one element: the op (sum, prod, min, max; avg and
//                             premulsum reduce as sum)
//   add8(uint2, uint2)        8 bytes of packed elements (LL16 packets)
//   add16(v16, v16)           16 bytes (vectors)
//   PRE, pre_w(a, W), pre64(a, u64)   premulsum: an original input element times
//                             a.scalar, applied once, where the kernel loads an input
//                             (never to a partial result); identity for the other ops
//   FIN, fin_w(a, W), fin64(a, u64)   avg: the sum divided by a.nranks, applied once,
//                             where a final element is produced; identity otherwise
// The unit's own instantiations (OpF16 / OpBF16 / OpF32: sum on 32-bit words, the
// `_f16` / `_bf16` / `_f32` kernels) keep the native f16x2 / bf16x2 / f32 adds, and
// their pre / fin are compile-time identities: the same code as a plain sum. Every
// other (type, op) is RedOp<Ty, OP> below, compiled into its own module (host:
// backends/cuda-coll/src/kernels.rs) with -DCOLL_RED_T=Ty_<type> -DCOLL_RED_OP=<op>.
// Semantics: algorithms/src/dtype.rs (reduce_into / finalize), step by step; the
// COLL_OP_* codes, the element types and their ops are commhal/elem.h's.

// Sum on 32-bit words (the unit's own kernels): Op supplies add(u32, u32) and ELEM.
template <typename Op>
struct Words32 {
  typedef u32 W;
  static constexpr bool PRE = false;
  static constexpr bool FIN = false;
  static COMMHAL_DEVICE u32 add_w(u32 x, u32 y) { return Op::add(x, y); }
  static COMMHAL_DEVICE uint2 add8(uint2 x, uint2 y) {
    uint2 r;
    r.x = Op::add(x.x, y.x);
    r.y = Op::add(x.y, y.y);
    return r;
  }
  static COMMHAL_DEVICE v16 add16(v16 x, v16 y) {
    v16 r;
    r.x = Op::add(x.x, y.x);
    r.y = Op::add(x.y, y.y);
    r.z = Op::add(x.z, y.z);
    r.w = Op::add(x.w, y.w);
    return r;
  }
  static COMMHAL_DEVICE u32 pre_w(const CollArgs&, u32 x) { return x; }
  static COMMHAL_DEVICE u32 fin_w(const CollArgs&, u32 x) { return x; }
  static COMMHAL_DEVICE u64 pre64(const CollArgs&, u64 x) { return x; }
  static COMMHAL_DEVICE u64 fin64(const CollArgs&, u64 x) { return x; }
};

// ---- sum on 32-bit words holding 2 halves / 2 bfloat16 / 1 float ----
struct OpF16 : Words32<OpF16> {
  static COMMHAL_DEVICE u32 add(u32 x, u32 y) {
    u32 r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    return r;
  }
  static constexpr u32 ELEM = 2;
};
struct OpBF16 : Words32<OpBF16> {
  static COMMHAL_DEVICE u32 add(u32 x, u32 y) {
    u32 r;
    asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    return r;
  }
  static constexpr u32 ELEM = 2;
};
struct OpF32 : Words32<OpF32> {
  static COMMHAL_DEVICE u32 add(u32 x, u32 y) {
    return __float_as_uint(__uint_as_float(x) + __uint_as_float(y));
  }
  static constexpr u32 ELEM = 4;
};

// Every (type, op) but the unit's own sums: elements packed in 64-bit words, each lane
// reduced on its own (f16 / bf16: two x2 instructions per word).
template <typename T, int OP>
struct RedOp {
  typedef typename T::R R;
  typedef u64 W;
  static constexpr u32 ELEM = sizeof(R);
  static constexpr bool PRE = OP == COLL_OP_PREMULSUM;
  static constexpr bool FIN = OP == COLL_OP_AVG;
  static COMMHAL_DEVICE u64 add64(u64 x, u64 y) { return elem_op64<T, OP>(x, y); }
  static COMMHAL_DEVICE u64 add_w(u64 x, u64 y) { return (u64)elem_op<T, OP>((R)x, (R)y); }
  static COMMHAL_DEVICE uint2 add8(uint2 x, uint2 y) {
    const u64 r = add64((u64)x.x | ((u64)x.y << 32), (u64)y.x | ((u64)y.y << 32));
    return make_uint2((u32)r, (u32)(r >> 32));
  }
  static COMMHAL_DEVICE v16 add16(v16 x, v16 y) {
    const uint2 lo = add8(make_uint2(x.x, x.y), make_uint2(y.x, y.y));
    const uint2 hi = add8(make_uint2(x.z, x.w), make_uint2(y.z, y.w));
    return make_uint4(lo.x, lo.y, hi.x, hi.y);
  }
  static COMMHAL_DEVICE u64 pre_w(const CollArgs& a, u64 x) {
    if (!PRE) return x;
    return (u64)T::mul((R)x, (R)a.scalar);
  }
  static COMMHAL_DEVICE u64 fin_w(const CollArgs& a, u64 x) {
    if (!FIN) return x;
    return (u64)T::div((R)x, a.nranks);
  }
  static COMMHAL_DEVICE u64 pre64(const CollArgs& a, u64 x) {
    if (!PRE) return x;
    if constexpr (T::X2) {
      const u32 s2 = (u32)(R)a.scalar * 0x10001u;
      return (u64)T::op2(COLL_OP_PROD, (u32)x, s2) |
             ((u64)T::op2(COLL_OP_PROD, (u32)(x >> 32), s2) << 32);
    } else {
      const R s = (R)a.scalar;
      return elem_lanes<T>(x, 0, [s](R p, R) { return T::mul(p, s); });
    }
  }
  static COMMHAL_DEVICE u64 fin64(const CollArgs& a, u64 x) {
    if (!FIN) return x;
    const u32 n = a.nranks;
    return elem_lanes<T>(x, 0, [n](R p, R) { return T::div(p, n); });
  }
};

template <typename Op>
COMMHAL_DEVICE v16 add16(v16 x, v16 y) {
  return Op::add16(x, y);
}
template <typename Op>
COMMHAL_DEVICE uint2 add8(uint2 x, uint2 y) {
  return Op::add8(x, y);
}
// The pre-multiply of original input data (identity unless Op::PRE).
template <typename Op>
COMMHAL_DEVICE uint2 pre8(const CollArgs& a, uint2 x) {
  if (!Op::PRE) return x;
  const u64 r = Op::pre64(a, (u64)x.x | ((u64)x.y << 32));
  return make_uint2((u32)r, (u32)(r >> 32));
}
template <typename Op>
COMMHAL_DEVICE v16 pre16(const CollArgs& a, v16 x) {
  if (!Op::PRE) return x;
  const uint2 lo = pre8<Op>(a, make_uint2(x.x, x.y)), hi = pre8<Op>(a, make_uint2(x.z, x.w));
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}
// The final step of a fully reduced element (identity unless Op::FIN).
template <typename Op>
COMMHAL_DEVICE uint2 fin8(const CollArgs& a, uint2 x) {
  if (!Op::FIN) return x;
  const u64 r = Op::fin64(a, (u64)x.x | ((u64)x.y << 32));
  return make_uint2((u32)r, (u32)(r >> 32));
}
template <typename Op>
COMMHAL_DEVICE v16 fin16(const CollArgs& a, v16 x) {
  if (!Op::FIN) return x;
  const uint2 lo = fin8<Op>(a, make_uint2(x.x, x.y)), hi = fin8<Op>(a, make_uint2(x.z, x.w));
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}

// One element at byte offset `off` of `base`, its ELEM bytes in the low bytes of a W
// (the unit's own 2-byte sums: the high half of the word is zero and ignored).
template <typename Op>
COMMHAL_DEVICE typename Op::W load_elem(u64 base, u64 off) {
  typedef typename Op::W W;
  if (Op::ELEM == 1) return (W) * reinterpret_cast<const volatile u8*>(base + off);
  if (Op::ELEM == 2) return (W) * reinterpret_cast<const volatile unsigned short*>(base + off);
  if (Op::ELEM == 4) return (W) * reinterpret_cast<const volatile u32*>(base + off);
  return (W) * reinterpret_cast<const volatile u64*>(base + off);
}
template <typename Op>
COMMHAL_DEVICE void store_elem(u64 base, u64 off, typename Op::W v) {
  if (Op::ELEM == 1) *reinterpret_cast<u8*>(base + off) = (u8)v;
  else if (Op::ELEM == 2) *reinterpret_cast<unsigned short*>(base + off) = (unsigned short)v;
  else if (Op::ELEM == 4) *reinterpret_cast<u32*>(base + off) = (u32)v;
  else *reinterpret_cast<u64*>(base + off) = (u64)v;
}

// Chunk [begin, end) of `units` split over n parts: the first units % n parts get one
// more. Mirrored by layout::partition.
COMMHAL_DEVICE void partition(u64 units, u32 n, u32 i, u64& begin, u64& end) {
  const u64 base = units / n, rem = units % n;
  begin = i * base + (i < rem ? i : rem);
  end = begin + base + (i < rem ? 1 : 0);
}

// The same split, divided once, for code that asks for many parts: part i starts at
// begin(i) and has size(i) units (part 0 the largest).
struct Partition {
  u64 base, rem;
  COMMHAL_DEVICE Partition(u64 units, u32 n) : base(units / n), rem(units % n) {}
  COMMHAL_DEVICE u64 begin(u32 i) const { return i * base + (i < rem ? i : rem); }
  COMMHAL_DEVICE u64 size(u32 i) const { return base + (i < rem ? 1 : 0); }
};
