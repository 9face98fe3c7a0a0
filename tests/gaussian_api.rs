//! The Gaussian field's API contract: validation errors (never panics), call-order errors, buffer
//! reuse across steps, bit-identical results on any number of threads, and the fit demo.

mod gaussian_support;

use gaussian_support::api::{self, one_gaussian};
use gaussian_support::*;
use ptxflow::gaussian::demo::{fit, FitConfig};
use ptxflow::gaussian::generate::convert;
use ptxflow::gaussian::layout::{pack, STRIDE};
use ptxflow::gaussian::{FieldOptions, GaussianField, GaussianFieldOps};
use ptxflow::Error;

fn field() -> GaussianField<f64> {
    GaussianField::with_gaussians(FieldOptions::default(), &one_gaussian()).unwrap()
}

#[test]
fn set_gaussians_rejects_bad_shapes_and_values() {
    api::set_gaussians_rejects_bad_shapes_and_values(&mut field());
}

#[test]
fn tiny_diagonal_overflow_is_an_error_in_f32() {
    // 1e-39 is positive (subnormal), but with diag_eps = 0 its reciprocal overflows f32.
    let options = FieldOptions {
        normalised: false,
        diag_eps: 0.0,
    };
    let mut f = GaussianField::<f32>::new(options).unwrap();
    let g = pack([0.0f32; 3], [1e-39, 0.0, 1.0, 0.0, 0.0, 1.0], 1.0);
    assert!(matches!(f.set_gaussians(&g), Err(Error::Input { .. })));
    // The default eps bounds 1/a by 1e6, so the same Gaussian is accepted.
    let mut f = GaussianField::<f32>::new(FieldOptions::default()).unwrap();
    f.set_gaussians(&g).unwrap();
    assert!(f.forward(&[0.0, 0.0, 0.0]).unwrap()[0].is_finite());
}

#[test]
fn bad_options_are_rejected() {
    for eps in [-1e-6, f64::NAN, f64::INFINITY] {
        let options = FieldOptions {
            normalised: false,
            diag_eps: eps,
        };
        assert!(matches!(
            GaussianField::<f64>::new(options),
            Err(Error::Input { .. })
        ));
    }
}

#[test]
fn forward_and_distances_reject_bad_points() {
    api::forward_and_distances_reject_bad_points(&mut field());
}

#[test]
fn backward_checks_call_order_and_shapes() {
    api::backward_checks_call_order_and_shapes(&mut field());
}

#[test]
fn buffers_are_reused_across_steps() {
    let p = well_conditioned(16, 300, 31);
    let mut f = GaussianField::<f32>::new(FieldOptions::default()).unwrap();
    let gs = convert::<f32>(&p.gaussians);
    let ps = convert::<f32>(&p.points);
    let grad = vec![1.0f32; 300];
    let mut seen = None;
    for _ in 0..3 {
        f.set_gaussians(&gs).unwrap();
        let values_ptr = f.forward(&ps).unwrap().as_ptr();
        let g = f.backward(&grad).unwrap();
        let ptrs = (values_ptr, g.points.as_ptr(), g.gaussians.as_ptr());
        if let Some(prev) = seen {
            assert_eq!(prev, ptrs, "a step reallocated an output buffer");
        }
        seen = Some(ptrs);
    }
}

#[test]
fn results_are_bit_identical_on_any_thread_count() {
    let p = badly_conditioned(50, 3000, 41);
    let g: Vec<f64> = (0..3000)
        .map(|i| ((i * 7919) % 13) as f64 / 13.0 - 0.5)
        .collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let options = FieldOptions {
                normalised: true,
                ..FieldOptions::default()
            };
            let mut f = GaussianField::<f64>::with_gaussians(options, &p.gaussians).unwrap();
            let values = f.forward(&p.points).unwrap().to_vec();
            let grads = f.backward(&g).unwrap();
            (values, grads.points.to_vec(), grads.gaussians.to_vec())
        })
    };
    let one = run(1);
    for threads in [2, 3, 8] {
        let other = run(threads);
        let same = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(
            same(&one.0, &other.0),
            "values differ with {threads} threads"
        );
        assert!(
            same(&one.1, &other.1),
            "point gradients differ with {threads} threads"
        );
        assert!(
            same(&one.2, &other.2),
            "Gaussian gradients differ with {threads} threads"
        );
    }
}

#[test]
fn gradient_accessors_follow_the_layout() {
    let p = well_conditioned(3, 10, 51);
    let mut f =
        GaussianField::<f64>::with_gaussians(FieldOptions::default(), &p.gaussians).unwrap();
    f.forward(&p.points).unwrap();
    let g = f.backward(&[1.0; 10]).unwrap();
    assert_eq!((g.num_points(), g.num_gaussians()), (10, 3));
    for j in 0..3 {
        let raw = &g.gaussians[j * STRIDE..(j + 1) * STRIDE];
        assert_eq!(g.grad_mean(j), [raw[0], raw[1], raw[2]]);
        assert_eq!(
            g.grad_chol(j),
            [raw[3], raw[4], raw[5], raw[6], raw[7], raw[8]]
        );
        assert_eq!(g.grad_weight(j), raw[9]);
    }
    assert_eq!(g.grad_point(4), [g.points[12], g.points[13], g.points[14]]);
}

#[test]
fn fit_demo_reduces_the_loss_f64_and_f32() {
    let config = FitConfig::default();
    let mut f64_field = GaussianField::<f64>::new(FieldOptions::default()).unwrap();
    let r64 = fit(&mut f64_field, &config).unwrap();
    eprintln!("{r64}");
    assert_eq!(r64.losses.len(), config.steps + 1);
    assert!(r64.last_loss < 1e-3 * r64.first_loss, "{r64}");
    let mut f32_field = GaussianField::<f32>::new(FieldOptions::default()).unwrap();
    let r32 = fit(&mut f32_field, &config).unwrap();
    eprintln!("{r32}");
    assert!(r32.last_loss < 1e-3 * r32.first_loss, "{r32}");
    let bad = FitConfig {
        points: 0,
        ..FitConfig::default()
    };
    assert!(matches!(
        fit(&mut f64_field, &bad),
        Err(Error::Input { .. })
    ));
}
