mod ndt_support;
use nalgebra::{Isometry3, Translation3, UnitQuaternion};
use ndt_support::*;
use ptxflow::ndt::*;

#[test]
fn explore() {
    let Some(dir) = pointclouds_dir() else { return };
    let tgt = filtered(&dir, "251370668.pcd", 0.1);
    let src = filtered(&dir, "251371071.pcd", 0.1);
    let gt = matrix_file(&dir, "251370668_251371071_relative_fast_gicp.txt");
    let gt2 = matrix_file(&dir, "251370668_251371071_T_target_source_small_gicp.txt");
    eprintln!("gt vs gt2 {:?}", pose_error(&gt, &gt2));
    for search in NeighbourSearch::ALL {
        let params = NdtParams { search, ..Default::default() };
        let r = align_clouds(&src.points, &tgt.points, &Isometry3::identity(), &params).unwrap();
        let (et, er) = pose_error(&r.t_target_source, &gt.inverse());
        eprintln!("INV {search:?}: it {} ev {} stop {} err {:.4} m {:.4} deg", r.iterations, r.evaluations, r.stop, et, er);
        for (k, (t, ang)) in [([1.0f64, 0.0, 0.0], [0.0f64, 0.0, 10.0]), ([0.0, -0.7, 0.3], [5.0, -5.0, 8.0]), ([-0.7, 0.7, 0.0], [0.0, 0.0, -10.0]), ([0.5, 0.5, 0.5], [3.0, 3.0, -3.0])].iter().enumerate() {
            let init = Isometry3::from_parts(Translation3::new(t[0], t[1], t[2]), UnitQuaternion::from_euler_angles(ang[0].to_radians(), ang[1].to_radians(), ang[2].to_radians())) * gt;
            let t0 = std::time::Instant::now();
            let r = align_clouds(&tgt.points, &src.points, &init, &params).unwrap();
            let (et, er) = pose_error(&r.t_target_source, &gt);
            let (et2, er2) = pose_error(&r.t_target_source, &gt2);
            eprintln!("  pert{k} {search:?}: {:?} it {} ev {} stop {} err {:.4} m {:.4} deg (sg {:.4} {:.4})", t0.elapsed(), r.iterations, r.evaluations, r.stop, et, er, et2, er2);
        }
    }
    let b4 = cloud(&dir, "bun4.pcd");
    let b0 = cloud(&dir, "bun0.pcd");
    eprintln!("bunny initial mse {}", mean_sq_nn(&b0.points, &b4.points));
    for search in NeighbourSearch::ALL {
        let mut params = NdtParams { search, resolution_m: 0.025, ..Default::default() };
        params.solver.step_max = 0.05;
        params.solver.max_iterations = 50;
        let r = align_clouds(&b4.points, &b0.points, &Isometry3::identity(), &params).unwrap();
        let moved = b0.transformed(&r.t_target_source);
        eprintln!("bunny {search:?} it {} stop {} mse {} pose {:?}", r.iterations, r.stop, mean_sq_nn(&moved.points, &b4.points), r.pose);
    }
    let q = cloud(&dir, "cupcl_test_Q.pcd");
    let p = cloud(&dir, "cupcl_test_P.pcd");
    let m = VoxelMap::build(&q.points, 1.0).unwrap();
    eprintln!("cupcl map {:?}", m.stats());
    for search in NeighbourSearch::ALL {
        let params = NdtParams { search, ..Default::default() };
        let r = align_clouds(&q.points, &p.points, &Isometry3::identity(), &params).unwrap();
        eprintln!("cupcl {search:?} it {} stop {} score {} pose {:?}", r.iterations, r.stop, r.score, r.pose);
    }
    let r1 = cloud(&dir, "room_scan1.pcd");
    let r2 = cloud(&dir, "room_scan2.pcd");
    eprintln!("room {} {} {:?} dropped {}", r1.len(), r2.len(), r1.bounds(), r1.dropped_non_finite);
    let f2 = voxel_grid_filter(&r2, 0.2).unwrap();
    eprintln!("room2 filtered {}", f2.len());
}
