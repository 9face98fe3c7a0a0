//! The GPU Gaussian field against the CPU reference. Each property is one test body run on the GPU
//! field (f32 and f64) and, as the baseline the GPU figures are read against, on the CPU f32 field.
//!
//! Error measures (per point i, or per gradient entry k), all against the CPU f64 field on the
//! same inputs (f32 runs: inputs rounded to f32 first, so only the arithmetic differs):
//! - forward: |f_i - f_i^ref| / A_i, A_i = sum_j |w_j c_j exp(-d_ij / 2)| (the sum of absolute
//!   terms: weights of both signs make f_i itself no scale). Required: f32 <= 1e-5, f64 <= 1e-12.
//!   Terms beyond the type's exponent cutoff (flushed to 0 by design, both devices) are added to
//!   the allowance in full.
//! - gradients: |g_k - g_k^ref| / S_k, S_k = sum over pairs of |pair term| of entry k (see
//!   `backward_abs_terms`); required f32 <= 1e-4, f64 <= 1e-12 on every set, and GPU f32 within
//!   1e-4 of CPU f32 by the same measure (both run the compensated solves of
//!   `ptxflow::gaussian::pair::solve_compensated` on badly conditioned Gaussians); plus, entry by entry, the rounding
//!   bound of the CPU's own f32 test (16 u S'_k + flushed, S' amplified by (1 + d) kappa(L)).
//! - finite differences: GPU f64 analytic gradients against 5-point differences of the CPU f64
//!   forward (relative 1e-6, tests/gaussian_backward.rs describes the steps).
//!
//! The gradient checks are in tests/gaussian_gpu_grad.rs, the shared helpers in
//! tests/gaussian_support/device.rs. Device outputs are poisoned with NaN before every GPU call. With PTXFLOW_SANITIZE=1 (the
//! compute-sanitizer runs) the large cases and the long fit are skipped or shortened.

mod common;
mod gaussian_support;

use gaussian_support::device::*;
use gaussian_support::*;
use ptxflow::gaussian::demo::{fit, FitConfig};
use ptxflow::gaussian::generate::convert;
use ptxflow::gaussian::layout::{pack, STRIDE};
use ptxflow::gaussian::{FieldOptions, GaussianField, GaussianFieldOps, GpuGaussianField, Real};

fn forward_problems() -> Vec<Problem> {
    let mut v = vec![
        random_problem(1, 1, 1),
        random_problem(7, 33, 2),
        random_problem(300, 1000, 3),
    ];
    if !sanitizing() {
        v.push(random_problem(1000, 2049, 4));
    }
    v.push(well_conditioned(50, 400, 5));
    v.push(badly_conditioned(50, 400, 6));
    v
}

/// Forward of `field` against the CPU f64 field; returns the worst |f - f_ref| / A.
fn check_forward<F: Testable>(field: &mut F, p: &Problem, tol: f64) -> f64 {
    let q = rounded::<F::Scalar>(p);
    let opts = field.options();
    let n = q.gaussians.len() / STRIDE;
    let mut cpu = GaussianField::<f64>::with_gaussians(opts, &q.gaussians).unwrap();
    let reference = cpu.forward(&q.points).unwrap().to_vec();
    let (_, abs) = reference_field(&q.gaussians, &q.points, opts.normalised, opts.diag_eps);
    let d = reference_distances(&q.gaussians, &q.points, opts.diag_eps);
    let cutoff = F::Scalar::EXP_CUTOFF_D.to_f64();
    let (_, flushed) = {
        let mut fl = vec![0.0; reference.len()];
        for (i, row) in d.chunks_exact(n).enumerate() {
            for (j, &dij) in row.iter().enumerate() {
                if dij > cutoff {
                    let l = chol_matrix(&q.gaussians, j, opts.diag_eps);
                    let c = if opts.normalised {
                        (2.0 * std::f64::consts::PI).powf(-1.5) / l.determinant()
                    } else {
                        1.0
                    };
                    fl[i] += (q.gaussians[j * STRIDE + 9] * c * (-0.5 * dij).exp()).abs();
                }
            }
        }
        ((), fl)
    };
    field
        .set_gaussians(&convert::<F::Scalar>(&q.gaussians))
        .unwrap();
    field.poison();
    let values: Vec<f64> = field
        .forward(&convert::<F::Scalar>(&q.points))
        .unwrap()
        .iter()
        .map(|v| v.to_f64())
        .collect();
    assert_eq!(values.len(), reference.len());
    let mut worst = 0.0f64;
    for i in 0..values.len() {
        let err = (values[i] - reference[i]).abs();
        let bound = tol * abs[i] + flushed[i] + 1e-300;
        assert!(
            err <= bound,
            "{} {} {} N={n} normalised={}: point {i}: {} vs f64 reference {} (A_i {:e}, bound {bound:e})",
            field.device(),
            F::Scalar::NAME,
            q.name,
            opts.normalised,
            values[i],
            reference[i],
            abs[i]
        );
        if abs[i] > 0.0 {
            worst = worst.max((err - flushed[i]).max(0.0) / abs[i]);
        }
    }
    eprintln!(
        "forward {} {} {:17} N={n:5} B={:6} normalised={:5}: worst |f - f_ref| / A = {worst:.2e} (required {tol:.0e})",
        field.device(),
        F::Scalar::NAME,
        q.name,
        values.len(),
        opts.normalised
    );
    worst
}

#[test]
fn forward_matches_cpu_f64_reference_cpu_f32_baseline() {
    for p in forward_problems() {
        for normalised in [false, true] {
            check_forward(
                &mut GaussianField::<f32>::new(options(normalised)).unwrap(),
                &p,
                1e-5,
            );
        }
    }
}

#[test]
fn gpu_forward_matches_cpu_f64_reference() {
    let Some(gpu) = common::gpu_or_skip("gpu_forward_matches_cpu_f64_reference") else {
        return;
    };
    for p in forward_problems() {
        for normalised in [false, true] {
            check_forward(&mut gpu_field::<f32>(&gpu, normalised), &p, 1e-5);
            check_forward(&mut gpu_field::<f64>(&gpu, normalised), &p, 1e-12);
        }
    }
}

#[test]
fn gpu_forward_with_one_gaussian_chunk_writes_values_directly() {
    let Some(gpu) =
        common::gpu_or_skip("gpu_forward_with_one_gaussian_chunk_writes_values_directly")
    else {
        return;
    };
    // At least as many point blocks (512 points) as resident block slots (at most 16 blocks of
    // 128 threads per SM) leave one Gaussian chunk: the forward then skips the row sum.
    let b = (gpu.facts().sm_count as usize * 16 * 512 + 1).min(if sanitizing() {
        70_000
    } else {
        usize::MAX
    });
    let p = random_problem(3, b, 7);
    let mut f = gpu_field::<f32>(&gpu, true);
    f.set_gaussians(&convert::<f32>(&p.gaussians)).unwrap();
    f.forward(&convert::<f32>(&p.points)).unwrap();
    let (plan, _) = f.plans().unwrap();
    eprintln!("forward plan for N=3 B={b}: {plan:?}");
    assert!(sanitizing() || plan.chunks == 1, "{plan:?}");
    check_forward(&mut f, &p, 1e-5);
}

fn check_distances<F: Testable>(field: &mut F, p: &Problem) {
    let q = rounded::<F::Scalar>(p);
    let eps = field.options().diag_eps;
    let n = q.gaussians.len() / STRIDE;
    let b = q.points.len() / 3;
    let mut cpu = GaussianField::<f64>::with_gaussians(field.options(), &q.gaussians).unwrap();
    let mut reference = vec![0.0; b * n];
    cpu.distances_into(&q.points, &mut reference).unwrap();
    field
        .set_gaussians(&convert::<F::Scalar>(&q.gaussians))
        .unwrap();
    field.poison();
    let mut out = vec![F::Scalar::from_f64(f64::NAN); b * n];
    field
        .distances_into(&convert::<F::Scalar>(&q.points), &mut out)
        .unwrap();
    let u = F::Scalar::EPSILON.to_f64();
    let (mut worst, mut identical) = (0.0f64, 0usize);
    for (k, (&dv, &r)) in out.iter().zip(&reference).enumerate() {
        let dv = dv.to_f64();
        let kappa = chol_condition(&q.gaussians, k % n, eps);
        // Forward substitution is backward stable: relative error in d ~ kappa(L) u.
        let bound = 16.0 * u * kappa * (1.0 + r);
        worst = worst.max((dv - r).abs() / bound);
        identical += usize::from(dv.to_bits() == r.to_bits());
        assert!(
            (dv - r).abs() <= bound,
            "{} {} {} d[{k}] = {dv} vs {r}",
            field.device(),
            F::Scalar::NAME,
            q.name
        );
    }
    eprintln!(
        "distances {} {} {:17} {b}x{n}: worst error / bound {worst:.3}, {identical} of {} bit-identical to CPU f64",
        field.device(),
        F::Scalar::NAME,
        q.name,
        b * n
    );
}

#[test]
fn gpu_distance_matrix_matches_cpu() {
    let Some(gpu) = common::gpu_or_skip("gpu_distance_matrix_matches_cpu") else {
        return;
    };
    for p in [
        random_problem(257, 70, 11),
        well_conditioned(30, 50, 12),
        badly_conditioned(30, 50, 13),
        random_problem(1, 1, 14),
    ] {
        check_distances(&mut gpu_field::<f32>(&gpu, false), &p);
        check_distances(&mut gpu_field::<f64>(&gpu, false), &p);
    }
}

#[test]
fn gpu_api_contract_matches_cpu() {
    let Some(gpu) = common::gpu_or_skip("gpu_api_contract_matches_cpu") else {
        return;
    };
    api::set_gaussians_rejects_bad_shapes_and_values(&mut gpu_field::<f64>(&gpu, false));
    api::forward_and_distances_reject_bad_points(&mut gpu_field::<f64>(&gpu, false));
    api::backward_checks_call_order_and_shapes(&mut gpu_field::<f64>(&gpu, true));
    // Same inputs, same error text on both devices.
    let bad_options = FieldOptions {
        normalised: false,
        diag_eps: -1.0,
    };
    let (c, g) = (
        GaussianField::<f64>::new(bad_options).unwrap_err(),
        GpuGaussianField::<f64>::new(gpu.clone(), bad_options)
            .err()
            .unwrap(),
    );
    assert_eq!(c.to_string(), g.to_string());
    let mut cpu = GaussianField::<f64>::new(FieldOptions::default()).unwrap();
    let mut dev = gpu_field::<f64>(&gpu, false);
    let mut bad = api::one_gaussian();
    bad[5] = -1.0;
    assert_eq!(
        cpu.set_gaussians(&bad).unwrap_err().to_string(),
        dev.set_gaussians(&bad).unwrap_err().to_string()
    );
    assert_eq!(
        cpu.forward(&[0.0; 3]).unwrap_err().to_string(),
        dev.forward(&[0.0; 3]).unwrap_err().to_string()
    );
    cpu.set_gaussians(&api::one_gaussian()).unwrap();
    dev.set_gaussians(&api::one_gaussian()).unwrap();
    let pts = [0.0, f64::INFINITY, 0.0];
    assert_eq!(
        cpu.forward(&pts).unwrap_err().to_string(),
        dev.forward(&pts).unwrap_err().to_string()
    );
    cpu.forward(&[0.1, 0.2, 0.3]).unwrap();
    dev.forward(&[0.1, 0.2, 0.3]).unwrap();
    assert_eq!(
        cpu.backward(&[1.0, 2.0]).unwrap_err().to_string(),
        dev.backward(&[1.0, 2.0]).unwrap_err().to_string()
    );
}

#[test]
fn gpu_far_pairs_with_tiny_gaussians_add_exactly_zero() {
    let Some(gpu) = common::gpu_or_skip("gpu_far_pairs_with_tiny_gaussians_add_exactly_zero")
    else {
        return;
    };
    // 1/a = 1e5 and a point 1e30 away: v and s overflow f32, e' = 0; the pair must be skipped
    // (CPU) or zeroed (GPU), never 0 * inf = NaN.
    let opts = FieldOptions {
        normalised: true,
        diag_eps: 0.0,
    };
    let g = pack([0.0f32; 3], [1e-5, 0.0, 1e-5, 0.0, 0.0, 1e-5], 1.0);
    let pts = [1e30f32, 0.0, 0.0, 0.0, 0.0, 0.0];
    let mut cpu = GaussianField::<f32>::with_gaussians(opts, &g).unwrap();
    let mut dev = GpuGaussianField::<f32>::new(gpu.clone(), opts).unwrap();
    dev.set_gaussians(&g).unwrap();
    let (vc, vd) = (
        cpu.forward(&pts).unwrap().to_vec(),
        dev.forward(&pts).unwrap().to_vec(),
    );
    assert_eq!(vc[0], 0.0);
    assert_eq!(vd[0], 0.0);
    assert!(
        (vd[1] - vc[1]).abs() <= 1e-5 * vc[1].abs(),
        "{vd:?} vs {vc:?}"
    );
    let gc = cpu.backward(&[1.0, 1.0]).unwrap();
    let (gcp, gcg) = (gc.points.to_vec(), gc.gaussians.to_vec());
    let gd = dev.backward(&[1.0, 1.0]).unwrap();
    assert_eq!(&gd.points[..3], &[0.0, 0.0, 0.0]);
    assert_eq!(&gcp[..3], &[0.0, 0.0, 0.0]);
    for (k, (a, c)) in gd.gaussians.iter().zip(&gcg).enumerate() {
        assert!(
            a.is_finite() && (a - c).abs() <= 1e-4 * c.abs().max(1.0),
            "gradient {k}: {a} vs {c}"
        );
    }
}

#[test]
fn gpu_buffers_are_reused_across_steps() {
    let Some(gpu) = common::gpu_or_skip("gpu_buffers_are_reused_across_steps") else {
        return;
    };
    let big = random_problem(300, 1500, 31);
    let small = random_problem(100, 700, 32);
    let mut f = gpu_field::<f32>(&gpu, false);
    let mut seen = None;
    for step in 0..4 {
        let p = if step == 2 { &small } else { &big };
        f.set_gaussians(&convert::<f32>(&p.gaussians)).unwrap();
        let values_ptr = f.forward(&convert::<f32>(&p.points)).unwrap().as_ptr();
        let grad = vec![1.0f32; p.points.len() / 3];
        let g = f.backward(&grad).unwrap();
        let now = (
            values_ptr,
            g.points.as_ptr(),
            g.gaussians.as_ptr(),
            f.device_bytes(),
        );
        if let Some(prev) = seen {
            assert_eq!(prev, now, "step {step} reallocated a buffer");
        }
        seen = Some(now);
    }
}

#[test]
fn gpu_results_are_bit_identical_across_runs() {
    let Some(gpu) = common::gpu_or_skip("gpu_results_are_bit_identical_across_runs") else {
        return;
    };
    let p = badly_conditioned(50, if sanitizing() { 300 } else { 3000 }, 41);
    let g: Vec<f32> = (0..p.points.len() / 3)
        .map(|i| ((i * 7919) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let run = || {
        let mut f = gpu_field::<f32>(&gpu, true);
        f.set_gaussians(&convert::<f32>(&p.gaussians)).unwrap();
        let v = f.forward(&convert::<f32>(&p.points)).unwrap().to_vec();
        let gr = f.backward(&g).unwrap();
        (v, gr.points.to_vec(), gr.gaussians.to_vec())
    };
    let (a, b) = (run(), run());
    let same = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
    assert!(
        same(&a.0, &b.0) && same(&a.1, &b.1) && same(&a.2, &b.2),
        "two GPU runs differ"
    );
}

#[test]
fn gpu_fit_demo_reduces_the_loss() {
    let Some(gpu) = common::gpu_or_skip("gpu_fit_demo_reduces_the_loss") else {
        return;
    };
    let config = if sanitizing() {
        FitConfig {
            steps: 10,
            points: 300,
            ..FitConfig::default()
        }
    } else {
        FitConfig::default()
    };
    let r32 = fit(&mut gpu_field::<f32>(&gpu, false), &config).unwrap();
    eprintln!("{r32}");
    let r64 = fit(&mut gpu_field::<f64>(&gpu, false), &config).unwrap();
    eprintln!("{r64}");
    let drop = if sanitizing() { 0.9 } else { 1e-3 };
    assert!(r32.last_loss < drop * r32.first_loss, "{r32}");
    assert!(r64.last_loss < drop * r64.first_loss, "{r64}");
    // The GPU f64 fit follows the CPU f64 fit step for step (same maths, rounding-level changes).
    let cpu = fit(
        &mut GaussianField::<f64>::new(FieldOptions::default()).unwrap(),
        &config,
    )
    .unwrap();
    let rel = |a: f64, b: f64| (a - b).abs() / b.abs();
    eprintln!(
        "f64 fit: GPU first/last loss {:e}/{:e}, CPU {:e}/{:e}",
        r64.first_loss, r64.last_loss, cpu.first_loss, cpu.last_loss
    );
    assert!(
        rel(r64.first_loss, cpu.first_loss) < 1e-10,
        "{r64} vs {cpu}"
    );
}
