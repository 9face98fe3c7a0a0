//! Magnusson's NDT score with its gradient and Hessian over a pose (CPU, f64, rayon).
//!
//! # Maths (Magnusson 2009, ch. 6; the form PCL's NDT uses)
//! Gaussian fit of the mixture "normal + uniform outliers" (eq. 6.8), with outlier ratio `o` and
//! voxel side `r`: `c1 = 10 (1 − o)`, `c2 = o / r³`, `d3 = −ln c2`, `d1 = −ln(c1 + c2) − d3`,
//! `d2 = −2 ln((−ln(c1 e^{−1/2} + c2) − d3) / d1)`. `d1 < 0 < d2`.
//!
//! For a source point `x`, transformed `x' = R x + t`, and a paired voxel (mean `μ`, inverse
//! covariance `C`), with `d = x' − μ`, `q = dᵀ C d`, `e = exp(−d2 q / 2)`:
//! - score `s = −d1 e` (≥ 0, to be maximised; summed over all pairs);
//! - gradient `∂s/∂p_i = d1 d2 e · dᵀC J_i`, with `J_i = ∂x'/∂p_i`;
//! - Hessian `∂²s/∂p_i∂p_j = d1 d2 e · (−d2 (dᵀC J_i)(dᵀC J_j) + J_jᵀ C J_i + dᵀ C H_ij)`,
//!   with `H_ij = ∂²x'/∂p_i∂p_j` ([`crate::ndt::angles`]).
//!
//! A pair whose `e` underflows to zero (or is not finite) contributes nothing and is skipped, so a
//! huge inverse covariance can never produce `0 · ∞`. A point counts as a correspondence when at
//! least one voxel is paired with it.
//!
//! # Parallelism
//! Points are cut into fixed chunks of [`CHUNK`]; rayon sums each chunk, the chunk sums are added in
//! order, so the result is bit-identical for any number of threads.

use crate::ndt::angles::{apply, AngleTerms, HESSIAN_PAIRS};
use crate::ndt::linearize::Linearization;
use crate::ndt::pose::Pose6;
use crate::ndt::search::NeighbourSearch;
use crate::ndt::voxel_map::VoxelMap;
use crate::{Error, Result};
use nalgebra::{Matrix6, Vector6};
use rayon::prelude::*;

/// Points per parallel work item.
pub const CHUNK: usize = 1024;

/// The Gaussian constants `d1`, `d2` (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaussConstants {
    /// `d1` (negative).
    pub d1: f64,
    /// `d2` (positive).
    pub d2: f64,
}

impl GaussConstants {
    /// Constants for voxels of side `resolution_m` and an outlier ratio in (0, 1) (PCL: 0.55).
    ///
    /// Errors: [`Error::Input`] when the resolution is not positive or the ratio not in (0, 1).
    pub fn new(resolution_m: f64, outlier_ratio: f64) -> Result<GaussConstants> {
        if !(resolution_m.is_finite() && resolution_m > 0.0) {
            return Err(Error::input(format!(
                "NDT resolution must be positive metres, got {resolution_m}"
            )));
        }
        if !(outlier_ratio > 0.0 && outlier_ratio < 1.0) {
            return Err(Error::input(format!(
                "NDT outlier ratio must lie in (0, 1), got {outlier_ratio}"
            )));
        }
        let c1 = 10.0 * (1.0 - outlier_ratio);
        let c2 = outlier_ratio / resolution_m.powi(3);
        let d3 = -c2.ln();
        let d1 = -(c1 + c2).ln() - d3;
        let d2 = -2.0 * ((-(c1 * (-0.5f64).exp() + c2).ln() - d3) / d1).ln();
        if !(d1 < 0.0 && d2 > 0.0 && d2.is_finite()) {
            return Err(Error::input(format!(
                "NDT constants degenerate for resolution {resolution_m} m, outlier ratio {outlier_ratio}"
            )));
        }
        Ok(GaussConstants { d1, d2 })
    }
}

/// Running sums for a set of points (Hessian: upper triangle only until [`Sums::finish`]).
#[derive(Clone, Copy, Debug)]
struct Sums {
    score: f64,
    grad: [f64; 6],
    hess: [[f64; 6]; 6],
    correspondences: usize,
}

impl Sums {
    const ZERO: Sums = Sums {
        score: 0.0,
        grad: [0.0; 6],
        hess: [[0.0; 6]; 6],
        correspondences: 0,
    };

    fn add(&mut self, o: &Sums) {
        self.score += o.score;
        for i in 0..6 {
            self.grad[i] += o.grad[i];
            for j in i..6 {
                self.hess[i][j] += o.hess[i][j];
            }
        }
        self.correspondences += o.correspondences;
    }

    fn finish(&self) -> Linearization {
        let mut h = Matrix6::zeros();
        for i in 0..6 {
            for j in i..6 {
                h[(i, j)] = self.hess[i][j];
                h[(j, i)] = self.hess[i][j];
            }
        }
        Linearization {
            score: self.score,
            gradient: Vector6::from_column_slice(&self.grad),
            hessian: h,
            correspondences: self.correspondences,
        }
    }
}

#[inline(always)]
fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Adds the contributions of source point `x` (metres) at the pose of `t` to `s`.
#[inline]
fn add_point(
    s: &mut Sums,
    map: &VoxelMap,
    t: &AngleTerms,
    x: [f64; 3],
    search: NeighbourSearch,
    g: GaussConstants,
) {
    let xt = t.transform(x);
    let ja = [
        apply(&t.jacobian[0], x),
        apply(&t.jacobian[1], x),
        apply(&t.jacobian[2], x),
    ];
    let ha = t.hessian.map(|m| apply(&m, x));
    let (means, inv_covs) = (map.means(), map.inv_covariances());
    let mut found = false;
    map.for_each_neighbour(xt, search, |v| {
        found = true;
        let mu = means[v];
        let c = &inv_covs[v];
        let d = [xt[0] - mu[0], xt[1] - mu[1], xt[2] - mu[2]];
        let cd = apply(c, d);
        let q = dot(d, cd);
        let e = (-0.5 * g.d2 * q).exp();
        if !(e > 0.0 && e.is_finite()) {
            return;
        }
        s.score -= g.d1 * e;
        let gv = [
            cd[0],
            cd[1],
            cd[2],
            dot(cd, ja[0]),
            dot(cd, ja[1]),
            dot(cd, ja[2]),
        ];
        let f = g.d1 * g.d2 * e;
        for (g, v) in s.grad.iter_mut().zip(gv) {
            *g += f * v;
        }
        // C J_k for the angular columns (C is symmetric, so rows equal columns).
        let cj = [apply(c, ja[0]), apply(c, ja[1]), apply(c, ja[2])];
        for i in 0..6 {
            for j in i..6 {
                let jcj = match (i < 3, j < 3) {
                    (true, true) => c[3 * i + j],
                    (true, false) => cj[j - 3][i],
                    _ => dot(ja[i - 3], cj[j - 3]),
                };
                s.hess[i][j] += f * (jcj - g.d2 * gv[i] * gv[j]);
            }
        }
        for (m, &(a, b)) in HESSIAN_PAIRS.iter().enumerate() {
            s.hess[3 + a][3 + b] += f * dot(cd, ha[m]);
        }
    });
    s.correspondences += found as usize;
}

/// Score, gradient and Hessian (with respect to `pose`) of `points` against `map`, summed over
/// all points, in parallel over every core. See the module docs for the formulas.
pub fn linearize_points(
    map: &VoxelMap,
    points: &[[f32; 3]],
    pose: &Pose6,
    search: NeighbourSearch,
    gauss: GaussConstants,
) -> Linearization {
    let terms = AngleTerms::new(pose);
    let partial: Vec<Sums> = points
        .par_chunks(CHUNK)
        .map(|chunk| {
            let mut s = Sums::ZERO;
            for p in chunk {
                add_point(
                    &mut s,
                    map,
                    &terms,
                    [p[0] as f64, p[1] as f64, p[2] as f64],
                    search,
                    gauss,
                );
            }
            s
        })
        .collect();
    let mut total = Sums::ZERO;
    for p in &partial {
        total.add(p);
    }
    total.finish()
}

/// Each point's own score (sum of `−d1 e` over its paired voxels; 0 without a voxel) at `pose`.
pub fn point_scores(
    map: &VoxelMap,
    points: &[[f32; 3]],
    pose: &Pose6,
    search: NeighbourSearch,
    gauss: GaussConstants,
) -> Vec<f64> {
    let terms = AngleTerms::new(pose);
    points
        .par_iter()
        .map(|p| {
            let xt = terms.transform([p[0] as f64, p[1] as f64, p[2] as f64]);
            let mut score = 0.0;
            map.for_each_neighbour(xt, search, |v| {
                let (mu, c) = (map.means()[v], &map.inv_covariances()[v]);
                let d = [xt[0] - mu[0], xt[1] - mu[1], xt[2] - mu[2]];
                let e = (-0.5 * gauss.d2 * dot(d, apply(c, d))).exp();
                if e.is_finite() {
                    score -= gauss.d1 * e;
                }
            });
            score
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::GaussConstants;

    #[test]
    fn gauss_constants_by_hand() {
        // r = 1, o = 0.55: c1 = 4.5, c2 = 0.55, d3 = −ln 0.55.
        let g = GaussConstants::new(1.0, 0.55).unwrap();
        let d3 = -(0.55f64).ln();
        let d1 = -(5.05f64).ln() - d3;
        let d2 = -2.0 * ((-(4.5 * (-0.5f64).exp() + 0.55).ln() - d3) / d1).ln();
        assert_eq!((g.d1, g.d2), (d1, d2));
        assert!(
            (g.d1 + 2.217225).abs() < 1e-6 && (g.d2 - 0.433123).abs() < 1e-6,
            "{g:?}"
        );
        assert!(GaussConstants::new(1.0, 0.0).is_err() && GaussConstants::new(0.0, 0.5).is_err());
    }
}
