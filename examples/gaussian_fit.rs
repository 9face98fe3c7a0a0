//! Fit a two-Gaussian field to samples of a known one by plain gradient descent, using the
//! field's forward and backward: `cargo run --release --example gaussian_fit`.
//!
//! Runs on the GPU when there is one (`GpuGaussianField`), else on the CPU (`GaussianField`);
//! both implement `GaussianFieldOps`, so the loop is the same code.

use ptxflow::gaussian::layout::{pack, CHOL, CHOL_DIAG, MU, STRIDE};
use ptxflow::gaussian::{FieldOptions, GaussianField, GaussianFieldOps, GpuGaussianField};
use ptxflow::points::as_flat;
use ptxflow::runtime::Gpu;

fn main() -> ptxflow::Result<()> {
    // Two Gaussians, packed 10 scalars each: mean (m), lower-triangular Cholesky factor of the
    // covariance L00 L10 L11 L20 L21 L22 (m), weight.
    let truth: Vec<f64> = [
        pack([-0.6, 0.2, 0.0], [0.5, 0.1, 0.4, 0.0, 0.0, 0.6], 1.0),
        pack([0.7, -0.3, 0.2], [0.4, 0.0, 0.5, 0.1, -0.1, 0.4], 0.6),
    ]
    .concat();
    // Samples on a 12^3 grid over [-1.5, 1.5]^3 m.
    let axis = |i: usize| -1.5 + 3.0 * i as f64 / 11.0;
    let grid: Vec<[f64; 3]> = (0..12 * 12 * 12)
        .map(|i| [axis(i % 12), axis(i / 12 % 12), axis(i / 144)])
        .collect();
    let points = as_flat(&grid); // the field takes xyz triples as one flat slice; no copy

    let options = FieldOptions::default();
    let mut field: Box<dyn GaussianFieldOps<Scalar = f64>> = match Gpu::open_default() {
        Ok(gpu) => Box::new(GpuGaussianField::<f64>::new(gpu, options)?),
        Err(e) if e.is_no_device() => {
            eprintln!("{e}: fitting on the CPU");
            Box::new(GaussianField::<f64>::new(options)?)
        }
        Err(e) => return Err(e),
    };
    field.set_gaussians(&truth)?;
    let target = field.forward(points)?.to_vec();

    // Start from two round Gaussians at the wrong places with the wrong weights.
    let mut model: Vec<f64> = [
        pack([-0.2, 0.5, 0.3], [0.6, 0.0, 0.6, 0.0, 0.0, 0.6], 0.5),
        pack([0.3, -0.6, -0.2], [0.6, 0.0, 0.6, 0.0, 0.0, 0.6], 0.5),
    ]
    .concat();
    let n = grid.len() as f64;
    let (steps, learning_rate) = (400, 6.0);
    let mut grad_values = vec![0.0; grid.len()];
    for step in 0..=steps {
        field.set_gaussians(&model)?;
        let values = field.forward(points)?;
        // Loss = mean squared error; dLoss/df_i = 2 (f_i - y_i) / B.
        let mut loss = 0.0;
        for ((g, f), y) in grad_values.iter_mut().zip(values).zip(&target) {
            loss += (f - y) * (f - y) / n;
            *g = 2.0 * (f - y) / n;
        }
        if step % 50 == 0 {
            println!("step {step:>3} ({}): loss {loss:.3e}", field.device());
        }
        if step == steps {
            break;
        }
        // Gradients come back in the packed layout, so the update is one line per parameter.
        let grads = field.backward(&grad_values)?;
        for (p, g) in model.iter_mut().zip(grads.gaussians) {
            *p -= learning_rate * g;
        }
        // Keep L's diagonal positive so every Gaussian stays valid.
        for g in model.chunks_exact_mut(STRIDE) {
            for d in CHOL_DIAG {
                g[CHOL + d] = g[CHOL + d].max(0.05);
            }
        }
    }
    for (k, (m, t)) in model.chunks(STRIDE).zip(truth.chunks(STRIDE)).enumerate() {
        println!(
            "Gaussian {k}: mean {:.3?} (true {:.3?}), weight {:.3} (true {:.3})",
            &m[MU..MU + 3],
            &t[MU..MU + 3],
            m[STRIDE - 1],
            t[STRIDE - 1]
        );
    }
    Ok(())
}
