//! Pieces shared by the Gaussian field kernels: the device layout of prepared Gaussians, one
//! kernel source for f32 and f64 ([`KFloat`]) and the per-pair maths of `crate::gaussian::pair`
//! in the CPU's order (the distance matrix and the compensated solve; the fused kernels use the
//! scaled form of `super::scaled`).
//!
//! # Prepared Gaussian layout (device)
//! [`PREP_STRIDE`] = 12 scalars per Gaussian, AoS (f32: 48 bytes = three 16-byte vectors; f64: six):
//!
//! | index | 0..3 | 3    | 4    | 5    | 6..9          | 9          | 10       | 11 |
//! |-------|------|------|------|------|---------------|------------|----------|----|
//! | value | mu   | -L10 | -L20 | -L21 | 1/a0 1/a1 1/a2 | w c 2^o   | c 2^o    | w  |
//!
//! with a_k = Lkk + eps, c the normalisation (1 when unnormalised) and o the exponent offset of
//! the type ([`F32_EXP_OFFSET`], 0 for f64). The off-diagonal entries are stored negated so that
//! `r1 - L10 v0` is one multiply-add (`fma(-L10, v0, r1)`) and, unfused, rounds exactly like the
//! CPU's `r1 - L10 * v0`. The Gaussian count is padded with all-zero Gaussians to a multiple of
//! [`GAUSSIAN_PAD`]; a zero Gaussian has weight 0 and 1/a = 0 (so v = s = 0) and adds exactly 0
//! to every point.
//!
//! # The kernel exponential
//! Kernels compute e' = exp(-d/2) 2^-o, flushed to 0 beyond the cutoff (f32 d > 174, f64
//! d > 1416, as [`crate::gaussian::Real::EXP_CUTOFF_D`]); the 2^o is folded into the prepared
//! `w c 2^o` and `c 2^o` (see `super::exp`).
//!
//! # Rounding
//! The distance kernel follows the CPU: f32 fuses multiply-adds (`fma.rn`), f64 uses separate
//! `.rn` operations in the CPU's order, so f64 distances are bit-identical to the CPU reference.
//! The fused forward and backward use multiply-adds in both types.

use super::exp;
use super::exp_f64::Exp2;
use crate::ptx::*;

/// Scalars per prepared Gaussian on the device.
pub const PREP_STRIDE: u32 = 12;
/// Offset of mu (3 scalars).
pub const PREP_MU: u32 = 0;
/// Offset of -L10, -L20, -L21.
pub const PREP_NEG_OFFDIAG: u32 = 3;
/// Offset of 1/a0, 1/a1, 1/a2.
pub const PREP_INV_DIAG: u32 = 6;
/// Offset of w c 2^o.
pub const PREP_WEIGHT_NORM: u32 = 9;
/// Offset of c 2^o.
pub const PREP_NORM: u32 = 10;
/// Offset of w.
pub const PREP_WEIGHT: u32 = 11;
/// The Gaussian count on the device is padded with zero Gaussians to a multiple of this (a
/// multiple of every kernel's Gaussian tile: the backward's 64 threads x 8).
pub const GAUSSIAN_PAD: u32 = 512;
/// Scalars per Gaussian of the compensation constants (f32 backward only), AoS, 16-byte aligned:
/// `[-ah0, -ah1, -ah2, flag, -al0, -al1, -al2, 0]` with a_k = ah_k + al_k = Lkk + eps to ~u^2
/// (`crate::gaussian::layout::Prepared::diag`, `diag_lo`) and flag 1 where the backward solves
/// the Gaussian with [`solve_compensated`] (`Prepared::compensated`), else 0 (padding: 0).
pub const COMP_STRIDE: u32 = 8;
/// Offset of the flag within the compensation constants.
pub const COMP_FLAG: u32 = 3;
/// Raw per-Gaussian gradient sums per Gaussian (the packed gradient layout's 10 slots).
pub const GRAD_STRIDE: u32 = 10;
/// f32 exponent offset o = 126 - 87 log2(e): ex2(-d log2(e)/2 - o) is below 2^-126 (flushed)
/// exactly when d > 174.
pub const F32_EXP_OFFSET: f64 = 126.0 - 87.0 * std::f64::consts::LOG2_E;
/// The factor 2^o folded into the prepared weight and normalisation (f32).
pub fn f32_exp_scale() -> f64 {
    F32_EXP_OFFSET.exp2()
}

/// A float type the Gaussian kernels are generated for.
pub trait KFloat: Float + Num + Word {
    /// The Rust literal type of immediates.
    type Imm: Operand<Self> + Copy;
    /// Bytes per scalar.
    const BYTES: u32;
    /// Suffix of kernel names (`f32` / `f64`).
    const SUFFIX: &'static str;
    /// The distance kernel fuses multiply-adds (f32) or keeps the CPU's separately rounded
    /// operations (f64).
    const FUSED: bool;
    /// The backward solves flagged (badly conditioned) Gaussians with compensated arithmetic
    /// (f32; see `COMP_STRIDE`).
    const COMPENSATES: bool;
    /// `x` as an immediate of this type.
    fn imm(x: f64) -> Self::Imm;
    /// o, the exponent offset (0 for f64); `scaled::solve_scaled` starts its sum at it.
    const EXP2_OFFSET: f64;
    /// The backward's unguarded path requires |v'|^2 below this for every pair of the warp...
    const SAFE_T: f64;
    /// ...and every scaled constant at most this in magnitude (then s' and every product of a
    /// pair beyond the cutoff stay finite, so its zero weight makes its terms exactly 0).
    const SAFE_CONST: f64;
    /// `x * factor` rounded once to this type (f32: an f64 product).
    fn scale_const(b: &mut KernelBuilder, x: Reg<Self>, factor: f64) -> Reg<Self>;
    /// e' = 2^-t for the t of `scaled::solve_scaled` (0 beyond the cutoff; `super::exp`).
    fn exp2_neg(b: &mut KernelBuilder, t: Reg<Self>) -> Reg<Self>;
    /// e' = 2^-t with a kernel's exponential `exp` (f32: [`Self::exp2_neg`]; f64: `exp`'s kind,
    /// `super::exp_f64`).
    fn exp2_neg_in(b: &mut KernelBuilder, t: Reg<Self>, exp: &Exp2) -> Reg<Self>;
    /// The backward uses the unit-triangular per-pair form (`unit`) rather than the scaled one.
    const UNIT_BACKWARD: bool;
    /// The backward's unguarded body is taken for a point when the growth bound of its pairs
    /// (`unit::BackConsts::growth`: S (|x|_inf + M)) stays below this (far from overflow, so
    /// that a pair beyond the cutoff adds exactly 0 through its zero weight).
    const GROWTH_LIMIT: f64;
    /// `x * y` rounded once to this type (f32: an exact f64 product).
    fn mul_once(b: &mut KernelBuilder, x: Reg<Self>, y: Reg<Self>) -> Reg<Self>;
    /// `x^2 * factor` (f32: in f64, then rounded to f32).
    fn square_scaled(b: &mut KernelBuilder, x: Reg<Self>, factor: f64) -> Reg<Self>;
    /// The unit form's (w, y) of one component from the compensated solve's v, with `neg_hi`
    /// = -ah, `neg_lo` = -al and `inv` = 1/a: w = (ah + al) v and y = sigma^2 inv v (f32:
    /// computed in f64, each rounded once; f64 never compensates).
    fn comp_w_y(
        b: &mut KernelBuilder,
        v: Reg<Self>,
        neg_hi: Reg<Self>,
        neg_lo: Reg<Self>,
        inv: Reg<Self>,
    ) -> (Reg<Self>, Reg<Self>);
}

impl KFloat for F32 {
    type Imm = f32;
    const BYTES: u32 = 4;
    const SUFFIX: &'static str = "f32";
    const FUSED: bool = true;
    const COMPENSATES: bool = true;
    fn imm(x: f64) -> f32 {
        x as f32
    }
    const EXP2_OFFSET: f64 = F32_EXP_OFFSET;
    const SAFE_T: f64 = 1_099_511_627_776.0; // 2^40
    const SAFE_CONST: f64 = 1_048_576.0; // 2^20
    const UNIT_BACKWARD: bool = true;
    const GROWTH_LIMIT: f64 = 1.267_650_600_228_229_4e30; // 2^100
    fn scale_const(b: &mut KernelBuilder, x: Reg<F32>, factor: f64) -> Reg<F32> {
        let wide = b.cvt::<F64, F32>(x);
        let p = b.mul(wide, factor);
        b.cvt::<F32, F64>(p)
    }
    fn exp2_neg(b: &mut KernelBuilder, t: Reg<F32>) -> Reg<F32> {
        exp::exp2_neg_f32(b, t)
    }
    fn exp2_neg_in(b: &mut KernelBuilder, t: Reg<F32>, _exp: &Exp2) -> Reg<F32> {
        exp::exp2_neg_f32(b, t)
    }
    fn mul_once(b: &mut KernelBuilder, x: Reg<F32>, y: Reg<F32>) -> Reg<F32> {
        let xw = b.cvt::<F64, F32>(x);
        let yw = b.cvt::<F64, F32>(y);
        let p = b.mul(xw, yw);
        b.cvt::<F32, F64>(p)
    }
    fn square_scaled(b: &mut KernelBuilder, x: Reg<F32>, factor: f64) -> Reg<F32> {
        let xw = b.cvt::<F64, F32>(x);
        let sq = b.mul(xw, xw);
        let p = b.mul(sq, factor);
        b.cvt::<F32, F64>(p)
    }
    fn comp_w_y(
        b: &mut KernelBuilder,
        v: Reg<F32>,
        neg_hi: Reg<F32>,
        neg_lo: Reg<F32>,
        inv: Reg<F32>,
    ) -> (Reg<F32>, Reg<F32>) {
        let [vw, hw, lw, iw] = [v, neg_hi, neg_lo, inv].map(|x| b.cvt::<F64, F32>(x));
        let a = b.add(hw, lw);
        let nw = b.mul(a, vw);
        let w = b.neg(nw);
        let s = crate::kernels::gaussian::scaled::sigma();
        let vi = b.mul(vw, iw);
        let y = b.mul(vi, s * s);
        (b.cvt::<F32, F64>(w), b.cvt::<F32, F64>(y))
    }
}

impl KFloat for F64 {
    type Imm = f64;
    const BYTES: u32 = 8;
    const SUFFIX: &'static str = "f64";
    const FUSED: bool = false;
    const COMPENSATES: bool = false;
    fn imm(x: f64) -> f64 {
        x
    }
    const EXP2_OFFSET: f64 = 0.0;
    const SAFE_T: f64 = 1.606_938_044_258_990_3e60; // 2^200
    const SAFE_CONST: f64 = 1.267_650_600_228_229_4e30; // 2^100
    const UNIT_BACKWARD: bool = false;
    const GROWTH_LIMIT: f64 = 8.452_712_498_170_644e270; // 2^900
    fn scale_const(b: &mut KernelBuilder, x: Reg<F64>, factor: f64) -> Reg<F64> {
        b.mul(x, factor)
    }
    fn exp2_neg(b: &mut KernelBuilder, t: Reg<F64>) -> Reg<F64> {
        exp::exp2_neg_f64(b, t)
    }
    fn exp2_neg_in(b: &mut KernelBuilder, t: Reg<F64>, exp: &Exp2) -> Reg<F64> {
        exp.eval_f64(b, t)
    }
    fn mul_once(b: &mut KernelBuilder, x: Reg<F64>, y: Reg<F64>) -> Reg<F64> {
        b.mul(x, y)
    }
    fn square_scaled(b: &mut KernelBuilder, x: Reg<F64>, factor: f64) -> Reg<F64> {
        let sq = b.mul(x, x);
        b.mul(sq, factor)
    }
    fn comp_w_y(
        b: &mut KernelBuilder,
        v: Reg<F64>,
        neg_hi: Reg<F64>,
        neg_lo: Reg<F64>,
        inv: Reg<F64>,
    ) -> (Reg<F64>, Reg<F64>) {
        let a = b.add(neg_hi, neg_lo);
        let nw = b.mul(a, v);
        let s = crate::kernels::gaussian::scaled::sigma();
        let vi = b.mul(v, inv);
        (b.neg(nw), b.mul(vi, s * s))
    }
}

/// `a * x + c`: one fused operation (f32) or a rounded product then a rounded sum (f64).
pub fn mul_add<T: KFloat>(b: &mut KernelBuilder, a: Reg<T>, x: Reg<T>, c: Reg<T>) -> Reg<T> {
    if T::FUSED {
        b.fma(a, x, c)
    } else {
        let m = b.mul(a, x);
        b.add(c, m)
    }
}

/// One Gaussian's per-pair constants in registers.
#[derive(Clone, Copy)]
pub struct GaussRegs<T: KFloat> {
    /// Mean.
    pub mu: [Reg<T>; 3],
    /// -L10, -L20, -L21.
    pub neg_l: [Reg<T>; 3],
    /// Reciprocals of the guarded diagonal.
    pub inv: [Reg<T>; 3],
    /// w c 2^o.
    pub weight_norm: Reg<T>,
}

impl<T: KFloat> GaussRegs<T> {
    /// From the first 10 scalars of a prepared Gaussian.
    pub fn from_prepared(p: &[Reg<T>; 12]) -> Self {
        GaussRegs {
            mu: [p[0], p[1], p[2]],
            neg_l: [p[3], p[4], p[5]],
            inv: [p[6], p[7], p[8]],
            weight_norm: p[9],
        }
    }
}

/// Loads the 12 scalars of a prepared Gaussian at `addr` (16-byte aligned) with vector loads.
pub fn load_prepared<T: KFloat>(b: &mut KernelBuilder, space: Space, addr: Addr) -> [Reg<T>; 12] {
    let mut out = Vec::with_capacity(12);
    if T::BYTES == 4 {
        for k in 0..3 {
            out.extend(b.ld_v4::<T>(space, addr.off(16 * k)));
        }
    } else {
        for k in 0..6 {
            out.extend(b.ld_v2::<T>(space, addr.off(16 * k)));
        }
    }
    out.try_into()
        .unwrap_or_else(|_| unreachable!("12 scalars loaded"))
}

/// Stores 12 scalars at `addr` (16-byte aligned) with vector stores.
pub fn store_prepared<T: KFloat>(
    b: &mut KernelBuilder,
    space: Space,
    addr: Addr,
    v: &[Reg<T>; 12],
) {
    if T::BYTES == 4 {
        for k in 0..3 {
            b.st_v4(
                space,
                addr.off(16 * k as i64),
                [v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]],
            );
        }
    } else {
        for k in 0..6 {
            b.st_v2(space, addr.off(16 * k as i64), [v[2 * k], v[2 * k + 1]]);
        }
    }
}

/// Forward substitution L v = x - mu and d = |v|^2 (order of `crate::gaussian::pair::solve`).
pub fn solve<T: KFloat>(
    b: &mut KernelBuilder,
    g: &GaussRegs<T>,
    x: [Reg<T>; 3],
) -> ([Reg<T>; 3], Reg<T>) {
    let r0 = b.sub(x[0], g.mu[0]);
    let r1 = b.sub(x[1], g.mu[1]);
    let r2 = b.sub(x[2], g.mu[2]);
    let v0 = b.mul(r0, g.inv[0]);
    let t1 = mul_add(b, g.neg_l[0], v0, r1);
    let v1 = b.mul(t1, g.inv[1]);
    let t2 = mul_add(b, g.neg_l[1], v0, r2);
    let t2 = mul_add(b, g.neg_l[2], v1, t2);
    let v2 = b.mul(t2, g.inv[2]);
    let d0 = b.mul(v0, v0);
    let d = mul_add(b, v1, v1, d0);
    let d = mul_add(b, v2, v2, d);
    ([v0, v1, v2], d)
}

/// Knuth's two-sum: (s, e) with s = a + b rounded and s + e = a + b exactly.
fn two_sum<T: KFloat>(b: &mut KernelBuilder, x: Reg<T>, y: Reg<T>) -> (Reg<T>, Reg<T>) {
    let s = b.add(x, y);
    let bb = b.sub(s, x);
    let t = b.sub(s, bb);
    let e1 = b.sub(x, t);
    let e2 = b.sub(y, bb);
    let e = b.add(e1, e2);
    (s, e)
}

/// The compensated forward substitution of `crate::gaussian::pair::solve_compensated`, operation
/// for operation (its docs give the error analysis): r = x - mu exactly (two-sum), each row's
/// right-hand side as a two-term sum (products split with `fma`), each v_k as vh + vl through
/// the exact remainder th - a_k vh. `neg_a` = -ah, `neg_a_lo` = -al (see [`COMP_STRIDE`]).
/// Returns v rounded to one scalar per component.
pub fn solve_compensated<T: KFloat>(
    b: &mut KernelBuilder,
    g: &GaussRegs<T>,
    neg_a: [Reg<T>; 3],
    neg_a_lo: [Reg<T>; 3],
    x: [Reg<T>; 3],
) -> [Reg<T>; 3] {
    let r = [0, 1, 2].map(|k| {
        let nmu = b.neg(g.mu[k]);
        two_sum(b, x[k], nmu)
    });
    let divide = |b: &mut KernelBuilder, k: usize, th: Reg<T>, tl: Reg<T>| {
        let vh = b.mul(th, g.inv[k]);
        let rem = b.fma(neg_a[k], vh, th);
        let low = b.fma(neg_a_lo[k], vh, tl);
        let sum = b.add(rem, low);
        (vh, b.mul(sum, g.inv[k]))
    };
    let [nl10, nl20, nl21] = g.neg_l;
    let (v0h, v0l) = divide(b, 0, r[0].0, r[0].1);
    // Row 1: t = r1 - L10 v0.
    let p10 = b.mul(nl10, v0h);
    let np10 = b.neg(p10);
    let pe10 = b.fma(nl10, v0h, np10);
    let (t1h, t1e) = two_sum(b, r[1].0, p10);
    let a1 = b.add(t1e, pe10);
    let a2 = b.fma(nl10, v0l, r[1].1);
    let t1l = b.add(a1, a2);
    let (v1h, v1l) = divide(b, 1, t1h, t1l);
    // Row 2: t = r2 - L20 v0 - L21 v1.
    let p20 = b.mul(nl20, v0h);
    let np20 = b.neg(p20);
    let pe20 = b.fma(nl20, v0h, np20);
    let p21 = b.mul(nl21, v1h);
    let np21 = b.neg(p21);
    let pe21 = b.fma(nl21, v1h, np21);
    let (m, me) = two_sum(b, r[2].0, p20);
    let (t2h, t2e) = two_sum(b, m, p21);
    let small = b.fma(nl20, v0l, r[2].1);
    let small = b.fma(nl21, v1l, small);
    let e1 = b.add(me, t2e);
    let e2 = b.add(pe20, pe21);
    let e = b.add(e1, e2);
    let t2l = b.add(e, small);
    let (v2h, v2l) = divide(b, 2, t2h, t2l);
    [b.add(v0h, v0l), b.add(v1h, v1l), b.add(v2h, v2l)]
}

/// Byte address `base + (row * row_len + col) * elem_bytes` with 64-bit arithmetic.
pub fn addr2d(
    b: &mut KernelBuilder,
    base: Reg<U64>,
    row: Reg<U32>,
    row_len: Reg<U32>,
    col: Reg<U32>,
    elem_bytes: u32,
) -> Reg<U64> {
    let row_off = b.mul_wide(row, row_len);
    let col64 = b.cvt::<U64, U32>(col);
    let idx = b.add(row_off, col64);
    let bytes = b.mul(idx, u64::from(elem_bytes));
    b.add(base, bytes)
}
