//! IEEE 754 binary16 ("half") storage for weights: f32 -> f16 with round-to-nearest-even (the
//! rounding `cvt.rn.f16.f32` uses) and the exact f16 -> f32 widening the kernels do with
//! `cvt.f32.f16`. Values beyond the f16 range become infinities, which weight validation rejects.

/// Rounds an f32 to the nearest f16 (ties to even) and returns its bit pattern.
pub fn f32_to_f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x007f_ffff;
    if exp == 0xff {
        // Infinity stays infinity; NaN keeps a quiet payload bit.
        return sign
            | 0x7c00
            | if man != 0 {
                0x0200 | (man >> 13) as u16
            } else {
                0
            };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal (or zero) in f16: shift the full significand, rounding to nearest even.
        if e < -10 {
            return sign;
        }
        let full = man | 0x0080_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = full & ((1u32 << shift) - 1);
        let mut q = full >> shift;
        if rest > half || (rest == half && q & 1 == 1) {
            q += 1;
        }
        return sign | q as u16;
    }
    let mut q = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && q & 1 == 1) {
        q += 1; // may carry into the exponent, up to infinity: both are the right answer
    }
    sign | q as u16
}

/// Widens an f16 bit pattern to f32 exactly.
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x03ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m * 2^-24, exact in f32.
            let v = m as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7fc0_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// Rounds every value to f16 bits.
pub fn to_f16_vec(x: &[f32]) -> Vec<u16> {
    x.iter().map(|&v| f32_to_f16_bits(v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_f16_round_trips_through_f32() {
        for h in 0..=u16::MAX {
            let f = f16_bits_to_f32(h);
            if f.is_nan() {
                assert!(f16_bits_to_f32(f32_to_f16_bits(f)).is_nan());
                continue;
            }
            assert_eq!(f32_to_f16_bits(f), h, "h={h:#06x} f={f:e}");
        }
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(65504.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00); // halfway to the next binade: rounds up to inf
        assert_eq!(f32_to_f16_bits(1.0 + 1.0 / 2048.0), 0x3c00); // tie, even is 1.0
        assert_eq!(f32_to_f16_bits(1.0 + 3.0 / 2048.0), 0x3c02); // tie, even is up
        assert_eq!(f32_to_f16_bits(5.960_464_5e-8), 0x0001); // smallest subnormal
        assert_eq!(f32_to_f16_bits(2.9e-8), 0x0000);
        assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
        // Against the exact value: every f32 in a sweep rounds to a nearest f16.
        let mut x = -70000.0f32;
        while x < 70000.0 {
            let h = f32_to_f16_bits(x);
            let r = f16_bits_to_f32(h);
            if r.is_finite() {
                let up = f16_bits_to_f32(h.wrapping_add(1));
                let down = f16_bits_to_f32(h.wrapping_sub(1));
                let err = (f64::from(r) - f64::from(x)).abs();
                for n in [up, down] {
                    if n.is_finite() {
                        assert!(
                            err <= (f64::from(n) - f64::from(x)).abs(),
                            "x={x} r={r} n={n}"
                        );
                    }
                }
            }
            x += 0.37;
        }
    }
}
