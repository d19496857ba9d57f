//! Benchmark inputs and the output checks, for every type and reduction operator.
//!
//! # Inputs
//! Rank p's element i depends on (p, i mod 17) only ([`PERIOD`]), so the input written
//! once for the largest size serves every smaller size (a prefix), ranks differ at
//! (almost) every element, and data taken from the wrong chunk of a power-of-two
//! buffer (17 is prime to every power of two) is caught. Element bits come from a
//! hash of (p, i mod 17):
//! * integers: the hash's low bytes, full range: sums and products wrap, about half
//!   the signed values are negative and half the unsigned ones have the top bit set
//!   (min / max must compare signed / unsigned correctly); prod: odd values (a wrapped
//!   product of even ones collapses to 0 and hides a lost factor);
//! * f16, bf16, f32, f64: sum, avg, premulsum, min, max: `±(1 + f) × 2^e` with 8
//!   fractional bits f and e in -4..=4 (residues 0..6: e = 0, similar magnitudes, so a
//!   dropped or doubled contribution is always far outside the error bound below);
//!   prod: `±(1 + f) × 2^e`, 4 fractional bits, e in -1..=0 (no overflow over 8
//!   ranks);
//! * fp8: sum, avg, premulsum, min, max: -1, 0 or 1; prod: ±0.5, ±1 or ±2 (every
//!   partial result of every order is then exact: fp8 has 3-4 significant bits, so an
//!   order-independent bound would be wider than a contribution). Premulsum on fp8
//!   stays exact only with a power-of-two scalar (e.g. `--scalar 0.5`); other scalars
//!   get the bound, which cannot see one lost contribution in fp8.
//!
//! # Checks
//! Data-moving collectives: every element bit for bit. Reductions, per element, with
//! x_p = rank p's element (premulsum: already multiplied by the scalar and rounded to
//! the type, exactly as the kernels do, [`premultiply`]):
//! * integers (any op), min and max (any type): bit for bit against the host
//!   reference [`reference_reduce`] (wrapping sums and products are exact in any
//!   order; min / max are exact);
//! * float sum, avg, premulsum, prod where every partial result of every order is
//!   exactly representable (all values multiples of a common power of two q with
//!   sum |x_p| / q < 2^p and within range; prod: powers of two in range): equal in value
//!   to the exact result (the reduction order cannot matter);
//! * otherwise against the exact result within the error bound of an n-term reduction
//!   in any order, u = 2^-p (p: significant bits of the type), gamma_k = k u / (1 - k u)
//!   (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., (3.4) and
//!   Lemma 3.1; a ring or chain kernel sums in its own order, which the bound covers):
//!   sum, premulsum: |r - S| <= gamma_{n-1} sum |x_p|; avg (sum, then one rounded
//!   division): |r - S/n| <= gamma_n sum |x_p| / n; prod: |r - P| <= gamma_{n-1} |P|;
//!   plus n times the type's smallest subnormal (underflow) and, for f64, the f64
//!   reference's own gamma_n. With the inputs above a dropped or doubled contribution
//!   moves the result by at least min |x_p|, more than the bound (a unit test checks
//!   that for every type and op).

use commhal_algorithms::dtype::{DataType, RedOp, reduce_into, reference_reduce};

use crate::cli::{Collective, Dtype};
use commhal_cuda_coll::kernels::ReduceOp;

/// Period of every input pattern (and so of every expected output), in elements.
pub const PERIOD: u64 = 17;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Rank `p`'s element `i` for a collective with `op`, as bits in the low bytes.
pub fn input_elem(dtype: Dtype, op: ReduceOp, p: u32, i: u64) -> u64 {
    let k = i % PERIOD;
    let h = mix(u64::from(p) << 32 | k);
    let dt = dtype.data_type();
    if !dt.is_float() {
        // prod: odd values, so the wrapped product never collapses to 0 (a product of
        // 8 random bytes mod 256 mostly does) and every factor stays visible in it
        return if op == ReduceOp::Prod { h | 1 } else { h };
    }
    let sign = if h & 1 == 1 { -1.0 } else { 1.0 };
    let prod = op == ReduceOp::Prod;
    let v = match dt {
        DataType::F8E4M3 | DataType::F8E5M2 if prod => {
            sign * [0.5, 1.0, 2.0][(h >> 8) as usize % 3]
        }
        DataType::F8E4M3 | DataType::F8E5M2 => [-1.0, 0.0, 1.0][(h >> 8) as usize % 3],
        _ if prod => {
            sign * (1.0 + ((h >> 8) & 0xf) as f64 / 16.0) * if h & 2 == 2 { 0.5 } else { 1.0 }
        }
        _ => {
            let e = if k < 6 { 0 } else { ((h >> 20) % 9) as i32 - 4 };
            sign * (1.0 + ((h >> 8) & 0xff) as f64 / 256.0) * 2f64.powi(e)
        }
    };
    let mut b = Vec::with_capacity(8);
    dt.encode(v, &mut b);
    b.resize(8, 0);
    u64::from_le_bytes(b.try_into().unwrap_or_default())
}

/// Rank `p`'s input, `count` elements of `dtype`, as bytes (native = little-endian).
pub fn input_bytes(dtype: Dtype, op: ReduceOp, p: u32, count: u64) -> Vec<u8> {
    let es = dtype.size() as usize;
    let mut period = Vec::with_capacity(PERIOD as usize * es);
    for i in 0..PERIOD {
        period.extend_from_slice(&input_elem(dtype, op, p, i).to_le_bytes()[..es]);
    }
    let total = count as usize * es;
    let mut v = Vec::with_capacity(total);
    while v.len() + period.len() <= total {
        v.extend_from_slice(&period);
    }
    v.extend_from_slice(&period[..total - v.len()]);
    v
}

fn elem(bytes: &[u8], es: usize, i: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..es].copy_from_slice(&bytes[i * es..(i + 1) * es]);
    u64::from_le_bytes(b)
}

/// `x` (one element's bits) as the kernels load it for `op`: premulsum multiplies by
/// the scalar (rounded to the type) with the type's own product; other ops: `x`.
pub fn premultiply(dtype: Dtype, op: ReduceOp, x: u64) -> u64 {
    if !matches!(op, ReduceOp::PreMulSum(_)) {
        return x;
    }
    let dt = dtype.data_type();
    let es = dt.size();
    let mut d = x.to_le_bytes()[..es].to_vec();
    let s = op.scalar_bits(dt).to_le_bytes();
    if reduce_into(&mut d, &s[..es], dt, RedOp::Prod).is_err() {
        return x;
    }
    elem(&d, es, 0)
}

/// What a reduced element must be.
#[derive(Debug, Clone, Copy)]
struct Expect {
    /// The host reference (rank order), bits.
    bits: u64,
    /// Exact result (f64) and the allowed distance; `None`: compare `bits` exactly.
    within: Option<(f64, f64)>,
}

/// Significant bits, largest finite value and smallest subnormal of a float type.
fn float_params(dt: DataType) -> (i32, f64, f64) {
    match dt {
        DataType::F64 => (53, f64::MAX, 2f64.powi(-1074)),
        DataType::F32 => (24, f32::MAX as f64, 2f64.powi(-149)),
        DataType::F16 => (11, 65504.0, 2f64.powi(-24)),
        DataType::Bf16 => (8, 3.389_531_389_251_535e38, 2f64.powi(-133)),
        DataType::F8E4M3 => (4, 448.0, 2f64.powi(-9)),
        _ => (3, 57344.0, 2f64.powi(-16)),
    }
}

/// Exponent of the lowest set bit of finite nonzero `x` (x = odd × 2^e).
fn lsb_exp(x: f64) -> i32 {
    let b = x.to_bits();
    let exp = ((b >> 52) & 0x7ff) as i32;
    let man = b & ((1u64 << 52) - 1);
    let (m, e) = if exp == 0 {
        (man, -1074)
    } else {
        (man | 1 << 52, exp - 1075)
    };
    e + m.trailing_zeros() as i32
}

fn expect(dtype: Dtype, op: ReduceOp, xs: &[u64]) -> Expect {
    let dt = dtype.data_type();
    let es = dt.size();
    let ins: Vec<Vec<u8>> = xs.iter().map(|x| x.to_le_bytes()[..es].to_vec()).collect();
    let refs: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
    let bits = reference_reduce(&refs, dt, op.red_op())
        .map(|r| elem(&r, es, 0))
        .unwrap_or(0);
    if !dt.is_float() || matches!(op, ReduceOp::Min | ReduceOp::Max) {
        return Expect { bits, within: None };
    }
    let vals: Vec<f64> = ins.iter().map(|b| dt.decode(b, 0)).collect();
    let n = vals.len() as f64;
    let (p, max, tiny) = float_params(dt);
    let u = 2f64.powi(-p);
    let gamma = |k: f64| k * u / (1.0 - k * u);
    let abs: f64 = vals.iter().map(|v| v.abs()).sum();
    let nz: Vec<f64> = vals.iter().copied().filter(|v| *v != 0.0).collect();
    let (exact, tight, bound) = if op == ReduceOp::Prod {
        // (the exact value is f64's; tight cases compare with the reference instead)
        let prod: f64 = vals.iter().product();
        let pow2 = nz.iter().all(|v| v.abs().log2().fract() == 0.0);
        let in_range = prod == 0.0 || (prod.abs() <= max && prod.abs() >= tiny);
        (prod, pow2 && in_range, gamma(n - 1.0) * prod.abs())
    } else {
        let sum: f64 = vals.iter().sum();
        let q = nz.iter().map(|v| lsb_exp(*v)).min().unwrap_or(0);
        let tight = abs <= max && 2f64.powi(q) >= tiny && abs / 2f64.powi(q) <= 2f64.powi(p);
        if op == ReduceOp::Avg {
            (sum / n, tight, gamma(n) * abs / n)
        } else {
            (sum, tight, gamma(n - 1.0) * abs)
        }
    };
    if tight {
        // the exact sum / product, so the rank-order reference in value (avg: the
        // one rounded division of it; -0 and +0 compare equal)
        let r = dt.decode(&bits.to_le_bytes()[..es], 0);
        return Expect {
            bits,
            within: Some((r, 0.0)),
        };
    }
    let f64_slack = if dt == DataType::F64 {
        n * f64::EPSILON * abs.max(exact.abs())
    } else {
        0.0
    };
    Expect {
        bits,
        within: Some((exact, bound + n * tiny + f64_slack)),
    }
}

fn matches_expect(dtype: Dtype, e: &Expect, got: u64) -> bool {
    match e.within {
        None => got == e.bits,
        Some((exact, bound)) => {
            let dt = dtype.data_type();
            let v = dt.decode(&got.to_le_bytes()[..dt.size()], 0);
            (v - exact).abs() <= bound
        }
    }
}

/// The bytes of this rank's output that [`count_wrong`] checks, from the start of the
/// region the collective writes: reduce-scatter its chunk, reduce the root's whole
/// buffer (nothing on the other ranks: NCCL leaves their output undefined), the
/// others the whole `count`.
pub fn checked_len(
    coll: Collective,
    dtype: Dtype,
    rank: u32,
    root: u32,
    count: u64,
    per_rank: u64,
) -> u64 {
    match coll {
        Collective::Reducescatter => per_rank * dtype.size(),
        Collective::Reduce if rank != root => 0,
        _ => count * dtype.size(),
    }
}

/// Elements of `out` (this rank's output after `coll` with `op`, at least
/// [`checked_len`] bytes) that are wrong (see the module docs for the rule).
/// `count`/`per_rank` as from [`crate::cli::counts`]; `root` for broadcast / reduce
/// (ignored by the others). An `out` shorter than [`checked_len`] counts every element
/// as wrong.
#[allow(clippy::too_many_arguments)]
pub fn count_wrong(
    coll: Collective,
    dtype: Dtype,
    op: ReduceOp,
    rank: u32,
    n: u32,
    root: u32,
    count: u64,
    per_rank: u64,
    out: &[u8],
) -> u64 {
    let es = dtype.size() as usize;
    let want = checked_len(coll, dtype, rank, root, count, per_rank);
    if (out.len() as u64) < want {
        return want / dtype.size();
    }
    let mask = if es == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * es)) - 1
    };
    let input = |p: u32, i: u64| input_elem(dtype, op, p, i) & mask;
    // expected per residue mod PERIOD (every pattern has that period)
    let reduced = |start: u64| -> Vec<Expect> {
        (0..PERIOD)
            .map(|k| {
                let xs: Vec<u64> = (0..n)
                    .map(|p| premultiply(dtype, op, input(p, start + k)))
                    .collect();
                expect(dtype, op, &xs)
            })
            .collect()
    };
    let moved = |f: &dyn Fn(u64) -> u64| -> Vec<Expect> {
        (0..PERIOD)
            .map(|k| Expect {
                bits: f(k),
                within: None,
            })
            .collect()
    };
    const P: usize = PERIOD as usize;
    let wrong_in = |t: &[Expect], base: usize, len: usize| -> u64 {
        (0..len)
            .filter(|&i| !matches_expect(dtype, &t[i % P], elem(out, es, base + i)))
            .count() as u64
    };
    match coll {
        Collective::Allreduce => wrong_in(&reduced(0), 0, count as usize),
        Collective::Reduce if rank == root => wrong_in(&reduced(0), 0, count as usize),
        Collective::Reduce => 0,
        Collective::Reducescatter => {
            wrong_in(&reduced(u64::from(rank) * per_rank), 0, per_rank as usize)
        }
        Collective::Allgather => (0..n)
            .map(|q| {
                let t = moved(&|k| input(q, k));
                wrong_in(&t, (u64::from(q) * per_rank) as usize, per_rank as usize)
            })
            .sum(),
        Collective::Broadcast => wrong_in(&moved(&|k| input(root, k)), 0, count as usize),
        Collective::Alltoall => (0..n)
            .map(|q| {
                // chunk q of my output = chunk `rank` of rank q's input
                let start = u64::from(rank) * per_rank;
                let t = moved(&|k| input(q, start + k));
                wrong_in(&t, (u64::from(q) * per_rank) as usize, per_rank as usize)
            })
            .sum(),
        Collective::Sendrecv => {
            let prev = (rank + n.max(1) - 1) % n.max(1);
            wrong_in(&moved(&|k| input(prev, k)), 0, count as usize)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commhal_cuda_coll::kernels::all_ops;

    const REDUCING: [Collective; 3] = [
        Collective::Allreduce,
        Collective::Reducescatter,
        Collective::Reduce,
    ];

    /// The output a correct reduction in rank order gives, for every element of
    /// `coll`'s checked region (rank `rank`, root 0), and the per-rank inputs.
    fn reference(
        coll: Collective,
        d: Dtype,
        op: ReduceOp,
        rank: u32,
        n: u32,
        count: u64,
    ) -> Vec<u8> {
        let es = d.size() as usize;
        let dt = d.data_type();
        let per = count;
        let start = if coll == Collective::Reducescatter {
            u64::from(rank) * per
        } else {
            0
        };
        let ins: Vec<Vec<u8>> = (0..n)
            .map(|p| {
                let raw = input_bytes(d, op, p, start + count);
                let mut v = Vec::new();
                for i in start as usize..(start + count) as usize {
                    let x = premultiply(d, op, elem(&raw, es, i));
                    v.extend_from_slice(&x.to_le_bytes()[..es]);
                }
                v
            })
            .collect();
        let refs: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
        reference_reduce(&refs, dt, op.red_op()).unwrap()
    }

    #[test]
    fn rank_order_reference_passes_for_every_type_and_op() {
        for d in Dtype::ALL {
            for op in all_ops(1.5) {
                for n in [2u32, 3, 8] {
                    for coll in REDUCING {
                        let count = 3 * PERIOD + 5;
                        let out = reference(coll, d, op, 1, n, count);
                        let w = count_wrong(coll, d, op, 1, n, 1, count, count, &out);
                        assert_eq!(w, 0, "{d:?} {op:?} n={n} {coll:?}");
                    }
                }
            }
        }
    }

    /// A dropped or doubled contribution of any one rank fails the check at every
    /// element where that rank's value is nonzero (and not the neutral one).
    #[test]
    fn dropped_or_doubled_contribution_is_caught() {
        for d in Dtype::ALL {
            let es = d.size() as usize;
            let dt = d.data_type();
            // fp8: a power-of-two scalar keeps every partial sum exact (a scalar like
            // 1.5 leaves only the order-free bound, wider than one contribution)
            let scalar = if d.size() == 1 && dt.is_float() {
                0.5
            } else {
                1.5
            };
            for op in all_ops(scalar) {
                for n in [2u32, 4, 8] {
                    let count = PERIOD;
                    let mut caught_drop = 0;
                    let mut caught_double = 0;
                    for i in 0..count {
                        let xs: Vec<u64> = (0..n)
                            .map(|p| premultiply(d, op, input_elem(d, op, p, i)))
                            .collect();
                        let e = expect(d, op, &xs);
                        let enc = |v: &[u64]| -> u64 {
                            let ins: Vec<Vec<u8>> =
                                v.iter().map(|x| x.to_le_bytes()[..es].to_vec()).collect();
                            let refs: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
                            // reduce as a kernel that lost or doubled rank 1 would,
                            // with the division by the true rank count for avg
                            let mut r = reference_reduce(&refs, dt, op.red_op()).unwrap();
                            if op == ReduceOp::Avg {
                                // undo reference_reduce's own division by v.len()
                                let sum = reference_reduce(&refs, dt, RedOp::Sum).unwrap();
                                r = sum;
                                commhal_algorithms::dtype::finalize_avg(&mut r, dt, n as usize)
                                    .unwrap();
                            }
                            elem(&r, es, 0)
                        };
                        let mut doubled = xs.clone();
                        doubled.push(xs[1]);
                        // min / max: drop each rank in turn (one of them holds the extreme)
                        let drops = if matches!(op, ReduceOp::Min | ReduceOp::Max) {
                            n
                        } else {
                            1
                        };
                        for r in 0..drops {
                            let mut dropped = xs.clone();
                            dropped.remove((r as usize + 1) % xs.len());
                            caught_drop += u64::from(!matches_expect(d, &e, enc(&dropped)));
                        }
                        caught_double += u64::from(!matches_expect(d, &e, enc(&doubled)));
                    }
                    // min / max ignore a doubled value by definition, and a dropped one
                    // unless it was the extreme; every other op must catch most elements
                    if matches!(op, ReduceOp::Min | ReduceOp::Max) {
                        assert!(caught_drop > 0, "{d:?} {op:?} n={n}: drop never caught");
                    } else {
                        assert!(
                            caught_drop >= count / 2,
                            "{d:?} {op:?} n={n}: drop caught {caught_drop}/{count}"
                        );
                        assert!(
                            caught_double >= count / 2,
                            "{d:?} {op:?} n={n}: double caught {caught_double}/{count}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn wrong_output_bytes_are_counted() {
        for d in [Dtype::Half, Dtype::Int8, Dtype::Double, Dtype::Fp8E4m3] {
            let op = ReduceOp::Sum;
            let count = 40;
            let mut out = reference(Collective::Allreduce, d, op, 0, 4, count);
            let es = d.size() as usize;
            // flip an exponent bit of elements 3 and 30
            out[3 * es + es - 1] ^= 0x40;
            out[30 * es + es - 1] ^= 0x40;
            let w = count_wrong(Collective::Allreduce, d, op, 0, 4, 0, count, count, &out);
            assert_eq!(w, 2, "{d:?}");
        }
    }

    #[test]
    fn data_movement_is_checked_bit_for_bit() {
        let d = Dtype::Float;
        let op = ReduceOp::Sum;
        let (n, per) = (4u32, 21u64);
        let mut out = Vec::new();
        for q in 0..n {
            out.extend_from_slice(&input_bytes(d, op, q, per));
        }
        assert_eq!(
            count_wrong(Collective::Allgather, d, op, 0, n, 0, per * 4, per, &out),
            0
        );
        out.swap(3, 4 * (per as usize) + 3); // a top byte from rank 1's chunk into rank 0's
        assert!(count_wrong(Collective::Allgather, d, op, 0, n, 0, per * 4, per, &out) > 0);
    }

    #[test]
    fn inputs_are_a_prefix_of_the_largest_and_ranks_differ() {
        for d in Dtype::ALL {
            for op in all_ops(2.0) {
                let big = input_bytes(d, op, 2, 1 << 10);
                let small = input_bytes(d, op, 2, 37);
                assert_eq!(&big[..small.len()], &small[..]);
            }
            let a = input_bytes(d, ReduceOp::Sum, 0, PERIOD);
            let b = input_bytes(d, ReduceOp::Sum, 1, PERIOD);
            assert_ne!(a, b, "{d:?}");
        }
    }

    #[test]
    fn integer_inputs_cover_negative_and_high_bit_values() {
        let vals: Vec<u64> = (0..8u32)
            .flat_map(|p| {
                (0..PERIOD).map(move |i| input_elem(Dtype::Int8, ReduceOp::Min, p, i) & 0xff)
            })
            .collect();
        assert!(vals.iter().any(|v| *v >= 0x80) && vals.iter().any(|v| *v < 0x80));
    }
}
