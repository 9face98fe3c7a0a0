//! The NDT target map: for every voxel (cube of side `resolution_m`) holding at least
//! [`MIN_POINTS_PER_VOXEL`] points, the mean and the inverse of the regularised covariance.
//!
//! # Maths
//! Voxel `(i, j, k) = floor(p · inv)` per axis, with `inv = 1 / resolution_m` rounded once to f64
//! and `p` the f32 coordinate widened to f64 (a GPU kernel must compute it the same way to land in
//! the same voxel; see [`crate::ndt::voxel_grid::cell_of`]). For its `n` points: mean `μ = Σp / n`, sample
//! covariance `Σ = Σ(p−μ)(p−μ)ᵀ / (n−1)` (two passes, f64). Flat or linear voxels have (near) zero
//! eigenvalues; as in PCL and ndt_omp, `Σ = V diag(λ) Vᵀ` is rebuilt with every eigenvalue raised to
//! at least [`MIN_EIGEN_RATIO`] · λ_max, so the inverse exists and stays well conditioned. A voxel
//! whose λ_max is not positive (all points identical) has no shape and is dropped, as PCL drops it
//! ("Invalid eigen value"); [`VoxelMapStats::degenerate`] counts them.
//!
//! # Layout (for a GPU copy)
//! Structure of arrays indexed by voxel `v`: `means[v]` (`[f64; 3]`, metres), `inv_covs[v]`
//! (`[f64; 9]`, row-major, 1/m²), `keys[v]` (voxel coordinates), `counts[v]`; plus the
//! [`VoxelHash`] from coordinates to `v` (its module docs give hash and probing). Voxels are
//! ordered by coordinates, so the map does not depend on point order or thread count.

use crate::ndt::voxel_grid::cell_of;
use crate::ndt::voxel_hash::VoxelHash;
use crate::{Error, Result};
use nalgebra::{Matrix3, SymmetricEigen};
use rayon::prelude::*;

/// Fewest points a voxel needs to get a Gaussian (PCL's default).
pub const MIN_POINTS_PER_VOXEL: usize = 6;
/// Smallest eigenvalue kept, as a fraction of the voxel's largest (PCL's default).
pub const MIN_EIGEN_RATIO: f64 = 0.01;

/// What building the map kept and dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VoxelMapStats {
    /// Input points.
    pub points: usize,
    /// Occupied cells before filtering.
    pub occupied_cells: usize,
    /// Cells dropped for holding fewer than [`MIN_POINTS_PER_VOXEL`] points.
    pub sparse: usize,
    /// Cells dropped because all their points coincide (covariance zero).
    pub degenerate: usize,
    /// Kept voxels whose covariance needed eigenvalue regularisation (flat or linear).
    pub regularised: usize,
}

/// The voxelised target; see the module docs for maths and layout.
#[derive(Clone, Debug)]
pub struct VoxelMap {
    resolution_m: f64,
    keys: Vec<[i32; 3]>,
    means: Vec<[f64; 3]>,
    covs: Vec<[f64; 9]>,
    inv_covs: Vec<[f64; 9]>,
    counts: Vec<u32>,
    hash: VoxelHash,
    stats: VoxelMapStats,
}

/// One finished voxel, before it is split into the map's arrays.
struct Voxel {
    key: [i32; 3],
    mean: [f64; 3],
    cov: [f64; 9],
    inv_cov: [f64; 9],
    count: u32,
    regularised: bool,
}

enum CellOutcome {
    Kept(Voxel),
    Sparse,
    Degenerate,
}

impl VoxelMap {
    /// Builds the map of `points` (metres) for voxels of side `resolution_m`.
    ///
    /// Errors: [`Error::Input`] when `resolution_m` is not positive and finite, when a point is not
    /// finite, or when a point is so far out that its voxel index does not fit `i32`.
    /// An empty or fully sparse cloud gives an empty map (no error); the solver then reports
    /// that no point found a voxel.
    pub fn build(points: &[[f32; 3]], resolution_m: f64) -> Result<VoxelMap> {
        if !(resolution_m.is_finite() && resolution_m > 0.0) {
            return Err(Error::input(format!(
                "NDT resolution must be a positive length in metres, got {resolution_m}"
            )));
        }
        let inv = 1.0 / resolution_m;
        let mut keyed: Vec<([i32; 3], u32)> = points
            .par_iter()
            .enumerate()
            .map(|(i, p)| {
                let q = [p[0] as f64, p[1] as f64, p[2] as f64];
                cell_of(q, inv).map(|c| (c, i as u32))
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                Error::input(format!(
                    "target has a non-finite point or one too far out for a {resolution_m} m voxel map"
                ))
            })?;
        keyed.par_sort_unstable();
        let mut ranges = Vec::new();
        let mut start = 0;
        while start < keyed.len() {
            let mut end = start + 1;
            while end < keyed.len() && keyed[end].0 == keyed[start].0 {
                end += 1;
            }
            ranges.push(start..end);
            start = end;
        }
        let outcomes: Vec<CellOutcome> = ranges
            .par_iter()
            .map(|r| {
                let cell = &keyed[r.clone()];
                let pts = cell.iter().map(|&(_, i)| points[i as usize]);
                fit_voxel(cell[0].0, pts, cell.len())
            })
            .collect();
        let mut map = VoxelMap {
            resolution_m,
            keys: Vec::new(),
            means: Vec::new(),
            covs: Vec::new(),
            inv_covs: Vec::new(),
            counts: Vec::new(),
            hash: VoxelHash::build(&[]),
            stats: VoxelMapStats {
                points: points.len(),
                occupied_cells: ranges.len(),
                ..Default::default()
            },
        };
        for o in outcomes {
            match o {
                CellOutcome::Sparse => map.stats.sparse += 1,
                CellOutcome::Degenerate => map.stats.degenerate += 1,
                CellOutcome::Kept(v) => {
                    map.stats.regularised += v.regularised as usize;
                    map.keys.push(v.key);
                    map.means.push(v.mean);
                    map.covs.push(v.cov);
                    map.inv_covs.push(v.inv_cov);
                    map.counts.push(v.count);
                }
            }
        }
        map.hash = VoxelHash::build(&map.keys);
        Ok(map)
    }

    /// Side of a voxel in metres.
    pub fn resolution_m(&self) -> f64 {
        self.resolution_m
    }
    /// Number of voxels with a Gaussian.
    pub fn len(&self) -> usize {
        self.means.len()
    }
    /// True when no voxel has a Gaussian.
    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }
    /// Voxel coordinates, indexed by voxel.
    pub fn keys(&self) -> &[[i32; 3]] {
        &self.keys
    }
    /// Means in metres, indexed by voxel.
    pub fn means(&self) -> &[[f64; 3]] {
        &self.means
    }
    /// Regularised covariances (row-major, m²), indexed by voxel.
    pub fn covariances(&self) -> &[[f64; 9]] {
        &self.covs
    }
    /// Inverse regularised covariances (row-major, 1/m²), indexed by voxel.
    pub fn inv_covariances(&self) -> &[[f64; 9]] {
        &self.inv_covs
    }
    /// Means as one flat array `[x0, y0, z0, x1, ...]` of length `3 · len()`, for upload.
    pub fn means_flat(&self) -> &[f64] {
        self.means.as_flattened()
    }
    /// Inverse covariances as one flat array of `9 · len()` values (row-major per voxel), for upload.
    pub fn inv_covariances_flat(&self) -> &[f64] {
        self.inv_covs.as_flattened()
    }
    /// Points per voxel.
    pub fn counts(&self) -> &[u32] {
        &self.counts
    }
    /// The coordinate → voxel hash table.
    pub fn hash(&self) -> &VoxelHash {
        &self.hash
    }
    /// What the build kept and dropped.
    pub fn stats(&self) -> VoxelMapStats {
        self.stats
    }
    /// The voxel coordinates of a point in metres (`None` when out of `i32` range).
    #[inline]
    pub fn cell_of(&self, p: [f64; 3]) -> Option<[i32; 3]> {
        cell_of(p, 1.0 / self.resolution_m)
    }
}

fn fit_voxel(key: [i32; 3], pts: impl Iterator<Item = [f32; 3]> + Clone, n: usize) -> CellOutcome {
    if n < MIN_POINTS_PER_VOXEL {
        return CellOutcome::Sparse;
    }
    let mut mean = [0f64; 3];
    for p in pts.clone() {
        for k in 0..3 {
            mean[k] += p[k] as f64;
        }
    }
    mean = mean.map(|m| m / n as f64);
    let mut c = Matrix3::<f64>::zeros();
    for p in pts {
        let d = nalgebra::Vector3::new(
            p[0] as f64 - mean[0],
            p[1] as f64 - mean[1],
            p[2] as f64 - mean[2],
        );
        c += d * d.transpose();
    }
    c /= (n - 1) as f64;
    let eig = SymmetricEigen::new(c);
    let max = eig.eigenvalues.max();
    if !(max > 0.0 && max.is_finite()) {
        return CellOutcome::Degenerate;
    }
    let floor = MIN_EIGEN_RATIO * max;
    let regularised = eig.eigenvalues.iter().any(|&l| l < floor);
    let lambda = eig.eigenvalues.map(|l| l.max(floor));
    let v = eig.eigenvectors;
    let cov = v * Matrix3::from_diagonal(&lambda) * v.transpose();
    let inv = v * Matrix3::from_diagonal(&lambda.map(|l| 1.0 / l)) * v.transpose();
    if !inv.iter().all(|x| x.is_finite()) {
        return CellOutcome::Degenerate;
    }
    let row_major = |m: Matrix3<f64>| {
        let mut a = [0f64; 9];
        for r in 0..3 {
            for col in 0..3 {
                // Symmetrise: the eigen reconstruction leaves ~1e-17 asymmetry.
                a[3 * r + col] = 0.5 * (m[(r, col)] + m[(col, r)]);
            }
        }
        a
    };
    CellOutcome::Kept(Voxel {
        key,
        mean,
        cov: row_major(cov),
        inv_cov: row_major(inv),
        count: n as u32,
        regularised,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plane_voxel_is_regularised_and_invertible() {
        // Ten points on z = 0.5 inside voxel (0, 0, 0), plus a voxel of identical points.
        let mut pts: Vec<[f32; 3]> = (0..10)
            .map(|i| [0.1 * i as f32 % 0.9, 0.05 * i as f32, 0.5])
            .collect();
        pts.extend(std::iter::repeat_n([2.5f32, 0.5, 0.5], 8));
        pts.extend([[5.5f32, 0.5, 0.5]; 3]);
        let map = VoxelMap::build(&pts, 1.0).unwrap();
        assert_eq!(map.len(), 1);
        let s = map.stats();
        assert_eq!(
            (s.occupied_cells, s.sparse, s.degenerate, s.regularised),
            (3, 1, 1, 1)
        );
        let (c, ic) = (
            Matrix3::from_row_slice(&map.covariances()[0]),
            Matrix3::from_row_slice(&map.inv_covariances()[0]),
        );
        assert!(((c * ic) - Matrix3::identity()).abs().max() < 1e-9);
        assert_eq!(map.hash().get([0, 0, 0]), Some(0));
        assert!(VoxelMap::build(&pts, -1.0).is_err());
        assert!(VoxelMap::build(&[], 1.0).unwrap().is_empty());
    }
}
