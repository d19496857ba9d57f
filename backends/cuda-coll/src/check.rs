//! Inputs whose sums are exact in every type and order, and the output checks.
//!
//! Rank p's input element i is the integer `(i + 3p) % 16`: sums over at most 8 ranks
//! stay ≤ 120, exact in half, bfloat16 and float, whatever the reduction order. The
//! pattern depends on the element index only, so the input written once for the
//! largest size serves every smaller size (a prefix).

use crate::cli::{Collective, Dtype};

/// Integer value of rank `p`'s input element `i`.
pub fn input_value(p: u32, i: u64) -> u32 {
    ((i + 3 * u64::from(p)) % 16) as u32
}

/// Rank `p`'s input, `count` elements of `dtype`, as bytes.
pub fn input_bytes(dtype: Dtype, p: u32, count: u64) -> Vec<u8> {
    let es = dtype.size() as usize;
    let mut period = Vec::with_capacity(16 * es);
    for i in 0..16 {
        push_elem(&mut period, dtype, dtype.encode_int(input_value(p, i)));
    }
    let total = count as usize * es;
    let mut v = Vec::with_capacity(total);
    while v.len() + period.len() <= total {
        v.extend_from_slice(&period);
    }
    v.extend_from_slice(&period[..total - v.len()]);
    v
}

fn push_elem(v: &mut Vec<u8>, dtype: Dtype, bits: u32) {
    match dtype.size() {
        2 => v.extend_from_slice(&(bits as u16).to_le_bytes()),
        _ => v.extend_from_slice(&bits.to_le_bytes()),
    }
}

fn elem(bytes: &[u8], dtype: Dtype, i: usize) -> u32 {
    match dtype.size() {
        2 => u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])),
        _ => u32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ]),
    }
}

/// Elements of `out` (this rank's output after `coll`) that differ from the exact
/// result. `count`/`per_rank` as from [`crate::cli::counts`].
pub fn count_wrong(
    coll: Collective,
    dtype: Dtype,
    rank: u32,
    n: u32,
    count: u64,
    per_rank: u64,
    out: &[u8],
) -> u64 {
    let sum_at = |i: u64| -> u32 { (0..n).map(|p| input_value(p, i)).sum() };
    // Expected bits per residue mod 16 (every pattern has period 16).
    let table =
        |f: &dyn Fn(u64) -> u32| -> Vec<u32> { (0..16).map(|k| dtype.encode_int(f(k))).collect() };
    let mut wrong = 0u64;
    match coll {
        Collective::Allreduce => {
            let t = table(&sum_at);
            for i in 0..count as usize {
                wrong += u64::from(elem(out, dtype, i) != t[i % 16]);
            }
        }
        Collective::Allgather => {
            for q in 0..n {
                let t = table(&|k| input_value(q, k));
                let base = (u64::from(q) * per_rank) as usize;
                for i in 0..per_rank as usize {
                    wrong += u64::from(elem(out, dtype, base + i) != t[i % 16]);
                }
            }
        }
        Collective::Reducescatter => {
            let start = u64::from(rank) * per_rank;
            let t = table(&|k| sum_at(start + k));
            for i in 0..per_rank as usize {
                wrong += u64::from(elem(out, dtype, i) != t[i % 16]);
            }
        }
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host reference of each collective over the real input bytes.
    fn reference(
        coll: Collective,
        dtype: Dtype,
        rank: u32,
        n: u32,
        count: u64,
        per: u64,
    ) -> Vec<u8> {
        let ins: Vec<Vec<u8>> = (0..n).map(|p| input_bytes(dtype, p, count)).collect();
        let val = |bytes: &[u8], i: usize| -> u32 {
            // decode the exact integer back from its bits
            (0..=128)
                .find(|&v| dtype.encode_int(v) == elem(bytes, dtype, i))
                .unwrap()
        };
        let mut out = Vec::new();
        match coll {
            Collective::Allreduce => {
                for i in 0..count as usize {
                    let s: u32 = ins.iter().map(|b| val(b, i)).sum();
                    push_elem(&mut out, dtype, dtype.encode_int(s));
                }
            }
            Collective::Allgather => {
                for q in 0..n as usize {
                    let src = input_bytes(dtype, q as u32, per);
                    out.extend_from_slice(&src);
                }
            }
            Collective::Reducescatter => {
                for i in 0..per as usize {
                    let k = rank as usize * per as usize + i;
                    let s: u32 = ins.iter().map(|b| val(b, k)).sum();
                    push_elem(&mut out, dtype, dtype.encode_int(s));
                }
            }
        }
        out
    }

    #[test]
    fn reference_outputs_have_no_wrong_elements_and_poison_is_caught() {
        for dtype in [Dtype::Half, Dtype::Bfloat16, Dtype::Float] {
            for n in [1u32, 2, 3, 4, 8] {
                for coll in [
                    Collective::Allreduce,
                    Collective::Allgather,
                    Collective::Reducescatter,
                ] {
                    let bytes = 1000 * dtype.size();
                    let (count, per) = crate::cli::counts(coll, bytes, dtype, n);
                    let rank = n - 1;
                    let mut out = reference(coll, dtype, rank, n, count, per);
                    let used = match coll {
                        Collective::Reducescatter => per,
                        _ => count,
                    } as usize;
                    assert_eq!(out.len(), used * dtype.size() as usize);
                    assert_eq!(count_wrong(coll, dtype, rank, n, count, per, &out), 0);
                    // poison two elements
                    out[0] ^= 0xff;
                    let l = out.len();
                    out[l - 1] ^= 0x40;
                    assert_eq!(
                        count_wrong(coll, dtype, rank, n, count, per, &out),
                        2,
                        "{coll:?} {dtype:?} n={n}"
                    );
                }
            }
        }
    }

    #[test]
    fn inputs_are_a_prefix_of_the_largest() {
        let big = input_bytes(Dtype::Half, 2, 1 << 12);
        let small = input_bytes(Dtype::Half, 2, 37);
        assert_eq!(&big[..small.len()], &small[..]);
    }
}
