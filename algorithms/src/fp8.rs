//! 8-bit floats: OCP FP8 `E4M3FN` and `E5M2`, converted to and from `f32`.
//!
//! Rules (the same as CUDA's `__nv_cvt_float_to_fp8(.., __NV_SATFINITE, ..)`):
//! * rounding is **round-to-nearest, ties-to-even** on the fp8 grid (subnormals included);
//! * **saturation**: a finite value whose rounded magnitude exceeds the largest finite
//!   fp8 value becomes that value with its sign (E4M3FN: ±448, E5M2: ±57344);
//! * infinities: E4M3FN has none, so ±inf saturates to ±448; E5M2 keeps ±inf;
//! * NaN becomes the canonical NaN with the input's sign (E4M3FN `0x7f`, E5M2 `0x7e`);
//! * `-0.0` stays `-0.0` (code `0x80`).
//!
//! Decoding is exact (every fp8 value is an f32 value).

/// Which fp8 format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Format {
    /// 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; NaN = `s1111111`.
    E4M3,
    /// 1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like inf and NaN.
    E5M2,
}

impl Fp8Format {
    const fn ebits(self) -> i32 {
        match self {
            Fp8Format::E4M3 => 4,
            Fp8Format::E5M2 => 5,
        }
    }
    const fn mbits(self) -> i32 {
        match self {
            Fp8Format::E4M3 => 3,
            Fp8Format::E5M2 => 2,
        }
    }
    const fn bias(self) -> i32 {
        (1 << (self.ebits() - 1)) - 1
    }
    /// Code (without sign) of the largest finite value.
    pub const fn max_code(self) -> u8 {
        match self {
            Fp8Format::E4M3 => 0x7e,
            Fp8Format::E5M2 => 0x7b,
        }
    }
    /// Canonical NaN code (without sign).
    pub const fn nan_code(self) -> u8 {
        match self {
            Fp8Format::E4M3 => 0x7f,
            Fp8Format::E5M2 => 0x7e,
        }
    }
    /// Whether `code` is a NaN.
    pub fn is_nan(self, code: u8) -> bool {
        let mag = code & 0x7f;
        match self {
            Fp8Format::E4M3 => mag == 0x7f,
            Fp8Format::E5M2 => mag > 0x7c,
        }
    }
}

/// Decode one fp8 value (exact).
pub fn fp8_to_f32(code: u8, fmt: Fp8Format) -> f32 {
    let sign = if code & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let mbits = fmt.mbits();
    let exp = ((code & 0x7f) >> mbits) as i32;
    let man = (code & ((1u8 << mbits) - 1)) as i32;
    let emax = (1 << fmt.ebits()) - 1;
    if fmt.is_nan(code) {
        return f32::NAN.copysign(sign);
    }
    if fmt == Fp8Format::E5M2 && exp == emax && man == 0 {
        return f32::INFINITY * sign;
    }
    let v = if exp == 0 {
        man as f32 * pow2(1 - fmt.bias() - mbits)
    } else {
        (((1 << mbits) + man) as f32) * pow2(exp - fmt.bias() - mbits)
    };
    sign * v
}

fn pow2(e: i32) -> f32 {
    // Exact for the exponents fp8 needs (-17..=16).
    f32::from_bits(((e + 127) as u32) << 23)
}

/// Encode one f32 as fp8 with round-to-nearest-even and saturation (see module docs).
pub fn f32_to_fp8(x: f32, fmt: Fp8Format) -> u8 {
    let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
    if x.is_nan() {
        return sign | fmt.nan_code();
    }
    let a = x.abs();
    if a.is_infinite() {
        return match fmt {
            Fp8Format::E4M3 => sign | fmt.max_code(),
            Fp8Format::E5M2 => sign | 0x7c,
        };
    }
    if a == 0.0 {
        return sign;
    }
    let mbits = fmt.mbits();
    let min_normal_exp = 1 - fmt.bias();
    // Unbiased exponent of `a` (f32 subnormals are far below fp8's range: they round to 0).
    let e = ((a.to_bits() >> 23) as i32 - 127).max(min_normal_exp);
    if e > 30 {
        return sign | fmt.max_code();
    }
    // Quantum of the fp8 grid at exponent e; the division is exact (power of two).
    let quantum = 2f64.powi(e - mbits);
    let mut q = (a as f64 / quantum).round_ties_even() as i64;
    let mut e = e;
    if q >= 1 << (mbits + 1) {
        q >>= 1; // carried into the next binade; q was exactly 2^(mbits+1)
        e += 1;
    }
    let mag: i64 = if q < 1 << mbits {
        q // subnormal (only possible at e == min_normal_exp) or zero
    } else {
        (((e + fmt.bias()) as i64) << mbits) | (q - (1 << mbits))
    };
    if mag > fmt.max_code() as i64 {
        sign | fmt.max_code()
    } else {
        sign | mag as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_finite(fmt: Fp8Format) -> Vec<(u8, f32)> {
        (0..=255u8)
            .map(|c| (c, fp8_to_f32(c, fmt)))
            .filter(|(_, v)| v.is_finite())
            .collect()
    }

    #[test]
    fn known_values() {
        assert_eq!(fp8_to_f32(0x7e, Fp8Format::E4M3), 448.0);
        assert_eq!(fp8_to_f32(0x7b, Fp8Format::E5M2), 57344.0);
        assert_eq!(fp8_to_f32(0x01, Fp8Format::E4M3), 2f32.powi(-9));
        assert_eq!(fp8_to_f32(0x01, Fp8Format::E5M2), 2f32.powi(-16));
        assert_eq!(fp8_to_f32(0x38, Fp8Format::E4M3), 1.0);
        assert_eq!(fp8_to_f32(0x3c, Fp8Format::E5M2), 1.0);
        assert_eq!(fp8_to_f32(0x7c, Fp8Format::E5M2), f32::INFINITY);
        assert!(fp8_to_f32(0x7f, Fp8Format::E4M3).is_nan());
    }

    #[test]
    fn exhaustive_round_trip() {
        for fmt in [Fp8Format::E4M3, Fp8Format::E5M2] {
            for c in 0..=255u8 {
                let v = fp8_to_f32(c, fmt);
                let back = f32_to_fp8(v, fmt);
                if fmt.is_nan(c) {
                    assert!(fmt.is_nan(back), "{fmt:?} {c:#x}");
                    assert_eq!(back & 0x80, c & 0x80);
                } else {
                    assert_eq!(back, c, "{fmt:?} code {c:#x} value {v}");
                }
            }
        }
    }

    /// Brute force: the nearest finite fp8 value (ties to even code), saturating.
    fn reference(x: f32, fmt: Fp8Format) -> u8 {
        let grid = all_finite(fmt);
        let mut best = grid[0];
        for &(c, v) in &grid {
            let d = (v as f64 - x as f64).abs();
            let bd = (best.1 as f64 - x as f64).abs();
            if d < bd || (d == bd && c & 1 == 0 && best.0 & 1 == 1) {
                best = (c, v);
            }
        }
        // Signed zero follows the input's sign.
        if best.1 == 0.0 {
            return if x.is_sign_negative() { 0x80 } else { 0 };
        }
        best.0
    }

    #[test]
    fn midpoints_and_neighbours_round_to_nearest_even() {
        for fmt in [Fp8Format::E4M3, Fp8Format::E5M2] {
            let mut vals: Vec<f32> = all_finite(fmt).into_iter().map(|(_, v)| v).collect();
            vals.sort_by(|a, b| a.partial_cmp(b).unwrap());
            vals.dedup();
            for w in vals.windows(2) {
                let mid = ((w[0] as f64 + w[1] as f64) / 2.0) as f32;
                for x in [
                    mid,
                    f32::from_bits(mid.to_bits() + 1),
                    f32::from_bits(mid.to_bits() - 1),
                ] {
                    if x == 0.0 {
                        continue;
                    }
                    assert_eq!(f32_to_fp8(x, fmt), reference(x, fmt), "{fmt:?} x={x}");
                }
            }
        }
    }

    #[test]
    fn sampled_f32_match_brute_force_and_saturate() {
        for fmt in [Fp8Format::E4M3, Fp8Format::E5M2] {
            let mut bits = 0u32;
            while bits < 0x4800_0000 {
                let x = f32::from_bits(bits);
                assert_eq!(f32_to_fp8(x, fmt), reference(x, fmt), "{fmt:?} x={x}");
                assert_eq!(f32_to_fp8(-x, fmt), reference(-x, fmt), "{fmt:?} x={}", -x);
                bits += 0x0001_3579;
            }
        }
        assert_eq!(f32_to_fp8(1e9, Fp8Format::E4M3), 0x7e);
        assert_eq!(f32_to_fp8(-1e9, Fp8Format::E5M2), 0xfb);
        assert_eq!(f32_to_fp8(f32::INFINITY, Fp8Format::E4M3), 0x7e);
        assert_eq!(f32_to_fp8(f32::NEG_INFINITY, Fp8Format::E5M2), 0xfc);
        assert_eq!(f32_to_fp8(464.0, Fp8Format::E4M3), 0x7e); // midpoint 448/480 -> saturate
    }
}
