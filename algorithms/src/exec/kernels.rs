//! Monomorphised reduce loops for the common (type, op) pairs, so the compiler
//! vectorises them (one loop per pair, no per-element indirect call). Anything else, and
//! unaligned slices, fall back to [`crate::dtype::reduce_into`]; results are identical
//! (same per-element operation).

use crate::dtype::{DataType, RedOp, reduce_into};
use crate::error::AlgoError;

#[inline(always)]
fn lanes<T: bytemuck::Pod>(dst: &mut [u8], src: &[u8], f: impl Fn(T, T) -> T) -> bool {
    match (
        bytemuck::try_cast_slice_mut::<u8, T>(dst),
        bytemuck::try_cast_slice::<u8, T>(src),
    ) {
        (Ok(d), Ok(s)) => {
            for (d, s) in d.iter_mut().zip(s) {
                *d = f(*d, *s);
            }
            true
        }
        _ => false,
    }
}

macro_rules! float_ops {
    ($d:expr, $s:expr, $t:ty, $op:expr) => {
        match $op {
            RedOp::Sum | RedOp::Avg => lanes::<$t>($d, $s, |a, b| a + b),
            RedOp::Prod => lanes::<$t>($d, $s, |a, b| a * b),
            RedOp::Min => lanes::<$t>($d, $s, |a: $t, b| a.min(b)),
            RedOp::Max => lanes::<$t>($d, $s, |a: $t, b| a.max(b)),
        }
    };
}

macro_rules! int_ops {
    ($d:expr, $s:expr, $t:ty, $op:expr) => {
        match $op {
            RedOp::Sum | RedOp::Avg => lanes::<$t>($d, $s, |a: $t, b| a.wrapping_add(b)),
            RedOp::Prod => lanes::<$t>($d, $s, |a: $t, b| a.wrapping_mul(b)),
            RedOp::Min => lanes::<$t>($d, $s, |a: $t, b| a.min(b)),
            RedOp::Max => lanes::<$t>($d, $s, |a: $t, b| a.max(b)),
        }
    };
}

/// `dst[i] = op(dst[i], src[i])`, as [`reduce_into`].
#[inline]
pub(crate) fn reduce(
    dst: &mut [u8],
    src: &[u8],
    dtype: DataType,
    op: RedOp,
) -> Result<(), AlgoError> {
    if dst.len() == src.len() {
        let done = match dtype {
            DataType::F32 => float_ops!(dst, src, f32, op),
            DataType::F64 => float_ops!(dst, src, f64, op),
            DataType::I32 => int_ops!(dst, src, i32, op),
            DataType::U32 => int_ops!(dst, src, u32, op),
            DataType::I64 => int_ops!(dst, src, i64, op),
            DataType::U64 => int_ops!(dst, src, u64, op),
            DataType::I8 => int_ops!(dst, src, i8, op),
            DataType::U8 => int_ops!(dst, src, u8, op),
            _ => false,
        };
        if done {
            return Ok(());
        }
    }
    reduce_into(dst, src, dtype, op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_results_as_the_dtype_kernel() {
        for dtype in DataType::ALL {
            for op in RedOp::ALL {
                let mut a = Vec::new();
                let mut b = Vec::new();
                for i in 0..67 {
                    dtype.encode(((i * 7) % 9) as f64 - 3.0, &mut a);
                    dtype.encode(((i * 5) % 7) as f64 - 2.0, &mut b);
                }
                let mut want = a.clone();
                reduce_into(&mut want, &b, dtype, op).unwrap();
                let mut got = a.clone();
                reduce(&mut got, &b, dtype, op).unwrap();
                assert_eq!(got, want, "{dtype} {op:?}");
            }
        }
    }
}
