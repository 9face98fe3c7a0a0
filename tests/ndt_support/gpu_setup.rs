//! Shared set-up of the GPU NDT tests: pipelines, sanitizer-aware sizes and timeouts, and the
//! "same result" tolerance. (The GPU-or-skip preamble stays in each test: `common::gpu_or_skip`.)

use super::{sanitizing, Scene};
use ptxflow::ndt::{
    pose_error, GpuCapacity, GpuDerivativePipeline, NdtResult, NeighbourSearch, ServerTimeouts,
    VoxelMap,
};
use ptxflow::runtime::Gpu;
use std::sync::Arc;
use std::time::Duration;

/// Two results are "the same" within 1 mm ...
pub const SAME_M: f64 = 1e-3;
/// ... and 0.01°.
pub const SAME_DEG: f64 = 0.01;

/// `s` with its source thinned to every 16th point under the sanitizer (unchanged otherwise).
pub fn thinned(mut s: Scene) -> Scene {
    if sanitizing() {
        s.source = s.source.iter().step_by(16).copied().collect();
    }
    s
}

/// Server (and device-solver) timeouts, generous enough for compute-sanitizer's slowdown.
pub fn server_timeouts() -> ServerTimeouts {
    if sanitizing() {
        ServerTimeouts {
            answer: Duration::from_secs(120),
            idle: Duration::from_secs(60),
        }
    } else {
        ServerTimeouts {
            answer: Duration::from_secs(10),
            idle: Duration::from_secs(2),
        }
    }
}

/// A pipeline for `points` source points and `requests` requests with `map` uploaded.
pub fn target_pipeline(
    gpu: &Arc<Gpu>,
    map: &VoxelMap,
    points: usize,
    search: NeighbourSearch,
    requests: usize,
) -> GpuDerivativePipeline {
    let cap = GpuCapacity {
        points,
        voxels: map.len(),
        requests,
    };
    let mut p = GpuDerivativePipeline::new(gpu.clone(), cap, search, 0.55).unwrap();
    p.upload_target(map).unwrap();
    p
}

/// A one-request pipeline with `map` and `source` uploaded and [`server_timeouts`] set.
pub fn source_pipeline(
    gpu: &Arc<Gpu>,
    map: &VoxelMap,
    source: &[[f32; 3]],
    search: NeighbourSearch,
) -> GpuDerivativePipeline {
    let mut p = target_pipeline(gpu, map, source.len(), search, 1);
    p.upload_source(source).unwrap();
    p.set_server_timeouts(server_timeouts());
    p
}

/// Asserts `g` (from `who`, e.g. "GPU") has `c`'s (from `whom`) stop reason and a pose within
/// [`SAME_M`] / [`SAME_DEG`] of it.
pub fn assert_same(what: &str, who: &str, whom: &str, g: &NdtResult, c: &NdtResult) {
    let (dt, dr) = pose_error(&g.t_target_source, &c.t_target_source);
    assert_eq!(
        g.stop, c.stop,
        "{what}: stop reason ({who} {g:?}\n{whom} {c:?})"
    );
    assert!(
        dt < SAME_M && dr < SAME_DEG,
        "{what}: {who} and {whom} poses differ by {dt} m {dr} deg"
    );
}
