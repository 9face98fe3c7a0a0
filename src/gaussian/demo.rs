//! Demo: fit a small Gaussian field to a generated target field by gradient descent (Adam), through
//! [`GaussianFieldOps`] only, so the same code runs on the CPU field now and a GPU field later.
//!
//! The target is `target_gaussians` random Gaussians; the data are its values y_i at `points` points
//! sampled around it. The model starts from `model_gaussians` isotropic Gaussians centred on random
//! data points. Loss = mean_i (f_i - y_i)^2 (squared field units), so dLoss/df_i = 2 (f_i - y_i) / B.
//! Every parameter (means, all six L entries, weights) is updated; after each step the diagonal of
//! L is clamped to at least `min_diag_m` so the Gaussians stay valid.

use std::fmt;
use std::time::{Duration, Instant};

use super::generate::{random_gaussians, sample_points, GaussianSpec};
use super::layout::{CHOL, CHOL_DIAG, STRIDE};
use super::ops::GaussianFieldOps;
use super::real::Real;
use crate::rng::Rng;
use crate::{Error, Result};

/// Size and optimiser settings of the fit.
#[derive(Clone, Debug)]
pub struct FitConfig {
    /// Gaussians in the generated target field.
    pub target_gaussians: usize,
    /// Gaussians in the model being fitted.
    pub model_gaussians: usize,
    /// Sample points where target and model are compared.
    pub points: usize,
    /// Gradient steps.
    pub steps: usize,
    /// Adam step size (parameter units per step: metres for mu and L, field units for w).
    pub learning_rate: f64,
    /// Lower bound kept on each diagonal entry of L (metres).
    pub min_diag_m: f64,
    /// Seed of the generated target, points and initial model.
    pub seed: u64,
}

impl Default for FitConfig {
    /// 6 target and 6 model Gaussians, 2000 points, 600 steps, learning rate 0.02.
    fn default() -> Self {
        FitConfig {
            target_gaussians: 6,
            model_gaussians: 6,
            points: 2000,
            steps: 600,
            learning_rate: 0.02,
            min_diag_m: 0.02,
            seed: 7,
        }
    }
}

/// Outcome of [`fit`].
#[derive(Clone, Debug)]
pub struct FitReport {
    /// Where the field ran (`"cpu"`/`"gpu"`).
    pub device: &'static str,
    /// Float type of the field (`"f32"`/`"f64"`).
    pub scalar: &'static str,
    /// Gradient steps taken.
    pub steps: usize,
    /// Model Gaussians.
    pub gaussians: usize,
    /// Sample points.
    pub points: usize,
    /// Loss of the initial model (mean squared error, field units squared).
    pub first_loss: f64,
    /// Loss after the last step.
    pub last_loss: f64,
    /// Loss before each step, then after the last (`steps + 1` values).
    pub losses: Vec<f64>,
    /// Wall time of the optimisation loop (forward, backward and update of every step).
    pub elapsed: Duration,
}

impl fmt::Display for FitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gaussian fit ({} {}): {} Gaussians, {} points, {} steps, loss {:.3e} -> {:.3e} ({:.1}x lower) in {:.3} s",
            self.device,
            self.scalar,
            self.gaussians,
            self.points,
            self.steps,
            self.first_loss,
            self.last_loss,
            self.first_loss / self.last_loss,
            self.elapsed.as_secs_f64()
        )
    }
}

/// Fits a model field to a generated target with `field` (whose Gaussians it replaces).
///
/// Errors: [`Error::Input`] for a config with zero Gaussians, points or a non-positive learning
/// rate / minimum diagonal; any error of the field itself.
pub fn fit<F: GaussianFieldOps>(field: &mut F, config: &FitConfig) -> Result<FitReport> {
    if config.target_gaussians == 0 || config.model_gaussians == 0 || config.points == 0 {
        return Err(Error::input(
            "fit needs at least one target Gaussian, model Gaussian and point",
        ));
    }
    if !(config.learning_rate > 0.0 && config.min_diag_m > 0.0) {
        return Err(Error::input(
            "fit needs learning_rate > 0 and min_diag_m > 0",
        ));
    }
    let mut rng = Rng::new(config.seed);
    let target = random_gaussians(&mut rng, config.target_gaussians, &GaussianSpec::default());
    let points64 = sample_points(&mut rng, &target, config.points, 1.5);
    let points: Vec<F::Scalar> = points64.iter().map(|&v| F::Scalar::from_f64(v)).collect();
    let target_s: Vec<F::Scalar> = target.iter().map(|&v| F::Scalar::from_f64(v)).collect();
    field.set_gaussians(&target_s)?;
    let y: Vec<f64> = field.forward(&points)?.iter().map(|v| v.to_f64()).collect();

    let mut params = initial_model(&mut rng, &points64, config.model_gaussians);
    let mut adam = Adam::new(params.len(), config.learning_rate);
    let mut packed = vec![F::Scalar::ZERO; params.len()];
    let mut grad_values = vec![F::Scalar::ZERO; config.points];
    let mut grads64 = vec![0.0; params.len()];
    let mut losses = Vec::with_capacity(config.steps + 1);
    let start = Instant::now();
    for step in 0..=config.steps {
        for (p, &v) in packed.iter_mut().zip(&params) {
            *p = F::Scalar::from_f64(v);
        }
        field.set_gaussians(&packed)?;
        let values = field.forward(&points)?;
        let inv_b = 1.0 / config.points as f64;
        let mut loss = 0.0;
        for ((gv, f), yi) in grad_values.iter_mut().zip(values).zip(&y) {
            let r = f.to_f64() - yi;
            loss += r * r * inv_b;
            *gv = F::Scalar::from_f64(2.0 * r * inv_b);
        }
        losses.push(loss);
        if step == config.steps {
            break;
        }
        let grads = field.backward(&grad_values)?;
        for (g64, g) in grads64.iter_mut().zip(grads.gaussians) {
            *g64 = g.to_f64();
        }
        adam.step(&mut params, &grads64);
        for g in params.chunks_exact_mut(STRIDE) {
            for &d in &CHOL_DIAG {
                g[CHOL + d] = g[CHOL + d].max(config.min_diag_m);
            }
        }
    }
    Ok(FitReport {
        device: field.device(),
        scalar: F::Scalar::NAME,
        steps: config.steps,
        gaussians: config.model_gaussians,
        points: config.points,
        first_loss: losses[0],
        last_loss: *losses.last().expect("losses holds steps + 1 >= 1 values"),
        losses,
        elapsed: start.elapsed(),
    })
}

/// Isotropic Gaussians (L = 0.3 m * I, weight 0.5) centred on randomly chosen data points.
fn initial_model(rng: &mut Rng, points: &[f64], n: usize) -> Vec<f64> {
    let b = points.len() / 3;
    let mut out = Vec::with_capacity(n * STRIDE);
    for _ in 0..n {
        let p = &points[rng.below(b as u64) as usize * 3..][..3];
        out.extend_from_slice(&[p[0], p[1], p[2], 0.3, 0.0, 0.3, 0.0, 0.0, 0.3, 0.5]);
    }
    out
}

/// Adam (Kingma & Ba 2015) with the usual beta1 = 0.9, beta2 = 0.999, eps = 1e-8.
struct Adam {
    lr: f64,
    t: i32,
    m: Vec<f64>,
    v: Vec<f64>,
}

impl Adam {
    fn new(n: usize, lr: f64) -> Self {
        Adam {
            lr,
            t: 0,
            m: vec![0.0; n],
            v: vec![0.0; n],
        }
    }

    fn step(&mut self, params: &mut [f64], grads: &[f64]) {
        const B1: f64 = 0.9;
        const B2: f64 = 0.999;
        self.t += 1;
        let c1 = 1.0 - B1.powi(self.t);
        let c2 = 1.0 - B2.powi(self.t);
        for ((p, &g), (m, v)) in params
            .iter_mut()
            .zip(grads)
            .zip(self.m.iter_mut().zip(&mut self.v))
        {
            *m = B1 * *m + (1.0 - B1) * g;
            *v = B2 * *v + (1.0 - B2) * g * g;
            *p -= self.lr * (*m / c1) / ((*v / c2).sqrt() + 1e-8);
        }
    }
}
