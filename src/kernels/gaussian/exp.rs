//! The kernel exponential of the fused kernels: e' = 2^-t for t = o + |v'|^2 = o + d log2(e) / 2
//! (`super::scaled::solve_scaled`), 0 beyond the type's cutoff (as
//! [`crate::gaussian::Real::EXP_CUTOFF_D`]).
//!
//! - f32: one `ex2.approx.ftz` of -t. With o = 126 - 87 log2(e) (`super::common::F32_EXP_OFFSET`,
//!   folded into the prepared `w c 2^o`) the result drops below 2^-126, where `.ftz` flushes it
//!   to 0, when d > 174.
//! - f64: k = round(t) by adding 1.5 2^52 (k lands in the low word of the sum), f = t - k in
//!   [-1/2, 1/2] exactly, 2^-f from a degree-10 polynomial (Chebyshev interpolant of 2^-f on
//!   [-1/2, 1/2]; relative error 2e-15 measured on a 2e5-point grid, against 2e-16 for the
//!   degree-12 Taylor series it replaces), and k subtracted from its exponent field. Beyond
//!   [`F64_CUT_T`] (d > 1416) the result is 0, so e' = 0; t is clamped first so that
//!   inf or a huge t cannot reach the rounding shift. Clamp and cutoff test compare t's bits as
//!   integers (t >= 0), off the FP64 pipe. `super::exp_f64` has the table-driven f64 kinds
//!   (6 to 8 FP64 operations instead of 13; a kernel picks one through `exp_f64::Exp2`).

use crate::ptx::*;

/// f64: t = |v'|^2 above which d > 1416 (the f64 cutoff): 1416 log2(e) / 2.
pub const F64_CUT_T: f64 = 1416.0 * std::f64::consts::LOG2_E / 2.0;

/// f32 2^-t (`ex2.approx.ftz`: 2 ulp; flushes below 2^-126).
pub fn exp2_neg_f32(b: &mut KernelBuilder, t: Reg<F32>) -> Reg<F32> {
    let n = b.neg(t);
    b.ex2_approx_ftz(n)
}

/// f64 2^-t for t >= 0 (module docs), 0 beyond [`F64_CUT_T`]. The clamp of t, the cutoff test
/// and the scaling by 2^-k work on bits in the integer unit (t >= 0, so its bits order as
/// unsigned integers), leaving 13 operations of the FP64 pipe: the rounding (3 adds) and 10
/// multiply-adds.
pub fn exp2_neg_f64(b: &mut KernelBuilder, t: Reg<F64>) -> Reg<F64> {
    const SHIFT: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
    const COEF: [u64; 11] = [
        0x3FF0_0000_0000_0001,
        0xBFE6_2E42_FEFA_3A03,
        0x3FCE_BFBD_FF82_BACB,
        0xBFAC_6B08_D704_0B00,
        0x3F83_B2AB_6FD2_2D16,
        0xBF55_D87F_E964_D174,
        0x3F24_3090_E545_D176,
        0xBEEF_FCB6_8F45_D179,
        0x3EB6_2CBA_E8BA_2E8A,
        0xBE7B_6617_45D1_745D,
        0x3E3D_1745_D174_5D17,
    ];
    // A t whose high word exceeds that of 1100 (inf and NaN included) is taken as 1100, so that
    // the rounding below stays exact; such a t is beyond the cutoff anyway.
    let (_, t_hi) = b.unpack64(t);
    let big = b.setp(Cmp::Gt, t_hi, (1100.0f64.to_bits() >> 32) as u32);
    let tc = b.selp(1100.0f64, t, big);
    let m = b.add(tc, SHIFT);
    let kf = b.sub(m, SHIFT);
    let f = b.sub(tc, kf);
    let mut p = b.mov(f64::from_bits(COEF[10]));
    for &c in COEF[..10].iter().rev() {
        p = b.fma(p, f, f64::from_bits(c));
    }
    // p 2^-k by subtracting k from p's exponent field: within the cutoff k <= 1021 and p >=
    // 2^-1/2, so the result is normal and the subtraction exact.
    let (k, _) = b.unpack64(m);
    let (p_lo, p_hi) = b.unpack64(p);
    let e_hi = b.mad(k, (-(1i64 << 20)) as u32, p_hi);
    let t_bits = b.bitcast::<U64, F64>(t);
    let far = b.setp(Cmp::Gt, t_bits, F64_CUT_T.to_bits());
    let e_hi = b.selp(0u32, e_hi, far);
    let e_lo = b.selp(0u32, p_lo, far);
    b.pack64::<F64>(e_lo, e_hi)
}
