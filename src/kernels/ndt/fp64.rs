//! `e^x` in f64 for PTX, which has no double-precision exponential.
//!
//! # Maths
//! For `x ∈ [EXP_MIN_ARG, EXP_MAX_ARG]`: `k = rint(x · log2 e)`, `r = x − k ln 2` with `ln 2` split
//! into a high part whose product with `k` is exact and a low part (Cody–Waite, fdlibm's
//! constants), so `|r| ≤ ln 2 / 2 + ε`. `e^r` is its Taylor polynomial to degree 13 in Horner form
//! with fused multiply-adds (truncation below 5e-18 relative on that interval), and `2^k` is built
//! from its exponent bits. Result within about 1 ulp of the correctly rounded value, never
//! subnormal (the range excludes that). [`exp_mirror`] is the same algorithm in Rust so tests can
//! check its accuracy on the CPU.

use crate::ptx::*;

/// Smallest argument the kernel's `exp` accepts (`e^x` is then ≥ 2^−1021, still normal).
pub const EXP_MIN_ARG: f64 = -708.0;
/// Largest argument the kernel's `exp` accepts (`2^k` stays finite).
pub const EXP_MAX_ARG: f64 = 709.0;

const LOG2_E: f64 = std::f64::consts::LOG2_E;
/// High part of ln 2 (fdlibm `ln2_hi`, 0x3FE62E42FEE00000: its low 21 bits are zero).
#[allow(clippy::excessive_precision)] // fdlibm's decimal text; the emitted bits are what count
const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
/// ln 2 − `LN2_HI` (fdlibm `ln2_lo`).
#[allow(clippy::excessive_precision)] // fdlibm's decimal text; the emitted bits are what count
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
/// Taylor coefficients 1/i! for i = 0..=13.
const INV_FACTORIAL: [f64; 14] = {
    let mut c = [1.0f64; 14];
    let mut i = 1;
    while i < 14 {
        c[i] = c[i - 1] / i as f64;
        i += 1;
    }
    c
};

/// Emits `e^x`; the caller guarantees `x ∈ [EXP_MIN_ARG, EXP_MAX_ARG]` (outside it the exponent
/// bits wrap).
pub fn exp_f64(b: &mut KernelBuilder, x: Reg<F64>) -> Reg<F64> {
    let t = b.mul(x, LOG2_E);
    let k = b.cvt_round::<S32, F64>(Round::Rni, t);
    let kf = b.cvt::<F64, S32>(k);
    let r = b.fma(kf, -LN2_HI, x);
    let r = b.fma(kf, -LN2_LO, r);
    let mut p = b.mov(INV_FACTORIAL[13]);
    for i in (0..13).rev() {
        p = b.fma(p, r, INV_FACTORIAL[i]);
    }
    let biased = b.add(k, 1023i32);
    let wide = b.cvt::<S64, S32>(biased);
    let bits = b.shl(wide, 52u32);
    let scale = b.bitcast::<F64, S64>(bits);
    b.mul(p, scale)
}

/// The kernel's `exp` algorithm in Rust, operation for operation (for accuracy tests).
pub fn exp_mirror(x: f64) -> f64 {
    let k = (x * LOG2_E).round_ties_even();
    let r = k.mul_add(-LN2_HI, x);
    let r = k.mul_add(-LN2_LO, r);
    let mut p = INV_FACTORIAL[13];
    for i in (0..13).rev() {
        p = p.mul_add(r, INV_FACTORIAL[i]);
    }
    let scale = f64::from_bits(((k as i64 + 1023) as u64) << 52);
    p * scale
}
