//! Finite-difference check of a field's analytic gradients against the CPU f64 forward (shared
//! by the CPU and GPU tests; the method is described in tests/gaussian_backward.rs).

use super::*;
use ptxflow::gaussian::layout::{CHOL, CHOL_NAMES, STRIDE, WEIGHT};
use ptxflow::gaussian::{GaussianField, GaussianFieldOps};
use ptxflow::rng::Rng;

pub const REL_TOL: f64 = 1e-6;

fn loss(field: &mut GaussianField<f64>, gaussians: &[f64], points: &[f64], g: &[f64]) -> f64 {
    field.set_gaussians(gaussians).unwrap();
    let f = field.forward(points).unwrap();
    f.iter().zip(g).map(|(a, b)| a * b).sum()
}

/// 5-point central difference of `eval` at `x0` in steps of `h`.
fn five_point(h: f64, mut eval: impl FnMut(f64) -> f64) -> f64 {
    (-eval(2.0 * h) + 8.0 * eval(h) - 8.0 * eval(-h) + eval(-2.0 * h)) / (12.0 * h)
}

struct Check {
    kind: &'static str,
    what: String,
    analytic: f64,
    fd: f64,
}

/// Checks every analytic gradient of `analytic` (any field with f64 scalars and these options,
/// CPU or GPU) against 5-point central differences of the CPU f64 forward.
pub fn check_gradients<F: GaussianFieldOps<Scalar = f64>>(
    analytic: &mut F,
    p: &Problem,
    seed: u64,
) {
    let options = analytic.options();
    let normalised = options.normalised;
    let eps = options.diag_eps;
    let n = p.gaussians.len() / STRIDE;
    let b = p.points.len() / 3;
    let mut rng = Rng::new(seed);
    let g: Vec<f64> = (0..b).map(|_| rng.range(-1.0, 1.0)).collect();

    analytic.set_gaussians(&p.gaussians).unwrap();
    analytic.forward(&p.points).unwrap();
    let grads = analytic.backward(&g).unwrap();
    let (grad_points, grad_gaussians) = (grads.points.to_vec(), grads.gaussians.to_vec());

    let mut fd_field = GaussianField::<f64>::new(options).unwrap();
    let mut checks = Vec::new();
    let sigma_min: Vec<f64> = (0..n)
        .map(|j| chol_sigma_min(&p.gaussians, j, eps))
        .collect();

    // Gaussian j's parameters only move its own terms, so the difference quotient is taken on
    // sum_i g_i t_ij (a field holding only Gaussian j): the other terms would only add round-off.
    for j in 0..n {
        let own = &p.gaussians[j * STRIDE..(j + 1) * STRIDE];
        for k in 0..STRIDE {
            let h = if k == WEIGHT {
                1e-2 * (1.0 + own[k].abs())
            } else {
                1e-3 * sigma_min[j]
            };
            let mut gs = own.to_vec();
            let fd = five_point(h, |dx| {
                gs[k] = own[k] + dx;
                loss(&mut fd_field, &gs, &p.points, &g)
            });
            let (kind, what) = match k {
                0..=2 => ("mean", format!("mu_{j}[{k}]")),
                WEIGHT => ("weight", format!("w_{j}")),
                _ => ("chol", format!("{}_{j}", CHOL_NAMES[k - CHOL])),
            };
            checks.push(Check {
                kind,
                what,
                analytic: grad_gaussians[j * STRIDE + k],
                fd,
            });
        }
    }
    // Point i only moves f_i: difference g_i f_i alone, with a step set by the shortest axis among
    // the Gaussians that reach it (d_ij < 60, i.e. e_ij > 1e-13).
    fd_field.set_gaussians(&p.gaussians).unwrap();
    let d = reference_distances(&p.gaussians, &p.points, eps);
    for i in 0..b {
        let reach = (0..n)
            .filter(|&j| d[i * n + j] < 60.0)
            .map(|j| sigma_min[j]);
        let h = 1e-3 * reach.fold(f64::INFINITY, f64::min).min(1.0);
        for k in 0..3 {
            let mut x = p.points[i * 3..i * 3 + 3].to_vec();
            let fd = five_point(h, |dx| {
                x[k] = p.points[i * 3 + k] + dx;
                g[i] * fd_field.forward(&x).unwrap()[0]
            });
            checks.push(Check {
                kind: "point",
                what: format!("x_{i}[{k}]"),
                analytic: grad_points[i * 3 + k],
                fd,
            });
        }
    }

    for kind in ["point", "mean", "chol", "weight"] {
        let of_kind: Vec<&Check> = checks.iter().filter(|c| c.kind == kind).collect();
        let scale = of_kind.iter().map(|c| c.fd.abs()).fold(0.0, f64::max);
        assert!(
            scale > 0.0,
            "{kind}: all gradients zero, the test problem is degenerate"
        );
        let mut worst = 0.0f64;
        let floored = of_kind.iter().filter(|c| c.fd.abs() < 1e-6 * scale).count();
        for c in &of_kind {
            let denom = c.fd.abs().max(1e-6 * scale);
            let rel = (c.analytic - c.fd).abs() / denom;
            worst = worst.max(rel);
            assert!(
                rel <= REL_TOL,
                "{} {} normalised={normalised}: d/d{} analytic {:e} vs finite difference {:e} (rel {rel:e})",
                analytic.device(),
                p.name,
                c.what,
                c.analytic,
                c.fd
            );
        }
        eprintln!(
            "{} {} normalised={normalised} {kind:6}: {} gradients ({floored} below the floor), worst \
             relative error {worst:.2e}",
            analytic.device(),
            p.name,
            of_kind.len()
        );
    }
}
