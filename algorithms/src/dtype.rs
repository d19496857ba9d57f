//! Data types, reduction operators and the reduce kernel on byte slices.
//!
//! Buffers are raw bytes in **native byte order** (they are device memory). Every function
//! here checks lengths and returns [`AlgoError`] on bad input; none panics.
//!
//! # Reduction semantics (per step, like NCCL)
//! * `f64`, `f32`: IEEE arithmetic in the type itself.
//! * `f16`, `bf16`, fp8: each step widens both operands to `f32`, applies the op, and
//!   rounds the result back to the type (round-to-nearest-even; fp8 saturates, see
//!   [`crate::fp8`]). A multi-step reduction therefore rounds after every step, as NCCL
//!   does; the result depends on the order of steps unless the values are exact.
//! * Integers: `sum` and `prod` **wrap** on overflow (two's complement), `min`/`max` are exact.
//! * `avg` reduces as `sum`; the plan then applies [`finalize_avg`] once to each fully
//!   reduced chunk (an `Op::Finalize`). Floats divide by `nranks` (f16/bf16/fp8 in `f32`,
//!   then round); integers use integer division **truncating toward zero** (Rust `/`,
//!   C semantics) of the wrapped sum. Every (type, op) pair is valid.

use crate::error::AlgoError;
use crate::fp8::{Fp8Format, f32_to_fp8, fp8_to_f32};
use half::{bf16, f16};
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// Element type of a collective's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataType {
    /// IEEE binary64.
    F64,
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// OCP FP8 E4M3FN (no infinities, max 448).
    F8E4M3,
    /// OCP FP8 E5M2 (max 57344, has infinities).
    F8E5M2,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
}

impl DataType {
    /// Every type, for tests and CLIs.
    pub const ALL: [DataType; 12] = [
        DataType::F64,
        DataType::F32,
        DataType::F16,
        DataType::Bf16,
        DataType::F8E4M3,
        DataType::F8E5M2,
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DataType::F64 | DataType::I64 | DataType::U64 => 8,
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::F8E4M3 | DataType::F8E5M2 | DataType::I8 | DataType::U8 => 1,
        }
    }

    /// Whether it is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F64
                | DataType::F32
                | DataType::F16
                | DataType::Bf16
                | DataType::F8E4M3
                | DataType::F8E5M2
        )
    }

    /// Short name (`f32`, `bf16`, `f8e4m3`, ...), as used on command lines.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::F64 => "f64",
            DataType::F32 => "f32",
            DataType::F16 => "f16",
            DataType::Bf16 => "bf16",
            DataType::F8E4M3 => "f8e4m3",
            DataType::F8E5M2 => "f8e5m2",
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::U32 => "u32",
            DataType::I64 => "i64",
            DataType::U64 => "u64",
        }
    }

    /// Parse a [`DataType::name`].
    ///
    /// nccl-tests' names are accepted too (`float`, `half`, `bfloat16`, `double`,
    /// `int8`, `uint8`, `int32`, `uint32`, `int64`, `uint64`, `fp8_e4m3`, `fp8_e5m2`), so
    /// `commhal bench -d float` works as `all_reduce_perf -d float` does.
    pub fn from_name(s: &str) -> Result<DataType, AlgoError> {
        let canonical = match s {
            "float" => "f32",
            "half" => "f16",
            "bfloat16" => "bf16",
            "double" => "f64",
            "int8" => "i8",
            "uint8" => "u8",
            "int32" | "int" => "i32",
            "uint32" => "u32",
            "int64" => "i64",
            "uint64" => "u64",
            "fp8_e4m3" => "f8e4m3",
            "fp8_e5m2" => "f8e5m2",
            other => other,
        };
        DataType::ALL
            .into_iter()
            .find(|d| d.name() == canonical)
            .ok_or_else(|| {
                AlgoError::Invalid(format!(
                    "unknown data type `{s}`; known: {} (or nccl-tests' float, half, bfloat16, double, int8, uint8, int32, uint32, int64, uint64, fp8_e4m3, fp8_e5m2)",
                    DataType::ALL.map(|d| d.name()).join(", ")
                ))
            })
    }

    /// Encode an `f64` as one element (rounded/saturated/wrapped as the type does).
    /// For tests and for filling buffers.
    pub fn encode(self, v: f64, out: &mut Vec<u8>) {
        match self {
            DataType::F64 => out.extend_from_slice(&v.to_ne_bytes()),
            DataType::F32 => out.extend_from_slice(&(v as f32).to_ne_bytes()),
            DataType::F16 => out.extend_from_slice(&f16::from_f64(v).to_ne_bytes()),
            DataType::Bf16 => out.extend_from_slice(&bf16::from_f64(v).to_ne_bytes()),
            DataType::F8E4M3 => out.push(f32_to_fp8(v as f32, Fp8Format::E4M3)),
            DataType::F8E5M2 => out.push(f32_to_fp8(v as f32, Fp8Format::E5M2)),
            DataType::I8 => out.push(v as i64 as i8 as u8),
            DataType::U8 => out.push(v as i64 as u8),
            DataType::I32 => out.extend_from_slice(&(v as i64 as i32).to_ne_bytes()),
            DataType::U32 => out.extend_from_slice(&(v as i64 as u32).to_ne_bytes()),
            DataType::I64 => out.extend_from_slice(&(v as i64).to_ne_bytes()),
            DataType::U64 => out.extend_from_slice(&(v as i64 as u64).to_ne_bytes()),
        }
    }

    /// Decode element `i` of `buf` as `f64` (exact for all but large 64-bit integers).
    pub fn decode(self, buf: &[u8], i: usize) -> f64 {
        let s = self.size();
        let b = &buf[i * s..(i + 1) * s];
        match self {
            DataType::F64 => f64::from_ne_bytes(b.try_into().unwrap_or_default()),
            DataType::F32 => f32::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
            DataType::F16 => f16::from_ne_bytes([b[0], b[1]]).to_f64(),
            DataType::Bf16 => bf16::from_ne_bytes([b[0], b[1]]).to_f64(),
            DataType::F8E4M3 => fp8_to_f32(b[0], Fp8Format::E4M3) as f64,
            DataType::F8E5M2 => fp8_to_f32(b[0], Fp8Format::E5M2) as f64,
            DataType::I8 => b[0] as i8 as f64,
            DataType::U8 => b[0] as f64,
            DataType::I32 => i32::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
            DataType::U32 => u32::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
            DataType::I64 => i64::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
            DataType::U64 => u64::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
        }
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedOp {
    /// Sum (integers wrap).
    Sum,
    /// Product (integers wrap).
    Prod,
    /// Minimum (floats: IEEE `minNum`-like, `f32::min`: a NaN operand loses).
    Min,
    /// Maximum (floats: `f32::max`: a NaN operand loses).
    Max,
    /// Average: sum, then [`finalize_avg`] divides by the rank count.
    Avg,
}

impl RedOp {
    /// Every operator.
    pub const ALL: [RedOp; 5] = [RedOp::Sum, RedOp::Prod, RedOp::Min, RedOp::Max, RedOp::Avg];

    /// Short name.
    pub const fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Min => "min",
            RedOp::Max => "max",
            RedOp::Avg => "avg",
        }
    }

    /// Parse a [`RedOp::name`].
    pub fn from_name(s: &str) -> Result<RedOp, AlgoError> {
        RedOp::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| {
                AlgoError::Invalid(format!(
                    "unknown reduction op `{s}`; known: sum, prod, min, max, avg"
                ))
            })
    }
}

/// Whether `op` is defined on `dtype`: always `Ok` (see the module docs for integer avg);
/// kept as a function so callers check in one place if a future type restricts it.
pub fn check_op(dtype: DataType, op: RedOp) -> Result<(), AlgoError> {
    let _ = (dtype, op);
    Ok(())
}

fn check_lengths(what: &str, dst: usize, src: usize, dtype: DataType) -> Result<(), AlgoError> {
    if dst != src {
        return Err(AlgoError::Invalid(format!(
            "{what}: destination has {dst} bytes but source has {src}; pass equal-length slices"
        )));
    }
    if !dst.is_multiple_of(dtype.size()) {
        return Err(AlgoError::Invalid(format!(
            "{what}: {dst} bytes is not a whole number of {dtype} elements ({} bytes each)",
            dtype.size()
        )));
    }
    Ok(())
}

/// One step of `op` on `f32` (used for every type narrower than f32).
#[inline(always)]
fn op_f32(op: RedOp, a: f32, b: f32) -> f32 {
    match op {
        RedOp::Sum | RedOp::Avg => a + b,
        RedOp::Prod => a * b,
        RedOp::Min => a.min(b),
        RedOp::Max => a.max(b),
    }
}

macro_rules! float_loop {
    ($dst:expr, $src:expr, $t:ty, $op:expr) => {{
        let f: fn($t, $t) -> $t = match $op {
            RedOp::Sum | RedOp::Avg => |a, b| a + b,
            RedOp::Prod => |a, b| a * b,
            RedOp::Min => |a: $t, b| a.min(b),
            RedOp::Max => |a: $t, b| a.max(b),
        };
        elementwise::<$t, { std::mem::size_of::<$t>() }>(
            $dst,
            $src,
            f,
            <$t>::from_ne_bytes,
            <$t>::to_ne_bytes,
        );
    }};
}

macro_rules! int_loop {
    ($dst:expr, $src:expr, $t:ty, $op:expr) => {{
        let f: fn($t, $t) -> $t = match $op {
            RedOp::Sum | RedOp::Avg => |a: $t, b| a.wrapping_add(b),
            RedOp::Prod => |a: $t, b| a.wrapping_mul(b),
            RedOp::Min => |a: $t, b| a.min(b),
            RedOp::Max => |a: $t, b| a.max(b),
        };
        elementwise::<$t, { std::mem::size_of::<$t>() }>(
            $dst,
            $src,
            f,
            <$t>::from_ne_bytes,
            <$t>::to_ne_bytes,
        );
    }};
}

/// The inner loop: an aligned fast path over typed slices (vectorizable), and a byte-wise
/// fallback for unaligned slices (same results).
#[inline(always)]
fn elementwise<T: bytemuck::Pod, const N: usize>(
    dst: &mut [u8],
    src: &[u8],
    f: fn(T, T) -> T,
    from: fn([u8; N]) -> T,
    to: fn(T) -> [u8; N],
) {
    match (
        bytemuck::try_cast_slice_mut::<u8, T>(dst),
        bytemuck::try_cast_slice::<u8, T>(src),
    ) {
        (Ok(d), Ok(s)) => {
            for (d, s) in d.iter_mut().zip(s) {
                *d = f(*d, *s);
            }
        }
        (Ok(d), Err(_)) => {
            // dst aligned but src not: go through bytes for src.
            for (d, s) in d.iter_mut().zip(src.chunks_exact(N)) {
                let mut b = [0u8; N];
                b.copy_from_slice(s);
                *d = f(*d, from(b));
            }
        }
        (Err(_), _) => {
            let dst: &mut [u8] = dst;
            for (d, s) in dst.chunks_exact_mut(N).zip(src.chunks_exact(N)) {
                let mut a = [0u8; N];
                a.copy_from_slice(d);
                let mut b = [0u8; N];
                b.copy_from_slice(s);
                d.copy_from_slice(&to(f(from(a), from(b))));
            }
        }
    }
}

fn fp8_table(fmt: Fp8Format) -> &'static [f32; 256] {
    static E4: OnceLock<[f32; 256]> = OnceLock::new();
    static E5: OnceLock<[f32; 256]> = OnceLock::new();
    let cell = match fmt {
        Fp8Format::E4M3 => &E4,
        Fp8Format::E5M2 => &E5,
    };
    cell.get_or_init(|| std::array::from_fn(|c| fp8_to_f32(c as u8, fmt)))
}

/// `dst[i] = op(dst[i], src[i])` for every element. Slices must have equal length, a
/// whole number of elements; any alignment is accepted (aligned slices take the fast path).
/// For `RedOp::Avg` this is the summing step; call [`finalize_avg`] once at the end.
pub fn reduce_into(
    dst: &mut [u8],
    src: &[u8],
    dtype: DataType,
    op: RedOp,
) -> Result<(), AlgoError> {
    check_lengths("reduce_into", dst.len(), src.len(), dtype)?;
    match dtype {
        DataType::F64 => float_loop!(dst, src, f64, op),
        DataType::F32 => float_loop!(dst, src, f32, op),
        DataType::F16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src.chunks_exact(2)) {
                let a = f16::from_ne_bytes([d[0], d[1]]).to_f32();
                let b = f16::from_ne_bytes([s[0], s[1]]).to_f32();
                d.copy_from_slice(&f16::from_f32(op_f32(op, a, b)).to_ne_bytes());
            }
        }
        DataType::Bf16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src.chunks_exact(2)) {
                let a = bf16::from_ne_bytes([d[0], d[1]]).to_f32();
                let b = bf16::from_ne_bytes([s[0], s[1]]).to_f32();
                d.copy_from_slice(&bf16::from_f32(op_f32(op, a, b)).to_ne_bytes());
            }
        }
        DataType::F8E4M3 | DataType::F8E5M2 => {
            let fmt = if dtype == DataType::F8E4M3 {
                Fp8Format::E4M3
            } else {
                Fp8Format::E5M2
            };
            let t = fp8_table(fmt);
            for (d, s) in dst.iter_mut().zip(src) {
                *d = f32_to_fp8(op_f32(op, t[*d as usize], t[*s as usize]), fmt);
            }
        }
        DataType::I8 => int_loop!(dst, src, i8, op),
        DataType::U8 => int_loop!(dst, src, u8, op),
        DataType::I32 => int_loop!(dst, src, i32, op),
        DataType::U32 => int_loop!(dst, src, u32, op),
        DataType::I64 => int_loop!(dst, src, i64, op),
        DataType::U64 => int_loop!(dst, src, u64, op),
    }
    Ok(())
}

/// Finish a reduction of `nranks` contributions: for `RedOp::Avg` divide every element by
/// `nranks` (see module docs for rounding); other ops leave `buf` unchanged.
pub fn finalize(
    buf: &mut [u8],
    dtype: DataType,
    op: RedOp,
    nranks: usize,
) -> Result<(), AlgoError> {
    if op == RedOp::Avg {
        finalize_avg(buf, dtype, nranks)
    } else {
        Ok(())
    }
}

/// Divide every element of `buf` by `nranks` (the last step of `avg`).
pub fn finalize_avg(buf: &mut [u8], dtype: DataType, nranks: usize) -> Result<(), AlgoError> {
    if nranks == 0 {
        return Err(AlgoError::Invalid(
            "finalize_avg: nranks must be at least 1".into(),
        ));
    }
    check_lengths("finalize_avg", buf.len(), buf.len(), dtype)?;
    if nranks == 1 {
        return Ok(());
    }
    let n = nranks as f64;
    let s = dtype.size();
    for c in buf.chunks_exact_mut(s) {
        macro_rules! int {
            ($t:ty) => {{
                let v = <$t>::from_ne_bytes(c.try_into().unwrap_or_default());
                let d = <$t>::try_from(nranks).unwrap_or(<$t>::MAX);
                c.copy_from_slice(&(v / d).to_ne_bytes());
            }};
        }
        match dtype {
            DataType::F64 => {
                let v = f64::from_ne_bytes(c.try_into().unwrap_or_default());
                c.copy_from_slice(&(v / n).to_ne_bytes());
            }
            DataType::F32 => {
                let v = f32::from_ne_bytes(c.try_into().unwrap_or_default());
                c.copy_from_slice(&(v / n as f32).to_ne_bytes());
            }
            DataType::F16 => {
                let v = f16::from_ne_bytes([c[0], c[1]]).to_f32();
                c.copy_from_slice(&f16::from_f32(v / n as f32).to_ne_bytes());
            }
            DataType::Bf16 => {
                let v = bf16::from_ne_bytes([c[0], c[1]]).to_f32();
                c.copy_from_slice(&bf16::from_f32(v / n as f32).to_ne_bytes());
            }
            DataType::F8E4M3 => {
                c[0] = f32_to_fp8(
                    fp8_to_f32(c[0], Fp8Format::E4M3) / n as f32,
                    Fp8Format::E4M3,
                )
            }
            DataType::F8E5M2 => {
                c[0] = f32_to_fp8(
                    fp8_to_f32(c[0], Fp8Format::E5M2) / n as f32,
                    Fp8Format::E5M2,
                )
            }
            DataType::I8 => int!(i8),
            DataType::U8 => int!(u8),
            DataType::I32 => int!(i32),
            DataType::U32 => int!(u32),
            DataType::I64 => int!(i64),
            DataType::U64 => int!(u64),
        }
    }
    Ok(())
}

/// Host reference: reduce `inputs` (each a whole buffer) left to right into a new buffer,
/// then finalize. The plain, obviously-correct version tests compare plans against.
pub fn reference_reduce(
    inputs: &[&[u8]],
    dtype: DataType,
    op: RedOp,
) -> Result<Vec<u8>, AlgoError> {
    let Some(first) = inputs.first() else {
        return Err(AlgoError::Invalid("reference_reduce: no inputs".into()));
    };
    let mut acc = first.to_vec();
    for s in &inputs[1..] {
        reduce_into(&mut acc, s, dtype, op)?;
    }
    finalize(&mut acc, dtype, op, inputs.len())?;
    Ok(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_tests_names_are_accepted() {
        for (alias, dt) in [
            ("float", DataType::F32),
            ("half", DataType::F16),
            ("bfloat16", DataType::Bf16),
            ("double", DataType::F64),
            ("int32", DataType::I32),
            ("uint8", DataType::U8),
            ("fp8_e5m2", DataType::F8E5M2),
        ] {
            assert_eq!(DataType::from_name(alias).unwrap(), dt);
            assert_eq!(DataType::from_name(dt.name()).unwrap(), dt);
        }
        let e = DataType::from_name("quad").unwrap_err().to_string();
        assert!(
            e.contains("`quad`") && e.contains("f32") && e.contains("float"),
            "{e}"
        );
    }

    fn enc(dt: DataType, vals: &[f64]) -> Vec<u8> {
        let mut v = Vec::new();
        for &x in vals {
            dt.encode(x, &mut v);
        }
        v
    }

    #[test]
    fn every_type_and_op_on_small_integers() {
        let a = [1.0, 2.0, 3.0, 4.0, 0.0, 5.0, 6.0];
        let b = [2.0, 2.0, 1.0, 4.0, 3.0, 1.0, 0.0];
        for dt in DataType::ALL {
            for op in RedOp::ALL {
                let mut d = enc(dt, &a);
                reduce_into(&mut d, &enc(dt, &b), dt, op).unwrap();
                finalize(&mut d, dt, op, 2).unwrap();
                for i in 0..a.len() {
                    let want = match op {
                        RedOp::Sum => a[i] + b[i],
                        RedOp::Prod => a[i] * b[i],
                        RedOp::Min => a[i].min(b[i]),
                        RedOp::Max => a[i].max(b[i]),
                        RedOp::Avg if dt.is_float() => (a[i] + b[i]) / 2.0,
                        RedOp::Avg => ((a[i] + b[i]) / 2.0).trunc(),
                    };
                    let got = dt.decode(&d, i);
                    // fp8 e5m2 has 2 mantissa bits: 3.5 rounds to 3.5? compare after encoding.
                    let want_enc = dt.decode(&enc(dt, &[want]), 0);
                    assert_eq!(got, want_enc, "{dt} {op:?} i={i}");
                }
            }
        }
    }

    #[test]
    fn unaligned_slices_give_same_result() {
        for dt in DataType::ALL {
            let a = enc(dt, &[1.0, 2.0, 3.0, 5.0]);
            let b = enc(dt, &[7.0, 1.0, 2.0, 1.0]);
            let mut want = a.clone();
            reduce_into(&mut want, &b, dt, RedOp::Sum).unwrap();
            let mut dbuf = vec![0u8; a.len() + 1];
            let mut sbuf = vec![0u8; b.len() + 1];
            dbuf[1..].copy_from_slice(&a);
            sbuf[1..].copy_from_slice(&b);
            let mut d2 = a.clone();
            reduce_into(&mut dbuf[1..], &sbuf[1..], dt, RedOp::Sum).unwrap();
            reduce_into(&mut d2, &sbuf[1..], dt, RedOp::Sum).unwrap();
            assert_eq!(&dbuf[1..], &want[..], "{dt}");
            assert_eq!(d2, want, "{dt}");
        }
    }

    #[test]
    fn bad_lengths_are_errors() {
        let mut d = vec![0u8; 8];
        assert!(reduce_into(&mut d, &[0u8; 4], DataType::F32, RedOp::Sum).is_err());
        assert!(reduce_into(&mut d[..6], &[0u8; 6], DataType::F32, RedOp::Sum).is_err());
        assert!(finalize_avg(&mut d, DataType::F32, 0).is_err());
    }

    #[test]
    fn integer_wraps_and_avg_truncates_toward_zero() {
        let mut d = enc(DataType::I8, &[127.0, -7.0]);
        reduce_into(
            &mut d,
            &enc(DataType::I8, &[1.0, 0.0]),
            DataType::I8,
            RedOp::Sum,
        )
        .unwrap();
        assert_eq!(d[0] as i8, -128);
        finalize_avg(&mut d, DataType::I8, 2).unwrap();
        assert_eq!(d[1] as i8, -3);
    }

    #[test]
    fn fp8_saturates_and_rounds_each_step() {
        let mut d = enc(DataType::F8E4M3, &[400.0]);
        reduce_into(
            &mut d,
            &enc(DataType::F8E4M3, &[400.0]),
            DataType::F8E4M3,
            RedOp::Sum,
        )
        .unwrap();
        assert_eq!(DataType::F8E4M3.decode(&d, 0), 448.0);
        // bf16: 256 + 1 rounds to 256 (8 mantissa bits), per step.
        let mut d = enc(DataType::Bf16, &[256.0]);
        reduce_into(
            &mut d,
            &enc(DataType::Bf16, &[1.0]),
            DataType::Bf16,
            RedOp::Sum,
        )
        .unwrap();
        assert_eq!(DataType::Bf16.decode(&d, 0), 256.0);
    }

    #[test]
    fn names_round_trip() {
        for dt in DataType::ALL {
            assert_eq!(DataType::from_name(dt.name()).unwrap(), dt);
        }
        for op in RedOp::ALL {
            assert_eq!(RedOp::from_name(op.name()).unwrap(), op);
        }
        assert!(DataType::from_name("f7").is_err());
    }
}
