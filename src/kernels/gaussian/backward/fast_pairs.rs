//! The expanded backward's per-pair sums of one point (unguarded and guarded) and the
//! per-Gaussian transform of its sums at the end (see the module docs of [`super::fast`]).

use super::fast::FastOwned;
use crate::kernels::gaussian::common::*;
use crate::kernels::gaussian::scaled::{back_solve_scaled, sigma, solve_scaled, PairConsts};
use crate::ptx::*;

/// What the per-pair sums of one point read.
pub(super) struct FastPoint<'a> {
    pub(super) own: &'a [FastOwned],
    /// x - o (the expanded form's input).
    pub(super) xt: [Reg<F32>; 3],
    /// x as loaded (guarded body: the subtract and compensated forms of flagged Gaussians).
    pub(super) x: Option<[Reg<F32>; 3]>,
    /// g / sigma^2 of the point.
    pub(super) g: Reg<F32>,
    /// The point's terms summed over this thread's Gaussians.
    pub(super) pc: [Reg<F32>; 3],
    pub(super) prep: Reg<U64>,
    pub(super) comp: Reg<U64>,
}

/// The per-pair body a batch of points takes (see the module docs of [`super::fast`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Body {
    /// v' = M x~ - b, no selects.
    Fast,
    /// v' = M (x - mu), no selects.
    Sub,
    /// Selects, and flagged Gaussians in the subtract and compensated forms.
    Guarded,
}

/// v' = M (x - mu) and t = o + |v'|^2.
fn subtract(b: &mut KernelBuilder, o: &FastOwned, x: [Reg<F32>; 3]) -> ([Reg<F32>; 3], Reg<F32>) {
    let [m00, m10, m11, m20, m21, m22] = o.m;
    let r = [0, 1, 2].map(|k| b.sub(x[k], o.mu[k]));
    let v0 = b.mul(m00, r[0]);
    let s1 = b.mul(m11, r[1]);
    let v1 = b.fma(m10, r[0], s1);
    let s2 = b.mul(m22, r[2]);
    let s2 = b.fma(m21, r[1], s2);
    let v2 = b.fma(m20, r[0], s2);
    let t = b.fma(v0, v0, F32::imm(F32::EXP2_OFFSET));
    let t = b.fma(v1, v1, t);
    let t = b.fma(v2, v2, t);
    ([v0, v1, v2], t)
}

/// v' = M x~ - b (the order of `forward_fast`, so t is the expanded forward's) and t = o +
/// |v'|^2.
fn expanded(b: &mut KernelBuilder, o: &FastOwned, xt: [Reg<F32>; 3]) -> ([Reg<F32>; 3], Reg<F32>) {
    let [m00, m10, m11, m20, m21, m22] = o.m;
    let [x0, x1, x2] = xt;
    let v0 = b.fma(m00, x0, o.nb[0]);
    let s1 = b.fma(m11, x1, o.nb[1]);
    let v1 = b.fma(m10, x0, s1);
    let s2 = b.fma(m22, x2, o.nb[2]);
    let s2 = b.fma(m21, x1, s2);
    let v2 = b.fma(m20, x0, s2);
    let t = b.fma(v0, v0, F32::imm(F32::EXP2_OFFSET));
    let t = b.fma(v1, v1, t);
    let t = b.fma(v2, v2, t);
    ([v0, v1, v2], t)
}

/// The scaled constants of Gaussian `j` from the prepared layout (global memory).
fn scaled_consts(b: &mut KernelBuilder, prep: Reg<U64>, j: Reg<U32>) -> PairConsts<F32> {
    let src = b.index_addr(prep, j, PREP_STRIDE * 4);
    let pr = load_prepared::<F32>(b, Space::GlobalNc, src.into());
    PairConsts::from_prepared(b, &pr)
}

/// Adds one point's pairs with this thread's Gaussians to the Gaussians' sums (S0 = sum ge, S1 =
/// sum ge v', S2 = sum ge v' v'^T) and to `ctx.pc` (sum (w c 2^o) ge s' with s' = M^T v').
///
/// Unguarded (`ctx.x` None): every pair in the expanded form, no selects (the caller has made
/// sure that v' and the point-term constants are finite, so a pair beyond the cutoff adds
/// exactly 0). Guarded: a flagged Gaussian (its record's flag or its compensation flag) takes v'
/// and t from the subtract form (branch), v' of its live pairs from the compensated solve when
/// compensated, and its point term from the scaled back substitution; a pair whose e' is not
/// positive (beyond the cutoff, or NaN from an overflowing v') has e' and v' replaced by 0.
pub(super) fn fast_pair_sums(b: &mut KernelBuilder, ctx: &FastPoint<'_>, body: Body, use_n: bool) {
    let zero = F32::imm(0.0);
    let xs = || {
        ctx.x
            .unwrap_or_else(|| unreachable!("x is loaded for the Sub and Guarded bodies"))
    };
    for o in ctx.own {
        let (v, e) = match body {
            Body::Fast => {
                let (v, t) = expanded(b, o, ctx.xt);
                (v, F32::exp2_neg(b, t))
            }
            Body::Sub => {
                let (v, t) = subtract(b, o, xs());
                (v, F32::exp2_neg(b, t))
            }
            Body::Guarded => {
                let x = xs();
                let (v, t) = expanded(b, o, ctx.xt);
                let t_out = b.mov(t);
                let v_out = v.map(|c| b.mov(c));
                b.if_then(o.special, |b| {
                    let g = scaled_consts(b, ctx.prep, o.j);
                    let (vs, ts) = solve_scaled(b, &g, x);
                    b.mov_to(t_out, ts);
                    for k in 0..3 {
                        b.mov_to(v_out[k], vs[k]);
                    }
                });
                let e = F32::exp2_neg(b, t_out);
                let live = b.setp(Cmp::Gt, e, zero);
                let go = b.and(o.comp_on, live);
                b.if_then(go, |b| {
                    let src = b.index_addr(ctx.prep, o.j, PREP_STRIDE * 4);
                    let pr = load_prepared::<F32>(b, Space::GlobalNc, src.into());
                    let plain = GaussRegs::from_prepared(&pr);
                    let at = b.index_addr(ctx.comp, o.j, COMP_STRIDE * 4);
                    let lo = b.ld_v4::<F32>(Space::GlobalNc, Addr::from(at));
                    let hi = b.ld_v4::<F32>(Space::GlobalNc, Addr::from(at).off(16));
                    let vc = solve_compensated(
                        b,
                        &plain,
                        [lo[0], lo[1], lo[2]],
                        [hi[0], hi[1], hi[2]],
                        x,
                    );
                    for k in 0..3 {
                        let vs = F32::scale_const(b, vc[k], sigma());
                        b.mov_to(v_out[k], vs);
                    }
                });
                (v_out.map(|c| b.selp(c, zero, live)), b.selp(e, zero, live))
            }
        };
        let ge = b.mul(ctx.g, e);
        let gv = v.map(|c| b.mul(ge, c));
        let s = &o.sums;
        let t0 = b.add(s[0], ge);
        b.mov_to(s[0], t0);
        for k in 0..3 {
            let t = b.add(s[1 + k], gv[k]);
            b.mov_to(s[1 + k], t);
        }
        for (slot, (ra, cb)) in S2_SLOTS.into_iter().enumerate() {
            let t = b.fma(gv[ra], v[cb], s[4 + slot]);
            b.mov_to(s[4 + slot], t);
        }
        let pc = ctx.pc;
        let plain_term = |b: &mut KernelBuilder| {
            if use_n {
                // P += N gv with N = (w c 2^o) M^T (upper triangular).
                let [n00, n10, n20, n11, n21, n22] = o.n;
                let p0 = b.fma(n00, gv[0], pc[0]);
                let p0 = b.fma(n10, gv[1], p0);
                let p0 = b.fma(n20, gv[2], p0);
                let p1 = b.fma(n11, gv[1], pc[1]);
                let p1 = b.fma(n21, gv[2], p1);
                let p2 = b.fma(n22, gv[2], pc[2]);
                for (d, v) in pc.iter().zip([p0, p1, p2]) {
                    b.mov_to(*d, v);
                }
            } else {
                // P += (w c 2^o) M^T gv.
                let [m00, m10, m11, m20, m21, m22] = o.m;
                let s0 = b.mul(m00, gv[0]);
                let s0 = b.fma(m10, gv[1], s0);
                let s0 = b.fma(m20, gv[2], s0);
                let s1 = b.mul(m11, gv[1]);
                let s1 = b.fma(m21, gv[2], s1);
                let s2 = b.mul(m22, gv[2]);
                for (d, v) in pc.iter().zip([s0, s1, s2]) {
                    let t = b.fma(o.wn, v, *d);
                    b.mov_to(*d, t);
                }
            }
        };
        match body {
            Body::Fast | Body::Sub => plain_term(b),
            Body::Guarded => {
                let prep = ctx.prep;
                b.if_else(
                    o.special,
                    |b| {
                        let g = scaled_consts(b, prep, o.j);
                        let sp = back_solve_scaled(b, &g, gv);
                        for (d, v) in pc.iter().zip(sp) {
                            let t = b.fma(o.wn, v, *d);
                            b.mov_to(*d, t);
                        }
                    },
                    plain_term,
                );
            }
        }
    }
}

/// (c, b) of the sums ge v'_c v'_b in S2 (slots 4..10 of the sums), the lower triangle row by
/// row.
pub(super) const S2_SLOTS: [(usize, usize); 6] = [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)];

/// Index into S2_SLOTS of the symmetric entry (c, b).
fn s2_index(c: usize, bb: usize) -> usize {
    let (r, k) = if c >= bb { (c, bb) } else { (bb, c) };
    S2_SLOTS
        .iter()
        .position(|&p| p == (r, k))
        .unwrap_or_else(|| unreachable!("every lower-triangle entry has a slot"))
}

/// The backward's 10 output sums of one Gaussian from its expanded sums (in f64, each rounded
/// once): [sum g e' s (3), sum g e' s_a v_b for (a, b) = 00 10 11 20 21 22 (6), sum g e'], with
/// s' = M^T v' = sigma^2 s, v' = sigma v and g = sigma^2 g': slot a is (M^T S1)_a, slot (a, b)
/// (M^T S2)_ab / sigma, slot 9 sigma^2 S0. M is the exact operator of the subtract form's
/// constants (`pr`, the prepared layout: sigma / a_k and -L_ab), built in f64 as
/// `crate::gaussian::gpu::fast::record` builds it before rounding.
pub(super) fn unscale(
    b: &mut KernelBuilder,
    pr: &[Reg<F32>; 12],
    sums: &[Reg<F32>; GRAD_STRIDE as usize],
) -> [Reg<F32>; GRAD_STRIDE as usize] {
    let m = exact_m(b, pr);
    let sw: Vec<Reg<F64>> = sums.iter().map(|&x| b.cvt::<F64, F32>(x)).collect();
    unscale_wide(b, &m, &sw)
}

/// The subtract form's operator M in f64 (lower triangular, `m[row][col]`), from the prepared
/// constants `pr` as `crate::gaussian::gpu::fast::record` builds it before rounding.
pub(super) type ExactM = [[Option<Reg<F64>>; 3]; 3];

/// [`ExactM`] of the prepared constants `pr`.
pub(super) fn exact_m(b: &mut KernelBuilder, pr: &[Reg<F32>; 12]) -> ExactM {
    let s = sigma();
    let w = |b: &mut KernelBuilder, x: Reg<F32>| b.cvt::<F64, F32>(x);
    let [n10, n20, n21] = [pr[3], pr[4], pr[5]].map(|x| w(b, x));
    let [i0, i1, i2] = [pr[6], pr[7], pr[8]].map(|x| w(b, x));
    let si0 = b.mul(i0, s);
    let si1 = b.mul(i1, s);
    let si2 = b.mul(i2, s);
    // M10 = s i1 n10 i0, M21 = s i2 n21 i1, M20 = s i2 (n20 i0 + n21 i1 n10 i0).
    let a = b.mul(si1, n10);
    let m10 = b.mul(a, i0);
    let a = b.mul(si2, n21);
    let m21 = b.mul(a, i1);
    let c = b.mul(n21, i1);
    let c = b.mul(c, n10);
    let c = b.mul(c, i0);
    let d = b.mul(n20, i0);
    let d = b.add(d, c);
    let m20 = b.mul(si2, d);
    // m[row][col], lower triangular.
    [
        [Some(si0), None, None],
        [Some(m10), Some(si1), None],
        [Some(m20), Some(m21), Some(si2)],
    ]
}

/// [`unscale`] of the expanded sums `sw` given in f64 (S0, S1 (3), S2 (6)), with the operator
/// `m` of [`exact_m`].
pub(super) fn unscale_wide(
    b: &mut KernelBuilder,
    m: &ExactM,
    sw: &[Reg<F64>],
) -> [Reg<F32>; GRAD_STRIDE as usize] {
    let s = sigma();
    // (M^T y)_a = sum_{c >= a} M_ca y_c for a y given per c.
    let mt = |b: &mut KernelBuilder, a: usize, y: &dyn Fn(usize) -> Reg<F64>| {
        let mut acc = b.mul(m[a][a].unwrap_or_else(|| unreachable!("diagonal")), y(a));
        for (c, row) in m.iter().enumerate().skip(a + 1) {
            let mc = row[a].unwrap_or_else(|| unreachable!("lower triangle"));
            acc = b.fma(mc, y(c), acc);
        }
        acc
    };
    let mut out = Vec::with_capacity(GRAD_STRIDE as usize);
    for a in 0..3 {
        let v = mt(b, a, &|c| sw[1 + c]);
        out.push(b.cvt::<F32, F64>(v));
    }
    for (ra, cb) in S2_SLOTS {
        let v = mt(b, ra, &|c| sw[4 + s2_index(c, cb)]);
        let v = b.mul(v, 1.0 / s);
        out.push(b.cvt::<F32, F64>(v));
    }
    let v = b.mul(sw[0], s * s);
    out.push(b.cvt::<F32, F64>(v));
    out.try_into()
        .unwrap_or_else(|_| unreachable!("10 output sums"))
}
