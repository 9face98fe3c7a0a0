//! NDT on the GPU: [`GpuDerivativePipeline`] evaluates the objective (score, gradient, Hessian,
//! correspondences) of many (source cloud, pose) requests in one `ndt_derivatives` launch, and
//! serves the same Newton solver as the CPU through the [`crate::ndt::Linearize`] seam.
//!
//! Lifetime of the data: the pipeline allocates its device buffers once; [`upload_target`] sends
//! a voxel map (records and the CPU-built hash table) once per map, [`upload_source`] the source
//! cloud(s) once per alignment; each solver iteration then costs one launch and one
//! synchronization, with 80 bytes per request and 232 bytes per result crossing the bus through
//! mapped host memory (see [`pipeline`]).
//!
//! [`upload_target`]: GpuDerivativePipeline::upload_target
//! [`upload_source`]: GpuDerivativePipeline::upload_source

pub mod config;
pub mod mapped;
pub mod mixed;
pub mod pipeline;
pub mod records;
pub mod tuning;
pub mod variants;
pub mod wide;

pub use config::{GpuCapacity, PipelineCounters, Transfer, MAX_POINTS, MAX_REQUESTS_PER_LAUNCH};
pub use pipeline::{
    BatchSolveStats, BatchTiming, DeviceSolveStats, GpuDerivativePipeline, ServerTimeouts,
    BATCH_DEVICE_DEFAULT, DEVICE_SOLVE_DEFAULT, DEVICE_SOLVE_OPTS_DEFAULT,
};
pub use tuning::{DenseCells, VoxelLookup};

use crate::ndt::params::NdtParams;
use crate::ndt::result::NdtResult;
use crate::ndt::solver::align;
use crate::runtime::Gpu;
use crate::Result;
use nalgebra::Isometry3;
use std::sync::Arc;

/// Aligns `source` to `target` (points in metres) from `init` on `gpu`: the GPU counterpart of
/// [`crate::ndt::align_clouds`], with the same errors plus driver errors. The voxel map is built
/// on the CPU; the derivatives of every iteration are evaluated on the GPU.
pub fn align_clouds_gpu(
    gpu: Arc<Gpu>,
    target: &[[f32; 3]],
    source: &[[f32; 3]],
    init: &Isometry3<f64>,
    params: &NdtParams,
) -> Result<NdtResult> {
    let map = crate::ndt::checked_map(target, source, params)?;
    let capacity = GpuCapacity {
        points: source.len(),
        voxels: map.len(),
        requests: 1,
    };
    let mut pipeline =
        GpuDerivativePipeline::new(gpu, capacity, params.search, params.outlier_ratio)?;
    pipeline.upload_target(&map)?;
    pipeline.upload_source(source)?;
    align(&mut pipeline, 0, init, &params.solver)
}
