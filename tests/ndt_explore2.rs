mod ndt_support;
use nalgebra::Isometry3;
use ndt_support::*;
use ptxflow::ndt::*;

#[test]
fn explore2() {
    let Some(dir) = pointclouds_dir() else { return };
    let q = cloud(&dir, "cupcl_test_Q.pcd");
    let p = cloud(&dir, "cupcl_test_P.pcd");
    let params = NdtParams { search: NeighbourSearch::Direct1, ..Default::default() };
    let r = align_clouds(&q.points, &p.points, &Isometry3::identity(), &params).unwrap();
    eprintln!("{}", r.stop);
}
