//! Shared helpers for the Gaussian field tests: generated problem sets and an independent f64
//! reference built on nalgebra (covariance Sigma = L L^T, its own Cholesky solve), which shares no
//! code with the crate's forward substitution.
#![allow(dead_code)]

pub mod api;
pub mod backward_check;
pub mod device;
pub mod fd;

use nalgebra::{Matrix3, Vector3};
use ptxflow::gaussian::generate::{random_gaussians, sample_points, GaussianSpec};
use ptxflow::gaussian::layout::STRIDE;
use ptxflow::rng::Rng;

/// A generated problem: packed Gaussians and points (f64).
pub struct Problem {
    pub name: &'static str,
    pub gaussians: Vec<f64>,
    pub points: Vec<f64>,
}

/// Axis-aligned-ish, similar scales: condition number of L around 10.
pub fn well_conditioned(n: usize, b: usize, seed: u64) -> Problem {
    let mut rng = Rng::new(seed);
    let spec = GaussianSpec {
        extent_m: 1.0,
        diag_m: (0.2, 0.5),
        shear: 0.3,
        weight: (-0.5, 1.5),
    };
    let gaussians = random_gaussians(&mut rng, n, &spec);
    let points = sample_points(&mut rng, &gaussians, b, 1.3);
    Problem {
        name: "well-conditioned",
        gaussians,
        points,
    }
}

/// Diagonals log-uniform over 500x (0.002 m to 1 m) and strong shear: condition numbers of L of
/// about 1e2 to 1e4 (Sigma 1e4 to 1e8), i.e. needle- and pancake-shaped Gaussians.
pub fn badly_conditioned(n: usize, b: usize, seed: u64) -> Problem {
    let mut rng = Rng::new(seed);
    let spec = GaussianSpec {
        extent_m: 1.0,
        diag_m: (1.0, 1.0),
        shear: 2.0,
        weight: (-0.5, 1.5),
    };
    let mut gaussians = random_gaussians(&mut rng, n, &spec);
    for g in gaussians.chunks_exact_mut(STRIDE) {
        // Scale row r of L by a log-uniform factor: keeps it lower-triangular with a positive
        // diagonal, and makes rows (axes) of very different lengths.
        for row in [3..4, 4..6, 6..9] {
            let scale = rng.range((0.002f64).ln(), 0.0).exp();
            for v in &mut g[row] {
                *v *= scale;
            }
        }
    }
    let points = sample_points(&mut rng, &gaussians, b, 1.3);
    Problem {
        name: "badly-conditioned",
        gaussians,
        points,
    }
}

/// L of packed Gaussian `j` as a matrix, with `eps` added to the diagonal.
pub fn chol_matrix(gaussians: &[f64], j: usize, eps: f64) -> Matrix3<f64> {
    let l = &gaussians[j * STRIDE + 3..j * STRIDE + 9];
    Matrix3::new(
        l[0] + eps,
        0.0,
        0.0,
        l[1],
        l[2] + eps,
        0.0,
        l[3],
        l[4],
        l[5] + eps,
    )
}

/// Condition number of L_j (ratio of extreme singular values).
pub fn chol_condition(gaussians: &[f64], j: usize, eps: f64) -> f64 {
    let sv = chol_matrix(gaussians, j, eps).singular_values();
    sv.max() / sv.min()
}

/// Smallest singular value of L_j (metres): the shortest length scale of Gaussian j.
pub fn chol_sigma_min(gaussians: &[f64], j: usize, eps: f64) -> f64 {
    chol_matrix(gaussians, j, eps).singular_values().min()
}

/// Independent reference: d_ij = r^T Sigma^{-1} r via nalgebra's Cholesky of Sigma = L L^T.
pub fn reference_distances(gaussians: &[f64], points: &[f64], eps: f64) -> Vec<f64> {
    let n = gaussians.len() / STRIDE;
    let chols: Vec<_> = (0..n)
        .map(|j| {
            let l = chol_matrix(gaussians, j, eps);
            (l * l.transpose())
                .cholesky()
                .expect("test Gaussians have SPD covariances")
        })
        .collect();
    let mut out = Vec::with_capacity(points.len() / 3 * n);
    for p in points.chunks_exact(3) {
        for (j, c) in chols.iter().enumerate() {
            let g = &gaussians[j * STRIDE..];
            let r = Vector3::new(p[0] - g[0], p[1] - g[1], p[2] - g[2]);
            out.push(r.dot(&c.solve(&r)));
        }
    }
    out
}

/// Independent reference field values and, per point, the sum of |terms| (the scale against
/// which rounding errors are measured, since weights may be negative and cancel).
pub fn reference_field(
    gaussians: &[f64],
    points: &[f64],
    normalised: bool,
    eps: f64,
) -> (Vec<f64>, Vec<f64>) {
    let n = gaussians.len() / STRIDE;
    let d = reference_distances(gaussians, points, eps);
    let norms: Vec<f64> = (0..n)
        .map(|j| {
            if normalised {
                let l = chol_matrix(gaussians, j, eps);
                let sigma = l * l.transpose();
                1.0 / ((2.0 * std::f64::consts::PI).powf(1.5) * sigma.determinant().sqrt())
            } else {
                1.0
            }
        })
        .collect();
    let mut values = Vec::new();
    let mut abs_sums = Vec::new();
    for row in d.chunks_exact(n) {
        let (mut f, mut a) = (0.0, 0.0);
        for (j, &dij) in row.iter().enumerate() {
            let t = gaussians[j * STRIDE + 9] * norms[j] * (-0.5 * dij).exp();
            f += t;
            a += t.abs();
        }
        values.push(f);
        abs_sums.push(a);
    }
    (values, abs_sums)
}

/// `values` rounded to f32 and widened back, so f32 and f64 runs see the same inputs.
pub fn round_to_f32(values: &[f64]) -> Vec<f64> {
    values.iter().map(|&v| v as f32 as f64).collect()
}

/// Error scales of each backward gradient entry, for comparing an f32 run with an f64 run.
pub struct BackwardErrorScale {
    /// Per entry: sum over pairs with d_ij <= cutoff of |pair term| (1 + d_ij) kappa(L_j).
    pub points: Vec<f64>,
    pub gaussians: Vec<f64>,
    /// Per entry: sum over pairs with d_ij > cutoff of |pair term| (terms the f32 run flushes to 0).
    pub flushed_points: Vec<f64>,
    pub flushed_gaussians: Vec<f64>,
}

/// Rounding-error scale of each backward gradient entry, with the pair terms of the documented
/// formulas (h = g c e, q = -w h; x and mu: |q s|; L[ab]: |q s_a v_b| (+ |w h / a_k| on the
/// diagonal when normalised); w: |h|) computed here with nalgebra solves. Pairs beyond
/// `cutoff_d` go to the flushed sums instead (see [`BackwardErrorScale`]).
pub fn backward_error_scale(
    gaussians: &[f64],
    points: &[f64],
    grad_values: &[f64],
    normalised: bool,
    eps: f64,
    cutoff_d: f64,
) -> BackwardErrorScale {
    backward_term_sums(
        gaussians,
        points,
        grad_values,
        normalised,
        eps,
        cutoff_d,
        true,
    )
}

/// Per gradient entry, the plain sum of |pair term| over pairs with d_ij <= `cutoff_d` (in
/// `points`/`gaussians`) and beyond it (in the `flushed_*` fields): the "sum of absolute terms"
/// against which a gradient's relative error is measured (terms of both signs cancel in the
/// gradient itself, so its own magnitude is no scale).
pub fn backward_abs_terms(
    gaussians: &[f64],
    points: &[f64],
    grad_values: &[f64],
    normalised: bool,
    eps: f64,
    cutoff_d: f64,
) -> BackwardErrorScale {
    backward_term_sums(
        gaussians,
        points,
        grad_values,
        normalised,
        eps,
        cutoff_d,
        false,
    )
}

fn backward_term_sums(
    gaussians: &[f64],
    points: &[f64],
    grad_values: &[f64],
    normalised: bool,
    eps: f64,
    cutoff_d: f64,
    amplify: bool,
) -> BackwardErrorScale {
    let n = gaussians.len() / STRIDE;
    let mut out = BackwardErrorScale {
        points: vec![0.0; points.len()],
        gaussians: vec![0.0; gaussians.len()],
        flushed_points: vec![0.0; points.len()],
        flushed_gaussians: vec![0.0; gaussians.len()],
    };
    for j in 0..n {
        let l = chol_matrix(gaussians, j, eps);
        let chol = (l * l.transpose()).cholesky().expect("SPD");
        let kappa = chol_condition(gaussians, j, eps);
        let c = if normalised {
            (2.0 * std::f64::consts::PI).powf(-1.5) / l.determinant()
        } else {
            1.0
        };
        let g = &gaussians[j * STRIDE..(j + 1) * STRIDE];
        for (i, p) in points.chunks_exact(3).enumerate() {
            let r = Vector3::new(p[0] - g[0], p[1] - g[1], p[2] - g[2]);
            let v = l.solve_lower_triangular(&r).expect("non-singular L");
            let s = chol.solve(&r);
            let d = v.dot(&v);
            let h = grad_values[i] * c * (-0.5 * d).exp();
            let q = -g[9] * h;
            let (sp, sg, amp) = if d <= cutoff_d {
                (
                    &mut out.points,
                    &mut out.gaussians,
                    if amplify { (1.0 + d) * kappa } else { 1.0 },
                )
            } else {
                (&mut out.flushed_points, &mut out.flushed_gaussians, 1.0)
            };
            for k in 0..3 {
                sp[i * 3 + k] += (q * s[k]).abs() * amp;
                sg[j * STRIDE + k] += (q * s[k]).abs() * amp;
            }
            for (m, (a, bb)) in [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
                .into_iter()
                .enumerate()
            {
                let mut t = (q * s[a] * v[bb]).abs();
                if normalised && a == bb {
                    t += (g[9] * h / l[(a, a)]).abs();
                }
                sg[j * STRIDE + 3 + m] += t * amp;
            }
            sg[j * STRIDE + 9] += h.abs() * amp;
        }
    }
    out
}
