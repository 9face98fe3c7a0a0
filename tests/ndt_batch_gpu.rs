//! The batch kernels on the GPU: the Velodyne hypothesis batch (Direct7) with the default batch
//! kernel (`ndt_derivatives_dense_cross7` since session 11: late loads, paired accumulators,
//! Direct7 probes at fixed offsets) must equal session 10's batch kernel (`PTXFLOW_NDT_LATE_LOADS=0
//! PTXFLOW_NDT_ACC_PAIRS=0 PTXFLOW_NDT_PROBES7=0`) bit for bit (poses, stop reasons, evaluations),
//! and so must the opt-in builds (late loads and paired accumulators with the generic probes,
//! wide records, two pairs per step): they change no arithmetic. Skips without a GPU;
//! `PTXFLOW_SANITIZE=1` runs 24 hypotheses against the reference only.

mod common;
mod ndt_support;

use nalgebra::Isometry3;
use ndt_support::*;
use ptxflow::ndt::*;

/// The switches of each configuration, set while its pipeline loads its kernels: session 10's
/// batch kernel first (the reference), then builds beside the default.
const CONFIGS: [&[(&str, &str)]; 4] = [
    &[
        ("PTXFLOW_NDT_LATE_LOADS", "0"),
        ("PTXFLOW_NDT_ACC_PAIRS", "0"),
        ("PTXFLOW_NDT_PROBES7", "0"),
    ],
    &[
        ("PTXFLOW_NDT_PROBES7", "0"),
        ("PTXFLOW_NDT_LATE_LOADS", "1"),
        ("PTXFLOW_NDT_ACC_PAIRS", "1"),
    ],
    &[("PTXFLOW_NDT_WIDE_RECORDS", "1")],
    &[("PTXFLOW_NDT_PAIR2", "1")],
];

#[test]
fn gpu_batch_kernels_equal_session_10s_bit_for_bit() {
    let Some(gpu) = common::gpu_or_skip("gpu_batch_kernels_equal_session_10s_bit_for_bit") else {
        return;
    };
    let Some(dir) = pointclouds_dir() else { return };
    let scene = velodyne_scene(&dir);
    let params = NdtParams::default();
    assert_eq!(params.search, NeighbourSearch::Direct7);
    // Under the sanitizers: fewer hypotheses (lockstep rounds) and only the reference.
    let n = if sanitizing() { 24 } else { 256 };
    let configs = if sanitizing() {
        &CONFIGS[..1]
    } else {
        &CONFIGS[..]
    };
    let inits = hypotheses(&Isometry3::identity(), n, 1.0, 10.0, 2024).unwrap();
    let run = |env: &[(&str, &str)]| {
        for (k, v) in env {
            std::env::set_var(k, v);
        }
        let mut p = target_pipeline(&gpu, &scene.map, scene.source.len(), params.search, n);
        for (k, _) in env {
            std::env::remove_var(k);
        }
        p.upload_source(&scene.source).unwrap();
        let r = align_hypotheses(&mut p, 0, &inits, &params.solver).unwrap();
        (r, p.counters())
    };
    let (want, base) = run(&[]);
    let evaluations: usize = want.results.iter().map(|r| r.evaluations).sum();
    eprintln!(
        "{n} hypotheses: {evaluations} evaluations in {} launches",
        base.launches
    );
    for env in configs {
        let (got, c) = run(env);
        assert_eq!(c.launches, base.launches, "{env:?}: launches");
        assert_eq!(got, want, "{env:?}: batch results bit for bit");
    }
}
