//! `sin x` and `cos x` in f64 for PTX (which has no double-precision sine), for the device
//! solver's request records (the host packs `f64::sin_cos` of the pose angles; see
//! `ndt::gpu::records::pack_request`).
//!
//! # Maths
//! `k = rint(x · 2/π)`, `r = x − k π/2` with `π/2` in three parts (each product with `k` fused,
//! so `r` is exact for `k = 0` and within an ulp of `r`'s size otherwise). On
//! `|r| ≤ π/4 + ε` the sine is `r + r³ P(r²)` with `P` the Taylor series to `r¹⁹` and the cosine
//! `w + ((1 − w) − r²/2 + r⁴ Q(r²))` with `w = 1 − r²/2` (the rounding error of `w` recovered
//! exactly) and `Q` the series to `r²⁰`; the truncation is below 1e-19 relative, so results are
//! within about an ulp of the correctly rounded values (and usually equal to them). The quadrant
//! `k mod 4` swaps and negates them. The caller keeps `|x| < ` [`SINCOS_MAX_ARG`] (`k` fits an
//! s32 and the reduction stays accurate). [`sincos_mirror`] is the same algorithm in Rust so
//! tests check it against the host's `sin_cos` on the CPU.

use crate::ptx::*;

/// Largest `|x|` the kernel's reduction takes (the device solver hands anything larger back to
/// the host).
pub const SINCOS_MAX_ARG: f64 = 1.0e5;

const TWO_OVER_PI: f64 = std::f64::consts::FRAC_2_PI;
/// π/2 rounded to f64.
const PIO2_HI: f64 = std::f64::consts::FRAC_PI_2;
/// π/2 − `PIO2_HI` rounded to f64 (6.123233995736766e-17).
const PIO2_MID: f64 = f64::from_bits(0x3C91_A626_3314_5C07);
/// π/2 − `PIO2_HI` − `PIO2_MID` rounded to f64 (−1.4973849048591698e-33).
const PIO2_LO: f64 = f64::from_bits(0xB91F_1976_B7ED_8FBC);

/// `(−1)^(i+1) / (2i + 3)!` for i = 0..=8: the sine series after `r`, in powers of `r²`.
const SIN_TAIL: [f64; 9] = series(3);
/// `(−1)^i / (2i + 4)!` for i = 0..=8: the cosine series after `1 − r²/2`, in powers of `r²`.
const COS_TAIL: [f64; 9] = series(4);

/// `(−1)^(i + first/2 + 1) / (first + 2i)!` for i = 0..=8.
const fn series(first: u32) -> [f64; 9] {
    let mut c = [0.0f64; 9];
    let mut i = 0;
    while i < 9 {
        let n = first + 2 * i as u32;
        let mut f = 1.0f64;
        let mut k = 2;
        while k <= n {
            f *= k as f64;
            k += 1;
        }
        // sin: −1/3!, +1/5!, ...; cos: +1/4!, −1/6!, ...
        let negative = (n / 2) % 2 == 1;
        c[i] = if negative { -1.0 / f } else { 1.0 / f };
        i += 1;
    }
    c
}

/// Emits `(sin x, cos x)`; see the module docs for the argument range.
pub fn sincos_f64(b: &mut KernelBuilder, x: Reg<F64>) -> (Reg<F64>, Reg<F64>) {
    let t = b.mul(x, TWO_OVER_PI);
    let k = b.cvt_round::<S32, F64>(Round::Rni, t);
    let kf = b.cvt::<F64, S32>(k);
    let r = b.fma(kf, -PIO2_HI, x);
    let r = b.fma(kf, -PIO2_MID, r);
    let r = b.fma(kf, -PIO2_LO, r);
    let z = b.mul(r, r);
    let mut p = b.mov(SIN_TAIL[8]);
    for c in SIN_TAIL[..8].iter().rev() {
        p = b.fma(p, z, *c);
    }
    let rz = b.mul(r, z);
    let s = b.fma(rz, p, r);
    let mut q = b.mov(COS_TAIL[8]);
    for c in COS_TAIL[..8].iter().rev() {
        q = b.fma(q, z, *c);
    }
    let hz = b.mul(z, 0.5f64);
    let w = b.sub(1.0f64, hz);
    let back = b.sub(1.0f64, w);
    let err = b.sub(back, hz);
    let zz = b.mul(z, z);
    let tail = b.fma(zz, q, err);
    let c = b.add(w, tail);
    // Quadrant k mod 4: (s, c), (c, −s), (−s, −c), (−c, s).
    let ku = b.bitcast::<U32, S32>(k);
    let odd_bit = b.and(ku, 1u32);
    let odd = b.setp(Cmp::Ne, odd_bit, 0u32);
    let sin_bit = b.and(ku, 2u32);
    let k1 = b.add(ku, 1u32);
    let cos_bit = b.and(k1, 2u32);
    let sin0 = b.selp(c, s, odd);
    let cos0 = b.selp(s, c, odd);
    let neg_s = b.setp(Cmp::Ne, sin_bit, 0u32);
    let neg_c = b.setp(Cmp::Ne, cos_bit, 0u32);
    let ns = b.neg(sin0);
    let nc = b.neg(cos0);
    let sin = b.selp(ns, sin0, neg_s);
    let cos = b.selp(nc, cos0, neg_c);
    (sin, cos)
}

/// The kernel's algorithm in Rust, operation for operation (for accuracy tests).
pub fn sincos_mirror(x: f64) -> (f64, f64) {
    let k = (x * TWO_OVER_PI).round_ties_even();
    let r = k.mul_add(-PIO2_HI, x);
    let r = k.mul_add(-PIO2_MID, r);
    let r = k.mul_add(-PIO2_LO, r);
    let z = r * r;
    let mut p = SIN_TAIL[8];
    for c in SIN_TAIL[..8].iter().rev() {
        p = p.mul_add(z, *c);
    }
    let s = (r * z).mul_add(p, r);
    let mut q = COS_TAIL[8];
    for c in COS_TAIL[..8].iter().rev() {
        q = q.mul_add(z, *c);
    }
    let hz = z * 0.5;
    let w = 1.0 - hz;
    let err = (1.0 - w) - hz;
    let c = w + (z * z).mul_add(q, err);
    let ki = k as i32;
    let (s0, c0) = if ki & 1 != 0 { (c, s) } else { (s, c) };
    let s1 = if ki & 2 != 0 { -s0 } else { s0 };
    let c1 = if ki.wrapping_add(1) & 2 != 0 { -c0 } else { c0 };
    (s1, c1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_split_pi_over_two() {
        assert_eq!(SIN_TAIL[0], -1.0 / 6.0);
        assert_eq!(SIN_TAIL[1], 1.0 / 120.0);
        assert_eq!(COS_TAIL[0], 1.0 / 24.0);
        assert_eq!(COS_TAIL[1], -1.0 / 720.0);
        assert!(PIO2_MID.abs() < 1e-16 && PIO2_LO.abs() < 1e-32);
    }

    #[test]
    fn mirror_is_within_an_ulp_of_the_host_and_mostly_equal() {
        let mut rng = crate::rng::Rng::new(11);
        // Bit-equal results per class: small angles (the solver's), then up to 4 and 1000 rad.
        let mut equal = [[0usize; 2]; 3];
        for k in 0..200_000 {
            let (x, class) = match k % 4 {
                0 => (rng.range(-0.3, 0.3), 0),
                1 => (rng.range(-4.0, 4.0), 1),
                2 => (rng.range(-100.0, 100.0) * 1e-6, 0),
                _ => (rng.range(-1000.0, 1000.0), 2),
            };
            let (s, c) = sincos_mirror(x);
            let (ws, wc) = x.sin_cos();
            for (got, want) in [(s, ws), (c, wc)] {
                let ulp = f64::EPSILON * want.abs().max(f64::MIN_POSITIVE);
                // Near a zero of sin or cos the result's own ulp is tiny: compare absolutely.
                let tol = (1.5 * ulp).max(4.0 * f64::EPSILON * x.abs().max(1.0) * 1e-3);
                assert!((got - want).abs() <= tol, "x {x:e}: {got:e} vs {want:e}");
                equal[class][0] += usize::from(got == want);
                equal[class][1] += 1;
            }
        }
        let share = |c: [usize; 2]| c[0] as f64 / c[1] as f64;
        eprintln!(
            "bit-equal to sin_cos: small {:.4}, |x| <= 4 {:.4}, |x| <= 1000 {:.4}",
            share(equal[0]),
            share(equal[1]),
            share(equal[2])
        );
        // Within π/4 (k = 0, the solver's angles) r = x exactly: 99.8% equal. Beyond it the
        // reduced argument's own rounding leaves about one result in seven an ulp off.
        assert!(share(equal[0]) >= 0.99, "{equal:?}");
        assert!(
            share(equal[1]) >= 0.8 && share(equal[2]) >= 0.8,
            "{equal:?}"
        );
    }
}
