//! The Newton increment of one solver iteration: `Δ = (−H)⁻¹ g` for the NDT score's Hessian `H`
//! and gradient `g`, with every eigenvalue of `−H` replaced by its magnitude floored at
//! [`EIGEN_FLOOR`] times the largest, so `Δ` is a descent direction even where the score is not
//! locally concave (see `solver`).
//!
//! When `−H − τ I` with `τ = EIGEN_FLOOR · ‖−H‖_∞` has a Cholesky factor, every eigenvalue of
//! `−H` exceeds `τ`, which is at least the floor (the row-sum norm bounds every eigenvalue's
//! magnitude): `−H` is positive definite by the solver's test and no eigenvalue is floored, so
//! `Δ` is the plain solve with the Cholesky factor of `−H` (a tenth of the eigen-decomposition's
//! time; same `Δ` up to rounding). Otherwise the symmetric eigen-decomposition decides.

use nalgebra::{Cholesky, Matrix6, SymmetricEigen, Vector6};

/// Relative floor on the eigenvalue magnitudes of the Newton system.
pub const EIGEN_FLOOR: f64 = 1e-9;

/// `(Δ, positive_definite)` for finite `hessian` and `gradient`; `None` when `−H` has no
/// positive finite largest eigenvalue magnitude (singular).
pub fn newton_increment(
    hessian: &Matrix6<f64>,
    gradient: &Vector6<f64>,
) -> Option<(Vector6<f64>, bool)> {
    let a = -hessian;
    let row_sum_norm = (0..6)
        .map(|i| a.row(i).iter().map(|v| v.abs()).sum::<f64>())
        .fold(0.0, f64::max);
    if row_sum_norm > 0.0 && row_sum_norm.is_finite() {
        let shifted = a - Matrix6::identity() * (EIGEN_FLOOR * row_sum_norm);
        if Cholesky::new(shifted).is_some() {
            if let Some(c) = Cholesky::new(a) {
                return Some((c.solve(gradient), true));
            }
        }
    }
    let eig = SymmetricEigen::new(a);
    let largest = eig.eigenvalues.amax();
    if !(largest > 0.0 && largest.is_finite()) {
        return None;
    }
    let positive_definite = eig.eigenvalues.iter().all(|&l| l > EIGEN_FLOOR * largest);
    let inv = eig
        .eigenvalues
        .map(|l| 1.0 / l.abs().max(EIGEN_FLOOR * largest));
    let v = &eig.eigenvectors;
    Some((
        v * inv.component_mul(&(v.transpose() * gradient)),
        positive_definite,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The eigen-decomposition's answer, for comparison.
    fn by_eigen(h: &Matrix6<f64>, g: &Vector6<f64>) -> (Vector6<f64>, bool) {
        let eig = SymmetricEigen::new(-h);
        let largest = eig.eigenvalues.amax();
        let pd = eig.eigenvalues.iter().all(|&l| l > EIGEN_FLOOR * largest);
        let inv = eig
            .eigenvalues
            .map(|l| 1.0 / l.abs().max(EIGEN_FLOOR * largest));
        let v = &eig.eigenvectors;
        (v * inv.component_mul(&(v.transpose() * g)), pd)
    }

    #[test]
    fn fast_path_equals_the_eigen_decomposition() {
        let mut rng = Rng::new(3);
        let (mut fast, mut slow) = (0, 0);
        for k in 0..2000 {
            // −H = Q diag(λ) Qᵀ with spectra from well conditioned to indefinite and singular.
            let m = Matrix6::from_fn(|_, _| rng.normal());
            let q = m.qr().q();
            let lam = Vector6::from_fn(|i, _| match k % 4 {
                0 => rng.range(0.1, 10.0),
                1 => 10f64.powf(rng.range(-12.0, 3.0)),
                2 => rng.range(-1.0, 10.0),
                _ => {
                    if i == 0 {
                        0.0
                    } else {
                        rng.range(0.5, 2.0)
                    }
                }
            });
            let a = q * Matrix6::from_diagonal(&lam) * q.transpose();
            let a = (a + a.transpose()) * 0.5;
            let (h, g) = (-a, Vector6::from_fn(|_, _| rng.normal()));
            let (d, pd) = newton_increment(&h, &g).expect("non-zero spectrum");
            let (de, pde) = by_eigen(&h, &g);
            if pd && pde {
                fast += 1;
            } else {
                slow += 1;
            }
            assert_eq!(pd, pde, "case {k}: {lam:?}");
            let rel = (d - de).norm() / de.norm();
            // Both are backward stable; a condition number up to ~1e9 costs digits.
            let cond = lam.amax()
                / lam
                    .iter()
                    .map(|l| l.abs())
                    .fold(f64::INFINITY, f64::min)
                    .max(EIGEN_FLOOR * lam.amax());
            assert!(
                rel <= 1e-14 * cond.max(1.0),
                "case {k}: rel {rel:e}, cond {cond:e}"
            );
        }
        assert!(
            fast > 500 && slow > 500,
            "both paths exercised: {fast} / {slow}"
        );
    }

    #[test]
    fn zero_hessian_is_singular() {
        assert!(newton_increment(&Matrix6::zeros(), &Vector6::repeat(1.0)).is_none());
    }
}
