//! A generated NDT problem with a known answer, for `ptxflow demo`, tests and benches.
//!
//! The scene is a 20 m × 12 m × 3.5 m room: floor, four walls, three boxes (five faces each) and
//! two round pillars, sampled uniformly by area. Target and source are independent samplings
//! (different seeds, so no point is shared), each with 1 cm Gaussian sensor noise per axis; the
//! source is expressed in a frame moved by a known `t_target_source` (0.6 m, 7°). The alignment
//! runs on voxel-grid filtered clouds (0.1 m) from the identity, with default settings.

use crate::ndt::cloud::PointCloud;
use crate::ndt::params::NdtParams;
use crate::ndt::pose::pose_error;
use crate::ndt::result::StopReason;
use crate::ndt::{align_clouds, voxel_grid_filter};
use crate::rng::Rng;
use crate::Result;
use nalgebra::{Isometry3, Point3, Translation3, UnitQuaternion};
use std::f64::consts::TAU;

/// Sensor noise, metres (standard deviation per axis).
pub const NOISE_M: f64 = 0.01;
/// Points sampled per cloud before filtering.
pub const POINTS_PER_CLOUD: usize = 60_000;
/// Voxel-grid leaf applied before alignment, metres.
pub const LEAF_M: f64 = 0.1;

/// What the demo measured.
#[derive(Clone, Debug, PartialEq)]
pub struct NdtDemoReport {
    /// Target points after filtering.
    pub target_points: usize,
    /// Source points after filtering.
    pub source_points: usize,
    /// Newton iterations.
    pub iterations: usize,
    /// Why the solver stopped.
    pub stop: StopReason,
    /// Wall time of map building plus alignment, seconds.
    pub seconds: f64,
    /// Distance between estimated and true translation, metres.
    pub translation_error_m: f64,
    /// Angle of the rotation between estimate and truth, degrees.
    pub rotation_error_deg: f64,
    /// The motion the source was generated with.
    pub t_true: Isometry3<f64>,
    /// What NDT found.
    pub t_estimated: Isometry3<f64>,
}

enum Surface {
    /// Parallelogram `o + s u + t v`, `s, t ∈ [0, 1]`.
    Rect {
        o: [f64; 3],
        u: [f64; 3],
        v: [f64; 3],
    },
    /// Vertical cylinder mantle: centre (x, y), radius, base z, height.
    Pillar {
        c: [f64; 2],
        r: f64,
        z0: f64,
        h: f64,
    },
}

impl Surface {
    fn area(&self) -> f64 {
        match self {
            Surface::Rect { u, v, .. } => {
                let c = [
                    u[1] * v[2] - u[2] * v[1],
                    u[2] * v[0] - u[0] * v[2],
                    u[0] * v[1] - u[1] * v[0],
                ];
                (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]).sqrt()
            }
            Surface::Pillar { r, h, .. } => TAU * r * h,
        }
    }

    fn sample(&self, rng: &mut Rng) -> [f64; 3] {
        match self {
            Surface::Rect { o, u, v } => {
                let (s, t) = (rng.f64(), rng.f64());
                [0, 1, 2].map(|k| o[k] + s * u[k] + t * v[k])
            }
            Surface::Pillar { c, r, z0, h } => {
                let a = TAU * rng.f64();
                [c[0] + r * a.cos(), c[1] + r * a.sin(), z0 + h * rng.f64()]
            }
        }
    }
}

/// The five visible faces of an axis-aligned box with corner `lo` and size `d`.
fn box_faces(lo: [f64; 3], d: [f64; 3], out: &mut Vec<Surface>) {
    let [x, y, z] = lo;
    let [dx, dy, dz] = d;
    out.push(Surface::Rect {
        o: [x, y, z + dz],
        u: [dx, 0.0, 0.0],
        v: [0.0, dy, 0.0],
    });
    out.push(Surface::Rect {
        o: [x, y, z],
        u: [dx, 0.0, 0.0],
        v: [0.0, 0.0, dz],
    });
    out.push(Surface::Rect {
        o: [x, y + dy, z],
        u: [dx, 0.0, 0.0],
        v: [0.0, 0.0, dz],
    });
    out.push(Surface::Rect {
        o: [x, y, z],
        u: [0.0, dy, 0.0],
        v: [0.0, 0.0, dz],
    });
    out.push(Surface::Rect {
        o: [x + dx, y, z],
        u: [0.0, dy, 0.0],
        v: [0.0, 0.0, dz],
    });
}

fn surfaces() -> Vec<Surface> {
    let (w, d, h) = (20.0, 12.0, 3.5);
    let mut s = vec![
        Surface::Rect {
            o: [0.0, 0.0, 0.0],
            u: [w, 0.0, 0.0],
            v: [0.0, d, 0.0],
        },
        Surface::Rect {
            o: [0.0, 0.0, 0.0],
            u: [w, 0.0, 0.0],
            v: [0.0, 0.0, h],
        },
        Surface::Rect {
            o: [0.0, d, 0.0],
            u: [w, 0.0, 0.0],
            v: [0.0, 0.0, h],
        },
        Surface::Rect {
            o: [0.0, 0.0, 0.0],
            u: [0.0, d, 0.0],
            v: [0.0, 0.0, h],
        },
        Surface::Rect {
            o: [w, 0.0, 0.0],
            u: [0.0, d, 0.0],
            v: [0.0, 0.0, h],
        },
    ];
    box_faces([3.0, 2.0, 0.0], [1.5, 1.0, 1.2], &mut s);
    box_faces([12.0, 7.5, 0.0], [2.5, 1.2, 0.8], &mut s);
    box_faces([15.5, 1.5, 0.0], [0.8, 0.8, 2.0], &mut s);
    s.push(Surface::Pillar {
        c: [7.0, 6.0],
        r: 0.3,
        z0: 0.0,
        h,
    });
    s.push(Surface::Pillar {
        c: [10.0, 3.0],
        r: 0.5,
        z0: 0.0,
        h,
    });
    s
}

/// `n` points sampled uniformly by area from the scene (world frame), seeded by `seed`, mapped
/// through `t_frame_world` and given [`NOISE_M`] Gaussian noise per axis.
pub fn scene_cloud(seed: u64, n: usize, t_frame_world: &Isometry3<f64>) -> PointCloud {
    let surfaces = surfaces();
    let areas: Vec<f64> = surfaces.iter().map(Surface::area).collect();
    let total: f64 = areas.iter().sum();
    let mut rng = Rng::new(seed);
    let mut cloud = PointCloud::default();
    for _ in 0..n {
        let mut pick = rng.f64() * total;
        let mut i = 0;
        while i + 1 < areas.len() && pick >= areas[i] {
            pick -= areas[i];
            i += 1;
        }
        let p = surfaces[i].sample(&mut rng);
        let q = t_frame_world * Point3::new(p[0], p[1], p[2]);
        let noisy = [q.x, q.y, q.z].map(|c| (c + NOISE_M * rng.normal()) as f32);
        cloud.push(noisy);
    }
    cloud
}

/// The motion the demo's source frame is generated with (source → target).
pub fn demo_motion() -> Isometry3<f64> {
    let rot = UnitQuaternion::from_euler_angles(
        1.0f64.to_radians(),
        -1.5f64.to_radians(),
        7.0f64.to_radians(),
    );
    Isometry3::from_parts(Translation3::new(0.5, -0.3, 0.05), rot)
}

/// Generates the scene pair, aligns it on the CPU and measures the error against the known motion.
///
/// Errors: none expected for the generated data; any [`crate::Error`] of the pipeline is passed on.
pub fn run_cpu() -> Result<NdtDemoReport> {
    run_on(None)
}

/// [`run_cpu`] with the derivatives on `gpu` ([`crate::ndt::align_clouds_gpu`]).
///
/// Errors: driver errors besides those of [`run_cpu`].
pub fn run_gpu(gpu: std::sync::Arc<crate::runtime::Gpu>) -> Result<NdtDemoReport> {
    run_on(Some(gpu))
}

fn run_on(gpu: Option<std::sync::Arc<crate::runtime::Gpu>>) -> Result<NdtDemoReport> {
    let t_true = demo_motion();
    let target = scene_cloud(11, POINTS_PER_CLOUD, &Isometry3::identity());
    let source = scene_cloud(22, POINTS_PER_CLOUD, &t_true.inverse());
    let target = voxel_grid_filter(&target, LEAF_M)?;
    let source = voxel_grid_filter(&source, LEAF_M)?;
    let start = std::time::Instant::now();
    let (init, params) = (Isometry3::identity(), NdtParams::default());
    let r = match gpu {
        Some(g) => crate::ndt::align_clouds_gpu(g, &target.points, &source.points, &init, &params)?,
        None => align_clouds(&target.points, &source.points, &init, &params)?,
    };
    let seconds = start.elapsed().as_secs_f64();
    let (translation_error_m, rotation_error_deg) = pose_error(&r.t_target_source, &t_true);
    Ok(NdtDemoReport {
        target_points: target.len(),
        source_points: source.len(),
        iterations: r.iterations,
        stop: r.stop,
        seconds,
        translation_error_m,
        rotation_error_deg,
        t_true,
        t_estimated: r.t_target_source,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn demo_recovers_the_known_motion() {
        let r = super::run_cpu().unwrap();
        assert_eq!(r.stop, crate::ndt::StopReason::Converged);
        eprintln!("{r:?}");
        assert!(
            r.translation_error_m < 0.02 && r.rotation_error_deg < 0.2,
            "{r:?}"
        );
        assert!(r.target_points > 10_000 && r.source_points > 10_000);
    }
}
