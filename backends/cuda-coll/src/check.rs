//! Inputs whose sums are exact in every type and order, and the output checks.
//!
//! Rank p's input element i is the integer `(i % 17 + 3p) % 16 - 7` (-7..=8): sums over
//! at most 8 ranks stay within -56..=64, exact in half, bfloat16 and float, whatever the
//! reduction order. About half the elements are negative, so sign bits (the top bit of
//! many 16-, 32- and 64-bit words) are set as often as not: packet formats that move a
//! word's top bit apart from the rest (LL63) are checked on both values of it.
//! Ranks differ at every element (3p mod 16 is distinct for p < 16), and the period
//! (17 elements) is prime to every power of two, so data taken from the wrong chunk of
//! a power-of-two buffer (all-to-all, reduce-scatter offsets) is caught too. The
//! pattern depends on the element index only, so the input written once for the
//! largest size serves every smaller size (a prefix).

use crate::cli::{Collective, Dtype};

/// Period of every input pattern (and so of every expected output), in elements.
pub const PERIOD: u64 = 17;

/// Integer value of rank `p`'s input element `i`.
pub fn input_value(p: u32, i: u64) -> i32 {
    ((i % PERIOD + 3 * u64::from(p)) % 16) as i32 - 7
}

/// Rank `p`'s input, `count` elements of `dtype`, as bytes.
pub fn input_bytes(dtype: Dtype, p: u32, count: u64) -> Vec<u8> {
    let es = dtype.size() as usize;
    let mut period = Vec::with_capacity(PERIOD as usize * es);
    for i in 0..PERIOD {
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

/// Elements of `out` (this rank's output after `coll`, at least [`checked_len`]
/// bytes) that differ from the exact result. `count`/`per_rank` as from
/// [`crate::cli::counts`]; `root` for broadcast / reduce (ignored by the others).
/// An `out` shorter than [`checked_len`] counts every element as wrong.
#[allow(clippy::too_many_arguments)]
pub fn count_wrong(
    coll: Collective,
    dtype: Dtype,
    rank: u32,
    n: u32,
    root: u32,
    count: u64,
    per_rank: u64,
    out: &[u8],
) -> u64 {
    let want = checked_len(coll, dtype, rank, root, count, per_rank);
    if (out.len() as u64) < want {
        return want / dtype.size();
    }
    let sum_at = |i: u64| -> i32 { (0..n).map(|p| input_value(p, i)).sum() };
    // Expected bits per residue mod PERIOD (every pattern has that period).
    let table = |f: &dyn Fn(u64) -> i32| -> Vec<u32> {
        (0..PERIOD).map(|k| dtype.encode_int(f(k))).collect()
    };
    const P: usize = PERIOD as usize;
    let mut wrong = 0u64;
    match coll {
        Collective::Allreduce => {
            let t = table(&sum_at);
            for i in 0..count as usize {
                wrong += u64::from(elem(out, dtype, i) != t[i % P]);
            }
        }
        Collective::Allgather => {
            for q in 0..n {
                let t = table(&|k| input_value(q, k));
                let base = (u64::from(q) * per_rank) as usize;
                for i in 0..per_rank as usize {
                    wrong += u64::from(elem(out, dtype, base + i) != t[i % P]);
                }
            }
        }
        Collective::Reducescatter => {
            let start = u64::from(rank) * per_rank;
            let t = table(&|k| sum_at(start + k));
            for i in 0..per_rank as usize {
                wrong += u64::from(elem(out, dtype, i) != t[i % P]);
            }
        }
        Collective::Broadcast => {
            let t = table(&|k| input_value(root, k));
            for i in 0..count as usize {
                wrong += u64::from(elem(out, dtype, i) != t[i % P]);
            }
        }
        Collective::Reduce => {
            if rank == root {
                let t = table(&sum_at);
                for i in 0..count as usize {
                    wrong += u64::from(elem(out, dtype, i) != t[i % P]);
                }
            }
        }
        Collective::Alltoall => {
            // chunk q of my output = chunk `rank` of rank q's input
            for q in 0..n {
                let start = u64::from(rank) * per_rank;
                let t = table(&|k| input_value(q, start + k));
                let base = (u64::from(q) * per_rank) as usize;
                for i in 0..per_rank as usize {
                    wrong += u64::from(elem(out, dtype, base + i) != t[i % P]);
                }
            }
        }
        Collective::Sendrecv => {
            let prev = (rank + n.max(1) - 1) % n.max(1);
            let t = table(&|k| input_value(prev, k));
            for i in 0..count as usize {
                wrong += u64::from(elem(out, dtype, i) != t[i % P]);
            }
        }
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host reference of each collective over the real input bytes: the data
    /// movement spelled out on every rank's input (independent of the tables above).
    fn reference(
        coll: Collective,
        dtype: Dtype,
        rank: u32,
        n: u32,
        root: u32,
        count: u64,
        per: u64,
    ) -> Vec<u8> {
        let ins: Vec<Vec<u8>> = (0..n).map(|p| input_bytes(dtype, p, count)).collect();
        let es = dtype.size() as usize;
        let val = |bytes: &[u8], i: usize| -> i32 {
            // decode the exact integer back from its bits
            (-128..=128)
                .find(|&v| dtype.encode_int(v) == elem(bytes, dtype, i))
                .unwrap()
        };
        let sum = |range: std::ops::Range<usize>| -> Vec<u8> {
            let mut out = Vec::new();
            for i in range {
                let s: i32 = ins.iter().map(|b| val(b, i)).sum();
                push_elem(&mut out, dtype, dtype.encode_int(s));
            }
            out
        };
        let (c, pr, r) = (count as usize, per as usize, rank as usize);
        match coll {
            Collective::Allreduce => sum(0..c),
            Collective::Allgather => {
                let mut out = Vec::new();
                for inp in &ins {
                    out.extend_from_slice(&inp[..pr * es]);
                }
                out
            }
            Collective::Reducescatter => sum(r * pr..(r + 1) * pr),
            Collective::Broadcast => ins[root as usize].clone(),
            Collective::Reduce if rank == root => sum(0..c),
            Collective::Reduce => Vec::new(),
            Collective::Alltoall => {
                let mut out = Vec::new();
                for inp in &ins {
                    out.extend_from_slice(&inp[r * pr * es..(r + 1) * pr * es]);
                }
                out
            }
            Collective::Sendrecv => ins[(r + n as usize - 1) % n as usize].clone(),
        }
    }

    const ALL: [Collective; 7] = [
        Collective::Allreduce,
        Collective::Allgather,
        Collective::Reducescatter,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Alltoall,
        Collective::Sendrecv,
    ];

    #[test]
    fn reference_outputs_have_no_wrong_elements_and_poison_is_caught() {
        for dtype in [Dtype::Half, Dtype::Bfloat16, Dtype::Float] {
            for n in [1u32, 2, 3, 4, 8] {
                for coll in ALL {
                    let bytes = 1000 * dtype.size();
                    let (count, per) = crate::cli::counts(coll, bytes, dtype, n);
                    for rank in [0, n - 1] {
                        for root in [0, n / 2, n - 1] {
                            let what = format!("{coll:?} {dtype:?} n={n} rank={rank} root={root}");
                            let mut out = reference(coll, dtype, rank, n, root, count, per);
                            let len = checked_len(coll, dtype, rank, root, count, per);
                            assert_eq!(out.len() as u64, len, "{what}");
                            assert_eq!(
                                count_wrong(coll, dtype, rank, n, root, count, per, &out),
                                0,
                                "{what}"
                            );
                            if out.is_empty() {
                                assert_eq!(coll, Collective::Reduce);
                                assert_ne!(rank, root);
                                continue;
                            }
                            // poison two elements
                            out[0] ^= 0xff;
                            let l = out.len();
                            out[l - 1] ^= 0x40;
                            assert_eq!(
                                count_wrong(coll, dtype, rank, n, root, count, per, &out),
                                2,
                                "{what}"
                            );
                            // a short output is all wrong, never a panic
                            assert_eq!(
                                count_wrong(coll, dtype, rank, n, root, count, per, &out[..2]),
                                len / dtype.size(),
                                "{what}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// A collective that moved the wrong rank's data is caught (the patterns of
    /// different ranks differ at every element).
    #[test]
    fn data_from_the_wrong_rank_is_caught() {
        let d = Dtype::Half;
        let n = 4;
        // broadcast from root 1 checked as if root were 2
        let (count, per) = crate::cli::counts(Collective::Broadcast, 4096, d, n);
        let out = reference(Collective::Broadcast, d, 0, n, 1, count, per);
        assert_eq!(
            count_wrong(Collective::Broadcast, d, 0, n, 2, count, per, &out),
            count
        );
        // send/recv: rank 2 holding rank 2's own input instead of rank 1's
        let out = input_bytes(d, 2, count);
        assert_eq!(
            count_wrong(Collective::Sendrecv, d, 2, n, 0, count, per, &out),
            count
        );
        // all-to-all: rank 1 holding chunk 0 of every input (an all-gather of the
        // first chunks) instead of chunk 1, with a power-of-two chunk (512 elements)
        let (count, per) = crate::cli::counts(Collective::Alltoall, 4096, d, n);
        assert_eq!(per, 512);
        let out = reference(Collective::Allgather, d, 1, n, 0, count, per);
        assert_eq!(
            count_wrong(Collective::Alltoall, d, 1, n, 0, count, per, &out),
            count
        );
        assert_eq!(
            count_wrong(
                Collective::Alltoall,
                d,
                1,
                n,
                0,
                count,
                per,
                &reference(Collective::Alltoall, d, 1, n, 0, count, per)
            ),
            0
        );
    }

    #[test]
    fn inputs_are_a_prefix_of_the_largest() {
        let big = input_bytes(Dtype::Half, 2, 1 << 12);
        let small = input_bytes(Dtype::Half, 2, 37);
        assert_eq!(&big[..small.len()], &small[..]);
    }
}
