//! The device reduction operators on the host: g++ compiles the element types of
//! `commhal/elem.h` (what hand and generated plan kernels reduce with) and
//! `coll/ops.cuh`'s `RedOp` over them (integers, f32, f64, fp8 with its software
//! conversions; not f16 / bf16, which are PTX instructions) with host stand-ins for the
//! CUDA intrinsics, and every lane of `add64`, `pre64` and `fin64` must equal the host
//! reference (`commhal_algorithms::dtype`), bit for bit: exhaustively for fp8 pairs,
//! on random words for the other types. What this cannot show: that the GPU's
//! intrinsics (`__fadd_rn`, `rintf`, `fminf`, ...) behave as their IEEE host
//! stand-ins — the GPU run's checks do.
//!
//! Needs a host C++ compiler: `$CXX`, else `g++` (as device-src's layout test).

use std::io::Write;
use std::process::{Command, Stdio};

use commhal_algorithms::dtype::{DataType, RedOp, finalize_avg, reduce_into};

const SHIMS: &str = r#"
#include <cstdint>
#include <cstring>
#include <cmath>
#include <cstdio>
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
#define COMMHAL_DEVICE inline
#define __device__
#define __noinline__ __attribute__((noinline))
struct uint2 { u32 x, y; };
struct uint4 { u32 x, y, z, w; };
typedef uint4 v16;
inline uint2 make_uint2(u32 x, u32 y) { return uint2{x, y}; }
inline uint4 make_uint4(u32 x, u32 y, u32 z, u32 w) { return uint4{x, y, z, w}; }
struct CollArgs { u64 scalar; u32 nranks; };
inline u32 __float_as_uint(float f) { u32 u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(u32 u) { float f; memcpy(&f, &u, 4); return f; }
inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline double __dadd_rn(double a, double b) { volatile double r = a + b; return r; }
inline double __dmul_rn(double a, double b) { volatile double r = a * b; return r; }
inline double __ddiv_rn(double a, double b) { volatile double r = a / b; return r; }
// PTX min / max (min.f32, min.f64, ...): a NaN operand (signaling too) loses; glibc's
// fminf quiets a signaling NaN instead, which PTX does not
template <typename F> inline F ptx_min(F a, F b) { return a != a ? b : b != b ? a : (b < a ? b : a); }
template <typename F> inline F ptx_max(F a, F b) { return a != a ? b : b != b ? a : (b > a ? b : a); }
#define fminf ptx_min<float>
#define fmaxf ptx_max<float>
#define fmin ptx_min<double>
#define fmax ptx_max<double>
"#;

const MAIN: &str = r#"
template <typename T, int OP>
void run(u64 a, u64 b, u64 s, u32 n) {
  CollArgs args{s, n};
  typedef RedOp<T, OP> R;
  printf("%llx %llx %llx\n", (unsigned long long)R::add64(a, b),
         (unsigned long long)R::pre64(args, a), (unsigned long long)R::fin64(args, a));
}
template <typename T>
void run_op(int op, u64 a, u64 b, u64 s, u32 n) {
  switch (op) {
    case 0: run<T, 0>(a, b, s, n); break;
    case 1: run<T, 1>(a, b, s, n); break;
    case 2: run<T, 2>(a, b, s, n); break;
    case 3: run<T, 3>(a, b, s, n); break;
    case 4: run<T, 4>(a, b, s, n); break;
    default: run<T, 5>(a, b, s, n); break;
  }
}
int main() {
  char ty[16];
  int op;
  unsigned long long a, b, s;
  unsigned n;
  while (scanf("%15s %d %llx %llx %llx %u", ty, &op, &a, &b, &s, &n) == 6) {
    const char* t = ty;
    if (!strcmp(t, "i8")) run_op<Ty_i8>(op, a, b, s, n);
    else if (!strcmp(t, "u8")) run_op<Ty_u8>(op, a, b, s, n);
    else if (!strcmp(t, "i32")) run_op<Ty_i32>(op, a, b, s, n);
    else if (!strcmp(t, "u32")) run_op<Ty_u32>(op, a, b, s, n);
    else if (!strcmp(t, "i64")) run_op<Ty_i64>(op, a, b, s, n);
    else if (!strcmp(t, "u64")) run_op<Ty_u64>(op, a, b, s, n);
    else if (!strcmp(t, "f32")) run_op<Ty_f32>(op, a, b, s, n);
    else if (!strcmp(t, "f64")) run_op<Ty_f64>(op, a, b, s, n);
    else if (!strcmp(t, "f8e4m3")) run_op<Ty_f8e4m3>(op, a, b, s, n);
    else if (!strcmp(t, "f8e5m2")) run_op<Ty_f8e5m2>(op, a, b, s, n);
    else { printf("bad type %s\n", t); return 1; }
  }
  return 0;
}
"#;

const OPS: [RedOp; 6] = [
    RedOp::Sum,
    RedOp::Prod,
    RedOp::Min,
    RedOp::Max,
    RedOp::Avg,
    RedOp::Sum, // premulsum: its steps are sums
];

/// `name`'s text from `from` up to (not including) `to`.
fn section(name: &str, from: &str, to: &str) -> &'static str {
    let src = commhal_device_src::header(name)
        .unwrap_or_else(|| panic!("{name} is embedded"))
        .contents;
    let start = src.find(from).unwrap_or_else(|| panic!("{name}: {from}"));
    let end = start
        + src[start..]
            .find(to)
            .unwrap_or_else(|| panic!("{name}: {to}"));
    &src[start..end]
}

fn harness() -> std::path::PathBuf {
    // commhal/elem.h's element types and ops (the generated plan kernels' too), then
    // coll/ops.cuh's RedOp over them
    let elem = section(
        "commhal/elem.h",
        "// Operator codes",
        "}  // namespace commhal",
    );
    let red_op = section(
        "coll/ops.cuh",
        "// Every (type, op) but the unit's own sums",
        "template <typename Op>\nCOMMHAL_DEVICE v16 add16",
    );
    let dir = std::env::temp_dir().join(format!("commhal-host-red-ops-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cpp = dir.join("red_ops.cpp");
    std::fs::write(&cpp, format!("{SHIMS}{elem}{red_op}{MAIN}")).unwrap();
    let exe = dir.join("red_ops");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".to_string());
    let out = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-ffp-contract=off", "-o"])
        .arg(&exe)
        .arg(&cpp)
        .output()
        .unwrap_or_else(|e| panic!("{cxx} not runnable ({e}): install g++ or set CXX"));
    assert!(
        out.status.success(),
        "{cxx} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn lanes(dt: DataType, w: u64) -> Vec<Vec<u8>> {
    let s = dt.size();
    w.to_le_bytes().chunks(s).map(|c| c.to_vec()).collect()
}

/// The host reference of one lane: (op(a, b), a x scalar, a / n for avg).
fn reference(dt: DataType, op: usize, a: &[u8], b: &[u8], s: &[u8], n: u32) -> [Vec<u8>; 3] {
    let mut add = a.to_vec();
    reduce_into(&mut add, b, dt, OPS[op]).unwrap();
    let mut pre = a.to_vec();
    if op == 5 {
        reduce_into(&mut pre, s, dt, RedOp::Prod).unwrap();
    }
    let mut fin = a.to_vec();
    if op == 4 {
        finalize_avg(&mut fin, dt, n as usize).unwrap();
    }
    [add, pre, fin]
}

/// Same value (NaNs of any sign and payload are equal: the GPU's canonical NaN may
/// differ from the host's, see the report).
fn same(dt: DataType, x: &[u8], y: &[u8]) -> bool {
    if x == y {
        return true;
    }
    dt.is_float() && dt.decode(x, 0).is_nan() && dt.decode(y, 0).is_nan()
}

#[test]
fn device_red_ops_match_the_host_reference() {
    let exe = harness();
    let mut cases: Vec<(DataType, usize, u64, u64, u64, u32)> = Vec::new();
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let f = |dt: DataType, v: f64| -> u64 {
        let mut b = Vec::new();
        dt.encode(v, &mut b);
        b.resize(8, 0);
        u64::from_le_bytes(b.try_into().unwrap())
    };
    for dt in DataType::ALL {
        if matches!(dt, DataType::F16 | DataType::Bf16) {
            continue;
        }
        for op in 0..6 {
            let scalar = f(dt, if dt.is_float() { -1.75 } else { -3.0 });
            if dt.size() == 1 && dt.is_float() {
                // every pair of codes, 8 lanes per word
                for a in 0..256u64 {
                    for b0 in (0..256u64).step_by(8) {
                        let mut aw = 0;
                        let mut bw = 0;
                        for l in 0..8 {
                            aw |= a << (8 * l);
                            bw |= (b0 + l) << (8 * l);
                        }
                        cases.push((dt, op, aw, bw, scalar, 1 + (a as u32 % 8)));
                    }
                }
            } else {
                for _ in 0..4000 {
                    let (a, b) = if dt.is_float() {
                        // random finite values of mixed magnitude, and raw bits
                        let r = next();
                        if r & 3 == 0 {
                            (next(), next())
                        } else {
                            let v = |r: u64| {
                                ((r % 2000) as f64 - 1000.0) / 7.0
                                    * 2f64.powi((r >> 20) as i32 % 40 - 20)
                            };
                            let pack = |x: u64| if dt.size() == 4 { x | (x << 32) } else { x };
                            (
                                pack(
                                    f(dt, v(next()))
                                        & if dt.size() == 4 {
                                            0xffff_ffff
                                        } else {
                                            u64::MAX
                                        },
                                ),
                                pack(
                                    f(dt, v(next()))
                                        & if dt.size() == 4 {
                                            0xffff_ffff
                                        } else {
                                            u64::MAX
                                        },
                                ),
                            )
                        }
                    } else {
                        (next(), next())
                    };
                    cases.push((dt, op, a, b, scalar, 1 + (next() % 8) as u32));
                }
            }
        }
    }
    let mut input = String::new();
    for (dt, op, a, b, s, n) in &cases {
        input.push_str(&format!("{} {op} {a:x} {b:x} {s:x} {n}\n", dt.name()));
    }
    let mut child = Command::new(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), cases.len());
    let mut bad = Vec::new();
    for ((dt, op, a, b, s, n), line) in cases.iter().zip(&lines) {
        let got: Vec<u64> = line
            .split(' ')
            .map(|h| u64::from_str_radix(h, 16).unwrap())
            .collect();
        let (la, lb) = (lanes(*dt, *a), lanes(*dt, *b));
        let ls = lanes(*dt, *s);
        for (i, (x, y)) in la.iter().zip(&lb).enumerate() {
            let want = reference(*dt, *op, x, y, &ls[0], *n);
            for (k, w) in want.iter().enumerate() {
                let g = &lanes(*dt, got[k])[i];
                if !same(*dt, g, w) && bad.len() < 20 {
                    bad.push(format!(
                        "{dt} op {op} n {n} lane {i} ({}): a {x:02x?} b {y:02x?} got {g:02x?} want {w:02x?}",
                        ["add64", "pre64", "fin64"][k]
                    ));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
    let _ = std::fs::remove_dir_all(exe.parent().unwrap());
}
