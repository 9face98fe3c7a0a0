//! NDT CPU benches on the real Velodyne pair (skipped when the data dir is missing).
//!
//! - `cpu/ndt/align/velodyne`: voxel map + Newton solve from the identity (0.1 m leaf, 1 m voxels,
//!   Direct7), the figure users compare with ndt_omp;
//! - `cpu/ndt/derivatives/{10k,69k}`: one score + gradient + Hessian evaluation at the solution;
//! - `cpu/ndt/voxel_map/69k` and `cpu/ndt/read/room_scan1` (binary_compressed PCD).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nalgebra::Isometry3;
use ptxflow::ndt::derivatives::linearize_points;
use ptxflow::ndt::*;
use std::path::PathBuf;
use std::time::Duration;

fn data_dir() -> Option<PathBuf> {
    let base = std::env::var_os("PTXFLOW_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")));
    let dir = base.join("pointclouds");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("ndt benches skipped: {} not found (set PTXFLOW_DATA_DIR)", dir.display());
        None
    }
}

fn benches(c: &mut Criterion) {
    let Some(dir) = data_dir() else { return };
    let read = |name: &str| read_cloud(dir.join(name)).expect("checked-in data");
    let target_raw = read("251370668.pcd");
    let source_raw = read("251371071.pcd");
    let target = voxel_grid_filter(&target_raw, 0.1).expect("leaf");
    let source = voxel_grid_filter(&source_raw, 0.1).expect("leaf");
    let params = NdtParams::default();

    let mut g = c.benchmark_group("cpu/ndt");
    g.sample_size(10).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));

    g.throughput(Throughput::Elements(source.len() as u64));
    g.bench_function("align/velodyne", |b| {
        b.iter(|| align_clouds(&target.points, &source.points, &Isometry3::identity(), &params).expect("align"))
    });

    let solved = align_clouds(&target.points, &source.points, &Isometry3::identity(), &params).expect("align");
    let map = VoxelMap::build(&target_raw.points, params.resolution_m).expect("map");
    let gauss = GaussConstants::new(params.resolution_m, params.outlier_ratio).expect("constants");
    let subset: Vec<[f32; 3]> = (0..10_000).map(|i| source.points[i * source.len() / 10_000]).collect();
    for (name, pts) in [("derivatives/10k", &subset[..]), ("derivatives/69k", &source_raw.points[..])] {
        g.throughput(Throughput::Elements(pts.len() as u64));
        g.bench_function(name, |b| b.iter(|| linearize_points(&map, pts, &solved.pose, params.search, gauss)));
    }

    g.throughput(Throughput::Elements(target_raw.len() as u64));
    g.bench_function("voxel_map/69k", |b| b.iter(|| VoxelMap::build(&target_raw.points, 1.0).expect("map")));

    let room = dir.join("room_scan1.pcd");
    g.throughput(Throughput::Bytes(std::fs::metadata(&room).map(|m| m.len()).unwrap_or(0)));
    g.bench_function("read/room_scan1", |b| b.iter(|| read_cloud(&room).expect("read")));
    g.finish();
}

criterion_group!(ndt, benches);
criterion_main!(ndt);
