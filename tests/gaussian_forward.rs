//! Forward pass of the Gaussian field: f64 against an independent nalgebra reference, the distance
//! matrix, and f32 against f64.
//!
//! Tolerances come from rounding-error bounds, per point, relative to A_i = sum_j |w_j c_j e_ij|
//! (weights can be negative, so f_i itself may cancel to near 0):
//! - the reference solves with Sigma = L L^T, whose relative error in d is ~ kappa(L)^2 u; an error
//!   delta in d changes e by e * delta / 2, so |f - f_ref| <= C u sum_j |t_ij| (1 + d_ij) kappa_j^2;
//! - f32 against f64 on identical (f32-rounded) inputs: forward substitution is backward stable, so
//!   the relative error in d is ~ kappa(L) u32, giving |f32 - f64| <= C u32 sum_j |t_ij| (1 + d_ij)
//!   kappa_j, plus the summation's N u32 A_i;
//! - terms with d_ij beyond the type's cutoff ([`Real::EXP_CUTOFF_D`]) are flushed to 0, so their
//!   |t_ij| is added to the bound in full.
//!
//! C = 16 covers the handful of rounded operations per pair with margin.

mod gaussian_support;

use gaussian_support::*;
use ptxflow::gaussian::generate::convert;
use ptxflow::gaussian::layout::STRIDE;
use ptxflow::gaussian::{FieldOptions, GaussianField, GaussianFieldOps, Real};

const C: f64 = 16.0;

fn options(normalised: bool) -> FieldOptions {
    FieldOptions {
        normalised,
        ..FieldOptions::default()
    }
}

/// Per-point error scale sum_j |t_ij| (1 + d_ij) kappa_j^power over pairs with d_ij <= cutoff_d,
/// and the sum of |t_ij| over the pairs beyond it (flushed to 0 by the type with that cutoff).
fn error_scale(
    p: &Problem,
    normalised: bool,
    eps: f64,
    power: i32,
    cutoff_d: f64,
) -> (Vec<f64>, Vec<f64>) {
    let n = p.gaussians.len() / STRIDE;
    let d = reference_distances(&p.gaussians, &p.points, eps);
    let kappa: Vec<f64> = (0..n)
        .map(|j| chol_condition(&p.gaussians, j, eps))
        .collect();
    let (mut scale, mut flushed) = (Vec::new(), Vec::new());
    for row in d.chunks_exact(n) {
        let (mut s, mut f) = (0.0, 0.0);
        for (j, &dij) in row.iter().enumerate() {
            let w = p.gaussians[j * STRIDE + 9].abs();
            let norm = if normalised {
                let l = chol_matrix(&p.gaussians, j, eps);
                (2.0 * std::f64::consts::PI).powf(-1.5) / l.determinant()
            } else {
                1.0
            };
            let t = w * norm * (-0.5 * dij).exp();
            if dij <= cutoff_d {
                s += t * (1.0 + dij) * kappa[j].powi(power);
            } else {
                f += t;
            }
        }
        scale.push(s);
        flushed.push(f);
    }
    (scale, flushed)
}

fn check_f64_forward(p: &Problem, normalised: bool) {
    let eps = FieldOptions::default().diag_eps;
    let mut field =
        GaussianField::<f64>::with_gaussians(options(normalised), &p.gaussians).unwrap();
    let values = field.forward(&p.points).unwrap().to_vec();
    let (reference, _) = reference_field(&p.gaussians, &p.points, normalised, eps);
    let (scale, flushed) = error_scale(p, normalised, eps, 2, f64::EXP_CUTOFF_D);
    let mut worst = 0.0f64;
    for (i, ((f, r), s)) in values.iter().zip(&reference).zip(&scale).enumerate() {
        let bound = C * f64::EPSILON * s + flushed[i] + f64::MIN_POSITIVE;
        worst = worst.max((f - r).abs() / bound);
        assert!(
            (f - r).abs() <= bound,
            "{} normalised={normalised} point {i}: {f} vs reference {r} (bound {bound:e})",
            p.name
        );
    }
    eprintln!(
        "{} normalised={normalised}: worst error / bound = {worst:.3}",
        p.name
    );
}

#[test]
fn forward_f64_matches_nalgebra_reference_well_conditioned() {
    let p = well_conditioned(40, 300, 1);
    check_f64_forward(&p, false);
    check_f64_forward(&p, true);
}

#[test]
fn forward_f64_matches_nalgebra_reference_badly_conditioned() {
    let p = badly_conditioned(40, 300, 2);
    let n = p.gaussians.len() / STRIDE;
    let kmax = (0..n)
        .map(|j| chol_condition(&p.gaussians, j, 1e-6))
        .fold(0.0, f64::max);
    eprintln!("badly-conditioned: max kappa(L) = {kmax:.3e}");
    assert!(
        kmax > 1e3,
        "problem should be badly conditioned, max kappa(L) = {kmax}"
    );
    check_f64_forward(&p, false);
    check_f64_forward(&p, true);
}

#[test]
fn distance_matrix_matches_nalgebra_reference() {
    for p in [well_conditioned(30, 50, 3), badly_conditioned(30, 50, 4)] {
        let eps = FieldOptions::default().diag_eps;
        let n = p.gaussians.len() / STRIDE;
        let mut field = GaussianField::<f64>::with_gaussians(options(false), &p.gaussians).unwrap();
        let mut d = vec![0.0; p.points.len() / 3 * n];
        field.distances_into(&p.points, &mut d).unwrap();
        let reference = reference_distances(&p.gaussians, &p.points, eps);
        for (k, (a, r)) in d.iter().zip(&reference).enumerate() {
            let kappa = chol_condition(&p.gaussians, k % n, eps);
            let bound = C * f64::EPSILON * kappa * kappa * (1.0 + r);
            assert!((a - r).abs() <= bound, "{} d[{k}] = {a} vs {r}", p.name);
        }
    }
}

#[test]
fn forward_equals_sum_over_distance_matrix() {
    let p = well_conditioned(20, 64, 5);
    let n = 20;
    for normalised in [false, true] {
        let mut field =
            GaussianField::<f64>::with_gaussians(options(normalised), &p.gaussians).unwrap();
        let mut d = vec![0.0; 64 * n];
        field.distances_into(&p.points, &mut d).unwrap();
        let values = field.forward(&p.points).unwrap();
        let (_, abs_sums) = reference_field(&p.gaussians, &p.points, normalised, 1e-6);
        for (i, row) in d.chunks_exact(n).enumerate() {
            let mut f = 0.0;
            for (j, &dij) in row.iter().enumerate() {
                let l = chol_matrix(&p.gaussians, j, 1e-6);
                let c = if normalised {
                    (2.0 * std::f64::consts::PI).powf(-1.5) / l.determinant()
                } else {
                    1.0
                };
                f += p.gaussians[j * STRIDE + 9] * c * (-0.5 * dij).exp();
            }
            let bound = C * n as f64 * f64::EPSILON * abs_sums[i];
            assert!(
                (values[i] - f).abs() <= bound,
                "point {i}: {} vs {f}",
                values[i]
            );
        }
    }
}

fn check_f32_forward(p: &Problem, normalised: bool) {
    let eps = FieldOptions::default().diag_eps;
    // Same inputs for both: the f64 run sees the f32-rounded Gaussians and points.
    let p64 = Problem {
        name: p.name,
        gaussians: round_to_f32(&p.gaussians),
        points: round_to_f32(&p.points),
    };
    let n = p.gaussians.len() / STRIDE;
    let mut f64_field =
        GaussianField::<f64>::with_gaussians(options(normalised), &p64.gaussians).unwrap();
    let v64 = f64_field.forward(&p64.points).unwrap().to_vec();
    let mut f32_field =
        GaussianField::<f32>::with_gaussians(options(normalised), &convert::<f32>(&p64.gaussians))
            .unwrap();
    let v32 = f32_field
        .forward(&convert::<f32>(&p64.points))
        .unwrap()
        .to_vec();
    let (scale, flushed) = error_scale(&p64, normalised, eps, 1, f32::EXP_CUTOFF_D as f64);
    let (_, abs_sums) = reference_field(&p64.gaussians, &p64.points, normalised, eps);
    let u32 = f32::EPSILON as f64;
    let mut worst = 0.0f64;
    let mut worst_rel = 0.0f64;
    for i in 0..v64.len() {
        let bound = C * u32 * scale[i] + n as f64 * u32 * abs_sums[i] + flushed[i];
        let err = (v32[i] as f64 - v64[i]).abs();
        worst = worst.max(err / bound);
        worst_rel = worst_rel.max(err / abs_sums[i]);
        assert!(
            err <= bound,
            "{} point {i}: f32 {} vs f64 {} (bound {bound:e})",
            p.name,
            v32[i],
            v64[i]
        );
    }
    eprintln!(
        "{} normalised={normalised}: f32 worst error / bound = {worst:.3}, worst error / A_i = {worst_rel:.2e}",
        p.name
    );
}

#[test]
fn forward_f32_matches_f64_within_rounding_bound() {
    for p in [well_conditioned(50, 400, 6), badly_conditioned(50, 400, 7)] {
        check_f32_forward(&p, false);
        check_f32_forward(&p, true);
    }
}
