//! Backward pass of the Gaussian field against finite differences of the f64 forward, and f32
//! against f64.
//!
//! The loss is Loss = sum_i g_i f_i with fixed random g_i in [-1, 1], so backward(g) must return
//! its exact gradient. Finite differences use the 5-point central stencil
//! (-F(+2h) + 8F(+h) - 8F(-h) + F(-2h)) / 12h, truncation error O(h^4). Steps follow each
//! parameter's length scale: h = 1e-3 * sigma_min(L_j) for mu_j and L_j (the shortest axis of
//! Gaussian j, which for sheared Gaussians is far below the smallest diagonal entry), h = 1e-3 *
//! sigma_min over the Gaussians reaching point i for x_i, h = 1e-2 * (1 + |w|) for weights (F is
//! linear in w). Each quotient differences only the terms the parameter moves (Gaussian j's terms,
//! or point i's value), so unrelated terms add no round-off. Truncation ~ (1e-3)^4 and round-off
//! ~ 1e-16 / 1e-3 relative are both far below 1e-6.
//!
//! Pass criterion: |analytic - fd| <= 1e-6 * max(|fd|, 1e-6 * G), where G is the largest |gradient|
//! of that kind (points, means, L, weights) in the problem: 1e-6 relative, except that entries below
//! a millionth of their kind (near-cancellation, far-away pairs) are held to 1e-12 G absolute.

mod gaussian_support;

use gaussian_support::fd::check_gradients;
use gaussian_support::*;
use ptxflow::gaussian::generate::convert;
use ptxflow::gaussian::{FieldOptions, GaussianField, GaussianFieldOps, Real};
use ptxflow::rng::Rng;

fn cpu_f64(normalised: bool) -> GaussianField<f64> {
    GaussianField::new(FieldOptions {
        normalised,
        ..FieldOptions::default()
    })
    .unwrap()
}

#[test]
fn gradients_match_finite_differences_well_conditioned() {
    let p = well_conditioned(5, 24, 11);
    check_gradients(&mut cpu_f64(false), &p, 12);
    check_gradients(&mut cpu_f64(true), &p, 13);
}

#[test]
fn gradients_match_finite_differences_badly_conditioned() {
    let p = badly_conditioned(8, 24, 14);
    let kmax = (0..8)
        .map(|j| chol_condition(&p.gaussians, j, 1e-6))
        .fold(0.0, f64::max);
    eprintln!("badly-conditioned: max kappa(L) = {kmax:.3e}");
    assert!(
        kmax > 1e3,
        "problem should include a badly conditioned Gaussian"
    );
    check_gradients(&mut cpu_f64(false), &p, 15);
    check_gradients(&mut cpu_f64(true), &p, 16);
}

/// f32 gradients against f64 gradients on identical (f32-rounded) inputs, entry by entry:
/// |g32 - g64| <= 16 u32 S + F + 1e-30, where S = sum over pairs of |pair term| (1 + d_ij)
/// kappa(L_j) (see `backward_error_scale`): each pair term carries the relative error of v
/// (~ kappa u32) times the exponent's sensitivity (1 + d), and terms of both signs are summed;
/// F = sum of |pair term| over pairs beyond the f32 cutoff, which f32 flushes to 0.
#[test]
fn gradients_f32_match_f64_within_rounding_bound() {
    for p in [
        well_conditioned(20, 200, 21),
        badly_conditioned(20, 200, 22),
    ] {
        for normalised in [false, true] {
            let options = FieldOptions {
                normalised,
                ..FieldOptions::default()
            };
            let gs = round_to_f32(&p.gaussians);
            let ps = round_to_f32(&p.points);
            let mut rng = Rng::new(23);
            let g: Vec<f64> = round_to_f32(
                &(0..ps.len() / 3)
                    .map(|_| rng.range(-1.0, 1.0))
                    .collect::<Vec<_>>(),
            );

            let mut f64_field = GaussianField::<f64>::with_gaussians(options, &gs).unwrap();
            f64_field.forward(&ps).unwrap();
            let g64 = f64_field.backward(&g).unwrap();
            let mut f32_field =
                GaussianField::<f32>::with_gaussians(options, &convert(&gs)).unwrap();
            f32_field.forward(&convert::<f32>(&ps)).unwrap();
            let g32 = f32_field.backward(&convert::<f32>(&g)).unwrap();
            let scale = backward_error_scale(
                &gs,
                &ps,
                &g,
                normalised,
                options.diag_eps,
                f32::EXP_CUTOFF_D as f64,
            );

            let u32 = f32::EPSILON as f64;
            for (what, a32, a64, rounding, flushed) in [
                (
                    "point",
                    g32.points,
                    g64.points,
                    &scale.points,
                    &scale.flushed_points,
                ),
                (
                    "gaussian",
                    g32.gaussians,
                    g64.gaussians,
                    &scale.gaussians,
                    &scale.flushed_gaussians,
                ),
            ] {
                let mut worst = 0.0f64;
                let mut worst_normwise = 0.0f64;
                let norm = a64.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                for (k, (&x, &y)) in a32.iter().zip(a64).enumerate() {
                    let err = (x as f64 - y).abs();
                    let bound = 16.0 * u32 * rounding[k] + flushed[k] + 1e-30;
                    worst = worst.max(err / bound);
                    worst_normwise = worst_normwise.max(err / norm);
                    assert!(err <= bound, "{} normalised={normalised} {what} gradient {k}: f32 {x} vs f64 {y} (bound {bound:e})", p.name);
                }
                eprintln!(
                    "{} normalised={normalised} {what:8}: f32 worst error / bound {worst:.3}, normwise error {worst_normwise:.2e}",
                    p.name
                );
            }
        }
    }
}
