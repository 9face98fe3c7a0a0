//! The batch device solve on the GPU (`PTXFLOW_NDT_BATCH_DEVICE`, `pipeline/batch`: every
//! round's solver steps in `ndt_batch_solve`, no host hand-over) against the host-solver
//! batch on the same pipeline.
//! - Synthetic batches of noisy planes (line search, plain capped Newton steps, starts that
//!   need the eigen path, one without overlap, 48 nearby starts), both lags: every alignment
//!   has the host path's stop reason, iterations and evaluations and a pose within 1 mm /
//!   0.01 deg.
//! - The Velodyne hypothesis batch (256 starts up to 1 m / 10 deg off, Direct7): there the
//!   solver's discrete decisions amplify rounding-level differences (the device's own sines
//!   and cosines, within an ulp, and its Jacobi eigen increments), and the host solver
//!   disagrees with itself as much when only the sums' last bits change (its lockstep and
//!   split modes); so the device must agree with it about as often (the criterion of
//!   `tests/ndt_gpu_align.rs` for the GPU against the CPU) and find the same best pose.
//!
//! Skips without a GPU; `PTXFLOW_SANITIZE=1` runs 24 Velodyne hypotheses on a thinned source
//! (where the host solver's two modes sum in the same blocks, so there is no spread to compare
//! with: that run checks the device batch's accesses, not its agreement) and the synthetic
//! cases in full.

mod common;
mod ndt_support;

use nalgebra::Isometry3;
use ndt_support::gpu_setup::{target_pipeline, thinned, SAME_DEG, SAME_M};
use ndt_support::sim::noisy_planes;
use ndt_support::*;
use ptxflow::ndt::*;

/// Indices of the alignments where `a` and `b` differ (stop reason, iterations, evaluations,
/// or a pose beyond 1 mm / 0.01 deg), and the largest pose difference (m, deg).
fn differences(a: &BatchReport, b: &BatchReport) -> (Vec<usize>, f64, f64) {
    let (mut max_t, mut max_r) = (0.0f64, 0.0f64);
    let mut which = Vec::new();
    for (k, (x, y)) in a.results.iter().zip(&b.results).enumerate() {
        let (dt, dr) = pose_error(&x.t_target_source, &y.t_target_source);
        max_t = max_t.max(dt);
        max_r = max_r.max(dr);
        let counts = (x.stop, x.iterations, x.evaluations) != (y.stop, y.iterations, y.evaluations);
        if counts || dt >= SAME_M || dr >= SAME_DEG {
            which.push(k);
        }
    }
    (which, max_t, max_r)
}

/// The device batch of `inits` on `p` (source 0 uploaded) with `lag` (see
/// `GpuDerivativePipeline::set_batch_device_lag`); prints what it did.
fn device(
    p: &mut GpuDerivativePipeline,
    inits: &[Isometry3<f64>],
    s: &SolverParams,
    lag: usize,
    what: &str,
) -> BatchReport {
    p.set_batch_device_solve(true).unwrap();
    p.set_batch_device_lag(lag);
    let dev = align_hypotheses(p, 0, inits, s).unwrap();
    p.set_batch_device_solve(false).unwrap();
    assert_eq!(
        p.batch_device_fallback(),
        None,
        "{what}: the device solved the batch"
    );
    let st = p.batch_device_stats().cloned().expect("a device batch ran");
    let converged = dev.results.iter().filter(|r| r.stop.converged()).count();
    eprintln!(
        "{what}: {} alignments, {converged} converged, device rounds {:?}, {} evaluations, {} eigen-path steps, {} handed back",
        inits.len(),
        st.rounds,
        st.evaluations,
        st.eigen_steps,
        st.handed_back
    );
    dev
}

/// Asserts that `dev` equals `host` for every alignment (stop, iterations, evaluations, pose
/// within 1 mm / 0.01 deg).
fn assert_equal(dev: &BatchReport, host: &BatchReport, what: &str) {
    let (which, t, r) = differences(dev, host);
    eprintln!(
        "{what}: {} differ from the host solver's, largest pose difference {t:.1e} m {r:.1e} deg",
        which.len()
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
    let s = &params.solver;
    p.set_batch_device_solve(false).unwrap();
    let host = align_hypotheses(&mut p, 0, &inits, s).unwrap();
    // The host solver's own spread: lockstep rounds sum some rounds' points in other blocks
    // (the sums' last bits), which moves the alignments that are sensitive to rounding.
    p.set_split(false).unwrap();
    let lockstep = align_hypotheses(&mut p, 0, &inits, s).unwrap();
    p.set_split(true).unwrap();
    let (spread, st, sr) = differences(&lockstep, &host);
    eprintln!(
        "Velodyne: host lockstep against host split: {} differ {spread:?}, largest pose difference {st:.1e} m {sr:.1e} deg",
        spread.len()
    );
    for (lag, groups) in [(1, 2), (0, 2), (1, 1), (1, 3)] {
        if sanitizing() && (lag, groups) != (1, 2) {
            continue;
        }
        p.set_batch_device_groups(groups);
        let what = format!("Velodyne, lag {lag}, {groups} chains");
        let dev = device(&mut p, &inits, s, lag, &what);
        let (which, t, r) = differences(&dev, &host);
        let outside: Vec<usize> = which
            .iter()
            .copied()
            .filter(|k| !spread.contains(k))
            .collect();
        eprintln!(
            "{what}: {} differ from the host solver's {which:?} ({} of them not in the host's spread: {outside:?}), largest pose difference {t:.1e} m {r:.1e} deg",
            which.len(),
            outside.len()
        );
        for &k in &which {
            let (d, h) = (&dev.results[k], &host.results[k]);
            let (dt, dr) = pose_error(&d.t_target_source, &h.t_target_source);
            eprintln!(
                "  {k}: device {:?} {} it {} ev, host {:?} {} it {} ev, {dt:.1e} m {dr:.1e} deg",
                d.stop, d.iterations, d.evaluations, h.stop, h.iterations, h.evaluations
            );
        }
        let (db, hb) = (dev.best_result().unwrap(), host.best_result().unwrap());
        let (bt, br) = pose_error(&db.t_target_source, &hb.t_target_source);
        eprintln!("{what}: best result {bt:.1e} m {br:.1e} deg from the host's");
        if sanitizing() {
            // The thinned source (about 1000 points: 8 blocks per request in every round of
            // both host modes) makes the host's lockstep and split batches equal bit for bit,
            // so there is no spread to compare with (the criterion failed there in
            // `gpu-results/s12/ndtb-3.log`); this run checks the device batch's memory and
            // shared-memory accesses only.
            continue;
        }
        // As the GPU against the CPU (`tests/ndt_gpu_align.rs`): the device batch must agree
        // with the host-solver batch about as often as the host solver agrees with itself
        // when only the sums' last bits change (59-64 against 65 of 256 on the H100,
        // `gpu-results/s12/ndtb-{2,3}.log`): at most twice as many disagreements, plus n / 16.
        assert!(
            which.len() <= 2 * spread.len() + n / 16,
            "{what}: {} differ, the host's own spread {}",
            which.len(),
            spread.len()
        );
        assert!(
            db.stop.converged() && bt < 0.01 && br < 0.1,
            "{what}: best results {bt} m {br} deg apart"
        );
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
    let plain = SolverParams {
        line_search: None,
        max_iterations: 4,
        ..base
    };
    let many: Vec<Isometry3<f64>> = (0..48)
        .map(|k| inits[k % 4] * Isometry3::translation(0.01 * k as f64, 0.0, 0.0))
        .collect();
    for (inits, s, what) in [
        (&inits[..], &base, "planes, line search"),
        (&inits[..], &plain, "planes, 4 plain Newton steps"),
        (&many[..], &base, "planes, 48 starts"),
    ] {
        p.set_batch_device_solve(false).unwrap();
        let host = align_hypotheses(&mut p, 0, inits, s).unwrap();
        for lag in [0, 1] {
            let what = format!("{what}, lag {lag}");
            let dev = device(&mut p, inits, s, lag, &what);
            assert_equal(&dev, &host, &what);
        }
    }
}
