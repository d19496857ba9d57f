// coll/ops.cuh — reduction operators: element types, RedOp<type, op>, the native
// f16 / bf16 / f32 sums, and vector / element loads and stores.
#pragma once
#include "coll/protocol.cuh"

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
// Semantics: algorithms/src/dtype.rs (reduce_into / finalize), step by step.
#define COLL_OP_SUM 0
#define COLL_OP_PROD 1
#define COLL_OP_MIN 2
#define COLL_OP_MAX 3
#define COLL_OP_AVG 4
#define COLL_OP_PREMULSUM 5

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

// ---- element types of RedOp: raw bits R, and add / mul / min / max / div by n ----
// Integers: sum and prod wrap (two's complement), min / max compare as S (signed or
// not), avg divides the wrapped sum truncating toward zero (C, as Rust's `/`).
template <typename R_, typename S>
struct TyInt {
  typedef R_ R;
  static constexpr bool X2 = false;
  static COMMHAL_DEVICE R add(R x, R y) { return (R)(x + y); }
  static COMMHAL_DEVICE R mul(R x, R y) { return (R)(x * y); }
  static COMMHAL_DEVICE R min(R x, R y) { return (S)x < (S)y ? x : y; }
  static COMMHAL_DEVICE R max(R x, R y) { return (S)x < (S)y ? y : x; }
  static COMMHAL_DEVICE R div(R x, u32 n) { return (R)((S)x / (S)n); }
};
typedef TyInt<u8, signed char> Ty_i8;
typedef TyInt<u8, u8> Ty_u8;
typedef TyInt<u32, int> Ty_i32;
typedef TyInt<u32, u32> Ty_u32;
typedef TyInt<u64, long long> Ty_i64;
typedef TyInt<u64, u64> Ty_u64;

// IEEE in the type itself, round to nearest even; min / max: min.f32 / max.f32 (fminf,
// fmin): a NaN operand loses, as Rust's f32::min / f64::min.
struct Ty_f32 {
  typedef u32 R;
  static constexpr bool X2 = false;
  static COMMHAL_DEVICE float f(R x) { return __uint_as_float(x); }
  static COMMHAL_DEVICE R add(R x, R y) { return __float_as_uint(__fadd_rn(f(x), f(y))); }
  static COMMHAL_DEVICE R mul(R x, R y) { return __float_as_uint(__fmul_rn(f(x), f(y))); }
  static COMMHAL_DEVICE R min(R x, R y) { return __float_as_uint(fminf(f(x), f(y))); }
  static COMMHAL_DEVICE R max(R x, R y) { return __float_as_uint(fmaxf(f(x), f(y))); }
  static COMMHAL_DEVICE R div(R x, u32 n) { return __float_as_uint(__fdiv_rn(f(x), (float)n)); }
};
struct Ty_f64 {
  typedef u64 R;
  static constexpr bool X2 = false;
  static COMMHAL_DEVICE double f(R x) { return __longlong_as_double((long long)x); }
  static COMMHAL_DEVICE R b(double x) { return (R)__double_as_longlong(x); }
  static COMMHAL_DEVICE R add(R x, R y) { return b(__dadd_rn(f(x), f(y))); }
  static COMMHAL_DEVICE R mul(R x, R y) { return b(__dmul_rn(f(x), f(y))); }
  static COMMHAL_DEVICE R min(R x, R y) { return b(fmin(f(x), f(y))); }
  static COMMHAL_DEVICE R max(R x, R y) { return b(fmax(f(x), f(y))); }
  static COMMHAL_DEVICE R div(R x, u32 n) { return b(__ddiv_rn(f(x), (double)n)); }
};

// f16 / bf16: the native x2 instructions on 32-bit words (op2); one element goes
// through the low half of a word. Each is bitwise the f32 op rounded back (the exact
// results of +, x of two such values need at most 2p + 2 <= 24 bits of f32's
// significand, so the double rounding is innocuous; min / max are exact). avg divides
// in f32 and rounds, as finalize_avg.
template <bool BF>
struct TyHalf {
  typedef unsigned short R;
  static constexpr bool X2 = true;
  static COMMHAL_DEVICE u32 op2(int op, u32 x, u32 y) {
    u32 r;
    if (op == COLL_OP_PROD) {
      if (BF) asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
      else asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    } else if (op == COLL_OP_MIN) {
      if (BF) asm("min.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
      else asm("min.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    } else if (op == COLL_OP_MAX) {
      if (BF) asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
      else asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    } else {
      if (BF) asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
      else asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    }
    return r;
  }
  static COMMHAL_DEVICE R add(R x, R y) { return (R)op2(COLL_OP_SUM, x, y); }
  static COMMHAL_DEVICE R mul(R x, R y) { return (R)op2(COLL_OP_PROD, x, y); }
  static COMMHAL_DEVICE R min(R x, R y) { return (R)op2(COLL_OP_MIN, x, y); }
  static COMMHAL_DEVICE R max(R x, R y) { return (R)op2(COLL_OP_MAX, x, y); }
  static COMMHAL_DEVICE float to_f(R x) {
    if (BF) return __uint_as_float((u32)x << 16);
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(x));
    return r;
  }
  static COMMHAL_DEVICE R from_f(float x) {
    R r;
    if (BF) asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
    else asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
  }
  static COMMHAL_DEVICE R div(R x, u32 n) { return from_f(__fdiv_rn(to_f(x), (float)n)); }
};
typedef TyHalf<false> Ty_f16;
typedef TyHalf<true> Ty_bf16;

// fp8 (OCP E4M3FN: M = 3, BIAS = 7, largest finite code 0x7e, NaN 0x7f, no infinities;
// E5M2: M = 2, BIAS = 15, 0x7b, NaN 0x7e, inf 0x7c): every op decodes to f32 (exact),
// applies the f32 op and encodes back with algorithms/src/fp8.rs's f32_to_fp8 rules,
// in software: round to nearest even on the fp8 grid (subnormals too), a finite
// overflow saturates to the largest finite value, +-inf saturates (E4M3) or stays inf
// (E5M2), NaN becomes the canonical NaN with the input's sign, -0 stays -0. (The
// hardware cvt.rn.satfinite.e*m*x2.f32 saturates E5M2's infinities and drops NaN
// signs, so it would not match the host reference bit for bit.)
COMMHAL_DEVICE float coll_pow2(int e) { return __uint_as_float((u32)(e + 127) << 23); }
template <int M, int BIAS, u32 MAXC, u32 NANC>
struct TyFp8 {
  typedef u8 R;
  static constexpr bool X2 = false;
  // Not inlined: inlined into every lane of every unrolled loop, the conversions made
  // NVRTC take about a minute per fp8 module (a few seconds this way).
  static __device__ __noinline__ float to_f(R c) {
    const u32 mag = c & 0x7fu;
    float v;
    if (M == 3 ? mag == 0x7fu : mag > 0x7cu) {
      v = __uint_as_float(0x7fc00000u);
    } else if (M == 2 && mag == 0x7cu) {
      v = __uint_as_float(0x7f800000u);
    } else {
      const u32 ex = mag >> M, man = mag & ((1u << M) - 1);
      v = ex == 0 ? (float)man * coll_pow2(1 - BIAS - M)
                  : (float)((1u << M) + man) * coll_pow2((int)ex - BIAS - M);
    }
    return (c & 0x80u) ? -v : v;
  }
  static __device__ __noinline__ R from_f(float x) {
    const u32 bits = __float_as_uint(x);
    const u32 sign = (bits >> 24) & 0x80u;
    const u32 ab = bits & 0x7fffffffu;
    if (ab > 0x7f800000u) return (R)(sign | NANC);
    if (ab == 0x7f800000u) return (R)(sign | (M == 3 ? MAXC : 0x7cu));
    if (ab == 0) return (R)sign;
    int e = (int)(ab >> 23) - 127;
    if (e < 1 - BIAS) e = 1 - BIAS;
    if (e > 30) return (R)(sign | MAXC);
    // |x| in quanta of the fp8 grid at exponent e: a power-of-two scaling, exact
    u32 q = (u32)rintf(__fmul_rn(__uint_as_float(ab), coll_pow2(M - e)));
    if (q >= (2u << M)) {  // carried into the next binade: q was exactly 2^(M+1)
      q >>= 1;
      e += 1;
    }
    const u32 mag = q < (1u << M) ? q : ((u32)(e + BIAS) << M) | (q - (1u << M));
    return (R)(sign | (mag > MAXC ? MAXC : mag));
  }
  static COMMHAL_DEVICE R add(R x, R y) { return from_f(__fadd_rn(to_f(x), to_f(y))); }
  static COMMHAL_DEVICE R mul(R x, R y) { return from_f(__fmul_rn(to_f(x), to_f(y))); }
  static COMMHAL_DEVICE R min(R x, R y) { return from_f(fminf(to_f(x), to_f(y))); }
  static COMMHAL_DEVICE R max(R x, R y) { return from_f(fmaxf(to_f(x), to_f(y))); }
  static COMMHAL_DEVICE R div(R x, u32 n) { return from_f(__fdiv_rn(to_f(x), (float)n)); }
};
typedef TyFp8<3, 7, 0x7eu, 0x7fu> Ty_f8e4m3;
typedef TyFp8<2, 15, 0x7bu, 0x7eu> Ty_f8e5m2;

// Every (type, op) but the unit's own sums: elements packed in 64-bit words, each lane
// reduced on its own (f16 / bf16: two x2 instructions per word).
template <typename T, int OP>
struct RedOp {
  typedef typename T::R R;
  typedef u64 W;
  static constexpr u32 ELEM = sizeof(R);
  static constexpr bool PRE = OP == COLL_OP_PREMULSUM;
  static constexpr bool FIN = OP == COLL_OP_AVG;
  static COMMHAL_DEVICE R op1(R x, R y) {
    if (OP == COLL_OP_PROD) return T::mul(x, y);
    if (OP == COLL_OP_MIN) return T::min(x, y);
    if (OP == COLL_OP_MAX) return T::max(x, y);
    return T::add(x, y);
  }
  // f(lane of x, lane of y) for every lane of a 64-bit word
  template <typename F>
  static COMMHAL_DEVICE u64 lanes(u64 x, u64 y, F f) {
    u64 r = 0;
#pragma unroll
    for (u32 l = 0; l < 8 / ELEM; ++l) {
      const u32 sh = 8 * ELEM * l;
      r |= (u64)f((R)(x >> sh), (R)(y >> sh)) << sh;
    }
    return r;
  }
  static COMMHAL_DEVICE u64 add64(u64 x, u64 y) {
    if constexpr (T::X2) {
      return (u64)T::op2(OP, (u32)x, (u32)y) | ((u64)T::op2(OP, (u32)(x >> 32), (u32)(y >> 32)) << 32);
    } else {
      return lanes(x, y, [](R p, R q) { return op1(p, q); });
    }
  }
  static COMMHAL_DEVICE u64 add_w(u64 x, u64 y) { return (u64)op1((R)x, (R)y); }
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
      return lanes(x, 0, [s](R p, R) { return T::mul(p, s); });
    }
  }
  static COMMHAL_DEVICE u64 fin64(const CollArgs& a, u64 x) {
    if (!FIN) return x;
    const u32 n = a.nranks;
    return lanes(x, 0, [n](R p, R) { return T::div(p, n); });
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
