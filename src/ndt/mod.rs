//! NDT (normal distributions transform) scan matching: CPU reference and GPU pipeline.
//!
//! Pipeline: read clouds ([`io::read_cloud`]), downsample ([`voxel_grid_filter`]), build the
//! target's [`VoxelMap`] (mean and regularised inverse covariance per voxel, GPU-friendly flat
//! arrays and hash), then Newton iterations ([`align`]) on Magnusson's score, whose gradient and
//! Hessian come through the [`Linearize`] seam: [`CpuLinearizer`] (rayon, f64) or
//! [`GpuDerivativePipeline`] ([`gpu`]: one kernel launch per round). Many alignments against one
//! map run in lockstep ([`align_batch`], [`align_hypotheses`]). Poses are `t_target_source:
//! Isometry3<f64>` (source points into the target frame); the solver's internal 6-vector is
//! described in [`pose`].
//!
//! [`align_clouds`] (CPU) and [`align_clouds_gpu`] do it all for one pair of clouds. Points are
//! `[f32; 3]` in metres; [`crate::points`] views a flat xyz slice as points without copying.

pub mod angles;
pub mod batch;
pub mod cloud;
pub mod demo;
pub mod derivatives;
pub mod gpu;
pub mod io;
pub mod line_search;
pub mod linearize;
pub mod newton_step;
pub mod params;
pub mod plan;
pub mod pose;
pub mod result;
pub mod search;
pub mod solver;
pub mod voxel_grid;
pub mod voxel_hash;
pub mod voxel_map;

pub use batch::{align_hypotheses, best_result, hypotheses, BatchReport};
pub use cloud::PointCloud;
pub use derivatives::GaussConstants;
pub use gpu::{
    align_clouds_gpu, GpuCapacity, GpuDerivativePipeline, PipelineCounters, ServerTimeouts,
    Transfer, VoxelLookup,
};
pub use io::read_cloud;
pub use linearize::{CpuLinearizer, Linearization, Linearize, LinearizeRequest, SplitLinearize};
pub use params::{NdtParams, SolverParams};
pub use plan::{align_clouds_on, CostModel, Estimate, NdtWork};
pub use pose::{isometry_to_pose, pose_error, pose_to_isometry, Pose6};
pub use result::{NdtResult, StopReason};
pub use search::NeighbourSearch;
pub use solver::{align, align_batch, AlignJob};
pub use voxel_grid::voxel_grid_filter;
pub use voxel_map::VoxelMap;

use crate::{Error, Result};
use nalgebra::Isometry3;

/// Validates `params` and the clouds and builds the target's voxel map: the shared front half of
/// [`align_clouds`] and the GPU's `align_clouds_gpu`.
pub(crate) fn checked_map(
    target: &[[f32; 3]],
    source: &[[f32; 3]],
    params: &NdtParams,
) -> Result<VoxelMap> {
    params.validate()?;
    if source.is_empty() {
        return Err(Error::input("NDT source cloud has no (finite) points"));
    }
    target_map(target, params)
}

/// Validates `params` and builds the target's voxel map at `params.resolution_m`, for callers
/// that align many sources against one map.
///
/// Errors: [`Error::Input`] for bad parameters or a target that yields no voxel with enough
/// points.
pub fn target_map(target: &[[f32; 3]], params: &NdtParams) -> Result<VoxelMap> {
    params.validate()?;
    let map = VoxelMap::build(target, params.resolution_m)?;
    if map.is_empty() {
        return Err(Error::input(format!(
            "NDT target ({} points) has no voxel of {} m with at least {} distinct points",
            target.len(),
            params.resolution_m,
            voxel_map::MIN_POINTS_PER_VOXEL
        )));
    }
    Ok(map)
}

/// Aligns `source` to `target` (points in metres) from `init` on the CPU.
///
/// Errors: [`Error::Input`] for bad parameters, an empty source, or a target that yields no voxel
/// with enough points at `params.resolution_m`. Partial or no overlap is not an error: the result's
/// [`StopReason`] and correspondence count say what happened.
pub fn align_clouds(
    target: &[[f32; 3]],
    source: &[[f32; 3]],
    init: &Isometry3<f64>,
    params: &NdtParams,
) -> Result<NdtResult> {
    let map = checked_map(target, source, params)?;
    let mut lin = CpuLinearizer::new(&map, vec![source], params.search, params.outlier_ratio)?;
    align(&mut lin, 0, init, &params.solver)
}
