//! The backward's per-pair maths in the unit-triangular form: the scaled factor of
//! `super::scaled` (L' = L / sigma) written as L' = U D' with U unit lower triangular (U_ab =
//! L_ab / a_b) and D' = diag(a_k / sigma). Per pair (r = x - mu):
//! - w = U^-1 r: w0 = r0, w1 = r1 - U10 w0, w2 = r2 - U20 w0 - U21 w1 (three multiply-adds);
//! - y = D'^-2 w = w (sigma / a)^2 (three products), so that t = o + sum_k w_k y_k = o + |v'|^2
//!   (three multiply-adds; v' = D'^-1 w = sigma v as in `super::scaled`);
//! - s' = U^-T y = L'^-T v' = sigma^2 s: s2 = y2, s1 = y1 - U21 s2, s0 = y0 - U10 s1 - U20 s2
//!   (three multiply-adds).
//!
//! Against `super::scaled` (v' then s' = L'^-T v') this saves the three products of the back
//! substitution: 15 operations from r to (w, y, t, s') instead of 18. The per-Gaussian sums
//! that need v'_b take w_b instead and are multiplied by 1 / a_b once per Gaussian at the end
//! (v_b = w_b / a_b). Constants per Gaussian ([`UnitConsts`]): mu, -U10 -U20 -U21, (sigma /
//! a_k)^2, w c 2^o, each rounded once from the prepared layout (an f64 product in f32).

use super::common::*;
use super::scaled::{back_solve_scaled, sigma, solve_scaled, PairConsts};
use crate::ptx::*;

/// One Gaussian's unit-form constants in registers.
#[derive(Clone, Copy)]
pub struct UnitConsts<T: KFloat> {
    /// Mean.
    pub mu: [Reg<T>; 3],
    /// -U10 = -L10 / a0, -U20 = -L20 / a0, -U21 = -L21 / a1.
    pub neg_u: [Reg<T>; 3],
    /// (sigma / a_k)^2.
    pub ik2: [Reg<T>; 3],
    /// w c 2^o.
    pub weight_norm: Reg<T>,
}

impl<T: KFloat> UnitConsts<T> {
    /// From the 12 scalars of a prepared Gaussian (`common`'s layout: -L at 3..6, 1/a at 6..9).
    pub fn from_prepared(b: &mut KernelBuilder, p: &[Reg<T>; 12]) -> Self {
        let s = sigma();
        UnitConsts {
            mu: [p[0], p[1], p[2]],
            neg_u: [(3usize, 6usize), (4, 6), (5, 7)].map(|(l, i)| T::mul_once(b, p[l], p[i])),
            ik2: [6usize, 7, 8].map(|k| T::square_scaled(b, p[k], s * s)),
            weight_norm: p[9],
        }
    }

    /// Whether the unguarded body is safe for this Gaussian: |U_ab| <= `T::SAFE_CONST` and
    /// (sigma / a_k)^2 in [1 / `T::SAFE_T`, `T::SAFE_T`], or every constant 0 (a padding
    /// Gaussian: w = r, y = s' = 0). Then t < `T::SAFE_T` bounds |w_k|^2 <= SAFE_T^2 and
    /// |y_k| <= SAFE_T, so w, y and s' stay finite and a pair beyond the cutoff adds exactly 0.
    pub fn bounded(&self, b: &mut KernelBuilder) -> Reg<Pred> {
        let mut m_u = b.abs(self.neg_u[0]);
        for x in [self.neg_u[1], self.neg_u[2]] {
            let a = b.abs(x);
            m_u = b.max(m_u, a);
        }
        let mut hi = self.ik2[0];
        let mut lo = self.ik2[0];
        for x in [self.ik2[1], self.ik2[2]] {
            hi = b.max(hi, x);
            lo = b.min(lo, x);
        }
        let u_ok = b.setp(Cmp::Le, m_u, T::imm(T::SAFE_CONST));
        let hi_ok = b.setp(Cmp::Le, hi, T::imm(T::SAFE_T));
        let lo_ok = b.setp(Cmp::Ge, lo, T::imm(1.0 / T::SAFE_T));
        let any = b.max(m_u, hi);
        let pad = b.setp(Cmp::Eq, any, T::imm(0.0));
        let lo_ok = b.or(lo_ok, pad);
        let ok = b.and(u_ok, hi_ok);
        b.and(ok, lo_ok)
    }
}

/// w = U^-1 (x - mu), y = w (sigma / a)^2 and t = o + sum w_k y_k (see the module docs).
pub fn solve_unit<T: KFloat>(
    b: &mut KernelBuilder,
    g: &UnitConsts<T>,
    x: [Reg<T>; 3],
) -> ([Reg<T>; 3], [Reg<T>; 3], Reg<T>) {
    let w0 = b.sub(x[0], g.mu[0]);
    let r1 = b.sub(x[1], g.mu[1]);
    let r2 = b.sub(x[2], g.mu[2]);
    let w1 = b.fma(g.neg_u[0], w0, r1);
    let t2 = b.fma(g.neg_u[1], w0, r2);
    let w2 = b.fma(g.neg_u[2], w1, t2);
    let w = [w0, w1, w2];
    let y = [0, 1, 2].map(|k| b.mul(w[k], g.ik2[k]));
    let t = b.fma(w0, y[0], T::imm(T::EXP2_OFFSET));
    let t = b.fma(w1, y[1], t);
    let t = b.fma(w2, y[2], t);
    (w, y, t)
}

/// s' = U^-T y (= sigma^2 s).
pub fn back_solve_unit<T: KFloat>(
    b: &mut KernelBuilder,
    g: &UnitConsts<T>,
    y: [Reg<T>; 3],
) -> [Reg<T>; 3] {
    let s2 = y[2];
    let s1 = b.fma(g.neg_u[2], s2, y[1]);
    let t0 = b.fma(g.neg_u[1], s2, y[0]);
    let s0 = b.fma(g.neg_u[0], s1, t0);
    [s0, s1, s2]
}

/// The backward's per-Gaussian constants in either per-pair form: unit-triangular (this module)
/// or scaled (`super::scaled`: w = y = v', s' = L'^-T v'; the f64 kernel keeps it, whose errors
/// on badly conditioned Gaussians are the smaller of the two in the tests).
#[derive(Clone, Copy)]
pub enum BackConsts<T: KFloat> {
    /// Unit-triangular form.
    Unit(UnitConsts<T>),
    /// Scaled form.
    Scaled(PairConsts<T>),
}

impl<T: KFloat> BackConsts<T> {
    /// From the 12 scalars of a prepared Gaussian, in `T`'s form (`KFloat::UNIT_BACKWARD`).
    pub fn from_prepared(b: &mut KernelBuilder, p: &[Reg<T>; 12]) -> Self {
        Self::from_prepared_form(b, p, T::UNIT_BACKWARD)
    }

    /// As [`Self::from_prepared`] in the unit-triangular form when `unit`, else the scaled one.
    pub fn from_prepared_form(b: &mut KernelBuilder, p: &[Reg<T>; 12], unit: bool) -> Self {
        if unit {
            BackConsts::Unit(UnitConsts::from_prepared(b, p))
        } else {
            BackConsts::Scaled(PairConsts::from_prepared(b, p))
        }
    }

    /// (S, M): every value the per-pair maths forms from r (w, y, s' or v', s'; t aside) is at
    /// most S |r|_inf in magnitude, and |mu_k| <= M. Unit form: |w| <= (1 + c)^2 |r|, |y| <= h
    /// |w|, |s'| <= (1 + c)^2 |y| with c = max |U_ab| and h = max((sigma / a_k)^2, 1), so S = h
    /// (1 + c)^4; scaled form: |v'| <= a (1 + l a)^2 |r| and |s'| <= a (1 + l a)^2 |v'| with a =
    /// max(sigma / a_k, 1) and l = max |L'_ab|, so S = a^2 (1 + l a)^4.
    pub fn growth(&self, b: &mut KernelBuilder) -> (Reg<T>, Reg<T>) {
        let max_abs = |b: &mut KernelBuilder, v: [Reg<T>; 3]| {
            let a0 = b.abs(v[0]);
            let a1 = b.abs(v[1]);
            let a2 = b.abs(v[2]);
            let m = b.max(a0, a1);
            b.max(m, a2)
        };
        let (s, mu) = match self {
            BackConsts::Unit(g) => {
                let c = max_abs(b, g.neg_u);
                let h = max_abs(b, g.ik2);
                let h = b.max(h, T::imm(1.0));
                let c1 = b.add(c, T::imm(1.0));
                let c2 = b.mul(c1, c1);
                let c4 = b.mul(c2, c2);
                (b.mul(h, c4), g.mu)
            }
            BackConsts::Scaled(g) => {
                let a = max_abs(b, g.inv);
                let a = b.max(a, T::imm(1.0));
                let l = max_abs(b, g.neg_l);
                let q = b.fma(l, a, T::imm(1.0));
                let q2 = b.mul(q, q);
                let q4 = b.mul(q2, q2);
                let a2 = b.mul(a, a);
                (b.mul(a2, q4), g.mu)
            }
        };
        (s, max_abs(b, mu))
    }

    /// Whether the unguarded body is safe for this Gaussian (see the forms' `bounded`).
    pub fn bounded(&self, b: &mut KernelBuilder) -> Reg<Pred> {
        match self {
            BackConsts::Unit(g) => g.bounded(b),
            BackConsts::Scaled(g) => g.bounded(b, T::SAFE_CONST),
        }
    }

    /// w c 2^o.
    pub fn weight_norm(&self) -> Reg<T> {
        match self {
            BackConsts::Unit(g) => g.weight_norm,
            BackConsts::Scaled(g) => g.weight_norm,
        }
    }

    /// (w, y, t): the vector the per-Gaussian sums pair with s' (w, or v'), the input of
    /// [`Self::back_solve`] (y, or v') and the negated exponent t.
    pub fn solve(
        &self,
        b: &mut KernelBuilder,
        x: [Reg<T>; 3],
    ) -> ([Reg<T>; 3], [Reg<T>; 3], Reg<T>) {
        match self {
            BackConsts::Unit(g) => solve_unit(b, g, x),
            BackConsts::Scaled(g) => {
                let (v, t) = solve_scaled(b, g, x);
                (v, v, t)
            }
        }
    }

    /// s' = sigma^2 s from [`Self::solve`]'s y.
    pub fn back_solve(&self, b: &mut KernelBuilder, y: [Reg<T>; 3]) -> [Reg<T>; 3] {
        match self {
            BackConsts::Unit(g) => back_solve_unit(b, g, y),
            BackConsts::Scaled(g) => back_solve_scaled(b, g, y),
        }
    }

    /// Sum `acc` of gs_a w_b (column `b_col`) turned into sum gs_a v_b: times 1/a_b (`inv`, the
    /// prepared reciprocal) in the unit form, times 1/sigma in the scaled one (rounded once).
    pub fn unscale_w(
        &self,
        b: &mut KernelBuilder,
        acc: Reg<T>,
        inv: &[Reg<T>; 3],
        b_col: usize,
    ) -> Reg<T> {
        match self {
            BackConsts::Unit(_) => T::mul_once(b, acc, inv[b_col]),
            BackConsts::Scaled(_) => T::scale_const(b, acc, 1.0 / sigma()),
        }
    }

    /// (w, y) of a pair from the compensated solve's unscaled v (`neg_hi` = -ah, `neg_lo` =
    /// -al, `inv` = 1/a of each component).
    pub fn compensated_w_y(
        &self,
        b: &mut KernelBuilder,
        v: [Reg<T>; 3],
        neg_hi: [Reg<T>; 3],
        neg_lo: [Reg<T>; 3],
        inv: [Reg<T>; 3],
    ) -> ([Reg<T>; 3], [Reg<T>; 3]) {
        match self {
            BackConsts::Unit(_) => {
                let wy = [0, 1, 2].map(|k| T::comp_w_y(b, v[k], neg_hi[k], neg_lo[k], inv[k]));
                (wy.map(|p| p.0), wy.map(|p| p.1))
            }
            BackConsts::Scaled(_) => {
                let vs = v.map(|vk| b.mul(vk, T::imm(sigma())));
                (vs, vs)
            }
        }
    }
}
