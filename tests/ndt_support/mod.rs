//! Shared helpers for the NDT integration tests: data directory, clouds, ground truth.
#![allow(dead_code)]

use nalgebra::{Isometry3, Matrix3, Matrix4, Rotation3, Translation3, UnitQuaternion};
use ptxflow::ndt::{read_cloud, voxel_grid_filter, PointCloud};
use std::path::PathBuf;

pub mod gpu_setup;
pub mod sim;

#[allow(unused_imports)] // not every test that includes the module uses the GPU set-up
pub use gpu_setup::*;

/// `$PTXFLOW_DATA_DIR/pointclouds`, or `None` (with a note on stderr) when it is missing.
pub fn pointclouds_dir() -> Option<PathBuf> {
    let base = std::env::var_os("PTXFLOW_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")));
    let dir = base.join("pointclouds");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: point-cloud data dir {} not found (set PTXFLOW_DATA_DIR)",
            dir.display()
        );
        None
    }
}

/// Reads `name` from the data dir (panics with the reader's error: the data is checked in).
pub fn cloud(dir: &std::path::Path, name: &str) -> PointCloud {
    read_cloud(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Reads and voxel-grid filters `name`.
pub fn filtered(dir: &std::path::Path, name: &str, leaf_m: f64) -> PointCloud {
    voxel_grid_filter(&cloud(dir, name), leaf_m).expect("voxel grid")
}

/// Reads a 4×4 row-major matrix text file as an isometry (re-orthonormalising the rotation,
/// which the files print to 6 digits).
pub fn matrix_file(dir: &std::path::Path, name: &str) -> Isometry3<f64> {
    let text = std::fs::read_to_string(dir.join(name)).expect("ground truth file");
    let v: Vec<f64> = text
        .split_whitespace()
        .map(|w| w.parse().expect("number"))
        .collect();
    assert_eq!(v.len(), 16, "{name}: 16 numbers");
    let m = Matrix4::from_row_slice(&v);
    let r: Matrix3<f64> = m.fixed_view::<3, 3>(0, 0).into();
    let rot = UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix(&r));
    Isometry3::from_parts(Translation3::new(m[(0, 3)], m[(1, 3)], m[(2, 3)]), rot)
}

/// Mean squared nearest-neighbour distance from each point of `a` to the cloud `b` (brute force).
pub fn mean_sq_nn(a: &[[f32; 3]], b: &[[f32; 3]]) -> f64 {
    let mut sum = 0.0;
    for p in a {
        let mut best = f64::INFINITY;
        for q in b {
            let d: f64 = (0..3).map(|k| (p[k] as f64 - q[k] as f64).powi(2)).sum();
            best = best.min(d);
        }
        sum += best;
    }
    sum / a.len() as f64
}

/// A target map, a source cloud and a starting pose for GPU-vs-CPU comparisons.
pub struct Scene {
    pub name: &'static str,
    pub map: ptxflow::ndt::VoxelMap,
    pub source: Vec<[f32; 3]>,
    /// Where alignments start.
    pub init: Isometry3<f64>,
    /// Published ground truth, when there is one.
    pub truth: Option<Isometry3<f64>>,
}

/// The Velodyne pair (both clouds 0.1 m voxel-grid filtered, 1 m map) from the identity.
pub fn velodyne_scene(dir: &std::path::Path) -> Scene {
    let target = filtered(dir, "251370668.pcd", 0.1);
    Scene {
        name: "velodyne",
        map: ptxflow::ndt::VoxelMap::build(&target.points, 1.0).expect("map"),
        source: filtered(dir, "251371071.pcd", 0.1).points,
        init: Isometry3::identity(),
        truth: Some(matrix_file(
            dir,
            "251370668_251371071_relative_fast_gicp.txt",
        )),
    }
}

/// PCL's NDT tutorial pair: `room_scan1` unfiltered as the 1 m map, `room_scan2` filtered to
/// about 12k points (0.14 m leaf), from the tutorial's initial guess (0.69 rad, 1.79 m, 0.72 m).
pub fn room_scene(dir: &std::path::Path) -> Scene {
    let target = cloud(dir, "room_scan1.pcd");
    #[allow(clippy::approx_constant)] // PCL's NDT tutorial guess (0.6931 rad), not ln 2
    let rot = UnitQuaternion::from_euler_angles(0.0, 0.0, 0.6931);
    Scene {
        name: "room",
        map: ptxflow::ndt::VoxelMap::build(&target.points, 1.0).expect("map"),
        source: filtered(dir, "room_scan2.pcd", 0.14).points,
        init: Isometry3::from_parts(Translation3::new(1.79387, 0.720047, 0.0), rot),
        truth: None,
    }
}

/// True under `PTXFLOW_SANITIZE=1`: compute-sanitizer runs the binary, so keep cases small.
pub fn sanitizing() -> bool {
    std::env::var("PTXFLOW_SANITIZE").is_ok_and(|v| v == "1")
}

/// Largest |a − b| over the entries divided by the largest |b| (norm-wise relative difference).
pub fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-300);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
        / scale
}
