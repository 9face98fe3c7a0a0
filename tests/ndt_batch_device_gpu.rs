//! The batch device solve on the GPU (`PTXFLOW_NDT_BATCH_DEVICE`, `pipeline/batch`: every
//! round's solver steps in `ndt_batch_solve`, no host hand-over) against the host-solver
//! batch on the same pipeline: the Velodyne hypothesis batch (256 starts, Direct7, default
//! settings; one and two chains in flight) and a synthetic batch of noisy planes (plain capped
//! Newton steps, starts that need the eigen path, one without overlap). Every alignment must
//! have the host path's stop reason, iterations and evaluations and a pose within 1 mm /
//! 0.01 deg (the device's own sines and cosines, eigen increments and round grids move the
//! last bits only). Skips without a GPU; `PTXFLOW_SANITIZE=1` runs 24 hypotheses on a thinned
//! source.

mod common;
mod ndt_support;

use nalgebra::Isometry3;
use ndt_support::gpu_setup::{target_pipeline, thinned, SAME_DEG, SAME_M};
use ndt_support::sim::noisy_planes;
use ndt_support::*;
use ptxflow::ndt::*;

/// Host-solver batch and device batch of `inits` on `p` (source 0 uploaded); asserts the
/// equality described in the module docs and prints the largest differences.
fn compare(p: &mut GpuDerivativePipeline, inits: &[Isometry3<f64>], s: &SolverParams, what: &str) {
    p.set_batch_device_solve(false).unwrap();
    let host = align_hypotheses(p, 0, inits, s).unwrap();
    p.set_batch_device_solve(true).unwrap();
    let dev = align_hypotheses(p, 0, inits, s).unwrap();
    assert_eq!(
        p.batch_device_fallback(),
        None,
        "{what}: the device solved the batch"
    );
    let stats = p.batch_device_stats().cloned().expect("a device batch ran");
    let (mut max_t, mut max_r, mut iters, mut bits) = (0.0f64, 0.0f64, 0, 0);
    for (d, h) in dev.results.iter().zip(&host.results) {
        let (dt, dr) = pose_error(&d.t_target_source, &h.t_target_source);
        max_t = max_t.max(dt);
        max_r = max_r.max(dr);
        iters += usize::from((d.iterations, d.evaluations) != (h.iterations, h.evaluations));
        bits += usize::from(d != h);
    }
    let converged = dev.results.iter().filter(|r| r.stop.converged()).count();
    eprintln!(
        "{what}: {} alignments, {converged} converged, device rounds {:?}, {} evaluations, {} eigen-path steps, {} handed back; {iters} with other iterations/evaluations, {bits} not bit-equal, largest pose difference {max_t:.1e} m {max_r:.1e} deg",
        inits.len(),
        stats.rounds,
        stats.evaluations,
        stats.eigen_steps,
        stats.handed_back
    );
    for (k, (d, h)) in dev.results.iter().zip(&host.results).enumerate() {
        let (dt, dr) = pose_error(&d.t_target_source, &h.t_target_source);
        assert_eq!(d.stop, h.stop, "{what} {k}: stop reason");
        assert_eq!(
            (d.iterations, d.evaluations),
            (h.iterations, h.evaluations),
            "{what} {k}: iterations, evaluations"
        );
        assert!(
            dt < SAME_M && dr < SAME_DEG,
            "{what} {k}: poses differ by {dt} m {dr} deg"
        );
    }
}

#[test]
fn gpu_batch_device_solve_equals_the_host_solver_batch() {
    let Some(gpu) = common::gpu_or_skip("gpu_batch_device_solve_equals_the_host_solver_batch")
    else {
        return;
    };
    let Some(dir) = pointclouds_dir() else { return };
    let scene = thinned(velodyne_scene(&dir));
    let params = NdtParams::default();
    let n = if sanitizing() { 24 } else { 256 };
    let inits = hypotheses(&Isometry3::identity(), n, 1.0, 10.0, 2024).unwrap();
    let mut p = target_pipeline(&gpu, &scene.map, scene.source.len(), params.search, n);
    p.upload_source(&scene.source).unwrap();
    compare(&mut p, &inits, &params.solver, "Velodyne, two chains");
    if !sanitizing() {
        p.set_batch_device_groups(1);
        compare(&mut p, &inits, &params.solver, "Velodyne, one chain");
    }
}

#[test]
fn gpu_batch_device_solve_synthetic_cases() {
    let Some(gpu) = common::gpu_or_skip("gpu_batch_device_solve_synthetic_cases") else {
        return;
    };
    let target = noisy_planes(20_000, 1, 3, 1.0, 2.0);
    let map = VoxelMap::build(&target, 1.0).unwrap();
    let source = noisy_planes(4000, 2, 3, 1.0, 2.0);
    let mut p = target_pipeline(&gpu, &map, source.len(), NeighbourSearch::Direct7, 64);
    p.upload_source(&source).unwrap();
    let starts = [
        Pose6::new(0.1, -0.05, 0.02, 0.0, 0.0, 0.01),
        Pose6::new(0.6, -0.4, 0.3, 0.05, -0.04, 0.2),
        Pose6::new(-0.8, 0.5, -0.2, -0.1, 0.08, -0.3),
        Pose6::new(0.9, 0.9, 0.4, 0.15, 0.1, 0.4),
        Pose6::new(50.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    ];
    let inits: Vec<Isometry3<f64>> = starts.iter().map(pose_to_isometry).collect();
    let base = SolverParams::default();
    compare(&mut p, &inits, &base, "planes, line search");
    let plain = SolverParams {
        line_search: None,
        max_iterations: 4,
        ..base
    };
    compare(&mut p, &inits, &plain, "planes, 4 plain Newton steps");
    let many: Vec<Isometry3<f64>> = (0..48)
        .map(|k| inits[k % 4] * Isometry3::translation(0.01 * k as f64, 0.0, 0.0))
        .collect();
    compare(&mut p, &many, &base, "planes, 48 starts");
}
