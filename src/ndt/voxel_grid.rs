//! Voxel-grid downsampling: one output point per occupied cube of side `leaf_m`, at the centroid
//! of the points inside it (what PCL's `VoxelGrid` filter does before NDT).
//!
//! Cube `(i, j, k) = floor(p / leaf_m)` (grid anchored at the origin, like PCL's). Centroids are
//! accumulated in f64. Output order is by cube coordinates, so the result does not depend on the
//! input order or the number of threads.

use crate::ndt::cloud::PointCloud;
use crate::{Error, Result};
use rayon::prelude::*;

/// Largest |coordinate / cell side| accepted, so cell indices fit `i32` with room for neighbours.
pub const MAX_CELL_INDEX: f64 = (1u64 << 30) as f64;

/// The integer cell `floor(p[k] · inv_cell)` of `p` for cubes of side `1 / inv_cell`, or `None`
/// when a coordinate is not finite or the index is beyond ±2³⁰. Callers pass `inv_cell = 1.0 /
/// cell_m` computed once, so every caller (and a GPU kernel) gets the same cell for the same point.
#[inline]
pub fn cell_of(p: [f64; 3], inv_cell: f64) -> Option<[i32; 3]> {
    let mut c = [0i32; 3];
    for k in 0..3 {
        let f = (p[k] * inv_cell).floor();
        #[allow(clippy::neg_cmp_op_on_partial_ord)] // NaN must take this branch too
        if !(f.abs() < MAX_CELL_INDEX) {
            return None;
        }
        c[k] = f as i32;
    }
    Some(c)
}

/// Downsamples `cloud` to one centroid per occupied cube of side `leaf_m` (metres).
///
/// Errors: [`Error::Input`] when `leaf_m` is not a positive finite number, or when a point lies so
/// far out (|coordinate| / `leaf_m` ≥ 2³⁰) that its cube index does not fit.
pub fn voxel_grid_filter(cloud: &PointCloud, leaf_m: f64) -> Result<PointCloud> {
    if !(leaf_m.is_finite() && leaf_m > 0.0) {
        return Err(Error::input(format!(
            "voxel-grid leaf must be a positive length in metres, got {leaf_m}"
        )));
    }
    let inv = 1.0 / leaf_m;
    let mut keyed: Vec<([i32; 3], u32)> = cloud
        .points
        .par_iter()
        .enumerate()
        .map(|(i, p)| cell_of([p[0] as f64, p[1] as f64, p[2] as f64], inv).map(|c| (c, i as u32)))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            Error::input(format!(
                "a point is too far from the origin for a {leaf_m} m voxel grid"
            ))
        })?;
    keyed.par_sort_unstable();
    let mut out = PointCloud {
        points: Vec::new(),
        dropped_non_finite: cloud.dropped_non_finite,
    };
    let mut start = 0;
    while start < keyed.len() {
        let cell = keyed[start].0;
        let mut end = start;
        let mut sum = [0f64; 3];
        while end < keyed.len() && keyed[end].0 == cell {
            let p = cloud.points[keyed[end].1 as usize];
            for k in 0..3 {
                sum[k] += p[k] as f64;
            }
            end += 1;
        }
        let n = (end - start) as f64;
        out.points.push([
            (sum[0] / n) as f32,
            (sum[1] / n) as f32,
            (sum[2] / n) as f32,
        ]);
        start = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centroid_per_leaf_and_order_independent() {
        let pts = vec![
            [0.1, 0.1, 0.1],
            [0.3, 0.3, 0.3],
            [1.5, 0.2, 0.2],
            [-0.2, 0.1, 0.1],
        ];
        let out = voxel_grid_filter(&PointCloud::from_points(pts.clone()), 1.0).unwrap();
        assert_eq!(
            out.points,
            vec![[-0.2, 0.1, 0.1], [0.2, 0.2, 0.2], [1.5, 0.2, 0.2]]
        );
        let mut rev = pts;
        rev.reverse();
        assert_eq!(
            voxel_grid_filter(&PointCloud::from_points(rev), 1.0).unwrap(),
            out
        );
    }

    #[test]
    fn bad_leaf_is_an_error() {
        let c = PointCloud::from_points(vec![[0.0; 3]]);
        assert!(voxel_grid_filter(&c, 0.0).is_err());
        assert!(voxel_grid_filter(&c, f64::NAN).is_err());
        let far = PointCloud::from_points(vec![[1e30, 0.0, 0.0]]);
        assert!(voxel_grid_filter(&far, 0.1).is_err());
    }
}
