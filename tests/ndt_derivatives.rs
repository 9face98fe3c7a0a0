//! The analytic gradient and Hessian of the NDT score against central finite differences, on the
//! real Velodyne scans in every search mode.
//!
//! The score is only piecewise smooth: it jumps where a point crosses a voxel face (its voxel set
//! changes) or, in radius mode, where a voxel mean crosses the search sphere. Finite differences
//! across such a seam are meaningless, so the test keeps only points at least `MARGIN_M` from
//! every seam at the evaluation pose; the finite-difference steps move points by far less.

mod ndt_support;

use nalgebra::{Matrix6, Vector6};
use ndt_support::*;
use ptxflow::ndt::derivatives::linearize_points;
use ptxflow::ndt::{pose_to_isometry, GaussConstants, NeighbourSearch, Pose6, VoxelMap};

const MARGIN_M: f64 = 1e-3;
const STEP: f64 = 1e-6;

/// Points of `pts` whose transformed position at `pose` is at least `MARGIN_M` from every seam.
fn away_from_seams(
    map: &VoxelMap,
    pts: &[[f32; 3]],
    pose: &Pose6,
    search: NeighbourSearch,
) -> Vec<[f32; 3]> {
    let t = pose_to_isometry(pose);
    let r = map.resolution_m();
    pts.iter()
        .copied()
        .filter(|p| {
            let q = t * nalgebra::Point3::new(p[0] as f64, p[1] as f64, p[2] as f64);
            let q = [q.x, q.y, q.z];
            let face_ok = q.iter().all(|&c| {
                let f = (c / r).rem_euclid(1.0) * r;
                f > MARGIN_M && r - f > MARGIN_M
            });
            let mut sphere_ok = true;
            if search == NeighbourSearch::Radius {
                map.for_each_neighbour(q, NeighbourSearch::Direct27, |v| {
                    let m = map.means()[v];
                    let d = ((q[0] - m[0]).powi(2) + (q[1] - m[1]).powi(2) + (q[2] - m[2]).powi(2))
                        .sqrt();
                    sphere_ok &= (d - r).abs() > MARGIN_M;
                });
            }
            face_ok && sphere_ok
        })
        .collect()
}

/// Largest |fd − analytic| / max(|analytic|, 1e-3 · max|analytic|) over the entries.
fn worst_relative(fd: &[f64], an: &[f64]) -> f64 {
    let scale = an.iter().fold(0f64, |m, v| m.max(v.abs()));
    fd.iter()
        .zip(an)
        .map(|(f, a)| (f - a).abs() / a.abs().max(1e-3 * scale))
        .fold(0.0, f64::max)
}

#[test]
fn gradient_and_hessian_match_central_differences() {
    let Some(dir) = pointclouds_dir() else { return };
    let tgt = filtered(&dir, "251370668.pcd", 0.1);
    let src = filtered(&dir, "251371071.pcd", 0.1);
    let map = VoxelMap::build(&tgt.points, 1.0).unwrap();
    let gauss = GaussConstants::new(1.0, 0.55).unwrap();
    let poses = [
        Pose6::new(0.45, 0.1, -0.02, 0.004, -0.002, -0.011),
        Pose6::new(0.3, -0.4, 0.1, 0.05, -0.08, 0.4),
    ];
    for search in NeighbourSearch::ALL {
        for pose in &poses {
            let pts = away_from_seams(&map, &src.points, pose, search);
            let at = |p: &Pose6| linearize_points(&map, &pts, p, search, gauss);
            let base = at(pose);
            assert!(
                base.correspondences > 1000,
                "{search:?}: {} correspondences",
                base.correspondences
            );
            let mut fd_grad = Vector6::zeros();
            let mut fd_hess = Matrix6::zeros();
            for i in 0..6 {
                let mut plus = *pose;
                let mut minus = *pose;
                plus[i] += STEP;
                minus[i] -= STEP;
                let (lp, lm) = (at(&plus), at(&minus));
                assert_eq!(
                    (lp.correspondences, lm.correspondences),
                    (base.correspondences, base.correspondences)
                );
                fd_grad[i] = (lp.score - lm.score) / (2.0 * STEP);
                let col = (lp.gradient - lm.gradient) / (2.0 * STEP);
                fd_hess.set_column(i, &col);
            }
            let eg = worst_relative(fd_grad.as_slice(), base.gradient.as_slice());
            let eh = worst_relative(fd_hess.as_slice(), base.hessian.as_slice());
            eprintln!(
                "{search:?} pose {:?}: {} points, gradient {eg:.2e}, Hessian {eh:.2e}",
                pose.as_slice(),
                pts.len()
            );
            assert!(eg < 1e-6, "{search:?}: gradient relative error {eg:.3e}");
            assert!(eh < 1e-6, "{search:?}: Hessian relative error {eh:.3e}");
        }
    }
}
