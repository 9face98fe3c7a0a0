//! The GPU Gaussian field's gradients against the CPU f64 reference (the measures are described
//! in tests/gaussian_gpu.rs): GPU f32 and f64, the CPU f32 baseline, GPU f32 against CPU f32, and
//! GPU f64 against finite differences.

mod common;
mod gaussian_support;

use gaussian_support::device::*;
use gaussian_support::*;
use ptxflow::gaussian::generate::convert;
use ptxflow::gaussian::{GaussianField, GaussianFieldOps, Real};
use ptxflow::rng::Rng;

/// Worst errors of one gradient check, per kind [points, Gaussian parameters].
struct GradErrors {
    /// max_k |g_k - g_k^ref| / S_k (sum of absolute terms).
    relative: [f64; 2],
    /// max_k |g_k - g_k^ref| / max_k |g_k^ref|.
    normwise: [f64; 2],
    /// The field's gradients [points, Gaussians] and the sums of absolute terms S_k.
    got: [Vec<f64>; 2],
    abs: [Vec<f64>; 2],
}

/// Gradients of `field` against the CPU f64 field (same rounded inputs, same random dLoss/df).
fn gradient_errors<F: Testable>(field: &mut F, p: &Problem, seed: u64) -> GradErrors {
    let q = rounded::<F::Scalar>(p);
    let opts = field.options();
    let b = q.points.len() / 3;
    let mut rng = Rng::new(seed);
    let g = rounded::<F::Scalar>(&Problem {
        name: "",
        gaussians: vec![],
        points: (0..b).map(|_| rng.range(-1.0, 1.0)).collect(),
    })
    .points;
    let mut cpu = GaussianField::<f64>::with_gaussians(opts, &q.gaussians).unwrap();
    cpu.forward(&q.points).unwrap();
    let r = cpu.backward(&g).unwrap();
    let (ref_points, ref_gauss) = (r.points.to_vec(), r.gaussians.to_vec());
    field
        .set_gaussians(&convert::<F::Scalar>(&q.gaussians))
        .unwrap();
    field.poison();
    field.forward(&convert::<F::Scalar>(&q.points)).unwrap();
    field.poison();
    let got = field.backward(&convert::<F::Scalar>(&g)).unwrap();
    let (got_points, got_gauss): (Vec<f64>, Vec<f64>) = (
        got.points.iter().map(|v| v.to_f64()).collect(),
        got.gaussians.iter().map(|v| v.to_f64()).collect(),
    );
    let cutoff = F::Scalar::EXP_CUTOFF_D.to_f64();
    let abs = backward_abs_terms(
        &q.gaussians,
        &q.points,
        &g,
        opts.normalised,
        opts.diag_eps,
        cutoff,
    );
    let amp = backward_error_scale(
        &q.gaussians,
        &q.points,
        &g,
        opts.normalised,
        opts.diag_eps,
        cutoff,
    );
    let u = F::Scalar::EPSILON.to_f64();
    let mut out = GradErrors {
        relative: [0.0; 2],
        normwise: [0.0; 2],
        got: [got_points.clone(), got_gauss.clone()],
        abs: [abs.points.clone(), abs.gaussians.clone()],
    };
    for (kind, (what, a, r, s, s_amp, fl)) in [
        (
            "point",
            &got_points,
            &ref_points,
            &abs.points,
            &amp.points,
            &amp.flushed_points,
        ),
        (
            "gaussian",
            &got_gauss,
            &ref_gauss,
            &abs.gaussians,
            &amp.gaussians,
            &amp.flushed_gaussians,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(a.len(), r.len(), "{what} gradient length");
        assert!(
            a.iter().all(|v| v.is_finite()),
            "{} {} {what} gradients not finite",
            field.device(),
            q.name
        );
        let scale = r.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let (mut worst_bound, mut worst_at) = (0.0f64, 0usize);
        for k in 0..a.len() {
            let err = (a[k] - r[k]).abs();
            let rounding = 16.0 * u * s_amp[k] + fl[k] + 1e-30;
            if s[k] > 0.0 {
                let rel = (err - fl[k]).max(0.0) / s[k];
                if rel > out.relative[kind] {
                    out.relative[kind] = rel;
                    worst_at = k;
                }
            }
            out.normwise[kind] = out.normwise[kind].max(err / scale.max(1e-300));
            worst_bound = worst_bound.max(err / rounding);
        }
        eprintln!(
            "gradients {} {} {:17} normalised={:5} {what:8}: worst |g - g_ref| / sum|terms| = {:.2e} (entry {worst_at}: {:e} vs {:e}), normwise {:.2e}, error / (16 u S (1+d) kappa) {worst_bound:.3}",
            field.device(),
            F::Scalar::NAME,
            q.name,
            opts.normalised,
            out.relative[kind],
            a.get(worst_at).copied().unwrap_or(0.0),
            r.get(worst_at).copied().unwrap_or(0.0),
            out.normwise[kind],
        );
    }
    out
}

/// Asserts the documented requirement: normwise and relative to the sum of absolute terms
/// <= tol, on every set (badly conditioned included).
fn assert_gradient_errors(e: &GradErrors, tol: f64, what: &str) {
    for kind in 0..2 {
        assert!(
            e.normwise[kind] <= tol,
            "{what}: normwise error {:e} > {tol:e}",
            e.normwise[kind]
        );
        assert!(
            e.relative[kind] <= tol,
            "{what} (kind {kind}): relative error {:e} > {tol:e}",
            e.relative[kind]
        );
    }
}

/// max_k |a_k - b_k| / S_k between two f32 fields' gradients (same inputs, so same S), per kind.
fn gradient_gap(a: &GradErrors, b: &GradErrors) -> [f64; 2] {
    [0, 1].map(|kind| {
        let (x, y, s) = (&a.got[kind], &b.got[kind], &a.abs[kind]);
        assert_eq!((x.len(), y.len()), (s.len(), s.len()));
        (0..s.len())
            .filter(|&k| s[k] > 0.0)
            .map(|k| (x[k] - y[k]).abs() / s[k])
            .fold(0.0, f64::max)
    })
}

fn gradient_problems() -> Vec<Problem> {
    let mut v = vec![random_problem(1, 1, 21), random_problem(37, 95, 22)];
    if !sanitizing() {
        v.push(random_problem(300, 1000, 23));
    }
    v.push(well_conditioned(50, 400, 24));
    v.push(badly_conditioned(50, 400, 25));
    v
}

#[test]
fn gradients_match_cpu_f64_cpu_f32_baseline() {
    for p in gradient_problems() {
        for normalised in [false, true] {
            let e = gradient_errors(
                &mut GaussianField::<f32>::new(options(normalised)).unwrap(),
                &p,
                26,
            );
            assert_gradient_errors(
                &e,
                1e-4,
                &format!("cpu f32 {} normalised={normalised}", p.name),
            );
        }
    }
}

#[test]
fn gpu_gradients_match_cpu_f64() {
    let Some(gpu) = common::gpu_or_skip("gpu_gradients_match_cpu_f64") else {
        return;
    };
    for p in gradient_problems() {
        for normalised in [false, true] {
            let cpu32 = gradient_errors(
                &mut GaussianField::<f32>::new(options(normalised)).unwrap(),
                &p,
                26,
            );
            let e32 = gradient_errors(&mut gpu_field::<f32>(&gpu, normalised), &p, 26);
            assert_gradient_errors(
                &e32,
                1e-4,
                &format!("gpu f32 {} normalised={normalised}", p.name),
            );
            // GPU f32 and CPU f32 run the same algorithm (compensated solves included).
            let gap = gradient_gap(&e32, &cpu32);
            eprintln!("gradients gpu f32 vs cpu f32 {:17} normalised={normalised:5}: worst |g_gpu - g_cpu| / sum|terms| = {:.2e} (points), {:.2e} (Gaussians)", p.name, gap[0], gap[1]);
            assert!(
                gap[0] <= 1e-4 && gap[1] <= 1e-4,
                "gpu f32 vs cpu f32 {} normalised={normalised}: {gap:?}",
                p.name
            );
            let e64 = gradient_errors(&mut gpu_field::<f64>(&gpu, normalised), &p, 26);
            assert_gradient_errors(
                &e64,
                1e-12,
                &format!("gpu f64 {} normalised={normalised}", p.name),
            );
        }
    }
}

#[test]
fn gpu_gradients_match_finite_differences() {
    let Some(gpu) = common::gpu_or_skip("gpu_gradients_match_finite_differences") else {
        return;
    };
    for (p, seed) in [
        (well_conditioned(5, 24, 11), 12),
        (badly_conditioned(8, 24, 14), 15),
    ] {
        for normalised in [false, true] {
            fd::check_gradients(&mut gpu_field::<f64>(&gpu, normalised), &p, seed);
        }
    }
}
