//! f32 transcendentals for the RNN kernels. `expf`, `sigmoid` and `tanh` are built from
//! IEEE-rounded instructions only (`fma.rn`, `mul.rn`, `div.rn`, `cvt.rni`): `crate::rnn::mathf`
//! mirrors every step on the CPU with the same operations in the same order, so the CPU mirror
//! and the kernels give the same bits; its tests measure the error against f64. The GRU cell,
//! where they sit on every step's critical path, uses the SFU forms below instead.
//!
//! - `expf(x)`: clamp x to [-87, 88]; n = rint(x log2 e); r = x - n ln2 (two fmas, ln2 split in
//!   hi + lo); e^r by the degree-7 Taylor polynomial on |r| <= 0.35 (truncation < 1e-8 relative);
//!   times 2^n built from the exponent bits (n in [-126, 127] after the clamp). About 1 ulp.
//! - `sigmoid(x) = 1 / (1 + expf(-x))` with `div.rn`.
//! - `tanh(x)`: |x| < 0.125: x + x s P(s), s = x², P the Taylor terms to x^7 (error < 2e-9
//!   relative); otherwise sign(x) (1 - 2 / (expf(2|x|) + 1)), whose cancellation costs at most
//!   8x at |x| = 0.125 (under 1e-6 relative).
//! - `sigmoid_sfu(x)`, `tanh_sfu(x)`: the GRU cell's forms, on its critical path every step: the
//!   same formulas with `expf` and `div.rn` replaced by the SFU's `ex2.approx.ftz` (2^(x log2 e))
//!   and `rcp.approx.ftz` (a handful of instructions instead of about forty). Not bit-exact on the
//!   CPU; `crate::rnn::mathf::sfu_model` bounds them (a few ulp, amplified at most 8x by tanh's
//!   cancellation above |x| = 0.125), and the GPU tests measure the rollouts against f64.
//! - `hash32(i, seed)`: murmur3's fmix32 applied twice with the seed words mixed in: the
//!   counter-based random bits of the dropout masks and Gaussian test matrices.

use crate::ptx::*;

/// log2(e) rounded to f32.
pub const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 rounded to f32 (the high part of the split).
pub const LN2_HI: f32 = std::f32::consts::LN_2;
/// ln 2 - LN2_HI, rounded to f32.
pub const LN2_LO: f32 = -1.904_654_3e-9;
/// Taylor coefficients of e^r from r^7 down to r^2.
pub const EXP_POLY: [f32; 6] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
];
/// Input clamp of `expf`: below, the result is subnormal or zero anyway; above, it overflows.
pub const EXP_MIN: f32 = -87.0;
/// Upper clamp of `expf`.
pub const EXP_MAX: f32 = 88.0;
/// Below this |x| tanh uses its odd Taylor polynomial.
pub const TANH_SMALL: f32 = 0.125;
/// Taylor coefficients of tanh(x)/x - 1 in s = x²: s (-1/3 + s (2/15 + s (-17/315))).
pub const TANH_POLY: [f32; 3] = [-17.0 / 315.0, 2.0 / 15.0, -1.0 / 3.0];
/// fmix32 multipliers (murmur3).
pub const FMIX: [u32; 2] = [0x85eb_ca6b, 0xc2b2_ae35];

/// e^x in f32 (see the module notes).
pub fn expf(b: &mut KernelBuilder, x: Reg<F32>) -> Reg<F32> {
    let x = b.max(x, EXP_MIN);
    let x = b.min(x, EXP_MAX);
    let t = b.mul(x, LOG2E);
    let n = b.cvt_round::<F32, F32>(Round::Rni, t);
    let r = b.fma(n, -LN2_HI, x);
    let r = b.fma(n, -LN2_LO, r);
    let mut p = b.mov(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = b.fma(p, r, c);
    }
    p = b.fma(p, r, 1.0f32);
    p = b.fma(p, r, 1.0f32);
    let ni = b.cvt::<S32, F32>(n);
    let biased = b.add(ni, 127i32);
    let bits = b.shl(biased, 23u32);
    let scale = b.bitcast::<F32, S32>(bits);
    b.mul(p, scale)
}

/// 1 / (1 + e^-x).
pub fn sigmoid(b: &mut KernelBuilder, x: Reg<F32>) -> Reg<F32> {
    let nx = b.neg(x);
    let e = expf(b, nx);
    let d = b.add(e, 1.0f32);
    let one = b.mov(1.0f32);
    b.div(one, d)
}

/// tanh(x) (see the module notes).
pub fn tanh(b: &mut KernelBuilder, x: Reg<F32>) -> Reg<F32> {
    let a = b.abs(x);
    // Large branch: 1 - 2 / (e^{2a} + 1), sign restored.
    let a2 = b.add(a, a);
    let e = expf(b, a2);
    let d = b.add(e, 1.0f32);
    let two = b.mov(2.0f32);
    let q = b.div(two, d);
    let one = b.mov(1.0f32);
    let big = b.sub(one, q);
    tanh_finish(b, x, a, big)
}

/// Both tanh forms' ending: sign(x) on `big` (tanh(|x|) for large |x|), the Taylor branch for
/// |x| < [`TANH_SMALL`].
fn tanh_finish(b: &mut KernelBuilder, x: Reg<F32>, a: Reg<F32>, big: Reg<F32>) -> Reg<F32> {
    let negative = b.setp(Cmp::Lt, x, 0.0f32);
    let nbig = b.neg(big);
    let big = b.selp(nbig, big, negative);
    let small = tanh_small(b, x);
    let is_small = b.setp(Cmp::Lt, a, TANH_SMALL);
    b.selp(small, big, is_small)
}

/// 1 / (1 + 2^(-x log2 e)) with the SFU (see the module notes). Large |x| saturate to 0 or 1
/// (2^t overflows to infinity, whose reciprocal is 0); NaN stays NaN.
pub fn sigmoid_sfu(b: &mut KernelBuilder, x: Reg<F32>) -> Reg<F32> {
    let t = b.mul(x, -LOG2E);
    let e = b.ex2_approx_ftz(t);
    let d = b.add(e, 1.0f32);
    b.rcp_approx_ftz(d)
}

/// tanh(x) with the SFU: |x| < [`TANH_SMALL`] as [`tanh`], otherwise
/// sign(x) (1 - 2 / (2^(2|x| log2 e) + 1)).
pub fn tanh_sfu(b: &mut KernelBuilder, x: Reg<F32>) -> Reg<F32> {
    let a = b.abs(x);
    let t = b.mul(a, 2.0 * LOG2E);
    let e = b.ex2_approx_ftz(t);
    let d = b.add(e, 1.0f32);
    let q = b.rcp_approx_ftz(d);
    let big = b.fma(q, -2.0f32, 1.0f32);
    tanh_finish(b, x, a, big)
}

/// The odd Taylor polynomial of tanh for |x| < [`TANH_SMALL`]: x + x (s P(s)), s = x².
fn tanh_small(b: &mut KernelBuilder, x: Reg<F32>) -> Reg<F32> {
    let s = b.mul(x, x);
    let mut p = b.mov(TANH_POLY[0]);
    for &c in &TANH_POLY[1..] {
        p = b.fma(p, s, c);
    }
    let sp = b.mul(s, p);
    b.fma(x, sp, x)
}

fn fmix32(b: &mut KernelBuilder, h: Reg<U32>) -> Reg<U32> {
    let s = b.shr(h, 16u32);
    let h = b.xor(h, s);
    let h = b.mul(h, FMIX[0]);
    let s = b.shr(h, 13u32);
    let h = b.xor(h, s);
    let h = b.mul(h, FMIX[1]);
    let s = b.shr(h, 16u32);
    b.xor(h, s)
}

/// 32 random bits for counter `i` under the 64-bit seed (`seed_lo`, `seed_hi`).
pub fn hash32(
    b: &mut KernelBuilder,
    i: Reg<U32>,
    seed_lo: Reg<U32>,
    seed_hi: Reg<U32>,
) -> Reg<U32> {
    let h = b.xor(i, seed_lo);
    let h = fmix32(b, h);
    let h = b.xor(h, seed_hi);
    fmix32(b, h)
}
