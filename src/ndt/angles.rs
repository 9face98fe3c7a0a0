//! Per-pose terms of the point Jacobian and Hessian (Magnusson 2009, eqs. 6.17–6.21; PCL's
//! `computeAngleDerivatives`), computed once per pose and applied to every point.
//!
//! For `x' = R(a, b, c) x + t` with `R = Rx(a) Ry(b) Rz(c)`:
//! - `∂x'/∂(x, y, z)` is the identity;
//! - `∂x'/∂a = (Rx' Ry Rz) x`, `∂x'/∂b = (Rx Ry' Rz) x`, `∂x'/∂c = (Rx Ry Rz') x`;
//! - second derivatives are zero unless both parameters are angles, e.g.
//!   `∂²x'/∂a∂b = (Rx' Ry' Rz) x`, `∂²x'/∂a² = (Rx'' Ry Rz) x`.
//!
//! Here the nine 3×3 matrices (3 first derivatives, 6 distinct second derivatives of `R`) are the
//! per-pose terms; a point's Jacobian and Hessian columns are those matrices times the point.

use crate::ndt::pose::Pose6;

/// Row-major 3×3 matrix.
pub type M3 = [f64; 9];

/// Rotation, translation and angular derivative matrices of one pose.
#[derive(Clone, Copy, Debug)]
pub struct AngleTerms {
    /// `R`, row-major.
    pub rotation: M3,
    /// `t` in metres.
    pub translation: [f64; 3],
    /// `∂R/∂a`, `∂R/∂b`, `∂R/∂c`.
    pub jacobian: [M3; 3],
    /// `∂²R/∂a²`, `∂²R/∂a∂b`, `∂²R/∂a∂c`, `∂²R/∂b²`, `∂²R/∂b∂c`, `∂²R/∂c²` (see [`HESSIAN_PAIRS`]).
    pub hessian: [M3; 6],
}

/// The angle pairs (0 = a, 1 = b, 2 = c) of [`AngleTerms::hessian`], in order.
pub const HESSIAN_PAIRS: [(usize, usize); 6] = crate::kernels::ndt::UPPER_PAIRS;

fn mul(a: &M3, b: &M3) -> M3 {
    let mut c = [0f64; 9];
    for r in 0..3 {
        for k in 0..3 {
            c[3 * r + k] = a[3 * r] * b[k] + a[3 * r + 1] * b[3 + k] + a[3 * r + 2] * b[6 + k];
        }
    }
    c
}

/// `m · v`.
#[inline(always)]
pub fn apply(m: &M3, v: [f64; 3]) -> [f64; 3] {
    [
        m[0] * v[0] + m[1] * v[1] + m[2] * v[2],
        m[3] * v[0] + m[4] * v[1] + m[5] * v[2],
        m[6] * v[0] + m[7] * v[1] + m[8] * v[2],
    ]
}

impl AngleTerms {
    /// The terms of pose `p`.
    pub fn new(p: &Pose6) -> AngleTerms {
        let (sa, ca) = p[3].sin_cos();
        let (sb, cb) = p[4].sin_cos();
        let (sc, cc) = p[5].sin_cos();
        // Each axis: [R, R', R''] (derivatives with respect to its own angle).
        let x = [
            [1.0, 0.0, 0.0, 0.0, ca, -sa, 0.0, sa, ca],
            [0.0, 0.0, 0.0, 0.0, -sa, -ca, 0.0, ca, -sa],
            [0.0, 0.0, 0.0, 0.0, -ca, sa, 0.0, -sa, -ca],
        ];
        let y = [
            [cb, 0.0, sb, 0.0, 1.0, 0.0, -sb, 0.0, cb],
            [-sb, 0.0, cb, 0.0, 0.0, 0.0, -cb, 0.0, -sb],
            [-cb, 0.0, -sb, 0.0, 0.0, 0.0, sb, 0.0, -cb],
        ];
        let z = [
            [cc, -sc, 0.0, sc, cc, 0.0, 0.0, 0.0, 1.0],
            [-sc, -cc, 0.0, cc, -sc, 0.0, 0.0, 0.0, 0.0],
            [-cc, sc, 0.0, -sc, -cc, 0.0, 0.0, 0.0, 0.0],
        ];
        // Derivative orders (da, db, dc) → Rx^(da) Ry^(db) Rz^(dc).
        let term = |da: usize, db: usize, dc: usize| mul(&mul(&x[da], &y[db]), &z[dc]);
        let order = |i: usize, j: usize| {
            let mut d = [0usize; 3];
            d[i] += 1;
            d[j] += 1;
            term(d[0], d[1], d[2])
        };
        AngleTerms {
            rotation: term(0, 0, 0),
            translation: [p[0], p[1], p[2]],
            jacobian: [term(1, 0, 0), term(0, 1, 0), term(0, 0, 1)],
            hessian: HESSIAN_PAIRS.map(|(i, j)| order(i, j)),
        }
    }

    /// `R x + t`.
    #[inline(always)]
    pub fn transform(&self, x: [f64; 3]) -> [f64; 3] {
        let r = apply(&self.rotation, x);
        [
            r[0] + self.translation[0],
            r[1] + self.translation[1],
            r[2] + self.translation[2],
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndt::pose::rotation_of;

    #[test]
    fn matrices_match_finite_differences_of_r() {
        let p = Pose6::new(0.1, 0.2, 0.3, 0.4, -0.7, 2.1);
        let t = AngleTerms::new(&p);
        let r = rotation_of(&p);
        for i in 0..9 {
            assert!((t.rotation[i] - r[(i / 3, i % 3)]).abs() < 1e-14);
        }
        let h = 1e-5;
        let shifted = |k: usize, s: f64| {
            let mut q = p;
            q[3 + k] += s;
            AngleTerms::new(&q)
        };
        for k in 0..3 {
            let (plus, minus) = (shifted(k, h), shifted(k, -h));
            for i in 0..9 {
                let fd = (plus.rotation[i] - minus.rotation[i]) / (2.0 * h);
                assert!((fd - t.jacobian[k][i]).abs() < 1e-9, "dR/d{k}[{i}]");
            }
        }
        for (m, &(i, j)) in HESSIAN_PAIRS.iter().enumerate() {
            let (plus, minus) = (shifted(j, h), shifted(j, -h));
            for e in 0..9 {
                let fd = (plus.jacobian[i][e] - minus.jacobian[i][e]) / (2.0 * h);
                assert!((fd - t.hessian[m][e]).abs() < 1e-9, "d2R/d{i}d{j}[{e}]");
            }
        }
    }
}
