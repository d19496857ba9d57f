// commhal/elem.h — the element types and operators every reducing kernel uses (the
// hand-written collectives through coll/ops.cuh, the kernels generated from plans through
// commhal/plan.h): the COLL_OP_* codes, one type per data type (Ty_f64 ... Ty_u64: its
// raw bits R and add / mul / min / max / div by n) and the op applied to two elements
// (elem_op) or to the packed lanes of a 64-bit word (elem_op64).
//
// Semantics: the host reference algorithms/src/dtype.rs (reduce_into / finalize) and
// algorithms/src/fp8.rs, bit for bit, one step at a time: every op rounds to the type
// (f16 / bf16 / fp8 never accumulate in f32 across steps). avg reduces as sum; its last
// step divides by nranks in the type (T::div). premulsum reduces as sum after each
// input was multiplied by the scalar in the type (T::mul).
#pragma once
#include "commhal/commhal_port.h"

namespace commhal {

// Operator codes: CollArgs::red_op, -DCOLL_RED_OP and codegen's op_code (the algorithms
// RedOp order: sum, prod, min, max, avg).
#define COLL_OP_SUM 0
#define COLL_OP_PROD 1
#define COLL_OP_MIN 2
#define COLL_OP_MAX 3
#define COLL_OP_AVG 4
#define COLL_OP_PREMULSUM 5

// ---- element types: raw bits R, and add / mul / min / max / div by n ----
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

// One element of OP (avg and premulsum reduce as sum).
template <typename T, int OP>
COMMHAL_DEVICE typename T::R elem_op(typename T::R x, typename T::R y) {
  if (OP == COLL_OP_PROD) return T::mul(x, y);
  if (OP == COLL_OP_MIN) return T::min(x, y);
  if (OP == COLL_OP_MAX) return T::max(x, y);
  return T::add(x, y);
}

// f(lane of x, lane of y) for every lane of a 64-bit word of packed elements of T.
template <typename T, typename F>
COMMHAL_DEVICE u64 elem_lanes(u64 x, u64 y, F f) {
  typedef typename T::R R;
  u64 r = 0;
#pragma unroll
  for (u32 l = 0; l < 8 / sizeof(R); ++l) {
    const u32 sh = 8 * sizeof(R) * l;
    r |= (u64)f((R)(x >> sh), (R)(y >> sh)) << sh;
  }
  return r;
}

// OP on every lane of a 64-bit word (f16 / bf16: two x2 instructions).
template <typename T, int OP>
COMMHAL_DEVICE u64 elem_op64(u64 x, u64 y) {
  typedef typename T::R R;
  if constexpr (T::X2) {
    return (u64)T::op2(OP, (u32)x, (u32)y) |
           ((u64)T::op2(OP, (u32)(x >> 32), (u32)(y >> 32)) << 32);
  } else {
    return elem_lanes<T>(x, y, [](R p, R q) { return elem_op<T, OP>(p, q); });
  }
}

}  // namespace commhal
