//! Align two point clouds with NDT: `cargo run --release --example ndt_align [TARGET SOURCE]`.
//!
//! Without arguments it aligns the Velodyne pair in `$PTXFLOW_DATA_DIR/pointclouds` (default
//! `../shared/data`) and compares the result with the pair's published relative pose. Runs on the
//! GPU when there is one, else on the CPU (same maths, same result to within the tolerances).

use nalgebra::{Isometry3, Matrix3, Matrix4, Rotation3, Translation3, UnitQuaternion};
use ptxflow::ndt::{
    align_clouds, align_clouds_gpu, pose_error, read_cloud, voxel_grid_filter, NdtParams,
};
use ptxflow::runtime::Gpu;
use std::path::PathBuf;

fn main() -> ptxflow::Result<()> {
    let data = std::env::var_os("PTXFLOW_DATA_DIR").map_or("../shared/data".into(), PathBuf::from);
    let dir = data.join("pointclouds");
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let (given, target_path, source_path) = match (args.next(), args.next()) {
        (Some(t), Some(s)) => (true, t, s),
        _ => (false, dir.join("251370668.pcd"), dir.join("251371071.pcd")),
    };

    // Read (PCD or PLY, points in metres), then thin both clouds to one point per 10 cm cube.
    let target = voxel_grid_filter(&read_cloud(&target_path)?, 0.1)?;
    let source = voxel_grid_filter(&read_cloud(&source_path)?, 0.1)?;
    let params = NdtParams::default(); // 1 m voxels, direct7 search, at most 35 Newton steps
    let init = Isometry3::identity();

    let start = std::time::Instant::now();
    let (device, result) = match Gpu::open_default() {
        Ok(gpu) => (
            "gpu",
            align_clouds_gpu(gpu, &target.points, &source.points, &init, &params)?,
        ),
        Err(e) if e.is_no_device() => {
            eprintln!("{e}: aligning on the CPU");
            (
                "cpu",
                align_clouds(&target.points, &source.points, &init, &params)?,
            )
        }
        Err(e) => return Err(e),
    };
    println!(
        "{} -> {} ({} / {} points after the 0.1 m filter) on the {device} in {:.1} ms",
        source_path.display(),
        target_path.display(),
        source.len(),
        target.len(),
        start.elapsed().as_secs_f64() * 1e3
    );
    println!(
        "{} after {} iterations, score {:.1}, {} of {} points matched; T_target_source:",
        result.stop, result.iterations, result.score, result.correspondences, result.source_points
    );
    for row in result.matrix_row_major() {
        println!(
            "  {:>10.6} {:>10.6} {:>10.6} {:>10.6}",
            row[0], row[1], row[2], row[3]
        );
    }

    // The default pair ships with a reference pose (fast_gicp); report how far NDT lands from it.
    let truth = std::fs::read_to_string(dir.join("251370668_251371071_relative_fast_gicp.txt"));
    if let (false, Ok(text)) = (given, truth) {
        let v: Vec<f64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        if v.len() == 16 {
            let m = Matrix4::from_row_slice(&v);
            let r: Matrix3<f64> = m.fixed_view::<3, 3>(0, 0).into();
            let truth = Isometry3::from_parts(
                Translation3::new(m[(0, 3)], m[(1, 3)], m[(2, 3)]),
                UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix(&r)),
            );
            let (dt, dr) = pose_error(&result.t_target_source, &truth);
            println!("versus the reference pose: {dt:.3} m, {dr:.3} deg");
        }
    }
    Ok(())
}
