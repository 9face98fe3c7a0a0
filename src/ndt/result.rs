//! What an NDT alignment returns, and why it stopped.

use crate::ndt::linearize::Linearization;
use crate::ndt::pose::{pose_to_isometry, Pose6};
use nalgebra::{Isometry3, Matrix6, Vector6};

/// Why the Newton iteration stopped. Only [`StopReason::Converged`] means the pose is a
/// (local) optimum to within the epsilons; hitting the iteration cap is never called converged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// The Newton increment fell below both epsilons where the score's Hessian is negative
    /// definite (a proper local maximum of the score).
    Converged,
    /// The iteration cap was reached while the increment was still above the epsilons.
    MaxIterations,
    /// No source point found a voxel at the current pose (empty source or target, or no overlap).
    NoCorrespondences,
    /// The Hessian was zero or not finite, so no Newton step exists (e.g. every point is far from
    /// every voxel mean).
    SingularHessian,
    /// The line search could not move the pose by more than the epsilons (a seam of the
    /// piecewise-smooth score: points changing voxels) while the Newton increment was still above
    /// ten times the epsilons. The pose is the best found, but not a converged optimum.
    Stalled,
}

impl StopReason {
    /// True only for [`StopReason::Converged`].
    pub fn converged(self) -> bool {
        self == StopReason::Converged
    }

    /// Snake-case name for printing and JSON.
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Converged => "converged",
            StopReason::MaxIterations => "max_iterations",
            StopReason::NoCorrespondences => "no_correspondences",
            StopReason::SingularHessian => "singular_hessian",
            StopReason::Stalled => "stalled",
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The outcome of one alignment.
#[derive(Clone, Debug, PartialEq)]
pub struct NdtResult {
    /// The estimated transform from source to target frame.
    pub t_target_source: Isometry3<f64>,
    /// The same pose as the solver's 6-vector ([`crate::ndt::pose`]).
    pub pose: Pose6,
    /// Newton steps taken (pose updates).
    pub iterations: usize,
    /// Objective evaluations (linearizations), line-search trials included.
    pub evaluations: usize,
    /// Why the iteration stopped.
    pub stop: StopReason,
    /// Final score `Σ −d1 e` (higher is better).
    pub score: f64,
    /// Final score divided by the number of source points (PCL's "transformation probability").
    pub likelihood_per_point: f64,
    /// Source points with at least one voxel at the final pose.
    pub correspondences: usize,
    /// Points in the source cloud.
    pub source_points: usize,
    /// Gradient of the score at the final pose.
    pub gradient: Vector6<f64>,
    /// Hessian of the score at the final pose (negative definite at a proper optimum).
    pub hessian: Matrix6<f64>,
}

impl NdtResult {
    /// The result of a solve that stopped at `pose` for `stop`, `lin` being its linearization
    /// there over the `source_points` points of the source cloud.
    pub(crate) fn at(
        pose: Pose6,
        iterations: usize,
        evaluations: usize,
        stop: StopReason,
        lin: Linearization,
        source_points: usize,
    ) -> NdtResult {
        let n = source_points;
        NdtResult {
            t_target_source: pose_to_isometry(&pose),
            pose,
            iterations,
            evaluations,
            stop,
            score: lin.score,
            likelihood_per_point: if n > 0 { lin.score / n as f64 } else { 0.0 },
            correspondences: lin.correspondences,
            source_points: n,
            gradient: lin.gradient,
            hessian: lin.hessian,
        }
    }

    /// The final pose as a row-major 4×4 homogeneous matrix.
    pub fn matrix_row_major(&self) -> [[f64; 4]; 4] {
        let m = self.t_target_source.to_homogeneous();
        let mut a = [[0.0; 4]; 4];
        for (r, row) in a.iter_mut().enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                *v = m[(r, c)];
            }
        }
        a
    }
}
