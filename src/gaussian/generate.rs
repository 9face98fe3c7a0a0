//! Deterministic generated Gaussians and query points (f64, packed layout of [`super::layout`]) for
//! the demo, tests and benches. Lengths are in an arbitrary unit (call it metres).

use super::layout::{pack, CHOL, POINT_STRIDE, STRIDE};
use super::real::Real;
use crate::rng::Rng;

/// What [`random_gaussians`] draws.
#[derive(Clone, Copy, Debug)]
pub struct GaussianSpec {
    /// Means are uniform in [-extent_m, extent_m]^3.
    pub extent_m: f64,
    /// Diagonal entries of L are uniform in [min, max] (metres).
    pub diag_m: (f64, f64),
    /// Each off-diagonal entry Lab is `shear * N(0,1) * sqrt(Laa Lbb)`: 0 gives axis-aligned
    /// Gaussians, ~1 strongly sheared ones.
    pub shear: f64,
    /// Weights are uniform in [min, max].
    pub weight: (f64, f64),
}

impl Default for GaussianSpec {
    /// Unit box, diagonals 0.1..0.4 m, moderate shear 0.5, weights 0.5..1.5.
    fn default() -> Self {
        GaussianSpec {
            extent_m: 1.0,
            diag_m: (0.1, 0.4),
            shear: 0.5,
            weight: (0.5, 1.5),
        }
    }
}

/// `n` Gaussians drawn from `spec`, packed (10 scalars each).
pub fn random_gaussians(rng: &mut Rng, n: usize, spec: &GaussianSpec) -> Vec<f64> {
    let mut out = Vec::with_capacity(n * STRIDE);
    for _ in 0..n {
        let e = spec.extent_m;
        let mu = [rng.range(-e, e), rng.range(-e, e), rng.range(-e, e)];
        let (lo, hi) = spec.diag_m;
        let a = [rng.range(lo, hi), rng.range(lo, hi), rng.range(lo, hi)];
        let mut off = |p: f64, q: f64| spec.shear * rng.normal() * (p * q).sqrt();
        let chol = [
            a[0],
            off(a[1], a[0]),
            a[1],
            off(a[2], a[0]),
            off(a[2], a[1]),
            a[2],
        ];
        let w = rng.range(spec.weight.0, spec.weight.1);
        out.extend_from_slice(&pack(mu, chol, w));
    }
    out
}

/// `b` points (xyz triples): each picks a Gaussian of `packed` uniformly and is mu + spread * L z
/// with z standard normal, so most points lie where the field is non-negligible. `spread` > 1
/// reaches further into the tails.
///
/// Panics if `packed` holds no Gaussian (a caller bug, not an input error).
pub fn sample_points(rng: &mut Rng, packed: &[f64], b: usize, spread: f64) -> Vec<f64> {
    let n = packed.len() / STRIDE;
    assert!(n > 0, "sample_points needs at least one Gaussian");
    let mut out = Vec::with_capacity(b * POINT_STRIDE);
    for _ in 0..b {
        let g = &packed[rng.below(n as u64) as usize * STRIDE..][..STRIDE];
        let l = &g[CHOL..CHOL + 6];
        let z = [
            spread * rng.normal(),
            spread * rng.normal(),
            spread * rng.normal(),
        ];
        out.push(g[0] + l[0] * z[0]);
        out.push(g[1] + l[1] * z[0] + l[2] * z[1]);
        out.push(g[2] + l[3] * z[0] + l[4] * z[1] + l[5] * z[2]);
    }
    out
}

/// `values` rounded to the scalar type `T`.
pub fn convert<T: Real>(values: &[f64]) -> Vec<T> {
    values.iter().map(|&v| T::from_f64(v)).collect()
}
