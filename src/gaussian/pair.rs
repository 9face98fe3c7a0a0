//! Per-pair maths of the Gaussian field: one point against one Gaussian. These are the exact
//! operations, in this order, that a GPU kernel should reproduce (see the module docs of
//! [`crate::gaussian`] for the derivation of the gradients).
//!
//! With a_k = Lkk + eps and r = x - mu:
//! - forward substitution (L v = r):  v0 = r0/a0,  v1 = (r1 - L10 v0)/a1,  v2 = (r2 - L20 v0 - L21 v1)/a2
//! - squared Mahalanobis distance:    d = v0^2 + v1^2 + v2^2
//! - kernel:                          e = exp(-d/2), or 0 when d > cutoff (f32 174, f64 1416)
//! - back substitution (L^T s = v):   s2 = v2/a2,  s1 = (v1 - L21 s2)/a1,  s0 = (v0 - L10 s1 - L20 s2)/a0
//!
//! so s = L^{-T} L^{-1} r = Sigma^{-1} r. Divisions are multiplications by the precomputed 1/a_k.
//! In the backward of an f32 field, a badly conditioned Gaussian's live pairs take v from
//! [`solve_compensated`] instead (same maths, rounding errors of the forward substitution
//! compensated; see there), and e keeps the plain d.

use super::layout::Prepared;
use super::real::Real;

/// v = L^{-1} (x - mu) by forward substitution, and d = |v|^2 (squared Mahalanobis distance,
/// dimensionless).
#[inline(always)]
pub fn solve<T: Real>(g: &Prepared<T>, x: [T; 3]) -> ([T; 3], T) {
    let r0 = x[0] - g.mu[0];
    let r1 = x[1] - g.mu[1];
    let r2 = x[2] - g.mu[2];
    let v0 = r0 * g.inv_diag[0];
    let v1 = (r1 - g.l10 * v0) * g.inv_diag[1];
    let v2 = (r2 - g.l20 * v0 - g.l21 * v1) * g.inv_diag[2];
    ([v0, v1, v2], v0 * v0 + v1 * v1 + v2 * v2)
}

/// Knuth's two-sum: (s, e) with s = fl(a + b) and s + e = a + b exactly (no ordering needed).
#[inline(always)]
fn two_sum<T: Real>(a: T, b: T) -> (T, T) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// v of [`solve`] for an f32 field's badly conditioned Gaussians ([`Prepared::compensated`]),
/// accurate to about one rounding per component instead of up to ~1e3 u. (d needs no such care:
/// its error is not amplified, so the backward keeps the plain solve's d for e.)
///
/// Why: s = L^-T L^-1 r passes through up to three cancelling subtractions (r1 - L10 v0, row 2,
/// and the back substitution); an error in r, in the rounded diagonal or in v0 and v1 is
/// amplified by all of them (up to ~1e4 u in a component of s at kappa(L) ~ 1e2..1e4), while an
/// error in the result v only by the back substitution's (~1e2 u). So this solve keeps every
/// quantity feeding a cancellation exact to first order:
/// - r = x - mu as rh + rl exactly (two-sum);
/// - each row's right-hand side t_k = r_k - sum_c L_kc v_c as th + tl: products split exactly
///   with a fused multiply-add (p + pe = L v), sums with two-sum, the small terms' products
///   plainly (their rounding is second order);
/// - v_k = vh + vl: vh = th / a_k via the rounded reciprocal, and the exact remainder
///   th - a_k vh (one fused multiply-add, exact to first order) plus the low parts corrects it:
///   vl = (th - ah vh + tl - al vh) / a_k, with a_k = ah + al (`diag`, `diag_lo`) to ~u^2.
///
/// The operations map one to one onto a GPU's `add/sub/mul/fma.rn`, so a kernel following this
/// order gets the same bits.
#[inline(always)]
pub fn solve_compensated<T: Real>(g: &Prepared<T>, x: [T; 3]) -> [T; 3] {
    let r = [0, 1, 2].map(|k| two_sum(x[k], -g.mu[k]));
    let inv = g.inv_diag;
    let (ah, al) = (g.diag, g.diag_lo);
    let (nl10, nl20, nl21) = (-g.l10, -g.l20, -g.l21);
    // v_k = (th + tl) / a_k as vh + vl.
    let divide = |k: usize, th: T, tl: T| {
        let vh = th * inv[k];
        let rem = (-ah[k]).mul_add(vh, th);
        let low = (-al[k]).mul_add(vh, tl);
        (vh, (rem + low) * inv[k])
    };
    let (v0h, v0l) = divide(0, r[0].0, r[0].1);
    // Row 1: t = r1 - L10 v0.
    let p10 = nl10 * v0h;
    let pe10 = nl10.mul_add(v0h, -p10);
    let (t1h, t1e) = two_sum(r[1].0, p10);
    let t1l = (t1e + pe10) + nl10.mul_add(v0l, r[1].1);
    let (v1h, v1l) = divide(1, t1h, t1l);
    // Row 2: t = r2 - L20 v0 - L21 v1.
    let p20 = nl20 * v0h;
    let pe20 = nl20.mul_add(v0h, -p20);
    let p21 = nl21 * v1h;
    let pe21 = nl21.mul_add(v1h, -p21);
    let (m, me) = two_sum(r[2].0, p20);
    let (t2h, t2e) = two_sum(m, p21);
    let small = nl21.mul_add(v1l, nl20.mul_add(v0l, r[2].1));
    let t2l = ((me + t2e) + (pe20 + pe21)) + small;
    let (v2h, v2l) = divide(2, t2h, t2l);
    [v0h + v0l, v1h + v1l, v2h + v2l]
}

/// s = L^{-T} v by back substitution (so s = Sigma^{-1} (x - mu) when v comes from [`solve`]).
#[inline(always)]
pub fn back_solve<T: Real>(g: &Prepared<T>, v: [T; 3]) -> [T; 3] {
    let s2 = v[2] * g.inv_diag[2];
    let s1 = (v[1] - g.l21 * s2) * g.inv_diag[1];
    let s0 = (v[0] - g.l10 * s1 - g.l20 * s2) * g.inv_diag[0];
    [s0, s1, s2]
}

/// e = exp(-d / 2), flushed to exactly 0 for d > [`Real::EXP_CUTOFF_D`] (where it would be
/// subnormal): far pairs skip the call, and no subnormal arithmetic follows.
#[inline(always)]
pub fn kernel<T: Real>(d: T) -> T {
    if d > T::EXP_CUTOFF_D {
        return T::ZERO;
    }
    (d * T::from_f64(-0.5)).exp()
}

/// Adds one pair's contribution to the per-Gaussian gradient accumulator `acc` (packed Gaussian
/// layout: mu 0..3, L 3..9, w 9) and returns the contribution to the point's gradient.
///
/// `grad_value` is dLoss/df at this point. With h = grad_value * norm * e and q = -w h:
/// dLoss/dw += h; dLoss/dx += q s; dLoss/dmu -= q s; dLoss/dLab -= q s_a v_b (a >= b).
/// The normalisation's share of dLoss/dLkk is added once per Gaussian by the caller.
#[inline(always)]
pub fn accumulate_backward<T: Real>(
    g: &Prepared<T>,
    x: [T; 3],
    grad_value: T,
    acc: &mut [T; 10],
) -> [T; 3] {
    let (v, d) = solve(g, x);
    let e = kernel(d);
    // A pair whose kernel underflowed contributes exactly zero; skipping it also keeps an infinite
    // s (far point, tiny diagonal) from turning 0 * inf into NaN.
    if e == T::ZERO {
        return [T::ZERO; 3];
    }
    // Only live pairs (d <= cutoff, so no overflow in the two-term arithmetic) take the
    // compensated v; e keeps the plain d, whose error is not amplified (see `solve_compensated`).
    let v = if g.compensated {
        solve_compensated(g, x)
    } else {
        v
    };
    let h = grad_value * g.norm * e;
    let q = -(g.weight * h);
    let s = back_solve(g, v);
    let qs = [q * s[0], q * s[1], q * s[2]];
    acc[0] -= qs[0];
    acc[1] -= qs[1];
    acc[2] -= qs[2];
    acc[3] -= qs[0] * v[0];
    acc[4] -= qs[1] * v[0];
    acc[5] -= qs[1] * v[1];
    acc[6] -= qs[2] * v[0];
    acc[7] -= qs[2] * v[1];
    acc[8] -= qs[2] * v[2];
    acc[9] += h;
    qs
}

/// Adds the normalisation's share of dLoss/dLkk to a Gaussian's accumulated gradient:
/// d(norm)/d a_k = -norm / a_k, so dLoss/dLkk += -w * (dLoss/dw) / a_k.
#[inline(always)]
pub fn add_normalisation_grad<T: Real>(g: &Prepared<T>, acc: &mut [T; 10]) {
    let wg = g.weight * acc[9];
    acc[3] -= wg * g.inv_diag[0];
    acc[5] -= wg * g.inv_diag[1];
    acc[8] -= wg * g.inv_diag[2];
}
