//! The seam between the Newton solver and whatever evaluates the NDT objective.
//!
//! The solver only ever asks: "for source cloud `s` at pose `p`, what are the score, its gradient
//! and Hessian, and how many points found a voxel?" ([`Linearize::linearize`]). The request is a
//! batch, so one implementation holding one target map and many source clouds (on a GPU: device
//! buffers uploaded once) can serve many alignments at once — [`crate::ndt::align_batch`] steps all
//! of them in lockstep and sends one batch per round. The method takes `&mut self` (device buffers,
//! streams, scratch space) and returns [`crate::Result`] so device failures propagate.
//!
//! [`CpuLinearizer`] is the reference implementation (rayon over points, f64).

use crate::ndt::derivatives::{linearize_points, GaussConstants};
use crate::ndt::pose::Pose6;
use crate::ndt::search::NeighbourSearch;
use crate::ndt::voxel_map::VoxelMap;
use crate::{Error, Result};
use nalgebra::{Matrix6, Vector6};

/// Objective at one pose: score (summed likelihood, maximised), its derivatives with respect to
/// the [`Pose6`] parameters, and how many source points were paired with at least one voxel.
#[derive(Clone, Debug, PartialEq)]
pub struct Linearization {
    /// `Σ −d1 e` over all point–voxel pairs (dimensionless, ≥ 0).
    pub score: f64,
    /// `∂score/∂p` (per metre for x, y, z; per radian for the angles).
    pub gradient: Vector6<f64>,
    /// `∂²score/∂p²`, symmetric.
    pub hessian: Matrix6<f64>,
    /// Source points with at least one paired voxel.
    pub correspondences: usize,
}

/// One evaluation asked of a [`Linearize`]: source cloud index and pose.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearizeRequest {
    /// Index of the source cloud (`0..source_count()`).
    pub source: usize,
    /// Pose `t_target_source` as the solver's 6-vector.
    pub pose: Pose6,
}

/// Evaluates the NDT objective against one target map for one or more source clouds.
pub trait Linearize {
    /// Number of source clouds this implementation holds.
    fn source_count(&self) -> usize;

    /// Number of points in source cloud `source` (the denominator of the per-point likelihood).
    fn source_len(&self, source: usize) -> usize;

    /// Evaluates every request and returns one [`Linearization`] per request, in order.
    ///
    /// Errors: [`Error::Input`] for a source index out of range; implementation-specific errors
    /// (a GPU implementation: driver and kernel failures).
    fn linearize(&mut self, requests: &[LinearizeRequest]) -> Result<Vec<Linearization>>;

    /// Two rounds in flight for a batch of `jobs` alignments (see [`SplitLinearize`]), when
    /// this implementation offers that for so many; `None` (the default) keeps one round at a
    /// time.
    fn split(&mut self, _jobs: usize) -> Option<&mut dyn SplitLinearize> {
        None
    }

    /// Called by [`crate::ndt::align_batch`] before the first lockstep round of `jobs`
    /// alignments (not for split batches), so an implementation can set up for them (the GPU
    /// pipeline starts its evaluation server for a single alignment). Default: nothing.
    fn start_alignment(&mut self, _jobs: usize) -> Result<()> {
        Ok(())
    }

    /// Called after the last lockstep round, also when a round failed (that round's error is
    /// the one reported). Default: nothing.
    fn finish_alignment(&mut self) -> Result<()> {
        Ok(())
    }

    /// Asked by [`crate::ndt::align_batch`] for a single alignment (source and settings
    /// already checked) before it runs the solver: an implementation that can run the whole
    /// solve itself (the GPU pipeline's device solver) returns the result the solver would
    /// give; `None` (the default) lets the solver run as usual.
    fn align_whole(
        &mut self,
        _source: usize,
        _init: &nalgebra::Isometry3<f64>,
        _params: &crate::ndt::params::SolverParams,
    ) -> Result<Option<crate::ndt::result::NdtResult>> {
        Ok(None)
    }

    /// Asked by [`crate::ndt::align_batch`] for a batch of more than one alignment (sources
    /// and settings already checked) before it runs the solver: an implementation that can run
    /// the solver itself (the GPU pipeline's batch device solve) returns one entry per job,
    /// `None` for a job it leaves to the solver; `None` (the default) lets the solver run
    /// the whole batch as usual.
    fn align_batch_whole(
        &mut self,
        _jobs: &[crate::ndt::solver::AlignJob],
        _params: &crate::ndt::params::SolverParams,
    ) -> Result<Option<Vec<Option<crate::ndt::result::NdtResult>>>> {
        Ok(None)
    }
}

/// An evaluator that keeps two groups' rounds in flight, so that the host updates one group's
/// solvers while the device evaluates the other's ([`crate::ndt::align_batch`] uses it when
/// [`Linearize::split`] offers it). Group 0 holds the first `ceil(jobs / 2)` alignments of the
/// batch, group 1 the rest; each group has at most one round in flight.
pub trait SplitLinearize {
    /// Starts evaluating `requests` for group `group` (0 or 1) and returns without waiting.
    fn submit(&mut self, group: usize, requests: &[LinearizeRequest]) -> Result<()>;

    /// Waits for group `group`'s round and returns one [`Linearization`] per request, in order.
    fn complete(&mut self, group: usize) -> Result<Vec<Linearization>>;

    /// Once at most this many alignments of the batch are unfinished, the solver runs them all
    /// as group 0, one round at a time (small rounds are bound by latency, so one launch beats
    /// two); `0` (the default): never. The solver never puts more than group 0's first
    /// `ceil(jobs / 2)` requests into one round.
    fn merge_tail(&self) -> usize {
        0
    }

    /// Called once the solver is done with the batch, finished or failed (the GPU pipeline
    /// orders its streams here).
    fn finish_split(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The CPU implementation: borrows the map and the source clouds.
#[derive(Clone, Debug)]
pub struct CpuLinearizer<'a> {
    map: &'a VoxelMap,
    sources: Vec<&'a [[f32; 3]]>,
    search: NeighbourSearch,
    gauss: GaussConstants,
}

impl<'a> CpuLinearizer<'a> {
    /// A linearizer for `sources` (points in metres, source frame) against `map`.
    ///
    /// Errors: [`Error::Input`] for an outlier ratio outside (0, 1).
    pub fn new(
        map: &'a VoxelMap,
        sources: Vec<&'a [[f32; 3]]>,
        search: NeighbourSearch,
        outlier_ratio: f64,
    ) -> Result<Self> {
        let gauss = GaussConstants::new(map.resolution_m(), outlier_ratio)?;
        Ok(CpuLinearizer {
            map,
            sources,
            search,
            gauss,
        })
    }

    /// The Gaussian constants in use.
    pub fn gauss(&self) -> GaussConstants {
        self.gauss
    }

    /// Evaluates one source at one pose (no batching, no `&mut`).
    pub fn eval(&self, source: usize, pose: &Pose6) -> Result<Linearization> {
        let points = self.sources.get(source).ok_or_else(|| {
            Error::input(format!(
                "source index {source} out of range ({} sources)",
                self.sources.len()
            ))
        })?;
        Ok(linearize_points(
            self.map,
            points,
            pose,
            self.search,
            self.gauss,
        ))
    }
}

impl Linearize for CpuLinearizer<'_> {
    fn source_count(&self) -> usize {
        self.sources.len()
    }

    fn source_len(&self, source: usize) -> usize {
        self.sources.get(source).map_or(0, |s| s.len())
    }

    fn linearize(&mut self, requests: &[LinearizeRequest]) -> Result<Vec<Linearization>> {
        requests
            .iter()
            .map(|r| self.eval(r.source, &r.pose))
            .collect()
    }
}
