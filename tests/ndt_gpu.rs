//! The GPU derivative pipeline against the CPU reference on the real scans: score, gradient,
//! Hessian and correspondences at random poses in every search mode; traffic, allocation and
//! launch counters per iteration; device-memory footprint; both transfer modes; capacity growth,
//! request chunking and edge cases. Every test skips without a GPU (fails under
//! `PTXFLOW_REQUIRE_GPU=1`); `PTXFLOW_SANITIZE=1` shrinks the cases for compute-sanitizer.

mod common;
mod ndt_support;

use nalgebra::{Isometry3, Translation3, UnitQuaternion};
use ndt_support::*;
use ptxflow::ndt::*;
use ptxflow::rng::Rng;
use ptxflow::runtime::Gpu;
use std::sync::Arc;

/// The agreement bar (relative, score / gradient / Hessian).
const TOLERANCE: f64 = 1e-5;

fn pipeline(
    gpu: &Arc<Gpu>,
    scene: &Scene,
    search: NeighbourSearch,
    requests: usize,
) -> GpuDerivativePipeline {
    let cap = GpuCapacity {
        points: scene.source.len(),
        voxels: scene.map.len(),
        requests,
    };
    let mut p = GpuDerivativePipeline::new(gpu.clone(), cap, search, 0.55).unwrap();
    p.upload_target(&scene.map).unwrap();
    p.upload_source(&scene.source).unwrap();
    p
}

/// A pose near `center`: up to 0.5 m and 5 degrees away.
fn random_pose(rng: &mut Rng, center: &Isometry3<f64>) -> Pose6 {
    let mut u = |s: f64| rng.range(-s, s);
    let t = Translation3::new(u(0.5), u(0.5), u(0.1));
    let r = UnitQuaternion::from_euler_angles(u(0.087), u(0.087), u(0.087));
    isometry_to_pose(&(Isometry3::from_parts(t, r) * center))
}

/// Asserts agreement within [`TOLERANCE`] and equal counts; returns the three relative errors.
fn compare(what: &str, gpu: &Linearization, cpu: &Linearization) -> [f64; 3] {
    assert_eq!(
        gpu.correspondences, cpu.correspondences,
        "{what}: correspondences"
    );
    let e = [
        rel_diff(&[gpu.score], &[cpu.score]),
        rel_diff(gpu.gradient.as_slice(), cpu.gradient.as_slice()),
        rel_diff(gpu.hessian.as_slice(), cpu.hessian.as_slice()),
    ];
    assert!(
        e.iter().all(|&x| x <= TOLERANCE),
        "{what}: relative errors {e:?}\nGPU {gpu:?}\nCPU {cpu:?}"
    );
    assert_eq!(
        gpu.hessian,
        gpu.hessian.transpose(),
        "{what}: Hessian symmetric"
    );
    e
}

#[test]
fn gpu_derivatives_match_cpu_on_real_scans() {
    let Some(gpu) = common::gpu_or_skip("gpu_derivatives_match_cpu_on_real_scans") else {
        return;
    };
    let Some(dir) = pointclouds_dir() else { return };
    let poses = if sanitizing() { 2 } else { 8 };
    let mut rng = Rng::new(17);
    for scene in [velodyne_scene(&dir), room_scene(&dir)] {
        for search in NeighbourSearch::ALL {
            let mut p = pipeline(&gpu, &scene, search, poses);
            let cpu = CpuLinearizer::new(&scene.map, vec![&scene.source], search, 0.55).unwrap();
            let mut worst = [0f64; 3];
            let center = scene.truth.unwrap_or(scene.init);
            let mut batch = Vec::new();
            for k in 0..poses {
                let pose = random_pose(&mut rng, &center);
                let g = p.linearize_pose(0, &pose).unwrap();
                let c = cpu.eval(0, &pose).unwrap();
                let e = compare(&format!("{} {search:?} pose {k}", scene.name), &g, &c);
                worst = [0, 1, 2].map(|i| worst[i].max(e[i]));
                // Deterministic: the same launch gives the same bits.
                assert_eq!(
                    p.linearize_pose(0, &pose).unwrap(),
                    g,
                    "{} {search:?}: repeat differs",
                    scene.name
                );
                batch.push((LinearizeRequest { source: 0, pose }, c));
            }
            // All poses in one launch (a different grid, so a different summation order).
            let reqs: Vec<LinearizeRequest> = batch.iter().map(|b| b.0).collect();
            let before = p.counters().launches;
            let out = p.linearize(&reqs).unwrap();
            assert_eq!(
                p.counters().launches,
                before + 1,
                "one launch for the whole round"
            );
            for (o, (_, c)) in out.iter().zip(&batch) {
                compare(&format!("{} {search:?} batched", scene.name), o, c);
            }
            eprintln!(
                "{} {search:?}: {} points, {} voxels, worst relative error score {:.1e} gradient {:.1e} Hessian {:.1e}",
                scene.name,
                scene.source.len(),
                scene.map.len(),
                worst[0],
                worst[1],
                worst[2]
            );
        }
    }
}

/// The dense cell table finds exactly the hash's voxels in the same order: records are equal
/// bit for bit, in every search mode, single and batched.
#[test]
fn gpu_dense_cells_equal_the_hash_bit_for_bit() {
    let Some(gpu) = common::gpu_or_skip("gpu_dense_cells_equal_the_hash_bit_for_bit") else {
        return;
    };
    let Some(dir) = pointclouds_dir() else { return };
    let poses = if sanitizing() { 2 } else { 6 };
    let mut rng = Rng::new(23);
    for scene in [velodyne_scene(&dir), room_scene(&dir)] {
        for search in NeighbourSearch::ALL {
            let mut hash = pipeline(&gpu, &scene, search, poses);
            hash.set_voxel_lookup(VoxelLookup::Hash);
            hash.upload_target(&scene.map).unwrap();
            assert!(!hash.uses_dense_cells());
            let mut dense = pipeline(&gpu, &scene, search, poses);
            dense.set_voxel_lookup(VoxelLookup::Dense);
            dense.upload_target(&scene.map).unwrap();
            assert!(dense.uses_dense_cells(), "{}: small box", scene.name);
            let center = scene.truth.unwrap_or(scene.init);
            let reqs: Vec<LinearizeRequest> = (0..poses)
                .map(|_| LinearizeRequest {
                    source: 0,
                    pose: random_pose(&mut rng, &center),
                })
                .collect();
            assert_eq!(
                hash.linearize(&reqs).unwrap(),
                dense.linearize(&reqs).unwrap(),
                "{} {search:?} batched",
                scene.name
            );
            for r in &reqs {
                assert_eq!(
                    hash.linearize_pose(0, &r.pose).unwrap(),
                    dense.linearize_pose(0, &r.pose).unwrap(),
                    "{} {search:?} single",
                    scene.name
                );
            }
        }
    }
}

/// Sources stored sorted by map cell (and the dense table) still match the CPU reference.
#[test]
fn gpu_sorted_sources_with_dense_cells_match_cpu() {
    let Some(gpu) = common::gpu_or_skip("gpu_sorted_sources_with_dense_cells_match_cpu") else {
        return;
    };
    let Some(dir) = pointclouds_dir() else { return };
    let mut rng = Rng::new(29);
    for scene in [velodyne_scene(&dir), room_scene(&dir)] {
        for search in [NeighbourSearch::Direct7, NeighbourSearch::Radius] {
            let mut p = pipeline(&gpu, &scene, search, 1);
            p.set_voxel_lookup(VoxelLookup::Dense);
            p.upload_target(&scene.map).unwrap();
            p.set_sort_sources(true);
            p.upload_source(&scene.source).unwrap();
            let cpu = CpuLinearizer::new(&scene.map, vec![&scene.source], search, 0.55).unwrap();
            let center = scene.truth.unwrap_or(scene.init);
            for k in 0..if sanitizing() { 1 } else { 4 } {
                let pose = random_pose(&mut rng, &center);
                compare(
                    &format!("{} {search:?} sorted pose {k}", scene.name),
                    &p.linearize_pose(0, &pose).unwrap(),
                    &cpu.eval(0, &pose).unwrap(),
                );
            }
        }
    }
}

#[test]
fn gpu_large_clouds_keep_precision() {
    let Some(gpu) = common::gpu_or_skip("gpu_large_clouds_keep_precision") else {
        return;
    };
    let Some(dir) = pointclouds_dir() else { return };
    if sanitizing() {
        eprintln!("skipping the 112k and 1M point clouds under the sanitizer");
        return;
    }
    let room = room_scene(&dir);
    let raw = cloud(&dir, "room_scan2.pcd").points;
    // A million points: the raw room scan repeated with 2 cm jitter.
    let mut rng = Rng::new(5);
    let million: Vec<[f32; 3]> = (0..1_000_000)
        .map(|i| raw[i % raw.len()].map(|c| c + (0.02 * rng.normal()) as f32))
        .collect();
    for (name, pts) in [("room raw", &raw), ("1M", &million)] {
        let scene = Scene {
            name: "large",
            map: room.map.clone(),
            source: pts.clone(),
            init: room.init,
            truth: None,
        };
        let mut p = pipeline(&gpu, &scene, NeighbourSearch::Direct7, 1);
        let cpu =
            CpuLinearizer::new(&scene.map, vec![pts], NeighbourSearch::Direct7, 0.55).unwrap();
        let pose = isometry_to_pose(&room.init);
        let e = compare(
            name,
            &p.linearize_pose(0, &pose).unwrap(),
            &cpu.eval(0, &pose).unwrap(),
        );
        eprintln!(
            "{name} ({} points): relative error score {:.1e} gradient {:.1e} Hessian {:.1e}",
            pts.len(),
            e[0],
            e[1],
            e[2]
        );
    }
}

#[test]
fn gpu_iteration_traffic_allocations_and_footprint() {
    let Some(gpu) = common::gpu_or_skip("gpu_iteration_traffic_allocations_and_footprint") else {
        return;
    };
    let Some(dir) = pointclouds_dir() else { return };
    for scene in [velodyne_scene(&dir), room_scene(&dir)] {
        let mut p = pipeline(&gpu, &scene, NeighbourSearch::Direct7, 1);
        // What the pipeline must stay under twice of: source cloud (f32), the map's Gaussians
        // (mean and inverse covariance, f64) and its hash table.
        let data =
            12 * scene.source.len() + 96 * scene.map.len() + 16 * scene.map.hash().capacity();
        eprintln!(
            "{}: device footprint {} B for {} B of cloud, map and hash ({:.2}x); pinned host {} B",
            scene.name,
            p.device_bytes(),
            data,
            p.device_bytes() as f64 / data as f64,
            p.pinned_bytes()
        );
        assert!(p.device_bytes() < 2 * data);
        let mut mapped = Vec::new();
        for transfer in [Transfer::Mapped, Transfer::Copy] {
            p.set_transfer(transfer).unwrap();
            p.reset_counters();
            let iterations = 10;
            let mut rng = Rng::new(23);
            for k in 0..iterations {
                let pose = random_pose(&mut rng, &scene.init);
                let l = p.linearize_pose(0, &pose).unwrap();
                match transfer {
                    Transfer::Mapped => mapped.push(l),
                    // Same grid and order: the same bits through either path.
                    Transfer::Copy => assert_eq!(l, mapped[k], "{} copy vs mapped", scene.name),
                }
            }
            let c = p.counters();
            eprintln!(
                "{} {transfer:?}: {iterations} iterations: {c:?}",
                scene.name
            );
            let n = iterations as u64;
            assert_eq!((c.allocations, c.launches, c.requests), (0, n, n));
            assert!(c.bytes_up / n <= 100 && c.bytes_down / n <= 400, "{c:?}");
        }
    }
}

#[test]
fn gpu_capacity_grows_and_large_batches_are_split() {
    let Some(gpu) = common::gpu_or_skip("gpu_capacity_grows_and_large_batches_are_split") else {
        return;
    };
    let Some(dir) = pointclouds_dir() else { return };
    let scene = velodyne_scene(&dir);
    let tiny = GpuCapacity {
        points: 16,
        voxels: 4,
        requests: 2,
    };
    let mut p = GpuDerivativePipeline::new(gpu, tiny, NeighbourSearch::Direct7, 0.55).unwrap();
    let allocated = p.counters().allocations;
    p.upload_target(&scene.map).unwrap();
    let half: Vec<[f32; 3]> = scene.source.iter().copied().step_by(2).collect();
    p.upload_sources(&[&scene.source, &half]).unwrap();
    assert!(
        p.counters().allocations > allocated,
        "uploads beyond the capacity grow the buffers"
    );
    let cap = p.capacity();
    assert!(
        cap.points >= scene.source.len() + half.len()
            && cap.voxels >= scene.map.len()
            && cap.requests == 2
    );
    assert_eq!((p.source_count(), p.source_len(1)), (2, half.len()));
    let cpu = CpuLinearizer::new(
        &scene.map,
        vec![&scene.source, &half],
        NeighbourSearch::Direct7,
        0.55,
    )
    .unwrap();
    let mut rng = Rng::new(31);
    let reqs: Vec<LinearizeRequest> = (0..5)
        .map(|k| LinearizeRequest {
            source: k % 2,
            pose: random_pose(&mut rng, &scene.init),
        })
        .collect();
    p.reset_counters();
    let out = p.linearize(&reqs).unwrap();
    assert_eq!(
        p.counters().launches,
        3,
        "5 requests at capacity 2: three launches"
    );
    assert_eq!(p.counters().allocations, 0);
    for (r, o) in reqs.iter().zip(&out) {
        compare("chunked", o, &cpu.eval(r.source, &r.pose).unwrap());
    }
}

#[test]
fn gpu_edge_cases_match_cpu() {
    let Some(gpu) = common::gpu_or_skip("gpu_edge_cases_match_cpu") else {
        return;
    };
    let Some(dir) = pointclouds_dir() else { return };
    let scene = velodyne_scene(&dir);
    let cap = GpuCapacity {
        points: 64,
        voxels: scene.map.len(),
        requests: 4,
    };
    let mut p = GpuDerivativePipeline::new(gpu, cap, NeighbourSearch::Radius, 0.55).unwrap();
    let pose = Pose6::zeros();
    let e = p.linearize_pose(0, &pose).unwrap_err();
    assert!(e.to_string().contains("upload_target"), "{e}");
    p.upload_target(&scene.map).unwrap();
    // Far away, non-finite, and ordinary points side by side, and an empty cloud.
    let odd: Vec<[f32; 3]> = vec![
        [1e30, 0.0, 0.0],
        [f32::NAN, 1.0, 1.0],
        [f32::INFINITY, 0.0, 0.0],
        [-3e9, 5.0, 5.0],
        scene.source[0],
        scene.source[100],
    ];
    p.upload_sources(&[&odd, &[]]).unwrap();
    let cpu =
        CpuLinearizer::new(&scene.map, vec![&odd, &[]], NeighbourSearch::Radius, 0.55).unwrap();
    for source in 0..2 {
        let g = p.linearize_pose(source, &pose).unwrap();
        let c = cpu.eval(source, &pose).unwrap();
        eprintln!(
            "edge source {source}: GPU {} pairs, CPU {} pairs, score {} vs {}",
            g.correspondences, c.correspondences, g.score, c.score
        );
        assert_eq!(g.correspondences, c.correspondences);
        assert!(g.score.is_finite() && g.gradient.iter().all(|v| v.is_finite()));
        if c.score != 0.0 {
            compare("edge", &g, &c);
        } else {
            assert_eq!(g.score, 0.0);
        }
    }
    let e = p.linearize_pose(2, &pose).unwrap_err();
    assert!(matches!(e, ptxflow::Error::Input { .. }), "{e}");
    // The context is still healthy after the error paths.
    p.gpu().check_healthy().unwrap();
}
