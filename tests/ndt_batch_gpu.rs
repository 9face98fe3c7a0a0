//! The batch kernel's memory-access build options on the GPU (`PTXFLOW_NDT_WIDE_RECORDS`:
//! padded voxel records read with `v2` loads; `PTXFLOW_NDT_ACC_PAIRS`: shared accumulators in
//! pairs; `PTXFLOW_NDT_LATE_LOADS`: per-request vectors read where used; `PTXFLOW_NDT_PROBES7`:
//! Direct7 probes at fixed offsets): the Velodyne hypothesis batch (Direct7) must equal the default batch kernel's bit for bit
//! (poses, stop reasons, evaluations), since only loads and stores change. Skips without a
//! GPU; `PTXFLOW_SANITIZE=1` shrinks the batch.

mod common;
mod ndt_support;

use nalgebra::Isometry3;
use ndt_support::*;
use ptxflow::ndt::*;

/// The switches of each configuration, set while its pipeline loads its kernels.
const CONFIGS: [&[(&str, &str)]; 5] = [
    &[("PTXFLOW_NDT_WIDE_RECORDS", "1")],
    &[("PTXFLOW_NDT_ACC_PAIRS", "1")],
    &[("PTXFLOW_NDT_LATE_LOADS", "1")],
    &[
        ("PTXFLOW_NDT_LATE_LOADS", "1"),
        ("PTXFLOW_NDT_PROBES7", "1"),
    ],
    &[
        ("PTXFLOW_NDT_WIDE_RECORDS", "1"),
        ("PTXFLOW_NDT_ACC_PAIRS", "1"),
        ("PTXFLOW_NDT_LATE_LOADS", "1"),
        ("PTXFLOW_NDT_PROBES7", "1"),
    ],
];

#[test]
fn gpu_batch_with_wide_accesses_equals_the_default_batch() {
    let Some(gpu) = common::gpu_or_skip("gpu_batch_with_wide_accesses_equals_the_default_batch")
    else {
        return;
    };
    let Some(dir) = pointclouds_dir() else { return };
    let scene = velodyne_scene(&dir);
    let params = NdtParams::default();
    let n = if sanitizing() { 64 } else { 256 };
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
    for env in CONFIGS {
        let (got, c) = run(env);
        assert_eq!(c.launches, base.launches, "{env:?}: launches");
        assert_eq!(got, want, "{env:?}: batch results bit for bit");
    }
}
